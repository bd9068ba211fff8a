package proc

import (
	"bufio"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestKillsOnlyWhatIsStillUnder: KillUnder and KillDescendants signal a
// process seen under pid only if it is still under pid when the signal goes.
// One that left meanwhile (its parent died and it went to another reaper;
// a recycled pid, another user's process by then, is the same case, which
// a test cannot bring about) is not signalled: the agent, root, would
// otherwise kill whatever holds that pid by then. One still under pid is.
func TestKillsOnlyWhatIsStillUnder(t *testing.T) {
	t.Parallel()
	if !hasProc {
		t.Skip("no /proc")
	}
	for _, tc := range []struct {
		name string
		kill func(pid int, sig syscall.Signal, looked func()) int
		// wantD: D (in pid's group, still under it) is signalled.
		wantD bool
	}{
		{"KillUnder", killUnder, true},
		{"KillDescendants", killDescendants, false}, // D is KillGroup's
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, pids := leavingTree(t)
			b, c, d := pids["B"], pids["C"], pids["D"]
			cStart, _ := StartTime(c)
			dStart, _ := StartTime(d)
			n := tc.kill(p, syscall.SIGKILL, func() {
				// After the look: B dies, and C goes to another reaper.
				_ = syscall.Kill(b, syscall.SIGKILL)
				if !WaitGone(10*time.Second, func() bool { pp := Parent(c); return pp != b && pp != 0 }) {
					t.Errorf("C %d still B's child after B was killed", c)
				}
			})
			if want := map[bool]int{true: 1}[tc.wantD]; n != want {
				t.Errorf("signalled %d live processes, want %d", n, want)
			}
			if tc.wantD {
				if !WaitGone(10*time.Second, func() bool { return !Alive(d, dStart) || isZombie(d) }) {
					t.Errorf("D %d, still under %d, outlived the kill", d, p)
				}
			} else if !Alive(d, dStart) {
				t.Errorf("D %d, in %d's group, was signalled", d, p)
			}
			if !Alive(c, cStart) {
				t.Errorf("C %d, no longer under %d when signalled, was killed", c, p)
			}
		})
	}
}

// leavingTree starts P, a shell leading a session of its own, running D
// (in its group) and B, a shell in a session of its own running C, and
// returns P's pid and B's, C's and D's, C's once it is B's child.
func leavingTree(t *testing.T) (int, map[string]int) {
	t.Helper()
	p := exec.Command("sh", "-c", `sleep 1000 & echo "D $!"; setsid sh -c 'sleep 1000 & echo "C $!"; wait' & echo "B $!"; wait`)
	p.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	out, err := p.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	pids := map[string]int{}
	t.Cleanup(func() {
		_ = syscall.Kill(-p.Process.Pid, syscall.SIGKILL)
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		_ = p.Wait()
	})
	r := bufio.NewReader(out)
	for len(pids) < 3 {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("the shell's pids: %v (got %v)", err, pids)
		}
		name, pid, _ := strings.Cut(strings.TrimSpace(line), " ")
		if pids[name], err = strconv.Atoi(pid); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
	}
	if !WaitGone(10*time.Second, func() bool { return Parent(pids["C"]) == pids["B"] }) {
		t.Fatalf("C %d is not B %d's child", pids["C"], pids["B"])
	}
	return p.Process.Pid, pids
}

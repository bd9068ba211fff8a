package proc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/testkit/stall"
)

// TestLookByEnvOfGivesUpAStalledRead: a process of the uid looked for
// whose environment read blocks (a real one, holding its memory map lock:
// stall.Start) does not hold the look up. The look finds the process carrying the entry within its
// bound, and says the stalled one could not be read; the next look, while
// that read is still stuck, does not wait on it again.
func TestLookByEnvOfGivesUpAStalledRead(t *testing.T) {
	t.Parallel()
	if !hasProc {
		t.Skip("needs /proc")
	}
	kv := "LOOM_PROC_TEST=" + t.Name()
	stalled := stall.Start(t, kv)
	cmd := exec.Command("/bin/sleep", "60")
	cmd.Env = []string{"PATH=/usr/bin:/bin", kv}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	mine := cmd.Process.Pid
	t.Cleanup(func() { _ = KillGroup(mine, syscall.SIGKILL); _ = cmd.Wait() })
	uid := uint32(os.Geteuid())

	look := func() (EnvLook, time.Duration) {
		t.Helper()
		var got EnvLook
		took := doneWithin(t, lookBound+10*time.Second, fmt.Sprintf("LookByEnvOf(uid %d), on pid %d's environment read,", uid, stalled),
			func() { got = LookByEnvOf(kv, uid) })
		return got, took
	}
	got, took := look()
	t.Logf("first look: %v, found %v, unread %v", took, got.Found, got.Unread)
	if !slices.Contains(got.Found, mine) || slices.Contains(got.Found, stalled) {
		t.Fatalf("LookByEnvOf found %v, want %d (which holds %s) and not %d (unread)", got.Found, mine, kv, stalled)
	}
	if !slices.Contains(got.Unread, stalled) {
		t.Fatalf("LookByEnvOf unread %v, want %d (whose environment read blocks) among them", got.Unread, stalled)
	}
	// Reads of it given up and still blocked: the first look's, and any
	// a parallel test's look (every test here runs as one uid, and reads
	// every process of it) started before the first was given up.
	givenUp := func() int {
		stuck.Lock()
		defer stuck.Unlock()
		n := 0
		for k, c := range stuck.keys {
			if k.pid == stalled {
				n += c
			}
		}
		return n
	}
	before := givenUp()
	if before < 1 {
		t.Fatalf("no read of pid %d given up after the first look", stalled)
	}
	got, took = look()
	t.Logf("second look: %v, found %v, unread %v", took, got.Found, got.Unread)
	if !slices.Contains(got.Found, mine) || !slices.Contains(got.Unread, stalled) {
		t.Fatalf("second LookByEnvOf = %+v, want %d found and %d unread", got, mine, stalled)
	}
	// The second look tried none: no read of it is given up anew.
	if after := givenUp(); after != before {
		t.Fatalf("%d reads of pid %d given up and still blocked, %d before the second look: it read it again, though an earlier read was still blocked", after, stalled, before)
	}
}

// TestGroupUsageGivesUpAStalledRead: a process of a sampled group whose
// smaps_rollup read blocks (a real one, holding its memory map lock:
// stall.Start) does not hold up the sample (the agent's progress look,
// whose memory limit and sstat figures come from it). The sample ends
// within its bound and counts the process from its stat, its PSS taken to
// be its RSS; the group's other member is read as usual; the next sample,
// while the first read is still stuck, does not wait on it again.
func TestGroupUsageGivesUpAStalledRead(t *testing.T) {
	t.Parallel()
	if !hasProc {
		t.Skip("needs /proc")
	}
	stalled := stall.Start(t) // leads a group of its own
	cmd := exec.Command("/bin/sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: stalled} // a member of its group
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	sample := func() (Usage, time.Duration) {
		t.Helper()
		var got Usage
		took := doneWithin(t, lookBound+10*time.Second, fmt.Sprintf("GroupUsage of group %d, on its smaps_rollup read,", stalled),
			func() { got = GroupUsage(map[int]bool{stalled: true}, true)[stalled] })
		return got, took
	}
	for i := range 2 {
		got, took := sample()
		t.Logf("sample %d: %v, %+v", i+1, took, got)
		if took > lookBound+2*time.Second {
			t.Errorf("sample %d took %v, want within its bound (%v)", i+1, took, lookBound)
		}
		if got.Processes != 2 || got.Unread != 1 {
			t.Fatalf("sample %d = %+v, want 2 processes (pid %d and the sleep %d), 1 unread", i+1, got, stalled, cmd.Process.Pid)
		}
		// The stalled one's PSS is taken to be its RSS (a Go program's:
		// megabytes), the sleep's is read (a few hundred KiB): at most the
		// group's RSS, and at least half the stalled one's (which a
		// sample that left it out, or took its PSS for 0, falls short of).
		s, ok := sampleStat(stalled)
		if !ok || got.PSS > got.RSS || got.PSS < s.rss/2 {
			t.Fatalf("sample %d: PSS %d, want at most the group's RSS %d and at least half pid %d's RSS %d", i+1, got.PSS, got.RSS, stalled, s.rss)
		}
	}
	stuck.Lock()
	given := 0
	for k, n := range stuck.keys {
		if k.pid == stalled {
			given += n
		}
	}
	stuck.Unlock()
	if given != 1 {
		t.Fatalf("%d reads of pid %d given up and still blocked, want 1: the second sample read it again, though the first's read was still blocked", given, stalled)
	}
}

// TestStalledUIDLeavesOthersRead: a uid whose processes have spent its
// budget of blocked reads (a real stalled process of its own, stall.StartAs,
// with the uid's cap lowered to 1 for the test rather than 16 such
// processes started) has its other processes left unread, and no other
// uid's: another user's process is still read, by a usage sample (its PSS
// read, not taken for its RSS) and by a look at environments. With one
// budget for the whole program, one user's stalled processes would leave
// every user's unread.
func TestStalledUIDLeavesOthersRead(t *testing.T) {
	t.Parallel()
	if !hasProc {
		t.Skip("needs /proc")
	}
	// Uids of this test's own: no other test's reads are charged to
	// hostile, whose cap is lowered, and no other test's process of other
	// is stalled, which the look for other's would find unread: not 65534
	// (nobody), whose stalled process libs/testkit/stall's tests start
	// while this package's run, in make test. Neither needs a name here.
	const hostile, other = 65533, 65530
	stuck.Lock()
	if stuck.capOf == nil {
		stuck.capOf = map[int64]int{}
	}
	stuck.capOf[hostile] = 1
	stuck.Unlock()
	t.Cleanup(func() { stuck.Lock(); delete(stuck.capOf, hostile); stuck.Unlock() })

	kv := "LOOM_PROC_TEST=" + t.Name()
	stalled := stall.StartAs(t, hostile, kv) // leads a group of its own
	sleepAs := func(uid uint32) int {
		t.Helper()
		cmd := exec.Command("/bin/sleep", "60")
		cmd.Env = []string{"PATH=/usr/bin:/bin", kv}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd.Process.Pid
	}
	mine, theirs := sleepAs(hostile), sleepAs(other) // each leads a group of its own

	bounded := func(what string, f func()) {
		t.Helper()
		doneWithin(t, lookBound+10*time.Second, fmt.Sprintf("%s, on pid %d's read,", what, stalled), f)
	}
	// hostile spends its budget: the stalled process's read is given up
	// and stays blocked.
	var got map[int]Usage
	bounded("GroupUsage of the stalled group", func() { got = GroupUsage(map[int]bool{stalled: true}, true) })
	if u := got[stalled]; u.Processes != 1 || u.Unread != 1 {
		t.Fatalf("sample of pid %d's group = %+v, want 1 process, unread", stalled, u)
	}
	stuck.Lock()
	spent := stuck.uids[hostile]
	stuck.Unlock()
	if spent != 1 {
		t.Fatalf("uid %d has %d reads in flight, want 1 (pid %d's, given up)", hostile, spent, stalled)
	}

	bounded("GroupUsage of the other groups", func() { got = GroupUsage(map[int]bool{mine: true, theirs: true}, true) })
	t.Logf("hostile's sleep %d: %+v; other's sleep %d: %+v", mine, got[mine], theirs, got[theirs])
	if u := got[theirs]; u.Processes != 1 || u.Unread != 0 || u.PSS <= 0 || u.PSS >= u.RSS {
		t.Fatalf("sample of uid %d's pid %d = %+v, want it read (its PSS read, below its RSS): uid %d's stalled reads spent its budget",
			other, theirs, u, hostile)
	}
	if u := got[mine]; u.Processes != 1 || u.Unread != 1 || u.PSS != u.RSS {
		t.Fatalf("sample of uid %d's pid %d = %+v, want it unread (its budget spent), its PSS its RSS", hostile, mine, u)
	}

	var look EnvLook
	bounded("LookByEnvOf(other)", func() { look = LookByEnvOf(kv, other) })
	if !slices.Equal(look.Found, []int{theirs}) || len(look.Unread) != 0 {
		t.Fatalf("LookByEnvOf(uid %d) = %+v, want %d found, none unread", other, look, theirs)
	}
	bounded("LookByEnvOf(hostile)", func() { look = LookByEnvOf(kv, hostile) })
	slices.Sort(look.Unread)
	if len(look.Found) != 0 || !slices.Equal(look.Unread, []int{min(stalled, mine), max(stalled, mine)}) {
		t.Fatalf("LookByEnvOf(uid %d) = %+v, want none found, %d and %d unread", hostile, look, stalled, mine)
	}
}

// TestStalledUIDSpendsOnlyItsOwnWait: in one usage sample, a uid whose
// processes' reads block spends its own share of the sample's wait
// (lookBound), not another uid's. Enough stalled processes of hostile
// (each read given up after readWait) to use lookBound up, sampled with
// another user's process after them (a higher pid: /proc is walked in pid
// order), leave that process read: its PSS read, below its RSS. With one
// deadline for the whole sample, its read is not tried (PSS taken to be
// RSS), which judges another user's step's memory limit by its RSS.
func TestStalledUIDSpendsOnlyItsOwnWait(t *testing.T) {
	t.Parallel()
	if !hasProc {
		t.Skip("needs /proc")
	}
	// Uids of this test's own (no other test's reads are charged to them).
	const hostile, other = 65531, 65532
	n := int(lookBound/readWait) + 2 // past the sample's whole wait
	groups := map[int]bool{}
	last := 0
	for range n {
		pid := stall.StartAs(t, hostile) // leads a group of its own
		groups[pid] = true
		last = max(last, pid)
	}
	theirs := 0
	for range 3 { // pids wrap at pid_max: one past every stalled pid
		cmd := exec.Command("/bin/sleep", "60")
		cmd.Env = []string{"PATH=/usr/bin:/bin"}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: &syscall.Credential{Uid: other, Gid: other}}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		if cmd.Process.Pid > last {
			theirs = cmd.Process.Pid
			break
		}
	}
	if theirs == 0 {
		t.Skipf("no pid above the stalled ones' (%d): pids wrapped", last)
	}
	groups[theirs] = true

	var got map[int]Usage
	took := doneWithin(t, time.Duration(n)*readWait+10*time.Second, "GroupUsage, on a stalled read,", func() { got = GroupUsage(groups, true) })
	unread := 0
	for pid := range groups {
		if pid != theirs {
			unread += got[pid].Unread
		}
	}
	t.Logf("sample: %v, %d of uid %d's %d stalled processes unread; uid %d's pid %d: %+v", took, unread, hostile, n, other, theirs, got[theirs])
	if unread != n {
		t.Fatalf("%d of uid %d's %d stalled processes unread, want all", unread, hostile, n)
	}
	if u := got[theirs]; u.Processes != 1 || u.Unread != 0 || u.PSS <= 0 || u.PSS >= u.RSS {
		t.Fatalf("sample of uid %d's pid %d = %+v, want it read (its PSS read, below its RSS): uid %d's stalled reads spent its wait", other, theirs, u, hostile)
	}
}

// TestConcurrentReadsOfAStalledProcessBlockOne: reads of one process made
// at once (concurrent looks or samples: an agent's restart beside its
// progress look) are made one at a time. Of a stalled process (stall.Start)
// one read is given up and stays blocked, with its thread, not one for
// each reader: both are given up within their wait, and the process has
// one read left blocked. Of a process that is not stalled, every reader
// gets its environment: one that waited for another's read then reads.
func TestConcurrentReadsOfAStalledProcessBlockOne(t *testing.T) {
	t.Parallel()
	if !hasProc {
		t.Skip("needs /proc")
	}
	kv := "LOOM_PROC_TEST=" + t.Name()
	stalled := stall.Start(t)
	cmd := exec.Command("/bin/sleep", "60")
	cmd.Env = []string{"PATH=/usr/bin:/bin", kv}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	// readAll reads pid's environment from n goroutines let go at once,
	// and returns what each got.
	readAll := func(pid, n int) (key stuckKey, got []error, envs [][]byte) {
		t.Helper()
		dir, err := os.OpenRoot("/proc/" + strconv.Itoa(pid))
		if err != nil {
			t.Fatal(err)
		}
		defer dir.Close()
		start, ok := startOf(statFieldsIn(dir))
		if !ok {
			t.Fatalf("no start time for pid %d", pid)
		}
		key, uid := stuckKey{pid, start}, ownerIn(dir)
		got, envs = make([]error, n), make([][]byte, n)
		var wg sync.WaitGroup
		go1 := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-go1
				envs[i], got[i] = readBounded(dir, "environ", key, uid, time.Now().Add(lookBound))
			})
		}
		close(go1)
		doneWithin(t, readWait+10*time.Second, fmt.Sprintf("reads of pid %d (their wait: %v)", pid, readWait), wg.Wait)
		return key, got, envs
	}

	key, got, _ := readAll(stalled, 2)
	for i, err := range got {
		if !errors.Is(err, errUnread) {
			t.Fatalf("read %d of stalled pid %d: %v, want given up (%v)", i, stalled, err, errUnread)
		}
	}
	stuck.Lock()
	given := stuck.keys[key]
	stuck.Unlock()
	if given != 1 {
		t.Fatalf("%d reads of pid %d given up and still blocked, want 1: readers at once each left a blocked read", given, stalled)
	}

	_, got, envs := readAll(cmd.Process.Pid, 8)
	for i, err := range got {
		if err != nil || !slices.Contains(strings.Split(string(envs[i]), "\x00"), kv) {
			t.Fatalf("read %d of pid %d (not stalled) = %q, %v; want its environment, holding %s", i, cmd.Process.Pid, envs[i], err, kv)
		}
	}
}

// doneWithin runs f and returns how long it took, failing t where f has
// not returned after d: what names the call for the message. d is meant
// far past the bound under test, so that only a call that waits on a
// stalled read fails it; f is then left blocked, until the stalled
// process is killed at cleanup.
func doneWithin(t *testing.T, d time.Duration, what string, f func()) time.Duration {
	t.Helper()
	done := make(chan struct{})
	began := time.Now()
	go func() { f(); close(done) }()
	select {
	case <-done:
		return time.Since(began)
	case <-time.After(d):
		t.Fatalf("%s still blocked after %v: it waits on a read that never ends", what, d)
		panic("unreachable")
	}
}

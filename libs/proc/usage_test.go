package proc

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/testkit/stall"
)

// usageChild is the role the test binary takes when re-executed by
// TestGroupUsage: it holds 64 MiB resident, spins a CPU, writes a file and
// waits to be killed.
const usageChild = "LOOM_PROC_USAGE_CHILD"

func TestMain(m *testing.M) {
	stall.Main() // the process whose reads block, of TestLookByEnvOfGivesUpAStalledRead and TestGroupUsageGivesUpAStalledRead
	if path := os.Getenv(usageChild); path != "" {
		buf := make([]byte, 64<<20)
		for i := range buf {
			buf[i] = byte(i)
		}
		f, err := os.Create(path)
		if err == nil {
			_, _ = f.Write(buf[:1<<20])
			_ = f.Sync()
			_ = f.Close()
		}
		for n := 0; ; n++ {
			buf[n%len(buf)]++
		}
	}
	os.Exit(m.Run())
}

func TestGroupUsage(t *testing.T) {
	t.Parallel()
	out := t.TempDir() + "/out"
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), usageChild+"="+out)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pg := cmd.Process.Pid
	var u Usage
	deadline := time.Now().Add(30 * time.Second)
	for {
		// The child writes its file once every page of its 64 MiB is
		// touched: before that, RSS (its runtime's pages too) can pass 64
		// MiB while its own share does not yet.
		_, written := os.Stat(out)
		u = GroupUsage(map[int]bool{pg: true}, true)[pg]
		if written == nil && u.RSS >= 64<<20 && u.UserCPU+u.SystemCPU > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s the group's usage is %+v (file written: %v); want its 64 MiB touched, RSS >= 64 MiB and some CPU time", u, written == nil)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if u.Processes != 1 {
		t.Errorf("Processes = %d, want 1", u.Processes)
	}
	if u.VMSize < u.RSS {
		t.Errorf("VMSize %d < RSS %d", u.VMSize, u.RSS)
	}
	// The 64 MiB are the child's own: its proportional share holds them.
	// RSS and PSS are read one after the other while the child may still
	// grow (its runtime): PSS is bounded by an RSS read after it.
	after := GroupUsage(map[int]bool{pg: true}, true)[pg]
	if u.PSS < 64<<20 || u.PSS > after.RSS {
		t.Errorf("PSS %d: want at least 64 MiB and at most RSS %d (read after it)", u.PSS, after.RSS)
	}
	// Another group is not counted, and a group with no process is absent.
	// Without its leader, the group (the leader alone) has no process.
	if got := GroupUsage(map[int]bool{pg: true}, false); len(got) != 0 {
		t.Errorf("usage without the leader = %v, want none", got)
	}
	if got := GroupUsage(map[int]bool{pg + 1_000_000: true}, true); len(got) != 0 {
		t.Errorf("usage of a group with no process = %v, want none", got)
	}
	if got := GroupUsage(nil, true); got != nil {
		t.Errorf("GroupUsage(nil) = %v, want nil", got)
	}
}

func TestSampleStatParsesAnOddName(t *testing.T) {
	t.Parallel()
	// The command name may hold spaces and parentheses; the fields follow
	// the last ')'. Our own stat line is read whatever the binary's name.
	s, ok := sampleStat(os.Getpid())
	if !ok {
		t.Fatal("sampleStat of this process failed")
	}
	if s.pgrp != syscall.Getpgrp() {
		t.Errorf("pgrp = %d, want %d", s.pgrp, syscall.Getpgrp())
	}
	if s.rss <= 0 || s.vsize <= 0 {
		t.Errorf("rss %d, vsize %d: want both > 0", s.rss, s.vsize)
	}
}

func TestRusage(t *testing.T) {
	t.Parallel()
	// A process that held 64 MiB and spun: its rusage, once reaped, says so.
	out := t.TempDir() + "/out"
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), usageChild+"="+out)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		s, ok := sampleStat(cmd.Process.Pid)
		if ok && s.rss >= 64<<20 && s.user > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the child did not reach 64 MiB and some CPU time in 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	user, system, maxRSS := Rusage(cmd.ProcessState)
	if maxRSS < 64<<20 {
		t.Errorf("maxRSS = %d, want >= 64 MiB", maxRSS)
	}
	if user+system <= 0 {
		t.Errorf("CPU time = %v + %v, want > 0", user, system)
	}
	if u, s, m := Rusage(nil); u != 0 || s != 0 || m != 0 {
		t.Errorf("Rusage(nil) = %v, %v, %d", u, s, m)
	}
}

// BenchmarkGroupUsage is one sample as the agent takes it each progress
// interval: a walk of /proc (every process of the machine) and the reads of
// the sampled group's members (stat, io, smaps_rollup). Here the group is
// this test binary's own, among whatever else the machine runs.
func BenchmarkGroupUsage(b *testing.B) {
	pg := syscall.Getpgrp()
	groups := map[int]bool{pg: true}
	procs := 0
	for b.Loop() {
		procs = GroupUsage(groups, true)[pg].Processes
	}
	if procs == 0 {
		b.Fatal("the benchmark's own group was not found")
	}
	entries, _ := os.ReadDir("/proc")
	b.ReportMetric(float64(len(entries)), "proc-entries")
}

func TestHighWater(t *testing.T) {
	t.Parallel()
	// The RSS first: the high-water mark read after it is at least what
	// it was then (read the other way round, memory the parallel tests
	// touch in between made the RSS the larger, 4 KiB over).
	s, ok := sampleStat(os.Getpid())
	hwm := HighWater()
	if !ok || hwm < s.rss || hwm <= 0 {
		t.Errorf("HighWater() = %d, want at least the current RSS %d", hwm, s.rss)
	}
}

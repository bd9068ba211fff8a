package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
)

// holdMemory is shell that holds about 40 MB in the shell itself (a
// variable), says so in held and then waits for stop to exist.
func holdMemory(held, stop string) string {
	return `x=$(head -c 40000000 /dev/zero | tr '\0' a); echo ${#x} > ` + held + `; while [ ! -e ` + stop + ` ]; do sleep 0.05; done`
}

// TestUsageAccounting: what a step's and a job step's tasks' processes use
// is reported while they run (UsageReported, every accounting interval)
// and with their ends (StepChanged, TasksChanged): the kernel's CPU time
// and peak of a child the script waited for (dd's 128 MiB buffer, gone
// before any sample), and the resident memory a sample saw.
func TestUsageAccounting(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.progressInterval, e.acctInterval = 50*time.Millisecond, 100*time.Millisecond
	e.start(t)
	out := filepath.Join(e.shared, "slurm-71.out")
	stop := filepath.Join(e.shared, "stop-71")
	publish(t, e.broker, command(startStep("71", "dd if=/dev/zero of=/dev/null bs=128M count=1 2>/dev/null; "+holdMemory("/dev/null", stop), nil, out)))
	waitStep(t, e.broker, "71", eventsv1.StepState_STEP_RUNNING)

	// While it runs: a report that saw the 40 MB held.
	ev := testkit.WaitEvent(t, e.broker, topics.StepEvents, wait, func(ev envelope.Event) bool {
		u, ok := ev.Payload.(*eventsv1.UsageReported)
		return ok && u.Job == "projects/p/jobs/71" && u.GetUsage().GetRssBytes() >= 40e6
	})
	running := ev.Payload.(*eventsv1.UsageReported)
	if running.Node != node || running.Attempt != 1 || running.GetUsage().GetTime() == nil {
		t.Errorf("usage report %v: want node %s, attempt 1 and a time", running, node)
	}
	if running.GetUsage().GetMaxRssBytes() < running.GetUsage().GetRssBytes() || running.GetUsage().GetMaxVmsizeBytes() < 40e6 {
		t.Errorf("usage %v: want max RSS >= RSS and a virtual size of at least 40 MB", running.GetUsage())
	}

	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	end := waitStep(t, e.broker, "71", eventsv1.StepState_STEP_EXITED).GetUsage()
	if end.GetMaxRssBytes() < 128<<20 {
		t.Errorf("final max RSS = %d, want at least dd's 128 MiB (the kernel's count of a waited-for child)", end.GetMaxRssBytes())
	}
	if end.GetUserCpu().AsDuration()+end.GetSystemCpu().AsDuration() <= 0 {
		t.Errorf("final CPU time = %v + %v, want some", end.GetUserCpu().AsDuration(), end.GetSystemCpu().AsDuration())
	}
	if end.GetRssBytes() != 0 {
		t.Errorf("final RSS = %d, want 0: nothing is resident after the end", end.GetRssBytes())
	}

	// Two tasks of a job step: each its own usage, by local id.
	dir := filepath.Join(e.shared, ".loom", "steps")
	publish(t, e.broker, command(launch("72", 0, 0, 2, filepath.Join(dir, "72.0"), "sh", "-c",
		`dd if=/dev/zero of=/dev/null bs=$((64 + 64 * SLURM_PROCID))M count=1 2>/dev/null`)))
	tasks := waitTasks(t, e.broker, "72", 0, eventsv1.StepState_STEP_EXITED)
	if len(tasks.GetUsage()) != 2 {
		t.Fatalf("tasks' usage = %v, want one per task", tasks.GetUsage())
	}
	for i, want := range []int64{64 << 20, 128 << 20} {
		if got := tasks.GetUsage()[i].GetMaxRssBytes(); got < want {
			t.Errorf("task %d's max RSS = %d, want at least %d", i, got, want)
		}
	}
}

// TestOverMemoryKill: a step whose processes hold more resident memory than
// its job asked for (StartStep.mem_limit_bytes) is killed at a sample, with
// Slurm's line in its error output, and ends out of memory; srun tasks past
// theirs end failed, out of memory. A step within its limit runs on.
func TestOverMemoryKill(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.progressInterval = 50 * time.Millisecond
	e.start(t)
	out := filepath.Join(e.shared, "slurm-81.out")
	greedy := startStep("81", holdMemory("/dev/null", filepath.Join(e.shared, "never")), nil, out)
	greedy.MemLimitBytes = 20 << 20
	within := startStep("82", holdMemory(filepath.Join(e.shared, "held-82"), filepath.Join(e.shared, "stop-82")), nil, filepath.Join(e.shared, "slurm-82.out"))
	within.MemLimitBytes = 200 << 20
	publish(t, e.broker, command(greedy), command(within))
	end := waitStep(t, e.broker, "81", eventsv1.StepState_STEP_EXITED)
	if end.ExitCode != 137 || !strings.Contains(end.Message, "out of memory") {
		t.Errorf("greedy step ended %d %q, want 137, out of memory", end.ExitCode, end.Message)
	}
	if got := readFile(t, out); !strings.Contains(got, "slurmstepd: error: Job 81 exceeded memory limit (") ||
		!strings.Contains(got, " > 20480), being killed") {
		t.Errorf("greedy step's output %q lacks Slurm's memory line", got)
	}
	if end.GetUsage().GetMaxRssBytes() <= 20<<20 {
		t.Errorf("greedy step's max RSS %d, want past its 20 MiB limit", end.GetUsage().GetMaxRssBytes())
	}
	// The step within its limit is still running once it holds its memory.
	testkit.WaitFor(t, wait, "step 82 to hold its memory", func() (bool, error) {
		return readFile(t, filepath.Join(e.shared, "held-82")) != "", nil
	})

	dir := filepath.Join(e.shared, ".loom", "steps")
	tasks := launch("83", 0, 0, 2, filepath.Join(dir, "83.0"), "bash", "-c", holdMemory("/dev/null", filepath.Join(e.shared, "never")))
	tasks.MemLimitBytes = 50 << 20 // two tasks of 40 MB each pass it together
	publish(t, e.broker, command(tasks))
	ended := waitTasks(t, e.broker, "83", 0, eventsv1.StepState_STEP_EXITED)
	if !strings.Contains(ended.Message, "out of memory") {
		t.Errorf("tasks ended %q, want out of memory", ended.Message)
	}
	if err := os.WriteFile(filepath.Join(e.shared, "stop-82"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if ev := waitStep(t, e.broker, "82", eventsv1.StepState_STEP_EXITED); ev.ExitCode != 0 {
		t.Errorf("step within its limit ended %d %q, want 0", ev.ExitCode, ev.Message)
	}
}

// TestGPUAccounting: a step that holds a GPU (CUDA_VISIBLE_DEVICES) has
// that GPU's utilization and memory, from the node's telemetry, in its
// usage: the simulated device shows a held GPU busy; an idle one is not
// counted for it.
func TestGPUAccounting(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.progressInterval, e.acctInterval = 50*time.Millisecond, 100*time.Millisecond
	e.startSimulated(t)
	stop := filepath.Join(e.shared, "stop-91")
	publish(t, e.broker, command(startStep("91", `while [ ! -e `+stop+` ]; do sleep 0.05; done`,
		map[string]string{"CUDA_VISIBLE_DEVICES": "1"}, filepath.Join(e.shared, "slurm-91.out"))))
	ev := testkit.WaitEvent(t, e.broker, topics.StepEvents, wait, func(ev envelope.Event) bool {
		u, ok := ev.Payload.(*eventsv1.UsageReported)
		// Well past 50: the mean holds the samples taken from a reading
		// of before the step held the GPU, and the step's last sample,
		// after it ended, reads the GPU idle again (a run at CI's load
		// ended at 49.7 when this waited for 50).
		return ok && u.Job == "projects/p/jobs/91" && u.GetUsage().GetGpus() == 1 && u.GetUsage().GetGpuUtilPercent() > 80
	})
	if u := ev.Payload.(*eventsv1.UsageReported).GetUsage(); u.GetMaxGpuMemoryBytes() <= 0 {
		t.Errorf("usage %v: want the held GPU's memory in use", u)
	}
	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if end := waitStep(t, e.broker, "91", eventsv1.StepState_STEP_EXITED).GetUsage(); end.GetGpus() != 1 || end.GetGpuUtilPercent() <= 50 {
		t.Errorf("final usage %v: want its one GPU, busy", end)
	}
}

package agent

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/proc"
	"github.com/loom-ml/loom/libs/slurmspec"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	"github.com/loom-ml/loom/services/agent/internal/adapters"
	"github.com/loom-ml/loom/services/agent/internal/domain"
)

func launch(job string, step, first, n int32, outDir string, argv ...string) *eventsv1.LaunchTasks {
	return &eventsv1.LaunchTasks{Job: "projects/p/jobs/" + job, JobId: job, Attempt: 1, StepId: step, Node: node,
		NodeIndex: 1, FirstRank: first, Ntasks: n, TotalTasks: first + n, Command: argv,
		Env: map[string]string{"SLURM_NODEID": "1", "SLURM_STEP_ID": fmt.Sprint(step), "SLURM_PROCID": "forged"}, OutputDir: outDir}
}

func waitTasks(t *testing.T, broker, job string, step int32, state eventsv1.StepState) *eventsv1.TasksChanged {
	t.Helper()
	ev := testkit.WaitEvent(t, broker, topics.StepEvents, wait, func(ev envelope.Event) bool {
		tc, ok := ev.Payload.(*eventsv1.TasksChanged)
		return ok && tc.Job == "projects/p/jobs/"+job && tc.StepId == step && tc.State == state
	})
	if ev.Key != "projects/p/jobs/"+job {
		t.Fatalf("TasksChanged keyed %q, want the job", ev.Key)
	}
	return ev.Payload.(*eventsv1.TasksChanged)
}

func taskEvents(t *testing.T, broker, job string, step int32) []string {
	t.Helper()
	var out []string
	for _, ev := range testkit.Delivered(t, broker, topics.StepEvents) {
		if tc, ok := ev.Payload.(*eventsv1.TasksChanged); ok && tc.Job == "projects/p/jobs/"+job && tc.StepId == step {
			out = append(out, tc.State.String())
		}
	}
	return out
}

func TestLaunchTasksRunsRankedTasksOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t)
	outDir := filepath.Join(e.shared, ".loom", "steps", "1.0")
	l := launch("1", 0, 4, 3, outDir, "sh", "-c",
		`echo "rank=$SLURM_PROCID local=$SLURM_LOCALID node=$SLURM_NODEID step=$SLURM_STEP_ID pmi=$PMI_RANK"; echo oops >&2; echo x >> "$HOME/starts.txt"; exit $SLURM_LOCALID`)
	first := command(l)
	publish(t, e.broker, first)
	publish(t, e.broker, first)      // the same event again
	publish(t, e.broker, command(l)) // another event id, same step
	other := launch("1", 0, 0, 1, outDir, "true")
	other.Node = cluster + "/nodes/gpu-0002"
	publish(t, e.broker, envelope.New(topics.StepCommands, node, "loom/test", other))

	running := waitTasks(t, e.broker, "1", 0, eventsv1.StepState_STEP_RUNNING)
	if running.Node != node || running.Cluster != cluster || running.FirstRank != 4 {
		t.Fatalf("running = %v", running)
	}
	exited := waitTasks(t, e.broker, "1", 0, eventsv1.StepState_STEP_EXITED)
	if !reflect.DeepEqual(exited.ExitCodes, []int32{0, 1, 2}) {
		t.Fatalf("exit codes %v, want 0 1 2 by local id", exited.ExitCodes)
	}
	for l := 0; l < 3; l++ {
		rank := 4 + l
		b, err := os.ReadFile(filepath.Join(outDir, fmt.Sprintf("task-%d.out", rank)))
		if want := fmt.Sprintf("rank=%d local=%d node=1 step=0 pmi=%d\n", rank, l, rank); err != nil || string(b) != want {
			t.Errorf("task-%d.out = %q, %v; want %q", rank, b, err, want)
		}
		if b, err := os.ReadFile(filepath.Join(outDir, fmt.Sprintf("task-%d.err", rank))); err != nil || string(b) != "oops\n" {
			t.Errorf("task-%d.err = %q, %v", rank, b, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(e.shared, "starts.txt")); err != nil || string(b) != "x\nx\nx\n" {
		t.Fatalf("starts = %q, %v; want the 3 tasks started once", b, err)
	}
	if got := strings.Join(taskEvents(t, e.broker, "1", 0), ","); got != "STEP_RUNNING,STEP_EXITED" {
		t.Fatalf("events %s", got)
	}
}

// TestLaunchTasksByTheirRanks: a step laid out by srun -m cyclic sends
// each node its ranks (LaunchTasks.ranks): the tasks' SLURM_PROCID,
// PMI_RANK and task-RANK files follow them, SLURM_LOCALID counts on.
func TestLaunchTasksByTheirRanks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t)
	outDir := filepath.Join(e.shared, ".loom", "steps", "2.0")
	l := launch("2", 0, 1, 3, outDir, "sh", "-c", `echo "rank=$SLURM_PROCID local=$SLURM_LOCALID pmi=$PMI_RANK"`)
	l.TotalTasks, l.Ranks = 6, []int32{1, 3, 5} // -N2 -n6 -m cyclic, the second node
	publish(t, e.broker, command(l))
	waitTasks(t, e.broker, "2", 0, eventsv1.StepState_STEP_EXITED)
	for local, rank := range l.Ranks {
		b, err := os.ReadFile(filepath.Join(outDir, fmt.Sprintf("task-%d.out", rank)))
		if want := fmt.Sprintf("rank=%d local=%d pmi=%d\n", rank, local, rank); err != nil || string(b) != want {
			t.Errorf("task-%d.out = %q, %v; want %q", rank, b, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(outDir, "task-2.out")); err == nil {
		t.Error("task-2.out written: rank 2 runs on the other node")
	}
}

// A program that does not exist is each task's exit, as under Slurm's
// slurmstepd: the tasks start, say why on their error output and exit 2
// (ENOENT), so that srun says "Exited with exit code 2"; a launch that
// cannot be made at all is a failed start.
func TestLaunchTasksBadCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t)
	dir := filepath.Join(e.shared, "s")
	publish(t, e.broker, command(launch("2", 0, 0, 2, dir, "no-such-program-xyz")))
	f := waitTasks(t, e.broker, "2", 0, eventsv1.StepState_STEP_EXITED)
	if !reflect.DeepEqual(f.ExitCodes, []int32{2, 2}) {
		t.Fatalf("exited = %v, want both tasks' exit 2", f)
	}
	for rank := range 2 {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("task-%d.err", rank)))
		if want := "slurmstepd-gpu-0001: error: execve(): no-such-program-xyz: No such file or directory\n"; err != nil || string(b) != want {
			t.Errorf("task-%d.err = %q, %v; want %q", rank, b, err, want)
		}
	}
	publish(t, e.broker, command(launch("2", 1, 0, 0, filepath.Join(e.shared, "s"), "true")))
	if f := waitTasks(t, e.broker, "2", 1, eventsv1.StepState_STEP_FAILED_TO_START); !strings.Contains(f.Message, "bad launch") {
		t.Fatalf("no tasks: %v", f)
	}
}

func TestTasksDieWithTheirRunAndOnKillTasks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t)
	dir := filepath.Join(e.shared, "steps")
	// The batch step and a job step of the same run: a StopStep of the run
	// kills both.
	publish(t, e.broker, command(startStep("3", `sleep 60`, nil, filepath.Join(e.shared, "slurm-3.out"))))
	waitStep(t, e.broker, "3", eventsv1.StepState_STEP_RUNNING)
	publish(t, e.broker, command(launch("3", 0, 0, 2, dir, "sleep", "60")))
	waitTasks(t, e.broker, "3", 0, eventsv1.StepState_STEP_RUNNING)
	publish(t, e.broker, command(&eventsv1.StopStep{Job: "projects/p/jobs/3", Attempt: 1, Node: node, Reason: "job cancelled"}))
	killed := waitTasks(t, e.broker, "3", 0, eventsv1.StepState_STEP_KILLED)
	if !strings.Contains(killed.Message, "job cancelled") || !reflect.DeepEqual(killed.ExitCodes, []int32{143, 143}) {
		t.Fatalf("killed = %v", killed)
	}
	waitStep(t, e.broker, "3", eventsv1.StepState_STEP_KILLED)
	// A later step of the ended run never starts.
	publish(t, e.broker, command(launch("3", 1, 0, 1, dir, "sleep", "60")))
	if k := waitTasks(t, e.broker, "3", 1, eventsv1.StepState_STEP_KILLED); !strings.Contains(k.Message, "run has ended") {
		t.Fatalf("late launch = %v", k)
	}

	// A node without a batch step: KillTasks (a signal first, then a kill).
	publish(t, e.broker, command(launch("4", 0, 2, 1, dir, "sh", "-c", `trap 'echo got-usr1' USR1; echo trapped; while :; do sleep 0.05; done`)))
	waitTasks(t, e.broker, "4", 0, eventsv1.StepState_STEP_RUNNING)
	// RUNNING is the process started, not its trap set: a USR1 before the
	// trap would end the shell. It says when it has one.
	testkit.WaitFor(t, wait, "the task to trap USR1", func() (bool, error) {
		b, _ := os.ReadFile(filepath.Join(dir, "task-2.out"))
		return strings.Contains(string(b), "trapped\n"), nil
	})
	publish(t, e.broker, command(&eventsv1.KillTasks{Job: "projects/p/jobs/4", Attempt: 1, StepId: 0, Node: node, Signal: "USR1"}))
	testkit.WaitFor(t, wait, "the task to get USR1", func() (bool, error) {
		b, _ := os.ReadFile(filepath.Join(dir, "task-2.out"))
		return strings.Contains(string(b), "got-usr1"), nil
	})
	publish(t, e.broker, command(&eventsv1.KillTasks{Job: "projects/p/jobs/4", Attempt: 1, StepId: 0, Node: node, Reason: "step cancelled"}))
	if k := waitTasks(t, e.broker, "4", 0, eventsv1.StepState_STEP_KILLED); !strings.Contains(k.Message, "step cancelled") {
		t.Fatalf("killed = %v", k)
	}
	// A kill that comes before the launch: the launch starts nothing.
	publish(t, e.broker, command(&eventsv1.KillTasks{Job: "projects/p/jobs/5", Attempt: 1, StepId: 0, Node: node, Reason: "job ended"}))
	publish(t, e.broker, command(launch("5", 0, 0, 1, dir, "sh", "-c", `echo started > "$HOME/five.txt"`)))
	publish(t, e.broker, command(launch("6", 0, 0, 1, dir, "true"))) // a marker after it
	waitTasks(t, e.broker, "6", 0, eventsv1.StepState_STEP_EXITED)
	if _, err := os.Stat(filepath.Join(e.shared, "five.txt")); err == nil {
		t.Fatal("tasks killed before their launch started anyway")
	}
	if got := strings.Join(taskEvents(t, e.broker, "5", 0), ","); got != "STEP_KILLED" {
		t.Fatalf("job 5 events %s, want one KILLED", got)
	}
}

func TestRestartReportsTasksLost(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	orphan := exec.Command("/bin/sleep", "60")
	orphan.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	orphanDone := make(chan struct{})
	go func() { _ = orphan.Wait(); close(orphanDone) }()
	t.Cleanup(func() { _ = orphan.Process.Kill() })
	start, _ := proc.StartTime(orphan.Process.Pid)
	st := store.New(e.rdb, ServiceName("c1", "gpu-0001")+":")
	var tx store.Tx
	rec := &domain.Tasks{Job: "projects/p/jobs/8", Attempt: 1, StepID: 2, FirstRank: 0, NTasks: 1, Phase: domain.Running,
		PIDs: []int{orphan.Process.Pid}, PIDStarts: []uint64{start}, Created: time.Now()}
	if err := adapters.PutTasks(&tx, rec, domain.Self{}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Apply(context.Background(), "", &tx); err != nil {
		t.Fatal(err)
	}
	e.start(t)
	lost := waitTasks(t, e.broker, "8", 2, eventsv1.StepState_STEP_LOST)
	if !strings.Contains(lost.Message, "killed") || !reflect.DeepEqual(lost.ExitCodes, []int32{1}) {
		t.Fatalf("lost = %v", lost)
	}
	select {
	case <-orphanDone:
	case <-time.After(wait):
		t.Fatal("the surviving task was not killed")
	}
}

func TestShutdownKillsTasks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	stop := e.start(t)
	dir := filepath.Join(e.shared, "steps")
	publish(t, e.broker, command(launch("9", 0, 0, 2, dir, "sh", "-c", `echo $$ > "$HOME/task-$SLURM_PROCID.pid"; exec sleep 60`)))
	waitTasks(t, e.broker, "9", 0, eventsv1.StepState_STEP_RUNNING)
	var pids []int
	testkit.WaitFor(t, wait, "the tasks' pids", func() (bool, error) {
		pids = pids[:0]
		for r := 0; r < 2; r++ {
			b, err := os.ReadFile(filepath.Join(e.shared, fmt.Sprintf("task-%d.pid", r)))
			if err != nil || !strings.HasSuffix(string(b), "\n") {
				return false, nil
			}
			var pid int
			if _, err := fmt.Sscan(string(b), &pid); err != nil {
				return false, err
			}
			pids = append(pids, pid)
		}
		return true, nil
	})
	if err := stop(); err != nil {
		t.Fatalf("agent stop: %v", err)
	}
	for _, pid := range pids {
		if proc.Alive(pid, 0) {
			t.Errorf("task pid %d still runs after the agent stopped", pid)
		}
	}
	if k := waitTasks(t, e.broker, "9", 0, eventsv1.StepState_STEP_KILLED); !strings.Contains(k.Message, "agent shutting down") {
		t.Fatalf("killed = %v", k)
	}
}

// TestLaunchTasksReadInput: the task srun's input is for reads the step's
// input file as srun appends to it, to its end; the other reads nothing.
// A FIFO in the input file's place fails the launch, not the agent.
func TestLaunchTasksReadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t)
	outDir := filepath.Join(e.shared, ".loom", "steps", "9.0")
	l := launch("9", 0, 0, 2, outDir, "cat")
	l.Input = "1"
	publish(t, e.broker, command(l))
	waitTasks(t, e.broker, "9", 0, eventsv1.StepState_STEP_RUNNING)
	in := filepath.Join(outDir, slurmspec.InputFile)
	f, err := os.OpenFile(in, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatalf("the step's input file: %v", err)
	}
	if _, err := f.WriteString("hello\nworld\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.WriteFile(filepath.Join(outDir, slurmspec.InputEOF), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if ex := waitTasks(t, e.broker, "9", 0, eventsv1.StepState_STEP_EXITED); !reflect.DeepEqual(ex.ExitCodes, []int32{0, 0}) {
		t.Fatalf("exited = %v", ex)
	}
	for rank, want := range []string{"", "hello\nworld\n"} {
		if b, err := os.ReadFile(filepath.Join(outDir, fmt.Sprintf("task-%d.out", rank))); err != nil || string(b) != want {
			t.Errorf("task-%d.out = %q, %v; want %q", rank, b, err, want)
		}
	}

	fifoDir := filepath.Join(e.shared, ".loom", "steps", "9.1")
	if err := os.MkdirAll(fifoDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(fifoDir, slurmspec.InputFile), 0o600); err != nil {
		t.Fatal(err)
	}
	l = launch("9", 1, 0, 1, fifoDir, "cat")
	l.Input = slurmspec.InputAll
	publish(t, e.broker, command(l))
	if f := waitTasks(t, e.broker, "9", 1, eventsv1.StepState_STEP_FAILED_TO_START); !strings.Contains(f.Message, "not a regular file") {
		t.Fatalf("input a FIFO: %v", f)
	}
}

// TestLaunchTasksWithATerminal: srun --pty's task 0 runs in a terminal of
// the asked size, its input typed into it, its output (the terminal's) in
// its output file; the other tasks have none.
func TestLaunchTasksWithATerminal(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t)
	outDir := filepath.Join(e.shared, ".loom", "steps", "8.0")
	l := launch("8", 0, 0, 2, outDir, "sh", "-c", `if [ -t 0 ]; then stty size; read x; echo "got $x"; else echo "no tty"; fi`)
	l.Input, l.Pty, l.PtyRows, l.PtyCols = "0", true, 40, 120
	publish(t, e.broker, command(l))
	waitTasks(t, e.broker, "8", 0, eventsv1.StepState_STEP_RUNNING)
	if err := os.WriteFile(filepath.Join(outDir, slurmspec.InputFile), []byte("typed\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if ex := waitTasks(t, e.broker, "8", 0, eventsv1.StepState_STEP_EXITED); !reflect.DeepEqual(ex.ExitCodes, []int32{0, 0}) {
		t.Fatalf("exited = %v", ex)
	}
	// The terminal echoes the typed line as it arrives, before or after
	// stty's answer: both are there, and the shell's reply to it.
	b, err := os.ReadFile(filepath.Join(outDir, "task-0.out"))
	for _, want := range []string{"40 120\r\n", "typed\r\n", "got typed\r\n"} {
		if err != nil || !strings.Contains(string(b), want) {
			t.Errorf("task-0.out = %q, %v; lacking %q", b, err, want)
		}
	}
	if b, err := os.ReadFile(filepath.Join(outDir, "task-1.out")); err != nil || string(b) != "no tty\n" {
		t.Errorf("task-1.out = %q, %v; want no terminal", b, err)
	}
}

// TestLaunchTasksOwnGPUs: with srun --gpus-per-task each task sees its own
// GPUs (CUDA_VISIBLE_DEVICES, GPU_DEVICE_ORDINAL, SLURM_STEP_GPUS), not the
// node's; a launch whose lists do not match its tasks starts nothing.
func TestLaunchTasksOwnGPUs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t)
	outDir := filepath.Join(e.shared, ".loom", "steps", "7.0")
	l := launch("7", 0, 0, 2, outDir, "sh", "-c", `echo "$CUDA_VISIBLE_DEVICES $GPU_DEVICE_ORDINAL $SLURM_STEP_GPUS"`)
	l.Env["CUDA_VISIBLE_DEVICES"], l.Env["SLURM_STEP_GPUS"] = "0,1,2,3", "0,1,2,3"
	l.TaskGpus = []string{"0,1", "2,3"}
	publish(t, e.broker, command(l))
	if ex := waitTasks(t, e.broker, "7", 0, eventsv1.StepState_STEP_EXITED); !reflect.DeepEqual(ex.ExitCodes, []int32{0, 0}) {
		t.Fatalf("exited = %v", ex)
	}
	for rank, want := range []string{"0,1 0,1 0,1\n", "2,3 2,3 2,3\n"} {
		if b, err := os.ReadFile(filepath.Join(outDir, fmt.Sprintf("task-%d.out", rank))); err != nil || string(b) != want {
			t.Errorf("task-%d.out = %q, %v; want %q", rank, b, err, want)
		}
	}
	bad := launch("7", 1, 0, 2, outDir, "true")
	bad.TaskGpus = []string{"0"}
	publish(t, e.broker, command(bad))
	if f := waitTasks(t, e.broker, "7", 1, eventsv1.StepState_STEP_FAILED_TO_START); !strings.Contains(f.Message, "1 tasks' GPUs for 2 tasks") {
		t.Fatalf("mismatched lists: %v", f)
	}
}

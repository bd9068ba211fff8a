package slurmcli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/loom-ml/loom/cmd/loom/internal/fakegw"
	"github.com/loom-ml/loom/libs/slurmspec"
	"github.com/loom-ml/loom/libs/testkit"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

const (
	stepCluster = "projects/default/clusters/c"
	// allocJob is the job srun submits for its allocation outside a job:
	// the next after srunGateway's last, 39.
	allocJob = "projects/default/jobs/40"
)

// srunGateway is the gateway srun talks to: in cluster c (nodes gpu-0001
// and gpu-0002) ada's job 12 runs on both nodes, where it has run steps 0
// to 2 already, and job 39 has ended. Polled jobs start (StartJobs). The
// steps' tasks write their output to a fresh directory, which is also the
// commands' working directory, run for endAfter GetJobStep calls and exit
// with exitCodes, by rank, the way the agents and the scheduler play them.
func srunGateway(t *testing.T, endAfter int, exitCodes ...int32) *fakegw.Gateway {
	t.Helper()
	g := &fakegw.Gateway{StartJobs: true, StepOutputDir: t.TempDir(), StepEndAfter: endAfter, StepExitCodes: exitCodes,
		Jobs: []*loomv1.Job{
			{Name: "projects/default/jobs/12", JobId: "12", Cluster: stepCluster, User: "ada", NodeCount: 2,
				State: loomv1.JobState_RUNNING, Nodes: []string{"gpu-0001", "gpu-0002"}},
			{Name: "projects/default/jobs/39", JobId: "39", Cluster: stepCluster, User: "ada", State: loomv1.JobState_COMPLETED},
		}}
	for _, h := range []string{"gpu-0001", "gpu-0002"} {
		g.SlurmNodes = append(g.SlurmNodes, &loomv1.SlurmNode{Hostname: h, Node: stepCluster + "/nodes/" + h, Cluster: stepCluster,
			State: loomv1.SlurmNode_MIXED, Partitions: []string{"batch"}, Gpus: 8})
	}
	for id := range int32(3) {
		g.Steps = append(g.Steps, &loomv1.JobStep{Name: fmt.Sprintf("projects/default/jobs/12/steps/%d", id),
			Job: "projects/default/jobs/12", StepId: id, State: loomv1.JobState_COMPLETED})
	}
	return g
}

// The requests srun sent g, by kind.
func stepsCreated(g *fakegw.Gateway) []*loomv1.CreateJobStepRequest {
	return fakegw.Requests[*loomv1.CreateJobStepRequest](g)
}
func jobsSubmitted(g *fakegw.Gateway) []*loomv1.SubmitJobRequest {
	return fakegw.Requests[*loomv1.SubmitJobRequest](g)
}
func jobCancels(g *fakegw.Gateway) []*loomv1.CancelJobRequest {
	return fakegw.Requests[*loomv1.CancelJobRequest](g)
}
func stepCancels(g *fakegw.Gateway) []string {
	var out []string
	for _, r := range fakegw.Requests[*loomv1.CancelJobStepRequest](g) {
		out = append(out, r.GetName())
	}
	return out
}

// srunOutside runs srun with no allocation in its environment, against g.
func srunOutside(ctx context.Context, t *testing.T, g *fakegw.Gateway, args ...string) (int, string, string) {
	t.Helper()
	env := Env{Conn: g.Dial(t), Project: "default", Cluster: "projects/default/clusters/c", User: "ada",
		Cwd: g.StepOutputDir, Environ: map[string]string{"PATH": "/usr/bin:/bin", "KEEP": "me"}, CallTimeout: 10 * time.Second}
	return mainSrun(ctx, env, args...)
}

// TestSrunOutsideAnAllocation: srun with no job around asks for an
// allocation (a job whose batch script holds the nodes), waits for it as
// Slurm's srun says, runs the command as its step and ends the job as the
// step ended.
func TestSrunOutsideAnAllocation(t *testing.T) {
	t.Parallel()
	g := srunGateway(t, 1, 0, 0)
	g.PendingPolls = 10 // pending for 2 s
	code, out, errOut := srunOutside(context.Background(), t, g, "-N2", "-p", "gpu", "-t", "5", "--gres=gpu:2", "-l", "hostname")
	if code != 0 || !strings.HasPrefix(errOut, "srun: job 40 queued and waiting for resources\nsrun: job 40 has been allocated resources\n") ||
		!strings.Contains(out, "0: hello from 0\n") || !strings.Contains(out, "1: hello from 1\n") {
		t.Fatalf("srun -N2 hostname: exit %d\nstdout %q\nstderr %q", code, out, errOut)
	}
	if len(jobsSubmitted(g)) != 1 {
		t.Fatalf("submitted %v, want one allocation", jobsSubmitted(g))
	}
	j := jobsSubmitted(g)[0].GetJob()
	if j.GetNodeCount() != 2 || j.GetPartition() != "gpu" || j.GetTimeLimitSeconds() != 300 || j.GetGpusPerNode() != 2 ||
		j.GetDisplayName() != "hostname" || j.GetScript() != srunHolder || j.GetUser() != "ada" || j.GetCluster() != "projects/default/clusters/c" ||
		j.GetSubmitHost() == "" || j.GetSubmitDir() != g.StepOutputDir {
		t.Fatalf("allocation %v", j)
	}
	if len(stepsCreated(g)) != 1 || stepsCreated(g)[0].GetParent() != allocJob || !slices.Equal(stepsCreated(g)[0].GetCommand(), []string{"hostname"}) ||
		stepsCreated(g)[0].GetEnv()["KEEP"] != "me" {
		t.Fatalf("steps %v, want hostname in job 40", stepsCreated(g))
	}
	// The job ends COMPLETED: as its step ended, exit code 0.
	if c := jobCancels(g); len(c) != 1 || c[0].ExitCode == nil || c[0].GetExitCode() != 0 || c[0].GetSignal() != "" || c[0].GetName() != allocJob {
		t.Fatalf("job ends with %v, want exit code 0", c)
	}

	// A failing step: srun's exit code, and the job ends with it (FAILED).
	g = srunGateway(t, 1, 0, 3)
	code, _, errOut = srunOutside(context.Background(), t, g, "-N2", "false")
	if c := jobCancels(g); code != 3 || len(c) != 1 || c[0].GetExitCode() != 3 {
		t.Fatalf("failing step: exit %d, stderr %q, job ends with %v", code, errOut, c)
	}

	// Interrupted while waiting for its allocation, srun cancels the job.
	// Interrupted once it waits, that is once it polls the job: a timer
	// (500 ms) could fire on a loaded machine before the job was
	// submitted, and srun then had nothing to cancel.
	g = srunGateway(t, 0)
	g.PendingPolls = 1 << 30
	ctx, cancel := context.WithCancel(context.Background())
	waiting := testkit.Context(t, 30*time.Second) // past it, the checks below say what went wrong
	go func() {
		defer cancel()
		for waiting.Err() == nil && len(fakegw.Requests[*loomv1.GetJobRequest](g)) == 0 {
			time.Sleep(10 * time.Millisecond) // polling the fake's requests: no event to wait on
		}
	}()
	code, _, errOut = srunOutside(ctx, t, g, "hostname")
	if code == 0 || !strings.Contains(errOut, "Job allocation 40 has been revoked") || len(stepsCreated(g)) != 0 ||
		len(jobCancels(g)) != 1 || jobCancels(g)[0].GetSignal() != "" {
		t.Fatalf("interrupted: exit %d, stderr %q, steps %v, cancels %v", code, errOut, stepsCreated(g), jobCancels(g))
	}

	// --jobid: a step in a running job of one's own, from outside it; no allocation.
	g = srunGateway(t, 1, 0)
	code, _, errOut = srunOutside(context.Background(), t, g, "--jobid=12", "hostname")
	if code != 0 || len(jobsSubmitted(g)) != 0 || len(stepsCreated(g)) != 1 || stepsCreated(g)[0].GetParent() != "projects/default/jobs/12" {
		t.Fatalf("--jobid=12: exit %d, stderr %q, submitted %v, steps %v", code, errOut, jobsSubmitted(g), stepsCreated(g))
	}
	// A job of another cluster than the working one (LOOM_CLUSTER, -M)
	// is not the controller's: no step in it.
	g = srunGateway(t, 1, 0)
	other := Env{Conn: g.Dial(t), Project: "default", Cluster: "projects/default/clusters/other", User: "ada",
		Cwd: g.StepOutputDir, Environ: map[string]string{"PATH": "/usr/bin:/bin"}, CallTimeout: 10 * time.Second}
	if code, _, errOut := mainSrun(context.Background(), other, "--jobid=12", "hostname"); code != 1 || len(stepsCreated(g)) != 0 ||
		errOut != "srun: error: Unable to confirm allocation for job 12: Invalid job id specified\n" {
		t.Fatalf("--jobid=12 from cluster other: exit %d, stderr %q, steps %v", code, errOut, stepsCreated(g))
	}
	if code, _, errOut := srunOutside(context.Background(), t, srunGateway(t, 0), "--jobid=x1", "hostname"); code == 0 ||
		errOut != "srun: error: Invalid job id: x1\n" {
		t.Fatalf("--jobid=x1: exit %d, stderr %q", code, errOut)
	}
	// srun's input variables set the allocation's defaults; its command
	// line wins; sbatch's input variables are not srun's.
	g = srunGateway(t, 1, 0)
	env := Env{Conn: g.Dial(t), Project: "default", Cluster: "projects/default/clusters/c", User: "ada", Cwd: g.StepOutputDir,
		CallTimeout: 10 * time.Second, Environ: map[string]string{"PATH": "/bin", "SLURM_PARTITION": "debug", "SLURM_TIMELIMIT": "7",
			"SBATCH_QOS": "high", "SLURM_ACCOUNT": "lab"}}
	if code, _, errOut := mainSrun(context.Background(), env, "-A", "research", "--nice=7", "-b", "now+1hour", "hostname"); code != 0 || len(jobsSubmitted(g)) != 1 ||
		jobsSubmitted(g)[0].GetJob().GetPartition() != "debug" || jobsSubmitted(g)[0].GetJob().GetTimeLimitSeconds() != 420 ||
		jobsSubmitted(g)[0].GetJob().GetAccount() != "research" || jobsSubmitted(g)[0].GetJob().GetQos() == "high" ||
		jobsSubmitted(g)[0].GetJob().GetNice() != 7 || jobsSubmitted(g)[0].GetJob().GetBeginTime() == nil {
		t.Fatalf("input variables: exit %d, stderr %q, submitted %v", code, errOut, jobsSubmitted(g))
	}
	// --pty from no terminal: Slurm's warning, and a step without one
	// (conformance's TestSrunPty has the terminal).
	g = srunGateway(t, 0)
	code, _, errOut = srunOutside(context.Background(), t, g, "--pty", "bash")
	if code != 0 || !strings.HasPrefix(errOut, "srun: error: Not using a pseudo-terminal, disregarding --pty option\n") ||
		len(stepsCreated(g)) != 1 || stepsCreated(g)[0].GetPty() {
		t.Fatalf("--pty from no terminal: exit %d, stderr %q, steps %v", code, errOut, stepsCreated(g))
	}
	// Bad allocation options are refused as srun's (exit 255, as Slurm's),
	// nothing submitted.
	for _, bad := range [][]string{{"--time=soon"}, {"-N", "abc"}, {"--bogus"}} {
		g = srunGateway(t, 0)
		code, _, errOut = srunOutside(context.Background(), t, g, append(bad, "hostname")...)
		if code != 255 || !strings.HasPrefix(errOut, "srun: ") || len(jobsSubmitted(g)) != 0 {
			t.Fatalf("srun %v: exit %d, stderr %q, submitted %v", bad, code, errOut, jobsSubmitted(g))
		}
	}
}

// allocEnv is a two-node allocation's batch environment.
func allocEnv() map[string]string {
	return map[string]string{"SLURM_JOB_ID": "12", "SLURM_NNODES": "2", "SLURM_JOB_NODELIST": "gpu-[0001-0002]",
		"SLURMD_NODENAME": "gpu-0001", "SLURM_PROCID": "0", "PATH": "/usr/bin:/bin", "KEEP": "me", "CUDA_VISIBLE_DEVICES": "0,1"}
}

func runSrun(ctx context.Context, t *testing.T, g *fakegw.Gateway, args ...string) (int, string, string) {
	t.Helper()
	return mainSrun(ctx, srunEnv(t, g), args...)
}

// srunEnv is srun's environment in a two-node allocation, talking to g.
func srunEnv(t *testing.T, g *fakegw.Gateway) Env {
	t.Helper()
	return Env{Conn: g.Dial(t), Project: "default", Cwd: g.StepOutputDir, Environ: allocEnv(), CallTimeout: 10 * time.Second}
}

func mainSrun(ctx context.Context, env Env, args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := Main(ctx, "srun", args, env, &out, &errb)
	return code, out.String(), errb.String()
}

func TestSrunMultiNodeStreamsLabelledOutputAndExitCode(t *testing.T) {
	t.Parallel()
	g := srunGateway(t, 1, 0, 3, 0, 0)
	code, out, errOut := runSrun(context.Background(), t, g, "-l", "-N2", "--ntasks-per-node=2", "-K", "python", "train.py")
	if code != 3 {
		t.Errorf("exit %d, want 3 (the highest task exit code); stderr %q", code, errOut)
	}
	for r := 0; r < 4; r++ {
		for _, want := range []string{fmt.Sprintf("%d: hello from %d\n", r, r), fmt.Sprintf("%d: second line %d\n", r, r)} {
			if strings.Count(out, want) != 1 {
				t.Errorf("stdout has %q %d times, want once:\n%s", want, strings.Count(out, want), out)
			}
		}
		if want := fmt.Sprintf("%d: warn %d\n", r, r); strings.Count(errOut, want) != 1 {
			t.Errorf("stderr has %q %d times, want once:\n%s", want, strings.Count(errOut, want), errOut)
		}
	}
	if !strings.Contains(errOut, "srun: error: gpu-0001: task 1: Exited with exit code 3\n") {
		t.Errorf("stderr %q does not report task 1's exit", errOut)
	}
	if len(stepsCreated(g)) != 1 {
		t.Fatalf("CreateJobStep called %d times, want 1", len(stepsCreated(g)))
	}
	req := stepsCreated(g)[0]
	if req.GetParent() != "projects/default/jobs/12" || req.GetNodeCount() != 2 || req.GetNtasksPerNode() != 2 ||
		req.GetNtasks() != 0 || !req.GetKillOnBadExit() || strings.Join(req.GetCommand(), " ") != "python train.py" ||
		req.GetWorkDir() != g.StepOutputDir || req.GetRequestId() == "" {
		t.Errorf("CreateJobStep request %v", req)
	}
	if req.GetEnv()["KEEP"] != "me" || req.GetEnv()["SLURM_PROCID"] != "" {
		t.Errorf("step env %v: want the exported env without per-task variables", req.GetEnv())
	}
}

// TestSrunReportsATaskLaunchFailureAsSlurm: a node whose tasks never
// started (its agent's FAILED_TO_START: launch_failed) is reported as Slurm
// 22.05's srun reports a node that refused the launch (checked on a real
// one with a node's slurmd gone: "Task launch for StepId=15.0 failed on
// node node2: Communication connection failure", "Application launch
// failed: ...", "Job step aborted"), not as its tasks exiting 1; the other
// node's tasks are reported as they ended.
func TestSrunReportsATaskLaunchFailureAsSlurm(t *testing.T) {
	t.Parallel()
	g := srunGateway(t, 1, 0, 0, 0, 0)
	g.StepLaunchFailures = map[int]string{1: "chdir to /scratch/gone: no such file or directory"}
	code, _, errOut := runSrun(context.Background(), t, g, "-N2", "--ntasks-per-node=2", "python", "train.py")
	want := "srun: error: Task launch for StepId=12.3 failed on node gpu-0002: chdir to /scratch/gone: no such file or directory\n" +
		"srun: error: Application launch failed: chdir to /scratch/gone: no such file or directory\n" +
		"srun: Job step aborted\n"
	if code != 1 || !strings.Contains(errOut, want) || strings.Contains(errOut, "Exited with exit code") {
		t.Errorf("exit %d, stderr:\n%s\nwant exit 1 and:\n%s", code, errOut, want)
	}
}

func TestSrunMultiNodeRefusals(t *testing.T) {
	t.Parallel()
	// Job 12 has ended: the gateway refuses its steps in Slurm's words.
	g := srunGateway(t, 0)
	g.Jobs[0].State = loomv1.JobState_COMPLETED
	code, _, errOut := runSrun(context.Background(), t, g, "hostname")
	if code != 1 || errOut != "srun: error: Unable to create step for job 12: Job/step already completing or completed\n" {
		t.Errorf("job not running: exit %d, stderr %q", code, errOut)
	}
	// The gateway has job 12 on fewer nodes than its environment says:
	// node_count is refused as an invalid argument.
	g = srunGateway(t, 0)
	g.Jobs[0].Nodes = g.Jobs[0].Nodes[:1]
	if code, _, errOut := runSrun(context.Background(), t, g, "-N", "2", "hostname"); code != 1 ||
		!strings.HasPrefix(errOut, "srun: error: Unable to create step for job 12: node_count") {
		t.Errorf("bad request: exit %d, stderr %q", code, errOut)
	}
	// A one-node step is the scheduler's too (a job step in sacct, its own
	// step id).
	g = srunGateway(t, 1, 0)
	if code, _, errOut := runSrun(context.Background(), t, g, "-N1", "echo", "step"); code != 0 || len(stepsCreated(g)) != 1 ||
		stepsCreated(g)[0].GetNodeCount() != 1 || !slices.Equal(stepsCreated(g)[0].GetCommand(), []string{"echo", "step"}) {
		t.Errorf("-N1: exit %d, stderr %q, creates %v", code, errOut, stepsCreated(g))
	}
	// A job of another project: its step is asked of the job by its own
	// name (LOOM_JOB_NAME, set by the scheduler), LOOM_PROJECT or not.
	g = srunGateway(t, 1, 0)
	g.Jobs = append(g.Jobs, &loomv1.Job{Name: "projects/research/jobs/12", JobId: "12", Cluster: "projects/research/clusters/c",
		User: "ada", State: loomv1.JobState_RUNNING, Nodes: []string{"gpu-0001", "gpu-0002"}})
	env := srunEnv(t, g)
	env.Environ["LOOM_JOB_NAME"] = "projects/research/jobs/12"
	if code, _, errOut := mainSrun(context.Background(), env, "hostname"); code != 0 || len(stepsCreated(g)) != 1 ||
		stepsCreated(g)[0].GetParent() != "projects/research/jobs/12" {
		t.Errorf("job of project research: exit %d, stderr %q, creates %v", code, errOut, stepsCreated(g))
	}
	// -w, -x and -r go to the scheduler, which picks the step's nodes; -w
	// naming more nodes than -N keeps the first, as Slurm's srun says.
	g = srunGateway(t, 1, 0)
	if code, _, errOut := runSrun(context.Background(), t, g, "-N1", "-w", "gpu-[0001-0002]", "-x", "gpu-0003", "-r", "1", "hostname"); code != 0 ||
		len(stepsCreated(g)) != 1 || !slices.Equal(stepsCreated(g)[0].GetNodelist(), []string{"gpu-0001"}) ||
		!slices.Equal(stepsCreated(g)[0].GetExclude(), []string{"gpu-0003"}) || stepsCreated(g)[0].GetRelative() != 1 ||
		!strings.HasPrefix(errOut, "srun: error: Required nodelist includes more nodes than permitted by max-node count (2 > 1). Eliminating nodes from the nodelist.\n") {
		t.Errorf("-w -x -r: exit %d, stderr %q, creates %v", code, errOut, stepsCreated(g))
	}
	g = srunGateway(t, 0)
	for _, bad := range [][]string{{"-w", "gpu-[0002-0001]"}, {"-x", "/etc/hosts"}, {"-r", "-1"}, {"-r", "x"}} {
		if code, _, errOut := runSrun(context.Background(), t, g, append(bad, "hostname")...); code != 255 || !strings.Contains(errOut, "Invalid --") {
			t.Errorf("%v: exit %d, stderr %q", bad, code, errOut)
		}
	}
	if code, _, errOut := runSrun(context.Background(), t, g, "-N3", "hostname"); code != 1 ||
		errOut != "srun: error: Only allocated 2 nodes asked for 3\n" { // Slurm's words
		t.Errorf("-N3 of 2: exit %d, stderr %q", code, errOut)
	}
}

func TestSrunMultiNodeCancelsStepWhenInterrupted(t *testing.T) {
	t.Parallel()
	// The step never ends by itself: only the cancel ends it.
	g := srunGateway(t, 1<<30, 0, 0)
	code, errOut := interruptedSrun(t, g, "sleep", "1000")
	if len(stepCancels(g)) != 1 || stepCancels(g)[0] != "projects/default/jobs/12/steps/3" {
		t.Errorf("CancelJobStep calls %v, want one for step 3", stepCancels(g))
	}
	if code != 143 || !strings.Contains(errOut, "task 0: Terminated") {
		t.Errorf("exit %d, stderr %q; want 143 and the tasks' end", code, errOut)
	}
}

// TestSrunForwardsInputToItsStep: srun's stdin goes to the step's input file
// (which the tasks' agents follow), ended by the end-of-input file; the
// step is asked for with the tasks that read it: all by default, one with
// --input=RANK, none with --input=none; -i FILE forwards the file.
func TestSrunForwardsInputToItsStep(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, stdin io.Reader, args ...string) (*fakegw.Gateway, *loomv1.CreateJobStepRequest) {
		t.Helper()
		g := srunGateway(t, 1<<30, 0, 0) // ends when srun is interrupted
		// The input file is the agents' to make, as the job's owner.
		if err := os.WriteFile(filepath.Join(g.StepOutputDir, slurmspec.InputFile), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		env := srunEnv(t, g)
		env.Stdin = stdin
		done := make(chan struct{})
		go func() {
			defer close(done)
			mainSrun(ctx, env, args...)
		}()
		testkit.WaitFor(t, 10*time.Second, "srun to watch its step", func() (bool, error) {
			return len(fakegw.Requests[*loomv1.GetJobStepRequest](g)) > 0, nil
		})
		if len(stepsCreated(g)) != 1 {
			t.Fatalf("CreateJobStep calls %d", len(stepsCreated(g)))
		}
		req := stepsCreated(g)[0]
		if req.GetInput() != "" {
			testkit.WaitFor(t, 10*time.Second, "the end of input", func() (bool, error) {
				_, err := os.Stat(filepath.Join(g.StepOutputDir, slurmspec.InputEOF))
				return err == nil, nil
			})
		}
		cancel()
		<-done
		return g, req
	}
	input := func(g *fakegw.Gateway) string {
		b, _ := os.ReadFile(filepath.Join(g.StepOutputDir, slurmspec.InputFile))
		return string(b)
	}
	g, req := run(t, strings.NewReader("line one\nline two\n"), "-N2", "cat")
	if req.GetInput() != slurmspec.InputAll || input(g) != "line one\nline two\n" {
		t.Errorf("default: input %q, forwarded %q", req.GetInput(), input(g))
	}
	g, req = run(t, strings.NewReader("x\n"), "-N2", "--input=1", "cat")
	if req.GetInput() != "1" || input(g) != "x\n" {
		t.Errorf("--input=1: input %q, forwarded %q", req.GetInput(), input(g))
	}
	g, req = run(t, strings.NewReader("x\n"), "-N2", "-i", "none", "cat")
	if req.GetInput() != "" || input(g) != "" {
		t.Errorf("-i none: input %q, forwarded %q", req.GetInput(), input(g))
	}
	file := filepath.Join(t.TempDir(), "in.txt")
	if err := os.WriteFile(file, []byte("from a file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	g, req = run(t, nil, "-N2", "-i", file, "cat")
	if req.GetInput() != slurmspec.InputAll || input(g) != "from a file\n" {
		t.Errorf("-i FILE: input %q, forwarded %q", req.GetInput(), input(g))
	}
	// srun never makes the input file itself: one it made as whoever runs
	// it (root) could be unreadable to the job's owner.
	g = srunGateway(t, 1, 0, 0)
	env := srunEnv(t, g)
	env.Stdin = strings.NewReader("x\n")
	if code, _, errOut := mainSrun(context.Background(), env, "-N2", "cat"); code != 0 {
		t.Fatalf("input with no input file made: exit %d, stderr %q", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(g.StepOutputDir, slurmspec.InputFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("srun made the step's input file itself: %v", err)
	}
	// No input (a batch script's stdin, /dev/null): none asked for.
	g, req = run(t, nil, "-N2", "cat")
	if req.GetInput() != "" {
		t.Errorf("no stdin: input %q", req.GetInput())
	}
	g = srunGateway(t, 0)
	if code, _, errOut := runSrun(context.Background(), t, g, "-i", "out-%t.txt", "cat"); code != 1 ||
		!strings.Contains(errOut, "file name patterns are not supported") {
		t.Errorf("-i pattern: exit %d, stderr %q", code, errOut)
	}
}

// TestSrunWritesNoLinkInTheStepDir: the step's directory is its job
// owner's and srun may be an administrator's (srun --jobid): srun appends
// its input only to a regular file with one link, makes the end-of-input
// file only where nothing is, and writes a terminal's size to a new file
// of its own, so that no link the owner leaves there makes srun write
// elsewhere, and no FIFO hangs it.
func TestSrunWritesNoLinkInTheStepDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("kept\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(dir, slurmspec.InputFile)
	kept := func() {
		t.Helper()
		if b, err := os.ReadFile(victim); err != nil || string(b) != "kept\n" {
			t.Fatalf("the link's target was written: %q, %v", b, err)
		}
	}
	for name, make := range map[string]func() error{
		"symlink":  func() error { return os.Symlink(victim, in) },
		"hardlink": func() error { return os.Link(victim, in) },
		"fifo":     func() error { return syscall.Mkfifo(in, 0o600) },
		"dir":      func() error { return os.Mkdir(in, 0o700) },
	} {
		if err := make(); err != nil {
			t.Fatal(err)
		}
		if f, err := openStepInput(in); err == nil {
			f.Close()
			t.Errorf("%s: opened as the step's input", name)
		}
		if err := os.RemoveAll(in); err != nil {
			t.Fatal(err)
		}
	}
	kept()
	// The end of input where the owner left a link: the link is not
	// followed, and srun goes on.
	if err := os.WriteFile(in, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(dir, slurmspec.InputEOF)); err != nil {
		t.Fatal(err)
	}
	var errOut bytes.Buffer
	c := &cmd{stderr: &errOut}
	c.feedStep(context.Background(), dir, strings.NewReader("x\n"))
	if b, err := os.ReadFile(in); err != nil || string(b) != "x\n" || errOut.Len() != 0 {
		t.Errorf("input %q (%v), stderr %q", b, err, errOut.String())
	}
	kept()
}

// TestSrunOutputFiles: -o and -e send the tasks' output to files named by
// a pattern (per task with %t, per node with %n/%N, one for all
// without), emptied at the start, stderr following -o without -e;
// "none" drops it, a rank keeps that task's alone; a rank the step does
// not have is refused and the step cancelled. As Slurm 22.05's srun on
// the same options (compared by hand).
func TestSrunOutputFiles(t *testing.T) {
	t.Parallel()
	read := func(t *testing.T, path string) string {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	g := srunGateway(t, 1, 0, 0, 0, 0)
	dir := g.StepOutputDir
	if err := os.WriteFile(filepath.Join(dir, "o-12-3-1-gpu-0001.txt"), []byte("stale\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runSrun(context.Background(), t, g, "-N2", "--ntasks-per-node=2", "-o", "o-%j-%s-%t-%N.txt", "python", "train.py")
	if code != 0 || out != "" || errOut != "" {
		t.Fatalf("-o pattern: exit %d, stdout %q, stderr %q; want all in the files", code, out, errOut)
	}
	for r, node := range []string{"gpu-0001", "gpu-0001", "gpu-0002", "gpu-0002"} {
		got := read(t, filepath.Join(dir, fmt.Sprintf("o-12-3-%d-%s.txt", r, node)))
		for _, want := range []string{fmt.Sprintf("hello from %d\n", r), fmt.Sprintf("warn %d\n", r)} {
			if !strings.Contains(got, want) || strings.Contains(got, "stale") {
				t.Errorf("task %d's file %q lacks %q (or kept what was there)", r, got, want)
			}
		}
	}
	// One file for all, labelled; the errors per node.
	g = srunGateway(t, 1, 0, 0)
	dir = g.StepOutputDir
	code, out, _ = runSrun(context.Background(), t, g, "-N2", "-l", "-o", "all.txt", "-e", "e-%n.txt", "python", "train.py")
	if all := read(t, filepath.Join(dir, "all.txt")); code != 0 || out != "" || !strings.Contains(all, "0: hello from 0\n") ||
		!strings.Contains(all, "1: hello from 1\n") || strings.Contains(all, "warn") {
		t.Errorf("-o all.txt: exit %d, stdout %q, file %q", code, out, all)
	}
	if e1 := read(t, filepath.Join(dir, "e-1.txt")); e1 != "1: warn 1\n" {
		t.Errorf("-e e-%%n.txt: node 1's file %q", e1)
	}
	// none; one task's.
	g = srunGateway(t, 1, 0, 0)
	if code, out, errOut := runSrun(context.Background(), t, g, "-N2", "-o", "none", "python", "train.py"); code != 0 || out != "" || errOut != "" {
		t.Errorf("-o none: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	g = srunGateway(t, 1, 0, 0)
	if code, out, _ := runSrun(context.Background(), t, g, "-N2", "-o", "1", "python", "train.py"); code != 0 ||
		!strings.Contains(out, "hello from 1") || strings.Contains(out, "hello from 0") {
		t.Errorf("-o 1: exit %d, stdout %q", code, out)
	}
	g = srunGateway(t, 1<<30, 0, 0)
	if code, _, errOut := runSrun(context.Background(), t, g, "-N2", "-o", "7", "python", "train.py"); code != 1 ||
		!strings.Contains(errOut, "task 7 is not a task of the step (0..1)") || len(stepCancels(g)) != 1 {
		t.Errorf("-o 7 of 2 tasks: exit %d, stderr %q, cancels %v", code, errOut, stepCancels(g))
	}
}

// TestSrunOutputFilesBounded: a pattern that names more files than srun
// opens for one step is refused, the step cancelled.
func TestSrunOutputFilesBounded(t *testing.T) {
	t.Parallel()
	g := srunGateway(t, 1<<30, 0, 0)
	code, _, errOut := runSrun(context.Background(), t, g, "-N2", "-n", strconv.Itoa(maxOutputFiles+1), "-o", "many-%t.out", "true")
	if code != 1 || !strings.Contains(errOut, fmt.Sprintf("more than %d files for one step", maxOutputFiles)) || len(stepCancels(g)) != 1 {
		t.Fatalf("-o many-%%t.out over %d tasks: exit %d, stderr %q, cancels %v", maxOutputFiles+1, code, errOut, stepCancels(g))
	}
}

// TestSrunWaitsForAStepsResources: a step the scheduler holds back while
// the job's running steps hold its CPUs is answered PENDING; srun says so
// in Slurm's words, waits, and runs it once it has started. --exact,
// --exclusive (a step's --exact) and --overlap are asked for as given,
// and SLURM_EXACT / SLURM_OVERLAP set them too.
func TestSrunWaitsForAStepsResources(t *testing.T) {
	t.Parallel()
	g := srunGateway(t, 1, 0, 0)
	g.StepPendingPolls = 2
	code, out, errOut := runSrun(context.Background(), t, g, "--exact", "-n2", "hostname")
	if code != 0 || !strings.Contains(out, "hello from 1\n") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	want := "srun: Job 12 step creation temporarily disabled, retrying (Requested nodes are busy)\nsrun: Step created for job 12\n"
	if !strings.HasPrefix(errOut, want) {
		t.Errorf("stderr %q, want it to start %q", errOut, want)
	}
	if req := stepsCreated(g)[0]; !req.GetExact() || req.GetOverlap() {
		t.Errorf("--exact asked for exact %v, overlap %v", req.GetExact(), req.GetOverlap())
	}
	for _, c := range []struct {
		args           []string
		env            string
		exact, overlap bool
	}{
		{args: []string{"--overlap"}, overlap: true},
		{args: []string{"--exclusive"}, exact: true},
		{env: "SLURM_EXACT", exact: true},
		{env: "SLURM_OVERLAP", overlap: true},
		{},
	} {
		g := srunGateway(t, 0)
		env := srunEnv(t, g)
		if c.env != "" {
			env.Environ[c.env] = "1"
		}
		if code, _, errOut := mainSrun(context.Background(), env, append(c.args, "true")...); code != 0 {
			t.Fatalf("srun %v (%s): exit %d, %s", c.args, c.env, code, errOut)
		}
		if req := stepsCreated(g)[0]; req.GetExact() != c.exact || req.GetOverlap() != c.overlap {
			t.Errorf("srun %v (%s): exact %v, overlap %v; want %v, %v", c.args, c.env, req.GetExact(), req.GetOverlap(), c.exact, c.overlap)
		}
	}
}

// TestSrunWaitsForTheJobsNodes: a step asked for while the job's nodes
// have not reported its allocation ready (the batch host's agent runs the
// prolog checks) is answered PENDING, "Prolog is still running"; srun
// waits and runs it once it has started. As Slurm's srun, it says so only
// at -v, in its words; silent, it says nothing of the wait at all (a step
// of the batch script may wait a moment for the agent's report).
func TestSrunWaitsForTheJobsNodes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		then string // the step's reason after the prolog's
		want string
	}{
		{want: ""},
		{args: []string{"-v"}, want: "srun: Resources allocated for job 12 and being configured, please wait\nsrun: Step created for job 12\n"},
		// Then busy CPUs: the first line printed of the wait is
		// "temporarily", as Slurm's; "still" only at -v.
		{then: slurmspec.ReasonStepBusy, want: "srun: Job 12 step creation temporarily disabled, retrying (Requested nodes are busy)\nsrun: Step created for job 12\n"},
		{args: []string{"-v"}, then: slurmspec.ReasonStepBusy, want: "srun: Resources allocated for job 12 and being configured, please wait\n" +
			"srun: Job 12 step creation still disabled, retrying (Requested nodes are busy)\nsrun: Step created for job 12\n"},
	} {
		g := srunGateway(t, 1, 0, 0)
		g.StepPendingPolls, g.StepPendingReason, g.StepPendingThen = 2, slurmspec.ReasonStepProlog, c.then
		code, out, errOut := runSrun(context.Background(), t, g, append(c.args, "-n2", "hostname")...)
		if code != 0 || !strings.Contains(out, "hello from 1\n") {
			t.Fatalf("srun %v: exit %d, stdout %q, stderr %q", c.args, code, out, errOut)
		}
		if polls := len(fakegw.Requests[*loomv1.GetJobStepRequest](g)); polls < 3 {
			t.Errorf("srun %v: %d looks at the step, want it to have waited for it (3 at least)", c.args, polls)
		}
		if got := strings.TrimSuffix(errOut, strings.TrimPrefix(errOut, c.want)); got != c.want ||
			strings.Contains(strings.TrimPrefix(errOut, c.want), "srun: ") {
			t.Errorf("srun %v: stderr %q, want it to start %q and say nothing else of srun's", c.args, errOut, c.want)
		}
	}
}

// TestSrunCancelsItsWaitingStep: interrupted while its step waits, srun
// cancels it (so that it never starts) and fails as Slurm's does.
func TestSrunCancelsItsWaitingStep(t *testing.T) {
	t.Parallel()
	g := srunGateway(t, 1)
	g.StepPendingPolls = 1 << 30
	code, errOut := interruptedSrun(t, g, "hostname")
	if len(stepCancels(g)) != 1 || stepCancels(g)[0] != "projects/default/jobs/12/steps/3" {
		t.Errorf("CancelJobStep calls %v, want one for step 3", stepCancels(g))
	}
	if code == 0 || !strings.Contains(errOut, "srun: Cancelled pending job step\n") ||
		!strings.Contains(errOut, "Unable to create step for job 12: Job/step already completing or completed") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

// interruptedSrun runs srun with args against g, interrupts it (as SIGINT
// does) once it watches its step, and returns how it ended.
func interruptedSrun(t *testing.T, g *fakegw.Gateway, args ...string) (code int, errOut string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	env := srunEnv(t, g)
	go func() {
		defer close(done)
		code, _, errOut = mainSrun(ctx, env, args...)
	}()
	testkit.WaitFor(t, 10*time.Second, "srun to watch its step", func() (bool, error) {
		return len(fakegw.Requests[*loomv1.GetJobStepRequest](g)) > 0, nil
	})
	cancel() // as SIGINT does
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("srun did not end after it was interrupted")
	}
	return code, errOut
}

// TestSrunExportNone: srun --export with NONE in a list, as Slurm 22.05's
// srun gave it on this machine (scripts/slurm-local.sh, BAR=2 exported):
// NONE,FOO=1 and NONE,ALL gave neither FOO nor BAR (a list that starts
// with NONE is NONE), ALL,NONE gave BAR=2, FOO=1,NONE gave FOO=1 alone.
func TestSrunExportNone(t *testing.T) {
	t.Parallel()
	env := map[string]string{"BAR": "2", "SLURM_JOB_ID": "5"}
	for _, tc := range []struct {
		export string
		want   map[string]string
	}{
		{"NONE,FOO=1", map[string]string{"SLURM_JOB_ID": "5"}},
		{"NONE,ALL", map[string]string{"SLURM_JOB_ID": "5"}},
		{"ALL,NONE", map[string]string{"SLURM_JOB_ID": "5", "BAR": "2"}},
		{"FOO=1,NONE", map[string]string{"SLURM_JOB_ID": "5", "FOO": "1"}},
	} {
		got, err := exportedTaskEnv(tc.export, env)
		if err != nil || !maps.Equal(got, tc.want) {
			t.Errorf("srun --export=%s: %v %v, want %v", tc.export, got, err, tc.want)
		}
	}
}

// TestSrunDistribution: -m/--distribution is checked as Slurm 22.05's
// srun checks it (beside Loom, scripts/slurm-local.sh): a bad
// specification is "Invalid --distribution specification", exit 255
// (plane without a size says so first), arbitrary without -w Slurm's
// words, exit 1 (all measured beside Slurm 22.05, as "*:*" taken and
// "arbitrary:cyclic" and "plane=2,Pack" refused). block, cyclic and
// plane=N (any case, with their socket and core levels and ,Pack/,NoPack)
// go to the step as Slurm reads them back, for the scheduler to lay the
// tasks out by; arbitrary, which Loom does not lay out by -w's list, is
// taken where its layout is block's all the same (one node, one task, one
// task a node) and refused, naming the option, where it is not.
func TestSrunDistribution(t *testing.T) {
	t.Parallel()
	const invalid = "srun: error: Invalid --distribution specification\n"
	for _, tc := range []struct {
		args   []string
		code   int
		errOut string
		sent   string // the step's distribution, when it runs
	}{
		{[]string{"-m", "bogus"}, 255, invalid, ""},
		{[]string{"-m", "fcyclic"}, 255, invalid, ""},
		{[]string{"-m", "*"}, 255, invalid, ""},
		{[]string{"-m", ""}, 255, invalid, ""},
		{[]string{"-m", "block,foo"}, 255, invalid, ""},
		{[]string{"-m", "block:plane"}, 255, invalid, ""},
		{[]string{"-m", "block:block:block:block"}, 255, invalid, ""},
		{[]string{"-m", "plane=x"}, 255, "srun: error: Invalid plane size or size not specified\n" + invalid, ""},
		{[]string{"-m", "plane=0"}, 255, "srun: error: Invalid plane size or size not specified\n" + invalid, ""},
		{[]string{"--distribution=plane"}, 255, "srun: error: Invalid plane size or size not specified\n" + invalid, ""},
		{[]string{"-m", "arbitrary:cyclic"}, 255, invalid, ""},
		{[]string{"-m", "plane=2,Pack"}, 255, "srun: error: Invalid plane size or size not specified\n" + invalid, ""},
		{[]string{"-m", "arbitrary"}, 1, "srun: error: With Arbitrary distribution you need to specify a nodelist or hostfile with the -w option\n", ""},
		{[]string{"-N2", "-n6", "-w", "node1,node1,node2", "-m", "arbitrary"}, 1, "srun: error: --distribution=arbitrary: Loom does not place tasks " +
			"by -w's host list (arbitrary) on more than one node with more tasks than nodes; use -m block, cyclic or plane=N\n", ""},
		{[]string{"-m", "cyclic"}, 0, "", "cyclic"},
		{[]string{"-N2", "-n6", "-m", "plane=2"}, 0, "", "plane=2"},
		{[]string{"-m", "BLOCK"}, 0, "", "block"},
		{[]string{"-m", "block:*:fcyclic,NoPack"}, 0, "", "block:cyclic:fcyclic,nopack"},
		{[]string{"-m", "*:*"}, 0, "", "block:cyclic"},
		{[]string{"-N1", "-m", "cyclic"}, 0, "", "cyclic"},
		{[]string{"-n1", "-m", "plane=4"}, 0, "", "plane=4"},
		{[]string{"-N2", "-n2", "-m", "Cyclic:block"}, 0, "", "cyclic:block"},
		{[]string{"-N1", "-w", "node1", "-m", "arbitrary"}, 0, "", "arbitrary"},
		{nil, 0, "", ""},
	} {
		g := srunGateway(t, 1, 0, 0)
		code, _, errOut := runSrun(context.Background(), t, g, append(tc.args, "true")...)
		// A step that runs: its tasks' own stderr ("warn N"), no refusal.
		if code != tc.code || (tc.code != 0 && errOut != tc.errOut) || (tc.code == 0 && strings.Contains(errOut, "srun:")) {
			t.Errorf("srun %v: exit %d, stderr %q, want %d %q", tc.args, code, errOut, tc.code, tc.errOut)
		}
		if want := tc.code == 0; (len(stepsCreated(g)) == 1) != want {
			t.Errorf("srun %v: steps created %v, want a step: %v", tc.args, stepsCreated(g), want)
		} else if want && stepsCreated(g)[0].GetDistribution() != tc.sent {
			t.Errorf("srun %v: step asked with -m %q, want %q", tc.args, stepsCreated(g)[0].GetDistribution(), tc.sent)
		}
	}
}

// TestSrunAndSallocCpusPerGPU: srun and salloc take --cpus-per-gpu, as
// Slurm 22.05's (checked beside one): outside a job srun's allocation
// asks it (and SLURM_CPUS_PER_GPU, srun's input variable, sets it), salloc's
// too, whose command gets SLURM_CPUS_PER_GPU; inside a job srun accepts it
// for a step. With -c, or not a positive count, each says Slurm's words,
// exit 1, and nothing is asked.
func TestSrunAndSallocCpusPerGPU(t *testing.T) {
	t.Parallel()
	g := srunGateway(t, 1, 0)
	if code, _, errOut := srunOutside(context.Background(), t, g, "--gres=gpu:2", "--cpus-per-gpu=3", "hostname"); code != 0 ||
		len(jobsSubmitted(g)) != 1 || jobsSubmitted(g)[0].GetJob().GetCpusPerGpu() != 3 {
		t.Fatalf("srun --cpus-per-gpu=3 outside a job: exit %d, stderr %q, submitted %v", code, errOut, jobsSubmitted(g))
	}
	g = srunGateway(t, 1, 0)
	env := Env{Conn: g.Dial(t), Project: "default", Cluster: "projects/default/clusters/c", User: "ada", Cwd: g.StepOutputDir,
		CallTimeout: 10 * time.Second, Environ: map[string]string{"PATH": "/bin", "SLURM_CPUS_PER_GPU": "5"}}
	if code, _, errOut := mainSrun(context.Background(), env, "--gres=gpu:1", "hostname"); code != 0 || len(jobsSubmitted(g)) != 1 ||
		jobsSubmitted(g)[0].GetJob().GetCpusPerGpu() != 5 {
		t.Fatalf("SLURM_CPUS_PER_GPU=5 srun: exit %d, stderr %q, submitted %v", code, errOut, jobsSubmitted(g))
	}
	g = srunGateway(t, 1, 0)
	if code, _, errOut := runSrun(context.Background(), t, g, "--cpus-per-gpu=2", "hostname"); code != 0 || len(stepsCreated(g)) != 1 {
		t.Fatalf("srun --cpus-per-gpu=2 in a job: exit %d, stderr %q, steps %v", code, errOut, stepsCreated(g))
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-c2", "--cpus-per-gpu=2", "--gres=gpu:1"}, "srun: error: --cpus-per-gpu is mutually exclusive with --cpus-per-task\n" +
			"srun: error: Invalid generic resource (gres) specification\n"},
		{[]string{"--cpus-per-gpu=x"}, "srun: error: Invalid numeric value \"x\" for --cpus-per-gpu.\n"},
		{[]string{"--cpus-per-gpu=0"}, "srun: error: Invalid numeric value \"0\" for --cpus-per-gpu.\n"},
	} {
		for _, outside := range []bool{true, false} {
			g = srunGateway(t, 1, 0)
			run := runSrun
			if outside {
				run = srunOutside
			}
			code, _, errOut := run(context.Background(), t, g, append(tc.args, "hostname")...)
			if code != 1 || errOut != tc.want || len(jobsSubmitted(g))+len(stepsCreated(g)) != 0 {
				t.Errorf("srun %v (outside a job: %v): exit %d, stderr %q; want 1, %q, nothing asked", tc.args, outside, code, errOut, tc.want)
			}
		}
	}

	g = srunGateway(t, 1, 0)
	env = Env{Conn: g.Dial(t), Project: "default", Cluster: stepCluster, User: "ada", Cwd: g.StepOutputDir, CallTimeout: 10 * time.Second,
		Environ: map[string]string{"PATH": "/usr/bin:/bin", "SHELL": "/bin/sh"}}
	code, out, errOut := salloc(context.Background(), t, env, "", "-Q", "--gres=gpu:2", "--cpus-per-gpu=3", "sh", "-c", `echo "$SLURM_CPUS_PER_GPU"`)
	if code != 0 || out != "3\n" || len(jobsSubmitted(g)) != 1 || jobsSubmitted(g)[0].GetJob().GetCpusPerGpu() != 3 {
		t.Fatalf("salloc --cpus-per-gpu=3: exit %d, stdout %q, stderr %q, submitted %v", code, out, errOut, jobsSubmitted(g))
	}
	g = srunGateway(t, 1, 0)
	env.Conn = g.Dial(t)
	code, _, errOut = salloc(context.Background(), t, env, "", "-c2", "--cpus-per-gpu=2", "--gres=gpu:1", "true")
	if want := "salloc: error: --cpus-per-gpu is mutually exclusive with --cpus-per-task\nsalloc: error: Invalid generic resource (gres) specification\n"; code != 1 ||
		errOut != want || len(jobsSubmitted(g)) != 0 {
		t.Fatalf("salloc -c2 --cpus-per-gpu=2: exit %d, stderr %q; want 1, %q", code, errOut, want)
	}
}

// TestSrunTakesTheJobsTaskCount: inside a job srun reads SLURM_NTASKS and
// SLURM_NPROCS as its -n, as Slurm 22.05's (measured beside one in a -N2
// -n4 job): SLURM_NTASKS=2 runs 2 tasks, SLURM_NPROCS=3 alone 3, both
// set SLURM_NTASKS wins, the command line's -n wins over either; a value
// -n would refuse is refused in -n's words, exit 1, set but empty too. A
// task count from the job that is not --ntasks-per-node times the nodes
// (or -N with -n) drops --ntasks-per-node with Slurm's warning.
func TestSrunTakesTheJobsTaskCount(t *testing.T) {
	t.Parallel()
	const honor = "srun: Warning: can't honor --ntasks-per-node set to %d which doesn't match the requested tasks %d " +
		"with the number of requested nodes %d. Ignoring --ntasks-per-node.\n"
	for _, tc := range []struct {
		env           map[string]string
		args          []string
		code          int
		errOut        string
		tasks, perNde int32 // asked of the step, when it runs
	}{
		{map[string]string{"SLURM_NTASKS": "2"}, nil, 0, "", 2, 0},
		{map[string]string{"SLURM_NPROCS": "3"}, nil, 0, "", 3, 0},
		{map[string]string{"SLURM_NTASKS": "2", "SLURM_NPROCS": "3"}, nil, 0, "", 2, 0},
		{map[string]string{"SLURM_NTASKS": " 2"}, nil, 0, "", 2, 0},
		{map[string]string{"SLURM_NTASKS": "2"}, []string{"-n3"}, 0, "", 3, 0},
		{nil, nil, 0, "", 0, 0}, // the job's own layout (the scheduler's)
		{map[string]string{"SLURM_NTASKS": "abc"}, nil, 1, "srun: error: Invalid numeric value \"abc\" for --ntasks.\n", 0, 0},
		{map[string]string{"SLURM_NTASKS": "0"}, nil, 1, "srun: error: Invalid numeric value \"0\" for --ntasks.\n", 0, 0},
		{map[string]string{"SLURM_NTASKS": "-1"}, nil, 1, "srun: error: Invalid numeric value \"-1\" for --ntasks.\n", 0, 0},
		{map[string]string{"SLURM_NTASKS": ""}, nil, 1, "srun: error: Invalid numeric value \"\" for --ntasks.\n", 0, 0},
		{map[string]string{"SLURM_NTASKS": "4", "SLURM_NPROCS": "abc"}, nil, 1, "srun: error: Invalid numeric value \"abc\" for --ntasks.\n", 0, 0},
		// -N2 --ntasks-per-node=2: the job's both, which agree.
		{map[string]string{"SLURM_NTASKS": "4", "SLURM_NTASKS_PER_NODE": "2"}, nil, 0, "", 4, 2},
		{map[string]string{"SLURM_NTASKS": "4", "SLURM_NTASKS_PER_NODE": "2"}, []string{"-N1"}, 0, fmt.Sprintf(honor, 2, 4, 1), 4, 0},
		{map[string]string{"SLURM_NTASKS": "4"}, []string{"--ntasks-per-node=1"}, 0, fmt.Sprintf(honor, 1, 4, 2), 4, 0},
		{map[string]string{"SLURM_NTASKS": "4"}, []string{"--ntasks-per-node=1", "--quiet"}, 0, "", 4, 0},
		{map[string]string{"SLURM_NTASKS": "4"}, []string{"-N1", "-n2", "--ntasks-per-node=1"}, 0, fmt.Sprintf(honor, 1, 2, 1), 2, 0},
		{map[string]string{"SLURM_NTASKS": "4"}, []string{"-n2", "--ntasks-per-node=2"}, 0, "", 2, 2},
		{map[string]string{"SLURM_NTASKS": "4"}, []string{"-n2", "--ntasks-per-node=1"}, 0, "", 2, 1},
	} {
		g := srunGateway(t, 1, 0, 0)
		env := srunEnv(t, g)
		env.Environ = mergeMaps(env.Environ, tc.env)
		code, _, errOut := mainSrun(context.Background(), env, append(tc.args, "true")...)
		// A step that runs: its tasks' own stderr ("warn N") after srun's.
		if code != tc.code || (tc.code != 0 && errOut != tc.errOut) || (tc.code == 0 && !strings.HasPrefix(errOut, tc.errOut)) ||
			(tc.code == 0 && strings.Count(errOut, "srun:") != strings.Count(tc.errOut, "srun:")) {
			t.Errorf("%v srun %v: exit %d, stderr %q, want %d %q", tc.env, tc.args, code, errOut, tc.code, tc.errOut)
		}
		if want := tc.code == 0; (len(stepsCreated(g)) == 1) != want {
			t.Errorf("%v srun %v: steps created %v, want a step: %v", tc.env, tc.args, stepsCreated(g), want)
		} else if want && (stepsCreated(g)[0].GetNtasks() != tc.tasks || stepsCreated(g)[0].GetNtasksPerNode() != tc.perNde) {
			t.Errorf("%v srun %v: step asked -n %d --ntasks-per-node %d, want %d %d", tc.env, tc.args,
				stepsCreated(g)[0].GetNtasks(), stepsCreated(g)[0].GetNtasksPerNode(), tc.tasks, tc.perNde)
		}
	}
}

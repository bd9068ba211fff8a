package slurmcli

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/testkit"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// stepGateway serves the job-step RPCs srun calls. Its step's tasks are
// played by the test: it writes their output files, then ends the step
// with the exit codes it chose, the way the agents and the scheduler do.
type stepGateway struct {
	loomv1.UnimplementedJobServiceServer
	mu       sync.Mutex
	dir      string
	refuse   error
	codes    []int32
	created  []*loomv1.CreateJobStepRequest
	cancels  []string
	step     *loomv1.JobStep
	gets     int
	endAfter int // GetJobStep calls after which the step ends

	// srun outside an allocation: the job it submits, pending for
	// pendingPolls GetJob calls, and the CancelJobs it sends.
	submitted    []*loomv1.SubmitJobRequest
	pendingPolls int
	jobCancels   []*loomv1.CancelJobRequest
}

const allocJob = "projects/default/jobs/40"

func (g *stepGateway) SubmitJob(_ context.Context, req *loomv1.SubmitJobRequest) (*loomv1.Job, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.submitted = append(g.submitted, proto.Clone(req).(*loomv1.SubmitJobRequest))
	return &loomv1.Job{Name: allocJob, JobId: "40", State: loomv1.JobState_PENDING}, nil
}

func (g *stepGateway) GetJob(_ context.Context, req *loomv1.GetJobRequest) (*loomv1.Job, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if req.GetName() != allocJob || len(g.submitted) == 0 {
		return nil, status.Error(codes.NotFound, "no such job")
	}
	st := loomv1.JobState_RUNNING
	if g.pendingPolls > 0 {
		g.pendingPolls--
		st = loomv1.JobState_PENDING
	}
	return &loomv1.Job{Name: allocJob, JobId: "40", State: st}, nil
}

func (g *stepGateway) CancelJob(_ context.Context, req *loomv1.CancelJobRequest) (*loomv1.Job, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.jobCancels = append(g.jobCancels, proto.Clone(req).(*loomv1.CancelJobRequest))
	return &loomv1.Job{Name: req.GetName(), JobId: "40", State: loomv1.JobState_RUNNING}, nil
}

// srunOutside runs srun with no allocation in its environment, against g.
func srunOutside(ctx context.Context, t *testing.T, g *stepGateway, args ...string) (int, string, string) {
	t.Helper()
	env := Env{Conn: startStepGateway(t, g), Project: "default", Cluster: "projects/default/clusters/c", User: "ada",
		Cwd: g.dir, Environ: map[string]string{"PATH": "/usr/bin:/bin", "KEEP": "me"}, CallTimeout: 10 * time.Second}
	return mainSrun(ctx, env, args...)
}

// TestSrunOutsideAnAllocation: srun with no job around asks for an
// allocation (a job whose batch script holds the nodes), waits for it as
// Slurm's srun says, runs the command as its step and ends the job as the
// step ended.
func TestSrunOutsideAnAllocation(t *testing.T) {
	t.Parallel()
	g := &stepGateway{dir: t.TempDir(), codes: []int32{0, 0}, endAfter: 1, pendingPolls: 10} // pending for 2 s
	code, out, errOut := srunOutside(context.Background(), t, g, "-N2", "-p", "gpu", "-t", "5", "--gres=gpu:2", "-l", "hostname")
	if code != 0 || !strings.HasPrefix(errOut, "srun: job 40 queued and waiting for resources\nsrun: job 40 has been allocated resources\n") ||
		!strings.Contains(out, "0: hello from 0\n") || !strings.Contains(out, "1: hello from 1\n") {
		t.Fatalf("srun -N2 hostname: exit %d\nstdout %q\nstderr %q", code, out, errOut)
	}
	if len(g.submitted) != 1 {
		t.Fatalf("submitted %v, want one allocation", g.submitted)
	}
	j := g.submitted[0].GetJob()
	if j.GetNodeCount() != 2 || j.GetPartition() != "gpu" || j.GetTimeLimitSeconds() != 300 || j.GetGpusPerNode() != 2 ||
		j.GetDisplayName() != "hostname" || j.GetScript() != srunHolder || j.GetUser() != "ada" || j.GetCluster() != "projects/default/clusters/c" ||
		j.GetSubmitHost() == "" || j.GetSubmitDir() != g.dir {
		t.Fatalf("allocation %v", j)
	}
	if len(g.created) != 1 || g.created[0].GetParent() != allocJob || !slices.Equal(g.created[0].GetCommand(), []string{"hostname"}) ||
		g.created[0].GetEnv()["KEEP"] != "me" {
		t.Fatalf("steps %v, want hostname in job 40", g.created)
	}
	// The holder ends the job COMPLETED: USR1 to the batch shell alone.
	if len(g.jobCancels) != 1 || g.jobCancels[0].GetSignal() != "USR1" || !g.jobCancels[0].GetBatch() || g.jobCancels[0].GetName() != allocJob {
		t.Fatalf("job ends with %v, want USR1 to its batch shell", g.jobCancels)
	}

	// A failing step: srun's exit code, and the job ends FAILED (USR2).
	g = &stepGateway{dir: t.TempDir(), codes: []int32{0, 3}, endAfter: 1}
	code, _, errOut = srunOutside(context.Background(), t, g, "-N2", "false")
	if code != 3 || len(g.jobCancels) != 1 || g.jobCancels[0].GetSignal() != "USR2" {
		t.Fatalf("failing step: exit %d, stderr %q, job ends with %v", code, errOut, g.jobCancels)
	}

	// Interrupted while waiting for its allocation, srun cancels the job.
	g = &stepGateway{dir: t.TempDir(), pendingPolls: 1 << 30}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(500*time.Millisecond, cancel)
	code, _, errOut = srunOutside(ctx, t, g, "hostname")
	if code == 0 || !strings.Contains(errOut, "Job allocation 40 has been revoked") || len(g.created) != 0 ||
		len(g.jobCancels) != 1 || g.jobCancels[0].GetSignal() != "" {
		t.Fatalf("interrupted: exit %d, stderr %q, steps %v, cancels %v", code, errOut, g.created, g.jobCancels)
	}

	// --jobid: a step in a running job of one's own, from outside it; no allocation.
	g = &stepGateway{dir: t.TempDir(), codes: []int32{0}, endAfter: 1}
	code, _, errOut = srunOutside(context.Background(), t, g, "--jobid=12", "hostname")
	if code != 0 || len(g.submitted) != 0 || len(g.created) != 1 || g.created[0].GetParent() != "projects/default/jobs/12" {
		t.Fatalf("--jobid=12: exit %d, stderr %q, submitted %v, steps %v", code, errOut, g.submitted, g.created)
	}
	if code, _, errOut := srunOutside(context.Background(), t, &stepGateway{dir: t.TempDir()}, "--jobid=x1", "hostname"); code == 0 ||
		errOut != "srun: error: Invalid job id: x1\n" {
		t.Fatalf("--jobid=x1: exit %d, stderr %q", code, errOut)
	}
	// srun's input variables set the allocation's defaults; its command
	// line wins; sbatch's input variables are not srun's.
	g = &stepGateway{dir: t.TempDir(), codes: []int32{0}, endAfter: 1}
	env := Env{Conn: startStepGateway(t, g), Project: "default", Cluster: "projects/default/clusters/c", User: "ada", Cwd: g.dir,
		CallTimeout: 10 * time.Second, Environ: map[string]string{"PATH": "/bin", "SLURM_PARTITION": "debug", "SLURM_TIMELIMIT": "7",
			"SBATCH_QOS": "high", "SLURM_ACCOUNT": "lab"}}
	if code, _, errOut := mainSrun(context.Background(), env, "-A", "research", "hostname"); code != 0 || len(g.submitted) != 1 ||
		g.submitted[0].GetJob().GetPartition() != "debug" || g.submitted[0].GetJob().GetTimeLimitSeconds() != 420 ||
		g.submitted[0].GetJob().GetAccount() != "research" || g.submitted[0].GetJob().GetQos() == "high" {
		t.Fatalf("input variables: exit %d, stderr %q, submitted %v", code, errOut, g.submitted)
	}
	// --pty asks for what Loom's steps cannot give: refused, nothing submitted.
	g = &stepGateway{dir: t.TempDir()}
	code, _, errOut = srunOutside(context.Background(), t, g, "--pty", "bash")
	if code == 0 || !strings.HasPrefix(errOut, "srun: error: --pty is not supported") || len(g.submitted) != 0 {
		t.Fatalf("--pty: exit %d, stderr %q, submitted %v", code, errOut, g.submitted)
	}
	// Bad allocation options are refused as srun's (exit 255, as Slurm's),
	// nothing submitted.
	for _, bad := range [][]string{{"--time=soon"}, {"-N", "abc"}, {"--bogus"}} {
		g = &stepGateway{dir: t.TempDir()}
		code, _, errOut = srunOutside(context.Background(), t, g, append(bad, "hostname")...)
		if code != 255 || !strings.HasPrefix(errOut, "srun: ") || len(g.submitted) != 0 {
			t.Fatalf("srun %v: exit %d, stderr %q, submitted %v", bad, code, errOut, g.submitted)
		}
	}
}

func (g *stepGateway) CreateJobStep(_ context.Context, req *loomv1.CreateJobStepRequest) (*loomv1.JobStep, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.created = append(g.created, proto.Clone(req).(*loomv1.CreateJobStepRequest))
	if g.refuse != nil {
		return nil, g.refuse
	}
	n := int32(len(g.codes))
	g.step = &loomv1.JobStep{Name: req.GetParent() + "/steps/3", Job: req.GetParent(), StepId: 3,
		State: loomv1.JobState_RUNNING, Nodes: []string{"gpu-0001", "gpu-0002"}, TasksPerNode: []int32{n - n/2, n / 2},
		NumTasks: n, OutputDir: g.dir, TaskExitCodes: make([]int32, n), RequestId: req.GetRequestId()}
	for r := int32(0); r < n; r++ {
		out := fmt.Sprintf("hello from %d\nsecond line %d", r, r) // the last line unterminated
		if err := os.WriteFile(filepath.Join(g.dir, fmt.Sprintf("task-%d.out", r)), []byte(out), 0o644); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(g.dir, fmt.Sprintf("task-%d.err", r)), []byte(fmt.Sprintf("warn %d\n", r)), 0o644); err != nil {
			return nil, err
		}
	}
	return proto.Clone(g.step).(*loomv1.JobStep), nil
}

func (g *stepGateway) GetJobStep(_ context.Context, req *loomv1.GetJobStepRequest) (*loomv1.JobStep, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.step == nil || req.GetName() != g.step.GetName() {
		return nil, status.Error(codes.NotFound, "no such step")
	}
	g.gets++
	if g.gets > g.endAfter && g.step.GetState() == loomv1.JobState_RUNNING {
		g.step.TaskExitCodes = append([]int32(nil), g.codes...)
		g.step.State = loomv1.JobState_COMPLETED
		for _, c := range g.codes {
			g.step.ExitCode = max(g.step.ExitCode, c)
			if c != 0 {
				g.step.State = loomv1.JobState_FAILED
			}
		}
	}
	return proto.Clone(g.step).(*loomv1.JobStep), nil
}

func (g *stepGateway) CancelJobStep(_ context.Context, req *loomv1.CancelJobStepRequest) (*loomv1.JobStep, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.cancels = append(g.cancels, req.GetName())
	if g.step != nil {
		g.step.State, g.step.Reason = loomv1.JobState_CANCELLED, "cancelled"
		for i := range g.step.TaskExitCodes {
			g.step.TaskExitCodes[i] = 128 + 15
		}
		g.step.ExitCode = 128 + 15
	}
	return proto.Clone(g.step).(*loomv1.JobStep), nil
}

func startStepGateway(t *testing.T, g *stepGateway) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	loomv1.RegisterJobServiceServer(srv, g)
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		srv.Stop()
	})
	return conn
}

// allocEnv is a two-node allocation's batch environment.
func allocEnv() map[string]string {
	return map[string]string{"SLURM_JOB_ID": "12", "SLURM_NNODES": "2", "SLURM_JOB_NODELIST": "gpu-[0001-0002]",
		"SLURMD_NODENAME": "gpu-0001", "SLURM_PROCID": "0", "PATH": "/usr/bin:/bin", "KEEP": "me", "CUDA_VISIBLE_DEVICES": "0,1"}
}

func runSrun(ctx context.Context, t *testing.T, g *stepGateway, args ...string) (int, string, string) {
	t.Helper()
	return mainSrun(ctx, srunEnv(t, g), args...)
}

// srunEnv is srun's environment in a two-node allocation, talking to g.
func srunEnv(t *testing.T, g *stepGateway) Env {
	t.Helper()
	return Env{Conn: startStepGateway(t, g), Project: "default", Cwd: g.dir, Environ: allocEnv(), CallTimeout: 10 * time.Second}
}

func mainSrun(ctx context.Context, env Env, args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := Main(ctx, "srun", args, env, &out, &errb)
	return code, out.String(), errb.String()
}

func TestSrunMultiNodeStreamsLabelledOutputAndExitCode(t *testing.T) {
	t.Parallel()
	g := &stepGateway{dir: t.TempDir(), codes: []int32{0, 3, 0, 0}, endAfter: 1}
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
	if len(g.created) != 1 {
		t.Fatalf("CreateJobStep called %d times, want 1", len(g.created))
	}
	req := g.created[0]
	if req.GetParent() != "projects/default/jobs/12" || req.GetNodeCount() != 2 || req.GetNtasksPerNode() != 2 ||
		req.GetNtasks() != 0 || !req.GetKillOnBadExit() || strings.Join(req.GetCommand(), " ") != "python train.py" ||
		req.GetWorkDir() != g.dir || req.GetRequestId() == "" {
		t.Errorf("CreateJobStep request %v", req)
	}
	if req.GetEnv()["KEEP"] != "me" || req.GetEnv()["SLURM_PROCID"] != "" {
		t.Errorf("step env %v: want the exported env without per-task variables", req.GetEnv())
	}
}

func TestSrunMultiNodeRefusals(t *testing.T) {
	t.Parallel()
	g := &stepGateway{dir: t.TempDir(), refuse: status.Error(codes.FailedPrecondition, "Job/step already completing or completed")}
	code, _, errOut := runSrun(context.Background(), t, g, "hostname")
	if code != 1 || errOut != "srun: error: Unable to create step for job 12: Job/step already completing or completed\n" {
		t.Errorf("job not running: exit %d, stderr %q", code, errOut)
	}
	g = &stepGateway{dir: t.TempDir(), refuse: status.Error(codes.InvalidArgument, "node_count: too many")}
	if code, _, errOut := runSrun(context.Background(), t, g, "-N", "2", "hostname"); code != 1 ||
		!strings.HasPrefix(errOut, "srun: error: Unable to create step for job 12: node_count") {
		t.Errorf("bad request: exit %d, stderr %q", code, errOut)
	}
	// A one-node step is the scheduler's too (a job step in sacct, its own
	// step id), unless srun has input for task 0: that runs on the batch
	// node, as Loom's steps take no input.
	g = &stepGateway{dir: t.TempDir(), codes: []int32{0}, endAfter: 1}
	if code, _, errOut := runSrun(context.Background(), t, g, "-N1", "echo", "step"); code != 0 || len(g.created) != 1 ||
		g.created[0].GetNodeCount() != 1 || !slices.Equal(g.created[0].GetCommand(), []string{"echo", "step"}) {
		t.Errorf("-N1: exit %d, stderr %q, creates %v", code, errOut, g.created)
	}
	// A job of another project: its step is asked of the job by its own
	// name (LOOM_JOB_NAME, set by the scheduler), LOOM_PROJECT or not.
	g = &stepGateway{dir: t.TempDir(), codes: []int32{0}, endAfter: 1}
	env := srunEnv(t, g)
	env.Environ["LOOM_JOB_NAME"] = "projects/research/jobs/12"
	if code, _, errOut := mainSrun(context.Background(), env, "hostname"); code != 0 || len(g.created) != 1 ||
		g.created[0].GetParent() != "projects/research/jobs/12" {
		t.Errorf("job of project research: exit %d, stderr %q, creates %v", code, errOut, g.created)
	}
	g = &stepGateway{dir: t.TempDir()}
	env = srunEnv(t, g)
	env.Stdin = strings.NewReader("input\n")
	if code, out, errOut := mainSrun(context.Background(), env, "-N1", "cat"); code != 0 || out != "input\n" || len(g.created) != 0 {
		t.Errorf("-N1 with input: exit %d, out %q, stderr %q, creates %d", code, out, errOut, len(g.created))
	}
	if code, _, errOut := runSrun(context.Background(), t, g, "-N3", "hostname"); code != 1 ||
		errOut != "srun: error: Only allocated 2 nodes asked for 3\n" { // Slurm's words
		t.Errorf("-N3 of 2: exit %d, stderr %q", code, errOut)
	}
}

func TestSrunMultiNodeCancelsStepWhenInterrupted(t *testing.T) {
	t.Parallel()
	// The step never ends by itself: only the cancel ends it.
	g := &stepGateway{dir: t.TempDir(), codes: []int32{0, 0}, endAfter: 1 << 30}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	var code int
	var errOut string
	env := srunEnv(t, g)
	go func() {
		defer close(done)
		code, _, errOut = mainSrun(ctx, env, "sleep", "1000")
	}()
	testkit.WaitFor(t, 10*time.Second, "srun to watch its step", func() (bool, error) {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.gets > 0, nil
	})
	cancel() // as SIGINT does
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("srun did not end after it was interrupted")
	}
	if len(g.cancels) != 1 || g.cancels[0] != "projects/default/jobs/12/steps/3" {
		t.Errorf("CancelJobStep calls %v, want one for step 3", g.cancels)
	}
	if code != 143 || !strings.Contains(errOut, "task 0: Terminated") {
		t.Errorf("exit %d, stderr %q; want 143 and the tasks' end", code, errOut)
	}
}

package slurmcli

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/testkit"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// salloc runs salloc against g with env's Environ (PATH and SHELL), stdin
// the command's input.
func salloc(ctx context.Context, t *testing.T, env Env, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	env.Stdin = strings.NewReader(stdin)
	code := Main(ctx, "salloc", args, env, &out, &errb)
	return code, out.String(), errb.String()
}

// sallocEnv is an Env for salloc against a fake gateway of its own; it
// returns the gateway's CancelJob and SubmitJob requests so far and a job
// client on the same connection.
func sallocEnv(t *testing.T) (Env, func() []*loomv1.CancelJobRequest, func() []*loomv1.SubmitJobRequest, *loomv1.JobServiceClient) {
	g := srunGateway(t, 1, 0)
	env := Env{Conn: g.Dial(t), Project: "default", Cluster: stepCluster, User: "ada", Cwd: g.StepOutputDir, CallTimeout: 10 * time.Second,
		Environ: map[string]string{"PATH": "/usr/bin:/bin", "SHELL": "/bin/sh", "SLURMD_NODENAME": "login-1", "SBATCH_PARTITION": "debug"}}
	client := loomv1.NewJobServiceClient(env.Conn)
	return env, func() []*loomv1.CancelJobRequest { return jobCancels(g) }, func() []*loomv1.SubmitJobRequest { return jobsSubmitted(g) }, &client
}

// TestSalloc: salloc asks for an allocation (a job whose batch script holds
// the nodes), runs its command here with the allocation's SLURM_*
// variables, and ends the job as the command ended; an allocation that
// ends first hangs the command up; sbatch's options that are not salloc's
// are refused as Slurm's getopt refuses them.
func TestSalloc(t *testing.T) {
	t.Parallel()
	envFor := sallocEnv
	env, cancels, submits, _ := envFor(t)
	code, out, errOut := salloc(context.Background(), t, env, "", "-N2", "-p", "gpu", "-t", "5", "-n", "4", "sh", "-c",
		`echo "$SLURM_JOB_ID $SLURM_NNODES $SLURM_JOB_NODELIST $SLURM_JOB_NAME $SLURM_NTASKS $SLURM_JOB_PARTITION [$SLURMD_NODENAME]"`)
	if code != 0 || out != "40 2 gpu-[0001-0002] sh 4 gpu []\n" ||
		errOut != "salloc: Granted job allocation 40\nsalloc: Relinquishing job allocation 40\n" {
		t.Fatalf("salloc -N2 sh -c ...: exit %d\nstdout %q\nstderr %q", code, out, errOut)
	}
	j := submits()[0].GetJob()
	if len(submits()) != 1 || j.GetScript() != srunHolder || j.GetNodeCount() != 2 || j.GetPartition() != "gpu" || j.GetTimeLimitSeconds() != 300 ||
		j.GetDisplayName() != "sh" || j.GetUser() != "ada" {
		t.Fatalf("allocation %v", submits())
	}
	if c := cancels(); len(c) != 1 || c[0].ExitCode == nil || c[0].GetExitCode() != 0 || c[0].GetName() != allocJob {
		t.Fatalf("job ends with %v, want exit code 0", c)
	}

	// -D: salloc, and so its command, works there.
	env, _, _, _ = envFor(t)
	if err := os.Mkdir(filepath.Join(env.Cwd, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := salloc(context.Background(), t, env, "", "-Q", "-D", "sub", "sh", "-c", "pwd"); code != 0 || out != filepath.Join(env.Cwd, "sub")+"\n" {
		t.Fatalf("salloc -D sub pwd: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	// A failing command: its exit code, and the job ends with it (FAILED).
	// No command: the user's shell, reading the caller's input, in a job
	// named "interactive"; -Q keeps salloc quiet; SBATCH_* are not salloc's.
	env, cancels, submits, _ = envFor(t)
	code, out, errOut = salloc(context.Background(), t, env, "echo in $SLURM_JOB_ID\nexit 3\n", "-Q")
	if code != 3 || out != "in 40\n" || errOut != "" || submits()[0].GetJob().GetDisplayName() != "interactive" ||
		submits()[0].GetJob().GetPartition() != "" || len(cancels()) != 1 || cancels()[0].GetExitCode() != 3 {
		t.Fatalf("salloc -Q (shell): exit %d, stdout %q, stderr %q, job %v, cancels %v", code, out, errOut, submits()[0].GetJob(), cancels())
	}

	// The allocation ends under the command (scancel, its time limit):
	// the command is hung up on, and the job is not ended again.
	env, cancels, _, client := envFor(t)
	started := filepath.Join(env.Cwd, "started")
	go func() {
		ctx := testkit.Context(t, 10*time.Second)
		for ctx.Err() == nil {
			if _, err := os.Stat(started); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond) // polling a file: no event to wait on
		}
		_, _ = (*client).CancelJob(ctx, &loomv1.CancelJobRequest{Name: allocJob, User: "ada"})
	}()
	code, _, errOut = salloc(context.Background(), t, env, "", "sh", "-c", "touch started; exec sleep 30")
	if code != 129 || !strings.Contains(errOut, "salloc: Job allocation 40 has been revoked (CANCELLED).\n") ||
		strings.Contains(errOut, "Relinquishing") || len(cancels()) != 1 {
		t.Fatalf("revoked: exit %d, stderr %q, cancels %v", code, errOut, cancels())
	}

	for _, args := range [][]string{{"--array=0-3", "true"}, {"--wrap=true"}, {"-o", "out.txt", "true"}} {
		env, _, submits, _ := envFor(t)
		code, _, errOut := salloc(context.Background(), t, env, "", args...)
		if code != 255 || !strings.HasPrefix(errOut, "salloc: unrecognized option '") || len(submits()) != 0 {
			t.Errorf("salloc %v: exit %d, stderr %q, submitted %v", args, code, errOut, submits())
		}
	}
	env, _, submits, _ = envFor(t)
	if code, _, errOut := salloc(context.Background(), t, env, "", "no-such-command-xyz"); code != 1 || len(submits()) != 0 ||
		errOut != "salloc: error: no-such-command-xyz: command not found\n" {
		t.Errorf("a missing command: exit %d, stderr %q, submitted %v (want nothing queued)", code, errOut, submits())
	}
}

// TestSallocTasksAndCPUsPerNode: salloc's command gets the allocation's
// SLURM_JOB_CPUS_PER_NODE and SLURM_TASKS_PER_NODE by the batch
// environment's rule (slurmspec.AllocTasksPerNode), and SLURM_NTASKS only
// when tasks were asked for, as Slurm 22.05's salloc (measured beside it).
func TestSallocTasksAndCPUsPerNode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args                   []string
		cpus, tasks, ntasksVar string
	}{
		{[]string{"-N2"}, "1(x2)", "1(x2)", "<unset>"},
		{[]string{"-n3"}, "3", "3", "3"},
		{[]string{"--gpus=3", "-N2", "--cpus-per-gpu=2"}, "4,2", "4,2", "<unset>"},
		{[]string{"-N2", "-n3"}, "2,1", "2,1", "3"},
		// Fewer tasks than nodes: one node a task, as Slurm's salloc
		// lowers -N ("can't run 1 processes on 2 nodes"), where Loom
		// held 2 nodes with tasks 1,0.
		{[]string{"-N2", "-n1"}, "1", "1", "1"},
		{[]string{"-N2", "--ntasks-per-node=2"}, "2(x2)", "2(x2)", "4"},
		{[]string{"-N2", "--gpus-per-task=1"}, "1(x2)", "1(x2)", "2"},
		{[]string{"--gpus=4", "--gpus-per-task=2"}, "2", "2", "2"},
		{[]string{"-N2", "-c2"}, "2(x2)", "1(x2)", "<unset>"},
		{[]string{"--gpus-per-node=2", "--cpus-per-gpu=3", "-n2"}, "6", "2", "2"},
		// Every CPU of its nodes (16 each here), as many tasks.
		{[]string{"-N2", "--exclusive"}, "16(x2)", "16(x2)", "<unset>"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			g := srunGateway(t, 1, 0)
			for _, n := range g.SlurmNodes {
				n.Cpus = 16
			}
			env := Env{Conn: g.Dial(t), Project: "default", Cluster: stepCluster, User: "ada", Cwd: g.StepOutputDir, CallTimeout: 10 * time.Second,
				Environ: map[string]string{"PATH": "/usr/bin:/bin", "SHELL": "/bin/sh"}}
			args := append(append([]string{"-Q"}, tc.args...), "sh", "-c",
				`echo "${SLURM_JOB_CPUS_PER_NODE-<unset>} ${SLURM_TASKS_PER_NODE-<unset>} ${SLURM_NTASKS-<unset>} ${SLURM_NPROCS-<unset>}"`)
			code, out, errOut := salloc(context.Background(), t, env, "", args...)
			if want := tc.cpus + " " + tc.tasks + " " + tc.ntasksVar + " " + tc.ntasksVar + "\n"; code != 0 || out != want {
				t.Errorf("salloc %v: exit %d, stdout %q (stderr %q); want %q (SLURM_JOB_CPUS_PER_NODE SLURM_TASKS_PER_NODE SLURM_NTASKS SLURM_NPROCS)",
					tc.args, code, out, errOut, want)
			}
		})
	}
}

// TestSallocRunLayout: salloc's SLURM_TASKS_PER_NODE and
// SLURM_JOB_CPUS_PER_NODE are the run's own layout as the scheduler
// recorded it (node_tasks, node_cpus), not the request spread evenly:
// Slurm 22.05's select packed -N2 -n4 on idle 4-CPU nodes as 3,1 (measured
// beside it), and so does Loom's scheduler (slurmspec.PackTasks).
func TestSallocRunLayout(t *testing.T) {
	t.Parallel()
	g := srunGateway(t, 1, 0)
	for _, n := range g.SlurmNodes {
		n.Cpus = 4
	}
	g.StartLayout = func(j *loomv1.Job) { j.NodeTasks, j.NodeCpus = []int32{3, 1}, []int32{3, 1} }
	env := Env{Conn: g.Dial(t), Project: "default", Cluster: stepCluster, User: "ada", Cwd: g.StepOutputDir, CallTimeout: 10 * time.Second,
		Environ: map[string]string{"PATH": "/usr/bin:/bin", "SHELL": "/bin/sh"}}
	code, out, errOut := salloc(context.Background(), t, env, "", "-Q", "-N2", "-n4", "sh", "-c",
		`echo "$SLURM_JOB_CPUS_PER_NODE $SLURM_TASKS_PER_NODE $SLURM_NTASKS"`)
	if want := "3,1 3,1 4\n"; code != 0 || out != want {
		t.Errorf("salloc -N2 -n4: exit %d, stdout %q (stderr %q); want %q (SLURM_JOB_CPUS_PER_NODE SLURM_TASKS_PER_NODE SLURM_NTASKS)",
			code, out, errOut, want)
	}
}

// sallocHangUpChild, set in its environment, makes the test binary the
// child process of TestSallocHangUp: the one that hangs itself up.
const sallocHangUpChild = "LOOM_TEST_SALLOC_HANGUP_CHILD"

// TestSallocHangUp: a hang-up of salloc (its terminal closed) goes to the
// command, and salloc gives the allocation back once it has gone.
//
// The hang-up is a real SIGHUP, and a signal goes to a whole process: every
// salloc of it passes it on to its command. So it is sent in a child
// process of its own (this test again, alone there); sent here, it hung up
// whichever salloc a parallel test ran at that moment (exit 129). The
// bystander salloc here, running as the child hangs itself up, keeps it so.
func TestSallocHangUp(t *testing.T) {
	if os.Getenv(sallocHangUpChild) != "" {
		hangUp(t)
		return
	}
	t.Parallel()
	benv, _, _, _ := sallocEnv(t)
	ready, done := filepath.Join(benv.Cwd, "ready"), filepath.Join(benv.Cwd, "done")
	type result struct {
		code      int
		out, errb string
	}
	bystander := make(chan result, 1)
	go func() {
		// The command waits for done, for a minute at most.
		code, out, errb := salloc(context.Background(), t, benv, "", "-Q", "sh", "-c",
			`touch ready; n=0; while [ ! -e done ] && [ $n -lt 1200 ]; do sleep 0.05; n=$((n+1)); done; echo ok`)
		bystander <- result{code, out, errb}
	}()
	// Written however the test ends: the bystander's command then ends.
	defer func() { _ = os.WriteFile(done, nil, 0o644) }()
	testkit.WaitFor(t, 30*time.Second, "the bystander's command running", func() (bool, error) {
		_, err := os.Stat(ready)
		return err == nil, nil
	})

	cmd := exec.CommandContext(testkit.Context(t, 2*time.Minute), os.Args[0], "-test.run=^TestSallocHangUp$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), sallocHangUpChild+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--- PASS: TestSallocHangUp")) {
		t.Fatalf("the hang-up, in a child process: %v\n%s", err, out)
	}

	if err := os.WriteFile(done, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := <-bystander; r.code != 0 || r.out != "ok\n" {
		t.Fatalf("a salloc beside the hung-up one: exit %d, stdout %q, stderr %q; want it untouched", r.code, r.out, r.errb)
	}
}

// hangUp runs salloc with a command that traps SIGHUP, and hangs this
// process up once the command runs. Only in a process of its own: see
// TestSallocHangUp.
func hangUp(t *testing.T) {
	env, cancels, _, _ := sallocEnv(t)
	started := filepath.Join(env.Cwd, "started")
	go func() {
		ctx := testkit.Context(t, 30*time.Second)
		for ctx.Err() == nil {
			if _, err := os.Stat(started); err == nil {
				// salloc listens for SIGHUP before it starts the command.
				_ = syscall.Kill(os.Getpid(), syscall.SIGHUP)
				return
			}
			time.Sleep(20 * time.Millisecond) // polling a file: no event to wait on
		}
	}()
	// Never hung up, the command ends by itself after a minute (exit 7).
	code, out, errOut := salloc(context.Background(), t, env, "", "sh", "-c",
		`trap 'echo hung up; exit 5' HUP; touch started; n=0; while [ $n -lt 600 ]; do sleep 0.1; n=$((n+1)); done; exit 7`)
	if code != 5 || out != "hung up\n" || !strings.Contains(errOut, "Relinquishing") || len(cancels()) != 1 || cancels()[0].GetExitCode() != 5 {
		t.Fatalf("hung up: exit %d, stdout %q, stderr %q, cancels %v", code, out, errOut, cancels())
	}
}

// TestSallocDistribution: salloc -m and the GPU options give its command
// SLURM_DISTRIBUTION and SLURM_GPUS* (SLURM_GPUS beside
// SLURM_GPUS_PER_TASK only for a --gpus given, Job.gpus_given); -m gives the distribution as
// Slurm 22.05's salloc does (measured: -N2 -n4 -m plane=2 is
// SLURM_DISTRIBUTION=plane, SLURM_DIST_PLANESIZE=2), the default of the
// sruns it runs (srunStepInputVars); without -m neither is set.
func TestSallocDistribution(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-N2", "-n4", "-m", "plane=2"}, "plane 2\n"},
		{[]string{"-N2", "-m", "cyclic"}, "cyclic <unset>\n"},
		{[]string{"-N2"}, "<unset> <unset>\n"},
		// The GPU request, as the batch script's (measured: salloc
		// --gpus-per-node=2 is SLURM_GPUS_PER_NODE=2, --gpus=2 SLURM_GPUS=2).
		{[]string{"-N2", "--gpus-per-node=2"}, "<unset> <unset> gpn=2\n"},
		// --gres=gpu:2 is the same request, but not exported (Job.gres_gpus).
		{[]string{"-N2", "--gres=gpu:2"}, "<unset> <unset>\n"},
		{[]string{"--gpus=2"}, "<unset> <unset> gpus=2\n"},
		{[]string{"-N2", "--gpus-per-task=1"}, "<unset> <unset> gpt=1\n"},
		// A --gpus given stands beside --gpus-per-task (measured: salloc
		// --gpus=4 --gpus-per-task=2 has both; -n2 --gpus-per-task=1
		// the second alone, its total derived).
		{[]string{"--gpus=4", "--gpus-per-task=2"}, "<unset> <unset> gpus=4 gpt=2\n"},
		{[]string{"--gpus-per-task=2", "--gpus=4"}, "<unset> <unset> gpus=4 gpt=2\n"},
		{[]string{"-n2", "--gpus-per-task=1"}, "<unset> <unset> gpt=1\n"},
		// Memory as asked for: --mem a node, --mem-per-cpu per CPU.
		{[]string{"--mem=2048"}, "<unset> <unset> mpn=2048\n"},
		{[]string{"-n2", "--mem-per-cpu=512"}, "<unset> <unset> mpc=512\n"},
	} {
		env, _, _, _ := sallocEnv(t)
		args := append(append([]string{"-Q"}, tc.args...), "sh", "-c", `echo "${SLURM_DISTRIBUTION-<unset>} ${SLURM_DIST_PLANESIZE-<unset>}`+
			`${SLURM_GPUS_PER_NODE+ gpn=$SLURM_GPUS_PER_NODE}${SLURM_GPUS+ gpus=$SLURM_GPUS}${SLURM_GPUS_PER_TASK+ gpt=$SLURM_GPUS_PER_TASK}`+
			`${SLURM_MEM_PER_NODE+ mpn=$SLURM_MEM_PER_NODE}${SLURM_MEM_PER_CPU+ mpc=$SLURM_MEM_PER_CPU}"`)
		if code, out, errOut := salloc(context.Background(), t, env, "", args...); code != 0 || out != tc.want {
			t.Errorf("salloc %v: exit %d, stdout %q (stderr %q); want %q", tc.args, code, out, errOut, tc.want)
		}
	}
}

package slurmcli

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/cmd/loom/internal/fakegw"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestSbatchTestOnly: sbatch --test-only has the gateway check the job
// (validate_only: nothing queued, no id taken) and says on stderr when and
// where it would start, in the words real Slurm 22.05 printed:
//
//	sbatch: Job 22 to start at 2026-12-07T04:26:17 using 1 processors on nodes node1 in partition debug
//
// but with job id 0 (Slurm's none): the gateway answers no id, so that no
// caller learns the installation's job counter. A job that cannot run: "allocation failure: Requested node
// configuration is not available", exit 1, no "sbatch: error:" prefix.
func TestSbatchTestOnly(t *testing.T) {
	t.Parallel()
	f := fixture()
	jobs := len(f.Jobs)
	// Fits now: debug's gpu-0003 has room; no id (20 is the fixture's
	// largest: 21 would tell the counter).
	code, out, errOut := run(t, f, "sbatch", Env{}, "--test-only", "-p", "debug", "-n", "1", "--wrap", "hostname")
	if want := "sbatch: Job 0 to start at 2026-01-02T15:04:05 using 1 processors on nodes gpu-0003 in partition debug\n"; code != 0 || out != "" || errOut != want {
		t.Errorf("fits: %d %q %q, want 0 and %q", code, out, errOut, want)
	}
	if reqs := submitted(f); len(reqs) != 1 || !reqs[0].GetValidateOnly() || len(f.Jobs) != jobs {
		t.Fatalf("fits: sent %v, %d jobs stored (were %d): want one validate_only request and nothing queued", reqs, len(f.Jobs), jobs)
	}
	// No room in gpu now (two nodes allocated, one drained, one with 7
	// GPUs free): the earliest end of a running job of it, job 12's
	// (started 1:02:03 ago, 2 h limit), on its nodes.
	code, out, errOut = run(t, f, "sbatch", Env{}, "--test-only", "-p", "gpu", "-N", "2", "--gres=gpu:8", "--wrap", "hostname")
	if want := "sbatch: Job 0 to start at 2026-01-02T16:02:02 using 2 processors on nodes gpu-[0001-0002] in partition gpu\n"; code != 0 || out != "" || errOut != want {
		t.Errorf("busy: %d %q %q, want 0 and %q", code, out, errOut, want)
	}
	// The gateway's refusal: Slurm's words, then the gateway's.
	f.SubmitErr = status.Error(codes.InvalidArgument, "job.ntasks: 1000 tasks need 63 nodes of partition debug, which has 1 (Slurm: Requested node configuration is not available)")
	code, out, errOut = run(t, f, "sbatch", Env{}, "--test-only", "-p", "debug", "-n", "1000", "--wrap", "hostname")
	if want := "allocation failure: Requested node configuration is not available\n" +
		"sbatch: error: 1000 tasks need 63 nodes of partition debug, which has 1 (Slurm: Requested node configuration is not available)\n"; code != 1 || out != "" || errOut != want {
		t.Errorf("impossible: %d %q %q, want 1 and %q", code, out, errOut, want)
	}
	if len(f.Jobs) != jobs {
		t.Errorf("%d jobs stored, were %d", len(f.Jobs), jobs)
	}
}

// TestSbatchTestOnlyNodeTooSmall: --test-only of a job that asks more
// memory or CPUs a node than any node has says the controller's words
// alone, as Slurm 22.05's (measured on 4096 MB, 8-CPU nodes: --mem=5000,
// --mem-per-cpu=5000, -c9 and --ntasks-per-node=9 each "allocation
// failure: Requested node configuration is not available", exit 1), not
// the hint a submission prints before them ("Memory specification can not
// be satisfied"); Loom's reason follows on a second line.
func TestSbatchTestOnlyNodeTooSmall(t *testing.T) {
	t.Parallel()
	for args, msg := range map[string]string{
		"--mem=5000": "job.mem_mb: 5000 MiB exceeds the 4096 MiB of the largest node in partition debug (Slurm: Memory specification can not be satisfied)",
		"--mem-per-cpu=5000": "job.mem_per_cpu_mb: 5000 MiB a CPU × 1 CPUs a node exceed the 4096 MiB of the largest node in partition debug " +
			"(Slurm: Memory specification can not be satisfied)",
		"-c9": "job.cpus_per_task: 9 CPUs a node (tasks per node × CPUs per task) exceed the 8 of the largest node in partition debug " +
			"(Slurm: CPU count per node can not be satisfied)",
	} {
		f := fixture()
		f.SubmitErr = status.Error(codes.InvalidArgument, msg)
		code, out, errOut := run(t, f, "sbatch", Env{}, "--test-only", "-p", "debug", args, "--wrap", "hostname")
		if want := "allocation failure: Requested node configuration is not available\nsbatch: error: " +
			strings.TrimPrefix(msg, msg[:strings.Index(msg, ": ")+2]) + "\n"; code != 1 || out != "" || errOut != want {
			t.Errorf("--test-only %s: %d %q %q, want 1 and %q", args, code, out, errOut, want)
		}
	}
}

// TestSbatchTestOnlyProcessors: the processor count --test-only prints is
// slurmctld's, as Slurm 22.05 printed it beside Loom (scripts/slurm-local.sh,
// 16-CPU nodes, CR_Core): --exclusive takes every CPU of the nodes named
// (here 16 and 32: each node's own count), whatever -n or --gres ask;
// --ntasks-per-node counts per node; --gres adds none; --cpus-per-gpu
// gives each node the larger of its tasks' CPUs and its GPUs times it
// (--gpus spread over -N as 2 and 1); --exclusive=user counts the tasks.
func TestSbatchTestOnlyProcessors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string // processors and nodes
	}{
		{[]string{"--exclusive"}, "16 processors on nodes gpu-0001"},
		{[]string{"-N2", "--exclusive"}, "48 processors on nodes gpu-[0001-0002]"},
		{[]string{"-n4", "--exclusive"}, "16 processors on nodes gpu-0001"},
		{[]string{"--gres=gpu:2", "--exclusive"}, "16 processors on nodes gpu-0001"},
		{[]string{"-N2", "--ntasks-per-node=2", "-c3"}, "12 processors on nodes gpu-[0001-0002]"},
		{[]string{"-N2", "-c3"}, "6 processors on nodes gpu-[0001-0002]"},
		{[]string{"-n4", "-c2"}, "8 processors on nodes gpu-0001"},
		{[]string{"--gres=gpu:2"}, "1 processors on nodes gpu-0001"},
		{[]string{"--gpus-per-node=2", "--cpus-per-gpu=3"}, "6 processors on nodes gpu-0001"},
		{[]string{"--gres=gpu:2", "--cpus-per-gpu=3"}, "6 processors on nodes gpu-0001"},
		{[]string{"--gpus=3", "-N2", "--cpus-per-gpu=2"}, "6 processors on nodes gpu-[0001-0002]"},
		{[]string{"--gpus=5", "-N2", "--cpus-per-gpu=2"}, "10 processors on nodes gpu-[0001-0002]"},
		{[]string{"--gpus=3", "-N2", "-n8", "--cpus-per-gpu=2"}, "8 processors on nodes gpu-[0001-0002]"},
		{[]string{"--gpus=3", "--cpus-per-gpu=2"}, "6 processors on nodes gpu-0001"},
		{[]string{"--gpus-per-node=2", "--cpus-per-gpu=3", "-n8"}, "8 processors on nodes gpu-0001"},
		{[]string{"--gpus-per-node=2", "--cpus-per-gpu=3", "-N2", "-n8"}, "12 processors on nodes gpu-[0001-0002]"},
		{[]string{"--gpus-per-node=2", "--cpus-per-gpu=3", "-N2", "--ntasks-per-node=3"}, "12 processors on nodes gpu-[0001-0002]"},
		{[]string{"--gpus-per-node=2", "--cpus-per-gpu=3", "-N2", "--ntasks-per-node=8"}, "16 processors on nodes gpu-[0001-0002]"},
		{[]string{"--gpus-per-task=2", "-n3", "--cpus-per-gpu=2"}, "12 processors on nodes gpu-0001"},
		{[]string{"--cpus-per-gpu=3"}, "1 processors on nodes gpu-0001"},
		{[]string{"--exclusive=user"}, "1 processors on nodes gpu-0001"},
		{[]string{"--exclusive=user", "-N2", "-n4"}, "4 processors on nodes gpu-[0001-0002]"},
		{[]string{"--exclusive=mcs", "--exclusive"}, "16 processors on nodes gpu-0001"},
	} {
		f := fixture()
		// gpu-0001 and gpu-0002 idle, with 16 and 32 CPUs.
		for i, cpus := range []int32{16, 32} {
			f.SlurmNodes[i].State, f.SlurmNodes[i].AllocCpus, f.SlurmNodes[i].AllocGpus, f.SlurmNodes[i].Cpus = loomv1.SlurmNode_IDLE, 0, 0, cpus
		}
		args := append([]string{"--test-only", "-p", "gpu"}, tc.args...)
		code, out, errOut := run(t, f, "sbatch", Env{}, append(args, "--wrap", "hostname")...)
		want := "sbatch: Job 0 to start at 2026-01-02T15:04:05 using " + tc.want + " in partition gpu\n"
		if code != 0 || out != "" || errOut != want {
			t.Errorf("sbatch %v: %d %q %q, want 0 and %q", args, code, out, errOut, want)
		}
	}
}

// TestExclusiveJobCPUs: scontrol show job's NumCPUs (and TRES cpu= and
// billing=) and squeue's %C of an --exclusive job that holds nodes count
// every CPU of them, as Slurm 22.05's did beside Loom (an -n2 --exclusive
// job on a 16-CPU node: NumCPUs=16, %C 16); a pending exclusive job counts
// its tasks (Slurm's NumCPUs=2 for -n2), and so does a job that is not
// exclusive. The CPUs are allocCPUs', the count --test-only prints.
func TestExclusiveJobCPUs(t *testing.T) {
	t.Parallel()
	f := fixture()
	for _, j := range f.Jobs {
		switch j.GetJobId() {
		case "12": // running on gpu-0001 (16 CPUs) and gpu-0002 (here 32), 2 tasks × 4 CPUs
			j.Exclusive = true
		case "13": // pending, 1 task
			j.Exclusive, j.Ntasks = true, 2
		}
	}
	f.SlurmNodes[1].Cpus = 32
	code, out, errOut := run(t, f, "scontrol", Env{}, "show", "job", "12")
	if code != 0 || !strings.Contains(out, " NumCPUs=48 NumTasks=2 ") || !strings.Contains(out, "TRES=cpu=48,mem=128G,node=2,billing=48,") {
		t.Errorf("show job 12: %d %q %q, want NumCPUs=48 and TRES cpu=48 (every CPU of its 16- and 32-CPU nodes)", code, out, errOut)
	}
	code, out, errOut = run(t, f, "scontrol", Env{}, "show", "job", "13")
	if code != 0 || !strings.Contains(out, " NumCPUs=2 NumTasks=2 ") {
		t.Errorf("show job 13 (pending): %d %q %q, want NumCPUs=2 (its tasks)", code, out, errOut)
	}
	code, out, errOut = run(t, f, "squeue", Env{}, "-h", "-o", "%i %C", "-S", "C")
	if want := "14 1\n15_0 1\n15_[1-3%2] 1\n13 2\n12 48\n"; code != 0 || out != want {
		t.Errorf("squeue %%C: %d %q %q, want %q", code, out, errOut, want)
	}
	// Not exclusive: its tasks' CPUs.
	f.Jobs[3].Exclusive = false
	if code, out, errOut = run(t, f, "squeue", Env{}, "-h", "-o", "%i %C", "-j", "12"); code != 0 || out != "12 8\n" {
		t.Errorf("squeue %%C of job 12 not exclusive: %d %q %q, want \"12 8\\n\"", code, out, errOut)
	}
}

// TestExclusiveJobCPUsUnknownNode: a node of an exclusive job that the
// cluster's node list no longer describes counts its tasks' CPUs there
// (allocNodeCPUs), in squeue's %C and scontrol's NumCPUs as in salloc's
// SLURM_JOB_CPUS_PER_NODE: one rule, never 0 for a node the job holds.
func TestExclusiveJobCPUsUnknownNode(t *testing.T) {
	t.Parallel()
	f := fixture()
	job := f.Jobs[3] // 12: on gpu-0001 (16 CPUs) and gpu-0002, 2 tasks × 4 CPUs
	if job.GetJobId() != "12" || f.SlurmNodes[1].GetHostname() != "gpu-0002" {
		t.Fatalf("fixture changed: job %s, node %s", job.GetJobId(), f.SlurmNodes[1].GetHostname())
	}
	job.Exclusive = true
	f.SlurmNodes = slices.Delete(f.SlurmNodes, 1, 2) // gpu-0002 removed since
	if got, want := allocNodeCPUs(job, job.GetNodes(), f.SlurmNodes), []int32{16, 4}; !slices.Equal(got, want) {
		t.Errorf("allocNodeCPUs = %v, want %v (gpu-0001's 16, gpu-0002's one task × 4)", got, want)
	}
	if got := allocCPUs(job, job.GetNodes(), f.SlurmNodes); got != 20 {
		t.Errorf("allocCPUs = %d, want 20, the sum of its nodes'", got)
	}
	code, out, errOut := run(t, f, "scontrol", Env{}, "show", "job", "12")
	if code != 0 || !strings.Contains(out, " NumCPUs=20 NumTasks=2 ") {
		t.Errorf("show job 12: %d %q %q, want NumCPUs=20", code, out, errOut)
	}
	if code, out, errOut = run(t, f, "squeue", Env{}, "-h", "-o", "%i %C", "-j", "12"); code != 0 || out != "12 20\n" {
		t.Errorf("squeue %%C of job 12: %d %q %q, want \"12 20\\n\"", code, out, errOut)
	}
}

// TestSbatchCpusPerGPURefusals: --cpus-per-gpu is refused with -c (in
// either order) and with a bare --exclusive, as Slurm 22.05 refused them
// beside Loom (scripts/slurm-local.sh): "--cpus-per-gpu is mutually
// exclusive with --cpus-per-task" and "Invalid generic resource (gres)
// specification", exit 1, before anything is sent; with --exclusive its
// controller's "Requested node configuration is not available" (as
// "allocation failure: ..." with --test-only); a bad count names the
// option. --exclusive=user with it is a job, as in Slurm.
func TestSbatchCpusPerGPURefusals(t *testing.T) {
	t.Parallel()
	const conflict = "sbatch: error: --cpus-per-gpu is mutually exclusive with --cpus-per-task\n" +
		"sbatch: error: Invalid generic resource (gres) specification\n"
	for _, tc := range []struct {
		args   []string
		code   int
		errOut string
	}{
		{[]string{"--cpus-per-gpu=3", "--gres=gpu:2", "-c2"}, 1, conflict},
		{[]string{"-c2", "--cpus-per-gpu=3"}, 1, conflict},
		{[]string{"--cpus-per-gpu=3", "--gres=gpu:2", "--exclusive"}, 1,
			"sbatch: error: Batch job submission failed: Requested node configuration is not available\n"},
		{[]string{"--test-only", "--cpus-per-gpu=3", "--exclusive"}, 1,
			"allocation failure: Requested node configuration is not available\n"},
		{[]string{"--cpus-per-gpu=0"}, 1, "sbatch: error: Invalid numeric value \"0\" for --cpus-per-gpu.\n"},
		{[]string{"--cpus-per-gpu=x"}, 1, "sbatch: error: Invalid numeric value \"x\" for --cpus-per-gpu.\n"},
	} {
		f := fixture()
		jobs := len(f.Jobs)
		code, out, errOut := run(t, f, "sbatch", Env{}, append(tc.args, "--wrap", "hostname")...)
		if code != tc.code || out != "" || errOut != tc.errOut {
			t.Errorf("sbatch %v: %d %q %q, want %d %q", tc.args, code, out, errOut, tc.code, tc.errOut)
		}
		if len(f.Jobs) != jobs || len(fakegw.Requests[*loomv1.SubmitJobRequest](f)) != 0 {
			t.Errorf("sbatch %v sent the job", tc.args)
		}
	}
	f := fixture()
	code, out, errOut := run(t, f, "sbatch", Env{}, "--cpus-per-gpu=3", "--gres=gpu:2", "--exclusive=user", "--wrap", "hostname")
	if code != 0 || !strings.HasPrefix(out, "Submitted batch job ") || errOut != "" {
		t.Errorf("sbatch --cpus-per-gpu --exclusive=user: %d %q %q, want a job", code, out, errOut)
	}
	// The job carries it to the scheduler.
	if reqs := submitted(f); len(reqs) != 1 || reqs[0].GetJob().GetCpusPerGpu() != 3 || reqs[0].GetJob().GetGpusPerNode() != 2 {
		t.Errorf("sbatch --cpus-per-gpu=3 --gres=gpu:2 sent %v, want cpus_per_gpu 3 and gpus_per_node 2", reqs)
	}
}

// TestCpusPerGPUJobCPUs: a job with --cpus-per-gpu shows the CPUs Loom's
// scheduler gives it, Slurm's count: per node the larger of its tasks ×
// CPUs per task and its GPUs × CPUs per GPU, in scontrol show job's
// NumCPUs and TRES, squeue's %C and sacct's AllocCPUS (the batch step's:
// the batch host's), as Slurm 22.05 showed an --gres=gpu:2
// --cpus-per-gpu=3 -N2 -n8 job beside Loom (NumCPUs=12, TRES=cpu=12,
// CpusPerTres=gres:gpu:3).
func TestCpusPerGPUJobCPUs(t *testing.T) {
	t.Parallel()
	f := fixture()
	j := f.Jobs[3]
	if j.GetJobId() != "12" {
		t.Fatalf("fixture job 3 is %s, want 12", j.GetJobId())
	}
	// Running on 2 nodes, 8 tasks, 2 GPUs and 3 CPUs each per node.
	j.Ntasks, j.CpusPerTask, j.GpusPerNode, j.CpusPerGpu, j.AllocGpus = 8, 0, 2, 3, 4
	code, out, errOut := run(t, f, "scontrol", Env{}, "show", "job", "12")
	for _, want := range []string{" NumCPUs=12 NumTasks=8 ", "TRES=cpu=12,mem=128G,node=2,billing=12,", "\n   CpusPerTres=gres:gpu:3\n"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("show job 12: %d %q %q, want %q", code, out, errOut, want)
		}
	}
	if code, out, errOut = run(t, f, "squeue", Env{}, "-h", "-o", "%i %C", "-j", "12"); code != 0 || out != "12 12\n" {
		t.Errorf("squeue %%C: %d %q %q, want \"12 12\\n\"", code, out, errOut)
	}
	code, out, errOut = run(t, f, "sacct", Env{}, "-n", "-P", "-j", "12", "--format=JobID,AllocCPUS")
	if want := "12|12\n12.batch|6\n"; code != 0 || out != want {
		t.Errorf("sacct AllocCPUS: %d %q %q, want %q", code, out, errOut, want)
	}
	// --gpus=3 over the 2 nodes, 2 CPUs each: 2 GPUs and 1, 4 CPUs and 2.
	j.Ntasks, j.GpusPerNode, j.Gpus, j.CpusPerGpu, j.AllocGpus = 0, 0, 3, 2, 3
	code, out, errOut = run(t, f, "sacct", Env{}, "-n", "-P", "-j", "12", "--format=JobID,AllocCPUS")
	if want := "12|6\n12.batch|4\n"; code != 0 || out != want {
		t.Errorf("sacct AllocCPUS of --gpus=3: %d %q %q, want %q", code, out, errOut, want)
	}
}

// TestSacctRunLayout: sacct's batch step holds the CPUs of the run's first
// node as the scheduler recorded them (node_cpus), where Slurm 22.05's
// select packed -N2 -n4 on idle 4-CPU nodes as 3,1: the batch step 3, not
// an even 2; the job 4 in all, and what it asked for (ReqCPUS) 4. A record
// without the layout (from before it was kept) still spreads the request.
func TestSacctRunLayout(t *testing.T) {
	t.Parallel()
	f := fixture()
	j := f.Jobs[3]
	if j.GetJobId() != "12" || len(j.GetNodes()) != 2 {
		t.Fatalf("fixture job 3 is %s on %v, want 12 on 2 nodes", j.GetJobId(), j.GetNodes())
	}
	j.Ntasks, j.CpusPerTask, j.GpusPerNode, j.CpusPerGpu, j.AllocGpus = 4, 0, 0, 0, 0
	j.NodeTasks, j.NodeCpus = []int32{3, 1}, []int32{3, 1}
	code, out, errOut := run(t, f, "sacct", Env{}, "-n", "-P", "-j", "12", "--format=JobID,AllocCPUS,ReqCPUS")
	if want := "12|4|4\n12.batch|3|\n"; code != 0 || out != want {
		t.Errorf("sacct, packed 3,1: %d %q %q, want %q", code, out, errOut, want)
	}
	// An exclusive run holds its nodes whole: the job's AllocCPUS is
	// their sum, as Slurm's (8 for -N2 -n4 --exclusive on 4-CPU nodes),
	// not its tasks' 4 beside a batch step of 4; ReqCPUS stays the request.
	j.Exclusive, j.NodeTasks, j.NodeCpus = true, []int32{2, 2}, []int32{4, 4}
	code, out, errOut = run(t, f, "sacct", Env{}, "-n", "-P", "-j", "12", "--format=JobID,AllocCPUS,ReqCPUS")
	if want := "12|8|4\n12.batch|4|\n"; code != 0 || out != want {
		t.Errorf("sacct, exclusive: %d %q %q, want %q", code, out, errOut, want)
	}
	// A requeued job's earlier run (-D) is not the one the layout is of:
	// its rows keep the request's even spread, not the current run's.
	j.Exclusive, j.NodeTasks, j.NodeCpus = false, []int32{3, 1}, []int32{3, 1}
	j.Runs = []*loomv1.JobRun{
		{Attempt: 1, State: loomv1.JobState_NODE_FAIL, Nodes: j.GetNodes(), StartTime: j.GetStartTime(), EndTime: j.GetStartTime()},
		{Attempt: 2, State: j.GetState(), Nodes: j.GetNodes(), StartTime: j.GetStartTime()},
	}
	code, out, errOut = run(t, f, "sacct", Env{}, "-n", "-P", "-D", "-j", "12", "--format=JobID,AllocCPUS")
	if want := "12|4\n12.batch|2\n12|4\n12.batch|3\n"; code != 0 || out != want {
		t.Errorf("sacct -D, packed 3,1 now: %d %q %q, want %q", code, out, errOut, want)
	}
	j.Exclusive, j.NodeTasks, j.NodeCpus = true, []int32{2, 2}, []int32{4, 4}
	code, out, errOut = run(t, f, "sacct", Env{}, "-n", "-P", "-D", "-j", "12", "--format=JobID,AllocCPUS")
	if want := "12|4\n12.batch|2\n12|8\n12.batch|4\n"; code != 0 || out != want {
		t.Errorf("sacct -D, exclusive now: %d %q %q, want %q", code, out, errOut, want)
	}
	j.Runs = nil
	j.Exclusive = false
	j.NodeTasks, j.NodeCpus = nil, nil
	code, out, errOut = run(t, f, "sacct", Env{}, "-n", "-P", "-j", "12", "--format=JobID,AllocCPUS,ReqCPUS")
	if want := "12|4|4\n12.batch|2|\n"; code != 0 || out != want {
		t.Errorf("sacct, no layout kept: %d %q %q, want %q", code, out, errOut, want)
	}
}

// TestOverlapStepCPUsRunLayout: a step Loom holds no CPUs for (--overlap)
// shows the job's CPUs on its nodes, as Slurm's: on a job packed 3,1 an
// srun -n1 --overlap on the first node is 3 (Slurm 22.05 showed 3), not an
// even share of 2; without a recorded layout the even share as before.
func TestOverlapStepCPUsRunLayout(t *testing.T) {
	t.Parallel()
	j := &loomv1.Job{Ntasks: 4, NodeCount: 2, Nodes: []string{"node1", "node2"}, NodeTasks: []int32{3, 1}, NodeCpus: []int32{3, 1}}
	for _, tc := range []struct {
		nodes []string
		want  int
	}{{[]string{"node1"}, 3}, {[]string{"node2"}, 1}, {[]string{"node1", "node2"}, 4}} {
		if got := stepCPUs(j, &loomv1.JobStep{Nodes: tc.nodes}); got != tc.want {
			t.Errorf("--overlap step on %v: %d CPUs, want %d", tc.nodes, got, tc.want)
		}
	}
	j.NodeTasks, j.NodeCpus = nil, nil
	if got := stepCPUs(j, &loomv1.JobStep{Nodes: []string{"node1"}}); got != 2 {
		t.Errorf("--overlap step, no layout kept: %d CPUs, want 2", got)
	}
}

// TestScontrolTresLines: scontrol show job's GPU request lines, in Slurm
// 22.05's order and words (checked beside one): --gpus=N is
// TresPerJob=gres:gpu[:TYPE]:N, after CpusPerTres and before TresPerNode;
// --gpus-per-task=N is TresPerTask=gres:gpu:N, last, and the job total
// Loom derives from it (-n times it) is no TresPerJob.
func TestScontrolTresLines(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		set  func(j *loomv1.Job)
		want string // the lines after Power=, up to the record's end
	}{
		{"--gpus=3 -N2 --cpus-per-gpu=2", func(j *loomv1.Job) { j.Gpus, j.CpusPerGpu = 3, 2 },
			"   CpusPerTres=gres:gpu:2\n   TresPerJob=gres:gpu:3\n"},
		{"--gpus=h100:3", func(j *loomv1.Job) { j.Gpus, j.GpuType = 3, "h100" }, "   TresPerJob=gres:gpu:h100:3\n"},
		{"--gpus=4 --gpus-per-node=2", func(j *loomv1.Job) { j.Gpus, j.GpusPerNode = 4, 2 },
			"   TresPerJob=gres:gpu:4\n   TresPerNode=gres:gpu:2\n"},
		{"--gres=gpu:2", func(j *loomv1.Job) { j.GpusPerNode = 2 }, "   TresPerNode=gres:gpu:2\n"},
		{"--gpus-per-task=1 -n2", func(j *loomv1.Job) { j.Ntasks, j.GpusPerTask, j.Gpus = 2, 1, 2 }, "   TresPerTask=gres:gpu:1\n"},
		{"no GPUs", func(j *loomv1.Job) {}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := fixture()
			j := f.Jobs[3]
			j.Gpus, j.GpusPerNode, j.GpuType, j.GpusPerTask, j.CpusPerGpu, j.CpusPerTask, j.AllocGpus = 0, 0, "", 0, 0, 0, 0
			j.Placement = ""
			tc.set(j)
			code, out, errOut := run(t, f, "scontrol", Env{}, "show", "job", j.GetJobId())
			_, tail, ok := strings.Cut(out, "\n   Power=\n")
			if code != 0 || !ok || tail != tc.want+"   \n\n" {
				t.Errorf("show job: %d %q %q; want after Power= %q", code, tail, errOut, tc.want)
			}
		})
	}
}

// TestGPUsPerTaskWithoutTasks: --gpus-per-task needs the job's tasks to be
// known, as Slurm 22.05's controller checks it (measured beside it, for
// sbatch, srun and salloc alike): without -n, --ntasks-per-node, --gpus
// or an exact -N it is refused, and so are a --gpus it does not divide
// and a --gpus that gives another task count than -n; each with Slurm's
// two lines, exit 1, nothing submitted.
func TestGPUsPerTaskWithoutTasks(t *testing.T) {
	t.Parallel()
	const gres = "error: Invalid generic resource (gres) specification\n"
	const noTasks = "error: Failed to validate job spec. --gpus-per-task used without either --gpus or -n/--ntasks is not allowed.\n"
	for _, tc := range []struct {
		args []string
		want string // after "PROG: ", before the gres line
	}{
		{[]string{"--gpus-per-task=2"}, noTasks},
		{[]string{"--gpus-per-task=2", "-N1-2"}, noTasks},
		{[]string{"--gpus-per-task=2", "-c2"}, noTasks},
		{[]string{"--gpus-per-task=2", "--gpus=3"}, "error: Failed to validate job spec, --gpus not multiple of --gpus-per-task\n"},
		{[]string{"--gpus-per-task=2", "--gpus=4", "-n3"},
			"error: Failed to validate job spec. Based on --gpus and --gpus-per-task number of requested tasks differ from -n/--ntasks.\n"},
	} {
		f := fixture()
		code, out, errOut := run(t, f, "sbatch", Env{}, append(tc.args, "--wrap", "hostname")...)
		if want := "sbatch: " + tc.want + "sbatch: " + gres; code != 1 || out != "" || errOut != want || len(submitted(f)) != 0 {
			t.Errorf("sbatch %v: %d %q %q, sent %d; want 1, %q, nothing sent", tc.args, code, out, errOut, len(submitted(f)), want)
		}
		g := srunGateway(t, 1, 0)
		code, _, errOut = srunOutside(context.Background(), t, g, append(tc.args, "hostname")...)
		if want := "srun: " + tc.want + "srun: " + gres; code != 1 || errOut != want || len(jobsSubmitted(g)) != 0 {
			t.Errorf("srun %v: %d %q, sent %d; want 1, %q, nothing sent", tc.args, code, errOut, len(jobsSubmitted(g)), want)
		}
		g = srunGateway(t, 1, 0)
		env := Env{Conn: g.Dial(t), Project: "default", Cluster: stepCluster, User: "ada", Cwd: g.StepOutputDir, CallTimeout: 10 * time.Second,
			Environ: map[string]string{"PATH": "/usr/bin:/bin", "SHELL": "/bin/sh"}}
		code, _, errOut = salloc(context.Background(), t, env, "", append(tc.args, "true")...)
		if want := "salloc: " + tc.want + "salloc: " + gres; code != 1 || errOut != want || len(jobsSubmitted(g)) != 0 {
			t.Errorf("salloc %v: %d %q, sent %d; want 1, %q, nothing sent", tc.args, code, errOut, len(jobsSubmitted(g)), want)
		}
	}
}

// TestGPUsPerTaskTooMany: --gpus-per-task times the tasks (or nodes) past
// what a job may hold is refused naming the option, not wrapped past an
// int32 into a small or negative GPU count.
func TestGPUsPerTaskTooMany(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--gpus-per-task=1024", "-n", "2000000"},
		{"--gpus-per-task=1024", "-N", "4194304"},
		{"--gpus-per-task=1024", "--ntasks-per-node=4194304"},
	} {
		f := fixture()
		code, _, errOut := run(t, f, "sbatch", Env{}, append(args, "--wrap", "hostname")...)
		if code != 1 || !strings.HasPrefix(errOut, "sbatch: error: --gpus-per-task=1024 times ") || len(submitted(f)) != 0 {
			t.Errorf("sbatch %v: %d %q, sent %d; want 1 and a refusal naming --gpus-per-task", args, code, errOut, len(submitted(f)))
		}
	}
}

// TestScontrolOverSubscribe: scontrol show job's OverSubscribe= says how
// the job shares its nodes, in Slurm 22.05's words (checked beside one):
// OK, NO for --exclusive, USER for --exclusive=user.
func TestScontrolOverSubscribe(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		set  func(j *loomv1.Job)
		want string
	}{
		{"shared", func(j *loomv1.Job) {}, "OverSubscribe=OK"},
		{"--exclusive", func(j *loomv1.Job) { j.Exclusive = true }, "OverSubscribe=NO"},
		{"--exclusive=user", func(j *loomv1.Job) { j.ExclusiveUser = true }, "OverSubscribe=USER"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := fixture()
			j := f.Jobs[3]
			j.Exclusive, j.ExclusiveUser = false, false
			tc.set(j)
			code, out, errOut := run(t, f, "scontrol", Env{}, "show", "job", j.GetJobId())
			if code != 0 || !strings.Contains(out, "   "+tc.want+" Contiguous=0") {
				t.Errorf("show job: %d %q %q; want %s", code, out, errOut, tc.want)
			}
		})
	}
}

// TestSbatchTestOnlyNodeOwners: --test-only's estimate keeps a job off the
// nodes the scheduler's --exclusive=user rule keeps it off: another user's
// --exclusive=user job's node, and, for an --exclusive=user job, a node
// where another user's job runs. It starts there once the job in the way
// ends; the same user's jobs share the node at once. A running job's end
// frees its nodes only when the jobs in the way left on them end too.
func TestSbatchTestOnlyNodeOwners(t *testing.T) {
	t.Parallel()
	// Job 16 (alice's, partition debug) runs on gpu-0003, started 30 s
	// before the fixture's now (15:04:05), here with a 1-hour limit.
	const task0End = "2026-01-02T16:03:35"
	for _, tc := range []struct {
		name      string
		exclUser  bool // job 16's
		user      string
		args      []string
		carol     bool // carol's --exclusive=user job on gpu-0002 (3 h)
		startNode string
	}{
		{"another user beside an --exclusive=user job", true, "bob", []string{"-p", "debug", "-n", "1"}, false, task0End + " using 1 processors on nodes gpu-0003 in partition debug"},
		{"--exclusive=user beside another user's job", false, "bob", []string{"-p", "debug", "-n", "1", "--exclusive=user"}, false, task0End + " using 1 processors on nodes gpu-0003 in partition debug"},
		{"the same user shares", true, "alice", []string{"-p", "debug", "-n", "1", "--exclusive=user"}, false, "2026-01-02T15:04:05 using 1 processors on nodes gpu-0003 in partition debug"},
		{"an owner's job left on the nodes", false, "bob", []string{"-p", "gpu", "-N", "2", "--gres=gpu:8"}, true,
			"2026-01-02T18:04:05 using 2 processors on nodes gpu-[0001-0002] in partition gpu"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := fixture()
			for _, j := range f.Jobs {
				if j.GetJobId() == "16" {
					j.ExclusiveUser, j.TimeLimitSeconds = tc.exclUser, 3600
				}
			}
			if tc.carol {
				c := proto.Clone(f.Jobs[3]).(*loomv1.Job) // job 12's copy
				c.Name, c.JobId, c.User, c.ExclusiveUser = "projects/default/jobs/30", "30", "carol", true
				c.Nodes, c.StartTime, c.TimeLimitSeconds = []string{"gpu-0002"}, ago(0), 3*3600
				f.Jobs = append(f.Jobs, c)
			}
			args := append([]string{"--test-only"}, tc.args...)
			code, out, errOut := run(t, f, "sbatch", Env{User: tc.user}, append(args, "--wrap", "hostname")...)
			if want := "sbatch: Job 0 to start at " + tc.startNode + "\n"; code != 0 || out != "" || errOut != want {
				t.Errorf("%s sbatch %v: %d %q %q, want 0 and %q", tc.user, args, code, out, errOut, want)
			}
		})
	}
}

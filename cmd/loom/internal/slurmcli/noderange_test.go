package slurmcli

import (
	"context"
	"strings"
	"testing"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestNodeRange: -N MIN-MAX reaches the gateway whole (node_count the
// minimum, max_node_count the maximum), scontrol show job prints a pending
// one's range and squeue's %D its minimum, as Slurm 22.05 printed them
// beside Loom (NumNodes=1-3, %D 1); --test-only prints the nodes it would
// get: as many free as the range allows, no more than its tasks (Slurm on
// idle nodes: -N1-3 3 nodes, -N1-3 -n2 2, -N1-3 --ntasks-per-node=2 2 with
// 4 processors, -N1-8 every free one). A range of -n tasks is tried at
// each width, widest first, each with its own per-node share, as the
// scheduler places it (Slurm on idle 4-CPU nodes: -N1-3 -n5 5 processors
// on node[1-3], -N1-2 -n6 6 on node[1-2]); at its minimum's share alone
// -N1-3 -n17 (17 CPUs a node) fit none of these 16-CPU nodes.
func TestNodeRange(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string // processors and nodes
		busy int32  // CPUs held on gpu-0001
	}{
		{[]string{"-N1-3"}, "3 processors on nodes gpu-[0001-0003]", 0},
		{[]string{"-N1-3", "-n2"}, "2 processors on nodes gpu-[0001-0002]", 0},
		{[]string{"-N2-3", "-n5"}, "5 processors on nodes gpu-[0001-0003]", 0},
		{[]string{"-N1-3", "--ntasks-per-node=2"}, "4 processors on nodes gpu-[0001-0002]", 0},
		{[]string{"-N1-8"}, "3 processors on nodes gpu-[0001-0003]", 0}, // gpu-0004 is drained
		{[]string{"-N2-2"}, "2 processors on nodes gpu-[0001-0002]", 0},
		{[]string{"-N1-3", "-n17"}, "17 processors on nodes gpu-[0001-0003]", 0},
		{[]string{"-N1-2", "-n17"}, "17 processors on nodes gpu-[0001-0002]", 0},
		// 7 CPUs a node at 3 nodes, 4 free on gpu-0001: 10 a node on 2.
		{[]string{"-N1-3", "-n20"}, "20 processors on nodes gpu-[0002-0003]", 12},
	} {
		f := fixture()
		for i := range 3 { // gpu-0001..0003 idle
			f.SlurmNodes[i].State, f.SlurmNodes[i].AllocCpus, f.SlurmNodes[i].AllocGpus = loomv1.SlurmNode_IDLE, 0, 0
		}
		if tc.busy > 0 {
			f.SlurmNodes[0].State, f.SlurmNodes[0].AllocCpus = loomv1.SlurmNode_MIXED, tc.busy
		}
		args := append([]string{"--test-only", "-p", "gpu"}, tc.args...)
		code, out, errOut := run(t, f, "sbatch", Env{}, append(args, "--wrap", "hostname")...)
		want := "sbatch: Job 0 to start at 2026-01-02T15:04:05 using " + tc.want + " in partition gpu\n"
		if code != 0 || out != "" || errOut != want {
			t.Errorf("sbatch %v: %d %q %q, want 0 and %q", args, code, out, errOut, want)
		}
	}

	f := fixture()
	code, out, errOut := run(t, f, "sbatch", Env{}, "--parsable", "-H", "-p", "gpu", "-N1-3", "--wrap", "hostname")
	if code != 0 {
		t.Fatalf("sbatch -N1-3: %d %q %q", code, out, errOut)
	}
	if j := submitted(f)[0].GetJob(); j.GetNodeCount() != 1 || j.GetMaxNodeCount() != 3 {
		t.Fatalf("sbatch -N1-3 sent nodes %d-%d, want 1-3", j.GetNodeCount(), j.GetMaxNodeCount())
	}
	id := strings.TrimSpace(out)
	if code, out, errOut := run(t, f, "scontrol", Env{}, "show", "job", id); code != 0 || !strings.Contains(out, " NumNodes=1-3 NumCPUs=1 ") {
		t.Errorf("show job %s: %d %q %q, want NumNodes=1-3", id, code, out, errOut)
	}
	// --mem-per-cpu: Slurm's MinMemoryCPU (-N1-3 -n5 --mem-per-cpu=1024).
	fm := fixture() // its own: the checks below count f's submissions
	code, out, errOut = run(t, fm, "sbatch", Env{}, "--parsable", "-H", "-p", "gpu", "-N1-3", "-n5", "--mem-per-cpu=1024", "--wrap", "hostname")
	if code != 0 {
		t.Fatalf("sbatch --mem-per-cpu: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := run(t, fm, "scontrol", Env{}, "show", "job", strings.TrimSpace(out)); code != 0 || !strings.Contains(out, " MinMemoryCPU=1G ") {
		t.Errorf("show job --mem-per-cpu: %d %q %q, want MinMemoryCPU=1G", code, out, errOut)
	}
	// squeue %m: the figure a CPU, as Slurm's (-n3 --mem-per-cpu=1000:
	// 1000M), not the node's.
	if code, out, errOut := run(t, fm, "squeue", Env{}, "-h", "-j", strings.TrimSpace(out), "-o", "%m"); code != 0 || out != "1G\n" {
		t.Errorf("squeue %%m of a --mem-per-cpu job: %d %q %q, want 1G", code, out, errOut)
	}
	// --mem-per-gpu: a node's memory is it times the node's GPUs; past
	// Loom's bound it is refused naming the option, never wrapped.
	code, out, errOut = run(t, fm, "sbatch", Env{}, "--parsable", "-H", "-p", "gpu", "--gpus-per-node=4", "--mem-per-gpu=2G", "--wrap", "hostname")
	if j := submitted(fm)[len(submitted(fm))-1].GetJob(); code != 0 || j.GetMemMb() != 8192 {
		t.Errorf("sbatch --mem-per-gpu=2G --gpus-per-node=4: %d %q %q, sent mem_mb %d, want 8192", code, out, errOut, j.GetMemMb())
	}
	n := len(submitted(fm))
	code, _, errOut = run(t, fm, "sbatch", Env{}, "-H", "-p", "gpu", "--gpus-per-node=8", "--mem-per-gpu=1073741824T", "--wrap", "hostname")
	if code != 1 || !strings.Contains(errOut, "--mem-per-gpu: 1125899906842624 MiB a GPU × 8 GPUs a node is more than 1099511627776 MiB") || len(submitted(fm)) != n {
		t.Errorf("sbatch --mem-per-gpu past the bound: %d %q (submitted %d -> %d), want refused naming --mem-per-gpu", code, errOut, n, len(submitted(fm)))
	}
	if code, out, errOut := run(t, f, "squeue", Env{}, "-h", "-j", id, "-o", "%D"); code != 0 || out != "1\n" {
		t.Errorf("squeue %%D of %s: %d %q %q, want 1 (the minimum)", id, code, out, errOut)
	}
	// Running, the count it got (job 12 runs on gpu-[0001-0002]).
	for _, j := range f.Jobs {
		if j.GetJobId() == "12" {
			j.NodeCount, j.MaxNodeCount = 1, 3
		}
	}
	if code, out, errOut := run(t, f, "scontrol", Env{}, "show", "job", "12"); code != 0 || !strings.Contains(out, " NumNodes=2 ") {
		t.Errorf("show job 12: %d %q %q, want NumNodes=2 (what it got)", code, out, errOut)
	}
	// -N2-2 is no range.
	run(t, f, "sbatch", Env{}, "-p", "gpu", "-N2-2", "--wrap", "hostname")
	if j := submitted(f)[1].GetJob(); j.GetNodeCount() != 2 || j.GetMaxNodeCount() != 0 {
		t.Errorf("sbatch -N2-2 sent nodes %d max %d, want 2 and no range", j.GetNodeCount(), j.GetMaxNodeCount())
	}
}

// TestSrunNodeRange: srun -N1-3 outside an allocation asks for the range
// and runs its step on every node the job got (node_count 0: all), as
// Slurm's srun runs on its whole allocation.
func TestSrunNodeRange(t *testing.T) {
	t.Parallel()
	g := srunGateway(t, 1, 0, 0)
	code, out, errOut := srunOutside(context.Background(), t, g, "-N1-3", "-p", "gpu", "hostname")
	if code != 0 {
		t.Fatalf("srun -N1-3 hostname: exit %d\nstdout %q\nstderr %q", code, out, errOut)
	}
	if j := jobsSubmitted(g)[0].GetJob(); j.GetNodeCount() != 1 || j.GetMaxNodeCount() != 3 {
		t.Fatalf("allocation asks %d-%d nodes, want 1-3", j.GetNodeCount(), j.GetMaxNodeCount())
	}
	if s := stepsCreated(g); len(s) != 1 || s[0].GetNodeCount() != 0 {
		t.Fatalf("steps %v, want one on all the job's nodes (node_count 0)", s)
	}
}

// TestSacctRangeRequestKept: a -N1-3 job that got three nodes asked for
// one: sacct's ReqNodes, ReqCPUS and ReqTRES are the request, its
// AllocNodes and AllocTRES what it got, as Slurm 22.05 keeps the job's
// tres_req apart from its allocation (its completion record said
// Tres=cpu=1,mem=1M,node=1,billing=1 for -N1-3 that ran on node[1-3]);
// scontrol show job says what it got (NumNodes=3 NumCPUs=3 NumTasks=3,
// TRES=cpu=3,node=3,billing=3, as Slurm's beside Loom).
func TestSacctRangeRequestKept(t *testing.T) {
	t.Parallel()
	f := fixture()
	j := f.Jobs[1] // 10, COMPLETED
	j.NodeCount, j.MaxNodeCount, j.Nodes = 1, 3, []string{"gpu-0001", "gpu-0002", "gpu-0003"}
	code, out, errOut := run(t, f, "sacct", Env{}, "-P", "-n", "-X", "-o", "JobID,ReqNodes,ReqCPUS,ReqTRES,AllocNodes,AllocCPUS,AllocTRES", "-j", "10")
	if want := "10|1|1|billing=1,cpu=1,node=1|3|3|billing=3,cpu=3,node=3\n"; code != 0 || out != want {
		t.Errorf("sacct: %d %q %q, want %q", code, out, errOut, want)
	}
	code, out, errOut = run(t, f, "scontrol", Env{}, "show", "job", "10")
	for _, want := range []string{" NumNodes=3 NumCPUs=3 NumTasks=3 ", " TRES=cpu=3,node=3,billing=3\n"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("scontrol show job 10: %d %q %q, want %q in it", code, out, errOut, want)
		}
	}
}

// TestNodeRangeRequeued: a range job requeued after it ran shows the count
// it last got while it waits again, as Slurm 22.05 beside Loom (-N1-3 run
// on 3 nodes, requeued: NumNodes=3, squeue %D 3; NumCPUs and TRES stay the
// request's), though it may start again on fewer (Slurm's did, on 1 when
// only 1 was free): the range is still its request.
func TestNodeRangeRequeued(t *testing.T) {
	t.Parallel()
	f := fixture()
	var j *loomv1.Job
	for _, fj := range f.Jobs {
		if fj.GetJobId() == "14" { // pending
			j = fj
		}
	}
	j.NodeCount, j.MaxNodeCount, j.Ntasks, j.NtasksPerNode, j.CpusPerTask, j.Nodes = 1, 3, 0, 0, 0, nil
	j.RestartCount = 1
	j.Runs = []*loomv1.JobRun{{Attempt: 1, Nodes: []string{"gpu-0001", "gpu-0002", "gpu-0003"}}}
	if code, out, errOut := run(t, f, "scontrol", Env{}, "show", "job", "14"); code != 0 || !strings.Contains(out, " NumNodes=3 NumCPUs=1 ") {
		t.Errorf("show job 14: %d %q %q, want NumNodes=3 NumCPUs=1 (its last count, its request's CPUs)", code, out, errOut)
	}
	if code, out, errOut := run(t, f, "squeue", Env{}, "-h", "-j", "14", "-o", "%D"); code != 0 || out != "3\n" {
		t.Errorf("squeue %%D of 14: %d %q %q, want 3 (its last count)", code, out, errOut)
	}
}

package domain

import (
	"slices"
	"testing"
	"time"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"

	"github.com/loom-ml/loom/libs/clusterspec"
	"github.com/loom-ml/loom/services/scheduler/internal/domain/views"
)

// cpuNodes adds n ready 4-CPU nodes node1..nodeN to partition "cpu" and
// returns their hostnames.
func (h *harness) cpuNodes(n int) []string {
	h.t.Helper()
	hosts := make([]string, n)
	for i := range hosts {
		hosts[i] = "node" + string(rune('1'+i))
		h.do(&eventsv1.NodeChanged{Node: &loomv1.Node{Name: nodeName(hosts[i]), Cluster: cl, Hostname: hosts[i],
			State: loomv1.Node_READY, NodePool: "cpu", MachineType: "n2-standard-4", Role: "compute"}})
	}
	return hosts
}

// TestNodeRangeWidths: a range of -n tasks is placed at the widths of its
// range, each with its own per-node share, the widest that fits winning,
// as Slurm 22.05 (slurm-local.sh, 4-CPU nodes, select/cons_tres CR_Core;
// busy[i] CPUs of node i+1 held by earlier jobs; the run's nodes and
// SLURM_TASKS_PER_NODE measured). Placed at its minimum's share alone,
// -N1-3 -n5 (5 CPUs a node at width 1) never started, and -N1-2 -n4 passed
// over a node with 2 CPUs free. On more nodes than needed Loom's rankers
// may take others than Slurm's first ones (the least loaded), so the rows
// with busy nodes have as many nodes as Slurm used where that matters.
func TestNodeRangeWidths(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		shape      string
		nodes      int
		busy       []int32
		min, most  int32
		ntasks     int32
		hosts      []string
		tasks      []int32
		tpnEnvWant string
	}{
		{"-N1-3 -n5 idle", 4, nil, 1, 3, 5, []string{"node1", "node2", "node3"}, []int32{3, 1, 1}, "3,1(x2)"},
		{"-N1-2 -n5 idle", 4, nil, 1, 2, 5, []string{"node1", "node2"}, []int32{4, 1}, "4,1"},
		{"-N2-3 -n9 idle", 4, nil, 2, 3, 9, []string{"node1", "node2", "node3"}, []int32{4, 4, 1}, "4(x2),1"},
		{"-N1-3 -n12 idle", 4, nil, 1, 3, 12, []string{"node1", "node2", "node3"}, []int32{4, 4, 4}, "4(x3)"},
		{"-N1-4 -n13 idle", 4, nil, 1, 4, 13, []string{"node1", "node2", "node3", "node4"}, []int32{4, 4, 4, 1}, "4(x3),1"},
		{"-N1-3 -n5 node1 full", 4, []int32{4}, 1, 3, 5, []string{"node2", "node3", "node4"}, []int32{3, 1, 1}, "3,1(x2)"},
		{"-N1-3 -n5 node1-2 full", 4, []int32{4, 4}, 1, 3, 5, []string{"node3", "node4"}, []int32{4, 1}, "4,1"},
		// Measured on 4 nodes too: node[1-2], as here on 2.
		{"-N1-2 -n4 node1 2 free", 2, []int32{2}, 1, 2, 4, []string{"node1", "node2"}, []int32{2, 2}, "2(x2)"},
		// Measured on 4 nodes: node[1-3] 2(x2) too.
		{"-N1-3 -n6 node1-2 2 free", 3, []int32{2, 2}, 1, 3, 6, []string{"node1", "node2", "node3"}, []int32{2, 2, 2}, "2(x3)"},
	} {
		t.Run(tc.shape, func(t *testing.T) {
			t.Parallel()
			h := newSpecHarness(t, Config{})
			hosts := h.cpuNodes(tc.nodes)
			id := 1
			for i, b := range tc.busy {
				h.submitJob(job(id, 1, 0, func(j *loomv1.Job) { j.Partition, j.Ntasks, j.Nodelist = "cpu", b, []string{hosts[i]} }))
				h.wantState(id, loomv1.JobState_RUNNING, "")
				id++
			}
			c := h.submitJob(job(id, tc.min, 0, nodeRange(tc.most), func(j *loomv1.Job) {
				j.Partition, j.Command, j.Script, j.Ntasks = "cpu", nil, "x", tc.ntasks
			}))
			h.wantState(id, loomv1.JobState_RUNNING, "")
			r := h.s.Run(jobName(id), 1)
			if !slices.Equal(r.Hostnames, tc.hosts) || !slices.Equal(r.Tasks, tc.tasks) {
				t.Fatalf("run on %v tasks %v; want %v tasks %v", r.Hostnames, r.Tasks, tc.hosts, tc.tasks)
			}
			if got := h.job(id).GetNodes(); len(got) != len(tc.hosts) {
				t.Fatalf("job shows nodes %v, want %d", got, len(tc.hosts))
			}
			if ss := starts(c); len(ss) != 1 || ss[0].GetEnv()["SLURM_TASKS_PER_NODE"] != tc.tpnEnvWant {
				t.Fatalf("StartSteps %v; want one with SLURM_TASKS_PER_NODE %q", ss, tc.tpnEnvWant)
			}
		})
	}
}

// TestNodeRangeWidthWaits: a range that fits at a width only once nodes
// free up waits for resources (Slurm: -N1-3 -n5 with node[1-3] full,
// Resources) and runs at the widest width that fits as soon as one does
// (node1 freed: node1 and node4, 4,1, as Slurm's with node[1-2] full);
// a range that no width can ever fit (-N1-3 -n13: 5 CPUs a node at its
// widest, on 4-CPU nodes; Slurm refuses it at submission, as Loom's
// gateway does) waits with BadConstraints rather than for resources.
func TestNodeRangeWidthWaits(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	hosts := h.cpuNodes(4)
	for i := range 3 {
		h.submitJob(job(i+1, 1, 0, func(j *loomv1.Job) { j.Partition, j.Ntasks, j.Nodelist = "cpu", 4, []string{hosts[i]} }))
		h.wantState(i+1, loomv1.JobState_RUNNING, "")
	}
	batch := func(j *loomv1.Job) { j.Partition, j.Command, j.Script = "cpu", nil, "x" }
	h.submitJob(job(4, 1, 0, nodeRange(3), batch, func(j *loomv1.Job) { j.Ntasks = 5 }))
	h.wantState(4, loomv1.JobState_PENDING, ReasonResources)
	h.submitJob(job(5, 1, 0, nodeRange(3), batch, func(j *loomv1.Job) { j.Ntasks = 13 }))
	h.wantState(5, loomv1.JobState_PENDING, ReasonBadConstraints)
	h.finish(1, 0)
	h.wantState(4, loomv1.JobState_RUNNING, "")
	if r := h.s.Run(jobName(4), 1); !slices.Equal(r.Hostnames, []string{"node1", "node4"}) || !slices.Equal(r.Tasks, []int32{4, 1}) {
		t.Fatalf("run on %v tasks %v; want node1 and node4, 4,1", r.Hostnames, r.Tasks)
	}
	h.wantState(5, loomv1.JobState_PENDING, ReasonBadConstraints)
}

// TestNodeRangeWidthReserved: with backfill, a range whose minimum can
// never fit (-N1-3 -n5 on 4-CPU nodes) is planned at the narrowest width
// that can (2 nodes of 3 CPUs), not left out of the plan: blocked by three
// full nodes until +1 h, it gets the reservation, on two nodes at +1 h.
func TestNodeRangeWidthReserved(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{Policy: EASYPolicy()})
	hosts := h.cpuNodes(4)
	for i := range 3 {
		h.submitJob(job(i+1, 1, 0, limit(time.Hour), func(j *loomv1.Job) { j.Partition, j.Ntasks, j.Nodelist = "cpu", 4, []string{hosts[i]} }))
		h.wantState(i+1, loomv1.JobState_RUNNING, "")
	}
	c := h.submitJob(job(4, 1, 0, nodeRange(3), limit(time.Hour), func(j *loomv1.Job) {
		j.Partition, j.Command, j.Script, j.Ntasks = "cpu", nil, "x", 5
	}))
	h.wantState(4, loomv1.JobState_PENDING, ReasonResources)
	want := h.job(1).GetStartTime().AsTime().Add(time.Hour)
	if len(c.Reservations) != 1 || c.Reservations[0].Job != jobName(4) || !c.Reservations[0].Start.Equal(want) {
		t.Fatalf("reservations %+v; want job 4's at %v", c.Reservations, want)
	}
	if v := views.Job(h.s, jobName(4), h.now); !v.GetExpectedStartTime().AsTime().Equal(want) || len(v.GetSchedNodes()) != 2 {
		t.Fatalf("job 4 expected to start %v on %v; want %v on 2 nodes", v.GetExpectedStartTime(), v.GetSchedNodes(), want)
	}
}

// TestNodeRangeWidthNotSettledByItsMinimum: a range shares no interned
// shape with a job of its minimum's request, so that shape settling empty
// in a pass (-N1 -n5 on 4-CPU nodes: BadConstraints) does not decide the
// range too: -N1-3 -n5 behind it still runs, on 3 nodes.
func TestNodeRangeWidthNotSettledByItsMinimum(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	h.cpuNodes(4)
	batch := func(j *loomv1.Job) { j.Partition, j.Command, j.Script, j.Ntasks = "cpu", nil, "x", 5 }
	h.submitJob(job(1, 1, 0, batch))
	h.wantState(1, loomv1.JobState_PENDING, ReasonBadConstraints)
	h.submitJob(job(2, 1, 0, nodeRange(3), batch))
	h.wantState(2, loomv1.JobState_RUNNING, "")
	if r := h.s.Run(jobName(2), 1); len(r.Nodes) != 3 {
		t.Fatalf("run on %v, want 3 nodes", r.Hostnames)
	}
}

// TestNodeRangeWidthsNeverFitIsCheap: a node range of -n tasks that no
// width can ever fit (each node's share past every node, at any width:
// nodes shrunk or removed since it was accepted) is tried at the widths
// up to the most nodes that pass the static checks at its widest, not
// at every width up to its maximum (up to clusterspec.MaxClusterNodes):
// one placement, and one static scan cached, a width, on every pass that
// considers it, which one user's jobs could multiply past any bound
// (and whose scans evicted every other job's from the cache).
func TestNodeRangeWidthsNeverFitIsCheap(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	h.cpuNodes(4)
	h.submitJob(job(1, 1, 0, nodeRange(20000), func(j *loomv1.Job) {
		j.Partition, j.Command, j.Script, j.Ntasks, j.CpusPerTask = "cpu", nil, "x", 20000, 8
	}))
	h.wantState(1, loomv1.JobState_PENDING, "BadConstraints")
	sc := h.s.scratch.static[cl]
	if sc == nil {
		t.Fatal("no static scans cached for the cluster")
	}
	// The widths placed: 20000 (the widest, none fits), 1 (the minimum),
	// and 2..4 (at most the 4 nodes that could ever be candidates).
	if n := len(sc.scans); n > 5 {
		t.Fatalf("%d static scans cached after one pass over a job no width fits, want at most 5 (its widest, and widths 1..4 of 4 nodes)", n)
	}
}

// TestNodeRangeWidthMemPerCPU: --mem-per-cpu sizes a range's memory by
// the CPUs a node gets at the width it is placed at, as Slurm's (measured
// on 3 4-CPU nodes with CR_Core_Memory, -N1-3 -n5 --mem-per-cpu=1024:
// node1 Mem=3072, node[2-3] Mem=1024, TRES mem=5G, SLURM_MEM_PER_CPU=1024).
// Sized by the minimum's CPUs (5 a node at width 1), every width asked
// each node for 5 CPUs' memory, more than a node has here: the job never
// started (BadConstraints). At width 3 (2 CPUs a node) each node holds 2
// CPUs' memory; the run, the job's mem_mb and the step's memory limit say
// so. --mem is the same at every width.
func TestNodeRangeWidthMemPerCPU(t *testing.T) {
	t.Parallel()
	m, ok := clusterspec.Machine("n2-standard-4")
	if !ok {
		t.Fatal("no n2-standard-4 in the catalog")
	}
	per := m.SchedulableMemoryMiB() / 3 // 5 CPUs' worth fits no node, 2 (or 3) do
	for _, tc := range []struct {
		name          string
		memMB, perCPU int64
		wantMB        int64
	}{
		{"mem-per-cpu", 5 * per, per, 2 * per},
		{"mem", 2 * per, 0, 2 * per},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newSpecHarness(t, Config{})
			h.cpuNodes(3)
			c := h.submitJob(job(1, 1, 0, nodeRange(3), func(j *loomv1.Job) {
				j.Partition, j.Command, j.Script, j.Ntasks = "cpu", nil, "x", 5
				j.MemMb, j.MemPerCpuMb = tc.memMB, tc.perCPU
			}))
			h.wantState(1, loomv1.JobState_RUNNING, "")
			r := h.s.Run(jobName(1), 1)
			if len(r.Hostnames) != 3 || r.MemMB != tc.wantMB {
				t.Fatalf("run on %v with %d MiB a node; want 3 nodes with %d", r.Hostnames, r.MemMB, tc.wantMB)
			}
			if got := h.job(1).GetMemMb(); got != tc.wantMB {
				t.Fatalf("job shows %d MiB a node, want %d", got, tc.wantMB)
			}
			if ss := starts(c); len(ss) != 1 || ss[0].GetMemLimitBytes() != tc.wantMB<<20 {
				t.Fatalf("StartSteps %v; want one with a %d MiB limit", ss, tc.wantMB)
			}
		})
	}
}

// TestNodeRangeWidthMemPerCPURequeue: a --mem-per-cpu range job requeued
// pending again shows its minimum's memory a node (what scontrol's TRES
// and sacct's ReqMem read), not the width its last run got.
func TestNodeRangeWidthMemPerCPURequeue(t *testing.T) {
	t.Parallel()
	m, ok := clusterspec.Machine("n2-standard-4")
	if !ok {
		t.Fatal("no n2-standard-4 in the catalog")
	}
	per := m.SchedulableMemoryMiB() / 3
	h := newSpecHarness(t, Config{})
	h.cpuNodes(3)
	h.submitJob(job(1, 1, 0, nodeRange(3), func(j *loomv1.Job) {
		j.Partition, j.Command, j.Script, j.Ntasks = "cpu", nil, "x", 5
		j.MemMb, j.MemPerCpuMb = 5*per, per
	}))
	h.wantState(1, loomv1.JobState_RUNNING, "")
	if got := h.job(1).GetMemMb(); got != 2*per {
		t.Fatalf("running job shows %d MiB a node, want %d", got, 2*per)
	}
	h.do(&eventsv1.UpdateJob{Job: jobName(1), Cluster: cl, Action: ActionRequeue})
	h.wantState(1, loomv1.JobState_PENDING, ReasonRequeued)
	if got := h.job(1).GetMemMb(); got != 5*per {
		t.Fatalf("requeued job shows %d MiB a node, want %d (5 CPUs at its minimum, 1 node)", got, 5*per)
	}
}

// TestMemPerCPUResize: NumNodes= on a pending --mem-per-cpu job sizes its
// memory a node (what scontrol's TRES and sacct's ReqMem read) by the CPUs
// a node takes at its new minimum, as the scheduler places it: -n8 on 1
// node takes 8 CPUs' memory a node, on 2 nodes 4. MinMemoryNode= ends
// --mem-per-cpu.
func TestMemPerCPUResize(t *testing.T) {
	t.Parallel()
	h := rangeHarness(t, 0)
	h.submitJob(job(1, 1, 0, func(j *loomv1.Job) {
		j.Command, j.Script, j.Ntasks, j.MemMb, j.MemPerCpuMb = nil, "x", 8, 800, 100
	}))
	n := int32(2)
	h.do(&eventsv1.UpdateJob{Job: jobName(1), Cluster: cl, Action: ActionUpdate, NodeCount: &n, User: "root", Admin: true})
	if j := h.job(1); j.GetNodeCount() != 2 || j.GetMemMb() != 400 || j.GetMemPerCpuMb() != 100 {
		t.Fatalf("after NumNodes=2: %d nodes, %d MiB a node, %d a CPU; want 2, 400, 100", j.GetNodeCount(), j.GetMemMb(), j.GetMemPerCpuMb())
	}
	// MinMemoryNode= replaces --mem-per-cpu, even at the memory a node it
	// has now: not a no-op (a wider width would have asked less a node).
	mem := int64(400)
	h.do(&eventsv1.UpdateJob{Job: jobName(1), Cluster: cl, Action: ActionUpdate, MemMb: &mem, User: "root", Admin: true})
	if j := h.job(1); j.GetMemMb() != 400 || j.GetMemPerCpuMb() != 0 {
		t.Fatalf("after MinMemoryNode=400: %d MiB a node, %d a CPU; want 400, none", j.GetMemMb(), j.GetMemPerCpuMb())
	}
}

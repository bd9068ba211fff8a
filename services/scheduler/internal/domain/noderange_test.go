package domain

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// nodeRange makes a job's node count a range (-N MIN-MAX).
func nodeRange(most int32) func(*loomv1.Job) { return func(j *loomv1.Job) { j.MaxNodeCount = most } }

// rangeHarness is a spec harness with n idle GPU nodes (8 GPUs, 208 CPUs).
func rangeHarness(t *testing.T, n int) *harness {
	h := newSpecHarness(t, Config{})
	for i := range n {
		h.gpuNode("a3-000"+string(rune('1'+i)), "b1")
	}
	return h
}

// wantRun checks the node count of job id's run, and that the job's nodes,
// CPUs and GPUs are that run's: what it got, not its minimum.
func (h *harness) wantRun(id, nodes int, gpusPerNode int32) *Run {
	h.t.Helper()
	h.wantState(id, loomv1.JobState_RUNNING, "")
	j := h.job(id)
	r := h.s.Run(jobName(id), h.s.JobRecord(jobName(id)).Attempt)
	if len(r.Nodes) != nodes || len(r.CPUs) != nodes || len(r.Tasks) != nodes || len(j.GetNodes()) != nodes {
		h.t.Fatalf("job %d: run on %d nodes (CPUs %v, tasks %v), job nodes %v; want %d nodes", id, len(r.Nodes), r.CPUs, r.Tasks, j.GetNodes(), nodes)
	}
	if want := gpusPerNode * int32(nodes); r.gpuCount() != want || j.GetAllocGpus() != want {
		h.t.Fatalf("job %d: run holds %d GPUs, job shows %d; want %d", id, r.gpuCount(), j.GetAllocGpus(), want)
	}
	return r
}

// TestNodeRangeIdleTakesMax: -N1-3 on four idle nodes takes three (Slurm
// 22.05: sbatch --test-only -N1-3 on an idle 4-node partition, 3 nodes),
// each with its GPUs per node; -N1-8 takes the four there are; the range
// stays the request (a requeue goes back to it).
func TestNodeRangeIdleTakesMax(t *testing.T) {
	t.Parallel()
	h := rangeHarness(t, 4)
	h.submitJob(job(1, 1, 2, nodeRange(3)))
	h.wantRun(1, 3, 2)
	if j := h.job(1); j.GetNodeCount() != 1 || j.GetMaxNodeCount() != 3 {
		t.Fatalf("job 1 asks %d-%d nodes, want the range 1-3 kept", j.GetNodeCount(), j.GetMaxNodeCount())
	}
	h.finish(1, 0)
	h.submitJob(job(2, 1, 0, nodeRange(8)))
	h.wantRun(2, 4, 0)
}

// TestNodeRangeBusyTakesFree: with two of four nodes held whole, -N1-3
// takes the two free (Slurm: 2 nodes), and -N2-3 waits once none is free
// rather than starting on fewer than its minimum.
func TestNodeRangeBusyTakesFree(t *testing.T) {
	t.Parallel()
	h := rangeHarness(t, 4)
	h.submitJob(job(1, 2, 8))
	h.wantRun(1, 2, 8)
	h.submitJob(job(2, 1, 1, nodeRange(3)))
	h.wantRun(2, 2, 1)
	h.submitJob(job(3, 2, 8, nodeRange(3)))
	h.wantState(3, loomv1.JobState_PENDING, ReasonResources)
	h.finish(1, 0)
	h.tick(0)
	h.wantRun(3, 2, 8)
}

// TestNodeRangeTaskCap: a range takes no more nodes than tasks, as Slurm
// (22.05, idle 4 nodes): -N1-3 -n2 2 nodes, -N2-3 -n5 3 (3+1+1 tasks:
// packed as Slurm's select, slurmspec.PackTasks; -N1-3 -n5 measured so),
// -N1-3 --ntasks-per-node=2 2 (its tasks are the minimum's), and a job
// whose --gpus the scheduler spreads keeps its minimum (-N1-3 --gpus=4: 1).
func TestNodeRangeTaskCap(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		min, most int32
		opt       func(*loomv1.Job)
		nodes     int
		tasks     []int32
	}{
		{"n2", 1, 3, func(j *loomv1.Job) { j.Ntasks = 2 }, 2, []int32{1, 1}},
		{"n5", 2, 3, func(j *loomv1.Job) { j.Ntasks = 5 }, 3, []int32{3, 1, 1}},
		{"tpn2", 1, 3, func(j *loomv1.Job) { j.NtasksPerNode = 2 }, 2, []int32{2, 2}},
		{"gpus4", 1, 3, func(j *loomv1.Job) { j.Gpus = 4 }, 1, []int32{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := rangeHarness(t, 4)
			h.submitJob(job(1, tc.min, 0, nodeRange(tc.most), tc.opt))
			h.wantState(1, loomv1.JobState_RUNNING, "")
			r := h.s.Run(jobName(1), 1)
			if len(r.Nodes) != tc.nodes || !slices.Equal(r.Tasks, tc.tasks) {
				t.Fatalf("run on %d nodes, tasks %v; want %d nodes, tasks %v", len(r.Nodes), r.Tasks, tc.nodes, tc.tasks)
			}
		})
	}
}

// TestNodeRangeRefused: a maximum below the minimum is refused, naming the
// field; NumNodes=N on a pending range replaces it, NumNodes=MIN-MAX sets a
// new one.
func TestNodeRangeRefused(t *testing.T) {
	t.Parallel()
	h := rangeHarness(t, 0)
	_, err := h.s.Handle(h.now, &eventsv1.SubmitJob{Job: job(1, 3, 0, nodeRange(2))})
	if err == nil || !strings.Contains(err.Error(), "job.max_node_count") {
		t.Fatalf("max 2 below min 3: got %v, want an error naming job.max_node_count", err)
	}
	h.submitJob(job(2, 1, 0, nodeRange(3)))
	n := int32(2)
	h.do(&eventsv1.UpdateJob{Job: jobName(2), Cluster: cl, Action: ActionUpdate, NodeCount: &n, User: "root", Admin: true})
	if j := h.job(2); j.GetNodeCount() != 2 || j.GetMaxNodeCount() != 0 {
		t.Fatalf("after NumNodes=2: %d-%d, want 2 and no range", j.GetNodeCount(), j.GetMaxNodeCount())
	}
	// NumNodes=MIN-MAX carries the range, as Slurm's update.
	lo, hi := int32(1), int32(3)
	h.do(&eventsv1.UpdateJob{Job: jobName(2), Cluster: cl, Action: ActionUpdate, NodeCount: &lo, MaxNodeCount: &hi, User: "root", Admin: true})
	if j := h.job(2); j.GetNodeCount() != 1 || j.GetMaxNodeCount() != 3 {
		t.Fatalf("after NumNodes=1-3: %d-%d, want 1-3", j.GetNodeCount(), j.GetMaxNodeCount())
	}
	for _, ev := range []*eventsv1.UpdateJob{
		{NodeCount: proto.Int32(3), MaxNodeCount: proto.Int32(2)},
		{MaxNodeCount: proto.Int32(4)},
	} {
		ev.Job, ev.Cluster, ev.Action, ev.User, ev.Admin = jobName(2), cl, ActionUpdate, "root", true
		if _, err := h.s.Handle(h.now, ev); err == nil || !strings.Contains(err.Error(), "max_node_count") {
			t.Errorf("update %v: got %v, want an error naming max_node_count", ev, err)
		}
	}
	if j := h.job(2); j.GetNodeCount() != 1 || j.GetMaxNodeCount() != 3 {
		t.Fatalf("after refused updates: %d-%d, want 1-3 untouched", j.GetNodeCount(), j.GetMaxNodeCount())
	}
}

// TestNodeRangeWithinLimits: a range widens only as far as the limits a
// start is checked against allow (Slurm caps max_nodes by them,
// acct_policy_get_max_nodes, and checks the allocation after select): an
// association's GrpTRES and MaxTRESPerJob, its account's GrpTRES and the
// QOS's MaxGPUsPerUser. Checked on the minimum alone, -N1-4 with 8 GPUs a
// node took all four nodes past each.
func TestNodeRangeWithinLimits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		setup func(h *harness)
		qos   int32 // MaxGPUsPerUser of QOS normal, 0 for none
		nodes int
	}{
		{"assoc GrpTRES gpu=16", func(h *harness) {
			h.do(&eventsv1.AssociationChanged{Project: "default", Association: &loomv1.Association{Account: "a", User: "ada",
				GrpTres: &loomv1.Tres{Gpu: proto.Int64(16)}}})
		}, 0, 2},
		{"assoc MaxTRESPerJob node=3", func(h *harness) {
			h.do(&eventsv1.AssociationChanged{Project: "default", Association: &loomv1.Association{Account: "a", User: "ada",
				MaxTresPerJob: &loomv1.Tres{Node: proto.Int64(3)}}})
		}, 0, 3},
		{"account GrpTRES gpu=8", func(h *harness) {
			h.do(account("a", "", &loomv1.Tres{Gpu: proto.Int64(8)}))
		}, 0, 1},
		{"QOS MaxGPUsPerUser=24", func(*harness) {}, 24, 3},
		{"no limit", func(*harness) {}, 0, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			q := DefaultQOS()
			q[1].MaxGPUsPerUser = tc.qos // normal
			h := newSpecHarness(t, Config{QOS: q})
			for i := range 4 {
				h.gpuNode("a3-000"+string(rune('1'+i)), "b1")
			}
			tc.setup(h)
			h.submitJob(job(1, 1, 8, nodeRange(4), user("ada", "a")))
			h.wantRun(1, tc.nodes, 8)
		})
	}
}

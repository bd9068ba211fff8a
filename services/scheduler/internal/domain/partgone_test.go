package domain

import (
	"strings"
	"testing"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// twoPoolCluster is cluster cl with CPU pools a and b (n2-standard-8: 8
// CPUs a node), a node set over each, and parts.
func twoPoolCluster(parts ...*loomv1.SlurmPartition) *eventsv1.ClusterChanged {
	var pools []*loomv1.NodePool
	var sets []*loomv1.SlurmNodeSet
	seen := map[string]bool{}
	for _, p := range parts {
		for _, s := range p.GetNodeSetIds() {
			if !seen[s] {
				seen[s] = true
				pools = append(pools, &loomv1.NodePool{Id: s, MachineType: "n2-standard-8"})
				sets = append(sets, &loomv1.SlurmNodeSet{Id: s, NodePoolId: s})
			}
		}
	}
	return &eventsv1.ClusterChanged{Cluster: &loomv1.Cluster{Name: cl,
		Compute:      &loomv1.ComputeResources{NodePools: pools},
		Orchestrator: &loomv1.Orchestrator{Slurm: &loomv1.SlurmOrchestrator{NodeSets: sets, Partitions: parts}},
		Status:       &loomv1.ClusterStatus{State: loomv1.Cluster_RUNNING, SharedDir: "/shared/c1"}}}
}

// poolNode adds a READY n2-standard-8 node of pool.
func (h *harness) poolNode(host, pool string) {
	h.do(&eventsv1.NodeChanged{Node: &loomv1.Node{Name: nodeName(host), Cluster: cl, Hostname: host,
		State: loomv1.Node_READY, NodePool: pool, MachineType: "n2-standard-8", Role: "compute"}})
}

func inPart(p string, cpus int32) func(*loomv1.Job) {
	return func(j *loomv1.Job) { j.Partition, j.CpusPerTask = p, cpus }
}

// wantPartitionGone checks that job id ended NODE_FAIL, exit code 1, with
// Slurm's reason naming partition part (a list: each of them), and was
// never requeued.
func (h *harness) wantPartitionGone(id int, part string) *loomv1.Job {
	h.t.Helper()
	j := h.job(id)
	want := ReasonNodeDown + ": partition " + part + " was removed from the cluster"
	if strings.Contains(part, ",") {
		want = ReasonNodeDown + ": partitions " + strings.ReplaceAll(part, ",", ", ") + " were removed from the cluster"
	}
	if j.GetState() != loomv1.JobState_NODE_FAIL || j.GetExitCode() != 1 || j.GetRestartCount() != 0 ||
		j.GetStateReason() != want {
		h.t.Fatalf("job %d: %v exit %d restarts %d %q, want NODE_FAIL exit 1, not requeued, reason %q",
			id, j.GetState(), j.GetExitCode(), j.GetRestartCount(), j.GetStateReason(), want)
	}
	return j
}

// TestRemovedPartitionFailsItsJobs: an update that removes pool b and
// partition pb ends pb's jobs as slurmctld does when slurm.conf loses a
// partition: the pending one NODE_FAIL at once (start = end = now), the
// running one NODE_FAIL, its step stopped and not requeued. The jobs of pa
// and of pab, a partition over both pools that loses pool b but remains,
// go on as they were (jobs of -p a,b: TestMultiPartitionRemovedPartition).
func TestRemovedPartitionFailsItsJobs(t *testing.T) {
	t.Parallel()
	h := harnessWith(t, Config{Policy: DefaultPolicy()})
	pa := &loomv1.SlurmPartition{Id: "pa", NodeSetIds: []string{"a"}, Default: true}
	pab := &loomv1.SlurmPartition{Id: "pab", NodeSetIds: []string{"a", "b"}}
	pb := &loomv1.SlurmPartition{Id: "pb", NodeSetIds: []string{"b"}}
	h.do(twoPoolCluster(pa, pab, pb))
	h.poolNode("a-0001", "a")
	h.poolNode("b-0001", "b")
	h.poolNode("b-0002", "b")
	h.submitJob(job(1, 1, 0, inPart("pb", 8), func(j *loomv1.Job) { j.Nodelist = []string{"b-0001"} }))
	h.submitJob(job(2, 1, 0, inPart("pb", 4), func(j *loomv1.Job) { j.Nodelist = []string{"b-0001"} }))
	h.submitJob(job(3, 1, 0, inPart("pa", 8)))
	h.submitJob(job(4, 1, 0, inPart("pab", 8), func(j *loomv1.Job) { j.Nodelist = []string{"b-0002"} }))
	h.submitJob(job(5, 1, 0, inPart("pa", 1), func(j *loomv1.Job) { j.Hold = true }))
	for _, id := range []int{1, 3, 4} {
		h.wantState(id, loomv1.JobState_RUNNING, "")
		h.step(id, 1, h.job(id).GetNodes()[0], eventsv1.StepState_STEP_RUNNING, 0)
	}
	h.wantExact(2, loomv1.JobState_PENDING, ReasonResources)
	h.wantExact(5, loomv1.JobState_PENDING, ReasonHeldUser)

	// The update: pool b and partition pb go; pab keeps pool a.
	c := h.do(twoPoolCluster(pa, &loomv1.SlurmPartition{Id: "pab", NodeSetIds: []string{"a"}}))

	j2 := h.wantPartitionGone(2, "pb")
	if !j2.GetStartTime().AsTime().Equal(h.now) || !j2.GetEndTime().AsTime().Equal(h.now) {
		t.Fatalf("pending job 2 start %v end %v, want both %v", j2.GetStartTime().AsTime(), j2.GetEndTime().AsTime(), h.now)
	}
	if ss := stops(c); len(ss) != 1 || ss[0].GetJob() != jobName(1) || ss[0].GetNode() != nodeName("b-0001") ||
		ss[0].GetCause() != eventsv1.StopCause_STOP_CAUSE_NODE_FAILURE {
		t.Fatalf("StopSteps %v, want job 1's on b-0001", ss)
	}
	changed := map[string]loomv1.JobState{}
	for _, jc := range jobChanges(c) {
		changed[jc.GetJob().GetName()] = jc.GetJob().GetState()
		if jc.GetJob().GetState() == loomv1.JobState_REQUEUED {
			t.Fatalf("job %s requeued", jc.GetJob().GetName())
		}
	}
	if changed[jobName(1)] != loomv1.JobState_COMPLETING || changed[jobName(2)] != loomv1.JobState_NODE_FAIL || len(changed) != 2 {
		t.Fatalf("JobChanged %v, want job 1 COMPLETING and job 2 NODE_FAIL only", changed)
	}
	// Its step ends: job 1 is NODE_FAIL, and stays so.
	h.step(1, 1, "b-0001", eventsv1.StepState_STEP_KILLED, 143)
	h.wantPartitionGone(1, "pb")
	h.tick(h.s.cfg.RequeueStopWait * 2)
	h.wantPartitionGone(1, "pb")
	if r := h.s.Run(jobName(1), 1); r.Outcome != loomv1.JobState_NODE_FAIL || !r.Released {
		t.Fatalf("job 1's run: %v released %v", r.Outcome, r.Released)
	}
	// The jobs of the partitions that remain go on.
	h.wantState(3, loomv1.JobState_RUNNING, "")
	h.wantState(4, loomv1.JobState_RUNNING, "")
	h.wantExact(5, loomv1.JobState_PENDING, ReasonHeldUser)
	if h.requeues != 0 {
		t.Fatalf("%d requeues", h.requeues)
	}

	// The same update again (a redelivery) changes no job.
	if c := h.do(twoPoolCluster(pa, &loomv1.SlurmPartition{Id: "pab", NodeSetIds: []string{"a"}})); len(jobChanges(c)) != 0 {
		t.Fatalf("a second delivery changed jobs: %v", jobChanges(c))
	}
}

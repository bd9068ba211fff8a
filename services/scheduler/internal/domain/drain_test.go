package domain

import (
	"google.golang.org/protobuf/proto"
	"reflect"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/clusterspec"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"

	"github.com/loom-ml/loom/services/scheduler/internal/domain/views"
)

// drainNode reports host DRAINING with its deadline grace from now (no
// deadline when grace is 0).
func (h *harness) drainNode(host string, gpus int32, grace time.Duration) *Change {
	n := &loomv1.Node{Name: nodeName(host), Cluster: cl, Hostname: host, Gpus: gpus, State: loomv1.Node_DRAINING}
	if grace != 0 {
		n.DrainDeadline = timestamppb.New(h.now.Add(grace))
	}
	return h.do(&eventsv1.NodeChanged{Node: n})
}

func drainedEvents(c *Change) []*eventsv1.NodeDrained {
	var out []*eventsv1.NodeDrained
	for _, e := range c.Emits {
		if d, ok := e.Payload.(*eventsv1.NodeDrained); ok {
			out = append(out, d)
		}
	}
	return out
}

func wantDrained(t *testing.T, c *Change, hosts ...string) {
	t.Helper()
	var got []string
	for _, d := range drainedEvents(c) {
		if d.GetCluster() != cl {
			t.Fatalf("NodeDrained for cluster %q, want %q", d.GetCluster(), cl)
		}
		got = append(got, d.GetNode())
	}
	var want []string
	for _, h := range hosts {
		want = append(want, nodeName(h))
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("NodeDrained for %v, want %v", got, want)
	}
}

func decision(c *Change, id int) *Decision {
	for i := range c.Decisions {
		if c.Decisions[i].Job == jobName(id) {
			return &c.Decisions[i]
		}
	}
	return nil
}

func TestDrainIdleNodeAtOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("gpu-0001", 8)
	h.node("gpu-0002", 8)
	c := h.drainNode("gpu-0001", 8, time.Minute)
	wantDrained(t, c, "gpu-0001")
	for _, e := range c.Emits {
		if _, ok := e.Payload.(*eventsv1.NodeDrained); ok && (topicOf(e) != topics.JobEvents || e.Key != cl || e.Subject != nodeName("gpu-0001")) {
			t.Fatalf("NodeDrained emitted on %s key %s subject %s", topicOf(e), e.Key, e.Subject)
		}
	}
	// Redelivered, or the same state reported again: not announced twice.
	if c := h.drainNode("gpu-0001", 8, time.Minute-time.Second); !c.Empty() {
		t.Fatalf("redelivered drain changed %v", c.Emits)
	}
	if c := h.tick(time.Hour); !c.Empty() {
		t.Fatalf("tick past the deadline of an idle drained node changed %v", c.Emits)
	}
	if c := h.s.Schedule(h.now); !c.Empty() {
		t.Fatalf("pass changed %v", c.Emits)
	}

	// No new work on the draining node, counted under its own reason.
	h.submit(1, 1, 8)
	if got := h.job(1).GetNodes(); !reflect.DeepEqual(got, []string{"gpu-0002"}) {
		t.Fatalf("job 1 on %v, want gpu-0002", got)
	}
	c = h.submit(2, 1, 1)
	h.wantState(2, loomv1.JobState_PENDING, ReasonResources)
	if d := decision(c, 2); d == nil || d.Filtered["NodeDraining"] != 1 || d.Filtered["InsufficientGPUs"] != 1 {
		t.Fatalf("want one node filtered as NodeDraining and one as InsufficientGPUs, got %+v", d)
	}
	// Only draining nodes left: nothing could take work.
	h.drainNode("gpu-0002", 8, time.Minute)
	h.wantState(2, loomv1.JobState_PENDING, ReasonReqNodeNotAvail)
}

func TestDrainWaitsForTheLastStep(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("gpu-0001", 8)
	h.node("gpu-0002", 8)
	h.submit(1, 2, 4)
	h.submit(2, 1, 4)
	c := h.drainNode("gpu-0001", 8, 0) // no deadline: wait for the jobs
	wantDrained(t, c)
	if len(stops(c)) != 0 || h.job(1).GetState() != loomv1.JobState_RUNNING {
		t.Fatal("draining disturbed a running job")
	}
	wantDrained(t, h.tick(24*time.Hour))
	h.wantState(1, loomv1.JobState_RUNNING, "")

	// Job 1 ends on gpu-0001 first: job 2 still holds the node.
	wantDrained(t, h.step(1, 1, "gpu-0001", eventsv1.StepState_STEP_EXITED, 0))
	c = h.step(1, 1, "gpu-0002", eventsv1.StepState_STEP_EXITED, 0)
	h.wantState(1, loomv1.JobState_COMPLETED, "")
	wantDrained(t, c)
	c = h.step(2, 1, "gpu-0001", eventsv1.StepState_STEP_EXITED, 0)
	h.wantState(2, loomv1.JobState_COMPLETED, "")
	wantDrained(t, c, "gpu-0001")
	// A late copy of the last report, and later events, announce nothing more.
	if c := h.step(2, 1, "gpu-0001", eventsv1.StepState_STEP_EXITED, 0); !c.Empty() {
		t.Fatalf("redelivered last step changed %v", c.Emits)
	}
	wantDrained(t, h.submit(3, 1, 1))
	h.wantState(3, loomv1.JobState_RUNNING, "")
	if got := h.job(3).GetNodes(); !reflect.DeepEqual(got, []string{"gpu-0002"}) {
		t.Fatalf("job 3 on %v, want gpu-0002", got)
	}

	// Back to READY and drained again: a new drain, announced again.
	h.node("gpu-0001", 8)
	if n := h.s.Node(nodeName("gpu-0001")); n.Drained {
		t.Fatal("a READY node is still marked drained")
	}
	wantDrained(t, h.drainNode("gpu-0001", 8, time.Minute), "gpu-0001")
}

func TestDrainDeadlineRequeues(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("gpu-0001", 8)
	h.node("gpu-0002", 8)
	h.node("gpu-0003", 8)
	h.submit(1, 2, 8) // gpu-0001, gpu-0002
	h.submit(2, 1, 8) // gpu-0003
	h.submit(3, 1, 8) // waits
	h.step(1, 1, "gpu-0001", eventsv1.StepState_STEP_RUNNING, 0)
	h.drainNode("gpu-0001", 8, 30*time.Second)

	if c := h.tick(20 * time.Second); !c.Empty() {
		t.Fatalf("tick before the deadline changed %v", c.Emits)
	}
	c := h.tick(10 * time.Second)
	jc := jobChanges(c)
	if len(jc) < 2 || jc[0].GetJob().GetState() != loomv1.JobState_REQUEUED || jc[0].GetJob().GetStateReason() != "node gpu-0001 draining" ||
		jc[1].GetJob().GetState() != loomv1.JobState_PENDING || jc[0].GetAttempt() != 1 {
		t.Fatalf("want JobChanged REQUEUED (node gpu-0001 draining) then PENDING, got %v", jc)
	}
	st := stops(c)
	if len(st) != 2 || st[0].GetNode() != nodeName("gpu-0001") || st[1].GetNode() != nodeName("gpu-0002") ||
		st[0].GetReason() != "node gpu-0001 draining" || st[0].GetAttempt() != 1 {
		t.Fatalf("want StopStep attempt 1 to both nodes, got %v", st)
	}
	// Requeued in its old place, ahead of job 3; the old run still holds its
	// nodes, and the job waits for it to stop before anything else.
	h.wantState(1, loomv1.JobState_PENDING, ReasonRequeued)
	if d := decision(c, 1); d == nil || d.Note != "waiting for its previous run to stop on gpu-0001,gpu-0002" {
		t.Fatalf("decision for the requeued job: %+v", d)
	}
	h.wantState(3, loomv1.JobState_PENDING, ReasonResources)
	if j := h.job(1); len(j.GetNodes()) != 0 || j.GetStartTime() != nil {
		t.Fatalf("requeued job keeps its placement: %v", j)
	}
	wantDrained(t, c)
	if c := h.tick(time.Second); !c.Empty() {
		t.Fatalf("second tick past the deadline changed %v", c.Emits)
	}

	wantDrained(t, h.step(1, 1, "gpu-0002", eventsv1.StepState_STEP_KILLED, 143))
	h.wantState(1, loomv1.JobState_PENDING, ReasonRequeued)
	c = h.step(1, 1, "gpu-0001", eventsv1.StepState_STEP_KILLED, 143)
	wantDrained(t, c, "gpu-0001")
	h.wantState(1, loomv1.JobState_PENDING, ReasonResources) // needs 2 nodes, gpu-0003 is busy
	h.wantState(3, loomv1.JobState_PENDING, ReasonPriority)

	// A new node comes: job 1 starts again, a new attempt, on nodes that are not draining.
	h.node("gpu-0004", 8)
	h.wantState(1, loomv1.JobState_RUNNING, "")
	j := h.s.JobRecord(jobName(1))
	if j.Attempt != 2 || !reflect.DeepEqual(j.Job.GetNodes(), []string{"gpu-0002", "gpu-0004"}) {
		t.Fatalf("job 1 attempt %d on %v, want attempt 2 on gpu-0002, gpu-0004", j.Attempt, j.Job.GetNodes())
	}
	h.wantState(3, loomv1.JobState_PENDING, ReasonResources)
	// A stale report of attempt 1 does not touch attempt 2.
	h.step(1, 1, "gpu-0002", eventsv1.StepState_STEP_EXITED, 1)
	h.wantState(1, loomv1.JobState_RUNNING, "")
	h.finish(1, 0)
	h.wantState(1, loomv1.JobState_COMPLETED, "")
	h.wantState(3, loomv1.JobState_RUNNING, "")
}

// TestDrainDeadlineAlreadyPassed: a node reported DRAINING with a deadline
// that has passed (a zero grace period) has its jobs requeued at once.
func TestDrainDeadlineAlreadyPassed(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("gpu-0001", 8)
	h.node("gpu-0002", 8)
	h.submit(1, 1, 8)
	c := h.drainNode("gpu-0001", 8, -time.Second)
	if st := stops(c); len(st) != 1 || st[0].GetNode() != nodeName("gpu-0001") {
		t.Fatalf("want StopStep to gpu-0001, got %v", st)
	}
	// Requeued; gpu-0002 is free, but the job waits for its old run to stop,
	// then starts there at once.
	h.wantState(1, loomv1.JobState_PENDING, ReasonRequeued)
	wantDrained(t, c)
	wantDrained(t, h.step(1, 1, "gpu-0001", eventsv1.StepState_STEP_KILLED, 143), "gpu-0001")
	h.wantState(1, loomv1.JobState_RUNNING, "")
	if j := h.s.JobRecord(jobName(1)); j.Attempt != 2 || j.Job.GetNodes()[0] != "gpu-0002" {
		t.Fatalf("job 1 attempt %d on %v, want attempt 2 on gpu-0002", j.Attempt, j.Job.GetNodes())
	}
}

// requeuedWhileRunning returns a harness of four 8-GPU nodes whose job 1
// (2 nodes: gpu-0001, gpu-0002) ran and was requeued by scontrol while its
// step on gpu-0001 runs, with the requeue's change.
func requeuedWhileRunning(t *testing.T) (*harness, *Change) {
	t.Helper()
	h := newHarness(t)
	for _, host := range []string{"gpu-0001", "gpu-0002", "gpu-0003", "gpu-0004"} {
		h.node(host, 8)
	}
	h.submit(1, 2, 8) // gpu-0001, gpu-0002
	h.step(1, 1, "gpu-0001", eventsv1.StepState_STEP_RUNNING, 0)
	return h, h.do(&eventsv1.UpdateJob{Job: jobName(1), Cluster: cl, Action: ActionRequeue})
}

// TestRequeuedJobWaitsForItsOldRun: a requeued job's next run never
// overlaps its previous one (which may still be writing a checkpoint): it
// starts once every node of the old run has reported its processes gone,
// or RequeueStopWait after the old run ended when a node never answers (the
// old run then gives that node up). A failed node is fenced: see
// TestFencedAttemptsNeverOverlap.
func TestRequeuedJobWaitsForItsOldRun(t *testing.T) {
	t.Parallel()
	// scontrol requeue: free nodes, but nothing starts while attempt 1 stops.
	h, c := requeuedWhileRunning(t)
	if len(starts(c)) != 0 {
		t.Fatalf("requeued job started again before its old run stopped: %v", starts(c))
	}
	h.wantState(1, loomv1.JobState_PENDING, ReasonRequeued)
	if d := decision(c, 1); d == nil || d.Note != "waiting for its previous run to stop on gpu-0001,gpu-0002" {
		t.Fatalf("decision while attempt 1 stops: %+v", d)
	}
	if c := h.step(1, 1, "gpu-0001", eventsv1.StepState_STEP_KILLED, 143); len(starts(c)) != 0 {
		t.Fatalf("started with gpu-0002's step still running: %v", starts(c))
	}
	h.wantState(1, loomv1.JobState_PENDING, ReasonRequeued)
	// What squeue's reason does not say, the job's placement does.
	if p := views.Job(h.s, jobName(1), h.now).GetPlacement(); p != "waiting for its previous run to stop on gpu-0002" {
		t.Fatalf("placement of the requeued job: %q", p)
	}
	c = h.step(1, 1, "gpu-0002", eventsv1.StepState_STEP_EXITED, 0)
	if st := starts(c); len(st) != 2 || st[0].GetAttempt() != 2 {
		t.Fatalf("want attempt 2 started on two nodes once the old run stopped, got %v", st)
	}
	h.wantState(1, loomv1.JobState_RUNNING, "")

	// A node that never answers holds the job up for RequeueStopWait only.
	h.do(&eventsv1.UpdateJob{Job: jobName(1), Cluster: cl, Action: ActionRequeue})
	h.wantState(1, loomv1.JobState_PENDING, ReasonRequeued)
	if c := h.tick(DefaultRequeueStopWait - time.Second); len(starts(c)) != 0 {
		t.Fatalf("started before the stop wait: %v", starts(c))
	}
	if st := starts(h.tick(time.Second)); len(st) != 2 || st[0].GetAttempt() != 3 {
		t.Fatalf("want attempt 3 started at the stop wait's end, got %v", st)
	}
	// The old run gave up the nodes that did not answer (Slurm's
	// UnkillableStepTimeout): attempt 3 never runs while attempt 2 holds one.
	old := h.s.Run(jobName(1), 2)
	if !old.Released || !old.Steps[old.Nodes[0]].Abandoned {
		t.Fatalf("attempt 3 started while attempt 2 holds its nodes: %+v", old.Steps)
	}

	// A node failure: the failed node's step is fenced (its processes may
	// live on) as the others are waited for: the job starts again once both
	// have stopped.
	h2 := newHarness(t)
	for _, host := range []string{"gpu-0001", "gpu-0002", "gpu-0003", "gpu-0004"} {
		h2.node(host, 8)
	}
	h2.submit(1, 2, 8)
	failed, other := h2.job(1).GetNodes()[0], h2.job(1).GetNodes()[1]
	c = h2.do(&eventsv1.NodeHealthChanged{Node: nodeName(failed), Cluster: cl, Health: eventsv1.NodeHealth_UNHEALTHY, Reason: "gone"})
	if len(starts(c)) != 0 {
		t.Fatalf("started with the other node's step still running: %v", starts(c))
	}
	h2.wantState(1, loomv1.JobState_PENDING, ReasonRequeued)
	if st := starts(h2.step(1, 1, other, eventsv1.StepState_STEP_KILLED, 143)); len(st) != 0 {
		t.Fatalf("attempt 2 started while the failed node's step may still run: %v", st)
	}
	if st := starts(h2.step(1, 1, failed, eventsv1.StepState_STEP_KILLED, 143)); len(st) != 2 {
		t.Fatalf("want attempt 2 started once the surviving node and the failed one stopped, got %v", st)
	}
	if j := h2.job(1); slices.Contains(j.GetNodes(), failed) {
		t.Fatalf("attempt 2 on the failed node %s: %v", failed, j.GetNodes())
	}
}

// TestFailedNodeEndsJobsNodeFail is the spot preemption path: a node that
// goes FAILED ends its jobs NODE_FAIL (a --no-requeue job for good) and
// takes no work.
func TestFailedNodeEndsJobsNodeFail(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("gpu-0001", 8)
	h.node("gpu-0002", 8)
	h.submitJob(&loomv1.Job{Name: jobName(1), JobId: "1", Cluster: cl, NodeCount: 2, GpusPerNode: 8,
		Command: []string{"/bin/train"}, Requeue: proto.Bool(false)})
	c := h.do(&eventsv1.NodeChanged{Node: &loomv1.Node{Name: nodeName("gpu-0002"), Cluster: cl, Hostname: "gpu-0002", Gpus: 8,
		State: loomv1.Node_FAILED, Reason: "preempted by provider"}})
	h.wantState(1, loomv1.JobState_NODE_FAIL, "node gpu-0002 down: preempted by provider")
	if st := stops(c); len(st) != 1 || st[0].GetNode() != nodeName("gpu-0001") {
		t.Fatalf("want StopStep to gpu-0001 only, got %v", st)
	}
	c = h.submit(2, 1, 1)
	if got := h.job(2).GetNodes(); h.job(2).GetState() != loomv1.JobState_PENDING || len(got) != 0 {
		t.Fatalf("job 2 placed on %v with gpu-0001 held and gpu-0002 FAILED", got)
	}
	if d := decision(c, 2); d == nil || d.Filtered["NodeNotReady"] != 1 {
		t.Fatalf("want gpu-0002 filtered as NodeNotReady, got %+v", d)
	}
	h.step(1, 1, "gpu-0001", eventsv1.StepState_STEP_KILLED, 143)
	if got := h.job(2).GetNodes(); !reflect.DeepEqual(got, []string{"gpu-0001"}) {
		t.Fatalf("job 2 on %v, want gpu-0001", got)
	}
}

func TestNoWorkOnLoginNodes(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.do(&eventsv1.NodeChanged{Node: &loomv1.Node{Name: nodeName("c1-login-001"), Cluster: cl, Hostname: "c1-login-001",
		State: loomv1.Node_READY, Role: clusterspec.RoleLogin}})
	c := h.submit(1, 1, 0)
	h.wantState(1, loomv1.JobState_PENDING, ReasonReqNodeNotAvail)
	h.node("cpu-0001", 0)
	h.wantState(1, loomv1.JobState_RUNNING, "")
	if got := h.job(1).GetNodes(); !reflect.DeepEqual(got, []string{"cpu-0001"}) {
		t.Fatalf("job 1 on %v, want cpu-0001", got)
	}
	c = h.submit(2, 2, 0)
	if d := decision(c, 2); d == nil || d.Filtered["LoginNode"] != 1 {
		t.Fatalf("want the login node filtered as LoginNode, got %+v", d)
	}
}

// TestPreviousRunGateFollowsTheRuns: the previous-run gate's look-ups kept
// across passes (scratch.prevRunStopOf) follow the old run as its steps
// stop, and a pass that edits runs reads them afresh: each pass as a pass
// on the state restored afresh decides, notes and wake included.
func TestPreviousRunGateFollowsTheRuns(t *testing.T) {
	t.Parallel()
	h, _ := requeuedWhileRunning(t)
	pass := func(label, note string) {
		t.Helper()
		for _, d := range []time.Duration{time.Second, 2 * time.Second} { // the second on the kept look-ups
			at := h.now.Add(d)
			got := h.s.Schedule(at)
			fresh := NewState(h.s.Config())
			fresh.Restore(h.s.Snapshot())
			want := fresh.Schedule(at)
			sameChange(t, label, got, want)
			if d := decision(got, 1); d == nil || d.Note != note {
				t.Fatalf("%s: decision %+v, want note %q", label, d, note)
			}
			if !got.wake[cl].Equal(want.wake[cl]) {
				t.Fatalf("%s: wake %v, restored %v", label, got.wake[cl], want.wake[cl])
			}
		}
	}
	pass("both stopping", "waiting for its previous run to stop on gpu-0001,gpu-0002")
	h.step(1, 1, "gpu-0001", eventsv1.StepState_STEP_KILLED, 143)
	pass("one stopped", "waiting for its previous run to stop on gpu-0002")
	// A pass over a change that edits a run reads the runs afresh.
	c := h.step(1, 1, "gpu-0002", eventsv1.StepState_STEP_EXITED, 0)
	if st := starts(c); len(st) != 2 || st[0].GetAttempt() != 2 {
		t.Fatalf("want attempt 2 started once the old run stopped, got %v", st)
	}
}

package domain

import (
	"slices"
	"strings"
	"testing"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// notOpened reports job id's step of attempt on host lost as its agent
// reports a StartStep sealed for another registration of the node: never
// run.
func (h *harness) notOpened(id int, attempt int32, host string) *Change {
	return h.do(&eventsv1.StepChanged{Job: jobName(id), Attempt: attempt, Node: nodeName(host), Cluster: cl,
		State: eventsv1.StepState_STEP_LOST, RegistrationMismatch: true,
		Message: `sealed for registration "1.boot-1" of ` + nodeName(host) + `, and this agent is of registration "2.boot-2" (the node registered again): not run`})
}

// A step its agent never ran because its StartStep was sealed for a
// registration of the node the agent does not have (the node registered
// again and the scheduler had not learnt it yet) is the control plane's
// race: the job goes back to PENDING as if its run never started — even a
// --no-requeue job, no infrastructure restart counted, no node excluded —
// and its other nodes' steps are stopped as for a requeue.
func TestNeverLaunchedStepRequeuesAsNeverStarted(t *testing.T) {
	t.Parallel()
	h := newHealthHarness(t, Config{MaxInfraRestarts: 1})
	h.node("gpu-0001", 8)
	h.node("gpu-0002", 8)
	h.noRequeue(1, 2, 8)
	h.step(1, 1, "gpu-0002", eventsv1.StepState_STEP_RUNNING, 0)
	c := h.notOpened(1, 1, "gpu-0001")

	r := h.s.Run(jobName(1), 1)
	if r.Outcome != loomv1.JobState_REQUEUED || !strings.HasPrefix(r.Reason, "launch failed on gpu-0001: sealed for registration") ||
		!strings.Contains(r.Reason, "requeued as never launched, 1 of 3") {
		t.Fatalf("run 1: %v %q; want REQUEUED, its launch failure and the budget", r.Outcome, r.Reason)
	}
	rec := h.s.JobRecord(jobName(1))
	if j := h.job(1); j.GetState() != loomv1.JobState_PENDING || j.GetRestartCount() != 1 {
		t.Fatalf("job 1: %v %q, restarts %d; want PENDING again (its old run still stopping)", j.GetState(), j.GetStateReason(), j.GetRestartCount())
	}
	if rec.InfraRestarts != 0 || len(rec.Excluded) != 0 || rec.UnlaunchedRequeues != 1 {
		t.Fatalf("job 1: infra restarts %d, excluded %v, unlaunched requeues %d; want 0, none, 1",
			rec.InfraRestarts, rec.Excluded, rec.UnlaunchedRequeues)
	}
	for _, jc := range jobChanges(c) {
		if s := jc.GetJob().GetState(); s == loomv1.JobState_NODE_FAIL || s == loomv1.JobState_FAILED {
			t.Fatalf("job 1 went %v on its way back to the queue: %q", s, jc.GetJob().GetStateReason())
		}
	}
	if st := stops(c); len(st) != 1 || st[0].GetNode() != nodeName("gpu-0002") || st[0].GetCause() != eventsv1.StopCause_STOP_CAUSE_REQUEUED {
		t.Fatalf("stops %v; want gpu-0002's step stopped for the requeue", st)
	}
	// Once the other step stopped, the job starts again, on both nodes.
	h.step(1, 1, "gpu-0002", eventsv1.StepState_STEP_KILLED, 143)
	h.wantState(1, loomv1.JobState_RUNNING, "")
	if j := h.job(1); len(j.GetNodes()) != 2 || h.s.JobRecord(jobName(1)).Attempt != 2 {
		t.Fatalf("job 1 on %v, attempt %d; want both nodes, attempt 2", j.GetNodes(), h.s.JobRecord(jobName(1)).Attempt)
	}
}

// The requeues of a run that never launched are bounded: a scheduler that
// goes on sealing for a registration the node never has cannot requeue the
// job for ever. Past MaxUnlaunchedRequeues such a run counts as a lost
// step does (NODE_FAIL, an infrastructure restart; a --no-requeue job ends).
func TestNeverLaunchedRequeuesAreBounded(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("gpu-0001", 8)
	h.submit(1, 1, 8)
	for a := int32(1); a <= MaxUnlaunchedRequeues; a++ {
		h.notOpened(1, a, "gpu-0001")
		if rec := h.s.JobRecord(jobName(1)); rec.Attempt != a+1 || rec.InfraRestarts != 0 || rec.UnlaunchedRequeues != a {
			t.Fatalf("after %d never launched: attempt %d, infra restarts %d, unlaunched %d", a, rec.Attempt, rec.InfraRestarts, rec.UnlaunchedRequeues)
		}
		h.wantState(1, loomv1.JobState_RUNNING, "")
	}
	h.notOpened(1, MaxUnlaunchedRequeues+1, "gpu-0001")
	r := h.s.Run(jobName(1), MaxUnlaunchedRequeues+1)
	if rec := h.s.JobRecord(jobName(1)); r.Outcome != loomv1.JobState_NODE_FAIL || rec.InfraRestarts != 1 ||
		!strings.HasPrefix(r.Reason, "step lost on gpu-0001: sealed for") || !strings.Contains(r.Reason, "3 times already") {
		t.Fatalf("past the budget: run %v %q, infra restarts %d; want NODE_FAIL counted", r.Outcome, r.Reason, rec.InfraRestarts)
	}

	// A --no-requeue job past the budget ends NODE_FAIL.
	h.finish(1, 0)
	h.noRequeue(2, 1, 8)
	for a := int32(1); a <= MaxUnlaunchedRequeues; a++ {
		h.notOpened(2, a, "gpu-0001")
	}
	h.notOpened(2, MaxUnlaunchedRequeues+1, "gpu-0001")
	if j := h.job(2); j.GetState() != loomv1.JobState_NODE_FAIL || !strings.Contains(j.GetStateReason(), "counts as a node failure") {
		t.Fatalf("--no-requeue job past the budget: %v %q; want NODE_FAIL saying why", j.GetState(), j.GetStateReason())
	}
}

// A job step (srun) whose tasks could not launch on a node because their
// LaunchTasks was sealed for another registration of it fails as Slurm's
// step does when a node refuses its launch: its other tasks are killed, the
// step ends FAILED naming the node, and the job goes on running; nothing is
// requeued or counted against the job.
func TestJobStepNotLaunchedFailsTheStepOnly(t *testing.T) {
	t.Parallel()
	h := batchOnTwo(t)
	h.do(createStep("r1"))
	h.tasks(0, "a", eventsv1.StepState_STEP_RUNNING)
	c := h.do(&eventsv1.TasksChanged{Job: jobName(1), Attempt: 1, StepId: 0, Node: nodeName("b"), Cluster: cl,
		State: eventsv1.StepState_STEP_FAILED_TO_START, ExitCodes: []int32{1, 1}, RegistrationMismatch: true,
		Message: `sealed for registration "1.boot-1" of ` + nodeName("b") + `: not run`})
	if k := kills(c); len(k) != 1 || k[0].GetNode() != nodeName("a") {
		t.Fatalf("KillTasks %v; want a's tasks killed", k)
	}
	h.tasks(0, "a", eventsv1.StepState_STEP_KILLED, 143, 143)
	if s := h.jobStep(0); s.GetState() != loomv1.JobState_FAILED || !strings.Contains(s.GetReason(), "tasks on b failed_to_start: sealed for registration") {
		t.Fatalf("step 0: %v %q; want FAILED naming b's launch", s.GetState(), s.GetReason())
	}
	// srun learns which node refused the launch (Slurm's "Task launch for
	// StepId=... failed on node b"), and why.
	if s := h.jobStep(0); !slices.Equal(s.GetLaunchFailed(), []bool{false, true}) || !strings.Contains(s.GetNodeMessages()[1], "sealed for registration") {
		t.Fatalf("step 0: launch_failed %v, node messages %q; want b's launch failed, saying why", s.GetLaunchFailed(), s.GetNodeMessages())
	}
	h.wantExact(1, loomv1.JobState_RUNNING, "")
	if rec := h.s.JobRecord(jobName(1)); rec.Attempt != 1 || rec.InfraRestarts != 0 || rec.UnlaunchedRequeues != 0 {
		t.Fatalf("job: attempt %d, infra restarts %d, unlaunched %d; want its run going on untouched", rec.Attempt, rec.InfraRestarts, rec.UnlaunchedRequeues)
	}
}

// A job whose run never launched on a node goes back to the queue and, at
// its next start, keeps off that node while another has room (as slurmctld
// drains a node whose launch failed; here the job alone avoids it, for
// that one attempt): it starts at once on the other node. The avoidance
// ends with that start. When the other node is busy, it does not wait for
// it: it starts on the node it avoided (TestNeverLaunchedRequeuesAreBounded,
// whose cluster has that node alone, too).
func TestNeverLaunchedAvoidsTheNodeNextTime(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("gpu-0001", 8)
	h.node("gpu-0002", 8)
	h.submit(1, 1, 8)
	if n := h.job(1).GetNodes(); len(n) != 1 || n[0] != "gpu-0001" {
		t.Fatalf("job 1 on %v; want gpu-0001 (the first of equals)", n)
	}
	h.notOpened(1, 1, "gpu-0001")
	h.wantState(1, loomv1.JobState_RUNNING, "")
	if n := h.job(1).GetNodes(); len(n) != 1 || n[0] != "gpu-0002" {
		t.Fatalf("job 1's attempt 2 on %v; want gpu-0002, not the node it never launched on", n)
	}
	if rec := h.s.JobRecord(jobName(1)); rec.Attempt != 2 || rec.Avoid != "" || len(rec.Excluded) != 0 {
		t.Fatalf("job 1: attempt %d, avoid %q, excluded %v; want 2, none (ended by its start), none", rec.Attempt, rec.Avoid, rec.Excluded)
	}

	// The other node busy: job 2 starts again at once on the node it avoids.
	h.submit(2, 1, 8)
	h.wantState(2, loomv1.JobState_RUNNING, "")
	if n := h.job(2).GetNodes(); len(n) != 1 || n[0] != "gpu-0001" {
		t.Fatalf("job 2 on %v; want gpu-0001", n)
	}
	h.notOpened(2, 1, "gpu-0001")
	h.wantState(2, loomv1.JobState_RUNNING, "")
	if n := h.job(2).GetNodes(); len(n) != 1 || n[0] != "gpu-0001" || h.s.JobRecord(jobName(2)).Avoid != "" {
		t.Fatalf("job 2's attempt 2 on %v (avoid %q); want gpu-0001 again, gpu-0002 being busy", n, h.s.JobRecord(jobName(2)).Avoid)
	}
}

// A job that avoids the node its last run never launched on says so in
// its placement explanation (scontrol show job's Placement=) while it is
// pending, named as such: the node is in no filtered count (it is placed
// as without it when it fits nowhere else), in neither its --exclude nor
// excluded_nodes. Its start ends the avoidance, and the note.
func TestNeverLaunchedAvoidedNodeIsShown(t *testing.T) {
	t.Parallel()
	h := newHealthHarness(t, Config{})
	h.node("gpu-0001", 8)
	h.node("gpu-0002", 8)
	h.submit(1, 2, 8)
	h.step(1, 1, "gpu-0002", eventsv1.StepState_STEP_RUNNING, 0)
	h.notOpened(1, 1, "gpu-0001")
	// Pending while its step on gpu-0002 is being stopped.
	h.wantState(1, loomv1.JobState_PENDING, ReasonRequeued)
	v := h.s.JobViewer(h.now)(jobName(1))
	const note = "avoiding gpu-0001 (its last run never launched there; used only when no other node has room)"
	if !strings.HasSuffix(v.GetPlacement(), "; "+note) || len(v.GetExcludedNodes()) != 0 || len(v.GetExclude()) != 0 {
		t.Fatalf("placement %q, excluded_nodes %v, exclude %v; want the placement to end %q, no exclusion", v.GetPlacement(),
			v.GetExcludedNodes(), v.GetExclude(), note)
	}
	h.step(1, 1, "gpu-0002", eventsv1.StepState_STEP_KILLED, 143)
	h.wantState(1, loomv1.JobState_RUNNING, "")
	if v := h.s.JobViewer(h.now)(jobName(1)); strings.Contains(v.GetPlacement(), "avoiding") {
		t.Fatalf("started job's placement %q still names the avoided node", v.GetPlacement())
	}
}

package domain

import (
	"testing"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// batchPlaced starts batch job 1 on nodes a and b (2 tasks a node) and
// reports nothing: its batch host's agent still runs the prolog checks.
func batchPlaced(t *testing.T) *harness {
	h := newHarness(t)
	h.node("a", 4)
	h.node("b", 4)
	h.submitJob(&loomv1.Job{Name: jobName(1), JobId: "1", Cluster: cl, NodeCount: 2, NtasksPerNode: 2,
		Script: "#!/bin/sh\nsleep 100\n", User: "ada"})
	h.wantExact(1, loomv1.JobState_RUNNING, "") // as slurmctld: RUNNING from the allocation
	return h
}

// A step asked for (srun --jobid, a salloc shell) while the job's nodes have
// not reported the allocation ready waits, as slurmctld's step_create
// answers ESLURM_PROLOG_RUNNING and srun retries: no task starts before the
// batch host's agent has reported its batch step running (its prolog checks
// passed). That report starts it, in the same change.
func TestJobStepWaitsForTheNodesReport(t *testing.T) {
	t.Parallel()
	h := batchPlaced(t)
	c := h.do(createStep("r1", func(e *eventsv1.CreateJobStep) { e.Exact, e.Ntasks = true, 1 }))
	if ls := launches(c); len(ls) != 0 {
		t.Fatalf("a step launched before the prolog passed: %v", ls)
	}
	s := h.jobStep(0)
	if s.GetState() != loomv1.JobState_PENDING || s.GetReason() != ReasonStepProlog || s.GetStartTime() != nil {
		t.Fatalf("step 0: %v %q (start %v), want PENDING %q", s.GetState(), s.GetReason(), s.GetStartTime(), ReasonStepProlog)
	}
	// A second one waits beside it; neither is held by the other.
	h.do(createStep("r2", func(e *eventsv1.CreateJobStep) { e.Exact, e.Ntasks = true, 1 }))
	// Another event of the job (a node's heartbeat, the other node's
	// nothing) releases nothing: b runs no process, a has not reported.
	if ls := launches(h.node("c", 4)); len(ls) != 0 {
		t.Fatalf("an unrelated change launched %v", ls)
	}
	c = h.step(1, 1, "a", eventsv1.StepState_STEP_RUNNING, 0)
	ls := launches(c)
	if len(ls) != 2 || ls[0].GetStepId() != 0 || ls[1].GetStepId() != 1 {
		t.Fatalf("the batch host's report launched %v, want steps 0 and 1", ls)
	}
	for id := int32(0); id < 2; id++ {
		if s := h.jobStep(id); s.GetState() != loomv1.JobState_RUNNING || s.GetReason() != "" || s.GetStartTime() == nil {
			t.Fatalf("step %d after the report: %v %q", id, s.GetState(), s.GetReason())
		}
	}
	if n := len(h.s.stepReqs); n != 0 {
		t.Fatalf("%d waiting steps' requests kept after they started", n)
	}
	// Once ready, a step starts at once, as before.
	if ls := launches(h.do(createStep("r3", func(e *eventsv1.CreateJobStep) { e.Exact, e.Ntasks = true, 1 }))); len(ls) != 1 {
		t.Fatalf("a step after the report: launches %v, want 1", ls)
	}
}

// A command job (an implicit srun on every node) is ready when every node's
// agent has reported; a held step that then finds its CPUs taken waits for
// them, saying so.
func TestHeldJobStepWaitsForEveryNodeThenForCPUs(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("a", 4)
	h.node("b", 4)
	h.submitJob(&loomv1.Job{Name: jobName(1), JobId: "1", Cluster: cl, NodeCount: 2, NtasksPerNode: 1,
		Command: []string{"sleep", "100"}, User: "ada"})
	// Without --exact a step holds every CPU of the job on its nodes:
	// the second waits for the first once both may start.
	h.do(createStep("r1"))
	h.do(createStep("r2"))
	if ls := launches(h.step(1, 1, "a", eventsv1.StepState_STEP_RUNNING, 0)); len(ls) != 0 {
		t.Fatalf("launched %v with node b not reported", ls)
	}
	if s := h.jobStep(0); s.GetReason() != ReasonStepProlog {
		t.Fatalf("step 0 after a's report: %v %q", s.GetState(), s.GetReason())
	}
	ls := launches(h.step(1, 1, "b", eventsv1.StepState_STEP_RUNNING, 0))
	if len(ls) != 2 || ls[0].GetStepId() != 0 || ls[1].GetStepId() != 0 {
		t.Fatalf("every node reported: launches %v, want step 0 on both nodes", ls)
	}
	if s := h.jobStep(1); s.GetState() != loomv1.JobState_PENDING || s.GetReason() != ReasonStepBusy {
		t.Fatalf("step 1: %v %q, want PENDING %q", s.GetState(), s.GetReason(), ReasonStepBusy)
	}
	h.tasks(0, "a", eventsv1.StepState_STEP_EXITED, 0)
	if ls := launches(h.tasks(0, "b", eventsv1.StepState_STEP_EXITED, 0)); len(ls) != 2 || ls[0].GetStepId() != 1 {
		t.Fatalf("step 0 ended: launches %v, want step 1", ls)
	}
}

// A job that ends while its steps wait for its nodes ends them: the prolog
// failed (the job is requeued), or the job was cancelled. They never start,
// their requests are dropped, and their reason says why.
func TestHeldJobStepEndsWithItsJob(t *testing.T) {
	t.Parallel()
	t.Run("prolog failed", func(t *testing.T) {
		t.Parallel()
		h := batchPlaced(t)
		h.node("c", 4) // where the requeued job goes
		h.do(createStep("r1"))
		c := h.do(&eventsv1.StepChanged{Job: jobName(1), Attempt: 1, Node: nodeName("a"), Cluster: cl,
			State: eventsv1.StepState_STEP_FAILED_TO_START, ExitCode: 1,
			Message: "prolog check failed on a: disk full (check disk)"})
		if ls := launches(c); len(ls) != 0 {
			t.Fatalf("the prolog failed and the step launched: %v", ls)
		}
		// The waiting step ran nowhere: it keeps no node from the
		// requeued job, which starts again in the same change.
		if ss := starts(c); len(ss) != 1 || ss[0].GetAttempt() != 2 {
			t.Fatalf("starts after the prolog failure: %v, want attempt 2", ss)
		}
		s := h.s.JobStep(jobName(1), 0)
		if s == nil {
			// The requeued job's new attempt has no steps: look at the
			// ended run's.
			steps, _ := h.s.JobSteps(jobName(1), 1)
			if len(steps) != 1 {
				t.Fatalf("attempt 1's steps: %v", steps)
			}
			s = steps[0]
		}
		if s.GetState() != loomv1.JobState_CANCELLED || s.GetReason() != "job NODE_FAIL" || s.GetStartTime() != nil {
			t.Fatalf("the waiting step: %v %q (start %v), want CANCELLED %q", s.GetState(), s.GetReason(), s.GetStartTime(), "job NODE_FAIL")
		}
		if n := len(h.s.stepReqs); n != 0 {
			t.Fatalf("%d requests kept for steps that will never start", n)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		t.Parallel()
		h := batchPlaced(t)
		h.do(createStep("r1"))
		c := h.do(&eventsv1.CancelJob{Job: jobName(1), Cluster: cl, User: "ada"})
		if ls := launches(c); len(ls) != 0 {
			t.Fatalf("launches %v", ls)
		}
		if s := h.jobStep(0); s.GetState() != loomv1.JobState_CANCELLED || s.GetReason() == ReasonStepProlog {
			t.Fatalf("the waiting step: %v %q, want CANCELLED with the job's end as reason", s.GetState(), s.GetReason())
		}
		// The batch step's report of its end (it was stopped) starts nothing.
		if ls := launches(h.step(1, 1, "a", eventsv1.StepState_STEP_KILLED, 143)); len(ls) != 0 {
			t.Fatalf("the stopped job's report launched %v", ls)
		}
	})
	t.Run("step cancelled", func(t *testing.T) {
		t.Parallel()
		h := batchPlaced(t)
		h.do(createStep("r1"))
		h.do(&eventsv1.CancelJobStep{Job: jobName(1), StepId: 0, User: "ada"})
		if s := h.jobStep(0); s.GetState() != loomv1.JobState_CANCELLED {
			t.Fatalf("step 0 cancelled while waiting: %v", s.GetState())
		}
		if ls := launches(h.step(1, 1, "a", eventsv1.StepState_STEP_RUNNING, 0)); len(ls) != 0 {
			t.Fatalf("a cancelled waiting step launched: %v", ls)
		}
	})
}

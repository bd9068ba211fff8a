package domain

import (
	"reflect"
	"testing"
	"time"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// statesSeen returns the states of job id's JobChanged events in c, in order.
func statesSeen(c *Change, id int) []loomv1.JobState {
	var out []loomv1.JobState
	for _, jc := range jobChanges(c) {
		if jc.GetJob().GetName() == jobName(id) {
			out = append(out, jc.GetJob().GetState())
		}
	}
	return out
}

// storedConfiguring reloads h's state with job id CONFIGURING, as an
// earlier scheduler stored a started job until its steps reported running.
func storedConfiguring(h *harness, id int) {
	h.t.Helper()
	snap := h.s.Snapshot()
	for _, j := range snap.Jobs {
		if j.Name() == jobName(id) {
			j.Job.State = loomv1.JobState_CONFIGURING
		}
	}
	h.s = NewState(h.s.Config())
	h.s.Restore(snap)
	h.wantExact(id, loomv1.JobState_CONFIGURING, "")
}

// TestStartIsRunning: a job is RUNNING from the change that starts it, the
// one that emits its StartStep, as slurmctld marks a job RUNNING at its
// allocation; its step's report of running changes nothing. It was
// CONFIGURING until that report, which the agent sends after the exec: the
// script's own first scontrol show job could read CONFIGURING.
func TestStartIsRunning(t *testing.T) {
	t.Parallel()
	for _, script := range []string{"", "#!/bin/sh\ntrue\n"} {
		h := newHarness(t)
		h.node("gpu-0001", 8)
		h.node("gpu-0002", 8)
		c := h.submitJob(job(1, 2, 4, func(j *loomv1.Job) {
			if script != "" {
				j.Command, j.Script = nil, script
			}
		}))
		if len(starts(c)) == 0 {
			t.Fatalf("script %q: the submission started no step", script)
		}
		if got := statesSeen(c, 1); !reflect.DeepEqual(got, []loomv1.JobState{loomv1.JobState_RUNNING}) {
			t.Fatalf("script %q: the change with the StartStep emits %v, want [RUNNING]", script, got)
		}
		h.wantExact(1, loomv1.JobState_RUNNING, "")
		for _, host := range []string{"gpu-0001", "gpu-0002"} {
			if script != "" && host != "gpu-0001" {
				break // the batch host's step alone runs
			}
			if c := h.step(1, 1, host, eventsv1.StepState_STEP_RUNNING, 0); len(jobChanges(c)) != 0 {
				t.Fatalf("script %q: %s reports running: %v, want no JobChanged", script, host, jobChanges(c))
			}
			h.wantExact(1, loomv1.JobState_RUNNING, "")
		}
	}
}

// TestStoredConfiguringGoesRunning: a job an earlier scheduler stored
// CONFIGURING goes RUNNING as it did, once every node of its run is ready:
// each node's step for a command, the batch host's for a script; one
// whose step ends before it reports running goes to its final state.
func TestStoredConfiguringGoesRunning(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("gpu-0001", 8)
	h.node("gpu-0002", 8)
	h.submitJob(job(1, 2, 4))
	storedConfiguring(h, 1)
	if c := h.step(1, 1, "gpu-0001", eventsv1.StepState_STEP_RUNNING, 0); len(jobChanges(c)) != 0 {
		t.Fatalf("one node of two running: %v", jobChanges(c))
	}
	h.wantExact(1, loomv1.JobState_CONFIGURING, "")
	c := h.step(1, 1, "gpu-0002", eventsv1.StepState_STEP_RUNNING, 0)
	if got := statesSeen(c, 1); !reflect.DeepEqual(got, []loomv1.JobState{loomv1.JobState_RUNNING}) {
		t.Fatalf("every node running: %v", got)
	}

	h = newHarness(t)
	h.node("gpu-0001", 8)
	h.node("gpu-0002", 8)
	h.submitJob(job(2, 2, 4, func(j *loomv1.Job) { j.Command, j.Script = nil, "#!/bin/sh\ntrue\n" }))
	storedConfiguring(h, 2)
	c = h.step(2, 1, "gpu-0001", eventsv1.StepState_STEP_RUNNING, 0)
	if got := statesSeen(c, 2); !reflect.DeepEqual(got, []loomv1.JobState{loomv1.JobState_RUNNING}) {
		t.Fatalf("batch host running: %v", got)
	}
	h.submitJob(job(3, 1, 4))
	storedConfiguring(h, 3)
	h.step(3, 1, h.job(3).GetNodes()[0], eventsv1.StepState_STEP_EXITED, 0)
	h.wantExact(3, loomv1.JobState_COMPLETED, "")
}

// TestRunningCompleting follows a 2-node job whose second node reports
// late, both when it starts and when it ends: PENDING → RUNNING →
// COMPLETING → the final state, with the exit code and reason the attempt
// ended with, and the allocation held until the last step ends.
func TestRunningCompleting(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		end    func(h *harness) *Change
		final  loomv1.JobState
		code   int32
		reason string
	}{
		{"failed", func(h *harness) *Change {
			return h.step(1, 1, "gpu-0001", eventsv1.StepState_STEP_EXITED, 3)
		}, loomv1.JobState_FAILED, 3, ReasonNonZeroExitCode},
		{"cancelled", func(h *harness) *Change {
			return h.do(&eventsv1.CancelJob{Job: jobName(1), Cluster: cl})
		}, loomv1.JobState_CANCELLED, 0, ""},
		{"timeout", func(h *harness) *Change { return h.tick(2 * time.Hour) }, loomv1.JobState_TIMEOUT, 0, ReasonTimeLimit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.node("gpu-0001", 8)
			h.node("gpu-0002", 8)
			c := h.submitJob(job(1, 2, 4, limit(time.Hour)))
			if got := statesSeen(c, 1); !reflect.DeepEqual(got, []loomv1.JobState{loomv1.JobState_RUNNING}) {
				t.Fatalf("submit: %v", got)
			}
			if len(h.s.ActiveRuns()) != 1 {
				t.Fatal("a started job holds no allocation")
			}
			h.step(1, 1, "gpu-0001", eventsv1.StepState_STEP_RUNNING, 0)
			h.step(1, 1, "gpu-0002", eventsv1.StepState_STEP_RUNNING, 0)
			h.wantExact(1, loomv1.JobState_RUNNING, "")

			c = tc.end(h)
			if got := statesSeen(c, 1); !reflect.DeepEqual(got, []loomv1.JobState{loomv1.JobState_COMPLETING}) {
				t.Fatalf("end of attempt: %v (a final state must not show before COMPLETING)", got)
			}
			j := h.job(1)
			if j.GetState() != loomv1.JobState_COMPLETING || j.GetEndTime() == nil {
				t.Fatalf("completing: %v, end %v", j.GetState(), j.GetEndTime())
			}
			end := j.GetEndTime().AsTime()
			if len(h.s.ActiveRuns()) != 1 {
				t.Fatal("a completing job's allocation was freed before its steps ended")
			}
			// A completing job is neither cancelled again nor held.
			if c := h.do(&eventsv1.CancelJob{Job: jobName(1), Cluster: cl}); len(stops(c)) != 0 || len(jobChanges(c)) != 0 {
				t.Fatalf("cancel of a completing job: %v", c.Emits)
			}
			// The late node's step ends (the first one's too, when it was stopped).
			if tc.final != loomv1.JobState_FAILED {
				h.step(1, 1, "gpu-0001", eventsv1.StepState_STEP_KILLED, 143)
				h.wantExact(1, loomv1.JobState_COMPLETING, tc.reason)
			}
			c = h.step(1, 1, "gpu-0002", eventsv1.StepState_STEP_KILLED, 143)
			if got := statesSeen(c, 1); !reflect.DeepEqual(got, []loomv1.JobState{tc.final}) {
				t.Fatalf("last step ended: %v", got)
			}
			j = h.job(1)
			if j.GetState() != tc.final || j.GetExitCode() != tc.code || j.GetStateReason() != tc.reason ||
				!j.GetEndTime().AsTime().Equal(end) {
				t.Fatalf("final: %v code %d %q end %v; want %v code %d %q end %v", j.GetState(), j.GetExitCode(),
					j.GetStateReason(), j.GetEndTime().AsTime(), tc.final, tc.code, tc.reason, end)
			}
			if len(h.s.ActiveRuns()) != 0 {
				t.Fatal("allocation not freed after every step ended")
			}
		})
	}
}

// TestBatchJobEndsWithoutCompleting: an attempt whose steps have all ended
// goes to its final state without COMPLETING; a job whose step ends before
// it reports running too.
func TestBatchJobEndsWithoutCompleting(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("gpu-0001", 8)
	h.node("gpu-0002", 8)
	h.submitJob(job(1, 2, 4, func(j *loomv1.Job) { j.Command, j.Script = nil, "#!/bin/sh\ntrue\n" }))
	h.step(1, 1, "gpu-0001", eventsv1.StepState_STEP_RUNNING, 0)
	c := h.step(1, 1, "gpu-0001", eventsv1.StepState_STEP_EXITED, 0)
	if got := statesSeen(c, 1); !reflect.DeepEqual(got, []loomv1.JobState{loomv1.JobState_COMPLETED}) {
		t.Fatalf("batch exit: %v", got)
	}
	h.submitJob(job(2, 1, 4))
	h.wantExact(2, loomv1.JobState_RUNNING, "")
	h.step(2, 1, "gpu-0001", eventsv1.StepState_STEP_EXITED, 0)
	h.wantExact(2, loomv1.JobState_COMPLETED, "")
}

// TestDependencyWaitsForTheFinalState: afterok and afterany evaluate on the
// final state, not on COMPLETING.
func TestDependencyWaitsForTheFinalState(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("gpu-0001", 8)
	h.node("gpu-0002", 8)
	h.submitJob(job(1, 2, 0))
	h.submitJob(job(2, 1, 0, func(j *loomv1.Job) { j.Dependency = "afterany:1" }))
	h.wantState(2, loomv1.JobState_PENDING, ReasonDependency)
	h.step(1, 1, "gpu-0001", eventsv1.StepState_STEP_EXITED, 1)
	h.wantExact(1, loomv1.JobState_COMPLETING, ReasonNonZeroExitCode)
	h.wantState(2, loomv1.JobState_PENDING, ReasonDependency)
	h.step(1, 1, "gpu-0002", eventsv1.StepState_STEP_KILLED, 143)
	h.wantExact(1, loomv1.JobState_FAILED, ReasonNonZeroExitCode)
	h.wantExact(2, loomv1.JobState_RUNNING, "")
}

// TestBatchJobCompletesAfterItsSrunTasks: a 2-node batch job whose script
// exits 0 while its srun step's tasks still run goes PENDING → RUNNING →
// COMPLETING → COMPLETED, the second node's tasks reporting
// their end late.
func TestBatchJobCompletesAfterItsSrunTasks(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("a", 4)
	h.node("b", 4)
	c := h.submitJob(&loomv1.Job{Name: jobName(1), JobId: "1", Cluster: cl, NodeCount: 2, Script: "#!/bin/sh\nsrun train\n"})
	if got := statesSeen(c, 1); !reflect.DeepEqual(got, []loomv1.JobState{loomv1.JobState_RUNNING}) {
		t.Fatalf("submit: %v", got)
	}
	h.step(1, 1, "a", eventsv1.StepState_STEP_RUNNING, 0)
	h.do(&eventsv1.CreateJobStep{Job: jobName(1), Cluster: cl, RequestId: "r1", Command: []string{"train"}})
	tasks := func(host string, st eventsv1.StepState, code int32) *Change {
		return h.do(&eventsv1.TasksChanged{Job: jobName(1), Attempt: 1, StepId: 0, Node: nodeName(host), Cluster: cl,
			State: st, ExitCodes: []int32{code}})
	}
	tasks("a", eventsv1.StepState_STEP_RUNNING, 0)
	tasks("b", eventsv1.StepState_STEP_RUNNING, 0)
	c = h.step(1, 1, "a", eventsv1.StepState_STEP_EXITED, 0)
	if got := statesSeen(c, 1); !reflect.DeepEqual(got, []loomv1.JobState{loomv1.JobState_COMPLETING}) {
		t.Fatalf("batch script exited with srun tasks left: %v", got)
	}
	tasks("a", eventsv1.StepState_STEP_KILLED, 143)
	h.wantExact(1, loomv1.JobState_COMPLETING, "")
	c = tasks("b", eventsv1.StepState_STEP_KILLED, 143)
	if got := statesSeen(c, 1); !reflect.DeepEqual(got, []loomv1.JobState{loomv1.JobState_COMPLETED}) {
		t.Fatalf("last tasks gone: %v", got)
	}
	if j := h.job(1); j.GetExitCode() != 0 || j.GetStateReason() != "" {
		t.Fatalf("completed: exit %d %q", j.GetExitCode(), j.GetStateReason())
	}
}

// A run keeps its nodes until its srun tasks are gone, not only its batch
// step: a job waiting for those nodes starts only then.
func TestNodesHeldUntilSrunTasksEnd(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("a", 4)
	h.node("b", 4)
	h.submitJob(&loomv1.Job{Name: jobName(1), JobId: "1", Cluster: cl, NodeCount: 2, GpusPerNode: 4, Script: "#!/bin/sh\nsrun train &\n"})
	h.step(1, 1, "a", eventsv1.StepState_STEP_RUNNING, 0)
	h.do(&eventsv1.CreateJobStep{Job: jobName(1), Cluster: cl, RequestId: "r1", Command: []string{"train"}})
	h.tasks(0, "a", eventsv1.StepState_STEP_RUNNING)
	h.tasks(0, "b", eventsv1.StepState_STEP_RUNNING)
	h.submitJob(&loomv1.Job{Name: jobName(2), JobId: "2", Cluster: cl, NodeCount: 1, GpusPerNode: 4, Command: []string{"/bin/true"}})

	// The script exits; its srun tasks are still being killed on a and b.
	c := h.step(1, 1, "a", eventsv1.StepState_STEP_EXITED, 0)
	if len(startedJobs(c)) != 0 {
		t.Fatalf("job 2 started on a node whose srun tasks still run: %v", startedJobs(c))
	}
	c = h.tasks(0, "a", eventsv1.StepState_STEP_KILLED, 143)
	if len(startedJobs(c)) != 0 || h.s.Run(jobName(1), 1).Released {
		t.Fatalf("run released with tasks left on b (started %v)", startedJobs(c))
	}
	c = h.tasks(0, "b", eventsv1.StepState_STEP_KILLED, 143)
	if !h.s.Run(jobName(1), 1).Released {
		t.Fatal("run not released after its last tasks ended")
	}
	if !startedJobs(c)[jobName(2)] {
		t.Fatalf("job 2 did not start once the nodes were free: %v", startedJobs(c))
	}
	h.wantExact(1, loomv1.JobState_COMPLETED, "")
}

// Tasks lost with a failed node end the run's last job step during the
// change's settling, after its pass: the run is released all the same and
// the queue is looked at again at the next tick.
func TestRunReleasedWhenItsLastTasksAreLost(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("a", 4)
	h.node("b", 4)
	h.submitJob(&loomv1.Job{Name: jobName(1), JobId: "1", Cluster: cl, NodeCount: 2, GpusPerNode: 4, Script: "#!/bin/sh\nsrun train\n"})
	h.step(1, 1, "a", eventsv1.StepState_STEP_RUNNING, 0)
	h.do(&eventsv1.CreateJobStep{Job: jobName(1), Cluster: cl, RequestId: "r1", Command: []string{"train"}, NodeCount: 1})
	h.tasks(0, "a", eventsv1.StepState_STEP_RUNNING)
	h.step(1, 1, "a", eventsv1.StepState_STEP_EXITED, 0) // the script ends; the step on a is killed
	h.do(&eventsv1.NodeHealthChanged{Node: nodeName("a"), Cluster: cl, Health: eventsv1.NodeHealth_UNHEALTHY, Reason: "gone"})
	if r := h.s.Run(jobName(1), 1); !r.Released {
		t.Fatalf("run still holds its nodes after its last tasks were lost: steps %+v", r.JobSteps)
	}
}

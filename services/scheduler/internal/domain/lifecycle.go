package domain

import (
	"sort"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// A started job goes RUNNING → (COMPLETING →) its final state:
//
//   - RUNNING from the start of its run, as slurmctld marks a job RUNNING
//     when it allocates its nodes (Slurm's CONFIGURING is a flag for nodes
//     still booting, which Loom's never are: a node takes work once its
//     agent has registered). The StartStep of its batch script or command
//     is written in the same change as that state, and the scheduler's
//     memory (what GetJob and ListJobs serve) takes the change as soon as
//     Redis has it, before the outbox can deliver the StartStep: the
//     script's own first scontrol or squeue sees RUNNING. (A job that stayed
//     CONFIGURING until its agent's STEP_RUNNING was applied showed its
//     running script CONFIGURING: the agent reports after the exec.)
//     A job stored CONFIGURING by an earlier scheduler goes RUNNING, as it
//     did, once every node of its run is ready: its step has reported
//     (STEP_RUNNING, or already an end), or the node runs no process
//     (Idle: a batch job's nodes other than the batch host) or was
//     abandoned.
//   - COMPLETING once its attempt has ended (the run's End, Outcome, ExitCode
//     and Reason are recorded then, as before) while a step of the run — a
//     node's step, or an srun job step's tasks — has not reported its end;
//     its final state, exit code and reason are the run's Outcome, ExitCode
//     and Reason, set when the last one ends (runDone). An attempt whose
//     steps have all ended goes to its final state at once.
//
// Requeued jobs do not pass through COMPLETING: they go back to PENDING at
// once and the old run keeps its allocation until its steps end, as before.
// settle applies these rules to whatever the change touched, after the event
// and its pass, so that every path that ends an attempt (a step's exit,
// cancel, time limit, node failure, preemption, cluster deletion) gets them.

// runDone reports whether nothing of r runs any more: every node's step has
// ended (the run is Released) and so has every job step (srun) in it — a
// batch job whose script ended while an srun step's tasks still run on its
// nodes is COMPLETING until they are reported gone.
func runDone(r *Run) bool {
	if !r.Released {
		return false
	}
	for i := range r.JobSteps {
		if !r.JobSteps[i].Ended() {
			return false
		}
	}
	return true
}

// configured reports whether every node of r is ready (see above): what
// takes a job stored CONFIGURING to RUNNING, and what the job's steps wait
// for (ReasonStepProlog): its batch host's agent runs the prolog checks
// before it reports the batch step running.
func configured(r *Run) bool {
	for _, st := range r.Steps {
		if !st.Idle && !st.Abandoned && st.State == eventsv1.StepState_STEP_STATE_UNSPECIFIED {
			return false
		}
	}
	return true
}

// settle moves the jobs the change touched to CONFIGURING's (a stored one),
// RUNNING's or COMPLETING's successor as their runs say (see above).
func (t *txn) settle() {
	if len(t.c.Runs) > 0 {
		keys := make([]string, 0, len(t.c.Runs))
		for key := range t.c.Runs {
			keys = append(keys, key)
		}
		sort.Strings(keys)
		for _, key := range keys {
			r := t.c.Runs[key]
			if r == nil {
				continue
			}
			if !r.Released && r.Ended() && r.allTerminal() {
				// Its last job step ended with the attempt (tasks on a
				// lost node): free its nodes, and look at the queue at the
				// next tick, this change's pass being over.
				r.Released = true
				t.dirty[r.Cluster] = true
				if w, ok := t.c.wake[r.Cluster]; !ok || w.IsZero() || t.now.Before(w) {
					t.c.wake[r.Cluster] = t.now
				}
			}
			j := t.job(r.Job)
			if j == nil || j.Attempt != r.Attempt {
				continue
			}
			switch {
			case j.Job.GetState() == loomv1.JobState_CONFIGURING && configured(r):
				j = t.editJob(j.Name())
				j.Job.State = loomv1.JobState_RUNNING
				t.emitJob(j)
			case j.Completing() && runDone(r) && r.Ended():
				// The last step ended: the final state recorded when the
				// attempt ended.
				j = t.editJob(j.Name())
				j.Job.State, j.Job.ExitCode, j.Job.StateReason = r.Outcome, r.ExitCode, r.Reason
				t.emitJob(j)
			}
			// Job steps that waited for the nodes start once the last
			// one has reported (jobsteps.go, ReasonStepProlog).
			t.releaseHeldSteps(r)
		}
	}
	if len(t.c.Jobs) == 0 {
		return
	}
	names := make([]string, 0, len(t.c.Jobs))
	for name, j := range t.c.Jobs {
		// A reason-only version (shared) is of a pending job: skipping it
		// spares a look at its protobuf, 100,000 of them after a burst's
		// first pass.
		if j != nil && !j.shared && j.Terminal() && j.Attempt > 0 {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		j := t.c.Jobs[name]
		r := t.run(RunKey(name, j.Attempt))
		// Only an attempt that ended in this change, in the state the job
		// ended in: a job that ended long ago, or a pending job cancelled
		// while an old requeued run still stops, is left alone.
		if r == nil || runDone(r) || !r.Ended() || !r.End.Equal(t.now) || r.Outcome != j.Job.GetState() {
			continue
		}
		j.Job.State = loomv1.JobState_COMPLETING
		t.emitJob(j)
	}
}

package domain

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/slurmspec"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler/internal/domain/jobstore"
)

// The job's side of hardware resilience (docs/health.md): what health's
// verdicts, the runs' progress and the clock do to jobs.
//
//   - Infrastructure failures (a failed or hung node, a health action)
//     requeue a job without using its max_retries, up to MaxInfraRestarts.
//   - A failed node's steps are fenced (failNode): the job's next attempt
//     never starts while the old one may still run there.
//   - A node excluded after a failure under a job stops being excluded when
//     health reports it repaired, or when it is removed; a pending job that
//     no node can ever take because every one it could use failed under it,
//     with none being repaired, ends NODE_FAIL saying so (endHopeless).
//   - StepProgress moves a run's Progress: a run that does not move for its
//     hang timeout is ended as hung and requeued, and its nodes get a check.

// TriggerHang is NodesNeedCheck.trigger for a hung run's nodes.
const TriggerHang = "hang"

// DefaultCheckpointSignal is the signal of a checkpoint-aware drain for a
// job without --signal.
const DefaultCheckpointSignal = "USR1"

// infraRequeue ends j's current run r for the infrastructure's sake (an
// edited j): the run and job end in outcome (NODE_FAIL, or REQUEUED for a
// health action, a hang) with reason, then the job is requeued — unless it
// may not be (--no-requeue) or its infrastructure restarts are spent
// (MaxInfraRestarts), when it ends NODE_FAIL. The caller stops the steps.
func (t *txn) infraRequeue(j *Job, r *Run, outcome loomv1.JobState, reason string) {
	switch {
	case !j.requeueAllowed():
		t.finish(j, loomv1.JobState_NODE_FAIL, 0, reason)
		return
	case j.InfraRestarts >= t.s.cfg.MaxInfraRestarts:
		t.finish(j, loomv1.JobState_NODE_FAIL, 0, fmt.Sprintf("%s (not requeued: %d infrastructure restarts, the cluster's limit)",
			reason, j.InfraRestarts))
		return
	}
	j.InfraRestarts++
	t.endAttempt(r, outcome, 0, reason)
	if outcome != loomv1.JobState_REQUEUED {
		t.end(j, outcome, 0, reason)
		t.emitJob(j)
	}
	t.requeueJob(j, reason)
}

// MaxUnlaunchedRequeues bounds the requeues of a job whose run never
// launched (requeueUnlaunched); past it such a run is requeued as a lost
// step is, counted against MaxInfraRestarts. The race it absorbs (a node
// that registers again while the scheduler seals for its old registration)
// ends once the scheduler learns the node's registration, a moment later;
// the bound keeps a scheduler that goes on sealing for a registration the
// node never has from requeueing the job for ever.
const MaxUnlaunchedRequeues = 3

// requeueUnlaunched requeues run r of j (edited), whose step on node never
// ran: its agent reported it lost because its StartStep was sealed for
// another registration of the node than the agent's
// (StepChanged.registration_mismatch) — the scheduler sealed it before it
// learnt that the node registered again. That is the control plane's race,
// not the job's failure nor the node's, so the job goes back to PENDING as
// if the run had never started: the attempt ends REQUEUED with reason, the
// job is requeued even with --no-requeue, nothing is counted against
// MaxInfraRestarts or max_retries, no node is excluded, and the run's other
// steps are stopped at once (cause REQUEUED: the run never ran whole, there
// is nothing to checkpoint). Its next run keeps off node while other nodes
// have room (Job.Avoid, pass.placeIn): placed there again at once, it
// would likely meet the same stale registration (slurmctld drains a node
// whose launch failed; this race is no fault of the node's, so the job
// alone avoids it, for one attempt). It reports false, changing nothing, when the
// cluster is going away or j has used its MaxUnlaunchedRequeues: the caller
// then ends the run as a lost step.
func (t *txn) requeueUnlaunched(j *Job, r *Run, node, reason string) bool {
	if t.clusterGoing(r.Cluster) || j.UnlaunchedRequeues >= MaxUnlaunchedRequeues {
		return false
	}
	j.UnlaunchedRequeues++
	j.Avoid = hostOf(r, node)
	reason = fmt.Sprintf("%s (requeued as never launched, %d of %d)", reason, j.UnlaunchedRequeues, MaxUnlaunchedRequeues)
	t.endAttempt(r, loomv1.JobState_REQUEUED, 0, reason)
	t.requeueJob(j, reason)
	t.stopSteps(r, node, reason, eventsv1.StopCause_STOP_CAUSE_REQUEUED)
	t.dirty[r.Cluster] = true
	return true
}

// runsOn returns the running attempts that hold node, in key order.
func (t *txn) runsOn(node string) []*Run {
	var out []*Run
	for _, r := range t.activeRuns() {
		if !r.Holds(node) || r.Ended() {
			continue
		}
		if j := t.job(r.Job); j != nil && j.Running() && j.Attempt == r.Attempt {
			out = append(out, r)
		}
	}
	return out
}

// restartJobsOn requeues the runs on n (health HEALTHY with
// ACTION_RESTART_JOB: an application's fault, such as Xid 13): no exclusion,
// no drain, and not a user failure.
func (t *txn) restartJobsOn(n *Node, why string) {
	reason := "restarted by health on " + n.Hostname
	if why != "" {
		reason += ": " + why
	}
	for _, r := range t.runsOn(n.Name) {
		j := t.editJob(r.Job)
		t.stopSteps(r, "", reason, eventsv1.StopCause_STOP_CAUSE_REQUEUED)
		t.infraRequeue(j, r, loomv1.JobState_REQUEUED, reason)
		t.dirty[r.Cluster] = true
	}
}

// checkpointDrain starts the checkpoint-aware drain of n (health UNHEALTHY
// with checkpoint_first): each run on it gets its job's --signal (default
// USR1; B: to the batch shell only) and CheckpointGrace to write a new
// checkpoint; it is requeued at the first StepProgress showing one written
// since the signal (newCheckpoint), or when the grace ends (checkpointDue).
func (t *txn) checkpointDrain(n *Node) {
	for _, r := range t.runsOn(n.Name) {
		if !r.CheckpointBy.IsZero() {
			continue
		}
		j := t.job(r.Job)
		sig := JobSignal{Name: DefaultCheckpointSignal}
		if s, err := ParseJobSignal(j.Job.GetSignal()); err == nil && s.Name != "" {
			sig = s
		}
		r = t.editRun(r.Key())
		r.CheckpointBy = t.now.Add(t.s.cfg.CheckpointGrace)
		r.CheckpointFrom, r.CheckpointAsked, r.CheckpointNode = r.Progress.CheckpointStep, t.now, n.Name
		r.CheckpointReason = "node " + n.Hostname + " drained by health: " + n.HealthReason
		t.signalJob(j, r, sig.Name, sig.BatchOnly, !sig.BatchOnly, "")
	}
}

// checkpointDone requeues run r of j, whose node is being drained, once it
// has checkpointed or its grace has ended; the node is excluded from the
// job's later runs as any node health took out.
func (t *txn) checkpointDone(j *Job, r *Run, why string) {
	j = t.editJob(j.Name())
	reason := r.CheckpointReason + " (" + why + ")"
	if n := t.node(r.CheckpointNode); n != nil && n.Hostname != "" && !containsString(j.Excluded, n.Hostname) {
		j.Excluded = append(append([]string(nil), j.Excluded...), n.Hostname)
	}
	t.stopSteps(r, "", reason, eventsv1.StopCause_STOP_CAUSE_NODE_FAILURE)
	t.infraRequeue(j, r, loomv1.JobState_REQUEUED, reason) // planned, as a drain's deadline
	r = t.editRun(r.Key())
	r.CheckpointBy, r.CheckpointAsked = time.Time{}, time.Time{}
	t.dirty[r.Cluster] = true
}

// checkpointSurvivors starts checkpoint on failure for run r of j (edited;
// its attempt just ended and the job was requeued) whose node failed failed
// (crash false: the attempt ended NODE_FAIL) or whose program failed there
// (crash true: its step exited non-zero and the job is retried; the other
// ranks still hold the state a bug on one did not corrupt)
// (Config.FailureCheckpointWait): the steps on its other
// nodes, which still hold the training state, are sent the job's --signal
// (default USR1, as a checkpoint-aware drain sends) and are stopped at the
// run's first checkpoint written since the signal (survivorCheckpointed),
// once none of them runs any more (survivorsEnded), or at the wait's end
// (survivorsDone). The failed node is never signalled: what it would write
// may be corrupt. It reports false, and does nothing, when it is off, the
// job was not requeued, or no other step runs: the caller stops the steps.
//
// A run is waited for whether or not it has reported progress: one that
// has not yet (its first progress interval, or a program that does not
// write LOOM_PROGRESS_FILE but saves on the signal, as a Slurm requeue
// handler does) may still save on the signal, and that checkpoint is what
// the next attempt resumes from. What waiting for nothing costs is bounded:
// a program that does not handle the signal ends on it, which ends the
// wait, and one that ignores it holds its nodes for the wait at most.
func (t *txn) checkpointSurvivors(j *Job, r *Run, failed, reason string, crash bool) bool {
	wait := t.s.cfg.FailureCheckpointWait
	if wait <= 0 || !r.SurvivorsBy.IsZero() {
		return false
	}
	if cur := t.job(j.Name()); cur == nil || !cur.Pending() {
		return false
	}
	sig := JobSignal{Name: DefaultCheckpointSignal}
	if s, err := ParseJobSignal(j.Job.GetSignal()); err == nil && s.Name != "" {
		// The job says it handles its signal: it gets the drain's grace.
		sig, wait = s, t.s.cfg.CheckpointGrace
	}
	wait = min(wait, t.s.cfg.CheckpointGrace)
	if !survivorsRun(r, failed) {
		return false
	}
	r = t.editRun(r.Key())
	r.SurvivorsBy, r.SurvivorsFrom, r.SurvivorsReason, r.FailedNode = t.now.Add(wait), r.Progress.CheckpointStep, reason, failed
	r.SurvivorsOfCrash = crash
	// As the checkpoint-aware drain signals (a batch job's srun tasks hold
	// the state too: scancel -f's reach), all but the failed node.
	t.signalJob(j, r, sig.Name, sig.BatchOnly, !sig.BatchOnly, failed)
	return true
}

// survivorsRun reports whether a step of r on a node other than failed is
// running (its agent reported it started, and not its end): one that has
// not started yet has nothing to save, and a fenced one's node failed too.
func survivorsRun(r *Run, failed string) bool {
	for _, node := range r.Nodes {
		if st := r.Steps[node]; node != failed && !st.Terminal() && !st.Fenced() && st.State == eventsv1.StepState_STEP_RUNNING {
			return true
		}
	}
	return false
}

// survivorCheckpointed reports whether run r, whose survivors are being
// waited for (Run.SurvivorsBy), has reported a checkpoint written since
// they were signalled, when its attempt ended (newCheckpoint).
func survivorCheckpointed(r *Run) bool {
	return newCheckpoint(r.Progress, r.SurvivorsFrom, r.End)
}

// newCheckpoint reports whether progress p shows a checkpoint written since
// the run was asked for one at asked (its job's --signal), when the latest
// checkpoint heard of was at step from: a newer step and, when the program
// said when it wrote it, not written before asked. The time matters for a
// run that had not reported its latest checkpoint when it was signalled
// (one written in the last progress interval, or, early in a resumed
// attempt, the checkpoint it resumed from): the agent's first look after
// the signal reports it, before the checkpoint the signal asked for, and
// ending the wait there would lose the training since. A checkpoint
// without a time (the program wrote none) is dated on arrival, so its step
// alone decides; so does a zero asked (a run recorded before asked was).
func newCheckpoint(p jobstore.Progress, from int64, asked time.Time) bool {
	return p.CheckpointStep > from && !p.CheckpointTime.Before(asked)
}

// survivorsEnded ends the wait for run r's survivors (checkpointSurvivors)
// once none of them runs any more: each exited (a program that does not
// handle the signal ends on it; one that saves and exits) or was lost, so
// no checkpoint can come and the requeued job's wait for them need not
// last to SurvivorsBy. It does nothing when r is not waited for.
func (t *txn) survivorsEnded(r *Run) {
	if r.Ended() && !r.SurvivorsBy.IsZero() && !survivorsRun(r, r.FailedNode) {
		t.survivorsDone(r, "no survivor runs")
	}
}

// survivorsDone stops the surviving steps of run r (checkpointSurvivors)
// once they checkpointed, ended or their wait ended (why says which).
func (t *txn) survivorsDone(r *Run, why string) {
	r = t.editRun(r.Key())
	cause := eventsv1.StopCause_STOP_CAUSE_NODE_FAILURE
	if r.SurvivorsOfCrash {
		cause = eventsv1.StopCause_STOP_CAUSE_UNSPECIFIED // as the job's failure stops them
	}
	t.stopSteps(r, r.FailedNode, r.SurvivorsReason+" ("+why+")", cause)
	r.SurvivorsBy, r.StopsSent, r.SurvivorsOfCrash = time.Time{}, t.now, false
	t.dirty[r.Cluster] = true
}

// PrologVerdictWait is how long after a node failed a prolog check it
// counts as being repaired for the jobs excluded from it (endHopeless):
// health judges the node from the check's result, and its verdict (the node
// unhealthy, then repaired) is on its way; a job that only that node could
// take must not end before it comes.
const PrologVerdictWait = 2 * time.Minute

// PrologFailedPrefix starts the message of a step that its node refused to
// start because one of the node's prolog health checks failed there (the
// agent's -prolog-checks): "prolog check failed on <host>: <summary>".
const PrologFailedPrefix = "prolog check failed"

// prologFailed handles run r of j (edited) whose step on node (hostname
// host) did not start because the node failed a prolog check: a failure of
// the node, not of the job's program, so the job is requeued as after a
// node failure (infraRequeue: NODE_FAIL, not counted against max_retries)
// with the node excluded, as a failed node is — the exclusion expires when
// health reports the node repaired — and the run's other steps stopped.
// Health judges the node from the check's own result.
//
// The node is held out (Node.PrologHold) from now until health's verdict
// arrives: health hears of the failure only through the check's result, so
// without the hold the node would show IDLE, and take work, between this
// requeue and health's drain.
func (t *txn) prologFailed(j *Job, r *Run, node, host, msg string) {
	if t.node(node) != nil {
		n := t.editNode(node)
		n.PrologFailed, n.PrologHold, n.PrologReason = t.now, true, msg
	}
	if host != "" && !containsString(j.Excluded, host) {
		j.Excluded = append(append([]string(nil), j.Excluded...), host)
	}
	t.infraRequeue(j, r, loomv1.JobState_NODE_FAIL, msg)
	t.stopSteps(r, node, msg, eventsv1.StopCause_STOP_CAUSE_NODE_FAILURE)
	t.dirty[r.Cluster] = true
}

// releasePrologHolds lets go of the prolog holds (Node.PrologHold) whose
// PrologVerdictWait has passed with no verdict from health (remediation
// off, or health judged the check's result no failure of the node).
func (t *txn) releasePrologHolds() {
	var names []string
	for name := range t.s.prologHeld {
		if n := t.s.nodes[name]; n != nil && !t.now.Before(n.PrologFailed.Add(PrologVerdictWait)) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		n := t.editNode(name)
		n.PrologHold, n.PrologReason = false, ""
		t.dirty[n.Cluster] = true
	}
}

// hung ends run r of j, which made no progress for d: requeued (an
// infrastructure failure) and its nodes given a check.
func (t *txn) hung(j *Job, r *Run, d time.Duration) {
	reason := "hung: no progress for " + d.String()
	j = t.editJob(j.Name())
	t.emit(r.Cluster, j.Name(), &eventsv1.NodesNeedCheck{Cluster: r.Cluster, Nodes: append([]string(nil), r.Nodes...),
		Reason: reason, Job: j.Name(), Trigger: TriggerHang})
	t.stopSteps(r, "", reason, eventsv1.StopCause_STOP_CAUSE_UNSPECIFIED)
	t.infraRequeue(j, r, loomv1.JobState_NODE_FAIL, reason)
	t.dirty[r.Cluster] = true
}

// hangTimeout is j's hang timeout: its own (HangTimeoutOff: none), else the
// cluster default (0: off).
func (s *State) hangTimeout(j *Job) time.Duration {
	switch sec := j.Job.GetHangTimeoutSeconds(); {
	case sec == slurmspec.HangTimeoutOff:
		return 0
	case sec > 0:
		return time.Duration(min(sec, slurmspec.MaxHangTimeoutSeconds)) * time.Second
	}
	return s.cfg.HangTimeout
}

// hangDue reports whether run r has made no progress (since its start when
// it never reported any) for its job's hang timeout, and that timeout.
func (s *State) hangDue(now time.Time, j *Job, r *Run) (time.Duration, bool) {
	d := s.hangTimeout(j)
	if d <= 0 {
		return 0, false
	}
	last := r.Start
	if r.Progress.Last.After(last) {
		last = r.Progress.Last
	}
	return d, !now.Before(last.Add(d))
}

// stepProgress records a step's progress on its run: the highest step,
// checkpoint and checkpointing time over the run's nodes, and when it last
// moved. A run being drained is requeued at its first newer checkpoint.
// MinProgressInterval is the least time between two StepProgress reports
// the scheduler keeps for a run (and between two new checkpoints): each
// kept report is a write of the run's record, and a run of 2,048 nodes
// reporting every 5 s would otherwise write it ~400 times a second.
const MinProgressInterval = time.Second

func (t *txn) stepProgress(ev *eventsv1.StepProgress) error {
	var v errs.Validator
	v.Check(ev.GetJob() != "", "job", "required")
	v.Check(ev.GetNode() != "", "node", "required")
	if err := v.Err(); err != nil {
		return fmt.Errorf("step progress: %w", err)
	}
	key := RunKey(ev.GetJob(), ev.GetAttempt())
	r := t.run(key)
	if r == nil || r.Released {
		return nil
	}
	if _, ok := r.Steps[ev.GetNode()]; !ok {
		return nil
	}
	// Bounded: a report is kept at most once per MinProgressInterval for
	// the run, whatever its nodes send (each every progress interval, or
	// a broken or hostile one at any rate), except a new checkpoint, which
	// drains and checkpoints on failure wait for: at most one of those per
	// interval too. A report passed over loses nothing: each carries the
	// node's latest figures, and the next one kept brings them.
	ckpt := ev.GetCheckpointStep() > r.Progress.CheckpointStep
	if within := func(at time.Time) bool { return !at.IsZero() && t.now.Before(at.Add(MinProgressInterval)) }; (!ckpt && within(r.Progress.KeptAt)) || (ckpt && within(r.Progress.CheckpointKeptAt)) {
		return nil
	}
	p := r.Progress
	p.Step = max(p.Step, ev.GetStep())
	p.OutputBytes = max(p.OutputBytes, ev.GetOutputBytes())
	if ev.GetCheckpointStep() > p.CheckpointStep {
		p.CheckpointStep = ev.GetCheckpointStep()
		p.CheckpointTime = t.reported(ev.GetCheckpointTime())
	}
	// Cumulative over the run's saves, so a report lost or overtaken costs
	// nothing; a negative one (hostile or broken) is ignored, and goodput
	// bounds it by the run's own time.
	if d := ev.GetCheckpointDuration(); d != nil && d.CheckValid() == nil {
		p.Checkpointing = max(p.Checkpointing, d.AsDuration())
	}
	last := t.reported(ev.GetTime())
	if ev.GetLastProgress() != nil {
		last = t.reported(ev.GetLastProgress())
	}
	if last.After(p.Last) {
		p.Last = last
	}
	if p == r.Progress {
		return nil
	}
	p.KeptAt = t.now
	if ckpt {
		p.CheckpointKeptAt = t.now
	}
	r = t.editRun(key)
	r.Progress = p
	if j := t.job(r.Job); j != nil && j.Running() && j.Attempt == r.Attempt && !r.Ended() &&
		!r.CheckpointBy.IsZero() && newCheckpoint(p, r.CheckpointFrom, r.CheckpointAsked) {
		t.checkpointDone(j, r, fmt.Sprintf("checkpointed at step %d", p.CheckpointStep))
	}
	// The failed node's own report (its agent's last read as its step is
	// stopped, say) does not end the wait: it was not signalled, and what
	// the wait is for is the survivors' checkpoint on the signal.
	if r.Ended() && !r.SurvivorsBy.IsZero() && ev.GetNode() != r.FailedNode && survivorCheckpointed(r) {
		t.survivorsDone(r, fmt.Sprintf("checkpointed at step %d", p.CheckpointStep))
	}
	return nil
}

// reported is a time a node reported, as the scheduler keeps it: no later
// than now, and now for none or one that is not a valid time. A node's
// clock may run ahead, and a hostile one could report the year 9999 as its
// last progress, which would switch hang detection off for the whole run
// (the last progress only ever rises) or fail the run's record to encode.
func (t *txn) reported(ts *timestamppb.Timestamp) time.Time {
	if ts == nil || ts.CheckValid() != nil {
		return t.now
	}
	if at := ts.AsTime(); at.Before(t.now) {
		return at
	}
	return t.now
}

// liftFences abandons r's fenced steps whose FenceTimeout has passed
// (nothing was heard of them): the node is free, and so is the job's next
// attempt.
func (t *txn) liftFences(r *Run) {
	r = t.editRun(r.Key())
	for node, st := range r.Steps {
		if st.Fenced() && !t.now.Before(st.FenceUntil) {
			st.Abandoned = true
			r.Steps[node] = st
		}
	}
	r.FenceUntil = fenceOf(r)
	if r.allTerminal() {
		r.Released = true
	}
	t.dirty[r.Cluster] = true
}

// giveUpStopping ends the wait for the steps of a requeued job's old run r
// (and its srun tasks) that did not answer their StopStep within
// RequeueStopWait (Slurm's UnkillableStepTimeout) on nodes nobody found
// failed: they are abandoned (the tasks there lost),
// so the run lets go of those nodes and the job's next attempt may start —
// never while the old one still holds a node. A fenced step (its node
// failed) is left to its fence.
func (t *txn) giveUpStopping(r *Run) {
	if r == nil || r.Released {
		return
	}
	live := map[string]bool{} // nodes with job steps' (srun) tasks not heard to end
	for i := range r.JobSteps {
		s := &r.JobSteps[i]
		for k, node := range s.Nodes {
			if !s.Ended() && !s.Parts[k].Terminal() {
				live[node] = true
			}
		}
	}
	changed := false
	for _, node := range r.Nodes {
		if st := r.Steps[node]; !st.Abandoned && (!st.Terminal() || live[node]) && st.FenceUntil.IsZero() {
			if !changed {
				r = t.editRun(r.Key())
				changed = true
			}
			st.Abandoned = true
			r.Steps[node] = st
		}
	}
	if !changed {
		return
	}
	if r.allTerminal() {
		r.Released = true
	}
	t.dirty[r.Cluster] = true
}

// expireExclusions ends every live job's exclusion of host on cluster, and
// its avoidance of it (Job.Avoid): the node was repaired and confirmed
// healthy, or removed.
func (t *txn) expireExclusions(cluster, host string) {
	if host == "" {
		return
	}
	var names []string
	avoids := func(j *Job) bool {
		return (j.Avoid == host || len(j.Excluded) > 0 && containsString(j.Excluded, host)) && !j.Terminal() &&
			j.Job.GetCluster() == cluster
	}
	for name, j := range t.s.jobs {
		if (len(j.Excluded) > 0 || j.Avoid != "") && avoids(j) {
			names = append(names, name)
		}
	}
	for name, j := range t.c.Jobs {
		if j != nil && t.s.jobs[name] == nil && avoids(j) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		j := t.editJob(name)
		if j.Avoid == host {
			j.Avoid = ""
		}
		kept := make([]string, 0, len(j.Excluded))
		for _, h := range j.Excluded {
			if h != host {
				kept = append(kept, h)
			}
		}
		if len(kept) == 0 {
			kept = nil
		}
		j.Excluded = kept
	}
	t.dirty[cluster] = true
}

// afterPass is what follows a change's pass: pending jobs no node will
// ever take end, nodes health took out that hold nothing any more are
// announced drained, and a StartStep of an attempt the change also ended is
// withdrawn.
func (t *txn) afterPass() {
	t.endHopeless()
	t.healthDrained()
	t.dropStaleStarts()
}

// endHopeless ends the pending jobs this change's pass found BadConstraints
// because nodes failed under them: every node they could use is excluded,
// and none of those it excluded after a failure is being repaired (unhealthy,
// unreachable, DOWN, rebooting, reimaged, replaced), so no exclusion will
// expire. They end NODE_FAIL saying why.
func (t *txn) endHopeless() {
	if !t.badConstraints {
		return
	}
	for i := range t.c.Decisions {
		d := &t.c.Decisions[i]
		if d.Reason != ReasonBadConstraints || d.Filtered["Excluded"] == 0 {
			continue
		}
		j := t.job(d.Job)
		if j == nil || !j.Pending() || len(j.Excluded) == 0 {
			continue
		}
		cluster := j.Job.GetCluster()
		repairing := false
		for _, h := range j.Excluded {
			if n := t.node(resname.NodeIn(cluster, h)); n != nil && underRepair(n, t.now) {
				repairing = true
				break
			}
		}
		if repairing {
			continue
		}
		j = t.editJob(j.Name())
		t.end(j, loomv1.JobState_NODE_FAIL, 0, fmt.Sprintf(
			"no node can take it: every node it may use failed under it (%s), and none is being repaired",
			strings.Join(j.Excluded, ",")))
		t.emitJob(j)
		d.Reason = ""
		t.dirty[cluster] = true
	}
}

// underRepair reports whether a node may yet come back repaired: health
// took it out or lost touch with it, or it is down or being repaired, or it
// failed a prolog check less than PrologVerdictWait before now.
func underRepair(n *Node, now time.Time) bool {
	switch n.State {
	case loomv1.Node_FAILED, loomv1.Node_DELETING, loomv1.Node_DRAINING:
		return false
	}
	awaitingVerdict := !n.PrologFailed.IsZero() && now.Before(n.PrologFailed.Add(PrologVerdictWait))
	return n.HealthOut() || n.Unreachable || n.State != loomv1.Node_READY || awaitingVerdict
}

// healthDrained emits NodeDrained, once, for each node health took out
// (unhealthy, or drained for a checkpoint) that holds no allocation any
// more, so that health may go on with its repair. A node the provisioner
// drains is announced by drain instead.
func (t *txn) healthDrained() {
	var names []string
	for name := range t.s.healthOut {
		if _, over := t.c.Nodes[name]; !over {
			names = append(names, name)
		}
	}
	for name, n := range t.c.Nodes {
		if n != nil && n.HealthOut() && !n.HealthDrained {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return
	}
	sort.Strings(names)
	for _, name := range names {
		n := t.node(name)
		if n == nil || !n.HealthOut() || n.HealthDrained || n.Draining() || t.held(name) {
			continue
		}
		n = t.editNode(name)
		n.HealthDrained = true
		t.emit(n.Cluster, n.Name, &eventsv1.NodeDrained{Node: n.Name, Cluster: n.Cluster})
	}
}

// held reports whether a run holds an allocation on node, as the change
// leaves it.
func (t *txn) held(node string) bool {
	if a := t.s.alloc[node]; a != nil {
		for _, r := range a.holders {
			if cur := t.run(r.Key()); cur != nil && cur.Holds(node) {
				return true
			}
		}
	}
	for _, r := range t.c.Runs {
		if r != nil && r.Holds(node) {
			return true
		}
	}
	return false
}

// dropStaleStarts withdraws the StartStep of an attempt this change started
// and also ended (the agent would start what the scheduler already ended):
// that node's step, never started, is abandoned. A StopStep for it may
// still go out; the agent then refuses the attempt for good.
func (t *txn) dropStaleStarts() {
	stale := false
	for _, r := range t.c.Runs {
		if r != nil && r.Ended() && r.Start.Equal(t.now) {
			stale = true
			break
		}
	}
	if !stale {
		return
	}
	kept := t.c.Emits[:0]
	for _, e := range t.c.Emits {
		if st, ok := e.Payload.(*eventsv1.StartStep); ok {
			if r := t.run(RunKey(st.GetJob(), st.GetAttempt())); r != nil && r.Ended() {
				r = t.editRun(r.Key())
				step := r.Steps[st.GetNode()]
				step.Abandoned = true
				r.Steps[st.GetNode()] = step
				if r.allTerminal() {
					r.Released = true
				}
				continue
			}
		}
		kept = append(kept, e)
	}
	for i := len(kept); i < len(t.c.Emits); i++ {
		t.c.Emits[i] = Emit{}
	}
	t.c.Emits = kept
	// lastJobEmit indexes into Emits: withdrawn starts come after every
	// JobChanged of the jobs that started, so only later indexes move.
	t.reindexJobEmits()
}

// reindexJobEmits rebuilds lastJobEmit, and where the reason records are,
// after emits were removed.
func (t *txn) reindexJobEmits() {
	clear(t.c.lastJobEmit)
	for _, cr := range t.c.recs {
		clear(cr.at) // indexes into Emits too
	}
	for i, e := range t.c.Emits {
		if e.job != nil {
			t.c.records(e.Key).at[e.pos] = int32(i + 1)
		}
		if jc, ok := e.Payload.(*eventsv1.JobChanged); ok {
			t.c.lastJobEmit[jc.GetJob().GetName()] = i
		}
	}
}

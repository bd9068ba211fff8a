package domain

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/slurmspec"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// UpdateJob actions.
const (
	ActionHold = "hold"
	// ActionUHold is scontrol uhold: a user hold, even by an administrator.
	ActionUHold   = "uhold"
	ActionRelease = "release"
	ActionRequeue = "requeue"
	ActionUpdate  = "update"
)

// mayAct reports whether a command from user (admin: an administrator, as
// the gateway judged) may act on j: administrators on any job, users on
// their own, an anonymous command ("" user, not admin: from before callers
// were named, or the gateway's) on any job, as before. The gateway refuses
// the others with PermissionDenied before emitting; this keeps a command
// that raced a change of owner (or was forged) from acting. An anonymous
// command from any other sender never gets here: the app refuses it
// (no-principal), and a service's own cancel names the owner it acts for
// (CancelJob.on_behalf_of), checked here as user is.
func mayAct(j *Job, user string, admin bool) bool {
	return MayAct(j.Job.GetUser(), user, admin)
}

// MayAct is mayAct for a job whose owner is owner: the one rule both
// scheduler backends hold commands to (slurmbackend's cancel too).
func MayAct(owner, user string, admin bool) bool {
	return admin || user == "" || owner == "" || owner == user
}

// MayCancel reports whether cancel may act on a job of owner: as its
// caller, or, on a service's own cancel (no user), as the owner it acts
// for (on_behalf_of), under MayAct. The payload is the one the app acts
// on (app.AsPrincipal): a user's own command names that user.
func MayCancel(owner string, cancel *eventsv1.CancelJob) bool {
	principal := cancel.GetUser()
	if principal == "" {
		principal = cancel.GetOnBehalfOf()
	}
	return MayAct(owner, principal, cancel.GetAdmin())
}

// end moves j (an edited copy) to a terminal state.
func (t *txn) end(j *Job, state loomv1.JobState, exit int32, reason string) {
	j.Job.State, j.Job.ExitCode, j.Job.StateReason = state, exit, reason
	j.Job.EndTime = timestamppb.New(t.now)
}

// finish ends j (an edited copy), and its current attempt when it runs, in
// state, and emits it.
func (t *txn) finish(j *Job, state loomv1.JobState, exit int32, reason string) {
	if r := t.currentRun(j); r != nil && j.Running() && !r.Ended() {
		t.endAttempt(r, state, exit, reason)
	}
	t.end(j, state, exit, reason)
	t.emitJob(j)
}

// endAttempt records the end of run r's attempt and charges its usage to its
// account and user. The run keeps its allocation until its steps end.
func (t *txn) endAttempt(r *Run, state loomv1.JobState, exit int32, reason string) {
	if r.Ended() {
		return
	}
	r = t.editRun(r.Key())
	r.End, r.Outcome, r.ExitCode, r.Reason = t.now, state, exit, reason
	t.charge(r)
}

// requeueJob puts j (an edited copy whose attempt has ended) back in the
// queue: REQUEUED with reason, then PENDING in its old place, nodes and times
// cleared. Its next start is a new attempt.
func (t *txn) requeueJob(j *Job, reason string) {
	// A run's end this change emitted (FAILED, NODE_FAIL, PREEMPTED...) is
	// not the job's: say so on it (requeue_follows), so that a reader of
	// that event alone does not end the job under its retry.
	if i, ok := t.lastJobEmit(j); ok {
		if prev := t.c.Emits[i].Payload.(*eventsv1.JobChanged); prev.GetJob().GetState().Terminal() {
			prev.RequeueFollows = true
		}
	}
	j.Job.State, j.Job.StateReason = loomv1.JobState_REQUEUED, reason
	t.emitJob(j)
	spec := j.Job
	spec.State, spec.StateReason, spec.ExitCode, spec.ExitSignal = loomv1.JobState_PENDING, ReasonRequeued, 0, nil
	spec.CancelledBy = ""
	if j.Partitions != "" {
		// Pending again in every partition it named (multipart.go).
		spec.Partition, j.Partitions = j.Partitions, ""
	}
	spec.Nodes, spec.StartTime, spec.EndTime = nil, nil, nil
	spec.NodeTasks, spec.NodeCpus = nil, nil // the next run lays out its own
	spec.BatchHost, spec.AllocGpus = "", 0
	if spec.GetMemPerCpuMb() > 0 {
		// The minimum's memory a node again (the run's width set it:
		// start), for scontrol's TRES and sacct's ReqMem while pending.
		spec.MemMb = slurmspec.WidthMemMB(spec, minCPUsPerNode(spec))
	}
	spec.RestartCount++
	t.emitJob(j)
	t.dirty[spec.GetCluster()] = true
}

// stopSteps tells every node of r but except whose step has not ended to
// stop it; cause is what the agent tells the job's error output.
func (t *txn) stopSteps(r *Run, except, reason string, cause eventsv1.StopCause) {
	for _, node := range r.Nodes {
		if node == except || r.Steps[node].Terminal() {
			continue
		}
		t.emit(node, r.Job, &eventsv1.StopStep{Job: r.Job, Attempt: r.Attempt, Node: node, Reason: reason, Cause: cause})
	}
}

// signalJob sends sig to the processes of j's run r that Slurm would
// signal (scancel --signal, and --signal before a time limit or a
// preemption): a batch job's job steps' tasks (srun) by default, not its
// batch step; with batch, the batch shell alone (B: in --signal, scancel
// -b; batch wins over full); with full, the batch shell, its children and
// every job step (scancel -f). A job without a batch script runs its
// command on every node as an implicit srun: those are its steps, and they
// are signalled whole. Nothing is sent to the node except ("": none).
func (t *txn) signalJob(j *Job, r *Run, sig string, batch, full bool, except string) {
	switch {
	case batch:
		t.signalSteps(r, sig, true, except)
		return
	case full || j.Job.GetScript() == "":
		t.signalSteps(r, sig, false, except)
	}
	for i := range r.JobSteps {
		if s := r.JobSteps[i]; !s.Ended() {
			t.killStepTasks(r, &s, sig, "signal "+sig, except)
		}
	}
}

// signalSteps sends sig to every live step of r but the one on the node
// except ("": none).
func (t *txn) signalSteps(r *Run, sig string, batchOnly bool, except string) {
	for _, node := range r.Nodes {
		if node == except || r.Steps[node].Terminal() {
			continue
		}
		t.emit(node, r.Job, &eventsv1.SignalStep{Job: r.Job, Attempt: r.Attempt, Node: node,
			Signal: sig, BatchOnly: batchOnly})
	}
}

// beginPreempt starts preempting run r for job by: with a --signal, the
// victim gets it now and PreemptGrace to act on it; without one it is
// stopped at once (then it reports true).
func (t *txn) beginPreempt(r *Run, by *Job) bool {
	vj := t.job(r.Job)
	r = t.editRun(r.Key())
	r.PreemptBy = by.Name()
	sig, err := ParseJobSignal(vj.Job.GetSignal())
	if err == nil && sig.Name != "" {
		r.PreemptAt = t.now.Add(t.s.cfg.PreemptGrace)
		t.signalJob(vj, r, sig.Name, sig.BatchOnly, false, "")
		return false
	}
	r.PreemptAt = t.now
	t.preemptStop(vj, r)
	return true
}

// preemptStop ends a preempted run: its steps are stopped and its job is
// PREEMPTED, then requeued when it allows it.
func (t *txn) preemptStop(j *Job, r *Run) {
	j = t.editJob(j.Name())
	t.stopSteps(r, "", "preempted", eventsv1.StopCause_STOP_CAUSE_PREEMPTED)
	reason := "Preempted"
	t.endAttempt(r, loomv1.JobState_PREEMPTED, 0, reason)
	t.end(j, loomv1.JobState_PREEMPTED, 0, reason)
	t.emitJob(j)
	if j.requeueAllowed() {
		t.requeueJob(j, reason)
	}
	t.dirty[j.Job.GetCluster()] = true
}

// timeout ends a run at its time limit: TIMEOUT and its steps stopped.
func (t *txn) timeout(j *Job, r *Run) {
	j = t.editJob(j.Name())
	t.finish(j, loomv1.JobState_TIMEOUT, 0, ReasonTimeLimit)
	t.stopSteps(r, "", "time limit", eventsv1.StopCause_STOP_CAUSE_TIME_LIMIT)
	t.dirty[j.Job.GetCluster()] = true
}

// updateJob is scontrol hold/uhold/release/requeue/update, by ev.User.
func (t *txn) updateJob(ev *eventsv1.UpdateJob) error {
	var v errs.Validator
	v.Check(ev.GetJob() != "", "job", "required")
	switch ev.GetAction() {
	case ActionHold, ActionUHold, ActionRelease, ActionRequeue:
	case ActionUpdate:
		v.Check(ev.GetTimeLimitSeconds() >= 0, "time_limit_seconds", "must not be negative, got %d", ev.GetTimeLimitSeconds())
		v.Check(ev.GetTimeLimitSeconds() > 0 || ev.GetPartition() != "" || ev.Nice != nil || ev.BeginTime != nil || ev.Dependency != nil || ev.Qos != nil ||
			ev.Account != nil || ev.JobName != nil || resizes(ev) || ev.ArrayTaskThrottle != nil, "action",
			"update needs time_limit_seconds, partition, nice, begin_time, dependency, qos, account, job_name, node_count, ntasks, mem_mb, nodelist, exclude, array_task_throttle, gpus_per_node or gpu_type")
		v.Check(ev.JobName == nil || ev.GetJobName() != "", "job_name", "must not be empty")
		v.Check(ev.NodeCount == nil || ev.GetNodeCount() >= 1, "node_count", "must be at least 1, got %d", ev.GetNodeCount())
		v.Check(ev.MaxNodeCount == nil || ev.NodeCount != nil && (ev.GetMaxNodeCount() == 0 || ev.GetMaxNodeCount() >= ev.GetNodeCount()),
			"max_node_count", "must come with node_count and be 0 or at least it, got %d", ev.GetMaxNodeCount())
		v.Check(ev.Ntasks == nil || ev.GetNtasks() >= 1 && ev.GetNtasks() <= slurmspec.MaxJobTasks, "ntasks", "%d is not 1 to %d", ev.GetNtasks(), slurmspec.MaxJobTasks)
		v.Check(ev.GetMemMb() >= 0, "mem_mb", "must not be negative, got %d", ev.GetMemMb())
		v.Check(ev.GetArrayTaskThrottle() >= 0, "array_task_throttle", "must not be negative, got %d", ev.GetArrayTaskThrottle())
		v.Check(ev.GetGpusPerNode() >= 0, "gpus_per_node", "must not be negative, got %d", ev.GetGpusPerNode())
		if b := ev.GetBeginTime(); b != nil {
			v.Check(b.CheckValid() == nil, "begin_time", "%v", b.CheckValid())
		}
		if d := ev.GetDependency(); d != "" {
			_, err := slurmspec.ParseDependency(d)
			v.Check(err == nil, "dependency", "%q: %v", d, err)
		}
		v.Check(ev.Nice == nil || ev.GetNice() >= -slurmspec.MaxNice && ev.GetNice() <= slurmspec.MaxNice, "nice", "%d is outside -%d..%d",
			ev.GetNice(), slurmspec.MaxNice, slurmspec.MaxNice)
	default:
		v.Add("action", "want hold, uhold, release, requeue or update, got %q", ev.GetAction())
	}
	if err := v.Err(); err != nil {
		return fmt.Errorf("update job: %w", err)
	}
	jobs := t.resolveJobs(ev.GetJob())
	if ev.ArrayTaskThrottle != nil && len(jobs) > 0 && mayAct(jobs[0], ev.GetUser(), ev.GetAdmin()) {
		t.throttleArray(jobs[0], ev.GetArrayTaskThrottle())
	}
	for _, j := range jobs {
		if !mayAct(j, ev.GetUser(), ev.GetAdmin()) {
			continue
		}
		switch ev.GetAction() {
		case ActionHold, ActionUHold:
			if !j.Pending() {
				continue
			}
			// An administrator's hold is an admin hold; uhold is a user hold
			// whoever asks.
			reason := ReasonHeldUser
			if ev.GetAdmin() && ev.GetAction() == ActionHold {
				reason = ReasonHeldAdmin
			}
			if j.Job.GetHold() && j.Job.GetStateReason() == reason {
				continue
			}
			// A user's hold never replaces an administrator's: it would
			// turn it into a hold the user may release.
			if j.Job.GetHold() && j.Job.GetStateReason() == ReasonHeldAdmin && !ev.GetAdmin() {
				continue
			}
			j = t.editJob(j.Name())
			j.Job.Hold, j.Job.StateReason = true, reason
			// Slurm's EligibleTime is judged against it (Job.hold_change_time).
			j.Job.HoldChangeTime = timestamppb.New(t.now)
			t.emitJob(j)
		case ActionRelease:
			// Only an administrator releases an admin hold (Slurm: "Access/
			// permission denied"; the gateway says so to the caller).
			if !j.Job.GetHold() || (j.Job.GetStateReason() == ReasonHeldAdmin && !ev.GetAdmin()) {
				continue
			}
			j = t.editJob(j.Name())
			j.Job.Hold, j.Job.HoldChangeTime = false, timestamppb.New(t.now)
			if j.Pending() {
				j.Job.StateReason = ReasonPriority // refined by the pass
			}
			t.emitJob(j)
		case ActionRequeue:
			if !j.requeueAllowed() || j.Pending() {
				continue
			}
			j = t.editJob(j.Name())
			if j.Running() {
				if r := t.currentRun(j); r != nil {
					t.stopSteps(r, "", "requeued", eventsv1.StopCause_STOP_CAUSE_REQUEUED)
					t.endAttempt(r, loomv1.JobState_REQUEUED, 0, "requeued")
				}
			}
			t.requeueJob(j, "requeued")
		case ActionUpdate:
			t.updateLimits(j, ev)
		}
		t.dirty[j.Job.GetCluster()] = true
	}
	return nil
}

// resizes reports whether ev changes what a pending job asks of its
// partition's nodes beyond its partition: node count, tasks, memory, GPUs,
// node list or exclusions.
func resizes(ev *eventsv1.UpdateJob) bool {
	return ev.NodeCount != nil || ev.Ntasks != nil || ev.MemMb != nil || ev.Nodelist != nil || ev.Exclude != nil || ev.GpusPerNode != nil ||
		ev.GpuType != nil
}

// updateLimits changes a job's time limit, partition, nice, begin time,
// dependency, QOS, account, name, size (node count, tasks, memory) or
// hosts (node list, exclusions): all while it is pending; only its name and
// a lower time limit once it runs. Only an administrator's update raises a
// time limit. A begin time not after now makes the job eligible at once.
func (t *txn) updateLimits(j *Job, ev *eventsv1.UpdateJob) {
	lim, part := ev.GetTimeLimitSeconds(), ev.GetPartition()
	nice, begin, dep, qos, acct := ev.Nice, ev.GetBeginTime(), ev.Dependency, ev.Qos, ev.Account
	resize := resizes(ev)
	switch {
	case j.Pending():
	case j.Running():
		part, nice, begin, dep, qos, acct, resize = "", nil, nil, nil, nil, nil, false
	default:
		return
	}
	if lim > 0 && !ev.GetAdmin() {
		// Only an administrator raises a job's limit, pending or running
		// (slurmctld's operator; the gateway refuses a user's raise, and
		// this is what slips past it: an array's other tasks), against
		// its own limit or, without one, its partition's MaxTime.
		cur := j.Job.GetTimeLimitSeconds()
		if cur == 0 {
			cluster, partition := j.Job.GetCluster(), j.Job.GetPartition()
			if r := t.currentRun(j); r != nil && j.Running() {
				cluster, partition = r.Cluster, r.Partition
			}
			if c := t.cluster(cluster); c != nil {
				// A pending job of -p a,b may run in any of them: the
				// largest MaxTime of its list (the gateway's cap too).
				cur = mostSeconds(c, partition)
			}
		}
		if cur > 0 && lim > cur {
			lim = 0
		}
	}
	if part != "" {
		if c := t.cluster(j.Job.GetCluster()); c == nil {
			part = ""
		} else if !hasPartitions(c, part) {
			part = ""
		}
	}
	// The begin time the update leaves: none when it is not after now.
	var newBegin *timestamppb.Timestamp
	if begin != nil && begin.AsTime().After(t.now) {
		newBegin = begin
	}
	sameBegin := begin == nil || newBegin == nil && j.Job.GetBeginTime() == nil ||
		newBegin != nil && j.Job.GetBeginTime() != nil && newBegin.AsTime().Equal(j.Job.GetBeginTime().AsTime())
	name := ev.JobName
	if (lim == 0 || lim == j.Job.GetTimeLimitSeconds()) && (part == "" || part == j.Job.GetPartition()) &&
		(nice == nil || *nice == j.Job.GetNice()) && (dep == nil || *dep == j.Job.GetDependency()) && sameBegin &&
		(qos == nil || *qos == j.Job.GetQos()) && (acct == nil || *acct == j.Job.GetAccount()) &&
		(name == nil || *name == j.Job.GetDisplayName()) && (!resize || sameSize(j.Job, ev)) {
		return
	}
	j = t.editJob(j.Name())
	if lim > 0 {
		j.Job.TimeLimitSeconds = lim
	}
	if part != "" {
		j.Job.Partition = part
	}
	if nice != nil {
		j.Job.Nice = *nice
	}
	if dep != nil {
		j.Job.Dependency = *dep
	}
	if qos != nil {
		j.Job.Qos = *qos
	}
	if acct != nil {
		j.Job.Account = *acct
	}
	if begin != nil {
		j.Job.BeginTime = newBegin
	}
	if name != nil {
		j.Job.DisplayName = *name
	}
	if resize {
		j.Job.Ntasks = newTasks(j.Job, ev)
		if ev.NodeCount != nil {
			// A count alone replaces a range (-N MIN-MAX); with a maximum
			// it is the new range, as Slurm's NumNodes=MIN-MAX.
			j.Job.NodeCount, j.Job.MaxNodeCount = ev.GetNodeCount(), newMaxNodes(ev)
		}
		if ev.MemMb != nil {
			// Memory a node (MinMemoryNode) replaces --mem-per-cpu.
			j.Job.MemMb, j.Job.MemPerCpuMb = ev.GetMemMb(), 0
		}
		if ev.Nodelist != nil {
			j.Job.Nodelist = slices.Clone(uniqueHosts(ev.GetNodelist().GetHosts()))
		}
		if ev.Exclude != nil {
			j.Job.Exclude = slices.Clone(uniqueHosts(ev.GetExclude().GetHosts()))
		}
		if ev.GpusPerNode != nil {
			j.Job.GpusPerNode = ev.GetGpusPerNode()
		}
		if ev.GpuType != nil {
			j.Job.GpuType = ev.GetGpuType()
		}
		if j.Job.GetMemPerCpuMb() > 0 {
			// --mem-per-cpu's memory a node at the new minimum (its
			// nodes, tasks, GPUs), as fillAttrs places it.
			j.Job.MemMb = slurmspec.WidthMemMB(j.Job, minCPUsPerNode(j.Job))
		}
	}
	t.emitJob(j)
}

// newTasks is the task count job has after ev: its ntasks when it sets
// them, raised to a new node minimum below them as Slurm's controller
// does (slurmspec.TasksForNodes; the gateway's Updated does the same).
func newTasks(job *loomv1.Job, ev *eventsv1.UpdateJob) int32 {
	tasks := job.GetNtasks()
	if ev.Ntasks != nil {
		tasks = ev.GetNtasks()
	}
	if ev.NodeCount != nil {
		tasks = slurmspec.TasksForNodes(tasks, ev.GetNodeCount())
	}
	return tasks
}

// sameSize reports whether ev's size and hosts are those job has.
func sameSize(job *loomv1.Job, ev *eventsv1.UpdateJob) bool {
	return (ev.NodeCount == nil || ev.GetNodeCount() == job.GetNodeCount() && job.GetMaxNodeCount() == newMaxNodes(ev)) && newTasks(job, ev) == job.GetNtasks() &&
		// MinMemoryNode= on a --mem-per-cpu job ends it, whatever its memory.
		(ev.MemMb == nil || ev.GetMemMb() == job.GetMemMb() && job.GetMemPerCpuMb() == 0) &&
		(ev.Nodelist == nil || slices.Equal(uniqueHosts(ev.GetNodelist().GetHosts()), job.GetNodelist())) &&
		(ev.Exclude == nil || slices.Equal(uniqueHosts(ev.GetExclude().GetHosts()), job.GetExclude())) &&
		(ev.GpusPerNode == nil || ev.GetGpusPerNode() == job.GetGpusPerNode()) && (ev.GpuType == nil || ev.GetGpuType() == job.GetGpuType())
}

// newMaxNodes is the range's maximum an update with a node count leaves
// its job: the one it gives, none (0) when it gives none or its minimum.
func newMaxNodes(ev *eventsv1.UpdateJob) int32 {
	if most := ev.GetMaxNodeCount(); most > ev.GetNodeCount() {
		return most
	}
	return 0
}

// throttleArray sets the most tasks of j's array that run at once
// (scontrol update ArrayTaskThrottle=; 0: no limit): the array's record,
// and the --array spec of each of its tasks that has not ended, which
// squeue and scontrol show. Tasks already running over a lower limit go on;
// no more start until fewer run. A job that is not an array task is left
// alone (the gateway refuses it).
func (t *txn) throttleArray(j *Job, limit int32) {
	id := j.Job.GetArrayJobId()
	if id == "" {
		return
	}
	a := t.array(jobsPrefix(j.Name()) + id)
	if a == nil || a.Limit == limit {
		return
	}
	na := *a
	na.Limit = limit
	t.putArray(&na)
	for _, name := range na.Tasks {
		task := t.job(name)
		if task == nil || task.Terminal() {
			continue
		}
		spec := slurmspec.WithArrayLimit(task.Job.GetArray(), int(limit))
		if spec == task.Job.GetArray() {
			continue
		}
		task = t.editJob(name)
		task.Job.Array = spec
		t.emitJob(task)
	}
	t.dirty[j.Job.GetCluster()] = true
}

// dueRun is a run the clock must act on.
type dueRun struct {
	r          *Run
	j          *Job
	signal     bool
	stop       bool // time limit reached
	preempt    bool
	sig        JobSignal
	hang       time.Duration // > 0: no progress for that long
	checkpoint bool          // a checkpoint-aware drain's grace ended
}

// Tick does what the passing of time asks: a run at its time limit is
// stopped (TIMEOUT), after its --signal that long before (or, when the limit
// came sooner than that, as Slurm just before the stop); a preempted run at
// the end of its grace is stopped and requeued; at a draining node's
// deadline its jobs are requeued; a job whose --begin time or dependency
// delay has come is looked at again. It is cheap when nothing is due, so
// the app may call it every second; the change is empty then.
func (s *State) Tick(now time.Time) *Change {
	t := writerTxn(s, now)
	var due []dueRun
	var fenced, unanswered, survivors []*Run
	for _, r := range s.active {
		if !r.FenceUntil.IsZero() && !now.Before(r.FenceUntil) {
			fenced = append(fenced, r)
		}
		if r.Ended() {
			if !r.SurvivorsBy.IsZero() {
				// Checkpoint on failure: stopped at the wait's end; the
				// requeued job's wait for them starts then.
				if !now.Before(r.SurvivorsBy) {
					survivors = append(survivors, r)
				}
				continue
			}
			stopped := r.End
			if r.StopsSent.After(stopped) {
				stopped = r.StopsSent
			}
			if !now.Before(stopped.Add(s.cfg.RequeueStopWait)) {
				if j := s.jobs[r.Job]; j != nil && j.Pending() && j.Attempt == r.Attempt {
					unanswered = append(unanswered, r)
				}
			}
			continue
		}
		j := s.jobs[r.Job]
		if j == nil || !j.Running() || j.Attempt != r.Attempt {
			continue
		}
		d := dueRun{r: r, j: j}
		if r.PreemptBy != "" && !now.Before(r.PreemptAt) {
			d.preempt = true
		}
		if limit := s.runLimit(j, r); limit > 0 {
			deadline := r.Start.Add(limit)
			d.stop = !now.Before(deadline)
			// A run at its limit whose --signal was never sent (the limit
			// lowered below its elapsed time, or a lead shorter than the
			// clock's step) gets it too, just before it is stopped.
			if !r.Signaled && j.Job.GetSignal() != "" {
				if sig, err := ParseJobSignal(j.Job.GetSignal()); err == nil && sig.Name != "" && !now.Before(deadline.Add(-sig.Lead)) {
					d.signal, d.sig = true, sig
				}
			}
		}
		if hang, ok := s.hangDue(now, j, r); ok {
			d.hang = hang
		}
		d.checkpoint = !r.CheckpointBy.IsZero() && !now.Before(r.CheckpointBy)
		if d.preempt || d.stop || d.signal || d.hang > 0 || d.checkpoint {
			due = append(due, d)
		}
	}
	sort.Slice(fenced, func(a, b int) bool { return fenced[a].Key() < fenced[b].Key() })
	for _, r := range fenced {
		t.liftFences(r)
	}
	sort.Slice(survivors, func(a, b int) bool { return survivors[a].Key() < survivors[b].Key() })
	for _, r := range survivors {
		t.survivorsDone(t.run(r.Key()), "no new checkpoint within "+r.SurvivorsBy.Sub(r.End).String())
	}
	sort.Slice(unanswered, func(a, b int) bool { return unanswered[a].Key() < unanswered[b].Key() })
	for _, r := range unanswered {
		t.giveUpStopping(t.run(r.Key()))
	}
	sort.Slice(due, func(a, b int) bool { return due[a].r.Key() < due[b].r.Key() })
	for _, d := range due {
		switch {
		case d.stop:
			if d.signal {
				// As Slurm 22.05's time limit check: the --signal first,
				// then the stop, in the same pass (measured: the batch
				// shell's USR1 trap ran 3 ms before its SIGTERM one). The
				// node's events keep their order.
				r := t.editRun(d.r.Key())
				r.Signaled = true
				t.signalJob(d.j, r, d.sig.Name, d.sig.BatchOnly, false, "")
			}
			t.timeout(d.j, t.run(d.r.Key()))
		case d.preempt:
			t.preemptStop(d.j, t.run(d.r.Key()))
		case d.hang > 0:
			t.hung(d.j, t.run(d.r.Key()), d.hang)
		case d.checkpoint:
			t.checkpointDone(d.j, t.run(d.r.Key()), "no new checkpoint within "+s.cfg.CheckpointGrace.String())
		case d.signal:
			r := t.editRun(d.r.Key())
			r.Signaled = true
			t.signalJob(d.j, r, d.sig.Name, d.sig.BatchOnly, false, "")
		}
	}
	for cluster, at := range s.wake {
		if !now.Before(at) {
			t.dirty[cluster] = true
		}
	}
	if len(s.prologHeld) > 0 {
		t.releasePrologHolds() // health.go
	}
	if len(s.draining) > 0 {
		holders := t.holders()
		for name := range s.draining {
			n := s.nodes[name]
			if requeue, drained := t.drainWork(n, holders[name]); len(requeue) > 0 || drained {
				t.dirty[n.Cluster] = true
			}
		}
	}
	if len(unanswered) > 0 || len(fenced) > 0 {
		// The tasks on the nodes given up (or whose fence ended) are lost:
		// the run may be released before the pass.
		t.settleJobSteps()
	}
	t.settle()
	if len(t.dirty) > 0 {
		t.pass()
	}
	t.settleJobSteps() // the job steps of attempts that ended (time limit, preemption) end with them
	t.settle()
	t.afterPass()
	return t.c
}

// runLimit is the time limit of run r of job j: the job's, else its
// partition's MaxTime; 0 means none.
func (s *State) runLimit(j *Job, r *Run) time.Duration {
	if sec := j.Job.GetTimeLimitSeconds(); sec > 0 {
		return time.Duration(sec) * time.Second
	}
	if c := s.clusters[r.Cluster]; c != nil {
		for _, p := range c.Partitions {
			if p.Name == r.Partition {
				return time.Duration(p.MaxSeconds) * time.Second
			}
		}
	}
	return 0
}

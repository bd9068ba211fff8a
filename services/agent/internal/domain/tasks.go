package domain

import (
	"fmt"
	"strconv"
	"time"

	"github.com/loom-ml/loom/libs/acct"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
)

// Tasks is the agent's durable record of its node's tasks of one job step
// (srun): several processes, each in its own process group, that belong to
// the job's run (job, attempt) and end with it.
type Tasks struct {
	Job     string `json:"job"`
	JobID   string `json:"job_id,omitempty"`
	Attempt int32  `json:"attempt"`
	StepID  int32  `json:"step_id"`
	// FirstRank is the first task's SLURM_PROCID; NTasks how many run here.
	FirstRank int32 `json:"first_rank"`
	NTasks    int32 `json:"ntasks"`
	Phase     Phase `json:"phase"`
	// PIDs are the tasks' process (and group) ids once Running, by local
	// id; PIDStarts their start times, so that a recycled pid is never
	// mistaken for a task.
	PIDs      []int    `json:"pids,omitempty"`
	PIDStarts []uint64 `json:"pid_starts,omitempty"`
	// ExitCodes are the tasks' exit codes by local id, once ended.
	ExitCodes []int32 `json:"exit_codes,omitempty"`
	// ExitSignals, once ended, are the signals that killed the tasks, by
	// local id (0: the task exited, with its ExitCodes); empty when not
	// known (tasks that never started or were lost, records from before it
	// was kept).
	ExitSignals []int32 `json:"exit_signals,omitempty"`
	// MemLimit is the memory (bytes) the tasks together may hold
	// (LaunchTasks.mem_limit_bytes; 0: no limit).
	MemLimit int64 `json:"mem_limit,omitempty"`
	// Owner is the user the tasks run as ("" the agent's own account): an
	// agent that restarted looks for their processes among that user's
	// alone (Runtime.Adopt). nil in a record from an agent before it was
	// kept: their processes are looked for among every user's.
	Owner *string `json:"owner,omitempty"`
	// OwnerUID is Owner's uid on this node as resolved when the tasks were
	// sent (their Starting record on), for a restarted agent's look for
	// their processes (Step.OwnerUID). nil in a record from an agent
	// before it was kept, or where Owner did not resolve then.
	OwnerUID *uint32 `json:"owner_uid,omitempty"`
	// Usage is what each task's processes used, by local id, once ended
	// (empty: not known).
	Usage      []acct.Usage `json:"usage,omitempty"`
	Message    string       `json:"message,omitempty"`
	StopReason string       `json:"stop_reason,omitempty"`
	Created    time.Time    `json:"created"`
	Ended      time.Time    `json:"ended,omitzero"`
	// RegistrationMismatch: the tasks FailedToStart because their
	// LaunchTasks was sealed for another registration of this node than
	// the agent's (TasksNotOpened; TasksChanged.registration_mismatch).
	RegistrationMismatch bool `json:"registration_mismatch,omitempty"`
}

// TasksKey is a task record's key: "<job>#<attempt>.<step>". It begins with
// the run's step key (Key), so the tasks of a run are found by prefix.
func TasksKey(job string, attempt, step int32) string {
	return Key(job, attempt) + "." + strconv.Itoa(int(step))
}

// Key returns the record's key.
func (t *Tasks) Key() string { return TasksKey(t.Job, t.Attempt, t.StepID) }

// RunKey returns the key of the run the tasks belong to.
func (t *Tasks) RunKey() string { return Key(t.Job, t.Attempt) }

func (t *Tasks) clone() *Tasks {
	c := *t
	c.PIDs = append([]int(nil), t.PIDs...)
	c.PIDStarts = append([]uint64(nil), t.PIDStarts...)
	c.ExitCodes = append([]int32(nil), t.ExitCodes...)
	c.ExitSignals = append([]int32(nil), t.ExitSignals...)
	c.Usage = append([]acct.Usage(nil), t.Usage...)
	return &c
}

// Event returns the TasksChanged that reports the record's current phase.
func (t *Tasks) Event(self Self) *eventsv1.TasksChanged {
	ev := &eventsv1.TasksChanged{
		Job: t.Job, Attempt: t.Attempt, StepId: t.StepID, Node: self.Node, Cluster: self.Cluster,
		FirstRank: t.FirstRank, Message: t.Message,
	}
	if t.Phase.Terminal() {
		ev.ExitCodes = append([]int32(nil), t.ExitCodes...)
		if len(t.ExitSignals) == len(t.ExitCodes) {
			ev.ExitSignals = append([]int32(nil), t.ExitSignals...)
		}
		ev.Usage = usageProtos(t.Usage)
	}
	ev.State = t.Phase.StepState()
	ev.RegistrationMismatch = t.RegistrationMismatch && t.Phase == FailedToStart
	return ev
}

// Launch decides a LaunchTasks: the Starting record to write before the
// processes start, or a reason to do nothing (another node's tasks, a step
// this node has seen before whatever the event id, or bad input); when the
// job's run already ended here (its batch step run is terminal) the tasks
// are recorded KILLED at once and never start (ended is then set); tasks of
// an attempt older than highest (the job's highest attempt this node has a
// record of) are stale: recorded FAILED_TO_START, never started.
func Launch(self Self, existing *Tasks, run *Step, highest int32, cmd *eventsv1.LaunchTasks, now time.Time) (rec *Tasks, ended bool, skip string) {
	switch {
	case cmd.GetNode() != self.Node:
		return nil, false, "tasks for another node"
	case existing != nil:
		return nil, false, fmt.Sprintf("tasks %s already %s", existing.Key(), existing.Phase)
	}
	owner := cmd.GetUser()
	rec = &Tasks{Job: cmd.GetJob(), JobID: cmd.GetJobId(), Attempt: cmd.GetAttempt(), StepID: cmd.GetStepId(),
		FirstRank: cmd.GetFirstRank(), NTasks: cmd.GetNtasks(), Phase: Starting, Created: now,
		MemLimit: max(cmd.GetMemLimitBytes(), 0), Owner: &owner}
	switch {
	case cmd.GetJob() == "" || cmd.GetStepId() < 0 || cmd.GetNtasks() < 1 || cmd.GetFirstRank() < 0:
		rec.Phase, rec.Message, rec.Ended = FailedToStart,
			fmt.Sprintf("bad launch: job %q, step %d, %d task(s) from rank %d", cmd.GetJob(), cmd.GetStepId(), cmd.GetNtasks(), cmd.GetFirstRank()), now
		rec.ExitCodes = ones(max(cmd.GetNtasks(), 0))
		return rec, true, ""
	case badRanks(cmd) != "":
		rec.Phase, rec.Message, rec.Ended = FailedToStart, "bad launch: "+badRanks(cmd), now
		rec.ExitCodes = ones(cmd.GetNtasks())
		return rec, true, ""
	case len(cmd.GetSealed()) == 0 && (len(cmd.GetCommand()) == 0 || cmd.GetCommand()[0] == ""):
		// A command still sealed here is one the agent could not open
		// (sealed for another registration of the node: the app records
		// it TasksNotOpened); its command is in the sealed blob.
		rec.Phase, rec.Message, rec.Ended = FailedToStart, "the step has no command", now
		rec.ExitCodes = ones(cmd.GetNtasks())
		return rec, true, ""
	case cmd.GetAttempt() < highest:
		rec.Phase, rec.Message, rec.Ended = FailedToStart, StaleAttempt(cmd.GetAttempt(), highest), now
		rec.ExitCodes = ones(cmd.GetNtasks())
		return rec, true, ""
	case run != nil && (run.Phase.Terminal() || run.StopReason != ""):
		rec.Phase, rec.Message, rec.Ended = Killed, "killed before it started: the job's run has ended here", now
		rec.StopReason = "the job's run has ended"
		return rec, true, ""
	}
	return rec, false, ""
}

func ones(n int32) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = 1
	}
	return out
}

// TasksStarted records that every task's process runs.
func TasksStarted(rec *Tasks, pids []int, starts []uint64) *Tasks {
	r := rec.clone()
	r.Phase, r.PIDs, r.PIDStarts = Running, append([]int(nil), pids...), append([]uint64(nil), starts...)
	return r
}

// TasksStartFailed records that the tasks could not be started (those that
// did were killed): exit code 1 each.
func TasksStartFailed(rec *Tasks, reason string, now time.Time) *Tasks {
	r := rec.clone()
	r.Phase, r.Message, r.Ended, r.ExitCodes = FailedToStart, reason, now, ones(r.NTasks)
	return r
}

// TasksEnded records the end of every task: KILLED when they were asked to
// stop, EXITED otherwise, with each task's code (128+n for signal n).
func TasksEnded(rec *Tasks, exits []Exit, now time.Time) *Tasks {
	r := rec.clone()
	r.Ended = now
	r.ExitCodes = make([]int32, len(exits))
	r.ExitSignals = make([]int32, len(exits))
	worst, failed, oom, unknown := int32(0), 0, 0, 0
	known := false
	for _, e := range exits {
		known = known || e.Usage != nil
	}
	if known {
		r.Usage = make([]acct.Usage, len(exits))
	}
	for i, e := range exits {
		r.ExitCodes[i], r.ExitSignals[i] = e.Code, e.SignalNumber()
		if known && e.Usage != nil {
			r.Usage[i] = *e.Usage
		}
		if e.Unknown {
			unknown++
		}
		if e.Code != 0 || e.OOM {
			failed++
		}
		if e.OOM {
			oom++
		}
		worst = max(worst, e.Code)
	}
	switch {
	case r.StopReason != "":
		r.Phase, r.Message = Killed, "killed: "+r.StopReason
	case unknown > 0:
		r.ExitSignals = nil
		r.Phase, r.Message = Lost, fmt.Sprintf("%d of %d task(s) ended while no agent watched them, and how is not known (their shims were killed)", unknown, len(exits))
	case oom > 0:
		r.Phase, r.Message = Exited, fmt.Sprintf("%d of %d task(s) failed, %d out of memory; highest exit code %d", failed, len(exits), oom, worst)
	case failed > 0:
		r.Phase, r.Message = Exited, fmt.Sprintf("%d of %d task(s) failed; highest exit code %d", failed, len(exits), worst)
	default:
		r.Phase, r.Message = Exited, fmt.Sprintf("%d task(s) exited with code 0", len(exits))
	}
	return r
}

// StopTasks decides a request to kill a step's tasks here (KillTasks without
// a signal, a StopStep of their run, the agent's shutdown): running tasks are
// marked (their end will be KILLED) and killed; tasks never started get a
// KILLED record at once (named by job, attempt and step: a later LaunchTasks
// starts nothing, and the scheduler hears an end); ended ones stay as they are.
func StopTasks(existing *Tasks, job string, attempt, step int32, reason string, now time.Time) StopTasksDecision {
	if reason == "" {
		reason = "stop requested"
	}
	switch {
	case existing == nil || existing.Phase == Starting:
		r := &Tasks{Job: job, Attempt: attempt, StepID: step, Phase: Killed, StopReason: reason,
			Message: "killed before it started: " + reason, Created: now, Ended: now}
		if existing != nil {
			r.JobID, r.FirstRank, r.NTasks = existing.JobID, existing.FirstRank, existing.NTasks
			r.ExitCodes = make([]int32, existing.NTasks)
		}
		return StopTasksDecision{Rec: r}
	case existing.Phase == Running && existing.StopReason == "":
		r := existing.clone()
		r.StopReason = reason
		return StopTasksDecision{Rec: r, Kill: true}
	}
	return StopTasksDecision{}
}

// StopTasksDecision is what a stop of a step's tasks calls for.
type StopTasksDecision struct {
	// Rec is the record to write; nil when nothing changes.
	Rec *Tasks
	// Kill is true when the tasks' process groups must be signalled.
	Kill bool
}

// TasksNotOpened records rec, tasks Launch decided to start, FailedToStart
// instead: their LaunchTasks was sealed for another registration of this
// node than the agent's (why says which), so it cannot be opened here and
// they never start. Marked RegistrationMismatch: the job step failed to
// launch, as Slurm's srun when a node refuses a step's launch; the job
// goes on.
func TasksNotOpened(rec *Tasks, why string, now time.Time) *Tasks {
	r := rec.clone()
	r.Phase, r.Message, r.Ended, r.RegistrationMismatch = FailedToStart, why, now, true
	r.ExitCodes = ones(r.NTasks)
	return r
}

// MarkTasksLost records that tasks a previous agent process was running (or
// starting) cannot be observed any more.
func MarkTasksLost(rec *Tasks, why string, now time.Time) *Tasks {
	r := rec.clone()
	r.Phase, r.Message, r.Ended = Lost, why, now
	if len(r.ExitCodes) != int(r.NTasks) {
		r.ExitCodes = ones(r.NTasks)
	}
	r.ExitSignals = nil
	return r
}

// RecoverTasks decides the tasks a predecessor left running or starting
// (rec) from what remains of each (by local id, as Recover for a step):
// the records to write, in order, each reported, and whether the agent
// adopts them (watches them until every one has ended). When every task
// still runs or left its exit, they are adopted (tasks never reported
// running are reported RUNNING first), or reported ended with their real
// exit codes when all have ended; when nothing remains of one of them, the
// tasks are LOST (why: what the agent found and did).
func RecoverTasks(rec *Tasks, found []Remains, why string, now time.Time) (recs []*Tasks, adopt bool) {
	running := 0
	pids, starts := make([]int, len(found)), make([]uint64, len(found))
	exits := make([]Exit, len(found))
	for i, r := range found {
		switch {
		case r.Running:
			running++
			pids[i], starts[i] = r.PID, r.PIDStart
		case r.Exit != nil:
			exits[i] = *r.Exit
			if i < len(rec.PIDs) {
				pids[i] = rec.PIDs[i]
			}
		default:
			return []*Tasks{MarkTasksLost(rec, why, now)}, false
		}
	}
	if len(found) == 0 {
		return []*Tasks{MarkTasksLost(rec, why, now)}, false
	}
	cur := rec
	if rec.Phase == Starting {
		cur = TasksStarted(rec, pids, starts)
		recs = append(recs, cur)
	}
	if running > 0 {
		return recs, true
	}
	return append(recs, TasksEnded(cur, exits, now)), false
}

// TaskRank is the global rank (SLURM_PROCID) of cmd's local task l: its
// ranks' when the scheduler sent them (a step laid out by srun -m cyclic
// or plane=N), else first_rank onwards (a block layout).
func TaskRank(cmd *eventsv1.LaunchTasks, l int32) int32 {
	if r := cmd.GetRanks(); len(r) > 0 {
		return r[l]
	}
	return cmd.GetFirstRank() + l
}

// badRanks says what is wrong with cmd's ranks ("" when nothing): when
// sent, one for each task, each in 0..total_tasks-1, none twice, so that
// no two tasks write the same task-RANK files.
func badRanks(cmd *eventsv1.LaunchTasks) string {
	r := cmd.GetRanks()
	if len(r) == 0 {
		return ""
	}
	if len(r) != int(cmd.GetNtasks()) {
		return fmt.Sprintf("%d ranks for %d tasks", len(r), cmd.GetNtasks())
	}
	seen := make(map[int32]bool, len(r))
	for _, x := range r {
		if x < 0 || x >= cmd.GetTotalTasks() || seen[x] {
			return fmt.Sprintf("rank %d: want each of 0..%d once", x, cmd.GetTotalTasks()-1)
		}
		seen[x] = true
	}
	return ""
}

// Package domain is the agent's pure core: the life of one node's part of a
// job run (a step) as a state machine. Decisions take the current record, one
// input and the time, and return the new record and the event to emit; they
// do no I/O. The app writes them atomically and only then starts or kills
// processes.
package domain

import (
	"fmt"
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/acct"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
)

// Phase is where a step is in its life.
type Phase string

// Phases. Starting is recorded before the process is started, so that a crash
// between the two can never lead to a second start of the same (job, attempt).
const (
	Starting      Phase = "STARTING"
	Running       Phase = "RUNNING"
	Exited        Phase = "EXITED"
	FailedToStart Phase = "FAILED_TO_START"
	Killed        Phase = "KILLED"
	Lost          Phase = "LOST"
)

// Terminal reports whether a step in phase p will never change again.
func (p Phase) Terminal() bool {
	return p == Exited || p == FailedToStart || p == Killed || p == Lost
}

// Self identifies the agent's node.
type Self struct {
	// Node is the node's full name.
	Node string
	// Cluster is the cluster's full name.
	Cluster string
}

// Step is the agent's durable record of one (job, attempt) on its node.
type Step struct {
	Job     string `json:"job"`
	JobID   string `json:"job_id,omitempty"`
	Attempt int32  `json:"attempt"`
	Phase   Phase  `json:"phase"`
	// PID is the process (and process group) id once Running.
	PID int `json:"pid,omitempty"`
	// PIDStart is the process's start time as the OS reports it, so that a
	// recycled pid is never mistaken for the step.
	PIDStart uint64 `json:"pid_start,omitempty"`
	ExitCode int32  `json:"exit_code,omitempty"`
	// ExitSignal, once ended, is the signal that killed the process (0: it
	// exited by itself, with ExitCode); nil when how it ended is not known
	// (and in records from before it was kept).
	ExitSignal *int32 `json:"exit_signal,omitempty"`
	Message    string `json:"message,omitempty"`
	// StopReason is set once the step was asked to stop; its exit is then KILLED.
	StopReason string `json:"stop_reason,omitempty"`
	// NodeStopping: the stop was the agent's own, as it stopped (see
	// ShutdownStop), not Loom's nor the program's.
	NodeStopping bool `json:"node_stopping,omitempty"`
	// RegistrationMismatch: the step is Lost because its StartStep was
	// sealed for another registration of this node than the agent's, and
	// never ran (NotOpened; StepChanged.registration_mismatch).
	RegistrationMismatch bool `json:"registration_mismatch,omitempty"`
	// ErrPath is the file the step's stderr goes to, once Running: where
	// a stop's Slurm-style line goes (StopLine).
	ErrPath string `json:"err_path,omitempty"`
	// OutPath is the file the step's stdout goes to, once Running: its
	// size is part of the step's progress.
	OutPath string `json:"out_path,omitempty"`
	// Owner is the user the step runs as, from its Starting record on (""
	// the agent's own account): an agent that adopts the step after a
	// restart opens ErrPath again as that user, for the stop line, and
	// looks for the step's processes among that user's alone (Runtime.Adopt).
	// nil in a record from an agent before owners were kept: such a step
	// gets no stop line when adopted (opening its path as anyone else could
	// write where the job may not), and its processes are looked for among
	// every user's.
	Owner *string `json:"owner,omitempty"`
	// OwnerUID is Owner's uid on this node as the agent resolved it when
	// the step was sent (its Starting record on): a restarted agent looks
	// for the step's processes among that uid's (Runtime.Adopt) without
	// resolving Owner again, which may fail by then (the account removed,
	// the name service failing) and would have every process read. nil in
	// a record from an agent before it was kept, or where Owner did not
	// resolve at the start (the step then fails to start): Owner is
	// resolved then, as before.
	OwnerUID *uint32 `json:"owner_uid,omitempty"`
	// MemLimit is the memory (bytes) the step's processes may hold
	// (StartStep.mem_limit_bytes; 0: no limit).
	MemLimit int64 `json:"mem_limit,omitempty"`
	// Usage is what the step's processes used, once ended (nil: not known).
	Usage   *acct.Usage `json:"usage,omitempty"`
	Created time.Time   `json:"created"`
	Ended   time.Time   `json:"ended,omitzero"`
}

// Key is a step's record key: job name and attempt.
func Key(job string, attempt int32) string { return job + "#" + strconv.Itoa(int(attempt)) }

// Key returns the step's record key.
func (s *Step) Key() string { return Key(s.Job, s.Attempt) }

func (s *Step) clone() *Step {
	c := *s
	return &c
}

// Event returns the StepChanged that reports the step's current phase.
func (s *Step) Event(self Self) *eventsv1.StepChanged {
	ev := &eventsv1.StepChanged{
		Job: s.Job, Attempt: s.Attempt, Node: self.Node, Cluster: self.Cluster,
		ExitCode: s.ExitCode, Message: s.Message, Pid: int32(s.PID),
	}
	if s.Phase.Terminal() && s.ExitSignal != nil {
		ev.ExitSignal = proto.Int32(*s.ExitSignal)
	}
	ev.State = s.Phase.StepState()
	ev.NodeStopping = s.NodeStopping && s.Phase == Killed
	ev.RegistrationMismatch = s.RegistrationMismatch && s.Phase == Lost
	if s.Usage != nil && s.Phase.Terminal() {
		ev.Usage = s.Usage.Proto(0, "")
	}
	return ev
}

// StepState is the phase as reported on the bus (unspecified for Starting,
// which is never reported).
func (p Phase) StepState() eventsv1.StepState {
	switch p {
	case Running:
		return eventsv1.StepState_STEP_RUNNING
	case Exited:
		return eventsv1.StepState_STEP_EXITED
	case FailedToStart:
		return eventsv1.StepState_STEP_FAILED_TO_START
	case Killed:
		return eventsv1.StepState_STEP_KILLED
	case Lost:
		return eventsv1.StepState_STEP_LOST
	}
	return eventsv1.StepState_STEP_STATE_UNSPECIFIED
}

// Start decides a StartStep: the Starting record to write before the process
// starts, or a reason to do nothing (another node's step, or a (job, attempt)
// this node has seen before, whatever the event id: a stop that came first
// left a KILLED record, so a start of a stopped attempt does nothing).
// highest is the highest attempt of the job this node has a record of: a
// start of an older attempt is stale (its run was ended and the job went
// on) and is refused, a FailedToStart record to write and report.
func Start(self Self, existing *Step, highest int32, cmd *eventsv1.StartStep, now time.Time) (rec *Step, skip string) {
	switch {
	case cmd.GetNode() != self.Node:
		return nil, "step for another node"
	case existing != nil:
		return nil, fmt.Sprintf("step %s already %s", existing.Key(), existing.Phase)
	}
	owner := cmd.GetUser()
	rec = &Step{Job: cmd.GetJob(), JobID: cmd.GetJobId(), Attempt: cmd.GetAttempt(), Phase: Starting, Created: now,
		MemLimit: max(cmd.GetMemLimitBytes(), 0), Owner: &owner}
	if cmd.GetAttempt() < highest {
		rec.Phase, rec.Message, rec.Ended = FailedToStart, StaleAttempt(cmd.GetAttempt(), highest), now
	}
	return rec, ""
}

// StaleAttempt is the message of a start refused for a stale attempt.
func StaleAttempt(attempt, highest int32) string {
	return fmt.Sprintf("stale attempt %d: this node has seen attempt %d of the job", attempt, highest)
}

// Started records that the process runs.
func Started(rec *Step, pid int, pidStart uint64, errPath string) *Step {
	r := rec.clone()
	r.Phase, r.PID, r.PIDStart, r.ErrPath = Running, pid, pidStart, errPath
	return r
}

// stopCauses are the endings of Slurm's line for each cause it names.
var stopCauses = map[eventsv1.StopCause]string{
	eventsv1.StopCause_STOP_CAUSE_CANCELLED:    "",
	eventsv1.StopCause_STOP_CAUSE_TIME_LIMIT:   " DUE TO TIME LIMIT",
	eventsv1.StopCause_STOP_CAUSE_PREEMPTED:    " DUE TO PREEMPTION",
	eventsv1.StopCause_STOP_CAUSE_REQUEUED:     " DUE TO JOB REQUEUE",
	eventsv1.StopCause_STOP_CAUSE_NODE_FAILURE: " DUE TO NODE FAILURE",
}

// StopLine is the line slurmstepd writes to a job's error output when it
// stops the job, so that its log says why it ended ("slurmstepd-gpu-0001:
// error: *** JOB 7 ON gpu-0001 CANCELLED AT 2026-11-29T21:34:33 DUE TO TIME
// LIMIT ***", local time), or "" for a cause Slurm writes nothing for.
func StopLine(jobID, host string, cause eventsv1.StopCause, at time.Time) string {
	end, ok := stopCauses[cause]
	if !ok || jobID == "" {
		return ""
	}
	return fmt.Sprintf("slurmstepd-%s: error: *** JOB %s ON %s CANCELLED AT %s%s ***\n",
		host, jobID, host, at.Local().Format("2006-01-02T15:04:05"), end)
}

// StartFailed records that the process could not be started.
func StartFailed(rec *Step, reason string, now time.Time) *Step {
	r := rec.clone()
	r.Phase, r.Message, r.Ended = FailedToStart, reason, now
	return r
}

// Exit describes how a step's process ended.
type Exit struct {
	// Code is the exit status, 128+n for a process killed by signal n.
	Code int32
	// Signal names the signal that killed it, "" when it exited.
	Signal string
	// OOM is true when its runtime says it was ended for want of memory
	// (Slurm's OUT_OF_MEMORY); the message says so.
	OOM bool
	// Unknown is true when how it ended is not known (a step adopted
	// after an agent restart whose shim was killed with it): the step is
	// LOST unless it was being stopped.
	Unknown bool
	// Usage is what its processes used, as the agent measured them (nil:
	// not known).
	Usage *acct.Usage
}

// SignalNumber is the signal that ended the process (0: it exited): Code
// is 128+n for signal n, and Signal names it.
func (e Exit) SignalNumber() int32 {
	if e.Signal == "" || e.Code <= 128 {
		return 0
	}
	return e.Code - 128
}

// Ended records the end of a step's process: KILLED when it was asked to
// stop, EXITED with its code otherwise.
func Ended(rec *Step, exit Exit, now time.Time) *Step {
	r := rec.clone()
	r.ExitCode, r.Ended, r.Usage = exit.Code, now, exit.Usage
	if !exit.Unknown {
		r.ExitSignal = proto.Int32(exit.SignalNumber())
	}
	switch {
	case r.StopReason != "":
		r.Phase, r.Message = Killed, "killed: "+r.StopReason
	case exit.Unknown:
		r.Phase, r.Message = Lost, "the step ended while no agent watched it, and how is not known (its shim was killed)"
	case exit.OOM:
		r.Phase, r.Message = Exited, fmt.Sprintf("out of memory (exit code %d)", exit.Code)
	case exit.Signal != "":
		r.Phase, r.Message = Exited, fmt.Sprintf("killed by signal %s (exit code %d)", exit.Signal, exit.Code)
	default:
		r.Phase, r.Message = Exited, fmt.Sprintf("exited with code %d", exit.Code)
	}
	return r
}

// StopDecision is what a StopStep (or the agent's shutdown) calls for.
type StopDecision struct {
	// Rec is the record to write; nil when nothing changes.
	Rec *Step
	// Kill is true when the step's process group must be signalled.
	Kill bool
}

// Stop decides a stop request for a step. A running step is marked (its exit
// will be KILLED) and killed; a step the node never started gets a KILLED
// record at once so that a late StartStep for it starts nothing and the
// scheduler hears an end; finished steps stay as they are.
func Stop(self Self, existing *Step, cmd *eventsv1.StopStep, now time.Time) StopDecision {
	if cmd.GetNode() != self.Node {
		return StopDecision{}
	}
	reason := cmd.GetReason()
	if reason == "" {
		reason = "stop requested"
	}
	switch {
	case existing == nil || existing.Phase == Starting:
		return StopDecision{Rec: &Step{
			Job: cmd.GetJob(), Attempt: cmd.GetAttempt(), Phase: Killed, StopReason: reason,
			Message: "killed before it started: " + reason, Created: now, Ended: now,
		}}
	case existing.Phase == Running && existing.StopReason == "":
		r := existing.clone()
		r.StopReason = reason
		return StopDecision{Rec: r, Kill: true}
	}
	return StopDecision{}
}

// ShutdownStop is Stop for the agent's own shutdown (why: the reason it
// stops): the record it gives is marked NodeStopping, so that the step's
// KILLED report says its node stopped it (the scheduler requeues the job as
// after a node failure), not that the program died or Loom stopped it.
func ShutdownStop(self Self, existing *Step, why string, now time.Time) StopDecision {
	if existing == nil {
		return StopDecision{}
	}
	d := Stop(self, existing, &eventsv1.StopStep{Job: existing.Job, Attempt: existing.Attempt, Node: self.Node, Reason: why}, now)
	if d.Rec != nil {
		d.Rec.NodeStopping = true
	}
	return d
}

// Signal decides a SignalStep: whether to send the signal now, or a reason
// not to (another node's step, a step this node never started, or one that
// is not running: not started yet, or ended). Signalling changes no record.
func Signal(self Self, existing *Step, cmd *eventsv1.SignalStep) (send bool, skip string) {
	switch {
	case cmd.GetNode() != self.Node:
		return false, "step for another node"
	case existing == nil:
		return false, fmt.Sprintf("step %s was never started here", Key(cmd.GetJob(), cmd.GetAttempt()))
	case existing.Phase != Running:
		return false, fmt.Sprintf("step %s is %s, not running", existing.Key(), existing.Phase)
	}
	return true, ""
}

// NotOpened records rec, a step Start decided to start, Lost instead: its
// StartStep was sealed for another registration of this node than the
// agent's (why says which), so it cannot be opened here and never runs.
// Lost, not FailedToStart, as the node's part and not the program's; marked
// RegistrationMismatch, so that the scheduler requeues the run as never
// launched rather than as a node failure.
func NotOpened(rec *Step, why string, now time.Time) *Step {
	r := rec.clone()
	r.Phase, r.Message, r.Ended, r.RegistrationMismatch = Lost, why, now, true
	return r
}

// MarkLost records that a step the agent cannot observe any more (it was
// running, or being started, when a previous agent process died) is lost.
func MarkLost(rec *Step, why string, now time.Time) *Step {
	r := rec.clone()
	r.Phase, r.Message, r.Ended = Lost, why, now
	return r
}

// Remains is what a restarted agent found of a step its predecessor left
// running or starting.
type Remains struct {
	// Running is true when the step still runs (its shim, pid PID started
	// at PIDStart): the agent adopts it.
	Running  bool
	PID      int
	PIDStart uint64
	// Exit, when set, is how the step ended while no agent watched it.
	Exit *Exit
	// Why says what was found when neither (the step is lost).
	Why string
}

// Recover decides a step a predecessor left running or starting (rec) from
// what remains of it: the records to write, in order, each reported (a
// step never reported running is reported RUNNING first), and whether the
// agent adopts it (watches it until it ends). A step that still runs is
// adopted; one that ended meanwhile is EXITED with its real exit code (or
// KILLED when a stop was under way); only one of which nothing remains is
// LOST.
func Recover(rec *Step, r Remains, now time.Time) (recs []*Step, adopt bool) {
	cur := rec
	if (r.Running || r.Exit != nil) && rec.Phase == Starting {
		cur = Started(rec, r.PID, r.PIDStart, "")
		recs = append(recs, cur)
	}
	switch {
	case r.Running:
		return recs, true
	case r.Exit != nil:
		return append(recs, Ended(cur, *r.Exit, now)), false
	}
	return []*Step{MarkLost(rec, r.Why, now)}, false
}

// Registered is the AgentRegistered an agent emits when it starts.
func Registered(self Self, hostname string, pid, gpus int, bootID string) *eventsv1.AgentRegistered {
	return &eventsv1.AgentRegistered{Node: self.Node, Cluster: self.Cluster, Hostname: hostname,
		Pid: int32(pid), Gpus: int32(gpus), BootId: bootID}
}

// Heartbeat is the Heartbeat an agent emits every interval.
func Heartbeat(self Self, bootID string, now time.Time, running int) *eventsv1.Heartbeat {
	return &eventsv1.Heartbeat{Node: self.Node, Cluster: self.Cluster, BootId: bootID,
		Time: timestamppb.New(now), RunningSteps: int32(running)}
}

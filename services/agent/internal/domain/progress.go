package domain

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
)

// ProgressEnv is set in every step's (and task's) environment to the file
// the program reports its progress in: JSON {"step": N, "checkpoint_step":
// M, "checkpoint_time": RFC 3339, "checkpoint_seconds": S}, written to a
// temporary file and renamed over it.
const ProgressEnv = "LOOM_PROGRESS_FILE"

// MaxCheckpointSeconds bounds the checkpointing time a progress file can
// report (a year): more is clipped to it, so that no value overflows a
// duration.
const MaxCheckpointSeconds = 365 * 24 * 3600

// ProgressReport is what a program wrote to its progress file.
type ProgressReport struct {
	Step           int64     `json:"step"`
	CheckpointStep int64     `json:"checkpoint_step"`
	CheckpointTime time.Time `json:"checkpoint_time"`
	// CheckpointSeconds is how long this run of the program has spent
	// writing checkpoints, summed over its saves (optional; goodput's
	// lost_checkpointing). A negative or non-finite value is ignored.
	CheckpointSeconds float64 `json:"checkpoint_seconds"`
}

// Progress is what the agent last reported of a run's progress on its node.
type Progress struct {
	ProgressReport
	// OutputBytes is the size of the step's output file.
	OutputBytes int64
	// LastProgress is when it last moved (zero: never seen to).
	LastProgress time.Time
}

// Observe decides what a look at a run's progress (its report and output
// size, now) means: the new state, and the StepProgress to emit when
// something moved since the last one (the training step or the checkpoint
// step went on, the checkpointing time grew, or the output grew); nil when
// nothing did. How often the
// agent looks bounds how often it reports.
func Observe(self Self, job string, attempt int32, prev Progress, r ProgressReport, outputBytes int64, now time.Time) (Progress, *eventsv1.StepProgress) {
	// !(x >= 0) also drops NaN; +Inf is clipped below.
	if !(r.CheckpointSeconds >= 0) {
		r.CheckpointSeconds = 0
	}
	r.CheckpointSeconds = min(r.CheckpointSeconds, MaxCheckpointSeconds)
	moved := r.Step > prev.Step || r.CheckpointStep > prev.CheckpointStep || outputBytes > prev.OutputBytes ||
		r.CheckpointSeconds > prev.CheckpointSeconds
	if !moved {
		return prev, nil
	}
	next := Progress{ProgressReport: r, OutputBytes: outputBytes, LastProgress: now}
	// A program that went back (restarted from a checkpoint) is reported
	// as it says; only a move forward counts as progress.
	next.Step, next.CheckpointStep = max(r.Step, 0), max(r.CheckpointStep, 0)
	ev := &eventsv1.StepProgress{Job: job, Attempt: attempt, Node: self.Node,
		Step: next.Step, CheckpointStep: next.CheckpointStep, OutputBytes: outputBytes,
		LastProgress: timestamppb.New(now), Time: timestamppb.New(now)}
	if !r.CheckpointTime.IsZero() {
		ev.CheckpointTime = timestamppb.New(r.CheckpointTime)
	}
	if r.CheckpointSeconds > 0 {
		ev.CheckpointDuration = durationpb.New(time.Duration(r.CheckpointSeconds * float64(time.Second)))
	}
	return next, ev
}

package slurmcli

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/loom-ml/loom/libs/paging"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// maxStepLookups bounds how many jobs' steps one sacct asks the gateway for
// (one call per started job): beyond it, jobs are listed without their
// numbered steps.
const maxStepLookups = 200

// stepRows are sacct's rows of a job's numbered steps ("12.0", "12.1":
// srun inside the allocation) in its run run (nil: its current run), by
// step id, less those that never started (waiting for resources, or
// cancelled while they did). A gateway that does not serve steps, or a job or run it no
// longer has, gives none.
func (c *cmd) stepRows(ctx context.Context, j *loomv1.Job, run *loomv1.JobRun, id string, lookups *stepLookups) []sacctRow {
	steps, ok := c.runSteps(ctx, j, run, lookups)
	if !ok {
		return nil
	}
	var out []sacctRow
	for _, s := range steps {
		if neverStarted(s) {
			// A step that waited for resources and never started, as
			// Slurm's accounting never sees it.
			continue
		}
		step := strconv.Itoa(int(s.GetStepId()))
		out = append(out, sacctRow{job: j, id: id + "." + step, step: step, jstep: s, run: run})
	}
	return out
}

// neverStarted is a step that waited for resources and never ran.
func neverStarted(s *loomv1.JobStep) bool {
	return s.GetStartTime() == nil && (s.GetState() == loomv1.JobState_PENDING || s.GetState() == loomv1.JobState_CANCELLED)
}

// stepLookups are the job steps one command asked the gateway for, by run,
// and how many asks it made (at most maxStepLookups).
type stepLookups struct {
	n    int
	runs map[string][]*loomv1.JobStep
}

// runSteps are the job steps of j's run run (nil: its current run), asked
// once per command; ok is false past maxStepLookups or when the gateway
// does not give them.
func (c *cmd) runSteps(ctx context.Context, j *loomv1.Job, run *loomv1.JobRun, lookups *stepLookups) ([]*loomv1.JobStep, bool) {
	key := j.GetName() + "\x00" + strconv.Itoa(int(run.GetAttempt()))
	if steps, ok := lookups.runs[key]; ok {
		return steps, steps != nil
	}
	if lookups.n >= maxStepLookups {
		return nil, false
	}
	lookups.n++
	if lookups.runs == nil {
		lookups.runs = map[string][]*loomv1.JobStep{}
	}
	steps, err := c.jobSteps(ctx, j.GetName(), run.GetAttempt())
	if err != nil {
		lookups.runs[key] = nil
		return nil, false
	}
	if steps == nil {
		steps = []*loomv1.JobStep{}
	}
	lookups.runs[key] = steps
	return steps, true
}

// derivedExitCode is Slurm's DerivedExitCode "code:signal" of a run whose
// job steps are steps: the highest of the ended steps' exit statuses as
// wait(2) reports them (code<<8 | signal), so the highest exit code, or
// with none above 0 the highest signal; "0:0" with no step ended. The batch
// script's own end is not one of them (ExitCode has it), as in Slurm 22.05.
func derivedExitCode(steps []*loomv1.JobStep) string {
	var code, sig int32
	for _, s := range steps {
		if s.GetEndTime() == nil || neverStarted(s) {
			continue
		}
		c, g := exitParts(s.GetExitCode(), s.ExitSignal)
		if c > code || c == code && g > sig {
			code, sig = c, g
		}
	}
	return fmt.Sprintf("%d:%d", code, sig)
}

// derivedOf is the DerivedExitCode "code:signal" of j's run run (nil: its
// current run): as the scheduler kept it (keptDerived), else, for a record
// from before, from the run's job steps (asked once per command:
// derivedExitCode). ok is false when neither says.
func (c *cmd) derivedOf(ctx context.Context, j *loomv1.Job, run *loomv1.JobRun, lookups *stepLookups) (string, bool) {
	if d, ok := keptDerived(j, run); ok {
		return d, true
	}
	if steps, ok := c.runSteps(ctx, j, run, lookups); ok {
		return derivedExitCode(steps), true
	}
	return "", false
}

// keptDerived is the DerivedExitCode "code:signal" the scheduler kept of j's
// run run (nil: its current run) over every step that ended, the steps the
// run no longer keeps (past its newest 256) included; ok is false for a
// record from before it was kept, whose job steps then say
// (derivedExitCode).
func keptDerived(j *loomv1.Job, run *loomv1.JobRun) (string, bool) {
	code, sig := j.DerivedExitCode, j.DerivedExitSignal
	if run != nil {
		code, sig = run.DerivedExitCode, run.DerivedExitSignal
	}
	if code == nil {
		return "", false
	}
	var g int32
	if sig != nil {
		g = *sig
	}
	return fmt.Sprintf("%d:%d", *code, g), true
}

// jobSteps lists every job step of job's run attempt (0: its current run),
// page by page.
func (c *cmd) jobSteps(ctx context.Context, job string, attempt int32) ([]*loomv1.JobStep, error) {
	var steps []*loomv1.JobStep
	err := paging.Each(func(token string) (string, error) {
		cctx, cancel := c.call(ctx)
		defer cancel()
		resp, err := c.jobsClient().ListJobSteps(cctx, &loomv1.ListJobStepsRequest{Parent: job, PageToken: token, Attempt: attempt})
		steps = append(steps, resp.GetSteps()...)
		return resp.GetNextPageToken(), err
	})
	return steps, err
}

// stepName is a job step's JobName in sacct: its program's base name.
func stepName(s *loomv1.JobStep) string {
	if len(s.GetCommand()) > 0 {
		return filepath.Base(s.GetCommand()[0])
	}
	return strconv.Itoa(int(s.GetStepId()))
}

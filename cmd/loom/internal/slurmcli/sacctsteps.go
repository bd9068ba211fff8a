package slurmcli

import (
	"context"
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
func (c *cmd) stepRows(ctx context.Context, j *loomv1.Job, run *loomv1.JobRun, id string, lookups *int) []sacctRow {
	if *lookups >= maxStepLookups {
		return nil
	}
	*lookups++
	steps, err := c.jobSteps(ctx, j.GetName(), run.GetAttempt())
	if err != nil {
		return nil
	}
	var out []sacctRow
	for _, s := range steps {
		if s.GetStartTime() == nil && (s.GetState() == loomv1.JobState_PENDING || s.GetState() == loomv1.JobState_CANCELLED) {
			// A step that waited for resources and never started, as
			// Slurm's accounting never sees it.
			continue
		}
		step := strconv.Itoa(int(s.GetStepId()))
		out = append(out, sacctRow{job: j, id: id + "." + step, step: step, jstep: s, run: run})
	}
	return out
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

package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/paging"
	"github.com/loom-ml/loom/libs/resname"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/domain"
)

// stepCreateTimeout bounds how long CreateJobStep waits for the scheduler to
// record the step it asked for.
const stepCreateTimeout = 30 * time.Second

// CreateJobStep asks the scheduler to start a job step (srun inside an
// allocation) and waits until the scheduler has recorded it, so that the
// answer carries its step id, nodes and output directory. InvalidArgument
// for a bad request (naming the field), NotFound for an unknown job,
// FailedPrecondition in Slurm's words for a job that does not run. A retry
// with the same request_id returns the first call's step. A step whose CPUs
// or GPUs running steps hold is answered PENDING (reason "Requested nodes
// are busy"), and so is one asked for before the job's nodes have reported
// the allocation ready (reason "Prolog is still running": the batch host's
// agent runs the prolog checks): the scheduler starts it when they are
// free, or the nodes have reported, and GetJobStep shows it RUNNING then.
func (g *Gateway) CreateJobStep(ctx context.Context, req *loomv1.CreateJobStepRequest) (*loomv1.JobStep, error) {
	if err := domain.ValidateCreateJobStep(req); err != nil {
		return nil, err
	}
	ref, err := g.resolveJob(ctx, req.GetParent(), false)
	if err != nil {
		return nil, err
	}
	// srun --jobid into a job: its owner's (or a workload's own), or a
	// cluster administrator's (a step runs as the job's owner); anyone
	// else is refused as Slurm does (PermissionDenied, "Access/permission
	// denied"), or NotFound when PrivateData hides the job. Checked before
	// a replay, so a request id does not reveal another's step.
	j, caller, err := g.visibleJob(ctx, ref.name)
	if err != nil {
		return nil, err
	}
	if err := caller.CheckRunAs(j); err != nil {
		return nil, err
	}
	rid := req.GetRequestId()
	if rid == "" {
		rid = envelope.NewID()
	} else if s, err := g.findStep(ctx, ref.name, rid); err != nil || s != nil {
		return s, err
	}
	if err := domain.CheckCreateJobStep(j, req); err != nil {
		return nil, err
	}
	cmd := &eventsv1.CreateJobStep{Job: ref.name, Cluster: j.GetCluster(), RequestId: rid,
		Command: req.GetCommand(), Env: req.GetEnv(), WorkDir: req.GetWorkDir(), NodeCount: req.GetNodeCount(),
		Ntasks: req.GetNtasks(), NtasksPerNode: req.GetNtasksPerNode(), CpusPerTask: req.GetCpusPerTask(),
		KillOnBadExit: req.GetKillOnBadExit(), Input: req.GetInput(), Pty: req.GetPty(), PtyRows: req.GetPtyRows(), PtyCols: req.GetPtyCols(),
		GpusPerTask: req.GetGpusPerTask(), Nodelist: req.GetNodelist(), Exclude: req.GetExclude(), Relative: req.GetRelative(),
		Exact: req.GetExact(), Overlap: req.GetOverlap(), Gpus: req.GetGpus(), CpusPerGpu: req.GetCpusPerGpu(),
		GpuBindNone: req.GetGpuBindNone(), Distribution: req.GetDistribution(),
		GpusPerNode: req.GetGpusPerNode(), GpusInherited: req.GetGpusInherited(), NoGpus: req.GetNoGpus(),
		AllocationCpus: req.GetAllocationCpus()}
	if err := g.emitCommands(ctx, j.GetCluster(), cmd); err != nil {
		return nil, fmt.Errorf("create a step of %s: %w", ref.name, err)
	}
	return g.awaitStep(ctx, ref.name, rid)
}

// awaitStep polls the scheduler until it shows the step created with request
// id rid, or the job stops running (FailedPrecondition), or the wait ends.
func (g *Gateway) awaitStep(ctx context.Context, job, rid string) (*loomv1.JobStep, error) {
	ctx, cancel := context.WithTimeout(ctx, stepCreateTimeout)
	defer cancel()
	delay := 10 * time.Millisecond
	for {
		s, err := g.findStep(ctx, job, rid)
		if err != nil || s != nil {
			return s, err
		}
		j, err := g.job(ctx, job)
		if err != nil {
			return nil, err
		}
		if !domain.TakesSteps(j.GetState()) {
			// The scheduler takes steps only while the job runs: it will
			// not take this one. One last look, in case it did just before.
			if s, err := g.findStep(ctx, job, rid); err != nil || s != nil {
				return s, err
			}
			return nil, domain.CheckCreateJobStep(j, &loomv1.CreateJobStepRequest{})
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("the scheduler did not record the step of %s in time: %w", job, errs.Unavailable)
		case <-g.stop:
			return nil, ErrStopping
		case <-time.After(delay):
		}
		delay = min(2*delay, 200*time.Millisecond)
	}
}

// findStep returns the step of job created with request id rid, or nil.
func (g *Gateway) findStep(ctx context.Context, job, rid string) (*loomv1.JobStep, error) {
	var found *loomv1.JobStep
	err := paging.Each(func(token string) (string, error) {
		resp, err := g.own.Jobs.ListJobSteps(ctx, &loomv1.ListJobStepsRequest{Parent: job, PageSize: paging.MaxSize, PageToken: token})
		for _, s := range resp.GetSteps() {
			if s.GetRequestId() == rid {
				found = s
			}
		}
		return resp.GetNextPageToken(), err
	})
	if err != nil {
		if isNotFound(err) {
			return nil, nil // accepted, not yet known to the scheduler
		}
		return nil, fmt.Errorf("ask the scheduler for the steps of %s: %w", job, err)
	}
	return found, nil
}

// GetJobStep reads one step of a job's current run from the scheduler
// ("projects/{p}/jobs/{id}/steps/{step}"; an array task may be named A_i).
func (g *Gateway) GetJobStep(ctx context.Context, req *loomv1.GetJobStepRequest) (*loomv1.JobStep, error) {
	st, err := resname.ParseStep(req.GetName())
	if err != nil {
		return nil, errs.Invalid("name", "%v", err)
	}
	job, step := st.Job.String(), st.ID
	ref, err := g.resolveJob(ctx, job, false)
	if err != nil {
		return nil, err
	}
	if _, _, err := g.visibleJob(ctx, ref.name); err != nil {
		return nil, err
	}
	s, err := g.own.Jobs.GetJobStep(ctx, &loomv1.GetJobStepRequest{Name: resname.StepIn(ref.name, step)})
	if isNotFound(err) {
		return nil, asOwnNotFound(err)
	}
	if err != nil {
		return nil, fmt.Errorf("ask the scheduler for step %d of %s: %w", step, ref.name, err)
	}
	return s, nil
}

// asOwnNotFound is the scheduler's NotFound answered as the gateway's own:
// its message ("step 5 of job …: not found") is what the caller needs, not
// the call that carried it.
func asOwnNotFound(err error) error {
	return status.Error(codes.NotFound, status.Convert(err).Message())
}

// ListJobSteps lists one page (AIP-158; the scheduler pages) of the steps of
// one of a job's runs (attempt; 0, its current run), by step id (none for a
// job the scheduler has not seen yet; NotFound for an attempt it has not had).
func (g *Gateway) ListJobSteps(ctx context.Context, req *loomv1.ListJobStepsRequest) (*loomv1.ListJobStepsResponse, error) {
	if req.GetAttempt() < 0 {
		return nil, errs.Invalid("attempt", "must not be negative, got %d (0 is the job's current run)", req.GetAttempt())
	}
	ref, err := g.resolveJob(ctx, req.GetParent(), false)
	if err != nil {
		if _, perr := resname.ParseJob(req.GetParent()); perr != nil {
			return nil, errs.Invalid("parent", "%v", perr)
		}
		return nil, err
	}
	if _, _, err := g.visibleJob(ctx, ref.name); err != nil {
		return nil, err
	}
	resp, err := g.own.Jobs.ListJobSteps(ctx, &loomv1.ListJobStepsRequest{Parent: ref.name,
		PageSize: req.GetPageSize(), PageToken: req.GetPageToken(), Attempt: req.GetAttempt()})
	if err == nil {
		return resp, nil
	}
	if !isNotFound(err) {
		return nil, fmt.Errorf("ask the scheduler for the steps of %s: %w", ref.name, err)
	}
	// Pruned by the scheduler: the steps the history kept of the job.
	if h, herr := g.repo.HistoryJob(ctx, ref.name); herr == nil {
		return g.historySteps(ctx, h, req)
	} else if !errors.Is(herr, errs.NotFound) {
		return nil, herr
	}
	if req.GetAttempt() > 0 {
		return nil, asOwnNotFound(err)
	}
	if _, err := g.repo.AcceptedJob(ctx, ref.name); err != nil {
		return nil, err
	}
	return &loomv1.ListJobStepsResponse{}, nil
}

// historySteps serves ListJobSteps of a job the scheduler pruned from the
// steps the history kept: those of the attempt asked for (0: the job's last
// run), paged as the scheduler pages; NotFound for an attempt it never had.
func (g *Gateway) historySteps(ctx context.Context, j *loomv1.Job, req *loomv1.ListJobStepsRequest) (*loomv1.ListJobStepsResponse, error) {
	last := int32(0)
	for _, r := range j.GetRuns() {
		last = max(last, r.GetAttempt())
	}
	want := req.GetAttempt()
	if want == 0 {
		want = last
	}
	if want > last {
		return nil, fmt.Errorf("job %s has had no attempt %d: %w", j.GetName(), want, errs.NotFound)
	}
	all, err := g.repo.HistorySteps(ctx, j.GetName())
	if err != nil {
		return nil, err
	}
	var steps []*loomv1.JobStep
	for _, s := range all {
		if s.GetAttempt() == want {
			steps = append(steps, s)
		}
	}
	page, next, err := paging.Ordered(req, steps)
	if err != nil {
		return nil, err
	}
	return &loomv1.ListJobStepsResponse{Steps: page, NextPageToken: next}, nil
}

// CancelJobStep asks the scheduler to kill a step's tasks on every node
// (scancel JOB.STEP), or with signal only to signal them, and returns the
// step as the scheduler has it. NotFound for an unknown job or step,
// FailedPrecondition ("Job/step already completing or completed") for a
// step that has ended.
func (g *Gateway) CancelJobStep(ctx context.Context, req *loomv1.CancelJobStepRequest) (*loomv1.JobStep, error) {
	st, err := resname.ParseStep(req.GetName())
	if err != nil {
		return nil, errs.Invalid("name", "%v", err)
	}
	job, step := st.Job.String(), st.ID
	signal, err := domain.ParseCancelSignal(req.GetSignal())
	if err != nil {
		return nil, err
	}
	ref, err := g.resolveJob(ctx, job, false)
	if err != nil {
		return nil, err
	}
	// scancel JOB.STEP: the job's owner (or its own workload) or an
	// administrator, as for the job.
	j, caller, err := g.visibleJob(ctx, ref.name)
	if err != nil {
		return nil, err
	}
	if err := caller.CheckAccess(j); err != nil {
		return nil, err
	}
	s, err := g.own.Jobs.GetJobStep(ctx, &loomv1.GetJobStepRequest{Name: resname.StepIn(ref.name, step)})
	if isNotFound(err) {
		return nil, asOwnNotFound(err)
	}
	if err != nil {
		return nil, fmt.Errorf("ask the scheduler for step %d of %s: %w", step, ref.name, err)
	}
	if s.GetState().Terminal() {
		return nil, &domain.Precondition{Msg: domain.MsgAlreadyDone}
	}
	// user: who cancels (sacct's "CANCELLED by UID" on the step's row),
	// the authenticated caller, never a field of the request.
	cmd := &eventsv1.CancelJobStep{Job: ref.name, Cluster: j.GetCluster(), StepId: step, Signal: signal, User: caller.User}
	if err := g.emitCommands(ctx, j.GetCluster(), cmd); err != nil {
		return nil, fmt.Errorf("cancel step %d of %s: %w", step, ref.name, err)
	}
	g.opt.Log.InfoContext(ctx, "job step cancel requested", "job", ref.name, "step", step, "signal", signal)
	return s, nil
}

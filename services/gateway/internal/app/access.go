package app

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/authz"
	"github.com/loom-ml/loom/services/gateway/internal/domain"
)

// The gateway's authorization has two halves. The interceptors of package
// authz decide, per method, who may call at all and in which project (the
// caller's role there). What depends on the resource is decided here, from
// the same principal (auth.FromContext): whose job it is, whether
// PrivateData hides it, whether its environment may be shown, and whether
// a hold is an admin hold.

// callerIn is the call's principal as a caller in project (an id).
func callerIn(ctx context.Context, project string) domain.Caller {
	p, _ := auth.FromContext(ctx)
	return domain.CallerOf(p, project)
}

// callerOf is the call's principal as a caller in the project of the
// resource named name ("projects/{p}/...").
func callerOf(ctx context.Context, name string) domain.Caller {
	project, _ := authz.ProjectOf(name)
	return callerIn(ctx, project)
}

// jobNotFound is the answer for a job the caller may not see: the same as
// for a job that does not exist (Repo.AcceptedJob's), so that hidden jobs
// cannot be told from missing ones; marked errs.Hide, so that the audit
// trail records it as the refusal it is.
func jobNotFound(name string) error { return errs.Hide(fmt.Errorf("job %s: %w", name, errs.NotFound)) }

// visibleJob reads the job named name (canonical) and returns it with the
// caller, or jobNotFound when the caller may not see it (another
// workload's job; another user's with PrivateData "jobs").
func (g *Gateway) visibleJob(ctx context.Context, name string) (*loomv1.Job, domain.Caller, error) {
	c := callerOf(ctx, name)
	j, err := g.job(ctx, name)
	if err != nil {
		return nil, c, err
	}
	if !c.Sees(j, g.opt.PrivateJobs) {
		return nil, c, jobNotFound(name)
	}
	return j, c, nil
}

// CheckJobReadable refuses what GetJob would refuse for name: a malformed
// name, a job that does not exist, one the caller may not see. The REST and
// gRPC ports call it before ReadJobLogs, so that a caller who may not see
// a job cannot read its logs.
func (g *Gateway) CheckJobReadable(ctx context.Context, name string) error {
	ref, err := g.resolveJob(ctx, name, false)
	if err != nil {
		return err
	}
	_, _, err = g.visibleJob(ctx, ref.name)
	return err
}

// route makes the command event for msg (key: the resource it is about)
// and stamps the call's principal on it (envelope.Event.Principal), which
// consumers trust instead of any user field of the payload.
func route(ctx context.Context, key string, msg proto.Message) (envelope.Event, error) {
	ev, err := envelope.Route(key, Source, msg)
	if err != nil {
		return ev, err
	}
	if p, ok := auth.FromContext(ctx); ok {
		ev.Principal = p.Name
	}
	return ev, nil
}

// errRequestIDTaken answers a request_id another caller used: the first
// call's job or operation is theirs, and is not shown (nor does the answer
// say whose it is).
func errRequestIDTaken(rid string) error {
	return fmt.Errorf("request_id %q was used by another caller for another request; send a new one: %w", rid, errs.AlreadyExists)
}

// replayedJob is the job of an earlier SubmitJob with the same request id,
// as the caller may see it: a retry by its owner (or an administrator of
// its project) gets it; anyone else errRequestIDTaken.
func replayedJob(ctx context.Context, j *loomv1.Job, rid string) (*loomv1.Job, error) {
	c := callerOf(ctx, j.GetName())
	if !c.Admin && !c.Owns(j) {
		return nil, errRequestIDTaken(rid)
	}
	return c.Present(j), nil
}

// submitAs decides the owner of a job submitted by the caller (Job.user):
// the principal's user. A request naming another user is refused
// (PermissionDenied naming job.user) unless the caller is a cluster
// administrator, as only root may sbatch --uid in Slurm. A workload's jobs
// are its owner's.
func submitAs(c domain.Caller, requested string) (string, error) {
	switch {
	case requested == "" || requested == c.User:
		if c.User == "" {
			return "", fmt.Errorf("%s: job.user: %s has no user to own a job: %w", domain.MsgAccessDenied, c.Name, errs.PermissionDenied)
		}
		return c.User, nil
	case c.ClusterAdmin && c.Workload == "":
		return requested, nil
	}
	return "", fmt.Errorf("%s: job.user: %s may not submit a job as %q (the job is the caller's; only cluster administrators submit as another user): %w",
		domain.MsgAccessDenied, c.Name, requested, errs.PermissionDenied)
}

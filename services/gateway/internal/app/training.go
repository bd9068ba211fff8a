package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/paging"
	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/trainingspec"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/adapters"
	"github.com/loom-ml/loom/services/gateway/internal/authz"
	"github.com/loom-ml/loom/services/gateway/internal/domain"
)

// Serverless training (loom.training.v1.TrainingService): creates are
// validated here (libs/trainingspec), get their ids from the job id counter
// (a block for a tuning job or pipeline, docs/training.md) and become
// commands on loom.training.commands.v1 with the caller's principal, in one Apply with
// the request record, the accepted record and the audit record, once
// counted against the project's quotas (training_quota.go); cancel and
// delete are checked against the resource as the training service has it
// (owner or admin, not already ended) and become commands; reads go to the
// training service's internal gRPC, and a resource accepted that it has not
// read yet is answered as accepted (readTraining).

// training is the training service's client, or an Unavailable error when
// the gateway was started without one.
func (g *Gateway) training() (trainingv1.TrainingServiceClient, error) {
	if g.own.Training == nil {
		return nil, fmt.Errorf("the gateway has no training service to ask (-training-addr): %w", errs.Unavailable)
	}
	return g.own.Training, nil
}

// fromTraining names the training service in an error it answered with,
// keeping its code, so that a user tells "the training service is down"
// from "the gateway is down".
func fromTraining(what string, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("%s: %w", what, err)
	}
	switch st.Code() {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Unimplemented:
		return status.Errorf(codes.Unavailable, "%s: the training service did not answer (%s); check that it runs (loom up starts it) and that the gateway's -training-addr (LOOM_GATEWAY_TRAINING_ADDR) points at it", what, st.Message())
	}
	return err
}

// trainingOwner decides the owner of a training resource the caller
// creates: the principal's user, as for jobs (submitAs). A request naming
// another user in field is refused unless the caller is a cluster
// administrator.
func trainingOwner(c domain.Caller, field, requested string) (string, error) {
	switch {
	case requested == "" || requested == c.User:
		if c.User == "" {
			return "", fmt.Errorf("%s: %s: %s has no user to own it: %w", domain.MsgAccessDenied, field, c.Name, errs.PermissionDenied)
		}
		return c.User, nil
	case c.ClusterAdmin && c.Workload == "":
		return requested, nil
	}
	return "", fmt.Errorf("%s: %s: %s may not create it as %q (it is the caller's; only cluster administrators name another owner): %w",
		domain.MsgAccessDenied, field, c.Name, requested, errs.PermissionDenied)
}

// trainingResource is what the three creates have in common.
type trainingResource interface {
	proto.Message
	GetName() string
	GetUser() string
}

// trainingCreate describes one of the three creates to createTraining.
type trainingCreate[T trainingResource] struct {
	kind, rid, parent string
	// fp is the request's fingerprint (domain.RequestFingerprint): a
	// request_id sent again with another request is refused.
	fp string
	// field is the request's resource field ("custom_job").
	field    string
	resource T
	validate func(T) error
	// ids is how many job ids it reserves.
	ids    func(T) (int, error)
	accept func(T, domain.TrainingParent, int64, string, time.Time) T
	// command is the command that hands the accepted resource over.
	command func(T, int) proto.Message
	// get reads the resource from the training service; fresh decodes a
	// stored one.
	get   func(context.Context, string) (T, error)
	fresh func() T
}

// createTraining validates, reserves ids (or finds the request id's first
// call), and stores the request record with the command and the audit
// record in one Apply. A retry with the same request id answers the first
// call's resource (as the training service has it now, else as accepted)
// to its owner or a project admin; the same request id with another
// request (another spec, another parent) is InvalidArgument naming
// request_id (domain.RequestIDReused).
func createTraining[T trainingResource](ctx context.Context, g *Gateway, c trainingCreate[T]) (T, error) {
	var zero T
	if err := domain.CheckRequestID(c.rid); err != nil {
		return zero, err
	}
	parent, err := domain.ParseTrainingParent("parent", c.parent)
	if err != nil {
		return zero, err
	}
	if err := c.validate(c.resource); err != nil {
		return zero, err
	}
	n, err := c.ids(c.resource)
	if err != nil {
		return zero, err
	}
	if err := g.checkPersistentResource(ctx, parent.Project, c.field, c.resource); err != nil {
		return zero, err
	}
	if err := g.checkParentModel(ctx, parent.Project, c.field, c.resource); err != nil {
		return zero, err
	}
	owner, err := trainingOwner(callerIn(ctx, parent.Project), c.field+".user", c.resource.GetUser())
	if err != nil {
		return zero, err
	}
	// The quotas (training_quota.go). A retry of an accepted request
	// answers what it got then, even when the quota is full now.
	commit, done, err := g.reserveTraining(ctx, parent.Project, owner, c.field, c.resource)
	if err != nil {
		if c.rid != "" {
			if first, rerr := g.repo.Request(ctx, c.kind, c.rid); rerr == nil {
				return replayTraining(ctx, c, []byte(first))
			}
		}
		return zero, err
	}
	ok := false
	defer func() { done(ok) }()
	replay, id, err := g.repo.ReplayOrJobIDs(ctx, c.kind, c.rid, n)
	if err != nil {
		return zero, err
	}
	if replay != "" {
		return replayTraining(ctx, c, []byte(replay))
	}
	commit(id)
	accepted := c.accept(c.resource, parent, id, owner, g.now())
	tx := &store.Tx{}
	if err := adapters.PutTrainingRequest(tx, c.kind, c.rid, accepted, c.fp); err != nil {
		return zero, err
	}
	b, err := proto.Marshal(accepted)
	if err != nil {
		return zero, fmt.Errorf("encode %s: %w", accepted.GetName(), err)
	}
	adapters.PutTrainingAccepted(tx, parent.Project, accepted.GetName(), b)
	ev, err := route(ctx, resname.Project{ID: parent.Project}.String(), c.command(accepted, n))
	if err != nil {
		return zero, err
	}
	tx.Emit(ev)
	audited := auditInline(ctx, tx)
	applied, err := g.repo.Apply(ctx, adapters.RequestInboxID(c.kind, c.rid), tx)
	if err != nil {
		return zero, fmt.Errorf("create %s: %w", accepted.GetName(), err)
	}
	if !applied {
		// Another call with the same request id won the race.
		first, err := g.repo.Request(ctx, c.kind, c.rid)
		if err != nil {
			return zero, err
		}
		return replayTraining(ctx, c, []byte(first))
	}
	ok = true
	audited()
	g.opt.Log.InfoContext(ctx, "training resource accepted", "name", accepted.GetName(), "user", owner, "job_ids", n)
	return accepted, nil
}

// checkPersistentResource refuses a persistent_resource_id that names no
// cluster of the project (InvalidArgument naming the field), so that a
// typo fails now rather than as a FAILED job later. A cluster being
// deleted is the training service's to judge.
func (g *Gateway) checkPersistentResource(ctx context.Context, project, field string, m proto.Message) error {
	var spec *trainingv1.CustomJobSpec
	path := field
	switch r := m.(type) {
	case *trainingv1.CustomJob:
		spec, path = r.GetJobSpec(), field+".job_spec"
	case *trainingv1.HyperparameterTuningJob:
		spec, path = r.GetTrialJobSpec(), field+".trial_job_spec"
	case *trainingv1.TrainingPipeline:
		custom, tuning, err := trainingspec.PipelineTask(r)
		if err != nil {
			return nil // refused by validation already
		}
		spec, path = custom, field+".training_task_inputs"
		if tuning != nil {
			spec, path = tuning.GetTrialJobSpec(), field+".training_task_inputs.trial_job_spec"
		}
	}
	id := spec.GetPersistentResourceId()
	if id == "" {
		return nil
	}
	name := resname.Cluster{Project: project, ID: id}.String()
	_, err := g.own.Clusters.GetCluster(ctx, &loomv1.GetClusterRequest{Name: name})
	switch {
	case err == nil:
		return nil
	case isNotFound(err):
		return errs.Invalid(path+".persistent_resource_id", "no cluster %s in project %s (see loom clusters list); leave it out to run on a cluster made for the job", id, project)
	}
	return fmt.Errorf("ask the provisioner for %s: %w", name, err)
}

// checkParentModel refuses a pipeline's parent_model that the registry
// would refuse only when the training has ended: a model of another
// project (trainingspec.CheckPipelineModel) or one the registry does not
// have, InvalidArgument naming the field, so that the mistake is found
// before hours of training. When the registry cannot answer, the create
// goes on (logged): the registry judges the upload again at the end, and
// a registry down must not stop training.
func (g *Gateway) checkParentModel(ctx context.Context, project, field string, m proto.Message) error {
	p, ok := m.(*trainingv1.TrainingPipeline)
	if !ok || p.GetParentModel() == "" {
		return nil
	}
	if err := trainingspec.CheckPipelineModel(project, p); err != nil {
		return err
	}
	if g.own.Models == nil {
		return nil
	}
	_, err := g.own.Models.GetModel(ctx, &loomv1.GetModelRequest{Name: p.GetParentModel()})
	switch {
	case err == nil:
		return nil
	case isNotFound(err):
		return errs.Invalid(field+".parent_model", "no model %s in project %s (see loom models list): name one that exists, or leave parent_model out to register a new model", p.GetParentModel(), project)
	}
	g.opt.Log.WarnContext(ctx, "could not ask the registry for a pipeline's parent model; the registry judges it at the upload",
		"parent_model", p.GetParentModel(), "err", err)
	return nil
}

// trainingReplayLookup bounds a replay's read of the current state.
const trainingReplayLookup = 2 * time.Second

// replayTraining answers a retried create from its stored request record:
// the caller must be the first call's owner or an administrator of its
// project, and the request the first one (its fingerprint).
func replayTraining[T trainingResource](ctx context.Context, c trainingCreate[T], rec []byte) (T, error) {
	var zero T
	stored, fp := adapters.SplitTrainingRequest(rec)
	first := c.fresh()
	if err := proto.Unmarshal(stored, first); err != nil || first.GetName() == "" {
		return zero, fmt.Errorf("request %s %s: its record is not a %s: %w", c.kind, c.rid, c.field, errs.AlreadyExists)
	}
	caller := callerOf(ctx, first.GetName())
	if !caller.Admin && (caller.User == "" || caller.User != first.GetUser()) {
		return zero, errRequestIDTaken(c.rid)
	}
	if err := domain.RequestIDReused(c.rid, fp, c.fp); err != nil {
		return zero, err
	}
	lctx, cancel := context.WithTimeout(ctx, trainingReplayLookup)
	defer cancel()
	if now, err := c.get(lctx, first.GetName()); err == nil {
		return now, nil
	}
	return first, nil
}

// CreateCustomJob accepts a CustomJob: its id is the next job id (its
// scheduler job's), it is the caller's, and CreateCustomJob goes to the
// training service.
func (g *Gateway) CreateCustomJob(ctx context.Context, req *trainingv1.CreateCustomJobRequest) (*trainingv1.CustomJob, error) {
	return createTraining(ctx, g, trainingCreate[*trainingv1.CustomJob]{
		kind: adapters.RequestCreateCustomJob, rid: req.GetRequestId(), fp: domain.RequestFingerprint(req), parent: req.GetParent(), field: "custom_job",
		resource: req.GetCustomJob(), validate: trainingspec.ValidateCustomJob,
		ids:    func(*trainingv1.CustomJob) (int, error) { return 1, nil },
		accept: domain.AcceptCustomJob,
		command: func(j *trainingv1.CustomJob, _ int) proto.Message {
			return &eventsv1.CreateCustomJob{CustomJob: j}
		},
		get: func(ctx context.Context, name string) (*trainingv1.CustomJob, error) {
			return g.GetCustomJob(ctx, &trainingv1.GetCustomJobRequest{Name: name})
		},
		fresh: func() *trainingv1.CustomJob { return &trainingv1.CustomJob{} },
	})
}

// CreateHyperparameterTuningJob accepts a tuning job: it reserves
// 1+max_trial_count job ids (trial k's CustomJob is id+k).
func (g *Gateway) CreateHyperparameterTuningJob(ctx context.Context, req *trainingv1.CreateHyperparameterTuningJobRequest) (*trainingv1.HyperparameterTuningJob, error) {
	return createTraining(ctx, g, trainingCreate[*trainingv1.HyperparameterTuningJob]{
		kind: adapters.RequestCreateTuningJob, rid: req.GetRequestId(), fp: domain.RequestFingerprint(req), parent: req.GetParent(), field: "hyperparameter_tuning_job",
		resource: req.GetHyperparameterTuningJob(), validate: trainingspec.ValidateHyperparameterTuningJob,
		ids: func(j *trainingv1.HyperparameterTuningJob) (int, error) {
			return 1 + int(j.GetMaxTrialCount()), nil
		},
		accept: domain.AcceptTuningJob,
		command: func(j *trainingv1.HyperparameterTuningJob, _ int) proto.Message {
			return &eventsv1.CreateHyperparameterTuningJob{TuningJob: j}
		},
		get: func(ctx context.Context, name string) (*trainingv1.HyperparameterTuningJob, error) {
			return g.GetHyperparameterTuningJob(ctx, &trainingv1.GetHyperparameterTuningJobRequest{Name: name})
		},
		fresh: func() *trainingv1.HyperparameterTuningJob { return &trainingv1.HyperparameterTuningJob{} },
	})
}

// CreateTrainingPipeline accepts a pipeline: it reserves 2 job ids (a
// custom task) or 2+max_trial_count (a tuning task), carried in the
// command as reserved_job_ids.
func (g *Gateway) CreateTrainingPipeline(ctx context.Context, req *trainingv1.CreateTrainingPipelineRequest) (*trainingv1.TrainingPipeline, error) {
	return createTraining(ctx, g, trainingCreate[*trainingv1.TrainingPipeline]{
		kind: adapters.RequestCreatePipeline, rid: req.GetRequestId(), fp: domain.RequestFingerprint(req), parent: req.GetParent(), field: "training_pipeline",
		resource: req.GetTrainingPipeline(), validate: trainingspec.ValidateTrainingPipeline,
		ids:    domain.PipelineJobIDs,
		accept: domain.AcceptPipeline,
		command: func(p *trainingv1.TrainingPipeline, n int) proto.Message {
			return &eventsv1.CreateTrainingPipeline{Pipeline: p, ReservedJobIds: int64(n)}
		},
		get: func(ctx context.Context, name string) (*trainingv1.TrainingPipeline, error) {
			return g.GetTrainingPipeline(ctx, &trainingv1.GetTrainingPipelineRequest{Name: name})
		},
		fresh: func() *trainingv1.TrainingPipeline { return &trainingv1.TrainingPipeline{} },
	})
}

// ---- reads ----

// checkList validates a List request's parent, filter (which may name
// only keys: trainingspec.ParseFilterFor) and page size.
func checkList(parent, filter string, keys trainingspec.FilterKeys, pageSize int32) error {
	var v errs.Validator
	if _, err := domain.ParseTrainingParent("parent", parent); err != nil {
		return err
	}
	if _, err := trainingspec.ParseFilterFor(filter, keys); err != nil {
		var inv *errs.InvalidError
		if errors.As(err, &inv) {
			for _, x := range inv.Violations {
				v.Add(x.Field, "%s", x.Reason)
			}
		}
	}
	paging.CheckSize(&v, pageSize)
	return v.Err()
}

// GetCustomJob reads a CustomJob from the training service (as accepted
// while the service has not read its create: readTraining).
func (g *Gateway) GetCustomJob(ctx context.Context, req *trainingv1.GetCustomJobRequest) (*trainingv1.CustomJob, error) {
	parent, _, err := domain.ParseTrainingName("name", domain.CollectionCustomJobs, req.GetName())
	if err != nil {
		return nil, err
	}
	t, err := g.training()
	if err != nil {
		return nil, err
	}
	j, err := readTraining(ctx, g, parent.Project, req.GetName(), func(ctx context.Context) (*trainingv1.CustomJob, error) {
		return t.GetCustomJob(ctx, req)
	})
	if err != nil {
		return nil, fromTraining("get "+req.GetName(), err)
	}
	shown, ok := trainingVisible(ctx, g, j)
	if !ok {
		return nil, trainingHidden(req.GetName())
	}
	return shown, nil
}

// ListCustomJobs lists CustomJobs (filter and pages as the training
// service applies them; the filter is checked here first).
func (g *Gateway) ListCustomJobs(ctx context.Context, req *trainingv1.ListCustomJobsRequest) (*trainingv1.ListCustomJobsResponse, error) {
	if err := checkList(req.GetParent(), req.GetFilter(), trainingspec.JobFilterKeys, req.GetPageSize()); err != nil {
		return nil, err
	}
	t, err := g.training()
	if err != nil {
		return nil, err
	}
	resp, err := t.ListCustomJobs(ctx, req)
	if err != nil {
		return nil, fromTraining("list custom jobs of "+req.GetParent(), err)
	}
	kept := resp.CustomJobs[:0]
	for _, m := range resp.GetCustomJobs() {
		if shown, ok := trainingVisible(ctx, g, m); ok {
			kept = append(kept, shown)
		}
	}
	resp.CustomJobs = kept
	return resp, nil
}

// GetHyperparameterTuningJob reads a tuning job (with its trials) from the
// training service (as accepted while the service has not read its
// create).
func (g *Gateway) GetHyperparameterTuningJob(ctx context.Context, req *trainingv1.GetHyperparameterTuningJobRequest) (*trainingv1.HyperparameterTuningJob, error) {
	parent, _, err := domain.ParseTrainingName("name", domain.CollectionTuningJobs, req.GetName())
	if err != nil {
		return nil, err
	}
	t, err := g.training()
	if err != nil {
		return nil, err
	}
	j, err := readTraining(ctx, g, parent.Project, req.GetName(), func(ctx context.Context) (*trainingv1.HyperparameterTuningJob, error) {
		return t.GetHyperparameterTuningJob(ctx, req)
	})
	if err != nil {
		return nil, fromTraining("get "+req.GetName(), err)
	}
	shown, ok := trainingVisible(ctx, g, j)
	if !ok {
		return nil, trainingHidden(req.GetName())
	}
	return shown, nil
}

// ListHyperparameterTuningJobs lists tuning jobs from the training service.
func (g *Gateway) ListHyperparameterTuningJobs(ctx context.Context, req *trainingv1.ListHyperparameterTuningJobsRequest) (*trainingv1.ListHyperparameterTuningJobsResponse, error) {
	if err := checkList(req.GetParent(), req.GetFilter(), trainingspec.JobFilterKeys, req.GetPageSize()); err != nil {
		return nil, err
	}
	t, err := g.training()
	if err != nil {
		return nil, err
	}
	resp, err := t.ListHyperparameterTuningJobs(ctx, req)
	if err != nil {
		return nil, fromTraining("list tuning jobs of "+req.GetParent(), err)
	}
	kept := resp.HyperparameterTuningJobs[:0]
	for _, m := range resp.GetHyperparameterTuningJobs() {
		if shown, ok := trainingVisible(ctx, g, m); ok {
			kept = append(kept, shown)
		}
	}
	resp.HyperparameterTuningJobs = kept
	return resp, nil
}

// GetTrainingPipeline reads a pipeline from the training service (as
// accepted while the service has not read its create).
func (g *Gateway) GetTrainingPipeline(ctx context.Context, req *trainingv1.GetTrainingPipelineRequest) (*trainingv1.TrainingPipeline, error) {
	parent, _, err := domain.ParseTrainingName("name", domain.CollectionPipelines, req.GetName())
	if err != nil {
		return nil, err
	}
	t, err := g.training()
	if err != nil {
		return nil, err
	}
	p, err := readTraining(ctx, g, parent.Project, req.GetName(), func(ctx context.Context) (*trainingv1.TrainingPipeline, error) {
		return t.GetTrainingPipeline(ctx, req)
	})
	if err != nil {
		return nil, fromTraining("get "+req.GetName(), err)
	}
	shown, ok := trainingVisible(ctx, g, p)
	if !ok {
		return nil, trainingHidden(req.GetName())
	}
	return shown, nil
}

// ListTrainingPipelines lists pipelines from the training service.
func (g *Gateway) ListTrainingPipelines(ctx context.Context, req *trainingv1.ListTrainingPipelinesRequest) (*trainingv1.ListTrainingPipelinesResponse, error) {
	if err := checkList(req.GetParent(), req.GetFilter(), trainingspec.PipelineFilterKeys, req.GetPageSize()); err != nil {
		return nil, err
	}
	t, err := g.training()
	if err != nil {
		return nil, err
	}
	resp, err := t.ListTrainingPipelines(ctx, req)
	if err != nil {
		return nil, fromTraining("list training pipelines of "+req.GetParent(), err)
	}
	kept := resp.TrainingPipelines[:0]
	for _, m := range resp.GetTrainingPipelines() {
		if shown, ok := trainingVisible(ctx, g, m); ok {
			kept = append(kept, shown)
		}
	}
	resp.TrainingPipelines = kept
	return resp, nil
}

// ---- cancel and delete ----

// trainingTarget is what cancel and delete need to know of a resource.
type trainingTarget struct {
	name, owner, state string
	ended              bool
}

// trainingCommand checks that the caller may act on target (its owner or
// an administrator of its project: PermissionDenied otherwise) and writes
// cmd (CancelTraining or DeleteTraining, made with the caller's user and
// admin flag) through the outbox with the caller's principal.
func (g *Gateway) trainingCommand(ctx context.Context, verb string, target trainingTarget, mk func(user string, admin bool) proto.Message) error {
	parent, _ := authz.ProjectOf(target.name)
	caller := callerIn(ctx, parent)
	if !caller.Admin && (caller.User == "" || caller.User != target.owner) {
		return fmt.Errorf("%s: %s is %s's; only its owner or an administrator of project %s may %s it: %w",
			domain.MsgAccessDenied, target.name, target.owner, parent, verb, errs.PermissionDenied)
	}
	switch {
	case verb == "cancel" && target.ended:
		return fmt.Errorf("%s already ended (%s): nothing to cancel: %w", target.name, target.state, errs.FailedPrecondition)
	case verb == "delete" && !target.ended:
		return fmt.Errorf("%s is %s: cancel it first, then delete it once it has ended: %w", target.name, target.state, errs.FailedPrecondition)
	}
	ev, err := route(ctx, resname.Project{ID: parent}.String(), mk(caller.User, caller.Admin))
	if err != nil {
		return err
	}
	tx := &store.Tx{}
	tx.Emit(ev)
	if verb == "delete" {
		// A deleted resource is not answered from its accepted record.
		if n, _, err := domain.ParseTrainingName("name", collectionOf(target.name), target.name); err == nil {
			adapters.DelTrainingAccepted(tx, n.Project, target.name)
		}
	}
	if _, err := g.repo.Apply(ctx, "", tx); err != nil {
		return fmt.Errorf("%s %s: %w", verb, target.name, err)
	}
	g.opt.Log.InfoContext(ctx, "training "+verb+" requested", "name", target.name, "by", caller.Name)
	return nil
}

func cancelCmd(name string) func(string, bool) proto.Message {
	return func(user string, admin bool) proto.Message {
		return &eventsv1.CancelTraining{Name: name, User: user, Admin: admin}
	}
}

func deleteCmd(name string) func(string, bool) proto.Message {
	return func(user string, admin bool) proto.Message {
		return &eventsv1.DeleteTraining{Name: name, User: user, Admin: admin}
	}
}

func customTarget(name string, j *trainingv1.CustomJob) trainingTarget {
	return trainingTarget{name: name, owner: j.GetUser(), state: j.GetState().String(), ended: domain.JobStateEnded(j.GetState())}
}

func tuningTarget(name string, j *trainingv1.HyperparameterTuningJob) trainingTarget {
	return trainingTarget{name: name, owner: j.GetUser(), state: j.GetState().String(), ended: domain.JobStateEnded(j.GetState())}
}

func pipelineTarget(name string, p *trainingv1.TrainingPipeline) trainingTarget {
	return trainingTarget{name: name, owner: p.GetUser(), state: p.GetState().String(), ended: domain.PipelineStateEnded(p.GetState())}
}

// CancelCustomJob asks the training service to cancel a CustomJob (it
// goes CANCELLING, then CANCELLED).
func (g *Gateway) CancelCustomJob(ctx context.Context, req *trainingv1.CancelCustomJobRequest) (*trainingv1.Empty, error) {
	j, err := g.GetCustomJob(ctx, &trainingv1.GetCustomJobRequest{Name: req.GetName()})
	if err != nil {
		return nil, err
	}
	return &trainingv1.Empty{}, g.trainingCommand(ctx, "cancel", customTarget(req.GetName(), j), cancelCmd(req.GetName()))
}

// DeleteCustomJob asks the training service to delete an ended CustomJob.
func (g *Gateway) DeleteCustomJob(ctx context.Context, req *trainingv1.DeleteCustomJobRequest) (*trainingv1.Empty, error) {
	j, err := g.GetCustomJob(ctx, &trainingv1.GetCustomJobRequest{Name: req.GetName()})
	if err != nil {
		return nil, err
	}
	return &trainingv1.Empty{}, g.trainingCommand(ctx, "delete", customTarget(req.GetName(), j), deleteCmd(req.GetName()))
}

// CancelHyperparameterTuningJob asks the training service to cancel a
// tuning job (and its running trials).
func (g *Gateway) CancelHyperparameterTuningJob(ctx context.Context, req *trainingv1.CancelHyperparameterTuningJobRequest) (*trainingv1.Empty, error) {
	j, err := g.GetHyperparameterTuningJob(ctx, &trainingv1.GetHyperparameterTuningJobRequest{Name: req.GetName()})
	if err != nil {
		return nil, err
	}
	return &trainingv1.Empty{}, g.trainingCommand(ctx, "cancel", tuningTarget(req.GetName(), j), cancelCmd(req.GetName()))
}

// DeleteHyperparameterTuningJob asks the training service to delete an
// ended tuning job.
func (g *Gateway) DeleteHyperparameterTuningJob(ctx context.Context, req *trainingv1.DeleteHyperparameterTuningJobRequest) (*trainingv1.Empty, error) {
	j, err := g.GetHyperparameterTuningJob(ctx, &trainingv1.GetHyperparameterTuningJobRequest{Name: req.GetName()})
	if err != nil {
		return nil, err
	}
	return &trainingv1.Empty{}, g.trainingCommand(ctx, "delete", tuningTarget(req.GetName(), j), deleteCmd(req.GetName()))
}

// CancelTrainingPipeline asks the training service to cancel a pipeline.
func (g *Gateway) CancelTrainingPipeline(ctx context.Context, req *trainingv1.CancelTrainingPipelineRequest) (*trainingv1.Empty, error) {
	p, err := g.GetTrainingPipeline(ctx, &trainingv1.GetTrainingPipelineRequest{Name: req.GetName()})
	if err != nil {
		return nil, err
	}
	return &trainingv1.Empty{}, g.trainingCommand(ctx, "cancel", pipelineTarget(req.GetName(), p), cancelCmd(req.GetName()))
}

// DeleteTrainingPipeline asks the training service to delete an ended
// pipeline.
func (g *Gateway) DeleteTrainingPipeline(ctx context.Context, req *trainingv1.DeleteTrainingPipelineRequest) (*trainingv1.Empty, error) {
	p, err := g.GetTrainingPipeline(ctx, &trainingv1.GetTrainingPipelineRequest{Name: req.GetName()})
	if err != nil {
		return nil, err
	}
	return &trainingv1.Empty{}, g.trainingCommand(ctx, "delete", pipelineTarget(req.GetName(), p), deleteCmd(req.GetName()))
}

package app

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/paging"
	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/trainingspec"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/domain"
)

// Training creates are commands: the training service reads them from
// Kafka a moment after the gateway answered. Two things bridge that gap.
//
// Read-your-write: the create's Apply also writes the resource as accepted
// (adapters.PutTrainingAccepted). A Get that the training service answers
// NotFound for a resource the gateway accepted waits for it at most
// TrainingCatchUp, then answers the accepted resource (QUEUED). A Cancel
// goes through that Get, and its command follows the create's on the same
// key (the project), so the training service reads the create first.
//
// Quotas: a create counts the project's training resources in flight (the
// training service's, plus those accepted and not read yet) against the
// training quota, and their GPUs plus the project's clusters' against the
// GPU quota; its scheduler jobs count against the pending-jobs quota and
// the user's MaxSubmitJobs as SubmitJob's do (reserveJobs).

const (
	// TrainingCatchUp bounds how long a Get of a resource the gateway
	// accepted waits for the training service to read its create.
	TrainingCatchUp = 2 * time.Second
	// trainingCatchUpPoll is how often it asks meanwhile.
	trainingCatchUpPoll = 50 * time.Millisecond
	// TrainingAcceptedKeep is how long an accepted record stands in for a
	// resource the training service does not have: past it, the training
	// service refused the command or has been down that long, and the
	// record is dropped (Get answers NotFound, the quota stops counting it).
	TrainingAcceptedKeep = 10 * time.Minute
	// trainingCountPages bounds the pages a quota count reads per kind.
	trainingCountPages = 100
)

// Filters of the resources in flight (not ended), as the training service
// filters its lists.
const (
	jobsInFlight = `NOT (state=JOB_STATE_SUCCEEDED OR state=JOB_STATE_FAILED OR state=JOB_STATE_CANCELLED` +
		` OR state=JOB_STATE_EXPIRED OR state=JOB_STATE_PARTIALLY_SUCCEEDED)`
	pipelinesInFlight = `NOT (state=PIPELINE_STATE_SUCCEEDED OR state=PIPELINE_STATE_FAILED OR state=PIPELINE_STATE_CANCELLED)`
)

// collectionOf is the collection in a training resource's name.
func collectionOf(name string) string {
	parts := strings.Split(name, "/")
	if len(parts) < 2 {
		return ""
	}
	return parts[len(parts)-2]
}

// decodeAccepted decodes an accepted record of name.
func decodeAccepted(name string, b []byte) (trainingResource, error) {
	var m trainingResource
	switch collectionOf(name) {
	case domain.CollectionCustomJobs:
		m = &trainingv1.CustomJob{}
	case domain.CollectionTuningJobs:
		m = &trainingv1.HyperparameterTuningJob{}
	case domain.CollectionPipelines:
		m = &trainingv1.TrainingPipeline{}
	default:
		return nil, fmt.Errorf("accepted record %s: not a training resource", name)
	}
	if err := proto.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("accepted record %s: %w", name, err)
	}
	return m, nil
}

// createTimeOf is a training resource's create_time.
func createTimeOf(m proto.Message) time.Time {
	switch r := m.(type) {
	case *trainingv1.CustomJob:
		return r.GetCreateTime().AsTime()
	case *trainingv1.HyperparameterTuningJob:
		return r.GetCreateTime().AsTime()
	case *trainingv1.TrainingPipeline:
		return r.GetCreateTime().AsTime()
	}
	return time.Time{}
}

// readTraining reads name from the training service with get; when it
// answers NotFound for a resource the gateway accepted (within
// TrainingAcceptedKeep), it asks again until TrainingCatchUp has passed,
// then answers the resource as accepted.
func readTraining[T trainingResource](ctx context.Context, g *Gateway, project, name string, get func(context.Context) (T, error)) (T, error) {
	m, err := get(ctx)
	if !isNotFound(err) {
		return m, err
	}
	b, aerr := g.repo.TrainingAccepted(ctx, project, name)
	if aerr != nil {
		return m, err // not accepted here (or unreadable): the service's NotFound stands
	}
	acc, derr := decodeAccepted(name, b)
	accepted, ok := acc.(T)
	if derr != nil || !ok || g.now().Sub(createTimeOf(accepted)) > TrainingAcceptedKeep {
		return m, err
	}
	deadline := time.NewTimer(TrainingCatchUp)
	defer deadline.Stop()
	tick := time.NewTicker(trainingCatchUpPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return accepted, nil
		case <-deadline.C:
			return accepted, nil
		case <-tick.C:
		}
		if m, err := get(ctx); !isNotFound(err) {
			return m, err
		}
	}
}

// trainingJobs is the scheduler jobs a training resource of id runs at once
// (counted against the pending-jobs quota and MaxSubmitJobs) and the id of
// the first: a CustomJob's own; a tuning job's parallel trials from id+1; a
// pipeline's task from id+1 (its tuning job's trials from id+2).
func trainingJobs(m proto.Message) (n int64, offset int64) {
	switch r := m.(type) {
	case *trainingv1.CustomJob:
		return 1, 0
	case *trainingv1.HyperparameterTuningJob:
		return int64(max(r.GetParallelTrialCount(), 1)), 1
	case *trainingv1.TrainingPipeline:
		if _, tuning, err := trainingspec.PipelineTask(r); err == nil && tuning != nil {
			return int64(max(tuning.GetParallelTrialCount(), 1)), 2
		}
		return 1, 1
	}
	return 0, 0
}

// trainingID is the numeric id at the end of a training resource's name.
func trainingID(name string) int64 {
	id, _ := strconv.ParseInt(name[strings.LastIndexByte(name, '/')+1:], 10, 64)
	return id
}

// inFlight is a training resource in flight, as the count sees it.
type inFlight struct {
	name string
	id   int64
	// children is how many ids after id are its own (trials, a
	// pipeline's job).
	children int64
	gpus     int64
	m        proto.Message
}

// trainingUsage counts project's training resources in flight: those the
// training service lists (every location), then those the gateway
// accepted that it has not read yet. It returns the ids of the CustomJobs
// in flight that run on their own cluster (cj-{id}), which the GPU quota
// counts through their resource, not as clusters. Accepted records the
// service has taken over, or older than TrainingAcceptedKeep, are dropped.
// With the training service unreachable only the accepted records count.
func (g *Gateway) trainingUsage(ctx context.Context, project string) (domain.TrainingUsage, map[int64]bool, error) {
	var (
		all       []inFlight
		ephemeral = map[int64]bool{}
		listed    = map[string]bool{}
		reachable = g.own.Training != nil
	)
	parent := "projects/" + project + "/locations/-"
	if reachable {
		t := g.own.Training
		type page struct {
			items []proto.Message
			next  string
		}
		lists := []func(string) (page, error){
			func(tok string) (page, error) {
				r, err := t.ListCustomJobs(ctx, &trainingv1.ListCustomJobsRequest{Parent: parent, Filter: jobsInFlight, PageSize: paging.MaxSize, PageToken: tok})
				var p page
				for _, j := range r.GetCustomJobs() {
					p.items = append(p.items, j)
				}
				p.next = r.GetNextPageToken()
				return p, err
			},
			func(tok string) (page, error) {
				r, err := t.ListHyperparameterTuningJobs(ctx, &trainingv1.ListHyperparameterTuningJobsRequest{Parent: parent, Filter: jobsInFlight, PageSize: paging.MaxSize, PageToken: tok})
				var p page
				for _, j := range r.GetHyperparameterTuningJobs() {
					p.items = append(p.items, j)
				}
				p.next = r.GetNextPageToken()
				return p, err
			},
			func(tok string) (page, error) {
				r, err := t.ListTrainingPipelines(ctx, &trainingv1.ListTrainingPipelinesRequest{Parent: parent, Filter: pipelinesInFlight, PageSize: paging.MaxSize, PageToken: tok})
				var p page
				for _, j := range r.GetTrainingPipelines() {
					p.items = append(p.items, j)
				}
				p.next = r.GetNextPageToken()
				return p, err
			},
		}
	lists:
		for _, list := range lists {
			tok := ""
			for range trainingCountPages {
				p, err := list(tok)
				if err != nil {
					if isUnavailable(err) {
						reachable = false
						all, ephemeral, listed = nil, map[int64]bool{}, map[string]bool{}
						g.opt.Log.WarnContext(ctx, "training quota: the training service did not answer; counting the accepted resources only", "project", project, "err", err)
						break lists
					}
					return domain.TrainingUsage{}, nil, fmt.Errorf("ask the training service for the training resources of %s to count against the quota: %w", project, err)
				}
				for _, m := range p.items {
					all = append(all, g.inFlightOf(m))
				}
				if tok = p.next; tok == "" {
					break
				}
			}
		}
		for _, r := range all {
			listed[r.name] = true
			if j, ok := r.m.(*trainingv1.CustomJob); ok && j.GetJobSpec().GetPersistentResourceId() == "" {
				ephemeral[r.id] = true
			}
		}
	}
	// Accepted, not listed: not read yet (counted), or read and ended
	// already, or refused (dropped).
	var u domain.TrainingUsage
	acc, err := g.repo.TrainingAcceptedAll(ctx, project)
	if err != nil {
		return u, nil, err
	}
	var drop []string
	for name, b := range acc {
		m, err := decodeAccepted(name, b)
		switch {
		case err != nil, listed[name], g.now().Sub(createTimeOf(m)) > TrainingAcceptedKeep:
			drop = append(drop, name)
			continue
		case reachable && g.trainingHas(ctx, name):
			drop = append(drop, name) // read by the service, ended since
			continue
		}
		all = append(all, g.inFlightOf(m))
		u.Accepted++
	}
	if err := g.repo.DropTrainingAccepted(ctx, project, drop...); err != nil {
		g.opt.Log.WarnContext(ctx, "training quota: drop accepted records", "project", project, "err", err)
	}
	// Top-level only: a tuning job's trials and a pipeline's job and
	// trials hold the ids after their parent's.
	for _, r := range all {
		child := false
		for _, p := range all {
			if p.children > 0 && r.id > p.id && r.id <= p.id+p.children {
				child = true
				break
			}
		}
		if !child {
			u.InFlight++
			u.GPUs += r.gpus
		}
	}
	return u, ephemeral, nil
}

// inFlightOf is m as the count sees it.
func (g *Gateway) inFlightOf(m proto.Message) inFlight {
	r := inFlight{m: m, gpus: domain.TrainingGPUs(m)}
	switch x := m.(type) {
	case *trainingv1.CustomJob:
		r.name = x.GetName()
	case *trainingv1.HyperparameterTuningJob:
		r.name, r.children = x.GetName(), int64(x.GetMaxTrialCount())
	case *trainingv1.TrainingPipeline:
		r.name = x.GetName()
		if n, err := domain.PipelineJobIDs(x); err == nil {
			r.children = int64(n) - 1
		}
	}
	r.id = trainingID(r.name)
	return r
}

// trainingHas reports whether the training service has name (a NotFound,
// or no answer, is false).
func (g *Gateway) trainingHas(ctx context.Context, name string) bool {
	t := g.own.Training
	var err error
	switch collectionOf(name) {
	case domain.CollectionCustomJobs:
		_, err = t.GetCustomJob(ctx, &trainingv1.GetCustomJobRequest{Name: name})
	case domain.CollectionTuningJobs:
		_, err = t.GetHyperparameterTuningJob(ctx, &trainingv1.GetHyperparameterTuningJobRequest{Name: name})
	case domain.CollectionPipelines:
		_, err = t.GetTrainingPipeline(ctx, &trainingv1.GetTrainingPipelineRequest{Name: name})
	}
	return err == nil
}

// clusterGPUs counts the GPUs of project's clusters (DELETED ones
// excepted) but the own clusters of the CustomJobs in ephemeral, which the
// training count holds.
func (g *Gateway) clusterGPUs(ctx context.Context, project string, ephemeral map[int64]bool) (int64, error) {
	parent := resname.Project{ID: project}.String()
	var gpus int64
	err := paging.Each(func(token string) (string, error) {
		resp, err := g.own.Clusters.ListClusters(ctx, &loomv1.ListClustersRequest{Parent: parent, PageSize: paging.MaxSize, PageToken: token})
		for _, c := range resp.GetClusters() {
			n, perr := resname.ParseCluster(c.GetName())
			if perr != nil || n.Project != project || c.GetStatus().GetState() == loomv1.Cluster_DELETED {
				continue
			}
			if id, ok := strings.CutPrefix(n.ID, "cj-"); ok {
				if x, err := strconv.ParseInt(id, 10, 64); err == nil && ephemeral[x] {
					continue
				}
			}
			gpus += domain.ClusterUsage(c).GPUs
		}
		return resp.GetNextPageToken(), err
	})
	if err != nil {
		return 0, fmt.Errorf("ask the provisioner for the clusters of %s to count against the GPU quota: %w", project, err)
	}
	return gpus, nil
}

// reserveTraining checks a training create of m (not yet named: name is
// its collection for messages) by user against project's quotas: the
// training resources in flight and the GPUs (CheckTrainingQuota), then its
// scheduler jobs against the pending-jobs quota and the user's
// MaxSubmitJobs (reserveJobs). g.trainingQuota is held from the count to
// the create's Apply, so that this instance's creates are counted one
// after the other; the returned done releases it, and with ok=false takes
// the job reservation out again.
func (g *Gateway) reserveTraining(ctx context.Context, project, user, what string, m proto.Message) (commit func(id int64), done func(ok bool), err error) {
	g.trainingQuota.Lock()
	unlock := func(bool) { g.trainingQuota.Unlock() }
	q, src := g.quota.Quotas.For(project)
	gpus := domain.TrainingGPUs(m)
	// Counted even without a training quota: the count is what drops the
	// accepted records the training service has taken over.
	usage, ephemeral, err := g.trainingUsage(ctx, project)
	if err != nil {
		unlock(false)
		return nil, nil, err
	}
	var cg int64
	if q.GPUs > 0 && gpus > 0 {
		if cg, err = g.clusterGPUs(ctx, project, ephemeral); err != nil {
			unlock(false)
			return nil, nil, err
		}
	}
	if err := domain.CheckTrainingQuota(project, what, q, src, usage, cg, gpus); err != nil {
		unlock(false)
		return nil, nil, err
	}
	n, offset := trainingJobs(m)
	r, err := g.reserveJobs(ctx, project, user, n, false)
	if err != nil {
		unlock(false)
		return nil, nil, err
	}
	return func(id int64) { r.commit(id + offset) }, func(ok bool) {
		if !ok {
			r.release()
		}
		unlock(ok)
	}, nil
}

// isUnavailable reports whether err says the training service did not
// answer (as fromTraining tells it).
func isUnavailable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Unimplemented:
		return true
	}
	return false
}

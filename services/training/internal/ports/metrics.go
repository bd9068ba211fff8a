package ports

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/series"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	"github.com/loom-ml/loom/services/training/internal/app"
	"github.com/loom-ml/loom/services/training/internal/domain"
)

// Metrics serves loom.training.v1.MetricsService from the series store:
// every job's series, whichever parent names it.
type Metrics struct {
	trainingv1.UnimplementedMetricsServiceServer
	app   *app.App
	store *series.Store
}

// NewMetrics returns the MetricsService of a (which resolves CustomJobs and
// trials to their jobs) over st.
func NewMetrics(a *app.App, st *series.Store) *Metrics { return &Metrics{app: a, store: st} }

// JobOf resolves a metrics parent to the scheduler job whose series it
// reads: a job is itself, a CustomJob is the job of its id, a trial the
// job of its CustomJob. known says whether the training service knows the
// job is there (a CustomJob's or a trial's: it holds them); of a plain
// job it knows nothing (the scheduler does), and that is for the caller to
// judge when the job has no series (ListMetrics, ReadMetrics). A CustomJob,
// tuning job or trial the service does not hold is NotFound (a wrong
// location, an id of nothing); so is a job whose id is a tuning job's or
// a pipeline's, which run no job of their own, saying where their
// metrics are. A malformed parent is InvalidArgument naming the field.
func (m *Metrics) JobOf(parent string) (job string, known bool, err error) {
	switch p := strings.Split(parent, "/"); {
	case len(p) == 4 && p[2] == "jobs":
		j, err := resname.ParseJob(parent)
		if err != nil {
			return "", false, errs.Invalid("parent", "%v", err)
		}
		job := j.String()
		name, ok := m.app.JobResource(job)
		if !ok {
			return job, false, nil
		}
		n, err := domain.ParseName(name, "")
		switch {
		case err != nil:
			return "", false, fmt.Errorf("job %s: its resource %s: %w", job, name, err)
		case n.Collection == domain.CustomJobs:
			return job, true, nil
		case n.Collection == domain.TuningJobs:
			return "", false, fmt.Errorf("%w: %s is the id of tuning job %s, which runs no job of its own: its metrics are its trials' (list them with `loom hptuning trials %d --location %s`, then read a trial's with `loom metrics %s/trials/TRIAL`)",
				errs.NotFound, job, name, n.ID, n.Location, name)
		}
		where := fmt.Sprintf("see `loom pipelines get %d --location %s`", n.ID, n.Location)
		if pl, err := m.app.GetPipeline(name); err == nil {
			meta := pl.GetTrainingTaskMetadata().GetStructValue().GetFields()
			if cj := meta["backingCustomJob"].GetStringValue(); cj != "" {
				where = fmt.Sprintf("its custom job's: `loom metrics %s`", cj)
			} else if tj := meta["backingHyperparameterTuningJob"].GetStringValue(); tj != "" {
				where = fmt.Sprintf("its tuning job's trials': `loom hptuning trials %s`, then `loom metrics %s/trials/TRIAL`", tj, tj)
			}
		}
		return "", false, fmt.Errorf("%w: %s is the id of training pipeline %s, which runs no job of its own: its metrics are %s",
			errs.NotFound, job, name, where)
	case len(p) == 6 && p[4] == domain.CustomJobs:
		n, err := domain.ParseName(parent, domain.CustomJobs)
		if err != nil {
			return "", false, errs.Invalid("parent", "%v", err)
		}
		if _, err := m.app.GetCustomJob(parent); err != nil {
			if errors.Is(err, errs.NotFound) {
				return "", false, fmt.Errorf("%w: no custom job %d in location %s of project %s (list them with `loom jobs custom list --location %s`; a plain job's metrics are under projects/%s/jobs/%d)",
					errs.NotFound, n.ID, n.Location, n.Project, n.Location, n.Project, n.ID)
			}
			return "", false, err
		}
		return n.Job(), true, nil
	case len(p) == 8 && p[4] == domain.TuningJobs && p[6] == "trials":
		tuning := strings.Join(p[:6], "/")
		if _, err := domain.ParseName(tuning, domain.TuningJobs); err != nil {
			return "", false, errs.Invalid("parent", "%v", err)
		}
		t, err := m.app.GetTuningJob(tuning)
		if err != nil {
			return "", false, err
		}
		for _, tr := range t.GetTrials() {
			if tr.GetId() == p[7] && tr.GetCustomJob() != "" {
				n, err := domain.ParseName(tr.GetCustomJob(), domain.CustomJobs)
				if err != nil {
					return "", false, err
				}
				return n.Job(), true, nil
			}
		}
		return "", false, fmt.Errorf("trial %s of %s (or its CustomJob): %w", p[7], tuning, errs.NotFound)
	}
	return "", false, errs.Invalid("parent", "%q is not projects/{p}/jobs/{id}, projects/{p}/locations/{l}/customJobs/{id} or projects/{p}/locations/{l}/hyperparameterTuningJobs/{id}/trials/{trial}", parent)
}

// errNoSuchJob is the answer for a plain job (not known to the service)
// that has no series: it may not exist, which only the scheduler knows.
// The gateway asks it before it passes this on (a job it knows is
// answered as one without metrics), so the message is the user's.
func errNoSuchJob(job string) error {
	return fmt.Errorf("%w: no job %s is known, and it has reported no metrics (list the project's jobs with `loom jobs list`)", errs.NotFound, job)
}

// ListMetrics lists the parent's series (none yet: an empty list). A plain
// job with none is NotFound (errNoSuchJob): the caller, who can ask the
// scheduler, tells "no such job" from "no metrics yet".
func (m *Metrics) ListMetrics(ctx context.Context, req *trainingv1.ListMetricsRequest) (*trainingv1.ListMetricsResponse, error) {
	job, known, err := m.JobOf(req.GetParent())
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	list, err := m.store.List(ctx, job)
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	if len(list) == 0 && !known {
		return nil, errs.ToStatus(errNoSuchJob(job))
	}
	out := &trainingv1.ListMetricsResponse{Series: make([]*trainingv1.Series, 0, len(list))}
	for _, s := range list {
		out.Series = append(out.Series, &trainingv1.Series{Metric: s.Metric, Count: s.Count, First: s.First, Last: s.Last, Min: s.Min, Max: s.Max})
	}
	return out, nil
}

// ReadMetrics reads one series, downsampled (series.Store.Read). A metric
// the job has no series of is NotFound; when the job is a plain one with
// no series at all, the answer is ListMetrics' errNoSuchJob.
func (m *Metrics) ReadMetrics(ctx context.Context, req *trainingv1.ReadMetricsRequest) (*trainingv1.ReadMetricsResponse, error) {
	job, known, err := m.JobOf(req.GetParent())
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	pts, total, err := m.store.Read(ctx, job, req.GetMetric(), series.Query{Points: int(req.GetPoints()),
		Range: series.Range{From: req.From, To: req.To}})
	if errors.Is(err, errs.NotFound) && !known {
		// Only on this path: whether the job has any series at all.
		if list, lerr := m.store.List(ctx, job); lerr == nil && len(list) == 0 {
			err = errNoSuchJob(job)
		}
	}
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	out := &trainingv1.ReadMetricsResponse{Metric: req.GetMetric(), Total: int64(total), Points: make([]*trainingv1.Point, len(pts))}
	for i, p := range pts {
		out.Points[i] = &trainingv1.Point{Step: p.Step, Value: p.Value}
		if !p.Time.IsZero() {
			out.Points[i].Time = timestamppb.New(p.Time)
		}
	}
	return out, nil
}

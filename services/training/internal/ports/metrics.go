package ports

import (
	"context"
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
// job of its CustomJob. An unknown tuning job or trial is NotFound; a
// malformed parent InvalidArgument naming the field.
func (m *Metrics) JobOf(parent string) (string, error) {
	switch p := strings.Split(parent, "/"); {
	case len(p) == 4 && p[2] == "jobs":
		j, err := resname.ParseJob(parent)
		if err != nil {
			return "", errs.Invalid("parent", "%v", err)
		}
		return j.String(), nil
	case len(p) == 6 && p[4] == domain.CustomJobs:
		n, err := domain.ParseName(parent, domain.CustomJobs)
		if err != nil {
			return "", errs.Invalid("parent", "%v", err)
		}
		return n.Job(), nil
	case len(p) == 8 && p[4] == domain.TuningJobs && p[6] == "trials":
		tuning := strings.Join(p[:6], "/")
		if _, err := domain.ParseName(tuning, domain.TuningJobs); err != nil {
			return "", errs.Invalid("parent", "%v", err)
		}
		t, err := m.app.GetTuningJob(tuning)
		if err != nil {
			return "", err
		}
		for _, tr := range t.GetTrials() {
			if tr.GetId() == p[7] && tr.GetCustomJob() != "" {
				n, err := domain.ParseName(tr.GetCustomJob(), domain.CustomJobs)
				if err != nil {
					return "", err
				}
				return n.Job(), nil
			}
		}
		return "", fmt.Errorf("trial %s of %s (or its CustomJob): %w", p[7], tuning, errs.NotFound)
	}
	return "", errs.Invalid("parent", "%q is not projects/{p}/jobs/{id}, projects/{p}/locations/{l}/customJobs/{id} or projects/{p}/locations/{l}/hyperparameterTuningJobs/{id}/trials/{trial}", parent)
}

// ListMetrics lists the parent's series (none yet: an empty list).
func (m *Metrics) ListMetrics(ctx context.Context, req *trainingv1.ListMetricsRequest) (*trainingv1.ListMetricsResponse, error) {
	job, err := m.JobOf(req.GetParent())
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	list, err := m.store.List(ctx, job)
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	out := &trainingv1.ListMetricsResponse{Series: make([]*trainingv1.Series, 0, len(list))}
	for _, s := range list {
		out.Series = append(out.Series, &trainingv1.Series{Metric: s.Metric, Count: s.Count, First: s.First, Last: s.Last, Min: s.Min, Max: s.Max})
	}
	return out, nil
}

// ReadMetrics reads one series, downsampled (series.Store.Read).
func (m *Metrics) ReadMetrics(ctx context.Context, req *trainingv1.ReadMetricsRequest) (*trainingv1.ReadMetricsResponse, error) {
	job, err := m.JobOf(req.GetParent())
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	pts, total, err := m.store.Read(ctx, job, req.GetMetric(), series.Query{Points: int(req.GetPoints()),
		Range: series.Range{From: req.From, To: req.To}})
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

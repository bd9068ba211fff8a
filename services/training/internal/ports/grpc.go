// Package ports exposes the training service: its internal gRPC read API
// (loom.training.v1.TrainingService's Get and List RPCs; writes are
// commands on loom.training.commands.v1 and answer Unimplemented here).
package ports

import (
	"github.com/loom-ml/loom/libs/trainingspec"

	"context"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/paging"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	"github.com/loom-ml/loom/services/training/internal/app"
)

// Server serves loom.training.v1.TrainingService's reads from memory.
type Server struct {
	trainingv1.UnimplementedTrainingServiceServer
	app *app.App
}

// NewServer returns the read API over a.
func NewServer(a *app.App) *Server { return &Server{app: a} }

var errWrite = status.Error(codes.Unimplemented,
	"the training service serves reads only: creates, cancels and deletes are commands the gateway writes on loom.training.commands.v1")

// CreateCustomJob is a write: Unimplemented here.
func (s *Server) CreateCustomJob(context.Context, *trainingv1.CreateCustomJobRequest) (*trainingv1.CustomJob, error) {
	return nil, errWrite
}

// CancelCustomJob is a write: Unimplemented here.
func (s *Server) CancelCustomJob(context.Context, *trainingv1.CancelCustomJobRequest) (*trainingv1.Empty, error) {
	return nil, errWrite
}

// DeleteCustomJob is a write: Unimplemented here.
func (s *Server) DeleteCustomJob(context.Context, *trainingv1.DeleteCustomJobRequest) (*trainingv1.Empty, error) {
	return nil, errWrite
}

// CreateHyperparameterTuningJob is a write: Unimplemented here.
func (s *Server) CreateHyperparameterTuningJob(context.Context, *trainingv1.CreateHyperparameterTuningJobRequest) (*trainingv1.HyperparameterTuningJob, error) {
	return nil, errWrite
}

// CancelHyperparameterTuningJob is a write: Unimplemented here.
func (s *Server) CancelHyperparameterTuningJob(context.Context, *trainingv1.CancelHyperparameterTuningJobRequest) (*trainingv1.Empty, error) {
	return nil, errWrite
}

// DeleteHyperparameterTuningJob is a write: Unimplemented here.
func (s *Server) DeleteHyperparameterTuningJob(context.Context, *trainingv1.DeleteHyperparameterTuningJobRequest) (*trainingv1.Empty, error) {
	return nil, errWrite
}

// CreateTrainingPipeline is a write: Unimplemented here.
func (s *Server) CreateTrainingPipeline(context.Context, *trainingv1.CreateTrainingPipelineRequest) (*trainingv1.TrainingPipeline, error) {
	return nil, errWrite
}

// CancelTrainingPipeline is a write: Unimplemented here.
func (s *Server) CancelTrainingPipeline(context.Context, *trainingv1.CancelTrainingPipelineRequest) (*trainingv1.Empty, error) {
	return nil, errWrite
}

// DeleteTrainingPipeline is a write: Unimplemented here.
func (s *Server) DeleteTrainingPipeline(context.Context, *trainingv1.DeleteTrainingPipelineRequest) (*trainingv1.Empty, error) {
	return nil, errWrite
}

// GetCustomJob returns one CustomJob; NotFound when unknown.
func (s *Server) GetCustomJob(_ context.Context, req *trainingv1.GetCustomJobRequest) (*trainingv1.CustomJob, error) {
	j, err := s.app.GetCustomJob(req.GetName())
	return j, errs.ToStatus(err)
}

// GetHyperparameterTuningJob returns one tuning job with its trials.
func (s *Server) GetHyperparameterTuningJob(_ context.Context, req *trainingv1.GetHyperparameterTuningJobRequest) (*trainingv1.HyperparameterTuningJob, error) {
	j, err := s.app.GetTuningJob(req.GetName())
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	trainingspec.BoundTuningJobAnswer(j, MaxTuningJobAnswer)
	return j, nil
}

// GetTrainingPipeline returns one pipeline.
func (s *Server) GetTrainingPipeline(_ context.Context, req *trainingv1.GetTrainingPipelineRequest) (*trainingv1.TrainingPipeline, error) {
	p, err := s.app.GetPipeline(req.GetName())
	return p, errs.ToStatus(err)
}

// ListCustomJobs lists one page (AIP-158) of the parent's CustomJobs that
// match the filter, by id (numerically: 2 before 10).
func (s *Server) ListCustomJobs(_ context.Context, req *trainingv1.ListCustomJobsRequest) (*trainingv1.ListCustomJobsResponse, error) {
	all, err := s.app.ListCustomJobs(req.GetParent())
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	items, err := keep(req.GetFilter(), trainingspec.JobFilterKeys, all, func(j *trainingv1.CustomJob) fields {
		return fields{state: j.GetState().String(), displayName: j.GetDisplayName(), labels: j.GetLabels(), created: j.GetCreateTime().AsTime()}
	})
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	page, next, err := paging.List(req, items, byID((*trainingv1.CustomJob).GetName))
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	return &trainingv1.ListCustomJobsResponse{CustomJobs: page, NextPageToken: next}, nil
}

// ListHyperparameterTuningJobs lists one page of the parent's tuning jobs
// that match the filter, by id (numerically: 2 before 10).
func (s *Server) ListHyperparameterTuningJobs(_ context.Context, req *trainingv1.ListHyperparameterTuningJobsRequest) (*trainingv1.ListHyperparameterTuningJobsResponse, error) {
	all, err := s.app.ListTuningJobs(req.GetParent())
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	items, err := keep(req.GetFilter(), trainingspec.JobFilterKeys, all, func(j *trainingv1.HyperparameterTuningJob) fields {
		return fields{state: j.GetState().String(), displayName: j.GetDisplayName(), labels: j.GetLabels(), created: j.GetCreateTime().AsTime()}
	})
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	// Each study bounded as Get bounds it (the items are the app's copies):
	// a page is cut by its encoded size, but its first item always goes in,
	// and one huge study made the whole list ResourceExhausted.
	for _, j := range items {
		trainingspec.BoundTuningJobAnswer(j, MaxTuningJobAnswer)
	}
	page, next, err := paging.List(req, items, byID((*trainingv1.HyperparameterTuningJob).GetName))
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	return &trainingv1.ListHyperparameterTuningJobsResponse{HyperparameterTuningJobs: page, NextPageToken: next}, nil
}

// ListTrainingPipelines lists one page of the parent's pipelines that match
// the filter, by name.
func (s *Server) ListTrainingPipelines(_ context.Context, req *trainingv1.ListTrainingPipelinesRequest) (*trainingv1.ListTrainingPipelinesResponse, error) {
	all, err := s.app.ListPipelines(req.GetParent())
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	items, err := keep(req.GetFilter(), trainingspec.PipelineFilterKeys, all, func(p *trainingv1.TrainingPipeline) fields {
		return fields{state: p.GetState().String(), displayName: p.GetDisplayName(), labels: p.GetLabels(), created: p.GetCreateTime().AsTime()}
	})
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	page, next, err := paging.List(req, items, byID((*trainingv1.TrainingPipeline).GetName))
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	return &trainingv1.ListTrainingPipelinesResponse{TrainingPipelines: page, NextPageToken: next}, nil
}

// fields are what a list filter may name of a resource.
type fields struct {
	state, displayName string
	labels             map[string]string
	created            time.Time
}

// lookup is the filter's view of f: state, display_name, labels.<k>,
// create_time (RFC 3339).
func (f fields) lookup(key string) (string, bool) {
	switch key {
	case "state":
		return f.state, true
	case "display_name", "displayName":
		return f.displayName, true
	case "create_time", "createTime":
		return f.created.UTC().Format(time.RFC3339Nano), true
	}
	if k, ok := strings.CutPrefix(key, "labels."); ok {
		v, ok := f.labels[k]
		return v, ok
	}
	return "", false
}

// keep returns the items that match filter, which may name only keys (a
// filter that names anything else is InvalidArgument, not an empty list).
func keep[T any](filter string, keys trainingspec.FilterKeys, items []T, of func(T) fields) ([]T, error) {
	if strings.TrimSpace(filter) == "" {
		return items, nil
	}
	f, err := trainingspec.ParseFilterFor(filter, keys)
	if err != nil {
		return nil, err
	}
	var out []T
	for _, it := range items {
		if f.Match(of(it).lookup) {
			out = append(out, it)
		}
	}
	return out, nil
}

// byID is the list key of a resource named ".../{id}": its numeric id
// zero-padded (paging.IndexKey), so that lists come in id order, as
// creation made them, not as strings sort ("10" before "2").
func byID[T any](name func(T) string) func(T) string {
	return func(m T) string {
		n := name(m)
		id, err := strconv.ParseInt(n[strings.LastIndexByte(n, '/')+1:], 10, 64)
		if err != nil || id < 0 {
			return n // not a number: after every numbered one ("0…" < letters)
		}
		return paging.IndexKey(int(id))
	}
}

// MaxTuningJobAnswer bounds GetHyperparameterTuningJob's answer (encoded):
// trainingspec's, which the gateway's client of this service and the CLI's
// of the gateway take (under gRPC's default 4 MiB receive limit). A study
// past it is answered with its trials' measurements thinned, then trials
// left out, each said in the answer (trainingspec.BoundTuningJobAnswer).
const MaxTuningJobAnswer = trainingspec.MaxTuningJobAnswer

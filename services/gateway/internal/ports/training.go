package ports

import (
	"context"

	"google.golang.org/grpc"

	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	"github.com/loom-ml/loom/services/gateway/internal/app"
)

// RegisterTraining registers loom.training.v1.TrainingService of g on s.
// Each method's error goes through errs.ToStatus.
func RegisterTraining(s grpc.ServiceRegistrar, g *app.Gateway) {
	trainingv1.RegisterTrainingServiceServer(s, training{g: g})
}

type training struct {
	trainingv1.UnimplementedTrainingServiceServer
	g *app.Gateway
}

func (s training) CreateCustomJob(ctx context.Context, r *trainingv1.CreateCustomJobRequest) (*trainingv1.CustomJob, error) {
	return unary(s.g.CreateCustomJob(ctx, r))
}

func (s training) GetCustomJob(ctx context.Context, r *trainingv1.GetCustomJobRequest) (*trainingv1.CustomJob, error) {
	return unary(s.g.GetCustomJob(ctx, r))
}

func (s training) ListCustomJobs(ctx context.Context, r *trainingv1.ListCustomJobsRequest) (*trainingv1.ListCustomJobsResponse, error) {
	return unary(s.g.ListCustomJobs(ctx, r))
}

func (s training) CancelCustomJob(ctx context.Context, r *trainingv1.CancelCustomJobRequest) (*trainingv1.Empty, error) {
	return unary(s.g.CancelCustomJob(ctx, r))
}

func (s training) DeleteCustomJob(ctx context.Context, r *trainingv1.DeleteCustomJobRequest) (*trainingv1.Empty, error) {
	return unary(s.g.DeleteCustomJob(ctx, r))
}

func (s training) CreateHyperparameterTuningJob(ctx context.Context, r *trainingv1.CreateHyperparameterTuningJobRequest) (*trainingv1.HyperparameterTuningJob, error) {
	return unary(s.g.CreateHyperparameterTuningJob(ctx, r))
}

func (s training) GetHyperparameterTuningJob(ctx context.Context, r *trainingv1.GetHyperparameterTuningJobRequest) (*trainingv1.HyperparameterTuningJob, error) {
	return unary(s.g.GetHyperparameterTuningJob(ctx, r))
}

func (s training) ListHyperparameterTuningJobs(ctx context.Context, r *trainingv1.ListHyperparameterTuningJobsRequest) (*trainingv1.ListHyperparameterTuningJobsResponse, error) {
	return unary(s.g.ListHyperparameterTuningJobs(ctx, r))
}

func (s training) CancelHyperparameterTuningJob(ctx context.Context, r *trainingv1.CancelHyperparameterTuningJobRequest) (*trainingv1.Empty, error) {
	return unary(s.g.CancelHyperparameterTuningJob(ctx, r))
}

func (s training) DeleteHyperparameterTuningJob(ctx context.Context, r *trainingv1.DeleteHyperparameterTuningJobRequest) (*trainingv1.Empty, error) {
	return unary(s.g.DeleteHyperparameterTuningJob(ctx, r))
}

func (s training) CreateTrainingPipeline(ctx context.Context, r *trainingv1.CreateTrainingPipelineRequest) (*trainingv1.TrainingPipeline, error) {
	return unary(s.g.CreateTrainingPipeline(ctx, r))
}

func (s training) GetTrainingPipeline(ctx context.Context, r *trainingv1.GetTrainingPipelineRequest) (*trainingv1.TrainingPipeline, error) {
	return unary(s.g.GetTrainingPipeline(ctx, r))
}

func (s training) ListTrainingPipelines(ctx context.Context, r *trainingv1.ListTrainingPipelinesRequest) (*trainingv1.ListTrainingPipelinesResponse, error) {
	return unary(s.g.ListTrainingPipelines(ctx, r))
}

func (s training) CancelTrainingPipeline(ctx context.Context, r *trainingv1.CancelTrainingPipelineRequest) (*trainingv1.Empty, error) {
	return unary(s.g.CancelTrainingPipeline(ctx, r))
}

func (s training) DeleteTrainingPipeline(ctx context.Context, r *trainingv1.DeleteTrainingPipelineRequest) (*trainingv1.Empty, error) {
	return unary(s.g.DeleteTrainingPipeline(ctx, r))
}

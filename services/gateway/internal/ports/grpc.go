// Package ports exposes the gateway: the public gRPC services, the REST/JSON
// mux in front of them, and the bus handlers.
package ports

import (
	"context"

	"google.golang.org/grpc"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/app"
)

// Register registers every public loom.v1 service of g on s. Each method's
// error goes through errs.ToStatus.
func Register(s grpc.ServiceRegistrar, g *app.Gateway) {
	loomv1.RegisterClusterServiceServer(s, clusters{g: g})
	loomv1.RegisterReservationServiceServer(s, reservations{g: g})
	loomv1.RegisterJobServiceServer(s, jobs{g: g})
	loomv1.RegisterSlurmServiceServer(s, slurm{g: g})
	loomv1.RegisterOperationServiceServer(s, operations{g: g})
	loomv1.RegisterNodeServiceServer(s, nodes{g: g})
	loomv1.RegisterModelServiceServer(s, models{g: g})
	loomv1.RegisterAccountServiceServer(s, accounts{g: g})
	loomv1.RegisterAuditServiceServer(s, audit{g: g})
	loomv1.RegisterHealthServiceServer(s, health{g: g})
	loomv1.RegisterGoodputServiceServer(s, goodput{g: g})
	loomv1.RegisterIngressServiceServer(s, ingress{g: g})
	loomv1.RegisterChangeServiceServer(s, changes{g: g})
}

type ingress struct {
	loomv1.UnimplementedIngressServiceServer
	g *app.Gateway
}

func (s ingress) ListIngressProducers(ctx context.Context, r *loomv1.ListIngressProducersRequest) (*loomv1.ListIngressProducersResponse, error) {
	return unary(s.g.ListIngressProducers(ctx, r))
}

func (s ingress) ListIngressMessages(ctx context.Context, r *loomv1.ListIngressMessagesRequest) (*loomv1.ListIngressMessagesResponse, error) {
	return unary(s.g.ListIngressMessages(ctx, r))
}

// unary maps the error of a unary call; the result is dropped with it.
func unary[T any](v T, err error) (T, error) {
	if err != nil {
		var zero T
		return zero, errs.ToStatus(err)
	}
	return v, nil
}

type clusters struct {
	loomv1.UnimplementedClusterServiceServer
	g *app.Gateway
}

func (s clusters) CreateCluster(ctx context.Context, r *loomv1.CreateClusterRequest) (*loomv1.Operation, error) {
	return unary(s.g.CreateCluster(ctx, r))
}

func (s clusters) GetCluster(ctx context.Context, r *loomv1.GetClusterRequest) (*loomv1.Cluster, error) {
	return unary(s.g.GetCluster(ctx, r))
}

func (s clusters) ListClusters(ctx context.Context, r *loomv1.ListClustersRequest) (*loomv1.ListClustersResponse, error) {
	return unary(s.g.ListClusters(ctx, r))
}

func (s clusters) DeleteCluster(ctx context.Context, r *loomv1.DeleteClusterRequest) (*loomv1.Operation, error) {
	return unary(s.g.DeleteCluster(ctx, r))
}

func (s clusters) UpdateCluster(ctx context.Context, r *loomv1.UpdateClusterRequest) (*loomv1.Operation, error) {
	return unary(s.g.UpdateCluster(ctx, r))
}

func (s clusters) GetSlurmConfig(ctx context.Context, r *loomv1.GetSlurmConfigRequest) (*loomv1.SlurmConfig, error) {
	return unary(s.g.GetSlurmConfig(ctx, r))
}

type reservations struct {
	loomv1.UnimplementedReservationServiceServer
	g *app.Gateway
}

func (s reservations) CreateReservation(ctx context.Context, r *loomv1.CreateReservationRequest) (*loomv1.Operation, error) {
	return unary(s.g.CreateReservation(ctx, r))
}

func (s reservations) DeleteReservation(ctx context.Context, r *loomv1.DeleteReservationRequest) (*loomv1.Operation, error) {
	return unary(s.g.DeleteReservation(ctx, r))
}

func (s reservations) GetReservation(ctx context.Context, r *loomv1.GetReservationRequest) (*loomv1.Reservation, error) {
	return unary(s.g.GetReservation(ctx, r))
}

func (s reservations) ListReservations(ctx context.Context, r *loomv1.ListReservationsRequest) (*loomv1.ListReservationsResponse, error) {
	return unary(s.g.ListReservations(ctx, r))
}

func (s reservations) ListCapacity(ctx context.Context, r *loomv1.ListCapacityRequest) (*loomv1.ListCapacityResponse, error) {
	return unary(s.g.ListCapacity(ctx, r))
}

type jobs struct {
	loomv1.UnimplementedJobServiceServer
	g *app.Gateway
}

func (s jobs) SubmitJob(ctx context.Context, r *loomv1.SubmitJobRequest) (*loomv1.Job, error) {
	return unary(s.g.SubmitJob(ctx, r))
}

func (s jobs) GetJob(ctx context.Context, r *loomv1.GetJobRequest) (*loomv1.Job, error) {
	return unary(s.g.GetJob(ctx, r))
}

func (s jobs) ListJobs(ctx context.Context, r *loomv1.ListJobsRequest) (*loomv1.ListJobsResponse, error) {
	return unary(s.g.ListJobs(ctx, r))
}

func (s jobs) CancelJob(ctx context.Context, r *loomv1.CancelJobRequest) (*loomv1.Job, error) {
	return unary(s.g.CancelJob(ctx, r))
}

func (s jobs) UpdateJob(ctx context.Context, r *loomv1.UpdateJobRequest) (*loomv1.Job, error) {
	return unary(s.g.UpdateJob(ctx, r))
}

func (s jobs) CreateJobStep(ctx context.Context, r *loomv1.CreateJobStepRequest) (*loomv1.JobStep, error) {
	return unary(s.g.CreateJobStep(ctx, r))
}

func (s jobs) GetJobStep(ctx context.Context, r *loomv1.GetJobStepRequest) (*loomv1.JobStep, error) {
	return unary(s.g.GetJobStep(ctx, r))
}

func (s jobs) ListJobSteps(ctx context.Context, r *loomv1.ListJobStepsRequest) (*loomv1.ListJobStepsResponse, error) {
	return unary(s.g.ListJobSteps(ctx, r))
}

func (s jobs) CancelJobStep(ctx context.Context, r *loomv1.CancelJobStepRequest) (*loomv1.JobStep, error) {
	return unary(s.g.CancelJobStep(ctx, r))
}

func (s jobs) WatchJob(r *loomv1.WatchJobRequest, stream grpc.ServerStreamingServer[loomv1.Job]) error {
	return errs.ToStatus(s.g.WatchJob(stream.Context(), r, stream.Send))
}

func (s jobs) ReadJobLogs(r *loomv1.ReadJobLogsRequest, stream grpc.ServerStreamingServer[loomv1.LogChunk]) error {
	// Only a caller who may see the job reads its logs (PrivateData,
	// another workload's job): the same answer as GetJob's.
	if err := s.g.CheckJobReadable(stream.Context(), r.GetName()); err != nil {
		return errs.ToStatus(err)
	}
	return errs.ToStatus(s.g.ReadJobLogs(stream.Context(), r, func(b []byte) error {
		return stream.Send(&loomv1.LogChunk{Data: b})
	}))
}

type slurm struct {
	loomv1.UnimplementedSlurmServiceServer
	g *app.Gateway
}

func (s slurm) ListPartitions(ctx context.Context, r *loomv1.ListPartitionsRequest) (*loomv1.ListPartitionsResponse, error) {
	return unary(s.g.ListPartitions(ctx, r))
}

func (s slurm) ListShares(ctx context.Context, r *loomv1.ListSharesRequest) (*loomv1.ListSharesResponse, error) {
	return unary(s.g.ListShares(ctx, r))
}

func (s slurm) ListSlurmNodes(ctx context.Context, r *loomv1.ListSlurmNodesRequest) (*loomv1.ListSlurmNodesResponse, error) {
	return unary(s.g.ListSlurmNodes(ctx, r))
}

func (s slurm) UpdateSlurmNode(ctx context.Context, r *loomv1.UpdateSlurmNodeRequest) (*loomv1.SlurmNode, error) {
	return unary(s.g.UpdateSlurmNode(ctx, r))
}

type operations struct {
	loomv1.UnimplementedOperationServiceServer
	g *app.Gateway
}

func (s operations) GetOperation(ctx context.Context, r *loomv1.GetOperationRequest) (*loomv1.Operation, error) {
	return unary(s.g.GetOperation(ctx, r))
}

func (s operations) WaitOperation(ctx context.Context, r *loomv1.WaitOperationRequest) (*loomv1.Operation, error) {
	return unary(s.g.WaitOperation(ctx, r))
}

func (s operations) ListOperations(ctx context.Context, r *loomv1.ListOperationsRequest) (*loomv1.ListOperationsResponse, error) {
	return unary(s.g.ListOperations(ctx, r))
}

func (s operations) CancelOperation(ctx context.Context, r *loomv1.CancelOperationRequest) (*loomv1.Operation, error) {
	return unary(s.g.CancelOperation(ctx, r))
}

type nodes struct {
	loomv1.UnimplementedNodeServiceServer
	g *app.Gateway
}

func (s nodes) ListNodes(ctx context.Context, r *loomv1.ListNodesRequest) (*loomv1.ListNodesResponse, error) {
	return unary(s.g.ListNodes(ctx, r))
}

type models struct {
	loomv1.UnimplementedModelServiceServer
	g *app.Gateway
}

func (s models) ListModels(ctx context.Context, r *loomv1.ListModelsRequest) (*loomv1.ListModelsResponse, error) {
	return unary(s.g.ListModels(ctx, r))
}

func (s models) GetModel(ctx context.Context, r *loomv1.GetModelRequest) (*loomv1.Model, error) {
	return unary(s.g.GetModel(ctx, r))
}

func (s models) ListModelVersions(ctx context.Context, r *loomv1.ListModelVersionsRequest) (*loomv1.ListModelVersionsResponse, error) {
	return unary(s.g.ListModelVersions(ctx, r))
}

func (s models) UploadModel(ctx context.Context, r *loomv1.UploadModelRequest) (*loomv1.Operation, error) {
	return unary(s.g.UploadModel(ctx, r))
}

func (s models) UpdateModel(ctx context.Context, r *loomv1.UpdateModelRequest) (*loomv1.Model, error) {
	return unary(s.g.UpdateModel(ctx, r))
}

func (s models) MergeVersionAliases(ctx context.Context, r *loomv1.MergeVersionAliasesRequest) (*loomv1.Model, error) {
	return unary(s.g.MergeVersionAliases(ctx, r))
}

func (s models) DeleteModel(ctx context.Context, r *loomv1.DeleteModelRequest) (*loomv1.DeleteModelResponse, error) {
	return unary(s.g.DeleteModel(ctx, r))
}

func (s models) DeleteModelVersion(ctx context.Context, r *loomv1.DeleteModelVersionRequest) (*loomv1.DeleteModelResponse, error) {
	return unary(s.g.DeleteModelVersion(ctx, r))
}

func (s models) ExportModel(ctx context.Context, r *loomv1.ExportModelRequest) (*loomv1.Operation, error) {
	return unary(s.g.ExportModel(ctx, r))
}

type health struct {
	loomv1.UnimplementedHealthServiceServer
	g *app.Gateway
}

func (s health) ScanNodes(ctx context.Context, r *loomv1.ScanNodesRequest) (*loomv1.ScanNodesResponse, error) {
	return unary(s.g.ScanNodes(ctx, r))
}

func (s health) ListHealthResults(ctx context.Context, r *loomv1.ListHealthResultsRequest) (*loomv1.ListHealthResultsResponse, error) {
	return unary(s.g.ListHealthResults(ctx, r))
}

func (s health) GetHealthScan(ctx context.Context, r *loomv1.GetHealthScanRequest) (*loomv1.HealthScan, error) {
	return unary(s.g.GetHealthScan(ctx, r))
}

func (s health) ListHealthScans(ctx context.Context, r *loomv1.ListHealthScansRequest) (*loomv1.ListHealthScansResponse, error) {
	return unary(s.g.ListHealthScans(ctx, r))
}

func (s health) ListNodeHealth(ctx context.Context, r *loomv1.ListNodeHealthRequest) (*loomv1.ListNodeHealthResponse, error) {
	return unary(s.g.ListNodeHealth(ctx, r))
}

func (s health) ListNodeHealthEvents(ctx context.Context, r *loomv1.ListNodeHealthEventsRequest) (*loomv1.ListNodeHealthEventsResponse, error) {
	return unary(s.g.ListNodeHealthEvents(ctx, r))
}

func (s health) ReportFaultyNodes(ctx context.Context, r *loomv1.ReportFaultyNodesRequest) (*loomv1.ReportFaultyNodesResponse, error) {
	return unary(s.g.ReportFaultyNodes(ctx, r))
}

func (s health) UpdateNodeRemediation(ctx context.Context, r *loomv1.UpdateNodeRemediationRequest) (*loomv1.NodeHealth, error) {
	return unary(s.g.UpdateNodeRemediation(ctx, r))
}

func (s health) GetHealthPolicy(ctx context.Context, r *loomv1.GetHealthPolicyRequest) (*loomv1.HealthPolicy, error) {
	return unary(s.g.GetHealthPolicy(ctx, r))
}

func (s health) InjectFault(ctx context.Context, r *loomv1.InjectFaultRequest) (*loomv1.InjectFaultResponse, error) {
	return unary(s.g.InjectFault(ctx, r))
}

type goodput struct {
	loomv1.UnimplementedGoodputServiceServer
	g *app.Gateway
}

func (s goodput) GetJobGoodput(ctx context.Context, r *loomv1.GetJobGoodputRequest) (*loomv1.Goodput, error) {
	return unary(s.g.GetJobGoodput(ctx, r))
}

func (s goodput) GetClusterGoodput(ctx context.Context, r *loomv1.GetClusterGoodputRequest) (*loomv1.Goodput, error) {
	return unary(s.g.GetClusterGoodput(ctx, r))
}

// OperationEvents handles loom.cluster.events.v1 and loom.model.events.v1:
// it advances and finishes operations on clusters and reservations, and
// model exports.
func OperationEvents(g *app.Gateway) bus.Handler {
	return func(ctx context.Context, ev envelope.Event) error {
		if err := g.HandleClusterEvent(ctx, ev); err != nil {
			return err
		}
		return g.HandleModelEvent(ctx, ev)
	}
}

// ClusterEvents handles loom.cluster.events.v1: it advances and finishes
// operations on clusters and reservations.
func ClusterEvents(g *app.Gateway) bus.Handler {
	return func(ctx context.Context, ev envelope.Event) error { return g.HandleClusterEvent(ctx, ev) }
}

type changes struct {
	loomv1.UnimplementedChangeServiceServer
	g *app.Gateway
}

func (s changes) WatchChanges(r *loomv1.WatchChangesRequest, stream grpc.ServerStreamingServer[loomv1.ChangeEvent]) error {
	return errs.ToStatus(s.g.WatchChanges(stream.Context(), r, stream.Send))
}

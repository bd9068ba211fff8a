package adapters

import (
	"errors"
	"fmt"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Owners are the internal gRPC read APIs of the services that own the
// resources the gateway serves.
type Owners struct {
	Clusters     loomv1.ClusterServiceClient     // provisioner
	Nodes        loomv1.NodeServiceClient        // provisioner
	Reservations loomv1.ReservationServiceClient // provisioner
	Jobs         loomv1.JobServiceClient         // scheduler
	Slurm        loomv1.SlurmServiceClient       // scheduler
	Models       loomv1.ModelServiceClient       // registry
	Goodput      loomv1.GoodputServiceClient     // scheduler
	// Health is the health service's HealthService (its internal gRPC):
	// nil until DialHealth, and then calls to it are answered Unavailable
	// by the gateway.
	Health loomv1.HealthServiceClient
	// Training is the training service's TrainingService (its internal
	// gRPC, the Get and List calls): nil until DialTraining, and then
	// calls to it are answered Unavailable by the gateway.
	Training trainingv1.TrainingServiceClient
	// Metrics is the training service's MetricsService, on the same
	// connection as Training.
	Metrics trainingv1.MetricsServiceClient
	// Ingress is the bridge's IngressService (its internal gRPC): nil
	// until DialBridge, and then calls to it are answered Unavailable by
	// the gateway.
	Ingress loomv1.IngressServiceClient

	conns []*grpc.ClientConn
}

// DialOwners returns clients of the provisioner, scheduler and registry. It
// does not wait for them: connections are made on first use and remade after
// failures, so the gateway can start before the services it reads from.
// opts are added to every connection's (the per-RPC service token their
// internal APIs require).
func DialOwners(provisioner, scheduler, registry string, opts ...grpc.DialOption) (*Owners, error) {
	o := &Owners{}
	dial := func(name, addr string) (*grpc.ClientConn, error) {
		c, err := grpc.NewClient(addr, append([]grpc.DialOption{
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithStatsHandler(otelgrpc.NewClientHandler())}, opts...)...)
		if err != nil {
			return nil, fmt.Errorf("dial %s at %q: %w", name, addr, err)
		}
		o.conns = append(o.conns, c)
		return c, nil
	}
	p, err := dial("provisioner", provisioner)
	if err != nil {
		return nil, err
	}
	s, err := dial("scheduler", scheduler)
	if err != nil {
		_ = o.Close()
		return nil, err
	}
	r, err := dial("registry", registry)
	if err != nil {
		_ = o.Close()
		return nil, err
	}
	o.Clusters, o.Nodes = loomv1.NewClusterServiceClient(p), loomv1.NewNodeServiceClient(p)
	o.Reservations = loomv1.NewReservationServiceClient(p)
	o.Jobs, o.Slurm = loomv1.NewJobServiceClient(s), loomv1.NewSlurmServiceClient(s)
	o.Goodput = loomv1.NewGoodputServiceClient(s)
	o.Models = loomv1.NewModelServiceClient(r)
	return o, nil
}

// DialHealth adds a client of the health service's internal gRPC at addr
// (Health), with opts as DialOwners'. Like DialOwners it does not wait for
// the service.
func (o *Owners) DialHealth(addr string, opts ...grpc.DialOption) error {
	c, err := grpc.NewClient(addr, append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler())}, opts...)...)
	if err != nil {
		return fmt.Errorf("dial health at %q: %w", addr, err)
	}
	o.conns = append(o.conns, c)
	o.Health = loomv1.NewHealthServiceClient(c)
	return nil
}

// DialTraining adds a client of the training service's internal gRPC at
// addr (Training), with opts as DialOwners'. Like DialOwners it does not
// wait for the service.
func (o *Owners) DialTraining(addr string, opts ...grpc.DialOption) error {
	c, err := grpc.NewClient(addr, append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler())}, opts...)...)
	if err != nil {
		return fmt.Errorf("dial training at %q: %w", addr, err)
	}
	o.conns = append(o.conns, c)
	o.Training = trainingv1.NewTrainingServiceClient(c)
	o.Metrics = trainingv1.NewMetricsServiceClient(c)
	return nil
}

// DialBridge adds a client of the bridge's internal gRPC at addr
// (Ingress), with opts as DialOwners'. Like DialOwners it does not wait for
// the service.
func (o *Owners) DialBridge(addr string, opts ...grpc.DialOption) error {
	c, err := grpc.NewClient(addr, append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler())}, opts...)...)
	if err != nil {
		return fmt.Errorf("dial bridge at %q: %w", addr, err)
	}
	o.conns = append(o.conns, c)
	o.Ingress = loomv1.NewIngressServiceClient(c)
	return nil
}

// Close closes the connections.
func (o *Owners) Close() error {
	var all []error
	for _, c := range o.conns {
		all = append(all, c.Close())
	}
	return errors.Join(all...)
}

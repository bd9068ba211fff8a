package main

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/clusterspec"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

const (
	projectID = "default"
	zone      = "us-central1-a"
)

// machines are the 8-GPU machine types the mixed cluster cycles through.
var machines = []string{"a3-highgpu-8g", "a3-megagpu-8g", "a3-ultragpu-8g", "a4-highgpu-8g"}

// clusterSpec builds a cluster of nodes spread over pools: one node set and
// one partition per pool, plus a default partition over all of them.
func clusterSpec(id string, nodes, pools int) *loomv1.Cluster {
	c := &loomv1.Cluster{
		Name:         resname.Cluster{Project: projectID, ID: id}.String(),
		Compute:      &loomv1.ComputeResources{},
		Orchestrator: &loomv1.Orchestrator{Slurm: &loomv1.SlurmOrchestrator{}},
		Network:      &loomv1.NetworkConfig{Zone: zone},
	}
	slurm := c.Orchestrator.Slurm
	all := &loomv1.SlurmPartition{Id: "all", Default: true}
	for i := range pools {
		count := nodes / pools
		if i < nodes%pools {
			count++
		}
		machine := machines[i%len(machines)]
		m, ok := clusterspec.Machine(machine)
		if !ok {
			panic("clusterbench: " + machine + " is not in the catalog")
		}
		capType := loomv1.CapacitySource_ON_DEMAND
		if pools > 1 && i%2 == 1 {
			capType = loomv1.CapacitySource_SPOT
		}
		pool := fmt.Sprintf("p%d", i+1)
		set := fmt.Sprintf("n%d", i+1)
		if pools == 1 {
			pool, set = "gpu", "a3h"
		}
		c.Compute.NodePools = append(c.Compute.NodePools, &loomv1.NodePool{
			Id: pool, MachineType: machine, NodeCount: int32(count),
			AcceleratorType: m.AcceleratorType, AcceleratorCount: m.AcceleratorCount,
			Capacity: &loomv1.CapacitySource{Type: capType},
		})
		slurm.NodeSets = append(slurm.NodeSets, &loomv1.SlurmNodeSet{Id: set, NodePoolId: pool})
		if pools > 1 {
			slurm.Partitions = append(slurm.Partitions, &loomv1.SlurmPartition{Id: pool, NodeSetIds: []string{set}, PriorityTier: 1})
		}
		all.NodeSetIds = append(all.NodeSetIds, set)
	}
	slurm.Partitions = append([]*loomv1.SlurmPartition{all}, slurm.Partitions...)
	return c
}

// result is what one create-and-delete measured.
type result struct {
	name         string
	nodes, pools int
	// create
	toRunning, maxLatency, overhead         time.Duration
	firstLaunch, lastLaunch, lastRegToReady time.Duration
	createEvents, createTelemetry           int
	// clientRunning and clientDeleted are when the client saw the
	// operation done (it polls every 10 ms).
	clientRunning, clientDeleted time.Duration
	// delete
	toDeleted    time.Duration
	deleteEvents int
}

func (r result) createRate() float64 { return float64(r.createEvents) / r.toRunning.Seconds() }
func (r result) deleteRate() float64 { return float64(r.deleteEvents) / r.toDeleted.Seconds() }

// client reaches the cluster API: the gateway's, or the bus directly.
type client struct {
	via      string
	clusters loomv1.ClusterServiceClient // gateway's or provisioner's
	ops      loomv1.OperationServiceClient
	producer *bus.Producer
	conns    []*grpc.ClientConn
}

func newClient(s *env, via string) (*client, error) {
	// Straight to the bus and the provisioner's internal API, the benchmark
	// writes and calls as a service: signed with the stack's services' key,
	// with a service token. Its commands are signed as the gateway it
	// stands in for: the provisioner takes a cluster command from the
	// gateway (or the training service) alone (envelope.Senders), and no
	// service's row names a benchmark.
	secret, err := auth.LoadSecret(s.Keys.Service)
	if err != nil {
		return nil, err
	}
	key, err := auth.ServiceKey(secret)
	if err != nil {
		return nil, err
	}
	iss, err := auth.NewServiceTokenIssuer(secret, nil)
	if err != nil {
		return nil, err
	}
	c := &client{via: via, producer: bus.NewProducer([]string{s.BrokerAddr})}
	c.producer.SetSigner(envelope.NewServiceSigner("gateway", key))
	addr := s.GatewayAddr
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64 << 20))}
	if via == "bus" {
		addr = s.Addrs.Provisioner
		opts = append(opts, grpc.WithPerRPCCredentials(auth.ServiceTokenSource(iss, "clusterbench")))
	} else {
		// Through the gateway the benchmark calls as the stack's
		// administrator, as `loom` on this machine does.
		admin, err := s.AdminKey()
		if err != nil {
			return nil, err
		}
		opts = append(opts, grpc.WithPerRPCCredentials(auth.Bearer(admin)))
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, err
	}
	c.conns = append(c.conns, conn)
	c.clusters = loomv1.NewClusterServiceClient(conn)
	c.ops = loomv1.NewOperationServiceClient(conn)
	return c, nil
}

func (c *client) close() {
	for _, conn := range c.conns {
		_ = conn.Close()
	}
	_ = c.producer.Close()
}

// create asks for the cluster and returns once the create operation is done.
func (c *client) create(ctx context.Context, cl *loomv1.Cluster, timeout time.Duration) error {
	name, err := resname.ParseCluster(cl.GetName())
	if err != nil {
		return err
	}
	id := name.ID
	if c.via == "bus" {
		op := resname.Operation{Project: projectID, ID: envelope.NewID()}.String()
		ev := envelope.New(topics.ClusterCommands, cl.GetName(), "loom/gateway", &eventsv1.CreateCluster{Operation: op, Cluster: cl})
		if err := c.producer.Publish(ctx, ev); err != nil {
			return err
		}
		return poll(ctx, timeout, func() (bool, error) {
			got, err := c.clusters.GetCluster(ctx, &loomv1.GetClusterRequest{Name: cl.GetName()})
			if status.Code(err) == codes.NotFound {
				return false, nil
			}
			if err != nil {
				return false, err
			}
			switch got.GetStatus().GetState() {
			case loomv1.Cluster_RUNNING:
				return true, nil
			case loomv1.Cluster_ERROR:
				return false, fmt.Errorf("cluster %s: ERROR: %s", id, got.GetStatus().GetMessage())
			}
			return false, nil
		})
	}
	spec := clone(cl)
	spec.Name = ""
	op, err := c.clusters.CreateCluster(ctx, &loomv1.CreateClusterRequest{Parent: resname.Project{ID: projectID}.String(), ClusterId: id, Cluster: spec})
	if err != nil {
		return fmt.Errorf("create %s: %w", id, err)
	}
	return c.wait(ctx, op.GetName(), timeout)
}

// remove deletes the cluster and returns once it is gone.
func (c *client) remove(ctx context.Context, name string, timeout time.Duration) error {
	if c.via == "bus" {
		op := resname.Operation{Project: projectID, ID: envelope.NewID()}.String()
		ev := envelope.New(topics.ClusterCommands, name, "loom/gateway", &eventsv1.DeleteCluster{Operation: op, Cluster: name})
		if err := c.producer.Publish(ctx, ev); err != nil {
			return err
		}
		return poll(ctx, timeout, func() (bool, error) {
			_, err := c.clusters.GetCluster(ctx, &loomv1.GetClusterRequest{Name: name})
			if status.Code(err) == codes.NotFound {
				return true, nil
			}
			return false, err
		})
	}
	op, err := c.clusters.DeleteCluster(ctx, &loomv1.DeleteClusterRequest{Name: name})
	if err != nil {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	return c.wait(ctx, op.GetName(), timeout)
}

// wait polls an operation until it is done; a failed one is an error.
func (c *client) wait(ctx context.Context, op string, timeout time.Duration) error {
	return poll(ctx, timeout, func() (bool, error) {
		got, err := c.ops.GetOperation(ctx, &loomv1.GetOperationRequest{Name: op})
		if err != nil {
			return false, err
		}
		if e := got.GetError(); e != nil {
			return false, fmt.Errorf("operation %s failed: %s: %s", op, codes.Code(e.GetCode()), e.GetMessage())
		}
		return got.GetDone(), nil
	})
}

// poll calls cond every 10 ms until it is true, fails, or timeout passes.
func poll(ctx context.Context, timeout time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not done after %v", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// measure creates and deletes one cluster and reads its events back.
func measure(ctx context.Context, s *env, c *client, name string, spec *loomv1.Cluster, o options) (result, error) {
	r := result{name: name, pools: len(spec.GetCompute().GetNodePools())}
	for _, p := range spec.GetCompute().GetNodePools() {
		r.nodes += int(p.GetNodeCount())
	}
	t0 := time.Now()
	if err := c.create(ctx, spec, o.timeout); err != nil {
		return r, fmt.Errorf("%w; %s", err, c.diagnose(ctx, s, spec.GetName()))
	}
	seenRunning := time.Now()
	if err := s.failed(); err != nil {
		return r, err
	}
	t1 := time.Now()
	if err := c.remove(ctx, spec.GetName(), o.timeout); err != nil {
		return r, fmt.Errorf("%w; %s", err, c.diagnose(ctx, s, spec.GetName()))
	}
	seenDeleted := time.Now()
	logf("%s: operation done seen by the client after %v (create), %v (delete)", name,
		seenRunning.Sub(t0).Round(time.Millisecond), seenDeleted.Sub(t1).Round(time.Millisecond))

	readStart := time.Now()
	evs, err := readTopics(ctx, s.BrokerAddr, topics.ClusterEvents, topics.NodeEvents, topics.NodeTelemetry)
	if err != nil {
		return r, err
	}
	logf("%s: read %d events back in %v", name, len(evs), time.Since(readStart).Round(time.Millisecond))
	cluster := spec.GetName()
	// The provisioner stamps each event when it decides it: the end of the
	// create is the ClusterChanged that finished it.
	running, deleted := seenRunning, seenDeleted
	for _, ev := range evs {
		switch p := ev.Payload.(type) {
		case *eventsv1.ClusterChanged:
			if p.GetCluster().GetName() == cluster && p.GetOperationDone() && p.GetCluster().GetStatus().GetState() == loomv1.Cluster_RUNNING &&
				ev.Time.After(t0) && ev.Time.Before(running) {
				running = ev.Time
			}
		case *eventsv1.ClusterDeleted:
			if p.GetCluster() == cluster && ev.Time.After(t1) {
				deleted = ev.Time
			}
		}
	}
	for _, ev := range evs {
		if clusterOf(ev) != cluster {
			continue
		}
		inCreate := !ev.Time.Before(t0) && !ev.Time.After(running)
		inDelete := !ev.Time.Before(t1) && !ev.Time.After(deleted)
		switch ev.Topic {
		case topics.ClusterEvents, topics.NodeEvents:
			if inCreate {
				r.createEvents++
			}
			if inDelete {
				r.deleteEvents++
			}
		case topics.NodeTelemetry:
			if inCreate {
				r.createTelemetry++
			}
		}
	}
	r.toRunning, r.toDeleted = running.Sub(t0), deleted.Sub(t1)
	r.clientRunning, r.clientDeleted = seenRunning.Sub(t0), seenDeleted.Sub(t1)

	ls := s.launchesOf(cluster)
	if len(ls) < r.nodes {
		return r, fmt.Errorf("%s: the simulated cloud launched %d of %d nodes", name, len(ls), r.nodes)
	}
	first, last, lastReg := ls[0].at, ls[0].at, ls[0].at.Add(ls[0].latency)
	for _, l := range ls {
		r.maxLatency = max(r.maxLatency, l.latency)
		first = minTime(first, l.at)
		last = maxTime(last, l.at)
		lastReg = maxTime(lastReg, l.at.Add(l.latency))
	}
	r.overhead = r.toRunning - r.maxLatency
	r.firstLaunch, r.lastLaunch = first.Sub(t0), last.Sub(t0)
	r.lastRegToReady = running.Sub(lastReg)
	return r, nil
}

// clusterOf is the cluster an event is about.
func clusterOf(ev envelope.Event) string {
	switch p := ev.Payload.(type) {
	case *eventsv1.ClusterChanged:
		return p.GetCluster().GetName()
	case *eventsv1.ClusterDeleted:
		return p.GetCluster()
	case *eventsv1.ClusterOperationFailed:
		return p.GetCluster()
	case *eventsv1.NodeChanged:
		return p.GetNode().GetCluster()
	case *eventsv1.NodeRemoved:
		return p.GetCluster()
	case *eventsv1.AgentRegistered:
		return p.GetCluster()
	case *eventsv1.Heartbeat:
		return p.GetCluster()
	}
	return ""
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// diagnose says where a cluster that did not finish stands.
func (c *client) diagnose(ctx context.Context, s *env, name string) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	msg := fmt.Sprintf("the simulated cloud launched %d of its nodes", len(s.launchesOf(name)))
	cl, err := c.clusters.GetCluster(ctx, &loomv1.GetClusterRequest{Name: name})
	if err != nil {
		return msg + fmt.Sprintf("; GetCluster: %v", err)
	}
	st := cl.GetStatus()
	msg += fmt.Sprintf("; cluster %s, %q, %d of %d nodes ready", st.GetState(), st.GetMessage(), st.GetReadyNodes(), st.GetTotalNodes())
	for _, p := range st.GetNodePools() {
		msg += fmt.Sprintf("; pool %s: target %d ready %d provisioning %d failed %d", p.GetId(), p.GetTarget(), p.GetReady(), p.GetProvisioning(), p.GetFailed())
	}
	for _, cd := range st.GetConditions() {
		msg += fmt.Sprintf("; %s=%s (%s: %s)", cd.GetType(), cd.GetStatus(), cd.GetReason(), cd.GetMessage())
	}
	return msg
}

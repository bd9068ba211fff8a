// Package domain is the provisioner's pure core: clusters and nodes as state
// machines. Each decision takes the current State, one input and the time, and
// returns a Change (records to write or delete, events to emit) without doing
// any I/O. The app writes a Change atomically and only then applies it to the
// in-memory State with State.Apply.
//
// Records are immutable once they are in a State or a Change: decisions copy
// before they modify, so readers may hand them out without cloning.
package domain

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/errs"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// LaunchReasonPrefix starts every node reason set by LaunchFailed, so that
// Launched clears only reasons the provider caused (never health's).
const LaunchReasonPrefix = "launch: "

// idPattern is a cluster id or node pool id: a DNS label.
var idPattern = regexp.MustCompile(`^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$`)

// clusterName matches projects/{project}/clusters/{cluster}.
var clusterName = regexp.MustCompile(`^projects/([^/]+)/clusters/([^/]+)$`)

// Params are the provider-dependent settings decisions need.
type Params struct {
	// SharedDir returns the shared directory of the cluster with this id.
	SharedDir func(clusterID string) string
	// WorkDir returns the own directory of a node of a cluster.
	WorkDir func(clusterID, hostname string) string
	// MaxNodesPerPool bounds node_count (64 for the local provider).
	MaxNodesPerPool int32
	// MaxAccelerators bounds accelerator_count per node (16).
	MaxAccelerators int32
}

// Cluster is the provisioner's record of a cluster.
type Cluster struct {
	// Cluster is the resource as served and emitted.
	Cluster *loomv1.Cluster
	// Operation is the operation in progress: the create until the cluster is
	// RUNNING, the delete while it is DELETING; "" when none.
	Operation string
	// CreateOperation is the operation that created the cluster; a
	// redelivered create for it changes nothing.
	CreateOperation string
}

// Name returns the cluster's full name.
func (c *Cluster) Name() string { return c.Cluster.GetName() }

// State returns the cluster's lifecycle state.
func (c *Cluster) State() loomv1.Cluster_State { return c.Cluster.GetStatus().GetState() }

// State is every cluster and node the provisioner knows.
type State struct {
	Clusters map[string]*Cluster
	Nodes    map[string]*loomv1.Node
	// byCluster indexes node names by cluster name.
	byCluster map[string]map[string]struct{}
}

// NewState returns a State holding clusters and nodes.
func NewState(clusters []*Cluster, nodes []*loomv1.Node) *State {
	s := &State{Clusters: map[string]*Cluster{}, Nodes: map[string]*loomv1.Node{}, byCluster: map[string]map[string]struct{}{}}
	for _, c := range clusters {
		s.Clusters[c.Name()] = c
	}
	for _, n := range nodes {
		s.putNode(n)
	}
	return s
}

func (s *State) putNode(n *loomv1.Node) {
	s.Nodes[n.GetName()] = n
	set := s.byCluster[n.GetCluster()]
	if set == nil {
		set = map[string]struct{}{}
		s.byCluster[n.GetCluster()] = set
	}
	set[n.GetName()] = struct{}{}
}

func (s *State) delNode(name string) {
	n := s.Nodes[name]
	if n == nil {
		return
	}
	delete(s.Nodes, name)
	if set := s.byCluster[n.GetCluster()]; set != nil {
		delete(set, name)
		if len(set) == 0 {
			delete(s.byCluster, n.GetCluster())
		}
	}
}

// ClusterNodes returns the nodes of a cluster, sorted by name.
func (s *State) ClusterNodes(cluster string) []*loomv1.Node {
	out := make([]*loomv1.Node, 0, len(s.byCluster[cluster]))
	for name := range s.byCluster[cluster] {
		out = append(out, s.Nodes[name])
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out
}

// Change is the outcome of a decision: what to write and what to emit.
type Change struct {
	PutClusters []*Cluster
	PutNodes    []*loomv1.Node
	DelClusters []string
	DelNodes    []string
	// Events are ClusterChanged, ClusterOperationFailed, ClusterDeleted,
	// NodeChanged and NodeRemoved payloads, in the order to emit them.
	Events []proto.Message
}

// Empty reports whether the change writes and emits nothing.
func (c Change) Empty() bool {
	return len(c.PutClusters) == 0 && len(c.PutNodes) == 0 && len(c.DelClusters) == 0 &&
		len(c.DelNodes) == 0 && len(c.Events) == 0
}

// Apply makes the in-memory state reflect a written change.
func (s *State) Apply(c Change) {
	for _, cl := range c.PutClusters {
		s.Clusters[cl.Name()] = cl
	}
	for _, n := range c.PutNodes {
		s.putNode(n)
	}
	for _, name := range c.DelNodes {
		s.delNode(name)
	}
	for _, name := range c.DelClusters {
		delete(s.Clusters, name)
	}
}

// ParseClusterName splits projects/{p}/clusters/{c} into project and cluster id.
func ParseClusterName(name string) (project, id string, ok bool) {
	m := clusterName.FindStringSubmatch(name)
	if m == nil || !idPattern.MatchString(m[2]) {
		return "", "", false
	}
	return m[1], m[2], true
}

// ClusterID returns the cluster id of a cluster's full name ("" when malformed).
func ClusterID(name string) string {
	_, id, _ := ParseClusterName(name)
	return id
}

// Hostname returns the hostname of the index-th node (from 1) of a pool.
func Hostname(pool string, index int) string { return fmt.Sprintf("%s-%04d", pool, index) }

// Progress is the cluster status message for ready of total nodes.
func Progress(ready, total int32) string { return fmt.Sprintf("%d of %d nodes ready", ready, total) }

func failed(op, cluster string, code codes.Code, msg string) *eventsv1.ClusterOperationFailed {
	return &eventsv1.ClusterOperationFailed{Operation: op, Cluster: cluster, Code: int32(code), Message: msg}
}

// validateCreate checks a CreateCluster command; the gateway validates too,
// but the provisioner must never build nodes from bad input.
func validateCreate(p Params, cl *loomv1.Cluster) error {
	var v errs.Validator
	if _, _, ok := ParseClusterName(cl.GetName()); !ok {
		v.Add("cluster.name", "must be projects/{project}/clusters/{cluster_id} with cluster_id matching %s, got %q", idPattern, cl.GetName())
	}
	pools := cl.GetCompute().GetNodePools()
	v.Check(len(pools) > 0, "cluster.compute.node_pools", "at least one node pool is required")
	seen := map[string]bool{}
	for i, np := range pools {
		f := fmt.Sprintf("cluster.compute.node_pools[%d]", i)
		if !idPattern.MatchString(np.GetId()) {
			v.Add(f+".id", "must match %s, got %q", idPattern, np.GetId())
		} else if seen[np.GetId()] {
			v.Add(f+".id", "duplicate node pool id %q", np.GetId())
		}
		seen[np.GetId()] = true
		v.Check(np.GetNodeCount() >= 1 && np.GetNodeCount() <= p.MaxNodesPerPool, f+".node_count",
			"must be 1..%d, got %d", p.MaxNodesPerPool, np.GetNodeCount())
		v.Check(np.GetAcceleratorCount() >= 0 && np.GetAcceleratorCount() <= p.MaxAccelerators, f+".accelerator_count",
			"must be 0..%d, got %d", p.MaxAccelerators, np.GetAcceleratorCount())
	}
	return v.Err()
}

// CreateCluster decides a CreateCluster command: the cluster CREATING with
// its nodes PROVISIONING, or ClusterOperationFailed when the input is bad or
// the cluster id is taken. Cluster ids are unique across projects because the
// local provider's directories are named by cluster id.
func (s *State) CreateCluster(p Params, cmd *eventsv1.CreateCluster, now time.Time) Change {
	in := cmd.GetCluster()
	name := in.GetName()
	if err := validateCreate(p, in); err != nil {
		return Change{Events: []proto.Message{failed(cmd.GetOperation(), name, codes.InvalidArgument, err.Error())}}
	}
	_, id, _ := ParseClusterName(name)
	for _, c := range s.Clusters {
		if ClusterID(c.Name()) != id {
			continue
		}
		if c.Name() == name && c.CreateOperation != "" && c.CreateOperation == cmd.GetOperation() {
			return Change{} // the same create, delivered again
		}
		msg := fmt.Sprintf("cluster %s already exists", c.Name())
		if c.Name() != name {
			msg = fmt.Sprintf("cluster id %q is in use by %s", id, c.Name())
		}
		return Change{Events: []proto.Message{failed(cmd.GetOperation(), name, codes.AlreadyExists, msg)}}
	}

	cl := proto.Clone(in).(*loomv1.Cluster)
	ts := timestamppb.New(now)
	var nodes []*loomv1.Node
	for _, np := range cl.GetCompute().GetNodePools() {
		for i := 1; i <= int(np.GetNodeCount()); i++ {
			host := Hostname(np.GetId(), i)
			nodes = append(nodes, &loomv1.Node{
				Name:            name + "/nodes/" + host,
				Cluster:         name,
				NodePool:        np.GetId(),
				Hostname:        host,
				State:           loomv1.Node_PROVISIONING,
				Gpus:            np.GetAcceleratorCount(),
				AcceleratorType: np.GetAcceleratorType(),
				CreateTime:      ts,
				WorkDir:         p.WorkDir(id, host),
			})
		}
	}
	total := int32(len(nodes))
	cl.Status = &loomv1.ClusterStatus{
		State:      loomv1.Cluster_CREATING,
		Message:    Progress(0, total),
		TotalNodes: total,
		SharedDir:  p.SharedDir(id),
	}
	cl.CreateTime, cl.UpdateTime = ts, ts
	rec := &Cluster{Cluster: cl, Operation: cmd.GetOperation(), CreateOperation: cmd.GetOperation()}

	ch := Change{PutClusters: []*Cluster{rec}, PutNodes: nodes}
	ch.Events = append(ch.Events, &eventsv1.ClusterChanged{Operation: rec.Operation, Cluster: cl})
	for _, n := range nodes {
		ch.Events = append(ch.Events, &eventsv1.NodeChanged{Node: n})
	}
	return ch
}

// DeleteCluster decides a DeleteCluster command: the cluster and its nodes
// DELETING (the reconciler then stops and removes them and calls
// FinishDelete). A create still in progress fails with ABORTED so that its
// operation ends.
func (s *State) DeleteCluster(cmd *eventsv1.DeleteCluster, now time.Time) Change {
	c := s.Clusters[cmd.GetCluster()]
	if c == nil {
		return Change{Events: []proto.Message{failed(cmd.GetOperation(), cmd.GetCluster(), codes.NotFound,
			fmt.Sprintf("cluster %s not found", cmd.GetCluster()))}}
	}
	if c.State() == loomv1.Cluster_DELETING {
		if c.Operation == cmd.GetOperation() {
			return Change{}
		}
		return Change{Events: []proto.Message{failed(cmd.GetOperation(), c.Name(), codes.FailedPrecondition,
			fmt.Sprintf("cluster %s is already being deleted by %s", c.Name(), c.Operation))}}
	}
	var ch Change
	if c.State() == loomv1.Cluster_CREATING && c.Operation != "" {
		ch.Events = append(ch.Events, failed(c.Operation, c.Name(), codes.Aborted,
			fmt.Sprintf("cluster %s was deleted before it was ready", c.Name())))
	}
	cl := proto.Clone(c.Cluster).(*loomv1.Cluster)
	cl.Status.State = loomv1.Cluster_DELETING
	cl.Status.Message = "deleting"
	cl.UpdateTime = timestamppb.New(now)
	rec := &Cluster{Cluster: cl, Operation: cmd.GetOperation(), CreateOperation: c.CreateOperation}
	ch.PutClusters = append(ch.PutClusters, rec)
	ch.Events = append(ch.Events, &eventsv1.ClusterChanged{Operation: rec.Operation, Cluster: cl})
	for _, n := range s.ClusterNodes(c.Name()) {
		nn := proto.Clone(n).(*loomv1.Node)
		nn.State = loomv1.Node_DELETING
		nn.Reason = "cluster is being deleted"
		ch.PutNodes = append(ch.PutNodes, nn)
		ch.Events = append(ch.Events, &eventsv1.NodeChanged{Node: nn})
	}
	return ch
}

// FinishDelete removes a DELETING cluster's records once its nodes are
// stopped and their directories removed: NodeRemoved per node, then
// ClusterDeleted for the delete operation.
func (s *State) FinishDelete(cluster string) Change {
	c := s.Clusters[cluster]
	if c == nil || c.State() != loomv1.Cluster_DELETING {
		return Change{}
	}
	var ch Change
	for _, n := range s.ClusterNodes(cluster) {
		ch.DelNodes = append(ch.DelNodes, n.GetName())
		ch.Events = append(ch.Events, &eventsv1.NodeRemoved{Node: n.GetName(), Cluster: cluster})
	}
	ch.DelClusters = []string{cluster}
	ch.Events = append(ch.Events, &eventsv1.ClusterDeleted{Operation: c.Operation, Cluster: cluster})
	return ch
}

// live returns the node and its cluster when both exist and the cluster is
// not being deleted (events about such nodes change nothing).
func (s *State) live(node string) (*loomv1.Node, *Cluster) {
	n := s.Nodes[node]
	if n == nil {
		return nil, nil
	}
	c := s.Clusters[n.GetCluster()]
	if c == nil || c.State() == loomv1.Cluster_DELETING {
		return nil, nil
	}
	return n, c
}

// AgentRegistered decides an agent's registration: a PROVISIONING node
// becomes READY, and the cluster's progress moves (RUNNING, finishing the
// create operation, when every node is ready). A DOWN node stays DOWN: health
// decides when it is healthy again.
func (s *State) AgentRegistered(ev *eventsv1.AgentRegistered, now time.Time) Change {
	n, c := s.live(ev.GetNode())
	if n == nil || n.GetState() != loomv1.Node_PROVISIONING {
		return Change{}
	}
	nn := proto.Clone(n).(*loomv1.Node)
	nn.State = loomv1.Node_READY
	nn.Reason = ""
	return s.nodeChanged(c, nn, now)
}

// NodeHealthChanged decides a health verdict: UNHEALTHY → DOWN with the
// reason, HEALTHY → READY.
func (s *State) NodeHealthChanged(ev *eventsv1.NodeHealthChanged, now time.Time) Change {
	n, c := s.live(ev.GetNode())
	if n == nil {
		return Change{}
	}
	nn := proto.Clone(n).(*loomv1.Node)
	switch ev.GetHealth() {
	case eventsv1.NodeHealth_UNHEALTHY:
		reason := ev.GetReason()
		if reason == "" {
			reason = "unhealthy"
		}
		if n.GetState() == loomv1.Node_DOWN && n.GetReason() == reason {
			return Change{}
		}
		nn.State, nn.Reason = loomv1.Node_DOWN, reason
	case eventsv1.NodeHealth_HEALTHY:
		if n.GetState() == loomv1.Node_READY {
			return Change{}
		}
		nn.State, nn.Reason = loomv1.Node_READY, ""
	default:
		return Change{}
	}
	if ev.GetLastHeartbeat() != nil {
		nn.LastHeartbeat = ev.GetLastHeartbeat()
	}
	return s.nodeChanged(c, nn, now)
}

// LaunchFailed puts a launch problem on a node (its state stays as it is),
// so that a node that cannot start is never stuck silently.
func (s *State) LaunchFailed(node, reason string) Change {
	n, _ := s.live(node)
	reason = LaunchReasonPrefix + reason
	if n == nil || n.GetReason() == reason {
		return Change{}
	}
	nn := proto.Clone(n).(*loomv1.Node)
	nn.Reason = reason
	return Change{PutNodes: []*loomv1.Node{nn}, Events: []proto.Message{&eventsv1.NodeChanged{Node: nn}}}
}

// Launched clears a launch problem once the node's agent runs.
func (s *State) Launched(node string) Change {
	n, _ := s.live(node)
	if n == nil || !strings.HasPrefix(n.GetReason(), LaunchReasonPrefix) {
		return Change{}
	}
	nn := proto.Clone(n).(*loomv1.Node)
	nn.Reason = ""
	return Change{PutNodes: []*loomv1.Node{nn}, Events: []proto.Message{&eventsv1.NodeChanged{Node: nn}}}
}

// nodeChanged writes one changed node and recounts its cluster's ready nodes:
// progress on the create operation while CREATING, RUNNING with
// operation_done once all are ready, a plain ClusterChanged when a running
// cluster's count moves.
func (s *State) nodeChanged(c *Cluster, nn *loomv1.Node, now time.Time) Change {
	ch := Change{PutNodes: []*loomv1.Node{nn}, Events: []proto.Message{&eventsv1.NodeChanged{Node: nn}}}
	var ready int32
	for _, n := range s.ClusterNodes(c.Name()) {
		if n.GetName() == nn.GetName() {
			n = nn
		}
		if n.GetState() == loomv1.Node_READY {
			ready++
		}
	}
	st := c.Cluster.GetStatus()
	done := c.State() == loomv1.Cluster_CREATING && ready == st.GetTotalNodes()
	if ready == st.GetReadyNodes() && !done {
		return ch
	}
	cl := proto.Clone(c.Cluster).(*loomv1.Cluster)
	cl.Status.ReadyNodes = ready
	cl.Status.Message = Progress(ready, cl.Status.GetTotalNodes())
	cl.UpdateTime = timestamppb.New(now)
	rec := &Cluster{Cluster: cl, Operation: c.Operation, CreateOperation: c.CreateOperation}
	ev := &eventsv1.ClusterChanged{Cluster: cl}
	if c.State() == loomv1.Cluster_CREATING {
		ev.Operation = c.Operation
	}
	if done {
		cl.Status.State = loomv1.Cluster_RUNNING
		ev.OperationDone = true
		rec.Operation = ""
	}
	ch.PutClusters = []*Cluster{rec}
	ch.Events = append(ch.Events, ev)
	return ch
}

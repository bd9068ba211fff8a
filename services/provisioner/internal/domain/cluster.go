package domain

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/clusterspec"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/resname"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/provisioner/internal/spec"
)

// failed ends operation op with msg and the code of kind (an errs kind: the
// domain names what went wrong, libs/errs alone maps it to a gRPC code).
func failed(op, cluster string, kind error, msg string) *eventsv1.ClusterOperationFailed {
	return &eventsv1.ClusterOperationFailed{Operation: op, Cluster: cluster, Code: int32(errs.Code(kind)), Message: msg}
}

// only is a Change that emits one event and writes nothing.
func only(ev proto.Message) Change { return Change{Events: []proto.Message{ev}} }

// violations appends the violations of err (an *errs.InvalidError, or any
// error as one violation of field) to v.
func violations(v *errs.Validator, field string, err error) {
	var inv *errs.InvalidError
	if errors.As(err, &inv) {
		for _, fv := range inv.Violations {
			v.Add(fv.Field, "%s", fv.Reason)
		}
	} else if err != nil {
		v.Add(field, "%v", err)
	}
}

// checkProviderLimits adds the provider's own limits to v.
func (e *edit) checkProviderLimits(v *errs.Validator, c *loomv1.Cluster) {
	var total int64
	for i, np := range c.GetCompute().GetNodePools() {
		total += int64(np.GetNodeCount())
		if e.p.MaxNodesPerPool > 0 {
			v.Check(np.GetNodeCount() <= e.p.MaxNodesPerPool, fmt.Sprintf("compute.node_pools[%d].node_count", i),
				"must be at most %d on this provider, got %d", e.p.MaxNodesPerPool, np.GetNodeCount())
		}
	}
	if e.p.MaxNodesPerCluster > 0 {
		v.Check(total <= int64(e.p.MaxNodesPerCluster), "compute.node_pools",
			"at most %d nodes in a cluster on this provider (node_count over every pool), got %d", e.p.MaxNodesPerCluster, total)
	}
}

// CreateCluster decides a CreateCluster command: the spec normalized and
// validated (INVALID_ARGUMENT naming every bad field), the cluster id free
// across projects (ALREADY_EXISTS; the local provider names directories by
// id), reservations and capacity checked (FAILED_PRECONDITION saying what is
// free where), then the cluster CREATING with its compute nodes PROVISIONING
// and its login nodes READY; the capacity is claimed by the same write.
func (s *State) CreateCluster(p Params, cmd *eventsv1.CreateCluster, now time.Time) Change {
	e := s.edit(p, now)
	op, in := cmd.GetOperation(), cmd.GetCluster()
	name := in.GetName()
	var v errs.Validator
	if _, ok := clusterOf(name); !ok {
		v.Add("name", "must be projects/{project}/clusters/{cluster_id} with cluster_id matching %s, got %q", resname.IDPattern, name)
	}
	violations(&v, "cluster", clusterspec.Validate(in))
	cl := spec.Normalize(in)
	e.checkProviderLimits(&v, cl)
	if err := v.Err(); err != nil {
		return only(failed(op, name, err, err.Error()))
	}
	id := ClusterID(name)
	for _, c := range s.Clusters {
		if ClusterID(c.Name()) != id {
			continue
		}
		if c.Name() == name && c.CreateOperation != "" && c.CreateOperation == op {
			return Change{} // the same create, delivered again
		}
		msg := fmt.Sprintf("cluster %s already exists", c.Name())
		if c.Name() != name {
			// Another project's: not named (nor its project), which the
			// caller may not see; ids are one namespace because node
			// names and agents' identities derive from them.
			msg = fmt.Sprintf("cluster id %q is taken (cluster ids are unique across projects): choose another", id)
		}
		return only(failed(op, name, errs.AlreadyExists, msg))
	}

	if msg := s.agentNameTaken(name, cl); msg != "" {
		return only(failed(op, name, errs.AlreadyExists, msg))
	}

	ts := timestamppb.New(now)
	cl.Status = &loomv1.ClusterStatus{State: loomv1.Cluster_CREATING}
	cl.CreateTime = ts
	rec := &Cluster{Cluster: cl, Operation: op, CreateOperation: op, Deadline: now.Add(e.p.OperationTimeout),
		NextIndex: map[string]int32{}}
	problems := e.checkReservations(cl, cl.GetCompute().GetNodePools())
	if len(problems) == 0 {
		problems = e.checkCapacity(rec, Claims(rec, nil), nil)
	}
	if len(problems) > 0 {
		return only(failed(op, name, errs.FailedPrecondition, strings.Join(problems, "; ")))
	}

	e.putCluster(rec)
	e.members[name] = true
	for _, np := range cl.GetCompute().GetNodePools() {
		e.addComputeNodes(rec, np, int(np.GetNodeCount()))
	}
	e.addLoginNodes(rec, int(cl.GetOrchestrator().GetSlurm().GetLoginNodes().GetCount()))
	return e.change()
}

// UpdateCluster decides an UpdateCluster command carrying the whole new
// spec: validated against the current one, capacity for growth claimed in
// the same write, then the cluster UPDATING: pools grow by new nodes (new
// pools get theirs), pools shrink by the nodes that never came up, then
// those out of service, then the highest-numbered in service (shrinkOrder),
// which go DRAINING with a drain deadline (or straight to DELETING when they never
// came up), and pools removed from the spec shrink to nothing. The update
// is done when every pool is at its new target (see refresh); a change that
// moves no node (clusterspec.MovesNoNode: labels, descriptions,
// partitions, node sets' features, scripts) is stored at once and its
// operation done in the same change, with no UPDATING of its own, whatever
// its pools' readiness: while the cluster is CREATING or UPDATING too,
// whose operation goes on. A command whose
// etag is set and is not the cluster's (its spec changed since the caller
// read it) fails with ABORTED and changes nothing.
func (s *State) UpdateCluster(p Params, cmd *eventsv1.UpdateCluster, now time.Time) Change {
	e := s.edit(p, now)
	op, name := cmd.GetOperation(), cmd.GetCluster().GetName()
	c := s.Clusters[name]
	if c == nil {
		return only(failed(op, name, errs.NotFound, fmt.Sprintf("cluster %s not found", name)))
	}
	if op != "" && c.Operation == op {
		return Change{} // the same update, delivered again
	}
	// The caller's etag is checked here, against the spec this decision
	// changes (the gateway's own check races with other updates).
	if msg := clusterspec.EtagMismatch("update", name, cmd.GetEtag(), c.Cluster.GetEtag()); msg != "" {
		return only(failed(op, name, errs.Aborted, msg))
	}
	in := proto.Clone(cmd.GetCluster()).(*loomv1.Cluster)
	in.Name = name
	next, err := clusterspec.ApplyUpdate(c.Cluster, in, cmd.GetUpdateMask())
	// A change that moves no node has nothing to wait for: it applies at
	// once, during a create or an update too (admins take a partition
	// DOWN when nodes break or the cluster is being changed), and with a
	// pool below target, which would otherwise hold it UPDATING until the
	// operation timeout.
	instant := err == nil && clusterspec.MovesNoNode(spec.Normalize(c.Cluster), next)
	switch c.State() {
	case loomv1.Cluster_CREATING, loomv1.Cluster_UPDATING:
		if instant {
			break
		}
		fallthrough
	case loomv1.Cluster_DELETING:
		return only(failed(op, name, errs.FailedPrecondition, fmt.Sprintf("cluster %s is %s (operation %s); update it when that ends",
			name, c.State(), c.Operation)))
	}
	var v errs.Validator
	violations(&v, "cluster", err)
	if err == nil {
		e.checkProviderLimits(&v, next)
	}
	if err := v.Err(); err != nil {
		return only(failed(op, name, err, err.Error()))
	}

	// A pool an earlier update removed keeps its id until its last node is
	// gone: one id cannot be counted both as retiring and as wanted.
	for _, np := range next.GetCompute().GetNodePools() {
		if slices.ContainsFunc(c.Retired, func(r *loomv1.NodePool) bool { return r.GetId() == np.GetId() }) {
			return only(failed(op, name, errs.FailedPrecondition, fmt.Sprintf(
				"node pool %q of cluster %s is still being removed (its nodes drain, then go); add it back once they are gone (loom nodes list --cluster %s)",
				np.GetId(), name, name[strings.LastIndexByte(name, '/')+1:])))
		}
	}

	if msg := s.agentNameTaken(name, next); msg != "" {
		return only(failed(op, name, errs.AlreadyExists, msg))
	}

	rec := c.clone()
	next.Name, next.Status, next.CreateTime = name, rec.Cluster.Status, c.Cluster.GetCreateTime()
	rec.Cluster = next
	if instant {
		// Stored, re-rendered and emitted now, the operation done in the
		// same ClusterChanged; the cluster's own operation (a create or
		// an update in progress) and its deadline go on unchanged.
		e.putCluster(rec)
		e.members[name] = true
		e.instant[name] = op
		return e.change()
	}
	inNew := map[string]bool{}
	for _, np := range next.GetCompute().GetNodePools() {
		inNew[np.GetId()] = true
	}
	for _, old := range c.Cluster.GetCompute().GetNodePools() {
		if !inNew[old.GetId()] {
			rec.Retired = append(rec.Retired, old)
		}
	}
	nodes := e.clusterNodes(name)
	problems := e.checkReservations(next, next.GetCompute().GetNodePools())
	if len(problems) == 0 {
		problems = e.checkCapacity(rec, Claims(rec, nodes), Claims(c, nodes))
	}
	if len(problems) > 0 {
		return only(failed(op, name, errs.FailedPrecondition, strings.Join(problems, "; ")))
	}

	rec.Cluster.Status.State = loomv1.Cluster_UPDATING
	rec.Operation, rec.Deadline = op, now.Add(e.p.OperationTimeout)
	e.putCluster(rec)
	e.members[name] = true
	grace := e.p.DrainGrace
	if cmd.GetDrainGraceSeconds() > 0 {
		grace = time.Duration(cmd.GetDrainGraceSeconds()) * time.Second
	}
	for _, np := range next.GetCompute().GetNodePools() {
		why := fmt.Sprintf("pool %s shrinks to %d node", np.GetId(), np.GetNodeCount())
		if np.GetNodeCount() != 1 {
			why += "s"
		}
		e.resize(rec, np, np.GetNodeCount(), grace, why)
	}
	for _, np := range rec.Retired {
		e.resize(rec, np, 0, grace, "pool "+np.GetId()+" is removed from the cluster")
	}
	e.resizeLogin(rec, int(next.GetOrchestrator().GetSlurm().GetLoginNodes().GetCount()))
	return e.change()
}

// agentKeys returns what a cluster's agents' names are made of, per
// hostname prefix its compute nodes have or may get: "<cluster id>-<prefix>"
// (an agent is service.AgentName: "agent-<cluster id>-<prefix>-<NNNN>"; a
// pool id or node set id cannot end in "-" and digits, so the key and the
// number are the name's only split). The prefixes are its pools' in spec
// c (clusterspec.HostPrefix) and every one it has numbered hosts under
// (NextIndex: pools removed, whose nodes may still drain, included; the
// login nodes' counter, <cluster id>-login, is not a prefix of agents).
func agentKeys(id string, c *loomv1.Cluster, used map[string]int32) map[string]bool {
	out := map[string]bool{}
	for _, np := range c.GetCompute().GetNodePools() {
		out[id+"-"+clusterspec.HostPrefix(c, np.GetId())] = true
	}
	for prefix := range used {
		if prefix != id+"-login" {
			out[id+"-"+prefix] = true
		}
	}
	return out
}

// agentNameTaken checks that no pool of next (the spec a create or an
// update of cluster name would give it) makes agent names another
// cluster's nodes have or may get: cluster "a" with pool "b-c" and
// cluster "a-b" with pool "c" both have agent-a-b-c-0001, which would
// share one Redis prefix and ACL user, one consumer group and one file_sd
// file, across projects too. It returns the refusal, naming the field
// (the pool's id, or the node set's where the node set's id differs) and
// not the other cluster unless it is in the same project (cluster ids are
// unique across projects, so this one namespace is too), or "". Prefixes
// the cluster already has are not checked again: a clash that an earlier
// version let in does not block the cluster's other updates.
func (s *State) agentNameTaken(name string, next *loomv1.Cluster) string {
	id := ClusterID(name)
	own := map[string]bool{}
	if c := s.Clusters[name]; c != nil {
		own = agentKeys(id, c.Cluster, c.NextIndex)
	}
	if !slices.ContainsFunc(next.GetCompute().GetNodePools(), func(np *loomv1.NodePool) bool {
		return !own[id+"-"+clusterspec.HostPrefix(next, np.GetId())]
	}) {
		return "" // no new prefix (most updates)
	}
	taken := map[string]string{} // key → the cluster whose it is
	for _, c := range s.Clusters {
		if c.Name() == name {
			continue
		}
		for k := range agentKeys(ClusterID(c.Name()), c.Cluster, c.NextIndex) {
			taken[k] = c.Name()
		}
	}
	for i, np := range next.GetCompute().GetNodePools() {
		prefix := clusterspec.HostPrefix(next, np.GetId())
		k := id + "-" + prefix
		other, clash := taken[k]
		if !clash || own[k] {
			continue
		}
		field := fmt.Sprintf("compute.node_pools[%d].id", i)
		for j, ns := range next.GetOrchestrator().GetSlurm().GetNodeSets() {
			if ns.GetNodePoolId() == np.GetId() && ns.GetId() != np.GetId() {
				field = fmt.Sprintf("orchestrator.slurm.node_sets[%d].id", j)
			}
		}
		whose := "another cluster's"
		if o, ok := clusterOf(other); ok {
			if me, _ := clusterOf(name); me.Project == o.Project {
				whose = "cluster " + o.ID + "'s"
			}
		}
		return fmt.Sprintf("%s: hostname prefix %q would name the agents of cluster %s's nodes agent-%s-NNNN, as %s are named "+
			"(an agent is agent-<cluster id>-<hostname>, one namespace across projects): choose another id for it, or for the cluster", field, prefix, id, k, whose)
	}
	return ""
}

// hostNumber is the number at the end of a hostname (0 when none).
func hostNumber(host string) int {
	i := len(host)
	for i > 0 && host[i-1] >= '0' && host[i-1] <= '9' {
		i--
	}
	n, _ := strconv.Atoi(host[i:])
	return n
}

// byNumberDesc sorts nodes highest-numbered first.
func byNumberDesc(ns []*loomv1.Node) {
	sort.SliceStable(ns, func(i, j int) bool {
		a, b := hostNumber(ns[i].GetHostname()), hostNumber(ns[j].GetHostname())
		if a != b {
			return a > b
		}
		return ns[i].GetHostname() > ns[j].GetHostname()
	})
}

// isLive reports whether a node is, or is becoming, in service (a node
// being repaired is: it comes back, or its replacement takes its place).
func isLive(n *loomv1.Node) bool {
	switch n.GetState() {
	case loomv1.Node_PROVISIONING, loomv1.Node_READY, loomv1.Node_DOWN,
		loomv1.Node_REBOOTING, loomv1.Node_REIMAGING, loomv1.Node_REPLACING:
		return true
	}
	return false
}

// poolNodes returns a pool's compute nodes.
func (e *edit) poolNodes(cluster, pool string) []*loomv1.Node {
	var out []*loomv1.Node
	for _, n := range e.clusterNodes(cluster) {
		if n.GetRole() != clusterspec.RoleLogin && n.GetNodePool() == pool {
			out = append(out, n)
		}
	}
	return out
}

// shrinkOrder sorts the nodes a pool may give up in the order it gives
// them up: those that never came up (PROVISIONING) first, then those out
// of service (DOWN, or being repaired), then those in service (READY),
// each highest-numbered first. A shrink keeps the nodes that work, as a
// managed instance group's resize removes unhealthy instances first:
// draining a healthy node while keeping a broken one would requeue jobs
// for nothing and leave less capacity than asked for.
func shrinkOrder(ns []*loomv1.Node) {
	class := func(n *loomv1.Node) int {
		switch n.GetState() {
		case loomv1.Node_PROVISIONING:
			return 0
		case loomv1.Node_READY:
			return 2
		}
		return 1
	}
	byNumberDesc(ns)
	sort.SliceStable(ns, func(i, j int) bool { return class(ns[i]) < class(ns[j]) })
}

// resize brings a pool's live nodes to target: new nodes, or the ones
// shrinkOrder gives up first drained (READY, DOWN, being repaired) or
// removed (PROVISIONING), with why as their reason.
func (e *edit) resize(rec *Cluster, np *loomv1.NodePool, target int32, grace time.Duration, why string) {
	var live []*loomv1.Node
	for _, n := range e.poolNodes(rec.Name(), np.GetId()) {
		if isLive(n) {
			live = append(live, n)
		}
	}
	if int32(len(live)) < target {
		e.addComputeNodes(rec, np, int(target)-len(live))
		return
	}
	shrinkOrder(live)
	deadline := e.now.Add(grace)
	for _, victim := range live[:len(live)-int(target)] {
		n := e.mutNode(victim.GetName())
		n.Reason = why
		if n.GetState() == loomv1.Node_PROVISIONING {
			n.State, n.NextAction = loomv1.Node_DELETING, "stop and remove"
			continue
		}
		n.State = loomv1.Node_DRAINING
		n.DrainDeadline = timestamppb.New(deadline)
		n.NextAction = fmt.Sprintf("remove once its jobs end (they are requeued at %s)", deadline.UTC().Format(time.RFC3339))
	}
}

// resizeLogin brings the login nodes to count: records only, so they come
// and go at once.
func (e *edit) resizeLogin(rec *Cluster, count int) {
	var login []*loomv1.Node
	for _, n := range e.clusterNodes(rec.Name()) {
		if n.GetRole() == clusterspec.RoleLogin {
			login = append(login, n)
		}
	}
	if len(login) < count {
		e.addLoginNodes(rec, count-len(login))
		return
	}
	byNumberDesc(login)
	for _, n := range login[:len(login)-count] {
		e.delNode(n.GetName())
	}
}

// blockName names the index-th (from 1) network block of a pool.
func blockName(pool string, index int) string { return fmt.Sprintf("%s-block-%02d", pool, index) }

// nextHostname takes the next unused number for a hostname prefix.
func (e *edit) nextHostname(rec *Cluster, key string, format func(int) string) string {
	for {
		rec.NextIndex[key]++
		host := format(int(rec.NextIndex[key]))
		if e.node(resname.NodeIn(rec.Name(), host)) == nil {
			return host
		}
	}
}

// addComputeNodes creates count PROVISIONING nodes of pool np in the
// working record rec, each in the first network block of the pool with room.
func (e *edit) addComputeNodes(rec *Cluster, np *loomv1.NodePool, count int) []*loomv1.Node {
	if count <= 0 {
		return nil
	}
	name, id := rec.Name(), ClusterID(rec.Name())
	prefix := clusterspec.HostPrefix(rec.Cluster, np.GetId())
	size := max(spec.BlockSize(np.GetMachineType()), 1)
	inBlock := map[string]int{}
	for _, n := range e.poolNodes(name, np.GetId()) {
		if n.GetState() != loomv1.Node_FAILED {
			inBlock[n.GetBlock()]++
		}
	}
	ts := timestamppb.New(e.now)
	capType := np.GetCapacity().GetType()
	if capType == loomv1.CapacitySource_TYPE_UNSPECIFIED {
		capType = loomv1.CapacitySource_ON_DEMAND
	}
	out := make([]*loomv1.Node, 0, count)
	// Blocks only fill up within this loop, so the search for the first one
	// with room resumes where the last one ended instead of from block 1
	// (which made a 10,000-node create quadratic).
	b := 1
	for range count {
		host := e.nextHostname(rec, prefix, func(i int) string { return clusterspec.Hostname(prefix, i) })
		for inBlock[blockName(np.GetId(), b)] >= size {
			b++
		}
		block := blockName(np.GetId(), b)
		inBlock[block]++
		n := &loomv1.Node{
			Name: resname.NodeIn(name, host), Cluster: name, NodePool: np.GetId(), Hostname: host,
			State: loomv1.Node_PROVISIONING, Gpus: np.GetAcceleratorCount(), AcceleratorType: np.GetAcceleratorType(),
			CreateTime: ts, WorkDir: e.p.WorkDir(id, host), MachineType: np.GetMachineType(), Zone: np.GetZone(),
			CapacityType: capType, Block: block, Role: clusterspec.RoleCompute,
			NextAction: fmt.Sprintf("launch, then wait for its agent to register (boot timeout %s)", e.p.BootTimeout),
		}
		e.putNode(n)
		out = append(out, n)
	}
	e.putCluster(rec)
	return out
}

// addLoginNodes creates count login nodes: records only, READY at once.
func (e *edit) addLoginNodes(rec *Cluster, count int) {
	if count <= 0 {
		return
	}
	name, id := rec.Name(), ClusterID(rec.Name())
	ts := timestamppb.New(e.now)
	mt := rec.Cluster.GetOrchestrator().GetSlurm().GetLoginNodes().GetMachineType()
	for range count {
		host := e.nextHostname(rec, id+"-login", func(i int) string { return clusterspec.LoginHostname(id, i) })
		e.putNode(&loomv1.Node{
			Name: resname.NodeIn(name, host), Cluster: name, Hostname: host, State: loomv1.Node_READY, CreateTime: ts,
			MachineType: mt, Zone: clusterspec.LoginZone(rec.Cluster), CapacityType: loomv1.CapacitySource_ON_DEMAND, Role: clusterspec.RoleLogin,
		})
	}
	e.putCluster(rec)
}

// DeleteCluster decides a DeleteCluster command: the cluster and its nodes
// DELETING (the reconciler then stops and removes them and calls
// FinishDelete). A create or update still in progress fails with ABORTED so
// that its operation ends. A command whose etag is set and is not the
// cluster's fails with ABORTED and changes nothing.
func (s *State) DeleteCluster(cmd *eventsv1.DeleteCluster, now time.Time) Change {
	e := s.edit(Params{}, now)
	c := s.Clusters[cmd.GetCluster()]
	if c == nil {
		return only(failed(cmd.GetOperation(), cmd.GetCluster(), errs.NotFound, fmt.Sprintf("cluster %s not found", cmd.GetCluster())))
	}
	if c.State() == loomv1.Cluster_DELETING {
		if c.Operation == cmd.GetOperation() {
			return Change{}
		}
		return only(failed(cmd.GetOperation(), c.Name(), errs.FailedPrecondition,
			fmt.Sprintf("cluster %s is already being deleted by %s", c.Name(), c.Operation)))
	}
	if msg := clusterspec.EtagMismatch("delete", c.Name(), cmd.GetEtag(), c.Cluster.GetEtag()); msg != "" {
		return only(failed(cmd.GetOperation(), c.Name(), errs.Aborted, msg))
	}
	if c.Operation != "" {
		e.before = append(e.before, failed(c.Operation, c.Name(), errs.Aborted,
			fmt.Sprintf("cluster %s was deleted before the operation ended", c.Name())))
	}
	rec := e.mutCluster(c.Name())
	rec.Cluster.Status.State = loomv1.Cluster_DELETING
	rec.Cluster.Status.Message = "deleting"
	rec.Operation, rec.Deadline = cmd.GetOperation(), time.Time{}
	for _, n := range s.ClusterNodes(c.Name()) {
		nn := e.mutNode(n.GetName())
		nn.State, nn.Reason, nn.NextAction = loomv1.Node_DELETING, "cluster is being deleted", "stop and remove"
	}
	return e.change()
}

// TeardownFailed says on a DELETING cluster why the reconciler's last
// attempt to tear it down failed (why: what failed, e.g. "could not stop
// gpu-0001: ..."), in its status message, which is its delete operation's
// progress: a delete the provider keeps failing says so instead of
// "deleting" for ever. The reconciler retries every pass; nothing is
// written when the message is already the same.
func (s *State) TeardownFailed(cluster, why string) Change {
	c := s.Clusters[cluster]
	if c == nil || c.State() != loomv1.Cluster_DELETING {
		return Change{}
	}
	msg := "deleting; the last teardown attempt failed, retrying: " + why
	if c.Cluster.GetStatus().GetMessage() == msg {
		return Change{}
	}
	e := s.edit(Params{}, time.Time{})
	e.mutCluster(cluster).Cluster.Status.Message = msg
	return e.change()
}

// retryingRemoval begins a DELETING node's next action once stopping or
// removing it failed (RetireFailed).
const retryingRemoval = "stop and remove; the last attempt failed, retrying: "

// RetireFailed records on a DELETING node (one a shrink or a removed pool
// gives up) why stopping or removing it failed, as its next action, and
// refreshes its cluster, whose message (an update's progress) then says
// it: an update waits for its DELETING nodes with no deadline, and said
// only "1 draining" for as long as the provider failed. Written only when
// the reason changes.
func (s *State) RetireFailed(node, why string) Change {
	n := s.Nodes[node]
	if n == nil || n.GetState() != loomv1.Node_DELETING || n.GetNextAction() == retryingRemoval+why {
		return Change{}
	}
	e := s.edit(Params{}, time.Time{})
	e.mutNode(node).NextAction = retryingRemoval + why
	e.refresh(n.GetCluster())
	return e.change()
}

// FinishDelete removes a DELETING cluster's records once its nodes are
// stopped and their directories removed: NodeRemoved per node, then
// ClusterDeleted for the delete operation. The capacity it claimed is free
// with the same write.
func (s *State) FinishDelete(cluster string) Change {
	c := s.Clusters[cluster]
	if c == nil || c.State() != loomv1.Cluster_DELETING {
		return Change{}
	}
	e := s.edit(Params{}, time.Time{})
	e.delCl = []string{cluster}
	for _, n := range s.ClusterNodes(cluster) {
		e.delNode(n.GetName())
	}
	if s.Slurm[cluster] != nil {
		e.delSlurm = []string{cluster}
	}
	e.after = append(e.after, &eventsv1.ClusterDeleted{Operation: c.Operation, Cluster: cluster})
	return e.change()
}

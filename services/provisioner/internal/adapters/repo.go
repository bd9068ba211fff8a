// Package adapters turns the provisioner's domain records and changes into
// Redis state and bus events, and back.
//
// Redis layout under the "provisioner:" prefix:
//
//	clusters      hash: cluster name → {"cluster": <protojson Cluster>, "operation", "create_operation",
//	              "deadline", "next_index", "retired": [<protojson NodePool>]}
//	nodes         hash: node name → protojson Node
//	reservations  hash: reservation name → protojson Reservation (in_use and consumers are derived, not stored)
//	slurm         hash: cluster name → protojson SlurmConfig
//	repairs       hash: node name → JSON repair record (domain.Repair; see repairRecord)
package adapters

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/store"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/provisioner/internal/domain"
)

// Source is the CloudEvents source of the provisioner's events.
const Source = "loom/provisioner"

// Redis keys relative to the store's prefix.
const (
	KeyClusters     = "clusters"
	KeyNodes        = "nodes"
	KeyReservations = "reservations"
	KeySlurm        = "slurm"
	KeyRepairs      = "repairs"
	// KeyRevokedNodes and KeyRevokedNodesVersion are auth.RevokedNodesKey
	// and auth.RevokedNodesVersionKey under the provisioner's prefix
	// ("provisioner:"), where every service reads them.
	KeyRevokedNodes        = "revoked-nodes"
	KeyRevokedNodesVersion = "revoked-nodes:version"
)

// repairRecord is a domain.Repair in Redis; the action by its enum name.
type repairRecord struct {
	ID          string    `json:"remediation_id"`
	Node        string    `json:"node"`
	Cluster     string    `json:"cluster"`
	Action      string    `json:"action"`
	Reason      string    `json:"reason,omitempty"`
	BootID      string    `json:"boot_id"`
	Phase       string    `json:"phase"`
	Target      string    `json:"target"`
	Replacement string    `json:"replacement,omitempty"`
	Started     time.Time `json:"started"`
	Deadline    time.Time `json:"deadline"`
	PID         int32     `json:"pid,omitempty"`
}

// EncodeRepair encodes a repair record for Redis.
func EncodeRepair(r *domain.Repair) ([]byte, error) {
	return json.Marshal(repairRecord{ID: r.ID, Node: r.Node, Cluster: r.Cluster, Action: r.Action.String(), Reason: r.Reason,
		BootID: r.BootID, Phase: string(r.Phase), Target: r.Target, Replacement: r.Replacement,
		Started: r.Started.UTC(), Deadline: r.Deadline.UTC(), PID: r.PID})
}

// DecodeRepair decodes what EncodeRepair wrote.
func DecodeRepair(b []byte) (*domain.Repair, error) {
	var r repairRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("decode repair record: %w", err)
	}
	action, ok := loomv1.RemediationAction_value[r.Action]
	if !ok {
		return nil, fmt.Errorf("decode repair record of %s: unknown action %q", r.Node, r.Action)
	}
	return &domain.Repair{ID: r.ID, Node: r.Node, Cluster: r.Cluster, Action: loomv1.RemediationAction(action), Reason: r.Reason,
		BootID: r.BootID, Phase: domain.RepairPhase(r.Phase), Target: r.Target, Replacement: r.Replacement,
		Started: r.Started, Deadline: r.Deadline, PID: r.PID}, nil
}

type clusterRecord struct {
	Cluster         json.RawMessage   `json:"cluster"`
	Operation       string            `json:"operation,omitempty"`
	CreateOperation string            `json:"create_operation,omitempty"`
	Deadline        *time.Time        `json:"deadline,omitempty"`
	NextIndex       map[string]int32  `json:"next_index,omitempty"`
	Retired         []json.RawMessage `json:"retired,omitempty"`
}

// EncodeCluster encodes a cluster record for Redis.
func EncodeCluster(c *domain.Cluster) ([]byte, error) {
	cl, err := protojson.Marshal(c.Cluster)
	if err != nil {
		return nil, fmt.Errorf("encode cluster %s: %w", c.Name(), err)
	}
	r := clusterRecord{Cluster: cl, Operation: c.Operation, CreateOperation: c.CreateOperation, NextIndex: c.NextIndex}
	if !c.Deadline.IsZero() {
		d := c.Deadline.UTC()
		r.Deadline = &d
	}
	for _, np := range c.Retired {
		b, err := protojson.Marshal(np)
		if err != nil {
			return nil, fmt.Errorf("encode cluster %s: retired pool: %w", c.Name(), err)
		}
		r.Retired = append(r.Retired, b)
	}
	return json.Marshal(r)
}

// DecodeCluster decodes what EncodeCluster wrote.
func DecodeCluster(b []byte) (*domain.Cluster, error) {
	var r clusterRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("decode cluster record: %w", err)
	}
	cl := &loomv1.Cluster{}
	if err := protojson.Unmarshal(r.Cluster, cl); err != nil {
		return nil, fmt.Errorf("decode cluster record: %w", err)
	}
	c := &domain.Cluster{Cluster: cl, Operation: r.Operation, CreateOperation: r.CreateOperation, NextIndex: r.NextIndex}
	if c.NextIndex == nil {
		c.NextIndex = map[string]int32{}
	}
	if r.Deadline != nil {
		c.Deadline = *r.Deadline
	}
	for _, b := range r.Retired {
		np := &loomv1.NodePool{}
		if err := protojson.Unmarshal(b, np); err != nil {
			return nil, fmt.Errorf("decode cluster record: retired pool: %w", err)
		}
		c.Retired = append(c.Retired, np)
	}
	return c, nil
}

// Load reads every record into a State.
func Load(ctx context.Context, st *store.Store) (*domain.State, error) {
	cm, err := st.HGetAll(ctx, KeyClusters)
	if err != nil {
		return nil, fmt.Errorf("load clusters: %w", err)
	}
	var clusters []*domain.Cluster
	for name, b := range cm {
		c, err := DecodeCluster(b)
		if err != nil {
			return nil, fmt.Errorf("load cluster %s: %w", name, err)
		}
		clusters = append(clusters, c)
	}
	nodes, err := loadAll(ctx, st, KeyNodes, func() *loomv1.Node { return &loomv1.Node{} })
	if err != nil {
		return nil, err
	}
	reservations, err := loadAll(ctx, st, KeyReservations, func() *loomv1.Reservation { return &loomv1.Reservation{} })
	if err != nil {
		return nil, err
	}
	sm, err := st.HGetAll(ctx, KeySlurm)
	if err != nil {
		return nil, fmt.Errorf("load slurm: %w", err)
	}
	slurm := map[string]*loomv1.SlurmConfig{}
	for name, b := range sm {
		c := &loomv1.SlurmConfig{}
		if err := protojson.Unmarshal(b, c); err != nil {
			return nil, fmt.Errorf("load slurm config of %s: %w", name, err)
		}
		slurm[name] = c
	}
	rm, err := st.HGetAll(ctx, KeyRepairs)
	if err != nil {
		return nil, fmt.Errorf("load repairs: %w", err)
	}
	var repairs []*domain.Repair
	for name, b := range rm {
		r, err := DecodeRepair(b)
		if err != nil {
			return nil, fmt.Errorf("load repair of %s: %w", name, err)
		}
		repairs = append(repairs, r)
	}
	vm, err := st.HGetAll(ctx, KeyRevokedNodes)
	if err != nil {
		return nil, fmt.Errorf("load revoked nodes: %w", err)
	}
	revoked := map[string]auth.NodeRevocation{}
	for name, b := range vm {
		// One that does not decode is rewritten by the node's next
		// removal, or left to the readers, which skip it.
		if r, err := auth.DecodeNodeRevocation(b); err == nil {
			revoked[name] = r
		}
	}
	s := domain.NewState(clusters, nodes, reservations, slurm)
	s.Apply(domain.Change{PutRepairs: repairs, PutRevocations: revoked})
	return s, nil
}

// loadAll decodes every protojson value of a hash.
func loadAll[T proto.Message](ctx context.Context, st *store.Store, key string, fresh func() T) ([]T, error) {
	m, err := st.HGetAll(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", key, err)
	}
	out := make([]T, 0, len(m))
	for name, b := range m {
		v := fresh()
		if err := protojson.Unmarshal(b, v); err != nil {
			return nil, fmt.Errorf("load %s %s: %w", key, name, err)
		}
		out = append(out, v)
	}
	return out, nil
}

// Tx turns a domain change into a store transaction: records written and
// deleted, events emitted in order.
func Tx(ch domain.Change) (*store.Tx, error) {
	var tx store.Tx
	for _, c := range ch.PutClusters {
		b, err := EncodeCluster(c)
		if err != nil {
			return nil, err
		}
		tx.HSet(KeyClusters, c.Name(), b)
	}
	for _, n := range ch.PutNodes {
		b, err := protojson.Marshal(n)
		if err != nil {
			return nil, fmt.Errorf("encode node %s: %w", n.GetName(), err)
		}
		tx.HSet(KeyNodes, n.GetName(), b)
	}
	for _, r := range ch.PutReservations {
		b, err := protojson.Marshal(r)
		if err != nil {
			return nil, fmt.Errorf("encode reservation %s: %w", r.GetName(), err)
		}
		tx.HSet(KeyReservations, r.GetName(), b)
	}
	for name, c := range ch.PutSlurm {
		b, err := protojson.Marshal(c)
		if err != nil {
			return nil, fmt.Errorf("encode slurm config of %s: %w", name, err)
		}
		tx.HSet(KeySlurm, name, b)
	}
	for _, name := range ch.DelNodes {
		tx.HDel(KeyNodes, name)
	}
	for _, name := range ch.DelReservations {
		tx.HDel(KeyReservations, name)
	}
	for _, name := range ch.DelSlurm {
		tx.HDel(KeySlurm, name)
	}
	for _, name := range ch.DelClusters {
		tx.HDel(KeyClusters, name)
	}
	for _, r := range ch.PutRepairs {
		b, err := EncodeRepair(r)
		if err != nil {
			return nil, fmt.Errorf("encode repair of %s: %w", r.Node, err)
		}
		tx.HSet(KeyRepairs, r.Node, b)
	}
	for _, name := range ch.DelRepairs {
		tx.HDel(KeyRepairs, name)
	}
	for _, name := range sortedKeys(ch.PutRevocations) {
		b, err := auth.EncodeNodeRevocation(ch.PutRevocations[name])
		if err != nil {
			return nil, fmt.Errorf("encode revocation of %s: %w", name, err)
		}
		tx.HSet(KeyRevokedNodes, name, b)
	}
	for _, name := range ch.DelRevocations {
		tx.HDel(KeyRevokedNodes, name)
	}
	if len(ch.PutRevocations) > 0 || len(ch.DelRevocations) > 0 {
		// Readers poll this, and read the list when it changed.
		tx.Set(KeyRevokedNodesVersion, []byte(envelope.NewID()))
	}
	for _, p := range ch.Events {
		ev, err := Event(p)
		if err != nil {
			return nil, err
		}
		tx.Emit(ev)
	}
	return &tx, nil
}

// Event wraps a payload the provisioner emits in an envelope, keyed by the
// entity it is about (cluster events by cluster or reservation, node events
// by node), on the topic libs/topics routes its type to.
func Event(p proto.Message) (envelope.Event, error) {
	var key string
	switch m := p.(type) {
	case *eventsv1.ClusterChanged:
		key = m.GetCluster().GetName()
	case *eventsv1.ClusterOperationFailed:
		key = m.GetCluster()
	case *eventsv1.ClusterDeleted:
		key = m.GetCluster()
	case *eventsv1.ReservationChanged:
		key = m.GetReservation().GetName()
	case *eventsv1.ReservationDeleted:
		key = m.GetReservation()
	case *eventsv1.NodeChanged:
		key = m.GetNode().GetName()
	case *eventsv1.NodeRemoved:
		key = m.GetNode()
	case *eventsv1.RemediationFinished:
		key = m.GetNode()
	case *eventsv1.RemediationProgress:
		key = m.GetNode()
	default:
		return envelope.Event{}, fmt.Errorf("provisioner does not emit %T", p)
	}
	if key == "" {
		// A failure for a create without a cluster name still needs a key.
		key = "unnamed"
	}
	return envelope.Route(key, Source, p)
}

// sortedKeys returns m's keys in order, so that a transaction's ops do not
// depend on map order.
func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

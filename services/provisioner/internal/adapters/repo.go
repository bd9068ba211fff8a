// Package adapters turns the provisioner's domain records and changes into
// Redis state and bus events, and back.
//
// Redis layout under the "provisioner:" prefix:
//
//	clusters  hash: cluster name → {"cluster": <protojson Cluster>, "operation", "create_operation"}
//	nodes     hash: node name → protojson Node
package adapters

import (
	"context"
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/provisioner/internal/domain"
)

// Source is the CloudEvents source of the provisioner's events.
const Source = "loom/provisioner"

// Redis keys relative to the store's prefix.
const (
	KeyClusters = "clusters"
	KeyNodes    = "nodes"
)

type clusterRecord struct {
	Cluster         json.RawMessage `json:"cluster"`
	Operation       string          `json:"operation,omitempty"`
	CreateOperation string          `json:"create_operation,omitempty"`
}

// EncodeCluster encodes a cluster record for Redis.
func EncodeCluster(c *domain.Cluster) ([]byte, error) {
	cl, err := protojson.Marshal(c.Cluster)
	if err != nil {
		return nil, fmt.Errorf("encode cluster %s: %w", c.Name(), err)
	}
	return json.Marshal(clusterRecord{Cluster: cl, Operation: c.Operation, CreateOperation: c.CreateOperation})
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
	return &domain.Cluster{Cluster: cl, Operation: r.Operation, CreateOperation: r.CreateOperation}, nil
}

// Load reads every cluster and node record.
func Load(ctx context.Context, st *store.Store) ([]*domain.Cluster, []*loomv1.Node, error) {
	cm, err := st.HGetAll(ctx, KeyClusters)
	if err != nil {
		return nil, nil, fmt.Errorf("load clusters: %w", err)
	}
	var clusters []*domain.Cluster
	for name, b := range cm {
		c, err := DecodeCluster(b)
		if err != nil {
			return nil, nil, fmt.Errorf("load cluster %s: %w", name, err)
		}
		clusters = append(clusters, c)
	}
	nm, err := st.HGetAll(ctx, KeyNodes)
	if err != nil {
		return nil, nil, fmt.Errorf("load nodes: %w", err)
	}
	var nodes []*loomv1.Node
	for name, b := range nm {
		n := &loomv1.Node{}
		if err := protojson.Unmarshal(b, n); err != nil {
			return nil, nil, fmt.Errorf("load node %s: %w", name, err)
		}
		nodes = append(nodes, n)
	}
	return clusters, nodes, nil
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
	for _, name := range ch.DelNodes {
		tx.HDel(KeyNodes, name)
	}
	for _, name := range ch.DelClusters {
		tx.HDel(KeyClusters, name)
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

// Event wraps a payload the provisioner emits in an envelope on its topic,
// keyed as package topics says (cluster events by cluster, node events by node).
func Event(p proto.Message) (envelope.Event, error) {
	var topic, key string
	switch m := p.(type) {
	case *eventsv1.ClusterChanged:
		topic, key = topics.ClusterEvents, m.GetCluster().GetName()
	case *eventsv1.ClusterOperationFailed:
		topic, key = topics.ClusterEvents, m.GetCluster()
	case *eventsv1.ClusterDeleted:
		topic, key = topics.ClusterEvents, m.GetCluster()
	case *eventsv1.NodeChanged:
		topic, key = topics.NodeEvents, m.GetNode().GetName()
	case *eventsv1.NodeRemoved:
		topic, key = topics.NodeEvents, m.GetNode()
	default:
		return envelope.Event{}, fmt.Errorf("provisioner does not emit %T", p)
	}
	if key == "" {
		// A failure for a create without a cluster name still needs a key.
		key = "unnamed"
	}
	return envelope.New(topic, key, Source, p), nil
}

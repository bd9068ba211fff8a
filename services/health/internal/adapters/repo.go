// Package adapters keeps the health service's records in Redis through
// libs/store: the hash "health:nodes" maps a node name to its JSON Node (the
// membership and the verdict); the hash "health:remedy" maps a node name to
// its JSON remediation record, and "health:remedy_rng" holds the remediation
// machine's generator, so that the machine restores exactly; the hash
// "health:last_xid" maps a node name to its GPUs' last judged last_xid
// (JSON, GPU index to Xid), written only when it changes. Last-seen times
// and telemetry samples are deliberately not stored. The stream
// "health:history:<cluster>" keeps the last HistoryLen NodeHealthChanged
// events of the cluster's nodes (as loom.v1.NodeHealthEvent), appended in
// the Apply that emits them: what `loom health events` lists; it goes when
// the cluster's last node leaves.
package adapters

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/store"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/health/internal/domain"
	"github.com/loom-ml/loom/services/health/internal/remedy"
)

// Keys of the records, relative to the store's prefix.
const (
	KeyNodes     = "nodes"
	KeyRemedy    = "remedy"
	KeyRemedyRNG = "remedy_rng"
	KeyLastXid   = "last_xid"
	// KeyHistory prefixes each cluster's history stream.
	KeyHistory = "history:"
)

// HistoryLen is about how many events a cluster's history keeps (the
// stream is trimmed by whole nodes: a few more may stay).
const HistoryLen = 1000

// LoadXids reads every node's last judged last_xid per GPU.
func LoadXids(ctx context.Context, st *store.Store) (map[string]map[int32]int32, error) {
	raw, err := st.HGetAll(ctx, KeyLastXid)
	if err != nil {
		return nil, fmt.Errorf("load last_xid: %w", err)
	}
	out := make(map[string]map[int32]int32, len(raw))
	for name, b := range raw {
		m := map[int32]int32{}
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("load last_xid of %s: %w", name, err)
		}
		out[name] = m
	}
	return out, nil
}

// LoadNodes reads every node record.
func LoadNodes(ctx context.Context, st *store.Store) ([]*domain.Node, error) {
	raw, err := st.HGetAll(ctx, KeyNodes)
	if err != nil {
		return nil, fmt.Errorf("load nodes: %w", err)
	}
	out := make([]*domain.Node, 0, len(raw))
	for name, b := range raw {
		n := &domain.Node{}
		if err := json.Unmarshal(b, n); err != nil {
			return nil, fmt.Errorf("load node %s: %w", name, err)
		}
		out = append(out, n)
	}
	return out, nil
}

// LoadRemedy reads the remediation machine's snapshot (empty when nothing
// was stored yet).
func LoadRemedy(ctx context.Context, st *store.Store) (remedy.Snapshot, error) {
	var s remedy.Snapshot
	raw, err := st.HGetAll(ctx, KeyRemedy)
	if err != nil {
		return s, fmt.Errorf("load remediation: %w", err)
	}
	for name, b := range raw {
		n := &remedy.Node{}
		if err := json.Unmarshal(b, n); err != nil {
			return s, fmt.Errorf("load remediation of %s: %w", name, err)
		}
		s.Nodes = append(s.Nodes, n)
	}
	rng, err := st.Get(ctx, KeyRemedyRNG)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return s, fmt.Errorf("load remediation generator: %w", err)
	}
	s.RNG = rng
	return s, nil
}

// Write adds the node records of c to tx (a nil record deletes, with the
// node's last_xid), its last_xid records, and the remediation records and
// generator its machine step changed.
func Write(tx *store.Tx, c *domain.Change) error {
	for name, n := range c.Nodes {
		if n == nil {
			tx.HDel(KeyNodes, name)
			tx.HDel(KeyLastXid, name)
			continue
		}
		b, err := json.Marshal(n)
		if err != nil {
			return fmt.Errorf("encode node %s: %w", name, err)
		}
		tx.HSet(KeyNodes, name, b)
	}
	for name, m := range c.Xids {
		if n, ok := c.Nodes[name]; ok && n == nil {
			continue
		}
		b, err := json.Marshal(m)
		if err != nil {
			return fmt.Errorf("encode last_xid of %s: %w", name, err)
		}
		tx.HSet(KeyLastXid, name, b)
	}
	if r := c.Remedy; r != nil && r.Durable() {
		for name, n := range r.Nodes {
			if n == nil {
				tx.HDel(KeyRemedy, name)
				continue
			}
			b, err := json.Marshal(n)
			if err != nil {
				return fmt.Errorf("encode remediation of %s: %w", name, err)
			}
			tx.HSet(KeyRemedy, name, b)
		}
		tx.Set(KeyRemedyRNG, r.RNG())
	}
	// The history-only records first: each says what happened before the
	// verdicts of the same step (a repair's end, then the drain that
	// holds the node).
	var history []*eventsv1.NodeHealthChanged
	if c.Remedy != nil {
		history = append(history, c.Remedy.History...)
	}
	for _, e := range c.AllEmits() {
		if h, ok := e.Payload.(*eventsv1.NodeHealthChanged); ok {
			history = append(history, h)
		}
	}
	for _, h := range history {
		b, err := proto.Marshal(historyEvent(h))
		if err != nil {
			return fmt.Errorf("encode the history of %s: %w", h.GetNode(), err)
		}
		tx.XAdd(KeyHistory+h.GetCluster(), HistoryLen, b)
	}
	for _, cl := range c.Emptied {
		tx.Del(KeyHistory + cl)
	}
	return nil
}

// historyEvent is what the history keeps of a health event.
func historyEvent(h *eventsv1.NodeHealthChanged) *loomv1.NodeHealthEvent {
	host := h.GetNode()
	if n, err := resname.SplitNode(host); err == nil {
		host = n.Host
	}
	return &loomv1.NodeHealthEvent{Time: h.GetTime(), Node: h.GetNode(), Hostname: host, State: h.GetState(),
		Reason: h.GetReason(), SetBy: h.GetSetBy(), Action: h.GetAction(), Repaired: h.GetRepaired(), Xid: h.GetXid()}
}

// History is a cluster's history, newest first, and each event's stream
// id (IDs, in the same order), which orders it.
type History struct {
	Events []*loomv1.NodeHealthEvent
	IDs    []string
}

// LoadHistory reads cluster's history (at most about HistoryLen events).
// An entry that does not decode is skipped: the history informs, and one
// bad entry must not hide the rest.
func LoadHistory(ctx context.Context, st *store.Store, cluster string) (History, error) {
	var h History
	entries, err := st.StreamEntries(ctx, KeyHistory+cluster, "", 2*HistoryLen)
	if err != nil {
		return h, err
	}
	for _, e := range entries {
		ev := &loomv1.NodeHealthEvent{}
		if proto.Unmarshal(e.Val, ev) != nil {
			continue
		}
		h.Events, h.IDs = append(h.Events, ev), append(h.IDs, e.ID)
	}
	return h, nil
}

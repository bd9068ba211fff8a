// Package adapters keeps the health service's records in Redis through
// libs/store: the hash "health:nodes" maps a node name to its JSON Node (the
// membership and the verdict); the hash "health:remedy" maps a node name to
// its JSON remediation record, and "health:remedy_rng" holds the remediation
// machine's generator, so that the machine restores exactly; the hash
// "health:last_xid" maps a node name to its GPUs' last judged last_xid
// (JSON, GPU index to Xid), written only when it changes. Last-seen times
// and telemetry samples are deliberately not stored.
package adapters

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/services/health/internal/domain"
	"github.com/loom-ml/loom/services/health/internal/remedy"
)

// Keys of the records, relative to the store's prefix.
const (
	KeyNodes     = "nodes"
	KeyRemedy    = "remedy"
	KeyRemedyRNG = "remedy_rng"
	KeyLastXid   = "last_xid"
)

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
	return nil
}

// Package adapters keeps the health service's records in Redis through
// libs/store: the hash "health:nodes" maps a node name to its JSON Node (the
// membership and the verdict); the hash "health:remedy" maps a node name to
// its JSON remediation record, and "health:remedy_rng" holds the remediation
// machine's generator, so that the machine restores exactly. Last-seen
// times are deliberately not stored.
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
)

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

// Write adds the node records of c to tx (a nil record deletes), and the
// remediation records and generator its machine step changed.
func Write(tx *store.Tx, c *domain.Change) error {
	for name, n := range c.Nodes {
		if n == nil {
			tx.HDel(KeyNodes, name)
			continue
		}
		b, err := json.Marshal(n)
		if err != nil {
			return fmt.Errorf("encode node %s: %w", name, err)
		}
		tx.HSet(KeyNodes, name, b)
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

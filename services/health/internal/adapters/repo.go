// Package adapters keeps the health service's records in Redis through
// libs/store: the hash "health:nodes" maps a node name to its JSON Node (the
// membership and the verdict). Last-seen times are deliberately not stored.
package adapters

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/services/health/internal/domain"
)

// KeyNodes is the hash of node records, relative to the store's prefix.
const KeyNodes = "nodes"

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

// Write adds the node records of c to tx (a nil record deletes).
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
	return nil
}

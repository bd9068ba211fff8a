// Package app runs the provisioner: it applies commands and events through the
// domain (decide → store.Apply → memory), serves reads from memory, and
// reconciles the provider with the durable desired state.
package app

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/loom-ml/loom/libs/store"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/provisioner/internal/adapters"
	"github.com/loom-ml/loom/services/provisioner/internal/domain"
	"github.com/loom-ml/loom/services/provisioner/internal/provider"
)

// Options configure an App. Zero durations take the documented defaults.
type Options struct {
	Store    *store.Store
	Provider provider.Provider
	Params   domain.Params
	Log      *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
	// ReconcileInterval is how often the reconciler runs without being woken
	// by a change (default 5 s).
	ReconcileInterval time.Duration
	// LaunchBackoff and MaxLaunchBackoff bound the delay before a node whose
	// launch failed is tried again (defaults 1 s and 1 min).
	LaunchBackoff, MaxLaunchBackoff time.Duration
}

// App is the provisioner's state and behaviour. Its methods are safe for
// concurrent use.
type App struct {
	opts Options
	log  *slog.Logger

	// mu serialises decisions with their writes, so that memory always
	// follows Redis in the order the writes happened.
	mu sync.RWMutex
	st *domain.State

	// kick wakes the reconciler after a change; capacity 1 coalesces bursts.
	kick chan struct{}

	// retries is the reconciler's launch backoff per node (reconciler only).
	retries map[string]*retry
}

type retry struct {
	failures int
	next     time.Time
}

// New loads the state from the store and returns the App.
func New(ctx context.Context, opts Options) (*App, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.ReconcileInterval <= 0 {
		opts.ReconcileInterval = 5 * time.Second
	}
	if opts.LaunchBackoff <= 0 {
		opts.LaunchBackoff = time.Second
	}
	if opts.MaxLaunchBackoff <= 0 {
		opts.MaxLaunchBackoff = time.Minute
	}
	clusters, nodes, err := adapters.Load(ctx, opts.Store)
	if err != nil {
		return nil, fmt.Errorf("provisioner: %w", err)
	}
	opts.Log.Info("state loaded", "clusters", len(clusters), "nodes", len(nodes))
	return &App{
		opts:    opts,
		log:     opts.Log,
		st:      domain.NewState(clusters, nodes),
		kick:    make(chan struct{}, 1),
		retries: map[string]*retry{},
	}, nil
}

// apply decides under the lock, writes the change with the inbox mark for
// inboxID ("" for none) and only then updates memory.
func (a *App) apply(ctx context.Context, inboxID string, decide func(*domain.State) domain.Change) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	ch := decide(a.st)
	if ch.Empty() && inboxID == "" {
		return nil
	}
	tx, err := adapters.Tx(ch)
	if err != nil {
		return err
	}
	applied, err := a.opts.Store.Apply(ctx, inboxID, tx)
	if err != nil {
		return fmt.Errorf("apply: %w", err)
	}
	if applied && !ch.Empty() {
		a.st.Apply(ch)
		select {
		case a.kick <- struct{}{}:
		default:
		}
	}
	return nil
}

// CreateCluster applies a CreateCluster command delivered as event id.
func (a *App) CreateCluster(ctx context.Context, id string, cmd *eventsv1.CreateCluster) error {
	return a.apply(ctx, id, func(s *domain.State) domain.Change {
		return s.CreateCluster(a.opts.Params, cmd, a.opts.Now())
	})
}

// DeleteCluster applies a DeleteCluster command delivered as event id.
func (a *App) DeleteCluster(ctx context.Context, id string, cmd *eventsv1.DeleteCluster) error {
	return a.apply(ctx, id, func(s *domain.State) domain.Change { return s.DeleteCluster(cmd, a.opts.Now()) })
}

// AgentRegistered applies an agent's registration delivered as event id.
func (a *App) AgentRegistered(ctx context.Context, id string, ev *eventsv1.AgentRegistered) error {
	return a.apply(ctx, id, func(s *domain.State) domain.Change { return s.AgentRegistered(ev, a.opts.Now()) })
}

// NodeHealthChanged applies a health verdict delivered as event id.
func (a *App) NodeHealthChanged(ctx context.Context, id string, ev *eventsv1.NodeHealthChanged) error {
	return a.apply(ctx, id, func(s *domain.State) domain.Change { return s.NodeHealthChanged(ev, a.opts.Now()) })
}

// Cluster returns a cluster by full name. The result must not be modified.
func (a *App) Cluster(name string) (*loomv1.Cluster, bool) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	c := a.st.Clusters[name]
	if c == nil {
		return nil, false
	}
	return c.Cluster, true
}

// Clusters returns the clusters of a project ("-" for every project), sorted
// by name. The results must not be modified.
func (a *App) Clusters(project string) []*loomv1.Cluster {
	a.mu.RLock()
	defer a.mu.RUnlock()
	var out []*loomv1.Cluster
	for name, c := range a.st.Clusters {
		if project == "-" || strings.HasPrefix(name, "projects/"+project+"/") {
			out = append(out, c.Cluster)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out
}

// Nodes returns the nodes of a cluster, or of every cluster of the project
// when clusterID is "-" (and of every project when project is "-"), sorted by
// name. The results must not be modified.
func (a *App) Nodes(project, clusterID string) []*loomv1.Node {
	a.mu.RLock()
	defer a.mu.RUnlock()
	var out []*loomv1.Node
	for _, n := range a.st.Nodes {
		p, id, _ := domain.ParseClusterName(n.GetCluster())
		if (project == "-" || p == project) && (clusterID == "-" || id == clusterID) {
			out = append(out, n)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out
}

// Package app runs the provisioner: it applies commands and events through the
// domain (decide → store.Apply → memory), serves reads from memory, and
// reconciles the provider with the durable desired state.
package app

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/store"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/provisioner/internal/adapters"
	"github.com/loom-ml/loom/services/provisioner/internal/domain"
	"github.com/loom-ml/loom/services/provisioner/internal/provider"
)

// Options configure an App. Zero values take the documented defaults.
type Options struct {
	Store    *store.Store
	Provider provider.Provider
	// Params are the domain's settings (directories, capacity, timeouts,
	// launch backoff, the Slurm renderer); see domain.Params.
	Params domain.Params
	Log    *slog.Logger
	// Clock is what the loops wait on (default the real clock); tests give a
	// clockwork.FakeClock. Now defaults to its Now.
	Clock clockwork.Clock
	// Now is the time the domain is given (default Clock.Now).
	Now func() time.Time
	// ReconcileInterval is how often the reconciler runs without being woken
	// by a change (default 5 s).
	ReconcileInterval time.Duration
	// LaunchConcurrency bounds the provider calls one reconciler pass makes
	// at once (default 64).
	LaunchConcurrency int
	// IdentityLifetime is the longest an agent's node identity lasts
	// (default auth.DefaultNodeIdentityLifetime; the direct identities'
	// lifetime where the provisioner issues them): a removed node's
	// revocation is kept that long (domain.State.WithRevocations).
	IdentityLifetime time.Duration
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
	// drv writes each change and reloads st after a write whose outcome is
	// unknown; its calls run under mu.
	drv *store.Driver

	// kick wakes the reconciler after a change; capacity 1 coalesces bursts.
	kick chan struct{}

	// gate orders launches against deletes: a launch holds it shared from
	// its last look at the node's cluster until the provider returned, and
	// DeleteCluster holds it exclusively while it writes, so no agent
	// starts after a delete was accepted.
	gate sync.RWMutex
	// cancelLaunches ends the launches of the pass in progress (nil
	// between passes); DeleteCluster calls it, so that the launches a pass
	// has still to make (the provider paces them) do not hold the delete up.
	launchMu       sync.Mutex
	cancelLaunches context.CancelFunc

	// The reconciler's own memory (one pass at a time): when each node may
	// be launched again after a failure, and which FAILED nodes it has
	// already stopped and cleaned up.
	nextLaunch map[string]time.Time
	cleaned    map[string]bool
}

// New loads the state from the store and returns the App.
func New(ctx context.Context, opts Options) (*App, error) {
	if opts.Clock == nil {
		opts.Clock = clockwork.NewRealClock()
	}
	if opts.Now == nil {
		opts.Now = opts.Clock.Now
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.ReconcileInterval <= 0 {
		opts.ReconcileInterval = 5 * time.Second
	}
	if opts.LaunchConcurrency <= 0 {
		opts.LaunchConcurrency = 64
	}
	if opts.IdentityLifetime <= 0 {
		opts.IdentityLifetime = auth.DefaultNodeIdentityLifetime
	}
	opts.Params = opts.Params.WithDefaults()
	st, err := adapters.Load(ctx, opts.Store)
	if err != nil {
		return nil, fmt.Errorf("provisioner: %w", err)
	}
	opts.Log.Info("state loaded", "clusters", len(st.Clusters), "nodes", len(st.Nodes), "reservations", len(st.Reservations))
	a := &App{
		opts:       opts,
		log:        opts.Log,
		st:         st,
		kick:       make(chan struct{}, 1),
		nextLaunch: map[string]time.Time{},
		cleaned:    map[string]bool{},
	}
	a.drv = store.NewDriver(opts.Store, a.reload)
	return a, nil
}

// reload replaces memory with what Redis holds; the caller holds mu.
func (a *App) reload(ctx context.Context) error {
	st, err := adapters.Load(ctx, a.opts.Store)
	if err != nil {
		return fmt.Errorf("provisioner: %w", err)
	}
	a.st = st
	a.log.Info("state reloaded", "clusters", len(st.Clusters), "nodes", len(st.Nodes), "reservations", len(st.Reservations))
	a.wake()
	return nil
}

// wake tells the reconciler that the desired state changed.
func (a *App) wake() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// Params returns the domain parameters in use (defaults filled in).
func (a *App) Params() domain.Params { return a.opts.Params }

// apply decides under the lock, writes the change with the inbox mark for
// inboxID ("" for none) and only then updates memory.
func (a *App) apply(ctx context.Context, inboxID string, decide func(*domain.State) domain.Change) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.drv.Ready(ctx); err != nil {
		return err
	}
	ch := a.revoke(decide(a.st))
	if ch.Empty() && inboxID == "" {
		return nil
	}
	tx, err := adapters.Tx(ch)
	if err != nil {
		return err
	}
	_, err = a.drv.Apply(ctx, inboxID, tx, func() { a.commit(ch) })
	if err != nil {
		return fmt.Errorf("apply: %w", err)
	}
	return nil
}

// ErrBatchSeen refuses a batch one of whose events was applied before:
// nothing was written, and the consumer hands the events to the one-by-one
// path, where the inbox drops the seen one and applies the others.
var ErrBatchSeen = errors.New("an event of the batch was applied before")

// ApplyBatch applies node reports delivered as events ids (each
// domain.Batched) as one change: decided together (domain.State.Batch),
// written in one store step with one inbox mark per event, and only then
// put in memory. A cluster the reports touch is written and announced once
// for the batch. It changes nothing and returns an error when the write
// fails or an event was applied before (ErrBatchSeen): the caller then
// applies them one by one. After a write whose outcome is unknown memory
// is what Redis holds, as after any apply (store.Driver).
func (a *App) ApplyBatch(ctx context.Context, ids []string, payloads []proto.Message) error {
	if len(ids) != len(payloads) {
		return fmt.Errorf("apply batch: %d ids for %d events", len(ids), len(payloads))
	}
	if len(ids) == 0 {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.drv.Ready(ctx); err != nil {
		return err
	}
	ch, err := a.st.Batch(a.opts.Params, payloads, a.opts.Now())
	if err != nil {
		return err
	}
	ch = a.revoke(ch)
	tx, err := adapters.Tx(ch)
	if err != nil {
		return err
	}
	applied, err := a.drv.ApplyBatch(ctx, ids, tx, func() { a.commit(ch) })
	switch {
	case err != nil:
		return fmt.Errorf("apply batch of %d: %w", len(ids), err)
	case !applied:
		return ErrBatchSeen
	}
	return nil
}

// revoke adds to ch the revocation of the identities of the nodes it
// removes; the caller holds mu. Revocations are on the wall clock, not
// Options.Now: the registrations they are compared with are named on the
// gateway's, and verifiers expire them on theirs.
func (a *App) revoke(ch domain.Change) domain.Change {
	return a.st.WithRevocations(ch, time.Now(), a.opts.IdentityLifetime)
}

// commit puts a written change in memory, waking the reconciler when the
// change gives it work; the caller holds mu.
func (a *App) commit(ch domain.Change) {
	if ch.Empty() {
		return
	}
	// Only a change that gives the reconciler work wakes it (a routine
	// registration does not).
	wake := a.needsReconcile(ch)
	a.st.Apply(ch)
	if wake {
		a.wake()
	}
}

// needsReconcile reports whether change ch (not yet in memory) gives the
// reconciler something to do now: a node to launch, stop or remove, a
// cluster to tear down, Slurm files to write, or FAILED records that may
// go. A node only moving between PROVISIONING, READY, DOWN and DRAINING
// (registrations, health verdicts: most changes of a large create) needs
// nothing the next periodic pass would not do; waking a pass over every
// node for each of them made a 10,000-node create walk its nodes
// thousands of times.
func (a *App) needsReconcile(ch domain.Change) bool {
	if len(ch.PutSlurm) > 0 || len(ch.DelSlurm) > 0 || len(ch.DelNodes) > 0 || len(ch.DelClusters) > 0 ||
		len(ch.PutReservations) > 0 || len(ch.DelReservations) > 0 || len(ch.PutRepairs) > 0 {
		return true
	}
	for _, n := range ch.PutNodes {
		if a.st.Nodes[n.GetName()] == nil {
			return true // new: to launch
		}
		switch n.GetState() {
		case loomv1.Node_PROVISIONING, loomv1.Node_READY, loomv1.Node_DOWN, loomv1.Node_DRAINING:
		default:
			return true // FAILED or DELETING: to stop and remove
		}
	}
	for _, c := range ch.PutClusters {
		old := a.st.Clusters[c.Name()]
		if old == nil || c.State() == loomv1.Cluster_DELETING || !proto.Equal(old.Cluster.GetCompute(), c.Cluster.GetCompute()) {
			return true
		}
		for _, p := range c.Cluster.GetStatus().GetNodePools() {
			if p.GetFailed() > 0 {
				return true // a FAILED record may go once its pool is at target
			}
		}
	}
	return false
}

// CreateCluster applies a CreateCluster command delivered as event id.
func (a *App) CreateCluster(ctx context.Context, id string, cmd *eventsv1.CreateCluster) error {
	return a.apply(ctx, id, func(s *domain.State) domain.Change {
		return s.CreateCluster(a.opts.Params, cmd, a.opts.Now())
	})
}

// UpdateCluster applies an UpdateCluster command delivered as event id.
func (a *App) UpdateCluster(ctx context.Context, id string, cmd *eventsv1.UpdateCluster) error {
	return a.apply(ctx, id, func(s *domain.State) domain.Change {
		return s.UpdateCluster(a.opts.Params, cmd, a.opts.Now())
	})
}

// DeleteCluster applies a DeleteCluster command delivered as event id. It
// takes effect at once, even in the middle of a create: the reconciler's
// pending launches are cancelled, launches in flight finish before the
// delete is written (and are stopped by the teardown), and none starts
// after it; the next pass tears the cluster down.
func (a *App) DeleteCluster(ctx context.Context, id string, cmd *eventsv1.DeleteCluster) error {
	a.launchMu.Lock()
	if a.cancelLaunches != nil {
		a.cancelLaunches()
	}
	a.launchMu.Unlock()
	a.gate.Lock()
	defer a.gate.Unlock()
	return a.apply(ctx, id, func(s *domain.State) domain.Change { return s.DeleteCluster(cmd, a.opts.Now()) })
}

// CreateReservation applies a CreateReservation command delivered as event id.
func (a *App) CreateReservation(ctx context.Context, id string, cmd *eventsv1.CreateReservation) error {
	return a.apply(ctx, id, func(s *domain.State) domain.Change { return s.CreateReservation(cmd, a.opts.Now()) })
}

// DeleteReservation applies a DeleteReservation command delivered as event id.
func (a *App) DeleteReservation(ctx context.Context, id string, cmd *eventsv1.DeleteReservation) error {
	return a.apply(ctx, id, func(s *domain.State) domain.Change { return s.DeleteReservation(cmd) })
}

// AgentRegistered applies an agent's registration delivered as event id.
func (a *App) AgentRegistered(ctx context.Context, id string, ev *eventsv1.AgentRegistered) error {
	return a.apply(ctx, id, func(s *domain.State) domain.Change {
		return s.AgentRegistered(a.opts.Params, ev, a.opts.Now())
	})
}

// NodeHealthChanged applies a health verdict delivered as event id.
func (a *App) NodeHealthChanged(ctx context.Context, id string, ev *eventsv1.NodeHealthChanged) error {
	return a.apply(ctx, id, func(s *domain.State) domain.Change {
		return s.NodeHealthChanged(a.opts.Params, ev, a.opts.Now())
	})
}

// NodeDrained applies the scheduler's NodeDrained delivered as event id.
func (a *App) NodeDrained(ctx context.Context, id string, ev *eventsv1.NodeDrained) error {
	return a.apply(ctx, id, func(s *domain.State) domain.Change { return s.NodeDrained(a.opts.Params, ev, a.opts.Now()) })
}

// RemediateNode applies health's RemediateNode delivered as event id: the
// repair is recorded with a new random host boot id (kept with it, so a
// provisioner that crashes mid-repair resumes the same boot), or refused
// with RemediationFinished; the reconciler carries it out.
func (a *App) RemediateNode(ctx context.Context, id string, cmd *eventsv1.RemediateNode) error {
	bootID := newBootID()
	return a.apply(ctx, id, func(s *domain.State) domain.Change {
		return s.RemediateNode(a.opts.Params, cmd, bootID, a.opts.Now())
	})
}

// newBootID returns a random host boot id (32 hex digits).
func newBootID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ProviderEventID is the inbox id of a provider event: the same report
// applied twice changes nothing the second time.
func ProviderEventID(ev provider.Event) string {
	return "provider:" + ev.Node + ":" + strconv.Itoa(int(ev.Kind)) + ":" + strconv.FormatInt(ev.At.UnixNano(), 10)
}

// ProviderEvent applies an event the provider reported on its own.
func (a *App) ProviderEvent(ctx context.Context, ev provider.Event) error {
	return a.apply(ctx, ProviderEventID(ev), func(s *domain.State) domain.Change {
		return s.ProviderEvent(a.opts.Params, ev, a.opts.Now())
	})
}

// WatchProvider applies the provider's own events (provider.Watcher) until
// ctx ends, each durably once applied; a failed write is retried with
// backoff, never dropped. Without a Watcher it just waits for ctx.
func (a *App) WatchProvider(ctx context.Context) error {
	w, ok := a.opts.Provider.(provider.Watcher)
	if !ok {
		<-ctx.Done()
		return nil
	}
	events := w.Events()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-events:
			if !ok {
				<-ctx.Done()
				return nil
			}
			for delay := 100 * time.Millisecond; ; delay = min(2*delay, 5*time.Second) {
				err := a.ProviderEvent(ctx, ev)
				if err == nil {
					break
				}
				a.log.Warn("applying provider event; will retry", "node", ev.Node, "kind", ev.Kind, "err", err)
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(delay):
				}
			}
		}
	}
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
		if n, _ := resname.SplitCluster(name); project == resname.Wildcard || n.Project == project {
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
		c, _ := resname.SplitCluster(n.GetCluster())
		if (project == resname.Wildcard || c.Project == project) && (clusterID == resname.Wildcard || c.ID == clusterID) {
			out = append(out, n)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out
}

// SlurmConfig returns a cluster's rendered Slurm files, and whether the
// cluster exists. The files are nil when none were rendered; then cond
// (the SlurmConfigured condition, when there is one) says why.
func (a *App) SlurmConfig(name string) (cfg *loomv1.SlurmConfig, cond *loomv1.Condition, exists bool) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	c := a.st.Clusters[name]
	if c == nil {
		return nil, nil, false
	}
	for _, k := range c.Cluster.GetStatus().GetConditions() {
		if k.GetType() == domain.CondSlurmConfig {
			cond = k
		}
	}
	return a.st.Slurm[name], cond, true
}

// Reservation returns a reservation with what clusters claim of it.
func (a *App) Reservation(name string) (*loomv1.Reservation, bool) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	r := a.st.Reservation(name)
	return r, r != nil
}

// Reservations returns the reservations of a project ("-": all), by name.
func (a *App) Reservations(project string) []*loomv1.Reservation {
	a.mu.RLock()
	defer a.mu.RUnlock()
	var out []*loomv1.Reservation
	for name := range a.st.Reservations {
		if r, _ := resname.SplitReservation(name); project == resname.Wildcard || r.Project == project {
			out = append(out, a.st.Reservation(name))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out
}

// Capacity lists the capacity pools with what is in use and free: the
// configured ones and the reservations of project ("-": all).
func (a *App) Capacity(project string) []*loomv1.CapacityPool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.st.Capacity(a.opts.Params, project)
}

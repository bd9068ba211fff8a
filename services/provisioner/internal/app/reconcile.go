package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/loom-ml/loom/libs/clusterspec"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/provisioner/internal/domain"
	"github.com/loom-ml/loom/services/provisioner/internal/provider"
)

// SlurmFiles are where the local provider writes a cluster's Slurm files,
// relative to its home.
const (
	SlurmConfFile    = ".loom/slurm/slurm.conf"
	GresConfFile     = ".loom/slurm/gres.conf"
	TopologyConfFile = ".loom/slurm/topology.conf"
)

// Reconcile makes the provider match the durable desired state until ctx
// ends: every node of a cluster that is not being deleted has a running
// agent, nodes on their way out are stopped and removed, DELETING clusters
// are torn down and then removed, and what time alone decides (boot
// timeouts, operation deadlines) is decided. It runs at start, after each
// change and every ReconcileInterval. Failures are reported (on the node,
// in the log) and retried; they never end the loop.
func (a *App) Reconcile(ctx context.Context) error {
	t := a.opts.Clock.NewTicker(a.opts.ReconcileInterval)
	defer t.Stop()
	for {
		a.ReconcileOnce(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-a.kick:
		case <-t.Chan():
		}
	}
}

// plan is one pass's snapshot of the desired state.
type plan struct {
	prepare  []provider.ClusterSetup
	run      []provider.Node
	reasons  map[string]string
	states   map[string]loomv1.Node_State
	retire   []provider.Node
	teardown map[string][]provider.Node
	repairs  []repairWork
}

// repairWork is one repair in progress as a pass found it.
type repairWork struct {
	r domain.Repair
	// target is the node the repair brings up; old the node it retires
	// (a replace in phase RepairRequested), else zero.
	target, old provider.Node
}

// ReconcileOnce is one reconciler pass. Only one pass may run at a time.
func (a *App) ReconcileOnce(ctx context.Context) {
	if err := a.apply(ctx, "", func(s *domain.State) domain.Change { return s.Tick(a.opts.Params, a.opts.Now()) }); err != nil {
		a.log.Warn("time-based decisions failed; will retry", "err", err)
	}
	pl := a.snapshot()
	for name := range a.nextLaunch {
		if _, ok := pl.states[name]; !ok {
			delete(a.nextLaunch, name)
		}
	}
	for name := range a.cleaned {
		if pl.states[name] != loomv1.Node_FAILED {
			delete(a.cleaned, name)
		}
	}
	if p, ok := a.opts.Provider.(provider.PassStarter); ok {
		if err := p.StartPass(ctx); err != nil {
			a.log.Warn("starting the pass failed; will retry", "err", err)
		}
	}
	if p, ok := a.opts.Provider.(provider.Preparer); ok {
		for _, c := range pl.prepare {
			if err := p.PrepareCluster(ctx, c); err != nil {
				a.log.Warn("preparing cluster failed; will retry", "cluster", c.Cluster, "err", err)
			}
		}
	}
	if !a.launchAll(ctx, pl) {
		return // a delete came in: the next pass starts at once, with it
	}
	boots, replaces := splitRepairs(pl.repairs)
	a.eachRepair(ctx, boots)

	clusters := make([]string, 0, len(pl.teardown))
	for c := range pl.teardown {
		clusters = append(clusters, c)
	}
	sort.Strings(clusters)
	// Every node the pass removes goes in one removeAll: the local
	// provider walks Redis's keyspace once per removeAll (about 0.2 s
	// among 200,000 keys), and a pass that retired nodes, replaced some
	// and tore a cluster down walked it once for each.
	a.removeOnce(ctx,
		a.retireAll(ctx, pl.retire, pl.states),
		a.replaceAll(ctx, replaces),
		a.teardownAll(ctx, clusters, pl.teardown))
}

// splitRepairs parts the pass's repairs into those that boot their
// target (repair) and the replaces whose old node is still to be retired
// (replaceAll), each in the pass's order.
func splitRepairs(ws []repairWork) (boots, replaces []repairWork) {
	for _, w := range ws {
		if w.old.Name != "" {
			replaces = append(replaces, w)
		} else {
			boots = append(boots, w)
		}
	}
	return boots, replaces
}

// removal is one part of a pass's work (retiring, replacing, tearing
// down) as it goes into the pass's one removal of nodes: the nodes it
// stopped, to be removed, and done, which takes their outcomes (an error
// per node, in order) and finishes the part.
type removal struct {
	nodes []provider.Node
	done  func(errs []error)
}

// removeOnce removes the nodes of every removal with one removeAll, then
// calls each removal's done (also one that has no node to remove: its
// work may not need one), in order, with its nodes' outcomes.
func (a *App) removeOnce(ctx context.Context, rs ...removal) {
	var all []provider.Node
	for _, r := range rs {
		all = append(all, r.nodes...)
	}
	errs := a.removeAll(ctx, all)
	for _, r := range rs {
		if r.done != nil {
			r.done(errs[:len(r.nodes):len(r.nodes)])
		}
		errs = errs[len(r.nodes):]
	}
}

// teardownAll starts tearing down the pass's DELETING clusters: it stops
// every cluster's agents and returns the stopped nodes for the pass's one
// removal (removeOnce), whose outcomes go back, each node's to its
// cluster, which then finishes on its own (teardown).
func (a *App) teardownAll(ctx context.Context, clusters []string, nodes map[string][]provider.Node) removal {
	if ctx.Err() != nil {
		return removal{}
	}
	errs := make(map[string][]error, len(clusters))
	var stopped []provider.Node
	type at struct {
		cluster string
		i       int
	}
	var ats []at
	for _, c := range clusters {
		errs[c] = a.stopAll(ctx, nodes[c])
		for i, n := range nodes[c] {
			if errs[c][i] == nil {
				stopped = append(stopped, n)
				ats = append(ats, at{c, i})
			}
		}
	}
	return removal{nodes: stopped, done: func(removed []error) {
		for j, err := range removed {
			if err != nil {
				errs[ats[j].cluster][ats[j].i] = fmt.Errorf("could not remove %s: %w", stopped[j].Hostname, err)
			}
		}
		for _, c := range clusters {
			if ctx.Err() != nil {
				return
			}
			if err := a.teardown(ctx, c, nodes[c], errs[c]); err != nil {
				a.log.Warn("cluster teardown failed; will retry", "cluster", c, "err", err)
			}
		}
	}}
}

// stopAll stops nodes' agents, LaunchConcurrency at a time: an error per
// node, in order.
func (a *App) stopAll(ctx context.Context, nodes []provider.Node) []error {
	errs := make([]error, len(nodes))
	a.each(ctx, nodes, func(i int, n provider.Node) {
		if err := a.opts.Provider.Stop(ctx, n); err != nil {
			errs[i] = fmt.Errorf("could not stop %s: %w", n.Hostname, err)
		}
	})
	return errs
}

// launchAll launches the pass's nodes, LaunchConcurrency at a time, under a
// context that DeleteCluster cancels. It reports whether it ran to the end.
func (a *App) launchAll(ctx context.Context, pl plan) bool {
	lctx, cancel := context.WithCancel(ctx)
	a.launchMu.Lock()
	a.cancelLaunches = cancel
	a.launchMu.Unlock()
	defer func() {
		a.launchMu.Lock()
		a.cancelLaunches = nil
		a.launchMu.Unlock()
		cancel()
	}()
	a.each(lctx, pl.run, func(_ int, n provider.Node) { a.launch(lctx, n, pl.states[n.Name], pl.reasons[n.Name]) })
	return lctx.Err() == nil
}

// runnable reports whether node name should have an agent now: it is on
// record, not on its way out, and its cluster is not being deleted. The
// pass's snapshot may be older than that.
func (a *App) runnable(name string) bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	n := a.st.Nodes[name]
	if n == nil || n.GetState() == loomv1.Node_FAILED || n.GetState() == loomv1.Node_DELETING {
		return false
	}
	c := a.st.Clusters[n.GetCluster()]
	return c != nil && c.State() != loomv1.Cluster_DELETING
}

// each runs f for every node (with its index), LaunchConcurrency at a time.
func (a *App) each(ctx context.Context, nodes []provider.Node, f func(int, provider.Node)) {
	sem := make(chan struct{}, a.opts.LaunchConcurrency)
	var wg sync.WaitGroup
	for i, n := range nodes {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			f(i, n)
		})
	}
	wg.Wait()
}

// snapshot reads, under the read lock, what the pass has to do.
func (a *App) snapshot() plan {
	a.mu.RLock()
	defer a.mu.RUnlock()
	pl := plan{reasons: map[string]string{}, states: map[string]loomv1.Node_State{}, teardown: map[string][]provider.Node{}}
	names := make([]string, 0, len(a.st.Clusters))
	for name := range a.st.Clusters {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		c := a.st.Clusters[name]
		id := domain.ClusterID(name)
		deleting := c.State() == loomv1.Cluster_DELETING
		if deleting {
			pl.teardown[name] = []provider.Node{}
		} else {
			pl.prepare = append(pl.prepare, a.setup(c.Cluster))
		}
		for _, n := range a.st.ClusterNodes(name) {
			if n.GetRole() == clusterspec.RoleLogin {
				continue // records only: nothing runs for them
			}
			pn := providerNode(c.Cluster, id, n)
			pl.states[n.GetName()] = n.GetState()
			pl.reasons[n.GetName()] = n.GetReason()
			switch {
			case deleting:
				pl.teardown[name] = append(pl.teardown[name], pn)
			case n.GetState() == loomv1.Node_FAILED || n.GetState() == loomv1.Node_DELETING:
				pl.retire = append(pl.retire, pn)
			case a.st.RepairOf(n.GetName()) != nil:
				// Its repair brings it up (eachRepair), not a launch: one
				// would start the agent of the old boot.
				r := a.st.RepairOf(n.GetName())
				w := repairWork{r: *r, target: pn}
				if r.Phase == domain.RepairRequested && r.Action == loomv1.RemediationAction_ACTION_REPLACE {
					w.old = pn
				}
				pl.repairs = append(pl.repairs, w)
			case n.GetState() == loomv1.Node_REBOOTING || n.GetState() == loomv1.Node_REIMAGING || n.GetState() == loomv1.Node_REPLACING:
				// A repair's state without its record cannot happen: the two
				// are written together. Left alone rather than launched.
			default:
				pl.run = append(pl.run, pn)
			}
		}
	}
	return pl
}

// setup is what a cluster's nodes share: its directories and Slurm files.
func (a *App) setup(c *loomv1.Cluster) provider.ClusterSetup {
	s := provider.ClusterSetup{Cluster: c.GetName(), ClusterID: domain.ClusterID(c.GetName()),
		HomeDir: c.GetStatus().GetHomeDir(), ScratchDir: c.GetStatus().GetScratchDir()}
	if cfg := a.st.Slurm[c.GetName()]; cfg != nil {
		s.Files = map[string][]byte{
			SlurmConfFile:    []byte(cfg.GetSlurmConf()),
			GresConfFile:     []byte(cfg.GetGresConf()),
			TopologyConfFile: []byte(cfg.GetTopologyConf()),
		}
	}
	return s
}

// ProviderNode is what the provider needs to know of node n of cluster c.
func ProviderNode(c *loomv1.Cluster, n *loomv1.Node) provider.Node {
	return providerNode(c, domain.ClusterID(c.GetName()), n)
}

// providerNode is ProviderNode with the cluster's id already parsed (a
// pass does it once per cluster, not once per node).
func providerNode(c *loomv1.Cluster, clusterID string, n *loomv1.Node) provider.Node {
	st := c.GetStatus()
	return provider.Node{
		Name: n.GetName(), Cluster: c.GetName(), ClusterID: clusterID,
		Hostname: n.GetHostname(), WorkDir: n.GetWorkDir(), SharedDir: st.GetSharedDir(),
		GPUs: int(n.GetGpus()), Pool: n.GetNodePool(), Role: n.GetRole(),
		MachineType: n.GetMachineType(), Zone: n.GetZone(), CapacityType: n.GetCapacityType().String(),
		HomeDir: st.GetHomeDir(), ScratchDir: st.GetScratchDir(),
	}
}

// launch makes one node's agent run. A failure is recorded on the node
// (launch_attempts, reason, next_action; FAILED and replaced after the last
// attempt) and retried after the backoff it announced.
func (a *App) launch(ctx context.Context, n provider.Node, state loomv1.Node_State, reason string) {
	now := a.opts.Now()
	a.mu.RLock()
	next := a.nextLaunch[n.Name]
	a.mu.RUnlock()
	if now.Before(next) {
		return
	}
	a.gate.RLock()
	if !a.runnable(n.Name) {
		a.gate.RUnlock()
		return
	}
	l, err := a.opts.Provider.Launch(ctx, n)
	a.gate.RUnlock()
	switch {
	case err != nil && ctx.Err() != nil:
		return // cancelled (a delete, or shutdown), not failed
	case err != nil:
		a.launchFailed(ctx, n, err.Error(), now)
	case l.Started && l.PrevExit != "" && state == loomv1.Node_PROVISIONING:
		// The agent we started before died without registering: it was
		// relaunched, but that counts as a failed attempt.
		a.launchFailed(ctx, n, fmt.Sprintf("agent exited (%s) before it registered; relaunched", l.PrevExit), now)
	case l.Started && l.PrevExit != "":
		a.log.Warn("agent died; relaunched", "node", n.Name, "exit", l.PrevExit, "pid", l.PID)
		a.setNextLaunch(n.Name, now.Add(a.opts.Params.LaunchBackoff))
	default:
		if strings.HasPrefix(reason, domain.LaunchReasonPrefix) {
			if err := a.apply(ctx, "", func(s *domain.State) domain.Change { return s.Launched(a.opts.Params, n.Name, now) }); err != nil {
				a.log.Warn("clearing launch reason", "node", n.Name, "err", err)
			}
		}
	}
}

func (a *App) setNextLaunch(node string, at time.Time) {
	a.mu.Lock()
	a.nextLaunch[node] = at
	a.mu.Unlock()
}

func (a *App) launchFailed(ctx context.Context, n provider.Node, reason string, now time.Time) {
	a.log.Warn("node launch failed", "node", n.Name, "reason", reason)
	if err := a.apply(ctx, "", func(s *domain.State) domain.Change {
		return s.LaunchFailed(a.opts.Params, n.Name, reason, now)
	}); err != nil {
		a.log.Warn("recording launch failure", "node", n.Name, "err", err)
	}
	a.mu.RLock()
	attempts := a.st.Nodes[n.Name].GetLaunchAttempts()
	a.mu.RUnlock()
	a.setNextLaunch(n.Name, now.Add(a.opts.Params.Backoff(max(attempts, 1))))
}

// retireAll stops the pass's FAILED and DELETING nodes and returns them
// for the pass's one removal (removeOnce), after which the domain is asked
// to drop each one's record (a FAILED one stays on record while its pool
// needs it to explain itself). A node that could not be stopped or removed
// keeps its record, saying why, and is retired again at the next pass.
func (a *App) retireAll(ctx context.Context, nodes []provider.Node, states map[string]loomv1.Node_State) removal {
	if len(nodes) == 0 {
		return removal{}
	}
	// ok: the node is stopped (or was cleaned up at an earlier pass).
	ok := make([]bool, len(nodes))
	var stopped []provider.Node
	var at []int
	a.mu.RLock()
	for i, n := range nodes {
		ok[i] = a.cleaned[n.Name]
	}
	a.mu.RUnlock()
	a.each(ctx, nodes, func(i int, n provider.Node) {
		if ok[i] {
			return
		}
		if err := a.opts.Provider.Stop(ctx, n); err != nil {
			a.log.Warn("stopping node failed; will retry", "node", n.Name, "err", err)
			a.retireFailed(ctx, n, fmt.Sprintf("could not stop %s: %v", n.Hostname, err))
			return
		}
		ok[i] = true
	})
	a.mu.RLock()
	for i, n := range nodes {
		if ok[i] && !a.cleaned[n.Name] {
			stopped = append(stopped, n)
			at = append(at, i)
		}
	}
	a.mu.RUnlock()
	return removal{nodes: stopped, done: func(removed []error) {
		for j, err := range removed {
			n := stopped[j]
			if err != nil {
				ok[at[j]] = false
				a.log.Warn("removing node failed; will retry", "node", n.Name, "err", err)
				a.retireFailed(ctx, n, fmt.Sprintf("could not remove %s: %v", n.Hostname, err))
				continue
			}
			if states[n.Name] == loomv1.Node_FAILED {
				a.mu.Lock()
				a.cleaned[n.Name] = true
				a.mu.Unlock()
			}
		}
		a.each(ctx, nodes, func(i int, n provider.Node) {
			if !ok[i] {
				return
			}
			if err := a.apply(ctx, "", func(s *domain.State) domain.Change { return s.RemoveNode(a.opts.Params, n.Name, a.opts.Now()) }); err != nil {
				a.log.Warn("removing node record failed; will retry", "node", n.Name, "err", err)
			}
		})
	}}
}

// replaceAll starts the pass's replaces (repairs in phase RepairRequested
// whose action is a replace): it stops each one's old node and returns the
// stopped ones for the pass's one removal (removeOnce), after which each
// removed node's records are swapped (domain.RepairSwap: the old node's
// record goes, a new node takes its place, and the next pass boots it; the
// swap woke the reconciler). A failed step is logged and the replace is
// tried again at the next pass; its deadline bounds the whole. Unlike a
// boot (repair) it holds no gate: it starts no agent, and the swap itself
// refuses a cluster being deleted.
func (a *App) replaceAll(ctx context.Context, ws []repairWork) removal {
	if len(ws) == 0 {
		return removal{}
	}
	if _, ok := a.opts.Provider.(provider.Repairer); !ok {
		a.log.Warn("the provider carries out no repairs; they fail at their deadline", "replaces", len(ws))
		return removal{}
	}
	olds := make([]provider.Node, len(ws))
	for i, w := range ws {
		olds[i] = w.old
	}
	stopped := make([]bool, len(ws))
	a.each(ctx, olds, func(i int, n provider.Node) {
		if !a.repairCurrent(ws[i].r) {
			return
		}
		if err := a.opts.Provider.Stop(ctx, n); err != nil {
			a.log.Warn("replace: stopping the old node failed; will retry", "node", n.Name, "err", err)
			return
		}
		stopped[i] = true
	})
	var rm []provider.Node
	var at []int
	for i, ok := range stopped {
		if ok {
			rm = append(rm, olds[i])
			at = append(at, i)
		}
	}
	return removal{nodes: rm, done: func(removed []error) {
		now := a.opts.Now()
		for j, err := range removed {
			w := ws[at[j]]
			if err != nil {
				a.log.Warn("replace: removing the old node failed; will retry", "node", w.old.Name, "err", err)
				continue
			}
			if err := a.apply(ctx, "", func(s *domain.State) domain.Change { return s.RepairSwap(a.opts.Params, w.r.Node, now) }); err != nil {
				a.log.Warn("replace: recording the swap failed; will retry", "node", w.old.Name, "err", err)
			}
		}
	}}
}

// removeAll removes nodes (stopped) from the provider: with one
// RemoveNodes where the provider removes nodes in batches
// (provider.BatchRemover: the local provider walks Redis's keyspace once
// for them all), else a Remove each, LaunchConcurrency at a time. It
// returns an error per node, in order; a node not tried (ctx ended) gets
// ctx's error.
func (a *App) removeAll(ctx context.Context, nodes []provider.Node) []error {
	errs := make([]error, len(nodes))
	if len(nodes) == 0 {
		return errs
	}
	if br, ok := a.opts.Provider.(provider.BatchRemover); ok {
		got := br.RemoveNodes(ctx, nodes)
		for i := range errs {
			if i < len(got) {
				errs[i] = got[i]
			} else {
				errs[i] = fmt.Errorf("the provider's RemoveNodes gave %d results for %d nodes", len(got), len(nodes))
			}
		}
		return errs
	}
	tried := make([]bool, len(nodes))
	a.each(ctx, nodes, func(i int, n provider.Node) {
		tried[i] = true
		errs[i] = a.opts.Provider.Remove(ctx, n)
	})
	for i := range errs {
		if !tried[i] {
			errs[i] = cmp.Or(ctx.Err(), context.Canceled)
		}
	}
	return errs
}

// retireFailed records on a DELETING node why stopping or removing it
// failed (domain.RetireFailed), so that the update waiting for it says so.
func (a *App) retireFailed(ctx context.Context, n provider.Node, why string) {
	if err := a.apply(ctx, "", func(s *domain.State) domain.Change { return s.RetireFailed(n.Name, why) }); err != nil {
		a.log.Warn("recording the removal failure", "node", n.Name, "err", err)
	}
}

// teardown finishes a DELETING cluster whose agents teardownAll stopped and
// removed (errs: each node's outcome, in order): its shared directories go,
// and only then its records (NodeRemoved per node, ClusterDeleted); a crash
// anywhere before repeats the idempotent steps. A node that failed keeps
// the cluster, saying why, for the next pass.
func (a *App) teardown(ctx context.Context, cluster string, nodes []provider.Node, errs []error) error {
	if err := errors.Join(errs...); err != nil {
		var first error
		failed := 0
		for _, e := range errs {
			if e != nil {
				first = cmp.Or(first, e)
				failed++
			}
		}
		why := first.Error()
		if failed > 1 {
			why += fmt.Sprintf(" (and %d more of its %d nodes)", failed-1, len(nodes))
		}
		a.teardownFailed(ctx, cluster, why)
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := a.opts.Provider.RemoveCluster(ctx, domain.ClusterID(cluster)); err != nil {
		a.teardownFailed(ctx, cluster, "could not remove the cluster's directories: "+err.Error())
		return err
	}
	a.log.Info("cluster torn down", "cluster", cluster, "nodes", len(nodes))
	return a.apply(ctx, "", func(s *domain.State) domain.Change { return s.FinishDelete(cluster) })
}

// teardownFailed records why a teardown failed on the cluster, so that its
// delete operation says it (domain.TeardownFailed).
func (a *App) teardownFailed(ctx context.Context, cluster, why string) {
	if err := a.apply(ctx, "", func(s *domain.State) domain.Change { return s.TeardownFailed(cluster, why) }); err != nil {
		a.log.Warn("recording the teardown failure", "cluster", cluster, "err", err)
	}
}

// eachRepair carries out the pass's repair boots (repair),
// LaunchConcurrency at a time, under a context that DeleteCluster cancels
// (a delete abandons them). A replace's first step, retiring its old node,
// is not one of them: it is replaceAll's, in the pass's one removal.
func (a *App) eachRepair(ctx context.Context, ws []repairWork) {
	if len(ws) == 0 {
		return
	}
	rp, ok := a.opts.Provider.(provider.Repairer)
	if !ok {
		a.log.Warn("the provider carries out no repairs; they fail at their deadline", "repairs", len(ws))
		return
	}
	rctx, cancel := context.WithCancel(ctx)
	a.launchMu.Lock()
	a.cancelLaunches = cancel
	a.launchMu.Unlock()
	defer func() {
		a.launchMu.Lock()
		a.cancelLaunches = nil
		a.launchMu.Unlock()
		cancel()
	}()
	sem := make(chan struct{}, a.opts.LaunchConcurrency)
	var wg sync.WaitGroup
	for _, w := range ws {
		if rctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			a.repair(rctx, rp, w)
		})
	}
	wg.Wait()
}

// repairCurrent reports whether repair r is still on record as the pass
// saw it (same remediation, same phase) in a cluster not being deleted.
func (a *App) repairCurrent(r domain.Repair) bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	cur := a.st.Repairs[r.Node]
	if cur == nil || cur.ID != r.ID || cur.Phase != r.Phase || cur.Target != r.Target {
		return false
	}
	c := a.st.Clusters[r.Cluster]
	return c != nil && c.State() != loomv1.Cluster_DELETING
}

// repair moves one repair's boot on, each step idempotent and each
// outcome written before the next step (a replace's first step, retiring
// the old node and swapping the records, is replaceAll's): the provider
// boots the target as the repair's boot id (provider.Repairer), which is
// recorded (domain.RepairBooted). While the repair waits for the agent's
// registration every pass repeats the boot, which then only makes sure the
// agent runs. A failed step is logged and retried next pass; the repair's
// deadline bounds the whole.
func (a *App) repair(ctx context.Context, rp provider.Repairer, w repairWork) {
	a.gate.RLock()
	defer a.gate.RUnlock()
	if !a.repairCurrent(w.r) {
		return
	}
	now := a.opts.Now()
	kind, _, _ := domain.RepairKind(w.r.Action)
	l, err := rp.Repair(ctx, w.target, kind, w.r.BootID)
	switch {
	case err != nil && ctx.Err() != nil:
		return
	case err != nil:
		a.log.Warn("repair failed; will retry", "node", w.target.Name, "repair", kind.String(), "remediation", w.r.ID, "err", err)
		return
	case w.r.Phase == domain.RepairBooting:
		if l.Started {
			a.log.Warn("repaired node's agent died before it registered; started again", "node", w.target.Name, "exit", l.PrevExit)
		}
		return
	}
	if err := a.apply(ctx, "", func(s *domain.State) domain.Change {
		return s.RepairBooted(a.opts.Params, w.r.Node, int32(l.PID), l.Expect, now)
	}); err != nil {
		a.log.Warn("recording the repair's boot failed; will retry", "node", w.target.Name, "err", err)
	}
}

// StopAgents stops the agents of every node (for StopAgentsOnExit); the
// reconciler launches them again when the provisioner next starts.
func (a *App) StopAgents(ctx context.Context) error {
	pl := a.snapshot()
	all := append(append([]provider.Node{}, pl.run...), pl.retire...)
	for _, w := range pl.repairs {
		all = append(all, w.target)
	}
	for _, ns := range pl.teardown {
		all = append(all, ns...)
	}
	errs := make([]error, len(all))
	var wg sync.WaitGroup
	for i, n := range all {
		wg.Go(func() { errs[i] = a.opts.Provider.Stop(ctx, n) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

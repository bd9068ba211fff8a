package app

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/provisioner/internal/domain"
	"github.com/loom-ml/loom/services/provisioner/internal/provider"
)

// Reconcile makes the provider match the durable desired state until ctx
// ends: every node of a cluster that is not being deleted has a running
// agent, and DELETING clusters are torn down and then removed. It runs at
// start, after each change and every ReconcileInterval. Failures are reported
// (on the node, in the log) and retried; they never end the loop.
func (a *App) Reconcile(ctx context.Context) error {
	t := time.NewTicker(a.opts.ReconcileInterval)
	defer t.Stop()
	for {
		a.ReconcileOnce(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-a.kick:
		case <-t.C:
		}
	}
}

// ReconcileOnce is one reconciler pass. Only one pass may run at a time.
func (a *App) ReconcileOnce(ctx context.Context) {
	run, teardown, states := a.snapshot()
	for name := range a.retries {
		if _, ok := states[name]; !ok {
			delete(a.retries, name)
		}
	}
	for _, n := range run {
		if ctx.Err() != nil {
			return
		}
		a.launch(ctx, n, states[n.Name])
	}
	clusters := make([]string, 0, len(teardown))
	for c := range teardown {
		clusters = append(clusters, c)
	}
	sort.Strings(clusters)
	for _, c := range clusters {
		if ctx.Err() != nil {
			return
		}
		if err := a.teardown(ctx, c, teardown[c]); err != nil {
			a.log.Warn("cluster teardown failed; will retry", "cluster", c, "err", err)
		}
	}
}

// snapshot returns, under the read lock, the nodes that should run, the
// nodes of each DELETING cluster, and every node's state.
func (a *App) snapshot() (run []provider.Node, teardown map[string][]provider.Node, states map[string]loomv1.Node_State) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	teardown = map[string][]provider.Node{}
	states = map[string]loomv1.Node_State{}
	names := make([]string, 0, len(a.st.Clusters))
	for name := range a.st.Clusters {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		c := a.st.Clusters[name]
		deleting := c.State() == loomv1.Cluster_DELETING
		if deleting {
			teardown[name] = []provider.Node{}
		}
		for _, n := range a.st.ClusterNodes(name) {
			pn := ProviderNode(c.Cluster, n)
			states[n.GetName()] = n.GetState()
			if deleting {
				teardown[name] = append(teardown[name], pn)
			} else {
				run = append(run, pn)
			}
		}
	}
	return run, teardown, states
}

// ProviderNode is what the provider needs to know of node n of cluster c.
func ProviderNode(c *loomv1.Cluster, n *loomv1.Node) provider.Node {
	return provider.Node{
		Name: n.GetName(), Cluster: c.GetName(), ClusterID: domain.ClusterID(c.GetName()),
		Hostname: n.GetHostname(), WorkDir: n.GetWorkDir(), SharedDir: c.GetStatus().GetSharedDir(),
		GPUs: int(n.GetGpus()),
	}
}

// launch makes one node's agent run, backing off after failures and putting
// them on the node so that a node that cannot start is never stuck silently.
func (a *App) launch(ctx context.Context, n provider.Node, state loomv1.Node_State) {
	now := a.opts.Now()
	r := a.retries[n.Name]
	if r != nil && now.Before(r.next) {
		return
	}
	l, err := a.opts.Provider.Launch(ctx, n)
	var reason string
	switch {
	case err != nil:
		reason = err.Error()
	case l.Started && l.PrevExit != "" && state == loomv1.Node_PROVISIONING:
		// The agent we started before died without registering: it was
		// relaunched, but say so, and slow the relaunches down.
		reason = fmt.Sprintf("agent exited (%s) before it registered; relaunched", l.PrevExit)
	case l.Started && l.PrevExit != "":
		a.log.Warn("agent died; relaunched", "node", n.Name, "exit", l.PrevExit, "pid", l.PID)
		a.backoff(n.Name, now)
		return
	default:
		delete(a.retries, n.Name)
		if err := a.apply(ctx, "", func(s *domain.State) domain.Change { return s.Launched(n.Name) }); err != nil {
			a.log.Warn("clearing launch reason", "node", n.Name, "err", err)
		}
		return
	}
	r = a.backoff(n.Name, now)
	reason = fmt.Sprintf("%s (attempt %d, next in %s)", reason, r.failures, r.next.Sub(now).Round(time.Millisecond))
	a.log.Warn("node launch failed", "node", n.Name, "reason", reason)
	if err := a.apply(ctx, "", func(s *domain.State) domain.Change { return s.LaunchFailed(n.Name, reason) }); err != nil {
		a.log.Warn("recording launch failure", "node", n.Name, "err", err)
	}
}

// backoff records one more failure of a node and when to try it next.
func (a *App) backoff(node string, now time.Time) *retry {
	r := a.retries[node]
	if r == nil {
		r = &retry{}
		a.retries[node] = r
	}
	r.failures++
	d := a.opts.LaunchBackoff
	for i := 1; i < r.failures && d < a.opts.MaxLaunchBackoff; i++ {
		d *= 2
	}
	r.next = now.Add(min(d, a.opts.MaxLaunchBackoff))
	return r
}

// teardown stops a DELETING cluster's agents and removes their directories,
// then its shared directory, and only then its records (NodeRemoved per node,
// ClusterDeleted): a crash anywhere before repeats the idempotent steps.
func (a *App) teardown(ctx context.Context, cluster string, nodes []provider.Node) error {
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() {
			if err := a.opts.Provider.Stop(ctx, n); err != nil {
				errs[i] = err
				return
			}
			errs[i] = a.opts.Provider.Remove(ctx, n)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := a.opts.Provider.RemoveCluster(ctx, domain.ClusterID(cluster)); err != nil {
		return err
	}
	a.log.Info("cluster torn down", "cluster", cluster, "nodes", len(nodes))
	return a.apply(ctx, "", func(s *domain.State) domain.Change { return s.FinishDelete(cluster) })
}

// StopAgents stops the agents of every node (for StopAgentsOnExit); the
// reconciler launches them again when the provisioner next starts.
func (a *App) StopAgents(ctx context.Context) error {
	run, teardown, _ := a.snapshot()
	for _, ns := range teardown {
		run = append(run, ns...)
	}
	errs := make([]error, len(run))
	var wg sync.WaitGroup
	for i, n := range run {
		wg.Go(func() { errs[i] = a.opts.Provider.Stop(ctx, n) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

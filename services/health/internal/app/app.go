// Package app applies telemetry, membership, remediation and command events
// to the health service and runs its check loop: the domain computes each
// change, store.Apply writes the durable part (verdicts, membership,
// remediation records, emitted events, inbox mark) at once, and only then
// does memory take it. It also answers ListNodeHealth.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/noderate"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/health/internal/adapters"
	"github.com/loom-ml/loom/services/health/internal/domain"
	"github.com/loom-ml/loom/services/health/internal/remedy"
)

// Source is the CloudEvents source of the health service's events.
const Source = "loom/health"

// App is the health service's state. The consumer and the check loop both
// change it, so each change is computed, written and committed under mu.
type App struct {
	st  *store.Store
	cfg domain.Config
	now func() time.Time
	log *slog.Logger
	// drv writes each change and reloads memory after a write whose
	// outcome is unknown; its calls run under mu.
	drv *store.Driver

	mu    sync.Mutex
	state *domain.State

	// hook, when set, sees every consumed event after the app's own part
	// is applied (the scan orchestration, scan.go).
	hook func(ctx context.Context, ev envelope.Event) error
	// metrics counts checks and remediations (RegisterMetrics); under mu.
	metrics *metrics
	// drops sums up the records dropped unhandled, by reason and node, in
	// the log at most once every noderate.LogEvery per reason.
	drops *noderate.DropLog
}

// New returns an app over st that declares a node UNHEALTHY after timeout of
// silence, with the default policy otherwise, reading time from now; Start
// loads it.
func New(st *store.Store, timeout time.Duration, now func() time.Time, log *slog.Logger) *App {
	return NewWith(st, domain.Config{Timeout: timeout}, now, log)
}

// NewWith is New with the whole policy: silence, mass silence, remediation
// and telemetry thresholds.
func NewWith(st *store.Store, cfg domain.Config, now func() time.Time, log *slog.Logger) *App {
	a := &App{st: st, cfg: cfg, now: now, log: log, state: domain.NewStateWith(cfg), drops: noderate.NewDropLog(log, dropLogMsg)}
	a.drv = store.NewDriver(st, a.reload)
	return a
}

// SetHook gives every consumed event, once the app has applied its own
// part, to h as well (the scan orchestration's entry point: ScanNodes,
// NodesNeedCheck, check results, heartbeats). An error from h is the
// handler's: the event is delivered again, and the app's part, already
// applied, is not repeated (inbox). Call before the consumer starts.
func (a *App) SetHook(h func(ctx context.Context, ev envelope.Event) error) { a.hook = h }

// Start loads the members, their verdicts, remediation records and each
// GPU's last judged last_xid; every member gets a full timeout of grace
// from now, since when it last spoke was not kept.
func (a *App) Start(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.reload(ctx)
}

func (a *App) reload(ctx context.Context) error {
	nodes, err := adapters.LoadNodes(ctx, a.st)
	if err != nil {
		return err
	}
	snap, err := adapters.LoadRemedy(ctx, a.st)
	if err != nil {
		return err
	}
	xids, err := adapters.LoadXids(ctx, a.st)
	if err != nil {
		return err
	}
	s := domain.NewStateWith(a.cfg)
	s.Load(a.now(), nodes)
	s.LoadXids(xids)
	if err := s.LoadRemedy(snap); err != nil {
		return err
	}
	a.state = s
	a.log.Info("state loaded", "nodes", len(nodes), "remediation_records", len(snap.Nodes))
	return nil
}

// Handle applies one consumed event; it is the consumer's bus.Handler. An
// event that can never apply is returned as bus.Permanent (dead-lettered).
func (a *App) Handle(ctx context.Context, ev envelope.Event) error {
	handled, err := a.handle(ctx, ev)
	if err != nil {
		return err
	}
	if handled && a.hook != nil {
		return a.hook(ctx, ev)
	}
	return nil
}

// handle applies ev; handled is false for a record dropped unhandled (past
// its node's rate).
func (a *App) handle(ctx context.Context, ev envelope.Event) (handled bool, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.drv.Ready(ctx); err != nil {
		return false, err
	}
	rec := recordOf(ev)
	now := a.now()
	c, err := a.state.HandleRecord(now, rec, ev.Payload)
	if err != nil {
		var inv *errs.InvalidError
		if errors.As(err, &inv) {
			// Dead-lettered, never handled again: health has passed it
			// all the same (its lag must not wait for it for ever).
			a.state.Passed(now, rec)
			return false, bus.Permanent(fmt.Errorf("event %s (%s): %w", ev.ID, ev.Type, err))
		}
		return false, fmt.Errorf("event %s (%s): %w", ev.ID, ev.Type, err)
	}
	committed, err := a.apply(ctx, ev.ID, c)
	if err != nil {
		return false, fmt.Errorf("event %s (%s): %w", ev.ID, ev.Type, err)
	}
	if !committed {
		// Applied before (a record written twice, a redelivery): its
		// change is not committed again, but health has passed it.
		a.state.Passed(now, rec)
	}
	if c.Dropped != "" {
		a.dropped(c.Dropped, "node", rec.Node, "type", ev.Type, "event", ev.ID)
		return false, nil
	}
	if len(c.Unknown) > 0 {
		a.log.Warn("a command named nodes health does not know: acted on the others", "event", ev.ID, "type", ev.Type,
			"unknown", len(c.Unknown), "first", c.Unknown[:min(len(c.Unknown), 10)])
	}
	a.countTaken(ev.Payload)
	return true, nil
}

// recordOf is how ev reached health (domain.Record): its position and time,
// and the node it is of, for a record of the telemetry topic. A record a
// node signed is that node's (it signs only its own) and counts against its
// rate; a service's (the sim provider's) is of the node it names, and is
// trusted; an unsigned one (an insecure bus) is of the node it names, and
// counts against its rate.
func recordOf(ev envelope.Event) domain.Record {
	if ev.Topic != topics.NodeTelemetry {
		return domain.Record{}
	}
	rec := domain.Record{Telemetry: true, Partition: ev.Partition, Offset: ev.Offset, HighWaterMark: ev.HighWaterMark, Time: ev.Time}
	if node, ok := strings.CutPrefix(ev.Signer, "nodes/"); ok {
		rec.Node, rec.Limited = node, true
		return rec
	}
	rec.Node, rec.Limited = payloadNode(ev.Payload), ev.Signer == ""
	return rec
}

// Passed is the consumer's bus.ConsumerConfig.Passed: a telemetry record
// the bus committed without handing it to Handle (refused before it, or
// dead-lettered after its attempts) still moves health's place in its
// partition. Else a last record of a quiet partition that never reached
// Handle — a forged one, say — would leave that partition behind for ever,
// and Check would judge no silence anywhere.
func (a *App) Passed(topic string, partition int, offset, highWaterMark int64) {
	if topic != topics.NodeTelemetry {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.state.Passed(a.now(), domain.Record{Telemetry: true, Partition: partition, Offset: offset, HighWaterMark: highWaterMark})
}

// payloadNode is the node a telemetry payload is of ("" for another type).
func payloadNode(p proto.Message) string {
	switch ev := p.(type) {
	case *eventsv1.HealthCheckCompleted:
		return ev.GetResult().GetNode()
	case interface{ GetNode() string }:
		return ev.GetNode()
	}
	return ""
}

// Check declares the nodes silent for the timeout UNHEALTHY, once each,
// and logs the drops that no later drop has (a flood's last).
func (a *App) Check(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.drops.Flush(a.now())
	if err := a.drv.Ready(ctx); err != nil {
		return err
	}
	if _, err := a.apply(ctx, "", a.state.Check(a.now())); err != nil {
		return fmt.Errorf("health check: %w", err)
	}
	return nil
}

// CheckLoop runs Check every interval of clock until ctx ends; a failed
// check is logged and tried again at the next tick. It is a service.Base loop.
func (a *App) CheckLoop(interval time.Duration, clock clockwork.Clock) func(context.Context) error {
	return func(ctx context.Context) error {
		t := clock.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.Chan():
				if err := a.Check(ctx); err != nil && ctx.Err() == nil {
					a.log.Warn("health check failed", "err", err)
				}
			}
		}
	}
}

// apply writes the durable part of c with the inbox mark inboxID, then
// commits c to memory. A change that only refreshes last-seen times (a
// routine heartbeat) writes nothing: it is idempotent as it is.
func (a *App) apply(ctx context.Context, inboxID string, c *domain.Change) (committed bool, err error) {
	if c.Durable() {
		var tx store.Tx
		if err := adapters.Write(&tx, c); err != nil {
			return false, err
		}
		emits := c.AllEmits()
		for _, e := range emits {
			ev, err := envelope.Route(e.Key, Source, e.Payload)
			if err != nil {
				return false, err
			}
			tx.Emit(ev)
		}
		applied, err := a.drv.Apply(ctx, inboxID, &tx, func() { a.state.Commit(c) })
		if err != nil {
			return false, fmt.Errorf("apply: %w", err)
		}
		if applied {
			a.countEmits(emits)
			for _, e := range emits {
				a.log.Info("health emitted", "node", e.Key, "type", fmt.Sprintf("%T", e.Payload), "event", e.Payload)
			}
		}
		return applied, nil
	}
	a.state.Commit(c)
	return true, nil
}

// Node returns the node's record, for reads; ok is false for non-members.
func (a *App) Node(name string) (n domain.Node, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p := a.state.Node(name); p != nil {
		return *p, true
	}
	return domain.Node{}, false
}

// Remedy returns a copy of the node's remediation record, or nil.
func (a *App) Remedy(name string) *remedy.Node {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.state.Remedy(name)
}

// HealthPolicy is the remediation policy as it applies to cluster now
// (domain.State.Policy).
func (a *App) HealthPolicy(cluster string) *loomv1.HealthPolicy {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.state.Policy(cluster)
}

// NodeHealthEvents returns cluster's node health events, newest first,
// with their stream ids (ports.EventLister), from the store.
func (a *App) NodeHealthEvents(ctx context.Context, cluster string) ([]*loomv1.NodeHealthEvent, []string, error) {
	h, err := adapters.LoadHistory(ctx, a.st, cluster)
	return h.Events, h.IDs, err
}

// ListNodeHealth returns health's view of every node of cluster (every node
// when cluster is empty), by name.
func (a *App) ListNodeHealth(cluster string) []*loomv1.NodeHealth {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []*loomv1.NodeHealth
	for _, n := range a.state.Nodes() {
		if cluster != "" && n.Cluster != cluster {
			continue
		}
		out = append(out, a.state.View(n.Name))
	}
	return out
}

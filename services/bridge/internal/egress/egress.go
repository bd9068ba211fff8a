// Package egress is the bridge's way out: it reads Loom's internal events
// (loom.events.v1, written through each owner's outbox), turns each into at
// most one public event (loom.public.v1, Map) and publishes it as a
// CloudEvent to every configured sink whose filter takes it (-egress:
// Kafka topics, Pub/Sub topics).
//
// Delivery is at least once and nothing is lost: the consumer's offset moves
// past an internal event only after every sink acknowledged its public
// event; a sink that is down blocks the consumer, which retries without end
// (it never dead-letters an event for a sink's outage); a public event has
// the same CloudEvent id on every redelivery, so readers dedupe on it.
// Because the internal events were written with their state changes
// (libs/store's outbox), no public event exists without its change and no
// change is left unpublished.
//
// Only changes go out: JobChanged is emitted for every update of a job (a
// new pending reason, a hold), so the last state published per resource is
// kept in Redis (bridge:egress:last:*, expiring after StateTTL without an
// update) and an event whose state equals it is not published.
package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/service"
	"github.com/loom-ml/loom/libs/topics"
	"github.com/loom-ml/loom/services/bridge/internal/cloudevent"
)

// Group is the egress consumer group.
const Group = "loom-bridge-egress"

// Topics are the internal topics whose events have a public form. Cluster
// events are not among them: a node's and a node health event's project is
// in their cluster's name (projects/{p}/clusters/{c}), so no cluster →
// project table is needed.
var Topics = []string{topics.JobEvents, topics.TrainingEvents, topics.ModelEvents, topics.HealthEvents, topics.NodeEvents}

// Defaults of Options.
const (
	// DefaultStateTTL is how long the last published state of a resource
	// is remembered after its last internal event: longer than the topics'
	// retention (7 days), so that a redelivery finds it. A resource silent
	// for longer and then updated without a state change is published
	// again with its (unchanged) state: a duplicate, never a loss.
	DefaultStateTTL = 8 * 24 * time.Hour
	// DefaultPrefix is the Redis key prefix of the egress's state.
	DefaultPrefix = "bridge:egress:"
	// MaxBatch bounds the internal events handled (and public events
	// published) in one go.
	MaxBatch = 256
	// retryBackoff and retryMaxBackoff pace the consumer's retries while a
	// sink is down: quick at first, then every 30 s at most.
	retryBackoff    = 100 * time.Millisecond
	retryMaxBackoff = 30 * time.Second
)

// SinkOpener opens the sink of a route (one per scheme: "kafka", "pubsub").
// A sink that is also an io.Closer is closed by Egress.Close.
type SinkOpener func(ctx context.Context, r Route) (cloudevent.Sink, error)

// KafkaOpener opens Kafka sinks on Loom's brokers, over sec (nil: plaintext).
func KafkaOpener(brokers []string, sec *bus.Security) SinkOpener {
	return func(_ context.Context, r Route) (cloudevent.Sink, error) {
		return NewKafkaSink(brokers, sec, r.Target), nil
	}
}

// Options configure an Egress.
type Options struct {
	// Routes are the parsed -egress entries (ParseRoutes).
	Routes []Route
	// Openers open each route's sink, by scheme. A route whose scheme has
	// no opener is refused by New.
	Openers map[string]SinkOpener
	// Redis keeps the last published state of each resource.
	Redis redis.Cmdable
	// Prefix is the Redis key prefix (default DefaultPrefix).
	Prefix string
	// StateTTL is how long a resource's last state is kept after its last
	// event (default DefaultStateTTL).
	StateTTL time.Duration
	// MaxData bounds a public event's data (default cloudevent.DefaultMaxData).
	MaxData int
	// Log receives what goes wrong (default slog.Default()).
	Log *slog.Logger
	// Meter, when set, counts what is published and what failed
	// (loom_bridge_egress_events_total{sink,type},
	// loom_bridge_egress_errors_total{sink}).
	Meter metric.Meter
}

// Egress publishes public events to its sinks. It is safe for concurrent
// use.
type Egress struct {
	sinks     []routed
	rdb       redis.Cmdable
	prefix    string
	ttl       time.Duration
	maxData   int
	log       *slog.Logger
	published metric.Int64Counter
	failures  metric.Int64Counter
}

type routed struct {
	route Route
	sink  cloudevent.Sink
}

// New opens a sink per route. An error names the route whose sink could
// not be opened; the sinks opened before it are closed.
func New(ctx context.Context, o Options) (*Egress, error) {
	if o.Redis == nil {
		return nil, errors.New("egress: Redis is required")
	}
	e := &Egress{rdb: o.Redis, prefix: o.Prefix, ttl: o.StateTTL, maxData: o.MaxData, log: o.Log}
	if e.prefix == "" {
		e.prefix = DefaultPrefix
	}
	if e.ttl <= 0 {
		e.ttl = DefaultStateTTL
	}
	if e.maxData <= 0 {
		e.maxData = cloudevent.DefaultMaxData
	}
	if e.log == nil {
		e.log = slog.Default()
	}
	if o.Meter != nil {
		e.published, _ = o.Meter.Int64Counter("loom_bridge_egress_events_total",
			metric.WithDescription("Public events the egress published, by sink and CloudEvent type."))
		e.failures, _ = o.Meter.Int64Counter("loom_bridge_egress_errors_total",
			metric.WithDescription("Failed publishes to a sink (each is retried until the sink takes it), by sink."))
	}
	for _, r := range o.Routes {
		open := o.Openers[r.Scheme]
		if open == nil {
			e.Close()
			return nil, fmt.Errorf("egress %q: %s sinks are not available in this bridge", r.Entry, r.Scheme)
		}
		s, err := open(ctx, r)
		if err != nil {
			e.Close()
			return nil, fmt.Errorf("egress %q: %w", r.Entry, err)
		}
		e.sinks = append(e.sinks, routed{route: r, sink: s})
	}
	return e, nil
}

// Close closes the sinks that are io.Closers.
func (e *Egress) Close() {
	for _, s := range e.sinks {
		if c, ok := s.sink.(io.Closer); ok {
			if err := c.Close(); err != nil {
				e.log.Warn("egress: close sink", "sink", s.sink.Name(), "err", err)
			}
		}
	}
}

// Consume is the egress consumer for service.Base.Run: group
// loom-bridge-egress over Topics, only the types that have a public form
// decoded (Filter), only services' signatures accepted (every topic read is
// written by a service), batches of up to MaxBatch.
//
// Retries: a sink failure is retried without end (MaxAttempts is the
// largest int), backing off to 30 s, so that a sink outage blocks the
// partition rather than dead-letter public events; the consumer's stop
// leaves the event uncommitted, to come again. An event that cannot be
// mapped is bus.Permanent and dead-lettered at once: no retry can fix it.
func (e *Egress) Consume() service.Consume {
	types := Types()
	return service.Consume{
		Topics:   Topics,
		Group:    Group,
		Handler:  e.Handle,
		Batch:    e.HandleBatch,
		MaxBatch: MaxBatch,
		Config: &bus.ConsumerConfig{
			Policy:      envelope.ServicesOnly,
			MaxAttempts: math.MaxInt,
			Backoff:     retryBackoff,
			MaxBackoff:  retryMaxBackoff,
			Filter:      func(r bus.Record) bool { return types[r.Type] },
		},
	}
}

// Handle publishes the public event of one internal event (the consumer's
// path for a lone event and for each event of a batch that failed).
func (e *Egress) Handle(ctx context.Context, ev envelope.Event) error {
	return e.HandleBatch(ctx, []envelope.Event{ev})
}

// HandleBatch maps evs, drops the ones whose state was published last for
// their resource, publishes the rest to every sink that takes them, and
// only then records their states. It returns nil once every sink
// acknowledged; an error leaves the batch to be retried (a bus.Permanent
// one for an event that cannot be mapped).
func (e *Egress) HandleBatch(ctx context.Context, evs []envelope.Event) error {
	ms := make([]Mapped, 0, len(evs))
	for _, ev := range evs {
		m, ok, err := Map(ev)
		if err != nil {
			return bus.Permanent(fmt.Errorf("egress: %s %s: %w", ev.Type, ev.ID, err))
		}
		if !ok {
			continue
		}
		if err := m.Event.Validate(e.maxData); err != nil {
			return bus.Permanent(fmt.Errorf("egress: %s from %s %s: %w", m.Event.Type, ev.Type, ev.ID, err))
		}
		ms = append(ms, m)
	}
	if len(ms) == 0 {
		return nil
	}
	last, err := e.lastStates(ctx, ms)
	if err != nil {
		return err
	}
	out := make([]Mapped, 0, len(ms))
	for _, m := range ms {
		if m.StateKey != "" {
			if last[m.StateKey] == m.StateToken {
				continue
			}
			last[m.StateKey] = m.StateToken
		}
		out = append(out, m)
	}
	if err := e.publish(ctx, out); err != nil {
		return err
	}
	return e.saveStates(ctx, last)
}

// PublishPublic publishes ev, a public event of project (an IngressResult),
// to every sink whose filter takes it, with loomproject set to project
// (none when project is "": then only sinks without a project filter take
// it) and without a credential; it returns once each acknowledged. ev must
// be valid (cloudevent.Event.Validate).
func (e *Egress) PublishPublic(ctx context.Context, project string, ev cloudevent.Event) error {
	ext := make(map[string]string, len(ev.Extensions)+1)
	for k, v := range ev.Extensions {
		if k != cloudevent.ExtCredential {
			ext[k] = v
		}
	}
	delete(ext, cloudevent.ExtProject)
	if project != "" {
		ext[cloudevent.ExtProject] = project
	}
	ev.Extensions = ext
	if err := ev.Validate(e.maxData); err != nil {
		return fmt.Errorf("egress: %s %s: %w", ev.Type, ev.ID, err)
	}
	return e.publish(ctx, []Mapped{{Event: ev, Project: project}})
}

// publish sends each sink the events its route takes, all sinks at once,
// and returns the first failure (nil when every sink acknowledged).
func (e *Egress) publish(ctx context.Context, ms []Mapped) error {
	if len(ms) == 0 {
		return nil
	}
	errc := make([]error, len(e.sinks))
	var wg sync.WaitGroup
	for i, s := range e.sinks {
		var sel []cloudevent.Event
		for _, m := range ms {
			if s.route.Takes(m.Project, m.Event.Type) {
				sel = append(sel, m.Event)
			}
		}
		if len(sel) == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.sink.Publish(ctx, sel...); err != nil {
				errc[i] = err
				if e.failures != nil {
					e.failures.Add(ctx, 1, metric.WithAttributes(attribute.String("sink", s.sink.Name())))
				}
				return
			}
			if e.published != nil {
				for _, ev := range sel {
					e.published.Add(ctx, 1, metric.WithAttributes(attribute.String("sink", s.sink.Name()), attribute.String("type", ev.Type)))
				}
			}
		}()
	}
	wg.Wait()
	// A sink that took the events while another failed takes them again
	// on the retry: readers dedupe on the id.
	return errors.Join(errc...)
}

func (e *Egress) stateKey(k string) string { return e.prefix + "last:" + k }

// lastStates reads the last published state of each resource ms names.
func (e *Egress) lastStates(ctx context.Context, ms []Mapped) (map[string]string, error) {
	keys := make([]string, 0, len(ms))
	seen := make(map[string]bool, len(ms))
	for _, m := range ms {
		if m.StateKey != "" && !seen[m.StateKey] {
			seen[m.StateKey] = true
			keys = append(keys, m.StateKey)
		}
	}
	out := make(map[string]string, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	rk := make([]string, len(keys))
	for i, k := range keys {
		rk[i] = e.stateKey(k)
	}
	vals, err := e.rdb.MGet(ctx, rk...).Result()
	if err != nil {
		return nil, fmt.Errorf("egress: read last states: %w", err)
	}
	for i, v := range vals {
		if s, ok := v.(string); ok {
			out[keys[i]] = s
		}
	}
	return out, nil
}

// saveStates records states after they were published, refreshing the
// expiry of those that did not change. A failure here is retried with the
// batch: its events are published again (same ids), never lost.
func (e *Egress) saveStates(ctx context.Context, states map[string]string) error {
	if len(states) == 0 {
		return nil
	}
	pipe := e.rdb.Pipeline()
	for k, v := range states {
		pipe.Set(ctx, e.stateKey(k), v, e.ttl)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("egress: record published states: %w", err)
	}
	return nil
}

package bridge

import (
	"context"

	"github.com/loom-ml/loom/libs/service"
	"github.com/loom-ml/loom/services/bridge/internal/egress"
)

// wire builds the bridge's parts from cfg. Each part owns its block below.
func wire(ctx context.Context, cfg Config, base *service.Base) (*wiring, error) {
	w := &wiring{}
	// --- ingress (Kafka source, dedupe, gateway calls, IngressService) ---
	// --- pubsub (Pub/Sub sources, dead letters and sinks) ---
	// --- egress (public events to sinks) ---
	// Bad -egress entries stop the start, each named with what is wrong.
	routes, err := egress.ParseRoutes(cfg.Egress)
	if err != nil {
		return nil, err
	}
	// pubsubSinks opens Pub/Sub sinks; nil: a pubsub: entry is refused at
	// start, naming the entry. INTEGRATION: with the pubsub part, a client
	// from pubsub.Dial (closed with the bridge) and
	//   func(ctx context.Context, r egress.Route) (cloudevent.Sink, error) { return pubsub.NewSink(ctx, client, r.Target) }
	var pubsubSinks egress.SinkOpener
	openers := map[string]egress.SinkOpener{"kafka": egress.KafkaOpener(cfg.Brokers, base.Kafka)}
	if pubsubSinks != nil {
		openers["pubsub"] = pubsubSinks
	}
	eg, err := egress.New(ctx, egress.Options{Routes: routes, Openers: openers, Redis: base.Redis,
		Log: base.Log, Meter: base.Telemetry.Meter})
	if err != nil {
		w.close()
		return nil, err
	}
	w.closers = append(w.closers, eg.Close)
	w.consumers = append(w.consumers, eg.Consume())
	// eg.PublishPublic sends the ingress's IngressResult events through the
	// same sinks and filters (it has the ingress's ResultPublisher shape).
	_ = eg.PublishPublic
	_ = ctx
	_ = cfg
	_ = base
	return w, nil
}

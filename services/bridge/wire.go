package bridge

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/loom-ml/loom/libs/service"
	"github.com/loom-ml/loom/libs/topics"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/bridge/internal/cloudevent"
	"github.com/loom-ml/loom/services/bridge/internal/egress"
	"github.com/loom-ml/loom/services/bridge/internal/ingress"
	"github.com/loom-ml/loom/services/bridge/internal/pubsub"
)

// wire builds the bridge's parts from cfg. Each part owns its block below.
func wire(ctx context.Context, cfg Config, base *service.Base) (*wiring, error) {
	w := &wiring{}
	// --- ingress (Kafka source, dedupe, gateway calls, IngressService) ---
	// One connection to the gateway for every message; each call carries
	// the message's own credential (ingress.App), none of the bridge's.
	gw, err := grpc.NewClient(cfg.GatewayAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("gateway %s: %w", cfg.GatewayAddr, err)
	}
	w.closers = append(w.closers, func() { _ = gw.Close() })
	// The dead letters' and the results' writer (not base.Producer, which
	// signs: a dead letter keeps the headers it came with).
	ingressWriter := ingress.NewKafkaWriter(cfg.Brokers, base.Kafka)
	w.closers = append(w.closers, func() { _ = ingressWriter.Close() })
	// publishResult sends each IngressResult event: to the public topic
	// (key = project) until a later block (egress) points it at the
	// public events' sinks; it is read at each call, so it may be set
	// before Run.
	publishResult := ingress.KafkaResults(ingressWriter, topics.Public)
	ingressApp, err := ingress.New(ingress.Config{
		Gateway: gw, Store: base.Store, MaxData: cfg.MaxMessageBytes, DedupeTTL: cfg.DedupeTTL,
		Results: func(ctx context.Context, project string, ev cloudevent.Event) error {
			return publishResult(ctx, project, ev)
		},
		Now: base.Clock.Now, Log: base.Log,
	})
	if err == nil {
		err = ingressApp.RegisterMetrics(base.Telemetry.Registry)
	}
	if err != nil {
		w.close()
		return nil, err
	}
	loomv1.RegisterIngressServiceServer(base.GRPC, ingressApp.Server())
	if cfg.IngressTopic != "" {
		src := &ingress.KafkaSource{Brokers: cfg.Brokers, Topic: cfg.IngressTopic, Security: base.Kafka, Log: base.Log}
		dlq := &ingress.KafkaDeadLetters{W: ingressWriter, Topic: cfg.IngressTopic + topics.DLQSuffix, Transport: src.Name(), Now: base.Clock.Now}
		w.loops = append(w.loops, func(ctx context.Context) error { return src.Run(ctx, ingressApp.Handler(dlq)) })
	}
	// The Pub/Sub sources below run with the same handler, bound to their
	// own dead letters; the egress points publishResult at its sinks.
	// --- pubsub (Pub/Sub sources, dead letters and sinks) ---
	// A Source per -pubsub-subscriptions entry, each run as a loop with the
	// ingress's handler bound to the Pub/Sub dead letters. The egress makes
	// its "pubsub:..." sinks itself (pubsub.Dial + pubsub.NewSink).
	psIn, err := pubsub.OpenIngress(ctx, pubsub.Config{Endpoint: cfg.PubSub.Endpoint, Project: cfg.PubSub.Project,
		Subscriptions: cfg.PubSub.Subscriptions, DeadLetterTopic: cfg.PubSub.DeadLetterTopic})
	if err != nil {
		w.close()
		return nil, fmt.Errorf("pubsub: %w", err)
	}
	if psIn != nil {
		w.closers = append(w.closers, func() { _ = psIn.Close() })
		for _, src := range psIn.Sources {
			// The ingress's handler, bound to the Pub/Sub dead letters.
			h := ingressApp.Handler(psIn.DeadLetters)
			w.loops = append(w.loops, func(ctx context.Context) error { return src.Run(ctx, h) })
		}
		base.Log.Info("pubsub ingress", "subscriptions", len(psIn.Sources), "dead_letters", psIn.DeadLetters.Topic())
	}
	// --- egress (public events to sinks) ---
	// Bad -egress entries stop the start, each named with what is wrong.
	routes, err := egress.ParseRoutes(cfg.Egress)
	if err != nil {
		w.close()
		return nil, err
	}
	// Pub/Sub sinks share one client, dialled only when a route needs it
	// and closed with the bridge (closing it stops its publishers).
	var psOut *pubsub.Client
	openers := map[string]egress.SinkOpener{
		"kafka": egress.KafkaOpener(cfg.Brokers, base.Kafka),
		"pubsub": func(ctx context.Context, r egress.Route) (cloudevent.Sink, error) {
			if psOut == nil {
				c, err := pubsub.Dial(ctx, pubsub.Config{Endpoint: cfg.PubSub.Endpoint, Project: cfg.PubSub.Project})
				if err != nil {
					return nil, err
				}
				psOut = c
				w.closers = append(w.closers, func() { _ = c.Close() })
			}
			sink, err := pubsub.NewSink(ctx, psOut, r.Target)
			if err != nil {
				return nil, err
			}
			return sink, nil
		},
	}
	eg, err := egress.New(ctx, egress.Options{Routes: routes, Openers: openers, Redis: base.Redis,
		Log: base.Log, Meter: base.Telemetry.Meter})
	if err != nil {
		w.close()
		return nil, err
	}
	w.closers = append(w.closers, eg.Close)
	w.consumers = append(w.consumers, eg.Consume())
	// The ingress's IngressResult events go out through the same sinks and
	// filters as every public event (Kafka's loom.public.v1, Pub/Sub's).
	publishResult = eg.PublishPublic
	return w, nil
}

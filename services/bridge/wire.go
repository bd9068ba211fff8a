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
	"github.com/loom-ml/loom/services/bridge/internal/ingress"
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
	// The pubsub part runs its sources with ingressApp.Handler(its dead
	// letters); the egress part may set publishResult.
	_, _ = ingressApp, publishResult
	// --- pubsub (Pub/Sub sources, dead letters and sinks) ---
	// --- egress (public events to sinks) ---
	_ = ctx
	_ = cfg
	_ = base
	return w, nil
}

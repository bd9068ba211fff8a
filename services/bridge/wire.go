package bridge

import (
	"context"
	"fmt"

	"github.com/loom-ml/loom/libs/service"
	"github.com/loom-ml/loom/services/bridge/internal/pubsub"
)

// wire builds the bridge's parts from cfg. Each part owns its block below.
func wire(ctx context.Context, cfg Config, base *service.Base) (*wiring, error) {
	w := &wiring{}
	// --- ingress (Kafka source, dedupe, gateway calls, IngressService) ---
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
			w.loops = append(w.loops, func(ctx context.Context) error {
				// INTEGRATION: the ingress block sets w.ingressHandler.
				if w.ingressHandler == nil {
					base.Log.Warn("no ingress handler: the Pub/Sub subscription is not read", "subscription", src.Name())
					<-ctx.Done()
					return nil
				}
				return src.Run(ctx, w.ingressHandler(psIn.DeadLetters))
			})
		}
		base.Log.Info("pubsub ingress", "subscriptions", len(psIn.Sources), "dead_letters", psIn.DeadLetters.Topic())
	}
	// --- egress (public events to sinks) ---
	return w, nil
}

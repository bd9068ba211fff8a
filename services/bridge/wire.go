package bridge

import (
	"context"

	"github.com/loom-ml/loom/libs/service"
)

// wire builds the bridge's parts from cfg. Each part owns its block below.
func wire(ctx context.Context, cfg Config, base *service.Base) (*wiring, error) {
	w := &wiring{}
	// --- ingress (Kafka source, dedupe, gateway calls, IngressService) ---
	// --- pubsub (Pub/Sub sources, dead letters and sinks) ---
	// --- egress (public events to sinks) ---
	_ = ctx
	_ = cfg
	_ = base
	return w, nil
}

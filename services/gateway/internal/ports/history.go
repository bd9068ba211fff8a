package ports

import (
	"context"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/services/gateway/internal/app"
)

// JobHistory handles loom.job.events.v1 in the shared history group: it
// records ended jobs for sacct.
func JobHistory(g *app.Gateway) bus.Handler {
	return func(ctx context.Context, ev envelope.Event) error { return g.HandleHistoryEvent(ctx, ev) }
}

package ports

import (
	"context"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/envelope"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/app"
)

type audit struct {
	loomv1.UnimplementedAuditServiceServer
	g *app.Gateway
}

func (s audit) ListAuditRecords(ctx context.Context, r *loomv1.ListAuditRecordsRequest) (*loomv1.ListAuditRecordsResponse, error) {
	return unary(s.g.ListAuditRecords(ctx, r))
}

// AuditEvents handles loom.audit.v1 in the shared audit group: it stores
// the audit trail that ListAuditRecords reads.
func AuditEvents(g *app.Gateway) bus.Handler {
	return func(ctx context.Context, ev envelope.Event) error { return g.HandleAuditEvent(ctx, ev) }
}

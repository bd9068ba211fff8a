package ports

import (
	"context"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/envelope"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	"github.com/loom-ml/loom/services/provisioner/internal/app"
)

// Handler is the provisioner's consumer: cluster and reservation commands,
// agent registrations, health verdicts and the scheduler's NodeDrained go to
// the app; heartbeats, job changes and other types on its topics are not
// its business and are skipped.
func Handler(a *app.App) bus.Handler {
	return func(ctx context.Context, ev envelope.Event) error {
		switch p := ev.Payload.(type) {
		case *eventsv1.CreateCluster:
			return a.CreateCluster(ctx, ev.ID, p)
		case *eventsv1.DeleteCluster:
			return a.DeleteCluster(ctx, ev.ID, p)
		case *eventsv1.UpdateCluster:
			return a.UpdateCluster(ctx, ev.ID, p)
		case *eventsv1.CreateReservation:
			return a.CreateReservation(ctx, ev.ID, p)
		case *eventsv1.DeleteReservation:
			return a.DeleteReservation(ctx, ev.ID, p)
		case *eventsv1.NodeDrained:
			return a.NodeDrained(ctx, ev.ID, p)
		case *eventsv1.AgentRegistered:
			return a.AgentRegistered(ctx, ev.ID, p)
		case *eventsv1.NodeHealthChanged:
			return a.NodeHealthChanged(ctx, ev.ID, p)
		}
		return nil
	}
}

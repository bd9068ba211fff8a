package ports

import (
	"context"
	"time"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/envelope"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
)

// NodeCommands is what the node-commands handler needs from the app
// (*app.Node): each method applies one command delivered as event id
// (sent: when it was written).
type NodeCommands interface {
	InjectNodeFault(ctx context.Context, id string, cmd *eventsv1.InjectNodeFault) error
	RunHealthCheck(ctx context.Context, id string, cmd *eventsv1.RunHealthCheck, sent time.Time) error
}

// NodeHandler is the agent's consumer of loom.node.commands.v1:
// InjectNodeFault and RunHealthCheck go to the node (which ignores other
// nodes' commands); other types are skipped.
func NodeHandler(n NodeCommands) bus.Handler {
	return func(ctx context.Context, ev envelope.Event) error {
		switch p := ev.Payload.(type) {
		case *eventsv1.InjectNodeFault:
			return n.InjectNodeFault(ctx, ev.ID, p)
		case *eventsv1.RunHealthCheck:
			return n.RunHealthCheck(ctx, ev.ID, p, ev.Time)
		}
		return nil
	}
}

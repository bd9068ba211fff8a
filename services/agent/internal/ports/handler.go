// Package ports connects the agent's app to the bus.
package ports

import (
	"context"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/envelope"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	"github.com/loom-ml/loom/services/agent/internal/app"
)

// Handler is the agent's consumer of loom.step.commands.v1: StartStep,
// StopStep, SignalStep, LaunchTasks and KillTasks go to the app (which ignores other nodes' steps);
// other types are skipped.
func Handler(a *app.App) bus.Handler {
	return func(ctx context.Context, ev envelope.Event) error {
		switch p := ev.Payload.(type) {
		case *eventsv1.StartStep:
			return a.StartStep(ctx, ev.ID, p)
		case *eventsv1.StopStep:
			return a.StopStep(ctx, ev.ID, p)
		case *eventsv1.SignalStep:
			return a.SignalStep(ctx, ev.ID, p)
		case *eventsv1.LaunchTasks:
			return a.LaunchTasks(ctx, ev.ID, p)
		case *eventsv1.KillTasks:
			return a.KillTasks(ctx, ev.ID, p)
		}
		return nil
	}
}

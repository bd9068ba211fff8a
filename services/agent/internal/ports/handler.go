// Package ports is the agent's edge: the consumer of its step commands
// (Handler, driving the app) and what the app drives in turn, the Runtime
// that runs its steps' and tasks' processes (implemented in
// internal/adapters).
package ports

import (
	"context"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/envelope"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
)

// Commands is what the handler needs from the app (*app.App): each method
// applies one command delivered as event id.
type Commands interface {
	StartStep(ctx context.Context, id string, cmd *eventsv1.StartStep) error
	StopStep(ctx context.Context, id string, cmd *eventsv1.StopStep) error
	SignalStep(ctx context.Context, id string, cmd *eventsv1.SignalStep) error
	LaunchTasks(ctx context.Context, id string, cmd *eventsv1.LaunchTasks) error
	KillTasks(ctx context.Context, id string, cmd *eventsv1.KillTasks) error
}

// Handler is the agent's consumer of loom.step.commands.v1: StartStep,
// StopStep, SignalStep, LaunchTasks and KillTasks go to the app (which ignores other nodes' steps);
// other types are skipped.
func Handler(a Commands) bus.Handler {
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

package agent

import (
	"context"
	"log/slog"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/envelope"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
)

// openCommands puts the opening of sealed step commands in front of h, the
// app's handler: a StartStep or LaunchTasks for this node whose confidential
// fields (script, command, environment) the scheduler sealed for it is
// opened with the node's command key (it came with the node identity) and
// handed on in the clear. One that does not open — sealed for another node
// or another command, tampered with, or an agent with no command key — is
// refused as a forged record is: dead-lettered with the reason
// (loom_dlq_reason bad-seal or no-command-key), never run. Commands that are
// not sealed (a scheduler on an insecure development bus) pass as they are:
// their signature is what makes them commands; sealing only hides them from
// the other nodes. Another node's command (the app ignores it) is not opened.
func openCommands(node string, id *identity, log *slog.Logger, h bus.Handler) bus.Handler {
	key := func() []byte {
		if id == nil {
			return nil
		}
		return id.current().CommandKey
	}
	if len(key()) == 0 {
		log.Warn("this agent has no command key (it runs without a node identity from the gateway, or with one issued before command keys): "+
			"step commands sealed for this node will be refused and dead-lettered, not run", "node", node)
	}
	return func(ctx context.Context, ev envelope.Event) error {
		if !envelope.IsSealed(ev.Payload) || commandNode(ev) != node {
			return h(ctx, ev)
		}
		opened, err := envelope.OpenCommand(key(), ev.Payload)
		if err != nil {
			log.Error("refusing a sealed step command that does not open with this node's command key: dead-lettered, not run",
				"node", node, "id", ev.ID, "type", ev.Type, "reason", envelope.ReasonOf(err), "err", err)
			return bus.Permanent(err)
		}
		ev.Payload = opened
		return h(ctx, ev)
	}
}

// commandNode is the node a sealable step command is for.
func commandNode(ev envelope.Event) string {
	switch p := ev.Payload.(type) {
	case *eventsv1.StartStep:
		return p.GetNode()
	case *eventsv1.LaunchTasks:
		return p.GetNode()
	}
	return ""
}

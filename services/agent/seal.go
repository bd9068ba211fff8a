package agent

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/envelope"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	"github.com/loom-ml/loom/services/agent/internal/app"
)

// openCommands puts the opening of sealed step commands in front of h, the
// app's handler: a StartStep or LaunchTasks for this node whose confidential
// fields (script, command, environment) the scheduler sealed for it is
// opened with the node's command key (it came with the node identity) and
// handed on in the clear. One that does not open — sealed for another node
// or another command, tampered with, or an agent with no command key — is
// refused as a forged record is: dead-lettered with the reason
// (loom_dlq_reason bad-seal or no-command-key), never run. So is one for this
// node that is not sealed (unsealed), where the agent has a node identity
// (a signed bus): the scheduler seals every StartStep and LaunchTasks there,
// so one in the clear did not come from it as it should, and its script
// and secrets have been readable by every node. Only on an insecure
// development bus (no identity: id nil), where the scheduler has no key to
// seal with, do commands in the clear run. Another node's command (the app
// ignores it) is not opened.
func openCommands(node string, id *identity, log *slog.Logger, h bus.Handler) bus.Handler {
	key := func() []byte {
		if id == nil {
			return nil
		}
		return id.current().CommandKey
	}
	registration := func() string {
		if id == nil {
			return ""
		}
		return id.current().Registration
	}
	if len(key()) == 0 {
		log.Warn("this agent has no command key (it runs without a node identity from the gateway, or with one issued before command keys): "+
			"step commands sealed for this node will be refused and dead-lettered, not run", "node", node)
	}
	return func(ctx context.Context, ev envelope.Event) error {
		if !envelope.IsSealable(ev.Payload) || commandNode(ev) != node {
			return h(ctx, ev)
		}
		if !envelope.IsSealed(ev.Payload) {
			if id == nil {
				return h(ctx, ev)
			}
			err := envelope.Reject(envelope.ReasonUnsealed, "%s for %s is not sealed: on a signed bus the scheduler seals every one for its node", ev.Type, node)
			log.Error("refusing a step command that is not sealed: dead-lettered, not run",
				"node", node, "id", ev.ID, "type", ev.Type, "signer", ev.Signer, "reason", envelope.ReasonUnsealed)
			return bus.Permanent(err)
		}
		// Compared as sealed: an adopted registration (an identity from
		// before registrations, renewed since) seals as none, and the
		// scheduler, which no AgentRegistered told of the adoption, seals
		// for none.
		if want, own := commandRegistration(ev), registration(); id != nil && auth.SealingRegistration(want) != auth.SealingRegistration(own) {
			// Sealed for another registration of this node: the scheduler
			// sealed it before it learnt this one (or for the node's
			// earlier image). This agent cannot open it, and does not try;
			// the app records it LOST so that its job does not wait on it.
			why := fmt.Sprintf("sealed for registration %q of %s, and this agent is of registration %q (the node registered again): not run",
				want, node, own)
			log.Warn("a step command sealed for another registration of this node: reported lost, not run",
				"node", node, "id", ev.ID, "type", ev.Type, "sealed_for", want, "registration", own)
			return h(app.WithUnopened(ctx, why), ev)
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

// commandRegistration is the registration a sealable step command was
// sealed for (StartStep.registration).
func commandRegistration(ev envelope.Event) string {
	switch p := ev.Payload.(type) {
	case *eventsv1.StartStep:
		return p.GetRegistration()
	case *eventsv1.LaunchTasks:
		return p.GetRegistration()
	}
	return ""
}

package ports

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/envelope"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	"github.com/loom-ml/loom/services/provisioner/internal/app"
	"github.com/loom-ml/loom/services/provisioner/internal/domain"
)

// Handler is the provisioner's consumer: cluster and reservation commands,
// agent registrations, health verdicts, health's repairs (RemediateNode)
// and the scheduler's NodeDrained go to
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
			return a.AgentRegistered(ctx, ev.ID, certified(ev).(*eventsv1.AgentRegistered))
		case *eventsv1.NodeHealthChanged:
			return a.NodeHealthChanged(ctx, ev.ID, p)
		case *eventsv1.RemediateNode:
			return a.RemediateNode(ctx, ev.ID, p)
		}
		return nil
	}
}

// BatchHandler is the provisioner's consumer for the events that are
// waiting (bus.Consumer.WithBatch): the node reports among them
// (domain.Batched: registrations, health verdicts) go to the app as one
// change with one store write; what Handler skips is skipped here too. A
// batch that holds anything else (a command, NodeDrained) is refused, and
// the consumer hands its events to Handler one by one: those are rare, and
// each is decided on its own.
func BatchHandler(a *app.App) bus.BatchHandler {
	return func(ctx context.Context, evs []envelope.Event) error {
		ids := make([]string, 0, len(evs))
		payloads := make([]proto.Message, 0, len(evs))
		for _, ev := range evs {
			switch {
			case domain.Batched(ev.Payload):
				ids, payloads = append(ids, ev.ID), append(payloads, certified(ev))
			case handled(ev.Payload):
				return fmt.Errorf("event %s (%s) is applied on its own", ev.ID, ev.Type)
			}
		}
		return a.ApplyBatch(ctx, ids, payloads)
	}
}

// handled reports whether Handler acts on payload (rather than skipping it).
func handled(payload proto.Message) bool {
	switch payload.(type) {
	case *eventsv1.CreateCluster, *eventsv1.DeleteCluster, *eventsv1.UpdateCluster, *eventsv1.CreateReservation,
		*eventsv1.DeleteReservation, *eventsv1.NodeDrained, *eventsv1.AgentRegistered, *eventsv1.NodeHealthChanged,
		*eventsv1.RemediateNode:
		return true
	}
	return false
}

// certified is ev's payload as the domain is to see it: an AgentRegistered
// names the registration of the identity that signed it, from its verified
// certificate (envelope.Event.SignerRegistration), whatever the agent wrote
// there; "" on a bus that is not signed.
func certified(ev envelope.Event) proto.Message {
	r, ok := ev.Payload.(*eventsv1.AgentRegistered)
	if !ok || r.GetRegistration() == ev.SignerRegistration {
		return ev.Payload
	}
	c := proto.Clone(r).(*eventsv1.AgentRegistered)
	c.Registration = ev.SignerRegistration
	return c
}

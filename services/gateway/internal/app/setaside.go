package app

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/store"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/adapters"
)

// reload is what the gateway does after a write whose outcome is unknown:
// it holds no state in memory, only waiters, which it wakes so that they
// read Redis again (the write may have finished their operation).
func (g *Gateway) reload(context.Context) error {
	g.ops.notifyAll()
	return nil
}

// setAsideInbox is the inbox id that makes failing what a set-aside command
// belonged to happen once, though the relay may tell of it again.
func setAsideInbox(eventID string) string { return "setaside:" + eventID }

// HandleSetAside is the gateway's store.SetAsideFunc: a command its relay set
// aside because the broker refuses it for good never reaches its owner, so
// the gateway fails, visibly and once, what the command belonged to. An
// operation's command (cluster or reservation create, update, delete) ends
// the operation with InvalidArgument and the reason; a SubmitJob ends the job
// FAILED with the reason, in the job history that GetJob, ListJobs and sacct
// read. Other commands (cancel, update, steps) answered their caller already;
// they are only logged by the relay.
func (g *Gateway) HandleSetAside(ctx context.Context, e store.SetAside) error {
	if e.Kind != store.SetAsideRefused {
		return nil // not one of the gateway's own commands
	}
	ev, err := envelope.Default.Decode(e.Message)
	if err != nil {
		return nil // nothing known to fail
	}
	msg := fmt.Sprintf("the %s command could not be delivered: %s; commands must fit the broker's max.message.bytes (1 MiB by default)",
		envelope.TypeOf(ev.Payload), e.Reason)
	switch p := ev.Payload.(type) {
	case *eventsv1.CreateCluster:
		return g.failOperation(ctx, ev.ID, p.GetOperation(), msg)
	case *eventsv1.UpdateCluster:
		return g.failOperation(ctx, ev.ID, p.GetOperation(), msg)
	case *eventsv1.DeleteCluster:
		return g.failOperation(ctx, ev.ID, p.GetOperation(), msg)
	case *eventsv1.CreateReservation:
		return g.failOperation(ctx, ev.ID, p.GetOperation(), msg)
	case *eventsv1.DeleteReservation:
		return g.failOperation(ctx, ev.ID, p.GetOperation(), msg)
	case *eventsv1.SubmitJob:
		return g.failJob(ctx, ev.ID, p.GetJob(), msg)
	case *eventsv1.UploadModel:
		return g.failOperation(ctx, ev.ID, p.GetRequestId(), msg) // its request id is its operation's name
	case *eventsv1.ExportModel:
		return g.failOperation(ctx, ev.ID, p.GetOperation(), msg)
	}
	return nil
}

// failOperation ends the operation opName with InvalidArgument and msg, as
// the provisioner's ClusterOperationFailed would, and wakes its waiters.
func (g *Gateway) failOperation(ctx context.Context, eventID, opName, msg string) error {
	if opName == "" {
		return nil
	}
	failed := &eventsv1.ClusterOperationFailed{Operation: opName, Code: int32(codes.InvalidArgument), Message: msg}
	return g.HandleClusterEvent(ctx, envelope.Event{ID: setAsideInbox(eventID), Type: envelope.TypeOf(failed), Payload: failed})
}

// failJob records the accepted job j FAILED with msg in the job history,
// where GetJob finds it since the scheduler never heard of it.
func (g *Gateway) failJob(ctx context.Context, eventID string, j *loomv1.Job, msg string) error {
	if j.GetName() == "" {
		return nil
	}
	f := proto.Clone(j).(*loomv1.Job)
	f.State, f.StateReason = loomv1.JobState_FAILED, msg
	f.EndTime = timestamppb.New(g.now())
	tx := &store.Tx{}
	if err := adapters.PutHistory(tx, f); err != nil {
		return err
	}
	if _, err := g.repo.Apply(ctx, setAsideInbox(eventID), tx); err != nil {
		return fmt.Errorf("fail job %s: %w", j.GetName(), err)
	}
	g.opt.Log.WarnContext(ctx, "job failed: its command could not be delivered", "job", j.GetName(), "reason", msg)
	g.jobs.publish(f)
	return nil
}

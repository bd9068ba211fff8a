package app

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/paging"
	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/trainingspec"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/adapters"
	"github.com/loom-ml/loom/services/gateway/internal/domain"
)

// ListOperations lists a project's operations in name order, which is the
// order they were started (operation ids are ULIDs), one page at a time
// (libs/paging). The filter (AIP-160, trainingspec.ParseFilterFor) takes the
// keys done, verb and target, and only those. The store is read in bounded HSCAN steps and
// at most one page is held (adapters.Repo.ScanOperations).
func (g *Gateway) ListOperations(ctx context.Context, req *loomv1.ListOperationsRequest) (*loomv1.ListOperationsResponse, error) {
	var v errs.Validator
	project, err := resname.ParseProject(req.GetParent())
	if err != nil {
		v.Add("parent", "%v", err)
	}
	filter, ferr := trainingspec.ParseFilterFor(req.GetFilter(), operationFilterKeys)
	var inv *errs.InvalidError
	switch {
	case errors.As(ferr, &inv):
		for _, x := range inv.Violations {
			v.Add(x.Field, "%s; e.g. \"done=false AND verb=create\"", x.Reason)
		}
	case ferr != nil:
		v.Add("filter", "%v; keys are done, verb and target, e.g. \"done=false AND verb=create\"", ferr)
	}
	size, after := paging.Check(&v, req)
	if err := v.Err(); err != nil {
		return nil, err
	}
	prefix := resname.Operation{Project: project.ID}.String() // "projects/{p}/operations/"
	// One more than the page: its presence says another page follows.
	ops, err := g.repo.ScanOperations(ctx, prefix, after, size+1, func(op *loomv1.Operation) bool {
		return filter.Match(func(key string) (string, bool) { return operationField(op, key) })
	})
	if err != nil {
		return nil, err
	}
	page, next := paging.Page(ops, (*loomv1.Operation).GetName, "", size)
	resp := &loomv1.ListOperationsResponse{Operations: page}
	if next != "" {
		resp.NextPageToken = paging.Token(req, next)
	}
	return resp, nil
}

// operationFilterKeys are what ListOperations filters on: a filter naming
// another key ("state=DONE"), or done other than true or false, is refused
// (it would match nothing and read as "no operations").
var operationFilterKeys = trainingspec.FilterKeys{
	{Name: "done", Kind: trainingspec.FilterEnum, Values: []string{"false", "true"}},
	{Name: "verb", Kind: trainingspec.FilterText},
	{Name: "target", Kind: trainingspec.FilterText},
}

// operationField is an operation's value for a filter key.
func operationField(op *loomv1.Operation, key string) (string, bool) {
	switch key {
	case "done":
		return strconv.FormatBool(op.GetDone()), true
	case "verb":
		return op.GetMetadata().GetVerb(), true
	case "target":
		return op.GetMetadata().GetTarget(), true
	}
	return "", false
}

// CancelOperation cancels an operation that is not done, as
// google.longrunning's CancelOperation: it ends with error code CANCELLED.
// Only a cluster create can be cancelled: the cancelled create and a new
// delete operation are stored, and the DeleteCluster command emitted, in one
// Apply; the provisioner applies a delete at once even in the middle of a
// create (its DeleteCluster stops pending launches and tears the cluster
// down), and the create's own later events, success or failure, leave the
// done operation as it is. The Apply is conditional on the operation being
// still the one read (updateOperation): a completion applied in between
// wins, and the cancel is then FailedPrecondition like any cancel of a done
// operation. Updates, deletes, reservations and model operations are
// FailedPrecondition, with what to do instead. An operation already
// cancelled is answered again; one done otherwise is FailedPrecondition.
func (g *Gateway) CancelOperation(ctx context.Context, req *loomv1.CancelOperationRequest) (*loomv1.Operation, error) {
	name, err := resname.ParseOperation(req.GetName())
	if err != nil {
		return nil, errs.Invalid("name", "%v", err)
	}
	var (
		answer    *loomv1.Operation // what the call returns
		cancelled *loomv1.Operation // the write, when it is one
		del       *loomv1.Operation
		audited   func()
	)
	// The inbox id makes two racing cancels of one operation apply once.
	applied, err := g.updateOperation(ctx, req.GetName(), "cancel:"+req.GetName(), func(op *loomv1.Operation) (*store.Tx, error) {
		cancelled, answer = nil, op
		if op.GetDone() {
			if op.GetError().GetCode() == int32(codes.Canceled) {
				return nil, nil
			}
			return nil, fmt.Errorf("operation %s is already done; only a running operation can be cancelled: %w", op.GetName(), errs.FailedPrecondition)
		}
		md := op.GetMetadata()
		target := md.GetTarget()
		if _, cerr := resname.ParseCluster(target); md.GetVerb() != domain.VerbCreate || cerr != nil {
			return nil, fmt.Errorf("operation %s (%s %s) cannot be cancelled: %s: %w",
				op.GetName(), md.GetVerb(), target, notCancellable(md.GetVerb()), errs.FailedPrecondition)
		}
		now := g.now()
		del = domain.NewOperation(resname.Operation{Project: name.Project, ID: envelope.NewID()}.String(), domain.VerbDelete, target, now)
		cmd, err := route(ctx, target, &eventsv1.DeleteCluster{Operation: del.GetName(), Cluster: target})
		if err != nil {
			return nil, err
		}
		cancelled = proto.Clone(op).(*loomv1.Operation)
		cancelled.Done = true
		cancelled.Metadata.Progress = "cancelled"
		cancelled.Metadata.EndTime = timestamppb.New(now)
		cancelled.Result = &loomv1.Operation_Error{Error: &loomv1.OperationError{
			Code:    int32(codes.Canceled),
			Message: fmt.Sprintf("cancelled; cluster %s is being deleted by operation %s", target, del.GetName()),
		}}
		tx := &store.Tx{}
		if err := adapters.PutOperation(tx, cancelled); err != nil {
			return nil, err
		}
		if err := adapters.PutOperation(tx, del); err != nil {
			return nil, err
		}
		tx.Emit(cmd)
		audited = auditInline(ctx, tx)
		return tx, nil
	})
	if err != nil {
		if errors.Is(err, errs.FailedPrecondition) {
			return nil, err // it names the operation and says why already
		}
		return nil, fmt.Errorf("cancel %s: %w", req.GetName(), err)
	}
	if cancelled == nil {
		return answer, nil // cancelled before
	}
	if !applied {
		return g.repo.Operation(ctx, req.GetName())
	}
	audited()
	g.opt.Log.InfoContext(ctx, "operation cancelled", "operation", cancelled.GetName(),
		"target", cancelled.GetMetadata().GetTarget(), "delete", del.GetName())
	g.ops.notify(cancelled.GetName())
	return cancelled, nil
}

// maxOperationRaces bounds how often updateOperation decides again after
// losing a race; each loss means another write to the same operation
// landed, and an operation has only a handful of writers (its service's
// events, a cancel), so hitting it means something keeps rewriting it.
const maxOperationRaces = 16

// updateOperation is the one read-modify-write of a stored operation: it
// reads the operation name, asks decide for the write (a nil tx: nothing to
// write) and applies it, with inboxID's mark, only while the operation is
// still stored as read (adapters.ExpectOperation). When another writer, in
// this gateway or another, changed the operation in between, nothing is
// written and it reads again and decides again, so no decision is written
// over a state it did not see: a cancel never overwrites a completion, nor
// a late event a cancel. It returns decide's error, the read's
// (errs.NotFound for an unknown operation) or the Apply's, and whether the
// write was applied (false also when decide wrote nothing or the inbox id
// was applied before).
func (g *Gateway) updateOperation(ctx context.Context, name, inboxID string, decide func(op *loomv1.Operation) (*store.Tx, error)) (bool, error) {
	for range maxOperationRaces {
		op, stored, err := g.repo.OperationAsStored(ctx, name)
		if err != nil {
			return false, err
		}
		tx, err := decide(op)
		if err != nil || tx == nil {
			return false, err
		}
		adapters.ExpectOperation(tx, name, stored)
		if h := g.beforeOperationWrite; h != nil {
			h(name)
		}
		applied, err := g.repo.Apply(ctx, inboxID, tx)
		if errors.Is(err, store.ErrConflict) {
			g.opt.Log.DebugContext(ctx, "operation changed while a write was decided; deciding again", "operation", name)
			continue
		}
		if err != nil {
			return false, fmt.Errorf("update operation %s: %w", name, err)
		}
		return applied, nil
	}
	return false, fmt.Errorf("update operation %s: it changed under %d writes in a row; try again: %w", name, maxOperationRaces, errs.Aborted)
}

// notCancellable says why an operation of verb cannot be cancelled, and
// what to do instead.
func notCancellable(verb string) string {
	switch verb {
	case domain.VerbDelete:
		return "a delete cannot be undone once requested; wait for it and create the cluster again"
	case domain.VerbUpdate:
		return "an update is applied node by node and is not rolled back; wait for it, then update the cluster back"
	case domain.VerbExport:
		return "an export is idempotent and resumable; wait for it, or delete what it copied at the destination"
	case domain.VerbUpload:
		return "an upload registers one version; wait for it, then delete the version (loom models delete)"
	}
	return "only a cluster create can be cancelled; wait for it with loom operations wait"
}

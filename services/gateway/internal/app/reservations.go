package app

import (
	"context"
	"fmt"
	"strings"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/resname"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/adapters"
	"github.com/loom-ml/loom/services/gateway/internal/domain"
)

// CreateReservation validates req (domain.AcceptReservation), checks that
// the provisioner has no reservation of that name, and stores a new
// operation together with the CreateReservation command. A retry with the
// same request_id returns the first call's operation.
func (g *Gateway) CreateReservation(ctx context.Context, req *loomv1.CreateReservationRequest) (*loomv1.Operation, error) {
	kind, rid, fp := adapters.RequestCreateReservation, req.GetRequestId(), domain.RequestFingerprint(req)
	if op, ok, err := g.replayOperation(ctx, kind, rid, fp); err != nil || ok {
		return op, err
	}
	r, err := domain.AcceptReservation(req)
	if err != nil {
		return nil, err
	}
	_, err = g.own.Reservations.GetReservation(ctx, &loomv1.GetReservationRequest{Name: r.GetName()})
	switch {
	case err == nil:
		return nil, fmt.Errorf("reservation %s: %w", r.GetName(), errs.AlreadyExists)
	case !isNotFound(err):
		return nil, fmt.Errorf("ask the provisioner for %s: %w", r.GetName(), err)
	}
	parent, _ := resname.ParseProject(req.GetParent())
	op := domain.NewOperation(resname.Operation{Project: parent.ID, ID: envelope.NewID()}.String(), domain.VerbCreate, r.GetName(), g.now())
	cmd, err := route(ctx, r.GetName(),
		&eventsv1.CreateReservation{Operation: op.GetName(), Reservation: r})
	if err != nil {
		return nil, err
	}
	return g.startOperation(ctx, kind, rid, fp, op, cmd)
}

// DeleteReservation checks that the reservation exists (NotFound) and that
// no cluster uses it (FailedPrecondition), and stores a new operation
// together with the DeleteReservation command. A retry with the same
// request_id returns the first call's operation.
func (g *Gateway) DeleteReservation(ctx context.Context, req *loomv1.DeleteReservationRequest) (*loomv1.Operation, error) {
	kind, rid, fp := adapters.RequestDeleteReservation, req.GetRequestId(), domain.RequestFingerprint(req)
	if err := domain.CheckRequestID(rid); err != nil {
		return nil, err
	}
	if op, ok, err := g.replayOperation(ctx, kind, rid, fp); err != nil || ok {
		return op, err
	}
	res, err := resname.ParseReservation(req.GetName())
	if err != nil {
		return nil, errs.Invalid("name", "%v", err)
	}
	r, err := g.own.Reservations.GetReservation(ctx, &loomv1.GetReservationRequest{Name: req.GetName()})
	if err != nil {
		if isNotFound(err) {
			return nil, fmt.Errorf("reservation %s: %w", req.GetName(), errs.NotFound)
		}
		return nil, fmt.Errorf("ask the provisioner for %s: %w", req.GetName(), err)
	}
	if len(r.GetConsumers()) > 0 || r.GetInUse() > 0 {
		return nil, fmt.Errorf("reservation %s is in use (%d nodes, clusters: %s); delete or shrink those clusters first: %w",
			req.GetName(), r.GetInUse(), strings.Join(r.GetConsumers(), ", "), errs.FailedPrecondition)
	}
	op := domain.NewOperation(resname.Operation{Project: res.Project, ID: envelope.NewID()}.String(), domain.VerbDelete, req.GetName(), g.now())
	cmd, err := route(ctx, req.GetName(),
		&eventsv1.DeleteReservation{Operation: op.GetName(), Reservation: req.GetName()})
	if err != nil {
		return nil, err
	}
	return g.startOperation(ctx, kind, rid, fp, op, cmd)
}

// GetReservation reads a reservation from the provisioner.
func (g *Gateway) GetReservation(ctx context.Context, req *loomv1.GetReservationRequest) (*loomv1.Reservation, error) {
	if _, err := resname.ParseReservation(req.GetName()); err != nil {
		return nil, errs.Invalid("name", "%v", err)
	}
	return g.own.Reservations.GetReservation(ctx, req)
}

// ListReservations lists a project's reservations from the provisioner.
func (g *Gateway) ListReservations(ctx context.Context, req *loomv1.ListReservationsRequest) (*loomv1.ListReservationsResponse, error) {
	if _, err := resname.ParseProject(req.GetParent()); err != nil {
		return nil, errs.Invalid("parent", "%v", err)
	}
	return g.own.Reservations.ListReservations(ctx, req)
}

// ListCapacity lists a project's capacity pools from the provisioner.
func (g *Gateway) ListCapacity(ctx context.Context, req *loomv1.ListCapacityRequest) (*loomv1.ListCapacityResponse, error) {
	if _, err := resname.ParseProject(req.GetParent()); err != nil {
		return nil, errs.Invalid("parent", "%v", err)
	}
	return g.own.Reservations.ListCapacity(ctx, req)
}

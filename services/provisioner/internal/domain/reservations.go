package domain

import (
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/clusterspec"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/resname"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// CreateReservation decides a CreateReservation command: the reservation
// recorded (ReservationChanged, operation done), INVALID_ARGUMENT naming bad
// fields, or ALREADY_EXISTS. Failures travel as ClusterOperationFailed with
// the reservation's name in its cluster field.
func (s *State) CreateReservation(cmd *eventsv1.CreateReservation, now time.Time) Change {
	in, op := cmd.GetReservation(), cmd.GetOperation()
	name := in.GetName()
	var v errs.Validator
	_, ok := reservationOf(name)
	v.Check(ok, "reservation.name", "must be projects/{project}/reservations/{reservation_id} with reservation_id matching %s, got %q",
		resname.IDPattern, name)
	if in.GetZone() == "" {
		v.Add("reservation.zone", "is required")
	} else if len(in.GetZone()) <= 256 {
		clusterspec.CheckZone(&v, "reservation.zone", in.GetZone()) // a zone a pool can name
	} else {
		v.Add("reservation.zone", "%d bytes, not a zone name", len(in.GetZone()))
	}
	if in.GetMachineType() == "" {
		v.Add("reservation.machine_type", "is required")
	} else if _, known := clusterspec.Machine(in.GetMachineType()); !known {
		v.Add("reservation.machine_type", "unknown machine type %q", in.GetMachineType())
	}
	v.Check(in.GetCount() >= 1, "reservation.count", "must be at least 1, got %d", in.GetCount())
	v.Check(in.GetCount() <= clusterspec.MaxReservationNodes, "reservation.count",
		"must be at most %d machines, got %d", clusterspec.MaxReservationNodes, in.GetCount())
	if err := v.Err(); err != nil {
		return only(failed(op, name, err, err.Error()))
	}
	if s.Reservations[name] != nil {
		return only(failed(op, name, errs.AlreadyExists, fmt.Sprintf("reservation %s already exists", name)))
	}
	r := &loomv1.Reservation{Name: name, Zone: in.GetZone(), MachineType: in.GetMachineType(), Count: in.GetCount(),
		CreateTime: timestamppb.New(now)}
	return Change{PutReservations: []*loomv1.Reservation{r},
		Events: []proto.Message{&eventsv1.ReservationChanged{Operation: op, Reservation: r, OperationDone: true}}}
}

// DeleteReservation decides a DeleteReservation command: the reservation
// gone (ReservationDeleted), NOT_FOUND, or FAILED_PRECONDITION while a
// cluster (deleting ones included) draws from it.
func (s *State) DeleteReservation(cmd *eventsv1.DeleteReservation) Change {
	op, name := cmd.GetOperation(), cmd.GetReservation()
	if s.Reservations[name] == nil {
		return only(failed(op, name, errs.NotFound, fmt.Sprintf("reservation %s not found", name)))
	}
	if r := s.Reservation(name); len(r.GetConsumers()) > 0 {
		return only(failed(op, name, errs.FailedPrecondition, fmt.Sprintf("reservation %s is in use by %s (%d nodes); delete or resize them first",
			name, strings.Join(r.GetConsumers(), ", "), r.GetInUse())))
	}
	return Change{DelReservations: []string{name},
		Events: []proto.Message{&eventsv1.ReservationDeleted{Operation: op, Reservation: name}}}
}

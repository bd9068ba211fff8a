package domain

import (
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/clusterspec"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/resname"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// AcceptReservation checks a create request and returns the reservation to
// create: req.reservation named from parent and reservation_id, its
// output-only fields cleared. The id must be a valid name for Slurm and in
// URLs (lower case, digits, hyphens), zone is required and a zone name (a
// pool's, clusterspec.CheckZone), machine_type must be
// in the machine catalog, count at least 1 and at most
// clusterspec.MaxReservationNodes. Every problem is reported at once.
func AcceptReservation(req *loomv1.CreateReservationRequest) (*loomv1.Reservation, error) {
	var v errs.Validator
	parent, err := resname.ParseProject(req.GetParent())
	project := parent.ID
	if err != nil {
		v.Add("parent", "%v", err)
	}
	switch id := req.GetReservationId(); {
	case id == "":
		v.Add("reservation_id", "required")
	case !resname.ValidID(id):
		v.Add("reservation_id", "%q must match %s", id, resname.IDPattern)
	}
	r := req.GetReservation()
	if r == nil {
		v.Add("reservation", "required")
		return nil, v.Err()
	}
	name := resname.Reservation{Project: project, ID: req.GetReservationId()}.String()
	if n := r.GetName(); n != "" && project != "" && n != name {
		v.Add("reservation.name", "%q does not match parent and reservation_id; leave it empty", n)
	}
	checkRequestID(&v, req.GetRequestId())
	if r.GetZone() == "" {
		v.Add("reservation.zone", "required")
	} else if checkText(&v, "reservation.zone", r.GetZone(), MaxNameBytes) {
		clusterspec.CheckZone(&v, "reservation.zone", r.GetZone())
	}
	switch mt := r.GetMachineType(); {
	case mt == "":
		v.Add("reservation.machine_type", "required")
	case !KnownMachineType(mt):
		v.Add("reservation.machine_type", "unknown machine type %s", clip(mt))
	}
	v.Check(r.GetCount() >= 1, "reservation.count", "%d must be at least 1", r.GetCount())
	v.Check(r.GetCount() <= clusterspec.MaxReservationNodes, "reservation.count",
		"%d machines, more than the limit of %d for one reservation", r.GetCount(), clusterspec.MaxReservationNodes)
	if err := v.Err(); err != nil {
		return nil, err
	}
	out := proto.Clone(r).(*loomv1.Reservation)
	out.Name = name
	out.InUse, out.Consumers, out.CreateTime = 0, nil, nil
	return out, nil
}

package domain

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/loom-ml/loom/libs/clusterspec"
)

// The oversized reservation of issue 13, published straight to the
// command topic past the gateway: refused here too, and nothing recorded.
func TestReservationSizeBound(t *testing.T) {
	t.Parallel()
	s := NewState(nil, nil, nil, nil)
	f := onlyFailure(t, s.CreateReservation(reservation("huge", 2_000_000_000), t0))
	if codes.Code(f.Code) != codes.InvalidArgument || !strings.Contains(f.Message, "reservation.count: must be at most 100000 machines, got 2000000000") {
		t.Errorf("two billion machines = %v", f)
	}
	if s.Reservation("projects/default/reservations/huge") != nil {
		t.Error("the refused reservation was recorded")
	}
	apply(s, s.CreateReservation(reservation("max", clusterspec.MaxReservationNodes), t0))
	if r := s.Reservation("projects/default/reservations/max"); r.GetCount() != clusterspec.MaxReservationNodes {
		t.Errorf("a reservation at the bound = %v", r)
	}
}

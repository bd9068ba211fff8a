package adapters

import (
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler/internal/domain"
)

// TestAssocLimitsWriteThenLoad: an association's MaxJobs, from
// AssociationChanged, is stored and loaded back, the later change winning.
func TestAssocLimitsWriteThenLoad(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	st := store.New(rdb, "scheduler:")
	ctx := testkit.Context(t, 30*time.Second)
	s := domain.NewState(domain.Config{})
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, max := range []int32{4, 2} {
		now = now.Add(time.Minute)
		persist(t, ctx, st, s, now, &eventsv1.AssociationChanged{Project: "default",
			Association: &loomv1.Association{Account: "lab", User: "ada", MaxJobs: max, Fairshare: 3}})
	}
	recs, err := NewRepo(st).Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs.Assocs) != 1 || *recs.Assocs[0] != (domain.AssocLimit{Project: "default", Account: "lab", User: "ada", MaxJobs: 2, Fairshare: 3}) {
		t.Fatalf("loaded limits: %+v", recs.Assocs)
	}
}

package adapters

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/slurmspec"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler/internal/domain"
)

// TestAssocLimitsWriteThenLoad: an association's MaxJobs, from
// AssociationChanged, is stored and loaded back, the later change winning;
// an account's record from AccountChanged too.
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
	// An account's record (no user) beside it: its parent and shares.
	persist(t, ctx, st, s, now.Add(time.Minute), &eventsv1.AccountChanged{Project: "default",
		Account: &loomv1.Account{Name: "projects/default/accounts/lab", ParentAccount: "science", Fairshare: 5}})
	recs, err := NewRepo(st).Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[domain.AssocLimit]bool{
		{Project: "default", Account: "lab", User: "ada", MaxJobs: 2, Fairshare: 3}: true,
		{Project: "default", Account: "lab", Fairshare: 5, Parent: "science"}:       true,
	}
	if len(recs.Assocs) != 2 || !want[*recs.Assocs[0]] || !want[*recs.Assocs[1]] {
		t.Fatalf("loaded limits: %+v %+v", recs.Assocs[0], recs.Assocs[len(recs.Assocs)-1])
	}
	// A deleted association leaves the store.
	persist(t, ctx, st, s, now.Add(2*time.Minute), &eventsv1.AssociationChanged{Project: "default",
		Association: &loomv1.Association{Account: "lab", User: "ada"}, Deleted: true})
	if recs, err = NewRepo(st).Load(ctx); err != nil {
		t.Fatal(err)
	}
	if len(recs.Assocs) != 1 || recs.Assocs[0].User != "" {
		t.Fatalf("loaded after the delete: %+v", recs.Assocs)
	}
}

// TestAssocTRESLimitsWriteThenLoad: an association's GrpTRES,
// MaxTRESPerJob and MaxWall and an account's GrpTRES are stored and
// loaded back as they were: a restarted scheduler enforces them.
func TestAssocTRESLimitsWriteThenLoad(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	st := store.New(rdb, "scheduler:")
	ctx := testkit.Context(t, 30*time.Second)
	s := domain.NewState(domain.Config{})
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	persist(t, ctx, st, s, now, &eventsv1.AssociationChanged{Project: "default", Association: &loomv1.Association{Account: "lab", User: "ada",
		GrpTres: &loomv1.Tres{Gpu: proto.Int64(16), MemMb: proto.Int64(1 << 20)}, MaxTresPerJob: &loomv1.Tres{Node: proto.Int64(2), Cpu: proto.Int64(64)}, MaxWallMinutes: proto.Int32(1440)}})
	persist(t, ctx, st, s, now.Add(time.Minute), &eventsv1.AccountChanged{Project: "default",
		Account: &loomv1.Account{Name: "projects/default/accounts/lab", GrpTres: &loomv1.Tres{Gpu: proto.Int64(64), Cpu: proto.Int64(512)}}})
	// MaxWall=0 is a limit (no job runs): stored and loaded as 0, not as
	// no limit.
	persist(t, ctx, st, s, now.Add(2*time.Minute), &eventsv1.AssociationChanged{Project: "default", Association: &loomv1.Association{Account: "lab", User: "bob",
		MaxWallMinutes: proto.Int32(0)}})
	recs, err := NewRepo(st).Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []domain.AssocLimit{
		{Project: "default", Account: "lab", User: "ada", GrpTRES: slurmspec.TRES{GPU: 16, MemMB: 1 << 20},
			MaxTRESPerJob: slurmspec.TRES{Node: 2, CPU: 64}, MaxWallMinutes: new(int32(1440))},
		{Project: "default", Account: "lab", User: "bob", MaxWallMinutes: new(int32(0))},
		{Project: "default", Account: "lab", GrpTRES: slurmspec.TRES{GPU: 64, CPU: 512}},
	}
	found := 0
	for _, r := range recs.Assocs {
		if slices.ContainsFunc(want, func(w domain.AssocLimit) bool { return reflect.DeepEqual(w, *r) }) {
			found++
		}
	}
	if len(recs.Assocs) != len(want) || found != len(want) {
		t.Fatalf("loaded limits: %+v", recs.Assocs)
	}
}

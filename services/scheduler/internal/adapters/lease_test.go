package adapters

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
)

// TestLeaseFencesEarlierTerms: one holder at a time; a takeover (after the
// holder's lease expired without it noticing) revokes the earlier term, whose
// next Apply is refused and writes nothing, while the new term's goes through.
func TestLeaseFencesEarlierTerms(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	st := store.New(rdb, "scheduler:")
	ctx := testkit.Context(t, 30*time.Second)
	// a's lease outlasts the checks of its term below; it "expires" when
	// the test says so. (A 200 ms TTL expired under them on a loaded
	// machine: b then took a lease the test said was held.)
	a := NewLease(st, "a", time.Minute)
	b := NewLease(st, "b", time.Minute)

	ta, err := a.TryAcquire(ctx)
	if err != nil || ta == "" || !strings.HasPrefix(ta, "a.") {
		t.Fatalf("a acquires: %q %v", ta, err)
	}
	if tb, err := b.TryAcquire(ctx); err != nil || tb != "" {
		t.Fatalf("b acquired a held lease: %q %v", tb, err)
	}
	if h, _ := a.Holder(ctx); h != ta {
		t.Fatalf("holder %q, want %q", h, ta)
	}
	// The lease is held for a's TTL, then expires unless renewed.
	if ttl, err := st.Client().PTTL(ctx, st.Key(KeyLeader)).Result(); err != nil || ttl <= 0 || ttl > a.TTL() {
		t.Fatalf("the lease's TTL is %v (%v); want at most a's %v", ttl, err, a.TTL())
	}
	write := func(token string, seq uint64, value string) error {
		var tx store.Tx
		Fence(&tx, token, seq)
		tx.HSet(KeyJobs, "j", []byte(value))
		LogChanges(&tx, Version(token, seq))
		_, err := st.Apply(ctx, "", &tx)
		return err
	}
	if err := write(ta, 1, "from a"); err != nil {
		t.Fatalf("a writes while leading: %v", err)
	}
	// A record hash damaged by hand (a string where the jobs are) fails the
	// write, and says so: it is no sign of another leader.
	if err := st.Client().Set(ctx, st.Key(KeyJobs), "damaged", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := write(ta, 2, "on damage"); err == nil || IsFenced(err) || !errors.Is(err, errs.FailedPrecondition) {
		t.Fatalf("a's write over a damaged jobs key: %v, want a FailedPrecondition that is not a fence", err)
	}
	if err := st.Client().Del(ctx, st.Key(KeyJobs)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := write(ta, 2, "from a"); err != nil {
		t.Fatalf("a writes once the key is mended: %v", err)
	}
	if v, _ := st.HGet(ctx, fencePrefix+ta, "seq"); string(v) != "2" {
		t.Fatalf("the fence records seq %q, want 2", v)
	}
	repo := NewRepo(st)
	logged, version, complete, err := repo.LogTail(ctx)
	if err != nil || logged == store.LogStart || !complete || version != Version(ta, 2) {
		t.Fatalf("the write is not in the change log: %q, version %q, complete %v, %v", logged, version, complete, err)
	}

	// a stalls past its TTL; b takes over. The TTL ends as Redis ends
	// it: the key expires.
	if ok, err := st.Client().PExpire(ctx, st.Key(KeyLeader), time.Millisecond).Result(); err != nil || !ok {
		t.Fatalf("expiring a's lease: %v %v", ok, err)
	}
	var tb string
	testkit.WaitFor(t, 10*time.Second, "b takes the expired lease", func() (bool, error) {
		var err error
		tb, err = b.TryAcquire(ctx)
		return tb != "", err
	})
	err = write(ta, 3, "late a")
	if !IsFenced(err) || !errors.Is(err, errs.FailedPrecondition) {
		t.Fatalf("a's write after the takeover: %v, want fenced", err)
	}
	if v, _ := st.HGet(ctx, KeyJobs, "j"); string(v) != "from a" {
		t.Fatalf("a fenced write changed the state: %q", v)
	}
	if es, v, err := repo.ReadChanges(ctx, logged); err != nil || len(es) != 0 || v != Version(ta, 2) {
		t.Fatalf("a fenced write is in the change log: %v, version %q, %v", es, v, err)
	}
	if err := write(tb, 1, "from b"); err != nil {
		t.Fatalf("b writes: %v", err)
	}
	if err := a.Renew(ctx, ta); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("a renews a lost lease: %v", err)
	}
	if err := b.Renew(ctx, tb); err != nil {
		t.Fatalf("b renews: %v", err)
	}
	// a cannot release b's lease; b's release frees it at once.
	if err := a.Release(ctx, ta); err != nil {
		t.Fatal(err)
	}
	if h, _ := a.Holder(ctx); h != tb {
		t.Fatalf("a released b's lease: holder %q", h)
	}
	if err := b.Release(ctx, tb); err != nil {
		t.Fatal(err)
	}
	ta2, err := a.TryAcquire(ctx)
	if err != nil || ta2 == "" {
		t.Fatalf("a re-acquires a released lease: %q %v", ta2, err)
	}
	if err := write(tb, 2, "late b"); !IsFenced(err) {
		t.Fatalf("b's write after a's new term: %v, want fenced", err)
	}
}

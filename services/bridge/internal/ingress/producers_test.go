package ingress

import (
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/testkit"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Anyone who can publish to the ingress may name any source: messages
// filed under no project (no credential, or one of no member) are counted
// against a bound of their own, so that a flood of made-up sources cannot
// take every producer row and leave a project's real producers uncounted;
// and one project's producers past its bound share that project's overflow
// row, leaving the other projects theirs.
func TestFloodOfSourcesLeavesProjectsTheirProducers(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *Config) { c.MaxProducers, c.MaxProjectProducers = 6, 2 })
	ctx := testkit.Context(t, 30*time.Second)
	from := func(source, id, cred string) error {
		return f.h(ctx, Delivery("kafka:loom.ingress.v1", record(TypePrefix+"SubmitJob",
			`{"parent":"projects/default","job":{"cluster":"projects/default/clusters/c"}}`,
			map[string]string{"ce_id": id, "ce_source": source, "ce_credential": cred})))
	}
	for i := range 6 { // no credential, then one of no member of default
		cred := ""
		if i%2 == 1 {
			cred = "loomk_stranger"
		}
		if err := from(fmt.Sprintf("//flood/%d", i), fmt.Sprint("f", i), cred); err != nil {
			t.Fatal(err)
		}
	}
	for _, src := range []string{"//pipeline/real", "//pipeline/b", "//pipeline/c", "//pipeline/d"} {
		if err := from(src, "m-"+src, "loomk_good"); err != nil {
			t.Fatal(err)
		}
	}
	ps, err := f.app.Server().ListIngressProducers(ctx, &loomv1.ListIngressProducersRequest{Parent: "projects/default"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range ps.GetProducers() {
		got = append(got, fmt.Sprintf("%s %s %s %d", p.GetProject(), p.GetSource(), p.GetPrincipal(), p.GetReceived()))
	}
	want := []string{
		"default " + OverflowSource + "  2", // c and d: past the project's bound
		"default //pipeline/b users/alice 1",
		"default //pipeline/real users/alice 1",
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("project default's producers:\n%q\nwant\n%q", got, want)
	}
	all, err := f.app.Server().ListIngressProducers(ctx, &loomv1.ListIngressProducersRequest{Parent: "projects/-"})
	if err != nil {
		t.Fatal(err)
	}
	// The flood: two rows of its own and the overflow row of messages of
	// no project; default: its three.
	if n := len(all.GetProducers()); n != 6 {
		t.Fatalf("%d producers in all, want 6 (the bound)", n)
	}
}

// A producer's row lasts a dedupe TTL after its last message, like the
// recent lists: one silent longer no longer holds a place under the
// bounds, so a project whose earlier producers went quiet gets rows for
// its new ones instead of counting them all as "other producers" for good.
func TestProducersExpireAfterTheDedupeTTL(t *testing.T) {
	t.Parallel()
	var clock atomic.Int64
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock.Store(t0.UnixNano())
	f := newFixture(t, func(c *Config) {
		c.MaxProjectProducers = 1
		c.Now = func() time.Time { return time.Unix(0, clock.Load()) }
	})
	ctx := testkit.Context(t, 30*time.Second)
	rdb := f.app.cfg.Store.Client()
	from := func(source, id string) {
		t.Helper()
		if err := f.h(ctx, Delivery("kafka:loom.ingress.v1", record(TypePrefix+"SubmitJob",
			`{"parent":"projects/default","job":{"cluster":"projects/default/clusters/c"}}`,
			map[string]string{"ce_id": id, "ce_source": source, "ce_credential": "loomk_good"}))); err != nil {
			t.Fatal(err)
		}
	}
	from("//pipeline/old", "1")
	old := "bridge:ingress:producer:" + producerID("default", "//pipeline/old", "users/alice")
	if ttl := rdb.PTTL(ctx, old).Val(); ttl <= 0 || ttl > time.Hour {
		t.Fatalf("the producer's row expires in %v, want within the dedupe TTL (1h)", ttl)
	}
	// A duplicate is the producer heard from: its row lasts a TTL more.
	rdb.PExpire(ctx, old, time.Minute)
	clock.Add(int64(30 * time.Minute))
	from("//pipeline/old", "1")
	if ttl := rdb.PTTL(ctx, old).Val(); ttl <= time.Minute {
		t.Fatalf("after a duplicate the producer's row expires in %v, want a dedupe TTL again", ttl)
	}

	clock.Add(int64(2 * time.Hour))
	if got := producerRows(t, f, "projects/default"); len(got) != 0 {
		t.Fatalf("producers silent past the TTL are listed: %q", got)
	}
	from("//pipeline/new", "2")
	want := []string{"default //pipeline/new users/alice 1"}
	if got := producerRows(t, f, "projects/default"); !slices.Equal(got, want) {
		t.Fatalf("project default's producers after the old one went quiet:\n%q\nwant\n%q", got, want)
	}
	if got := producerRows(t, f, "projects/-"); !slices.Equal(got, want) {
		t.Fatalf("every producer:\n%q\nwant\n%q", got, want)
	}
}

// A bridge of before producers expired kept them in plain sets whose rows
// never went: the first record turns them over, dropping the rows silent
// past the TTL and giving the others their expiry, and until then the
// stale rows are not listed.
func TestProducerRowsOfAnOlderBridgeExpire(t *testing.T) {
	t.Parallel()
	var clock atomic.Int64
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock.Store(t0.UnixNano())
	f := newFixture(t, func(c *Config) { c.Now = func() time.Time { return time.Unix(0, clock.Load()) } })
	ctx := testkit.Context(t, 30*time.Second)
	rdb := f.app.cfg.Store.Client()
	for _, p := range []struct {
		id, project, source string
		last                time.Time
	}{
		{"stale", "default", "//gone", t0.Add(-2 * time.Hour)},
		{"live", "default", "//live", t0.Add(-10 * time.Minute)},
		{"stale2", "other", "//gone", t0.Add(-3 * time.Hour)},
	} {
		rdb.SAdd(ctx, "bridge:ingress:producers", p.id)
		rdb.SAdd(ctx, "bridge:ingress:producers:"+p.project, p.id)
		rdb.HSet(ctx, "bridge:ingress:producer:"+p.id, "project", p.project, "source", p.source, "principal", "users/bob",
			"received", 1, "accepted", 1, "first_time", p.last.UnixNano(), "last_time", p.last.UnixNano())
	}
	want := []string{"default //live users/bob 1"}
	if got := producerRows(t, f, "projects/-"); !slices.Equal(got, want) {
		t.Fatalf("before a record, every producer:\n%q\nwant\n%q", got, want)
	}
	if err := f.h(ctx, submit("m1", "loomk_good")); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"bridge:ingress:producer:stale", "bridge:ingress:producer:stale2"} {
		if rdb.Exists(ctx, k).Val() != 0 {
			t.Errorf("%s, silent past the TTL, is still there", k)
		}
	}
	if ttl := rdb.PTTL(ctx, "bridge:ingress:producer:live").Val(); ttl <= 0 || ttl > 50*time.Minute {
		t.Errorf("the live row expires in %v, want a TTL from its last message (50 min)", ttl)
	}
	for _, k := range []string{"bridge:ingress:producers", "bridge:ingress:producers:default", "bridge:ingress:producers:other"} {
		typ, ttl := rdb.Type(ctx, k).Val(), rdb.PTTL(ctx, k).Val()
		if k == "bridge:ingress:producers:other" {
			if typ != "none" {
				t.Errorf("%s, all of it stale, is a %s", k, typ)
			}
			continue
		}
		if typ != "zset" || ttl <= 0 {
			t.Errorf("%s is a %s expiring in %v, want a sorted set that expires", k, typ, ttl)
		}
	}
	want = []string{"default //live users/bob 1", "default //pipeline/a users/alice 1"}
	if got := producerRows(t, f, "projects/default"); !slices.Equal(got, want) {
		t.Fatalf("after a record, project default's producers:\n%q\nwant\n%q", got, want)
	}
}

// producerRows lists parent's producers as sorted "project source
// principal received" rows.
func producerRows(t *testing.T, f *fixture, parent string) []string {
	t.Helper()
	ps, err := f.app.Server().ListIngressProducers(testkit.Context(t, 10*time.Second), &loomv1.ListIngressProducersRequest{Parent: parent})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range ps.GetProducers() {
		got = append(got, fmt.Sprintf("%s %s %s %d", p.GetProject(), p.GetSource(), p.GetPrincipal(), p.GetReceived()))
	}
	slices.Sort(got)
	return got
}

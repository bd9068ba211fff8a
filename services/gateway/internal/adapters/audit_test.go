package adapters

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

func TestAuditTrailIsBounded(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	r := NewRepo(store.New(rdb, "gateway:"))
	ctx := testkit.Context(t, 30*time.Second)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rec := func(i int, project, who string) *loomv1.AuditRecord {
		return &loomv1.AuditRecord{Id: fmt.Sprintf("id%03d", i), Time: timestamppb.New(base.Add(time.Duration(i) * time.Hour)),
			Principal: who, Project: project, Method: "/loom.v1.JobService/SubmitJob"}
	}
	// 30 hourly records in p1 under a 10-hour window and at most 8 per project.
	for i := range 30 {
		who := "users/ana"
		if i%2 == 1 {
			who = "users/bob"
		}
		now := base.Add(time.Duration(i) * time.Hour)
		if err := r.PutAudit(ctx, rec(i, "p1", who), now, 10*time.Hour, 8); err != nil {
			t.Fatal(err)
		}
		if i == 29 { // a redelivery changes nothing
			if err := r.PutAudit(ctx, rec(i, "p1", who), now, 10*time.Hour, 8); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := r.PutAudit(ctx, rec(100, "", "users/root"), base.Add(29*time.Hour), 10*time.Hour, 8); err != nil {
		t.Fatal(err)
	}
	got, _, err := r.ListAudit(ctx, "p1", "", 100, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 8 || got[0].GetId() != "id029" || got[7].GetId() != "id022" {
		t.Errorf("p1 keeps %d records, %v … ; want the newest 8, id029 … id022", len(got), got)
	}
	if n, _ := rdb.HLen(ctx, "gateway:audit:records:p1").Result(); n != 8 {
		t.Errorf("%d records stored for p1, want 8", n)
	}
	// Past the window: the 8 newest are all within 10 h of hour 29; at hour
	// 35 only those from hour 25 on stay.
	if err := r.PutAudit(ctx, rec(35, "p1", "users/ana"), base.Add(35*time.Hour), 10*time.Hour, 8); err != nil {
		t.Fatal(err)
	}
	got, _, _ = r.ListAudit(ctx, "p1", "", 100, nil)
	if len(got) != 6 || got[0].GetId() != "id035" || got[5].GetId() != "id025" {
		t.Errorf("after the window moved: %v", got)
	}
	// Every project, filtered, paged after a key.
	all, _, err := r.ListAudit(ctx, "", "", 100, func(a *loomv1.AuditRecord) bool { return a.GetPrincipal() != "users/bob" })
	if err != nil {
		t.Fatal(err)
	}
	ids := ""
	for _, a := range all {
		ids += a.GetId() + " "
	}
	if ids != "id100 id035 id028 id026 " { // id100 is at hour 100
		t.Errorf("every project but bob's: %s", ids)
	}
	page, _, _ := r.ListAudit(ctx, "", AuditKey(all[1]), 2, nil)
	if len(page) != 2 || page[0].GetId() != "id029" || page[1].GetId() != "id028" {
		t.Errorf("after id035: %v", page)
	}
}

// TestListAuditReadsABoundedSpan: a filter matching one record behind
// 12,000 others of a trail reads at most MaxAuditScan records a call: the
// first call answers nothing but where to go on, the second finds it.
func TestListAuditReadsABoundedSpan(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	r := NewRepo(store.New(rdb, "gateway:"))
	ctx := testkit.Context(t, 60*time.Second)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pipe := rdb.Pipeline()
	put := func(i int, who string) {
		rec := &loomv1.AuditRecord{Id: fmt.Sprintf("id%05d", i), Time: timestamppb.New(base.Add(time.Duration(i) * time.Second)),
			Principal: who, Project: "p1", Decision: "allowed"}
		b, err := proto.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		pipe.ZAdd(ctx, "gateway:"+KeyAuditPrefix+"p1", redis.Z{Member: AuditKey(rec)})
		pipe.HSet(ctx, "gateway:"+KeyAuditRecordsPrefix+"p1", AuditKey(rec), b)
	}
	put(0, "users/ana") // the oldest: last in list order
	for i := 1; i <= 12000; i++ {
		put(i, "users/bob")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	anas := func(a *loomv1.AuditRecord) bool { return a.GetPrincipal() == "users/ana" }
	got, resume, err := r.ListAudit(ctx, "p1", "", 10, anas)
	if err != nil || len(got) != 0 || resume == "" {
		t.Fatalf("first call: %d records, resume %q, %v; want none yet and where to go on", len(got), resume, err)
	}
	got, resume, err = r.ListAudit(ctx, "p1", resume, 10, anas)
	if err != nil || len(got) != 1 || got[0].GetId() != "id00000" || resume != "" {
		t.Fatalf("second call: %v, resume %q, %v; want ana's record and the end", got, resume, err)
	}
}

// TestAuditTrailOfCallsNotDone: a refused (denied or rejected) or failed
// call's record is kept beside its project's trail, capped on its own, so
// that a flood of calls that did nothing (a member's too) pushes out no
// record of what was done.
func TestAuditTrailOfCallsNotDone(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	r := NewRepo(store.New(rdb, "gateway:"))
	ctx := testkit.Context(t, 30*time.Second)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	put := func(id, decision string, at time.Duration) {
		rec := &loomv1.AuditRecord{Id: id, Time: timestamppb.New(now.Add(at)), Principal: "users/vic", Project: "p1", Decision: decision}
		if err := r.PutAudit(ctx, rec, now.Add(at), time.Hour, 3); err != nil {
			t.Fatal(err)
		}
	}
	put("done", "allowed", 0)
	for i := range 5 {
		put(fmt.Sprintf("refused%d", i), "denied", time.Duration(i+1)*time.Second)
		put(fmt.Sprintf("failed%d", i), "failed", time.Duration(i+1)*time.Second+time.Millisecond)
		put(fmt.Sprintf("rejected%d", i), "rejected", time.Duration(i+1)*time.Second+2*time.Millisecond)
	}
	if n, _ := rdb.HLen(ctx, "gateway:"+KeyAuditRecordsPrefix+"p1").Result(); n != 1 {
		t.Errorf("p1's trail of what was done holds %d records, want the one", n)
	}
	got, _, err := r.ListAudit(ctx, "p1", "", 100, nil)
	if err != nil || len(got) != 4 || got[3].GetId() != "done" {
		t.Errorf("p1 lists %v (%v): want the newest 3 of the calls not done, then the one done", got, err)
	}
}

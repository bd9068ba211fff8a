package domain

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/services/scheduler/internal/domain/jobstore"
)

// TestPrioritySumMatchesFactors checks that the queue's priority (sum, from
// per-pass tables) is the sum of priority's weighted factors for jobs of
// every kind: the order and the decisions depend on the two agreeing.
func TestPrioritySumMatchesFactors(t *testing.T) {
	t.Parallel()
	cfg := Config{}.Defaults()
	cfg.QOS = []QOS{{Name: "low", Priority: 10}, {Name: "normal", Priority: 50}, {Name: "high", Priority: 100}}
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	p := &prioCtx{now: now.UnixNano(), cfg: &cfg, maxQOS: cfg.maxQOSPriority(),
		partGPUs: []int64{8000, 96, 0}, partNodes: []int64{1000, 12, 3}, partTier: []int32{1, 3, 0}, maxTier: 3,
		fsByID: []float64{0, 0.37, 1, 0.999951}, fsOther: map[assocKey]float64{{"a", "x"}: 0.25}}
	p.qosFactor = make([]float64, len(cfg.QOS))
	for i, q := range cfg.QOS {
		p.qosFactor[i] = float64(q.Priority) / float64(p.maxQOS)
	}
	p.weigh()
	rng := rand.New(rand.NewPCG(1, 2))
	assocs := []*assoc{{id: 0}, {id: 1}, {id: 2}, {id: 3}, {id: 7}, {account: "a", user: "x", id: -1}, {account: "b", user: "y", id: -1}}
	for range 20000 {
		a := &jobAttrs{
			eligible: now.UnixNano() - rng.Int64N(int64(10*24*time.Hour)) + int64(time.Hour),
			gpus:     []int64{0, 1, 2, 8, 64, 65, 200}[rng.IntN(7)],
			assoc:    assocs[rng.IntN(len(assocs))],
			qos:      int32(rng.IntN(4)) - 1,
			hold:     rng.IntN(50) == 0,
		}
		a.req.Nodes = 1 + rng.IntN(8)
		if rng.IntN(100) == 0 {
			a.eligible = 0
		}
		part := rng.IntN(5) - 1
		want, _ := p.priority(a, part)
		if got := p.sum(a, part); got != want {
			t.Fatalf("sum(%+v, %d) = %d, priority = %d", *a, part, got, want)
		}
	}
}

// TestPrioAttrsAsNewAttrs checks that the attributes the preemption stage
// ranks running jobs by are newAttrs' own, whatever association its run
// hints at: its own, another's, one of another state of the same names,
// one not interned, or none.
func TestPrioAttrsAsNewAttrs(t *testing.T) {
	t.Parallel()
	s := NewState(Config{QOS: []QOS{{Name: "low", Priority: 1}, {Name: "normal", Priority: 5}}})
	alice := s.internAssoc("acct", "alice")
	other := NewState(s.Config())
	other.internAssoc("x", "y")
	foreign := other.internAssoc("acct", "alice") // id 1: s's bob, below
	s.internAssoc("acct", "bob")
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for i, spec := range []*loomv1.Job{
		{Name: "a", Account: "acct", User: "alice", Gpus: 3, SubmitTime: timestamppb.New(now)},
		{Name: "b", Account: "acct", User: "bob", GpusPerNode: 8, NodeCount: 2, Qos: "low", Hold: true},
		{Name: "c", Qos: "none", SubmitTime: timestamppb.New(now), BeginTime: timestamppb.New(now.Add(time.Hour))},
		{Name: "d", Account: "acct", User: "alice", BeginTime: timestamppb.New(now.Add(-time.Hour)), SubmitTime: timestamppb.New(now)},
	} {
		j := &Job{JobRecord: jobstore.JobRecord{Job: spec}}
		want := s.newAttrs(j, false)
		for _, hint := range []*assoc{nil, alice, foreign, {account: "acct", user: "alice", id: -1}} {
			got := jobAttrs{eligible: 99, qos: 7}
			s.prioAttrs(j, &got, hint)
			if got.hold != want.hold || got.eligible != want.eligible || got.gpus != want.gpus || got.qos != want.qos ||
				got.req.Nodes != want.req.Nodes || got.assoc.id != want.assoc.id || got.assoc.account != want.assoc.account ||
				got.assoc.user != want.assoc.user || (want.assoc.id >= 0 && got.assoc != want.assoc) {
				t.Errorf("job %d, hint %+v: prioAttrs %+v, newAttrs %+v", i, hint, got, *want)
			}
		}
	}
}

// TestReasonRecordReadAsVersion checks that a reason record (a reason the
// pass gave a stored job, with no version of it) becomes a version on the
// first look at the job: a read (txn.job), an edit (editJob) and the pending
// list see the job with its new reason, and its JobChanged carries that
// version; a job without a record is read as stored. The records are found
// where they are after an emit before them is withdrawn.
func TestReasonRecordReadAsVersion(t *testing.T) {
	t.Parallel()
	s := NewState(Config{})
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	var jobs []*Job
	for i := range 4 {
		jobs = append(jobs, &Job{JobRecord: jobstore.JobRecord{Attempt: 2, Job: &loomv1.Job{
			Name: fmt.Sprintf("projects/p/jobs/%d", i+1), JobId: strconv.Itoa(i + 1), Cluster: "c",
			State: loomv1.JobState_PENDING, StateReason: "None"}}})
	}
	s.Load(nil, nil, jobs, nil, nil, nil)
	tx := writerTxn(s, now)
	tx.emit("c", "x", &eventsv1.StartStep{Job: "x"})
	for i, j := range jobs[:3] {
		pos := int32(i)
		if i == 2 {
			pos = -1 // found by name
		}
		tx.record("c", j.Name(), j, ReasonPriority, pos)
	}
	// A withdrawn start moves the records (see dropStaleStarts).
	tx.c.Emits = append(tx.c.Emits[:0], tx.c.Emits[1:]...)
	tx.reindexJobEmits()
	if at := tx.c.records("c").at; at[0] != 1 || at[1] != 2 || at[2] != 3 || at[3] != 0 {
		t.Fatalf("records by position %v, want [1 2 3 0]", at)
	}
	if tx.c.reasons != 3 || len(tx.c.Jobs) != 0 {
		t.Fatalf("%d records, %d versions; want 3, 0", tx.c.reasons, len(tx.c.Jobs))
	}
	if got := tx.job("projects/p/jobs/4"); got != jobs[3] {
		t.Fatalf("job() without a record: %p, want the stored %p", got, jobs[3])
	}
	got := tx.job("projects/p/jobs/1")
	if got == jobs[0] || got.Job.GetStateReason() != ReasonPriority || got.Attempt != 2 || got.Job.GetName() != "projects/p/jobs/1" {
		t.Fatalf("job(): %+v", got)
	}
	if ev := tx.c.Emits[0].Payload.(*eventsv1.JobChanged); ev.GetJob() != got.Job || ev.GetAttempt() != 2 {
		t.Fatalf("JobChanged %v does not carry the version", ev)
	}
	if i, ok := tx.lastJobEmit(got); !ok || i != 0 {
		t.Fatalf("lastJobEmit = %d, %v; want 0, true", i, ok)
	}
	ed := tx.editJob("projects/p/jobs/2")
	if ed.Job.GetStateReason() != ReasonPriority || ed.shared || ed.Job == tx.c.Emits[1].Payload.(*eventsv1.JobChanged).GetJob() {
		t.Fatalf("editJob: reason %q, shared %v", ed.Job.GetStateReason(), ed.shared)
	}
	n := 0
	for _, e := range tx.pendingEntries("c") {
		if e.name == "projects/p/jobs/3" && e.reason == ReasonPriority {
			n++
		}
	}
	if n != 1 || tx.c.reasons != 0 || len(tx.c.Jobs) != 3 {
		t.Fatalf("pendingEntries: found %d, %d records left, %d versions", n, tx.c.reasons, len(tx.c.Jobs))
	}
	if jobs[0].Job.GetStateReason() != "None" {
		t.Fatal("the stored job changed before Commit")
	}
}

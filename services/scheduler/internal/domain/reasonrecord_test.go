package domain

import (
	"bytes"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/services/scheduler/internal/domain/jobstore"
)

// TestReasonRecordsMatchVersions checks that a first pass giving its jobs
// their reasons as reason records is, to whoever reads its change, the pass
// that gives them versions: the same events in the same order, byte for
// byte (what the outbox carries), the same job records to store (what
// Redis holds), and after Commit the same stored jobs and the same next
// pass. Half the records' events are built before Commit (as the app builds
// them), so that Commit applies both kinds; the snapshot the states were
// restored from is left as it was.
func TestReasonRecordsMatchVersions(t *testing.T) {
	t.Parallel()
	built, now := benchCluster(200, 3000, 0.9, 3)
	snap := built.Snapshot()
	old, recs := NewState(built.Config()), NewState(built.Config())
	old.Restore(snap)
	recs.Restore(snap)
	old.reasonVersions = true
	want, got := old.Schedule(now), recs.Schedule(now)
	if want.reasons != 0 || got.reasons < 1000 {
		t.Fatalf("%d and %d reason records: want none with versions, most of 3,000 without", want.reasons, got.reasons)
	}
	if want.JobCount() != got.JobCount() || len(got.Jobs) >= got.JobCount() {
		t.Fatalf("%d versions with versions, %d (%d in Jobs) with records", want.JobCount(), got.JobCount(), len(got.Jobs))
	}
	sameEmits := func(label string, got, want *Change) {
		t.Helper()
		marshal := proto.MarshalOptions{Deterministic: true}
		if len(got.Emits) != len(want.Emits) {
			t.Fatalf("%s: %d emits, want %d", label, len(got.Emits), len(want.Emits))
		}
		for i := range got.Emits {
			g, w := &got.Emits[i], &want.Emits[i]
			gb, err := marshal.Marshal(g.Message())
			if err != nil {
				t.Fatal(err)
			}
			wb, _ := marshal.Marshal(w.Message())
			if g.Key != w.Key || g.Subject != w.Subject || !bytes.Equal(gb, wb) {
				t.Fatalf("%s: emit %d: %s %s %v; want %s %s %v", label, i, g.Key, g.Subject, g.Message(), w.Key, w.Subject, w.Message())
			}
		}
	}
	sameEmits("first pass", got, want)
	stored := func(c *Change) map[string][]byte {
		out := map[string][]byte{}
		for name, j := range c.AllJobs() {
			b, err := jobstore.EncodeJob(&j.JobRecord, j.Template())
			if err != nil {
				t.Fatal(err)
			}
			out[name] = b
		}
		return out
	}
	gs, ws := stored(got), stored(want)
	if len(gs) != len(ws) {
		t.Fatalf("%d job records to store, want %d", len(gs), len(ws))
	}
	for name, b := range ws {
		if !bytes.Equal(gs[name], b) {
			t.Fatalf("job record %s differs", name)
		}
	}
	if j, ok := got.Job(got.Emits[len(got.Emits)-1].Subject); !ok || !bytes.Equal(encode(t, j), ws[j.Name()]) {
		t.Fatalf("Change.Job of the last emit's job: %v, %v", j, ok)
	}

	// A fresh change to build half the events before Commit, as the app does.
	recs = NewState(built.Config())
	recs.Restore(snap)
	got = recs.Schedule(now)
	for i := range got.Emits {
		if i%2 == 0 {
			got.Emits[i].Message()
		}
	}
	old.Commit(want)
	recs.Commit(got)
	for name, w := range old.jobs {
		g := recs.jobs[name]
		if g == nil || !bytes.Equal(encode(t, g), encode(t, w)) {
			t.Fatalf("stored job %s differs after Commit", name)
		}
	}
	for name, ci := range old.byCluster {
		gi := recs.byCluster[name]
		for _, e := range ci.pending {
			if p, ok := gi.pendPos[e.name]; !ok || gi.pending[p].reason != e.reason ||
				gi.pending[p].j.Job.GetStateReason() != e.reason {
				t.Fatalf("pending entry of %s: reason %q, want %q", e.name, gi.pending[p].reason, e.reason)
			}
		}
	}
	at := now.Add(time.Second)
	sameChange(t, "the pass after Commit", recs.Schedule(at), old.Schedule(at))
	// The snapshot the states were restored from is as it was (Load keeps
	// its records: Commit must not change them).
	again := NewState(built.Config())
	again.Restore(snap)
	sameEmits("a first pass on the snapshot again", again.Schedule(now), want)
}

func encode(t *testing.T, j *Job) []byte {
	t.Helper()
	b, err := jobstore.EncodeJob(&j.JobRecord, j.Template())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

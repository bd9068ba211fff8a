package adapters

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler/internal/domain"
	"github.com/loom-ml/loom/services/scheduler/internal/sim"
)

// encodedRecords are recs encoded again, by kind and name: what two loads
// must agree on.
func encodedRecords(t *testing.T, recs *Records) map[string]string {
	t.Helper()
	out := map[string]string{}
	put := func(kind, name string, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if _, dup := out[kind+" "+name]; dup {
			t.Fatalf("%s %s decoded twice", kind, name)
		}
		out[kind+" "+name] = string(b)
	}
	for _, r := range recs.Clusters {
		put("cluster", r.Name, r)
	}
	for _, r := range recs.Nodes {
		put("node", r.Name, r)
	}
	for _, r := range recs.Runs {
		put("run", r.Key(), r)
	}
	for _, r := range recs.Arrays {
		b, err := EncodeArray(r)
		if err != nil {
			t.Fatal(err)
		}
		put("array", r.Name, b)
	}
	for _, r := range recs.Jobs {
		b, err := proto.Marshal(r.Job) // the whole job, template and all
		if err != nil {
			t.Fatal(err)
		}
		name, rec := r.Name(), r.JobRecord
		rec.Job = nil
		put("job", name, []any{b, rec})
	}
	for _, r := range recs.Usage {
		put("usage", r.Key, r)
	}
	return out
}

// TestLoadRawDecodesAsItReads: LoadRaw decodes the records as it reads
// them, and Decode returns what a decode of every record after the read
// returns; a record that Apply rewrote or added is decoded anew, one it
// deleted is gone, and a rewritten array has its tasks decoded again
// against it.
func TestLoadRawDecodesAsItReads(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	st := store.New(rdb, "scheduler:")
	ctx := testkit.Context(t, 60*time.Second)

	// Several pages of jobs and runs (loadChunk each), and an array
	// whose tasks are stored as their difference from its template.
	built, _, err := sim.CycleState(sim.CycleConfig{Nodes: 400, Pending: 2500, Policy: "loom"})
	if err != nil {
		t.Fatal(err)
	}
	now := sim.Epoch.Add(24 * time.Hour)
	built.Commit(built.Schedule(now))
	storeSnapshot(t, ctx, st, built.Snapshot(), 500)
	const cl, array = "projects/default/clusters/c1", "projects/default/jobs/900000"
	s := domain.NewState(domain.Config{})
	persist(t, ctx, st, s, now, &eventsv1.ClusterChanged{Cluster: &loomv1.Cluster{Name: cl,
		Status: &loomv1.ClusterStatus{State: loomv1.Cluster_RUNNING, SharedDir: "/s"}}})
	persist(t, ctx, st, s, now, &eventsv1.SubmitJob{Job: &loomv1.Job{Name: array, JobId: "900000", Cluster: cl,
		Array: "0-99", GpusPerNode: 1, User: "ada", Env: map[string]string{"A": "b"}}})

	raw, err := NewRepo(st).LoadRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw.hashes[KeyJobs]) < 2*loadChunk || len(raw.hashes[KeyRuns]) < loadChunk {
		t.Fatalf("%d jobs and %d runs stored: want pages of them", len(raw.hashes[KeyJobs]), len(raw.hashes[KeyRuns]))
	}
	total := 0
	for key, m := range raw.hashes {
		if key != KeyStepRequests {
			total += len(m)
		}
	}
	recs, fresh, err := raw.decode()
	if err != nil || fresh != 0 {
		t.Fatalf("Decode after LoadRaw decoded %d of %d records itself (%v): want none, LoadRaw decoded them", fresh, total, err)
	}
	// What a decode of the bytes read, after the read, returns.
	after := func(raw Raw) (map[string]string, int) {
		t.Helper()
		recs, fresh, err := Raw{hashes: raw.hashes}.decode()
		if err != nil {
			t.Fatal(err)
		}
		return encodedRecords(t, recs), fresh
	}
	want, n := after(raw)
	if n != total {
		t.Fatalf("a decode without LoadRaw's decoded %d of %d records", n, total)
	}
	if got := encodedRecords(t, recs); !maps.Equal(got, want) {
		t.Fatalf("LoadRaw's decoded records differ from a decode after the read: %d and %d records", len(got), len(want))
	}

	// A change logged since the read: a run rewritten, a job deleted, a
	// job added.
	runKey := slices.Collect(maps.Keys(raw.hashes[KeyRuns]))[0]
	var run domain.Run
	if err := json.Unmarshal(raw.hashes[KeyRuns][runKey], &run); err != nil {
		t.Fatal(err)
	}
	if run.User == "" {
		t.Fatalf("run %s has no user", runKey)
	}
	run.User = "Z" + run.User[1:] // the same length: not told apart by it
	runBytes, err := json.Marshal(&run)
	if err != nil {
		t.Fatal(err)
	}
	gone := built.Snapshot().Jobs[0].Name()
	added := &domain.Job{}
	added.Job = &loomv1.Job{Name: "projects/sim/jobs/999999", JobId: "999999", State: loomv1.JobState_PENDING}
	addedBytes, err := EncodeJob(added)
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.Apply([]store.LogEntry{{ID: "1-0", Ops: []store.LogOp{
		{Op: "HSET", Key: KeyRuns, Field: runKey, Value: runBytes},
		{Op: "HDEL", Key: KeyJobs, Field: gone},
		{Op: "HSET", Key: KeyJobs, Field: added.Name(), Value: addedBytes},
	}}}); err != nil {
		t.Fatal(err)
	}
	recs, fresh, err = raw.decode()
	if err != nil || fresh != 2 {
		t.Fatalf("Decode after Apply decoded %d records itself (%v): want the 2 written", fresh, err)
	}
	got := encodedRecords(t, recs)
	want, _ = after(raw)
	if !maps.Equal(got, want) {
		t.Fatal("after Apply, LoadRaw's decoded records differ from a decode after the read")
	}
	if _, ok := got["job "+gone]; ok || got["job "+added.Name()] == "" || !strings.Contains(got["run "+runKey], `"user":"Z`) {
		t.Fatalf("after Apply: job %s kept, job %s missing, or run %s not rewritten", gone, added.Name(), runKey)
	}

	// The array rewritten (the same bytes, anew): its tasks follow it.
	if err := raw.Apply([]store.LogEntry{{ID: "2-0", Ops: []store.LogOp{
		{Op: "HSET", Key: KeyArrays, Field: array, Value: slices.Clone(raw.hashes[KeyArrays][array])},
	}}}); err != nil {
		t.Fatal(err)
	}
	recs, fresh, err = raw.decode()
	if err != nil || fresh < len(raw.hashes[KeyJobs]) {
		t.Fatalf("Decode after the array's rewrite decoded %d records itself (%v): want the array and every job", fresh, err)
	}
	if got := encodedRecords(t, recs); !maps.Equal(got, want) {
		t.Fatal("after the array's rewrite, the records differ")
	}
}

// TestLoadRawReportsABadRecord: a record that does not decode fails the
// load by its name, whether LoadRaw or Decode met it first.
func TestLoadRawReportsABadRecord(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	st := store.New(rdb, "scheduler:")
	ctx := testkit.Context(t, 30*time.Second)
	var tx store.Tx
	tx.HSet(KeyRuns, "projects/p/jobs/1#1", []byte(`{"job":"projects/p/jobs/1","attempt":1}`))
	tx.HSet(KeyRuns, "projects/p/jobs/2#1", []byte(`{"job":`))
	if _, err := st.Apply(ctx, "", &tx); err != nil {
		t.Fatal(err)
	}
	_, err := NewRepo(st).Load(ctx)
	if err == nil || err.Error() != "load runs projects/p/jobs/2#1: unexpected end of JSON input" {
		t.Fatalf("Load = %v; want the bad run named", err)
	}
}

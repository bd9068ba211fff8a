package adapters

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler/internal/domain"
	"github.com/loom-ml/loom/services/scheduler/internal/domain/jobstore"

	"github.com/loom-ml/loom/services/scheduler/internal/domain/views"
)

// TestWriteThenLoad stores the records a real scheduling change produces and
// checks that a state loaded from Redis equals the committed one.
func TestWriteThenLoad(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	st := store.New(rdb, "scheduler:")
	ctx := testkit.Context(t, 30*time.Second)
	const cl = "projects/default/clusters/c1"

	s := domain.NewState(domain.Config{})
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, ev := range []proto.Message{
		&eventsv1.ClusterChanged{Cluster: &loomv1.Cluster{Name: cl, Status: &loomv1.ClusterStatus{State: loomv1.Cluster_RUNNING, SharedDir: "/s"}}},
		&eventsv1.NodeChanged{Node: &loomv1.Node{Name: cl + "/nodes/gpu-0001", Cluster: cl, Hostname: "gpu-0001", Gpus: 2, State: loomv1.Node_READY}},
		&eventsv1.SubmitJob{Job: &loomv1.Job{Name: "projects/default/jobs/1", JobId: "1", Cluster: cl, GpusPerNode: 1,
			ModelOutput: &loomv1.ModelOutput{ModelId: "m"}, Env: map[string]string{"A": "b"}}},
		&eventsv1.SubmitJob{Job: &loomv1.Job{Name: "projects/default/jobs/2", JobId: "2", Cluster: cl, GpusPerNode: 2}},
		&eventsv1.NodeRemoved{Node: cl + "/nodes/gone", Cluster: cl},
		// Draining and idle: NodeDrained is emitted and recorded.
		&eventsv1.NodeChanged{Node: &loomv1.Node{Name: cl + "/nodes/gpu-0002", Cluster: cl, Hostname: "gpu-0002", Gpus: 2,
			State: loomv1.Node_DRAINING, DrainDeadline: timestamppb.New(now.Add(time.Minute))}},
		// An array, a finished run (fair-share usage) and a node failure
		// (job 2 requeued with gpu-0001 excluded).
		&eventsv1.SubmitJob{Job: &loomv1.Job{Name: "projects/default/jobs/10", JobId: "10", Cluster: cl, Array: "0-1%1",
			GpusPerNode: 1, User: "ada", Account: "lab"}},
		&eventsv1.StepChanged{Job: "projects/default/jobs/1", Attempt: 1, Node: cl + "/nodes/gpu-0001", State: eventsv1.StepState_STEP_EXITED},
		&eventsv1.NodeHealthChanged{Node: cl + "/nodes/gpu-0001", Cluster: cl, Health: eventsv1.NodeHealth_UNHEALTHY, Reason: "x"},
	} {
		now = now.Add(time.Minute)
		persist(t, ctx, st, s, now, ev)
	}

	recs, err := NewRepo(st).Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs.Clusters) != 1 || len(recs.Nodes) != 2 || len(recs.Jobs) != 4 || len(recs.Runs) != 2 ||
		len(recs.Arrays) != 1 || len(recs.Usage) != 3 {
		t.Fatalf("loaded %d clusters, %d nodes, %d jobs, %d runs, %d arrays, %d usage records", len(recs.Clusters), len(recs.Nodes),
			len(recs.Jobs), len(recs.Runs), len(recs.Arrays), len(recs.Usage))
	}
	loaded := domain.NewState(domain.Config{})
	loaded.Load(recs.Clusters, recs.Nodes, recs.Jobs, recs.Runs, recs.Arrays, recs.Usage)
	excluded := 0
	for _, j := range recs.Jobs {
		if reflect.DeepEqual(j.Excluded, []string{"gpu-0001"}) {
			excluded++
		}
	}
	if excluded != 1 {
		t.Fatalf("%d jobs exclude gpu-0001 after it failed under one, want 1", excluded)
	}
	if a := loaded.ArrayRecord("projects/default/jobs/10"); a == nil || !sameArray(a, s.ArrayRecord("projects/default/jobs/10")) {
		t.Fatalf("array: loaded %+v", a)
	}
	for _, name := range []string{"projects/default/jobs/1", "projects/default/jobs/2", "projects/default/jobs/10", "projects/default/jobs/11"} {
		if !proto.Equal(loaded.Job(name), s.Job(name)) {
			t.Fatalf("job %s: loaded %v, want %v", name, loaded.Job(name), s.Job(name))
		}
		a, b := loaded.JobRecord(name), s.JobRecord(name)
		if a.Attempt != b.Attempt || a.ModelDir != b.ModelDir || !reflect.DeepEqual(a.Excluded, b.Excluded) {
			t.Fatalf("job record %s: loaded %+v, want %+v", name, a, b)
		}
	}
	for _, r := range recs.Runs {
		a, b := *loaded.Run(r.Job, r.Attempt), *s.Run(r.Job, r.Attempt)
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		if string(ja) != string(jb) {
			t.Fatalf("run %s: loaded %s, want %s", r.Key(), ja, jb)
		}
	}
	if len(loaded.ActiveRuns()) != len(s.ActiveRuns()) {
		t.Fatal("active runs differ after load")
	}
	// The same priorities (fair share from the stored usage) as the original.
	for _, name := range []string{"projects/default/jobs/10", "projects/default/jobs/11"} {
		a, b := views.Job(loaded, name, now), views.Job(s, name, now)
		b.Placement = "" // memory only: the loaded state's next pass explains it again
		if !proto.Equal(a, b) {
			t.Fatalf("view of %s: loaded %v, want %v", name, a, b)
		}
	}
	drained := cl + "/nodes/gpu-0002"
	if got, want := loaded.Node(drained), s.Node(drained); !want.Drained || !reflect.DeepEqual(got, want) {
		t.Fatalf("draining node: loaded %+v, want %+v (drained)", got, want)
	}
	// The loaded state schedules exactly as the original: nothing to do, and
	// NodeDrained, recorded as emitted, is not emitted again.
	if c := loaded.Schedule(now); !c.Empty() {
		t.Fatalf("pass on loaded state changed %v", c.Emits)
	}
	if c := loaded.Tick(now.Add(2 * time.Minute)); !c.Empty() {
		t.Fatalf("tick on loaded state changed %v", c.Emits)
	}
}

// sameArray reports whether two array records are equal, their templates
// as protobufs.
func sameArray(a, b *domain.Array) bool {
	if a == nil || b == nil {
		return a == b
	}
	ac, bc := *a, *b
	ac.Template, bc.Template = nil, nil
	return reflect.DeepEqual(ac, bc) && proto.Equal(a.Template, b.Template)
}

// TestArrayStoredOnce is the regression test of an sbatch --array=0-999 with
// 2 KB of exported environment, which stored the environment (and script)
// once per task: 1000 times. The array's shared parts are now stored once,
// in its record, and each task as its difference from them; in memory every
// task shares the array's environment map; and a state loaded from Redis
// holds the same jobs and schedules exactly as the one that wrote them.
func TestArrayStoredOnce(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	st := store.New(rdb, "scheduler:")
	ctx := testkit.Context(t, 60*time.Second)
	const cl, array = "projects/default/clusters/c1", "projects/default/jobs/100"

	env := map[string]string{}
	for i := range 40 {
		env[fmt.Sprintf("EXPORTED_VAR_%02d", i)] = strings.Repeat(string(rune('a'+i%26)), 40)
	}
	envBytes := 0
	for k, v := range env {
		envBytes += len(k) + len(v)
	}
	if envBytes < 2000 {
		t.Fatalf("environment of %d bytes, want about 2 KB", envBytes)
	}
	script := "#!/bin/bash\n" + strings.Repeat("# training step\n", 64)

	s := domain.NewState(domain.Config{})
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	apply := func(ev proto.Message) {
		t.Helper()
		now = now.Add(time.Second)
		persist(t, ctx, st, s, now, ev)
	}
	apply(&eventsv1.ClusterChanged{Cluster: &loomv1.Cluster{Name: cl, Status: &loomv1.ClusterStatus{State: loomv1.Cluster_RUNNING, SharedDir: "/s"}}})
	apply(&eventsv1.NodeChanged{Node: &loomv1.Node{Name: cl + "/nodes/gpu-0001", Cluster: cl, Hostname: "gpu-0001", Gpus: 1, State: loomv1.Node_READY}})
	apply(&eventsv1.SubmitJob{Job: &loomv1.Job{Name: array, JobId: "100", Cluster: cl, Array: "0-999", GpusPerNode: 1,
		User: "ada", Env: env, Script: script}})
	// A second node: another pass starts a second task and changes the
	// other tasks' records again (their reasons).
	apply(&eventsv1.NodeChanged{Node: &loomv1.Node{Name: cl + "/nodes/gpu-0002", Cluster: cl, Hostname: "gpu-0002", Gpus: 1, State: loomv1.Node_READY}})

	jobs, err := st.HGetAll(ctx, KeyJobs)
	if err != nil {
		t.Fatal(err)
	}
	arrays, err := st.HGetAll(ctx, KeyArrays)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1000 || len(arrays) != 1 {
		t.Fatalf("stored %d jobs and %d arrays, want 1000 and 1", len(jobs), len(arrays))
	}
	stored, full := len(array)+len(arrays[array]), 0
	for name, b := range jobs {
		stored += len(name) + len(b)
		var rec struct { // jobstore's record, as stored
			Job   []byte `json:"job"`
			Delta bool   `json:"delta"`
		}
		if err := json.Unmarshal(b, &rec); err != nil {
			t.Fatal(err)
		}
		var pb loomv1.Job
		if err := proto.Unmarshal(rec.Job, &pb); err != nil {
			t.Fatal(err)
		}
		if !rec.Delta || len(pb.GetEnv()) != 0 || pb.GetScript() != "" {
			t.Fatalf("task %s stored with its own environment or script: %s", name, b)
		}
		whole, _ := proto.Marshal(s.Job(name))
		full += len(name) + len(whole)
	}
	// What the old per-task records took: at least 1000 environments.
	if full < 1000*envBytes {
		t.Fatalf("full records take %d bytes, want over %d (the test's environment is too small)", full, 1000*envBytes)
	}
	// One environment and script, plus well under 100 bytes per task for
	// its name, id, index and state.
	if limit := envBytes + len(script) + 1000*100; stored > limit {
		t.Fatalf("array of 1000 tasks stored in %d bytes, want at most %d (one environment and script of %d bytes + 100 per task; full records: %d)",
			stored, limit, envBytes+len(script), full)
	}
	t.Logf("1000 tasks, %d bytes of environment: %d bytes stored (full records: %d)", envBytes, stored, full)

	// In memory: one environment map, the array's, for every task, also
	// for the tasks the passes changed.
	tmpl := s.ArrayRecord(array).Template
	if tmpl == nil || !maps.Equal(tmpl.GetEnv(), env) || tmpl.GetScript() != script {
		t.Fatalf("array template %v", tmpl)
	}
	sameEnv := func(st *domain.State, which string) {
		t.Helper()
		want := reflect.ValueOf(st.ArrayRecord(array).Template.GetEnv()).UnsafePointer()
		for k := range 1000 {
			j := st.JobRecord(fmt.Sprintf("projects/default/jobs/%d", 100+k))
			if j == nil || reflect.ValueOf(j.Job.GetEnv()).UnsafePointer() != want {
				t.Fatalf("%s: task %d does not share its array's environment", which, k)
			}
		}
	}
	sameEnv(s, "committed state")

	// Reloaded: the same jobs (environment and script included), the same
	// array, and the same decisions (a pass changes nothing).
	recs, err := NewRepo(st).Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	loaded := domain.NewState(domain.Config{})
	loaded.Load(recs.Clusters, recs.Nodes, recs.Jobs, recs.Runs, recs.Arrays, recs.Usage)
	running := 0
	for k := range 1000 {
		name := fmt.Sprintf("projects/default/jobs/%d", 100+k)
		got, want := loaded.Job(name), s.Job(name)
		if !proto.Equal(got, want) {
			t.Fatalf("task %d: loaded %v, want %v", k, got, want)
		}
		if want.GetState() == loomv1.JobState_RUNNING {
			running++
		}
	}
	if running != 2 {
		t.Fatalf("%d tasks started, want 2 (two 1-GPU nodes)", running)
	}
	if !sameArray(loaded.ArrayRecord(array), s.ArrayRecord(array)) {
		t.Fatalf("array: loaded %+v", loaded.ArrayRecord(array))
	}
	sameEnv(loaded, "loaded state")
	if c := loaded.Schedule(now); !c.Empty() {
		t.Fatalf("pass on the loaded state changed %d jobs, emitted %d events", c.JobCount(), len(c.Emits))
	}
}

// persist applies ev to s at now as the scheduler's app does: the domain
// decides, the change is written to st, and only then committed to memory.
func persist(t *testing.T, ctx context.Context, st *store.Store, s *domain.State, now time.Time, ev proto.Message) {
	t.Helper()
	c, err := s.Handle(now, ev)
	if err != nil {
		t.Fatal(err)
	}
	var tx store.Tx
	if err := Write(&tx, c); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Apply(ctx, "", &tx); err != nil {
		t.Fatal(err)
	}
	s.Commit(c)
}

// TestRunStoredFlat: a run's and a job's persisted parts are embedded
// (jobstore.RunRecord, JobRecord), and their JSON is the flat JSON they had
// before the split (the strings are what the code before it wrote) — no
// nesting under the embedded type's name, no memory-only field.
func TestRunStoredFlat(t *testing.T) {
	t.Parallel()
	r := domain.Run{RunRecord: jobstore.RunRecord{Job: "projects/p/jobs/1", Cluster: "c", Attempt: 2,
		Nodes: []string{"n"}, Hostnames: []string{"h"}, Steps: map[string]domain.Step{"n": {ExitCode: 1}},
		JobSteps: []domain.JobStep{{ID: 0, Parts: []domain.StepPart{{Message: "m"}}}}}}
	b, err := json.Marshal(&r)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"job":"projects/p/jobs/1","cluster":"c","attempt":2,"nodes":["n"],"hostnames":["h"],` +
		`"steps":{"n":{"state":0,"exit_code":1}},` +
		`"job_steps":[{"id":0,"command":null,"nodes":null,"hostnames":null,"tasks":null,"parts":[{"message":"m"}],"exit_codes":null,"state":0}]}`
	if string(b) != want {
		t.Fatalf("run record\n got %s\nwant %s", b, want)
	}
	j, err := json.Marshal(&domain.Job{JobRecord: jobstore.JobRecord{Attempt: 3, ModelDir: "d", Excluded: []string{"x"}}})
	if want := `{"attempt":3,"model_dir":"d","excluded":["x"]}`; err != nil || string(j) != want {
		t.Fatalf("job as JSON: %s, %v; want %s", j, err, want)
	}
}

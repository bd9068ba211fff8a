package adapters

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	"github.com/loom-ml/loom/services/training/internal/domain"
)

const study = "projects/p/locations/l/hyperparameterTuningJobs/100"

// bigStudy is a tuning root of n trials, each with its CustomJob and a few
// measurements.
func bigStudy(n int) *domain.Root {
	job := &trainingv1.HyperparameterTuningJob{Name: study, DisplayName: "big", User: "alice", MaxTrialCount: int32(n),
		State: trainingv1.JobState_JOB_STATE_RUNNING}
	r := &domain.Root{Name: study, Tuning: &domain.Tuning{Job: job}}
	for k := 1; k <= n; k++ {
		id := strconv.Itoa(k)
		tr := &trainingv1.Trial{Name: study + "/trials/" + id, Id: id, State: trainingv1.Trial_SUCCEEDED,
			CustomJob: fmt.Sprintf("projects/p/locations/l/customJobs/%d", 100+k)}
		for st := int64(1); st <= 3; st++ {
			tr.Measurements = append(tr.Measurements, &trainingv1.Measurement{StepCount: st,
				Metrics: []*trainingv1.Measurement_Metric{{MetricId: "loss", Value: float64(k) / float64(st)}}})
		}
		job.Trials = append(job.Trials, tr)
		r.CJs = append(r.CJs, &domain.CJ{TrialID: id, Ephemeral: true, Submitted: true, Attempt: 1,
			Job: &trainingv1.CustomJob{Name: tr.GetCustomJob(), User: "alice", State: trainingv1.JobState_JOB_STATE_SUCCEEDED}})
	}
	return r
}

func apply(t *testing.T, ctx context.Context, repo *Repo, c *domain.Change) {
	t.Helper()
	tx, err := repo.Tx(c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := repo.Store().Apply(ctx, "", tx); err != nil {
		t.Fatal(err)
	}
}

// TestTrialsStoredOnePerTrial: a tuning root's trials are stored one
// record per trial beside a root record that does not grow with them; a
// change rewrites only the trials it changed (a trial's record left as it
// was stays byte for byte); Load rebuilds the root as it was; a delete
// takes the trials with it.
func TestTrialsStoredOnePerTrial(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	_, rdb := testkit.Redis(t)
	repo := NewRepo(store.New(rdb, "training:"))
	const n = 1000
	r := bigStudy(n)
	apply(t, ctx, repo, &domain.Change{Root: study, After: r})

	if got := rdb.HLen(ctx, "training:"+KeyTrialsPrefix+study).Val(); got != n {
		t.Fatalf("%d trial records, want %d", got, n)
	}
	small, err := Encode(bigStudy(1))
	if err != nil {
		t.Fatal(err)
	}
	rootLen := len(rdb.HGet(ctx, "training:"+KeyRoots, study).Val())
	if rootLen > len(small)+64 {
		t.Errorf("the root record of %d trials is %d bytes, of one trial %d: it grows with its trials", n, rootLen, len(small))
	}

	// Trial 500 gets a measurement; trial 7's stored record is marked to
	// show whether the change rewrote it.
	next := r.Clone()
	tr := next.Tuning.Job.Trials[499]
	tr.Measurements = append(tr.Measurements, &trainingv1.Measurement{StepCount: 4})
	const mark = `{"trial":{"id":"7","name":"marked"}}`
	rdb.HSet(ctx, "training:"+KeyTrialsPrefix+study, "7", mark)
	apply(t, ctx, repo, &domain.Change{Root: study, Before: r, After: next})
	if got := rdb.HGet(ctx, "training:"+KeyTrialsPrefix+study, "7").Val(); got != mark {
		t.Errorf("an unchanged trial was rewritten: %s", got)
	}
	rdb.HDel(ctx, "training:"+KeyTrialsPrefix+study, "7") // Load then takes trial 7 from nowhere: put it back
	apply(t, ctx, repo, &domain.Change{Root: study, After: next})

	st, err := repo.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := st.Lookup(study)
	if got == nil || len(got.Tuning.Job.GetTrials()) != n || len(got.CJs) != n {
		t.Fatalf("loaded %d trials, %d custom jobs", len(got.Tuning.Job.GetTrials()), len(got.CJs))
	}
	for i := range n {
		if !proto.Equal(got.Tuning.Job.Trials[i], next.Tuning.Job.Trials[i]) || !proto.Equal(got.CJs[i].Job, next.CJs[i].Job) ||
			got.CJs[i].TrialID != next.CJs[i].TrialID {
			t.Fatalf("trial %d loaded as %v / %v, stored %v / %v", i+1, got.Tuning.Job.Trials[i], got.CJs[i].Job,
				next.Tuning.Job.Trials[i], next.CJs[i].Job)
		}
	}
	if got := st.Lookup(next.CJs[41].Job.GetName()); got != st.Lookup(study) {
		t.Errorf("a trial's custom job does not lead to its study after Load")
	}

	apply(t, ctx, repo, &domain.Change{Root: study, Before: next})
	if rdb.Exists(ctx, "training:"+KeyTrialsPrefix+study).Val() != 0 || rdb.HExists(ctx, "training:"+KeyRoots, study).Val() {
		t.Error("a deleted study left records")
	}
}

// TestLoadReadsInlineTrials: a root stored before trials were stored apart
// (its trials inline in the root record) loads with its trials.
func TestLoadReadsInlineTrials(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	_, rdb := testkit.Redis(t)
	repo := NewRepo(store.New(rdb, "training:"))
	r := bigStudy(3)
	// The old encoding: every custom job and the job with its trials.
	rec := record{Name: r.Name}
	for _, j := range r.CJs {
		c, err := encodeCJ(j)
		if err != nil {
			t.Fatal(err)
		}
		rec.CJs = append(rec.CJs, c)
	}
	b, err := marshal(r.Tuning.Job)
	if err != nil {
		t.Fatal(err)
	}
	rec.Tuning = &tuningRecord{Job: b}
	raw, err := jsonMarshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	rdb.HSet(ctx, "training:"+KeyRoots, study, raw)
	st, err := repo.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := st.Lookup(study)
	if got == nil || len(got.Tuning.Job.GetTrials()) != 3 || len(got.CJs) != 3 || !proto.Equal(got.Tuning.Job.Trials[2], r.Tuning.Job.Trials[2]) {
		t.Fatalf("loaded %+v", got)
	}
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

// TestCJRecordKeepsStepEnds: a CustomJob's step ends, those of its run and
// those kept until their run's event comes, survive a restart (its record
// encoded and decoded), so a restarted service does not wait the metric
// grace for ends it had read.
func TestCJRecordKeepsStepEnds(t *testing.T) {
	t.Parallel()
	j := bigStudy(1).CJs[0]
	j.StepsEnded = []string{"n-0001"}
	j.StepsExited = []string{"n-0001"}
	j.PendingStepEnds = []domain.StepEnd{{Attempt: 2, Node: "n-0001", Exited: true}, {Attempt: 2, Node: "n-0002"}}
	c, err := encodeCJ(j)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var back cjRecord
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	got, err := decodeCJ(back)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.StepsEnded, j.StepsEnded) || !slices.Equal(got.StepsExited, j.StepsExited) || !slices.Equal(got.PendingStepEnds, j.PendingStepEnds) {
		t.Fatalf("decoded step ends %v, kept %v; stored %v, %v", got.StepsEnded, got.PendingStepEnds, j.StepsEnded, j.PendingStepEnds)
	}
}

// TestHeldMetricsSurviveARestart: a trial's metric points held until their
// run's event comes (CJ.PendingMetrics) are stored with its CustomJob, so
// a service restarted before that event still has them to add then.
func TestHeldMetricsSurviveARestart(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	_, rdb := testkit.Redis(t)
	repo := NewRepo(store.New(rdb, "training:"))
	r := bigStudy(2)
	r.CJs[1].PendingMetrics = []domain.PendingMetrics{
		{Attempt: 2, Node: "projects/p/clusters/cj-102/nodes/n-0002", Measurements: []*trainingv1.Measurement{
			{StepCount: 4, Metrics: []*trainingv1.Measurement_Metric{{MetricId: "loss", Value: 0.25}}},
			{StepCount: 5, Metrics: []*trainingv1.Measurement_Metric{{MetricId: "loss", Value: 0.2}, {MetricId: "acc", Value: 0.9}}}}, Records: 2},
		{Attempt: 3, Node: "n-0003", Measurements: []*trainingv1.Measurement{{StepCount: 1}}},
	}
	apply(t, ctx, repo, &domain.Change{Root: study, After: r})
	st, err := repo.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := st.Lookup(study).CJs[1].PendingMetrics
	want := r.CJs[1].PendingMetrics
	same := slices.EqualFunc(got, want, func(a, b domain.PendingMetrics) bool {
		return a.Attempt == b.Attempt && a.Node == b.Node && a.Records == b.Records &&
			slices.EqualFunc(a.Measurements, b.Measurements, func(x, y *trainingv1.Measurement) bool { return proto.Equal(x, y) })
	})
	if !same {
		t.Fatalf("held metrics after a restart: %v, stored %v", got, want)
	}
}

// TestTuningEndByStored: who cancelled a tuning job (Tuning.EndBy) is
// stored with it, so that a trial stopped after a restart is still
// cancelled as them, not as the service.
func TestTuningEndByStored(t *testing.T) {
	t.Parallel()
	r := bigStudy(1)
	r.Tuning.Ending = trainingv1.JobState_JOB_STATE_CANCELLED
	r.Tuning.EndBy = domain.Canceller{User: "root", Admin: true}
	b, err := Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Tuning.EndBy != r.Tuning.EndBy {
		t.Fatalf("decoded EndBy %+v, stored %+v", got.Tuning.EndBy, r.Tuning.EndBy)
	}
}

// TestLogDirStored: where a root's CustomJobs' output goes (the log
// directory made for its owner, or why none could be) is stored with the
// root and with each CustomJob, a trial's too, so that a restart with
// another -log-dir renders their jobs as decided and tells the same story.
func TestLogDirStored(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	_, rdb := testkit.Redis(t)
	repo := NewRepo(store.New(rdb, "training:"))
	r := bigStudy(2)
	r.LogDir = domain.LogDir{Dir: "/var/lib/loom/training/logs/p/alice"}
	r.CJs[0].LogDir = r.LogDir
	r.CJs[1].LogDir = domain.LogDir{Why: "user alice has no account here"}
	apply(t, ctx, repo, &domain.Change{Root: study, After: r})
	st, err := repo.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := st.Lookup(study)
	if got.LogDir != r.LogDir || got.CJs[0].LogDir != r.CJs[0].LogDir || got.CJs[1].LogDir != r.CJs[1].LogDir {
		t.Fatalf("log dirs after a restart: root %+v, trials %+v %+v; stored %+v, %+v %+v",
			got.LogDir, got.CJs[0].LogDir, got.CJs[1].LogDir, r.LogDir, r.CJs[0].LogDir, r.CJs[1].LogDir)
	}
	// A CustomJob of its own (not a trial) is in the root's record.
	one := &domain.Root{Name: "projects/p/locations/l/customJobs/7", LogDir: domain.LogDir{Dir: "/l/p/bob"},
		CJs: []*domain.CJ{{Ephemeral: true, LogDir: domain.LogDir{Dir: "/l/p/bob"},
			Job: &trainingv1.CustomJob{Name: "projects/p/locations/l/customJobs/7", User: "bob"}}}}
	b, err := Encode(one)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if back.LogDir != one.LogDir || back.CJs[0].LogDir != one.LogDir {
		t.Fatalf("decoded %+v / %+v, encoded %+v (%s)", back.LogDir, back.CJs[0].LogDir, one.LogDir, b)
	}
}

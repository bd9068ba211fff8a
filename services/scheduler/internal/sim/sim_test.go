package sim

import (
	"context"
	"math"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler/internal/sim/trace"
)

// handMade is a one-node, 4-GPU cluster and four jobs whose outcome is easy
// to work out by hand:
//
//	job 1: t=0, 2 GPUs, runs 100 s (limit 100)
//	job 2: t=1, 4 GPUs, runs  50 s (limit  50) — must wait for job 1: reserved at t=100
//	job 3: t=2, 2 GPUs, runs  90 s (limit  90) — fits beside job 1 and ends by t=92 < 100
//	job 4: t=3, 2 GPUs, runs 200 s (limit 200) — fits beside job 1 but would end at 203 > 100
//
// FIFO: 1 [0,100], 2 [100,150], 3 [150,240], 4 [150,350].
// EASY: 3 is backfilled at t=2 [2,92]: it cannot delay job 2's reserved
// start; 4 cannot be (it would), so 1 [0,100], 2 [100,150], 4 [150,350].
func handMade() *trace.Trace {
	job := func(id, submit, gpus, run int64) trace.Job {
		return trace.Job{ID: id, Name: "j", Submit: submit, Runtime: run, TimeLimit: run, Nodes: 1, PerNode: int32(gpus),
			User: "u", Account: "a"}
	}
	return &trace.Trace{
		Name: "hand-made", Format: "test", Resource: trace.GPU,
		Nodes: []trace.Node{{Hostname: "gpu-0001", Pool: "gpu", Slots: 4}},
		Jobs:  []trace.Job{job(1, 0, 2, 100), job(2, 1, 4, 50), job(3, 2, 2, 90), job(4, 3, 2, 200)},
	}
}

type span struct{ start, end int64 }

func spans(r *Result) []span {
	out := make([]span, len(r.Jobs))
	for i, j := range r.Jobs {
		out[i] = span{j.Start, j.End}
	}
	return out
}

func run(t *testing.T, tr *trace.Trace, policy string) *Result {
	t.Helper()
	r, err := Run(context.Background(), tr, Options{Policy: policy})
	if err != nil {
		t.Fatalf("%s: %v", policy, err)
	}
	return r
}

func TestHandMadeFIFO(t *testing.T) {
	t.Parallel()
	r := run(t, handMade(), "fifo")
	want := []span{{0, 100}, {100, 150}, {150, 240}, {150, 350}}
	if got := spans(r); !reflect.DeepEqual(got, want) {
		t.Fatalf("FIFO spans %v, want %v", got, want)
	}
	m := r.Metrics
	// Waits 0, 99, 148, 147; JCTs 100, 149, 238, 347; GPU-seconds 200+200+180+400 over 4 GPUs × 350 s.
	if m.Finished != 4 || m.MeanWait != 98.5 || m.P95Wait != 148 || m.MeanJCT != 208.5 || m.Makespan != 350 {
		t.Errorf("metrics %+v", m)
	}
	if math.Abs(m.Utilisation-980.0/1400) > 1e-9 {
		t.Errorf("utilisation %v, want %v", m.Utilisation, 980.0/1400)
	}
	// Slowdowns 1, 149/50, 238/90, 347/200; one account: fairness 1.
	wantBSLD := (1 + 149.0/50 + 238.0/90 + 347.0/200) / 4
	if math.Abs(m.MeanBSLD-wantBSLD) > 1e-9 || m.Fairness != 1 || m.WorstAccount != "a" {
		t.Errorf("slowdown %v (want %v), fairness %v, worst %q", m.MeanBSLD, wantBSLD, m.Fairness, m.WorstAccount)
	}
}

func TestHandMadeEASY(t *testing.T) {
	t.Parallel()
	fifo := run(t, handMade(), "fifo")
	easy := run(t, handMade(), "easy")
	want := []span{{0, 100}, {100, 150}, {2, 92}, {150, 350}}
	if got := spans(easy); !reflect.DeepEqual(got, want) {
		t.Fatalf("EASY spans %v, want %v", got, want)
	}
	if easy.Jobs[1].Start != fifo.Jobs[1].Start {
		t.Errorf("backfill moved the head job: FIFO starts it at %d, EASY at %d", fifo.Jobs[1].Start, easy.Jobs[1].Start)
	}
	if easy.Jobs[2].Start >= fifo.Jobs[2].Start {
		t.Errorf("EASY started job 3 at %d, FIFO at %d: want earlier", easy.Jobs[2].Start, fifo.Jobs[2].Start)
	}
	if easy.Metrics.MeanWait >= fifo.Metrics.MeanWait {
		t.Errorf("EASY mean wait %v not below FIFO's %v", easy.Metrics.MeanWait, fifo.Metrics.MeanWait)
	}
}

func TestCancelledJobs(t *testing.T) {
	t.Parallel()
	// One GPU. Job 1 runs [0,100]; job 2, cancelled at 50, never gets it;
	// job 3 is submitted at 200 and cancelled at 300: it holds the GPU
	// until then, having no runtime of its own.
	tr := &trace.Trace{Name: "cancel", Resource: trace.GPU,
		Nodes: []trace.Node{{Hostname: "gpu-0001", Pool: "gpu", Slots: 1}},
		Jobs: []trace.Job{
			{ID: 1, Submit: 0, Runtime: 100, TimeLimit: 100, Nodes: 1, PerNode: 1, Account: "a"},
			{ID: 2, Submit: 10, TimeLimit: 100, Nodes: 1, PerNode: 1, Account: "a", Cancelled: true, CancelAt: 50},
			{ID: 3, Submit: 200, TimeLimit: 1000, Nodes: 1, PerNode: 1, Account: "b", Cancelled: true, CancelAt: 300},
		}}
	for _, p := range []string{"fifo", "easy", "loom"} {
		t.Run(p, func(t *testing.T) {
			t.Parallel()
			r := run(t, tr, p)
			if got := spans(r); !reflect.DeepEqual(got, []span{{0, 100}, {-1, 50}, {200, 300}}) {
				t.Fatalf("spans %v", got)
			}
			if r.Jobs[1].State != loomv1.JobState_CANCELLED || r.Jobs[2].State != loomv1.JobState_CANCELLED {
				t.Errorf("states %v, %v; want CANCELLED", r.Jobs[1].State, r.Jobs[2].State)
			}
			m := r.Metrics
			if m.Finished != 1 || m.Cancelled != 2 || m.Unfinished != 0 || r.Held != 200 {
				t.Errorf("finished %d, cancelled %d, unfinished %d, held %v", m.Finished, m.Cancelled, m.Unfinished, r.Held)
			}
		})
	}
}

func TestGangAndArrivalScale(t *testing.T) {
	t.Parallel()
	// Two nodes of 2 GPUs. Job 1 (1 GPU) from t=0 to 100 leaves node 1 with
	// one free GPU; job 2, a gang of 2 nodes × 2 GPUs submitted at t=40
	// (t=20 at arrival scale 2), waits for it.
	tr := &trace.Trace{Name: "gang", Resource: trace.GPU,
		Nodes: []trace.Node{{Hostname: "n1", Pool: "gpu", Slots: 2}, {Hostname: "n2", Pool: "gpu", Slots: 2}},
		Jobs: []trace.Job{
			{ID: 1, Submit: 0, Runtime: 100, TimeLimit: 100, Nodes: 1, PerNode: 1, Account: "a"},
			{ID: 2, Submit: 40, Runtime: 10, TimeLimit: 10, Nodes: 2, PerNode: 2, Account: "a"},
		}}
	r, err := Run(context.Background(), tr, Options{Policy: "fifo", ArrivalScale: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got := spans(r); !reflect.DeepEqual(got, []span{{0, 100}, {100, 110}}) {
		t.Fatalf("spans %v", got)
	}
	if r.Jobs[1].Submit != 20 || r.Held != 100+40 {
		t.Errorf("submit %d, held %v; want 20, 140", r.Jobs[1].Submit, r.Held)
	}
}

func TestRunErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		opts Options
		want string
	}{
		{Options{Policy: "sjf"}, `unknown policy "sjf"`},
		{Options{Policy: "fifo", ArrivalScale: -1}, "arrival scale must be positive"},
	} {
		if _, err := Run(context.Background(), handMade(), c.opts); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Run(%+v): %v, want %q", c.opts, err, c.want)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, handMade(), Options{Policy: "fifo"}); err == nil {
		t.Error("Run with a cancelled context: no error")
	}
}

// TestRealTraceReplay replays the start of real traces under every policy,
// the Philly sample with arrivals compressed so that a queue forms: every
// job runs to its end, none starts before it was submitted or runs other
// than its runtime, backfill never moves the first job's reserved start
// later, and a second run gives the same outcome.
func TestRealTraceReplay(t *testing.T) {
	t.Parallel()
	dir, err := trace.DataDir()
	if err != nil {
		t.Skipf("real traces not available: %v", err)
	}
	for _, c := range []struct {
		path  string
		limit int
		scale float64
	}{
		{filepath.Join("philly", "philly_jobs_4gpu_sample.json"), 600, 3},
		{filepath.Join("pwa-swf", "NASA-iPSC-1993-3.1-cln.swf.gz"), 400, 2},
	} {
		tr, err := trace.Load(filepath.Join(dir, c.path), "", trace.Options{Limit: c.limit})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range Policies {
			t.Run(tr.Name+"/"+p, func(t *testing.T) {
				t.Parallel()
				r, err := Run(context.Background(), tr, Options{Policy: p, ArrivalScale: c.scale})
				if err != nil {
					t.Fatal(err)
				}
				m := r.Metrics
				if m.Finished != c.limit || m.Unfinished != 0 {
					t.Fatalf("finished %d, unfinished %d; want all %d", m.Finished, m.Unfinished, c.limit)
				}
				for i, j := range r.Jobs {
					if j.Start < j.Submit || j.End-j.LastStart != tr.Jobs[i].Runtime {
						t.Fatalf("job %d: %+v, runtime %d", j.ID, j, tr.Jobs[i].Runtime)
					}
				}
				if m.Utilisation <= 0 || m.Utilisation > 1 || m.MeanBSLD < 1 || m.Fairness <= 0 || m.Fairness > 1 {
					t.Errorf("metrics out of range: %+v", m)
				}
				if p == "easy" && r.Reservations == 0 {
					t.Error("EASY made no reservation: the replay never queued")
				}
				if len(r.Delayed) > 0 {
					t.Errorf("%d reserved starts moved later, first %+v", len(r.Delayed), r.Delayed[0])
				}
				again, err := Run(context.Background(), tr, Options{Policy: p, ArrivalScale: c.scale})
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(again.Jobs, r.Jobs) || again.Metrics != r.Metrics {
					t.Error("a second run differs")
				}
			})
		}
	}
}

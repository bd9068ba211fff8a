package sim

import (
	"context"
	"crypto/sha256"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/topics"
	"github.com/loom-ml/loom/services/scheduler/internal/domain"
	"github.com/loom-ml/loom/services/scheduler/internal/sim/trace"
)

// updateGolden rewrites testdata/golden.txt from this run: only after a
// change that is meant to change decisions.
var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/golden.txt with this run's decisions")

// goldenDumpEnv names a directory into which TestGoldenDecisions writes every
// case's full record, to diff when a digest differs.
const goldenDumpEnv = "LOOM_GOLDEN_DUMP"

// goldenBigEnv adds the report's largest cycle state (10,000 nodes, 100,000
// pending jobs) to the cases: too slow for every run, worth it after a change
// to the pass.
const goldenBigEnv = "LOOM_GOLDEN_BIG"

// TestGoldenDecisions keeps the scheduler's decisions identical: the start
// and end of every job of the start of each real trace under every policy,
// and every event, reason, filtered count, note and reservation of the
// scheduling passes of a cycle-benchmark state (first pass, steady pass, the
// pass after a restart), are digested and compared with testdata/golden.txt.
// A change to the pass that is meant to be a pure refactor or a speed-up must
// leave every digest as it is.
func TestGoldenDecisions(t *testing.T) {
	t.Parallel()
	want := map[string]string{}
	raw, err := os.ReadFile(filepath.Join("testdata", "golden.txt"))
	if err != nil && !*updateGolden {
		t.Fatalf("reading the golden digests: %v (run with -update-golden to write them)", err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && !strings.HasPrefix(line, "#") {
			want[k] = v
		}
	}
	got := map[string]string{}
	dump := os.Getenv(goldenDumpEnv)
	record := func(name string, write func(w io.Writer)) {
		h := sha256.New()
		var w io.Writer = h
		if dump != "" {
			f, err := os.Create(filepath.Join(dump, name+".txt"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			w = io.MultiWriter(h, f)
		}
		write(w)
		got[name] = fmt.Sprintf("%x", h.Sum(nil))
	}

	if dir, err := trace.DataDir(); err == nil {
		for _, c := range []struct {
			key, path, format string
			limit             int
			scale             float64
		}{
			{"philly", filepath.Join("philly", "philly_jobs_4gpu_sample.json"), "philly", 800, 3},
			{"nasa", filepath.Join("pwa-swf", "NASA-iPSC-1993-3.1-cln.swf.gz"), "swf", 800, 2},
			{"lcg", filepath.Join("pwa-swf", "LCG.swf.gz"), "swf", 1500, 1},
			{"alibaba", "alibaba-gpu-v2023", "alibaba", 1500, 100000},
		} {
			tr, err := trace.Load(filepath.Join(dir, c.path), c.format, trace.Options{Limit: c.limit})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range Policies {
				r, err := Run(context.Background(), tr, Options{Policy: p, ArrivalScale: c.scale})
				if err != nil {
					t.Fatal(err)
				}
				record("trace-"+c.key+"-"+p, func(w io.Writer) {
					fmt.Fprintf(w, "reservations %d delayed %d\n", r.Reservations, len(r.Delayed))
					for _, j := range r.Jobs {
						fmt.Fprintf(w, "%d %d %d %d %v %d\n", j.ID, j.Start, j.LastStart, j.End, j.State, j.Requeues)
					}
				})
			}
		}
	} else {
		t.Logf("real traces not available (%v): only the cycle states are compared", err)
		for k := range want {
			if strings.HasPrefix(k, "trace-") {
				delete(want, k)
			}
		}
	}

	sizes := []CycleConfig{{Nodes: 300, Pending: 4000}, {Nodes: 64, Pending: 1500, Partitions: 2}}
	if os.Getenv(goldenBigEnv) != "" {
		sizes = append(sizes, CycleConfig{Nodes: 10000, Pending: 100000})
	} else {
		delete(want, "cycle-10000x100000-loom")
	}
	for _, size := range sizes {
		for _, p := range Policies {
			if size.Nodes == 10000 && p != "loom" {
				continue
			}
			cfg := size
			cfg.Policy = p
			st, _, err := CycleState(cfg)
			if err != nil {
				t.Fatal(err)
			}
			record(fmt.Sprintf("cycle-%dx%d-%s", cfg.Nodes, cfg.Pending, p), func(w io.Writer) {
				now := Epoch.Add(24 * time.Hour)
				first := st.Schedule(now)
				writeChange(w, "first", first)
				st.Commit(first)
				writeChange(w, "steady", st.Schedule(now.Add(time.Second)))
				fresh := domain.NewState(st.Config())
				fresh.Restore(st.Snapshot())
				writeChange(w, "restart", fresh.Schedule(now.Add(time.Second)))
				// Time moves on: the runs' time limits and the queue's ages
				// change the reservations and priorities.
				later := st.Schedule(now.Add(3 * time.Hour))
				writeChange(w, "later", later)
			})
		}
	}

	if *updateGolden {
		var b strings.Builder
		b.WriteString("# case sha256 — written by go test -run TestGoldenDecisions -update-golden (see golden_test.go)\n")
		for _, k := range slices.Sorted(maps.Keys(got)) {
			fmt.Fprintf(&b, "%s %s\n", k, got[k])
		}
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join("testdata", "golden.txt"), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		switch w, ok := want[k]; {
		case !ok:
			t.Errorf("%s: no golden digest (run with -update-golden if the case is new)", k)
		case w != got[k]:
			t.Errorf("%s: decisions differ from the golden ones (set %s=DIR, run before and after, and diff)", k, goldenDumpEnv)
		}
	}
	for k := range want {
		if _, ok := got[k]; !ok {
			t.Errorf("%s: golden case not run", k)
		}
	}
}

// writeChange writes what a pass decided: every event (in order), decision
// and reservation.
func writeChange(w io.Writer, label string, c *domain.Change) {
	fmt.Fprintf(w, "== %s: %d emits, %d decisions, %d reservations\n", label, len(c.Emits), len(c.Decisions), len(c.Reservations))
	opts := prototext.MarshalOptions{}
	for _, e := range c.Emits {
		b, _ := opts.Marshal(e.Message())
		// The topic the app routes the event to: the golden files pin it.
		topic, err := topics.For(e.Message())
		if err != nil {
			topic = "(" + err.Error() + ")"
		}
		fmt.Fprintf(w, "emit %s %s %s %s {%s}\n", topic, e.Key, e.Subject, proto.MessageName(e.Message()), oneLine(string(b)))
	}
	for _, d := range c.Decisions {
		fmt.Fprintf(w, "decision %s %q %d %q", d.Job, d.Reason, d.Nodes, d.Note)
		for _, k := range slices.Sorted(maps.Keys(d.Filtered)) {
			fmt.Fprintf(w, " %s=%d", k, d.Filtered[k])
		}
		fmt.Fprintln(w)
	}
	for _, r := range c.Reservations {
		fmt.Fprintf(w, "reservation %s %s %s %v %v\n", r.Cluster, r.Job, r.Start.Format(time.RFC3339Nano), r.Unbounded, r.Nodes)
	}
}

// oneLine makes prototext's output one line with single spaces: it puts
// random spaces in its output on purpose.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

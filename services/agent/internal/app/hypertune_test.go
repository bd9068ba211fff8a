package app

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/services/agent/internal/adapters"
	"github.com/loom-ml/loom/services/agent/internal/adapters/procruntime"
	"github.com/loom-ml/loom/services/agent/internal/domain"
)

// tailApp is an App with only what reading a tail needs.
func tailApp() *App {
	a := &App{log: slog.New(slog.NewTextHandler(io.Discard, nil)), dropped: newDroppedLines()}
	a.opts.Now = time.Now
	a.opts.Metrics.fill()
	return a
}

// hypertuneLine is a line as cloudml-hypertune writes it.
func hypertuneLine(step int) string {
	return fmt.Sprintf(`{"global_step": "%d", "timestamp": %d.5, "trial": "1", "val_loss": "0.%d"}`+"\n", step, 1764600000+step, step)
}

// takeSteps reads tl and returns the steps of the points it took.
func takeSteps(a *App, tl *tail, final bool) []int64 {
	a.readTail("s", tl, flushBytes, final)
	var out []int64
	for _, p := range tl.pending {
		out = append(out, p.Step)
	}
	tl.pending = nil
	return out
}

func appendTo(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

// TestTailAppendedLines: new complete lines only; a partial last line
// waits for its newline (or the step's end); blank lines are nothing; a
// truncated file is read again from its start.
func TestTailAppendedLines(t *testing.T) {
	t.Parallel()
	a := tailApp()
	path := filepath.Join(t.TempDir(), "m.jsonl")
	tl := newTail("j", 1, path, tailPos{})
	if got := takeSteps(a, tl, false); got != nil {
		t.Fatalf("a missing file gave %v", got)
	}
	appendTo(t, path, hypertuneLine(1)+"\n"+hypertuneLine(2)+`{"global_step": 3, "val`)
	if got := takeSteps(a, tl, false); !slices.Equal(got, []int64{1, 2}) {
		t.Fatalf("took %v, want 1, 2 (3 is not complete)", got)
	}
	if got := takeSteps(a, tl, false); got != nil {
		t.Fatalf("nothing new gave %v", got)
	}
	appendTo(t, path, `_loss": 0.3}`+"\n")
	if got := takeSteps(a, tl, false); !slices.Equal(got, []int64{3}) {
		t.Fatalf("took %v, want 3", got)
	}
	// Truncated and written anew (a program that restarted).
	if err := os.WriteFile(path, []byte(hypertuneLine(10)), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := takeSteps(a, tl, false); !slices.Equal(got, []int64{10}) {
		t.Fatalf("after truncation took %v, want 10", got)
	}
	// Replaced by another file (renamed over it), longer than the old.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(hypertuneLine(10)+hypertuneLine(11)+hypertuneLine(12)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	if got := takeSteps(a, tl, false); !slices.Equal(got, []int64{11, 12}) {
		t.Fatalf("after a replacement took %v, want 11, 12 (10 was seen)", got)
	}
	// At the end, a last line without its newline counts.
	appendTo(t, path, `{"val_loss": 0.1, "global_step": 13}`)
	if got := takeSteps(a, tl, false); got != nil {
		t.Fatalf("a partial line gave %v", got)
	}
	if got := takeSteps(a, tl, true); !slices.Equal(got, []int64{13}) {
		t.Fatalf("the end took %v, want 13", got)
	}
}

// TestTailHypertuneRewrites: cloudml-hypertune rewrites the whole file at
// every report with its latest 100 lines; each line is taken once, also
// once the oldest lines fall off the front.
func TestTailHypertuneRewrites(t *testing.T) {
	t.Parallel()
	a := tailApp()
	path := filepath.Join(t.TempDir(), "m.jsonl")
	tl := newTail("j", 1, path, tailPos{})
	var got []int64
	for step := 1; step <= 130; step++ {
		var b strings.Builder
		for s := max(1, step-99); s <= step; s++ {
			b.WriteString(hypertuneLine(s))
		}
		if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		got = append(got, takeSteps(a, tl, false)...)
	}
	want := make([]int64, 130)
	for i := range want {
		want[i] = int64(i + 1)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("took %v\nwant 1..130 once each", got)
	}
}

// counted is how many lines a has dropped for reason.
func counted(t *testing.T, a *App, reason string) float64 {
	t.Helper()
	var m dto.Metric
	if err := a.dropped.WithLabelValues(reason).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestTailDropsBadLines: a line that is not JSON and one too long are
// dropped and counted by reason; the lines around them are taken; a link
// is not followed.
func TestTailDropsBadLines(t *testing.T) {
	t.Parallel()
	a := tailApp()
	dir := t.TempDir()
	path := filepath.Join(dir, "m.jsonl")
	tl := newTail("j", 1, path, tailPos{})
	huge := `{"val_loss": "` + strings.Repeat("9", 3*a.opts.Metrics.Limits.Line) + `", "global_step": 9}`
	appendTo(t, path, hypertuneLine(1)+"Traceback (most recent call last):\n"+huge[:5000])
	if got := takeSteps(a, tl, false); !slices.Equal(got, []int64{1}) {
		t.Fatalf("took %v, want 1", got)
	}
	appendTo(t, path, huge[5000:]+"\n"+hypertuneLine(2))
	if got := takeSteps(a, tl, false); !slices.Equal(got, []int64{2}) {
		t.Fatalf("took %v, want 2", got)
	}
	if n := counted(t, a, domain.DropBadJSON); n != 1 {
		t.Errorf("bad_json drops = %v, want 1", n)
	}
	if n := counted(t, a, domain.DropTooLong); n != 1 {
		t.Errorf("too_long drops = %v, want 1", n)
	}
	// A link to another file is not read (the agent reads as root in the
	// owner's directory).
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte(hypertuneLine(7)), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.jsonl")
	if err := os.Symlink(secret, link); err != nil {
		t.Fatal(err)
	}
	if got := takeSteps(a, newTail("j", 1, link, tailPos{}), true); got != nil {
		t.Fatalf("a link was followed: %v", got)
	}
}

// TestTailResumesFromItsPosition: a tail made from a stored position (an
// adopted step's) takes only what came after it.
func TestTailResumesFromItsPosition(t *testing.T) {
	t.Parallel()
	a := tailApp()
	path := filepath.Join(t.TempDir(), "m.jsonl")
	tl := newTail("j", 1, path, tailPos{})
	appendTo(t, path, hypertuneLine(1)+hypertuneLine(2))
	takeSteps(a, tl, false)
	b, err := json.Marshal(tl.pos)
	if err != nil {
		t.Fatal(err)
	}
	var pos tailPos
	if err := json.Unmarshal(b, &pos); err != nil {
		t.Fatal(err)
	}
	appendTo(t, path, hypertuneLine(3))
	if got := takeSteps(a, newTail("j", 1, path, pos), false); !slices.Equal(got, []int64{3}) {
		t.Fatalf("resumed tail took %v, want 3", got)
	}
}

// TestMetricsBatchAndRate: records carry at most Batch points and go out
// at most Rate a second per step (a burst of Rate×Interval); the rest
// waits. The tail's position is stored with each record and dropped when
// the step's end sends everything left.
func TestMetricsBatchAndRate(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	_, rdb := testkit.Redis(t)
	st := store.New(rdb, "agent-c1-gpu-0001:")
	dir := t.TempDir()
	now := time.Date(2026, 12, 2, 7, 0, 0, 0, time.UTC)
	self := domain.Self{Node: "projects/p/clusters/c1/nodes/gpu-0001", Cluster: "projects/p/clusters/c1"}
	a, err := New(ctx, Options{Store: st, Runtime: procruntime.New(procruntime.Options{AllowRoot: true}), Self: self,
		Hostname: "gpu-0001", WorkDir: dir, Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return now },
		Metrics: MetricsOptions{Interval: time.Second, Batch: 10, Rate: 2}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "m.jsonl")
	var b strings.Builder
	for s := 1; s <= 35; s++ {
		b.WriteString(hypertuneLine(s))
	}
	appendTo(t, path, b.String())
	tl := newTail("projects/p/jobs/1", 1, path, tailPos{})
	records := func() int64 {
		t.Helper()
		n, err := st.OutboxLen(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	a.pumpMetrics(ctx, "k", tl, false)
	if n := records(); n != 2 || len(tl.pending) != 15 {
		t.Fatalf("first look: %d records, %d points left; want 2 records of 10, 15 left", n, len(tl.pending))
	}
	pos, err := st.HGet(ctx, adapters.KeyMetrics, "k")
	if err != nil || !strings.Contains(string(pos), fmt.Sprintf(`"off":%d`, len(b.String()))) {
		t.Fatalf("stored position %s (%v), want the file's end", pos, err)
	}
	now = now.Add(500 * time.Millisecond) // one record's worth
	a.pumpMetrics(ctx, "k", tl, false)
	if n := records(); n != 3 || len(tl.pending) != 5 {
		t.Fatalf("half a second later: %d records, %d points left; want 3, 5", n, len(tl.pending))
	}
	a.pumpMetrics(ctx, "k", tl, false) // no time passed: nothing
	if n := records(); n != 3 {
		t.Fatalf("with no time passed: %d records, want 3", n)
	}
	a.pumpMetrics(ctx, "k", tl, true) // the step ended: all of it, at once
	if n := records(); n != 4 || len(tl.pending) != 0 {
		t.Fatalf("at the end: %d records, %d points left; want 4, 0", n, len(tl.pending))
	}
	if pos, err := st.HGet(ctx, adapters.KeyMetrics, "k"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("position after the end: %s (%v), want none", pos, err)
	}
}

// BenchmarkTailHypertuneRewrite: one look at a file hypertune rewrote
// whole (100 lines, one new): the worst a well-behaved program costs the
// agent per step and interval.
func BenchmarkTailHypertuneRewrite(b *testing.B) {
	a := tailApp()
	path := filepath.Join(b.TempDir(), "m.jsonl")
	tl := newTail("j", 1, path, tailPos{})
	write := func(last int) {
		var sb strings.Builder
		for s := last - 99; s <= last; s++ {
			sb.WriteString(hypertuneLine(s))
		}
		if err := os.WriteFile(path, []byte(sb.String()), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	write(100)
	a.readTail("s", tl, flushBytes, false)
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		write(101 + i)
		tl.pending = tl.pending[:0]
		b.StartTimer()
		a.readTail("s", tl, flushBytes, false)
		if len(tl.pending) != 1 {
			b.Fatalf("took %d points, want 1", len(tl.pending))
		}
	}
}

// TestRootReadsNoSecondName: the agent reads a job's metrics and progress
// files as root, so not a file with a second name (a hard link the owner
// made to a file of someone else's), and a link's size is its own.
func TestRootReadsNoSecondName(t *testing.T) {
	t.Parallel()
	a := tailApp()
	dir := t.TempDir()
	theirs := filepath.Join(dir, "theirs")
	if err := os.WriteFile(theirs, []byte(hypertuneLine(1)), 0o600); err != nil {
		t.Fatal(err)
	}
	metrics := filepath.Join(dir, "metrics.jsonl")
	if err := os.Link(theirs, metrics); err != nil {
		t.Fatal(err)
	}
	if got := takeSteps(a, newTail("j", 1, metrics, tailPos{}), true); len(got) != 0 {
		t.Errorf("a hard link's lines read: %v", got)
	}
	prog, other := filepath.Join(dir, "progress.json"), filepath.Join(dir, "other")
	if err := os.WriteFile(other, []byte(`{"step": 7}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(other, prog); err != nil {
		t.Fatal(err)
	}
	if got := readProgress(prog, domain.ProgressReport{}); got != (domain.ProgressReport{}) {
		t.Errorf("a hard link's progress read: %+v", got)
	}
	if err := os.Remove(other); err != nil {
		t.Fatal(err)
	}
	if got := readProgress(prog, domain.ProgressReport{}); got.Step != 7 {
		t.Errorf("the owner's own progress file: %+v", got)
	}
	link := filepath.Join(dir, "out")
	if err := os.Symlink(prog, link); err != nil {
		t.Fatal(err)
	}
	if got := outputSize(link); got != int64(len(prog)) {
		t.Errorf("outputSize of a link: %d, want the link's own %d", got, len(prog))
	}
}

package series

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/testkit"
)

func newStore(t *testing.T, lim Limits) *Store {
	t.Helper()
	_, rdb := testkit.Redis(t)
	return NewStore(rdb, "training:", lim)
}

// TestStoreAppendRead appends out of order from two sources, reads back
// sorted and summarised, and a redelivered batch changes nothing.
func TestStoreAppendRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, Limits{})
	t0 := time.Unix(1700000000, 0).UTC()
	b1 := Batch{"loss": {{Step: 2, Time: t0, Value: 0.5}, {Step: 3, Value: 0.25}}, "lr": {{Step: 2, Value: 0.1}}}
	b2 := Batch{"loss": {{Step: 1, Value: 0.9}, {Step: 4, Value: math.Inf(1)}}}
	for i, b := range []Batch{b1, b2} {
		r, err := s.Append(ctx, "42", Source{Name: "p0", Seq: int64(10 + i)}, b)
		if err != nil || r.Duplicate {
			t.Fatalf("append %d: %+v %v", i, r, err)
		}
	}
	// Redelivery of the first record: nothing added.
	if r, err := s.Append(ctx, "42", Source{Name: "p0", Seq: 10}, b1); err != nil || !r.Duplicate || r.Appended != 0 {
		t.Fatalf("redelivered: %+v %v, want a duplicate", r, err)
	}
	pts, total, err := s.Read(ctx, "42", "loss", Query{})
	if err != nil || total != 4 {
		t.Fatalf("read: %d %v", total, err)
	}
	want := []float64{0.9, 0.5, 0.25, math.Inf(1)}
	for i, p := range pts {
		if p.Step != int64(i+1) || p.Value != want[i] {
			t.Errorf("point %d: %+v, want step %d value %v", i, p, i+1, want[i])
		}
	}
	if !pts[1].Time.Equal(t0) {
		t.Errorf("time %v, want %v", pts[1].Time, t0)
	}
	list, err := s.List(ctx, "42")
	if err != nil || len(list) != 2 {
		t.Fatalf("list: %+v %v", list, err)
	}
	l := list[0]
	if l.Metric != "loss" || l.Count != 4 || l.First != 0.9 || l.FirstStep != 1 || !math.IsInf(l.Last, 1) || l.Min != 0.25 || !math.IsInf(l.Max, 1) {
		t.Errorf("loss summary %+v", l)
	}
	from, to := int64(2), int64(3)
	if pts, total, _ := s.Read(ctx, "42", "loss", Query{Range: Range{From: &from, To: &to}}); total != 2 || pts[0].Step != 2 {
		t.Errorf("range 2..3: %d %+v", total, pts)
	}
	if _, _, err := s.Read(ctx, "42", "nope", Query{}); !errors.Is(err, errs.NotFound) {
		t.Errorf("unknown metric: %v, want NotFound", err)
	}
	if _, _, err := s.Read(ctx, "42", "loss", Query{Points: MaxReadPoints + 1}); err == nil {
		t.Error("points over the limit accepted")
	}
	// points is "at most", below 4 too: one point is the latest.
	if pts, total, err := s.Read(ctx, "42", "loss", Query{Points: 1}); err != nil || total != 4 || len(pts) != 1 || pts[0].Step != 4 {
		t.Errorf("points=1: %+v of %d, %v; want step 4 alone", pts, total, err)
	}
	if list, err := s.List(ctx, "7"); err != nil || len(list) != 0 {
		t.Errorf("a job without metrics: %+v %v", list, err)
	}
	if err := s.Delete(ctx, "42"); err != nil {
		t.Fatal(err)
	}
	if list, _ := s.List(ctx, "42"); len(list) != 0 {
		t.Errorf("after delete: %+v", list)
	}
}

// TestStoreLimits: a series keeps its first Points points, the rest are
// dropped and counted (summary recomputed over what was kept); a job keeps
// at most Series series; a bad batch applies nothing.
func TestStoreLimits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, Limits{Points: 5, Series: 2})
	r, err := s.Append(ctx, "1", Source{}, Batch{"a": line(3, func(i int) float64 { return float64(i) })})
	if err != nil || r.Appended != 3 {
		t.Fatalf("%+v %v", r, err)
	}
	// 4 more: 2 fit, 2 dropped; the dropped ones hold the extremes.
	r, err = s.Append(ctx, "1", Source{}, Batch{"a": {{Step: 10, Value: -1}, {Step: 11, Value: 7}, {Step: 12, Value: -100}, {Step: 13, Value: 100}}})
	if err != nil || r.Appended != 2 || r.Dropped != 2 {
		t.Fatalf("at the limit: %+v %v", r, err)
	}
	list, _ := s.List(ctx, "1")
	if a := list[0]; a.Count != 5 || a.Dropped != 2 || a.Min != -1 || a.Max != 7 || a.LastStep != 11 || a.Last != 7 {
		t.Errorf("summary at the limit %+v", a)
	}
	r, _ = s.Append(ctx, "1", Source{}, Batch{"b": line(1, func(int) float64 { return 0 }), "c": line(2, func(int) float64 { return 0 })})
	if r.Appended != 1 || r.Dropped != 2 {
		t.Errorf("third series: %+v, want b kept and c's 2 points dropped", r)
	}
	if _, err := s.Append(ctx, "1", Source{}, Batch{"d": line(1, func(int) float64 { return 0 }), "bad name!": line(1, func(int) float64 { return 0 })}); err == nil {
		t.Fatal("bad name accepted")
	}
	if list, _ := s.List(ctx, "1"); len(list) != 2 {
		t.Errorf("series after a refused batch: %+v", list)
	}
}

// TestJobPointsBudget: a job keeps at most JobPoints points across all its
// series: past it, points are dropped and counted, whatever series they
// are for (each series under its own bound); the budget is the job's
// (another job's is whole), and it is freed with the job's series.
func TestJobPointsBudget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, Limits{Points: 100, Series: 10, JobPoints: 8})
	zero := func(int) float64 { return 0 }
	if r, err := s.Append(ctx, "7", Source{}, Batch{"a": line(5, zero), "b": line(2, zero)}); err != nil || r.Appended != 7 || r.Dropped != 0 {
		t.Fatalf("7 of a budget of 8: %+v %v", r, err)
	}
	r, err := s.Append(ctx, "7", Source{}, Batch{"c": line(4, zero)})
	if err != nil || r.Appended != 1 || r.Dropped != 3 {
		t.Fatalf("4 more past a budget of 8: %+v %v; want 1 kept, 3 dropped", r, err)
	}
	if r, _ := s.Append(ctx, "7", Source{}, Batch{"a": line(1, zero)}); r.Appended != 0 || r.Dropped != 1 {
		t.Errorf("a series under its own bound, the job at its budget: %+v", r)
	}
	if r, _ := s.Append(ctx, "8", Source{}, Batch{"a": line(8, zero)}); r.Appended != 8 {
		t.Errorf("another job's budget: %+v", r)
	}
	if err := s.Delete(ctx, "7"); err != nil {
		t.Fatal(err)
	}
	if r, _ := s.Append(ctx, "7", Source{}, Batch{"a": line(8, zero)}); r.Appended != 8 {
		t.Errorf("after the job's series were deleted: %+v; want a whole budget", r)
	}
}

// TestProjectPointsBudget: a project's jobs keep at most ProjectPoints
// points together: past it, points are dropped and counted as over the
// budget; another project's budget is whole; a job's Delete frees what it
// kept; and the count follows what is kept, whatever is redelivered.
func TestProjectPointsBudget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, Limits{ProjectPoints: 10})
	zero := func(int) float64 { return 0 }
	a, b, other := "projects/p/jobs/1", "projects/p/jobs/2", "projects/q/jobs/1"
	if r, err := s.Append(ctx, a, Source{Name: "t/0", Seq: 1}, Batch{"loss": line(7, zero)}); err != nil || r.Appended != 7 || r.OverBudget != 0 {
		t.Fatalf("7 of a project budget of 10: %+v %v", r, err)
	}
	r, err := s.Append(ctx, b, Source{}, Batch{"loss": line(2, zero), "lr": line(3, zero)})
	if err != nil || r.Appended != 3 || r.Dropped != 2 || r.OverBudget != 2 {
		t.Fatalf("5 more in the project: %+v %v; want 3 kept, 2 dropped over the budget", r, err)
	}
	if list, _ := s.List(ctx, b); len(list) != 2 || list[0].Metric != "loss" || list[0].Count != 2 || list[1].Count != 1 || list[1].Dropped != 2 {
		t.Errorf("the second job's series: %+v; want loss 2 points, lr 1 kept and 2 dropped", list)
	}
	if r, _ := s.Append(ctx, other, Source{}, Batch{"loss": line(10, zero)}); r.Appended != 10 {
		t.Errorf("another project: %+v, want its whole budget", r)
	}
	// A redelivered record changes neither the series nor the count.
	if r, _ := s.Append(ctx, a, Source{Name: "t/0", Seq: 1}, Batch{"loss": line(7, zero)}); !r.Duplicate {
		t.Errorf("redelivery: %+v", r)
	}
	for p, want := range map[string]int64{"p": 10, "q": 10} {
		if n, err := s.ProjectPoints(ctx, p); err != nil || n != want {
			t.Errorf("project %s keeps %d (%v), want %d", p, n, err, want)
		}
	}
	if err := s.Delete(ctx, a); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.ProjectPoints(ctx, "p"); n != 3 {
		t.Errorf("after deleting a job of 7 points the project keeps %d, want 3", n)
	}
	if r, _ := s.Append(ctx, b, Source{}, Batch{"loss": line(9, zero)}); r.Appended != 7 || r.OverBudget != 2 {
		t.Errorf("after the delete: %+v, want the 7 points freed taken", r)
	}
	// The project is full: a new series of a new job is not made (an empty
	// series would list a summary of points it does not hold).
	c := "projects/p/jobs/3"
	if r, _ := s.Append(ctx, c, Source{}, Batch{"acc": line(4, zero)}); r.Appended != 0 || r.OverBudget != 4 {
		t.Errorf("a new job in a full project: %+v, want 4 points over the budget", r)
	}
	if list, err := s.List(ctx, c); err != nil || len(list) != 0 {
		t.Errorf("its series: %+v %v, want none", list, err)
	}
}

// TestProjectBudgetCutSummary: a batch cut at the project's budget keeps
// the summary of the points kept, not of the batch.
func TestProjectBudgetCutSummary(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, Limits{ProjectPoints: 3})
	vals := []float64{5, -1, 7, -100, 100}
	pts := make([]Point, len(vals))
	for i, v := range vals {
		pts[i] = Point{Step: int64(i + 10), Value: v}
	}
	if r, err := s.Append(ctx, "projects/p/jobs/1", Source{}, Batch{"loss": pts}); err != nil || r.Appended != 3 || r.OverBudget != 2 {
		t.Fatalf("%+v %v", r, err)
	}
	list, _ := s.List(ctx, "projects/p/jobs/1")
	if l := list[0]; l.Count != 3 || l.Dropped != 2 || l.Min != -1 || l.Max != 7 || l.FirstStep != 10 || l.First != 5 || l.LastStep != 12 || l.Last != 7 {
		t.Errorf("summary %+v, want the first three points'", l)
	}
}

// appendUnsynced runs an append's script alone: an append whose sync a
// crash (or a slow writer) has not run yet.
func appendUnsynced(t *testing.T, s *Store, job string, seq int64, points int) {
	t.Helper()
	if err := appendScript.Run(context.Background(), s.rdb, []string{s.key(job, "index"), s.key(job, "seen"), s.key(job, "swept"), s.key(job, "points"), s.key(job, "s:loss")},
		"t/0", seq, s.lim.Points, s.lim.Series, s.lim.JobPoints, s.lim.ProjectPoints, "loss", string(make([]byte, 24*points)), points, 0, 0, 0, 0, 0, 0).Err(); err != nil {
		t.Fatal(err)
	}
}

func wantProjectPoints(t *testing.T, s *Store, project string, want int64, when string) {
	t.Helper()
	if n, err := s.ProjectPoints(context.Background(), project); err != nil || n != want {
		t.Errorf("%s: project %q counts %d (%v), want %d", when, project, n, err, want)
	}
}

// TestProjectCountHealsAfterACrash: an append whose sync was lost (the
// writer stopped between the two) is counted when the same record is
// redelivered, or at the job's next append; CountStored counts series
// stored before any sync.
func TestProjectCountHealsAfterACrash(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, Limits{})
	zero := func(int) float64 { return 0 }
	job := "projects/p/jobs/3"
	if _, err := s.Append(ctx, job, Source{Name: "t/0", Seq: 1}, Batch{"loss": line(4, zero)}); err != nil {
		t.Fatal(err)
	}
	appendUnsynced(t, s, job, 2, 5)
	wantProjectPoints(t, s, "p", 4, "before the redelivery")
	if r, err := s.Append(ctx, job, Source{Name: "t/0", Seq: 2}, Batch{"loss": line(5, zero)}); err != nil || !r.Duplicate {
		t.Fatalf("redelivery: %+v %v", r, err)
	}
	wantProjectPoints(t, s, "p", 9, "after the redelivery")
	// Stored before projects were counted: counted by CountStored.
	old := "projects/p/jobs/4"
	appendUnsynced(t, s, old, 1, 6)
	if n, err := s.CountStored(ctx, 0); err != nil || n != 2 {
		t.Fatalf("CountStored read %d jobs (%v), want 2", n, err)
	}
	wantProjectPoints(t, s, "p", 15, "after CountStored")
	if n, _ := s.CountStored(ctx, 0); n != 2 {
		t.Errorf("a second CountStored read %d jobs", n)
	}
	wantProjectPoints(t, s, "p", 15, "after a second CountStored")
}

// TestProjectCountSurvivesLateSyncs: syncs that arrive late never undo a
// later count (two appliers of one job), and the sync of an append that
// ran before its job was swept does not count the swept points again.
func TestProjectCountSurvivesLateSyncs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, Limits{})
	job := "projects/p/jobs/5"
	appendUnsynced(t, s, job, 1, 100)
	appendUnsynced(t, s, job, 2, 300)
	for _, n := range []int64{400, 100} { // the second append's sync first
		if err := s.syncProject(ctx, job, n); err != nil {
			t.Fatal(err)
		}
	}
	wantProjectPoints(t, s, "p", 400, "syncs out of order")
	// An append runs, then the job is swept, then the append's sync comes.
	appendUnsynced(t, s, job, 3, 50)
	if err := s.Ended(ctx, job, time.Now().Add(-2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Sweep(ctx, time.Now(), time.Hour, 10); err != nil || n != 1 {
		t.Fatalf("sweep: %d %v", n, err)
	}
	wantProjectPoints(t, s, "p", 0, "after the sweep")
	if err := s.syncProject(ctx, job, 450); err != nil {
		t.Fatal(err)
	}
	wantProjectPoints(t, s, "p", 0, "after the swept job's late sync")
}

// TestProjectCountOddJobIDs: ids of another shape than projects/{p}/jobs/{id}
// share one project, "", whose total no job id can overwrite.
func TestProjectCountOddJobIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, Limits{ProjectPoints: 1000})
	zero := func(int) float64 { return 0 }
	for _, job := range []string{"total", "42", ":total"} {
		if r, err := s.Append(ctx, job, Source{}, Batch{"loss": line(300, zero)}); err != nil || r.Appended != 300 {
			t.Fatalf("%s: %+v %v", job, r, err)
		}
	}
	wantProjectPoints(t, s, "", 900, "three jobs of 300")
	if r, _ := s.Append(ctx, "43", Source{}, Batch{"loss": line(300, zero)}); r.Appended != 100 || r.OverBudget != 200 {
		t.Errorf("past the budget of 1000: %+v, want 100 kept", r)
	}
}

// TestRangeReadsOfOrderedSeries: a step range of a series whose steps never
// decrease is read alone (read.lua's binary searches: the script says so),
// and every read — ranged or whole, of ordered series, of one made
// unordered by a late batch, of one whose summary predates the ordered
// field — returns what sorting and filtering every point gives: the same
// points, repeated steps in arrival order, and the same total.
func TestRangeReadsOfOrderedSeries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, rdb := testkit.Redis(t)
	s := NewStore(rdb, "training:", Limits{})
	rng := rand.New(rand.NewPCG(3, 5))
	var all []Point // every point appended to "loss", in arrival order
	step := int64(-5)
	appendBatch := func(seq int, back bool) {
		t.Helper()
		pts := make([]Point, 2+rng.IntN(400))
		for i := range pts {
			if rng.IntN(5) != 0 {
				step += int64(rng.IntN(3)) // repeated steps too
			}
			pts[i] = Point{Step: step, Value: float64(seq*1000 + i)}
		}
		if back { // a batch that goes back before the greatest step kept
			pts[0].Step = step - 50
		}
		if seq == 12 { // a batch whose own steps go back, after the greatest kept
			pts[len(pts)-2].Step += 10
			pts[len(pts)-1].Step = pts[len(pts)-2].Step - 5
			step = pts[len(pts)-2].Step
		}
		if _, err := s.Append(ctx, "9", Source{Name: "p", Seq: int64(seq)}, Batch{"loss": pts}); err != nil {
			t.Fatal(err)
		}
		all = append(all, pts...)
	}
	ranged := func(from, to *int64) bool {
		t.Helper()
		var f, g string
		if from != nil {
			f = strconv.FormatInt(*from, 10)
		}
		if to != nil {
			g = strconv.FormatInt(*to, 10)
		}
		res, err := readScript.Run(ctx, rdb, []string{s.key("9", "index"), s.key("9", "s:loss")}, "loss", f, g).Slice()
		if err != nil {
			t.Fatal(err)
		}
		return res[0].(int64) == 1
	}
	check := func(what string, wantRanged bool) {
		t.Helper()
		for range 60 {
			var r Range
			if rng.IntN(4) != 0 {
				r.From = new(step - int64(rng.IntN(int(step+60))) + 5)
			}
			if rng.IntN(4) != 0 {
				r.To = new(step - int64(rng.IntN(int(step+60))) + 5)
			}
			if r.From != nil && r.To != nil && *r.From > *r.To {
				r.From, r.To = r.To, r.From
			}
			want := slices.Clone(all)
			SortByStep(want)
			want = r.Filter(want)
			got, total, err := s.Read(ctx, "9", "loss", Query{Range: r, Points: MaxReadPoints})
			if err != nil {
				t.Fatal(err)
			}
			if total != len(want) || !slices.EqualFunc(got, want, func(a, b Point) bool { return a.Step == b.Step && a.Value == b.Value }) {
				t.Fatalf("%s: range %v..%v: %d points (total %d), sorting every point gives %d", what, ptr(r.From), ptr(r.To), len(got), total, len(want))
			}
			if r.From != nil || r.To != nil {
				if got := ranged(r.From, r.To); got != wantRanged {
					t.Fatalf("%s: range %v..%v read alone: %v, want %v", what, ptr(r.From), ptr(r.To), got, wantRanged)
				}
			}
		}
	}
	// fresh deletes the series: the next append starts a new one.
	fresh := func() {
		t.Helper()
		if err := s.Delete(ctx, "9"); err != nil {
			t.Fatal(err)
		}
		all, step = nil, -5
	}
	for seq := range 10 {
		appendBatch(seq, false)
	}
	check("ordered", true)
	if !exact(new(int64(1<<53-1))) || !exact(new(int64(-1<<53+1))) || exact(new(int64(1<<53))) || exact(new(int64(math.MinInt64))) {
		t.Error("a bound past ±2^53 (not exact as a Lua number) must read the whole series, and one within it not")
	}
	if _, total, err := s.Read(ctx, "9", "loss", Query{Range: Range{From: new(int64(math.MinInt64)), To: new(int64(math.MaxInt64))}}); err != nil || total != len(all) {
		t.Errorf("the widest range: %d points (%v), want %d", total, err, len(all))
	}
	appendBatch(10, true)
	check("a batch went back", false)
	appendBatch(11, false)
	check("ordered batches after it", false)

	// A series whose batch goes back within itself.
	fresh()
	appendBatch(11, false)
	check("ordered, one batch", true)
	appendBatch(12, false)
	check("a batch went back within itself", false)

	// A summary kept before the ordered field (8 fields) counts as not
	// ordered, and stays so.
	fresh()
	for seq := range 3 {
		appendBatch(100+seq, false)
	}
	check("ordered again", true)
	key := s.key("9", "index")
	v := strings.Fields(rdb.HGet(ctx, key, "loss").Val())
	if len(v) != 9 || v[8] != "1" {
		t.Fatalf("summary %q, want 9 fields, ordered", v)
	}
	rdb.HSet(ctx, key, "loss", strings.Join(v[:8], " "))
	check("a summary of 8 fields", false)
	appendBatch(103, false)
	check("appended to after", false)
	if list, err := s.List(ctx, "9"); err != nil || len(list) != 1 || list[0].Count != int64(len(all)) {
		t.Fatalf("list: %+v %v, want one series of %d points", list, err, len(all))
	}
}

func ptr(p *int64) any {
	if p == nil {
		return "-"
	}
	return *p
}

// TestOrderedSeriesPast2To53: steps past 2^53 (unix nanoseconds, say) that
// go back by less than a double's spacing there still make the series
// unordered, so a ranged read returns them in step order.
func TestOrderedSeriesPast2To53(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, Limits{})
	const base = int64(1_700_000_000_000_000_000)
	for i, step := range []int64{base + 100, base + 50} {
		if _, err := s.Append(ctx, "5", Source{Name: "p", Seq: int64(i + 1)}, Batch{"t": {{Step: step, Value: float64(i)}}}); err != nil {
			t.Fatal(err)
		}
	}
	pts, _, err := s.Read(ctx, "5", "t", Query{Range: Range{From: new(int64(0))}})
	if err != nil || len(pts) != 2 || pts[0].Step != base+50 || pts[1].Step != base+100 {
		t.Fatalf("read from 0: %+v %v, want both points in step order", pts, err)
	}
}

// TestCutSummaryDecodesValuesExactly: a batch cut at the series' limit has
// its kept part's summary recomputed in the script from the records
// themselves (decode.lua, no struct library): the extremes come back bit
// for bit, subnormal, huge, negative and infinite values included.
func TestCutSummaryDecodesValuesExactly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	vals := []float64{5e-324, -2.2250738585072014e-308, math.MaxFloat64, -math.MaxFloat64 / 3, 0.1, math.Inf(-1), 1e-310, 42}
	pts := make([]Point, 0, len(vals)+1)
	for i, v := range vals {
		pts = append(pts, Point{Step: int64(-3 + i), Value: v})
	}
	pts = append(pts, Point{Step: 99, Value: math.Inf(1)}) // past the limit: dropped
	s := newStore(t, Limits{Points: int64(len(vals))})
	if r, err := s.Append(ctx, "3", Source{}, Batch{"x": pts}); err != nil || r.Appended != int64(len(vals)) || r.Dropped != 1 {
		t.Fatalf("append: %+v %v", r, err)
	}
	list, err := s.List(ctx, "3")
	if err != nil || len(list) != 1 {
		t.Fatalf("list: %+v %v", list, err)
	}
	sm := list[0]
	if sm.Min != math.Inf(-1) || sm.Max != math.MaxFloat64 || sm.FirstStep != -3 || sm.First != 5e-324 || sm.LastStep != 4 || sm.Last != 42 {
		t.Errorf("summary %+v, want min -Inf, max MaxFloat64, first 5e-324 at step -3, last 42 at step 4", sm)
	}
}

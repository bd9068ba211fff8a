package series

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/loom-ml/loom/libs/errs"
)

func line(n int, f func(i int) float64) []Point {
	pts := make([]Point, n)
	for i := range pts {
		pts[i] = Point{Step: int64(i), Value: f(i)}
	}
	return pts
}

// TestDownsampleKeepsExtremes: a one-step spike and dip in 100,000 points
// survive a downsampling to 1,000, with both ends, within n, by step.
func TestDownsampleKeepsExtremes(t *testing.T) {
	t.Parallel()
	pts := line(100_000, func(i int) float64 { return math.Sin(float64(i) / 1000) })
	pts[31_337].Value = 50
	pts[77_777].Value = -50
	got := Downsample(pts, 1000)
	if len(got) > 1000 || len(got) < 900 {
		t.Fatalf("%d points, want at most 1000 and near it", len(got))
	}
	if got[0].Step != 0 || got[len(got)-1].Step != 99_999 {
		t.Errorf("ends %d..%d, want 0..99999", got[0].Step, got[len(got)-1].Step)
	}
	var spike, dip bool
	for i, p := range got {
		if i > 0 && p.Step <= got[i-1].Step {
			t.Fatalf("not by step at %d: %d after %d", i, p.Step, got[i-1].Step)
		}
		spike = spike || p.Step == 31_337 && p.Value == 50
		dip = dip || p.Step == 77_777 && p.Value == -50
	}
	if !spike || !dip {
		t.Errorf("spike kept %v, dip kept %v: extremes must survive", spike, dip)
	}
	if short := line(10, func(i int) float64 { return 1 }); len(Downsample(short, 1000)) != 10 {
		t.Error("a series shorter than n must come back whole")
	}
}

// TestDownsampleFewPoints: a read of 1, 2 or 3 points gets at most that
// many (a tester found --points 1 answered with 4): the last point alone,
// then the first and the last; 4 is the first n with room for a bucket's
// extremes between them.
func TestDownsampleFewPoints(t *testing.T) {
	t.Parallel()
	pts := line(100, func(i int) float64 { return float64(i % 7) })
	steps := func(got []Point) []int64 {
		out := make([]int64, len(got))
		for i, p := range got {
			out[i] = p.Step
		}
		return out
	}
	for _, c := range []struct {
		n    int
		want []int64
	}{
		{-1, []int64{99}},
		{0, []int64{99}},
		{1, []int64{99}},
		{2, []int64{0, 99}},
		{3, []int64{0, 99}},
	} {
		if got := steps(Downsample(pts, c.n)); !slices.Equal(got, c.want) {
			t.Errorf("n=%d: steps %v, want %v", c.n, got, c.want)
		}
	}
	if got := Downsample(pts, 4); len(got) != 4 || got[0].Step != 0 || got[3].Step != 99 {
		t.Errorf("n=4: %v, want the ends and one bucket's two extremes", steps(got))
	}
	if got := steps(Downsample(pts[:1], 1)); !slices.Equal(got, []int64{0}) {
		t.Errorf("one point, n=1: %v", got)
	}
}

// TestRangeAndSort: the step filter is inclusive at both ends, and sorting
// keeps the arrival order of points at one step.
func TestRangeAndSort(t *testing.T) {
	t.Parallel()
	pts := []Point{{Step: 5, Value: 1}, {Step: 1, Value: 2}, {Step: 5, Value: 3}, {Step: 9, Value: 4}}
	SortByStep(pts)
	if pts[0].Step != 1 || pts[1].Value != 1 || pts[2].Value != 3 {
		t.Fatalf("sorted %+v", pts)
	}
	from, to := int64(5), int64(5)
	if got := (Range{From: &from, To: &to}).Filter(pts); len(got) != 2 || got[0].Step != 5 || got[1].Step != 5 {
		t.Errorf("filter 5..5: %+v", got)
	}
}

// TestLimitsCheck: names, batch counts and NaN are refused naming the field
// and the limit.
func TestLimitsCheck(t *testing.T) {
	t.Parallel()
	l := Limits{BatchMetrics: 2, BatchPoints: 3}
	one := []Point{{Step: 1, Value: 1}}
	for _, c := range []struct {
		b     Batch
		field string
		words string
	}{
		{Batch{strings.Repeat("a", 251): one}, "metric", "limit of 250"},
		{Batch{"": one}, "metric", "empty"},
		{Batch{"loss\n": one}, "metric", "letters"},
		{Batch{"/loss": one}, "metric", "starts"},
		{Batch{"a..b": one}, "metric", ".."},
		{Batch{"a": one, "b": one, "c": one}, "metrics", "limit of 2"},
		{Batch{"a": line(4, func(int) float64 { return 0 })}, "points", "3 points"},
		{Batch{"a": {{Step: 3, Value: math.NaN()}}}, "value", "NaN"},
	} {
		err := l.Check(c.b)
		var inv *errs.InvalidError
		if !errors.As(err, &inv) || inv.Violations[0].Field != c.field || !strings.Contains(err.Error(), c.words) {
			t.Errorf("%v: %v, want InvalidArgument on %s saying %q", len(c.b), err, c.field, c.words)
		}
	}
	ok := Batch{"eval/accuracy": one, "train loss:0": one}
	if err := l.Check(ok); err != nil {
		t.Errorf("valid names refused: %v", err)
	}
}

// BenchmarkReadPath: decoding, ordering and downsampling 100,000 stored
// points to 1,000 (what Store.Read does after its GET).
func BenchmarkReadPath(b *testing.B) {
	var blob []byte
	for i := 0; i < 100_000; i++ {
		blob = appendPoint(blob, Point{Step: int64(i), Value: math.Sin(float64(i))})
	}
	b.SetBytes(int64(len(blob)))
	for b.Loop() {
		recs := decodeRecs(blob)
		sortByStep(recs, rec.stepOf)
		if len(downsample(recs, 1000, rec.valueOf)) > 1000 {
			b.Fatal("too many")
		}
	}
}

package domain

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/loom-ml/loom/services/scheduler/internal/domain/place"
)

// TestSumInIsPriority: a priority from a job's compact inputs (sumIn, as a
// reorder computes it, with the age steps and without) is priority's sum
// to the bit, or sumIn says only sum can tell: over random jobs of every
// size (past the size table too), partitions with and without GPUs, held
// jobs, ages before and past MaxAge, the same inputs pass after pass.
func TestSumInIsPriority(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(9, 10))
	cfg := Config{}.Defaults()
	cfg.QOS = []QOS{{Name: "low", Priority: 1}, {Name: "normal", Priority: 10}, {Name: "high", Priority: 100}}
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	p := &prioCtx{now: now, cfg: &cfg, maxQOS: 100,
		partGPUs: []int64{80000, 0, 24, 7}, partNodes: []int64{10000, 40, 3, 0}, partTier: []int32{1, 0, 3, 2}, maxTier: 3,
		qosFactor: []float64{0.01, 0.1, 1}, fsByID: []float64{1, 0.5, 0.123456789, 0.999999, 0.25}}
	p.weigh()
	assocs := []*assoc{{"a", "u0", 0}, {"a", "u1", 1}, {"b", "u2", 2}, {"b", "u3", 3}, {"c", "u4", 4}, {"c", "u5", 5}}
	steps := ageSteps(cfg.Weights.Age, cfg.MaxAge)
	type job struct {
		a  jobAttrs
		in prioIn
	}
	jobs := make([]job, 3000)
	for i := range jobs {
		a := jobAttrs{gpus: int64(rng.IntN(200)), assoc: assocs[rng.IntN(len(assocs))], qos: int32(rng.IntN(4) - 1),
			hold: rng.IntN(20) == 0, req: place.Request{Nodes: 1 + rng.IntN(8)}}
		if rng.IntN(10) > 0 {
			a.eligible = now - rng.Int64N(int64(2*cfg.MaxAge))
		}
		part := int32(rng.IntN(5) - 1)
		jobs[i] = job{a, prioInOf(&a, part)}
	}
	fast := 0
	for pass := range 40 {
		p.now = now + int64(pass)*int64(time.Duration(1+rng.IntN(3600))*time.Second)
		for i := range jobs {
			j := &jobs[i]
			want, _ := p.priority(&j.a, int(j.in.part))
			if got := p.sum(&j.a, int(j.in.part)); got != want {
				t.Fatalf("job %d: sum %d, priority %d", i, got, want)
			}
			for _, st := range [][]int64{steps, nil} {
				got, ok := p.sumIn(&j.in, st)
				if !ok {
					continue
				}
				fast++
				if got != want {
					t.Fatalf("pass %d, job %d (%+v): sumIn %d, priority %d", pass, i, j.in, got, want)
				}
			}
		}
	}
	if fast <= len(jobs)*40 {
		t.Errorf("sumIn told %d of %d priorities: too few", fast, len(jobs)*80)
	}
}

// TestAccrualsAreAccrued: the table's value is accrued's to the bit, for
// runs sharing start times (whole seconds and nanoseconds apart), times
// whose running times collide in the table, starts at and after now, rates
// of every kind, several passes (now moving, the table reset), and two
// half-lives.
func TestAccrualsAreAccrued(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(11, 12))
	var a accruals
	base := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	for pass := range 6 {
		now := base.Add(time.Duration(pass) * 1500 * time.Millisecond)
		halfLife := 7 * 24 * time.Hour
		if pass%2 == 1 {
			halfLife = 90 * time.Minute
		}
		a.reset(now, halfLife)
		starts := make([]time.Time, 3*accrualSlots)
		for i := range starts {
			switch rng.IntN(4) {
			case 0:
				starts[i] = now.Add(-time.Duration(rng.IntN(3600)) * time.Second)
			case 1:
				starts[i] = now.Add(-time.Duration(rng.Int64N(int64(30 * 24 * time.Hour))))
			case 2:
				starts[i] = now.Add(time.Duration(rng.IntN(3)-1) * time.Second) // at, before or after now
			default:
				starts[i] = starts[rng.IntN(i+1)] // one seen already
			}
		}
		hits, misses := 0, 0
		for i, start := range starts {
			rate := []float64{1, 8, 64, 0.5, float64(rng.IntN(1000))}[rng.IntN(5)]
			d := now.Sub(start)
			k := uint64(d) * 0x9E3779B97F4A7C15 >> (64 - accrualBits)
			if d > 0 && a.ds[k] == d {
				hits++
			} else {
				misses++
			}
			got, want := a.of(rate, start), accrued(rate, start, now, halfLife)
			if math.Float64bits(got) != math.Float64bits(want) {
				t.Fatalf("pass %d, run %d (running %v at %v): %v, accrued %v", pass, i, d, rate, got, want)
			}
		}
		if hits == 0 || misses == 0 {
			t.Fatalf("pass %d: %d hits, %d misses: the table was not exercised both ways", pass, hits, misses)
		}
	}
}

// TestPrioInOfOutOfRange: inputs the compact copy cannot hold (a QOS index
// past int16, a GPU count past int32, an association not interned) make it
// slow (sum reads the entry), and a held job's needs nothing else.
func TestPrioInOfOutOfRange(t *testing.T) {
	t.Parallel()
	in := &assoc{"a", "u", 3}
	for _, c := range []struct {
		a    jobAttrs
		slow bool
	}{
		{jobAttrs{assoc: in, gpus: 8, qos: math.MaxInt16}, false},
		{jobAttrs{assoc: in, gpus: 8, qos: math.MaxInt16 + 1}, true},
		{jobAttrs{assoc: in, gpus: math.MaxInt32 + 1, qos: 1}, true},
		{jobAttrs{assoc: &assoc{"a", "v", -1}, gpus: 8, qos: 1}, true},
		{jobAttrs{assoc: in, gpus: 8, qos: math.MaxInt16 + 1, hold: true}, false},
	} {
		got := prioInOf(&c.a, 2)
		if got.slow != c.slow || got.part != 2 || got.age != -1 {
			t.Errorf("prioInOf(%+v): %+v, want slow %v", c.a, got, c.slow)
		}
		if !got.slow && !got.hold && (int32(got.qos) != c.a.qos || int64(got.gpus) != c.a.gpus || got.assoc != c.a.assoc.id) {
			t.Errorf("prioInOf(%+v): %+v", c.a, got)
		}
	}
}

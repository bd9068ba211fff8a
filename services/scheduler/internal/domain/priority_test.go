package domain

import (
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

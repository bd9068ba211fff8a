package hpo

import (
	"math"
	"slices"
)

// gridLevels chooses how many values each param takes in a grid of at most
// budget points: each param's count grows in turn (the smallest first, in
// spec order), up to its number of legal values and never past budget,
// while the grid (counted as enumerated, conditional params only under
// their parents' values) stays within budget. Every param gets at least
// one value. A conditional param grows only while some value of its
// parent's in the grid selects it: growing one the grid never reaches
// would leave the count as it is, and a hostile spec (an integer child of
// range 2^40 under a parent value the grid skips) would grow it for hours.
// So the loop ends after at most budget count-raising steps per param.
func (sp *space) gridLevels(budget int) []int {
	n := len(sp.params)
	levels := make([]int, n)
	limit := make([]float64, n)
	for i := range sp.params {
		levels[i] = 1
		p := &sp.params[i]
		switch p.kind {
		case kCat:
			limit[i] = float64(len(p.cats))
		case kDisc:
			limit[i] = float64(len(p.disc))
		case kInt:
			limit[i] = p.hi - p.lo + 1
		default:
			limit[i] = math.Inf(1)
			if p.hi == p.lo {
				limit[i] = 1
			}
		}
		// A param never needs more values than the grid has points.
		limit[i] = min(limit[i], float64(max(budget, 1)))
	}
	full := make([]bool, n) // growing it would exceed the budget
	for {
		reached := sp.reached(levels)
		best := -1
		for i := range levels {
			if full[i] || !reached[i] || float64(levels[i]) >= limit[i] {
				continue
			}
			if best < 0 || levels[i] < levels[best] {
				best = i
			}
		}
		if best < 0 {
			return levels
		}
		levels[best]++
		if sp.gridCount(levels) > float64(budget) {
			levels[best]--
			full[best] = true
		}
	}
}

// reached reports, per param, whether the grid with these levels holds it:
// a top-level param always; a conditional one when its parent is reached
// and one of the parent's grid values selects it.
func (sp *space) reached(levels []int) []bool {
	out := make([]bool, len(sp.params))
	for i := range sp.params {
		p := &sp.params[i]
		if p.parent < 0 {
			out[i] = true
			continue
		}
		// A parent precedes its children (space.add).
		if !out[p.parent] {
			continue
		}
		for _, v := range sp.gridValues(p.parent, levels[p.parent]) {
			if slices.Contains(p.cond, v) {
				out[i] = true
				break
			}
		}
	}
	return out
}

// gridCount is the number of points the grid with these levels enumerates.
func (sp *space) gridCount(levels []int) float64 {
	vals := make([][]float64, len(sp.params))
	for i := range sp.params {
		vals[i] = sp.gridValues(i, levels[i])
	}
	// sub(i) counts param i's subtree: each of its values times the
	// subtrees of the children that value activates.
	var sub func(i int) float64
	sub = func(i int) float64 {
		total := 0.0
		for _, v := range vals[i] {
			prod := 1.0
			for _, c := range sp.params[i].children {
				if slices.Contains(sp.params[c].cond, v) {
					prod *= sub(c)
				}
			}
			total += prod
		}
		return total
	}
	count := 1.0
	for i := range sp.params {
		if sp.params[i].parent < 0 {
			count *= sub(i)
		}
	}
	return count
}

// gridValues lists param i's grid values (point values): l evenly spaced
// values of its scaled space (endpoints included; the middle when l is 1),
// or l evenly spaced entries of its value list.
func (sp *space) gridValues(i, l int) []float64 {
	p := &sp.params[i]
	var out []float64
	// spaced is the j-th of l evenly spaced positions in [0, 1].
	spaced := func(j int) float64 {
		if l == 1 {
			return 0.5
		}
		return float64(j) / float64(l-1)
	}
	switch p.kind {
	case kCat:
		for j := range l {
			out = append(out, math.Round(spaced(j)*float64(len(p.cats)-1)))
		}
	case kDisc:
		for j := range l {
			out = append(out, p.discU[int(math.Round(spaced(j)*float64(len(p.disc)-1)))])
		}
	default:
		for j := range l {
			v := p.snap(spaced(j))
			if len(out) == 0 || out[len(out)-1] != v {
				out = append(out, v)
			}
		}
	}
	return out
}

// grid enumerates the grid of at most budget points, in lexicographic order
// of the params (the first varies slowest); a conditional param takes its
// values only where its parent selects it.
func (sp *space) grid(budget int) [][]float64 {
	levels := sp.gridLevels(budget)
	vals := make([][]float64, len(sp.params))
	for i := range sp.params {
		vals[i] = sp.gridValues(i, levels[i])
	}
	var out [][]float64
	x := make([]float64, len(sp.params))
	var rec func(i int)
	rec = func(i int) {
		if len(out) >= budget {
			return
		}
		if i == len(sp.params) {
			out = append(out, append([]float64(nil), x...))
			return
		}
		if !sp.active(x, i) {
			x[i] = math.NaN()
			rec(i + 1)
			return
		}
		for _, v := range vals[i] {
			x[i] = v
			rec(i + 1)
		}
	}
	rec(0)
	return out
}

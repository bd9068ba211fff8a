package main

import (
	"math"
	"slices"
)

// meanSD is the mean and the sample standard deviation.
func meanSD(xs []float64) (mean, sd float64) {
	if len(xs) == 0 {
		return math.NaN(), math.NaN()
	}
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	if len(xs) < 2 {
		return mean, 0
	}
	for _, x := range xs {
		sd += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(sd / float64(len(xs)-1))
}

// quantile is the q-quantile by linear interpolation between order
// statistics (q in [0,1]).
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	pos := q * float64(len(s)-1)
	i := int(math.Floor(pos))
	if i >= len(s)-1 {
		return s[len(s)-1]
	}
	return s[i] + (pos-float64(i))*(s[i+1]-s[i])
}

// mannWhitney is the two-sided Mann-Whitney U test of samples a and b
// (independent: one study per seed and system, no pairing). u is a's
// statistic, counting the pairs (a_i, b_j) with a_i < b_j, ties as one
// half: u > len(a)·len(b)/2 means a tends to be smaller (better, for a
// regret). Without ties and with both samples of at most 50 the p-value is
// exact (the null distribution of U counted by recursion); otherwise it is
// the normal approximation with the tie-corrected variance and a
// continuity correction.
func mannWhitney(a, b []float64) (u, p float64) {
	n1, n2 := len(a), len(b)
	if n1 == 0 || n2 == 0 {
		return math.NaN(), math.NaN()
	}
	ties := false
	for _, x := range a {
		for _, y := range b {
			switch {
			case x < y:
				u++
			case x == y:
				u += 0.5
				ties = true
			}
		}
	}
	all := append(slices.Clone(a), b...)
	slices.Sort(all)
	var tieTerm float64 // Σ (t³ - t) over groups of equal values
	for i := 0; i < len(all); {
		j := i
		for j < len(all) && all[j] == all[i] {
			j++
		}
		if t := float64(j - i); t > 1 {
			tieTerm += t*t*t - t
			ties = true
		}
		i = j
	}
	mu := float64(n1*n2) / 2
	if !ties && n1 <= 50 && n2 <= 50 {
		return u, exactMWP(n1, n2, u)
	}
	n := float64(n1 + n2)
	sigma := math.Sqrt(float64(n1*n2) / 12 * ((n + 1) - tieTerm/(n*(n-1))))
	if sigma == 0 {
		return u, 1
	}
	z := (math.Abs(u-mu) - 0.5) / sigma
	if z < 0 {
		z = 0
	}
	return u, math.Min(1, math.Erfc(z/math.Sqrt2))
}

// exactMWP is the exact two-sided p-value of U = u for samples of n1 and
// n2 without ties: twice the smaller tail of U's null distribution, each
// of the C(n1+n2, n1) orders equally likely (uDist counts them).
func exactMWP(n1, n2 int, u float64) float64 {
	dist := uDist(n1, n2)
	total := 0.0
	for _, c := range dist {
		total += c
	}
	k := int(math.Round(u))
	lo, hi := 0.0, 0.0
	for i, c := range dist {
		if i <= k {
			lo += c
		}
		if i >= k {
			hi += c
		}
	}
	return math.Min(1, 2*math.Min(lo, hi)/total)
}

// uDist returns the number of orders of n1 a's and n2 b's for each value
// of U (a's count of b's above it). Taking the largest value: if it is an
// a, that a is above every b and adds nothing, leaving (n1-1, n2); if it
// is a b, it is above every a and adds one to each a's count, n1 in all,
// leaving (n1, n2-1).
func uDist(n1, n2 int) []float64 {
	top := n1 * n2
	// prev[j] is the distribution for (i-1, j); cur[j] for (i, j).
	prev := make([][]float64, n2+1)
	for j := range prev {
		prev[j] = make([]float64, top+1)
		prev[j][0] = 1 // no a's: one order, U = 0
	}
	for i := 1; i <= n1; i++ {
		cur := make([][]float64, n2+1)
		for j := range cur {
			cur[j] = make([]float64, top+1)
			for k := range cur[j] {
				cur[j][k] = prev[j][k] // largest is an a
				if j > 0 && k >= i {
					cur[j][k] += cur[j-1][k-i] // largest is a b
				}
			}
		}
		prev = cur
	}
	return prev[n2]
}

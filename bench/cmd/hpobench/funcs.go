package main

import "math"

// testFunc is a benchmark objective to minimise over a box, with its known
// optimum. The Go definition is the only one: Optuna's side only suggests
// points and is told the values Go computes, so both systems search the
// identical function by construction.
type testFunc struct {
	name string
	// lo and hi bound each coordinate.
	lo, hi []float64
	// fopt is the known global minimum (NaN: unknown, taken as the best
	// value any run found).
	fopt float64
	// xopt is a minimiser (for the tests), nil when unknown.
	xopt []float64
	// threshold is the regret that counts as "reached" for trials-to-
	// threshold: absolute, or, with relative, a fraction of |fopt|.
	threshold float64
	relative  bool
	f         func(x []float64) float64
}

// dim is the number of coordinates.
func (t *testFunc) dim() int { return len(t.lo) }

func repeat(v float64, n int) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = v
	}
	return s
}

// branin is Branin-Hoo on [-5,10]×[0,15]; three global minima of
// 0.397887.
func branin(x []float64) float64 {
	const a, r, s = 1.0, 6.0, 10.0
	b := 5.1 / (4 * math.Pi * math.Pi)
	c := 5 / math.Pi
	t := 1 / (8 * math.Pi)
	x1, x2 := x[0], x[1]
	return a*math.Pow(x2-b*x1*x1+c*x1-r, 2) + s*(1-t)*math.Cos(x1) + s
}

var hartmannAlpha = [4]float64{1.0, 1.2, 3.0, 3.2}

var hartmann3A = [4][3]float64{{3, 10, 30}, {0.1, 10, 35}, {3, 10, 30}, {0.1, 10, 35}}
var hartmann3P = [4][3]float64{{3689, 1170, 2673}, {4699, 4387, 7470}, {1091, 8732, 5547}, {381, 5743, 8828}}

// hartmann3 is the 3-dimensional Hartmann function on [0,1]^3.
func hartmann3(x []float64) float64 {
	sum := 0.0
	for i := range 4 {
		in := 0.0
		for j := range 3 {
			d := x[j] - hartmann3P[i][j]*1e-4
			in += hartmann3A[i][j] * d * d
		}
		sum += hartmannAlpha[i] * math.Exp(-in)
	}
	return -sum
}

var hartmann6A = [4][6]float64{
	{10, 3, 17, 3.5, 1.7, 8},
	{0.05, 10, 17, 0.1, 8, 14},
	{3, 3.5, 1.7, 10, 17, 8},
	{17, 8, 0.05, 10, 0.1, 14},
}
var hartmann6P = [4][6]float64{
	{1312, 1696, 5569, 124, 8283, 5886},
	{2329, 4135, 8307, 3736, 1004, 9991},
	{2348, 1451, 3522, 2883, 3047, 6650},
	{4047, 8828, 8732, 5743, 1091, 381},
}

// hartmann6 is the 6-dimensional Hartmann function on [0,1]^6.
func hartmann6(x []float64) float64 {
	sum := 0.0
	for i := range 4 {
		in := 0.0
		for j := range 6 {
			d := x[j] - hartmann6P[i][j]*1e-4
			in += hartmann6A[i][j] * d * d
		}
		sum += hartmannAlpha[i] * math.Exp(-in)
	}
	return -sum
}

// goldsteinPrice is the Goldstein-Price function on [-2,2]^2 (minimum 3 at
// (0,-1)); its values span six orders of magnitude.
func goldsteinPrice(x []float64) float64 {
	x1, x2 := x[0], x[1]
	a := 1 + math.Pow(x1+x2+1, 2)*(19-14*x1+3*x1*x1-14*x2+6*x1*x2+3*x2*x2)
	b := 30 + math.Pow(2*x1-3*x2, 2)*(18-32*x1+12*x1*x1+48*x2-36*x1*x2+27*x2*x2)
	return a * b
}

// sixHumpCamel is the six-hump camel function on [-3,3]×[-2,2]; two global
// minima of -1.0316.
func sixHumpCamel(x []float64) float64 {
	x1, x2 := x[0], x[1]
	return (4-2.1*x1*x1+x1*x1*x1*x1/3)*x1*x1 + x1*x2 + (-4+4*x2*x2)*x2*x2
}

// styblinskiTang is the Styblinski-Tang function on [-5,5]^d; minimum
// -39.16617·d at every xi = -2.903534.
func styblinskiTang(x []float64) float64 {
	s := 0.0
	for _, v := range x {
		s += v*v*v*v - 16*v*v + 5*v
	}
	return s / 2
}

// styblinskiTangDim is the dimension benchmarked.
const styblinskiTangDim = 4

// testFuncs are the standard functions, in report order. A threshold is a
// regret that means "in the optimum's basin": 0.05 on the functions whose
// minima are of order 1, 1 on Goldstein-Price (minimum 3, values to 10^6),
// 2 on Styblinski-Tang (minimum -157, a basin about 0.5 deep per
// coordinate off).
func testFuncs() []*testFunc {
	return []*testFunc{
		{name: "Branin", lo: []float64{-5, 0}, hi: []float64{10, 15}, fopt: 0.39788735772973816,
			xopt: []float64{math.Pi, 2.275}, threshold: 0.05, f: branin},
		{name: "Hartmann-3", lo: repeat(0, 3), hi: repeat(1, 3), fopt: -3.86278214782076,
			xopt: []float64{0.114614, 0.555649, 0.852547}, threshold: 0.05, f: hartmann3},
		{name: "Hartmann-6", lo: repeat(0, 6), hi: repeat(1, 6), fopt: -3.32236801141551,
			xopt: []float64{0.20169, 0.150011, 0.476874, 0.275332, 0.311652, 0.6573}, threshold: 0.05, f: hartmann6},
		{name: "Goldstein-Price", lo: repeat(-2, 2), hi: repeat(2, 2), fopt: 3,
			xopt: []float64{0, -1}, threshold: 1, f: goldsteinPrice},
		{name: "Six-hump camel", lo: []float64{-3, -2}, hi: []float64{3, 2}, fopt: -1.0316284534898774,
			xopt: []float64{0.08984201368301331, -0.7126564032704135}, threshold: 0.05, f: sixHumpCamel},
		{name: "Styblinski-Tang-4", lo: repeat(-5, styblinskiTangDim), hi: repeat(5, styblinskiTangDim),
			fopt: -39.16616570377142 * styblinskiTangDim, xopt: repeat(-2.903534027771177, styblinskiTangDim),
			threshold: 2, f: styblinskiTang},
	}
}

package hpo

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"gonum.org/v1/gonum/floats"
)

func BenchmarkFit48x8(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	cat := make([]bool, 8)
	var X [][]float64
	var y []float64
	for range 48 {
		x := make([]float64, 8)
		s := 0.0
		for d := range x {
			x[d] = rng.Float64()
			s += (x[d] - 0.3) * (x[d] - 0.3)
		}
		X = append(X, x)
		y = append(y, s+0.1*rng.NormFloat64())
	}
	yy, _ := warp(y, zOrder(y))
	for b.Loop() {
		fitHyper(cat, X, yy, 2, rand.New(rand.NewPCG(3, 4)))
	}
}

func TestExpNeg(t *testing.T) {
	for r := 0.0; r < 720; r += 0.01237 {
		want := math.Exp(-r)
		got := expNeg(r)
		if math.Abs(got-want) > 1e-14*want+1e-300 {
			t.Fatalf("expNeg(%v) = %v, want %v", r, got, want)
		}
	}
}

var sink float64

func BenchmarkExpNeg(b *testing.B) {
	r := 0.0
	for b.Loop() {
		sink += expNeg(r)
		r += 0.001
	}
}

func BenchmarkMathExp(b *testing.B) {
	r := 0.0
	for b.Loop() {
		sink += math.Exp(-r)
		r += 0.001
	}
}

func TestCholInverse(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	n := 7
	A := make([]float64, n*n)
	B := make([]float64, n*n)
	for i := range n {
		for j := range n {
			B[i*n+j] = rng.NormFloat64()
		}
	}
	for i := range n {
		for j := range n {
			s := 0.0
			for k := range n {
				s += B[i*n+k] * B[j*n+k]
			}
			A[i*n+j] = s
			if i == j {
				A[i*n+j] += 1
			}
		}
	}
	orig := append([]float64(nil), A...)
	if !cholesky(A, n) {
		t.Fatal("not positive definite")
	}
	inv := make([]float64, n*n)
	cholInverse(A, n, inv, make([]float64, n*n))
	for i := range n {
		for j := range n {
			s := 0.0
			for k := range n {
				a, b := i, k
				if b > a {
					a, b = b, a
				}
				s += inv[a*n+b] * orig[k*n+j]
			}
			want := 0.0
			if i == j {
				want = 1
			}
			if math.Abs(s-want) > 1e-9 {
				t.Fatalf("(A⁻¹A)[%d][%d] = %v, want %v", i, j, s, want)
			}
		}
	}
	b := []float64{1, 2, 3, 4, 5, 6, 7}
	x := append([]float64(nil), b...)
	cholSolve(A, n, x)
	for i := range n {
		s := 0.0
		for k := range n {
			s += orig[i*n+k] * x[k]
		}
		if math.Abs(s-b[i]) > 1e-9 {
			t.Fatalf("(A·A⁻¹b)[%d] = %v, want %v", i, s, b[i])
		}
	}
}

// TestIncrementalCholesky: the factor grown one point at a time (add, on
// embedded points, as the model builds it and as pending points join it),
// and the predictions from it, equal a full refit of the kernel matrix to
// 1e-9, for numeric and categorical parameters alike.
func TestIncrementalCholesky(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(11, 12))
	cat := []bool{false, false, true, false}
	h := hyper{invL2: []float64{4, 1.5, 0.7, 9}, sf2: 1.3, sn2: 1e-4}
	g := newGP(cat, h)
	g.ncat = []int{0, 0, 3, 0}
	var X [][]float64
	var y []float64
	for i := range 40 {
		x := []float64{rng.Float64(), rng.Float64(), float64(rng.IntN(3)), rng.Float64()}
		if !g.add(x, rng.NormFloat64()) {
			t.Fatalf("point %d refused", i)
		}
		X, y = append(X, x), append(y, g.y[len(g.y)-1])
		if i == 24 {
			// As pend does: a clone grows on while the original stays.
			g.prepare()
			g = g.clone()
		}
	}
	if !g.inc {
		t.Fatal("points were not embedded as they joined")
	}
	g.prepare()
	n := len(X)
	K := make([]float64, n*n)
	for i := range n {
		for j := 0; j <= i; j++ {
			K[i*n+j] = g.kern(X[i], X[j])
		}
		K[i*n+i] += h.sn2 + jitter
	}
	if !cholesky(K, n) {
		t.Fatal("full refit: not positive definite")
	}
	for i := range n {
		for j := 0; j <= i; j++ {
			if d := math.Abs(g.L[i][j] - K[i*n+j]); d > 1e-9 {
				t.Fatalf("L[%d][%d] = %v incrementally, %v refitted (|Δ| %g)", i, j, g.L[i][j], K[i*n+j], d)
			}
		}
	}
	alpha := append([]float64(nil), y...)
	cholSolve(K, n, alpha)
	for i := range n {
		if d := math.Abs(g.alpha[i] - alpha[i]); d > 1e-9*max(1, math.Abs(alpha[i])) {
			t.Fatalf("alpha[%d] = %v incrementally, %v refitted", i, g.alpha[i], alpha[i])
		}
	}
	// The batched, embedded prediction equals the slow path's.
	q := []float64{0.3, 0.6, 1, 0.2}
	mu, sd := make([]float64, 1), make([]float64, 1)
	g.predictBatch([][]float64{q}, mu, sd)
	k := make([]float64, n)
	for i := range n {
		k[i] = g.kern(q, X[i])
	}
	wantMu := floats.Dot(k, alpha)
	cholSolveLower(K, n, k)
	wantSd := math.Sqrt(max(h.sf2-floats.Dot(k, k), 1e-12))
	if math.Abs(mu[0]-wantMu) > 1e-9 || math.Abs(sd[0]-wantSd) > 1e-9 {
		t.Fatalf("predict = %v ± %v, refit %v ± %v", mu[0], sd[0], wantMu, wantSd)
	}
}

// cholSolveLower overwrites b with L⁻¹b.
func cholSolveLower(L []float64, n int, b []float64) {
	for i := range n {
		b[i] = (b[i] - floats.Dot(L[i*n:i*n+i], b[:i])) / L[i*n+i]
	}
}

// TestWarpKeepsOrder: the output warping (half-rank above the median, log
// below) is strictly increasing in the objective, so it keeps every
// comparison and the argmin; infeasible trials take the worst value; the
// result is standardised.
func TestWarpKeepsOrder(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 9))
	for trial := range 200 {
		n := 3 + rng.IntN(60)
		z := make([]float64, n)
		for i := range z {
			switch r := rng.Float64(); {
			case r < 0.1:
				z[i] = math.NaN()
			case r < 0.2 && i > 0:
				z[i] = z[rng.IntN(i)] // ties
			default:
				z[i] = math.Exp(6 * rng.NormFloat64()) // heavy tail, six orders of magnitude
			}
		}
		order := zOrder(z)
		y, ok := warp(z, order)
		feas := 0
		for _, v := range z {
			if !math.IsNaN(v) {
				feas++
			}
		}
		if !ok {
			if feas >= 2 && slices.Min(slices.DeleteFunc(slices.Clone(z), math.IsNaN)) != slices.Max(slices.DeleteFunc(slices.Clone(z), math.IsNaN)) {
				t.Fatalf("case %d: warp refused varying values %v", trial, z)
			}
			continue
		}
		mean, worst := 0.0, math.Inf(-1)
		for _, v := range y {
			mean += v
			worst = max(worst, v)
		}
		if math.Abs(mean/float64(n)) > 1e-9 {
			t.Fatalf("case %d: mean %v, want 0", trial, mean/float64(n))
		}
		for i := range n {
			if math.IsNaN(z[i]) {
				if y[i] != worst {
					t.Fatalf("case %d: infeasible %d warped to %v, not the worst %v", trial, i, y[i], worst)
				}
				continue
			}
			for j := range n {
				if math.IsNaN(z[j]) {
					continue
				}
				if (z[i] < z[j]) != (y[i] < y[j]) || (z[i] == z[j]) != (y[i] == y[j]) {
					t.Fatalf("case %d: z[%d]=%v, z[%d]=%v warp to %v, %v: order not kept", trial, i, z[i], j, z[j], y[i], y[j])
				}
			}
		}
		if a := order[0]; y[a] != slices.Min(y) {
			t.Fatalf("case %d: argmin moved", trial)
		}
	}
}

// TestSubset: the GP's training subset holds the best third, the most
// recent third and evenly spread others, k in all, in increasing order,
// without repeats (checked against a direct construction).
func TestSubset(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(4, 4))
	for range 300 {
		n, k := 1+rng.IntN(300), 3+rng.IntN(70)
		z := make([]float64, n)
		for i := range z {
			z[i] = rng.NormFloat64()
		}
		order := zOrder(z)
		got := subset(order, k)
		var want []int
		if n <= k {
			for i := range n {
				want = append(want, i)
			}
		} else {
			take := make([]bool, n)
			c := 0
			for _, i := range order[:k/3] {
				take[i] = true
				c++
			}
			for i := n - 1; i >= 0 && c < 2*k/3; i-- {
				if !take[i] {
					take[i], c = true, c+1
				}
			}
			var rest []int
			for i := range n {
				if !take[i] {
					rest = append(rest, i)
				}
			}
			for j := range k - c {
				take[rest[j*len(rest)/(k-c)]] = true
			}
			for i := range n {
				if take[i] {
					want = append(want, i)
				}
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("subset(n=%d, k=%d) = %v, want %v", n, k, got, want)
		}
	}
}

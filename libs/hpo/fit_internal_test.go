package hpo

import (
	"math"
	"math/rand/v2"
	"testing"
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

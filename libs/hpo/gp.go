package hpo

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync"

	"gonum.org/v1/gonum/floats"
	"gonum.org/v1/gonum/optimize"
)

// Hyperparameter bounds and priors of the Gaussian process, in the log
// domain. Inputs live in [0,1] per parameter and outputs are standardised,
// so these are scale-free.
var (
	logLenLo, logLenHi = math.Log(0.01), math.Log(20.0)
	logSf2Lo, logSf2Hi = math.Log(0.05), math.Log(20.0)
	logSn2Lo, logSn2Hi = math.Log(1e-6), math.Log(0.5)
	logLenMu, logLenSd = math.Log(0.5), 1.2
	logSf2Mu, logSf2Sd = 0.0, 1.0
	logSn2Mu, logSn2Sd = math.Log(1e-4), 2.0
	jitter             = 1e-9
)

// hyper are a GP's hyperparameters: ARD inverse squared length scales (one
// per search parameter; a categorical one's distance is 0 or 1), signal and
// noise variances.
type hyper struct {
	invL2    []float64
	sf2, sn2 float64
}

func (h hyper) fromTheta(theta []float64) hyper {
	p := len(theta) - 2
	out := hyper{invL2: make([]float64, p)}
	for i := range p {
		l := clamp(theta[i], logLenLo, logLenHi)
		out.invL2[i] = math.Exp(-2 * l)
	}
	out.sf2 = math.Exp(clamp(theta[p], logSf2Lo, logSf2Hi))
	out.sn2 = math.Exp(clamp(theta[p+1], logSn2Lo, logSn2Hi))
	return out
}

func clamp(x, lo, hi float64) float64 { return min(hi, max(lo, x)) }

// dist2 is the squared distance of two point values of one parameter: the
// scaled difference for numeric ones, 0/1 for categorical ones, 0 when both
// are inactive and 1 when only one is.
func dist2(cat bool, a, b float64) float64 {
	an, bn := math.IsNaN(a), math.IsNaN(b)
	switch {
	case an && bn:
		return 0
	case an || bn:
		return 1
	case cat:
		if a == b {
			return 0
		}
		return 1
	}
	d := a - b
	return d * d
}

// matern52 is the Matérn 5/2 correlation at scaled squared distance r2.
func matern52(r2 float64) float64 {
	r := math.Sqrt(5 * r2)
	return (1 + r + r*r/3) * expNeg(r)
}

// expNeg is e^-r for r ≥ 0, to about 1e-15 relative error: the kernel's
// hot spot, several times faster than math.Exp. Range reduction by ln2/32
// (r = (32m+j)·ln2/32 + f, |f| ≤ ln2/64), a table of 2^(-j/32), a degree-6
// Taylor polynomial of e^-f (error below 1e-17) and the power 2^-m by bits.
func expNeg(r float64) float64 {
	if r > 700 {
		return 0
	}
	const (
		inv   = 46.16624130844682735 // 32/ln2
		ln2hi = 6.93147180369123816490e-01 / 32
		ln2lo = 1.90821492927058770002e-10 / 32
	)
	k := int64(r*inv + 0.5)
	kf := float64(k)
	f := (r - kf*ln2hi) - kf*ln2lo
	p := 1 - f*(1.0/6)
	p = 1 - f*(1.0/5)*p
	p = 1 - f*(1.0/4)*p
	p = 1 - f*(1.0/3)*p
	p = 1 - f*(1.0/2)*p
	p = 1 - f*p
	return p * exp2NegTab[k&31] * math.Float64frombits(uint64(1023-(k>>5))<<52)
}

// exp2NegTab[j] is 2^(-j/32).
var exp2NegTab = func() (t [32]float64) {
	for j := range t {
		t[j] = math.Exp2(-float64(j) / 32)
	}
	return t
}()

// gp is a Gaussian process conditioned on points X with standardised values
// y, kept as the rows of the Cholesky factor of K + sn2·I so that points can
// be appended in O(n²) (the pending trials' believed values).
type gp struct {
	cat   []bool
	h     hyper
	X     [][]float64
	y     []float64
	L     [][]float64 // row i has i+1 entries
	alpha []float64
	kbuf  []float64
	vbuf  []float64
	// ncat is the number of choices of each categorical parameter (0 for
	// numeric ones; nil: inferred from the points).
	ncat []int
	// Set by prepare: the fast path of predict (points embedded, see embed).
	// inc: the points are embedded as they are added (ncat set, every
	// point embeddable), so prepare need not embed them again.
	inc    bool
	simple bool
	dims   int
	scale  []float64
	xs     []float64
	xbuf   []float64
}

func newGP(cat []bool, h hyper) *gp { return &gp{cat: cat, h: h} }

func (g *gp) kern(a, b []float64) float64 {
	s := 0.0
	for p := range a {
		if d := dist2(g.cat[p], a[p], b[p]); d != 0 {
			s += d * g.h.invL2[p]
		}
	}
	return g.h.sf2 * matern52(s)
}

// add appends point x with value y (one row of the factor, O(n²): the
// factor of the first n points is reused, never refitted). ok is false
// when the point makes the matrix numerically singular, e.g. a duplicate,
// and it is then left out.
func (g *gp) add(x []float64, y float64) bool {
	n := len(g.X)
	row := make([]float64, n+1)
	emb := g.embedded(x)
	if emb != nil {
		g.kernEmb(emb, row[:n])
	} else {
		for i := range n {
			row[i] = g.kern(x, g.X[i])
		}
	}
	for i := range n {
		row[i] = (row[i] - floats.Dot(g.L[i][:i], row[:i])) / g.L[i][i]
	}
	d := g.h.sf2 + g.h.sn2 + jitter - floats.Dot(row[:n], row[:n])
	if !(d > 1e-12) {
		return false
	}
	row[n] = math.Sqrt(d)
	g.L = append(g.L, row)
	g.X = append(g.X, x)
	g.y = append(g.y, y)
	if g.inc {
		if emb != nil {
			g.xs = append(g.xs, emb...)
		} else {
			g.inc, g.xs = false, nil
		}
	}
	return true
}

// embedded is x embedded (see embed) when g keeps its points embedded as
// they are added (fixed category counts), else nil. The first call sets
// the embedding up.
func (g *gp) embedded(x []float64) []float64 {
	if g.ncat == nil {
		return nil
	}
	if g.scale == nil {
		g.setScale()
		g.inc, g.simple = len(g.X) == 0, true
	}
	if !g.inc {
		return nil
	}
	out := make([]float64, g.dims)
	if !g.embed(x, out) {
		return nil
	}
	return out
}

// kernEmb sets k to the kernel between the embedded point e and every
// point of g (whose embeddings are g.xs).
func (g *gp) kernEmb(e, k []float64) {
	E := g.dims
	for i := range k {
		row := g.xs[i*E : i*E+E]
		s := 0.0
		for p, a := range row {
			d := a - e[p]
			s += d * d
		}
		k[i] = g.h.sf2 * matern52(s)
	}
}

// solve computes alpha = K⁻¹y after points were added.
func (g *gp) solve() {
	n := len(g.X)
	z := make([]float64, n)
	for i := range n {
		z[i] = (g.y[i] - floats.Dot(g.L[i][:i], z[:i])) / g.L[i][i]
	}
	// Back substitution with Lᵀ, column-oriented over the rows of L.
	for i := n - 1; i >= 0; i-- {
		z[i] /= g.L[i][i]
		if zi := z[i]; zi != 0 {
			floats.AddScaled(z[:i], -zi, g.L[i][:i])
		}
	}
	g.alpha = z
	g.kbuf = make([]float64, n)
	g.vbuf = make([]float64, n)
}

// clone copies g so that appending to the copy leaves g as is.
func (g *gp) clone() *gp {
	c := &gp{cat: g.cat, h: g.h, ncat: g.ncat, inc: g.inc, simple: g.simple, dims: g.dims, scale: g.scale}
	c.X = append([][]float64(nil), g.X...)
	c.y = append([]float64(nil), g.y...)
	c.L = append([][]float64(nil), g.L...) // rows are never modified
	c.xs = g.xs[:len(g.xs):len(g.xs)]      // an append copies
	return c
}

// setScale sets the embedding's per-parameter scales and dimension from
// the hyperparameters (and category counts).
func (g *gp) setScale() {
	P := len(g.cat)
	g.dims = 0
	g.scale = make([]float64, P)
	for p := range P {
		if g.cat[p] {
			// One-hot over the choices plus "inactive": two distinct
			// one-hot vectors are √2 apart, hence the halved weight.
			g.scale[p] = math.Sqrt(g.h.invL2[p] / 2)
			g.dims += g.catN(p) + 1
		} else {
			g.scale[p] = math.Sqrt(g.h.invL2[p])
			g.dims++
		}
	}
}

// prepare readies g for predictions after points were added: alpha and
// every point embedded (see embed), so that the kernel's hot loop is a
// branch-free squared distance. Points embedded as they were added (inc)
// are not embedded again.
func (g *gp) prepare() {
	g.solve()
	if !g.inc {
		g.setScale()
		g.simple = true
		g.xs = make([]float64, len(g.X)*g.dims)
		for i, x := range g.X {
			if !g.embed(x, g.xs[i*g.dims:(i+1)*g.dims]) {
				g.simple = false
			}
		}
	}
	g.xbuf = make([]float64, g.dims)
}

// catN is the number of choices of categorical parameter p: from ncat
// when set, else one past the largest index among g's points.
func (g *gp) catN(p int) int {
	if p < len(g.ncat) && g.ncat[p] > 0 {
		return g.ncat[p]
	}
	n := 0
	for _, x := range g.X {
		if v := x[p]; !math.IsNaN(v) {
			n = max(n, int(v)+1)
		}
	}
	return n
}

// embed writes x into out (g.dims long) so that the squared Euclidean
// distance of two embedded points equals the kernel's scaled distance:
// numeric parameters scaled by their inverse length scale, categorical
// ones (active or not) one-hot. It returns false when no such embedding
// exists: an inactive numeric parameter (at distance 1 from every active
// value) or a category index out of range.
func (g *gp) embed(x, out []float64) bool {
	o := 0
	for p, v := range x {
		if !g.cat[p] {
			if math.IsNaN(v) {
				return false
			}
			out[o] = v * g.scale[p]
			o++
			continue
		}
		n := g.catN(p)
		seg := out[o : o+n+1]
		clear(seg)
		switch {
		case math.IsNaN(v):
			seg[n] = g.scale[p]
		case v >= 0 && int(v) < n && float64(int(v)) == v:
			seg[int(v)] = g.scale[p]
		default:
			return false
		}
		o += n + 1
	}
	return true
}

// kernVec sets k to the kernel between x and every point of g.
func (g *gp) kernVec(x, k []float64) {
	n := len(g.X)
	if g.simple && g.embed(x, g.xbuf) {
		g.kernEmb(g.xbuf, k[:n])
		return
	}
	for i := range n {
		k[i] = g.kern(x, g.X[i])
	}
}

// predict returns the posterior mean and standard deviation at x.
func (g *gp) predict(x []float64) (mu, sd float64) {
	n := len(g.X)
	k, v := g.kbuf[:n], g.vbuf[:n]
	g.kernVec(x, k)
	mu = floats.Dot(k, g.alpha)
	for i := range n {
		v[i] = (k[i] - floats.Dot(g.L[i][:i], v[:i])) / g.L[i][i]
	}
	vr := g.h.sf2 - floats.Dot(v, v)
	return mu, math.Sqrt(max(vr, 1e-12))
}

// predictBatch is predict for many points at once: one triangular solve
// with the points as columns, which runs at vector speed where predict's
// row-by-row solve is bound by call overhead.
func (g *gp) predictBatch(xs [][]float64, mu, sd []float64) {
	n, m := len(g.X), len(xs)
	B := getFloats(n * m)
	defer putFloats(B)
	for j, x := range xs {
		k := g.kbuf[:n]
		g.kernVec(x, k)
		mu[j] = floats.Dot(k, g.alpha)
		for i := range n {
			B[i*m+j] = k[i]
		}
	}
	for i := range n {
		bi := B[i*m : i*m+m]
		Li := g.L[i]
		for k := range i {
			if l := Li[k]; l != 0 {
				floats.AddScaled(bi, -l, B[k*m:k*m+m])
			}
		}
		floats.Scale(1/Li[i], bi)
	}
	vv := sd[:m]
	clear(vv)
	for i := range n {
		bi := B[i*m : i*m+m]
		for j, b := range bi {
			vv[j] += b * b
		}
	}
	for j := range m {
		sd[j] = math.Sqrt(max(g.h.sf2-vv[j], 1e-12))
	}
}

// floatPool recycles the large scratch slices of a suggestion (the decoded
// points, predictBatch's right-hand sides), so that a call allocates, and
// the garbage collector marks and sweeps, less.
var floatPool sync.Pool

// getFloats returns a slice of n float64s (not zeroed) from the pool.
func getFloats(n int) []float64 {
	if p, ok := floatPool.Get().(*[]float64); ok && cap(*p) >= n {
		return (*p)[:n]
	}
	return make([]float64, n)
}

// putFloats returns s to the pool; the caller no longer uses it.
func putFloats(s []float64) {
	floatPool.Put(&s)
}

// fitHyper maximises the log marginal likelihood (plus weak log-normal
// priors that keep small data sets sensible) over the hyperparameters, by
// L-BFGS from the likeliest of a fixed start and restarts more drawn from
// rng.
func fitHyper(cat []bool, X [][]float64, y []float64, restarts int, rng *rand.Rand) hyper {
	n, P := len(X), len(cat)
	// Per-parameter squared distances of every pair (i > j).
	np := n * (n - 1) / 2
	// One pooled slab holds every buffer below: each is fully written
	// before it is read, and none outlives the fit.
	slab := getFloats(np*P + 2*np + 3*n*n + n)
	defer putFloats(slab)
	carve := func(k int) []float64 {
		b := slab[:k:k]
		slab = slab[k:]
		return b
	}
	D := carve(np * P)
	q := 0
	for i := 1; i < n; i++ {
		for j := range i {
			for p := range P {
				D[q*P+p] = dist2(cat[p], X[i][p], X[j][p])
			}
			q++
		}
	}
	K := carve(n * n)
	G := carve(np)  // common factor of dk/dλ per pair
	Kf := carve(np) // kernel value per pair
	alpha := carve(n)
	inv := carve(n * n)
	scratch := carve(n * n)
	const big = 1e10
	f := func(theta, grad []float64) float64 {
		h := hyper{}.fromTheta(theta)
		q := 0
		for i := 1; i < n; i++ {
			for j := range i {
				s := 0.0
				d := D[q*P : q*P+P]
				for p, dd := range d {
					s += dd * h.invL2[p]
				}
				r := math.Sqrt(5 * s)
				e := expNeg(r)
				kf := h.sf2 * (1 + r + r*r/3) * e
				Kf[q] = kf
				G[q] = h.sf2 * (5.0 / 3.0) * (1 + r) * e
				K[i*n+j] = kf
				q++
			}
			K[i*n+i] = h.sf2 + h.sn2 + jitter
		}
		K[0] = h.sf2 + h.sn2 + jitter
		if !cholesky(K, n) {
			if grad != nil {
				for i := range grad {
					grad[i] = 0
				}
			}
			return big
		}
		copy(alpha, y)
		cholSolve(K, n, alpha)
		quad := floats.Dot(alpha, y)
		logdet := 0.0
		for i := range n {
			logdet += 2 * math.Log(K[i*n+i])
		}
		nll := 0.5*quad + 0.5*logdet + 0.5*float64(n)*math.Log(2*math.Pi)
		nll += prior(theta, grad)
		if grad == nil {
			return nll
		}
		cholInverse(K, n, inv, scratch)
		gs, gn := 0.0, 0.0
		for i := range n {
			w := alpha[i]*alpha[i] - inv[i*n+i]
			gs += w * h.sf2
			gn += w * h.sn2
		}
		gl := grad[:P]
		q = 0
		for i := 1; i < n; i++ {
			ai := alpha[i]
			Ki := inv[i*n : i*n+i]
			for j := range i {
				w := ai*alpha[j] - Ki[j]
				gs += 2 * w * Kf[q]
				c := w * G[q]
				if c != 0 {
					d := D[q*P : q*P+P]
					for p, dd := range d {
						gl[p] -= c * dd * h.invL2[p]
					}
				}
				q++
			}
		}
		grad[P] += -0.5 * gs
		grad[P+1] += -0.5 * gn
		return nll
	}
	starts := make([][]float64, 0, restarts+1)
	x0 := make([]float64, P+2)
	for p := range P {
		x0[p] = logLenMu
	}
	x0[P], x0[P+1] = logSf2Mu, math.Log(1e-3)
	starts = append(starts, x0)
	for range restarts {
		x := make([]float64, P+2)
		for p := range P {
			x[p] = clamp(logLenMu+logLenSd*rng.NormFloat64(), logLenLo, logLenHi)
		}
		x[P] = clamp(logSf2Mu+0.5*rng.NormFloat64(), logSf2Lo, logSf2Hi)
		x[P+1] = clamp(math.Log(1e-3)+rng.NormFloat64(), logSn2Lo, logSn2Hi)
		starts = append(starts, x)
	}
	// Pick the most likely start cheaply (no gradient), then run L-BFGS
	// once from there: one full optimisation is the expensive part.
	bestX, bestF := x0, f(x0, nil)
	for _, s := range starts[1:] {
		if fs := f(s, nil); fs < bestF {
			bestX, bestF = s, fs
		}
	}
	// L-BFGS asks for the value and the gradient at the same point in
	// separate calls; one evaluation computes both and keeps the gradient.
	var lastX, lastG []float64
	lastF := 0.0
	eval := func(x []float64) float64 {
		if lastX != nil && slices.Equal(x, lastX) {
			return lastF
		}
		g := make([]float64, len(x))
		lastF = f(x, g)
		lastX, lastG = slices.Clone(x), g
		return lastF
	}
	prob := optimize.Problem{
		Func: eval,
		Grad: func(grad, x []float64) {
			eval(x)
			copy(grad, lastG)
		},
	}
	res, err := optimize.Minimize(prob, bestX, &optimize.Settings{
		MajorIterations:   fitIters,
		FuncEvaluations:   fitIters,
		GradientThreshold: 1e-3,
	}, &optimize.LBFGS{Store: 8})
	if res != nil && (err == nil || res.X != nil) {
		if fx := f(res.X, nil); fx < bestF {
			bestX = res.X
		}
	}
	return hyper{}.fromTheta(bestX)
}

// cholesky factors the symmetric positive definite n×n matrix A (row-major,
// lower triangle read) in place into L with A = LLᵀ; false when A is not
// numerically positive definite. Small dense loops: at the sizes fitted
// here (n ≤ fitCap) a library call's overhead costs more than the flops.
func cholesky(A []float64, n int) bool {
	for j := range n {
		rj := A[j*n : j*n+j]
		d := A[j*n+j] - floats.Dot(rj, rj)
		if !(d > 0) {
			return false
		}
		ljj := math.Sqrt(d)
		A[j*n+j] = ljj
		for i := j + 1; i < n; i++ {
			A[i*n+j] = (A[i*n+j] - floats.Dot(A[i*n:i*n+j], rj)) / ljj
		}
	}
	return true
}

// cholSolve overwrites b with A⁻¹b given A's factor L (from cholesky).
func cholSolve(L []float64, n int, b []float64) {
	for i := range n {
		b[i] = (b[i] - floats.Dot(L[i*n:i*n+i], b[:i])) / L[i*n+i]
	}
	for i := n - 1; i >= 0; i-- {
		b[i] /= L[i*n+i]
		if bi := b[i]; bi != 0 {
			floats.AddScaled(b[:i], -bi, L[i*n:i*n+i])
		}
	}
}

// cholInverse writes A⁻¹ = L⁻ᵀL⁻¹ into the lower triangle of out, given A's
// factor L (from cholesky); L is left as is.
func cholInverse(L []float64, n int, out, M []float64) {
	// M = L⁻¹, kept by columns so that both loops below read contiguously;
	// M is scratch space of n·n (the caller's, reused across calls).
	clear(M) // M[j*n+i] = (L⁻¹)[i][j], column j contiguous
	for j := range n {
		col := M[j*n : j*n+n]
		col[j] = 1 / L[j*n+j]
		for i := j + 1; i < n; i++ {
			col[i] = -floats.Dot(L[i*n+j:i*n+i], col[j:i]) / L[i*n+i]
		}
	}
	// (L⁻ᵀL⁻¹)[i][j] = Σ_{k ≥ max(i,j)} M[k][i]·M[k][j] = column i · column j from k = i (i ≥ j).
	for i := range n {
		ci := M[i*n : i*n+n]
		for j := 0; j <= i; j++ {
			cj := M[j*n : j*n+n]
			out[i*n+j] = floats.Dot(ci[i:], cj[i:])
		}
	}
}

// prior adds the negative log prior of theta (and its gradient, when grad
// is not nil); out-of-bounds values are pulled back by a steep penalty.
func prior(theta, grad []float64) float64 {
	P := len(theta) - 2
	v := 0.0
	term := func(i int, mu, sd, lo, hi float64) {
		x := theta[i]
		z := (x - mu) / sd
		v += 0.5 * z * z
		g := z / sd
		if x < lo {
			v += 100 * (lo - x) * (lo - x)
			g -= 200 * (lo - x)
		} else if x > hi {
			v += 100 * (x - hi) * (x - hi)
			g += 200 * (x - hi)
		}
		if grad != nil {
			grad[i] += g
		}
	}
	for p := range P {
		term(p, logLenMu, logLenSd, logLenLo, logLenHi)
	}
	term(P, logSf2Mu, logSf2Sd, logSf2Lo, logSf2Hi)
	term(P+1, logSn2Mu, logSn2Sd, logSn2Lo, logSn2Hi)
	return v
}

// logEI is the log of the expected improvement below best of a normal
// N(mu, sd²), computed stably far into the tail so that candidates remain
// comparable where EI underflows.
func logEI(mu, sd, best float64) float64 {
	z := (best - mu) / sd
	return math.Log(sd) + logH(z)
}

// logH is log(φ(z) + zΦ(z)).
func logH(z float64) float64 {
	if z > -6 {
		h := math.Exp(-0.5*z*z)/math.Sqrt(2*math.Pi) + z*0.5*math.Erfc(-z/math.Sqrt2)
		if h > 0 {
			return math.Log(h)
		}
	}
	t := -z
	t2 := 1 / (t * t)
	// φ(z)(1 - tR(t)) with the asymptotic series of the Mills ratio R.
	s := t2 * (1 - 3*t2*(1-5*t2*(1-7*t2*(1-9*t2))))
	return -0.5*z*z - 0.5*math.Log(2*math.Pi) + math.Log(s)
}

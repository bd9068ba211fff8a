// Package toytrain is the built-in trainer's model: a small network trained
// for real, deterministically, on data it generates, with a loss surface
// that depends on its hyperparameters so that tuning is meaningful.
//
// The task is a fixed, generated classification problem: three interleaved
// noisy spirals in the plane (Classes classes, TrainSize training points,
// ValidationSize held-out points, the same for every run). The model is a
// multilayer perceptron with one hidden layer of HiddenUnits tanh units and a
// softmax output, trained by mini-batch SGD with momentum (Momentum) on the
// cross-entropy loss plus WeightDecay·½‖W‖² on the weight matrices (not the
// biases). The seed drives the initial weights and the order of the
// mini-batches only, so runs with different seeds solve the same problem.
//
// How the hyperparameters shape the validation loss after a fixed number of
// epochs (what a tuning study sees): too small a learning rate learns slowly,
// too large a one saturates the tanh units or diverges; a larger batch takes
// fewer, less noisy steps per epoch (so it wants a larger learning rate);
// a few hidden units cannot separate the spirals; a large weight decay
// underfits. An epoch takes about a millisecond at the defaults
// (BenchmarkEpoch); `go run ./libs/toytrain/internal/grid` prints a small
// grid of validation losses.
//
// Determinism: one goroutine, a fixed order of floating-point operations and
// a PCG random source, so the same hyperparameters and seed give the same
// numbers bit for bit (on one architecture: Go may fuse multiply-adds on some
// others). MarshalBinary captures the complete state, random source
// included: a trainer restored with UnmarshalBinary continues exactly as the
// uninterrupted one would. A trainer is not safe for concurrent use;
// different trainers are independent and may run in parallel.
package toytrain

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
)

// Sizes of the generated problem.
const (
	// Classes is the number of classes (spiral arms).
	Classes = 3
	// Inputs is the number of input features (points in the plane).
	Inputs = 2
	// TrainSize is the number of training points.
	TrainSize = 1200
	// ValidationSize is the number of held-out points ValidationLoss and
	// Accuracy are measured on.
	ValidationSize = 600
	// DataSeed seeds the generated points; it is fixed so that every run,
	// whatever its seed, learns the same problem.
	DataSeed = 15
	// Momentum is the SGD momentum coefficient (fixed, not tuned).
	Momentum = 0.9
	// MaxHiddenUnits bounds HiddenUnits, and with it the cost of an epoch.
	MaxHiddenUnits = 4096
	// DefaultHiddenUnits is used when Hyper.HiddenUnits is 0.
	DefaultHiddenUnits = 32
)

// Hyper are the hyperparameters (flags --learning_rate, --batch_size,
// --weight_decay, --hidden_units of `loom train`).
type Hyper struct {
	// LearningRate is the SGD step size, > 0.
	LearningRate float64
	// BatchSize is the number of points per SGD step, > 0; one larger than
	// TrainSize is taken as TrainSize (full-batch).
	BatchSize int
	// WeightDecay is the L2 penalty on the weight matrices, >= 0.
	WeightDecay float64
	// HiddenUnits is the width of the hidden layer, 0..MaxHiddenUnits
	// (0: DefaultHiddenUnits).
	HiddenUnits int
}

// DefaultHyper are reasonable settings, not the best ones: what `loom train`
// uses unless told otherwise.
func DefaultHyper() Hyper {
	return Hyper{LearningRate: 0.05, BatchSize: 32, WeightDecay: 1e-4, HiddenUnits: DefaultHiddenUnits}
}

// Validate reports the first bad hyperparameter, naming its flag.
func (h Hyper) Validate() error {
	switch {
	case !(h.LearningRate > 0) || math.IsInf(h.LearningRate, 0):
		return fmt.Errorf("learning_rate must be a positive finite number, got %v", h.LearningRate)
	case h.BatchSize <= 0:
		return fmt.Errorf("batch_size must be > 0, got %d", h.BatchSize)
	case !(h.WeightDecay >= 0) || math.IsInf(h.WeightDecay, 0):
		return fmt.Errorf("weight_decay must be a finite number >= 0, got %v", h.WeightDecay)
	case h.HiddenUnits < 0 || h.HiddenUnits > MaxHiddenUnits:
		return fmt.Errorf("hidden_units must be 1..%d (0: %d), got %d", MaxHiddenUnits, DefaultHiddenUnits, h.HiddenUnits)
	}
	return nil
}

// normalized fills the defaults Validate allows (HiddenUnits 0) and clamps
// the batch to the training set.
func (h Hyper) normalized() Hyper {
	if h.HiddenUnits == 0 {
		h.HiddenUnits = DefaultHiddenUnits
	}
	h.BatchSize = min(h.BatchSize, TrainSize)
	return h
}

// Trainer trains one model, an epoch at a time.
type Trainer struct {
	h     Hyper // normalized
	seed  int64
	epoch int
	src   *rand.PCG
	rng   *rand.Rand
	// Parameters: w1 is hidden×Inputs (row-major), w2 is Classes×hidden.
	w1, b1, w2, b2 []float64
	// Momentum buffers, same shapes.
	v1, c1, v2, c2 []float64
	// trainLoss is the mean cross-entropy over the last epoch's batches
	// (each measured before its step); NaN before the first epoch.
	trainLoss float64
	diverged  bool
	// Scratch space, not state.
	g1, gb1, g2, gb2 []float64
	hid, dh          []float64
	perm             []int
}

// New returns a trainer at epoch 0; a bad hyperparameter is an error naming it.
func New(h Hyper, seed int64) (*Trainer, error) {
	if err := h.Validate(); err != nil {
		return nil, err
	}
	t := &Trainer{h: h.normalized(), seed: seed, trainLoss: math.NaN()}
	t.src = rand.NewPCG(uint64(seed), uint64(seed)^0x5851f42d4c957f2d)
	t.rng = rand.New(t.src)
	t.alloc()
	// Random normal weights scaled by 1/sqrt(fan-in) (twice that for the
	// first layer: the inputs lie within ±1 and the spirals need sharp
	// features); zero biases.
	hu := t.h.HiddenUnits
	for i := range t.w1 {
		t.w1[i] = t.rng.NormFloat64() * 2 / math.Sqrt(Inputs)
	}
	for i := range t.w2 {
		t.w2[i] = t.rng.NormFloat64() / math.Sqrt(float64(hu))
	}
	return t, nil
}

func (t *Trainer) alloc() {
	hu := t.h.HiddenUnits
	mk := func(n int) []float64 { return make([]float64, n) }
	t.w1, t.b1, t.w2, t.b2 = mk(hu*Inputs), mk(hu), mk(Classes*hu), mk(Classes)
	t.v1, t.c1, t.v2, t.c2 = mk(hu*Inputs), mk(hu), mk(Classes*hu), mk(Classes)
	t.g1, t.gb1, t.g2, t.gb2 = mk(hu*Inputs), mk(hu), mk(Classes*hu), mk(Classes)
	t.hid, t.dh = mk(hu), mk(hu)
	t.perm = make([]int, TrainSize)
}

// Hyper returns the hyperparameters in use (HiddenUnits filled in, BatchSize
// at most TrainSize).
func (t *Trainer) Hyper() Hyper { return t.h }

// Seed returns the seed the trainer was made with.
func (t *Trainer) Seed() int64 { return t.seed }

// Epoch is the number of epochs trained.
func (t *Trainer) Epoch() int { return t.epoch }

// Diverged reports whether training produced a non-finite parameter or loss;
// from then on TrainEpoch only counts epochs and ValidationLoss is +Inf.
func (t *Trainer) Diverged() bool { return t.diverged }

// TrainLoss is the mean training cross-entropy over the last epoch's
// mini-batches (each measured before its update): NaN before the first
// epoch, +Inf once diverged.
func (t *Trainer) TrainLoss() float64 {
	if t.diverged {
		return math.Inf(1)
	}
	return t.trainLoss
}

// dataset is the generated problem, shared read-only by every trainer.
type dataset struct {
	trainX, valX []float64 // n×Inputs, row-major
	trainY, valY []int
}

var data = sync.OnceValue(func() *dataset {
	rng := rand.New(rand.NewPCG(DataSeed, DataSeed))
	gen := func(n int) ([]float64, []int) {
		x, y := make([]float64, 0, n*Inputs), make([]int, 0, n)
		for i := 0; i < n; i++ {
			k := i % Classes
			// A point along arm k: radius r in (0, 1], angle turning 1.25
			// times around as r grows, arms 120° apart, with noise that
			// makes the arms overlap a little (no model is perfect).
			r := (rng.Float64()*0.9 + 0.1)
			a := 2*math.Pi*float64(k)/Classes + 1.25*2*math.Pi*r + rng.NormFloat64()*0.25
			x = append(x, r*math.Cos(a), r*math.Sin(a))
			y = append(y, k)
		}
		return x, y
	}
	d := &dataset{}
	d.trainX, d.trainY = gen(TrainSize)
	d.valX, d.valY = gen(ValidationSize)
	return d
})

// Data returns copies of the generated problem: training points (TrainSize
// rows of Inputs values) and labels, and the validation points and labels.
func Data() (trainX [][]float64, trainY []int, valX [][]float64, valY []int) {
	d := data()
	rows := func(flat []float64) [][]float64 {
		out := make([][]float64, len(flat)/Inputs)
		for i := range out {
			out[i] = append([]float64(nil), flat[i*Inputs:(i+1)*Inputs]...)
		}
		return out
	}
	return rows(d.trainX), append([]int(nil), d.trainY...), rows(d.valX), append([]int(nil), d.valY...)
}

// forward computes the hidden activations into hid and the logits into out,
// and returns the cross-entropy for label y and writes the softmax's
// probabilities into out.
func forward(w1, b1, w2, b2 []float64, x []float64, y int, hid []float64, out *[Classes]float64) float64 {
	hu := len(b1)
	for j := 0; j < hu; j++ {
		s := b1[j]
		for i := 0; i < Inputs; i++ {
			s += w1[j*Inputs+i] * x[i]
		}
		hid[j] = math.Tanh(s)
	}
	m := math.Inf(-1)
	for k := 0; k < Classes; k++ {
		s := b2[k]
		row := w2[k*hu : (k+1)*hu]
		for j, h := range hid {
			s += row[j] * h
		}
		out[k] = s
		m = max(m, s)
	}
	// Softmax with the maximum subtracted (no overflow); the loss of one
	// point is capped at -log(1e-12) ≈ 27.6, so a saturated network has a
	// large but finite loss.
	var z float64
	for k := range out {
		out[k] = math.Exp(out[k] - m)
		z += out[k]
	}
	for k := range out {
		out[k] /= z
	}
	return -math.Log(max(out[y], 1e-12))
}

// TrainEpoch trains one epoch: the training points in an order drawn from
// the trainer's random source, in mini-batches of BatchSize (the last one
// smaller), one SGD-with-momentum step per batch.
func (t *Trainer) TrainEpoch() {
	t.epoch++
	if t.diverged {
		return
	}
	d := data()
	for i := range t.perm {
		t.perm[i] = i
	}
	t.rng.Shuffle(len(t.perm), func(i, j int) { t.perm[i], t.perm[j] = t.perm[j], t.perm[i] })
	hu, lr, wd := t.h.HiddenUnits, t.h.LearningRate, t.h.WeightDecay
	var p [Classes]float64
	var sum float64
	var batches int
	for start := 0; start < TrainSize; start += t.h.BatchSize {
		end := min(start+t.h.BatchSize, TrainSize)
		clear(t.g1)
		clear(t.gb1)
		clear(t.g2)
		clear(t.gb2)
		var bl float64
		for _, idx := range t.perm[start:end] {
			x := d.trainX[idx*Inputs : (idx+1)*Inputs]
			y := d.trainY[idx]
			bl += forward(t.w1, t.b1, t.w2, t.b2, x, y, t.hid, &p)
			// Backward: dL/dlogit = p - onehot(y).
			clear(t.dh)
			for k := 0; k < Classes; k++ {
				g := p[k]
				if k == y {
					g--
				}
				t.gb2[k] += g
				row, grow := t.w2[k*hu:(k+1)*hu], t.g2[k*hu:(k+1)*hu]
				for j, h := range t.hid {
					grow[j] += g * h
					t.dh[j] += g * row[j]
				}
			}
			for j, h := range t.hid {
				g := t.dh[j] * (1 - h*h)
				t.gb1[j] += g
				for i := 0; i < Inputs; i++ {
					t.g1[j*Inputs+i] += g * x[i]
				}
			}
		}
		n := float64(end - start)
		sum += bl / n
		batches++
		step := func(w, v, g []float64, decay float64) {
			for i := range w {
				v[i] = Momentum*v[i] + g[i]/n + decay*w[i]
				w[i] -= lr * v[i]
			}
		}
		step(t.w1, t.v1, t.g1, wd)
		step(t.b1, t.c1, t.gb1, 0)
		step(t.w2, t.v2, t.g2, wd)
		step(t.b2, t.c2, t.gb2, 0)
	}
	t.trainLoss = sum / float64(batches)
	if !finite(t.trainLoss) || !allFinite(t.w1, t.b1, t.w2, t.b2, t.v1, t.c1, t.v2, t.c2) {
		t.diverged = true
	}
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

func allFinite(vs ...[]float64) bool {
	for _, v := range vs {
		for _, x := range v {
			if !finite(x) {
				return false
			}
		}
	}
	return true
}

// evaluate returns the mean cross-entropy and the accuracy on the
// validation set.
func (t *Trainer) evaluate() (loss, acc float64) {
	d := data()
	var p [Classes]float64
	hid := make([]float64, t.h.HiddenUnits)
	correct := 0
	for i, y := range d.valY {
		loss += forward(t.w1, t.b1, t.w2, t.b2, d.valX[i*Inputs:(i+1)*Inputs], y, hid, &p)
		best := 0
		for k := 1; k < Classes; k++ {
			if p[k] > p[best] {
				best = k
			}
		}
		if best == y {
			correct++
		}
	}
	n := float64(len(d.valY))
	return loss / n, float64(correct) / n
}

// ValidationLoss is the mean cross-entropy on the held-out set now: +Inf
// (never NaN) once training diverged. A network that guesses uniformly
// scores ln 3 ≈ 1.0986.
func (t *Trainer) ValidationLoss() float64 {
	if t.diverged {
		return math.Inf(1)
	}
	l, _ := t.evaluate()
	if !finite(l) {
		return math.Inf(1)
	}
	return l
}

// Validation returns ValidationLoss and Accuracy together, for the cost of
// one pass over the held-out set.
func (t *Trainer) Validation() (loss, accuracy float64) {
	if t.diverged {
		return math.Inf(1), 0
	}
	l, a := t.evaluate()
	if !finite(l) {
		l = math.Inf(1)
	}
	return l, a
}

// Accuracy is the fraction of the held-out set classified correctly now, in
// [0, 1] (0 once training diverged).
func (t *Trainer) Accuracy() float64 {
	if t.diverged {
		return 0
	}
	_, a := t.evaluate()
	return a
}

// Model is a trained network, exported: JSON-friendly and enough to
// predict (Predict) without the trainer.
type Model struct {
	// Architecture says what the numbers are.
	Architecture string `json:"architecture"`
	Inputs       int    `json:"inputs"`
	HiddenUnits  int    `json:"hidden_units"`
	Classes      int    `json:"classes"`
	// W1 is HiddenUnits rows of Inputs weights; B1 the hidden biases.
	W1 [][]float64 `json:"w1"`
	B1 []float64   `json:"b1"`
	// W2 is Classes rows of HiddenUnits weights; B2 the output biases.
	W2 [][]float64 `json:"w2"`
	B2 []float64   `json:"b2"`
}

// Export returns a copy of the network's parameters.
func (t *Trainer) Export() Model {
	hu := t.h.HiddenUnits
	rows := func(flat []float64, n, width int) [][]float64 {
		out := make([][]float64, n)
		for i := range out {
			out[i] = append([]float64(nil), flat[i*width:(i+1)*width]...)
		}
		return out
	}
	return Model{
		Architecture: "softmax(W2 tanh(W1 x + b1) + b2)",
		Inputs:       Inputs, HiddenUnits: hu, Classes: Classes,
		W1: rows(t.w1, hu, Inputs), B1: append([]float64(nil), t.b1...),
		W2: rows(t.w2, Classes, hu), B2: append([]float64(nil), t.b2...),
	}
}

// Predict returns the class probabilities for one point x (Inputs values);
// it panics on a malformed model, as an index out of range would.
func (m Model) Predict(x []float64) []float64 {
	hu := m.HiddenUnits
	w1, w2 := make([]float64, 0, hu*Inputs), make([]float64, 0, Classes*hu)
	for _, r := range m.W1 {
		w1 = append(w1, r...)
	}
	for _, r := range m.W2 {
		w2 = append(w2, r...)
	}
	var p [Classes]float64
	forward(w1, m.B1, w2, m.B2, x, 0, make([]float64, hu), &p)
	return p[:]
}

// stateMagic starts MarshalBinary's output (format version 1).
const stateMagic = "toytrain/1\n"

// MarshalBinary returns the trainer's complete state: hyperparameters, seed,
// epoch, parameters, momentum buffers, last training loss and the random
// source. Floats are stored as their IEEE-754 bits, so nothing is rounded.
func (t *Trainer) MarshalBinary() ([]byte, error) {
	src, err := t.src.MarshalBinary()
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString(stateMagic)
	u := func(v uint64) { b.Write(binary.LittleEndian.AppendUint64(nil, v)) }
	f := func(v float64) { u(math.Float64bits(v)) }
	f(t.h.LearningRate)
	u(uint64(t.h.BatchSize))
	f(t.h.WeightDecay)
	u(uint64(t.h.HiddenUnits))
	u(uint64(t.seed))
	u(uint64(t.epoch))
	f(t.trainLoss)
	if t.diverged {
		u(1)
	} else {
		u(0)
	}
	u(uint64(len(src)))
	b.Write(src)
	for _, v := range [][]float64{t.w1, t.b1, t.w2, t.b2, t.v1, t.c1, t.v2, t.c2} {
		for _, x := range v {
			f(x)
		}
	}
	return b.Bytes(), nil
}

// UnmarshalBinary restores a state written by MarshalBinary into t (a zero
// Trainer will do), replacing whatever t held. A malformed state is an
// error and leaves t unchanged.
func (t *Trainer) UnmarshalBinary(data []byte) error {
	bad := func(why string) error { return fmt.Errorf("toytrain state: %s", why) }
	if !bytes.HasPrefix(data, []byte(stateMagic)) {
		return bad("not a toytrain state (or another version)")
	}
	r := data[len(stateMagic):]
	short := false
	u := func() uint64 {
		if len(r) < 8 {
			short = true
			return 0
		}
		v := binary.LittleEndian.Uint64(r)
		r = r[8:]
		return v
	}
	f := func() float64 { return math.Float64frombits(u()) }
	var h Hyper
	h.LearningRate = f()
	h.BatchSize = int(u())
	h.WeightDecay = f()
	h.HiddenUnits = int(u())
	seed := int64(u())
	epoch := int(u())
	trainLoss := f()
	diverged := u()
	srcLen := u()
	if short {
		return bad("truncated")
	}
	if err := h.Validate(); err != nil || h.HiddenUnits == 0 || h.BatchSize > TrainSize {
		return bad(fmt.Sprintf("bad hyperparameters %+v", h))
	}
	if epoch < 0 || diverged > 1 || srcLen > 64 || uint64(len(r)) < srcLen {
		return bad("corrupt header")
	}
	n := &Trainer{h: h, seed: seed, epoch: epoch, trainLoss: trainLoss, diverged: diverged == 1}
	n.src = &rand.PCG{}
	if err := n.src.UnmarshalBinary(r[:srcLen]); err != nil {
		return bad("random source: " + err.Error())
	}
	r = r[srcLen:]
	n.rng = rand.New(n.src)
	n.alloc()
	vs := [][]float64{n.w1, n.b1, n.w2, n.b2, n.v1, n.c1, n.v2, n.c2}
	want := 0
	for _, v := range vs {
		want += 8 * len(v)
	}
	if len(r) != want {
		return bad(fmt.Sprintf("%d bytes of parameters, want %d", len(r), want))
	}
	for _, v := range vs {
		for i := range v {
			v[i] = f()
		}
	}
	*t = *n
	return nil
}

// ErrDiverged is what callers may return when Diverged is true.
var ErrDiverged = errors.New("training diverged (non-finite loss): lower the learning rate")

package toytrain

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

func mustNew(t testing.TB, h Hyper, seed int64) *Trainer {
	t.Helper()
	tr, err := New(h, seed)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func state(t testing.TB, tr *Trainer) []byte {
	t.Helper()
	b, err := tr.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func train(t testing.TB, h Hyper, seed int64, epochs int) *Trainer {
	tr := mustNew(t, h, seed)
	for tr.Epoch() < epochs {
		tr.TrainEpoch()
	}
	return tr
}

func TestDeterministic(t *testing.T) {
	t.Parallel()
	h := DefaultHyper()
	a, b := train(t, h, 7, 5), train(t, h, 7, 5)
	if !bytes.Equal(state(t, a), state(t, b)) || a.ValidationLoss() != b.ValidationLoss() || a.Accuracy() != b.Accuracy() {
		t.Fatalf("two runs with the same seed differ: val %v / %v", a.ValidationLoss(), b.ValidationLoss())
	}
	c := train(t, h, 8, 5)
	if bytes.Equal(state(t, a), state(t, c)) || a.ValidationLoss() == c.ValidationLoss() {
		t.Fatal("seeds 7 and 8 give the same run")
	}
	if a.Epoch() != 5 || !(a.TrainLoss() > 0) {
		t.Fatalf("epoch %d, train loss %v", a.Epoch(), a.TrainLoss())
	}
}

// TestResumeEqualsUninterrupted: a trainer restored from a state continues
// bit for bit as the one that was never stopped, random source included.
func TestResumeEqualsUninterrupted(t *testing.T) {
	t.Parallel()
	h := Hyper{LearningRate: 0.1, BatchSize: 50, WeightDecay: 1e-3, HiddenUnits: 20}
	straight := train(t, h, 3, 9)

	first := train(t, h, 3, 4)
	var resumed Trainer
	if err := resumed.UnmarshalBinary(state(t, first)); err != nil {
		t.Fatal(err)
	}
	if resumed.Epoch() != 4 || resumed.Hyper() != first.Hyper() || resumed.Seed() != 3 {
		t.Fatalf("restored epoch %d hyper %+v seed %d", resumed.Epoch(), resumed.Hyper(), resumed.Seed())
	}
	for resumed.Epoch() < 9 {
		resumed.TrainEpoch()
	}
	if !bytes.Equal(state(t, &resumed), state(t, straight)) {
		t.Fatal("resumed state differs from the uninterrupted one")
	}
	if resumed.ValidationLoss() != straight.ValidationLoss() || resumed.TrainLoss() != straight.TrainLoss() {
		t.Fatalf("val %v / %v", resumed.ValidationLoss(), straight.ValidationLoss())
	}
}

func TestUnmarshalRejectsCorruptState(t *testing.T) {
	t.Parallel()
	good := state(t, train(t, DefaultHyper(), 1, 1))
	cases := map[string][]byte{
		"empty":     nil,
		"magic":     append([]byte("toytrain/9\n"), good[len(stateMagic):]...),
		"truncated": good[:len(good)-8],
		"header":    good[:len(stateMagic)+20],
		"longer":    append(append([]byte(nil), good...), 0),
	}
	for name, b := range cases {
		tr := train(t, DefaultHyper(), 2, 1)
		before := state(t, tr)
		if err := tr.UnmarshalBinary(b); err == nil || !strings.Contains(err.Error(), "toytrain state") {
			t.Errorf("%s: err = %v, want a toytrain state error", name, err)
		}
		if !bytes.Equal(state(t, tr), before) {
			t.Errorf("%s: a failed UnmarshalBinary changed the trainer", name)
		}
	}
}

func TestNewNamesBadHyperparameter(t *testing.T) {
	t.Parallel()
	cases := map[string]Hyper{
		"learning_rate": {LearningRate: 0, BatchSize: 1},
		"batch_size":    {LearningRate: 0.1, BatchSize: 0},
		"weight_decay":  {LearningRate: 0.1, BatchSize: 1, WeightDecay: math.NaN()},
		"hidden_units":  {LearningRate: 0.1, BatchSize: 1, HiddenUnits: MaxHiddenUnits + 1},
	}
	for want, h := range cases {
		if _, err := New(h, 1); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: err = %v, want one naming %s", h, err, want)
		}
	}
	// Zero hidden units mean the default, a huge batch the whole set.
	tr := mustNew(t, Hyper{LearningRate: 0.1, BatchSize: 1 << 20}, 1)
	if h := tr.Hyper(); h.HiddenUnits != DefaultHiddenUnits || h.BatchSize != TrainSize {
		t.Fatalf("normalized %+v", h)
	}
}

// valAfter is the validation loss after 20 epochs with seed 1.
func valAfter(t *testing.T, h Hyper) float64 {
	return train(t, h, 1, 20).ValidationLoss()
}

// TestLossSurface: the validation loss after a fixed budget has an interior
// optimum in the learning rate, and capacity and weight decay matter.
func TestLossSurface(t *testing.T) {
	t.Parallel()
	base := Hyper{LearningRate: 0.3, BatchSize: 32, WeightDecay: 1e-4, HiddenUnits: 32}
	lrs := []float64{0.001, 0.01, 0.3, 3}
	losses := make([]float64, len(lrs))
	best := 0
	for i, lr := range lrs {
		h := base
		h.LearningRate = lr
		losses[i] = valAfter(t, h)
		if losses[i] < losses[best] {
			best = i
		}
	}
	t.Logf("val loss by learning rate %v: %v", lrs, losses)
	if best == 0 || best == len(lrs)-1 {
		t.Fatalf("best learning rate %v is at the edge of %v (losses %v)", lrs[best], lrs, losses)
	}
	// Slow at the low end, bad at the high end: both well above the best.
	if !(losses[0] > losses[best]+0.3 && losses[len(lrs)-1] > losses[best]+0.3) {
		t.Fatalf("losses %v: the ends are not clearly worse than the best", losses)
	}
	if losses[best] > 0.35 {
		t.Fatalf("best val loss %v: the network does not learn the spirals (chance is ln 3 = 1.0986)", losses[best])
	}
	good := losses[best]
	for name, h := range map[string]Hyper{
		"2 hidden units":    {LearningRate: 0.3, BatchSize: 32, WeightDecay: 1e-4, HiddenUnits: 2},
		"weight decay 0.01": {LearningRate: 0.3, BatchSize: 32, WeightDecay: 0.01, HiddenUnits: 32},
		"full-batch":        {LearningRate: 0.3, BatchSize: TrainSize, WeightDecay: 1e-4, HiddenUnits: 32},
		"batch 8, lr 0.3":   {LearningRate: 0.3, BatchSize: 8, WeightDecay: 1e-4, HiddenUnits: 32},
	} {
		if v := valAfter(t, h); !(v > good+0.3) {
			t.Errorf("%s: val loss %v, want clearly worse than %v", name, v, good)
		}
	}
}

func TestDivergenceIsReported(t *testing.T) {
	t.Parallel()
	tr := mustNew(t, Hyper{LearningRate: math.MaxFloat64 / 4, BatchSize: 4, HiddenUnits: 8}, 1)
	for i := 0; i < 3; i++ {
		tr.TrainEpoch()
	}
	if !tr.Diverged() || !math.IsInf(tr.ValidationLoss(), 1) || !math.IsInf(tr.TrainLoss(), 1) || tr.Accuracy() != 0 || tr.Epoch() != 3 {
		t.Fatalf("diverged %v val %v train %v acc %v epoch %d", tr.Diverged(), tr.ValidationLoss(), tr.TrainLoss(), tr.Accuracy(), tr.Epoch())
	}
	var back Trainer
	if err := back.UnmarshalBinary(state(t, tr)); err != nil || !back.Diverged() {
		t.Fatalf("restored diverged state: %v, diverged %v", err, back.Diverged())
	}
	// A large but finite learning rate saturates the network: a finite,
	// bad loss, not a divergence.
	sat := train(t, Hyper{LearningRate: 50, BatchSize: 32, HiddenUnits: 8}, 1, 3)
	if v := sat.ValidationLoss(); sat.Diverged() || math.IsInf(v, 0) || math.IsNaN(v) || v < 1 {
		t.Fatalf("lr 50: diverged %v, val %v; want a finite loss above chance", sat.Diverged(), v)
	}
}

func TestExportPredicts(t *testing.T) {
	t.Parallel()
	tr := train(t, Hyper{LearningRate: 0.3, BatchSize: 32, HiddenUnits: 16}, 1, 10)
	m := tr.Export()
	_, _, valX, valY := Data()
	if len(valX) != ValidationSize || len(m.W1) != 16 || len(m.W2) != Classes {
		t.Fatalf("shapes: %d points, W1 %d rows, W2 %d rows", len(valX), len(m.W1), len(m.W2))
	}
	correct := 0
	for i, x := range valX {
		p := m.Predict(x)
		best := 0
		for k := range p {
			if p[k] > p[best] {
				best = k
			}
		}
		if best == valY[i] {
			correct++
		}
	}
	if got := float64(correct) / float64(len(valX)); got != tr.Accuracy() || got < 0.8 {
		t.Fatalf("exported model's accuracy %v, trainer's %v (want equal and >= 0.8)", got, tr.Accuracy())
	}
}

// BenchmarkEpoch measures one epoch at the default hyperparameters.
func BenchmarkEpoch(b *testing.B) {
	for _, hu := range []int{DefaultHiddenUnits, 128} {
		h := DefaultHyper()
		h.HiddenUnits = hu
		b.Run("hidden="+itoa(hu), func(b *testing.B) {
			tr := mustNew(b, h, 1)
			for b.Loop() {
				tr.TrainEpoch()
			}
		})
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var s []byte
	for ; n > 0; n /= 10 {
		s = append([]byte{byte('0' + n%10)}, s...)
	}
	return string(s)
}

// Package toytrain is the built-in trainer's model: a small network trained
// for real, deterministically, on data it generates, with a loss surface
// that depends on its hyperparameters so that tuning is meaningful.
//
// SEAM (issue 15): this file fixes the API; the first implementation is a
// closed-form learning curve, to be replaced by real training.
package toytrain

import (
	"errors"
	"math"
)

// Hyper are the hyperparameters (flags --learning_rate, --batch_size,
// --weight_decay, --hidden_units of `loom train`).
type Hyper struct {
	LearningRate float64
	BatchSize    int
	WeightDecay  float64
	HiddenUnits  int
}

// Trainer trains one model, an epoch at a time.
type Trainer struct {
	h     Hyper
	seed  int64
	epoch int
}

// New returns a trainer at epoch 0; a bad hyperparameter is an error naming it.
func New(h Hyper, seed int64) (*Trainer, error) {
	if h.LearningRate <= 0 || h.BatchSize <= 0 {
		return nil, errors.New("learning_rate and batch_size must be > 0")
	}
	return &Trainer{h: h, seed: seed}, nil
}

// Epoch is the number of epochs trained.
func (t *Trainer) Epoch() int { return t.epoch }

// TrainEpoch trains one epoch.
func (t *Trainer) TrainEpoch() { t.epoch++ }

// ValidationLoss is the loss on the held-out set now.
func (t *Trainer) ValidationLoss() float64 {
	opt := math.Pow(math.Log10(t.h.LearningRate)+2, 2) + math.Pow(math.Log2(float64(t.h.BatchSize))-6, 2)/10
	return 0.1 + opt + 2/float64(1+t.epoch)
}

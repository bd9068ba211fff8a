// Package trainer is a tiny but real trainer: linear regression on a seeded
// synthetic dataset, fitted by full-batch gradient descent on the mean squared
// error. It checkpoints, resumes from its latest checkpoint, and writes a
// model file, which is all a Loom job needs to show the training loop end to
// end (`loom train`, run by `loom demo` on every node of a cluster).
package trainer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// File names in the output directory.
const (
	// ModelFile is the final model, written when training ends.
	ModelFile = "model.json"
	// checkpointPrefix + zero-padded epoch + ".json" names a checkpoint.
	checkpointPrefix = "checkpoint-"
)

// Hyperparameters are the settings that define a training run; they are
// saved with every checkpoint and the model.
type Hyperparameters struct {
	LearningRate float64 `json:"learning_rate"`
	Epochs       int     `json:"epochs"`
	Seed         uint64  `json:"seed"`
	Samples      int     `json:"samples"`
	Features     int     `json:"features"`
}

// Config is one training run.
type Config struct {
	Hyperparameters
	// CheckpointEvery writes a checkpoint every that many epochs (0: only the
	// model at the end).
	CheckpointEvery int
	// LogEvery logs "epoch N loss X" every that many epochs, and always for
	// the first and last epoch (0: about ten lines per run).
	LogEvery int
	// OutDir receives the checkpoints and the model (rank 0 only).
	OutDir string
	// Rank is this process' rank among the job's nodes; only rank 0 writes
	// files and logs epochs, the others train silently and log a summary.
	Rank int
	// Log receives the progress lines (nil: discarded).
	Log io.Writer
}

// DefaultHyperparameters are the settings `loom train` uses unless told.
func DefaultHyperparameters() Hyperparameters {
	return Hyperparameters{LearningRate: 0.05, Epochs: 100, Seed: 42, Samples: 256, Features: 4}
}

// State is the model's parameters after some epochs: what a checkpoint holds.
type State struct {
	// Epoch is the number of epochs done.
	Epoch   int       `json:"epoch"`
	Weights []float64 `json:"weights"`
	Bias    float64   `json:"bias"`
	// Loss is the mean squared error after Epoch epochs.
	Loss            float64         `json:"loss"`
	Hyperparameters Hyperparameters `json:"hyperparameters"`
}

// Model is the file written at the end of training.
type Model struct {
	Kind            string          `json:"kind"`
	Weights         []float64       `json:"weights"`
	Bias            float64         `json:"bias"`
	FinalLoss       float64         `json:"final_loss"`
	Epochs          int             `json:"epochs"`
	Hyperparameters Hyperparameters `json:"hyperparameters"`
}

// Result says how a run went.
type Result struct {
	Model Model
	// InitialLoss is the loss before the first epoch this run did.
	InitialLoss float64
	// ResumedFrom is the checkpoint epoch training continued from (0: none).
	ResumedFrom int
}

// Validate reports the first bad setting, naming its flag.
func (c Config) Validate() error {
	switch {
	case !(c.LearningRate > 0) || math.IsInf(c.LearningRate, 0):
		return fmt.Errorf("--lr must be a positive number, got %v", c.LearningRate)
	case c.Epochs < 1:
		return fmt.Errorf("--epochs must be at least 1, got %d", c.Epochs)
	case c.Samples < 2:
		return fmt.Errorf("--samples must be at least 2, got %d", c.Samples)
	case c.Features < 1 || c.Features > 1000:
		return fmt.Errorf("--features must be 1..1000, got %d", c.Features)
	case c.CheckpointEvery < 0:
		return fmt.Errorf("--checkpoint-every must not be negative, got %d", c.CheckpointEvery)
	case c.Rank == 0 && c.OutDir == "":
		return errors.New("no output directory: pass --out DIR or set LOOM_MODEL_DIR")
	}
	return nil
}

// Dataset returns the synthetic dataset for seed: X has samples rows of
// features standard-normal values; y = X·w + b + noise with fixed true
// parameters drawn from the same seed.
func Dataset(h Hyperparameters) (x [][]float64, y []float64) {
	rng := rand.New(rand.NewPCG(h.Seed, h.Seed^0x9e3779b97f4a7c15))
	w := make([]float64, h.Features)
	for i := range w {
		w[i] = rng.Float64()*4 - 2
	}
	b := rng.Float64()*2 - 1
	x = make([][]float64, h.Samples)
	y = make([]float64, h.Samples)
	for i := range x {
		x[i] = make([]float64, h.Features)
		v := b + rng.NormFloat64()*0.1
		for j := range x[i] {
			x[i][j] = rng.NormFloat64()
			v += w[j] * x[i][j]
		}
		y[i] = v
	}
	return x, y
}

// loss is the mean squared error of (w, b) on the data.
func loss(x [][]float64, y []float64, w []float64, b float64) float64 {
	var sum float64
	for i := range x {
		e := predict(x[i], w, b) - y[i]
		sum += e * e
	}
	return sum / float64(len(x))
}

func predict(row, w []float64, b float64) float64 {
	p := b
	for j, v := range row {
		p += w[j] * v
	}
	return p
}

// step does one epoch of full-batch gradient descent in place.
func step(x [][]float64, y []float64, w []float64, b *float64, lr float64) {
	gw := make([]float64, len(w))
	var gb float64
	n := float64(len(x))
	for i := range x {
		e := predict(x[i], w, *b) - y[i]
		for j, v := range x[i] {
			gw[j] += 2 * e * v / n
		}
		gb += 2 * e / n
	}
	for j := range w {
		w[j] -= lr * gw[j]
	}
	*b -= lr * gb
}

// Train runs training to cfg.Epochs, resuming from the latest checkpoint in
// cfg.OutDir when there is one, and (rank 0) writes checkpoints and the model.
func Train(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	out := cfg.Log
	if out == nil {
		out = io.Discard
	}
	logEvery := cfg.LogEvery
	if logEvery <= 0 {
		logEvery = max(1, cfg.Epochs/10)
	}
	x, y := Dataset(cfg.Hyperparameters)
	st := State{Weights: make([]float64, cfg.Features), Hyperparameters: cfg.Hyperparameters}
	var res Result
	if cfg.OutDir != "" {
		ck, ok, err := LatestCheckpoint(cfg.OutDir)
		if err != nil {
			return Result{}, err
		}
		if ok {
			if err := compatible(ck.Hyperparameters, cfg.Hyperparameters); err != nil {
				return Result{}, fmt.Errorf("cannot resume from checkpoint at epoch %d in %s: %w", ck.Epoch, cfg.OutDir, err)
			}
			st = ck
			st.Hyperparameters = cfg.Hyperparameters
			res.ResumedFrom = ck.Epoch
			if cfg.Rank == 0 {
				fmt.Fprintf(out, "resuming from checkpoint at epoch %d (loss %.6f)\n", ck.Epoch, ck.Loss)
			}
		}
	}
	if cfg.Rank == 0 && cfg.OutDir != "" {
		// The model is its owner's (the job runs as them): the directories
		// made for it are 0700 and its files 0600 (writeFile's temporary
		// file's mode), so that no other user of the node reads it.
		if err := os.MkdirAll(cfg.OutDir, 0o700); err != nil {
			return Result{}, fmt.Errorf("output directory: %w", err)
		}
	}
	res.InitialLoss = loss(x, y, st.Weights, st.Bias)
	st.Loss = res.InitialLoss
	for st.Epoch < cfg.Epochs {
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("training stopped at epoch %d: %w", st.Epoch, err)
		}
		step(x, y, st.Weights, &st.Bias, cfg.LearningRate)
		st.Epoch++
		st.Loss = loss(x, y, st.Weights, st.Bias)
		if math.IsNaN(st.Loss) || math.IsInf(st.Loss, 0) {
			return res, fmt.Errorf("training diverged at epoch %d (loss %v): lower --lr", st.Epoch, st.Loss)
		}
		if cfg.Rank != 0 {
			continue
		}
		if st.Epoch == 1 || st.Epoch%logEvery == 0 || st.Epoch == cfg.Epochs {
			fmt.Fprintf(out, "epoch %d loss %.6f\n", st.Epoch, st.Loss)
		}
		if cfg.CheckpointEvery > 0 && st.Epoch%cfg.CheckpointEvery == 0 {
			if err := writeJSON(filepath.Join(cfg.OutDir, checkpointName(st.Epoch)), st); err != nil {
				return res, fmt.Errorf("checkpoint at epoch %d: %w", st.Epoch, err)
			}
		}
	}
	res.Model = Model{
		Kind:            "linear-regression",
		Weights:         st.Weights,
		Bias:            st.Bias,
		FinalLoss:       st.Loss,
		Epochs:          st.Epoch,
		Hyperparameters: cfg.Hyperparameters,
	}
	if cfg.Rank != 0 {
		fmt.Fprintf(out, "rank %d: trained %d epochs, loss %.6f (rank 0 writes the model)\n", cfg.Rank, st.Epoch, st.Loss)
		return res, nil
	}
	path := filepath.Join(cfg.OutDir, ModelFile)
	if err := writeJSON(path, res.Model); err != nil {
		return res, fmt.Errorf("write model: %w", err)
	}
	fmt.Fprintf(out, "model written to %s (final loss %.6f)\n", path, st.Loss)
	return res, nil
}

// compatible says whether a checkpoint made with saved can be continued with
// cur: the same data and model shape; learning rate and epochs may change.
func compatible(saved, cur Hyperparameters) error {
	if saved.Seed != cur.Seed || saved.Samples != cur.Samples || saved.Features != cur.Features {
		return fmt.Errorf("it was trained with seed %d, %d samples, %d features; this run has seed %d, %d samples, %d features",
			saved.Seed, saved.Samples, saved.Features, cur.Seed, cur.Samples, cur.Features)
	}
	return nil
}

func checkpointName(epoch int) string {
	return fmt.Sprintf("%s%06d.json", checkpointPrefix, epoch)
}

// LatestCheckpoint reads the checkpoint with the highest epoch in dir; ok is
// false when there is none (or dir does not exist).
func LatestCheckpoint(dir string) (st State, ok bool, err error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return State{}, false, nil
	}
	if err != nil {
		return State{}, false, fmt.Errorf("read checkpoints: %w", err)
	}
	type ck struct {
		epoch int
		name  string
	}
	var cks []ck
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasPrefix(name, checkpointPrefix) || !strings.HasSuffix(name, ".json") {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(name, checkpointPrefix), ".json"))
		if err != nil {
			continue
		}
		cks = append(cks, ck{n, name})
	}
	if len(cks) == 0 {
		return State{}, false, nil
	}
	sort.Slice(cks, func(i, j int) bool { return cks[i].epoch > cks[j].epoch })
	path := filepath.Join(dir, cks[0].name)
	b, err := os.ReadFile(path)
	if err != nil {
		return State{}, false, fmt.Errorf("read checkpoint: %w", err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return State{}, false, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	if len(st.Weights) != st.Hyperparameters.Features {
		return State{}, false, fmt.Errorf("checkpoint %s: %d weights for %d features", path, len(st.Weights), st.Hyperparameters.Features)
	}
	return st, true, nil
}

// writeJSON writes v to path atomically (temporary file, then rename), so a
// crash never leaves a torn checkpoint to resume from.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

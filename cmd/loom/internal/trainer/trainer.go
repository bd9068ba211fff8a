// Package trainer is `loom train`, Loom's built-in trainer: a tiny but real
// training program with everything a Loom or Vertex-style job expects of
// one. It trains one of two models on data it generates:
//
//   - ModelLinear: linear regression on a seeded synthetic dataset, fitted
//     by full-batch gradient descent on the mean squared error (what
//     `loom demo` runs on every node of a cluster);
//   - ModelMLP: libs/toytrain's classifier, a one-hidden-layer network
//     trained by mini-batch SGD on generated spirals, whose validation loss
//     depends on the learning rate, batch size, weight decay and hidden
//     units (--learning_rate, --batch_size, --weight_decay, --hidden_units,
//     as a Vertex tuning trial passes them): the model tuning studies tune.
//
// Either way it checkpoints (atomically, with a checksum, keeping the
// latest few) to the checkpoint directory (LOOM_CHECKPOINT_DIR, else
// AIP_CHECKPOINT_DIR), resumes exactly from the latest valid checkpoint (a
// resumed run writes the uninterrupted run's model byte for byte),
// checkpoints on SIGUSR1, reports progress to LOOM_PROGRESS_FILE, and at the
// end writes model.json and a MANIFEST (sha256sum format) to the model
// directory (LOOM_MODEL_DIR, else AIP_MODEL_DIR). The MLP also appends one
// cloudml-hypertune line per epoch (val_loss, accuracy) to
// CLOUD_ML_HP_METRIC_FILE. See docs/training.md, "The built-in trainer".
package trainer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/loom-ml/loom/libs/toytrain"
)

// File names in the output directory.
const (
	// ModelFile is the final model, written when training ends.
	ModelFile = "model.json"
	// ManifestFile lists the model's files, one line each: the SHA-256 of
	// the file's content in hex, two spaces, its name relative to the
	// model directory (sha256sum's format: `sha256sum -c MANIFEST` checks
	// it). It is written last, so its presence means the model is complete.
	ManifestFile = "MANIFEST"
	// checkpointPrefix + zero-padded epoch + ".json" names a checkpoint.
	checkpointPrefix = "checkpoint-"
	// tempPrefix starts the name of a file being written (then renamed into
	// place); one left by a killed run is removed when the next run starts.
	tempPrefix = ".tmp-"
)

// Environment variables the trainer reads (FromEnv): Loom's scheduler sets
// them for every run of a job.
const (
	// EnvCheckpointDir is where the job's checkpoints live, shared by all
	// its attempts.
	EnvCheckpointDir = "LOOM_CHECKPOINT_DIR"
	// EnvAIPCheckpointDir is Vertex AI's name for it, read when
	// EnvCheckpointDir is unset.
	EnvAIPCheckpointDir = "AIP_CHECKPOINT_DIR"
	// EnvProgressFile is the file the agent watches for progress.
	EnvProgressFile = "LOOM_PROGRESS_FILE"
	// EnvRestartCount is how many times the job was restarted before this run.
	EnvRestartCount = "LOOM_RESTART_COUNT"
	// EnvModelDir is where a job submitted with a model writes it.
	EnvModelDir = "LOOM_MODEL_DIR"
	// EnvAIPModelDir is Vertex AI's name for the model directory, which
	// the training service sets for a CustomJob; read when EnvModelDir is
	// unset.
	EnvAIPModelDir = "AIP_MODEL_DIR"
	// EnvMetricFile is the file hypertune metric lines are appended to
	// (cloudml-hypertune's variable; the agent sets it for every step).
	EnvMetricFile = "CLOUD_ML_HP_METRIC_FILE"
	// EnvTrialID is the tuning trial this run is ("trial" in each metric
	// line; "0" when unset, as cloudml-hypertune writes).
	EnvTrialID = "CLOUD_ML_TRIAL_ID"
	// EnvJobID is the job this run belongs to, the same for every run of
	// it (Slurm's variable; Loom sets it for every step).
	EnvJobID = "SLURM_JOB_ID"
)

// Models `loom train` can train (Hyperparameters.Model).
const (
	// ModelLinear is linear regression on a seeded synthetic dataset by
	// full-batch gradient descent (the demo's model); "" means it too.
	ModelLinear = "linear"
	// ModelMLP is libs/toytrain's classifier: a one-hidden-layer network
	// trained by mini-batch SGD on generated spirals, whose validation loss
	// depends on the learning rate, batch size, weight decay and hidden
	// units (the model a tuning study tunes).
	ModelMLP = "mlp"
)

// Hyperparameters are the settings that define a training run; they are
// saved with every checkpoint and the model. Samples and Features are the
// linear model's, BatchSize, WeightDecay and HiddenUnits the MLP's; the
// other model's are zero (and absent from the JSON).
type Hyperparameters struct {
	// Model is ModelLinear ("" too) or ModelMLP.
	Model        string  `json:"model,omitempty"`
	LearningRate float64 `json:"learning_rate"`
	Epochs       int     `json:"epochs"`
	// Seed seeds the linear model's dataset, or the MLP's initial weights
	// and batch order (its data are the same for every seed).
	Seed        uint64  `json:"seed"`
	Samples     int     `json:"samples,omitempty"`
	Features    int     `json:"features,omitempty"`
	BatchSize   int     `json:"batch_size,omitempty"`
	WeightDecay float64 `json:"weight_decay,omitempty"`
	HiddenUnits int     `json:"hidden_units,omitempty"`
}

// mlp says whether h trains the MLP.
func (h Hyperparameters) mlp() bool { return h.Model == ModelMLP }

// toy is h as libs/toytrain's hyperparameters.
func (h Hyperparameters) toy() toytrain.Hyper {
	return toytrain.Hyper{LearningRate: h.LearningRate, BatchSize: h.BatchSize, WeightDecay: h.WeightDecay, HiddenUnits: h.HiddenUnits}
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
	// OutDir receives the model, and the checkpoints unless CheckpointDir
	// is set (rank 0 only writes).
	OutDir string
	// CheckpointDir is where checkpoints are written and resumed from (""
	// means OutDir). Every rank resumes from it, so it must be shared.
	CheckpointDir string
	// ProgressFile, when set, receives this run's progress as JSON (see
	// Progress), rewritten atomically.
	ProgressFile string
	// ProgressEvery is the least time between two progress writes that are
	// not at a checkpoint (0: every epoch). Checkpoints, the start and the
	// end are always written.
	ProgressEvery time.Duration
	// RestartCount is how many times the job was restarted before this run
	// (LOOM_RESTART_COUNT); it is only logged.
	RestartCount int
	// StepTime makes every epoch last at least this long, as a real model's
	// step would (for demos and tests that need a run to take time).
	StepTime time.Duration
	// KeepCheckpoints, when above 0, keeps only that many checkpoints (the
	// latest by epoch): older ones are removed after each new one is
	// written (0: keep all).
	KeepCheckpoints int
	// MetricFile, when set, receives one hypertune line per epoch (rank 0,
	// MLP only): {"timestamp": <unix s>, "trial": "<TrialID>", "val_loss":
	// v, "accuracy": a, "global_step": "<epoch>"}, appended with one write
	// each. A resumed run reports again the epochs after its checkpoint,
	// with the same values.
	MetricFile string
	// TrialID is the "trial" of each metric line ("" is written as "0").
	TrialID string
	// JobID is the job this run belongs to (SLURM_JOB_ID): its checkpoints
	// record it, and a run resumes only from its own job's (or from ones
	// that record none); "" resumes from any.
	JobID string
	// TensorBoardDir, when set, receives an event file of the epochs'
	// scalars (rank 0, MLP only; tensorboard.go).
	TensorBoardDir string
	// CheckpointRequests, when not nil, asks for a checkpoint: one is
	// written at the next epoch boundary after each receive (rank 0), even
	// when CheckpointEvery is 0. RunProcess feeds it SIGUSR1.
	CheckpointRequests <-chan os.Signal
	// Rank is this process' rank among the job's nodes; only rank 0 writes
	// files and logs epochs, the others train silently and log a summary.
	Rank int
	// Log receives the progress lines (nil: discarded).
	Log io.Writer
}

// DefaultHyperparameters are the settings `loom train` uses unless told,
// for the linear model.
func DefaultHyperparameters() Hyperparameters {
	return Hyperparameters{LearningRate: 0.05, Epochs: 100, Seed: 42, Samples: 256, Features: 4}
}

// DefaultMLPHyperparameters are the settings `loom train --model mlp` uses
// unless told: libs/toytrain's defaults (reasonable, not the best).
func DefaultMLPHyperparameters() Hyperparameters {
	d := toytrain.DefaultHyper()
	return Hyperparameters{Model: ModelMLP, LearningRate: d.LearningRate, Epochs: 100, Seed: 42,
		BatchSize: d.BatchSize, WeightDecay: d.WeightDecay, HiddenUnits: d.HiddenUnits}
}

// State is the model's parameters after some epochs: what a checkpoint holds.
type State struct {
	// Epoch is the number of epochs done.
	Epoch int `json:"epoch"`
	// Weights and Bias are the linear model's parameters.
	Weights []float64 `json:"weights,omitempty"`
	Bias    float64   `json:"bias,omitempty"`
	// Loss is the training loss after Epoch epochs: the mean squared error
	// (linear), the mean cross-entropy over the epoch's batches (MLP).
	Loss            float64         `json:"loss"`
	Hyperparameters Hyperparameters `json:"hyperparameters"`
	// Trainer is the MLP's complete state (toytrain's MarshalBinary,
	// base64 in the JSON): parameters, momentum and random source.
	Trainer []byte `json:"trainer,omitempty"`
	// JobID is the job whose run wrote it (Config.JobID; "" when none).
	JobID string `json:"job_id,omitempty"`
	// Checksum is the SHA-256 (hex) of the checkpoint's JSON with Checksum
	// empty: a checkpoint whose content does not match it is corrupt and
	// skipped. Checkpoints written before it existed have none.
	Checksum string `json:"sha256,omitempty"`
}

// Progress is what the trainer writes to its progress file (Config.ProgressFile,
// LOOM_PROGRESS_FILE): the agent reads it to report the run's progress.
type Progress struct {
	// Step is the number of epochs done.
	Step int `json:"step"`
	// CheckpointStep is the epoch of the latest checkpoint (0: none).
	CheckpointStep int `json:"checkpoint_step"`
	// CheckpointTime is when that checkpoint was written (RFC 3339, UTC);
	// absent when there is none.
	CheckpointTime string `json:"checkpoint_time,omitempty"`
	// CheckpointSeconds is how long this run (not the ones it resumed from)
	// has spent saving checkpoints: building the state, writing and syncing
	// the file, pruning old ones. Goodput counts it as lost to
	// checkpointing. Absent before the run's first save.
	CheckpointSeconds float64 `json:"checkpoint_seconds,omitempty"`
}

// Model is the file written at the end of training by the linear model;
// the MLP writes an MLPModel, whose first fields are the same.
type Model struct {
	Kind            string          `json:"kind"`
	Weights         []float64       `json:"weights"`
	Bias            float64         `json:"bias"`
	FinalLoss       float64         `json:"final_loss"`
	Epochs          int             `json:"epochs"`
	Hyperparameters Hyperparameters `json:"hyperparameters"`
}

// MLPModel is the file written at the end of training by the MLP: its
// weights, hyperparameters and final metrics.
type MLPModel struct {
	// Kind is "mlp-classifier".
	Kind string `json:"kind"`
	// FinalLoss is the training loss of the last epoch.
	FinalLoss       float64         `json:"final_loss"`
	Epochs          int             `json:"epochs"`
	Hyperparameters Hyperparameters `json:"hyperparameters"`
	Metrics         Metrics         `json:"metrics"`
	// Network is the trained network (libs/toytrain's Model.Predict runs it).
	Network toytrain.Model `json:"network"`
}

// Metrics are the MLP's measurements after an epoch.
type Metrics struct {
	// ValLoss is the mean cross-entropy on the held-out set (the metric to
	// minimize); Accuracy the fraction of it classified correctly.
	ValLoss   float64 `json:"val_loss"`
	Accuracy  float64 `json:"accuracy"`
	TrainLoss float64 `json:"train_loss"`
}

// Result says how a run went.
type Result struct {
	// Model is the model file's content (linear), or its common fields
	// (MLP: then MLP has all of it).
	Model Model
	// MLP is the MLP's model file's content; nil for the linear model.
	MLP *MLPModel
	// InitialLoss is the loss before the first epoch this run did: the
	// training loss (linear), the validation loss (MLP).
	InitialLoss float64
	// ResumedFrom is the checkpoint epoch training continued from (0: none).
	ResumedFrom int
}

// Validate reports the first bad setting, naming its flag.
func (c Config) Validate() error {
	if c.mlp() {
		if err := c.toy().Validate(); err != nil {
			return fmt.Errorf("--%w", err) // toytrain names the flag without its dashes
		}
		if c.Samples != 0 || c.Features != 0 {
			return errors.New("--samples and --features are the linear model's, not --model mlp's")
		}
	} else {
		switch {
		case c.Model != "" && c.Model != ModelLinear:
			return fmt.Errorf("--model must be %s or %s, got %q", ModelLinear, ModelMLP, c.Model)
		case !(c.LearningRate > 0) || math.IsInf(c.LearningRate, 0):
			return fmt.Errorf("--lr must be a positive number, got %v", c.LearningRate)
		case c.Samples < 2:
			return fmt.Errorf("--samples must be at least 2, got %d", c.Samples)
		case c.Features < 1 || c.Features > 1000:
			return fmt.Errorf("--features must be 1..1000, got %d", c.Features)
		case c.BatchSize != 0 || c.WeightDecay != 0 || c.HiddenUnits != 0:
			return errors.New("--batch_size, --weight_decay and --hidden_units are --model mlp's, not the linear model's")
		}
	}
	switch {
	case c.Epochs < 1:
		return fmt.Errorf("--epochs must be at least 1, got %d", c.Epochs)
	case c.KeepCheckpoints < 0:
		return fmt.Errorf("--keep-checkpoints must not be negative, got %d", c.KeepCheckpoints)
	case c.CheckpointEvery < 0:
		return fmt.Errorf("--checkpoint-every must not be negative, got %d", c.CheckpointEvery)
	case c.Rank == 0 && c.OutDir == "":
		return errors.New("no output directory: pass --out DIR, set LOOM_MODEL_DIR, or submit the job with --model NAME (Loom then sets LOOM_MODEL_DIR)")
	case c.StepTime < 0:
		return fmt.Errorf("--step-time must not be negative, got %v", c.StepTime)
	}
	return nil
}

// FromEnv fills the settings Loom passes in the environment and that are
// not set yet: CheckpointDir from LOOM_CHECKPOINT_DIR, else
// AIP_CHECKPOINT_DIR; OutDir from LOOM_MODEL_DIR, else AIP_MODEL_DIR;
// ProgressFile from LOOM_PROGRESS_FILE; MetricFile from
// CLOUD_ML_HP_METRIC_FILE; TrialID from CLOUD_ML_TRIAL_ID; RestartCount
// from LOOM_RESTART_COUNT. A directory given as a file:// URI is taken as
// its path.
func (c *Config) FromEnv(getenv func(string) string) error {
	first := func(cur *string, names ...string) {
		for _, n := range names {
			if *cur == "" {
				*cur = strings.TrimPrefix(getenv(n), "file://")
			}
		}
	}
	first(&c.CheckpointDir, EnvCheckpointDir, EnvAIPCheckpointDir)
	first(&c.OutDir, EnvModelDir, EnvAIPModelDir)
	first(&c.ProgressFile, EnvProgressFile)
	first(&c.MetricFile, EnvMetricFile)
	first(&c.TensorBoardDir, EnvTensorBoardDir, EnvAIPTensorBoardDir)
	if c.TrialID == "" {
		c.TrialID = getenv(EnvTrialID)
	}
	if c.JobID == "" {
		c.JobID = getenv(EnvJobID)
	}
	if v := getenv(EnvRestartCount); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fmt.Errorf("%s=%q is not a restart count", EnvRestartCount, v)
		}
		c.RestartCount = n
	}
	return nil
}

// checkpointDir is where checkpoints go: CheckpointDir, else OutDir.
func (c Config) checkpointDir() string {
	if c.CheckpointDir != "" {
		return c.CheckpointDir
	}
	return c.OutDir
}

// RunProcess is the body of `loom train` as a process: it fills cfg from
// the environment (FromEnv), turns SIGUSR1 (a job's default --signal,
// which Loom's checkpoint-aware drain sends) and SIGUSR2 into checkpoint
// requests, and trains.
func RunProcess(ctx context.Context, cfg Config, getenv func(string) string) (Result, error) {
	if err := cfg.FromEnv(getenv); err != nil {
		return Result{}, err
	}
	// A checkpoint on SIGUSR1 or SIGUSR2, the signals jobs name in
	// --signal for "save your state" (the scheduler's default is USR1;
	// docs/health.md's example USR2@120).
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(sig)
	cfg.CheckpointRequests = sig
	return Train(ctx, cfg)
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

// learner is one model being trained: the part of Train that differs
// between the linear model and the MLP.
type learner interface {
	// restore continues from a checkpoint (already checked compatible).
	restore(st State) error
	// lossNow is the loss before the next epoch (Result.InitialLoss).
	lossNow() float64
	// epoch trains one epoch; an error means training diverged.
	epoch() error
	// epochs is the number of epochs done; loss the training loss.
	epochs() int
	loss() float64
	// logLine is the epoch line logged after an epoch.
	logLine() string
	// metrics are the hypertune values after an epoch (ok false: none).
	metrics() (m Metrics, ok bool)
	// state is what a checkpoint holds now.
	state() (State, error)
	// result fills the result and returns the model file's content.
	result(res *Result) any
}

// linear is the linear-regression learner.
type linear struct {
	x  [][]float64
	y  []float64
	h  Hyperparameters
	st State
}

func newLinear(h Hyperparameters) *linear {
	x, y := Dataset(h)
	return &linear{x: x, y: y, h: h, st: State{Weights: make([]float64, h.Features), Hyperparameters: h}}
}

func (l *linear) restore(st State) error {
	l.st = st
	l.st.Hyperparameters = l.h
	return nil
}

func (l *linear) lossNow() float64 {
	l.st.Loss = loss(l.x, l.y, l.st.Weights, l.st.Bias)
	return l.st.Loss
}

func (l *linear) epoch() error {
	step(l.x, l.y, l.st.Weights, &l.st.Bias, l.h.LearningRate)
	l.st.Epoch++
	l.st.Loss = loss(l.x, l.y, l.st.Weights, l.st.Bias)
	if math.IsNaN(l.st.Loss) || math.IsInf(l.st.Loss, 0) {
		return fmt.Errorf("training diverged at epoch %d (loss %v): lower --lr", l.st.Epoch, l.st.Loss)
	}
	return nil
}

func (l *linear) epochs() int              { return l.st.Epoch }
func (l *linear) loss() float64            { return l.st.Loss }
func (l *linear) logLine() string          { return fmt.Sprintf("epoch %d loss %.6f", l.st.Epoch, l.st.Loss) }
func (l *linear) metrics() (Metrics, bool) { return Metrics{}, false }
func (l *linear) state() (State, error)    { return l.st, nil }
func (l *linear) result(res *Result) any {
	res.Model = Model{
		Kind:            "linear-regression",
		Weights:         l.st.Weights,
		Bias:            l.st.Bias,
		FinalLoss:       l.st.Loss,
		Epochs:          l.st.Epoch,
		Hyperparameters: l.h,
	}
	return res.Model
}

// mlp is libs/toytrain's learner.
type mlp struct {
	t *toytrain.Trainer
	h Hyperparameters
	m Metrics // after the last epoch
}

func newMLP(h Hyperparameters) (*mlp, error) {
	t, err := toytrain.New(h.toy(), int64(h.Seed))
	if err != nil {
		return nil, fmt.Errorf("--%w", err)
	}
	return &mlp{t: t, h: h}, nil
}

func (m *mlp) restore(st State) error {
	var t toytrain.Trainer
	if err := t.UnmarshalBinary(st.Trainer); err != nil {
		return err
	}
	m.t = &t
	m.m.TrainLoss = t.TrainLoss()
	m.m.ValLoss, m.m.Accuracy = t.Validation()
	return nil
}

func (m *mlp) lossNow() float64 { v, _ := m.t.Validation(); return v }

func (m *mlp) epoch() error {
	m.t.TrainEpoch()
	if m.t.Diverged() {
		return fmt.Errorf("training diverged at epoch %d (non-finite loss): lower --learning_rate", m.t.Epoch())
	}
	m.m.TrainLoss = m.t.TrainLoss()
	m.m.ValLoss, m.m.Accuracy = m.t.Validation()
	return nil
}

func (m *mlp) epochs() int   { return m.t.Epoch() }
func (m *mlp) loss() float64 { return m.t.TrainLoss() }
func (m *mlp) logLine() string {
	return fmt.Sprintf("epoch %d loss %.6f val_loss %.6f accuracy %.4f", m.t.Epoch(), m.m.TrainLoss, m.m.ValLoss, m.m.Accuracy)
}
func (m *mlp) metrics() (Metrics, bool) { return m.m, true }

func (m *mlp) state() (State, error) {
	b, err := m.t.MarshalBinary()
	if err != nil {
		return State{}, err
	}
	return State{Epoch: m.t.Epoch(), Loss: m.t.TrainLoss(), Hyperparameters: m.h, Trainer: b}, nil
}

func (m *mlp) result(res *Result) any {
	res.MLP = &MLPModel{
		Kind:            "mlp-classifier",
		FinalLoss:       m.m.TrainLoss,
		Epochs:          m.t.Epoch(),
		Hyperparameters: m.h,
		Metrics:         m.m,
		Network:         m.t.Export(),
	}
	res.Model = Model{Kind: res.MLP.Kind, FinalLoss: res.MLP.FinalLoss, Epochs: res.MLP.Epochs, Hyperparameters: m.h}
	return res.MLP
}

// Train runs training to cfg.Epochs, resuming from the latest valid
// checkpoint in the checkpoint directory when there is one, and (rank 0)
// writes checkpoints, hypertune metric lines (MLP), and at the end the
// model and its MANIFEST. Resuming is exact: a run that resumes writes the
// same model file, byte for byte, and logs the same losses at each epoch,
// as one that was never interrupted.
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
	ckDir := cfg.checkpointDir()
	var l learner
	if cfg.mlp() {
		m, err := newMLP(cfg.Hyperparameters)
		if err != nil {
			return Result{}, err
		}
		l = m
	} else {
		l = newLinear(cfg.Hyperparameters)
	}
	var res Result
	var prog Progress
	var checkpointing time.Duration // this run's saves, for goodput
	if ckDir != "" {
		if cfg.Rank == 0 && cfg.JobID != "" {
			moved, err := setAsideOthers(ckDir, cfg.JobID)
			if err != nil {
				return Result{}, err
			}
			for job, to := range moved {
				fmt.Fprintf(out, "set job %s's checkpoints aside to %s: they are not this job's (%s)\n", job, to, cfg.JobID)
			}
		}
		ck, err := latestCheckpoint(ckDir, cfg.JobID)
		if err != nil {
			return Result{}, err
		}
		if cfg.Rank == 0 {
			for _, s := range ck.skipped {
				fmt.Fprintf(out, "skipping checkpoint %s\n", s)
			}
		}
		if ck.ok {
			if err := compatible(ck.st.Hyperparameters, cfg.Hyperparameters); err != nil {
				return Result{}, fmt.Errorf("cannot resume from checkpoint at epoch %d in %s: %w; if it is another run's, %s", ck.st.Epoch, ckDir, err, ownDirHint)
			}
			if err := l.restore(ck.st); err != nil {
				return Result{}, fmt.Errorf("cannot resume from checkpoint at epoch %d in %s: %w", ck.st.Epoch, ckDir, err)
			}
			res.ResumedFrom = ck.st.Epoch
			prog = Progress{Step: ck.st.Epoch, CheckpointStep: ck.st.Epoch, CheckpointTime: rfc3339(ck.written)}
			if cfg.Rank == 0 {
				restart := ""
				if cfg.RestartCount > 0 {
					restart = fmt.Sprintf(", restart %d", cfg.RestartCount)
				}
				fmt.Fprintf(out, "resuming from checkpoint at epoch %d (loss %.6f%s)\n", ck.st.Epoch, ck.st.Loss, restart)
			}
		} else if cfg.Rank == 0 && cfg.RestartCount > 0 {
			fmt.Fprintf(out, "restart %d: no checkpoint in %s, starting from epoch 0\n", cfg.RestartCount, ckDir)
		}
	}
	var metrics *metricWriter
	var tb *tbWriter
	if cfg.Rank == 0 {
		// The model is its owner's (the job runs as them): the directories
		// made for it are 0700 and its files 0600 (writeFile's temporary
		// file's mode), so that no other user of the node reads it.
		for _, dir := range []string{cfg.OutDir, ckDir} {
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return Result{}, fmt.Errorf("output directory: %w", err)
			}
			removeTemps(dir)
		}
		if cfg.MetricFile != "" && cfg.mlp() {
			var err error
			if metrics, err = openMetrics(cfg.MetricFile, cfg.TrialID); err != nil {
				return Result{}, err
			}
			defer metrics.close()
		}
		if cfg.TensorBoardDir != "" && cfg.mlp() {
			var err error
			if tb, err = openTensorBoard(cfg.TensorBoardDir); err != nil {
				return Result{}, err
			}
			defer tb.close()
		}
	}
	progress := progressWriter{path: cfg.ProgressFile, every: cfg.ProgressEvery}
	if err := progress.write(prog, true); err != nil {
		return res, err
	}
	res.InitialLoss = l.lossNow()
	// save writes the checkpoint of epoch and records it in the progress;
	// who says so in the log is the caller's prefix ("" or "rank N: ").
	save := func(epoch int, requested bool, who string) error {
		saveStart := time.Now()
		st, err := l.state()
		if err == nil {
			st.JobID = cfg.JobID
			err = writeCheckpoint(filepath.Join(ckDir, checkpointName(epoch)), st)
		}
		if err != nil {
			return fmt.Errorf("checkpoint at epoch %d: %w", epoch, err)
		}
		if requested {
			fmt.Fprintf(out, "%scheckpoint at epoch %d written (requested by signal)\n", who, epoch)
		}
		prog.CheckpointStep, prog.CheckpointTime = epoch, rfc3339(time.Now())
		if cfg.Rank == 0 {
			if err := pruneCheckpoints(ckDir, cfg.KeepCheckpoints, epoch); err != nil {
				fmt.Fprintf(out, "could not remove old checkpoints: %v\n", err)
			}
		}
		checkpointing += time.Since(saveStart)
		prog.CheckpointSeconds = checkpointing.Seconds()
		return nil
	}
	var pace *time.Timer
	for l.epochs() < cfg.Epochs {
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("training stopped at epoch %d: %w", l.epochs(), err)
		}
		if cfg.StepTime > 0 {
			pace = time.NewTimer(cfg.StepTime)
		}
		if err := l.epoch(); err != nil {
			return res, err
		}
		epoch := l.epochs()
		if pace != nil {
			select {
			case <-pace.C:
			case <-ctx.Done():
				pace.Stop()
				return res, fmt.Errorf("training stopped at epoch %d: %w", epoch, ctx.Err())
			}
		}
		requested := false
		select {
		case <-cfg.CheckpointRequests: // a nil channel never fires
			requested = true
		default:
		}
		prog.Step = epoch
		if cfg.Rank != 0 {
			// Only rank 0 writes the periodic checkpoints; on a signal every
			// rank does (each holds the same state, a data-parallel
			// replica), so that a checkpoint on failure is written whichever
			// node survives. Pruning stays rank 0's.
			if requested && ckDir != "" {
				if err := save(epoch, true, fmt.Sprintf("rank %d: ", cfg.Rank)); err != nil {
					return res, err
				}
			}
			if err := progress.write(prog, requested); err != nil {
				return res, err
			}
			continue
		}
		if epoch == 1 || epoch%logEvery == 0 || epoch == cfg.Epochs {
			fmt.Fprintln(out, l.logLine())
		}
		if m, ok := l.metrics(); ok && metrics != nil {
			if err := metrics.report(epoch, m); err != nil {
				return res, err
			}
		}
		if m, ok := l.metrics(); ok && tb != nil {
			if err := tb.report(epoch, m); err != nil {
				return res, err
			}
		}
		scheduled := cfg.CheckpointEvery > 0 && epoch%cfg.CheckpointEvery == 0
		if scheduled || requested {
			if err := save(epoch, requested, ""); err != nil {
				return res, err
			}
		}
		if err := progress.write(prog, scheduled || requested); err != nil {
			return res, err
		}
	}
	model := l.result(&res)
	if err := progress.write(prog, true); err != nil {
		return res, err
	}
	if cfg.Rank != 0 {
		fmt.Fprintf(out, "rank %d: trained %d epochs, loss %.6f (rank 0 writes the model)\n", cfg.Rank, l.epochs(), l.loss())
		return res, nil
	}
	path := filepath.Join(cfg.OutDir, ModelFile)
	if err := writeModel(cfg.OutDir, model); err != nil {
		return res, fmt.Errorf("write model: %w", err)
	}
	fmt.Fprintf(out, "model written to %s (final loss %.6f)\n", path, l.loss())
	return res, nil
}

// writeModel writes the model file, then the MANIFEST listing it, each
// atomically and durably: a MANIFEST is only ever next to the model it
// describes.
func writeModel(dir string, model any) error {
	b, err := json.MarshalIndent(model, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if err := writeBytesAtomic(filepath.Join(dir, ModelFile), b, true); err != nil {
		return err
	}
	sum := sha256.Sum256(b)
	manifest := fmt.Sprintf("%s  %s\n", hex.EncodeToString(sum[:]), ModelFile)
	return writeBytesAtomic(filepath.Join(dir, ManifestFile), []byte(manifest), true)
}

// VerifyManifest checks dir's MANIFEST: it exists, is well formed, and
// every file it lists exists under dir with the listed SHA-256. It returns
// the names listed.
func VerifyManifest(dir string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return nil, err
	}
	var names []string
	for i, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		sum, name, ok := strings.Cut(line, "  ")
		if want, err := hex.DecodeString(sum); !ok || err != nil || len(want) != sha256.Size || !filepath.IsLocal(name) {
			return names, fmt.Errorf("%s line %d: %q is not \"<sha256 hex>  <relative name>\"", ManifestFile, i+1, line)
		}
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return names, fmt.Errorf("%s lists %s: %w", ManifestFile, name, err)
		}
		if s := sha256.Sum256(got); hex.EncodeToString(s[:]) != sum {
			return names, fmt.Errorf("%s: %s does not match its SHA-256", ManifestFile, name)
		}
		names = append(names, name)
	}
	return names, nil
}

// metricWriter appends hypertune lines to the metric file.
type metricWriter struct {
	f     *os.File
	trial string // JSON string
}

func openMetrics(path, trial string) (*metricWriter, error) {
	if trial == "" {
		trial = "0" // cloudml-hypertune's default
	}
	q, err := json.Marshal(trial)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("metric file: %w", err)
	}
	// O_APPEND: the agent tails the file, and each line is one write, so a
	// reader never sees half a line followed by another writer's bytes.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("metric file: %w", err)
	}
	return &metricWriter{f: f, trial: string(q)}, nil
}

// report appends epoch's metrics in cloudml-hypertune's format (its
// separators included); the values are finite (Train stops on divergence).
func (w *metricWriter) report(epoch int, m Metrics) error {
	ts := strconv.FormatFloat(float64(time.Now().UnixMicro())/1e6, 'f', 6, 64)
	line := fmt.Sprintf(`{"timestamp": %s, "trial": %s, "val_loss": %s, "accuracy": %s, "global_step": "%d"}`+"\n",
		ts, w.trial, strconv.FormatFloat(m.ValLoss, 'g', -1, 64), strconv.FormatFloat(m.Accuracy, 'g', -1, 64), epoch)
	if _, err := w.f.Write([]byte(line)); err != nil {
		return fmt.Errorf("metric file: %w", err)
	}
	return nil
}

func (w *metricWriter) close() { _ = w.f.Close() }

// rfc3339 formats t with its fraction of a second: goodput measures the work
// lost since a checkpoint from it, and whole seconds would make a checkpoint
// written in a run's first second look older than the run.
func rfc3339(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// progressWriter writes the progress file, at most every `every` unless
// forced; it writes nothing without a path.
type progressWriter struct {
	path  string
	every time.Duration
	last  time.Time
	wrote Progress
}

func (p *progressWriter) write(pr Progress, force bool) error {
	if p.path == "" || (!force && time.Since(p.last) < p.every) || (!p.last.IsZero() && pr == p.wrote) {
		return nil
	}
	// Not synced: a progress file lost in a power cut is rewritten by the
	// next run, and syncing every few epochs would slow training.
	if err := writeFileAtomic(p.path, pr, false); err != nil {
		return fmt.Errorf("progress file: %w", err)
	}
	p.last, p.wrote = time.Now(), pr
	return nil
}

// compatible says whether a checkpoint made with saved can be continued with
// cur: the same model. For the linear model, the same data and model shape
// (learning rate and epochs may change); for the MLP, all its
// hyperparameters but epochs, so that the result is the uninterrupted
// run's.
func compatible(saved, cur Hyperparameters) error {
	if saved.mlp() != cur.mlp() {
		name := func(h Hyperparameters) string {
			if h.mlp() {
				return ModelMLP
			}
			return ModelLinear
		}
		return fmt.Errorf("it was trained with --model %s; this run has --model %s", name(saved), name(cur))
	}
	if cur.mlp() {
		s, c := saved, cur
		s.Epochs, c.Epochs = 0, 0
		if s != c {
			return fmt.Errorf("it was trained with seed %d, learning_rate %v, batch_size %d, weight_decay %v, hidden_units %d; this run has seed %d, learning_rate %v, batch_size %d, weight_decay %v, hidden_units %d",
				s.Seed, s.LearningRate, s.BatchSize, s.WeightDecay, s.HiddenUnits, c.Seed, c.LearningRate, c.BatchSize, c.WeightDecay, c.HiddenUnits)
		}
		return nil
	}
	if saved.Seed != cur.Seed || saved.Samples != cur.Samples || saved.Features != cur.Features {
		return fmt.Errorf("it was trained with seed %d, %d samples, %d features; this run has seed %d, %d samples, %d features",
			saved.Seed, saved.Samples, saved.Features, cur.Seed, cur.Samples, cur.Features)
	}
	return nil
}

// setAsideOthers moves the checkpoints in dir that another job wrote (a
// reused output directory: a second tuning job with the same base, whose
// trial 1 writes where the first one's did; a CustomJob run again) into
// dir/job-<its id>/, so that this job neither resumes from them, even with
// the same settings, nor writes over them. It returns where each job's
// went. Checkpoints that record no job stay: they may be this job's, from
// before checkpoints recorded it.
func setAsideOthers(dir, job string) (map[string]string, error) {
	cks, err := listCheckpoints(dir)
	if err != nil {
		return nil, err
	}
	moved := map[string]string{}
	for _, c := range cks {
		// Only whose it is: the state (checksum, the MLP's) is read by
		// latestCheckpoint, for the one this run resumes from.
		var st struct {
			JobID string `json:"job_id"`
		}
		b, err := os.ReadFile(filepath.Join(dir, c.name))
		if err == nil {
			err = json.Unmarshal(b, &st)
		}
		if err != nil || st.JobID == "" || st.JobID == job || strings.ContainsAny(st.JobID, `/\`) || st.JobID == ".." {
			continue // unreadable ones are skipped by latestCheckpoint
		}
		to := filepath.Join(dir, "job-"+st.JobID)
		if err := os.MkdirAll(to, 0o700); err != nil {
			return moved, fmt.Errorf("set job %s's checkpoint %s aside: %w", st.JobID, c.name, err)
		}
		if err := os.Rename(filepath.Join(dir, c.name), filepath.Join(to, c.name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return moved, fmt.Errorf("set job %s's checkpoint %s aside: %w", st.JobID, c.name, err)
		}
		moved[st.JobID] = to
	}
	return moved, nil
}

// ownDirHint says how to give a job checkpoints of its own.
const ownDirHint = "give the job a checkpoint directory of its own (a new baseOutputDirectory for a CustomJob or tuning job, --checkpoint-dir for sbatch) or remove the old checkpoints"

func checkpointName(epoch int) string {
	return fmt.Sprintf("%s%06d.json", checkpointPrefix, epoch)
}

// LatestCheckpoint reads the valid checkpoint with the highest epoch in dir,
// skipping any that is unreadable, torn or fails its checksum (the previous
// one is then used); ok is false when there is none (or dir does not exist).
func LatestCheckpoint(dir string) (st State, ok bool, err error) {
	ck, err := latestCheckpoint(dir, "")
	return ck.st, ck.ok, err
}

// found is latestCheckpoint's answer.
type found struct {
	st      State
	ok      bool
	written time.Time // the checkpoint file's modification time
	skipped []string  // "name: why" for each newer checkpoint that was not valid
}

// ck is a checkpoint file's name and the epoch the name says.
type ck struct {
	epoch int
	name  string
}

// listCheckpoints lists dir's checkpoint files, latest epoch first (none
// when dir does not exist).
func listCheckpoints(dir string) ([]ck, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read checkpoints: %w", err)
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
	sort.Slice(cks, func(i, j int) bool { return cks[i].epoch > cks[j].epoch })
	return cks, nil
}

// pruneCheckpoints keeps the keep latest checkpoints in dir (by epoch) and
// removes the others, never the one just written at epoch (keep 0: all).
func pruneCheckpoints(dir string, keep, epoch int) error {
	if keep <= 0 {
		return nil
	}
	cks, err := listCheckpoints(dir)
	if err != nil {
		return err
	}
	for i, c := range cks {
		if i >= keep && c.epoch != epoch {
			if err := os.Remove(filepath.Join(dir, c.name)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// latestCheckpoint is LatestCheckpoint for a run of job ("": any): another
// job's checkpoints are skipped as invalid ones are.
func latestCheckpoint(dir, job string) (found, error) {
	cks, err := listCheckpoints(dir)
	if err != nil {
		return found{}, err
	}
	var f found
	for _, c := range cks {
		path := filepath.Join(dir, c.name)
		st, written, err := readCheckpoint(path)
		if err == nil && st.Epoch != c.epoch {
			err = fmt.Errorf("holds epoch %d", st.Epoch)
		}
		if err == nil && job != "" && st.JobID != "" && st.JobID != job {
			// Another job's, not yet set aside (by rank 0, racing this rank).
			err = fmt.Errorf("job %s's, not this job's (%s)", st.JobID, job)
		}
		if err != nil {
			f.skipped = append(f.skipped, fmt.Sprintf("%s: %v", c.name, err))
			continue
		}
		f.st, f.ok, f.written = st, true, written
		return f, nil
	}
	return f, nil
}

// readCheckpoint reads and checks one checkpoint file.
func readCheckpoint(path string) (State, time.Time, error) {
	var st State
	fi, err := os.Stat(path)
	if err != nil {
		return st, time.Time{}, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return st, time.Time{}, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, time.Time{}, fmt.Errorf("not a checkpoint (torn or corrupt): %w", err)
	}
	if st.Checksum != "" {
		want := st.Checksum
		got, err := checksum(st)
		if err != nil {
			return st, time.Time{}, err
		}
		if got != want {
			return st, time.Time{}, errors.New("checksum mismatch (corrupt)")
		}
	}
	if st.Hyperparameters.mlp() {
		var t toytrain.Trainer
		if err := t.UnmarshalBinary(st.Trainer); err != nil {
			return st, time.Time{}, err
		}
		if t.Epoch() != st.Epoch || t.Diverged() {
			return st, time.Time{}, fmt.Errorf("trainer state at epoch %d (diverged %v)", t.Epoch(), t.Diverged())
		}
		return st, fi.ModTime(), nil
	}
	if len(st.Weights) != st.Hyperparameters.Features {
		return st, time.Time{}, fmt.Errorf("%d weights for %d features", len(st.Weights), st.Hyperparameters.Features)
	}
	for _, v := range append([]float64{st.Bias}, st.Weights...) {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return st, time.Time{}, errors.New("holds a non-finite parameter")
		}
	}
	return st, fi.ModTime(), nil
}

// checksum is the SHA-256 of st's JSON with its Checksum empty. JSON numbers
// are written as the shortest text that reads back as the same float64, so
// a checkpoint read and written again hashes the same.
func checksum(st State) (string, error) {
	st.Checksum = ""
	b, err := json.Marshal(st)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// writeCheckpoint writes st with its checksum, atomically (writeJSON).
func writeCheckpoint(path string, st State) error {
	sum, err := checksum(st)
	if err != nil {
		return err
	}
	st.Checksum = sum
	return writeJSON(path, st)
}

// removeTemps removes the temporary files a killed run left in dir. Only
// one run of a job writes at a time (Loom fences attempts), so none of them
// is still being written.
func removeTemps(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tempPrefix) && !e.IsDir() {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// writeJSON writes v to path atomically and durably: a temporary file in
// the same directory, synced, renamed over path, then the directory synced.
// A crash or kill -9 at any moment leaves either the old file or the new
// one, never a torn one, and a power loss after it returns loses neither.
func writeJSON(path string, v any) error { return writeFileAtomic(path, v, true) }

// writeFileAtomic writes v as JSON to path through a temporary file and a
// rename; durable also syncs the file before and the directory after.
func writeFileAtomic(path string, v any, durable bool) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return writeBytesAtomic(path, append(b, '\n'), durable)
}

// writeBytesAtomic is writeFileAtomic for bytes b as they are.
func writeBytesAtomic(path string, b []byte, durable bool) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, tempPrefix+"*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if durable {
		if err := tmp.Sync(); err != nil {
			tmp.Close()
			return err
		}
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	if !durable {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Flags of `loom train` that choose a model (ChooseModel).
var (
	// MLPFlags are the MLP's own flags (also accepted with dashes:
	// --learning-rate, ...); --learning_rate sets the linear model's
	// learning rate too when it is chosen with --model linear.
	MLPFlags = []string{"learning_rate", "batch_size", "weight_decay", "hidden_units"}
	// LinearFlags are the linear model's own flags.
	LinearFlags = []string{"lr", "samples", "features"}
)

// ChooseModel picks the model `loom train` trains: model when set (it must
// be ModelLinear or ModelMLP); else ModelMLP when one of MLPFlags was given
// (changed), ModelLinear when one of LinearFlags was, ModelMLP when
// AIP_MODEL_DIR is set (a Vertex-style job from the training service), and
// ModelLinear otherwise (the demo's model). A flag of the other model is an
// error naming it.
func ChooseModel(model string, changed func(flag string) bool, getenv func(string) string) (string, error) {
	firstChanged := func(names []string) string {
		for _, n := range names {
			if changed(n) {
				return n
			}
		}
		return ""
	}
	mlpFlag, linFlag := firstChanged(MLPFlags), firstChanged(LinearFlags)
	switch {
	case model == "" && mlpFlag != "" && linFlag != "":
		return "", fmt.Errorf("--%s is --model mlp's and --%s the linear model's: give one model's flags (or --model)", mlpFlag, linFlag)
	case model == "" && mlpFlag != "":
		return ModelMLP, nil
	case model == "" && linFlag != "":
		return ModelLinear, nil
	case model == "" && getenv(EnvAIPModelDir) != "":
		return ModelMLP, nil
	case model == "":
		return ModelLinear, nil
	case model == ModelMLP && linFlag != "" && linFlag != "lr":
		return "", fmt.Errorf("--%s is the linear model's, not --model mlp's", linFlag)
	case model == ModelLinear && mlpFlag != "" && mlpFlag != "learning_rate":
		return "", fmt.Errorf("--%s is --model mlp's, not the linear model's", mlpFlag)
	case model != ModelMLP && model != ModelLinear:
		return "", fmt.Errorf("--model must be %s or %s, got %q", ModelLinear, ModelMLP, model)
	}
	return model, nil
}

// IntValue is an integer flag that also accepts an integral number written
// as a float ("32.0", "3.2e1"): a tuning service may pass a discrete
// parameter's value that way. It implements pflag.Value.
type IntValue struct{ P *int }

// String returns the value in decimal.
func (v IntValue) String() string {
	if v.P == nil {
		return "0"
	}
	return strconv.Itoa(*v.P)
}

// Set parses s as an integer, or as a float with an integral value that
// fits an int.
func (v IntValue) Set(s string) error {
	if n, err := strconv.Atoi(s); err == nil {
		*v.P = n
		return nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return fmt.Errorf("%q is not an integer", s)
	}
	*v.P = int(f)
	return nil
}

// Type names the flag's type in help text.
func (v IntValue) Type() string { return "int" }

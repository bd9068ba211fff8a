// Package trainer is a tiny but real trainer: linear regression on a seeded
// synthetic dataset, fitted by full-batch gradient descent on the mean squared
// error. It checkpoints, resumes from its latest checkpoint, and writes a
// model file, which is all a Loom job needs to show the training loop end to
// end (`loom train`, run by `loom demo` on every node of a cluster).
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
)

// File names in the output directory.
const (
	// ModelFile is the final model, written when training ends.
	ModelFile = "model.json"
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
	case c.StepTime < 0:
		return fmt.Errorf("--step-time must not be negative, got %v", c.StepTime)
	}
	return nil
}

// FromEnv fills the settings Loom passes in the environment and that are
// not set yet: CheckpointDir from LOOM_CHECKPOINT_DIR, else
// AIP_CHECKPOINT_DIR; ProgressFile from LOOM_PROGRESS_FILE; RestartCount
// from LOOM_RESTART_COUNT.
func (c *Config) FromEnv(getenv func(string) string) error {
	if c.CheckpointDir == "" {
		c.CheckpointDir = getenv(EnvCheckpointDir)
	}
	if c.CheckpointDir == "" {
		c.CheckpointDir = getenv(EnvAIPCheckpointDir)
	}
	if c.ProgressFile == "" {
		c.ProgressFile = getenv(EnvProgressFile)
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
// the environment (FromEnv), turns SIGUSR1 (a job's default --signal, which
// Loom's checkpoint-aware drain sends) into checkpoint requests, and trains.
func RunProcess(ctx context.Context, cfg Config, getenv func(string) string) (Result, error) {
	if err := cfg.FromEnv(getenv); err != nil {
		return Result{}, err
	}
	// Without Notify a SIGUSR1 would end the process.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1)
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

// Train runs training to cfg.Epochs, resuming from the latest valid
// checkpoint in the checkpoint directory when there is one, and (rank 0)
// writes checkpoints and the model. Resuming is exact: a run that resumes
// writes the same model file, byte for byte, and logs the same loss at each
// epoch, as one that was never interrupted.
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
	x, y := Dataset(cfg.Hyperparameters)
	st := State{Weights: make([]float64, cfg.Features), Hyperparameters: cfg.Hyperparameters}
	var res Result
	var prog Progress
	if ckDir != "" {
		ck, err := latestCheckpoint(ckDir)
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
				return Result{}, fmt.Errorf("cannot resume from checkpoint at epoch %d in %s: %w", ck.st.Epoch, ckDir, err)
			}
			st = ck.st
			st.Hyperparameters = cfg.Hyperparameters
			res.ResumedFrom = ck.st.Epoch
			prog = Progress{Step: st.Epoch, CheckpointStep: st.Epoch, CheckpointTime: rfc3339(ck.written)}
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
	}
	progress := progressWriter{path: cfg.ProgressFile, every: cfg.ProgressEvery}
	if err := progress.write(prog, true); err != nil {
		return res, err
	}
	res.InitialLoss = loss(x, y, st.Weights, st.Bias)
	st.Loss = res.InitialLoss
	var pace *time.Timer
	for st.Epoch < cfg.Epochs {
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("training stopped at epoch %d: %w", st.Epoch, err)
		}
		if cfg.StepTime > 0 {
			pace = time.NewTimer(cfg.StepTime)
		}
		step(x, y, st.Weights, &st.Bias, cfg.LearningRate)
		st.Epoch++
		st.Loss = loss(x, y, st.Weights, st.Bias)
		if math.IsNaN(st.Loss) || math.IsInf(st.Loss, 0) {
			return res, fmt.Errorf("training diverged at epoch %d (loss %v): lower --lr", st.Epoch, st.Loss)
		}
		if pace != nil {
			select {
			case <-pace.C:
			case <-ctx.Done():
				pace.Stop()
				return res, fmt.Errorf("training stopped at epoch %d: %w", st.Epoch, ctx.Err())
			}
		}
		requested := false
		select {
		case <-cfg.CheckpointRequests: // a nil channel never fires
			requested = true
		default:
		}
		prog.Step = st.Epoch
		if cfg.Rank != 0 {
			if requested {
				fmt.Fprintf(out, "rank %d: checkpoint requested at epoch %d; only rank 0 writes checkpoints\n", cfg.Rank, st.Epoch)
			}
			if err := progress.write(prog, false); err != nil {
				return res, err
			}
			continue
		}
		if st.Epoch == 1 || st.Epoch%logEvery == 0 || st.Epoch == cfg.Epochs {
			fmt.Fprintf(out, "epoch %d loss %.6f\n", st.Epoch, st.Loss)
		}
		scheduled := cfg.CheckpointEvery > 0 && st.Epoch%cfg.CheckpointEvery == 0
		if scheduled || requested {
			if err := writeCheckpoint(filepath.Join(ckDir, checkpointName(st.Epoch)), st); err != nil {
				return res, fmt.Errorf("checkpoint at epoch %d: %w", st.Epoch, err)
			}
			if requested {
				fmt.Fprintf(out, "checkpoint at epoch %d written (requested by signal)\n", st.Epoch)
			}
			prog.CheckpointStep, prog.CheckpointTime = st.Epoch, rfc3339(time.Now())
		}
		if err := progress.write(prog, scheduled || requested); err != nil {
			return res, err
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
	if err := progress.write(prog, true); err != nil {
		return res, err
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

func rfc3339(t time.Time) string { return t.UTC().Format(time.RFC3339) }

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

// LatestCheckpoint reads the valid checkpoint with the highest epoch in dir,
// skipping any that is unreadable, torn or fails its checksum (the previous
// one is then used); ok is false when there is none (or dir does not exist).
func LatestCheckpoint(dir string) (st State, ok bool, err error) {
	ck, err := latestCheckpoint(dir)
	return ck.st, ck.ok, err
}

// found is latestCheckpoint's answer.
type found struct {
	st      State
	ok      bool
	written time.Time // the checkpoint file's modification time
	skipped []string  // "name: why" for each newer checkpoint that was not valid
}

func latestCheckpoint(dir string) (found, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return found{}, nil
	}
	if err != nil {
		return found{}, fmt.Errorf("read checkpoints: %w", err)
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
	sort.Slice(cks, func(i, j int) bool { return cks[i].epoch > cks[j].epoch })
	var f found
	for _, c := range cks {
		path := filepath.Join(dir, c.name)
		st, written, err := readCheckpoint(path)
		if err == nil && st.Epoch != c.epoch {
			err = fmt.Errorf("holds epoch %d", st.Epoch)
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
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, tempPrefix+"*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	if _, err := tmp.Write(append(b, '\n')); err != nil {
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

package trainer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// childEnv marks this test binary, started by a test, as a trainer process:
// TestMain then runs RunProcess (what `loom train` runs) with the flags
// below instead of the tests, so the tests kill and signal a real process.
const childEnv = "LOOM_TRAINER_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(childMain(os.Args[1:]))
	}
	os.Exit(m.Run())
}

func childMain(args []string) int {
	cfg := Config{Hyperparameters: DefaultHyperparameters()}
	mlp := DefaultMLPHyperparameters()
	var model string
	fl := flag.NewFlagSet("train", flag.ContinueOnError)
	fl.IntVar(&cfg.Epochs, "epochs", cfg.Epochs, "")
	fl.IntVar(&cfg.CheckpointEvery, "checkpoint-every", 0, "")
	fl.IntVar(&cfg.KeepCheckpoints, "keep-checkpoints", 0, "")
	fl.IntVar(&cfg.LogEvery, "log-every", 1, "")
	fl.StringVar(&cfg.OutDir, "out", "", "")
	fl.DurationVar(&cfg.StepTime, "step-time", 0, "")
	fl.StringVar(&model, "model", "", "")
	fl.Float64Var(&mlp.LearningRate, "learning_rate", mlp.LearningRate, "")
	fl.IntVar(&mlp.BatchSize, "batch_size", mlp.BatchSize, "")
	fl.Float64Var(&mlp.WeightDecay, "weight_decay", mlp.WeightDecay, "")
	fl.IntVar(&mlp.HiddenUnits, "hidden_units", mlp.HiddenUnits, "")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	if model == ModelMLP {
		mlp.Epochs = cfg.Epochs
		cfg.Hyperparameters = mlp
	}
	cfg.Log = os.Stdout
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if _, err := RunProcess(ctx, cfg, os.Getenv); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// child is a trainer process started by a test.
type child struct {
	cmd *exec.Cmd
	out *bytes.Buffer
	err *bytes.Buffer
}

func startChild(t *testing.T, env []string, args ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), childEnv+"=1"), env...)
	c := &child{cmd: cmd, out: new(bytes.Buffer), err: new(bytes.Buffer)}
	cmd.Stdout, cmd.Stderr = c.out, c.err
	if err := cmd.Start(); err != nil {
		t.Fatalf("start trainer: %v", err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return c
}

// wait waits for the process to end and fails the test unless it exited 0.
func (c *child) wait(t *testing.T) {
	t.Helper()
	if err := c.cmd.Wait(); err != nil {
		t.Fatalf("trainer: %v\nstdout:\n%s\nstderr:\n%s", err, c.out, c.err)
	}
}

// readProgress reads the progress file; ok is false while there is none.
func readProgress(t *testing.T, path string) (Progress, bool) {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return Progress{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	var p Progress
	// The file is replaced by a rename, never written in place: any read of
	// it is a whole document.
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatalf("progress file %q: %v", b, err)
	}
	return p, true
}

// waitProgress polls the progress file until cond holds or the process
// ends (then it fails), for up to 30 s.
func waitProgress(t *testing.T, c *child, path string, what string, cond func(Progress) bool) Progress {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if p, ok := readProgress(t, path); ok && cond(p) {
			return p
		}
		time.Sleep(time.Millisecond) // polling interval, not synchronisation
	}
	t.Fatalf("no progress with %s within 30s\nstdout:\n%s\nstderr:\n%s", what, c.out, c.err)
	return Progress{}
}

var resumeLine = regexp.MustCompile(`^resuming from checkpoint at epoch (\d+) \(loss [0-9.]+, restart (\d+)\)$`)

// TestKill9ResumeIsExact kills a training process with SIGKILL at random
// moments, several times, resuming each time from its checkpoint directory
// (given as LOOM_CHECKPOINT_DIR, apart from the model's --out): the model
// file is byte for byte an uninterrupted run's, and every epoch line logged
// by any of the runs is the uninterrupted run's line for that epoch.
func TestKill9ResumeIsExact(t *testing.T) {
	t.Parallel()
	const epochs = 400
	args := func(out string) []string {
		return []string{"-epochs", fmt.Sprint(epochs), "-checkpoint-every", "7", "-out", out}
	}

	straightDir := t.TempDir()
	straight := startChild(t, nil, args(straightDir)...)
	straight.wait(t)
	want, err := os.ReadFile(filepath.Join(straightDir, ModelFile))
	if err != nil {
		t.Fatal(err)
	}
	wantLines := map[string]string{} // epoch → its line
	for _, line := range strings.Split(straight.out.String(), "\n") {
		if m := epochLine.FindStringSubmatch(line); m != nil {
			wantLines[m[1]] = line
		}
	}
	if len(wantLines) != epochs {
		t.Fatalf("uninterrupted run logged %d epochs, want %d", len(wantLines), epochs)
	}

	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	outDir, ckDir := t.TempDir(), t.TempDir()
	progress := filepath.Join(t.TempDir(), "progress.json")
	killed := 0
	for restart := 0; ; restart++ {
		env := []string{"LOOM_CHECKPOINT_DIR=" + ckDir, "LOOM_PROGRESS_FILE=" + progress, fmt.Sprintf("LOOM_RESTART_COUNT=%d", restart)}
		last, _ := readProgress(t, progress)
		c := startChild(t, env, append(args(outDir), "-step-time", "1ms")...)
		if restart < 5 {
			// Kill at a random epoch of the rest of the run, and a random
			// moment within it (during a checkpoint write, now and then).
			target := last.Step + 1 + rng.IntN((epochs-last.Step)/3)
			waitProgress(t, c, progress, fmt.Sprintf("step >= %d", target), func(p Progress) bool { return p.Step >= target })
			time.Sleep(time.Duration(rng.IntN(1000)) * time.Microsecond) // a random moment, not synchronisation
			if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			if err := c.cmd.Wait(); err == nil {
				t.Fatalf("run %d ended before it was killed", restart)
			}
			killed++
		} else {
			c.wait(t)
		}
		lines := strings.Split(strings.TrimSpace(c.out.String()), "\n")
		from := 0
		startOver := fmt.Sprintf("restart %d: no checkpoint in %s, starting from epoch 0", restart, ckDir)
		if restart > 0 && lines[0] == startOver {
			// Killed before its first checkpoint: it starts over. Only
			// allowed when the killed run reported none: a checkpoint it
			// reported must be resumed from.
			if last.CheckpointStep != 0 {
				t.Fatalf("run %d started over, but the killed run reported a checkpoint at epoch %d", restart, last.CheckpointStep)
			}
		} else if restart > 0 {
			m := resumeLine.FindStringSubmatch(lines[0])
			if m == nil || m[2] != fmt.Sprint(restart) {
				t.Fatalf("run %d: first line %q, want a resume from a checkpoint naming restart %d", restart, lines[0], restart)
			}
			fmt.Sscan(m[1], &from)
			// The latest checkpoint the killed run reported, or one after it
			// that it wrote before it could say so.
			if from%7 != 0 || from < last.CheckpointStep {
				t.Fatalf("run %d resumed from epoch %d, want a checkpoint's, at least %d", restart, from, last.CheckpointStep)
			}
		}
		next := from + 1
		for _, line := range lines {
			m := epochLine.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			if m[1] != fmt.Sprint(next) {
				t.Fatalf("run %d logged epoch %s after epoch %d (resumed from %d)", restart, m[1], next-1, from)
			}
			if line != wantLines[m[1]] {
				t.Fatalf("run %d: %q, uninterrupted run: %q", restart, line, wantLines[m[1]])
			}
			next++
		}
		if restart >= 5 {
			break
		}
	}
	got, err := os.ReadFile(filepath.Join(outDir, ModelFile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("after %d kills the model differs from an uninterrupted run's:\n%s\nwant:\n%s", killed, got, want)
	}
	for _, dir := range []string{outDir, ckDir} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), tempPrefix) {
				t.Errorf("temporary file left in %s: %s", dir, e.Name())
			}
			if dir == outDir && strings.HasPrefix(e.Name(), checkpointPrefix) {
				t.Errorf("checkpoint %s in --out, want it in LOOM_CHECKPOINT_DIR", e.Name())
			}
		}
	}
	p, _ := readProgress(t, progress)
	if p.Step != epochs || p.CheckpointStep != epochs/7*7 {
		t.Fatalf("final progress %+v, want step %d, checkpoint_step %d", p, epochs, epochs/7*7)
	}
}

// TestSIGUSR1WritesCheckpoint: with no scheduled checkpoints, SIGUSR1 makes
// the trainer write one at the next epoch, and its progress file says so.
func TestSIGUSR1WritesCheckpoint(t *testing.T) {
	t.Parallel()
	checkpointOnSignal(t, syscall.SIGUSR1)
}

// TestSIGUSR2WritesCheckpoint: so does SIGUSR2, the other signal jobs name
// in --signal (docs/health.md's USR2@120): a trainer that took USR1 only
// ignored it, and a checkpoint-aware drain waited its whole grace.
func TestSIGUSR2WritesCheckpoint(t *testing.T) {
	t.Parallel()
	checkpointOnSignal(t, syscall.SIGUSR2)
}

func checkpointOnSignal(t *testing.T, signal syscall.Signal) {
	dir := t.TempDir()
	progress := filepath.Join(t.TempDir(), "progress.json")
	c := startChild(t, []string{"AIP_CHECKPOINT_DIR=" + dir, "LOOM_PROGRESS_FILE=" + progress},
		"-epochs", "1000000", "-checkpoint-every", "0", "-step-time", "2ms", "-out", t.TempDir())
	before := waitProgress(t, c, progress, "step >= 5", func(p Progress) bool { return p.Step >= 5 })
	if before.CheckpointStep != 0 || before.CheckpointTime != "" {
		t.Fatalf("progress %+v before any checkpoint, want none", before)
	}
	if _, ok, _ := LatestCheckpoint(dir); ok {
		t.Fatal("a checkpoint exists before the signal")
	}
	sent := time.Now().Add(-time.Second).Truncate(time.Second)
	if err := c.cmd.Process.Signal(signal); err != nil {
		t.Fatal(err)
	}
	p := waitProgress(t, c, progress, "a checkpoint", func(p Progress) bool { return p.CheckpointStep > 0 })
	ck, ok, err := LatestCheckpoint(dir)
	if err != nil || !ok {
		t.Fatalf("no checkpoint in AIP_CHECKPOINT_DIR after %v: %v", signal, err)
	}
	if ck.Epoch != p.CheckpointStep || ck.Epoch < before.Step {
		t.Fatalf("checkpoint at epoch %d, progress says %d, signal sent after epoch %d", ck.Epoch, p.CheckpointStep, before.Step)
	}
	at, err := time.Parse(time.RFC3339, p.CheckpointTime)
	if err != nil || at.Before(sent) || at.After(time.Now()) {
		t.Fatalf("checkpoint_time %q (%v), want an RFC 3339 time since %v", p.CheckpointTime, err, sent)
	}
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Wait(); err == nil {
		t.Fatal("the trainer exited 0 on SIGTERM before its last epoch")
	}
	if !strings.Contains(c.out.String(), fmt.Sprintf("checkpoint at epoch %d written (requested by signal)", ck.Epoch)) {
		t.Fatalf("log lacks the requested checkpoint:\n%s", c.out)
	}
}

var mlpEpochLine = regexp.MustCompile(`^epoch (\d+) loss [0-9.e+-]+ val_loss [0-9.e+-]+ accuracy [0-9.]+$`)

// hypertuneLine is one line of the metric file, as cloudml-hypertune
// writes it.
type hypertuneLine struct {
	Timestamp  float64 `json:"timestamp"`
	Trial      string  `json:"trial"`
	ValLoss    float64 `json:"val_loss"`
	Accuracy   float64 `json:"accuracy"`
	GlobalStep string  `json:"global_step"`
}

// readHypertune parses every line of a metric file strictly: each is a
// JSON object with exactly the five keys.
func readHypertune(t *testing.T, path string) []hypertuneLine {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var lines []hypertuneLine
	for i, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		var raw map[string]any
		if err := json.Unmarshal([]byte(line), &raw); err != nil || len(raw) != 5 {
			t.Fatalf("metric line %d %q: %v, %d keys; want a JSON object with 5", i+1, line, err, len(raw))
		}
		var h hypertuneLine
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&h); err != nil {
			t.Fatalf("metric line %d %q: %v", i+1, line, err)
		}
		lines = append(lines, h)
	}
	return lines
}

// TestMLPKill9ResumeIsExact kills an MLP training process (`loom train
// --model mlp`) with SIGKILL at random moments three times, resuming each
// time from AIP_CHECKPOINT_DIR: the model file and its MANIFEST are byte for
// byte an uninterrupted run's, every epoch line any run logged is the
// uninterrupted run's, the hypertune lines parse and report for each epoch
// the uninterrupted run's values (a resumed run repeats the epochs after its
// checkpoint, with the same values), and the MANIFEST verifies (also with
// sha256sum -c).
func TestMLPKill9ResumeIsExact(t *testing.T) {
	t.Parallel()
	const epochs, every, kills = 90, 7, 3
	args := func(out string) []string {
		return []string{"-model", "mlp", "-learning_rate", "0.2", "-batch_size", "40", "-hidden_units", "24",
			"-epochs", fmt.Sprint(epochs), "-checkpoint-every", fmt.Sprint(every), "-keep-checkpoints", "2", "-out", out}
	}
	straightDir := t.TempDir()
	straightMetrics := filepath.Join(t.TempDir(), "metrics.jsonl")
	straight := startChild(t, []string{"CLOUD_ML_HP_METRIC_FILE=" + straightMetrics, "CLOUD_ML_TRIAL_ID=7"}, args(straightDir)...)
	straight.wait(t)
	wantModel, err := os.ReadFile(filepath.Join(straightDir, ModelFile))
	if err != nil {
		t.Fatal(err)
	}
	wantManifest, err := os.ReadFile(filepath.Join(straightDir, ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	wantLines := map[string]string{}
	for _, line := range strings.Split(straight.out.String(), "\n") {
		if m := mlpEpochLine.FindStringSubmatch(line); m != nil {
			wantLines[m[1]] = line
		}
	}
	if len(wantLines) != epochs {
		t.Fatalf("uninterrupted run logged %d epochs, want %d:\n%s", len(wantLines), epochs, straight.out)
	}
	wantMetrics := map[string]hypertuneLine{}
	for i, h := range readHypertune(t, straightMetrics) {
		if h.GlobalStep != fmt.Sprint(i+1) || h.Trial != "7" || !(h.ValLoss > 0) || h.Accuracy < 0 || h.Accuracy > 1 {
			t.Fatalf("metric line %d = %+v, want global_step %d, trial 7, finite values", i+1, h, i+1)
		}
		wantMetrics[h.GlobalStep] = h
	}
	if len(wantMetrics) != epochs {
		t.Fatalf("%d metric lines, want one per epoch (%d)", len(wantMetrics), epochs)
	}
	if last := wantMetrics[fmt.Sprint(epochs)]; last.Accuracy < 0.8 {
		t.Fatalf("final accuracy %v: the model did not learn", last.Accuracy)
	}

	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	outDir, ckDir := t.TempDir(), t.TempDir()
	progress := filepath.Join(t.TempDir(), "progress.json")
	metrics := filepath.Join(t.TempDir(), "metrics.jsonl")
	for restart := 0; ; restart++ {
		env := []string{"AIP_CHECKPOINT_DIR=" + ckDir, "LOOM_PROGRESS_FILE=" + progress,
			"CLOUD_ML_HP_METRIC_FILE=" + metrics, "CLOUD_ML_TRIAL_ID=7", fmt.Sprintf("LOOM_RESTART_COUNT=%d", restart)}
		last, _ := readProgress(t, progress)
		c := startChild(t, env, append(args(outDir), "-step-time", "1ms")...)
		if restart < kills {
			// Past at least one more checkpoint, so that every restart
			// resumes from one.
			target := last.Step + every + 1 + rng.IntN((epochs-last.Step)/4)
			waitProgress(t, c, progress, fmt.Sprintf("step >= %d", target), func(p Progress) bool { return p.Step >= target })
			time.Sleep(time.Duration(rng.IntN(1000)) * time.Microsecond) // a random moment, not synchronisation
			if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			if err := c.cmd.Wait(); err == nil {
				t.Fatalf("run %d ended before it was killed", restart)
			}
		} else {
			c.wait(t)
		}
		if restart > 0 {
			m := resumeLine.FindStringSubmatch(strings.SplitN(c.out.String(), "\n", 2)[0])
			if m == nil || m[1] == "0" || m[2] != fmt.Sprint(restart) {
				t.Fatalf("run %d does not start with a resume from a checkpoint:\n%s", restart, c.out)
			}
		}
		for _, line := range strings.Split(c.out.String(), "\n") {
			if m := mlpEpochLine.FindStringSubmatch(line); m != nil && line != wantLines[m[1]] {
				t.Fatalf("run %d: %q, uninterrupted run: %q", restart, line, wantLines[m[1]])
			}
		}
		if restart >= kills {
			break
		}
	}
	got, err := os.ReadFile(filepath.Join(outDir, ModelFile))
	if err != nil || !bytes.Equal(got, wantModel) {
		t.Fatalf("after %d kills the model differs from an uninterrupted run's (%v)", kills, err)
	}
	if got, err := os.ReadFile(filepath.Join(outDir, ManifestFile)); err != nil || !bytes.Equal(got, wantManifest) {
		t.Fatalf("MANIFEST %q (%v), want %q", got, err, wantManifest)
	}
	if names, err := VerifyManifest(outDir); err != nil || !slices.Equal(names, []string{ModelFile}) {
		t.Fatalf("VerifyManifest = %v, %v", names, err)
	}
	sum := exec.Command("sha256sum", "-c", ManifestFile)
	sum.Dir = outDir
	if out, err := sum.CombinedOutput(); err != nil || string(out) != ModelFile+": OK\n" {
		t.Fatalf("sha256sum -c MANIFEST: %v: %s", err, out)
	}
	seen := map[string]bool{}
	for _, h := range readHypertune(t, metrics) {
		want, ok := wantMetrics[h.GlobalStep]
		if !ok || h.ValLoss != want.ValLoss || h.Accuracy != want.Accuracy || h.Trial != "7" {
			t.Fatalf("resumed runs reported %+v, uninterrupted run %+v", h, want)
		}
		seen[h.GlobalStep] = true
	}
	if len(seen) != epochs {
		t.Fatalf("resumed runs reported %d of the %d epochs", len(seen), epochs)
	}
	cks, err := listCheckpoints(ckDir)
	if err != nil || len(cks) != 2 || cks[0].epoch != epochs/every*every {
		t.Fatalf("checkpoints %v (%v), want the latest 2 up to epoch %d", cks, err, epochs/every*every)
	}
}

package trainer

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func testConfig(t *testing.T, epochs int) Config {
	t.Helper()
	h := DefaultHyperparameters()
	h.Epochs = epochs
	return Config{Hyperparameters: h, CheckpointEvery: 10, LogEvery: 1, OutDir: t.TempDir()}
}

var epochLine = regexp.MustCompile(`^epoch (\d+) loss ([0-9.e+-]+)$`)

func TestLossDecreases(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, 60)
	var log bytes.Buffer
	cfg.Log = &log
	res, err := Train(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Train: %v", err)
	}
	var losses []float64
	for _, line := range strings.Split(strings.TrimSpace(log.String()), "\n") {
		m := epochLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		l, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			t.Fatalf("loss in %q: %v", line, err)
		}
		losses = append(losses, l)
	}
	if len(losses) != 60 {
		t.Fatalf("got %d epoch lines, want 60:\n%s", len(losses), log.String())
	}
	for i := 1; i < len(losses); i++ {
		if losses[i] > losses[i-1] {
			t.Fatalf("loss went up at epoch %d: %v -> %v", i+1, losses[i-1], losses[i])
		}
	}
	if !(res.Model.FinalLoss < res.InitialLoss/10) {
		t.Fatalf("final loss %v is not well below the initial %v", res.Model.FinalLoss, res.InitialLoss)
	}
	// The noise is N(0, 0.1²): a converged fit gets close to 0.01.
	long := testConfig(t, 300)
	res, err = Train(context.Background(), long)
	if err != nil {
		t.Fatalf("Train 300 epochs: %v", err)
	}
	if res.Model.FinalLoss > 0.05 {
		t.Fatalf("after 300 epochs loss is %v, want < 0.05", res.Model.FinalLoss)
	}
}

func TestFilesWritten(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, 35)
	res, err := Train(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Train: %v", err)
	}
	for _, name := range []string{"checkpoint-000010.json", "checkpoint-000020.json", "checkpoint-000030.json", ModelFile} {
		if _, err := os.Stat(filepath.Join(cfg.OutDir, name)); err != nil {
			t.Errorf("missing %s: %v", name, err)
		}
	}
	b, err := os.ReadFile(filepath.Join(cfg.OutDir, ModelFile))
	if err != nil {
		t.Fatal(err)
	}
	var m Model
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("model file: %v", err)
	}
	if m.Epochs != 35 || m.FinalLoss != res.Model.FinalLoss || len(m.Weights) != cfg.Features ||
		m.Hyperparameters.LearningRate != 0.05 || m.Hyperparameters.Seed != cfg.Seed {
		t.Fatalf("model file = %+v, want 35 epochs, loss %v, %d weights, lr 0.05", m, res.Model.FinalLoss, cfg.Features)
	}
	ck, ok, err := LatestCheckpoint(cfg.OutDir)
	if err != nil || !ok || ck.Epoch != 30 {
		t.Fatalf("LatestCheckpoint = epoch %d, %v, %v; want 30", ck.Epoch, ok, err)
	}
	// Nothing half-written is left behind.
	entries, _ := os.ReadDir(cfg.OutDir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".tmp-") {
			t.Errorf("temporary file left: %s", e.Name())
		}
	}
}

func TestResumeContinuesFromCheckpoint(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first := testConfig(t, 20)
	first.OutDir = dir
	if _, err := Train(context.Background(), first); err != nil {
		t.Fatalf("first run: %v", err)
	}

	second := testConfig(t, 50)
	second.OutDir = dir
	var log bytes.Buffer
	second.Log = &log
	res, err := Train(context.Background(), second)
	if err != nil {
		t.Fatalf("second run: %v", err)
	}
	if res.ResumedFrom != 20 {
		t.Fatalf("ResumedFrom = %d, want 20", res.ResumedFrom)
	}
	lines := strings.Split(strings.TrimSpace(log.String()), "\n")
	if !strings.HasPrefix(lines[0], "resuming from checkpoint at epoch 20") {
		t.Fatalf("first line %q, want the resume message", lines[0])
	}
	if m := epochLine.FindStringSubmatch(lines[1]); m == nil || m[1] != "21" {
		t.Fatalf("second line %q, want epoch 21", lines[1])
	}

	// Resuming gives the same model as training straight through.
	straight := testConfig(t, 50)
	want, err := Train(context.Background(), straight)
	if err != nil {
		t.Fatalf("straight run: %v", err)
	}
	if res.Model.FinalLoss != want.Model.FinalLoss || res.Model.Bias != want.Model.Bias {
		t.Fatalf("resumed model loss %v bias %v, straight %v %v", res.Model.FinalLoss, res.Model.Bias, want.Model.FinalLoss, want.Model.Bias)
	}
}

func TestRankNonZeroWritesNothing(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, 20)
	cfg.Rank = 1
	var log bytes.Buffer
	cfg.Log = &log
	if _, err := Train(context.Background(), cfg); err != nil {
		t.Fatalf("Train: %v", err)
	}
	entries, err := os.ReadDir(cfg.OutDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Fatalf("rank 1 wrote %d files", len(entries))
	}
	if strings.Contains(log.String(), "epoch 1 loss") || !strings.Contains(log.String(), "rank 1: trained 20 epochs") {
		t.Fatalf("rank 1 log = %q, want only the summary", log.String())
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	cases := map[string]func(*Config){
		"--lr":               func(c *Config) { c.LearningRate = 0 },
		"--epochs":           func(c *Config) { c.Epochs = 0 },
		"--checkpoint-every": func(c *Config) { c.CheckpointEvery = -1 },
		"LOOM_MODEL_DIR":     func(c *Config) { c.OutDir = "" },
	}
	for want, mutate := range cases {
		cfg := testConfig(t, 5)
		mutate(&cfg)
		_, err := Train(context.Background(), cfg)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want one naming %s", want, err, want)
		}
	}
}

func TestResumeRejectsOtherData(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, 10)
	if _, err := Train(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	other := cfg
	other.Seed = 7
	_, err := Train(context.Background(), other)
	if err == nil || !strings.Contains(err.Error(), "seed") {
		t.Fatalf("err = %v, want a seed mismatch", err)
	}
}

package trainer

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func mlpConfig(t *testing.T, epochs int) Config {
	t.Helper()
	h := DefaultMLPHyperparameters()
	h.Epochs = epochs
	h.LearningRate = 0.2
	return Config{Hyperparameters: h, CheckpointEvery: 5, LogEvery: 1, OutDir: t.TempDir()}
}

func TestMLPResumeWritesTheSameModel(t *testing.T) {
	t.Parallel()
	straight := mlpConfig(t, 30)
	want, err := Train(context.Background(), straight)
	if err != nil {
		t.Fatal(err)
	}
	wantBytes, err := os.ReadFile(filepath.Join(straight.OutDir, ModelFile))
	if err != nil {
		t.Fatal(err)
	}
	if want.MLP == nil || want.Model.Kind != "mlp-classifier" || want.MLP.Metrics.Accuracy < 0.8 ||
		!(want.MLP.Metrics.ValLoss < want.InitialLoss/2) || len(want.MLP.Network.W1) != straight.HiddenUnits {
		t.Fatalf("result %+v (initial loss %v): want a learnt mlp-classifier", want.Model, want.InitialLoss)
	}
	var m MLPModel
	if err := json.Unmarshal(wantBytes, &m); err != nil || m.Metrics != want.MLP.Metrics || m.Hyperparameters != straight.Hyperparameters {
		t.Fatalf("model file: %v, %+v", err, m.Metrics)
	}

	first := mlpConfig(t, 12)
	if _, err := Train(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	second := first
	second.Epochs = 30
	var log bytes.Buffer
	second.Log = &log
	res, err := Train(context.Background(), second)
	if err != nil || res.ResumedFrom != 10 {
		t.Fatalf("resumed from %d, %v; want 10", res.ResumedFrom, err)
	}
	if !strings.HasPrefix(log.String(), "resuming from checkpoint at epoch 10 (loss ") ||
		!strings.Contains(log.String(), "\nepoch 11 loss ") {
		t.Fatalf("log:\n%s", log.String())
	}
	got, err := os.ReadFile(filepath.Join(second.OutDir, ModelFile))
	if err != nil || !bytes.Equal(got, wantBytes) {
		t.Fatalf("resumed model differs from the uninterrupted one (%v)", err)
	}
}

func TestMLPResumeRejectsOtherHyperparameters(t *testing.T) {
	t.Parallel()
	cfg := mlpConfig(t, 5)
	if _, err := Train(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	other := cfg
	other.LearningRate = 0.3
	if _, err := Train(context.Background(), other); err == nil || !strings.Contains(err.Error(), "learning_rate 0.3") {
		t.Fatalf("err = %v, want a learning_rate mismatch", err)
	}
	lin := testConfig(t, 5)
	lin.OutDir = cfg.OutDir
	if _, err := Train(context.Background(), lin); err == nil || !strings.Contains(err.Error(), "--model mlp") {
		t.Fatalf("err = %v, want a model mismatch", err)
	}
	// More epochs are fine.
	more := cfg
	more.Epochs = 7
	if res, err := Train(context.Background(), more); err != nil || res.ResumedFrom != 5 {
		t.Fatalf("resume with more epochs: from %d, %v", res.ResumedFrom, err)
	}
}

func TestMLPHypertuneLines(t *testing.T) {
	t.Parallel()
	cfg := mlpConfig(t, 6)
	cfg.MetricFile = filepath.Join(t.TempDir(), "sub", "metrics.jsonl")
	res, err := Train(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	lines := readHypertune(t, cfg.MetricFile)
	if len(lines) != 6 {
		t.Fatalf("%d lines, want 6", len(lines))
	}
	for i, h := range lines {
		if h.Trial != "0" || h.GlobalStep != itoa(i+1) || h.Timestamp < 1.7e9 {
			t.Fatalf("line %d = %+v, want trial \"0\" (none set), global_step %d, a unix time", i+1, h, i+1)
		}
	}
	if last := lines[5]; last.ValLoss != res.MLP.Metrics.ValLoss || last.Accuracy != res.MLP.Metrics.Accuracy {
		t.Fatalf("last line %+v, model's metrics %+v", last, res.MLP.Metrics)
	}
	b, _ := os.ReadFile(cfg.MetricFile)
	if !strings.HasPrefix(string(b), `{"timestamp": `) || !strings.Contains(string(b), `, "trial": "0", "val_loss": `) {
		t.Fatalf("not cloudml-hypertune's layout: %s", b)
	}
	// Rank 1 and the linear model write none.
	for _, c := range []Config{func() Config { c := cfg; c.Rank = 1; c.OutDir = t.TempDir(); return c }(),
		func() Config { c := testConfig(t, 3); c.MetricFile = cfg.MetricFile; return c }()} {
		if _, err := Train(context.Background(), c); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(readHypertune(t, cfg.MetricFile)); n != 6 {
		t.Fatalf("%d lines after rank 1 and linear runs, want still 6", n)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func TestMLPDivergenceIsAnError(t *testing.T) {
	t.Parallel()
	cfg := mlpConfig(t, 5)
	cfg.LearningRate = math.MaxFloat64 / 4
	cfg.BatchSize = 4
	cfg.MetricFile = filepath.Join(t.TempDir(), "metrics.jsonl")
	_, err := Train(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "diverged") || !strings.Contains(err.Error(), "--learning_rate") {
		t.Fatalf("err = %v, want a divergence naming --learning_rate", err)
	}
	if _, err := os.Stat(filepath.Join(cfg.OutDir, ModelFile)); err == nil {
		t.Fatal("a diverged run wrote a model")
	}
	if b, _ := os.ReadFile(cfg.MetricFile); len(b) > 0 {
		readHypertune(t, cfg.MetricFile) // whatever was reported parses: no NaN
	}
}

func TestKeepCheckpoints(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{testConfig(t, 50), mlpConfig(t, 50)} {
		cfg.KeepCheckpoints = 3
		cfg.CheckpointEvery = 5
		if _, err := Train(context.Background(), cfg); err != nil {
			t.Fatal(err)
		}
		cks, err := listCheckpoints(cfg.OutDir)
		if err != nil || len(cks) != 3 || cks[0].epoch != 50 || cks[2].epoch != 40 {
			t.Fatalf("%s: checkpoints %v (%v), want 50, 45, 40", cfg.Model, cks, err)
		}
	}
}

func TestVerifyManifest(t *testing.T) {
	t.Parallel()
	cfg := mlpConfig(t, 2)
	if _, err := Train(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if names, err := VerifyManifest(cfg.OutDir); err != nil || len(names) != 1 || names[0] != ModelFile {
		t.Fatalf("VerifyManifest = %v, %v", names, err)
	}
	cases := map[string]func(dir string){
		"does not match": func(dir string) {
			_ = os.WriteFile(filepath.Join(dir, ModelFile), []byte("{}\n"), 0o600)
		},
		"no such file": func(dir string) { _ = os.Remove(filepath.Join(dir, ModelFile)) },
		"is not": func(dir string) {
			_ = os.WriteFile(filepath.Join(dir, ManifestFile), []byte("abc model.json\n"), 0o600)
		},
		"not \"<sha256": func(dir string) {
			_ = os.WriteFile(filepath.Join(dir, ManifestFile), []byte(strings.Repeat("0", 64)+"  ../x\n"), 0o600)
		},
	}
	for want, spoil := range cases {
		c := mlpConfig(t, 1)
		if _, err := Train(context.Background(), c); err != nil {
			t.Fatal(err)
		}
		spoil(c.OutDir)
		if _, err := VerifyManifest(c.OutDir); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v", want, err)
		}
	}
}

func TestMLPValidate(t *testing.T) {
	t.Parallel()
	cases := map[string]func(*Config){
		"--learning_rate": func(c *Config) { c.LearningRate = -1 },
		"--batch_size":    func(c *Config) { c.BatchSize = 0 },
		"--weight_decay":  func(c *Config) { c.WeightDecay = -1 },
		"--hidden_units":  func(c *Config) { c.HiddenUnits = -1 },
		"--samples":       func(c *Config) { c.Samples = 10 },
	}
	for want, mutate := range cases {
		cfg := mlpConfig(t, 1)
		mutate(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v", want, err)
		}
	}
	lin := testConfig(t, 1)
	lin.HiddenUnits = 8
	if err := lin.Validate(); err == nil || !strings.Contains(err.Error(), "--hidden_units") {
		t.Errorf("linear with hidden units: err = %v", err)
	}
	lin = testConfig(t, 1)
	lin.Model = "cnn"
	if err := lin.Validate(); err == nil || !strings.Contains(err.Error(), "--model") {
		t.Errorf("unknown model: err = %v", err)
	}
}

func TestChooseModel(t *testing.T) {
	t.Parallel()
	env := func(aip string) func(string) string {
		return func(k string) string {
			if k == EnvAIPModelDir {
				return aip
			}
			return ""
		}
	}
	cases := []struct {
		model   string
		flags   []string
		aip     string
		want    string
		wantErr string
	}{
		{"", nil, "", ModelLinear, ""},
		{"", nil, "/m", ModelMLP, ""},
		{"", []string{"batch_size"}, "", ModelMLP, ""},
		{"", []string{"learning_rate"}, "", ModelMLP, ""},
		{"", []string{"samples"}, "/m", ModelLinear, ""},
		{"", []string{"lr", "hidden_units"}, "", "", "give one model's flags"},
		{ModelLinear, nil, "/m", ModelLinear, ""},
		{ModelLinear, []string{"learning_rate"}, "", ModelLinear, ""},
		{ModelLinear, []string{"weight_decay"}, "", "", "--weight_decay is --model mlp's"},
		{ModelMLP, []string{"lr"}, "", ModelMLP, ""},
		{ModelMLP, []string{"features"}, "", "", "--features is the linear model's"},
		{"cnn", nil, "", "", "--model must be"},
	}
	for _, c := range cases {
		changed := func(f string) bool {
			for _, g := range c.flags {
				if f == g {
					return true
				}
			}
			return false
		}
		got, err := ChooseModel(c.model, changed, env(c.aip))
		if got != c.want || (c.wantErr == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("ChooseModel(%q, %v, AIP_MODEL_DIR=%q) = %q, %v; want %q, %q", c.model, c.flags, c.aip, got, err, c.want, c.wantErr)
		}
	}
}

func TestIntValue(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int{"32": 32, "32.0": 32, "3.2e1": 32, "-4": -4} {
		var n int
		if err := (IntValue{&n}).Set(in); err != nil || n != want {
			t.Errorf("Set(%q) = %d, %v; want %d", in, n, err, want)
		}
	}
	for _, in := range []string{"32.5", "x", "1e300", ""} {
		n := 7
		if err := (IntValue{&n}).Set(in); err == nil || n != 7 {
			t.Errorf("Set(%q) = %d, %v; want an error and no change", in, n, err)
		}
	}
	if s := (IntValue{new(int)}).String(); s != "0" {
		t.Errorf("String = %q", s)
	}
}

func TestFromEnvModelAndMetrics(t *testing.T) {
	t.Parallel()
	env := map[string]string{EnvAIPModelDir: "file:///aip/model", EnvMetricFile: "/m.jsonl", EnvTrialID: "3", EnvAIPCheckpointDir: "file:///aip/ck"}
	var cfg Config
	if err := cfg.FromEnv(func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if cfg.OutDir != "/aip/model" || cfg.CheckpointDir != "/aip/ck" || cfg.MetricFile != "/m.jsonl" || cfg.TrialID != "3" {
		t.Fatalf("FromEnv = %+v", cfg)
	}
	env[EnvModelDir] = "/loom/model"
	cfg = Config{}
	_ = cfg.FromEnv(func(k string) string { return env[k] })
	if cfg.OutDir != "/loom/model" {
		t.Fatalf("OutDir = %q, want LOOM_MODEL_DIR first", cfg.OutDir)
	}
}

package trainer

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
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

func TestCorruptLatestCheckpointIsSkipped(t *testing.T) {
	t.Parallel()
	cases := map[string]func(b []byte) []byte{
		"torn":  func(b []byte) []byte { return b[:len(b)/2] },
		"empty": func([]byte) []byte { return nil },
		// Still valid JSON: only the checksum tells.
		"checksum": func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"learning_rate": 0.05`), []byte(`"learning_rate": 0.06`), 1)
		},
	}
	for name, corrupt := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(t, 30)
			if _, err := Train(context.Background(), cfg); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(cfg.OutDir, "checkpoint-000030.json")
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, corrupt(b), 0o600); err != nil {
				t.Fatal(err)
			}
			ck, ok, err := LatestCheckpoint(cfg.OutDir)
			if err != nil || !ok || ck.Epoch != 20 {
				t.Fatalf("LatestCheckpoint = epoch %d, %v, %v; want 20, the one before the corrupt one", ck.Epoch, ok, err)
			}
			// Training resumes from epoch 20 and still ends with the
			// uninterrupted run's model.
			want, err := os.ReadFile(filepath.Join(cfg.OutDir, ModelFile))
			if err != nil {
				t.Fatal(err)
			}
			var log bytes.Buffer
			cfg.Log = &log
			if err := os.Remove(filepath.Join(cfg.OutDir, ModelFile)); err != nil {
				t.Fatal(err)
			}
			res, err := Train(context.Background(), cfg)
			if err != nil || res.ResumedFrom != 20 {
				t.Fatalf("resumed from %d, %v; want 20", res.ResumedFrom, err)
			}
			if !strings.HasPrefix(log.String(), "skipping checkpoint checkpoint-000030.json: ") ||
				name == "checksum" && !strings.Contains(log.String(), "checksum mismatch") {
				t.Fatalf("log does not say the corrupt checkpoint was skipped:\n%s", log.String())
			}
			got, err := os.ReadFile(filepath.Join(cfg.OutDir, ModelFile))
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("model after resume differs (%v):\n%s\nwant:\n%s", err, got, want)
			}
		})
	}
}

func TestFromEnv(t *testing.T) {
	t.Parallel()
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	cases := []struct {
		name    string
		flag    string
		getenv  func(string) string
		wantDir string
	}{
		{"loom first", "", env(EnvCheckpointDir, "/a", EnvAIPCheckpointDir, "/b"), "/a"},
		{"vertex next", "", env(EnvAIPCheckpointDir, "/b"), "/b"},
		{"neither", "", env(), ""},
		{"flag wins", "/f", env(EnvCheckpointDir, "/a"), "/f"},
	}
	for _, c := range cases {
		cfg := Config{CheckpointDir: c.flag, OutDir: "/out"}
		if err := cfg.FromEnv(c.getenv); err != nil {
			t.Fatal(err)
		}
		if cfg.CheckpointDir != c.wantDir {
			t.Errorf("%s: CheckpointDir = %q, want %q", c.name, cfg.CheckpointDir, c.wantDir)
		}
		want := c.wantDir
		if want == "" {
			want = "/out"
		}
		if cfg.checkpointDir() != want {
			t.Errorf("%s: checkpoints go to %q, want %q", c.name, cfg.checkpointDir(), want)
		}
	}
	cfg := Config{}
	if err := cfg.FromEnv(env(EnvProgressFile, "/p", EnvRestartCount, "3")); err != nil || cfg.ProgressFile != "/p" || cfg.RestartCount != 3 {
		t.Fatalf("FromEnv = %+v, %v; want progress /p, restart 3", cfg, err)
	}
	if err := cfg.FromEnv(env(EnvRestartCount, "x")); err == nil || !strings.Contains(err.Error(), EnvRestartCount) {
		t.Fatalf("bad restart count: err = %v", err)
	}
}

func TestProgressFile(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, 35)
	cfg.ProgressFile = filepath.Join(t.TempDir(), "progress.json")
	start := time.Now().Add(-time.Second)
	if _, err := Train(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(cfg.ProgressFile)
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatalf("progress file %q: %v", b, err)
	}
	if raw["step"] != float64(35) || raw["checkpoint_step"] != float64(30) || len(raw) != 4 {
		t.Fatalf("progress = %s, want step 35, checkpoint_step 30, checkpoint_time, checkpoint_seconds", b)
	}
	// The saves were timed: more than nothing, less than the whole run.
	if sec, ok := raw["checkpoint_seconds"].(float64); !ok || sec <= 0 || sec > time.Since(start).Seconds() {
		t.Fatalf("checkpoint_seconds %v, want the time the saves took, within the run", raw["checkpoint_seconds"])
	}
	at, err := time.Parse(time.RFC3339, raw["checkpoint_time"].(string))
	if err != nil || at.Before(start.Truncate(time.Second)) || at.After(time.Now()) {
		t.Fatalf("checkpoint_time %v (%v), want RFC 3339 within the run", raw["checkpoint_time"], err)
	}
	// A resumed run reports its checkpoint from the start.
	cfg.Epochs = 1000
	cfg.CheckpointEvery = 0
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Train(ctx, cfg); err == nil {
		t.Fatal("Train ran with a cancelled context")
	}
	b, _ = os.ReadFile(cfg.ProgressFile)
	var p Progress
	if err := json.Unmarshal(b, &p); err != nil || p.Step != 30 || p.CheckpointStep != 30 || p.CheckpointTime == "" ||
		p.CheckpointSeconds != 0 {
		t.Fatalf("progress at resume = %s (%v), want step 30 at checkpoint 30, no checkpointing time of its own yet", b, err)
	}
}

func TestRequestedCheckpoint(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, 5)
	cfg.CheckpointEvery = 0
	req := make(chan os.Signal, 1)
	req <- syscall.SIGUSR1
	cfg.CheckpointRequests = req
	if _, err := Train(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	ck, ok, err := LatestCheckpoint(cfg.OutDir)
	if err != nil || !ok || ck.Epoch != 1 || ck.Checksum == "" {
		t.Fatalf("LatestCheckpoint = %+v, %v, %v; want epoch 1 with a checksum", ck, ok, err)
	}
	entries, _ := os.ReadDir(cfg.OutDir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{ManifestFile, "checkpoint-000001.json", ModelFile}; !slices.Equal(names, want) {
		t.Fatalf("files %v, want the one requested checkpoint, the model and its manifest %v", names, want)
	}
}

// TestRequestedCheckpointOnAnotherRank: a rank other than 0 writes no
// periodic checkpoint, but on a signal it writes one (it holds the same
// state), identical to rank 0's at that epoch, and reports it in its
// progress: a checkpoint on a node's failure comes from whichever rank
// survives.
func TestRequestedCheckpointOnAnotherRank(t *testing.T) {
	t.Parallel()
	ref := testConfig(t, 5)
	ref.CheckpointEvery = 1
	if _, err := Train(context.Background(), ref); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, 5)
	cfg.Rank, cfg.OutDir, cfg.CheckpointEvery = 1, "", 2
	cfg.CheckpointDir = t.TempDir()
	cfg.ProgressFile = filepath.Join(t.TempDir(), "progress.json")
	req := make(chan os.Signal, 1)
	req <- syscall.SIGUSR1
	cfg.CheckpointRequests = req
	if _, err := Train(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(cfg.CheckpointDir)
	if len(entries) != 1 || entries[0].Name() != "checkpoint-000001.json" {
		t.Fatalf("rank 1 wrote %v, want only the requested checkpoint at epoch 1", entries)
	}
	got, _ := os.ReadFile(filepath.Join(cfg.CheckpointDir, entries[0].Name()))
	want, _ := os.ReadFile(filepath.Join(ref.OutDir, entries[0].Name()))
	if len(want) == 0 || string(got) != string(want) {
		t.Fatalf("rank 1's checkpoint differs from rank 0's:\n%s\n%s", got, want)
	}
	b, _ := os.ReadFile(cfg.ProgressFile)
	var p Progress
	if err := json.Unmarshal(b, &p); err != nil || p.CheckpointStep != 1 {
		t.Fatalf("rank 1's progress = %s (%v), want checkpoint 1", b, err)
	}
}

// TestResumeOnlyOwnJobsCheckpoints: a checkpoint records the job that
// wrote it; the same job's next run resumes from it. Another job's (a
// reused output directory) is set aside into job-<id>/, untouched, and the
// new job starts from epoch 0, even with the same settings. Checkpoints
// that record no job, and runs that know none, resume as before.
func TestResumeOnlyOwnJobsCheckpoints(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first := testConfig(t, 10)
	first.OutDir, first.JobID = dir, "7"
	if _, err := Train(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	st, _, err := readCheckpoint(filepath.Join(dir, checkpointName(10)))
	if err != nil || st.JobID != "7" {
		t.Fatalf("checkpoint's job %q (%v), want 7", st.JobID, err)
	}
	again := first
	again.Epochs = 20
	if res, err := Train(context.Background(), again); err != nil || res.ResumedFrom != 10 {
		t.Fatalf("job 7's next run: resumed from %d, %v; want 10", res.ResumedFrom, err)
	}
	other := again
	other.JobID, other.Epochs = "8", 10
	var log bytes.Buffer
	other.Log = &log
	res, err := Train(context.Background(), other)
	if err != nil || res.ResumedFrom != 0 || !strings.Contains(log.String(), "set job 7's checkpoints aside to "+filepath.Join(dir, "job-7")) {
		t.Fatalf("job 8 in job 7's directory: resumed from %d, %v; log %q", res.ResumedFrom, err, log.String())
	}
	if st, _, err := readCheckpoint(filepath.Join(dir, "job-7", checkpointName(20))); err != nil || st.JobID != "7" || st.Epoch != 20 {
		t.Fatalf("job 7's checkpoint set aside: %+v, %v", st, err)
	}
	if st, _, err := readCheckpoint(filepath.Join(dir, checkpointName(10))); err != nil || st.JobID != "8" {
		t.Fatalf("job 8's own checkpoint: %+v, %v", st, err)
	}
	anyone := other
	anyone.JobID, anyone.Epochs, anyone.Log = "", 12, nil
	if res, err := Train(context.Background(), anyone); err != nil || res.ResumedFrom != 10 {
		t.Fatalf("a run with no job: resumed from %d, %v; want 10", res.ResumedFrom, err)
	}
}

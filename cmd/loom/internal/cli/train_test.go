package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/loom-ml/loom/cmd/loom/internal/trainer"
)

// TestTrainProcessEnvAndSignal runs `loom train` as a process (this test
// binary re-executed, see TestMain) the way a Loom job runs it: the
// checkpoint directory and progress file come from the environment, and
// SIGUSR1 makes it checkpoint. A second run resumes from that checkpoint.
func TestTrainProcessEnvAndSignal(t *testing.T) {
	t.Parallel()
	out, ck := t.TempDir(), t.TempDir()
	progress := filepath.Join(t.TempDir(), "progress.json")
	start := func(restart string, args ...string) (*exec.Cmd, *bytes.Buffer) {
		cmd := exec.Command(os.Args[0], append([]string{"train", "--out", out, "--log-every", "1"}, args...)...)
		cmd.Env = append(os.Environ(), "AIP_CHECKPOINT_DIR="+ck, "LOOM_PROGRESS_FILE="+progress, "LOOM_RESTART_COUNT="+restart)
		var stdout bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stdout
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if cmd.ProcessState == nil {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}
		})
		return cmd, &stdout
	}
	cmd, stdout := start("0", "--epochs", "1000000", "--checkpoint-every", "0", "--step-time", "2ms")
	// The progress file is written once the SIGUSR1 handler is in place.
	waitTrain(t, "the progress file", func() bool { _, err := os.Stat(progress); return err == nil })
	if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	var p trainer.Progress
	waitTrain(t, "a checkpoint in the progress file", func() bool {
		b, err := os.ReadFile(progress)
		return err == nil && json.Unmarshal(b, &p) == nil && p.CheckpointStep > 0
	})
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	st, ok, err := trainer.LatestCheckpoint(ck)
	if err != nil || !ok || st.Epoch != p.CheckpointStep {
		t.Fatalf("checkpoint in AIP_CHECKPOINT_DIR: epoch %d, %v, %v; progress says %d\n%s", st.Epoch, ok, err, p.CheckpointStep, stdout)
	}
	if entries, _ := os.ReadDir(out); len(entries) != 0 {
		t.Fatalf("%d files in --out, want the checkpoint in AIP_CHECKPOINT_DIR only", len(entries))
	}

	epochs := st.Epoch + 5
	cmd, stdout = start("1", "--epochs", strconv.Itoa(epochs))
	if err := cmd.Wait(); err != nil {
		t.Fatalf("resumed run: %v\n%s", err, stdout)
	}
	lines := strings.Split(stdout.String(), "\n")
	if want := "resuming from checkpoint at epoch " + strconv.Itoa(st.Epoch) + " ("; !strings.HasPrefix(lines[0], want) || !strings.HasSuffix(lines[0], ", restart 1)") {
		t.Fatalf("first line %q, want %q... restart 1)", lines[0], want)
	}
	if want := "epoch " + strconv.Itoa(st.Epoch+1) + " loss "; !strings.HasPrefix(lines[1], want) {
		t.Fatalf("second line %q, want %q...", lines[1], want)
	}
	if _, err := os.Stat(filepath.Join(out, trainer.ModelFile)); err != nil {
		t.Fatal(err)
	}
}

// waitTrain polls cond for up to 30 s.
func waitTrain(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 30s", what)
		}
		time.Sleep(time.Millisecond) // polling interval, not synchronisation
	}
}

// TestTrainVertexStyle runs `loom train` as a tuning trial's CustomJob does:
// hyperparameters as --<parameter>=<value> (a discrete one written as a
// float, one spelt with dashes), the directories and the metric file from
// Vertex's environment variables. The MLP is chosen, its model and MANIFEST
// land in AIP_MODEL_DIR, and every epoch appends a hypertune line.
func TestTrainVertexStyle(t *testing.T) {
	t.Parallel()
	model, ck := t.TempDir(), t.TempDir()
	metrics := filepath.Join(t.TempDir(), "hp.jsonl")
	cmd := exec.Command(os.Args[0], "train", "--learning_rate=0.3", "--batch_size=32.0", "--hidden-units=16",
		"--epochs=8", "--checkpoint-every=4")
	cmd.Env = append(os.Environ(), "AIP_MODEL_DIR=file://"+model, "AIP_CHECKPOINT_DIR="+ck,
		"CLOUD_ML_HP_METRIC_FILE="+metrics, "CLOUD_ML_TRIAL_ID=2")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("loom train: %v\n%s", err, out)
	}
	var m trainer.MLPModel
	b, err := os.ReadFile(filepath.Join(model, trainer.ModelFile))
	if err != nil || json.Unmarshal(b, &m) != nil {
		t.Fatalf("model.json: %v\n%s", err, out)
	}
	h := m.Hyperparameters
	if m.Kind != "mlp-classifier" || h.LearningRate != 0.3 || h.BatchSize != 32 || h.HiddenUnits != 16 || m.Epochs != 8 || len(m.Network.W1) != 16 {
		t.Fatalf("model %+v, want an mlp with the flags' hyperparameters", h)
	}
	if names, err := trainer.VerifyManifest(model); err != nil || len(names) != 1 {
		t.Fatalf("MANIFEST: %v, %v", names, err)
	}
	lines := strings.Split(strings.TrimSpace(readTrainFile(t, metrics)), "\n")
	if len(lines) != 8 {
		t.Fatalf("%d metric lines, want 8", len(lines))
	}
	for i, line := range lines {
		r := parseMetricLine(t, line)
		if v, ok := r["val_loss"].(float64); r["trial"] != "2" || r["global_step"] != strconv.Itoa(i+1) || !ok || !(v > 0) || len(r) != 5 {
			t.Fatalf("metric line %q, want trial 2, global_step %d", line, i+1)
		}
	}
	if p := parseMetricLine(t, lines[7])["val_loss"]; p != m.Metrics.ValLoss {
		t.Fatalf("last val_loss %v, model's %v", p, m.Metrics.ValLoss)
	}
	if st, ok, err := trainer.LatestCheckpoint(ck); err != nil || !ok || st.Epoch != 8 {
		t.Fatalf("checkpoint in AIP_CHECKPOINT_DIR: epoch %d, %v, %v", st.Epoch, ok, err)
	}
}

// TestTrainModelChoice: bad combinations are usage errors naming the flag.
func TestTrainModelChoice(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--hidden_units", "8", "--samples", "10"}, "give one model's flags"},
		{[]string{"--batch_size=3.5"}, `"3.5" is not an integer`},
		{[]string{"--model", "linear", "--weight-decay", "0.1"}, "--weight_decay is --model mlp's"},
		{[]string{"--learning_rate", "0"}, "--learning_rate must be a positive finite number"},
	} {
		cmd := exec.Command(os.Args[0], append([]string{"train", "--out", t.TempDir()}, c.args...)...)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), c.want) {
			t.Errorf("loom train %v: %v\n%s\nwant exit 2 and %q", c.args, err, out, c.want)
		}
	}
}

func readTrainFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func parseMetricLine(t *testing.T, line string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestGuideStudiesRunOnTheBuiltInTrainer: every tuning study of
// docs/training.md and examples/training whose trials run the built-in
// trainer (`loom train`) searches only parameters the trainer takes as
// flags (Vertex passes each as --<parameter_id>=<value>), and the trial
// command's own flags parse. A parameter the trainer lacks makes every
// trial exit 2 (unknown flag) and the study fail at once, which is what a
// reader who runs the guide's example would see.
func TestGuideStudiesRunOnTheBuiltInTrainer(t *testing.T) {
	t.Parallel()
	type source struct{ name, body string }
	var sources []source
	doc, err := os.ReadFile("../../../../docs/training.md")
	if err != nil {
		t.Fatal(err)
	}
	for i, block := range strings.Split(string(doc), "```json\n")[1:] {
		sources = append(sources, source{"docs/training.md JSON example " + strconv.Itoa(i+1), block[:strings.Index(block, "```")]})
	}
	files, err := filepath.Glob("../../../../examples/training/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("examples/training: %v %v", files, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sources = append(sources, source{f, string(b)})
	}
	studies := 0
	for _, src := range sources {
		var m map[string]any
		if err := json.Unmarshal([]byte(src.body), &m); err != nil {
			t.Errorf("%s: %v", src.name, err)
			continue
		}
		// A tuning job, or a pipeline's tuning task.
		study, trial := m["studySpec"], m["trialJobSpec"]
		if in, ok := m["trainingTaskInputs"].(map[string]any); ok && in["studySpec"] != nil {
			study, trial = in["studySpec"], in["trialJobSpec"]
		}
		if study == nil {
			continue
		}
		argv := builtInTrainerArgs(trial)
		if argv == nil {
			continue
		}
		studies++
		var ids []string
		var collect func(ps any)
		collect = func(ps any) {
			list, _ := ps.([]any)
			for _, p := range list {
				p, _ := p.(map[string]any)
				if id, _ := p["parameterId"].(string); id != "" {
					ids = append(ids, id)
				}
				conds, _ := p["conditionalParameterSpecs"].([]any)
				for _, c := range conds {
					c, _ := c.(map[string]any)
					collect([]any{c["parameterSpec"]})
				}
			}
		}
		collect(study.(map[string]any)["parameters"])
		cmd := newApp().trainCommand()
		for _, id := range ids {
			if cmd.Flags().Lookup(id) == nil {
				t.Errorf("%s: the study searches %q, which `loom train` does not take: every trial would exit 2 (unknown flag --%s)", src.name, id, id)
			}
		}
		if err := cmd.ParseFlags(argv); err != nil {
			t.Errorf("%s: the trial command `loom train %s`: %v", src.name, strings.Join(argv, " "), err)
		}
	}
	if studies < 2 {
		t.Fatalf("found %d studies on the built-in trainer, want the guide's and examples/training's", studies)
	}
}

// builtInTrainerArgs is the flags every pool of a CustomJobSpec (decoded as
// JSON) gives `loom train`, or nil when a pool runs something else.
func builtInTrainerArgs(spec any) []string {
	s, _ := spec.(map[string]any)
	pools, _ := s["workerPoolSpecs"].([]any)
	argv := []string{}
	for _, p := range pools {
		p, _ := p.(map[string]any)
		c, _ := p["containerSpec"].(map[string]any)
		var words []string
		for _, k := range []string{"command", "args"} {
			list, _ := c[k].([]any)
			for _, w := range list {
				w, _ := w.(string)
				words = append(words, w)
			}
		}
		if len(words) < 2 || words[0] != "loom" || words[1] != "train" {
			return nil
		}
		argv = append(argv, words[2:]...)
	}
	if len(pools) == 0 {
		return nil
	}
	return argv
}

package cli

import (
	"bytes"
	"encoding/json"
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

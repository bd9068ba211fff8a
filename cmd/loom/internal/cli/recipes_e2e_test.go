package cli

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// TestRecipeSmallVariantRunsEndToEnd launches a recipe's small variant
// with `loom recipes launch --small --wait` on the embedded stack: the
// rendered script goes through sbatch's parsing and the gateway, the
// scheduler places it, an agent runs it, and the built-in trainer trains
// for real; the job must complete and its output show the training.
func TestRecipeSmallVariantRunsEndToEnd(t *testing.T) {
	t.Parallel()
	s := startTrainingStack(t, 4*time.Minute)
	loom := s.loom
	file := writeFile(t, "cluster.json", `{"name": "recipes", "compute": {"nodePools": [{"id": "cpu", "machineType": "n2-standard-8", "nodeCount": 1}]}}`)
	if out, errOut, code := loom("clusters", "create", "-f", file); code != 0 {
		t.Fatalf("create cluster: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code := loom("recipes", "launch", "llama3-8b-sft", "--cluster", "recipes", "--small", "--set", "small.epochs=12", "--wait")
	if code != 0 || !strings.Contains(out, "Submitted recipe llama3-8b-sft v1 as job 1 on cluster recipes\n") ||
		!strings.Contains(out, "  COMPLETED (exit 0)\n") {
		logs, _, _ := loom("jobs", "logs", "1")
		t.Fatalf("launch --small --wait: exit %d\n%s%s\njob output:\n%s", code, out, errOut, logs)
	}
	logs, errOut, code := loom("jobs", "logs", "1")
	if code != 0 || !strings.Contains(logs, "epoch 12") {
		t.Errorf("job output (exit %d, %s) lacks the 12th epoch:\n%s", code, errOut, logs)
	}
	job, _, _ := loom("jobs", "get", "1", "-o", "json")
	if !strings.Contains(job, `"LOOM_RECIPE": "llama3-8b-sft@1"`) || !strings.Contains(job, `"displayName": "llama3-8b-sft-small"`) {
		t.Errorf("job:\n%s", job)
	}

	// Continued training: --from-checkpoint points the trainer's checkpoints
	// at a directory; a second launch from it completes too.
	ck := t.TempDir()
	for i, epochs := range []string{"60", "70"} {
		out, errOut, code := loom("recipes", "launch", "llama3-8b-sft", "--cluster", "recipes", "--small",
			"--from-checkpoint", "file://"+ck, "--set", "small.epochs="+epochs, "--wait")
		if code != 0 || !strings.Contains(out, "  COMPLETED (exit 0)\n") {
			logs, _, _ := loom("jobs", "logs", fmt.Sprint(i+2))
			t.Fatalf("launch --small --from-checkpoint (%s epochs): exit %d\n%s%s\njob output:\n%s", epochs, code, out, errOut, logs)
		}
		if entries, err := os.ReadDir(ck); err != nil || len(entries) == 0 {
			t.Fatalf("no checkpoint in the --from-checkpoint directory after %s epochs (%v)", epochs, err)
		}
	}
	logs, _, _ = loom("jobs", "logs", "3")
	t.Logf("output of the job launched from the checkpoint:\n%s", logs)
}

package slurmcli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loom-ml/loom/cmd/loom/internal/fakegw"
	"github.com/loom-ml/loom/libs/slurmmap"
)

// TestSlurmBackendRefusal checks that the gateway's refusal of what the
// scheduler's Slurm backend does not map (FailedPrecondition, libs/slurmmap)
// reaches the user: printed with its reason and the doc, and a failing
// exit code, never a success.
func TestSlurmBackendRefusal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "train.sh"), []byte("#!/bin/bash\ntrue\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	refusal := func(what string) error {
		return status.Error(codes.FailedPrecondition, slurmmap.Refuse(what).Error())
	}
	f := &fakegw.Gateway{SubmitErr: refusal("job arrays (--array)")}
	code, out, errOut := run(t, f, "sbatch", Env{Cwd: dir}, "--array=0-3", "train.sh")
	if code == 0 || out != "" || !strings.Contains(errOut, "job arrays (--array) is not supported by the slurm scheduler backend") ||
		!strings.Contains(errOut, "docs/slurm-backend.md") {
		t.Errorf("sbatch --array refused: %d %q %q", code, out, errOut)
	}
	f = fixture()
	f.UpdateJobErr = refusal("scontrol requeue/update (UpdateJob update)")
	code, out, errOut = run(t, f, "scontrol", Env{}, "update", "JobId=12", "TimeLimit=10")
	if code == 0 || !strings.Contains(errOut, "scontrol requeue/update (UpdateJob update) is not supported") ||
		!strings.Contains(errOut, "docs/slurm-backend.md") {
		t.Errorf("scontrol update refused: %d %q %q", code, out, errOut)
	}
}

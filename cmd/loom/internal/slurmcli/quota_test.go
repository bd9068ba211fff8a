package slurmcli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loom-ml/loom/cmd/loom/internal/fakegw"
)

// sbatch past MaxSubmitJobs says so in Slurm's words, then which limit.
func TestSbatchJobQuota(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "train.sh"), []byte("#!/bin/bash\ntrue\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	limit := "user alice in project default: 4 jobs would exceed MaxSubmitJobs of 3 (LOOM_GATEWAY_MAX_SUBMIT_JOBS): 3 pending or running, 1 submitted: resource exhausted"
	f := &fakegw.Gateway{SubmitErr: status.Error(codes.ResourceExhausted, limit)}
	code, out, errOut := run(t, f, "sbatch", Env{Cwd: dir}, "train.sh")
	if code == 0 || out != "" || !strings.HasPrefix(errOut, "sbatch: error: Batch job submission failed: "+
		"Job violates accounting/QOS policy (job submit limit, user's size and/or time limits) ("+limit+")") {
		t.Errorf("sbatch past MaxSubmitJobs: %d %q %q", code, out, errOut)
	}
	// A rate limit is not a job quota: the gateway's words.
	f = &fakegw.Gateway{SubmitErr: status.Error(codes.ResourceExhausted, "users/alice: more than 1000 requests a second (LOOM_GATEWAY_RATE)")}
	if code, _, errOut := run(t, f, "sbatch", Env{Cwd: dir}, "train.sh"); code == 0 || strings.Contains(errOut, "accounting/QOS") ||
		!strings.Contains(errOut, "LOOM_GATEWAY_RATE") {
		t.Errorf("sbatch rate limited: %d %q", code, errOut)
	}
}

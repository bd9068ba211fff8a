package slurmcli

import (
	"testing"

	"github.com/loom-ml/loom/cmd/loom/internal/fakegw"
)

// TestSbatchNamesTheClusterOfM: a cluster named with -M (or
// SBATCH_CLUSTERS) follows the job id, as Slurm 22.05's sbatch prints its
// working cluster: "ID;CLUSTER" with --parsable (what scripts split on
// ';'), "Submitted batch job ID on cluster CLUSTER" without; with no -M,
// the id alone.
func TestSbatchNamesTheClusterOfM(t *testing.T) {
	t.Parallel()
	env := Env{Cwd: t.TempDir()}
	envM := env
	envM.Environ = map[string]string{"SBATCH_CLUSTERS": "other"}
	for _, tc := range []struct {
		env  Env
		args []string
		want string
	}{
		{env, []string{"--parsable", "-M", "other", "--wrap", "true"}, "1;other\n"},
		{env, []string{"--parsable", "--clusters=projects/default/clusters/other", "--wrap", "true"}, "1;other\n"},
		{env, []string{"-M", "other", "--wrap", "true"}, "Submitted batch job 1 on cluster other\n"},
		{envM, []string{"--parsable", "--wrap", "true"}, "1;other\n"},
		{env, []string{"--parsable", "--wrap", "true"}, "1\n"},
		{env, []string{"-Q", "--parsable", "-M", "other", "--wrap", "true"}, ""},
	} {
		f := &fakegw.Gateway{}
		code, out, errOut := run(t, f, "sbatch", tc.env, tc.args...)
		if code != 0 || out != tc.want || errOut != "" {
			t.Errorf("sbatch %q = %d %q %q, want %q", tc.args, code, out, errOut, tc.want)
		}
	}
}

package slurmspec

import (
	"maps"
	"testing"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestJobGPUEnv: the GPU variables of a job's batch script and salloc
// shell, each row as Slurm 22.05's sbatch exported them (measured):
// --gres=gpu:N exports none, and --gpus-per-task stands alone beside the
// counts Loom derives from it, a --gpus given (gpus_given) beside it.
func TestJobGPUEnv(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		job  *loomv1.Job
		want map[string]string
	}{
		{"none", &loomv1.Job{}, map[string]string{}},
		{"--gpus=2", &loomv1.Job{Gpus: 2}, map[string]string{"SLURM_GPUS": "2"}},
		{"--gpus-per-node=2", &loomv1.Job{GpusPerNode: 2}, map[string]string{"SLURM_GPUS_PER_NODE": "2"}},
		{"--gres=gpu:2", &loomv1.Job{GpusPerNode: 2, GresGpus: true}, map[string]string{}},
		{"-n2 --gpus-per-task=1", &loomv1.Job{GpusPerTask: 1, Gpus: 2, GpusPerNode: 2}, map[string]string{"SLURM_GPUS_PER_TASK": "1"}},
		{"--gpus=4 --gpus-per-task=2", &loomv1.Job{GpusPerTask: 2, Gpus: 4, GpusGiven: true, Ntasks: 2},
			map[string]string{"SLURM_GPUS": "4", "SLURM_GPUS_PER_TASK": "2"}},
	} {
		got := map[string]string{}
		JobGPUEnv(tc.job, got)
		if !maps.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

package stack

import (
	"errors"
	"os"
	"path/filepath"
	"strings"

	"github.com/loom-ml/loom/cmd/loom/internal/nvsmi"
	"github.com/loom-ml/loom/libs/gpu"
)

// linkNvidiaSMI puts a link named nvidia-smi to exe in bin, the local
// agents' Slurm-commands directory that leads every job's PATH, when the
// agents' GPUs will be simulated: LOOM_AGENT_GPU_MODE=simulated (in
// agentEnv or this process's environment), or no NVIDIA driver loads on
// this machine. Otherwise a link left by an earlier start is removed, so
// that jobs find NVIDIA's own nvidia-smi.
func linkNvidiaSMI(bin, exe string, agentEnv []string) error {
	mode := os.Getenv("LOOM_AGENT_GPU_MODE")
	for _, kv := range agentEnv {
		if v, ok := strings.CutPrefix(kv, "LOOM_AGENT_GPU_MODE="); ok {
			mode = v
		}
	}
	simulated := mode == "simulated" || (mode != "nvml" && !gpu.NVMLAvailable())
	if simulated {
		return nvsmi.Link(bin, exe)
	}
	if err := os.Remove(filepath.Join(bin, nvsmi.Name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

package stack

import (
	"os"
	"path/filepath"
	"testing"
)

func TestLinkNvidiaSMI(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	exe := filepath.Join(t.TempDir(), "loom")
	link := filepath.Join(bin, "nvidia-smi")
	if err := linkNvidiaSMI(bin, exe, []string{"LOOM_AGENT_GPU_MODE=nvml", "LOOM_AGENT_GPU_MODE=simulated"}); err != nil {
		t.Fatal(err)
	}
	if to, err := os.Readlink(link); err != nil || to != exe {
		t.Fatalf("nvidia-smi -> %q, %v; want %s", to, err, exe)
	}
	// Real GPUs: the jobs' nvidia-smi is NVIDIA's, not a link left before.
	if err := linkNvidiaSMI(bin, exe, []string{"LOOM_AGENT_GPU_MODE=nvml"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(link); !os.IsNotExist(err) {
		t.Errorf("nvidia-smi left for real GPUs: %v", err)
	}
}

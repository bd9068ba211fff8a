package cli

import (
	"bytes"
	"context"
	"os"
	"slices"
	"strings"
	"testing"
)

// loom started as nvidia-smi (a link on a simulated node's PATH) is the
// node's nvidia-smi, not loom's command line.
func TestNvidiaSMIDispatch(t *testing.T) {
	t.Parallel()
	if got := Args("/data/bin/nvidia-smi", []string{"-q"}); !slices.Equal(got, []string{"nvidia-smi", "-q"}) {
		t.Fatalf("Args = %q", got)
	}
	if os.Getenv("LOOM_GPU_STATE_DIR") != "" || os.Getenv("LOOM_WORK_DIR") != "" {
		t.Skip("the environment names a node's GPUs")
	}
	var out, errb bytes.Buffer
	// The test's environment names no simulated GPUs (no
	// LOOM_GPU_STATE_DIR): nvidia-smi says what it says with no driver.
	code := Execute(context.Background(), Args("nvidia-smi", nil), &out, &errb)
	if code != 9 || !strings.HasPrefix(out.String(), "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.") {
		t.Errorf("exit %d, %q %q", code, out.String(), errb.String())
	}
}

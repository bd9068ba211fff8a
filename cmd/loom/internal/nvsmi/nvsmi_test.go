package nvsmi

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/gpu"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

var at = time.Date(2026, 12, 2, 4, 40, 0, 0, time.UTC)

// node makes a node's simulated GPUs (8 H200) and returns their state dir.
func node(t *testing.T, faults ...*loomv1.Fault) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "gpu")
	s, err := gpu.OpenSimulated(gpu.Options{Count: 8, StateDir: dir, Seed: 42, Now: func() time.Time { return at }})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range faults {
		if err := s.Inject(f); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func run(t *testing.T, dir string, args ...string) (string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	env := func(k string) string {
		if k == gpu.StateDirEnv {
			return dir
		}
		return ""
	}
	code := Main(args, env, at.Add(time.Minute), &out, &errb)
	return out.String() + errb.String(), code
}

func TestTable(t *testing.T) {
	t.Parallel()
	dir := node(t, &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_ECC_DBE, Gpu: 2, Value: 2})
	out, code := run(t, dir)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	lines := strings.Split(out, "\n")
	for _, l := range lines {
		if strings.HasPrefix(l, "|") || strings.HasPrefix(l, "+") {
			if len(l) != 91 {
				t.Errorf("line %q is %d wide, not 91", l, len(l))
			}
		}
	}
	for _, want := range []string{"Driver Version: 570.124.06", "CUDA Version: 12.8",
		"|   0  NVIDIA H200                    On  |   00000000:18:00.0 Off |                    0 |",
		"|   2  NVIDIA H200                    On  |   00000000:3A:00.0 Off |                    2 |",
		"1MiB / 143771MiB", "No running processes found"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "NVIDIA H200"); n != 8 {
		t.Errorf("%d GPUs in the table", n)
	}
}

func TestTableLostGPU(t *testing.T) {
	t.Parallel()
	dir := node(t, &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_FALLEN_OFF_BUS, Gpu: 3})
	out, code := run(t, dir)
	if code != exitGPUIsLost || !strings.HasPrefix(out, "Unable to determine the device handle for GPU0000:5D:00.0: GPU is lost.") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	if n := strings.Count(out, "NVIDIA H200"); n != 7 {
		t.Errorf("%d GPUs in the table, want the 7 left", n)
	}
}

func TestQueryCSV(t *testing.T) {
	t.Parallel()
	dir := node(t,
		&loomv1.Fault{Kind: loomv1.FaultKind_FAULT_ECC_DBE, Gpu: 1, Value: 3},
		&loomv1.Fault{Kind: loomv1.FaultKind_FAULT_FALLEN_OFF_BUS, Gpu: 7})
	// Cluster Health Scanner's pre-check.
	out, code := run(t, dir, "--query-gpu=ecc.errors.uncorrected.volatile.total", "--format=csv,noheader")
	want := "0\n3\n0\n0\n0\n0\n0\n[GPU is lost]\n"
	if out != want || code != exitGPUIsLost {
		t.Errorf("ECC query = %q (exit %d), want %q", out, code, want)
	}
	out, code = run(t, dir, "--query-gpu=index,name,uuid,temperature.gpu,power.draw,utilization.gpu,memory.used,memory.total,clocks.sm,clocks.mem", "--format=csv", "-i", "0")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	if lines[0] != "index, name, uuid, temperature.gpu, power.draw [W], utilization.gpu [%], memory.used [MiB], memory.total [MiB], clocks.sm [MHz], clocks.mem [MHz]" {
		t.Errorf("header %q", lines[0])
	}
	vals := strings.Split(lines[1], ", ")
	if len(vals) != 10 || vals[0] != "0" || vals[1] != "NVIDIA H200" || !strings.HasPrefix(vals[2], "GPU-") ||
		!strings.HasSuffix(vals[4], " W") || vals[5] != "0 %" || vals[6] != "1 MiB" || vals[7] != "143771 MiB" || vals[9] != "3201 MHz" {
		t.Errorf("values %q", vals)
	}
	out, _ = run(t, dir, "--query-gpu=memory.total,clocks.mem", "--format=csv,noheader,nounits", "--id=1")
	if out != "143771, 3201\n" {
		t.Errorf("nounits = %q", out)
	}
	if out, code := run(t, dir, "--query-gpu=bogus", "--format=csv"); code != exitBadArgs || !strings.Contains(out, `Field "bogus" is not a valid field to query.`) {
		t.Errorf("bogus field: exit %d %q", code, out)
	}
	if _, code := run(t, dir, "--query-gpu=index"); code != exitBadArgs {
		t.Errorf("no --format: exit %d", code)
	}
}

func TestQueryFull(t *testing.T) {
	t.Parallel()
	dir := node(t,
		&loomv1.Fault{Kind: loomv1.FaultKind_FAULT_ROW_REMAP_FAILURE, Gpu: 0},
		&loomv1.Fault{Kind: loomv1.FaultKind_FAULT_THERMAL, Gpu: 0})
	var out string
	// Thermal runaway: 5 minutes in, the board throttles.
	func() {
		var b bytes.Buffer
		env := func(k string) string {
			if k == gpu.StateDirEnv {
				return dir
			}
			return ""
		}
		if code := Main([]string{"-q", "-i", "0"}, env, at.Add(5*time.Minute), &b, &b); code != 0 {
			t.Fatalf("exit %d:\n%s", code, b.String())
		}
		out = b.String()
	}()
	for _, want := range []string{
		"==============NVSMI LOG==============",
		"Attached GPUs                             : 8",
		"GPU 00000000:18:00.0",
		"    Product Name                          : NVIDIA H200",
		"        Remapping Failure Occurred        : Yes",
		"        Pending                           : Yes",
		"            HW Thermal Slowdown           : Active",
		"        SW Thermal Slowdown               : Active",
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("-q lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "GPU 00000000:2A:00.0") {
		t.Error("-i 0 printed GPU 1")
	}
}

func TestNoGPUsHere(t *testing.T) {
	t.Parallel()
	out, code := run(t, t.TempDir())
	if code != exitNoDriver || !strings.HasPrefix(out, "NVIDIA-SMI has failed") {
		t.Errorf("exit %d %q", code, out)
	}
	out, code = run(t, node(t), "-L")
	if code != 0 || !strings.HasPrefix(out, "GPU 0: NVIDIA H200 (UUID: GPU-") || strings.Count(out, "\n") != 8 {
		t.Errorf("-L: exit %d %q", code, out)
	}
}

var (
	buildOnce sync.Once
	loomBin   string
	buildErr  error
	buildOut  []byte
)

// TestBinaryAsNvidiaSMI runs the built loom executable through a link
// named nvidia-smi, as a job on the node does.
func TestBinaryAsNvidiaSMI(t *testing.T) {
	if testing.Short() {
		t.Skip("builds loom")
	}
	t.Parallel()
	buildOnce.Do(func() {
		d, err := os.MkdirTemp("", "loom-nvsmi-")
		if err != nil {
			buildErr = err
			return
		}
		loomBin = filepath.Join(d, "loom")
		buildOut, buildErr = exec.Command("go", "build", "-o", loomBin, "github.com/loom-ml/loom/cmd/loom").CombinedOutput()
	})
	if buildErr != nil {
		t.Fatalf("build loom: %v\n%s", buildErr, buildOut)
	}
	t.Cleanup(func() { _ = os.RemoveAll(filepath.Dir(loomBin)) })
	dir := node(t, &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_ECC_DBE, Gpu: 4})
	bin := t.TempDir()
	if err := Link(bin, loomBin); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(bin, Name), "--query-gpu=index,ecc.errors.uncorrected.volatile.total", "--format=csv,noheader")
	cmd.Env = []string{gpu.StateDirEnv + "=" + dir, "PATH=/usr/bin:/bin"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("nvidia-smi: %v\n%s", err, out)
	}
	if want := "0, 0\n1, 0\n2, 0\n3, 0\n4, 1\n5, 0\n6, 0\n7, 0\n"; string(out) != want {
		t.Errorf("nvidia-smi printed %q, want %q", out, want)
	}
	// The default table, through the work dir the agent's environment names.
	cmd = exec.Command(filepath.Join(bin, Name))
	cmd.Env = []string{"LOOM_WORK_DIR=" + filepath.Dir(dir)}
	out, err = cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "|   4  NVIDIA H200                    On  |   00000000:9A:00.0 Off |                    1 |") {
		t.Errorf("nvidia-smi: %v\n%s", err, out)
	}
}

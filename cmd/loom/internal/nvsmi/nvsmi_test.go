package nvsmi

import (
	"bytes"
	"fmt"
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
	// The header and idle memory as NVIDIA's nvidia-smi printed them on an
	// H200 (driver 580.159.04, bench/REPORT.md).
	for _, want := range []string{"| NVIDIA-SMI 580.159.04             Driver Version: 580.159.04     CUDA Version: 13.0     |",
		"|   0  NVIDIA H200                    On  |   00000000:18:00.0 Off |                    0 |",
		"|   2  NVIDIA H200                    On  |   00000000:3A:00.0 Off |                    2 |",
		"|       0MiB / 143771MiB |", "No running processes found"} {
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
	if lines[0] != "index, name, uuid, temperature.gpu, power.draw [W], utilization.gpu [%], memory.used [MiB], memory.total [MiB], clocks.current.sm [MHz], clocks.current.memory [MHz]" {
		t.Errorf("header %q", lines[0])
	}
	vals := strings.Split(lines[1], ", ")
	if len(vals) != 10 || vals[0] != "0" || vals[1] != "NVIDIA H200" || !strings.HasPrefix(vals[2], "GPU-") ||
		!strings.HasSuffix(vals[4], " W") || vals[5] != "0 %" || vals[6] != "0 MiB" || vals[7] != "143771 MiB" || vals[9] != "3201 MHz" {
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
	kv := func(indent int, k, v string) string {
		return fmt.Sprintf("%-55s: %s", strings.Repeat("    ", indent)+k, v)
	}
	for _, want := range []string{
		"==============NVSMI LOG==============",
		kv(0, "Attached GPUs", "8"),
		"GPU 00000000:18:00.0",
		kv(1, "Product Name", "NVIDIA H200"),
		kv(2, "Remapping Failure Occurred", "Yes"),
		kv(2, "Pending", "Yes"),
		kv(3, "HW Thermal Slowdown", "Active"),
		kv(2, "SW Thermal Slowdown", "Active"),
		kv(2, "Reserved", "616 MiB"),
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

// qLabels are the labels of nvidia-smi -q output, each with its sections
// ("GPU/FB Memory Usage/Reserved"), and where each label's colon is.
func qLabels(out string) (labels map[string]bool, colons map[int]int) {
	labels, colons = map[string]bool{}, map[int]int{}
	var path []string
	for _, l := range strings.Split(out, "\n") {
		trimmed := strings.TrimLeft(l, " ")
		if trimmed == "" || strings.HasPrefix(trimmed, "=") {
			continue
		}
		depth := (len(l) - len(trimmed)) / 4
		label, _, hasValue := strings.Cut(trimmed, ":")
		label = strings.TrimSpace(label)
		if depth == 0 && strings.HasPrefix(label, "GPU ") {
			label = "GPU" // GPU 00000000:18:00.0: the bus id differs
		}
		path = append(path[:min(depth, len(path))], label)
		labels[strings.Join(path, "/")] = true
		if hasValue && label != "GPU" {
			colons[strings.Index(l, ":")]++
		}
	}
	return labels, colons
}

// The simulated -q prints what NVIDIA's nvidia-smi printed on an H200
// (driver 580.159.04; testdata/h200-580-q.txt): every label it prints is
// one of the real output's, under the same sections, with the colon in
// the same column. The NVLink error counters are Loom's own addition (the
// real -q has no such lines; nvidia-smi nvlink -e shows them there).
func TestQueryMatchesRealH200(t *testing.T) {
	t.Parallel()
	real, err := os.ReadFile("testdata/h200-580-q.txt")
	if err != nil {
		t.Fatal(err)
	}
	realLabels, realColons := qLabels(string(real))
	if len(realColons) != 1 || realColons[55] == 0 {
		t.Fatalf("fixture's colons: %v", realColons)
	}
	out, code := run(t, node(t), "-q", "-i", "0")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	simLabels, simColons := qLabels(out)
	own := map[string]bool{"GPU/Fabric/NVLink CRC Errors": true, "GPU/Fabric/NVLink Replay Errors": true}
	for l := range simLabels {
		if !realLabels[l] && !own[l] {
			t.Errorf("simulated -q prints %q, which NVIDIA's does not", l)
		}
	}
	if len(simColons) != 1 || simColons[55] == 0 {
		t.Errorf("simulated -q's colons: %v, want all in column 55", simColons)
	}

	// --query-gpu: the same header as NVIDIA's for the same query.
	csv, err := os.ReadFile("testdata/h200-580-query.csv")
	if err != nil {
		t.Fatal(err)
	}
	realHeader, _, _ := strings.Cut(string(csv), "\n")
	var query []string
	for _, h := range strings.Split(realHeader, ", ") {
		name, _, _ := strings.Cut(h, " [")
		query = append(query, name)
	}
	// The query as it was asked: clocks.sm and clocks.mem come back headed
	// by their long names.
	query[13], query[14] = "clocks.sm", "clocks.mem"
	out, code = run(t, node(t), "--query-gpu="+strings.Join(query, ","), "--format=csv", "-i", "0")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	if got, _, _ := strings.Cut(out, "\n"); got != realHeader {
		t.Errorf("header\n got %q\nwant %q", got, realHeader)
	}
}

// The default table has the shape NVIDIA's nvidia-smi gave it on an H200
// (testdata/h200-580-table.txt): line for line, digits aside.
func TestTableMatchesRealH200(t *testing.T) {
	t.Parallel()
	real, err := os.ReadFile("testdata/h200-580-table.txt")
	if err != nil {
		t.Fatal(err)
	}
	out, code := run(t, node(t), "-i", "0")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	shape := func(s string) []string {
		var lines []string
		for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
			l = strings.Map(func(r rune) rune {
				if r >= '0' && r <= '9' {
					return '9'
				}
				return r
			}, l)
			lines = append(lines, strings.NewReplacer("Wed", "Day", "Fri", "Day").Replace(l))
		}
		return lines
	}
	want, got := shape(string(real)), shape(out)
	if len(got) != len(want) {
		t.Fatalf("%d lines, NVIDIA's table has %d:\n%s", len(got), len(want), out)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d\n got %q\nwant %q", i+1, got[i], want[i])
		}
	}
}

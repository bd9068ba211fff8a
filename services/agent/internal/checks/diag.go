package checks

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/loom-ml/loom/libs/gpu"
	"github.com/loom-ml/loom/libs/healthcheck"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// diagVerdict judges a report: a FAIL anywhere fails the check (on the first
// failing GPU), else a WARN warns, else it passes. SKIPs count for nothing.
func diagVerdict(d *healthcheck.DiagReport) verdict {
	var passed, skipped int
	var warn *verdict
	for _, c := range d.Diag.Categories {
		for _, t := range c.Tests {
			for _, r := range t.Results {
				switch strings.ToUpper(r.Status) {
				case healthcheck.StatusFail:
					v := fail(firstGPU(r.GPUIDs), "%s/%s failed%s%s", c.Category, t.Name, gpuText(r.GPUIDs), reasons(r))
					return v
				case healthcheck.StatusWarn:
					if warn == nil {
						w := verdict{outcome: loomv1.CheckOutcome_CHECK_WARN, gpu: int32(firstGPU(r.GPUIDs)),
							summary: fmt.Sprintf("%s/%s warned%s%s", c.Category, t.Name, gpuText(r.GPUIDs), reasons(r))}
						warn = &w
					}
				case healthcheck.StatusSkip:
					skipped++
				default:
					passed++
				}
			}
		}
	}
	if warn != nil {
		return *warn
	}
	return pass(fmt.Sprintf("%d results passed, %d skipped", passed, skipped))
}

func gpuText(ids string) string {
	if ids == "" {
		return ""
	}
	return " on GPU " + ids
}

func reasons(r healthcheck.DiagResult) string {
	var w []string
	for _, x := range r.Warnings {
		w = append(w, x.Warning)
	}
	if len(w) == 0 {
		return ""
	}
	return ": " + strings.Join(w, "; ")
}

// firstGPU is the first GPU of a gpu_ids list ("1" or "0,1,2"), -1 if none.
func firstGPU(ids string) int {
	first, _, _ := strings.Cut(ids, ",")
	n, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		return -1
	}
	return n
}

// gpuDiag is the gpu_diag check. Level 1 is inventory and driver sanity
// (every GPU answers, no fatal ECC, remap or Xid state); level 2 adds a
// memory pattern test, a compute correctness check (a deterministic matrix
// product against a reference) and the PCIe/NVLink counters; level 3 adds a
// short stress run. On real GPUs with dcgmi on PATH it runs `dcgmi diag -r
// LEVEL -j` and judges its JSON instead (params["dcgmi"]="off" prevents it).
func (r *Runner) gpuDiag(ctx context.Context, cmd *eventsv1.RunHealthCheck) verdict {
	level := int(min(max(cmd.GetLevel(), 1), 3))
	dev := r.cfg.Device
	if dev == nil {
		return skipped("the node has no GPU device")
	}
	infos := dev.Info()
	if r.cfg.GPUs > 0 && len(infos) < r.cfg.GPUs {
		// Judged before anything else: with GPUs missing, the scheduler
		// places jobs on GPUs that are not there.
		rep := &healthcheck.DiagReport{Diag: healthcheck.DiagBody{Version: "loom-gpu-diag-1"}}
		addTests(rep, "Deployment", gpuCount(infos, r.cfg.GPUs))
		v := diagVerdict(rep)
		b, _ := json.MarshalIndent(rep, "", "  ")
		v.detail = string(b)
		v.summary = fmt.Sprintf("level %d: %s", level, v.summary)
		return v
	}
	if !dev.Simulated() && param(cmd, "dcgmi", "auto") != "off" {
		look := r.cfg.LookPath
		if look == nil {
			look = exec.LookPath
		}
		if path, err := look("dcgmi"); err == nil {
			return runDcgmi(ctx, path, level)
		}
	}
	if len(infos) == 0 {
		return skipped("the node has no GPUs")
	}
	samples, err := dev.Sample(ctx)
	if err != nil {
		return checkError("reading the GPUs: %v", err)
	}
	byIndex := map[int]*loomv1.GpuSample{}
	for _, s := range samples {
		byIndex[int(s.GetIndex())] = s
	}
	g := diagRun{dev: dev, infos: infos, samples: byIndex, sim: dev.Simulated()}
	rep := &healthcheck.DiagReport{Diag: healthcheck.DiagBody{Version: "loom-gpu-diag-1"}}
	addTests(rep, "Deployment", gpuCount(infos, r.cfg.GPUs), g.inventory(), g.driver(), g.eccRemap(), g.xids())
	if level >= 2 {
		addTests(rep, "Hardware", g.memory(ctx, cmd), g.compute(ctx))
		addTests(rep, "Integration", g.links(cmd))
	}
	if level >= 3 {
		d, err := time.ParseDuration(param(cmd, "stress", "3s"))
		if err != nil || d <= 0 {
			return checkError("params.stress: want a duration such as 3s, got %q", param(cmd, "stress", ""))
		}
		st, err := g.stress(ctx, d)
		if err != nil {
			return checkError("stress run: %v", err)
		}
		addTests(rep, "Stress", st)
	}
	if ctx.Err() != nil {
		return checkError("gpu_diag: %v", ctx.Err())
	}
	v := diagVerdict(rep)
	b, _ := json.MarshalIndent(rep, "", "  ")
	v.detail = string(b)
	v.summary = fmt.Sprintf("level %d on %d GPUs: %s", level, len(infos), v.summary)
	return v
}

func addTests(d *healthcheck.DiagReport, category string, tests ...healthcheck.DiagTest) {
	d.Diag.Categories = append(d.Diag.Categories, healthcheck.DiagCategory{Category: category, Tests: tests})
}

// runDcgmi runs the real dcgmi and judges its JSON; dcgmi exits non-zero
// when a test fails, so its exit code counts only when it printed no report.
func runDcgmi(ctx context.Context, path string, level int) verdict {
	c := exec.CommandContext(ctx, path, "diag", "-r", strconv.Itoa(level), "-j")
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &limited{w: &out, n: maxOutput}, &limited{w: &errb, n: 4096}
	runErr := c.Run()
	if ctx.Err() != nil {
		return checkError("dcgmi diag: %v", ctx.Err())
	}
	rep, err := healthcheck.ParseDiag(out.Bytes())
	if err != nil {
		return checkError("dcgmi diag -r %d: %v (%v; stderr %q)", level, err, runErr, strings.TrimSpace(errb.String()))
	}
	v := diagVerdict(rep)
	v.detail = out.String()
	v.summary = "dcgmi diag -r " + strconv.Itoa(level) + ": " + v.summary
	return v
}

// appXids are the Xids that say the application (or nothing much) went
// wrong rather than the GPU (the catalog's RESTART_APP and IGNORE immediate
// resolutions): the diagnostic does not fail a GPU for them.
var appXids = map[int32]bool{8: true, 11: true, 13: true, 25: true, 31: true, 32: true, 37: true, 38: true,
	39: true, 40: true, 41: true, 43: true, 45: true, 63: true, 68: true, 69: true, 92: true, 94: true}

// diagRun is one run of the simulated (or driver-only) diagnostic.
type diagRun struct {
	dev     gpu.Device
	infos   []gpu.Info
	samples map[int]*loomv1.GpuSample
	sim     bool
}

// faulted says why GPU i computes wrong results, "" when it does not: it
// is lost, or has uncorrectable ECC errors, a failed row remap or a
// hardware Xid. The simulated device's compute and memory tests corrupt
// their results on such a GPU, as the real hardware would.
func (g *diagRun) faulted(i int) string {
	s := g.samples[i]
	switch {
	case s == nil || s.GetLost():
		return "GPU has fallen off the bus"
	case s.GetRemapFailure():
		return "row remapping failed"
	case s.GetEccDbeVolatile() > 0:
		return fmt.Sprintf("%d uncorrectable (double-bit) ECC errors", s.GetEccDbeVolatile())
	case s.GetLastXid() != 0 && !appXids[s.GetLastXid()]:
		return fmt.Sprintf("Xid %d", s.GetLastXid())
	}
	return ""
}

func (g *diagRun) perGPU(name string, f func(i int, s *loomv1.GpuSample) healthcheck.DiagResult) healthcheck.DiagTest {
	t := healthcheck.DiagTest{Name: name}
	for _, info := range g.infos {
		r := f(info.Index, g.samples[info.Index])
		r.GPUIDs = strconv.Itoa(info.Index)
		t.Results = append(t.Results, r)
	}
	return t
}

func failed(errorID int, format string, args ...any) healthcheck.DiagResult {
	return healthcheck.DiagResult{Status: healthcheck.StatusFail, Warnings: []healthcheck.DiagWarning{{Warning: fmt.Sprintf(format, args...), ErrorID: errorID}}}
}

func warned(errorID int, format string, args ...any) healthcheck.DiagResult {
	return healthcheck.DiagResult{Status: healthcheck.StatusWarn, Warnings: []healthcheck.DiagWarning{{Warning: fmt.Sprintf(format, args...), ErrorID: errorID}}}
}

// gpuCount: the driver lists at least the GPUs the node offers (want; 0:
// not known). Fewer is a failure of the node, not of one GPU: which one is
// missing, the driver cannot say.
func gpuCount(infos []gpu.Info, want int) healthcheck.DiagTest {
	t := healthcheck.DiagTest{Name: "GPU Count"}
	if want > 0 && len(infos) < want {
		t.Results = append(t.Results, failed(healthcheck.DCGMDeviceCountMismatch, "the node offers %d GPUs, the driver lists %d", want, len(infos)))
		return t
	}
	t.Results = append(t.Results, healthcheck.DiagResult{Status: healthcheck.StatusPass, Info: []string{fmt.Sprintf("%d GPUs listed", len(infos))}})
	return t
}

// inventory: every GPU the device lists answers, under the UUID it listed.
func (g *diagRun) inventory() healthcheck.DiagTest {
	return g.perGPU("Inventory", func(i int, s *loomv1.GpuSample) healthcheck.DiagResult {
		info := g.infos[indexOf(g.infos, i)]
		switch {
		case s == nil:
			return failed(healthcheck.DCGMAPIFailGPU, "GPU %d (%s) is listed but gave no reading", i, info.UUID)
		case s.GetLost():
			return failed(healthcheck.DCGMAPIFailGPU, "GPU %d (%s) has fallen off the bus", i, info.UUID)
		case s.GetUuid() != "" && s.GetUuid() != info.UUID:
			return failed(healthcheck.DCGMDeviceCountMismatch, "GPU %d answers as %s, listed as %s", i, s.GetUuid(), info.UUID)
		}
		return healthcheck.DiagResult{Status: healthcheck.StatusPass, Info: []string{fmt.Sprintf("GPU %d: %s %s", i, info.Name, info.UUID)}}
	})
}

func indexOf(infos []gpu.Info, i int) int {
	for k, info := range infos {
		if info.Index == i {
			return k
		}
	}
	return 0
}

// driver: a driver version is reported, the same on every GPU.
func (g *diagRun) driver() healthcheck.DiagTest {
	return g.perGPU("NVML Library", func(i int, s *loomv1.GpuSample) healthcheck.DiagResult {
		info := g.infos[indexOf(g.infos, i)]
		if info.DriverVersion == "" {
			return failed(healthcheck.DCGMFieldQuery, "GPU %d reports no driver version", i)
		}
		if d0 := g.infos[0].DriverVersion; info.DriverVersion != d0 {
			return failed(healthcheck.DCGMFieldQuery, "GPU %d has driver %s, GPU %d has %s", i, info.DriverVersion, g.infos[0].Index, d0)
		}
		return healthcheck.DiagResult{Status: healthcheck.StatusPass, Info: []string{"driver " + info.DriverVersion + ", CUDA " + info.CUDAVersion}}
	})
}

// eccRemap: no uncorrectable ECC errors since boot, no failed row remap;
// a pending remap or page retirement only warns (a GPU reset applies it).
func (g *diagRun) eccRemap() healthcheck.DiagTest {
	return g.perGPU("Page Retirement/Row Remap", func(i int, s *loomv1.GpuSample) healthcheck.DiagResult {
		switch {
		case s == nil || s.GetLost():
			return healthcheck.DiagResult{Status: healthcheck.StatusSkip}
		case s.GetRemapFailure():
			return failed(healthcheck.DCGMRowRemapFailure, "GPU %d: row remapping failed", i)
		case s.GetEccDbeVolatile() > 0:
			return failed(healthcheck.DCGMVolatileDBE, "GPU %d: %d uncorrectable ECC errors since the driver loaded", i, s.GetEccDbeVolatile())
		case s.GetRemapPending():
			return warned(healthcheck.DCGMPendingRowRemap, "GPU %d: a row remap is pending (a GPU reset applies it)", i)
		case s.GetRetiredPagesPending() > 0:
			return warned(healthcheck.DCGMPendingRetirements, "GPU %d: a page retirement is pending (a GPU reset applies it)", i)
		}
		return healthcheck.DiagResult{Status: healthcheck.StatusPass}
	})
}

// xids: the GPU's last Xid is not a hardware one.
func (g *diagRun) xids() healthcheck.DiagTest {
	return g.perGPU("Xid Errors", func(i int, s *loomv1.GpuSample) healthcheck.DiagResult {
		if x := s.GetLastXid(); x != 0 && !appXids[x] {
			return failed(healthcheck.DCGMXidError, "GPU %d: Xid %d", i, x)
		}
		return healthcheck.DiagResult{Status: healthcheck.StatusPass}
	})
}

// links: NVLink CRC errors and replays warn, and PCIe replays past the
// scan's max_pcie_replays (default 80).
func (g *diagRun) links(cmd *eventsv1.RunHealthCheck) healthcheck.DiagTest {
	// DCGM's pcie test allows 80 replays a GPU (max_pcie_replays) before
	// it warns: links retry now and then, and one real H200 showed a
	// replay on a fresh machine. The counter here is since the driver
	// loaded, so the same allowance is a looser test than DCGM's, which
	// counts only the replays during its test.
	maxReplays, err := strconv.ParseUint(param(cmd, "max_pcie_replays", "80"), 10, 32)
	if err != nil {
		maxReplays = 80
	}
	return g.perGPU("pcie", func(i int, s *loomv1.GpuSample) healthcheck.DiagResult {
		switch {
		case s == nil || s.GetLost():
			return failed(healthcheck.DCGMAPIFailGPU, "GPU %d is not on the bus", i)
		case s.GetNvlinkCrcErrors() > 0 || s.GetNvlinkReplayErrors() > 0:
			return warned(healthcheck.DCGMNVLinkErrorThreshold, "GPU %d: NVLink CRC errors %d, replays %d", i, s.GetNvlinkCrcErrors(), s.GetNvlinkReplayErrors())
		case s.GetPcieReplay() > maxReplays:
			return warned(healthcheck.DCGMPCIeReplayThreshold, "GPU %d: %d PCIe replays, more than %d", i, s.GetPcieReplay(), maxReplays)
		}
		return healthcheck.DiagResult{Status: healthcheck.StatusPass}
	})
}

// memory is the memory pattern test: patterns written and read back. On
// the simulated device the buffer is host memory, and a faulted GPU's
// uncorrectable cells flip bits in it; on real GPUs without dcgmi it is
// skipped (it needs DCGM) and the ECC counters above stand for it.
func (g *diagRun) memory(ctx context.Context, cmd *eventsv1.RunHealthCheck) healthcheck.DiagTest {
	mib, err := strconv.Atoi(param(cmd, "memory_mib", "4"))
	if err != nil || mib <= 0 || mib > 1024 {
		mib = 4
	}
	return g.perGPU("memory", func(i int, s *loomv1.GpuSample) healthcheck.DiagResult {
		if !g.sim {
			return healthcheck.DiagResult{Status: healthcheck.StatusSkip, Warnings: []healthcheck.DiagWarning{{Warning: "the memory test on real GPUs needs dcgmi", ErrorID: 1}}}
		}
		if s == nil || s.GetLost() {
			return failed(healthcheck.DCGMAPIFailGPU, "GPU %d is not on the bus", i)
		}
		bad, first := memoryPatterns(ctx, mib<<20, i, g.faulted(i) != "")
		if bad > 0 {
			return failed(healthcheck.DCGMFaultyMemory, "GPU %d: %d words read back wrong in %d MiB (first at offset %#x): %s", i, bad, mib, first, g.faulted(i))
		}
		return healthcheck.DiagResult{Status: healthcheck.StatusPass, Info: []string{fmt.Sprintf("GPU %d: %d MiB, 6 patterns", i, mib)}}
	})
}

// memoryPatterns writes and verifies 6 patterns over size bytes; a faulty
// buffer has stuck bits at places the GPU index chooses. It returns the
// mismatched words and the first one's offset.
func memoryPatterns(ctx context.Context, size, gpuIndex int, faulty bool) (bad int, first int) {
	buf := make([]uint64, size/8)
	var stuck []int
	if faulty {
		for k := range 3 {
			stuck = append(stuck, (gpuIndex*7919+k*104729)%len(buf))
		}
	}
	first = -1
	patterns := []func(j int) uint64{
		func(int) uint64 { return 0 },
		func(int) uint64 { return ^uint64(0) },
		func(int) uint64 { return 0xAAAAAAAAAAAAAAAA },
		func(int) uint64 { return 0x5555555555555555 },
		func(j int) uint64 { return 1 << (j % 64) },          // walking ones
		func(j int) uint64 { return uint64(j) * 0x9E3779B1 }, // the address in the address
	}
	for _, p := range patterns {
		if ctx.Err() != nil {
			return bad, first
		}
		for j := range buf {
			buf[j] = p(j)
		}
		for _, j := range stuck {
			buf[j] ^= 1 << 17 // a cell that does not hold what was written
		}
		for j := range buf {
			if buf[j] != p(j) {
				if first < 0 {
					first = j * 8
				}
				bad++
			}
		}
	}
	return bad, first
}

// matN is the compute check's matrix size.
const matN = 64

// compute is the compute correctness check: a deterministic matrix
// product on each GPU compared with a reference computed another way. On
// the simulated device the "GPU" product is computed on the CPU and a
// faulted GPU's comes out wrong.
func (g *diagRun) compute(ctx context.Context) healthcheck.DiagTest {
	a, b := matrix(1), matrix(2)
	ref := matmulRef(a, b)
	return g.perGPU("compute_correctness", func(i int, s *loomv1.GpuSample) healthcheck.DiagResult {
		if !g.sim {
			return healthcheck.DiagResult{Status: healthcheck.StatusSkip, Warnings: []healthcheck.DiagWarning{{Warning: "the compute check on real GPUs needs dcgmi", ErrorID: 1}}}
		}
		if s == nil || s.GetLost() {
			return failed(healthcheck.DCGMAPIFailGPU, "GPU %d is not on the bus", i)
		}
		if ctx.Err() != nil {
			return healthcheck.DiagResult{Status: healthcheck.StatusSkip}
		}
		got := g.deviceMatmul(i, a, b)
		if k, ok := compare(got, ref); !ok {
			return failed(healthcheck.DCGMMemoryMismatch, "GPU %d: %dx%d product differs from the reference at [%d,%d] (%v, want %v): %s",
				i, matN, matN, k/matN, k%matN, got[k], ref[k], g.faulted(i))
		}
		return healthcheck.DiagResult{Status: healthcheck.StatusPass, Info: []string{fmt.Sprintf("GPU %d: %dx%d product matches the reference", i, matN, matN)}}
	})
}

// deviceMatmul is GPU i's product: on the simulated device the CPU's, with
// one element off when the GPU is faulted (silent data corruption).
func (g *diagRun) deviceMatmul(i int, a, b []float64) []float64 {
	c := matmul(a, b)
	if g.faulted(i) != "" {
		c[(i*31+7)%len(c)] += 1
	}
	return c
}

// matrix returns a matN×matN matrix of small integers from seed: products
// and sums of them are exact in float64, so results compare exactly.
func matrix(seed uint64) []float64 {
	m := make([]float64, matN*matN)
	x := seed*0x9E3779B97F4A7C15 + 1
	for k := range m {
		x = x*6364136223846793005 + 1442695040888963407
		m[k] = float64(int64(x>>59) - 16) // -16..15
	}
	return m
}

// matmul is the i-k-j product.
func matmul(a, b []float64) []float64 {
	c := make([]float64, matN*matN)
	for i := range matN {
		for k := range matN {
			aik := a[i*matN+k]
			for j := range matN {
				c[i*matN+j] += aik * b[k*matN+j]
			}
		}
	}
	return c
}

// matmulRef is the reference: the i-j-k dot products.
func matmulRef(a, b []float64) []float64 {
	c := make([]float64, matN*matN)
	for i := range matN {
		for j := range matN {
			var s float64
			for k := range matN {
				s += a[i*matN+k] * b[k*matN+j]
			}
			c[i*matN+j] = s
		}
	}
	return c
}

func compare(got, want []float64) (int, bool) {
	for k := range want {
		if got[k] != want[k] {
			return k, false
		}
	}
	return 0, true
}

// stress runs the matrix product on every GPU in turn for d, checking each
// product, and reads the GPUs after: a GPU that computes wrong, delivers
// under 80% of the best GPU's throughput (the simulated device's
// ThroughputFactor), or runs hot or thermally throttled fails.
func (g *diagRun) stress(ctx context.Context, d time.Duration) (healthcheck.DiagTest, error) {
	if !g.sim {
		// Its products run on the host: on real GPUs they would load
		// nothing, and a pass would claim what was not tested.
		return g.perGPU("sm_stress", func(int, *loomv1.GpuSample) healthcheck.DiagResult {
			return healthcheck.DiagResult{Status: healthcheck.StatusSkip, Warnings: []healthcheck.DiagWarning{{Warning: "the stress run on real GPUs needs dcgmi", ErrorID: 1}}}
		}), nil
	}
	a, b := matrix(3), matrix(4)
	ref := matmulRef(a, b)
	iters := map[int]int{}
	wrong := map[int]int{}
	end := time.Now().Add(d)
	for time.Now().Before(end) && ctx.Err() == nil {
		for _, info := range g.infos {
			if s := g.samples[info.Index]; s == nil || s.GetLost() {
				continue
			}
			if _, ok := compare(g.deviceMatmul(info.Index, a, b), ref); !ok {
				wrong[info.Index]++
			}
			iters[info.Index]++
		}
	}
	if ctx.Err() != nil {
		return healthcheck.DiagTest{}, ctx.Err()
	}
	after, err := g.dev.Sample(ctx)
	if err != nil {
		return healthcheck.DiagTest{}, err
	}
	temp := map[int]*loomv1.GpuSample{}
	for _, s := range after {
		temp[int(s.GetIndex())] = s
	}
	best := 0.0
	level := map[int]float64{}
	for _, info := range g.infos {
		level[info.Index] = 100 * g.dev.ThroughputFactor(info.Index)
		best = max(best, level[info.Index])
	}
	const hotC = 90.0
	const thermalReasons = 0x8 | 0x20 | 0x40 // HW slowdown, SW thermal, HW thermal
	return g.perGPU("sm_stress", func(i int, s *loomv1.GpuSample) healthcheck.DiagResult {
		info := []string{fmt.Sprintf("GPU %d relative stress level:\t%.0f", i, level[i]),
			fmt.Sprintf("GPU %d products checked:\t%d", i, iters[i])}
		t := temp[i]
		if t != nil {
			info = append(info, fmt.Sprintf("GPU %d temperature:\t%.0f C", i, t.GetTemperatureC()))
		}
		var r healthcheck.DiagResult
		switch {
		case s == nil || s.GetLost() || t == nil || t.GetLost():
			r = failed(healthcheck.DCGMAPIFailGPU, "GPU %d is not on the bus", i)
		case wrong[i] > 0:
			r = failed(healthcheck.DCGMMemoryMismatch, "GPU %d: %d of %d products wrong under stress", i, wrong[i], iters[i])
		case level[i] < 0.8*best:
			r = failed(healthcheck.DCGMStressLevel, "Max stress level of %.1f did not exceed desired stress level of %.1f for GPU %d", level[i], 0.8*best, i)
		case t.GetTemperatureC() >= hotC || t.GetThrottleReasons()&thermalReasons != 0:
			r = failed(healthcheck.DCGMThrottlingViolation, "GPU %d: %.0f C, throttle reasons %#x under stress", i, t.GetTemperatureC(), t.GetThrottleReasons())
		default:
			r = healthcheck.DiagResult{Status: healthcheck.StatusPass}
		}
		r.Info = append(info, r.Info...)
		return r
	}), nil
}

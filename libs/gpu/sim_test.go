package gpu

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/clusterspec"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// fakeClock is a settable clock for the rate and runaway faults.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newSim(t *testing.T, busy bool) (*Simulated, *fakeClock) {
	t.Helper()
	clk := &fakeClock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	s, err := OpenSimulated(Options{Count: 8, Model: "NVIDIA H200", StateDir: t.TempDir(), Seed: 7, Now: clk.Now,
		Busy: func() bool { return busy }})
	if err != nil {
		t.Fatal(err)
	}
	return s, clk
}

func sample(t *testing.T, d Device) []*loomv1.GpuSample {
	t.Helper()
	got, err := d.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestSimulatedH200Shapes(t *testing.T) {
	t.Parallel()
	for _, busy := range []bool{false, true} {
		s, _ := newSim(t, busy)
		infos := s.Info()
		if len(infos) != 8 {
			t.Fatalf("8 GPUs, got %d", len(infos))
		}
		uuids := map[string]bool{}
		for i, in := range infos {
			if in.Index != i || in.Name != "NVIDIA H200" || !strings.HasPrefix(in.UUID, "GPU-") || len(in.UUID) != 40 ||
				in.MemoryTotal != 143771<<20 || in.PowerLimitW != 700 || in.DriverVersion == "" || !strings.HasPrefix(in.PCIBusID, "00000000:") {
				t.Errorf("GPU %d info %+v", i, in)
			}
			uuids[in.UUID] = true
		}
		if len(uuids) != 8 {
			t.Errorf("UUIDs not distinct: %v", uuids)
		}
		for _, g := range sample(t, s) {
			if g.Lost || g.MemoryTotalBytes != 143771<<20 || g.MemClockMhz != 3201 || g.EccDbeVolatile != 0 || g.RemapFailure || g.LastXid != 0 {
				t.Errorf("busy=%v GPU %d: %v", busy, g.Index, g)
			}
			if busy && (g.GpuUtilPercent < 90 || g.PowerW < 400 || g.PowerW > 700 || g.TemperatureC < 50 || g.TemperatureC > 75 ||
				g.MemoryUsedBytes < g.MemoryTotalBytes/2 || g.SmClockMhz < 1800) {
				t.Errorf("busy GPU %d out of shape: %v", g.Index, g)
			}
			// An idle H200 as NVML read one (driver 580.159.04): 0 MiB
			// used, 616 MiB reserved by the driver, SM clock 345 MHz.
			if !busy && (g.GpuUtilPercent != 0 || g.PowerW > 100 || g.TemperatureC > 40 || g.SmClockMhz != 345 || g.ThrottleReasons != ReasonGpuIdle ||
				g.MemoryUsedBytes != 0 || FreeBytes(g) != (143771-616)<<20) {
				t.Errorf("idle GPU %d out of shape: %v", g.Index, g)
			}
			if g.MemoryReservedBytes != 616<<20 || g.MemoryUsedBytes+g.MemoryReservedBytes+FreeBytes(g) != g.MemoryTotalBytes {
				t.Errorf("busy=%v GPU %d memory: used %d + reserved %d + free %d != total %d", busy, g.Index,
					g.MemoryUsedBytes, g.MemoryReservedBytes, FreeBytes(g), g.MemoryTotalBytes)
			}
		}
	}
}

func TestSimulatedSeededAndShared(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	now := func() time.Time { return time.Unix(1_800_000_000, 0) }
	a, err := OpenSimulated(Options{Count: 4, StateDir: dir, Seed: 3, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	// A second opener (nvidia-smi: no count) sees the same GPUs and numbers.
	b, err := ReadSimulated(Options{StateDir: dir, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if a.Info()[2].UUID != b.Info()[2].UUID || b.Model() != DefaultModel {
		t.Fatalf("not the same GPUs: %v vs %v", a.Info()[2], b.Info()[2])
	}
	sa, sb := sample(t, a), sample(t, b)
	for i := range sa {
		if sa[i].String() != sb[i].String() {
			t.Errorf("GPU %d read differently: %v vs %v", i, sa[i], sb[i])
		}
	}
	// The same seed elsewhere makes the same GPUs.
	c, err := OpenSimulated(Options{Count: 4, StateDir: t.TempDir(), Seed: 3, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if c.Info()[0].UUID != a.Info()[0].UUID {
		t.Errorf("seed 3 made %s then %s", a.Info()[0].UUID, c.Info()[0].UUID)
	}
	if _, err := ReadSimulated(Options{StateDir: t.TempDir()}); err == nil {
		t.Error("opened simulated GPUs where there are none")
	}
	// A node without GPUs (-gpus 0) has a device with none, and its
	// count is the agent's, not what an earlier start left.
	z, err := OpenSimulated(Options{Count: 0, StateDir: dir})
	if err != nil || len(z.Info()) != 0 {
		t.Errorf("-gpus 0: %v, %d GPUs", err, len(z.Info()))
	}
}

func TestSimulatedFaults(t *testing.T) {
	t.Parallel()
	type check func(t *testing.T, before, after *loomv1.GpuSample, s *Simulated, xids []Xid)
	xidsAre := func(codes ...int) check {
		return func(t *testing.T, _, _ *loomv1.GpuSample, _ *Simulated, xids []Xid) {
			var got []int
			for _, x := range xids {
				got = append(got, x.Code)
				if x.GPU != 3 || !strings.Contains(x.Message, "NVRM: Xid (PCI:0000:5D:00): "+strconv.Itoa(x.Code)+",") {
					t.Errorf("xid %+v", x)
				}
			}
			if len(got) != len(codes) {
				t.Fatalf("xids %v, want %v", got, codes)
			}
			for i := range codes {
				if got[i] != codes[i] {
					t.Fatalf("xids %v, want %v", got, codes)
				}
			}
		}
	}
	both := func(cs ...check) check {
		return func(t *testing.T, b, a *loomv1.GpuSample, s *Simulated, x []Xid) {
			for _, c := range cs {
				c(t, b, a, s, x)
			}
		}
	}
	cases := []struct {
		f     *loomv1.Fault
		after time.Duration
		check check
	}{
		{&loomv1.Fault{Kind: loomv1.FaultKind_FAULT_XID, Gpu: 3, Xid: 13}, 0, both(xidsAre(13), func(t *testing.T, _, a *loomv1.GpuSample, _ *Simulated, _ []Xid) {
			if a.LastXid != 13 || a.Lost {
				t.Errorf("after Xid 13: %v", a)
			}
		})},
		{&loomv1.Fault{Kind: loomv1.FaultKind_FAULT_ECC_SBE, Gpu: 3, Value: 120}, 10 * time.Minute, func(t *testing.T, b, a *loomv1.GpuSample, _ *Simulated, _ []Xid) {
			if a.EccSbeVolatile-b.EccSbeVolatile != 1200 || a.EccSbeAggregate-b.EccSbeAggregate != 1200 {
				t.Errorf("SBE after 10 min at 120/min: %d -> %d", b.EccSbeVolatile, a.EccSbeVolatile)
			}
		}},
		{&loomv1.Fault{Kind: loomv1.FaultKind_FAULT_ECC_DBE, Gpu: 3}, 0, both(xidsAre(48, 63), func(t *testing.T, b, a *loomv1.GpuSample, _ *Simulated, _ []Xid) {
			if a.EccDbeVolatile != 1 || a.EccDbeAggregate != 1 || a.RemappedUncorrectable != b.RemappedUncorrectable+1 || !a.RemapPending {
				t.Errorf("after a DBE: %v", a)
			}
		})},
		{&loomv1.Fault{Kind: loomv1.FaultKind_FAULT_ROW_REMAP_FAILURE, Gpu: 3}, 0, both(xidsAre(64), func(t *testing.T, _, a *loomv1.GpuSample, _ *Simulated, _ []Xid) {
			if !a.RemapFailure {
				t.Errorf("after a remap failure: %v", a)
			}
		})},
		{&loomv1.Fault{Kind: loomv1.FaultKind_FAULT_THERMAL, Gpu: 3}, 5 * time.Minute, func(t *testing.T, b, a *loomv1.GpuSample, s *Simulated, _ []Xid) {
			if a.TemperatureC < SlowdownTempC || a.ThrottleReasons&(ReasonHwThermalSlowdown|ReasonSwThermalSlowdown) == 0 || a.SmClockMhz >= 1980 {
				t.Errorf("5 min into thermal runaway: %v", a)
			}
			if f := s.ThroughputFactor(3); f >= 1 || f <= 0 {
				t.Errorf("throughput %v while throttling", f)
			}
		}},
		// A faster runaway (value °C/s) throttles within seconds; the
		// default one has not yet.
		{&loomv1.Fault{Kind: loomv1.FaultKind_FAULT_THERMAL, Gpu: 3, Value: 5}, 20 * time.Second, func(t *testing.T, b, a *loomv1.GpuSample, s *Simulated, _ []Xid) {
			if a.TemperatureC < SlowdownTempC || a.ThrottleReasons&(ReasonHwThermalSlowdown|ReasonSwThermalSlowdown) == 0 {
				t.Errorf("20 s into thermal runaway at 5 °C/s: %v", a)
			}
		}},
		{&loomv1.Fault{Kind: loomv1.FaultKind_FAULT_THERMAL, Gpu: 3}, 20 * time.Second, func(t *testing.T, b, a *loomv1.GpuSample, s *Simulated, _ []Xid) {
			if a.TemperatureC >= SlowdownTempC || a.TemperatureC <= b.TemperatureC || a.ThrottleReasons&(ReasonHwThermalSlowdown|ReasonSwThermalSlowdown) != 0 {
				t.Errorf("20 s into thermal runaway at the default 0.25 °C/s: %v (before %v)", a, b)
			}
		}},
		{&loomv1.Fault{Kind: loomv1.FaultKind_FAULT_SLOW_GPU, Gpu: 3, Value: 4}, 0, func(t *testing.T, b, a *loomv1.GpuSample, s *Simulated, _ []Xid) {
			if f := s.ThroughputFactor(3); f != 0.25 {
				t.Errorf("throughput %v, want 0.25", f)
			}
			if a.SmClockMhz >= b.SmClockMhz {
				t.Errorf("slow GPU clock %d, was %d", a.SmClockMhz, b.SmClockMhz)
			}
		}},
		{&loomv1.Fault{Kind: loomv1.FaultKind_FAULT_FALLEN_OFF_BUS, Gpu: 3}, 0, both(xidsAre(79), func(t *testing.T, _, a *loomv1.GpuSample, s *Simulated, x []Xid) {
			if !a.Lost || a.TemperatureC != 0 || a.MemoryTotalBytes != 0 || s.ThroughputFactor(3) != 0 {
				t.Errorf("fallen off the bus: %v", a)
			}
			if !strings.HasSuffix(x[0].Message, "GPU has fallen off the bus") {
				t.Errorf("message %q", x[0].Message)
			}
		})},
		{&loomv1.Fault{Kind: loomv1.FaultKind_FAULT_NVLINK, Gpu: 3, Value: 40}, 3 * time.Minute, both(xidsAre(74), func(t *testing.T, b, a *loomv1.GpuSample, _ *Simulated, _ []Xid) {
			if a.NvlinkCrcErrors-b.NvlinkCrcErrors != 120 || a.NvlinkReplayErrors-b.NvlinkReplayErrors != 30 {
				t.Errorf("NVLink after 3 min at 40/min: %v", a)
			}
		})},
		{&loomv1.Fault{Kind: loomv1.FaultKind_FAULT_DISK_FULL, Gpu: -1}, 0, func(t *testing.T, _, _ *loomv1.GpuSample, s *Simulated, _ []Xid) {
			ds := s.DiskUsage(s.StateDir())
			if len(ds) != 1 || ds[0].TotalBytes == 0 || ds[0].UsedBytes != ds[0].TotalBytes {
				t.Errorf("disk not full: %v", ds)
			}
			if real := DiskUsage(s.StateDir()); real[0].UsedBytes == real[0].TotalBytes {
				t.Errorf("the real disk is full: %v", real)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.f.GetKind().String(), func(t *testing.T) {
			t.Parallel()
			s, clk := newSim(t, true)
			before := sample(t, s)[3]
			if err := s.Inject(c.f); err != nil {
				t.Fatal(err)
			}
			clk.Add(c.after)
			xids, err := s.Xids(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			all := sample(t, s)
			c.check(t, before, all[3], s, xids)
			for i, g := range all {
				if i != 3 && (g.Lost || g.LastXid != 0 || g.TemperatureC > 80) {
					t.Errorf("GPU %d hit by a fault on GPU 3: %v", i, g)
				}
			}
			// FAULT_CLEAR gives back the healthy GPU.
			if err := s.Inject(&loomv1.Fault{Kind: loomv1.FaultKind_FAULT_CLEAR, Gpu: -1}); err != nil {
				t.Fatal(err)
			}
			clk.Add(time.Minute)
			after := sample(t, s)[3]
			if after.Lost || after.LastXid != 0 || after.EccSbeVolatile != before.EccSbeVolatile || after.EccDbeVolatile != 0 ||
				after.RemapFailure || after.NvlinkCrcErrors != before.NvlinkCrcErrors || after.TemperatureC > 80 || s.ThroughputFactor(3) != 1 || s.DiskFull() {
				t.Errorf("after FAULT_CLEAR: %v", after)
			}
		})
	}
}

func TestSimulatedInjectRefuses(t *testing.T) {
	t.Parallel()
	s, _ := newSim(t, false)
	for _, f := range []*loomv1.Fault{
		{Kind: loomv1.FaultKind_FAULT_XID, Gpu: 0},
		{Kind: loomv1.FaultKind_FAULT_THERMAL, Gpu: 8},
		{Kind: loomv1.FaultKind_FAULT_HUNG_JOB, Gpu: -1},
		{Kind: loomv1.FaultKind_FAULT_NO_HEARTBEAT, Gpu: -1},
		{Kind: loomv1.FaultKind_FAULT_KIND_UNSPECIFIED},
		nil,
	} {
		if err := s.Inject(f); err == nil {
			t.Errorf("Inject(%v) accepted", f)
		}
	}
}

func TestSimulatedEveryGPU(t *testing.T) {
	t.Parallel()
	s, _ := newSim(t, false)
	if err := s.Inject(&loomv1.Fault{Kind: loomv1.FaultKind_FAULT_XID, Gpu: -1, Xid: 31}); err != nil {
		t.Fatal(err)
	}
	xids, _ := s.Xids(context.Background())
	if len(xids) != 8 {
		t.Fatalf("Xid 31 on every GPU: %v", xids)
	}
	for i, g := range sample(t, s) {
		if g.LastXid != 31 || xids[i].GPU != i {
			t.Errorf("GPU %d: %v %v", i, g, xids[i])
		}
	}
	if again, _ := s.Xids(context.Background()); len(again) != 0 {
		t.Errorf("Xids returned twice: %v", again)
	}
}

func TestSimulatedReboot(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clk := &fakeClock{t: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	open := func(boot string) *Simulated {
		s, err := OpenSimulated(Options{Count: 2, StateDir: dir, Now: clk.Now, BootID: boot})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open("boot-1")
	for _, f := range []*loomv1.Fault{
		{Kind: loomv1.FaultKind_FAULT_FALLEN_OFF_BUS, Gpu: 0},
		{Kind: loomv1.FaultKind_FAULT_ECC_DBE, Gpu: 1, Value: 2},
		{Kind: loomv1.FaultKind_FAULT_ROW_REMAP_FAILURE, Gpu: 1},
	} {
		if err := s.Inject(f); err != nil {
			t.Fatal(err)
		}
	}
	// Same boot (an agent restart): nothing changes.
	if g := sample(t, open("boot-1")); !g[0].Lost {
		t.Fatalf("an agent restart brought GPU 0 back: %v", g[0])
	}
	g := sample(t, open("boot-2"))
	if g[0].Lost {
		t.Errorf("a reboot left GPU 0 lost: %v", g[0])
	}
	if g[1].EccDbeVolatile != 0 || g[1].EccDbeAggregate != 2 || g[1].RemapPending || !g[1].RemapFailure || g[1].RemappedUncorrectable < 2 {
		t.Errorf("after a reboot GPU 1: %v", g[1])
	}
}

func TestSimulatedConcurrentInjections(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	reader, err := OpenSimulated(Options{Count: 8, StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	const openers, each = 4, 20
	var wg sync.WaitGroup
	for o := range openers {
		s, err := ReadSimulated(Options{StateDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		for n := range each {
			wg.Go(func() {
				if err := s.Inject(&loomv1.Fault{Kind: loomv1.FaultKind_FAULT_XID, Gpu: int32(o), Xid: int32(100 + n)}); err != nil {
					t.Error(err)
				}
				if _, err := s.Sample(context.Background()); err != nil {
					t.Error(err)
				}
			})
		}
	}
	wg.Wait()
	xids, err := reader.Xids(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(xids) != openers*each {
		t.Fatalf("%d Xids recorded, want %d: a concurrent update was lost", len(xids), openers*each)
	}
}

// TestSimulatedAcrossProcesses injects from another process (this test
// binary re-run), as the agent does for the node's nvidia-smi.
func TestSimulatedAcrossProcesses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := OpenSimulated(Options{Count: 8, StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperInject$")
	cmd.Env = append(os.Environ(), "LOOM_GPU_TEST_INJECT="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	xids, err := s.Xids(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(xids) != 1 || xids[0].Code != 79 || xids[0].GPU != 5 {
		t.Fatalf("xids from the other process: %v", xids)
	}
	if g := sample(t, s); !g[5].Lost || g[4].Lost {
		t.Errorf("GPU 5 not lost here: %v", g[5])
	}
	if !s.DiskFull() {
		t.Error("disk not full here")
	}
}

func TestHelperInject(t *testing.T) {
	dir := os.Getenv("LOOM_GPU_TEST_INJECT")
	if dir == "" {
		t.Skip("run by TestSimulatedAcrossProcesses")
	}
	s, err := ReadSimulated(Options{StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []*loomv1.Fault{{Kind: loomv1.FaultKind_FAULT_FALLEN_OFF_BUS, Gpu: 5}, {Kind: loomv1.FaultKind_FAULT_DISK_FULL, Gpu: -1}} {
		if err := s.Inject(f); err != nil {
			t.Fatal(err)
		}
	}
}

func TestOpenFallsBackToSimulated(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "gpu")
	d, err := Open(Options{Simulate: true, Count: 2, StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if !d.Simulated() || len(d.Info()) != 2 || !HasSimulated(dir) {
		t.Fatalf("Open(Simulate) = %T with %d GPUs", d, len(d.Info()))
	}
	if NVMLAvailable() {
		t.Skip("a driver loads here: Open without Simulate would use it")
	}
	d, err = Open(Options{Count: 2, StateDir: t.TempDir()})
	if err != nil || !d.Simulated() {
		t.Fatalf("Open with no driver = %T, %v", d, err)
	}
	if _, err := OpenNVML(); err == nil {
		t.Error("OpenNVML succeeded with no driver")
	}
}

func TestDiskUsage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ds := DiskUsage(dir, filepath.Join(dir, "."), "/nonexistent/x")
	if len(ds) != 1 || ds[0].TotalBytes == 0 || ds[0].UsedBytes > ds[0].TotalBytes || !strings.HasPrefix(dir, ds[0].Mount) {
		t.Fatalf("DiskUsage(%s) = %v", dir, ds)
	}
	if root := DiskUsage(); len(root) != 1 || root[0].Mount != "/" {
		t.Errorf("DiskUsage() = %v", root)
	}
}

func TestXidDescription(t *testing.T) {
	t.Parallel()
	for code, want := range map[int]string{79: "GPU has fallen off the bus", 48: "Double Bit ECC Error", 100000: "Xid 100000"} {
		if got := XidDescription(code); got != want {
			t.Errorf("XidDescription(%d) = %q, want %q", code, got, want)
		}
	}
	if got := XidLogLine("00000000:9B:00.0", 119, "GSP RPC Timeout"); got != "NVRM: Xid (PCI:0000:9B:00): 119, pid='<unknown>', name=<unknown>, GSP RPC Timeout" {
		t.Errorf("XidLogLine = %q", got)
	}
}

// BenchmarkSimulatedSample times one collection of 8 simulated H200s (the
// agent's every telemetry interval, nvidia-smi's every run): a read and
// decode of the state file.
func BenchmarkSimulatedSample(b *testing.B) {
	s, err := OpenSimulated(Options{Count: 8, StateDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for b.Loop() {
		if _, err := s.Sample(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSimulatedInject times one injection (lock, read, write, rename).
func BenchmarkSimulatedInject(b *testing.B) {
	s, err := OpenSimulated(Options{Count: 8, StateDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := s.Inject(&loomv1.Fault{Kind: loomv1.FaultKind_FAULT_XID, Gpu: 1, Xid: 13}); err != nil {
			b.Fatal(err)
		}
	}
}

func TestSimulatedCorruptStateRemade(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, StateFile), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadSimulated(Options{StateDir: dir}); err == nil {
		t.Fatal("a reader opened a corrupt state")
	}
	s, err := OpenSimulated(Options{Count: 3, StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Info()) != 3 {
		t.Errorf("remade with %d GPUs", len(s.Info()))
	}
}

// A reader (nvidia-smi) writes nothing: the state's owner is root and the
// job's owner may not write it.
func TestSimulatedReaderWritesNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := OpenSimulated(Options{Count: 2, StateDir: dir}); err != nil {
		t.Fatal(err)
	}
	before, err := os.Stat(filepath.Join(dir, StateFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, lockFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadSimulated(Options{StateDir: dir}); err != nil {
		t.Fatal(err)
	}
	after, _ := os.Stat(filepath.Join(dir, StateFile))
	if _, err := os.Stat(filepath.Join(dir, lockFile)); !os.IsNotExist(err) || !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("a reader took the lock or rewrote the state: %v", err)
	}
}

// TestCatalogGPUsHaveShapes: every GPU of the machine catalog is simulated
// with its own model's numbers, not the default's.
func TestCatalogGPUsHaveShapes(t *testing.T) {
	t.Parallel()
	for _, m := range clusterspec.Machines() {
		name := m.GPUName()
		if !m.HasGPUs() {
			continue
		}
		if _, ok := models[name]; !ok {
			t.Errorf("%s's GPU %q has no simulated model", m.Name, name)
			continue
		}
		s, err := OpenSimulated(Options{Count: 1, Model: name, StateDir: t.TempDir(), Busy: func() bool { return false }})
		if err != nil {
			t.Fatal(err)
		}
		g := sample(t, s)[0]
		if mo := modelOf(name); g.MemoryTotalBytes != mo.memMiB<<20 || g.MemClockMhz != mo.memMHz || g.Name != name {
			t.Errorf("%s (%s) reads %v", name, m.Name, g)
		}
	}
}

// TestBusyGPUsAreTheStepsOwn: with no busy test given, a GPU is busy while
// a running step holds it: a step listing GPUs 1 and 3 beside its pidfile
// loads those two (utilisation, memory), the others idle; a step with no
// list (given no GPUs, or started by an older agent) loads every GPU, as
// does a list that is not of indexes.
func TestBusyGPUsAreTheStepsOwn(t *testing.T) {
	t.Parallel()
	work := t.TempDir()
	steps := filepath.Join(work, "steps")
	if err := os.Mkdir(steps, 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := OpenSimulated(Options{Count: 4, StateDir: filepath.Join(work, "gpu")})
	if err != nil {
		t.Fatal(err)
	}
	busy := func() []int {
		var out []int
		for _, g := range sample(t, s) {
			if g.GetGpuUtilPercent() > 50 && g.GetMemoryUsedBytes() > 0 {
				out = append(out, int(g.GetIndex()))
			}
		}
		return out
	}
	if got := busy(); len(got) != 0 {
		t.Fatalf("no step, busy GPUs %v", got)
	}
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(steps, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.gpus", "1,3\n")
	write("a.pid", "1 1\n")
	if got := busy(); !slices.Equal(got, []int{1, 3}) {
		t.Fatalf("a step holding GPUs 1,3: busy %v", got)
	}
	write("b.pid", "2 2\n")
	if got := busy(); !slices.Equal(got, []int{0, 1, 2, 3}) {
		t.Fatalf("and a step with no list: busy %v, want every GPU", got)
	}
	_ = os.Remove(filepath.Join(steps, "b.pid"))
	write("a.gpus", "GPU-1234\n")
	if got := busy(); !slices.Equal(got, []int{0, 1, 2, 3}) {
		t.Fatalf("a list of UUIDs: busy %v, want every GPU", got)
	}
}

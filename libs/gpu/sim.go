package gpu

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// StateFile is the simulated device's state, inside Options.StateDir.
const StateFile = "state.json"

// lockFile serialises the state's writers across the node's processes (flock).
const lockFile = "state.lock"

// NVML's clocks-event-reason bits (nvmlClocksEventReason*), as
// GpuSample.throttle_reasons carries them.
const (
	ReasonGpuIdle            = 0x1
	ReasonApplicationsClocks = 0x2
	ReasonSwPowerCap         = 0x4
	ReasonHwSlowdown         = 0x8
	ReasonSyncBoost          = 0x10
	ReasonSwThermalSlowdown  = 0x20
	ReasonHwThermalSlowdown  = 0x40
	ReasonHwPowerBrake       = 0x80
)

// Defaults of the injected faults' values (loomv1.Fault.value 0).
const (
	DefaultSBEPerMinute    = 60
	DefaultNVLinkPerMinute = 60
	DefaultSlowFactor      = 2
	// DefaultThermalRise is how fast a GPU in thermal runaway heats, °C
	// per second: from an idle 30 °C it throttles after about 4 minutes.
	DefaultThermalRise = 0.25
)

// SlowdownTempC is where a simulated GPU in thermal runaway starts to
// throttle: an H200's maximum operating temperature, the zero of
// nvidia-smi's T.Limit scale (it read "GPU T.Limit Temp: 50 C" at 37 C,
// driver 580.159.04).
const SlowdownTempC = 87

// The temperatures at which a GPU in thermal runaway shuts down and at
// which it stops rising.
const (
	shutdownTempC   = 95
	maxRunawayTempC = 102
)

// model is what the simulated device knows of a GPU model: the shapes of
// its numbers, as the real board reports them.
type model struct {
	memMiB      uint64
	powerLimitW float64
	idlePowerW  float64
	maxSMMHz    uint32
	idleSMMHz   uint32
	memMHz      uint32
	vbios       string
	// reservedMiB is the memory the driver keeps for itself (nvidia-smi's
	// "Reserved"); 0: the H200's measured share of its memory.
	reservedMiB uint64
}

// reserved is the model's driver-reserved memory in MiB: an H200 with
// driver 580.159.04 reserves 616 of its 143771 MiB (bench/REPORT.md, "NVML
// on an H200"); models not measured reserve the same share.
func (m model) reserved() uint64 {
	if m.reservedMiB > 0 {
		return m.reservedMiB
	}
	return m.memMiB * 616 / 143771
}

// models by name; an unknown name takes the H200's shapes.
var models = map[string]model{
	"NVIDIA H200":           {memMiB: 143771, powerLimitW: 700, idlePowerW: 76, maxSMMHz: 1980, idleSMMHz: 345, memMHz: 3201, vbios: "96.00.A5.00.01", reservedMiB: 616},
	"NVIDIA H100 80GB HBM3": {memMiB: 81559, powerLimitW: 700, idlePowerW: 72, maxSMMHz: 1980, idleSMMHz: 345, memMHz: 2619, vbios: "96.00.99.00.01"},
	"NVIDIA A100-SXM4-80GB": {memMiB: 81920, powerLimitW: 400, idlePowerW: 62, maxSMMHz: 1410, idleSMMHz: 210, memMHz: 1593, vbios: "92.00.45.00.03"},
	"NVIDIA A100-SXM4-40GB": {memMiB: 40960, powerLimitW: 400, idlePowerW: 55, maxSMMHz: 1410, idleSMMHz: 210, memMHz: 1215, vbios: "92.00.45.00.03"},
	"NVIDIA B200":           {memMiB: 183359, powerLimitW: 1000, idlePowerW: 140, maxSMMHz: 1965, idleSMMHz: 120, memMHz: 3996, vbios: "97.00.4D.00.01"},
	"NVIDIA L4":             {memMiB: 23034, powerLimitW: 72, idlePowerW: 16, maxSMMHz: 2040, idleSMMHz: 210, memMHz: 6251, vbios: "95.04.29.00.06"},
}

// pciBuses are an HGX board's eight GPUs' PCI buses (a DGX H100/H200's).
var pciBuses = []string{"18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"}

// Simulated is the simulated device: GPUs of one model whose numbers have
// the shapes real ones have (seeded noise, busy while the node runs job
// steps), with injected faults. Its state lives in Options.StateDir
// (StateFile), so every process of the node that opens the same directory
// sees the same GPUs and faults; writers serialise on a file lock, and the
// file is replaced atomically, so readers need no lock. Safe for concurrent
// use.
type Simulated struct {
	dir  string
	now  func() time.Time
	busy func() (all bool, some map[int]bool)

	mu sync.Mutex
	// xidSeen is the sequence number of the last Xid Xids returned.
	xidSeen uint64
}

// simState is StateFile's content.
type simState struct {
	Version int       `json:"version"`
	Model   string    `json:"model"`
	Driver  string    `json:"driver"`
	CUDA    string    `json:"cuda"`
	Seed    uint64    `json:"seed"`
	Created time.Time `json:"created"`
	// BootID is the node boot the state was last opened in (Options.BootID).
	BootID   string   `json:"boot_id,omitempty"`
	DiskFull bool     `json:"disk_full,omitempty"`
	XidSeq   uint64   `json:"xid_seq"`
	Xids     []simXid `json:"xids,omitempty"`
	GPUs     []simGPU `json:"gpus"`
}

// maxXids bounds the Xid journal kept in the state.
const maxXids = 256

type simXid struct {
	Seq     uint64    `json:"seq"`
	GPU     int       `json:"gpu"`
	Code    int       `json:"code"`
	Message string    `json:"message"`
	Time    time.Time `json:"time"`
}

// counters are a GPU's error counters.
type counters struct {
	SBEVol       uint64 `json:"sbe_vol"`
	DBEVol       uint64 `json:"dbe_vol"`
	SBEAgg       uint64 `json:"sbe_agg"`
	DBEAgg       uint64 `json:"dbe_agg"`
	RemapCorr    uint32 `json:"remap_corr"`
	RemapUnc     uint32 `json:"remap_unc"`
	RemapPending bool   `json:"remap_pending,omitempty"`
	RemapFailure bool   `json:"remap_failure,omitempty"`
	RetiredSBE   uint32 `json:"retired_sbe"`
	RetiredDBE   uint32 `json:"retired_dbe"`
	RetiredPend  uint32 `json:"retired_pending"`
	NVLinkCRC    uint64 `json:"nvlink_crc"`
	NVLinkReplay uint64 `json:"nvlink_replay"`
	PCIeReplay   uint64 `json:"pcie_replay"`
}

// simGPU is one simulated GPU: what does not change, its counters (Base:
// as it was made, what FAULT_CLEAR restores; C: now, less what the rate
// faults add since they began), and its faults.
type simGPU struct {
	Info    Info     `json:"info"`
	Base    counters `json:"base"`
	C       counters `json:"counters"`
	LastXid int      `json:"last_xid,omitempty"`
	Lost    bool     `json:"lost,omitempty"`
	// SBERate and NVLinkRate are errors per minute since SBESince and
	// NVLinkSince (rising counters); Thermal is when thermal runaway
	// began (zero: none), heating by ThermalRate °C per second (0, in a
	// state written before there was a rate: DefaultThermalRise); Slow is
	// the throughput divisor (0 or 1: none).
	SBERate     float64   `json:"sbe_rate,omitempty"`
	SBESince    time.Time `json:"sbe_since,omitzero"`
	NVLinkRate  float64   `json:"nvlink_rate,omitempty"`
	NVLinkSince time.Time `json:"nvlink_since,omitzero"`
	Thermal     time.Time `json:"thermal,omitzero"`
	ThermalRate float64   `json:"thermal_rate,omitempty"`
	Slow        float64   `json:"slow,omitempty"`
}

// ErrNoSimulatedGPUs is returned by ReadSimulated for a StateDir that
// holds no state.
var ErrNoSimulatedGPUs = errors.New("no simulated GPUs here")

// HasSimulated reports whether dir holds a simulated device's state.
func HasSimulated(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, StateFile))
	return err == nil
}

// newSimulated is the device of o's StateDir, clock and busy test, not
// opened yet.
func newSimulated(o Options) (*Simulated, error) {
	if o.StateDir == "" {
		return nil, errors.New("simulated GPUs: no state directory")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &Simulated{dir: o.StateDir, now: o.Now}
	if busy := o.Busy; busy != nil {
		s.busy = func() (bool, map[int]bool) { return busy(), nil }
	} else {
		dir := filepath.Join(filepath.Dir(o.StateDir), "steps")
		s.busy = func() (bool, map[int]bool) { return StepsBusy(dir) }
	}
	return s, nil
}

// OpenSimulated opens the simulated device whose state is in o.StateDir,
// making it (o.Count GPUs, 0 included, of o.Model, seeded by o.Seed) when
// the directory holds none, or holds another count or model, or a state
// that does not decode. An o.BootID other than the state's is a reboot of
// the node (see reboot). The agent opens its node's GPUs so.
func OpenSimulated(o Options) (*Simulated, error) {
	if o.Count < 0 {
		return nil, fmt.Errorf("simulated GPUs: count %d < 0", o.Count)
	}
	s, err := newSimulated(o)
	if err != nil {
		return nil, err
	}
	model := o.Model
	if model == "" {
		model = DefaultModel
	}
	remake := func(st *simState, exists bool) bool {
		return !exists || len(st.GPUs) != o.Count || st.Model != model
	}
	reboot := func(st *simState) bool { return o.BootID != "" && st.BootID != o.BootID }
	// Only a change takes the lock and writes.
	if cur, err := s.load(); err != nil || remake(cur, true) || reboot(cur) {
		if err := os.MkdirAll(o.StateDir, 0o755); err != nil {
			return nil, fmt.Errorf("simulated GPUs: %w", err)
		}
		err := s.update(func(st *simState, exists bool) (bool, error) {
			switch {
			case remake(st, exists):
				*st = newState(model, o.Count, seedOf(o), s.now())
				st.BootID = o.BootID
				return true, nil
			case reboot(st):
				st.reboot(s.now().UTC())
				st.BootID = o.BootID
				return true, nil
			}
			return false, nil
		})
		if err != nil {
			return nil, err
		}
	}
	return s, s.start()
}

// ReadSimulated opens the simulated device already in o.StateDir as it is
// (o.Count, Model, Seed and BootID are not used), writing nothing: what
// the node's nvidia-smi does, as the job's owner, who may not write the
// agent's state. ErrNoSimulatedGPUs when there is none. The device may
// still Inject where its user may write the state.
func ReadSimulated(o Options) (*Simulated, error) {
	s, err := newSimulated(o)
	if err != nil {
		return nil, err
	}
	if !HasSimulated(o.StateDir) {
		return nil, fmt.Errorf("%w (%s)", ErrNoSimulatedGPUs, o.StateDir)
	}
	return s, s.start()
}

// start reads the state once: Xids reports what happens from now on, like
// an NVML event set.
func (s *Simulated) start() error {
	st, err := s.load()
	if err != nil {
		return err
	}
	s.xidSeen = st.XidSeq
	return nil
}

// DefaultModel is the simulated GPUs' model when Options.Model is empty.
const DefaultModel = "NVIDIA H200"

// seedOf is o.Seed, or one derived from the state directory: a node's
// GPUs keep their serials and UUIDs whatever process makes them.
func seedOf(o Options) uint64 {
	if o.Seed != 0 {
		return o.Seed
	}
	h := fnv.New64a()
	abs, _ := filepath.Abs(o.StateDir)
	_, _ = h.Write([]byte(abs))
	return h.Sum64()
}

// StepGPUsSuffix names the file beside a step's pidfile
// ("<name>.pid" → "<name>.gpus") that lists the GPUs the step holds, its
// CUDA_VISIBLE_DEVICES ("0,1"): the agent's step shim writes it before the
// pidfile and removes it after.
const StepGPUsSuffix = ".gpus"

// maxStepGPUsBytes bounds what StepsBusy reads of a step's GPU list: a
// node's indexes, comma-separated, fit many times over.
const maxStepGPUsBytes = 4096

// readHead reads at most n bytes of path.
func readHead(path string, n int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, n))
}

// StepsBusy is the default busy test: which GPUs the node's running steps
// hold, from the pidfiles in dir (the agent's, one per running step) and
// the GPU lists beside them. A step with no list (one given no GPUs, so
// free to use any, or one an older agent started) makes every GPU busy,
// as all does.
func StepsBusy(dir string) (all bool, some map[int]bool) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false, nil
	}
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".pid")
		if !ok {
			continue
		}
		b, err := readHead(filepath.Join(dir, name+StepGPUsSuffix), maxStepGPUsBytes)
		if err != nil {
			return true, nil
		}
		for f := range strings.SplitSeq(strings.TrimSpace(string(b)), ",") {
			i, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || i < 0 {
				return true, nil // not a list of indexes (a UUID, say): every GPU, as before
			}
			if some == nil {
				some = map[int]bool{}
			}
			some[i] = true
		}
	}
	return false, some
}

// newState makes count fresh GPUs of model: identities and the few
// errors a fleet's healthy boards carry (an aggregate single-bit error or
// two, a PCIe replay, a correctable remapped row), from seed.
func newState(name string, count int, seed uint64, now time.Time) simState {
	m := modelOf(name)
	st := simState{Version: 1, Model: name, Driver: "580.159.04", CUDA: "13.0", Seed: seed, Created: now.UTC()}
	for i := range count {
		r := newRand(seed, uint64(i))
		bus := fmt.Sprintf("%02X", 0x18+i*0x11)
		if i < len(pciBuses) {
			bus = pciBuses[i]
		}
		u := r.bytes(16)
		info := Info{
			Index:         i,
			UUID:          fmt.Sprintf("GPU-%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16]),
			Name:          name,
			Serial:        fmt.Sprintf("16522%08d", r.next()%100000000),
			PCIBusID:      "00000000:" + bus + ":00.0",
			MemoryTotal:   m.memMiB << 20,
			PowerLimitW:   m.powerLimitW,
			DriverVersion: st.Driver,
			CUDAVersion:   st.CUDA,
			VBIOSVersion:  m.vbios,
		}
		var c counters
		if r.next()%4 == 0 {
			c.SBEAgg = 1 + r.next()%3
		}
		if r.next()%5 == 0 {
			c.PCIeReplay = 1 + r.next()%2
		}
		if r.next()%8 == 0 {
			c.RemapCorr = 1
		}
		st.GPUs = append(st.GPUs, simGPU{Info: info, Base: c, C: c})
	}
	return st
}

func modelOf(name string) model {
	if m, ok := models[name]; ok {
		return m
	}
	return models[DefaultModel]
}

// reboot is what a node reboot does to its GPUs: volatile counters reset,
// pending row remaps are applied, and the faults a reset clears go away (a
// lost GPU, thermal runaway, a slow GPU, NVLink errors). What is wrong
// with the hardware stays: aggregate counts, remapped rows, a remapping
// failure, a rising single-bit rate, a full disk.
func (st *simState) reboot(now time.Time) {
	for i := range st.GPUs {
		g := &st.GPUs[i]
		g.foldRates(now)
		g.C.SBEVol, g.C.DBEVol, g.C.NVLinkCRC, g.C.NVLinkReplay, g.C.PCIeReplay = 0, 0, 0, 0, 0
		g.C.RemapPending = false
		g.C.RetiredPend = 0
		g.LastXid, g.Lost, g.Thermal, g.Slow = 0, false, time.Time{}, 0
		g.NVLinkRate, g.NVLinkSince = 0, time.Time{}
	}
}

// foldRates adds to the counters what the rate faults added up to now and
// restarts them from now (zero now: stops them).
func (g *simGPU) foldRates(now time.Time) {
	sbe, crc, replay := g.rated(now)
	g.C.SBEVol += sbe
	g.C.SBEAgg += sbe
	g.C.NVLinkCRC += crc
	g.C.NVLinkReplay += replay
	if !g.SBESince.IsZero() {
		g.SBESince = now
	}
	if !g.NVLinkSince.IsZero() {
		g.NVLinkSince = now
	}
}

// rated is what the rate faults have added since they began, at now.
func (g *simGPU) rated(now time.Time) (sbe, crc, replay uint64) {
	if now.IsZero() {
		return 0, 0, 0
	}
	if g.SBERate > 0 && !g.SBESince.IsZero() && now.After(g.SBESince) {
		sbe = uint64(g.SBERate * now.Sub(g.SBESince).Minutes())
	}
	if g.NVLinkRate > 0 && !g.NVLinkSince.IsZero() && now.After(g.NVLinkSince) {
		crc = uint64(g.NVLinkRate * now.Sub(g.NVLinkSince).Minutes())
		replay = crc / 4
	}
	return sbe, crc, replay
}

// errCorrupt marks a state file that does not decode.
var errCorrupt = errors.New("state does not decode")

// load reads the state.
func (s *Simulated) load() (*simState, error) {
	b, err := os.ReadFile(filepath.Join(s.dir, StateFile))
	if err != nil {
		return nil, fmt.Errorf("simulated GPUs: %w", err)
	}
	var st simState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("simulated GPUs: %s: %w: %w", filepath.Join(s.dir, StateFile), errCorrupt, err)
	}
	return &st, nil
}

// update changes the state under the node-wide lock: fn gets the state
// (exists false: none yet) and says whether it changed it; a changed state
// is written to a temporary file and renamed over the old one.
func (s *Simulated) update(fn func(st *simState, exists bool) (bool, error)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	lf, err := os.OpenFile(filepath.Join(s.dir, lockFile), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("simulated GPUs: %w", err)
	}
	defer lf.Close()
	if err := flock(lf); err != nil {
		return fmt.Errorf("simulated GPUs: lock: %w", err)
	}
	var st simState
	exists := true
	cur, err := s.load()
	switch {
	case err == nil:
		st = *cur
	case errors.Is(err, os.ErrNotExist), errors.Is(err, errCorrupt):
		// A state that does not decode (a crash of an older writer
		// without rename) is made anew by an opener that knows the count.
		exists = false
	default:
		return err
	}
	changed, err := fn(&st, exists)
	if err != nil || !changed {
		return err
	}
	b, err := json.MarshalIndent(&st, "", " ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(s.dir, ".state-*")
	if err != nil {
		return fmt.Errorf("simulated GPUs: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("simulated GPUs: %w", err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("simulated GPUs: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("simulated GPUs: %w", err)
	}
	return os.Rename(tmp.Name(), filepath.Join(s.dir, StateFile))
}

// flock takes f's exclusive lock, retrying when a signal interrupts.
func flock(f *os.File) error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// Simulated reports true.
func (s *Simulated) Simulated() bool { return true }

// StateDir is the directory the state is kept in.
func (s *Simulated) StateDir() string { return s.dir }

// Info describes every GPU, by index (nil when the state cannot be read).
func (s *Simulated) Info() []Info {
	st, err := s.load()
	if err != nil {
		return nil
	}
	out := make([]Info, len(st.GPUs))
	for i, g := range st.GPUs {
		out[i] = g.Info
	}
	return out
}

// Model is the simulated GPUs' model name.
func (s *Simulated) Model() string {
	st, err := s.load()
	if err != nil {
		return ""
	}
	return st.Model
}

// Sample reads every GPU now.
func (s *Simulated) Sample(ctx context.Context) ([]*loomv1.GpuSample, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	st, err := s.load()
	if err != nil {
		return nil, err
	}
	now := s.now()
	all, some := s.busy()
	out := make([]*loomv1.GpuSample, len(st.GPUs))
	for i := range st.GPUs {
		out[i] = st.sample(i, now, all || some[i])
	}
	return out, nil
}

// sample is GPU i's reading at now.
func (st *simState) sample(i int, now time.Time, busy bool) *loomv1.GpuSample {
	g := &st.GPUs[i]
	s := &loomv1.GpuSample{Index: int32(i), Uuid: g.Info.UUID, Name: g.Info.Name}
	if g.Lost {
		s.Lost = true
		return s
	}
	m := modelOf(st.Model)
	// Noise is a function of (seed, GPU, second): every process reading
	// the same second sees the same numbers.
	r := newRand(st.Seed^0x9e3779b97f4a7c15, uint64(i)<<40|uint64(now.Unix()))
	noise := func(span float64) float64 { return r.float() * span }
	var temp, power, util float64
	var memUsed uint64
	var reasons uint64
	sm := float64(m.maxSMMHz)
	if busy {
		temp = 56 + float64(i%4) + noise(8)
		util = 92 + noise(8)
		power = m.powerLimitW*0.68 + noise(m.powerLimitW*0.27)
		memUsed = uint64(float64(g.Info.MemoryTotal-m.reserved()<<20) * (0.78 + noise(0.1)))
		if power > m.powerLimitW*0.93 {
			reasons |= ReasonSwPowerCap
			sm -= 45 + noise(90)
		}
	} else {
		temp = 29 + float64(i%4) + noise(3)
		power = m.idlePowerW + noise(8)
		memUsed = 0 // an idle H200 shows 0 MiB used, its reserve apart
		sm = float64(m.idleSMMHz)
		reasons = ReasonGpuIdle
	}
	if !g.Thermal.IsZero() {
		rise := g.ThermalRate
		if rise <= 0 {
			rise = DefaultThermalRise
		}
		temp = min(temp+rise*max(0, now.Sub(g.Thermal).Seconds()), maxRunawayTempC)
		if temp >= SlowdownTempC {
			reasons &^= ReasonGpuIdle
			reasons |= ReasonSwThermalSlowdown | ReasonHwThermalSlowdown
			// Clocks fall as the board tries to hold its temperature.
			sm = max(float64(m.idleSMMHz), float64(m.maxSMMHz)*max(0.3, 1-(temp-SlowdownTempC)/20))
			power *= 0.6
		}
	}
	if g.Slow > 1 {
		sm /= g.Slow
		power /= g.Slow
		util = min(util, 100/g.Slow+noise(5))
	}
	c := g.C
	sbe, crc, replay := g.rated(now)
	c.SBEVol += sbe
	c.SBEAgg += sbe
	c.NVLinkCRC += crc
	c.NVLinkReplay += replay
	s.TemperatureC = math.Round(temp)
	s.PowerW = math.Round(power*100) / 100
	s.GpuUtilPercent = math.Round(util)
	s.MemoryUsedBytes = memUsed &^ (1<<20 - 1)
	s.MemoryTotalBytes = g.Info.MemoryTotal
	s.MemoryReservedBytes = m.reserved() << 20
	s.SmClockMhz = uint32(sm) / 15 * 15
	s.MemClockMhz = m.memMHz
	s.ThrottleReasons = reasons
	s.EccSbeVolatile, s.EccDbeVolatile, s.EccSbeAggregate, s.EccDbeAggregate = c.SBEVol, c.DBEVol, c.SBEAgg, c.DBEAgg
	s.RemappedCorrectable, s.RemappedUncorrectable = c.RemapCorr, c.RemapUnc
	s.RemapPending, s.RemapFailure = c.RemapPending, c.RemapFailure
	s.RetiredPagesSbe, s.RetiredPagesDbe, s.RetiredPagesPending = c.RetiredSBE, c.RetiredDBE, c.RetiredPend
	s.NvlinkCrcErrors, s.NvlinkReplayErrors, s.PcieReplay = c.NVLinkCRC, c.NVLinkReplay, c.PCIeReplay
	s.LastXid = int32(g.LastXid)
	return s
}

// Xids returns the Xids recorded since the last call (since Open for the
// first), oldest first: injected ones, whichever process injected them.
func (s *Simulated) Xids(ctx context.Context) ([]Xid, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	st, err := s.load()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Xid
	for _, x := range st.Xids {
		if x.Seq > s.xidSeen {
			out = append(out, Xid{GPU: x.GPU, Code: x.Code, Message: x.Message, Time: x.Time})
		}
	}
	s.xidSeen = max(s.xidSeen, st.XidSeq)
	return out, nil
}

// RecentXids returns the last n Xids recorded (every process's), oldest
// first, without moving Xids' cursor: what nvidia-smi shows.
func (s *Simulated) RecentXids(n int) []Xid {
	st, err := s.load()
	if err != nil {
		return nil
	}
	xs := st.Xids
	if len(xs) > n {
		xs = xs[len(xs)-n:]
	}
	out := make([]Xid, len(xs))
	for i, x := range xs {
		out[i] = Xid{GPU: x.GPU, Code: x.Code, Message: x.Message, Time: x.Time}
	}
	return out
}

// DiskFull reports whether FAULT_DISK_FULL is injected.
func (s *Simulated) DiskFull() bool {
	st, err := s.load()
	return err == nil && st.DiskFull
}

// DiskUsage is the package's DiskUsage of paths, with every filesystem
// reported full while FAULT_DISK_FULL is injected.
func (s *Simulated) DiskUsage(paths ...string) []*loomv1.DiskSample {
	out := DiskUsage(paths...)
	if s.DiskFull() {
		for _, d := range out {
			d.UsedBytes = d.TotalBytes
		}
	}
	return out
}

// Inject adds a fault. GPU kinds take f.Gpu (-1: every GPU); FAULT_CLEAR
// with gpu -1 clears every GPU and the disk; FAULT_HUNG_JOB and
// FAULT_NO_HEARTBEAT are the agent's, not the device's, and are refused.
func (s *Simulated) Inject(f *loomv1.Fault) error {
	if f == nil {
		return errors.New("no fault")
	}
	now := s.now().UTC()
	return s.update(func(st *simState, exists bool) (bool, error) {
		if !exists {
			return false, ErrNoSimulatedGPUs
		}
		return true, st.inject(f, now)
	})
}

// inject applies f to the state at now.
func (st *simState) inject(f *loomv1.Fault, now time.Time) error {
	kind := f.GetKind()
	switch kind {
	case loomv1.FaultKind_FAULT_DISK_FULL:
		st.DiskFull = true
		return nil
	case loomv1.FaultKind_FAULT_HUNG_JOB, loomv1.FaultKind_FAULT_NO_HEARTBEAT:
		return fmt.Errorf("%s is the agent's fault, not the GPUs'", kind)
	case loomv1.FaultKind_FAULT_KIND_UNSPECIFIED:
		return errors.New("no fault kind")
	case loomv1.FaultKind_FAULT_XID:
		if f.GetXid() <= 0 {
			return fmt.Errorf("FAULT_XID needs an Xid code > 0, got %d", f.GetXid())
		}
	}
	if _, ok := loomv1.FaultKind_name[int32(kind)]; !ok {
		return fmt.Errorf("unknown fault kind %d", kind)
	}
	idx := []int{int(f.GetGpu())}
	if f.GetGpu() < 0 {
		idx = idx[:0]
		for i := range st.GPUs {
			idx = append(idx, i)
		}
		if kind == loomv1.FaultKind_FAULT_CLEAR {
			st.DiskFull = false
		}
	} else if int(f.GetGpu()) >= len(st.GPUs) {
		return fmt.Errorf("no GPU %d: the node has %d", f.GetGpu(), len(st.GPUs))
	}
	value := f.GetValue()
	for _, i := range idx {
		g := &st.GPUs[i]
		switch kind {
		case loomv1.FaultKind_FAULT_XID:
			st.xid(i, int(f.GetXid()), now)
		case loomv1.FaultKind_FAULT_ECC_SBE:
			if value <= 0 {
				value = DefaultSBEPerMinute
			}
			g.foldRates(now)
			g.SBERate += value
			g.SBESince = now
			if g.SBERate >= 600 {
				st.xid(i, 92, now)
			}
		case loomv1.FaultKind_FAULT_ECC_DBE:
			n := uint64(max(1, value))
			g.C.DBEVol += n
			g.C.DBEAgg += n
			// Hopper and Ampere retire rows, not pages: each DBE remaps a
			// row on the next reset.
			g.C.RemapUnc += uint32(n)
			g.C.RemapPending = true
			st.xid(i, 48, now)
			st.xid(i, 63, now)
		case loomv1.FaultKind_FAULT_ROW_REMAP_FAILURE:
			g.C.RemapFailure = true
			g.C.RemapPending = true
			st.xid(i, 64, now)
		case loomv1.FaultKind_FAULT_THERMAL:
			// A second injection does not cool the GPU down: the runaway
			// goes on from where it is, at the rate it began with.
			if g.Thermal.IsZero() {
				if value <= 0 {
					value = DefaultThermalRise
				}
				g.Thermal, g.ThermalRate = now, value
			}
		case loomv1.FaultKind_FAULT_SLOW_GPU:
			if value <= 1 {
				value = DefaultSlowFactor
			}
			g.Slow = value
		case loomv1.FaultKind_FAULT_FALLEN_OFF_BUS:
			if !g.Lost {
				st.xid(i, 79, now)
			}
			g.Lost = true
		case loomv1.FaultKind_FAULT_NVLINK:
			if value <= 0 {
				value = DefaultNVLinkPerMinute
			}
			g.foldRates(now)
			g.NVLinkRate += value
			g.NVLinkSince = now
			st.xid(i, 74, now)
		case loomv1.FaultKind_FAULT_CLEAR:
			*g = simGPU{Info: g.Info, Base: g.Base, C: g.Base}
		}
	}
	return nil
}

// xid records Xid code on GPU i at now.
func (st *simState) xid(i, code int, now time.Time) {
	st.XidSeq++
	text := XidDescription(code)
	st.Xids = append(st.Xids, simXid{Seq: st.XidSeq, GPU: i, Code: code, Time: now,
		Message: XidLogLine(st.GPUs[i].Info.PCIBusID, code, text)})
	if len(st.Xids) > maxXids {
		st.Xids = st.Xids[len(st.Xids)-maxXids:]
	}
	st.GPUs[i].LastXid = code
}

// ThroughputFactor is GPU i's share of nominal throughput: 0 when lost,
// 1/value under FAULT_SLOW_GPU, down to 0.3 under thermal slowdown, else 1.
func (s *Simulated) ThroughputFactor(i int) float64 {
	st, err := s.load()
	if err != nil || i < 0 || i >= len(st.GPUs) {
		return 0
	}
	g := st.GPUs[i]
	if g.Lost {
		return 0
	}
	f := 1.0
	if g.Slow > 1 {
		f /= g.Slow
	}
	if !g.Thermal.IsZero() {
		m := modelOf(st.Model)
		smp := st.sample(i, s.now(), true)
		f *= min(1, float64(smp.SmClockMhz)/float64(m.maxSMMHz))
	}
	return f
}

// Close releases nothing: the state stays for the node's other processes.
func (s *Simulated) Close() error { return nil }

// rng is a small deterministic generator (splitmix64) seeded by a hash of
// (seed, stream), so that numbers depend only on what they are for.
type rng struct{ s uint64 }

func newRand(seed, stream uint64) *rng {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], seed)
	binary.LittleEndian.PutUint64(b[8:], stream)
	h := sha256.Sum256(b[:])
	return &rng{s: binary.LittleEndian.Uint64(h[:8])}
}

func (r *rng) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// float is uniform in [0, 1).
func (r *rng) float() float64 { return float64(r.next()>>11) / (1 << 53) }

func (r *rng) bytes(n int) []byte {
	out := make([]byte, 0, n+8)
	for len(out) < n {
		out = binary.LittleEndian.AppendUint64(out, r.next())
	}
	return out[:n]
}

var _ Device = (*Simulated)(nil)

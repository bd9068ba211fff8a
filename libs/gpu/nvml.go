//go:build linux && cgo

package gpu

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// NVML is the node's real GPUs, read through NVML (go-nvml, which loads
// libnvidia-ml.so.1 at Init: a binary built with it runs where no driver
// is, and OpenNVML then fails). Every call is made only after a successful
// Init, and none after Close. Safe for concurrent use.
type NVML struct {
	mu     sync.Mutex
	closed bool
	devs   []nvml.Device
	infos  []Info
	// set is the Xid event set (nil when no GPU supports Xid events or
	// registering failed: see XidError).
	set    nvml.EventSet
	setErr error
	// lost marks the GPUs the last Sample found fallen off the bus.
	lost []bool
	// lastXid is each GPU's last Xid seen by Xids.
	lastXid []int
	// fieldErrs is, per GPU, the fields the last Sample could not read and
	// NVML's answer (NOT_SUPPORTED on boards without the feature).
	fieldErrs []map[string]string
	// memV2 says the driver has nvmlDeviceGetMemoryInfo_v2 (R510 and
	// later). Its used memory leaves out what the driver reserves for
	// itself, as nvidia-smi and dcgm-exporter's DCGM_FI_DEV_FB_USED do; v1
	// counts that reserve as used (615 MiB on an idle H200 with driver
	// 580, which nvidia-smi shows as 0 MiB used).
	memV2 bool
}

// OpenNVML initialises NVML and opens every GPU it shows, with an event
// set for their Xids. It fails where no driver loads.
func OpenNVML() (*NVML, error) {
	if r := nvml.Init(); r != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML init: %s", nvmlErr(r))
	}
	// A symbol the driver lacks must not be called (the call would jump
	// to nothing), so the newer call is looked up first.
	n := &NVML{memV2: nvml.Extensions().LookupSymbol("nvmlDeviceGetMemoryInfo_v2") == nil}
	fail := func(err error) (*NVML, error) {
		_ = nvml.Shutdown()
		return nil, err
	}
	count, r := nvml.DeviceGetCount()
	if r != nvml.SUCCESS {
		return fail(fmt.Errorf("NVML device count: %s", nvmlErr(r)))
	}
	driver, r := nvml.SystemGetDriverVersion()
	if r != nvml.SUCCESS {
		driver = ""
	}
	cuda := ""
	if v, r := nvml.SystemGetCudaDriverVersion(); r == nvml.SUCCESS {
		cuda = fmt.Sprintf("%d.%d", v/1000, v%1000/10)
	}
	for i := range count {
		d, r := nvml.DeviceGetHandleByIndex(i)
		if r != nvml.SUCCESS {
			// A GPU that has fallen off the bus has no handle: it is
			// still the node's GPU i, reported lost.
			n.devs = append(n.devs, nil)
			n.infos = append(n.infos, Info{Index: i, DriverVersion: driver, CUDAVersion: cuda})
			continue
		}
		info := Info{Index: i, DriverVersion: driver, CUDAVersion: cuda}
		info.Name, _ = d.GetName()
		info.UUID, _ = d.GetUUID()
		info.Serial, _ = d.GetSerial()
		info.VBIOSVersion, _ = d.GetVbiosVersion()
		if pci, r := d.GetPciInfo(); r == nvml.SUCCESS {
			info.PCIBusID = cString(pci.BusId[:])
		}
		if m, r := d.GetMemoryInfo(); r == nvml.SUCCESS {
			info.MemoryTotal = m.Total
		}
		if mw, r := d.GetPowerManagementLimit(); r == nvml.SUCCESS {
			info.PowerLimitW = float64(mw) / 1000
		}
		n.devs = append(n.devs, d)
		n.infos = append(n.infos, info)
	}
	n.lost = make([]bool, len(n.devs))
	n.lastXid = make([]int, len(n.devs))
	n.fieldErrs = make([]map[string]string, len(n.devs))
	n.openEvents()
	return n, nil
}

// openEvents makes the Xid event set and registers every GPU that
// supports Xid events; what fails is kept in setErr (Xids then returns
// none and says why once).
func (n *NVML) openEvents() {
	set, r := nvml.EventSetCreate()
	if r != nvml.SUCCESS {
		n.setErr = fmt.Errorf("NVML event set: %s", nvmlErr(r))
		return
	}
	registered := 0
	var errs []error
	for i, d := range n.devs {
		if d == nil {
			continue
		}
		types, r := d.GetSupportedEventTypes()
		if r != nvml.SUCCESS || types&nvml.EventTypeXidCriticalError == 0 {
			errs = append(errs, fmt.Errorf("GPU %d: no Xid events: %s", i, nvmlErr(r)))
			continue
		}
		if r := d.RegisterEvents(nvml.EventTypeXidCriticalError, set); r != nvml.SUCCESS {
			errs = append(errs, fmt.Errorf("GPU %d: register Xid events: %s", i, nvmlErr(r)))
			continue
		}
		registered++
	}
	if registered == 0 {
		_ = set.Free()
		n.setErr = errors.Join(append([]error{errors.New("no GPU delivers Xid events")}, errs...)...)
		return
	}
	n.set = set
	n.setErr = errors.Join(errs...)
}

// XidError says why some or all GPUs' Xids cannot be read through the
// event set (nil when every GPU is registered).
func (n *NVML) XidError() error { return n.setErr }

// nvmlErr is NVML's text for r.
func nvmlErr(r nvml.Return) string {
	if r == nvml.SUCCESS {
		return "success"
	}
	return r.Error()
}

// cString is a NUL-terminated C char array as a string.
func cString(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}

// Simulated reports false.
func (n *NVML) Simulated() bool { return false }

// Info describes every GPU, by index.
func (n *NVML) Info() []Info { return append([]Info(nil), n.infos...) }

// Sample reads every field of every GPU. A field a GPU cannot report
// (NOT_SUPPORTED, say) stays zero and is named by FieldErrors; a GPU that
// has fallen off the bus (GPU_IS_LOST) is reported Lost.
func (n *NVML) Sample(ctx context.Context) ([]*loomv1.GpuSample, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, errors.New("NVML is closed")
	}
	out := make([]*loomv1.GpuSample, len(n.devs))
	for i, d := range n.devs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		errs := map[string]string{}
		out[i] = n.sampleOne(i, d, errs)
		n.fieldErrs[i] = errs
		n.lost[i] = out[i].GetLost()
		out[i].LastXid = int32(n.lastXid[i])
	}
	return out, nil
}

// sampleOne reads GPU i; errs gets the fields that could not be read.
func (n *NVML) sampleOne(i int, d nvml.Device, errs map[string]string) *loomv1.GpuSample {
	s := &loomv1.GpuSample{Index: int32(i), Uuid: n.infos[i].UUID, Name: n.infos[i].Name}
	if d == nil {
		s.Lost = true
		errs["handle"] = "no device handle"
		return s
	}
	lost := false
	ok := func(field string, r nvml.Return) bool {
		if r == nvml.SUCCESS {
			return true
		}
		if r == nvml.ERROR_GPU_IS_LOST {
			lost = true
		}
		errs[field] = nvmlErr(r)
		return false
	}
	if t, r := d.GetTemperature(nvml.TEMPERATURE_GPU); ok("temperature", r) {
		s.TemperatureC = float64(t)
	}
	if lost {
		return &loomv1.GpuSample{Index: s.Index, Uuid: s.Uuid, Name: s.Name, Lost: true}
	}
	if mw, r := d.GetPowerUsage(); ok("power", r) {
		s.PowerW = float64(mw) / 1000
	}
	if u, r := d.GetUtilizationRates(); ok("utilization", r) {
		s.GpuUtilPercent = float64(u.Gpu)
	}
	if n.memV2 {
		if m, r := d.GetMemoryInfo_v2(); ok("memory", r) {
			s.MemoryUsedBytes, s.MemoryTotalBytes, s.MemoryReservedBytes = m.Used, m.Total, m.Reserved
		}
	} else if m, r := d.GetMemoryInfo(); ok("memory", r) {
		s.MemoryUsedBytes, s.MemoryTotalBytes = m.Used, m.Total
	}
	if c, r := d.GetClockInfo(nvml.CLOCK_SM); ok("sm_clock", r) {
		s.SmClockMhz = c
	}
	if c, r := d.GetClockInfo(nvml.CLOCK_MEM); ok("mem_clock", r) {
		s.MemClockMhz = c
	}
	if v, r := d.GetCurrentClocksEventReasons(); ok("clocks_event_reasons", r) {
		s.ThrottleReasons = v
	}
	ecc := func(field string, t nvml.MemoryErrorType, c nvml.EccCounterType, dst *uint64) {
		if v, r := d.GetTotalEccErrors(t, c); ok(field, r) {
			*dst = v
		}
	}
	ecc("ecc_sbe_volatile", nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.VOLATILE_ECC, &s.EccSbeVolatile)
	ecc("ecc_dbe_volatile", nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC, &s.EccDbeVolatile)
	ecc("ecc_sbe_aggregate", nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.AGGREGATE_ECC, &s.EccSbeAggregate)
	ecc("ecc_dbe_aggregate", nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.AGGREGATE_ECC, &s.EccDbeAggregate)
	if corr, unc, pending, failure, r := d.GetRemappedRows(); ok("remapped_rows", r) {
		s.RemappedCorrectable, s.RemappedUncorrectable = uint32(corr), uint32(unc)
		s.RemapPending, s.RemapFailure = pending, failure
	}
	if p, r := d.GetRetiredPages(nvml.PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS); ok("retired_pages_sbe", r) {
		s.RetiredPagesSbe = uint32(len(p))
	}
	if p, r := d.GetRetiredPages(nvml.PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR); ok("retired_pages_dbe", r) {
		s.RetiredPagesDbe = uint32(len(p))
	}
	if st, r := d.GetRetiredPagesPendingStatus(); ok("retired_pages_pending", r) && st == nvml.FEATURE_ENABLED {
		s.RetiredPagesPending = 1
	}
	// NVLink counters are per link: the sum over the active ones (what
	// dcgm-exporter's _TOTAL fields are).
	active := 0
	var firstErr nvml.Return = nvml.SUCCESS
	for link := range nvml.NVLINK_MAX_LINKS {
		state, r := d.GetNvLinkState(link)
		if r != nvml.SUCCESS {
			if firstErr == nvml.SUCCESS {
				firstErr = r
			}
			continue
		}
		if state != nvml.FEATURE_ENABLED {
			continue
		}
		active++
		if v, r := d.GetNvLinkErrorCounter(link, nvml.NVLINK_ERROR_DL_CRC_FLIT); ok("nvlink_crc", r) {
			s.NvlinkCrcErrors += v
		}
		if v, r := d.GetNvLinkErrorCounter(link, nvml.NVLINK_ERROR_DL_REPLAY); ok("nvlink_replay", r) {
			s.NvlinkReplayErrors += v
		}
	}
	if active == 0 && firstErr != nvml.SUCCESS {
		ok("nvlink", firstErr)
	}
	if v, r := d.GetPcieReplayCounter(); ok("pcie_replay", r) {
		s.PcieReplay = uint64(v)
	}
	if lost {
		return &loomv1.GpuSample{Index: s.Index, Uuid: s.Uuid, Name: s.Name, Lost: true}
	}
	return s
}

// FieldErrors is, for GPU i, the fields the last Sample could not read
// and NVML's answer for each (nil before the first Sample).
func (n *NVML) FieldErrors(i int) map[string]string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if i < 0 || i >= len(n.fieldErrs) {
		return nil
	}
	return n.fieldErrs[i]
}

// Xids drains the event set: the Xids NVML delivered since the last call.
func (n *NVML) Xids(ctx context.Context) ([]Xid, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, errors.New("NVML is closed")
	}
	if n.set == nil {
		return nil, nil
	}
	var out []Xid
	for ctx.Err() == nil {
		ev, r := n.set.Wait(0)
		if r == nvml.ERROR_TIMEOUT {
			break
		}
		if r != nvml.SUCCESS {
			return out, fmt.Errorf("NVML event wait: %s", nvmlErr(r))
		}
		if ev.EventType&nvml.EventTypeXidCriticalError == 0 {
			continue
		}
		idx := -1
		if ev.Device != nil {
			if v, r := ev.Device.GetIndex(); r == nvml.SUCCESS {
				idx = v
			}
		}
		code := int(ev.EventData)
		bus := ""
		if idx >= 0 && idx < len(n.infos) {
			bus = n.infos[idx].PCIBusID
			n.lastXid[idx] = code
		}
		out = append(out, Xid{GPU: idx, Code: code, Time: time.Now(),
			Message: XidLogLine(bus, code, XidDescription(code))})
	}
	return out, nil
}

// Inject refuses: faults go only into simulated GPUs.
func (n *NVML) Inject(*loomv1.Fault) error { return ErrNotSimulated }

// ThroughputFactor is 0 for a GPU the last Sample found lost, else 1.
func (n *NVML) ThroughputFactor(i int) float64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	if i < 0 || i >= len(n.lost) || n.lost[i] {
		return 0
	}
	return 1
}

// Close frees the event set and shuts NVML down; later calls fail.
func (n *NVML) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	if n.set != nil {
		_ = n.set.Free()
	}
	if r := nvml.Shutdown(); r != nvml.SUCCESS {
		return fmt.Errorf("NVML shutdown: %s", nvmlErr(r))
	}
	return nil
}

var _ Device = (*NVML)(nil)

// Package gpu reads a node's GPUs through one narrow interface, Device, as
// Cluster Health Scanner and NVIDIA's k8s-device-plugin do: NVML where a
// driver loads (every call gated on a successful Init, so a machine without
// one still builds and runs), and a simulated device with the same shapes of
// numbers, and fault injection, everywhere else.
//
// The simulated device keeps its state (the devices, their counters and the
// injected faults) in a directory, so that every process on the node — the
// agent, a job, the node's `nvidia-smi` — sees the same GPUs.
package gpu

import (
	"context"
	"errors"
	"time"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// StateDirEnv names the simulated device's state directory in a job's
// environment: the agent sets it for every step on a node with simulated
// GPUs, and the node's nvidia-smi reads it.
const StateDirEnv = "LOOM_GPU_STATE_DIR"

// ErrNotSimulated is returned by Inject on a device with real GPUs: faults are
// injected only into the simulated device.
var ErrNotSimulated = errors.New("faults can be injected only into simulated GPUs")

// Info is what does not change about one GPU (nvidia-smi -q's header part).
type Info struct {
	Index         int
	UUID          string
	Name          string // e.g. "NVIDIA H200"
	Serial        string
	PCIBusID      string // e.g. "00000000:18:00.0"
	MemoryTotal   uint64 // bytes
	PowerLimitW   float64
	DriverVersion string
	CUDAVersion   string
	VBIOSVersion  string
}

// Xid is one Xid event as NVML's event set (or the kernel log) reports it.
type Xid struct {
	GPU     int
	Code    int
	Message string
	Time    time.Time
}

// FreeBytes is a GPU's free memory as nvidia-smi and DCGM count it: its
// total less what is used and what the driver reserves.
func FreeBytes(s *loomv1.GpuSample) uint64 {
	return s.GetMemoryTotalBytes() - min(s.GetMemoryTotalBytes(), s.GetMemoryUsedBytes()+s.GetMemoryReservedBytes())
}

// Device is one node's GPUs. Implementations are safe for concurrent use.
type Device interface {
	// Simulated reports whether this is the simulated device.
	Simulated() bool
	// Info describes every GPU, by index.
	Info() []Info
	// Sample reads every GPU's telemetry now, by index. A GPU that has fallen
	// off the bus is reported with Lost set, not as an error.
	Sample(ctx context.Context) ([]*loomv1.GpuSample, error)
	// Xids returns the Xid events seen since the last call (NVML event set;
	// the simulated device's injected ones), oldest first.
	Xids(ctx context.Context) ([]Xid, error)
	// Inject adds a fault (simulated device only; ErrNotSimulated otherwise).
	Inject(f *loomv1.Fault) error
	// ThroughputFactor is the share of nominal throughput GPU i delivers now
	// (1 when healthy; 1/value under FAULT_SLOW_GPU; 0 when lost): the speed
	// and stress checks scale their work by it on the simulated device.
	ThroughputFactor(i int) float64
	// Close releases NVML (Shutdown) or the simulated state.
	Close() error
}

// Options choose and configure the device Open returns.
type Options struct {
	// Simulate forces the simulated device even where NVML would load.
	Simulate bool
	// Count and Model are the simulated device's GPU count and model name
	// (e.g. 8, "NVIDIA H200"); ignored for real GPUs.
	Count int
	Model string
	// StateDir holds the simulated device's state, shared with the node's
	// other processes (nvidia-smi); required when simulating.
	StateDir string
	// Seed makes the simulated readings reproducible.
	Seed uint64
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// BootID is the node's boot (its host_boot_id) for the simulated
	// device: a state last opened in another boot has been through a
	// reboot, which resets volatile counters and clears the faults a reset
	// clears. Empty: no reboot is ever seen.
	BootID string
	// Busy says whether the node runs jobs now, which the simulated GPUs'
	// utilisation, power and temperature follow (nil: a GPU is busy while
	// a step that holds it runs: StepsBusy of the steps directory beside
	// StateDir).
	Busy func() bool
}

package domain

import (
	"math"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/termtext"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
)

// Bounds of what a node reports in its telemetry (GpuTelemetry), which
// health keeps as the node's last sample and shows in NodeHealth (loom
// health nodes' per-GPU table, the console, REST).
const (
	// MaxGPUSamples bounds a sample's GPUs (no machine has more).
	MaxGPUSamples = 64
	// MaxDiskSamples bounds a sample's disks.
	MaxDiskSamples = 64
	// MaxGPUTextBytes bounds a GPU's uuid and name (NVML's are 40 and
	// about 30 bytes).
	MaxGPUTextBytes = 96
	// MaxMountBytes bounds a disk's mount point.
	MaxMountBytes = 256
)

// boundTelemetry is a copy of t fit to keep and show: at most
// MaxGPUSamples GPUs and MaxDiskSamples disks, their text cleaned of
// control characters and cut (termtext), and temperatures, powers and
// utilisations that are not finite read as 0. The signature proves which
// node sent it; the rest is the node's word, and a GPU named with terminal
// escapes reached every operator's terminal.
func boundTelemetry(t *eventsv1.GpuTelemetry) *eventsv1.GpuTelemetry {
	t = proto.Clone(t).(*eventsv1.GpuTelemetry)
	if len(t.Gpus) > MaxGPUSamples {
		t.Gpus = t.Gpus[:MaxGPUSamples]
	}
	if len(t.Disks) > MaxDiskSamples {
		t.Disks = t.Disks[:MaxDiskSamples]
	}
	if t.OfferedGpus < 0 || t.OfferedGpus > MaxGPUSamples {
		// Not a count the samples could be held to: unknown.
		t.OfferedGpus = 0
	}
	finite := func(v *float64) {
		if math.IsNaN(*v) || math.IsInf(*v, 0) {
			*v = 0
		}
	}
	for _, g := range t.Gpus {
		g.Uuid = termtext.Clean(g.GetUuid(), MaxGPUTextBytes)
		g.Name = termtext.Clean(g.GetName(), MaxGPUTextBytes)
		finite(&g.TemperatureC)
		finite(&g.PowerW)
		finite(&g.GpuUtilPercent)
	}
	for _, d := range t.Disks {
		d.Mount = termtext.Clean(d.GetMount(), MaxMountBytes)
	}
	return t
}

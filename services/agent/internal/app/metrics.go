package app

import (
	"context"
	_ "embed"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/loom-ml/loom/libs/gpu"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// dcgmCounters is dcgm-exporter's default counters file
// (shared/data/health/dcgm-exporter_default-counters.csv), with the few
// DCGM fields Loom serves beyond it appended: each metric's type and help
// text come from it, as dcgm-exporter's do.
//
//go:embed dcgm-exporter-counters.csv
var dcgmCounters string

// dcgmLine is one field of the counters file, commented out or not
// ("# DCGM_FI_DEV_ECC_SBE_VOL_TOTAL, counter, Total number of …").
var dcgmLine = regexp.MustCompile(`^#?\s*(DCGM_\w+)\s*,\s*(\w+)\s*,\s*(.*)$`)

// dcgmField is a field's metric type and help text.
type dcgmField struct {
	counter bool
	help    string
}

func dcgmFields() map[string]dcgmField {
	out := map[string]dcgmField{}
	for _, l := range strings.Split(dcgmCounters, "\n") {
		m := dcgmLine.FindStringSubmatch(strings.TrimSpace(l))
		if m == nil || m[2] == "label" {
			continue
		}
		out[m[1]] = dcgmField{counter: m[2] == "counter", help: strings.TrimSpace(m[3])}
	}
	return out
}

// gpuMetric is one dcgm-exporter metric and how a sample gives its value.
type gpuMetric struct {
	name  string
	value func(s *loomv1.GpuSample) float64
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// gpuMetrics are the metrics served per GPU, by dcgm-exporter's names.
var gpuMetrics = []gpuMetric{
	{"DCGM_FI_DEV_SM_CLOCK", func(s *loomv1.GpuSample) float64 { return float64(s.GetSmClockMhz()) }},
	{"DCGM_FI_DEV_MEM_CLOCK", func(s *loomv1.GpuSample) float64 { return float64(s.GetMemClockMhz()) }},
	{"DCGM_FI_DEV_GPU_TEMP", func(s *loomv1.GpuSample) float64 { return s.GetTemperatureC() }},
	{"DCGM_FI_DEV_POWER_USAGE", func(s *loomv1.GpuSample) float64 { return s.GetPowerW() }},
	{"DCGM_FI_DEV_PCIE_REPLAY_COUNTER", func(s *loomv1.GpuSample) float64 { return float64(s.GetPcieReplay()) }},
	{"DCGM_FI_DEV_GPU_UTIL", func(s *loomv1.GpuSample) float64 { return s.GetGpuUtilPercent() }},
	{"DCGM_FI_DEV_XID_ERRORS", func(s *loomv1.GpuSample) float64 { return float64(s.GetLastXid()) }},
	{"DCGM_FI_DEV_FB_FREE", func(s *loomv1.GpuSample) float64 { return float64(gpu.FreeBytes(s) >> 20) }},
	{"DCGM_FI_DEV_FB_USED", func(s *loomv1.GpuSample) float64 { return float64(s.GetMemoryUsedBytes() >> 20) }},
	{"DCGM_FI_DEV_FB_RESERVED", func(s *loomv1.GpuSample) float64 { return float64(s.GetMemoryReservedBytes() >> 20) }},
	{"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", func(s *loomv1.GpuSample) float64 { return float64(s.GetEccSbeVolatile()) }},
	{"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", func(s *loomv1.GpuSample) float64 { return float64(s.GetEccDbeVolatile()) }},
	{"DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", func(s *loomv1.GpuSample) float64 { return float64(s.GetEccSbeAggregate()) }},
	{"DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", func(s *loomv1.GpuSample) float64 { return float64(s.GetEccDbeAggregate()) }},
	{"DCGM_FI_DEV_RETIRED_SBE", func(s *loomv1.GpuSample) float64 { return float64(s.GetRetiredPagesSbe()) }},
	{"DCGM_FI_DEV_RETIRED_DBE", func(s *loomv1.GpuSample) float64 { return float64(s.GetRetiredPagesDbe()) }},
	{"DCGM_FI_DEV_RETIRED_PENDING", func(s *loomv1.GpuSample) float64 { return float64(s.GetRetiredPagesPending()) }},
	{"DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", func(s *loomv1.GpuSample) float64 { return float64(s.GetNvlinkCrcErrors()) }},
	{"DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", func(s *loomv1.GpuSample) float64 { return float64(s.GetNvlinkReplayErrors()) }},
	{"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", func(s *loomv1.GpuSample) float64 { return float64(s.GetRemappedUncorrectable()) }},
	{"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", func(s *loomv1.GpuSample) float64 { return float64(s.GetRemappedCorrectable()) }},
	{"DCGM_FI_DEV_ROW_REMAP_FAILURE", func(s *loomv1.GpuSample) float64 { return b2f(s.GetRemapFailure()) }},
	{"DCGM_FI_DEV_ROW_REMAP_PENDING", func(s *loomv1.GpuSample) float64 { return b2f(s.GetRemapPending()) }},
	{"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", func(s *loomv1.GpuSample) float64 { return float64(s.GetThrottleReasons()) }},
}

// gpuLabels are dcgm-exporter's labels on every GPU metric.
var gpuLabels = []string{"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"}

// collector serves the node's GPUs on /metrics as dcgm-exporter does
// (its names, types, help texts and labels), from the latest reading, plus
// loom_gpu_lost, loom_gpu_simulated and the disks' loom_node_disk_*.
type collector struct {
	n      *Node
	descs  []*prometheus.Desc
	types  []prometheus.ValueType
	lost   *prometheus.Desc
	sim    *prometheus.Desc
	dtotal *prometheus.Desc
	dused  *prometheus.Desc
}

// Collector is the node's dcgm-exporter-named metrics, for the agent's
// Prometheus registry.
func (n *Node) Collector() prometheus.Collector {
	fields := dcgmFields()
	c := &collector{n: n}
	for _, m := range gpuMetrics {
		f := fields[m.name]
		t := prometheus.GaugeValue
		if f.counter {
			t = prometheus.CounterValue
		}
		c.descs = append(c.descs, prometheus.NewDesc(m.name, f.help, gpuLabels, nil))
		c.types = append(c.types, t)
	}
	c.lost = prometheus.NewDesc("loom_gpu_lost", "Whether the GPU has fallen off the bus (1) or answers (0).", gpuLabels, nil)
	c.sim = prometheus.NewDesc("loom_gpu_simulated", "Whether the node's GPUs are the simulated device (1) or real (0).", []string{"Hostname"}, nil)
	c.dtotal = prometheus.NewDesc("loom_node_disk_total_bytes", "Size of a filesystem of the node.", []string{"mount", "Hostname"}, nil)
	c.dused = prometheus.NewDesc("loom_node_disk_used_bytes", "Bytes used on a filesystem of the node.", []string{"mount", "Hostname"}, nil)
	return c
}

// Describe sends every metric's description.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
	ch <- c.lost
	ch <- c.sim
	ch <- c.dtotal
	ch <- c.dused
}

// Collect sends the latest reading (one is taken when there is none yet).
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	n := c.n
	n.mu.Lock()
	gpus, disks := n.last, n.lastDisk
	n.mu.Unlock()
	if gpus == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		gpus, disks, _ = n.Sample(ctx)
		cancel()
	}
	infos := n.opts.Device.Info()
	host := n.opts.Hostname
	for _, s := range gpus {
		i := int(s.GetIndex())
		bus, driver := "", ""
		if i < len(infos) {
			bus, driver = infos[i].PCIBusID, infos[i].DriverVersion
		}
		labels := []string{strconv.Itoa(i), s.GetUuid(), bus, "nvidia" + strconv.Itoa(i), s.GetName(), host, driver}
		ch <- prometheus.MustNewConstMetric(c.lost, prometheus.GaugeValue, b2f(s.GetLost()), labels...)
		if s.GetLost() {
			// dcgm-exporter has nothing to say of a GPU it cannot read.
			continue
		}
		for j, m := range gpuMetrics {
			ch <- prometheus.MustNewConstMetric(c.descs[j], c.types[j], m.value(s), labels...)
		}
	}
	ch <- prometheus.MustNewConstMetric(c.sim, prometheus.GaugeValue, b2f(n.opts.Device.Simulated()), host)
	for _, d := range disks {
		ch <- prometheus.MustNewConstMetric(c.dtotal, prometheus.GaugeValue, float64(d.GetTotalBytes()), d.GetMount(), host)
		ch <- prometheus.MustNewConstMetric(c.dused, prometheus.GaugeValue, float64(d.GetUsedBytes()), d.GetMount(), host)
	}
}

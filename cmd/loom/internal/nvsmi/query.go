package nvsmi

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/loom-ml/loom/libs/gpu"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// field is one --query-gpu property: its header unit (as nvidia-smi's CSV
// header shows it, "" for none) and its value with and without the unit.
type field struct {
	unit  string
	value func(v view, i int) string
}

// counter is a uint64 value.
func counter(f func(s *loomv1.GpuSample) uint64) field {
	return field{value: func(v view, i int) string { return strconv.FormatUint(f(v.samples[i]), 10) }}
}

// reason is a clocks-event reason's "Active"/"Not Active".
func reason(bit uint64) field {
	return field{value: func(v view, i int) string { return active(v.samples[i].GetThrottleReasons(), bit) }}
}

// fields are the --query-gpu properties served, by every name nvidia-smi
// accepts for them (nvidia-smi --help-query-gpu): Cluster Health Scanner's
// pre-checks' and what validating a cluster reads.
var fields = map[string]field{
	"timestamp":        {value: func(v view, _ int) string { return v.now.Format("2006/01/02 15:04:05.000") }},
	"driver_version":   {value: func(v view, i int) string { return v.infos[i].DriverVersion }},
	"count":            {value: func(v view, _ int) string { return strconv.Itoa(len(v.infos)) }},
	"index":            {value: func(_ view, i int) string { return strconv.Itoa(i) }},
	"name":             {value: func(v view, i int) string { return v.infos[i].Name }},
	"serial":           {value: func(v view, i int) string { return v.infos[i].Serial }},
	"uuid":             {value: func(v view, i int) string { return v.infos[i].UUID }},
	"pci.bus_id":       {value: func(v view, i int) string { return v.infos[i].PCIBusID }},
	"vbios_version":    {value: func(v view, i int) string { return v.infos[i].VBIOSVersion }},
	"persistence_mode": {value: func(view, int) string { return "Enabled" }},
	"pstate":           {value: func(v view, i int) string { return perf(v.samples[i]) }},
	"fan.speed":        {unit: "%", value: func(view, int) string { return "[N/A]" }},
	"temperature.gpu": {value: func(v view, i int) string {
		return fmt.Sprintf("%.0f", v.samples[i].GetTemperatureC())
	}},
	"temperature.gpu.tlimit": {value: func(v view, i int) string { return fmt.Sprintf("%.0f", tLimit(v.samples[i])) }},
	"temperature.memory":     {value: func(v view, i int) string { return fmt.Sprintf("%.0f", memTempC(v.samples[i])) }},
	"utilization.memory":     {unit: "%", value: func(v view, i int) string { return fmt.Sprintf("%.0f", memUtil(v.samples[i])) }},
	"power.draw":             {unit: "W", value: func(v view, i int) string { return fmt.Sprintf("%.2f", v.samples[i].GetPowerW()) }},
	"power.limit": {unit: "W", value: func(v view, i int) string {
		return fmt.Sprintf("%.2f", v.infos[i].PowerLimitW)
	}},
	"utilization.gpu": {unit: "%", value: func(v view, i int) string {
		return fmt.Sprintf("%.0f", v.samples[i].GetGpuUtilPercent())
	}},
	"memory.total":                                 {unit: "MiB", value: func(v view, i int) string { return strconv.FormatUint(mib(v.samples[i].GetMemoryTotalBytes()), 10) }},
	"memory.used":                                  {unit: "MiB", value: func(v view, i int) string { return strconv.FormatUint(mib(v.samples[i].GetMemoryUsedBytes()), 10) }},
	"memory.free":                                  {unit: "MiB", value: func(v view, i int) string { return strconv.FormatUint(mib(gpu.FreeBytes(v.samples[i])), 10) }},
	"memory.reserved":                              {unit: "MiB", value: func(v view, i int) string { return strconv.FormatUint(mib(v.samples[i].GetMemoryReservedBytes()), 10) }},
	"clocks.sm":                                    {unit: "MHz", value: func(v view, i int) string { return strconv.Itoa(int(v.samples[i].GetSmClockMhz())) }},
	"clocks.gr":                                    {unit: "MHz", value: func(v view, i int) string { return strconv.Itoa(int(v.samples[i].GetSmClockMhz())) }},
	"clocks.mem":                                   {unit: "MHz", value: func(v view, i int) string { return strconv.Itoa(int(v.samples[i].GetMemClockMhz())) }},
	"ecc.mode.current":                             {value: func(view, int) string { return "Enabled" }},
	"ecc.errors.corrected.volatile.total":          counter((*loomv1.GpuSample).GetEccSbeVolatile),
	"ecc.errors.uncorrected.volatile.total":        counter((*loomv1.GpuSample).GetEccDbeVolatile),
	"ecc.errors.corrected.aggregate.total":         counter((*loomv1.GpuSample).GetEccSbeAggregate),
	"ecc.errors.uncorrected.aggregate.total":       counter((*loomv1.GpuSample).GetEccDbeAggregate),
	"ecc.errors.corrected.volatile.dram":           counter((*loomv1.GpuSample).GetEccSbeVolatile),
	"ecc.errors.uncorrected.volatile.dram":         counter((*loomv1.GpuSample).GetEccDbeVolatile),
	"ecc.errors.corrected.aggregate.dram":          counter((*loomv1.GpuSample).GetEccSbeAggregate),
	"ecc.errors.uncorrected.aggregate.dram":        counter((*loomv1.GpuSample).GetEccDbeAggregate),
	"retired_pages.single_bit_ecc.count":           {value: func(view, int) string { return "[N/A]" }},
	"retired_pages.double_bit.count":               {value: func(view, int) string { return "[N/A]" }},
	"retired_pages.pending":                        {value: func(view, int) string { return "[N/A]" }},
	"remapped_rows.correctable":                    counter(func(s *loomv1.GpuSample) uint64 { return uint64(s.GetRemappedCorrectable()) }),
	"remapped_rows.uncorrectable":                  counter(func(s *loomv1.GpuSample) uint64 { return uint64(s.GetRemappedUncorrectable()) }),
	"remapped_rows.pending":                        {value: func(v view, i int) string { return yesNo(v.samples[i].GetRemapPending()) }},
	"remapped_rows.failure":                        {value: func(v view, i int) string { return yesNo(v.samples[i].GetRemapFailure()) }},
	"pcie.link.gen.current":                        {value: func(view, int) string { return "5" }},
	"pcie.link.width.current":                      {value: func(view, int) string { return "16" }},
	"clocks_event_reasons.active":                  {value: func(v view, i int) string { return fmt.Sprintf("0x%016X", v.samples[i].GetThrottleReasons()) }},
	"clocks_event_reasons.gpu_idle":                reason(gpu.ReasonGpuIdle),
	"clocks_event_reasons.sw_power_cap":            reason(gpu.ReasonSwPowerCap),
	"clocks_event_reasons.hw_slowdown":             reason(gpu.ReasonHwSlowdown | gpu.ReasonHwThermalSlowdown | gpu.ReasonHwPowerBrake),
	"clocks_event_reasons.hw_thermal_slowdown":     reason(gpu.ReasonHwThermalSlowdown),
	"clocks_event_reasons.sw_thermal_slowdown":     reason(gpu.ReasonSwThermalSlowdown),
	"clocks_event_reasons.hw_power_brake_slowdown": reason(gpu.ReasonHwPowerBrake),
}

// aliases are the other names nvidia-smi takes for a property.
var aliases = map[string]string{
	"gpu_name": "name", "gpu_serial": "serial", "gpu_uuid": "uuid", "gpu_bus_id": "pci.bus_id",
	"clocks.current.sm": "clocks.sm", "clocks.current.memory": "clocks.mem",
	"clocks.current.graphics": "clocks.gr", "clocks.graphics": "clocks.gr", "clocks.memory": "clocks.mem",
	"power.draw.instant": "power.draw", "enforced.power.limit": "power.limit", "power.management.limit": "power.limit",
	"clocks_throttle_reasons.active": "clocks_event_reasons.active", "persistence-mode": "persistence_mode",
	"clocks_throttle_reasons.gpu_idle":                "clocks_event_reasons.gpu_idle",
	"clocks_throttle_reasons.sw_power_cap":            "clocks_event_reasons.sw_power_cap",
	"clocks_throttle_reasons.hw_slowdown":             "clocks_event_reasons.hw_slowdown",
	"clocks_throttle_reasons.hw_thermal_slowdown":     "clocks_event_reasons.hw_thermal_slowdown",
	"clocks_throttle_reasons.sw_thermal_slowdown":     "clocks_event_reasons.sw_thermal_slowdown",
	"clocks_throttle_reasons.hw_power_brake_slowdown": "clocks_event_reasons.hw_power_brake_slowdown",
	"retired_pages.sbe":                               "retired_pages.single_bit_ecc.count", "retired_pages.dbe": "retired_pages.double_bit.count",
	"ecc.mode.pending": "ecc.mode.current",
}

// printedAs are the properties nvidia-smi's CSV header names by their long
// name, whichever name the query used: "--query-gpu=clocks.sm" is headed
// "clocks.current.sm [MHz]" (seen with driver 580.159.04).
var printedAs = map[string]string{"clocks.sm": "clocks.current.sm", "clocks.mem": "clocks.current.memory",
	"clocks.gr": "clocks.current.graphics"}

// identity are the properties a GPU that fell off the bus still answers.
var identity = map[string]bool{"index": true, "name": true, "uuid": true, "serial": true, "pci.bus_id": true,
	"count": true, "timestamp": true, "driver_version": true, "vbios_version": true}

// lookup is the property a name asks for.
func lookup(name string) (field, string, bool) {
	key := strings.ToLower(name)
	if a, ok := aliases[key]; ok && a != "" {
		key = a
	}
	f, ok := fields[key]
	return f, key, ok
}

// csv is --query-gpu=… --format=csv[,noheader][,nounits].
func (v view) csv(w io.Writer, o options) int {
	resolved := make([]field, len(o.fields))
	keys := make([]string, len(o.fields))
	for j, name := range o.fields {
		f, key, ok := lookup(name)
		if !ok {
			fmt.Fprintf(w, "Field \"%s\" is not a valid field to query.\n\n", name)
			return exitBadArgs
		}
		resolved[j], keys[j] = f, key
	}
	if o.header {
		hs := make([]string, len(o.fields))
		for j, name := range o.fields {
			hs[j] = name
			if long, ok := printedAs[keys[j]]; ok {
				hs[j] = long
			}
			if u := resolved[j].unit; u != "" && o.units {
				hs[j] += " [" + u + "]"
			}
		}
		fmt.Fprintln(w, strings.Join(hs, ", "))
	}
	code := exitOK
	for _, i := range v.sel {
		lost := v.samples[i].GetLost()
		if lost {
			code = exitGPUIsLost
		}
		vals := make([]string, len(resolved))
		for j, f := range resolved {
			switch val := f.value(v, i); {
			case lost && !identity[keys[j]]:
				vals[j] = "[GPU is lost]"
			case o.units && f.unit != "" && !strings.HasPrefix(val, "["):
				if f.unit == "%" {
					vals[j] = val + " %"
				} else {
					vals[j] = val + " " + f.unit
				}
			default:
				vals[j] = val
			}
		}
		fmt.Fprintln(w, strings.Join(vals, ", "))
	}
	return code
}

// usage is -h's text (the part Loom's nvidia-smi serves).
const usage = `NVIDIA System Management Interface -- v580.159.04 (Loom: simulated GPUs)

NVSMI provides monitoring information for Tesla and select Quadro devices.

nvidia-smi [OPTION1 [ARG1]] [OPTION2 [ARG2]] ...

    -h,   --help                Print usage information and exit.

  LIST OPTIONS:

    -L,   --list-gpus           Display a list of GPUs connected to the system.

  SUMMARY OPTIONS:

    <no arguments>              Show a summary of GPUs connected to the system.

    [plus any of]

    -i,   --id=                 Target a specific GPU.

  QUERY OPTIONS:

    -q,   --query               Display GPU or Unit info.

    [plus any of]

    -i,   --id=                 Target a specific GPU or Unit.
    -d,   --display=            Display only selected information (every section is shown).

  SELECTIVE QUERY OPTIONS:

    Allows the caller to pass an explicit list of properties to query.

    [one of]

    --query-gpu                 Information about GPU.
                                Call --help-query-gpu for more info.

    [mandatory]

    --format=                   Comma separated list of format options:
                                  csv - comma separated values (MANDATORY)
                                  noheader - skip the first line with column headers
                                  nounits - don't print units for numerical
                                             values
`

// Package nvsmi is `nvidia-smi` for nodes with simulated GPUs: the loom
// executable started under that name (a link on the node's PATH) prints the
// node's simulated devices (libs/gpu's Simulated, found through
// LOOM_GPU_STATE_DIR, which the agent gives every step, or the node's work
// dir) the way NVIDIA's nvidia-smi prints real ones, injected faults
// included: the default table, -q, -L, and --query-gpu=… --format=csv.
// Users validate a new cluster with it as they would a real one, and
// Cluster Health Scanner's pre-checks parse it. On nodes with real GPUs the
// link is not made and NVIDIA's own nvidia-smi is used.
package nvsmi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/loom-ml/loom/libs/gpu"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Name is the command's name.
const Name = "nvidia-smi"

// Exit statuses, nvidia-smi's.
const (
	exitOK        = 0
	exitBadArgs   = 2
	exitNoDriver  = 9
	exitGPUIsLost = 15
)

// noDriver is what nvidia-smi says where no driver answers.
const noDriver = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.\n"

// Link makes dir hold a link named nvidia-smi to exe, the loom executable,
// replacing one already there.
func Link(dir, exe string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("link nvidia-smi: %w", err)
	}
	p := filepath.Join(dir, Name)
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("link nvidia-smi: %w", err)
	}
	if err := os.Symlink(exe, p); err != nil {
		return fmt.Errorf("link nvidia-smi: %w", err)
	}
	return nil
}

// StateDir is where the simulated GPUs of the node running this are:
// LOOM_GPU_STATE_DIR (a step's), else <LOOM_WORK_DIR>/gpu (the agent's
// own environment), else "".
func StateDir(getenv func(string) string) string {
	if d := getenv(gpu.StateDirEnv); d != "" {
		return d
	}
	if w := getenv("LOOM_WORK_DIR"); w != "" {
		return filepath.Join(w, "gpu")
	}
	return ""
}

// options are the command line's.
type options struct {
	query   bool
	list    bool
	fields  []string
	format  string
	header  bool
	units   bool
	ids     []string
	help    bool
	unknown string
}

func parse(args []string) options {
	o := options{header: true, units: true}
	for i := 0; i < len(args); i++ {
		a := args[i]
		val := func(prefix string) (string, bool) {
			if v, ok := strings.CutPrefix(a, prefix+"="); ok {
				return v, true
			}
			if a == prefix && i+1 < len(args) {
				i++
				return args[i], true
			}
			return "", false
		}
		switch {
		case a == "-q" || a == "--query":
			o.query = true
		case a == "-L" || a == "--list-gpus":
			o.list = true
		case a == "-h" || a == "--help":
			o.help = true
		case strings.HasPrefix(a, "--query-gpu"):
			v, ok := val("--query-gpu")
			if !ok {
				o.unknown = a
				continue
			}
			for _, f := range strings.Split(v, ",") {
				if f = strings.TrimSpace(f); f != "" {
					o.fields = append(o.fields, f)
				}
			}
		case strings.HasPrefix(a, "--format"):
			v, ok := val("--format")
			if !ok {
				o.unknown = a
				continue
			}
			for _, p := range strings.Split(v, ",") {
				switch strings.TrimSpace(p) {
				case "csv":
					o.format = "csv"
				case "noheader":
					o.header = false
				case "nounits":
					o.units = false
				default:
					o.unknown = a
				}
			}
		case a == "-i" || strings.HasPrefix(a, "--id"):
			v, ok := val("--id")
			if a == "-i" {
				v, ok = val("-i")
			}
			if !ok {
				o.unknown = a
				continue
			}
			o.ids = append(o.ids, strings.Split(v, ",")...)
		case a == "-d" || strings.HasPrefix(a, "--display"):
			// Sections of -q: every section is printed.
			if a == "-d" || a == "--display" {
				i++
			}
		default:
			o.unknown = a
		}
	}
	return o
}

// Main runs nvidia-smi with args (without the program name) and returns
// its exit status; getenv is the environment, now the clock.
func Main(args []string, getenv func(string) string, now time.Time, stdout, stderr io.Writer) int {
	o := parse(args)
	if o.help {
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	if o.unknown != "" || (len(o.fields) > 0 && o.format != "csv") || (o.format == "csv" && len(o.fields) == 0) {
		if len(o.fields) > 0 && o.format != "csv" {
			fmt.Fprintln(stdout, `--format must be specified with "--query-gpu".`)
		} else {
			fmt.Fprintln(stdout, "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.")
		}
		return exitBadArgs
	}
	dir := StateDir(getenv)
	if dir == "" || !gpu.HasSimulated(dir) {
		fmt.Fprint(stdout, noDriver)
		return exitNoDriver
	}
	dev, err := gpu.ReadSimulated(gpu.Options{StateDir: dir, Now: func() time.Time { return now }})
	if err != nil {
		fmt.Fprint(stdout, noDriver)
		fmt.Fprintln(stderr, "nvidia-smi (loom, simulated GPUs):", err)
		return exitNoDriver
	}
	samples, err := dev.Sample(context.Background())
	if err != nil {
		fmt.Fprint(stdout, noDriver)
		fmt.Fprintln(stderr, "nvidia-smi (loom, simulated GPUs):", err)
		return exitNoDriver
	}
	infos := dev.Info()
	sel, bad := selectGPUs(o.ids, infos)
	if bad != "" {
		fmt.Fprintf(stdout, "No devices were found matching the id: %s\n", bad)
		return 6
	}
	if len(infos) == 0 {
		fmt.Fprintln(stdout, "No devices were found")
		return 6
	}
	v := view{infos: infos, samples: samples, sel: sel, now: now, model: dev.Model()}
	var code int
	switch {
	case o.list:
		code = v.list(stdout)
	case len(o.fields) > 0:
		code = v.csv(stdout, o)
	case o.query:
		code = v.query(stdout)
	default:
		code = v.table(stdout)
	}
	return code
}

// selectGPUs is the GPUs -i names (indexes, UUIDs or bus ids), or every
// one; bad is an id that names none.
func selectGPUs(ids []string, infos []gpu.Info) (sel []int, bad string) {
	if len(ids) == 0 {
		for i := range infos {
			sel = append(sel, i)
		}
		return sel, ""
	}
	for _, id := range ids {
		id = strings.TrimSpace(id)
		found := -1
		for i, in := range infos {
			if strconv.Itoa(i) == id || strings.EqualFold(in.UUID, id) || strings.EqualFold(in.PCIBusID, id) ||
				strings.EqualFold(strings.TrimPrefix(in.PCIBusID, "0000"), id) {
				found = i
			}
		}
		if found < 0 {
			return nil, id
		}
		sel = append(sel, found)
	}
	return sel, ""
}

// view is what the printers print.
type view struct {
	infos   []gpu.Info
	samples []*loomv1.GpuSample
	sel     []int
	now     time.Time
	model   string
}

// lostLine is nvidia-smi's line for a GPU that fell off the bus.
func lostLine(in gpu.Info) string {
	return fmt.Sprintf("Unable to determine the device handle for GPU%s: GPU is lost.  Reboot the system to recover this GPU\n",
		strings.TrimPrefix(in.PCIBusID, "0000"))
}

func (v view) anyLost() bool {
	for _, i := range v.sel {
		if v.samples[i].GetLost() {
			return true
		}
	}
	return false
}

func (v view) list(w io.Writer) int {
	for _, i := range v.sel {
		fmt.Fprintf(w, "GPU %d: %s (UUID: %s)\n", i, v.infos[i].Name, v.infos[i].UUID)
	}
	return exitOK
}

// mib is bytes in MiB, as nvidia-smi counts memory.
func mib(b uint64) uint64 { return b >> 20 }

// perf is the performance state: P0 under load or idle with persistence,
// as an HGX board reports it.
func perf(s *loomv1.GpuSample) string { return "P0" }

const (
	rule      = "+-----------------------------------------------------------------------------------------+"
	ruleGPU   = "+-----------------------------------------+------------------------+----------------------+"
	ruleHead  = "+-----------------------------------------+------------------------+----------------------+"
	ruleEqual = "|=========================================+========================+======================|"
)

// table is nvidia-smi's default output.
func (v view) table(w io.Writer) int {
	code := exitOK
	for _, i := range v.sel {
		if v.samples[i].GetLost() {
			fmt.Fprint(w, lostLine(v.infos[i]))
			code = exitGPUIsLost
		}
	}
	in0 := v.infos[0]
	fmt.Fprintf(w, "%s       \n", v.now.Format("Mon Jan _2 15:04:05 2006"))
	fmt.Fprintln(w, rule)
	head := fmt.Sprintf(" NVIDIA-SMI %-23sDriver Version: %-15sCUDA Version: %-9s", in0.DriverVersion, in0.DriverVersion, in0.CUDAVersion)
	fmt.Fprintf(w, "|%-89s|\n", head)
	fmt.Fprintln(w, ruleHead)
	fmt.Fprintln(w, "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |")
	fmt.Fprintln(w, "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |")
	fmt.Fprintln(w, "|                                         |                        |               MIG M. |")
	fmt.Fprintln(w, ruleEqual)
	first := true
	for _, i := range v.sel {
		s, in := v.samples[i], v.infos[i]
		if s.GetLost() {
			continue
		}
		if !first {
			fmt.Fprintln(w, "+-----------------------------------------+------------------------+----------------------+")
		}
		first = false
		name := in.Name
		if len(name) > 29 {
			name = name[:26] + "..."
		}
		fmt.Fprintf(w, "| %3d  %-29s%4s  |%19s %3s |%21d |\n", i, name, "On", in.PCIBusID, "Off", s.GetEccDbeVolatile())
		pwr := fmt.Sprintf("%.0fW / %4.0fW", s.GetPowerW(), in.PowerLimitW)
		mem := fmt.Sprintf("%dMiB / %dMiB", mib(s.GetMemoryUsedBytes()), mib(s.GetMemoryTotalBytes()))
		fmt.Fprintf(w, "| N/A  %3.0fC    %-4s%22s |%23s |%8s%13s |\n", s.GetTemperatureC(), perf(s), pwr, mem,
			fmt.Sprintf("%.0f%%", s.GetGpuUtilPercent()), "Default")
		fmt.Fprintf(w, "|%41s|%24s|%21s |\n", "", "", "Disabled")
	}
	fmt.Fprintln(w, ruleGPU)
	fmt.Fprintln(w)
	fmt.Fprintln(w, rule)
	fmt.Fprintf(w, "|%-89s|\n", " Processes:")
	fmt.Fprintf(w, "|%-89s|\n", "  GPU   GI   CI              PID   Type   Process name                        GPU Memory")
	fmt.Fprintf(w, "|%-89s|\n", "        ID   ID                                                               Usage")
	fmt.Fprintln(w, "|=========================================================================================|")
	fmt.Fprintf(w, "|%-89s|\n", "  No running processes found")
	fmt.Fprintln(w, rule)
	return code
}

// active is how -q shows a clocks-event reason bit.
func active(reasons, bit uint64) string {
	if reasons&bit != 0 {
		return "Active"
	}
	return "Not Active"
}

func yesNo(b bool) string {
	if b {
		return "Yes"
	}
	return "No"
}

// query is nvidia-smi -q.
func (v view) query(w io.Writer) int {
	line := func(indent int, label, value string) {
		fmt.Fprintf(w, "%-55s: %s\n", strings.Repeat("    ", indent)+label, value)
	}
	section := func(indent int, label string) { fmt.Fprintln(w, strings.Repeat("    ", indent)+label) }
	in0 := v.infos[0]
	fmt.Fprintln(w)
	fmt.Fprintln(w, "==============NVSMI LOG==============")
	fmt.Fprintln(w)
	line(0, "Timestamp", v.now.Format("Mon Jan _2 15:04:05 2006"))
	line(0, "Driver Version", in0.DriverVersion)
	line(0, "CUDA Version", in0.CUDAVersion)
	fmt.Fprintln(w)
	line(0, "Attached GPUs", strconv.Itoa(len(v.infos)))
	code := exitOK
	for _, i := range v.sel {
		s, in := v.samples[i], v.infos[i]
		fmt.Fprintln(w, "GPU "+in.PCIBusID)
		line(1, "Product Name", in.Name)
		line(1, "Product Brand", "NVIDIA")
		line(1, "Product Architecture", architecture(in.Name))
		line(1, "Persistence Mode", "Enabled")
		line(1, "Serial Number", in.Serial)
		line(1, "GPU UUID", in.UUID)
		line(1, "Minor Number", strconv.Itoa(i))
		line(1, "VBIOS Version", in.VBIOSVersion)
		if s.GetLost() {
			// What a GPU that has fallen off the bus answers to every query.
			code = exitGPUIsLost
			for _, l := range []string{"PCI", "Fan Speed", "Performance State", "FB Memory Usage", "Utilization",
				"ECC Errors", "Remapped Rows", "Temperature", "GPU Power Readings", "Clocks"} {
				line(1, l, "[GPU is lost]")
			}
			fmt.Fprintln(w)
			continue
		}
		r := s.GetThrottleReasons()
		section(1, "PCI")
		line(2, "Bus", "0x"+busByte(in.PCIBusID))
		line(2, "Device", "0x00")
		line(2, "Domain", "0x0000")
		line(2, "Bus Id", in.PCIBusID)
		line(2, "Replays Since Reset", strconv.FormatUint(s.GetPcieReplay(), 10))
		line(1, "Fan Speed", "N/A")
		line(1, "Performance State", perf(s))
		section(1, "Clocks Event Reasons")
		line(2, "Idle", active(r, gpu.ReasonGpuIdle))
		line(2, "Applications Clocks Setting", active(r, gpu.ReasonApplicationsClocks))
		line(2, "SW Power Cap", active(r, gpu.ReasonSwPowerCap))
		line(2, "HW Slowdown", active(r, gpu.ReasonHwSlowdown|gpu.ReasonHwThermalSlowdown|gpu.ReasonHwPowerBrake))
		line(3, "HW Thermal Slowdown", active(r, gpu.ReasonHwThermalSlowdown))
		line(3, "HW Power Brake Slowdown", active(r, gpu.ReasonHwPowerBrake))
		line(2, "Sync Boost", active(r, gpu.ReasonSyncBoost))
		line(2, "SW Thermal Slowdown", active(r, gpu.ReasonSwThermalSlowdown))
		line(2, "Display Clock Setting", "Not Active")
		section(1, "FB Memory Usage")
		line(2, "Total", fmt.Sprintf("%d MiB", mib(s.GetMemoryTotalBytes())))
		line(2, "Reserved", fmt.Sprintf("%d MiB", mib(s.GetMemoryReservedBytes())))
		line(2, "Used", fmt.Sprintf("%d MiB", mib(s.GetMemoryUsedBytes())))
		line(2, "Free", fmt.Sprintf("%d MiB", mib(gpu.FreeBytes(s))))
		line(1, "Compute Mode", "Default")
		section(1, "Utilization")
		line(2, "GPU", fmt.Sprintf("%.0f %%", s.GetGpuUtilPercent()))
		line(2, "Memory", fmt.Sprintf("%.0f %%", memUtil(s)))
		section(1, "ECC Mode")
		line(2, "Current", "Enabled")
		line(2, "Pending", "Enabled")
		section(1, "ECC Errors")
		section(2, "Volatile")
		line(3, "SRAM Correctable", "0")
		line(3, "SRAM Uncorrectable Parity", "0")
		line(3, "SRAM Uncorrectable SEC-DED", "0")
		line(3, "DRAM Correctable", strconv.FormatUint(s.GetEccSbeVolatile(), 10))
		line(3, "DRAM Uncorrectable", strconv.FormatUint(s.GetEccDbeVolatile(), 10))
		section(2, "Aggregate")
		line(3, "SRAM Correctable", "0")
		line(3, "SRAM Uncorrectable Parity", "0")
		line(3, "SRAM Uncorrectable SEC-DED", "0")
		line(3, "DRAM Correctable", strconv.FormatUint(s.GetEccSbeAggregate(), 10))
		line(3, "DRAM Uncorrectable", strconv.FormatUint(s.GetEccDbeAggregate(), 10))
		section(1, "Retired Pages")
		line(2, "Single Bit ECC", "N/A")
		line(2, "Double Bit ECC", "N/A")
		line(2, "Pending Page Blacklist", "N/A")
		section(1, "Remapped Rows")
		line(2, "Correctable Error", strconv.Itoa(int(s.GetRemappedCorrectable())))
		line(2, "Uncorrectable Error", strconv.Itoa(int(s.GetRemappedUncorrectable())))
		line(2, "Pending", yesNo(s.GetRemapPending()))
		line(2, "Remapping Failure Occurred", yesNo(s.GetRemapFailure()))
		section(1, "Temperature")
		line(2, "GPU Current Temp", fmt.Sprintf("%.0f C", s.GetTemperatureC()))
		line(2, "GPU T.Limit Temp", fmt.Sprintf("%.0f C", tLimit(s)))
		line(2, "GPU Shutdown T.Limit Temp", "-8 C")
		line(2, "GPU Slowdown T.Limit Temp", "-2 C")
		line(2, "GPU Max Operating T.Limit Temp", "0 C")
		line(2, "GPU Target Temperature", "N/A")
		line(2, "Memory Current Temp", fmt.Sprintf("%.0f C", memTempC(s)))
		line(2, "Memory Max Operating T.Limit Temp", "0 C")
		section(1, "GPU Power Readings")
		line(2, "Average Power Draw", fmt.Sprintf("%.2f W", s.GetPowerW()))
		line(2, "Instantaneous Power Draw", fmt.Sprintf("%.2f W", s.GetPowerW()))
		for _, l := range []string{"Current", "Requested", "Default", "Max"} {
			line(2, l+" Power Limit", fmt.Sprintf("%.2f W", in.PowerLimitW))
		}
		section(1, "Clocks")
		line(2, "Graphics", fmt.Sprintf("%d MHz", s.GetSmClockMhz()))
		line(2, "SM", fmt.Sprintf("%d MHz", s.GetSmClockMhz()))
		line(2, "Memory", fmt.Sprintf("%d MHz", s.GetMemClockMhz()))
		section(1, "Fabric")
		line(2, "NVLink CRC Errors", strconv.FormatUint(s.GetNvlinkCrcErrors(), 10))
		line(2, "NVLink Replay Errors", strconv.FormatUint(s.GetNvlinkReplayErrors(), 10))
		line(1, "Processes", "None")
		fmt.Fprintln(w)
	}
	return code
}

// architecture is the GPU architecture of a model name.
func architecture(name string) string {
	switch {
	case strings.Contains(name, "B200"):
		return "Blackwell"
	case strings.Contains(name, "A100"):
		return "Ampere"
	case strings.Contains(name, "L4"):
		return "Ada Lovelace"
	}
	return "Hopper"
}

// busByte is the bus of a PCI bus id ("00000000:5D:00.0" → "5D").
func busByte(id string) string {
	parts := strings.Split(id, ":")
	if len(parts) == 3 {
		return parts[1]
	}
	return "00"
}

// tLimit is how far below its maximum operating temperature (where the
// simulated device starts to throttle) the GPU runs: nvidia-smi's T.Limit.
func tLimit(s *loomv1.GpuSample) float64 { return gpu.SlowdownTempC - s.GetTemperatureC() }

// memTempC is the HBM's temperature, which the simulated device does not
// keep: a line through what an H200 read (41 C beside a 37 C GPU idle,
// 49 C beside 60 C under bf16 matrix products).
func memTempC(s *loomv1.GpuSample) float64 { return math.Round(28 + 0.35*s.GetTemperatureC()) }

// memUtil is the memory controller's utilisation, the simulated device's
// share of the GPU's.
func memUtil(s *loomv1.GpuSample) float64 { return math.Round(s.GetGpuUtilPercent() * 0.6) }

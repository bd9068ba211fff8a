package slurmcli

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// usageStat is what a step's tasks used, as sacct and sstat show it (Slurm's
// jobacct_gather statistics): each task's CPU time (user + system), peak
// resident and virtual memory and bytes read and written, as the maximum
// over the tasks with the node and rank that reached it, the minimum (CPU),
// the average and the total.
type usageStat struct {
	tasks int
	// Per measure: the maximum (min for CPU) with where, the average, the total.
	rss, vm, read, write, cpu extreme
	user, system              time.Duration
	// gpuUtil (percent) and gpuMem are over the tasks that saw GPUs (gpu
	// set): Slurm's gres/gpuutil and gres/gpumem.
	gpuUtil, gpuMem extreme
	gpu             bool
}

// extreme is one measure over a step's tasks: its maximum with the node and
// rank that reached it, its minimum with the same, its total and over how
// many tasks.
type extreme struct {
	max, min         int64
	maxNode, minNode string
	maxTask, minTask int32
	total            int64
	n                int
	seen             bool
}

func (e *extreme) add(v int64, node string, rank int32) {
	if !e.seen || v > e.max {
		e.max, e.maxNode, e.maxTask = v, node, rank
	}
	if !e.seen || v < e.min {
		e.min, e.minNode, e.minTask = v, node, rank
	}
	e.total += v
	e.n++
	e.seen = true
}

// ave is the measure's mean over the tasks that have it.
func (e *extreme) ave() int64 {
	if e.n == 0 {
		return 0
	}
	return e.total / int64(e.n)
}

// statOf is the statistics of tasks' usage; nil when there is none.
func statOf(us []*loomv1.TaskUsage) *usageStat {
	if len(us) == 0 {
		return nil
	}
	s := &usageStat{tasks: len(us)}
	for _, u := range us {
		user, sys := u.GetUserCpu().AsDuration(), u.GetSystemCpu().AsDuration()
		s.user += user
		s.system += sys
		node, rank := u.GetNode(), u.GetRank()
		s.cpu.add(int64(user+sys), node, rank)
		s.rss.add(u.GetMaxRssBytes(), node, rank)
		s.vm.add(u.GetMaxVmsizeBytes(), node, rank)
		s.read.add(u.GetReadBytes(), node, rank)
		s.write.add(u.GetWriteBytes(), node, rank)
		if u.GetGpus() > 0 {
			s.gpu = true
			s.gpuUtil.add(int64(math.Round(u.GetGpuUtilPercent())), node, rank)
			s.gpuMem.add(u.GetMaxGpuMemoryBytes(), node, rank)
		}
	}
	return s
}

// addCPU adds o's CPU time to s (a job's allocation row: the total of its
// steps).
func (s *usageStat) addCPU(o *usageStat) {
	if o == nil {
		return
	}
	s.user += o.user
	s.system += o.system
}

// units is how sacct and sstat print sizes (Slurm's convert_num_unit2 from
// bytes): spec, when not noUnit, the unit every size is shown in
// (sacct --units: 1 K, 2 M, ...); else, unless raw (--noconvert), each
// size in the largest unit that keeps it exact or a half ("221176K",
// "2M", "1.50G"), Slurm's CONVERT_NUM_UNIT_EXACT.
type units struct {
	spec int
	raw  bool
}

// noUnit is units.spec when no --units was given.
const noUnit = -1

// defaultUnits are sacct's and sstat's without options.
var defaultUnits = units{spec: noUnit}

// parseUnits reads --units: one of K, M, G, T, P (any case).
func parseUnits(s string) (int, bool) {
	if len(s) != 1 {
		return noUnit, false
	}
	i := strings.IndexByte("KMGTP", byte(unicode.ToUpper(rune(s[0]))))
	if i < 0 {
		return noUnit, false
	}
	return i + 1, true
}

// bytes is b as the units print it.
func (u units) bytes(b int64) string {
	num, unit := float64(b), 0
	if int64(num) == 0 {
		return "0"
	}
	switch {
	case u.spec != noUnit:
		for ; unit < u.spec; unit++ {
			num /= 1024
		}
	case u.raw:
	default:
		for num >= 1024 && uint64(num)%512 == 0 {
			num /= 1024
			unit++
		}
	}
	suffix := string("\x00KMGTP"[unit])
	if unit == 0 {
		suffix = ""
	}
	if i := uint64(num); float64(i) == num {
		return strconv.FormatUint(i, 10) + suffix
	}
	return fmt.Sprintf("%.2f%s", num, suffix)
}

// cpuTotal is a CPU time as sacct prints TotalCPU, UserCPU and SystemCPU
// (Slurm's _elapsed_time): "MM:SS.mmm" under an hour ("00:MM:SS" without
// milliseconds), "HH:MM:SS" under a day, "D-HH:MM:SS" beyond.
func cpuTotal(d time.Duration) string {
	d = max(d, 0)
	secs := int64(d / time.Second)
	if secs >= 3600 {
		return formatDuration(secs)
	}
	m, s := secs/60, secs%60
	if ms := int64(d % time.Second / time.Millisecond); ms > 0 {
		return fmt.Sprintf("%02d:%02d.%03d", m, s, ms)
	}
	return fmt.Sprintf("00:%02d:%02d", m, s)
}

// cpuHMS is a task's CPU time as MinCPU and AveCPU print it (whole seconds).
func cpuHMS(ns int64) string { return formatDuration(max(ns, 0) / int64(time.Second)) }

// usageField is one statistic sacct and sstat can print.
type usageField struct {
	name  string
	width int
	value func(s *usageStat) string
}

// usageFields are the jobacct_gather statistics, with Slurm's default
// widths, in sstat's default order; the rest follow it.
func usageFields(u units) []usageField {
	num := u.bytes
	task := func(n int32) string { return strconv.Itoa(int(n)) }
	// gres is the GPU part of a TRES string, where the tasks saw GPUs
	// (Slurm's names sort it after fs/disk).
	gres := func(s *usageStat, pick func(e *extreme) string) string {
		if !s.gpu {
			return ""
		}
		return ",gres/gpumem=" + pick(&s.gpuMem) + ",gres/gpuutil=" + pick(&s.gpuUtil)
	}
	tres := func(s *usageStat, pick func(e *extreme) string) string {
		return "cpu=" + pick(&s.cpu) + ",energy=0,fs/disk=" + pick(&s.read) + gres(s, pick) + ",mem=" + pick(&s.rss) +
			",pages=0,vmem=" + pick(&s.vm)
	}
	where := func(s *usageStat, pick func(e *extreme) string) string {
		return "cpu=" + pick(&s.cpu) + ",energy=" + pick(&s.cpu) + ",fs/disk=" + pick(&s.read) + gres(s, pick) + ",mem=" + pick(&s.rss) +
			",pages=" + pick(&s.rss) + ",vmem=" + pick(&s.vm)
	}
	return []usageField{
		{"MaxVMSize", 10, func(s *usageStat) string { return u.bytes(s.vm.max) }},
		{"MaxVMSizeNode", 14, func(s *usageStat) string { return s.vm.maxNode }},
		{"MaxVMSizeTask", 14, func(s *usageStat) string { return task(s.vm.maxTask) }},
		{"AveVMSize", 10, func(s *usageStat) string { return u.bytes(s.vm.ave()) }},
		{"MaxRSS", 10, func(s *usageStat) string { return u.bytes(s.rss.max) }},
		{"MaxRSSNode", 10, func(s *usageStat) string { return s.rss.maxNode }},
		{"MaxRSSTask", 10, func(s *usageStat) string { return task(s.rss.maxTask) }},
		{"AveRSS", 10, func(s *usageStat) string { return u.bytes(s.rss.ave()) }},
		// Loom does not count page faults: 0, as a Slurm without them.
		{"MaxPages", 8, func(*usageStat) string { return "0" }},
		{"MaxPagesNode", 12, func(s *usageStat) string { return s.rss.maxNode }},
		{"MaxPagesTask", 14, func(s *usageStat) string { return task(s.rss.maxTask) }},
		{"AvePages", 10, func(*usageStat) string { return "0" }},
		{"MinCPU", 10, func(s *usageStat) string { return cpuHMS(s.cpu.min) }},
		{"MinCPUNode", 10, func(s *usageStat) string { return s.cpu.minNode }},
		{"MinCPUTask", 10, func(s *usageStat) string { return task(s.cpu.minTask) }},
		{"AveCPU", 10, func(s *usageStat) string { return cpuHMS(s.cpu.ave()) }},
		{"NTasks", 8, func(s *usageStat) string { return strconv.Itoa(s.tasks) }},
		// Nor CPU frequencies or energy.
		{"AveCPUFreq", 10, func(*usageStat) string { return "0" }},
		{"ReqCPUFreqMin", 13, func(*usageStat) string { return "Unknown" }},
		{"ReqCPUFreqMax", 13, func(*usageStat) string { return "Unknown" }},
		{"ReqCPUFreqGov", 13, func(*usageStat) string { return "Unknown" }},
		{"ConsumedEnergy", 14, func(*usageStat) string { return "0" }},
		{"MaxDiskRead", 12, func(s *usageStat) string { return num(s.read.max) }},
		{"MaxDiskReadNode", 15, func(s *usageStat) string { return s.read.maxNode }},
		{"MaxDiskReadTask", 15, func(s *usageStat) string { return task(s.read.maxTask) }},
		{"AveDiskRead", 12, func(s *usageStat) string { return num(s.read.ave()) }},
		{"MaxDiskWrite", 12, func(s *usageStat) string { return num(s.write.max) }},
		{"MaxDiskWriteNode", 16, func(s *usageStat) string { return s.write.maxNode }},
		{"MaxDiskWriteTask", 16, func(s *usageStat) string { return task(s.write.maxTask) }},
		{"AveDiskWrite", 12, func(s *usageStat) string { return num(s.write.ave()) }},
		{"TRESUsageInAve", 14, func(s *usageStat) string {
			return tres(s, func(e *extreme) string { return usageValue(u, s, e, e.ave()) })
		}},
		{"TRESUsageInMax", 14, func(s *usageStat) string {
			return tres(s, func(e *extreme) string { return usageValue(u, s, e, e.max) })
		}},
		{"TRESUsageInMaxNode", 18, func(s *usageStat) string { return where(s, func(e *extreme) string { return e.maxNode }) }},
		{"TRESUsageInMaxTask", 18, func(s *usageStat) string {
			return "cpu=" + task(s.cpu.maxTask) + ",fs/disk=" + task(s.read.maxTask) + gres(s, func(e *extreme) string { return task(e.maxTask) }) +
				",mem=" + task(s.rss.maxTask) + ",pages=" + task(s.rss.maxTask) + ",vmem=" + task(s.vm.maxTask)
		}},
		{"TRESUsageInMin", 14, func(s *usageStat) string {
			return tres(s, func(e *extreme) string { return usageValue(u, s, e, e.min) })
		}},
		{"TRESUsageInMinNode", 18, func(s *usageStat) string { return where(s, func(e *extreme) string { return e.minNode }) }},
		{"TRESUsageInMinTask", 18, func(s *usageStat) string {
			return "cpu=" + task(s.cpu.minTask) + ",fs/disk=" + task(s.read.minTask) + gres(s, func(e *extreme) string { return task(e.minTask) }) +
				",mem=" + task(s.rss.minTask) + ",pages=" + task(s.rss.minTask) + ",vmem=" + task(s.vm.minTask)
		}},
		{"TRESUsageInTot", 14, func(s *usageStat) string {
			return tres(s, func(e *extreme) string { return usageValue(u, s, e, e.total) })
		}},
		{"TRESUsageOutAve", 15, func(s *usageStat) string { return "energy=0,fs/disk=" + num(s.write.ave()) }},
		{"TRESUsageOutMax", 15, func(s *usageStat) string { return "energy=0,fs/disk=" + num(s.write.max) }},
		{"TRESUsageOutMaxNode", 19, func(s *usageStat) string {
			return "energy=" + s.write.maxNode + ",fs/disk=" + s.write.maxNode
		}},
		{"TRESUsageOutMaxTask", 19, func(s *usageStat) string { return "fs/disk=" + task(s.write.maxTask) }},
		{"TRESUsageOutMin", 15, func(s *usageStat) string { return "energy=0,fs/disk=" + num(s.write.min) }},
		{"TRESUsageOutMinNode", 19, func(s *usageStat) string {
			return "energy=" + s.write.minNode + ",fs/disk=" + s.write.minNode
		}},
		{"TRESUsageOutMinTask", 19, func(s *usageStat) string { return "fs/disk=" + task(s.write.minTask) }},
		{"TRESUsageOutTot", 15, func(s *usageStat) string { return "energy=0,fs/disk=" + num(s.write.total) }},
	}
}

// usageValue is one TRES value of a statistic: CPU as HH:MM:SS, GPU
// utilization in percent, sizes in u.
func usageValue(u units, s *usageStat, e *extreme, v int64) string {
	switch e {
	case &s.cpu:
		return cpuHMS(v)
	case &s.gpuUtil:
		return strconv.FormatInt(v, 10)
	}
	return u.bytes(v)
}

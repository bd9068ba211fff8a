// Package acct is job accounting's one vocabulary: what a task's processes
// used (Usage), as a node's agent measures it and the scheduler keeps it, and
// its form on the bus and in the API (loom.v1.TaskUsage). A batch script is
// its step's one task.
package acct

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Usage is what one task's processes have used: CPU time, peaks of memory,
// bytes read and written. The agent folds in a sample of the task's
// process group every progress interval (Sample) and the kernel's count at
// its end (Final). A stored Usage is never edited in place: a report
// replaces it.
type Usage struct {
	UserCPU   time.Duration `json:"user_cpu,omitempty"`
	SystemCPU time.Duration `json:"system_cpu,omitempty"`
	// MaxRSS and MaxVMSize are the highest sums sampled (bytes); RSS the
	// latest.
	MaxRSS    int64 `json:"max_rss,omitempty"`
	RSS       int64 `json:"rss,omitempty"`
	MaxVMSize int64 `json:"max_vmsize,omitempty"`
	// Read and Write are the bytes read from and written to storage.
	Read  int64 `json:"read,omitempty"`
	Write int64 `json:"write,omitempty"`
	// Time is when it was last measured (zero: never).
	Time time.Time `json:"time,omitzero"`
	// GPUs is how many GPUs the task saw; GPUUtil the mean utilization
	// (percent) over its GPUSamples samples of them; MaxGPUMem the most
	// memory used on one of them (bytes).
	GPUs       int     `json:"gpus,omitempty"`
	GPUUtil    float64 `json:"gpu_util,omitempty"`
	GPUSamples int     `json:"gpu_samples,omitempty"`
	MaxGPUMem  int64   `json:"max_gpu_mem,omitempty"`
}

// SampleGPU folds one reading of the task's gpus GPUs into u: util their
// mean utilization (percent), mem the most memory used on one of them.
func (u Usage) SampleGPU(gpus int, util float64, mem int64) Usage {
	if gpus <= 0 || !(util >= 0) {
		return u
	}
	u.GPUs = gpus
	u.GPUUtil = (u.GPUUtil*float64(u.GPUSamples) + min(util, 100)) / float64(u.GPUSamples+1)
	u.GPUSamples++
	u.MaxGPUMem = max(u.MaxGPUMem, mem)
	return u
}

// Sample is one look at a task's live processes, summed.
type Sample struct {
	UserCPU, SystemCPU time.Duration
	RSS, VMSize        int64
	Read, Write        int64
}

// Sample folds one sample taken at now into u. Peaks are kept, and the
// counters (CPU time, bytes read and written) never go back: a process that
// exited takes its counts out of its group's sum until its parent's wait
// returns them, and a task's final count comes from the kernel (Final).
func (u Usage) Sample(s Sample, now time.Time) Usage {
	u.UserCPU, u.SystemCPU = max(u.UserCPU, s.UserCPU), max(u.SystemCPU, s.SystemCPU)
	u.RSS = max(s.RSS, 0)
	u.MaxRSS, u.MaxVMSize = max(u.MaxRSS, u.RSS), max(u.MaxVMSize, s.VMSize)
	u.Read, u.Write = max(u.Read, s.Read), max(u.Write, s.Write)
	u.Time = now
	return u
}

// Final folds in what the kernel counted for the task's leader and the
// children it waited for once it ended (wait4): its CPU time and its
// largest process's peak, when they are higher than the samples. Nothing
// is resident any more.
func (u Usage) Final(userCPU, systemCPU time.Duration, maxRSS int64, now time.Time) Usage {
	u.UserCPU, u.SystemCPU = max(u.UserCPU, userCPU), max(u.SystemCPU, systemCPU)
	u.MaxRSS = max(u.MaxRSS, maxRSS)
	u.RSS = 0
	u.Time = now
	return u
}

// Proto is u as the bus and the API carry it, for the task ranked rank
// (SLURM_PROCID) on the node host: an agent leaves both to the scheduler,
// which names them from its own records.
func (u Usage) Proto(rank int32, host string) *loomv1.TaskUsage {
	p := &loomv1.TaskUsage{
		Rank: rank, Node: host,
		UserCpu: durationpb.New(u.UserCPU), SystemCpu: durationpb.New(u.SystemCPU),
		MaxRssBytes: u.MaxRSS, RssBytes: u.RSS, MaxVmsizeBytes: u.MaxVMSize,
		ReadBytes: u.Read, WriteBytes: u.Write,
		Gpus: int32(u.GPUs), GpuUtilPercent: u.GPUUtil, MaxGpuMemoryBytes: u.MaxGPUMem,
	}
	if !u.Time.IsZero() {
		p.Time = timestamppb.New(u.Time)
	}
	return p
}

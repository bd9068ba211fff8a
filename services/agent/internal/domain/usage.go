package domain

import (
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// DefaultAcctInterval is how often a running step's usage is reported
// (UsageReported), Slurm's JobAcctGatherFrequency default.
const DefaultAcctInterval = 30 * time.Second

// Usage is what one task's processes have used (a batch script is its
// step's one task): CPU time, peaks of memory, disk I/O. The agent folds in
// a sample of the task's process group every progress interval (Sample)
// and the kernel's count at its end (Final).
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
}

// Sample is one look at a task's live processes, summed (proc.Usage).
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

// Proto is u as the bus carries it. The scheduler names the task's rank and
// node from its own records.
func (u Usage) Proto() *loomv1.TaskUsage {
	p := &loomv1.TaskUsage{
		UserCpu: durationpb.New(u.UserCPU), SystemCpu: durationpb.New(u.SystemCPU),
		MaxRssBytes: u.MaxRSS, RssBytes: u.RSS, MaxVmsizeBytes: u.MaxVMSize,
		ReadBytes: u.Read, WriteBytes: u.Write,
	}
	if !u.Time.IsZero() {
		p.Time = timestamppb.New(u.Time)
	}
	return p
}

// usageProtos is us as the bus carries them, by local id.
func usageProtos(us []Usage) []*loomv1.TaskUsage {
	if len(us) == 0 {
		return nil
	}
	out := make([]*loomv1.TaskUsage, len(us))
	for i, u := range us {
		out[i] = u.Proto()
	}
	return out
}

// RunUsage is what a run's processes on this node have used so far: its
// batch step's (nil when it runs elsewhere or has ended) and each running
// job step's tasks', by step id.
type RunUsage struct {
	Step  *Usage
	Tasks map[int32][]Usage
}

// UsageReport is the UsageReported for a run's usage here; nil when there is
// nothing to report.
func UsageReport(self Self, job string, attempt int32, u RunUsage) *eventsv1.UsageReported {
	if u.Step == nil && len(u.Tasks) == 0 {
		return nil
	}
	ev := &eventsv1.UsageReported{Job: job, Attempt: attempt, Node: self.Node, Cluster: self.Cluster}
	if u.Step != nil {
		ev.Usage = u.Step.Proto()
	}
	ids := make([]int32, 0, len(u.Tasks))
	for id := range u.Tasks {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		ev.JobSteps = append(ev.JobSteps, &eventsv1.UsageReported_JobStep{StepId: id, Tasks: usageProtos(u.Tasks[id])})
	}
	return ev
}

// OverMemory reports whether a unit's processes, holding held bytes at a
// sample, are past its limit (0: none).
func OverMemory(held, limit int64) bool { return limit > 0 && held > limit }

// MemoryLine is Slurm's line in a step's error output when it is killed for
// passing its memory limit (jobacct_gather's OverMemoryKill), sizes in KiB:
// "Job 12" for a batch script, "Step 12.0" for srun tasks.
func MemoryLine(what string, held, limit int64) string {
	return fmt.Sprintf("slurmstepd: error: %s exceeded memory limit (%d > %d), being killed\n", what, held>>10, limit>>10)
}

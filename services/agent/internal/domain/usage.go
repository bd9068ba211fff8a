package domain

import (
	"fmt"
	"slices"
	"time"

	"github.com/loom-ml/loom/libs/acct"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// DefaultAcctInterval is how often a running step's usage is reported
// (UsageReported), Slurm's JobAcctGatherFrequency default.
const DefaultAcctInterval = 30 * time.Second

// usageProtos is us as the bus carries them, by local id.
func usageProtos(us []acct.Usage) []*loomv1.TaskUsage {
	if len(us) == 0 {
		return nil
	}
	out := make([]*loomv1.TaskUsage, len(us))
	for i, u := range us {
		out[i] = u.Proto(0, "")
	}
	return out
}

// RunUsage is what a run's processes on this node have used so far: its
// batch step's (nil when it runs elsewhere or has ended) and each running
// job step's tasks', by step id.
type RunUsage struct {
	Step  *acct.Usage
	Tasks map[int32][]acct.Usage
}

// UsageReport is the UsageReported for a run's usage here; nil when there is
// nothing to report.
func UsageReport(self Self, job string, attempt int32, u RunUsage) *eventsv1.UsageReported {
	if u.Step == nil && len(u.Tasks) == 0 {
		return nil
	}
	ev := &eventsv1.UsageReported{Job: job, Attempt: attempt, Node: self.Node, Cluster: self.Cluster}
	if u.Step != nil {
		ev.Usage = u.Step.Proto(0, "")
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

// MemoryVerdict is what a sample of a unit's memory decides: kill it, or
// not, and for how many more samples a doubt holds (Doubt, 0: none;
// JudgeMemory).
type MemoryVerdict struct {
	Kill  bool
	Doubt int
}

// MemoryDoubtSamples is how many samples a doubt lasts (a minute at the
// default 5 s progress interval): a unit is spared one sample past its
// limit with processes unread in that many, not one in two.
const MemoryDoubtSamples = 12

// JudgeMemory judges a unit's sample held (bytes, its processes'
// proportional set size) against its limit (0: none). unread says that
// the sample took some process's PSS as its RSS, its read given up
// (proc.GroupUsage: the process held its memory map lock, or the agent's
// thread waited past the read's bound on a node whose CPUs are busy), an
// upper bound that counts pages shared by forked workers once each.
// doubt is the previous verdict's Doubt (0: none). Past the limit with
// exact figures, the unit is killed; past it only by a sample with unread
// processes, the kill is held (Doubt: MemoryDoubtSamples), and made at the
// next sample past it, exact or not, while the doubt lasts; each sample
// within the limit shortens it by one. So a read that only waited its
// turn does not kill a job whose real PSS is within its limit, a process
// that keeps its lock held forever (its every sample unread) is judged by
// its RSS one sample later, and one that stalls its reads while past its
// limit and lets them go, within it, for the sample after (a sample within
// the limit does not clear the doubt) is killed at its second stalled
// sample: it cannot hide memory by stalling its reads more than once in
// MemoryDoubtSamples samples.
func JudgeMemory(held, limit int64, unread bool, doubt int) MemoryVerdict {
	switch {
	case !OverMemory(held, limit):
		return MemoryVerdict{Doubt: max(doubt-1, 0)}
	case unread && doubt <= 0:
		return MemoryVerdict{Doubt: MemoryDoubtSamples}
	default:
		return MemoryVerdict{Kill: true}
	}
}

// MemoryLine is Slurm's line in a step's error output when it is killed for
// passing its memory limit (jobacct_gather's OverMemoryKill), sizes in KiB:
// "Job 12" for a batch script, "Step 12.0" for srun tasks.
func MemoryLine(what string, held, limit int64) string {
	return fmt.Sprintf("slurmstepd: error: %s exceeded memory limit (%d > %d), being killed\n", what, held>>10, limit>>10)
}

// GPUShare is what a reading of the node's GPUs says of the devices a task
// sees: their mean utilization (percent) and the most memory used on one of
// them; ok is false when the reading has none of them (or none is on the
// bus).
func GPUShare(reading []*loomv1.GpuSample, devices []int) (util float64, mem int64, ok bool) {
	n := 0
	for _, d := range devices {
		for _, g := range reading {
			if int(g.GetIndex()) != d || g.GetLost() {
				continue
			}
			util += g.GetGpuUtilPercent()
			mem = max(mem, int64(min(g.GetMemoryUsedBytes(), 1<<62)))
			n++
		}
	}
	if n == 0 {
		return 0, 0, false
	}
	return util / float64(n), mem, true
}

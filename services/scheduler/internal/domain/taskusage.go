package domain

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/loom-ml/loom/libs/acct"
	"github.com/loom-ml/loom/libs/errs"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Job accounting: the agents report what each task's processes use
// (UsageReported while they run, every accounting interval; StepChanged and
// TasksChanged with their ends), and the run keeps the latest on the
// node's step (a batch script) or on the job step's part for that node (srun
// tasks, by local id), for sacct and sstat. A node is not a caller the
// scheduler can refuse: what it reports is bounded instead (no negative
// number, no time after now, no more tasks than it runs).

// Bounds on what a node may report of one task: no task holds, moves or
// runs more.
const (
	maxTaskBytes = 1 << 50                    // 1 PiB
	maxTaskCPU   = 100 * 365 * 24 * time.Hour // a century
	maxTaskGPUs  = 1024
)

// MinUsageReportInterval is the least time between two usage reports of a
// node for a run that the scheduler keeps: each kept one is a store write,
// and a node (broken, or hostile) that sent them as fast as it could would
// otherwise write as fast. Agents report every -acct-interval (30 s by
// default); closer ones are dropped, the ends' final figures never.
const MinUsageReportInterval = 5 * time.Second

// taskUsage is a task's usage as an agent reported it, made safe to keep.
func (t *txn) taskUsage(p *loomv1.TaskUsage) acct.Usage {
	d := func(x *durationpb.Duration) time.Duration {
		if x == nil || x.CheckValid() != nil {
			return 0
		}
		return min(max(x.AsDuration(), 0), maxTaskCPU)
	}
	b := func(n int64) int64 { return min(max(n, 0), maxTaskBytes) }
	u := acct.Usage{
		UserCPU: d(p.GetUserCpu()), SystemCPU: d(p.GetSystemCpu()),
		MaxRSS: b(p.GetMaxRssBytes()), RSS: b(p.GetRssBytes()), MaxVMSize: b(p.GetMaxVmsizeBytes()),
		Read: b(p.GetReadBytes()), Write: b(p.GetWriteBytes()),
		Time: t.reported(p.GetTime()),
		GPUs: int(min(max(p.GetGpus(), 0), maxTaskGPUs)), MaxGPUMem: b(p.GetMaxGpuMemoryBytes()),
	}
	// !(x >= 0) also drops NaN.
	if util := p.GetGpuUtilPercent(); util >= 0 && u.GPUs > 0 {
		u.GPUUtil = min(util, 100)
	}
	return u
}

// batchUsage is a step's reported usage as kept (nil when none).
func (t *txn) batchUsage(p *loomv1.TaskUsage) *acct.Usage {
	if p == nil {
		return nil
	}
	u := t.taskUsage(p)
	return &u
}

// taskUsages is a node's tasks' reported usage, by local id, as kept: at
// most the n tasks it runs (nil when none).
func (t *txn) taskUsages(ps []*loomv1.TaskUsage, n int32) []acct.Usage {
	if len(ps) == 0 || n <= 0 {
		return nil
	}
	ps = ps[:min(len(ps), int(n))]
	out := make([]acct.Usage, len(ps))
	for i, p := range ps {
		out[i] = t.taskUsage(p)
	}
	return out
}

// usageReported records what a running run's processes on a node have used
// so far: its batch step's and its running job steps' tasks'. Reports for
// what has ended (whose end carried the final usage), for a node the run
// does not hold, or within MinUsageReportInterval of the node's last kept
// one, change nothing.
func (t *txn) usageReported(ev *eventsv1.UsageReported) error {
	var v errs.Validator
	v.Check(ev.GetJob() != "", "job", "required")
	v.Check(ev.GetNode() != "", "node", "required")
	if err := v.Err(); err != nil {
		return fmt.Errorf("usage reported: %w", err)
	}
	key := RunKey(ev.GetJob(), ev.GetAttempt())
	r := t.run(key)
	if r == nil || r.Released {
		return nil
	}
	node := ev.GetNode()
	st, ok := r.Steps[node]
	if !ok || (!st.UsageAt.IsZero() && t.now.Before(st.UsageAt.Add(MinUsageReportInterval))) {
		return nil
	}
	batch := ev.GetUsage() != nil && st.State == eventsv1.StepState_STEP_RUNNING && !st.Terminal()
	type part struct{ i, k int }
	var parts []part
	for _, js := range ev.GetJobSteps() {
		i := stepIndex(r, js.GetStepId())
		if i < 0 || len(js.GetTasks()) == 0 {
			continue
		}
		for k, n := range r.JobSteps[i].Nodes {
			if n == node && !r.JobSteps[i].Parts[k].Terminal() {
				parts = append(parts, part{i, k})
			}
		}
	}
	if !batch && len(parts) == 0 {
		return nil
	}
	r = t.editRun(key)
	if batch {
		st.Usage = t.batchUsage(ev.GetUsage())
	}
	st.UsageAt = t.now
	r.Steps[node] = st
	byID := map[int32][]*loomv1.TaskUsage{}
	for _, js := range ev.GetJobSteps() {
		byID[js.GetStepId()] = js.GetTasks()
	}
	for _, p := range parts {
		s := r.JobSteps[p.i].Clone()
		s.Parts[p.k].Usage = t.taskUsages(byID[s.ID], s.Tasks[p.k])
		putJobStep(r, p.i, s)
	}
	return nil
}

package domain

import (
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler/internal/domain/jobstore"
)

func usageOf(rss int64, cpu time.Duration) *loomv1.TaskUsage {
	return &loomv1.TaskUsage{MaxRssBytes: rss, RssBytes: rss, UserCpu: durationpb.New(cpu), MaxVmsizeBytes: 2 * rss}
}

// TestUsageIsKeptForSacctAndSstat: a running batch script's and srun
// tasks' usage reports land on the run (the job's runs[].batch_usage, the
// job step's task_usage with each task's rank and host), their ends' final
// usage replaces them, later reports of what ended change nothing, and a
// hostile report is bounded: no negative number, no time ahead of now, no
// more tasks than the node runs.
func TestUsageIsKeptForSacctAndSstat(t *testing.T) {
	t.Parallel()
	h := batchOnTwo(t)
	h.do(&eventsv1.UsageReported{Job: jobName(1), Attempt: 1, Node: nodeName("a"), Cluster: cl, Usage: usageOf(100, time.Second)})
	batch := func() *loomv1.TaskUsage {
		runs := h.s.JobViewer(h.now)(jobName(1)).GetRuns()
		if len(runs) == 0 {
			t.Fatal("job 1 shows no runs")
		}
		return runs[len(runs)-1].GetBatchUsage()
	}
	if u := batch(); u.GetMaxRssBytes() != 100 || u.GetUserCpu().AsDuration() != time.Second || u.GetNode() != "a" || u.GetRank() != 0 {
		t.Fatalf("batch usage while running = %v", u)
	}
	// The other node runs no batch script: its report says nothing of it.
	h.do(&eventsv1.UsageReported{Job: jobName(1), Attempt: 1, Node: nodeName("b"), Cluster: cl, Usage: usageOf(999, time.Hour)})
	if u := batch(); u.GetMaxRssBytes() != 100 {
		t.Fatalf("an idle node's report replaced the batch usage: %v", u)
	}

	h.do(createStep("r1"))
	h.tasks(0, "a", eventsv1.StepState_STEP_RUNNING)
	h.tasks(0, "b", eventsv1.StepState_STEP_RUNNING)
	hostile := &loomv1.TaskUsage{MaxRssBytes: -5, UserCpu: durationpb.New(-time.Hour), Time: timestamppb.New(time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)),
		ReadBytes: math.MaxInt64, SystemCpu: durationpb.New(math.MaxInt64), Gpus: 1 << 30, GpuUtilPercent: math.Inf(1)}
	h.do(&eventsv1.UsageReported{Job: jobName(1), Attempt: 1, Node: nodeName("b"), Cluster: cl,
		JobSteps: []*eventsv1.UsageReported_JobStep{{StepId: 0, Tasks: []*loomv1.TaskUsage{usageOf(30, 0), hostile, usageOf(1, 0)}}}})
	s := h.jobStep(0)
	if len(s.GetTaskUsage()) != 2 {
		t.Fatalf("task usage %v: want node b's two tasks, the third reported dropped", s.GetTaskUsage())
	}
	first, second := s.GetTaskUsage()[0], s.GetTaskUsage()[1]
	if first.GetRank() != 2 || first.GetNode() != "b" || first.GetMaxRssBytes() != 30 || second.GetRank() != 3 {
		t.Errorf("task usage %v: want ranks 2 and 3 on b", s.GetTaskUsage())
	}
	if second.GetMaxRssBytes() != 0 || second.GetUserCpu().AsDuration() != 0 || second.GetTime().AsTime().After(h.now) ||
		second.GetReadBytes() != maxTaskBytes || second.GetSystemCpu().AsDuration() != maxTaskCPU ||
		second.GetGpus() != maxTaskGPUs || second.GetGpuUtilPercent() != 100 {
		t.Errorf("hostile usage kept as %v: want zeros, bounded sizes and times, a time no later than now", second)
	}

	// The tasks' ends carry their final usage.
	h.do(&eventsv1.TasksChanged{Job: jobName(1), Attempt: 1, StepId: 0, Node: nodeName("a"), Cluster: cl,
		State: eventsv1.StepState_STEP_EXITED, ExitCodes: []int32{0, 0}, Usage: []*loomv1.TaskUsage{usageOf(7, 0), usageOf(8, 0)}})
	h.do(&eventsv1.TasksChanged{Job: jobName(1), Attempt: 1, StepId: 0, Node: nodeName("b"), Cluster: cl,
		State: eventsv1.StepState_STEP_EXITED, ExitCodes: []int32{0, 0}})
	s = h.jobStep(0)
	var got []int64
	for _, u := range s.GetTaskUsage() {
		got = append(got, u.GetMaxRssBytes())
	}
	if len(got) != 4 || got[0] != 7 || got[1] != 8 || got[2] != 30 {
		t.Errorf("final task usage by rank %v: want a's final 7, 8 and b's last report kept (30, 0)", got)
	}
	// A report after the end changes nothing.
	h.do(&eventsv1.UsageReported{Job: jobName(1), Attempt: 1, Node: nodeName("a"), Cluster: cl,
		JobSteps: []*eventsv1.UsageReported_JobStep{{StepId: 0, Tasks: []*loomv1.TaskUsage{usageOf(1e9, 0)}}}})
	if u := h.jobStep(0).GetTaskUsage()[0]; u.GetMaxRssBytes() != 7 {
		t.Errorf("a report after the tasks' end replaced their final usage: %v", u)
	}

	// The batch script's end: its final usage; a late report is ignored.
	h.do(&eventsv1.StepChanged{Job: jobName(1), Attempt: 1, Node: nodeName("a"), Cluster: cl,
		State: eventsv1.StepState_STEP_EXITED, Usage: usageOf(250, 3*time.Second)})
	h.do(&eventsv1.UsageReported{Job: jobName(1), Attempt: 1, Node: nodeName("a"), Cluster: cl, Usage: usageOf(1, 0)})
	if u := batch(); u.GetMaxRssBytes() != 250 || u.GetUserCpu().AsDuration() != 3*time.Second {
		t.Errorf("batch usage after the end = %v, want the final 250 bytes, 3s", u)
	}
}

// finalJob is the job of c's JobChanged in a final state (nil when none).
func finalJob(c *Change) *loomv1.Job {
	var out *loomv1.Job
	for _, e := range c.Emits {
		if jc, ok := e.Payload.(*eventsv1.JobChanged); ok && jc.GetJob().GetState().Terminal() {
			out = jc.GetJob()
		}
	}
	return out
}

// TestFinalJobCarriesItsSteps: a job's final JobChanged carries its runs'
// job steps with their usage, for the accounting history the gateway keeps
// once the scheduler has pruned the job. GetJob leaves them out.
func TestFinalJobCarriesItsSteps(t *testing.T) {
	t.Parallel()
	h := batchOnTwo(t)
	h.do(createStep("r0"))
	h.do(&eventsv1.TasksChanged{Job: jobName(1), Attempt: 1, StepId: 0, Node: nodeName("a"), Cluster: cl,
		State: eventsv1.StepState_STEP_EXITED, ExitCodes: []int32{0, 0}, Usage: []*loomv1.TaskUsage{usageOf(7, 0), usageOf(8, 0)}})
	h.do(&eventsv1.TasksChanged{Job: jobName(1), Attempt: 1, StepId: 0, Node: nodeName("b"), Cluster: cl,
		State: eventsv1.StepState_STEP_EXITED, ExitCodes: []int32{0, 0}})
	j := finalJob(h.step(1, 1, "a", eventsv1.StepState_STEP_EXITED, 0))
	if j == nil {
		t.Fatal("no final JobChanged when the batch step exited")
	}
	if len(j.GetSteps()) != 1 || j.GetStepsOmitted() != 0 {
		t.Fatalf("final job carries %d steps, %d omitted; want 1 and 0", len(j.GetSteps()), j.GetStepsOmitted())
	}
	if s := j.GetSteps()[0]; s.GetStepId() != 0 || s.GetAttempt() != 1 || s.GetState() != loomv1.JobState_COMPLETED ||
		len(s.GetTaskUsage()) != 2 || s.GetTaskUsage()[1].GetMaxRssBytes() != 8 {
		t.Errorf("step %v: want step 0 of attempt 1, COMPLETED, with its tasks' usage", s)
	}
	if got := h.s.JobViewer(h.now)(jobName(1)); len(got.GetSteps()) != 0 {
		t.Errorf("GetJob carries %d steps, want none", len(got.GetSteps()))
	}
}

// TestHistoryStepsAreBounded: past MaxHistorySteps steps, or
// MaxHistoryStepBytes of them, the newest are left out and counted, over
// every run of the job, oldest run first.
func TestHistoryStepsAreBounded(t *testing.T) {
	t.Parallel()
	job := &Job{JobRecord: jobstore.JobRecord{Job: &loomv1.Job{Name: jobName(1), JobId: "1"}, Attempt: 2}}
	run := func(attempt int32, n int, cmd string) *Run {
		r := &Run{RunRecord: jobstore.RunRecord{Job: jobName(1), Attempt: attempt}}
		for i := range n {
			r.JobSteps = append(r.JobSteps, JobStep{ID: int32(i), Command: []string{cmd}, State: loomv1.JobState_COMPLETED})
		}
		return r
	}
	for _, tc := range []struct {
		name         string
		first, later int
		cmd          string
		want, out    int
	}{
		{"few", 2, 3, "true", 5, 0},
		{"many", 600, 600, "true", MaxHistorySteps, 200},
		{"large", 2, 200, strings.Repeat("x", 4096), MaxHistoryStepBytes / 4200, 202 - MaxHistoryStepBytes/4200},
	} {
		runs := map[string]*Run{RunKey(jobName(1), 1): run(1, tc.first, tc.cmd), RunKey(jobName(1), 2): run(2, tc.later, tc.cmd)}
		steps, omitted := historySteps(job, func(key string) *Run { return runs[key] })
		size := 0
		for _, s := range steps {
			size += proto.Size(s)
		}
		if len(steps) < tc.want-2 || len(steps) > tc.want || int(omitted) != tc.first+tc.later-len(steps) || size > MaxHistoryStepBytes {
			t.Errorf("%s: %d steps (%d bytes), %d omitted; want about %d and %d", tc.name, len(steps), size, omitted, tc.want, tc.out)
		}
		if len(steps) > 0 && (steps[0].GetAttempt() != 1 || steps[len(steps)-1].GetAttempt() != 2 && tc.later > 0 && omitted == 0) {
			t.Errorf("%s: steps from attempt %d to %d, want the oldest run's first", tc.name, steps[0].GetAttempt(), steps[len(steps)-1].GetAttempt())
		}
	}
}

// TestUsageReportsAreRateBounded: a node's usage reports for a run closer
// together than MinUsageReportInterval are dropped (each kept one is a
// store write); the next one after it is kept, and a step's end always is.
func TestUsageReportsAreRateBounded(t *testing.T) {
	t.Parallel()
	h := batchOnTwo(t)
	report := func(rss int64) *Change {
		return h.do(&eventsv1.UsageReported{Job: jobName(1), Attempt: 1, Node: nodeName("a"), Cluster: cl, Usage: usageOf(rss, 0)})
	}
	batch := func() int64 {
		runs := h.s.JobViewer(h.now)(jobName(1)).GetRuns()
		return runs[len(runs)-1].GetBatchUsage().GetMaxRssBytes()
	}
	report(100)
	if c := report(200); batch() != 100 || len(c.Runs) != 0 {
		t.Fatalf("a report a second after the last: batch usage %d, %d run(s) written; want it dropped", batch(), len(c.Runs))
	}
	h.now = h.now.Add(MinUsageReportInterval)
	if report(300); batch() != 300 {
		t.Fatalf("a report past the interval: batch usage %d, want 300", batch())
	}
	h.do(&eventsv1.StepChanged{Job: jobName(1), Attempt: 1, Node: nodeName("a"), Cluster: cl,
		State: eventsv1.StepState_STEP_EXITED, Usage: usageOf(400, 0)})
	if batch() != 400 {
		t.Errorf("the step's end right after a report: batch usage %d, want its final 400", batch())
	}
}

// TestMemLimit: --mem in MB as bytes; none asked, or more than fits in
// bytes (a shift past 2^43 MB wrapped), is no limit.
func TestMemLimit(t *testing.T) {
	t.Parallel()
	for mb, want := range map[int64]int64{0: 0, -1: 0, 1: 1 << 20, 512000: 512000 << 20, 1 << 43: 0, math.MaxInt64: 0, 1<<43 - 1: (1<<43 - 1) << 20} {
		if got := memLimit(&Run{RunRecord: jobstore.RunRecord{MemMB: mb}}); got != want {
			t.Errorf("memLimit(%d MB) = %d, want %d", mb, got, want)
		}
	}
}

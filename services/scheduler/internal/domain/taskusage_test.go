package domain

import (
	"math"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
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
		ReadBytes: math.MaxInt64, SystemCpu: durationpb.New(math.MaxInt64)}
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
		second.GetReadBytes() != maxTaskBytes || second.GetSystemCpu().AsDuration() != maxTaskCPU {
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

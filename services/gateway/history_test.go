package gateway

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestJobHistoryServesPrunedJobs: a job that ended is recorded in the
// history (as the scheduler had it, with its runs) from loom.job.events.v1,
// so that GetJob and ListJobs (sacct) still answer for it once the
// scheduler pruned it, and its accepted record no longer shows it pending.
func TestJobHistoryServesPrunedJobs(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, 2*wait)

	sub, err := h.jobs().SubmitJob(ctx, validJob())
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	ended := &loomv1.Job{Name: sub.GetName(), JobId: sub.GetJobId(), Cluster: cluster1, State: loomv1.JobState_FAILED,
		ExitCode: 3, StateReason: "NonZeroExitCode", User: "ana", Partition: "all",
		SubmitTime: sub.GetSubmitTime(), StartTime: timestamppb.New(time.Now().Add(-time.Minute)), EndTime: timestamppb.Now(),
		Runs: []*loomv1.JobRun{{Attempt: 1, State: loomv1.JobState_FAILED, ExitCode: 3, Nodes: []string{"gpu-0001"}}}}
	h.w.setJob(ended)
	ev := ended
	testkit.PublishAs(t, h.broker, "scheduler", envelope.New(topics.JobEvents, cluster1, "loom/scheduler",
		&eventsv1.JobChanged{Job: &loomv1.Job{Name: ev.GetName(), JobId: ev.GetJobId(), Cluster: cluster1, State: ev.GetState(),
			ExitCode: 3, EndTime: ev.GetEndTime()}, Attempt: 1}))

	// The scheduler prunes it; the history answers.
	got := fromHistory(t, ctx, h, ended.GetName())
	if got.GetState() != loomv1.JobState_FAILED || got.GetExitCode() != 3 || len(got.GetRuns()) != 1 || got.GetUser() != "ana" {
		t.Fatalf("history job %v; want the scheduler's view, with its run", got)
	}
	list, err := h.jobs().ListJobs(ctx, &loomv1.ListJobsRequest{Parent: "projects/default"})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	n := 0
	for _, j := range list.GetJobs() {
		if j.GetName() == ended.GetName() {
			n++
			if j.GetState() != loomv1.JobState_FAILED {
				t.Errorf("listed as %v, want FAILED (the history wins over the accepted record)", j.GetState())
			}
		}
	}
	if n != 1 {
		t.Fatalf("listed %d times, want once: %v", n, list.GetJobs())
	}
	// sacct -s F filters it in, squeue (active only) leaves it out.
	if l, err := h.jobs().ListJobs(ctx, &loomv1.ListJobsRequest{Parent: "projects/default",
		States: []loomv1.JobState{loomv1.JobState_FAILED}}); err != nil || len(l.GetJobs()) != 1 {
		t.Errorf("list FAILED: %v %v", l.GetJobs(), err)
	}
	if l, err := h.jobs().ListJobs(ctx, &loomv1.ListJobsRequest{Parent: "projects/default", ActiveOnly: true}); err != nil {
		t.Errorf("list active: %v", err)
	} else {
		for _, j := range l.GetJobs() {
			if j.GetName() == ended.GetName() {
				t.Errorf("an ended job listed as active: %v", j)
			}
		}
	}
}

// TestJobHistoryTakesRunsFromTheEvent: a final JobChanged that carries the
// job's runs (as the scheduler sends them) is recorded as it is, without
// asking the scheduler again.
func TestJobHistoryTakesRunsFromTheEvent(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, 2*wait)

	req := validJob()
	req.Job.Env = map[string]string{"TOKEN_FILE": "/secret/path"}
	sub, err := h.jobs().SubmitJob(ctx, req)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	// The accepted record (kept for the history window, read whole by
	// every ListJobs) names the job without its script and environment:
	// the scheduler's command carries them.
	var accepted loomv1.Job
	if raw, err := h.redis.HGet(ctx, "gateway:jobs", sub.GetName()).Bytes(); err != nil || proto.Unmarshal(raw, &accepted) != nil ||
		accepted.GetName() != sub.GetName() || accepted.GetScript() != "" || len(accepted.GetEnv()) != 0 {
		t.Fatalf("the accepted record %v (%v); want the job without its script and environment", &accepted, err)
	}
	if sub.GetScript() == "" {
		t.Fatalf("the submission's answer lost its script: %v", sub)
	}
	// The scheduler (fake) would answer a different view: it must not be read.
	h.w.setJob(&loomv1.Job{Name: sub.GetName(), JobId: sub.GetJobId(), Cluster: cluster1, State: loomv1.JobState_COMPLETED,
		User: "from-get-job", Runs: []*loomv1.JobRun{{Attempt: 1, State: loomv1.JobState_COMPLETED}}})
	sent := &loomv1.Job{Name: sub.GetName(), JobId: sub.GetJobId(), Cluster: cluster1, State: loomv1.JobState_COMPLETED,
		User: "from-event", EndTime: timestamppb.Now(), Script: "#!/bin/sh\n" + strings.Repeat("# padding\n", 6000),
		Env: map[string]string{"BIG": strings.Repeat("x", 60000)},
		Runs: []*loomv1.JobRun{{Attempt: 1, State: loomv1.JobState_COMPLETED, Nodes: []string{"gpu-0002"},
			ExitSignal: proto.Int32(0), DerivedExitCode: proto.Int32(3), DerivedExitSignal: proto.Int32(0)}},
		ExitSignal: proto.Int32(0), DerivedExitCode: proto.Int32(3), DerivedExitSignal: proto.Int32(0)}
	testkit.PublishAs(t, h.broker, "scheduler", envelope.New(topics.JobEvents, cluster1, "loom/scheduler", &eventsv1.JobChanged{Job: sent, Attempt: 1}))
	got := fromHistory(t, ctx, h, sent.GetName())
	if got.GetUser() != "from-event" || len(got.GetRuns()) != 1 || got.GetRuns()[0].GetNodes()[0] != "gpu-0002" {
		t.Fatalf("history job %v; want the event's job with its run", got)
	}
	// The exit signal and DerivedExitCode (sacct's, scontrol -d's) the
	// scheduler sent for the job and its run are kept.
	if r := got.GetRuns()[0]; got.ExitSignal == nil || got.DerivedExitCode == nil || got.GetDerivedExitCode() != 3 || got.DerivedExitSignal == nil ||
		r.ExitSignal == nil || r.DerivedExitCode == nil || r.GetDerivedExitCode() != 3 || r.DerivedExitSignal == nil {
		t.Errorf("history job %v; want its exit signal and derived exit 3:0, and its run's", got)
	}
	// Its script and environment are not kept (most of an ended job's
	// bytes, for 30 days): the record is small.
	raw, err := h.redis.HGet(ctx, "gateway:history", sent.GetName()).Bytes()
	if err != nil || len(raw) > 4096 || got.GetScript() != "" || len(got.GetEnv()) != 0 {
		t.Errorf("the history record is %d bytes (%v), script %d bytes, env %d; want the job without them", len(raw), err, len(got.GetScript()), len(got.GetEnv()))
	}
}

// fromHistory waits until the history holds the job name, has the (fake)
// scheduler prune it, and returns what GetJob then answers: the history's.
func fromHistory(t *testing.T, ctx context.Context, h *harness, name string) *loomv1.Job {
	t.Helper()
	testkit.WaitFor(t, wait, "the ended job in the history", func() (bool, error) {
		return h.redis.HExists(ctx, "gateway:history", name).Result()
	})
	h.w.mu.Lock()
	delete(h.w.jobs, name)
	h.w.mu.Unlock()
	got, err := h.jobs().GetJob(ctx, &loomv1.GetJobRequest{Name: name})
	if err != nil {
		t.Fatalf("GetJob of a pruned job: %v", err)
	}
	return got
}

// TestJobHistoryKeepsSteps: the job steps a final JobChanged carries
// (Job.steps) are kept apart from the job, so that sacct still lists a
// pruned job's steps and their usage: ListJobSteps answers from the
// history, by attempt (0: the last run's), and GetJob leaves them out.
func TestJobHistoryKeepsSteps(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, 2*wait)
	sub, err := h.jobs().SubmitJob(ctx, validJob())
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	step := func(attempt, id int32, rss int64) *loomv1.JobStep {
		return &loomv1.JobStep{Name: sub.GetName() + "/steps/" + string(rune('0'+id)), Job: sub.GetName(), Attempt: attempt,
			StepId: id, State: loomv1.JobState_COMPLETED, TaskUsage: []*loomv1.TaskUsage{{MaxRssBytes: rss}}}
	}
	sent := &loomv1.Job{Name: sub.GetName(), JobId: sub.GetJobId(), Cluster: cluster1, State: loomv1.JobState_COMPLETED,
		EndTime: timestamppb.Now(), Runs: []*loomv1.JobRun{{Attempt: 1, State: loomv1.JobState_REQUEUED}, {Attempt: 2, State: loomv1.JobState_COMPLETED}},
		Steps: []*loomv1.JobStep{step(1, 0, 10), step(2, 0, 20), step(2, 1, 30)}}
	h.w.setJob(sent)
	testkit.PublishAs(t, h.broker, "scheduler", envelope.New(topics.JobEvents, cluster1, "loom/scheduler", &eventsv1.JobChanged{Job: sent, Attempt: 2}))
	got := fromHistory(t, ctx, h, sent.GetName())
	if len(got.GetSteps()) != 0 || len(got.GetRuns()) != 2 {
		t.Errorf("GetJob from the history: %d steps, %d runs; want none and 2", len(got.GetSteps()), len(got.GetRuns()))
	}
	for attempt, want := range map[int32][]int64{0: {20, 30}, 2: {20, 30}, 1: {10}} {
		resp, err := h.jobs().ListJobSteps(ctx, &loomv1.ListJobStepsRequest{Parent: sent.GetName(), Attempt: attempt})
		if err != nil {
			t.Fatalf("ListJobSteps attempt %d: %v", attempt, err)
		}
		var rss []int64
		for _, s := range resp.GetSteps() {
			rss = append(rss, s.GetTaskUsage()[0].GetMaxRssBytes())
		}
		if len(rss) != len(want) || rss[0] != want[0] || rss[len(rss)-1] != want[len(want)-1] {
			t.Errorf("ListJobSteps attempt %d: steps with %v, want %v", attempt, rss, want)
		}
	}
	if _, err := h.jobs().ListJobSteps(ctx, &loomv1.ListJobStepsRequest{Parent: sent.GetName(), Attempt: 3}); status.Code(err) != codes.NotFound {
		t.Errorf("ListJobSteps of attempt 3: %v, want NotFound", err)
	}
}

package domain

import (
	"testing"

	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler/internal/domain/views"
)

// TestNiceLowersPriority: --nice is subtracted from a job's priority (sprio
// shows it as NICE), so a nice job submitted first starts after one that is
// not; the result never falls below 1 (0 is a held job's); scontrol update
// Nice= changes a pending job's, and a running job's is left alone.
func TestNiceLowersPriority(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("gpu-0001", 8)
	h.submitJob(job(1, 1, 8))
	h.wantState(1, loomv1.JobState_RUNNING, "")
	nice := func(n int32) func(*loomv1.Job) { return func(j *loomv1.Job) { j.Nice = n } }
	h.submitJob(job(2, 1, 8, nice(500)))
	h.submitJob(job(3, 1, 8))
	h.submitJob(job(4, 1, 8, nice(MaxNice)))
	prio := func(id int) (int64, *loomv1.PriorityFactors) {
		v := views.Job(h.s, jobName(id), h.now)
		return v.GetPriority(), v.GetPriorityFactors()
	}
	p2, f2 := prio(2)
	p3, _ := prio(3)
	if p2 != p3-500 || f2.GetNice() != 500 {
		t.Fatalf("job 2 (nice 500): priority %d, factors %v; job 3 (none): %d", p2, f2, p3)
	}
	if p4, _ := prio(4); p4 != 1 {
		t.Errorf("job 4 (nice %d): priority %d, want 1", MaxNice, p4)
	}
	h.finish(1, 0)
	h.wantState(3, loomv1.JobState_RUNNING, "")
	h.wantState(2, loomv1.JobState_PENDING, "Resources")

	// An administrator gives job 2 a negative nice: its factors' sum plus
	// 100.
	h.do(&eventsv1.UpdateJob{Job: jobName(2), Cluster: cl, Action: ActionUpdate, Nice: proto.Int32(-100), Admin: true})
	if p, f := prio(2); f.GetNice() != -100 || p != f.GetAge()+f.GetFairshare()+f.GetJobSize()+f.GetPartition()+f.GetQos()+100 {
		t.Errorf("job 2 after Nice=-100: priority %d (factors %v), want their sum + 100", p, f)
	}
	// A running job's nice is not changed.
	h.do(&eventsv1.UpdateJob{Job: jobName(3), Cluster: cl, Action: ActionUpdate, Nice: proto.Int32(7), Admin: true})
	if n := h.s.Job(jobName(3)).GetNice(); n != 0 {
		t.Errorf("running job 3's nice: %d, want 0", n)
	}
	if _, err := h.s.Handle(h.now, &eventsv1.UpdateJob{Job: jobName(2), Cluster: cl, Action: ActionUpdate, Nice: proto.Int32(-MaxNice - 1)}); err == nil {
		t.Error("a nice past the bound was accepted")
	}
}

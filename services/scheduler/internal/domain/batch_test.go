package domain

import (
	"errors"
	"strconv"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/errs"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// batch hands evs to HandleBatch at one instant and commits the change.
func (h *harness) batch(evs ...proto.Message) (*Change, []int) {
	h.t.Helper()
	h.now = h.now.Add(1e9)
	c, ends, err := h.s.HandleBatch(h.now, evs)
	if err != nil {
		h.t.Fatalf("HandleBatch: %v", err)
	}
	h.commit(c)
	return c, ends
}

func startedJobs(c *Change) map[string]bool {
	out := map[string]bool{}
	for _, ss := range starts(c) {
		out[ss.GetJob()] = true
	}
	return out
}

func TestHandleBatchDecidesAsOneByOne(t *testing.T) {
	t.Parallel()
	one, many := newHarness(t), newHarness(t)
	for _, h := range []*harness{one, many} {
		for i := 1; i <= 4; i++ {
			h.node("gpu-000"+strconv.Itoa(i), 8)
		}
	}
	submit := func(h *harness, id int) proto.Message {
		return &eventsv1.SubmitJob{Job: &loomv1.Job{Name: jobName(id), JobId: strconv.Itoa(id), Cluster: cl, NodeCount: 1,
			GpusPerNode: 8, Command: []string{"/bin/train"}, SubmitTime: timestamppb.New(h.now)}}
	}
	// Eight whole-node jobs on four nodes: one by one, and as one batch.
	seqStarted := map[string]bool{}
	for id := 1; id <= 8; id++ {
		for j := range startedJobs(one.do(submit(one, id))) {
			seqStarted[j] = true
		}
	}
	var evs []proto.Message
	for id := 1; id <= 8; id++ {
		evs = append(evs, submit(many, id))
	}
	c, ends := many.batch(evs...)
	batchStarted := startedJobs(c)
	if len(batchStarted) != 4 || len(seqStarted) != 4 {
		t.Fatalf("started %d jobs in the batch, %d one by one; want 4 and 4", len(batchStarted), len(seqStarted))
	}
	for j := range seqStarted {
		if !batchStarted[j] {
			t.Fatalf("job %s started one by one but not in the batch (batch started %v)", j, batchStarted)
		}
	}
	// Each event's emits come before its end, and name its job only.
	if len(ends) != 8 {
		t.Fatalf("ends = %v, want one per event", ends)
	}
	prev := 0
	for i, end := range ends {
		if end < prev || end > len(c.Emits) {
			t.Fatalf("ends = %v: not increasing within the %d emits", ends, len(c.Emits))
		}
		for _, e := range c.Emits[prev:end] {
			if jc, ok := e.Message().(*eventsv1.JobChanged); ok && jc.GetJob().GetName() != jobName(i+1) {
				t.Fatalf("event %d's emits include a change of %s", i, jc.GetJob().GetName())
			}
		}
		prev = end
	}
	for id := 1; id <= 8; id++ {
		a, b := one.s.Job(jobName(id)), many.s.Job(jobName(id))
		if a.GetState() != b.GetState() || a.GetStateReason() != b.GetStateReason() {
			t.Errorf("job %d: one by one %s/%q, batched %s/%q", id, a.GetState(), a.GetStateReason(), b.GetState(), b.GetStateReason())
		}
	}

	// The four running jobs end in one batch: the four waiting ones start in
	// the same change.
	evs = evs[:0]
	for j := range batchStarted {
		r := many.s.Run(j, 1)
		evs = append(evs, &eventsv1.StepChanged{Job: j, Attempt: 1, Node: r.Nodes[0], State: eventsv1.StepState_STEP_EXITED, Cluster: cl})
	}
	c, _ = many.batch(evs...)
	next := startedJobs(c)
	if len(next) != 4 {
		t.Fatalf("after four exits in one batch, %d jobs started; want 4", len(next))
	}
	for j := range next {
		if batchStarted[j] {
			t.Fatalf("job %s started twice", j)
		}
	}
}

func TestHandleBatchWithABadEventChangesNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("gpu-0001", 8)
	good := &eventsv1.SubmitJob{Job: &loomv1.Job{Name: jobName(1), JobId: "1", Cluster: cl, NodeCount: 1,
		Command: []string{"/bin/true"}, SubmitTime: timestamppb.New(h.now)}}
	bad := &eventsv1.SubmitJob{Job: &loomv1.Job{JobId: "2", Cluster: cl}} // no name
	c, ends, err := h.s.HandleBatch(h.now, []proto.Message{good, good, bad})
	var be *BatchError
	if !errors.As(err, &be) || be.Index != 2 || c != nil || ends != nil {
		t.Fatalf("HandleBatch = %v, %v, %v; want a BatchError at index 2 and no change", c, ends, err)
	}
	var inv *errs.InvalidError
	if !errors.As(err, &inv) {
		t.Fatalf("the batch error does not unwrap to the event's InvalidError: %v", err)
	}
	if h.s.Job(jobName(1)) != nil {
		t.Fatalf("a refused batch left job 1 in the state")
	}
}

// A change emits a job's progress once, as the change leaves it, but never
// hides an attempt's end: a short step whose start and end arrive in one
// batch ends its job in one JobChanged, which carries the job's runs.
func TestBatchEmitsOneJobChangedPerJobProgress(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("gpu-0001", 8)
	c := h.submitJob(job(1, 1, 8))
	if got := statesSeen(c, 1); len(got) != 1 || got[0] != loomv1.JobState_RUNNING {
		t.Fatalf("submitted and started in one change: %v, want [RUNNING]", got)
	}
	// The node is full: job 2 waits, and its one event says why.
	c = h.submitJob(job(2, 1, 8))
	if jc := jobChanges(c); len(jc) != 1 || jc[0].GetJob().GetState() != loomv1.JobState_PENDING || jc[0].GetJob().GetStateReason() == "" {
		t.Fatalf("a waiting job: %v, want one JobChanged PENDING with a reason", jc)
	}
	c, _ = h.batch(
		&eventsv1.StepChanged{Job: jobName(1), Attempt: 1, Node: nodeName("gpu-0001"), State: eventsv1.StepState_STEP_RUNNING, Cluster: cl},
		&eventsv1.StepChanged{Job: jobName(1), Attempt: 1, Node: nodeName("gpu-0001"), State: eventsv1.StepState_STEP_EXITED, Cluster: cl},
	)
	if got := statesSeen(c, 1); len(got) != 1 || got[0] != loomv1.JobState_COMPLETED {
		t.Fatalf("start and end in one batch: %v, want [COMPLETED]", got)
	}
	var done *loomv1.Job
	for _, jc := range jobChanges(c) {
		if jc.GetJob().GetName() == jobName(1) {
			done = jc.GetJob()
		}
	}
	if rs := done.GetRuns(); len(rs) != 1 || rs[0].GetState() != loomv1.JobState_COMPLETED || rs[0].GetEndTime() == nil ||
		len(rs[0].GetNodes()) != 1 || rs[0].GetNodes()[0] != "gpu-0001" {
		t.Fatalf("the final JobChanged's runs: %v, want the one completed run on gpu-0001", rs)
	}
	// Job 2 started in the same change.
	if got := statesSeen(c, 2); len(got) != 1 || got[0] != loomv1.JobState_RUNNING {
		t.Fatalf("the waiting job in the same change: %v, want [RUNNING]", got)
	}
	// (That a requeue's REQUEUED is kept before its PENDING: TestHoldReleaseRequeue.)
}

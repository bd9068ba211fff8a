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
			if jc, ok := e.Payload.(*eventsv1.JobChanged); ok && jc.GetJob().GetName() != jobName(i+1) {
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

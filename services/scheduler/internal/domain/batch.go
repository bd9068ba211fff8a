package domain

import (
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"
)

// HandleBatch computes what several consumed events do, in order, as one
// change with one scheduling pass after them all: what Handle would give
// for each in turn, except that the queue is looked at once, as Slurm's
// scheduler looks at it once per batch of arrivals rather than once per
// arrival. ends[i] is len(c.Emits) once event i was applied: the emits
// before it (and after ends[i-1]) are that event's; those after the last
// are the pass's.
//
// A payload that fails (see Handle) fails the whole batch: the change is
// dropped and err names the index; the caller then handles the events one by
// one, so that only the bad one is refused.
func (s *State) HandleBatch(now time.Time, payloads []proto.Message) (c *Change, ends []int, err error) {
	t := writerTxn(s, now)
	ends = make([]int, len(payloads))
	for i, p := range payloads {
		if err := t.dispatch(p); err != nil {
			return nil, nil, &BatchError{Index: i, Err: err}
		}
		ends[i] = len(t.c.Emits)
	}
	t.afterEvents()
	return t.c, ends, nil
}

// BatchError is HandleBatch's error: event Index of the batch failed with Err.
type BatchError struct {
	Index int
	Err   error
}

func (e *BatchError) Error() string {
	return "batch event " + strconv.Itoa(e.Index) + ": " + e.Err.Error()
}

// Unwrap returns the event's error.
func (e *BatchError) Unwrap() error { return e.Err }

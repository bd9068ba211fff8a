package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/loom-ml/loom/libs/topics"
)

// results tails loom.public.v1 from its end as it was at the start, and
// keeps when each of the benchmark's messages got its IngressResult (by
// the event's subject, the message's id) and with what outcome.
type results struct {
	mu      sync.Mutex
	seen    map[string]time.Time
	outcome map[string]string
	changed chan struct{} // closed and replaced at each result
	readers []*kafka.Reader
	cancel  context.CancelFunc
	done    sync.WaitGroup
	err     error
}

// resultData is the part of an IngressResult's JSON data the benchmark
// reads (protojson: camelCase, enums by name).
type resultData struct {
	MessageID string `json:"messageId"`
	Outcome   string `json:"outcome"`
	Reason    string `json:"reason"`
}

// tailResults starts a reader on every partition of loom.public.v1, from
// its current end.
func tailResults(ctx context.Context, broker string) (*results, error) {
	conn, err := kafka.DialContext(ctx, "tcp", broker)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", broker, err)
	}
	parts, err := conn.ReadPartitions(topics.Public)
	_ = conn.Close()
	if err != nil {
		return nil, fmt.Errorf("read the partitions of %s: %w (is the topic made? loom up makes it)", topics.Public, err)
	}
	rctx, cancel := context.WithCancel(ctx)
	r := &results{seen: map[string]time.Time{}, outcome: map[string]string{}, changed: make(chan struct{}), cancel: cancel}
	for _, p := range parts {
		rd := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{broker}, Topic: p.Topic, Partition: p.ID,
			MinBytes: 1, MaxBytes: 10 << 20, MaxWait: 20 * time.Millisecond})
		if err := rd.SetOffset(kafka.LastOffset); err != nil {
			cancel()
			return nil, err
		}
		r.readers = append(r.readers, rd)
		r.done.Add(1)
		go r.read(rctx, rd)
	}
	return r, nil
}

// read records each IngressResult of rd until ctx ends.
func (r *results) read(ctx context.Context, rd *kafka.Reader) {
	defer r.done.Done()
	for {
		m, err := rd.ReadMessage(ctx)
		if err != nil {
			if ctx.Err() == nil {
				r.mu.Lock()
				r.err = fmt.Errorf("read %s: %w", topics.Public, err)
				r.mu.Unlock()
			}
			return
		}
		at := time.Now()
		var typ, subject string
		for _, h := range m.Headers {
			switch h.Key {
			case "ce_type":
				typ = string(h.Value)
			case "ce_subject":
				subject = string(h.Value)
			}
		}
		if typ != resultType {
			continue
		}
		var d resultData
		_ = json.Unmarshal(m.Value, &d)
		if subject == "" {
			subject = d.MessageID
		}
		outcome := d.Outcome
		if outcome != "ACCEPTED" {
			outcome += ": " + d.Reason
		}
		r.record(subject, at, outcome)
	}
}

// record keeps the first outcome of message id, seen at at, and wakes the
// waiters.
func (r *results) record(id string, at time.Time, outcome string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.seen[id]; ok {
		return
	}
	r.seen[id] = at
	r.outcome[id] = outcome
	close(r.changed)
	r.changed = make(chan struct{})
}

// expect returns what waits until every id has its result: nil when each
// was ACCEPTED, an error naming the first that was not, ctx's error when it
// ends first.
func (r *results) expect(ids []string) func(context.Context) error {
	return func(ctx context.Context) error {
		for {
			r.mu.Lock()
			missing, changed, rerr := 0, r.changed, r.err
			var bad error
			for _, id := range ids {
				o, ok := r.outcome[id]
				switch {
				case !ok:
					missing++
				case o != "ACCEPTED" && bad == nil:
					bad = fmt.Errorf("message %s was not accepted: %s", id, o)
				}
			}
			r.mu.Unlock()
			switch {
			case bad != nil:
				return bad
			case rerr != nil:
				return rerr
			case missing == 0:
				return nil
			}
			select {
			case <-ctx.Done():
				if errors.Is(ctx.Err(), context.DeadlineExceeded) {
					return fmt.Errorf("%d of %d results missing: %w", missing, len(ids), ctx.Err())
				}
				return ctx.Err()
			case <-changed:
			}
		}
	}
}

// seenAt is when id's result was seen.
func (r *results) seenAt(id string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[id]
}

// close stops the readers.
func (r *results) close() {
	r.cancel()
	r.done.Wait()
	for _, rd := range r.readers {
		_ = rd.Close()
	}
}

// Package busread reads a benchmark's events back from the bus: every
// record of some topics, up to their ends as they are now, in time order.
// The benchmarks time what the services did from the events' own times.
package busread

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/loom-ml/loom/libs/envelope"
)

// Topics reads every record of the topics, up to their current ends, in
// time order, decoded by reg (not verified: a benchmark acts on none).
// Records of types reg does not know are skipped.
func Topics(ctx context.Context, broker string, reg *envelope.Registry, names ...string) ([]envelope.Event, error) {
	conn, err := kafka.DialContext(ctx, "tcp", broker)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", broker, err)
	}
	defer conn.Close()
	parts, err := conn.ReadPartitions(names...)
	if err != nil {
		return nil, fmt.Errorf("read partitions: %w", err)
	}
	// Every partition at once: a 10,000-node run leaves over 100,000
	// records, and the partitions' readers mostly wait on the broker.
	got := make([][]envelope.Event, len(parts))
	errs := make([]error, len(parts))
	var wg sync.WaitGroup
	for i, p := range parts {
		wg.Go(func() { got[i], errs[i] = readPartition(ctx, broker, reg, p.Topic, p.ID) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var out []envelope.Event
	for _, evs := range got {
		out = append(out, evs...)
	}
	slices.SortStableFunc(out, func(a, b envelope.Event) int { return a.Time.Compare(b.Time) })
	return out, nil
}

// readPartition reads a partition from its first record to its high
// watermark as it is now, on one connection to its leader. Every fetch asks
// for records that exist, so the broker answers it at once; the deadline
// only bounds a broker that does not. (A kafka-go Reader fetched ahead past
// the end and held its Close for its MaxWait; with a MaxWait short enough
// not to, 20 ms, a fetch of a large partition on a loaded machine could not
// begin to answer in time, again at every retry: "context deadline
// exceeded" after 10,000 ClusterChanged of an 8-pool cluster.)
func readPartition(ctx context.Context, broker string, reg *envelope.Registry, topic string, partition int) ([]envelope.Event, error) {
	conn, err := kafka.DialLeader(ctx, "tcp", broker, topic, partition)
	if err != nil {
		return nil, fmt.Errorf("dial %s/%d: %w", topic, partition, err)
	}
	defer conn.Close()
	first, last, err := conn.ReadOffsets()
	if err != nil {
		return nil, fmt.Errorf("offsets of %s/%d: %w", topic, partition, err)
	}
	if last <= first {
		return nil, nil
	}
	if _, err := conn.Seek(first, kafka.SeekAbsolute); err != nil {
		return nil, fmt.Errorf("seek %s/%d: %w", topic, partition, err)
	}
	var out []envelope.Event
	for next, empty := first, 0; next < last; {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if empty == 3 {
			return nil, fmt.Errorf("read %s/%d: no record at %d, below the high watermark %d", topic, partition, next, last)
		}
		from := next
		if err := conn.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
			return nil, err
		}
		// Small fetches: each is answered and decoded before the next.
		batch := conn.ReadBatchWith(kafka.ReadBatchConfig{MinBytes: 1, MaxBytes: 1 << 20})
		for next < last {
			m, err := batch.ReadMessage()
			if err != nil {
				break // the fetch's end, or its error (Close says which)
			}
			next = m.Offset + 1
			ev, err := reg.Decode(m)
			if err == nil {
				out = append(out, ev)
			} else if !errors.Is(err, envelope.ErrUnknownType) {
				_ = batch.Close()
				return nil, fmt.Errorf("decode %s/%d@%d: %w", topic, partition, m.Offset, err)
			}
		}
		if err := batch.Close(); err != nil {
			return nil, fmt.Errorf("read %s/%d at %d: %w", topic, partition, next, err)
		}
		if next == from {
			empty++
		} else {
			empty = 0
		}
	}
	return out, nil
}

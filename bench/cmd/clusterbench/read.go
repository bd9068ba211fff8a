package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/envelope"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

func clone(c *loomv1.Cluster) *loomv1.Cluster { return proto.Clone(c).(*loomv1.Cluster) }

var registry = envelope.NewRegistry(
	&eventsv1.ClusterChanged{}, &eventsv1.ClusterDeleted{}, &eventsv1.ClusterOperationFailed{},
	&eventsv1.NodeChanged{}, &eventsv1.NodeRemoved{}, &eventsv1.AgentRegistered{}, &eventsv1.Heartbeat{},
)

// readTopics reads every record of the topics, up to their current ends, in
// time order. Records of other types are skipped.
func readTopics(ctx context.Context, broker string, names ...string) ([]envelope.Event, error) {
	conn, err := kafka.DialContext(ctx, "tcp", broker)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", broker, err)
	}
	defer conn.Close()
	parts, err := conn.ReadPartitions(names...)
	if err != nil {
		return nil, fmt.Errorf("read partitions: %w", err)
	}
	var out []envelope.Event
	for _, p := range parts {
		evs, err := readPartition(ctx, broker, p.Topic, p.ID)
		if err != nil {
			return nil, err
		}
		out = append(out, evs...)
	}
	slices.SortStableFunc(out, func(a, b envelope.Event) int { return a.Time.Compare(b.Time) })
	return out, nil
}

func readPartition(ctx context.Context, broker, topic string, partition int) ([]envelope.Event, error) {
	lc, err := kafka.DialLeader(ctx, "tcp", broker, topic, partition)
	if err != nil {
		return nil, fmt.Errorf("dial %s/%d: %w", topic, partition, err)
	}
	first, last, err := lc.ReadOffsets()
	lc.Close()
	if err != nil {
		return nil, fmt.Errorf("offsets of %s/%d: %w", topic, partition, err)
	}
	if last <= first {
		return nil, nil
	}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{broker}, Topic: topic, Partition: partition, MaxBytes: 16 << 20,
		// kafka-go's 10 s default would hold each fetch that finds less than a batch.
		MaxWait: 20 * time.Millisecond})
	defer r.Close()
	if err := r.SetOffset(first); err != nil {
		return nil, err
	}
	var out []envelope.Event
	for {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		m, err := r.ReadMessage(rctx)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("read %s/%d: %w", topic, partition, err)
		}
		ev, err := registry.Decode(m)
		if err == nil {
			out = append(out, ev)
		} else if !errors.Is(err, envelope.ErrUnknownType) {
			return nil, fmt.Errorf("decode %s/%d@%d: %w", topic, partition, m.Offset, err)
		}
		if m.Offset >= last-1 {
			return out, nil
		}
	}
}

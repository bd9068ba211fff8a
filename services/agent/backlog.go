package agent

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/topics"
)

// backlog is where the agent's node's step commands stood when it started:
// the partition they go to and its high-water mark (the offset the next
// command will get). Every command before it is the backlog the agent works
// through before it starts any process (app.Options.HoldStarts).
type backlog struct {
	client    *kafka.Client
	group     string
	partition int
	end       int64
}

// backlogPoll is how often the agent asks how far its group has committed
// while it works through its backlog.
const backlogPoll = 50 * time.Millisecond

// newBacklog reads the high-water mark of the node's partition of the step
// commands, before the agent consumes.
func newBacklog(ctx context.Context, brokers []string, sec *bus.Security, group, node string) (*backlog, error) {
	b := &backlog{
		client:    &kafka.Client{Addr: kafka.TCP(brokers...), Transport: sec.Transport()},
		group:     group,
		partition: bus.PartitionOf(node, topics.Partitions(topics.StepCommands)),
	}
	resp, err := b.client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{
		topics.StepCommands: {kafka.LastOffsetOf(b.partition)}}})
	if err != nil {
		return nil, fmt.Errorf("step commands' high-water mark: %w", err)
	}
	for _, po := range resp.Topics[topics.StepCommands] {
		if po.Partition != b.partition {
			continue
		}
		if po.Error != nil {
			return nil, fmt.Errorf("step commands' high-water mark: %w", po.Error)
		}
		b.end = po.LastOffset
		return b, nil
	}
	return nil, fmt.Errorf("step commands' high-water mark: partition %d did not answer", b.partition)
}

// close lets go of the connections to the brokers.
func (b *backlog) close() {
	if t, ok := b.client.Transport.(*kafka.Transport); ok {
		t.CloseIdleConnections()
	}
}

// committed returns the group's committed offset of the partition (-1:
// none yet).
func (b *backlog) committed(ctx context.Context) (int64, error) {
	resp, err := b.client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: b.group,
		Topics: map[string][]int{topics.StepCommands: {b.partition}}})
	if err != nil {
		return 0, err
	}
	if resp.Error != nil {
		return 0, resp.Error
	}
	for _, p := range resp.Topics[topics.StepCommands] {
		if p.Partition == b.partition {
			if p.Error != nil {
				return 0, p.Error
			}
			return p.CommittedOffset, nil
		}
	}
	return -1, nil
}

// await returns once the group has committed every command of the backlog
// (the consumer commits a command only once it has handled it, or passed
// over another node's), or when ctx ends. A broker that cannot say for
// giveUp does not hold the node's starts for ever: it returns, logged.
func (b *backlog) await(ctx context.Context, giveUp time.Duration, log *slog.Logger) {
	if b.end <= 0 {
		return
	}
	t := time.NewTicker(backlogPoll)
	defer t.Stop()
	var failingSince time.Time
	for {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		off, err := b.committed(qctx)
		cancel()
		switch {
		case err == nil && off >= b.end:
			log.Info("step command backlog worked through; starting steps", "partition", b.partition, "offset", b.end)
			return
		case err == nil:
			failingSince = time.Time{}
		case failingSince.IsZero():
			failingSince = time.Now()
		case time.Since(failingSince) > giveUp:
			log.Warn("cannot tell whether the step command backlog was worked through; starting steps",
				"partition", b.partition, "offset", b.end, "err", err)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

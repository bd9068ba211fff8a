package main

import (
	"context"

	"github.com/loom-ml/loom/bench/internal/busread"
	"github.com/loom-ml/loom/libs/envelope"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
)

// registry decodes what the benchmark times: health's verdicts and the
// scheduler's job changes (read, not verified: the benchmark acts on none).
var registry = envelope.NewRegistry(&eventsv1.NodeHealthChanged{}, &eventsv1.JobChanged{})

// readTopics reads every record of the topics, up to their current ends, in
// time order. Records of other types are skipped.
func readTopics(ctx context.Context, broker string, names ...string) ([]envelope.Event, error) {
	return busread.Topics(ctx, broker, registry, names...)
}

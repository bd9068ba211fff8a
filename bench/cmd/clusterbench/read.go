package main

import (
	"context"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/bench/internal/busread"
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
	return busread.Topics(ctx, broker, registry, names...)
}

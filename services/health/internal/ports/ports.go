// Package ports is the health service's edge: the topics its consumer reads.
// Its gRPC server carries only the standard health service that
// libs/service registers.
package ports

import "github.com/loom-ml/loom/libs/topics"

// Topics are what the health service consumes, in one group, one event at a
// time: agents' registrations and heartbeats, and the provisioner's node
// membership.
var Topics = []string{topics.NodeTelemetry, topics.NodeEvents}

// Package ports is the health service's edge: the topics its consumer reads
// and its internal gRPC API, loom.v1.HealthService's reads (the gateway
// serves the writes as commands on loom.health.commands.v1).
package ports

import "github.com/loom-ml/loom/libs/topics"

// Topics are what the health service consumes, in one group, one event at a
// time: agents' registrations, heartbeats, telemetry, Xids and check
// results; the provisioner's node membership and repairs; the scheduler's
// NodeDrained (job events); and the operators' commands.
var Topics = []string{topics.NodeTelemetry, topics.NodeEvents, topics.JobEvents, topics.HealthCommands}

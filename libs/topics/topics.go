// Package topics is the one declarative list of Loom's Kafka topics, and the
// one table of which topic carries each event type (For). Every topic has
// one writing service, but for the cluster and job commands, which the
// training service writes too for its jobs; the comments name them and the
// record key.
package topics

// Topic names. Each has a "<name>.dlq" companion for records a consumer gave up on.
const (
	ClusterCommands    = "loom.cluster.commands.v1"     // gateway (training: its jobs' clusters) → provisioner; key cluster name
	ClusterEvents      = "loom.cluster.events.v1"       // provisioner; key cluster name
	NodeEvents         = "loom.node.events.v1"          // provisioner; key node name
	NodeTelemetry      = "loom.node.telemetry.v1"       // agent; key node name
	JobCommands        = "loom.job.commands.v1"         // gateway (training: its jobs) → scheduler; key cluster name
	JobEvents          = "loom.job.events.v1"           // scheduler; key cluster name
	StepCommands       = "loom.step.commands.v1"        // scheduler → agent; key node name
	StepEvents         = "loom.step.events.v1"          // agent → scheduler; key job name
	HealthEvents       = "loom.health.events.v1"        // health; key node name
	RemediationCommand = "loom.remediation.commands.v1" // health → provisioner; key node name
	NodeCommands       = "loom.node.commands.v1"        // health → agent; key node name
	HealthCommands     = "loom.health.commands.v1"      // gateway → health; key cluster name
	ModelCommands      = "loom.model.commands.v1"       // gateway, training, registry → registry; key model name
	ModelEvents        = "loom.model.events.v1"         // registry; key model name
	Audit              = "loom.audit.v1"                // gateway; key project
	TrainingCommands   = "loom.training.commands.v1"    // gateway → training; key project
	TrainingEvents     = "loom.training.events.v1"      // training; key project
	// Ingress is written by other systems (any Kafka client), never by a Loom
	// service, and read by the bridge: CloudEvents in binary mode with JSON
	// data and a credential (docs/integration.md). Its "<topic>.dlq" holds
	// the messages the bridge refused, with the reason. Key: anything.
	Ingress = "loom.ingress.v1"
	// Public carries Loom's public events (loom.public.v1, JSON CloudEvents)
	// for other systems to read; bridge; key project.
	Public = "loom.public.v1"
)

// DLQSuffix is appended to a topic's name to get its dead-letter topic.
const DLQSuffix = ".dlq"

// Spec declares a topic: its name, partition count and topic configs.
type Spec struct {
	Name       string
	Partitions int
	Configs    map[string]string
}

// retention keeps a week of records; consumers' inboxes dedupe within that window.
var retention = map[string]string{"retention.ms": "604800000"}

// DefaultPartitions is a topic's partition count unless partitionsOf says
// otherwise.
const DefaultPartitions = 4

// partitionsOf holds the topics with more partitions than the default.
// Step commands are keyed by node and each agent reads only the partition
// of its own node (bus.ConsumerConfig.PartitionKey): more partitions, fewer
// other nodes' commands an agent fetches only to pass over.
var partitionsOf = map[string]int{StepCommands: 32, NodeCommands: 32}

// Partitions is the partition count a topic is created with.
func Partitions(topic string) int {
	if n, ok := partitionsOf[topic]; ok {
		return n
	}
	return DefaultPartitions
}

// All returns every Loom topic with its dead-letter topic, in a stable order.
func All() []Spec {
	names := []string{ClusterCommands, ClusterEvents, NodeEvents, NodeTelemetry, JobCommands,
		JobEvents, StepCommands, StepEvents, HealthEvents, RemediationCommand, NodeCommands, HealthCommands, ModelCommands, ModelEvents, Audit,
		TrainingCommands, TrainingEvents, Ingress, Public}
	var out []Spec
	for _, n := range names {
		out = append(out, Spec{Name: n, Partitions: Partitions(n), Configs: retention})
		out = append(out, Spec{Name: n + DLQSuffix, Partitions: 1, Configs: retention})
	}
	return out
}

// Declared returns the partition count topic is created with and true
// when it is one of Loom's topics (All, their dead-letter topics among
// them); 0 and false otherwise.
func Declared(topic string) (int, bool) {
	for _, s := range All() {
		if s.Name == topic {
			return s.Partitions, true
		}
	}
	return 0, false
}

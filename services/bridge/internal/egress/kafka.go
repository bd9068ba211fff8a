package egress

import (
	"context"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/services/bridge/internal/cloudevent"
)

// kafkaBatchTimeout is how long the writer waits for a partition's batch to
// fill. Egress hands the writer all of a consumer batch's events in one
// call and waits for them, so nothing would join a batch later: waiting
// only adds latency (kafka-go's default is a second per lone event).
const kafkaBatchTimeout = time.Millisecond

// kafkaBatchSize lets one call's events to a partition go in one request
// (kafka-go's default of 100 would split a consumer batch of MaxBatch).
const kafkaBatchSize = MaxBatch

// KafkaSink publishes public events to one Kafka topic in binary mode: the
// CloudEvents attributes as "ce_" headers, "content-type", the JSON data as
// the value, the project (loomproject) as the key, so that a project's
// events stay in order on one partition. It is safe for concurrent use.
type KafkaSink struct {
	topic string
	w     *kafka.Writer
}

// NewKafkaSink returns a sink writing to topic on brokers over sec's SASL
// and TLS (nil: plaintext), acknowledged by all in-sync replicas and
// partitioned by Murmur2 as Kafka's Java client does, so that a project's
// events land where any client expects. The topic is never created by it.
func NewKafkaSink(brokers []string, sec *bus.Security, topic string) *KafkaSink {
	t := sec.Transport()
	t.MetadataTTL = time.Second
	return &KafkaSink{topic: topic, w: &kafka.Writer{
		Addr:                   kafka.TCP(brokers...),
		Balancer:               kafka.Murmur2Balancer{},
		RequiredAcks:           kafka.RequireAll,
		BatchTimeout:           kafkaBatchTimeout,
		BatchSize:              kafkaBatchSize,
		AllowAutoTopicCreation: false,
		Transport:              t,
	}}
}

// Name is "kafka:{topic}".
func (s *KafkaSink) Name() string { return "kafka:" + s.topic }

// Publish writes evs and returns once the brokers acknowledged every one,
// or with an error (then some may be written: the caller publishes them
// again, and readers dedupe on the CloudEvent id).
func (s *KafkaSink) Publish(ctx context.Context, evs ...cloudevent.Event) error {
	if len(evs) == 0 {
		return nil
	}
	msgs := make([]kafka.Message, len(evs))
	for i, ev := range evs {
		msgs[i] = kafka.Message{Topic: s.topic, Key: []byte(ev.Extensions[cloudevent.ExtProject]),
			Headers: ev.KafkaHeaders(), Value: ev.Data}
	}
	if err := s.w.WriteMessages(ctx, msgs...); err != nil {
		return fmt.Errorf("%s: %w", s.Name(), err)
	}
	return nil
}

// Close flushes and closes the writer.
func (s *KafkaSink) Close() error { return s.w.Close() }

package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
)

// TailConfig configures Tail. Zero values take the documented defaults.
type TailConfig struct {
	Brokers []string
	Topic   string
	// Filter, when set, is asked about each record before it is decoded, as
	// ConsumerConfig.Filter; a record it refuses is passed over.
	Filter func(Record) bool
	// Registry decodes payloads (default envelope.Default); records that do
	// not decode are logged at debug and passed over.
	Registry *envelope.Registry
	// Logger gets what goes wrong (default slog.Default()).
	Logger *slog.Logger
	// Ready, when set, is called once the starting offsets are fixed: every
	// record written to the topic after that reaches handle.
	Ready func()
	// Verifier, when set, passes over (logged at warn) every record not
	// signed as Policy requires (see ConsumerConfig.Verifier).
	Verifier *envelope.Verifier
	// Policy is ConsumerConfig.Policy.
	Policy envelope.Policy
	// Security secures the connections (nil: plaintext).
	Security *Security
}

// Tail hands handle the records written to every partition of a topic from
// now on, in order within a partition, until ctx ends (it then returns nil).
// It uses no consumer group: nothing is committed, nothing is left behind in
// the broker when the process goes, and a restart starts again at the end.
// It is for what only matters while someone in this process looks — the
// gateway's feed of job changes to its watchers — not for work that must
// not be lost (Consumer is). handle is called from one goroutine per
// partition and should not block for long. An error comes back when the
// topic cannot be read at the start (it does not exist, the broker is down).
func Tail(ctx context.Context, cfg TailConfig, handle func(context.Context, envelope.Event)) error {
	var v errs.Validator
	v.Check(len(cfg.Brokers) > 0, "brokers", "at least one broker address is required")
	v.Check(cfg.Topic != "", "topic", "is required")
	v.Check(handle != nil, "handle", "is required")
	if err := v.Err(); err != nil {
		return fmt.Errorf("tail: %w", err)
	}
	if cfg.Registry == nil {
		cfg.Registry = envelope.Default
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	log := cfg.Logger.With("tail", cfg.Topic)
	starts, err := lastOffsets(ctx, cfg.Brokers, cfg.Topic, cfg.Security)
	if err != nil {
		return fmt.Errorf("tail %s: %w", cfg.Topic, err)
	}
	if cfg.Ready != nil {
		cfg.Ready()
	}
	var wg sync.WaitGroup
	for p, off := range starts {
		r := kafka.NewReader(kafka.ReaderConfig{
			Brokers: cfg.Brokers, Topic: cfg.Topic, Partition: p, Dialer: cfg.Security.dialer(),
			MinBytes: 1, MaxBytes: FetchMaxBytes, MaxWait: fetchMaxWait,
			ReadBackoffMin: 50 * time.Millisecond, ReadBackoffMax: time.Second,
			ErrorLogger: kafkaDebug(log),
		})
		if err := r.SetOffset(off); err != nil {
			_ = r.Close()
			wg.Wait()
			return fmt.Errorf("tail %s partition %d: %w", cfg.Topic, p, err)
		}
		wg.Go(func() {
			defer r.Close()
			for {
				m, err := r.FetchMessage(ctx)
				if err != nil {
					if ctx.Err() == nil {
						log.Warn("tail stopped reading a partition", "partition", p, "err", err)
					}
					return
				}
				if !passes(cfg.Filter, m) {
					continue
				}
				var ev envelope.Event
				if cfg.Verifier != nil {
					ev, err = cfg.Registry.DecodeVerified(m, cfg.Verifier, cfg.Policy)
				} else {
					ev, err = cfg.Registry.Decode(m)
				}
				if errors.Is(err, envelope.ErrRejected) {
					log.Warn("tail passes over a refused record", "partition", p, "offset", m.Offset, "reason", envelope.ReasonOf(err), "err", err)
					continue
				}
				if err != nil {
					log.Debug("tail passes over a record that does not decode", "partition", p, "offset", m.Offset, "err", err)
					continue
				}
				handle(WithTraceParent(ctx, ev.TraceParent), ev)
			}
		})
	}
	wg.Wait()
	return nil
}

// lastOffsets returns the next offset of each of topic's partitions.
func lastOffsets(ctx context.Context, brokers []string, topic string, sec *Security) (map[int]int64, error) {
	transport := sec.transport(&kafka.Transport{})
	defer transport.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: transport}
	md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	var reqs []kafka.OffsetRequest
	for _, t := range md.Topics {
		if t.Name != topic {
			continue
		}
		if t.Error != nil {
			return nil, fmt.Errorf("metadata: %w", t.Error)
		}
		for _, p := range t.Partitions {
			reqs = append(reqs, kafka.LastOffsetOf(p.ID))
		}
	}
	if len(reqs) == 0 {
		return nil, errors.New("the topic has no partitions")
	}
	sort.Slice(reqs, func(i, j int) bool { return reqs[i].Partition < reqs[j].Partition })
	resp, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		return nil, fmt.Errorf("list offsets: %w", err)
	}
	out := map[int]int64{}
	for _, po := range resp.Topics[topic] {
		if po.Error != nil {
			return nil, fmt.Errorf("list offsets of partition %d: %w", po.Partition, po.Error)
		}
		out[po.Partition] = po.LastOffset
	}
	if len(out) != len(reqs) {
		return nil, fmt.Errorf("list offsets: %d of %d partitions answered", len(out), len(reqs))
	}
	return out, nil
}

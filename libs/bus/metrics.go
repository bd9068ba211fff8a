package bus

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
)

// Metrics are the consumer-side metrics of one service:
// loom_consumer_records_total{group,topic,partition},
// loom_consumer_handle_seconds{group,topic},
// loom_dead_letters_total{topic} and, for every group watched (WatchLag),
// loom_consumer_lag_records and loom_consumer_lag_seconds
// {group,topic,partition}. Every label comes from a bounded set: the
// service's groups and topics, and the topics' partition numbers. The
// service label is added by the registerer (telemetry.ServiceRegisterer).
type Metrics struct {
	records     *prometheus.CounterVec
	handle      *prometheus.HistogramVec
	deadLetters *prometheus.CounterVec
	lag         *lagCollector
}

// latencyBuckets are telemetry.LatencyBuckets (bus does not import
// telemetry, which sets up exporters).
var latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// NewMetrics registers the consumer metrics on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loom_consumer_records_total",
			Help: "Records a consumer group finished with (handled, skipped, filtered out or dead-lettered), by topic and partition.",
		}, []string{"group", "topic", "partition"}),
		handle: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "loom_consumer_handle_seconds",
			Help:    "Time to take one record to its end (decode, handler with its retries, dead-letter), by group and topic; a batch's time is shared among its records.",
			Buckets: latencyBuckets,
		}, []string{"group", "topic"}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loom_dead_letters_total",
			Help: "Records written to <topic>.dlq, by the topic they were consumed from.",
		}, []string{"topic"}),
		lag: &lagCollector{
			records: prometheus.NewDesc("loom_consumer_lag_records",
				"Records of a partition the group has not committed yet: high watermark minus committed offset (minus the log start when the group never committed).",
				[]string{"group", "topic", "partition"}, nil),
			seconds: prometheus.NewDesc("loom_consumer_lag_seconds",
				"Age of the oldest record the group has not committed (now minus its timestamp); 0 when the lag in records is 0.",
				[]string{"group", "topic", "partition"}, nil),
			groups: map[string]*lagWatch{},
		},
	}
	for _, c := range []prometheus.Collector{m.records, m.handle, m.deadLetters, m.lag} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// handled counts one record finished with and the time it took.
func (m *Metrics) handled(group string, msg kafka.Message, d time.Duration) {
	if m == nil {
		return
	}
	m.records.WithLabelValues(group, msg.Topic, strconv.Itoa(msg.Partition)).Inc()
	m.handle.WithLabelValues(group, msg.Topic).Observe(d.Seconds())
}

// deadLettered counts one record written to the DLQ of topic.
func (m *Metrics) deadLettered(topic string) {
	if m != nil {
		m.deadLetters.WithLabelValues(topic).Inc()
	}
}

// Lag is measured on each scrape by asking the broker, in three requests
// per group (metadata, committed offsets, log end offsets), plus one fetch
// per lagging partition, at most lagMaxFetches, for the timestamp of its
// oldest uncommitted record. A scrape waits at most lagTimeout for a group;
// a group that does not answer in time keeps no series on that scrape.
const (
	lagTimeout    = 3 * time.Second
	lagMaxFetches = 64
	// lagFetchBytes bounds the fetch for a timestamp: the broker returns at
	// least the first record even when it is larger.
	lagFetchBytes = 64 << 10
)

// lagCollector reports the lag of the groups watched, measured on scrape.
type lagCollector struct {
	records, seconds *prometheus.Desc

	mu     sync.Mutex
	groups map[string]*lagWatch
}

// lagWatch is one group's lag measurement.
type lagWatch struct {
	group        string
	topics       []string
	partitionKey string
	client       *kafka.Client
	transport    *kafka.Transport
	log          *slog.Logger
	// refs counts the WatchLag calls not yet undone: several consumers of
	// one group in a process share one watch.
	refs int
}

// WatchLag makes every scrape report the lag of cfg's group on cfg's topics
// (only the partition of cfg.PartitionKey when set) until the returned
// function is called. The lag is measured against the broker, not the
// consumer, so a consumer that stalled or stopped shows its lag growing.
func (m *Metrics) WatchLag(cfg ConsumerConfig) (unwatch func()) {
	if m == nil || cfg.GroupID == "" || len(cfg.Topics) == 0 || len(cfg.Brokers) == 0 {
		return func() {}
	}
	l := m.lag
	l.mu.Lock()
	defer l.mu.Unlock()
	w, ok := l.groups[cfg.GroupID]
	if !ok {
		transport := cfg.Security.transport(&kafka.Transport{MetadataTTL: time.Second})
		log := cfg.Logger
		if log == nil {
			log = slog.Default()
		}
		w = &lagWatch{
			group: cfg.GroupID, topics: slices.Clone(cfg.Topics), partitionKey: cfg.PartitionKey,
			client:    &kafka.Client{Addr: kafka.TCP(cfg.Brokers...), Transport: transport, Timeout: lagTimeout},
			transport: transport, log: log,
		}
		l.groups[cfg.GroupID] = w
	}
	w.refs++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if w.refs--; w.refs == 0 {
				delete(l.groups, w.group)
				w.transport.CloseIdleConnections()
			}
		})
	}
}

// Describe sends nothing: the lag's series come and go with the groups
// watched, so the collector is unchecked.
func (l *lagCollector) Describe(chan<- *prometheus.Desc) {}

// Collect measures every watched group, concurrently.
func (l *lagCollector) Collect(ch chan<- prometheus.Metric) {
	l.mu.Lock()
	watches := make([]*lagWatch, 0, len(l.groups))
	for _, w := range l.groups {
		watches = append(watches, w)
	}
	l.mu.Unlock()
	var wg sync.WaitGroup
	for _, w := range watches {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), lagTimeout)
			defer cancel()
			lags, err := w.measure(ctx, time.Now())
			if err != nil {
				w.log.Debug("consumer lag not measured", "group", w.group, "err", err)
				return
			}
			for _, p := range lags {
				part := strconv.Itoa(p.Partition)
				ch <- prometheus.MustNewConstMetric(l.records, prometheus.GaugeValue, float64(p.Records), w.group, p.Topic, part)
				ch <- prometheus.MustNewConstMetric(l.seconds, prometheus.GaugeValue, p.Seconds, w.group, p.Topic, part)
			}
		})
	}
	wg.Wait()
}

// PartitionLag is a group's lag on one partition.
type PartitionLag struct {
	Topic     string
	Partition int
	// Records is the high watermark minus the committed offset (minus the
	// log start offset when the group never committed, or committed an
	// offset retention has since removed).
	Records int64
	// Seconds is now minus the timestamp of the oldest uncommitted record;
	// 0 when Records is 0 (or its record could not be read).
	Seconds float64
}

// measure asks the broker for the group's lag on each partition it reads.
func (w *lagWatch) measure(ctx context.Context, now time.Time) ([]PartitionLag, error) {
	md, err := w.client.Metadata(ctx, &kafka.MetadataRequest{Topics: w.topics})
	if err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	parts := map[string][]int{}
	offReq := map[string][]kafka.OffsetRequest{}
	for _, t := range md.Topics {
		if t.Error != nil || len(t.Partitions) == 0 {
			continue
		}
		var ps []int
		if w.partitionKey != "" {
			ps = []int{PartitionOf(w.partitionKey, len(t.Partitions))}
		} else {
			for _, p := range t.Partitions {
				ps = append(ps, p.ID)
			}
		}
		slices.Sort(ps)
		parts[t.Name] = ps
		for _, p := range ps {
			offReq[t.Name] = append(offReq[t.Name], kafka.FirstOffsetOf(p), kafka.LastOffsetOf(p))
		}
	}
	if len(parts) == 0 {
		return nil, nil
	}
	committed, err := w.client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: w.group, Topics: parts})
	if err != nil {
		return nil, fmt.Errorf("committed offsets: %w", err)
	}
	if committed.Error != nil {
		return nil, fmt.Errorf("committed offsets: %w", committed.Error)
	}
	ends, err := w.client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: offReq})
	if err != nil {
		return nil, fmt.Errorf("log offsets: %w", err)
	}
	type tp struct {
		topic string
		part  int
	}
	commit := map[tp]int64{}
	for topic, ps := range committed.Topics {
		for _, p := range ps {
			if p.Error == nil {
				commit[tp{topic, p.Partition}] = p.CommittedOffset
			}
		}
	}
	var out []PartitionLag
	fetches := 0
	for _, topic := range slices.Sorted(maps.Keys(parts)) {
		for _, po := range ends.Topics[topic] {
			if po.Error != nil || !slices.Contains(parts[topic], po.Partition) {
				continue
			}
			from, ok := commit[tp{topic, po.Partition}]
			if !ok || from < po.FirstOffset {
				// Never committed (a new group starts at the oldest
				// record), or committed past what retention kept.
				from = po.FirstOffset
			}
			pl := PartitionLag{Topic: topic, Partition: po.Partition, Records: max(po.LastOffset-from, 0)}
			if pl.Records > 0 && fetches < lagMaxFetches {
				fetches++
				if at, ok := w.recordTime(ctx, topic, po.Partition, from); ok {
					pl.Seconds = max(now.Sub(at).Seconds(), 0)
				}
			}
			out = append(out, pl)
		}
	}
	return out, nil
}

// recordTime returns the timestamp of the record at offset.
func (w *lagWatch) recordTime(ctx context.Context, topic string, partition int, offset int64) (time.Time, bool) {
	resp, err := w.client.Fetch(ctx, &kafka.FetchRequest{Topic: topic, Partition: partition, Offset: offset,
		MinBytes: 1, MaxBytes: lagFetchBytes, MaxWait: 100 * time.Millisecond})
	if err != nil || resp.Error != nil || resp.Records == nil {
		return time.Time{}, false
	}
	for {
		r, err := resp.Records.ReadRecord()
		if err != nil {
			return time.Time{}, false
		}
		// A batch may start before the offset asked for.
		if r.Offset >= offset {
			return r.Time, true
		}
	}
}

package bus

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/topics"
)

// PartitionOf is the partition of a topic with n partitions that the
// Producer writes records keyed key to: Murmur2 of the key, as Kafka's Java
// client places keys.
func PartitionOf(key string, n int) int {
	if n <= 1 {
		return 0
	}
	ids := make([]int, n)
	for i := range ids {
		ids[i] = i
	}
	// Consistent: an empty key is hashed too, never placed at random.
	return kafka.Murmur2Balancer{Consistent: true}.Balance(kafka.Message{Key: []byte(key)}, ids...)
}

// keyBalancer is the group balancer of a consumer with a PartitionKey: of
// each topic it assigns only the partition that records keyed key go to,
// and that to the newest member subscribed to the topic (the latest born,
// then the greatest member id), and no other partition to anyone. Every
// member of such a group must use the same key.
//
// Why the newest: such a group is one process's (a node's agent), and when
// it restarts, the member its killed predecessor left behind stays in the
// group until the broker times it out. Handed the partition, that member
// would hold the node's commands until then: the embedded broker was seen
// keeping one that died in the middle of a join for minutes, and the
// reimaged node's confirming check waited with it. The process that
// started last is the live one.
type keyBalancer struct {
	key string
	// born is when the member's consumer started (unix nanoseconds),
	// offered to the leader as the member's user data.
	born int64
}

func (b keyBalancer) ProtocolName() string { return "loom-key" }

func (b keyBalancer) UserData() ([]byte, error) {
	return binary.BigEndian.AppendUint64(nil, uint64(b.born)), nil
}

// bornOf reads a member's user data; a member that offered none (or
// something else) counts as born at 0, older than any.
func bornOf(m kafka.GroupMember) int64 {
	if len(m.UserData) != 8 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(m.UserData))
}

func (b keyBalancer) AssignGroups(members []kafka.GroupMember, partitions []kafka.Partition) kafka.GroupMemberAssignments {
	out := kafka.GroupMemberAssignments{}
	for _, m := range members {
		out[m.ID] = map[string][]int{}
	}
	count := map[string]int{}
	for _, p := range partitions {
		count[p.Topic]++
	}
	for t, n := range count {
		var newest *kafka.GroupMember
		for i := range members {
			m := &members[i]
			if !slices.Contains(m.Topics, t) {
				continue
			}
			if newest == nil || bornOf(*m) > bornOf(*newest) || (bornOf(*m) == bornOf(*newest) && m.ID > newest.ID) {
				newest = m
			}
		}
		if newest != nil {
			out[newest.ID][t] = []int{PartitionOf(b.key, n)}
		}
	}
	return out
}

// partitionRecheck bounds how often a verifying consumer reads a topic's
// partition counts from the broker again because a node's record is not
// where its key goes: a node flooding misplaced records costs one re-read a
// second, not one a record.
const partitionRecheck = time.Second

// partitionCounts holds the partition count of each topic a verifying
// consumer reads, from the broker's metadata, so that a node's record can be
// held to the partition its key goes to (PartitionOf): the producer picks a
// record's partition, and the signature does not cover it.
type partitionCounts struct {
	brokers []string
	sec     *Security
	topics  []string
	log     *slog.Logger
	// recheck is how long after a re-read the next may come
	// (partitionRecheck; tests shorten or lengthen it).
	recheck time.Duration
	// ctx is Run's, cancelled by close: the re-reads after a failed one
	// end with it.
	ctx    context.Context
	cancel context.CancelFunc
	// retries is the goroutine that re-reads after a failed read.
	retries sync.WaitGroup

	mu sync.Mutex
	// seen is each topic's counts since the consumer started, oldest
	// first: partitions are only ever added, and a record written before
	// they were is still on its key's partition of the count then.
	seen map[string][]int
	// skipped is, per topic, the counts it may have had that no read saw,
	// each set with the ends read just before the read that found the
	// topic past them: between two reads the topic grew by more than one
	// partition count (4 to 6: it may have had 5), or it was created with
	// fewer partitions (topics.Declared) than the first read found. A
	// record below those ends was written before that read, perhaps under
	// one of those counts; one at or past them was not (partitions are
	// only ever added), so a skipped count is accepted only below them.
	skipped map[string][]skippedCounts
	// ends is each partition's end offset (the next record's) as read just
	// before the counts last were: a record below it was written before
	// those counts were read, by a producer that knew no count they lack,
	// so a misplaced one is refused at once; one at or past it may have
	// been placed under a count added since, and waits for a re-read.
	ends map[topicPartition]int64
	// read is when the counts were last read (zero: never).
	read time.Time
	// failing says the last read failed: until one succeeds (in the
	// background, every recheck), records are judged at once on what
	// was read before, never waiting for a re-read.
	failing bool
	// unknown notes the topics whose count could not be read, each logged
	// once.
	unknown map[string]bool
}

// skippedCounts are partition counts a topic may have had that no read
// saw, accepted only for records below ends (by partition; a partition
// missing had none).
type skippedCounts struct {
	counts []int
	ends   map[int]int64
}

// newPartitionCounts reads the partition counts of topics, and their
// partitions' end offsets, from the broker. A failure leaves them unknown
// until a re-read, every recheck in the background, succeeds, or ctx ends
// or close is called, which ends those re-reads and waits for them.
func newPartitionCounts(ctx context.Context, brokers []string, sec *Security, topics []string, recheck time.Duration, log *slog.Logger) *partitionCounts {
	ctx, cancel := context.WithCancel(ctx)
	p := &partitionCounts{brokers: brokers, sec: sec, topics: topics, recheck: recheck, log: log, ctx: ctx, cancel: cancel,
		seen: map[string][]int{}, skipped: map[string][]skippedCounts{}, ends: map[topicPartition]int64{}, unknown: map[string]bool{}}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.read = time.Now()
	p.reload(ctx)
	return p
}

// close ends the background re-reads and waits for them: Run may return
// (an error that ends it) while its context is still live.
func (p *partitionCounts) close() {
	p.cancel()
	p.retries.Wait()
}

// client is a client on a transport of its own, whose metadata is read
// from the broker when it starts (a transport answers metadata requests
// from its cache); done closes its connections.
func (p *partitionCounts) client() (client *kafka.Client, done func()) {
	transport := p.sec.transport(&kafka.Transport{MetadataTopics: p.topics})
	return &kafka.Client{Addr: kafka.TCP(p.brokers...), Transport: transport}, transport.CloseIdleConnections
}

// readout is what one read of the broker found.
type readout struct {
	counts map[string]int
	ends   map[topicPartition]int64
}

// fetch reads the end offsets of the topics' partitions, then the topics'
// partition counts, directly from the broker (never a metadata cache). The
// ends are read first: a record below them was written before the counts
// were read. It takes no lock.
func (p *partitionCounts) fetch(ctx context.Context) (readout, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ends, err := p.endOffsets(ctx)
	if err != nil {
		return readout{}, fmt.Errorf("end offsets: %w", err)
	}
	client, done := p.client()
	defer done()
	md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: p.topics})
	if err != nil {
		return readout{}, fmt.Errorf("partition counts: %w", err)
	}
	counts := map[string]int{}
	for _, t := range md.Topics {
		if n := len(t.Partitions); t.Error == nil && n > 0 {
			counts[t.Name] = n
		}
	}
	return readout{counts: counts, ends: ends}, nil
}

// apply notes the counts of r not seen yet, and its ends. Called with mu
// held.
func (p *partitionCounts) apply(r readout) {
	for _, t := range slices.Sorted(maps.Keys(r.counts)) {
		n := r.counts[t]
		if slices.Contains(p.seen[t], n) {
			continue
		}
		// The counts between the last one read (or, at the first read,
		// the one the topic is created with) and n.
		from := 0
		if len(p.seen[t]) > 0 {
			p.log.Info("a topic's partition count changed", "topic", t, "partitions", n, "before", p.seen[t])
			from = slices.Max(p.seen[t]) + 1
		} else if d, ok := topics.Declared(t); ok {
			from = d
		}
		if from > 0 && from < n {
			sk := skippedCounts{ends: map[int]int64{}}
			for c := from; c < n; c++ {
				sk.counts = append(sk.counts, c)
			}
			for tp, end := range r.ends {
				if tp.topic == t {
					sk.ends[tp.partition] = end
				}
			}
			p.skipped[t] = append(p.skipped[t], sk)
		}
		p.seen[t] = append(p.seen[t], n)
	}
	for tp, end := range r.ends {
		p.ends[tp] = max(p.ends[tp], end)
	}
}

// reload reads the counts and ends and notes them; on a failure it keeps
// what was read before (what was below the ends then still is), logs it
// (once until a read succeeds), and re-reads in the background every
// recheck until one succeeds. Called with mu held.
func (p *partitionCounts) reload(ctx context.Context) {
	r, err := p.fetch(ctx)
	if err == nil {
		p.apply(r)
		return
	}
	if p.failing {
		return
	}
	p.failing = true
	p.log.Warn("could not read the topics' partition counts; node records are judged on those read before, without waiting, until a re-read succeeds",
		"topics", p.topics, "err", err, "retry_every", p.recheck)
	p.retries.Add(1)
	go p.retry()
}

// retry re-reads every recheck, without holding mu while it reads, until a
// read succeeds or Run's context is done.
func (p *partitionCounts) retry() {
	defer p.retries.Done()
	t := time.NewTicker(p.recheck)
	defer t.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-t.C:
		}
		r, err := p.fetch(p.ctx)
		if err != nil {
			continue
		}
		p.mu.Lock()
		p.apply(r)
		p.read = time.Now()
		p.failing = false
		p.mu.Unlock()
		p.log.Info("read the topics' partition counts again", "topics", p.topics)
		return
	}
}

// endOffsets returns the end offset of each partition of the topics.
func (p *partitionCounts) endOffsets(ctx context.Context) (map[topicPartition]int64, error) {
	client, done := p.client()
	defer done()
	md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: p.topics})
	if err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	req := map[string][]kafka.OffsetRequest{}
	for _, t := range md.Topics {
		if t.Error != nil {
			continue
		}
		for _, part := range t.Partitions {
			req[t.Name] = append(req[t.Name], kafka.LastOffsetOf(part.ID))
		}
	}
	if len(req) == 0 {
		return nil, nil
	}
	resp, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: req})
	if err != nil {
		return nil, fmt.Errorf("list offsets: %w", err)
	}
	out := map[topicPartition]int64{}
	for topic, ps := range resp.Topics {
		for _, po := range ps {
			if po.Error != nil {
				return nil, fmt.Errorf("list offsets of %s[%d]: %w", topic, po.Partition, po.Error)
			}
			out[topicPartition{topic, po.Partition}] = po.LastOffset
		}
	}
	return out, nil
}

// check returns a *envelope.Rejection (wrong-partition) when m, a node's
// record, is not on the partition its key goes to under any partition
// count its topic has had since the consumer started, nor, when it was
// written before the read that found the topic past them, under a count
// that read skipped (skipped). A record that does
// not match but was written after the counts were last read (at or past
// the end offset its partition had then) may have been placed under a
// count added since: check waits until recheck has passed since that read
// (at most recheck), reads the counts and ends anew, and judges it then.
// One below that end is judged at once: so a topic whose partitions were
// added is followed without refusing an honest record, and a flood of
// misplaced records costs one re-read, and at most one wait of recheck,
// a recheck. After a failed read, records are judged at once on the
// counts read before, with no wait, until a re-read in the background
// succeeds. While a topic's count is unknown (never read, or smaller
// than the record's partition says it is), the partition is not checked:
// that is logged once per topic.
func (p *partitionCounts) check(ctx context.Context, m kafka.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	key := string(m.Key)
	if p.placed(m.Topic, key, m.Partition, m.Offset) {
		return nil
	}
	if end, ok := p.ends[topicPartition{m.Topic, m.Partition}]; !p.failing && (!ok || m.Offset >= end) {
		if wait := p.recheck - time.Since(p.read); !p.read.IsZero() && wait > 0 {
			// Bounded by recheck, and not cut short by the stop: a
			// record judged on counts it may postdate could be refused
			// wrongly.
			time.Sleep(wait)
		}
		p.read = time.Now()
		p.reload(ctx)
		if p.placed(m.Topic, key, m.Partition, m.Offset) {
			return nil
		}
	}
	counts := p.seen[m.Topic]
	if len(counts) == 0 || m.Partition >= slices.Max(counts) {
		if !p.unknown[m.Topic] {
			p.unknown[m.Topic] = true
			p.log.Warn("partition count of a topic unknown: its node records' partitions are not checked until it is read",
				"topic", m.Topic, "partition", m.Partition, "known", counts)
		}
		return nil
	}
	n := counts[len(counts)-1]
	return envelope.Reject(envelope.ReasonWrongPartition, "record keyed %q is on partition %d of %s; its key goes to partition %d of %d",
		truncateKey(key), m.Partition, m.Topic, PartitionOf(key, n), n)
}

// placed reports whether a record keyed key at offset of topic's
// partition is key's partition under one of topic's counts read, or under
// a count it skipped that the record may have been written under.
func (p *partitionCounts) placed(topic, key string, partition int, offset int64) bool {
	for _, n := range p.seen[topic] {
		if PartitionOf(key, n) == partition {
			return true
		}
	}
	for _, sk := range p.skipped[topic] {
		if offset >= sk.ends[partition] {
			continue
		}
		for _, n := range sk.counts {
			if PartitionOf(key, n) == partition {
				return true
			}
		}
	}
	return false
}

// truncateKey bounds what a refusal echoes of a record's key.
func truncateKey(k string) string {
	if len(k) > 200 {
		return k[:200] + "…"
	}
	return k
}

package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/noderate"
	"github.com/loom-ml/loom/libs/topics"
)

// Handler handles one event. ctx carries the event's trace context. Returning
// nil marks the record handled (its offset is committed with the next
// commit, see ConsumerConfig.CommitInterval); an error retries it (see
// ConsumerConfig), and an error wrapped by Permanent sends it to the DLQ at once.
//
// A handler may be called more than once for the same event (after a failure,
// a crash or a rebalance): handlers are idempotent, keyed by ev.ID.
type Handler func(ctx context.Context, ev envelope.Event) error

// BatchHandler handles several events at once, in order: records that were
// already fetched when the first of them came, never waiting for more (see
// Consumer.WithBatch). It succeeds for all of them or changes nothing: on an
// error each event goes to the Handler on its own, with its retries and
// dead-lettering, so that a batch handler needs no error handling per event.
// ctx carries the first event's trace context; with a tracer, each event's
// TraceParent is its own "process" span's, so that what the handler emits
// for it continues its trace.
type BatchHandler func(ctx context.Context, evs []envelope.Event) error

// permanent marks errors that retrying cannot fix.
type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

// Permanent wraps err so the consumer dead-letters the record without retrying.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanent{err}
}

// IsPermanent reports whether err was wrapped by Permanent.
func IsPermanent(err error) bool {
	var p permanent
	return errors.As(err, &p)
}

// Unavailable reports whether err says that something the handler needs
// could not be reached — a network operation that failed (a connection
// refused or reset, no answer), or a store write whose outcome is unknown —
// rather than that the record cannot be handled. Such a failure is not
// the record's: a consumer retries it until it passes (or the consumer
// stops), never dead-letters it, so that an outage of Redis (a restart,
// a failover) loses none of the records consumed meanwhile. An error may
// also say so itself, with a method Unavailable() bool (libs/store's
// ErrOutcomeUnknown does). Only the cause counts, found in the error's
// chain (wrapped with %w): errs.Unavailable alone does not, since services
// also use it for a store's deterministic refusals, which no retry
// passes; nor does a handler's own deadline (context deadline exceeded):
// work that takes longer than the handler may would otherwise hold its
// partition for good.
func Unavailable(err error) bool {
	if err == nil || IsPermanent(err) {
		return false
	}
	var u interface{ Unavailable() bool }
	if errors.As(err, &u) && u.Unavailable() {
		return true
	}
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op)
}

// ConsumerConfig configures a Consumer. Zero values take the documented defaults.
type ConsumerConfig struct {
	Brokers []string
	// GroupID is the consumer group; instances with the same id share partitions.
	GroupID string
	// Topics are read together by one group member, records handed to the
	// handler one at a time, in order within a partition.
	Topics []string
	// MaxAttempts is how many times a record is tried before it is
	// dead-lettered (default 5). Failures for which Unavailable holds (the
	// store or a peer unreachable) do not count: they are retried, with
	// backoff up to MaxBackoff, until they pass or the consumer stops.
	MaxAttempts int
	// Backoff is the first retry delay, doubled each retry up to MaxBackoff
	// (defaults 50 ms and 2 s).
	Backoff, MaxBackoff time.Duration
	// Registry decodes payloads (default envelope.Default). Records of unknown
	// types are logged and skipped (committed, not dead-lettered).
	Registry *envelope.Registry
	// Logger receives skip, retry and dead-letter reports (default slog.Default()).
	// A new group starts at the oldest record: Loom never skips history a
	// group has not seen (what only wants records from now on reads with
	// Tail, without a group).
	Logger *slog.Logger
	// Passed, when set, is told of each record the consumer commits
	// without its handler having taken it (returned nil for it): refused
	// or malformed and dead-lettered, dead-lettered after its attempts, of
	// an unknown type, or filtered out. It runs in the consumer's goroutine,
	// before the record is marked for commit. A handler that judges its own
	// progress by the records it takes (health's lag, by each partition's
	// high-water mark) needs it: a last record of a partition that never
	// reached the handler would otherwise look for ever unread.
	Passed func(topic string, partition int, offset, highWaterMark int64)
	// HandlerTimeout bounds one handler call (default 30 s). The handler's
	// context is not cancelled when Run's context ends: the record in hand
	// finishes, within this bound, and is committed.
	HandlerTimeout time.Duration
	// CommitInterval is how often the offsets of handled records are
	// committed, in the background (default DefaultCommitInterval). Only
	// offsets of records that were handled (or skipped, or dead-lettered)
	// are committed, so the committed offset never passes a record that was
	// not; a graceful stop commits what is left. A crash loses at most the
	// last interval's commits: those records come again, which idempotent
	// handlers (inbox marks) absorb. Negative: commit synchronously after
	// every record, before the next one is handled.
	CommitInterval time.Duration
	// Filter, when set, is asked about each record before it is decoded: a
	// record it refuses is committed without being decoded or handled. It
	// sees only the record's topic, key and CloudEvents type and subject
	// headers, and must be safe for concurrent use. An agent reads its
	// node's commands this way from a topic keyed by node, instead of
	// decoding every node's only to ignore them.
	Filter func(Record) bool
	// PartitionKey, when set, makes the group read only the partition of
	// each topic that records keyed PartitionKey go to (PartitionOf), not
	// every partition: a node's agent fetches its own node's partition of
	// the step commands instead of every node's. Other keys' records in
	// that partition still come (Filter passes over them). Only the
	// group's newest member reads: a restarted process takes the partition
	// from the member its killed predecessor left in the group as soon as
	// the group has rebalanced (at once with SoleMember; else once the dead
	// member's session has timed out). Every member of the group must set
	// the same key; a topic's partition count must not change while the
	// group reads it (such a group does not watch for added partitions:
	// moving to the key's new partition would leave the old one's unread
	// records behind, and a thousand agents reading metadata every few
	// seconds would load the broker for nothing).
	PartitionKey string
	// SessionTimeout is how long the group's coordinator waits for a
	// member that stopped heartbeating (a killed process, a lost host)
	// before it gives that member's partitions to the others: records on
	// them wait that long after a crash (default DefaultSessionTimeout;
	// MinSessionTimeout up to MaxSessionTimeout, else Run returns
	// InvalidArgument). Members heartbeat every 500 ms, or every third of
	// SessionTimeout when that is shorter, so that a few lost heartbeats
	// do not evict a live member. The broker must allow it (its
	// group.min.session.timeout.ms, 6 s on Apache Kafka by default, and
	// group.max.session.timeout.ms): one that does not refuses the join
	// and Run returns that error. Shorter than the default is for tests
	// and development stacks on an embedded broker (libs/embedded lowers
	// its minimum), where every crash test would otherwise wait it out.
	SessionTimeout time.Duration
	// SoleMember says that this consumer is its group's only live member
	// whenever it runs: its process holds a lock that each predecessor
	// held until it died (an agent holds its node directory's). Any member
	// the group has when Run starts is then a killed predecessor's, and Run
	// removes it first (LeaveGroup on its behalf), so that the rebalance
	// does not wait out its session (SessionTimeout, 10 s) before this
	// member reads. Never set it for a group that several live processes
	// share: each would remove the others.
	SoleMember bool
	// Verifier, when set, makes the consumer accept only signed records
	// (envelope.Registry.DecodeVerified): a record that is unsigned, badly
	// signed, signed with an expired certificate, refused by Policy, a
	// node's naming another node, or a node's keyed otherwise than its
	// agent keys it (wrong-key) or on another partition than its key's
	// (wrong-partition: Run reads the topics' partition counts from the
	// broker at its start, and again, at most once a second, when a record
	// written since does not match them — such a record waits for that
	// re-read, at most a second, so that an honest record placed under a
	// count added since is not refused, nor one written before a read
	// under a count it skipped: between the last count read and the next,
	// or, at the start, from the count a Loom topic is created with
	// (topics.Declared) to the one read; after a failed re-read, records
	// are judged at once on the counts read before until one, every
	// second in the background, succeeds; a topic whose count is unknown is
	// not checked, which is logged once) is dead-lettered with the reason in
	// loom_dlq_reason, counted on Rejected, and never handled. Services'
	// records are on whatever partition their producer chose. Handled
	// events carry the verified Signer.
	Verifier *envelope.Verifier
	// Policy says whose signatures Verifier accepts: envelope.ServicesOnly
	// for commands, envelope.AcceptNodeEvents (the zero value) for topics
	// agents write to.
	Policy envelope.Policy
	// NodeRate, when positive, holds each node to NodeRate records a
	// second, NodeBurst at once (at least 1; default 10 x NodeRate), on
	// the records it signed that this consumer reads, those the Verifier
	// refuses (not-a-service, wrong-node, wrong-key) among them (only with
	// a Verifier: the signer must be verified): past it, a node's record is
	// dropped, whatever it holds and before its partition is checked — not
	// handled, not dead-lettered, committed as a skipped record, told to
	// Passed — and counted on Rejected with reason DropNodeRate, so that
	// a compromised node costs its readers no more than reading NodeRate
	// records a second, and other nodes' records on the same partition
	// come on after its own without waiting. Drops are logged at most once
	// every 10 s, by node (noderate.DropLog), the last of a flood within
	// 20 s, or as Run stops. Services' records are not
	// limited. Each consumer keeps its own buckets, for the nodes heard
	// lately.
	//
	// A bucket runs on the records' signed times (ce_time), not on when
	// the consumer reads them: a backlog an honest node wrote at its rate
	// while the consumer was down or behind passes whole, however fast it
	// is read. So that a node cannot mint tokens with the times it signs,
	// its bucket's clock only moves forward, never past the consumer's
	// now, and never further back than NodeRateWindow: a node's rate over
	// any stretch of the consumer's time is at most NodeRate plus what
	// NodeRateWindow and NodeBurst allow once. A backlog older than
	// NodeRateWindow is read as if written at its start (past the burst,
	// dropped).
	NodeRate  float64
	NodeBurst int
	// NodeRateWindow is how far back a node's signed times count for its
	// rate (see NodeRate); DefaultNodeRateWindow when 0.
	NodeRateWindow time.Duration
	// Rejected, when set, counts refused records by topic and reason
	// (loom_bus_rejected_total on a service's /metrics): those the
	// Verifier refuses, and those a handler refuses with a reason of its
	// own (bus.Permanent(envelope.Reject(...)): the scheduler's
	// not-assigned, an agent's bad-seal, no-command-key, unsealed).
	Rejected metric.Int64Counter
	// Security secures the consumer's connections (SASL, TLS); nil:
	// plaintext. A dead-letter producer Run opens itself uses it too.
	Security *Security
	// Metrics, when set, counts and times the records the consumer
	// finishes and the records it dead-letters, and reports the group's lag
	// while Run runs (Metrics.WatchLag).
	Metrics *Metrics
	// TracerProvider, when set, gives every handler call a "process
	// <topic>" span, a child of the record's traceparent.
	TracerProvider trace.TracerProvider
}

// DefaultCommitInterval is ConsumerConfig.CommitInterval when unset. A
// synchronous commit costs about a millisecond per record, as much as the
// handling of a typical record; committing every 20 ms removes that from
// the path while keeping what a crash redelivers small.
const DefaultCommitInterval = 20 * time.Millisecond

// Bounds of ConsumerConfig.SessionTimeout. The default is above Apache
// Kafka's default group.min.session.timeout.ms (6 s) with margin for a
// member stalled by a loaded host; the minimum leaves a member three
// heartbeats at least 333 ms apart; the maximum is Kafka's default
// group.max.session.timeout.ms in its older releases (and kfake's).
const (
	DefaultSessionTimeout = 10 * time.Second
	MinSessionTimeout     = time.Second
	MaxSessionTimeout     = 5 * time.Minute
)

// Tuning of the kafka-go group member. Delivery latency does not depend on
// fetchMaxWait (the broker answers a long poll as soon as a record arrives);
// it bounds how long a stop or a rebalance waits for idle partition readers.
const (
	fetchMaxWait      = 500 * time.Millisecond
	heartbeatInterval = 500 * time.Millisecond // members notice a rebalance within this (at most a third of the session timeout)
	rebalanceTimeout  = 10 * time.Second       // a rejoin takes < heartbeat + fetchMaxWait; this only evicts stuck members
	joinGroupBackoff  = 250 * time.Millisecond
	// partitionWatchInterval is how often a member reads its topics'
	// partition counts (one metadata request a topic), and so how long
	// partitions added to a topic may go unread.
	partitionWatchInterval = 5 * time.Second
	// finishTimeout bounds a dead-letter write and a commit.
	finishTimeout = 10 * time.Second
)

// FetchMaxBytes bounds one fetch of a Loom reader (the consumers', the
// tail's, the bridge's ingress), not one record: a record larger than it
// (a topic's max.message.bytes raised above it) does not stall a
// partition, since the broker returns the first record batch of a fetch
// whole whatever the limit (fetch v3 and later, KIP-74; kafka-go asks for
// v10), and the reader hands it on like any other
// (TestRecordOverTheFetchLimitDoesNotStall). The broker's
// max.message.bytes, 1 MiB unless raised, is what bounds a record.
const FetchMaxBytes = 10 << 20

// Consumer runs a handler over a consumer group.
type Consumer struct {
	cfg ConsumerConfig
	dlq *Producer
	h   Handler
	bh  BatchHandler
	// maxBatch bounds a batch (WithBatch); 0 without one.
	maxBatch int
	log      *slog.Logger
	tracer   tracerRef
	running  atomic.Bool
	// crashed makes Run return without committing what it handled, as a
	// process that died would (tests inject crashes with it).
	crashed atomic.Bool
	// parts holds the topics' partition counts while Run runs with a
	// Verifier: a node's record must be on its key's partition.
	parts *partitionCounts
	// recheck is partitionCounts' re-read interval (partitionRecheck).
	recheck time.Duration
	// nodes holds each node to NodeRate (nil without one); drops logs
	// what it drops. Used by Run's handling goroutine only.
	nodes  *noderate.Buckets
	drops  *noderate.DropLog
	pruned time.Time
	// clocks: each node's bucket clock, the latest signed time its
	// records took a token at (NodeRate).
	clocks map[string]time.Time
}

// Defaults and bounds of a service's consumers' NodeRate and NodeBurst
// (-bus-node-rate, -bus-node-burst). What an honest agent signs on the
// topics services read: a heartbeat every 2 s and GPU telemetry every 10 s
// (its registration, an Xid, a check result now and then); and per step it
// runs, at most 2 MetricsReported a second (its -metrics-rate), a
// StepProgress every 5 s (10 a second for 5 s after a signal), a
// UsageReported every 30 s, and a few StepChanged and TasksChanged as it
// starts and ends, with its metrics file flushed at the end (up to 1 MiB:
// about 100 records). Eight steps at once come to under 20 records a
// second, bursts of under 1000: the defaults are ten times that, and far
// below what one consumer handles.
const (
	DefaultNodeRate  = 200.0
	DefaultNodeBurst = 4000
	// DefaultNodeRateWindow covers a consumer that was down or behind for
	// an hour: its nodes' backlog is read at the rate it was written.
	DefaultNodeRateWindow = time.Hour
	MaxNodeRate           = 1000000
	MaxNodeBurst          = 10000000
)

// DropNodeRate is loom_bus_rejected_total's reason for a node's record
// dropped past ConsumerConfig.NodeRate (not dead-lettered).
const DropNodeRate = "node-rate"

// errNodeRate is decode's answer for a node's record past its rate.
var errNodeRate = errors.New("past its node's rate")

// nodesPruneEvery is how often the node buckets that filled up again are
// forgotten.
const nodesPruneEvery = time.Minute

// NewConsumer returns a consumer; dlq writes dead-lettered records (nil: Run
// opens a producer of its own on cfg.Brokers).
func NewConsumer(cfg ConsumerConfig, dlq *Producer, h Handler) *Consumer {
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 5
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = 50 * time.Millisecond
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 2 * time.Second
	}
	if cfg.MaxBackoff < cfg.Backoff {
		cfg.MaxBackoff = cfg.Backoff
	}
	if cfg.Registry == nil {
		cfg.Registry = envelope.Default
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.HandlerTimeout <= 0 {
		cfg.HandlerTimeout = 30 * time.Second
	}
	if cfg.CommitInterval == 0 {
		cfg.CommitInterval = DefaultCommitInterval
	}
	if cfg.SessionTimeout == 0 {
		cfg.SessionTimeout = DefaultSessionTimeout
	}
	c := &Consumer{
		cfg: cfg,
		dlq: dlq,
		h:   h,
		log: cfg.Logger.With("group", cfg.GroupID),

		recheck: partitionRecheck,
	}
	c.tracer.set(cfg.TracerProvider)
	if cfg.NodeRate > 0 {
		if c.cfg.NodeBurst <= 0 {
			c.cfg.NodeBurst = int(math.Min(math.Ceil(10*cfg.NodeRate), math.MaxInt32))
		}
		if c.cfg.NodeRateWindow <= 0 {
			c.cfg.NodeRateWindow = DefaultNodeRateWindow
		}
		c.nodes = noderate.New(cfg.NodeRate, c.cfg.NodeBurst)
		c.clocks = map[string]time.Time{}
		c.drops = noderate.NewDropLog(c.log, "node records dropped past their rate")
	}
	return c
}

// kafkaDebug sends a kafka-go reader's error reports to log at debug.
func kafkaDebug(log *slog.Logger) kafka.Logger {
	return kafka.LoggerFunc(func(msg string, args ...any) {
		log.Debug(fmt.Sprintf(msg, args...), "source", "kafka-go")
	})
}

// balancers are the group balancers the member offers: kafka-go's defaults
// (range, round robin), or only the key's partitions with a PartitionKey.
func (c *Consumer) balancers() []kafka.GroupBalancer {
	if c.cfg.PartitionKey == "" {
		return nil
	}
	return []kafka.GroupBalancer{keyBalancer{key: c.cfg.PartitionKey, born: time.Now().UnixNano()}}
}

// Record is what a ConsumerConfig.Filter learns of a record before it is
// decoded.
type Record struct {
	Topic, Key string
	// Type and Subject are the ce_type and ce_subject headers ("" when
	// absent).
	Type, Subject string
}

// wants reports whether the handler wants m (see ConsumerConfig.Filter).
func (c *Consumer) wants(m kafka.Message) bool { return passes(c.cfg.Filter, m) }

// passes reports whether filter (nil: every record) lets m through.
func passes(filter func(Record) bool, m kafka.Message) bool {
	return filter == nil || filter(recordOf(m))
}

// recordOf is what a Filter learns of m.
func recordOf(m kafka.Message) Record {
	r := Record{Topic: m.Topic, Key: string(m.Key)}
	for _, h := range m.Headers {
		switch h.Key {
		case envelope.HeaderType:
			r.Type = string(h.Value)
		case envelope.HeaderSubject:
			r.Subject = string(h.Value)
		}
	}
	return r
}

// WithBatch makes Run hand the records that are waiting, up to max at a
// time, to bh in one call instead of to the Handler one by one. A consumer
// under load then pays for one handler call (one store write, say) per
// batch, while a lone record is still handled as soon as it comes: a batch
// is what was already fetched, never a wait for more. Records that cannot be
// decoded, and every record of a batch bh refused, take the Handler path.
// It must be called before Run; it returns c.
func (c *Consumer) WithBatch(bh BatchHandler, max int) *Consumer {
	if bh != nil && max > 1 {
		c.bh, c.maxBatch = bh, max
	}
	return c
}

// Run consumes until ctx is cancelled, then finishes the record in hand,
// commits what it handled, leaves the group and returns nil. It returns an error only when
// the consumer cannot go on (for example the group cannot be joined before ctx ends).
//
// Run first waits for all of cfg.Topics to exist (logging what is missing),
// then joins. Transient failures (broker unreachable, rebalances) are logged
// and retried without end; the errors returned are a bad config (InvalidArgument) and
// broker answers that retrying cannot change (authorization, invalid group
// or session timeout). Run may be called once per Consumer.
//
// Delivery is at least once: a record is committed only after its handler
// succeeded or it was written to "<topic>.dlq", and commits are made every
// CommitInterval in the background. A record whose handling was cut short
// by the stop (a failed attempt with retries left, or a failed dead-letter
// write) is left uncommitted and comes again, with whatever follows it.
func (c *Consumer) Run(ctx context.Context) error {
	if err := c.validate(); err != nil {
		return fmt.Errorf("consumer %q: %w", c.cfg.GroupID, err)
	}
	if !c.running.CompareAndSwap(false, true) {
		return fmt.Errorf("consumer %q: Run called twice", c.cfg.GroupID)
	}
	dlq := c.dlq
	if dlq == nil {
		dlq = NewSecureProducer(c.cfg.Brokers, c.cfg.Security)
		defer dlq.Close()
	}
	if !c.waitTopics(ctx) {
		return nil
	}
	if c.cfg.SoleMember {
		c.removeStaleMembers(ctx)
	}
	if c.drops != nil {
		defer c.flushDrops()()
	}
	if c.cfg.Verifier != nil {
		c.parts = newPartitionCounts(ctx, c.cfg.Brokers, c.cfg.Security, c.cfg.Topics, c.recheck, c.log)
		defer c.parts.close()
	}
	defer c.cfg.Metrics.WatchLag(c.cfg)()
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers:     c.cfg.Brokers,
		Dialer:      c.cfg.Security.dialer(),
		GroupID:     c.cfg.GroupID,
		GroupTopics: c.cfg.Topics,
		StartOffset: kafka.FirstOffset,
		MinBytes:    1,
		MaxBytes:    FetchMaxBytes,
		MaxWait:     fetchMaxWait,
		// Synchronous: CommitMessages returns once the broker has the
		// offset. The consumer batches commits itself (see committer), so
		// that it knows what was committed and flushes on the stop.
		CommitInterval:    0,
		HeartbeatInterval: heartbeatFor(c.cfg.SessionTimeout),
		SessionTimeout:    c.cfg.SessionTimeout,
		RebalanceTimeout:  rebalanceTimeout,
		JoinGroupBackoff:  joinGroupBackoff,
		GroupBalancers:    c.balancers(),
		// A member reads each topic's partitions every
		// partitionWatchInterval and rejoins when their count changed, so
		// that partitions added to a topic are read (by this group, from
		// their first record) without waiting for some other rebalance.
		// The watcher ends the generation whenever it cannot read a
		// topic's partitions, which made a missing topic a tight rejoin
		// loop: Run joins only once every topic exists (waitTopics), and
		// Loom never deletes one. Not for a PartitionKey group (see
		// PartitionKey): it reads one partition, which an added one is not.
		WatchPartitionChanges:  c.cfg.PartitionKey == "",
		PartitionWatchInterval: partitionWatchInterval,
		ReadBackoffMin:         50 * time.Millisecond,
		ReadBackoffMax:         time.Second,
		// kafka-go reports every rebalance and retried fetch; those are
		// routine, so they go to debug. What the caller must know comes
		// back from FetchMessage and is logged at warn below.
		ErrorLogger: kafkaDebug(c.log),
	})
	commits := newCommitter(r, c.log)
	stopCommits := func() {}
	if c.cfg.CommitInterval > 0 {
		stopCommits = commits.start(c.cfg.CommitInterval)
	}
	defer func() {
		stopCommits()
		if !c.crashed.Load() {
			// What was handled since the last commit is committed before
			// the member leaves the group.
			commits.flush(ctx)
		}
		if err := r.Close(); err != nil {
			c.log.Warn("close reader", "err", err)
		}
	}()

	if c.bh != nil {
		return c.runBatches(ctx, r, dlq, commits)
	}
	fetchBackoff := newBackoff(100*time.Millisecond, 5*time.Second)
	for {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if fatalGroupError(err) {
				return fmt.Errorf("consumer %q on %v: %w", c.cfg.GroupID, c.cfg.Topics, err)
			}
			c.log.Warn("fetch failed; retrying", "topics", c.cfg.Topics, "err", err)
			if !sleepCtx(ctx, fetchBackoff.next()) {
				return nil
			}
			continue
		}
		fetchBackoff = newBackoff(100*time.Millisecond, 5*time.Second)
		if c.handle(ctx, dlq, m) {
			c.marked(ctx, commits, m)
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// marked notes m as handled and commits at once when commits are synchronous.
func (c *Consumer) marked(ctx context.Context, commits *committer, m kafka.Message) {
	commits.mark(m)
	if c.cfg.CommitInterval < 0 {
		commits.flush(ctx)
	}
}

// runBatches is Run's loop with a BatchHandler: a fetcher keeps up to
// maxBatch records waiting while the loop handles what came before.
func (c *Consumer) runBatches(ctx context.Context, r *kafka.Reader, dlq *Producer, commits *committer) error {
	fctx, stopFetch := context.WithCancel(ctx)
	fetched := make(chan kafka.Message, c.maxBatch)
	fatal := make(chan error, 1)
	var fetcher sync.WaitGroup
	fetcher.Add(1)
	go func() {
		defer fetcher.Done()
		backoff := newBackoff(100*time.Millisecond, 5*time.Second)
		for {
			m, err := r.FetchMessage(fctx)
			if err != nil {
				if fctx.Err() != nil {
					return
				}
				if fatalGroupError(err) {
					fatal <- fmt.Errorf("consumer %q on %v: %w", c.cfg.GroupID, c.cfg.Topics, err)
					return
				}
				c.log.Warn("fetch failed; retrying", "topics", c.cfg.Topics, "err", err)
				if !sleepCtx(fctx, backoff.next()) {
					return
				}
				continue
			}
			backoff = newBackoff(100*time.Millisecond, 5*time.Second)
			select {
			case fetched <- m:
			case <-fctx.Done():
				return
			}
		}
	}()
	// Records fetched but not handled when the loop stops stay uncommitted
	// and come again.
	defer func() {
		stopFetch()
		fetcher.Wait()
	}()
	batch := make([]kafka.Message, 0, c.maxBatch)
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-fatal:
			return err
		case m := <-fetched:
			batch = append(batch[:0], m)
		}
	more:
		for len(batch) < c.maxBatch {
			select {
			case m := <-fetched:
				batch = append(batch, m)
			default:
				break more
			}
		}
		if !c.handleBatch(ctx, dlq, commits, batch) || ctx.Err() != nil {
			return nil
		}
	}
}

// handleBatch takes a batch to its end, marking what may be committed; it
// reports false when the stop cut the handling short.
func (c *Consumer) handleBatch(ctx context.Context, dlq *Producer, commits *committer, ms []kafka.Message) bool {
	// Each record is decoded once here, whichever path then takes it: a
	// node's record takes its token (NodeRate) once.
	type decoded struct {
		ev  envelope.Event
		err error
	}
	dec := make([]decoded, len(ms))
	wanted, ok := 0, 0
	for i, m := range ms {
		if !c.wants(m) {
			dec[i].err = errFiltered
			continue
		}
		ev, err := c.decode(m)
		dec[i] = decoded{ev, err}
		if errors.Is(err, errNodeRate) {
			// Dropped whatever the batch does (as filtered records are
			// passed over): a node past its rate must not send every other
			// node's records of the batch one by one.
			continue
		}
		wanted++
		if err == nil {
			ok++
		}
	}
	refused := false
	if wanted > 1 && ok == wanted {
		evs := make([]envelope.Event, 0, wanted)
		for _, d := range dec {
			if d.err == nil {
				evs = append(evs, d.ev)
			}
		}
		start := time.Now()
		err := c.callBatch(ctx, evs)
		if err == nil {
			share := time.Since(start) / time.Duration(len(ms))
			for i, m := range ms {
				dropped := errors.Is(dec[i].err, errNodeRate)
				if dropped {
					c.handleDecoded(ctx, dlq, m, dec[i].ev, dec[i].err) // counted and logged as dropped; never fails
				}
				if c.cfg.Passed != nil && (dropped || dec[i].err == errFiltered) {
					c.cfg.Passed(m.Topic, m.Partition, m.Offset, m.HighWaterMark) // filtered out or dropped
				}
				commits.mark(m)
				c.cfg.Metrics.handled(c.cfg.GroupID, m, share)
			}
			if c.cfg.CommitInterval < 0 {
				commits.flush(ctx)
			}
			return true
		}
		c.log.Debug("batch refused; handling its records one by one", "records", len(ms), "err", err)
		refused = true
	}
	for i, m := range ms {
		d := dec[i]
		if refused && d.err == nil {
			// Decoded afresh (the batch handler may have changed the
			// events), without taking another token.
			d.ev, d.err = c.decodeAs(m, false)
		}
		if !c.handleWith(ctx, dlq, m, d.ev, d.err) {
			return false
		}
		c.marked(ctx, commits, m)
	}
	return true
}

// errFiltered marks a record the Filter refused (handleWith).
var errFiltered = errors.New("filtered out")

// callBatch is call for a BatchHandler.
func (c *Consumer) callBatch(ctx context.Context, evs []envelope.Event) (err error) {
	// A process span per record, each its record's child, and each event
	// then carries its own span's context: what the handler emits for an
	// event continues that event's trace (ctx carries the first's).
	base := context.WithoutCancel(ctx)
	sctx, end := c.startProcess(base, evs[0], len(evs))
	ends := []func(error){end}
	if c.tracer.get() != nil {
		evs[0].TraceParent = TraceParent(sctx)
		for i := 1; i < len(evs); i++ {
			ectx, e := c.startProcess(base, evs[i], len(evs))
			evs[i].TraceParent = TraceParent(ectx)
			ends = append(ends, e)
		}
	}
	defer func() {
		for _, e := range ends {
			e(err)
		}
	}()
	hctx, cancel := context.WithTimeout(sctx, c.cfg.HandlerTimeout)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			c.log.Error("batch handler panicked", "records", len(evs), "panic", p, "stack", string(debug.Stack()))
			err = fmt.Errorf("batch handler panicked: %v", p)
		}
	}()
	return c.bh(hctx, evs)
}

// waitTopics waits until every topic of the group exists, so that a member
// never joins with a partial subscription (kafka-go assigns nothing for a
// missing topic and would not look again until some rebalance). It reports
// false when ctx ended first.
func (c *Consumer) waitTopics(ctx context.Context) bool {
	transport := c.cfg.Security.transport(&kafka.Transport{MetadataTTL: 200 * time.Millisecond, MetadataTopics: c.cfg.Topics})
	defer transport.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(c.cfg.Brokers...), Transport: transport}
	delay := newBackoff(50*time.Millisecond, 2*time.Second)
	warned := time.Time{}
	for {
		missing, err := topicsNotReady(ctx, client, c.cfg.Topics)
		if err == nil && len(missing) == 0 {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		if time.Since(warned) > 10*time.Second {
			c.log.Warn("waiting for topics to exist before joining", "missing", missing, "err", err)
			warned = time.Now()
		}
		if !sleepCtx(ctx, delay.next()) {
			return false
		}
	}
}

// staleMembersTimeout bounds removeStaleMembers: past it the group waits
// out the stale members' sessions, as without SoleMember.
const staleMembersTimeout = 5 * time.Second

// removeStaleMembers removes every member the group has (SoleMember: they
// are dead predecessors'). A failure only costs the wait it would have
// saved, so it is logged and Run goes on.
func (c *Consumer) removeStaleMembers(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, staleMembersTimeout)
	defer cancel()
	transport := c.cfg.Security.transport(&kafka.Transport{})
	defer transport.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(c.cfg.Brokers...), Transport: transport}
	n, err := removeMembers(ctx, client, c.cfg.GroupID)
	switch {
	case err != nil && ctx.Err() == nil:
		c.log.Warn("could not remove the group's stale members; it waits out their sessions", "err", err)
	case n > 0:
		c.log.Info("removed a dead predecessor's members from the group", "members", n)
	}
}

// removeMembers removes every member of group and returns how many it removed.
func removeMembers(ctx context.Context, client *kafka.Client, group string) (int, error) {
	desc, err := client.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{group}})
	if err != nil {
		return 0, fmt.Errorf("describe group: %w", err)
	}
	var members []kafka.LeaveGroupRequestMember
	for _, g := range desc.Groups {
		if g.Error != nil {
			return 0, fmt.Errorf("describe group: %w", g.Error)
		}
		for _, m := range g.Members {
			members = append(members, kafka.LeaveGroupRequestMember{ID: m.MemberID})
		}
	}
	if len(members) == 0 {
		return 0, nil
	}
	resp, err := client.LeaveGroup(ctx, &kafka.LeaveGroupRequest{GroupID: group, Members: members})
	if err == nil {
		err = resp.Error
	}
	if err != nil {
		return 0, fmt.Errorf("leave group for %d members: %w", len(members), err)
	}
	n := 0
	var errList []error
	for _, m := range resp.Members {
		switch {
		case m.Error == nil:
			n++
		case !errors.Is(m.Error, kafka.UnknownMemberId): // already gone: as good
			errList = append(errList, fmt.Errorf("member %s: %w", m.ID, m.Error))
		}
	}
	return n, errors.Join(errList...)
}

func (c *Consumer) validate() error {
	var v errs.Validator
	v.Check(len(c.cfg.Brokers) > 0, "brokers", "at least one broker address is required")
	v.Check(c.cfg.GroupID != "", "group_id", "is required")
	v.Check(len(c.cfg.Topics) > 0, "topics", "at least one topic is required")
	for i, t := range c.cfg.Topics {
		v.Check(t != "", fmt.Sprintf("topics[%d]", i), "must not be empty")
	}
	v.Check(c.h != nil, "handler", "is required")
	v.Check(c.cfg.SessionTimeout >= MinSessionTimeout && c.cfg.SessionTimeout <= MaxSessionTimeout, "session_timeout",
		"must be %v up to %v, got %v", MinSessionTimeout, MaxSessionTimeout, c.cfg.SessionTimeout)
	return v.Err()
}

// heartbeatFor is the heartbeat interval of a member whose session lasts
// session: heartbeatInterval, or a third of session when that is shorter,
// so that the coordinator evicts a member only after it missed three.
func heartbeatFor(session time.Duration) time.Duration {
	return min(heartbeatInterval, session/3)
}

// fatalGroupError reports broker answers that no amount of retrying fixes.
func fatalGroupError(err error) bool {
	for _, e := range []kafka.Error{
		kafka.GroupAuthorizationFailed, kafka.TopicAuthorizationFailed,
		kafka.InvalidGroupId, kafka.InvalidSessionTimeout, kafka.InconsistentGroupProtocol,
		kafka.SASLAuthenticationFailed, kafka.ClusterAuthorizationFailed,
	} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// handle takes one record to its end and reports whether it may be
// committed: true after success, a skip or a dead-letter, false when the
// stop cut its handling short.
func (c *Consumer) handle(ctx context.Context, dlq *Producer, m kafka.Message) bool {
	start := time.Now()
	done, taken := c.handleRecord(ctx, dlq, m)
	return c.handled(m, start, done, taken)
}

// handleWith is handle for m already decoded (ev, err; errFiltered: the
// Filter refused it).
func (c *Consumer) handleWith(ctx context.Context, dlq *Producer, m kafka.Message, ev envelope.Event, err error) bool {
	start := time.Now()
	done, taken := true, false
	if err != errFiltered {
		done, taken = c.handleDecoded(ctx, dlq, m, ev, err)
	}
	return c.handled(m, start, done, taken)
}

// handled counts m's handling, begun at start, and tells Passed of it when
// it is done without the handler having taken it; it returns done.
func (c *Consumer) handled(m kafka.Message, start time.Time, done, taken bool) bool {
	if done {
		c.cfg.Metrics.handled(c.cfg.GroupID, m, time.Since(start))
		if !taken && c.cfg.Passed != nil {
			c.cfg.Passed(m.Topic, m.Partition, m.Offset, m.HighWaterMark)
		}
	}
	return done
}

// handleRecord is handle without the metrics: done as handle's, and taken
// when the handler returned nil for the record.
func (c *Consumer) handleRecord(ctx context.Context, dlq *Producer, m kafka.Message) (done, taken bool) {
	if !c.wants(m) {
		return true, false
	}
	ev, err := c.decode(m)
	return c.handleDecoded(ctx, dlq, m, ev, err)
}

// handleDecoded is handleRecord for a wanted record m, decoded (ev, err).
func (c *Consumer) handleDecoded(ctx context.Context, dlq *Producer, m kafka.Message, ev envelope.Event, err error) (done, taken bool) {
	// The record's logger is built only when there is something to say:
	// most records are handled at the first try and say nothing.
	log := func() *slog.Logger { return c.log.With("topic", m.Topic, "partition", m.Partition, "offset", m.Offset) }
	switch {
	case errors.Is(err, errNodeRate):
		// Dropped, not dead-lettered: a flood must cost no write.
		if c.cfg.Rejected != nil {
			c.cfg.Rejected.Add(ctx, 1, metric.WithAttributes(attribute.String("topic", m.Topic), attribute.String("reason", DropNodeRate)))
		}
		c.drops.Note(time.Now(), DropNodeRate, ev.Signer, "node", ev.Signer, "topic", m.Topic, "partition", m.Partition, "offset", m.Offset, "type", ev.Type, "event", ev.ID)
		return true, false
	case errors.Is(err, envelope.ErrRejected):
		// Not retried: no attempt can make a forged record genuine.
		reason := envelope.ReasonOf(err)
		l := log()
		l.Warn("dead-lettering refused record", "reason", reason, "signer", ev.Signer, "type", ev.Type, "err", err)
		if c.cfg.Rejected != nil {
			c.cfg.Rejected.Add(ctx, 1, metric.WithAttributes(attribute.String("topic", m.Topic), attribute.String("reason", reason)))
		}
		return c.deadLetter(ctx, dlq, m, err, 0, l), false
	case errors.Is(err, envelope.ErrUnknownType):
		// A newer producer may emit types this build does not know; they are
		// not errors of the record, so they are not dead-lettered.
		log().Warn("skipping event of unknown type", "id", ev.ID, "type", ev.Type)
		return true, false
	case err != nil:
		l := log()
		l.Error("dead-lettering malformed record", "err", err)
		return c.deadLetter(ctx, dlq, m, err, 0, l), false
	}

	var l *slog.Logger
	delay := newBackoff(c.cfg.Backoff, c.cfg.MaxBackoff)
	failed := 0 // attempts that failed for the record's sake (not Unavailable)
	for attempt := 1; ; attempt++ {
		err := c.call(ctx, ev)
		if err == nil {
			return true, true
		}
		if l == nil {
			l = log().With("id", ev.ID, "type", ev.Type)
		}
		if Unavailable(err) {
			l.Warn("handler could not reach what it needs; retrying until it can", "attempt", attempt, "err", err)
		} else if failed++; IsPermanent(err) || failed >= c.cfg.MaxAttempts {
			l.Error("dead-lettering event", "attempts", attempt, "permanent", IsPermanent(err), "err", err)
			if reason := envelope.ReasonOf(err); reason != "" && c.cfg.Rejected != nil {
				c.cfg.Rejected.Add(ctx, 1, metric.WithAttributes(attribute.String("topic", m.Topic), attribute.String("reason", reason)))
			}
			return c.deadLetter(ctx, dlq, m, err, attempt, l), false
		} else {
			l.Warn("handler failed; retrying", "attempt", attempt, "err", err)
		}
		if ctx.Err() != nil || !sleepCtx(ctx, delay.next()) {
			l.Info("stopping: event left uncommitted for redelivery", "attempts", attempt)
			return false, false
		}
	}
}

// decode decodes m, verifying it first when the consumer has a Verifier;
// a node's record must then also be on the partition its key goes to (the
// key is checked by DecodeVerified, the partition, which the producer
// chooses and no signature covers, here).
func (c *Consumer) decode(m kafka.Message) (envelope.Event, error) { return c.decodeAs(m, true) }

// decodeAs is decode; a node's record takes a token of its bucket
// (NodeRate) only when rated.
func (c *Consumer) decodeAs(m kafka.Message, rated bool) (envelope.Event, error) {
	if c.cfg.Verifier == nil {
		return c.cfg.Registry.Decode(m)
	}
	ev, err := c.cfg.Registry.DecodeVerified(m, c.cfg.Verifier, c.cfg.Policy)
	if rated && c.nodes != nil && strings.HasPrefix(ev.Signer, "nodes/") && !c.admit(ev.Signer, ev.Time) {
		// ev.Signer is set only once the signature verified: a forger
		// cannot spend another node's tokens.
		return ev, errNodeRate
	}
	if err == nil && c.parts != nil && strings.HasPrefix(ev.Signer, "nodes/") {
		if err := c.parts.check(context.Background(), m); err != nil {
			return ev, fmt.Errorf("decode %s (%s) signed by %s: %w", ev.ID, ev.Type, ev.Signer, err)
		}
	}
	return ev, err
}

// flushDrops writes, every drop log window, the drops that no later drop
// has written (noderate.DropLog.Flush: a flood's last window), until the
// returned function is called, which writes those still waiting (Run
// calls it once it handles no more records).
func (c *Consumer) flushDrops() (stop func()) {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(c.drops.Every())
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				c.drops.Flush(now)
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
		c.drops.Close(time.Now())
	}
}

// admit takes a token from node's bucket for a record it signed at at,
// reporting false when it has none (ConsumerConfig.NodeRate). The bucket
// runs on the node's clock: at, moved no further back than the clock's
// last reading or the window's start, and no later than now.
func (c *Consumer) admit(node string, at time.Time) bool {
	now := time.Now()
	floor := now.Add(-c.cfg.NodeRateWindow)
	if now.Sub(c.pruned) >= nodesPruneEvery {
		// A bucket full at the window's start is full at any time a
		// record can now be counted at: a new one is the same. A clock
		// before the window's start is read as the start anyway.
		c.nodes.Prune(floor)
		for n, t := range c.clocks {
			if t.Before(floor) {
				delete(c.clocks, n)
			}
		}
		c.pruned = now
	}
	t := at
	if t.After(now) {
		t = now
	}
	if last := c.clocks[node]; t.Before(last) {
		t = last
	}
	if t.Before(floor) {
		t = floor
	}
	c.clocks[node] = t
	if !c.nodes.Allowed(t, node) {
		return false
	}
	c.nodes.Take(t, node)
	return true
}

// call runs the handler once with a context that carries the event's trace
// context and Run's values, is bounded by HandlerTimeout, and is not cancelled
// by the stop. A panic becomes an error, so one bad record cannot take the
// service down; it is retried and dead-lettered like any failure.
func (c *Consumer) call(ctx context.Context, ev envelope.Event) (err error) {
	sctx, end := c.startProcess(context.WithoutCancel(ctx), ev, 1)
	defer func() { end(err) }()
	hctx, cancel := context.WithTimeout(sctx, c.cfg.HandlerTimeout)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			c.log.Error("handler panicked", "id", ev.ID, "panic", p, "stack", string(debug.Stack()))
			err = fmt.Errorf("handler panicked: %v", p)
		}
	}()
	return c.h(hctx, ev)
}

// deadLetter writes m, with its headers and the loom_dlq_* headers, to
// "<topic>.dlq" and reports whether it is there. A failed write is retried
// with backoff; it gives up only when ctx ends, leaving the record
// uncommitted, because committing a record that is in neither place would lose it.
// A dead letter over the record limit (m was at it, the loom_dlq_* headers
// took it over) is written with less of m (deadLetterShrunk) rather than
// retried: the same write would fail forever and hold m's partition.
func (c *Consumer) deadLetter(ctx context.Context, dlq *Producer, m kafka.Message, cause error, attempts int, log *slog.Logger) bool {
	out := DeadLetter(m, cause, attempts)
	delay := newBackoff(c.cfg.Backoff, 5*time.Second)
	for shrunk := 0; ; {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
		err := dlq.publishRaw(wctx, out)
		cancel()
		if err == nil {
			c.cfg.Metrics.deadLettered(m.Topic)
			return true
		}
		if TooLarge(err) && shrunk < maxShrink {
			shrunk++
			out = deadLetterShrunk(out, m, shrunk)
			log.Warn("dead letter over the record limit; writing it with less of the record", "dlq", out.Topic, "left_out", dataDropped(m, shrunk))
			continue
		}
		log.Error("dead-letter write failed; record stays uncommitted", "dlq", out.Topic, "err", err)
		if ctx.Err() != nil || !sleepCtx(ctx, delay.next()) {
			return false
		}
	}
}

// DeadLetter returns the record to write to "<topic>.dlq" for m: its key,
// value and headers (earlier loom_dlq_* headers replaced) plus the loom_dlq_*
// headers naming the cause, the source topic, partition and offset, and the
// number of handler attempts (0: the record could not be decoded), and for a
// refused signature its reason (HeaderDLQReason).
func DeadLetter(m kafka.Message, cause error, attempts int) kafka.Message {
	headers := make([]kafka.Header, 0, len(m.Headers)+5)
	for _, h := range m.Headers {
		switch h.Key {
		case HeaderDLQError, HeaderDLQTopic, HeaderDLQPartition, HeaderDLQOffset, HeaderDLQAttempts, HeaderDLQReason, HeaderDLQDataDropped:
			continue
		}
		headers = append(headers, h)
	}
	errText := "unknown error"
	if cause != nil {
		errText = cause.Error()
	}
	headers = append(headers,
		kafka.Header{Key: HeaderDLQError, Value: []byte(errText)},
		kafka.Header{Key: HeaderDLQTopic, Value: []byte(m.Topic)},
		kafka.Header{Key: HeaderDLQPartition, Value: []byte(strconv.Itoa(m.Partition))},
		kafka.Header{Key: HeaderDLQOffset, Value: []byte(strconv.FormatInt(m.Offset, 10))},
		kafka.Header{Key: HeaderDLQAttempts, Value: []byte(strconv.Itoa(attempts))},
	)
	if reason := envelope.ReasonOf(cause); reason != "" {
		headers = append(headers, kafka.Header{Key: HeaderDLQReason, Value: []byte(reason)})
	}
	return kafka.Message{Topic: m.Topic + topics.DLQSuffix, Key: m.Key, Value: m.Value, Headers: headers}
}

// maxShrink is the last deadLetterShrunk level.
const maxShrink = 2

// maxShrunkHeader bounds each loom_dlq_* header of a level 2
// deadLetterShrunk dead letter (an error may quote the record).
const maxShrunkHeader = 1 << 10

// deadLetterShrunk returns the dead letter out (DeadLetter's, for m) with
// less of m, for a dead letter over the record limit: level 1 leaves m's
// value out, level 2 its key and its own headers too, keeping only
// DeadLetter's loom_dlq_* headers (cut to maxShrunkHeader bytes), which
// name where m still is (topic, partition, offset: nothing is lost, m stays
// there for the topic's retention). Both set HeaderDLQDataDropped to what
// was left out.
func deadLetterShrunk(out, m kafka.Message, level int) kafka.Message {
	hs := make([]kafka.Header, 0, len(out.Headers)+1)
	for _, h := range out.Headers {
		if level >= 2 {
			switch h.Key {
			case HeaderDLQError, HeaderDLQTopic, HeaderDLQPartition, HeaderDLQOffset, HeaderDLQAttempts, HeaderDLQReason:
				// DeadLetter's own: m's copies of these were left out.
				if len(h.Value) > maxShrunkHeader {
					h.Value = append(h.Value[:maxShrunkHeader-3:maxShrunkHeader-3], "..."...) // a copy: out shares m's
				}
			default:
				continue
			}
		} else if h.Key == HeaderDLQDataDropped {
			continue
		}
		hs = append(hs, h)
	}
	hs = append(hs, kafka.Header{Key: HeaderDLQDataDropped, Value: []byte(dataDropped(m, level))})
	out.Headers, out.Value = hs, nil
	if level >= 2 {
		out.Key = nil
	}
	return out
}

// dataDropped says what deadLetterShrunk at level leaves out of m, and why.
func dataDropped(m kafka.Message, level int) string {
	if level >= 2 {
		n := len(m.Key)
		for _, h := range m.Headers {
			n += len(h.Key) + len(h.Value)
		}
		return fmt.Sprintf("%d bytes of value, %d of key and headers: the dead letter with them is over the record limit; the record is at the source topic, partition and offset", len(m.Value), n)
	}
	return fmt.Sprintf("%d bytes of value: the dead letter with it is over the record limit; the record is at the source topic, partition and offset", len(m.Value))
}

// TooLarge says whether a Kafka write failed for the record's size: the
// writer's own limit (BatchBytes) or the broker's (max.message.bytes).
func TooLarge(err error) bool {
	if err == nil {
		return false
	}
	var we kafka.WriteErrors
	if errors.As(err, &we) {
		for _, e := range we {
			if e != nil && errors.Is(e, kafka.MessageSizeTooLarge) {
				return true
			}
		}
	}
	return errors.Is(err, kafka.MessageSizeTooLarge)
}

// committer commits the offsets of handled records: mark notes a record as
// handled, flush commits the newest marked record of each partition in one
// request. Records of a partition are handled in order, so the newest
// marked offset of a partition never passes a record that was not handled.
type committer struct {
	r   *kafka.Reader
	log *slog.Logger

	mu      sync.Mutex
	pending map[topicPartition]kafka.Message
	// flushing serialises flushes (the background loop and the last one).
	flushing sync.Mutex
}

type topicPartition struct {
	topic     string
	partition int
}

func newCommitter(r *kafka.Reader, log *slog.Logger) *committer {
	return &committer{r: r, log: log, pending: map[topicPartition]kafka.Message{}}
}

// mark notes m as handled; the next flush commits it.
func (c *committer) mark(m kafka.Message) {
	c.mu.Lock()
	defer c.mu.Unlock()
	tp := topicPartition{m.Topic, m.Partition}
	if old, ok := c.pending[tp]; !ok || m.Offset > old.Offset {
		c.pending[tp] = m
	}
}

// take returns the marked records and forgets them.
func (c *committer) take() []kafka.Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pending) == 0 {
		return nil
	}
	msgs := make([]kafka.Message, 0, len(c.pending))
	for _, m := range c.pending {
		msgs = append(msgs, m)
	}
	clear(c.pending)
	return msgs
}

// flush commits what was marked since the last flush. It is not cancelled by
// the stop (what was handled is committed on the way out). A failed commit
// is logged, not retried: those records will come again, which idempotent
// handlers absorb, and retrying after a rebalance could move another
// member's offset.
func (c *committer) flush(ctx context.Context) {
	c.flushing.Lock()
	defer c.flushing.Unlock()
	msgs := c.take()
	if len(msgs) == 0 {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	if err := c.r.CommitMessages(cctx, msgs...); err != nil {
		parts := make([]string, 0, len(msgs))
		for _, m := range msgs {
			parts = append(parts, fmt.Sprintf("%s[%d]@%d", m.Topic, m.Partition, m.Offset))
		}
		c.log.Warn("commit failed; the records since the last commit will be delivered again", "handled", parts, "err", err)
	}
}

// start flushes every interval in the background until the returned
// function is called; that function returns once the loop has stopped.
func (c *committer) start(interval time.Duration) (stop func()) {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				c.flush(context.Background())
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		<-stopped
	}
}

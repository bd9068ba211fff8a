package domain

import (
	"time"

	"github.com/loom-ml/loom/libs/noderate"
)

// Record is how a consumed event reached health: what the domain needs to
// judge its own lag and whether the bus delivers. The zero Record is an
// event handled in-process (a scan's verdict): it moves nothing.
type Record struct {
	// Telemetry: the record was read from the nodes' telemetry topic.
	Telemetry bool
	// Node is the node the record is of: its signer when a node signed it
	// (envelope.Event.Signer; a node signs only its own records), the
	// payload's node for a service's (the sim provider's) records.
	Node string
	// Limited: a node signed it (or the bus is insecure: nobody did), so it
	// counts against Node's rate; a service's records are trusted.
	Limited bool
	// Partition, Offset and HighWaterMark are its position
	// (envelope.Event's; HighWaterMark 0: unknown, nothing is judged).
	Partition     int
	Offset        int64
	HighWaterMark int64
	// Time is when its producer stamped it (the event's time).
	Time time.Time
}

// MinWitnesses is how many distinct nodes must be heard, with records
// stamped recently, before the bus counts as delivering again for an
// unreachable node (its silence is then confirmed a timeout later). One
// node is not enough: a node flooding the topic with its own records must
// not be what proves, alone, that the others' silence is theirs.
const MinWitnesses = 2

// witnessesNeeded is how many distinct witnesses confirm that the bus
// delivers for the unreachable node name at now: MinWitnesses, or fewer
// when fewer other members could be one (heard within the timeout, neither
// unreachable nor UNHEALTHY themselves), but at least one. Two nodes of a
// three-node fleet gone together leave one node that can witness: asking
// for two would keep them unreachable, their runs going on, for ever.
// Flooding gains nothing from the smaller count: a record is a witness only
// while health is not behind in its partition (witnessOf), and a node is
// judged only while health is not behind in its own (Check), so had it
// sent heartbeats, health would have handled them too.
func (s *State) witnessesNeeded(name string, now time.Time) int {
	able := 0
	for other, n := range s.nodes {
		if other == name || n.Unhealthy {
			continue
		}
		if _, un := s.unreachSince[other]; un {
			continue
		}
		if last, ok := s.lastSeen[other]; !ok || now.Sub(last) >= s.timeout {
			continue
		}
		if able++; able >= MinWitnesses {
			return MinWitnesses
		}
	}
	return max(able, 1)
}

// partition is where health stands in one partition of the telemetry
// topic, judged by offsets and health's own clock only: a record's
// timestamp is its producer's, which a node chooses (a flood stamped "now"
// would hide the lag it makes), while the high-water mark is the broker's.
type partition struct {
	// hwm is the highest high-water mark seen, first seen at hwmSeen (the
	// fetch that brought it was no later than that).
	hwm     int64
	hwmSeen time.Time
	// behind: records were waiting behind the last one handled.
	behind bool
	// asOf: every record appended before it has been handled (the hwmSeen
	// of the last catch-up; the start for a partition behind since it).
	asOf time.Time
}

// moved notes that the record at rec's position was handled (or dropped) at now.
func (s *State) moved(now time.Time, rec Record) {
	p := s.parts[rec.Partition]
	if p == nil {
		p = &partition{asOf: s.started}
		if p.asOf.IsZero() {
			p.asOf = now
		}
		s.parts[rec.Partition] = p
	}
	if rec.HighWaterMark > p.hwm {
		p.hwm, p.hwmSeen = rec.HighWaterMark, now
	}
	if rec.Offset+1 >= p.hwm {
		p.behind, p.asOf = false, p.hwmSeen
		return
	}
	p.behind = true
}

// Passed notes that health is past the record at rec's position at now
// although its change was not committed: a record refused (dead-lettered)
// or applied before (written twice, redelivered). Its position still
// counts: were the last record of a quiet partition never to count, that
// partition would stay behind, and Check judge no silence anywhere, until
// another record came there.
func (s *State) Passed(now time.Time, rec Record) {
	if rec.Telemetry && rec.HighWaterMark > 0 {
		s.moved(now, rec)
	}
}

// Behind is how far behind the nodes' records health is at now: for the
// partition furthest behind, how long ago health had handled everything
// that was in it; 0 when it has handled every record it was shown. Check
// judges no silence of a node whose partition health does not know (it has
// handled no record of the node since it started) while it exceeds half
// the timeout.
func (s *State) Behind(now time.Time) time.Duration {
	var lag time.Duration
	for part := range s.parts {
		lag = max(lag, s.lagOf(part, now))
	}
	return lag
}

// lagOf is how far behind health is in partition part at now: how long ago
// it had handled everything in it, 0 when it is not behind there (or has
// seen nothing of it).
func (s *State) lagOf(part int, now time.Time) time.Duration {
	if p := s.parts[part]; p != nil && p.behind {
		return now.Sub(p.asOf)
	}
	return 0
}

// PartitionsBehind is lagOf at now of every partition health has seen.
func (s *State) PartitionsBehind(now time.Time) map[int]time.Duration {
	out := make(map[int]time.Duration, len(s.parts))
	for part := range s.parts {
		out[part] = s.lagOf(part, now)
	}
	return out
}

// behindFor is how far behind node name's records health is at now: the
// lag of the partition its last record handled arrived on (a node's
// records are keyed by its name: they all go to one partition), or, when
// health has handled none since it started, worst (Behind: its records may
// wait in any partition). So a node flooding its partition delays only
// the verdicts on the nodes whose records share it.
func (s *State) behindFor(name string, now time.Time, worst time.Duration) time.Duration {
	if part, ok := s.partOf[name]; ok {
		return s.lagOf(part, now)
	}
	return worst
}

// witnessOf is rec's node when the record shows the bus delivering: a
// member's own telemetry record, stamped within half a timeout of now,
// handled while health is not behind in the record's partition (by more
// than half a timeout; Behind, the worst, when its position is unknown):
// a partition kept behind by a flood proves nothing, and does not stop
// the others' records from proving it.
func (s *State) witnessOf(now time.Time, rec Record) string {
	if !rec.Telemetry || rec.Node == "" || s.nodes[rec.Node] == nil {
		return ""
	}
	if d := now.Sub(rec.Time); d > s.timeout/2 || d < -s.timeout/2 {
		return ""
	}
	var lag time.Duration
	if rec.HighWaterMark > 0 {
		lag = s.lagOf(rec.Partition, now)
	} else {
		lag = s.Behind(now)
	}
	if lag > s.timeout/2 {
		return ""
	}
	return rec.Node
}

// Defaults of a node's telemetry rate (Config.NodeRate, NodeBurst). An
// honest agent sends a heartbeat every 2 s (-heartbeat-interval) and GPU
// telemetry every 10 s (-telemetry-interval, at least 1 s), plus its
// registration, an XidObserved per Xid and a HealthCheckCompleted per check:
// well under one record a second, with bursts of a few dozen (an Xid storm
// over 8 GPUs, a scan's results). 20 a second, 200 at once, is far above
// that and far below what one health handles.
const (
	DefaultNodeRate  = 20.0
	DefaultNodeBurst = 200
)

// DropRate is Change.Dropped for a record past its node's rate.
const DropRate = "rate"

// DropGPUIndex is Change.Dropped for an XidObserved on a GPU index the
// node does not have (below -1, or not below its GPU count).
const DropGPUIndex = "gpu-index"

// admit reports whether rec may be handled under its node's token bucket
// (the token is taken at Commit). Only records a node signed count against
// it (Record.Limited); a service's are trusted.
func (s *State) admit(now time.Time, rec Record) bool {
	if !rec.Telemetry || !rec.Limited || rec.Node == "" {
		return true
	}
	return s.buckets.Allowed(now, rec.Node)
}

// Buckets is how many nodes' token buckets are kept (for tests).
func (s *State) Buckets() int { return s.buckets.Len() }

// NewNodeBuckets returns the nodes' token buckets on the records they sign
// on the telemetry topic (Config.NodeRate, NodeBurst): perSecond records a
// second and burst at once (DefaultNodeRate, DefaultNodeBurst when 0). Each
// consumer group that reads the topic keeps its own (the app's, the
// scans').
func NewNodeBuckets(perSecond float64, burst int) *noderate.Buckets {
	if perSecond <= 0 {
		perSecond = DefaultNodeRate
	}
	if burst <= 0 {
		burst = DefaultNodeBurst
	}
	return noderate.New(perSecond, burst)
}

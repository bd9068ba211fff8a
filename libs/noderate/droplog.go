package noderate

import (
	"cmp"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// LogEvery is how often at most a DropLog says, per reason, what was
// dropped: a flood of drops must not become a flood of log lines.
const LogEvery = 10 * time.Second

// Bounds of a DropLog's summary.
const (
	// MaxNamed is how many nodes a summary line names, those that
	// dropped the most first; the others are only counted (others=).
	MaxNamed = 10
	// maxTracked bounds the nodes counted apart per reason between two
	// lines; the drops of nodes past it are counted as untracked.
	maxTracked = 4096
)

// DropLog logs records dropped unhandled, at most once every LogEvery per
// reason, in one line that sums up the drops since the last: how many in
// all, how many nodes dropped records, and the MaxNamed nodes that dropped
// the most with their counts (by_node="n1=500 n2=12"), so that an
// operator sees every node flooding, not only the latest; and the latest
// record's attributes as a group (latest.node=, latest.type=, ...). A drop
// is logged at once when its reason has not been for LogEvery; those that
// come sooner wait for the next line, which the next drop writes once
// LogEvery has passed, or Flush, called on a tick, when no drop comes: so
// a flood's last drops are logged too. It is safe for concurrent use.
type DropLog struct {
	log   *slog.Logger
	msg   string
	every time.Duration

	mu      sync.Mutex
	reasons map[string]*tally
}

// tally is one reason's drops since its last line.
type tally struct {
	said   time.Time
	total  int
	byNode map[string]int
	// untracked counts the drops of nodes past maxTracked.
	untracked int
	// latest is the latest drop's attributes.
	latest []any
}

// NewDropLog returns a DropLog writing msg lines to log.
func NewDropLog(log *slog.Logger, msg string) *DropLog {
	return &DropLog{log: log, msg: msg, every: LogEvery, reasons: map[string]*tally{}}
}

// WithEvery makes d write a reason's line at most once every every
// (LogEvery unless set; tests shorten it) and returns d. Call it before
// any Note.
func (d *DropLog) WithEvery(every time.Duration) *DropLog {
	d.every = every
	return d
}

// Every is how often at most d writes a reason's line.
func (d *DropLog) Every() time.Duration { return d.every }

// Note counts a record of node ("" when the record names none) dropped for
// reason at now, and writes the reason's line when it has not for
// LogEvery; latest are the record's attributes (key-value pairs).
func (d *DropLog) Note(now time.Time, reason, node string, latest ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	t := d.reasons[reason]
	if t == nil {
		t = &tally{byNode: map[string]int{}}
		d.reasons[reason] = t
	}
	t.total++
	if _, ok := t.byNode[node]; ok || len(t.byNode) < maxTracked {
		t.byNode[node]++
	} else {
		t.untracked++
	}
	t.latest = latest
	if !t.said.IsZero() && now.Sub(t.said) < d.every {
		return
	}
	d.say(now, reason, t)
}

// Flush writes the line of each reason whose drops since its last line
// have waited LogEvery since it at now: those of a flood that stopped,
// which no next drop will write. Call it on a tick (every LogEvery or
// more often).
func (d *DropLog) Flush(now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, reason := range slices.Sorted(maps.Keys(d.reasons)) {
		if t := d.reasons[reason]; t.total > 0 && now.Sub(t.said) >= d.every {
			d.say(now, reason, t)
		}
	}
}

// Close writes the line of each reason with drops not yet written,
// however little time has passed since its last line: the owner stops,
// and no later Flush will come to write them. d may still be used.
func (d *DropLog) Close(now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, reason := range slices.Sorted(maps.Keys(d.reasons)) {
		if t := d.reasons[reason]; t.total > 0 {
			d.say(now, reason, t)
		}
	}
}

// say writes reason's line, of t, at now, and starts its count afresh.
func (d *DropLog) say(now time.Time, reason string, t *tally) {
	byNode, others := Summary(t.byNode, MaxNamed)
	args := []any{"reason", reason, "dropped", t.total, "nodes", len(t.byNode), "by_node", byNode}
	if others > 0 || t.untracked > 0 {
		args = append(args, "others", others+t.untracked)
	}
	args = append(args, slog.Group("latest", t.latest...))
	d.log.Warn(d.msg, args...)
	t.said, t.total, t.untracked, t.latest = now, 0, 0, nil
	clear(t.byNode)
}

// Summary is counts as "name=count" pairs, separated by spaces, of the max
// greatest counts (greatest first, then by name), and the sum of the
// counts left out. A name is quoted (%q) when it holds a space, an '=' or
// a character that is not printable.
func Summary(counts map[string]int, max int) (string, int) {
	names := make([]string, 0, len(counts))
	for n := range counts {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int {
		if c := cmp.Compare(counts[b], counts[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	var sb strings.Builder
	others := 0
	for i, n := range names {
		if i >= max {
			others += counts[n]
			continue
		}
		if i > 0 {
			sb.WriteByte(' ')
		}
		fmt.Fprintf(&sb, "%s=%d", quoted(n), counts[n])
	}
	return sb.String(), others
}

// quoted is name as a summary shows it.
func quoted(name string) string {
	if name == "" || strings.ContainsFunc(name, func(r rune) bool {
		return r == ' ' || r == '=' || r == '"' || !strconv.IsPrint(r)
	}) {
		return fmt.Sprintf("%q", name)
	}
	return name
}

package series

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Why a write is refused (Verdict.Reason, Refused.Reason): short, stable
// words, the only values of the refused counter's reason label.
const (
	// ReasonNotPlaced: the writing node is not one of the run's nodes.
	ReasonNotPlaced = "not-placed"
	// ReasonTooLate: the run ended more than Limits.Late ago.
	ReasonTooLate = "too-late"
	// ReasonSwept: retention deleted the job's series; a late write must
	// not start a partial one (the expiry marker stands Limits.Late).
	ReasonSwept = "swept"
	// ReasonHeldFull: the run's placement is unknown and the job already
	// holds Limits.Held batches or Limits.HeldBytes bytes.
	ReasonHeldFull = "held-full"
	// ReasonHeldExpired: the run's placement did not arrive within
	// Limits.HoldFor.
	ReasonHeldExpired = "held-expired"
	// ReasonRate: the node wrote more than Limits.NodeRate batches this
	// hour.
	ReasonRate = "rate"
)

// Reasons are all the refusal reasons, for a counter's labels.
var Reasons = []string{ReasonNotPlaced, ReasonTooLate, ReasonSwept, ReasonHeldFull, ReasonHeldExpired, ReasonRate}

// maxRuns is the most attempts of one job Place records (the latest):
// enough for any requeue policy, and the runs hash stays bounded.
const maxRuns = 64

// Run is one attempt of a job and where the scheduler placed it.
type Run struct {
	Attempt int32
	// Nodes are the full names of the nodes the attempt runs on
	// (resname.NodeIn of the job's cluster and each hostname).
	Nodes []string
	// End is when the attempt ended; zero while it runs.
	End time.Time
}

// Write is one batch a writer asks to store: Node is the writing node's
// full name, "" for a trusted writer (a service), which no placement
// binds. Data is the caller's own encoding of the batch, kept while the
// write is held and handed back to the apply function of Release.
type Write struct {
	Job     string
	Node    string
	Attempt int32
	Data    []byte
	// ID is the caller's identity of the record the write is (RecordSource's
	// String: its topic, partition and offset), which a redelivered copy
	// shares: a job holds a record once, however often it is delivered
	// before its placement is known. "" for a record whose identity is not
	// known (held once per delivery). No spaces nor newlines.
	ID string
	// HeldAt is when the write was held (Release's writes only).
	HeldAt time.Time
}

// Verdict is what Admit decided: Reason set: refused; Held: kept until the
// run's placement is known (Release applies or refuses it); neither: the
// caller appends now.
type Verdict struct {
	Held   bool
	Reason string
}

// Refused is a held write Release or SweepHeld refused, for the caller to
// count and log.
type Refused struct {
	Write  Write
	Reason string
}

// heldIndexKey is the sorted set job -> when its oldest held write is due
// to expire is looked at (unix ms of its hold). One key outside any job's
// slot, written one command at a time.
func (s *Store) heldIndexKey() string { return s.prefix + "metrics:held" }

// nodeRateKey is node's write count (CountNodeWrite): its hour and count,
// and what it counted of each source.
func (s *Store) nodeRateKey(node string) string { return s.prefix + "metrics:noderate:" + node }

var placeScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
for i = 1, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
return 1`)

// Place records where job's runs are (the scheduler's placement, learnt
// from its job events): from then on only a run's nodes may write its
// metrics, for at most Limits.Late after its end. A later Place of the same
// attempt replaces it. A swept job is left alone. Idempotent.
func (s *Store) Place(ctx context.Context, job string, runs []Run) error {
	if err := validJob(job); err != nil {
		return err
	}
	if len(runs) > maxRuns {
		runs = runs[len(runs)-maxRuns:]
	}
	args := make([]any, 0, 2*len(runs))
	for _, r := range runs {
		v := "0"
		if !r.End.IsZero() {
			v = strconv.FormatInt(max(r.End.UnixMilli(), 1), 10)
		}
		for _, n := range r.Nodes {
			if n != "" && !strings.ContainsAny(n, " \n") {
				v += " " + n
			}
		}
		args = append(args, r.Attempt, v)
	}
	if len(args) == 0 {
		return nil
	}
	if err := placeScript.Run(ctx, s.rdb, []string{s.key(job, "runs"), s.key(job, "swept")}, args...).Err(); err != nil {
		return fmt.Errorf("placement of %s: %w", job, err)
	}
	return nil
}

// admitScript: KEYS runs, held, heldsize, swept, heldids; ARGV attempt,
// entry, max held, max held bytes, trusted (1/0), the write's ID (empty when
// unknown). Returns {status, run}: status 'swept', 'placed' (run: the
// attempt's placement, empty when unknown to a trusted writer), 'held' or
// 'full'. A write is held when its run's placement is unknown, or when
// earlier writes of the job are held (so that a job's batches are applied
// in their order: a later one must not move its source's watermark past a
// held one). A write whose ID is held already (a redelivered record) is
// 'held' without a second entry: it keeps the first copy's place in the
// order and its hold time, and takes no second slot of the bounds.
var admitScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[4]) == 1 then return {'swept', ''} end
local run = redis.call('HGET', KEYS[1], ARGV[1])
if ARGV[5] == '1' then return {'placed', run or ''} end
local n = redis.call('LLEN', KEYS[2])
if run and n == 0 then return {'placed', run} end
if ARGV[6] ~= '' and redis.call('HEXISTS', KEYS[5], ARGV[6]) == 1 then return {'held', ''} end
local size = tonumber(redis.call('GET', KEYS[3]) or '0')
if n >= tonumber(ARGV[3]) or size + #ARGV[2] > tonumber(ARGV[4]) then return {'full', ''} end
redis.call('RPUSH', KEYS[2], ARGV[2])
redis.call('INCRBY', KEYS[3], #ARGV[2])
if ARGV[6] ~= '' then redis.call('HSET', KEYS[5], ARGV[6], 1) end
return {'held', ''}`)

// Admit decides on w at now: refused (the job's series were swept, the
// node is not the run's, the run ended more than Limits.Late ago, or the
// job's held writes are full), held until the run's placement is known, or
// admitted (the caller appends it). A held job's writes are released by
// Release (call it after a held verdict too: the placement may have come
// meanwhile) and expired by SweepHeld.
func (s *Store) Admit(ctx context.Context, w Write, now time.Time) (Verdict, error) {
	if err := validJob(w.Job); err != nil {
		return Verdict{}, err
	}
	if strings.ContainsAny(w.ID, " \n") {
		return Verdict{}, fmt.Errorf("metrics of %s: write id %q: no spaces nor newlines", w.Job, w.ID)
	}
	trusted := "0"
	var entry []byte
	if w.Node == "" {
		trusted = "1"
	} else {
		entry = encodeHeld(w, now)
	}
	keys := []string{s.key(w.Job, "runs"), s.key(w.Job, "held"), s.key(w.Job, "heldsize"), s.key(w.Job, "swept"), s.key(w.Job, "heldids")}
	res, err := admitScript.Run(ctx, s.rdb, keys, w.Attempt, entry, s.lim.Held, s.lim.HeldBytes, trusted, w.ID).StringSlice()
	if err != nil || len(res) != 2 {
		return Verdict{}, fmt.Errorf("metrics of %s: admit: %v %w", w.Job, res, err)
	}
	switch res[0] {
	case "swept":
		return Verdict{Reason: ReasonSwept}, nil
	case "full":
		return Verdict{Reason: ReasonHeldFull}, nil
	case "held":
		err := s.rdb.ZAddNX(ctx, s.heldIndexKey(), redis.Z{Score: float64(now.UnixMilli()), Member: w.Job}).Err()
		if err != nil {
			return Verdict{Held: true}, fmt.Errorf("metrics of %s: held index: %w", w.Job, err)
		}
		return Verdict{Held: true}, nil
	}
	return Verdict{Reason: s.judge(res[1], w.Node, now)}, nil
}

// judge is the reason a write of node to a run placed as run ("endMs
// node...") is refused at now, or "" when it is taken. A trusted writer
// (node "") is bound by the age only.
func (s *Store) judge(run, node string, now time.Time) string {
	f := strings.Fields(run)
	if len(f) == 0 {
		if node == "" {
			return ""
		}
		return ReasonNotPlaced
	}
	if end, _ := strconv.ParseInt(f[0], 10, 64); end > 0 && now.UnixMilli()-end > s.lim.Late.Milliseconds() {
		return ReasonTooLate
	}
	if node != "" && !slices.Contains(f[1:], node) {
		return ReasonNotPlaced
	}
	return ""
}

// encodeHeld is a held entry: "node\nattempt\nheldAtMs[ id]\n" then the
// data. The id (Write.ID) follows the time, so that an entry held before
// writes had ids (without one) still decodes.
func encodeHeld(w Write, at time.Time) []byte {
	b := make([]byte, 0, len(w.Node)+len(w.ID)+32+len(w.Data))
	b = append(b, w.Node...)
	b = append(b, '\n')
	b = strconv.AppendInt(b, int64(w.Attempt), 10)
	b = append(b, '\n')
	b = strconv.AppendInt(b, at.UnixMilli(), 10)
	if w.ID != "" {
		b = append(b, ' ')
		b = append(b, w.ID...)
	}
	b = append(b, '\n')
	return append(b, w.Data...)
}

func decodeHeld(job string, e []byte) (Write, error) {
	f := bytes.SplitN(e, []byte{'\n'}, 4)
	if len(f) != 4 {
		return Write{}, errors.New("held entry: want 4 parts")
	}
	a, err1 := strconv.ParseInt(string(f[1]), 10, 32)
	at, id, _ := strings.Cut(string(f[2]), " ")
	ms, err2 := strconv.ParseInt(at, 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return Write{}, fmt.Errorf("held entry: %w", err)
	}
	return Write{Job: job, Node: string(f[0]), Attempt: int32(a), Data: f[3], HeldAt: time.UnixMilli(ms), ID: id}, nil
}

// popScript removes the held list's head only if it is still ARGV[1]
// (another releaser may have taken it), keeping heldsize and heldids
// (KEYS[3]; ARGV[2] the entry's id, empty for none).
var popScript = redis.NewScript(`
local e = redis.call('LINDEX', KEYS[1], 0)
if e ~= ARGV[1] then return 0 end
redis.call('LPOP', KEYS[1])
if redis.call('LLEN', KEYS[1]) == 0 then
  redis.call('DEL', KEYS[2], KEYS[3])
else
  redis.call('DECRBY', KEYS[2], #e)
  if ARGV[2] ~= '' then redis.call('HDEL', KEYS[3], ARGV[2]) end
end
return 1`)

// Release goes through job's held writes in order at now: each whose run's
// placement is known is applied (apply) or refused; one whose placement is
// unknown after Limits.HoldFor is refused (ReasonHeldExpired); it stops at
// the first still waiting. A write leaves the list only after apply
// returned nil, so a crash re-applies it (apply must be idempotent: the
// store's source watermark is). It returns the writes it refused, each
// once, for the caller to count and log.
func (s *Store) Release(ctx context.Context, job string, now time.Time, apply func(Write) error) ([]Refused, error) {
	var refused []Refused
	held := s.key(job, "held")
	for range s.lim.Held + 1 {
		e, err := s.rdb.LIndex(ctx, held, 0).Bytes()
		if errors.Is(err, redis.Nil) {
			return refused, nil
		}
		if err != nil {
			return refused, fmt.Errorf("metrics of %s: held: %w", job, err)
		}
		w, derr := decodeHeld(job, e)
		var reason string
		if derr != nil {
			// Not an entry this code wrote: refused rather than stuck.
			reason = ReasonHeldExpired
		} else {
			p := s.rdb.Pipeline()
			run := p.HGet(ctx, s.key(job, "runs"), strconv.Itoa(int(w.Attempt)))
			swept := p.Exists(ctx, s.key(job, "swept"))
			if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
				return refused, fmt.Errorf("metrics of %s: placement: %w", job, err)
			}
			switch {
			case swept.Val() == 1:
				reason = ReasonSwept
			case run.Val() == "":
				if now.Sub(w.HeldAt) < s.lim.HoldFor {
					return refused, nil
				}
				reason = ReasonHeldExpired
			default:
				if reason = s.judge(run.Val(), w.Node, now); reason == "" {
					if err := apply(w); err != nil {
						return refused, err
					}
				}
			}
		}
		popped, err := popScript.Run(ctx, s.rdb, []string{held, s.key(job, "heldsize"), s.key(job, "heldids")}, e, w.ID).Int()
		if err != nil {
			return refused, fmt.Errorf("metrics of %s: held: %w", job, err)
		}
		if popped == 1 && reason != "" {
			refused = append(refused, Refused{Write: w, Reason: reason})
		}
	}
	return refused, nil
}

// SweepHeld releases (Release) the held writes of at most limit jobs
// (1..MaxSweep) that hold one for Limits.HoldFor or longer, so that a
// placement that never comes ends in refusals, never in writes kept
// forever. It returns what was refused.
func (s *Store) SweepHeld(ctx context.Context, now time.Time, limit int, apply func(Write) error) ([]Refused, error) {
	limit = min(MaxSweep, max(limit, 1))
	jobs, err := s.rdb.ZRangeArgs(ctx, redis.ZRangeArgs{Key: s.heldIndexKey(), ByScore: true,
		Start: "-inf", Stop: fmt.Sprint(now.Add(-s.lim.HoldFor).UnixMilli()), Count: int64(limit)}).Result()
	if err != nil {
		return nil, fmt.Errorf("held metrics: %w", err)
	}
	var refused []Refused
	for _, job := range jobs {
		r, err := s.Release(ctx, job, now, apply)
		refused = append(refused, r...)
		if err != nil {
			return refused, err
		}
		// Out of the index first, then back in when writes remain: a
		// write held meanwhile (its ZADD NX after its push) is never
		// left out of the index.
		if err := s.rdb.ZRem(ctx, s.heldIndexKey(), job).Err(); err != nil {
			return refused, fmt.Errorf("held metrics: %w", err)
		}
		e, err := s.rdb.LIndex(ctx, s.key(job, "held"), 0).Bytes()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return refused, fmt.Errorf("metrics of %s: held: %w", job, err)
		}
		at := now
		if w, err := decodeHeld(job, e); err == nil {
			at = w.HeldAt
		}
		if err := s.rdb.ZAdd(ctx, s.heldIndexKey(), redis.Z{Score: float64(at.UnixMilli()), Member: job}).Err(); err != nil {
			return refused, fmt.Errorf("held metrics: %w", err)
		}
	}
	return refused, nil
}

// RefusalTTL is how long FirstRefusal remembers a record: as long as an
// applied event's inbox mark (libs/store InboxTTL), the topics'
// retention, beyond which no copy of the record can be redelivered.
const RefusalTTL = 7 * 24 * time.Hour

// refusedKey marks the record record as refused once (FirstRefusal).
func (s *Store) refusedKey(record string) string { return s.prefix + "metrics:refused:" + record }

// FirstRefusal marks record (the caller's identity of one record: its
// topic, partition and offset) as refused, for RefusalTTL, and reports
// whether this is its first refusal: a record redelivered (a consumer that
// failed to commit, a restart, a write held twice) is decided again, and
// may be refused again, but counts once. The mark is Redis', so every
// replica shares it.
func (s *Store) FirstRefusal(ctx context.Context, record string) (bool, error) {
	first, err := s.rdb.SetNX(ctx, s.refusedKey(record), 1, RefusalTTL).Result()
	if err != nil {
		return false, fmt.Errorf("metrics refusal of %s: %w", record, err)
	}
	return first, nil
}

// RecordSource is a record's identity for CountNodeWrite and Write.ID:
// its topic partition (Name) and offset (Seq), which the broker assigns,
// so that no writer can forge nor reuse them, and which a redelivered copy
// shares. A record that was not read from a broker (highWaterMark, the
// partition's high-water mark at the fetch, not above offset: an event
// made in a test or replayed by hand) has no identity: Name "".
func RecordSource(topic string, partition int, offset, highWaterMark int64) Source {
	if topic == "" || highWaterMark <= offset {
		return Source{}
	}
	return Source{Name: topic + "/" + strconv.Itoa(partition), Seq: offset}
}

// String is the source's record identity, "name:seq" (Write.ID); "" when
// the name is unknown.
func (src Source) String() string {
	if src.Name == "" {
		return ""
	}
	return src.Name + ":" + strconv.FormatInt(src.Seq, 10)
}

// nodeRateScript: KEYS the node's count (nodeRateKey); ARGV the hour (unix
// hours), the limit, the record's source (empty when unknown), its sequence,
// the key's TTL in seconds. Returns 1 when the record is over the limit.
//
// The hash holds "h" (the hour counted) and "n" (its count), and per
// source "s:NAME" = "last lo hi": the last sequence counted from it and
// the latest run of its sequences refused ([lo, hi]; -1 -1 for none). A
// source is read in order (one consumer at a time owns a partition), so a
// record at or below its source's last was counted before (a redelivery):
// it is not counted again, and its verdict is the first one's (refused
// when it lies in the refused run: within an hour a node's refusals are
// its last records, so they are contiguous in each source).
var nodeRateScript = redis.NewScript(`
local f, seq, last, lo, hi
if ARGV[3] ~= '' then
  f, seq = 's:' .. ARGV[3], tonumber(ARGV[4])
  local v = redis.call('HGET', KEYS[1], f)
  if v then
    last, lo, hi = string.match(v, '^(%S+) (%S+) (%S+)$')
  end
  if last and seq <= tonumber(last) then
    if seq >= tonumber(lo) and seq <= tonumber(hi) then return 1 end
    return 0
  end
end
if redis.call('HGET', KEYS[1], 'h') ~= ARGV[1] then redis.call('HSET', KEYS[1], 'h', ARGV[1], 'n', 0) end
local over = redis.call('HINCRBY', KEYS[1], 'n', 1) > tonumber(ARGV[2])
if f then
  if not last then lo, hi = '-1', '-1' end
  if over then
    -- A run goes on while the source's last record was refused too.
    if not last or hi ~= last then lo = ARGV[4] end
    hi = ARGV[4]
  end
  redis.call('HSET', KEYS[1], f, ARGV[4] .. ' ' .. lo .. ' ' .. hi)
end
redis.call('EXPIRE', KEYS[1], ARGV[5])
if over then return 1 end
return 0`)

// CountNodeWrite counts the record src (RecordSource) of node in now's
// hour and reports whether the node is over Limits.NodeRate (the write is
// then refused, ReasonRate). A record is counted once: one delivered again
// (a consumer that failed to commit it, a restart, a rebalance) is not
// counted again and gets its first delivery's verdict, whatever hour it
// comes back in, for RefusalTTL after the node's last write. A record
// without a source (Name "") is counted every time. The count is Redis',
// so every replica shares it.
func (s *Store) CountNodeWrite(ctx context.Context, node string, src Source, now time.Time) (bool, error) {
	if strings.ContainsAny(src.Name, " \n") {
		return false, fmt.Errorf("metric writes of %s: source %q: no spaces nor newlines", node, src.Name)
	}
	over, err := nodeRateScript.Run(ctx, s.rdb, []string{s.nodeRateKey(node)},
		now.Unix()/3600, s.lim.NodeRate, src.Name, src.Seq, int64(RefusalTTL/time.Second)).Int()
	if err != nil {
		return false, fmt.Errorf("metric writes of %s: %w", node, err)
	}
	return over == 1, nil
}

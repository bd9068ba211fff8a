package ingress

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/store"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Bounds on what the records keep.
const (
	// DefaultKept is how many recent messages are kept per project (and in
	// the list of every project's): IngressMessagesKept.
	DefaultKept = 1000
	// MaxProducers bounds the producers counted in all: past it, a new
	// producer's messages are counted under one producer of no project
	// (source OverflowSource), so that a flood of sources cannot grow
	// Redis without bound.
	MaxProducers = 10000
	// MaxProjectProducers bounds the producers counted in one project, and
	// those of the messages filed under no project (no credential, or one
	// of no member of the project named: anyone who may publish to the
	// ingress sends those, with any source): past it, a new producer's
	// messages are counted under its project's overflow producer (source
	// OverflowSource). Without it, made-up sources would take every
	// producer of MaxProducers, and every project's producers after them
	// would be counted under no project, out of their project's list.
	MaxProjectProducers = 1000
	// OverflowSource is the source of the producers that count the
	// messages of producers past MaxProjectProducers (one a project) or
	// MaxProducers.
	OverflowSource = "(other producers, past the limit)"
	// allProjects is the list key of every project's recent messages.
	allProjects = "-"
)

// Redis keys, under the bridge's store prefix ("bridge:"):
//
//	ingress:msg:{key}         hash: producer, cred (CredentialTag), deliveries
//	                          and, while a recent
//	                          list holds the key, rec (IngressMessage,
//	                          protojson); expires after the dedupe TTL: its
//	                          presence means "decided", which is what dedupes
//	                          a redelivery
//	ingress:recent:{project}  list of keys, newest first, trimmed to Kept;
//	                          "-" is every project's (and those of messages
//	                          that named none); expires a dedupe TTL after its
//	                          last message
//	ingress:producers[:{p}]   sorted set of producer ids (all, and a
//	                          project's; "ingress:producers:" those of no
//	                          project) scored by their last message's time
//	                          (unix ms); members older than the dedupe TTL
//	                          are dropped whenever the set is recorded in,
//	                          and the set expires a dedupe TTL after its
//	                          last message. A plain set (written before
//	                          producers expired) is turned into one by the
//	                          first record (recordScript's upgrade)
//	ingress:producer:{id}     hash: project, source, principal, the counts,
//	                          first_time, last_time (unix ns), last_reason;
//	                          expires a dedupe TTL after its last message
//	                          or duplicate, like the recent lists: a
//	                          producer silent that long is no longer
//	                          counted against the bounds
const (
	keyMsg       = "ingress:msg:"
	keyRecent    = "ingress:recent:"
	keyProducers = "ingress:producers"
	keyProducer  = "ingress:producer:"
)

// records is the Redis side of the App and the server.
type records struct {
	st   *store.Store
	ttl  time.Duration
	kept int
	// now is the App's clock: the producers listed are those heard from
	// within ttl of it.
	now func() time.Time
	// maxProducers and maxProjectProducers are the Config's bounds.
	maxProducers, maxProjectProducers int
	// claimTTL is a claim's life without renewal (ClaimTTL by default).
	claimTTL time.Duration
	// renewTick, when set, paces the renewals of claims instead of a
	// ticker every third of claimTTL: a test renews at the moments it
	// chooses, not on a schedule a loaded machine may miss.
	renewTick <-chan time.Time
}

// producerID names a (project, source, principal) producer.
func producerID(project, source, principal string) string {
	sum := sha256.Sum256([]byte(project + "\n" + source + "\n" + principal))
	return hex.EncodeToString(sum[:16])
}

// overflowID is the id of project's overflow producer (recordScript); of
// no project's, the overflow producer's in all.
func overflowID(project string) string {
	if project == "" {
		return "overflow"
	}
	return "overflow:" + project
}

// duplicateScript counts a redelivery of a decided message: KEYS[1] the
// message's hash; ARGV the producer hash prefix, the time (ns), the
// credential's tag, the producers sets' key, the TTL (ms). A duplicate is
// its producer's message like any other: it keeps the producer's row (and
// its places in the sets it already has) alive for another TTL. Returns 1
// when the message was decided (and counted), 0 when not, 2 when a
// message with its key was decided for another credential (not counted:
// it is another producer's message).
var duplicateScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if (redis.call('HGET', KEYS[1], 'cred') or '') ~= ARGV[3] then return 2 end
redis.call('HINCRBY', KEYS[1], 'deliveries', 1)
local pid = redis.call('HGET', KEYS[1], 'producer')
if pid then
  local pk = ARGV[1] .. pid
  if redis.call('EXISTS', pk) == 1 then
    redis.call('HINCRBY', pk, 'duplicates', 1)
    redis.call('HSET', pk, 'last_time', ARGV[2])
    redis.call('PEXPIRE', pk, ARGV[5])
    local ms = math.floor(tonumber(ARGV[2]) / 1e6)
    local project = redis.call('HGET', pk, 'project') or ''
    for _, set in ipairs({ARGV[4], ARGV[4] .. ':' .. project}) do
      if redis.call('TYPE', set).ok == 'zset' then
        local had = redis.call('ZSCORE', set, pid)
        if had then
          if tonumber(had) < ms then redis.call('ZADD', set, ms, pid) end
          redis.call('PEXPIRE', set, ARGV[5])
        end
      end
    end
  end
end
return 1
`)

// Dedupe answers.
const (
	notDecided = iota
	duplicate
	otherCredential
)

// duplicate counts a redelivery when the message keyed key was decided for
// the credential tagged tag; see duplicateScript.
func (r *records) duplicate(ctx context.Context, key, tag string, now time.Time) (int, error) {
	n, err := duplicateScript.Run(ctx, r.st.Client(), []string{r.st.Key(keyMsg + key)},
		r.st.Key(keyProducer), now.UnixNano(), tag, r.st.Key(keyProducers), r.ttl.Milliseconds()).Int()
	if err != nil {
		return 0, fmt.Errorf("ingress: dedupe %s: %w", key, err)
	}
	return n, nil
}

// recordScript records one decision, once: KEYS = message hash, producers
// set, project's producers set (the set of no project's for ""), overflow
// producer's hash, project's recent list, all projects' recent list,
// producer hash prefix, message hash prefix; ARGV = rec, ttl ms, producer
// id, overflow id, max producers, outcome field, time ns, reason, kept,
// project, source, principal, overflow source, key, credential tag, max
// producers a project, the project's overflow id. A new producer past the
// project's bound is counted as the project's overflow producer, and one
// past the bound in all as the overflow producer of no project; the
// bounds count the producers heard from within the TTL (older ones are
// dropped from the sets first; their rows expire on their own). A message
// already recorded (a concurrent delivery won) is counted as a duplicate
// instead. Returns 1 when recorded, 0 when it was a duplicate.
var recordScript = redis.NewScript(`
local ttl = tonumber(ARGV[2])
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HINCRBY', KEYS[1], 'deliveries', 1)
  return 0
end
local nowms = math.floor(tonumber(ARGV[7]) / 1e6)
local cutoff = nowms - ttl
-- upgrade: a producers set written before producers expired is a plain
-- set whose members, and their rows, never went. It becomes the sorted
-- set by last time, once: a row silent past the TTL goes, the others
-- expire a TTL after their last message. The set of all turns the sets of
-- its members' projects over with it, so that no old set is left for want
-- of a later message of its project.
local function upgrade(set, all)
  if redis.call('TYPE', set).ok ~= 'set' then return end
  local ids = redis.call('SMEMBERS', set)
  local projects = {}
  if all then
    for _, id in ipairs(ids) do
      local p = redis.call('HGET', KEYS[7] .. id, 'project')
      if p then projects[p] = true end
    end
  end
  redis.call('DEL', set)
  for _, id in ipairs(ids) do
    local ms = math.floor((tonumber(redis.call('HGET', KEYS[7] .. id, 'last_time')) or 0) / 1e6)
    if ms > cutoff then
      redis.call('ZADD', set, ms, id)
      redis.call('PEXPIRE', KEYS[7] .. id, ms + ttl - nowms)
    else
      redis.call('DEL', KEYS[7] .. id)
    end
  end
  if redis.call('EXISTS', set) == 1 then redis.call('PEXPIRE', set, ttl) end
  for p in pairs(projects) do upgrade(KEYS[2] .. ':' .. p, false) end
end
upgrade(KEYS[2], true)
upgrade(KEYS[3], false)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', cutoff)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', cutoff)
local pid = ARGV[3]
local project, source, principal = ARGV[10], ARGV[11], ARGV[12]
local inProject = true
if not redis.call('ZSCORE', KEYS[2], pid) then
  if redis.call('ZCARD', KEYS[3]) >= tonumber(ARGV[16]) then
    pid, source, principal = ARGV[17], ARGV[13], ''
  end
  if not redis.call('ZSCORE', KEYS[2], pid) and redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[5]) then
    pid, source, principal, project, inProject = ARGV[4], ARGV[13], '', '', false
  end
end
local pk = KEYS[7] .. pid
redis.call('HSET', KEYS[1], 'rec', ARGV[1], 'deliveries', 1, 'producer', pid, 'cred', ARGV[15])
redis.call('PEXPIRE', KEYS[1], ttl)
-- Deliveries decided out of order keep the later time.
local sets = {KEYS[2]}
if inProject then sets[2] = KEYS[3] end
for _, set in ipairs(sets) do
  local had = redis.call('ZSCORE', set, pid)
  if not had or tonumber(had) < nowms then redis.call('ZADD', set, nowms, pid) end
  redis.call('PEXPIRE', set, ttl)
end
if redis.call('EXISTS', pk) == 0 then
  redis.call('HSET', pk, 'project', project, 'source', source, 'principal', principal, 'first_time', ARGV[7])
end
redis.call('HINCRBY', pk, 'received', 1)
redis.call('HINCRBY', pk, ARGV[6], 1)
redis.call('HSET', pk, 'last_time', ARGV[7])
redis.call('PEXPIRE', pk, ttl)
if ARGV[8] ~= '' then redis.call('HSET', pk, 'last_reason', ARGV[8]) end
local kept = tonumber(ARGV[9])
local listed = {}
if ARGV[10] ~= '' then listed[#listed + 1] = KEYS[5] end
listed[#listed + 1] = KEYS[6]
for i, list in ipairs(listed) do
  redis.call('LPUSH', list, ARGV[14])
  -- A message no list holds any more keeps only what dedupes it: its
  -- record is dropped, so that Redis holds ~200 bytes per message for the
  -- dedupe TTL, not the whole record.
  local dropped = redis.call('LRANGE', list, kept, -1)
  redis.call('LTRIM', list, 0, kept - 1)
  redis.call('PEXPIRE', list, ttl)
  for _, k in ipairs(dropped) do
    local still = false
    for j, other in ipairs(listed) do
      if j ~= i and redis.call('LPOS', other, k) then still = true end
    end
    if not still then redis.call('HDEL', KEYS[8] .. k, 'rec') end
  end
end
return 1
`)

// record stores the decision m (keyed key) and counts it for its producer,
// once: a second record of the same key counts a delivery instead.
func (r *records) record(ctx context.Context, key, tag string, m *loomv1.IngressMessage) (bool, error) {
	rec, err := protojson.Marshal(m)
	if err != nil {
		return false, err
	}
	project := m.GetProject()
	pid := producerID(project, m.GetSource(), m.GetPrincipal())
	reason := ""
	if m.GetOutcome() != OutcomeAccepted {
		reason = m.GetReason()
	}
	keys := []string{
		r.st.Key(keyMsg + key), r.st.Key(keyProducers), r.st.Key(keyProducers + ":" + project),
		r.st.Key(keyProducer + "overflow"), r.st.Key(keyRecent + project), r.st.Key(keyRecent + allProjects),
		r.st.Key(keyProducer), r.st.Key(keyMsg),
	}
	now := m.GetDecidedTime().AsTime().UnixNano()
	n, err := recordScript.Run(ctx, r.st.Client(), keys,
		rec, r.ttl.Milliseconds(), pid, overflowID(""), r.maxProducers, outcomeField(m.GetOutcome()), now,
		reason, r.kept, project, m.GetSource(), m.GetPrincipal(), OverflowSource, key, tag,
		r.maxProjectProducers, overflowID(project)).Int()
	if err != nil {
		return false, fmt.Errorf("ingress: record %s: %w", key, err)
	}
	return n == 1, nil
}

func outcomeField(outcome string) string {
	switch outcome {
	case OutcomeAccepted:
		return "accepted"
	case OutcomeRefused:
		return "refused"
	case OutcomeInvalid:
		return "invalid"
	}
	return "failed"
}

// recent reads the recent messages of project ("-": all), newest first;
// records expired since are skipped.
func (r *records) recent(ctx context.Context, project string) ([]*loomv1.IngressMessage, error) {
	keys, err := r.st.Client().LRange(ctx, r.st.Key(keyRecent+project), 0, int64(r.kept)-1).Result()
	if err != nil {
		return nil, fmt.Errorf("ingress: read recent messages: %w", err)
	}
	pipe := r.st.Client().Pipeline()
	cmds := make([]*redis.SliceCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.HMGet(ctx, r.st.Key(keyMsg+k), "rec", "deliveries")
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, fmt.Errorf("ingress: read recent messages: %w", err)
	}
	out := make([]*loomv1.IngressMessage, 0, len(keys))
	seen := make(map[string]bool, len(keys))
	for i, c := range cmds {
		vals, err := c.Result()
		if err != nil || len(vals) != 2 || vals[0] == nil || seen[keys[i]] {
			continue
		}
		seen[keys[i]] = true
		s, _ := vals[0].(string)
		m := &loomv1.IngressMessage{}
		if protojson.Unmarshal([]byte(s), m) != nil {
			continue
		}
		if d, _ := vals[1].(string); d != "" {
			m.Deliveries, _ = strconv.ParseInt(d, 10, 64)
		}
		out = append(out, m)
	}
	return out, nil
}

// producers reads the producers of project ("-": all) heard from within
// the TTL.
func (r *records) producers(ctx context.Context, project string) ([]*loomv1.IngressProducer, error) {
	set := keyProducers
	if project != allProjects {
		set += ":" + project
	}
	ids, err := r.st.Client().ZRange(ctx, r.st.Key(set), 0, -1).Result()
	if err != nil && strings.HasPrefix(err.Error(), "WRONGTYPE") {
		// A set of before producers expired, not yet upgraded by a record
		// (recordScript): its stale rows are left out below.
		ids, err = r.st.Client().SMembers(ctx, r.st.Key(set)).Result()
	}
	if err != nil {
		return nil, fmt.Errorf("ingress: read producers: %w", err)
	}
	since := r.now().Add(-r.ttl).UnixNano()
	pipe := r.st.Client().Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.HGetAll(ctx, r.st.Key(keyProducer+id))
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, fmt.Errorf("ingress: read producers: %w", err)
	}
	out := make([]*loomv1.IngressProducer, 0, len(ids))
	for _, c := range cmds {
		h, err := c.Result()
		if err != nil || len(h) == 0 {
			continue
		}
		n := func(k string) int64 { v, _ := strconv.ParseInt(h[k], 10, 64); return v }
		if n("last_time") <= since {
			continue // expired, or about to (the TTL runs on Redis' clock)
		}
		ts := func(k string) *timestamppb.Timestamp {
			v := n(k)
			if v == 0 || v == math.MinInt64 {
				return nil
			}
			return timestamppb.New(time.Unix(0, v))
		}
		out = append(out, &loomv1.IngressProducer{
			Project: h["project"], Source: h["source"], Principal: h["principal"],
			Received: n("received"), Accepted: n("accepted"), Refused: n("refused"), Invalid: n("invalid"),
			Failed: n("failed"), Duplicates: n("duplicates"), FirstTime: ts("first_time"), LastTime: ts("last_time"),
			LastReason: h["last_reason"],
		})
	}
	return out, nil
}

// keyTries prefixes the count of a message's deliveries, kept for the
// transports that do not count them (Pub/Sub without a dead-letter policy
// reports no delivery attempt).
const keyTries = "ingress:tries:"

// TriesTTL is how long a message's delivery count is kept after its last
// delivery: far longer than the MaxDeliveries deliveries of a message that
// keeps failing take (minutes), short enough that the counts of decided
// messages cost Redis little.
const TriesTTL = time.Hour

// delivered counts one more delivery of the message keyed key and returns
// how many there were.
func (r *records) delivered(ctx context.Context, key string) (int, error) {
	k := r.st.Key(keyTries + key)
	pipe := r.st.Client().TxPipeline()
	n := pipe.Incr(ctx, k)
	pipe.PExpire(ctx, k, TriesTTL)
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, fmt.Errorf("ingress: count delivery of %s: %w", key, err)
	}
	return int(n.Val()), nil
}

// keyClaim prefixes the claim a delivery holds while it decides its
// message (see claim).
const keyClaim = "ingress:claim:"

// ClaimTTL bounds how long a claim outlives a bridge that died holding it:
// a redelivery after it decides the message (the gateway's request id keeps
// that from applying it twice). A live bridge keeps its claim for as long
// as it decides (its calls alone may take longer: WhoAmI and four calls of
// up to 30 s each), renewing it every third of ClaimTTL (Config.ClaimTTL).
const ClaimTTL = 2 * time.Minute

// errClaimed says another delivery of the same message is being decided.
var errClaimed = errors.New("another delivery of this message is being decided")

// renewClaim and releaseClaim act on a claim only while it is still the
// caller's (its token): one that expired and was taken by another delivery
// is that one's.
var (
	renewClaim = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
`)
	releaseClaim = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)
)

// heldClaim is a claim this delivery holds (see claim).
type heldClaim struct {
	r     *records
	key   string
	token string
	stop  chan struct{}
	done  chan struct{}
}

// claim makes this delivery the one that decides the message keyed key:
// Pub/Sub may hand out several copies of one message at once (and a
// producer may publish it several times), and without a claim each copy
// would call the gateway and answer with its own result. A copy that finds
// the claim held returns errClaimed, is redelivered later, and is then a
// duplicate. The claim is renewed until end is called; end(false) gives it
// up when deciding failed, so that the redelivery need not wait for the
// claim's TTL; a decided message keeps its claim until it expires (its
// record answers every later copy).
func (r *records) claim(ctx context.Context, key string) (*heldClaim, error) {
	k := r.st.Key(keyClaim + key)
	token := envelope.NewID()
	ok, err := r.st.Client().SetNX(ctx, k, token, r.claimTTL).Result()
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errClaimed
	}
	c := &heldClaim{r: r, key: k, token: token, stop: make(chan struct{}), done: make(chan struct{})}
	go c.renew(context.WithoutCancel(ctx))
	return c, nil
}

// renew extends the claim every third of its TTL until end.
func (c *heldClaim) renew(ctx context.Context) {
	defer close(c.done)
	tick := c.r.renewTick
	if tick == nil {
		t := time.NewTicker(c.r.claimTTL / 3)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-c.stop:
			return
		case <-tick:
			rctx, cancel := context.WithTimeout(ctx, c.r.claimTTL/3)
			n, err := renewClaim.Run(rctx, c.r.st.Client(), []string{c.key}, c.token, c.r.claimTTL.Milliseconds()).Int()
			cancel()
			if err == nil && n == 0 {
				return // expired (Redis unreachable for a TTL) and maybe another's now
			}
		}
	}
}

// end stops renewing the claim and, unless the message was decided, gives
// it up.
func (c *heldClaim) end(decided bool) {
	close(c.stop)
	<-c.done
	if !decided {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = releaseClaim.Run(ctx, c.r.st.Client(), []string{c.key}, c.token).Err()
	}
}

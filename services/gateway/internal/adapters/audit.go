package adapters

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/errs"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/guard"
)

// The audit trail in Redis (relative to the store's prefix). Per project P
// (guard.NoProject, "-", for calls that name none):
const (
	// KeyAuditPrefix + P is a sorted set (every score 0) of AuditKey
	// members: newest first in lexical order.
	KeyAuditPrefix = "audit:"
	// KeyAuditRecordsPrefix + P is a hash: AuditKey → loom.v1.AuditRecord.
	KeyAuditRecordsPrefix = "audit:records:"
	// KeyAuditProjects is a set of the trails with records: each project's
	// (and "-"), and beside it P + RefusedTrail.
	KeyAuditProjects = "audit:projects"
	// RefusedTrail is the suffix of the trail that keeps the records of a
	// project's calls that were not done (refused, guard.Denied or
	// guard.Rejected, or let through and failed, guard.Failed) apart from
	// those of what was done,
	// each trail capped on its own: a flood of calls that do nothing
	// (refused, or failed on purpose with a deadline of a nanosecond),
	// even a member's, pushes out only older such records, never a record
	// of what was done.
	RefusedTrail = "/refused"
)

// auditTrail is the trail rec is kept in: its project's ("-" for none)
// for a call that was done, else beside it the project's calls not done.
func auditTrail(rec *loomv1.AuditRecord) string {
	project := rec.GetProject()
	if project == "" {
		project = "-"
	}
	if d := rec.GetDecision(); d == guard.Denied || d == guard.Rejected || d == guard.Failed {
		return project + RefusedTrail
	}
	return project
}

// AuditKey is a record's list key: the nanoseconds left until the end of
// int64 time (zero-padded, so that lexical order is newest first) and its
// id. It is the key AIP-158 paging continues after.
func AuditKey(r *loomv1.AuditRecord) string {
	return fmt.Sprintf("%019d:%s", math.MaxInt64-r.GetTime().AsTime().UnixNano(), r.GetId())
}

// auditAdd adds one record and trims the project's trail: members past
// the retention cutoff (lexically after ARGV[3]) and past the max count.
// Adding a record twice changes nothing (a redelivered event).
var auditAdd = redis.NewScript(`
redis.call('ZADD', KEYS[1], 0, ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('SADD', KEYS[3], ARGV[5])
local function drop(list)
  for i = 1, #list, 500 do
    local chunk = {}
    for j = i, math.min(i + 499, #list) do chunk[#chunk + 1] = list[j] end
    redis.call('ZREM', KEYS[1], unpack(chunk))
    redis.call('HDEL', KEYS[2], unpack(chunk))
  end
end
drop(redis.call('ZRANGEBYLEX', KEYS[1], '(' .. ARGV[3], '+', 'LIMIT', 0, 5000))
local max = tonumber(ARGV[4])
if max > 0 and redis.call('ZCARD', KEYS[1]) > max then
  drop(redis.call('ZRANGE', KEYS[1], max, max + 4999))
end
return 1
`)

// PutAudit stores rec in its trail (auditTrail: its project's, project ""
// stored as "-", or that project's refusals), then drops what is older
// than retention before now and what is past maxPerProject records of
// that trail (newest kept).
func (r *Repo) PutAudit(ctx context.Context, rec *loomv1.AuditRecord, now time.Time, retention time.Duration, maxPerProject int) error {
	project := auditTrail(rec)
	b, err := proto.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode audit record %s: %w", rec.GetId(), err)
	}
	cutoff := fmt.Sprintf("%019d:~", math.MaxInt64-now.Add(-retention).UnixNano())
	keys := []string{r.st.Key(KeyAuditPrefix + project), r.st.Key(KeyAuditRecordsPrefix + project), r.st.Key(KeyAuditProjects)}
	if err := auditAdd.Run(ctx, r.st.Client(), keys, AuditKey(rec), b, cutoff, maxPerProject, project).Err(); err != nil {
		return fmt.Errorf("audit record %s: %w: %w", rec.GetId(), errs.Unavailable, err)
	}
	return nil
}

// auditChunk is how many keys ListAudit reads at once.
const auditChunk = 256

// MaxAuditScan bounds the records one ListAudit reads per trail: a filter
// that matches few (a principal's, in 100,000 records a trail) must not
// make one call read whole trails. Past it the call answers what it found
// and where to go on from.
const MaxAuditScan = 10000

// ListAudit returns, newest first, up to limit records of project (its
// refusals' trail with them; "-" included, "" for every trail) whose key
// comes after after and that keep (nil: all): a caller that asks for one
// more than its page learns whether more follow. Reading at most
// MaxAuditScan records a trail, it may stop before it has limit records:
// then resume is the key to go on after (every record up to it was read;
// those past it are left out, to be read then), else "".
func (r *Repo) ListAudit(ctx context.Context, project, after string, limit int, keep func(*loomv1.AuditRecord) bool) (recs []*loomv1.AuditRecord, resume string, err error) {
	projects := []string{project, project + RefusedTrail}
	if project == "" {
		if projects, err = r.st.SMembers(ctx, KeyAuditProjects); err != nil {
			return nil, "", fmt.Errorf("audit projects: %w: %w", errs.Unavailable, err)
		}
	}
	var out []*loomv1.AuditRecord
	for _, p := range projects {
		got, stopped, err := r.listAuditProject(ctx, p, after, limit, keep)
		if err != nil {
			return nil, "", err
		}
		out = append(out, got...)
		if stopped != "" && (resume == "" || stopped < resume) {
			resume = stopped
		}
	}
	sort.Slice(out, func(i, j int) bool { return AuditKey(out[i]) < AuditKey(out[j]) })
	if resume != "" {
		// Only what every trail was read up to: a record past it in one
		// trail may be preceded by unread ones of another.
		n := sort.Search(len(out), func(i int) bool { return AuditKey(out[i]) > resume })
		out = out[:n]
	}
	if len(out) > limit {
		out, resume = out[:limit], ""
	}
	return out, resume, nil
}

// listAuditProject reads one trail from after on, until it has limit
// records that keep accepts, or its end, or MaxAuditScan records read:
// then stopped is the last key read.
func (r *Repo) listAuditProject(ctx context.Context, project, after string, limit int, keep func(*loomv1.AuditRecord) bool) (out []*loomv1.AuditRecord, stopped string, err error) {
	rdb := r.st.Client()
	zkey, hkey := r.st.Key(KeyAuditPrefix+project), r.st.Key(KeyAuditRecordsPrefix+project)
	from := "-"
	if after != "" {
		from = "(" + after
	}
	read := 0
	for len(out) < limit {
		if read >= MaxAuditScan {
			return out, strings.TrimPrefix(from, "("), nil
		}
		count := min(auditChunk, MaxAuditScan-read)
		keys, err := rdb.ZRangeByLex(ctx, zkey, &redis.ZRangeBy{Min: from, Max: "+", Count: int64(count)}).Result()
		if err != nil {
			return nil, "", fmt.Errorf("audit trail of %s: %w: %w", project, errs.Unavailable, err)
		}
		if len(keys) == 0 {
			break
		}
		read += len(keys)
		vals, err := rdb.HMGet(ctx, hkey, keys...).Result()
		if err != nil {
			return nil, "", fmt.Errorf("audit trail of %s: %w: %w", project, errs.Unavailable, err)
		}
		for _, v := range vals {
			s, ok := v.(string)
			if !ok {
				continue // trimmed between the two reads
			}
			rec := &loomv1.AuditRecord{}
			if err := proto.Unmarshal([]byte(s), rec); err != nil {
				return nil, "", fmt.Errorf("decode audit record: %w", err)
			}
			if keep == nil || keep(rec) {
				out = append(out, rec)
			}
		}
		from = "(" + keys[len(keys)-1]
		if len(keys) < count {
			break
		}
	}
	return out, "", nil
}

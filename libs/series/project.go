package series

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// A project's count of points (Limits.ProjectPoints). Its keys share the
// project's hash slot, outside any job's, so a job's append (one script in
// the job's slot) cannot update it in the same step: Append reads the
// count before its script and syncs the job's entry after it.
//
//	{prefix}metrics-project:{project}             hash: job -> the points it keeps, as last synced
//	{prefix}metrics-project:{project}:total       string: the sum of the hash's entries
//	{prefix}metrics-project:{project}:gone:{job}  string, expiring: the job was swept (tombstone)
//
// A sync never lowers a job's entry: a job's points only grow until its
// series are deleted, so a sync that arrives late or out of order (two
// appliers of one job: the consumer and a release of held batches) never
// undoes a later one. A crash between an append and its sync leaves the
// count short by that append until the job's next append, or the same
// record's redelivery, syncs it again; the count is never above what the
// jobs keep. A swept job's tombstone stops the sync of an append that ran
// before the sweep's marker from counting it again.

// projectOf is the project of a job id "projects/{p}/jobs/{id}"; ids of
// another shape (not the training service's: it stores only job names)
// count as one project, "".
func projectOf(job string) string {
	if rest, ok := strings.CutPrefix(job, "projects/"); ok {
		if p, _, ok := strings.Cut(rest, "/"); ok {
			return p
		}
	}
	return ""
}

func (s *Store) projectKeys(job string) []string {
	base := s.prefix + "metrics-project:{" + projectOf(job) + "}"
	return []string{base, base + ":total", base + ":gone:" + job}
}

// projectSyncScript sets a job's entry to ARGV[2] points when that is
// more than it holds and the job has no tombstone, and moves the total by
// the difference: the total is always the sum of the entries.
var projectSyncScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[3]) == 1 then return 0 end
local old = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
local new = tonumber(ARGV[2])
if new <= old then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], new)
redis.call('INCRBY', KEYS[2], new - old)
return 1`)

// projectDropScript removes a job's entry and its points from the total;
// with ARGV[2] > 0, it leaves the job's tombstone for that many ms.
var projectDropScript = redis.NewScript(`
local old = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
redis.call('HDEL', KEYS[1], ARGV[1])
if old ~= 0 then redis.call('DECRBY', KEYS[2], old) end
if tonumber(ARGV[2]) > 0 then redis.call('SET', KEYS[3], '1', 'PX', ARGV[2]) end
return old`)

// syncProject records that job keeps points (the job's count after an
// append) in its project's count.
func (s *Store) syncProject(ctx context.Context, job string, points int64) error {
	if points <= 0 {
		return nil
	}
	if err := projectSyncScript.Run(ctx, s.rdb, s.projectKeys(job), job, points).Err(); err != nil {
		return fmt.Errorf("metrics of %s: the project's count: %w", job, err)
	}
	return nil
}

// dropFromProject takes a deleted job's points out of its project's
// count; swept leaves its tombstone for Limits.Late (the swept marker's
// life: no append is taken before it ends).
func (s *Store) dropFromProject(ctx context.Context, job string, swept bool) error {
	var ttl int64
	if swept {
		ttl = s.lim.Late.Milliseconds()
	}
	if err := projectDropScript.Run(ctx, s.rdb, s.projectKeys(job), job, ttl).Err(); err != nil {
		return fmt.Errorf("metrics of %s: the project's count: %w", job, err)
	}
	return nil
}

// ProjectPoints is how many points project's jobs keep together, as last
// synced: the count Limits.ProjectPoints bounds.
func (s *Store) ProjectPoints(ctx context.Context, project string) (int64, error) {
	n, err := s.rdb.Get(ctx, s.prefix+"metrics-project:{"+project+"}:total").Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("metrics of project %q: %w", project, err)
	}
	return n, nil
}

// CountStored syncs every job's points kept into its project's count, by
// a SCAN of the jobs' counts (at most limit jobs; 0: all), and returns how
// many jobs it read. Series stored before the projects were counted are
// counted then; it is safe at any time, beside appends (a sync never lowers
// an entry). The training service runs it once at start-up.
func (s *Store) CountStored(ctx context.Context, limit int) (int, error) {
	pattern := s.prefix + "metrics:{*}:points"
	n := 0
	iter := s.rdb.Scan(ctx, 0, pattern, 1000).Iterator()
	for iter.Next(ctx) {
		key := iter.Val()
		job, ok := strings.CutPrefix(key, s.prefix+"metrics:{")
		if !ok {
			continue
		}
		job, ok = strings.CutSuffix(job, "}:points")
		if !ok || validJob(job) != nil {
			continue
		}
		points, err := s.rdb.Get(ctx, key).Int64()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return n, fmt.Errorf("metrics of %s: %w", job, err)
		}
		if err := s.syncProject(ctx, job, points); err != nil {
			return n, err
		}
		if n++; limit > 0 && n >= limit {
			break
		}
	}
	if err := iter.Err(); err != nil {
		return n, fmt.Errorf("stored metrics: %w", err)
	}
	return n, nil
}

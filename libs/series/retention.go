package series

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Retention bounds and default.
const (
	// DefaultRetention is how long a job's series outlive the job's end:
	// long enough to compare a month of runs and to read a finished study's
	// trials, short enough that a busy cluster's Redis stays bounded.
	DefaultRetention = 30 * 24 * time.Hour
	// MinRetention and MaxRetention bound a retention other than 0 (keep
	// forever): under an hour a late measurement (another topic than the
	// job's end) could outlive the series it belongs to.
	MinRetention = time.Hour
	MaxRetention = 10 * 365 * 24 * time.Hour
	// MaxSweep is the most jobs one Sweep may delete.
	MaxSweep = 1000
)

// endedKey is the sorted set job -> end time (unix ms) of ended jobs whose
// series are still kept. It is one key outside any job's hash slot: it is
// written and read one command at a time, never in a script with a job's
// keys.
func (s *Store) endedKey() string { return s.prefix + "metrics:ended" }

// Ended records that job ended at end: its series are due for deletion
// once end is older than the retention (Sweep). A later Ended moves the
// time (a job that ran again). Idempotent. A bad job id is InvalidArgument.
func (s *Store) Ended(ctx context.Context, job string, end time.Time) error {
	if err := validJob(job); err != nil {
		return err
	}
	err := s.rdb.ZAdd(ctx, s.endedKey(), redis.Z{Score: float64(end.UnixMilli()), Member: job}).Err()
	if err != nil {
		return fmt.Errorf("end of %s: %w", job, err)
	}
	return nil
}

// Running records that job runs (again: a requeued job): its series are
// not due for deletion, whatever Ended said before. Idempotent.
func (s *Store) Running(ctx context.Context, job string) error {
	if err := s.rdb.ZRem(ctx, s.endedKey(), job).Err(); err != nil {
		return fmt.Errorf("end of %s: %w", job, err)
	}
	return nil
}

// forgetScript removes a job from the ended set only if its end is still
// at or before the cutoff, so that a job that ended again (rescored) while
// its old series were deleted stays due for its new end.
var forgetScript = redis.NewScript(`
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if s and tonumber(s) <= tonumber(ARGV[2]) then redis.call('ZREM', KEYS[1], ARGV[1]) end
return 0`)

// Sweep deletes the series of at most limit jobs (1..MaxSweep; others are
// clamped) that ended at or before now-retention, oldest first, and returns
// how many it deleted. retention 0 keeps everything (returns 0). It is
// idempotent and safe to interrupt: a job leaves the ended set only after
// its series are gone, so a sweep cut short redoes it the next time. Each
// swept job keeps an expiry marker for Limits.Late: a late write is then
// refused (Result.Swept, ReasonSwept) rather than starting a partial
// series; after it, the job's placement is gone too, so a write is held
// and expires (ReasonHeldExpired).
func (s *Store) Sweep(ctx context.Context, now time.Time, retention time.Duration, limit int) (int, error) {
	if retention <= 0 {
		return 0, nil
	}
	limit = min(MaxSweep, max(limit, 1))
	cutoff := now.Add(-retention).UnixMilli()
	jobs, err := s.rdb.ZRangeArgs(ctx, redis.ZRangeArgs{Key: s.endedKey(), ByScore: true,
		Start: "-inf", Stop: fmt.Sprint(cutoff), Count: int64(limit)}).Result()
	if err != nil {
		return 0, fmt.Errorf("ended jobs: %w", err)
	}
	for i, job := range jobs {
		// The expiry marker first: from then on no append (it checks the
		// marker in its script) recreates a partial series, whatever
		// arrives between here and the delete or later (Limits.Late).
		if err := s.rdb.Set(ctx, s.key(job, "swept"), now.UnixMilli(), s.lim.Late).Err(); err != nil {
			return i, fmt.Errorf("metrics of %s: swept marker: %w", job, err)
		}
		if err := s.delete(ctx, job, true); err != nil {
			return i, err
		}
		if err := forgetScript.Run(ctx, s.rdb, []string{s.endedKey()}, job, cutoff).Err(); err != nil {
			return i, fmt.Errorf("end of %s: %w", job, err)
		}
	}
	return len(jobs), nil
}

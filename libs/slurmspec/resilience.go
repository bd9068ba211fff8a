package slurmspec

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// Loom's own job options for hardware resilience, which Slurm has none of:
// sbatch's --retries, --hang-timeout and --checkpoint-dir, and the Job
// fields max_retries, hang_timeout_seconds and checkpoint_dir they set. The
// gateway refuses a job out of these bounds, the commands check them before
// they send, and the scheduler clamps to them, so that a value that got past
// the others still means something bounded.

// MaxRetries is the most Job.max_retries (sbatch --retries) may be: how
// many failures of the job's own program are retried.
const MaxRetries = 100

// HangTimeoutOff is the Job.hang_timeout_seconds that turns hang detection
// off for the job, whatever the cluster's default (0 is that default).
const HangTimeoutOff = -1

// MaxHangTimeoutSeconds is the longest hang timeout: a week. Hang detection
// is there to notice, within minutes, a run that stopped making progress;
// no training step or output is silent for a week, so a longer one is a
// typo (and one past 292 years would overflow a duration).
const MaxHangTimeoutSeconds = 7 * 24 * 3600

// CheckHangTimeout checks a Job.hang_timeout_seconds: HangTimeoutOff, 0 (the
// cluster's default) or 1 to MaxHangTimeoutSeconds.
func CheckHangTimeout(seconds int64) error {
	if seconds < HangTimeoutOff || seconds > MaxHangTimeoutSeconds {
		return fmt.Errorf("%d is not -1 (off), 0 (the cluster's default) or 1 to %d seconds (a week)", seconds, MaxHangTimeoutSeconds)
	}
	return nil
}

// ParseHangTimeout parses sbatch's --hang-timeout: a time as --time takes
// it ("10" minutes, "5:00", "1:00:00", "1-0"), "0" for the cluster's
// default, or "UNLIMITED", "INFINITE", "-1" or "off" (any case) for none:
// the seconds to put in Job.hang_timeout_seconds.
func ParseHangTimeout(s string) (int64, error) {
	if strings.EqualFold(strings.TrimSpace(s), "off") {
		return HangTimeoutOff, nil
	}
	secs, unlimited, err := ParseTimeLimit(s)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%v: expected a time like --time's (minutes, MM:SS, HH:MM:SS, D-HH, ...), 0 for the cluster's default, or off", err)
	case unlimited:
		return HangTimeoutOff, nil
	case secs > MaxHangTimeoutSeconds:
		return 0, fmt.Errorf("%d seconds is more than a week (7-0), the longest hang timeout", secs)
	}
	return secs, nil
}

// CheckCheckpointDir checks a Job.checkpoint_dir: empty (the default), an
// absolute path, or a relative one that stays under the cluster's shared
// directory ("ckpt/run1", not "../other"), which is where the scheduler
// puts a relative one.
func CheckCheckpointDir(dir string) error {
	if dir == "" || filepath.IsAbs(dir) {
		return nil
	}
	if !filepath.IsLocal(dir) {
		return errors.New("leaves the cluster's shared directory: give an absolute path, or a relative one without ..")
	}
	return nil
}

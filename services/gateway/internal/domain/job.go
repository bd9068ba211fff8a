package domain

import (
	"strconv"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Rank orders job states by progress within one attempt: waiting (0),
// CONFIGURING (1), RUNNING and REQUEUED (2), COMPLETING (3), ended (4). Only
// 0 means "not started"; a watcher uses the order (with Newer) to drop a
// change older than a state it already sent.
func Rank(s loomv1.JobState) int {
	switch {
	case s.Terminal():
		return 4
	case s == loomv1.JobState_PENDING || s == loomv1.JobState_JOB_STATE_UNSPECIFIED:
		return 0
	case s == loomv1.JobState_CONFIGURING:
		return 1
	case s == loomv1.JobState_COMPLETING:
		return 3
	}
	return 2
}

// Older reports whether next is an older view of a job than last: an
// earlier attempt (fewer restarts), or the same attempt at an earlier
// state. A requeued job's return to PENDING counts a restart, so it is newer
// than the run it left.
func Older(next, last *loomv1.Job) bool {
	if next.GetRestartCount() != last.GetRestartCount() {
		return next.GetRestartCount() < last.GetRestartCount()
	}
	return Rank(next.GetState()) < Rank(last.GetState())
}

func itoa(i int) string { return strconv.Itoa(i) }

func itoa64(i int64) string { return strconv.FormatInt(i, 10) }

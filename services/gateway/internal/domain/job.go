package domain

import (
	"strconv"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// IsTerminal reports whether a job in state s will never change again.
func IsTerminal(s loomv1.JobState) bool {
	switch s {
	case loomv1.JobState_COMPLETED, loomv1.JobState_FAILED, loomv1.JobState_CANCELLED,
		loomv1.JobState_TIMEOUT, loomv1.JobState_NODE_FAIL, loomv1.JobState_OUT_OF_MEMORY,
		loomv1.JobState_PREEMPTED:
		return true
	}
	return false
}

// Rank orders job states by progress: waiting (0), running (1), ended (2). A
// watcher uses it to drop a change older than a state it already sent.
func Rank(s loomv1.JobState) int {
	switch {
	case IsTerminal(s):
		return 2
	case s == loomv1.JobState_PENDING || s == loomv1.JobState_JOB_STATE_UNSPECIFIED:
		return 0
	}
	return 1
}

func itoa(i int) string { return strconv.Itoa(i) }

func itoa64(i int64) string { return strconv.FormatInt(i, 10) }

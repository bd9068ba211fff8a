package views

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Run is what a run record says of one attempt of a job, as sacct shows it.
type Run struct {
	// Hostnames are the nodes it ran on, in rank order.
	Hostnames []string
	ExitCode  int32
	// ExitSignal is the signal that ended it (0: it exited; nil: not known).
	ExitSignal *int32
	Reason     string
	// Start is when it started (zero: not yet); End and Outcome how it
	// ended, meaningful when Ended.
	Start, End time.Time
	Ended      bool
	Outcome    loomv1.JobState
	// BatchUsage is what its batch script used (nil: not reported).
	BatchUsage *loomv1.TaskUsage
	// BatchExitCode and BatchExitSignal are how its batch script itself
	// ended (BatchExitSignal nil: not ended, or not known how).
	BatchExitCode   int32
	BatchExitSignal *int32
	// DerivedExit is its DerivedExitCode as a wait(2) status (code<<8, or
	// the signal), shown once it started (nil: not known).
	DerivedExit *int32
}

// DerivedExit splits a wait(2) status as DerivedExitCode shows it (code<<8,
// or the signal) into Job.derived_exit_code and derived_exit_signal.
func DerivedExit(status int32) (code, signal *int32) {
	return proto.Int32(status >> 8), proto.Int32(status & 0x7f)
}

// JobRuns is Job.runs: attempts 1..attempts as run finds them (ok false: no
// record, skipped), oldest first; an attempt not ended yet shows the job's
// state.
func JobRuns(attempts int32, state loomv1.JobState, run func(attempt int32) (Run, bool)) []*loomv1.JobRun {
	var out []*loomv1.JobRun
	for a := int32(1); a <= attempts; a++ {
		r, ok := run(a)
		if !ok {
			continue
		}
		jr := &loomv1.JobRun{Attempt: a, Nodes: append([]string(nil), r.Hostnames...), ExitCode: r.ExitCode, Reason: r.Reason,
			BatchUsage: r.BatchUsage}
		if r.ExitSignal != nil && r.Ended {
			jr.ExitSignal = proto.Int32(*r.ExitSignal)
		}
		if r.BatchExitSignal != nil {
			jr.BatchExitCode, jr.BatchExitSignal = proto.Int32(r.BatchExitCode), proto.Int32(*r.BatchExitSignal)
		}
		if !r.Start.IsZero() {
			jr.StartTime = timestamppb.New(r.Start)
			if r.DerivedExit != nil {
				jr.DerivedExitCode, jr.DerivedExitSignal = DerivedExit(*r.DerivedExit)
			}
		}
		if r.Ended {
			jr.State, jr.EndTime = r.Outcome, timestamppb.New(r.End)
		} else {
			jr.State = state
		}
		out = append(out, jr)
	}
	return out
}

// WithAvoided is placement, a pending job's Job.placement, naming host,
// the node the job keeps off at its next start because its last run never
// launched there (the scheduler's JobRecord.Avoid): the user's --exclude
// and the nodes excluded after failures are shown elsewhere (ExcNodeList,
// Job.excluded_nodes), and this node is neither. Placement counts no node
// under it, so it is said in words, after the rest.
func WithAvoided(placement, host string) string {
	note := "avoiding " + host + " (its last run never launched there; used only when no other node has room)"
	if placement == "" {
		return note
	}
	return placement + "; " + note
}

// Explain writes a pass's decision for a pending job as Job.placement: "12
// nodes filtered: InsufficientGPUs 8, NodeDrained 3, Excluded 1; preempting
// 1 job(s)" from the nodes looked at, the nodes each check filtered (most
// first) and a note; the note alone for a decision taken without looking at
// nodes.
func Explain(nodes int, filtered map[string]int, note string) string {
	if nodes == 0 && len(filtered) == 0 && note != "" {
		return note
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d nodes", nodes)
	if len(filtered) > 0 {
		keys := make([]string, 0, len(filtered))
		for k := range filtered {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(a, b int) bool {
			if filtered[keys[a]] != filtered[keys[b]] {
				return filtered[keys[a]] > filtered[keys[b]]
			}
			return keys[a] < keys[b]
		})
		b.WriteString(" filtered:")
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, " %s %d", k, filtered[k])
		}
	}
	if note != "" {
		b.WriteString("; " + note)
	}
	return b.String()
}

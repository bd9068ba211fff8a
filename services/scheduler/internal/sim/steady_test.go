package sim

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/loom-ml/loom/services/scheduler/internal/domain"
)

// TestSteadyPassesMatchRestored runs steady passes a second apart over one
// committed cycle state, as a live scheduler's come (each reuses and mends
// the last pass's order as aging and fair share move jobs), and checks each
// decides exactly what the same state restored afresh decides at that
// instant (which orders its queue from scratch): every event, decision and
// reservation.
func TestSteadyPassesMatchRestored(t *testing.T) {
	t.Parallel()
	for _, cfg := range []CycleConfig{{Nodes: 300, Pending: 4000, Policy: "loom"}, {Nodes: 64, Pending: 1500, Partitions: 2, Policy: "loom"}} {
		st, _, err := CycleState(cfg)
		if err != nil {
			t.Fatal(err)
		}
		now := Epoch.Add(24 * time.Hour)
		st.Commit(st.Schedule(now))
		for step := 1; step <= 12; step++ {
			at := now.Add(time.Duration(step) * time.Second)
			if step > 6 {
				at = at.Add(time.Duration(step) * 7 * time.Minute) // bigger moves too
			}
			got := st.Schedule(at)
			fresh := domain.NewState(st.Config())
			fresh.Restore(st.Snapshot())
			want := fresh.Schedule(at)
			var g, w strings.Builder
			writeChange(&g, "pass", got)
			writeChange(&w, "pass", want)
			if g.String() != w.String() {
				t.Fatalf("%dx%d, pass %d (%v): the reused queue's pass differs from a restored state's\n%s",
					cfg.Nodes, cfg.Pending, step, at, firstDiff(g.String(), w.String()))
			}
		}
	}
}

// firstDiff is the first line where a and b differ, from each.
func firstDiff(a, b string) string {
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(la), len(lb)) {
		if la[i] != lb[i] {
			return fmt.Sprintf("line %d:\n got  %s\n want %s", i+1, la[i], lb[i])
		}
	}
	return fmt.Sprintf("%d lines, want %d", len(la), len(lb))
}

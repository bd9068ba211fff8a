package sim

import (
	"testing"
	"time"

	"github.com/loom-ml/loom/services/scheduler/internal/domain"
)

// BenchmarkLoad times a restart's load (Cycle's "load"): a fresh state
// restored from the records a committed first pass left (every pending job
// with its reason), 10,000 nodes and 100,000 pending jobs.
func BenchmarkLoad(b *testing.B) {
	st, _, err := CycleState(CycleConfig{Nodes: 10000, Pending: 100000, Policy: "loom"})
	if err != nil {
		b.Fatal(err)
	}
	st.Commit(st.Schedule(Epoch.Add(24 * time.Hour)))
	snap := st.Snapshot()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		fresh := domain.NewState(st.Config())
		fresh.Restore(snap)
	}
}

package sim

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/loom-ml/loom/services/scheduler/internal/domain"
)

func TestCycle(t *testing.T) {
	t.Parallel()
	r, err := Cycle(context.Background(), CycleConfig{Nodes: 40, Pending: 400, Policy: "fifo", Repeat: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r.GPUs != 320 || r.Running == 0 || r.Started == 0 || r.Emits < 400 || r.First <= 0 || r.Steady <= 0 {
		t.Errorf("result %+v", *r)
	}
	for _, c := range []struct {
		cfg  CycleConfig
		want string
	}{
		{CycleConfig{Nodes: 0, Pending: 1}, "nodes must be at least 1"},
		{CycleConfig{Nodes: 2, Pending: 1, Partitions: 3}, "partitions must be 1..nodes"},
		{CycleConfig{Nodes: 8, Pending: 1, Busy: 2}, "busy must be between 0 and 1"},
		{CycleConfig{Nodes: 8, Pending: 1, Policy: "sjf"}, "unknown policy"},
	} {
		if _, err := Cycle(context.Background(), c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Cycle(%+v): %v, want %q", c.cfg, err, c.want)
		}
	}
}

// BenchmarkCycle times one full scheduling pass (State.Schedule) over the
// states of the report's grid: nodes of 8 GPUs, 90% busy, and a queue of
// mixed pending jobs. "first" is the pass over a freshly loaded queue,
// "steady" the pass after it was committed.
func BenchmarkCycle(b *testing.B) {
	for _, size := range [][2]int{{1000, 10000}, {1000, 100000}, {10000, 10000}, {10000, 100000}} {
		for _, policy := range Policies {
			cfg := CycleConfig{Nodes: size[0], Pending: size[1], Policy: policy}
			name := fmt.Sprintf("nodes=%d/jobs=%d/%s", size[0], size[1], policy)
			b.Run(name+"/first", func(b *testing.B) {
				st, _, err := CycleState(cfg)
				if err != nil {
					b.Skip(err)
				}
				now := Epoch.Add(24 * 3600e9)
				// Every pass a first one: on a fresh copy of the state
				// (restored untimed), as Cycle times it.
				built := st.Snapshot()
				b.ResetTimer()
				for b.Loop() {
					b.StopTimer()
					st = domain.NewState(st.Config())
					st.Restore(built)
					b.StartTimer()
					st.Schedule(now)
				}
			})
			b.Run(name+"/steady", func(b *testing.B) {
				st, _, err := CycleState(cfg)
				if err != nil {
					b.Skip(err)
				}
				now := Epoch.Add(24 * 3600e9)
				st.Commit(st.Schedule(now))
				// Each pass a second after the last, as a real scheduler's
				// passes come at new instants.
				steps := 0
				b.ResetTimer()
				for b.Loop() {
					steps++
					st.Schedule(now.Add(time.Duration(steps) * time.Second))
				}
			})
		}
	}
}

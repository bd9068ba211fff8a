package sim

import (
	"runtime"
	"testing"
	"time"

	"github.com/loom-ml/loom/services/scheduler/internal/domain"
)

// BenchmarkLoad times a restart's load as Cycle's "load" column does: a
// fresh state restored from the records a committed first pass left (every
// pending job with its reason), 10,000 nodes and 100,000 pending jobs, after
// an untimed collection (the load pays for its own garbage, not for the
// state before it). cpu-ms/op is the process's CPU time, collection
// included.
func BenchmarkLoad(b *testing.B) {
	st, _, err := CycleState(CycleConfig{Nodes: 10000, Pending: 100000, Policy: "loom"})
	if err != nil {
		b.Fatal(err)
	}
	st.Commit(st.Schedule(Epoch.Add(24 * time.Hour)))
	snap := st.Snapshot()
	b.ReportAllocs()
	var cpu time.Duration
	var fresh *domain.State
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		fresh = nil
		runtime.GC()
		c := processCPU()
		b.StartTimer()
		fresh = domain.NewState(st.Config())
		fresh.Restore(snap)
		b.StopTimer()
		cpu += processCPU() - c
		b.StartTimer()
	}
	b.ReportMetric(float64(cpu.Microseconds())/1e3/float64(b.N), "cpu-ms/op")
	runtime.KeepAlive(fresh)
}

// BenchmarkLoadPasses times, in CPU, the passes around a load: "first" on a
// fresh state restored from the built records (as Cycle's first pass),
// "restart" a second after the first pass on a state restored from what
// it left (as Cycle's pass after a restart); each after an untimed load
// and collection, so that a change to Load shows what it does to them.
func BenchmarkLoadPasses(b *testing.B) {
	st, _, err := CycleState(CycleConfig{Nodes: 10000, Pending: 100000, Policy: "loom"})
	if err != nil {
		b.Fatal(err)
	}
	now := Epoch.Add(24 * time.Hour)
	built := st.Snapshot()
	st.Commit(st.Schedule(now))
	left := st.Snapshot()
	for _, c := range []struct {
		name string
		snap domain.Snapshot
		at   time.Time
	}{{"first", built, now}, {"restart", left, now.Add(time.Second)}} {
		b.Run(c.name, func(b *testing.B) {
			var cpu time.Duration
			for b.Loop() {
				b.StopTimer()
				fresh := domain.NewState(st.Config())
				fresh.Restore(c.snap)
				runtime.GC()
				t := processCPU()
				b.StartTimer()
				fresh.Schedule(c.at)
				b.StopTimer()
				cpu += processCPU() - t
				b.StartTimer()
			}
			b.ReportMetric(float64(cpu.Microseconds())/1e3/float64(b.N), "cpu-ms/op")
		})
	}
}

package adapters

import (
	"runtime"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/store"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	"github.com/loom-ml/loom/services/scheduler/internal/domain"
)

// BenchmarkFailoverFromTheChangeLog times what a follower that takes over
// waits for before its first decision, at the scale of issue 12's targets
// (10,000 nodes, 100,000 pending jobs, the schedcycle benchmark's state
// after its first pass, stored in a real Redis): the follower loaded the
// state earlier (untimed, as at its start), then the leader made 20 more
// changes (each a run's end and the pass after it, written with the change
// log, as a leader writes; then one collection, untimed), then the follower takes over: it reads the
// log's writes since its position, decodes and applies them
// (catchup-ms/op), and runs its first pass (pass-ms/op). ns/op is the two
// together. The first pass must decide as the leader's state would at the
// same instant (the same number of events).
//
//	go test -run '^$' -bench FailoverFromTheChangeLog -benchtime 5x ./internal/adapters/
func BenchmarkFailoverFromTheChangeLog(b *testing.B) {
	leader, now, ctx, _, st := storedCycle(b)
	repo := NewRepo(st)
	seq := uint64(0)
	write := func(c *domain.Change) {
		var tx store.Tx
		if err := Write(&tx, c); err != nil {
			b.Fatal(err)
		}
		seq++ // as a leader writes: fenced, versioned, logged
		Fence(&tx, "bench", seq)
		LogChanges(&tx, Version("bench", seq))
		if _, err := st.Apply(ctx, "", &tx); err != nil {
			b.Fatal(err)
		}
	}
	write(&domain.Change{}) // the term's first write: the log has a position
	var catchup, pass time.Duration
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		pos, _, _, err := repo.LogTail(ctx)
		if err != nil {
			b.Fatal(err)
		}
		recs, err := repo.Load(ctx)
		if err != nil {
			b.Fatal(err)
		}
		f := domain.NewState(leader.Config())
		f.Load(recs.Clusters, recs.Nodes, recs.Jobs, recs.Runs, recs.Arrays, recs.Usage)
		f.LoadEnded(recs.Ended)
		f.LoadAssocLimits(recs.Assocs)
		recs = nil
		// The leader goes on: 20 runs of one node end, each with its pass.
		ended := 0
		for _, r := range leader.ActiveRuns() {
			if ended == 20 {
				break
			}
			if len(r.Nodes) != 1 || r.Steps[r.Nodes[0]].Terminal() {
				continue
			}
			now = now.Add(time.Second)
			c, err := leader.Handle(now, &eventsv1.StepChanged{Job: r.Job, Attempt: r.Attempt, Node: r.Nodes[0],
				State: eventsv1.StepState_STEP_EXITED, Cluster: r.Cluster})
			if err != nil {
				b.Fatal(err)
			}
			write(c)
			leader.Commit(c)
			ended++
		}
		at := now.Add(time.Second)
		want := len(leader.Schedule(at).Emits)
		// A follower waits between refreshes: its garbage was collected
		// before the takeover, as here (this process also holds the
		// leader's state, which a follower's does not).
		runtime.GC()
		b.StartTimer()

		t := time.Now()
		es, _, err := repo.ReadChanges(ctx, pos)
		if err != nil {
			b.Fatal(err)
		}
		u, err := DecodeUpdate(es, f.ArrayTemplate)
		if err != nil {
			b.Fatal(err)
		}
		f.Follow(u)
		t1 := time.Now()
		got := len(f.Schedule(at).Emits)
		t2 := time.Now()
		catchup, pass = catchup+t1.Sub(t), pass+t2.Sub(t1)
		if got != want || len(es) != ended {
			b.Fatalf("after %d logged writes (%d ends) the follower's pass emits %d events, the leader's %d", len(es), ended, got, want)
		}
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 / float64(b.N) }
	b.ReportMetric(ms(catchup), "catchup-ms/op")
	b.ReportMetric(ms(pass), "pass-ms/op")
}

package domain

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"

	"github.com/loom-ml/loom/services/scheduler/internal/domain/jobstore"
)

// benchCluster builds, without going through Handle, a cluster of nodes
// a3-highgpu-8g nodes (8 GPUs each, 32 per block) of which about busy (a
// fraction) is held by running jobs, and pending jobs waiting: a mix of
// 1-GPU, 1-node, 4-node and 16-node jobs of 50 users in 10 accounts with
// time limits of 1 to 24 hours.
func benchCluster(nodes, pending int, busy float64, seed uint64) (*State, time.Time) {
	rng := rand.New(rand.NewPCG(seed, 1))
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	s := NewState(Config{})
	c := &Cluster{Name: cl, SharedDir: "/shared", State: loomv1.Cluster_RUNNING,
		Partitions: []Partition{{Name: "gpu", NodeSets: []string{"a3"}, MaxTime: "2-00:00:00", MaxSeconds: 2 * 86400, Default: true}},
		NodeSets:   []NodeSet{{ID: "a3", Pool: "a3"}}}
	gres, cpus, mem := machineShape("a3-highgpu-8g", "")
	var ns []*Node
	for i := range nodes {
		host := fmt.Sprintf("a3-%05d", i+1)
		ns = append(ns, &Node{Name: cl + "/nodes/" + host, Cluster: cl, Hostname: host, GPUs: 8, State: loomv1.Node_READY,
			Role: "compute", Pool: "a3", MachineType: "a3-highgpu-8g", Block: fmt.Sprintf("block-%03d", i/32),
			GresType: gres, CPUs: cpus, MemoryMB: mem})
	}
	var jobs []*Job
	var runs []*Run
	id := 0
	newJob := func(nodes, gpus int32, state loomv1.JobState, submit time.Time) *Job {
		id++
		u := rng.IntN(50)
		return &Job{JobRecord: jobstore.JobRecord{Job: &loomv1.Job{Name: jobName(id), JobId: strconv.Itoa(id), Cluster: cl, NodeCount: nodes, GpusPerNode: gpus,
			Command: []string{"/bin/train"}, User: "user" + strconv.Itoa(u), Account: "acct" + strconv.Itoa(u%10), Partition: "gpu",
			Qos: "normal", TimeLimitSeconds: int64(3600 * (1 + rng.IntN(24))), State: state, SubmitTime: timestamppb.New(submit)}}}
	}
	// Running: whole-node jobs and 1-GPU jobs until the cluster is busy enough.
	free := make([]int32, nodes)
	for i := range free {
		free[i] = 8
	}
	target := int(busy * float64(nodes*8))
	held := 0
	for node := 0; node < nodes && held < target; node++ {
		for free[node] > 0 && held < target {
			g := int32(8)
			if rng.IntN(3) == 0 || free[node] < 8 {
				g = 1
			}
			start := now.Add(-time.Duration(rng.IntN(3600)) * time.Second)
			j := newJob(1, g, loomv1.JobState_RUNNING, start.Add(-time.Minute))
			j.Attempt = 1
			j.Job.Nodes, j.Job.StartTime = []string{ns[node].Hostname}, timestamppb.New(start)
			r := &Run{RunRecord: jobstore.RunRecord{Job: j.Name(), Cluster: cl, Attempt: 1, Nodes: []string{ns[node].Name}, Hostnames: []string{ns[node].Hostname},
				GPUs: map[string][]int32{}, CPUs: []int32{1}, Tasks: []int32{1}, Steps: map[string]Step{ns[node].Name: {}},
				Partition: "gpu", User: j.Job.User, Account: j.Job.Account, QOS: "normal", Start: start}}
			for k := int32(0); k < g; k++ {
				r.GPUs[ns[node].Name] = append(r.GPUs[ns[node].Name], 8-free[node]+k)
			}
			free[node] -= g
			held += int(g)
			jobs, runs = append(jobs, j), append(runs, r)
		}
	}
	for range pending {
		var n, g int32
		switch x := rng.IntN(10); {
		case x < 4:
			n, g = 1, 1
		case x < 7:
			n, g = 1, 8
		case x < 9:
			n, g = 4, 8
		default:
			n, g = 16, 8
		}
		jobs = append(jobs, newJob(n, g, loomv1.JobState_PENDING, now.Add(-time.Duration(rng.IntN(86400))*time.Second)))
	}
	s.Load([]*Cluster{c}, ns, jobs, runs, nil, nil)
	return s, now
}

// BenchmarkCycle measures one full scheduling cycle (priority, placement,
// backfill) over a busy cluster: 10,000 nodes / 80,000 GPUs, 95% held, and
// 100,000 pending jobs whose reasons are already set (the steady state), and
// how it grows with nodes and jobs.
func BenchmarkCycle(b *testing.B) {
	for _, size := range []struct{ nodes, jobs int }{
		{1000, 10000}, {10000, 10000}, {1000, 100000}, {10000, 100000},
	} {
		b.Run(fmt.Sprintf("nodes=%d/jobs=%d", size.nodes, size.jobs), func(b *testing.B) {
			s, now := benchCluster(size.nodes, size.jobs, 0.95, 1)
			s.Commit(s.Schedule(now)) // the first cycle sets every reason and starts what fits
			now = now.Add(time.Second)
			b.ReportAllocs()
			b.ResetTimer()
			cpu := cpuTime()
			for b.Loop() {
				// Each cycle a second after the last: a real scheduler
				// never runs two passes at one instant, and one at the
				// last pass's instant could reuse its work.
				now = now.Add(time.Second)
				c := s.Schedule(now)
				if len(c.Decisions) == 0 {
					b.Fatal("a cycle decided nothing")
				}
			}
			// On a shared machine wall time depends on the neighbours; the
			// process's CPU time per cycle does not (GC included).
			b.ReportMetric(float64(cpuTime()-cpu)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
		})
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkFirstCycle measures the first cycle over the same cluster, which
// also writes a reason into every pending job and starts the jobs that fit.
func BenchmarkFirstCycle(b *testing.B) {
	s, now := benchCluster(10000, 100000, 0.95, 1)
	built := s.Snapshot()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		// Every cycle a first one, on a fresh copy (restored untimed).
		b.StopTimer()
		s = NewState(s.Config())
		s.Restore(built)
		b.StartTimer()
		c := s.Schedule(now)
		if len(c.Emits) == 0 {
			b.Fatal("a first cycle emitted nothing")
		}
	}
}

func TestRadixSort(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 1, 10, 255, 256, 5000} {
		items := make([]keyed, n)
		for i := range items {
			items[i] = keyed{key: rng.Uint64() >> uint(rng.IntN(64)), i: int32(i)}
		}
		radixSort(items, nil)
		for i := 1; i < n; i++ {
			if items[i].key < items[i-1].key || (items[i].key == items[i-1].key && items[i].i < items[i-1].i) {
				t.Fatalf("n=%d: not sorted stably at %d: %v %v", n, i, items[i-1], items[i])
			}
		}
	}
}

// TestReuseOrder: the previous pass's order is mended and reused when a few
// priorities moved, giving exactly what a sort gives, and not when the queue
// was reshuffled or keys tie.
func TestReuseOrder(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(5, 6))
	const n = 2000
	out := make([]queued, n)
	for i := range out {
		out[i] = queued{rank: -rng.Int64N(50), id: int64(i + 1)}
	}
	sc := &scratch{}
	first, ok := radixOrder(slices.Clone(out), sc)
	if !ok || len(sc.perm) != n {
		t.Fatalf("radix order: ok %v, perm %d", ok, len(sc.perm))
	}
	first = slices.Clone(first)
	again, moved, ok := reuseOrder(ranksOf(out), sc)
	if !ok || moved || !slices.Equal(again, first) {
		t.Fatalf("unchanged keys: reused %v, moved %v, same order %v", ok, moved, slices.Equal(again, first))
	}
	reused, sorted := 0, 0
	for round := range 200 {
		// Move a few jobs' priorities: small moves often keep the order.
		for range 1 + round%3 {
			i := rng.IntN(n)
			out[i].rank += int64(rng.IntN(3) - 1)
		}
		want, ok := radixOrder(slices.Clone(out), &scratch{})
		if !ok {
			t.Fatal("radix order failed")
		}
		want = slices.Clone(want)
		before := slices.Clone(sc.perm)
		if got, moved, ok := reuseOrder(ranksOf(out), sc); ok {
			reused++
			if !slices.Equal(got, want) {
				t.Fatalf("round %d: reused an order that is not the sorted one", round)
			}
			if moved == slices.Equal(before, got) {
				t.Fatalf("round %d: moved %v, but the order changed %v", round, moved, !slices.Equal(before, got))
			}
		} else {
			sorted++
			if _, ok := radixOrder(out, sc); !ok {
				t.Fatal("radix order failed")
			}
		}
	}
	if reused == 0 {
		t.Errorf("a few moved priorities never reused the order (sorted %d times)", sorted)
	}
	// A queue reshuffled through and through costs more moves than a sort.
	for i := range out {
		out[i].rank = -rng.Int64N(1 << 30)
	}
	if _, _, ok := reuseOrder(ranksOf(out), sc); ok {
		t.Error("a reshuffled queue reused the old order")
	}
	// Equal keys: the sort's tie-break decides, not the old order.
	if _, ok := radixOrder(out, sc); !ok {
		t.Fatal("radix order failed")
	}
	out[0].rank, out[0].id, out[1].rank, out[1].id = -1, 7, -1, 7
	if _, _, ok := reuseOrder(ranksOf(out), sc); ok {
		t.Error("an order with tied keys was reused")
	}
	if _, _, ok := reuseOrder(ranksOf(out[:n-1]), sc); ok {
		t.Error("an order of another length was reused")
	}
}

// TestMendOrder: the last order mended for the jobs whose keys changed
// (single jobs a step or two, whole users' jobs alike as fair share moves
// them, many at once) is exactly what a sort gives, and ties are refused.
func TestMendOrder(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 8))
	const n, users = 3000, 40
	out := make([]queued, n)
	for i := range out { // distinct ids, not in the order of out
		out[i] = queued{rank: -rng.Int64N(400), id: int64(i+1)*3 + int64(rng.IntN(3))}
	}
	rng.Shuffle(n, func(a, b int) { out[a], out[b] = out[b], out[a] })
	sc := &scratch{}
	if _, ok := radixOrder(slices.Clone(out), sc); !ok {
		t.Fatal("radix order failed")
	}
	changed := make([]uint64, (n+63)/64)
	// The keys along the last order, as mend keeps them: every other
	// round reads them, the others keys.
	pk := keysAlong(ranksOf(out), sc.perm)
	for round := range 300 {
		clear(changed)
		mark := func(i int, d int64) {
			if d != 0 {
				out[i].rank += d
				changed[i>>6] |= 1 << (i & 63)
			}
		}
		switch round % 3 {
		case 0: // a few jobs a step
			for range 1 + rng.IntN(20) {
				mark(rng.IntN(n), int64(rng.IntN(5)-2))
			}
		case 1: // a few users' jobs alike, and some jobs a step
			for range 1 + rng.IntN(6) {
				u, d := rng.IntN(users), int64(rng.IntN(7)-3)
				for i := range out {
					if int(out[i].id)%users == u {
						mark(i, d)
					}
				}
			}
			for range rng.IntN(50) {
				mark(rng.IntN(n), -1)
			}
		default: // many jobs anywhere
			for range n / 3 {
				mark(rng.IntN(n), int64(rng.IntN(41)-20))
			}
		}
		want, ok := radixOrder(slices.Clone(out), &scratch{})
		if !ok {
			t.Fatal("radix order failed")
		}
		var along []rankID
		if round%2 == 0 {
			along = pk
		}
		src, ok := mendOrder(ranksOf(out), sc.perm, along, changed, sc, make([]int32, n))
		if !ok {
			t.Fatalf("round %d: distinct keys refused", round)
		}
		got := make([]int32, len(src))
		for w, s := range src {
			if s < 0 {
				s = ^s
			}
			got[w] = sc.perm[s]
		}
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: the mended order is not the sorted one", round)
		}
		sc.perm = got
		pk = keysAlong(ranksOf(out), got)
	}
	// Equal keys: the sort's tie-break decides, not the mend.
	clear(changed)
	a, b := sc.perm[10], sc.perm[20]
	out[a].rank, out[a].id = out[b].rank, out[b].id
	changed[a>>6] |= 1 << (a & 63)
	if _, ok := mendOrder(ranksOf(out), sc.perm, nil, changed, sc, make([]int32, n)); ok {
		t.Error("an order with tied keys (a moved job and one that stayed) was mended")
	}
	if _, ok := mendOrder(ranksOf(out), sc.perm, pk, changed, sc, make([]int32, n)); ok {
		t.Error("an order with tied keys (a moved job and one that stayed) was mended (keys along the order)")
	}
	changed[b>>6] |= 1 << (b & 63)
	if _, ok := mendOrder(ranksOf(out), sc.perm, nil, changed, sc, make([]int32, n)); ok {
		t.Error("an order with tied keys (two moved jobs) was mended")
	}
}

// keysAlong is keys in the order at.
func keysAlong(keys []rankID, at []int32) []rankID {
	out := make([]rankID, len(at))
	for k, i := range at {
		out[k] = keys[i]
	}
	return out
}

// ranksOf is the queue's order keys, as order copies them for reuseOrder.
func ranksOf(out []queued) []rankID {
	keys := make([]rankID, len(out))
	for i := range out {
		keys[i] = rankID{out[i].rank, out[i].id}
	}
	return keys
}

// BenchmarkClusterGoodput measures GetClusterGoodput over a cluster of
// 1,000 nodes with 10,000 pending jobs, its running ones, and 100,000
// pruned jobs' compact records (a month of ended jobs): it reads every live
// job, and the records by the hour of their end (endedindex.go).
func BenchmarkClusterGoodput(b *testing.B) {
	s, now := benchCluster(1000, 10000, 0.9, 1)
	ended := make([]*Ended, 100_000)
	for i := range ended {
		end := now.Add(-time.Duration(i) * 25 * time.Second) // 100,000 over ~29 days
		ended[i] = &Ended{Name: jobName(1_000_000 + i), State: loomv1.JobState_COMPLETED, Start: end.Add(-time.Hour), End: end,
			Cluster: cl, Goodput: &jobstore.EndedGoodput{Wall: 2 * time.Hour, Productive: time.Hour, Queueing: time.Hour}}
	}
	s.LoadEnded(ended)
	since := now.Add(-7 * 24 * time.Hour)
	b.ReportAllocs()
	for b.Loop() {
		if g := s.ClusterGoodput(cl, since, now); g.GetJobs() == 0 {
			b.Fatal("no jobs counted")
		}
	}
}

// tenClusters builds, without going through Handle, 100,000 jobs over 10
// clusters (10,000 each, in one project per cluster): a third pending, a
// third running (a run each), a third ended within the last week (a run
// each, half of them failed).
func tenClusters() (*State, []string, time.Time) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	s := NewState(Config{})
	var clusters []*Cluster
	var names []string
	var jobs []*Job
	var runs []*Run
	for c := range 10 {
		name := fmt.Sprintf("projects/p%d/clusters/c%d", c, c)
		names = append(names, name)
		clusters = append(clusters, &Cluster{Name: name, SharedDir: "/shared", State: loomv1.Cluster_RUNNING})
		for i := range 10_000 {
			submit := now.Add(-time.Duration(1+i%(7*24)) * time.Hour)
			j := &Job{JobRecord: jobstore.JobRecord{Job: &loomv1.Job{Name: fmt.Sprintf("projects/p%d/jobs/%d", c, i+1), JobId: strconv.Itoa(i + 1),
				Cluster: name, NodeCount: 1, GpusPerNode: 8, Command: []string{"/bin/train"}, User: "u", Account: "a", Partition: "gpu",
				State: loomv1.JobState_PENDING, SubmitTime: timestamppb.New(submit)}}}
			if i%3 > 0 {
				start := submit.Add(10 * time.Minute)
				j.Attempt = 1
				j.Job.State, j.Job.StartTime = loomv1.JobState_RUNNING, timestamppb.New(start)
				r := &Run{RunRecord: jobstore.RunRecord{Job: j.Name(), Cluster: name, Attempt: 1, Start: start}}
				if i%3 == 2 {
					end := start.Add(30 * time.Minute)
					j.Job.State, j.Job.EndTime = loomv1.JobState_COMPLETED, timestamppb.New(end)
					r.End, r.Released, r.Outcome = end, true, loomv1.JobState_COMPLETED
					if i%6 == 5 {
						j.Job.State, r.Outcome = loomv1.JobState_FAILED, loomv1.JobState_FAILED
					}
				}
				runs = append(runs, r)
			}
			jobs = append(jobs, j)
		}
	}
	s.Load(clusters, nil, jobs, runs, nil, nil)
	return s, names, now
}

// BenchmarkClusterGoodputTenClusters measures GetClusterGoodput of one
// cluster of ten, 100,000 jobs in all: "index" as it is (the cluster's
// jobs, clusterJobs), "walk" as it was (every job of every cluster).
func BenchmarkClusterGoodputTenClusters(b *testing.B) {
	s, clusters, now := tenClusters()
	s.IndexClusterJobs() // as the app does at the first call
	since := now.Add(-7 * 24 * time.Hour)
	runtime.GC() // the build's garbage is not the call's
	for _, c := range []struct {
		name string
		f    func(*State, string, time.Time, time.Time) *loomv1.Goodput
	}{{"index", (*State).ClusterGoodput}, {"walk", clusterGoodputWalk}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if g := c.f(s, clusters[i%len(clusters)], since, now); g.GetJobs() != 10_000 {
					b.Fatalf("%d jobs counted, want 10,000", g.GetJobs())
				}
				i++
			}
		})
	}
}

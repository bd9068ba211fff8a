package adapters

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/services/scheduler/internal/domain"
	"github.com/loom-ml/loom/services/scheduler/internal/sim"
)

// storeSnapshot writes every record of snap to st as the scheduler's
// Applies leave them (through Write, in changes of at most chunk records).
func storeSnapshot(tb testing.TB, ctx context.Context, st *store.Store, snap domain.Snapshot, chunk int) {
	tb.Helper()
	var c *domain.Change
	n := 0
	flush := func() {
		if n == 0 {
			return
		}
		var tx store.Tx
		if err := Write(&tx, c); err != nil {
			tb.Fatal(err)
		}
		if _, err := st.Apply(ctx, "", &tx); err != nil {
			tb.Fatal(err)
		}
		n = 0
	}
	add := func(put func(*domain.Change)) {
		if n == 0 {
			c = &domain.Change{Clusters: map[string]*domain.Cluster{}, Nodes: map[string]*domain.Node{},
				Jobs: map[string]*domain.Job{}, Runs: map[string]*domain.Run{}, Arrays: map[string]*domain.Array{},
				Usage: map[string]*domain.Usage{}, Assocs: map[string]*domain.AssocLimit{}}
		}
		put(c)
		if n++; n == chunk {
			flush()
		}
	}
	for _, r := range snap.Clusters {
		add(func(c *domain.Change) { c.Clusters[r.Name] = r })
	}
	for _, r := range snap.Nodes {
		add(func(c *domain.Change) { c.Nodes[r.Name] = r })
	}
	for _, r := range snap.Runs {
		add(func(c *domain.Change) { c.Runs[r.Key()] = r })
	}
	for _, r := range snap.Usage {
		add(func(c *domain.Change) { c.Usage[r.Key] = r })
	}
	for _, r := range snap.Assocs {
		add(func(c *domain.Change) { c.Assocs[domain.AssocLimitKey(r.Project, r.Account, r.User)] = r })
	}
	for key, b := range snap.StepRequests {
		add(func(c *domain.Change) {
			if c.StepRequests == nil {
				c.StepRequests = map[string][]byte{}
			}
			c.StepRequests[key] = b
		})
	}
	for _, r := range snap.Arrays {
		add(func(c *domain.Change) { c.Arrays[r.Name] = r })
	}
	for _, r := range snap.Jobs {
		add(func(c *domain.Change) { c.Jobs[r.Name()] = r })
	}
	flush()
}

// storedCycle builds the schedcycle benchmark's state at issue 12's scale
// (10,000 nodes, 100,000 pending jobs; LOOM_RESTART_NODES and
// LOOM_RESTART_PENDING change them), runs its first pass, and stores it in a
// real Redis as the scheduler's Applies leave it: the state, the instant of
// the pass, and the store.
func storedCycle(b *testing.B) (*domain.State, time.Time, context.Context, *redis.Client, *store.Store) {
	b.Helper()
	nodes, pending := envInt(b, "LOOM_RESTART_NODES", 10000, 1), envInt(b, "LOOM_RESTART_PENDING", 100000, 0)
	cfg := sim.CycleConfig{Nodes: nodes, Pending: pending, Policy: "loom"}
	// Four node pools, as at scale, where the cluster has that many nodes
	// (bench/cmd/ctldrestart's 4-node Slurm twin).
	cfg.Partitions = min(4, nodes)
	built, _, err := sim.CycleState(cfg)
	if err != nil {
		b.Fatal(err)
	}
	now := sim.Epoch.Add(24 * time.Hour)
	built.Commit(built.Schedule(now))
	_, rdb := testkit.Redis(b)
	st := store.New(rdb, "scheduler:")
	ctx := testkit.Context(b, 10*time.Minute)
	storeSnapshot(b, ctx, st, built.Snapshot(), 5000)
	return built, now, ctx, rdb, st
}

// BenchmarkRestartFromRedis times what a restarted scheduler waits for
// before its first decision, at the scale of issue 12's targets (10,000
// nodes, 100,000 pending jobs, the schedcycle benchmark's state after its
// first pass) stored in a real Redis: reading and decoding every record
// (read-ms/op; decode-ms/op is its part after the last read, Raw.Decode:
// the records LoadRaw did not decode as it read; read-cpu-ms/op the
// process's CPU time in it, which other work on a shared machine moves
// less than wall time), building the state
// (load-ms/op), and the first pass (pass-ms/op), in wall time, one after
// the other as a restarted scheduler runs them: after one untimed collection before the read, so the pass pays
// for the garbage the read and the load leave, as after a real restart.
// ns/op is the three together; the schedcycle benchmark's "load" is
// load-ms alone. redis-busy-ms/op is Redis's own time in those reads (its
// slow log), in which it serves no other client: what each follower
// refresh (the read and the load) costs the leader's writes too;
// redis-longest-ms its longest single command, the longest any other
// client waits behind the read.
//
//	go test -run '^$' -bench RestartFromRedis -benchtime 5x ./internal/adapters/
func BenchmarkRestartFromRedis(b *testing.B) {
	built, now, ctx, rdb, st := storedCycle(b)
	cfg := built.Config()
	built = nil
	repo := NewRepo(st)
	// Every command in the slow log, to sum Redis's own time (while it runs
	// one command, single-threaded, it serves no other client).
	if err := rdb.ConfigSet(ctx, "slowlog-log-slower-than", "0").Err(); err != nil {
		b.Fatal(err)
	}
	if err := rdb.ConfigSet(ctx, "slowlog-max-len", "100000").Err(); err != nil {
		b.Fatal(err)
	}
	slowlog(b, ctx, rdb)
	var busy, longest, read, readCPU, decode, load, pass time.Duration
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		runtime.GC()
		b.StartTimer()
		t, cpu := time.Now(), cpuTime()
		raw, err := repo.LoadRaw(ctx)
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		recs, err := raw.Decode()
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		readCPU += cpuTime() - cpu
		s := domain.NewState(cfg)
		s.Load(recs.Clusters, recs.Nodes, recs.Jobs, recs.Runs, recs.Arrays, recs.Usage)
		s.LoadEnded(recs.Ended)
		s.LoadAssocLimits(recs.Assocs)
		t2 := time.Now()
		if c := s.Schedule(now.Add(time.Second)); len(c.Emits) != 0 {
			b.Fatalf("the pass after a restart emitted %d events: the stored state is not the one left", len(c.Emits))
		}
		t3 := time.Now()
		read, decode, load, pass = read+t1.Sub(t), decode+t1.Sub(t0), load+t2.Sub(t1), pass+t3.Sub(t2)
		b.StopTimer()
		sum, most := slowlog(b, ctx, rdb)
		busy, longest = busy+sum, max(longest, most)
		b.StartTimer()
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 / float64(b.N) }
	b.ReportMetric(ms(read), "read-ms/op")
	b.ReportMetric(ms(decode), "decode-ms/op")
	b.ReportMetric(ms(readCPU), "read-cpu-ms/op")
	b.ReportMetric(ms(load), "load-ms/op")
	b.ReportMetric(ms(pass), "pass-ms/op")
	b.ReportMetric(ms(busy), "redis-busy-ms/op")
	b.ReportMetric(float64(longest.Microseconds())/1e3, "redis-longest-ms")
}

// envInt is the integer in the environment variable name (def when unset);
// a value that is not an integer below least fails the benchmark,
// naming the variable and the limit.
func envInt(tb testing.TB, name string, def, least int) int {
	tb.Helper()
	v, ok := os.LookupEnv(name)
	if !ok || v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < least {
		tb.Fatalf("%s=%q: want an integer of at least %d", name, v, least)
	}
	return n
}

// cpuTime is the process's user and system CPU time so far (every thread:
// the garbage collector's work included).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// slowlog sums the durations in Redis's slow log, finds the longest, and
// empties the log.
func slowlog(tb testing.TB, ctx context.Context, rdb *redis.Client) (sum, longest time.Duration) {
	tb.Helper()
	entries, err := rdb.SlowLogGet(ctx, -1).Result()
	if err != nil {
		tb.Fatal(err)
	}
	for _, e := range entries {
		sum, longest = sum+e.Duration, max(longest, e.Duration)
	}
	if err := rdb.SlowLogReset(ctx).Err(); err != nil {
		tb.Fatal(err)
	}
	return sum, longest
}

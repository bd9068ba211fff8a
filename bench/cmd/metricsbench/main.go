// Command metricsbench measures the training metrics store (libs/series)
// against a real redis-server, as the training service uses it:
//
//   - ingest: points appended as the training service's consumer stores a
//     node's MetricsReported: the node's hourly count
//     (series.Store.CountNodeWrite), the write rules (series.Store.Admit:
//     the run's placement, its age, the swept marker) and
//     series.Store.Append (one Lua script per batch, deduplicated by
//     source and sequence), with GOMAXPROCS=1, target ≥ 50,000 points/s;
//   - read: a 100,000-point series read back downsampled to 1,000 points
//     (series.Store.Read: GET, decode, order by step, min/max buckets),
//     target ≤ 50 ms.
//
// Rerun: go run ./bench/cmd/metricsbench -report bench/REPORT.md
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/loom-ml/loom/bench/internal/report"
	"github.com/loom-ml/loom/libs/embedded"
	"github.com/loom-ml/loom/libs/series"
)

type options struct {
	points  int // points ingested in all
	batch   int // steps per Append
	metrics int // metrics per step
	series  int // points of the read series
	down    int // points read back
	reads   int
	report  string
}

func main() {
	var o options
	fs := flag.NewFlagSet("metricsbench", flag.ExitOnError)
	fs.IntVar(&o.points, "points", 400_000, "points ingested in all")
	fs.IntVar(&o.batch, "batch", 100, "steps per append (the agent's default batch: 100 points a record)")
	fs.IntVar(&o.metrics, "metrics", 4, "metrics per step (each step's values: a point each)")
	fs.IntVar(&o.series, "series", 100_000, "points of the series read back")
	fs.IntVar(&o.down, "down", 1000, "points it is read back downsampled to")
	fs.IntVar(&o.reads, "reads", 50, "reads timed")
	fs.StringVar(&o.report, "report", "", "Markdown file to write the results into (the section between the metricsbench markers is replaced)")
	_ = fs.Parse(os.Args[1:])
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "metricsbench:", err)
		os.Exit(1)
	}
}

type result struct {
	ingestPoints   int
	ingestDur      time.Duration
	appends        int
	readMedian     time.Duration
	readP95        time.Duration
	readMax        time.Duration
	readTotal      int
	zoomMedian     time.Duration
	zoomTotal      int
	readGot        int
	redisVersion   string
	spikeKept      bool
	duplicateFree  bool
	pointsPerSec   float64
	appendsPerSec  float64
	readPerPointNs float64
}

func run(o options) error {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return errors.New("redis-server is not on PATH (apt-get install redis-server): the benchmark measures the real one")
	}
	runtime.GOMAXPROCS(1)
	ctx := context.Background()
	r, err := embedded.StartRedis(ctx, "", "")
	if err != nil {
		return err
	}
	defer r.Close()
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer rdb.Close()
	info, _ := rdb.Info(ctx, "server").Result()
	res := result{redisVersion: field(info, "redis_version")}
	st := series.NewStore(rdb, "training:", series.Limits{})

	// Ingest: batches of o.batch steps × o.metrics metrics, as records of
	// one job from one partition.
	names := make([]string, o.metrics)
	for i := range names {
		names[i] = fmt.Sprintf("metric_%d", i)
	}
	t0 := time.Unix(1700000000, 0)
	steps := o.points / o.metrics
	const node = "projects/bench/clusters/c/nodes/gpu-1"
	if err := st.Place(ctx, "projects/bench/jobs/1", []series.Run{{Attempt: 1, Nodes: []string{node}}}); err != nil {
		return err
	}
	// The held copy Admit sends with every node's record: the record's
	// size (about 24 bytes a point on the wire).
	record := make([]byte, 24*o.batch*o.metrics)
	start := time.Now()
	seq := int64(0)
	for s := 0; s < steps; s += o.batch {
		b := series.Batch{}
		for _, n := range names {
			pts := make([]series.Point, 0, o.batch)
			for k := s; k < min(s+o.batch, steps); k++ {
				pts = append(pts, series.Point{Step: int64(k), Time: t0.Add(time.Duration(k) * time.Millisecond), Value: math.Sin(float64(k) / 100)})
			}
			b[n] = pts
		}
		seq++
		now := time.Now()
		src := series.Source{Name: "loom.step.events.v1/0", Seq: seq}
		over, err := st.CountNodeWrite(ctx, node, src, now)
		if err != nil || over {
			return fmt.Errorf("node rate: over %v, %v", over, err)
		}
		v, err := st.Admit(ctx, series.Write{Job: "projects/bench/jobs/1", Node: node, Attempt: 1, Data: record, ID: src.String()}, now)
		if err != nil || v.Held || v.Reason != "" {
			return fmt.Errorf("admit: %+v %v", v, err)
		}
		if _, err := st.Append(ctx, "projects/bench/jobs/1", src, b); err != nil {
			return err
		}
		res.appends++
	}
	res.ingestDur = time.Since(start)
	res.ingestPoints = steps * o.metrics
	res.pointsPerSec = float64(res.ingestPoints) / res.ingestDur.Seconds()
	res.appendsPerSec = float64(res.appends) / res.ingestDur.Seconds()
	// A redelivered batch adds nothing.
	if r, err := st.Append(ctx, "projects/bench/jobs/1", series.Source{Name: "loom.step.events.v1/0", Seq: 1},
		series.Batch{names[0]: {{Step: 0, Value: 0}}}); err != nil || !r.Duplicate {
		return fmt.Errorf("redelivery not recognised: %+v %v", r, err)
	}
	list, err := st.List(ctx, "projects/bench/jobs/1")
	if err != nil {
		return err
	}
	res.duplicateFree = len(list) == o.metrics && list[0].Count == int64(steps)

	// Read: one series of o.series points (with a one-point spike), read
	// back downsampled.
	job := "projects/bench/jobs/2"
	for s := 0; s < o.series; s += 1000 {
		pts := make([]series.Point, 0, 1000)
		for k := s; k < min(s+1000, o.series); k++ {
			v := math.Sin(float64(k) / 1000)
			if k == o.series/3 {
				v = 100
			}
			pts = append(pts, series.Point{Step: int64(k), Time: t0.Add(time.Duration(k) * time.Second), Value: v})
		}
		if _, err := st.Append(ctx, job, series.Source{}, series.Batch{"loss": pts}); err != nil {
			return err
		}
	}
	var durs []time.Duration
	for i := 0; i < o.reads; i++ {
		s := time.Now()
		pts, total, err := st.Read(ctx, job, "loss", series.Query{Points: o.down})
		d := time.Since(s)
		if err != nil {
			return err
		}
		durs = append(durs, d)
		res.readTotal, res.readGot = total, len(pts)
		for _, p := range pts {
			if p.Value == 100 {
				res.spikeKept = true
			}
		}
	}
	// A zoom: 1% of the series from its middle, as a plot zoomed in reads
	// it (an ordered series' range is read alone: read.lua).
	from, to := int64(o.series/2), int64(o.series/2+o.series/100-1)
	var zoom []time.Duration
	for i := 0; i < o.reads; i++ {
		s := time.Now()
		_, total, err := st.Read(ctx, job, "loss", series.Query{Points: o.down, Range: series.Range{From: &from, To: &to}})
		zoom = append(zoom, time.Since(s))
		if err != nil {
			return err
		}
		res.zoomTotal = total
	}
	slices.Sort(zoom)
	res.zoomMedian = zoom[len(zoom)/2]
	slices.Sort(durs)
	res.readMedian = durs[len(durs)/2]
	res.readP95 = durs[len(durs)*95/100]
	res.readMax = durs[len(durs)-1]

	text := render(o, res)
	fmt.Print(text)
	if o.report != "" {
		return report.WriteSection(o.report, "metricsbench", "<!-- metricsbench:begin -->\n"+text+"<!-- metricsbench:end -->\n")
	}
	return nil
}

func field(info, name string) string {
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), name+":"); ok {
			return v
		}
	}
	return "?"
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}

func render(o options, r result) string {
	host, _ := os.Hostname()
	var b strings.Builder
	w := func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }
	w("## Training metrics: series store ingest and downsampled reads (metricsbench)\n\n")
	w("The training service's series store (`libs/series`) against a real redis-server %s (started by `libs/embedded`, append-only file on), ", r.redisVersion)
	w("from a Go process with GOMAXPROCS=1 (Redis is its own process). Ingest stores each batch as the training service's consumer does a node's MetricsReported: ")
	w("the node's hourly count (`CountNodeWrite`: one Lua script that counts each (partition, offset) once), the write rules (`Admit`: one Lua script that checks the swept marker and reads the run's placement, then the node and the run's age), ")
	w("and `Append`: the project's count read (its budget), one Lua script per batch that checks the swept marker and the (partition, offset) watermark, appends 24-byte records and updates each series' summary, then the project's count written; ")
	w("%d steps × %d metrics a batch. The read is `series.Store.Read` of a %d-point series downsampled to %d points (GET, decode, order by step, min/max per bucket), %d reads. ", o.batch, o.metrics, o.series, o.down, o.reads)
	w("Run on %s (%d CPUs, %s/%s, load average %s at the end: ingest, which waits on Redis' process, varies with the machine's load). Rerun: `go run ./bench/cmd/metricsbench -report bench/REPORT.md`.\n\n", host, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, loadavg())
	w("| measure | result | target | verdict |\n|---|---:|---:|---|\n")
	w("| ingest, points per second (one core) | %.0f | ≥ 50,000 | %s |\n", r.pointsPerSec, verdict(r.pointsPerSec >= 50_000))
	w("| read %d points downsampled to %d, median | %.2f ms | ≤ 50 ms | %s |\n", o.series, o.down, ms(r.readMedian), verdict(r.readMedian <= 50*time.Millisecond))
	w("| same read, p95 / max | %.2f / %.2f ms | | |\n", ms(r.readP95), ms(r.readMax))
	w("| read a step range of it (%d points, 1%%: a plot zoomed in), median | %.2f ms | | |\n\n", r.zoomTotal, ms(r.zoomMedian))
	w("Ingest: %d points in %d batches in %s (%.0f batches/s, five Redis round trips each: the node's count, the write rules, the project's count, the append, the project's count again). A redelivered batch was recognised and added nothing; every series holds exactly its points: %v. ", r.ingestPoints, r.appends, r.ingestDur.Round(time.Millisecond), r.appendsPerSec, r.duplicateFree)
	w("The read returned %d of %d points, the one-point spike among them: %v. ", r.readGot, r.readTotal, r.spikeKept)
	w("A step range of a series whose steps never went back is read alone (two binary searches over its records in Redis, then the range's bytes: `libs/series/read.lua`), not the whole series.\n")
	return b.String()
}

// loadavg is the 1-minute load average (Linux), "?" elsewhere.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

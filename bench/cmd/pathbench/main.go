// Command pathbench measures the path every Loom request takes, on loopback:
// a command is published to Kafka, consumed by a service, applied to Redis with
// its outbox entry and inbox mark in one step, relayed to Kafka as an event, and
// seen by a downstream consumer. It reports p50/p99/max latency at a fixed
// offered rate (open loop: latency counts from each command's scheduled send
// time, so a stall is not hidden) and the sustained events per second at
// saturation, and writes them into a Markdown report.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/bench/internal/report"
	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/embedded"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

func main() {
	rate := flag.Int("rate", 1000, "offered commands per second for the latency run")
	dur := flag.Duration("duration", 10*time.Second, "length of each run")
	warm := flag.Duration("warmup", 2*time.Second, "warm-up before measuring")
	report := flag.String("report", "", "Markdown file to write the results into (the section between the pathbench markers is replaced)")
	flag.Parse()
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err := run(*rate, *dur, *warm, *report); err != nil {
		fmt.Fprintln(os.Stderr, "pathbench:", err)
		os.Exit(1)
	}
}

// path is one instance of the measured pipeline.
type path struct {
	producer *bus.Producer
	seen     chan time.Duration
	sent     atomic.Int64
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

func startPath(ctx context.Context, brokers []string, rdb *redis.Client, tag string) (*path, error) {
	ctx, cancel := context.WithCancel(ctx)
	p := &path{producer: bus.NewProducer(brokers), seen: make(chan time.Duration, 1<<16), cancel: cancel}
	st := store.New(rdb, "bench-"+tag+":")
	// The "service": apply the command with its outbox event, as every Loom service does.
	svc := bus.NewConsumer(bus.ConsumerConfig{Brokers: brokers, GroupID: "bench-svc-" + tag,
		Topics: []string{topics.JobCommands}}, p.producer, func(ctx context.Context, ev envelope.Event) error {
		cmd := ev.Payload.(*eventsv1.SubmitJob)
		var tx store.Tx
		tx.HSet("jobs", cmd.Job.JobId, []byte(cmd.Job.Name))
		out := envelope.New(topics.JobEvents, ev.Key, "bench/svc", &eventsv1.JobChanged{Job: cmd.Job})
		tx.Emit(out)
		_, err := st.Apply(ctx, ev.ID, &tx)
		return err
	})
	// The downstream consumer: sees the event and records the end-to-end latency.
	obs := bus.NewConsumer(bus.ConsumerConfig{Brokers: brokers, GroupID: "bench-obs-" + tag,
		Topics: []string{topics.JobEvents}}, p.producer, func(ctx context.Context, ev envelope.Event) error {
		jc, ok := ev.Payload.(*eventsv1.JobChanged)
		if !ok || !strings.HasPrefix(jc.Job.DisplayName, tag+"/") {
			return nil
		}
		p.seen <- time.Since(jc.Job.SubmitTime.AsTime())
		return nil
	})
	for _, f := range []func(context.Context) error{svc.Run, obs.Run, func(ctx context.Context) error { return st.RunRelay(ctx, p.producer) }} {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			if err := f(ctx); err != nil && ctx.Err() == nil {
				slog.Error("pathbench component", "err", err)
			}
		}()
	}
	return p, nil
}

func (p *path) stop() {
	p.cancel()
	p.wg.Wait()
	_ = p.producer.Close()
}

// send publishes one command stamped with its scheduled time.
func (p *path) send(ctx context.Context, tag string, at time.Time) error {
	n := p.sent.Add(1)
	id := strconv.FormatInt(n, 10)
	job := &loomv1.Job{Name: resname.JobOf("bench", n).String(), JobId: id, DisplayName: tag + "/" + id,
		SubmitTime: timestamppb.New(at)}
	key := resname.Cluster{Project: "bench", ID: "c" + strconv.FormatInt(n%16, 10)}.String()
	return p.producer.Publish(ctx, envelope.New(topics.JobCommands, key, "bench/load", &eventsv1.SubmitJob{Job: job}))
}

type result struct {
	offered            int
	measured           int
	p50, p90, p99, max time.Duration
	throughput         float64
}

func percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	i := int(q * float64(len(d)-1))
	return d[i]
}

// latencyRun offers rate commands/s for warm+dur and measures those sent after warm-up.
func latencyRun(ctx context.Context, p *path, tag string, rate int, warm, dur time.Duration) (result, error) {
	interval := time.Second / time.Duration(rate)
	total := int((warm + dur) / interval)
	skip := int(warm / interval)
	start := time.Now()
	work := make(chan time.Time, total)
	var wg sync.WaitGroup
	var sendErr atomic.Value
	for i := 0; i < 32; i++ { // enough senders that a slow ack never throttles the offered rate
		wg.Add(1)
		go func() {
			defer wg.Done()
			for at := range work {
				if err := p.send(ctx, tag, at); err != nil {
					sendErr.Store(err)
				}
			}
		}()
	}
	for i := 0; i < total; i++ {
		at := start.Add(time.Duration(i) * interval)
		time.Sleep(time.Until(at)) // pacing the load generator, not synchronisation
		work <- at
	}
	close(work)
	wg.Wait()
	if err, _ := sendErr.Load().(error); err != nil {
		return result{}, err
	}
	lat := make([]time.Duration, 0, total)
	deadline := time.After(30 * time.Second)
	for len(lat) < total {
		select {
		case d := <-p.seen:
			lat = append(lat, d)
		case <-deadline:
			return result{}, fmt.Errorf("only %d of %d events arrived", len(lat), total)
		}
	}
	// Events arrive roughly in send order; drop the warm-up share by count.
	lat = lat[skip:]
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return result{offered: rate, measured: len(lat), p50: percentile(lat, .50), p90: percentile(lat, .90),
		p99: percentile(lat, .99), max: lat[len(lat)-1]}, nil
}

// throughputRun keeps the pipeline saturated for dur — publishers send as fast
// as they can while at most maxInFlight commands are unseen downstream — and
// returns the events per second that came out of the end of the path.
func throughputRun(ctx context.Context, p *path, tag string, dur time.Duration) (float64, error) {
	const maxInFlight = 4096
	var sent, seen atomic.Int64
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-p.seen:
				seen.Add(1)
			case <-done:
				return
			}
		}
	}()
	defer close(done)
	start := time.Now()
	stopAt := start.Add(dur)
	var wg sync.WaitGroup
	var sendErr atomic.Value
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stopAt) {
				if sent.Load()-seen.Load() >= maxInFlight {
					time.Sleep(200 * time.Microsecond) // back-pressure in the load generator
					continue
				}
				sent.Add(1)
				if err := p.send(ctx, tag, time.Now()); err != nil {
					sendErr.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := sendErr.Load().(error); err != nil {
		return 0, err
	}
	got := seen.Load()
	rate := float64(got) / time.Since(start).Seconds()
	// Drain what is still in flight so the next run starts clean.
	deadline := time.Now().Add(60 * time.Second)
	for seen.Load() < sent.Load() {
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("only %d of %d events arrived", seen.Load(), sent.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return rate, nil
}

func run(rate int, dur, warm time.Duration, reportPath string) error {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "pathbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	broker, err := embedded.StartBroker(ctx, "", dir+"/kafka")
	if err != nil {
		return err
	}
	defer broker.Close()
	rds, err := embedded.StartRedis(ctx, "", dir+"/redis")
	if err != nil {
		return err
	}
	defer rds.Close()
	brokers := []string{broker.Addr}
	if err := bus.EnsureTopics(ctx, brokers, topics.All()); err != nil {
		return err
	}
	rdb := redis.NewClient(&redis.Options{Addr: rds.Addr, Password: rds.Password})
	defer rdb.Close()

	p, err := startPath(ctx, brokers, rdb, "lat")
	if err != nil {
		return err
	}
	// Let both groups join before the clock starts.
	if err := p.send(ctx, "lat", time.Now()); err != nil {
		return err
	}
	select {
	case <-p.seen:
	case <-time.After(60 * time.Second):
		return fmt.Errorf("pipeline did not deliver its first event within 60s")
	}
	lr, err := latencyRun(ctx, p, "lat", rate, warm, dur)
	if err != nil {
		return err
	}
	tput, err := throughputRun(ctx, p, "lat", dur)
	if err != nil {
		return err
	}
	p.stop()
	lr.throughput = tput

	host, _ := os.Hostname()
	verdict := "meets"
	if lr.p99 > 20*time.Millisecond {
		verdict = "MISSES"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "<!-- pathbench:begin -->\n## Bus path: command → service → Redis (state+outbox+inbox) → relay → event\n\n")
	fmt.Fprintf(&b, "Measured %s on %s (%d CPUs, %s), kfake broker and %s on loopback. Rerun: `make bench` (or `go run ./bench/cmd/pathbench -rate %d -duration %s -report bench/REPORT.md`).\n\n",
		time.Now().UTC().Format("2006-01-02"), host, runtime.NumCPU(), runtime.Version(), rds.Kind, rate, dur)
	fmt.Fprintf(&b, "| offered rate | commands measured | p50 | p90 | p99 | max | target p99 ≤ 20 ms |\n|---|---|---|---|---|---|---|\n")
	fmt.Fprintf(&b, "| %d/s | %d | %s | %s | %s | %s | %s |\n\n", lr.offered, lr.measured, ms(lr.p50), ms(lr.p90), ms(lr.p99), ms(lr.max), verdict)
	fmt.Fprintf(&b, "Sustained at saturation (64 concurrent publishers, at most 4,096 commands in flight, %s): **%.0f events/s** end to end.\n\n", dur, lr.throughput)
	fmt.Fprintf(&b, "Latency counts from each command's scheduled send time (open loop), so a stall in the load generator or the pipeline shows up instead of being skipped.\n<!-- pathbench:end -->\n")
	fmt.Print(b.String())
	if reportPath == "" {
		return nil
	}
	return writeSection(reportPath, b.String())
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }

// writeSection replaces the pathbench section of the report, or appends it.
func writeSection(path, section string) error {
	return report.WriteSection(path, "pathbench", section)
}

// Command ingressbench measures Loom's Kafka ingress end to end beside the
// API, in one run on one stack, so that the ratio is fair.
//
// It starts Loom's one embedded stack (cmd/loom/stack: a Kafka-protocol
// broker, Redis and the central services, the bridge among them, in this
// process) on the simulated cloud, creates a project ("bench"), a user with
// role user in it and an API key of that user, and a one-node cluster. Then,
// for the ingress and for the API in turn:
//
//   - throughput: -n SubmitJob requests as fast as they go, timed from the
//     first until each is accepted. Ingress: CloudEvents (binary mode, the
//     key as ce_credential) produced to loom.ingress.v1 in batches; accepted
//     is the message's loom.public.v1.IngressResult with outcome ACCEPTED
//     seen on loom.public.v1 (matched by its subject, the message's id).
//     API: JobService/SubmitJob over gRPC with the same key, -concurrency
//     calls in flight; accepted is the call's answer.
//   - latency: one request every 1/-rate for -duration; per request, from
//     just before it is produced (sent) to its IngressResult seen (the
//     call's answer): p50 and p99.
//
// Results without IngressResult events (an ingress that makes jobs but
// publishes no results yet) fall back to polling ListJobs for the jobs the
// messages made (their display names are the message ids), which the report
// says. An ingress that is absent is found by a probe message: when neither
// its result nor its job appears within -probe-timeout, the benchmark stops
// with an error that says so, rather than waiting.
//
// Rerun: go run ./bench/cmd/ingressbench -report bench/REPORT.md
// Quick:  go run ./bench/cmd/ingressbench -quick
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/loom-ml/loom/bench/internal/report"
	"github.com/loom-ml/loom/cmd/loom/stack"
	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/paging"
	"github.com/loom-ml/loom/libs/topics"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Names of the benchmark's project, user and cluster.
const (
	projectID = "bench"
	project   = "projects/" + projectID
	benchUser = "ingressbench"
	clusterID = "ingress"
	zone      = "us-central1-a"
	machine   = "a3-highgpu-8g"
	// source is the benchmark's CloudEvents source.
	source = "//bench/ingressbench"
	// resultType is the IngressResult's CloudEvent type.
	resultType = "loom.public.v1.IngressResult"
	// submitType is the SubmitJob message's.
	submitType = "loom.ingress.v1.SubmitJob"
)

// options are the benchmark's settings (flags in main).
type options struct {
	n            int
	rate         float64
	duration     time.Duration
	concurrency  int
	batch        int
	quick        bool
	apiOnly      bool
	probeTimeout time.Duration
	timeout      time.Duration
	report       string
	logLevel     string
}

func main() {
	var o options
	flag.IntVar(&o.n, "n", 1000, "requests of the throughput runs (each of ingress and API; at most the gateway's burst per principal, 2000, or calls are rate limited)")
	flag.Float64Var(&o.rate, "rate", 50, "requests per second of the latency runs")
	flag.DurationVar(&o.duration, "duration", 20*time.Second, "length of each latency run")
	flag.IntVar(&o.concurrency, "concurrency", 16, "API calls in flight in the API's throughput run")
	flag.IntVar(&o.batch, "batch", 100, "messages per produce request in the ingress throughput run")
	flag.BoolVar(&o.quick, "quick", false, "a short run to check that everything works: -n 100 -duration 3s (not for the report)")
	flag.BoolVar(&o.apiOnly, "api-only", false, "measure the API only (a stack without the ingress); printed, never written to the report")
	flag.DurationVar(&o.probeTimeout, "probe-timeout", 30*time.Second, "how long the first message may take to be answered before the ingress is taken to be absent")
	flag.DurationVar(&o.timeout, "timeout", 3*time.Minute, "how long a run may wait for its last request to be accepted")
	flag.StringVar(&o.report, "report", "", "Markdown file to write the results into (the section between the ingressbench markers is replaced)")
	flag.StringVar(&o.logLevel, "log-level", "warn", "log level of the services")
	flag.Parse()
	if o.quick {
		o.n, o.duration = 100, 3*time.Second
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "ingressbench:", err)
		os.Exit(1)
	}
}

// check refuses settings out of their bounds.
func (o options) check() error {
	var bad []string
	if o.n < 1 || o.n > 100_000 {
		bad = append(bad, fmt.Sprintf("-n must be 1 to 100000, got %d", o.n))
	}
	if o.rate <= 0 || o.rate > 10_000 {
		bad = append(bad, fmt.Sprintf("-rate must be above 0 and at most 10000, got %g", o.rate))
	}
	if o.duration < time.Second || o.duration > time.Hour {
		bad = append(bad, fmt.Sprintf("-duration must be 1s to 1h, got %v", o.duration))
	}
	if o.concurrency < 1 || o.concurrency > 1024 {
		bad = append(bad, fmt.Sprintf("-concurrency must be 1 to 1024, got %d", o.concurrency))
	}
	if o.batch < 1 || o.batch > 10_000 {
		bad = append(bad, fmt.Sprintf("-batch must be 1 to 10000, got %d", o.batch))
	}
	if o.probeTimeout <= 0 || o.timeout <= 0 {
		bad = append(bad, "-probe-timeout and -timeout must be positive")
	}
	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "; "))
	}
	return nil
}

// logf reports progress on stderr.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "ingressbench: "+format+"\n", args...)
}

// bench is one run's stack and clients.
type bench struct {
	o       options
	s       *stack.Stack
	key     string
	cluster string
	jobs    loomv1.JobServiceClient
	writer  *kafka.Writer
	results *results
	// viaJobs: no IngressResult came for the probe, but its job did:
	// pollJobs records acceptances from ListJobs instead.
	viaJobs bool
	seq     atomic.Int64
}

func run(o options) error {
	if err := o.check(); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "ingressbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	ctx := context.Background()
	began := time.Now()
	s, err := stack.Start(ctx, stack.Options{DataDir: filepath.Join(tmp, "data"), LogLevel: o.logLevel, Provider: "sim",
		Capacity:        zone + "/" + machine + "/ON_DEMAND=4",
		ProvisionerArgs: []string{"-sim-seed=1", "-sim-latency=ON_DEMAND=500ms/0.1"}})
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := s.Close(cctx); err != nil {
			logf("stopping the stack: %v", err)
		}
	}()
	logf("stack up in %v", time.Since(began).Round(time.Millisecond))
	// The runs' readers and pollers stop before the stack does.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	b := &bench{o: o, s: s}
	if err := b.setup(ctx); err != nil {
		return err
	}
	defer b.writer.Close()
	defer b.results.close()
	var r result
	if !o.apiOnly {
		if err := b.probe(ctx); err != nil {
			return err
		}
		r.mode = "IngressResult events on " + topics.Public
		if b.viaJobs {
			r.mode = "polling ListJobs (no IngressResult events)"
		}
		logf("ingress throughput: %d messages", o.n)
		if r.ingressTput, r.ingressTputDur, err = b.ingressThroughput(ctx); err != nil {
			return fmt.Errorf("ingress throughput: %w", err)
		}
	}
	logf("API throughput: %d calls", o.n)
	if r.apiTput, r.apiTputDur, err = b.apiThroughput(ctx); err != nil {
		return fmt.Errorf("API throughput: %w", err)
	}
	if !o.apiOnly {
		logf("ingress latency: %g/s for %v", o.rate, o.duration)
		if r.ingressLat, err = b.ingressLatency(ctx); err != nil {
			return fmt.Errorf("ingress latency: %w", err)
		}
	}
	logf("API latency: %g/s for %v", o.rate, o.duration)
	if r.apiLat, err = b.apiLatency(ctx); err != nil {
		return fmt.Errorf("API latency: %w", err)
	}
	text := render(o, r, time.Since(began))
	fmt.Print(text)
	if o.report != "" && !o.quick && !o.apiOnly {
		return report.WriteSection(o.report, "ingressbench", "<!-- ingressbench:begin -->\n"+text+"<!-- ingressbench:end -->\n")
	}
	if o.report != "" {
		logf("-quick and -api-only: the report is not written (its numbers are not the benchmark's)")
	}
	return nil
}

// setup makes the project's member, its key and the cluster, and starts
// the producer and the results' reader.
func (b *bench) setup(ctx context.Context) error {
	admin, err := b.s.AdminKey()
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient(b.s.GatewayAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(auth.Bearer(admin)))
	if err != nil {
		return err
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, b.o.timeout)
	defer cancel()
	as := loomv1.NewAuthServiceClient(conn)
	if _, err := as.SetMember(cctx, &loomv1.SetMemberRequest{Parent: project, User: benchUser, Role: "user"}); err != nil {
		return fmt.Errorf("make %s a user of %s: %w", benchUser, project, err)
	}
	k, err := as.CreateApiKey(cctx, &loomv1.CreateApiKeyRequest{Parent: "users/" + benchUser, Key: &loomv1.ApiKey{DisplayName: "ingressbench"}})
	if err != nil {
		return fmt.Errorf("create %s's API key: %w", benchUser, err)
	}
	b.key = k.GetSecret()
	op, err := loomv1.NewClusterServiceClient(conn).CreateCluster(cctx, &loomv1.CreateClusterRequest{Parent: project, ClusterId: clusterID,
		RequestId: "create-" + clusterID, Cluster: &loomv1.Cluster{Network: &loomv1.NetworkConfig{Zone: zone},
			Compute: &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{{Id: "gpu", MachineType: machine, NodeCount: 1}}}}})
	if err != nil {
		return fmt.Errorf("create the cluster: %w", err)
	}
	ops := loomv1.NewOperationServiceClient(conn)
	for !op.GetDone() {
		if op, err = ops.WaitOperation(cctx, &loomv1.WaitOperationRequest{Name: op.GetName(), TimeoutSeconds: 10}); err != nil {
			return fmt.Errorf("wait for the cluster: %w", err)
		}
	}
	if e := op.GetError(); e != nil {
		return fmt.Errorf("create the cluster: %v", e)
	}
	b.cluster = op.GetCluster().GetName()

	// The API's calls and the ingress's messages carry the same key.
	uconn, err := grpc.NewClient(b.s.GatewayAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(auth.Bearer(b.key)))
	if err != nil {
		return err
	}
	context.AfterFunc(ctx, func() { _ = uconn.Close() })
	b.jobs = loomv1.NewJobServiceClient(uconn)
	b.writer = &kafka.Writer{Addr: kafka.TCP(b.s.BrokerAddr), Topic: topics.Ingress, RequiredAcks: kafka.RequireAll,
		BatchSize: b.o.batch, BatchTimeout: time.Millisecond, Balancer: &kafka.RoundRobin{}}
	b.results, err = tailResults(ctx, b.s.BrokerAddr)
	return err
}

// request is a SubmitJob of the benchmark: a one-node job named id.
func (b *bench) request(id string) *loomv1.SubmitJobRequest {
	return &loomv1.SubmitJobRequest{Parent: project, Job: &loomv1.Job{Cluster: b.cluster, DisplayName: id,
		Command: []string{"/bin/true"}, NodeCount: 1}}
}

// nextID is a fresh message id (and job display name) with prefix.
func (b *bench) nextID(prefix string) string {
	return fmt.Sprintf("%s-%06d", prefix, b.seq.Add(1))
}

// message is a SubmitJob CloudEvent in Kafka's binary mode
// (docs/integration.md).
func (b *bench) message(id string) (kafka.Message, error) {
	data, err := json.Marshal(map[string]any{"parent": project, "job": map[string]any{"cluster": b.cluster,
		"displayName": id, "command": []string{"/bin/true"}, "nodeCount": 1}})
	if err != nil {
		return kafka.Message{}, err
	}
	h := func(k, v string) kafka.Header { return kafka.Header{Key: k, Value: []byte(v)} }
	return kafka.Message{Value: data, Headers: []kafka.Header{h("ce_specversion", "1.0"), h("ce_id", id), h("ce_source", source),
		h("ce_type", submitType), h("ce_credential", b.key), h("content-type", "application/json")}}, nil
}

// probe sends one message and waits for its result (or, failing that, its
// job) for -probe-timeout: no answer means no ingress, and the benchmark
// stops rather than hang.
func (b *bench) probe(ctx context.Context) error {
	id := b.nextID("probe")
	m, err := b.message(id)
	if err != nil {
		return err
	}
	wait := b.results.expect([]string{id})
	pctx, cancel := context.WithTimeout(ctx, b.o.probeTimeout)
	defer cancel()
	if err := b.writer.WriteMessages(pctx, m); err != nil {
		return fmt.Errorf("produce to %s at %s: %w", topics.Ingress, b.s.BrokerAddr, err)
	}
	if err := wait(pctx); err == nil {
		return nil
	} else if !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if seen, err := b.jobsNamed(ctx); err == nil && !seen[id].IsZero() {
		logf("no IngressResult for the probe message, but its job exists: polling ListJobs instead")
		b.viaJobs = true
		go b.pollJobs(ctx)
		return nil
	}
	return fmt.Errorf("no IngressResult on %s and no job made within %v of a %s message on %s: "+
		"the bridge's ingress is not running (services/bridge; see docs/integration.md), or refuses the benchmark's messages (loom ingress messages --project %s)",
		topics.Public, b.o.probeTimeout, submitType, topics.Ingress, projectID)
}

// waitAccepted waits until every id is accepted: its result seen (or, when
// viaJobs, its job listed by pollJobs), for at most -timeout.
func (b *bench) waitAccepted(ctx context.Context, wait func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, b.o.timeout)
	defer cancel()
	return wait(ctx)
}

// pollJobs stands in for the IngressResult events when the ingress
// publishes none: it lists the project's jobs every 20 ms until ctx ends
// and records each benchmark job the first time it is listed, as accepted
// (its display name is its message's id). Its resolution is a poll's.
func (b *bench) pollJobs(ctx context.Context) {
	for ctx.Err() == nil {
		seen, err := b.jobsNamed(ctx)
		if err != nil && ctx.Err() == nil {
			logf("ListJobs: %v", err)
		}
		for id, at := range seen {
			b.results.record(id, at, "ACCEPTED")
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// jobsNamed lists the project's jobs and returns when each display name
// was listed.
func (b *bench) jobsNamed(ctx context.Context) (map[string]time.Time, error) {
	seen := map[string]time.Time{}
	err := paging.Each(func(token string) (string, error) {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		page, err := b.jobs.ListJobs(cctx, &loomv1.ListJobsRequest{Parent: project, PageSize: paging.MaxSize, PageToken: token})
		now := time.Now()
		for _, j := range page.GetJobs() {
			seen[j.GetDisplayName()] = now
		}
		return page.GetNextPageToken(), err
	})
	return seen, err
}

// ingressThroughput produces -n messages in batches as fast as the broker
// takes them and times until every one is accepted.
func (b *bench) ingressThroughput(ctx context.Context) (float64, time.Duration, error) {
	ids := make([]string, b.o.n)
	msgs := make([]kafka.Message, b.o.n)
	for i := range ids {
		ids[i] = b.nextID("tput")
		m, err := b.message(ids[i])
		if err != nil {
			return 0, 0, err
		}
		msgs[i] = m
	}
	wait := b.results.expect(ids)
	start := time.Now()
	for i := 0; i < len(msgs); i += b.o.batch {
		if err := b.writer.WriteMessages(ctx, msgs[i:min(i+b.o.batch, len(msgs))]...); err != nil {
			return 0, 0, fmt.Errorf("produce: %w", err)
		}
	}
	if err := b.waitAccepted(ctx, wait); err != nil {
		return 0, 0, err
	}
	d := time.Since(start)
	return float64(len(ids)) / d.Seconds(), d, nil
}

// apiThroughput makes -n SubmitJob calls, -concurrency in flight.
func (b *bench) apiThroughput(ctx context.Context) (float64, time.Duration, error) {
	next := atomic.Int64{}
	var wg sync.WaitGroup
	errc := make(chan error, b.o.concurrency)
	start := time.Now()
	for range b.o.concurrency {
		wg.Go(func() {
			for next.Add(1) <= int64(b.o.n) {
				cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				_, err := b.jobs.SubmitJob(cctx, b.request(b.nextID("api-tput")))
				cancel()
				if err != nil {
					errc <- err
					return
				}
			}
		})
	}
	wg.Wait()
	d := time.Since(start)
	close(errc)
	if err := <-errc; err != nil {
		return 0, 0, fmt.Errorf("SubmitJob: %w", err)
	}
	return float64(b.o.n) / d.Seconds(), d, nil
}

// latency are one run's per-request latencies, sorted.
type latency struct {
	n        int
	p50, p99 time.Duration
	max      time.Duration
}

func summarize(ds []time.Duration) latency {
	slices.Sort(ds)
	if len(ds) == 0 {
		return latency{}
	}
	return latency{n: len(ds), p50: ds[len(ds)/2], p99: ds[min(len(ds)-1, len(ds)*99/100)], max: ds[len(ds)-1]}
}

// ingressLatency produces one message every 1/-rate for -duration, each
// in a produce request of its own, and times each to its acceptance.
func (b *bench) ingressLatency(ctx context.Context) (latency, error) {
	count := int(b.o.rate * b.o.duration.Seconds())
	ids := make([]string, count)
	for i := range ids {
		ids[i] = b.nextID("lat")
	}
	wait := b.results.expect(ids)
	sent := make([]time.Time, count)
	tick := time.NewTicker(time.Duration(float64(time.Second) / b.o.rate))
	defer tick.Stop()
	var wg sync.WaitGroup
	errc := make(chan error, count)
	for i, id := range ids {
		<-tick.C
		m, err := b.message(id)
		if err != nil {
			return latency{}, err
		}
		sent[i] = time.Now()
		// Produced concurrently: a slow produce does not delay the next
		// tick (the rate is the producer's, whatever the broker does).
		wg.Go(func() {
			if err := b.writer.WriteMessages(ctx, m); err != nil {
				errc <- err
			}
		})
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return latency{}, fmt.Errorf("produce: %w", err)
	}
	if err := b.waitAccepted(ctx, wait); err != nil {
		return latency{}, err
	}
	var ds []time.Duration
	for i, id := range ids {
		ds = append(ds, b.results.seenAt(id).Sub(sent[i]))
	}
	return summarize(ds), nil
}

// apiLatency makes one SubmitJob call every 1/-rate for -duration, each
// timed to its answer.
func (b *bench) apiLatency(ctx context.Context) (latency, error) {
	count := int(b.o.rate * b.o.duration.Seconds())
	ds := make([]time.Duration, count)
	tick := time.NewTicker(time.Duration(float64(time.Second) / b.o.rate))
	defer tick.Stop()
	var wg sync.WaitGroup
	errc := make(chan error, count)
	for i := range count {
		<-tick.C
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			t0 := time.Now()
			if _, err := b.jobs.SubmitJob(cctx, b.request(b.nextID("api-lat"))); err != nil {
				errc <- err
				return
			}
			ds[i] = time.Since(t0)
		})
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return latency{}, fmt.Errorf("SubmitJob: %w", err)
	}
	return summarize(ds), nil
}

// result is what the runs measured.
type result struct {
	mode                       string
	ingressTput, apiTput       float64
	ingressTputDur, apiTputDur time.Duration
	ingressLat, apiLat         latency
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func render(o options, r result, took time.Duration) string {
	host, _ := os.Hostname()
	var b strings.Builder
	w := func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }
	if r.mode == "" {
		r.mode = "nothing: not run, -api-only"
	}
	w("## Ingress end to end beside the API: SubmitJob over Kafka (ingressbench)\n\n")
	w("One embedded stack (`cmd/loom/stack`, the simulated cloud, every service in one process) with a one-node cluster; ")
	w("the ingress and the API carry the same project user's API key, so the gateway's authentication, authorization, validation and quotas are the same for both. ")
	w("Ingress: SubmitJob CloudEvents (Kafka binary mode) produced to `%s`; a message is accepted when its `%s` with outcome ACCEPTED is seen on `%s` (acceptance read by %s). ", topics.Ingress, resultType, topics.Public, r.mode)
	w("API: `JobService/SubmitJob` over gRPC; a call is accepted when it answers. ")
	w("Throughput: %d requests as fast as they go (ingress: produce requests of %d messages; API: %d calls in flight), from the first to the last accepted. ", o.n, o.batch, o.concurrency)
	w("Latency: %g requests a second for %v, each timed from just before it is produced (sent) to its acceptance. ", o.rate, o.duration)
	w("Run on %s (%d CPUs, %s/%s) in %v. Rerun: `go run ./bench/cmd/ingressbench -report bench/REPORT.md`.\n\n", host, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, took.Round(time.Second))
	w("| measure | ingress (Kafka) | API (gRPC) | ingress / API |\n|---|---:|---:|---:|\n")
	w("| throughput, requests/s (n = %d) | %.0f | %.0f | %.2f |\n", o.n, r.ingressTput, r.apiTput, r.ingressTput/r.apiTput)
	w("| latency p50 at %g/s | %.1f ms | %.1f ms | %.1f× |\n", o.rate, ms(r.ingressLat.p50), ms(r.apiLat.p50), float64(r.ingressLat.p50)/float64(max(r.apiLat.p50, 1)))
	w("| latency p99 at %g/s | %.1f ms | %.1f ms | %.1f× |\n", o.rate, ms(r.ingressLat.p99), ms(r.apiLat.p99), float64(r.ingressLat.p99)/float64(max(r.apiLat.p99, 1)))
	w("| latency max | %.1f ms | %.1f ms | |\n\n", ms(r.ingressLat.max), ms(r.apiLat.max))
	w("The ingress's latency includes what the API's does not: the produce, the bridge's fetch from Kafka, its dedupe in Redis, the gateway call, and the result event's way out through the egress and Kafka. ")
	w("Throughput runs took %v (ingress) and %v (API); latency runs timed %d and %d requests.\n", r.ingressTputDur.Round(time.Millisecond), r.apiTputDur.Round(time.Millisecond), r.ingressLat.n, r.apiLat.n)
	return b.String()
}

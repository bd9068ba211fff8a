package service

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/telemetry"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
)

// TestBaseMetricsOnScrape runs a service on real Redis and the embedded
// broker, makes it do one of everything (a gRPC call, consumed events that
// write the outbox, a refused record that is dead-lettered) and checks that
// every base metric is on its /metrics with exactly the contract's labels.
func TestBaseMetricsOnScrape(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	ctx := testkit.Context(t, 90*time.Second)
	b, err := New(ctx, "metricstest", cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	start(t, b, []Consume{{Topics: []string{topics.JobCommands}, Handler: cancelHandler(func() *store.Store { return b.Store })}})
	grpcAddr, err := b.GRPCAddr(ctx)
	if err != nil {
		t.Fatal(err)
	}
	httpAddr, err := b.HTTPAddr(ctx)
	if err != nil {
		t.Fatal(err)
	}

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("health check: %v", err)
	}
	// A NotFound: the code label says what the client got.
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "nope"}); err == nil {
		t.Fatal("health check of an unknown service succeeded")
	}

	// The gateway's commands (envelope.Senders: another service's
	// CancelJob is refused as wrong-sender).
	const jobs = 3
	for i := range jobs {
		testkit.PublishAs(t, cfg.Brokers[0], "gateway", envelope.New(topics.JobCommands, "projects/default/clusters/c1", "loom/gateway",
			&eventsv1.CancelJob{Job: fmt.Sprintf("projects/default/jobs/%d", i), Cluster: "projects/default/clusters/c1"}))
	}
	// Unsigned: the consumer refuses it and dead-letters it.
	forged, err := envelope.Encode(envelope.New(topics.JobCommands, "projects/default/clusters/c1", "loom/test",
		&eventsv1.CancelJob{Job: "projects/default/jobs/forged", Cluster: "projects/default/clusters/c1"}))
	if err != nil {
		t.Fatal(err)
	}
	testkit.PublishMessages(t, cfg.Brokers[0], forged)

	var s testkit.Samples
	defer func() {
		if t.Failed() {
			for _, x := range s {
				if strings.HasPrefix(x.Name, "loom_") {
					t.Log(x)
				}
			}
		}
	}()
	testkit.WaitFor(t, 30*time.Second, "records consumed, dead-lettered and relayed", func() (bool, error) {
		var err error
		s, err = testkit.ScrapeErr(httpAddr)
		if err != nil {
			return false, err
		}
		return s.Sum("loom_consumer_records_total", "topic", topics.JobCommands) == jobs+1 &&
			s.Sum("loom_dead_letters_total", "topic", topics.JobCommands) == 1 &&
			s.Sum("loom_outbox_depth") == 0, nil
	})

	want := map[string][]string{
		"loom_build_info":                         {"goversion", "revision", "service", "version"},
		"loom_grpc_server_handled_total":          {"code", "method", "service"},
		"loom_grpc_server_handling_seconds_count": {"method", "service"},
		"loom_consumer_records_total":             {"group", "partition", "service", "topic"},
		"loom_consumer_handle_seconds_count":      {"group", "service", "topic"},
		"loom_consumer_lag_records":               {"group", "partition", "service", "topic"},
		"loom_consumer_lag_seconds":               {"group", "partition", "service", "topic"},
		"loom_outbox_depth":                       {"service"},
		"loom_outbox_oldest_age_seconds":          {"service"},
		"loom_dead_letters_total":                 {"service", "topic"},
		"loom_redis_call_seconds_count":           {"command", "service"},
	}
	for name, labels := range want {
		if got := s.LabelNames(name); !slices.Equal(got, labels) {
			t.Errorf("%s labels = %v, want %v", name, got, labels)
		}
		for _, x := range s.Find(name) {
			if x.Labels["service"] != "metricstest" {
				t.Errorf("%s: service=%q, want metricstest", x, x.Labels["service"])
			}
		}
	}
	if v := s.Sum("loom_build_info"); v != 1 {
		t.Errorf("loom_build_info = %v, want 1", v)
	}
	if x := s.Find("loom_build_info"); len(x) == 1 && !strings.HasPrefix(x[0].Labels["goversion"], "go") {
		t.Errorf("build info goversion = %q", x[0].Labels["goversion"])
	}
	check := "/grpc.health.v1.Health/Check"
	if v := s.Sum("loom_grpc_server_handled_total", "method", check, "code", "OK"); v != 1 {
		t.Errorf("handled{%s,OK} = %v, want 1", check, v)
	}
	if v := s.Sum("loom_grpc_server_handled_total", "method", check, "code", "NotFound"); v != 1 {
		t.Errorf("handled{%s,NotFound} = %v, want 1", check, v)
	}
	// Methods never called are there at 0, so rates exist from the start.
	if len(s.Find("loom_grpc_server_handled_total", "method", "/grpc.health.v1.Health/Watch", "code", "OK")) != 1 {
		t.Errorf("no zero series for Health/Watch: %v", s.Find("loom_grpc_server_handled_total"))
	}
	if v := s.Sum("loom_grpc_server_handling_seconds_count", "method", check); v != 2 {
		t.Errorf("handling_seconds_count{%s} = %v, want 2", check, v)
	}
	if v := s.Sum("loom_consumer_handle_seconds_count", "group", "loom-metricstest", "topic", topics.JobCommands); v != jobs+1 {
		t.Errorf("handle_seconds_count = %v, want %d", v, jobs+1)
	}
	// The group's lag: one series per partition of the topic.
	parts := topics.Partitions(topics.JobCommands)
	if got := len(s.Find("loom_consumer_lag_records", "group", "loom-metricstest", "topic", topics.JobCommands)); got != parts {
		t.Errorf("lag series = %d, want one per partition (%d)", got, parts)
	}
	for _, cmd := range []string{"evalsha", "pipeline"} {
		if s.Sum("loom_redis_call_seconds_count", "command", cmd) == 0 {
			t.Errorf("no Redis calls timed for %q: %v", cmd, s.Find("loom_redis_call_seconds_count"))
		}
	}
	if len(s.Find("loom_outbox_oldest_age_seconds")) != 1 {
		t.Errorf("loom_outbox_oldest_age_seconds missing")
	}
}

// TestOutboxMetricsShowAWaitingEntry checks depth and age against an outbox
// no relay empties: a store on real Redis whose entry waits.
func TestOutboxMetricsShowAWaitingEntry(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	cfg := testConfig(t)
	b, err := New(ctx, "outboxtest", cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	var tx store.Tx
	tx.Emit(envelope.New(topics.JobEvents, "k", "loom/test", &eventsv1.CancelJob{Job: "projects/default/jobs/1"}))
	if _, err := b.Store.Apply(ctx, "", &tx); err != nil {
		t.Fatal(err)
	}
	// The telemetry server alone: Run would start the relay.
	srv := newMetricsServer(t, b)
	testkit.WaitFor(t, 10*time.Second, "outbox entry older than 0", func() (bool, error) {
		s, err := testkit.ScrapeErr(srv)
		if err != nil {
			return false, err
		}
		return s.Sum("loom_outbox_depth", "service", "outboxtest") == 1 &&
			s.Sum("loom_outbox_oldest_age_seconds", "service", "outboxtest") > 0, nil
	})
}

// newMetricsServer serves b's /metrics without running b, and returns its
// address.
func newMetricsServer(t *testing.T, b *Base) string {
	t.Helper()
	srv := telemetry.NewServer("127.0.0.1:0", b.Telemetry, nil)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return srv.Addr()
}

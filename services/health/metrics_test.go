package health_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/health"
)

// TestHealthMetricsOnScrape runs health on real Redis and the embedded
// broker, registers a node and hands it two check results, a failed
// gpu_diag and a passed site check, and reads health's domain row from
// /metrics: nodes by state, checks by check and result (the site check's
// own name never a label), remediation steps.
func TestHealthMetricsOnScrape(t *testing.T) {
	t.Parallel()
	broker := testkit.Broker(t)
	redisAddr, _ := testkit.Redis(t)
	httpAddr := freeAddr(t)
	cfg := health.Config{Common: config.Common{Brokers: []string{broker}, RedisAddr: redisAddr, ServiceKeyFile: testkit.ServiceKeyFile(t),
		GRPCAddr: freeAddr(t), HTTPAddr: httpAddr, LogLevel: "warn"}, HeartbeatTimeout: time.Hour}
	testkit.Start(t, "health", func(ctx context.Context) error { return health.Run(ctx, cfg) })

	// The node's agent: its reports are no service's to send.
	p := testkit.NodeProducer(t, broker, node, cluster, "gpu")
	publish := func(topic string, payload proto.Message) {
		t.Helper()
		if err := p.Publish(context.Background(), envelope.New(topic, node, "loom/agent", payload)); err != nil {
			t.Fatalf("publish %T: %v", payload, err)
		}
	}
	addNode(t, broker)
	publish(topics.NodeTelemetry, &eventsv1.AgentRegistered{Node: node, Cluster: cluster, Hostname: "gpu-0001", BootId: "b1"})
	publish(topics.NodeTelemetry, &eventsv1.Heartbeat{Node: node, Cluster: cluster, BootId: "b1", Time: timestamppb.Now()})
	result := func(id, check string, o loomv1.CheckOutcome) *eventsv1.HealthCheckCompleted {
		return &eventsv1.HealthCheckCompleted{Result: &loomv1.HealthCheckResult{Name: cluster + "/healthResults/" + id, Node: node,
			Hostname: "gpu-0001", Check: check, Level: 1, Outcome: o, StartTime: timestamppb.Now(), EndTime: timestamppb.Now()}}
	}
	publish(topics.NodeTelemetry, result("r1", "gpu_diag", loomv1.CheckOutcome_CHECK_FAIL))
	publish(topics.NodeTelemetry, result("r2", "acme-fabric-probe", loomv1.CheckOutcome_CHECK_PASS))

	var s testkit.Samples
	testkit.WaitFor(t, wait, "check results counted", func() (bool, error) {
		var err error
		s, err = testkit.ScrapeErr(httpAddr)
		return err == nil && s.Sum("loom_health_checks_total", "check", "gpu_diag", "result", "fail") == 1 &&
			s.Sum("loom_health_checks_total", "check", "site", "result", "pass") == 1 &&
			s.Sum("loom_health_nodes") == 1, nil
	})
	if s.Sum("loom_health_checks_total") != 2 {
		t.Errorf("checks_total = %v, want 2: %v", s.Sum("loom_health_checks_total"), s.Find("loom_health_checks_total"))
	}
	for _, st := range []string{"healthy", "suspect", "draining", "down", "unreachable"} {
		if len(s.Find("loom_health_nodes", "state", st)) != 1 {
			t.Errorf("no loom_health_nodes{state=%q}", st)
		}
	}
	for _, step := range []string{"reset_gpu", "reboot", "reimage", "replace", "drain"} {
		if len(s.Find("loom_health_remediations_total", "step", step)) != 1 {
			t.Errorf("no loom_health_remediations_total{step=%q}", step)
		}
	}
	for _, x := range s {
		for k, v := range x.Labels {
			if strings.Contains(v, "acme") || strings.Contains(v, "gpu-0001") || strings.Contains(v, "clusters/") {
				t.Errorf("%s: label %s=%q holds a name from the records", x.Name, k, v)
			}
		}
	}
}

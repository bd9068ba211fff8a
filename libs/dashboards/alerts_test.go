package dashboards

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loom-ml/loom/libs/testkit/need"
)

// alertCases is a `promtool test rules` file: synthetic series (one sample a
// minute) for which each alert must fire, with its annotations rendered,
// beside near misses for which it must not: /B's NotFound (a client
// error), partition 1 (lag grows but records are consumed), the registry's
// young outbox, the error ratio before its 5 minutes, dead letters after
// their 5-minute window, metric refusals before the first and of a reason
// that stays at 0.
const alertCases = `rule_files: [rules.yml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'loom_grpc_server_handled_total{service="gateway",method="/A",code="OK"}'
        values: '0+100x20'
      - series: 'loom_grpc_server_handled_total{service="gateway",method="/A",code="Internal"}'
        values: '0+5x20'
      - series: 'loom_grpc_server_handled_total{service="gateway",method="/B",code="OK"}'
        values: '0+100x20'
      - series: 'loom_grpc_server_handled_total{service="gateway",method="/B",code="NotFound"}'
        values: '0+50x20'
      - series: 'loom_consumer_lag_records{service="scheduler",group="g",topic="t",partition="0"}'
        values: '0+10x20'
      - series: 'loom_consumer_records_total{service="scheduler",group="g",topic="t",partition="0"}'
        values: '5x20'
      - series: 'loom_consumer_lag_records{service="scheduler",group="g",topic="t",partition="1"}'
        values: '0+10x20'
      - series: 'loom_consumer_records_total{service="scheduler",group="g",topic="t",partition="1"}'
        values: '0+3x20'
      - series: 'loom_outbox_oldest_age_seconds{service="gateway"}'
        values: '0+10x20'
      - series: 'loom_outbox_oldest_age_seconds{service="registry"}'
        values: '5x20'
      - series: 'loom_dead_letters_total{service="registry",topic="loom.jobs.v1"}'
        values: '0x8 2x12'
      - series: 'up{job="health",instance="h:9173"}'
        values: '1x8 0x12'
      - series: 'up{job="gateway",instance="g:9170"}'
        values: '1x20'
      - series: 'loom_training_metrics_refused_total{job="training",instance="t:9175",reason="held-full"}'
        values: '0x8 3x12'
      - series: 'loom_training_metrics_refused_total{job="training",instance="t:9175",reason="rate"}'
        values: '0x20'
      - series: 'loom_training_metrics_points_dropped_total{job="training",instance="t:9175",limit="project"}'
        values: '0x8 500x12'
      - series: 'loom_training_metrics_points_dropped_total{job="training",instance="t:9175",limit="job"}'
        values: '0x20'
    alert_rule_test:
      - eval_time: 3m
        alertname: LoomHighErrorRatio
      - eval_time: 12m
        alertname: LoomHighErrorRatio
        exp_alerts:
          - exp_labels: {severity: page, service: gateway, method: /A}
            exp_annotations:
              summary: "gateway: more than 1% of /A calls fail"
              description: "gateway has answered 4.762% of /A calls with a server error (Unknown, Internal, Unavailable, DeadlineExceeded, DataLoss, Unimplemented) for 5 minutes."
              action: "Read the service's logs at ERROR for that method; check its dependencies (Redis latency, consumer lag) on its dashboard."
      - eval_time: 12m
        alertname: LoomConsumerStalled
        exp_alerts:
          - exp_labels: {severity: page, service: scheduler, group: g, topic: t, partition: "0"}
            exp_annotations:
              summary: "scheduler: consumer group g is stalled on t/0"
              description: "The lag of g on t partition 0 grew over the last 5 minutes and it consumed no record."
              action: "Look for a handler stuck on one record (the service's logs, its gRPC and Redis latency); restart the service if it does not move; a poison record is dead-lettered after its retries."
      - eval_time: 12m
        alertname: LoomOutboxStuck
        exp_alerts:
          - exp_labels: {severity: page, service: gateway}
            exp_annotations:
              summary: "gateway: outbox entry waiting for over 60 s"
              description: "The oldest entry of gateway's outbox is 2m 0s old: commands are not reaching Kafka."
              action: "Check that Kafka is up and reachable from the service (its logs say why a publish fails); a record the broker refuses for good is set aside."
      - eval_time: 10m
        alertname: LoomDeadLetters
        exp_alerts:
          - exp_labels: {severity: ticket, service: registry, topic: loom.jobs.v1}
            exp_annotations:
              summary: "registry: records dead-lettered from loom.jobs.v1"
              description: "2 records of loom.jobs.v1 were dead-lettered by registry in the last 5 minutes: each failed its retries."
              action: "Read the dead letters (their loom_dlq_error header says why), fix the cause and replay them."
      - eval_time: 19m
        alertname: LoomDeadLetters
      - eval_time: 8m
        alertname: LoomTrainingMetricsRefused
      - eval_time: 12m
        alertname: LoomTrainingMetricsRefused
        exp_alerts:
          - exp_labels: {severity: ticket, job: training, reason: held-full}
            exp_annotations:
              summary: "training: training metric records refused (held-full)"
              description: "3 records of training metrics (MetricsReported) were refused as held-full in the last 15 minutes: their points are missing from the jobs' curves."
              action: "Read the training service's WARN lines \"metrics refused\" (job, attempt, signer); docs/metrics.md says what each reason means: rate and held-full are bounds a job ran into, not-placed a writer that is not one of the run's nodes."
      - eval_time: 8m
        alertname: LoomTrainingMetricsDropped
      - eval_time: 12m
        alertname: LoomTrainingMetricsDropped
        exp_alerts:
          - exp_labels: {severity: ticket, job: training, limit: project}
            exp_annotations:
              summary: "training: training metric points dropped past the project limit"
              description: "500 training metric points were dropped in the last 15 minutes because a project keeps all it may: those points are missing from the jobs' curves."
              action: "Read the training service's WARN lines \"metric points dropped\" (job, points); docs/metrics.md gives each limit: for project, ended jobs' series free the budget after -metrics-retention, or raise -metrics-project-points; for job, the program logs more than a job may keep."
      - eval_time: 12m
        alertname: LoomTargetDown
        exp_alerts:
          - exp_labels: {severity: page, job: health, instance: "h:9173"}
            exp_annotations:
              summary: "health at h:9173 does not answer its /metrics"
              description: "Prometheus has not scraped h:9173 for 2 minutes."
              action: "Check that the process runs and its HTTP address (LOOM_<SERVICE>_HTTP_ADDR) is reachable from Prometheus."
`

// TestAlertsFireOnlyWhenTheyShould runs Prometheus' own rule evaluation
// (promtool test rules) on the generated rules over synthetic series.
func TestAlertsFireOnlyWhenTheyShould(t *testing.T) {
	t.Parallel()
	need.Tools(t, "apt-get install prometheus", "promtool")
	dir := t.TempDir()
	for name, data := range map[string][]byte{"rules.yml": Rules(), "cases.yml": []byte(alertCases)} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("promtool", "test", "rules", "cases.yml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
	// Every alert has a case.
	for _, a := range Alerts() {
		if !strings.Contains(alertCases, "alertname: "+a.Name+"\n") {
			t.Errorf("alert %s has no case in alertCases", a.Name)
		}
	}
}

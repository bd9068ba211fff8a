package training

import (
	"context"
	"strings"
	"testing"

	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/series"
	"github.com/loom-ml/loom/libs/testkit"
)

// TestTrainingMetricsOnScrape runs training on real Redis and the embedded
// broker, has alice submit three CustomJobs, and reads training's domain row
// from /metrics: three custom jobs queued, every kind, state and trial state
// present, every metric-write refusal reason exported from 0, no label naming
// a job or a user.
func TestTrainingMetricsOnScrape(t *testing.T) {
	t.Parallel()
	broker := testkit.Broker(t)
	redisAddr, _ := testkit.Redis(t)
	httpAddr := testkit.FreeAddr()
	cfg := Config{Common: config.Common{
		Brokers: []string{broker}, RedisAddr: redisAddr, ServiceKeyFile: testkit.ServiceKeyFile(t),
		GRPCAddr: "127.0.0.1:0", HTTPAddr: httpAddr, LogLevel: "warn", CreateTopics: true,
	}}
	testkit.Start(t, "training", func(ctx context.Context) error { return run(ctx, cfg, nil) })
	var evs []envelope.Event
	for i := 901; i <= 903; i++ {
		evs = append(evs, createCustomJob(i, "alice", "team-x"))
	}
	testkit.PublishAs(t, broker, "gateway", evs...)

	var s testkit.Samples
	testkit.WaitFor(t, wait, "3 custom jobs on /metrics", func() (bool, error) {
		var err error
		s, err = testkit.ScrapeErr(httpAddr)
		return err == nil && s.Sum("loom_training_jobs", "kind", "custom_job") == 3, nil
	})
	if s.Sum("loom_training_jobs", "kind", "custom_job", "state", "queued") != 3 {
		t.Errorf("queued custom jobs: %v", s.Find("loom_training_jobs", "kind", "custom_job"))
	}
	for _, k := range []string{"hyperparameter_tuning_job", "training_pipeline"} {
		if len(s.Find("loom_training_jobs", "kind", k, "state", "running")) != 1 {
			t.Errorf("no loom_training_jobs{kind=%q,state=\"running\"}", k)
		}
	}
	for _, st := range []string{"requested", "active", "stopping", "succeeded", "infeasible"} {
		if len(s.Find("loom_training_trials", "state", st)) != 1 {
			t.Errorf("no loom_training_trials{state=%q}", st)
		}
	}
	for _, r := range series.Reasons {
		if len(s.Find("loom_training_metrics_refused_total", "reason", r)) != 1 {
			t.Errorf("no loom_training_metrics_refused_total{reason=%q}", r)
		}
	}
	for _, x := range s {
		if x.Name == "loom_build_info" {
			continue
		}
		for k, v := range x.Labels {
			if strings.Contains(v, "alice") || strings.Contains(v, "customJobs") || strings.Contains(v, "90") || strings.Contains(v, "team-x") {
				t.Errorf("%s: label %s=%q holds an id", x.Name, k, v)
			}
		}
	}
}

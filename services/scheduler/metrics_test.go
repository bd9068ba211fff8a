package scheduler_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/testkit"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler"
)

// TestSchedulerMetricsOnScrape runs a scheduler on real Redis and the
// embedded broker, gives it a node with 4 GPUs and two jobs that cannot
// both run (2 and 4 GPUs), and reads its domain row
// and base set from /metrics: jobs by state and reason, queue depth, GPUs
// allocated and idle, pass durations. No label value is a job, cluster or
// node name.
func TestSchedulerMetricsOnScrape(t *testing.T) {
	t.Parallel()
	broker := testkit.Broker(t)
	redisAddr, _ := testkit.Redis(t)
	httpAddr := freeAddr(t)
	cfg := scheduler.Config{Common: config.Common{
		Brokers: []string{broker}, RedisAddr: redisAddr, GRPCAddr: freeAddr(t), ServiceKeyFile: testkit.ServiceKeyFile(t),
		HTTPAddr: httpAddr, LogLevel: "warn",
	}, MasterAddr: scheduler.DefaultMasterAddr, TickInterval: 100 * time.Millisecond}
	in := runScheduler(t, cfg)
	f := newFeeder(t, broker)
	f.cluster()
	f.node("gpu-0001", 4)
	f.submit(4242, 1, 2)
	f.submit(4243, 1, 4)
	// Which of the two starts is the scheduler's choice: one runs, one waits.
	testkit.WaitFor(t, 30*time.Second, "job 4242 known", func() (bool, error) {
		_, err := in.client.GetJob(context.Background(), &loomv1.GetJobRequest{Name: jobName(4242)})
		return err == nil, nil
	})

	var s testkit.Samples
	testkit.WaitFor(t, 30*time.Second, "scheduler gauges", func() (bool, error) {
		var err error
		s, err = testkit.ScrapeErr(httpAddr)
		if err != nil {
			return false, nil // not listening yet
		}
		return s.Sum("loom_scheduler_jobs", "state", "running") == 1 && s.Sum("loom_scheduler_jobs", "state", "pending") == 1 &&
			s.Sum("loom_scheduler_queue_depth") == 1 &&
			s.Sum("loom_scheduler_gpus", "state", "allocated") > 0 &&
			s.Sum("loom_scheduler_gpus", "state", "allocated")+s.Sum("loom_scheduler_gpus", "state", "idle") == 4 &&
			// A record is counted once handled, which can be a moment after
			// the state it made is seen: wait for the four, not one scrape.
			s.Sum("loom_consumer_records_total", "service", "scheduler", "group", "loom-scheduler") >= 4, nil
	})
	pending := s.Find("loom_scheduler_jobs", "state", "pending")
	var reason string
	for _, x := range pending {
		if x.Value == 1 {
			reason = x.Labels["reason"]
		}
	}
	if reason != "Resources" && reason != "Priority" {
		t.Errorf("pending job's reason label %q, want Resources (or Priority): %v", reason, pending)
	}
	if s.Sum("loom_scheduler_pass_seconds_count") == 0 {
		t.Error("no scheduling pass timed")
	}
	if s.Sum("loom_consumer_records_total", "service", "scheduler", "group", "loom-scheduler") < 4 {
		t.Errorf("scheduler consumed records: %v", s.Find("loom_consumer_records_total"))
	}
	if len(s.Find("loom_consumer_lag_records", "service", "scheduler", "group", "loom-scheduler")) == 0 {
		t.Error("no lag series for the scheduler's group")
	}
	if s.Sum("loom_grpc_server_handled_total", "service", "scheduler", "method", "/loom.v1.JobService/GetJob") == 0 {
		t.Errorf("GetJob calls not counted: %v", s.Find("loom_grpc_server_handled_total", "method", "/loom.v1.JobService/GetJob"))
	}
	noIDs(t, s, "4242", "4243", "projects/", "gpu-0001")
}

// noIDs fails the test when a label value of a loom_ metric holds one of ids.
func noIDs(t *testing.T, s testkit.Samples, ids ...string) {
	t.Helper()
	for _, x := range s {
		if !strings.HasPrefix(x.Name, "loom_") {
			continue
		}
		for k, v := range x.Labels {
			for _, id := range ids {
				if strings.Contains(v, id) {
					t.Errorf("%s: label %s=%q holds an id (%s)", x.Name, k, v, id)
				}
			}
		}
	}
}

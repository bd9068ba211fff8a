package registry

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/testkit"
)

// TestRegistryMetricsOnScrape runs the registry on real Redis and the
// embedded broker, sends the same completed job twice and another once, and
// expects /metrics to count two versions registered (the repeat registers
// nothing), with no label naming a job or model.
func TestRegistryMetricsOnScrape(t *testing.T) {
	t.Parallel()
	broker := testkit.Broker(t)
	redisAddr, _ := testkit.Redis(t)
	httpAddr := testkit.FreeAddr()
	cfg := Config{Common: config.Common{
		Brokers: []string{broker}, RedisAddr: redisAddr, ServiceKeyFile: testkit.ServiceKeyFile(t),
		GRPCAddr: "127.0.0.1:0", HTTPAddr: httpAddr, LogLevel: "warn", CreateTopics: true,
	}}
	testkit.Start(t, "registry", func(ctx context.Context) error { return run(ctx, cfg, nil) })
	prod := bus.NewProducer([]string{broker})
	prod.SetSigner(testkit.SignerAs("scheduler")) // a JobChanged is the scheduler's (envelope.Senders)
	t.Cleanup(func() { _ = prod.Close() })
	testkit.WaitFor(t, 30*time.Second, "registry serving /metrics", func() (bool, error) {
		_, err := testkit.ScrapeErr(httpAddr)
		return err == nil, nil
	})
	if err := prod.Publish(context.Background(), completedJob("71"), completedJob("71"), completedJob("72")); err != nil {
		t.Fatal(err)
	}
	var s testkit.Samples
	testkit.WaitFor(t, 30*time.Second, "2 versions counted, 3 records consumed", func() (bool, error) {
		var err error
		s, err = testkit.ScrapeErr(httpAddr)
		return err == nil && s.Sum("loom_consumer_records_total", "service", "registry") == 3 &&
			s.Sum("loom_registry_versions_registered_total") == 2, nil
	})
	for _, x := range s {
		if x.Name == "loom_build_info" {
			continue // a revision hash may hold any digits
		}
		for k, v := range x.Labels {
			if strings.Contains(v, "jobs/") || strings.Contains(v, "models/") || strings.Contains(v, "71") {
				t.Errorf("%s: label %s=%q holds an id", x.Name, k, v)
			}
		}
	}
}

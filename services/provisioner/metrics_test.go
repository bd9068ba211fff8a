package provisioner

import (
	"strings"
	"testing"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
)

// TestProvisionerMetricsOnScrape creates a 3-node cluster on the simulated
// provider and reads the provisioner's domain row from /metrics: every node
// state present, 3 nodes ready, every operation kind present, and no label
// value naming the cluster or a node.
func TestProvisionerMetricsOnScrape(t *testing.T) {
	t.Parallel()
	httpAddr := testkit.FreeAddr()
	f := startSim(t, func(cfg *Config) { cfg.HTTPAddr = httpAddr })

	name := project + "/clusters/metrics"
	testkit.PublishAs(t, f.broker, "gateway", envelope.New(topics.ClusterCommands, name, "loom/gateway",
		&eventsv1.CreateCluster{Operation: project + "/operations/m1", Cluster: clusterSpec(name, 3)}))
	waitRunning(t, f.broker, "m1")

	var s testkit.Samples
	testkit.WaitFor(t, wait, "3 nodes ready on /metrics", func() (bool, error) {
		var err error
		s, err = testkit.ScrapeErr(httpAddr)
		return err == nil && s.Sum("loom_provisioner_nodes", "state", "ready") == 3 &&
			s.Sum("loom_provisioner_operations_in_flight", "kind", "cluster_create") == 0, nil
	})
	if n := len(s.Find("loom_provisioner_nodes")); n < 9 {
		t.Errorf("node states on /metrics: %d, want every state: %v", n, s.Find("loom_provisioner_nodes"))
	}
	for _, k := range []string{"launch", "drain", "delete", "repair", "cluster_create", "cluster_update", "cluster_delete"} {
		if len(s.Find("loom_provisioner_operations_in_flight", "kind", k)) != 1 {
			t.Errorf("no operations_in_flight{kind=%q}", k)
		}
	}
	if s.Sum("loom_consumer_records_total", "service", "provisioner", "topic", topics.ClusterCommands) < 1 {
		t.Errorf("cluster command not counted: %v", s.Find("loom_consumer_records_total"))
	}
	for _, x := range s {
		for k, v := range x.Labels {
			if strings.Contains(v, "clusters/") || strings.Contains(v, "gpu-000") {
				t.Errorf("%s: label %s=%q holds an id", x.Name, k, v)
			}
		}
	}
}

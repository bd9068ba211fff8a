package app

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/loom-ml/loom/libs/telemetry"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// MetricsInterval is how often the provisioner's gauges are computed at
// most, whatever the scrape rate.
const MetricsInterval = 5 * time.Second

// Operation kinds of loom_provisioner_operations_in_flight: what the
// provisioner has under way, read from its records.
const (
	OpLaunch        = "launch"         // nodes PROVISIONING: an agent is being started
	OpDrain         = "drain"          // nodes DRAINING on their way out
	OpDelete        = "delete"         // nodes DELETING
	OpRepair        = "repair"         // repairs health asked for, not finished
	OpClusterCreate = "cluster_create" // clusters CREATING
	OpClusterUpdate = "cluster_update" // clusters UPDATING
	OpClusterDelete = "cluster_delete" // clusters DELETING
)

// RegisterMetrics registers the provisioner's domain row on reg:
// loom_provisioner_nodes{state} (nodes by state, every state present) and
// loom_provisioner_operations_in_flight{kind} (the Op* kinds), computed
// from memory at most every MetricsInterval.
func (a *App) RegisterMetrics(reg prometheus.Registerer) error {
	return reg.Register(telemetry.NewGaugeSet(MetricsInterval, []telemetry.Gauge{
		{Name: "loom_provisioner_nodes", Help: "Nodes on record, by state.", Labels: []string{"state"}},
		{Name: "loom_provisioner_operations_in_flight", Help: "Operations under way, by kind (launch, drain, delete, repair, cluster_create, cluster_update, cluster_delete).", Labels: []string{"kind"}},
	}, a.computeGauges))
}

func (a *App) computeGauges(emit telemetry.Emit) {
	nodes := map[loomv1.Node_State]int{}
	ops := map[string]int{OpLaunch: 0, OpDrain: 0, OpDelete: 0, OpRepair: 0, OpClusterCreate: 0, OpClusterUpdate: 0, OpClusterDelete: 0}
	a.mu.RLock()
	for _, n := range a.st.Nodes {
		nodes[n.GetState()]++
	}
	for _, c := range a.st.Clusters {
		switch c.State() {
		case loomv1.Cluster_CREATING:
			ops[OpClusterCreate]++
		case loomv1.Cluster_UPDATING:
			ops[OpClusterUpdate]++
		case loomv1.Cluster_DELETING:
			ops[OpClusterDelete]++
		}
	}
	ops[OpRepair] = len(a.st.Repairs)
	a.mu.RUnlock()
	ops[OpLaunch] = nodes[loomv1.Node_PROVISIONING]
	ops[OpDrain] = nodes[loomv1.Node_DRAINING]
	ops[OpDelete] = nodes[loomv1.Node_DELETING]
	for v := range loomv1.Node_State_name {
		s := loomv1.Node_State(v)
		if s == loomv1.Node_STATE_UNSPECIFIED {
			continue
		}
		emit("loom_provisioner_nodes", float64(nodes[s]), strings.ToLower(s.String()))
	}
	for k, n := range ops {
		emit("loom_provisioner_operations_in_flight", float64(n), k)
	}
}

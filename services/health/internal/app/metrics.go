package app

import (
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/noderate"
	"github.com/loom-ml/loom/libs/telemetry"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/health/internal/domain"
	"github.com/loom-ml/loom/services/health/internal/scan"
)

// MetricsInterval is how often loom_health_nodes is computed at most,
// whatever the scrape rate.
const MetricsInterval = 5 * time.Second

// builtinChecks are the check names loom_health_checks_total labels by
// name; a site check (any other name, an executable on the node) is "site",
// so that the label's values stay a fixed set.
var builtinChecks = map[string]bool{scan.GPUDiag: true, scan.AllReduce: true, scan.AllReducePair: true, scan.Disk: true, scan.Speed: true}

// checkLabel is a check name's label value.
func checkLabel(name string) string {
	if builtinChecks[name] {
		return name
	}
	return "site"
}

// enumLabel is an enum value's name in lower case without prefix
// ("CHECK_FAIL" → "fail", "ACTION_REBOOT" → "reboot").
func enumLabel(name, prefix string) string {
	return strings.ToLower(strings.TrimPrefix(name, prefix))
}

// metrics are health's counters (nil before RegisterMetrics).
type metrics struct {
	checks       *prometheus.CounterVec
	remediations *prometheus.CounterVec
	dropped      *prometheus.CounterVec
}

// dropReasons are loom_health_dropped_total's reasons: a fixed set (never a
// node's name: a label per node would grow with the fleet).
var dropReasons = []string{domain.DropRate, domain.DropGPUIndex, DropScanRate, DropCheckAddr}

// dropLogMsg is the drop log's line (noderate.DropLog): at most one every
// noderate.LogEvery per reason, summing up the drops since the last: how
// many, by how many nodes, the nodes that dropped the most with their
// counts (by_node=), and the latest record (latest.node=, latest.type=…).
const dropLogMsg = "records dropped unhandled"

// logDropped counts a record dropped for reason (m nil: not counted) and
// notes it in drops, with args (key-value pairs: the node, the event) of
// the record; the node it is counted against is the value of "node", or
// of "signer" when args have no "node".
func logDropped(drops *noderate.DropLog, m *metrics, now time.Time, reason string, args ...any) {
	if m != nil {
		m.dropped.WithLabelValues(reason).Inc()
	}
	drops.Note(now, reason, dropNode(args), args...)
}

// dropNode is the node args (key-value pairs) name: "node"'s value, else
// "signer"'s.
func dropNode(args []any) string {
	var signer string
	for i := 0; i+1 < len(args); i += 2 {
		v, _ := args[i+1].(string)
		switch args[i] {
		case "node":
			return v
		case "signer":
			signer = v
		}
	}
	return signer
}

// dropped is logDropped for the app's records. Callers hold mu.
func (a *App) dropped(reason string, args ...any) {
	logDropped(a.drops, a.metrics, a.now(), reason, args...)
}

// Dropped counts and logs a record another part of health (the scans)
// refused, for reason (one of dropReasons).
func (a *App) Dropped(reason string, args ...any) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.dropped(reason, args...)
}

// RegisterMetrics registers health's domain row on reg:
//
//   - loom_health_nodes{state}: member nodes by health state (healthy,
//     suspect, draining, rebooting, reimaging, replacing, quarantined,
//     unreachable, down), computed at most every MetricsInterval;
//   - loom_health_checks_total{check,result}: check results health took in
//     (check: a built-in name or "site"; result: pass, warn, fail, skipped,
//     error);
//   - loom_health_remediations_total{step}: remediation commands health
//     sent the provisioner, by action (reset_gpu, reboot, reimage, replace,
//     drain, resume, quarantine, ...);
//   - loom_health_dropped_total{reason}: nodes' records health dropped
//     unhandled (rate: past the node's -node-rate; gpu-index: an Xid on a
//     GPU the node does not have; scan-rate: the same as rate in
//     the scans' consumer group; check-addr: an AgentRegistered whose
//     check_addr is not a host:port);
//   - loom_health_behind_seconds: how far behind the nodes' telemetry health
//     is, in the partition furthest behind (domain.State.Behind); past half
//     the heartbeat timeout, the silence of a node health has not placed in
//     a partition is not judged;
//   - loom_health_partition_behind_seconds{partition}: the same for each
//     partition of the telemetry topic health has seen (a fixed set: the
//     topic's); past half the heartbeat timeout, the silence of the nodes
//     whose records go there is not judged.
func (a *App) RegisterMetrics(reg prometheus.Registerer) error {
	m := &metrics{
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "loom_health_checks_total",
			Help: "Health check results taken in, by check (built-in name, or site) and result."}, []string{"check", "result"}),
		remediations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "loom_health_remediations_total",
			Help: "Remediation commands sent, by step (the action asked of the provisioner)."}, []string{"step"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "loom_health_dropped_total",
			Help: "Nodes' records dropped unhandled, by reason (rate: past the node's rate; scan-rate: the same, in the scans' consumer group; check-addr: a bad check endpoint)."}, []string{"reason"}),
	}
	for _, r := range dropReasons {
		m.dropped.WithLabelValues(r)
	}
	for v, name := range loomv1.CheckOutcome_name {
		if v != 0 {
			for c := range builtinChecks {
				m.checks.WithLabelValues(c, enumLabel(name, "CHECK_"))
			}
		}
	}
	for v, name := range loomv1.RemediationAction_name {
		if v > 1 {
			m.remediations.WithLabelValues(enumLabel(name, "ACTION_"))
		}
	}
	gauges := telemetry.NewGaugeSet(MetricsInterval, []telemetry.Gauge{
		{Name: "loom_health_nodes", Help: "Member nodes by health state.", Labels: []string{"state"}},
		{Name: "loom_health_behind_seconds", Help: "How far behind the nodes' telemetry health is, in the partition furthest behind; past half the heartbeat timeout the silence of nodes health has not placed in a partition is not judged."},
		{Name: "loom_health_partition_behind_seconds", Help: "How far behind health is in each partition of the nodes' telemetry; past half the heartbeat timeout the silence of the nodes whose records go there is not judged.", Labels: []string{"partition"}},
	}, a.computeGauges)
	for _, c := range []prometheus.Collector{m.checks, m.remediations, m.dropped, gauges} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	a.mu.Lock()
	a.metrics = m
	a.mu.Unlock()
	return nil
}

func (a *App) computeGauges(emit telemetry.Emit) {
	counts := map[string]int{}
	for v, name := range loomv1.RemediationState_name {
		if v != 0 {
			counts[enumLabel(name, "NODE_")] = 0
		}
	}
	a.mu.Lock()
	for _, n := range a.state.Nodes() {
		counts[enumLabel(a.state.View(n.Name).GetState().String(), "NODE_")]++
	}
	now := a.now()
	behind, parts := a.state.Behind(now), a.state.PartitionsBehind(now)
	a.mu.Unlock()
	emit("loom_health_behind_seconds", behind.Seconds())
	for p, lag := range parts {
		emit("loom_health_partition_behind_seconds", lag.Seconds(), strconv.Itoa(p))
	}
	for s, n := range counts {
		emit("loom_health_nodes", float64(n), s)
	}
}

// countTaken counts a check result health took in. Callers hold mu.
func (a *App) countTaken(payload proto.Message) {
	if a.metrics == nil {
		return
	}
	if c, ok := payload.(*eventsv1.HealthCheckCompleted); ok {
		r := c.GetResult()
		a.metrics.checks.WithLabelValues(checkLabel(r.GetCheck()), enumLabel(r.GetOutcome().String(), "CHECK_")).Inc()
	}
}

// countEmits counts the remediation commands among emits. Callers hold mu.
func (a *App) countEmits(emits []domain.Emit) {
	if a.metrics == nil {
		return
	}
	for _, e := range emits {
		if r, ok := e.Payload.(*eventsv1.RemediateNode); ok {
			a.metrics.remediations.WithLabelValues(enumLabel(r.GetAction().String(), "ACTION_")).Inc()
		}
	}
}

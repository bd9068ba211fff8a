// Package dashboards is the one definition of Loom's dashboards and alerts:
// a dashboard per service (gateway, provisioner, scheduler, health,
// registry, training, bridge, agent) and a fleet overview, each made of panels
// that name a metric of docs/observability.md's contract and a function
// over it. Everything else is generated from it: the PromQL of each panel,
// Grafana's dashboard JSON, Prometheus' alert rules and scrape
// configuration (cmd/gendash writes them to deploy/), and the gateway's own
// evaluation of the panels over its scrapes (Scraper), which the console
// draws without Grafana.
package dashboards

import (
	"fmt"
	"slices"
)

// Kind is how a panel is drawn.
type Kind string

// Panel kinds (Grafana's panel types of the same names).
const (
	// Timeseries is a line per series over time.
	Timeseries Kind = "timeseries"
	// Stat is the latest value of each series.
	Stat Kind = "stat"
)

// Fn is what a panel computes from its metric's samples.
type Fn string

// Panel functions. Each is one PromQL shape (PromQL) and one evaluation
// over the gateway's ring of scrapes (Scraper); both sum the matching series
// by the panel's By labels.
const (
	// Value is a gauge's value: sum by (By) (metric).
	Value Fn = "value"
	// Rate is a counter's per-second rate over the window: sum by (By) (rate(metric[w])).
	Rate Fn = "rate"
	// Increase is a counter's increase over the window: sum by (By) (increase(metric[w])).
	Increase Fn = "increase"
	// P99 is a histogram's 99th percentile over the window:
	// histogram_quantile(0.99, sum by (le, By) (rate(metric_bucket[w]))).
	P99 Fn = "p99"
	// Ratio is the share of a counter's rate whose series also match Num:
	// sum by (By) (rate(metric{Num}[w])) / sum by (By) (rate(metric[w])),
	// 0 (not nothing) where no series matches Num.
	Ratio Fn = "ratio"
)

// Scope says which series a panel sums.
type Scope int

const (
	// Own selects the dashboard's own scrape job: job="<service>", the
	// label Prometheus (and the gateway's Scraper) put on every series of
	// a target. The job, not the service label, because every series has
	// it (the Go runtime's, the DCGM fields) and because an agent's service
	// label names its node ("agent-<cluster>-<host>").
	Own Scope = iota
	// Fleet selects nothing: the fleet overview sums across services.
	Fleet
)

// Matcher is one label matcher of PromQL: Label Op "Value", Op one of =,
// !=, =~ and !~ (regular expressions are anchored, as PromQL's are).
type Matcher struct {
	Label, Op, Value string
}

// Panel is one graph or number of a dashboard, defined once.
type Panel struct {
	// ID is the panel's name, unique in its dashboard and stable: the
	// console and the REST API use it.
	ID string
	// Title is what the panel is headed with.
	Title string
	// Unit is Grafana's unit id: "s", "reqps", "ops", "short",
	// "percentunit", "bytes", "decmbytes", "celsius", "watt", "percent", "none".
	Unit string
	// Kind is how it is drawn.
	Kind Kind
	// Metric is the metric's name (a histogram's base name, without _bucket).
	Metric string
	// Fn is what is computed from Metric.
	Fn Fn
	// By are the labels the result is summed by, each a line of its own.
	By []string
	// Match are more matchers on Metric's series.
	Match []Matcher
	// Num are the matchers of Ratio's numerator (with Match).
	Num []Matcher
	// OrZero makes the panel 0 rather than empty when no series exists: for
	// counters of rare events (dead letters, remediations), which appear
	// at the first one.
	OrZero bool
	// Scope ties the panel to its dashboard's service (Own, the default).
	Scope Scope
}

// Row is a titled group of panels.
type Row struct {
	Title  string
	Panels []Panel
}

// Dashboard is one service's dashboard, or the fleet overview
// (Service "fleet").
type Dashboard struct {
	// Service is the service's name: the scrape job, the service label's
	// value and the REST API's {service}.
	Service string
	// Title is the dashboard's title.
	Title string
	// Rows are its panels, in order.
	Rows []Row
}

// Panels returns d's panels in order, rows flattened.
func (d Dashboard) Panels() []Panel {
	var out []Panel
	for _, r := range d.Rows {
		out = append(out, r.Panels...)
	}
	return out
}

// Panel returns d's panel with id.
func (d Dashboard) Panel(id string) (Panel, bool) {
	for _, p := range d.Panels() {
		if p.ID == id {
			return p, true
		}
	}
	return Panel{}, false
}

// FleetService is the fleet overview's Service.
const FleetService = "fleet"

// Services are the services with a dashboard, in the order they are listed.
var Services = []string{"gateway", "provisioner", "scheduler", "health", "registry", "training", "bridge", "agent"}

// All returns every dashboard: the fleet overview first, then one per
// service in Services' order. Each call returns a fresh copy.
func All() []Dashboard {
	out := []Dashboard{fleet()}
	for _, s := range Services {
		out = append(out, service(s))
	}
	return out
}

// Get returns the dashboard of service ("fleet" for the overview).
func Get(service string) (Dashboard, bool) {
	for _, d := range All() {
		if d.Service == service {
			return d, true
		}
	}
	return Dashboard{}, false
}

// Known reports whether service has a dashboard of its own (not the fleet).
func Known(service string) bool { return slices.Contains(Services, service) }

// gRPC status codes that are the server's fault: what the error ratio and
// its alert count. Client errors (InvalidArgument, NotFound,
// PermissionDenied, ...) are the callers' and do not page anyone.
const serverErrorCodes = "Unknown|Internal|Unavailable|DeadlineExceeded|DataLoss|Unimplemented"

var (
	serverError = []Matcher{{"code", "=~", serverErrorCodes}}
	notOK       = []Matcher{{"code", "!=", "OK"}}
)

// baseRows are every service's rows of the base set (the metric names of
// docs/observability.md "## Metrics"), and the Go runtime's.
func baseRows() []Row {
	return []Row{
		{Title: "Build and process", Panels: []Panel{
			{ID: "build_info", Title: "Build", Unit: "none", Kind: Stat, Metric: "loom_build_info", Fn: Value, By: []string{"version", "revision", "goversion"}},
			{ID: "goroutines", Title: "Goroutines", Unit: "short", Kind: Timeseries, Metric: "go_goroutines", Fn: Value, By: []string{"instance"}},
			{ID: "memory", Title: "Resident memory", Unit: "bytes", Kind: Timeseries, Metric: "process_resident_memory_bytes", Fn: Value, By: []string{"instance"}},
			{ID: "cpu", Title: "CPU", Unit: "percentunit", Kind: Timeseries, Metric: "process_cpu_seconds_total", Fn: Rate, By: []string{"instance"}},
		}},
		{Title: "gRPC", Panels: []Panel{
			{ID: "grpc_rate", Title: "Calls by method", Unit: "reqps", Kind: Timeseries, Metric: "loom_grpc_server_handled_total", Fn: Rate, By: []string{"method"}},
			{ID: "grpc_errors", Title: "Errors by method and code", Unit: "reqps", Kind: Timeseries, Metric: "loom_grpc_server_handled_total", Fn: Rate, By: []string{"method", "code"}, Match: notOK, OrZero: true},
			{ID: "grpc_error_ratio", Title: "Server error ratio", Unit: "percentunit", Kind: Timeseries, Metric: "loom_grpc_server_handled_total", Fn: Ratio, By: []string{"method"}, Num: serverError},
			{ID: "grpc_p99", Title: "Latency p99 by method", Unit: "s", Kind: Timeseries, Metric: "loom_grpc_server_handling_seconds", Fn: P99, By: []string{"method"}},
		}},
		{Title: "Consumers", Panels: []Panel{
			{ID: "consumer_records", Title: "Records consumed", Unit: "ops", Kind: Timeseries, Metric: "loom_consumer_records_total", Fn: Rate, By: []string{"group", "topic", "partition"}},
			{ID: "consumer_p99", Title: "Handling latency p99", Unit: "s", Kind: Timeseries, Metric: "loom_consumer_handle_seconds", Fn: P99, By: []string{"group", "topic"}},
			{ID: "consumer_lag_records", Title: "Lag (records)", Unit: "short", Kind: Timeseries, Metric: "loom_consumer_lag_records", Fn: Value, By: []string{"group", "topic", "partition"}},
			{ID: "consumer_lag_seconds", Title: "Lag (seconds)", Unit: "s", Kind: Timeseries, Metric: "loom_consumer_lag_seconds", Fn: Value, By: []string{"group", "topic", "partition"}},
		}},
		{Title: "Outbox, dead letters and Redis", Panels: []Panel{
			{ID: "outbox_depth", Title: "Outbox depth", Unit: "short", Kind: Timeseries, Metric: "loom_outbox_depth", Fn: Value},
			{ID: "outbox_oldest", Title: "Outbox oldest entry", Unit: "s", Kind: Timeseries, Metric: "loom_outbox_oldest_age_seconds", Fn: Value},
			{ID: "dead_letters", Title: "Dead letters by topic", Unit: "short", Kind: Timeseries, Metric: "loom_dead_letters_total", Fn: Increase, By: []string{"topic"}, OrZero: true},
			{ID: "redis_p99", Title: "Redis latency p99 by command", Unit: "s", Kind: Timeseries, Metric: "loom_redis_call_seconds", Fn: P99, By: []string{"command"}},
		}},
	}
}

// domainRows are each service's own rows.
func domainRows(svc string) []Row {
	switch svc {
	case "scheduler":
		return []Row{{Title: "Scheduling", Panels: []Panel{
			{ID: "jobs", Title: "Jobs by state and reason", Unit: "short", Kind: Timeseries, Metric: "loom_scheduler_jobs", Fn: Value, By: []string{"state", "reason"}},
			{ID: "queue_depth", Title: "Queue depth", Unit: "short", Kind: Stat, Metric: "loom_scheduler_queue_depth", Fn: Value},
			{ID: "pass_p99", Title: "Pass duration p99", Unit: "s", Kind: Timeseries, Metric: "loom_scheduler_pass_seconds", Fn: P99},
			{ID: "gpus", Title: "GPUs allocated and idle", Unit: "short", Kind: Timeseries, Metric: "loom_scheduler_gpus", Fn: Value, By: []string{"state"}},
			{ID: "memory_updates", Title: "Memory brought up to date (change log, reload)", Unit: "ops", Kind: Timeseries, Metric: "loom_scheduler_memory_updates_total", Fn: Rate, By: []string{"how"}, OrZero: true},
		}}}
	case "provisioner":
		return []Row{{Title: "Provisioning", Panels: []Panel{
			{ID: "nodes", Title: "Nodes by state", Unit: "short", Kind: Timeseries, Metric: "loom_provisioner_nodes", Fn: Value, By: []string{"state"}},
			{ID: "operations", Title: "Operations in flight", Unit: "short", Kind: Timeseries, Metric: "loom_provisioner_operations_in_flight", Fn: Value, By: []string{"kind"}},
		}}}
	case "health":
		return []Row{{Title: "Node health", Panels: []Panel{
			{ID: "nodes", Title: "Nodes by health state", Unit: "short", Kind: Timeseries, Metric: "loom_health_nodes", Fn: Value, By: []string{"state"}},
			{ID: "checks", Title: "Checks by result", Unit: "ops", Kind: Timeseries, Metric: "loom_health_checks_total", Fn: Rate, By: []string{"check", "result"}, OrZero: true},
			{ID: "checks_failed", Title: "Checks failed", Unit: "ops", Kind: Timeseries, Metric: "loom_health_checks_total", Fn: Rate, By: []string{"check"}, Match: []Matcher{{"result", "=~", "(?i).*(fail|error).*"}}, OrZero: true},
			{ID: "remediations", Title: "Remediations by step", Unit: "short", Kind: Timeseries, Metric: "loom_health_remediations_total", Fn: Increase, By: []string{"step"}, OrZero: true},
		}}}
	case "registry":
		return []Row{{Title: "Models", Panels: []Panel{
			{ID: "versions", Title: "Versions registered", Unit: "short", Kind: Timeseries, Metric: "loom_registry_versions_registered_total", Fn: Increase, OrZero: true},
		}}}
	case "training":
		return []Row{{Title: "Training", Panels: []Panel{
			{ID: "trials", Title: "Trials by state", Unit: "short", Kind: Timeseries, Metric: "loom_training_trials", Fn: Value, By: []string{"state"}},
			{ID: "jobs", Title: "Training jobs by kind and state", Unit: "short", Kind: Timeseries, Metric: "loom_training_jobs", Fn: Value, By: []string{"kind", "state"}},
			// A node writing metrics for runs it does not hold is either
			// misconfigured or hostile: the operator should see it.
			{ID: "metrics_refused", Title: "Metric writes refused by reason", Unit: "short", Kind: Timeseries, Metric: "loom_training_metrics_refused_total", Fn: Increase, By: []string{"reason"}, OrZero: true},
		}}}
	case "bridge":
		return bridgeRows()
	case "agent":
		dcgm := func(id, title, unit, metric string) Panel {
			return Panel{ID: id, Title: title, Unit: unit, Kind: Timeseries, Metric: metric, Fn: Value, By: []string{"Hostname", "gpu"}}
		}
		return []Row{{Title: "GPUs (DCGM fields)", Panels: []Panel{
			dcgm("gpu_util", "GPU utilisation", "percent", "DCGM_FI_DEV_GPU_UTIL"),
			dcgm("gpu_temp", "GPU temperature", "celsius", "DCGM_FI_DEV_GPU_TEMP"),
			dcgm("gpu_power", "Power", "watt", "DCGM_FI_DEV_POWER_USAGE"),
			dcgm("gpu_fb_used", "Frame buffer used", "decmbytes", "DCGM_FI_DEV_FB_USED"),
			dcgm("gpu_xid", "Last XID error", "none", "DCGM_FI_DEV_XID_ERRORS"),
			dcgm("gpu_lost", "GPU fallen off the bus", "none", "loom_gpu_lost"),
		}}}
	}
	return nil
}

// The bridge's metrics (services/bridge: ingress from Pub/Sub and Kafka,
// public events out to the egress sinks). SEAM: the bridge's ingress and
// egress export exactly these names and labels; the bridge dashboard, the
// console and docs/observability.md read them.
//
//   - loom_bridge_ingress_messages_total{transport, outcome} (counter): one
//     per message decided (a redelivery of a decided one counts as outcome
//     DUPLICATE). transport is the configured transport's name
//     ("kafka:loom.ingress.v1", "pubsub:projects/p/subscriptions/s": at
//     most the 32 subscriptions and the topic, so bounded); outcome is IngressMessage.outcome's
//     ACCEPTED, REFUSED, INVALID or FAILED, or DUPLICATE.
//   - loom_bridge_ingress_seconds{transport} (histogram): a message's
//     handling, from its receipt to its decision (the gateway call and the
//     dead letter or result included).
//   - loom_bridge_egress_events_total{sink, type} (counter): public events
//     published; sink is the sink's name ("kafka:loom.public.v1",
//     "pubsub:projects/p/topics/t": at most the 16 -egress entries), type the
//     CloudEvent type (loom.public.v1.JobStateChanged, ...).
//   - loom_bridge_egress_errors_total{sink} (counter): failed publishes to
//     a sink (each retried: at least once).
const (
	BridgeIngressMessages = "loom_bridge_ingress_messages_total"
	BridgeIngressSeconds  = "loom_bridge_ingress_seconds"
	BridgeEgressEvents    = "loom_bridge_egress_events_total"
	BridgeEgressErrors    = "loom_bridge_egress_errors_total"
)

// bridgeRows is the bridge's domain row. Every panel is OrZero: a bridge
// that has had no message or no event yet has no series of them, and the
// dashboard says 0 rather than nothing.
func bridgeRows() []Row {
	deadLettered := []Matcher{{"outcome", "=~", "REFUSED|INVALID|FAILED"}}
	return []Row{{Title: "Ingress and public events", Panels: []Panel{
		{ID: "ingress_messages", Title: "Ingress messages by transport and outcome", Unit: "ops", Kind: Timeseries,
			Metric: BridgeIngressMessages, Fn: Rate, By: []string{"transport", "outcome"}, OrZero: true},
		{ID: "ingress_p99", Title: "Ingress handling latency p99", Unit: "s", Kind: Timeseries,
			Metric: BridgeIngressSeconds, Fn: P99, By: []string{"transport"}, OrZero: true},
		{ID: "ingress_dead_letters", Title: "Ingress dead letters (refused, invalid, failed)", Unit: "short", Kind: Timeseries,
			Metric: BridgeIngressMessages, Fn: Increase, By: []string{"transport", "outcome"}, Match: deadLettered, OrZero: true},
		{ID: "egress_events", Title: "Public events published by sink and type", Unit: "ops", Kind: Timeseries,
			Metric: BridgeEgressEvents, Fn: Rate, By: []string{"sink", "type"}, OrZero: true},
		{ID: "egress_errors", Title: "Public event publish errors by sink", Unit: "short", Kind: Timeseries,
			Metric: BridgeEgressErrors, Fn: Increase, By: []string{"sink"}, OrZero: true},
	}}}
}

// service returns svc's dashboard: the base rows, then its domain row.
func service(svc string) Dashboard {
	return Dashboard{Service: svc, Title: "Loom / " + svc, Rows: append(baseRows(), domainRows(svc)...)}
}

// fleet returns the overview: every service side by side.
func fleet() Dashboard {
	by := []string{"job"}
	return Dashboard{Service: FleetService, Title: "Loom / fleet overview", Rows: []Row{
		{Title: "Services", Panels: []Panel{
			{ID: "up", Title: "Targets up", Unit: "none", Kind: Stat, Metric: "up", Fn: Value, By: []string{"job"}, Scope: Fleet},
			{ID: "versions", Title: "Versions running", Unit: "none", Kind: Stat, Metric: "loom_build_info", Fn: Value, By: []string{"job", "version"}, Scope: Fleet},
			{ID: "grpc_rate", Title: "gRPC calls", Unit: "reqps", Kind: Timeseries, Metric: "loom_grpc_server_handled_total", Fn: Rate, By: by, Scope: Fleet},
			{ID: "grpc_error_ratio", Title: "gRPC server error ratio", Unit: "percentunit", Kind: Timeseries, Metric: "loom_grpc_server_handled_total", Fn: Ratio, By: by, Num: serverError, Scope: Fleet},
			{ID: "grpc_p99", Title: "gRPC latency p99", Unit: "s", Kind: Timeseries, Metric: "loom_grpc_server_handling_seconds", Fn: P99, By: by, Scope: Fleet},
		}},
		{Title: "Pipelines", Panels: []Panel{
			{ID: "consumer_lag_records", Title: "Consumer lag (records)", Unit: "short", Kind: Timeseries, Metric: "loom_consumer_lag_records", Fn: Value, By: []string{"job", "group"}, Scope: Fleet},
			{ID: "consumer_lag_seconds", Title: "Consumer lag (seconds)", Unit: "s", Kind: Timeseries, Metric: "loom_consumer_lag_seconds", Fn: Value, By: []string{"job", "group"}, Scope: Fleet},
			{ID: "outbox_oldest", Title: "Outbox oldest entry", Unit: "s", Kind: Timeseries, Metric: "loom_outbox_oldest_age_seconds", Fn: Value, By: by, Scope: Fleet},
			{ID: "dead_letters", Title: "Dead letters", Unit: "short", Kind: Timeseries, Metric: "loom_dead_letters_total", Fn: Increase, By: []string{"job", "topic"}, OrZero: true, Scope: Fleet},
			{ID: "redis_p99", Title: "Redis latency p99", Unit: "s", Kind: Timeseries, Metric: "loom_redis_call_seconds", Fn: P99, By: by, Scope: Fleet},
		}},
		{Title: "Fleet", Panels: []Panel{
			{ID: "jobs", Title: "Jobs by state", Unit: "short", Kind: Timeseries, Metric: "loom_scheduler_jobs", Fn: Value, By: []string{"state"}, Scope: Fleet},
			{ID: "gpus", Title: "GPUs allocated and idle", Unit: "short", Kind: Timeseries, Metric: "loom_scheduler_gpus", Fn: Value, By: []string{"state"}, Scope: Fleet},
			{ID: "nodes", Title: "Nodes by health state", Unit: "short", Kind: Timeseries, Metric: "loom_health_nodes", Fn: Value, By: []string{"state"}, Scope: Fleet},
		}},
	}}
}

// Validate checks the definitions: ids unique per dashboard, every panel
// with a metric, a known function, kind and matchers. The tests call it;
// it is exported so that a definition added elsewhere can be checked too.
func Validate(ds []Dashboard) error {
	seen := map[string]bool{}
	for _, d := range ds {
		if seen[d.Service] {
			return fmt.Errorf("dashboard %s defined twice", d.Service)
		}
		seen[d.Service] = true
		ids := map[string]bool{}
		for _, p := range d.Panels() {
			where := d.Service + "/" + p.ID
			switch {
			case p.ID == "" || ids[p.ID]:
				return fmt.Errorf("%s: panel id empty or repeated", where)
			case p.Metric == "" || p.Title == "" || p.Unit == "":
				return fmt.Errorf("%s: metric, title and unit are required", where)
			case p.Kind != Timeseries && p.Kind != Stat:
				return fmt.Errorf("%s: kind %q", where, p.Kind)
			case !slices.Contains([]Fn{Value, Rate, Increase, P99, Ratio}, p.Fn):
				return fmt.Errorf("%s: fn %q", where, p.Fn)
			case (p.Fn == Ratio) != (len(p.Num) > 0):
				return fmt.Errorf("%s: Num is Ratio's, and Ratio needs it", where)
			}
			ids[p.ID] = true
			for _, m := range append(append([]Matcher{}, p.Match...), p.Num...) {
				if !slices.Contains([]string{"=", "!=", "=~", "!~"}, m.Op) || m.Label == "" {
					return fmt.Errorf("%s: matcher %+v", where, m)
				}
			}
		}
	}
	return nil
}

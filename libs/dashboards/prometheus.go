package dashboards

import (
	"bytes"
	"fmt"
	"path"
	"time"

	"go.yaml.in/yaml/v3"
)

// Alert is one Prometheus alert rule, with the query that checks it
// against a live Prometheus.
type Alert struct {
	// Name is the alert's name (LoomHighErrorRatio, ...).
	Name string
	// Expr is the rule's expression in its firing form: it returns a
	// series for each thing that is wrong, nothing when all is well.
	Expr string
	// Check is Expr's condition as a 0/1 value (`> bool` for `>`): it
	// returns a series, 0 or 1, for each thing Expr looks at, so that a
	// test can tell a healthy system (0) from a query that names metrics or
	// labels that do not exist (nothing). The rule files carry Expr only.
	Check string
	// For is how long Expr must hold before the alert fires (0: at once).
	For time.Duration
	// Severity is the severity label: "page" or "ticket".
	Severity string
	// Summary and Description are the annotations; Description may use
	// {{ $labels.x }} and {{ $value }}.
	Summary, Description string
	// Action says what to do when it fires (docs/observability.md has more).
	Action string
}

// Alerts returns Loom's alert rules.
func Alerts() []Alert {
	handled := "loom_grpc_server_handled_total"
	ratio := fmt.Sprintf(`(sum by (service, method) (rate(%s{code=~"%s"}[5m])) or sum by (service, method) (rate(%s[5m])) * 0) / sum by (service, method) (rate(%s[5m]))`,
		handled, serverErrorCodes, handled, handled)
	lagGrew := `delta(loom_consumer_lag_records[5m])`
	consumed := `sum by (service, group, topic, partition) (increase(loom_consumer_records_total[5m]))`
	oldest := `max by (service) (loom_outbox_oldest_age_seconds)`
	dead := `sum by (service, topic) (increase(loom_dead_letters_total[5m]))`
	// Every reason is exported from 0, so the series exist before the
	// first refusal.
	refused := `sum by (job, reason) (increase(loom_training_metrics_refused_total[15m]))`
	dropped := `sum by (job, limit) (increase(loom_training_metrics_points_dropped_total[15m]))`
	return []Alert{
		{
			Name:  "LoomHighErrorRatio",
			Expr:  ratio + " > 0.01",
			Check: ratio + " > bool 0.01",
			For:   5 * time.Minute, Severity: "page",
			Summary:     "{{ $labels.service }}: more than 1% of {{ $labels.method }} calls fail",
			Description: "{{ $labels.service }} has answered {{ $value | humanizePercentage }} of {{ $labels.method }} calls with a server error (Unknown, Internal, Unavailable, DeadlineExceeded, DataLoss, Unimplemented) for 5 minutes.",
			Action:      "Read the service's logs at ERROR for that method; check its dependencies (Redis latency, consumer lag) on its dashboard.",
		},
		{
			Name: "LoomConsumerStalled",
			// Lag grew over 5 minutes and nothing was consumed in them; a
			// partition never consumed from has no records series, which
			// unless keeps.
			Expr:  lagGrew + " > 0 unless on (service, group, topic, partition) " + consumed + " > 0",
			Check: "(" + lagGrew + " > bool 0) * on (service, group, topic, partition) (" + consumed + " == bool 0)",
			// The 5 minutes are the expression's window.
			Severity:    "page",
			Summary:     "{{ $labels.service }}: consumer group {{ $labels.group }} is stalled on {{ $labels.topic }}/{{ $labels.partition }}",
			Description: "The lag of {{ $labels.group }} on {{ $labels.topic }} partition {{ $labels.partition }} grew over the last 5 minutes and it consumed no record.",
			Action:      "Look for a handler stuck on one record (the service's logs, its gRPC and Redis latency); restart the service if it does not move; a poison record is dead-lettered after its retries.",
		},
		{
			Name:        "LoomOutboxStuck",
			Expr:        oldest + " > 60",
			Check:       oldest + " > bool 60",
			Severity:    "page",
			Summary:     "{{ $labels.service }}: outbox entry waiting for over 60 s",
			Description: "The oldest entry of {{ $labels.service }}'s outbox is {{ $value | humanizeDuration }} old: commands are not reaching Kafka.",
			Action:      "Check that Kafka is up and reachable from the service (its logs say why a publish fails); a record the broker refuses for good is set aside.",
		},
		{
			Name: "LoomDeadLetters",
			Expr: dead + " > 0",
			// No dead letter yet means no series at all: 0 then.
			Check:       "(" + dead + " > bool 0) or on() vector(0)",
			Severity:    "ticket",
			Summary:     "{{ $labels.service }}: records dead-lettered from {{ $labels.topic }}",
			Description: "{{ $value }} records of {{ $labels.topic }} were dead-lettered by {{ $labels.service }} in the last 5 minutes: each failed its retries.",
			Action:      "Read the dead letters (their loom_dlq_error header says why), fix the cause and replay them.",
		},
		{
			Name:        "LoomTrainingMetricsRefused",
			Expr:        refused + " > 0",
			Check:       refused + " > bool 0",
			Severity:    "ticket",
			Summary:     "{{ $labels.job }}: training metric records refused ({{ $labels.reason }})",
			Description: "{{ $value }} records of training metrics (MetricsReported) were refused as {{ $labels.reason }} in the last 15 minutes: their points are missing from the jobs' curves.",
			Action:      "Read the training service's WARN lines \"metrics refused\" (job, attempt, signer); docs/metrics.md says what each reason means: rate and held-full are bounds a job ran into, not-placed a writer that is not one of the run's nodes.",
		},
		{
			Name:        "LoomTrainingMetricsDropped",
			Expr:        dropped + " > 0",
			Check:       dropped + " > bool 0",
			Severity:    "ticket",
			Summary:     "{{ $labels.job }}: training metric points dropped past the {{ $labels.limit }} limit",
			Description: "{{ $value }} training metric points were dropped in the last 15 minutes because a {{ $labels.limit }} keeps all it may: those points are missing from the jobs' curves.",
			Action:      "Read the training service's WARN lines \"metric points dropped\" (job, points); docs/metrics.md gives each limit: for project, ended jobs' series free the budget after -metrics-retention, or raise -metrics-project-points; for job, the program logs more than a job may keep.",
		},
		{
			Name:        "LoomTargetDown",
			Expr:        `up{job=~"gateway|provisioner|scheduler|health|registry|training|bridge|agent"} == 0`,
			Check:       `up{job=~"gateway|provisioner|scheduler|health|registry|training|bridge|agent"} == bool 0`,
			For:         2 * time.Minute,
			Severity:    "page",
			Summary:     "{{ $labels.job }} at {{ $labels.instance }} does not answer its /metrics",
			Description: "Prometheus has not scraped {{ $labels.instance }} for 2 minutes.",
			Action:      "Check that the process runs and its HTTP address (LOOM_<SERVICE>_HTTP_ADDR) is reachable from Prometheus.",
		},
	}
}

// ruleFile is Prometheus' rule file format.
type ruleFile struct {
	Groups []ruleGroup `yaml:"groups"`
}

type ruleGroup struct {
	Name  string `yaml:"name"`
	Rules []rule `yaml:"rules"`
}

type rule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for,omitempty"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// Rules returns the alert rules as a Prometheus rule file.
func Rules() []byte {
	g := ruleGroup{Name: "loom"}
	for _, a := range Alerts() {
		r := rule{Alert: a.Name, Expr: a.Expr, Labels: map[string]string{"severity": a.Severity},
			Annotations: map[string]string{"summary": a.Summary, "description": a.Description, "action": a.Action}}
		if a.For > 0 {
			r.For = promDuration(a.For)
		}
		g.Rules = append(g.Rules, r)
	}
	return yamlDoc("# Loom's alert rules. Generated by `go run ./libs/dashboards/cmd/gendash`: edit libs/dashboards, not this file.\n",
		ruleFile{Groups: []ruleGroup{g}})
}

// Target is one scrape job: a service and its /metrics addresses, fixed or
// discovered through files.
type Target struct {
	// Service is the job name (a dashboard's Service).
	Service string
	// Addrs are host:port of its HTTP servers (/metrics).
	Addrs []string
	// FileSD are file patterns (as Prometheus sees them) of file_sd JSON
	// files that name more of its servers: how node agents, which listen
	// on ports nobody chose, are found (each registers itself,
	// libs/service.RegisterFileSD, under LOOM_METRICS_SD_DIR).
	FileSD []string
}

// AgentFileSD is the pattern of the agents' file_sd files in dir: agents
// register as "agent-<cluster>-<host>" (libs/service.FileSDName).
func AgentFileSD(dir string) string { return path.Join(dir, "agent-*.json") }

// ComposeMetricsSDDir is LOOM_METRICS_SD_DIR in docker-compose.yaml: on the
// loom-data volume, which the agent writes and Prometheus reads.
const ComposeMetricsSDDir = "/var/lib/loom/metrics-sd"

// ScrapeOptions configure ScrapeConfig.
type ScrapeOptions struct {
	// Interval is the scrape and evaluation interval (default 15s).
	Interval time.Duration
	// RuleFiles are the rule files to load (paths as Prometheus sees them).
	RuleFiles []string
}

type promConfig struct {
	Global        promGlobal     `yaml:"global"`
	RuleFiles     []string       `yaml:"rule_files,omitempty"`
	ScrapeConfigs []scrapeConfig `yaml:"scrape_configs"`
}

type promGlobal struct {
	ScrapeInterval     string `yaml:"scrape_interval"`
	EvaluationInterval string `yaml:"evaluation_interval"`
}

type scrapeConfig struct {
	JobName       string         `yaml:"job_name"`
	MetricsPath   string         `yaml:"metrics_path"`
	StaticConfigs []staticConfig `yaml:"static_configs,omitempty"`
	FileSDConfigs []fileSDConfig `yaml:"file_sd_configs,omitempty"`
}

type fileSDConfig struct {
	Files []string `yaml:"files"`
	// RefreshInterval is a backstop: Prometheus watches the files with
	// inotify and re-reads them at once when they change.
	RefreshInterval string `yaml:"refresh_interval,omitempty"`
}

type staticConfig struct {
	Targets []string `yaml:"targets"`
}

// ScrapeConfig returns a Prometheus configuration that scrapes targets,
// one job per service (the job label the dashboards select on): its fixed
// addresses (static_configs) and its file_sd files (file_sd_configs).
func ScrapeConfig(targets []Target, o ScrapeOptions) []byte {
	if o.Interval <= 0 {
		o.Interval = 15 * time.Second
	}
	c := promConfig{Global: promGlobal{ScrapeInterval: promDuration(o.Interval), EvaluationInterval: promDuration(o.Interval)},
		RuleFiles: o.RuleFiles}
	for _, t := range targets {
		sc := scrapeConfig{JobName: t.Service, MetricsPath: "/metrics"}
		if len(t.Addrs) > 0 {
			sc.StaticConfigs = []staticConfig{{Targets: t.Addrs}}
		}
		if len(t.FileSD) > 0 {
			sc.FileSDConfigs = []fileSDConfig{{Files: t.FileSD, RefreshInterval: promDuration(max(o.Interval, time.Minute))}}
		}
		c.ScrapeConfigs = append(c.ScrapeConfigs, sc)
	}
	return yamlDoc("", c)
}

// ComposeTargets are the services of docker-compose.yaml and their HTTP
// addresses there (LOOM_<SERVICE>_HTTP_ADDR).
var ComposeTargets = []Target{
	{Service: "gateway", Addrs: []string{"gateway:9170"}},
	{Service: "provisioner", Addrs: []string{"provisioner:9171"}},
	{Service: "scheduler", Addrs: []string{"scheduler:9172"}},
	{Service: "health", Addrs: []string{"health:9173"}},
	{Service: "registry", Addrs: []string{"registry:9174"}},
	{Service: "training", Addrs: []string{"training:9175"}},
	{Service: "bridge", Addrs: []string{"bridge:9176"}},
	// Agents are found through the files they write (LOOM_METRICS_SD_DIR).
	{Service: "agent", FileSD: []string{AgentFileSD(ComposeMetricsSDDir)}},
}

// promDuration writes d as Prometheus does: 15s, 5m, 1h.
func promDuration(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	case d%time.Second == 0:
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return fmt.Sprintf("%dms", d/time.Millisecond)
}

func yamlDoc(header string, v any) []byte {
	var b bytes.Buffer
	b.WriteString(header)
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		panic(err) // only our own plain structs are encoded
	}
	_ = enc.Close()
	return b.Bytes()
}

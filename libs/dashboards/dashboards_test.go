package dashboards

import (
	"bytes"
	"encoding/json"

	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc/codes"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/testkit/need"
)

func TestDefinitionsAreValid(t *testing.T) {
	t.Parallel()
	all := All()
	if err := Validate(all); err != nil {
		t.Fatal(err)
	}
	if all[0].Service != FleetService {
		t.Fatalf("first dashboard is %s, want the fleet overview", all[0].Service)
	}
	for _, svc := range Services {
		d, ok := Get(svc)
		if !ok {
			t.Fatalf("no dashboard for %s", svc)
		}
		// The base rows, then the service's own.
		for _, id := range []string{"build_info", "grpc_rate", "grpc_error_ratio", "grpc_p99", "consumer_records",
			"consumer_p99", "consumer_lag_records", "consumer_lag_seconds", "outbox_depth", "outbox_oldest", "dead_letters", "redis_p99"} {
			p, ok := d.Panel(id)
			if !ok {
				t.Fatalf("%s has no %s panel", svc, id)
			}
			if q := p.PromQL(svc, "5m"); !strings.Contains(q, `job="`+svc+`"`) {
				t.Errorf("%s/%s: %s does not select the service", svc, id, q)
			}
		}
		// The gateway's own work is its gRPC calls: it has no domain row.
		if want := len(baseRows()) + 1; len(d.Rows) != want && svc != "gateway" {
			t.Errorf("%s: %d rows, want the base rows and a domain row", svc, len(d.Rows))
		}
	}
	if Validate(append(All(), All()[1])) == nil {
		t.Error("a dashboard defined twice passed Validate")
	}
}

func TestPromQLShapes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		p    Panel
		want string
	}{
		{Panel{Metric: "m", Fn: Value, By: []string{"a"}}, `sum by (a) (m{job="s"})`},
		{Panel{Metric: "m", Fn: Rate}, `sum(rate(m{job="s"}[5m]))`},
		{Panel{Metric: "m", Fn: Increase, OrZero: true, Match: []Matcher{{"x", "!=", "y"}}}, `sum(increase(m{job="s",x!="y"}[5m])) or on() vector(0)`},
		{Panel{Metric: "h", Fn: P99, By: []string{"method"}}, `histogram_quantile(0.99, sum by (le, method) (rate(h_bucket{job="s"}[5m])))`},
		{Panel{Metric: "c", Fn: Ratio, Num: []Matcher{{"code", "=~", "A|B"}}, Scope: Fleet},
			`(sum(rate(c{code=~"A|B"}[5m])) or sum(rate(c[5m])) * 0) / sum(rate(c[5m]))`},
	} {
		if got := tc.p.PromQL("s", "5m"); got != tc.want {
			t.Errorf("PromQL = %s\nwant      %s", got, tc.want)
		}
	}
}

// TestDeployFilesAreGenerated fails when deploy/ differs from what
// cmd/gendash writes: run `go run ./libs/dashboards/cmd/gendash`.
func TestDeployFilesAreGenerated(t *testing.T) {
	t.Parallel()
	deploy := filepath.Join("..", "..", "deploy")
	files := Files()
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(deploy, filepath.FromSlash(name)))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("deploy/%s is not what libs/dashboards generates (%v): run `go run ./libs/dashboards/cmd/gendash`", name, err)
		}
	}
	old, _ := filepath.Glob(filepath.Join(deploy, "grafana", "dashboards", "*.json"))
	for _, o := range old {
		if _, ok := files["grafana/dashboards/"+filepath.Base(o)]; !ok {
			t.Errorf("%s is no longer generated: run `go run ./libs/dashboards/cmd/gendash`", o)
		}
	}
	// Every dashboard is valid JSON with a datasource variable and a query
	// per panel.
	for _, d := range All() {
		var g struct {
			SchemaVersion int
			Templating    struct{ List []struct{ Name, Type string } }
			Panels        []struct {
				Type    string
				Targets []struct{ Expr string }
			}
		}
		if err := json.Unmarshal(Grafana(d), &g); err != nil {
			t.Fatalf("%s: %v", d.Service, err)
		}
		if g.SchemaVersion != 39 || len(g.Templating.List) != 1 || g.Templating.List[0].Type != "datasource" {
			t.Errorf("%s: schema %d, variables %+v", d.Service, g.SchemaVersion, g.Templating.List)
		}
		n := 0
		for _, p := range g.Panels {
			if p.Type != "row" {
				n++
				if len(p.Targets) != 1 || !strings.Contains(p.Targets[0].Expr, "$__rate_interval") && strings.Contains(p.Targets[0].Expr, "rate(") {
					t.Errorf("%s: panel targets %+v", d.Service, p.Targets)
				}
			}
		}
		if n != len(d.Panels()) {
			t.Errorf("%s: %d Grafana panels for %d defined", d.Service, n, len(d.Panels()))
		}
	}
}

// TestPromtoolAcceptsRulesAndConfig runs Debian's promtool on the
// generated rule file and scrape configuration.
func TestPromtoolAcceptsRulesAndConfig(t *testing.T) {
	t.Parallel()
	need.Tools(t, "apt-get install prometheus", "promtool")
	dir := t.TempDir()
	files := Files()
	for _, name := range []string{"prometheus/rules.yml", "prometheus/prometheus.yml"} {
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(name)), files[name], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"check", "rules", "rules.yml"}, {"check", "config", "prometheus.yml"}} {
		cmd := exec.Command("promtool", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

func TestParseTargets(t *testing.T) {
	t.Parallel()
	got, err := ParseTargets("metrics-targets", " gateway=http://127.0.0.1:9170/metrics, agent=http://h1:9176/metrics,agent=https://h2/metrics ,")
	if err != nil || len(got) != 3 || got[1] != (ScrapeTarget{"agent", "http://h1:9176/metrics"}) {
		t.Fatalf("ParseTargets = %+v, %v", got, err)
	}
	if got, err := ParseTargets("metrics-targets", ""); err != nil || len(got) != 0 {
		t.Fatalf("empty: %+v, %v", got, err)
	}
	many := strings.Repeat("gateway=http://x/metrics,", MaxTargets+1)
	for _, bad := range []string{"gateway", "nosuch=http://x/metrics", "gateway=ftp://x/metrics", "gateway=http:///metrics", "gateway=::", many} {
		_, err := ParseTargets("metrics-targets", bad)
		if errs.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "metrics-targets") {
			t.Errorf("ParseTargets(%.40q) = %v, want InvalidArgument naming metrics-targets", bad, err)
		}
	}
}

// TestComposeUsesTheGeneratedFiles: docker-compose.yaml runs Prometheus and
// Grafana on deploy/'s files, and every scrape target of the generated
// prometheus.yml is a compose service listening there.
func TestComposeUsesTheGeneratedFiles(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join("..", "..", "docker-compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Services map[string]struct {
			Environment map[string]string `yaml:"environment"`
			Volumes     []string          `yaml:"volumes"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	mounts := func(svc, src, dst string) {
		for _, v := range doc.Services[svc].Volumes {
			if strings.HasPrefix(v, src+":"+dst) {
				return
			}
		}
		t.Errorf("compose service %s does not mount %s at %s: %v", svc, src, dst, doc.Services[svc].Volumes)
	}
	mounts("prometheus", "./deploy/prometheus", "/etc/prometheus")
	mounts("grafana", "./deploy/grafana/provisioning", "/etc/grafana/provisioning")
	mounts("grafana", "./deploy/grafana/dashboards", "/etc/grafana/dashboards")
	if !strings.Contains(grafanaProvider, "path: /etc/grafana/dashboards") {
		t.Error("the dashboard provider does not read where compose mounts the dashboards")
	}
	// The agent registers itself in the SD directory on the volume that
	// Prometheus mounts too.
	if got := doc.Services["agent"].Environment["LOOM_METRICS_SD_DIR"]; got != ComposeMetricsSDDir {
		t.Errorf("compose agent: LOOM_METRICS_SD_DIR = %q, want %s (prometheus.yml's file_sd)", got, ComposeMetricsSDDir)
	}
	mounts("agent", "loom-data", "/var/lib/loom")
	mounts("prometheus", "loom-data", "/var/lib/loom")
	for _, tg := range ComposeTargets {
		if len(tg.Addrs) == 0 {
			continue // found through file_sd (above)
		}
		env := doc.Services[tg.Service].Environment
		_, port, _ := strings.Cut(tg.Addrs[0], ":")
		if got := env["LOOM_"+strings.ToUpper(tg.Service)+"_HTTP_ADDR"]; got != "0.0.0.0:"+port {
			t.Errorf("compose %s: LOOM_%s_HTTP_ADDR = %q, want 0.0.0.0:%s (scraped at %s)", tg.Service, strings.ToUpper(tg.Service), got, port, tg.Addrs[0])
		}
		if !strings.Contains(doc.Services["gateway"].Environment["LOOM_GATEWAY_METRICS_TARGETS"], tg.Service+"=http://"+tg.Addrs[0]+"/metrics") {
			t.Errorf("compose gateway's LOOM_GATEWAY_METRICS_TARGETS lacks %s", tg.Addrs[0])
		}
	}
	if _, err := ParseTargets("LOOM_GATEWAY_METRICS_TARGETS", doc.Services["gateway"].Environment["LOOM_GATEWAY_METRICS_TARGETS"]); err != nil {
		t.Error(err)
	}
}

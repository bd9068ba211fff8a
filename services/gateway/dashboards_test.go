package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/loom-ml/loom/libs/dashboards"
	"github.com/loom-ml/loom/libs/embedded"
	"github.com/loom-ml/loom/libs/testkit"
)

// TestDashboardsREST: the gateway scrapes its -metrics-targets and serves
// the dashboards' panels over them at /v1/dashboards, to authenticated
// callers only.
func TestDashboardsREST(t *testing.T) {
	t.Parallel()
	// A scheduler's /metrics: a real registry over real HTTP.
	reg := prometheus.NewRegistry()
	depth := prometheus.NewGauge(prometheus.GaugeOpts{Name: "loom_scheduler_queue_depth"})
	depth.Set(42)
	reg.MustRegister(depth)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)

	h := newHarness(t, func(c *Config) {
		c.MetricsTargets = "scheduler=" + srv.URL + "/metrics"
		c.MetricsInterval = 100 * time.Millisecond
	})
	ctx := testkit.Context(t, 60*time.Second)
	get := func(c *http.Client, path string) (int, []byte) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.restBase+path, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}

	// No credential, or a bad one: 401, on the list and on a dashboard.
	for _, path := range []string{"/v1/dashboards", "/v1/dashboards/scheduler"} {
		if code, body := get(http.DefaultClient, path); code != http.StatusUnauthorized {
			t.Errorf("GET %s without a credential: %d %s, want 401", path, code, body)
		}
		bad := &http.Client{Transport: bearerTransport{cred: "not-a-token"}}
		if code, body := get(bad, path); code != http.StatusUnauthorized {
			t.Errorf("GET %s with a bad credential: %d %s, want 401", path, code, body)
		}
	}

	// The fleet's load is for members of a project and cluster
	// administrators: not for a node, a workload, or a user of no project.
	for _, who := range []string{"node", "work40", "nora"} {
		if code, body := get(h.restAs(who), "/v1/dashboards/scheduler"); code != http.StatusForbidden || !strings.Contains(string(body), "for members of a project and cluster administrators") {
			t.Errorf("GET /v1/dashboards/scheduler as %s: %d %s, want 403", who, code, body)
		}
	}
	for _, who := range []string{"vic", "root"} {
		if code, body := get(h.restAs(who), "/v1/dashboards"); code != http.StatusOK {
			t.Errorf("GET /v1/dashboards as %s: %d %s, want 200", who, code, body)
		}
	}

	code, body := get(h.http, "/v1/dashboards")
	var list struct {
		Dashboards []dashboards.Summary `json:"dashboards"`
	}
	if err := json.Unmarshal(body, &list); code != http.StatusOK || err != nil || len(list.Dashboards) != len(dashboards.Services)+1 {
		t.Fatalf("GET /v1/dashboards: %d %s (%v)", code, body, err)
	}
	if p := list.Dashboards[0].Panels[0]; p.ID == "" || p.Title == "" || p.Unit == "" || (p.Kind != "stat" && p.Kind != "timeseries") {
		t.Errorf("a panel lacks a field: %+v", p)
	}

	// The scheduler's queue depth shows once scraped.
	testkit.WaitFor(t, 30*time.Second, "the scheduler's queue depth on its dashboard", func() (bool, error) {
		code, body := get(h.http, "/v1/dashboards/scheduler")
		var d dashboards.Data
		if err := json.Unmarshal(body, &d); code != http.StatusOK || err != nil {
			t.Fatalf("GET /v1/dashboards/scheduler: %d %s (%v)", code, body, err)
		}
		for _, p := range d.Panels {
			if p.ID == "queue_depth" && len(p.Series) == 1 && len(p.Series[0].Points) > 0 {
				pt := p.Series[0].Points[len(p.Series[0].Points)-1]
				return pt[1] == 42 && pt[0] > float64(time.Now().Add(-time.Minute).Unix()), nil
			}
		}
		return false, nil
	})

	if code, body := get(h.http, "/v1/dashboards/nosuch"); code != http.StatusNotFound || !strings.Contains(string(body), "GET /v1/dashboards lists them") {
		t.Errorf("GET /v1/dashboards/nosuch: %d %s, want 404 saying where the list is", code, body)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.restBase+"/v1/dashboards", nil)
	if resp, err := h.http.Do(req); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /v1/dashboards: %v %v, want 405", resp.StatusCode, err)
	} else {
		resp.Body.Close()
	}
	// The rest of the REST API is still served beside it.
	if code, body := get(h.http, "/v1/projects/default/clusters"); code != http.StatusOK {
		t.Errorf("GET clusters beside the dashboards: %d %s", code, body)
	}
}

// TestSettingsAreChecked: a bad -metrics-targets, -metrics-interval,
// -open-qos or -scheduler-backend stops the gateway at start, naming the setting.
func TestSettingsAreChecked(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ targets, interval, field string }{
		{"scheduler", "", "metrics-targets"},
		{"nosuch=http://x/metrics", "", "metrics-targets"},
		{"", "1ns", "metrics-interval"},
		{"", "", "open-qos"},
		{"", "", "scheduler-backend"},
	} {
		args := []string{"-metrics-targets=" + tc.targets}
		if tc.interval != "" {
			args = append(args, "-metrics-interval="+tc.interval)
		}
		if tc.field == "open-qos" {
			args = append(args, "-open-qos=low,Hi gh")
		}
		if tc.field == "scheduler-backend" {
			args = append(args, "-scheduler-backend=Slurm")
		}
		err := RunArgs(testkit.Context(t, 10*time.Second), args)
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("RunArgs(%v) = %v, want an error naming %s", args, err, tc.field)
		}
	}
}

// TestDashboardsWithoutTheStoreAreUnavailable: a credential that cannot be
// checked (the gateway's Redis is gone) is 503 on the dashboards, as on
// the rest of the API (the one error mapping), not a 401: the console
// takes a 401 as a refused credential and signs its user out.
func TestDashboardsWithoutTheStoreAreUnavailable(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, time.Minute)
	r, err := embedded.StartRedis(ctx, "", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	h := newHarness(t, func(c *Config) { c.RedisAddr = r.Addr })
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/v1/dashboards", "/v1/dashboards/scheduler", "/v1/" + project + "/clusters"} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.restBase+path, nil)
		req.Header.Set("Authorization", "Bearer "+h.adminKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e struct{ Code int }
		_ = json.Unmarshal(b, &e)
		if resp.StatusCode != http.StatusServiceUnavailable || e.Code != 14 || resp.Header.Get("WWW-Authenticate") != "" {
			t.Errorf("GET %s with the store gone: HTTP %d (WWW-Authenticate %q) %s, want 503, code 14 (Unavailable)",
				path, resp.StatusCode, resp.Header.Get("WWW-Authenticate"), b)
		}
	}
}

package console

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/testkit/browser"
	"github.com/loom-ml/loom/libs/testkit/need"
)

// contractAPI answers the REST contracts other packages serve (the model
// registry, docs/registry.md; training metrics, docs/metrics.md;
// dashboards, docs/observability.md) with fixed bodies, so that the pages
// that read them are checked before those services land on this branch. The end-to-end test (cmd/loom/internal/cli TestConsole)
// checks the same pages against the real stack. Every call needs the
// token the sign-in exchange gives.
func contractAPI(t *testing.T, flaky *atomic.Int32) http.Handler {
	now := time.Now().Unix()
	series := func(legend string, base float64) map[string]any {
		var pts [][]float64
		for i := range 30 {
			pts = append(pts, []float64{float64(now - int64(30-i)*15), base + float64(i%7)})
		}
		return map[string]any{"legend": legend, "points": pts}
	}
	lineage := func(v string) map[string]any {
		return map[string]any{
			"trainingPipeline":        "projects/default/locations/us-central1/trainingPipelines/3",
			"hyperparameterTuningJob": "projects/default/locations/us-central1/hyperparameterTuningJobs/1",
			"trial":                   "projects/default/locations/us-central1/hyperparameterTuningJobs/1/trials/" + v,
			"customJob":               "projects/default/locations/us-central1/customJobs/" + v,
			"jobId":                   "1" + v,
			"parameters":              map[string]string{"learning_rate": "0.3", "batch_size": "32"},
			"metrics":                 map[string]float64{"accuracy": 0.91},
			"checkpointUri":           "file:///data/ckpt/" + v,
			"dataUri":                 "file:///data/spirals.csv",
		}
	}
	version := func(v string, aliases ...string) map[string]any {
		return map[string]any{
			"name": "projects/default/locations/global/models/spirals@" + v, "displayName": "spirals <b>bold</b>",
			"versionId": v, "versionAliases": aliases, "artifactUri": "file:///data/models/spirals/" + v,
			"versionCreateTime": time.Now().Add(-time.Hour).Format(time.RFC3339), "lineage": lineage(v),
		}
	}
	routes := map[string]map[string]any{
		"POST /v1/auth:token":                     {"access_token": "tok-1"},
		"GET /v1/auth:whoami":                     {"name": "users/ada"},
		"GET /v1/projects/default/jobs/7":         {"name": "projects/default/jobs/7", "job_id": "7", "display_name": "train", "state": "COMPLETED", "cluster": "projects/default/clusters/demo"},
		"GET /v1/projects/default/jobs/7:goodput": {"goodput": 0.9, "wall": "100s", "productive": "90s", "jobs": 1},
		"GET /v1/projects/default/jobs/7/metrics": {"series": []map[string]any{{"metric": "loss", "count": 3000, "first": 0, "last": 2999, "min": 0.1, "max": 2.3}}},
		"GET /v1/projects/default/jobs/7/metrics:read": {"metric": "loss", "total": 3000, "points": []map[string]any{
			{"step": 0, "value": 2.3, "time": "2026-01-01T00:00:00Z"}, {"step": 1500, "value": 0.5, "time": "2026-01-01T00:01:00Z"}, {"step": 2999, "value": 0.1, "time": "2026-01-01T00:02:00Z"}}},
		"GET /v1/projects/default/locations/global/models":                      {"models": []any{version("2", "default", "prod")}},
		"GET /v1/projects/default/locations/global/models/spirals:listVersions": {"models": []any{version("1"), version("2", "default", "prod")}},
		"GET /v1/dashboards": {"dashboards": []map[string]any{
			{"service": "scheduler", "title": "Scheduler", "panels": []map[string]any{{"id": "depth", "title": "Queue depth", "unit": "jobs", "kind": "stat"}}},
			{"service": "gateway", "title": "Gateway"}}},
		"GET /v1/dashboards/scheduler": {"service": "scheduler", "title": "Scheduler", "panels": []map[string]any{
			{"id": "depth", "title": "Queue depth", "unit": "jobs", "kind": "stat", "series": []any{series("depth", 3)}},
			{"id": "pass", "title": "Pass duration p99", "unit": "s", "kind": "timeseries", "series": []any{series("p99", 1), series("p50", 0)}},
			{"id": "gpus", "title": "GPUs", "unit": "", "kind": "timeseries", "series": []any{series("allocated", 10), series("idle", 4)}}}},
	}
	// The refresh token "rt-flaky" meets a gateway that cannot answer
	// (503) on its first use and is traded for a token on its second
	// (flaky counts its uses).
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Method + " " + r.URL.Path
		body, ok := routes[key]
		auth := r.Header.Get("Authorization")
		if key == "POST /v1/auth:token" && auth == "" {
			b, _ := io.ReadAll(r.Body)
			if strings.Contains(string(b), `"rt-flaky"`) && flaky.Add(1) == 1 {
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = w.Write([]byte(`{"code":14,"message":"redis: connection refused"}`))
				return
			}
			if strings.Contains(string(b), `"rt-flaky"`) {
				_ = json.NewEncoder(w).Encode(map[string]string{"access_token": "tok-1", "refresh_token": "rt-next"})
				return
			}
		}
		switch {
		case key == "POST /v1/auth:token" && auth == "Bearer lk_good.secret":
		case auth != "Bearer tok-1":
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"code":16,"message":"credential refused"}`))
			return
		case key == "GET /v1/projects/default/jobs/7:logs":
			_, _ = w.Write([]byte(`{"result":{"data":"ZXBvY2ggMSBsb3NzIDIuMwo="}}` + "\n"))
			return
		case !ok:
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"code":5,"message":"Not Found"}`))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(body); err != nil && !clientGone(r, err) {
			t.Error(err)
		}
	})
}

// TestPagesAgainstContracts opens the models, model (lineage graph),
// dashboards and job-metrics pages in headless Chromium against the REST
// contracts contractAPI serves and checks what they draw.
func TestPagesAgainstContracts(t *testing.T) {
	t.Parallel()
	need.Tools(t, "apt-get install chromium", "chromium")
	var flaky atomic.Int32
	srv := httptest.NewServer(Mount(contractAPI(t, &flaky)))
	t.Cleanup(srv.Close)
	bctx := browser.Start(t, context.Background())
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		ctx, cancel := context.WithTimeout(bctx, 30*time.Second)
		defer cancel()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	eval := func(expr string) int {
		t.Helper()
		ctx, cancel := context.WithTimeout(bctx, 30*time.Second)
		defer cancel()
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](expr))
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		return n
	}
	textOf := func() string {
		t.Helper()
		ctx, cancel := context.WithTimeout(bctx, 30*time.Second)
		defer cancel()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#page")))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	open := func(route, ready string, want ...string) {
		t.Helper()
		do("open "+route, chromedp.Navigate(srv.URL+"/#/"+route), chromedp.WaitVisible(chromedp.CSS(`main[data-ready="`+ready+`"]`)))
		txt := textOf()
		for _, w := range want {
			if !strings.Contains(txt, w) {
				t.Errorf("#/%s lacks %q; it shows:\n%s", route, w, txt)
			}
		}
		shotTo(t, bctx, strings.ReplaceAll(route, "/", "-"))
	}

	do("sign in", chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#signin")),
		chromedp.SetValue(chromedp.CSS("#secret"), "lk_good.secret"), chromedp.Click(chromedp.CSS("#signin button")),
		chromedp.WaitVisible(chromedp.CSS(`#who`)))

	open("models", "models", "Registered models", "spirals", "default", "prod", "spirals <b>bold</b>")
	open("models/spirals", "model", "Versions", "Lineage of version 2", "Lineage of version 1", "learning_rate=0.3", "accuracy 0.91")
	if n := eval(`document.querySelectorAll('#page svg.lineage').length`); n != 2 {
		t.Errorf("%d lineage graphs, want one per version (2)", n)
	}
	// version → trial → custom job → job → data, each a box.
	if n := eval(`document.querySelector('#page svg.lineage').querySelectorAll('g.node').length`); n != 5 {
		t.Errorf("lineage graph has %d nodes, want 5 (version, trial, custom job, job, data)", n)
	}
	if n := eval(`document.querySelectorAll('#page b').length`); n != 0 {
		t.Errorf("a model's display name became %d HTML elements: it must be text", n)
	}

	open("dashboards/scheduler", "dashboards", "Scheduler", "Gateway", "Queue depth", "Pass duration p99 (s)", "GPUs")
	testkit.WaitFor(t, 20*time.Second, "two uPlot charts and a stat tile", func() (bool, error) {
		return eval(`document.querySelectorAll('#page .uplot').length`) == 2 && eval(`document.querySelectorAll('#page .stat').length`) == 1, nil
	})
	if txt := textOf(); !strings.Contains(txt, "4 jobs") {
		t.Errorf("stat tile does not show the last value (6 jobs):\n%s", txt)
	}

	open("jobs/7", "job", "train", "COMPLETED", "90%", "1m 40s")
	testkit.WaitFor(t, 20*time.Second, "the job's loss chart and logs", func() (bool, error) {
		return eval(`document.querySelectorAll('#page .uplot').length`) == 1 &&
			eval(`document.getElementById('logs').textContent.includes('epoch 1 loss 2.3') ? 1 : 0`) == 1, nil
	})
	if txt := textOf(); !strings.Contains(txt, "loss (3000 points, downsampled)") {
		t.Errorf("the metric chart does not say it is downsampled:\n%s", txt)
	}
	shotTo(t, bctx, "jobs-7-metrics")

	// A renewal the gateway cannot answer (503) keeps the refresh token:
	// the page says what failed, and the next load renews with it instead
	// of asking the user to sign in again.
	do("renew while the gateway is down", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := chromedp.Evaluate[int](`sessionStorage.setItem('loom.token', 'expired'), sessionStorage.setItem('loom.refresh', 'rt-flaky'), 0`)(ctx, tg)
		return err
	}), chromedp.Navigate(srv.URL+"/#/models"))
	testkit.WaitFor(t, 20*time.Second, "the failed renewal", func() (bool, error) { return flaky.Load() >= 1, nil })
	if n := eval(`sessionStorage.getItem('loom.refresh') === 'rt-flaky' ? 1 : 0`); n != 1 {
		t.Error("a renewal the gateway could not answer spent the refresh token")
	}
	do("renew once the gateway is back", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(`main[data-ready="models"]`)))
	if n := eval(`sessionStorage.getItem('loom.token') === 'tok-1' && sessionStorage.getItem('loom.refresh') === 'rt-next' ? 1 : 0`); n != 1 {
		t.Error("the second renewal did not keep the new token and refresh token")
	}

	// A credential the API refuses (expired, revoked) brings the sign-in
	// box back, saying why, and forgets the token.
	do("use a refused token", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := chromedp.Evaluate[int](`sessionStorage.setItem('loom.token', 'expired'), sessionStorage.removeItem('loom.refresh'), 0`)(ctx, tg)
		return err
	}),
		chromedp.Navigate(srv.URL+"/#/models"), chromedp.WaitVisible(chromedp.CSS("#signin")))
	if txt := textOf(); !strings.Contains(txt, "credential was refused") {
		t.Errorf("after a 401 the sign-in box does not say why:\n%s", txt)
	}
	if n := eval(`sessionStorage.getItem('loom.token') === null ? 0 : 1`); n != 0 {
		t.Error("the refused token is still stored")
	}
}

// shotTo saves a screenshot under $LOOM_CONSOLE_CONTRACT_SHOTS (a
// directory) when set: these pages show contract fixtures, not a real
// stack, so they are for looking at, not for the docs.
func shotTo(t *testing.T, ctx context.Context, name string) {
	dir := os.Getenv("LOOM_CONSOLE_CONTRACT_SHOTS")
	if dir == "" {
		return
	}
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(c, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("contract-%s.png", name)), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

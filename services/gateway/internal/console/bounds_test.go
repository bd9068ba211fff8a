package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/testkit/browser"
)

// boundsAPI answers, like contractAPI, the sign-in exchange and the routes
// of answers (method and path, then the handler's own reading of the
// query), with every other call a 404 "Not Found" (an API this gateway
// does not serve: the watch too, so the pages poll).
func boundsAPI(t *testing.T, answers map[string]func(r *http.Request) any) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Method + " " + r.URL.Path
		auth := r.Header.Get("Authorization")
		switch {
		case key == "POST /v1/auth:token" && auth == "Bearer lk_good.secret":
			_ = json.NewEncoder(w).Encode(map[string]string{"access_token": "tok-1"})
			return
		case auth != "Bearer tok-1":
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"code":16,"message":"credential refused"}`))
			return
		case key == "GET /v1/auth:whoami":
			_ = json.NewEncoder(w).Encode(map[string]string{"name": "users/ada"})
			return
		}
		answer, ok := answers[key]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"code":5,"message":"Not Found"}`))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(answer(r)); err != nil && !clientGone(r, err) {
			t.Error(err)
		}
	})
}

// clientGone reports whether err, writing r's answer, is the browser having
// dropped the request (a page left while its reads were in flight aborts
// them: a broken pipe or a reset), which is not the API's fault.
func clientGone(r *http.Request, err error) bool {
	return r.Context().Err() != nil || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)
}

// consolePage is a signed-in headless Chromium on srv: open(route, ready)
// opens a page and returns its text once it is ready; eval runs an
// expression.
type consolePage struct {
	t    *testing.T
	srv  *httptest.Server
	bctx context.Context
}

func openConsole(t *testing.T, api http.Handler) *consolePage {
	t.Helper()
	srv := httptest.NewServer(Mount(api))
	t.Cleanup(srv.Close)
	c := &consolePage{t: t, srv: srv, bctx: browser.Start(t, context.Background())}
	c.do("sign in", chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#signin")),
		chromedp.SetValue(chromedp.CSS("#secret"), "lk_good.secret"), chromedp.Click(chromedp.CSS("#signin button")),
		chromedp.WaitVisible(chromedp.CSS(`#signout`)))
	return c
}

func (c *consolePage) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.bctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		c.t.Fatalf("%s: %v", what, err)
	}
}

func (c *consolePage) eval(expr string) int {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.bctx, 30*time.Second)
	defer cancel()
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](expr))
	if err != nil {
		c.t.Fatalf("%s: %v", expr, err)
	}
	return n
}

func (c *consolePage) open(route, ready string) string {
	c.t.Helper()
	c.do("open "+route, chromedp.Navigate(c.srv.URL+"/#/"+route), chromedp.WaitVisible(chromedp.CSS(`main[data-ready="`+ready+`"]`)))
	return c.text()
}

// text is the page's text now.
func (c *consolePage) text() string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.bctx, 30*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#page")))
	if err != nil {
		c.t.Fatal(err)
	}
	return s
}

// wants fails for each of want that txt lacks.
func wants(t *testing.T, what, txt string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(txt, w) {
			t.Errorf("%s lacks %q; it shows:\n%s", what, w, txt)
		}
	}
}

// TestStudyPageSaysWhatItsAnswerLeftOut: a study whose answer was bounded
// (trainingspec.BoundTuningJobAnswer: omittedTrials, measurementsThinned)
// says so on its page and in the training list, and counts every trial,
// not only those the answer holds. Before, the page showed the kept
// trials as if they were the whole study.
func TestStudyPageSaysWhatItsAnswerLeftOut(t *testing.T) {
	t.Parallel()
	const loc = "/v1/projects/default/locations/us-central1"
	trial := func(id string, acc float64) map[string]any {
		return map[string]any{"id": id, "state": "SUCCEEDED",
			"parameters":       []map[string]any{{"parameterId": "lr", "value": 0.1}},
			"finalMeasurement": map[string]any{"stepCount": "10", "metrics": []map[string]any{{"metricId": "accuracy", "value": acc}}},
			"measurements":     []map[string]any{{"stepCount": "1", "metrics": []map[string]any{{"metricId": "accuracy", "value": acc / 2}}}}}
	}
	var omitted []string
	for k := 1; k <= 997; k++ {
		if k != 500 {
			omitted = append(omitted, strconv.Itoa(k))
		}
	}
	study := map[string]any{
		"name": "projects/default/locations/us-central1/hyperparameterTuningJobs/100", "displayName": "big",
		"state": "JOB_STATE_SUCCEEDED", "maxTrialCount": 1000, "parallelTrialCount": 4, "bestTrial": "500",
		"studySpec":     map[string]any{"metrics": []map[string]any{{"metricId": "accuracy", "goal": "MAXIMIZE"}}},
		"trials":        []any{trial("500", 0.99), trial("998", 0.5), trial("999", 0.6), trial("1000", 0.7)},
		"omittedTrials": omitted, "measurementsThinned": true,
	}
	c := openConsole(t, boundsAPI(t, map[string]func(*http.Request) any{
		"GET " + loc + "/hyperparameterTuningJobs/100": func(*http.Request) any { return study },
		"GET " + loc + "/hyperparameterTuningJobs": func(*http.Request) any {
			return map[string]any{"hyperparameterTuningJobs": []any{study}}
		},
		"GET " + loc + "/customJobs":        func(*http.Request) any { return map[string]any{} },
		"GET " + loc + "/trainingPipelines": func(*http.Request) any { return map[string]any{} },
	}))

	txt := c.open("training/studies/100", "study")
	wants(t, "the study page", txt, "Part of this study is not shown",
		"996 of the study's 1000 trials are left out of this page: trials 1-499, 501-997.",
		"only the 4 kept", "custom job 101", "1000 of 1000, 4 in parallel; 996 left out",
		"intermediate measurements are thinned",
		// Commands the CLI has (a tester was sent to `loom custom get` and
		// `loom metrics read`, which it has not).
		"`loom jobs custom get ID` shows its state and parameters", "(`loom metrics ID` of a trial's custom job)")
	if n := c.eval(`document.querySelector('#page .notice.warn a[href="#/training/customJobs/101"]') ? 1 : 0`); n != 1 {
		t.Error("the note links no omitted trial's custom job (trial 1 of study 100 is custom job 101)")
	}
	wants(t, "the training page", c.open("training", "training"), "1000 / 1000")
}

// pageOf answers one page of rows under field as the REST lists do
// (page_size, page_token: here the offset), with next_page_token while
// more remain.
func pageOf(r *http.Request, field string, rows []any) map[string]any {
	size, _ := strconv.Atoi(r.URL.Query().Get("page_size"))
	if size <= 0 {
		size, _ = strconv.Atoi(r.URL.Query().Get("pageSize"))
	}
	if size <= 0 || size > 1000 {
		size = 100
	}
	from, _ := strconv.Atoi(r.URL.Query().Get("page_token"))
	to := min(from+size, len(rows))
	out := map[string]any{field: rows[from:to]}
	if to < len(rows) {
		out["next_page_token"] = strconv.Itoa(to)
	}
	return out
}

// TestJobsPageShowsTheQueueOfABigProject: in a project of 10,000 jobs,
// the newest of them pending or running, the Jobs page shows the queue and
// says that its lists are cut; its Finished table shows the newest
// finished jobs (order_by "submit_time desc"), where it showed the oldest. Before, it read the first 1,000 jobs in
// submission order (all finished), showed "No pending or running jobs"
// and counted 1,000 jobs as if they were all.
func TestJobsPageShowsTheQueueOfABigProject(t *testing.T) {
	t.Parallel()
	const total, live = 10000, 10
	var all, active []any
	for i := 1; i <= total; i++ {
		state := "COMPLETED"
		switch {
		case i > total-live/2:
			state = "PENDING"
		case i > total-live:
			state = "RUNNING"
		}
		j := map[string]any{"name": "projects/default/jobs/" + strconv.Itoa(i), "job_id": strconv.Itoa(i),
			"display_name": "j" + strconv.Itoa(i), "state": state}
		all = append(all, j)
		if state != "COMPLETED" {
			active = append(active, j)
		}
	}
	c := openConsole(t, boundsAPI(t, map[string]func(*http.Request) any{
		"GET /v1/projects/default/jobs": func(r *http.Request) any {
			if r.URL.Query().Get("active_only") == "true" {
				return pageOf(r, "jobs", active)
			}
			if r.URL.Query().Get("order_by") == "submit_time desc" {
				return pageOf(r, "jobs", backward(all))
			}
			return pageOf(r, "jobs", all)
		},
	}))
	txt := c.open("jobs", "jobs")
	wants(t, "the jobs page", txt, "10 active jobs (5 pending), 990 or more finished",
		"Showing the first 990 finished jobs", "the newest", "there are more", "loom jobs list")
	// The Finished table shows the newest finished jobs (9990 down), not
	// the oldest (1 up).
	if n := c.eval(`document.querySelector('#page a[href="#/jobs/9990"]') && !document.querySelector('#page a[href="#/jobs/1"]') ? 1 : 0`); n != 1 {
		t.Error("the Finished table does not show the newest finished job (9990), or shows the oldest (1)")
	}
	if n := c.eval(`document.querySelectorAll('#page section:first-of-type tbody tr').length`); n != live {
		t.Errorf("the queue shows %d jobs, want the %d pending and running", n, live)
	}
	if n := c.eval(`document.querySelector('#page a[href="#/jobs/10000"]') ? 1 : 0`); n != 1 {
		t.Error("the newest pending job (10000) is not in the queue")
	}
	if strings.Contains(txt, "Showing the first 10 active") {
		t.Error("the queue, read whole, says it is cut")
	}
}

// TestListPagesSayWhenCut: a model of 250 versions shows its newest ones,
// and the models list, a model's versions and the training lists say when
// they show only the first of more. Before, a model's page asked for the
// first 100 versions by id (the oldest: version 250 was nowhere) and
// every one of these lists dropped the rest without a word.
func TestListPagesSayWhenCut(t *testing.T) {
	t.Parallel()
	const loc = "/v1/projects/default/locations/us-central1"
	const mloc = "/v1/projects/default/locations/global"
	var models, versions, studies []any
	for i := 1; i <= 600; i++ {
		models = append(models, map[string]any{"name": fmt.Sprintf("projects/default/locations/global/models/m%04d", i), "versionId": "1"})
	}
	for i := 1; i <= 250; i++ {
		versions = append(versions, map[string]any{"name": "projects/default/locations/global/models/big@" + strconv.Itoa(i), "versionId": strconv.Itoa(i)})
	}
	for i := 1; i <= 150; i++ {
		studies = append(studies, map[string]any{"name": fmt.Sprintf("projects/default/locations/us-central1/hyperparameterTuningJobs/%d", i*1000), "state": "JOB_STATE_RUNNING"})
	}
	c := openConsole(t, boundsAPI(t, map[string]func(*http.Request) any{
		"GET " + mloc + "/models": func(r *http.Request) any { return pageOf(r, "models", models) },
		"GET " + mloc + "/models/big:listVersions": func(r *http.Request) any {
			if r.URL.Query().Get("orderBy") == "version_id desc" {
				return pageOf(r, "models", backward(versions))
			}
			return pageOf(r, "models", versions)
		},
		"GET " + loc + "/hyperparameterTuningJobs": func(r *http.Request) any { return pageOf(r, "hyperparameterTuningJobs", studies) },
		"GET " + loc + "/customJobs":               func(*http.Request) any { return map[string]any{} },
		"GET " + loc + "/trainingPipelines":        func(*http.Request) any { return map[string]any{} },
	}))

	wants(t, "the models page", c.open("models", "models"), "Showing the first 500 models (by name); there are more.", "loom models list")
	txt := c.open("models/big", "model")
	wants(t, "the model page", txt, "Showing the first 100 versions (the newest); there are more.", "loom models versions big", "Lineage of version 250")
	if strings.Contains(txt, "Lineage of version 100\n") || strings.Contains(txt, "Lineage of version 1\n") {
		t.Errorf("the model page shows its oldest versions:\n%s", txt)
	}
	txt = c.open("training", "training")
	wants(t, "the training page", txt, "Showing the first 100 tuning jobs (by name); there are more.", "loom hptuning list")
	if strings.Contains(txt, "custom jobs (by name)") {
		t.Error("the training page says its empty custom jobs list is cut")
	}
}

func backward(rows []any) []any {
	out := slices.Clone(rows)
	slices.Reverse(out)
	return out
}

// TestLongNamesWrapInsideTheirCard: the longest names and texts the API
// accepts (a job's name, 256 bytes; a model version's description, 2,048;
// an artifact URI) with no space to break at wrap inside their card, so
// the columns after them stay on screen. Before, a cell kept an unbroken
// string on one line: a description made its table tens of thousands of
// pixels wide, every later column out of sight.
func TestLongNamesWrapInsideTheirCard(t *testing.T) {
	t.Parallel()
	long := func(n int) string { return strings.Repeat("x", n) }
	version := map[string]any{"name": "projects/default/locations/global/models/m@1", "versionId": "1", "displayName": long(128),
		"versionDescription": long(2048), "artifactUri": "file:///" + long(1000)}
	job := map[string]any{"name": "projects/default/jobs/1", "job_id": "1", "display_name": long(256), "state": "PENDING",
		"state_reason": "Resources", "placement": long(1000)}
	c := openConsole(t, boundsAPI(t, map[string]func(*http.Request) any{
		"GET /v1/projects/default/locations/global/models":                func(*http.Request) any { return map[string]any{"models": []any{version}} },
		"GET /v1/projects/default/locations/global/models/m:listVersions": func(*http.Request) any { return map[string]any{"models": []any{version}} },
		"GET /v1/projects/default/jobs":                                   func(*http.Request) any { return map[string]any{"jobs": []any{job}} },
		"GET /v1/projects/default/jobs/1":                                 func(*http.Request) any { return job },
	}))
	// Every card's content fits its width (a card scrolls what does not).
	const overflowing = `[...document.querySelectorAll('#page .card')].filter(c => c.scrollWidth > c.clientWidth + 1).length`
	for _, p := range []struct{ route, ready string }{{"models", "models"}, {"models/m", "model"}, {"jobs", "jobs"}, {"jobs/1", "job"}} {
		c.open(p.route, p.ready)
		if n := c.eval(overflowing); n != 0 {
			t.Errorf("#/%s: %d cards wider than the page's column: a long name does not wrap", p.route, n)
		}
	}
}

// TestMetricsSectionSaysWhichMetricsItLeavesOut: a job of 12 metrics
// draws 8 charts and names the 4 it does not draw. Before, the other 4
// were dropped without a word.
func TestMetricsSectionSaysWhichMetricsItLeavesOut(t *testing.T) {
	t.Parallel()
	var series []map[string]any
	for i := 1; i <= 12; i++ {
		series = append(series, map[string]any{"metric": fmt.Sprintf("m%02d", i), "count": 2})
	}
	job := map[string]any{"name": "projects/default/jobs/1", "job_id": "1", "state": "COMPLETED"}
	c := openConsole(t, boundsAPI(t, map[string]func(*http.Request) any{
		"GET /v1/projects/default/jobs/1":         func(*http.Request) any { return job },
		"GET /v1/projects/default/jobs/1/metrics": func(*http.Request) any { return map[string]any{"series": series} },
		"GET /v1/projects/default/jobs/1/metrics:read": func(r *http.Request) any {
			return map[string]any{"metric": r.URL.Query().Get("metric"), "total": 2,
				"points": []map[string]any{{"step": 0, "value": 1}, {"step": 1, "value": 2}}}
		},
	}))
	c.open("jobs/1", "job")
	const charts = `document.querySelectorAll('#page .uplot').length`
	testkit.WaitFor(t, 20*time.Second, "the job's metric charts", func() (bool, error) { return c.eval(charts) == 8, nil })
	wants(t, "the job page", c.text(), "Showing 8 of 12 metrics; not drawn: m09, m10, m11, m12.", "loom metrics JOB --metric M")
}

// TestClusterPagesSayWhatTheyDidNotRead: of 25 clusters, the Clusters page
// reads the health and goodput of the first 20 and says so; the others say
// "not read" (not "not available", which means the gateway does not serve
// them), and the Nodes page says it shows the nodes of the first 20.
// Before, both pages stopped at 20 clusters without a word.
func TestClusterPagesSayWhatTheyDidNotRead(t *testing.T) {
	t.Parallel()
	var clusters []any
	answers := map[string]func(*http.Request) any{
		"GET /v1/projects/default/clusters": func(r *http.Request) any { return pageOf(r, "clusters", clusters) },
	}
	for i := 1; i <= 25; i++ {
		name := fmt.Sprintf("projects/default/clusters/c%02d", i)
		clusters = append(clusters, map[string]any{"name": name, "status": map[string]any{"state": "RUNNING"}})
		node := []any{map[string]any{"hostname": fmt.Sprintf("c%02d-n1", i), "state": "HEALTHY"}}
		answers["GET /v1/"+name+"/nodeHealth"] = func(r *http.Request) any { return pageOf(r, "nodes", node) }
		answers["GET /v1/"+name+":goodput"] = func(*http.Request) any { return map[string]any{"jobs": 1, "goodput": 0.5} }
		answers["GET /v1/"+name+"/nodes"] = func(r *http.Request) any { return pageOf(r, "nodes", node) }
	}
	c := openConsole(t, boundsAPI(t, answers))
	txt := c.open("clusters", "clusters")
	wants(t, "the clusters page", txt, "Showing the first 20 clusters' health and goodput (by name); there are more.", "not read")
	if strings.Contains(txt, "not available") {
		t.Errorf("the clusters page says health it did not read is not available:\n%s", txt)
	}
	if n := c.eval(`[...document.querySelectorAll('#page .card.cluster')].filter(e => e.textContent.includes('not read')).length`); n != 5 {
		t.Errorf("%d cluster cards say their health was not read, want the 5 past the first 20", n)
	}
	txt = c.open("nodes", "nodes")
	wants(t, "the nodes page", txt, "Showing the first 20 clusters' nodes (by name); there are more.", "c20-n1")
}

// TestNodesPageReadsEveryPageOfABigCluster: a cluster of 1,500 nodes
// shows the health and Slurm state of every node, and a cluster past what
// the page reads says so. Before, node health and Slurm nodes were read
// as one page of 1,000: the other 500 nodes lost both columns unsaid.
func TestNodesPageReadsEveryPageOfABigCluster(t *testing.T) {
	t.Parallel()
	const cluster = "projects/default/clusters/big"
	var nodes, health, slurm []any
	for i := 1; i <= 1500; i++ {
		host := fmt.Sprintf("n%04d", i)
		nodes = append(nodes, map[string]any{"hostname": host, "state": "READY"})
		health = append(health, map[string]any{"hostname": host, "state": "HEALTHY", "gpus": []any{map[string]any{"temperature_c": 40}}})
		slurm = append(slurm, map[string]any{"hostname": host, "state": "IDLE"})
	}
	c := openConsole(t, boundsAPI(t, map[string]func(*http.Request) any{
		"GET /v1/projects/default/clusters": func(*http.Request) any {
			return map[string]any{"clusters": []any{map[string]any{"name": cluster}}}
		},
		"GET /v1/" + cluster + "/nodes":      func(r *http.Request) any { return pageOf(r, "nodes", nodes) },
		"GET /v1/" + cluster + "/nodeHealth": func(r *http.Request) any { return pageOf(r, "nodes", health) },
		"GET /v1/" + cluster + "/slurmNodes": func(r *http.Request) any { return pageOf(r, "nodes", slurm) },
	}))
	txt := c.open("nodes", "nodes")
	if n := c.eval(`[...document.querySelectorAll('#page tbody tr')].filter(r => r.textContent.includes('IDLE') && r.textContent.includes('1 GPUs')).length`); n != 1500 {
		t.Errorf("%d of 1500 nodes show their Slurm state and GPU health", n)
	}
	if strings.Contains(txt, "there are more") || strings.Contains(txt, "not read") {
		t.Errorf("the nodes page, read whole, says it is cut:\n%s", txt)
	}
	wants(t, "the clusters page", c.open("clusters", "clusters"), "HEALTHY 1500")
}

// fakeTimersJS puts the page's timers of a second or more on a clock that
// moves only when the test says (window.__clock.advance(ms) fires, soon
// after, each timer due by then; pending() lists the waiting ones'
// delays): a poll's backoff is then seen and skipped instead of waited out.
// Shorter timers (the live view's settle, a chart's redraw) stay real. It
// does nothing in a document that has it already.
const fakeTimersJS = `(() => {
  if (window.__clock) return;
  const realSet = window.setTimeout.bind(window), realClear = window.clearTimeout.bind(window);
  const timers = new Map();
  let now = 0, next = 1e9;
  window.setTimeout = (fn, delay = 0, ...args) => {
    if (!(delay >= 1000)) return realSet(fn, delay, ...args);
    const id = next++;
    timers.set(id, {at: now + delay, delay, run: () => fn(...args)});
    return id;
  };
  window.clearTimeout = id => { if (!timers.delete(id)) realClear(id); };
  window.__clock = {
    pending: () => [...timers.values()].map(t => t.delay),
    advance: ms => {
      now += ms;
      let fired = 0;
      for (const [id, t] of [...timers]) {
        if (t.at <= now) { timers.delete(id); realSet(t.run, 0); fired++; }
      }
      return fired;
    },
  };
})()`

// fakeTimers installs fakeTimersJS in the page open now and in every
// document the tab opens after.
func (c *consolePage) fakeTimers() {
	c.t.Helper()
	c.do("fake the page's timers", chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: fakeTimersJS})
		return err
	}))
	c.eval(fakeTimersJS + `, 0`)
}

// TestDashboardsRetryTheirFirstRead: a gateway that answers the list of
// dashboards 503 when the page opens (starting, Redis down) is asked
// again by the page's poll, and the dashboards show. Before, the first
// read was outside the poll: its error stayed on the page until a reload.
// The page's clock is fake (fakeTimers): the poll's backoff, twice its
// 15 s after a failure, is seen pending and then skipped, not waited out.
func TestDashboardsRetryTheirFirstRead(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	api := boundsAPI(t, map[string]func(*http.Request) any{
		"GET /v1/dashboards": func(*http.Request) any {
			return map[string]any{"dashboards": []any{map[string]any{"service": "scheduler", "title": "Scheduler"}}}
		},
		"GET /v1/dashboards/scheduler": func(*http.Request) any {
			return map[string]any{"service": "scheduler", "title": "Scheduler", "panels": []any{
				map[string]any{"id": "depth", "title": "Queue depth", "kind": "stat"}}}
		},
	})
	c := openConsole(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/dashboards" && calls.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"code":14,"message":"redis: connection refused"}`))
			return
		}
		api.ServeHTTP(w, r)
	}))
	c.fakeTimers()
	c.do("open dashboards", chromedp.Navigate(c.srv.URL+"/#/dashboards"))
	// The failure is on the page and the poll waits to try again: twice
	// its 15 s, on the fake clock.
	testkit.WaitFor(t, 20*time.Second, "the failed first read and the poll's backoff", func() (bool, error) {
		return calls.Load() >= 1 && strings.Contains(c.text(), "redis: connection refused") &&
			c.eval(`window.__clock.pending().includes(30000) ? 1 : 0`) == 1, nil
	})
	if c.eval(`document.querySelector('main[data-ready="dashboards"]') ? 1 : 0`) == 1 || calls.Load() != 1 {
		t.Fatalf("before the retry: the dashboards show, or the list was read %d times; want the 503's page, read once", calls.Load())
	}
	if n := c.eval(`window.__clock.advance(30000)`); n < 1 {
		t.Fatalf("30 s on, %d timers fired, want the poll's", n)
	}
	testkit.WaitFor(t, 20*time.Second, "the dashboards after the retry", func() (bool, error) {
		return c.eval(`document.querySelector('main[data-ready="dashboards"]') ? 1 : 0`) == 1, nil
	})
	wants(t, "the dashboards page", c.text(), "Scheduler", "Queue depth")
	if n := calls.Load(); n < 2 {
		t.Errorf("the list of dashboards was read %d times, want a retry after the 503", n)
	}
}

// TestPagesSayWhenUpdatesStopAndWhatToDo: a page whose reads are refused
// (403, as after switching to a project the caller has no role in) says
// that its updates stopped and what to do, not "retrying with backoff"
// (the watch had stopped; nothing was retried); an empty queue says how
// to submit a job.
func TestPagesSayWhenUpdatesStopAndWhatToDo(t *testing.T) {
	t.Parallel()
	api := boundsAPI(t, map[string]func(*http.Request) any{
		"GET /v1/projects/default/jobs": func(*http.Request) any { return map[string]any{"jobs": []any{}} },
	})
	c := openConsole(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/projects/other/jobs" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`{"code":7,"message":"users/ada has no role in project other"}`))
			return
		}
		api.ServeHTTP(w, r)
	}))
	txt := c.open("jobs", "jobs")
	wants(t, "an empty jobs page", txt, "No pending or running jobs. Submit one with loom jobs submit -- COMMAND",
		"No finished jobs. Jobs show here once they end; loom jobs list")

	c.eval(`sessionStorage.setItem('loom.project', 'other'), 0`)
	c.do("open jobs in another project", chromedp.Reload())
	testkit.WaitFor(t, 20*time.Second, "the refusal on the page", func() (bool, error) {
		return strings.Contains(c.text(), "users/ada has no role in project other"), nil
	})
	txt = c.text()
	wants(t, "a refused jobs page", txt, "Updates stopped: users/ada has no role in project other (project other).",
		"Choose a project you are a member of")
	if strings.Contains(txt, "retrying") {
		t.Errorf("a refused page says it is retrying:\n%s", txt)
	}
}

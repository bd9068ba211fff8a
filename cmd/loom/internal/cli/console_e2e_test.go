package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/testkit/browser"
	"github.com/loom-ml/loom/libs/testkit/need"
)

// hostileName is a job name a careless page would run: the console must
// show it as text.
const hostileName = `<script>alert("pwned")</script><img src=x onerror=alert(1)>`

// TestConsole opens every page of the web console in headless Chromium on
// the embedded stack with real data: a GPU cluster, a finished job with
// logs, a running one with a hostile name, a pending one with its reason,
// a tuning job of the built-in trainer. It checks each page's text, that
// the CSP header is there, that signing in is asked for first, and that
// the hostile name is text (no script runs, no dialog opens). With
// LOOM_UPDATE_SCREENSHOTS=1 it saves docs/img/console-<page>.png.
func TestConsole(t *testing.T) {
	t.Parallel()
	need.Tools(t, "apt-get install chromium", "chromium")
	s := startTrainingStack(t, 8*time.Minute)
	base := "http://" + s.st.RESTAddr

	// Data. The tuning job runs while the other pages are checked.
	s.must("clusters", "create", "-f", writeFile(t, "gpu.json", `{"name": "gpu", "compute": {"nodePools": [
  {"id": "h100", "machineType": "a3-highgpu-8g", "nodeCount": 2, "acceleratorType": "nvidia-h100-80gb", "acceleratorCount": 8}]}}`))
	study := fmt.Sprintf(consoleStudy, t.TempDir())
	if code, b := s.rest("POST", "/v1/projects/default/locations/us-central1/hyperparameterTuningJobs", study); code != 200 {
		t.Fatalf("create tuning job: %d %s", code, b)
	}
	// A pipeline registers a model (with its lineage) for the Models page.
	if code, b := s.rest("POST", "/v1/projects/default/locations/us-central1/trainingPipelines", fmt.Sprintf(consolePipeline, t.TempDir())); code != 200 {
		t.Fatalf("create pipeline: %d %s", code, b)
	}
	s.must("jobs", "submit", "--cluster", "gpu", "--name", "hello", "--wait", "--", "sh", "-c", "echo hello from loom; echo line two")
	running := submitREST(t, s, map[string]any{"display_name": hostileName, "cluster": "projects/default/clusters/gpu",
		"command": []string{"sleep", "600"}, "node_count": 2, "gpus_per_node": 8})
	waitJobState(t, s, running, "RUNNING")
	pending := submitREST(t, s, map[string]any{"display_name": "waits-for-gpus", "cluster": "projects/default/clusters/gpu",
		"command": []string{"true"}, "node_count": 1, "gpus_per_node": 8})
	waitJobState(t, s, pending, "PENDING")

	// The console's own responses carry the CSP.
	resp, err := http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("GET /: Content-Security-Policy %q, want a strict one", csp)
	}

	bctx := browser.Start(t, s.ctx)
	// A dialog (alert) would mean API data ran as script.
	dialogs := make(chan string, 16)
	if err := chromedp.Listen(bctx, func(ev any) {
		if e, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			select {
			case dialogs <- e.Message:
			default:
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	run := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		ctx, cancel := context.WithTimeout(bctx, time.Minute)
		defer cancel()
		if err := chromedp.Do(ctx, actions...); err != nil {
			select {
			case msg := <-dialogs:
				t.Fatalf("%s: %v (a JavaScript dialog opened: %q)", what, err, msg)
			default:
			}
			t.Fatalf("%s: %v", what, err)
		}
	}
	eval := func(expr string) int {
		t.Helper()
		return browserInt(t, bctx, expr)
	}

	// Unauthenticated: the sign-in box, nothing else.
	run("open the console", chromedp.Navigate(base+"/#/clusters"), chromedp.WaitVisible(chromedp.CSS(`#signin`)))
	shot(t, bctx, "signin")
	// A wrong credential is refused and says so.
	run("sign in wrongly", chromedp.SendKeys(chromedp.CSS(`#secret`), "lk_nope.nope"), chromedp.Click(chromedp.CSS(`#signin button`)),
		chromedp.WaitVisible(chromedp.CSS(`#signin-msg .notice`)))
	waitText(t, bctx, "#signin-msg", "Sign-in failed")
	run("sign in", chromedp.SetValue(chromedp.CSS(`#secret`), s.key), chromedp.Click(chromedp.CSS(`#signin button`)),
		chromedp.WaitVisible(chromedp.CSS(`main[data-ready="clusters"]`)))
	sctx, scancel := context.WithTimeout(bctx, 30*time.Second)
	stored, err := chromedp.Run(sctx, chromedp.Evaluate[string](`sessionStorage.getItem('loom.token') || ''`))
	scancel()
	if err != nil {
		t.Fatal(err)
	}
	if stored == "" || stored == s.key {
		t.Errorf("sessionStorage holds %q: want a short-lived access token, not the API key", stored)
	}

	// An expired access token is renewed once with the refresh token, in
	// the background: the page loads, with a new token stored.
	if eval(`sessionStorage.getItem('loom.refresh') ? 1 : 0`) != 1 {
		t.Error("no refresh token stored after signing in with an API key")
	}
	if eval(`(sessionStorage.setItem('loom.token', 'expired-token'), 0)`) != 0 {
		t.Fatal("could not replace the token")
	}
	visit(t, bctx, base, "jobs", "jobs")
	if eval(`['', 'expired-token'].includes(sessionStorage.getItem('loom.token') || '') ? 0 : 1`) != 1 {
		t.Error("the expired token was not renewed with the refresh token")
	}
	visit(t, bctx, base, "clusters", "clusters")
	waitText(t, bctx, "#page", "gpu", "RUNNING", "h100", "a3-highgpu-8g", "8 × nvidia-h100-80gb", "Nodes ready", "2 of 2", "GPUs", "16")
	shot(t, bctx, "clusters")

	// An operator drains a node with a reason: the Slurm column shows it.
	if code, b := s.rest("POST", "/v1/projects/default/clusters/gpu/slurmNodes/h100-0002:update", `{"state": "DRAIN", "reason": "bad DIMM, ticket 42"}`); code != 200 {
		t.Fatalf("drain h100-0002: %d %s", code, b)
	}
	visit(t, bctx, base, "nodes/gpu", "nodes")
	waitText(t, bctx, "#page", "h100-0001", "h100-0002", "READY", "8 GPUs, max", "NODE_HEALTHY", "ALLOCATED", "DRAIN", "bad DIMM, ticket 42")
	shot(t, bctx, "nodes")

	visit(t, bctx, base, "jobs", "jobs")
	waitText(t, bctx, "#page", "Queue", "waits-for-gpus", "PENDING", "Resources", hostileName, "hello", "COMPLETED")
	shot(t, bctx, "jobs")
	// Live: the list is polled (the API has no list watch); a job submitted
	// now shows up on the open page.
	submitREST(t, s, map[string]any{"display_name": "arrives-live", "cluster": "projects/default/clusters/gpu", "command": []string{"true"}})
	waitText(t, bctx, "#page", "arrives-live")
	// An array's tasks by the ids squeue gives them.
	sweep := submitREST(t, s, map[string]any{"display_name": "sweep", "cluster": "projects/default/clusters/gpu",
		"script": "#!/bin/sh\ntrue\n", "array": "0-1", "gpus_per_node": 8})
	waitText(t, bctx, "#page", sweep+"_0", sweep+"_1")
	if scripts := eval(`document.querySelectorAll('#page script, #page img').length`); scripts != 0 {
		t.Errorf("the hostile job name made %d elements: it must be rendered as text", scripts)
	}

	visit(t, bctx, base, "jobs/"+pending, "job")
	waitText(t, bctx, "#page", "waits-for-gpus", "PENDING", "Reason", "Resources", "Placement", "Not started yet.", "Training metrics")
	shot(t, bctx, "job-pending")
	// Live: cancelling the job that holds the GPUs lets the pending one run;
	// its page follows the job's :watch stream (the job page does not poll),
	// so the new state and its run appear with no reload.
	if code, b := s.rest("POST", "/v1/projects/default/jobs/"+running+":cancel", "{}"); code != 200 {
		t.Fatalf("cancel job %s: %d %s", running, code, b)
	}
	waitText(t, bctx, "#page", "waits-for-gpus", "COMPLETED", "Attempt", "h100-000")

	hello := jobIDByName(t, s, "hello")
	visit(t, bctx, base, "jobs/"+hello, "job")
	waitText(t, bctx, "#page", "hello", "COMPLETED", "hello from loom", "line two", "Goodput", "Attempt")
	shot(t, bctx, "job")

	// Dashboards: each service's panels when the gateway serves
	// /v1/dashboards, else a clear "not available".
	visit(t, bctx, base, "dashboards/scheduler", "dashboards")
	if txt := text(t, bctx, "#page"); !strings.Contains(txt, "not available") {
		waitText(t, bctx, "#page", "scheduler")
		testkit.WaitFor(t, 30*time.Second, "the scheduler's panels", func() (bool, error) {
			return eval(`document.querySelectorAll('#page .panels .card, #page .stat').length`) > 0, nil
		})
	}
	shot(t, bctx, "dashboards")

	// The study, once its trials are done.
	var hp struct {
		Name, State, BestTrial string
	}
	testkit.WaitFor(t, 5*time.Minute, "the tuning job to finish", func() (bool, error) {
		code, b := s.rest("GET", "/v1/projects/default/locations/us-central1/hyperparameterTuningJobs?pageSize=10", "")
		var l struct {
			HyperparameterTuningJobs []struct{ Name, State, BestTrial string }
		}
		if code != 200 || json.Unmarshal(b, &l) != nil || len(l.HyperparameterTuningJobs) == 0 {
			return false, nil
		}
		h := l.HyperparameterTuningJobs[0]
		hp.Name, hp.State, hp.BestTrial = h.Name, h.State, h.BestTrial
		return strings.HasSuffix(h.State, "SUCCEEDED") || strings.HasSuffix(h.State, "FAILED") || strings.HasSuffix(h.State, "CANCELLED"), nil
	})
	if !strings.HasSuffix(hp.State, "SUCCEEDED") {
		t.Fatalf("tuning job %s ended %s", hp.Name, hp.State)
	}
	testkit.WaitFor(t, 3*time.Minute, "the pipeline to finish", func() (bool, error) {
		_, b := s.rest("GET", "/v1/projects/default/locations/us-central1/trainingPipelines", "")
		return strings.Contains(string(b), "PIPELINE_STATE_SUCCEEDED") || strings.Contains(string(b), "PIPELINE_STATE_FAILED"), nil
	})
	visit(t, bctx, base, "training", "training")
	waitText(t, bctx, "#page", "Tuning jobs (studies)", "console-study", "SUCCEEDED", "4 / 4", "accuracy", "Custom jobs",
		"Pipelines", "console-pipeline")
	shot(t, bctx, "training")
	// A trial's CustomJob, from its link.
	c, cancel := context.WithTimeout(bctx, 30*time.Second)
	href, err := chromedp.Run(c, chromedp.Evaluate[string](`(() => { const a = document.querySelector('#page a[href^="#/training/customJobs/"]'); return a ? a.getAttribute('href') : ''; })()`))
	cancel()
	if err != nil || href == "" {
		t.Fatalf("training page has no link to a custom job (%v):\n%s", err, text(t, bctx, "#page"))
	}
	visit(t, bctx, base, strings.TrimPrefix(href, "#/"), "customJob")
	waitText(t, bctx, "#page", "console-study-trial-", "SUCCEEDED", "Workers", "1 × n2-standard-8", "loom train --epochs=8", "Metrics over steps")

	visit(t, bctx, base, "training/studies/"+filepath.Base(hp.Name), "study")
	waitText(t, bctx, "#page", "console-study", "Trials", "learning_rate", "batch_size", "accuracy", "★", "Best so far",
		"Hyperparameters against accuracy", "Trial "+hp.BestTrial+": metrics over steps")
	// One line per trial that reported the objective (under load a trial
	// can end INFEASIBLE; the page then shows its reason instead).
	code, b := s.rest("GET", "/v1/"+hp.Name, "")
	var got struct {
		Trials []struct{ State string }
	}
	if code != 200 || json.Unmarshal(b, &got) != nil {
		t.Fatalf("get %s: %d %s", hp.Name, code, b)
	}
	reported := 0
	for _, tr := range got.Trials {
		if tr.State == "SUCCEEDED" {
			reported++
		}
	}
	if reported == 0 {
		t.Fatalf("no trial of %s succeeded: %s", hp.Name, b)
	}
	var charts, lines int
	defer func() {
		if t.Failed() {
			shot(t, bctx, "study-failed")
			t.Logf("study page: %d uPlot charts, %d parallel-coordinate lines; text:\n%s", charts, lines, text(t, bctx, "#page"))
		}
	}()
	testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("the study's charts: best so far, the trial's metrics, %d lines of parallel coordinates", reported), func() (bool, error) {
		charts, lines = eval(`document.querySelectorAll('#page .uplot').length`), eval(`document.querySelectorAll('#page svg.parallel polyline').length`)
		return charts >= 2 && lines == reported, nil
	})
	shot(t, bctx, "study")

	// Models: the registry's REST when this gateway serves it (a version
	// with its lineage graph), else a clear "not available".
	visit(t, bctx, base, "models", "models")
	if txt := text(t, bctx, "#page"); strings.Contains(txt, "not available") {
		shot(t, bctx, "models")
	} else {
		waitText(t, bctx, "#page", "Registered models", "console-model")
		shot(t, bctx, "models")
		c, cancel := context.WithTimeout(bctx, 30*time.Second)
		href, err := chromedp.Run(c, chromedp.Evaluate[string](`(() => { const a = document.querySelector('#page a[href^="#/models/"]'); return a ? a.getAttribute('href') : ''; })()`))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if href == "" {
			t.Fatalf("models page has no link to a model:\n%s", text(t, bctx, "#page"))
		}
		visit(t, bctx, base, strings.TrimPrefix(href, "#/"), "model")
		// The graph's kind labels are upper-cased by CSS, and innerText
		// reads them as shown.
		waitText(t, bctx, "#page", "Versions", "Lineage of version 1", "CUSTOM JOB", "job ")
		if n := eval(`document.querySelectorAll('#page svg.lineage g.node').length`); n < 3 {
			t.Errorf("the lineage graph has %d nodes, want version → … → data", n)
		}
		shot(t, bctx, "model")
	}

	// Signing out ends the refresh token at the gateway: a copy of it
	// taken from the tab gets no new token.
	rctx, rcancel := context.WithTimeout(bctx, 30*time.Second)
	refresh, err := chromedp.Run(rctx, chromedp.Evaluate[string](`sessionStorage.getItem('loom.refresh') || ''`))
	rcancel()
	if err != nil || refresh == "" {
		t.Fatalf("refresh token before signing out: %q, %v", refresh, err)
	}
	run("sign out", chromedp.Click(chromedp.CSS(`#signout`)), chromedp.WaitVisible(chromedp.CSS(`#signin`)))
	if code, b := s.rest("POST", "/v1/auth:token", `{"refresh_token":"`+refresh+`"}`); code != http.StatusUnauthorized || !strings.Contains(string(b), "already used") {
		t.Errorf("the refresh token after signing out: HTTP %d %s; want 401, used up", code, b)
	}

	select {
	case msg := <-dialogs:
		t.Errorf("a JavaScript dialog opened (%q): API data ran as script", msg)
	default:
	}
}

// consoleStudy is a small study of the built-in trainer: 4 trials, 2 at a
// time, a few epochs each. %s is the output directory.
const consoleStudy = `{
  "displayName": "console-study",
  "maxTrialCount": 4,
  "parallelTrialCount": 2,
  "studySpec": {
    "metrics": [{"metricId": "accuracy", "goal": "MAXIMIZE"}],
    "parameters": [
      {"parameterId": "learning_rate", "doubleValueSpec": {"minValue": 0.01, "maxValue": 1}, "scaleType": "UNIT_LOG_SCALE"},
      {"parameterId": "batch_size", "discreteValueSpec": {"values": [16, 32, 64, 128]}}
    ],
    "seed": "7"
  },
  "trialJobSpec": {
    "workerPoolSpecs": [{"machineSpec": {"machineType": "n2-standard-8"}, "replicaCount": "1",
      "containerSpec": {"command": ["loom", "train"], "args": ["--epochs=8", "--hidden_units=16"]}}],
    "baseOutputDirectory": {"outputUriPrefix": "file://%s"}
  }
}`

// consolePipeline trains the built-in trainer and registers the result as
// a model. %s is the output directory.
const consolePipeline = `{
  "displayName": "console-pipeline",
  "trainingTaskDefinition": "gs://google-cloud-aiplatform/schema/trainingjob/definition/custom_task_1.0.0.yaml",
  "trainingTaskInputs": {
    "workerPoolSpecs": [{"machineSpec": {"machineType": "n2-standard-8"}, "replicaCount": "1",
      "containerSpec": {"command": ["loom", "train"], "args": ["--epochs=5"]}}],
    "baseOutputDirectory": {"outputUriPrefix": "file://%s"}
  },
  "modelToUpload": {"displayName": "console-model"}
}`

// submitREST submits job through the REST API and returns its ID.
// TestConsoleListsLive: the jobs page, opened before a job is submitted,
// shows the job without a reload, from the watch stream (GET
// /v1/projects/default:watchChanges), not from polling.
func TestConsoleListsLive(t *testing.T) {
	t.Parallel()
	need.Tools(t, "apt-get install chromium", "chromium")
	s := startTrainingStack(t, 6*time.Minute)
	base := "http://" + s.st.RESTAddr
	s.must("clusters", "create", "-f", writeFile(t, "live.json", `{"name": "live", "compute": {"nodePools": [
  {"id": "cpu", "machineType": "n2-standard-8", "nodeCount": 1}]}}`))

	bctx := browser.Start(t, s.ctx)
	// watches counts the page's requests of the watch stream.
	var watches atomic.Int32
	if err := chromedp.Listen(bctx, func(ev any) {
		if e, ok := ev.(*network.EventRequestWillBeSent); ok && strings.Contains(e.Request.URL, ":watchChanges?collections=jobs") {
			watches.Add(1)
		}
	}); err != nil {
		t.Fatal(err)
	}
	run := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		browserDo(t, bctx, what, actions...)
	}
	eval := func(expr string) int {
		t.Helper()
		return browserInt(t, bctx, expr)
	}
	run("open the jobs page", chromedp.Navigate(base+"/#/jobs"), chromedp.WaitVisible(chromedp.CSS(`#signin`)))
	run("sign in", chromedp.SetValue(chromedp.CSS(`#secret`), s.key), chromedp.Click(chromedp.CSS(`#signin button`)),
		chromedp.WaitVisible(chromedp.CSS(`main[data-ready="jobs"]`)))
	// A mark on the window: a reload would lose it.
	if eval(`(window.loomLiveMark = 7, 0)`) != 0 {
		t.Fatal("could not mark the window")
	}
	testkit.WaitFor(t, time.Minute, "the jobs page watches :watchChanges", func() (bool, error) {
		return watches.Load() > 0, nil
	})
	const name = "appears-live"
	if strings.Contains(text(t, bctx, "#page"), name) {
		t.Fatalf("the page shows %s before it was submitted", name)
	}
	start := time.Now()
	id := submitREST(t, s, map[string]any{"display_name": name, "cluster": "projects/default/clusters/live",
		"command": []string{"true"}, "node_count": 1})
	waitText(t, bctx, "#page", name, id)
	t.Logf("the submitted job showed on the open page after %s", time.Since(start).Round(time.Millisecond))
	if eval(`window.loomLiveMark || 0`) != 7 {
		t.Error("the page was reloaded: the job was to appear without one")
	}
	// One watch all along: a healthy gateway's stream is not reopened.
	if n := watches.Load(); n != 1 {
		t.Errorf("the page opened %d watch streams, want 1", n)
	}
}

func submitREST(t *testing.T, s *trainingStack, job map[string]any) string {
	t.Helper()
	b, _ := json.Marshal(job)
	code, out := s.rest("POST", "/v1/projects/default/jobs", string(b))
	var j struct {
		JobID string `json:"job_id"`
	}
	if code != 200 || json.Unmarshal(out, &j) != nil || j.JobID == "" {
		t.Fatalf("submit %s: %d %s", b, code, out)
	}
	return j.JobID
}

func waitJobState(t *testing.T, s *trainingStack, id, state string) {
	t.Helper()
	testkit.WaitFor(t, time.Minute, "job "+id+" "+state, func() (bool, error) {
		code, b := s.rest("GET", "/v1/projects/default/jobs/"+id, "")
		var j struct{ State, StateReason string }
		_ = json.Unmarshal(b, &j)
		return code == 200 && j.State == state && (state != "PENDING" || strings.Contains(string(b), "state_reason")), nil
	})
}

func jobIDByName(t *testing.T, s *trainingStack, name string) string {
	t.Helper()
	code, b := s.rest("GET", "/v1/projects/default/jobs?names="+name, "")
	var l struct {
		Jobs []struct {
			JobID string `json:"job_id"`
		}
	}
	if code != 200 || json.Unmarshal(b, &l) != nil || len(l.Jobs) != 1 {
		t.Fatalf("list jobs named %s: %d %s", name, code, b)
	}
	return l.Jobs[0].JobID
}

// visit opens the console at #/route and waits for the page to have
// loaded its data (main[data-ready=ready]).
func visit(t *testing.T, ctx context.Context, base, route, ready string) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(c, chromedp.Navigate(base+"/#/"+route),
		chromedp.WaitVisible(chromedp.CSS(`main[data-ready="`+ready+`"]`))); err != nil {
		t.Fatalf("open #/%s: %v", route, err)
	}
}

// text is the visible text of sel.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s, err := chromedp.Run(c, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

// waitText waits until sel's text holds every string of want (the pages
// refresh themselves: live data arrives without a reload).
func waitText(t *testing.T, ctx context.Context, sel string, want ...string) {
	t.Helper()
	var last string
	var missing []string
	defer func() {
		if t.Failed() && len(missing) > 0 {
			t.Logf("%s lacks %q; it shows:\n%s", sel, missing, last)
		}
	}()
	testkit.WaitFor(t, 45*time.Second, fmt.Sprintf("%s to show %q", sel, want), func() (bool, error) {
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		var err error
		if last, err = chromedp.Run(c, chromedp.Text(chromedp.CSS(sel))); err != nil {
			return false, err
		}
		missing = missing[:0]
		for _, w := range want {
			if !strings.Contains(last, w) {
				missing = append(missing, w)
			}
		}
		return len(missing) == 0, nil
	})
}

// shot saves the page as docs/img/console-NAME.png when
// LOOM_UPDATE_SCREENSHOTS=1.
func shot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	if os.Getenv("LOOM_UPDATE_SCREENSHOTS") != "1" {
		return
	}
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(c, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join("..", "..", "..", "..", "docs", "img", "console-"+name+".png")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// browserDo runs actions in the browser of bctx, within a minute, and
// fails t saying what was being done when they fail.
func browserDo(t *testing.T, bctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(bctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// browserInt evaluates the JavaScript expr in the page of bctx, within
// 30 s, as an integer.
func browserInt(t *testing.T, bctx context.Context, expr string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(bctx, 30*time.Second)
	defer cancel()
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return n
}

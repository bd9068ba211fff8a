package console

import (
	"net/http"
	"strings"
	"testing"

	"github.com/loom-ml/loom/libs/testkit/need"
)

// TestCallerTextStaysText: every text a caller of the API controls — a
// job's name, user, reason and placement, a cluster's message, conditions
// and partitions (id, state, node sets, max time), a node's hostname, pool
// and drain reason, a model's name, description, labels and aliases, a
// metric's name, a dashboard's titles and legends — is an HTML payload whose handler would set window.pwned, and the
// real browser shows each as its characters: no element made from it,
// nothing run, on every page of the navigation.
func TestCallerTextStaysText(t *testing.T) {
	t.Parallel()
	need.Tools(t, "apt-get install chromium", "chromium")
	const x = `<img src=x onerror="window.pwned=1"><script>window.pwned=2</script><b>bold</b>`
	one := func(v any) func(*http.Request) any { return func(*http.Request) any { return v } }
	const c1 = "projects/default/clusters/c1"
	job := map[string]any{"name": "projects/default/jobs/7", "job_id": "7", "display_name": x, "user": x, "state": "PENDING",
		"state_reason": x, "placement": x, "cluster": c1}
	model := map[string]any{"name": "projects/default/locations/global/models/m1", "displayName": x, "description": x,
		"labels": map[string]string{"team": x}, "versionId": "1", "versionAliases": []string{"default"}, "artifactUri": x}
	series := map[string]any{"legend": x, "points": [][]float64{{1700000000, 1}, {1700000015, 2}}}
	c := openConsole(t, boundsAPI(t, map[string]func(*http.Request) any{
		"GET /v1/projects/default/clusters": one(map[string]any{"clusters": []any{map[string]any{"name": c1, "description": x,
			"status": map[string]any{"state": "RUNNING", "ready_nodes": 1, "total_nodes": 1, "message": x,
				"conditions": []any{map[string]any{"type": x, "status": "TRUE", "reason": x, "message": x}}},
			"orchestrator": map[string]any{"slurm": map[string]any{"partitions": []any{map[string]any{"id": x, "state": x,
				"node_set_ids": []string{x}, "max_time": x}}}}}}}),
		"GET /v1/" + c1 + "/nodes": one(map[string]any{"nodes": []any{map[string]any{"name": c1 + "/nodes/n1", "hostname": x,
			"node_pool": x, "state": "NODE_STATE_DRAINED", "reason": x}}}),
		"GET /v1/" + c1 + "/slurmNodes":   one(map[string]any{"nodes": []any{map[string]any{"hostname": x, "state": "DRAIN", "reason": x}}}),
		"GET /v1/projects/default/jobs":   one(map[string]any{"jobs": []any{job}}),
		"GET /v1/projects/default/jobs/7": one(job),
		"GET /v1/projects/default/jobs/7/metrics": one(map[string]any{"series": []any{map[string]any{"metric": x, "count": 2,
			"first": 0, "last": 1, "min": 0, "max": 1}}}),
		"GET /v1/projects/default/jobs/7/metrics:read": one(map[string]any{"metric": x, "total": 2,
			"points": []any{map[string]any{"step": 0, "value": 1}, map[string]any{"step": 1, "value": 2}}}),
		"GET /v1/projects/default/locations/global/models":                 one(map[string]any{"models": []any{model}}),
		"GET /v1/projects/default/locations/global/models/m1:listVersions": one(map[string]any{"models": []any{model}}),
		"GET /v1/dashboards": one(map[string]any{"dashboards": []any{map[string]any{"service": "scheduler", "title": x}}}),
		"GET /v1/dashboards/scheduler": one(map[string]any{"service": "scheduler", "title": x, "panels": []any{
			map[string]any{"id": "a", "title": x, "unit": x, "kind": "stat", "series": []any{series}},
			map[string]any{"id": "b", "title": x, "unit": "s", "kind": "timeseries", "series": []any{series}}}}),
	}))
	for _, p := range []struct{ route, ready string }{
		{"clusters", "clusters"}, {"nodes", "nodes"}, {"jobs", "jobs"}, {"jobs/7", "job"},
		{"models", "models"}, {"models/m1", "model"}, {"dashboards/scheduler", "dashboards"},
	} {
		txt := c.open(p.route, p.ready)
		if !strings.Contains(txt, "<b>bold</b>") {
			t.Errorf("#/%s does not show the caller's text as its characters:\n%s", p.route, txt)
		}
		if n := c.eval(`document.querySelectorAll('#page img, #page script, #page b, #top img, #top b').length`); n != 0 {
			t.Errorf("#/%s: the caller's text became %d HTML elements", p.route, n)
		}
		if n := c.eval(`window.pwned || 0`); n != 0 {
			t.Fatalf("#/%s: the caller's text ran script (window.pwned = %d)", p.route, n)
		}
	}
}

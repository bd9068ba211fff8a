package gateway

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	"github.com/loom-ml/loom/services/gateway/internal/console"
	"github.com/loom-ml/loom/services/gateway/internal/ports"
)

// TestRESTAnswersAreNotCachedNorRendered: every answer of the REST API —
// a token (RFC 6749 §5.1: no-store), data read with a credential, a
// refusal, the dashboards, a path it does not know — says no-store,
// nosniff and a CSP that allows nothing, so that no cache keeps a secret
// and no browser renders an answer as a page; the console's own files
// keep theirs.
func TestRESTAnswersAreNotCachedNorRendered(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, wait)
	for _, tc := range []struct {
		name, verb, path, cred, body string
		want                         int
	}{
		{"a token", http.MethodPost, "/v1/auth:token", h.adminKey, "{}", http.StatusOK},
		{"data", http.MethodGet, "/v1/" + project + "/clusters", h.cred("vic"), "", http.StatusOK},
		{"a refusal", http.MethodGet, "/v1/" + project + "/clusters", "", "", http.StatusUnauthorized},
		{"another project", http.MethodGet, "/v1/projects/other/clusters", h.cred("vic"), "", http.StatusNotFound},
		{"the dashboards", http.MethodGet, "/v1/dashboards", h.cred("vic"), "", http.StatusOK},
		{"no such path", http.MethodGet, "/v1/nothing", h.cred("vic"), "", http.StatusNotFound},
		// Refused before the API's handlers run (limitBody).
		{"a body too large", http.MethodPost, "/v1/" + project + "/clusters", h.cred("vic"), strings.Repeat("x", ports.DefaultMaxBodyBytes+1), http.StatusRequestEntityTooLarge},
	} {
		req, err := http.NewRequestWithContext(ctx, tc.verb, h.restBase+tc.path, strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		if tc.cred != "" {
			req.Header.Set("Authorization", "Bearer "+tc.cred)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: %s %s: HTTP %d %s, want %d", tc.name, tc.verb, tc.path, resp.StatusCode, b, tc.want)
		}
		if got := resp.Header.Get("WWW-Authenticate"); tc.want == http.StatusUnauthorized && got != `Bearer realm="loom"` {
			t.Errorf("%s: %s %s: WWW-Authenticate %q, want the challenge Bearer realm=\"loom\"", tc.name, tc.verb, tc.path, got)
		}
		for k, want := range map[string]string{"Cache-Control": "no-store", "Pragma": "no-cache",
			"X-Content-Type-Options": "nosniff", "Content-Security-Policy": ports.APICSP} {
			if got := resp.Header.Get(k); got != want {
				t.Errorf("%s: %s %s: %s %q, want %q", tc.name, tc.verb, tc.path, k, got, want)
			}
		}
	}
	// The console's page is revalidated, not refused to caches, under its
	// own policy.
	resp, err := http.Get(h.restBase + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("Cache-Control"); got != "no-cache" {
		t.Errorf("console page: Cache-Control %q, want no-cache", got)
	}
	if got := resp.Header.Get("Content-Security-Policy"); got != console.CSP {
		t.Errorf("console page: CSP %q, want the console's", got)
	}
}

// TestRESTRefusesUnknownQueryParameters: a query parameter that names no
// field of the request is 400 naming it, as an unknown field of a body
// is, rather than ignored (a misspelt filter listed everything), on
// every route, those whose path sets every field included; so is one the
// path sets; the fields' proto and JSON names, and a path into a nested
// message, are taken.
func TestRESTRefusesUnknownQueryParameters(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, wait)
	for _, tc := range []struct {
		path string
		want int
		says string
	}{
		{"/v1/" + project + "/clusters?bogus=1", http.StatusBadRequest, `bogus: query parameter: ListClustersRequest has no field \"bogus\"`},
		{"/v1/" + project + "/jobs?state=RUNNING", http.StatusBadRequest, `has no field \"state\"`},
		{"/v1/" + project + "/jobs?page_size=1&filter.x=1", http.StatusBadRequest, `filter.x`},
		{"/v1/" + project + "/jobs?states=RUNNING&page_size=5", http.StatusOK, ""},
		{"/v1/" + project + "/jobs?activeOnly=true&pageSize=5", http.StatusOK, ""},
		{"/v1/" + project + "/locations/us-central1/customJobs?pageSize=5", http.StatusOK, ""},
		{"/v1/" + project + "/locations/us-central1/customJobs?pageSize=5&page_sise=3", http.StatusBadRequest, `page_sise`},
		// Routes whose path sets every field of the request: grpc-gateway
		// reads no query there, so nothing was refused.
		{"/v1/" + cluster1 + "?page_size=-1", http.StatusBadRequest, `page_size: query parameter: GetClusterRequest has no field \"page_size\"`},
		{"/v1/auth:whoami?bogus=1", http.StatusBadRequest, `bogus: query parameter: WhoAmIRequest has no field \"bogus\"`},
		{"/v1/" + cluster1 + "?name=" + project + "/clusters/c2", http.StatusBadRequest, `name: query parameter: the path sets name on this route`},
		{"/v1/" + cluster1, http.StatusOK, ""},
	} {
		code, body := restCall(ctx, t, h.restAs("vic"), h.restBase, http.MethodGet, tc.path, "")
		if code != tc.want || !strings.Contains(body, tc.says) {
			t.Errorf("GET %s: HTTP %d %s, want %d saying %s", tc.path, code, body, tc.want, tc.says)
		}
	}
}

// TestRESTMethodIsTheRequests: a form-encoded POST is not taken as the
// GET of its path, nor as the method an X-HTTP-Method-Override header
// names: a DELETE sent as a POST deletes nothing.
func TestRESTMethodIsTheRequests(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, wait)
	for _, override := range []string{"", "DELETE"} {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.restBase+"/v1/"+cluster1, strings.NewReader(""))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if override != "" {
			req.Header.Set("X-HTTP-Method-Override", override)
		}
		resp, err := h.restAs("pat").Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		// 405 with the methods the path takes (RFC 9110), not 501, which
		// the console reads as "no such API on this gateway".
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, PATCH, DELETE" || !strings.Contains(string(b), "method not allowed") {
			t.Errorf("POST %s as a form, X-HTTP-Method-Override %q: HTTP %d Allow %q %s, want 405 Allow \"GET, PATCH, DELETE\"", cluster1, override, resp.StatusCode, resp.Header.Get("Allow"), b)
		}
	}
	if n := len(testkit.Events(t, h.broker, topics.ClusterCommands)); n != 0 {
		t.Errorf("%d cluster commands written, want none", n)
	}
	// The same on the Vertex paths, served by the other mux.
	jobs := "/v1/projects/default/locations/us-central1/customJobs"
	if code, body := restCall(ctx, t, h.restAs("pat"), h.restBase, http.MethodDelete, jobs, ""); code != http.StatusMethodNotAllowed || !strings.Contains(body, "takes GET, POST") {
		t.Errorf("DELETE %s: HTTP %d %s, want 405 naming GET, POST", jobs, code, body)
	}
}

package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"
)

// restWrites are the REST API's writing endpoints the fuzzer sends bodies
// to: every service's, the authentication's included.
var restWrites = []struct{ verb, path string }{
	{"POST", "/v1/projects/default/jobs"},
	{"POST", "/v1/projects/default/clusters?cluster_id=fz"},
	{"PATCH", "/v1/" + cluster1},
	{"POST", "/v1/projects/default/reservations?reservation_id=fz"},
	{"POST", "/v1/projects/default/jobs/40:update"},
	{"POST", "/v1/projects/default/jobs/40:cancel"},
	{"POST", "/v1/projects/default/jobs/40/steps"},
	{"POST", "/v1/" + cluster1 + "/slurmNodes/gpu-0001:update"},
	{"POST", "/v1/projects/default/members"},
	{"POST", "/v1/projects/default/accounts"},
	{"POST", "/v1/projects/default/associations"},
	{"POST", "/v1/auth:token"},
	{"POST", "/v1/auth:registerNode"},
	{"POST", "/v1/users/-/keys"},
	{"POST", "/v1/projects/default/locations/us-central1/customJobs"},
	{"POST", "/v1/projects/default/locations/us-central1/hyperparameterTuningJobs"},
	{"POST", "/v1/projects/default/locations/us-central1/trainingPipelines"},
	{"POST", "/v1/projects/default/locations/us-central1/customJobs/40:cancel"},
}

// FuzzRESTBodies sends arbitrary bodies to the REST API's writing
// endpoints as a project administrator, through authentication, the
// permission table, the limits and the handlers. Whatever the body, the
// answer is a client error or a success with a JSON body, never a server
// error (5xx, which would be a panic, an unmapped error or a stuck call),
// and the gateway keeps answering. `make test` replays the seeds;
// scripts/fuzz.sh runs it for minutes.
func FuzzRESTBodies(f *testing.F) {
	h := newHarness(f)
	client := h.restAs("pat")
	// A call that does not answer in time is a stuck call: a failure.
	client.Timeout = 10 * time.Second
	for i := range restWrites {
		for _, seed := range []string{``, `{}`, `null`, `[]`, `{"`, `{"cluster":"c1","script":"echo hi"}`,
			`{"compute":{"node_pools":[{"id":"gpu","machine_type":"a2-highgpu-1g","node_count":2000000000}]}}`,
			`{"count":2000000000,"zone":"us-central1-a","machine_type":"a2-highgpu-1g"}`,
			`{"action":"hold","user":"root"}`, `{"user":"root","role":"admin"}`, `{"name":"` + string(make([]byte, 300)) + `"}`,
			`{"array":"0-99999999%1","cluster":"c1","script":"x"}`, `{"env":{"":"x"},"cluster":"c1","command":["true"]}`,
			`{"refresh_token":"x.y.z","oidc_id_token":"a"}`, `{"bootstrap_token":"a.b.c","node":"../x","public_key":"AAAA"}`} {
			f.Add(uint8(i), []byte(seed))
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		e := restWrites[int(which)%len(restWrites)]
		req, err := http.NewRequest(e.verb, h.restBase+e.path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", e.verb, e.path, err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if resp.StatusCode >= 500 {
			t.Fatalf("%s %s with %q: HTTP %d %s", e.verb, e.path, body, resp.StatusCode, out)
		}
		if !json.Valid(out) {
			t.Fatalf("%s %s with %q: HTTP %d, not JSON: %q", e.verb, e.path, body, resp.StatusCode, out)
		}
	})
}

package cli

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/services/gateway"
)

// TestWatchChangesSlurmDrainOnStack: on the embedded stack, an
// administrator's drain (UpdateSlurmNode, what `scontrol update
// NodeName=… State=DRAIN Reason=…` calls) reaches an open watch of
// slurmNodes from the scheduler's SlurmNodeChanged, well before the
// watch's safety-net refresh (gateway.DefaultChangeRefresh) could have
// listed it, and so does the resume.
func TestWatchChangesSlurmDrainOnStack(t *testing.T) {
	t.Parallel()
	s := startTrainingStack(t, 4*time.Minute)
	s.must("clusters", "create", "-f", writeFile(t, "drain.json", `{"name": "drain", "compute": {"nodePools": [
  {"id": "cpu", "machineType": "n2-standard-8", "nodeCount": 1}]}}`))
	const cluster = "projects/default/clusters/drain"
	rest := func(method, path, body string) *http.Response {
		t.Helper()
		req, err := http.NewRequestWithContext(s.ctx, method, "http://"+s.st.RESTAddr+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+s.key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		return resp
	}
	// The scheduler knows the node once the provisioner's NodeChanged
	// reached it.
	var host string
	testkit.WaitFor(t, time.Minute, "the scheduler lists the cluster's node", func() (bool, error) {
		resp := rest(http.MethodGet, "/v1/"+cluster+"/slurmNodes", "")
		defer resp.Body.Close()
		var got struct {
			Nodes []struct {
				Hostname string `json:"hostname"`
			} `json:"nodes"`
		}
		if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&got) != nil || len(got.Nodes) == 0 {
			return false, nil
		}
		host = got.Nodes[0].Hostname
		return true, nil
	})

	lines, synced := openWatch(t, s, "slurmNodes")
	deadline := synced.Add(gateway.DefaultChangeRefresh - 2*time.Second)
	if lim := time.Now().Add(15 * time.Second); lim.Before(deadline) {
		deadline = lim
	}
	update := func(body string) {
		t.Helper()
		resp := rest(http.MethodPost, "/v1/"+cluster+"/slurmNodes/"+host+":update", body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("update %s %s: HTTP %d", host, body, resp.StatusCode)
		}
	}
	name := cluster + "/nodes/" + host
	start := time.Now()
	update(`{"state": "DRAIN", "reason": "bad fan"}`)
	awaitLine(t, lines, deadline, "the drain", func(l watchLine) bool {
		return l.Result.Type == "CHANGED" && l.Result.Collection == "slurmNodes" && l.Result.Name == name &&
			l.Result.SlurmNode != nil && strings.HasPrefix(l.Result.SlurmNode.State, "DRAIN") && l.Result.SlurmNode.Reason == "bad fan"
	})
	t.Logf("a drain showed on the open watch %s after the call", time.Since(start).Round(time.Millisecond))
	start = time.Now()
	update(`{"state": "RESUME"}`)
	awaitLine(t, lines, deadline, "the resume", func(l watchLine) bool {
		return l.Result.Type == "CHANGED" && l.Result.Name == name && l.Result.SlurmNode != nil && l.Result.SlurmNode.State == "IDLE"
	})
	t.Logf("a resume showed on the open watch %s after the call", time.Since(start).Round(time.Millisecond))
}

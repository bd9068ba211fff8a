package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/testkit"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestHealthOverREST drives health through the gateway's REST API on real
// services and agents, as a script or another system would: node health,
// a scan whose disk check fails on the node (the agent's real check) and
// takes it out, a fault injected and a node reported faulty by hand, the
// policy and the cluster's goodput; and the refusals a caller gets — a
// fault of no kind and an unknown check as 400 naming the field, no
// credential as 401.
func TestHealthOverREST(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs a cluster of agent processes; skipped with -short")
	}
	s := startStack(t, inProcess)
	gw := dialGateway(t, s)
	createCluster(t, gw, "hrest", &loomv1.NodePool{Id: "gpu", MachineType: "a3-highgpu-1g",
		NodeCount: 2, AcceleratorType: "nvidia-h100-80gb", AcceleratorCount: 1})
	key, err := s.AdminKey()
	if err != nil {
		t.Fatal(err)
	}
	const base = "/v1/projects/default/clusters/hrest"
	call := func(method, path string, body any, token string) (int, map[string]any) {
		t.Helper()
		var rd io.Reader
		if body != nil {
			b, err := json.Marshal(body)
			if err != nil {
				t.Fatal(err)
			}
			rd = bytes.NewReader(b)
		}
		req, err := http.NewRequestWithContext(waitCtx(t, 10*time.Second), method, "http://"+s.RESTAddr+path, rd)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		out := map[string]any{}
		b, _ := io.ReadAll(resp.Body)
		_ = json.Unmarshal(b, &out)
		return resp.StatusCode, out
	}
	nodeState := func(host string) (state, reason string) {
		code, out := call(http.MethodGet, base+"/nodeHealth", nil, key)
		if code != http.StatusOK {
			return "", ""
		}
		nodes, _ := out["nodes"].([]any)
		for _, n := range nodes {
			m, _ := n.(map[string]any)
			if m["hostname"] == host {
				st, _ := m["state"].(string)
				r, _ := m["reason"].(string)
				return st, r
			}
		}
		return "", ""
	}
	testkit.WaitFor(t, 30*time.Second, "both nodes HEALTHY over REST", func() (bool, error) {
		a, _ := nodeState("gpu-0001")
		b, _ := nodeState("gpu-0002")
		return a == "NODE_HEALTHY" && b == "NODE_HEALTHY", nil
	})

	// A scan whose disk check asks for more free space than any disk has.
	code, out := call(http.MethodPost, base+"/health:scan", map[string]any{"hostnames": []string{"gpu-0001"}, "checks": []string{"disk"},
		"params": map[string]string{"min_free_gb": "1000000000"}}, key)
	scanID, _ := out["scan_id"].(string)
	if code != http.StatusOK || scanID == "" {
		t.Fatalf("scan: %d %v", code, out)
	}
	testkit.WaitFor(t, 60*time.Second, "the scan's disk result FAIL", func() (bool, error) {
		code, out := call(http.MethodGet, base+"/healthResults?scan_id="+scanID, nil, key)
		res, _ := out["results"].([]any)
		if code != http.StatusOK || len(res) == 0 {
			return false, nil
		}
		r, _ := res[0].(map[string]any)
		return r["outcome"] == "CHECK_FAIL" && r["hostname"] == "gpu-0001" && r["check"] == "disk", nil
	})
	testkit.WaitFor(t, 60*time.Second, "gpu-0001 taken out for its disk", func() (bool, error) {
		st, reason := nodeState("gpu-0001")
		return st != "" && st != "NODE_HEALTHY" && strings.Contains(reason, "disk"), nil
	})

	// By hand: a node reported faulty, with the operator's reason.
	if code, out := call(http.MethodPost, base+":reportFaultyNodes", map[string]any{"hostnames": []string{"gpu-0002"}, "reason": "flaky NIC"}, key); code != http.StatusOK {
		t.Fatalf("reportFaultyNodes: %d %v", code, out)
	}
	testkit.WaitFor(t, 60*time.Second, "gpu-0002 taken out as reported", func() (bool, error) {
		st, reason := nodeState("gpu-0002")
		return st != "" && st != "NODE_HEALTHY" && strings.Contains(reason, "flaky NIC"), nil
	})
	// A fault injected (an application Xid) is accepted; a fault of no
	// kind is refused, naming the field.
	if code, out := call(http.MethodPost, base+"/nodes/gpu-0002:injectFault", map[string]any{"fault": map[string]any{"kind": "FAULT_XID", "gpu": 0, "xid": 13}}, key); code != http.StatusOK {
		t.Errorf("injectFault: %d %v", code, out)
	}
	if code, out := call(http.MethodPost, base+"/nodes/gpu-0002:injectFault", map[string]any{"fault": map[string]any{"gpu": 0}}, key); code != http.StatusBadRequest ||
		!strings.Contains(fmt.Sprint(out["message"]), "fault.kind") {
		t.Errorf("a fault of no kind: %d %v", code, out)
	}
	if code, out := call(http.MethodPost, base+"/health:scan", map[string]any{"checks": []string{"../../bin/sh"}}, key); code != http.StatusBadRequest ||
		!strings.Contains(fmt.Sprint(out["message"]), "checks") {
		t.Errorf("a scan of an unknown check: %d %v", code, out)
	}
	// The policy and the cluster's goodput read back.
	if code, out := call(http.MethodGet, base+"/healthPolicy", nil, key); code != http.StatusOK || out["remediation"] != "on" {
		t.Errorf("healthPolicy: %d %v", code, out)
	}
	if code, out := call(http.MethodGet, base+":goodput", nil, key); code != http.StatusOK {
		t.Errorf("goodput: %d %v", code, out)
	}
	// No credential, no answer.
	if code, _ := call(http.MethodGet, base+"/nodeHealth", nil, ""); code != http.StatusUnauthorized {
		t.Errorf("nodeHealth without a credential: %d, want 401", code)
	}
}

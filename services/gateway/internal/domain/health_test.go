package domain

import (
	"math"
	"strings"
	"testing"

	"github.com/loom-ml/loom/libs/errs"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestExpandHostnames: hostlists expand in order without duplicates; a
// list past MaxHosts is refused naming the entry and the limit, before
// it is held in memory.
func TestExpandHostnames(t *testing.T) {
	t.Parallel()
	var v errs.Validator
	got := ExpandHostnames(&v, "hostnames", []string{"gpu-[0002-0003]", "gpu-0001", "gpu-0002"})
	if v.Err() != nil || strings.Join(got, ",") != "gpu-0002,gpu-0003,gpu-0001" {
		t.Errorf("got %v, %v", got, v.Err())
	}
	var big errs.Validator
	if got := ExpandHostnames(&big, "hostnames", []string{"n[1-5000]"}); got != nil ||
		big.Err() == nil || !strings.Contains(big.Err().Error(), "hostnames[0]: names more than the limit of 4096 nodes") {
		t.Errorf("5000 nodes: %v, %v", got, big.Err())
	}
	// The limit is of the names the entries give, duplicates counted: a
	// request repeating a 4,096-node list 4,096 times (49 KB) is refused
	// at its second entry, not after building 16.7 million names.
	var ok errs.Validator
	if got := ExpandHostnames(&ok, "hostnames", []string{"n[0000-2047]", "n[2048-4095]"}); ok.Err() != nil || len(got) != 4096 {
		t.Errorf("4,096 nodes in two entries: %d, %v", len(got), ok.Err())
	}
	repeated := make([]string, 4096)
	for i := range repeated {
		repeated[i] = "n[0000-4095]"
	}
	var dup errs.Validator
	if got := ExpandHostnames(&dup, "hostnames", repeated); got != nil || dup.Err() == nil ||
		!strings.Contains(dup.Err().Error(), "hostnames[1]: names more than the limit of 4096 nodes (with the entries before it, duplicates counted)") {
		t.Errorf("4,096 copies of a 4,096-node list: %d names, %v", len(got), dup.Err())
	}
}

// TestValidateInjectFaultBounds: the fault's bounds at their edges.
func TestValidateInjectFaultBounds(t *testing.T) {
	t.Parallel()
	req := func(f *loomv1.Fault) *loomv1.InjectFaultRequest {
		return &loomv1.InjectFaultRequest{Cluster: "projects/p/clusters/c", Hostname: "gpu-0001", Fault: f}
	}
	xid := loomv1.FaultKind_FAULT_XID
	for _, c := range []struct {
		f    *loomv1.Fault
		want string // "" for accepted
	}{
		{&loomv1.Fault{Kind: xid, Gpu: 7, Xid: 999}, ""},
		{&loomv1.Fault{Kind: xid, Gpu: -1, Xid: 1}, ""},
		{&loomv1.Fault{Kind: xid, Gpu: 8, Xid: 79}, "fault.gpu: 8 is not below the node's GPU count, 8"},
		{&loomv1.Fault{Kind: xid, Gpu: 0, Xid: 1000}, "fault.xid: 1000 is outside 1 to 999"},
		{&loomv1.Fault{Kind: loomv1.FaultKind_FAULT_THERMAL, Gpu: 0, Xid: 79}, "fault.xid: 79: only FAULT_XID takes an Xid"},
		{&loomv1.Fault{Kind: loomv1.FaultKind_FAULT_NVLINK, Gpu: 0, Value: 1e6}, ""},
		{&loomv1.Fault{Kind: loomv1.FaultKind_FAULT_NVLINK, Gpu: 0, Value: math.Nextafter(1e6, 2e6)}, "fault.value"},
		{&loomv1.Fault{Kind: loomv1.FaultKind_FAULT_NVLINK, Gpu: 0, Value: -1}, "fault.value: -1 is outside 0 to 1e+06"},
		{&loomv1.Fault{Kind: loomv1.FaultKind_FAULT_NVLINK, Gpu: 0, Value: math.Inf(-1)}, "fault.value: -Inf is not a finite number"},
		{&loomv1.Fault{Kind: loomv1.FaultKind_FAULT_SLOW_GPU, Gpu: 0, Value: 1000}, ""},
		{&loomv1.Fault{Kind: loomv1.FaultKind_FAULT_SLOW_GPU, Gpu: 0, Value: 1001}, "fault.value"},
		{&loomv1.Fault{Kind: loomv1.FaultKind_FAULT_ECC_DBE, Gpu: 0, Value: 1.5}, "a count of errors"},
		{&loomv1.Fault{Kind: loomv1.FaultKind_FAULT_THERMAL, Gpu: 0, Value: 10}, ""},
		{&loomv1.Fault{Kind: loomv1.FaultKind_FAULT_THERMAL, Gpu: 0, Value: 10.5}, "fault.value: 10.5: FAULT_THERMAL's rise is at most 10 °C per second"},
		{&loomv1.Fault{Kind: loomv1.FaultKind_FAULT_NO_HEARTBEAT, Gpu: -1, Value: 86400}, ""},
		{&loomv1.Fault{Kind: loomv1.FaultKind(99), Gpu: 0}, "fault.kind: 99 is not a fault kind"},
	} {
		err := ValidateInjectFault(req(c.f), 8)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: refused: %v", c.f, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v: %v, want %q", c.f, err, c.want)
		}
	}
}

// TestValidateScanParams: the parameters' bounds at their edges, and each
// built-in check's parameter refused as the agent would refuse it (a
// CHECK_ERROR on every node scanned), accepted as the agent takes it.
func TestValidateScanParams(t *testing.T) {
	t.Parallel()
	sixteen := map[string]string{}
	for i := range 16 {
		sixteen[strings.Repeat("k", i+1)] = strings.Repeat("v", 256)
	}
	for _, c := range []struct {
		params map[string]string
		want   string // "" for accepted
	}{
		{sixteen, ""},
		{map[string]string{strings.Repeat("k", 64): "1", "a_0": "x"}, ""},
		{map[string]string{"site": "bad\xffutf8"}, `params[site]: "bad\xffutf8" is not valid UTF-8`},
		{map[string]string{"site": "tab\there"}, "params[site]: \"tab\\there\" holds the control character U+0009"},
		{map[string]string{"site": "rtl\u202eoverride"}, "U+202E"},
		{map[string]string{"a.b": "1"}, "params[a.b]: \"a.b\" is not a parameter name"},
		{map[string]string{"iters": " "}, ""}, // spaces: the check's default, as the agent reads it
		{map[string]string{"stress": "90s", "memory_mib": "1024", "dcgmi": "off"}, ""},
		{map[string]string{"stress": "0s"}, "params[stress]: \"0s\": want a duration above 0"},
		{map[string]string{"stress": "2h"}, "longer than the limit of 1h0m0s"},
		{map[string]string{"memory_mib": "1025"}, "params[memory_mib]: \"1025\": want a whole number from 1 to 1024"},
		{map[string]string{"dcgmi": "auto"}, ""},
		{map[string]string{"paths": "/, /scratch ,"}, ""},
		{map[string]string{"paths": "/,scratch"}, `params[paths]: "/,scratch": "scratch" is not an absolute path`},
		{map[string]string{"min_free_gb": "0.5", "max_used_percent": "100", "warn_used_percent": "0"}, ""},
		{map[string]string{"max_used_percent": "101"}, "params[max_used_percent]: \"101\": want a number from 0 to 100"},
		{map[string]string{"min_free_gb": "NaN"}, "params[min_free_gb]: \"NaN\": want a finite number"},
		{map[string]string{"products": "1000000", "min_throughput": "12.5"}, ""},
		{map[string]string{"products": "0"}, "want a whole number from 1 to 1000000"},
		{map[string]string{"min_throughput": "-1"}, "want a number from 0 up"},
		{map[string]string{"sizes": "256k, 1M,1G", "iters": "1000", "min_busbw_gbps": "40"}, ""},
		{map[string]string{"sizes": "2G"}, `size "2G"`},
		{map[string]string{"sizes": "k"}, `size "k"`},
		{map[string]string{"sizes": ","}, "no sizes"},
		{map[string]string{"iters": "1001"}, "want a whole number from 1 to 1000"},
		{map[string]string{"ring": ""}, "params[ring]: \"\": set by health"},
	} {
		_, _, err := ValidateScanNodes(&loomv1.ScanNodesRequest{Cluster: "projects/p/clusters/c", Params: c.params})
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%q: refused: %v", c.params, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%q: %v, want %q", c.params, err, c.want)
		}
	}
	sixteen["one_more"] = "x"
	if _, _, err := ValidateScanNodes(&loomv1.ScanNodesRequest{Cluster: "projects/p/clusters/c", Params: sixteen}); err == nil ||
		!strings.Contains(err.Error(), "params: 17 parameters, more than the limit of 16") {
		t.Errorf("17 params: %v", err)
	}
}

// TestCheckHealthNodes: a health command may name only the cluster's
// compute nodes: an unknown host and the login node are each refused by
// their entry (health would drop the whole command for one of them).
func TestCheckHealthNodes(t *testing.T) {
	t.Parallel()
	nodes := map[string]*loomv1.Node{
		"gpu-0001":     {Hostname: "gpu-0001"},
		"c1-login-001": {Hostname: "c1-login-001", Role: "login"},
	}
	const c = "projects/p/clusters/c1"
	if err := CheckHealthNodes(nodes, c, "hostnames", []string{"gpu-0001"}); err != nil {
		t.Errorf("a compute node: %v", err)
	}
	err := CheckHealthNodes(nodes, c, "hostnames", []string{"gpu-0001", "c1-login-001", "gpu-0009"})
	for _, want := range []string{`hostnames[1]: "c1-login-001" is the login node of c1: health checks and repairs only compute nodes`,
		`hostnames[2]: "gpu-0009" is not a node of ` + c} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want it to say %q", err, want)
		}
	}
}

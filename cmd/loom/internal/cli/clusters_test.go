package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/cmd/loom/internal/fakegw"
	"github.com/loom-ml/loom/cmd/loom/internal/slurmcli"
	"github.com/loom-ml/loom/libs/testkit"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

func TestClustersDescribe(t *testing.T) {
	t.Parallel()
	_, gw := newFakeGateway(t)
	out, errOut, code := run(t, gw, "clusters", "describe", "a3u")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	golden(t, out, `
Name:         projects/default/clusters/a3u
Description:  two partitions
State:        RUNNING (Degraded: NodesFailing)
Nodes:        5 of 6 ready
Network:      a3u-net, zone us-central1-a, MTU 8896
Home:         /data/a3u/home (ZONAL 1024 GiB, mounted at /home)
Scratch:      /data/a3u/scratch (2048 GiB at 1000 MB/s per TiB, mounted at /scratch)
Login node:   a3u-login-001 (1 × n2-standard-8)
Created:      2h ago
Updated:      1m ago

Node pools:
  ID    MACHINE TYPE    GPUS/NODE              CAPACITY        ZONE           TARGET  READY  PROVISIONING  FAILED  DRAINING
  a3u   a3-ultragpu-8g  8 × nvidia-h200-141gb  RESERVATION r1  us-central1-a  4       4      0             0       0
  spot  a3-ultragpu-8g  8 × nvidia-h200-141gb  SPOT            us-central1-b  2       1      0             1       0

Partitions:
  ID       NODE SETS  NODES             MAX TIME   DEFAULT  PRIORITY TIER
  train    a3u        a3u-[0001-0004]   UNLIMITED  yes      10
  preempt  spot       spot-[0001-0003]  4:00:00    no       0

Conditions:
  TYPE      STATUS  REASON        CHANGED  MESSAGE
  Ready     False   NodesFailing  1m ago   5 of 6 nodes ready
  Degraded  True    NodesFailing  1m ago   spot-0002: preempted by provider

Nodes not ready (2):
  NODE       POOL  STATE         AGE  REASON                 NEXT ACTION
  spot-0003  spot  PROVISIONING  1m   -                      retry launch in 4s (attempt 2 of 5)
  spot-0002  spot  FAILED        1h   preempted by provider  replace when SPOT capacity returns
`)

	// JSON: the cluster and its nodes, each in protojson.
	out, errOut, code = run(t, gw, "clusters", "describe", "a3u", "-o", "json")
	if code != 0 {
		t.Fatalf("json: exit %d: %s", code, errOut)
	}
	var got struct {
		Cluster json.RawMessage   `json:"cluster"`
		Nodes   []json.RawMessage `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("describe -o json: %v\n%s", err, out)
	}
	var c loomv1.Cluster
	if err := protojson.Unmarshal(got.Cluster, &c); err != nil || !proto.Equal(&c, a3uCluster()) {
		t.Fatalf("describe -o json cluster = %v (%v)", &c, err)
	}
	if len(got.Nodes) != len(a3uNodes()) {
		t.Fatalf("describe -o json: %d nodes, want %d", len(got.Nodes), len(a3uNodes()))
	}
}

func TestClustersDescribeCapsNodesNotReady(t *testing.T) {
	t.Parallel()
	f, gw := newFakeGateway(t)
	for i := 0; i < maxNotReady+3; i++ {
		h := fmt.Sprintf("gpu-%04d", 100+i)
		f.Nodes = append(f.Nodes, &loomv1.Node{Cluster: "projects/default/clusters/demo", NodePool: "gpu", Hostname: h,
			State: loomv1.Node_PROVISIONING, CreateTime: ts(0)})
	}
	out, errOut, code := run(t, gw, "clusters", "describe", "demo")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "Nodes not ready (14):") || !strings.Contains(out, "  ... and 4 more: `loom nodes list --cluster demo`\n") {
		t.Fatalf("describe does not cap the nodes not ready:\n%s", out)
	}
}

func TestUpdateMask(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		change func(*loomv1.Cluster)
		want   []string
		err    string
	}{
		{"nothing", func(*loomv1.Cluster) {}, nil, ""},
		{"status and times are not spec", func(c *loomv1.Cluster) { c.Status, c.CreateTime = nil, nil }, nil, ""},
		{"resize", func(c *loomv1.Cluster) { c.Compute.NodePools[1].NodeCount = 3 }, []string{"compute.node_pools"}, ""},
		{"new pool", func(c *loomv1.Cluster) {
			c.Compute.NodePools = append(c.Compute.NodePools, &loomv1.NodePool{Id: "cpu", MachineType: "n2-standard-8", NodeCount: 1})
		}, []string{"compute.node_pools"}, ""},
		{"partition and labels", func(c *loomv1.Cluster) {
			c.Labels = map[string]string{"team": "llm"}
			c.Orchestrator.Slurm.Partitions[1].MaxTime = "8:00:00"
		}, []string{"labels", "orchestrator.slurm.partitions"}, ""},
		// Left out, as network and storage: unchanged (the API's empty
		// mask reads it so); taking it as none ended every job of the
		// cluster's partitions.
		{"no orchestrator in the file leaves it", func(c *loomv1.Cluster) { c.Orchestrator = nil }, nil, ""},
		{"an empty orchestrator in the file asks for the generated one", func(c *loomv1.Cluster) { c.Orchestrator = &loomv1.Orchestrator{} },
			[]string{"orchestrator.slurm.login_nodes", "orchestrator.slurm.partitions"}, ""}, // node sets: the generated ones are a3u's
		{"network left out is not a change", func(c *loomv1.Cluster) { c.Network, c.Storage = nil, nil }, nil, ""},
		{"network changed", func(c *loomv1.Cluster) { c.Network.Mtu = 1500; c.Storage.Home.CapacityGib = 2048 }, nil,
			"network and storage cannot be changed on an existing cluster"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cur := a3uCluster()
			want := a3uCluster()
			tc.change(want)
			_, mask, err := updateMask(cur, want)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || !slices.Equal(mask, tc.want) {
				t.Fatalf("mask %v (%v), want %v", mask, err, tc.want)
			}
		})
	}
}

// clusterFile writes c as a cluster file, the way `get -o json` prints it.
func clusterFile(t *testing.T, c *loomv1.Cluster) string {
	t.Helper()
	var b strings.Builder
	if err := writeJSON(&b, c); err != nil {
		t.Fatal(err)
	}
	return writeFile(t, "cluster.json", b.String())
}

func TestClustersUpdate(t *testing.T) {
	t.Parallel()
	f, gw := newFakeGateway(t)
	c := a3uCluster()
	c.Compute.NodePools[0].NodeCount = 3
	c.Compute.NodePools = append(c.Compute.NodePools, &loomv1.NodePool{Id: "cpu", MachineType: "n2-standard-8", NodeCount: 1})
	file := clusterFile(t, c)
	out, errOut, code := run(t, gw, "clusters", "update", "a3u", "-f", file, "--drain-grace", "90s")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if lines[0] != "Updating cluster a3u: compute.node_pools (pool a3u 4 → 3 nodes, new pool cpu (1 node)) (operation op3)" ||
		!strings.HasPrefix(lines[len(lines)-1], "Cluster a3u is RUNNING: 2 of 2 nodes ready (") {
		t.Fatalf("output:\n%s", out)
	}
	req, ok := fakegw.LastRequest[*loomv1.UpdateClusterRequest](f)
	if !ok {
		t.Fatal("no UpdateCluster request")
	}
	if req.GetCluster().GetName() != "projects/default/clusters/a3u" || req.GetCluster().GetStatus() != nil ||
		!slices.Equal(req.GetUpdateMask().GetPaths(), []string{"compute.node_pools"}) ||
		req.GetDrainGraceSeconds() != 90 || req.GetRequestId() == "" || len(req.GetCluster().GetCompute().GetNodePools()) != 3 {
		t.Fatalf("UpdateCluster request = %v", req)
	}

	// The cluster as it is: nothing to send.
	out, _, code = run(t, gw, "clusters", "update", "a3u", "-f", clusterFile(t, a3uCluster()))
	if code != 0 || !strings.Contains(out, "Cluster a3u already matches") {
		t.Fatalf("unchanged: exit %d, %q", code, out)
	}

	// A file that names another cluster, a fixed field changed, a negative grace.
	other := a3uCluster()
	other.Name = "demo"
	fixed := a3uCluster()
	fixed.Network.Zone = "europe-west4-a"
	for _, bad := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"clusters", "update", "a3u", "-f", clusterFile(t, other)}, 2, `names cluster "demo", but the command updates "a3u"`},
		{[]string{"clusters", "update", "a3u", "-f", clusterFile(t, fixed)}, 2, "network cannot be changed on an existing cluster"},
		{[]string{"clusters", "update", "a3u", "-f", file, "--drain-grace", "-1s"}, 2, "--drain-grace must not be negative"},
		{[]string{"clusters", "update", "a3u"}, 2, "give the new spec with -f FILE"},
		{[]string{"clusters", "update", "ghost", "-f", clusterFile(t, &loomv1.Cluster{DisplayName: "x"})}, 1, "not found (see `loom clusters list`)"},
	} {
		_, errOut, code := run(t, gw, bad.args...)
		if code != bad.code || !strings.Contains(errOut, bad.want) {
			t.Errorf("%v: exit %d, %q; want exit %d and %q", bad.args, code, errOut, bad.code, bad.want)
		}
	}
}

func TestClustersResize(t *testing.T) {
	t.Parallel()
	f, gw := newFakeGateway(t)
	out, errOut, code := run(t, gw, "clusters", "resize", "a3u", "spot", "1", "--drain-grace", "5m")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.HasPrefix(out, "Resizing pool spot of cluster a3u from 2 to 1 node; the removed nodes drain first (operation op3)\n") {
		t.Fatalf("output:\n%s", out)
	}
	req, _ := fakegw.LastRequest[*loomv1.UpdateClusterRequest](f)
	want := a3uCluster()
	want.Status, want.CreateTime, want.UpdateTime = nil, nil, nil
	want.Compute.NodePools[1].NodeCount = 1
	if !proto.Equal(req.GetCluster(), want) || !slices.Equal(req.GetUpdateMask().GetPaths(), []string{"compute.node_pools"}) ||
		req.GetDrainGraceSeconds() != 300 {
		t.Fatalf("UpdateCluster request = %v", req)
	}

	out, _, code = run(t, gw, "clusters", "resize", "a3u", "a3u", "4")
	if code != 0 || out != "Pool a3u of cluster a3u already has 4 nodes; nothing to do.\n" {
		t.Fatalf("same size: exit %d, %q", code, out)
	}
	for _, bad := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"clusters", "resize", "a3u", "gpu", "5"}, 1, `cluster a3u has no node pool "gpu"; its pools are a3u, spot`},
		{[]string{"clusters", "resize", "a3u", "spot", "--", "-1"}, 2, "N must be a node count"},
		{[]string{"clusters", "resize", "a3u", "spot", "many"}, 2, "N must be a node count"},
		{[]string{"clusters", "resize", "a3u", "spot"}, 2, "give the cluster, the node pool and the new node count"},
	} {
		_, errOut, code := run(t, gw, bad.args...)
		if code != bad.code || !strings.Contains(errOut, bad.want) {
			t.Errorf("%v: exit %d, %q; want exit %d and %q", bad.args, code, errOut, bad.code, bad.want)
		}
	}
}

func TestClustersSlurmConf(t *testing.T) {
	t.Parallel()
	f, gw := newFakeGateway(t)
	out, errOut, code := run(t, gw, "clusters", "slurm-conf", "a3u")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	golden(t, out, `
==> slurm.conf <==
ClusterName=a3u
NodeName=a3u-[0001-0004] Gres=gpu:8

==> gres.conf <==
NodeName=a3u-[0001-0004] Name=gpu Count=8

==> topology.conf <==
BlockName=block-01 Nodes=a3u-[0001-0004]
`)
	if req, _ := fakegw.LastRequest[*loomv1.GetSlurmConfigRequest](f); req.GetName() != "projects/default/clusters/a3u" {
		t.Fatalf("GetSlurmConfig request = %v", req)
	}
	out, _, code = run(t, gw, "clusters", "slurm-conf", "a3u", "--file", "gres")
	if code != 0 || out != f.SlurmConfigs[a3uName].GetGresConf() {
		t.Fatalf("--file gres: exit %d, %q", code, out)
	}
	out, _, code = run(t, gw, "clusters", "slurm-conf", "a3u", "--file", "topology.conf")
	if code != 0 || out != f.SlurmConfigs[a3uName].GetTopologyConf()+"\n" {
		t.Fatalf("--file topology.conf: exit %d, %q", code, out)
	}
	out, _, code = run(t, gw, "clusters", "slurm-conf", "a3u", "-o", "json")
	var sc loomv1.SlurmConfig
	if code != 0 || protojson.Unmarshal([]byte(out), &sc) != nil || !proto.Equal(&sc, f.SlurmConfigs[a3uName]) {
		t.Fatalf("-o json: exit %d, %q", code, out)
	}
	if _, errOut, code := run(t, gw, "clusters", "slurm-conf", "a3u", "--file", "cgroup"); code != 2 || !strings.Contains(errOut, "--file must be one of slurm, gres, topology") {
		t.Fatalf("--file cgroup: exit %d, %q", code, errOut)
	}
}

func TestProgressBar(t *testing.T) {
	t.Parallel()
	for msg, want := range map[string]string{
		"12 of 16 nodes ready":             "[██████████████████░░░░░░] 12/16 nodes ready",
		"0 of 2 nodes ready":               "[░░░░░░░░░░░░░░░░░░░░░░░░] 0/2 nodes ready",
		"pool gpu: 5 of 5 nodes at target": "pool gpu: [████████████████████████] 5/5 nodes at target",
		"stopping 2 nodes":                 "stopping 2 nodes",
		"7 of 0":                           "[░░░░░░░░░░░░░░░░░░░░░░░░] 7/0",
	} {
		if got := progressLine(msg); got != want {
			t.Errorf("progressLine(%q) = %q, want %q", msg, got, want)
		}
	}

	// On a terminal the line is redrawn in place and ended before the result.
	_, gw := newFakeGateway(t)
	file := writeFile(t, "c.json", `{"name": "demo", "compute": {"nodePools": [{"id": "cpu", "nodeCount": 2}]}}`)
	out, errOut, code := runWith(t, gw, func(a *app) { a.tty = func(io.Writer) bool { return true } }, "clusters", "create", "-f", file)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := "Creating cluster demo (operation op1)\n" +
		"\r\x1b[K  [░░░░░░░░░░░░░░░░░░░░░░░░] 0/2 nodes ready" +
		"\r\x1b[K  [████████████░░░░░░░░░░░░] 1/2 nodes ready" +
		"\r\x1b[K  [████████████████████████] 2/2 nodes ready\n" +
		"Cluster demo is RUNNING: 2 of 2 nodes ready ("
	if !strings.HasPrefix(out, want) {
		t.Fatalf("terminal output %q\nwant prefix     %q", out, want)
	}
}

func TestReservationsAndCapacity(t *testing.T) {
	t.Parallel()
	f, gw := newFakeGateway(t)
	out, errOut, code := run(t, gw, "reservations", "create", "r2", "--zone", "us-east5-a", "--machine-type", "a4-highgpu-8g", "--count", "2")
	if code != 0 {
		t.Fatalf("create: exit %d: %s", code, errOut)
	}
	if !strings.HasPrefix(out, "Reserving 2 × a4-highgpu-8g in us-east5-a as r2 (operation op4)\nReservation r2 holds 2 × a4-highgpu-8g in us-east5-a (") {
		t.Fatalf("create output:\n%s", out)
	}
	req, _ := fakegw.LastRequest[*loomv1.CreateReservationRequest](f)
	if req.GetParent() != "projects/default" || req.GetReservationId() != "r2" || req.GetRequestId() == "" ||
		!proto.Equal(req.GetReservation(), &loomv1.Reservation{Zone: "us-east5-a", MachineType: "a4-highgpu-8g", Count: 2}) {
		t.Fatalf("CreateReservation request = %v", req)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"reservations", "list"}, `
NAME  ZONE           MACHINE TYPE    IN USE / TOTAL  CONSUMERS  AGE
r1    us-central1-a  a3-ultragpu-8g  4 / 8           a3u        2h
`},
		{[]string{"reservations", "get", "r1"}, `
NAME  ZONE           MACHINE TYPE    IN USE / TOTAL  CONSUMERS  AGE
r1    us-central1-a  a3-ultragpu-8g  4 / 8           a3u        2h
`},
		{[]string{"capacity"}, `
ZONE           MACHINE TYPE    TYPE         RESERVATION  TOTAL  IN USE  FREE
us-central1-a  a3-ultragpu-8g  RESERVATION  r1           8      4       4
us-central1-a  a3-ultragpu-8g  SPOT         -            64     2       62
`},
	} {
		out, errOut, code := run(t, gw, c.args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", c.args, code, errOut)
		}
		golden(t, out, c.want)
	}
	out, _, code = run(t, gw, "capacity", "-o", "json")
	var capResp loomv1.ListCapacityResponse
	if code != 0 || protojson.Unmarshal([]byte(out), &capResp) != nil || len(capResp.GetPools()) != 2 {
		t.Fatalf("capacity -o json: exit %d, %q", code, out)
	}
	out, _, code = run(t, gw, "reservations", "list", "-o", "json")
	var listResp loomv1.ListReservationsResponse
	if code != 0 || protojson.Unmarshal([]byte(out), &listResp) != nil || !proto.Equal(listResp.GetReservations()[0], f.Reservations[0]) {
		t.Fatalf("reservations list -o json: exit %d, %q", code, out)
	}

	out, errOut, code = run(t, gw, "reservations", "delete", "r3")
	if code != 0 || !strings.Contains(out, "Reservation r3 deleted (") {
		t.Fatalf("delete: exit %d, %q %q", code, out, errOut)
	}
	if req, _ := fakegw.LastRequest[*loomv1.DeleteReservationRequest](f); req.GetName() != "projects/default/reservations/r3" {
		t.Fatalf("DeleteReservation request = %v", req)
	}
	for _, bad := range []struct {
		args []string
		code int
		want string
	}{
		// The kind is said once, before the message, not again after it.
		{[]string{"reservations", "delete", "r1"}, 1, "delete reservation r1: FailedPrecondition: reservation r1 is in use by cluster a3u\n"},
		{[]string{"reservations", "get", "r9"}, 1, "not found (see `loom reservations list`)"},
		{[]string{"reservations", "create", "r2", "--count", "2"}, 2, "--zone and --machine-type are required"},
		{[]string{"reservations", "create", "r2", "--zone", "z", "--machine-type", "m"}, 2, "--count must be at least 1"},
	} {
		_, errOut, code := run(t, gw, bad.args...)
		if code != bad.code || !strings.Contains(errOut, bad.want) {
			t.Errorf("%v: exit %d, %q; want exit %d and %q", bad.args, code, errOut, bad.code, bad.want)
		}
	}
}

func TestArgsDispatchesSlurmNames(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		argv0 string
		args  []string
		want  []string
	}{
		{"/tmp/loom-login-1/sbatch", []string{"--wrap", "true"}, []string{"slurm", "sbatch", "--wrap", "true"}},
		{"squeue", nil, []string{"slurm", "squeue"}},
		{"/tmp/loom-login-1/sshare", []string{"-a"}, []string{"slurm", "sshare", "-a"}},
		{"/tmp/loom-login-1/salloc", []string{"-N2"}, []string{"slurm", "salloc", "-N2"}},
		{"/usr/local/bin/loom", []string{"clusters", "list"}, []string{"clusters", "list"}},
		{"./sbatch-wrapper", []string{"x"}, []string{"x"}},
	} {
		if got := Args(c.argv0, c.args); !slices.Equal(got, c.want) {
			t.Errorf("Args(%q, %q) = %q, want %q", c.argv0, c.args, got, c.want)
		}
	}
	if !slices.Equal(SlurmCommands, slurmcli.Commands) {
		t.Errorf("SlurmCommands %q differ from the commands slurmcli runs %q", SlurmCommands, slurmcli.Commands)
	}
	// A Slurm command Loom does not provide says what to use instead,
	// with its own options untouched, asking no gateway.
	if _, errOut, code := run(t, "127.0.0.1:1", "slurm", "sreport", "-j", "12"); code != 1 ||
		errOut != "sreport: error: Loom does not provide sreport; "+slurmcli.Unsupported["sreport"]+" (docs/slurm.md)\n" {
		t.Errorf("loom slurm sreport: exit %d, %q", code, errOut)
	}
}

// slurmInvocation takes `loom [FLAGS] slurm [FLAGS] NAME ARGS...` apart and
// leaves everything else to cobra.
func TestSlurmInvocation(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args  []string
		ok    bool
		flags map[string]string
		name  string
		rest  []string
	}{
		{[]string{"slurm", "squeue", "-o", "%i", "--gateway", "x"}, true, map[string]string{}, "squeue", []string{"-o", "%i", "--gateway", "x"}},
		{[]string{"--gateway=h:1", "-ojson", "slurm", "--project", "p", "sbatch", "job.sh"}, true,
			map[string]string{"gateway": "h:1", "output": "json", "project": "p"}, "sbatch", []string{"job.sh"}},
		{[]string{"-o", "table", "slurm", "sinfo"}, true, map[string]string{"output": "table"}, "sinfo", []string{}},
		{[]string{"slurm"}, false, nil, "", nil},
		{[]string{"slurm", "--help"}, false, nil, "", nil},
		{[]string{"slurm", "bogus"}, false, nil, "", nil},
		{[]string{"--gateway"}, false, nil, "", nil},
		{[]string{"--verbose", "slurm", "squeue"}, false, nil, "", nil},
		{[]string{"jobs", "list"}, false, nil, "", nil},
		{[]string{"help", "slurm"}, false, nil, "", nil},
	} {
		flags, name, rest, ok := slurmInvocation(c.args)
		if ok != c.ok || name != c.name || fmt.Sprint(flags) != fmt.Sprint(c.flags) || (ok && !slices.Equal(rest, c.rest)) {
			t.Errorf("slurmInvocation(%q) = %v %q %q %v; want %v %q %q %v", c.args, flags, name, rest, ok, c.flags, c.name, c.rest, c.ok)
		}
	}
}

// TestSlurmCommandsReachTheGateway runs `loom slurm NAME` with loom's global
// flags in each place they may stand: the Slurm options after NAME are
// Slurm's (squeue's -o is its format, not loom's --output).
func TestSlurmCommandsReachTheGateway(t *testing.T) {
	t.Parallel()
	f, gw := newFakeGateway(t)
	for _, args := range [][]string{
		{"slurm", "squeue", "-h", "-o", "%i %T", "-M", "demo"},
		{"-o", "json", "slurm", "squeue", "-h", "-o", "%i %T", "-M", "demo"},
		{"slurm", "--project=default", "squeue", "-h", "-o", "%i %T", "-M", "demo"},
	} {
		out, errOut, code := run(t, gw, args...)
		if code != 0 || out != "9 PENDING\n7 RUNNING\n" || errOut != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
		req, _ := fakegw.LastRequest[*loomv1.ListJobsRequest](f)
		if req.GetParent() != "projects/default" || req.GetCluster() != "projects/default/clusters/demo" || !req.GetActiveOnly() {
			t.Errorf("%q: ListJobs request %v", args, req)
		}
	}
	// --project reaches the command (the fake has no cluster in "other").
	_, errOut, code := run(t, gw, "--project", "other", "slurm", "sinfo")
	if code != 1 || !strings.Contains(errOut, `project "other" has no cluster`) {
		t.Errorf("--project other: exit %d, %q", code, errOut)
	}
	if _, errOut, code := run(t, gw, "--project", "a/b", "slurm", "sinfo"); code != 2 || !strings.Contains(errOut, "--project must be a project id") {
		t.Errorf("bad --project: exit %d, %q", code, errOut)
	}
	// sbatch submits to the named cluster with the script as written.
	dir := t.TempDir()
	script := "#!/bin/sh\n#SBATCH --job-name=hello --time=0:05\necho hi\n"
	if err := os.WriteFile(filepath.Join(dir, "hello.sh"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := run(t, gw, "slurm", "sbatch", "-M", "demo", "--parsable", filepath.Join(dir, "hello.sh"))
	if code != 0 || out != "10;demo\n" || errOut != "" {
		t.Fatalf("sbatch: exit %d, %q, %q", code, out, errOut)
	}
	sub, _ := fakegw.LastRequest[*loomv1.SubmitJobRequest](f)
	if j := sub.GetJob(); j.GetCluster() != "projects/default/clusters/demo" || j.GetScript() != script ||
		j.GetDisplayName() != "hello" || j.GetTimeLimitSeconds() != 5 || sub.GetRequestId() == "" {
		t.Errorf("SubmitJob request %v", sub)
	}
	// Slurm's refusals and exit codes come through as they are.
	out, errOut, code = run(t, gw, "slurm", "sbatch", "--bogus")
	if code != 255 || out != "" || errOut != "sbatch: unrecognized option '--bogus'\nTry \"sbatch --help\" for more information\n" {
		t.Errorf("sbatch --bogus: exit %d, %q, %q", code, out, errOut)
	}
	if out, _, code := run(t, gw, "slurm", "scontrol", "--version"); code != 0 || out != slurmcli.Version+"\n" {
		t.Errorf("scontrol --version: exit %d, %q", code, out)
	}
	// No gateway: the command says so, it does not hang.
	_, errOut, code = run(t, "127.0.0.1:1", "slurm", "squeue", "-M", "demo")
	if code != 1 || !strings.Contains(errOut, "Unable to contact the Loom gateway") {
		t.Errorf("no gateway: exit %d, %q", code, errOut)
	}
	// `loom slurm` alone lists the commands.
	out, _, code = run(t, gw, "slurm")
	if code != 0 || !strings.Contains(out, "sbatch") || !strings.Contains(out, "sprio") {
		t.Errorf("loom slurm: exit %d, %q", code, out)
	}
}

func TestClustersLogin(t *testing.T) {
	t.Parallel()
	f, gw := newFakeGateway(t)
	home := t.TempDir()
	conf := filepath.Join(home, ".loom", "slurm", "slurm.conf")
	if err := os.MkdirAll(filepath.Dir(conf), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(conf, []byte("ClusterName=lt\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f.Clusters = append(f.Clusters,
		&loomv1.Cluster{Name: "projects/default/clusters/lt", Status: &loomv1.ClusterStatus{State: loomv1.Cluster_RUNNING, HomeDir: home, LoginNode: "lt-login-001"}},
		&loomv1.Cluster{Name: "projects/default/clusters/far", Status: &loomv1.ClusterStatus{State: loomv1.Cluster_RUNNING, HomeDir: "/nonexistent/far/home"}},
		&loomv1.Cluster{Name: "projects/default/clusters/new", Status: &loomv1.ClusterStatus{State: loomv1.Cluster_CREATING}},
	)
	f.Nodes = append(f.Nodes, &loomv1.Node{Name: "projects/default/clusters/lt/nodes/lt-0001", Cluster: "projects/default/clusters/lt",
		Hostname: "lt-0001", State: loomv1.Node_READY, Role: "compute"})
	// Another cluster's SLURM_CONF does not leak into the login shell.
	env := loginEnv([]string{"SLURM_CONF=/etc/slurm/other.conf", "PATH=/bin", "A=1=2"}, map[string]string{"SLURM_CONF": "", "PATH": "/links:/bin"})
	if !slices.Equal(env, []string{"A=1=2", "PATH=/links:/bin"}) {
		t.Fatalf("loginEnv = %q", env)
	}
	script := `pwd; echo "cluster=$LOOM_CLUSTER project=$LOOM_PROJECT gateway=$LOOM_GATEWAY conf=$SLURM_CONF login=$LOOM_LOGIN_NODE"
for c in sbatch squeue sinfo scancel sacct scontrol srun sprio; do command -v $c >/dev/null || echo "missing $c"; done
sinfo -N; echo "sinfo exit $?"`
	out, errOut, code := run(t, gw, "clusters", "login", "lt", "--", "/bin/sh", "-c", script)
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, out, errOut)
	}
	realHome, _ := filepath.EvalSymlinks(home)
	want := realHome + "\n" +
		"cluster=projects/default/clusters/lt project=default gateway=" + gw + " conf=" + conf + " login=lt-login-001\n" +
		"NODELIST   NODES PARTITION STATE \n" +
		"lt-0001        1    batch* idle  \n" +
		"sinfo exit 0\n"
	if out != want && out != strings.Replace(want, realHome, home, 1) {
		t.Fatalf("login output\n%q\nwant\n%q", out, want)
	}
	if errOut != "" {
		t.Fatalf("stderr %q", errOut)
	}
	// The sinfo link ran `loom slurm sinfo` against this gateway, for the
	// login's cluster.
	if req, ok := fakegw.LastRequest[*loomv1.ListSlurmNodesRequest](f); !ok || req.GetCluster() != "projects/default/clusters/lt" {
		t.Fatalf("ListSlurmNodes request %v (sent: %v): the sinfo link did not ask this gateway about cluster lt", req, ok)
	}

	// A command named without a path is looked up in the login's PATH, as
	// its shell would: the sinfo link, not whatever sinfo loom's own PATH
	// has (a real Slurm's client, or none).
	out, errOut, code = run(t, gw, "clusters", "login", "lt", "--", "sinfo", "-N")
	if wantTable := "NODELIST   NODES PARTITION STATE \nlt-0001        1    batch* idle  \n"; code != 0 || out != wantTable || errOut != "" {
		t.Fatalf("login -- sinfo -N: exit %d\nstdout %q\nwant   %q\nstderr %q", code, out, wantTable, errOut)
	}
	// A script without #! runs as a shell script, as a shell runs it; a
	// relative path is the login's home's.
	testkit.WriteExecutable(t, filepath.Join(home, "plain.sh"), []byte("echo plain $1 in $(pwd)\nexit 4\n"), 0o755)
	out, errOut, code = run(t, gw, "clusters", "login", "lt", "--", "./plain.sh", "arg")
	if code != 4 || (out != "plain arg in "+realHome+"\n" && out != "plain arg in "+home+"\n") || errOut != "" {
		t.Fatalf("login -- ./plain.sh arg: exit %d, stdout %q, stderr %q; want exit 4 and the script's line", code, out, errOut)
	}
	if _, errOut, code := run(t, gw, "clusters", "login", "lt", "--", "no-such-command-anywhere"); code != 127 ||
		!strings.Contains(errOut, "no-such-command-anywhere: command not found") {
		t.Fatalf("login -- an unknown command: exit %d, %q; want 127 and command not found", code, errOut)
	}

	// CMD's exit status is loom's; a missing home or one on another machine is an error.
	if _, _, code := run(t, gw, "clusters", "login", "lt", "--", "/bin/sh", "-c", "exit 7"); code != 7 {
		t.Fatalf("exit status %d, want 7", code)
	}
	for _, bad := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"clusters", "login", "far", "--", "true"}, 1, "is not on this machine"},
		{[]string{"clusters", "login", "new", "--", "true"}, 1, "cluster new has no shared home yet (it is CREATING)"},
		{[]string{"clusters", "login", "lt", "sinfo"}, 2, "put the command to run after --"},
		{[]string{"clusters", "login"}, 2, "give the cluster name"},
	} {
		_, errOut, code := run(t, gw, bad.args...)
		if code != bad.code || !strings.Contains(errOut, bad.want) {
			t.Errorf("%v: exit %d, %q; want exit %d and %q", bad.args, code, errOut, bad.code, bad.want)
		}
	}
}

// TestClustersLoginEnvironment: a login gives what a real one gives (USER,
// LOGNAME, HOME in the cluster's shared home, the passwd shell, LANG, TERM,
// PATH led by the Slurm commands), whatever the caller's environment lacks.
// The user is whom the caller's credential names (WhoAmI), never USER or
// LOOM_USER.
func TestClustersLoginEnvironment(t *testing.T) {
	t.Parallel()
	f := newFakeGatewayData()
	f.Auth = &fakegw.Auth{Principals: map[string]*loomv1.Principal{}}
	for _, u := range []string{"alice", "bob", "carol", "../../etc"} {
		f.Auth.Principals["tok-"+u] = fakegw.UserPrincipal(u)
	}
	gw := f.Serve(t)
	shared := t.TempDir()
	f.Clusters = append(f.Clusters, &loomv1.Cluster{Name: "projects/default/clusters/le",
		Status: &loomv1.ClusterStatus{State: loomv1.Cluster_RUNNING, HomeDir: shared, LoginNode: "le-login-001"}})
	passwd := writeFile(t, "passwd", "root:x:0:0:root:/root:/bin/bash\nalice:x:1234:1234:Alice:/home/alice:/bin/zsh\n")
	login := func(environ []string, args ...string) (string, string, int) {
		return runWith(t, gw, func(a *app) {
			a.environ = func() []string { return environ }
			a.passwd = passwd
		}, append([]string{"clusters", "login", "le", "--"}, args...)...)
	}
	const show = `echo "user=$USER logname=$LOGNAME home=$HOME shell=$SHELL lang=$LANG term=$TERM"; echo "$PATH"; test -d "$HOME" && echo home-made`

	// A bare environment (a service's, a container's): no USER, a HOME
	// that is the caller's, no SHELL, LANG or TERM.
	out, errOut, code := login([]string{"PATH=/usr/bin:/bin", "LOOM_TOKEN=tok-alice", "LOOM_USER=root", "HOME=/caller/home", "KEEP=1"}, "/bin/sh", "-c", show+`; echo "keep=$KEEP"`)
	lines := strings.Split(out, "\n")
	if code != 0 || errOut != "" || len(lines) != 5 {
		t.Fatalf("login: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if want := "user=alice logname=alice home=" + filepath.Join(shared, "alice") + " shell=/bin/zsh lang=C.UTF-8 term=dumb"; lines[0] != want {
		t.Errorf("login environment\n%q\nwant\n%q", lines[0], want)
	}
	if dirs := filepath.SplitList(lines[1]); len(dirs) != 3 || !strings.Contains(dirs[0], "loom-login-") || dirs[1] != "/usr/bin" || dirs[2] != "/bin" {
		t.Errorf("PATH %q: want the Slurm commands' directory, then the caller's PATH", lines[1])
	}
	if lines[2] != "home-made" || lines[3] != "keep=1" {
		t.Errorf("the home was not made or the caller's other variables were dropped: %q", out)
	}
	if fi, err := os.Stat(filepath.Join(shared, "alice")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the home made for alice: %v (%v), want mode 0700: other users keep out", fi.Mode(), err)
	}

	// The caller's LANG and TERM are kept (USER is the user's); a user without an account
	// here gets /bin/bash (or /bin/sh where there is none); no PATH at all
	// still finds the system's commands.
	out, errOut, code = login([]string{"LOOM_TOKEN=tok-bob", "USER=root", "LANG=de_DE.UTF-8", "TERM=xterm-256color"}, "/bin/sh", "-c", show)
	shell := "/bin/bash"
	if _, err := os.Stat(shell); err != nil {
		shell = "/bin/sh"
	}
	lines = strings.Split(out, "\n")
	if want := "user=bob logname=bob home=" + filepath.Join(shared, "bob") + " shell=" + shell + " lang=de_DE.UTF-8 term=xterm-256color"; code != 0 || lines[0] != want || !strings.HasSuffix(lines[1], ":"+defaultLoginPath) {
		t.Fatalf("login as bob: exit %d, stdout %q, stderr %q; want first line %q", code, out, errOut, want)
	}

	// The login daemon the caller has is the login's Slurm commands'.
	out, errOut, code = login([]string{"LOOM_TOKEN=tok-alice", "LOOM_AUTHD_SOCKET=/run/loom/authd.sock", "PATH=/bin"}, "/bin/sh", "-c", `echo "authd=$LOOM_AUTHD_SOCKET"`)
	if code != 0 || out != "authd=/run/loom/authd.sock\n" {
		t.Errorf("login with a login daemon: exit %d, %q, %q", code, out, errOut)
	}

	// A user name that is not one (it would name a directory elsewhere) is
	// refused before anything is made; so is a home that is not a directory.
	_, errOut, code = login([]string{"LOOM_TOKEN=tok-../../etc", "PATH=/bin"}, "true")
	if code != 1 || !strings.Contains(errOut, `the user name "../../etc" is not a login name`) || !strings.Contains(errOut, "loom auth login") {
		t.Errorf("bad user name: exit %d, %q", code, errOut)
	}
	if entries, err := os.ReadDir(shared); err != nil || len(entries) != 2 {
		t.Errorf("the shared home holds %v (%v); want only alice's and bob's homes", entries, err)
	}
	if err := os.WriteFile(filepath.Join(shared, "carol"), []byte("not a dir"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, code = login([]string{"LOOM_TOKEN=tok-carol", "PATH=/bin"}, "true")
	if code != 1 || !strings.Contains(errOut, "carol's home "+filepath.Join(shared, "carol")+" is not a directory") {
		t.Errorf("home not a directory: exit %d, %q", code, errOut)
	}
}

// TestClustersLoginFindsItsLoomUp: a login to a cluster of a `loom up
// --data-dir D` points the Slurm commands at D's login daemon, not only at
// the default data directory's: the login's HOME is the shared home, so
// without the daemon the commands have no credential at all ("needs a
// credential"). A home that is not a local provider's, or a data
// directory without a daemon, gives none.
func TestClustersLoginFindsItsLoomUp(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	home := filepath.Join(data, "provisioner", "clusters", "lu", "home")
	if err := os.MkdirAll(home, 0o755); err != nil {
		t.Fatal(err)
	}
	f := newFakeGatewayData()
	f.Auth = &fakegw.Auth{Principals: map[string]*loomv1.Principal{"tok-alice": fakegw.UserPrincipal("alice")}}
	gw := f.Serve(t)
	f.Clusters = append(f.Clusters, &loomv1.Cluster{Name: "projects/default/clusters/lu",
		Status: &loomv1.ClusterStatus{State: loomv1.Cluster_RUNNING, HomeDir: home, LoginNode: "lu-login-001"}})
	login := func() string {
		t.Helper()
		out, errOut, code := runWith(t, gw, func(a *app) {
			a.environ = func() []string { return []string{"LOOM_TOKEN=tok-alice", "PATH=/usr/bin:/bin"} }
		}, "clusters", "login", "lu", "--", "/bin/sh", "-c", `echo "authd=$LOOM_AUTHD_SOCKET"`)
		if code != 0 {
			t.Fatalf("login: exit %d, %q, %q", code, out, errOut)
		}
		return out
	}
	// No daemon in the data directory yet: none is named (the default
	// data directory's may be, on a machine running `loom up`).
	if out := login(); out == "authd="+authdSocketIn(data)+"\n" {
		t.Errorf("login named %q, which is not a socket", out)
	}
	ln, err := net.Listen("unix", authdSocketIn(data))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	if out, want := login(), "authd="+authdSocketIn(data)+"\n"; out != want {
		t.Errorf("login to a cluster of loom up --data-dir %s: %q, want %q", data, out, want)
	}
	for _, h := range []string{"/srv/shared/home", filepath.Join(data, "clusters", "lu", "home"), filepath.Join(data, "provisioner", "clusters", "lu", "scratch")} {
		if got := upSocketOf(h); got != "" {
			t.Errorf("upSocketOf(%q) = %q, want none: not a local provider's home", h, got)
		}
	}
}

func TestPasswdEntry(t *testing.T) {
	t.Parallel()
	p := writeFile(t, "passwd", "# comment\nbad line\nalice:x:12:34:A:/home/alice:/bin/zsh\r\nnoshell:x:5:6::/:\nbroken:x:a:b::/:/bin/sh\n")
	if e, ok := passwdEntry(p, "alice"); !ok || e.uid != 12 || e.gid != 34 || e.shell != "/bin/zsh" {
		t.Errorf("alice: %+v %v", e, ok)
	}
	if e, ok := passwdEntry(p, "noshell"); !ok || e.shell != "" {
		t.Errorf("noshell: %+v %v", e, ok)
	}
	for _, name := range []string{"broken", "nobody-here", "x"} {
		if e, ok := passwdEntry(p, name); ok {
			t.Errorf("%s: %+v, want not known", name, e)
		}
	}
	if _, ok := passwdEntry(filepath.Join(t.TempDir(), "none"), "alice"); ok {
		t.Error("a missing passwd file knows alice")
	}
}

// TestClustersExampleAnywhere: the first-cluster hint works from any
// directory (loom installed with go install, no repository): the built-in
// example piped into `clusters create -f -`; from the repository's root,
// the example file by its absolute path.
func TestClustersExampleAnywhere(t *testing.T) {
	t.Parallel()
	f, gw := newFakeGateway(t)
	out, errOut, code := run(t, gw, "clusters", "example")
	if code != 0 || out != string(demoClusterJSON) {
		t.Fatalf("clusters example: exit %d, %q; want the built-in demo cluster file", code, errOut)
	}
	_, errOut, code = runWith(t, gw, func(a *app) { a.stdin = strings.NewReader(out) }, "clusters", "create", "-f", "-")
	if code != 0 {
		t.Fatalf("clusters create -f - of the example: exit %d: %s", code, errOut)
	}
	if req, ok := fakegw.LastRequest[*loomv1.CreateClusterRequest](f); !ok || req.GetClusterId() != "demo" || totalNodes(req.GetCluster()) != 2 {
		t.Fatalf("CreateCluster request = %v, want the demo cluster", req)
	}
	_, errOut, code = runWith(t, gw, func(a *app) { a.stdin = strings.NewReader(`{"name": 7}`) }, "clusters", "create", "-f", "-")
	if code == 0 || !strings.Contains(errOut, "standard input") {
		t.Errorf("a bad cluster file on stdin: exit %d, %q; want an error naming standard input", code, errOut)
	}
	// Cut short (`echo '{"name":"x",' | loom clusters create -f -`): where
	// it ends, not protojson's bare "unexpected EOF".
	_, errOut, code = runWith(t, gw, func(a *app) { a.stdin = strings.NewReader("{\"name\":\"x\",\n") }, "clusters", "create", "-f", "-")
	if want := "standard input: not a valid cluster: cluster: unexpected end of the JSON: a value, or a closing } or ], is missing (line 2:1)"; code != 1 || !strings.Contains(errOut, want) {
		t.Errorf("a cluster file cut short on stdin: exit %d, %q; want %q", code, errOut, want)
	}
	// Standard input is bounded (the gateway refuses a bigger request
	// anyway): one byte over is refused before it is parsed or sent.
	created := len(fakegw.Requests[*loomv1.CreateClusterRequest](f))
	huge := strings.Repeat(" ", maxClusterFileBytes) + out
	_, errOut, code = runWith(t, gw, func(a *app) { a.stdin = strings.NewReader(huge) }, "clusters", "create", "-f", "-")
	if code != 2 || !strings.Contains(errOut, "more than 4 MiB") || len(fakegw.Requests[*loomv1.CreateClusterRequest](f)) != created {
		t.Errorf("a cluster file of %d bytes on stdin: exit %d, %q; want exit 2 naming the 4 MiB limit, nothing sent", len(huge), code, errOut)
	}

	out, errOut, code = run(t, gw, "clusters", "example", "one-node-8gpu")
	if code != 0 {
		t.Fatalf("clusters example one-node-8gpu: exit %d, %q", code, errOut)
	}
	_, errOut, code = runWith(t, gw, func(a *app) { a.stdin = strings.NewReader(out) }, "clusters", "create", "-f", "-")
	if code != 0 {
		t.Fatalf("clusters create -f - of one-node-8gpu: exit %d: %s", code, errOut)
	}
	if req, ok := fakegw.LastRequest[*loomv1.CreateClusterRequest](f); !ok || req.GetClusterId() != "one-node-8gpu" {
		t.Fatalf("CreateCluster request = %v, want one-node-8gpu", req)
	}
	out, errOut, code = run(t, gw, "clusters", "example", "a3u")
	if code != 2 || out != "" || !strings.Contains(errOut, `no example cluster "a3u"`) || !strings.Contains(errOut, "one-node-8gpu") {
		t.Errorf("clusters example a3u: exit %d, %q, %q; want exit 2 naming the examples", code, out, errOut)
	}

	if got, want := demoCreateCommand(t.TempDir()), "loom clusters example | loom clusters create -f -"; got != want {
		t.Errorf("hint outside the repository = %q, want %q", got, want)
	}
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "examples", "clusters"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, demoClusterPath), demoClusterJSON, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := demoCreateCommand(root), "loom clusters create -f "+filepath.Join(root, demoClusterPath); got != want {
		t.Errorf("hint in the repository = %q, want %q", got, want)
	}
}

package cli

// Acceptance tests of issue 3 against the real stack in this process
// (internal/stack: broker, Redis, the five services; agents are this test
// binary re-executed, see TestMain): every example cluster is created,
// resized up and down, logged in to and deleted through the CLI, and one
// through the REST API.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/cmd/loom/stack"
	"github.com/loom-ml/loom/libs/clusterspec"
	"github.com/loom-ml/loom/libs/testkit"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// examplesDir is examples/clusters from this package's directory.
var examplesDir = filepath.Join("..", "..", "..", "..", "examples", "clusters")

// lifecycleTimeout bounds one example's whole lifecycle; waits inside it are
// on conditions, this is only the point at which the test gives up.
const lifecycleTimeout = 4 * time.Minute

// startTestStack starts the in-process stack for t, closed when t ends.
func startTestStack(t *testing.T) *stack.Stack {
	t.Helper()
	ctx := testkit.Context(t, 90*time.Second)
	st, err := stack.Start(ctx, stack.Options{
		DataDir:      t.TempDir(),
		AgentCommand: []string{os.Args[0]},
		AgentEnv:     []string{"LOOM_TEST_RUN_AGENT=1"},
		LogLevel:     "warn",
	})
	if err != nil {
		t.Fatalf("start stack: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := st.Close(ctx); err != nil {
			t.Errorf("close stack: %v", err)
		}
	})
	return st
}

// liveCLI runs loom commands against a real gateway, with token (the
// stack's administrator key, see adminKey) as LOOM_TOKEN when set.
type liveCLI struct {
	t     *testing.T
	gw    string
	token string
}

// adminKey is the administrator key the gateway of a stack with dataDir
// made ("" for a gateway that makes none).
func adminKey(t *testing.T, dataDir string) string {
	t.Helper()
	key, err := stack.ReadKeyFile(stack.KeysIn(dataDir).Admin)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("administrator key: %v", err)
	}
	return key
}

// run runs loom args and returns its output and exit status.
func (l liveCLI) run(args ...string) (stdout, stderr string, code int) {
	l.t.Helper()
	var out, errb bytes.Buffer
	a := newApp()
	a.pollInterval = 100 * time.Millisecond
	a.configDir = l.t.TempDir()
	if l.token != "" {
		// In the environment, so that a login shell's commands have it too.
		a.environ = func() []string { return append(os.Environ(), "LOOM_TOKEN="+l.token) }
	}
	ctx, cancel := context.WithTimeout(context.Background(), lifecycleTimeout)
	defer cancel()
	code = a.execute(ctx, append([]string{"--gateway", l.gw}, args...), &out, &errb)
	return out.String(), errb.String(), code
}

// ok runs loom args, fails the test unless it exits 0, and returns stdout.
func (l liveCLI) ok(args ...string) string {
	l.t.Helper()
	out, errOut, code := l.run(args...)
	if code != 0 {
		l.t.Fatalf("loom %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// json runs loom args with -o json and decodes stdout into m.
func (l liveCLI) json(m proto.Message, args ...string) {
	l.t.Helper()
	out := l.ok(append(args, "-o", "json")...)
	if err := protojson.Unmarshal([]byte(out), m); err != nil {
		l.t.Fatalf("loom %s -o json: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// poolNodes counts the compute nodes of pool in nodes that are in state s
// and, separately, those that are not being deleted.
func poolNodes(nodes []*loomv1.Node, pool string, s loomv1.Node_State) (inState, present int) {
	for _, n := range nodes {
		if n.GetNodePool() != pool || n.GetRole() == "login" {
			continue
		}
		if n.GetState() == s {
			inState++
		}
		if n.GetState() != loomv1.Node_DELETING {
			present++
		}
	}
	return inState, present
}

func TestAcceptanceExamples(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join(examplesDir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples in %s (%v)", examplesDir, err)
	}
	st := startTestStack(t)
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".json"), func(t *testing.T) {
			t.Parallel()
			exampleLifecycle(t, liveCLI{t: t, gw: st.GatewayAddr, token: adminKey(t, st.DataDir)}, f)
		})
	}
	t.Run("invalid", func(t *testing.T) {
		t.Parallel()
		cli := liveCLI{t: t, gw: st.GatewayAddr, token: adminKey(t, st.DataDir)}
		file := writeFile(t, "bad.json", `{"name": "bad", "compute": {"node_pools": [{"id": "gpu", "machine_type": "a3-megagpu-9g", "node_count": 1}]},
 "orchestrator": {"slurm": {"partitions": [{"id": "p", "node_set_ids": ["gpu-b"]}]}}, "network": {"mtu": 99}}`)
		_, errOut, code := cli.run("clusters", "create", "-f", file)
		if code != 1 || !strings.HasPrefix(errOut, "Error: create cluster bad: invalid request:\n  ") {
			t.Fatalf("invalid cluster: exit %d, %q", code, errOut)
		}
		for _, field := range []string{"compute.node_pools[0].machine_type", "orchestrator.slurm.partitions[0].node_set_ids[0]", "network.mtu"} {
			if !strings.Contains(errOut, "\n  "+field+": ") {
				t.Errorf("the error does not name %s:\n%s", field, errOut)
			}
		}
		_, errOut, code = cli.run("clusters", "create", "-f", writeFile(t, "typo.json", `{"name": "typo", "compute": {"node_pools": [{"id": "gpu", "node_cuont": 1}]}}`))
		if code != 1 || !strings.Contains(errOut, "compute.node_pools[0].node_cuont: unknown field") {
			t.Fatalf("misspelt field: exit %d, %q", code, errOut)
		}
	})
	t.Run("rest", func(t *testing.T) {
		t.Parallel()
		restLifecycle(t, st.RESTAddr, adminKey(t, st.DataDir), filepath.Join(examplesDir, "one-node-8gpu.json"))
	})
}

// exampleLifecycle takes one example cluster through its whole life with
// the CLI: reservations it needs, create, inspect, login, grow and shrink
// its first pool, delete, and release the reservations.
func exampleLifecycle(t *testing.T, cli liveCLI, file string) {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	req, err := parseClusterFile(file, data, DefaultProject)
	if err != nil {
		t.Fatalf("the example does not parse: %v", err)
	}
	spec := proto.Clone(req.GetCluster()).(*loomv1.Cluster)
	clusterspec.Normalize(spec)
	id := req.GetClusterId()

	// Reserved capacity first, with room for the resize.
	var reservations []string
	for _, p := range spec.GetCompute().GetNodePools() {
		if p.GetCapacity().GetType() != loomv1.CapacitySource_RESERVATION {
			continue
		}
		name := shortName(p.GetCapacity().GetReservation())
		count := p.GetNodeCount() + p.GetMaxDynamicNodeCount() + 1
		cli.ok("reservations", "create", name, "--zone", p.GetZone(), "--machine-type", p.GetMachineType(), "--count", strconv.Itoa(int(count)))
		reservations = append(reservations, name)
	}

	out := cli.ok("clusters", "create", "-f", file)
	if !strings.Contains(out, "Cluster "+id+" is RUNNING") || !strings.Contains(out, "nodes ready") {
		t.Fatalf("create output:\n%s", out)
	}
	var c loomv1.Cluster
	cli.json(&c, "clusters", "get", id)
	want := totalNodes(spec)
	if c.GetStatus().GetState() != loomv1.Cluster_RUNNING || c.GetStatus().GetReadyNodes() != c.GetStatus().GetTotalNodes() {
		t.Fatalf("cluster after create: %v", c.GetStatus())
	}
	var nodes loomv1.ListNodesResponse
	cli.json(&nodes, "nodes", "list", "--cluster", id)
	var ready int32
	for _, p := range spec.GetCompute().GetNodePools() {
		r, _ := poolNodes(nodes.GetNodes(), p.GetId(), loomv1.Node_READY)
		ready += int32(r)
	}
	if ready != want {
		t.Fatalf("%d compute nodes READY after create, want %d:\n%s", ready, want, cli.ok("nodes", "list", "--cluster", id))
	}

	list := cli.ok("clusters", "list")
	if !strings.Contains(list, id) || !strings.Contains(list, "RUNNING") {
		t.Fatalf("clusters list:\n%s", list)
	}
	desc := cli.ok("clusters", "describe", id)
	t.Logf("create:\n%s\ndescribe:\n%s", out, desc)
	for _, p := range spec.GetCompute().GetNodePools() {
		if !strings.Contains(desc, "\n  "+p.GetId()+" ") {
			t.Errorf("describe lacks pool %s:\n%s", p.GetId(), desc)
		}
	}
	conf := cli.ok("clusters", "slurm-conf", id, "--file", "slurm")
	for _, part := range spec.GetOrchestrator().GetSlurm().GetPartitions() {
		if !strings.Contains(conf, "PartitionName="+part.GetId()) {
			t.Errorf("slurm.conf lacks partition %s:\n%s", part.GetId(), conf)
		}
	}
	if !strings.Contains(conf, "NodeName=") {
		t.Errorf("slurm.conf has no NodeName line:\n%s", conf)
	}

	// Log in: the shared home, this cluster's environment, the Slurm links.
	out, errOut, code := cli.run("clusters", "login", id, "--", "/bin/sh", "-c",
		`pwd; echo "$LOOM_CLUSTER"; test -f "$SLURM_CONF" && echo slurm-conf-ok; sinfo; echo "sinfo $?"`)
	home, _ := filepath.EvalSymlinks(homeDir(&c))
	wantOut := home + "\n" + c.GetName() + "\nslurm-conf-ok\nPARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST\n"
	if code != 0 || !strings.HasPrefix(out, wantOut) || !strings.HasSuffix(out, "\nsinfo 0\n") || errOut != "" {
		t.Errorf("login: exit %d\nstdout %q\nwant   %q...sinfo 0\nstderr %q", code, out, wantOut, errOut)
	}
	// The sinfo link reached this cluster's partitions.
	for _, part := range spec.GetOrchestrator().GetSlurm().GetPartitions() {
		if !strings.Contains(out, "\n"+part.GetId()) {
			t.Errorf("sinfo in the login shell lacks partition %s:\n%s", part.GetId(), out)
		}
	}

	// A job submitted from the login has the login's USER and HOME: sbatch
	// exports the login environment (--export=ALL), as Slurm's.
	out, errOut, code = cli.run("clusters", "login", id, "--", "/bin/sh", "-c",
		`echo "$USER $HOME"; sbatch --wait -o login-env.out --wrap 'echo "$USER $HOME"' >/dev/null && cat login-env.out`)
	lines := strings.Split(out, "\n")
	if f := strings.Fields(lines[0]); code != 0 || len(lines) != 3 || lines[0] != lines[1] || len(f) != 2 || f[1] != filepath.Join(homeDir(&c), f[0]) {
		t.Errorf("a job from the login: exit %d\nstdout %q (want the login's USER and HOME twice, HOME under %s)\nstderr %q", code, out, homeDir(&c), errOut)
	}

	// Grow the first pool by one node, then shrink it back.
	pool := spec.GetCompute().GetNodePools()[0]
	n := int(pool.GetNodeCount())
	reserved := pool.GetCapacity().GetType() == loomv1.CapacitySource_RESERVATION
	resReserved := func() int32 {
		if !reserved {
			return 0
		}
		var r loomv1.Reservation
		cli.json(&r, "reservations", "get", shortName(pool.GetCapacity().GetReservation()))
		return r.GetInUse()
	}
	inUse := resReserved()
	out = cli.ok("clusters", "resize", id, pool.GetId(), strconv.Itoa(n+1))
	if !strings.Contains(out, fmt.Sprintf("from %d to %d", n, n+1)) || !strings.Contains(out, "Cluster "+id+" is RUNNING") {
		t.Fatalf("resize up output:\n%s", out)
	}
	cli.json(&nodes, "nodes", "list", "--cluster", id)
	if r, _ := poolNodes(nodes.GetNodes(), pool.GetId(), loomv1.Node_READY); r != n+1 {
		t.Fatalf("pool %s has %d READY nodes after growing to %d:\n%s", pool.GetId(), r, n+1, cli.ok("nodes", "list", "--cluster", id))
	}
	if got := resReserved(); reserved && got != inUse+1 {
		t.Errorf("reservation in use %d after growing, want %d", got, inUse+1)
	}

	t.Logf("resize up:\n%s", out)
	out = cli.ok("clusters", "resize", id, pool.GetId(), strconv.Itoa(n))
	t.Logf("resize down:\n%s", out)
	if !strings.Contains(out, fmt.Sprintf("from %d to %d", n+1, n)) || !strings.Contains(out, "Cluster "+id+" is RUNNING") {
		t.Fatalf("resize down output:\n%s", out)
	}
	testkit.WaitFor(t, time.Minute, "the drained node to go", func() (bool, error) {
		cli.json(&nodes, "nodes", "list", "--cluster", id)
		r, present := poolNodes(nodes.GetNodes(), pool.GetId(), loomv1.Node_READY)
		return r == n && present == n, nil
	})
	if got := resReserved(); reserved && got != inUse {
		t.Errorf("reservation in use %d after shrinking, want %d", got, inUse)
	}
	cli.json(&c, "clusters", "get", id)
	if c.GetStatus().GetState() != loomv1.Cluster_RUNNING {
		t.Fatalf("cluster after the resizes: %v", c.GetStatus())
	}

	// Update from a file: the example as it is changes nothing (what it
	// leaves to defaults is no difference); new labels are one field.
	if out := cli.ok("clusters", "update", id, "-f", file); !strings.Contains(out, "already matches") {
		t.Errorf("update with the unchanged example:\n%s", out)
	}
	edited := proto.Clone(req.GetCluster()).(*loomv1.Cluster)
	edited.Labels = map[string]string{"stage": "accepted"}
	var eb strings.Builder
	if err := writeJSON(&eb, edited); err != nil {
		t.Fatal(err)
	}
	editedFile := filepath.Join(t.TempDir(), "edited.json")
	if err := os.WriteFile(editedFile, []byte(eb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out = cli.ok("clusters", "update", id, "-f", editedFile)
	if !strings.HasPrefix(out, "Updating cluster "+id+": labels (operation ") {
		t.Errorf("update of the labels:\n%s", out)
	}
	cli.json(&c, "clusters", "get", id)
	if len(c.GetLabels()) != 1 || c.GetLabels()["stage"] != "accepted" || c.GetStatus().GetState() != loomv1.Cluster_RUNNING {
		t.Errorf("after the update: labels %v, state %v", c.GetLabels(), c.GetStatus().GetState())
	}

	out = cli.ok("clusters", "delete", id)
	if !strings.Contains(out, "Cluster "+id+" deleted") {
		t.Fatalf("delete output:\n%s", out)
	}
	if _, errOut, code := cli.run("clusters", "get", id); code != 1 || !strings.Contains(errOut, "not found") {
		t.Fatalf("get after delete: exit %d, %q", code, errOut)
	}
	if _, err := os.Stat(home); err == nil {
		t.Errorf("the cluster's home %s is still there after delete", home)
	}
	for _, r := range reservations {
		var res loomv1.Reservation
		cli.json(&res, "reservations", "get", r)
		if res.GetInUse() != 0 {
			t.Errorf("reservation %s: %d in use after the cluster was deleted", r, res.GetInUse())
		}
		cli.ok("reservations", "delete", r)
	}
}

// restClient speaks the gateway's REST API.
type restClient struct {
	t    *testing.T
	base string // http://host:port/v1/
	http *http.Client
	// token, when set, goes as "Authorization: Bearer <token>".
	token string
}

// do sends method path with body (a message, or nil) and returns the status
// and the body.
func (r restClient) do(method, path string, body proto.Message) (int, []byte) {
	r.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := protojson.Marshal(body)
		if err != nil {
			r.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, r.base+path, rd)
	if err != nil {
		r.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	resp, err := r.http.Do(req)
	if err != nil {
		r.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		r.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp.StatusCode, b
}

// call is do that wants 200 and decodes the answer into into.
func (r restClient) call(method, path string, body, into proto.Message) {
	r.t.Helper()
	code, b := r.do(method, path, body)
	if code != http.StatusOK {
		r.t.Fatalf("%s %s: %d %s", method, path, code, b)
	}
	if err := protojson.Unmarshal(b, into); err != nil {
		r.t.Fatalf("%s %s: %v\n%s", method, path, err, b)
	}
}

// wait polls a long-running operation until it is done and fails the test
// if it failed.
func (r restClient) wait(op *loomv1.Operation) *loomv1.Operation {
	r.t.Helper()
	testkit.WaitFor(r.t, lifecycleTimeout, "operation "+op.GetName(), func() (bool, error) {
		if op.GetDone() {
			return true, nil
		}
		next := &loomv1.Operation{}
		r.call(http.MethodGet, op.GetName(), nil, next)
		op = next
		return op.GetDone(), nil
	})
	if op.GetError() != nil {
		r.t.Fatalf("operation %s failed: %v", op.GetName(), op.GetError())
	}
	return op
}

// readyInPool counts the READY compute nodes of pool, over REST.
func (r restClient) readyInPool(cluster, pool string) (ready, present int) {
	var nodes loomv1.ListNodesResponse
	r.call(http.MethodGet, cluster+"/nodes", nil, &nodes)
	return poolNodes(nodes.GetNodes(), pool, loomv1.Node_READY)
}

// restLifecycle creates an example under another id over REST, checks it,
// grows and shrinks its first pool with PATCH, and deletes it.
func restLifecycle(t *testing.T, restAddr, token, file string) {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	c, err := clusterspec.ParseJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	const id = "rest-example"
	c.Name = ""
	r := restClient{t: t, base: "http://" + restAddr + "/v1/", http: &http.Client{}, token: token}
	name := "projects/default/clusters/" + id

	// Bad input: 400, the field named.
	bad := proto.Clone(c).(*loomv1.Cluster)
	bad.Compute.NodePools[0].NodeCount = 0
	code, body := r.do(http.MethodPost, "projects/default/clusters?cluster_id="+id, bad)
	if code != http.StatusBadRequest || !strings.Contains(string(body), "compute.node_pools[0].node_count") {
		t.Fatalf("POST with 0 nodes: %d %s; want 400 naming compute.node_pools[0].node_count", code, body)
	}

	var op loomv1.Operation
	r.call(http.MethodPost, "projects/default/clusters?cluster_id="+id, c, &op)
	done := r.wait(&op)
	if done.GetCluster().GetStatus().GetState() != loomv1.Cluster_RUNNING {
		t.Fatalf("create operation result: %v", done.GetCluster().GetStatus())
	}
	var got loomv1.Cluster
	r.call(http.MethodGet, name, nil, &got)
	if got.GetStatus().GetState() != loomv1.Cluster_RUNNING || got.GetStatus().GetReadyNodes() != totalNodes(c) {
		t.Fatalf("GET cluster: %v", got.GetStatus())
	}
	var conf loomv1.SlurmConfig
	r.call(http.MethodGet, name+":slurmConfig", nil, &conf)
	if !strings.Contains(conf.GetSlurmConf(), "NodeName=") {
		t.Fatalf("GET :slurmConfig: %v", &conf)
	}

	pool := got.GetCompute().GetNodePools()[0]
	n := int(pool.GetNodeCount())
	for i, size := range []int{n + 1, n} {
		if i > 0 {
			// Read again: the body carries the cluster's etag, and the
			// first resize changed it (a stale one is 409 ABORTED).
			got.Reset()
			r.call(http.MethodGet, name, nil, &got)
		}
		upd := proto.Clone(&got).(*loomv1.Cluster)
		upd.Status, upd.CreateTime, upd.UpdateTime = nil, nil, nil
		upd.Compute.NodePools[0].NodeCount = int32(size)
		var op loomv1.Operation
		r.call(http.MethodPatch, name+"?update_mask=compute.node_pools", upd, &op)
		r.wait(&op)
		testkit.WaitFor(t, time.Minute, fmt.Sprintf("pool %s at %d nodes", pool.GetId(), size), func() (bool, error) {
			ready, present := r.readyInPool(name, pool.GetId())
			return ready == size && present == size, nil
		})
	}

	r.call(http.MethodDelete, name, nil, &op)
	r.wait(&op)
	if code, body := r.do(http.MethodGet, name, nil); code != http.StatusNotFound {
		t.Fatalf("GET after DELETE: %d %s, want 404", code, body)
	}
}

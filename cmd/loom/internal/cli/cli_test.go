package cli

import (
	"cmp"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/cmd/loom/internal/fakegw"
	"github.com/loom-ml/loom/cmd/loom/internal/slurmcli"
	"github.com/loom-ml/loom/libs/embedded"
	"github.com/loom-ml/loom/libs/slurmspec"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// golden compares output with want, line by line, so that a failure shows
// where the table went out of line.
func golden(t *testing.T, got, want string) {
	t.Helper()
	want = strings.TrimPrefix(want, "\n")
	if got != want {
		t.Fatalf("output differs\n--- got:\n%s--- want:\n%s", got, want)
	}
}

func TestTables(t *testing.T) {
	t.Parallel()
	_, gw := newFakeGateway(t)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"clusters", "list"}, `
NAME         STATE                             NODES  POOLS         AGE
demo         RUNNING                           2/2    gpu:2         5m
big-cluster  CREATING                          3/16   cpu:16        3h
a3u          RUNNING (Degraded: NodesFailing)  5/6    a3u:4,spot:2  2h
`},
		{[]string{"clusters", "get", "demo"}, `
Name:     projects/default/clusters/demo
State:    RUNNING
Nodes:    2 of 2 ready
Home:     /data/demo/shared
Created:  5m ago
Node pools:
  ID   MACHINE TYPE   NODES  ACCELERATOR       GPUS/NODE
  gpu  a3-highgpu-8g  2      nvidia-h100-80gb  8
`},
		{[]string{"nodes", "list"}, `
NODE           CLUSTER  POOL     STATE         HEALTH    GPUS  ZONE           CAPACITY     REASON/NEXT
gpu-0001       demo     gpu      READY         -         8     -              -            -
gpu-0002       demo     gpu      DOWN          -         8     -              -            no heartbeat for 15s
a3u-0001       a3u      a3u      READY         HEALTHY   8     us-central1-a  RESERVATION  -
a3u-0002       a3u      a3u      READY         HEALTHY   8     us-central1-a  RESERVATION  -
a3u-0003       a3u      a3u      READY         HEALTHY   8     us-central1-a  RESERVATION  -
a3u-0004       a3u      a3u      READY         DRAINING  8     us-central1-a  RESERVATION  maint
spot-0001      a3u      spot     READY         HEALTHY   8     us-central1-b  SPOT         -
spot-0002      a3u      spot     FAILED        HEALTHY   8     us-central1-b  SPOT         preempted by provider → replace when SPOT capacity returns
spot-0003      a3u      spot     PROVISIONING  -         8     us-central1-b  SPOT         → retry launch in 4s (attempt 2 of 5)
a3u-login-001  a3u      (login)  READY         -         0     us-central1-a  -            -
`},
		{[]string{"jobs", "list"}, `
ID  NAME   CLUSTER  STATE                NODES  AGE  RUNTIME  EXIT
7   train  demo     RUNNING              2      1m   1m       -
8   -      demo     FAILED               1      2d   1.5s     3
9   -      demo     PENDING (Resources)  4      10s  -        -
`},
		{[]string{"jobs", "get", "7"}, `
Name:           projects/default/jobs/7
Job ID:         7
Display name:   train
Cluster:        projects/default/clusters/demo
Partition:      gpu
State:          RUNNING
Nodes:          2 (gpu-0001, gpu-0002)
GPUs per node:  0
Command:        loom train --epochs 200
Output:         /data/demo/shared/slurm-7.out
Submitted:      1m ago
Started:        1m ago
Runtime:        1m
Time limit:     2h0m0s
Retries:        1 of 3 used (its program's failures)
Checkpoints:    ckpt/train (under the cluster's shared dir)
`},
		{[]string{"jobs", "get", "projects/default/jobs/8"}, `
Name:           projects/default/jobs/8
Job ID:         8
Cluster:        projects/default/clusters/demo
State:          FAILED
Exit code:      3
Nodes:          1
GPUs per node:  0
Script:         1 line
Submitted:      2d ago
Started:        2d ago
Runtime:        1.5s
Ended:          2d ago
Used:           1.5s CPU, 93.6 MiB peak memory, 2 GPUs at 87% (peak 71.0 GiB) (its script; loom slurm sacct -j 8 has its steps)
Restarts:       1
Kept off:       gpu-0002 (a run failed there; until repaired)
Hang timeout:   10m0s
Checkpoints:    /data/demo/shared/ckpt/8

Runs:
  ATTEMPT  STATE     NODES            STARTED  RUNTIME  REASON
  1        REQUEUED  gpu-[0001-0002]  2d ago   3m30s    node gpu-0002 failed: Xid 79: GPU has fallen off the bus
  2        FAILED    gpu-0001         2d ago   1.5s     -
`},
		{[]string{"models", "list"}, `
NAME            DISPLAY NAME  DEFAULT  LATEST  ALIASES  UPDATED
demo-regressor  -             -        2       -        1m ago
`},
		{[]string{"models", "list", "--versions", "demo-regressor"}, `
VERSION  ARTIFACT              SOURCE JOB  CREATED
1        file:///data/m/job-3  3           1h ago
`},
		{[]string{"clusters", "list", "--project", "empty"}, `
No clusters in project empty. Create one with ` + "`loom clusters example | loom clusters create -f -`" + `.
`},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			out, errOut, code := run(t, gw, c.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			golden(t, out, c.want)
		})
	}
}

func TestJSONIsProtoJSON(t *testing.T) {
	t.Parallel()
	f, gw := newFakeGateway(t)
	cases := []struct {
		args []string
		into proto.Message
		want proto.Message
	}{
		{[]string{"clusters", "list", "-o", "json"}, &loomv1.ListClustersResponse{}, &loomv1.ListClustersResponse{Clusters: f.Clusters}},
		{[]string{"clusters", "get", "demo", "--output", "json"}, &loomv1.Cluster{}, f.Clusters[0]},
		{[]string{"jobs", "list", "-o", "json"}, &loomv1.ListJobsResponse{}, &loomv1.ListJobsResponse{Jobs: f.Jobs}},
		{[]string{"jobs", "get", "9", "-o", "json"}, &loomv1.Job{}, f.Jobs[2]},
		{[]string{"nodes", "list", "-o", "json"}, &loomv1.ListNodesResponse{}, &loomv1.ListNodesResponse{Nodes: f.Nodes}},
		{[]string{"models", "list", "-o", "json"}, &loomv1.ListModelsResponse{}, &loomv1.ListModelsResponse{Models: f.Models}},
		{[]string{"models", "list", "--versions", "demo-regressor", "-o", "json"}, &loomv1.ListModelVersionsResponse{}, &loomv1.ListModelVersionsResponse{Versions: f.Versions}},
	}
	for _, c := range cases {
		out, errOut, code := run(t, gw, c.args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", c.args, code, errOut)
		}
		if err := protojson.Unmarshal([]byte(out), c.into); err != nil {
			t.Fatalf("%v: output is not protojson: %v\n%s", c.args, err, out)
		}
		if !proto.Equal(c.into, c.want) {
			t.Fatalf("%v: decoded %v, want %v", c.args, c.into, c.want)
		}
		// Stable formatting: camelCase field names, two-space indent, one space after colons.
		if !strings.Contains(out, "\n  \"") || strings.Contains(out, ":  ") {
			t.Fatalf("%v: JSON not indented as expected:\n%s", c.args, out)
		}
	}
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestClustersCreateShowsProgress(t *testing.T) {
	t.Parallel()
	f, gw := newFakeGateway(t)
	file := writeFile(t, "c.json", `{"name": "demo", "compute": {"nodePools": [{"id": "cpu", "machineType": "n2-standard-8", "nodeCount": 2}]}}`)
	out, errOut, code := run(t, gw, "clusters", "create", "-f", file)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := []string{
		"Creating cluster demo (operation op1)",
		"  0 of 2 nodes ready",
		"  1 of 2 nodes ready",
		"  2 of 2 nodes ready",
		"Cluster demo is RUNNING: 2 of 2 nodes ready (",
	}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(want), out)
	}
	for i := range want {
		if !strings.HasPrefix(lines[i], want[i]) {
			t.Fatalf("line %d = %q, want prefix %q\n%s", i, lines[i], want[i], out)
		}
	}
	req, ok := fakegw.LastRequest[*loomv1.CreateClusterRequest](f)
	if !ok {
		t.Fatal("no CreateCluster request")
	}
	if req.GetParent() != "projects/default" || req.GetClusterId() != "demo" ||
		req.GetCluster().GetName() != "projects/default/clusters/demo" || req.GetRequestId() == "" ||
		req.GetCluster().GetCompute().GetNodePools()[0].GetNodeCount() != 2 {
		t.Fatalf("CreateCluster request = %v", req)
	}
}

func TestClustersCreateAsyncAndJSON(t *testing.T) {
	t.Parallel()
	f, gw := newFakeGateway(t)
	file := writeFile(t, "c.json", `{"name": "projects/other/clusters/demo", "compute": {"nodePools": [{"id": "cpu", "nodeCount": 2}]}}`)
	out, errOut, code := run(t, gw, "clusters", "create", "-f", file, "--async")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	golden(t, out, "\nCreating cluster demo: operation projects/default/operations/op1\nFollow it with `loom operations wait op1`.\n")
	// Every async operation says how to follow it: delete too.
	if out, errOut, code := run(t, gw, "clusters", "delete", "demo", "--async"); code != 0 || !regexp.MustCompile("\nFollow it with `loom operations wait [^`/]+`\\.\n$").MatchString(out) {
		t.Fatalf("delete --async: exit %d, %q %q", code, out, errOut)
	}
	req, _ := fakegw.LastRequest[*loomv1.CreateClusterRequest](f)
	if req.GetParent() != "projects/other" || req.GetClusterId() != "demo" {
		t.Fatalf("full name in the file: request = %v", req)
	}
	if _, ok := fakegw.LastRequest[*loomv1.GetOperationRequest](f); ok {
		t.Fatal("--async polled the operation")
	}

	// JSON: progress on stderr, the final operation on stdout.
	out, errOut, code = run(t, gw, "clusters", "create", "-f", file, "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var op loomv1.Operation
	if err := protojson.Unmarshal([]byte(out), &op); err != nil || !op.GetDone() || op.GetCluster() == nil {
		t.Fatalf("stdout is not the done operation (%v):\n%s", err, out)
	}
	if !strings.Contains(errOut, "2 of 2 nodes ready") {
		t.Fatalf("progress missing from stderr: %q", errOut)
	}
}

func TestClustersCreateFailedOperation(t *testing.T) {
	t.Parallel()
	f, gw := newFakeGateway(t)
	f.FailOperation = true
	file := writeFile(t, "c.json", `{"name": "demo", "compute": {"nodePools": [{"id": "gpu", "nodeCount": 2}]}}`)
	out, errOut, code := run(t, gw, "clusters", "create", "-f", file)
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if !strings.Contains(out, "1 of 2 nodes ready") {
		t.Fatalf("progress missing: %q", out)
	}
	want := "Error: create cluster demo: operation failed: ResourceExhausted: no capacity for pool gpu\n"
	if errOut != want {
		t.Fatalf("stderr = %q, want %q", errOut, want)
	}
}

func TestClustersDelete(t *testing.T) {
	t.Parallel()
	f, gw := newFakeGateway(t)
	out, errOut, code := run(t, gw, "clusters", "delete", "demo")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.HasPrefix(out, "Deleting cluster demo (operation op2)\n  stopping 2 nodes\n") || !strings.Contains(out, "Cluster demo deleted (") {
		t.Fatalf("output:\n%s", out)
	}
	req, _ := fakegw.LastRequest[*loomv1.DeleteClusterRequest](f)
	if req.GetName() != "projects/default/clusters/demo" || req.GetRequestId() == "" {
		t.Fatalf("DeleteCluster request = %v", req)
	}
	_, errOut, code = run(t, gw, "clusters", "delete", "ghost")
	if code != 1 || !strings.Contains(errOut, "cluster projects/default/clusters/ghost not found (see `loom clusters list`)") {
		t.Fatalf("delete of a missing cluster: exit %d, %q", code, errOut)
	}
}

func TestErrorsSayWhatToDo(t *testing.T) {
	t.Parallel()
	f, gw := newFakeGateway(t)
	// The gateway's refusal names the flags typed, not the API fields
	// they set (submitFlagFields); a field no flag sets stays as it is.
	f.SubmitErr = status.Error(codes.InvalidArgument, "job.node_count: 4 is more than the cluster's 2 nodes; job.gpus_per_node: must be 0..0 on cluster demo; "+
		"job.env[A=B]: not a valid environment variable name; job.time_limit_seconds: 5999999940 is more than a century; job.qos: unknown")
	_, errOut, code := run(t, gw, "jobs", "submit", "--cluster", "demo", "--nodes", "4", "--", "true")
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	golden(t, errOut, `
Error: submit job: invalid request:
  --nodes: 4 is more than the cluster's 2 nodes
  --gpus-per-node: must be 0..0 on cluster demo
  --env A=B: not a valid environment variable name
  --time: 5999999940 is more than a century
  job.qos: unknown
`)

	port, err := embedded.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	_, errOut, code = run(t, "127.0.0.1:"+strconv.Itoa(port), "jobs", "list")
	if code != 1 || !strings.Contains(errOut, "is Loom running? start it with `loom up`") {
		t.Fatalf("unreachable gateway: exit %d, %q", code, errOut)
	}

	_, errOut, code = run(t, gw, "jobs", "get", "99")
	if code != 1 || !strings.Contains(errOut, "job projects/default/jobs/99 not found (see `loom jobs list`)") {
		t.Fatalf("missing job: exit %d, %q", code, errOut)
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	_, gw := newFakeGateway(t)
	script := writeFile(t, "s.sh", "echo hi\n")
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"jobs", "submit", "--", "true"}, "--cluster is required"},
		{[]string{"jobs", "submit", "--cluster", "demo"}, "give what to run"},
		{[]string{"jobs", "submit", "--cluster", "demo", "echo", "hi"}, "put the command after --"},
		{[]string{"jobs", "submit", "--cluster", "demo", "--script", script, "--", "true"}, "not both"},
		{[]string{"jobs", "submit", "--cluster", "demo", "--nodes", "0", "--", "true"}, "--nodes must be at least 1"},
		{[]string{"jobs", "submit", "--cluster", "demo", "--env", "NOEQUALS", "--", "true"}, "--env wants KEY=VALUE"},
		{[]string{"jobs", "submit", "--cluster", "demo", "--nodes", "two", "--", "true"}, "invalid argument \"two\""},
		{[]string{"jobs", "submit", "--cluster", "demo", "--retries", "101", "--", "true"}, "--retries must be 0 to 100, got 101"},
		{[]string{"jobs", "submit", "--cluster", "demo", "--signal", "NOPE", "--", "true"}, `--signal "NOPE"`},
		{[]string{"jobs", "submit", "--cluster", "demo", "--hang-timeout", "10", "--", "true"}, `--hang-timeout wants a duration such as 10m, or off; got "10"`},
		{[]string{"jobs", "submit", "--cluster", "demo", "--hang-timeout", "169h", "--", "true"}, "--hang-timeout 169h: 608400 is not -1 (off), 0 (the cluster's default) or 1 to 604800 seconds (a week)"},
		{[]string{"jobs", "submit", "--cluster", "demo", "--checkpoint-dir", "../other", "--", "true"}, `--checkpoint-dir "../other" leaves the cluster's shared directory`},
		{[]string{"jobs", "submit", "--cluster", "demo", "--time", "1:3x", "--", "true"}, `--time "1:3x": "3x" is not a number (want minutes, MM:SS,`},
		{[]string{"jobs", "submit", "--cluster", "demo", "--time", "99999999", "--", "true"}, `--time "99999999" is more than a century, the most Loom takes (52560000 minutes`},
		{[]string{"jobs", "list", "--state", "runing"}, `--state "runing" is not a job state; use one of pending, configuring, running,`},
		{[]string{"clusters", "get"}, "give the cluster name"},
		{[]string{"clusters", "create"}, "-f FILE"},
		{[]string{"jobs", "logs"}, "give the job id"},
		{[]string{"clusters", "resize", "demo", "gpu", "0"}, "a node pool keeps at least 1 node; to remove pool gpu, update the cluster without it"},
		{[]string{"jobs", "logs", "7", "-n", "-2"}, "--tail must not be negative, got -2"},
		{[]string{"clusters", "list", "-o", "yaml"}, "--output must be table or json"},
		{[]string{"clusters", "list", "--project", "a/b"}, "--project must be a project id"},
		{[]string{"jobs", "list", "--bogus"}, "unknown flag: --bogus (see \"loom jobs list --help\")"},
		{[]string{"train", "--epochs", "0", "--out", t.TempDir()}, "--epochs must be at least 1"},
	}
	for _, c := range cases {
		_, errOut, code := run(t, gw, c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", c.args, code, errOut, c.want)
		}
	}
}

// TestProjectFlagBounded: a --project that is no project id (100 a's, past
// the 63-character limit) is refused before any call, in one clause that
// names the limit and echoes the value cut, not whole (nor three times, as
// the gateway's "want projects/{project}..." did through the command's own
// "set the role of alice in projects/aaa...").
func TestProjectFlagBounded(t *testing.T) {
	t.Parallel()
	f, gw := newFakeGateway(t)
	long := strings.Repeat("a", 100)
	for _, args := range [][]string{
		{"auth", "members", "set", "alice", "user", "--project", long},
		{"jobs", "list", "--project", long},
		{"clusters", "list", "--project", "Upper"},
		{"--project", long, "slurm", "sinfo"},
	} {
		_, errOut, code := run(t, gw, args...)
		if code != 2 || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "--project must be a project id") ||
			!strings.Contains(errOut, "at most 63 characters") || strings.Contains(errOut, strings.Repeat("a", 64)) || strings.Count(errOut, "want") > 0 {
			t.Errorf("%v: exit %d, stderr %q; want exit 2, one line naming the limit, the value cut", args, code, errOut)
		}
	}
	if _, errOut, _ := run(t, gw, "jobs", "list", "--project", long); !strings.Contains(errOut, "(100 characters)") {
		t.Errorf("a long --project: %q does not say how long it was", errOut)
	}
	if rs := fakegw.Requests[proto.Message](f); len(rs) != 0 {
		t.Errorf("a bad --project reached the gateway: %v", rs)
	}
	// "-" stays: every project's, where a command takes it (nodes list).
	if _, errOut, code := run(t, gw, "nodes", "list", "--project", "-"); code != 0 {
		t.Errorf("--project -: exit %d, %q", code, errOut)
	}
}

// TestJobsListFilters: --state (names in any case, or active), --user and
// --partition become ListJobs' filters.
func TestJobsListFilters(t *testing.T) {
	t.Parallel()
	f, gw := newFakeGateway(t)
	if _, errOut, code := run(t, gw, "jobs", "list", "--state", "running,Pending", "--state", "node_fail", "--user", "ana,bo", "--partition", "gpu"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	req, _ := fakegw.LastRequest[*loomv1.ListJobsRequest](f)
	want := &loomv1.ListJobsRequest{Parent: "projects/default", Users: []string{"ana", "bo"}, Partitions: []string{"gpu"},
		States: []loomv1.JobState{loomv1.JobState_RUNNING, loomv1.JobState_PENDING, loomv1.JobState_NODE_FAIL}}
	got := proto.Clone(req).(*loomv1.ListJobsRequest)
	got.PageSize, got.PageToken = 0, ""
	if !proto.Equal(got, want) {
		t.Fatalf("ListJobs request %v, want %v", got, want)
	}
	if _, errOut, code := run(t, gw, "jobs", "list", "--state", "active"); code != 0 {
		t.Fatalf("--state active: exit %d: %s", code, errOut)
	}
	if req, _ = fakegw.LastRequest[*loomv1.ListJobsRequest](f); !req.GetActiveOnly() || len(req.GetStates()) != 0 {
		t.Fatalf("--state active: %v, want active_only", req)
	}
	// An array's tasks are listed by the ids squeue and sacct give them,
	// and a task's record says which task it is.
	f.Jobs = append(f.Jobs, &loomv1.Job{Name: "projects/default/jobs/41", JobId: "41", DisplayName: "sweep", ArrayJobId: "40", ArrayTaskId: 1,
		Cluster: "projects/default/clusters/demo", State: loomv1.JobState_PENDING})
	if out, errOut, code := run(t, gw, "jobs", "list"); code != 0 || !regexp.MustCompile(`(?m)^40_1 +sweep +demo +PENDING`).MatchString(out) {
		t.Errorf("jobs list with an array task: exit %d\n%s%s", code, out, errOut)
	}
	if out, errOut, code := run(t, gw, "jobs", "get", "41"); code != 0 || !strings.Contains(out, "Job ID:         41 (array task 40_1)\n") {
		t.Errorf("jobs get of an array task: exit %d\n%s%s", code, out, errOut)
	}
	// --order-by asks the gateway for its order: the newest first, with
	// --limit keeping the newest.
	out, errOut, code := run(t, gw, "jobs", "list", "--order-by", "submit_time desc", "--limit", "1")
	if req, _ := fakegw.LastRequest[*loomv1.ListJobsRequest](f); code != 0 || req.GetOrderBy() != "submit_time desc" ||
		!regexp.MustCompile(`(?m)^40_1 +sweep`).MatchString(out) || strings.Count(out, "\n") != 2 {
		t.Errorf("--order-by 'submit_time desc' --limit 1: exit %d, request %v\n%s%s", code, req, out, errOut)
	}
	if _, errOut, code := run(t, gw, "jobs", "list", "--order-by", "name"); code != 1 || !strings.Contains(errOut, "order_by") {
		t.Errorf("--order-by name: exit %d, %q; want the field named", code, errOut)
	}
	// A cluster that does not exist is said to be missing, not shown as an
	// empty list.
	if out, errOut, code := run(t, gw, "jobs", "list", "--cluster", "nope"); code != 1 || out != "" ||
		!strings.Contains(errOut, "not found (see `loom clusters list`)") {
		t.Fatalf("--cluster nope: exit %d %q %q", code, out, errOut)
	}
}

// TestJobsSubmitDefaultsToTheOnlyCluster: without --cluster a job goes to
// the project's only cluster, as the Slurm commands choose; with several
// or none, --cluster is asked for, saying why.
func TestJobsSubmitDefaultsToTheOnlyCluster(t *testing.T) {
	t.Parallel()
	f, gw := newFakeGateway(t)
	if _, errOut, code := run(t, gw, "jobs", "submit", "--", "true"); code != 2 ||
		!strings.Contains(errOut, "--cluster is required: project default has several clusters (see `loom clusters list`)") {
		t.Fatalf("several clusters: exit %d, %q", code, errOut)
	}
	only := f.Clusters[0]
	f.Clusters = f.Clusters[:1]
	out, errOut, code := run(t, gw, "jobs", "submit", "--", "true")
	if req, _ := fakegw.LastRequest[*loomv1.SubmitJobRequest](f); code != 0 || req.GetJob().GetCluster() != only.GetName() {
		t.Fatalf("one cluster: exit %d %q %q, request %v; want it on %s", code, out, errOut, req, only.GetName())
	}
	f.Clusters = nil
	if _, errOut, code := run(t, gw, "jobs", "submit", "--", "true"); code != 2 ||
		!strings.Contains(errOut, "project default has no cluster yet; create one with `loom clusters example | loom clusters create -f -`") {
		t.Fatalf("no cluster: exit %d, %q", code, errOut)
	}
	// Wrong flags are said without asking the gateway anything.
	if _, errOut, code := run(t, gw, "jobs", "submit", "--nodes", "0", "--", "true"); code != 2 || !strings.Contains(errOut, "--nodes must be at least 1") {
		t.Fatalf("--nodes 0: exit %d, %q", code, errOut)
	}
}

// TestJobsSubmitTakesLoomCluster: without --cluster, LOOM_CLUSTER (a
// login shell's) names the cluster, before the only-cluster default. Not
// parallel: it sets the process's environment.
func TestJobsSubmitTakesLoomCluster(t *testing.T) {
	f, gw := newFakeGateway(t)
	t.Setenv("LOOM_CLUSTER", f.Clusters[1].GetName())
	if _, errOut, code := run(t, gw, "jobs", "submit", "--", "true"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if req, _ := fakegw.LastRequest[*loomv1.SubmitJobRequest](f); req.GetJob().GetCluster() != f.Clusters[1].GetName() {
		t.Fatalf("submitted to %q, want LOOM_CLUSTER's %q", req.GetJob().GetCluster(), f.Clusters[1].GetName())
	}
	if _, _, code := run(t, gw, "jobs", "submit", "--cluster", shortName(f.Clusters[0].GetName()), "--", "true"); code != 0 {
		t.Fatal("--cluster refused")
	}
	if req, _ := fakegw.LastRequest[*loomv1.SubmitJobRequest](f); req.GetJob().GetCluster() != f.Clusters[0].GetName() {
		t.Fatalf("--cluster lost to LOOM_CLUSTER: %q", req.GetJob().GetCluster())
	}
}

func TestJobsSubmitBuildsRequest(t *testing.T) {
	t.Parallel()
	f, gw := newFakeGateway(t)
	out, errOut, code := run(t, gw, "--project", "p2", "jobs", "submit", "--cluster", "demo", "--nodes", "2",
		"--gpus-per-node", "1", "--name", "x", "--model", "tiny", "--env", "A=1=2", "--", "python", "-u", "train.py", "--lr", "0.1")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	golden(t, out, "\nSubmitted job 10 (projects/p2/jobs/10) on cluster demo\n")
	req, _ := fakegw.LastRequest[*loomv1.SubmitJobRequest](f)
	want := &loomv1.Job{
		Cluster: "projects/p2/clusters/demo", DisplayName: "x", NodeCount: 2, GpusPerNode: 1,
		Command:     []string{"python", "-u", "train.py", "--lr", "0.1"},
		ModelOutput: &loomv1.ModelOutput{ModelId: "tiny"}, Env: map[string]string{"A": "1=2"},
	}
	got := proto.Clone(req.GetJob()).(*loomv1.Job)
	got.User = ""
	if req.GetParent() != "projects/p2" || req.GetRequestId() == "" || !proto.Equal(got, want) {
		t.Fatalf("SubmitJob request = %v, want job %v", req, want)
	}

	script := writeFile(t, "train.sh", "#!/bin/sh\necho $SLURM_PROCID\n")
	if _, errOut, code := run(t, gw, "jobs", "submit", "--cluster", "projects/x/clusters/c", "--script", script); code != 0 {
		t.Fatalf("script: exit %d: %s", code, errOut)
	}
	req, _ = fakegw.LastRequest[*loomv1.SubmitJobRequest](f)
	if req.GetJob().GetScript() != "#!/bin/sh\necho $SLURM_PROCID\n" || len(req.GetJob().GetCommand()) != 0 ||
		req.GetJob().GetCluster() != "projects/x/clusters/c" || req.GetJob().GetNodeCount() != 1 {
		t.Fatalf("script request = %v", req)
	}

	// The resilience flags: a retry budget, a hang timeout (a duration,
	// rounded up to seconds, or off) and a checkpoint directory.
	for hang, secs := range map[string]int64{"90s": 90, "1m0.5s": 61, "off": slurmspec.HangTimeoutOff} {
		if _, errOut, code := run(t, gw, "jobs", "submit", "--cluster", "demo", "--retries", "2", "--hang-timeout", hang,
			"--checkpoint-dir", "ckpt/llama", "--", "loom", "train"); code != 0 {
			t.Fatalf("--hang-timeout %s: exit %d: %s", hang, code, errOut)
		}
		req, _ = fakegw.LastRequest[*loomv1.SubmitJobRequest](f)
		if j := req.GetJob(); j.GetMaxRetries() != 2 || j.GetHangTimeoutSeconds() != secs || j.GetCheckpointDir() != "ckpt/llama" {
			t.Fatalf("--hang-timeout %s: max_retries %d, hang_timeout_seconds %d (want %d), checkpoint_dir %q",
				hang, j.GetMaxRetries(), j.GetHangTimeoutSeconds(), secs, j.GetCheckpointDir())
		}
	}
	// --time in sbatch's grammar (UNLIMITED: the partition's) and --partition.
	for tl, secs := range map[string]int64{"90": 5400, "1-02:00:00": 26 * 3600, "0:30": 30, "UNLIMITED": 0} {
		if _, errOut, code := run(t, gw, "jobs", "submit", "--cluster", "demo", "--time", tl, "--partition", "gpu", "--", "true"); code != 0 {
			t.Fatalf("--time %s: exit %d: %s", tl, code, errOut)
		}
		req, _ = fakegw.LastRequest[*loomv1.SubmitJobRequest](f)
		if j := req.GetJob(); j.GetTimeLimitSeconds() != secs || j.GetPartition() != "gpu" {
			t.Fatalf("--time %s --partition gpu: time_limit_seconds %d (want %d), partition %q", tl, j.GetTimeLimitSeconds(), secs, j.GetPartition())
		}
	}
	// --signal (the checkpoint-aware drain's) and --no-requeue, as sbatch's.
	if _, errOut, code := run(t, gw, "jobs", "submit", "--cluster", "demo", "--signal", "SIGUSR2@120", "--no-requeue", "--", "loom", "train"); code != 0 {
		t.Fatalf("--signal: exit %d: %s", code, errOut)
	}
	req, _ = fakegw.LastRequest[*loomv1.SubmitJobRequest](f)
	if j := req.GetJob(); j.GetSignal() != "USR2@120" || j.Requeue == nil || j.GetRequeue() {
		t.Fatalf("--signal SIGUSR2@120 --no-requeue: signal %q, requeue %v", j.GetSignal(), j.Requeue)
	}
}

func TestJobsSubmitWait(t *testing.T) {
	t.Parallel()
	f, gw := newFakeGateway(t)
	base := &loomv1.Job{Name: "projects/default/jobs/10", JobId: "10", Cluster: "projects/default/clusters/demo"}
	state := func(s loomv1.JobState, reason string, nodes []string, exit int32) *loomv1.Job {
		j := proto.Clone(base).(*loomv1.Job)
		j.State, j.StateReason, j.Nodes, j.ExitCode = s, reason, nodes, exit
		return j
	}
	f.Watch = []*loomv1.Job{
		state(loomv1.JobState_PENDING, "", nil, 0),
		state(loomv1.JobState_PENDING, "Resources", nil, 0),
		state(loomv1.JobState_PENDING, "Resources", nil, 0), // no change: not printed again
		state(loomv1.JobState_RUNNING, "", []string{"cpu-0001", "cpu-0002"}, 0),
		state(loomv1.JobState_COMPLETED, "", []string{"cpu-0001", "cpu-0002"}, 0),
	}
	out, errOut, code := run(t, gw, "jobs", "submit", "--cluster", "demo", "--wait", "--", "true")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	golden(t, out, `
Submitted job 10 on cluster demo
  PENDING
  PENDING (Resources)
  RUNNING on cpu-0001, cpu-0002
  COMPLETED (exit 0)
`)
	if req, _ := fakegw.LastRequest[*loomv1.WatchJobRequest](f); req.GetName() != "projects/default/jobs/10" {
		t.Fatalf("WatchJob request = %v", req)
	}

	f.Watch = []*loomv1.Job{state(loomv1.JobState_RUNNING, "", []string{"cpu-0001"}, 0), state(loomv1.JobState_FAILED, "", nil, 3)}
	out, errOut, code = run(t, gw, "jobs", "submit", "--cluster", "demo", "--wait", "--", "false")
	if code != 1 || !strings.Contains(out, "FAILED (exit 3)") ||
		!strings.Contains(errOut, "job 10 ended FAILED (exit 3); see its output with `loom jobs logs 10`") {
		t.Fatalf("failed job: exit %d\n%s%s", code, out, errOut)
	}
}

func TestJobsWatchLogsCancel(t *testing.T) {
	t.Parallel()
	f, gw := newFakeGateway(t)
	f.Watch = []*loomv1.Job{
		{Name: "projects/default/jobs/7", JobId: "7", State: loomv1.JobState_RUNNING, Nodes: []string{"gpu-0001"}},
		{Name: "projects/default/jobs/7", JobId: "7", State: loomv1.JobState_CANCELLED, ExitCode: 143},
	}
	out, errOut, code := run(t, gw, "jobs", "watch", "7")
	if code != 0 {
		t.Fatalf("watch: exit %d: %s", code, errOut)
	}
	golden(t, out, "\n15:04:05  RUNNING on gpu-0001\n15:04:05  CANCELLED (exit 143)\n")

	out, _, code = run(t, gw, "jobs", "watch", "7", "-o", "json")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var j loomv1.Job
	if code != 0 || len(lines) != 2 || protojson.Unmarshal([]byte(lines[1]), &j) != nil || j.GetState() != loomv1.JobState_CANCELLED {
		t.Fatalf("watch -o json: exit %d, %q", code, out)
	}

	out, errOut, code = run(t, gw, "jobs", "logs", "7", "-f")
	if code != 0 {
		t.Fatalf("logs: exit %d: %s", code, errOut)
	}
	golden(t, out, "\nepoch 1 loss 6.3\nepoch 2 loss 5.1\n")
	if req, _ := fakegw.LastRequest[*loomv1.ReadJobLogsRequest](f); req.GetName() != "projects/default/jobs/7" || !req.GetFollow() {
		t.Fatalf("ReadJobLogs request = %v", req)
	}
	if _, errOut, code := run(t, gw, "jobs", "logs", "7", "--tail", "20"); code != 0 {
		t.Fatalf("logs --tail 20: exit %d: %s", code, errOut)
	}
	if req, _ := fakegw.LastRequest[*loomv1.ReadJobLogsRequest](f); req.GetTailLines() != 20 || req.GetFollow() {
		t.Fatalf("logs --tail 20: ReadJobLogs request = %v", req)
	}

	// Job 3 is pending: the gateway's answer shows it cancelled at once.
	f.Jobs = append(f.Jobs, &loomv1.Job{Name: "projects/default/jobs/3", JobId: "3", Cluster: "projects/default/clusters/demo",
		State: loomv1.JobState_PENDING})
	for id, want := range map[string]string{
		"3": "Job 3 cancelled\n",
		"7": "Job 7: cancel requested (it was RUNNING on gpu-0001, gpu-0002); follow it with `loom jobs watch 7`\n",
	} {
		out, errOut, code = run(t, gw, "jobs", "cancel", id)
		if code != 0 {
			t.Fatalf("cancel %s: exit %d: %s", id, code, errOut)
		}
		if out != want {
			t.Errorf("cancel %s: %q, want %q", id, out, want)
		}
	}
	// Job 8 has ended (FAILED): nothing is cancelled, and a script sees
	// the failure (TestJobsCancelEndedJob: the gateway's refusal).
	if out, errOut, code := run(t, gw, "jobs", "cancel", "8"); code != 1 || out != "" ||
		errOut != "Error: cancel job 8: it is already FAILED (exit 3): nothing to cancel (see how it ended with `loom jobs get 8`)\n" {
		t.Errorf("cancel 8: exit %d, stdout %q, stderr %q; want exit 1 and how it ended", code, out, errOut)
	}
	if req, _ := fakegw.LastRequest[*loomv1.CancelJobRequest](f); !strings.HasPrefix(req.GetName(), "projects/default/jobs/") ||
		req.GetUser() == "" || req.GetUser() != cmp.Or(os.Getenv("LOOM_USER"), os.Getenv("USER"), slurmcli.AccountName()) {
		t.Fatalf("CancelJob request = %v; want it to name the caller (to a gateway without authentication, as here: LOOM_USER, USER, else the account), as submit names the owner", req)
	}
	// Another user's job: the refusal says whose it is, and its kind once.
	f.DenyOthers = true
	f.Jobs = append(f.Jobs, &loomv1.Job{Name: "projects/default/jobs/4", JobId: "4", User: "someone-else", Cluster: "projects/default/clusters/demo",
		State: loomv1.JobState_PENDING})
	if _, errOut, code := run(t, gw, "jobs", "cancel", "4"); code != 1 ||
		!strings.HasSuffix(errOut, "cancel job 4: permission denied: job 4 is someone-else's; only its owner or an administrator of its project may act on it (`loom auth whoami` shows who you are and your roles; a project admin grants one with `loom auth members set`)\n") {
		t.Errorf("cancel of another user's job: exit %d, %q", code, errOut)
	}
}

func TestAgentCommand(t *testing.T) {
	t.Parallel()
	var usage strings.Builder
	_, errOut, code := run(t, "127.0.0.1:1", "agent", "--no-such-flag")
	if code != 1 || !strings.Contains(errOut, "agent flags") {
		t.Fatalf("bad agent flag: exit %d, %q", code, errOut)
	}
	// -h lists the agent's own flags (from services/agent) and is not an error.
	a := newApp()
	code = a.execute(t.Context(), []string{"agent", "-h"}, &usage, &usage)
	if code != 0 || !strings.Contains(usage.String(), "-node") || !strings.Contains(usage.String(), "-brokers") {
		t.Fatalf("agent -h: exit %d, %q", code, usage.String())
	}
}

// TestNodesListAllProjects: every project's nodes carry a PROJECT column,
// as every project's audit and ingress lists do: two projects' clusters
// may share an id ("demo"), and CLUSTER alone would not tell their nodes
// apart. One project's list stays without it.
func TestNodesListAllProjects(t *testing.T) {
	t.Parallel()
	f := newFakeGatewayData()
	f.Nodes = append(f.Nodes, &loomv1.Node{Name: "projects/other/clusters/demo/nodes/gpu-0001", Cluster: "projects/other/clusters/demo",
		NodePool: "gpu", Hostname: "gpu-0001", State: loomv1.Node_READY, Gpus: 8})
	gw := f.Serve(t)
	for _, args := range [][]string{{"--all-projects"}, {"--project", "-"}} {
		out, errOut, code := run(t, gw, append([]string{"nodes", "list"}, args...)...)
		if code != 0 || !regexp.MustCompile(`^PROJECT +NODE +CLUSTER `).MatchString(out) || !regexp.MustCompile(`(?m)^other +gpu-0001 +demo `).MatchString(out) ||
			!regexp.MustCompile(`(?m)^default +gpu-0001 +demo `).MatchString(out) {
			t.Errorf("nodes list %v: exit %d, stderr %q, stdout:\n%s", args, code, errOut, out)
		}
	}
	if out, _, _ := run(t, gw, "nodes", "list"); !strings.HasPrefix(out, "NODE ") || strings.Contains(out, "other") {
		t.Errorf("one project's nodes list:\n%s", out)
	}
	// Health unread: the command the note under the table suggests
	// reaches that project's cluster, not the default project's of the
	// same id ("loom health nodes demo" asks projects/default).
	for _, c := range []struct {
		err  error
		next string
	}{
		{status.Error(codes.Unavailable, "health: connection refused"), "`loom health nodes demo --project other` shows it"},
		{status.Error(codes.Unimplemented, "unknown service loom.v1.HealthService"), "`loom --project other slurm sinfo -R -M demo` shows drained nodes"},
	} {
		f := newFakeGatewayData()
		f.Nodes = []*loomv1.Node{{Name: "projects/other/clusters/demo/nodes/gpu-0001", Cluster: "projects/other/clusters/demo", Hostname: "gpu-0001", State: loomv1.Node_READY}}
		f.NodeHealthErr = c.err
		out, errOut, code := run(t, f.Serve(t), "nodes", "list", "--all-projects")
		if code != 0 || !strings.Contains(out, c.next) {
			t.Errorf("health %v: exit %d, stderr %q, want %q under the table:\n%s", status.Code(c.err), code, errOut, c.next, out)
		}
	}
}

func TestListFilters(t *testing.T) {
	t.Parallel()
	f, gw := newFakeGateway(t)
	run(t, gw, "nodes", "list")
	if req, _ := fakegw.LastRequest[*loomv1.ListNodesRequest](f); req.GetParent() != "projects/default/clusters/-" {
		t.Fatalf("nodes list: parent %q", req.GetParent())
	}
	run(t, gw, "nodes", "list", "--cluster", "demo")
	if req, _ := fakegw.LastRequest[*loomv1.ListNodesRequest](f); req.GetParent() != "projects/default/clusters/demo" {
		t.Fatalf("nodes list --cluster: parent %q", req.GetParent())
	}
	// As "loom health nodes CLUSTER" takes it.
	run(t, gw, "nodes", "list", "other")
	if req, _ := fakegw.LastRequest[*loomv1.ListNodesRequest](f); req.GetParent() != "projects/default/clusters/other" {
		t.Fatalf("nodes list CLUSTER: parent %q", req.GetParent())
	}
	if _, stderr, code := run(t, gw, "nodes", "list", "other", "--cluster", "demo"); code == 0 || !strings.Contains(stderr, "two clusters given") {
		t.Fatalf("nodes list with two clusters: exit %d, %q", code, stderr)
	}
	// A cluster administrator's view of every project's nodes.
	for _, args := range [][]string{{"--all-projects"}, {"--project", "-"}} {
		run(t, gw, append([]string{"nodes", "list"}, args...)...)
		if req, _ := fakegw.LastRequest[*loomv1.ListNodesRequest](f); req.GetParent() != "projects/-/clusters/-" {
			t.Fatalf("nodes list %v: parent %q", args, req.GetParent())
		}
	}
	if _, stderr, code := run(t, gw, "nodes", "list", "--all-projects", "--cluster", "demo"); code == 0 || !strings.Contains(stderr, "--all-projects lists every cluster's nodes") {
		t.Fatalf("nodes list --all-projects --cluster: exit %d, %q", code, stderr)
	}
	run(t, gw, "jobs", "list", "--cluster", "demo")
	if req, _ := fakegw.LastRequest[*loomv1.ListJobsRequest](f); req.GetParent() != "projects/default" || req.GetCluster() != "projects/default/clusters/demo" {
		t.Fatalf("jobs list --cluster: %v", req)
	}
	run(t, gw, "models", "list", "--versions", "demo-regressor", "--project", "p")
	if req, _ := fakegw.LastRequest[*loomv1.ListModelVersionsRequest](f); req.GetParent() != "projects/p/models/demo-regressor" {
		t.Fatalf("models list --versions: %v", req)
	}
}

func TestParseClusterFile(t *testing.T) {
	t.Parallel()
	req, err := parseClusterFile("c.json", []byte(`{"name": "demo", "status": {"state": "RUNNING"}, "compute": {"nodePools": [{"id": "cpu", "nodeCount": 2}]}}`), "p")
	if err != nil {
		t.Fatal(err)
	}
	if req.GetParent() != "projects/p" || req.GetClusterId() != "demo" || req.GetCluster().GetName() != "projects/p/clusters/demo" || req.GetCluster().GetStatus() != nil {
		t.Fatalf("request = %v", req)
	}
	bad := []struct {
		json string
		want []string
	}{
		{``, []string{"c.json", "empty"}},
		{`{"name": "demo", "compute": {"nodePoolz": []}}`, []string{"c.json: not a valid cluster: compute.node_poolz: unknown field \"nodePoolz\" (line 1:30)"}},
		{`{"name": "demo", "compute": {"nodePools": [{"id": "cpu", "nodeCount": "two"}]}}`, []string{"c.json", "compute.node_pools[0].node_count: invalid value for int32 field nodeCount: \"two\" (line 1:71)"}},
		{`{"name": "demo", "labels": {"a": 1}}`, []string{"c.json", "labels.a: "}},
		{`{"name": "demo",}`, []string{"c.json", "(line 1:"}},
		{`{"compute": {}}`, []string{"c.json", `field "name" is required`}},
		{`{"name": "Demo_1"}`, []string{`field "name"`, `"Demo_1" is not a valid cluster id`}},
		{`{"name": "projects/p/nodes/x"}`, []string{`field "name"`, "not a cluster name"}},
	}
	for _, b := range bad {
		_, err := parseClusterFile("c.json", []byte(b.json), "p")
		if err == nil {
			t.Errorf("%s: no error", b.json)
			continue
		}
		for _, w := range b.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not contain %q", b.json, err, w)
			}
		}
		if strings.Contains(err.Error(), "proto:") || strings.Contains(err.Error(), "\u00a0") {
			t.Errorf("%s: error %q keeps protojson's noise", b.json, err)
		}
	}
}

// TestExampleClustersMatchTheFiles: loom's built-in example clusters
// (`loom clusters example NAME`, the demo's fallback) are the files of
// examples/clusters/, each one, byte for byte.
func TestExampleClustersMatchTheFiles(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("..", "..", "..", "..", "examples", "clusters", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no example clusters: %v", err)
	}
	var names []string
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		names = append(names, name)
		example, err := os.ReadFile(f)
		if err != nil {
			t.Fatalf("read the example: %v", err)
		}
		built, err := exampleClusterFiles.ReadFile("exampleclusters/" + name + ".json")
		if err != nil || string(example) != string(built) {
			t.Errorf("examples/clusters/%s.json and cmd/loom/internal/cli/exampleclusters/%[1]s.json differ (%v): copy the example over the built-in one", name, err)
		}
	}
	if got := exampleClusterNames(); !slices.Equal(got, names) {
		t.Errorf("built-in example clusters %v, want those of examples/clusters %v", got, names)
	}
	req, err := parseClusterFile("demo.json", demoClusterJSON, "default")
	if err != nil {
		t.Fatal(err)
	}
	if req.GetClusterId() != "demo" || totalNodes(req.GetCluster()) != 2 {
		t.Fatalf("demo cluster = %v, want demo with 2 nodes", req)
	}
}

func TestHumanDuration(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		-time.Second: "0s", 0: "0s", 45 * time.Second: "45s", 90 * time.Second: "1m", 59 * time.Minute: "59m",
		3 * time.Hour: "3h", 47 * time.Hour: "47h", 72 * time.Hour: "3d",
	} {
		if got := humanDuration(d); got != want {
			t.Errorf("humanDuration(%v) = %q, want %q", d, got, want)
		}
	}
	if age(nil, testNow) != "-" || ago(nil, testNow) != "-" {
		t.Error("no timestamp should render as -")
	}
}

func TestTrainCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out, errOut, code := run(t, "127.0.0.1:1", "train", "--epochs", "30", "--log-every", "10", "--checkpoint-every", "10", "--out", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"epoch 1 loss ", "epoch 30 loss ", "model written to " + filepath.Join(dir, "model.json")} {
		if !strings.Contains(out, want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "checkpoint-000030.json")); err != nil {
		t.Fatal(err)
	}
}

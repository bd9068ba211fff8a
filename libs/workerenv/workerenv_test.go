package workerenv

import (
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// vertexHosts are the hostnames of Vertex's documented CLUSTER_SPEC
// example (cloud.google.com/vertex-ai/docs/training/distributed-training,
// "CLUSTER_SPEC"): one primary, two workers, two parameter servers, three
// evaluators, every replica on port 2222.
var vertexHosts = []string{
	"cmle-training-workerpool0-ab-0",
	"cmle-training-workerpool1-ab-0", "cmle-training-workerpool1-ab-1",
	"cmle-training-workerpool2-ab-0", "cmle-training-workerpool2-ab-1",
	"cmle-training-workerpool3-ab-0", "cmle-training-workerpool3-ab-1", "cmle-training-workerpool3-ab-2",
}

// vertexCluster is that example's "cluster".
const vertexCluster = `{
  "workerpool0": ["cmle-training-workerpool0-ab-0:2222"],
  "workerpool1": ["cmle-training-workerpool1-ab-0:2222", "cmle-training-workerpool1-ab-1:2222"],
  "workerpool2": ["cmle-training-workerpool2-ab-0:2222", "cmle-training-workerpool2-ab-1:2222"],
  "workerpool3": ["cmle-training-workerpool3-ab-0:2222", "cmle-training-workerpool3-ab-1:2222", "cmle-training-workerpool3-ab-2:2222"]
}`

// tfCluster is TF_CONFIG's cluster for the same job, as Vertex documents
// it (chief, worker, ps; the evaluator is not part of TensorFlow's cluster).
const tfCluster = `{
  "chief": ["cmle-training-workerpool0-ab-0:2222"],
  "worker": ["cmle-training-workerpool1-ab-0:2222", "cmle-training-workerpool1-ab-1:2222"],
  "ps": ["cmle-training-workerpool2-ab-0:2222", "cmle-training-workerpool2-ab-1:2222"]
}`

// sameJSON fails unless got and want are the same JSON value.
func sameJSON(t *testing.T, what, got, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		t.Fatalf("%s is not JSON: %v: %s", what, err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("want %s: %v", what, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("%s = %s\nwant %s", what, got, want)
	}
}

func TestVertexDocumentedExample(t *testing.T) {
	t.Parallel()
	pools := `[{"replicaCount":1},{"replicaCount":"2"},{"replicaCount":2},{"replicaCount":3}]`
	cases := []struct {
		node             int
		csTask, tfTask   string
		rank, worldSize  string
		masterAddr, port string
	}{
		{0, `{"type":"workerpool0","index":0}`, `{"type":"chief","index":0}`, "0", "8", "cmle-training-workerpool0-ab-0", "2222"},
		{2, `{"type":"workerpool1","index":1}`, `{"type":"worker","index":1}`, "2", "8", "cmle-training-workerpool0-ab-0", "2222"},
		{3, `{"type":"workerpool2","index":0}`, `{"type":"ps","index":0}`, "3", "8", "cmle-training-workerpool0-ab-0", "2222"},
		{7, `{"type":"workerpool3","index":2}`, `{"type":"evaluator","index":2}`, "7", "8", "cmle-training-workerpool0-ab-0", "2222"},
	}
	for _, c := range cases {
		t.Run(strconv.Itoa(c.node), func(t *testing.T) {
			t.Parallel()
			env, err := Env(Input{Pools: pools, NodeIndex: c.node, Hostnames: vertexHosts, JobID: "7",
				Env: map[string]string{MasterPortEnv: "2222"}})
			if err != nil {
				t.Fatal(err)
			}
			sameJSON(t, "CLUSTER_SPEC", env["CLUSTER_SPEC"],
				`{"cluster":`+vertexCluster+`,"environment":"cloud","task":`+c.csTask+`}`)
			sameJSON(t, "TF_CONFIG", env["TF_CONFIG"],
				`{"cluster":`+tfCluster+`,"environment":"cloud","task":`+c.tfTask+`}`)
			want := map[string]string{"MASTER_ADDR": c.masterAddr, "MASTER_PORT": c.port, "WORLD_SIZE": c.worldSize,
				"RANK": c.rank, "NODE_RANK": c.rank, "LOCAL_RANK": "0"}
			for k, v := range want {
				if env[k] != v {
					t.Errorf("%s = %q, want %q", k, env[k], v)
				}
			}
			if len(env) != 8 {
				t.Errorf("got %d variables, want 8: %v", len(env), env)
			}
		})
	}
}

// TestExactShape: the bytes, not only the value — Vertex's key order
// (cluster, environment, task, job), compact, a trial's id in the task and
// the job's spec as "job".
func TestExactShape(t *testing.T) {
	t.Parallel()
	env, err := Env(Input{Pools: `[{"replicaCount":1},{"replicaCount":0},{"replicaCount":0},{"replicaCount":0}]`,
		Hostnames: []string{"cj-7-p0-0001"}, JobID: "1007",
		Env: map[string]string{TrialEnv: "3", JobSpecEnv: `{ "workerPoolSpecs": [ {"replicaCount": "1"} ] }`}})
	if err != nil {
		t.Fatal(err)
	}
	job := `{"workerPoolSpecs":[{"replicaCount":"1"}]}`
	if want := `{"cluster":{"workerpool0":["cj-7-p0-0001:29507"]},"environment":"cloud","task":{"type":"workerpool0","index":0,"trial":"3"},"job":` + job + `}`; env["CLUSTER_SPEC"] != want {
		t.Errorf("CLUSTER_SPEC = %s\nwant %s", env["CLUSTER_SPEC"], want)
	}
	if want := `{"cluster":{"chief":["cj-7-p0-0001:29507"]},"environment":"cloud","task":{"type":"chief","index":0,"trial":"3"},"job":` + job + `}`; env["TF_CONFIG"] != want {
		t.Errorf("TF_CONFIG = %s\nwant %s", env["TF_CONFIG"], want)
	}
	if env["MASTER_PORT"] != "29507" || env["MASTER_ADDR"] != "cj-7-p0-0001" || env["WORLD_SIZE"] != "1" {
		t.Errorf("torchrun variables: %v", env)
	}
	// Without a trial or a spec: neither key; a spec too large is left out.
	env, err = Env(Input{Pools: `[{"replicaCount":1}]`, Hostnames: []string{"h0"}, JobID: "5",
		Env: map[string]string{JobSpecEnv: `{"x":"` + strings.Repeat("a", MaxJobSpec) + `"}`}})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"cluster":{"workerpool0":["h0:29505"]},"environment":"cloud","task":{"type":"workerpool0","index":0}}`; env["CLUSTER_SPEC"] != want {
		t.Errorf("CLUSTER_SPEC = %s\nwant %s", env["CLUSTER_SPEC"], want)
	}
}

// TestBadInput: each mistake is an error that names it.
func TestBadInput(t *testing.T) {
	t.Parallel()
	ok := Input{Pools: `[{"replicaCount":1},{"replicaCount":2}]`, NodeIndex: 1, Hostnames: []string{"a", "b", "c"}, JobID: "9"}
	cases := []struct {
		name  string
		edit  func(*Input)
		wants string
	}{
		{"absent", func(in *Input) { in.Pools = "" }, "LOOM_WORKER_POOLS is empty"},
		{"not json", func(in *Input) { in.Pools = "[{" }, "not a JSON array"},
		{"object", func(in *Input) { in.Pools = `{"replicaCount":1}` }, "not a JSON array"},
		{"no pools", func(in *Input) { in.Pools = `[]` }, "0 worker pools"},
		{"five pools", func(in *Input) { in.Pools = `[{},{},{},{},{}]` }, "5 worker pools"},
		{"null pool", func(in *Input) { in.Pools = `[{"replicaCount":1},null]` }, "LOOM_WORKER_POOLS[1] is null"},
		{"negative", func(in *Input) { in.Pools = `[{"replicaCount":1},{"replicaCount":-2}]` }, "[1].replicaCount is -2"},
		{"huge", func(in *Input) { in.Pools = `[{"replicaCount":1},{"replicaCount":1e9}]` }, "[1].replicaCount"},
		{"fraction", func(in *Input) { in.Pools = `[{"replicaCount":1.5}]` }, "not an integer"},
		{"text", func(in *Input) { in.Pools = `[{"replicaCount":"two"}]` }, `"two" is not an integer`},
		{"no primary", func(in *Input) { in.Pools = `[{"replicaCount":0},{"replicaCount":3}]` }, "primary replica's pool) has 0"},
		{"two primaries", func(in *Input) { in.Pools = `[{"replicaCount":2},{"replicaCount":1}]` }, "has 2 replicas: want exactly 1"},
		{"too many replicas", func(in *Input) {
			in.Pools = `[{"replicaCount":1},{"replicaCount":1024},{"replicaCount":1024}]`
		}, "2049 replicas in all"},
		{"nodes", func(in *Input) { in.Hostnames = in.Hostnames[:2] }, "2 nodes but LOOM_WORKER_POOLS counts 3"},
		{"index", func(in *Input) { in.NodeIndex = 3 }, "node index 3 is outside"},
		{"negative index", func(in *Input) { in.NodeIndex = -1 }, "node index -1"},
		{"empty host", func(in *Input) { in.Hostnames = []string{"a", "", "c"} }, "node hostname 1 is empty"},
		{"host with port", func(in *Input) { in.Hostnames = []string{"a", "b:1", "c"} }, `node hostname 1 "b:1" holds ':'`},
		{"long host", func(in *Input) { in.Hostnames = []string{"a", strings.Repeat("b", 254), "c"} }, "254 bytes long"},
		{"job id", func(in *Input) { in.JobID = "x7" }, `job id "x7" is not numeric`},
		{"no job id", func(in *Input) { in.JobID = "" }, "set LOOM_MASTER_PORT"},
		{"port", func(in *Input) { in.Env = map[string]string{MasterPortEnv: "70000"} }, `LOOM_MASTER_PORT is "70000"`},
		{"spec", func(in *Input) { in.Env = map[string]string{JobSpecEnv: `[1]`} }, "LOOM_CUSTOM_JOB_SPEC is not a JSON object"},
		{"trial", func(in *Input) { in.Env = map[string]string{TrialEnv: "\xff"} }, "CLOUD_ML_TRIAL_ID is not valid UTF-8"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			in := ok
			c.edit(&in)
			env, err := Env(in)
			if err == nil || !strings.Contains(err.Error(), c.wants) {
				t.Fatalf("Env = %v, %v; want an error with %q", env, err, c.wants)
			}
		})
	}
	if _, err := Env(ok); err != nil {
		t.Fatalf("the good input: %v", err)
	}
}

// FuzzEnv: no input panics, and whatever Env accepts is consistent: the
// task names this node's own address in CLUSTER_SPEC, RANK is the node
// index, WORLD_SIZE the node count, every replica is in the cluster once.
func FuzzEnv(f *testing.F) {
	f.Add(`[{"replicaCount":1},{"replicaCount":2}]`, 1, "a,b,c", "9", "", "")
	f.Add(`[{"replicaCount":1},{"replicaCount":0},{"replicaCount":1},{"replicaCount":"1"}]`, 2, "h0,h1,h2", "12", "2222", "4")
	f.Add(`[{"replicaCount":1}]`, 0, "x", "", "1", `{"a":1}`)
	f.Add(`[{"replica_count":"1"},{}]`, 0, "x", "3", "", "")
	f.Add(`[null]`, -1, ",", "-1", "0", "null")
	f.Fuzz(func(t *testing.T, pools string, index int, hosts, jobID, port, trial string) {
		in := Input{Pools: pools, NodeIndex: index, Hostnames: strings.Split(hosts, ","), JobID: jobID,
			Env: map[string]string{MasterPortEnv: port, TrialEnv: trial, JobSpecEnv: trial}}
		env, err := Env(in)
		if err != nil {
			if env != nil || err.Error() == "" {
				t.Fatalf("an error with variables: %v, %v", env, err)
			}
			return
		}
		var cs ClusterSpec
		if err := json.Unmarshal([]byte(env["CLUSTER_SPEC"]), &cs); err != nil {
			t.Fatalf("CLUSTER_SPEC is not JSON: %v", err)
		}
		var tf ClusterSpec
		if err := json.Unmarshal([]byte(env["TF_CONFIG"]), &tf); err != nil {
			t.Fatalf("TF_CONFIG is not JSON: %v", err)
		}
		addrs := cs.Cluster[cs.Task.Type]
		if cs.Task.Index < 0 || cs.Task.Index >= len(addrs) ||
			addrs[cs.Task.Index] != in.Hostnames[index]+":"+env["MASTER_PORT"] {
			t.Fatalf("task %+v does not name node %d (%s) in %v", cs.Task, index, in.Hostnames[index], cs.Cluster)
		}
		n := 0
		for _, a := range cs.Cluster {
			n += len(a)
		}
		if n != len(in.Hostnames) || env["WORLD_SIZE"] != strconv.Itoa(n) || env["RANK"] != strconv.Itoa(index) ||
			env["MASTER_ADDR"] != in.Hostnames[0] || cs.Task.Trial != trial || cs.Environment != "cloud" {
			t.Fatalf("inconsistent: %v", env)
		}
		if tf.Task.Index != cs.Task.Index {
			t.Fatalf("TF_CONFIG task %+v, CLUSTER_SPEC task %+v", tf.Task, cs.Task)
		}
	})
}

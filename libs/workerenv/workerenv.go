// Package workerenv computes the environment of one replica of a
// serverless training job (a CustomJob), as Vertex AI gives it to each
// replica: CLUSTER_SPEC and TF_CONFIG (the pools, their replicas'
// addresses, this replica's task), and torchrun's MASTER_ADDR,
// MASTER_PORT, WORLD_SIZE, RANK, NODE_RANK and LOCAL_RANK.
//
// It is a pure function of what the agent knows when it starts a step: the
// job's LOOM_WORKER_POOLS (the replica count of each worker pool, in pool
// order), the node's index in the allocation and the allocation's
// hostnames, the job id, and the job's environment. Replicas map to nodes
// in node order: nodes 0 .. r0-1 are pool 0's, the next r1 pool 1's, and so
// on. Anything missing or malformed is an error that names what is wrong
// (the step then fails to start with it); no input makes it panic.
package workerenv

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Variables of the job's environment that this package reads.
const (
	// PoolsEnv holds the pools' replica counts: JSON
	// [{"replicaCount":1},{"replicaCount":3},...], pool order, empty pools
	// present with 0. Its presence marks a step as a CustomJob replica.
	PoolsEnv = "LOOM_WORKER_POOLS"
	// MasterPortEnv, when set, is MASTER_PORT and every replica's port.
	MasterPortEnv = "LOOM_MASTER_PORT"
	// TrialEnv is the tuning trial's id (CLUSTER_SPEC's task.trial).
	TrialEnv = "CLOUD_ML_TRIAL_ID"
	// JobSpecEnv, when set, is the CustomJobSpec as JSON (an object):
	// CLUSTER_SPEC's and TF_CONFIG's "job", as Vertex gives it.
	JobSpecEnv = "LOOM_CUSTOM_JOB_SPEC"
)

// Limits on the input: generous beyond what the training service sends
// (at most 4 pools of 64 replicas), tight enough that no input makes the
// output huge.
const (
	// MaxPools is how many worker pools Vertex has: primary, workers,
	// parameter servers, evaluators.
	MaxPools = 4
	// MaxReplicas bounds the replicas of a job, all pools together.
	MaxReplicas = 1024
	// MaxHostname is the longest hostname taken (DNS's limit).
	MaxHostname = 253
	// MaxJobSpec is the largest LOOM_CUSTOM_JOB_SPEC embedded as "job":
	// a larger one is left out (the variables would near the kernel's
	// 128 KiB limit on one environment string).
	MaxJobSpec = 32 << 10
	// BasePort is MASTER_PORT's base when the job sets none: BasePort +
	// job id % 1000, so that jobs sharing nodes (a persistent cluster)
	// do not share a port.
	BasePort = 29500
)

// tfTypes are TF_CONFIG's task types by pool, as Vertex maps them.
var tfTypes = [MaxPools]string{"chief", "worker", "ps", "evaluator"}

// Input is what a node knows of its replica when the step starts.
type Input struct {
	// Pools is LOOM_WORKER_POOLS' value.
	Pools string
	// NodeIndex is this node's index in the allocation (StartStep.node_index).
	NodeIndex int
	// Hostnames are the allocation's nodes in order (StartStep.node_hostnames).
	Hostnames []string
	// JobID is the scheduler job's id (numeric), for the default port.
	JobID string
	// Env is the job's environment (LOOM_MASTER_PORT, CLOUD_ML_TRIAL_ID,
	// LOOM_CUSTOM_JOB_SPEC).
	Env map[string]string
}

// Pool is one worker pool as LOOM_WORKER_POOLS gives it.
type Pool struct {
	ReplicaCount int
}

// ClusterSpec is CLUSTER_SPEC's shape (and TF_CONFIG's, with TF's task
// names): field order as Vertex writes it.
type ClusterSpec struct {
	Cluster     map[string][]string `json:"cluster"`
	Environment string              `json:"environment"`
	Task        Task                `json:"task"`
	Job         json.RawMessage     `json:"job,omitempty"`
}

// Task is this replica's task: its pool's name and its index there, and
// the tuning trial it belongs to (omitted outside a tuning job).
type Task struct {
	Type  string `json:"type"`
	Index int    `json:"index"`
	Trial string `json:"trial,omitempty"`
}

// ParsePools decodes LOOM_WORKER_POOLS: a JSON array of 1..MaxPools
// objects with a replicaCount (a number, or a numeric string as protojson
// writes an int64) from 0 to MaxReplicas; other fields are ignored.
func ParsePools(s string) ([]Pool, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("%s is empty: want a JSON array like [{\"replicaCount\":1}]", PoolsEnv)
	}
	var raw []map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &raw); err != nil {
		return nil, fmt.Errorf("%s is not a JSON array of objects: %v", PoolsEnv, err)
	}
	if len(raw) == 0 || len(raw) > MaxPools {
		return nil, fmt.Errorf("%s has %d worker pools: want 1 to %d", PoolsEnv, len(raw), MaxPools)
	}
	pools := make([]Pool, len(raw))
	for i, p := range raw {
		if p == nil {
			return nil, fmt.Errorf("%s[%d] is null: want an object with replicaCount", PoolsEnv, i)
		}
		v, ok := p["replicaCount"]
		if !ok {
			v, ok = p["replica_count"]
		}
		n := int64(0)
		if ok {
			var err error
			if n, err = count(v); err != nil {
				return nil, fmt.Errorf("%s[%d].replicaCount: %v", PoolsEnv, i, err)
			}
		}
		if n < 0 || n > MaxReplicas {
			return nil, fmt.Errorf("%s[%d].replicaCount is %d: want 0 to %d", PoolsEnv, i, n, MaxReplicas)
		}
		pools[i].ReplicaCount = int(n)
	}
	return pools, nil
}

// count decodes a replica count: a JSON integer or a string holding one.
func count(v json.RawMessage) (int64, error) {
	var s string
	if json.Unmarshal(v, &s) != nil {
		s = string(bytes.TrimSpace(v))
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%.40q is not an integer", s)
	}
	return n, nil
}

// Env returns the replica's variables (CLUSTER_SPEC, TF_CONFIG,
// MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, NODE_RANK, LOCAL_RANK), or an
// error naming what is wrong with in.
//
// Every replica's address is its node's hostname and the job's port
// (MASTER_PORT): one port per job, as Vertex gives every replica port 2222.
// TF_CONFIG names pools 0..3 chief, worker, ps and evaluator; the
// evaluator, as TensorFlow wants, is not in its cluster. Pools with no
// replicas are not in either cluster.
func Env(in Input) (map[string]string, error) {
	pools, err := ParsePools(in.Pools)
	if err != nil {
		return nil, err
	}
	total := 0
	for _, p := range pools {
		total += p.ReplicaCount
	}
	if total > MaxReplicas {
		return nil, fmt.Errorf("%s has %d replicas in all: at most %d", PoolsEnv, total, MaxReplicas)
	}
	if pools[0].ReplicaCount != 1 {
		return nil, fmt.Errorf("%s[0] (the primary replica's pool) has %d replicas: want exactly 1", PoolsEnv, pools[0].ReplicaCount)
	}
	if len(in.Hostnames) != total {
		return nil, fmt.Errorf("the job has %d nodes but %s counts %d replicas: want one node per replica", len(in.Hostnames), PoolsEnv, total)
	}
	if in.NodeIndex < 0 || in.NodeIndex >= total {
		return nil, fmt.Errorf("node index %d is outside the job's %d nodes", in.NodeIndex, total)
	}
	for i, h := range in.Hostnames {
		if err := checkHost(h); err != nil {
			return nil, fmt.Errorf("node hostname %d %v", i, err)
		}
	}
	port, err := masterPort(in.JobID, in.Env[MasterPortEnv])
	if err != nil {
		return nil, err
	}
	var job json.RawMessage
	if s := in.Env[JobSpecEnv]; s != "" && len(s) <= MaxJobSpec {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal([]byte(s), &obj); err != nil || obj == nil {
			return nil, fmt.Errorf("%s is not a JSON object", JobSpecEnv)
		}
		var b bytes.Buffer
		if err := json.Compact(&b, []byte(s)); err != nil {
			return nil, fmt.Errorf("%s: %v", JobSpecEnv, err)
		}
		job = b.Bytes()
	}
	trial := in.Env[TrialEnv]
	if !utf8.ValidString(trial) {
		return nil, fmt.Errorf("%s is not valid UTF-8", TrialEnv)
	}
	ps := strconv.Itoa(port)
	cs := ClusterSpec{Cluster: map[string][]string{}, Environment: "cloud", Job: job}
	tf := ClusterSpec{Cluster: map[string][]string{}, Environment: "cloud", Job: job}
	node := 0
	for i, p := range pools {
		for r := range p.ReplicaCount {
			addr := in.Hostnames[node] + ":" + ps
			cs.Cluster[poolName(i)] = append(cs.Cluster[poolName(i)], addr)
			if i != 3 {
				tf.Cluster[tfTypes[i]] = append(tf.Cluster[tfTypes[i]], addr)
			}
			if node == in.NodeIndex {
				cs.Task = Task{Type: poolName(i), Index: r, Trial: trial}
				tf.Task = Task{Type: tfTypes[i], Index: r, Trial: trial}
			}
			node++
		}
	}
	csj, err := json.Marshal(cs)
	if err != nil {
		return nil, fmt.Errorf("CLUSTER_SPEC: %v", err)
	}
	tfj, err := json.Marshal(tf)
	if err != nil {
		return nil, fmt.Errorf("TF_CONFIG: %v", err)
	}
	rank := strconv.Itoa(in.NodeIndex)
	return map[string]string{
		"CLUSTER_SPEC": string(csj),
		"TF_CONFIG":    string(tfj),
		"MASTER_ADDR":  in.Hostnames[0],
		"MASTER_PORT":  ps,
		"WORLD_SIZE":   strconv.Itoa(total),
		"RANK":         rank,
		"NODE_RANK":    rank,
		"LOCAL_RANK":   "0",
	}, nil
}

// poolName is CLUSTER_SPEC's name of pool i.
func poolName(i int) string { return "workerpool" + strconv.Itoa(i) }

// masterPort is LOOM_MASTER_PORT when set (1..65535), else BasePort + the
// numeric job id % 1000.
func masterPort(jobID, set string) (int, error) {
	if set != "" {
		p, err := strconv.Atoi(set)
		if err != nil || p < 1 || p > 65535 {
			return 0, fmt.Errorf("%s is %.40q: want a port from 1 to 65535", MasterPortEnv, set)
		}
		return p, nil
	}
	id, err := strconv.ParseUint(jobID, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("job id %.40q is not numeric, so no default MASTER_PORT: set %s", jobID, MasterPortEnv)
	}
	return BasePort + int(id%1000), nil
}

// checkHost accepts a hostname as an address's host: 1..MaxHostname
// letters, digits, '-', '.' and '_' (what a node's name may hold).
func checkHost(h string) error {
	if h == "" {
		return fmt.Errorf("is empty")
	}
	if len(h) > MaxHostname {
		return fmt.Errorf("is %d bytes long: at most %d", len(h), MaxHostname)
	}
	for _, c := range []byte(h) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_'
		if !ok {
			return fmt.Errorf("%.40q holds %q: want letters, digits, '-', '.', '_'", h, c)
		}
	}
	return nil
}

package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sort"
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler/internal/domain"
	"github.com/loom-ml/loom/services/scheduler/internal/domain/jobstore"
	"github.com/loom-ml/loom/services/scheduler/internal/sim/trace"
)

// CycleMachineType is the machine of the benchmark's nodes (8 GPUs; its
// CPUs and memory come from the machine catalog).
const CycleMachineType = "a3-highgpu-8g"

// CycleConfig describes the state one scheduling pass is timed on.
type CycleConfig struct {
	// Nodes of GPUsPerNode GPUs each (default 8), in Partitions node pools,
	// each its own partition (default 4), plus one default partition over
	// all of them.
	Nodes       int
	GPUsPerNode int
	Partitions  int
	// Pending is the number of queued jobs: mixed sizes (1 GPU to 8 nodes),
	// Users users in Accounts accounts, spread over the partitions.
	Pending  int
	Users    int
	Accounts int
	// Busy is the share of GPUs already held by running jobs (default 0.9),
	// so that the pass mostly looks for room and reserves.
	Busy float64
	// Policy is one of Policies (default loom).
	Policy string
	// Repeat is how many passes are timed for each figure (default 3); the
	// median is reported.
	Repeat int
	// Seed makes the state reproducible (default 1).
	Seed uint64
}

// CycleResult is the timing of one scheduling pass.
type CycleResult struct {
	Config  CycleConfig `json:"config"`
	GPUs    int         `json:"gpus"`
	Running int         `json:"running"`
	// Build is how long making the state took (not part of the pass).
	Build time.Duration `json:"build_ns"`
	// First is a pass over the freshly loaded queue: every job gets its
	// priority, placement and reason for the first time.
	First time.Duration `json:"first_ns"`
	// Steady is a pass after that one was committed, as after any event
	// that changed nothing for the queue.
	Steady time.Duration `json:"steady_ns"`
	// Restart is the first pass of a scheduler restarted after that one:
	// a fresh state loaded from the records the first pass left (every job
	// with its reason), as a restarted scheduler loads its store; Load is
	// how long loading them took.
	Restart time.Duration `json:"restart_ns"`
	Load    time.Duration `json:"load_ns"`
	// The same as process CPU time (medians of the same passes; 0 where it
	// cannot be read): on a shared machine wall time also counts the time
	// other processes held the CPUs, CPU time does not (it does count the
	// garbage collector's work on other threads).
	FirstCPU   time.Duration `json:"first_cpu_ns"`
	SteadyCPU  time.Duration `json:"steady_cpu_ns"`
	RestartCPU time.Duration `json:"restart_cpu_ns"`
	LoadCPU    time.Duration `json:"load_cpu_ns"`
	// Started counts the jobs the first pass started, Emits its events.
	Started int `json:"started"`
	Emits   int `json:"emits"`
}

func (c CycleConfig) withDefaults() CycleConfig {
	if c.GPUsPerNode == 0 {
		c.GPUsPerNode = 8
	}
	if c.Partitions == 0 {
		c.Partitions = 4
	}
	if c.Users == 0 {
		c.Users = 200
	}
	if c.Accounts == 0 {
		c.Accounts = 20
	}
	if c.Busy == 0 {
		c.Busy = 0.9
	}
	if c.Policy == "" {
		c.Policy = "loom"
	}
	if c.Repeat == 0 {
		c.Repeat = 3
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	return c
}

func (c CycleConfig) validate() error {
	switch {
	case c.Nodes < 1:
		return fmt.Errorf("nodes must be at least 1, got %d", c.Nodes)
	case c.Pending < 0:
		return fmt.Errorf("pending jobs must not be negative, got %d", c.Pending)
	case c.GPUsPerNode < 1 || c.GPUsPerNode > 64:
		return fmt.Errorf("GPUs per node must be 1..64, got %d", c.GPUsPerNode)
	case c.Partitions < 1 || c.Partitions > c.Nodes:
		return fmt.Errorf("partitions must be 1..nodes (%d), got %d", c.Nodes, c.Partitions)
	case c.Busy < 0 || c.Busy > 1:
		return fmt.Errorf("busy must be between 0 and 1, got %v", c.Busy)
	case c.Repeat < 1:
		return fmt.Errorf("repeat must be at least 1, got %d", c.Repeat)
	case c.Users < 1 || c.Accounts < 1:
		return fmt.Errorf("users and accounts must be at least 1, got %d and %d", c.Users, c.Accounts)
	}
	return nil
}

// Cycle builds the state cfg describes and times scheduling passes over it.
func Cycle(ctx context.Context, cfg CycleConfig) (*CycleResult, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	began := time.Now()
	st, running, err := CycleState(cfg)
	if err != nil {
		return nil, err
	}
	res := &CycleResult{Config: cfg, GPUs: cfg.Nodes * cfg.GPUsPerNode, Running: running, Build: time.Since(began)}
	now := Epoch.Add(24 * time.Hour)
	// Each first pass runs on a fresh copy of the built state, and each
	// steady pass a second after the last: a pass at an instant a pass
	// already ran at, over the same state, could reuse that pass's work,
	// which a real scheduler (a new instant for every pass) never can.
	built := st.Snapshot()
	var first *domain.Change
	res.First, res.FirstCPU = medianAfter(cfg.Repeat, func() {
		st = domain.NewState(st.Config())
		st.Restore(built)
	}, func() {
		first = st.Schedule(now)
	})
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for i := range first.Emits {
		// A start: RUNNING since this pass (jobs already running are
		// emitted only when they end).
		if jc, ok := first.Emits[i].Message().(*eventsv1.JobChanged); ok && jc.GetJob().GetState() == loomv1.JobState_RUNNING &&
			jc.GetJob().GetStartTime().AsTime().Equal(now) {
			res.Started++
		}
	}
	res.Emits = len(first.Emits)
	st.Commit(first)
	steps := 0
	res.Steady, res.SteadyCPU = median(cfg.Repeat, func() {
		steps++
		st.Schedule(now.Add(time.Duration(steps) * time.Second))
	})
	snap := st.Snapshot()
	var loads, loadCPUs, passes, passCPUs []time.Duration
	for range cfg.Repeat {
		runtime.GC()
		t, c := time.Now(), processCPU()
		fresh := domain.NewState(st.Config())
		fresh.Restore(snap)
		loads, loadCPUs = append(loads, time.Since(t)), append(loadCPUs, processCPU()-c)
		runtime.GC()
		t, c = time.Now(), processCPU()
		fresh.Schedule(now.Add(time.Second))
		passes, passCPUs = append(passes, time.Since(t)), append(passCPUs, processCPU()-c)
	}
	res.Restart, res.Load = medianOf(passes), medianOf(loads)
	res.RestartCPU, res.LoadCPU = medianOf(passCPUs), medianOf(loadCPUs)
	return res, nil
}

// median runs f n times and returns the median wall and process CPU times.
// A collection runs (untimed) before each: a pass pays for the garbage it
// makes, not for the 100,000 job records a first pass before it dropped.
func median(n int, f func()) (wall, cpu time.Duration) { return medianAfter(n, func() {}, f) }

// medianAfter is median with setup run, untimed, before each call of f.
func medianAfter(n int, setup, f func()) (wall, cpu time.Duration) {
	ds, cs := make([]time.Duration, n), make([]time.Duration, n)
	for i := range ds {
		setup()
		runtime.GC()
		t, c := time.Now(), processCPU()
		f()
		ds[i], cs[i] = time.Since(t), processCPU()-c
	}
	return medianOf(ds), medianOf(cs)
}

func medianOf(ds []time.Duration) time.Duration {
	sort.Slice(ds, func(a, b int) bool { return ds[a] < ds[b] })
	return ds[len(ds)/2]
}

// CycleState builds the benchmark's state: the cluster and its nodes through
// the domain's own events, then the running and pending jobs loaded as
// records, as a restarted scheduler loads them. It returns the state and the
// number of running jobs.
func CycleState(cfg CycleConfig) (*domain.State, int, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, 0, err
	}
	dcfg, err := DomainConfig(cfg.Policy)
	if err != nil {
		return nil, 0, err
	}
	st := domain.NewState(dcfg)
	tr := &trace.Trace{Name: "cycle"}
	for i := range cfg.Nodes {
		tr.Nodes = append(tr.Nodes, trace.Node{
			Hostname: fmt.Sprintf("gpu-%05d", i+1), Pool: fmt.Sprintf("p%d", i*cfg.Partitions/cfg.Nodes),
			Slots: int32(cfg.GPUsPerNode), Model: "h100",
		})
	}
	spec := ClusterSpec(tr)
	// One partition per pool besides the default one over all of them.
	for i, ns := range spec.GetOrchestrator().GetSlurm().GetNodeSets() {
		spec.Orchestrator.Slurm.Partitions = append(spec.Orchestrator.Slurm.Partitions, &loomv1.SlurmPartition{
			Id: "part" + strconv.Itoa(i), NodeSetIds: []string{ns.GetId()}, MaxTime: "UNLIMITED", PriorityTier: int32(i % 2),
		})
	}
	now := Epoch.Add(24 * time.Hour)
	handle := func(p proto.Message) error {
		c, err := st.Handle(now, p)
		if err != nil {
			return err
		}
		st.Commit(c)
		return nil
	}
	if err := handle(&eventsv1.ClusterChanged{Cluster: spec}); err != nil {
		return nil, 0, err
	}
	for _, n := range tr.Nodes {
		ev := NodeEvent(n)
		ev.Node.MachineType = CycleMachineType // its CPUs and memory from the catalog
		if err := handle(ev); err != nil {
			return nil, 0, err
		}
	}
	parts := spec.GetOrchestrator().GetSlurm().GetPartitions()
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x10011))
	var id int64
	newJob := func(gpus int) *loomv1.Job {
		id++
		nodes, per := 1, gpus
		if gpus > cfg.GPUsPerNode {
			nodes, per = (gpus+cfg.GPUsPerNode-1)/cfg.GPUsPerNode, cfg.GPUsPerNode
		}
		u := rng.IntN(cfg.Users)
		limit := int64(600 + rng.IntN(24*3600))
		qos := "normal"
		switch r := rng.IntN(100); {
		case r < 5:
			qos = "high"
		case r < 20:
			qos = "low"
		}
		return &loomv1.Job{
			Name: JobName(id), JobId: strconv.FormatInt(id, 10), Cluster: Cluster, Command: []string{"true"}, Qos: qos,
			NodeCount: int32(nodes), GpusPerNode: int32(per), User: "user" + strconv.Itoa(u),
			Account: "acct" + strconv.Itoa(u%cfg.Accounts), TimeLimitSeconds: limit,
			Partition:  parts[rng.IntN(len(parts))].GetId(),
			SubmitTime: timestampOf(now.Add(-time.Duration(rng.IntN(24*3600)) * time.Second)),
		}
	}
	// Running jobs: whole-node and partial-node jobs packed node by node up
	// to the busy share.
	var jobs []*domain.Job
	var runs []*domain.Run
	target := int(cfg.Busy * float64(cfg.Nodes*cfg.GPUsPerNode))
	held := 0
	for ni := 0; ni < cfg.Nodes && held < target; ni++ {
		free := cfg.GPUsPerNode
		for free > 0 && held < target {
			g := min(jobSize(rng, cfg.GPUsPerNode), free)
			j := newJob(g)
			j.Partition = ""
			j.State = loomv1.JobState_RUNNING
			j.StartTime = timestampOf(now.Add(-time.Duration(rng.IntN(3600)) * time.Second))
			host := tr.Nodes[ni].Hostname
			j.Nodes = []string{host}
			devs := make([]int32, g)
			for k := range devs {
				devs[k] = int32(cfg.GPUsPerNode - free + k)
			}
			jobs = append(jobs, &domain.Job{JobRecord: jobstore.JobRecord{Job: j, Attempt: 1}})
			runs = append(runs, &domain.Run{RunRecord: jobstore.RunRecord{
				Job: j.GetName(), Cluster: Cluster, Attempt: 1, Nodes: []string{NodeName(host)}, Hostnames: []string{host},
				GPUs: map[string][]int32{NodeName(host): devs},
				CPUs: []int32{int32(g)}, Tasks: []int32{1},
				Steps:     map[string]domain.Step{NodeName(host): {State: eventsv1.StepState_STEP_RUNNING}},
				Partition: Partition, User: j.GetUser(), Account: j.GetAccount(), QOS: j.GetQos(), Start: j.GetStartTime().AsTime(),
			}})
			free -= g
			held += g
		}
	}
	running := len(jobs)
	for range cfg.Pending {
		j := newJob(pendingSize(rng, cfg.GPUsPerNode))
		j.State = loomv1.JobState_PENDING
		jobs = append(jobs, &domain.Job{JobRecord: jobstore.JobRecord{Job: j}})
	}
	st.Load(nil, nil, jobs, runs, nil, nil)
	return st, running, nil
}

// jobSize draws a running job's GPUs on one node: 1, 2, 4 or a whole node.
func jobSize(rng *rand.Rand, per int) int {
	switch r := rng.IntN(100); {
	case r < 40:
		return 1
	case r < 60:
		return 2
	case r < 75:
		return 4
	default:
		return per
	}
}

// pendingSize draws a queued job's GPUs: mostly small, a few gangs of 2 to 8
// whole nodes.
func pendingSize(rng *rand.Rand, per int) int {
	switch r := rng.IntN(100); {
	case r < 45:
		return 1
	case r < 60:
		return 2
	case r < 72:
		return 4
	case r < 90:
		return per
	case r < 97:
		return 2 * per
	default:
		return 8 * per
	}
}

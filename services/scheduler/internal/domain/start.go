package domain

import (
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/hostlist"
	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/slurmspec"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"

	"github.com/loom-ml/loom/services/scheduler/internal/domain/jobstore"
	"github.com/loom-ml/loom/services/scheduler/internal/domain/place"
	"github.com/loom-ml/loom/services/scheduler/internal/domain/views"
)

// taskLayout is the tasks of spec on each of the chosen nodes: as Slurm
// 22.05's select/cons_tres packs --ntasks without --ntasks-per-node onto
// nodes it shares (slurmspec.PackTasks: -N1-2 -n4 on two idle 4-CPU nodes
// is 3,1, with 2 CPUs free on the first 2,2), else spread evenly
// (slurmspec.TaskLayout). The packing reads the nodes' free CPUs, so it
// applies only where every chosen node's size is known, and not to an
// exclusive job (Slurm spreads its tasks over whole nodes: -N2 -n4
// --exclusive is 2,2) nor to one with GPUs (not measured). Batch jobs,
// salloc's allocations and command jobs alike: the layout goes on the job
// record (node_tasks, node_cpus: start), where salloc's environment, sacct
// and scontrol read it. Every chosen node has the request's even share free
// (place checks CPUsPerNode), so the packing fits whenever the even layout
// does, and holds the same CPUs in all.
func (p *pass) taskLayout(spec *loomv1.Job, req *place.Request, chosen []int32) []int32 {
	even := slurmspec.TaskLayout(spec.GetNtasksPerNode(), spec.GetNtasks(), len(chosen))
	if len(chosen) < 2 || spec.GetNtasks() <= 0 || spec.GetNtasksPerNode() > 0 || req.Exclusive ||
		spec.GetGpus() > 0 || spec.GetGpusPerNode() > 0 {
		return even
	}
	free := make([]int32, len(chosen))
	for k, i := range chosen {
		v := &p.views[i]
		if v.Node.CPUs == 0 {
			return even
		}
		free[k] = v.FreeCPUs
	}
	if tasks, ok := slurmspec.PackTasks(spec.GetNtasks(), spec.GetCpusPerTask(), free); ok {
		return tasks
	}
	return even
}

// start gives j the nodes chosen (indexes into the pass's views): a new run
// holding their resources, the job RUNNING (as slurmctld marks a job at its
// allocation: the StartStep below is sent after, so nothing the step runs
// can see the job in an earlier state; see lifecycle.go), and its steps: a batch script
// runs once, on the batch host (its first node); a command runs on every
// node, one task each, as an implicit srun. prio is the priority the pass
// ordered j by.
func (p *pass) start(j *Job, part Partition, req *place.Request, chosen []int32, prio int64, fitting int) {
	t := p.t
	// The rankers' view of the chosen nodes, before the job takes them.
	t.c.Placed = append(t.c.Placed, p.placed(j.Name(), req, chosen, fitting))
	j = t.editJob(j.Name())
	spec := j.Job
	if p.prio != nil {
		// As Slurm, a running job shows the priority it started with.
		spec.Priority = prio
	}
	n := len(chosen)
	cpt := spec.GetCpusPerTask()
	tasks := p.taskLayout(spec, req, chosen)
	gpus := make([]int32, n)
	for i := range gpus {
		switch {
		case spec.GetGpusPerNode() > 0:
			gpus[i] = spec.GetGpusPerNode()
		case spec.GetGpus() > 0:
			gpus[i] = slurmspec.Share(spec.GetGpus(), n, i)
		}
	}
	q, _ := t.s.cfg.qos(spec.GetQos())
	r := &Run{RunRecord: jobstore.RunRecord{
		Job: j.Name(), Cluster: p.name, Attempt: j.Attempt + 1,
		Nodes: make([]string, n), Hostnames: make([]string, n), CPUs: make([]int32, n), Tasks: tasks,
		GPUs: map[string][]int32{}, Steps: map[string]Step{}, MemMB: req.MemMB, Exclusive: req.Exclusive,
		ExclusiveUser: req.ExclusiveUser, Partition: part.Name, User: spec.GetUser(), Account: spec.GetAccount(), QOS: q.Name,
		Start: t.now,
	}}
	batch := spec.GetScript() != ""
	for rank, i := range chosen {
		v := &p.views[i]
		// CPUs and memory are counted on nodes whose size is known; an
		// exclusive run holds its nodes' CPUs whole (and keeps everything
		// else off them). --cpus-per-gpu gives a node at least its GPUs'
		// share, as Slurm's select/cons_tres (--gpus=3 -N2
		// --cpus-per-gpu=2: 4 CPUs and 2).
		cpus := nodeCPUs(tasks[rank], cpt, gpus[rank], spec.GetCpusPerGpu())
		switch {
		case v.Node.CPUs == 0:
			cpus = 0
		case req.Exclusive:
			cpus = v.Node.CPUs
		}
		mem := req.MemMB
		if v.Node.MemoryMB == 0 {
			mem = 0
		}
		got := p.take(i, gpus[rank], cpus, mem, req.Exclusive, spec.GetUser(), req.ExclusiveUser)
		r.Nodes[rank], r.Hostnames[rank], r.CPUs[rank] = v.Node.Name, v.Node.Hostname, cpus
		if len(got) > 0 {
			r.GPUs[v.Node.Name] = got
		}
		r.Steps[v.Node.Name] = Step{Idle: batch && rank > 0}
	}
	t.putRunVersion(r.Key(), r)
	for _, i := range chosen {
		p.held[i] = append(p.held[i][:len(p.held[i]):len(p.held[i])], r)
	}
	p.started = true
	if p.arrayRunning != nil && spec.GetArrayJobId() != "" {
		p.arrayRunning[jobsPrefix(j.Name())+spec.GetArrayJobId()]++
	}
	if p.qosUse != nil {
		p.qosUse[assocKey{q.Name, spec.GetUser()}] += r.gpuCount()
	}
	p.noteAssocStart(j)
	p.noteTRESStart(j, r)
	// A job still without a limit (submitted before its association got
	// a MaxWall, or moved to it) runs for MaxWall at most, as Slurm's
	// gate lets it start in that limit (acct_policy_job_runnable_pre_select).
	if wall := t.wallDefault(spec, part.MaxSeconds); wall > 0 {
		spec.TimeLimitSeconds = wall
	}

	c := p.cluster
	j.Attempt = r.Attempt
	j.Avoid = "" // for this attempt only (requeueUnlaunched)
	j.ModelDir = ""
	if id := spec.GetModelOutput().GetModelId(); id != "" {
		j.ModelDir = filepath.Join(c.SharedDir, "models", id, "job-"+spec.GetJobId())
	}
	spec.State, spec.StateReason, spec.ExitCode, spec.ExitSignal = loomv1.JobState_RUNNING, "", 0, nil
	if slurmspec.IsPartitionList(spec.GetPartition()) {
		// Started in one of the partitions it named: it shows that one
		// alone, as slurmctld does; a requeue gives it back the list,
		// the one it ran in first (rebuild_job_part_list).
		j.Partitions = usedFirst(spec.GetPartition(), part.Name)
	}
	spec.Partition = part.Name
	if spec.GetQos() == "" {
		spec.Qos = q.Name
	}
	spec.Nodes = append([]string(nil), r.Hostnames...)
	// The run's layout, as its SLURM_JOB_CPUS_PER_NODE says it (cpusOf: a
	// node of unknown size shows its tasks' CPUs), for the views that
	// cannot recompute a packed one from the request.
	spec.NodeTasks = append([]int32(nil), r.Tasks...)
	spec.NodeCpus = make([]int32, n)
	for rank := range spec.NodeCpus {
		spec.NodeCpus[rank] = cpusOf(r, rank, spec)
	}
	if spec.GetMemPerCpuMb() > 0 {
		// The memory each node holds at the width it got (a range's
		// wider width asks less of each), for scontrol's and sacct's
		// TRES; the request is --mem-per-cpu's (newAttrs).
		spec.MemMb = r.MemMB
	}
	spec.StartTime, spec.EndTime = timestamppb.New(t.now), nil
	spec.BatchHost = r.Hostnames[0]
	spec.AllocGpus = r.gpuCount()
	wd := workDir(spec, c.SharedDir)
	spec.OutputPath, spec.ErrorPath = outputPaths(spec, wd, spec.BatchHost)
	t.emitJob(j)

	env := t.arrayEnv(j)
	rv := newRunVars(spec, r)
	for rank, node := range r.Nodes {
		if batch && rank > 0 {
			continue
		}
		t.emit(node, j.Name(), &eventsv1.StartStep{
			Job: j.Name(), JobId: spec.GetJobId(), Attempt: r.Attempt,
			Node: node, NodeIndex: int32(rank), NodeHostnames: r.Hostnames, Registration: t.registration(node),
			Command: spec.GetCommand(), Script: spec.GetScript(),
			Env:        stepEnv(j, r, rv, rank, c.SharedDir, t.s.cfg.MasterAddr, env),
			OutputPath: spec.GetOutputPath(), ErrorPath: spec.GetErrorPath(), WorkDir: wd,
			Gpus: int32(len(r.GPUs[node])), JobName: SlurmJobName(spec),
			// A batch script's output has one writer, the batch host, which
			// empties it at each start unless --open-mode=append (Slurm's
			// default). A command on every node has one writer per node:
			// none may empty what the others wrote.
			AppendOutput: !batch || spec.GetOpenMode() == slurmspec.OpenModeAppend,
			// The agent runs the step as its owner, never as itself.
			User: spec.GetUser(),
			// And holds it to the memory it asked for (0: none asked).
			MemLimitBytes: memLimit(r),
			ModelDir:      j.ModelDir,
		})
	}
}

// arrayEnv returns the SLURM_ARRAY_* variables of an array task (nil for
// other jobs).
func (t *txn) arrayEnv(j *Job) map[string]string {
	spec := j.Job
	if spec.GetArrayJobId() == "" {
		return nil
	}
	env := map[string]string{
		"SLURM_ARRAY_JOB_ID":  spec.GetArrayJobId(),
		"SLURM_ARRAY_TASK_ID": strconv.Itoa(int(spec.GetArrayTaskId())),
	}
	if a := t.array(jobsPrefix(j.Name()) + spec.GetArrayJobId()); a != nil && len(a.Indexes) > 0 {
		env["SLURM_ARRAY_TASK_COUNT"] = strconv.Itoa(len(a.Indexes))
		env["SLURM_ARRAY_TASK_MIN"] = strconv.Itoa(int(a.Indexes[0]))
		env["SLURM_ARRAY_TASK_MAX"] = strconv.Itoa(int(a.Indexes[len(a.Indexes)-1]))
		// The step written in the spec, as Slurm's (1,3,5 is 1, not 2).
		env["SLURM_ARRAY_TASK_STEP"] = strconv.Itoa(slurmspec.ArrayTaskStep(spec.GetArray()))
	}
	return env
}

// SlurmJobName is the job's short name as Slurm shows it (views.SlurmJobName).
func SlurmJobName(j *loomv1.Job) string { return views.SlurmJobName(j) }

// MasterPort is the rendezvous port of a job: distinct for jobs whose numeric
// ids differ by less than 10000, so concurrent jobs on one machine (the local
// provider) do not collide.
func MasterPort(jobID string) int {
	id, err := strconv.ParseInt(jobID, 10, 64)
	if err != nil || id < 0 {
		return 29500
	}
	return 20000 + int(id%10000)
}

// stepEnv returns the environment of the step of run r on its rank-th node.
// The job's own env comes first; the scheduler's variables win over it,
// except MASTER_ADDR and MASTER_PORT, which a job may choose itself. A batch
// script is the job's one task on its node (SLURM_PROCID 0); a command runs
// one task per node (SLURM_PROCID = the node's rank).
func stepEnv(j *Job, r *Run, rv *runVars, rank int, sharedDir, masterAddr string, extra map[string]string) map[string]string {
	spec := j.Job
	env := make(map[string]string, len(spec.GetEnv())+48)
	for k, v := range spec.GetEnv() {
		env[k] = v
	}
	if masterAddr == "" {
		masterAddr = r.Hostnames[0]
	}
	if _, ok := env["MASTER_ADDR"]; !ok {
		env["MASTER_ADDR"] = masterAddr
	}
	if _, ok := env["MASTER_PORT"]; !ok {
		env["MASTER_PORT"] = strconv.Itoa(MasterPort(spec.GetJobId()))
	}
	n := strconv.Itoa(len(r.Nodes))
	id := strconv.Itoa(rank)
	gpus := r.GPUs[r.Nodes[rank]]
	devs := make([]string, len(gpus))
	for i, g := range gpus {
		devs[i] = strconv.Itoa(int(g))
	}
	procID := id
	if spec.GetScript() != "" {
		procID = "0"
	}
	submit := submitDir(spec, sharedDir)
	part := spec.GetPartition()
	if part == "" {
		part = r.Partition
	}
	cpus := strconv.Itoa(int(cpusOf(r, rank, spec)))
	ckpt := CheckpointDir(spec, sharedDir)
	// Set in place: a map literal of these, copied in, was a second map of
	// ~40 entries per node of each start (1,300 starts in a first pass).
	env["SLURM_JOB_ID"] = spec.GetJobId()
	env["SLURM_JOBID"] = spec.GetJobId()
	env["SLURM_JOB_NAME"] = SlurmJobName(spec)
	env["SLURM_JOB_NODELIST"] = rv.nodelist
	env["SLURM_NODELIST"] = rv.nodelist
	env["SLURM_NNODES"] = n
	env["SLURM_JOB_NUM_NODES"] = n
	env["SLURM_NODEID"] = id
	env["SLURM_PROCID"] = procID
	env["SLURM_LOCALID"] = "0"
	if rv.ntasks != "" {
		env["SLURM_NTASKS"] = rv.ntasks
		env["SLURM_NPROCS"] = rv.ntasks
	}
	env["SLURM_TASKS_PER_NODE"] = rv.tasksPerNode
	if c := spec.GetCpusPerTask(); c > 0 {
		env["SLURM_CPUS_PER_TASK"] = strconv.Itoa(int(c)) // as Slurm: only with -c
	}
	if c := spec.GetCpusPerGpu(); c > 0 {
		env["SLURM_CPUS_PER_GPU"] = strconv.Itoa(int(c)) // as Slurm: only when asked for
	}
	if len(gpus) > 0 {
		env["SLURM_GPUS_ON_NODE"] = strconv.Itoa(len(gpus)) // unset without GPUs, as Slurm's
	}
	env["CUDA_VISIBLE_DEVICES"] = strings.Join(devs, ",")
	if len(devs) > 0 {
		// As Slurm's gres/gpu plugin: the node's GPUs of the job by
		// index, under the names other tools read them by.
		env["SLURM_JOB_GPUS"] = env["CUDA_VISIBLE_DEVICES"]
		env["GPU_DEVICE_ORDINAL"] = env["CUDA_VISIBLE_DEVICES"]
	}
	// What the job asked for, as Slurm exports it: its steps' defaults.
	slurmspec.JobGPUEnv(spec, env)
	env["SLURM_SUBMIT_DIR"] = submit
	env["SLURM_JOB_PARTITION"] = part
	env["SLURM_JOB_USER"] = spec.GetUser()
	env["SLURM_JOB_ACCOUNT"] = spec.GetAccount()
	env["SLURM_JOB_QOS"] = r.QOS
	if n := spec.GetRestartCount(); n > 0 {
		// Set from the first requeue on, as Slurm's: a first run has none.
		env["SLURM_RESTART_COUNT"] = strconv.Itoa(int(n))
	}
	env["SLURMD_NODENAME"] = r.Hostnames[rank]
	env["SLURM_TOPOLOGY_ADDR"] = r.Hostnames[rank]
	env["SLURM_TOPOLOGY_ADDR_PATTERN"] = "node"
	env["SLURM_CLUSTER_NAME"] = clusterID(r.Cluster)
	env["SLURM_JOB_CPUS_PER_NODE"] = rv.cpusPerNode
	env["SLURM_CPUS_ON_NODE"] = cpus
	// The global task ids on this node: the batch script's is 0; a
	// command's task is its node's rank.
	env["SLURM_GTIDS"] = procID
	env["LOOM_JOB_ID"] = spec.GetJobId()
	env["LOOM_JOB_NAME"] = spec.GetName()
	env["LOOM_NODE_RANK"] = id
	env["LOOM_NUM_NODES"] = n
	// Resuming (docs/health.md): which attempt this is, how often the
	// job was requeued, and where its checkpoints live (Vertex's name too).
	env["LOOM_RESTART_COUNT"] = strconv.Itoa(int(spec.GetRestartCount()))
	env["LOOM_JOB_ATTEMPT"] = strconv.Itoa(int(r.Attempt))
	env["LOOM_CHECKPOINT_DIR"] = ckpt
	env["AIP_CHECKPOINT_DIR"] = ckpt
	if spec.GetScript() != "" {
		env["ENVIRONMENT"] = "BATCH" // as slurmstepd sets it for batch scripts
	}
	if spec.GetUser() == "" {
		delete(env, "SLURM_JOB_USER")
	}
	if spec.GetAccount() == "" {
		delete(env, "SLURM_JOB_ACCOUNT")
	}
	if h := spec.GetSubmitHost(); h != "" {
		env["SLURM_SUBMIT_HOST"] = h
	}
	if tpn := spec.GetNtasksPerNode(); tpn > 0 {
		env["SLURM_NTASKS_PER_NODE"] = strconv.Itoa(int(tpn)) // as Slurm: only when asked for
	}
	for k, v := range extra {
		env[k] = v
	}
	if j.ModelDir != "" {
		env["LOOM_MODEL_DIR"] = j.ModelDir
	}
	return env
}

// runVars are the variables of a run's environment that are the same on
// each of its nodes, computed once per start: each is a walk of all the
// run's nodes, which per node would be quadratic in the run's size.
type runVars struct {
	nodelist     string // SLURM_JOB_NODELIST: the hostnames, compressed
	ntasks       string // SLURM_NTASKS and SLURM_NPROCS; "": unset
	tasksPerNode string // SLURM_TASKS_PER_NODE, as "2(x3),1"
	cpusPerNode  string // SLURM_JOB_CPUS_PER_NODE, the same form
}

// newRunVars returns run r's runVars for job spec. A batch script is its
// node's one task of the tasks it asked for; a command runs one task per
// node. A batch job that asked no tasks (no -n, no --ntasks-per-node) has
// Slurm's SLURM_TASKS_PER_NODE: each node's CPUs over its CPUs per task, as
// slurmd's env_array_for_batch_job lays them out (--gres=gpu:2
// --cpus-per-gpu=3: 6; slurmspec.AllocTasksPerNode), and, as Slurm 22.05's
// (checked beside it: sbatch -N2 --wrap env), no SLURM_NTASKS or
// SLURM_NPROCS, though its tasks (a bare srun's) stay one a node. A
// command is an implicit srun's step: its tasks are always counted.
func newRunVars(spec *loomv1.Job, r *Run) *runVars {
	batch := spec.GetScript() != ""
	tasks := r.Tasks
	if !batch {
		tasks = make([]int32, len(r.Nodes))
		for i := range tasks {
			tasks[i] = 1
		}
	}
	ntasks := int32(0)
	for _, c := range tasks {
		ntasks += c
	}
	cpus := make([]int32, len(r.Nodes))
	for i := range cpus {
		cpus[i] = cpusOf(r, i, spec)
	}
	asked := !batch || spec.GetNtasks() > 0 || spec.GetNtasksPerNode() > 0
	rv := &runVars{
		nodelist:     hostlist.Compress(r.Hostnames),
		tasksPerNode: slurmspec.CompressCounts(slurmspec.AllocTasksPerNode(tasks, cpus, asked, spec.GetCpusPerTask())),
		cpusPerNode:  slurmspec.CompressCounts(cpus),
	}
	if asked {
		rv.ntasks = strconv.Itoa(int(ntasks))
	}
	return rv
}

// CheckpointDir is where job spec keeps its checkpoints
// ($LOOM_CHECKPOINT_DIR, $AIP_CHECKPOINT_DIR): its checkpoint_dir (a
// relative one under the cluster's shared dir), else
// <shared dir>/checkpoints/<job id>. Every attempt gets the same one, so a
// requeued run finds what the one before it wrote.
func CheckpointDir(spec *loomv1.Job, sharedDir string) string {
	dir := spec.GetCheckpointDir()
	switch {
	case dir == "":
		return filepath.Join(sharedDir, "checkpoints", spec.GetJobId())
	case filepath.IsAbs(dir):
		return filepath.Clean(dir)
	}
	return filepath.Join(sharedDir, dir)
}

// cpusOf is the CPUs of rank's node in job spec's run r: those allocated,
// else (node size unknown) what the job asks of it (nodeCPUs).
func cpusOf(r *Run, rank int, spec *loomv1.Job) int32 {
	if rank < len(r.CPUs) && r.CPUs[rank] > 0 {
		return r.CPUs[rank]
	}
	tasks, gpus := int32(1), int32(0)
	if rank < len(r.Tasks) {
		tasks = r.Tasks[rank]
	}
	if rank < len(r.Nodes) {
		gpus = int32(len(r.GPUs[r.Nodes[rank]]))
	}
	return nodeCPUs(tasks, spec.GetCpusPerTask(), gpus, spec.GetCpusPerGpu())
}

// nodeCPUs is the CPUs a job takes on a node of its run
// (slurmspec.NodeCPUs). The counts are bounded at submission (handle.go) so
// that neither product passes an int32.
func nodeCPUs(tasks, cpt, gpus, cpg int32) int32 {
	return int32(slurmspec.NodeCPUs(int64(tasks), int64(cpt), int64(gpus), int64(cpg)))
}

// clusterID is the id of a cluster name (a bare id stays as it is).
func clusterID(name string) string {
	if c, err := resname.SplitCluster(name); err == nil {
		return c.ID
	}
	return name
}

// Placed explains where a pass started a job (Job.placement while it runs):
// how many nodes were looked at and passed every check, the nodes chosen,
// and each ranker's score of each of them (Policy.Rankers, in order; lower
// is better, each breaking the ties of the ones before).
type Placed struct {
	Job string
	// Nodes were looked at; Fitting passed every check.
	Nodes, Fitting int
	// Hosts are the chosen nodes' hostnames, in rank order.
	Hosts []string
	// Rankers name the policy's rankers; Scores[k][i] is ranker k's score
	// of Hosts[i].
	Rankers []string
	Scores  [][]int64
}

// placed scores the chosen views for r with every ranker of the policy.
func (p *pass) placed(job string, r *place.Request, chosen []int32, fitting int) *Placed {
	rankers := p.t.s.cfg.Policy.Rankers
	pl := &Placed{Job: job, Nodes: len(p.views), Fitting: fitting, Hosts: make([]string, len(chosen)),
		Rankers: make([]string, len(rankers)), Scores: make([][]int64, len(rankers))}
	for i, vi := range chosen {
		pl.Hosts[i] = p.views[vi].Node.Hostname
	}
	for k, rk := range rankers {
		pl.Rankers[k] = rk.Name
		pl.Scores[k] = make([]int64, len(chosen))
		for i, vi := range chosen {
			pl.Scores[k][i] = rk.Score(r, &p.views[vi])
		}
	}
	return pl
}

// explain writes a start as Job.placement: "started on gpu-1,gpu-2: 2 of
// 12 fitting nodes (40 looked at); ranker scores: BestFitGPUs 4,4;
// LeastLoadedCPUs 0,0; FewestAllocations 0,0".
func (pl *Placed) explain() string {
	var b strings.Builder
	fmt.Fprintf(&b, "started on %s: %d of %d fitting nodes (%d looked at)", strings.Join(pl.Hosts, ","), len(pl.Hosts), pl.Fitting, pl.Nodes)
	for k, name := range pl.Rankers {
		if k == 0 {
			b.WriteString("; ranker scores: ")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(name)
		for i, v := range pl.Scores[k] {
			if i == 0 {
				b.WriteByte(' ')
			} else {
				b.WriteByte(',')
			}
			b.WriteString(strconv.FormatInt(v, 10))
		}
	}
	return b.String()
}

// memLimit is the memory a run's processes may use on each node, in bytes
// (--mem; 0: none asked, no limit).
func memLimit(r *Run) int64 {
	if r.MemMB <= 0 {
		return 0
	}
	// Past 2^43 MB the shift wraps (to a negative limit, or none): no
	// node has 8 EiB, so that much is no limit.
	if r.MemMB > math.MaxInt64>>20 {
		return 0
	}
	return r.MemMB << 20
}

// registration is node's current registration, which the app seals the
// node's step commands for ("" when none is known).
func (t *txn) registration(node string) string {
	if n := t.node(node); n != nil {
		return n.Registration
	}
	return ""
}

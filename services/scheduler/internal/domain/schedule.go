package domain

import (
	"path/filepath"
	"strconv"
	"strings"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// schedule serves the cluster's queue in policy order: each job that fits
// starts; the first that does not blocks every job after it.
func (t *txn) schedule(cluster string) {
	pend := t.pendingJobs(cluster)
	if len(pend) == 0 {
		return
	}
	c := t.cluster(cluster)
	nodes := t.clusterNodes(cluster)
	used := t.usedGPUs(cluster)
	views := make([]NodeView, len(nodes))
	index := make(map[string]int, len(nodes))
	usable := 0
	for i, n := range nodes {
		views[i] = NodeView{Node: n}
		for g := int32(0); g < n.GPUs; g++ {
			if !used[n.Name][g] {
				views[i].Free = append(views[i].Free, g)
			}
		}
		index[n.Name] = i
		if n.Usable() {
			usable++
		}
	}
	if !c.Schedulable() || usable == 0 {
		for _, j := range pend {
			t.wait(j, ReasonReqNodeNotAvail, nil)
		}
		return
	}
	blocked := false
	for _, j := range pend {
		if blocked {
			t.wait(j, ReasonPriority, nil)
			continue
		}
		p, ok := Place(j.Job, views, t.s.cfg.Policy.Checks)
		if !ok {
			t.wait(j, ReasonResources, p.Filtered)
			blocked = true
			continue
		}
		t.start(j, c, p)
		for _, v := range p.Nodes {
			i := index[v.Node.Name]
			views[i].Free = views[i].Free[j.Job.GetGpusPerNode():]
		}
	}
}

// wait keeps j pending for reason, emitting only when the reason changes.
func (t *txn) wait(j *Job, reason string, filtered map[string]int) {
	t.c.Decisions = append(t.c.Decisions, Decision{Job: j.Name(), Reason: reason, Filtered: filtered})
	if j.Job.GetStateReason() == reason {
		return
	}
	j = t.editJob(j.Name())
	j.Job.StateReason = reason
	t.emitJob(j)
}

// start gives j its placement: a new run holding the nodes' GPUs, the job
// RUNNING, and one StartStep per node.
func (t *txn) start(j *Job, c *Cluster, p Placement) {
	j = t.editJob(j.Name())
	spec := j.Job
	n := len(p.Nodes)
	r := &Run{
		Job: j.Name(), Cluster: c.Name, Attempt: j.Attempt + 1,
		Nodes: make([]string, n), Hostnames: make([]string, n),
		GPUs: map[string][]int32{}, Steps: map[string]Step{},
	}
	for i, v := range p.Nodes {
		r.Nodes[i], r.Hostnames[i] = v.Node.Name, v.Node.Hostname
		r.Steps[v.Node.Name] = Step{}
		if g := spec.GetGpusPerNode(); g > 0 {
			r.GPUs[v.Node.Name] = append([]int32(nil), v.Free[:g]...)
		}
	}
	t.c.Runs[r.Key()] = r

	j.Attempt = r.Attempt
	j.ModelDir = ""
	if id := spec.GetModelOutput().GetModelId(); id != "" {
		j.ModelDir = filepath.Join(c.SharedDir, "models", id, "job-"+spec.GetJobId())
	}
	spec.State, spec.StateReason, spec.ExitCode = loomv1.JobState_RUNNING, "", 0
	spec.Nodes = append([]string(nil), r.Hostnames...)
	spec.StartTime, spec.EndTime = timestamppb.New(t.now), nil
	spec.OutputPath = filepath.Join(c.SharedDir, "slurm-"+spec.GetJobId()+".out")
	t.emitJob(j)

	for i, node := range r.Nodes {
		t.emit(topics.StepCommands, node, j.Name(), &eventsv1.StartStep{
			Job: j.Name(), JobId: spec.GetJobId(), Attempt: r.Attempt,
			Node: node, NodeIndex: int32(i), NodeHostnames: r.Hostnames,
			Command: spec.GetCommand(), Script: spec.GetScript(),
			Env:        StepEnv(j, r, i, c.SharedDir, t.s.cfg.MasterAddr),
			OutputPath: spec.GetOutputPath(), WorkDir: c.SharedDir,
			Gpus: spec.GetGpusPerNode(), JobName: SlurmJobName(spec),
		})
	}
}

// SlurmJobName is the job's short name as Slurm shows it: the display name,
// else the command's base name, else "sbatch" (a script).
func SlurmJobName(j *loomv1.Job) string {
	if j.GetDisplayName() != "" {
		return j.GetDisplayName()
	}
	if len(j.GetCommand()) > 0 {
		return filepath.Base(j.GetCommand()[0])
	}
	return "sbatch"
}

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

// StepEnv returns the environment of the step of run r on its rank-th node.
// The job's own env comes first; the scheduler's variables win over it,
// except MASTER_ADDR and MASTER_PORT, which a job may choose itself.
func StepEnv(j *Job, r *Run, rank int, sharedDir, masterAddr string) map[string]string {
	spec := j.Job
	env := map[string]string{}
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
	for k, v := range map[string]string{
		"SLURM_JOB_ID":         spec.GetJobId(),
		"SLURM_JOB_NAME":       SlurmJobName(spec),
		"SLURM_JOB_NODELIST":   strings.Join(r.Hostnames, ","),
		"SLURM_NNODES":         n,
		"SLURM_NODEID":         id,
		"SLURM_PROCID":         id,
		"SLURM_NTASKS":         n,
		"SLURM_GPUS_ON_NODE":   strconv.Itoa(int(spec.GetGpusPerNode())),
		"CUDA_VISIBLE_DEVICES": strings.Join(devs, ","),
		"SLURM_SUBMIT_DIR":     sharedDir,
		"LOOM_JOB_ID":          spec.GetJobId(),
		"LOOM_JOB_NAME":        spec.GetName(),
		"LOOM_NODE_RANK":       id,
		"LOOM_NUM_NODES":       n,
	} {
		env[k] = v
	}
	if j.ModelDir != "" {
		env["LOOM_MODEL_DIR"] = j.ModelDir
	}
	return env
}

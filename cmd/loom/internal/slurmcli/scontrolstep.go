package slurmcli

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loom-ml/loom/libs/slurmspec"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// showSteps prints "scontrol show step [JOB[.STEP]]": the running steps of
// one job (or one step), or of every running job, as Slurm 22.05 does.
func (c *cmd) showSteps(ctx context.Context, b *strings.Builder, id string, oneliner bool) error {
	jobID, stepID, oneStep := strings.Cut(id, ".")
	if id != "" && (!isDigits(jobID) || oneStep && !isDigits(stepID) && stepID != "batch") {
		return c.errorf("Invalid job id specified")
	}
	jobs, err := c.listJobs(ctx, &loomv1.ListJobsRequest{States: []loomv1.JobState{loomv1.JobState_RUNNING}})
	if err != nil {
		return err
	}
	if jobID != "" {
		j := jobsByID(jobs)[jobID]
		if j == nil {
			return c.stepNotFound(ctx, jobID, stepID)
		}
		jobs = []*loomv1.Job{j}
	}
	found := false
	for _, j := range jobs {
		if j.GetState() != loomv1.JobState_RUNNING {
			continue
		}
		steps, err := c.jobSteps(ctx, j.GetName(), 0)
		if err != nil {
			return err
		}
		// The batch step first, as Slurm lists them.
		if batch := j.GetScript() != "" || len(j.GetCommand()) == 0; batch && (!oneStep || stepID == "batch") {
			found = true
			batchStepRecord(j, c).write(b, oneliner)
		}
		for _, s := range steps {
			if s.GetState() != loomv1.JobState_RUNNING || oneStep && stepID != strconv.Itoa(int(s.GetStepId())) {
				continue
			}
			found = true
			stepRecord(j, s, c).write(b, oneliner)
		}
	}
	if !found {
		if id == "" {
			b.WriteString("No job steps in the system\n")
			return nil
		}
		return c.stepNotFound(ctx, jobID, stepID)
	}
	return nil
}

// stepNotFound is scontrol show step's answer for JOB[.STEP] that names no
// running step, as Slurm 22.05's (recorded beside it): for a job the
// controller knows (pending, running or ended), "Job step JOB.STEP not
// found" on stdout ("Job step JOB. not found" without a step: Slurm's
// words), exit 1; for one it does not, "slurm_get_job_steps error:
// Invalid job id specified", exit 1.
func (c *cmd) stepNotFound(ctx context.Context, jobID, stepID string) error {
	cctx, cancel := c.call(ctx)
	defer cancel()
	_, err := c.jobsClient().GetJob(cctx, &loomv1.GetJobRequest{Name: c.jobName(jobID)})
	switch status.Code(err) {
	case codes.OK:
		fmt.Fprintf(c.stdout, "Job step %s.%s not found\n", jobID, stepID)
		return &Error{Code: 1}
	case codes.NotFound:
		return &Error{Code: 1, Text: "slurm_get_job_steps error: Invalid job id specified"}
	}
	return c.rpcError("slurm_get_job_steps", err)
}

// stepTimeLimit is a step's own time limit as Slurm 22.05 shows it: a step
// has none unless srun -t gave it one (Loom's srun takes no -t for a step),
// whatever its job's limit.
const stepTimeLimit = "TimeLimit=UNLIMITED"

// batchStepRecord is a running job's batch step as scontrol show step
// prints it (Slurm gives it no CPUs or TRES of its own).
func batchStepRecord(j *loomv1.Job, c *cmd) record {
	uid, _ := accountIDs(j.GetUser())
	return record{
		{"StepId=" + j.GetJobId() + ".batch", "UserId=" + uid, "StartTime=" + formatTimestamp(j.GetStartTime().AsTime(), c.loc), stepTimeLimit},
		{"State=RUNNING", "Partition=" + j.GetPartition(), "NodeList=" + j.GetBatchHost()},
		{"Nodes=1", "CPUs=0", "Tasks=1", "Name=batch", "Network=(null)"},
		{"TRES=(null)"},
		{"ResvPorts=(null)"},
		{"CPUFreqReq=Default"},
		{"SrunHost:Pid=(null):0"},
	}
}

// stepRecord is one step as scontrol show step prints it: CPUs= what it
// holds (stepCPUs: without --exact every CPU of the job on its nodes, as
// Slurm's), Dist= stepDist's.
func stepRecord(j *loomv1.Job, s *loomv1.JobStep, c *cmd) record {
	uid, _ := accountIDs(j.GetUser())
	cpus := stepCPUs(j, s)
	return append(record{
		{"StepId=" + j.GetJobId() + "." + strconv.Itoa(int(s.GetStepId())), "UserId=" + uid,
			"StartTime=" + formatTimestamp(s.GetStartTime().AsTime(), c.loc), stepTimeLimit},
		{"State=" + stateLong(s.GetState()), "Partition=" + j.GetPartition(), "NodeList=" + compressHosts(s.GetNodes())},
		{"Nodes=" + strconv.Itoa(len(s.GetNodes())), "CPUs=" + strconv.Itoa(int(cpus)), "Tasks=" + strconv.Itoa(int(s.GetNumTasks())),
			"Name=" + stepName(s), "Network=(null)"},
		{"TRES=cpu=" + strconv.Itoa(int(cpus)) + ",mem=0,node=" + strconv.Itoa(len(s.GetNodes()))},
		{"ResvPorts=(null)"},
		{"CPUFreqReq=Default", "Dist=" + stepDist(s)},
		// Loom's srun is not the step's controller: its host and pid
		// are not kept.
		{"SrunHost:Pid=(null):0"},
	}, stepTres(s, cpus)...)
}

// stepTres is the end of scontrol show step's record of a step with a GPU
// request, as Slurm 22.05 prints it (measured beside it): CpusPerTres with
// --cpus-per-gpu; TresBind (gpu:none with --gpu-bind=none) and
// TresPerTask with --gpus-per-task (and -c's
// cpu:C in TresPerTask); TresPerStep for a step with --gpus,
// --gpus-per-node or --gpus-per-task, "cpu:" its tasks × their CPUs (-c,
// else --cpus-per-gpu × --gpus-per-task, else 1), then the --gpus;
// TresPerNode=gres:gpu:N with --gpus-per-node (--gres=gpu:N). The cpu:
// of a step srun ran in the allocation it made itself, without -n
// (allocation_cpus), is cpus, the CPUs the step holds: Slurm's srun asks it
// for all of the allocation's (outside a job --gpus=2 --cpus-per-gpu=3 is
// cpu:6, -n2 with them cpu:2, --exclusive -N1 --gpus=1 cpu:16). A step
// without GPU options has none of them. (Slurm also prints the job's
// --gpus-per-node or --gres as the TresPerNode of a step without GPU
// options, which Loom's steps do not keep.)
func stepTres(s *loomv1.JobStep, cpus int) record {
	var out record
	if n := s.GetCpusPerGpu(); n > 0 {
		out = append(out, []string{"CpusPerTres=gres:gpu:" + strconv.Itoa(int(n))})
	}
	gpt := s.GetGpusPerTask()
	switch {
	case s.GetGpuBindNone():
		out = append(out, []string{"TresBind=gpu:none"})
	case gpt > 0:
		out = append(out, []string{"TresBind=gpu:per_task:" + strconv.Itoa(int(gpt))})
	}
	if s.GetGpus() == 0 && gpt == 0 && s.GetGpusPerNode() == 0 {
		return out
	}
	cpt := s.GetCpusPerTask()
	if cpt == 0 {
		cpt = max(s.GetCpusPerGpu()*gpt, 1)
	}
	n := int64(s.GetNumTasks()) * int64(cpt)
	if s.GetAllocationCpus() {
		n = int64(cpus)
	}
	step := "TresPerStep=cpu:" + strconv.FormatInt(n, 10)
	if g := s.GetGpus(); g > 0 {
		step += ",gres:gpu:" + strconv.Itoa(int(g))
	}
	out = append(out, []string{step})
	if n := s.GetGpusPerNode(); n > 0 {
		out = append(out, []string{"TresPerNode=gres:gpu:" + strconv.Itoa(int(n))})
	}
	var task []string
	if c := s.GetCpusPerTask(); c > 0 {
		task = append(task, "cpu:"+strconv.Itoa(int(c)))
	}
	if gpt > 0 {
		task = append(task, "gres:gpu:"+strconv.Itoa(int(gpt)))
	}
	if len(task) > 0 {
		out = append(out, []string{"TresPerTask=" + strings.Join(task, ",")})
	}
	return out
}

// stepCPUs is the CPUs a step holds (sacct's AllocCPUS, scontrol show
// step's CPUs=): its cpus_per_node, node for node (with --exact or -c its
// tasks × their CPUs, without them all of the job's there, as Slurm's
// step gets); without them (an --overlap step, which Loom holds no CPUs
// for, or one recorded before they were kept) the job's CPUs on the
// step's nodes, which is what Slurm shows for an --overlap step too: the
// run's own (runLayout: 3 on the first node of a job packed 3,1), else an
// even share.
func stepCPUs(j *loomv1.Job, s *loomv1.JobStep) int {
	if held := s.GetCpusPerNode(); len(held) > 0 {
		n := 0
		for _, c := range held {
			n += int(c)
		}
		return n
	}
	if _, cpus, ok := runLayout(j); ok {
		n := 0
		for _, h := range s.GetNodes() {
			if i := slices.Index(j.GetNodes(), h); i >= 0 {
				n += int(cpus[i])
			}
		}
		if n > 0 {
			return n
		}
	}
	return max(jobCPUs(j)*len(s.GetNodes())/max(jobNodeCount(j), 1), 1)
}

// stepDist is scontrol show step's Dist= of s, Slurm 22.05's name for its
// srun -m (slurmspec.Distribution.Name: Cyclic, Plane, CBlock,
// Block,NoPack, arbitrary); without -m (or a step recorded before it was
// kept) the one Slurm's srun picks: Cyclic for a step with no more tasks
// than nodes, Block otherwise (-n1 and -N2 -n2 Cyclic, -N2 -n3 Block).
func stepDist(s *loomv1.JobStep) string {
	d, _ := slurmspec.ParseDistribution(s.GetDistribution())
	return d.Or(slurmspec.DefaultDistribution(int(s.GetNumTasks()), len(s.GetNodes()))).Name()
}

// scontrolPing is "scontrol ping": whether the controller — here the Loom
// gateway, which answers for the scheduler — answers, in Slurm's words
// (exit 1 when it does not). A cluster the gateway does not know (-M or
// LOOM_CLUSTER) is an error naming it, as sinfo and squeue say it (Slurm
// refuses an invalid --cluster before it pings), not a controller down.
func (c *cmd) scontrolPing(ctx context.Context) error {
	host := c.gatewayHost()
	cluster := c.clusterFilter()
	var err error
	if cluster == "" {
		var names []string
		if names, err = c.projectClusters(ctx); err == nil {
			// Several clusters (or none) and none chosen: what every other
			// command says then (set LOOM_CLUSTER or use -M), not DOWN.
			if cluster, err = c.onlyCluster(names); err != nil {
				return err
			}
		}
	}
	if err == nil {
		_, err = c.partitions(ctx, cluster)
		if code := status.Code(err); code == codes.NotFound || code == codes.InvalidArgument {
			return c.rpcError("slurm_load_partitions", err)
		}
	}
	if err != nil {
		fmt.Fprintf(c.stdout, "Slurmctld(primary) at %s is DOWN\n", host)
		return &Error{Code: 1}
	}
	fmt.Fprintf(c.stdout, "Slurmctld(primary) at %s is UP\n", host)
	return nil
}

// gatewayHost is the host of the gateway the command talks to, which
// stands for slurmctld in what scontrol prints.
func (c *cmd) gatewayHost() string {
	host := "the Loom gateway"
	if t, ok := c.env.Conn.(interface{ Target() string }); ok {
		target := strings.TrimPrefix(strings.TrimPrefix(t.Target(), "dns:///"), "passthrough:///")
		if h, _, err := net.SplitHostPort(target); err == nil && h != "" {
			host = h
		} else if target != "" {
			host = target
		}
	}
	return host
}

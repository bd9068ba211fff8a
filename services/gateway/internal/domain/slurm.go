package domain

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/clusterspec"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/slurmspec"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Slurm's wording for refused job and node operations; the Slurm-compatible
// commands print these messages.
const (
	MsgAlreadyDone     = "Job/step already completing or completed"
	MsgFinished        = "Job has already finished"
	MsgPending         = "Job is pending execution"
	MsgNoLongerPending = "Job is no longer pending execution"
	// MsgNotNow is Slurm's ESLURM_TRANSITION_STATE_NO_UPDATE: a signal to
	// an array (or one of its tasks) while tasks of it are still pending
	// (PendingArraySignal).
	MsgNotNow           = "Job can not be altered now, try again later"
	MsgDrainNeedsReason = "You must specify a reason when DOWNING or DRAINING a node. Request denied"
	updateActionsList   = "hold, uhold, release, requeue, update"
	slurmNodeStatesList = "DRAIN, DOWN, RESUME"
	maxTimeLimitSeconds = slurmspec.MaxTimeLimitSeconds // a century: anything above is a typo
)

// Precondition is a refusal for the state a job or node is in: it maps to
// FailedPrecondition with Msg as the whole message (Slurm's wording).
type Precondition struct{ Msg string }

func (p *Precondition) Error() string { return p.Msg }

// Is makes a Precondition an errs.FailedPrecondition.
func (p *Precondition) Is(target error) bool { return target == errs.FailedPrecondition }

func refuse(msg string) error { return &Precondition{Msg: msg} }

// ArrayTaskJobID returns the job id of task index of the array job
// accepted as parent: the array's job id A plus the task's position among the
// spec's indexes in ascending order (CONTRACTS: task list "0-3" of A=10 →
// 10..13). ok is false when parent is not an array or has no such task.
func ArrayTaskJobID(parent *loomv1.Job, index int) (id int64, ok bool) {
	spec, err := slurmspec.ParseArray(parent.GetArray(), slurmspec.MaxArraySizeCeiling) // accepted: within its limit
	if parent.GetArray() == "" || err != nil {
		return 0, false
	}
	a, err := strconv.ParseInt(parent.GetJobId(), 10, 64)
	if err != nil {
		return 0, false
	}
	k, found := slices.BinarySearch(spec.Indexes(), index)
	if !found {
		return 0, false
	}
	return a + int64(k), true
}

// ArrayTaskCount returns how many tasks an array spec names (0 for no spec;
// the spec must be valid).
func ArrayTaskCount(spec string) int {
	if spec == "" {
		return 0
	}
	a, err := slurmspec.ParseArray(spec, slurmspec.MaxArraySizeCeiling) // validated first
	if err != nil {
		return 0
	}
	return a.Count()
}

// Partitions returns the cluster's Slurm partitions as the scheduler sees
// them: those of its spec, or, for a spec that names none, the ones
// clusterspec.Normalize generates (one default partition "all").
func Partitions(c *loomv1.Cluster) []*loomv1.SlurmPartition {
	if ps := c.GetOrchestrator().GetSlurm().GetPartitions(); len(ps) > 0 {
		return ps
	}
	n := proto.Clone(c).(*loomv1.Cluster)
	clusterspec.Normalize(n)
	return n.GetOrchestrator().GetSlurm().GetPartitions()
}

// DefaultPartition returns the id of the partition jobs that name none go to.
func DefaultPartition(c *loomv1.Cluster) string {
	ps := Partitions(c)
	for _, p := range ps {
		if p.GetDefault() {
			return p.GetId()
		}
	}
	if len(ps) > 0 {
		return ps[0].GetId()
	}
	return ""
}

// findPartition returns the partition id of c, or an error naming the ones there are.
func findPartition(c *loomv1.Cluster, id string) (*loomv1.SlurmPartition, error) {
	ps := Partitions(c)
	ids := make([]string, 0, len(ps))
	for _, p := range ps {
		if p.GetId() == id {
			return p, nil
		}
		ids = append(ids, p.GetId())
	}
	cn, _ := resname.ParseCluster(c.GetName())
	cid := cn.ID
	if cid == "" {
		cid = c.GetName()
	}
	return nil, fmt.Errorf("no partition %s in cluster %s (partitions: %s; Slurm: %s)", clip(id), cid, strings.Join(ids, ", "), MsgInvalidPartition)
}

// MsgDependency is Slurm's word for a --dependency it cannot take.
const MsgDependency = slurmspec.MsgDependency

// CheckDependencyJobs refuses a --dependency (already parsed by
// ValidateSubmitJob or ValidateUpdateJob; "" is none) naming a job id
// greater than last, the newest issued: a job that never existed, most
// likely a typo, which would hold the job forever (DependencyNeverSatisfied;
// Slurm takes it for a job long purged and runs at once). field names the
// request's field.
func CheckDependencyJobs(spec, field string, last int64) error {
	if spec == "" {
		return nil
	}
	d, err := slurmspec.ParseDependency(spec)
	if err != nil {
		return errs.Invalid(field, "%s: %v", clip(spec), err)
	}
	for _, it := range d.Items {
		for _, dj := range it.Jobs {
			if id, err := strconv.ParseInt(dj.JobID, 10, 64); err != nil || id > last {
				return errs.Invalid(field, "job %s does not exist: the newest job is %d (Slurm: %s)", dj.JobID, last, MsgDependency)
			}
		}
	}
	return nil
}

// jobPartition returns the partition job j goes to in cluster: its own,
// else the cluster's default (findPartition's error when there is none).
// A job that names several (-p a,b) goes to its first here: the
// checks that judge a job against each of its partitions use
// jobPartitions.
func jobPartition(cluster *loomv1.Cluster, j *loomv1.Job) (string, *loomv1.SlurmPartition, error) {
	ids, ps, err := jobPartitions(cluster, j)
	if err != nil {
		return "", nil, err
	}
	return ids[0], ps[0], nil
}

// jobPartitions returns every partition job j may go to in cluster, in
// the order it names them (libs/slurmspec's list grammar, -p a,b), else the
// cluster's default alone; the error names the first one the cluster does
// not have. A job is judged against each of them as if it named that one
// alone: each must exist and be able to take it.
func jobPartitions(cluster *loomv1.Cluster, j *loomv1.Job) ([]string, []*loomv1.SlurmPartition, error) {
	id := j.GetPartition()
	if id == "" {
		id = DefaultPartition(cluster)
	}
	ids := []string{id}
	if slurmspec.IsPartitionList(id) {
		var err error
		if ids, err = slurmspec.ParsePartitions(id); err != nil {
			return nil, nil, err
		}
	}
	ps := make([]*loomv1.SlurmPartition, len(ids))
	for i, id := range ids {
		p, err := findPartition(cluster, id)
		if err != nil {
			return nil, nil, err
		}
		ps[i] = p
	}
	return ids, ps, nil
}

// PartitionMaxSeconds is the MaxTime, in seconds, of the partition j goes
// to in cluster (0: unlimited, or no such partition: nothing to compare);
// of a job that names several, the largest (it may run in that one).
func PartitionMaxSeconds(cluster *loomv1.Cluster, j *loomv1.Job) int64 {
	_, ps, err := jobPartitions(cluster, j)
	if err != nil {
		return 0
	}
	most := int64(0)
	for _, p := range ps {
		if p.GetMaxTime() == "" {
			return 0
		}
		d, unlimited, err := clusterspec.ParseMaxTime(p.GetMaxTime())
		if err != nil || unlimited {
			return 0
		}
		most = max(most, int64(d/time.Second))
	}
	return most
}

// partitionPools returns the node pools whose nodes are in partition p.
func partitionPools(c *loomv1.Cluster, p *loomv1.SlurmPartition) []*loomv1.NodePool {
	sets := c.GetOrchestrator().GetSlurm().GetNodeSets()
	if len(sets) == 0 {
		n := proto.Clone(c).(*loomv1.Cluster)
		clusterspec.Normalize(n) // node sets as the scheduler sees them
		sets = n.GetOrchestrator().GetSlurm().GetNodeSets()
	}
	var out []*loomv1.NodePool
	for _, ns := range sets {
		if !slices.Contains(p.GetNodeSetIds(), ns.GetId()) {
			continue
		}
		for _, pool := range c.GetCompute().GetNodePools() {
			if pool.GetId() == ns.GetNodePoolId() && !slices.Contains(out, pool) {
				out = append(out, pool)
			}
		}
	}
	return out
}

// validateSlurm checks a job's Slurm options (sbatch's), adding every problem
// to v. cluster is the job's cluster (nil when unknown; then what depends on
// it is not checked); maxArraySize bounds --array's task ids (Slurm's
// MaxArraySize). It returns the partition the job goes to ("" when it
// could not be told) and the node pools of that partition.
func validateSlurm(v *errs.Validator, j *loomv1.Job, cluster *loomv1.Cluster, maxArraySize int) (partitions []string, pools [][]*loomv1.NodePool) {
	v.Check(j.GetTimeLimitSeconds() >= 0, "job.time_limit_seconds", "%d must not be negative (0: the partition's MaxTime)", j.GetTimeLimitSeconds())
	v.Check(j.GetTimeLimitSeconds() <= maxTimeLimitSeconds, "job.time_limit_seconds", "%d is more than a century", j.GetTimeLimitSeconds())
	checkNice(v, "job.nice", j.GetNice())
	for _, f := range []struct {
		name     string
		val, max int64
	}{
		{"job.ntasks", int64(j.GetNtasks()), slurmspec.MaxJobTasks},
		{"job.ntasks_per_node", int64(j.GetNtasksPerNode()), slurmspec.MaxTasksPerNode},
		{"job.cpus_per_task", int64(j.GetCpusPerTask()), slurmspec.MaxCPUsPerTask},
		{"job.cpus_per_gpu", int64(j.GetCpusPerGpu()), slurmspec.MaxCPUsPerGPU},
		{"job.mem_mb", j.GetMemMb(), slurmspec.MaxMemMB},
		{"job.mem_per_cpu_mb", j.GetMemPerCpuMb(), slurmspec.MaxMemMB},
		{"job.gpus", int64(j.GetGpus()), slurmspec.MaxJobGPUs},
		{"job.gpus_per_task", int64(j.GetGpusPerTask()), slurmspec.MaxGPUsPerTask},
	} {
		v.Check(f.val >= 0, f.name, "%d must not be negative", f.val)
		v.Check(f.val <= f.max, f.name, "%d is more than %d, the most Loom takes", f.val, f.max)
	}
	// As Slurm 22.05's sbatch and srun: a task's CPUs come from one or
	// the other, never both.
	v.Check(j.GetCpusPerGpu() == 0 || j.GetCpusPerTask() == 0, "job.cpus_per_gpu",
		"is mutually exclusive with cpus_per_task (Slurm: --cpus-per-gpu is mutually exclusive with --cpus-per-task)")
	if s := j.GetArray(); s != "" {
		if _, err := slurmspec.ParseArray(s, maxArraySize); err != nil {
			v.Add("job.array", "%s: %v", clip(s), err)
		}
	}
	v.Check(j.GetArrayJobId() == "" && j.GetArrayTaskId() == 0, "job.array_job_id", "is set by the scheduler on array tasks; submit the array with job.array")
	switch m := j.GetOpenMode(); m {
	case "", slurmspec.OpenModeAppend, slurmspec.OpenModeTruncate:
	default:
		v.Add("job.open_mode", "%s: want %q or %q (empty: %s)", clip(m), slurmspec.OpenModeAppend, slurmspec.OpenModeTruncate, slurmspec.OpenModeTruncate)
	}
	if s := j.GetDependency(); s != "" {
		if _, err := slurmspec.ParseDependency(s); err != nil {
			v.Add("job.dependency", "%s: %v", clip(s), err)
		}
	}
	if s := j.GetSignal(); s != "" {
		if _, err := slurmspec.ParseSignal(s); err != nil {
			v.Add("job.signal", "%s: %v (want [B:]SIG[@seconds])", clip(s), err)
		}
	}
	// Loom's resilience options (sbatch --retries, --hang-timeout,
	// --checkpoint-dir): a hang timeout past the bound would overflow the
	// scheduler's clock arithmetic, and a relative checkpoint directory is
	// one under the cluster's shared directory, which ".." would leave.
	v.Check(j.GetMaxRetries() >= 0 && j.GetMaxRetries() <= slurmspec.MaxRetries, "job.max_retries",
		"%d is not 0 to %d", j.GetMaxRetries(), slurmspec.MaxRetries)
	if err := slurmspec.CheckHangTimeout(j.GetHangTimeoutSeconds()); err != nil {
		v.Add("job.hang_timeout_seconds", "%v", err)
	}
	if err := slurmspec.CheckCheckpointDir(j.GetCheckpointDir()); err != nil {
		v.Add("job.checkpoint_dir", "%s %v", clip(j.GetCheckpointDir()), err)
	}
	for _, d := range []struct{ name, val string }{{"job.work_dir", j.GetWorkDir()}, {"job.submit_dir", j.GetSubmitDir()}} {
		v.Check(d.val == "" || filepath.IsAbs(d.val), d.name, "%s must be an absolute path", clip(d.val))
	}
	for i, h := range j.GetNodelist() {
		v.Check(resname.ValidID(h), fmt.Sprintf("job.nodelist[%d]", i), "%s is not a hostname", clip(h))
	}
	for i, h := range j.GetExclude() {
		v.Check(resname.ValidID(h), fmt.Sprintf("job.exclude[%d]", i), "%s is not a hostname", clip(h))
	}
	if _, err := slurmspec.ParsePartitions(j.GetPartition()); err != nil {
		v.Add("job.partition", "%v", err)
		return nil, nil
	}
	if cluster == nil {
		return nil, nil
	}
	partitions, ps, err := jobPartitions(cluster, j)
	if err != nil {
		v.Add("job.partition", "%v", err)
		return nil, nil
	}
	if err := checkPartitionsSubmit(partitions, ps); err != nil {
		v.Add("job.partition", "%v", err)
		return nil, nil
	}
	for _, p := range ps {
		pools = append(pools, partitionPools(cluster, p))
	}
	return partitions, pools
}

// checkPartitionsSubmit refuses a job none of whose partitions (ids, ps)
// takes new jobs: each is DRAIN or INACTIVE (scontrol update
// PartitionName=P State=...), Slurm's ESLURM_PARTITION_NOT_AVAIL. Of a list
// (-p a,b) that has one that does, AcceptJob keeps only those that do, as
// slurmctld does.
func checkPartitionsSubmit(ids []string, ps []*loomv1.SlurmPartition) error {
	var shut []string
	for i, p := range ps {
		if slurmspec.PartitionSubmits(p.GetState()) {
			return nil
		}
		shut = append(shut, fmt.Sprintf("%s is %s", ids[i], p.GetState()))
	}
	return fmt.Errorf("%s: partition %s, which takes no new jobs until an administrator sets it UP or DOWN",
		slurmspec.MsgPartitionNotAvail, strings.Join(shut, ", "))
}

// UpdatedPartition is the partition (scontrol update Partition=) an
// update moving job to partition sends: as a submission (checkPartitionsSubmit),
// a move to partitions none of which takes new jobs (DRAIN, INACTIVE) is
// refused (InvalidArgument on partition, Slurm's words), and of a list
// (-p a,b) those that take none are left out. A partition the job is in
// already, or none, is left as it is; one the cluster lacks CheckUpdatedJob
// has refused.
func UpdatedPartition(cluster *loomv1.Cluster, job *loomv1.Job, partition string) (string, error) {
	if partition == "" || cluster == nil {
		return partition, nil
	}
	n, err := slurmspec.NormalizePartitions(partition)
	if err != nil || n == job.GetPartition() {
		return partition, nil
	}
	ids, ps, err := jobPartitions(cluster, &loomv1.Job{Partition: n})
	if err != nil {
		return partition, nil
	}
	if err := checkPartitionsSubmit(ids, ps); err != nil {
		return "", errs.Invalid("partition", "%v", err)
	}
	return submittingPartitions(cluster, n), nil
}

// submittingPartitions is job partition list (-p a,b; normalized) less
// the partitions of cluster that take no new jobs (DRAIN, INACTIVE), as
// slurmctld keeps them; list itself when it names one partition, or none
// that takes jobs (ValidateSubmitJob refused it).
func submittingPartitions(cluster *loomv1.Cluster, list string) string {
	if !slurmspec.IsPartitionList(list) {
		return list
	}
	ids, err := slurmspec.ParsePartitions(list)
	if err != nil {
		return list
	}
	var keep []string
	for _, id := range ids {
		if p, err := findPartition(cluster, id); err == nil && slurmspec.PartitionSubmits(p.GetState()) {
			keep = append(keep, id)
		}
	}
	if len(keep) == 0 {
		return list
	}
	return strings.Join(keep, ",")
}

// ValidateUpdateJob checks an UpdateJobRequest's action and values (every
// problem at once) and returns the action in lower case. The job's name is
// checked by the caller; what depends on the job's cluster (partition,
// sizes, hosts) by CheckUpdatedJob.
func ValidateUpdateJob(req *loomv1.UpdateJobRequest) (string, error) {
	var v errs.Validator
	checkText(&v, "user", req.GetUser(), MaxNameBytes)
	if checkText(&v, "partition", req.GetPartition(), MaxNameBytes) {
		if _, err := slurmspec.ParsePartitions(req.GetPartition()); err != nil {
			v.Add("partition", "%v", err)
		}
	}
	action := strings.ToLower(strings.TrimSpace(req.GetAction()))
	switch action {
	case "hold", "uhold", "release", "requeue":
		for _, f := range updateFields(req) {
			v.Add(f, "only with action update, not %s", action)
		}
	case "update":
		v.Check(req.GetTimeLimitSeconds() >= 0, "time_limit_seconds", "%d must not be negative (0: unchanged)", req.GetTimeLimitSeconds())
		v.Check(req.GetTimeLimitSeconds() <= maxTimeLimitSeconds, "time_limit_seconds", "%d is more than a century", req.GetTimeLimitSeconds())
		v.Check(len(updateFields(req)) > 0, "action", "update needs one of %s", strings.Join(updateFieldNames, ", "))
		checkText(&v, "qos", req.GetQos(), MaxNameBytes)
		v.Check(req.GetAccount() == "" || accountID.MatchString(strings.ToLower(req.GetAccount())), "account",
			"%s is not an account id: letters, digits, '_', '-' and '.', starting with a letter or digit, at most 64", clip(req.GetAccount()))
		checkNice(&v, "nice", req.GetNice())
		checkBeginTime(&v, "begin_time", req.GetBeginTime())
		if checkText(&v, "dependency", req.GetDependency(), MaxSpecBytes) && req.GetDependency() != "" {
			if _, err := slurmspec.ParseDependency(req.GetDependency()); err != nil {
				v.Add("dependency", "%s: %v", clip(req.GetDependency()), err)
			}
		}
		if req.JobName != nil && checkText(&v, "job_name", req.GetJobName(), MaxNameBytes) {
			v.Check(strings.TrimSpace(req.GetJobName()) != "", "job_name", "must not be empty")
		}
		if req.NodeCount != nil {
			// The partition bounds it from above (CheckUpdatedJob).
			v.Check(req.GetNodeCount() >= 1, "node_count", "%d must be at least 1 (Slurm: Node count specification invalid)", req.GetNodeCount())
		}
		if req.MaxNodeCount != nil {
			// A range's maximum comes with its minimum (NumNodes=MIN-MAX);
			// its bounds are the job's, as at submission (CheckUpdatedJob).
			v.Check(req.NodeCount != nil, "max_node_count", "needs node_count, the range's minimum")
			v.Check(req.GetMaxNodeCount() >= 0, "max_node_count", "%d must not be negative (0: no range)", req.GetMaxNodeCount())
		}
		if req.Ntasks != nil {
			v.Check(req.GetNtasks() >= 1 && req.GetNtasks() <= slurmspec.MaxJobTasks, "ntasks", "%d is not 1 to %d", req.GetNtasks(), slurmspec.MaxJobTasks)
		}
		if req.MemMb != nil {
			v.Check(req.GetMemMb() >= 0, "mem_mb", "%d must not be negative (0: no memory request)", req.GetMemMb())
			v.Check(req.GetMemMb() <= slurmspec.MaxMemMB, "mem_mb", "%d is more than %d, the most Loom takes", req.GetMemMb(), slurmspec.MaxMemMB)
		}
		for _, l := range []struct {
			field string
			list  *loomv1.HostList
		}{{"nodelist", req.GetNodelist()}, {"exclude", req.GetExclude()}} {
			hosts := l.list.GetHosts()
			if len(hosts) > MaxHosts {
				v.Add(l.field, "%d hosts, more than the limit of %d", len(hosts), MaxHosts)
				continue
			}
			for i, h := range hosts {
				v.Check(resname.ValidID(h), fmt.Sprintf("%s[%d]", l.field, i), "%s is not a hostname", clip(h))
			}
		}
		if req.ArrayTaskThrottle != nil {
			v.Check(req.GetArrayTaskThrottle() >= 0, "array_task_throttle", "%d must not be negative (0: no limit)", req.GetArrayTaskThrottle())
		}
		if req.GpusPerNode != nil {
			v.Check(req.GetGpusPerNode() >= 0 && req.GetGpusPerNode() <= slurmspec.MaxJobGPUs, "gpus_per_node", "%d is not 0 to %d",
				req.GetGpusPerNode(), slurmspec.MaxJobGPUs)
		}
		checkText(&v, "gpu_type", req.GetGpuType(), MaxNameBytes)
	case "":
		v.Add("action", "required: one of %s", updateActionsList)
	default:
		v.Add("action", "%s is not one of %s", clip(req.GetAction()), updateActionsList)
	}
	return action, v.Err()
}

// updateFieldNames are the fields an "update" changes, in the order
// updateFields reports them.
var updateFieldNames = []string{"time_limit_seconds", "partition", "nice", "begin_time", "dependency", "qos", "account",
	"job_name", "node_count", "ntasks", "mem_mb", "nodelist", "exclude", "array_task_throttle", "gpus_per_node", "gpu_type", "max_node_count"}

// updateFields returns the names of the fields req sets that only an
// "update" takes.
func updateFields(req *loomv1.UpdateJobRequest) []string {
	set := []bool{req.GetTimeLimitSeconds() != 0, req.GetPartition() != "", req.Nice != nil, req.BeginTime != nil, req.Dependency != nil,
		req.Qos != nil, req.Account != nil, req.JobName != nil, req.NodeCount != nil, req.Ntasks != nil, req.MemMb != nil,
		req.Nodelist != nil, req.Exclude != nil, req.ArrayTaskThrottle != nil, req.GpusPerNode != nil, req.GpuType != nil, req.MaxNodeCount != nil}
	var out []string
	for i, ok := range set {
		if ok {
			out = append(out, updateFieldNames[i])
		}
	}
	return out
}

// Resizes reports whether req changes what a job asks of its partition's
// nodes (its partition, node count, tasks, memory, GPUs, node list or
// exclusions): CheckUpdatedJob must judge it against the cluster.
func Resizes(req *loomv1.UpdateJobRequest) bool {
	return req.GetPartition() != "" || req.NodeCount != nil || req.MaxNodeCount != nil || req.Ntasks != nil || req.MemMb != nil || req.Nodelist != nil || req.Exclude != nil ||
		req.GpusPerNode != nil || req.GpuType != nil
}

// Updated returns a copy of job as req's update leaves what it asks of its
// cluster: partition, node count, tasks, memory, GPUs, node list,
// exclusions. The hosts of the node list count as nodes, as at submission
// (slurmspec.FitNodes): a range's minimum below them is raised to them
// (NumNodes=1-3 with two hosts is 2-3), which raises the tasks as a new
// minimum does; a maximum below them is CheckUpdatedJob's to refuse. The
// task count lowers no node count here, as Slurm's controller lowers none
// (slurmspec.TasksForNodes).
func Updated(job *loomv1.Job, req *loomv1.UpdateJobRequest) *loomv1.Job {
	j := proto.Clone(job).(*loomv1.Job)
	if p := req.GetPartition(); p != "" {
		j.Partition = p
		if n, err := slurmspec.NormalizePartitions(p); err == nil {
			j.Partition = n
		}
	}
	if req.NodeCount != nil {
		// A count alone replaces a range (-N MIN-MAX); with a maximum it
		// is the new range, as Slurm's NumNodes=MIN-MAX.
		j.NodeCount, j.MaxNodeCount = req.GetNodeCount(), req.GetMaxNodeCount()
		if j.MaxNodeCount == j.NodeCount {
			j.MaxNodeCount = 0
		}
	}
	if req.Ntasks != nil {
		j.Ntasks = req.GetNtasks()
	}
	if req.Nodelist != nil {
		j.Nodelist = req.GetNodelist().GetHosts()
	}
	newMin := req.NodeCount != nil
	// Tasks 0: the update's tasks lower nothing (see above), only the
	// hosts raise a range's minimum, and only when the update changes
	// the range or the hosts: another update leaves the size alone.
	if newMin || req.Nodelist != nil {
		if f := slurmspec.FitNodes(0, j.NodeCount, j.MaxNodeCount, j.Nodelist); !f.Refused && f.Nodes != j.NodeCount {
			j.NodeCount, newMin = f.Nodes, true
			if j.MaxNodeCount == j.NodeCount {
				j.MaxNodeCount = 0
			}
		}
	}
	if newMin {
		j.Ntasks = slurmspec.TasksForNodes(j.Ntasks, j.NodeCount)
	}
	if req.MemMb != nil {
		// Memory a node replaces --mem-per-cpu (as the scheduler's update).
		j.MemMb, j.MemPerCpuMb = req.GetMemMb(), 0
	}
	if req.Exclude != nil {
		j.Exclude = req.GetExclude().GetHosts()
	}
	if req.GpusPerNode != nil {
		j.GpusPerNode = req.GetGpusPerNode()
	}
	if req.GpuType != nil {
		j.GpuType = req.GetGpuType()
	}
	return j
}

// CheckUpdatedJob checks a job as an update leaves it (Updated) against
// its cluster, as at submission: its node count is not below the hosts of
// its node list (checkHostsFit, the submission's rule: NodeList=n[1-2] on
// a one-node job is refused, naming node_count), its partition exists, it
// fits the partition's nodes (checkFit), and its node list and exclusions
// name nodes that can hold it (CheckJobNodes, every host judged: an update
// drops none of them; nodes nil when the job names none). Problems name
// the update's fields.
func CheckUpdatedJob(j *loomv1.Job, cluster *loomv1.Cluster, nodes map[string]*loomv1.Node) error {
	partitions, ps, err := jobPartitions(cluster, j)
	if err != nil {
		return errs.Invalid("partition", "%v", err)
	}
	var v errs.Validator
	checkHostsFit(&v, "", j)
	pools := make([][]*loomv1.NodePool, len(ps))
	for i, p := range ps {
		pools[i] = partitionPools(cluster, p)
	}
	checkFit(&v, "", j, cluster.GetName(), partitions, pools)
	if err := v.Err(); err != nil || len(j.GetNodelist())+len(j.GetExclude()) == 0 {
		return err
	}
	// Judged whole: the update's hosts and count reach the scheduler as
	// they are, none dropped (fitNodes is the submission's).
	if err := checkJobNodes(j, j, cluster, nodes); err != nil {
		var invalid *errs.InvalidError
		if errors.As(err, &invalid) {
			for i := range invalid.Violations {
				invalid.Violations[i].Field = strings.TrimPrefix(invalid.Violations[i].Field, "job.")
			}
		}
		return err
	}
	return nil
}

// CheckUpdate refuses an update action (req's) for the state job is in,
// with Slurm's wording: hold, release and update of a finished job, a
// requeue of a pending one, and a change of partition, begin time,
// dependency, QOS, account, size or hosts of a job that started.
func CheckUpdate(action string, req *loomv1.UpdateJobRequest, job *loomv1.Job) error {
	s := job.GetState()
	partition := req.GetPartition()
	pendingOnly := partition != "" && partition != job.GetPartition() || req.BeginTime != nil || req.Dependency != nil || req.Qos != nil || req.Account != nil ||
		req.NodeCount != nil || req.Ntasks != nil || req.MemMb != nil || req.Nodelist != nil || req.Exclude != nil || req.GpusPerNode != nil || req.GpuType != nil
	switch {
	case (action == "hold" || action == "uhold" || action == "release" || action == "update") && s.Terminal():
		return refuse(MsgFinished)
	case action == "requeue" && (s == loomv1.JobState_PENDING || s == loomv1.JobState_JOB_STATE_UNSPECIFIED):
		return refuse(MsgPending)
	case action == "update" && pendingOnly && Rank(s) > 0:
		return refuse(MsgNoLongerPending)
	}
	return nil
}

// checkNice checks a --nice adjustment's bounds, adding a problem on field.
func checkNice(v *errs.Validator, field string, nice int32) {
	v.Check(nice >= -slurmspec.MaxNice && nice <= slurmspec.MaxNice, field, "%d is outside -%d..%d", nice, slurmspec.MaxNice, slurmspec.MaxNice)
}

// CheckNiceAllowed refuses a negative --nice (a raised priority) from a
// caller who is not an administrator, as Slurm does.
func CheckNiceAllowed(c Caller, field string, nice int32) error {
	if nice < 0 && !c.Admin {
		return fmt.Errorf("%s: %d: only an administrator of the project may raise a priority with a negative nice (0..%d lowers it): %w",
			field, nice, slurmspec.MaxNice, errs.PermissionDenied)
	}
	return nil
}

// ParseCancelSignal checks CancelJobRequest.signal: a signal name ("USR1",
// "SIGUSR1", any case) or number ("10"); it returns the name ("" for none).
func ParseCancelSignal(signal string) (string, error) {
	if signal == "" {
		return "", nil
	}
	name, err := slurmspec.ParseSignalName(signal)
	if err != nil {
		return "", errs.Invalid("signal", "%v (a name such as HUP INT QUIT KILL USR1 USR2 TERM CONT STOP, or a number 1-31)", err)
	}
	return name, nil
}

// CheckUser checks the caller a request names (CancelJobRequest.user and
// the like): at most MaxNameBytes, no control characters.
func CheckUser(user string) error {
	var v errs.Validator
	checkText(&v, "user", user, MaxNameBytes)
	return v.Err()
}

// CheckRequestID checks a request_id: at most MaxRequestIDBytes, no
// control characters.
func CheckRequestID(id string) error {
	var v errs.Validator
	checkRequestID(&v, id)
	return v.Err()
}

// CheckCompletion checks a CancelJobRequest's exit_code (an allocation
// ended as its command did): 0 to 255, and not with a signal (parsed).
func CheckCompletion(req *loomv1.CancelJobRequest, signal string) error {
	if req.ExitCode == nil {
		return nil
	}
	var v errs.Validator
	v.Check(req.GetExitCode() >= 0 && req.GetExitCode() <= 255, "exit_code", "%d is not 0 to 255", req.GetExitCode())
	v.Check(signal == "", "exit_code", "ends the job: not with a signal (%s)", signal)
	return v.Err()
}

// PendingArraySignal refuses a signal to array arrayID, or to any of its
// tasks, while at least two of its tasks, at indexes pending (any order),
// have not started: slurmctld 22.05 keeps those in one record, and while
// it holds several it answers such a signal "Job can not be altered now"
// (measured beside Loom with scancel -b -s USR1: an array 1-3%1, task 1
// running, refused for the whole array and for task 1 alone; with one task
// left pending, 1-2%1, task 1 alone took the signal, exit 0). slurmctld
// still signals the running tasks as it refuses (scancel retries, and
// they get it again each time); Loom refuses the whole request instead,
// nothing signalled, so that a refusal never acts in part. The message
// starts with Slurm's words and names the pending tasks as squeue names
// their record, in parentheses: "12_[2-5%1]" (limit is the array's
// %limit, 0 for none). nil when fewer than two are pending.
func PendingArraySignal(arrayID string, pending []int, limit int) error {
	idx := slices.Clone(pending)
	slices.Sort(idx)
	idx = slices.Compact(idx)
	if len(idx) < 2 {
		// One task left is a pending job of its own in Slurm: a signal
		// to it is refused (CheckCancel), its running siblings take one.
		return nil
	}
	rec := arrayID + "_[" + slurmspec.FormatIndexes(idx)
	if limit > 0 {
		rec += "%" + strconv.Itoa(limit)
	}
	rec += "]"
	return refuse(fmt.Sprintf("%s: array %s has tasks still pending (%s); none of its tasks takes a signal until they have started",
		MsgNotNow, arrayID, rec))
}

// CheckCancel refuses to cancel or signal job in the state it is in:
// finishing or finished jobs (Slurm's "Job/step already completing or
// completed"), and signals to jobs that have not started.
func CheckCancel(job *loomv1.Job, signal string) error {
	s := job.GetState()
	switch {
	case s.Terminal() || s == loomv1.JobState_COMPLETING:
		return refuse(MsgAlreadyDone)
	case signal != "" && (s == loomv1.JobState_PENDING || s == loomv1.JobState_JOB_STATE_UNSPECIFIED):
		return refuse(MsgPending)
	}
	return nil
}

// ValidateUpdateSlurmNode checks an UpdateSlurmNodeRequest and returns its
// state in upper case: the cluster name, the hostname, a state DRAIN or
// RESUME (UNDRAIN is taken for RESUME, as scontrol does), and a reason for a
// DRAIN, which Slurm requires.
func ValidateUpdateSlurmNode(req *loomv1.UpdateSlurmNodeRequest) (string, error) {
	var v errs.Validator
	if _, err := resname.ParseCluster(req.GetCluster()); err != nil {
		v.Add("cluster", "%v", err)
	}
	v.Check(resname.ValidID(req.GetHostname()), "hostname", "%s is not a node hostname", clip(req.GetHostname()))
	checkText(&v, "reason", req.GetReason(), MaxReasonBytes)
	checkText(&v, "user", req.GetUser(), MaxNameBytes)
	state := strings.ToUpper(strings.TrimSpace(req.GetState()))
	switch state {
	case "DRAIN", "DOWN":
		v.Check(strings.TrimSpace(req.GetReason()) != "", "reason", "%s", MsgDrainNeedsReason)
	case "RESUME", "UNDRAIN", "IDLE":
		state = "RESUME"
	case "":
		v.Add("state", "required: one of %s", slurmNodeStatesList)
	default:
		v.Add("state", "%s is not one of %s", clip(req.GetState()), slurmNodeStatesList)
	}
	return state, v.Err()
}

// ValidateListJobs checks a ListJobsRequest's filters.
func ValidateListJobs(v *errs.Validator, req *loomv1.ListJobsRequest) {
	for i, id := range req.GetJobIds() {
		if _, err := slurmspec.ParseJobRef(id); err != nil {
			v.Add(fmt.Sprintf("job_ids[%d]", i), "%v", err)
		}
	}
	for i, s := range req.GetStates() {
		_, known := loomv1.JobState_name[int32(s)]
		v.Check(known && s != loomv1.JobState_JOB_STATE_UNSPECIFIED, fmt.Sprintf("states[%d]", i), "%v is not a job state", s)
	}
	for _, f := range []struct {
		name string
		vals []string
	}{{"users", req.GetUsers()}, {"names", req.GetNames()}, {"partitions", req.GetPartitions()}} {
		if len(f.vals) > MaxFilterValues {
			v.Add(f.name, "%d values, more than the limit of %d", len(f.vals), MaxFilterValues)
			continue
		}
		for i, s := range f.vals {
			v.Check(s != "", fmt.Sprintf("%s[%d]", f.name, i), "must not be empty")
			checkText(v, fmt.Sprintf("%s[%d]", f.name, i), s, MaxNameBytes)
		}
	}
	v.Check(len(req.GetJobIds()) <= MaxFilterValues, "job_ids", "%d values, more than the limit of %d", len(req.GetJobIds()), MaxFilterValues)
	v.Check(len(req.GetStates()) <= MaxFilterValues, "states", "%d values, more than the limit of %d", len(req.GetStates()), MaxFilterValues)
}

// Filtered reports whether req narrows the list with any filter besides the cluster.
func Filtered(req *loomv1.ListJobsRequest) bool {
	return len(req.GetUsers()) > 0 || len(req.GetStates()) > 0 || len(req.GetJobIds()) > 0 ||
		len(req.GetNames()) > 0 || len(req.GetPartitions()) > 0 || req.GetActiveOnly()
}

// SlurmJobName is the name Slurm shows for a job (%x, squeue's NAME), as the
// scheduler gives it: the display name, else the command's program, else
// "sbatch".
func SlurmJobName(j *loomv1.Job) string {
	switch {
	case j.GetDisplayName() != "":
		return j.GetDisplayName()
	case len(j.GetCommand()) > 0:
		return filepath.Base(j.GetCommand()[0])
	}
	return "sbatch"
}

// MatchesList reports whether a job as the gateway accepted it (pending)
// passes req's filters, as the scheduler applies them: users by user, names
// by SlurmJobName, partitions by partition, job ids by job id ("A_i" matches
// array A, which stands for its tasks until the scheduler creates them).
func MatchesList(req *loomv1.ListJobsRequest, j *loomv1.Job) bool {
	in := func(set []string, v string) bool { return len(set) == 0 || slices.Contains(set, v) }
	if !in(req.GetUsers(), j.GetUser()) || !in(req.GetNames(), SlurmJobName(j)) || (len(req.GetPartitions()) > 0 && !slurmspec.AnyPartitionOf(j.GetPartition(), req.GetPartitions())) {
		return false
	}
	if len(req.GetStates()) > 0 && !slices.Contains(req.GetStates(), j.GetState()) {
		return false
	}
	if req.GetActiveOnly() && j.GetState().Terminal() {
		return false
	}
	if ids := req.GetJobIds(); len(ids) > 0 {
		ok := false
		for _, id := range ids {
			if ref, err := slurmspec.ParseJobRef(id); err == nil {
				ok = ok || matchesJobID(ref, j)
			}
		}
		return ok
	}
	return true
}

// matchesJobID says whether a job id filter names j, as the scheduler's
// list reads it (views.JobFilter): "A" the job A and every task of array
// A, "A_k" task k of array A. An array record not split into tasks yet
// (array set, array_job_id not) stands for every task: "A_k" names it.
func matchesJobID(ref slurmspec.JobRef, j *loomv1.Job) bool {
	id, a := strconv.FormatInt(ref.JobID, 10), j.GetArrayJobId()
	switch {
	case ref.Task < 0:
		return id == j.GetJobId() || id == a
	case a != "":
		return id == a && int(j.GetArrayTaskId()) == ref.Task
	default:
		return id == j.GetJobId() && j.GetArray() != ""
	}
}

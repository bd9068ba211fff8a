package domain

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/clusterspec"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/slurmspec"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// AcceptCluster checks a create request and returns the cluster to create:
// req.cluster normalized (NormalizeSpec), named from parent and cluster_id,
// its output-only fields cleared. Every problem is reported at once, the
// spec's with paths under "cluster." (the request field).
func AcceptCluster(req *loomv1.CreateClusterRequest) (*loomv1.Cluster, error) {
	var v errs.Validator
	parent, err := resname.ParseProject(req.GetParent())
	project := parent.ID
	if err != nil {
		v.Add("parent", "%v", err)
	}
	switch id := req.GetClusterId(); {
	case id == "":
		v.Add("cluster_id", "required")
	case !resname.ValidID(id):
		v.Add("cluster_id", "%q must match %s", id, resname.IDPattern)
	}
	checkRequestID(&v, req.GetRequestId())
	if req.GetCluster() == nil {
		v.Add("cluster", "required")
		return nil, v.Err()
	}
	checkClusterText(&v, req.GetCluster())
	name := resname.Cluster{Project: project, ID: req.GetClusterId()}.String()
	if n := req.GetCluster().GetName(); n != "" && project != "" && n != name {
		v.Add("cluster.name", "%q does not match parent and cluster_id; leave it empty", n)
	}
	// The spec is judged as given (so that what Normalize generates is not
	// reported on) and without its name: parent and cluster_id are judged.
	spec := SpecOf(req.GetCluster())
	if err := joinInvalid(v.Err(), PrefixFields(clusterspec.Validate(spec), "cluster.")); err != nil {
		return nil, err
	}
	c := NormalizeSpec(spec)
	c.Name = name
	if err := PrefixFields(clusterspec.CheckReservations(c), "cluster."); err != nil {
		return nil, err
	}
	if err := checkClusterCommand(c); err != nil {
		return nil, err
	}
	return c, nil
}

// checkClusterText checks the free text of a cluster spec, which the CLI
// prints: display_name and description (which may hold newlines and tabs).
func checkClusterText(v *errs.Validator, c *loomv1.Cluster) {
	checkText(v, "cluster.display_name", c.GetDisplayName(), MaxNameBytes)
	checkTextAllowing(v, "cluster.description", c.GetDescription(), MaxDescriptionBytes, "\n\t")
}

// checkClusterCommand refuses a cluster whose CreateCluster or
// UpdateCluster command would not fit in a record: every field can be within
// its own bound and the spec (pools, labels, prolog and epilog scripts)
// still too large.
func checkClusterCommand(c *loomv1.Cluster) error {
	var v errs.Validator
	checkCommandSize(&v, "cluster", &eventsv1.UpdateCluster{Operation: resname.Operation{Project: DefaultProject, ID: "01234567890123456789012345"}.String(),
		Cluster: c, UpdateMask: UpdatablePaths, DrainGraceSeconds: math.MaxInt32})
	return v.Err()
}

// SpecOf returns a copy of c without its output-only fields (name, status,
// create and update times, etag): what a user wrote.
func SpecOf(c *loomv1.Cluster) *loomv1.Cluster {
	out := proto.Clone(c).(*loomv1.Cluster)
	out.Name, out.Status, out.CreateTime, out.UpdateTime, out.Etag = "", nil, nil, nil, ""
	return out
}

// JobCluster returns the full cluster name a submit request refers to: the
// job's cluster as given, or a bare cluster id taken in the parent's project.
// It returns "" when that is not a well-formed cluster name.
func JobCluster(req *loomv1.SubmitJobRequest) string {
	c := req.GetJob().GetCluster()
	if resname.ValidID(c) {
		project, err := resname.ParseProject(req.GetParent())
		if err != nil {
			return ""
		}
		c = resname.Cluster{Project: project.ID, ID: c}.String()
	}
	if _, err := resname.ParseCluster(c); err != nil {
		return ""
	}
	return c
}

// ValidateSubmitJob checks req, reporting every problem at once. cluster is
// the job's cluster as its owner reports it, nil when it does not exist (or
// the name was malformed, so no lookup was made); maxArraySize is Slurm's
// MaxArraySize an --array spec's task ids must be below.
func ValidateSubmitJob(req *loomv1.SubmitJobRequest, cluster *loomv1.Cluster, maxArraySize int) error {
	var v errs.Validator
	parent, err := resname.ParseProject(req.GetParent())
	project := parent.ID
	if err != nil {
		v.Add("parent", "%v", err)
	}
	j := req.GetJob()
	if j == nil {
		v.Add("job", "required")
		return v.Err()
	}
	// -N1 with two hosts in the node list is refused, as Slurm's sbatch
	// refuses it.
	checkHostsFit(&v, "job.", j)
	clusterName := JobCluster(req)
	switch {
	case j.GetCluster() == "":
		v.Add("job.cluster", "required")
	case clusterName == "":
		v.Add("job.cluster", "want projects/{project}/clusters/{cluster} or a cluster id, got %q", j.GetCluster())
	case project != "" && !strings.HasPrefix(clusterName, parent.String()+"/"):
		v.Add("job.cluster", "%s is not in %s", clusterName, req.GetParent())
	case cluster == nil:
		v.Add("job.cluster", "cluster %s does not exist", clusterName)
	default:
		switch s := cluster.GetStatus().GetState(); s {
		case loomv1.Cluster_DELETING, loomv1.Cluster_DELETED, loomv1.Cluster_ERROR:
			v.Add("job.cluster", "cluster %s is %s", clusterName, s)
		}
	}

	switch hasCmd, hasScript := len(j.GetCommand()) > 0, j.GetScript() != ""; {
	case hasCmd && hasScript:
		v.Add("job.command", "set exactly one of command and script, not both")
	case !hasCmd && !hasScript:
		v.Add("job.command", "required: set command (argv) or script")
	case hasCmd && j.GetCommand()[0] == "":
		v.Add("job.command[0]", "the program to run must not be empty")
	}
	checkArgv(&v, "job.command", j.GetCommand())
	checkBytes(&v, "job.script", j.GetScript(), MaxScriptBytes)
	checkEnv(&v, "job.env", j.GetEnv())
	checkRequestID(&v, req.GetRequestId())
	checkJobText(&v, j)

	partitions, pools := validateSlurm(&v, j, cluster, maxArraySize)
	// The fit is judged as it will be accepted (AcceptJob): -N5 -n1 on
	// four nodes is a one-node job, as Slurm's sbatch takes it. Only the
	// fit: every other check above judges the request as given, so that
	// the hosts ntasks drops from the node list are still bounded
	// (MaxHosts) and named at their own index when malformed.
	checkFit(&v, "job.", fitNodes(j), clusterName, partitions, pools)
	if mo := j.GetModelOutput(); mo != nil && !resname.ValidID(mo.GetModelId()) {
		v.Add("job.model_output.model_id", "%q must match %s", mo.GetModelId(), resname.IDPattern)
	}
	for k := range j.GetEnv() {
		v.Check(slurmspec.ValidEnvName(k), "job.env["+clipKey(k)+"]",
			"not a valid environment variable name (an identifier, or an exported bash function BASH_FUNC_name%%%%)")
	}
	if err := v.Err(); err != nil {
		return err
	}
	// Every field within its bound can still add up to more than a record
	// holds: the command is judged as it will be published (the largest id,
	// the latest time).
	accepted := AcceptJob(req, cluster, math.MaxInt64, MaxBeginTime)
	// A range's maximum against the count the job is given: without -N
	// that is the nodes its tasks need (NodesFor), which checkFit, judging
	// the request's own fields, did not see. The scheduler refuses a
	// maximum below the count (dead-lettering the accepted job's submit,
	// which would then stay PENDING here, never scheduled), as Slurm's -n300
	// -N1-1 on nodes of fewer CPUs is refused at submission.
	if most, n := accepted.GetMaxNodeCount(), accepted.GetNodeCount(); most != 0 && most < n {
		v.Add("job.max_node_count", "%d is below the %d nodes %d tasks need in partition %s (Slurm: %s)",
			most, n, j.GetNtasks(), accepted.GetPartition(), MsgNodeConfig)
	}
	checkCommandSize(&v, "job", &eventsv1.SubmitJob{Job: accepted})
	// Each task of an array is a job of its own in the scheduler's events
	// (JobChanged as it is created, starts, ends), each carrying the script
	// and environment: 1,001 tasks of a 512 KiB job were half a gigabyte
	// written in one transaction at submission.
	if n := ArrayTaskCount(j.GetArray()); n > 1 {
		size := int64(proto.Size(accepted))
		if total := int64(n) * size; total > MaxArrayBytes {
			v.Add("job.array", "%d tasks of %d bytes each are %d MiB of job records, more than the limit of %d MiB: "+
				"make the script smaller (have it run a file), export less of the environment (--export=NONE), or split the array",
				n, size, total>>20, MaxArrayBytes>>20)
		}
	}
	return v.Err()
}

// checkFit checks that a job fits the nodes of each of its partitions
// (partitions and their pools, as validateSlurm found them; none when they
// could not be told, and then only the counts are checked): node count and
// GPUs, and a node's memory and CPUs, as Slurm refuses at submission a
// request no node could meet. The counts are checked once, whatever the
// number of partitions (-p a,b). Problems name the job's fields after
// prefix ("job." at submission, "" for an update).
func checkFit(v *errs.Validator, prefix string, j *loomv1.Job, clusterName string, partitions []string, pools [][]*loomv1.NodePool) {
	// nodesFor is the node count when one is given, else at least 1,
	// whatever the pools: the count's check needs none.
	nodes, gpus := nodesFor(j, nil), j.GetGpusPerNode()
	v.Check(nodes >= 1, prefix+"node_count", "%d must be at least 1 (0 means 1)", j.GetNodeCount())
	v.Check(gpus >= 0, prefix+"gpus_per_node", "%d must not be negative", gpus)
	// A range's maximum (-N MIN-MAX): not below the minimum, and bounded
	// as a cluster's nodes are. Above a partition's nodes is no error, as
	// Slurm's -N1-8 on 4 nodes: the job takes what there is.
	if most := j.GetMaxNodeCount(); most != 0 {
		v.Check(most >= nodes, prefix+"max_node_count", "%d must be at least node_count %d (Slurm: Node count specification invalid)", most, nodes)
		v.Check(most <= clusterspec.MaxClusterNodes, prefix+"max_node_count", "%d exceeds the limit of %d nodes", most, clusterspec.MaxClusterNodes)
	}
	if nodes < 1 || gpus < 0 {
		return
	}
	for i, partition := range partitions {
		checkFitIn(v, prefix, j, clusterName, partition, pools[i])
	}
}

// checkFitIn is checkFit's judgement of j in one partition of its (pools,
// its node pools).
func checkFitIn(v *errs.Validator, prefix string, j *loomv1.Job, clusterName, partition string, pools []*loomv1.NodePool) {
	nodes, gpus := nodesFor(j, pools), j.GetGpusPerNode()
	where := fmt.Sprintf("partition %s of %s", partition, clusterName)
	// A GPU type (--gres=gpu:TYPE:N) only the pools of that type meet:
	// one no pool has would wait forever. Pools of a machine type the
	// catalog does not know are not judged.
	if t := j.GetGpuType(); t != "" {
		typed, types, known := poolsOfGPUType(pools, t)
		if !known {
			typed = pools
		} else if len(typed) == 0 {
			v.Add(prefix+"gpu_type", "%s is not a GPU type of %s (it has %s; Slurm: Invalid generic resource (gres) specification)",
				clip(t), where, orNone(types))
			return
		}
		pools = typed
	}
	maxGPUs, fitting := fit(pools, gpus)
	switch {
	case gpus > maxGPUs:
		v.Add(prefix+"gpus_per_node", "%d exceeds the %d GPUs of the largest node in %s (Slurm: %s)", gpus, maxGPUs, where, MsgNodeConfig)
	case int(nodes) > fitting && j.GetNodeCount() == 0:
		v.Add(prefix+"ntasks", "%d tasks need %d nodes of %s, which has %d%s (Slurm: %s)", j.GetNtasks(), nodes, where, fitting, withGPUs(gpus), MsgNodeConfig)
	case int(nodes) > fitting:
		v.Add(prefix+"node_count", "%d exceeds the %d nodes in %s%s (Slurm: %s)", nodes, fitting, where, withGPUs(gpus), MsgNodeConfig)
	}
	// --gpus without --gpus-per-node: the scheduler spreads them over
	// the partition's nodes, which must hold that many in all.
	if want := int64(j.GetGpus()); want > 0 && gpus == 0 {
		total := int64(0)
		for _, p := range pools {
			total += int64(p.GetNodeCount()) * int64(p.GetAcceleratorCount())
		}
		if want > total {
			v.Add(prefix+"gpus", "%d exceeds the %d GPUs in %s (Slurm: %s)", want, total, where, MsgNodeConfig)
		}
	}
	gpn := spreadGPUsPerNode(j, nodes, maxGPUs)
	width := rangeWidth(j, nodes, fitting)
	need := slurmspec.CPUsPerNode(j.GetNtasksPerNode(), j.GetNtasks(), j.GetCpusPerTask(), int(width), gpn, j.GetCpusPerGpu())
	// --mem past every node's memory would wait forever (NodeTooSmall
	// on every node): Slurm refuses it at submission, as here. Pools of
	// a machine type the catalog does not know are not judged.
	// --mem-per-cpu is judged at the width the CPUs are (a range's
	// widest: its least per node, slurmspec.WidthMemMB), and named: the
	// caller's mem_mb is not what was judged.
	cpus := int32(min(need, math.MaxInt32))
	if mem := slurmspec.WidthMemMB(j, cpus); mem > 0 {
		if maxMB, known := largestNode(pools, machineMemoryMB); known && mem > maxMB {
			if per := j.GetMemPerCpuMb(); per > 0 {
				v.Add(prefix+"mem_per_cpu_mb", "%d MiB a CPU × %d CPUs a node exceed the %d MiB of the largest node in %s (Slurm: Memory specification can not be satisfied)",
					per, max(cpus, 1), maxMB, where)
			} else {
				v.Add(prefix+"mem_mb", "%d MiB exceeds the %d MiB of the largest node in %s (Slurm: Memory specification can not be satisfied)",
					mem, maxMB, where)
			}
		}
	}
	// So would more CPUs on a node (tasks per node times CPUs per
	// task, or its GPUs times CPUs per GPU) than the largest has.
	if maxCPUs, known := largestNode(pools, machineVCPUs); known && need > maxCPUs {
		if width > nodes {
			v.Add(prefix+"ntasks", "%d tasks need %d CPUs a node even at the node range's widest, %d nodes of %s, whose largest has %d (Slurm: %s)",
				j.GetNtasks(), need, width, where, maxCPUs, MsgNodeConfig)
			return
		}
		field, hint := prefix+"cpus_per_task", ""
		if forGPUs := int64(gpn) * int64(j.GetCpusPerGpu()); forGPUs == need {
			v.Add(prefix+"cpus_per_gpu", "%d CPUs a node (%d GPUs × %d CPUs per GPU) exceed the %d of the largest node in %s (Slurm: %s)",
				need, gpn, j.GetCpusPerGpu(), maxCPUs, where, MsgNodeConfig)
			return
		}
		switch {
		case j.GetCpusPerTask() > 1:
		case j.GetNtasksPerNode() > 0:
			field = prefix + "ntasks_per_node"
		default:
			// -n with -N: say how many nodes would hold the tasks.
			field = prefix + "ntasks"
			hint = fmt.Sprintf("; spread them over more nodes (-N %d)", (int64(j.GetNtasks())+maxCPUs-1)/maxCPUs)
		}
		v.Add(field, "%d CPUs a node (tasks per node × CPUs per task) exceed the %d of the largest node in %s (Slurm: CPU count per node can not be satisfied)%s",
			need, maxCPUs, where, hint)
	}
}

// MaxBeginTime is the latest begin_time a job may have: the scheduler
// compares times as nanoseconds since 1970, which end in April 2262, and a
// time past them would read as long past (the job would start at once).
var MaxBeginTime = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)

// minBeginTime is the earliest begin_time taken: 1970.
var minBeginTime = time.Unix(0, 0).UTC()

// checkJobText checks the job's names, identities, paths and Slurm option
// strings: lengths, and no control characters in what squeue, sacct and
// scontrol print.
func checkJobText(v *errs.Validator, j *loomv1.Job) {
	for _, f := range []struct {
		name, val string
		max       int
	}{
		{"job.display_name", j.GetDisplayName(), MaxNameBytes},
		{"job.user", j.GetUser(), MaxNameBytes},
		{"job.partition", j.GetPartition(), MaxNameBytes},
		{"job.account", j.GetAccount(), MaxNameBytes},
		{"job.qos", j.GetQos(), MaxNameBytes},
		{"job.gpu_type", j.GetGpuType(), MaxNameBytes},
		{"job.submit_host", j.GetSubmitHost(), MaxNameBytes},
		{"job.work_dir", j.GetWorkDir(), MaxPathBytes},
		{"job.submit_dir", j.GetSubmitDir(), MaxPathBytes},
		{"job.script_path", j.GetScriptPath(), MaxPathBytes},
		{"job.checkpoint_dir", j.GetCheckpointDir(), MaxPathBytes},
		{"job.output_pattern", j.GetOutputPattern(), MaxPathBytes},
		{"job.error_pattern", j.GetErrorPattern(), MaxPathBytes},
		{"job.array", j.GetArray(), MaxSpecBytes},
		{"job.dependency", j.GetDependency(), MaxSpecBytes},
		{"job.signal", j.GetSignal(), MaxSpecBytes},
	} {
		checkText(v, f.name, f.val, f.max)
	}
	// Each %x, %u and %N may add a name's bytes when the scheduler expands
	// the pattern for a run: bound what it can become, whatever the job is
	// renamed to, not only what is written.
	for _, f := range []struct{ name, val string }{{"job.output_pattern", j.GetOutputPattern()}, {"job.error_pattern", j.GetErrorPattern()}} {
		if len(f.val) <= MaxPathBytes {
			if n := slurmspec.ExpandedBound(f.val, MaxNameBytes); n > MaxPathBytes {
				v.Add(f.name, "may expand to %d bytes (%%x, %%u and %%N each up to %d, ids up to %d digits), more than the limit of %d: use fewer of them",
					n, MaxNameBytes, slurmspec.MaxPatternIDDigits, MaxPathBytes)
			}
		}
	}
	// --export's values are the user's variables: any text but a NUL.
	checkBytes(v, "job.export", j.GetExport(), MaxSpecBytes)
	v.Check(len(j.GetNodelist()) <= MaxHosts, "job.nodelist", "%d hosts, more than the limit of %d", len(j.GetNodelist()), MaxHosts)
	v.Check(len(j.GetExclude()) <= MaxHosts, "job.exclude", "%d hosts, more than the limit of %d", len(j.GetExclude()), MaxHosts)
	checkBeginTime(v, "job.begin_time", j.GetBeginTime())
}

// checkBeginTime checks a --begin (nil: none), adding a problem on field.
func checkBeginTime(v *errs.Validator, field string, b *timestamppb.Timestamp) {
	if b == nil {
		return
	}
	switch err := b.CheckValid(); {
	case err != nil:
		v.Add(field, "%v", err)
	case b.AsTime().After(MaxBeginTime):
		v.Add(field, "%s is after %s, the latest begin time", b.AsTime().UTC().Format(time.RFC3339), MaxBeginTime.Format(time.RFC3339))
	case b.AsTime().Before(minBeginTime):
		// Before 1678 the nanoseconds wrap (to about 2160: the job would
		// wait for a century); any past time means now.
		v.Add(field, "%s is before %s: for at once, give now", b.AsTime().UTC().Format(time.RFC3339), minBeginTime.Format(time.RFC3339))
	}
}

// fit returns the most GPUs any node of pools has, and how many nodes have at least gpus.
func fit(pools []*loomv1.NodePool, gpus int32) (maxGPUs int32, nodes int) {
	for _, p := range pools {
		maxGPUs = max(maxGPUs, p.GetAcceleratorCount())
		if p.GetAcceleratorCount() >= gpus {
			nodes += int(p.GetNodeCount())
		}
	}
	return maxGPUs, nodes
}

// withGPUs says which nodes a count is of: " with N or more GPUs", or
// nothing for a job without GPUs (every node).
func withGPUs(gpus int32) string {
	if gpus <= 0 {
		return ""
	}
	return fmt.Sprintf(" with %d or more GPUs", gpus)
}

// rangeWidth is the most nodes job j could run on, of the fitting nodes of
// a partition, when it gives a node range (-N MIN-MAX) of -n tasks alone:
// the scheduler places such a range at each of its widths, each node with
// its share of the tasks (the scheduler's placeWidths), so its CPUs a node
// are judged at the widest, its maximum capped by its tasks and those
// nodes (never below nodes, its minimum); otherwise nodes. As Slurm 22.05
// runs -N1-3 -n5 on 4-CPU nodes (3,1,1) and refuses -N1-3 -n13 there
// ("Requested node configuration is not available").
func rangeWidth(j *loomv1.Job, nodes int32, fitting int) int32 {
	n := j.GetNtasks()
	if n <= 0 || j.GetNtasksPerNode() > 0 || j.GetGpusPerNode() == 0 && j.GetGpus() > 0 {
		return nodes
	}
	return max(nodes, min(j.GetMaxNodeCount(), n, int32(min(fitting, math.MaxInt32))))
}

// spreadGPUsPerNode is the most GPUs job j takes on one of its nodes
// (nodes: its node count here; maxGPUs: the GPUs of the largest node):
// --gpus-per-node, else --gpus spread over the nodes as the scheduler
// spreads them (a job of one node over as many of the largest as the GPUs
// need), rounded up.
func spreadGPUsPerNode(j *loomv1.Job, nodes, maxGPUs int32) int32 {
	g := j.GetGpus()
	if gpn := j.GetGpusPerNode(); gpn > 0 || g <= 0 {
		return max(gpn, 0)
	}
	n := int64(max(nodes, 1))
	if j.GetNodeCount() <= 1 && maxGPUs > 0 {
		n = max(n, (int64(g)+int64(maxGPUs)-1)/int64(maxGPUs))
	}
	return int32((int64(g) + n - 1) / n)
}

// NodesFor is the node count a job gets: its node_count, else, as Slurm's
// -n without -N, enough nodes of its partition's largest machine type for
// its tasks and their CPUs (tasks are not split across nodes), else 1. It
// is 1 for a job that names tasks per node, or GPUs the scheduler spreads
// (--gpus without --gpus-per-node), or whose partition or machine types
// are not known here; the refusals say what does not fit.
func NodesFor(j *loomv1.Job, cluster *loomv1.Cluster) int32 {
	if j.GetNodeCount() != 0 || cluster == nil {
		return nodesFor(j, nil)
	}
	_, p, err := jobPartition(cluster, j)
	if err != nil {
		return nodesFor(j, nil)
	}
	return nodesFor(j, partitionPools(cluster, p))
}

// nodesFor is NodesFor given the node pools of the job's partition (nil:
// not known), as validateSlurm found them.
func nodesFor(j *loomv1.Job, pools []*loomv1.NodePool) int32 {
	if n := j.GetNodeCount(); n != 0 {
		return n
	}
	if j.GetNtasks() <= 0 || j.GetNtasksPerNode() > 0 || j.GetGpus() > 0 && j.GetGpusPerNode() == 0 {
		return 1
	}
	maxCPUs, known := largestNode(pools, machineVCPUs)
	cpt := int64(max(j.GetCpusPerTask(), 1))
	if !known || cpt > maxCPUs {
		return 1
	}
	perNode := maxCPUs / cpt
	return int32(min((int64(j.GetNtasks())+perNode-1)/perNode, math.MaxInt32))
}

// poolsOfGPUType returns the pools whose GPUs are of type t (Slurm's GRES
// type, as clusterspec's catalog names it, any case), and every GPU type
// the pools have; known is false when a pool's machine type is not in the
// catalog, and then nothing can be told.
func poolsOfGPUType(pools []*loomv1.NodePool, t string) (typed []*loomv1.NodePool, types []string, known bool) {
	for _, p := range pools {
		m, ok := clusterspec.Machine(p.GetMachineType())
		if !ok {
			return nil, nil, false
		}
		if m.GresType == "" {
			continue
		}
		if !slices.Contains(types, m.GresType) {
			types = append(types, m.GresType)
		}
		if strings.EqualFold(m.GresType, t) {
			typed = append(typed, p)
		}
	}
	return typed, types, true
}

// orNone joins names, or says "none".
func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// machineVCPUs and machineMemoryMB are what largestNode measures.
func machineVCPUs(m clusterspec.MachineType) int64    { return int64(m.VCPUs) }
func machineMemoryMB(m clusterspec.MachineType) int64 { return m.SchedulableMemoryMiB() }

// largestNode is the most of what size measures (memory, CPUs) a node of
// pools has, from the machine catalog; known is false when a pool's
// machine type is not in it or has none of it.
func largestNode(pools []*loomv1.NodePool, size func(clusterspec.MachineType) int64) (most int64, known bool) {
	for _, p := range pools {
		m, ok := clusterspec.Machine(p.GetMachineType())
		if !ok || size(m) <= 0 {
			return 0, false
		}
		most = max(most, size(m))
	}
	return most, len(pools) > 0
}

// checkHostsFit adds a problem on field prefix+"node_count" (or
// "max_node_count" for a range) when j's node count is below the hosts of
// its node list, as Slurm's option check refuses "-N1 -w n[1-2]"
// (slurmspec.FitNodes: the one rule for a submission and for the job an
// update leaves). The task count plays no part in a refusal.
func checkHostsFit(v *errs.Validator, prefix string, j *loomv1.Job) {
	f := slurmspec.FitNodes(j.GetNtasks(), j.GetNodeCount(), j.GetMaxNodeCount(), j.GetNodelist())
	if !f.Refused {
		return
	}
	field := prefix + "node_count"
	if j.GetMaxNodeCount() != 0 {
		field = prefix + "max_node_count"
	}
	v.Add(field, "%d is below the %d hosts %snodelist names (Slurm: %s)", f.Most, f.Least, prefix, f.RefusalText())
}

// fitNodes is j with its node count and node list as Slurm's option check
// leaves them (slurmspec.FitNodes): a node count above the task count
// lowered to it, as a node would run no task, and the hosts of the node
// list counted as nodes (ntasks 1 with two hosts is the first host alone).
// Slurm's sbatch, salloc and srun lower it in their shared option check;
// Loom's do too (and warn in Slurm's words), and the gateway applies the
// same rule to every request, so that a client of the API gets the job
// the CLI would. j itself when nothing changes, else a copy: the caller's
// request is never changed under it. A refused fit (f.Refused) is
// ValidateSubmitJob's to report.
func fitNodes(j *loomv1.Job) *loomv1.Job {
	f := slurmspec.FitNodes(j.GetNtasks(), j.GetNodeCount(), j.GetMaxNodeCount(), j.GetNodelist())
	if f.Nodes == j.GetNodeCount() && f.MaxNodes == j.GetMaxNodeCount() && len(f.Hosts) == len(j.GetNodelist()) {
		return j
	}
	j = proto.Clone(j).(*loomv1.Job)
	j.NodeCount, j.MaxNodeCount, j.Nodelist = f.Nodes, f.MaxNodes, f.Hosts
	return j
}

// AcceptJob returns the job as the gateway accepts it from a valid req for
// cluster: name and job_id from id (an array's first task id), the full
// cluster name, node_count 0 → 1 (one above ntasks lowered to it, and the
// node list to as many hosts: fitNodes), the cluster's default partition
// when none is named, state PENDING, submit_time now, and every other
// output-only field cleared.
func AcceptJob(req *loomv1.SubmitJobRequest, cluster *loomv1.Cluster, id int64, now time.Time) *loomv1.Job {
	j := proto.Clone(req.GetJob()).(*loomv1.Job)
	project, _ := resname.ParseProject(req.GetParent())
	j.Cluster = JobCluster(req)
	j.Name = resname.JobOf(project.ID, id).String()
	j.JobId = itoa64(id)
	f := slurmspec.FitNodes(j.Ntasks, j.NodeCount, j.MaxNodeCount, j.Nodelist)
	j.NodeCount, j.MaxNodeCount, j.Nodelist = f.Nodes, f.MaxNodes, f.Hosts
	if j.NodeCount == 0 {
		j.NodeCount = NodesFor(j, cluster)
	}
	if j.Partition == "" && cluster != nil {
		j.Partition = DefaultPartition(cluster)
	}
	if n, err := slurmspec.NormalizePartitions(j.Partition); err == nil {
		j.Partition = n // -p a,b,a is a,b
	}
	if cluster != nil {
		j.Partition = submittingPartitions(cluster, j.Partition) // -p a,b with b DRAIN is a
	}
	j.ClearOutputs()
	j.State, j.SubmitTime = loomv1.JobState_PENDING, timestamppb.New(now)
	j.ArrayJobId, j.ArrayTaskId = "", 0
	return j
}

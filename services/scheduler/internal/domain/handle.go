package domain

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/clusterspec"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/slurmspec"
	"github.com/loom-ml/loom/libs/termtext"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"

	"github.com/loom-ml/loom/services/scheduler/internal/domain/jobstore"
)

// Handle computes what one consumed event does, followed by the scheduling
// pass it triggers on the clusters it touched. Events of types the scheduler
// does not act on give an empty change. A payload that can never be applied
// (a required field missing, an option that does not parse) gives an
// *errs.InvalidError.
func (s *State) Handle(now time.Time, payload proto.Message) (*Change, error) {
	t := writerTxn(s, now)
	if err := t.dispatch(payload); err != nil {
		return nil, err
	}
	t.afterEvents()
	return t.c, nil
}

// dispatch applies one event to the change, without a scheduling pass.
func (t *txn) dispatch(payload proto.Message) error {
	var err error
	switch ev := payload.(type) {
	case *eventsv1.SubmitJob:
		err = t.submit(ev)
	case *eventsv1.CancelJob:
		err = t.cancel(ev)
	case *eventsv1.UpdateJob:
		err = t.updateJob(ev)
	case *eventsv1.UpdateSlurmNode:
		err = t.updateSlurmNode(ev)
	case *eventsv1.ClusterChanged:
		err = t.clusterChanged(ev)
	case *eventsv1.ClusterDeleted:
		err = t.clusterDeleted(ev)
	case *eventsv1.NodeChanged:
		err = t.nodeChanged(ev)
	case *eventsv1.NodeRemoved:
		err = t.nodeRemoved(ev)
	case *eventsv1.NodeHealthChanged:
		err = t.nodeHealth(ev)
	case *eventsv1.StepChanged:
		err = t.stepChanged(ev)
	case *eventsv1.StepProgress:
		err = t.stepProgress(ev) // health.go
	case *eventsv1.UsageReported:
		err = t.usageReported(ev) // taskusage.go
	case *eventsv1.AssociationChanged:
		err = t.associationChanged(ev) // assoclimits.go
	case *eventsv1.AccountChanged:
		err = t.accountChanged(ev) // assoclimits.go
	case *eventsv1.CreateJobStep, *eventsv1.CancelJobStep, *eventsv1.TasksChanged:
		err = t.jobStepEvent(ev) // jobsteps.go
	}
	if err != nil {
		return err
	}
	t.settle() // lifecycle.go; before the pass, so that dependencies see final states
	return nil
}

// afterEvents is what follows the events of a change: the scheduling pass
// over the clusters they touched, and what the pass ends.
func (t *txn) afterEvents() {
	t.pass()
	t.settleJobSteps() // jobsteps.go: the steps of runs this change ended end with them
	t.settle()         // again: the pass may have ended an attempt (preemption)
	t.afterPass()      // health.go
}

// Schedule runs a scheduling pass over every cluster, as at start-up.
func (s *State) Schedule(now time.Time) *Change {
	t := writerTxn(s, now)
	for _, c := range s.Clusters() {
		t.dirty[c] = true
	}
	t.settle()
	t.pass()
	t.settle()
	t.afterPass()
	return t.c
}

func (t *txn) submit(ev *eventsv1.SubmitJob) error {
	var v errs.Validator
	in := ev.GetJob()
	v.Check(in.GetName() != "", "job.name", "required")
	v.Check(in.GetJobId() != "", "job.job_id", "required")
	v.Check(in.GetCluster() != "", "job.cluster", "required")
	v.Check(in.GetNodeCount() >= 0, "job.node_count", "must not be negative, got %d", in.GetNodeCount())
	v.Check(in.GetMaxNodeCount() == 0 || in.GetMaxNodeCount() >= max(in.GetNodeCount(), 1), "job.max_node_count",
		"must be 0 or at least node_count, got %d", in.GetMaxNodeCount())
	v.Check(in.GetGpusPerNode() >= 0 && in.GetGpusPerNode() <= MaxGPUsPerNode, "job.gpus_per_node",
		"must be 0..%d, got %d", MaxGPUsPerNode, in.GetGpusPerNode())
	v.Check(in.GetGpus() >= 0, "job.gpus", "must not be negative, got %d", in.GetGpus())
	v.Check(in.GetTimeLimitSeconds() >= 0, "job.time_limit_seconds", "must not be negative, got %d", in.GetTimeLimitSeconds())
	if _, err := ParseJobSignal(in.GetSignal()); err != nil {
		v.Add("job.signal", "%v", err)
	}
	var arr ArraySpec
	if in.GetArray() != "" && in.GetArrayJobId() == "" {
		var err error
		if arr, err = ParseArraySpec(in.GetArray(), t.s.cfg.MaxArraySize); err != nil {
			v.Add("job.array", "%v", err)
		}
		if _, err := strconv.ParseInt(in.GetJobId(), 10, 64); err != nil {
			v.Add("job.job_id", "an array's job id must be numeric, got %q", in.GetJobId())
		}
	}
	if err := v.Err(); err != nil {
		return fmt.Errorf("submit job: %w", err)
	}
	if t.job(in.GetName()) != nil || t.ended(in.GetName()) != nil {
		return nil // a copy of a submit already applied (the job may have ended and been pruned since)
	}
	base := proto.Clone(in).(*loomv1.Job)
	base.ClearOutputs()
	base.State = loomv1.JobState_PENDING
	// max_retries and hang_timeout_seconds are bounded here too (the
	// gateway refuses what is out of slurmspec's bounds; a hang timeout
	// past them would overflow as a duration).
	base.MaxRetries = min(max(base.GetMaxRetries(), 0), slurmspec.MaxRetries)
	base.HangTimeoutSeconds = min(max(base.GetHangTimeoutSeconds(), slurmspec.HangTimeoutOff), slurmspec.MaxHangTimeoutSeconds)
	// So are the counts, whose products the placement takes in int32
	// (tasks per node times CPUs per task, GPUs over nodes): past these a
	// hostile job wraps them, to a negative node count that panics the
	// pass or a run charged for no CPUs.
	base.Ntasks = min(base.GetNtasks(), slurmspec.MaxJobTasks)
	base.NtasksPerNode = min(base.GetNtasksPerNode(), slurmspec.MaxTasksPerNode)
	base.CpusPerTask = min(base.GetCpusPerTask(), slurmspec.MaxCPUsPerTask)
	base.CpusPerGpu = min(max(base.GetCpusPerGpu(), 0), slurmspec.MaxCPUsPerGPU)
	base.Gpus = min(base.GetGpus(), slurmspec.MaxJobGPUs)
	base.TimeLimitSeconds = min(base.GetTimeLimitSeconds(), slurmspec.MaxTimeLimitSeconds)
	// A begin time before 1970 (the gateway refuses it) is past: now.
	// Compared as nanoseconds, one before 1678 wraps to about 2160.
	if b := base.GetBeginTime(); b != nil && (b.CheckValid() != nil || b.AsTime().Before(time.Unix(0, 0))) {
		base.BeginTime = nil
	}
	base.NodeCount = max(base.NodeCount, 1)
	base.Nodelist, base.Exclude = uniqueHosts(base.Nodelist), uniqueHosts(base.Exclude)
	if base.SubmitTime == nil {
		base.SubmitTime = timestamppb.New(t.now)
	}
	if base.GetQos() == "" {
		base.Qos = t.s.cfg.DefaultQOS
	}
	c := t.cluster(in.GetCluster())
	if base.GetPartition() == "" && c != nil {
		if p, i := c.Partition(""); i >= 0 {
			base.Partition = p.Name
		}
	}
	// No --time under an association's MaxWall: MaxWall is the job's
	// limit, as Slurm gives it at submission (squeue and scontrol show
	// it), unless each partition it names has a MaxTime within MaxWall
	// (mostSeconds; none where the cluster is not known yet).
	most := int64(0)
	if c != nil {
		most = mostSeconds(c, base.GetPartition())
	}
	if wall := t.wallDefault(base, most); wall > 0 {
		base.TimeLimitSeconds = wall
	}
	if base.GetHold() {
		base.StateReason = ReasonHeldUser
	}
	jobs := []*Job{{JobRecord: jobstore.JobRecord{Job: base}}}
	if len(arr.Indexes) > 0 {
		a := &Array{Name: in.GetName(), Cluster: in.GetCluster(), JobID: in.GetJobId(), Limit: arr.Limit,
			Indexes: arr.Indexes, Tasks: make([]string, len(arr.Indexes)), Template: base}
		first, _ := strconv.ParseInt(in.GetJobId(), 10, 64)
		prefix := jobsPrefix(in.GetName())
		jobs = jobs[:0]
		for k, idx := range arr.Indexes {
			task := cloneTask(base, base)
			task.JobId = strconv.FormatInt(first+int64(k), 10)
			task.Name = prefix + task.JobId
			task.ArrayJobId, task.ArrayTaskId = in.GetJobId(), idx
			a.Tasks[k] = task.Name
			jobs = append(jobs, &Job{JobRecord: jobstore.JobRecord{Job: task}, tmpl: base})
		}
		t.putArray(a)
	}
	for _, j := range jobs {
		if t.job(j.Name()) != nil {
			continue
		}
		if c != nil && c.State == loomv1.Cluster_DELETED {
			t.end(j, loomv1.JobState_CANCELLED, 0, ReasonClusterDeleted)
		}
		t.putNewJob(j)
		t.emitJob(j)
	}
	t.dirty[in.GetCluster()] = true
	return nil
}

// resolveJobs returns the jobs a command names: "jobs/A_i" is task i of
// array A; "jobs/A" is every task of array A when A is an array, else job A.
func (t *txn) resolveJobs(name string) []*Job {
	prefix := jobsPrefix(name)
	id := name[len(prefix):]
	if a, task, isTask := strings.Cut(id, "_"); isTask {
		if j := t.arrayTask(prefix+a, task); j != nil {
			return []*Job{j}
		}
		return nil
	}
	if a := t.array(name); a != nil {
		out := make([]*Job, 0, len(a.Tasks))
		for _, n := range a.Tasks {
			if j := t.job(n); j != nil {
				out = append(out, j)
			}
		}
		return out
	}
	if j := t.job(name); j != nil {
		return []*Job{j}
	}
	return nil
}

func (t *txn) cancel(ev *eventsv1.CancelJob) error {
	if ev.GetJob() == "" {
		return fmt.Errorf("cancel job: %w", errs.Invalid("job", "required"))
	}
	sig := ""
	if ev.GetSignal() != "" {
		var err error
		if sig, err = SignalName(ev.GetSignal()); err != nil {
			return fmt.Errorf("cancel job: %w", errs.Invalid("signal", "%v", err))
		}
	}
	if ev.ExitCode != nil && (sig != "" || ev.GetExitCode() < 0 || ev.GetExitCode() > 255) {
		return fmt.Errorf("cancel job: %w", errs.Invalid("exit_code", "%d: 0 to 255, and not with a signal", ev.GetExitCode()))
	}
	// Whom the cancel acts as: its caller, or the owner a service's own
	// cancel acts for (MayCancel; cancelled_by stays the caller, "" for
	// the latter).
	for _, j := range t.resolveJobs(ev.GetJob()) {
		switch {
		case !MayCancel(j.Job.GetUser(), ev):
		case j.Terminal():
		case sig != "":
			// scancel --signal: the job's processes get the signal, its state is unchanged.
			if r := t.currentRun(j); r != nil && j.Running() {
				t.signalJob(j, r, sig, ev.GetBatch(), ev.GetFull(), "")
			}
		case j.Pending():
			j = t.editJob(j.Name())
			// Who cancelled it (sacct's "CANCELLED by UID"): the account
			// the command's sender authenticated the caller as.
			j.Job.CancelledBy = ev.GetUser()
			t.end(j, loomv1.JobState_CANCELLED, 0, "")
			t.emitJob(j)
			t.dirty[j.Job.GetCluster()] = true
		case j.Running():
			j = t.editJob(j.Name())
			r := t.currentRun(j)
			// An allocation srun or salloc ends (exit_code) ends as its
			// command did; any other cancel is CANCELLED.
			state, code, why := loomv1.JobState_CANCELLED, int32(0), "job cancelled"
			if ev.ExitCode != nil {
				state, code, why = loomv1.JobState_COMPLETED, ev.GetExitCode(), "allocation ended"
				if code != 0 {
					state = loomv1.JobState_FAILED
				}
			} else {
				j.Job.CancelledBy = ev.GetUser()
			}
			t.finish(j, state, code, "")
			if r != nil {
				t.stopSteps(r, "", why, eventsv1.StopCause_STOP_CAUSE_CANCELLED)
			}
			t.dirty[j.Job.GetCluster()] = true
		}
	}
	return nil
}

func (t *txn) clusterChanged(ev *eventsv1.ClusterChanged) error {
	in := ev.GetCluster()
	if in.GetName() == "" {
		return fmt.Errorf("cluster changed: %w", errs.Invalid("cluster.name", "required"))
	}
	old := t.cluster(in.GetName())
	shared := in.GetStatus().GetSharedDir()
	if shared == "" && old != nil {
		shared = old.SharedDir
	}
	parts, sets := slurmLayout(in)
	if old == nil && in.GetOrchestrator().GetSlurm() == nil {
		parts, sets = nil, nil
	} else if old != nil && in.GetOrchestrator().GetSlurm() == nil {
		parts, sets = old.Partitions, old.NodeSets // a status-only change keeps the layout
	}
	gone := removedPartitions(old, parts)
	if old == nil || old.SharedDir != shared || old.State != in.GetStatus().GetState() ||
		!samePartitions(old.Partitions, parts) || !sameNodeSets(old.NodeSets, sets) {
		c := t.editCluster(in.GetName())
		c.SharedDir = shared
		c.State = in.GetStatus().GetState()
		c.Partitions, c.NodeSets = parts, sets
	}
	if len(gone) > 0 {
		// The jobs of the partitions the update removed can never run
		// (partgone.go).
		t.failPartitionless(map[string]func(*Job) bool{in.GetName(): func(j *Job) bool { return allGone(gone, j.Job.GetPartition()) }})
		// Those of -p a,b that keep a partition wait (or run) without the
		// others.
		t.dropGonePartitions(in.GetName(), gone)
	}
	t.dirty[in.GetName()] = true
	return nil
}

// slurmLayout reads the partitions and node sets of a cluster spec.
func slurmLayout(in *loomv1.Cluster) ([]Partition, []NodeSet) {
	s := in.GetOrchestrator().GetSlurm()
	var sets []NodeSet
	for _, ns := range s.GetNodeSets() {
		sets = append(sets, NodeSet{ID: ns.GetId(), Pool: ns.GetNodePoolId(), Features: ns.GetFeatures()})
	}
	var parts []Partition
	for _, p := range s.GetPartitions() {
		pt := Partition{Name: p.GetId(), NodeSets: p.GetNodeSetIds(), MaxTime: p.GetMaxTime(), Default: p.GetDefault(),
			Tier: p.GetPriorityTier(), State: p.GetState()}
		if pt.State == slurmspec.PartitionUp {
			pt.State = ""
		}
		if pt.MaxTime == "" {
			pt.MaxTime = clusterspec.Unlimited
		}
		if d, unlimited, err := clusterspec.ParseMaxTime(pt.MaxTime); err == nil && !unlimited {
			pt.MaxSeconds = int64(d / time.Second)
		}
		parts = append(parts, pt)
	}
	if len(parts) == 0 && len(s.GetNodeSets()) == 0 && len(in.GetCompute().GetNodePools()) > 0 {
		// A spec without Slurm layout: clusterspec's defaults, one node set
		// per pool and one partition over them.
		pt := Partition{Name: clusterspec.DefaultPartition, MaxTime: clusterspec.Unlimited, Default: true}
		for _, p := range in.GetCompute().GetNodePools() {
			sets = append(sets, NodeSet{ID: p.GetId(), Pool: p.GetId()})
			pt.NodeSets = append(pt.NodeSets, p.GetId())
		}
		parts = append(parts, pt)
	}
	hasDefault := false
	for _, p := range parts {
		hasDefault = hasDefault || p.Default
	}
	if !hasDefault && len(parts) > 0 {
		parts[0].Default = true
	}
	return parts, sets
}

func samePartitions(a, b []Partition) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Name != y.Name || x.MaxTime != y.MaxTime || x.MaxSeconds != y.MaxSeconds || x.Default != y.Default ||
			x.Tier != y.Tier || x.State != y.State || strings.Join(x.NodeSets, ",") != strings.Join(y.NodeSets, ",") {
			return false
		}
	}
	return true
}

func sameNodeSets(a, b []NodeSet) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ID != b[i].ID || a[i].Pool != b[i].Pool || strings.Join(a[i].Features, ",") != strings.Join(b[i].Features, ",") {
			return false
		}
	}
	return true
}

func (t *txn) clusterDeleted(ev *eventsv1.ClusterDeleted) error {
	name := ev.GetCluster()
	if name == "" {
		return fmt.Errorf("cluster deleted: %w", errs.Invalid("cluster", "required"))
	}
	for _, j := range t.pendingJobs(name) {
		j = t.editJob(j.Name())
		t.end(j, loomv1.JobState_CANCELLED, 0, ReasonClusterDeleted)
		t.emitJob(j)
	}
	for _, r := range t.activeRuns() {
		if r.Cluster != name {
			continue
		}
		if j := t.job(r.Job); j != nil && j.Running() && j.Attempt == r.Attempt {
			j = t.editJob(j.Name())
			t.finish(j, loomv1.JobState_CANCELLED, 0, ReasonClusterDeleted)
		}
		r = t.editRun(r.Key())
		for node, st := range r.Steps {
			st.Abandoned = true
			r.Steps[node] = st
		}
		r.Released = true
	}
	for _, n := range t.clusterNodes(name) {
		t.deleteNode(n.Name)
	}
	// The cluster stays as a tombstone so that a late submit for it ends at once.
	c := t.editCluster(name)
	c.State = loomv1.Cluster_DELETED
	t.dirty[name] = true
	return nil
}

// machineShape returns what the catalog says of a node: its GPUs' GRES
// type, CPUs and the memory jobs may ask for (SchedulableMemoryMiB; zeros
// when the machine type is unknown).
func machineShape(machineType, acceleratorType string) (gres string, cpus int32, memMB int64) {
	if m, ok := clusterspec.Machine(machineType); ok {
		return m.GresType, m.VCPUs, m.SchedulableMemoryMiB()
	}
	if acceleratorType != "" {
		for _, m := range clusterspec.Machines() {
			if m.AcceleratorType == acceleratorType {
				return m.GresType, 0, 0
			}
		}
	}
	return "", 0, 0
}

func (t *txn) nodeChanged(ev *eventsv1.NodeChanged) error {
	in := ev.GetNode()
	var v errs.Validator
	v.Check(in.GetName() != "", "node.name", "required")
	v.Check(in.GetGpus() >= 0 && in.GetGpus() <= MaxGPUsPerNode, "node.gpus", "must be 0..%d, got %d", MaxGPUsPerNode, in.GetGpus())
	if err := v.Err(); err != nil {
		return fmt.Errorf("node changed: %w", err)
	}
	cluster, host := splitNodeName(in.GetName())
	if in.GetCluster() != "" {
		cluster = in.GetCluster()
	}
	if in.GetHostname() != "" {
		host = in.GetHostname()
	}
	var deadline time.Time
	if in.GetDrainDeadline() != nil {
		deadline = in.GetDrainDeadline().AsTime()
	}
	gres, cpus, mem := machineShape(in.GetMachineType(), in.GetAcceleratorType())
	old := t.node(in.GetName())
	if old != nil && old.Cluster == cluster && old.Hostname == host && old.GPUs == in.GetGpus() &&
		old.State == in.GetState() && old.Reason == in.GetReason() && old.Role == in.GetRole() &&
		old.DrainDeadline.Equal(deadline) && old.Pool == in.GetNodePool() && old.MachineType == in.GetMachineType() &&
		old.AcceleratorType == in.GetAcceleratorType() && old.Block == in.GetBlock() && old.Registration == in.GetRegistration() {
		return nil
	}
	if old != nil && old.Cluster != cluster {
		t.dirty[old.Cluster] = true
	}
	n := t.editNode(in.GetName())
	n.Cluster, n.Hostname, n.GPUs, n.State, n.Reason = cluster, host, in.GetGpus(), in.GetState(), in.GetReason()
	n.Role, n.DrainDeadline = in.GetRole(), deadline
	n.Registration = in.GetRegistration()
	n.Pool, n.MachineType, n.AcceleratorType, n.Block = in.GetNodePool(), in.GetMachineType(), in.GetAcceleratorType(), in.GetBlock()
	n.GresType, n.CPUs, n.MemoryMB = gres, cpus, mem
	if !n.Draining() {
		n.Drained = false // a later drain is a new one, with its own NodeDrained
	}
	if n.Lost() && !healthKeepsRuns(n) {
		t.failNode(n)
	}
	t.dirty[cluster] = true
	return nil
}

// healthKeepsRuns reports whether n's runs go on though the provisioner
// shows it DOWN: health, whose verdict the provisioner's DOWN follows, only
// lost touch with it (unreachable) or drains it after a checkpoint
// (checkpoint-first), and did not find it failed.
func healthKeepsRuns(n *Node) bool {
	return n.State == loomv1.Node_DOWN && !n.Unhealthy && (n.HealthDrain || n.Unreachable)
}

func (t *txn) nodeRemoved(ev *eventsv1.NodeRemoved) error {
	if ev.GetNode() == "" {
		return fmt.Errorf("node removed: %w", errs.Invalid("node", "required"))
	}
	n := t.node(ev.GetNode())
	if n == nil {
		return nil
	}
	gone := *n
	gone.State, gone.Unhealthy, gone.Reason = loomv1.Node_DELETING, false, "removed"
	t.failNode(&gone)
	t.deleteNode(n.Name)
	// A job that failed on it can never meet it again: its exclusion goes.
	t.expireExclusions(n.Cluster, n.Hostname)
	t.dirty[n.Cluster] = true
	return nil
}

// nodeHealth applies health's verdict on a node (see docs/health.md, "The
// job's side"):
//
//   - UNHEALTHY (urgent): the node takes no work, its runs end NODE_FAIL and
//     are requeued (an infrastructure failure: max_retries is not used), the
//     node excluded from the job's later runs, its steps fenced (failNode);
//   - UNHEALTHY with checkpoint_first: the node takes no work; its runs get
//     their job's --signal (default USR1) and are requeued at their next
//     checkpoint or after CheckpointGrace (checkpointDrain);
//   - unreachable (health sends it with HEALTHY: it judged nothing; with
//     UNHEALTHY alike): the node takes no new work, its runs go on;
//   - UNHEALTHY with ACTION_DRAIN (an operator's drain, or a repair that
//     waits for the node's jobs): no new work, its runs go on (scontrol
//     drain's semantics), NodeDrained once it holds nothing;
//   - HEALTHY: the node takes work again; with repaired, jobs' exclusions of
//     it expire; with ACTION_RESTART_JOB, the runs on it are requeued, the
//     node neither excluded nor drained.
func (t *txn) nodeHealth(ev *eventsv1.NodeHealthChanged) error {
	if ev.GetNode() == "" {
		return fmt.Errorf("node health changed: %w", errs.Invalid("node", "required"))
	}
	if ev.GetHealth() == eventsv1.NodeHealth_NODE_HEALTH_UNSPECIFIED {
		return nil
	}
	// Health says unreachable with HEALTHY (the node is not judged failed,
	// only out of touch): it takes the node out of new work whatever the
	// health field says.
	unreachable := ev.GetUnreachable()
	unhealthy := ev.GetHealth() == eventsv1.NodeHealth_UNHEALTHY && !unreachable
	checkpoint := unhealthy && ev.GetCheckpointFirst()
	drainOnly := unhealthy && !checkpoint && ev.GetAction() == loomv1.RemediationAction_ACTION_DRAIN
	restart := !unhealthy && !unreachable && ev.GetAction() == loomv1.RemediationAction_ACTION_RESTART_JOB
	repaired := !unhealthy && !unreachable && ev.GetRepaired()
	old := t.node(ev.GetNode())
	var was Node
	if old != nil {
		was = *old
	}
	// The node's new flags: a verdict does not undo a worse one before it
	// (an unreachable or checkpoint-first verdict leaves an urgent one).
	u, c, r := false, false, false
	switch {
	case unreachable:
		u, c, r = was.Unhealthy, was.HealthDrain, true
	case !unhealthy:
	case checkpoint, drainOnly:
		u, c = was.Unhealthy, !was.Unhealthy
	default:
		u = true
	}
	if old != nil && !restart && !repaired && was.HealthReason == ev.GetReason() && was.HealthState == ev.GetState() &&
		was.Unhealthy == u && was.HealthDrain == c && was.Unreachable == r {
		return nil
	}
	n := t.editNode(ev.GetNode())
	if n.Cluster == "" || n.Hostname == "" {
		// Health spoke before the provisioner: keep the verdict for when it does.
		n.Cluster, n.Hostname = splitNodeName(ev.GetNode())
		if ev.GetCluster() != "" {
			n.Cluster = ev.GetCluster()
		}
	}
	n.HealthReason, n.HealthState, n.HealthSetBy = ev.GetReason(), ev.GetState(), ev.GetSetBy()
	n.HealthTime = t.now
	if ev.GetTime() != nil {
		n.HealthTime = ev.GetTime().AsTime()
	}
	n.Unhealthy, n.HealthDrain, n.Unreachable = u, c, r
	// Health has spoken since a prolog failure: its verdict (taken out, in
	// this same change, or put back) replaces the scheduler's hold.
	n.PrologHold, n.PrologReason = false, ""
	if !u && !c {
		n.HealthDrained = false // a later verdict is a new drain, with its own NodeDrained
	}
	switch {
	case repaired || restart:
		if repaired {
			t.expireExclusions(n.Cluster, n.Hostname)
		}
		if restart {
			t.restartJobsOn(n, ev.GetReason())
		}
	case c && checkpoint && !was.HealthDrain:
		t.checkpointDrain(n)
	case c:
		// Drained (ACTION_DRAIN, or a checkpoint drain already under way):
		// no new work, its runs go on or keep their grace.
	case u:
		t.failNode(n)
	}
	t.dirty[n.Cluster] = true
	return nil
}

// updateSlurmNode is scontrol update node State=DRAIN|DOWN|RESUME: the
// scheduler's own drain, which keeps new work off the node and lets its jobs
// run on (unlike the provisioner's DRAINING, which removes the node); DOWN,
// which also ends the jobs it runs now (NODE_FAIL, requeued where they may
// be, the node excluded from their next runs, as on a node's failure); and
// RESUME, which puts it back. The last of DRAIN and DOWN wins.
func (t *txn) updateSlurmNode(ev *eventsv1.UpdateSlurmNode) error {
	var v errs.Validator
	v.Check(ev.GetCluster() != "", "cluster", "required")
	v.Check(ev.GetHostname() != "", "hostname", "required")
	state := strings.ToUpper(ev.GetState())
	v.Check(state == "DRAIN" || state == "DOWN" || state == "RESUME", "state", "want DRAIN, DOWN or RESUME, got %q", ev.GetState())
	v.Check(state == "RESUME" || ev.GetReason() != "", "reason", "required to drain a node or set it down")
	if err := v.Err(); err != nil {
		return fmt.Errorf("update slurm node: %w", err)
	}
	name := resname.NodeIn(ev.GetCluster(), ev.GetHostname())
	old := t.node(name)
	if old == nil {
		return nil
	}
	drain, down := state == "DRAIN", state == "DOWN"
	reason := ev.GetReason()
	if state == "RESUME" {
		reason = ""
	}
	if old.AdminDrain == drain && old.AdminDown == down && old.AdminReason == reason {
		return nil
	}
	n := t.editNode(name)
	n.AdminDrain, n.AdminDown, n.AdminReason = drain, down, reason
	n.AdminReasonUser, n.AdminReasonTime = "", time.Time{}
	if drain || down {
		n.AdminReasonUser, n.AdminReasonTime = ev.GetUser(), t.now
		if ev.GetTime() != nil {
			n.AdminReasonTime = ev.GetTime().AsTime()
		}
	}
	if down {
		t.failNode(n)
	}
	t.dirty[n.Cluster] = true
	// No other event says so: the gateway's change feed lists the Slurm
	// nodes again on it (WatchChanges' slurmNodes).
	t.emit(n.Cluster, name, &eventsv1.SlurmNodeChanged{Cluster: n.Cluster, Hostname: ev.GetHostname(), State: state})
	return nil
}

// clusterGoing reports whether the cluster is being deleted or is gone:
// its jobs end CANCELLED (cluster deleted) instead of being requeued.
func (t *txn) clusterGoing(cluster string) bool {
	c := t.cluster(cluster)
	return c != nil && (c.State == loomv1.Cluster_DELETING || c.State == loomv1.Cluster_DELETED)
}

// infraEnded ends run r of j (edited) because node's step ended for the
// infrastructure's reasons, not the program's (its agent stopped it as it
// stopped itself, or its end went unseen: lost): CANCELLED when the cluster
// is going away, else requeued as after a node failure (the node is not
// excluded: it did not fail under the job, and health judges it), the
// other nodes' steps told to stop once they checkpointed (checkpoint on
// failure).
func (t *txn) infraEnded(j *Job, r *Run, node, reason string) {
	if t.clusterGoing(r.Cluster) {
		t.finish(j, loomv1.JobState_CANCELLED, 0, ReasonClusterDeleted)
		t.stopSteps(r, node, reason, eventsv1.StopCause_STOP_CAUSE_NODE_FAILURE)
		return
	}
	t.infraRequeue(j, r, loomv1.JobState_NODE_FAIL, reason)
	if !t.checkpointSurvivors(j, r, node, reason, false) { // health.go
		t.stopSteps(r, node, reason, eventsv1.StopCause_STOP_CAUSE_NODE_FAILURE)
	}
}

// failNode ends every run that holds n (which can no longer run work): the
// job ends NODE_FAIL (CANCELLED when its cluster is going away) and is
// requeued when it allows it and its infrastructure restarts are not spent,
// with n excluded from its later runs, and every node of the run is told to
// stop — n too. n's step is fenced while its processes may live on (n is
// unhealthy or DOWN, not repaired nor removed): the run holds n, and the job
// does not start again, until the step reports its end, n is repaired or
// removed, or FenceTimeout passes (see Step.FenceUntil). Otherwise (n is
// rebooting, reimaged, replaced, gone) the step is abandoned, freeing n at once.
func (t *txn) failNode(n *Node) {
	for _, r := range t.activeRuns() {
		if !r.Holds(n.Name) {
			continue
		}
		r = t.editRun(r.Key())
		st := r.Steps[n.Name]
		fence := false
		switch {
		case st.Idle || st.Terminal() || !fenceHolds(n):
			st.Abandoned = true
		case st.FenceUntil.IsZero():
			st.FenceUntil = t.now.Add(t.s.cfg.FenceTimeout)
			fence = true
		}
		r.Steps[n.Name] = st
		r.FenceUntil = fenceOf(r)
		reason := n.DownReason()
		if j := t.job(r.Job); j != nil && j.Running() && j.Attempt == r.Attempt {
			j = t.editJob(j.Name())
			gone := t.clusterGoing(r.Cluster)
			// A node the provisioner is removing (DELETING: its pool or its
			// cluster going away) did not fail under the job: excluding it
			// would only end the job as unplaceable ("every node it may use
			// failed") before the cluster's own deletion, which arrives on
			// another topic, cancels it.
			if !gone && n.Hostname != "" && n.State != loomv1.Node_DELETING && !containsString(j.Excluded, n.Hostname) {
				j.Excluded = append(append([]string(nil), j.Excluded...), n.Hostname)
			}
			switch {
			case gone:
				t.finish(j, loomv1.JobState_CANCELLED, 0, ReasonClusterDeleted)
			default:
				t.infraRequeue(j, r, loomv1.JobState_NODE_FAIL, reason)
			}
			if gone || !t.checkpointSurvivors(j, r, n.Name, reason, false) { // health.go
				t.stopSteps(r, n.Name, reason, eventsv1.StopCause_STOP_CAUSE_NODE_FAILURE)
			}
		}
		if fence {
			// The fence: whatever still runs there is told to stop, and its
			// end (or the node's repair) releases the node.
			t.emit(n.Name, r.Job, &eventsv1.StopStep{Job: r.Job, Attempt: r.Attempt, Node: n.Name, Reason: reason,
				Cause: eventsv1.StopCause_STOP_CAUSE_NODE_FAILURE})
		}
		if r.allTerminal() {
			r.Released = true
		}
		t.dirty[r.Cluster] = true
	}
}

// fenceHolds reports whether the processes a failed node n ran may still
// live: health found it unhealthy, or the provisioner lost its agent (DOWN),
// but it was neither repaired (REBOOTING, REIMAGING, REPLACING: the repair is
// the fence) nor removed, failed or re-provisioned.
func fenceHolds(n *Node) bool {
	switch n.State {
	case loomv1.Node_READY, loomv1.Node_DRAINING, loomv1.Node_DOWN:
		return true
	}
	return false
}

// fenceOf returns the earliest end of r's fences (zero: none).
func fenceOf(r *Run) time.Time {
	var at time.Time
	for _, st := range r.Steps {
		if st.Fenced() && (at.IsZero() || st.FenceUntil.Before(at)) {
			at = st.FenceUntil
		}
	}
	return at
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// MaxNodeMessageBytes bounds what the scheduler keeps of a message a node
// reports with a step's or its tasks' end (StepChanged, TasksChanged):
// squeue, sacct and scontrol print it, in a job's reason, to everyone.
const MaxNodeMessageBytes = 1024

// nodeMessage is a node's message as kept and shown: a node is not a
// caller the scheduler can refuse, so its text is made safe to print and
// bounded instead (termtext.Clean).
func nodeMessage(s string) string { return termtext.Clean(s, MaxNodeMessageBytes) }

func (t *txn) stepChanged(ev *eventsv1.StepChanged) error {
	var v errs.Validator
	v.Check(ev.GetJob() != "", "job", "required")
	v.Check(ev.GetNode() != "", "node", "required")
	if err := v.Err(); err != nil {
		return fmt.Errorf("step changed: %w", err)
	}
	key := RunKey(ev.GetJob(), ev.GetAttempt())
	r := t.run(key)
	if r == nil {
		return nil
	}
	st, ok := r.Steps[ev.GetNode()]
	if !ok || st.Terminal() || ev.GetState() == eventsv1.StepState_STEP_STATE_UNSPECIFIED ||
		(ev.GetState() == st.State && ev.GetState() == eventsv1.StepState_STEP_RUNNING) {
		return nil
	}
	r = t.editRun(key)
	msg := nodeMessage(ev.GetMessage())
	usage := st.Usage
	if ev.GetUsage() != nil {
		usage = t.batchUsage(ev.GetUsage())
	}
	r.Steps[ev.GetNode()] = Step{State: ev.GetState(), ExitCode: ev.GetExitCode(), ExitSignal: ev.ExitSignal, Message: msg, Usage: usage}
	if !r.FenceUntil.IsZero() {
		r.FenceUntil = fenceOf(r) // a fenced step that reports its end lifts its fence
	}
	host := hostOf(r, ev.GetNode())
	if j := t.job(r.Job); j != nil && j.Running() && j.Attempt == r.Attempt {
		fail := func(state loomv1.JobState, code int32, reason string) {
			if code == 0 {
				code = 1
			}
			j = t.editJob(j.Name())
			t.finish(j, state, code, reason)
			// Slurm writes no line for this: the failed step's own output says why.
			t.stopSteps(r, ev.GetNode(), "job failed", eventsv1.StopCause_STOP_CAUSE_UNSPECIFIED)
		}
		// userFail is a failure of the job's own program: retried (requeued)
		// while its user failures stay within its max_retries.
		userFail := func(state loomv1.JobState, code int32, reason string) {
			j = t.editJob(j.Name())
			j.Job.UserFailures++
			if retries := min(max(j.Job.GetMaxRetries(), 0), slurmspec.MaxRetries); j.Job.GetUserFailures() <= retries {
				t.endAttempt(r, state, code, reason)
				t.end(j, state, code, reason)
				t.emitJob(j)
				t.requeueJob(j, fmt.Sprintf("%s: retry %d of %d", reason, j.Job.GetUserFailures(), retries))
				// The program failed on one node; the others may save
				// first, as when a node fails (checkpoint on failure).
				if !t.checkpointSurvivors(j, r, ev.GetNode(), detail("job failed on "+host, reason), true) { // health.go
					t.stopSteps(r, ev.GetNode(), "job failed", eventsv1.StopCause_STOP_CAUSE_UNSPECIFIED)
				}
				return
			}
			fail(state, code, reason)
		}
		switch ev.GetState() {
		case eventsv1.StepState_STEP_EXITED:
			if ev.GetExitCode() != 0 || allExitedZero(r) {
				// The job ends as this step did: with its signal, when
				// its agent said (ExitCode code:signal).
				j = t.editJob(j.Name())
				j.Job.ExitSignal, r.ExitSignal = ev.ExitSignal, ev.ExitSignal
			}
			switch {
			case ev.GetExitCode() != 0 && killedForMemory(msg):
				userFail(loomv1.JobState_OUT_OF_MEMORY, ev.GetExitCode(), ReasonOutOfMemory)
			case ev.GetExitCode() != 0:
				userFail(loomv1.JobState_FAILED, ev.GetExitCode(), ReasonNonZeroExitCode)
			case allExitedZero(r):
				j = t.editJob(j.Name())
				t.finish(j, loomv1.JobState_COMPLETED, 0, "")
			}
		case eventsv1.StepState_STEP_FAILED_TO_START:
			if strings.HasPrefix(msg, PrologFailedPrefix) {
				// The node failed its prolog health check: not the job's fault.
				t.prologFailed(t.editJob(j.Name()), r, ev.GetNode(), host, msg)
				break
			}
			fail(loomv1.JobState_FAILED, ev.GetExitCode(), detail("JobLaunchFailure on "+host, msg))
		case eventsv1.StepState_STEP_LOST:
			if ev.GetRegistrationMismatch() {
				// It never ran: sealed for a registration of the node
				// the agent does not have (this scheduler's own race
				// with the node's new registration).
				j = t.editJob(j.Name())
				if t.requeueUnlaunched(j, r, ev.GetNode(), detail("launch failed on "+host, msg)) {
					break
				}
				reason := detail("step lost on "+host, msg)
				if !t.clusterGoing(r.Cluster) {
					reason += fmt.Sprintf(" (never launched; the job was requeued for that %d times already, the most, so this counts as a node failure)",
						j.UnlaunchedRequeues)
				}
				t.infraEnded(j, r, ev.GetNode(), reason)
				break
			}
			// Its end went unseen (its agent crashed or was stopped with
			// nothing to write to, its shim killed): not known to be the
			// program's, so the infrastructure's, as Slurm's NODE_FAIL.
			t.infraEnded(t.editJob(j.Name()), r, ev.GetNode(), detail("step lost on "+host, msg))
		case eventsv1.StepState_STEP_KILLED:
			if ev.GetNodeStopping() {
				// The agent stopped it as it stopped itself (its node
				// removed or restarted, its service shut down): the
				// node's end, not the program's.
				t.infraEnded(t.editJob(j.Name()), r, ev.GetNode(), detail("node "+host+" stopped", msg))
				break
			}
			fail(loomv1.JobState_FAILED, ev.GetExitCode(), detail("step killed on "+host, msg))
		}
	}
	t.survivorsEnded(r) // health.go: checkpoint on failure
	if r.allTerminal() {
		r.Released = true
		t.dirty[r.Cluster] = true
	} else if j := t.job(r.Job); j != nil && j.Pending() && j.Attempt == r.Attempt {
		// A requeued job waits for this run: its placement names the nodes
		// still stopping.
		t.dirty[r.Cluster] = true
	}
	return nil
}

func detail(what, msg string) string {
	if msg == "" {
		return what
	}
	return what + ": " + msg
}

// allExitedZero reports whether every step that runs a process exited 0.
func allExitedZero(r *Run) bool {
	for _, st := range r.Steps {
		if st.Idle {
			continue
		}
		if st.Abandoned || st.State != eventsv1.StepState_STEP_EXITED || st.ExitCode != 0 {
			return false
		}
	}
	return true
}

func hostOf(r *Run, node string) string {
	for i, n := range r.Nodes {
		if n == node && i < len(r.Hostnames) {
			return r.Hostnames[i]
		}
	}
	_, host := splitNodeName(node)
	return host
}

// splitNodeName splits "{cluster}/nodes/{hostname}"; a malformed name is
// all host.
func splitNodeName(name string) (cluster, host string) {
	n, err := resname.SplitNode(name)
	if err != nil {
		return "", name
	}
	return n.Cluster.String(), n.Host
}

// uniqueHosts returns hosts with each named once, in the order first
// named: hosts itself when none repeats. Slurm takes -w n1,n1 as n1 (its
// node lists are bitmaps); a pass reads every pending job's lists, and
// 4,096 repeats of one host cost it as much as 4,096 hosts.
func uniqueHosts(hosts []string) []string {
	if len(hosts) < 2 {
		return hosts
	}
	seen := make(map[string]bool, len(hosts))
	var out []string
	for i, h := range hosts {
		if seen[h] {
			if out == nil {
				out = append(make([]string, 0, len(hosts)), hosts[:i]...)
			}
			continue
		}
		seen[h] = true
		if out != nil {
			out = append(out, h)
		}
	}
	if out == nil {
		return hosts
	}
	return out
}

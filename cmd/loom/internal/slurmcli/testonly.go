package slurmcli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/slurmspec"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// testOnly is sbatch --test-only: the gateway checks the job as a
// submission (validate_only: nothing is stored, no id taken) and sbatch
// prints when and where it would start, on stderr, as Slurm's:
//
//	sbatch: Job 22 to start at 2026-12-07T04:26:17 using 1 processors on nodes node1 in partition debug
//
// A refusal is Slurm's "allocation failure: REASON", exit 1. The job id is
// the one the next submission would take (not reserved). The start is an
// estimate made here, not the scheduler's plan: now on the partition's
// first nodes with room for the job's per-node CPUs and GPUs, when enough
// have; else the earliest end (start + time limit) of a running job of the
// partition, on that job's nodes; both as the scheduler's --exclusive=user
// rule lets the job onto them (estimateStart, docs/slurm.md). The processors are
// slurmctld's count for those nodes (allocCPUs); sharedExclusive
// (--exclusive=mcs or topo) counts the job's tasks, as Slurm's 1 processor
// for one task, though Loom's scheduler holds such a job's nodes whole
// (scontrol show job shows their CPUs once it runs). --exclusive=user
// counts its tasks as any shared job does: it is not Exclusive.
func (c *cmd) testOnly(ctx context.Context, j *loomv1.Job, sharedExclusive bool) error {
	job, err := c.sendJob(ctx, j, true)
	if err != nil {
		if st, ok := status.FromError(err); ok {
			return allocationFailure(c, st.Message())
		}
		return err
	}
	part := job.GetPartition()
	if part == "" {
		parts, err := c.partitions(ctx, job.GetCluster())
		if err != nil {
			return c.rpcError("slurm_load_partitions", err)
		}
		for _, p := range parts {
			if p.GetDefault() {
				part = p.GetName()
			}
		}
	}
	part, _, _ = strings.Cut(part, ",") // -p a,b: the first
	nodes, err := c.slurmNodes(ctx, job.GetCluster())
	if err != nil {
		return err
	}
	at, hosts, err := c.estimateStart(ctx, job, part, nodes)
	if err != nil {
		return err
	}
	counted := job
	if job.GetMaxNodeCount() > 0 || sharedExclusive {
		counted = proto.Clone(job).(*loomv1.Job)
		counted.Exclusive = job.GetExclusive() && !sharedExclusive
	}
	if job.GetMaxNodeCount() > 0 {
		// A range (-N1-3) counts the nodes it would get, as Slurm's.
		counted.NodeCount, counted.MaxNodeCount = int32(rangeNodes(job, len(hosts))), 0
	}
	procs := allocCPUs(counted, hosts, nodes)
	// The gateway answers no id (it does not tell the installation's job
	// counter, and --test-only takes no id): 0, Slurm's job id for none
	// (as its array_job_id and het_job_id of a job that is neither), keeps
	// the line's shape for scripts that read it, never a guess.
	id := job.GetJobId()
	if id == "" {
		id = "0"
	}
	fmt.Fprintf(c.stderr, "%s: Job %s to start at %s using %d processors on nodes %s in partition %s\n",
		c.name, id, formatTimestamp(at, c.loc), procs, compressHosts(hosts), part)
	return nil
}

// allocCPUs is the processor count of job on hosts (nodes: their
// cluster's), as slurmctld 22.05 counts it (checked beside one, CR_Core):
// with --exclusive the sum of allocNodeCPUs, every CPU of every node it
// names (16 for one 16-CPU node, whatever -n, -c or --gres); else the
// job's tasks × CPUs per task (jobCPUs: -N without -n one task per node,
// --ntasks-per-node per node). It is --test-only's count for the nodes it
// estimates, and scontrol show job's NumCPUs and squeue's %C for the nodes
// a job holds (squeueView.cpus). An exclusive job with no hosts (not
// started) counts its tasks, as Slurm's pending one does.
func allocCPUs(job *loomv1.Job, hosts []string, nodes []*loomv1.SlurmNode) int {
	if !job.GetExclusive() || len(hosts) == 0 {
		return jobCPUs(job)
	}
	sum := 0
	for _, n := range allocNodeCPUs(job, hosts, nodes) {
		sum += int(n)
	}
	return sum
}

// allocNodeCPUs is the CPUs the scheduler holds for job on each of hosts
// (nodes: their cluster's), the one rule behind allocCPUs' total and
// salloc's SLURM_JOB_CPUS_PER_NODE: on the job's own nodes, once the
// scheduler recorded its run's layout (runLayout), those CPUs; else for an
// exclusive job every CPU of the node; else, or with no hosts, its tasks'
// CPUs (jobNodeCPUs).
//
// A host nodes does not describe (removed from the cluster since, or its
// CPU count not yet reported) counts its tasks' CPUs there, as if the job
// were not exclusive. Slurm never shows such a node: slurmctld knows every
// node a job holds. Of what the CLI can say, the tasks' CPUs are what the
// job certainly holds there (the least an exclusive job takes) and what
// Slurm shows for the same job before it has nodes, where 0 would put a
// node without CPUs into SLURM_JOB_CPUS_PER_NODE and NumCPUs.
func allocNodeCPUs(job *loomv1.Job, hosts []string, nodes []*loomv1.SlurmNode) []int32 {
	if _, cpus, ok := runLayout(job); ok && slices.Equal(hosts, job.GetNodes()) {
		// The job's own nodes: what the scheduler holds there, as it
		// recorded it (an exclusive run's whole nodes among them).
		return slices.Clone(cpus)
	}
	if !job.GetExclusive() || len(hosts) == 0 {
		return toInt32s(jobNodeCPUs(job))
	}
	out := toInt32s(nodeCPUsOver(job, len(hosts)))
	for i, host := range hosts {
		for _, nd := range nodes {
			if nd.GetHostname() == host && nd.GetCpus() > 0 {
				out[i] = nd.GetCpus()
			}
		}
	}
	return out
}

// toInt32s is counts as int32s (CPU counts: they fit).
func toInt32s(counts []int) []int32 {
	out := make([]int32, len(counts))
	for i, n := range counts {
		out[i] = int32(n)
	}
	return out
}

// estimateStart is testOnly's estimate for job in partition part. Running
// jobs keep it off the nodes they share as the scheduler's --exclusive=user
// rule says (blocks): a node with a blocking job is not free now, and a
// running job's end frees its nodes only once the blocking jobs left on
// them end too. The running jobs are those job's user may list (its
// project's): another project's do not count.
func (c *cmd) estimateStart(ctx context.Context, job *loomv1.Job, part string, nodes []*loomv1.SlurmNode) (time.Time, []string, error) {
	n := int(max(job.GetNodeCount(), 1))
	var running []*loomv1.Job // the cluster's running jobs, read once needed
	// A range of -n tasks at each width from its widest down to its
	// minimum, each with that width's per-node share, the widest that
	// fits winning: the scheduler's rule (slurmspec.RangeWidest,
	// JobCPUsPerNode; domain's placeWidths). At its minimum's share alone
	// -N1-3 -n5 on 4-CPU nodes fit no node, where Slurm's and Loom's
	// scheduler start it on 3.
	for w := slurmspec.RangeWidest(job, n); w >= n; {
		perNode := int32(slices.Max(jobNodeCPUs(job))) // the most any of its nodes takes
		if w > n {
			perNode = slurmspec.JobCPUsPerNode(job, w, job.GetGpusPerNode())
		}
		fit, mixed := fittingHosts(job, part, nodes, perNode)
		if len(fit) >= w && mixed {
			// A mixed node runs jobs, which may keep this one off.
			if running == nil {
				var err error
				if running, err = c.runningJobs(ctx, job); err != nil {
					return time.Time{}, nil, err
				}
			}
			blocked := blockedHosts(job, running)
			fit = slices.DeleteFunc(fit, func(h string) bool { return len(blocked[h]) > 0 })
		}
		if len(fit) >= w {
			slices.Sort(fit)
			if w == n {
				return c.now, fit[:rangeNodes(job, len(fit))], nil
			}
			return c.now, fit[:w], nil
		}
		// A narrower width asks more of each node: the nodes that fit it
		// are some of these, so no width wider than their count fits.
		w = min(w-1, max(len(fit), n))
	}
	if running == nil {
		var err error
		if running, err = c.runningJobs(ctx, job); err != nil {
			return time.Time{}, nil, err
		}
	}
	blocked := blockedHosts(job, running)
	var (
		end   time.Time
		hosts []string
	)
	for _, r := range running {
		if !slurmspec.AnyPartitionOf(r.GetPartition(), []string{part}) {
			continue
		}
		e, ok := jobEnd(r)
		// The blocking jobs left on its nodes end first.
		for _, h := range r.GetNodes() {
			for _, b := range blocked[h] {
				if b == r {
					continue
				}
				be, bok := jobEnd(b)
				ok = ok && bok
				if be.After(e) {
					e = be
				}
			}
		}
		if ok && (end.IsZero() || e.Before(end)) {
			end, hosts = e, r.GetNodes()
		}
	}
	if end.IsZero() {
		return time.Time{}, nil, &Error{Text: "allocation failure: Requested nodes are busy (no idle node of partition " + part +
			" fits the job now and no running job of it has a time limit to end by)", Code: 1}
	}
	return end, hosts, nil
}

// fittingHosts is the hostnames of nodes of partition part free for job
// now with perNode CPUs and its per-node GPUs free; mixed says whether one
// of them runs jobs (which may keep job off it: blockedHosts).
func fittingHosts(job *loomv1.Job, part string, nodes []*loomv1.SlurmNode, perNode int32) (fit []string, mixed bool) {
	for _, nd := range nodes {
		free := nd.GetState() == loomv1.SlurmNode_IDLE || nd.GetState() == loomv1.SlurmNode_MIXED && !job.GetExclusive()
		if !free || nd.GetNotResponding() || !slices.Contains(nd.GetPartitions(), part) ||
			nd.GetCpus()-nd.GetAllocCpus() < perNode || nd.GetGpus()-nd.GetAllocGpus() < job.GetGpusPerNode() {
			continue
		}
		fit = append(fit, nd.GetHostname())
		mixed = mixed || nd.GetState() == loomv1.SlurmNode_MIXED
	}
	return fit, mixed
}

// runningJobs lists the running jobs of job's cluster (every partition's:
// a node may be in several).
func (c *cmd) runningJobs(ctx context.Context, job *loomv1.Job) ([]*loomv1.Job, error) {
	jobs, err := c.listJobs(ctx, &loomv1.ListJobsRequest{States: []loomv1.JobState{loomv1.JobState_RUNNING}})
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(jobs, func(r *loomv1.Job) bool { return r.GetCluster() != job.GetCluster() }), nil
}

// jobEnd is when running job r is expected to end (start + time limit);
// false when it has no start or no limit to end by.
func jobEnd(r *loomv1.Job) (time.Time, bool) {
	if r.GetStartTime() == nil || r.GetTimeLimitSeconds() <= 0 {
		return time.Time{}, false
	}
	return r.GetStartTime().AsTime().Add(time.Duration(r.GetTimeLimitSeconds()) * time.Second), true
}

// blockedHosts maps each host to the running jobs on it that keep job off
// it (blocks).
func blockedHosts(job *loomv1.Job, running []*loomv1.Job) map[string][]*loomv1.Job {
	out := map[string][]*loomv1.Job{}
	for _, r := range running {
		if blocks(job, r) {
			for _, h := range r.GetNodes() {
				out[h] = append(out[h], r)
			}
		}
	}
	return out
}

// blocks reports whether running job r keeps job off the nodes it runs
// on: the scheduler's rule (slurmspec.UserMayJoin) for a node where r
// alone runs. A node's jobs keep job off when one of them does: another
// user's --exclusive=user job, or, for an --exclusive=user job, another
// user's job.
func blocks(job, r *loomv1.Job) bool {
	owner := ""
	if r.GetExclusiveUser() {
		owner = r.GetUser()
	}
	return !slurmspec.UserMayJoin(job.GetUser(), job.GetExclusiveUser(), owner, 1, r.GetUser())
}

// slurmReasons are Slurm's words that start a gateway refusal's message
// (after the field it names).
var slurmReasons = []string{msgPolicyViolation, msgInvalidQOS, "Invalid account or account/partition combination specified"}

// msgNodeConfig is the controller's refusal of a job no node of its
// partition could ever hold (ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE).
const msgNodeConfig = "Requested node configuration is not available"

// nodeConfigHints are the words Slurm's sbatch says before msgNodeConfig
// on a submission, which the gateway quotes as its reason for --mem (or
// --mem-per-cpu) past every node's memory and for more CPUs a node than
// any has: Slurm 22.05's --test-only says only the controller's
// (measured: sbatch --test-only --mem=5000 on 4096 MB nodes, -c9 on
// 8-CPU ones: "allocation failure: Requested node configuration is not
// available", exit 1).
var nodeConfigHints = map[string]bool{
	"Memory specification can not be satisfied": true,
	"CPU count per node can not be satisfied":   true,
}

// allocationFailure is Slurm's refusal of a --test-only job, "allocation
// failure: REASON" (slurm_perror's, no "sbatch: error:"), with the
// gateway's whole message msg after it on a second line, "sbatch: error:
// ...", when it says more. REASON is Slurm's words in msg: those it
// quotes "(Slurm: ...)", or those it starts with, else msg itself; a
// submission's hint (nodeConfigHints) is the controller's msgNodeConfig.
func allocationFailure(c *cmd, msg string) *Error {
	msg = unfielded(msg)
	reason := msg
	if _, after, ok := strings.Cut(msg, "(Slurm: "); ok {
		reason, _, _ = strings.Cut(after, ")")
	} else {
		for _, r := range slurmReasons {
			if strings.HasPrefix(msg, r) {
				reason = r
			}
		}
	}
	if nodeConfigHints[reason] {
		reason = msgNodeConfig
	}
	text := "allocation failure: " + reason
	if reason != msg {
		text += "\n" + c.errorf("%s", msg).Text
	}
	return &Error{Text: text, Code: 1}
}

// unfielded is a gateway refusal's message without the request field it
// names first ("job.ntasks: Requested node configuration is not
// available: ..." reads "Requested node configuration is not available:
// ..."), so that Slurm's words come first.
func unfielded(msg string) string {
	if f, rest, ok := strings.Cut(msg, ": "); ok && !strings.Contains(f, " ") && strings.Contains(f, ".") {
		return rest
	}
	return msg
}

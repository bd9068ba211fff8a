package domain

// Job steps: srun inside a batch allocation. A CreateJobStep (gateway) adds
// a step to the job's current run and becomes one LaunchTasks per node of the
// step; the agents report each node's tasks with TasksChanged; the step ends
// when every node's tasks have. A step never changes its job's state (as in
// Slurm, the batch script decides what a failed step means), but the end of
// the job's attempt ends its steps: their tasks are told to stop on every
// node (settleJobSteps), including the nodes that run no batch step and so
// get no StopStep.
//
// Run.JobSteps is copy-on-write: a step is replaced by an edited copy (see
// putJobStep), never changed in place, because Run.clone copies the slice
// header only.

import (
	"cmp"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/hostlist"
	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/slurmspec"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"

	"github.com/loom-ml/loom/services/scheduler/internal/domain/jobstore"
)

// MaxStepTasks bounds the tasks of one job step (slurmspec's, which the
// gateway enforces too).
const MaxStepTasks = slurmspec.MaxStepTasks

// JobStep is one job step of a run (jobstore.JobStep); StepPart one node's
// tasks of it.
type (
	JobStep  = jobstore.JobStep
	StepPart = jobstore.StepPart
)

// StepOutputDir is where the tasks of a job step write their output:
// <shared>/.loom/steps/<job_id>.<step> (with -<attempt> after a requeue, so
// that a new run never reads an old run's files).
func StepOutputDir(sharedDir, jobID string, attempt, step int32) string {
	name := jobID + "." + strconv.Itoa(int(step))
	if attempt > 1 {
		name += "-" + strconv.Itoa(int(attempt))
	}
	return filepath.Join(sharedDir, ".loom", "steps", name)
}

// jobStepEvent handles the job-step events: CreateJobStep and CancelJobStep
// from the gateway, TasksChanged from agents.
func (t *txn) jobStepEvent(payload proto.Message) error {
	switch ev := payload.(type) {
	case *eventsv1.CreateJobStep:
		return t.createJobStep(ev)
	case *eventsv1.CancelJobStep:
		return t.cancelJobStep(ev)
	case *eventsv1.TasksChanged:
		return t.tasksChanged(ev)
	}
	return nil
}

// stepIndex returns the index in r.JobSteps of step id, or -1.
func stepIndex(r *Run, id int32) int {
	for i := range r.JobSteps {
		if r.JobSteps[i].ID == id {
			return i
		}
	}
	return -1
}

// Bounds on a run's steps. The run's record holds its steps and is written
// whole at each change of one: a job that runs ten thousand sruns one after
// another would write a record that grows with each, and one whose hostile
// batch script starts them by the thousand would grow without end.
const (
	// MaxKeptEndedSteps is the most ended steps a run keeps: past it the
	// oldest are dropped (Run.StepsDropped counts them). sacct and the
	// accounting history show the ones kept.
	MaxKeptEndedSteps = 256
	// MaxLiveSteps is the most steps of a run that run at once; another is
	// refused as Slurm refuses one past its MaxStepCount.
	MaxLiveSteps = 4096
)

// ReasonStepLimit is Slurm's error for a step past the limit.
const ReasonStepLimit = "Step limit reached for this job"

// putJobStep replaces step i of r (an edited run) with s (i < 0: adds it),
// dropping the oldest ended steps past MaxKeptEndedSteps.
// The run's DerivedExit takes in s's end first, so that a step dropped
// here or later still counts.
func putJobStep(r *Run, i int, s JobStep) {
	if st, ok := stepStatus(&s); ok {
		if d := runDerivedExit(r); r.DerivedExit == nil || st > d {
			v := max(d, st)
			r.DerivedExit = &v
		}
	}
	steps := make([]JobStep, 0, len(r.JobSteps)+1)
	steps = append(steps, r.JobSteps...)
	if i < 0 {
		steps = append(steps, s)
	} else {
		steps[i] = s
	}
	ended := 0
	for k := range steps {
		if steps[k].Ended() {
			ended++
		}
	}
	if drop := ended - MaxKeptEndedSteps; drop > 0 {
		kept := steps[:0]
		for _, st := range steps {
			if drop > 0 && st.Ended() {
				drop--
				r.StepsDropped++
				continue
			}
			kept = append(kept, st)
		}
		steps = kept
	}
	r.JobSteps = steps
}

// liveSteps counts r's steps that have not ended.
func liveSteps(r *Run) int {
	n := 0
	for i := range r.JobSteps {
		if !r.JobSteps[i].Ended() {
			n++
		}
	}
	return n
}

// stepGPUs picks want of the job's GPUs on node for a new --gpus-per-task
// step, in the job's order: first those no running step uses, so that
// steps started side by side (a task farm: srun --exact -n1
// --gpus-per-task=1 ... &) each get GPUs of their own; then those only
// --overlap steps use (they hold none); then, for an --overlap step when
// too few are left, those the running steps hold. planStep has checked
// that the job holds at least want there, and for a step that is not
// --overlap that want are not held.
func stepGPUs(r *Run, node string, want int) []int32 {
	// tier: 0 unused, 1 used by --overlap steps only, 2 held.
	tier := map[int32]int{}
	for i := range r.JobSteps {
		s := &r.JobSteps[i]
		if s.Ended() || s.State == loomv1.JobState_PENDING {
			continue
		}
		t := 2
		if s.Overlap {
			t = 1
		}
		for k, nd := range s.Nodes {
			if nd == node && k < len(s.GPUs) {
				for _, gpu := range s.GPUs[k] {
					tier[gpu] = max(tier[gpu], t)
				}
			}
		}
	}
	out := make([]int32, 0, want)
	for pass := 0; pass <= 2; pass++ {
		for _, gpu := range r.GPUs[node] {
			if len(out) < want && tier[gpu] == pass {
				out = append(out, gpu)
			}
		}
	}
	return out
}

// MaxStepHosts bounds a step's nodelist and exclude (the gateway's bound
// on a job's).
const MaxStepHosts = 4096

// stepNodes returns the indexes of the job's nodes (hosts, in the job's
// order) a step may use, those it must use first (srun -w: nodelist), then
// the others in the job's order, less exclude (srun -x) and the first
// relative nodes (srun -r); and how many it must use. A host of nodelist
// the job does not have, or one it also excludes, is Slurm's "Requested
// node configuration is not available".
func stepNodes(hosts, nodelist, exclude []string, relative int32) ([]int32, int, error) {
	const unavailable = "Requested node configuration is not available"
	if relative < 0 || (relative > 0 && int(relative) >= len(hosts)) {
		return nil, 0, fmt.Errorf("%s: --relative=%d, the job has %d node(s) (0..%d)", unavailable, relative, len(hosts), len(hosts)-1)
	}
	if len(nodelist) == 0 && len(exclude) == 0 && relative == 0 {
		out := make([]int32, len(hosts))
		for i := range out {
			out[i] = int32(i)
		}
		return out, 0, nil
	}
	at := make(map[string]int32, len(hosts))
	for i, h := range hosts {
		at[h] = int32(i)
	}
	skip := make(map[int32]bool, len(exclude))
	for _, h := range exclude {
		if i, ok := at[h]; ok {
			skip[i] = true
		}
	}
	var out []int32
	want := make(map[int32]bool, len(nodelist))
	for _, h := range nodelist {
		i, ok := at[h]
		switch {
		case !ok:
			return nil, 0, fmt.Errorf("%s: %s is not one of the job's nodes", unavailable, h)
		case skip[i]:
			return nil, 0, fmt.Errorf("%s: %s is both in --nodelist and --exclude", unavailable, h)
		case i < relative:
			return nil, 0, fmt.Errorf("%s: %s is before node %d (--relative)", unavailable, h, relative)
		case !want[i]:
			want[i] = true
			out = append(out, i)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a] < out[b] })
	required := len(out)
	for i := relative; int(i) < len(hosts); i++ {
		if !want[i] && !skip[i] {
			out = append(out, i)
		}
	}
	return out, required, nil
}

// StepLayout spreads a step's tasks over the first nodes of an allocation
// whose nodes hold alloc tasks each: nodeCount nodes (0: all, or fewer when
// fewer tasks are asked for), ntasks tasks (0: the job's tasks on those
// nodes, or perNode on each): with perNode (at most that many on one
// node) as evenly as possible, the first nodes taking the remainder;
// without, as Slurm's block layout fills the nodes' alloc (blockLayout:
// the even spread on an even job, 3,1 for -n4 on a job packed 3,1). It
// returns the tasks per node, or why the step cannot be laid out (Slurm's
// words first).
func StepLayout(alloc []int32, nodeCount, ntasks, perNode int32) ([]int32, error) {
	nAlloc := int32(len(alloc))
	nodes := nodeCount
	if nodes == 0 {
		nodes = nAlloc
		if ntasks > 0 && ntasks < nodes {
			nodes = ntasks
		}
	}
	if nodes > nAlloc {
		return nil, fmt.Errorf("Requested node configuration is not available: the job has %d node(s), the step asks for %d", nAlloc, nodes)
	}
	if nodes < 1 {
		return nil, fmt.Errorf("Requested node configuration is not available: the job has no nodes")
	}
	if ntasks == 0 {
		switch {
		case perNode > 0:
			ntasks = perNode * nodes
		default:
			if nodeCount == 0 {
				// The job's own layout, within the same bound as any
				// other: summed wide, as a hostile job's counts could
				// wrap an int32.
				var total int64
				for _, c := range alloc {
					total += int64(max(c, 1))
				}
				if total > MaxStepTasks {
					return nil, fmt.Errorf("Requested node configuration is not available: %d tasks, at most %d", total, MaxStepTasks)
				}
				return append([]int32(nil), alloc...), nil
			}
			for _, c := range alloc[:nodes] {
				ntasks += max(c, 1)
			}
		}
	}
	if ntasks < nodes {
		nodes = ntasks // as srun: "can't run 1 processes on 2 nodes, setting nnodes to 1"
	}
	if perNode > 0 && ntasks > perNode*nodes {
		return nil, fmt.Errorf("Requested node configuration is not available: %d tasks do not fit on %d node(s) at %d per node", ntasks, nodes, perNode)
	}
	if ntasks > MaxStepTasks {
		return nil, fmt.Errorf("Requested node configuration is not available: %d tasks, at most %d", ntasks, MaxStepTasks)
	}
	if perNode > 0 {
		out := make([]int32, nodes)
		for i := range out {
			out[i] = ntasks / nodes
			if int32(i) < ntasks%nodes {
				out[i]++
			}
		}
		return out, nil
	}
	return blockLayout(alloc[:nodes], ntasks), nil
}

// blockLayout is the tasks of ntasks on each node that holds alloc tasks
// of the job, as Slurm 22.05's block layout counts them
// (slurm_step_layout.c _task_layout_block): round after round one task a
// node while the node has room (its alloc, at least 1), then, every node
// full, round the nodes again from the first. On a job spread evenly it is
// the even spread with the first nodes taking the remainder; on one packed
// (slurmspec.PackTasks, 3,1) -n4 is 3,1, where an even 2,2 would put two
// tasks on one CPU. Computed by rounds, not task by task: ntasks reaches
// MaxStepTasks.
func blockLayout(alloc []int32, ntasks int32) []int32 {
	n := int64(len(alloc))
	room := make([]int64, n)
	var total, most int64
	for i, c := range alloc {
		room[i] = int64(max(c, 1))
		total += room[i]
		most = max(most, room[i])
	}
	out := make([]int32, n)
	want := int64(ntasks)
	if want >= total {
		// Every node full, the rest dealt round the nodes.
		over := want - total
		for i := range out {
			out[i] = int32(room[i] + over/n)
			if int64(i) < over%n {
				out[i]++
			}
		}
		return out
	}
	// k full rounds: the most with min(room, k) summed within ntasks; the
	// rest, one each, to the first nodes with room for round k+1.
	filled := func(k int64) int64 {
		var s int64
		for _, r := range room {
			s += min(r, k)
		}
		return s
	}
	lo, hi := int64(0), most
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if filled(mid) <= want {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	left := want - filled(lo)
	for i, r := range room {
		out[i] = int32(min(r, lo))
		if left > 0 && r > lo {
			out[i]++
			left--
		}
	}
	return out
}

func (t *txn) createJobStep(ev *eventsv1.CreateJobStep) error {
	var v errs.Validator
	v.Check(ev.GetJob() != "", "job", "required")
	v.Check(ev.GetRequestId() != "", "request_id", "required")
	v.Check(len(ev.GetCommand()) > 0 && ev.GetCommand()[0] != "", "command", "required")
	v.Check(ev.GetNodeCount() >= 0, "node_count", "must not be negative, got %d", ev.GetNodeCount())
	v.Check(ev.GetNtasks() >= 0 && ev.GetNtasks() <= MaxStepTasks, "ntasks", "must be 0..%d, got %d", MaxStepTasks, ev.GetNtasks())
	v.Check(ev.GetNtasksPerNode() >= 0 && ev.GetNtasksPerNode() <= slurmspec.MaxTasksPerNode, "ntasks_per_node",
		"must be 0..%d, got %d", slurmspec.MaxTasksPerNode, ev.GetNtasksPerNode())
	v.Check(ev.GetCpusPerTask() >= 0 && ev.GetCpusPerTask() <= slurmspec.MaxCPUsPerTask, "cpus_per_task",
		"must be 0..%d, got %d", slurmspec.MaxCPUsPerTask, ev.GetCpusPerTask())
	if err := slurmspec.ParseInput(ev.GetInput(), int(ev.GetNtasks())); err != nil {
		v.Add("input", "%v", err)
	}
	v.Check(!ev.GetPty() || ev.GetInput() == "" || ev.GetInput() == "0", "input", "with pty only task 0 reads input, got %q", ev.GetInput())
	v.Check(ev.GetPtyRows() >= 0 && ev.GetPtyRows() <= slurmspec.MaxTermSize && ev.GetPtyCols() >= 0 && ev.GetPtyCols() <= slurmspec.MaxTermSize,
		"pty_rows", "rows and columns must be 0..%d, got %d × %d", slurmspec.MaxTermSize, ev.GetPtyRows(), ev.GetPtyCols())
	v.Check(ev.GetGpusPerTask() >= 0 && ev.GetGpusPerTask() <= slurmspec.MaxGPUsPerTask, "gpus_per_task",
		"must be 0..%d, got %d", slurmspec.MaxGPUsPerTask, ev.GetGpusPerTask())
	v.Check(ev.GetGpus() >= 0 && ev.GetGpus() <= slurmspec.MaxJobGPUs, "gpus", "must be 0..%d, got %d", slurmspec.MaxJobGPUs, ev.GetGpus())
	v.Check(ev.GetCpusPerGpu() >= 0 && ev.GetCpusPerGpu() <= slurmspec.MaxCPUsPerGPU, "cpus_per_gpu",
		"must be 0..%d, got %d", slurmspec.MaxCPUsPerGPU, ev.GetCpusPerGpu())
	v.Check(ev.GetGpusPerNode() >= 0 && ev.GetGpusPerNode() <= slurmspec.MaxJobGPUs, "gpus_per_node",
		"must be 0..%d, got %d", slurmspec.MaxJobGPUs, ev.GetGpusPerNode())
	v.Check(len(ev.GetNodelist()) <= MaxStepHosts && len(ev.GetExclude()) <= MaxStepHosts, "nodelist",
		"at most %d hosts in nodelist and in exclude, got %d and %d", MaxStepHosts, len(ev.GetNodelist()), len(ev.GetExclude()))
	v.Check(ev.GetRelative() >= 0, "relative", "must not be negative, got %d", ev.GetRelative())
	dist, err := slurmspec.ParseDistribution(ev.GetDistribution())
	if err != nil {
		v.Add("distribution", "%q: %v", ev.GetDistribution(), err)
	}
	if err := v.Err(); err != nil {
		return fmt.Errorf("create job step: %w", err)
	}
	j := t.job(ev.GetJob())
	if j == nil || !j.Running() {
		// The gateway checked it ran; it has ended since. The gateway
		// answers the waiting srun from the job's state.
		return nil
	}
	r := t.currentRun(j)
	if r == nil || r.Ended() {
		return nil
	}
	for i := range r.JobSteps {
		if r.JobSteps[i].RequestID == ev.GetRequestId() {
			return nil // a copy of a create already applied
		}
	}
	ev = stepGPUDefaults(ev, j.Job)
	r = t.editRun(r.Key())
	id := r.NextStepID
	r.NextStepID++
	step := JobStep{ID: id, RequestID: ev.GetRequestId(), Command: append([]string(nil), ev.GetCommand()...),
		KillOnBadExit: ev.GetKillOnBadExit(), Overlap: ev.GetOverlap(), GPURequest: ev.GetGpus(),
		GPUsPerTask: ev.GetGpusPerTask(), CPUsPerGPU: ev.GetCpusPerGpu(), CPUsPerTask: ev.GetCpusPerTask(),
		GPUBindNone: ev.GetGpuBindNone(), Distribution: dist.Spec(), GPUsPerNode: ev.GetGpusPerNode(),
		AllocationCPUs: ev.GetAllocationCpus()}
	heldCPUs, heldGPUs := stepHolds(r)
	plan, busy, err := t.planStep(r, ev, heldCPUs, heldGPUs)
	if err == nil && liveSteps(r) >= MaxLiveSteps {
		err = fmt.Errorf("%s: %d steps of the job run (at most %d at once)", ReasonStepLimit, liveSteps(r), MaxLiveSteps)
	}
	// Until the job's nodes have reported its allocation ready (see
	// ReasonStepProlog) the step waits, whatever it would hold.
	held := err == nil && !configured(r)
	var req []byte
	if err == nil && (busy || held) {
		if req, err = proto.Marshal(ev); err == nil {
			err = t.pendingBound(r, len(req))
		}
	}
	switch {
	case err != nil:
		// Recorded, so that the waiting srun hears why at once.
		step.State, step.Reason, step.End = loomv1.JobState_FAILED, err.Error(), t.now
		putJobStep(r, -1, step)
	case held:
		step.State, step.Reason = loomv1.JobState_PENDING, ReasonStepProlog
		t.setStepRequest(StepRequestKey(r.Key(), id), req)
		putJobStep(r, -1, step)
	case busy:
		step.State, step.Reason = loomv1.JobState_PENDING, ReasonStepBusy
		t.setStepRequest(StepRequestKey(r.Key(), id), req)
		putJobStep(r, -1, step)
	default:
		t.launchStep(j, r, -1, step, ev, plan)
	}
	return nil
}

// Step resources. Inside its job's allocation a step holds, on each of its
// nodes, CPUs and (with --gpus-per-task) GPUs until it ends, as Slurm
// 22.05's does: with --exact (or -c) its tasks × --cpus-per-task (1 a task
// without -c), without it every CPU the job has on the node, so that steps
// without --exact run one after another; with --overlap nothing. A step
// whose resources are held waits (PENDING, Slurm's "Requested nodes are
// busy"); as steps end, the waiting ones that fit start, the first asked
// first (startPendingSteps). A step that fits does not wait behind one
// that does not (Slurm's sruns retry each on its own): waiting steps could
// otherwise hold up for ever the one that would free what they wait for.
// A waiting step's request (command, environment) is kept beside the run,
// not in its record (StepRequestKey): how many wait, and their bytes, are
// bounded.
const (
	// MaxPendingSteps is the most steps of a run that wait at once.
	MaxPendingSteps = 1024
	// MaxPendingStepBytes bounds the requests the waiting steps of a run
	// keep, in all.
	MaxPendingStepBytes = 4 << 20
	// ReasonStepBusy is a waiting step's reason, srun's words.
	ReasonStepBusy = slurmspec.ReasonStepBusy
	// ReasonStepProlog is the reason of a step that waits for its job's
	// nodes to report the allocation ready: a job is RUNNING from its
	// placement (lifecycle.go), but its batch host's agent runs the
	// prolog checks (-prolog-checks) before the batch step, and the
	// job's other steps must not start their tasks before those passed,
	// as slurmctld refuses a step while the job's prolog runs
	// (ESLURM_PROLOG_RUNNING; srun waits). The scheduler knows the nodes
	// ready when configured(r) holds: every node's step has reported
	// (STEP_RUNNING: the prolog passed and the process started; or an
	// end) or runs no process. The waiting steps start then
	// (releaseHeldSteps), in the change that applies the last report.
	ReasonStepProlog = slurmspec.ReasonStepProlog
)

// StepRequestKey is the key of the request of step id of the run keyed
// run: "<job>#<attempt>.<id>".
func StepRequestKey(run string, id int32) string {
	return run + "." + strconv.Itoa(int(id))
}

// LoadStepRequests adds stored requests of waiting steps, as at start-up.
func (s *State) LoadStepRequests(reqs map[string][]byte) { s.putStepRequests(reqs) }

// putStepRequests makes the requests of a change the state's (nil:
// deleted).
func (s *State) putStepRequests(reqs map[string][]byte) {
	for key, b := range reqs {
		s.stepReqBytes -= int64(len(s.stepReqs[key]))
		if b == nil {
			delete(s.stepReqs, key)
			continue
		}
		if s.stepReqs == nil {
			s.stepReqs = map[string][]byte{}
		}
		s.stepReqs[key] = b
		s.stepReqBytes += int64(len(b))
	}
}

// stepRequest returns the request kept for a waiting step, as this change
// leaves it.
func (t *txn) stepRequest(key string) []byte {
	if b, ok := t.c.StepRequests[key]; ok {
		return b
	}
	return t.s.stepReqs[key]
}

// setStepRequest keeps (b nil: drops) the request of a waiting step.
func (t *txn) setStepRequest(key string, b []byte) {
	if b == nil && t.stepRequest(key) == nil {
		return
	}
	if t.c.StepRequests == nil {
		t.c.StepRequests = map[string][]byte{}
	}
	t.c.StepRequests[key] = b
}

// pendingBound refuses a step that would wait past MaxPendingSteps or
// MaxPendingStepBytes, or past Config.MaxStepRequestBytes for every run
// together (its request being own bytes), in Slurm's words for a step past
// a limit.
func (t *txn) pendingBound(r *Run, own int) error {
	n, size := 0, own
	for i := range r.JobSteps {
		if r.JobSteps[i].State == loomv1.JobState_PENDING {
			n++
			size += len(t.stepRequest(StepRequestKey(r.Key(), r.JobSteps[i].ID)))
		}
	}
	if n >= MaxPendingSteps {
		return fmt.Errorf("%s: %d steps of the job wait for resources (at most %d)", ReasonStepLimit, n, MaxPendingSteps)
	}
	if size > MaxPendingStepBytes {
		return fmt.Errorf("%s: the requests of the job's waiting steps would take %d bytes (at most %d)", ReasonStepLimit, size, MaxPendingStepBytes)
	}
	// All runs together, as this change leaves them.
	all := t.s.stepReqBytes
	for key, b := range t.c.StepRequests {
		all += int64(len(b)) - int64(len(t.s.stepReqs[key]))
	}
	if limit := t.s.cfg.MaxStepRequestBytes; all+int64(own) > limit {
		return fmt.Errorf("%s: the scheduler keeps %d bytes of waiting steps' requests, every job's together (at most %d): try again when steps have started",
			ReasonStepLimit, all, limit)
	}
	return nil
}

// stepPlan is where a step's tasks run: the job's node indexes in the
// job's order (SLURM_NODEID), the tasks and the CPUs the step holds on
// each (cpus nil: none).
type stepPlan struct {
	idx, tasks, cpus []int32
	// gpus is how many of the job's GPUs the step gets on each of its
	// nodes (stepGPUCount); nil when it asks for none of its own.
	gpus  []int32
	total int32
}

// stepGPUDefaults returns the step request ev, given its job's GPU request
// when it asks for no GPUs of its own (no --gpus-per-task, --gpus-per-node,
// --gres=gpu:N or --gpus; the job's SLURM_GPUS that srun took is the job's)
// and not for none on purpose (no_gpus: --gres=none, --gpus=0): the job's
// --gpus-per-task, else its --gpus-per-node or --gres=gpu:N, else its
// --gpus, as Slurm 22.05's step is "allocated all of the generic resources
// that have been allocated to the job" (man srun; measured: a plain srun
// of an sbatch --gres=gpu:2 job shows TresPerNode=gres:gpu:2, holds both
// GPUs, and a second plain --exact step waits for them; of a --gpus=2 job
// TresPerStep=gres:gpu:2, and on one node of a two-node one, where the job
// has one GPU, it is refused). It is the one rule for a step started from
// the batch script, salloc's shell or outside the job (srun --jobid), whose
// environment has none of the job's options. ev itself is left as it is.
func stepGPUDefaults(ev *eventsv1.CreateJobStep, job *loomv1.Job) *eventsv1.CreateJobStep {
	own := ev.GetGpusPerTask() > 0 || ev.GetGpusPerNode() > 0 || ev.GetGpus() > 0 && !ev.GetGpusInherited()
	if own || ev.GetNoGpus() || job == nil {
		return ev
	}
	out := proto.Clone(ev).(*eventsv1.CreateJobStep)
	switch {
	case job.GetGpusPerTask() > 0:
		out.GpusPerTask = job.GetGpusPerTask()
	case job.GetGpusPerNode() > 0:
		out.GpusPerNode = job.GetGpusPerNode()
	case job.GetGpus() > 0:
		out.Gpus, out.GpusInherited = job.GetGpus(), false
	default:
		return ev
	}
	return out
}

// stepGPUCount is how many of the job's GPUs the step ev asks for on a node
// where it runs n tasks, one of nodes: --gpus-per-task's n × it (the
// larger of that and --gpus-per-node when it has both: measured beside
// Slurm 22.05, srun -n2 --gpus-per-task=1 in an sbatch --gpus-per-node=2
// job, whose SLURM_GPUS_PER_NODE srun takes as its own, gets 2 GPUs a
// node), else --gpus-per-node's, else (a --gpus of its own, not the job's
// SLURM_GPUS) the whole request on a one-node step and at least one a
// node on a larger one (spreadStepGPUs gives the rest). 0: the step holds
// none (it asked for none: no_gpus, or its job has no GPU request to
// take, stepGPUDefaults) and its tasks see the job's GPUs there unless it
// asked for none.
func stepGPUCount(ev *eventsv1.CreateJobStep, n int32, nodes int) int {
	switch {
	case ev.GetGpusPerTask() > 0:
		return max(int(n)*int(ev.GetGpusPerTask()), int(ev.GetGpusPerNode()))
	case ev.GetGpusPerNode() > 0:
		return int(ev.GetGpusPerNode())
	case ev.GetGpus() > 0 && !ev.GetGpusInherited():
		if nodes == 1 {
			return int(ev.GetGpus())
		}
		return 1
	}
	return 0
}

// spreadStepGPUs spreads a step's --gpus over its nodes as Slurm 22.05's
// step does (measured: -N2 --gpus=3 is 2 and 1, --gpus=5 on 4-GPU nodes 4
// and 1): one on each node, then the rest on the first nodes, each up to
// the job's GPUs there (has, in the step's node order). ok is false when
// the job holds fewer there than the request.
func spreadStepGPUs(total int, has []int) (out []int32, ok bool) {
	out = make([]int32, len(has))
	left := total - len(has)
	for i, h := range has {
		extra := max(min(left, h-1), 0)
		out[i] = int32(1 + extra)
		left -= extra
	}
	return out, left <= 0
}

// stepHolds returns what r's running steps hold, by node name: CPUs, and
// the job's GPU indices given to their tasks. A step holds nothing with
// --overlap, and holds the rest until it ends, on every node: as Slurm's,
// a node's share is free when the whole step is.
func stepHolds(r *Run) (cpus map[string]int32, gpus map[string]map[int32]bool) {
	cpus, gpus = map[string]int32{}, map[string]map[int32]bool{}
	for i := range r.JobSteps {
		s := &r.JobSteps[i]
		if s.Ended() || s.State == loomv1.JobState_PENDING {
			continue
		}
		addHolds(cpus, gpus, s)
	}
	return cpus, gpus
}

// addHolds adds what the running step s holds (nothing with --overlap) to
// the CPUs and GPUs held, by node name.
func addHolds(cpus map[string]int32, gpus map[string]map[int32]bool, s *JobStep) {
	if s.Overlap {
		return
	}
	for k, node := range s.Nodes {
		if k < len(s.CPUs) {
			cpus[node] += s.CPUs[k]
		}
		if k < len(s.GPUs) {
			if gpus[node] == nil {
				gpus[node] = map[int32]bool{}
			}
			for _, gpu := range s.GPUs[k] {
				gpus[node][gpu] = true
			}
		}
	}
}

// planStep lays out the step ev asks for on r's nodes: err when it can
// never run in this allocation (Slurm's "Requested node configuration is
// not available"), busy when it fits the allocation but not what the
// running steps leave free now. Nodes the step must use (srun -w) come
// first; for the others it takes the first of the job's, in order, that
// have room, so that a task farm of one-node steps spreads over the job.
func (t *txn) planStep(r *Run, ev *eventsv1.CreateJobStep, heldCPUs map[string]int32, heldGPUs map[string]map[int32]bool) (plan stepPlan, busy bool, err error) {
	if c := t.cluster(r.Cluster); c == nil || c.SharedDir == "" {
		return plan, false, fmt.Errorf("the cluster has no shared directory for the step's output")
	}
	sel, required, err := stepNodes(r.Hostnames, ev.GetNodelist(), ev.GetExclude(), ev.GetRelative())
	if err != nil {
		return plan, false, err
	}
	if len(r.Tasks) != len(r.Nodes) {
		return plan, false, fmt.Errorf("the run's task layout is unknown")
	}
	alloc := make([]int32, len(sel))
	for i, k := range sel {
		alloc[i] = r.Tasks[k]
	}
	tasks, err := StepLayout(alloc, ev.GetNodeCount(), ev.GetNtasks(), ev.GetNtasksPerNode())
	if err != nil {
		return plan, false, err
	}
	// plane=N sets its own counts (the step's record keeps the -m that
	// createJobStep checked).
	dist, _ := slurmspec.ParseDistribution(ev.GetDistribution())
	tasks = slurmspec.StepTaskCounts(dist, tasks)
	if len(tasks) < required {
		return plan, false, fmt.Errorf("Requested node configuration is not available: --nodelist names %d node(s), the step has %d", required, len(tasks))
	}
	for _, c := range tasks {
		plan.total += c
	}
	if e := slurmspec.ParseInput(ev.GetInput(), int(plan.total)); e != nil {
		return plan, false, fmt.Errorf("--input: %w", e)
	}
	cpt, g := max(ev.GetCpusPerTask(), 1), int(ev.GetGpusPerTask())
	if gpus := ev.GetGpus(); g == 0 && ev.GetGpusPerNode() == 0 && gpus > 0 && !ev.GetGpusInherited() && int(gpus) < len(tasks) {
		return plan, false, fmt.Errorf("Invalid generic resource (gres) specification: the step asks for %d GPU(s) on %d nodes, fewer than one a node", gpus, len(tasks))
	}
	// -c implies --exact, as Slurm 22.05's srun has it.
	exact := ev.GetExact() || ev.GetCpusPerTask() > 0
	jobSpec := (*loomv1.Job)(nil)
	if j := t.job(r.Job); j != nil {
		jobSpec = j.Job
	}
	// need is what n tasks of the step take on the job's node k, and
	// whether they fit it at all (err) and now (fits).
	need := func(k, n int32) (cpus int32, fits bool, err error) {
		node, host, has := r.Nodes[k], r.Hostnames[k], cpusOf(r, int(k), jobSpec)
		if exact && int64(n)*int64(cpt) > int64(has) {
			return 0, false, fmt.Errorf("More processors requested than permitted: %d task(s) with %d CPU(s) each need %d CPUs on %s, the job has %d there",
				n, cpt, int64(n)*int64(cpt), host, has)
		}
		want := stepGPUCount(ev, n, len(tasks))
		if held := len(r.GPUs[node]); int(n)*g > held {
			return 0, false, fmt.Errorf("Requested node configuration is not available: %d task(s) with --gpus-per-task=%d need %d GPUs on %s, the job holds %d there",
				n, g, int(n)*g, host, held)
		} else if want > held {
			return 0, false, fmt.Errorf("Invalid generic resource (gres) specification: the step asks for %d GPU(s) on %s, the job holds %d there", want, host, held)
		}
		if ev.GetOverlap() {
			return 0, true, nil
		}
		cpus = has
		if exact {
			cpus = n * cpt
		}
		return cpus, cpus <= has-heldCPUs[node] && want <= len(r.GPUs[node])-len(heldGPUs[node]), nil
	}
	idx, cpus := make([]int32, len(tasks)), make([]int32, len(tasks))
	// can[i]: sel[i] can take the most tasks a node of the step gets
	// (tasks[0]: the layout's first nodes take the remainder), checked
	// once a node.
	most := tasks[0]
	can := make([]error, len(sel))
	for i := range sel {
		_, _, can[i] = need(sel[i], most)
	}
	// The other nodes are looked at once each, in the job's order, so
	// that a large step's plan is linear in its nodes: one without room
	// for a position's tasks is passed over for the later positions too
	// (they take no more tasks).
	next := required
	var firstErr error
	sawBusy := false
	for pos, n := range tasks {
		if pos < required {
			c, fits, err := need(sel[pos], n)
			if err != nil {
				return plan, false, err
			}
			if !fits {
				return plan, true, nil
			}
			idx[pos], cpus[pos] = sel[pos], c
			continue
		}
		at := -1
		for ; next < len(sel) && at < 0; next++ {
			if can[next] != nil && n == most {
				firstErr = cmp.Or(firstErr, can[next])
				continue
			}
			c, fits, err := need(sel[next], n)
			switch {
			case err != nil:
				firstErr = cmp.Or(firstErr, err)
			case !fits:
				sawBusy = true
			default:
				at, cpus[pos] = next, c
			}
		}
		if at < 0 {
			if sawBusy {
				return plan, true, nil
			}
			return plan, false, cmp.Or(firstErr, errors.New("Requested node configuration is not available"))
		}
		idx[pos] = sel[at]
	}
	// The layout's counts go to the step's nodes in the job's order, the
	// remainder to the first, as Slurm 22.05's (measured: -n3 -w node2 in
	// a two-node job is 2 tasks on node1, 1 on node2): a node that -w put
	// first for the search takes its place's count in the job's order.
	if sorted := slices.Sorted(slices.Values(idx)); !slices.Equal(sorted, idx) {
		for i, k := range sorted {
			c, fits, err := need(k, tasks[i])
			if err != nil {
				return plan, false, err
			}
			if !fits {
				return plan, true, nil
			}
			cpus[i] = c
		}
		idx = sorted
	}
	// The step's nodes in the job's order (SLURM_NODEID), each with its
	// tasks.
	order := make([]int, len(idx))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return idx[order[a]] < idx[order[b]] })
	plan.idx, plan.tasks = make([]int32, len(idx)), make([]int32, len(idx))
	if !ev.GetOverlap() {
		plan.cpus = make([]int32, len(idx))
	}
	for i, o := range order {
		plan.idx[i], plan.tasks[i] = idx[o], tasks[o]
		if plan.cpus != nil {
			plan.cpus[i] = cpus[o]
		}
	}
	if stepGPUCount(ev, 1, len(tasks)) == 0 {
		return plan, false, nil
	}
	plan.gpus = make([]int32, len(idx))
	for i := range plan.idx {
		plan.gpus[i] = int32(stepGPUCount(ev, plan.tasks[i], len(idx)))
	}
	if g == 0 && ev.GetGpusPerNode() == 0 && len(idx) > 1 {
		has := make([]int, len(idx))
		total := 0
		for i, k := range plan.idx {
			has[i] = len(r.GPUs[r.Nodes[k]])
			total += has[i]
		}
		spread, ok := spreadStepGPUs(int(ev.GetGpus()), has)
		if !ok {
			return plan, false, fmt.Errorf("Invalid generic resource (gres) specification: the step asks for %d GPU(s), the job holds %d on the step's %d nodes", ev.GetGpus(), total, len(idx))
		}
		plan.gpus = spread
		if !ev.GetOverlap() {
			for i, k := range plan.idx {
				node := r.Nodes[k]
				if int(spread[i]) > len(r.GPUs[node])-len(heldGPUs[node]) {
					return plan, true, nil
				}
			}
		}
	}
	return plan, false, nil
}

// startPendingSteps starts those of r's waiting steps that fit what the
// running ones leave, the first asked first; one that can no longer run in
// the allocation fails. It does nothing once the run is over
// (settleJobSteps ends its waiting steps), and before the job's nodes have
// reported the allocation ready (ReasonStepProlog). It runs when a step
// ends, the only time a step's resources are freed, and when the last node
// reports (releaseHeldSteps).
func (t *txn) startPendingSteps(r *Run) {
	j := t.job(r.Job)
	if j == nil || !j.Running() || j.Attempt != r.Attempt || r.Ended() || r.Released || !configured(r) {
		// Not configured: they wait for the nodes (ReasonStepProlog).
		return
	}
	// By id: putJobStep may drop ended steps, moving the others.
	var waiting []int32
	for i := range r.JobSteps {
		if r.JobSteps[i].State == loomv1.JobState_PENDING {
			waiting = append(waiting, r.JobSteps[i].ID)
		}
	}
	if len(waiting) == 0 {
		return
	}
	heldCPUs, heldGPUs := stepHolds(r)
	for _, id := range waiting {
		i := stepIndex(r, id)
		s := r.JobSteps[i].Clone()
		key := StepRequestKey(r.Key(), id)
		ev := &eventsv1.CreateJobStep{}
		b := t.stepRequest(key)
		err := proto.Unmarshal(b, ev)
		if err == nil && (b == nil || ev.GetRequestId() != s.RequestID) {
			err = fmt.Errorf("the step's request is not kept")
		}
		var plan stepPlan
		busy := false
		if err == nil {
			plan, busy, err = t.planStep(r, ev, heldCPUs, heldGPUs)
		}
		switch {
		case err != nil:
			s.State, s.Reason, s.End = loomv1.JobState_FAILED, err.Error(), t.now
			t.setStepRequest(key, nil)
			putJobStep(r, i, s)
		case busy:
			if s.Reason != ReasonStepBusy {
				// It waited for the prolog; now it waits for steps.
				s.Reason = ReasonStepBusy
				putJobStep(r, i, s)
			}
		default:
			t.setStepRequest(key, nil)
			t.launchStep(j, r, i, s, ev, plan)
			// What it now holds, for the steps after it.
			addHolds(heldCPUs, heldGPUs, &r.JobSteps[stepIndex(r, id)])
		}
	}
}

// releaseHeldSteps starts the steps of r (a run of the change) that waited
// for its nodes (ReasonStepProlog), once they are all ready: called by
// settle, after the event that made them so.
func (t *txn) releaseHeldSteps(r *Run) {
	for i := range r.JobSteps {
		s := &r.JobSteps[i]
		if s.State == loomv1.JobState_PENDING && s.Reason == ReasonStepProlog {
			if configured(r) {
				t.startPendingSteps(r)
			}
			return
		}
	}
}

// launchStep starts step (put at index i of r's steps; i < 0: added) as
// plan lays it out: one LaunchTasks per node.
func (t *txn) launchStep(j *Job, r *Run, i int, step JobStep, ev *eventsv1.CreateJobStep, plan stepPlan) {
	shared := t.cluster(r.Cluster).SharedDir
	id, idx, tasks, total := step.ID, plan.idx, plan.tasks, plan.total
	step.State, step.Reason, step.Start = loomv1.JobState_RUNNING, "", t.now
	n := len(tasks)
	step.Nodes, step.Hostnames = make([]string, n), make([]string, n)
	for i, k := range idx {
		step.Nodes[i], step.Hostnames[i] = r.Nodes[k], r.Hostnames[k]
	}
	step.Tasks, step.CPUs = tasks, plan.cpus
	if plan.gpus != nil {
		step.GPUs = make([][]int32, n)
		for i, k := range idx {
			step.GPUs[i] = stepGPUs(r, r.Nodes[k], int(plan.gpus[i]))
		}
	}
	step.Parts = make([]StepPart, n)
	step.ExitCodes = make([]int32, total)
	step.ExitSignals = make([]int32, total)
	step.OutputDir = StepOutputDir(shared, j.Job.GetJobId(), r.Attempt, id)
	putJobStep(r, i, step)

	wd := ev.GetWorkDir()
	if wd == "" {
		wd = workDir(j.Job, shared)
	}
	// The scheduler's variables of each node, without the job's own env:
	// the batch script's (what srun exports) takes its place.
	bare := *j
	bare.Job = proto.Clone(j.Job).(*loomv1.Job)
	bare.Job.Env = nil
	extra := t.arrayEnv(j)
	rv := newRunVars(bare.Job, r)
	nodelist := hostlist.Compress(step.Hostnames)
	stepTasks := slurmspec.CompressCounts(tasks)
	// Which node runs which rank: the step's -m, or Slurm's default.
	ranks := step.Ranks()
	dist, _ := slurmspec.ParseDistribution(step.Distribution)
	dist = dist.Or(slurmspec.DefaultDistribution(int(total), n))
	blocks := slices.EqualFunc(ranks, slurmspec.TaskRanks(slurmspec.Distribution{}, tasks), slices.Equal[[]int32])
	for k, node := range step.Nodes {
		first := int32(0)
		if len(ranks[k]) > 0 {
			first = ranks[k][0]
		}
		env := make(map[string]string, len(ev.GetEnv())+48)
		for key, val := range ev.GetEnv() {
			env[key] = val
		}
		for key, val := range stepEnv(&bare, r, rv, int(idx[k]), shared, t.s.cfg.MasterAddr, extra) {
			if _, set := env[key]; set && (key == "MASTER_ADDR" || key == "MASTER_PORT") {
				continue
			}
			env[key] = val
		}
		gtids := make([]string, len(ranks[k]))
		for i, rank := range ranks[k] {
			gtids[i] = strconv.Itoa(int(rank))
		}
		for key, val := range map[string]string{
			"SLURM_STEP_ID":             strconv.Itoa(int(id)),
			"SLURM_STEPID":              strconv.Itoa(int(id)),
			"SLURM_STEP_NODELIST":       nodelist,
			"SLURM_NODELIST":            nodelist,
			"SLURM_STEP_NUM_NODES":      strconv.Itoa(n),
			"SLURM_NNODES":              strconv.Itoa(n),
			"SLURM_STEP_NUM_TASKS":      strconv.Itoa(int(total)),
			"SLURM_NTASKS":              strconv.Itoa(int(total)),
			"SLURM_NPROCS":              strconv.Itoa(int(total)),
			"SLURM_STEP_TASKS_PER_NODE": stepTasks,
			"SLURM_TASKS_PER_NODE":      stepTasks,
			"SLURM_DISTRIBUTION":        dist.String(),
			"SLURM_NODEID":              strconv.Itoa(k),
			"SLURM_GTIDS":               strings.Join(gtids, ","),
		} {
			env[key] = val
		}
		if ev.GetCpusPerTask() > 0 {
			env["SLURM_CPUS_PER_TASK"] = strconv.Itoa(int(ev.GetCpusPerTask()))
		}
		if dist.Nodes == "plane" {
			env["SLURM_DIST_PLANESIZE"] = strconv.Itoa(int(dist.PlaneSize))
		}
		// Ranks only where they are not first onwards, so that a block
		// step reads the same to an agent from before they were sent.
		var taskRanks []int32
		if !blocks {
			taskRanks = ranks[k]
		}
		// The step's GPUs on the node (Slurm's SLURM_STEP_GPUS): the
		// job's there, or with --gpus-per-task each task's own; with
		// --gpu-bind=none too, every task all of those the step holds
		// there. (Slurm's leaves CUDA_VISIBLE_DEVICES unset then and
		// fences the step's GPUs with its device cgroup; Loom has none,
		// so the variables are the fence.)
		var taskGPUs []string
		if devs := env["CUDA_VISIBLE_DEVICES"]; devs != "" {
			env["SLURM_STEP_GPUS"] = devs
		}
		if ev.GetNoGpus() && step.GPUs == nil && ev.GetGpusPerTask() == 0 {
			// --gres=none: no GPU. Slurm's leaves the variables
			// unset and its device cgroup hides the job's; Loom's
			// empty CUDA_VISIBLE_DEVICES is the fence (as a job's
			// without GPUs), the rest go.
			env["CUDA_VISIBLE_DEVICES"] = ""
			delete(env, "GPU_DEVICE_ORDINAL")
			delete(env, "SLURM_STEP_GPUS")
		}
		if g := int(ev.GetGpusPerTask()); g > 0 && ev.GetGpuBindNone() || g == 0 && step.GPUs != nil {
			// --gpu-bind=none (above), --gpus or --gpus-per-node (as
			// Slurm's): every task sees the step's GPUs on the node.
			if g > 0 {
				env["SLURM_GPUS_PER_TASK"] = strconv.Itoa(g)
			}
			ids := make([]string, len(step.GPUs[k]))
			for i, gpu := range step.GPUs[k] {
				ids[i] = strconv.Itoa(int(gpu))
			}
			for _, v := range []string{"CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "SLURM_STEP_GPUS"} {
				env[v] = strings.Join(ids, ",")
			}
		} else if g > 0 {
			env["SLURM_GPUS_PER_TASK"] = strconv.Itoa(g)
			held := step.GPUs[k]
			taskGPUs = make([]string, tasks[k])
			for l := range taskGPUs {
				// Each task its own g, in order; a node's lone task
				// all of the step's there, which are more than g when
				// --gpus-per-node asked more (measured beside Slurm
				// 22.05: -n1 --gpus-per-task=1 in a --gpus-per-node=4
				// job sees 4 GPUs, -n2 one each, GPUs 0 and 1).
				own := held[l*g : l*g+g]
				if tasks[k] == 1 {
					own = held
				}
				ids := make([]string, len(own))
				for i, gpu := range own {
					ids[i] = strconv.Itoa(int(gpu))
				}
				taskGPUs[l] = strings.Join(ids, ",")
			}
		}
		t.emit(node, j.Name(), &eventsv1.LaunchTasks{
			Job: j.Name(), JobId: j.Job.GetJobId(), Attempt: r.Attempt, StepId: id, Node: node, Registration: t.registration(node),
			NodeIndex: int32(k), FirstRank: first, Ntasks: tasks[k], TotalTasks: total,
			Command: step.Command, Env: env, WorkDir: wd, OutputDir: step.OutputDir,
			User: j.Job.GetUser(), MemLimitBytes: memLimit(r), Input: ev.GetInput(),
			// The terminal is task 0's, on the step's first node.
			Pty: ev.GetPty() && k == 0, PtyRows: ev.GetPtyRows(), PtyCols: ev.GetPtyCols(),
			TaskGpus: taskGPUs, Ranks: taskRanks,
		})
	}
}

func (t *txn) cancelJobStep(ev *eventsv1.CancelJobStep) error {
	var v errs.Validator
	v.Check(ev.GetJob() != "", "job", "required")
	v.Check(ev.GetStepId() >= 0, "step_id", "must not be negative, got %d", ev.GetStepId())
	sig := ""
	if ev.GetSignal() != "" {
		var err error
		if sig, err = SignalName(ev.GetSignal()); err != nil {
			v.Add("signal", "%v", err)
		}
	}
	if err := v.Err(); err != nil {
		return fmt.Errorf("cancel job step: %w", err)
	}
	j := t.job(ev.GetJob())
	if j == nil {
		return nil
	}
	r := t.currentRun(j)
	if r == nil {
		return nil
	}
	i := stepIndex(r, ev.GetStepId())
	if i < 0 || r.JobSteps[i].Ended() {
		return nil
	}
	if r.JobSteps[i].State == loomv1.JobState_PENDING {
		// Not started: there is nothing to signal, and cancelled it
		// ends at once (it held nothing).
		if sig == "" {
			r = t.editRun(r.Key())
			s := r.JobSteps[i].Clone()
			s.Cancelled, s.Reason, s.CancelledBy = true, "cancelled", ev.GetUser()
			t.maybeEndStep(&s)
			t.setStepRequest(StepRequestKey(r.Key(), s.ID), nil)
			putJobStep(r, i, s)
		}
		return nil
	}
	if sig != "" {
		s := r.JobSteps[i]
		t.killStepTasks(r, &s, sig, "signal "+sig, "")
		return nil
	}
	if r.JobSteps[i].Stopping {
		return nil
	}
	r = t.editRun(r.Key())
	s := r.JobSteps[i].Clone()
	// Who cancelled it (sacct's "CANCELLED by UID" on the step's row): the
	// account the command's sender authenticated the caller as.
	s.Stopping, s.Cancelled, s.Reason, s.CancelledBy = true, true, "cancelled", ev.GetUser()
	t.killStepTasks(r, &s, "", "step cancelled", "")
	putJobStep(r, i, s)
	return nil
}

// killStepTasks tells every node of step s whose tasks have not ended to
// kill them (or, with sig, only to signal them).
func (t *txn) killStepTasks(r *Run, s *JobStep, sig, reason, except string) {
	for k, node := range s.Nodes {
		if node == except || s.Parts[k].Terminal() {
			continue
		}
		t.emit(node, r.Job, &eventsv1.KillTasks{Job: r.Job, Attempt: r.Attempt, StepId: s.ID,
			Node: node, Reason: reason, Signal: sig})
	}
}

func (t *txn) tasksChanged(ev *eventsv1.TasksChanged) error {
	var v errs.Validator
	v.Check(ev.GetJob() != "", "job", "required")
	v.Check(ev.GetNode() != "", "node", "required")
	v.Check(ev.GetStepId() >= 0, "step_id", "must not be negative, got %d", ev.GetStepId())
	if err := v.Err(); err != nil {
		return fmt.Errorf("tasks changed: %w", err)
	}
	r := t.run(RunKey(ev.GetJob(), ev.GetAttempt()))
	if r == nil {
		return nil
	}
	i := stepIndex(r, ev.GetStepId())
	if i < 0 {
		return nil
	}
	k := -1
	for n, node := range r.JobSteps[i].Nodes {
		if node == ev.GetNode() {
			k = n
		}
	}
	st := ev.GetState()
	if k < 0 || st == eventsv1.StepState_STEP_STATE_UNSPECIFIED || r.JobSteps[i].Parts[k].Terminal() ||
		(st == eventsv1.StepState_STEP_RUNNING && r.JobSteps[i].Parts[k].State == st) {
		return nil
	}
	r = t.editRun(r.Key())
	s := r.JobSteps[i].Clone()
	msg := nodeMessage(ev.GetMessage())
	usage := s.Parts[k].Usage
	if len(ev.GetUsage()) > 0 {
		usage = t.taskUsages(ev.GetUsage(), s.Tasks[k])
	}
	s.Parts[k] = StepPart{State: st, Message: msg, Usage: usage}
	if s.Parts[k].Terminal() {
		ranks := s.Ranks()[k]
		n := int32(len(ranks))
		for l, rank := range ranks {
			code := int32(0)
			if l < len(ev.GetExitCodes()) {
				code = ev.GetExitCodes()[l]
			} else if st == eventsv1.StepState_STEP_FAILED_TO_START || st == eventsv1.StepState_STEP_LOST {
				code = 1
			}
			s.ExitCodes[rank] = code
		}
		switch {
		case len(ev.GetExitSignals()) == int(n) && len(s.ExitSignals) == len(s.ExitCodes):
			for l, rank := range ranks {
				s.ExitSignals[rank] = ev.GetExitSignals()[l]
			}
		case st == eventsv1.StepState_STEP_EXITED || st == eventsv1.StepState_STEP_KILLED:
			// An agent that did not say (from before it did): which
			// codes are signals is not known for the step.
			s.ExitSignals = nil
		}
		bad := st != eventsv1.StepState_STEP_EXITED
		for _, rank := range ranks {
			bad = bad || s.ExitCodes[rank] != 0
		}
		// A task that could not start or was lost leaves the step unable
		// to complete: its other tasks are stopped, as srun does. A bad
		// exit does so only with --kill-on-bad-exit.
		if bad && !s.Stopping && st != eventsv1.StepState_STEP_KILLED &&
			(s.KillOnBadExit || st == eventsv1.StepState_STEP_FAILED_TO_START || st == eventsv1.StepState_STEP_LOST) {
			s.Stopping = true
			s.Reason = detail(fmt.Sprintf("tasks on %s %s", s.Hostnames[k], strings.ToLower(strings.TrimPrefix(st.String(), "STEP_"))), msg)
			t.killStepTasks(r, &s, "", "a task of the step failed", "")
		}
		t.maybeEndStep(&s)
	}
	putJobStep(r, i, s)
	if s.Ended() {
		// What it held is free.
		t.startPendingSteps(r)
	}
	if !r.Released && r.allTerminal() {
		// The step's tasks were the last of the run: its nodes are free.
		r.Released = true
		t.dirty[r.Cluster] = true
	}
	return nil
}

// maybeEndStep ends s when every node's tasks have ended: CANCELLED when it
// was cancelled, COMPLETED when every task exited 0, FAILED otherwise, with
// the highest exit code.
func (t *txn) maybeEndStep(s *JobStep) {
	for _, p := range s.Parts {
		if !p.Terminal() {
			return
		}
	}
	ok := true
	for _, p := range s.Parts {
		ok = ok && p.State == eventsv1.StepState_STEP_EXITED
	}
	for _, c := range s.ExitCodes {
		ok = ok && c == 0
	}
	oom := false
	for _, p := range s.Parts {
		oom = oom || killedForMemory(p.Message)
	}
	switch {
	case s.Cancelled:
		s.State = loomv1.JobState_CANCELLED
	case ok:
		s.State = loomv1.JobState_COMPLETED
	case oom:
		s.State = loomv1.JobState_OUT_OF_MEMORY
		if s.Reason == "" {
			s.Reason = ReasonOutOfMemory
		}
	default:
		s.State = loomv1.JobState_FAILED
		if s.Reason == "" {
			s.Reason = ReasonNonZeroExitCode
		}
	}
	s.End = t.now
}

// settleJobSteps ends the job steps of the runs this change ended: each live
// step's tasks are told to stop on every node (the nodes other than the batch
// host run no batch step, so no StopStep reaches them), and the parts on
// nodes the run abandoned (failed, removed) are lost at once, since no agent
// will report them. It runs after every handled event, not in Tick: an
// attempt the clock ends stops its batch step, and the other nodes' tasks
// are stopped here when that step's end is reported (the batch host's agent
// kills the run's tasks there with the batch step).
func (t *txn) settleJobSteps() {
	keys := make([]string, 0, len(t.c.Runs))
	for key, r := range t.c.Runs {
		if r != nil && len(r.JobSteps) > 0 {
			keys = append(keys, key)
		}
	}
	sort.Strings(keys)
	for _, key := range keys {
		r := t.c.Runs[key]
		j := t.job(r.Job)
		live := j != nil && j.Running() && j.Attempt == r.Attempt && !r.Ended() && !r.Released
		if live {
			continue
		}
		why := "job ended"
		if r.Outcome != loomv1.JobState_JOB_STATE_UNSPECIFIED {
			why = "job " + r.Outcome.String()
		}
		// By id: putJobStep may drop ended steps, moving the others.
		var open []int32
		for i := range r.JobSteps {
			if !r.JobSteps[i].Ended() {
				open = append(open, r.JobSteps[i].ID)
			}
		}
		for _, id := range open {
			i := stepIndex(r, id)
			s := r.JobSteps[i].Clone()
			if s.State == loomv1.JobState_PENDING {
				// Never started: it ends with the job, its request
				// dropped, its reason no longer "busy".
				s.Reason = why
				t.setStepRequest(StepRequestKey(r.Key(), s.ID), nil)
			}
			if !s.Stopping {
				s.Stopping, s.Cancelled = true, true
				if s.Reason == "" {
					s.Reason = why
				}
				t.killStepTasks(r, &s, "", why, "")
			}
			ranks := s.Ranks()
			for k, node := range s.Nodes {
				if !s.Parts[k].Terminal() && r.Steps[node].Abandoned {
					s.Parts[k] = StepPart{State: eventsv1.StepState_STEP_LOST, Message: "node " + s.Hostnames[k] + " lost"}
					for _, rank := range ranks[k] {
						s.ExitCodes[rank] = 1
					}
				}
			}
			t.maybeEndStep(&s)
			putJobStep(r, i, s)
		}
	}
}

// JobSteps returns the steps of one run of the job named name (an array
// task may be named "jobs/A_i"), by step id: of its current run when
// attempt is 0, else of that attempt (earlier runs are kept as long as the
// job: sacct -D shows them). ok is false when the scheduler does not know
// the job or the job has had no such attempt.
func (s *State) JobSteps(name string, attempt int32) (steps []*loomv1.JobStep, ok bool) {
	j := s.jobs[s.ResolveJobName(name)]
	if j == nil || attempt < 0 || attempt > j.Attempt {
		return nil, false
	}
	if attempt == 0 {
		attempt = j.Attempt
	}
	r := s.runs[RunKey(j.Name(), attempt)]
	if r == nil || attempt == 0 {
		return nil, true
	}
	for i := range r.JobSteps {
		steps = append(steps, jobStepProto(j, r, &r.JobSteps[i]))
	}
	return steps, true
}

// JobStep returns step id of the current run of the job named name; nil
// when there is no such job or step.
func (s *State) JobStep(name string, id int32) *loomv1.JobStep {
	j := s.jobs[s.ResolveJobName(name)]
	if j == nil || j.Attempt == 0 {
		return nil
	}
	r := s.runs[RunKey(j.Name(), j.Attempt)]
	if r == nil {
		return nil
	}
	if i := stepIndex(r, id); i >= 0 {
		return jobStepProto(j, r, &r.JobSteps[i])
	}
	return nil
}

// Bounds on the steps a job's final JobChanged carries for the accounting
// history (Job.steps): the event must stay below what the broker takes
// (1 MiB) with the job itself (at most half of it: the gateway's
// MaxCommandBytes) and its runs.
const (
	MaxHistorySteps     = 1000
	MaxHistoryStepBytes = 128 << 10
)

// historySteps are the job steps of j's runs, oldest run first, each by
// id, as the final JobChanged carries them: the steps the runs kept
// (MaxKeptEndedSteps) within MaxHistorySteps and MaxHistoryStepBytes, and
// how many were left out (those the runs dropped, and the newest past the
// bounds).
func historySteps(j *Job, run func(key string) *Run) ([]*loomv1.JobStep, int32) {
	var out []*loomv1.JobStep
	omitted, size, full := int32(0), 0, false
	for a := int32(1); a <= j.Attempt; a++ {
		r := run(RunKey(j.Name(), a))
		if r == nil {
			continue
		}
		omitted += r.StepsDropped
		for i := range r.JobSteps {
			p := jobStepProto(j, r, &r.JobSteps[i])
			n := proto.Size(p)
			if full = full || len(out) >= MaxHistorySteps || size+n > MaxHistoryStepBytes; full {
				omitted++
				continue
			}
			out = append(out, p)
			size += n
		}
	}
	return out, omitted
}

// slurmStepExit is an ended step's exit code and signal as Slurm 22.05 finds
// them (its signals known), but for one quirk. On each node, slurmstepd's
// _get_exit_code: the first task, by rank, that a signal killed, else the
// node's highest exit code. Over the nodes, slurmctld's _step_partial_comp:
// the highest wait(2) status, code<<8|signal. So a node's SIGKILL beats its
// other task's exit 3 (0:9), but another node's exit 3 beats it (3:0).
// The quirk not copied: Slurm's slurmstepd takes its MAX against a field
// still 0 and so keeps a node's LAST task's end, showing tasks that exited
// 5, 7, 0 as 0:0 (a real 22.05 and Slurm's master do): a step that failed
// would read as a success, so Loom shows 7:0 there.
func slurmStepExit(s *JobStep) (code, sig int32) {
	status := func(rank int) int32 {
		if s.ExitSignals[rank] > 0 {
			return s.ExitSignals[rank]
		}
		return s.ExitCodes[rank] << 8
	}
	best := -1
	for _, ranks := range s.Ranks() {
		node := -1
		// By local id, which is by rank (TaskRanks numbers each node's
		// tasks upwards), as Slurm's slurmstepd walks them.
		for _, r := range ranks {
			rank := int(r)
			if rank >= len(s.ExitCodes) {
				break
			}
			switch {
			case node >= 0 && s.ExitSignals[node] > 0: // the first signalled task stays
			case node < 0 || s.ExitSignals[rank] > 0 || s.ExitCodes[rank] > s.ExitCodes[node]:
				node = rank
			}
		}
		if node >= 0 && (best < 0 || status(node) > status(best)) {
			best = node
		}
	}
	if best < 0 {
		return 0, 0
	}
	return s.ExitCodes[best], s.ExitSignals[best]
}

// stepStatus is an ended step's end as a wait(2) status, as Slurm's
// DerivedExitCode compares them: the signal that killed it, else its exit
// code<<8 (slurmStepExit; for a step recorded without signals, its highest
// code, 128+n read as signal n, as sacct reads such a code). ok is false for
// a step that has not ended or was cancelled before it started (Slurm's
// accounting never sees it).
func stepStatus(s *JobStep) (status int32, ok bool) {
	if !s.Ended() || s.Start.IsZero() && s.State == loomv1.JobState_CANCELLED {
		return 0, false
	}
	var code, sig int32
	if len(s.ExitSignals) == len(s.ExitCodes) {
		code, sig = slurmStepExit(s)
	} else {
		for _, c := range s.ExitCodes {
			code = max(code, c)
		}
		if code > 128 && code < 128+65 {
			sig = code - 128
		}
	}
	if sig > 0 {
		return sig, true
	}
	return code << 8, true
}

// runDerivedExit is r's DerivedExit: as kept, or for a record from before
// it was kept, the highest stepStatus of the steps it keeps (0: none
// ended).
func runDerivedExit(r *Run) int32 {
	if r.DerivedExit != nil {
		return *r.DerivedExit
	}
	d := int32(0)
	for i := range r.JobSteps {
		if st, ok := stepStatus(&r.JobSteps[i]); ok {
			d = max(d, st)
		}
	}
	return d
}

func jobStepProto(j *Job, r *Run, s *JobStep) *loomv1.JobStep {
	out := &loomv1.JobStep{
		Name: resname.StepIn(j.Name(), s.ID), Job: j.Name(), StepId: s.ID, Attempt: r.Attempt,
		State: s.State, Command: append([]string(nil), s.Command...), Nodes: append([]string(nil), s.Hostnames...),
		TasksPerNode: append([]int32(nil), s.Tasks...), OutputDir: s.OutputDir, Reason: s.Reason,
		RequestId: s.RequestID, TaskExitCodes: append([]int32(nil), s.ExitCodes...), CpusPerNode: append([]int32(nil), s.CPUs...),
		Gpus: s.GPURequest, GpusPerTask: s.GPUsPerTask, CpusPerGpu: s.CPUsPerGPU, CpusPerTask: s.CPUsPerTask,
		CancelledBy: s.CancelledBy, GpuBindNone: s.GPUBindNone, Distribution: s.Distribution, GpusPerNode: s.GPUsPerNode,
		AllocationCpus: s.AllocationCPUs,
	}
	if len(s.ExitSignals) == len(s.ExitCodes) {
		out.TaskExitSignals = append([]int32(nil), s.ExitSignals...)
	}
	for _, c := range s.Tasks {
		out.NumTasks += c
	}
	if s.Ended() {
		if len(s.ExitSignals) == len(s.ExitCodes) {
			code, sig := slurmStepExit(s)
			out.ExitCode, out.ExitSignal = code, &sig
		} else {
			// Signals not said (a step from before): the highest code.
			for _, c := range s.ExitCodes {
				out.ExitCode = max(out.ExitCode, c)
			}
		}
		out.EndTime = timestamppb.New(s.End)
	}
	if !s.Start.IsZero() {
		out.StartTime = timestamppb.New(s.Start)
	}
	ranks := s.Ranks()
	for k, p := range s.Parts {
		out.NodeMessages = append(out.NodeMessages, p.Message)
		out.LaunchFailed = append(out.LaunchFailed, p.State == eventsv1.StepState_STEP_FAILED_TO_START)
		for l, u := range p.Usage {
			if k < len(ranks) && l < len(ranks[k]) {
				out.TaskUsage = append(out.TaskUsage, u.Proto(ranks[k][l], s.Hostnames[k]))
			}
		}
	}
	return out
}

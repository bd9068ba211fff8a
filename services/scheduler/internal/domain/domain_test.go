package domain

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

const cl = "projects/default/clusters/c1"

// harness drives a State the way the app does: Handle, then Commit, checking
// the invariants after every event.
type harness struct {
	t   *testing.T
	s   *State
	now time.Time
	// announced: nodes whose NodeDrained was seen in their current drain,
	// and which drain it was (drainKind).
	announced map[string]string
	// requeues and drains count the REQUEUED and NodeDrained events seen.
	requeues, drains int
}

// harnessWith is a harness over a new state of cfg, at 2025-01-01, with no
// cluster yet.
func harnessWith(t *testing.T, cfg Config) *harness {
	return &harness{t: t, s: NewState(cfg), now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), announced: map[string]string{}}
}

// newHarness is a harness with Loom's policy and one running cluster, cl.
func newHarness(t *testing.T) *harness {
	h := harnessWith(t, Config{Policy: DefaultPolicy()})
	h.do(&eventsv1.ClusterChanged{Cluster: &loomv1.Cluster{Name: cl, Status: &loomv1.ClusterStatus{
		State: loomv1.Cluster_RUNNING, SharedDir: "/shared/c1"}}})
	return h
}

func (h *harness) do(ev proto.Message) *Change {
	h.t.Helper()
	h.now = h.now.Add(time.Second)
	c, err := h.s.Handle(h.now, ev)
	if err != nil {
		h.t.Fatalf("handle %T: %v", ev, err)
	}
	h.commit(c)
	return c
}

// tick lets d pass and runs the clock.
func (h *harness) tick(d time.Duration) *Change {
	h.t.Helper()
	h.now = h.now.Add(d)
	c := h.s.Tick(h.now)
	h.commit(c)
	return c
}

// commit commits c and checks the invariants, and that c started steps only
// on nodes that may take work and announced each drained node once.
func (h *harness) commit(c *Change) {
	h.t.Helper()
	h.s.Commit(c)
	checkAllocIndex(h.t, h.s)
	checkInvariants(h.t, h.s)
	for _, ss := range starts(c) {
		if n := h.s.Node(ss.GetNode()); n == nil || !n.Usable() {
			h.t.Fatalf("StartStep on node %s that may not take work: %+v", ss.GetNode(), n)
		}
	}
	for _, jc := range jobChanges(c) {
		if jc.GetJob().GetState() == loomv1.JobState_REQUEUED {
			h.requeues++
		}
	}
	for _, e := range c.Emits {
		d, ok := e.Payload.(*eventsv1.NodeDrained)
		if !ok {
			continue
		}
		h.drains++
		if e.Key != d.GetCluster() || topicOf(e) != topics.JobEvents {
			h.t.Fatalf("NodeDrained on %s key %s", topicOf(e), e.Key)
		}
		kind := drainKind(h.s.Node(d.GetNode()))
		if h.announced[d.GetNode()] == kind {
			h.t.Fatalf("NodeDrained for %s twice in one drain", d.GetNode())
		}
		h.announced[d.GetNode()] = kind
	}
	for node, kind := range h.announced {
		if drainKind(h.s.Node(node)) != kind {
			delete(h.announced, node)
		}
	}
}

// drainKind says whose drain a node is in: the provisioner's (removal),
// health's (it took the node out), or none (""). Each is announced once.
func drainKind(n *Node) string {
	switch {
	case n == nil:
		return ""
	case n.Draining():
		return "provisioner"
	case n.HealthOut():
		return "health"
	}
	return ""
}

func nodeName(host string) string { return cl + "/nodes/" + host }

func (h *harness) node(host string, gpus int32) *Change {
	return h.do(&eventsv1.NodeChanged{Node: &loomv1.Node{Name: nodeName(host), Cluster: cl, Hostname: host, Gpus: gpus, State: loomv1.Node_READY}})
}

func jobName(id int) string { return "projects/default/jobs/" + strconv.Itoa(id) }

func (h *harness) submit(id int, nodes, gpus int32) *Change {
	return h.do(&eventsv1.SubmitJob{Job: &loomv1.Job{Name: jobName(id), JobId: strconv.Itoa(id), Cluster: cl,
		NodeCount: nodes, GpusPerNode: gpus, Command: []string{"/bin/train", "--x"}, SubmitTime: timestamppb.New(h.now)}})
}

// submitJob submits j as the gateway would (submit time now).
func (h *harness) submitJob(j *loomv1.Job) *Change {
	if j.SubmitTime == nil {
		j.SubmitTime = timestamppb.New(h.now)
	}
	return h.do(&eventsv1.SubmitJob{Job: j})
}

// noRequeue submits a --no-requeue command job.
func (h *harness) noRequeue(id int, nodes, gpus int32) *Change {
	return h.submitJob(&loomv1.Job{Name: jobName(id), JobId: strconv.Itoa(id), Cluster: cl, NodeCount: nodes,
		GpusPerNode: gpus, Command: []string{"/bin/train"}, Requeue: proto.Bool(false)})
}

func (h *harness) step(id int, attempt int32, host string, st eventsv1.StepState, code int32) *Change {
	return h.do(&eventsv1.StepChanged{Job: jobName(id), Attempt: attempt, Node: nodeName(host), State: st, ExitCode: code, Cluster: cl})
}

// reportRunning reports the steps of the job's current run running on
// every node that runs one (a batch job: its batch host), as the agents do
// once the prolog checks passed and the process started: what the job's
// srun steps wait for (ReasonStepProlog).
func (h *harness) reportRunning(id int) {
	h.t.Helper()
	j := h.s.JobRecord(jobName(id))
	r := h.s.Run(jobName(id), j.Attempt)
	if r == nil {
		h.t.Fatalf("job %d has no run", id)
	}
	for k, host := range r.Hostnames {
		if !r.Steps[r.Nodes[k]].Idle {
			h.step(id, j.Attempt, host, eventsv1.StepState_STEP_RUNNING, 0)
		}
	}
}

// finish reports every step of the job's current run exited with code.
func (h *harness) finish(id int, code int32) {
	j := h.s.JobRecord(jobName(id))
	r := h.s.Run(jobName(id), j.Attempt)
	for _, host := range r.Hostnames {
		h.step(id, j.Attempt, host, eventsv1.StepState_STEP_EXITED, code)
	}
}

func (h *harness) job(id int) *loomv1.Job {
	h.t.Helper()
	j := h.s.Job(jobName(id))
	if j == nil {
		h.t.Fatalf("job %d unknown", id)
	}
	return j
}

// wantState checks the job's state and reason, as the job's course goes:
// RUNNING accepts CONFIGURING (a job an earlier scheduler stored so until
// its steps reported running), and a final state accepts COMPLETING on its way there (the
// attempt ended in state with reason; steps still ending). wantExact does not.
func (h *harness) wantState(id int, state loomv1.JobState, reason string) {
	h.t.Helper()
	j := h.job(id)
	got := j.GetState()
	switch {
	case state == loomv1.JobState_RUNNING && got == loomv1.JobState_CONFIGURING:
		got = state
	case state.Terminal() && got == loomv1.JobState_COMPLETING:
		if r := h.s.Run(jobName(id), h.s.JobRecord(jobName(id)).Attempt); r != nil && r.Outcome == state && !r.Released {
			got = state
		}
	}
	if got != state || j.GetStateReason() != reason {
		h.t.Fatalf("job %d: got %v %q, want %v %q", id, j.GetState(), j.GetStateReason(), state, reason)
	}
}

// wantExact checks the job's state and reason exactly.
func (h *harness) wantExact(id int, state loomv1.JobState, reason string) {
	h.t.Helper()
	j := h.job(id)
	if j.GetState() != state || j.GetStateReason() != reason {
		h.t.Fatalf("job %d: got %v %q, want %v %q", id, j.GetState(), j.GetStateReason(), state, reason)
	}
}

// checkInvariants fails when a GPU is held twice, a running job has no
// active run, a pending job has no reason, or a job's run started while its
// previous run still ran (before RequeueStopWait had passed).
func checkInvariants(t *testing.T, s *State) {
	t.Helper()
	for _, r := range s.runs {
		prev := s.runs[RunKey(r.Job, r.Attempt-1)]
		if r.Attempt > 1 && prev != nil && !prev.Released && r.Start.Before(prev.End.Add(s.cfg.RequeueStopWait)) {
			t.Fatalf("run %s started at %v while run %s (ended %v) still held its nodes", r.Key(), r.Start, prev.Key(), prev.End)
		}
		// Fencing: no later attempt runs while a failed node's step of an
		// earlier one may still run.
		if r.Attempt > 1 && prev != nil && !prev.Released {
			for node, st := range prev.Steps {
				if st.Fenced() {
					t.Fatalf("run %s started while run %s is fenced on %s until %v", r.Key(), prev.Key(), node, st.FenceUntil)
				}
			}
		}
	}
	held := map[string]string{}
	for _, r := range s.ActiveRuns() {
		for _, node := range r.Nodes {
			if !r.Holds(node) {
				continue
			}
			for _, g := range r.GPUs[node] {
				k := fmt.Sprintf("%s#%d", node, g)
				if other, ok := held[k]; ok {
					t.Fatalf("GPU %s held by %s and %s", k, other, r.Key())
				}
				held[k] = r.Key()
			}
			held[node] = r.Key()
		}
	}
	// A DRAINING node that holds nothing has been announced as drained.
	for name, n := range s.nodes {
		if n.Draining() && !n.Drained && held[name] == "" {
			t.Fatalf("draining node %s holds nothing but was not announced", name)
		}
		if n.Drained && (!n.Draining() || held[name] != "") {
			t.Fatalf("node %s marked drained while %v and held by %q", name, n.State, held[name])
		}
	}
	for name, rec := range s.jobs {
		j := rec.Job
		switch j.GetState() {
		case loomv1.JobState_RUNNING, loomv1.JobState_CONFIGURING:
			if r := s.Run(name, rec.Attempt); r == nil || r.Released || r.Ended() {
				t.Fatalf("%v job %s has no active run", j.GetState(), name)
			}
		case loomv1.JobState_COMPLETING:
			// An ended attempt whose steps are still ending.
			if r := s.Run(name, rec.Attempt); r == nil || runDone(r) || !r.Ended() || !r.Outcome.Terminal() {
				t.Fatalf("completing job %s: run %+v", name, r)
			}
		case loomv1.JobState_PENDING:
			if ci := s.byCluster[j.GetCluster()]; ci == nil || ci.pending[ci.pendPos[name]].j != rec {
				t.Fatalf("pending job %s missing from the queue index", name)
			}
			switch j.GetStateReason() {
			case ReasonPriority, ReasonResources, ReasonReqNodeNotAvail, ReasonDependency, ReasonDependencyNeverSatisfied,
				ReasonHeldUser, ReasonHeldAdmin, ReasonPartitionTimeLimit, ReasonPartitionConfig, ReasonPartitionNodeLimit, ReasonPartitionDown, ReasonPartitionInactive,
				ReasonBadConstraints, ReasonBeginTime, ReasonQOSMaxGRESPerUser, ReasonJobArrayTaskLimit, ReasonAssocMaxJobsLimit,
				ReasonAssocGrpCpuLimit, ReasonAssocGrpMemLimit, ReasonAssocGrpNodeLimit, ReasonAssocGrpGRES,
				ReasonAssocMaxCpuPerJobLimit, ReasonAssocMaxMemPerJob, ReasonAssocMaxNodePerJobLimit, ReasonAssocMaxGRESPerJob,
				ReasonAssocMaxWallDurationPerJobLimit:
			case ReasonRequeued:
				// Only while its previous run is still being stopped.
				if r := s.Run(name, rec.Attempt); r == nil || r.Released {
					t.Fatalf("pending job %s waits as Requeued for no stopping run (%+v)", name, r)
				}
			default:
				t.Fatalf("pending job %s has reason %q", name, j.GetStateReason())
			}
		}
	}
}

// starts returns the StartSteps of c, and stops its StopSteps.
func starts(c *Change) []*eventsv1.StartStep {
	var out []*eventsv1.StartStep
	for _, e := range c.Emits {
		if s, ok := e.Payload.(*eventsv1.StartStep); ok {
			out = append(out, s)
		}
	}
	return out
}

func stops(c *Change) []*eventsv1.StopStep {
	var out []*eventsv1.StopStep
	for _, e := range c.Emits {
		if s, ok := e.Payload.(*eventsv1.StopStep); ok {
			out = append(out, s)
		}
	}
	return out
}

func jobChanges(c *Change) []*eventsv1.JobChanged {
	var out []*eventsv1.JobChanged
	for _, e := range c.Emits {
		if s, ok := e.Message().(*eventsv1.JobChanged); ok {
			out = append(out, s)
		}
	}
	return out
}

func TestSubmitRunsAndCompletes(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("gpu-0001", 8)
	h.node("gpu-0002", 8)
	c := h.submit(1, 2, 4)
	jc := jobChanges(c)
	// Submitted and started by one change: one JobChanged, as it leaves the job.
	if len(jc) != 1 || jc[0].GetJob().GetState() != loomv1.JobState_RUNNING {
		t.Fatalf("want one JobChanged RUNNING, got %v", jc)
	}
	if jc[0].GetAttempt() != 1 {
		t.Fatalf("attempt %d, want 1", jc[0].GetAttempt())
	}
	ss := starts(c)
	if len(ss) != 2 {
		t.Fatalf("want 2 StartStep, got %d", len(ss))
	}
	for i, s := range ss {
		if s.GetNodeIndex() != int32(i) || s.GetNode() != nodeName(fmt.Sprintf("gpu-%04d", i+1)) || s.GetAttempt() != 1 {
			t.Fatalf("StartStep %d: %v", i, s)
		}
	}
	j := h.job(1)
	if j.GetOutputPath() != "/shared/c1/slurm-1.out" || !reflect.DeepEqual(j.GetNodes(), []string{"gpu-0001", "gpu-0002"}) {
		t.Fatalf("job placed wrong: %v", j)
	}
	h.step(1, 1, "gpu-0001", eventsv1.StepState_STEP_RUNNING, 0)
	h.step(1, 1, "gpu-0001", eventsv1.StepState_STEP_EXITED, 0)
	h.wantState(1, loomv1.JobState_RUNNING, "")
	c = h.step(1, 1, "gpu-0002", eventsv1.StepState_STEP_EXITED, 0)
	h.wantState(1, loomv1.JobState_COMPLETED, "")
	if len(jobChanges(c)) != 1 || len(stops(c)) != 0 {
		t.Fatalf("completion: want one JobChanged and no StopStep, got %v", c.Emits)
	}
	if len(h.s.ActiveRuns()) != 0 {
		t.Fatal("allocation not freed after every step ended")
	}
}

func TestStepEnv(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("gpu-0001", 8)
	h.node("gpu-0002", 8)
	h.submit(1, 1, 2) // takes GPUs 0,1 of gpu-0001
	// A batch script runs once, on the batch host (its first node).
	c := h.do(&eventsv1.SubmitJob{Job: &loomv1.Job{Name: jobName(7), JobId: "7", Cluster: cl, DisplayName: "train",
		NodeCount: 2, GpusPerNode: 3, Script: "echo hi", Env: map[string]string{"FOO": "bar", "SLURM_JOB_ID": "forged"},
		ModelOutput: &loomv1.ModelOutput{ModelId: "tiny"}, User: "ada", SubmitDir: "/home/ada/exp", SubmitHost: "login-1", WorkDir: "run",
		NtasksPerNode: 2, CpusPerTask: 4, OutputPattern: "%x-%j-%N.out", ErrorPattern: "/logs/%u/%5j.err"}})
	ss := starts(c)
	if len(ss) != 1 {
		t.Fatalf("want 1 StartStep (the batch host), got %v", c.Emits)
	}
	want := map[string]string{
		"FOO": "bar", "SLURM_JOB_ID": "7", "SLURM_JOBID": "7", "SLURM_JOB_NAME": "train", "SLURM_JOB_NODELIST": "gpu-[0001-0002]",
		"SLURM_NODELIST": "gpu-[0001-0002]", "SLURM_NNODES": "2", "SLURM_JOB_NUM_NODES": "2", "SLURM_NODEID": "0",
		"SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NTASKS": "4", "SLURM_NPROCS": "4", "SLURM_TASKS_PER_NODE": "2(x2)",
		"SLURM_CPUS_PER_TASK": "4", "SLURM_JOB_CPUS_PER_NODE": "8(x2)", "SLURM_CPUS_ON_NODE": "8", "SLURM_GTIDS": "0", "ENVIRONMENT": "BATCH", "SLURM_GPUS_ON_NODE": "3", "CUDA_VISIBLE_DEVICES": "2,3,4",
		"SLURM_JOB_GPUS": "2,3,4", "GPU_DEVICE_ORDINAL": "2,3,4", "SLURM_GPUS_PER_NODE": "3",
		"SLURM_SUBMIT_DIR": "/home/ada/exp", "SLURM_JOB_PARTITION": "all", "SLURM_JOB_USER": "ada", "SLURM_JOB_QOS": "normal",
		"SLURMD_NODENAME": "gpu-0001", "SLURM_TOPOLOGY_ADDR": "gpu-0001", "SLURM_CLUSTER_NAME": "c1",
		"SLURM_TOPOLOGY_ADDR_PATTERN": "node", "SLURM_SUBMIT_HOST": "login-1", "SLURM_NTASKS_PER_NODE": "2",
		"LOOM_JOB_ID": "7", "LOOM_JOB_NAME": jobName(7), "LOOM_NODE_RANK": "0", "LOOM_NUM_NODES": "2",
		"MASTER_ADDR": "gpu-0001", "MASTER_PORT": "20007", "LOOM_MODEL_DIR": "/shared/c1/models/tiny/job-7",
		// Resuming: the attempt, the requeues so far and the checkpoint
		// directory (by default under the cluster's shared dir, per job).
		"LOOM_RESTART_COUNT": "0", "LOOM_JOB_ATTEMPT": "1",
		"LOOM_CHECKPOINT_DIR": "/shared/c1/checkpoints/7", "AIP_CHECKPOINT_DIR": "/shared/c1/checkpoints/7",
	}
	if got := ss[0].GetEnv(); !reflect.DeepEqual(got, want) {
		t.Fatalf("env of the batch step:\n got %v\nwant %v", got, want)
	}
	s := ss[0]
	if s.GetScript() != "echo hi" || s.GetWorkDir() != "/home/ada/exp/run" || s.GetOutputPath() != "/home/ada/exp/run/train-7-gpu-0001.out" ||
		s.GetGpus() != 3 || s.GetJobName() != "train" || s.GetJobId() != "7" || s.GetNodeIndex() != 0 ||
		!reflect.DeepEqual(s.GetNodeHostnames(), []string{"gpu-0001", "gpu-0002"}) || s.GetAppendOutput() {
		t.Fatalf("StartStep fields: %v (a batch step empties its output by default)", s)
	}
	if s.GetUser() != "ada" {
		t.Fatalf("StartStep.user = %q, want the job's owner ada (the agent runs the step as its owner)", s.GetUser())
	}
	j := h.job(7)
	if j.GetErrorPath() != "/logs/ada/00007.err" || j.GetBatchHost() != "gpu-0001" || j.GetAllocGpus() != 6 {
		t.Fatalf("job 7: error path %q, batch host %q, %d GPUs", j.GetErrorPath(), j.GetBatchHost(), j.GetAllocGpus())
	}
	jc := jobChanges(c)
	if last := jc[len(jc)-1]; last.GetModelDir() != "/shared/c1/models/tiny/job-7" {
		t.Fatalf("JobChanged.model_dir %q", last.GetModelDir())
	}
	// The batch step ends the job; the other node held no process.
	h.step(7, 1, "gpu-0001", eventsv1.StepState_STEP_EXITED, 0)
	h.wantState(7, loomv1.JobState_COMPLETED, "")
	if r := h.s.Run(jobName(7), 1); !r.Released {
		t.Fatal("batch job's allocation not freed when its batch step ended")
	}

	// A command runs once per node, one task each, as an implicit srun.
	c = h.do(&eventsv1.SubmitJob{Job: &loomv1.Job{Name: jobName(8), JobId: "8", Cluster: cl, NodeCount: 2,
		GpusPerNode: 1, Command: []string{"/bin/train"}}})
	ss = starts(c)
	if len(ss) != 2 {
		t.Fatalf("want 2 StartStep, got %d", len(ss))
	}
	env := ss[1].GetEnv()
	if env["SLURM_PROCID"] != "1" || env["SLURM_NODEID"] != "1" || env["SLURM_NTASKS"] != "2" || env["SLURM_TASKS_PER_NODE"] != "1(x2)" ||
		env["SLURM_SUBMIT_DIR"] != "/shared/c1" || ss[1].GetOutputPath() != "/shared/c1/slurm-8.out" ||
		env["SLURM_GTIDS"] != "1" || env["ENVIRONMENT"] != "" {
		t.Fatalf("rank 1 of a command job: %v %q", env, ss[1].GetOutputPath())
	}
	if !ss[0].GetAppendOutput() || !ss[1].GetAppendOutput() {
		t.Fatal("a command job's steps share its output file: none may empty it")
	}
	// A job's own checkpoint_dir: relative to the shared dir, or absolute.
	for dir, want := range map[string]string{"ck/run1": "/shared/c1/ck/run1", "/data/ck/": "/data/ck"} {
		if got := CheckpointDir(&loomv1.Job{JobId: "3", CheckpointDir: dir}, "/shared/c1"); got != want {
			t.Fatalf("checkpoint_dir %q → %q, want %q", dir, got, want)
		}
	}
	// --open-mode=append keeps a batch step's output.
	c = h.do(&eventsv1.SubmitJob{Job: &loomv1.Job{Name: jobName(9), JobId: "9", Cluster: cl, Script: "echo hi", OpenMode: "append"}})
	if ss = starts(c); len(ss) != 1 || !ss[0].GetAppendOutput() {
		t.Fatalf("--open-mode=append: %v", ss)
	}
}

func TestFCFSOrder(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("gpu-0001", 8)
	h.submit(1, 1, 8)
	// Job 3 reaches the scheduler before job 2: the queue still serves 2 first.
	h.submit(3, 1, 4)
	h.submit(2, 1, 4)
	h.wantState(2, loomv1.JobState_PENDING, ReasonResources)
	h.wantState(3, loomv1.JobState_PENDING, ReasonPriority)
	h.submit(4, 1, 4)
	h.wantState(4, loomv1.JobState_PENDING, ReasonPriority)

	j := h.s.JobRecord(jobName(1))
	h.step(1, j.Attempt, "gpu-0001", eventsv1.StepState_STEP_EXITED, 0)
	h.wantState(2, loomv1.JobState_RUNNING, "")
	h.wantState(3, loomv1.JobState_RUNNING, "")
	h.wantState(4, loomv1.JobState_PENDING, ReasonResources)
	if h.job(2).GetStartTime().AsTime().After(h.job(3).GetStartTime().AsTime()) {
		t.Fatal("job 3 started before job 2")
	}
}

func TestHeadOfLineBlocks(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("gpu-0001", 8)
	h.submit(1, 1, 6)
	h.submit(2, 1, 4) // does not fit: 2 free
	c := h.submit(3, 1, 1)
	if len(starts(c)) != 0 {
		t.Fatal("a job behind a blocked head started")
	}
	h.wantState(2, loomv1.JobState_PENDING, ReasonResources)
	h.wantState(3, loomv1.JobState_PENDING, ReasonPriority)
	// Only one JobChanged for the new job: its reason is refined in place.
	if jc := jobChanges(c); len(jc) != 1 || jc[0].GetJob().GetStateReason() != ReasonPriority {
		t.Fatalf("want one JobChanged PENDING/Priority, got %v", jc)
	}
}

func TestGangAllOrNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("gpu-0001", 8)
	h.node("gpu-0002", 8)
	h.node("gpu-0003", 8)
	h.submit(1, 1, 6) // lands on gpu-0001
	c := h.submit(2, 3, 4)
	if len(starts(c)) != 0 {
		t.Fatalf("gang of 3 started on fewer nodes: %v", starts(c))
	}
	h.wantState(2, loomv1.JobState_PENDING, ReasonResources)
	var d *Decision
	for i := range c.Decisions {
		if c.Decisions[i].Job == jobName(2) {
			d = &c.Decisions[i]
		}
	}
	if d == nil || d.Filtered["InsufficientGPUs"] != 1 {
		t.Fatalf("want 1 node filtered for InsufficientGPUs, got %+v", d)
	}
	for _, r := range h.s.ActiveRuns() {
		if r.Job == jobName(2) {
			t.Fatal("gang holds a partial allocation")
		}
	}
	h.finish(1, 0)
	h.wantState(2, loomv1.JobState_RUNNING, "")
	if n := len(h.job(2).GetNodes()); n != 3 {
		t.Fatalf("gang got %d nodes, want 3", n)
	}
}

func TestZeroGPUJobsShareNodes(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("cpu-0001", 0)
	h.submit(1, 1, 0)
	h.submit(2, 1, 0)
	h.wantState(1, loomv1.JobState_RUNNING, "")
	h.wantState(2, loomv1.JobState_RUNNING, "")
	// No node of the partition has a GPU: the job can never run as it is.
	c := h.submit(3, 1, 1)
	h.wantState(3, loomv1.JobState_PENDING, ReasonBadConstraints)
	if d := decision(c, 3); d == nil || d.Filtered["NodeTooSmall"] != 1 {
		t.Fatalf("want cpu-0001 filtered as NodeTooSmall, got %+v", d)
	}
}

func TestReqNodeNotAvail(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.submit(1, 1, 1)
	h.submit(2, 1, 1)
	h.wantState(1, loomv1.JobState_PENDING, ReasonReqNodeNotAvail)
	h.wantState(2, loomv1.JobState_PENDING, ReasonReqNodeNotAvail)
	h.do(&eventsv1.NodeChanged{Node: &loomv1.Node{Name: nodeName("gpu-0001"), Hostname: "gpu-0001", Cluster: cl, Gpus: 1, State: loomv1.Node_PROVISIONING}})
	h.wantState(1, loomv1.JobState_PENDING, ReasonReqNodeNotAvail)
	h.node("gpu-0001", 1)
	h.wantState(1, loomv1.JobState_RUNNING, "")
	h.wantState(2, loomv1.JobState_PENDING, ReasonResources)
}

func TestCancel(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("gpu-0001", 4)
	h.node("gpu-0002", 4)
	h.submit(1, 2, 4)
	h.submit(2, 1, 4)
	h.submit(3, 2, 4)

	c := h.do(&eventsv1.CancelJob{Job: jobName(3), Cluster: cl})
	h.wantState(3, loomv1.JobState_CANCELLED, "")
	if len(stops(c)) != 0 {
		t.Fatal("cancel of a pending job sent StopStep")
	}

	h.step(1, 1, "gpu-0001", eventsv1.StepState_STEP_RUNNING, 0)
	c = h.do(&eventsv1.CancelJob{Job: jobName(1), Cluster: cl})
	h.wantState(1, loomv1.JobState_CANCELLED, "")
	if st := stops(c); len(st) != 2 || st[0].GetNode() != nodeName("gpu-0001") || st[1].GetNode() != nodeName("gpu-0002") {
		t.Fatalf("want StopStep to both nodes, got %v", st)
	}
	// The allocation is held until the steps end.
	h.wantState(2, loomv1.JobState_PENDING, ReasonResources)
	h.step(1, 1, "gpu-0001", eventsv1.StepState_STEP_KILLED, 143)
	h.wantState(2, loomv1.JobState_PENDING, ReasonResources) // gpu-0002's step still runs
	h.step(1, 1, "gpu-0002", eventsv1.StepState_STEP_KILLED, 143)
	h.wantState(2, loomv1.JobState_RUNNING, "")
	h.wantState(1, loomv1.JobState_CANCELLED, "")

	// Cancelling a terminal job changes nothing.
	if c := h.do(&eventsv1.CancelJob{Job: jobName(1), Cluster: cl}); !c.Empty() {
		t.Fatalf("cancel of a terminal job changed %v", c)
	}
}

func TestFailureStopsOthersAndHoldsAllocation(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("gpu-0001", 8)
	h.node("gpu-0002", 8)
	h.submit(1, 2, 8)
	h.submit(2, 1, 8)
	c := h.step(1, 1, "gpu-0002", eventsv1.StepState_STEP_EXITED, 3)
	h.wantState(1, loomv1.JobState_FAILED, "NonZeroExitCode")
	if h.job(1).GetExitCode() != 3 {
		t.Fatalf("exit code %d, want 3", h.job(1).GetExitCode())
	}
	if st := stops(c); len(st) != 1 || st[0].GetNode() != nodeName("gpu-0001") {
		t.Fatalf("want StopStep to gpu-0001 only, got %v", st)
	}
	// gpu-0002's step ended, but the run holds both nodes until gpu-0001's does.
	h.wantState(2, loomv1.JobState_PENDING, ReasonResources)
	h.step(1, 1, "gpu-0001", eventsv1.StepState_STEP_KILLED, 143)
	h.wantState(2, loomv1.JobState_RUNNING, "")
	h.wantState(1, loomv1.JobState_FAILED, "NonZeroExitCode")
}

func TestFailedToStartAndLost(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("gpu-0001", 1)
	h.submit(1, 1, 1)
	h.do(&eventsv1.StepChanged{Job: jobName(1), Attempt: 1, Node: nodeName("gpu-0001"), State: eventsv1.StepState_STEP_FAILED_TO_START, Message: "exec: no such file"})
	h.wantState(1, loomv1.JobState_FAILED, "JobLaunchFailure on gpu-0001: exec: no such file")
	h.submit(2, 1, 1)
	h.step(2, 1, "gpu-0001", eventsv1.StepState_STEP_RUNNING, 0)
	// A lost step (its end went unseen) is the infrastructure's failure,
	// as a node's: the job is requeued, within its infrastructure budget.
	h.step(2, 1, "gpu-0001", eventsv1.StepState_STEP_LOST, 0)
	if j := h.job(2); j.GetState() != loomv1.JobState_RUNNING || j.GetRestartCount() != 1 || h.s.Run(jobName(2), 2) == nil {
		t.Fatalf("job 2 after its step was lost: %v %q restarts %d; want requeued and started again", j.GetState(), j.GetStateReason(), j.GetRestartCount())
	}
	if r := h.s.Run(jobName(2), 1); r.Outcome != loomv1.JobState_NODE_FAIL || r.Reason != "step lost on gpu-0001" {
		t.Fatalf("run 1 of job 2: %v %q", r.Outcome, r.Reason)
	}
	h.noRequeue(3, 1, 1)
	h.finish(2, 0)
	h.step(3, 1, "gpu-0001", eventsv1.StepState_STEP_LOST, 0)
	h.wantState(3, loomv1.JobState_NODE_FAIL, "step lost on gpu-0001")
}

func TestNodeFail(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("gpu-0001", 8)
	h.node("gpu-0002", 8)
	h.noRequeue(1, 2, 8)
	h.submit(2, 1, 8)
	c := h.do(&eventsv1.NodeHealthChanged{Node: nodeName("gpu-0001"), Cluster: cl, Health: eventsv1.NodeHealth_UNHEALTHY, Reason: "no heartbeat for 15s"})
	h.wantState(1, loomv1.JobState_NODE_FAIL, "node gpu-0001 down: no heartbeat for 15s")
	// Both nodes are told to stop: the failed one too, whose processes may
	// live on (fencing); it stays held until it answers, is repaired or the
	// fence times out.
	if st := stops(c); len(st) != 2 || st[0].GetNode() != nodeName("gpu-0002") || st[1].GetNode() != nodeName("gpu-0001") {
		t.Fatalf("want StopStep to gpu-0002 and the failed gpu-0001, got %v", st)
	}
	r := h.s.Run(jobName(1), 1)
	if !r.Holds(nodeName("gpu-0001")) || !r.Steps[nodeName("gpu-0001")].Fenced() || !r.Holds(nodeName("gpu-0002")) {
		t.Fatal("want the down node fenced (held) and the other held")
	}
	// The down node takes no work even with its GPUs free.
	h.wantState(2, loomv1.JobState_PENDING, ReasonResources)
	h.step(1, 1, "gpu-0002", eventsv1.StepState_STEP_KILLED, 143)
	// The run holds its allocation until its last step (the fenced one) ends.
	h.wantState(2, loomv1.JobState_PENDING, ReasonResources)
	// The failed node's late report ends its fence and frees the run's
	// nodes; a second one changes nothing.
	h.step(1, 1, "gpu-0001", eventsv1.StepState_STEP_LOST, 0)
	if r := h.s.Run(jobName(1), 1); !r.Released {
		t.Fatalf("run still holds its nodes after the fenced step's end: %+v", r.Steps)
	}
	h.wantState(2, loomv1.JobState_RUNNING, "")
	if got := h.job(2).GetNodes(); !reflect.DeepEqual(got, []string{"gpu-0002"}) {
		t.Fatalf("job 2 on %v, want gpu-0002", got)
	}
	if c := h.step(1, 1, "gpu-0001", eventsv1.StepState_STEP_LOST, 0); !c.Empty() {
		t.Fatalf("late step report changed %v", c.Emits)
	}
	h.submit(3, 1, 8)
	h.wantState(3, loomv1.JobState_PENDING, ReasonResources)
	h.do(&eventsv1.NodeHealthChanged{Node: nodeName("gpu-0001"), Cluster: cl, Health: eventsv1.NodeHealth_HEALTHY})
	h.wantState(3, loomv1.JobState_RUNNING, "")
	if got := h.job(3).GetNodes(); !reflect.DeepEqual(got, []string{"gpu-0001"}) {
		t.Fatalf("job 3 on %v, want gpu-0001", got)
	}
}

func TestNodeDownAndRemoved(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("gpu-0001", 1)
	h.node("gpu-0002", 1)
	h.noRequeue(1, 1, 1)
	h.noRequeue(2, 1, 1)
	h.do(&eventsv1.NodeChanged{Node: &loomv1.Node{Name: nodeName("gpu-0001"), Cluster: cl, Hostname: "gpu-0001", Gpus: 1, State: loomv1.Node_DOWN, Reason: "agent exited"}})
	h.wantState(1, loomv1.JobState_NODE_FAIL, "node gpu-0001 down: agent exited")
	h.do(&eventsv1.NodeRemoved{Node: nodeName("gpu-0002"), Cluster: cl})
	h.wantState(2, loomv1.JobState_NODE_FAIL, "node gpu-0002 down: removed")
	h.submit(3, 1, 1)
	h.wantState(3, loomv1.JobState_PENDING, ReasonReqNodeNotAvail)
}

func TestClusterDeleted(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("gpu-0001", 1)
	h.submit(1, 1, 1)
	h.submit(2, 1, 1)
	h.do(&eventsv1.ClusterChanged{Cluster: &loomv1.Cluster{Name: cl, Status: &loomv1.ClusterStatus{State: loomv1.Cluster_DELETING}}})
	h.do(&eventsv1.NodeRemoved{Node: nodeName("gpu-0001"), Cluster: cl})
	h.wantState(1, loomv1.JobState_CANCELLED, ReasonClusterDeleted)
	h.wantState(2, loomv1.JobState_PENDING, ReasonReqNodeNotAvail)
	h.do(&eventsv1.ClusterDeleted{Cluster: cl})
	h.wantState(2, loomv1.JobState_CANCELLED, ReasonClusterDeleted)
	h.submit(3, 1, 1)
	h.wantState(3, loomv1.JobState_CANCELLED, ReasonClusterDeleted)
	if len(h.s.ActiveRuns()) != 0 {
		t.Fatal("a deleted cluster's run still holds an allocation")
	}
}

// TestClusterDeletedNodesFirst: the nodes of a cluster being deleted
// (DELETING) may reach the scheduler before the cluster's own change (two
// topics): the running job is requeued, not excluded from its nodes, so it
// waits instead of ending NODE_FAIL as unplaceable, and ends CANCELLED
// when the cluster's deletion arrives.
func TestClusterDeletedNodesFirst(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("gpu-0001", 1)
	h.submit(1, 1, 1)
	h.wantState(1, loomv1.JobState_RUNNING, "")
	h.do(&eventsv1.NodeChanged{Node: &loomv1.Node{Name: nodeName("gpu-0001"), Cluster: cl, Hostname: "gpu-0001", Gpus: 1,
		State: loomv1.Node_DELETING, Reason: "cluster is being deleted"}})
	h.tick(time.Minute)
	if j := h.job(1); j.GetState() != loomv1.JobState_PENDING || len(h.s.JobRecord(jobName(1)).Excluded) != 0 {
		t.Fatalf("job 1 after its node went DELETING: %v %q, excluded %v; want PENDING, nothing excluded",
			j.GetState(), j.GetStateReason(), h.s.JobRecord(jobName(1)).Excluded)
	}
	h.do(&eventsv1.ClusterChanged{Cluster: &loomv1.Cluster{Name: cl, Status: &loomv1.ClusterStatus{State: loomv1.Cluster_DELETING}}})
	h.do(&eventsv1.NodeRemoved{Node: nodeName("gpu-0001"), Cluster: cl})
	h.do(&eventsv1.ClusterDeleted{Cluster: cl})
	h.wantState(1, loomv1.JobState_CANCELLED, ReasonClusterDeleted)
}

// TestStepKilledByItsNodeStopping: a step the agent killed as it stopped
// itself (node_stopping) ends the run as the node's failure: the job is
// requeued, not FAILED, its other node told to stop, nothing excluded; the
// same report while the cluster is being deleted cancels the job; a step
// killed otherwise (no node_stopping) is still the job's failure.
func TestStepKilledByItsNodeStopping(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("gpu-0001", 1)
	h.node("gpu-0002", 1)
	h.submit(1, 2, 1)
	h.wantState(1, loomv1.JobState_RUNNING, "")
	c := h.do(&eventsv1.StepChanged{Job: jobName(1), Attempt: 1, Node: nodeName("gpu-0001"), State: eventsv1.StepState_STEP_KILLED,
		ExitCode: 143, Message: "killed: agent shutting down", Cluster: cl, NodeStopping: true})
	j := h.job(1)
	if j.GetState() != loomv1.JobState_PENDING || j.GetRestartCount() != 1 || len(h.s.JobRecord(jobName(1)).Excluded) != 0 {
		t.Fatalf("job 1: %v %q restarts %d excluded %v; want requeued, nothing excluded", j.GetState(), j.GetStateReason(),
			j.GetRestartCount(), h.s.JobRecord(jobName(1)).Excluded)
	}
	if r := h.s.Run(jobName(1), 1); r.Outcome != loomv1.JobState_NODE_FAIL || !strings.Contains(r.Reason, "node gpu-0001 stopped: killed: agent shutting down") {
		t.Fatalf("run 1: %v %q", r.Outcome, r.Reason)
	}
	if st := stops(c); len(st) != 1 || st[0].GetNode() != nodeName("gpu-0002") {
		t.Fatalf("stops %v, want gpu-0002's", st)
	}

	// Attempt 2 runs; the cluster is being deleted when its node stops.
	h.step(1, 1, "gpu-0002", eventsv1.StepState_STEP_KILLED, 143)
	h.wantState(1, loomv1.JobState_RUNNING, "")
	h.do(&eventsv1.ClusterChanged{Cluster: &loomv1.Cluster{Name: cl, Status: &loomv1.ClusterStatus{State: loomv1.Cluster_DELETING}}})
	h.do(&eventsv1.StepChanged{Job: jobName(1), Attempt: 2, Node: nodeName("gpu-0002"), State: eventsv1.StepState_STEP_KILLED,
		ExitCode: 143, Message: "killed: agent shutting down", Cluster: cl, NodeStopping: true})
	h.wantState(1, loomv1.JobState_CANCELLED, ReasonClusterDeleted)

	h2 := newHarness(t)
	h2.node("gpu-0001", 1)
	h2.submit(1, 1, 1)
	h2.step(1, 1, "gpu-0001", eventsv1.StepState_STEP_KILLED, 137)
	if j := h2.job(1); j.GetState() != loomv1.JobState_FAILED {
		t.Fatalf("a step killed by something else: %v %q, want FAILED", j.GetState(), j.GetStateReason())
	}
}

func TestClusterDeletedCancelsRunning(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("gpu-0001", 1)
	h.submit(1, 1, 1)
	h.do(&eventsv1.ClusterDeleted{Cluster: cl})
	h.wantState(1, loomv1.JobState_CANCELLED, ReasonClusterDeleted)
	if len(h.s.ActiveRuns()) != 0 || h.s.Node(nodeName("gpu-0001")) != nil {
		t.Fatal("deleted cluster's nodes or allocations remain")
	}
}

func TestHandleDoesNotTouchStateBeforeCommit(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("gpu-0001", 8)
	h.submit(1, 1, 8)
	before := h.job(1)
	c, err := h.s.Handle(h.now, &eventsv1.CancelJob{Job: jobName(1), Cluster: cl})
	if err != nil || len(c.Emits) == 0 {
		t.Fatalf("cancel: %v %v", c, err)
	}
	if _, err := h.s.Handle(h.now, &eventsv1.SubmitJob{Job: &loomv1.Job{Name: jobName(2), JobId: "2", Cluster: cl, GpusPerNode: 1}}); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(before, h.job(1)) || h.s.Job(jobName(2)) != nil || h.s.Run(jobName(1), 1).Steps[nodeName("gpu-0001")].Terminal() {
		t.Fatal("Handle changed the state without Commit")
	}
}

func TestRedeliveryChangesNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("gpu-0001", 8)
	h.submit(1, 1, 8)
	if c := h.submit(1, 1, 8); !c.Empty() {
		t.Fatalf("second SubmitJob changed %v", c.Emits)
	}
	h.step(1, 1, "gpu-0001", eventsv1.StepState_STEP_RUNNING, 0)
	if c := h.step(1, 1, "gpu-0001", eventsv1.StepState_STEP_RUNNING, 0); !c.Empty() {
		t.Fatalf("second STEP_RUNNING changed %v", c.Emits)
	}
	h.step(1, 1, "gpu-0001", eventsv1.StepState_STEP_EXITED, 0)
	if c := h.step(1, 1, "gpu-0001", eventsv1.StepState_STEP_EXITED, 0); !c.Empty() {
		t.Fatalf("second STEP_EXITED changed %v", c.Emits)
	}
	if c := h.node("gpu-0001", 8); !c.Empty() {
		t.Fatalf("unchanged NodeChanged changed %v", c.Emits)
	}
	if c := h.s.Schedule(h.now); !c.Empty() {
		t.Fatalf("a pass with nothing to do changed %v", c.Emits)
	}
}

func TestInvalidEvents(t *testing.T) {
	t.Parallel()
	s := NewState(Config{})
	for _, ev := range []proto.Message{
		&eventsv1.SubmitJob{},
		&eventsv1.SubmitJob{Job: &loomv1.Job{Name: "x", JobId: "1", Cluster: cl, GpusPerNode: -1}},
		&eventsv1.CancelJob{},
		&eventsv1.NodeChanged{},
		&eventsv1.StepChanged{Job: "x"},
	} {
		_, err := s.Handle(time.Now(), ev)
		var inv *errs.InvalidError
		if !errors.As(err, &inv) {
			t.Errorf("%T %v: got %v, want InvalidError", ev, ev, err)
		}
	}
	if c, err := s.Handle(time.Now(), &eventsv1.Heartbeat{Node: "n"}); err != nil || !c.Empty() {
		t.Errorf("unrelated event: %v %v", c, err)
	}
}

// TestRandomNoGPUDoubleAllocated runs many random sequences of submits,
// cancels, step ends, node failures, drains (with and without deadlines) and
// clock ticks, checking after every event (in harness.commit) that no GPU is
// held twice, that nothing starts on a node that may not take work and that
// each drained node is announced once, and at the end that every job ran to
// an end and freed its allocation.
func TestRandomNoGPUDoubleAllocated(t *testing.T) {
	t.Parallel()
	requeues, drains := 0, 0
	for seed := uint64(1); seed <= 25; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		h := newHarness(t)
		hosts := []string{"gpu-0001", "gpu-0002", "gpu-0003", "gpu-0004"}
		for _, host := range hosts {
			h.node(host, 4)
		}
		next := 1
		for range 300 {
			switch op := rng.IntN(13); {
			case op < 4:
				h.submit(next, int32(1+rng.IntN(3)), int32(rng.IntN(5)))
				next++
			case op < 8: // a random live step reports an end
				runs := h.s.ActiveRuns()
				if len(runs) == 0 {
					continue
				}
				r := runs[rng.IntN(len(runs))]
				i := rng.IntN(len(r.Nodes))
				if r.Steps[r.Nodes[i]].Terminal() {
					continue
				}
				code := int32(0)
				if rng.IntN(5) == 0 {
					code = 1
				}
				id, _ := strconv.Atoi(h.s.JobRecord(r.Job).Job.GetJobId())
				h.step(id, r.Attempt, r.Hostnames[i], eventsv1.StepState_STEP_EXITED, code)
			case op < 9:
				if next > 1 {
					h.do(&eventsv1.CancelJob{Job: jobName(1 + rng.IntN(next-1)), Cluster: cl})
				}
			case op < 10:
				host := hosts[rng.IntN(len(hosts))]
				health := eventsv1.NodeHealth_UNHEALTHY
				if h.s.Node(nodeName(host)).Unhealthy {
					health = eventsv1.NodeHealth_HEALTHY
				}
				h.do(&eventsv1.NodeHealthChanged{Node: nodeName(host), Cluster: cl, Health: health, Reason: "test"})
			case op < 12: // the provisioner drains a node, brings it back, or loses it
				host := hosts[rng.IntN(len(hosts))]
				switch rng.IntN(4) {
				case 0, 1:
					grace := time.Duration(rng.IntN(20)) * time.Second // 0: no deadline
					h.drainNode(host, 4, grace)
				case 2:
					h.node(host, 4)
				default:
					h.do(&eventsv1.NodeChanged{Node: &loomv1.Node{Name: nodeName(host), Cluster: cl, Hostname: host, Gpus: 4,
						State: loomv1.Node_FAILED, Reason: "preempted by provider"}})
				}
			default:
				h.tick(time.Duration(rng.IntN(10)) * time.Second)
			}
		}
		// Heal every node, bring it back and end every step: the queue must drain.
		for _, host := range hosts {
			if h.s.Node(nodeName(host)).Unhealthy {
				h.do(&eventsv1.NodeHealthChanged{Node: nodeName(host), Cluster: cl, Health: eventsv1.NodeHealth_HEALTHY})
			}
			h.node(host, 4)
		}
		for guard := 0; len(h.s.ActiveRuns()) > 0; guard++ {
			if guard > 10000 {
				t.Fatalf("seed %d: runs never drained", seed)
			}
			r := h.s.ActiveRuns()[0]
			for i, node := range r.Nodes {
				if !r.Steps[node].Terminal() {
					id, _ := strconv.Atoi(h.s.JobRecord(r.Job).Job.GetJobId())
					h.step(id, r.Attempt, r.Hostnames[i], eventsv1.StepState_STEP_EXITED, 0)
					break
				}
			}
		}
		for _, j := range h.s.Jobs(nil) {
			if j.GetState() == loomv1.JobState_PENDING && len(h.s.JobRecord(j.GetName()).Excluded) > 0 &&
				(j.GetStateReason() == ReasonBadConstraints || j.GetStateReason() == ReasonPartitionNodeLimit) {
				continue // its node failures left it too few nodes: it waits for more
			}
			if j.GetState() == loomv1.JobState_PENDING || j.GetState() == loomv1.JobState_RUNNING {
				t.Fatalf("seed %d: job %s still %v (%s) with every node free", seed, j.GetName(), j.GetState(), j.GetStateReason())
			}
		}
		requeues, drains = requeues+h.requeues, drains+h.drains
	}
	// The mix must reach the paths it is meant to test.
	if requeues == 0 || drains == 0 {
		t.Fatalf("random runs saw %d requeues and %d NodeDrained", requeues, drains)
	}
	t.Logf("%d requeues, %d NodeDrained", requeues, drains)
}

// checkAllocIndex compares the per-node allocation counters with the runs.
func checkAllocIndex(t *testing.T, s *State) {
	t.Helper()
	want := map[string]*nodeAlloc{}
	for _, r := range s.runs {
		if r.Released {
			continue
		}
		for i, node := range r.Nodes {
			if !r.Holds(node) {
				continue
			}
			a := want[node]
			if a == nil {
				a = &nodeAlloc{}
				want[node] = a
			}
			a.add(r, i, node, 1)
		}
	}
	same := func(a, b *nodeAlloc) bool {
		if a.gpuMask != b.gpuMask || a.gpus != b.gpus || a.cpus != b.cpus || a.memMB != b.memMB || a.runs != b.runs ||
			a.exclusive != b.exclusive || len(a.holders) != len(b.holders) {
			return false
		}
		keys := map[string]bool{}
		for _, r := range a.holders {
			keys[r.Key()] = true
		}
		for _, r := range b.holders {
			if !keys[r.Key()] {
				return false
			}
		}
		return true
	}
	for node, a := range want {
		if got := s.alloc[node]; got == nil || !same(got, a) {
			t.Fatalf("alloc index of %s: got %+v, want %+v", node, got, a)
		}
	}
	for node, a := range s.alloc {
		if want[node] == nil {
			t.Fatalf("alloc index of %s: got %+v, want none", node, a)
		}
	}
	if len(s.active) != func() int {
		n := 0
		for _, r := range s.runs {
			if !r.Released {
				n++
			}
		}
		return n
	}() {
		t.Fatalf("active index out of date")
	}
}

// topicOf is the topic the app will publish e on: the one libs/topics
// routes its payload's type to, or a description of the routing error (which
// no topic a test expects equals).
func topicOf(e Emit) string {
	topic, err := topics.For(e.Message())
	if err != nil {
		return "(unrouted: " + err.Error() + ")"
	}
	return topic
}

package domain

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"

	"github.com/loom-ml/loom/services/scheduler/internal/domain/views"
)

// batchOnTwo starts batch job id on nodes a and b with 2 tasks per node and
// reports its batch step running on a.
func batchOnTwo(t *testing.T) *harness {
	h := newHarness(t)
	h.node("a", 4)
	h.node("b", 4)
	h.submitJob(&loomv1.Job{Name: jobName(1), JobId: "1", Cluster: cl, NodeCount: 2, NtasksPerNode: 2,
		Script: "#!/bin/sh\nsrun hostname\n", Env: map[string]string{"FROM_SUBMIT": "x"}, User: "ada"})
	h.step(1, 1, "a", eventsv1.StepState_STEP_RUNNING, 0)
	h.wantExact(1, loomv1.JobState_RUNNING, "")
	return h
}

func launches(c *Change) []*eventsv1.LaunchTasks {
	var out []*eventsv1.LaunchTasks
	for _, e := range c.Emits {
		if l, ok := e.Payload.(*eventsv1.LaunchTasks); ok {
			if topicOf(e) != topics.StepCommands || e.Key != l.GetNode() {
				panic("LaunchTasks on " + topicOf(e) + " key " + e.Key)
			}
			out = append(out, l)
		}
	}
	return out
}

func kills(c *Change) []*eventsv1.KillTasks {
	var out []*eventsv1.KillTasks
	for _, e := range c.Emits {
		if k, ok := e.Payload.(*eventsv1.KillTasks); ok {
			out = append(out, k)
		}
	}
	return out
}

func createStep(rid string, mods ...func(*eventsv1.CreateJobStep)) *eventsv1.CreateJobStep {
	ev := &eventsv1.CreateJobStep{Job: jobName(1), Cluster: cl, RequestId: rid, Command: []string{"python", "train.py"},
		Env: map[string]string{"MASTER_ADDR": "mine", "SLURM_PROCID": "0", "CUDA_VISIBLE_DEVICES": "0,1,2,3", "FROM_SCRIPT": "y"}}
	for _, m := range mods {
		m(ev)
	}
	return ev
}

func (h *harness) tasks(step int32, host string, st eventsv1.StepState, codes ...int32) *Change {
	return h.do(&eventsv1.TasksChanged{Job: jobName(1), Attempt: 1, StepId: step, Node: nodeName(host), Cluster: cl,
		State: st, ExitCodes: codes})
}

func (h *harness) jobStep(id int32) *loomv1.JobStep {
	h.t.Helper()
	s := h.s.JobStep(jobName(1), id)
	if s == nil {
		h.t.Fatalf("step %d of job 1 unknown", id)
	}
	return s
}

func TestJobStepLaunchesRankedTasksOnEveryNode(t *testing.T) {
	t.Parallel()
	h := batchOnTwo(t)
	c := h.do(createStep("r1", func(e *eventsv1.CreateJobStep) { e.Input = "3" }))
	ls := launches(c)
	for k, l := range ls {
		if l.GetPty() {
			t.Errorf("LaunchTasks %d has a terminal no one asked for", k)
		}
	}
	if len(ls) != 2 {
		t.Fatalf("LaunchTasks %v, want one per node", ls)
	}
	for k, l := range ls {
		host := []string{"a", "b"}[k]
		if l.GetNode() != nodeName(host) || l.GetNodeIndex() != int32(k) || l.GetFirstRank() != int32(2*k) ||
			l.GetNtasks() != 2 || l.GetTotalTasks() != 4 || l.GetStepId() != 0 || l.GetAttempt() != 1 ||
			!reflect.DeepEqual(l.GetCommand(), []string{"python", "train.py"}) || l.GetWorkDir() != "/shared/c1/ada" ||
			l.GetOutputDir() != "/shared/c1/.loom/steps/1.0" || l.GetUser() != "ada" || l.GetInput() != "3" {
			t.Errorf("LaunchTasks to %s: %v", host, l)
		}
		env := l.GetEnv()
		want := map[string]string{
			"SLURM_STEP_ID": "0", "SLURM_NODEID": strconv.Itoa(k), "SLURMD_NODENAME": host, "SLURM_NTASKS": "4",
			"SLURM_STEP_NUM_TASKS": "4", "SLURM_STEP_NUM_NODES": "2", "SLURM_STEP_NODELIST": "a,b",
			"SLURM_JOB_NODELIST": "a,b", "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_JOB_ID": "1",
			"MASTER_ADDR": "mine", "FROM_SCRIPT": "y", "SLURM_GTIDS": []string{"0,1", "2,3"}[k],
			"CUDA_VISIBLE_DEVICES": "", "SLURM_GPUS_ON_NODE": "", "SLURM_DISTRIBUTION": "block",
		}
		for key, v := range want {
			if env[key] != v {
				t.Errorf("node %s: %s=%q, want %q", host, key, env[key], v)
			}
		}
		if _, ok := env["FROM_SUBMIT"]; ok {
			t.Errorf("node %s: the job's submit env replaced the script's: %v", host, env)
		}
	}
	s := h.jobStep(0)
	if s.GetState() != loomv1.JobState_RUNNING || s.GetNumTasks() != 4 || !reflect.DeepEqual(s.GetNodes(), []string{"a", "b"}) {
		t.Fatalf("step %v", s)
	}
	// A redelivered create (same request id) is no second step.
	if c := h.do(createStep("r1")); len(launches(c)) != 0 || len(h.s.Run(jobName(1), 1).JobSteps) != 1 {
		t.Fatalf("redelivered create launched %v", launches(c))
	}
	h.tasks(0, "a", eventsv1.StepState_STEP_RUNNING)
	h.tasks(0, "a", eventsv1.StepState_STEP_EXITED, 0, 0)
	if h.jobStep(0).GetState() != loomv1.JobState_RUNNING {
		t.Fatal("step ended before every node's tasks did")
	}
	h.tasks(0, "b", eventsv1.StepState_STEP_EXITED, 0, 0)
	if s := h.jobStep(0); s.GetState() != loomv1.JobState_COMPLETED || s.GetExitCode() != 0 || s.GetEndTime() == nil {
		t.Fatalf("step %v, want COMPLETED", s)
	}
	h.wantExact(1, loomv1.JobState_RUNNING, "") // a step never ends its job
	// Step ids count up within the run.
	if ls := launches(h.do(createStep("r2", func(e *eventsv1.CreateJobStep) { e.NodeCount = 2; e.Ntasks = 3 }))); len(ls) != 2 ||
		ls[0].GetStepId() != 1 || ls[0].GetNtasks() != 2 || ls[1].GetNtasks() != 1 || ls[1].GetFirstRank() != 2 {
		t.Fatalf("second step: %v", ls)
	}
}

// TestJobStepDistribution: srun -m cyclic and plane=N number the tasks as
// Slurm 22.05 does (slurmspec.TaskRanks) in every place that reads the
// layout: each node's LaunchTasks ranks, SLURM_GTIDS, the counts of
// SLURM_STEP_TASKS_PER_NODE, SLURM_DISTRIBUTION, the exit codes by rank
// and the step's record.
func TestJobStepDistribution(t *testing.T) {
	t.Parallel()
	h := batchOnTwo(t)
	for _, tc := range []struct {
		m, env, perNode string
		ranks           [][]int32
	}{
		{"cyclic", "cyclic", "2(x2)", [][]int32{{0, 2}, {1, 3}}},
		{"plane=3", "plane", "3,1", [][]int32{{0, 1, 2}, {3}}},
		{"cyclic:block,pack", "cyclic:block,pack", "2(x2)", [][]int32{{0, 2}, {1, 3}}},
		{"", "block", "2(x2)", [][]int32{{0, 1}, {2, 3}}},
	} {
		id := int32(len(h.s.Run(jobName(1), 1).JobSteps))
		ls := launches(h.do(createStep("d"+tc.m, func(e *eventsv1.CreateJobStep) { e.Ntasks, e.Distribution = 4, tc.m })))
		if len(ls) != 2 {
			t.Fatalf("-m %s: LaunchTasks %v", tc.m, ls)
		}
		for k, l := range ls {
			ranks := l.GetRanks()
			if tc.m == "" && len(ranks) != 0 {
				t.Errorf("-m block: node %d sent ranks %v", k, ranks)
			}
			if len(ranks) == 0 {
				// A block layout (plane=3's here too): none sent,
				// first_rank onwards, as agents from before ranks read it.
				for i := range l.GetNtasks() {
					ranks = append(ranks, l.GetFirstRank()+i)
				}
			}
			gtids := strings.Trim(strings.Join(strings.Fields(fmt.Sprint(tc.ranks[k])), ","), "[]")
			env := l.GetEnv()
			if !reflect.DeepEqual(ranks, tc.ranks[k]) || l.GetNtasks() != int32(len(tc.ranks[k])) || l.GetFirstRank() != tc.ranks[k][0] ||
				env["SLURM_GTIDS"] != gtids || env["SLURM_DISTRIBUTION"] != tc.env || env["SLURM_STEP_TASKS_PER_NODE"] != tc.perNode ||
				env["SLURM_TASKS_PER_NODE"] != tc.perNode {
				t.Errorf("-m %s: node %d: ranks %v, %d tasks from %d, GTIDS %s, DISTRIBUTION %s, TASKS_PER_NODE %s; want %v",
					tc.m, k, ranks, l.GetNtasks(), l.GetFirstRank(), env["SLURM_GTIDS"], env["SLURM_DISTRIBUTION"], env["SLURM_STEP_TASKS_PER_NODE"], tc.ranks[k])
			}
			if got := env["SLURM_DIST_PLANESIZE"]; got != map[bool]string{true: "3"}[tc.m == "plane=3"] {
				t.Errorf("-m %s: SLURM_DIST_PLANESIZE=%q", tc.m, got)
			}
		}
		// Node a's last task fails: its rank's code, not the next rank's.
		codes := make([]int32, len(tc.ranks[0]))
		codes[len(codes)-1] = 5
		h.tasks(id, "a", eventsv1.StepState_STEP_EXITED, codes...)
		h.tasks(id, "b", eventsv1.StepState_STEP_EXITED, make([]int32, len(tc.ranks[1]))...)
		s := h.jobStep(id)
		want := make([]int32, 4)
		want[tc.ranks[0][len(tc.ranks[0])-1]] = 5
		if !reflect.DeepEqual(s.GetTaskExitCodes(), want) || s.GetExitCode() != 5 || s.GetDistribution() != tc.m && tc.m != "cyclic:block,pack" {
			t.Errorf("-m %s: step exit codes %v (want %v), exit %d, distribution %q", tc.m, s.GetTaskExitCodes(), want, s.GetExitCode(), s.GetDistribution())
		}
	}
}

func TestJobStepExitCodesAndKillOnBadExit(t *testing.T) {
	t.Parallel()
	h := batchOnTwo(t)
	h.do(createStep("r1"))
	h.tasks(0, "b", eventsv1.StepState_STEP_EXITED, 0, 3)
	if len(h.s.Run(jobName(1), 1).JobSteps[0].Parts) != 2 || h.jobStep(0).GetState() != loomv1.JobState_RUNNING {
		t.Fatal("without --kill-on-bad-exit the other tasks run on")
	}
	c := h.tasks(0, "a", eventsv1.StepState_STEP_EXITED, 0, 1)
	if s := h.jobStep(0); s.GetState() != loomv1.JobState_FAILED || s.GetExitCode() != 3 ||
		!reflect.DeepEqual(s.GetTaskExitCodes(), []int32{0, 1, 0, 3}) || len(kills(c)) != 0 {
		t.Fatalf("step %v kills %v; want FAILED with exit 3", s, kills(c))
	}
	// -K: the first bad exit kills the others.
	c = h.do(createStep("r2", func(e *eventsv1.CreateJobStep) { e.KillOnBadExit = true }))
	c = h.tasks(1, "a", eventsv1.StepState_STEP_EXITED, 2, 0)
	if ks := kills(c); len(ks) != 1 || ks[0].GetNode() != nodeName("b") || ks[0].GetStepId() != 1 || ks[0].GetSignal() != "" {
		t.Fatalf("kills %v, want one to b", ks)
	}
	h.tasks(1, "b", eventsv1.StepState_STEP_KILLED, 143, 143)
	if s := h.jobStep(1); s.GetState() != loomv1.JobState_FAILED || s.GetExitCode() != 143 {
		t.Fatalf("step %v", s)
	}
	// Tasks that cannot start fail the step and stop the rest, with or without -K.
	h.do(createStep("r3"))
	c = h.tasks(2, "b", eventsv1.StepState_STEP_FAILED_TO_START)
	if ks := kills(c); len(ks) != 1 || ks[0].GetNode() != nodeName("a") {
		t.Fatalf("failed start: kills %v", ks)
	}
	h.tasks(2, "a", eventsv1.StepState_STEP_KILLED)
	if s := h.jobStep(2); s.GetState() != loomv1.JobState_FAILED || s.GetExitCode() != 1 {
		t.Fatalf("step %v", s)
	}
	// Tasks the agent killed past the job's memory: OUT_OF_MEMORY, as
	// Slurm's sacct shows such a step.
	h.do(createStep("r4"))
	h.tasks(3, "a", eventsv1.StepState_STEP_EXITED, 0, 0)
	h.do(&eventsv1.TasksChanged{Job: jobName(1), Attempt: 1, StepId: 3, Node: nodeName("b"), Cluster: cl,
		State: eventsv1.StepState_STEP_EXITED, ExitCodes: []int32{137, 137}, Message: "tasks killed: out of memory (1.2 GiB over a limit of 1.0 GiB)"})
	if s := h.jobStep(3); s.GetState() != loomv1.JobState_OUT_OF_MEMORY || s.GetExitCode() != 137 || s.GetReason() != "OutOfMemory" {
		t.Fatalf("step killed for memory: %v", s)
	}
}

func TestJobStepCancelAndSignal(t *testing.T) {
	t.Parallel()
	h := batchOnTwo(t)
	h.do(createStep("r1"))
	h.tasks(0, "a", eventsv1.StepState_STEP_RUNNING)
	c := h.do(&eventsv1.CancelJobStep{Job: jobName(1), Cluster: cl, StepId: 0, Signal: "USR1"})
	if ks := kills(c); len(ks) != 2 || ks[0].GetSignal() != "USR1" || h.jobStep(0).GetState() != loomv1.JobState_RUNNING {
		t.Fatalf("signal: kills %v", ks)
	}
	c = h.do(&eventsv1.CancelJobStep{Job: jobName(1), Cluster: cl, StepId: 0})
	if ks := kills(c); len(ks) != 2 || ks[0].GetSignal() != "" {
		t.Fatalf("cancel: kills %v", ks)
	}
	if c := h.do(&eventsv1.CancelJobStep{Job: jobName(1), Cluster: cl, StepId: 0}); len(kills(c)) != 0 {
		t.Fatal("a second cancel killed again")
	}
	h.tasks(0, "a", eventsv1.StepState_STEP_KILLED, 143, 143)
	h.tasks(0, "b", eventsv1.StepState_STEP_KILLED)
	if s := h.jobStep(0); s.GetState() != loomv1.JobState_CANCELLED || s.GetExitCode() != 143 {
		t.Fatalf("step %v, want CANCELLED", s)
	}
	h.wantExact(1, loomv1.JobState_RUNNING, "")
}

// TestScancelSignalReachesWhomSlurmSays: scancel --signal on a batch job
// reaches its job steps' tasks (srun), not the batch script, unless -b (the
// batch shell alone) or -f (the batch shell, its children and the steps) —
// as Slurm 22.05 does (checked against a real Slurm); --signal before a
// time limit without B: likewise.
func TestScancelSignalReachesWhomSlurmSays(t *testing.T) {
	t.Parallel()
	h := batchOnTwo(t)
	// No job step yet: a plain signal reaches nobody.
	if c := h.do(&eventsv1.CancelJob{Job: jobName(1), Cluster: cl, Signal: "USR1"}); len(signals(c))+len(kills(c)) != 0 {
		t.Fatalf("signal with no job step: %v", c.Emits)
	}
	h.do(createStep("r1"))
	h.tasks(0, "a", eventsv1.StepState_STEP_RUNNING)
	h.tasks(0, "b", eventsv1.StepState_STEP_RUNNING)
	c := h.do(&eventsv1.CancelJob{Job: jobName(1), Cluster: cl, Signal: "USR1"})
	if ks := kills(c); len(signals(c)) != 0 || len(ks) != 2 || ks[0].GetSignal() != "USR1" || ks[1].GetSignal() != "USR1" {
		t.Fatalf("scancel -s USR1: signals %v, kills %v; want the step's tasks on both nodes only", signals(c), ks)
	}
	c = h.do(&eventsv1.CancelJob{Job: jobName(1), Cluster: cl, Signal: "USR1", Batch: true, Full: true}) // -b wins
	if sg := signals(c); len(kills(c)) != 0 || len(sg) != 1 || sg[0].GetNode() != nodeName("a") || !sg[0].GetBatchOnly() {
		t.Fatalf("scancel -b -s USR1: signals %v, kills %v; want the batch shell alone", sg, kills(c))
	}
	c = h.do(&eventsv1.CancelJob{Job: jobName(1), Cluster: cl, Signal: "USR1", Full: true})
	if sg, ks := signals(c), kills(c); len(ks) != 2 || len(sg) != 1 || sg[0].GetBatchOnly() {
		t.Fatalf("scancel -f -s USR1: signals %v, kills %v; want the batch step's group and the step's tasks", sg, ks)
	}
	h.wantExact(1, loomv1.JobState_RUNNING, "")
	if s := h.jobStep(0); s.GetState() != loomv1.JobState_RUNNING {
		t.Fatalf("a signal ended the step: %v", s)
	}

	// --signal=USR1@60 before the time limit: the job steps' tasks too.
	w := newHarness(t)
	w.node("a", 4)
	w.submitJob(&loomv1.Job{Name: jobName(1), JobId: "1", Cluster: cl, NodeCount: 1, Script: "#!/bin/sh\nsrun train\n",
		TimeLimitSeconds: 120, Signal: "USR1@60"})
	w.step(1, 1, "a", eventsv1.StepState_STEP_RUNNING, 0)
	w.do(createStep("r1"))
	w.tasks(0, "a", eventsv1.StepState_STEP_RUNNING)
	c = w.tick(61 * time.Second)
	if ks := kills(c); len(signals(c)) != 0 || len(ks) != 1 || ks[0].GetSignal() != "USR1" {
		t.Fatalf("--signal=USR1@60: signals %v, kills %v; want the step's tasks only", signals(c), ks)
	}
}

func TestJobStepsDieWithTheirJob(t *testing.T) {
	t.Parallel()
	h := batchOnTwo(t)
	h.do(createStep("r1"))
	c := h.do(&eventsv1.CancelJob{Job: jobName(1), Cluster: cl})
	// b runs no batch step, so no StopStep reaches it: its tasks are killed
	// through the step.
	ks := kills(c)
	if len(ks) != 2 || ks[0].GetNode() != nodeName("a") || ks[1].GetNode() != nodeName("b") {
		t.Fatalf("job cancel: kills %v, want both nodes", ks)
	}
	h.tasks(0, "a", eventsv1.StepState_STEP_KILLED, 143, 143)
	h.tasks(0, "b", eventsv1.StepState_STEP_KILLED, 143, 143)
	if s := h.jobStep(0); s.GetState() != loomv1.JobState_CANCELLED {
		t.Fatalf("step %v", s)
	}

	// A node failure: its tasks are lost at once (no agent will say so).
	h = batchOnTwo(t)
	h.do(createStep("r1"))
	h.do(&eventsv1.NodeHealthChanged{Node: nodeName("b"), Cluster: cl, Health: eventsv1.NodeHealth_UNHEALTHY, Reason: "gone"})
	h.tasks(0, "a", eventsv1.StepState_STEP_KILLED, 143, 143)
	if s := h.jobStep(0); s.GetState() != loomv1.JobState_CANCELLED || !reflect.DeepEqual(s.GetTaskExitCodes(), []int32{143, 143, 1, 1}) {
		t.Fatalf("step after node failure %v", s)
	}
}

// TestRequeuedJobWaitsForItsJobSteps: a requeued job's next run waits for
// its old run's srun tasks too, not only for the batch step.
func TestRequeuedJobWaitsForItsJobSteps(t *testing.T) {
	t.Parallel()
	h := batchOnTwo(t)
	h.do(createStep("r1"))
	c := h.do(&eventsv1.UpdateJob{Job: jobName(1), Cluster: cl, Action: ActionRequeue})
	if len(kills(c)) != 2 || len(stops(c)) != 1 {
		t.Fatalf("requeue: kills %v, stops %v", kills(c), stops(c))
	}
	h.step(1, 1, "a", eventsv1.StepState_STEP_KILLED, 143)
	h.wantExact(1, loomv1.JobState_PENDING, ReasonRequeued)
	if p := views.Job(h.s, jobName(1), h.now).GetPlacement(); p != "waiting for its previous run's job steps (srun) to end" {
		t.Fatalf("placement while the tasks end: %q", p)
	}
	if c := h.tasks(0, "a", eventsv1.StepState_STEP_KILLED, 143, 143); len(starts(c)) != 0 {
		t.Fatalf("started with b's tasks still running: %v", starts(c))
	}
	// The batch step starts again on the batch host, as attempt 2.
	if st := starts(h.tasks(0, "b", eventsv1.StepState_STEP_KILLED, 143, 143)); len(st) != 1 || st[0].GetAttempt() != 2 {
		t.Fatalf("want attempt 2 started once the tasks ended, got %v", st)
	}
	// The old run's step stays listed under its attempt (sacct -D); the
	// current run has none yet.
	if cur, ok := h.s.JobSteps(jobName(1), 0); !ok || len(cur) != 0 {
		t.Fatalf("steps of the current run: %v %v, want none", cur, ok)
	}
	old, ok := h.s.JobSteps(jobName(1), 1)
	if !ok || len(old) != 1 || old[0].GetAttempt() != 1 || old[0].GetState() != loomv1.JobState_CANCELLED ||
		!reflect.DeepEqual(old[0].GetTaskExitCodes(), []int32{143, 143, 143, 143}) {
		t.Fatalf("steps of attempt 1: %v %v", old, ok)
	}
	for _, attempt := range []int32{-1, 3} {
		if steps, ok := h.s.JobSteps(jobName(1), attempt); ok {
			t.Errorf("attempt %d the job has not had: %v, ok", attempt, steps)
		}
	}
}

func TestJobStepRefusals(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("a", 4)
	h.node("b", 4)
	h.node("x", 0)
	h.do(&eventsv1.UpdateSlurmNode{Cluster: cl, Hostname: "x", State: "DRAIN", Reason: "keep job 2 pending"})
	// A job that does not run takes no step, and nothing is recorded.
	h.submitJob(&loomv1.Job{Name: jobName(2), JobId: "2", Cluster: cl, NodeCount: 3, Script: "true"})
	ev := createStep("r1")
	ev.Job = jobName(2)
	if c := h.do(ev); len(launches(c)) != 0 || len(runSteps(h.s.Run(jobName(2), 1))) != 0 {
		t.Fatalf("step of a pending job: %v", launches(c))
	}
	ev.Job = jobName(99)
	if c := h.do(ev); len(launches(c)) != 0 {
		t.Fatal("step of an unknown job launched")
	}
	// Bad input names its fields and changes nothing.
	for _, bad := range []*eventsv1.CreateJobStep{
		{Cluster: cl, RequestId: "r", Command: []string{"x"}},
		{Job: jobName(1), Cluster: cl, Command: []string{"x"}},
		{Job: jobName(1), Cluster: cl, RequestId: "r"},
		{Job: jobName(1), Cluster: cl, RequestId: "r", Command: []string{"x"}, NodeCount: -1, Ntasks: 1 << 20},
		// 2^30 per node on two nodes wraps an int32 to a negative count:
		// refused, not a panic in the layout.
		{Job: jobName(1), Cluster: cl, RequestId: "r", Command: []string{"x"}, NtasksPerNode: 1 << 30},
		{Job: jobName(1), Cluster: cl, RequestId: "r", Command: []string{"x"}, CpusPerTask: 1 << 30},
		{Job: jobName(1), Cluster: cl, RequestId: "r", Command: []string{"x"}, Input: "some"},
		{Job: jobName(1), Cluster: cl, RequestId: "r", Command: []string{"x"}, Input: "2", Ntasks: 2},
		{Job: jobName(1), Cluster: cl, RequestId: "r", Command: []string{"x"}, Pty: true, Input: "all"},
		{Job: jobName(1), Cluster: cl, RequestId: "r", Command: []string{"x"}, Pty: true, PtyRows: -1},
		{Job: jobName(1), Cluster: cl, RequestId: "r", Command: []string{"x"}, Distribution: "plane=0"},
		{Job: jobName(1), Cluster: cl, RequestId: "r", Command: []string{"x"}, Distribution: "arbitrary:cyclic"},
	} {
		_, err := h.s.Handle(h.now, bad)
		var inv *errs.InvalidError
		if !errors.As(err, &inv) {
			t.Errorf("%v: err %v, want InvalidError", bad, err)
		}
	}
	if _, err := h.s.Handle(h.now, &eventsv1.TasksChanged{Job: jobName(1)}); err == nil {
		t.Error("TasksChanged without node accepted")
	}
	if _, err := h.s.Handle(h.now, &eventsv1.CancelJobStep{Job: jobName(1), StepId: -1, Signal: "NOPE"}); err == nil {
		t.Error("CancelJobStep with a bad step and signal accepted")
	}
	// More nodes than the job has: the step is recorded FAILED with Slurm's
	// words, so that the waiting srun hears why.
	h = batchOnTwo(t)
	c := h.do(createStep("r1", func(e *eventsv1.CreateJobStep) { e.NodeCount = 3 }))
	if s := h.jobStep(0); len(launches(c)) != 0 || s.GetState() != loomv1.JobState_FAILED ||
		s.GetReason() != "Requested node configuration is not available: the job has 2 node(s), the step asks for 3" {
		t.Fatalf("too many nodes: %v", s)
	}
	// A terminal is task 0's: on the first node only, with its size.
	c = h.do(createStep("rp", func(e *eventsv1.CreateJobStep) { e.Pty, e.Input, e.PtyRows, e.PtyCols = true, "0", 30, 100 }))
	if ls := launches(c); len(ls) != 2 || !ls[0].GetPty() || ls[1].GetPty() || ls[0].GetPtyRows() != 30 || ls[0].GetPtyCols() != 100 || ls[0].GetInput() != "0" {
		t.Fatalf("pty step launches %v", ls)
	}
	// An input for a task the step does not have (its count known only
	// from the layout): FAILED, saying which tasks it has.
	c = h.do(createStep("r2", func(e *eventsv1.CreateJobStep) { e.Input = "4" }))
	if s := h.jobStep(2); len(launches(c)) != 0 || s.GetState() != loomv1.JobState_FAILED ||
		s.GetReason() != "--input: task 4 is not a task of the step (0..3)" {
		t.Fatalf("input for task 4 of 4: %v", s)
	}
}

// runSteps is the job steps of r, none when r is nil.
func runSteps(r *Run) []JobStep {
	if r == nil {
		return nil
	}
	return r.JobSteps
}

func TestJobStepsSurviveARestart(t *testing.T) {
	t.Parallel()
	h := batchOnTwo(t)
	h.do(createStep("r1"))
	h.do(createStep("waits")) // for step 0's CPUs
	// The records as stored (runs are JSON), loaded by a new scheduler.
	var runs []*Run
	for _, r := range h.s.runs {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var back Run
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, &back)
	}
	var clusters []*Cluster
	for _, c := range h.s.clusters {
		clusters = append(clusters, c)
	}
	var nodes []*Node
	for _, n := range h.s.nodes {
		nodes = append(nodes, n)
	}
	var jobs []*Job
	for _, j := range h.s.jobs {
		jobs = append(jobs, j)
	}
	s2 := NewState(Config{Policy: DefaultPolicy()})
	s2.Load(clusters, nodes, jobs, runs, nil, nil)
	s2.LoadStepRequests(h.s.stepReqs)
	h.s = s2
	h.tasks(0, "a", eventsv1.StepState_STEP_EXITED, 0, 0)
	c := h.tasks(0, "b", eventsv1.StepState_STEP_EXITED, 0, 0)
	if s := h.jobStep(0); s.GetState() != loomv1.JobState_COMPLETED {
		t.Fatalf("step after restart %v", s)
	}
	// The waiting step kept its request through the restart.
	if ls := launches(c); len(ls) != 2 || ls[0].GetStepId() != 1 || ls[0].GetEnv()["FROM_SCRIPT"] != "y" ||
		!reflect.DeepEqual(ls[0].GetCommand(), []string{"python", "train.py"}) {
		t.Fatalf("the waiting step after a restart: %v, want step 1 started", ls)
	}
	if ls := launches(h.do(createStep("r2", func(e *eventsv1.CreateJobStep) { e.Overlap = true }))); len(ls) != 2 || ls[0].GetStepId() != 2 {
		t.Fatalf("the next step after a restart: %v, want step id 2", ls)
	}
}

// TestStepResources: a step holds CPUs of the job's nodes while its tasks
// there run, as Slurm 22.05's do: without --exact every CPU the job has on
// its nodes (so that such steps run one after another), with --exact its
// tasks × --cpus-per-task, with --overlap none. A step that does not fit
// what the running steps leave waits, PENDING with srun's reason, behind
// the steps asked for before it, and starts as they end; cancelled or
// ended with its job, it ends without having run; one that cannot fit the
// job's allocation at all fails at once; and how many may wait is bounded.
func TestStepResources(t *testing.T) {
	t.Parallel()
	h := batchOnTwo(t)
	r := h.s.Run(jobName(1), 1)
	if c0, c1 := cpusOf(r, 0, nil), cpusOf(r, 1, nil); c0 != 2 || c1 != 2 {
		t.Fatalf("the job's CPUs %d and %d, want 2 on each node (its tasks, the nodes' size unknown)", c0, c1)
	}
	state := func(id int32) loomv1.JobState { t.Helper(); return h.jobStep(id).GetState() }
	exact := func(n int32) func(*eventsv1.CreateJobStep) {
		return func(e *eventsv1.CreateJobStep) { e.Exact, e.Ntasks = true, n }
	}
	if ls := launches(h.do(createStep("whole"))); len(ls) != 2 {
		t.Fatalf("the first step: %v", ls)
	}
	for id, mods := range [][]func(*eventsv1.CreateJobStep){nil, {exact(1)}} {
		if c := h.do(createStep(fmt.Sprint("wait", id), mods...)); len(launches(c)) != 0 || state(int32(id+1)) != loomv1.JobState_PENDING ||
			h.jobStep(int32(id+1)).GetReason() != ReasonStepBusy || h.jobStep(int32(id+1)).GetNodes() != nil {
			t.Fatalf("step %d while step 0 holds every CPU: %v", id+1, h.jobStep(int32(id+1)))
		}
	}
	if ls := launches(h.do(createStep("overlap", func(e *eventsv1.CreateJobStep) { e.Overlap = true }))); len(ls) != 2 || ls[0].GetStepId() != 3 {
		t.Fatalf("an --overlap step waits for nothing: %v", ls)
	}
	// Step 1 needs both nodes: a's CPUs alone are not enough.
	if c := h.tasks(0, "a", eventsv1.StepState_STEP_EXITED, 0, 0); len(launches(c)) != 0 {
		t.Fatalf("started with node b still held: %v", launches(c))
	}
	c := h.tasks(0, "b", eventsv1.StepState_STEP_EXITED, 0, 0)
	if ls := launches(c); len(ls) != 2 || ls[0].GetStepId() != 1 || state(1) != loomv1.JobState_RUNNING || state(2) != loomv1.JobState_PENDING {
		t.Fatalf("once step 0 ended: %v; step 1 %v, step 2 %v", ls, state(1), state(2))
	}
	// Cancelled while it waits: it ends at once, with nothing to kill.
	if c := h.do(&eventsv1.CancelJobStep{Job: jobName(1), Cluster: cl, StepId: 2}); len(kills(c)) != 0 ||
		state(2) != loomv1.JobState_CANCELLED || h.jobStep(2).GetStartTime() != nil {
		t.Fatalf("a waiting step cancelled: %v", h.jobStep(2))
	}
	for _, host := range []string{"a", "b"} {
		h.tasks(1, host, eventsv1.StepState_STEP_EXITED, 0, 0)
		h.tasks(3, host, eventsv1.StepState_STEP_EXITED, 0, 0)
	}
	// A farm of --exact one-task steps: two a node, the first node first,
	// then the next; the fifth waits and takes the first CPU freed.
	hosts := func(c *Change) []string {
		var out []string
		for _, l := range launches(c) {
			out = append(out, l.GetEnv()["SLURMD_NODENAME"])
		}
		return out
	}
	for i, want := range []string{"a", "a", "b", "b"} {
		if got := hosts(h.do(createStep(fmt.Sprint("farm", i), exact(1)))); !reflect.DeepEqual(got, []string{want}) {
			t.Fatalf("farm step %d on %v, want %s", i, got, want)
		}
	}
	if c := h.do(createStep("farm4", exact(1))); len(launches(c)) != 0 || state(8) != loomv1.JobState_PENDING {
		t.Fatalf("a fifth one-CPU step on 4 CPUs: %v", h.jobStep(8))
	}
	if got := hosts(h.tasks(6, "b", eventsv1.StepState_STEP_EXITED, 0)); !reflect.DeepEqual(got, []string{"b"}) {
		t.Fatalf("the waiting step once a CPU of b is free: on %v", got)
	}
	// More CPUs on a node than the job has there: never, so at once.
	c = h.do(createStep("too big", exact(1), func(e *eventsv1.CreateJobStep) { e.CpusPerTask = 3 }))
	if s := h.jobStep(9); len(launches(c)) != 0 || s.GetState() != loomv1.JobState_FAILED ||
		s.GetReason() != "More processors requested than permitted: 1 task(s) with 3 CPU(s) each need 3 CPUs on a, the job has 2 there" {
		t.Fatalf("a step past the job's CPUs: %v", s)
	}
	// How many wait, and their bytes, are bounded.
	for i := range MaxPendingSteps + 1 {
		h.do(createStep(fmt.Sprint("queue", i), exact(1)))
	}
	if s := h.jobStep(10 + MaxPendingSteps); s.GetState() != loomv1.JobState_FAILED || !strings.HasPrefix(s.GetReason(), ReasonStepLimit) {
		t.Fatalf("a step past %d waiting: %v", MaxPendingSteps, s)
	}
	// The job's end ends the steps that wait, without having run.
	h.step(1, 1, "a", eventsv1.StepState_STEP_EXITED, 0)
	if s := h.jobStep(10 + MaxPendingSteps - 1); s.GetState() != loomv1.JobState_CANCELLED || s.GetStartTime() != nil {
		t.Fatalf("a waiting step after its job ended: %v", s)
	}
	if n := len(h.s.stepReqs); n != 0 {
		t.Fatalf("%d requests kept after every waiting step ended", n)
	}
}

// TestWaitingStepsDoNotHoldUpOthers: a step that fits starts though
// steps asked for before it wait (as each of Slurm's sruns retries on its
// own): waiting steps could otherwise hold up the one that frees what they
// wait for (a client on an idle node that a server waits for).
func TestWaitingStepsDoNotHoldUpOthers(t *testing.T) {
	t.Parallel()
	h := batchOnTwo(t)
	on := func(host string) func(*eventsv1.CreateJobStep) {
		return func(e *eventsv1.CreateJobStep) { e.Ntasks, e.Nodelist = 1, []string{host} }
	}
	h.do(createStep("server", on("a")))
	if c := h.do(createStep("other", on("a"))); len(launches(c)) != 0 || h.jobStep(1).GetState() != loomv1.JobState_PENDING {
		t.Fatalf("a second step on a busy node: %v", h.jobStep(1))
	}
	if ls := launches(h.do(createStep("client", on("b")))); len(ls) != 1 || ls[0].GetStepId() != 2 {
		t.Fatalf("a step on an idle node behind a waiting one: %v (%v)", ls, h.jobStep(2))
	}
	// The request is kept beside the run, not in its record (written
	// whole at each of its changes).
	if b, err := json.Marshal(h.s.runs[RunKey(jobName(1), 1)]); err != nil || strings.Contains(string(b), "FROM_SCRIPT") {
		t.Fatalf("the run's record holds the waiting step's environment: %s", b)
	}
	if len(h.s.stepReqs) != 1 {
		t.Fatalf("requests kept: %d, want the waiting step's", len(h.s.stepReqs))
	}
	if ls := launches(h.tasks(0, "a", eventsv1.StepState_STEP_EXITED, 0)); len(ls) != 1 || ls[0].GetStepId() != 1 {
		t.Fatalf("the waiting step once the server ended: %v", ls)
	}
	if len(h.s.stepReqs) != 0 {
		t.Fatal("a started step's request is still kept")
	}
}

// TestGPUStepAvoidsOverlapSteps: an --overlap step holds no GPU, but a new
// step still takes a GPU no step uses before one an --overlap step does.
func TestGPUStepAvoidsOverlapSteps(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	h.gpuNode("a3-0001", "b1")
	h.submitJob(job(1, 1, 3, func(j *loomv1.Job) { j.Command = nil; j.Script = "srun x"; j.Ntasks = 3 }))
	h.reportRunning(1)
	one := func(e *eventsv1.CreateJobStep) { e.GpusPerTask, e.Ntasks, e.Exact = 1, 1, true }
	gpus := func(c *Change) []string {
		t.Helper()
		if ls := launches(c); len(ls) == 1 {
			return ls[0].GetTaskGpus()
		}
		t.Fatalf("launches %v", launches(c))
		return nil
	}
	if got := gpus(h.do(createStep("monitor", one, func(e *eventsv1.CreateJobStep) { e.Overlap = true }))); !reflect.DeepEqual(got, []string{"0"}) {
		t.Fatalf("the --overlap step: GPUs %v", got)
	}
	if got := gpus(h.do(createStep("work", one))); !reflect.DeepEqual(got, []string{"1"}) {
		t.Fatalf("a step beside an --overlap one: GPUs %v, want [1] (unused)", got)
	}
	if got := gpus(h.do(createStep("work2", one))); !reflect.DeepEqual(got, []string{"2"}) {
		t.Fatalf("a second step: GPUs %v, want [2]", got)
	}
	// Only the --overlap step's GPU is left: it is not held, so taken.
	if got := gpus(h.do(createStep("work3", one))); !reflect.DeepEqual(got, []string{"0"}) {
		t.Fatalf("a third step: GPUs %v, want [0]", got)
	}
}

// TestPendingStepBytesAreBounded: the requests of a run's waiting steps
// are bounded in bytes as well as in number.
func TestPendingStepBytesAreBounded(t *testing.T) {
	t.Parallel()
	h := batchOnTwo(t)
	h.do(createStep("whole"))
	big := strings.Repeat("x", 900<<10)
	for i := range 5 {
		h.do(createStep(fmt.Sprint("big", i), func(e *eventsv1.CreateJobStep) { e.Env["BIG"] = big }))
	}
	for id := int32(1); id <= 5; id++ {
		want := loomv1.JobState_PENDING
		if id == 5 {
			want = loomv1.JobState_FAILED
		}
		if s := h.jobStep(id); s.GetState() != want {
			t.Fatalf("step %d with a 900 KiB request: %v, want %v", id, s, want)
		}
	}
	if r := h.jobStep(5).GetReason(); !strings.Contains(r, "bytes (at most 4194304)") {
		t.Fatalf("reason %q", r)
	}
}

func TestStepLayout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		alloc                  []int32
		nodes, ntasks, perNode int32
		want                   []int32
		bad                    bool
	}{
		{alloc: []int32{2, 2}, want: []int32{2, 2}},
		{alloc: []int32{1, 1, 1}, ntasks: 1, want: []int32{1}},
		{alloc: []int32{1, 1}, nodes: 2, perNode: 4, want: []int32{4, 4}},
		{alloc: []int32{1, 1}, ntasks: 5, want: []int32{3, 2}},
		{alloc: []int32{1, 1}, nodes: 2, ntasks: 1, want: []int32{1}},
		{alloc: []int32{1, 1}, nodes: 3, bad: true},
		{alloc: []int32{1, 1}, nodes: 2, ntasks: 9, perNode: 4, bad: true},
		{alloc: []int32{1, 1}, ntasks: MaxStepTasks + 1, bad: true},
		// The job's own layout is bounded as any other: a step that takes
		// it whole from a job of 2^31-1 tasks on a node is refused, not
		// sized by it.
		{alloc: []int32{1<<31 - 1, 1}, bad: true},
		{alloc: []int32{MaxStepTasks / 2, MaxStepTasks / 2}, want: []int32{MaxStepTasks / 2, MaxStepTasks / 2}},
		// A packed job's layout (slurmspec.PackTasks) is filled as Slurm's
		// block layout fills it: round by round while a node has room,
		// then round the nodes again.
		{alloc: []int32{3, 1}, ntasks: 4, want: []int32{3, 1}},
		{alloc: []int32{3, 1}, ntasks: 2, want: []int32{1, 1}},
		{alloc: []int32{3, 1}, ntasks: 3, want: []int32{2, 1}},
		{alloc: []int32{3, 1}, ntasks: 6, want: []int32{4, 2}},
		{alloc: []int32{1, 3}, ntasks: 6, want: []int32{2, 4}},
		{alloc: []int32{4, 4, 1}, ntasks: 7, want: []int32{3, 3, 1}},
		{alloc: []int32{2, 2, 1}, ntasks: 6, want: []int32{3, 2, 1}},
		{alloc: []int32{3, 1}, nodes: 2, want: []int32{3, 1}},
		{alloc: []int32{3, 1}, ntasks: MaxStepTasks, want: []int32{MaxStepTasks/2 + 1, MaxStepTasks/2 - 1}},
	} {
		got, err := StepLayout(tc.alloc, tc.nodes, tc.ntasks, tc.perNode)
		if (err != nil) != tc.bad || (!tc.bad && !reflect.DeepEqual(got, tc.want)) {
			t.Errorf("StepLayout(%v, N=%d, n=%d, per=%d) = %v, %v; want %v (bad %v)", tc.alloc, tc.nodes, tc.ntasks, tc.perNode, got, err, tc.want, tc.bad)
		}
	}
}

// TestJobStepGPUsPerTask: srun --gpus-per-task gives each task its own of
// the job's GPUs on its node, in order (its CUDA_VISIBLE_DEVICES), with
// Slurm's SLURM_STEP_GPUS and SLURM_GPUS_PER_TASK; a step whose tasks need
// more GPUs than the job holds on a node fails, saying so. Without it
// every task sees the node's, as SLURM_STEP_GPUS says.
func TestJobStepGPUsPerTask(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	h.gpuNode("a3-0001", "b1")
	h.submitJob(job(1, 1, 4, func(j *loomv1.Job) { j.Command = nil; j.Script = "srun x"; j.Ntasks = 4 }))
	h.reportRunning(1)
	c := h.do(createStep("r1", func(e *eventsv1.CreateJobStep) { e.GpusPerTask, e.Ntasks = 2, 2 }))
	ls := launches(c)
	if len(ls) != 1 || !reflect.DeepEqual(ls[0].GetTaskGpus(), []string{"0,1", "2,3"}) ||
		ls[0].GetEnv()["SLURM_STEP_GPUS"] != "0,1,2,3" || ls[0].GetEnv()["SLURM_GPUS_PER_TASK"] != "2" {
		t.Fatalf("--gpus-per-task=2 -n2 on 4 GPUs: launches %v", ls)
	}
	c = h.do(createStep("r2", func(e *eventsv1.CreateJobStep) { e.Overlap = true }))
	if ls = launches(c); len(ls) != 1 || ls[0].GetTaskGpus() != nil || ls[0].GetEnv()["SLURM_STEP_GPUS"] != "0,1,2,3" ||
		ls[0].GetEnv()["SLURM_GPUS_PER_TASK"] != "" {
		t.Fatalf("no --gpus-per-task: launches %v", ls)
	}
	c = h.do(createStep("r3", func(e *eventsv1.CreateJobStep) { e.GpusPerTask, e.Ntasks = 2, 3 }))
	if s := h.jobStep(2); len(launches(c)) != 0 || s.GetState() != loomv1.JobState_FAILED ||
		s.GetReason() != "Requested node configuration is not available: 3 task(s) with --gpus-per-task=2 need 6 GPUs on a3-0001, the job holds 4 there" {
		t.Fatalf("3 tasks × 2 GPUs of 4: %v", s)
	}
}

// TestGPUTaskFarm: --gpus-per-task steps started side by side (a task
// farm: srun --exact -n1 --gpus-per-task=1 prog $i &) each get GPUs no
// running step of the job holds, as Slurm's do; with none free the next
// waits (PENDING) and starts with the GPUs of the first step to end; an
// --overlap step waits for nothing and shares the running steps' GPUs, in
// order.
func TestGPUTaskFarm(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	h.gpuNode("a3-0001", "b1")
	h.submitJob(job(1, 1, 3, func(j *loomv1.Job) { j.Command = nil; j.Script = "srun x"; j.Ntasks = 3 }))
	h.reportRunning(1)
	one := func(e *eventsv1.CreateJobStep) { e.GpusPerTask, e.Ntasks, e.Exact = 1, 1, true }
	gpusOf := func(c *Change) []string {
		t.Helper()
		ls := launches(c)
		if len(ls) != 1 {
			t.Fatalf("%d launches, want 1", len(ls))
		}
		return ls[0].GetTaskGpus()
	}
	for i, want := range []string{"0", "1", "2"} {
		if got := gpusOf(h.do(createStep(fmt.Sprint("farm-", i), one))); !reflect.DeepEqual(got, []string{want}) {
			t.Fatalf("farm step %d: GPUs %v, want [%s]", i, got, want)
		}
	}
	h.tasks(1, "a3-0001", eventsv1.StepState_STEP_EXITED, 0)
	if got := gpusOf(h.do(createStep("after-1", one))); !reflect.DeepEqual(got, []string{"1"}) {
		t.Fatalf("a step once step 1 ended: GPUs %v, want [1] (the one it gave back)", got)
	}
	if c := h.do(createStep("over", one)); len(launches(c)) != 0 || h.jobStep(4).GetState() != loomv1.JobState_PENDING ||
		h.jobStep(4).GetReason() != ReasonStepBusy {
		t.Fatalf("a step with every GPU busy: %d launches, %v; want it PENDING", len(launches(c)), h.jobStep(4))
	}
	// An --overlap step shares: what is free first (none here), then in order.
	if got := gpusOf(h.do(createStep("pair", one, func(e *eventsv1.CreateJobStep) { e.Ntasks, e.Overlap = 2, true }))); !reflect.DeepEqual(got, []string{"0", "1"}) {
		t.Fatalf("an --overlap two-task step with every GPU busy: GPUs %v", got)
	}
	if got := gpusOf(h.tasks(2, "a3-0001", eventsv1.StepState_STEP_EXITED, 0)); !reflect.DeepEqual(got, []string{"2"}) {
		t.Fatalf("the waiting step once step 2 ended: GPUs %v, want [2]", got)
	}
	if s := h.jobStep(4); s.GetState() != loomv1.JobState_RUNNING || s.GetStartTime() == nil {
		t.Fatalf("the waiting step after it started: %v", s)
	}
}

// TestRunStepsAreBounded: a run keeps its newest MaxKeptEndedSteps ended
// steps and counts the ones it drops (the final job's steps_omitted says
// so); past MaxLiveSteps running at once, a step is refused as Slurm
// refuses one past MaxStepCount.
func TestRunStepsAreBounded(t *testing.T) {
	t.Parallel()
	h := batchOnTwo(t)
	const n = MaxKeptEndedSteps + 44
	for i := range n {
		h.do(createStep("r" + strconv.Itoa(i)))
		h.tasks(int32(i), "a", eventsv1.StepState_STEP_EXITED, 0, 0)
		h.tasks(int32(i), "b", eventsv1.StepState_STEP_EXITED, 0, 0)
	}
	r := h.s.Run(jobName(1), 1)
	if len(r.JobSteps) != MaxKeptEndedSteps || r.StepsDropped != 44 || r.JobSteps[0].ID != 44 || r.NextStepID != n {
		t.Fatalf("%d steps kept from %d, %d dropped, next id %d", len(r.JobSteps), r.JobSteps[0].ID, r.StepsDropped, r.NextStepID)
	}
	if s := h.jobStep(n - 1); s.GetState() != loomv1.JobState_COMPLETED {
		t.Fatalf("newest step %v", s)
	}
	if h.s.JobStep(jobName(1), 0) != nil {
		t.Fatal("the oldest step is still kept")
	}
	// A live step is never dropped: one started first outlives the others
	// (--overlap: it holds none of the CPUs the others need).
	h.do(createStep("live", func(e *eventsv1.CreateJobStep) { e.Overlap = true }))
	for i := range MaxKeptEndedSteps + 1 {
		h.do(createStep("more" + strconv.Itoa(i)))
		h.tasks(int32(n+1+i), "a", eventsv1.StepState_STEP_EXITED, 0, 0)
		h.tasks(int32(n+1+i), "b", eventsv1.StepState_STEP_EXITED, 0, 0)
	}
	if s := h.s.JobStep(jobName(1), n); s == nil || s.GetState() != loomv1.JobState_RUNNING {
		t.Fatalf("the live step: %v", s)
	}
	// Past MaxLiveSteps running at once (set up here without creating them
	// one by one): refused, recorded with Slurm's reason for the srun
	// waiting on it.
	stored := h.s.runs[r.Key()]
	live := stored.JobSteps[0]
	for len(stored.JobSteps) < MaxLiveSteps+MaxKeptEndedSteps {
		live.ID, live.RequestID = stored.NextStepID, "filler"+strconv.Itoa(int(stored.NextStepID))
		stored.NextStepID++
		stored.JobSteps = append(stored.JobSteps, live)
	}
	c := h.do(createStep("one too many"))
	s := h.jobStep(stored.NextStepID)
	if len(launches(c)) != 0 || s.GetState() != loomv1.JobState_FAILED || !strings.HasPrefix(s.GetReason(), ReasonStepLimit) {
		t.Fatalf("step past the limit: %d launches, %v", len(launches(c)), s)
	}
}

// TestJobStepNodeSelection: srun -w, -x and -r pick the nodes of the job a
// step runs on, in the job's order, with SLURM_NODEID counting within the
// step; a node outside the job, one both named and excluded, more nodes
// named than the step has, or a relative index past the job's nodes are
// refused in Slurm's words.
func TestJobStepNodeSelection(t *testing.T) {
	t.Parallel()
	h := batchOnTwo(t)
	one := func(rid string, mods ...func(*eventsv1.CreateJobStep)) *loomv1.JobStep {
		t.Helper()
		// --overlap: the steps run side by side, whatever they hold.
		c := h.do(createStep(rid, append([]func(*eventsv1.CreateJobStep){func(ev *eventsv1.CreateJobStep) { ev.Ntasks, ev.Overlap = 1, true }}, mods...)...))
		var s *loomv1.JobStep
		steps, _ := h.s.JobSteps(jobName(1), 1)
		for _, st := range steps {
			if st.GetRequestId() == rid {
				s = st
			}
		}
		if s == nil {
			t.Fatalf("%s: no step", rid)
		}
		if s.GetState() == loomv1.JobState_RUNNING {
			ls := launches(c)
			if len(ls) != 1 || ls[0].GetNode() != nodeName(s.GetNodes()[0]) || ls[0].GetNodeIndex() != 0 ||
				ls[0].GetEnv()["SLURMD_NODENAME"] != s.GetNodes()[0] || ls[0].GetEnv()["SLURM_NODEID"] != "0" {
				t.Fatalf("%s: launches %v", rid, ls)
			}
		}
		return s
	}
	for rid, mod := range map[string]func(*eventsv1.CreateJobStep){
		"w": func(ev *eventsv1.CreateJobStep) { ev.Nodelist = []string{"b"} },
		"x": func(ev *eventsv1.CreateJobStep) { ev.Exclude = []string{"a"} },
		"r": func(ev *eventsv1.CreateJobStep) { ev.Relative = 1 },
	} {
		if s := one(rid, mod); s.GetState() != loomv1.JobState_RUNNING || !slices.Equal(s.GetNodes(), []string{"b"}) {
			t.Errorf("-%s b: %v", rid, s)
		}
	}
	if s := one("default"); !slices.Equal(s.GetNodes(), []string{"a"}) {
		t.Errorf("no -w: %v", s)
	}
	// Two tasks with -w b: both nodes, in the job's order (b is node 1).
	c := h.do(createStep("two", func(ev *eventsv1.CreateJobStep) { ev.Ntasks, ev.Nodelist = 2, []string{"b"} }))
	if ls := launches(c); len(ls) != 2 || ls[0].GetNode() != nodeName("a") || ls[1].GetNode() != nodeName("b") || ls[1].GetEnv()["SLURM_NODEID"] != "1" {
		t.Errorf("-n2 -w b: %v", ls)
	}
	// Three tasks with -w b (or -w b,a): the remainder on the job's first
	// node, as Slurm 22.05's (measured: -n3 -w node2 is 2 tasks on node1,
	// 1 on node2), not on the node -w names.
	for rid, list := range map[string][]string{"three-b": {"b"}, "three-ba": {"b", "a"}} {
		c := h.do(createStep(rid, func(ev *eventsv1.CreateJobStep) { ev.Ntasks, ev.Nodelist, ev.Overlap = 3, list, true }))
		ls := launches(c)
		if len(ls) != 2 || ls[0].GetNode() != nodeName("a") || ls[0].GetNtasks() != 2 || ls[0].GetFirstRank() != 0 ||
			ls[1].GetNode() != nodeName("b") || ls[1].GetNtasks() != 1 || ls[1].GetFirstRank() != 2 || ls[1].GetEnv()["SLURM_STEP_TASKS_PER_NODE"] != "2,1" {
			var got []string
			for _, l := range ls {
				got = append(got, fmt.Sprintf("%s: %d task(s) from %d", l.GetNode(), l.GetNtasks(), l.GetFirstRank()))
			}
			t.Errorf("-n3 -w %v: %v, want a: 2 from 0, b: 1 from 2", list, got)
		}
	}
	for rid, mod := range map[string]func(*eventsv1.CreateJobStep){
		"not one of the job's nodes":   func(ev *eventsv1.CreateJobStep) { ev.Nodelist = []string{"z"} },
		"both in --nodelist and":       func(ev *eventsv1.CreateJobStep) { ev.Nodelist, ev.Exclude = []string{"b"}, []string{"b"} },
		"--nodelist names 2 node(s)":   func(ev *eventsv1.CreateJobStep) { ev.Nodelist, ev.NodeCount = []string{"a", "b"}, 1 },
		"--relative=2, the job has 2":  func(ev *eventsv1.CreateJobStep) { ev.Relative = 2 },
		"is before node 1 (--relative": func(ev *eventsv1.CreateJobStep) { ev.Nodelist, ev.Relative = []string{"a"}, 1 },
	} {
		s := one(rid, mod)
		if s.GetState() != loomv1.JobState_FAILED || !strings.HasPrefix(s.GetReason(), "Requested node configuration is not available") ||
			!strings.Contains(s.GetReason(), rid) {
			t.Errorf("%s: %v %q", rid, s.GetState(), s.GetReason())
		}
	}
}

// TestStepRequestsAreBoundedOverall: the requests of waiting steps are
// bounded for every run together (Config.MaxStepRequestBytes), not only
// per run, so that many jobs cannot fill the store; a request taken out
// gives its bytes back.
func TestStepRequestsAreBoundedOverall(t *testing.T) {
	t.Parallel()
	h := batchOnTwo(t)
	h.s.cfg.MaxStepRequestBytes = 3000
	h.do(createStep("whole"))
	big := strings.Repeat("x", 1000)
	for i := range 3 {
		h.do(createStep(fmt.Sprint("wait", i), func(e *eventsv1.CreateJobStep) { e.Env["BIG"] = big }))
	}
	if s := h.jobStep(1); s.GetState() != loomv1.JobState_PENDING {
		t.Fatalf("first waiting step: %v", s)
	}
	if s := h.jobStep(3); s.GetState() != loomv1.JobState_FAILED || !strings.Contains(s.GetReason(), "every job's together (at most 3000)") {
		t.Fatalf("a step past the overall bound: %v", s)
	}
	if h.s.stepReqBytes <= 0 || h.s.stepReqBytes > 3000 {
		t.Fatalf("kept %d bytes of requests", h.s.stepReqBytes)
	}
	// Cancelled, a waiting step gives its bytes back.
	h.do(&eventsv1.CancelJobStep{Job: jobName(1), Cluster: cl, StepId: 1})
	h.do(&eventsv1.CancelJobStep{Job: jobName(1), Cluster: cl, StepId: 2})
	if h.s.stepReqBytes != 0 || len(h.s.stepReqs) != 0 {
		t.Fatalf("after every waiting step ended: %d bytes, %d requests kept", h.s.stepReqBytes, len(h.s.stepReqs))
	}
}

// A step ends as Slurm 22.05's does (a real one showed each case): on a
// node, its first task killed by a signal, else its highest exit code; over
// the nodes, the highest wait(2) status (code<<8|signal). So a SIGKILL
// beats an exit 200 on its node (0:9) and another node's exit 3 beats a
// SIGKILL (3:0). Where Slurm keeps a node's last task's end (tasks that
// exited 5, 0 show 0:0 there), Loom keeps the 5: a failed step never reads
// as a success (slurmStepExit).
func TestStepExitIsSlurms(t *testing.T) {
	t.Parallel()
	h := batchOnTwo(t)
	end := func(step int32, a, b []int32, sa, sb []int32) *loomv1.JobStep {
		h.t.Helper()
		h.do(createStep(fmt.Sprint("s", step)))
		h.do(&eventsv1.TasksChanged{Job: jobName(1), Attempt: 1, StepId: step, Node: nodeName("a"), Cluster: cl,
			State: eventsv1.StepState_STEP_EXITED, ExitCodes: a, ExitSignals: sa})
		h.do(&eventsv1.TasksChanged{Job: jobName(1), Attempt: 1, StepId: step, Node: nodeName("b"), Cluster: cl,
			State: eventsv1.StepState_STEP_EXITED, ExitCodes: b, ExitSignals: sb})
		return h.jobStep(step)
	}
	for i, c := range []struct {
		a, b, sa, sb []int32
		code, sig    int32
	}{
		{a: []int32{3, 137}, sa: []int32{0, 9}, b: []int32{0, 0}, sb: []int32{0, 0}, code: 137, sig: 9},
		{a: []int32{200, 137}, sa: []int32{0, 9}, b: []int32{0, 0}, sb: []int32{0, 0}, code: 137, sig: 9},
		{a: []int32{137, 143}, sa: []int32{9, 15}, b: []int32{0, 0}, sb: []int32{0, 0}, code: 137, sig: 9},
		{a: []int32{0, 3}, sa: []int32{0, 0}, b: []int32{137, 0}, sb: []int32{9, 0}, code: 3, sig: 0},
		{a: []int32{5, 0}, sa: []int32{0, 0}, b: []int32{0, 0}, sb: []int32{0, 0}, code: 5, sig: 0},
		{a: []int32{5, 3}, sa: []int32{0, 0}, b: []int32{0, 1}, sb: []int32{0, 0}, code: 5, sig: 0},
		{a: []int32{0, 0}, sa: []int32{0, 0}, b: []int32{2, 137}, sb: []int32{0, 9}, code: 137, sig: 9},
	} {
		s := end(int32(i), c.a, c.b, c.sa, c.sb)
		if s.GetExitCode() != c.code || s.ExitSignal == nil || s.GetExitSignal() != c.sig {
			t.Errorf("case %d (a %v/%v, b %v/%v): step ended %d signal %d (said: %t), want %d signal %d",
				i, c.a, c.sa, c.b, c.sb, s.GetExitCode(), s.GetExitSignal(), s.ExitSignal != nil, c.code, c.sig)
		}
	}
}

// A program killed by signal n and one that exited 128+n end with the same
// code: the agents' signals keep them apart, for the job, its run and its
// job steps (Slurm's ExitCode 0:9 and 137:0), and a report without them
// (an agent from before) leaves them unknown.
func TestExitSignalReachesJobRunAndSteps(t *testing.T) {
	t.Parallel()
	h := batchOnTwo(t)
	h.do(createStep("r1"))
	h.do(&eventsv1.TasksChanged{Job: jobName(1), Attempt: 1, StepId: 0, Node: nodeName("a"), Cluster: cl,
		State: eventsv1.StepState_STEP_EXITED, ExitCodes: []int32{137, 0}, ExitSignals: []int32{9, 0}})
	h.do(&eventsv1.TasksChanged{Job: jobName(1), Attempt: 1, StepId: 0, Node: nodeName("b"), Cluster: cl,
		State: eventsv1.StepState_STEP_EXITED, ExitCodes: []int32{130, 137}, ExitSignals: []int32{0, 0}})
	// Node b's last task exited 137 (35072 as wait(2) says) above node a's
	// SIGKILL (9): the step's end is b's, as Slurm's (slurmStepExit).
	if s := h.jobStep(0); s.GetExitCode() != 137 || s.ExitSignal == nil || s.GetExitSignal() != 0 ||
		!reflect.DeepEqual(s.GetTaskExitSignals(), []int32{9, 0, 0, 0}) {
		t.Fatalf("step %v: want exit 137 by no signal, task signals 9 0 0 0", s)
	}
	h.do(createStep("r2"))
	h.tasks(1, "a", eventsv1.StepState_STEP_EXITED, 0, 0)
	h.tasks(1, "b", eventsv1.StepState_STEP_EXITED, 137, 0) // no signals said
	if s := h.jobStep(1); s.ExitSignal != nil || len(s.GetTaskExitSignals()) != 0 {
		t.Fatalf("step %v: want its signals unknown", s)
	}
	h.do(&eventsv1.StepChanged{Job: jobName(1), Attempt: 1, Node: nodeName("a"), State: eventsv1.StepState_STEP_EXITED,
		ExitCode: 130, ExitSignal: proto.Int32(0), Cluster: cl})
	j := h.s.Job(jobName(1))
	if j.GetState() != loomv1.JobState_FAILED || j.GetExitCode() != 130 || j.ExitSignal == nil || j.GetExitSignal() != 0 {
		t.Fatalf("job %v: want FAILED exit 130 signal 0", j)
	}
	if runs := views.Job(h.s, jobName(1), h.now).GetRuns(); len(runs) != 1 || runs[0].ExitSignal == nil || runs[0].GetExitSignal() != 0 || runs[0].GetExitCode() != 130 {
		t.Fatalf("runs %v: want exit 130 signal 0", runs)
	}
	// Killed by SIGINT, then requeued and ended by an agent that does not
	// say: unknown again.
	h2 := newHarness(t)
	h2.node("a", 4)
	h2.submitJob(&loomv1.Job{Name: jobName(2), JobId: "2", Cluster: cl, NodeCount: 1, Script: "#!/bin/sh\n", MaxRetries: 1})
	h2.do(&eventsv1.StepChanged{Job: jobName(2), Attempt: 1, Node: nodeName("a"), State: eventsv1.StepState_STEP_EXITED,
		ExitCode: 130, ExitSignal: proto.Int32(2), Cluster: cl})
	j = h2.s.Job(jobName(2))
	if runs := views.Job(h2.s, jobName(2), h2.now).GetRuns(); len(runs) < 1 || runs[0].GetExitSignal() != 2 || j.ExitSignal != nil {
		t.Fatalf("requeued job %v: want run 1 signal 2, the job's cleared", j)
	}
}

// TestDerivedExitOutlivesDroppedSteps: a run's DerivedExitCode (Slurm's: the
// highest end of its job steps, code<<8 or the signal) is kept by the
// scheduler as each step ends, so a failed step the run no longer keeps
// (only its newest MaxKeptEndedSteps ended ones) still shows: 300 steps of
// which only the first failed end 3:0 for the job, its run, the stored
// record and the final JobChanged the accounting history keeps. A record
// from before it was kept reads it from its kept steps.
func TestDerivedExitOutlivesDroppedSteps(t *testing.T) {
	t.Parallel()
	want := func(what string, code, sig *int32, wc, ws int32) {
		t.Helper()
		if code == nil || sig == nil || *code != wc || *sig != ws {
			t.Errorf("%s: derived exit %s:%s, want %d:%d", what, optInt(code), optInt(sig), wc, ws)
		}
	}
	h := batchOnTwo(t)
	endStep := func(i int32, a, b, sa, sb []int32) {
		h.t.Helper()
		h.do(createStep("r" + strconv.Itoa(int(i))))
		h.do(&eventsv1.TasksChanged{Job: jobName(1), Attempt: 1, StepId: i, Node: nodeName("a"), Cluster: cl,
			State: eventsv1.StepState_STEP_EXITED, ExitCodes: a, ExitSignals: sa})
		h.do(&eventsv1.TasksChanged{Job: jobName(1), Attempt: 1, StepId: i, Node: nodeName("b"), Cluster: cl,
			State: eventsv1.StepState_STEP_EXITED, ExitCodes: b, ExitSignals: sb})
	}
	zero := []int32{0, 0}
	endStep(0, []int32{3, 0}, zero, zero, zero)
	const n = 300
	for i := int32(1); i < n; i++ {
		endStep(i, zero, zero, zero, zero)
	}
	r := h.s.Run(jobName(1), 1)
	if h.s.JobStep(jobName(1), 0) != nil || r.StepsDropped != n-MaxKeptEndedSteps {
		t.Fatalf("step 0 still kept, or %d dropped", r.StepsDropped)
	}
	j := views.Job(h.s, jobName(1), h.now)
	want("job", j.DerivedExitCode, j.DerivedExitSignal, 3, 0)
	if runs := j.GetRuns(); len(runs) != 1 {
		t.Fatalf("runs %v", runs)
	} else {
		want("run", runs[0].DerivedExitCode, runs[0].DerivedExitSignal, 3, 0)
	}
	// As stored (the run record is JSON).
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back Run
	if err := json.Unmarshal(b, &back); err != nil || back.DerivedExit == nil || *back.DerivedExit != 3<<8 {
		t.Fatalf("stored run: %v %v, want derived exit %d", back.DerivedExit, err, 3<<8)
	}
	// The job ends: its final JobChanged (the accounting history's) has it.
	c := h.step(1, 1, "a", eventsv1.StepState_STEP_EXITED, 0)
	var final *loomv1.Job
	for _, e := range c.Emits {
		if jc, ok := e.Payload.(*eventsv1.JobChanged); ok && jc.GetJob().GetState().Terminal() {
			final = jc.GetJob()
		}
	}
	if final == nil || len(final.GetRuns()) != 1 {
		t.Fatalf("no final JobChanged with its run: %v", final)
	}
	want("final job", final.DerivedExitCode, final.DerivedExitSignal, 3, 0)
	want("final run", final.GetRuns()[0].DerivedExitCode, final.GetRuns()[0].DerivedExitSignal, 3, 0)

	// A record from before it was kept: its kept steps say (a SIGKILL,
	// 0:9), and the next step's end is taken in with them (exit 1 beats it).
	h2 := batchOnTwo(t)
	h = h2
	endStep(0, []int32{0, 137}, zero, []int32{0, 9}, zero)
	stored := h2.s.runs[RunKey(jobName(1), 1)]
	stored.DerivedExit = nil
	j = views.Job(h2.s, jobName(1), h2.now)
	want("old record", j.DerivedExitCode, j.DerivedExitSignal, 0, 9)
	endStep(1, []int32{1, 0}, zero, zero, zero)
	j = views.Job(h2.s, jobName(1), h2.now)
	want("old record, one more step", j.DerivedExitCode, j.DerivedExitSignal, 1, 0)
	// A job that has not started has none.
	h2.submitJob(&loomv1.Job{Name: jobName(2), JobId: "2", Cluster: cl, NodeCount: 1, Script: "#!/bin/sh\n", Hold: true})
	if j := views.Job(h2.s, jobName(2), h2.now); j.GetStartTime() != nil || j.DerivedExitCode != nil {
		t.Errorf("pending job: %v", j)
	}
}

// optInt shows an optional field: its value, or "unset".
func optInt(p *int32) string {
	if p == nil {
		return "unset"
	}
	return strconv.Itoa(int(*p))
}

// TestStepGPURequest: a step's own --gpus and --gpus-per-node (--gres=gpu:N)
// decide which of the job's GPUs it gets and holds, as Slurm 22.05's (measured
// beside it in an sbatch -N1 --gpus=4 job: srun --gpus=2 --exact and
// --gpus-per-node=2 --exact beside it see 0,1 and 2,3; a third --gpus=1 step
// waits, "step creation temporarily disabled", and gets 0 when the first
// ends; --gpus=5 is refused). Every task of the node sees all of the step's
// GPUs there. A step with only the job's SLURM_GPUS that srun took
// (gpus_inherited) takes the job's request, all four GPUs, and waits for
// them (TestStepTakesJobGPUs).
func TestStepGPURequest(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	h.gpuNode("a3-0001", "b1")
	h.submitJob(job(1, 1, 4, func(j *loomv1.Job) { j.Command = nil; j.Script = "srun x"; j.Ntasks = 8 }))
	h.reportRunning(1)
	exact := func(e *eventsv1.CreateJobStep) { e.Ntasks, e.Exact = 2, true }
	devices := func(c *Change) string {
		t.Helper()
		ls := launches(c)
		if len(ls) != 1 {
			t.Fatalf("%d launches, want 1", len(ls))
		}
		env := ls[0].GetEnv()
		if env["SLURM_STEP_GPUS"] != env["CUDA_VISIBLE_DEVICES"] || env["GPU_DEVICE_ORDINAL"] != env["CUDA_VISIBLE_DEVICES"] || ls[0].GetTaskGpus() != nil {
			t.Fatalf("launch env CUDA_VISIBLE_DEVICES %q, SLURM_STEP_GPUS %q, GPU_DEVICE_ORDINAL %q, task GPUs %v: want the same, none per task",
				env["CUDA_VISIBLE_DEVICES"], env["SLURM_STEP_GPUS"], env["GPU_DEVICE_ORDINAL"], ls[0].GetTaskGpus())
		}
		return env["CUDA_VISIBLE_DEVICES"]
	}
	if got := devices(h.do(createStep("gpus2", exact, func(e *eventsv1.CreateJobStep) { e.Gpus = 2 }))); got != "0,1" {
		t.Fatalf("--gpus=2: GPUs %q, want 0,1", got)
	}
	if got := devices(h.do(createStep("gpn2", exact, func(e *eventsv1.CreateJobStep) { e.GpusPerNode = 2 }))); got != "2,3" {
		t.Fatalf("--gpus-per-node=2 beside it: GPUs %q, want 2,3", got)
	}
	if s := h.jobStep(1); s.GetGpusPerNode() != 2 {
		t.Fatalf("the --gpus-per-node step's record: gpus_per_node %d, want 2", s.GetGpusPerNode())
	}
	// The job's SLURM_GPUS only: the step takes the job's request
	// (stepGPUDefaults), its four GPUs, which the two steps hold.
	if c := h.do(createStep("job's", exact, func(e *eventsv1.CreateJobStep) { e.Gpus, e.GpusInherited = 4, true })); len(launches(c)) != 0 ||
		h.jobStep(2).GetState() != loomv1.JobState_PENDING || h.jobStep(2).GetGpusPerNode() != 4 {
		t.Fatalf("the job's SLURM_GPUS only: %d launches, %v; want it PENDING for the job's 4 GPUs a node", len(launches(c)), h.jobStep(2))
	}
	if c := h.do(createStep("wait", exact, func(e *eventsv1.CreateJobStep) { e.Gpus = 1 })); len(launches(c)) != 0 ||
		h.jobStep(3).GetState() != loomv1.JobState_PENDING || h.jobStep(3).GetReason() != ReasonStepBusy {
		t.Fatalf("--gpus=1 with every GPU held: %d launches, %v; want it PENDING", len(launches(c)), h.jobStep(3))
	}
	h.do(createStep("too many", exact, func(e *eventsv1.CreateJobStep) { e.Gpus = 5 }))
	if s := h.jobStep(4); s.GetState() != loomv1.JobState_FAILED || !strings.Contains(s.GetReason(), "Invalid generic resource (gres) specification") {
		t.Fatalf("--gpus=5 in a 4-GPU job: %v; want it FAILED, Slurm's reason", s)
	}
	if got := devices(h.tasks(0, "a3-0001", eventsv1.StepState_STEP_EXITED, 0, 0)); got != "0" {
		t.Fatalf("the waiting step once the --gpus=2 step ended: GPUs %q, want 0", got)
	}
}

// TestStepGPURequestSpread: a many-node step's --gpus is one GPU on each of
// its nodes, the rest on the first as far as the job has GPUs there, as
// Slurm 22.05's (measured: -N2 --gpus=3 on 4 GPUs a node is 2 and 1,
// --gpus=5 4 and 1, --gpus=1 refused, "Step requested gres=gpu:1 is less
// than the requested min nodes=2").
func TestStepGPURequestSpread(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		gpus int32
		want []string // CUDA_VISIBLE_DEVICES on each node; nil: refused
	}{
		{3, []string{"0,1", "0"}},
		{5, []string{"0,1,2,3", "0"}},
		{8, []string{"0,1,2,3", "0,1,2,3"}},
		{1, nil},
		{9, nil},
	} {
		h := newSpecHarness(t, Config{})
		h.gpuNode("a3-0001", "b1")
		h.gpuNode("a3-0002", "b1")
		h.submitJob(job(1, 2, 4, func(j *loomv1.Job) { j.Command = nil; j.Script = "srun x"; j.Ntasks = 2 }))
		h.reportRunning(1)
		c := h.do(createStep("spread", func(e *eventsv1.CreateJobStep) { e.Gpus, e.NodeCount, e.Ntasks, e.Exact = tc.gpus, 2, 2, true }))
		var got []string
		for _, l := range launches(c) {
			got = append(got, l.GetEnv()["CUDA_VISIBLE_DEVICES"])
		}
		if tc.want == nil {
			if s := h.jobStep(0); len(got) != 0 || s.GetState() != loomv1.JobState_FAILED ||
				!strings.Contains(s.GetReason(), "Invalid generic resource (gres) specification") {
				t.Errorf("-N2 --gpus=%d: launched %v, step %v; want it FAILED", tc.gpus, got, s)
			}
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("-N2 --gpus=%d: GPUs by node %q, want %q", tc.gpus, got, tc.want)
		}
	}
}

// TestStepTakesJobGPUs: a step that asks for no GPUs of its own takes its
// job's GPU request (stepGPUDefaults), as Slurm 22.05's is "allocated all
// of the generic resources that have been allocated to the job": it sees
// and holds them, so that a second such --exact step waits, and its record
// says what it took (scontrol show step: TresPerNode=gres:gpu:2 for a
// --gres=gpu:2 job, TresPerStep for --gpus, TresPerTask for
// --gpus-per-task); one that asked for none (no_gpus: srun --gres=none)
// sees none and holds none; one with a request of its own keeps it.
func TestStepTakesJobGPUs(t *testing.T) {
	t.Parallel()
	type want struct {
		devs           []string // CUDA_VISIBLE_DEVICES; with per-task GPUs, each task's
		gpn, gpus, gpt int32    // the step's record
		second         bool     // a second plain step waits
	}
	for _, tc := range []struct {
		name string
		job  func(*loomv1.Job)
		step func(*eventsv1.CreateJobStep)
		want want
	}{
		{"--gres=gpu:2", func(j *loomv1.Job) { j.GpusPerNode, j.GresGpus = 2, true }, nil,
			want{devs: []string{"0,1"}, gpn: 2, second: true}},
		{"--gpus-per-node=2", func(j *loomv1.Job) { j.GpusPerNode = 2 }, nil,
			want{devs: []string{"0,1"}, gpn: 2, second: true}},
		{"--gpus=2", func(j *loomv1.Job) { j.GpusPerNode, j.Gpus = 0, 2 }, nil,
			want{devs: []string{"0,1"}, gpus: 2, second: true}},
		{"--gpus=2, SLURM_GPUS", func(j *loomv1.Job) { j.GpusPerNode, j.Gpus = 0, 2 },
			func(e *eventsv1.CreateJobStep) { e.Gpus, e.GpusInherited = 2, true },
			want{devs: []string{"0,1"}, gpus: 2, second: true}},
		{"--gpus-per-task=1", func(j *loomv1.Job) { j.GpusPerNode, j.GpusPerTask = 2, 1 }, nil,
			want{devs: []string{"0"}, gpt: 1}},
		{"--gres=gpu:2, srun --gres=none", func(j *loomv1.Job) { j.GpusPerNode, j.GresGpus = 2, true },
			func(e *eventsv1.CreateJobStep) { e.NoGpus = true },
			want{devs: []string{""}}},
		{"--gpus=2, srun --gres=none", func(j *loomv1.Job) { j.GpusPerNode, j.Gpus = 0, 2 },
			func(e *eventsv1.CreateJobStep) { e.Gpus, e.GpusInherited, e.NoGpus = 2, true, true },
			want{devs: []string{""}, gpus: 2}},
		{"--gres=gpu:2, srun --gpus=1", func(j *loomv1.Job) { j.GpusPerNode, j.GresGpus = 2, true },
			func(e *eventsv1.CreateJobStep) { e.Gpus = 1 },
			want{devs: []string{"0"}, gpus: 1, second: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newSpecHarness(t, Config{})
			h.gpuNode("a3-0001", "b1")
			h.submitJob(job(1, 1, 0, func(j *loomv1.Job) { j.Command = nil; j.Script = "srun x"; j.Ntasks = 2 }, tc.job))
			h.reportRunning(1)
			mods := []func(*eventsv1.CreateJobStep){func(e *eventsv1.CreateJobStep) { e.Ntasks, e.Exact = 1, true }}
			if tc.step != nil {
				mods = append(mods, tc.step)
			}
			ls := launches(h.do(createStep("first", mods...)))
			if len(ls) != 1 {
				t.Fatalf("%d launches, want 1", len(ls))
			}
			env := ls[0].GetEnv()
			devs := []string{env["CUDA_VISIBLE_DEVICES"]}
			if g := ls[0].GetTaskGpus(); g != nil {
				devs = g
			} else if env["SLURM_STEP_GPUS"] != devs[0] || env["GPU_DEVICE_ORDINAL"] != devs[0] {
				t.Errorf("SLURM_STEP_GPUS %q, GPU_DEVICE_ORDINAL %q; want CUDA_VISIBLE_DEVICES's %q", env["SLURM_STEP_GPUS"], env["GPU_DEVICE_ORDINAL"], devs[0])
			}
			if _, set := env["CUDA_VISIBLE_DEVICES"]; !slices.Equal(devs, tc.want.devs) || !set {
				t.Errorf("the step's GPUs %q (CUDA_VISIBLE_DEVICES set: %v), want %q", devs, set, tc.want.devs)
			}
			s := h.jobStep(0)
			if s.GetGpusPerNode() != tc.want.gpn || s.GetGpus() != tc.want.gpus || s.GetGpusPerTask() != tc.want.gpt {
				t.Errorf("the step's record: gpus_per_node %d, gpus %d, gpus_per_task %d; want %d, %d, %d",
					s.GetGpusPerNode(), s.GetGpus(), s.GetGpusPerTask(), tc.want.gpn, tc.want.gpus, tc.want.gpt)
			}
			c := h.do(createStep("second", func(e *eventsv1.CreateJobStep) { e.Ntasks, e.Exact = 1, true }))
			if waits := h.jobStep(1).GetState() == loomv1.JobState_PENDING; waits != tc.want.second || waits == (len(launches(c)) == 1) {
				t.Errorf("a second plain step: %v, %d launches; want waiting %v", h.jobStep(1), len(launches(c)), tc.want.second)
			}
		})
	}
}

// TestStepJobGPUsRefused: a step that takes its job's --gpus=2 on one node
// of a two-node job, which has one GPU there, is refused as Slurm 22.05's
// (measured: srun -N1 in sbatch -N2 --gpus=2, "Invalid generic resource
// (gres) specification"), and with --overlap the job's GPUs are seen, not
// held.
func TestStepJobGPUsRefused(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	h.gpuNode("a3-0001", "b1")
	h.gpuNode("a3-0002", "b1")
	h.submitJob(job(1, 2, 0, func(j *loomv1.Job) { j.Command = nil; j.Script = "srun x"; j.Ntasks = 2; j.Gpus = 2 }))
	h.reportRunning(1)
	h.do(createStep("one node", func(e *eventsv1.CreateJobStep) { e.NodeCount, e.Ntasks = 1, 1 }))
	if s := h.jobStep(0); s.GetState() != loomv1.JobState_FAILED || !strings.Contains(s.GetReason(), "Invalid generic resource (gres) specification") {
		t.Fatalf("a one-node step of a -N2 --gpus=2 job: %v; want it FAILED, Slurm's reason", s)
	}
	ls := launches(h.do(createStep("overlap", func(e *eventsv1.CreateJobStep) { e.Overlap = true })))
	ls2 := launches(h.do(createStep("overlap 2", func(e *eventsv1.CreateJobStep) { e.Overlap = true })))
	if len(ls) != 2 || len(ls2) != 2 {
		t.Fatalf("two --overlap steps: %d and %d launches, want 2 each (neither holds the GPUs)", len(ls), len(ls2))
	}
	for _, l := range append(ls, ls2...) {
		if got := l.GetEnv()["CUDA_VISIBLE_DEVICES"]; got != "0" {
			t.Errorf("an --overlap step on %s: GPUs %q, want the job's one there", l.GetNode(), got)
		}
	}
}

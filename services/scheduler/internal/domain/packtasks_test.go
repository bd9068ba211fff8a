package domain

import (
	"slices"
	"testing"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestTasksPackedAsSlurm: each row is a batch job measured on Slurm 22.05
// (slurm-local.sh, 4-CPU nodes, select/cons_tres CR_Core): the run's
// tasks and CPUs per node, its SLURM_TASKS_PER_NODE and
// SLURM_JOB_CPUS_PER_NODE are Slurm's, not an even spread. busy CPUs of
// the last node are held by an earlier job first; --exclusive keeps the
// even spread over whole nodes, as Slurm. The ranges placed at their wider
// widths (-N1-3 -n5 on 4-CPU nodes, -N1-2 -n4 with 2 CPUs free on node1)
// are TestNodeRangeWidths' rows.
func TestTasksPackedAsSlurm(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		shape          string
		nodes          int   // 4-CPU nodes in the partition
		busy           int32 // CPUs held on the last node
		min, most      int32
		ntasks, cpt    int32
		exclusive      bool
		tasks, cpus    []int32
		tpnEnv, cpnEnv string
	}{
		{"-N1-2 -n4", 2, 0, 1, 2, 4, 0, false, []int32{3, 1}, []int32{3, 1}, "3,1", "3,1"},
		{"-N2 -n4", 2, 0, 2, 0, 4, 0, false, []int32{3, 1}, []int32{3, 1}, "3,1", "3,1"},
		{"-N2 -n5", 2, 0, 2, 0, 5, 0, false, []int32{4, 1}, []int32{4, 1}, "4,1", "4,1"},
		{"-N2 -n6", 2, 0, 2, 0, 6, 0, false, []int32{4, 2}, []int32{4, 2}, "4,2", "4,2"},
		{"-N1-3 -n4", 3, 0, 1, 3, 4, 0, false, []int32{2, 1, 1}, []int32{2, 1, 1}, "2,1(x2)", "2,1(x2)"},
		{"-N3 -n9", 3, 0, 3, 0, 9, 0, false, []int32{4, 4, 1}, []int32{4, 4, 1}, "4(x2),1", "4(x2),1"},
		{"-N2 -n3 -c2", 2, 0, 2, 0, 3, 2, false, []int32{2, 1}, []int32{4, 2}, "2,1", "4,2"},
		{"-N2 -n4 -c2", 2, 0, 2, 0, 4, 2, false, []int32{2, 2}, []int32{4, 4}, "2(x2)", "4(x2)"},
		{"-N2 -n4 --exclusive", 2, 0, 2, 0, 4, 0, true, []int32{2, 2}, []int32{4, 4}, "2(x2)", "4(x2)"},
		{"-N1-2 -n4 --exclusive", 2, 0, 1, 2, 4, 0, true, []int32{2, 2}, []int32{4, 4}, "2(x2)", "4(x2)"},
		// node2 with 3 CPUs free: 4 and 1 (measured with 2 free, the same).
		{"-N2 -n5, node2 3 free", 2, 1, 2, 0, 5, 0, false, []int32{4, 1}, []int32{4, 1}, "4,1", "4,1"},
	} {
		t.Run(tc.shape, func(t *testing.T) {
			t.Parallel()
			h := newSpecHarness(t, Config{})
			hosts := make([]string, tc.nodes)
			for i := range hosts {
				hosts[i] = "node" + string(rune('1'+i))
				h.do(&eventsv1.NodeChanged{Node: &loomv1.Node{Name: nodeName(hosts[i]), Cluster: cl, Hostname: hosts[i],
					State: loomv1.Node_READY, NodePool: "cpu", MachineType: "n2-standard-4", Role: "compute"}})
			}
			id := 1
			if tc.busy > 0 {
				h.submitJob(job(1, 1, 0, func(j *loomv1.Job) {
					j.Partition, j.Ntasks, j.Nodelist = "cpu", tc.busy, []string{hosts[tc.nodes-1]}
				}))
				h.wantState(1, loomv1.JobState_RUNNING, "")
				id = 2
			}
			c := h.submitJob(job(id, tc.min, 0, nodeRange(tc.most), func(j *loomv1.Job) {
				j.Partition, j.Command, j.Script = "cpu", nil, "x"
				j.Ntasks, j.CpusPerTask, j.Exclusive = tc.ntasks, tc.cpt, tc.exclusive
			}))
			h.wantState(id, loomv1.JobState_RUNNING, "")
			r := h.s.Run(jobName(id), 1)
			if !slices.Equal(r.Tasks, tc.tasks) || !slices.Equal(r.CPUs, tc.cpus) || !slices.Equal(r.Hostnames, hosts[:len(tc.tasks)]) {
				t.Fatalf("run on %v: tasks %v CPUs %v; want %v tasks %v CPUs %v", r.Hostnames, r.Tasks, r.CPUs, hosts[:len(tc.tasks)], tc.tasks, tc.cpus)
			}
			// The job record carries the run's layout for the views
			// (salloc's environment, sacct, scontrol).
			if j := h.job(id); !slices.Equal(j.GetNodeTasks(), tc.tasks) || !slices.Equal(j.GetNodeCpus(), tc.cpus) {
				t.Fatalf("job record: node_tasks %v node_cpus %v; want %v %v", j.GetNodeTasks(), j.GetNodeCpus(), tc.tasks, tc.cpus)
			}
			ss := starts(c)
			if len(ss) != 1 {
				t.Fatalf("batch job: %d StartSteps", len(ss))
			}
			env := ss[0].GetEnv()
			if env["SLURM_TASKS_PER_NODE"] != tc.tpnEnv || env["SLURM_JOB_CPUS_PER_NODE"] != tc.cpnEnv {
				t.Fatalf("SLURM_TASKS_PER_NODE %q SLURM_JOB_CPUS_PER_NODE %q, want %q %q",
					env["SLURM_TASKS_PER_NODE"], env["SLURM_JOB_CPUS_PER_NODE"], tc.tpnEnv, tc.cpnEnv)
			}
			// A bare srun in the allocation runs the job's layout.
			got, err := StepLayout(r.Tasks, 0, 0, 0)
			if err != nil || !slices.Equal(got, tc.tasks) {
				t.Fatalf("bare srun layout %v, %v; want %v", got, err, tc.tasks)
			}
		})
	}
}

// TestRunLayoutRequeue: the job record carries its run's layout
// (node_tasks, node_cpus) while it runs; a requeue clears it with the
// nodes (a pending job has no layout to show), and the next run records
// its own.
func TestRunLayoutRequeue(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	for _, host := range []string{"node1", "node2"} {
		h.do(&eventsv1.NodeChanged{Node: &loomv1.Node{Name: nodeName(host), Cluster: cl, Hostname: host,
			State: loomv1.Node_READY, NodePool: "cpu", MachineType: "n2-standard-4", Role: "compute"}})
	}
	h.submitJob(job(1, 2, 0, func(j *loomv1.Job) { j.Partition, j.Command, j.Script, j.Ntasks = "cpu", nil, "x", 4 }))
	h.wantState(1, loomv1.JobState_RUNNING, "")
	want := []int32{3, 1}
	if j := h.job(1); !slices.Equal(j.GetNodeTasks(), want) || !slices.Equal(j.GetNodeCpus(), want) {
		t.Fatalf("job record: node_tasks %v node_cpus %v; want %v and %v", j.GetNodeTasks(), j.GetNodeCpus(), want, want)
	}
	h.do(&eventsv1.UpdateJob{Job: jobName(1), Cluster: cl, Action: ActionRequeue})
	if j := h.job(1); j.GetState() != loomv1.JobState_PENDING || j.GetNodeTasks() != nil || j.GetNodeCpus() != nil {
		t.Fatalf("requeued: %v node_tasks %v node_cpus %v; want PENDING without a layout", j.GetState(), j.GetNodeTasks(), j.GetNodeCpus())
	}
	h.step(1, 1, "node1", eventsv1.StepState_STEP_KILLED, 143)
	h.step(1, 1, "node2", eventsv1.StepState_STEP_KILLED, 143)
	h.tick(0)
	h.wantState(1, loomv1.JobState_RUNNING, "")
	if j := h.job(1); j.GetRestartCount() != 1 || !slices.Equal(j.GetNodeTasks(), want) || !slices.Equal(j.GetNodeCpus(), want) {
		t.Fatalf("second run: restarts %d node_tasks %v node_cpus %v; want 1, %v and %v",
			j.GetRestartCount(), j.GetNodeTasks(), j.GetNodeCpus(), want, want)
	}
}

// TestCommandJobTasksPacked: a command job (an implicit srun on every node)
// packs its -n as a batch job does, now that the job record carries the
// run's layout (node_tasks, node_cpus) for the views that cannot recompute
// it: -N2 -n4 on two idle 4-CPU nodes holds 3 and 1 CPUs, and its
// SLURM_JOB_CPUS_PER_NODE and SLURM_CPUS_ON_NODE say so.
func TestCommandJobTasksPacked(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	for _, host := range []string{"node1", "node2"} {
		h.do(&eventsv1.NodeChanged{Node: &loomv1.Node{Name: nodeName(host), Cluster: cl, Hostname: host,
			State: loomv1.Node_READY, NodePool: "cpu", MachineType: "n2-standard-4", Role: "compute"}})
	}
	c := h.submitJob(job(1, 2, 0, func(j *loomv1.Job) { j.Partition, j.Ntasks = "cpu", 4 }))
	h.wantState(1, loomv1.JobState_RUNNING, "")
	want := []int32{3, 1}
	if r := h.s.Run(jobName(1), 1); !slices.Equal(r.Tasks, want) || !slices.Equal(r.CPUs, want) {
		t.Fatalf("run: tasks %v CPUs %v; want %v and %v", r.Tasks, r.CPUs, want, want)
	}
	if j := h.job(1); !slices.Equal(j.GetNodeTasks(), want) || !slices.Equal(j.GetNodeCpus(), want) {
		t.Fatalf("job record: node_tasks %v node_cpus %v; want %v and %v", j.GetNodeTasks(), j.GetNodeCpus(), want, want)
	}
	ss := starts(c)
	if len(ss) != 2 {
		t.Fatalf("command job: %d StartSteps, want one per node", len(ss))
	}
	for _, s := range ss {
		env := s.GetEnv()
		on := []string{"3", "1"}[s.GetNodeIndex()]
		if env["SLURM_JOB_CPUS_PER_NODE"] != "3,1" || env["SLURM_CPUS_ON_NODE"] != on {
			t.Fatalf("node %d: SLURM_JOB_CPUS_PER_NODE %q SLURM_CPUS_ON_NODE %q, want \"3,1\" %q",
				s.GetNodeIndex(), env["SLURM_JOB_CPUS_PER_NODE"], env["SLURM_CPUS_ON_NODE"], on)
		}
	}
}

// TestStepTasksFollowPackedLayout: an srun -n inside a packed job lays its
// tasks out over the job's tasks as Slurm 22.05's block layout does
// (slurm_step_layout.c: one task a node per round while a node has CPUs
// left, then round the nodes again): -n4 in an -N2 -n4 job packed 3,1 is
// 3,1, not an even 2,2 that puts two tasks on node2's one CPU, and with
// -c1 (--exact) it runs rather than being refused there.
func TestStepTasksFollowPackedLayout(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	for _, host := range []string{"node1", "node2"} {
		h.do(&eventsv1.NodeChanged{Node: &loomv1.Node{Name: nodeName(host), Cluster: cl, Hostname: host,
			State: loomv1.Node_READY, NodePool: "cpu", MachineType: "n2-standard-4", Role: "compute"}})
	}
	h.submitJob(job(1, 2, 0, func(j *loomv1.Job) { j.Partition, j.Command, j.Script, j.Ntasks = "cpu", nil, "x", 4 }))
	h.reportRunning(1)
	h.wantState(1, loomv1.JobState_RUNNING, "")
	if r := h.s.Run(jobName(1), 1); !slices.Equal(r.Tasks, []int32{3, 1}) {
		t.Fatalf("run's tasks %v, want [3 1]", r.Tasks)
	}
	for _, tc := range []struct {
		rid  string
		mod  func(*eventsv1.CreateJobStep)
		want []int32
	}{
		{"n4", func(ev *eventsv1.CreateJobStep) { ev.Ntasks, ev.Overlap = 4, true }, []int32{3, 1}},
		{"n4c1", func(ev *eventsv1.CreateJobStep) { ev.Ntasks, ev.CpusPerTask, ev.Overlap = 4, 1, true }, []int32{3, 1}},
		{"n5", func(ev *eventsv1.CreateJobStep) { ev.Ntasks, ev.Overlap = 5, true }, []int32{4, 1}},
		{"N2", func(ev *eventsv1.CreateJobStep) { ev.NodeCount, ev.Overlap = 2, true }, []int32{3, 1}},
	} {
		c := h.do(createStep(tc.rid, tc.mod))
		var got []int32
		for _, l := range launches(c) {
			got = append(got, l.GetNtasks())
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("step %s: tasks %v, want %v (reasons: %v)", tc.rid, got, tc.want, stepReasons(h))
		}
	}
}

func stepReasons(h *harness) []string {
	var out []string
	for id := int32(1); ; id++ {
		s := h.s.JobStep(jobName(1), id)
		if s == nil {
			return out
		}
		out = append(out, s.GetReason())
	}
}

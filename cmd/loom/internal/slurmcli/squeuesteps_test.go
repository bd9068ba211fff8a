package slurmcli

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/cmd/loom/internal/fakegw"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// stepsGateway has a running batch job 44 on two nodes with a running
// step 44.0 (and an ended 44.1), a running job 45 with no steps, and a
// pending job 46, as Slurm 22.05 shows such a queue.
func stepsGateway() *fakegw.Gateway {
	start := timestamppb.New(testNow.Add(-3 * time.Second))
	job := func(id string, st loomv1.JobState) *loomv1.Job {
		return &loomv1.Job{Name: "projects/default/jobs/" + id, JobId: id, Cluster: demoCluster, User: "alice", Partition: "debug",
			State: st, Script: "#!/bin/sh\nsrun sleep 30\n", Nodes: []string{"node1", "node2"}, BatchHost: "node1", StartTime: start,
			CpusPerTask: 2, TimeLimitSeconds: 300}
	}
	return &fakegw.Gateway{
		Jobs: []*loomv1.Job{job("44", loomv1.JobState_RUNNING), job("45", loomv1.JobState_RUNNING), job("46", loomv1.JobState_PENDING)},
		Steps: []*loomv1.JobStep{
			{Name: "projects/default/jobs/44/steps/0", Job: "projects/default/jobs/44", StepId: 0, State: loomv1.JobState_RUNNING,
				Command: []string{"/bin/sleep", "30"}, Nodes: []string{"node1", "node2"}, TasksPerNode: []int32{1, 1}, NumTasks: 2, StartTime: start},
			{Name: "projects/default/jobs/44/steps/1", Job: "projects/default/jobs/44", StepId: 1, State: loomv1.JobState_COMPLETED,
				Command: []string{"true"}, Nodes: []string{"node1"}, NumTasks: 1, StartTime: start},
		},
		Partitions: []*loomv1.Partition{{Name: "debug", Default: true, State: "up", MaxTime: "UNLIMITED", Nodes: []string{"node1", "node2"}}},
	}
}

func TestSqueueSteps(t *testing.T) {
	t.Parallel()
	g := stepsGateway()
	code, out, errOut := run(t, g, "squeue", Env{}, "-s")
	want := "         STEPID     NAME PARTITION     USER      TIME NODELIST\n" +
		"           44.0    sleep     debug    alice      0:03 node[1-2]\n" +
		"       44.batch    batch     debug    alice      0:03 node1\n" +
		"       45.batch    batch     debug    alice      0:03 node1\n"
	if code != 0 || out != want || errOut != "" {
		t.Errorf("squeue -s: exit %d, stderr %q, stdout\n%s\nwant\n%s", code, errOut, out, want)
	}
	// One step, as Slurm's -s 44.0 (getopt leaves the list a word of its own).
	if code, out, _ := run(t, g, "squeue", Env{}, "-s", "44.0", "-h"); code != 0 || out != "           44.0    sleep     debug    alice      0:03 node[1-2]\n" {
		t.Errorf("squeue -s 44.0 -h: exit %d, %q", code, out)
	}
	if code, out, _ := run(t, g, "squeue", Env{}, "--steps=44.batch", "-h", "-o", "%i %A %N"); code != 0 || out != "44.batch 1 node1\n" {
		t.Errorf("squeue --steps=44.batch -o: exit %d, %q", code, out)
	}
}

func TestScontrolShowStepAndPing(t *testing.T) {
	t.Parallel()
	g := stepsGateway()
	// A step's own time limit is UNLIMITED whatever its job's (5 minutes
	// here), as Slurm 22.05 shows it; 2 tasks on 2 nodes are Cyclic.
	code, out, errOut := run(t, g, "scontrol", Env{}, "show", "step", "44.0")
	want := "StepId=44.0 UserId=alice StartTime=" + testNow.Add(-3*time.Second).UTC().Format("2006-01-02T15:04:05") + " TimeLimit=UNLIMITED\n" +
		"   State=RUNNING Partition=debug NodeList=node[1-2]\n" +
		"   Nodes=2 CPUs=4 Tasks=2 Name=sleep Network=(null)\n" +
		"   TRES=cpu=4,mem=0,node=2\n" +
		"   ResvPorts=(null)\n" +
		"   CPUFreqReq=Default Dist=Cyclic\n" +
		"   SrunHost:Pid=(null):0\n\n"
	if code != 0 || out != want || errOut != "" {
		t.Errorf("scontrol show step 44.0: exit %d, stderr %q, stdout\n%s\nwant\n%s", code, errOut, out, want)
	}
	// Every running step, batch steps first per job.
	if code, out, _ := run(t, g, "scontrol", Env{}, "show", "step"); code != 0 ||
		strings.Count(out, "StepId=") != 3 || strings.Index(out, "StepId=44.batch") > strings.Index(out, "StepId=44.0") {
		t.Errorf("scontrol show step: exit %d:\n%s", code, out)
	}
	// A job Slurm 22.05 does not know: its error; one it knows without
	// such a running step (44.1 has ended, 46 is pending): "not found" on
	// stdout, as recorded beside it (scripts/slurm-local.sh).
	for _, tc := range []struct{ id, out, errOut string }{
		{"99.0", "", "slurm_get_job_steps error: Invalid job id specified\n"},
		{"44.7", "Job step 44.7 not found\n", ""},
		{"44.1", "Job step 44.1 not found\n", ""},
		{"46.0", "Job step 46.0 not found\n", ""},
		{"46", "Job step 46. not found\n", ""},
	} {
		if code, out, errOut := run(t, g, "scontrol", Env{}, "show", "step", tc.id); code != 1 || out != tc.out || errOut != tc.errOut {
			t.Errorf("scontrol show step %s: exit %d, %q %q, want 1 %q %q", tc.id, code, out, errOut, tc.out, tc.errOut)
		}
	}
	if code, out, _ := run(t, g, "scontrol", Env{}, "ping"); code != 0 || !strings.HasPrefix(out, "Slurmctld(primary) at ") || !strings.HasSuffix(out, " is UP\n") {
		t.Errorf("scontrol ping: exit %d, %q", code, out)
	}
}

// TestScontrolShowStepCPUsAndDist: scontrol show step's CPUs= is what the
// step holds (cpus_per_node): a step started without --exact holds every
// CPU of its job on its nodes, as Slurm 22.05 showed beside Loom
// (scripts/slurm-local.sh: srun -n1 in an -n2 job, CPUs=2; in an -N2 -n4
// job, srun -n2 CPUs=4); an --overlap step, which holds none in Loom, the
// job's CPUs on its nodes, as Slurm shows it. Dist= is Slurm's default for
// srun without -m: Cyclic for no more tasks than nodes (-n1, -N2 -n2),
// Block for more (-N2 -n3, -N2 -n4); with -m, Slurm's name for it
// (measured: -m block Block, plane=2 Plane, cyclic:block CBlock,
// block,NoPack Block,NoPack).
func TestScontrolShowStepCPUsAndDist(t *testing.T) {
	t.Parallel()
	g := stepsGateway()
	g.Jobs[0].CpusPerTask, g.Jobs[0].Ntasks = 1, 4 // 44: -N2 -n4, 2 CPUs on each node
	step := func(id int32, nodes []string, tasks int32, cpus ...int32) *loomv1.JobStep {
		return &loomv1.JobStep{Name: fmt.Sprintf("projects/default/jobs/44/steps/%d", id), Job: "projects/default/jobs/44", StepId: id,
			State: loomv1.JobState_RUNNING, Command: []string{"sleep"}, Nodes: nodes, NumTasks: tasks, CpusPerNode: cpus,
			StartTime: g.Steps[0].GetStartTime()}
	}
	both := []string{"node1", "node2"}
	g.Steps = []*loomv1.JobStep{
		step(0, []string{"node1"}, 1, 2),
		step(1, both, 2, 2, 2),
		step(2, both, 3, 2, 2),
		step(3, []string{"node1"}, 1, 1), // --exact
		step(4, both, 4),                 // --overlap: none held
		step(5, both, 2, 2, 2),
		step(6, both, 4, 2, 2),
		step(7, both, 4, 2, 2),
		step(8, both, 2, 2, 2),
	}
	g.Steps[5].Distribution, g.Steps[6].Distribution = "block", "plane=2"
	g.Steps[7].Distribution, g.Steps[8].Distribution = "cyclic:block", "block,nopack"
	for _, tc := range []struct{ id, want string }{
		{"44.0", "Nodes=1 CPUs=2 Tasks=1 .* TRES=cpu=2,mem=0,node=1 .* Dist=Cyclic"},
		{"44.1", "Nodes=2 CPUs=4 Tasks=2 .* TRES=cpu=4,mem=0,node=2 .* Dist=Cyclic"},
		{"44.2", "Nodes=2 CPUs=4 Tasks=3 .* Dist=Block"},
		{"44.3", "Nodes=1 CPUs=1 Tasks=1 .* Dist=Cyclic"},
		{"44.4", "Nodes=2 CPUs=4 Tasks=4 .* TRES=cpu=4,mem=0,node=2 .* Dist=Block"},
		{"44.5", "Tasks=2 .* Dist=Block "},
		{"44.6", "Tasks=4 .* Dist=Plane "},
		{"44.7", "Tasks=4 .* Dist=CBlock "},
		{"44.8", "Tasks=2 .* Dist=Block,NoPack "},
	} {
		code, out, errOut := run(t, g, "scontrol", Env{}, "-o", "show", "step", tc.id)
		if code != 0 || !regexp.MustCompile(tc.want).MatchString(out) {
			t.Errorf("scontrol show step %s: %d %q %q, want it to match %q", tc.id, code, out, errOut, tc.want)
		}
	}
}

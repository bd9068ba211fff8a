package slurmcli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestSrunStepGPURequest: srun in a job sends the step's GPU request
// (--gpus/-G, else the job's SLURM_GPUS) and CPUs per GPU (--cpus-per-gpu,
// else the job's SLURM_CPUS_PER_GPU), as Slurm 22.05's srun takes them
// (measured beside it: a bare srun in an sbatch --gpus=2 --cpus-per-gpu=3
// job shows CpusPerTres=gres:gpu:3 and TresPerStep=cpu:1,gres:gpu:2; with
// -c2 and the job's SLURM_CPUS_PER_GPU it runs, keeping both). A --gpus
// that is no count is Slurm's refusal, exit 1, and no step.
func TestSrunStepGPURequest(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env      map[string]string
		args     []string
		gpus     int32
		cpg, cpt int32
	}{
		{nil, []string{"--gpus=2", "--cpus-per-gpu=3"}, 2, 3, 0},
		{nil, []string{"-G", "a100:4"}, 4, 0, 0},
		{map[string]string{"SLURM_GPUS": "2", "SLURM_CPUS_PER_GPU": "3"}, nil, 2, 3, 0},
		{map[string]string{"SLURM_GPUS": "2", "SLURM_CPUS_PER_GPU": "3"}, []string{"--gpus=1", "--cpus-per-gpu=5"}, 1, 5, 0},
		{map[string]string{"SLURM_CPUS_PER_GPU": "2"}, []string{"-c2", "--gpus=1"}, 1, 2, 2},
		{map[string]string{"SLURM_GPUS": "x", "SLURM_CPUS_PER_GPU": "-1"}, nil, 0, 0, 0},
	} {
		s := srunStep(t, tc.env, tc.args)
		if s == nil {
			continue
		}
		if s.GetGpus() != tc.gpus || s.GetCpusPerGpu() != tc.cpg || s.GetCpusPerTask() != tc.cpt {
			t.Errorf("srun %v (env %v): gpus %d, cpus_per_gpu %d, cpus_per_task %d; want %d, %d, %d", tc.args, tc.env,
				s.GetGpus(), s.GetCpusPerGpu(), s.GetCpusPerTask(), tc.gpus, tc.cpg, tc.cpt)
		}
	}
	for _, bad := range []string{"x", "-1", "a100:x", ":2", fmt.Sprint(1<<20 + 1)} {
		g := srunGateway(t, 1, 0)
		code, _, errOut := runSrun(context.Background(), t, g, "--gpus="+bad, "hostname")
		want := "srun: error: Step requested GRES (gpu:" + bad + ") not found in the job\n" +
			"srun: error: Unable to create step for job 12: Invalid generic resource (gres) specification\n"
		if code != 1 || errOut != want || len(stepsCreated(g)) != 0 {
			t.Errorf("srun --gpus=%s: exit %d, stderr %q, steps %v; want 1, %q, none", bad, code, errOut, stepsCreated(g), want)
		}
	}
}

// TestSrunStepGPUsPerNode: srun in a job sends --gpus-per-node and
// --gres=gpu:N as the step's gpus_per_node (the last given wins; 0 and
// "none" ask for none), and says whether gpus is the job's SLURM_GPUS
// (gpus_inherited: recorded only) or the step's own --gpus (which the step
// then gets and holds). Slurm 22.05, measured beside Loom in an sbatch -N1
// --gpus=4 job: srun --gpus-per-node=2 sees GPUs 0,1 and shows
// TresPerStep=cpu:1,gres:gpu:4 TresPerNode=gres:gpu:2; --gres=gpu:3 0,1,2.
// A count that is none is refused naming the option, exit 255, no step.
func TestSrunStepGPUsPerNode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env       map[string]string
		args      []string
		gpn, gpus int32
		inherited bool
	}{
		{nil, []string{"--gpus-per-node=2"}, 2, 0, false},
		{nil, []string{"--gres=gpu:3"}, 3, 0, false},
		{nil, []string{"--gres=gpu:h100:2"}, 2, 0, false},
		{nil, []string{"--gres=gpu"}, 1, 0, false},
		{nil, []string{"--gres=none"}, 0, 0, false},
		{nil, []string{"--gpus-per-node=h100:0"}, 0, 0, false},
		{nil, []string{"--gres=gpu:3", "--gpus-per-node=1"}, 1, 0, false},
		{map[string]string{"SLURM_GPUS": "4"}, []string{"--gpus-per-node=2"}, 2, 4, true},
		{map[string]string{"SLURM_GPUS": "4"}, nil, 0, 4, true},
		{map[string]string{"SLURM_GPUS": "4"}, []string{"--gpus=1"}, 0, 1, false},
		{nil, []string{"-G", "2"}, 0, 2, false},
	} {
		s := srunStep(t, tc.env, tc.args)
		if s == nil {
			continue
		}
		if s.GetGpusPerNode() != tc.gpn || s.GetGpus() != tc.gpus || s.GetGpusInherited() != tc.inherited {
			t.Errorf("srun %v (env %v): gpus_per_node %d, gpus %d, gpus_inherited %v; want %d, %d, %v", tc.args, tc.env,
				s.GetGpusPerNode(), s.GetGpus(), s.GetGpusInherited(), tc.gpn, tc.gpus, tc.inherited)
		}
	}
	for _, bad := range []string{"--gpus-per-node=x", "--gpus-per-node=-1", "--gres=gpu:-1", "--gres=nic:2", "--gres=gpu:" + fmt.Sprint(1<<20+1)} {
		g := srunGateway(t, 1, 0)
		code, _, errOut := runSrun(context.Background(), t, g, bad, "hostname")
		opt := bad[:strings.Index(bad, "=")]
		if code != 255 || !strings.Contains(errOut, opt) || len(stepsCreated(g)) != 0 {
			t.Errorf("srun %s: exit %d, stderr %q, steps %v; want 255 naming %s, none", bad, code, errOut, stepsCreated(g), opt)
		}
	}
}

// TestScontrolShowStepTres: scontrol show step prints a step's GPU request
// as Slurm 22.05 does (measured beside it, scripts/slurm-local.sh), after
// SrunHost:Pid: CpusPerTres=gres:gpu:N with CPUs per GPU; TresBind and
// TresPerTask with --gpus-per-task (TresPerTask's cpu:C with -c;
// TresBind=gpu:none with --gpu-bind=none, TresPerTask kept);
// TresPerStep=cpu:C (the tasks × -c, else × cpus-per-gpu × gpus-per-task,
// else the tasks) with ",gres:gpu:G" for --gpus, for a step with any GPU
// option; none of them for a step without.
func TestScontrolShowStepTres(t *testing.T) {
	t.Parallel()
	g := stepsGateway()
	step := func(id, tasks int32, mod func(*loomv1.JobStep)) *loomv1.JobStep {
		s := &loomv1.JobStep{Name: fmt.Sprintf("projects/default/jobs/44/steps/%d", id), Job: "projects/default/jobs/44", StepId: id,
			State: loomv1.JobState_RUNNING, Command: []string{"sleep"}, Nodes: []string{"node1"}, NumTasks: tasks,
			StartTime: g.Steps[0].GetStartTime()}
		mod(s)
		return s
	}
	g.Steps = []*loomv1.JobStep{
		step(0, 1, func(s *loomv1.JobStep) { s.Gpus, s.CpusPerGpu = 2, 3 }),         // srun --gpus=2 --cpus-per-gpu=3
		step(1, 4, func(s *loomv1.JobStep) { s.Gpus, s.CpusPerGpu = 2, 3 }),         // the same, -n4 inherited
		step(2, 2, func(s *loomv1.JobStep) { s.GpusPerTask = 1 }),                   // srun -n2 --gpus-per-task=1
		step(3, 2, func(s *loomv1.JobStep) { s.GpusPerTask, s.CpusPerTask = 1, 2 }), // -n2 -c2 --gpus-per-task=1
		step(4, 2, func(s *loomv1.JobStep) { s.Gpus, s.CpusPerTask = 1, 2 }),        // -n2 -c2 --gpus=1
		step(5, 1, func(s *loomv1.JobStep) { s.GpusPerTask, s.CpusPerGpu, s.Gpus = 1, 2, 4 }),
		step(6, 2, func(s *loomv1.JobStep) { s.CpusPerTask = 2 }),                      // no GPU option
		step(7, 2, func(s *loomv1.JobStep) { s.GpusPerTask, s.GpuBindNone = 1, true }), // -n2 --gpus-per-task=1 --gpu-bind=none
		step(8, 8, func(s *loomv1.JobStep) { s.GpusPerNode, s.Gpus = 2, 4 }),           // --gpus-per-node=2 in an -n8 --gpus=4 job
		step(9, 2, func(s *loomv1.JobStep) { s.GpusPerNode = 1 }),                      // -N2 -n2 --gpus-per-node=1
		// srun --gpus=2 --cpus-per-gpu=3 outside a job: its allocation's 6 CPUs.
		step(10, 1, func(s *loomv1.JobStep) {
			s.Gpus, s.CpusPerGpu, s.AllocationCpus, s.CpusPerNode = 2, 3, true, []int32{6}
		}),
		// the same with -n2: the tasks'.
		step(11, 2, func(s *loomv1.JobStep) { s.Gpus, s.CpusPerGpu, s.CpusPerNode = 2, 3, []int32{6} }),
	}
	tail := "SrunHost:Pid=(null):0"
	for _, tc := range []struct{ id, want string }{
		{"44.0", tail + " CpusPerTres=gres:gpu:3 TresPerStep=cpu:1,gres:gpu:2\n"},
		{"44.1", tail + " CpusPerTres=gres:gpu:3 TresPerStep=cpu:4,gres:gpu:2\n"},
		{"44.2", tail + " TresBind=gpu:per_task:1 TresPerStep=cpu:2 TresPerTask=gres:gpu:1\n"},
		{"44.3", tail + " TresBind=gpu:per_task:1 TresPerStep=cpu:4 TresPerTask=cpu:2,gres:gpu:1\n"},
		{"44.4", tail + " TresPerStep=cpu:4,gres:gpu:1 TresPerTask=cpu:2\n"},
		{"44.5", tail + " CpusPerTres=gres:gpu:2 TresBind=gpu:per_task:1 TresPerStep=cpu:2,gres:gpu:4 TresPerTask=gres:gpu:1\n"},
		{"44.6", tail + "\n"},
		{"44.7", tail + " TresBind=gpu:none TresPerStep=cpu:2 TresPerTask=gres:gpu:1\n"},
		{"44.8", tail + " TresPerStep=cpu:8,gres:gpu:4 TresPerNode=gres:gpu:2\n"},
		{"44.9", tail + " TresPerStep=cpu:2 TresPerNode=gres:gpu:1\n"},
		{"44.10", tail + " CpusPerTres=gres:gpu:3 TresPerStep=cpu:6,gres:gpu:2\n"},
		{"44.11", tail + " CpusPerTres=gres:gpu:3 TresPerStep=cpu:2,gres:gpu:2\n"},
	} {
		code, out, errOut := run(t, g, "scontrol", Env{}, "-o", "show", "step", tc.id)
		if code != 0 || errOut != "" || len(out) < len(tc.want) || out[len(out)-len(tc.want):] != tc.want {
			t.Errorf("scontrol -o show step %s: exit %d, stderr %q, stdout %q; want it to end %q", tc.id, code, errOut, out, tc.want)
		}
	}
	// Without -o, a line each, as Slurm's.
	code, out, _ := run(t, g, "scontrol", Env{}, "show", "step", "44.0")
	if want := "   SrunHost:Pid=(null):0\n   CpusPerTres=gres:gpu:3\n   TresPerStep=cpu:1,gres:gpu:2\n\n"; code != 0 ||
		len(out) < len(want) || out[len(out)-len(want):] != want {
		t.Errorf("scontrol show step 44.0: exit %d, stdout %q; want it to end %q", code, out, want)
	}
}

// TestSrunOutsideAJobStepGPURequest: srun outside a job (its own
// allocation) records the step's GPU request as a step in a job does
// (srunInJob, the one path of both). Slurm 22.05 measured beside Loom,
// scontrol show step of srun outside a job: --gpus=2 is
// TresPerStep=cpu:1,gres:gpu:2; -n2 --gpus-per-task=1 TresPerTask=gres:gpu:1
// and TresPerStep=cpu:2 (no gres: the job's derived GPUs are not the
// step's); --gpus=4 --gpus-per-task=2 TresPerStep=cpu:2,gres:gpu:4 and
// TresPerTask=gres:gpu:2; --gpus=2 --cpus-per-gpu=3 CpusPerTres=gres:gpu:3;
// -n2 --gpus-per-task=1 --gpu-bind=none TresBind=gpu:none and still
// TresPerTask=gres:gpu:1. Loom's step outside a job kept no gpus.
func TestSrunOutsideAJobStepGPURequest(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env            map[string]string
		args           []string
		gpus, gpt, cpg int32
	}{
		{nil, []string{"--gpus=2"}, 2, 0, 0},
		{nil, []string{"-n2", "--gpus-per-task=1"}, 0, 1, 0},
		{nil, []string{"--gpus=4", "--gpus-per-task=2"}, 4, 2, 0},
		{nil, []string{"--gpus=2", "--cpus-per-gpu=3"}, 2, 0, 3},
		{nil, []string{"-n2", "--gpus=2", "--cpus-per-gpu=3"}, 2, 0, 3},
		{nil, []string{"-n2", "--gpus-per-task=1", "--gpu-bind=none"}, 0, 1, 0},
		{map[string]string{"SLURM_GPUS": "2"}, nil, 2, 0, 0},
	} {
		t.Run(fmt.Sprint(tc.env, tc.args), func(t *testing.T) {
			t.Parallel()
			g := srunGateway(t, 1, 0)
			env := Env{Conn: g.Dial(t), Project: "default", Cluster: "projects/default/clusters/c", User: "ada",
				Cwd: g.StepOutputDir, Environ: map[string]string{"PATH": "/usr/bin:/bin"}, CallTimeout: 10 * time.Second}
			for k, v := range tc.env {
				env.Environ[k] = v
			}
			code, _, errOut := mainSrun(context.Background(), env, append(tc.args, "hostname")...)
			steps := stepsCreated(g)
			if code != 0 || len(jobsSubmitted(g)) != 1 || len(steps) != 1 {
				t.Fatalf("srun %v outside a job: exit %d, stderr %q, %d jobs, steps %v", tc.args, code, errOut, len(jobsSubmitted(g)), steps)
			}
			if s := steps[0]; s.GetGpus() != tc.gpus || s.GetGpusPerTask() != tc.gpt || s.GetCpusPerGpu() != tc.cpg ||
				s.GetGpuBindNone() != slices.Contains(tc.args, "--gpu-bind=none") {
				t.Errorf("srun %v outside a job: step gpus %d, gpus_per_task %d, cpus_per_gpu %d, gpu_bind_none %v; want %d, %d, %d",
					tc.args, s.GetGpus(), s.GetGpusPerTask(), s.GetCpusPerGpu(), s.GetGpuBindNone(), tc.gpus, tc.gpt, tc.cpg)
			}
			// Without -n the step asks for the allocation's CPUs, as
			// Slurm's (TresPerStep's cpu:).
			if s := steps[0]; s.GetAllocationCpus() != !slices.Contains(tc.args, "-n2") {
				t.Errorf("srun %v outside a job: allocation_cpus %v", tc.args, s.GetAllocationCpus())
			}
		})
	}
}

// TestSrunStepEnvDefaults: srun in a job takes the job's SLURM_GPUS_PER_NODE
// (sbatch --gpus-per-node, --gres=gpu:N) and SLURM_DISTRIBUTION (-m) as its
// step's defaults, the command line winning, as Slurm 22.05's srun does
// (measured beside it: in an sbatch -N2 --gpus-per-node=2 job a bare srun
// shows TresPerNode=gres:gpu:2 and sees GPUs 0,1 on each node,
// --gpus-per-node=1 TresPerNode=gres:gpu:1, --gpus-per-node=0 none, -n1
// --gpus=1 both TresPerStep=cpu:1,gres:gpu:1 and TresPerNode=gres:gpu:2; in
// an sbatch -N2 -n4 -m cyclic job a bare srun is Dist=Cyclic, -m block
// Dist=Block). A step's own --gpus-per-task keeps the job's per-node
// count beside it, as Slurm's (in an sbatch -N2 --ntasks-per-node=2
// --gpus-per-node=2 job srun -n2 --gpus-per-task=1 shows
// TresPerNode=gres:gpu:2 TresPerTask=gres:gpu:1 and gets 2 GPUs a node;
// the scheduler holds the larger). A value the option would not take is
// ignored, and SLURM_CPUS_PER_TASK is no default (Slurm 22.05 reads
// SRUN_CPUS_PER_TASK, which sbatch does not set).
func TestSrunStepEnvDefaults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env       map[string]string
		args      []string
		gpn, gpus int32
		gpt, cpt  int32
		dist      string
	}{
		{map[string]string{"SLURM_GPUS_PER_NODE": "2"}, nil, 2, 0, 0, 0, ""},
		{map[string]string{"SLURM_GPUS_PER_NODE": "a100:2"}, nil, 2, 0, 0, 0, ""},
		{map[string]string{"SLURM_GPUS_PER_NODE": "2"}, []string{"--gpus-per-node=1"}, 1, 0, 0, 0, ""},
		{map[string]string{"SLURM_GPUS_PER_NODE": "2"}, []string{"--gpus-per-node=0"}, 0, 0, 0, 0, ""},
		{map[string]string{"SLURM_GPUS_PER_NODE": "2"}, []string{"--gres=gpu:1"}, 1, 0, 0, 0, ""},
		{map[string]string{"SLURM_GPUS_PER_NODE": "2"}, []string{"-n1", "--gpus=1"}, 2, 1, 0, 0, ""},
		{map[string]string{"SLURM_GPUS_PER_NODE": "2"}, []string{"-n2", "--gpus-per-task=1"}, 2, 0, 1, 0, ""},
		{map[string]string{"SLURM_GPUS_PER_NODE": "2", "SLURM_GPUS_PER_TASK": "1"}, nil, 2, 0, 1, 0, ""},
		// A --gres=gpu:2 job's script has no SLURM_GPUS_PER_NODE
		// (Job.gres_gpus): its sruns have no per-node default.
		{map[string]string{"SLURM_GPUS_PER_TASK": "1"}, []string{"-n2"}, 0, 0, 1, 0, ""},
		{map[string]string{"SLURM_GPUS_PER_NODE": "x"}, nil, 0, 0, 0, 0, ""},
		{map[string]string{"SLURM_GPUS_PER_NODE": fmt.Sprint(1<<20 + 1)}, nil, 0, 0, 0, 0, ""},
		{map[string]string{"SLURM_DISTRIBUTION": "cyclic"}, nil, 0, 0, 0, 0, "cyclic"},
		{map[string]string{"SLURM_DISTRIBUTION": "cyclic"}, []string{"-m", "block"}, 0, 0, 0, 0, "block"},
		{map[string]string{"SLURM_DISTRIBUTION": "plane", "SLURM_DIST_PLANESIZE": "2"}, nil, 0, 0, 0, 0, "plane=2"},
		{map[string]string{"SLURM_DISTRIBUTION": "plane"}, nil, 0, 0, 0, 0, ""},
		{map[string]string{"SLURM_DISTRIBUTION": "cyclic:block,pack"}, nil, 0, 0, 0, 0, "cyclic:block,pack"},
		{map[string]string{"SLURM_DISTRIBUTION": "nonsense"}, nil, 0, 0, 0, 0, ""},
		{map[string]string{"SLURM_CPUS_PER_TASK": "2"}, nil, 0, 0, 0, 0, ""},
		{map[string]string{"SLURM_CPUS_PER_TASK": "2"}, []string{"-c1"}, 0, 0, 0, 1, ""},
	} {
		s := srunStep(t, tc.env, tc.args)
		if s == nil {
			continue
		}
		if s.GetGpusPerNode() != tc.gpn || s.GetGpus() != tc.gpus || s.GetGpusPerTask() != tc.gpt || s.GetCpusPerTask() != tc.cpt || s.GetDistribution() != tc.dist {
			t.Errorf("srun %v (env %v): gpus_per_node %d, gpus %d, gpus_per_task %d, cpus_per_task %d, distribution %q; want %d, %d, %d, %d, %q",
				tc.args, tc.env, s.GetGpusPerNode(), s.GetGpus(), s.GetGpusPerTask(), s.GetCpusPerTask(), s.GetDistribution(),
				tc.gpn, tc.gpus, tc.gpt, tc.cpt, tc.dist)
		}
	}
}

// TestSrunNoGPUs: srun says when a step asked for no GPUs on purpose
// (no_gpus), so that the scheduler gives it none rather than the job's:
// --gres=none (which drops the job's SLURM_GPUS_PER_TASK and SLURM_GPUS
// too: measured beside Slurm 22.05, such a step of a --gpus-per-task or
// --gpus job sees no GPU), --gres=gpu:0, --gpus=0, --gpus-per-node=0. A
// step without a GPU option, or whose last one asks for some, does not.
func TestSrunNoGPUs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env       map[string]string
		args      []string
		none      bool
		gpt, gpus int32
	}{
		{nil, nil, false, 0, 0},
		{nil, []string{"--gres=none"}, true, 0, 0},
		{nil, []string{"--gres=gpu:0"}, true, 0, 0},
		{nil, []string{"--gpus=0"}, true, 0, 0},
		{nil, []string{"--gpus-per-node=0"}, true, 0, 0},
		{nil, []string{"--gres=none", "--gres=gpu:1"}, false, 0, 0},
		{map[string]string{"SLURM_GPUS_PER_TASK": "1"}, []string{"--gres=none"}, true, 0, 0},
		{map[string]string{"SLURM_GPUS_PER_TASK": "1"}, []string{"--gpus=0"}, true, 1, 0},
		{map[string]string{"SLURM_GPUS": "2"}, []string{"--gres=none"}, true, 0, 0},
		{map[string]string{"SLURM_GPUS": "2"}, nil, false, 0, 2},
		// A --gpus=4 --gpus-per-task=2 job's script has both (Job.gpus_given):
		// its bare srun's step is Slurm's TresPerStep=cpu:2,gres:gpu:4
		// TresPerTask=gres:gpu:2 (measured beside 22.05).
		{map[string]string{"SLURM_GPUS": "4", "SLURM_GPUS_PER_TASK": "2"}, nil, false, 2, 4},
	} {
		s := srunStep(t, tc.env, tc.args)
		if s == nil {
			continue
		}
		if s.GetNoGpus() != tc.none || s.GetGpusPerTask() != tc.gpt || s.GetGpus() != tc.gpus {
			t.Errorf("srun %v (env %v): no_gpus %v, gpus_per_task %d, gpus %d; want %v, %d, %d", tc.args, tc.env,
				s.GetNoGpus(), s.GetGpusPerTask(), s.GetGpus(), tc.none, tc.gpt, tc.gpus)
		}
	}
}

// srunStep runs `srun ARGS hostname` in a one-node job (srunEnv) with
// env's variables added, and returns the one step it asked for, or nil
// after reporting (Errorf) an exit or a number of steps that is not one.
func srunStep(t *testing.T, env map[string]string, args []string) *loomv1.CreateJobStepRequest {
	t.Helper()
	g := srunGateway(t, 1, 0)
	e := srunEnv(t, g)
	for k, v := range env {
		e.Environ[k] = v
	}
	code, _, errOut := mainSrun(context.Background(), e, append(args, "hostname")...)
	steps := stepsCreated(g)
	if code != 0 || len(steps) != 1 {
		t.Errorf("srun %v (env %v): exit %d, stderr %q, steps %v", args, env, code, errOut, steps)
		return nil
	}
	return steps[0]
}

package slurmcli

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/loom-ml/loom/cmd/loom/internal/fakegw"
)

// TestMoreNodesThanTasks: sbatch -N2 -n1 asks for a node that would run
// no task; Slurm 22.05's sbatch (salloc and srun alike, measured beside
// it) warns and lowers the count to the tasks', and a range's maximum
// with it without a word. Loom submitted a 2-node job with tasks 1,0.
func TestMoreNodesThanTasks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args        []string
		nodes, most int32
		warning     string
	}{
		{[]string{"-N2", "-n1"}, 1, 0, "sbatch: Warning: can't run 1 processes on 2 nodes, setting nnodes to 1\n"},
		{[]string{"-N2-3", "-n1"}, 1, 1, "sbatch: Warning: can't run 1 processes on 2 nodes, setting nnodes to 1\n"},
		{[]string{"-N3", "-n2", "--ntasks-per-node=1"}, 2, 0, "sbatch: Warning: can't run 2 processes on 3 nodes, setting nnodes to 2\n"},
		{[]string{"-N1-4", "-n2"}, 1, 2, ""},
		{[]string{"-N2", "-n1", "-Q"}, 1, 0, ""},
		{[]string{"-N2", "-n2"}, 2, 0, ""},
		{[]string{"-N2"}, 2, 0, ""},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			f := &fakegw.Gateway{}
			env := Env{Cwd: t.TempDir(), Environ: map[string]string{"PATH": "/usr/bin"}}
			code, _, errOut := run(t, f, "sbatch", env, append(tc.args, "--wrap=hostname")...)
			if code != 0 || errOut != tc.warning || len(submitted(f)) != 1 {
				t.Fatalf("sbatch %v: exit %d, stderr %q, %d submitted; want 0, %q, 1", tc.args, code, errOut, len(submitted(f)), tc.warning)
			}
			if j := submitted(f)[0].GetJob(); j.GetNodeCount() != tc.nodes || j.GetMaxNodeCount() != tc.most {
				t.Errorf("sbatch %v: node_count %d max_node_count %d, want %d and %d", tc.args, j.GetNodeCount(), j.GetMaxNodeCount(), tc.nodes, tc.most)
			}
		})
	}
}

// TestSrunMoreNodesThanTasks: srun -N2 -n1 lowers the count to one node,
// saying so, as Slurm 22.05's srun did in a two-node allocation (the
// step's SLURM_STEP_NUM_NODES 1) and outside one (a one-node job).
func TestSrunMoreNodesThanTasks(t *testing.T) {
	t.Parallel()
	const warning = "srun: Warning: can't run 1 processes on 2 nodes, setting nnodes to 1\n"
	g := srunGateway(t, 1, 0)
	code, _, errOut := runSrun(context.Background(), t, g, "-N2", "-n1", "hostname")
	if code != 0 || !strings.HasPrefix(errOut, warning) || len(stepsCreated(g)) != 1 ||
		stepsCreated(g)[0].GetNodeCount() != 1 || stepsCreated(g)[0].GetNtasks() != 1 {
		t.Errorf("step: exit %d, stderr %q, creates %v; want one 1-node step and %q", code, errOut, stepsCreated(g), warning)
	}

	g = srunGateway(t, 1, 0)
	code, _, errOut = srunOutside(context.Background(), t, g, "-N2", "-n1", "hostname")
	if code != 0 || strings.Count(errOut, warning) != 1 || len(jobsSubmitted(g)) != 1 ||
		jobsSubmitted(g)[0].GetJob().GetNodeCount() != 1 {
		t.Errorf("allocation: exit %d, stderr %q, submitted %v; want a 1-node job and %q once", code, errOut, jobsSubmitted(g), warning)
	}

	// -Q keeps it to itself.
	g = srunGateway(t, 1, 0)
	if code, _, errOut = runSrun(context.Background(), t, g, "-Q", "-N2", "-n1", "hostname"); code != 0 || strings.Contains(errOut, "Warning") {
		t.Errorf("-Q: exit %d, stderr %q", code, errOut)
	}
}

// TestNodelistMoreHostsThanTasks: -w naming more hosts than the tasks
// need. Slurm 22.05's sbatch (measured beside it) counts the hosts as the
// job's least node count, lowers it to the tasks with its warning and
// keeps the first hosts in hostlist order (ReqNodeList=node1 for -n1 -w
// node2,node1), and refuses a -N whose maximum is below the hosts. Loom
// kept every host, and so ran -n1 on two nodes.
func TestNodelistMoreHostsThanTasks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args        []string
		nodes, most int32
		hosts       string
		stderr      string
	}{
		{[]string{"-n1", "-w", "node[1-2]"}, 1, 0, "node1", "sbatch: Warning: can't run 1 processes on 2 nodes, setting nnodes to 1\n"},
		{[]string{"-n1", "-w", "node2,node1"}, 1, 0, "node1", "sbatch: Warning: can't run 1 processes on 2 nodes, setting nnodes to 1\n"},
		{[]string{"-n2", "-w", "node[1-3]"}, 2, 0, "node1,node2", "sbatch: Warning: can't run 2 processes on 3 nodes, setting nnodes to 2\n"},
		{[]string{"-N2", "-n1", "-w", "node[1-2]"}, 1, 0, "node1", "sbatch: Warning: can't run 1 processes on 2 nodes, setting nnodes to 1\n"},
		{[]string{"-N1-3", "-n1", "-w", "node[1-2]"}, 1, 1, "node1", "sbatch: Warning: can't run 1 processes on 2 nodes, setting nnodes to 1\n"},
		{[]string{"-n1", "-Q", "-w", "node[1-2]"}, 1, 0, "node1", ""},
		{[]string{"-n1", "-w", "node1,node1"}, 0, 0, "node1,node1", ""},
		{[]string{"-n2", "-w", "node[1-2]"}, 0, 0, "node1,node2", ""},
		{[]string{"-n3", "-w", "node[1-2]"}, 0, 0, "node1,node2", ""},
		{[]string{"-N3", "-w", "node[1-2]"}, 3, 0, "node1,node2", ""},
		{[]string{"-N1-3", "-n2", "-w", "node[1-2]"}, 2, 2, "node1,node2", ""},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			f := &fakegw.Gateway{}
			env := Env{Cwd: t.TempDir(), Environ: map[string]string{"PATH": "/usr/bin"}}
			code, _, errOut := run(t, f, "sbatch", env, append(tc.args, "--wrap=hostname")...)
			if code != 0 || errOut != tc.stderr || len(submitted(f)) != 1 {
				t.Fatalf("sbatch %v: exit %d, stderr %q, %d submitted; want 0, %q, 1", tc.args, code, errOut, len(submitted(f)), tc.stderr)
			}
			j := submitted(f)[0].GetJob()
			if j.GetNodeCount() != tc.nodes || j.GetMaxNodeCount() != tc.most || strings.Join(j.GetNodelist(), ",") != tc.hosts {
				t.Errorf("sbatch %v: node_count %d max_node_count %d nodelist %v, want %d, %d and %s",
					tc.args, j.GetNodeCount(), j.GetMaxNodeCount(), j.GetNodelist(), tc.nodes, tc.most, tc.hosts)
			}
		})
	}
	// A -N below the hosts named: refused, nothing sent, in Slurm's words
	// (its warning too where the tasks would have lowered the count).
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"-N1", "-w", "node[1-2]"}, "sbatch: error: invalid number of nodes (-N 2-1)\n"},
		{[]string{"-N1", "-n2", "-w", "node[1-2]"}, "sbatch: error: invalid number of nodes (-N 2-1)\n"},
		{[]string{"-N1-2", "-w", "node[1-3]"}, "sbatch: error: invalid number of nodes (-N 3-2)\n"},
		{[]string{"-N2", "-n1", "-w", "node[1-3]"}, "sbatch: error: invalid number of nodes (-N 3-2)\nsbatch: Warning: can't run 1 processes on 3 nodes, setting nnodes to 1\n"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			f := &fakegw.Gateway{}
			env := Env{Cwd: t.TempDir(), Environ: map[string]string{"PATH": "/usr/bin"}}
			code, _, errOut := run(t, f, "sbatch", env, append(tc.args, "--wrap=hostname")...)
			if code != 1 || errOut != tc.stderr || len(submitted(f)) != 0 {
				t.Errorf("sbatch %v: exit %d, stderr %q, %d submitted; want 1, %q, none", tc.args, code, errOut, len(submitted(f)), tc.stderr)
			}
		})
	}
}

// TestSallocNodelistMoreHostsThanTasks: salloc runs sbatch's check of -w
// against -N and -n, and says Slurm 22.05's warning whatever -Q (measured
// beside it: "salloc -Q -n1 -w node[1-2]" prints it, "salloc -Q -N1 -n1 -w
// node[1-2]" prints it after the refusal). Loom's salloc dropped it from
// the refusal, and with -Q from the allocation too.
func TestSallocNodelistMoreHostsThanTasks(t *testing.T) {
	t.Parallel()
	const warning = "salloc: Warning: can't run 1 processes on 2 nodes, setting nnodes to 1\n"
	for _, quiet := range []bool{false, true} {
		t.Run(fmt.Sprintf("quiet=%v", quiet), func(t *testing.T) {
			t.Parallel()
			g := srunGateway(t, 1, 0)
			env := Env{Conn: g.Dial(t), Project: "default", Cluster: stepCluster, User: "ada", Cwd: g.StepOutputDir, CallTimeout: 10 * time.Second,
				Environ: map[string]string{"PATH": "/usr/bin:/bin", "SHELL": "/bin/sh"}}
			var q []string
			if quiet {
				q = []string{"-Q"}
			}
			code, _, errOut := salloc(context.Background(), t, env, "", append(q, "-n1", "-w", "gpu-[0001-0002]", "true")...)
			if code != 0 || !strings.HasPrefix(errOut, warning) || len(jobsSubmitted(g)) != 1 ||
				strings.Join(jobsSubmitted(g)[0].GetJob().GetNodelist(), ",") != "gpu-0001" {
				t.Errorf("salloc %v -n1 -w gpu-[0001-0002]: exit %d, stderr %q, submitted %v; want the first host and %q first", q, code, errOut, jobsSubmitted(g), warning)
			}
			g = srunGateway(t, 1, 0)
			env.Conn = g.Dial(t)
			code, _, errOut = salloc(context.Background(), t, env, "", append(q, "-N1", "-n1", "-w", "gpu-[0001-0002]", "true")...)
			if want := "salloc: error: invalid number of nodes (-N 2-1)\n" + warning; code != 1 || errOut != want || len(jobsSubmitted(g)) != 0 {
				t.Errorf("salloc %v -N1 -n1 -w gpu-[0001-0002]: exit %d, stderr %q, %d submitted; want 1, %q, none", q, code, errOut, len(jobsSubmitted(g)), want)
			}
		})
	}
}

// TestSrunOutsideNodelistMoreHostsThanTasks: srun outside a job makes its
// allocation with sbatch's check of -w (slurmspec.FitNodes) after its own
// trimming of -w to -N, as Slurm 22.05's srun (measured beside it): -n1 -w
// node[1-2] warns and runs on node1; -N1 -n1 -w node[1-2] says it drops
// node2 ("Required nodelist includes more nodes than permitted") and runs
// on node1. Loom's srun refused the second ("invalid number of nodes (-N
// 2-1)") and ran the first without a word.
func TestSrunOutsideNodelistMoreHostsThanTasks(t *testing.T) {
	t.Parallel()
	const warning = "srun: Warning: can't run 1 processes on 2 nodes, setting nnodes to 1\n"
	const trimmed = "srun: error: Required nodelist includes more nodes than permitted by max-node count (2 > 1). Eliminating nodes from the nodelist.\n"
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"-n1", "-w", "gpu-[0001-0002]"}, warning},
		{[]string{"-Q", "-n1", "-w", "gpu-[0001-0002]"}, ""},
		{[]string{"-N1", "-n1", "-w", "gpu-[0001-0002]"}, trimmed},
		{[]string{"-N1", "-w", "gpu-[0001-0002]"}, trimmed},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			g := srunGateway(t, 1, 0)
			code, _, errOut := srunOutside(context.Background(), t, g, append(tc.args, "hostname")...)
			if code != 0 || !strings.HasPrefix(errOut, tc.stderr) || strings.Count(errOut, "srun: Warning") != strings.Count(tc.stderr, "srun: Warning") ||
				len(jobsSubmitted(g)) != 1 || len(stepsCreated(g)) != 1 {
				t.Fatalf("srun %v outside a job: exit %d, stderr %q, %d jobs, %d steps; want 0, %q first, one job and step",
					tc.args, code, errOut, len(jobsSubmitted(g)), len(stepsCreated(g)), tc.stderr)
			}
			if j, s := jobsSubmitted(g)[0].GetJob(), stepsCreated(g)[0]; strings.Join(j.GetNodelist(), ",") != "gpu-0001" ||
				strings.Join(s.GetNodelist(), ",") != "gpu-0001" {
				t.Errorf("srun %v outside a job: job nodelist %v, step nodelist %v; want gpu-0001 for both", tc.args, j.GetNodelist(), s.GetNodelist())
			}
		})
	}
}

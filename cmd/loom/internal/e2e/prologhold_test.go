package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/loom-ml/loom/cmd/loom/internal/slurmcli"
	"github.com/loom-ml/loom/cmd/loom/stack"
	"github.com/loom-ml/loom/libs/slurmspec"
	"github.com/loom-ml/loom/libs/testkit"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// gateCheck is a site check the agents run as their prolog: it holds while
// a file named "hold" is in the node's directory (its working directory),
// and passes once it is gone.
const gateCheck = `#!/bin/sh
while [ -e hold ]; do sleep 0.05; done
echo '{"summary":"gate open"}'
`

// TestSrunStepWaitsForTheProlog: a job is RUNNING from its placement (as
// slurmctld's), while its batch host's agent still runs the prolog checks.
// A step asked for from outside the job then (srun --jobid, a salloc
// shell's srun) waits, as Slurm's does while the job's prolog runs: srun
// -v says "Resources allocated for job N and being configured, please
// wait", and the step's tasks start only once the prolog has passed and
// the agent has reported the batch step running. A step of a job that
// ends while it waits fails, in Slurm's words. Real agent processes, a
// site check held by a file.
func TestSrunStepWaitsForTheProlog(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs a cluster of agent processes; skipped with -short")
	}
	checks := t.TempDir()
	testkit.WriteExecutable(t, filepath.Join(checks, "gate"), []byte(gateCheck), 0o755)
	s := startStackWith(t, inProcess, func(o *stack.Options) {
		o.AgentEnv = append(o.AgentEnv, "LOOM_AGENT_CHECK_DIR="+checks, "LOOM_AGENT_PROLOG_CHECKS=gate",
			// The test holds the prolog as long as it needs: never its timeout.
			"LOOM_AGENT_PROLOG_TIMEOUT=10m")
	})
	gw := dialGateway(t, s)
	cl := createCluster(t, gw, "gate", &loomv1.NodePool{Id: "gpu", MachineType: "a3-highgpu-1g",
		NodeCount: 1, AcceleratorType: "nvidia-h100-80gb", AcceleratorCount: 1})
	shared := cl.GetStatus().GetSharedDir()
	la, ok := agentOf(t, s, "gate", "gpu-0001")
	if !ok {
		t.Fatal("no agent runs node gpu-0001")
	}
	hold := filepath.Join(la.WorkDir, "hold")
	jobs := loomv1.NewJobServiceClient(gw)
	env := slurmcli.Env{Conn: gw, Project: "default", Cluster: cl.GetName(), User: slurmcli.AccountName(), Cwd: shared,
		Environ: map[string]string{"PATH": os.Getenv("PATH")}}

	// submit holds the node's prolog and starts a job whose script says
	// it ran and waits for go-<id>; it returns the job once RUNNING.
	submit := func(t *testing.T, name string) *loomv1.Job {
		t.Helper()
		if err := os.WriteFile(hold, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Remove(hold) }) // never leave an agent's prolog held
		job, err := jobs.SubmitJob(waitCtx(t, 10*time.Second), &loomv1.SubmitJobRequest{Parent: "projects/default",
			Job: &loomv1.Job{Cluster: cl.Name, DisplayName: name, NodeCount: 1, GpusPerNode: 1,
				Script: `touch batch-$SLURM_JOB_ID; while [ ! -e go-$SLURM_JOB_ID ]; do sleep 0.1; done`}})
		if err != nil {
			t.Fatal(err)
		}
		testkit.WaitFor(t, 90*time.Second, "job "+name+" RUNNING", func() (bool, error) {
			j, err := jobs.GetJob(waitCtx(t, 5*time.Second), &loomv1.GetJobRequest{Name: job.Name})
			if err == nil && j.State.Terminal() {
				t.Fatalf("job %s ended %v (%s)", name, j.State, j.StateReason)
			}
			return err == nil && j.State == loomv1.JobState_RUNNING, nil
		})
		return job
	}
	// srun runs srun --jobid=<id> args in the background.
	type result struct {
		code   int
		stderr string
	}
	srun := func(t *testing.T, job *loomv1.Job, stderr *testkit.Buffer, args ...string) <-chan result {
		done := make(chan result, 1)
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		go func() {
			var out testkit.Buffer
			code := slurmcli.Main(ctx, "srun", append([]string{"--jobid=" + job.JobId}, args...), env, &out, stderr)
			done <- result{code, stderr.String()}
		}()
		return done
	}
	// waiting waits until the job's step 0 is recorded waiting for the prolog.
	waiting := func(t *testing.T, job *loomv1.Job) {
		t.Helper()
		testkit.WaitFor(t, 60*time.Second, "job "+job.JobId+"'s step waiting for the prolog", func() (bool, error) {
			s, err := jobs.GetJobStep(waitCtx(t, 5*time.Second), &loomv1.GetJobStepRequest{Name: job.Name + "/steps/0"})
			if err != nil {
				return false, nil
			}
			if s.State != loomv1.JobState_PENDING {
				t.Fatalf("step 0 of job %s is %v (%q) while the prolog holds, want it waiting", job.JobId, s.State, s.Reason)
			}
			return s.Reason == slurmspec.ReasonStepProlog, nil
		})
	}
	absent := func(t *testing.T, name string) {
		t.Helper()
		if _, err := os.Stat(filepath.Join(shared, name)); err == nil {
			t.Fatalf("%s exists while the prolog holds", name)
		}
	}
	collect := func(t *testing.T, done <-chan result) result {
		t.Helper()
		select {
		case r := <-done:
			return r
		case <-time.After(90 * time.Second):
			t.Fatal("srun did not end")
		}
		return result{}
	}

	t.Run("starts_once_the_prolog_passed", func(t *testing.T) {
		job := submit(t, "held")
		var stderr testkit.Buffer
		done := srun(t, job, &stderr, "-v", "sh", "-c", "touch "+shared+"/step-$SLURM_JOB_ID")
		waiting(t, job)
		wait := "srun: Resources allocated for job " + job.JobId + " and being configured, please wait\n"
		testkit.WaitFor(t, 30*time.Second, "srun saying it waits", func() (bool, error) {
			return strings.Contains(stderr.String(), wait), nil
		})
		// Neither the batch script nor the step's task has run.
		absent(t, "batch-"+job.JobId)
		absent(t, "step-"+job.JobId)
		if err := os.Remove(hold); err != nil {
			t.Fatal(err)
		}
		r := collect(t, done)
		if r.code != 0 || !strings.HasPrefix(r.stderr, wait+"srun: Step created for job "+job.JobId+"\n") {
			t.Fatalf("srun: exit %d, stderr %q", r.code, r.stderr)
		}
		if _, err := os.Stat(filepath.Join(shared, "step-"+job.JobId)); err != nil {
			t.Fatalf("the step's task did not run: %v", err)
		}
		st, err := jobs.GetJobStep(waitCtx(t, 5*time.Second), &loomv1.GetJobStepRequest{Name: job.Name + "/steps/0"})
		if err != nil || st.State != loomv1.JobState_COMPLETED {
			t.Fatalf("step 0: %v, %v; want COMPLETED", st, err)
		}
		if err := os.WriteFile(filepath.Join(shared, "go-"+job.JobId), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if end := waitJob(t, jobs, job.Name, 90*time.Second); end.State != loomv1.JobState_COMPLETED {
			t.Fatalf("job ended %v (%s)", end.State, end.StateReason)
		}
	})

	t.Run("fails_when_the_job_ends_first", func(t *testing.T) {
		job := submit(t, "cancelled")
		var stderr testkit.Buffer
		done := srun(t, job, &stderr, "sh", "-c", "touch "+shared+"/step-$SLURM_JOB_ID")
		waiting(t, job)
		if _, err := jobs.CancelJob(waitCtx(t, 10*time.Second), &loomv1.CancelJobRequest{Name: job.Name}); err != nil {
			t.Fatal(err)
		}
		r := collect(t, done)
		if want := "srun: error: Unable to create step for job " + job.JobId + ": Job/step already completing or completed\n"; r.code == 0 || r.stderr != want {
			t.Fatalf("srun: exit %d, stderr %q; want an error, stderr %q", r.code, r.stderr, want)
		}
		absent(t, "step-"+job.JobId)
		if err := os.Remove(hold); err != nil {
			t.Fatal(err)
		}
		if end := waitJob(t, jobs, job.Name, 90*time.Second); end.State != loomv1.JobState_CANCELLED {
			t.Fatalf("job ended %v (%s), want CANCELLED", end.State, end.StateReason)
		}
		absent(t, "batch-"+job.JobId) // the stopped step never started
	})
}

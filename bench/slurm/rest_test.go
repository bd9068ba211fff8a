package slurm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/slurmrest"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/testkit/need"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestRESTClient runs every call of libs/slurmrest against a real
// slurmrestd 22.05 (one cluster, a subtest per call): what the fake servers
// of libs/slurmrest's own tests cannot show is that the real daemon takes
// these requests and answers in the shapes the client decodes.
func TestRESTClient(t *testing.T) {
	t.Parallel()
	if err := RESTInstalled(); err != nil {
		if need.Required() {
			t.Fatalf("%v; %s is set: add the packages to .ci/run", err, need.RequireEnv)
		}
		t.Skip("slurmrestd test skipped: ", err)
	}
	ctx := testkit.Context(t, 3*time.Minute)
	c, err := Start(ctx, Options{Dir: t.TempDir(), Nodes: 2, CPUsPerNode: 4, GPUsPerNode: 2, RealMemoryMB: 1000, REST: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})
	if !isProcessFile(c.SlurmrestdPid(), "slurmrestd") {
		t.Fatalf("no live slurmrestd in %s", c.SlurmrestdPid())
	}
	tok, err := c.Token(ctx, "root", 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := slurmrest.New(c.RESTURL, "root", tok)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("Ping", func(t *testing.T) {
		pings, release, err := rc.Ping(ctx)
		if err != nil || len(pings) != 1 || pings[0].Ping != "UP" || !strings.HasPrefix(release, "22.05") {
			t.Fatalf("ping: %+v %q %v", pings, release, err)
		}
	})
	t.Run("ListPartitions", func(t *testing.T) {
		ps, err := rc.ListPartitions(ctx)
		if err != nil || len(ps) != 1 || ps[0].Name != DefaultPartition || !ps[0].Default() || ps[0].Nodes != "node[1-2]" ||
			ps[0].TotalCPUs != 8 || ps[0].State != "UP" {
			t.Fatalf("partitions: %+v %v", ps, err)
		}
	})
	t.Run("ListNodes", func(t *testing.T) {
		ns, err := rc.ListNodes(ctx)
		if err != nil || len(ns) != 2 {
			t.Fatalf("nodes: %+v %v", ns, err)
		}
		for i, n := range ns {
			if n.Name != NodeName(i) || n.CPUs != 4 || n.Gres != "gpu:2" || n.RealMemoryMB != 1000 ||
				!slices.Equal(n.Partitions, []string{DefaultPartition}) {
				t.Errorf("node %d: %+v", i, n)
			}
		}
	})
	t.Run("SubmitGetListCancel", func(t *testing.T) {
		out := filepath.Join(c.Work, "rest-%j.out")
		sub, err := rc.SubmitJob(ctx, slurmrest.JobSpec{
			Script: "#!/bin/bash\necho \"gpus=$CUDA_VISIBLE_DEVICES foo=$FOO\"\nexec sleep 300\n",
			Name:   "restprobe", Partition: DefaultPartition, Nodes: 1, Tasks: 2, CPUsPerTask: 1, GPUsPerNode: 1,
			MemoryPerNodeMB: 100, TimeLimit: 5 * time.Minute, WorkingDir: c.Work, StandardOutput: out,
			Environment: map[string]string{"PATH": "/usr/bin:/bin", "FOO": "bar"}, Account: "acct", QOS: "normal",
		})
		if err != nil {
			t.Fatal(err)
		}
		var j slurmrest.Job
		testkit.WaitFor(t, 60*time.Second, "job "+sub.JobID+" RUNNING", func() (bool, error) {
			j, err = rc.GetJob(ctx, sub.JobID)
			return j.State == "RUNNING", err
		})
		if j.Name != "restprobe" || j.Partition != DefaultPartition || j.NodeCount != 1 || j.Tasks != 2 ||
			j.TimeLimitMinutes != 5 || j.WorkingDir != c.Work || j.MemoryPerNodeMB != 100 || j.TRESPerNode != "gres:gpu:1" ||
			j.UserName != "root" || j.StartTime == 0 || j.Nodes == "" {
			t.Errorf("job %+v", j)
		}
		if st, ok := slurmrest.LoomState(j.State); !ok || st != loomv1.JobState_RUNNING {
			t.Errorf("LoomState(%s) = %s, %v", j.State, st, ok)
		}
		// The job's environment is what was sent, and its GPU is set.
		outFile := strings.ReplaceAll(out, "%j", sub.JobID)
		testkit.WaitFor(t, 30*time.Second, "the job's output", func() (bool, error) {
			b, _ := os.ReadFile(outFile)
			return strings.Contains(string(b), "gpus=0 foo=bar"), nil
		})

		jobs, err := rc.ListJobs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(jobs, func(l slurmrest.Job) bool { return l.JobID == j.JobID && l.State == "RUNNING" }) {
			t.Fatalf("ListJobs has no RUNNING job %s: %+v", sub.JobID, jobs)
		}

		// A signal it survives only signals it (CONT: the sleep ignores it).
		// Meanwhile the job shows SIGNALING, a state Loom has no word for.
		if err := rc.CancelJob(ctx, sub.JobID, "CONT"); err != nil {
			t.Fatal(err)
		}
		testkit.WaitFor(t, 30*time.Second, "job "+sub.JobID+" RUNNING after SIGCONT", func() (bool, error) {
			j, err = rc.GetJob(ctx, sub.JobID)
			if st, ok := slurmrest.LoomState(j.State); ok && st.Terminal() {
				return false, fmt.Errorf("SIGCONT ended the job: %s", j.State)
			}
			if _, ok := slurmrest.LoomState(j.State); !ok && j.State != "SIGNALING" {
				return false, fmt.Errorf("unexpected state %s", j.State)
			}
			return j.State == "RUNNING", err
		})
		if err := rc.CancelJob(ctx, sub.JobID, ""); err != nil {
			t.Fatal(err)
		}
		testkit.WaitFor(t, 60*time.Second, "job "+sub.JobID+" CANCELLED", func() (bool, error) {
			j, err = rc.GetJob(ctx, sub.JobID)
			return j.State == "CANCELLED", err
		})
		if st, ok := slurmrest.LoomState(j.State); !ok || st != loomv1.JobState_CANCELLED || j.EndTime == 0 {
			t.Errorf("cancelled job: LoomState(%s) = %s, %v; end %d", j.State, st, ok, j.EndTime)
		}
	})
	t.Run("NotFound", func(t *testing.T) {
		_, err := rc.GetJob(ctx, "999999")
		if !errors.Is(err, slurmrest.ErrNotFound) || !strings.Contains(err.Error(), "GET /slurm/v0.0.38/job/999999: HTTP 500") ||
			!strings.Contains(err.Error(), "Invalid job id specified") {
			t.Errorf("GetJob(999999): %v", err)
		}
		if err := rc.CancelJob(ctx, "999999", ""); !errors.Is(err, slurmrest.ErrNotFound) {
			t.Errorf("CancelJob(999999): %v", err)
		}
	})
	t.Run("SlurmRefusal", func(t *testing.T) {
		_, err := rc.SubmitJob(ctx, slurmrest.JobSpec{Script: "#!/bin/sh\ntrue\n", Partition: "nope",
			WorkingDir: c.Work, Environment: map[string]string{"PATH": "/bin"}})
		if err == nil || !strings.Contains(err.Error(), "POST /slurm/v0.0.38/job/submit") ||
			!strings.Contains(err.Error(), "Invalid partition name specified") {
			t.Errorf("submit to a missing partition: %v", err)
		}
	})
	t.Run("BadToken", func(t *testing.T) {
		bad, err := slurmrest.New(c.RESTURL, "root", tok[:len(tok)-4]+"AAAA")
		if err != nil {
			t.Fatal(err)
		}
		for name, call := range map[string]func() error{
			"ping": func() error { _, _, err := bad.Ping(ctx); return err },
			"jobs": func() error { _, err := bad.ListJobs(ctx); return err },
		} {
			err := call()
			if err == nil || !strings.Contains(err.Error(), "HTTP 500") || !strings.Contains(err.Error(), "check the token") {
				t.Errorf("%s with a bad token: %v, want HTTP 500 and the token hint", name, err)
			}
		}
	})
}

// isProcessFile reports whether pidfile names a live process called name.
func isProcessFile(pidfile, name string) bool {
	p, ok := readPid(pidfile)
	return ok && isProcess(p, name)
}

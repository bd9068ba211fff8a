// Package e2e runs Loom as a user would: every service its own process, built
// from the repository, against one Kafka-protocol broker and one Redis.
package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/loom-ml/loom/libs/testkit"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// createCluster creates a cluster through the gateway and waits for RUNNING.
func createCluster(t *testing.T, conn *grpc.ClientConn, id string, pools ...*loomv1.NodePool) *loomv1.Cluster {
	t.Helper()
	clusters := loomv1.NewClusterServiceClient(conn)
	ops := loomv1.NewOperationServiceClient(conn)
	var op *loomv1.Operation
	testkit.WaitFor(t, 60*time.Second, "gateway accepts CreateCluster", func() (bool, error) {
		var err error
		op, err = clusters.CreateCluster(waitCtx(t, 5*time.Second), &loomv1.CreateClusterRequest{
			Parent: "projects/default", ClusterId: id, RequestId: "create-" + id,
			Cluster: &loomv1.Cluster{Compute: &loomv1.ComputeResources{NodePools: pools}}})
		return err == nil, nil // services may still be starting
	})
	testkit.WaitFor(t, 90*time.Second, "cluster "+id+" RUNNING", func() (bool, error) {
		got, err := ops.WaitOperation(waitCtx(t, 20*time.Second), &loomv1.WaitOperationRequest{Name: op.Name, TimeoutSeconds: 10})
		if err != nil {
			return false, nil
		}
		if e := got.GetError(); e != nil {
			t.Fatalf("create %s failed: %v", id, e)
		}
		op = got
		return got.Done, nil
	})
	if op.GetCluster().GetStatus().GetState() != loomv1.Cluster_RUNNING {
		t.Fatalf("operation done but cluster is %v", op.GetCluster().GetStatus().GetState())
	}
	return op.GetCluster()
}

func jobStates(ctx context.Context, jobs loomv1.JobServiceClient, names []string) (map[string]*loomv1.Job, error) {
	out := map[string]*loomv1.Job{}
	for _, n := range names {
		j, err := jobs.GetJob(ctx, &loomv1.GetJobRequest{Name: n})
		if err != nil {
			return nil, err
		}
		out[n] = j
	}
	return out, nil
}

// TestSchedulerCrashLosesNoJobAndRunsNoneTwice runs each service as its own
// process (the stack's process mode), kills the scheduler with SIGKILL while jobs are pending and running,
// restarts it, and checks every job completes exactly once.
func TestSchedulerCrashLosesNoJobAndRunsNoneTwice(t *testing.T) {
	t.Parallel()
	s := startStack(t, processes)
	gw := dialGateway(t, s)
	cl := createCluster(t, gw, "e2e", &loomv1.NodePool{Id: "gpu", MachineType: "a2-highgpu-1g",
		NodeCount: 2, AcceleratorType: "nvidia-tesla-a100", AcceleratorCount: 1})
	shared := cl.GetStatus().GetSharedDir()
	if shared == "" {
		t.Fatal("cluster has no shared_dir")
	}

	jobs := loomv1.NewJobServiceClient(gw)
	// Each run appends one line to a file named for the job: two lines would mean it ran twice.
	script := `echo "$SLURM_JOB_ID on $SLURMD_NODENAME$LOOM_NODE_RANK" >> runs-$SLURM_JOB_ID; sleep 2`
	var names []string
	for i := 0; i < 6; i++ {
		j, err := jobs.SubmitJob(waitCtx(t, 10*time.Second), &loomv1.SubmitJobRequest{Parent: "projects/default",
			Job: &loomv1.Job{Cluster: cl.Name, Script: script, NodeCount: 1, GpusPerNode: 1, DisplayName: "crash"}})
		if err != nil {
			t.Fatalf("submit %d: %v", i, err)
		}
		names = append(names, j.Name)
	}
	// Two GPUs in all: two jobs run, four wait.
	testkit.WaitFor(t, 60*time.Second, "some jobs running while others pending", func() (bool, error) {
		st, err := jobStates(waitCtx(t, 5*time.Second), jobs, names)
		if err != nil {
			return false, nil
		}
		var running, pending int
		for _, j := range st {
			switch j.State {
			case loomv1.JobState_RUNNING:
				running++
			case loomv1.JobState_PENDING:
				pending++
			}
		}
		return running > 0 && pending > 0, nil
	})
	if err := s.Kill(waitCtx(t, 10*time.Second), "scheduler"); err != nil { // SIGKILL, as a crash
		t.Fatal(err)
	}
	if err := s.Restart(waitCtx(t, 60*time.Second), "scheduler"); err != nil {
		t.Fatal(err)
	}

	testkit.WaitFor(t, 120*time.Second, "every job COMPLETED after the scheduler restart", func() (bool, error) {
		st, err := jobStates(waitCtx(t, 5*time.Second), jobs, names)
		if err != nil {
			return false, nil
		}
		for _, j := range st {
			switch j.State {
			case loomv1.JobState_COMPLETED:
			case loomv1.JobState_PENDING, loomv1.JobState_RUNNING, loomv1.JobState_CONFIGURING, loomv1.JobState_COMPLETING:
				return false, nil
			default:
				t.Fatalf("job %s ended %v (%s)", j.Name, j.State, j.StateReason)
			}
		}
		return true, nil
	})
	for _, n := range names {
		id := n[strings.LastIndex(n, "/")+1:]
		b, err := os.ReadFile(filepath.Join(shared, "runs-"+id))
		if err != nil {
			t.Fatalf("job %s left no trace of running: %v", n, err)
		}
		if lines := strings.Count(string(b), "\n"); lines != 1 {
			t.Errorf("job %s ran %d times:\n%s", n, lines, b)
		}
	}
	list, err := jobs.ListJobs(waitCtx(t, 5*time.Second), &loomv1.ListJobsRequest{Parent: "projects/default", Cluster: cl.Name})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Jobs) != len(names) {
		t.Errorf("scheduler lists %d jobs after restart, want %d", len(list.Jobs), len(names))
	}
}

package slurmcli

import (
	"bytes"
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/cmd/loom/internal/fakegw"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// testNow is the fixed clock of the output tests (UTC); ago(d) is d
// before it.
var testNow, ago = fakegw.TestNow, fakegw.Ago

const demoCluster = "projects/default/clusters/demo"

// run runs one command against f (served for this run) and returns its
// exit status and output.
func run(t *testing.T, f *fakegw.Gateway, name string, env Env, args ...string) (int, string, string) {
	t.Helper()
	env.Conn = f.Dial(t)
	if env.Project == "" {
		env.Project = "default"
	}
	if env.Cluster == "" {
		env.Cluster = "demo"
	}
	if env.User == "" {
		env.User = "alice"
	}
	if env.Now == nil {
		env.Now = func() time.Time { return testNow }
	}
	if env.Location == nil {
		env.Location = time.UTC
	}
	if env.CallTimeout == 0 {
		env.CallTimeout = 10 * time.Second
	}
	var out, errb bytes.Buffer
	code := Main(context.Background(), name, args, env, &out, &errb)
	return code, out.String(), errb.String()
}

// fixture is a small cluster with jobs in every interesting state, as the
// scheduler would report them.
func fixture() *fakegw.Gateway {
	yes := true
	job := func(id, name, user, part string, st loomv1.JobState) *loomv1.Job {
		return &loomv1.Job{Name: "projects/default/jobs/" + id, JobId: id, Cluster: demoCluster, DisplayName: name,
			User: user, Partition: part, State: st, NodeCount: 1, SubmitTime: ago(3 * time.Hour),
			WorkDir: "/home/" + user, SubmitDir: "/home/" + user, Requeue: &yes}
	}
	running := job("12", "train", "alice", "gpu", loomv1.JobState_RUNNING)
	running.NodeCount, running.Nodes, running.BatchHost = 2, []string{"gpu-0001", "gpu-0002"}, "gpu-0001"
	running.GpusPerNode, running.GpuType, running.Ntasks, running.CpusPerTask = 8, "h100", 2, 4
	running.StartTime, running.TimeLimitSeconds, running.MemMb = ago(time.Hour+2*time.Minute+3*time.Second), 2*3600, 65536
	running.SubmitHost, running.ScriptPath = "login-1", "/home/alice/train.sh"
	running.Account, running.Qos, running.Priority = "research", "normal", 1000
	running.OutputPath = "/home/alice/slurm-12.out"
	running.AllocGpus = 16
	running.PriorityFactors = &loomv1.PriorityFactors{Age: 10, Fairshare: 500, JobSize: 90, Partition: 400}

	pending := job("13", "evaluation-long-name", "bob", "gpu", loomv1.JobState_PENDING)
	pending.StateReason, pending.Priority = "Priority", 900
	pending.PriorityFactors = &loomv1.PriorityFactors{Age: 5, Fairshare: 300, JobSize: 45, Partition: 400, Qos: 150}

	held := job("14", "held", "alice", "gpu", loomv1.JobState_PENDING)
	held.Hold = true
	// A command line whose escapes would write another user's clipboard
	// (OSC 52) and clear their screen, were they printed as they are.
	held.Command = []string{"/bin/true", "\x1b]52;c;aGk=\x07\x1b[2J"}

	array := job("15", "sweep", "alice", "debug", loomv1.JobState_PENDING)
	array.Array, array.StateReason, array.Priority = "0-3%2", "JobArrayTaskLimit", 800
	task0 := job("16", "sweep", "alice", "debug", loomv1.JobState_RUNNING)
	task0.ArrayJobId, task0.ArrayTaskId, task0.Nodes = "15", 0, []string{"gpu-0003"}
	task0.StartTime = ago(30 * time.Second)

	done := job("10", "prep", "alice", "gpu", loomv1.JobState_COMPLETED)
	done.StartTime, done.EndTime, done.Nodes = ago(2*time.Hour), ago(time.Hour), []string{"gpu-0003"}
	failed := job("11", "oops", "alice", "gpu", loomv1.JobState_FAILED)
	failed.StartTime, failed.EndTime, failed.Nodes, failed.ExitCode = ago(50*time.Minute), ago(49*time.Minute), []string{"gpu-0004"}, 2
	failed.Runs = []*loomv1.JobRun{
		{Attempt: 1, State: loomv1.JobState_NODE_FAIL, Nodes: []string{"gpu-0002"}, StartTime: ago(55 * time.Minute), EndTime: ago(51 * time.Minute)},
		{Attempt: 2, State: loomv1.JobState_FAILED, Nodes: []string{"gpu-0004"}, StartTime: ago(50 * time.Minute), EndTime: ago(49 * time.Minute), ExitCode: 2},
	}
	failed.RestartCount = 1
	old := job("9", "yesterday", "alice", "gpu", loomv1.JobState_COMPLETED)
	old.SubmitTime, old.StartTime, old.EndTime = ago(40*time.Hour), ago(39*time.Hour), ago(38*time.Hour)
	other := job("20", "elsewhere", "alice", "gpu", loomv1.JobState_RUNNING)
	other.Cluster = "projects/default/clusters/other"

	node := func(h string, st loomv1.SlurmNode_State, alloc int32, parts ...string) *loomv1.SlurmNode {
		return &loomv1.SlurmNode{Hostname: h, Node: demoCluster + "/nodes/" + h, Cluster: demoCluster, State: st,
			Partitions: parts, Gpus: 8, AllocGpus: alloc, GpuType: "h100", Cpus: 16, AllocCpus: alloc, MemoryMb: 1024000}
	}
	drained := node("gpu-0004", loomv1.SlurmNode_DRAINED, 0, "gpu")
	drained.Reason, drained.ReasonUser, drained.ReasonTime = "bad gpu", "alice", ago(2*time.Hour)
	return &fakegw.Gateway{
		Jobs: []*loomv1.Job{old, done, failed, running, pending, held, array, task0, other},
		Partitions: []*loomv1.Partition{
			{Name: "gpu", Cluster: demoCluster, Default: true, State: "up", MaxTime: "UNLIMITED", PriorityTier: 1,
				Nodes: []string{"gpu-0001", "gpu-0002", "gpu-0003", "gpu-0004"}, TotalGpus: 32, AllocGpus: 24},
			{Name: "debug", Cluster: demoCluster, State: "up", MaxTime: "1:00:00", PriorityTier: 10,
				Nodes: []string{"gpu-0003"}, TotalGpus: 8},
		},
		SlurmNodes: []*loomv1.SlurmNode{
			node("gpu-0001", loomv1.SlurmNode_ALLOCATED, 8, "gpu"),
			node("gpu-0002", loomv1.SlurmNode_ALLOCATED, 8, "gpu"),
			node("gpu-0003", loomv1.SlurmNode_MIXED, 1, "gpu", "debug"),
			drained,
		},
		Clusters: []*loomv1.Cluster{{Name: demoCluster}, {Name: "projects/default/clusters/other"}},
	}
}

// cloneJobs copies a job list (tests change fixtures).
func cloneJobs(jobs []*loomv1.Job) []*loomv1.Job {
	out := make([]*loomv1.Job, len(jobs))
	for i, j := range jobs {
		out[i] = proto.Clone(j).(*loomv1.Job)
	}
	return out
}

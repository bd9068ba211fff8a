package cli

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/loom-ml/loom/cmd/loom/internal/fakegw"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// testNow is the fixed clock of rendering tests; ts(d) is d before it.
var testNow, ts = fakegw.TestNow, fakegw.Ago

// newFakeGateway serves the CLI tests' data (fakegw's gateway with cli's
// fixture: three clusters, their nodes, jobs 7 to 9, a model, a
// reservation, a3u's Slurm configuration) and returns it and its address.
func newFakeGateway(t *testing.T) (*fakegw.Gateway, string) {
	t.Helper()
	f := newFakeGatewayData()
	return f, f.Serve(t)
}

// newFakeGatewayData is newFakeGateway's gateway, not yet served (a test
// adds to it first: an AuthService, say).
func newFakeGatewayData() *fakegw.Gateway {
	f := &fakegw.Gateway{
		Clusters: []*loomv1.Cluster{{
			Name:       "projects/default/clusters/demo",
			Compute:    &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{{Id: "gpu", MachineType: "a3-highgpu-8g", NodeCount: 2, AcceleratorType: "nvidia-h100-80gb", AcceleratorCount: 8}}},
			Status:     &loomv1.ClusterStatus{State: loomv1.Cluster_RUNNING, ReadyNodes: 2, TotalNodes: 2, SharedDir: "/data/demo/shared"},
			CreateTime: ts(5 * time.Minute),
		}, {
			Name:       "projects/default/clusters/big-cluster",
			Compute:    &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{{Id: "cpu", MachineType: "n2-standard-8", NodeCount: 16}}},
			Status:     &loomv1.ClusterStatus{State: loomv1.Cluster_CREATING, ReadyNodes: 3, TotalNodes: 16, Message: "3 of 16 nodes ready"},
			CreateTime: ts(3 * time.Hour),
		}},
		Jobs: []*loomv1.Job{{
			Name: "projects/default/jobs/7", JobId: "7", Cluster: "projects/default/clusters/demo", DisplayName: "train",
			Command: []string{"loom", "train", "--epochs", "200"}, NodeCount: 2, State: loomv1.JobState_RUNNING,
			Nodes: []string{"gpu-0001", "gpu-0002"}, OutputPath: "/data/demo/shared/slurm-7.out",
			SubmitTime: ts(90 * time.Second), StartTime: ts(80 * time.Second), MaxRetries: 3, UserFailures: 1,
			CheckpointDir: "ckpt/train", Partition: "gpu", TimeLimitSeconds: 2 * 3600,
		}, {
			Name: "projects/default/jobs/8", JobId: "8", Cluster: "projects/default/clusters/demo",
			Script: "echo hi\n", NodeCount: 1, State: loomv1.JobState_FAILED, ExitCode: 3,
			SubmitTime: ts(50 * time.Hour), StartTime: ts(50 * time.Hour), EndTime: ts(50*time.Hour - 1500*time.Millisecond),
			RestartCount: 1, HangTimeoutSeconds: 600, CheckpointDir: "/data/demo/shared/ckpt/8", ExcludedNodes: []string{"gpu-0002"},
			Runs: []*loomv1.JobRun{
				{Attempt: 1, State: loomv1.JobState_REQUEUED, Nodes: []string{"gpu-0001", "gpu-0002"}, StartTime: ts(50*time.Hour + 5*time.Minute),
					EndTime: ts(50*time.Hour + 90*time.Second), Reason: "node gpu-0002 failed: Xid 79: GPU has fallen off the bus"},
				{Attempt: 2, State: loomv1.JobState_FAILED, Nodes: []string{"gpu-0001"}, StartTime: ts(50 * time.Hour),
					EndTime: ts(50*time.Hour - 1500*time.Millisecond), ExitCode: 3,
					BatchUsage: &loomv1.TaskUsage{UserCpu: durationpb.New(1200 * time.Millisecond), SystemCpu: durationpb.New(300 * time.Millisecond),
						MaxRssBytes: 98_123_456, Gpus: 2, GpuUtilPercent: 87.4, MaxGpuMemoryBytes: 71 << 30}},
			},
		}, {
			Name: "projects/default/jobs/9", JobId: "9", Cluster: "projects/default/clusters/demo",
			Command: []string{"sleep", "1"}, NodeCount: 4, State: loomv1.JobState_PENDING, StateReason: "Resources",
			SubmitTime: ts(10 * time.Second),
		}},
		Nodes: []*loomv1.Node{
			{Name: "projects/default/clusters/demo/nodes/gpu-0001", Cluster: "projects/default/clusters/demo", NodePool: "gpu", Hostname: "gpu-0001", State: loomv1.Node_READY, Gpus: 8, LastHeartbeat: ts(2 * time.Second)},
			{Name: "projects/default/clusters/demo/nodes/gpu-0002", Cluster: "projects/default/clusters/demo", NodePool: "gpu", Hostname: "gpu-0002", State: loomv1.Node_DOWN, Reason: "no heartbeat for 15s", Gpus: 8, LastHeartbeat: ts(20 * time.Second)},
		},
		Models:   []*loomv1.Model{{Name: "projects/default/models/demo-regressor", LatestVersion: 2, UpdateTime: ts(time.Minute)}},
		Versions: []*loomv1.ModelVersion{{Name: "projects/default/models/demo-regressor/versions/1", Version: 1, ArtifactUri: "file:///data/m/job-3", SourceJob: "projects/default/jobs/3", CreateTime: ts(time.Hour)}},
		Logs:     map[string][]string{"projects/default/jobs/7": {"epoch 1 loss 6.3\n", "epoch 2 loss 5.1\n"}},
		Reservations: []*loomv1.Reservation{{Name: "projects/default/reservations/r1", Zone: "us-central1-a",
			MachineType: "a3-ultragpu-8g", Count: 8, InUse: 4, Consumers: []string{"projects/default/clusters/a3u"}, CreateTime: ts(2 * time.Hour)}},
		Capacity: []*loomv1.CapacityPool{
			{Zone: "us-central1-a", MachineType: "a3-ultragpu-8g", Type: loomv1.CapacitySource_RESERVATION, Reservation: "projects/default/reservations/r1", Total: 8, InUse: 4, Free: 4},
			{Zone: "us-central1-a", MachineType: "a3-ultragpu-8g", Type: loomv1.CapacitySource_SPOT, Total: 64, InUse: 2, Free: 62},
		},
		SlurmConfigs: map[string]*loomv1.SlurmConfig{a3uName: {SlurmConf: "ClusterName=a3u\nNodeName=a3u-[0001-0004] Gres=gpu:8\n", GresConf: "NodeName=a3u-[0001-0004] Name=gpu Count=8\n", TopologyConf: "BlockName=block-01 Nodes=a3u-[0001-0004]"}},
	}
	f.Clusters = append(f.Clusters, a3uCluster())
	f.Nodes = append(f.Nodes, a3uNodes()...)
	f.NodeHealth = a3uHealth()
	return f
}

// a3uName is the cluster a3uCluster describes, the one with a Slurm
// configuration.
const a3uName = "projects/default/clusters/a3u"

// a3uCluster is a cluster with everything describe shows: a reservation
// pool and a spot pool, partitions, storage, a login node, conditions.
func a3uCluster() *loomv1.Cluster {
	return &loomv1.Cluster{
		Name:        "projects/default/clusters/a3u",
		Description: "two partitions",
		Compute: &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{
			{Id: "a3u", MachineType: "a3-ultragpu-8g", NodeCount: 4, AcceleratorType: "nvidia-h200-141gb", AcceleratorCount: 8,
				Capacity: &loomv1.CapacitySource{Type: loomv1.CapacitySource_RESERVATION, Reservation: "r1"}},
			{Id: "spot", MachineType: "a3-ultragpu-8g", NodeCount: 2, AcceleratorType: "nvidia-h200-141gb", AcceleratorCount: 8,
				Capacity: &loomv1.CapacitySource{Type: loomv1.CapacitySource_SPOT}, Zone: "us-central1-b"},
		}},
		Orchestrator: &loomv1.Orchestrator{Slurm: &loomv1.SlurmOrchestrator{
			LoginNodes: &loomv1.LoginNodes{MachineType: "n2-standard-8", Count: 1},
			NodeSets:   []*loomv1.SlurmNodeSet{{Id: "a3u", NodePoolId: "a3u"}, {Id: "spot", NodePoolId: "spot"}},
			Partitions: []*loomv1.SlurmPartition{
				{Id: "train", NodeSetIds: []string{"a3u"}, Default: true, PriorityTier: 10},
				{Id: "preempt", NodeSetIds: []string{"spot"}, MaxTime: "4:00:00"},
			},
		}},
		Storage: &loomv1.StorageResources{
			Home:    &loomv1.SharedHome{Tier: "ZONAL", CapacityGib: 1024, MountPath: "/home"},
			Scratch: &loomv1.ScratchFilesystem{ThroughputMbpsPerTib: 1000, CapacityGib: 2048, MountPath: "/scratch"},
		},
		Network: &loomv1.NetworkConfig{Name: "a3u-net", Mtu: 8896, Zone: "us-central1-a"},
		Status: &loomv1.ClusterStatus{
			State: loomv1.Cluster_RUNNING, ReadyNodes: 5, TotalNodes: 6, HomeDir: "/data/a3u/home", ScratchDir: "/data/a3u/scratch",
			LoginNode: "a3u-login-001",
			NodePools: []*loomv1.NodePoolStatus{{Id: "a3u", Target: 4, Ready: 4}, {Id: "spot", Target: 2, Ready: 1, Failed: 1}},
			Conditions: []*loomv1.Condition{
				{Type: "Ready", Status: "False", Reason: "NodesFailing", Message: "5 of 6 nodes ready", LastTransitionTime: ts(time.Minute)},
				{Type: "Degraded", Status: "True", Reason: "NodesFailing", Message: "spot-0002: preempted by provider", LastTransitionTime: ts(time.Minute)},
			},
		},
		CreateTime: ts(2 * time.Hour),
		UpdateTime: ts(time.Minute),
	}
}

// a3uHealth is the health of a3u's compute nodes: a3u-0004 drained by an
// operator ("maint"), the others healthy; demo's nodes have not reported.
func a3uHealth() []*loomv1.NodeHealth {
	var out []*loomv1.NodeHealth
	for _, h := range []string{"a3u-0001", "a3u-0002", "a3u-0003", "a3u-0004", "spot-0001", "spot-0002"} {
		nh := &loomv1.NodeHealth{Node: a3uName + "/nodes/" + h, Hostname: h, Cluster: a3uName, State: loomv1.RemediationState_NODE_HEALTHY,
			SetBy: "loom-health", StateTime: ts(2 * time.Hour)}
		if h == "a3u-0004" {
			nh.State, nh.Reason, nh.SetBy, nh.NextAction = loomv1.RemediationState_NODE_DRAINING, "maint", "users/ops", loomv1.RemediationAction_ACTION_DRAIN
		}
		out = append(out, nh)
	}
	return out
}

func a3uNodes() []*loomv1.Node {
	const c = "projects/default/clusters/a3u"
	var ns []*loomv1.Node
	for i := 1; i <= 4; i++ {
		h := fmt.Sprintf("a3u-%04d", i)
		ns = append(ns, &loomv1.Node{Name: c + "/nodes/" + h, Cluster: c, NodePool: "a3u", Hostname: h, State: loomv1.Node_READY,
			Gpus: 8, Zone: "us-central1-a", CapacityType: loomv1.CapacitySource_RESERVATION, Role: "compute", CreateTime: ts(2 * time.Hour)})
	}
	ns = append(ns,
		&loomv1.Node{Name: c + "/nodes/spot-0001", Cluster: c, NodePool: "spot", Hostname: "spot-0001", State: loomv1.Node_READY,
			Gpus: 8, Zone: "us-central1-b", CapacityType: loomv1.CapacitySource_SPOT, Role: "compute", CreateTime: ts(2 * time.Hour)},
		&loomv1.Node{Name: c + "/nodes/spot-0002", Cluster: c, NodePool: "spot", Hostname: "spot-0002", State: loomv1.Node_FAILED,
			Reason: "preempted by provider", NextAction: "replace when SPOT capacity returns",
			Gpus: 8, Zone: "us-central1-b", CapacityType: loomv1.CapacitySource_SPOT, Role: "compute", CreateTime: ts(time.Hour)},
		&loomv1.Node{Name: c + "/nodes/spot-0003", Cluster: c, NodePool: "spot", Hostname: "spot-0003", State: loomv1.Node_PROVISIONING,
			NextAction: "retry launch in 4s (attempt 2 of 5)", LaunchAttempts: 1,
			Gpus: 8, Zone: "us-central1-b", CapacityType: loomv1.CapacitySource_SPOT, Role: "compute", CreateTime: ts(time.Minute)},
		&loomv1.Node{Name: c + "/nodes/a3u-login-001", Cluster: c, Hostname: "a3u-login-001", State: loomv1.Node_READY,
			Zone: "us-central1-a", Role: "login", CreateTime: ts(2 * time.Hour)},
	)
	return ns
}

package domain

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/slurmspec"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// partitioned is c1 with two partitions: train over the gpu pool (default)
// and debug over the cpu pool.
func partitioned() *loomv1.Cluster {
	req := goodCluster()
	req.Cluster.Orchestrator = &loomv1.Orchestrator{Slurm: &loomv1.SlurmOrchestrator{
		NodeSets: []*loomv1.SlurmNodeSet{{Id: "gpu", NodePoolId: "gpu"}, {Id: "cpu", NodePoolId: "cpu"}},
		Partitions: []*loomv1.SlurmPartition{
			{Id: "train", NodeSetIds: []string{"gpu"}, Default: true},
			{Id: "debug", NodeSetIds: []string{"cpu"}, MaxTime: "1:00:00"},
		},
	}}
	c, err := AcceptCluster(req)
	if err != nil {
		panic(err)
	}
	c.Status = &loomv1.ClusterStatus{State: loomv1.Cluster_RUNNING, TotalNodes: 6}
	return c
}

func TestValidateSubmitJobSlurmOptions(t *testing.T) {
	t.Parallel()
	ok := func(mut func(*loomv1.Job)) *loomv1.SubmitJobRequest {
		r := goodJob()
		mut(r.Job)
		return r
	}
	for _, req := range []*loomv1.SubmitJobRequest{
		ok(func(j *loomv1.Job) {
			j.Array, j.Dependency, j.Signal, j.TimeLimitSeconds = "0-15:2%4", "afterok:12:13_2,singleton", "B:USR1@90", 3600
			j.WorkDir, j.SubmitDir, j.Nodelist, j.Exclude = "/home/u/run", "/home/u", []string{"gpu-0001"}, []string{"gpu-0002"}
		}),
		ok(func(j *loomv1.Job) { j.Partition = "train" }),
		// Several partitions (-p a,b), a repeat kept once.
		ok(func(j *loomv1.Job) { j.Partition, j.NodeCount, j.GpusPerNode = "train,debug,train", 1, 0 }),
		ok(func(j *loomv1.Job) {
			j.MaxRetries, j.HangTimeoutSeconds, j.CheckpointDir = slurmspec.MaxRetries, slurmspec.MaxHangTimeoutSeconds, "ckpt/run-1"
		}),
		ok(func(j *loomv1.Job) { j.HangTimeoutSeconds, j.CheckpointDir = slurmspec.HangTimeoutOff, "/shared/ckpt" }),
		ok(func(j *loomv1.Job) { j.Partition, j.NodeCount, j.GpusPerNode = "debug", 4, 0 }),
		ok(func(j *loomv1.Job) { j.NodeCount, j.GpusPerNode, j.Gpus = 1, 0, 16 }),
		ok(func(j *loomv1.Job) { j.GpuType = "H100" }),
	} {
		if err := ValidateSubmitJob(req, partitioned(), slurmspec.DefaultMaxArraySize); err != nil {
			t.Errorf("valid request %v rejected: %v", req.Job, err)
		}
	}
	for _, tc := range []struct {
		name   string
		mutate func(*loomv1.Job)
		want   string // field: and a piece of the reason
	}{
		{"negative time", func(j *loomv1.Job) { j.TimeLimitSeconds = -1 }, "job.time_limit_seconds: -1 must not be negative"},
		{"bad array", func(j *loomv1.Job) { j.Array = "3-1" }, `job.array: "3-1": range "3-1" ends before it starts`},
		// Slurm's MaxArraySize (1001 here): task ids 0..1000.
		{"huge array", func(j *loomv1.Job) { j.Array = "0-20000" }, "job.array: \"0-20000\": task id 20000 is not below MaxArraySize 1001 (task ids are 0-1000)"},
		{"array past MaxArraySize", func(j *loomv1.Job) { j.Array = "0-1001" }, "job.array: \"0-1001\": task id 1001 is not below MaxArraySize 1001"},
		{"task fields", func(j *loomv1.Job) { j.ArrayJobId = "7" }, "job.array_job_id"},
		{"bad dependency", func(j *loomv1.Job) { j.Dependency = "before:12" }, `job.dependency: "before:12": unknown dependency type`},
		{"bad open mode", func(j *loomv1.Job) { j.OpenMode = "overwrite" }, `job.open_mode: "overwrite": want "append" or "truncate"`},
		{"bad signal", func(j *loomv1.Job) { j.Signal = "B:FOO@5" }, "job.signal"},
		{"relative work dir", func(j *loomv1.Job) { j.WorkDir = "run" }, `job.work_dir: "run" must be an absolute path`},
		{"bad nodelist", func(j *loomv1.Job) { j.Nodelist = []string{"GPU_1"} }, "job.nodelist[0]"},
		{"negative mem", func(j *loomv1.Job) { j.MemMb = -5 }, "job.mem_mb"},
		// A node whose machine type is unknown takes any --mem: the
		// bound keeps its product over the nodes within an int64.
		{"huge mem", func(j *loomv1.Job) { j.MemMb = 1<<40 + 1 }, "job.mem_mb: 1099511627777 is more than 1099511627776, the most Loom takes"},
		{"negative mem per cpu", func(j *loomv1.Job) { j.MemPerCpuMb = -1 }, "job.mem_per_cpu_mb: -1 must not be negative"},
		// Past a node, --mem-per-cpu is named (not mem_mb, which the caller
		// may not have set), its product saturating rather than wrapping.
		{"mem per cpu past a node", func(j *loomv1.Job) { j.MemPerCpuMb = 1 << 40 }, "job.mem_per_cpu_mb: 1099511627776 MiB a CPU"},
		{"mem per cpu overflowing", func(j *loomv1.Job) { j.MemPerCpuMb = math.MaxInt64 }, "job.mem_per_cpu_mb: 9223372036854775807 MiB a CPU"},
		// Counts whose products the scheduler takes in int32: each has a bound.
		{"begin time before 1970", func(j *loomv1.Job) { j.BeginTime = timestamppb.New(time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC)) }, "job.begin_time: 1000-01-01T00:00:00Z is before 1970-01-01T00:00:00Z"},
		{"huge ntasks", func(j *loomv1.Job) { j.Ntasks = 1<<31 - 1 }, "job.ntasks: 2147483647 is more than 1048576, the most Loom takes"},
		{"huge tasks per node", func(j *loomv1.Job) { j.NtasksPerNode = 1<<31 - 1 }, "job.ntasks_per_node: 2147483647 is more than 4096"},
		{"huge cpus per task", func(j *loomv1.Job) { j.CpusPerTask = 1 << 30 }, "job.cpus_per_task: 1073741824 is more than 4096"},
		{"huge gpus", func(j *loomv1.Job) { j.Gpus = 1<<31 - 1 }, "job.gpus: 2147483647 is more than 1048576"},
		{"huge cpus per gpu", func(j *loomv1.Job) { j.CpusPerGpu = 4097 }, "job.cpus_per_gpu: 4097 is more than 4096"},
		{"negative cpus per gpu", func(j *loomv1.Job) { j.CpusPerGpu = -1 }, "job.cpus_per_gpu: -1 must not be negative"},
		{"cpus per gpu past a node", func(j *loomv1.Job) { j.CpusPerGpu = 27 }, "job.cpus_per_gpu: 216 CPUs a node (8 GPUs × 27 CPUs per GPU) exceed the 208 of the largest node in partition train of projects/default/clusters/c1 (Slurm: Requested node configuration is not available)"},
		{"cpus per gpu with cpus per task", func(j *loomv1.Job) { j.CpusPerGpu, j.CpusPerTask = 2, 2 }, "job.cpus_per_gpu: is mutually exclusive with cpus_per_task"},
		{"huge gpus per task", func(j *loomv1.Job) { j.GpusPerTask = 2000 }, "job.gpus_per_task: 2000 is more than 1024"},
		{"negative retries", func(j *loomv1.Job) { j.MaxRetries = -1 }, "job.max_retries: -1 is not 0 to 100"},
		{"too many retries", func(j *loomv1.Job) { j.MaxRetries = 101 }, "job.max_retries: 101 is not 0 to 100"},
		// 1<<62 seconds would wrap, as a duration, to a hang timeout of seconds.
		{"hang timeout past a week", func(j *loomv1.Job) { j.HangTimeoutSeconds = 1 << 62 }, "job.hang_timeout_seconds: 4611686018427387904 is not -1 (off), 0 (the cluster's default) or 1 to 604800 seconds (a week)"},
		{"hang timeout below off", func(j *loomv1.Job) { j.HangTimeoutSeconds = -2 }, "job.hang_timeout_seconds: -2 is not -1 (off)"},
		{"checkpoint dir leaving the shared dir", func(j *loomv1.Job) { j.CheckpointDir = "../../home/other" }, `job.checkpoint_dir: "../../home/other" leaves the cluster's shared directory`},
		{"checkpoint dir with an escape", func(j *loomv1.Job) { j.CheckpointDir = "/ckpt/\x1b[2J" }, "job.checkpoint_dir"},
		{"checkpoint dir too long", func(j *loomv1.Job) { j.CheckpointDir = "/" + strings.Repeat("d", MaxPathBytes) }, "job.checkpoint_dir"},
		{"unknown partition", func(j *loomv1.Job) { j.Partition = "gpu" }, `job.partition: no partition "gpu" in cluster c1 (partitions: train, debug; Slurm: Invalid partition name specified)`},
		{"a list with an unknown partition", func(j *loomv1.Job) { j.Partition = "train,gpu" }, `job.partition: no partition "gpu" in cluster c1`},
		{"a list with an empty name", func(j *loomv1.Job) { j.Partition = "train,,debug" }, `job.partition: "train,,debug": partition 2 of the list is empty`},
		{"a list too long", func(j *loomv1.Job) { j.Partition = "p1,p2,p3,p4,p5,p6,p7,p8,p9,p10,p11,p12,p13,p14,p15,p16,p17" },
			`job.partition: "p1,p2,p3,p4,p5,p6,p7,p8,p9,p10,p11,p12,p13,p14,p15,p16,p17" names 17 partitions, more than the 16 a job may name`},
		{"a list with a partition the job does not fit", func(j *loomv1.Job) { j.Partition = "train,debug" },
			"job.gpus_per_node: 8 exceeds the 0 GPUs of the largest node in partition debug"},
		{"gpus beyond the partition", func(j *loomv1.Job) { j.Partition = "debug" }, "job.gpus_per_node: 8 exceeds the 0 GPUs of the largest node in partition debug of projects/default/clusters/c1 (Slurm: Requested node configuration is not available)"},
		{"nodes beyond the partition", func(j *loomv1.Job) { j.Partition, j.NodeCount, j.GpusPerNode = "debug", 5, 0 }, "job.node_count: 5 exceeds the 4 nodes in partition debug"},
		{"--gpus in a partition of none", func(j *loomv1.Job) { j.Partition, j.NodeCount, j.GpusPerNode, j.Gpus = "debug", 1, 0, 1 },
			"job.gpus: 1 exceeds the 0 GPUs in partition debug"},
		{"--gpus past the partition's", func(j *loomv1.Job) { j.NodeCount, j.GpusPerNode, j.Gpus = 1, 0, 17 }, "job.gpus: 17 exceeds the 16 GPUs in partition train"},
		{"a GPU type the partition lacks", func(j *loomv1.Job) { j.GpuType = "a100" },
			"job.gpu_type: \"a100\" is not a GPU type of partition train of projects/default/clusters/c1 (it has h100; Slurm: Invalid generic resource (gres) specification)"},
		{"a GPU type in a partition of none", func(j *loomv1.Job) { j.Partition, j.NodeCount, j.GpusPerNode, j.GpuType = "debug", 1, 1, "h100" },
			"job.gpu_type: \"h100\" is not a GPU type of partition debug of projects/default/clusters/c1 (it has none"},
	} {
		req := goodJob()
		tc.mutate(req.Job)
		err := ValidateSubmitJob(req, partitioned(), slurmspec.DefaultMaxArraySize)
		var inv *errs.InvalidError
		if !errors.As(err, &inv) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want InvalidArgument containing %q", tc.name, err, tc.want)
		}
	}
	// The limit is the one configured (LOOM_MAX_ARRAY_SIZE): the issue's
	// sbatch --array=0-1999 passes under MaxArraySize 2000 and not under 1999.
	req2000 := ok(func(j *loomv1.Job) { j.Array = "0-1999" })
	if err := ValidateSubmitJob(req2000, partitioned(), 2000); err != nil {
		t.Errorf("--array=0-1999 under MaxArraySize 2000: %v", err)
	}
	if err := ValidateSubmitJob(req2000, partitioned(), 1999); err == nil || !strings.Contains(err.Error(), "task id 1999 is not below MaxArraySize 1999") {
		t.Errorf("--array=0-1999 under MaxArraySize 1999: %v", err)
	}
	// Without partitions in the spec, the generated default "all" holds every pool.
	req := goodJob()
	req.Job.Partition = "all"
	if err := ValidateSubmitJob(req, existing(), slurmspec.DefaultMaxArraySize); err != nil {
		t.Errorf("default partition of a spec without partitions rejected: %v", err)
	}
}

func TestArrayTaskJobID(t *testing.T) {
	t.Parallel()
	parent := &loomv1.Job{JobId: "10", Array: "0-15:5,7%2"} // indexes 0,5,7,10,15
	for idx, want := range map[int]int64{0: 10, 5: 11, 7: 12, 10: 13, 15: 14} {
		if got, ok := ArrayTaskJobID(parent, idx); !ok || got != want {
			t.Errorf("task %d: %d %v, want %d", idx, got, ok, want)
		}
	}
	for _, idx := range []int{1, 16, -1} {
		if got, ok := ArrayTaskJobID(parent, idx); ok {
			t.Errorf("task %d: %d, want none", idx, got)
		}
	}
	if _, ok := ArrayTaskJobID(&loomv1.Job{JobId: "3"}, 0); ok {
		t.Error("a job without array has tasks")
	}
	if n := ArrayTaskCount("0-3"); n != 4 {
		t.Errorf("ArrayTaskCount(0-3) = %d", n)
	}
}

func TestUpdateAndCancelChecks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		req  *loomv1.UpdateJobRequest
		want string // "" valid, else field
		act  string
	}{
		{&loomv1.UpdateJobRequest{Action: "Hold"}, "", "hold"},
		{&loomv1.UpdateJobRequest{Action: "update", TimeLimitSeconds: 60}, "", "update"},
		{&loomv1.UpdateJobRequest{Action: "update", Partition: "debug"}, "", "update"},
		{&loomv1.UpdateJobRequest{}, "action", ""},
		{&loomv1.UpdateJobRequest{Action: "suspend"}, "action", ""},
		{&loomv1.UpdateJobRequest{Action: "update"}, "action", ""},
		{&loomv1.UpdateJobRequest{Action: "update", TimeLimitSeconds: -5}, "time_limit_seconds", ""},
		{&loomv1.UpdateJobRequest{Action: "hold", Partition: "x"}, "partition", ""},
		{&loomv1.UpdateJobRequest{Action: "update", JobName: proto.String("renamed")}, "", "update"},
		{&loomv1.UpdateJobRequest{Action: "update", NodeCount: proto.Int32(2), Ntasks: proto.Int32(4), MemMb: proto.Int64(0)}, "", "update"},
		{&loomv1.UpdateJobRequest{Action: "update", Nodelist: &loomv1.HostList{}, Exclude: &loomv1.HostList{Hosts: []string{"gpu-0001"}}}, "", "update"},
		{&loomv1.UpdateJobRequest{Action: "update", ArrayTaskThrottle: proto.Int32(0)}, "", "update"},
		{&loomv1.UpdateJobRequest{Action: "hold", ArrayTaskThrottle: proto.Int32(2)}, "array_task_throttle", ""},
		{&loomv1.UpdateJobRequest{Action: "update", JobName: proto.String(" ")}, "job_name", ""},
		{&loomv1.UpdateJobRequest{Action: "update", JobName: proto.String("a\x1b[2Jb")}, "job_name", ""},
		{&loomv1.UpdateJobRequest{Action: "update", JobName: proto.String(strings.Repeat("n", MaxNameBytes+1))}, "job_name", ""},
		{&loomv1.UpdateJobRequest{Action: "update", NodeCount: proto.Int32(0)}, "node_count", ""},
		{&loomv1.UpdateJobRequest{Action: "update", Ntasks: proto.Int32(-1)}, "ntasks", ""},
		{&loomv1.UpdateJobRequest{Action: "update", MemMb: proto.Int64(-1)}, "mem_mb", ""},
		{&loomv1.UpdateJobRequest{Action: "update", MemMb: proto.Int64(slurmspec.MaxMemMB + 1)}, "mem_mb", ""},
		{&loomv1.UpdateJobRequest{Action: "update", MemMb: proto.Int64(slurmspec.MaxMemMB)}, "", "update"},
		{&loomv1.UpdateJobRequest{Action: "update", Nodelist: &loomv1.HostList{Hosts: []string{"../x"}}}, "nodelist[0]", ""},
		{&loomv1.UpdateJobRequest{Action: "update", Exclude: &loomv1.HostList{Hosts: make([]string, MaxHosts+1)}}, "exclude", ""},
		{&loomv1.UpdateJobRequest{Action: "update", ArrayTaskThrottle: proto.Int32(-2)}, "array_task_throttle", ""},
		{&loomv1.UpdateJobRequest{Action: "update", GpusPerNode: proto.Int32(-1)}, "gpus_per_node", ""},
		{&loomv1.UpdateJobRequest{Action: "update", GpusPerNode: proto.Int32(2), GpuType: proto.String("h100")}, "", "update"},
		{&loomv1.UpdateJobRequest{Action: "update", NodeCount: proto.Int32(1), MaxNodeCount: proto.Int32(3)}, "", "update"},
		{&loomv1.UpdateJobRequest{Action: "update", MaxNodeCount: proto.Int32(3)}, "max_node_count", ""},
		{&loomv1.UpdateJobRequest{Action: "update", NodeCount: proto.Int32(1), MaxNodeCount: proto.Int32(-1)}, "max_node_count", ""},
		{&loomv1.UpdateJobRequest{Action: "hold", MaxNodeCount: proto.Int32(3)}, "max_node_count", ""},
	} {
		act, err := ValidateUpdateJob(tc.req)
		switch {
		case tc.want == "" && (err != nil || act != tc.act):
			t.Errorf("ValidateUpdateJob(%v) = %q, %v; want %q", tc.req, act, err, tc.act)
		case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want+":")):
			t.Errorf("ValidateUpdateJob(%v) = %v, want InvalidArgument naming %s", tc.req, err, tc.want)
		}
	}
	// --mem-per-cpu is judged at a node range's widest (its least CPUs,
	// so its least memory, a node): -N1-2 -n2 with a node's memory for 2
	// CPUs at its minimum fits at 2 nodes; -N1 does not.
	pools := partitioned().GetCompute().GetNodePools()
	maxMB, known := largestNode(pools[:1], machineMemoryMB)
	if !known {
		t.Fatalf("no memory known for pool %v", pools[0])
	}
	per := maxMB/2 + 1
	for _, most := range []int32{2, 0} {
		j := &loomv1.Job{Partition: "train", NodeCount: 1, MaxNodeCount: most, Ntasks: 2, MemMb: 2 * per, MemPerCpuMb: per}
		err := CheckUpdatedJob(j, partitioned(), nil)
		if fits := most == 2; fits != (err == nil) || err != nil && !strings.Contains(err.Error(), "Memory specification can not be satisfied") {
			t.Errorf("CheckUpdatedJob(-N1-%d -n2 --mem-per-cpu=%d) = %v", most, per, err)
		}
	}
	if err := CheckUpdatedJob(&loomv1.Job{Partition: "gpu"}, partitioned(), nil); err == nil || !strings.Contains(err.Error(), "partition: no partition \"gpu\"") {
		t.Errorf("CheckUpdatedJob(partition gpu) = %v", err)
	}

	// An update's sizes and hosts are judged as at submission, naming the
	// update's fields.
	pending := &loomv1.Job{Partition: "train", NodeCount: 1, GpusPerNode: 8}
	for _, tc := range []struct {
		req  *loomv1.UpdateJobRequest
		want []string // nil: accepted
	}{
		{&loomv1.UpdateJobRequest{NodeCount: proto.Int32(2)}, nil},
		{&loomv1.UpdateJobRequest{NodeCount: proto.Int32(3)}, []string{"node_count: 3 exceeds the 2 nodes in partition train"}},
		{&loomv1.UpdateJobRequest{Partition: "debug", NodeCount: proto.Int32(4)}, []string{"gpus_per_node: 8 exceeds the 0 GPUs"}},
		{&loomv1.UpdateJobRequest{MemMb: proto.Int64(1 << 30)}, []string{"mem_mb:", "Memory specification can not be satisfied"}},
		{&loomv1.UpdateJobRequest{Exclude: &loomv1.HostList{Hosts: []string{"gpu-0001"}}}, nil},
		{&loomv1.UpdateJobRequest{NodeCount: proto.Int32(2), Exclude: &loomv1.HostList{Hosts: []string{"gpu-0001"}}}, []string{"exclude: leaves 1"}},
		{&loomv1.UpdateJobRequest{Nodelist: &loomv1.HostList{Hosts: []string{"cpu-0001"}}}, []string{"nodelist[0]: cpu-0001 is not in partition train"}},
		{&loomv1.UpdateJobRequest{Nodelist: &loomv1.HostList{Hosts: []string{"gpu-0009"}}}, []string{"nodelist[0]:", "Invalid node name specified"}},
		{&loomv1.UpdateJobRequest{GpusPerNode: proto.Int32(4), GpuType: proto.String("h100")}, nil},
		{&loomv1.UpdateJobRequest{GpusPerNode: proto.Int32(9)}, []string{"gpus_per_node: 9 exceeds the 8 GPUs of the largest node"}},
		{&loomv1.UpdateJobRequest{GpusPerNode: proto.Int32(1), GpuType: proto.String("a100")}, []string{"gpu_type:", "it has h100"}},
		// NumNodes=MIN-MAX: a maximum past the partition's nodes is no
		// error (the job takes what there is), one below the minimum is.
		{&loomv1.UpdateJobRequest{NodeCount: proto.Int32(1), MaxNodeCount: proto.Int32(8)}, nil},
		{&loomv1.UpdateJobRequest{NodeCount: proto.Int32(2), MaxNodeCount: proto.Int32(1)}, []string{"max_node_count: 1 must be at least node_count 2"}},
		{&loomv1.UpdateJobRequest{NodeCount: proto.Int32(3), MaxNodeCount: proto.Int32(4)}, []string{"node_count: 3 exceeds the 2 nodes in partition train"}},
	} {
		err := CheckUpdatedJob(Updated(pending, tc.req), partitioned(), partitionedNodes())
		if tc.want == nil && err != nil {
			t.Errorf("CheckUpdatedJob(%v) = %v, want accepted", tc.req, err)
		}
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("CheckUpdatedJob(%v) = %v, want it to say %q", tc.req, err, w)
			}
		}
	}
	if pending.GetNodeCount() != 1 || len(pending.GetExclude()) != 0 {
		t.Errorf("Updated changed the job it copies: %v", pending)
	}
	// The range travels: NumNodes=1-3 is node_count 1, max 3; a count alone
	// (or MIN-MIN) replaces the range.
	ranged := &loomv1.Job{Partition: "train", NodeCount: 1, MaxNodeCount: 3}
	for _, tc := range []struct {
		req       *loomv1.UpdateJobRequest
		min, most int32
	}{
		{&loomv1.UpdateJobRequest{NodeCount: proto.Int32(2), MaxNodeCount: proto.Int32(4)}, 2, 4},
		{&loomv1.UpdateJobRequest{NodeCount: proto.Int32(2), MaxNodeCount: proto.Int32(2)}, 2, 0},
		{&loomv1.UpdateJobRequest{NodeCount: proto.Int32(2)}, 2, 0},
		{&loomv1.UpdateJobRequest{Ntasks: proto.Int32(2)}, 1, 3},
	} {
		if u := Updated(ranged, tc.req); u.GetNodeCount() != tc.min || u.GetMaxNodeCount() != tc.most {
			t.Errorf("Updated(%v) has nodes %d-%d, want %d-%d", tc.req, u.GetNodeCount(), u.GetMaxNodeCount(), tc.min, tc.most)
		}
	}
	// NumNodes= raises tasks below it, as Slurm's controller (-n1, then
	// NumNodes=2 is NumTasks=2); NumTasks= alone leaves the nodes.
	oneTask := &loomv1.Job{Partition: "train", NodeCount: 1, Ntasks: 1}
	for _, tc := range []struct {
		req          *loomv1.UpdateJobRequest
		nodes, tasks int32
	}{
		{&loomv1.UpdateJobRequest{NodeCount: proto.Int32(2)}, 2, 2},
		{&loomv1.UpdateJobRequest{NodeCount: proto.Int32(2), Ntasks: proto.Int32(1)}, 2, 2},
		{&loomv1.UpdateJobRequest{NodeCount: proto.Int32(2), Ntasks: proto.Int32(3)}, 2, 3},
		{&loomv1.UpdateJobRequest{Ntasks: proto.Int32(1)}, 1, 1},
	} {
		if u := Updated(oneTask, tc.req); u.GetNodeCount() != tc.nodes || u.GetNtasks() != tc.tasks {
			t.Errorf("Updated(-n1, %v) has %d nodes, %d tasks; want %d and %d", tc.req, u.GetNodeCount(), u.GetNtasks(), tc.nodes, tc.tasks)
		}
	}
	if !Resizes(&loomv1.UpdateJobRequest{MaxNodeCount: proto.Int32(3)}) {
		t.Error("Resizes(max_node_count) = false: the range's maximum would not be judged against the cluster")
	}

	job := func(s loomv1.JobState) *loomv1.Job { return &loomv1.Job{State: s, Partition: "train"} }
	refusal := func(err error) string {
		if err == nil {
			return ""
		}
		if st := status.Convert(errs.ToStatus(err)); st.Code() != codes.FailedPrecondition {
			t.Errorf("%v maps to %s, want FailedPrecondition", err, st.Code())
		}
		return err.Error()
	}
	dep := "afterok:3"
	for _, tc := range []struct {
		action, partition string
		state             loomv1.JobState
		want              string
		dependency        *string
	}{
		{"hold", "", loomv1.JobState_PENDING, "", nil},
		{"hold", "", loomv1.JobState_RUNNING, "", nil},
		{"release", "", loomv1.JobState_COMPLETED, MsgFinished, nil},
		{"requeue", "", loomv1.JobState_PENDING, MsgPending, nil},
		{"requeue", "", loomv1.JobState_COMPLETED, "", nil},
		{"update", "debug", loomv1.JobState_RUNNING, MsgNoLongerPending, nil},
		{"update", "train", loomv1.JobState_RUNNING, "", nil},
		{"update", "", loomv1.JobState_FAILED, MsgFinished, nil},
		{"update", "", loomv1.JobState_RUNNING, MsgNoLongerPending, &dep},
		{"update", "", loomv1.JobState_PENDING, "", &dep},
	} {
		if tc.dependency == nil && tc.action == "update" && tc.partition == "" {
			// Sizes and hosts are pending-only too; a name is not.
			for _, req := range []*loomv1.UpdateJobRequest{{NodeCount: proto.Int32(1)}, {MemMb: proto.Int64(1)}, {Exclude: &loomv1.HostList{}}, {GpusPerNode: proto.Int32(1)}} {
				if got, want := refusal(CheckUpdate("update", req, job(loomv1.JobState_RUNNING))), MsgNoLongerPending; got != want {
					t.Errorf("CheckUpdate(update %v, RUNNING) = %q, want %q", req, got, want)
				}
			}
			if got := refusal(CheckUpdate("update", &loomv1.UpdateJobRequest{JobName: proto.String("x")}, job(loomv1.JobState_RUNNING))); got != "" {
				t.Errorf("CheckUpdate(update JobName, RUNNING) = %q, want allowed", got)
			}
		}
		req := &loomv1.UpdateJobRequest{Partition: tc.partition, Dependency: tc.dependency}
		if got := refusal(CheckUpdate(tc.action, req, job(tc.state))); got != tc.want {
			t.Errorf("CheckUpdate(%s %q, %s) = %q, want %q", tc.action, tc.partition, tc.state, got, tc.want)
		}
	}
	for _, tc := range []struct {
		state  loomv1.JobState
		signal string
		want   string
	}{
		{loomv1.JobState_PENDING, "", ""},
		{loomv1.JobState_RUNNING, "USR1", ""},
		{loomv1.JobState_PENDING, "USR1", MsgPending},
		{loomv1.JobState_COMPLETING, "", MsgAlreadyDone},
		{loomv1.JobState_CANCELLED, "", MsgAlreadyDone},
		{loomv1.JobState_COMPLETED, "TERM", MsgAlreadyDone},
	} {
		if got := refusal(CheckCancel(job(tc.state), tc.signal)); got != tc.want {
			t.Errorf("CheckCancel(%s, %q) = %q, want %q", tc.state, tc.signal, got, tc.want)
		}
	}
	for in, want := range map[string]string{"": "", "usr1": "USR1", "SIGTERM": "TERM", "9": "KILL", "STOP": "STOP"} {
		if got, err := ParseCancelSignal(in); err != nil || got != want {
			t.Errorf("ParseCancelSignal(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseCancelSignal("B:USR1"); err == nil || !strings.HasPrefix(err.Error(), "signal:") {
		t.Errorf("ParseCancelSignal(B:USR1) = %v, want InvalidArgument naming signal", err)
	}
	// An allocation ended as its command did (srun, salloc): 0 to 255, no signal.
	for _, tc := range []struct {
		code   int32
		signal string
		ok     bool
	}{{0, "", true}, {255, "", true}, {256, "", false}, {-1, "", false}, {1, "USR1", false}} {
		err := CheckCompletion(&loomv1.CancelJobRequest{ExitCode: proto.Int32(tc.code)}, tc.signal)
		if (err == nil) != tc.ok || err != nil && !strings.HasPrefix(err.Error(), "exit_code:") {
			t.Errorf("CheckCompletion(exit %d, signal %q) = %v", tc.code, tc.signal, err)
		}
	}
	if err := CheckCompletion(&loomv1.CancelJobRequest{}, "USR1"); err != nil {
		t.Errorf("CheckCompletion without exit_code = %v", err)
	}
}

func TestValidateUpdateSlurmNode(t *testing.T) {
	t.Parallel()
	const c = "projects/default/clusters/c1"
	for _, tc := range []struct {
		req   *loomv1.UpdateSlurmNodeRequest
		state string
		bad   []string
	}{
		{&loomv1.UpdateSlurmNodeRequest{Cluster: c, Hostname: "gpu-0001", State: "drain", Reason: "bad gpu"}, "DRAIN", nil},
		{&loomv1.UpdateSlurmNodeRequest{Cluster: c, Hostname: "gpu-0001", State: "RESUME"}, "RESUME", nil},
		{&loomv1.UpdateSlurmNodeRequest{Cluster: c, Hostname: "gpu-0001", State: "undrain"}, "RESUME", nil},
		{&loomv1.UpdateSlurmNodeRequest{Cluster: c, Hostname: "gpu-0001", State: "DRAIN", Reason: " "}, "", []string{"reason"}},
		{&loomv1.UpdateSlurmNodeRequest{Cluster: c, Hostname: "gpu-0001", State: "down", Reason: "bad DIMM"}, "DOWN", nil},
		{&loomv1.UpdateSlurmNodeRequest{Cluster: c, Hostname: "gpu-0001", State: "DOWN"}, "", []string{"reason"}},
		{&loomv1.UpdateSlurmNodeRequest{Cluster: c, Hostname: "gpu-0001", State: "FAIL", Reason: "x"}, "", []string{"state"}},
		{&loomv1.UpdateSlurmNodeRequest{Cluster: "c1", Hostname: "GPU_1"}, "", []string{"cluster", "hostname", "state"}},
	} {
		state, err := ValidateUpdateSlurmNode(tc.req)
		if tc.bad == nil {
			if err != nil || state != tc.state {
				t.Errorf("ValidateUpdateSlurmNode(%v) = %q, %v; want %q", tc.req, state, err, tc.state)
			}
			continue
		}
		if got := fields(t, err); strings.Join(got, ",") != strings.Join(tc.bad, ",") {
			t.Errorf("ValidateUpdateSlurmNode(%v) violations %v, want %v", tc.req, got, tc.bad)
		}
	}
	_, err := ValidateUpdateSlurmNode(&loomv1.UpdateSlurmNodeRequest{Cluster: c, Hostname: "gpu-0001", State: "DRAIN"})
	if err == nil || !strings.Contains(err.Error(), MsgDrainNeedsReason) {
		t.Errorf("drain without reason: %v, want Slurm's message", err)
	}
}

func TestListFilters(t *testing.T) {
	t.Parallel()
	var v errs.Validator
	ValidateListJobs(&v, &loomv1.ListJobsRequest{JobIds: []string{"12", "12_3", "x"}, States: []loomv1.JobState{0}, Users: []string{""}})
	if got := fields(t, v.Err()); strings.Join(got, ",") != "job_ids[2],states[0],users[0]" {
		t.Errorf("filter violations %v", got)
	}
	j := &loomv1.Job{JobId: "12", User: "ana", DisplayName: "train", Partition: "gpu", State: loomv1.JobState_PENDING}
	for _, tc := range []struct {
		req  *loomv1.ListJobsRequest
		want bool
	}{
		{&loomv1.ListJobsRequest{}, true},
		{&loomv1.ListJobsRequest{Users: []string{"ana"}, Names: []string{"train"}, Partitions: []string{"gpu"}, ActiveOnly: true}, true},
		{&loomv1.ListJobsRequest{Users: []string{"bob"}}, false},
		{&loomv1.ListJobsRequest{States: []loomv1.JobState{loomv1.JobState_RUNNING}}, false},
		{&loomv1.ListJobsRequest{JobIds: []string{"12_4"}}, false}, // not an array
		{&loomv1.ListJobsRequest{JobIds: []string{"13"}}, false},
	} {
		if got := MatchesList(tc.req, j); got != tc.want {
			t.Errorf("MatchesList(%v) = %v, want %v", tc.req, got, tc.want)
		}
	}
	// Job ids as the scheduler reads them (views.JobFilter): "A" names an
	// array's every task, "A_k" task k; an array record not split yet
	// stands for all its tasks.
	unsplit := &loomv1.Job{JobId: "50", Array: "0-3", State: loomv1.JobState_PENDING}
	task0 := &loomv1.Job{JobId: "50", Array: "0-3", ArrayJobId: "50", ArrayTaskId: 0, State: loomv1.JobState_COMPLETED}
	task2 := &loomv1.Job{JobId: "52", Array: "0-3", ArrayJobId: "50", ArrayTaskId: 2, State: loomv1.JobState_COMPLETED}
	for _, tc := range []struct {
		id   string
		j    *loomv1.Job
		want bool
	}{
		{"50", unsplit, true}, {"50_2", unsplit, true}, {"51", unsplit, false},
		{"50", task0, true}, {"50_0", task0, true}, {"50_2", task0, false},
		{"50", task2, true}, {"50_2", task2, true}, {"52", task2, true}, {"50_1", task2, false}, {"52_2", task2, false},
	} {
		if got := MatchesList(&loomv1.ListJobsRequest{JobIds: []string{tc.id}}, tc.j); got != tc.want {
			t.Errorf("job id %s of job %s (task %s_%d): %v, want %v", tc.id, tc.j.GetJobId(), tc.j.GetArrayJobId(), tc.j.GetArrayTaskId(), got, tc.want)
		}
	}
	for name, want := range map[*loomv1.Job]string{{DisplayName: "x", Command: []string{"/bin/true"}}: "x", {Command: []string{"/usr/bin/python3"}}: "python3", {Script: "true"}: "sbatch"} {
		if got := SlurmJobName(name); got != want {
			t.Errorf("SlurmJobName(%v) = %q, want %q", name, got, want)
		}
	}
	if !MatchesList(&loomv1.ListJobsRequest{Names: []string{"sbatch"}}, &loomv1.Job{Script: "true", State: loomv1.JobState_PENDING}) {
		t.Error("a script job without a name is not listed under the name sbatch")
	}
	if Filtered(&loomv1.ListJobsRequest{Cluster: "c1"}) || !Filtered(&loomv1.ListJobsRequest{ActiveOnly: true}) {
		t.Error("Filtered: the cluster is not a filter, active_only is")
	}
}

// TestAcceptJobPartitionList: a job's partition list is stored once per
// name, in the order given (-p a,b,a is a,b), and an update's too.
func TestAcceptJobPartitionList(t *testing.T) {
	t.Parallel()
	req := goodJob()
	req.Job.Partition = "debug,train,debug"
	if j := AcceptJob(req, partitioned(), 7, time.Now()); j.GetPartition() != "debug,train" {
		t.Errorf("accepted partition %q; want debug,train", j.GetPartition())
	}
	if j := Updated(&loomv1.Job{Partition: "train"}, &loomv1.UpdateJobRequest{Partition: "train,train,debug"}); j.GetPartition() != "train,debug" {
		t.Errorf("updated partition %q; want train,debug", j.GetPartition())
	}
	if _, err := ValidateUpdateJob(&loomv1.UpdateJobRequest{Action: "update", Partition: "train,"}); err == nil ||
		!strings.Contains(err.Error(), `partition: "train,": partition 2 of the list is empty`) {
		t.Errorf("update to train,: %v", err)
	}
}

// TestPartitionListErrorsOnce: a job of -p a,b is judged in each of its
// partitions, but what does not depend on the partition (a node count
// below 1, negative GPUs, a host both listed and excluded) is said once,
// at submission and at an update.
func TestPartitionListErrorsOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		mutate func(*loomv1.Job)
		want   string
	}{
		{"node count below 1", func(j *loomv1.Job) { j.NodeCount = -1 }, "node_count: -1 must be at least 1"},
		{"negative GPUs", func(j *loomv1.Job) { j.GpusPerNode = -1 }, "gpus_per_node: -1 must not be negative"},
	} {
		req := goodJob()
		req.Job.Partition = "train,debug"
		tc.mutate(req.Job)
		err := ValidateSubmitJob(req, partitioned(), slurmspec.DefaultMaxArraySize)
		if err == nil || strings.Count(err.Error(), tc.want) != 1 {
			t.Errorf("%s at submission: %v; want %q once", tc.name, err, tc.want)
		}
		err = CheckUpdatedJob(req.Job, partitioned(), nil)
		if err == nil || strings.Count(err.Error(), tc.want) != 1 {
			t.Errorf("%s at an update: %v; want %q once", tc.name, err, tc.want)
		}
	}
	j := goodJob().Job
	j.Partition, j.NodeCount, j.GpusPerNode = "train,debug", 1, 0
	j.Nodelist, j.Exclude = []string{"gpu-0001"}, []string{"gpu-0001"}
	err := CheckJobNodes(j, partitioned(), partitionedNodes())
	if want := "gpu-0001 is also excluded"; err == nil || strings.Count(err.Error(), want) != 1 {
		t.Errorf("a host listed and excluded in train,debug: %v; want %q once", err, want)
	}
}

package domain

import (
	"errors"
	"github.com/loom-ml/loom/libs/clusterspec"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/slurmspec"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

func goodCluster() *loomv1.CreateClusterRequest {
	return &loomv1.CreateClusterRequest{
		Parent: "projects/default", ClusterId: "c1",
		Cluster: &loomv1.Cluster{Compute: &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{
			{Id: "gpu", MachineType: "a3-highgpu-8g", NodeCount: 2, AcceleratorCount: 8},
			{Id: "cpu", MachineType: "n2-standard-8", NodeCount: 4},
		}}},
	}
}

func goodJob() *loomv1.SubmitJobRequest {
	return &loomv1.SubmitJobRequest{Parent: "projects/default", Job: &loomv1.Job{
		Cluster: "projects/default/clusters/c1", Command: []string{"python", "train.py"},
		NodeCount: 2, GpusPerNode: 8, ModelOutput: &loomv1.ModelOutput{ModelId: "tiny"},
		Env: map[string]string{"LR": "0.1"},
	}}
}

// existing is c1 as the provisioner reports it.
func existing() *loomv1.Cluster {
	c, err := AcceptCluster(goodCluster())
	if err != nil {
		panic(err)
	}
	c.Status = &loomv1.ClusterStatus{State: loomv1.Cluster_RUNNING, TotalNodes: 6}
	return c
}

// fields returns the violated field paths of an InvalidError.
func fields(t *testing.T, err error) []string {
	t.Helper()
	var inv *errs.InvalidError
	if !errors.As(err, &inv) {
		t.Fatalf("error %v is not an *errs.InvalidError", err)
	}
	var out []string
	for _, v := range inv.Violations {
		out = append(out, v.Field)
	}
	return out
}

func validateCreate(req *loomv1.CreateClusterRequest) error {
	_, err := AcceptCluster(req)
	return err
}

func TestValidateCreateCluster(t *testing.T) {
	t.Parallel()
	if err := validateCreate(goodCluster()); err != nil {
		t.Fatalf("valid request rejected: %v", err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*loomv1.CreateClusterRequest)
		want   []string
	}{
		{"no parent", func(r *loomv1.CreateClusterRequest) { r.Parent = "" }, []string{"parent"}},
		{"bad parent", func(r *loomv1.CreateClusterRequest) { r.Parent = "projects/x/y" }, []string{"parent"}},
		{"no cluster id", func(r *loomv1.CreateClusterRequest) { r.ClusterId = "" }, []string{"cluster_id"}},
		{"bad cluster id", func(r *loomv1.CreateClusterRequest) { r.ClusterId = "C_1" }, []string{"cluster_id"}},
		{"cluster id too long", func(r *loomv1.CreateClusterRequest) { r.ClusterId = strings.Repeat("a", 64) }, []string{"cluster_id"}},
		{"no cluster", func(r *loomv1.CreateClusterRequest) { r.Cluster = nil }, []string{"cluster"}},
		{"name mismatch", func(r *loomv1.CreateClusterRequest) { r.Cluster.Name = "projects/default/clusters/other" }, []string{"cluster.name"}},
		{"no pools", func(r *loomv1.CreateClusterRequest) { r.Cluster.Compute = nil }, []string{"cluster.compute.node_pools"}},
		{"no pool id", func(r *loomv1.CreateClusterRequest) { r.Cluster.Compute.NodePools[1].Id = "" }, []string{"cluster.compute.node_pools[1].id"}},
		{"bad pool id", func(r *loomv1.CreateClusterRequest) { r.Cluster.Compute.NodePools[0].Id = "-gpu" }, []string{"cluster.compute.node_pools[0].id"}},
		{"pool id too long", func(r *loomv1.CreateClusterRequest) { r.Cluster.Compute.NodePools[0].Id = strings.Repeat("g", 41) }, []string{"cluster.compute.node_pools[0].id"}},
		{"duplicate pool id", func(r *loomv1.CreateClusterRequest) { r.Cluster.Compute.NodePools[1].Id = "gpu" }, []string{"cluster.compute.node_pools[1].id"}},
		{"zero nodes", func(r *loomv1.CreateClusterRequest) { r.Cluster.Compute.NodePools[0].NodeCount = 0 }, []string{"cluster.compute.node_pools[0].node_count"}},
		{"too many nodes", func(r *loomv1.CreateClusterRequest) { r.Cluster.Compute.NodePools[1].NodeCount = 10001 }, []string{"cluster.compute.node_pools[1].node_count"}},
		{"negative gpus", func(r *loomv1.CreateClusterRequest) { r.Cluster.Compute.NodePools[0].AcceleratorCount = -1 }, []string{"cluster.compute.node_pools[0].accelerator_count"}},
		{"too many gpus", func(r *loomv1.CreateClusterRequest) { r.Cluster.Compute.NodePools[0].AcceleratorCount = 17 }, []string{"cluster.compute.node_pools[0].accelerator_count"}},
		{"all at once", func(r *loomv1.CreateClusterRequest) {
			r.ClusterId = "X"
			r.Cluster.Compute.NodePools[0].NodeCount = 0
			r.Cluster.Compute.NodePools[1].AcceleratorCount = 99
		}, []string{"cluster_id", "cluster.compute.node_pools[0].node_count", "cluster.compute.node_pools[1].accelerator_count"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req := goodCluster()
			tc.mutate(req)
			got := fields(t, validateCreate(req))
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("violations %v, want %v", got, tc.want)
			}
		})
	}
}

func TestValidateSubmitJob(t *testing.T) {
	t.Parallel()
	if err := ValidateSubmitJob(goodJob(), existing(), slurmspec.DefaultMaxArraySize); err != nil {
		t.Fatalf("valid request rejected: %v", err)
	}
	// A range's maximum past the partition's nodes is Slurm's -N1-8 on 4
	// nodes: the job takes what there is.
	wide := goodJob()
	wide.Job.MaxNodeCount = 100
	if err := ValidateSubmitJob(wide, existing(), slurmspec.DefaultMaxArraySize); err != nil {
		t.Fatalf("-N1-100 rejected: %v", err)
	}
	// A range whose minimum comes from the tasks (-n300 on nodes of 208
	// CPUs: 2) is accepted up to a maximum that holds it, and the job the
	// scheduler gets keeps the maximum at least the count (its own check).
	tasks := goodJob()
	tasks.Job.NodeCount, tasks.Job.GpusPerNode, tasks.Job.Ntasks, tasks.Job.MaxNodeCount = 0, 0, 300, 2
	if err := ValidateSubmitJob(tasks, existing(), slurmspec.DefaultMaxArraySize); err != nil {
		t.Fatalf("-n300 -N1-2 rejected: %v", err)
	}
	if j := AcceptJob(tasks, existing(), 1, time.Unix(0, 0)); j.GetMaxNodeCount() < j.GetNodeCount() {
		t.Fatalf("accepted node_count %d above max_node_count %d", j.GetNodeCount(), j.GetMaxNodeCount())
	}
	// All of the largest node's schedulable memory (an a3-highgpu-8g's
	// 1872 GiB less the OS's share: slurm.conf's RealMemory) fits.
	a3h, _ := clusterspec.Machine("a3-highgpu-8g")
	whole := goodJob()
	whole.Job.MemMb = a3h.SchedulableMemoryMiB()
	if err := ValidateSubmitJob(whole, existing(), slurmspec.DefaultMaxArraySize); err != nil {
		t.Fatalf("--mem of a whole node rejected: %v", err)
	}
	// --cpus-per-gpu up to a node's CPUs: 8 GPUs × 26 is an a3's 208;
	// --gpus=16 over two of them is 8 a node.
	for _, n := range []int32{1, 0} {
		cpg := goodJob()
		cpg.Job.NodeCount, cpg.Job.GpusPerNode, cpg.Job.CpusPerGpu = n, 8, 26
		if n == 0 {
			cpg.Job.GpusPerNode, cpg.Job.Gpus = 0, 16
		}
		if err := ValidateSubmitJob(cpg, existing(), slurmspec.DefaultMaxArraySize); err != nil {
			t.Fatalf("--cpus-per-gpu=26 of %v rejected: %v", cpg.Job, err)
		}
	}
	for _, tc := range []struct {
		name    string
		mutate  func(*loomv1.SubmitJobRequest)
		cluster *loomv1.Cluster
		want    []string
	}{
		{"no parent", func(r *loomv1.SubmitJobRequest) { r.Parent = "" }, existing(), []string{"parent"}},
		{"no job", func(r *loomv1.SubmitJobRequest) { r.Job = nil }, existing(), []string{"job"}},
		{"no cluster", func(r *loomv1.SubmitJobRequest) { r.Job.Cluster = "" }, nil, []string{"job.cluster"}},
		{"bad cluster", func(r *loomv1.SubmitJobRequest) { r.Job.Cluster = "clusters/c1" }, nil, []string{"job.cluster"}},
		{"other project", func(r *loomv1.SubmitJobRequest) { r.Job.Cluster = "projects/p2/clusters/c1" }, existing(), []string{"job.cluster"}},
		{"missing cluster", func(*loomv1.SubmitJobRequest) {}, nil, []string{"job.cluster"}},
		{"deleting cluster", func(*loomv1.SubmitJobRequest) {}, func() *loomv1.Cluster {
			c := existing()
			c.Status.State = loomv1.Cluster_DELETING
			return c
		}(), []string{"job.cluster"}},
		{"neither command nor script", func(r *loomv1.SubmitJobRequest) { r.Job.Command = nil }, existing(), []string{"job.command"}},
		{"both command and script", func(r *loomv1.SubmitJobRequest) { r.Job.Script = "echo hi" }, existing(), []string{"job.command"}},
		{"empty program", func(r *loomv1.SubmitJobRequest) { r.Job.Command = []string{""} }, existing(), []string{"job.command[0]"}},
		{"negative nodes", func(r *loomv1.SubmitJobRequest) { r.Job.NodeCount = -1 }, existing(), []string{"job.node_count"}},
		{"more nodes than the cluster", func(r *loomv1.SubmitJobRequest) { r.Job.NodeCount, r.Job.GpusPerNode = 7, 0 }, existing(), []string{"job.node_count"}},
		{"more GPU nodes than the cluster", func(r *loomv1.SubmitJobRequest) { r.Job.NodeCount = 3 }, existing(), []string{"job.node_count"}},
		{"node range max below min", func(r *loomv1.SubmitJobRequest) { r.Job.NodeCount, r.Job.MaxNodeCount = 2, 1 }, existing(), []string{"job.max_node_count"}},
		{"negative node range max", func(r *loomv1.SubmitJobRequest) { r.Job.MaxNodeCount = -1 }, existing(), []string{"job.max_node_count"}},
		{"node range max past any cluster", func(r *loomv1.SubmitJobRequest) { r.Job.MaxNodeCount = 20001 }, existing(), []string{"job.max_node_count"}},
		// -n300 -N1-1 where a node has 208 CPUs: the job is given the 2
		// nodes its tasks need (AcceptJob), which its maximum refuses.
		{"node range max below the nodes its tasks need", func(r *loomv1.SubmitJobRequest) {
			r.Job.NodeCount, r.Job.GpusPerNode, r.Job.Ntasks, r.Job.MaxNodeCount = 0, 0, 300, 1
		}, existing(), []string{"job.max_node_count"}},
		{"negative gpus", func(r *loomv1.SubmitJobRequest) { r.Job.GpusPerNode = -2 }, existing(), []string{"job.gpus_per_node"}},
		{"more gpus than a node", func(r *loomv1.SubmitJobRequest) { r.Job.GpusPerNode = 9 }, existing(), []string{"job.gpus_per_node"}},
		{"bad model id", func(r *loomv1.SubmitJobRequest) { r.Job.ModelOutput.ModelId = "" }, existing(), []string{"job.model_output.model_id"}},
		{"more memory than a node", func(r *loomv1.SubmitJobRequest) { r.Job.MemMb = a3h.SchedulableMemoryMiB() + 1 }, existing(), []string{"job.mem_mb"}},
		{"a whole machine's memory, the OS's share too", func(r *loomv1.SubmitJobRequest) { r.Job.MemMb = 1872 * 1024 }, existing(), []string{"job.mem_mb"}},
		{"more CPUs than a node", func(r *loomv1.SubmitJobRequest) { r.Job.CpusPerTask = 209 }, existing(), []string{"job.cpus_per_task"}},
		{"more tasks than a node's CPUs", func(r *loomv1.SubmitJobRequest) { r.Job.NtasksPerNode = 105; r.Job.CpusPerTask = 2 }, existing(), []string{"job.cpus_per_task"}},
		{"more tasks on a node than CPUs", func(r *loomv1.SubmitJobRequest) { r.Job.Ntasks = 2 * 209 }, existing(), []string{"job.ntasks"}},
		{"tasks times CPUs past 32 bits", func(r *loomv1.SubmitJobRequest) { r.Job.NodeCount, r.Job.Ntasks, r.Job.CpusPerTask = 1, 1<<20, 4096 },
			existing(), []string{"job.cpus_per_task"}},
		// --cpus-per-gpu counts a node's GPUs (Slurm: 8 × 27 of a 208-CPU
		// node is "Requested node configuration is not available").
		{"more CPUs for the GPUs than a node", func(r *loomv1.SubmitJobRequest) { r.Job.GpusPerNode, r.Job.CpusPerGpu = 8, 27 }, existing(), []string{"job.cpus_per_gpu"}},
		{"more CPUs for --gpus than a node", func(r *loomv1.SubmitJobRequest) {
			r.Job.NodeCount, r.Job.GpusPerNode, r.Job.Gpus, r.Job.CpusPerGpu = 0, 0, 8, 27
		},
			existing(), []string{"job.cpus_per_gpu"}},
		{"--cpus-per-gpu with -c", func(r *loomv1.SubmitJobRequest) { r.Job.CpusPerTask, r.Job.CpusPerGpu = 2, 3 }, existing(), []string{"job.cpus_per_gpu"}},
		{"bad env key", func(r *loomv1.SubmitJobRequest) { r.Job.Env = map[string]string{"A=B": "x"} }, existing(), []string{"job.env[A=B]"}},
		{"bad bash function", func(r *loomv1.SubmitJobRequest) {
			r.Job.Env = map[string]string{"BASH_FUNC_module%%": "() { :; }", "BASH_FUNC_a=b%%": "x"}
		}, existing(), []string{"job.env[BASH_FUNC_a=b%%]"}},
		{"all at once", func(r *loomv1.SubmitJobRequest) {
			r.Job.Command = nil
			r.Job.GpusPerNode = 99
		}, existing(), []string{"job.command", "job.gpus_per_node"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req := goodJob()
			tc.mutate(req)
			got := fields(t, ValidateSubmitJob(req, tc.cluster, slurmspec.DefaultMaxArraySize))
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("violations %v, want %v", got, tc.want)
			}
		})
	}
}

func TestAcceptJob(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 5, 6, 7, 8, 9, 0, time.UTC)
	req := goodJob()
	req.Job.Cluster = "c1" // a bare id is taken in the parent's project
	req.Job.NodeCount = 0
	req.Job.State = loomv1.JobState_COMPLETED
	req.Job.Nodes = []string{"x"}
	req.Job.UserFailures = 7 // output only: the scheduler counts them
	// Output only too: a caller's would show as the scheduler's promise
	// in squeue --start and scontrol show job.
	req.Job.ExpectedStartTime, req.Job.SchedNodes = timestamppb.New(now), []string{"gpu-0001"}
	req.Job.Steps, req.Job.StepsOmitted = []*loomv1.JobStep{{Name: "fake"}}, 3
	if err := ValidateSubmitJob(req, existing(), slurmspec.DefaultMaxArraySize); err != nil {
		t.Fatalf("bare cluster id rejected: %v", err)
	}
	j := AcceptJob(req, existing(), 42, now)
	if j.GetName() != "projects/default/jobs/42" || j.GetJobId() != "42" || j.GetCluster() != "projects/default/clusters/c1" {
		t.Fatalf("accepted job names: %v", j)
	}
	if j.GetPartition() != "all" {
		t.Fatalf("accepted job partition %q, want the cluster's default partition \"all\"", j.GetPartition())
	}
	if j.GetNodeCount() != 1 || j.GetState() != loomv1.JobState_PENDING || len(j.GetNodes()) != 0 || !j.GetSubmitTime().AsTime().Equal(now) ||
		j.GetUserFailures() != 0 || j.GetExpectedStartTime() != nil || j.GetSchedNodes() != nil || j.GetSteps() != nil || j.GetStepsOmitted() != 0 {
		t.Fatalf("accepted job fields: %v", j)
	}
	if req.Job.GetName() != "" {
		t.Fatal("AcceptJob modified the request")
	}
}

func TestOperationLifecycle(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	name := resname.Operation{Project: "default", ID: "01OP"}.String()
	op := NewOperation(name, VerbCreate, "projects/default/clusters/c1", now)
	cl := &loomv1.Cluster{Name: "projects/default/clusters/c1", Status: &loomv1.ClusterStatus{
		State: loomv1.Cluster_CREATING, ReadyNodes: 1, TotalNodes: 2,
	}}
	if _, changed := OnClusterEvent(op, &eventsv1.ClusterChanged{Operation: "other", Cluster: cl}, now); changed {
		t.Fatal("an event of another operation changed it")
	}
	p, changed := OnClusterEvent(op, &eventsv1.ClusterChanged{Operation: name, Cluster: cl}, now)
	if !changed || p.GetDone() || p.GetMetadata().GetProgress() != "1 of 2 nodes ready" {
		t.Fatalf("progress: %v", p)
	}
	if op.GetMetadata().GetProgress() != "requested" {
		t.Fatal("OnClusterEvent modified its input")
	}
	done := proto.Clone(cl).(*loomv1.Cluster)
	done.Status.State, done.Status.ReadyNodes = loomv1.Cluster_RUNNING, 2
	d, changed := OnClusterEvent(p, &eventsv1.ClusterChanged{Operation: name, Cluster: done, OperationDone: true}, now.Add(time.Minute))
	if !changed || !d.GetDone() || !proto.Equal(d.GetCluster(), done) || !d.GetMetadata().GetEndTime().AsTime().Equal(now.Add(time.Minute)) {
		t.Fatalf("done: %v", d)
	}
	if _, changed := OnClusterEvent(d, &eventsv1.ClusterOperationFailed{Operation: name, Code: 6}, now); changed {
		t.Fatal("a done operation changed")
	}
	f, changed := OnClusterEvent(op, &eventsv1.ClusterOperationFailed{Operation: name, Code: 6, Message: "exists"}, now)
	if !changed || !f.GetDone() || f.GetError().GetCode() != 6 || f.GetError().GetMessage() != "exists" {
		t.Fatalf("failed: %v", f)
	}
	del := NewOperation(name, VerbDelete, "projects/default/clusters/c1", now)
	g, changed := OnClusterEvent(del, &eventsv1.ClusterDeleted{Operation: name, Cluster: "projects/default/clusters/c1"}, now)
	if !changed || !g.GetDone() || g.GetCluster().GetStatus().GetState() != loomv1.Cluster_DELETED {
		t.Fatalf("deleted: %v", g)
	}
}

func TestNamesAndStates(t *testing.T) {
	t.Parallel()
	// The gateway's job names, through libs/resname.
	parseJobRef := func(name string) (string, slurmspec.JobRef, error) {
		j, err := resname.ParseJob(name)
		if err != nil {
			return "", slurmspec.JobRef{}, err
		}
		ref, err := j.Ref()
		return j.Project, ref, err
	}
	if p, ref, err := parseJobRef("projects/default/jobs/12"); err != nil || p != "default" || ref.JobID != 12 || ref.Task != -1 {
		t.Fatalf("ParseJob: %q %+v %v", p, ref, err)
	}
	if p, ref, err := parseJobRef("projects/default/jobs/12_3"); err != nil || p != "default" || ref.JobID != 12 || ref.Task != 3 {
		t.Fatalf("ParseJob of a task: %q %+v %v", p, ref, err)
	}
	for _, bad := range []string{"projects/default/jobs/x", "projects/default/jobs/012", "projects/default/jobs/0", "jobs/1",
		"projects/default/jobs/12_", "projects/default/jobs/12_x", "projects/Bad/jobs/1", "projects/default/jobs/1/x"} {
		if _, _, err := parseJobRef(bad); err == nil {
			t.Errorf("ParseJob(%q) accepted", bad)
		}
	}
	if _, err := resname.ParseClusterParent("projects/default/clusters/-"); err != nil {
		t.Errorf("all-clusters parent rejected: %v", err)
	}
	if _, err := resname.ParseOperation("projects/default/operations/01ABC"); err != nil {
		t.Errorf("operation name rejected: %v", err)
	}
	terminal := map[loomv1.JobState]bool{
		loomv1.JobState_COMPLETED: true, loomv1.JobState_FAILED: true, loomv1.JobState_CANCELLED: true,
		loomv1.JobState_TIMEOUT: true, loomv1.JobState_NODE_FAIL: true, loomv1.JobState_OUT_OF_MEMORY: true,
		loomv1.JobState_PREEMPTED: true,
	}
	for s := range loomv1.JobState_name {
		st := loomv1.JobState(s)
		if st.Terminal() != terminal[st] {
			t.Errorf("%s.Terminal() = %v", st, st.Terminal())
		}
	}
	if Rank(loomv1.JobState_PENDING) >= Rank(loomv1.JobState_RUNNING) || Rank(loomv1.JobState_RUNNING) >= Rank(loomv1.JobState_FAILED) {
		t.Error("Rank does not order pending < running < ended")
	}
}

func TestAcceptReservation(t *testing.T) {
	t.Parallel()
	good := func() *loomv1.CreateReservationRequest {
		return &loomv1.CreateReservationRequest{Parent: "projects/default", ReservationId: "h200-res", Reservation: &loomv1.Reservation{
			Zone: "us-central1-a", MachineType: "a3-ultragpu-8g", Count: 4, InUse: 3, Consumers: []string{"x"},
		}}
	}
	r, err := AcceptReservation(good())
	if err != nil {
		t.Fatalf("valid request rejected: %v", err)
	}
	if r.GetName() != "projects/default/reservations/h200-res" || r.GetCount() != 4 || r.GetInUse() != 0 || r.GetConsumers() != nil {
		t.Fatalf("accepted: %v", r)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*loomv1.CreateReservationRequest)
		want   []string
	}{
		{"bad parent", func(r *loomv1.CreateReservationRequest) { r.Parent = "p" }, []string{"parent"}},
		{"no id", func(r *loomv1.CreateReservationRequest) { r.ReservationId = "" }, []string{"reservation_id"}},
		{"id Slurm and URLs reject", func(r *loomv1.CreateReservationRequest) { r.ReservationId = "H200 res" }, []string{"reservation_id"}},
		{"no reservation", func(r *loomv1.CreateReservationRequest) { r.Reservation = nil }, []string{"reservation"}},
		{"name mismatch", func(r *loomv1.CreateReservationRequest) { r.Reservation.Name = "projects/default/reservations/x" }, []string{"reservation.name"}},
		{"no zone", func(r *loomv1.CreateReservationRequest) { r.Reservation.Zone = "" }, []string{"reservation.zone"}},
		// A pool's zone must be a zone name, so a reservation elsewhere
		// could never be claimed.
		{"zone no pool can name", func(r *loomv1.CreateReservationRequest) { r.Reservation.Zone = "US central" }, []string{"reservation.zone"}},
		{"no machine type", func(r *loomv1.CreateReservationRequest) { r.Reservation.MachineType = "" }, []string{"reservation.machine_type"}},
		{"unknown machine type", func(r *loomv1.CreateReservationRequest) { r.Reservation.MachineType = "a3-ultragpu-9g" }, []string{"reservation.machine_type"}},
		{"no nodes", func(r *loomv1.CreateReservationRequest) { r.Reservation.Count = 0 }, []string{"reservation.count"}},
		{"all at once", func(r *loomv1.CreateReservationRequest) {
			r.ReservationId, r.Reservation.Zone, r.Reservation.Count = "X", "", -1
		}, []string{"reservation_id", "reservation.zone", "reservation.count"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req := good()
			tc.mutate(req)
			_, err := AcceptReservation(req)
			if got := fields(t, err); strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("violations %v, want %v", got, tc.want)
			}
		})
	}
}

func TestReservationOperations(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	name := resname.Operation{Project: "default", ID: "01RES"}.String()
	op := NewOperation(name, VerbCreate, "projects/default/reservations/r1", now)
	r := &loomv1.Reservation{Name: "projects/default/reservations/r1", Zone: "z", MachineType: "a3-ultragpu-8g", Count: 2}
	if _, changed := OnClusterEvent(op, &eventsv1.ReservationChanged{Operation: "other", Reservation: r, OperationDone: true}, now); changed {
		t.Fatal("an event of another operation changed it")
	}
	d, changed := OnClusterEvent(op, &eventsv1.ReservationChanged{Operation: name, Reservation: r, OperationDone: true}, now)
	if !changed || !d.GetDone() || !proto.Equal(d.GetReservation(), r) || d.GetMetadata().GetEndTime() == nil {
		t.Fatalf("created: %v", d)
	}
	del := NewOperation(name, VerbDelete, r.GetName(), now)
	g, changed := OnClusterEvent(del, &eventsv1.ReservationDeleted{Operation: name, Reservation: r.GetName()}, now)
	if !changed || !g.GetDone() || g.GetReservation().GetName() != r.GetName() || g.GetError() != nil {
		t.Fatalf("deleted: %v", g)
	}
	f, changed := OnClusterEvent(op, &eventsv1.ClusterOperationFailed{Operation: name, Cluster: r.GetName(), Code: 6, Message: "exists"}, now)
	if !changed || !f.GetDone() || f.GetError().GetCode() != 6 {
		t.Fatalf("failed: %v", f)
	}
	u := Unchanged(NewOperation(name, VerbUpdate, "projects/default/clusters/c1", now), &loomv1.Cluster{Name: "projects/default/clusters/c1"}, now)
	if !u.GetDone() || u.GetCluster().GetName() != "projects/default/clusters/c1" || u.GetMetadata().GetProgress() != "no change" {
		t.Fatalf("unchanged: %v", u)
	}
}

// TestTooManyTasksSaysHowManyNodes: -n past one node's CPUs is refused
// saying how many nodes would hold the tasks (Loom, unlike Slurm, does
// not add them itself).
func TestTooManyTasksSaysHowManyNodes(t *testing.T) {
	t.Parallel()
	req := goodJob()
	req.Job.NodeCount, req.Job.GpusPerNode, req.Job.Ntasks = 1, 0, 418 // 208 vCPUs a node
	err := ValidateSubmitJob(req, existing(), slurmspec.DefaultMaxArraySize)
	if err == nil || !strings.Contains(err.Error(), "job.ntasks") || !strings.Contains(err.Error(), "(-N 3)") {
		t.Fatalf("got %v, want job.ntasks refused with -N 3", err)
	}
}

// TestNodesFor: -n without -N gets enough nodes for its tasks' CPUs, as
// Slurm's controller gives (the largest machine of the partition, 208
// vCPUs here); a count, tasks per node or GPUs the scheduler spreads keep
// theirs (or 1); more nodes than the partition has is refused naming
// job.ntasks.
func TestNodesFor(t *testing.T) {
	t.Parallel()
	c := existing()
	for _, tc := range []struct {
		name string
		set  func(*loomv1.Job)
		want int32
	}{
		{"-n 418", func(j *loomv1.Job) { j.Ntasks = 418 }, 3},
		{"-n 416", func(j *loomv1.Job) { j.Ntasks = 416 }, 2},
		{"-n 20 -c 100", func(j *loomv1.Job) { j.Ntasks, j.CpusPerTask = 20, 100 }, 10},
		{"-N 4 -n 418", func(j *loomv1.Job) { j.NodeCount, j.Ntasks = 4, 418 }, 4},
		{"-n 418 --ntasks-per-node 2", func(j *loomv1.Job) { j.Ntasks, j.NtasksPerNode = 418, 2 }, 1},
		{"-n 418 --gpus 16", func(j *loomv1.Job) { j.Ntasks, j.Gpus = 418, 16 }, 1},
		{"nothing", func(*loomv1.Job) {}, 1},
	} {
		j := &loomv1.Job{}
		tc.set(j)
		if got := NodesFor(j, c); got != tc.want {
			t.Errorf("%s: %d nodes, want %d", tc.name, got, tc.want)
		}
	}
	req := goodJob()
	req.Job.NodeCount, req.Job.GpusPerNode, req.Job.Ntasks = 0, 0, 418
	if err := ValidateSubmitJob(req, c, slurmspec.DefaultMaxArraySize); err != nil {
		t.Fatalf("-n 418: %v", err)
	}
	if j := AcceptJob(req, c, 7, time.Now()); j.GetNodeCount() != 3 {
		t.Errorf("-n 418 accepted with %d nodes, want 3", j.GetNodeCount())
	}
	req.Job.CpusPerTask = 100 // 2 tasks a node: 209 nodes, of 6
	err := ValidateSubmitJob(req, c, slurmspec.DefaultMaxArraySize)
	if got := fields(t, err); strings.Join(got, ",") != "job.ntasks" || !strings.Contains(err.Error(), "need 209 nodes") {
		t.Errorf("-n 418 -c 100: %v", err)
	}
}

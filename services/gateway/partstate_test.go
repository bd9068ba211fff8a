package gateway

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/loom-ml/loom/libs/testkit"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// partitionsCluster is c1 (its machine types set) with partitions gpu
// (DRAIN), cpu (INACTIVE) and open (DOWN), as scontrol update
// PartitionName=P State=... leaves them.
func partitionsCluster() *loomv1.Cluster {
	c := matrixCluster()
	c.Orchestrator = &loomv1.Orchestrator{Slurm: &loomv1.SlurmOrchestrator{
		NodeSets: []*loomv1.SlurmNodeSet{{Id: "gpu", NodePoolId: "gpu"}, {Id: "cpu", NodePoolId: "cpu"}},
		Partitions: []*loomv1.SlurmPartition{
			{Id: "gpu", NodeSetIds: []string{"gpu"}, Default: true, State: "DRAIN"},
			{Id: "cpu", NodeSetIds: []string{"cpu"}, State: "INACTIVE"},
			{Id: "open", NodeSetIds: []string{"gpu"}, State: "DOWN"},
		}}}
	return c
}

// TestPartitionStateRefusesSubmissions: a DRAIN or INACTIVE partition takes
// no new jobs, with Slurm's words (sbatch: "Required partition not
// available (inactive or drain)") and the partition's state; a DOWN one
// takes them (they wait in the scheduler); of -p a,b the partitions that
// refuse are left out, as slurmctld does.
func TestPartitionStateRefusesSubmissions(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.w.setCluster(partitionsCluster())
	ctx := testkit.Context(t, wait)
	submit := func(partition string) (*loomv1.Job, error) {
		r := validJob()
		r.Job.Partition = partition
		return h.jobs().SubmitJob(ctx, r)
	}
	for _, tc := range []struct{ partition, want string }{
		{"gpu", "job.partition: Required partition not available (inactive or drain): partition gpu is DRAIN"},
		{"", "job.partition: Required partition not available (inactive or drain): partition gpu is DRAIN"}, // the default
		{"cpu", "partition cpu is INACTIVE"},
		{"gpu,cpu", "partition gpu is DRAIN, cpu is INACTIVE"},
	} {
		_, err := submit(tc.partition)
		wantCode(t, "submit to "+tc.partition, err, codes.InvalidArgument, tc.want)
	}
	if j, err := submit("open"); err != nil || j.GetPartition() != "open" {
		t.Fatalf("submit to DOWN partition open: %v %v, want accepted", j, err)
	}
	if j, err := submit("gpu,open"); err != nil || j.GetPartition() != "open" {
		t.Fatalf("submit to gpu,open: %v %v, want accepted in open alone", j, err)
	}
}

// TestPartitionStateUpdateAuthorized: a partition's state is changed by
// UpdateCluster (orchestrator.slurm.partitions), which project and cluster
// administrators may call and users may not; a state Slurm does not have
// is refused naming the field and the states.
func TestPartitionStateUpdateAuthorized(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.enrol(t)
	h.w.setCluster(matrixCluster())
	ctx := testkit.Context(t, wait)
	req := func(state string) *loomv1.UpdateClusterRequest {
		c := partitionsCluster()
		c.Status = nil
		c.Orchestrator.Slurm.Partitions[0].State = state
		return &loomv1.UpdateClusterRequest{Cluster: c, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"orchestrator.slurm.partitions"}}}
	}
	_, err := loomv1.NewClusterServiceClient(h.as(t, "ana")).UpdateCluster(ctx, req("DOWN"))
	wantCode(t, "a user sets a partition DOWN", err, codes.PermissionDenied)
	_, err = loomv1.NewClusterServiceClient(h.as(t, "pat")).UpdateCluster(ctx, req("down"))
	wantCode(t, "state down", err, codes.InvalidArgument, "cluster.orchestrator.slurm.partitions[0].state", "UP, DOWN, DRAIN or INACTIVE")
	for _, who := range []string{"pat", "root"} {
		r := req("DOWN")
		r.RequestId = "partition-down-" + who
		if _, err := loomv1.NewClusterServiceClient(h.as(t, who)).UpdateCluster(ctx, r); err != nil {
			t.Fatalf("%s sets partition gpu DOWN: %v", who, err)
		}
	}
}

// TestPartitionStateRefusesMoves: scontrol update JobId=J Partition=P is
// refused for a DRAIN or INACTIVE partition as a submission to it is, or
// a job accepted in a DOWN partition could be moved into a drained one and
// started there; of a list the partitions that refuse are left out of the
// command.
func TestPartitionStateRefusesMoves(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.w.setCluster(partitionsCluster())
	ctx := testkit.Context(t, wait)
	r := validJob()
	r.Job.Partition = "open"
	j, err := h.jobs().SubmitJob(ctx, r)
	if err != nil {
		t.Fatalf("submit to DOWN partition open: %v", err)
	}
	for _, tc := range []struct{ partition, want string }{
		{"gpu", "partition: Required partition not available (inactive or drain): partition gpu is DRAIN"},
		{"cpu", "partition cpu is INACTIVE"},
		{"gpu,cpu", "partition gpu is DRAIN, cpu is INACTIVE"},
	} {
		_, err := h.jobs().UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: j.GetName(), Action: "update", Partition: tc.partition})
		wantCode(t, "move to "+tc.partition, err, codes.InvalidArgument, tc.want)
	}
	if _, err := h.jobs().UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: j.GetName(), Action: "update", Partition: "gpu,open"}); err != nil {
		t.Fatalf("move to gpu,open: %v", err)
	}
	cmd := jobCommand(t, h, func(u *eventsv1.UpdateJob) bool { return u.GetJob() == j.GetName() && u.GetAction() == "update" })
	if cmd.GetPartition() != "open" {
		t.Fatalf("UpdateJob command's partition %q, want open (gpu is DRAIN)", cmd.GetPartition())
	}
	// Its own partition, DOWN, does not stop a resize.
	if _, err := h.jobs().UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: j.GetName(), Action: "update", Partition: "open", NodeCount: proto.Int32(1)}); err != nil {
		t.Fatalf("resize in its own partition: %v", err)
	}
}

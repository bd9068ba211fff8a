package slurmcli

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loom-ml/loom/cmd/loom/internal/fakegw"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// partitionSpec gives fixture f's cluster demo a spec with partitions gpu
// and debug, and an etag.
func partitionSpec(f *fakegw.Gateway) {
	f.Clusters[0] = &loomv1.Cluster{Name: demoCluster, Etag: "e1", Orchestrator: &loomv1.Orchestrator{Slurm: &loomv1.SlurmOrchestrator{
		NodeSets: []*loomv1.SlurmNodeSet{{Id: "gpu", NodePoolId: "gpu"}},
		Partitions: []*loomv1.SlurmPartition{
			{Id: "gpu", NodeSetIds: []string{"gpu"}, Default: true},
			{Id: "debug", NodeSetIds: []string{"gpu"}, State: "DRAIN"},
		}}}}
}

// TestScontrolUpdatePartitionState: scontrol update PartitionName=P
// State=... sets the partition's state in the cluster spec (UpdateCluster of
// orchestrator.slurm.partitions, with the spec's etag; the other
// partitions as they were), and says nothing on success, as Slurm 22.05
// (scripts/slurm-local.sh); its refusals are Slurm's words, recorded there.
func TestScontrolUpdatePartitionState(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string // gpu's state sent
	}{
		{[]string{"update", "PartitionName=gpu", "State=DOWN"}, "DOWN"},
		{[]string{"update", "partitionname=gpu", "state=d"}, "DOWN"}, // Slurm's abbreviations
		{[]string{"update", "Partition=gpu", "State=dr"}, "DRAIN"},
		{[]string{"update", "PartitionName=gpu", "State=i"}, "INACTIVE"},
		{[]string{"update", "PartitionName=gpu", "State=UP"}, ""},
	} {
		f := fixture()
		partitionSpec(f)
		code, out, errOut := run(t, f, "scontrol", Env{}, tc.args...)
		reqs := fakegw.Requests[*loomv1.UpdateClusterRequest](f)
		if code != 0 || out != "" || errOut != "" || len(reqs) != 1 {
			t.Fatalf("scontrol %v: %d %q %q, %d updates", tc.args, code, out, errOut, len(reqs))
		}
		r := reqs[0]
		ps := r.GetCluster().GetOrchestrator().GetSlurm().GetPartitions()
		if r.GetCluster().GetName() != demoCluster || r.GetCluster().GetEtag() != "e1" ||
			!slices.Equal(r.GetUpdateMask().GetPaths(), []string{"orchestrator.slurm.partitions"}) || len(ps) != 2 ||
			ps[0].GetState() != tc.want || ps[1].GetState() != "DRAIN" || r.GetRequestId() == "" {
			t.Errorf("scontrol %v sent %v, want gpu %q and debug DRAIN, etag e1", tc.args, r, tc.want)
		}
	}

	denied := fixture()
	partitionSpec(denied)
	denied.UpdateErr = status.Error(codes.PermissionDenied, "ana may not update clusters of project default")
	for _, tc := range []struct {
		f    *fakegw.Gateway
		args []string
		want string
	}{
		// Slurm 22.05, exit 1 each.
		{nil, []string{"update", "PartitionName=gpu", "State=bogus"},
			"scontrol: error: Invalid input: State=bogus\nscontrol: error: Acceptable State values are UP, DOWN, DRAIN and INACTIVE\nslurm_update error: No error\n"},
		{nil, []string{"update", "PartitionName=gpu", "State="},
			"scontrol: error: Invalid input: State=\nscontrol: error: Acceptable State values are UP, DOWN, DRAIN and INACTIVE\nslurm_update error: No error\n"},
		{nil, []string{"update", "PartitionName=nope", "State=DOWN"}, "slurm_update error: Invalid partition name specified\n"},
		{nil, []string{"update", "PartitionName=gpu,debug", "State=DOWN"}, "slurm_update error: Invalid partition name specified\n"},
		{nil, []string{"update", "PartitionName=gpu"}, "scontrol: error: No changes specified\n"},
		{nil, []string{"update", "PartitionName=gpu", "Reason=maint"}, "Update of this parameter is not supported: Reason=maint\nRequest aborted"},
		// A user who is not an administrator: Slurm's "Invalid user id".
		{denied, []string{"update", "PartitionName=gpu", "State=DOWN"}, "slurm_update error: Invalid user id\n"},
	} {
		f := tc.f
		if f == nil {
			f = fixture()
			partitionSpec(f)
		}
		code, out, errOut := run(t, f, "scontrol", Env{}, tc.args...)
		if code != 1 || out != "" || !strings.HasPrefix(errOut, tc.want) {
			t.Errorf("scontrol %v: %d %q %q, want 1 and %q", tc.args, code, out, errOut, tc.want)
		}
		if tc.f == nil && len(fakegw.Requests[*loomv1.UpdateClusterRequest](f)) != 0 {
			t.Errorf("scontrol %v sent an update", tc.args)
		}
	}
}

// TestPartitionStateShown: sinfo's AVAIL and scontrol show partition's
// State= show each state as Slurm 22.05 does (recorded with
// scripts/slurm-local.sh: "gpu*       down   infinite ...", "gpu*      drain",
// "gpu*      inact": the default format's %.5a cuts INACTIVE).
func TestPartitionStateShown(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ state, avail, show string }{
		{"down", "gpu*       down ", "State=DOWN "},
		{"drain", "gpu*      drain ", "State=DRAIN "},
		{"inactive", "gpu*      inact ", "State=INACTIVE "},
		{"up", "gpu*         up ", "State=UP "},
	} {
		f := fixture()
		f.Partitions[0].State = tc.state
		code, out, _ := run(t, f, "sinfo", Env{})
		if code != 0 || !strings.Contains(out, "\n"+tc.avail) {
			t.Errorf("sinfo with gpu %s:\n%s\nwant a line starting %q", tc.state, out, tc.avail)
		}
		code, out, _ = run(t, f, "sinfo", Env{}, "-h", "-o", "%R %a")
		if code != 0 || !strings.HasPrefix(out, "gpu "+tc.state+"\n") {
			t.Errorf("sinfo -o '%%R %%a' with gpu %s: %q", tc.state, out)
		}
		code, out, _ = run(t, f, "scontrol", Env{}, "show", "partition", "gpu")
		if code != 0 || !strings.Contains(out, "   "+tc.show) {
			t.Errorf("scontrol show partition gpu (%s):\n%s\nwant %q", tc.state, out, tc.show)
		}
	}
}

// TestSbatchPartitionNotAvailable: the gateway's refusal of a DRAIN or
// INACTIVE partition prints Slurm 22.05's line (recorded with
// scripts/slurm-local.sh), then which partition and its state.
func TestSbatchPartitionNotAvailable(t *testing.T) {
	t.Parallel()
	detail := "partition gpu is DRAIN, which takes no new jobs until an administrator sets it UP or DOWN"
	g := &fakegw.Gateway{Clusters: []*loomv1.Cluster{{Name: demoCluster}},
		SubmitErr: status.Error(codes.InvalidArgument, "job.partition: Required partition not available (inactive or drain): "+detail)}
	code, out, errOut := run(t, g, "sbatch", Env{}, "-p", "gpu", "--wrap", "true")
	want := "sbatch: error: Batch job submission failed: Required partition not available (inactive or drain)\nsbatch: error: " + detail + "\n"
	if code != 1 || out != "" || errOut != want {
		t.Errorf("sbatch -p gpu (DRAIN): exit %d, %q, stderr\n%s\nwant\n%s", code, out, errOut, want)
	}
}

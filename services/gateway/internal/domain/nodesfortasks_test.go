package domain

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/slurmspec"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"google.golang.org/protobuf/proto"
)

// TestMoreNodesThanTasks: a request for more nodes than tasks is the job
// Slurm's sbatch makes of it (-N2 -n1 runs on one node; a range's maximum
// drops to the tasks), whoever sends it: Loom's CLI lowers the count
// itself, an API client gets the same job from the gateway. A count past
// the cluster's nodes is judged as lowered (Slurm's -N100 -n1 is a
// one-node job), and the caller's request is left as it was.
func TestMoreNodesThanTasks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                string
		ntasks, nodes, most int32
		wantN, wantM        int32
	}{
		{"-N2 -n1", 1, 2, 0, 1, 0},
		{"-N100 -n1", 1, 100, 0, 1, 0},
		{"-N2-3 -n1", 1, 2, 3, 1, 1},
		{"-N1-4 -n2", 2, 1, 4, 1, 2},
		{"-N2 -n2", 2, 2, 0, 2, 0},
	} {
		req := goodJob()
		req.Job.GpusPerNode = 0
		req.Job.Ntasks, req.Job.NodeCount, req.Job.MaxNodeCount = tc.ntasks, tc.nodes, tc.most
		if err := ValidateSubmitJob(req, existing(), slurmspec.DefaultMaxArraySize); err != nil {
			t.Errorf("%s: refused: %v", tc.name, err)
			continue
		}
		j := AcceptJob(req, existing(), 1, time.Unix(0, 0))
		if j.GetNodeCount() != tc.wantN || j.GetMaxNodeCount() != tc.wantM {
			t.Errorf("%s: accepted node_count %d max_node_count %d, want %d and %d", tc.name, j.GetNodeCount(), j.GetMaxNodeCount(), tc.wantN, tc.wantM)
		}
		if req.Job.GetNodeCount() != tc.nodes || req.Job.GetMaxNodeCount() != tc.most {
			t.Errorf("%s: the request was changed to %d-%d", tc.name, req.Job.GetNodeCount(), req.Job.GetMaxNodeCount())
		}
	}
}

// TestNodelistMoreHostsThanTasks: the hosts of job.nodelist count as the
// job's nodes in the gateway's check as in Loom's sbatch (one rule,
// slurmspec.FitNodes; Slurm 22.05's sbatch measured beside it): ntasks 1
// with two hosts is the first host alone, node_count 1 with two hosts is
// refused. The gateway kept both hosts, and ran ntasks 1 on two nodes.
func TestNodelistMoreHostsThanTasks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                string
		ntasks, nodes, most int32
		hosts               []string
		wantN, wantM        int32
		wantHosts           string
	}{
		{"-n1 -w h[1-2]", 1, 0, 0, []string{"gpu-0001", "gpu-0002"}, 1, 0, "gpu-0001"},
		{"-n1 -w h2,h1", 1, 0, 0, []string{"gpu-0002", "gpu-0001"}, 1, 0, "gpu-0001"},
		{"-N2 -n1 -w h[1-2]", 1, 2, 0, []string{"gpu-0001", "gpu-0002"}, 1, 0, "gpu-0001"},
		{"-n2 -w h[1-2]", 2, 0, 0, []string{"gpu-0001", "gpu-0002"}, 1, 0, "gpu-0001,gpu-0002"},
		{"-N2 -w h[1-2]", 0, 2, 0, []string{"gpu-0002", "gpu-0001"}, 2, 0, "gpu-0002,gpu-0001"},
	} {
		req := goodJob()
		req.Job.GpusPerNode = 0
		req.Job.Ntasks, req.Job.NodeCount, req.Job.MaxNodeCount, req.Job.Nodelist = tc.ntasks, tc.nodes, tc.most, tc.hosts
		if err := ValidateSubmitJob(req, existing(), slurmspec.DefaultMaxArraySize); err != nil {
			t.Errorf("%s: refused: %v", tc.name, err)
			continue
		}
		j := AcceptJob(req, existing(), 1, time.Unix(0, 0))
		if j.GetNodeCount() != tc.wantN || j.GetMaxNodeCount() != tc.wantM || strings.Join(j.GetNodelist(), ",") != tc.wantHosts {
			t.Errorf("%s: accepted node_count %d max_node_count %d nodelist %v, want %d, %d and %s",
				tc.name, j.GetNodeCount(), j.GetMaxNodeCount(), j.GetNodelist(), tc.wantN, tc.wantM, tc.wantHosts)
		}
		if strings.Join(req.Job.GetNodelist(), ",") != strings.Join(tc.hosts, ",") {
			t.Errorf("%s: the request's nodelist was changed to %v", tc.name, req.Job.GetNodelist())
		}
	}
	// A node count (or range maximum) below the hosts named: refused,
	// naming the field, as Slurm's sbatch refuses -N1 -w node[1-2].
	for _, tc := range []struct {
		name        string
		nodes, most int32
		field, msg  string
	}{
		{"-N1 -w h[1-2]", 1, 0, "job.node_count", "1 is below the 2 hosts job.nodelist names (Slurm: invalid number of nodes (-N 2-1))"},
		{"-N1-2 -w h[1-3]", 1, 2, "job.max_node_count", "2 is below the 3 hosts job.nodelist names (Slurm: invalid number of nodes (-N 3-2))"},
	} {
		req := goodJob()
		req.Job.GpusPerNode = 0
		req.Job.NodeCount, req.Job.MaxNodeCount = tc.nodes, tc.most
		req.Job.Nodelist = []string{"gpu-0001", "gpu-0002", "gpu-0003"}[:max(tc.nodes, tc.most)+1]
		err := ValidateSubmitJob(req, existing(), slurmspec.DefaultMaxArraySize)
		// An *errs.InvalidError: InvalidArgument at the API.
		var inv *errs.InvalidError
		if !errors.As(err, &inv) || !strings.Contains(err.Error(), tc.field+": "+tc.msg) {
			t.Errorf("%s: %v, want an invalid %s: %s", tc.name, err, tc.field, tc.msg)
		}
	}
}

// TestNodelistDroppedHostsStillChecked: the hosts that ntasks drops from
// job.nodelist (FitNodes keeps the first in hostlist order) are still the
// request's, and judged as given: past MaxHosts the list is refused, and
// a malformed name is refused at its own index in the request. The bound
// and the names were judged on the fitted list, so ntasks 1 took any
// number of hosts, and a bad one past the first was dropped unreported.
func TestNodelistDroppedHostsStillChecked(t *testing.T) {
	t.Parallel()
	many := make([]string, MaxHosts+1)
	for i := range many {
		many[i] = fmt.Sprintf("gpu-%05d", i)
	}
	for _, tc := range []struct {
		name  string
		hosts []string
		want  string
	}{
		{"more than MaxHosts", many, fmt.Sprintf("job.nodelist: %d hosts, more than the limit of %d", MaxHosts+1, MaxHosts)},
		{"a bad name dropped", []string{"gpu-0001", "zz/../x"}, `job.nodelist[1]: "zz/../x" is not a hostname`},
		{"a bad name kept, at its index", []string{"gpu-0002", "a_b"}, `job.nodelist[1]: "a_b" is not a hostname`},
	} {
		req := goodJob()
		req.Job.GpusPerNode = 0
		req.Job.Ntasks, req.Job.NodeCount, req.Job.Nodelist = 1, 0, tc.hosts
		err := ValidateSubmitJob(req, existing(), slurmspec.DefaultMaxArraySize)
		var inv *errs.InvalidError
		if !errors.As(err, &inv) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an invalid %s", tc.name, err, tc.want)
		}
	}
}

// TestUpdateNodelistFitsNodes: scontrol update NodeList=/NumNodes= of a
// pending job is judged by the submission's rule (slurmspec.FitNodes) on
// the job as the update leaves it: a node count (or range maximum) below
// the hosts is refused, naming the field, and a range's minimum below them
// is raised to them (the tasks with it, as a new minimum raises them).
// The update kept NodeCount=1 with two hosts, which a submission refuses.
func TestUpdateNodelistFitsNodes(t *testing.T) {
	t.Parallel()
	hosts := func(h ...string) *loomv1.HostList { return &loomv1.HostList{Hosts: h} }
	oneNode := &loomv1.Job{Partition: "train", NodeCount: 1, Ntasks: 1}
	twoHosts := &loomv1.Job{Partition: "train", NodeCount: 2, Ntasks: 2, Nodelist: []string{"gpu-0001", "gpu-0002"}}
	cpuRange := &loomv1.Job{Partition: "debug", NodeCount: 1, MaxNodeCount: 2, Ntasks: 1}
	for _, tc := range []struct {
		name string
		job  *loomv1.Job
		req  *loomv1.UpdateJobRequest
		want string
	}{
		{"NodeList=h[1-2] on -N1", oneNode, &loomv1.UpdateJobRequest{Nodelist: hosts("gpu-0001", "gpu-0002")},
			"node_count: 1 is below the 2 hosts nodelist names (Slurm: invalid number of nodes (-N 2-1))"},
		{"NumNodes=1 on -w h[1-2]", twoHosts, &loomv1.UpdateJobRequest{NodeCount: proto.Int32(1)},
			"node_count: 1 is below the 2 hosts nodelist names (Slurm: invalid number of nodes (-N 2-1))"},
		{"NumNodes=1-2 NodeList=h[1-3]", cpuRange, &loomv1.UpdateJobRequest{NodeCount: proto.Int32(1), MaxNodeCount: proto.Int32(2),
			Nodelist: hosts("cpu-0001", "cpu-0002", "cpu-0003")},
			"max_node_count: 2 is below the 3 hosts nodelist names (Slurm: invalid number of nodes (-N 3-2))"},
		// An update drops no host, whatever its tasks (the submission's
		// fitNodes does): each is judged, and the exclusions must leave
		// the job's own count, as the scheduler gets them.
		{"NumTasks=1 NodeList=h1,nosuch on -N2", twoHosts, &loomv1.UpdateJobRequest{Ntasks: proto.Int32(1), Nodelist: hosts("gpu-0001", "nosuch")},
			`nodelist[1]: "nosuch" is not a node of`},
		{"NumTasks=1 ExcNodeList=h2 on -N2", twoHosts, &loomv1.UpdateJobRequest{Ntasks: proto.Int32(1), Nodelist: hosts(), Exclude: hosts("gpu-0002")},
			"exclude: leaves 1 of partition train's nodes, and the job needs 2"},
		{"NumTasks=1 NodeList=h[1-2] ExcNodeList=h2 on -N2", twoHosts, &loomv1.UpdateJobRequest{Ntasks: proto.Int32(1), Exclude: hosts("gpu-0002")},
			"nodelist[1]: gpu-0002 is also excluded"},
	} {
		err := CheckUpdatedJob(Updated(tc.job, tc.req), partitioned(), partitionedNodes())
		var inv *errs.InvalidError
		if !errors.As(err, &inv) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want InvalidArgument %s", tc.name, err, tc.want)
		}
	}
	// Accepted: hosts within the count, and a range's minimum raised to
	// the hosts (NumNodes=1-3 -w h[1-2] is 2-3 at submission too), which
	// raises the tasks as NumNodes=2 would; the job copied is left as it was.
	for _, tc := range []struct {
		name              string
		job               *loomv1.Job
		req               *loomv1.UpdateJobRequest
		nodes, most, task int32
	}{
		{"NodeList=h1 on -N1", oneNode, &loomv1.UpdateJobRequest{Nodelist: hosts("gpu-0001")}, 1, 0, 1},
		{"NumNodes=2 NodeList=h[1-2]", oneNode, &loomv1.UpdateJobRequest{NodeCount: proto.Int32(2), Nodelist: hosts("gpu-0002", "gpu-0001")}, 2, 0, 2},
		{"NodeList=h[1-2] on -N1-2", cpuRange, &loomv1.UpdateJobRequest{Nodelist: hosts("cpu-0001", "cpu-0002")}, 2, 0, 2},
		{"NumNodes=1-4 NodeList=h[1-3]", cpuRange, &loomv1.UpdateJobRequest{NodeCount: proto.Int32(1), MaxNodeCount: proto.Int32(4),
			Nodelist: hosts("cpu-0001", "cpu-0002", "cpu-0003")}, 3, 4, 3},
		// The tasks lower no node count in an update (Slurm's
		// controller), with hosts or without.
		{"NumTasks=1 on -w h[1-2]", twoHosts, &loomv1.UpdateJobRequest{Ntasks: proto.Int32(1)}, 2, 0, 1},
	} {
		u := Updated(tc.job, tc.req)
		if u.GetNodeCount() != tc.nodes || u.GetMaxNodeCount() != tc.most || u.GetNtasks() != tc.task {
			t.Errorf("%s: nodes %d-%d, %d tasks; want %d-%d and %d", tc.name, u.GetNodeCount(), u.GetMaxNodeCount(), u.GetNtasks(), tc.nodes, tc.most, tc.task)
		}
		if err := CheckUpdatedJob(u, partitioned(), partitionedNodes()); err != nil {
			t.Errorf("%s: refused: %v", tc.name, err)
		}
	}
	if oneNode.GetNodeCount() != 1 || cpuRange.GetNodeCount() != 1 || cpuRange.GetMaxNodeCount() != 2 || len(oneNode.GetNodelist()) != 0 {
		t.Errorf("Updated changed the jobs it copies: %v, %v", oneNode, cpuRange)
	}
}

// Package ports is the scheduler's edge: the loom.v1.JobService and
// loom.v1.SlurmService read APIs, served from memory, and the topics its
// consumer reads.
package ports

import (
	"context"
	"fmt"
	"strings"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/paging"
	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/topics"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler/internal/domain/views"
)

// Topics are what the scheduler consumes, in one group, one event at a time.
var Topics = []string{
	topics.JobCommands,
	topics.ClusterEvents,
	topics.NodeEvents,
	topics.HealthEvents,
	topics.StepEvents,
}

// Jobs is what the read APIs need from the app.
type Jobs interface {
	GetJob(name string) (*loomv1.Job, error)
	ListJobs(f views.JobFilter, after string, size int) ([]*loomv1.Job, string)
	ListPartitions(cluster string) []*loomv1.Partition
	ListSlurmNodes(cluster string) []*loomv1.SlurmNode
	// ListShares is the cluster's fair-share standing; nil for a cluster
	// it does not know.
	ListShares(cluster string) []*loomv1.Share
	ListJobSteps(job string, attempt int32) ([]*loomv1.JobStep, error)
	GetJobStep(job string, id int32) (*loomv1.JobStep, error)
}

// JobServer serves GetJob and ListJobs; the other JobService methods belong
// to the gateway and answer Unimplemented.
type JobServer struct {
	loomv1.UnimplementedJobServiceServer
	jobs Jobs
}

// NewJobServer returns a JobService over jobs.
func NewJobServer(jobs Jobs) *JobServer { return &JobServer{jobs: jobs} }

// GetJob returns one job ("projects/{p}/jobs/{id}", or "…/jobs/{A}_{i}" for
// task i of array A); InvalidArgument for a malformed name, NotFound for a
// job the scheduler does not know.
func (s *JobServer) GetJob(_ context.Context, req *loomv1.GetJobRequest) (*loomv1.Job, error) {
	if err := checkJobName("name", req.GetName()); err != nil {
		return nil, err
	}
	return s.jobs.GetJob(req.GetName())
}

// ListJobs returns one page (AIP-158: page_size, page_token; see
// libs/paging) of the jobs of a project (parent "projects/{p}", optional)
// that the request's filters select, in submission order: cluster, users,
// states, job ids ("12", every task of array 12, or "12_3"), names,
// partitions, and active_only (pending and running: squeue) or not (sacct);
// order_by "submit_time desc" lists the newest first (paging.JobOrder).
func (s *JobServer) ListJobs(_ context.Context, req *loomv1.ListJobsRequest) (*loomv1.ListJobsResponse, error) {
	var v errs.Validator
	parent := req.GetParent()
	if parent != "" {
		if _, err := resname.SplitProject(parent); err != nil {
			v.Add("parent", "%v", err)
		}
	}
	for i, id := range req.GetJobIds() {
		job, task, isTask := strings.Cut(id, "_")
		v.Check(digits(job) && (!isTask || digits(task)), fmt.Sprintf("job_ids[%d]", i), "want a job id (12) or an array task (12_3), got %q", id)
	}
	for i, st := range req.GetStates() {
		v.Check(st != loomv1.JobState_JOB_STATE_UNSPECIFIED, fmt.Sprintf("states[%d]", i), "must name a state")
	}
	desc := paging.JobOrder(&v, req.GetOrderBy())
	size, after := paging.Check(&v, req)
	if _, ok := views.ParseListKey(after); after != "" && !ok {
		// Every token a list returns goes on from a job's list key
		// (paging.JobKey). A key that is none (a token made by hand:
		// the token's hash is no signature) would send a project's list
		// down the walk of every job of every project (views.ListPage),
		// under the state's read lock, at each page.
		v.Add("page_token", "does not go on from a job (want the next_page_token of this list)")
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	jobs, next := s.jobs.ListJobs(views.JobFilter{
		Project: parent, Cluster: req.GetCluster(), Users: req.GetUsers(), Names: req.GetNames(),
		Partitions: req.GetPartitions(), States: req.GetStates(), JobIDs: req.GetJobIds(), ActiveOnly: req.GetActiveOnly(),
		Desc: desc,
	}, after, size)
	resp := &loomv1.ListJobsResponse{Jobs: jobs}
	if next != "" {
		resp.NextPageToken = paging.Token(req, next)
	}
	return resp, nil
}

func digits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// ListJobSteps returns one page (AIP-158) of the steps of one of a job's
// runs (parent "projects/{p}/jobs/{id}"; attempt, 0 for the current run), by
// step id; InvalidArgument for a malformed name or a negative attempt,
// NotFound for a job the scheduler does not know or an attempt it has not had.
func (s *JobServer) ListJobSteps(_ context.Context, req *loomv1.ListJobStepsRequest) (*loomv1.ListJobStepsResponse, error) {
	if err := checkJobName("parent", req.GetParent()); err != nil {
		return nil, err
	}
	if req.GetAttempt() < 0 {
		return nil, errs.Invalid("attempt", "must not be negative, got %d (0 is the job's current run)", req.GetAttempt())
	}
	steps, err := s.jobs.ListJobSteps(req.GetParent(), req.GetAttempt())
	if err != nil {
		return nil, err
	}
	page, next, err := paging.List(req, steps, func(st *loomv1.JobStep) string { return paging.IndexKey(int(st.GetStepId())) })
	if err != nil {
		return nil, err
	}
	return &loomv1.ListJobStepsResponse{Steps: page, NextPageToken: next}, nil
}

// GetJobStep returns one step ("projects/{p}/jobs/{id}/steps/{step}") of a
// job's current run; InvalidArgument for a malformed name, NotFound for an
// unknown job or step.
func (s *JobServer) GetJobStep(_ context.Context, req *loomv1.GetJobStepRequest) (*loomv1.JobStep, error) {
	st, err := resname.SplitStep(req.GetName())
	if err != nil {
		return nil, errs.Invalid("name", "%v", err)
	}
	return s.jobs.GetJobStep(st.Job.String(), st.ID)
}

// checkJobName checks that name is "projects/{p}/jobs/{id}" by shape
// (the gateway in front checks the ids).
func checkJobName(field, name string) error {
	if _, err := resname.SplitJob(name); err != nil {
		return errs.Invalid(field, "%v", err)
	}
	return nil
}

var _ loomv1.JobServiceServer = (*JobServer)(nil)

// SlurmServer serves the Slurm views: partitions and nodes (sinfo, scontrol
// show partition/node). UpdateSlurmNode is the gateway's (it emits the
// command) and answers Unimplemented.
type SlurmServer struct {
	loomv1.UnimplementedSlurmServiceServer
	jobs Jobs
}

// NewSlurmServer returns a SlurmService over jobs.
func NewSlurmServer(jobs Jobs) *SlurmServer { return &SlurmServer{jobs: jobs} }

// checkCluster checks that name is "projects/{p}/clusters/{c}" by shape
// (the gateway in front checks the ids).
func checkCluster(name string) error {
	if _, err := resname.SplitCluster(name); err != nil {
		return errs.Invalid("cluster", "%v", err)
	}
	return nil
}

// ListPartitions returns one page (AIP-158) of the cluster's partitions, in
// its configuration's order; NotFound for a cluster
// the scheduler does not know.
func (s *SlurmServer) ListPartitions(_ context.Context, req *loomv1.ListPartitionsRequest) (*loomv1.ListPartitionsResponse, error) {
	if err := checkCluster(req.GetCluster()); err != nil {
		return nil, err
	}
	ps := s.jobs.ListPartitions(req.GetCluster())
	if ps == nil {
		return nil, fmt.Errorf("cluster %s: %w", req.GetCluster(), errs.NotFound)
	}
	page, next, err := paging.Ordered(req, ps)
	if err != nil {
		return nil, err
	}
	return &loomv1.ListPartitionsResponse{Partitions: page, NextPageToken: next}, nil
}

// ListShares returns one page (AIP-158) of the cluster's fair-share
// standing (sshare), accounts each followed by their users; NotFound for a
// cluster the scheduler does not know.
func (s *SlurmServer) ListShares(_ context.Context, req *loomv1.ListSharesRequest) (*loomv1.ListSharesResponse, error) {
	if err := checkCluster(req.GetCluster()); err != nil {
		return nil, err
	}
	shares := s.jobs.ListShares(req.GetCluster())
	if shares == nil {
		return nil, fmt.Errorf("cluster %s: %w", req.GetCluster(), errs.NotFound)
	}
	page, next, err := paging.Ordered(req, shares)
	if err != nil {
		return nil, err
	}
	return &loomv1.ListSharesResponse{Shares: page, NextPageToken: next}, nil
}

// ListSlurmNodes returns one page (AIP-158) of the cluster's compute nodes
// in Slurm's states;
// NotFound for a cluster the scheduler does not know.
func (s *SlurmServer) ListSlurmNodes(_ context.Context, req *loomv1.ListSlurmNodesRequest) (*loomv1.ListSlurmNodesResponse, error) {
	if err := checkCluster(req.GetCluster()); err != nil {
		return nil, err
	}
	ps := s.jobs.ListPartitions(req.GetCluster())
	if ps == nil {
		return nil, fmt.Errorf("cluster %s: %w", req.GetCluster(), errs.NotFound)
	}
	page, next, err := paging.Ordered(req, s.jobs.ListSlurmNodes(req.GetCluster()))
	if err != nil {
		return nil, err
	}
	return &loomv1.ListSlurmNodesResponse{Nodes: page, NextPageToken: next}, nil
}

var _ loomv1.SlurmServiceServer = (*SlurmServer)(nil)

// Package ports is the scheduler's edge: the loom.v1.JobService read API,
// served from memory, and the topics its consumer reads.
package ports

import (
	"context"
	"strings"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/topics"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Topics are what the scheduler consumes, in one group, one event at a time.
var Topics = []string{
	topics.JobCommands,
	topics.ClusterEvents,
	topics.NodeEvents,
	topics.HealthEvents,
	topics.StepEvents,
}

// Jobs is what the read API needs from the app.
type Jobs interface {
	GetJob(name string) (*loomv1.Job, error)
	ListJobs(keep func(*loomv1.Job) bool) []*loomv1.Job
}

// JobServer serves GetJob and ListJobs; the other JobService methods belong
// to the gateway and answer Unimplemented.
type JobServer struct {
	loomv1.UnimplementedJobServiceServer
	jobs Jobs
}

// NewJobServer returns a JobService over jobs.
func NewJobServer(jobs Jobs) *JobServer { return &JobServer{jobs: jobs} }

// GetJob returns one job; InvalidArgument for a malformed name, NotFound for
// a job the scheduler does not know.
func (s *JobServer) GetJob(_ context.Context, req *loomv1.GetJobRequest) (*loomv1.Job, error) {
	var v errs.Validator
	parts := strings.Split(req.GetName(), "/")
	v.Check(len(parts) == 4 && parts[0] == "projects" && parts[1] != "" && parts[2] == "jobs" && parts[3] != "",
		"name", "want projects/{project}/jobs/{job_id}, got %q", req.GetName())
	if err := v.Err(); err != nil {
		return nil, err
	}
	return s.jobs.GetJob(req.GetName())
}

// ListJobs returns the jobs of a project (parent "projects/{p}", optional)
// and, when cluster is set, of that cluster only, in queue order.
func (s *JobServer) ListJobs(_ context.Context, req *loomv1.ListJobsRequest) (*loomv1.ListJobsResponse, error) {
	var v errs.Validator
	parent := req.GetParent()
	if parent != "" {
		p, ok := strings.CutPrefix(parent, "projects/")
		v.Check(ok && p != "" && !strings.Contains(p, "/"), "parent", "want projects/{project}, got %q", parent)
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	jobs := s.jobs.ListJobs(func(j *loomv1.Job) bool {
		if parent != "" && !strings.HasPrefix(j.GetName(), parent+"/jobs/") {
			return false
		}
		return req.GetCluster() == "" || j.GetCluster() == req.GetCluster()
	})
	return &loomv1.ListJobsResponse{Jobs: jobs}, nil
}

var _ loomv1.JobServiceServer = (*JobServer)(nil)

package ports

import (
	"context"
	"time"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/resname"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// DefaultGoodputWindow is how far back GetClusterGoodput looks without since.
const DefaultGoodputWindow = 7 * 24 * time.Hour

// Goodputs is what GoodputServer needs from the app.
type Goodputs interface {
	JobGoodput(name string) (*loomv1.Goodput, error)
	ClusterGoodput(cluster string, since time.Time) (*loomv1.Goodput, error)
}

// GoodputServer serves loom.v1.GoodputService from the scheduler's memory
// (the gateway forwards to it after its own authorization).
type GoodputServer struct {
	loomv1.UnimplementedGoodputServiceServer
	src Goodputs
	now func() time.Time
}

// NewGoodputServer returns a GoodputService over src; now is the clock
// that the default window counts back from.
func NewGoodputServer(src Goodputs, now func() time.Time) *GoodputServer {
	return &GoodputServer{src: src, now: now}
}

// GetJobGoodput returns a job's goodput ("projects/{p}/jobs/{id}", or
// "…/jobs/{A}_{i}"): its final figures once it was pruned after its end,
// from its compact record (kept 30 days); InvalidArgument for a malformed
// name, NotFound for a job the scheduler does not know (or whose record
// expired, or predates goodput).
func (s *GoodputServer) GetJobGoodput(_ context.Context, req *loomv1.GetJobGoodputRequest) (*loomv1.Goodput, error) {
	if err := checkJobName("name", req.GetName()); err != nil {
		return nil, err
	}
	return s.src.JobGoodput(req.GetName())
}

// GetClusterGoodput sums the goodput of a cluster's jobs not ended before
// req.since (default: the last 7 days), live or pruned (while their compact
// record is kept), each counted whole (domain.State.ClusterGoodput).
func (s *GoodputServer) GetClusterGoodput(_ context.Context, req *loomv1.GetClusterGoodputRequest) (*loomv1.Goodput, error) {
	if _, err := resname.SplitCluster(req.GetName()); err != nil {
		return nil, errs.Invalid("name", "%v", err)
	}
	since := s.now().Add(-DefaultGoodputWindow)
	if req.GetSince() != nil {
		since = req.GetSince().AsTime()
	}
	return s.src.ClusterGoodput(req.GetName(), since)
}

var _ loomv1.GoodputServiceServer = (*GoodputServer)(nil)

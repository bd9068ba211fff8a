package place

// Ranker scores a node that passed every check for a request: lower is
// better. A gang's nodes are chosen topology first (see Table.Choose), then by
// the rankers.
type Ranker struct {
	// Name names the ranker in the scheduler's README and in logs.
	Name string
	// Score is the node's score for r; 0 for a request the ranker has no
	// opinion on.
	Score func(r *Request, n *NodeView) int64
}

// DefaultRankers are Loom's rankers, in order: GPU jobs go where the fewest
// GPUs are free that still fit (best fit, keeping whole nodes free for
// large jobs); jobs without GPUs go to the least loaded node, then the one
// with the fewest allocations, so that they spread instead of piling onto one.
func DefaultRankers() []Ranker {
	return []Ranker{RankBestFitGPUs, RankLeastLoadedCPUs, RankFewestAllocations}
}

// The default rankers.
var (
	// RankBestFitGPUs: for a GPU job, the node's free GPUs.
	RankBestFitGPUs = Ranker{Name: "BestFitGPUs", Score: func(r *Request, n *NodeView) int64 {
		if r.GPUsPerNode > 0 {
			return int64(n.FreeGPUs)
		}
		return 0
	}}
	// RankLeastLoadedCPUs: for a job without GPUs, the CPUs in use on a node
	// whose size is known.
	RankLeastLoadedCPUs = Ranker{Name: "LeastLoadedCPUs", Score: func(r *Request, n *NodeView) int64 {
		if r.GPUsPerNode == 0 && n.Node.CPUs > 0 {
			return int64(n.Node.CPUs - n.FreeCPUs)
		}
		return 0
	}}
	// RankFewestAllocations: for a job without GPUs, the allocations on the node.
	RankFewestAllocations = Ranker{Name: "FewestAllocations", Score: func(r *Request, n *NodeView) int64 {
		if r.GPUsPerNode == 0 {
			return int64(n.Runs)
		}
		return 0
	}}
)

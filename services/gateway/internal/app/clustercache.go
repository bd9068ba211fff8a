package app

import (
	"context"
	"sync"
	"time"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// ClusterCacheTTL is how long SubmitJob trusts a cluster it read from the
// provisioner: a burst of submissions to one cluster costs one read a
// second instead of one each. A submission validated against a spec changed
// less than that ago is checked again by the scheduler, which owns the
// decision (a partition that is gone leaves the job pending with reason
// PartitionConfig).
const ClusterCacheTTL = time.Second

// clusterCache remembers clusters read from the provisioner for
// ClusterCacheTTL. Misses and errors are never cached.
type clusterCache struct {
	mu      sync.Mutex
	entries map[string]cachedCluster
}

type cachedCluster struct {
	c  *loomv1.Cluster
	at time.Time
}

// get returns the cluster named name, from the cache when read less than
// ClusterCacheTTL ago (as of now), else from fetch.
func (cc *clusterCache) get(ctx context.Context, name string, now time.Time,
	fetch func(context.Context, string) (*loomv1.Cluster, error)) (*loomv1.Cluster, error) {
	cc.mu.Lock()
	e, ok := cc.entries[name]
	cc.mu.Unlock()
	if ok && now.Sub(e.at) < ClusterCacheTTL && !now.Before(e.at) {
		return e.c, nil
	}
	c, err := fetch(ctx, name)
	if err != nil {
		return nil, err
	}
	cc.mu.Lock()
	if cc.entries == nil {
		cc.entries = map[string]cachedCluster{}
	}
	if len(cc.entries) > 1024 { // a bound, not an LRU: clusters are few
		clear(cc.entries)
	}
	cc.entries[name] = cachedCluster{c: c, at: now}
	cc.mu.Unlock()
	return c, nil
}

package app

import (
	"context"
	"errors"
	"testing"
	"time"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

func TestClusterCacheTrustsAnAnswerForItsTTL(t *testing.T) {
	t.Parallel()
	var cc clusterCache
	calls := 0
	fail := false
	fetch := func(_ context.Context, name string) (*loomv1.Cluster, error) {
		calls++
		if fail {
			return nil, errors.New("provisioner down")
		}
		return &loomv1.Cluster{Name: name}, nil
	}
	ctx, t0 := context.Background(), time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, at := range []time.Duration{0, ClusterCacheTTL / 2, ClusterCacheTTL - 1} {
		if c, err := cc.get(ctx, "c1", t0.Add(at), fetch); err != nil || c.GetName() != "c1" {
			t.Fatalf("get at +%v = %v, %v", at, c, err)
		}
	}
	if calls != 1 {
		t.Fatalf("%d reads within the TTL, want 1", calls)
	}
	if _, err := cc.get(ctx, "c1", t0.Add(ClusterCacheTTL), fetch); err != nil || calls != 2 {
		t.Fatalf("at the TTL: %v, %d reads; want a fresh read", err, calls)
	}
	// Another cluster is its own entry; errors are returned, not kept.
	fail = true
	if _, err := cc.get(ctx, "c2", t0, fetch); err == nil {
		t.Fatal("a failed read was not reported")
	}
	fail = false
	if c, err := cc.get(ctx, "c2", t0, fetch); err != nil || c.GetName() != "c2" || calls != 4 {
		t.Fatalf("after a failed read: %v, %v, %d reads; want a fresh read", c, err, calls)
	}
	// A clock that went back does not make an old answer fresh.
	if _, err := cc.get(ctx, "c2", t0.Add(-time.Second), fetch); err != nil || calls != 5 {
		t.Fatalf("clock went back: %v, %d reads; want a fresh read", err, calls)
	}
}

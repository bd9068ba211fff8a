package place

import (
	"slices"
	"testing"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// table returns a table of ready 8-GPU nodes in partition 0, blocks as given.
func table(blocks ...string) Table {
	t := Table{Checks: DefaultChecks(), Rankers: DefaultRankers()}
	for i, b := range blocks {
		n := &Node{Name: "n" + string(rune('a'+i)), Hostname: "h" + string(rune('a'+i)), Block: b,
			State: loomv1.Node_READY, GPUs: 8}
		t.Views = append(t.Views, NodeView{Node: n, Parts: 1, FreeMask: 0xff, FreeGPUs: 8})
	}
	return t
}

func TestChooseSmallestBlockHoldingTheGang(t *testing.T) {
	t.Parallel()
	tb := table("a", "a", "a", "b", "b", "")
	r := &Request{Nodes: 2, GPUsPerNode: 8}
	sc := tb.Scan(r, KeyOf(r), nil)
	if ok, _ := sc.Outcome(r); !ok || len(sc.Cand) != 6 {
		t.Fatalf("outcome %v, candidates %v", ok, sc.Cand)
	}
	if got := tb.Choose(r, sc.Cand); !slices.Equal(got, []int32{3, 4}) {
		t.Fatalf("chose %v, want block b's [3 4]", got)
	}
	// No block holds 4: the largest block first, then the next.
	r4 := &Request{Nodes: 4, GPUsPerNode: 8}
	if got := tb.Choose(r4, sc.Cand); !slices.Equal(got, []int32{0, 1, 2, 3}) {
		t.Fatalf("chose %v, want [0 1 2 3]", got)
	}
}

func TestTakeAndRefreshCountCapacity(t *testing.T) {
	t.Parallel()
	tb := table("", "")
	r := &Request{Nodes: 1, GPUsPerNode: 4}
	sc := tb.Scan(r, KeyOf(r), nil)
	if got := tb.Take(0, 6, 0, 0, false, "", false); !slices.Equal(got, []int32{0, 1, 2, 3, 4, 5}) {
		t.Fatalf("took GPUs %v, want the lowest six", got)
	}
	sc.Shared = true
	shared := sc.Filtered
	tb.Refresh(r, sc)
	if !slices.Equal(sc.Cand, []int32{1}) || sc.Filtered["InsufficientGPUs"] != 1 || len(shared) != 0 {
		t.Fatalf("after take: cand %v, filtered %v, shared copy %v", sc.Cand, sc.Filtered, shared)
	}
	r2 := &Request{Nodes: 2, GPUsPerNode: 4}
	if ok, kind := tb.Refresh(r2, tb.Scan(r2, KeyOf(r2), nil)).Outcome(r2); ok || kind != Capacity {
		t.Fatalf("two nodes of 4 GPUs: ok %v kind %v, want Capacity", ok, kind)
	}
}

func TestStaticScanIsCachedAndStaticFirst(t *testing.T) {
	t.Parallel()
	tb := table("", "")
	tb.Views[1].Node.AdminDrain = true
	r := &Request{Nodes: 2}
	cache := StaticScans{}
	sc := tb.Scan(r, KeyOf(r), cache)
	if ok, kind := sc.Outcome(r); ok || kind != Availability || sc.Filtered["NodeDrained"] != 1 || len(cache) != 1 {
		t.Fatalf("ok %v kind %v filtered %v cache %d", ok, kind, sc.Filtered, len(cache))
	}
	if !StaticFirst(DefaultChecks()) || StaticFirst([]Check{CheckGPUs, CheckReady}) {
		t.Fatal("StaticFirst: default checks are static first; capacity before availability is not")
	}
}

package domain

import (
	"errors"
	"strings"
	"testing"

	"github.com/loom-ml/loom/libs/clusterspec"
	"github.com/loom-ml/loom/libs/errs"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

func TestParseProjectQuotas(t *testing.T) {
	t.Parallel()
	got, err := ParseProjectQuotas(" p1=nodes:16,gpus:64 ; p2=clusters:2,pending_jobs:-1;")
	if err != nil {
		t.Fatal(err)
	}
	if got["p1"] != (Quota{Nodes: 16, GPUs: 64}) || got["p2"] != (Quota{Clusters: 2, PendingJobs: -1}) || len(got) != 2 {
		t.Errorf("parsed %+v", got)
	}
	if s := FormatProjectQuotas(got); s != "p1=nodes:16,gpus:64;p2=clusters:2,pending_jobs:-1" {
		t.Errorf("formatted %q", s)
	}
	for _, bad := range []string{"p1", "=nodes:1", "p1=nodes", "p1=nodes:0", "p1=nodes:x", "p1=cpus:4", "p1=nodes:1;p1=gpus:2", "p1=nodes:-2"} {
		if _, err := ParseProjectQuotas(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestQuotasFor(t *testing.T) {
	t.Parallel()
	q := Quotas{Default: Quota{Nodes: 100, GPUs: 800, Clusters: 10, PendingJobs: 1000},
		Projects: map[string]Quota{"p1": {Nodes: 16, PendingJobs: -1}}}
	got, src := q.For("p1")
	if got != (Quota{Nodes: 16, GPUs: 800, Clusters: 10, PendingJobs: -1}) {
		t.Errorf("p1: %+v", got)
	}
	if src["nodes"] != "LOOM_GATEWAY_PROJECT_QUOTAS" || src["gpus"] != "LOOM_GATEWAY_QUOTA_GPUS" {
		t.Errorf("p1 sources: %v", src)
	}
	if got, src := q.For("p2"); got != q.Default || src["nodes"] != "LOOM_GATEWAY_QUOTA_NODES" {
		t.Errorf("p2: %+v %v", got, src)
	}
}

func TestCheckClusterQuota(t *testing.T) {
	t.Parallel()
	q, src := Quotas{Default: Quota{Nodes: 16, GPUs: 64, Clusters: 2}}.For("p1")
	next := ClusterUsage(&loomv1.Cluster{Compute: &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{
		{NodeCount: 3, MaxDynamicNodeCount: 2, AcceleratorCount: 8}, {NodeCount: 1},
	}}})
	if next != (Usage{Nodes: 6, GPUs: 40, Clusters: 1}) {
		t.Fatalf("usage %+v", next)
	}
	if err := CheckClusterQuota("p1", "c2", q, src, Usage{Nodes: 10, GPUs: 24, Clusters: 1}, next); err != nil {
		t.Errorf("at the quota: %v", err)
	}
	err := CheckClusterQuota("p1", "c2", q, src, Usage{Nodes: 11, GPUs: 24, Clusters: 1}, next)
	want := "project p1: 17 nodes would exceed the quota of 16 nodes (LOOM_GATEWAY_QUOTA_NODES): 11 in its other clusters, 6 in c2"
	if !errors.Is(err, errs.ResourceExhausted) || !strings.Contains(err.Error(), want) {
		t.Errorf("over by one node: %v, want %q", err, want)
	}
	err = CheckClusterQuota("p1", "c3", q, src, Usage{Nodes: 2, GPUs: 30, Clusters: 2}, next)
	for _, w := range []string{"3 clusters would exceed the quota of 2 clusters (LOOM_GATEWAY_QUOTA_CLUSTERS)",
		"70 GPUs would exceed the quota of 64 GPUs (LOOM_GATEWAY_QUOTA_GPUS)"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("got %v, want it to say %q", err, w)
		}
	}
	if err := CheckClusterQuota("p1", "c3", Quota{Nodes: -1}, src, Usage{Nodes: 1 << 40}, next); err != nil {
		t.Errorf("no limit: %v", err)
	}
}

func TestCheckJobQuotas(t *testing.T) {
	t.Parallel()
	q, src := Quotas{Default: Quota{PendingJobs: 10}}.For("p1")
	if err := CheckPendingQuota("p1", q, src, 6, 4); err != nil {
		t.Errorf("at the quota: %v", err)
	}
	err := CheckPendingQuota("p1", q, src, 7, 4)
	if !errors.Is(err, errs.ResourceExhausted) || !strings.Contains(err.Error(),
		"project p1: 11 pending jobs would exceed the quota of 10 pending jobs (LOOM_GATEWAY_QUOTA_PENDING_JOBS): 7 pending, 4 submitted") {
		t.Errorf("over: %v", err)
	}
	l := SubmitLimit{Max: 5, Source: "LOOM_GATEWAY_MAX_SUBMIT_JOBS"}
	if err := CheckSubmitLimit("p1", "ana", l, 4, 1); err != nil {
		t.Errorf("at the limit: %v", err)
	}
	err = CheckSubmitLimit("p1", "ana", l, 5, 1)
	if !errors.Is(err, errs.ResourceExhausted) || !strings.Contains(err.Error(),
		"user ana in project p1: 6 jobs would exceed MaxSubmitJobs of 5 (LOOM_GATEWAY_MAX_SUBMIT_JOBS)") {
		t.Errorf("over: %v", err)
	}
}

// The oversized reservation of issue 13: two billion machines.
func TestReservationSizeBound(t *testing.T) {
	t.Parallel()
	req := &loomv1.CreateReservationRequest{Parent: "projects/p1", ReservationId: "r1", Reservation: &loomv1.Reservation{
		Zone: "us-central1-a", MachineType: "a3-ultragpu-8g", Count: 2_000_000_000}}
	_, err := AcceptReservation(req)
	if err == nil || !strings.Contains(err.Error(), "reservation.count: 2000000000 machines, more than the limit of 100000 for one reservation") {
		t.Errorf("two billion machines: %v", err)
	}
	req.Reservation.Count = clusterspec.MaxReservationNodes
	if _, err := AcceptReservation(req); err != nil {
		t.Errorf("at the bound: %v", err)
	}
}

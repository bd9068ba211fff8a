package cli

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loom-ml/loom/cmd/loom/internal/fakegw"
	"github.com/loom-ml/loom/libs/clusterspec"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// withEtag gives the fake's cluster a3u its etag, as the provisioner does.
func withEtag(f *fakegw.Gateway) *loomv1.Cluster {
	for _, c := range f.Clusters {
		if c.GetName() == "projects/default/clusters/a3u" {
			c.Etag = clusterspec.Etag(c)
			return c
		}
	}
	panic("no cluster a3u")
}

// `loom clusters update -f` sends the etag of its file (one from `get -o
// json` has it) or of --etag; a file whose etag the cluster no longer has
// is refused before anything is sent, saying to get the cluster again.
func TestClustersUpdateSendsTheEtag(t *testing.T) {
	t.Parallel()
	f, gw := newFakeGateway(t)
	cur := withEtag(f)
	read := a3uCluster()
	read.Etag = cur.GetEtag()
	read.Compute.NodePools[0].NodeCount = 3

	out, errOut, code := run(t, gw, "clusters", "update", "a3u", "-f", clusterFile(t, read), "--async")
	if code != 0 {
		t.Fatalf("update from a file with the current etag: exit %d: %s%s", code, out, errOut)
	}
	if req, _ := fakegw.LastRequest[*loomv1.UpdateClusterRequest](f); req.GetCluster().GetEtag() != cur.GetEtag() {
		t.Fatalf("UpdateCluster etag = %q, want the file's %q", req.GetCluster().GetEtag(), cur.GetEtag())
	}

	noEtag := a3uCluster()
	noEtag.Description = "flag"
	if _, errOut, code := run(t, gw, "clusters", "update", "a3u", "-f", clusterFile(t, noEtag), "--etag", cur.GetEtag(), "--async"); code != 0 {
		t.Fatalf("update with --etag: exit %d: %s", code, errOut)
	}
	if req, _ := fakegw.LastRequest[*loomv1.UpdateClusterRequest](f); req.GetCluster().GetEtag() != cur.GetEtag() || req.GetCluster().GetDescription() != "flag" {
		t.Fatalf("UpdateCluster with --etag: %v", req)
	}
	sent := len(fakegw.Requests[*loomv1.UpdateClusterRequest](f))

	stale := a3uCluster()
	stale.Etag = "0123456789abcdef0123456789abcdef"
	stale.Labels = map[string]string{"team": "vision"}
	staleFile := clusterFile(t, stale)
	_, errOut, code = run(t, gw, "clusters", "update", "a3u", "-f", staleFile)
	if code != 1 || !strings.Contains(errOut, "the cluster changed since "+staleFile+" was read") ||
		!strings.Contains(errOut, stale.GetEtag()) || !strings.Contains(errOut, cur.GetEtag()) ||
		!strings.Contains(errOut, "get it again with `loom clusters get a3u -o json`") {
		t.Fatalf("update from a stale file: exit %d, %q", code, errOut)
	}
	_, errOut, code = run(t, gw, "clusters", "update", "a3u", "-f", staleFile, "--etag", cur.GetEtag())
	if code != 2 || !strings.Contains(errOut, "--etag says") {
		t.Fatalf("--etag against the file's: exit %d, %q", code, errOut)
	}
	if n := len(fakegw.Requests[*loomv1.UpdateClusterRequest](f)); n != sent {
		t.Fatalf("refused updates sent %d requests", n-sent)
	}
}

// `loom clusters resize` sends the etag of the cluster it read; when the
// cluster changes before the update lands (ABORTED) it says to run again.
func TestClustersResizeSendsTheEtag(t *testing.T) {
	t.Parallel()
	f, gw := newFakeGateway(t)
	cur := withEtag(f)
	if _, errOut, code := run(t, gw, "clusters", "resize", "a3u", "spot", "1", "--async"); code != 0 {
		t.Fatalf("resize: exit %d: %s", code, errOut)
	}
	if req, _ := fakegw.LastRequest[*loomv1.UpdateClusterRequest](f); req.GetCluster().GetEtag() != cur.GetEtag() {
		t.Fatalf("resize sent etag %q, want the cluster's %q", req.GetCluster().GetEtag(), cur.GetEtag())
	}
	f.UpdateErr = status.Error(codes.Aborted, "update cluster projects/default/clusters/a3u: etag does not match: aborted")
	_, errOut, code := run(t, gw, "clusters", "resize", "a3u", "spot", "1")
	if code != 1 || !strings.Contains(errOut, "the cluster changed while the resize was sent") || !strings.Contains(errOut, "run the resize again") {
		t.Fatalf("resize aborted: exit %d, %q", code, errOut)
	}
}

func TestClustersDeleteEtag(t *testing.T) {
	t.Parallel()
	f, gw := newFakeGateway(t)
	cur := withEtag(f)
	_, errOut, code := run(t, gw, "clusters", "delete", "a3u", "--etag", "0123456789abcdef0123456789abcdef")
	if code != 1 || !strings.Contains(errOut, "read it again") {
		t.Fatalf("delete with a stale etag: exit %d, %q", code, errOut)
	}
	if _, errOut, code := run(t, gw, "clusters", "delete", "a3u", "--etag", cur.GetEtag(), "--async"); code != 0 {
		t.Fatalf("delete with the current etag: exit %d: %s", code, errOut)
	}
	if req, _ := fakegw.LastRequest[*loomv1.DeleteClusterRequest](f); req.GetEtag() != cur.GetEtag() {
		t.Fatalf("DeleteCluster etag = %q", req.GetEtag())
	}
}

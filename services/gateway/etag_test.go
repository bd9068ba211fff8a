package gateway

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/loom-ml/loom/libs/clusterspec"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/domain"
)

// TestClusterEtag checks the gateway's side of AIP-154 etags on clusters:
// an UpdateCluster or DeleteCluster whose etag is not the cluster's is
// refused with ABORTED (HTTP 409) naming both etags and emits nothing; one
// with the current etag, or none, is accepted and its command carries the
// etag for the provisioner to check again when it decides; an etag over
// the limit is InvalidArgument naming the field.
func TestClusterEtag(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	cur := setTrain(h)
	cur.Etag = clusterspec.Etag(cur)
	h.w.setCluster(cur)
	ctx := testkit.Context(t, 2*wait)
	stale := strings.Repeat("0", len(cur.GetEtag()))

	update := func(etag string, rid string) (*loomv1.Operation, error) {
		c := proto.Clone(cur).(*loomv1.Cluster)
		c.Status, c.Etag = nil, etag
		c.Labels = map[string]string{"team": "vision"}
		return h.clusters().UpdateCluster(ctx, &loomv1.UpdateClusterRequest{Cluster: c, RequestId: rid,
			UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"labels"}}})
	}
	_, err := update(stale, "")
	wantCode(t, "update with a stale etag", err, codes.Aborted, stale, cur.GetEtag(), "read it again", "loom clusters get train -o json")
	_, err = update(strings.Repeat("e", domain.MaxEtagBytes+1), "")
	wantCode(t, "update with an etag over the limit", err, codes.InvalidArgument,
		fmt.Sprintf("cluster.etag: %d bytes, longer than the limit of %d", domain.MaxEtagBytes+1, domain.MaxEtagBytes))
	_, err = h.clusters().DeleteCluster(ctx, &loomv1.DeleteClusterRequest{Name: trainName, Etag: stale})
	wantCode(t, "delete with a stale etag", err, codes.Aborted, stale, cur.GetEtag(), "read it again")
	_, err = h.clusters().DeleteCluster(ctx, &loomv1.DeleteClusterRequest{Name: trainName, Etag: strings.Repeat("e", domain.MaxEtagBytes+1)})
	wantCode(t, "delete with an etag over the limit", err, codes.InvalidArgument, "etag: ")

	// Over REST: 409, as grpc-gateway maps ABORTED.
	req, err := http.NewRequestWithContext(ctx, "PATCH", h.restBase+"/v1/"+trainName,
		strings.NewReader(fmt.Sprintf(`{"description": "vision", "etag": %q}`, stale)))
	if err != nil {
		t.Fatal(err)
	}
	h.authorize(req)
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.http.Do(req)
	if err != nil {
		t.Fatalf("PATCH: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict || !strings.Contains(string(body), stale) {
		t.Errorf("PATCH with a stale etag: HTTP %d %s, want 409 naming the etag", resp.StatusCode, body)
	}
	if evs := testkit.Events(t, h.broker, topics.ClusterCommands); len(evs) != 0 {
		t.Fatalf("refused calls emitted %d commands", len(evs))
	}

	command := func(op *loomv1.Operation) envelope.Event {
		return testkit.WaitEvent(t, h.broker, topics.ClusterCommands, wait, func(e envelope.Event) bool {
			switch p := e.Payload.(type) {
			case *eventsv1.UpdateCluster:
				return p.GetOperation() == op.GetName()
			case *eventsv1.DeleteCluster:
				return p.GetOperation() == op.GetName()
			}
			return false
		})
	}
	for _, etag := range []string{cur.GetEtag(), ""} {
		op, err := update(etag, "up-"+fmt.Sprint(len(etag)))
		if err != nil {
			t.Fatalf("update with etag %q: %v", etag, err)
		}
		if u := command(op).Payload.(*eventsv1.UpdateCluster); u.GetEtag() != etag || u.GetCluster().GetEtag() != "" {
			t.Errorf("UpdateCluster command: etag %q, cluster.etag %q; want %q and none", u.GetEtag(), u.GetCluster().GetEtag(), etag)
		}
	}
	op, err := h.clusters().DeleteCluster(ctx, &loomv1.DeleteClusterRequest{Name: trainName, Etag: cur.GetEtag()})
	if err != nil {
		t.Fatalf("delete with the current etag: %v", err)
	}
	if d := command(op).Payload.(*eventsv1.DeleteCluster); d.GetEtag() != cur.GetEtag() {
		t.Errorf("DeleteCluster command etag = %q, want %q", d.GetEtag(), cur.GetEtag())
	}
}

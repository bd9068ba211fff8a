package domain

import (
	"strings"
	"testing"
	"time"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/health/internal/remedy"
	"github.com/loom-ml/loom/services/health/internal/scan"
)

// TestCheckSummaryIsCleanedBeforeItIsAReason: a failed check's summary, as
// a node (or a site check echoing what users wrote) reported it, becomes
// the node's reason only cut to scan.MaxSummaryBytes and without terminal
// escapes: sinfo -R and scontrol print it.
func TestCheckSummaryIsCleanedBeforeItIsAReason(t *testing.T) {
	t.Parallel()
	s := NewStateWith(Config{Timeout: 15 * time.Second, Remedy: remedy.Config{Mode: remedy.ModeOn, MaxRemediating: 1}})
	now := time.Unix(1e9, 0)
	node := "projects/p/clusters/c/nodes/n-0001"
	c, err := s.Handle(now, &eventsv1.NodeChanged{Node: &loomv1.Node{Name: node, Cluster: "projects/p/clusters/c", Hostname: "n-0001", State: loomv1.Node_READY}})
	if err != nil {
		t.Fatal(err)
	}
	s.Commit(c)
	c, err = s.Handle(now, &eventsv1.HealthCheckCompleted{Result: &loomv1.HealthCheckResult{Name: "projects/p/clusters/c/healthResults/x", Node: node,
		Check: "gpu_diag", Outcome: loomv1.CheckOutcome_CHECK_FAIL, Summary: "\x1b]0;owned\x07\x1b[2J" + strings.Repeat("A", 900<<10)}})
	if err != nil {
		t.Fatal(err)
	}
	s.Commit(c)
	reasons := 0
	for _, e := range c.AllEmits() {
		if h, ok := e.Payload.(*eventsv1.NodeHealthChanged); ok {
			reasons++
			if r := h.GetReason(); len(r) > scan.MaxSummaryBytes+256 || strings.ContainsRune(r, 0x1b) {
				t.Errorf("NodeHealthChanged reason of %d bytes, escape %v", len(r), strings.ContainsRune(r, 0x1b))
			}
		}
	}
	if reasons == 0 {
		t.Fatal("the failed check changed no node's health")
	}
	if r := s.Remedy(node); r == nil || len(r.Reason) > scan.MaxSummaryBytes+256 || strings.ContainsRune(r.Reason, 0x1b) {
		t.Errorf("the node's stored reason: %+v", r)
	}
}

package fakegw

import (
	"context"
	"fmt"
	"strings"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/paging"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// ListAuditRecords pages AuditRecords (newest first, as they are given)
// of the parent's project ("projects/-": all), filtered by principal, as
// the gateway does; its token is the position, as paging.Ordered's.
func (g *Gateway) ListAuditRecords(_ context.Context, r *loomv1.ListAuditRecordsRequest) (*loomv1.ListAuditRecordsResponse, error) {
	defer g.lock(r)()
	project, ok := strings.CutPrefix(r.GetParent(), "projects/")
	if !ok || project == "" || strings.Contains(project, "/") {
		return nil, errs.ToStatus(errs.Invalid("parent", "want projects/{project} or projects/-, got %q", r.GetParent()))
	}
	var recs []*loomv1.AuditRecord
	for _, rec := range g.AuditRecords {
		if (project == "-" || rec.GetProject() == project) && (r.GetPrincipal() == "" || rec.GetPrincipal() == r.GetPrincipal()) {
			recs = append(recs, rec)
		}
	}
	page, next, err := paging.Ordered(r, recs)
	if err != nil {
		return nil, errs.ToStatus(fmt.Errorf("audit records: %w", err))
	}
	return &loomv1.ListAuditRecordsResponse{Records: page, NextPageToken: next}, nil
}

package app

import (
	"context"
	"fmt"
	"time"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/paging"
	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/store"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/adapters"
	"github.com/loom-ml/loom/services/gateway/internal/domain"
	"github.com/loom-ml/loom/services/gateway/internal/guard"
)

// Audit trail defaults (the gateway's -audit-* flags).
const (
	// DefaultAuditRetention is how long the gateway keeps audit records
	// (LOOM_GATEWAY_AUDIT_RETENTION): 90 days. loom.audit.v1 itself keeps
	// a week, as every topic.
	DefaultAuditRetention = 90 * 24 * time.Hour
	// DefaultAuditMaxRecords bounds the records kept per trail (a project's records, and apart its refusals)
	// (LOOM_GATEWAY_AUDIT_MAX_RECORDS); the newest are kept.
	DefaultAuditMaxRecords = 100000
	// AuditGroup is the consumer group (shared by the gateway's instances,
	// durable) that stores loom.audit.v1 in Redis.
	AuditGroup = "loom-gateway-audit"
)

// AuditOptions bound the audit trail the gateway keeps (Options.Audit).
type AuditOptions struct {
	// Retention is how long a record is kept (default DefaultAuditRetention).
	Retention time.Duration
	// MaxRecords is how many records are kept per project (default
	// DefaultAuditMaxRecords).
	MaxRecords int
}

func (o AuditOptions) withDefaults() AuditOptions {
	if o.Retention <= 0 {
		o.Retention = DefaultAuditRetention
	}
	if o.MaxRecords <= 0 {
		o.MaxRecords = DefaultAuditMaxRecords
	}
	return o
}

// RecordAudit writes rec as an AuditRecorded event (loom.audit.v1, key its
// project) through the gateway's outbox: once this returns, the record
// reaches the topic whatever happens to this process. It implements
// guard.Recorder.
func (g *Gateway) RecordAudit(ctx context.Context, rec *loomv1.AuditRecord) error {
	ev, err := auditEvent(rec)
	if err != nil {
		return err
	}
	tx := &store.Tx{}
	tx.Emit(ev)
	if _, err := g.repo.Apply(ctx, "", tx); err != nil {
		return fmt.Errorf("audit record %s: %w", rec.GetId(), err)
	}
	return nil
}

// HandleAuditEvent stores an AuditRecorded from loom.audit.v1 in the
// project's trail in Redis, trimmed to the retention window and the
// per-project count. Storing a record twice changes nothing.
func (g *Gateway) HandleAuditEvent(ctx context.Context, ev envelope.Event) error {
	ar, ok := ev.Payload.(*eventsv1.AuditRecorded)
	if !ok || ar.GetRecord().GetId() == "" {
		return nil
	}
	a := g.opt.Audit.withDefaults()
	return g.repo.PutAudit(ctx, ar.GetRecord(), g.now(), a.Retention, a.MaxRecords)
}

// ListAuditRecords lists one page (AIP-158) of the audit trail, newest
// first: a project's ("projects/{p}", for that project's admins) or every
// project's and the records of calls that named none ("projects/-", for
// cluster administrators), optionally one principal's. A caller who is not
// a member of the project gets NotFound (another project's records do not
// exist for them), a member who is not an admin PermissionDenied.
func (g *Gateway) ListAuditRecords(ctx context.Context, req *loomv1.ListAuditRecordsRequest) (*loomv1.ListAuditRecordsResponse, error) {
	var v errs.Validator
	project := ""
	if req.GetParent() != "projects/-" {
		p, err := resname.ParseProject(req.GetParent())
		if err != nil {
			v.Add("parent", "%v (or projects/- for every project)", err)
		}
		project = p.ID
	}
	v.Check(len(req.GetPrincipal()) <= domain.MaxNameBytes, "principal", "%d bytes, longer than the limit of %d", len(req.GetPrincipal()), domain.MaxNameBytes)
	size, after := paging.Check(&v, req)
	if err := v.Err(); err != nil {
		return nil, err
	}
	p, ok := auth.FromContext(ctx)
	switch {
	case !ok:
		return nil, fmt.Errorf("the audit trail is for administrators; log in: %w", errs.Unauthenticated)
	case project == "" && !p.ClusterAdmin:
		return nil, fmt.Errorf("%s: the audit trail of every project is for cluster administrators: %w", p.Name, errs.PermissionDenied)
	case project != "" && p.Role(project) == auth.RoleNone:
		return nil, errs.Hide(fmt.Errorf("project %s: %w", project, errs.NotFound))
	case project != "" && p.Role(project) < auth.RoleAdmin:
		return nil, fmt.Errorf("%s: the audit trail of project %s is for its admins: %w", p.Name, project, errs.PermissionDenied)
	}
	var keep func(*loomv1.AuditRecord) bool
	if who := req.GetPrincipal(); who != "" {
		keep = func(r *loomv1.AuditRecord) bool { return r.GetPrincipal() == who }
	}
	recs, resume, err := g.repo.ListAudit(ctx, project, after, size+1, keep)
	if err != nil {
		return nil, err
	}
	page, next := paging.Page(recs, adapters.AuditKey, "", size)
	if next == "" && resume != "" {
		// A filter that matched few of the records read: a short page
		// (even an empty one) that goes on where the reading stopped.
		next = resume
	}
	out := &loomv1.ListAuditRecordsResponse{Records: page}
	if next != "" {
		out.NextPageToken = paging.Token(req, next)
	}
	return out, nil
}

// auditInline adds the call's audit record ("allowed") to tx when the call
// came through the audit interceptor (guard.Pending), so that the change
// and its record are one write. Call the returned function once tx
// applied (and the call will answer OK).
func auditInline(ctx context.Context, tx *store.Tx) (applied func()) {
	p := guard.PendingFrom(ctx)
	if p == nil {
		return func() {}
	}
	rec := p.Allowed(ctx)
	ev, err := auditEvent(rec)
	if err != nil {
		return func() {} // the interceptor writes it alone
	}
	tx.Emit(ev)
	return p.Written
}

// auditEvent is rec as the AuditRecorded event on loom.audit.v1 (key: its
// project, "-" for none).
func auditEvent(rec *loomv1.AuditRecord) (envelope.Event, error) {
	key := rec.GetProject()
	if key == "" {
		key = "-"
	}
	ev, err := envelope.Route(key, Source, &eventsv1.AuditRecorded{Record: rec})
	if err != nil {
		return envelope.Event{}, err
	}
	ev.ID = rec.GetId()
	ev.Subject = rec.GetResource()
	ev.Principal = rec.GetPrincipal()
	return ev, nil
}

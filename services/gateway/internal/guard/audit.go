package guard

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/resname"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Decisions an audit record carries.
const (
	// Allowed: the call succeeded.
	Allowed = "allowed"
	// Denied: the caller was refused (Unauthenticated, PermissionDenied,
	// and the NotFound given in place of a refusal, errs.Hide's: another
	// project's resource, another user's job or keys).
	Denied = "denied"
	// Rejected: the request was refused for what it asks, whoever asks
	// (NotFound of what is not there, InvalidArgument, FailedPrecondition,
	// AlreadyExists, OutOfRange, ResourceExhausted): a typo, not an
	// attack.
	Rejected = "rejected"
	// Failed: a mutating call was let through but failed (Unavailable,
	// Internal, DeadlineExceeded, Canceled, Aborted, ...).
	Failed = "failed"
)

// Anonymous is the principal of a record of a call without a credential.
const Anonymous = "anonymous"

// NoProject is the project of records of calls that name none (WhoAmI,
// CreateToken): they are listed under "projects/-" only.
const NoProject = "-"

// Recorder writes an audit record so that it is never lost (the gateway:
// through its outbox onto loom.audit.v1).
type Recorder interface {
	RecordAudit(ctx context.Context, rec *loomv1.AuditRecord) error
}

// AuditOptions tune an Auditor. Zero fields take the defaults.
type AuditOptions struct {
	// RefusalRate and RefusalBurst bound the refusals recorded per principal
	// (or address): a flood of refused calls must not turn into a flood of
	// writes. Past the bucket they are counted, and the next record says
	// how many were left out (default 20 a second, bursts of 100).
	RefusalRate  float64
	RefusalBurst int
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Log receives the records that could not be written and the refusals
	// left out (default slog.Default()).
	Log *slog.Logger
	// Timeout bounds writing one record (default 5 s); the write does not
	// end with the call's context.
	Timeout time.Duration
}

// Auditor records every mutating call and every refusal: principal (from
// the auth.Slot it puts in the context before authentication runs), method,
// resource (the request's name or parent), decision, code, reason (the
// error's message) and project. Reads (Get, List, Watch, Read, Wait,
// WhoAmI, and any request with validate_only set) that succeed are not
// recorded; reads that are refused are.
type Auditor struct {
	rec Recorder
	opt AuditOptions

	mu         sync.Mutex
	refusals   map[string]*refusalState
	lastSweep  time.Time
	maxTracked int
}

type refusalState struct {
	bucket  *rate.Limiter
	dropped int
	last    time.Time
}

// NewAuditor returns an Auditor writing through rec.
func NewAuditor(rec Recorder, opt AuditOptions) *Auditor {
	if opt.RefusalRate <= 0 {
		opt.RefusalRate = 20
	}
	if opt.RefusalBurst <= 0 {
		opt.RefusalBurst = 100
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	if opt.Timeout <= 0 {
		opt.Timeout = 5 * time.Second
	}
	return &Auditor{rec: rec, opt: opt, refusals: map[string]*refusalState{}, maxTracked: DefaultMaxPrincipals}
}

// IsRead reports whether method (a gRPC full method name) only reads:
// its successful calls are not recorded. Every other method is taken as
// mutating (a method added later is recorded until it is named here).
func IsRead(method string) bool {
	name := method[strings.LastIndexByte(method, '/')+1:]
	for _, p := range []string{"Get", "List", "Watch", "Read", "Wait"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return name == "WhoAmI"
}

// readsOnly reports whether a call of method with req only reads: a read
// method (IsRead), or a request that asks to be validated only (AIP-163's
// validate_only set: it writes nothing, so its success is not recorded,
// its refusal is, as a read's).
func readsOnly(method string, req proto.Message) bool {
	if IsRead(method) {
		return true
	}
	if req == nil {
		return false
	}
	m := req.ProtoReflect()
	f := m.Descriptor().Fields().ByName("validate_only")
	return f != nil && f.Kind() == protoreflect.BoolKind && f.Cardinality() != protoreflect.Repeated && m.Get(f).Bool()
}

// Decision is the decision a call that ended with err stands for: its
// code's (errs.Code), except that a NotFound marked errs.Hidden, which the
// caller cannot tell from one of a resource that is not there, is Denied.
func Decision(err error) string {
	switch c := errs.Code(err); c {
	case codes.OK:
		return Allowed
	case codes.Unauthenticated, codes.PermissionDenied:
		return Denied
	case codes.NotFound:
		if errs.Hidden(err) {
			return Denied
		}
		return Rejected
	case codes.ResourceExhausted, codes.InvalidArgument, codes.FailedPrecondition, codes.AlreadyExists, codes.OutOfRange:
		return Rejected
	}
	return Failed
}

// maxReasonBytes bounds a record's reason (an error message can quote a
// request).
const maxReasonBytes = 1024

// UnaryServerInterceptor records unary calls. It must run outside
// authentication (the gateway README's chain), so that authentication's refusals are recorded.
// A mutating call's handler may write the record itself (Pending).
func (a *Auditor) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		ctx, slot := auth.WithSlot(ctx)
		msg, _ := req.(proto.Message)
		var p *Pending
		if !readsOnly(info.FullMethod, msg) {
			p = &Pending{a: a, slot: slot, method: info.FullMethod, req: msg}
			ctx = context.WithValue(ctx, pendingKey{}, p)
		}
		resp, err := h(ctx, req)
		if err == nil && p.written() {
			return resp, nil
		}
		a.record(ctx, slot, info.FullMethod, msg, err)
		return resp, err
	}
}

type pendingKey struct{}

// Pending is a mutating call's audit record while the call runs. A handler
// that stores the call's change with one atomic write (store.Apply) and
// answers OK once it applied can put the record in that write (Allowed),
// then say so (Written): the call then costs one write instead of two, and
// the interceptor writes nothing more. A call that then fails is recorded
// by the interceptor as usual.
type Pending struct {
	a      *Auditor
	slot   *auth.Slot
	method string
	req    proto.Message

	mu   sync.Mutex
	done bool
}

// PendingFrom returns the call's Pending record; nil outside a mutating
// call through the Auditor.
func PendingFrom(ctx context.Context) *Pending {
	p, _ := ctx.Value(pendingKey{}).(*Pending)
	return p
}

// Allowed returns the record of the call allowed and answered OK now.
func (p *Pending) Allowed(ctx context.Context) *loomv1.AuditRecord {
	return p.a.newRecord(ctx, p.slot, p.method, p.req, nil)
}

// Written says that the record Allowed returned was stored with the
// call's change.
func (p *Pending) Written() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done = true
}

func (p *Pending) written() bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// StreamServerInterceptor records streaming calls. The resource is read
// from the stream's request: a server stream's one request is received
// here, before the rest of the chain, so that a refusal by a later
// interceptor (the watch cap) still names what was asked for; the handler
// then receives that request.
func (a *Auditor) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		ctx, slot := auth.WithSlot(ss.Context())
		w := &auditStream{ServerStream: ss, ctx: ctx}
		if info.IsServerStream && !info.IsClientStream {
			if m := newRequest(info.FullMethod); m != nil {
				if err := ss.RecvMsg(m); err != nil {
					return err // nothing asked: the handler would fail the same
				}
				w.first, w.buffered = m, true
			}
		}
		err := h(srv, w)
		a.record(ctx, slot, info.FullMethod, w.first, err)
		return err
	}
}

// newRequest returns an empty request message of method
// ("/pkg.Service/Method"), from the registered descriptors; nil when it is
// not known.
func newRequest(method string) proto.Message {
	svc, name, ok := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	if !ok {
		return nil
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
	if err != nil {
		return nil
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok || sd.Methods().ByName(protoreflect.Name(name)) == nil {
		return nil
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(sd.Methods().ByName(protoreflect.Name(name)).Input().FullName())
	if err != nil {
		return nil
	}
	return mt.New().Interface()
}

// auditStream carries the audit slot's context and the request the
// interceptor received for the handler.
type auditStream struct {
	grpc.ServerStream
	ctx      context.Context
	first    proto.Message
	buffered bool // first is still to be handed to the handler
}

func (s *auditStream) Context() context.Context { return s.ctx }

func (s *auditStream) RecvMsg(m any) error {
	if s.buffered {
		s.buffered = false
		dst, ok := m.(proto.Message)
		if !ok {
			return fmt.Errorf("audit: cannot hand a %T the request", m)
		}
		proto.Reset(dst)
		proto.Merge(dst, s.first)
		return nil
	}
	err := s.ServerStream.RecvMsg(m)
	if err == nil && s.first == nil {
		s.first, _ = m.(proto.Message)
	}
	return err
}

// record writes the record of one call, when it is one to record.
func (a *Auditor) record(ctx context.Context, slot *auth.Slot, method string, req proto.Message, err error) {
	code := errs.Code(err)
	read := readsOnly(method, req)
	if code == codes.OK && read {
		return
	}
	if read && Decision(err) == Failed {
		// A read that failed (Unavailable, Canceled, DeadlineExceeded,
		// Internal): nothing was decided. Every refused read is recorded,
		// denied or rejected, FailedPrecondition, AlreadyExists and
		// OutOfRange included: which reads are recorded is Decision's one
		// mapping, not a second list beside it (that list once left those
		// three out). No read answers them as a matter of course (no watch
		// or poll ends on OutOfRange), and admitRefusal bounds each
		// principal's records all the same.
		return
	}
	rec := a.newRecord(ctx, slot, method, req, err)
	if err != nil {
		key := "anonymous@" + PeerIP(ctx)
		if slot.Principal != nil {
			key = slot.Principal.Name
		}
		reason := err.Error()
		if st, ok := status.FromError(err); ok {
			reason = st.Message()
		}
		if read && !IsRead(method) {
			reason = "validate only: " + reason // nothing was to be written
		}
		if slot.Principal == nil {
			reason = "from " + PeerIP(ctx) + ": " + reason
		}
		rec.Reason = clipReason(reason)
		dropped, ok := a.admitRefusal(key)
		if !ok {
			return
		}
		if dropped > 0 {
			rec.Reason = clipReason(fmt.Sprintf("%s (and %d refusals of %s left out of the trail before this one)", rec.Reason, dropped, rec.GetPrincipal()))
		}
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.opt.Timeout)
	defer cancel()
	if werr := a.rec.RecordAudit(wctx, rec); werr != nil {
		a.opt.Log.ErrorContext(ctx, "audit record not written", "error", werr, "principal", rec.Principal,
			"method", rec.Method, "resource", rec.Resource, "code", rec.Code)
	}
}

// newRecord is the record of a call of method on req by the slot's
// principal that ended with err.
func (a *Auditor) newRecord(ctx context.Context, slot *auth.Slot, method string, req proto.Message, err error) *loomv1.AuditRecord {
	code := errs.Code(err)
	principal := Anonymous
	if slot.Principal != nil {
		principal = slot.Principal.Name
	}
	resource := Resource(req)
	project := ProjectOf(resource)
	if code != codes.OK && !slot.Principal.InProject(project) {
		// A stranger's call that was not done (refused, or failed: a
		// credential that could not be checked in time fails Unavailable
		// before anyone is known), or an anonymous one, goes to the
		// cluster's trail, where its resource still shows what was
		// probed: filed under the project it names, it would push that
		// project's own records out of its capped trail, and any
		// well-formed name would make a trail.
		project = NoProject
	}
	return &loomv1.AuditRecord{
		Id:        envelope.NewID(),
		Time:      timestamppb.New(a.opt.Now()),
		Principal: principal,
		Method:    method,
		Resource:  resource,
		Decision:  Decision(err),
		Code:      code.String(),
		Project:   project,
	}
}

// admitRefusal reports whether a refusal by key is recorded (its bucket
// has a token), and how many were left out before it.
func (a *Auditor) admitRefusal(key string) (dropped int, ok bool) {
	now := a.opt.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if now.Sub(a.lastSweep) >= DefaultIdle/2 || len(a.refusals) >= a.maxTracked {
		a.lastSweep = now
		for k, s := range a.refusals {
			if s.dropped == 0 && (now.Sub(s.last) >= DefaultIdle || len(a.refusals) >= a.maxTracked) {
				delete(a.refusals, k)
			}
		}
	}
	s := a.refusals[key]
	if s == nil {
		s = &refusalState{bucket: rate.NewLimiter(rate.Limit(a.opt.RefusalRate), a.opt.RefusalBurst)}
		a.refusals[key] = s
	}
	s.last = now
	if !s.bucket.AllowN(now, 1) {
		s.dropped++
		if s.dropped == 1 || s.dropped%1000 == 0 {
			a.opt.Log.Warn("audit: refusals of one principal left out of the trail", "principal", key, "left_out", s.dropped)
		}
		return 0, false
	}
	dropped, s.dropped = s.dropped, 0
	return dropped, true
}

// clipReason cuts s to maxReasonBytes on a rune boundary.
func clipReason(s string) string {
	if len(s) <= maxReasonBytes {
		return s
	}
	cut := maxReasonBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// Resource is the name a request acts on: its "name" field, else its
// "parent", else its "cluster" (the health and Slurm node requests), else
// the "name" of its first message field that has one (UpdateCluster's
// cluster.name); "" when none.
func Resource(req proto.Message) string {
	if req == nil {
		return ""
	}
	r := req.ProtoReflect()
	fields := r.Descriptor().Fields()
	for _, n := range []protoreflect.Name{"name", "parent", "cluster"} {
		if fd := fields.ByName(n); fd != nil && fd.Kind() == protoreflect.StringKind && !fd.IsList() {
			if v := r.Get(fd).String(); v != "" {
				return clipReason(v)
			}
		}
	}
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if fd.Kind() != protoreflect.MessageKind || fd.IsList() || fd.IsMap() || !r.Has(fd) {
			continue
		}
		m := r.Get(fd).Message()
		if nfd := m.Descriptor().Fields().ByName("name"); nfd != nil && nfd.Kind() == protoreflect.StringKind && !nfd.IsList() {
			if v := m.Get(nfd).String(); v != "" {
				return clipReason(v)
			}
		}
	}
	return ""
}

// ProjectOf is the project of a resource name "projects/{p}/...", else
// NoProject.
func ProjectOf(resource string) string {
	rest, ok := strings.CutPrefix(resource, "projects/")
	if !ok {
		return NoProject
	}
	p, _, _ := strings.Cut(rest, "/")
	if !resname.ValidID(p) {
		return NoProject
	}
	return p
}

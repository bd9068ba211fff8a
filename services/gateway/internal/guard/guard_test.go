package guard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/errs"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

func as(name string) context.Context {
	return auth.NewContext(context.Background(), &auth.Principal{Name: name, Kind: auth.KindUser})
}

func from(ip string) context.Context {
	return peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000}})
}

func call(l *Limiter, ctx context.Context, method string) error {
	_, err := l.UnaryServerInterceptor()(ctx, nil, &grpc.UnaryServerInfo{FullMethod: method},
		func(context.Context, any) (any, error) { return nil, nil })
	return err
}

func TestRateLimitPerPrincipal(t *testing.T) {
	t.Parallel()
	// A bucket of 3 that refills once in 1000 s: the 4th call is refused
	// whatever the machine's speed.
	l := NewLimiter(LimitOptions{Rate: 0.001, Burst: 3})
	const m = "/loom.v1.JobService/SubmitJob"
	for i := range 3 {
		if err := call(l, as("users/ana"), m); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	err := call(l, as("users/ana"), m)
	if !errors.Is(err, errs.ResourceExhausted) || !errors.Is(err, ErrRateLimited) ||
		!strings.Contains(err.Error(), "users/ana: more than 0.001 requests a second (LOOM_GATEWAY_RATE), in bursts of at most 3 (LOOM_GATEWAY_BURST)") {
		t.Errorf("4th call: %v", err)
	}
	if err := call(l, as("users/bob"), m); err != nil {
		t.Errorf("another principal: %v", err)
	}
	// Anonymous calls are keyed by address: one host's flood leaves another's alone.
	for range 3 {
		_ = call(l, from("10.0.0.1"), m)
	}
	if err := call(l, from("10.0.0.1"), m); !errors.Is(err, ErrRateLimited) || !strings.Contains(err.Error(), "anonymous@10.0.0.1") {
		t.Errorf("anonymous flood: %v", err)
	}
	if err := call(l, from("10.0.0.2"), m); err != nil {
		t.Errorf("another address: %v", err)
	}
}

func TestWatchCap(t *testing.T) {
	t.Parallel()
	l := NewLimiter(LimitOptions{MaxWatches: 2})
	const watch = "/loom.v1.JobService/WatchJob"
	release := make(chan struct{})
	var wg sync.WaitGroup
	entered := make(chan struct{}, 2)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = l.StreamServerInterceptor()(nil, fakeStream{ctx: as("users/ana")}, &grpc.StreamServerInfo{FullMethod: watch},
				func(any, grpc.ServerStream) error { entered <- struct{}{}; <-release; return nil })
		}()
	}
	<-entered
	<-entered
	err := l.StreamServerInterceptor()(nil, fakeStream{ctx: as("users/ana")}, &grpc.StreamServerInfo{FullMethod: "/loom.v1.JobService/ReadJobLogs"},
		func(any, grpc.ServerStream) error { return nil })
	if !errors.Is(err, errs.ResourceExhausted) || !strings.Contains(err.Error(), "users/ana: 2 watch streams open (WatchJob, ReadJobLogs, WaitOperation, WatchChanges), the limit of 2 (LOOM_GATEWAY_MAX_WATCHES)") {
		t.Errorf("third watch: %v", err)
	}
	if err := call(l, as("users/ana"), "/loom.v1.OperationService/WaitOperation"); !errors.Is(err, errs.ResourceExhausted) {
		t.Errorf("WaitOperation beyond the cap: %v", err)
	}
	if err := call(l, as("users/ana"), "/loom.v1.JobService/GetJob"); err != nil {
		t.Errorf("a plain call beside the watches: %v", err)
	}
	if err := call(l, as("users/bob"), "/loom.v1.OperationService/WaitOperation"); err != nil {
		t.Errorf("another principal's watch: %v", err)
	}
	close(release)
	wg.Wait()
	if err := call(l, as("users/ana"), "/loom.v1.OperationService/WaitOperation"); err != nil {
		t.Errorf("a watch once the others closed: %v", err)
	}
}

func TestLimiterEvictsIdlePrincipals(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	l := NewLimiter(LimitOptions{Rate: 0.001, Burst: 1, Idle: time.Minute, MaxPrincipals: 100, Now: func() time.Time { return now }})
	for i := range 50 {
		_ = call(l, as("users/u"+strconv.Itoa(i)), "/loom.v1.JobService/GetJob")
	}
	if n := l.Len(); n != 50 {
		t.Fatalf("%d principals remembered, want 50", n)
	}
	if err := call(l, as("users/u0"), "/loom.v1.JobService/GetJob"); err == nil {
		t.Fatal("users/u0's empty bucket let a call through")
	}
	now = now.Add(2 * time.Minute)
	_ = call(l, as("users/new"), "/loom.v1.JobService/GetJob")
	if n := l.Len(); n != 1 {
		t.Errorf("%d principals remembered after the idle window, want 1", n)
	}
	// Never more than MaxPrincipals, however many come.
	for i := range 1000 {
		_ = call(l, from("10.1."+strconv.Itoa(i/256)+"."+strconv.Itoa(i%256)), "/loom.v1.JobService/GetJob")
		if n := l.Len(); n > 100 {
			t.Fatalf("%d principals remembered, more than 100", n)
		}
	}
}

type fakeStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (f fakeStream) Context() context.Context { return f.ctx }

type recorder struct {
	mu   sync.Mutex
	recs []*loomv1.AuditRecord
}

func (r *recorder) RecordAudit(_ context.Context, rec *loomv1.AuditRecord) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec)
	return nil
}

func (r *recorder) all() []*loomv1.AuditRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*loomv1.AuditRecord(nil), r.recs...)
}

func TestAuditRecordsMutationsAndRefusals(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	a := NewAuditor(rec, AuditOptions{Now: func() time.Time { return time.Unix(1700000000, 0) }})
	ana := &auth.Principal{Name: "users/ana", Kind: auth.KindUser, Roles: map[string]auth.Role{"p1": auth.RoleUser}}
	run := func(method string, req any, p *auth.Principal, err error) {
		_, _ = a.UnaryServerInterceptor()(from("10.0.0.9"), req, &grpc.UnaryServerInfo{FullMethod: method},
			func(ctx context.Context, _ any) (any, error) {
				if p != nil {
					auth.NewContext(ctx, p) // what authentication does
				}
				return nil, err
			})
	}
	run("/loom.v1.JobService/SubmitJob", &loomv1.SubmitJobRequest{Parent: "projects/p1"}, ana, nil)
	run("/loom.v1.JobService/GetJob", &loomv1.GetJobRequest{Name: "projects/p1/jobs/1"}, ana, nil)                                     // a read that succeeded: not recorded
	run("/loom.v1.JobService/GetJob", &loomv1.GetJobRequest{Name: "projects/p2/jobs/1"}, ana, errs.ToStatus(errs.Hide(errs.NotFound))) // a refused read
	run("/loom.v1.JobService/GetJob", &loomv1.GetJobRequest{Name: "projects/p1/jobs/9"}, ana, errs.ToStatus(errs.NotFound))            // a job that is not there
	run("/loom.v1.JobService/ListJobs", &loomv1.ListJobsRequest{Parent: "projects/p1"}, ana, errs.ToStatus(errs.Unavailable))          // a failed read: not recorded
	run("/loom.v1.ClusterService/UpdateCluster", &loomv1.UpdateClusterRequest{Cluster: &loomv1.Cluster{Name: "projects/p1/clusters/c1"}}, nil,
		errs.Unauthenticated)
	run("/loom.v1.ClusterService/DeleteCluster", &loomv1.DeleteClusterRequest{Name: "projects/p1/clusters/c1"}, ana, errs.ToStatus(errs.Unavailable))
	run("/loom.v1.ClusterService/CreateCluster", &loomv1.CreateClusterRequest{Parent: "projects/p1"}, ana, errs.ToStatus(errs.PermissionDenied))
	// A stranger's call that failed (a credential that could not be
	// checked before a deadline of a nanosecond: Unavailable) is the
	// cluster's too.
	run("/loom.v1.ClusterService/DeleteCluster", &loomv1.DeleteClusterRequest{Name: "projects/p2/clusters/c1"}, nil, errs.ToStatus(errs.Unavailable))
	got := rec.all()
	type row struct{ principal, method, resource, decision, code, project string }
	want := []row{
		{"users/ana", "/loom.v1.JobService/SubmitJob", "projects/p1", Allowed, "OK", "p1"},
		// A refusal in a project the caller has no role in, or without a
		// credential, is the cluster's ("-"); a member's is the project's.
		{"users/ana", "/loom.v1.JobService/GetJob", "projects/p2/jobs/1", Denied, "NotFound", NoProject},
		{"users/ana", "/loom.v1.JobService/GetJob", "projects/p1/jobs/9", Rejected, "NotFound", "p1"},
		{Anonymous, "/loom.v1.ClusterService/UpdateCluster", "projects/p1/clusters/c1", Denied, "Unauthenticated", NoProject},
		{"users/ana", "/loom.v1.ClusterService/DeleteCluster", "projects/p1/clusters/c1", Failed, "Unavailable", "p1"},
		{"users/ana", "/loom.v1.ClusterService/CreateCluster", "projects/p1", Denied, "PermissionDenied", "p1"},
		{Anonymous, "/loom.v1.ClusterService/DeleteCluster", "projects/p2/clusters/c1", Failed, "Unavailable", NoProject},
	}
	if len(got) != len(want) {
		t.Fatalf("%d records, want %d: %v", len(got), len(want), got)
	}
	for i, w := range want {
		r := got[i]
		if (row{r.GetPrincipal(), r.GetMethod(), r.GetResource(), r.GetDecision(), r.GetCode(), r.GetProject()}) != w {
			t.Errorf("record %d: %v, want %+v", i, r, w)
		}
		if r.GetId() == "" || r.GetTime().AsTime().Unix() != 1700000000 {
			t.Errorf("record %d: id %q time %v", i, r.GetId(), r.GetTime())
		}
	}
	if !strings.HasPrefix(got[3].GetReason(), "from 10.0.0.9: unauthenticated") {
		t.Errorf("anonymous refusal's reason %q", got[3].GetReason())
	}
}

func TestAuditBoundsAFloodOfRefusals(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	now := time.Unix(1700000000, 0)
	a := NewAuditor(rec, AuditOptions{RefusalRate: 1, RefusalBurst: 5, Now: func() time.Time { return now }})
	refuse := func() {
		_, _ = a.UnaryServerInterceptor()(from("10.0.0.9"), &loomv1.GetJobRequest{Name: "projects/p1/jobs/1"},
			&grpc.UnaryServerInfo{FullMethod: "/loom.v1.JobService/GetJob"},
			func(context.Context, any) (any, error) { return nil, errs.Unauthenticated })
	}
	for range 100 {
		refuse()
	}
	if n := len(rec.all()); n != 5 {
		t.Fatalf("%d of 100 refusals recorded, want the burst of 5", n)
	}
	now = now.Add(time.Second)
	refuse()
	got := rec.all()
	if len(got) != 6 || !strings.Contains(got[5].GetReason(), "(and 95 refusals of anonymous left out of the trail before this one)") {
		t.Errorf("after the flood: %d records, last %q", len(got), got[len(got)-1].GetReason())
	}
}

func TestResourceAndIsRead(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		req  proto.Message
		want string
	}{
		{&loomv1.GetJobRequest{Name: "projects/p/jobs/1"}, "projects/p/jobs/1"},
		{&loomv1.SubmitJobRequest{Parent: "projects/p", Job: &loomv1.Job{Name: "x"}}, "projects/p"},
		{&loomv1.UpdateClusterRequest{Cluster: &loomv1.Cluster{Name: "projects/p/clusters/c"}}, "projects/p/clusters/c"},
		{&loomv1.ListAuditRecordsRequest{}, ""},
		{&loomv1.InjectFaultRequest{Cluster: "projects/p/clusters/c", Hostname: "gpu-0001"}, "projects/p/clusters/c"},
		{&loomv1.UpdateSlurmNodeRequest{Cluster: "projects/p/clusters/c"}, "projects/p/clusters/c"},
	} {
		if got := Resource(c.req); got != c.want {
			t.Errorf("Resource(%T) = %q, want %q", c.req, got, c.want)
		}
	}
	for m, want := range map[string]bool{"/loom.v1.JobService/GetJob": true, "/loom.v1.JobService/WatchJob": true,
		"/loom.v1.AuthService/WhoAmI": true, "/loom.v1.JobService/SubmitJob": false, "/loom.v1.AuthService/CreateToken": false,
		"/loom.v1.NewService/Frobnicate": false} {
		if IsRead(m) != want {
			t.Errorf("IsRead(%s) = %v", m, !want)
		}
	}
	if ProjectOf("projects/p1/jobs/1") != "p1" || ProjectOf("projects/-") != NoProject || ProjectOf("users/ana") != NoProject ||
		ProjectOf("projects/Bad Name/x") != NoProject {
		t.Error("ProjectOf")
	}
}

// TestAuditRecordsEveryRefusedRead: a read refused for what it asks is
// recorded rejected whatever its code, FailedPrecondition, AlreadyExists
// and OutOfRange as well as InvalidArgument (which reads are recorded is
// Decision's mapping, not a list of its own); a read that failed, that
// nothing decided, is not.
func TestAuditRecordsEveryRefusedRead(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	a := NewAuditor(rec, AuditOptions{})
	ana := &auth.Principal{Name: "users/ana", Kind: auth.KindUser, Roles: map[string]auth.Role{"p1": auth.RoleUser}}
	refused := []codes.Code{codes.FailedPrecondition, codes.AlreadyExists, codes.OutOfRange, codes.InvalidArgument, codes.ResourceExhausted}
	failed := []codes.Code{codes.Unavailable, codes.Canceled, codes.DeadlineExceeded, codes.Internal, codes.Aborted}
	for i, c := range append(append([]codes.Code(nil), refused...), failed...) {
		name := fmt.Sprintf("projects/p1/jobs/%d", i)
		_, _ = a.UnaryServerInterceptor()(from("10.0.0.9"), &loomv1.GetJobRequest{Name: name},
			&grpc.UnaryServerInfo{FullMethod: "/loom.v1.JobService/GetJob"},
			func(ctx context.Context, _ any) (any, error) {
				auth.NewContext(ctx, ana)
				return nil, status.Error(c, "refused or failed")
			})
	}
	got := map[string]*loomv1.AuditRecord{}
	for _, r := range rec.all() {
		got[r.GetCode()] = r
	}
	for _, c := range refused {
		if r := got[c.String()]; r == nil || r.GetDecision() != Rejected {
			t.Errorf("a read refused %s: record %v, want one rejected", c, r)
		}
	}
	for _, c := range failed {
		if r := got[c.String()]; r != nil {
			t.Errorf("a read that failed %s was recorded: %v", c, r)
		}
	}
}

// TestDecision: a hidden NotFound (errs.Hide: a refusal the caller cannot
// tell from a missing resource) is denied, as it reaches the audit both
// before and after a port made a status of it; a real one, and what is
// refused for what it asks, is rejected.
func TestDecision(t *testing.T) {
	t.Parallel()
	missing := fmt.Errorf("job projects/p/jobs/7: %w", errs.NotFound)
	for err, want := range map[error]string{
		nil:                               Allowed,
		missing:                           Rejected,
		errs.ToStatus(missing):            Rejected,
		errs.Hide(missing):                Denied,
		errs.ToStatus(errs.Hide(missing)): Denied,
		status.Error(codes.PermissionDenied, "x"):   Denied,
		status.Error(codes.Unauthenticated, "x"):    Denied,
		errs.Invalid("name", "bad"):                 Rejected,
		status.Error(codes.FailedPrecondition, "x"): Rejected,
		status.Error(codes.AlreadyExists, "x"):      Rejected,
		status.Error(codes.OutOfRange, "x"):         Rejected,
		status.Error(codes.ResourceExhausted, "x"):  Rejected,
		status.Error(codes.Internal, "x"):           Failed,
		status.Error(codes.Unavailable, "x"):        Failed,
	} {
		if got := Decision(err); got != want {
			t.Errorf("Decision(%v) = %s, want %s", err, got, want)
		}
	}
}

// A handler that writes the record with its change (Pending) leaves the
// interceptor nothing to write; one that then fails is recorded as usual.
func TestAuditPendingWrittenByTheHandler(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	a := NewAuditor(rec, AuditOptions{})
	ana := &auth.Principal{Name: "users/ana", Kind: auth.KindUser}
	var inline []*loomv1.AuditRecord
	call := func(method string, fail error) {
		_, _ = a.UnaryServerInterceptor()(context.Background(), &loomv1.SubmitJobRequest{Parent: "projects/p1"},
			&grpc.UnaryServerInfo{FullMethod: method}, func(ctx context.Context, _ any) (any, error) {
				ctx = auth.NewContext(ctx, ana)
				if p := PendingFrom(ctx); p != nil {
					inline = append(inline, p.Allowed(ctx))
					p.Written()
				}
				return nil, fail
			})
	}
	call("/loom.v1.JobService/SubmitJob", nil)
	if len(inline) != 1 || len(rec.all()) != 0 || inline[0].GetPrincipal() != "users/ana" || inline[0].GetDecision() != Allowed {
		t.Fatalf("inline %v, interceptor wrote %v", inline, rec.all())
	}
	call("/loom.v1.JobService/SubmitJob", errs.ToStatus(errs.Unavailable))
	if got := rec.all(); len(got) != 1 || got[0].GetCode() != "Unavailable" {
		t.Errorf("a call that failed after its handler wrote: %v", got)
	}
	call("/loom.v1.JobService/GetJob", nil)
	if len(inline) != 2 {
		t.Errorf("a read got a Pending record")
	}
}

// TestPeerIPOfARESTCall: a call the REST port passed on counts as its HTTP
// client's (the metadata RESTClient makes); the same keys without this
// process's secret, with a wrong one, or with a second address are the
// caller's own words and ignored: the gRPC peer's address stands.
func TestPeerIPOfARESTCall(t *testing.T) {
	t.Parallel()
	loopback := from("127.0.0.1")
	with := func(md metadata.MD) context.Context { return metadata.NewIncomingContext(loopback, md) }
	if got := PeerIP(with(RESTClient("10.1.2.3:51234"))); got != "10.1.2.3" {
		t.Errorf("PeerIP(a REST call from 10.1.2.3) = %q", got)
	}
	if got := PeerIP(with(RESTClient("[2001:db8::7]:443"))); got != "2001:db8::7" {
		t.Errorf("PeerIP(a REST call from 2001:db8::7) = %q", got)
	}
	twice := RESTClient("10.1.2.3:1")
	twice.Append(RESTClientKey, "10.9.9.9")
	for name, md := range map[string]metadata.MD{
		"no secret":      metadata.Pairs(RESTClientKey, "10.9.9.9"),
		"a wrong secret": metadata.Pairs(RESTClientKey, "10.9.9.9", restSecretKey, strings.Repeat("0", 64)),
		"two addresses":  twice,
		"not an address": metadata.Pairs(RESTClientKey, "evil", restSecretKey, restSecret),
	} {
		if got := PeerIP(with(md)); got != "127.0.0.1" {
			t.Errorf("PeerIP(%s) = %q; want the peer's 127.0.0.1", name, got)
		}
	}
	if got := Key(with(RESTClient("10.1.2.3:1"))); got != "anonymous@10.1.2.3" {
		t.Errorf("Key(an anonymous REST call) = %q; want it counted against its client", got)
	}
	// An IPv6 client counts by its /64: one host holds many addresses.
	if a, b := Key(from("2001:db8:1:2::7")), Key(from("2001:db8:1:2:ffff::1")); a != b || a != "anonymous@2001:db8:1:2::/64" {
		t.Errorf("Key of two addresses of one /64 = %q and %q; want both anonymous@2001:db8:1:2::/64", a, b)
	}
}

package authz

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/errs"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// servedFiles are the proto files whose services the gateway serves (or
// will serve: AuthService, AuditService and AccountService; HealthService
// and GoodputService).
var servedFiles = []protoreflect.FileDescriptor{
	loomv1.File_loom_v1_service_proto, loomv1.File_loom_v1_auth_proto, healthpb.File_grpc_health_v1_health_proto,
	loomv1.File_loom_v1_health_proto, trainingv1.File_loom_training_v1_training_proto,
	trainingv1.File_loom_training_v1_metrics_proto, loomv1.File_loom_v1_ingress_proto, loomv1.File_loom_v1_watch_proto,
}

// TestTableMatchesProtos: every method of every service in the gateway's
// proto files has a rule, every rule names a real method, and every rule's
// Field is a string field of the method's request (a typo there would
// check the project of "").
func TestTableMatchesProtos(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, f := range servedFiles {
		for i := 0; i < f.Services().Len(); i++ {
			svc := f.Services().Get(i)
			for j := 0; j < svc.Methods().Len(); j++ {
				m := svc.Methods().Get(j)
				full := "/" + string(svc.FullName()) + "/" + string(m.Name())
				seen[full] = true
				rule, ok := Table[full]
				if !ok {
					t.Errorf("%s is not in authz.Table", full)
					continue
				}
				if rule.Field == "" {
					if rule.Access != Public && rule.Access != Authenticated && rule.Access != NodeOnly {
						t.Errorf("%s: %s needs a Field", full, rule.Access)
					}
					continue
				}
				if !hasStringField(m.Input(), rule.Field) {
					t.Errorf("%s: %s has no string field %q", full, m.Input().FullName(), rule.Field)
				}
			}
		}
	}
	for m := range Table {
		if !seen[m] {
			t.Errorf("authz.Table has %s, which no served service has", m)
		}
	}
}

func hasStringField(md protoreflect.MessageDescriptor, path string) bool {
	names := strings.Split(path, ".")
	for i, n := range names {
		fd := md.Fields().ByName(protoreflect.Name(n))
		if fd == nil || fd.IsList() || fd.IsMap() {
			return false
		}
		if i == len(names)-1 {
			return fd.Kind() == protoreflect.StringKind
		}
		if fd.Kind() != protoreflect.MessageKind {
			return false
		}
		md = fd.Message()
	}
	return false
}

func TestAuthorize(t *testing.T) {
	t.Parallel()
	viewer := &auth.Principal{Name: "users/vic", Kind: auth.KindUser, User: "vic", Roles: map[string]auth.Role{"p": auth.RoleViewer}}
	user := &auth.Principal{Name: "users/ana", Kind: auth.KindUser, User: "ana", Roles: map[string]auth.Role{"p": auth.RoleUser}}
	admin := &auth.Principal{Name: "users/ada", Kind: auth.KindUser, User: "ada", Roles: map[string]auth.Role{"p": auth.RoleAdmin}}
	root := &auth.Principal{Name: "users/root", Kind: auth.KindUser, User: "root", ClusterAdmin: true}
	node := &auth.Principal{Name: "nodes/n1", Kind: auth.KindNode, Node: "n1"}
	work := &auth.Principal{Name: "jobs/p/7", Kind: auth.KindWorkload, User: "ana", Project: "p", Job: "projects/p/jobs/7"}
	svc := &auth.Principal{Name: "services/login", Kind: auth.KindService}
	get := func(name string) any { return &loomv1.GetJobRequest{Name: name} }
	for _, tc := range []struct {
		who    *auth.Principal
		method string
		req    any
		want   error // nil, or the errs kind
		msg    string
	}{
		{nil, jobSvc + "GetJob", get("projects/p/jobs/1"), errs.Unauthenticated, "needs a credential"},
		{nil, authSvc + "CreateToken", &loomv1.CreateTokenRequest{}, nil, ""},
		{nil, healthSvc + "Check", &healthpb.HealthCheckRequest{}, nil, ""},
		{root, "/loom.v1.JobService/Nope", get("projects/p/jobs/1"), errs.PermissionDenied, "not in the gateway's authorization table"},
		{viewer, jobSvc + "GetJob", get("projects/p/jobs/1"), nil, ""},
		{viewer, jobSvc + "GetJob", get("projects/q/jobs/1"), errs.NotFound, "projects/q: not found"},
		{viewer, jobSvc + "CancelJob", &loomv1.CancelJobRequest{Name: "projects/p/jobs/1"}, errs.PermissionDenied, "needs role user in projects/p; users/vic is viewer"},
		{user, jobSvc + "CancelJob", &loomv1.CancelJobRequest{Name: "projects/p/jobs/1"}, nil, ""},
		{user, clusterSvc + "UpdateCluster", &loomv1.UpdateClusterRequest{Cluster: &loomv1.Cluster{Name: "projects/p/clusters/c"}}, errs.PermissionDenied, "needs role admin"},
		{admin, clusterSvc + "UpdateCluster", &loomv1.UpdateClusterRequest{Cluster: &loomv1.Cluster{Name: "projects/p/clusters/c"}}, nil, ""},
		{admin, clusterSvc + "UpdateCluster", &loomv1.UpdateClusterRequest{Cluster: &loomv1.Cluster{Name: "projects/q/clusters/c"}}, errs.NotFound, "projects/q"},
		{admin, reservationSvc + "CreateReservation", &loomv1.CreateReservationRequest{Parent: "projects/p"}, errs.PermissionDenied, "cluster administrator"},
		{admin, reservationSvc + "CreateReservation", &loomv1.CreateReservationRequest{Parent: "projects/q"}, errs.NotFound, "projects/q"},
		{root, reservationSvc + "CreateReservation", &loomv1.CreateReservationRequest{Parent: "projects/q"}, nil, ""},
		{user, jobSvc + "GetJob", get("bogus"), &errs.InvalidError{}, "name"},
		{root, jobSvc + "GetJob", get("bogus"), nil, ""}, // the handler says what is wrong
		{user, authSvc + "ListMembers", &loomv1.ListMembersRequest{Parent: "global"}, errs.PermissionDenied, "global"},
		{root, authSvc + "ListMembers", &loomv1.ListMembersRequest{Parent: "global"}, nil, ""},
		{admin, auditSvc + "ListAuditRecords", &loomv1.ListAuditRecordsRequest{Parent: "projects/-"}, errs.PermissionDenied, "every project (projects/-) needs a cluster administrator"},
		{root, auditSvc + "ListAuditRecords", &loomv1.ListAuditRecordsRequest{Parent: "projects/-"}, nil, ""},
		{viewer, ingressSvc + "ListIngressProducers", &loomv1.ListIngressProducersRequest{Parent: "projects/p"}, nil, ""},
		{viewer, ingressSvc + "ListIngressMessages", &loomv1.ListIngressMessagesRequest{Parent: "projects/p"}, nil, ""},
		{viewer, ingressSvc + "ListIngressMessages", &loomv1.ListIngressMessagesRequest{Parent: "projects/q"}, errs.NotFound, "projects/q"},
		{admin, ingressSvc + "ListIngressProducers", &loomv1.ListIngressProducersRequest{Parent: "projects/-"}, errs.PermissionDenied, "every project (projects/-) needs a cluster administrator"},
		{root, ingressSvc + "ListIngressProducers", &loomv1.ListIngressProducersRequest{Parent: "projects/-"}, nil, ""},
		{work, ingressSvc + "ListIngressMessages", &loomv1.ListIngressMessagesRequest{Parent: "projects/p"}, errs.PermissionDenied, "workload principal"},
		{user, authSvc + "ListApiKeys", &loomv1.ListApiKeysRequest{Parent: "users/ana"}, nil, ""},
		{user, authSvc + "ListApiKeys", &loomv1.ListApiKeysRequest{Parent: "users/-"}, nil, ""},
		{user, authSvc + "RevokeApiKey", &loomv1.RevokeApiKeyRequest{Name: "users/bob/keys/k1"}, errs.NotFound, "users/bob/keys/k1"},
		{admin, authSvc + "RevokeApiKey", &loomv1.RevokeApiKeyRequest{Name: "users/bob/keys/k1"}, nil, ""},
		{user, authSvc + "WhoAmI", &loomv1.WhoAmIRequest{}, nil, ""},
		{user, authSvc + "RenewNodeIdentity", &loomv1.RenewNodeIdentityRequest{}, errs.PermissionDenied, "user principal"},
		{node, authSvc + "RenewNodeIdentity", &loomv1.RenewNodeIdentityRequest{}, nil, ""},
		{node, authSvc + "WhoAmI", &loomv1.WhoAmIRequest{}, nil, ""},
		{node, jobSvc + "GetJob", get("projects/p/jobs/7"), errs.PermissionDenied, "a node principal (nodes/n1) may not call"},
		{svc, jobSvc + "GetJob", get("projects/p/jobs/7"), errs.PermissionDenied, "service principal"},
		{work, jobSvc + "GetJob", get("projects/p/jobs/7"), nil, ""},
		{work, jobSvc + "GetJob", get("projects/p/jobs/8"), errs.NotFound, "job projects/p/jobs/8: not found"},
		{work, jobSvc + "GetJob", get("projects/p/jobs/7_1"), errs.NotFound, "not found"},
		{work, jobSvc + "CancelJobStep", &loomv1.CancelJobStepRequest{Name: "projects/p/jobs/7/steps/0"}, nil, ""},
		{work, jobSvc + "CancelJobStep", &loomv1.CancelJobStepRequest{Name: "projects/p/jobs/8/steps/0"}, errs.NotFound, "projects/p/jobs/8"},
		{work, jobSvc + "CreateJobStep", &loomv1.CreateJobStepRequest{Parent: "projects/p/jobs/7"}, nil, ""},
		{work, jobSvc + "CancelJob", &loomv1.CancelJobRequest{Name: "projects/p/jobs/7"}, nil, ""},
		{work, jobSvc + "CancelJob", &loomv1.CancelJobRequest{Name: "projects/p/jobs/8"}, errs.NotFound, "projects/p/jobs/8"},
		{work, jobSvc + "UpdateJob", &loomv1.UpdateJobRequest{Name: "projects/p/jobs/8"}, errs.NotFound, "projects/p/jobs/8"},
		{work, jobSvc + "ListJobs", &loomv1.ListJobsRequest{Parent: "projects/p"}, nil, ""}, // narrowed to job 7 by the application
		{work, jobSvc + "ListJobs", &loomv1.ListJobsRequest{Parent: "projects/q"}, errs.NotFound, "projects/q"},
		{work, jobSvc + "ReadJobLogs", &loomv1.ReadJobLogsRequest{Name: "projects/p/jobs/7"}, errs.PermissionDenied, "workload principal"},
		{work, slurmSvc + "ListShares", &loomv1.ListSharesRequest{Cluster: "projects/p/clusters/c"}, errs.PermissionDenied, "workload principal"},
		{work, slurmSvc + "ListPartitions", &loomv1.ListPartitionsRequest{Cluster: "projects/p/clusters/c"}, nil, ""},
		{work, jobSvc + "SubmitJob", &loomv1.SubmitJobRequest{Parent: "projects/p"}, nil, ""},
		{work, jobSvc + "SubmitJob", &loomv1.SubmitJobRequest{Parent: "projects/q"}, errs.NotFound, "projects/q"},
	} {
		ctx := context.Background()
		if tc.who != nil {
			ctx = auth.NewContext(ctx, tc.who)
		}
		err := Authorize(ctx, tc.method, tc.req)
		name := "anonymous"
		if tc.who != nil {
			name = tc.who.Name
		}
		switch want := tc.want.(type) {
		case nil:
			if err != nil {
				t.Errorf("%s %s %v: %v, want allowed", name, tc.method, tc.req, err)
			}
			continue
		case *errs.InvalidError:
			var inv *errs.InvalidError
			if !errors.As(err, &inv) {
				t.Errorf("%s %s %v: %v, want InvalidArgument", name, tc.method, tc.req, err)
				continue
			}
		default:
			if !errors.Is(err, want) {
				t.Errorf("%s %s %v: %v, want %v", name, tc.method, tc.req, err, want)
				continue
			}
		}
		if !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s %s %v: %q does not say %q", name, tc.method, tc.req, err, tc.msg)
		}
	}
}

// TestNotFoundIsTheSame: a project the caller is not in answers the same
// for an existing and a missing resource (the table decides before any
// lookup), so ids cannot be probed.
func TestNotFoundIsTheSame(t *testing.T) {
	t.Parallel()
	ctx := auth.NewContext(context.Background(), &auth.Principal{Name: "users/ana", Kind: auth.KindUser, User: "ana",
		Roles: map[string]auth.Role{"p": auth.RoleAdmin}})
	a := Authorize(ctx, jobSvc+"GetJob", &loomv1.GetJobRequest{Name: "projects/q/jobs/1"})
	b := Authorize(ctx, jobSvc+"GetJob", &loomv1.GetJobRequest{Name: "projects/q/jobs/999999"})
	c := Authorize(ctx, jobSvc+"ListJobs", &loomv1.ListJobsRequest{Parent: "projects/q"})
	if a == nil || a.Error() != b.Error() || b.Error() != c.Error() {
		t.Errorf("answers differ: %v / %v / %v", a, b, c)
	}
}

func TestJobOf(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"projects/p/jobs/7":               "projects/p/jobs/7",
		"projects/p/jobs/7/steps/3":       "projects/p/jobs/7",
		"projects/p/jobs/7/steps/3/x":     "",
		"projects/p/jobs/7/logs/3":        "",
		"projects/p/clusters/7":           "",
		"projects/p/jobs/":                "",
		"projects//jobs/7":                "",
		"":                                "",
		"projects/p/jobs/7_1/steps/0":     "projects/p/jobs/7_1",
		"projects/p/jobs/7/steps/0/../..": "",
	} {
		if got := JobOf(in); got != want {
			t.Errorf("JobOf(%q) = %q, want %q", in, got, want)
		}
	}
}

// BenchmarkAuthorize measures the table's check of a project-scoped call
// (a user with roles in a few projects), the work authz adds per call.
func BenchmarkAuthorize(b *testing.B) {
	p := &auth.Principal{Name: "users/ana", Kind: auth.KindUser, User: "ana",
		Roles: map[string]auth.Role{"p": auth.RoleUser, "q": auth.RoleViewer, "r": auth.RoleAdmin}}
	ctx := auth.NewContext(context.Background(), p)
	req := &loomv1.UpdateClusterRequest{Cluster: &loomv1.Cluster{Name: "projects/r/clusters/c"}}
	b.ReportAllocs()
	for b.Loop() {
		if err := Authorize(ctx, clusterSvc+"UpdateCluster", req); err != nil {
			b.Fatal(err)
		}
	}
}

// TestUnlistedMethodRefusedAtRunTime: a service registered on a server
// with the interceptors but missing from the table is refused to a
// cluster administrator, before its handler runs; a listed one is served.
func TestUnlistedMethodRefusedAtRunTime(t *testing.T) {
	t.Parallel()
	root := &auth.Principal{Name: "users/root", Kind: auth.KindUser, User: "root", ClusterAdmin: true}
	asRoot := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return h(auth.NewContext(ctx, root), req)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(errs.UnaryServerInterceptor, asRoot, UnaryServerInterceptor()))
	ran := false
	srv.RegisterService(&grpc.ServiceDesc{ServiceName: "test.Unlisted", HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Do", Handler: func(_ any, ctx context.Context, dec func(any) error, in grpc.UnaryServerInterceptor) (any, error) {
			req := &emptypb.Empty{}
			if err := dec(req); err != nil {
				return nil, err
			}
			h := func(context.Context, any) (any, error) { ran = true; return &emptypb.Empty{}, nil }
			return in(ctx, req, &grpc.UnaryServerInfo{FullMethod: "/test.Unlisted/Do"}, h)
		}}}}, struct{}{})
	healthpb.RegisterHealthServer(srv, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = conn.Invoke(ctx, "/test.Unlisted/Do", &emptypb.Empty{}, &emptypb.Empty{})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(fmt.Sprint(err), "not in the gateway's authorization table") {
		t.Errorf("unlisted method: %v, want refused", err)
	}
	if ran {
		t.Error("the unlisted method's handler ran")
	}
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("health, a listed public method: %v", err)
	}
}

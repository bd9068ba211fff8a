package guard

import (
	"context"
	"strconv"
	"testing"

	"google.golang.org/grpc"

	"github.com/loom-ml/loom/libs/auth"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// BenchmarkGuardRead is what the guard adds to a read that succeeds: the
// audit slot and decision (no record) and the limiter's bucket, over 1,000
// principals.
func BenchmarkGuardRead(b *testing.B) {
	a := NewAuditor(&recorder{}, AuditOptions{})
	l := NewLimiter(LimitOptions{Rate: 1e9, Burst: 1 << 30})
	au, lu := a.UnaryServerInterceptor(), l.UnaryServerInterceptor()
	info := &grpc.UnaryServerInfo{FullMethod: "/loom.v1.JobService/GetJob"}
	req := &loomv1.GetJobRequest{Name: "projects/p/jobs/1"}
	ctxs := make([]context.Context, 1000)
	for i := range ctxs {
		ctxs[i] = auth.NewContext(context.Background(), &auth.Principal{Name: "users/u" + strconv.Itoa(i)})
	}
	h := func(ctx context.Context, req any) (any, error) { return nil, nil }
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		_, _ = au(ctxs[i%len(ctxs)], req, info, func(ctx context.Context, req any) (any, error) { return lu(ctx, req, info, h) })
	}
}

// BenchmarkGuardMutation adds building the audit record of a mutation
// (the recorder here keeps it in memory; the gateway's writes it to Redis).
func BenchmarkGuardMutation(b *testing.B) {
	a := NewAuditor(discard{}, AuditOptions{})
	l := NewLimiter(LimitOptions{Rate: 1e9, Burst: 1 << 30})
	au, lu := a.UnaryServerInterceptor(), l.UnaryServerInterceptor()
	info := &grpc.UnaryServerInfo{FullMethod: "/loom.v1.JobService/SubmitJob"}
	req := &loomv1.SubmitJobRequest{Parent: "projects/p", Job: &loomv1.Job{Cluster: "c1", Script: "echo hi"}}
	p := &auth.Principal{Name: "users/ana"}
	h := func(ctx context.Context, req any) (any, error) { return nil, nil }
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		_, _ = au(context.Background(), req, info, func(ctx context.Context, req any) (any, error) {
			return lu(auth.NewContext(ctx, p), req, info, h)
		})
	}
}

type discard struct{}

func (discard) RecordAudit(context.Context, *loomv1.AuditRecord) error { return nil }

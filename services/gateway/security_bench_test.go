package gateway

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/adapters"
	"github.com/loom-ml/loom/services/gateway/internal/authn"
	"github.com/loom-ml/loom/services/gateway/internal/authz"
	"github.com/loom-ml/loom/services/gateway/internal/guard"
)

// discardAudit records nothing: a successful read writes no record, so
// the recorder is not called on the path measured.
type discardAudit struct{}

func (discardAudit) RecordAudit(context.Context, *loomv1.AuditRecord) error { return nil }

// BenchmarkSecurityChain measures what authentication and authorization
// add to a call: the gateway's whole interceptor chain (audit,
// authentication, rate limit and watch cap, the permission table) around a
// handler that does nothing, on a read of a job by a project member, with
// the real Redis member and key store behind authentication. It reports
// the p99 per call (target ≤ 100 µs, issue 13), for an access token and
// an API key once their verification is cached (a token's first call
// checks its signature; a key's first call its salted SHA-256 hash, then
// cached for 30 s).
func BenchmarkSecurityChain(b *testing.B) {
	_, rdb := testkit.Redis(b)
	ctx := testkit.Context(b, time.Minute)
	st := adapters.NewAuthStore(store.New(rdb, "gateway:"))
	if err := st.SetMember(ctx, "projects/default", "ana", "user"); err != nil {
		b.Fatal(err)
	}
	iss, err := auth.NewIssuer(make([]byte, 32), "loom", nil)
	if err != nil {
		b.Fatal(err)
	}
	tok, _, err := iss.Issue(auth.Claims{Use: auth.UseAccess, Kind: "user", User: "ana", RegisteredClaims: auth.ForSubject("users/ana")}, time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	id, key, err := auth.NewAPIKey()
	if err != nil {
		b.Fatal(err)
	}
	_, secret, _ := auth.ParseAPIKey(key)
	hash, err := auth.HashSecret(secret)
	if err != nil {
		b.Fatal(err)
	}
	if err := st.PutAPIKey(ctx, &adapters.KeyRecord{ID: id, Owner: "users/ana", Hash: hash, CreateTime: time.Now()}); err != nil {
		b.Fatal(err)
	}

	an := authn.New(authn.Options{Store: st, Issuer: iss, Clock: clockwork.NewRealClock(), Log: slog.New(slog.DiscardHandler)})
	chain := []grpc.UnaryServerInterceptor{
		guard.NewAuditor(discardAudit{}, guard.AuditOptions{}).UnaryServerInterceptor(),
		an.UnaryServerInterceptor(),
		guard.NewLimiter(guard.LimitOptions{Rate: 1e9, Burst: 1e9, MaxWatches: 256}).UnaryServerInterceptor(),
		authz.UnaryServerInterceptor(),
	}
	info := &grpc.UnaryServerInfo{FullMethod: "/loom.v1.JobService/GetJob"}
	req := &loomv1.GetJobRequest{Name: "projects/default/jobs/1"}
	handler := func(ctx context.Context, _ any) (any, error) {
		if _, ok := auth.FromContext(ctx); !ok {
			b.Fatal("the handler was reached without a principal")
		}
		return nil, nil
	}
	call := func(ctx context.Context) error {
		var next grpc.UnaryHandler = handler
		for i := len(chain) - 1; i >= 0; i-- {
			in, h := chain[i], next
			next = func(ctx context.Context, r any) (any, error) { return in(ctx, r, info, h) }
		}
		_, err := next(ctx, req)
		return err
	}
	for _, bc := range []struct{ name, cred string }{{"access-token", tok}, {"api-key", key}} {
		b.Run(bc.name, func(b *testing.B) {
			cctx := metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", "Bearer "+bc.cred))
			if err := call(cctx); err != nil { // the first call fills the caches
				b.Fatal(err)
			}
			lat := make([]time.Duration, 0, 1<<16)
			b.ReportAllocs()
			for b.Loop() {
				start := time.Now()
				if err := call(cctx); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
		})
	}
}

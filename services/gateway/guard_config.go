package gateway

import (
	"context"
	"flag"
	"time"

	"google.golang.org/grpc"

	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/errs"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/app"
	"github.com/loom-ml/loom/services/gateway/internal/domain"
	"github.com/loom-ml/loom/services/gateway/internal/guard"
	"github.com/loom-ml/loom/services/gateway/internal/ports"
)

// Limits are the gateway's quotas, rate limits and audit trail bounds
// (README "Quotas, rate limits and the audit trail"). Zero fields take the
// defaults; a negative quota, rate or watch cap is no limit.
type Limits struct {
	// QuotaNodes, QuotaGPUs, QuotaClusters and QuotaPendingJobs are every
	// project's quotas (LOOM_GATEWAY_QUOTA_NODES, _GPUS, _CLUSTERS,
	// _PENDING_JOBS; defaults domain.DefaultQuota*).
	QuotaNodes, QuotaGPUs, QuotaClusters, QuotaPendingJobs int64
	// QuotaTraining is every project's training resources in flight
	// (LOOM_GATEWAY_QUOTA_TRAINING; default domain.DefaultQuotaTraining).
	QuotaTraining int64
	// ProjectQuotas overrides them per project
	// (LOOM_GATEWAY_PROJECT_QUOTAS: "p1=nodes:16,gpus:64;p2=clusters:2").
	ProjectQuotas string
	// MaxSubmitJobs is Slurm's MaxSubmitJobs of a user without an
	// association limit (LOOM_GATEWAY_MAX_SUBMIT_JOBS; default
	// domain.DefaultMaxSubmitJobs).
	MaxSubmitJobs int64
	// Rate and Burst are each principal's token bucket (LOOM_GATEWAY_RATE,
	// requests a second, default guard.DefaultRate; LOOM_GATEWAY_BURST,
	// default guard.DefaultBurst).
	Rate  float64
	Burst int
	// MaxWatches caps each principal's open WatchJob, ReadJobLogs,
	// WaitOperation and WatchChanges calls (LOOM_GATEWAY_MAX_WATCHES; default
	// guard.DefaultMaxWatches).
	MaxWatches int
	// MaxChangeWatches caps the WatchChanges streams open at once in one
	// gateway, all principals together (LOOM_GATEWAY_MAX_CHANGE_WATCHES;
	// default app.DefaultMaxChangeWatches; -1: no cap).
	MaxChangeWatches int
	// AuditRetention and AuditMaxRecords bound the audit trail kept in
	// Redis (LOOM_GATEWAY_AUDIT_RETENTION, default 90 days;
	// LOOM_GATEWAY_AUDIT_MAX_RECORDS per trail: a project's records, and apart its refusals; default 100000).
	AuditRetention  time.Duration
	AuditMaxRecords int
}

// register adds the limits' flags to fs, defaults from LOOM_* variables.
func (l *Limits) register(fs *flag.FlagSet) {
	fs.Int64Var(&l.QuotaNodes, "quota-nodes", config.EnvInt("LOOM_GATEWAY_QUOTA_NODES", domain.DefaultQuotaNodes),
		"nodes (node_count + max_dynamic_node_count over its clusters' pools) a project may hold; -1: no limit (LOOM_GATEWAY_QUOTA_NODES)")
	fs.Int64Var(&l.QuotaGPUs, "quota-gpus", config.EnvInt("LOOM_GATEWAY_QUOTA_GPUS", domain.DefaultQuotaGPUs),
		"GPUs a project's clusters may hold; -1: no limit (LOOM_GATEWAY_QUOTA_GPUS)")
	fs.Int64Var(&l.QuotaClusters, "quota-clusters", config.EnvInt("LOOM_GATEWAY_QUOTA_CLUSTERS", domain.DefaultQuotaClusters),
		"clusters a project may have; -1: no limit (LOOM_GATEWAY_QUOTA_CLUSTERS)")
	fs.Int64Var(&l.QuotaPendingJobs, "quota-pending-jobs", config.EnvInt("LOOM_GATEWAY_QUOTA_PENDING_JOBS", domain.DefaultQuotaPendingJobs),
		"PENDING jobs a project may have (an array counts its tasks); -1: no limit (LOOM_GATEWAY_QUOTA_PENDING_JOBS)")
	fs.Int64Var(&l.QuotaTraining, "quota-training", config.EnvInt("LOOM_GATEWAY_QUOTA_TRAINING", domain.DefaultQuotaTraining),
		"training resources (CustomJobs, tuning jobs, pipelines) a project may have in flight; -1: no limit (LOOM_GATEWAY_QUOTA_TRAINING)")
	fs.StringVar(&l.ProjectQuotas, "project-quotas", config.Env("LOOM_GATEWAY_PROJECT_QUOTAS", ""),
		`per-project quotas over the defaults, "p1=nodes:16,gpus:64;p2=clusters:2" (kinds: nodes, gpus, clusters, pending_jobs, training; -1: no limit) (LOOM_GATEWAY_PROJECT_QUOTAS)`)
	fs.Int64Var(&l.MaxSubmitJobs, "max-submit-jobs", config.EnvInt("LOOM_GATEWAY_MAX_SUBMIT_JOBS", domain.DefaultMaxSubmitJobs),
		"Slurm's MaxSubmitJobs: pending or running jobs a user may have in a project, unless their association sets it; -1: no limit (LOOM_GATEWAY_MAX_SUBMIT_JOBS)")
	fs.Float64Var(&l.Rate, "rate", config.EnvFloat("LOOM_GATEWAY_RATE", guard.DefaultRate),
		"requests a second each principal may make (token bucket); -1: no limit (LOOM_GATEWAY_RATE)")
	fs.IntVar(&l.Burst, "burst", int(config.EnvInt("LOOM_GATEWAY_BURST", guard.DefaultBurst)),
		"requests a principal may make at once after a quiet spell (LOOM_GATEWAY_BURST)")
	fs.IntVar(&l.MaxWatches, "max-watches", int(config.EnvInt("LOOM_GATEWAY_MAX_WATCHES", guard.DefaultMaxWatches)),
		"WatchJob, ReadJobLogs, WaitOperation and WatchChanges calls a principal may hold open at once; -1: no cap (LOOM_GATEWAY_MAX_WATCHES)")
	fs.IntVar(&l.MaxChangeWatches, "max-change-watches", int(config.EnvInt("LOOM_GATEWAY_MAX_CHANGE_WATCHES", app.DefaultMaxChangeWatches)),
		"WatchChanges streams this gateway holds open at once, all principals together; -1: no cap (LOOM_GATEWAY_MAX_CHANGE_WATCHES)")
	fs.DurationVar(&l.AuditRetention, "audit-retention", config.EnvDuration("LOOM_GATEWAY_AUDIT_RETENTION", app.DefaultAuditRetention),
		"how long audit records are kept (LOOM_GATEWAY_AUDIT_RETENTION)")
	fs.IntVar(&l.AuditMaxRecords, "audit-max-records", int(config.EnvInt("LOOM_GATEWAY_AUDIT_MAX_RECORDS", app.DefaultAuditMaxRecords)),
		"audit records kept per trail (a project's records, and apart its refusals), newest first (LOOM_GATEWAY_AUDIT_MAX_RECORDS)")
}

// options returns the app's quota and audit options.
func (l Limits) options() (app.QuotaOptions, app.AuditOptions, error) {
	projects, err := domain.ParseProjectQuotas(l.ProjectQuotas)
	if err != nil {
		return app.QuotaOptions{}, app.AuditOptions{}, err
	}
	q := app.QuotaOptions{
		Quotas: domain.Quotas{Default: domain.Quota{Nodes: l.QuotaNodes, GPUs: l.QuotaGPUs, Clusters: l.QuotaClusters,
			PendingJobs: l.QuotaPendingJobs, Training: l.QuotaTraining}, Projects: projects},
		MaxSubmitJobs: l.MaxSubmitJobs,
	}
	return q, app.AuditOptions{Retention: l.AuditRetention, MaxRecords: l.AuditMaxRecords}, nil
}

// guardRecorder lets the auditor, made before the gateway it records
// through, write once the gateway exists.
type guardRecorder struct{ g *app.Gateway }

func (r *guardRecorder) RecordAudit(ctx context.Context, rec *loomv1.AuditRecord) error {
	if r.g == nil {
		return errs.Unavailable
	}
	return r.g.RecordAudit(ctx, rec)
}

// interceptors returns the gateway's interceptor chain (as the gateway's README lists it): audit →
// authentication → rate limit and watch cap → the answer to a request
// that did not decode (decode's Unary and Stream; its ServerOptions come
// before this chain) → authorization → the checks of what any request
// holds (ports.CheckRequest). authn and authz are the authentication and
// authorization interceptors, nil where not wired.
//
// An undecodable request is refused after the rate limit, not before the
// audit: it is recorded with its caller's principal and counted against
// their rate, like every other refusal; before authorization, which would
// read its emptied request and refuse it for the wrong reason.
func interceptors(auditor *guard.Auditor, limiter *guard.Limiter, decode *ports.DecodeGuard,
	authnU, authzU grpc.UnaryServerInterceptor, authnS, authzS grpc.StreamServerInterceptor) []grpc.ServerOption {
	unary := []grpc.UnaryServerInterceptor{auditor.UnaryServerInterceptor()}
	stream := []grpc.StreamServerInterceptor{auditor.StreamServerInterceptor()}
	if authnU != nil {
		unary = append(unary, authnU)
	}
	if authnS != nil {
		stream = append(stream, authnS)
	}
	unary = append(unary, limiter.UnaryServerInterceptor())
	stream = append(stream, limiter.StreamServerInterceptor())
	unary = append(unary, decode.Unary)
	stream = append(stream, decode.Stream)
	if authzU != nil {
		unary = append(unary, authzU)
	}
	if authzS != nil {
		stream = append(stream, authzS)
	}
	// What any request may hold (ports.CheckRequest) is checked last, of
	// callers allowed to make the call.
	unary = append(unary, ports.CheckUnary)
	stream = append(stream, ports.CheckStream)
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(unary...), grpc.ChainStreamInterceptor(stream...)}
}

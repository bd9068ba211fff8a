// Package gateway is Loom's gateway service. It is the only public entry: the gRPC API loom.v1 and the same resources over REST/JSON. Commands go onto Kafka through its outbox; reads go to the owning services.
// See README.md beside this file for what it owns, the topics it reads and
// writes, and how it recovers.
package gateway

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/dashboards"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/service"
	"github.com/loom-ml/loom/libs/slurmmap"
	"github.com/loom-ml/loom/libs/slurmspec"
	"github.com/loom-ml/loom/libs/topics"
	"github.com/loom-ml/loom/services/gateway/internal/adapters"
	"github.com/loom-ml/loom/services/gateway/internal/app"
	"github.com/loom-ml/loom/services/gateway/internal/authn"
	"github.com/loom-ml/loom/services/gateway/internal/authz"
	"github.com/loom-ml/loom/services/gateway/internal/console"
	"github.com/loom-ml/loom/services/gateway/internal/domain"
	"github.com/loom-ml/loom/services/gateway/internal/guard"
	"github.com/loom-ml/loom/services/gateway/internal/ports"
)

// Config is the gateway's configuration.
type Config struct {
	config.Common
	// RESTAddr serves the REST/JSON API (LOOM_GATEWAY_REST_ADDR; default 127.0.0.1:7080).
	RESTAddr string
	// ProvisionerAddr, SchedulerAddr and RegistryAddr are the owning services'
	// internal gRPC addresses, where reads go (LOOM_PROVISIONER_ADDR,
	// LOOM_SCHEDULER_ADDR, LOOM_REGISTRY_ADDR; defaults 127.0.0.1:7071,
	// 127.0.0.1:7072 and 127.0.0.1:7074).
	ProvisionerAddr, SchedulerAddr, RegistryAddr string
	// HealthAddr is the health service's internal gRPC address, where
	// HealthService's reads go (LOOM_GATEWAY_HEALTH_ADDR; default
	// 127.0.0.1:7073). GoodputService is the scheduler's (SchedulerAddr).
	HealthAddr string
	// TrainingAddr is the training service's internal gRPC address, where
	// TrainingService's reads go (LOOM_GATEWAY_TRAINING_ADDR; default
	// 127.0.0.1:7075).
	TrainingAddr string
	// BridgeAddr is the bridge's internal gRPC address, where
	// IngressService's reads go (LOOM_GATEWAY_BRIDGE_ADDR; default
	// 127.0.0.1:7076).
	BridgeAddr string
	// PrivateData is Slurm's PrivateData: a comma-separated list of what
	// callers who do not administer the project see of their own only
	// (LOOM_GATEWAY_PRIVATE_DATA; "jobs": GetJob, ListJobs (squeue,
	// sacct), WatchJob, steps and logs; default "": members see every job
	// of their project).
	PrivateData string
	// JobHistory is how long ended jobs are kept for sacct
	// (LOOM_GATEWAY_JOB_HISTORY; default 720h, 30 days).
	JobHistory time.Duration
	// REST bounds REST requests: the largest body
	// (LOOM_GATEWAY_REST_MAX_BODY, bytes; default 4 MiB) and the read
	// timeouts (LOOM_GATEWAY_REST_READ_HEADER_TIMEOUT, default 10s;
	// LOOM_GATEWAY_REST_READ_TIMEOUT, default 30s;
	// LOOM_GATEWAY_REST_IDLE_TIMEOUT, default 2m). Zero fields get the defaults.
	REST ports.RESTLimits
	// GRPC bounds gRPC calls: the largest request message
	// (LOOM_GATEWAY_GRPC_MAX_RECV, bytes; default 4 MiB), the calls one
	// connection holds open (LOOM_GATEWAY_GRPC_MAX_STREAMS; default 0, no
	// cap) and the shortest keepalive ping interval
	// (LOOM_GATEWAY_GRPC_KEEPALIVE_MIN_TIME; default 5m). Zero fields get
	// the defaults.
	GRPC ports.GRPCLimits
	// MaxArraySize is Slurm's MaxArraySize: an --array submission's task ids
	// must be below it (LOOM_MAX_ARRAY_SIZE, shared with the scheduler, which
	// checks it again; default slurmspec.DefaultMaxArraySize, 1001; at most
	// slurmspec.MaxArraySizeCeiling).
	MaxArraySize int
	// SchedulerBackend is the scheduler's backend, read from the
	// scheduler's own LOOM_SCHEDULER_BACKEND so that one setting configures
	// both (-scheduler-backend; "builtin", the default, or "slurm"). On
	// "slurm" the gateway refuses, FailedPrecondition before anything is
	// recorded or published, the commands the real-Slurm backend does not
	// map (libs/slurmmap), which the scheduler would otherwise refuse only
	// once it consumed them (docs/slurm-backend.md, "Where refusals show").
	SchedulerBackend string
	// OpenQOS are the QOS every member of a project may ask for (sbatch
	// --qos) without an association granting them, comma-separated
	// (LOOM_GATEWAY_OPEN_QOS; default "low,normal", domain.DefaultOpenQOS;
	// "none": every QOS but the scheduler's default needs a grant). Keep
	// out of it any QOS of the scheduler's -qos table that may preempt
	// others or outranks the default: asking for it is then a privilege.
	OpenQOS string
	// Auth configures authentication (AuthConfig's flags).
	Auth AuthConfig
	// Limits are the quotas, rate limits and audit trail bounds
	// (guard_config.go).
	Limits Limits
	// MetricsTargets are the services' /metrics the gateway scrapes for
	// the console's dashboards (GET /v1/dashboards/{service}), as
	// "service=url,..." (LOOM_GATEWAY_METRICS_TARGETS; default "": none,
	// the dashboards then have no data). `loom up` sets it to its services.
	MetricsTargets string
	// ChangeRefresh is how often a WatchChanges stream lists its
	// collections again, a safety net: the change feeds bring each change
	// within about a second (LOOM_GATEWAY_CHANGE_REFRESH; default
	// DefaultChangeRefresh, 30s; between 1s and 1h).
	ChangeRefresh time.Duration
	// MetricsInterval is how often they are scraped
	// (LOOM_GATEWAY_METRICS_INTERVAL; default 5s; 120 scrapes are kept).
	MetricsInterval time.Duration
}

// AuthConfig configures the gateway's authentication and AuthService.
type AuthConfig struct {
	// Mode is "on" (the default) or "off" (LOOM_AUTH): off is for
	// development only, every call is then the cluster administrator
	// "users/dev", and the gateway says so at WARN when it starts.
	Mode string
	// TokenKeyFile holds the HS256 secret of access and refresh tokens
	// (LOOM_GATEWAY_TOKEN_KEY_FILE; created, 32 random bytes, when missing).
	// Empty: a secret made at start and lost at exit (tokens then die
	// with the gateway and other instances refuse them), with a warning.
	TokenKeyFile string
	// BootstrapAdmin and BootstrapKeyFile (LOOM_GATEWAY_BOOTSTRAP_ADMIN,
	// LOOM_GATEWAY_BOOTSTRAP_KEY_FILE): when the file does not exist at
	// start, BootstrapAdmin becomes a cluster administrator and gets an API
	// key written there, mode 0600.
	BootstrapAdmin, BootstrapKeyFile string
	// LoginKeyFile (LOOM_GATEWAY_LOGIN_KEY_FILE): when it does not exist at
	// start, an API key of the login service ("services/login", which may
	// get tokens for any user) is written there, mode 0600.
	LoginKeyFile string
	// OIDCIssuer, OIDCClientID and OIDCUserClaim (LOOM_GATEWAY_OIDC_ISSUER,
	// LOOM_GATEWAY_OIDC_CLIENT_ID, LOOM_GATEWAY_OIDC_USER_CLAIM; default
	// claim "preferred_username"): the identity provider whose ID tokens
	// CreateToken exchanges for Loom tokens. Empty issuer: none.
	OIDCIssuer, OIDCClientID, OIDCUserClaim string
}

// registerFlags adds the authentication flags to fs.
func (c *AuthConfig) registerFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Mode, "auth", config.Env("LOOM_AUTH", "on"),
		"authentication: on, or off for development only (every caller is a cluster administrator) (LOOM_AUTH)")
	fs.StringVar(&c.TokenKeyFile, "token-key-file", config.Env("LOOM_GATEWAY_TOKEN_KEY_FILE", ""),
		"file holding the access and refresh tokens' signing secret, created when missing (LOOM_GATEWAY_TOKEN_KEY_FILE)")
	fs.StringVar(&c.BootstrapAdmin, "bootstrap-admin", config.Env("LOOM_GATEWAY_BOOTSTRAP_ADMIN", ""),
		"user made cluster administrator on first start, with -bootstrap-key-file (LOOM_GATEWAY_BOOTSTRAP_ADMIN)")
	fs.StringVar(&c.BootstrapKeyFile, "bootstrap-key-file", config.Env("LOOM_GATEWAY_BOOTSTRAP_KEY_FILE", ""),
		"where the bootstrap admin's API key is written when the file does not exist (LOOM_GATEWAY_BOOTSTRAP_KEY_FILE)")
	fs.StringVar(&c.LoginKeyFile, "login-key-file", config.Env("LOOM_GATEWAY_LOGIN_KEY_FILE", ""),
		"where the login service's API key is written when the file does not exist (LOOM_GATEWAY_LOGIN_KEY_FILE)")
	fs.StringVar(&c.OIDCIssuer, "oidc-issuer", config.Env("LOOM_GATEWAY_OIDC_ISSUER", ""),
		"OIDC issuer URL whose ID tokens CreateToken accepts (LOOM_GATEWAY_OIDC_ISSUER)")
	fs.StringVar(&c.OIDCClientID, "oidc-client-id", config.Env("LOOM_GATEWAY_OIDC_CLIENT_ID", ""),
		"OIDC client id the ID tokens must be issued for (LOOM_GATEWAY_OIDC_CLIENT_ID)")
	fs.StringVar(&c.OIDCUserClaim, "oidc-user-claim", config.Env("LOOM_GATEWAY_OIDC_USER_CLAIM", app.DefaultOIDCUserClaim),
		"ID token claim holding the user's OS account name (LOOM_GATEWAY_OIDC_USER_CLAIM)")
}

// RegisterFlags adds the gateway's flags to fs, defaults from LOOM_* variables.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Common.Register(fs, "GATEWAY", "127.0.0.1:7070", "127.0.0.1:9170")
	fs.StringVar(&c.RESTAddr, "rest-addr", config.Env("LOOM_GATEWAY_REST_ADDR", "127.0.0.1:7080"),
		"REST/JSON listen address (LOOM_GATEWAY_REST_ADDR)")
	fs.StringVar(&c.ProvisionerAddr, "provisioner-addr", config.Env("LOOM_PROVISIONER_ADDR", "127.0.0.1:7071"),
		"provisioner's internal gRPC address (LOOM_PROVISIONER_ADDR)")
	fs.StringVar(&c.SchedulerAddr, "scheduler-addr", config.Env("LOOM_SCHEDULER_ADDR", "127.0.0.1:7072"),
		"scheduler's internal gRPC address (LOOM_SCHEDULER_ADDR)")
	fs.StringVar(&c.RegistryAddr, "registry-addr", config.Env("LOOM_REGISTRY_ADDR", "127.0.0.1:7074"),
		"registry's internal gRPC address (LOOM_REGISTRY_ADDR)")
	fs.StringVar(&c.HealthAddr, "health-addr", config.Env("LOOM_GATEWAY_HEALTH_ADDR", "127.0.0.1:7073"),
		"health service's internal gRPC address, for HealthService's reads (LOOM_GATEWAY_HEALTH_ADDR)")
	fs.StringVar(&c.TrainingAddr, "training-addr", config.Env("LOOM_GATEWAY_TRAINING_ADDR", "127.0.0.1:7075"),
		"training service's internal gRPC address, for TrainingService's reads (LOOM_GATEWAY_TRAINING_ADDR)")
	fs.StringVar(&c.BridgeAddr, "bridge-addr", config.Env("LOOM_GATEWAY_BRIDGE_ADDR", "127.0.0.1:7076"),
		"bridge's internal gRPC address, for IngressService's reads (LOOM_GATEWAY_BRIDGE_ADDR)")
	fs.StringVar(&c.PrivateData, "private-data", config.Env("LOOM_GATEWAY_PRIVATE_DATA", ""),
		"what non-admin callers see of their own only, as Slurm's PrivateData: \"jobs\" (LOOM_GATEWAY_PRIVATE_DATA)")
	fs.DurationVar(&c.JobHistory, "job-history", config.EnvDuration("LOOM_GATEWAY_JOB_HISTORY", app.DefaultJobHistory),
		"how long ended jobs are kept for sacct after their end (LOOM_GATEWAY_JOB_HISTORY)")
	fs.Int64Var(&c.REST.MaxBodyBytes, "rest-max-body", config.EnvInt("LOOM_GATEWAY_REST_MAX_BODY", ports.DefaultMaxBodyBytes),
		"largest REST request body in bytes; larger is answered 413 (LOOM_GATEWAY_REST_MAX_BODY)")
	fs.DurationVar(&c.REST.ReadHeaderTimeout, "rest-read-header-timeout",
		config.EnvDuration("LOOM_GATEWAY_REST_READ_HEADER_TIMEOUT", ports.DefaultReadHeaderTimeout),
		"how long a REST client may take to send its request headers (LOOM_GATEWAY_REST_READ_HEADER_TIMEOUT)")
	fs.DurationVar(&c.REST.ReadTimeout, "rest-read-timeout", config.EnvDuration("LOOM_GATEWAY_REST_READ_TIMEOUT", ports.DefaultReadTimeout),
		"how long a REST client may take to send a whole request, body included (LOOM_GATEWAY_REST_READ_TIMEOUT)")
	fs.DurationVar(&c.REST.IdleTimeout, "rest-idle-timeout", config.EnvDuration("LOOM_GATEWAY_REST_IDLE_TIMEOUT", ports.DefaultIdleTimeout),
		"how long a kept-alive REST connection may wait for its next request (LOOM_GATEWAY_REST_IDLE_TIMEOUT)")
	fs.IntVar(&c.GRPC.MaxRecvBytes, "grpc-max-recv", int(config.EnvInt("LOOM_GATEWAY_GRPC_MAX_RECV", ports.DefaultGRPCMaxRecvBytes)),
		"largest gRPC request message in bytes; larger is answered ResourceExhausted (LOOM_GATEWAY_GRPC_MAX_RECV)")
	fs.IntVar(&c.GRPC.MaxStreams, "grpc-max-streams", int(config.EnvInt("LOOM_GATEWAY_GRPC_MAX_STREAMS", 0)),
		"gRPC calls one connection may hold open at once, the REST port's (one loopback connection) included; 0: no cap (LOOM_GATEWAY_GRPC_MAX_STREAMS)")
	fs.DurationVar(&c.GRPC.KeepaliveMinTime, "grpc-keepalive-min-time",
		config.EnvDuration("LOOM_GATEWAY_GRPC_KEEPALIVE_MIN_TIME", ports.DefaultGRPCKeepaliveMinTime),
		"shortest keepalive ping interval a gRPC client may use; one pinging more often is disconnected (LOOM_GATEWAY_GRPC_KEEPALIVE_MIN_TIME)")
	fs.IntVar(&c.MaxArraySize, "max-array-size", int(config.EnvInt("LOOM_MAX_ARRAY_SIZE", slurmspec.DefaultMaxArraySize)),
		"Slurm's MaxArraySize: array task ids must be below it (LOOM_MAX_ARRAY_SIZE, shared with the scheduler; default 1001)")
	fs.StringVar(&c.SchedulerBackend, "scheduler-backend", config.Env("LOOM_SCHEDULER_BACKEND", "builtin"),
		"the scheduler's backend, builtin or slurm: on slurm, what that backend does not map is refused here, at once (LOOM_SCHEDULER_BACKEND, the scheduler's own -backend)")
	fs.StringVar(&c.OpenQOS, "open-qos", config.Env("LOOM_GATEWAY_OPEN_QOS", domain.DefaultOpenQOS),
		"QOS every project member may ask for without an association granting them, comma-separated; \"none\": only the scheduler's default (LOOM_GATEWAY_OPEN_QOS)")
	fs.StringVar(&c.MetricsTargets, "metrics-targets", config.Env("LOOM_GATEWAY_METRICS_TARGETS", ""),
		"services' /metrics scraped for the console's dashboards, as service=url,... (LOOM_GATEWAY_METRICS_TARGETS; default none)")
	fs.DurationVar(&c.MetricsInterval, "metrics-interval", config.EnvDuration("LOOM_GATEWAY_METRICS_INTERVAL", 5*time.Second),
		"how often -metrics-targets are scraped (LOOM_GATEWAY_METRICS_INTERVAL)")
	fs.DurationVar(&c.ChangeRefresh, "change-refresh", config.EnvDuration("LOOM_GATEWAY_CHANGE_REFRESH", DefaultChangeRefresh),
		"how often a WatchChanges stream lists its collections again, a safety net beside the change feeds (LOOM_GATEWAY_CHANGE_REFRESH)")
	c.Auth.registerFlags(fs)
	c.Limits.register(fs)
}

// withDefaults fills the fields a caller that skipped RegisterFlags left empty.
func (c Config) withDefaults() Config {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.RESTAddr, "127.0.0.1:7080")
	def(&c.ProvisionerAddr, "127.0.0.1:7071")
	def(&c.SchedulerAddr, "127.0.0.1:7072")
	def(&c.RegistryAddr, "127.0.0.1:7074")
	def(&c.HealthAddr, "127.0.0.1:7073")
	def(&c.TrainingAddr, "127.0.0.1:7075")
	def(&c.BridgeAddr, "127.0.0.1:7076")
	if c.JobHistory <= 0 {
		c.JobHistory = app.DefaultJobHistory
	}
	defDur := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if c.REST.MaxBodyBytes <= 0 {
		c.REST.MaxBodyBytes = ports.DefaultMaxBodyBytes
	}
	defDur(&c.REST.ReadHeaderTimeout, ports.DefaultReadHeaderTimeout)
	defDur(&c.REST.ReadTimeout, ports.DefaultReadTimeout)
	defDur(&c.REST.IdleTimeout, ports.DefaultIdleTimeout)
	if c.MaxArraySize == 0 {
		c.MaxArraySize = slurmspec.DefaultMaxArraySize
	}
	def(&c.OpenQOS, domain.DefaultOpenQOS)
	def(&c.SchedulerBackend, "builtin")
	def(&c.Auth.Mode, "on")
	def(&c.Auth.OIDCUserClaim, app.DefaultOIDCUserClaim)
	return c
}

// DefaultChangeRefresh is -change-refresh's default: how often a
// WatchChanges stream lists its collections again beside the change feeds.
const DefaultChangeRefresh = app.DefaultChangeRefresh

// ConsumerGroup is the group the gateway's instances share on
// loom.cluster.events.v1 and loom.model.events.v1 to finish operations.
const ConsumerGroup = "loom-gateway"

// RunArgs runs the gateway from a command line (args, without the program
// name): RegisterFlags' flags, each defaulting to its LOOM_* variable,
// then Run until ctx ends. A command line that does not parse is a
// *config.UsageError. The gateway binary and loom's in-process stack both
// start the gateway here, so that its command line is read in one place.
func RunArgs(ctx context.Context, args []string) error {
	cfg, err := config.ParseArgs("gateway", args, (*Config).RegisterFlags)
	if err != nil {
		return err
	}
	return Run(ctx, cfg)
}

// Run runs the gateway until ctx ends, then shuts down gracefully.
func Run(ctx context.Context, cfg Config) error {
	return run(ctx, cfg, hooks{})
}

// hooks are what tests give run: started is told the bound gRPC and REST
// addresses once both serve (tests use ":0" ports); served is given the
// gRPC server once every service is registered on it.
type hooks struct {
	started func(grpcAddr, restAddr string)
	served  func(*grpc.Server)
}

// privateJobs reads the PrivateData setting: whether "jobs" is in it.
func privateJobs(list string) (bool, error) {
	jobs := false
	for _, w := range strings.Split(list, ",") {
		switch w = strings.TrimSpace(w); w {
		case "":
		case "jobs":
			jobs = true
		default:
			return false, errs.Invalid("private-data", "%q is not something the gateway keeps private (want: jobs)", w)
		}
	}
	return jobs, nil
}

// run is Run with hooks.
func run(ctx context.Context, cfg Config, hk hooks) error {
	started := hk.started
	cfg = cfg.withDefaults()
	if err := slurmspec.CheckMaxArraySize(cfg.MaxArraySize); err != nil {
		return errs.Invalid("max-array-size", "%v", err)
	}
	if b := cfg.SchedulerBackend; b != "builtin" && b != slurmmap.Backend {
		return errs.Invalid("scheduler-backend", "must be builtin or slurm (the scheduler's -backend, LOOM_SCHEDULER_BACKEND), got %q", b)
	}
	// The services' secret (config.Common's -service-key-file) also signs
	// node certificates and keys the bootstrap tokens.
	secrets, err := loadAuthSecrets(cfg.Auth, cfg.ServiceKeyFile)
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	private, err := privateJobs(cfg.PrivateData)
	if err != nil {
		return err
	}
	openQOS, err := domain.ParseQOSList("open-qos", cfg.OpenQOS)
	if err != nil {
		return err
	}
	targets, err := dashboards.ParseTargets("metrics-targets", cfg.MetricsTargets)
	if err != nil {
		return err
	}
	if iv := cfg.MetricsInterval; iv != 0 && (iv < 100*time.Millisecond || iv > time.Hour) {
		return errs.Invalid("metrics-interval", "must be between 100ms and 1h, got %s", iv)
	}
	// 0 is each limit's default (Config's zero fields); a negative one is
	// a mistake to name, not a default to fall back to.
	if n := cfg.GRPC.MaxStreams; n < 0 || n > math.MaxUint32 {
		return errs.Invalid("grpc-max-streams", "must be from 0 (no cap) to %d, got %d", uint32(math.MaxUint32), n)
	}
	if n := cfg.GRPC.MaxRecvBytes; n < 0 {
		return errs.Invalid("grpc-max-recv", "must be a size in bytes, 0 for the default (%d), got %d", ports.DefaultGRPCMaxRecvBytes, n)
	}
	if d := cfg.GRPC.KeepaliveMinTime; d < 0 {
		return errs.Invalid("grpc-keepalive-min-time", "must be a duration, 0 for the default (%s), got %s", ports.DefaultGRPCKeepaliveMinTime, d)
	}
	if r := cfg.ChangeRefresh; r != 0 && (r < time.Second || r > time.Hour) {
		return errs.Invalid("change-refresh", "must be between 1s and 1h, got %s", r)
	}
	var scraper *dashboards.Scraper
	if len(targets) > 0 {
		scraper = dashboards.NewScraper(targets, dashboards.ScraperOptions{Interval: cfg.MetricsInterval})
	}
	quota, auditOpt, err := cfg.Limits.options()
	if err != nil {
		return errs.Invalid("project-quotas", "%v", err)
	}
	rec := &guardRecorder{}
	limiter := guard.NewLimiter(guard.LimitOptions{Rate: cfg.Limits.Rate, Burst: cfg.Limits.Burst, MaxWatches: cfg.Limits.MaxWatches})
	auditor := guard.NewAuditor(rec, guard.AuditOptions{})
	// The authenticator needs the store, which exists only once service.New
	// has returned; an is set below, before any call is served.
	var an *authn.Authenticator
	// The gRPC port's limits, and requests that do not decode answered
	// InvalidArgument (ports.DecodeGuard) once audited, authenticated and
	// counted against the caller's rate, before anything reads one.
	decode := ports.NewDecodeGuard()
	grpcOpts := append(ports.GRPCServerOptions(cfg.GRPC), decode.ServerOptions()...)
	base, err := service.New(ctx, "gateway", cfg.Common, append(grpcOpts, interceptors(auditor, limiter, decode,
		func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			return an.Unary(ctx, req, info, h)
		}, authz.UnaryServerInterceptor(),
		func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			return an.Stream(srv, ss, info, h)
		}, authz.StreamServerInterceptor())...)...)
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	// The owners' APIs are internal: the gateway calls them with a service
	// token.
	var ownerOpts []grpc.DialOption
	if base.ServiceSecret != nil {
		iss, err := auth.NewServiceTokenIssuer(base.ServiceSecret, nil)
		if err != nil {
			_ = base.Close()
			return fmt.Errorf("gateway: %w", err)
		}
		ownerOpts = append(ownerOpts, grpc.WithPerRPCCredentials(auth.ServiceTokenSource(iss, "gateway")))
	}
	owners, err := adapters.DialOwners(cfg.ProvisionerAddr, cfg.SchedulerAddr, cfg.RegistryAddr, ownerOpts...)
	if err != nil {
		_ = base.Close()
		return fmt.Errorf("gateway: %w", err)
	}
	defer owners.Close()
	if err := owners.DialHealth(cfg.HealthAddr, ownerOpts...); err != nil {
		_ = base.Close()
		return fmt.Errorf("gateway: %w", err)
	}
	if err := owners.DialTraining(cfg.TrainingAddr, ownerOpts...); err != nil {
		_ = base.Close()
		return fmt.Errorf("gateway: %w", err)
	}
	if err := owners.DialBridge(cfg.BridgeAddr, ownerOpts...); err != nil {
		_ = base.Close()
		return fmt.Errorf("gateway: %w", err)
	}
	var gw *app.Gateway
	// Watchers get job changes from a groupless tail of the job events that
	// runs only while someone watches through this instance, and decodes
	// only the changes of the jobs watched.
	feed := func(ctx context.Context, ready func(), handle func(context.Context, envelope.Event)) error {
		return bus.Tail(ctx, bus.TailConfig{Brokers: cfg.Brokers, Topic: topics.JobEvents, Logger: base.Log, Ready: ready,
			Verifier: base.Verifier, Security: base.Kafka, Filter: func(r bus.Record) bool { return gw.Watched(r.Type, r.Subject) }}, handle)
	}
	// WatchChanges' other collections get their changes from a groupless
	// tail of each of app.ChangeTopics, run likewise only while someone
	// watches one of them, decoding only the watched projects' records; a
	// topic that cannot be read backs off alone (tailAll).
	changeFeed := func(ctx context.Context, ready func(), handle func(context.Context, envelope.Event)) error {
		return tailAll(ctx, base.Log, app.ChangeTopics, ready, func(ctx context.Context, topic string, ready func()) error {
			return bus.Tail(ctx, bus.TailConfig{Brokers: cfg.Brokers, Topic: topic, Logger: base.Log, Ready: ready,
				Verifier: base.Verifier, Security: base.Kafka, Filter: func(r bus.Record) bool { return gw.ChangeWatched(r.Type, r.Subject) }}, handle)
		})
	}
	gw = app.New(adapters.NewRepo(base.Store), owners, app.Options{Clock: base.Clock, Log: base.Log, PrivateJobs: private,
		JobHistory: cfg.JobHistory, Feed: feed, ChangeFeed: changeFeed, ChangeRefresh: cfg.ChangeRefresh,
		MaxArraySize: cfg.MaxArraySize, OpenQOS: openQOS, Quota: quota, Audit: auditOpt,
		MaxChangeWatches: cfg.Limits.MaxChangeWatches, SlurmBackend: cfg.SchedulerBackend == slurmmap.Backend})
	rec.g = gw
	// A command the broker refuses for good fails its operation or job
	// instead of blocking the outbox.
	base.Store.OnSetAside(gw.HandleSetAside)
	// Long calls end with the service, so the graceful gRPC stop is not held up.
	stopCalls := context.AfterFunc(ctx, gw.Stop)
	defer stopCalls()
	ports.Register(base.GRPC, gw)
	ports.RegisterTraining(base.GRPC, gw)
	ports.RegisterMetrics(base.GRPC, gw)
	authSvc, authenticator, err := newAuth(ctx, cfg.Auth, secrets, base, owners)
	if err != nil {
		_ = base.Close()
		return fmt.Errorf("gateway: %w", err)
	}
	an = authenticator
	ports.RegisterAuth(base.GRPC, authSvc)
	if hk.served != nil {
		hk.served(base.GRPC)
	}

	consumers := []service.Consume{
		{Topics: []string{topics.ClusterEvents, topics.ModelEvents}, Handler: ports.OperationEvents(gw), Group: ConsumerGroup},
	}
	consumers = append(consumers, service.Consume{Topics: []string{topics.JobEvents}, Handler: ports.JobHistory(gw), Group: app.HistoryGroup})
	consumers = append(consumers, service.Consume{Topics: []string{topics.Audit}, Handler: ports.AuditEvents(gw), Group: app.AuditGroup})
	dash := ports.Dashboards(scraper, func(ctx context.Context) (context.Context, error) { return an.Context(ctx) })
	rest := func(ctx context.Context) error {
		return serveREST(ctx, base, cfg.RESTAddr, cfg.REST, dash, cfg.Auth.Mode == "off", started)
	}
	// The job indexes lists read, built once from a store written before
	// they were kept.
	if err := gw.EnsureJobIndexes(ctx); err != nil {
		_ = base.Close()
		return fmt.Errorf("gateway: %w", err)
	}
	// The history sweep runs beside the requests, in small batches.
	sweep := func(ctx context.Context) error { return gw.RunHistorySweep(ctx, sweepInterval(cfg.JobHistory)) }
	scrape := func(ctx context.Context) error { return scraper.Run(ctx) }
	return base.Run(ctx, consumers, rest, sweep, scrape)
}

// serveREST serves the REST/JSON API on addr, under limits, until ctx ends.
// dash serves the dashboards (ports.DashboardsPath) beside it. With
// authentication off (authOff) it answers only its own site
// (ports.OnlyFromThisSite).
func serveREST(ctx context.Context, base *service.Base, addr string, limits ports.RESTLimits, dash http.Handler, authOff bool, started func(grpcAddr, restAddr string)) error {
	grpcAddr, err := base.GRPCAddr(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("rest: %w", err)
	}
	mux, closeConn, err := ports.RESTMux(ctx, grpcAddr)
	if err != nil {
		return err
	}
	defer closeConn()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("rest: listen on %s: %w", addr, err)
	}
	// The web console at /, dashboards and the API under /v1; the API's
	// answers are never cached nor rendered (ports.APIHeaders).
	var h http.Handler = console.Mount(ports.APIHeaders(ports.MountDashboards(mux, dash)))
	if authOff {
		h = ports.OnlyFromThisSite(h)
	}
	srv := ports.RESTServer(h, limits)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	base.Log.Info("serving REST", "addr", ln.Addr().String())
	if started != nil {
		started(grpcAddr, ln.Addr().String())
	}
	select {
	case err := <-served:
		return fmt.Errorf("rest: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		// Streams still open after the grace period are cut.
		_ = srv.Close()
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("rest: %w", err)
	}
	return nil
}

// Backoff of one topic's tail in tailAll: it starts again after
// tailRetryMin, doubling up to tailRetryMax while it keeps failing before it
// was ever ready again.
const (
	tailRetryMin = 100 * time.Millisecond
	tailRetryMax = 5 * time.Second
)

// tailAll runs tail for each topic at once until ctx ends, and calls ready
// once every tail has been ready. A tail that fails (its topic cannot be
// read: missing, unauthorized, a broker down for it) is started again on
// its own, with backoff (tailRetryMin doubling to tailRetryMax, from
// tailRetryMin again once it was ready), while the others go on: one
// unreadable topic holds back only its own collections, which the watches'
// refresh then covers. It returns when ctx ends.
func tailAll(ctx context.Context, log *slog.Logger, topics []string, ready func(), tail func(ctx context.Context, topic string, ready func()) error) error {
	var left atomic.Int32
	left.Store(int32(len(topics)))
	var wg sync.WaitGroup
	for _, topic := range topics {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var once sync.Once
			delay := tailRetryMin
			for {
				var wasReady atomic.Bool
				err := tail(ctx, topic, func() {
					wasReady.Store(true)
					once.Do(func() {
						if left.Add(-1) == 0 {
							ready()
						}
					})
				})
				if ctx.Err() != nil {
					return
				}
				if wasReady.Load() {
					delay = tailRetryMin
				}
				log.Warn("change feed: a topic's tail stopped; restarting it alone", "topic", topic, "err", err, "in", delay)
				select {
				case <-ctx.Done():
					return
				case <-time.After(delay):
				}
				delay = min(2*delay, tailRetryMax)
			}
		}()
	}
	wg.Wait()
	return ctx.Err()
}

// sweepInterval is how often the job history is swept: a hundredth of its
// window, between a minute and an hour.
func sweepInterval(window time.Duration) time.Duration {
	return min(max(window/100, time.Minute), time.Hour)
}

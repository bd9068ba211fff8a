// Package gateway is Loom's gateway service. It is the only public entry: the gRPC API loom.v1 and the same resources over REST/JSON. Commands go onto Kafka through its outbox; reads go to the owning services.
// See README.md beside this file for what it owns, the topics it reads and
// writes, and how it recovers.
package gateway

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"time"

	"google.golang.org/grpc"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/service"
	"github.com/loom-ml/loom/libs/slurmspec"
	"github.com/loom-ml/loom/libs/topics"
	"github.com/loom-ml/loom/services/gateway/internal/adapters"
	"github.com/loom-ml/loom/services/gateway/internal/app"
	"github.com/loom-ml/loom/services/gateway/internal/domain"
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
	// SlurmAdmins are the users who may act on every job and whose holds
	// are admin holds (LOOM_SLURM_ADMINS, comma-separated; default
	// "root,slurm").
	SlurmAdmins string
	// JobHistory is how long ended jobs are kept for sacct
	// (LOOM_GATEWAY_JOB_HISTORY; default 720h, 30 days).
	JobHistory time.Duration
	// REST bounds REST requests: the largest body
	// (LOOM_GATEWAY_REST_MAX_BODY, bytes; default 4 MiB) and the read
	// timeouts (LOOM_GATEWAY_REST_READ_HEADER_TIMEOUT, default 10s;
	// LOOM_GATEWAY_REST_READ_TIMEOUT, default 30s;
	// LOOM_GATEWAY_REST_IDLE_TIMEOUT, default 2m). Zero fields get the defaults.
	REST ports.RESTLimits
	// MaxArraySize is Slurm's MaxArraySize: an --array submission's task ids
	// must be below it (LOOM_MAX_ARRAY_SIZE, shared with the scheduler, which
	// checks it again; default slurmspec.DefaultMaxArraySize, 1001; at most
	// slurmspec.MaxArraySizeCeiling).
	MaxArraySize int
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
	fs.StringVar(&c.SlurmAdmins, "slurm-admins", config.Env("LOOM_SLURM_ADMINS", domain.DefaultAdmins),
		"users who may act on every job; their holds are admin holds (LOOM_SLURM_ADMINS, comma-separated)")
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
	fs.IntVar(&c.MaxArraySize, "max-array-size", int(config.EnvInt("LOOM_MAX_ARRAY_SIZE", slurmspec.DefaultMaxArraySize)),
		"Slurm's MaxArraySize: array task ids must be below it (LOOM_MAX_ARRAY_SIZE, shared with the scheduler; default 1001)")
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
	def(&c.SlurmAdmins, domain.DefaultAdmins)
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
	return c
}

// ConsumerGroup is the group the gateway's instances share on
// loom.cluster.events.v1 to finish operations.
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
	return run(ctx, cfg, nil)
}

// run is Run with a hook told the bound gRPC and REST addresses once both
// serve (tests use ":0" ports).
func run(ctx context.Context, cfg Config, started func(grpcAddr, restAddr string)) error {
	cfg = cfg.withDefaults()
	if err := slurmspec.CheckMaxArraySize(cfg.MaxArraySize); err != nil {
		return errs.Invalid("max-array-size", "%v", err)
	}
	base, err := service.New(ctx, "gateway", cfg.Common)
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
	var gw *app.Gateway
	// Watchers get job changes from a groupless tail of the job events that
	// runs only while someone watches through this instance, and decodes
	// only the changes of the jobs watched.
	feed := func(ctx context.Context, ready func(), handle func(context.Context, envelope.Event)) error {
		return bus.Tail(ctx, bus.TailConfig{Brokers: cfg.Brokers, Topic: topics.JobEvents, Logger: base.Log, Ready: ready,
			Verifier: base.Verifier, Security: base.Kafka, Filter: func(r bus.Record) bool { return gw.Watched(r.Type, r.Subject) }}, handle)
	}
	gw = app.New(adapters.NewRepo(base.Store), owners, app.Options{Clock: base.Clock, Log: base.Log, Admins: domain.ParseAdmins(cfg.SlurmAdmins),
		JobHistory: cfg.JobHistory, Feed: feed, MaxArraySize: cfg.MaxArraySize})
	// A command the broker refuses for good fails its operation or job
	// instead of blocking the outbox.
	base.Store.OnSetAside(gw.HandleSetAside)
	// Long calls end with the service, so the graceful gRPC stop is not held up.
	stopCalls := context.AfterFunc(ctx, gw.Stop)
	defer stopCalls()
	ports.Register(base.GRPC, gw)

	consumers := []service.Consume{
		{Topics: []string{topics.ClusterEvents}, Handler: ports.ClusterEvents(gw), Group: ConsumerGroup},
	}
	consumers = append(consumers, service.Consume{Topics: []string{topics.JobEvents}, Handler: ports.JobHistory(gw), Group: app.HistoryGroup})
	rest := func(ctx context.Context) error { return serveREST(ctx, base, cfg.RESTAddr, cfg.REST, started) }
	// The history sweep runs beside the requests, in small batches.
	sweep := func(ctx context.Context) error { return gw.RunHistorySweep(ctx, sweepInterval(cfg.JobHistory)) }
	return base.Run(ctx, consumers, rest, sweep)
}

// serveREST serves the REST/JSON API on addr, under limits, until ctx ends.
func serveREST(ctx context.Context, base *service.Base, addr string, limits ports.RESTLimits, started func(grpcAddr, restAddr string)) error {
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
	srv := ports.RESTServer(mux, limits)
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

// sweepInterval is how often the job history is swept: a hundredth of its
// window, between a minute and an hour.
func sweepInterval(window time.Duration) time.Duration {
	return min(max(window/100, time.Minute), time.Hour)
}

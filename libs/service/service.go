// Package service is the frame every Loom service runs in: it connects to
// Redis and Kafka, creates the topics, sets up telemetry, serves gRPC and the
// HTTP endpoints, runs the outbox relay and the consumers, and shuts all of
// them down gracefully when its context ends.
package service

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/metric"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/telemetry"
	"github.com/loom-ml/loom/libs/topics"
)

// DefaultStopTimeout is how long Run waits for in-flight gRPC calls to finish
// at shutdown before it cancels them.
const DefaultStopTimeout = 5 * time.Second

// closeTimeout bounds flushing telemetry and closing connections at the end.
const closeTimeout = 5 * time.Second

// Base is what a service gets to build itself from.
type Base struct {
	Name      string
	Config    config.Common
	Log       *slog.Logger
	Telemetry *telemetry.Telemetry
	Redis     *redis.Client
	// Store keeps the service's state under the prefix "<name>:".
	Store    *store.Store
	Producer *bus.Producer
	// Kafka secures every connection to the brokers (SASL, TLS; nil:
	// plaintext): Run's consumers use it; a service that reads on its own
	// passes it on.
	Kafka *bus.Security
	// Signer signs what Producer writes: the services' key as
	// "services/<name>" (nil without Config.ServiceKeyFile; an agent sets
	// its node signer on Producer itself).
	Signer *envelope.Signer
	// Verifier checks the records the service's consumers read (nil only
	// with Config.InsecureBus): Run gives it to every consumer; a service
	// that reads on its own (bus.Tail, its own bus.Consumer) passes it on.
	Verifier *envelope.Verifier
	// Revocations is the service's copy of the revocation list of removed
	// nodes' identities (nil where the service has no services' secret: an
	// agent, -insecure-bus): Verifier refuses what it revokes, New reads it
	// first and Run keeps it current.
	Revocations *NodeRevocations
	// ServiceKey is the services' Ed25519 key (nil without
	// Config.ServiceKeyFile).
	ServiceKey ed25519.PrivateKey
	// ServiceSecret is the services' 32-byte secret (the key file's
	// content): auth.DeriveKey derives the bootstrap and service-token keys
	// from it. Nil without Config.ServiceKeyFile.
	ServiceSecret []byte
	// Rejected counts the records the consumers refused
	// (loom_bus_rejected_total{topic,reason}).
	Rejected metric.Int64Counter
	// Bus is the service's consumer metrics (records, handling time, lag,
	// dead letters): Run's consumers use it; a service that runs a
	// bus.Consumer of its own sets it, and Telemetry.TracerProvider, in
	// that consumer's config.
	Bus *bus.Metrics
	// GRPCMetrics counts and times the calls GRPC handles.
	GRPCMetrics *telemetry.GRPCMetrics
	// GRPC is the service's gRPC server (with OpenTelemetry interceptors);
	// register services on it before Run.
	GRPC *grpc.Server
	// Health is the standard gRPC health service registered on GRPC. Run sets
	// the overall status ("") SERVING once it listens and NOT_SERVING when
	// it stops; services may set statuses of their own.
	Health *health.Server
	// Clock is Config.Clock, or the real clock when that is nil: what the
	// service's domain and loops read time from.
	Clock clockwork.Clock
	// StopTimeout bounds the graceful gRPC stop (default DefaultStopTimeout);
	// calls still running after it, such as open watch streams, are cancelled.
	StopTimeout time.Duration

	listening chan struct{} // closed once the gRPC listener is bound
	done      chan struct{} // closed when Run has returned
	mu        sync.Mutex
	grpcAddr  string
	httpAddr  string
	ran       bool
	// closeBound, when set, bounds the producer's close (BoundClose).
	closeBound time.Duration
	closeOnce  sync.Once
	closeErr   error
}

// New connects to Redis and Kafka (waiting, with backoff, until ctx ends for
// them to answer), creates the topics when cfg.CreateTopics, and sets up
// telemetry. name is the service's name, e.g. "scheduler". Empty GRPCAddr and
// HTTPAddr mean a free port on 127.0.0.1. A Base that New returned must be
// Run or Closed. New refuses to start, with an InvalidError naming the
// variable, when a LOOM_* variable read through config's parsers holds a
// value they cannot parse (config.CheckEnv). opts are added to the gRPC
// server's: interceptors given with grpc.ChainUnaryInterceptor and
// grpc.ChainStreamInterceptor run inside the error mapping (errs.ToStatus),
// in the order given, so an interceptor may return Loom's error kinds.
func New(ctx context.Context, name string, cfg config.Common, opts ...grpc.ServerOption) (*Base, error) {
	// A mistyped LOOM_* number, duration or boolean stops the service here
	// rather than being replaced by its default without a word.
	if err := config.CheckEnv(); err != nil {
		return nil, fmt.Errorf("service %s: environment: %w", name, err)
	}
	var v errs.Validator
	v.Check(name != "", "name", "is required")
	v.Check(len(cfg.Brokers) > 0, "brokers", "at least one broker address is required")
	v.Check(cfg.RedisAddr != "", "redis_addr", "is required")
	v.Check(cfg.BusNodeRate >= 0 && cfg.BusNodeRate <= bus.MaxNodeRate, "bus_node_rate",
		"-bus-node-rate (LOOM_BUS_NODE_RATE) must be 0 (the default) up to %d records a second, got %v", bus.MaxNodeRate, cfg.BusNodeRate)
	v.Check(cfg.BusNodeBurst >= 0 && cfg.BusNodeBurst <= bus.MaxNodeBurst, "bus_node_burst",
		"-bus-node-burst (LOOM_BUS_NODE_BURST) must be 0 (the default) up to %d records, got %d", bus.MaxNodeBurst, cfg.BusNodeBurst)
	v.Check(cfg.BusSessionTimeout == 0 || cfg.BusSessionTimeout >= bus.MinSessionTimeout && cfg.BusSessionTimeout <= bus.MaxSessionTimeout, "bus_session_timeout",
		"-bus-session-timeout (LOOM_BUS_SESSION_TIMEOUT) must be 0 (the default, %v) or %v up to %v, got %v",
		bus.DefaultSessionTimeout, bus.MinSessionTimeout, bus.MaxSessionTimeout, cfg.BusSessionTimeout)
	if err := v.Err(); err != nil {
		return nil, fmt.Errorf("service %s: %w", name, err)
	}
	secret, err := loadServiceKey(cfg)
	if err != nil {
		return nil, fmt.Errorf("service %s: %w", name, err)
	}
	TuneGC()
	if cfg.GRPCAddr == "" {
		cfg.GRPCAddr = "127.0.0.1:0"
	}
	if cfg.HTTPAddr == "" {
		cfg.HTTPAddr = "127.0.0.1:0"
	}

	tel, err := telemetry.Setup(ctx, name, cfg.LogLevel)
	if err != nil {
		return nil, fmt.Errorf("service %s: %w", name, err)
	}
	log := tel.Logger
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	b := &Base{
		Name:      name,
		Config:    cfg,
		Log:       log,
		Telemetry: tel,
		Clock:     cfg.Clock,
		listening: make(chan struct{}),
		done:      make(chan struct{}),
	}

	ropts, err := RedisOptions(cfg)
	if err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("service %s: %w", name, err)
	}
	b.Redis = redis.NewClient(ropts)
	// Every service gets the base set of metrics on its /metrics (see
	// docs/observability.md), each labelled service=<name>.
	sreg := tel.ServiceRegisterer()
	if err := store.InstrumentRedis(b.Redis, sreg); err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("service %s: redis metrics: %w", name, err)
	}
	kafkaSec, err := KafkaSecurity(cfg)
	if err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("service %s: %w", name, err)
	}
	b.Kafka = kafkaSec
	if err := retry(ctx, log, "redis "+cfg.RedisAddr, func(ctx context.Context) error {
		return b.Redis.Ping(ctx).Err()
	}); err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("service %s: connect to redis %s: %w", name, cfg.RedisAddr, err)
	}

	if cfg.CreateTopics {
		// EnsureTopics retries an unreachable broker itself, until ctx ends.
		err = bus.EnsureTopicsWith(ctx, cfg.Brokers, kafkaSec, topics.All())
	} else {
		err = retry(ctx, log, fmt.Sprintf("kafka %v", cfg.Brokers), func(ctx context.Context) error {
			return pingBroker(ctx, cfg.Brokers, kafkaSec)
		})
	}
	if err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("service %s: connect to kafka %v: %w", name, cfg.Brokers, err)
	}

	b.Store = store.New(b.Redis, name+":")
	// The relay counts the outbox entries it sets aside on the service's
	// /metrics; a service tells itself of them with Store.OnSetAside.
	b.Store.SetMeter(tel.Meter)
	b.Producer = bus.NewSecureProducer(cfg.Brokers, kafkaSec)
	b.Producer.SetTracerProvider(tel.TracerProvider)
	if err := b.Store.RegisterOutboxMetrics(sreg); err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("service %s: outbox metrics: %w", name, err)
	}
	if b.Bus, err = bus.NewMetrics(sreg); err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("service %s: consumer metrics: %w", name, err)
	}
	if b.GRPCMetrics, err = telemetry.NewGRPCMetrics(sreg); err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("service %s: gRPC metrics: %w", name, err)
	}
	if err := b.setUpSigning(name, secret); err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("service %s: %w", name, err)
	}

	b.Health = health.NewServer()
	b.Health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	if cfg.LaunchID != "" {
		b.Health.SetServingStatus(LaunchHealthName(cfg.LaunchID), healthpb.HealthCheckResponse_NOT_SERVING)
	}
	b.GRPC = grpc.NewServer(append([]grpc.ServerOption{
		grpc.StatsHandler(otelgrpc.NewServerHandler(
			otelgrpc.WithTracerProvider(tel.TracerProvider),
			otelgrpc.WithMeterProvider(tel.MeterProvider),
			otelgrpc.WithPropagators(telemetry.Propagator),
		)),
		// The metrics see the status the client gets: outside the mapping.
		grpc.ChainUnaryInterceptor(b.GRPCMetrics.Unary, errs.UnaryServerInterceptor),
		grpc.ChainStreamInterceptor(b.GRPCMetrics.Stream, errs.StreamServerInterceptor),
	}, opts...)...)
	healthpb.RegisterHealthServer(b.GRPC, b.Health)
	return b, nil
}

// LaunchHealthName is the gRPC health service name under which a service
// started with config.Common.LaunchID id reports its status: only that
// process answers SERVING for it, whoever else listens on the same port.
func LaunchHealthName(id string) string { return "loom.launch/" + id }

// RedisOptions are the go-redis options of cfg: address, ACL user,
// password (LOOM_REDIS_PASSWORD, or the 0600 file LOOM_REDIS_PASSWORD_FILE)
// and TLS.
func RedisOptions(cfg config.Common) (*redis.Options, error) {
	o := &redis.Options{Addr: cfg.RedisAddr, Username: cfg.RedisUsername, Password: cfg.RedisPassword}
	if cfg.RedisPasswordFile != "" {
		st, err := os.Stat(cfg.RedisPasswordFile)
		if err != nil {
			return nil, fmt.Errorf("redis password file: %w", err)
		}
		if st.Mode().Perm()&0o077 != 0 {
			return nil, fmt.Errorf("redis password file %s has mode %v: it must not be readable by group or others", cfg.RedisPasswordFile, st.Mode().Perm())
		}
		b, err := os.ReadFile(cfg.RedisPasswordFile)
		if err != nil {
			return nil, err
		}
		o.Password = strings.TrimSpace(string(b))
	}
	tc, err := bus.TLSConfig(cfg.RedisTLS, cfg.RedisTLSCA, cfg.RedisTLSCert, cfg.RedisTLSKey)
	if err != nil {
		return nil, fmt.Errorf("redis TLS: %w", err)
	}
	o.TLSConfig = tc
	return o, nil
}

// KafkaSecurity is cfg's Kafka SASL and TLS (nil: plaintext).
func KafkaSecurity(cfg config.Common) (*bus.Security, error) {
	k := cfg.Kafka
	return bus.NewSecurity(bus.KafkaOptions{SASLMechanism: k.SASLMechanism, User: k.User, Password: k.Password,
		TLS: k.TLS, TLSCA: k.TLSCA, TLSCert: k.TLSCert, TLSKey: k.TLSKey})
}

// loadServiceKey reads the services' secret, or says what is missing.
func loadServiceKey(cfg config.Common) ([]byte, error) {
	switch {
	case cfg.ServiceKeyFile != "":
		secret, err := auth.LoadSecret(cfg.ServiceKeyFile)
		if err != nil {
			return nil, fmt.Errorf("service key (-service-key-file, LOOM_SERVICE_KEY_FILE): %w", err)
		}
		if len(secret) != ed25519.SeedSize {
			return nil, fmt.Errorf("service key %s: %d bytes, want %d", cfg.ServiceKeyFile, len(secret), ed25519.SeedSize)
		}
		return secret, nil
	case len(cfg.ServicePublicKey) == ed25519.PublicKeySize, cfg.InsecureBus:
		return nil, nil
	}
	return nil, errs.Invalid("service_key_file", "is required: every service signs what it writes to the bus with the services' key "+
		"(-service-key-file or LOOM_SERVICE_KEY_FILE; `loom up` makes one); -insecure-bus turns signing off for development only")
}

// setUpSigning gives the producer the services' signer and the consumers a
// verifier, per the config.
func (b *Base) setUpSigning(name string, secret []byte) error {
	c, err := b.Telemetry.Meter.Int64Counter("loom_bus_rejected_total",
		metric.WithDescription("Records the service's consumers refused and dead-lettered because their signature did not hold, by topic and reason."))
	if err == nil {
		b.Rejected = c
	}
	// Certificates are issued on the wall clock (by the gateway, maybe on
	// another machine), so their expiry is read on it too, not on a test's
	// fake clock.
	now := time.Now
	switch {
	case secret != nil:
		key, err := auth.ServiceKey(secret)
		if err != nil {
			return err
		}
		b.ServiceKey, b.ServiceSecret = key, secret
		b.Signer = envelope.NewServiceSigner(name, key)
		b.Producer.SetSigner(b.Signer)
		b.Verifier = envelope.NewVerifier(key.Public().(ed25519.PublicKey), now)
		// A service (not an agent, which reads only services' records and
		// whose Redis user reaches only its own keys) refuses the records
		// of removed nodes' identities. Read before any consumer starts, so
		// that a service started after a removal refuses from its first
		// record; a failure here is logged and the next poll tries again.
		b.Revocations = NewNodeRevocations(b.Redis, now)
		b.Verifier.SetRevocations(b.Revocations.Lookup)
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		b.Revocations.refreshLogged(rctx, b.Log)
		cancel()
	case len(b.Config.ServicePublicKey) == ed25519.PublicKeySize:
		b.Verifier = envelope.NewVerifier(b.Config.ServicePublicKey, now)
	default:
		b.Log.Warn("INSECURE: -insecure-bus is set: records on the bus are neither signed nor verified; " +
			"anything that reaches Kafka can command every node. Development only.")
	}
	return nil
}

// ready is the service's /readyz: Redis answers, and a service that
// refuses removed nodes' records has a current copy of their list
// (NodeRevocations.Check).
func (b *Base) ready(ctx context.Context) error {
	if err := b.Redis.Ping(ctx).Err(); err != nil {
		return err
	}
	if b.Revocations != nil {
		return b.Revocations.Check()
	}
	return nil
}

// retry calls f until it succeeds or ctx ends, backing off from 100 ms to 2 s
// and logging the failures, so that a service started before its
// infrastructure waits for it instead of exiting.
func retry(ctx context.Context, log *slog.Logger, what string, f func(context.Context) error) error {
	delay := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := f(actx)
		cancel()
		if err == nil {
			if attempt > 1 {
				log.Info("connected", "to", what, "attempts", attempt)
			}
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("gave up after %d attempts: %w (last error: %v)", attempt, ctx.Err(), err)
		}
		log.Warn("waiting for infrastructure", "to", what, "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("gave up after %d attempts: %w (last error: %v)", attempt, ctx.Err(), err)
		case <-time.After(delay):
		}
		delay = min(delay*2, 2*time.Second)
	}
}

// pingBroker asks one of brokers for cluster metadata.
func pingBroker(ctx context.Context, brokers []string, sec *bus.Security) error {
	var errList []error
	for _, addr := range brokers {
		// A Transport of its own: kafka-go caches metadata per transport.
		c := &kafka.Client{Addr: kafka.TCP(addr), Transport: sec.Transport()}
		_, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{}})
		c.Transport.(*kafka.Transport).CloseIdleConnections()
		if err == nil {
			return nil
		}
		errList = append(errList, fmt.Errorf("%s: %w", addr, err))
	}
	return errors.Join(errList...)
}

// Consume describes one consumer group the service runs: its handler is called
// for each event of the topics, in order within a partition.
type Consume struct {
	Topics  []string
	Handler bus.Handler
	// Group defaults to "loom-<name>".
	Group string
	// Config, when set, is used for the consumer with Brokers, GroupID,
	// Topics and Logger filled in where empty (for retry tuning, or a
	// Filter or PartitionKey).
	Config *bus.ConsumerConfig
	// Batch, when set with MaxBatch > 1, takes the events that are waiting,
	// up to MaxBatch at a time, in one call (bus.Consumer.WithBatch);
	// Handler takes a lone event and those of a batch Batch refused.
	Batch    bus.BatchHandler
	MaxBatch int
}

// Run serves gRPC on cfg.GRPCAddr and HTTP on cfg.HTTPAddr, runs the outbox
// relay, the consumers and the extra background loops, and blocks until ctx
// ends or one of them fails; then it stops them all gracefully (consumers
// finish the record in hand and commit) and closes its connections. Loops
// must return when their context ends.
//
// Run returns nil when ctx ended, and otherwise the first error (a loop or a
// consumer that failed, or an address that could not be bound). Run may be
// called once; the Base is closed when it returns.
func (b *Base) Run(ctx context.Context, consumers []Consume, loops ...func(context.Context) error) (err error) {
	b.mu.Lock()
	if b.ran {
		b.mu.Unlock()
		return fmt.Errorf("service %s: Run called twice", b.Name)
	}
	b.ran = true
	b.mu.Unlock()
	defer close(b.done)
	defer func() {
		if cerr := b.Close(); err == nil {
			err = cerr
		}
	}()

	var v errs.Validator
	for i, c := range consumers {
		v.Check(len(c.Topics) > 0, fmt.Sprintf("consumers[%d].topics", i), "at least one topic is required")
		v.Check(c.Handler != nil, fmt.Sprintf("consumers[%d].handler", i), "is required")
	}
	for i, l := range loops {
		v.Check(l != nil, fmt.Sprintf("loops[%d]", i), "must not be nil")
	}
	if err := v.Err(); err != nil {
		return fmt.Errorf("service %s: %w", b.Name, err)
	}

	ln, err := net.Listen("tcp", b.Config.GRPCAddr)
	if err != nil {
		return fmt.Errorf("service %s: listen gRPC on %s: %w", b.Name, b.Config.GRPCAddr, err)
	}
	httpSrv := telemetry.NewServer(b.Config.HTTPAddr, b.Telemetry, b.ready)
	if err := httpSrv.Start(); err != nil {
		ln.Close()
		return fmt.Errorf("service %s: %w", b.Name, err)
	}
	b.mu.Lock()
	b.grpcAddr, b.httpAddr = ln.Addr().String(), httpSrv.Addr()
	b.mu.Unlock()
	close(b.listening)
	b.Log.Info("service running", "grpc", b.grpcAddr, "http", b.httpAddr)
	if dir := b.Config.MetricsSDDir; dir != "" {
		// Prometheus finds this /metrics through the file while the
		// service runs; a failure costs the scrapes only, not the service.
		unregister, err := RegisterFileSD(dir, b.Name, b.httpAddr, nil)
		if err != nil {
			b.Log.Error("not registered for Prometheus' file-based discovery", "dir", dir, "err", err)
		} else {
			defer func() {
				if err := unregister(); err != nil {
					b.Log.Warn("file-based discovery: removing the registration", "dir", dir, "err", err)
				}
			}()
		}
	}

	b.GRPCMetrics.Init(b.GRPC)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := b.GRPC.Serve(ln); err != nil {
			return fmt.Errorf("serve gRPC: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		b.Health.Shutdown()
		b.stopGRPC()
		sctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		return httpSrv.Shutdown(sctx)
	})
	g.Go(func() error {
		if err := b.Store.RunRelay(gctx, b.Producer); err != nil {
			return fmt.Errorf("outbox relay: %w", err)
		}
		return nil
	})
	if b.Revocations != nil {
		g.Go(func() error { return b.Revocations.Run(gctx, b.Log) })
	}
	for _, c := range consumers {
		cons := bus.NewConsumer(b.consumerConfig(c), b.Producer, c.Handler).WithBatch(c.Batch, c.MaxBatch)
		g.Go(func() error { return cons.Run(gctx) })
	}
	for _, loop := range loops {
		g.Go(func() error { return loop(gctx) })
	}
	b.Health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	if b.Config.LaunchID != "" {
		b.Health.SetServingStatus(LaunchHealthName(b.Config.LaunchID), healthpb.HealthCheckResponse_SERVING)
	}

	err = g.Wait()
	if ctx.Err() != nil && (err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		// Stopping was asked for; parts that report the cancellation as an
		// error did what they should.
		b.Log.Info("service stopped")
		return nil
	}
	if err == nil {
		return nil
	}
	b.Log.Error("service failed", "err", err)
	return fmt.Errorf("service %s: %w", b.Name, err)
}

// NodeRate is what every verifying consumer of the service holds each
// node to (bus.ConsumerConfig.NodeRate and NodeBurst): -bus-node-rate and
// -bus-node-burst, or the defaults where they are 0. A consumer the
// service makes itself with bus.NewConsumer, not through Run, sets them
// from here.
func (b *Base) NodeRate() (perSecond float64, burst int) {
	perSecond, burst = b.Config.BusNodeRate, b.Config.BusNodeBurst
	if perSecond == 0 {
		perSecond = bus.DefaultNodeRate
	}
	if burst == 0 {
		burst = bus.DefaultNodeBurst
	}
	return perSecond, burst
}

func (b *Base) consumerConfig(c Consume) bus.ConsumerConfig {
	var cfg bus.ConsumerConfig
	if c.Config != nil {
		cfg = *c.Config
	}
	if len(cfg.Brokers) == 0 {
		cfg.Brokers = b.Config.Brokers
	}
	cfg.Topics = c.Topics
	cfg.GroupID = c.Group
	if cfg.GroupID == "" {
		cfg.GroupID = "loom-" + b.Name
	}
	if cfg.Logger == nil {
		cfg.Logger = b.Log
	}
	if cfg.Verifier == nil {
		cfg.Verifier = b.Verifier
	}
	if cfg.Rejected == nil {
		cfg.Rejected = b.Rejected
	}
	if cfg.NodeRate == 0 {
		cfg.NodeRate, cfg.NodeBurst = b.NodeRate()
	}
	if cfg.SessionTimeout == 0 {
		cfg.SessionTimeout = b.Config.BusSessionTimeout
	}
	if cfg.Security == nil {
		cfg.Security = b.Kafka
	}
	if cfg.Metrics == nil {
		cfg.Metrics = b.Bus
	}
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = b.Telemetry.TracerProvider
	}
	return cfg
}

// stopGRPC stops the gRPC server gracefully, cancelling what still runs after
// the stop timeout.
func (b *Base) stopGRPC() {
	timeout := b.StopTimeout
	if timeout <= 0 {
		timeout = DefaultStopTimeout
	}
	stopped := make(chan struct{})
	go func() {
		b.GRPC.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(timeout):
		b.Log.Warn("gRPC calls still running after the stop timeout; cancelling them", "timeout", timeout)
		b.GRPC.Stop()
		<-stopped
	}
}

// Close closes the producer and Redis and flushes telemetry. Run does it when
// it returns; call it only for a Base that will not Run (a service that failed
// between New and Run). Calling it again returns the first result.
func (b *Base) Close() error {
	b.closeOnce.Do(func() {
		var errList []error
		if b.GRPC != nil {
			// Stop is a no-op for a server that was stopped already.
			b.GRPC.Stop()
		}
		if b.Producer != nil {
			b.mu.Lock()
			bound := b.closeBound
			b.mu.Unlock()
			errList = append(errList, b.Producer.CloseWithin(bound))
		}
		if b.Redis != nil {
			if err := b.Redis.Close(); err != nil {
				errList = append(errList, fmt.Errorf("close redis: %w", err))
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		errList = append(errList, b.Telemetry.Shutdown(ctx))
		if err := errors.Join(errList...); err != nil {
			b.closeErr = fmt.Errorf("service %s: close: %w", b.Name, err)
		}
	})
	return b.closeErr
}

// BoundClose bounds, from now on, how long Close (and so the end of Run)
// waits for the producer to flush what is still pending: at most d
// (bus.Producer.CloseWithin). For a service that ends because its broker
// no longer answers, whose pending records could never be written and
// would hold its exit for the writer's whole retry budget.
func (b *Base) BoundClose(d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closeBound = d
}

// GRPCAddr returns the bound gRPC address once Run has started listening
// (useful with ":0"); it blocks until then or ctx ends, and fails when Run
// returned without listening.
func (b *Base) GRPCAddr(ctx context.Context) (string, error) {
	if err := b.waitListening(ctx); err != nil {
		return "", err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.grpcAddr, nil
}

// HTTPAddr is GRPCAddr for the HTTP (/metrics, /healthz, /readyz) server.
func (b *Base) HTTPAddr(ctx context.Context) (string, error) {
	if err := b.waitListening(ctx); err != nil {
		return "", err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.httpAddr, nil
}

func (b *Base) waitListening(ctx context.Context) error {
	select {
	case <-b.listening:
		return nil
	default:
	}
	select {
	case <-b.listening:
		return nil
	case <-b.done:
		return fmt.Errorf("service %s: stopped before listening", b.Name)
	case <-ctx.Done():
		return fmt.Errorf("service %s: waiting for the listener: %w", b.Name, ctx.Err())
	}
}

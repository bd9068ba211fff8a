// Package provisioner is Loom's provisioner service. It owns clusters, node pools and nodes, and brings nodes up through a compute provider.
// See README.md beside this file for what it owns, the topics it reads and
// writes, and how it recovers.
package provisioner

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/service"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/provisioner/internal/agentredis"
	"github.com/loom-ml/loom/services/provisioner/internal/app"
	"github.com/loom-ml/loom/services/provisioner/internal/capacity"
	"github.com/loom-ml/loom/services/provisioner/internal/domain"
	"github.com/loom-ml/loom/services/provisioner/internal/ports"
	"github.com/loom-ml/loom/services/provisioner/internal/provider"
	"github.com/loom-ml/loom/services/provisioner/internal/provider/local"
	"github.com/loom-ml/loom/services/provisioner/internal/provider/sim"
	"github.com/loom-ml/loom/services/provisioner/internal/slurmconf"
)

// Provider names.
const (
	ProviderLocal = "local"
	ProviderSim   = "sim"
)

// localMaxNodesPerPool bounds a pool on the local provider: each node is a
// process on this machine.
const localMaxNodesPerPool = 64

// localMaxNodesPerCluster bounds a whole cluster on the local provider: up to
// 32 pools of 64 would still be 2,048 processes on one machine.
const localMaxNodesPerCluster = 64

// Bounds of -launch-rate and -launch-concurrency: beyond them the pacing
// would not protect the machine it is there to protect.
const (
	maxLaunchRate        = 1000
	maxLaunchConcurrency = 256
)

// Name is the service's name: its Redis prefix is "provisioner:" and its
// consumer group "loom-provisioner".
const Name = "provisioner"

// Config is the provisioner's configuration.
type Config struct {
	config.Common
	// Provider is the compute provider: "local" (agent processes on this
	// machine) or "sim" (simulated nodes, no processes) (LOOM_PROVIDER;
	// default local).
	Provider string
	// Sim configures the sim provider (-sim-* flags, LOOM_SIM_*).
	Sim sim.Config
	// Capacity is the non-reserved capacity, in the syntax of package
	// capacity: "us-central1-a/a3-ultragpu-8g/SPOT=8,*/*/ON_DEMAND=64"
	// (LOOM_CAPACITY; default capacity.Default, generous).
	Capacity string
	// BootTimeout is how long a node may take from its creation to its
	// agent's registration before it is FAILED and replaced
	// (LOOM_BOOT_TIMEOUT; default 10m).
	BootTimeout time.Duration
	// OperationTimeout bounds a create or update: past it the operation
	// completes with the nodes that are ready, degraded, or fails when a pool
	// has none (LOOM_OPERATION_TIMEOUT; default 30m).
	OperationTimeout time.Duration
	// MaxLaunchAttempts failed launches make a node FAILED and replaced
	// (LOOM_MAX_LAUNCH_ATTEMPTS; default 5). LaunchBackoff doubles after
	// each failure up to MaxLaunchBackoff (LOOM_LAUNCH_BACKOFF 1s,
	// LOOM_MAX_LAUNCH_BACKOFF 1m).
	MaxLaunchAttempts               int
	LaunchBackoff, MaxLaunchBackoff time.Duration
	// DrainTimeout is how long after a draining node's deadline the
	// provisioner waits for the scheduler's NodeDrained before it removes
	// the node anyway (LOOM_DRAIN_TIMEOUT; default 5m).
	DrainTimeout time.Duration
	// DataDir holds the local provider's node and shared directories
	// (LOOM_DATA_DIR; default ~/.loom/provisioner).
	DataDir string
	// AgentCommand is the argv that starts one agent process; the provider
	// passes the agent's settings as LOOM_* environment variables.
	// Default: the "agent" binary beside this one (LOOM_AGENT_COMMAND, space-separated).
	AgentCommand []string
	// AgentEnv is added to each agent's environment
	// (LOOM_AGENT_ENV, space-separated KEY=VALUE; the flag may be repeated).
	AgentEnv []string
	// AgentIdentity is how the local provider's agents get their node
	// identity (LOOM_PROVISIONER_AGENT_IDENTITY): "bootstrap" (default) hands
	// each launch a one-time bootstrap token (LOOM_AGENT_BOOTSTRAP_TOKEN in
	// its environment, never on its command line), which the agent
	// exchanges at the gateway (-gateway) for an identity it renews;
	// "direct" also writes an identity the provisioner issues itself
	// (DirectIdentityLifetime, 0600 in the node's work dir), for a stack
	// whose gateway does not register nodes.
	AgentIdentity string
	// AgentRedisUsers is whether the local provider gives each agent a
	// Redis ACL user of its own, confined to its keys (package agentredis;
	// LOOM_PROVISIONER_AGENT_REDIS_USERS): "auto" (default) where the
	// provisioner's Redis user can make ACL users, else (miniredis, a user
	// without agentredis.Grant) agents get the provisioner's own
	// credential, which the log says once at start; "on" the same, but the
	// provisioner does not start where it cannot; "off" agents get the
	// provisioner's own credential.
	AgentRedisUsers string
	// StopAgentsOnExit makes the provisioner stop the agents of its nodes
	// when it shuts down; the reconciler starts them again at its next start
	// (LOOM_STOP_AGENTS_ON_EXIT; default false: agents outlive it).
	StopAgentsOnExit bool
	// ReconcileInterval is how often the reconciler checks every node without
	// being woken by a change (LOOM_RECONCILE_INTERVAL; default 5s).
	ReconcileInterval time.Duration
	// AgentStopGrace is how long an agent gets between SIGTERM and SIGKILL
	// (LOOM_AGENT_STOP_GRACE; default 15s, more than an agent needs to stop
	// its steps).
	AgentStopGrace time.Duration
	// LaunchRate bounds how many agents the local provider starts per
	// second (LOOM_LAUNCH_RATE; default 10), LaunchConcurrency how many it
	// starts at once (LOOM_LAUNCH_CONCURRENCY; default 4). The sim provider
	// simulates its own latency and is not paced.
	LaunchRate        float64
	LaunchConcurrency int
	// MaxBatch is how many waiting node reports (registrations, health
	// verdicts) one store write may apply together
	// (LOOM_PROVISIONER_MAX_BATCH; default DefaultMaxBatch; 1 applies each
	// on its own).
	MaxBatch int
}

// Values of Config.AgentRedisUsers.
const (
	AgentRedisUsersAuto = "auto"
	AgentRedisUsersOn   = "on"
	AgentRedisUsersOff  = "off"
)

// DefaultMaxBatch is Config.MaxBatch when unset: a 10,000-node create
// brings its registrations within seconds, and one write per waiting batch
// instead of one per registration is what keeps the provisioner ahead.
const DefaultMaxBatch = 256

// listFlag is a flag holding a space-separated list; each use of the flag
// replaces the default and then appends.
type listFlag struct {
	list *[]string
	set  bool
}

func (l *listFlag) String() string {
	if l.list == nil {
		return ""
	}
	return strings.Join(*l.list, " ")
}

func (l *listFlag) Set(s string) error {
	if !l.set {
		*l.list, l.set = nil, true
	}
	*l.list = append(*l.list, strings.Fields(s)...)
	return nil
}

func defaultDataDir() string {
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".loom", "provisioner")
	}
	return filepath.Join(".loom", "provisioner")
}

// RegisterFlags adds the provisioner's flags to fs, defaults from LOOM_* variables.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Common.Register(fs, "PROVISIONER", "127.0.0.1:7071", "127.0.0.1:9171")
	fs.StringVar(&c.Provider, "provider", config.Env("LOOM_PROVIDER", ProviderLocal), "compute provider: local or sim (LOOM_PROVIDER)")
	c.Sim.RegisterFlags(fs)
	fs.StringVar(&c.Capacity, "capacity", config.Env("LOOM_CAPACITY", capacity.Default),
		"capacity per zone, machine type and type: ZONE/MACHINE_TYPE/TYPE=COUNT,... with * wildcards, TYPE ON_DEMAND, SPOT or FLEX_START (LOOM_CAPACITY)")
	fs.DurationVar(&c.BootTimeout, "boot-timeout", config.EnvDuration("LOOM_BOOT_TIMEOUT", 10*time.Minute),
		"a node not registered this long after its creation is FAILED and replaced (LOOM_BOOT_TIMEOUT)")
	fs.DurationVar(&c.OperationTimeout, "operation-timeout", config.EnvDuration("LOOM_OPERATION_TIMEOUT", 30*time.Minute),
		"a create or update completes (degraded) or fails this long after it started (LOOM_OPERATION_TIMEOUT)")
	fs.IntVar(&c.MaxLaunchAttempts, "max-launch-attempts", int(config.EnvInt("LOOM_MAX_LAUNCH_ATTEMPTS", 5)),
		"failed launches after which a node is FAILED and replaced (LOOM_MAX_LAUNCH_ATTEMPTS)")
	fs.DurationVar(&c.LaunchBackoff, "launch-backoff", config.EnvDuration("LOOM_LAUNCH_BACKOFF", time.Second),
		"delay after a node's first failed launch, doubling after each (LOOM_LAUNCH_BACKOFF)")
	fs.DurationVar(&c.MaxLaunchBackoff, "max-launch-backoff", config.EnvDuration("LOOM_MAX_LAUNCH_BACKOFF", time.Minute),
		"longest delay between launches of a node (LOOM_MAX_LAUNCH_BACKOFF)")
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", config.EnvDuration("LOOM_DRAIN_TIMEOUT", 5*time.Minute),
		"how long past a draining node's deadline to wait for NodeDrained before removing it anyway (LOOM_DRAIN_TIMEOUT)")
	fs.StringVar(&c.DataDir, "data-dir", config.Env("LOOM_DATA_DIR", defaultDataDir()),
		"root of the local provider's node and shared directories (LOOM_DATA_DIR; default ~/.loom/provisioner)")
	c.AgentCommand = strings.Fields(os.Getenv("LOOM_AGENT_COMMAND"))
	fs.Var(&listFlag{list: &c.AgentCommand}, "agent-command",
		"argv that starts an agent, space-separated (LOOM_AGENT_COMMAND; default: the agent binary beside this one)")
	c.AgentEnv = strings.Fields(os.Getenv("LOOM_AGENT_ENV"))
	fs.Var(&listFlag{list: &c.AgentEnv}, "agent-env",
		"KEY=VALUE added to each agent's environment; space-separated, repeatable (LOOM_AGENT_ENV)")
	fs.StringVar(&c.AgentIdentity, "agent-identity", config.Env("LOOM_PROVISIONER_AGENT_IDENTITY", AgentIdentityBootstrap),
		"how local agents get their node identity: bootstrap (a one-time token per launch, exchanged at the gateway) or direct (LOOM_PROVISIONER_AGENT_IDENTITY)")
	fs.StringVar(&c.AgentRedisUsers, "agent-redis-users", config.Env("LOOM_PROVISIONER_AGENT_REDIS_USERS", AgentRedisUsersAuto),
		"give each local agent a Redis ACL user of its own: auto (where the provisioner's Redis user may make users, else agents share its credential), on (required) or off (LOOM_PROVISIONER_AGENT_REDIS_USERS)")
	fs.BoolVar(&c.StopAgentsOnExit, "stop-agents-on-exit", config.EnvBool("LOOM_STOP_AGENTS_ON_EXIT", false),
		"stop the nodes' agents when the provisioner stops (LOOM_STOP_AGENTS_ON_EXIT)")
	fs.DurationVar(&c.ReconcileInterval, "reconcile-interval", config.EnvDuration("LOOM_RECONCILE_INTERVAL", 5*time.Second),
		"how often the reconciler checks every node (LOOM_RECONCILE_INTERVAL)")
	fs.DurationVar(&c.AgentStopGrace, "agent-stop-grace", config.EnvDuration("LOOM_AGENT_STOP_GRACE", 15*time.Second),
		"time between SIGTERM and SIGKILL when stopping an agent (LOOM_AGENT_STOP_GRACE)")
	fs.Float64Var(&c.LaunchRate, "launch-rate", config.EnvFloat("LOOM_LAUNCH_RATE", local.DefaultLaunchRate),
		"agents the local provider starts per second, at most (LOOM_LAUNCH_RATE)")
	fs.IntVar(&c.MaxBatch, "max-batch", int(config.EnvInt("LOOM_PROVISIONER_MAX_BATCH", DefaultMaxBatch)),
		"node reports (registrations, health verdicts) applied in one store write at most; 1: each on its own (LOOM_PROVISIONER_MAX_BATCH)")
	fs.IntVar(&c.LaunchConcurrency, "launch-concurrency", int(config.EnvInt("LOOM_LAUNCH_CONCURRENCY", local.DefaultLaunchConcurrency)),
		"agents the local provider starts at once, at most (LOOM_LAUNCH_CONCURRENCY)")
}

// validate checks the settings and fills the defaults that need the
// environment (the agent binary, an absolute data dir).
func (c *Config) validate() error {
	var v errs.Validator
	if c.Provider == "" {
		c.Provider = ProviderLocal
	}
	v.Check(c.Provider == ProviderLocal || c.Provider == ProviderSim, "provider", "must be local or sim, got %q", c.Provider)
	if c.Provider == ProviderSim {
		c.Sim.Check(&v)
	}
	if c.AgentIdentity == "" {
		c.AgentIdentity = AgentIdentityBootstrap
	}
	v.Check(c.AgentIdentity == AgentIdentityBootstrap || c.AgentIdentity == AgentIdentityDirect, "agent_identity",
		"must be %s or %s, got %q", AgentIdentityBootstrap, AgentIdentityDirect, c.AgentIdentity)
	if c.AgentRedisUsers == "" {
		c.AgentRedisUsers = AgentRedisUsersAuto
	}
	v.Check(c.AgentRedisUsers == AgentRedisUsersAuto || c.AgentRedisUsers == AgentRedisUsersOn || c.AgentRedisUsers == AgentRedisUsersOff,
		"agent_redis_users", "must be %s, %s or %s, got %q", AgentRedisUsersAuto, AgentRedisUsersOn, AgentRedisUsersOff, c.AgentRedisUsers)
	if c.Capacity == "" {
		c.Capacity = capacity.Default
	}
	if _, err := capacity.Parse(c.Capacity); err != nil {
		v.Add("capacity", "%v", err)
	}
	v.Check(c.DataDir != "", "data_dir", "is required")
	if len(c.AgentCommand) == 0 {
		exe, err := os.Executable()
		if err != nil {
			v.Add("agent_command", "not set and the provisioner's own path is unknown: %v", err)
		} else {
			c.AgentCommand = []string{filepath.Join(filepath.Dir(exe), "agent")}
		}
	}
	for i, kv := range c.AgentEnv {
		v.Check(strings.Contains(kv, "=") && !strings.HasPrefix(kv, "="), fmt.Sprintf("agent_env[%d]", i), "must be KEY=VALUE, got %q", kv)
	}
	if c.DataDir != "" {
		abs, err := filepath.Abs(c.DataDir)
		if err != nil {
			v.Add("data_dir", "%v", err)
		}
		c.DataDir = abs
	}
	if c.ReconcileInterval <= 0 {
		c.ReconcileInterval = 5 * time.Second
	}
	if c.AgentStopGrace <= 0 {
		c.AgentStopGrace = 15 * time.Second
	}
	if c.LaunchRate == 0 {
		c.LaunchRate = local.DefaultLaunchRate
	}
	if c.LaunchConcurrency == 0 {
		c.LaunchConcurrency = local.DefaultLaunchConcurrency
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = DefaultMaxBatch
	}
	v.Check(c.MaxBatch >= 1, "max_batch", "must be at least 1, got %d", c.MaxBatch)
	v.Check(c.LaunchRate > 0 && c.LaunchRate <= maxLaunchRate, "launch_rate", "must be more than 0 and at most %d agents a second, got %g", maxLaunchRate, c.LaunchRate)
	v.Check(c.LaunchConcurrency >= 1 && c.LaunchConcurrency <= maxLaunchConcurrency, "launch_concurrency", "must be 1 to %d, got %d", maxLaunchConcurrency, c.LaunchConcurrency)
	return v.Err()
}

// params are the domain settings for the configured provider.
func (c *Config) params() domain.Params {
	p := domain.Params{
		Capacity:          capacity.MustParse(c.Capacity),
		BootTimeout:       c.BootTimeout,
		OperationTimeout:  c.OperationTimeout,
		MaxLaunchAttempts: int32(c.MaxLaunchAttempts),
		LaunchBackoff:     c.LaunchBackoff,
		MaxLaunchBackoff:  c.MaxLaunchBackoff,
		DrainTimeout:      c.DrainTimeout,
		Render:            slurmconf.Render,
	}
	if c.Provider == ProviderLocal {
		data := c.DataDir
		p.HomeDir = func(cl *loomv1.Cluster) string { return local.HomeDir(data, domain.ClusterID(cl.GetName())) }
		p.ScratchDir = func(cl *loomv1.Cluster) string { return local.ScratchDir(data, domain.ClusterID(cl.GetName())) }
		p.WorkDir = func(id, host string) string { return local.WorkDir(data, id, host) }
		p.MaxNodesPerPool = localMaxNodesPerPool
		p.MaxNodesPerCluster = localMaxNodesPerCluster
	} else {
		// Simulated nodes mount the shared filesystems where the spec says.
		p.HomeDir = func(cl *loomv1.Cluster) string {
			return cmp.Or(cl.GetStorage().GetHome().GetMountPath(), "/home")
		}
		p.ScratchDir = func(cl *loomv1.Cluster) string {
			return cmp.Or(cl.GetStorage().GetScratch().GetMountPath(), "/scratch")
		}
	}
	return p
}

// agentRedisUsers returns what makes the local agents' own Redis users
// (Config.AgentRedisUsers), nil where agents get the provisioner's own
// credential, and then what deletes a removed node's agent's keys with
// that credential (nil where it may not: it says so once, WARN).
func agentRedisUsers(ctx context.Context, base *service.Base, mode, redisUser string) (local.RedisUsers, local.RedisKeys, error) {
	var unsupported *agentredis.UnsupportedError
	if mode != AgentRedisUsersOff {
		err := agentredis.Probe(ctx, base.Redis, redisUser)
		switch {
		case err == nil:
			return agentredis.New(base.Redis), nil, nil
		case errors.As(err, &unsupported) && mode == AgentRedisUsersAuto:
			base.Log.Warn("agents get the provisioner's own Redis credential, not a Redis user each: "+err.Error()+
				" (or set -agent-redis-users=off to say so)", "agent_redis_users", mode, "fix", unsupported.Fix())
		case errors.As(err, &unsupported):
			return nil, nil, fmt.Errorf("provisioner: -agent-redis-users=on: %w (or set it to auto or off)", err)
		default:
			return nil, nil, fmt.Errorf("provisioner: agent redis users: %w", err)
		}
	}
	// The agents share the provisioner's credential; their keys are
	// where they would be with users of their own.
	err := agentredis.ProbeKeys(ctx, base.Redis, redisUser)
	switch {
	case err == nil:
		return nil, agentredis.NewKeys(base.Redis), nil
	case errors.As(err, &unsupported):
		base.Log.Warn("a removed node's agent keys are left in Redis (delete agent-<cluster>-<host>:* by hand before a cluster id is used again): "+err.Error(),
			"agent_redis_users", mode, "fix", unsupported.Fix())
		return nil, nil, nil
	}
	return nil, nil, fmt.Errorf("provisioner: agent redis keys: %w", err)
}

// nodeDrainedType is NodeDrained's CloudEvents type.
var nodeDrainedType = envelope.TypeOf(&eventsv1.NodeDrained{})

// heartbeatType is Heartbeat's CloudEvents type.
var heartbeatType = envelope.TypeOf(&eventsv1.Heartbeat{})

// RunArgs runs the provisioner from a command line (args, without the program
// name): RegisterFlags' flags, each defaulting to its LOOM_* variable,
// then Run until ctx ends. A command line that does not parse is a
// *config.UsageError. The provisioner binary and loom's in-process stack both
// start the provisioner here, so that its command line is read in one place.
func RunArgs(ctx context.Context, args []string) error {
	return RunArgsWith(ctx, args, nil)
}

// RunArgsWith is RunArgs with edit, when not nil, applied to the parsed
// Config before Run: for what no flag can carry, such as the sim provider's
// launch hook that the in-process stack passes to a benchmark.
func RunArgsWith(ctx context.Context, args []string, edit func(*Config)) error {
	cfg, err := config.ParseArgs("provisioner", args, (*Config).RegisterFlags)
	if err != nil {
		return err
	}
	if edit != nil {
		edit(&cfg)
	}
	return Run(ctx, cfg)
}

// Run runs the provisioner until ctx ends, then shuts down gracefully.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.validate(); err != nil {
		return fmt.Errorf("provisioner config: %w", err)
	}
	// Only Loom services (the gateway) call this API: each call carries a
	// service token.
	internal, err := service.InternalAuth(cfg.Common)
	if err != nil {
		return err
	}
	base, err := service.New(ctx, Name, cfg.Common, internal...)
	if err != nil {
		return err
	}
	var prov provider.Provider
	if cfg.Provider == ProviderSim {
		simCfg := cfg.Sim
		if simCfg.Log == nil {
			simCfg.Log = base.Log
		}
		s := sim.New(simCfg, base.Producer)
		defer s.Close()
		prov = s
	} else {
		users, keys, err := agentRedisUsers(ctx, base, cfg.AgentRedisUsers, cfg.RedisUsername)
		if err != nil {
			_ = base.Close()
			return err
		}
		prov, err = local.New(local.Config{
			DataDir: cfg.DataDir, AgentCommand: cfg.AgentCommand, AgentEnv: cfg.AgentEnv,
			Brokers: cfg.Brokers, RedisAddr: cfg.RedisAddr, StopGrace: cfg.AgentStopGrace,
			RedisUsername: cfg.RedisUsername, RedisPasswordFile: cfg.RedisPasswordFile, RedisUsers: users, RedisKeys: keys,
			LaunchRate: cfg.LaunchRate, LaunchConcurrency: cfg.LaunchConcurrency, Log: base.Log,
			Credentials: agentCredentials(base, cfg.AgentIdentity),
		})
		if err != nil {
			_ = base.Close()
			return err
		}
	}
	a, err := app.New(ctx, app.Options{
		Store:             base.Store,
		Provider:          prov,
		Params:            cfg.params(),
		Log:               base.Log,
		Clock:             base.Clock,
		ReconcileInterval: cfg.ReconcileInterval,
		IdentityLifetime:  identityLifetime(cfg.AgentIdentity),
	})
	if err != nil {
		_ = base.Close()
		return err
	}
	if err := a.RegisterMetrics(base.Telemetry.Registry); err != nil {
		_ = base.Close()
		return fmt.Errorf("provisioner: metrics: %w", err)
	}
	loomv1.RegisterClusterServiceServer(base.GRPC, &ports.ClusterServer{App: a})
	loomv1.RegisterNodeServiceServer(base.GRPC, &ports.NodeServer{App: a})
	loomv1.RegisterReservationServiceServer(base.GRPC, &ports.ReservationServer{App: a})

	consumers := []service.Consume{{
		Topics: []string{topics.ClusterCommands, topics.NodeTelemetry, topics.HealthEvents, topics.JobEvents,
			topics.RemediationCommand},
		Handler: ports.Handler(a),
		// The node reports that are waiting go in one write per batch.
		Batch: ports.BatchHandler(a), MaxBatch: cfg.MaxBatch,
		// Handlers fail only when Redis does; ride out a restart of it (about
		// a minute) before a command is dead-lettered and its operation lost.
		// Of the job events only NodeDrained matters here: the jobs' changes,
		// most of that topic, are passed over undecoded, and so are the
		// heartbeats, most of the telemetry (one per node every few seconds).
		Config: &bus.ConsumerConfig{MaxAttempts: 20, MaxBackoff: 5 * time.Second, Filter: func(r bus.Record) bool {
			switch r.Topic {
			case topics.JobEvents:
				return r.Type == nodeDrainedType
			case topics.NodeTelemetry:
				return r.Type != heartbeatType
			}
			return true
		}},
	}}
	err = base.Run(ctx, consumers, a.Reconcile, a.WatchProvider)
	if cfg.StopAgentsOnExit {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.AgentStopGrace+10*time.Second)
		defer cancel()
		if serr := a.StopAgents(sctx); serr != nil {
			err = errors.Join(err, fmt.Errorf("provisioner: stop agents: %w", serr))
		}
	}
	return err
}

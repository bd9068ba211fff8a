// Package provisioner is Loom's provisioner service. It owns clusters, node pools and nodes, and brings nodes up through a compute provider.
// See README.md beside this file for what it owns, the topics it reads and
// writes, and how it recovers.
package provisioner

import (
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
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/service"
	"github.com/loom-ml/loom/libs/topics"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/provisioner/internal/app"
	"github.com/loom-ml/loom/services/provisioner/internal/domain"
	"github.com/loom-ml/loom/services/provisioner/internal/ports"
	"github.com/loom-ml/loom/services/provisioner/internal/provider/local"
)

// Name is the service's name: its Redis prefix is "provisioner:" and its
// consumer group "loom-provisioner".
const Name = "provisioner"

// Config is the provisioner's configuration.
type Config struct {
	config.Common
	// Provider is the compute provider: "local" (LOOM_PROVIDER; default local).
	Provider string
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
}

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
	fs.StringVar(&c.Provider, "provider", config.Env("LOOM_PROVIDER", "local"), "compute provider: local (LOOM_PROVIDER)")
	fs.StringVar(&c.DataDir, "data-dir", config.Env("LOOM_DATA_DIR", defaultDataDir()),
		"root of the local provider's node and shared directories (LOOM_DATA_DIR; default ~/.loom/provisioner)")
	c.AgentCommand = strings.Fields(os.Getenv("LOOM_AGENT_COMMAND"))
	fs.Var(&listFlag{list: &c.AgentCommand}, "agent-command",
		"argv that starts an agent, space-separated (LOOM_AGENT_COMMAND; default: the agent binary beside this one)")
	c.AgentEnv = strings.Fields(os.Getenv("LOOM_AGENT_ENV"))
	fs.Var(&listFlag{list: &c.AgentEnv}, "agent-env",
		"KEY=VALUE added to each agent's environment; space-separated, repeatable (LOOM_AGENT_ENV)")
	fs.BoolVar(&c.StopAgentsOnExit, "stop-agents-on-exit", config.EnvBool("LOOM_STOP_AGENTS_ON_EXIT", false),
		"stop the nodes' agents when the provisioner stops (LOOM_STOP_AGENTS_ON_EXIT)")
	fs.DurationVar(&c.ReconcileInterval, "reconcile-interval", config.EnvDuration("LOOM_RECONCILE_INTERVAL", 5*time.Second),
		"how often the reconciler checks every node (LOOM_RECONCILE_INTERVAL)")
	fs.DurationVar(&c.AgentStopGrace, "agent-stop-grace", config.EnvDuration("LOOM_AGENT_STOP_GRACE", 15*time.Second),
		"time between SIGTERM and SIGKILL when stopping an agent (LOOM_AGENT_STOP_GRACE)")
}

// validate checks the settings and fills the defaults that need the
// environment (the agent binary, an absolute data dir).
func (c *Config) validate() error {
	var v errs.Validator
	if c.Provider == "" {
		c.Provider = "local"
	}
	v.Check(c.Provider == "local", "provider", "must be local, got %q", c.Provider)
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
	return v.Err()
}

// Run runs the provisioner until ctx ends, then shuts down gracefully.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.validate(); err != nil {
		return fmt.Errorf("provisioner config: %w", err)
	}
	base, err := service.New(ctx, Name, cfg.Common)
	if err != nil {
		return err
	}
	prov, err := local.New(local.Config{
		DataDir: cfg.DataDir, AgentCommand: cfg.AgentCommand, AgentEnv: cfg.AgentEnv,
		Brokers: cfg.Brokers, RedisAddr: cfg.RedisAddr, StopGrace: cfg.AgentStopGrace, Log: base.Log,
	})
	if err != nil {
		_ = base.Close()
		return err
	}
	a, err := app.New(ctx, app.Options{
		Store:    base.Store,
		Provider: prov,
		Params: domain.Params{
			SharedDir:       func(id string) string { return local.SharedDir(cfg.DataDir, id) },
			WorkDir:         func(id, host string) string { return local.WorkDir(cfg.DataDir, id, host) },
			MaxNodesPerPool: 64,
			MaxAccelerators: 16,
		},
		Log:               base.Log,
		ReconcileInterval: cfg.ReconcileInterval,
	})
	if err != nil {
		_ = base.Close()
		return err
	}
	loomv1.RegisterClusterServiceServer(base.GRPC, &ports.ClusterServer{App: a})
	loomv1.RegisterNodeServiceServer(base.GRPC, &ports.NodeServer{App: a})

	consumers := []service.Consume{{
		Topics:  []string{topics.ClusterCommands, topics.NodeTelemetry, topics.HealthEvents},
		Handler: ports.Handler(a),
		// Handlers fail only when Redis does; ride out a restart of it (about
		// a minute) before a command is dead-lettered and its operation lost.
		Config: &bus.ConsumerConfig{MaxAttempts: 20, MaxBackoff: 5 * time.Second},
	}}
	err = base.Run(ctx, consumers, a.Reconcile)
	if cfg.StopAgentsOnExit {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.AgentStopGrace+10*time.Second)
		defer cancel()
		if serr := a.StopAgents(sctx); serr != nil {
			err = errors.Join(err, fmt.Errorf("provisioner: stop agents: %w", serr))
		}
	}
	return err
}

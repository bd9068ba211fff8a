// Package agent is Loom's agent service. One agent runs on each node: it registers, heartbeats, and runs the steps assigned to its node as real processes.
// See README.md beside this file for what it owns, the topics it reads and
// writes, and how it recovers.
package agent

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/gpu"
	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/service"
	"github.com/loom-ml/loom/libs/topics"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/agent/internal/adapters/procruntime"
	"github.com/loom-ml/loom/services/agent/internal/app"
	"github.com/loom-ml/loom/services/agent/internal/checks"
	"github.com/loom-ml/loom/services/agent/internal/domain"
	"github.com/loom-ml/loom/services/agent/internal/ports"
	steprt "github.com/loom-ml/loom/services/agent/internal/runtime"
)

// Config is the agent's configuration.
type Config struct {
	config.Common
	// Node is the node's full name, e.g. projects/p/clusters/c/nodes/gpu-0001 (LOOM_NODE).
	Node string
	// Hostname is the Slurm-style node name (LOOM_HOSTNAME; default: the
	// last segment of Node).
	Hostname string
	// WorkDir is the node's own directory (LOOM_WORK_DIR; default: the
	// current directory).
	WorkDir string
	// GPUs is how many GPUs the node offers (LOOM_GPUS).
	GPUs int
	// HeartbeatInterval is how often the agent says it is alive
	// (LOOM_HEARTBEAT_INTERVAL; default 2s).
	HeartbeatInterval time.Duration
	// Cluster is the cluster's full name (LOOM_CLUSTER; default: derived
	// from Node).
	Cluster string
	// SharedDir is the cluster's shared directory: steps' working directory
	// and HOME (LOOM_SHARED_DIR; default WorkDir).
	SharedDir string
	// StepKillGrace is the time between SIGTERM and SIGKILL when a step is
	// stopped (LOOM_STEP_KILL_GRACE; default 10s).
	StepKillGrace time.Duration
	// JobNice is how far below the agent's CPU priority steps and their
	// tasks run, as a nice increment 0..19 (LOOM_JOB_NICE; default 10), so
	// that a job busying every CPU does not starve the agent's heartbeats
	// and commands. 0 runs them at the agent's priority.
	JobNice int
	// SlurmBin is a directory of Loom's Slurm commands (srun, scontrol, …:
	// links to the loom executable) that leads every step's and task's PATH,
	// as a Slurm node has its client commands installed, so that a batch
	// script's srun is Loom's whatever PATH it was submitted with
	// (LOOM_SLURM_BIN; default none: PATH as the job's environment says).
	SlurmBin string
	// Gateway is the gateway address the Slurm commands in jobs (srun,
	// scontrol) talk to, put in every job's environment as LOOM_GATEWAY
	// unless it has one, as a Slurm node's slurm.conf names its controller
	// (LOOM_GATEWAY; default none).
	Gateway string
	// OrphanAfter is how long the agent's control plane (Kafka, Redis) may
	// stay unreachable before the agent ends its steps and exits
	// (LOOM_AGENT_ORPHAN_AFTER; default 10m): long enough to ride out a
	// restart, so that steps go on across one, as under slurmd, but an
	// agent whose control plane is gone for good does not run forever.
	// The agent also exits when its WorkDir is removed.
	OrphanAfter time.Duration
	// Runtime names what runs the steps' and tasks' processes
	// (LOOM_AGENT_RUNTIME; default "process": process groups of the
	// agent's children on the node, internal/adapters/procruntime). It is
	// the one runtime so far; see README.md, Runtimes.
	Runtime string
	// AllowRootJobs lets jobs run as root (uid 0) on this node: jobs of
	// root, and jobs that name no owner on an agent that runs as root
	// (LOOM_AGENT_ALLOW_ROOT_JOBS; default false). Every other job runs as
	// its owner's account on the node (uid, gid, groups), which the agent,
	// running as root as slurmd does, becomes for it; a job whose owner has
	// no account here fails with that reason. `loom up` allows root for its
	// local agents: there the administrator who started it is typically
	// root and the machine is theirs. See README.md, Jobs run as their
	// owner.
	AllowRootJobs bool
	// ProgressInterval is how often the agent looks at each step's
	// progress (its LOOM_PROGRESS_FILE and output size) and reports
	// StepProgress when it moved (LOOM_PROGRESS_INTERVAL; default 5s).
	ProgressInterval time.Duration
	// AcctInterval is how often a running step's resource usage (sampled
	// each progress interval) is reported for sstat (LOOM_ACCT_INTERVAL;
	// default 30s, Slurm's JobAcctGatherFrequency; 0 or less: only with
	// the step's end).
	AcctInterval time.Duration
	// IdentityFile is where the node identity is kept (LOOM_AGENT_IDENTITY_FILE;
	// default <work dir>/identity.json, mode 0600). Without one the agent
	// bootstraps: it registers with Gateway using the bootstrap token of
	// its launch (LOOM_AGENT_BOOTSTRAP_TOKEN or _FILE).
	IdentityFile string
	// GPUConfig is the node's GPUs and their telemetry (gpu.go).
	GPUConfig
	// BootstrapToken is the launch's one-time bootstrap token. No flag
	// sets it (a command line is visible to every user in ps): Run reads
	// LOOM_AGENT_BOOTSTRAP_TOKEN or the 0600 file LOOM_AGENT_BOOTSTRAP_TOKEN_FILE
	// names when it is empty, and removes them from its environment.
	BootstrapToken string
	// CheckAddr is where the node serves its health checks' all-reduce
	// endpoint to the other nodes (LOOM_AGENT_CHECK_ADDR; default
	// 127.0.0.1:0, a free port on loopback: a real cluster gives the node's
	// address); advertised as AgentRegistered.check_addr. "off" serves none.
	CheckAddr string
	// CheckDir holds the site's health check programs, run by name
	// (LOOM_AGENT_CHECK_DIR; default none). See docs/health.md.
	CheckDir string
	// PrologChecks and EpilogChecks name the health checks run before each
	// batch step's process starts and after it ends, as Slurm's prolog and
	// epilog (LOOM_AGENT_PROLOG_CHECKS, LOOM_AGENT_EPILOG_CHECKS: comma
	// lists such as "gpu_diag,disk"; default none). A prolog check that
	// fails keeps the step from starting on this node (docs/health.md,
	// "Prolog and epilog checks").
	PrologChecks, EpilogChecks string
	// PrologTimeout bounds a step's prolog checks, all together
	// (LOOM_AGENT_PROLOG_TIMEOUT; default 30s).
	PrologTimeout time.Duration
	// EpilogTimeout bounds a step's epilog checks, all together
	// (LOOM_AGENT_EPILOG_TIMEOUT; default 0: PrologTimeout's value). The
	// epilog runs after the step's end is reported, so a site may give it
	// longer checks than it lets hold back a job's start.
	EpilogTimeout time.Duration
	// ContainerRuntime is what a step's command runs in when its env names
	// an image (LOOM_CONTAINER_IMAGE, a CustomJob's): "process" (default:
	// the node's own environment, the image ignored) or a site's argv
	// template holding {image}, e.g. `podman run --rm --network=host
	// --env-host -v {workdir}:{workdir} -w {workdir} {image}`
	// (LOOM_CONTAINER_RUNTIME; see README.md, Container runtimes).
	ContainerRuntime string
	// Metrics bound what the agent reads of steps' metrics files
	// (CLOUD_ML_HP_METRIC_FILE) and sends as MetricsReported:
	// -metrics-interval, -metrics-batch, -metrics-rate, -metrics-line-max,
	// -metrics-values-max, -metrics-name-max (README.md, Metrics).
	Metrics app.MetricsOptions
}

// RegisterFlags adds the agent's flags to fs, defaults from LOOM_* variables.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Common.Register(fs, "AGENT", "127.0.0.1:0", "127.0.0.1:0")
	fs.StringVar(&c.Node, "node", config.Env("LOOM_NODE", ""), "the node's full name, projects/p/clusters/c/nodes/h (LOOM_NODE)")
	fs.StringVar(&c.Hostname, "hostname", config.Env("LOOM_HOSTNAME", ""), "the node's hostname (LOOM_HOSTNAME; default: the node name's last segment)")
	fs.StringVar(&c.WorkDir, "work-dir", config.Env("LOOM_WORK_DIR", ""), "the node's own directory (LOOM_WORK_DIR; default: the current directory)")
	fs.StringVar(&c.Cluster, "cluster", config.Env("LOOM_CLUSTER", ""), "the cluster's full name (LOOM_CLUSTER; default: from the node name)")
	fs.StringVar(&c.SharedDir, "shared-dir", config.Env("LOOM_SHARED_DIR", ""), "the cluster's shared directory (LOOM_SHARED_DIR; default: the work dir)")
	fs.IntVar(&c.GPUs, "gpus", int(config.EnvInt("LOOM_GPUS", 0)), "GPUs the node offers (LOOM_GPUS)")
	fs.DurationVar(&c.HeartbeatInterval, "heartbeat-interval", config.EnvDuration("LOOM_HEARTBEAT_INTERVAL", 2*time.Second),
		"how often the agent heartbeats (LOOM_HEARTBEAT_INTERVAL)")
	fs.IntVar(&c.JobNice, "job-nice", int(config.EnvInt("LOOM_JOB_NICE", DefaultJobNice)), "how far below the agent's CPU priority jobs run, a nice increment 0..19 (LOOM_JOB_NICE)")
	fs.StringVar(&c.SlurmBin, "slurm-bin", config.Env("LOOM_SLURM_BIN", ""),
		"a directory of Loom's Slurm commands put first on every job's PATH (LOOM_SLURM_BIN; default: none)")
	fs.StringVar(&c.Gateway, "gateway", config.Env("LOOM_GATEWAY", ""),
		"the gateway the Slurm commands in jobs use, set as their LOOM_GATEWAY unless they have one (LOOM_GATEWAY; default: none)")
	fs.DurationVar(&c.OrphanAfter, "orphan-after", config.EnvDuration("LOOM_AGENT_ORPHAN_AFTER", app.DefaultOrphanAfter),
		"how long the control plane (Kafka, Redis) may be unreachable before the agent ends its steps and exits (LOOM_AGENT_ORPHAN_AFTER)")
	fs.StringVar(&c.Runtime, "runtime", config.Env("LOOM_AGENT_RUNTIME", procruntime.Name),
		"what runs the steps' processes: "+procruntime.Name+" (LOOM_AGENT_RUNTIME)")
	fs.BoolVar(&c.AllowRootJobs, "allow-root-jobs", config.EnvBool("LOOM_AGENT_ALLOW_ROOT_JOBS", false),
		"let jobs run as root (uid 0) on this node: root's jobs, and jobs with no owner on an agent that runs as root (LOOM_AGENT_ALLOW_ROOT_JOBS)")
	fs.StringVar(&c.IdentityFile, "identity-file", config.Env("LOOM_AGENT_IDENTITY_FILE", ""),
		"the node identity's file, 0600 (LOOM_AGENT_IDENTITY_FILE; default <work-dir>/"+IdentityFile+")")
	fs.StringVar(&c.CheckAddr, "check-addr", config.Env("LOOM_AGENT_CHECK_ADDR", "127.0.0.1:0"),
		"where the node serves the health checks' all-reduce endpoint, host:port, or off (LOOM_AGENT_CHECK_ADDR)")
	fs.StringVar(&c.CheckDir, "check-dir", config.Env("LOOM_AGENT_CHECK_DIR", ""),
		"a directory of the site's health check programs (LOOM_AGENT_CHECK_DIR; default: none)")
	fs.StringVar(&c.PrologChecks, "prolog-checks", config.Env("LOOM_AGENT_PROLOG_CHECKS", ""),
		"health checks run before each job's batch step starts, comma-separated, e.g. gpu_diag,disk; one that fails keeps the job off the node (LOOM_AGENT_PROLOG_CHECKS; default: none)")
	fs.StringVar(&c.EpilogChecks, "epilog-checks", config.Env("LOOM_AGENT_EPILOG_CHECKS", ""),
		"health checks run after each job's batch step ends, comma-separated (LOOM_AGENT_EPILOG_CHECKS; default: none)")
	fs.DurationVar(&c.PrologTimeout, "prolog-timeout", config.EnvDuration("LOOM_AGENT_PROLOG_TIMEOUT", app.DefaultPrologTimeout),
		"how long a step's prolog checks may take together (LOOM_AGENT_PROLOG_TIMEOUT)")
	fs.DurationVar(&c.EpilogTimeout, "epilog-timeout", config.EnvDuration("LOOM_AGENT_EPILOG_TIMEOUT", 0),
		"how long a step's epilog checks may take together; 0: -prolog-timeout's value (LOOM_AGENT_EPILOG_TIMEOUT)")
	c.registerGPUFlags(fs)
	fs.StringVar(&c.ContainerRuntime, "container-runtime", config.Env("LOOM_CONTAINER_RUNTIME", steprt.Process),
		"what a step's command runs in when its env names LOOM_CONTAINER_IMAGE: "+steprt.Process+" (the node itself, the image ignored) or an argv template with {image}, e.g. 'podman run --rm --network=host --env-host -v {workdir}:{workdir} -w {workdir} {image}' (LOOM_CONTAINER_RUNTIME)")
	fs.DurationVar(&c.Metrics.Interval, "metrics-interval", config.EnvDuration("LOOM_AGENT_METRICS_INTERVAL", app.DefaultMetricsInterval),
		"how often the agent reads each step's metrics file, CLOUD_ML_HP_METRIC_FILE (LOOM_AGENT_METRICS_INTERVAL)")
	fs.IntVar(&c.Metrics.Batch, "metrics-batch", int(config.EnvInt("LOOM_AGENT_METRICS_BATCH", app.DefaultMetricsBatch)),
		"the most metric points one MetricsReported carries (LOOM_AGENT_METRICS_BATCH)")
	fs.Float64Var(&c.Metrics.Rate, "metrics-rate", config.EnvFloat("LOOM_AGENT_METRICS_RATE", app.DefaultMetricsRate),
		"the most MetricsReported records a second per step; more lines wait in the file (LOOM_AGENT_METRICS_RATE)")
	fs.IntVar(&c.Metrics.Limits.Line, "metrics-line-max", int(config.EnvInt("LOOM_AGENT_METRICS_LINE_MAX", int64(domain.DefaultMetricLimits.Line))),
		"the longest metrics line taken, in bytes; a longer one is dropped (LOOM_AGENT_METRICS_LINE_MAX)")
	fs.IntVar(&c.Metrics.Limits.Values, "metrics-values-max", int(config.EnvInt("LOOM_AGENT_METRICS_VALUES_MAX", int64(domain.DefaultMetricLimits.Values))),
		"the most values one metrics line may carry; a line with more is dropped (LOOM_AGENT_METRICS_VALUES_MAX)")
	fs.IntVar(&c.Metrics.Limits.Name, "metrics-name-max", int(config.EnvInt("LOOM_AGENT_METRICS_NAME_MAX", int64(domain.DefaultMetricLimits.Name))),
		"the longest metric name, in bytes; a line with a longer one is dropped (LOOM_AGENT_METRICS_NAME_MAX)")
	fs.DurationVar(&c.ProgressInterval, "progress-interval", config.EnvDuration("LOOM_PROGRESS_INTERVAL", app.DefaultProgressInterval),
		"how often the agent looks at its steps' progress files and output, and reports StepProgress when they moved (LOOM_PROGRESS_INTERVAL)")
	fs.DurationVar(&c.AcctInterval, "acct-interval", config.EnvDuration("LOOM_ACCT_INTERVAL", domain.DefaultAcctInterval),
		"how often a running step's resource usage is reported for sstat; 0 or less: only with its end (LOOM_ACCT_INTERVAL)")
	fs.DurationVar(&c.StepKillGrace, "step-kill-grace", config.EnvDuration("LOOM_STEP_KILL_GRACE", 10*time.Second),
		"time between SIGTERM and SIGKILL when a step is stopped (LOOM_STEP_KILL_GRACE)")
}

// DefaultJobNice is Config.JobNice when LOOM_JOB_NICE is unset: what the
// nice command gives by default.
const DefaultJobNice = 10

// validate checks the settings and fills the derived defaults. It returns
// the cluster id.
func (c *Config) validate() (string, error) {
	var v errs.Validator
	// The project by shape; the cluster id and hostname name directories,
	// Redis prefixes and consumer groups, so they must be valid ids.
	node, err := resname.SplitNode(c.Node)
	if err == nil && (!resname.ValidID(node.Cluster.ID) || !resname.ValidID(node.Host)) {
		err = fmt.Errorf("the cluster id and hostname of %q must match %s", c.Node, resname.IDPattern)
	}
	if err != nil {
		v.Add("node", "%v", err)
		return "", v.Err()
	}
	cluster := node.Cluster.String()
	if c.Cluster == "" {
		c.Cluster = cluster
	}
	v.Check(c.Cluster == cluster, "cluster", "must be the node's cluster %s, got %q", cluster, c.Cluster)
	if c.Hostname == "" {
		c.Hostname = node.Host
	}
	v.Check(c.Hostname == node.Host, "hostname", "must be the node name's last segment %q, got %q", node.Host, c.Hostname)
	v.Check(c.GPUs >= 0, "gpus", "must be a number >= 0")
	v.Check(c.JobNice >= 0 && c.JobNice <= 19, "job_nice", "must be a number from 0 to 19 (a nice increment: jobs never run above the agent)")
	if c.Runtime == "" {
		c.Runtime = procruntime.Name
	}
	if _, err := newRuntime(c.Runtime, procruntime.Options{}); err != nil {
		v.Add("runtime", "%v", err)
	}
	if c.WorkDir == "" {
		c.WorkDir = "."
	}
	for _, d := range []*string{&c.WorkDir, &c.SharedDir, &c.SlurmBin} {
		if *d == "" {
			continue
		}
		abs, err := filepath.Abs(*d)
		if err != nil {
			v.Add("work_dir", "%v", err)
		}
		*d = abs
	}
	if c.SharedDir == "" {
		c.SharedDir = c.WorkDir
	}
	if c.SlurmBin != "" {
		if fi, err := os.Stat(c.SlurmBin); err != nil || !fi.IsDir() {
			v.Add("slurm_bin", "must be a directory of Loom's Slurm commands, got %q", c.SlurmBin)
		}
	}
	c.validateGPU(&v)
	c.validateJobChecks(&v)
	if _, err := steprt.New(c.ContainerRuntime); err != nil {
		v.Add("container_runtime", "%v", err)
	}
	v.Check(c.Metrics.Interval >= 0 && c.Metrics.Batch >= 0 && c.Metrics.Rate >= 0 && c.Metrics.Limits.Line >= 0 &&
		c.Metrics.Limits.Values >= 0 && c.Metrics.Limits.Name >= 0, "metrics", "the metrics bounds must not be negative")
	v.Check(c.Metrics.Batch <= 10000 && c.Metrics.Limits.Line <= 1<<20 && c.Metrics.Limits.Values <= 10000,
		"metrics", "at most 10000 points a record, 1 MiB a line and 10000 values a line")
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = 2 * time.Second
	}
	if c.StepKillGrace <= 0 {
		c.StepKillGrace = 10 * time.Second
	}
	if c.OrphanAfter == 0 {
		c.OrphanAfter = app.DefaultOrphanAfter
	}
	if c.ProgressInterval <= 0 {
		c.ProgressInterval = app.DefaultProgressInterval
	}
	// Heartbeats and Redis pings come once an interval: a shorter bound
	// would end an agent that only waited for its next check.
	v.Check(c.OrphanAfter >= 2*c.HeartbeatInterval, "orphan_after", "must be at least twice the heartbeat interval (%s), got %s", c.HeartbeatInterval, c.OrphanAfter)
	return node.Cluster.ID, v.Err()
}

// newRuntime returns the runtime named name (Config.Runtime), configured
// with opts.
func newRuntime(name string, opts procruntime.Options) (ports.Runtime, error) {
	switch name {
	case procruntime.Name:
		return procruntime.New(opts), nil
	}
	return nil, fmt.Errorf("must be %q, the one runtime so far; got %q", procruntime.Name, name)
}

// StepsDir is the directory of the node's work dir where each step's and
// task's shim keeps its pidfile (<file-safe step id>.pid, libs/proc's
// format: pid and start time) while it runs, and its job's exit status
// after: the provisioner kills those process groups when it reboots or
// reimages the node, fault injection stops them.
const StepsDir = "steps"

// ServiceName is the agent's service name for a node: its Redis prefix is
// "<name>:" and its consumer group "loom-<name>", its own among the agents
// (service.AgentName, which the provisioner names its Redis user by).
func ServiceName(clusterID, hostname string) string {
	return service.AgentName(clusterID, hostname)
}

// RunArgs runs the agent from a command line (args, without the program
// name): RegisterFlags' flags, each defaulting to its LOOM_* variable,
// then Run until ctx ends. A command line that does not parse is a
// *config.UsageError. The agent binary and loom's in-process stack both
// start the agent here, so that its command line is read in one place.
func RunArgs(ctx context.Context, args []string) error {
	cfg, err := config.ParseArgs("agent", args, (*Config).RegisterFlags)
	if err != nil {
		return err
	}
	return Run(ctx, cfg)
}

// Run runs the agent until ctx ends, then shuts down gracefully: the steps
// it runs are stopped and reported STEP_KILLED before it returns.
//
// The agent also ends itself, with an error saying why: when its work
// directory is removed (its steps are stopped and reported STEP_KILLED with
// that reason when Redis answers), and when its control plane has been
// unreachable for cfg.OrphanAfter, or never answered within it (its steps
// are killed unrecorded; a later start reports them LOST).
func Run(ctx context.Context, cfg Config) error {
	clusterID, err := cfg.validate()
	if err != nil {
		return fmt.Errorf("agent config: %w", err)
	}
	// One agent per node: holding the node's lock proves every earlier
	// agent of the node dead, which lets this one take over their relay
	// lease and group memberships at once (lock.go).
	lock, err := lockNode(ctx, cfg.WorkDir, cfg.Node, lockWait, slog.Default())
	if err != nil {
		return err
	}
	defer lock.Close()
	// Steps and tasks run under shims that outlive the agent, their
	// pidfiles and exit statuses in <work dir>/steps (see README.md,
	// Shutdown and crash recovery).
	rt, err := newRuntime(cfg.Runtime, procruntime.Options{AllowRoot: cfg.AllowRootJobs, Node: cfg.Hostname,
		StateDir: filepath.Join(cfg.WorkDir, StepsDir)})
	if err != nil {
		return fmt.Errorf("agent config: %w", err)
	}
	container, err := steprt.New(cfg.ContainerRuntime)
	if err != nil {
		return fmt.Errorf("agent config: %w", err)
	}
	// A mistyped LOOM_* value stops the agent before it bootstraps (as
	// service.New would stop it after).
	if err := config.CheckEnv(); err != nil {
		return fmt.Errorf("agent %s: environment: %w", cfg.Node, err)
	}
	nctx, ncancel := context.WithTimeout(ctx, cfg.OrphanAfter)
	var id *identity
	if !cfg.InsecureBus {
		// The node proves who it is before it reads or writes anything:
		// its events are signed with its key, and it trusts only commands
		// the services' key signed.
		id, err = nodeIdentity(nctx, cfg, slog.Default())
		if err != nil {
			ncancel()
			return fmt.Errorf("agent %s: %w", cfg.Node, err)
		}
		defer id.close()
		cfg.ServicePublicKey = id.current().ServicePublicKey
	}
	// An agent never signs as a service, even where the services' key file
	// leaked into its environment.
	cfg.ServiceKeyFile = ""
	base, err := service.New(nctx, ServiceName(clusterID, cfg.Hostname), cfg.Common)
	ncancel()
	if err == nil && id != nil {
		err = id.sign(base.Producer)
	}
	if err != nil {
		if ctx.Err() == nil && nctx.Err() != nil {
			return fmt.Errorf("agent %s: exiting: its control plane did not answer within LOOM_AGENT_ORPHAN_AFTER (%s): %w",
				cfg.Node, cfg.OrphanAfter, err)
		}
		return err
	}
	// A killed predecessor's relay lease would hold this agent's
	// registration back until it expired.
	if lock.held {
		if broke, err := base.Store.BreakRelayLease(ctx); err != nil {
			base.Log.Warn("could not take over the previous agent's outbox relay lease; publishing waits for it to expire", "err", err)
		} else if broke {
			base.Log.Info("took over the previous agent's outbox relay lease")
		}
	}
	// Where the node's step commands stood at this start: the agent works
	// through that backlog before it starts anything, so that a start
	// whose stop follows in it never runs, and a node declared dead stops
	// what it ran (the scheduler sends it stops) before it starts anything
	// new.
	group := "loom-" + ServiceName(clusterID, cfg.Hostname)
	bctx, bcancel := context.WithTimeout(ctx, 30*time.Second)
	bl, berr := newBacklog(bctx, cfg.Brokers, base.Kafka, group, cfg.Node)
	bcancel()
	if berr != nil {
		base.Log.Warn("starting steps without working through the step command backlog first", "err", berr)
	} else {
		defer bl.close()
	}
	// The health checks' endpoint is bound before the agent registers, so
	// that the address it advertises already answers.
	checkLn, err := listenChecks(cfg.CheckAddr)
	if err != nil {
		_ = base.Close()
		return fmt.Errorf("agent %s: %w", cfg.Node, err)
	}
	node, err := startNode(&cfg, base)
	if err != nil {
		closeListener(checkLn)
		_ = base.Close()
		return err
	}
	defer cfg.Device.Close()
	// The check runner is what RunHealthCheck commands run (the node
	// commands' consumer calls its Run) and serves the all-reduce endpoint.
	// A node busy with steps refuses checks that do not allow it.
	var a *app.App
	checker := newChecker(cfg, cfg.Device, func() bool { return a.Running() > 0 }, id, base.Log)
	a, err = app.New(ctx, app.Options{
		Store: base.Store, Publisher: node.HeartbeatGate(base.Producer), Runtime: rt,
		NodeEnv: nodeEnv(&cfg), SimulatedGPUs: cfg.Device.Simulated(), GPUReading: node.LastGPUs,
		Self:     domain.Self{Node: cfg.Node, Cluster: cfg.Cluster},
		Hostname: cfg.Hostname, GPUs: cfg.GPUs, WorkDir: cfg.WorkDir, SharedDir: cfg.SharedDir,
		KillGrace: cfg.StepKillGrace, HeartbeatInterval: cfg.HeartbeatInterval, JobNice: cfg.JobNice, SlurmBin: cfg.SlurmBin, Gateway: cfg.Gateway,
		OrphanAfter: cfg.OrphanAfter, Log: base.Log,
		Clock:         base.Clock,
		WorkloadToken: id.tokens(),
		CheckAddr:     checkAddr(checkLn),
		HoldStarts:    bl != nil, ProgressInterval: cfg.ProgressInterval, AcctInterval: acctInterval(cfg.AcctInterval),
		JobChecks: cfg.jobChecks(), JobCheckRunner: node,
		Container: container, Metrics: cfg.Metrics,
	})
	if err == nil {
		node.SetChecks(checker)
		if base.Telemetry != nil && base.Telemetry.Registry != nil {
			err = base.Telemetry.Registry.Register(a.MetricsCollector())
			if err == nil {
				err = base.Telemetry.Registry.Register(checker.Collector())
			}
		}
	}
	if err == nil {
		err = a.Recover(ctx)
	}
	if err != nil {
		closeListener(checkLn)
		_ = base.Close()
		return err
	}

	// The service runs on a context of its own, so that at shutdown the
	// steps are killed and their ends published before the relay and the
	// consumer stop.
	runCtx, cancelRun := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRun()
	runDone := make(chan struct{})
	stopped := make(chan struct{})
	exits := make(chan *domain.SelfExit, 1)
	go func() { exits <- a.Watch(runCtx) }()
	var selfExit *domain.SelfExit
	go func() {
		defer close(stopped)
		select {
		case <-ctx.Done():
			shutdown(base, a, cfg, nil)
		case selfExit = <-exits:
			shutdown(base, a, cfg, selfExit)
		case <-runDone:
		}
		// Cancel before releasing, so that a StartStep held back returns
		// to a consumer that is stopping and stays uncommitted.
		cancelRun()
		a.Release()
	}()

	consumers := []service.Consume{{
		Topics:  []string{topics.StepCommands},
		Handler: openCommands(cfg.Node, id, base.Log, ports.Handler(a)), // sealed for this node: opened first (seal.go)
		// Handlers fail only when Redis does; ride out a restart of it (about
		// a minute) before a step command is dead-lettered. The topic is
		// keyed by node: the agent reads only its node's partition, and
		// passes over the other nodes' commands there undecoded.
		// Only what a service signed is a command: a forged StartStep is
		// dead-lettered, never run.
		Config: &bus.ConsumerConfig{MaxAttempts: 20, MaxBackoff: 5 * time.Second, PartitionKey: cfg.Node, SoleMember: lock.held,
			Filter: func(r bus.Record) bool { return r.Key == cfg.Node }, Policy: envelope.ServicesOnly},
	}}
	consumers = append(consumers, nodeConsume(&cfg, clusterID, node, lock.held))
	loops := []func(context.Context) error{a.Heartbeats, node.Telemetry, node.Xids}
	if checkLn != nil {
		loops = append(loops, func(ctx context.Context) error { return checker.Serve(ctx, checkLn) })
	}
	loops = append(loops, a.ProgressLoop, a.MetricsLoop)
	if bl != nil {
		loops = append(loops, func(ctx context.Context) error {
			bl.await(ctx, time.Minute, base.Log)
			a.CaughtUp()
			return nil
		})
	}
	if id != nil {
		loops = append(loops, id.renewLoop)
	}
	err = base.Run(runCtx, consumers, loops...)
	close(runDone)
	<-stopped
	if ctx.Err() == nil || a.Running() > 0 {
		// The service failed on its own (or the shutdown ran out of time):
		// nothing may run unobserved; a restart reports these steps LOST.
		a.KillAll()
	}
	if selfExit != nil {
		return fmt.Errorf("agent %s: exited on its own: %s", cfg.Node, selfExit.Reason)
	}
	if err != nil {
		return err
	}
	if ctx.Err() == nil {
		return fmt.Errorf("agent %s: stopped unexpectedly", cfg.Node)
	}
	return nil
}

// selfExitCloseBound bounds closing the producer when the agent exits on
// its own: time enough to flush to a broker that answers, not the ~13 s of
// retries a gone one costs.
const selfExitCloseBound = 2 * time.Second

// shutdown ends what the agent runs before its consumer and relay stop: for
// a stop asked for (exit nil) or an exit of its own, while its store
// answers, every step is stopped and its KILLED record published; an
// orphaned agent, or one whose store does not answer, kills its steps
// unrecorded (nothing can be written), and its next start reports them
// LOST.
func shutdown(base *service.Base, a *app.App, cfg Config, exit *domain.SelfExit) {
	sctx, cancel := context.WithTimeout(context.Background(), cfg.StepKillGrace+5*time.Second)
	defer cancel()
	if exit != nil {
		// What the producer still holds is worth nothing now (heartbeats;
		// the outbox keeps its own records in Redis): a broker that is
		// gone must not hold the exit for the writer's retries.
		base.BoundClose(selfExitCloseBound)
		base.Log.Error("agent exiting on its own: "+exit.Reason+"; ending the steps it runs", "running", a.Running())
	}
	pctx, pcancel := context.WithTimeout(sctx, time.Second)
	reachable := (exit == nil || !exit.Orphaned) && base.Redis.Ping(pctx).Err() == nil
	pcancel()
	if !reachable {
		// Nothing can be written (a stopped `loom up` took its Redis
		// along, and `loom down` stops the agent): the steps end
		// unrecorded rather than wait, past the stop's grace, for writes
		// that cannot succeed.
		why := "its store does not answer"
		if exit != nil {
			why = exit.Reason
		}
		if exit == nil {
			base.BoundClose(selfExitCloseBound)
			base.Log.Warn("agent stopping with its store unreachable; ending the steps it runs unrecorded", "running", a.Running())
		}
		a.Abandon(sctx, why)
		return
	}
	why := ""
	if exit != nil {
		why = "agent exiting: " + exit.Reason
	}
	a.ShutdownBecause(sctx, why)
	dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Second)
	a.Drain(dctx)
	dcancel()
}

// listenChecks binds the health checks' endpoint; "off" or "" binds none.
func listenChecks(addr string) (net.Listener, error) {
	if addr == "" || addr == "off" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("health check endpoint -check-addr %s: %w", addr, err)
	}
	return ln, nil
}

func checkAddr(ln net.Listener) string {
	if ln == nil {
		return ""
	}
	return ln.Addr().String()
}

func closeListener(ln net.Listener) {
	if ln != nil {
		_ = ln.Close()
	}
}

// newChecker is the node's check runner: what RunHealthCheck commands run
// (the node-commands consumer hands them to its Run) and what serves the
// all-reduce endpoint. dev is the node's GPUs (nil: none); id is the node's
// identity (nil on an insecure bus), with which the endpoint authenticates
// its peers.
func newChecker(cfg Config, dev gpu.Device, busy func() bool, id *identity, log *slog.Logger) *checks.Runner {
	c := checks.Config{Node: cfg.Node, Hostname: cfg.Hostname, Cluster: cfg.Cluster, WorkDir: cfg.WorkDir, GPUs: cfg.GPUs,
		CheckDir: cfg.CheckDir, Busy: busy, Log: log}
	if id != nil {
		c.Identity = id.current
	}
	if dev != nil {
		// The disk check sees what the device says of the disks: an
		// injected FAULT_DISK_FULL too.
		c.Device = dev
		c.Disks = func(paths ...string) []*loomv1.DiskSample { return gpu.Disks(dev, paths...) }
	}
	return checks.New(c)
}

// acctInterval is the app's AcctInterval for the flag's value: the app
// reads 0 as its default and a negative one as off.
func acctInterval(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}

// Package scheduler is Loom's scheduler service. It owns jobs and their runs, and places jobs on the nodes of running clusters.
// See README.md beside this file for what it owns, the topics it reads and
// writes, how it decides, and how it recovers.
package scheduler

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/service"
	"github.com/loom-ml/loom/libs/slurmspec"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler/internal/adapters"
	"github.com/loom-ml/loom/services/scheduler/internal/app"
	"github.com/loom-ml/loom/services/scheduler/internal/domain"
	"github.com/loom-ml/loom/services/scheduler/internal/ports"
	"github.com/loom-ml/loom/services/scheduler/internal/slurmbackend"
)

// DefaultMasterAddr is MASTER_ADDR by default: the local provider runs every
// node of a cluster on this machine, where hostnames like "gpu-0001" do not
// resolve.
const DefaultMasterAddr = "127.0.0.1"

// Defaults of the service's own settings.
const (
	// DefaultTickInterval is how often time limits, grace periods, begin
	// times and drain deadlines are checked.
	DefaultTickInterval = time.Second
	// DefaultLeaseTTL is how long the leader lease lasts without renewal:
	// a crashed leader's successor takes over within it.
	DefaultLeaseTTL = 5 * time.Second
	// DefaultRefreshInterval is how often a follower brings its memory up
	// to what the leader wrote: from the change log, a few records (a
	// reload of every record, when the log cannot, is bounded by the app:
	// no sooner than ten times the last one took).
	DefaultRefreshInterval = 2 * time.Second
	// DefaultMaxBatch bounds how many waiting events one change takes (one
	// scheduling pass, one store write): enough to amortise both under a
	// burst, small enough that a change stays well under a millisecond's
	// worth of Redis work.
	DefaultMaxBatch = 64
)

// Config is the scheduler's configuration.
type Config struct {
	config.Common
	// MasterAddr is the MASTER_ADDR every step is given
	// (LOOM_SCHEDULER_MASTER_ADDR; default 127.0.0.1). Empty means the
	// hostname of the job's first node, as under Slurm, for providers whose
	// hostnames resolve.
	MasterAddr string
	// TickInterval is how often the clock runs (default DefaultTickInterval);
	// a time limit or deadline is acted on at most this late.
	TickInterval time.Duration
	// Domain holds the scheduling policy, priority weights, QOS table and
	// preemption grace (zero fields: domain defaults).
	Domain domain.Config
	// InstanceID names this instance in the leader lease (default host-pid).
	InstanceID string
	// LeaseTTL and RefreshInterval: see DefaultLeaseTTL, DefaultRefreshInterval.
	LeaseTTL        time.Duration
	RefreshInterval time.Duration
	// MaxBatch is how many events that are already waiting one change may
	// take (LOOM_SCHEDULER_MAX_BATCH; default DefaultMaxBatch); 1 handles
	// every event on its own.
	MaxBatch int
	// MinJobAge is how long an ended job stays in the scheduler's state
	// after its end (LOOM_SCHEDULER_MIN_JOB_AGE; default 5m, Slurm's
	// MinJobAge): see domain.Retention.
	MinJobAge time.Duration

	// Backend is the scheduler backend (LOOM_SCHEDULER_BACKEND): BackendBuiltin
	// (the default: this engine, node agents run the steps) or BackendSlurm
	// (jobs go to a real Slurm through slurmrestd: docs/slurm-backend.md).
	// "" is BackendBuiltin.
	Backend string
	// Slurm configures BackendSlurm.
	Slurm SlurmConfig

	policy, qos string
	maxInfra    int
}

// The scheduler backends (-backend).
const (
	BackendBuiltin = "builtin"
	BackendSlurm   = "slurm"
)

// SlurmConfig is the Slurm backend's configuration (-backend=slurm).
type SlurmConfig struct {
	// URL is slurmrestd's base URL (LOOM_SCHEDULER_SLURM_URL).
	URL string
	// JWTKey is the path of slurmctld's JWT key, jwt_hs256.key
	// (LOOM_SCHEDULER_SLURM_JWT_KEY): the backend mints each job owner's
	// token with it (slurmbackend.Signer says why not scontrol token).
	JWTKey string
	// TokenLifespan is how long each minted token lasts
	// (LOOM_SCHEDULER_SLURM_TOKEN_LIFESPAN; default 10m).
	TokenLifespan time.Duration
	// ReadUser is the Slurm user the poll lists every job as, and an
	// administrator's scontrol hold and release are made as
	// (LOOM_SCHEDULER_SLURM_READ_USER; default root).
	ReadUser string
	// Poll is how often Slurm's jobs are read
	// (LOOM_SCHEDULER_SLURM_POLL; default slurmbackend.DefaultPoll).
	Poll time.Duration
	// AllowRootJobs lets root's jobs go to Slurm and run as root
	// (LOOM_SCHEDULER_SLURM_ALLOW_ROOT_JOBS; default off): the agent's
	// -allow-root-jobs for this backend (slurmbackend.Config.AllowRootJobs).
	AllowRootJobs bool
	// RefusedOwners are the owners whose jobs end FAILED rather than run
	// in Slurm, besides root (LOOM_SCHEDULER_SLURM_REFUSED_OWNERS,
	// comma-separated; default slurm: slurmbackend.Config.RefusedOwners).
	RefusedOwners []string
}

// RegisterFlags adds the scheduler's flags to fs, defaults from LOOM_* variables.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Common.Register(fs, "SCHEDULER", "127.0.0.1:7072", "127.0.0.1:9172")
	env := func(name, def string) string { return config.Env("LOOM_SCHEDULER_"+name, def) }
	envInt := func(name string, def int64) int64 { return config.EnvInt("LOOM_SCHEDULER_"+name, def) }
	fs.StringVar(&c.MasterAddr, "master-addr", env("MASTER_ADDR", DefaultMasterAddr),
		"MASTER_ADDR given to every step; empty means the job's first hostname (LOOM_SCHEDULER_MASTER_ADDR; default "+DefaultMasterAddr+")")
	fs.DurationVar(&c.TickInterval, "tick", config.EnvDuration("LOOM_SCHEDULER_TICK", DefaultTickInterval),
		"how often time limits, grace periods and deadlines are checked (LOOM_SCHEDULER_TICK)")
	fs.StringVar(&c.policy, "policy", env("POLICY", "loom"),
		"scheduling policy: loom (multifactor priority, backfill, preemption), easy (FCFS with EASY backfill) or fifo (LOOM_SCHEDULER_POLICY)")
	w := &c.Domain.Weights
	fs.Int64Var(&w.Age, "weight-age", envInt("WEIGHT_AGE", domain.DefaultWeightAge), "priority weight of age (LOOM_SCHEDULER_WEIGHT_AGE)")
	fs.Int64Var(&w.FairShare, "weight-fairshare", envInt("WEIGHT_FAIRSHARE", domain.DefaultWeightFairShare), "priority weight of fair share (LOOM_SCHEDULER_WEIGHT_FAIRSHARE)")
	fs.Int64Var(&w.JobSize, "weight-jobsize", envInt("WEIGHT_JOBSIZE", domain.DefaultWeightJobSize), "priority weight of job size (LOOM_SCHEDULER_WEIGHT_JOBSIZE)")
	fs.Int64Var(&w.Partition, "weight-partition", envInt("WEIGHT_PARTITION", domain.DefaultWeightPartition), "priority weight of the partition's PriorityTier (LOOM_SCHEDULER_WEIGHT_PARTITION)")
	fs.Int64Var(&w.QOS, "weight-qos", envInt("WEIGHT_QOS", domain.DefaultWeightQOS), "priority weight of the QOS (LOOM_SCHEDULER_WEIGHT_QOS)")
	fs.DurationVar(&c.Domain.MaxAge, "priority-max-age", config.EnvDuration("LOOM_SCHEDULER_PRIORITY_MAX_AGE", domain.DefaultMaxAge),
		"age at which the age factor is full (LOOM_SCHEDULER_PRIORITY_MAX_AGE)")
	fs.DurationVar(&c.Domain.HalfLife, "fairshare-half-life", config.EnvDuration("LOOM_SCHEDULER_FAIRSHARE_HALF_LIFE", domain.DefaultHalfLife),
		"half-life of fair-share usage (LOOM_SCHEDULER_FAIRSHARE_HALF_LIFE)")
	fs.StringVar(&c.qos, "qos", env("QOS", domain.FormatQOS(domain.DefaultQOS())),
		"QOS table: name:priority[:preempt=a|b][:maxgpus=N],... (LOOM_SCHEDULER_QOS)")
	fs.StringVar(&c.Domain.DefaultQOS, "default-qos", env("DEFAULT_QOS", domain.DefaultQOSName), "QOS of jobs that name none (LOOM_SCHEDULER_DEFAULT_QOS)")
	fs.DurationVar(&c.Domain.PreemptGrace, "preempt-grace", config.EnvDuration("LOOM_SCHEDULER_PREEMPT_GRACE", domain.DefaultPreemptGrace),
		"time a preempted job has after its --signal before it is requeued (LOOM_SCHEDULER_PREEMPT_GRACE)")
	fs.DurationVar(&c.Domain.RequeueStopWait, "requeue-stop-wait", config.EnvDuration("LOOM_SCHEDULER_REQUEUE_STOP_WAIT", domain.DefaultRequeueStopWait),
		"longest a requeued job waits for its old run's processes to be reported gone before it may start again (LOOM_SCHEDULER_REQUEUE_STOP_WAIT)")
	fs.DurationVar(&c.Domain.FenceTimeout, "fence-timeout", config.EnvDuration("LOOM_SCHEDULER_FENCE_TIMEOUT", domain.DefaultFenceTimeout),
		"longest a run holds a failed node whose processes may still run there (and its job's next attempt waits) unless the step ends or the node is repaired or removed (LOOM_SCHEDULER_FENCE_TIMEOUT)")
	fs.DurationVar(&c.Domain.CheckpointGrace, "checkpoint-grace", config.EnvDuration("LOOM_SCHEDULER_CHECKPOINT_GRACE", domain.DefaultCheckpointGrace),
		"how long a checkpoint-aware drain waits for a new checkpoint after the job's --signal before requeueing it (LOOM_SCHEDULER_CHECKPOINT_GRACE)")
	fs.DurationVar(&c.Domain.FailureCheckpointWait, "failure-checkpoint-wait", config.EnvDuration("LOOM_SCHEDULER_FAILURE_CHECKPOINT_WAIT", domain.DefaultFailureCheckpointWait),
		"checkpoint on failure: when a node of a multi-node job fails, its steps on the other nodes get the job's --signal (default USR1) and are stopped at their first new checkpoint, or after this long for a job without --signal (with one: -checkpoint-grace) (LOOM_SCHEDULER_FAILURE_CHECKPOINT_WAIT; 0 = off: stopped at once)")
	fs.DurationVar(&c.Domain.HangTimeout, "hang-timeout", config.EnvDuration("LOOM_SCHEDULER_HANG_TIMEOUT", 0),
		"a run with no progress for that long is ended as hung and requeued (a job's hang_timeout_seconds overrides it, -1 turning it off; LOOM_SCHEDULER_HANG_TIMEOUT; 0 = off)")
	fs.IntVar(&c.maxInfra, "max-infra-restarts", int(envInt("MAX_INFRA_RESTARTS", domain.DefaultMaxInfraRestarts)),
		"most requeues of a job for node failures, hangs and health actions, which do not use its max_retries; past it the job ends NODE_FAIL (LOOM_SCHEDULER_MAX_INFRA_RESTARTS)")
	fs.Int64Var(&c.Domain.MaxStepRequestBytes, "max-step-request-bytes", envInt("MAX_STEP_REQUEST_BYTES", domain.DefaultMaxStepRequestBytes),
		"most bytes of waiting job steps' requests (srun's command and environment) kept, every job's together; past it a step that would wait is refused (LOOM_SCHEDULER_MAX_STEP_REQUEST_BYTES)")
	fs.StringVar(&c.InstanceID, "instance-id", env("INSTANCE_ID", ""), "this instance's name in the leader lease (LOOM_SCHEDULER_INSTANCE_ID; default host-pid)")
	fs.DurationVar(&c.LeaseTTL, "lease-ttl", config.EnvDuration("LOOM_SCHEDULER_LEASE_TTL", DefaultLeaseTTL),
		"leader lease TTL (LOOM_SCHEDULER_LEASE_TTL)")
	fs.DurationVar(&c.MinJobAge, "min-job-age", config.EnvDuration("LOOM_SCHEDULER_MIN_JOB_AGE", domain.DefaultMinJobAge),
		"how long an ended job is kept after its end (LOOM_SCHEDULER_MIN_JOB_AGE; Slurm's MinJobAge)")
	fs.IntVar(&c.Domain.MaxArraySize, "max-array-size", int(config.EnvInt("LOOM_MAX_ARRAY_SIZE", slurmspec.DefaultMaxArraySize)),
		"Slurm's MaxArraySize: array task ids must be below it (LOOM_MAX_ARRAY_SIZE, shared with the gateway; default 1001, at most 4000001)")
	fs.IntVar(&c.MaxBatch, "max-batch", int(envInt("MAX_BATCH", DefaultMaxBatch)),
		"most waiting events handled as one change: one scheduling pass, one store write (LOOM_SCHEDULER_MAX_BATCH; 1 = one at a time)")
	fs.StringVar(&c.Backend, "backend", env("BACKEND", BackendBuiltin),
		"scheduler backend: builtin (this engine; node agents run the steps) or slurm (jobs go to a real Slurm through slurmrestd; docs/slurm-backend.md) (LOOM_SCHEDULER_BACKEND)")
	fs.StringVar(&c.Slurm.URL, "slurm-url", env("SLURM_URL", ""), "with -backend=slurm: slurmrestd's URL, e.g. http://127.0.0.1:6820 (LOOM_SCHEDULER_SLURM_URL)")
	fs.StringVar(&c.Slurm.JWTKey, "slurm-jwt-key", env("SLURM_JWT_KEY", ""),
		"with -backend=slurm: slurmctld's JWT key file (AuthAltParameters=jwt_key), mode 0600; each job owner's token is minted with it (LOOM_SCHEDULER_SLURM_JWT_KEY)")
	fs.DurationVar(&c.Slurm.TokenLifespan, "slurm-token-lifespan", config.EnvDuration("LOOM_SCHEDULER_SLURM_TOKEN_LIFESPAN", 10*time.Minute),
		"with -backend=slurm: how long each minted Slurm token lasts, 1m to 24h (LOOM_SCHEDULER_SLURM_TOKEN_LIFESPAN)")
	fs.StringVar(&c.Slurm.ReadUser, "slurm-read-user", env("SLURM_READ_USER", "root"),
		"with -backend=slurm: the Slurm user the poll lists every job as, and an administrator's scontrol hold and release are made as (an admin hold); an operator (LOOM_SCHEDULER_SLURM_READ_USER)")
	fs.BoolVar(&c.Slurm.AllowRootJobs, "slurm-allow-root-jobs", config.EnvBool("LOOM_SCHEDULER_SLURM_ALLOW_ROOT_JOBS", false),
		"with -backend=slurm: let jobs whose owner is root go to Slurm and run as root; off, they end FAILED saying so (LOOM_SCHEDULER_SLURM_ALLOW_ROOT_JOBS)")
	c.Slurm.RefusedOwners = config.SplitList(env("SLURM_REFUSED_OWNERS", strings.Join(slurmbackend.DefaultRefusedOwners, ",")))
	fs.Func("slurm-refused-owners", "with -backend=slurm: owners, comma-separated, whose jobs end FAILED rather than run in Slurm as them, "+
		"besides root (-slurm-allow-root-jobs): Slurm's own accounts, whose JWT key they can read; empty refuses none but root "+
		"(LOOM_SCHEDULER_SLURM_REFUSED_OWNERS; default "+strings.Join(slurmbackend.DefaultRefusedOwners, ",")+")",
		func(s string) error {
			c.Slurm.RefusedOwners = append([]string{}, config.SplitList(s)...)
			return nil
		})
	fs.DurationVar(&c.Slurm.Poll, "slurm-poll", config.EnvDuration("LOOM_SCHEDULER_SLURM_POLL", slurmbackend.DefaultPoll),
		"with -backend=slurm: how often Slurm's jobs are read, 200ms to 1m: a state change shows in Loom at most this late (LOOM_SCHEDULER_SLURM_POLL)")
	fs.DurationVar(&c.RefreshInterval, "follower-refresh", config.EnvDuration("LOOM_SCHEDULER_FOLLOWER_REFRESH", DefaultRefreshInterval),
		"how often a follower applies the leader's writes from the change log; a reload of every record, when the log cannot, comes no sooner than 10 times the last took (LOOM_SCHEDULER_FOLLOWER_REFRESH)")
}

// resolve checks the flags that need parsing and fills the defaults.
func (c *Config) resolve() error {
	var v errs.Validator
	if c.policy != "" {
		p, ok := domain.PolicyByName(c.policy)
		v.Check(ok, "policy", "want loom, easy or fifo, got %q", c.policy)
		c.Domain.Policy = p
	}
	if c.qos != "" {
		q, err := domain.ParseQOS("qos", c.qos)
		if err != nil {
			return err
		}
		c.Domain.QOS = q
	}
	if c.Domain.DefaultQOS != "" && len(c.Domain.QOS) > 0 {
		found := false
		for _, q := range c.Domain.QOS {
			found = found || q.Name == c.Domain.DefaultQOS
		}
		v.Check(found, "default-qos", "QOS %q is not in the QOS table", c.Domain.DefaultQOS)
	}
	w := c.Domain.Weights
	v.Check(w.Age >= 0 && w.FairShare >= 0 && w.JobSize >= 0 && w.Partition >= 0 && w.QOS >= 0, "weight", "priority weights must not be negative")
	if c.MaxBatch == 0 {
		c.MaxBatch = DefaultMaxBatch
	}
	if c.Backend == "" {
		c.Backend = BackendBuiltin
	}
	v.Check(c.Backend == BackendBuiltin || c.Backend == BackendSlurm, "backend", "want %s or %s, got %q", BackendBuiltin, BackendSlurm, c.Backend)
	if c.Backend == BackendSlurm {
		v.Check(c.Slurm.URL != "", "slurm-url", "required with -backend=slurm")
		v.Check(c.Slurm.JWTKey != "", "slurm-jwt-key", "required with -backend=slurm")
		v.Check(c.Slurm.Poll >= slurmbackend.MinPoll && c.Slurm.Poll <= slurmbackend.MaxPoll, "slurm-poll",
			"want %v to %v, got %v", slurmbackend.MinPoll, slurmbackend.MaxPoll, c.Slurm.Poll)
		v.Check(c.Slurm.TokenLifespan >= time.Minute && c.Slurm.TokenLifespan <= 24*time.Hour, "slurm-token-lifespan",
			"want 1m to 24h, got %v", c.Slurm.TokenLifespan)
		v.Check(c.Slurm.ReadUser != "", "slurm-read-user", "required with -backend=slurm")
		slurmbackend.RefusedSet(&v, c.Slurm.RefusedOwners, c.Slurm.AllowRootJobs)
	}
	v.Check(c.MaxBatch >= 1, "max-batch", "want at least 1, got %d", c.MaxBatch)
	v.Check(c.maxInfra >= 0, "max-infra-restarts", "must not be negative, got %d", c.maxInfra)
	v.Check(c.Domain.HangTimeout >= 0 && c.Domain.HangTimeout <= slurmspec.MaxHangTimeoutSeconds*time.Second, "hang-timeout",
		"must be 0 (off) to a week (%v), as a job's own, got %v", slurmspec.MaxHangTimeoutSeconds*time.Second, c.Domain.HangTimeout)
	v.Check(c.Domain.FailureCheckpointWait >= 0, "failure-checkpoint-wait", "must not be negative, got %v", c.Domain.FailureCheckpointWait)
	v.Check(c.Domain.MaxStepRequestBytes == 0 || (c.Domain.MaxStepRequestBytes >= 1<<20 && c.Domain.MaxStepRequestBytes <= 16<<30),
		"max-step-request-bytes", "must be 1 MiB to 16 GiB (0: the default), got %d", c.Domain.MaxStepRequestBytes)
	c.Domain.MaxInfraRestarts = int32(min(c.maxInfra, 1<<30))
	if c.Domain.MaxArraySize == 0 {
		c.Domain.MaxArraySize = slurmspec.DefaultMaxArraySize
	}
	if err := slurmspec.CheckMaxArraySize(c.Domain.MaxArraySize); err != nil {
		v.Add("max-array-size", "%v", err)
	}
	if err := v.Err(); err != nil {
		return err
	}
	if c.TickInterval <= 0 {
		c.TickInterval = DefaultTickInterval
	}
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = DefaultLeaseTTL
	}
	if c.RefreshInterval <= 0 {
		c.RefreshInterval = DefaultRefreshInterval
	}
	if c.MinJobAge <= 0 {
		c.MinJobAge = domain.DefaultMinJobAge
	}
	if c.InstanceID == "" {
		host, _ := os.Hostname()
		c.InstanceID = host + "-" + strconv.Itoa(os.Getpid())
	}
	c.Domain.MasterAddr = c.MasterAddr
	return nil
}

// RunArgs runs the scheduler from a command line (args, without the program
// name): RegisterFlags' flags, each defaulting to its LOOM_* variable,
// then Run until ctx ends. A command line that does not parse is a
// *config.UsageError. The scheduler binary and loom's in-process stack both
// start the scheduler here, so that its command line is read in one place.
func RunArgs(ctx context.Context, args []string) error {
	cfg, err := config.ParseArgs("scheduler", args, (*Config).RegisterFlags)
	if err != nil {
		return err
	}
	return Run(ctx, cfg)
}

// Run runs the scheduler until ctx ends, then shuts down gracefully. Every
// instance serves reads; the one holding the leader lease also consumes and
// decides (see README, "Leader lease").
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.resolve(); err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	if cfg.Backend == BackendSlurm {
		return runSlurm(ctx, cfg)
	}
	// Only Loom services (the gateway) call this API: each call carries a
	// service token.
	internal, err := service.InternalAuth(cfg.Common)
	if err != nil {
		return err
	}
	base, err := service.New(ctx, "scheduler", cfg.Common, internal...)
	if err != nil {
		return err
	}
	a := app.New(base.Store, cfg.Domain, base.Clock.Now, base.Log)
	// Step commands carry jobs' scripts and secrets on a topic every agent
	// reads: each is sealed for its node (nil secret, insecure bus: not).
	a.SealCommands(base.ServiceSecret)
	if err := a.RegisterMetrics(base.Telemetry.Registry); err != nil {
		_ = base.Close()
		return fmt.Errorf("scheduler: metrics: %w", err)
	}
	// Every instance starts as a follower and serves reads from what is
	// stored until it wins the lease.
	a.StepDown()
	if err := a.Refresh(ctx); err != nil {
		_ = base.Close()
		return fmt.Errorf("scheduler: %w", err)
	}
	loomv1.RegisterJobServiceServer(base.GRPC, ports.NewJobServer(a))
	loomv1.RegisterSlurmServiceServer(base.GRPC, ports.NewSlurmServer(a))
	loomv1.RegisterGoodputServiceServer(base.GRPC, ports.NewGoodputServer(a, base.Clock.Now))
	lease := adapters.NewLease(base.Store, cfg.InstanceID, cfg.LeaseTTL)
	l := &leader{cfg: cfg, base: base, app: a, lease: lease}
	return base.Run(ctx, nil, l.run)
}

// leader runs the instance's part in the election: followers retry the
// lease and refresh their reads; the leader consumes, ticks and renews. The
// lease loops keep the real clock: the lease's TTL runs in Redis, in real
// time, whatever the service's clock says.
type leader struct {
	cfg   Config
	base  *service.Base
	app   *app.App
	lease *adapters.Lease
}

func (l *leader) run(ctx context.Context) error {
	log := l.base.Log
	retry := l.cfg.LeaseTTL / 3
	lastRefresh := time.Time{}
	for {
		token, err := l.lease.TryAcquire(ctx)
		if err != nil && ctx.Err() == nil {
			log.Warn("leader lease: acquire failed; retrying", "err", err)
		}
		if token != "" {
			l.term(ctx, token)
			lastRefresh = time.Time{}
		} else if time.Since(lastRefresh) >= l.cfg.RefreshInterval {
			if err := l.app.Refresh(ctx); err != nil && ctx.Err() == nil {
				log.Warn("follower refresh failed", "err", err)
			}
			lastRefresh = time.Now()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(min(retry, l.cfg.RefreshInterval)):
		}
	}
}

// term leads for one term: reload and start-up pass, then the consumer, the
// clock and the lease renewal, until ctx ends, the lease is lost or a write
// is fenced.
func (l *leader) term(ctx context.Context, token string) {
	log := l.base.Log.With("term", token)
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer func() {
		l.app.StepDown()
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer rcancel()
		if err := l.lease.Release(rctx, token); err != nil {
			log.Warn("leader lease: release failed; it expires by itself", "err", err)
		}
	}()
	if err := l.app.Lead(tctx, token, cancel); err != nil {
		log.Error("could not take over as leader", "err", err)
		return
	}
	// Made here, not by service.Run: it runs only while this instance
	// leads. Its nodes' rate is every service consumer's (-bus-node-rate):
	// it reads the step events, which a node may write to any partition.
	nodeRate, nodeBurst := l.base.NodeRate()
	cons := bus.NewConsumer(bus.ConsumerConfig{Brokers: l.cfg.Brokers, GroupID: "loom-scheduler", Topics: ports.Topics,
		Logger: l.base.Log, Verifier: l.base.Verifier, Rejected: l.base.Rejected, Security: l.base.Kafka,
		NodeRate: nodeRate, NodeBurst: nodeBurst, SessionTimeout: l.base.Config.BusSessionTimeout,
		Metrics: l.base.Bus, TracerProvider: l.base.Telemetry.TracerProvider}, l.base.Producer, l.app.Handle).WithBatch(l.app.HandleBatch, l.cfg.MaxBatch)
	var wg sync.WaitGroup
	wg.Add(4)
	go func() {
		defer wg.Done()
		// Retention: ended jobs past MinJobAge, checked every tenth of it
		// (at most every minute).
		ret := domain.Retention{MinJobAge: l.cfg.MinJobAge}
		_ = l.app.RunPrune(tctx, ret, min(max(l.cfg.MinJobAge/10, time.Second), time.Minute), l.base.Clock)
	}()
	go func() {
		defer wg.Done()
		defer cancel()
		if err := cons.Run(tctx); err != nil {
			log.Error("consumer failed", "err", err)
		}
	}()
	go func() {
		defer wg.Done()
		defer cancel()
		_ = l.app.RunClock(tctx, l.cfg.TickInterval, l.base.Clock)
	}()
	go func() {
		defer wg.Done()
		defer cancel()
		l.renew(tctx, token)
	}()
	wg.Wait()
}

// renew keeps the lease until ctx ends or it is lost (another holder, or no
// successful renewal for a whole TTL).
func (l *leader) renew(ctx context.Context, token string) {
	every := l.cfg.LeaseTTL / 3
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
		err := l.lease.Renew(ctx, token)
		switch {
		case err == nil:
			last = time.Now()
		case errors.Is(err, adapters.ErrLeaseLost):
			l.base.Log.Warn("leader lease lost; stepping down", "term", token)
			return
		case time.Since(last) >= l.cfg.LeaseTTL:
			l.base.Log.Warn("leader lease not renewed for a whole TTL; stepping down", "term", token, "err", err)
			return
		}
	}
}

// Package training is Loom's training service: serverless training shaped
// like Vertex AI's. It owns CustomJobs, hyperparameter tuning jobs (their
// studies and trials) and training pipelines, and composes the other
// services only through their commands and events: ephemeral clusters
// through the provisioner, jobs through the scheduler, model versions
// through the registry. See README.md beside this file for what it owns,
// the topics it reads and writes, and how it recovers.
package training

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/series"
	"github.com/loom-ml/loom/libs/service"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	"github.com/loom-ml/loom/services/training/internal/adapters"
	"github.com/loom-ml/loom/services/training/internal/app"
	"github.com/loom-ml/loom/services/training/internal/domain"
	"github.com/loom-ml/loom/services/training/internal/ports"
)

// Defaults of the training service's own settings.
const (
	// DefaultGRPCAddr serves the internal read API (LOOM_TRAINING_GRPC_ADDR).
	DefaultGRPCAddr = "127.0.0.1:7075"
	// DefaultHTTPAddr serves /metrics, /healthz, /readyz (LOOM_TRAINING_HTTP_ADDR).
	DefaultHTTPAddr = "127.0.0.1:9175"
	// DefaultTick is how often time is applied: FLEX_START jobs past their
	// max_wait_duration expire within one tick (LOOM_TRAINING_TICK).
	DefaultTick = 5 * time.Second
	// DefaultMetricGrace is how long a trial whose job succeeded waits for
	// its metric's measurements, which travel on another topic than the
	// job's end, before it is INFEASIBLE (LOOM_TRAINING_METRIC_GRACE).
	DefaultMetricGrace = domain.DefaultMetricGrace
	// DefaultMetricsRetention is how long a job's metric series outlive
	// its end (LOOM_TRAINING_METRICS_RETENTION; docs/metrics.md).
	DefaultMetricsRetention = series.DefaultRetention
	// DefaultLogRetention is how long a CustomJob's output file in the log
	// directory outlives its last write (LOOM_TRAINING_LOG_RETENTION): as
	// long as Cloud Logging keeps Vertex's logs by default.
	DefaultLogRetention = 720 * time.Hour
	// LogPruneEvery is how often the log directory is pruned (and once
	// when the service starts).
	LogPruneEvery = time.Hour
)

// Group is the training service's consumer group.
const Group = "loom-training"

// Topics are the topics the training service reads, in one consumer group.
var Topics = []string{topics.TrainingCommands, topics.ClusterEvents, topics.JobEvents, topics.StepEvents, topics.ModelEvents}

// Config is the training service's configuration.
type Config struct {
	config.Common
	// Tick is how often the passing of time is applied (LOOM_TRAINING_TICK;
	// default 5s).
	Tick time.Duration
	// MetricGrace is how long a trial whose job succeeded waits for a
	// measurement of its study's metric (LOOM_TRAINING_METRIC_GRACE;
	// default 60s, at most domain.MaxMetricGrace).
	MetricGrace time.Duration
	// MetricsRetention is how long after its job's end a job's metric
	// series are deleted (LOOM_TRAINING_METRICS_RETENTION; default 720h;
	// 0 keeps them forever, otherwise 1h..87600h).
	MetricsRetention time.Duration
	// MetricsNodeRate is the most MetricsReported records one node may
	// write an hour, and, counted apart, the most it may have merged into
	// trials' measurements an hour (app.LimitTuningWrites) (LOOM_TRAINING_METRICS_NODE_RATE; default
	// series.DefaultLimits.NodeRate; docs/metrics.md).
	MetricsNodeRate int64
	// MetricsProjectPoints is the most metric points one project's jobs
	// keep together (LOOM_TRAINING_METRICS_PROJECT_POINTS; default
	// series.DefaultLimits.ProjectPoints, 100,000,000: 2.4 GB;
	// docs/metrics.md).
	MetricsProjectPoints int64
	// LogDir is the directory that keeps the output of CustomJobs (and
	// trials) that would otherwise be deleted with their ephemeral cluster,
	// as <LogDir>/<project>/<user>/job-<id>.out (LOOM_TRAINING_LOG_DIR;
	// default "": none, the output goes with the cluster). An absolute path
	// the nodes' agents and the gateway see at the same place; `loom up`
	// sets <data dir>/training/logs.
	LogDir string
	// LogRetention is how long after its last write an output file in
	// LogDir is deleted (LOOM_TRAINING_LOG_RETENTION; default 720h; 0
	// keeps them forever, otherwise 1h..87600h).
	LogRetention time.Duration
}

// RegisterFlags adds the training service's flags to fs, defaults from
// LOOM_* variables.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Common.Register(fs, "TRAINING", DefaultGRPCAddr, DefaultHTTPAddr)
	fs.DurationVar(&c.Tick, "tick", config.EnvDuration("LOOM_TRAINING_TICK", DefaultTick),
		"how often time is applied: FLEX_START custom jobs past max_wait_duration expire (LOOM_TRAINING_TICK; default 5s)")
	fs.DurationVar(&c.MetricGrace, "metric-grace", config.EnvDuration("LOOM_TRAINING_METRIC_GRACE", DefaultMetricGrace),
		"how long a trial whose job succeeded waits for its metric's late measurements before it is INFEASIBLE (LOOM_TRAINING_METRIC_GRACE; default 60s, at most 1h)")
	fs.DurationVar(&c.MetricsRetention, "metrics-retention", config.EnvDuration("LOOM_TRAINING_METRICS_RETENTION", DefaultMetricsRetention),
		"how long after a job ended its metric series are deleted; 0 keeps them forever (LOOM_TRAINING_METRICS_RETENTION; default 720h, otherwise 1h..87600h)")
	fs.Int64Var(&c.MetricsNodeRate, "metrics-node-rate", config.EnvInt("LOOM_TRAINING_METRICS_NODE_RATE", series.DefaultLimits.NodeRate),
		"the most metric records (MetricsReported) one node may write an hour, and apart the most it may send for trials' measurements; more are refused and counted (LOOM_TRAINING_METRICS_NODE_RATE; 1..10000000)")
	fs.Int64Var(&c.MetricsProjectPoints, "metrics-project-points", config.EnvInt("LOOM_TRAINING_METRICS_PROJECT_POINTS", series.DefaultLimits.ProjectPoints),
		"the most metric points one project's jobs keep together (24 bytes each); later points are dropped and counted (LOOM_TRAINING_METRICS_PROJECT_POINTS; default 100000000, 1000..100000000000)")
	fs.StringVar(&c.LogDir, "log-dir", config.Env("LOOM_TRAINING_LOG_DIR", ""),
		"an absolute directory that keeps the output of custom jobs without a local base_output_directory after their ephemeral cluster is deleted, as <dir>/<project>/<user>/job-<id>.out; the service makes each user's directory (run it as root to make other users'); \"\": none, the output goes with the cluster (LOOM_TRAINING_LOG_DIR)")
	fs.DurationVar(&c.LogRetention, "log-retention", config.EnvDuration("LOOM_TRAINING_LOG_RETENTION", DefaultLogRetention),
		"how long after its last write an output file in -log-dir is deleted (in a -log-dir the service made, marked .loom-training-logs); 0 keeps them forever (LOOM_TRAINING_LOG_RETENTION; default 720h, otherwise 1h..87600h)")
}

// RunArgs runs the training service from a command line (args, without
// the program name), as the training binary and loom's in-process stack
// do. A command line that does not parse is a *config.UsageError.
func RunArgs(ctx context.Context, args []string) error {
	cfg, err := config.ParseArgs("training", args, (*Config).RegisterFlags)
	if err != nil {
		return err
	}
	return Run(ctx, cfg)
}

// Run runs the training service until ctx ends, then shuts down gracefully.
func Run(ctx context.Context, cfg Config) error {
	return run(ctx, cfg, nil)
}

// metricsType and stepType are the step events the service reads (a
// trial's metrics, and the step ends that say every metric of a node has
// come); wanted passes over the others (StepProgress, ...) undecoded.
var (
	metricsType = envelope.TypeOf(&eventsv1.MetricsReported{})
	stepType    = envelope.TypeOf(&eventsv1.StepChanged{})
)

func wanted(r bus.Record) bool {
	return r.Topic != topics.StepEvents || r.Type == metricsType || r.Type == stepType
}

// run is Run with a hook told the bound gRPC address once it serves (tests).
func run(ctx context.Context, cfg Config, started func(grpcAddr string)) error {
	if cfg.Tick <= 0 {
		cfg.Tick = DefaultTick
	}
	if cfg.MetricGrace < 0 || cfg.MetricGrace > domain.MaxMetricGrace {
		return errs.Invalid("metric-grace", "LOOM_TRAINING_METRIC_GRACE: must be 0s..%v, got %v", domain.MaxMetricGrace, cfg.MetricGrace)
	}
	if err := checkRetention(cfg.MetricsRetention); err != nil {
		return err
	}
	if cfg.LogDir != "" && !filepath.IsAbs(cfg.LogDir) {
		return errs.Invalid("log-dir", "LOOM_TRAINING_LOG_DIR: must be an absolute path (the agents open the files it names), got %q", cfg.LogDir)
	}
	if d := cfg.LogRetention; d != 0 && (d < series.MinRetention || d > series.MaxRetention) {
		return errs.Invalid("log-retention", "LOOM_TRAINING_LOG_RETENTION: must be 0 (keep forever) or %v..%v, got %v",
			series.MinRetention, series.MaxRetention, d)
	}
	if cfg.MetricsNodeRate == 0 {
		cfg.MetricsNodeRate = series.DefaultLimits.NodeRate
	}
	if cfg.MetricsNodeRate < 1 || cfg.MetricsNodeRate > maxNodeRate {
		return errs.Invalid("metrics-node-rate", "LOOM_TRAINING_METRICS_NODE_RATE: must be 1..%d records an hour, got %d", maxNodeRate, cfg.MetricsNodeRate)
	}
	if cfg.MetricsProjectPoints == 0 {
		cfg.MetricsProjectPoints = series.DefaultLimits.ProjectPoints
	}
	if cfg.MetricsProjectPoints < minProjectPoints || cfg.MetricsProjectPoints > maxProjectPoints {
		return errs.Invalid("metrics-project-points", "LOOM_TRAINING_METRICS_PROJECT_POINTS: must be %d..%d points, got %d", minProjectPoints, maxProjectPoints, cfg.MetricsProjectPoints)
	}
	// Only Loom services (the gateway) call this API: each call carries a
	// service token.
	internal, err := service.InternalAuth(cfg.Common)
	if err != nil {
		return err
	}
	base, err := service.New(ctx, "training", cfg.Common, internal...)
	if err != nil {
		return fmt.Errorf("training: %w", err)
	}
	a, err := app.New(ctx, adapters.NewRepo(base.Store), base.Log, base.Clock.Now, cfg.MetricGrace)
	if err != nil {
		_ = base.Close()
		return err
	}
	if err := a.RegisterMetrics(base.Telemetry.Registry); err != nil {
		_ = base.Close()
		return fmt.Errorf("training: metrics: %w", err)
	}
	var loops []func(context.Context) error
	if cfg.LogDir != "" {
		logs := adapters.LogDirs{Root: filepath.Clean(cfg.LogDir)}
		a.UseLogDirs(logs)
		if cfg.LogRetention > 0 {
			prune := base.Clock.NewTicker(LogPruneEvery)
			loops = append(loops, func(ctx context.Context) error {
				defer prune.Stop()
				return pruneLogs(ctx, logs, a.JobRunning, prune.Chan(), base.Clock.Now, cfg.LogRetention, base.Log)
			})
		}
	}
	trainingv1.RegisterTrainingServiceServer(base.GRPC, ports.NewServer(a))
	metrics := series.NewStore(base.Store.Client(), base.Store.Key(""), series.Limits{NodeRate: cfg.MetricsNodeRate, ProjectPoints: cfg.MetricsProjectPoints})
	// The trials' path counts a node's records apart (training:tuning:
	// metrics:noderate:<node>), to the same limit.
	a.LimitTuningWrites(series.NewStore(base.Store.Client(), base.Store.Key("tuning:"), series.Limits{NodeRate: cfg.MetricsNodeRate}))
	trainingv1.RegisterMetricsServiceServer(base.GRPC, ports.NewMetrics(a, metrics))
	ticker := base.Clock.NewTicker(cfg.Tick)
	loops = append(loops, func(ctx context.Context) error {
		defer ticker.Stop()
		return a.RunTicker(ctx, ticker.Chan)
	})
	// The sweep also expires held metric writes, so it runs whatever the
	// retention (0: series kept forever).
	in := newIngest(metrics, base.Log, base.Clock.Now)
	if err := errors.Join(base.Telemetry.Registry.Register(in.refused), base.Telemetry.Registry.Register(in.dropped)); err != nil {
		_ = base.Close()
		return fmt.Errorf("training: metrics: %w", err)
	}
	sweep := base.Clock.NewTicker(cfg.Tick)
	loops = append(loops, func(ctx context.Context) error {
		defer sweep.Stop()
		return in.sweepMetrics(ctx, sweep.Chan(), cfg.MetricsRetention)
	}, func(ctx context.Context) error {
		// Series stored before projects were counted (an upgrade) count
		// from now on; beside the appends, which it cannot undo. A failure
		// is logged: the count is then short until those jobs append.
		n, err := metrics.CountStored(ctx, 0)
		if err != nil && ctx.Err() == nil {
			base.Log.Warn("counting stored metric series into their projects", "err", err, "jobs", n)
		} else if err == nil {
			base.Log.Info("stored metric series counted into their projects", "jobs", n)
		}
		<-ctx.Done()
		return nil
	})
	if started != nil {
		loops = append(loops, func(ctx context.Context) error {
			addr, err := base.GRPCAddr(ctx)
			if err == nil {
				started(addr)
			}
			<-ctx.Done()
			return nil
		})
	}
	return base.Run(ctx, []service.Consume{{Topics: Topics, Handler: a.Handle, Group: Group,
		Config: &bus.ConsumerConfig{Filter: wanted}}, in.consume()}, loops...)
}

// pruneLogs removes the log directory's output files older than
// retention at once and then on every tick, until ctx ends: at once, since
// a service restarted more often than it ticks (LogPruneEvery: a crash
// loop, `loom up` run for less than an hour at a time) would otherwise
// never prune, and the directory would grow without bound. The output of
// a job that is running (running: a CustomJob the service holds that has
// not ended) is kept whatever its age. A failure is logged and tried again
// at the next tick.
func pruneLogs(ctx context.Context, logs adapters.LogDirs, running func(project string, id int64) bool, tick <-chan time.Time, now func() time.Time, retention time.Duration, log *slog.Logger) error {
	for {
		n, err := logs.Prune(now(), retention, running)
		if err != nil {
			log.Warn("pruning the log directory", "dir", logs.Root, "removed", n, "err", err)
		} else if n > 0 {
			log.Info("output files past their retention removed", "dir", logs.Root, "removed", n)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick:
		}
	}
}

// maxNodeRate bounds -metrics-node-rate: beyond it the bound bounds
// nothing (ten million records an hour is far past any agent's rate).
const maxNodeRate = 10_000_000

// minProjectPoints and maxProjectPoints bound -metrics-project-points:
// under a thousand points a project could not keep one curve; a hundred
// billion (2.4 TB) is past any Redis.
const (
	minProjectPoints = 1000
	maxProjectPoints = 100_000_000_000
)

// checkRetention checks a metrics retention: 0 (keep forever) or within
// series.MinRetention..series.MaxRetention.
func checkRetention(d time.Duration) error {
	if d != 0 && (d < series.MinRetention || d > series.MaxRetention) {
		return errs.Invalid("metrics-retention", "LOOM_TRAINING_METRICS_RETENTION: must be 0 (keep forever) or %v..%v, got %v",
			series.MinRetention, series.MaxRetention, d)
	}
	return nil
}

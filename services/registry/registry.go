// Package registry is Loom's registry service. It owns models and their versions, registering a version when a job that declared a model output succeeds or when a service sends UploadModel for a complete artifact directory.
// See README.md beside this file for what it owns, the topics it reads and
// writes, and how it recovers.
package registry

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/service"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/registry/internal/adapters"
	"github.com/loom-ml/loom/services/registry/internal/app"
	"github.com/loom-ml/loom/services/registry/internal/ports"
)

// Config is the registry's configuration.
type Config struct {
	config.Common
	// ExportRoot is the directory ExportModel's local destinations must lie
	// under ("" refuses local destinations; object stores are always
	// allowed).
	ExportRoot string
	// ExportEndpoints are the S3-compatible endpoints (scheme://host:port,
	// app.ParseExportEndpointEntry) an s3:// export destination may name
	// with endpoint=, each optionally followed by ";profile=NAME", the AWS
	// shared-config profile its requests are signed with; one without a
	// profile gets unsigned requests, never the registry's own credentials.
	// Empty, the default, refuses every destination with a query, since a
	// caller's endpoint would aim the registry's requests at any host. At
	// most app.MaxExportEndpoints.
	ExportEndpoints []string
	// ProjectBuckets are the bucket URL prefixes, each holding {project}
	// (app.ParseProjectBuckets), that a project's bucket artifact_uri and
	// export destinations must lie under whenever the registry opens them
	// with credentials (its own, or an export endpoint's profile): one
	// registry, one set of credentials, many projects. Empty, the default,
	// refuses every such bucket; "*" alone allows any (a registry serving
	// one team).
	ProjectBuckets []string
	// ExportTimeout bounds one attempt at an export (default
	// DefaultExportTimeout); an attempt cut short is tried again, resuming,
	// up to ExportAttempts times, then its operation fails.
	ExportTimeout time.Duration
}

// RegisterFlags adds the registry's flags to fs, defaults from LOOM_* variables.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Common.Register(fs, "REGISTRY", "127.0.0.1:7074", "127.0.0.1:9174")
	fs.StringVar(&c.ExportRoot, "export-root", config.Env("LOOM_REGISTRY_EXPORT_ROOT", ""),
		"directory ExportModel may write local exports under (file:// destinations); empty refuses them (LOOM_REGISTRY_EXPORT_ROOT)")
	c.ExportEndpoints = config.SplitList(config.Env("LOOM_REGISTRY_EXPORT_ENDPOINTS", ""))
	fs.Func("export-endpoints", "S3-compatible endpoints, comma-separated scheme://host:port[;profile=NAME], that an s3:// export destination may name with ?endpoint= (with use_path_style=true; region and anonymous also allowed); requests to one are signed with its AWS shared-config profile, unsigned without one (never the registry's own credentials); empty refuses destinations with a query (LOOM_REGISTRY_EXPORT_ENDPOINTS)",
		func(s string) error {
			c.ExportEndpoints = config.SplitList(s)
			return nil
		})
	c.ProjectBuckets = config.SplitList(config.Env("LOOM_REGISTRY_PROJECT_BUCKETS", ""))
	fs.Func("project-buckets", "bucket URL prefixes, comma-separated, each holding {project} (e.g. s3://models/{project}/,gs://loom-{project}/), that a project's bucket artifact_uri and export destinations must lie under when the registry opens them with credentials; * alone allows any bucket; empty refuses them (LOOM_REGISTRY_PROJECT_BUCKETS)",
		func(s string) error {
			c.ProjectBuckets = config.SplitList(s)
			return nil
		})
	fs.DurationVar(&c.ExportTimeout, "export-timeout", config.EnvDuration("LOOM_REGISTRY_EXPORT_TIMEOUT", DefaultExportTimeout),
		"bound on one attempt at an export; a cut attempt resumes, up to 5 attempts (LOOM_REGISTRY_EXPORT_TIMEOUT)")
}

// validate checks the settings that need parsing; a bad one stops the
// registry at start, the error naming the flag and its variable.
func (c *Config) validate() error {
	if _, err := app.ParseExportEndpoints(c.ExportEndpoints); err != nil {
		return errs.Invalid("-export-endpoints (LOOM_REGISTRY_EXPORT_ENDPOINTS)", "%v", err)
	}
	if _, err := app.ParseProjectBuckets(c.ProjectBuckets); err != nil {
		return errs.Invalid("-project-buckets (LOOM_REGISTRY_PROJECT_BUCKETS)", "%v", err)
	}
	return nil
}

// RunArgs runs the registry from a command line (args, without the program
// name): RegisterFlags' flags, each defaulting to its LOOM_* variable,
// then Run until ctx ends. A command line that does not parse is a
// *config.UsageError. The registry binary and loom's in-process stack both
// start the registry here, so that its command line is read in one place.
func RunArgs(ctx context.Context, args []string) error {
	cfg, err := config.ParseArgs("registry", args, (*Config).RegisterFlags)
	if err != nil {
		return err
	}
	return Run(ctx, cfg)
}

// Run runs the registry until ctx ends, then shuts down gracefully.
func Run(ctx context.Context, cfg Config) error {
	return run(ctx, cfg, nil)
}

// run is Run with a hook told the bound gRPC address once it serves (tests).
func run(ctx context.Context, cfg Config, started func(grpcAddr string)) error {
	if err := cfg.validate(); err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	// Only Loom services (the gateway) call this API: each call carries a
	// service token.
	internal, err := service.InternalAuth(cfg.Common)
	if err != nil {
		return err
	}
	base, err := service.New(ctx, "registry", cfg.Common, internal...)
	if err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	reg, err := app.New(ctx, adapters.NewRepo(base.Store), base.Log, nil)
	if err != nil {
		_ = base.Close()
		return err
	}
	reg.SetExportRoot(cfg.ExportRoot)
	reg.SetUploadTimeout(HandlerTimeout)
	if err := reg.SetExportEndpoints(cfg.ExportEndpoints); err != nil {
		_ = base.Close()
		return fmt.Errorf("registry: %w", err) // validate refused it already
	}
	if err := reg.SetProjectBuckets(cfg.ProjectBuckets); err != nil {
		_ = base.Close()
		return fmt.Errorf("registry: %w", err) // validate refused it already
	}
	if err := reg.RegisterMetrics(base.Telemetry.Registry); err != nil {
		_ = base.Close()
		return fmt.Errorf("registry: metrics: %w", err)
	}
	loomv1.RegisterModelServiceServer(base.GRPC, ports.NewModelServer(reg))
	var loops []func(context.Context) error
	if started != nil {
		loops = append(loops, func(ctx context.Context) error {
			addr, err := base.GRPCAddr(ctx)
			if err == nil {
				started(addr)
			}
			// Returning early could read as the loop having ended the service.
			<-ctx.Done()
			return nil
		})
	}
	exportTimeout := cfg.ExportTimeout
	if exportTimeout <= 0 {
		exportTimeout = DefaultExportTimeout
	}
	return base.Run(ctx, []service.Consume{{
		// Exports have their own group: a long copy holds up neither
		// uploads nor job events, and gets its own bound.
		Topics:  []string{topics.ModelCommands},
		Group:   ExportGroup,
		Handler: reg.HandleExport,
		Config: &bus.ConsumerConfig{Policy: envelope.ServicesOnly, HandlerTimeout: exportTimeout,
			MaxAttempts: app.ExportAttempts, Filter: exportsOnly},
	}, {
		Topics:  Topics,
		Handler: reg.Handle,
		// One consumer for both topics keeps Handle sequential, which
		// version numbering relies on. Only services write either topic
		// (the scheduler its job events, training its commands): a record
		// signed by a node is dead-lettered. Hashing a large model's files
		// takes longer than the default 30 s handler bound.
		// The last of an UploadModel's attempts answers it (app.UploadAttempts).
		Config: &bus.ConsumerConfig{Policy: envelope.ServicesOnly, HandlerTimeout: HandlerTimeout, MaxAttempts: app.UploadAttempts},
	}}, loops...)
}

// Topics are the topics the registry consumes (group loom-registry): job
// events (a COMPLETED job's model output) and model commands (UploadModel).
var Topics = []string{topics.JobEvents, topics.ModelCommands}

// exportsOnly passes the ExportModel commands only (the export group's Filter).
func exportsOnly(r bus.Record) bool { return r.Type == envelope.TypeOf(&eventsv1.ExportModel{}) }

// ExportGroup is the consumer group that runs ExportModel commands.
const ExportGroup = "loom-registry-export"

// DefaultExportTimeout is ExportTimeout's default.
const DefaultExportTimeout = time.Hour

// HandlerTimeout bounds the handling of one event, mostly the SHA-256 check
// of an upload's artifact files; an upload whose check does not finish in
// time is retried and, on the last of app.UploadAttempts, answered
// ModelUploadFailed (DeadlineExceeded), never left unanswered.
const HandlerTimeout = 2 * time.Minute

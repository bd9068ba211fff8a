package agent

import (
	"flag"
	"fmt"
	"path/filepath"
	"time"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/gpu"
	"github.com/loom-ml/loom/libs/service"
	"github.com/loom-ml/loom/libs/topics"
	"github.com/loom-ml/loom/services/agent/internal/app"
	"github.com/loom-ml/loom/services/agent/internal/domain"
	"github.com/loom-ml/loom/services/agent/internal/ports"
)

// GPU modes (Config.GPUMode).
const (
	GPUModeAuto      = "auto"
	GPUModeNVML      = "nvml"
	GPUModeSimulated = "simulated"
)

// GPUStateDir is the simulated device's state directory inside the work
// dir, shared with the node's nvidia-smi.
const GPUStateDir = "gpu"

// GPUConfig is the agent's GPU settings (part of Config).
type GPUConfig struct {
	// GPUMode picks the node's GPUs: "auto" (NVML where a driver loads
	// and shows GPUs, else simulated), "nvml" (real GPUs or the agent
	// does not start) or "simulated" (LOOM_AGENT_GPU_MODE; default auto).
	GPUMode string
	// GPUModel is the simulated GPUs' model name (LOOM_AGENT_GPU_MODEL;
	// default "NVIDIA H200"); the count is GPUs.
	GPUModel string
	// TelemetryInterval is how often GpuTelemetry is published
	// (LOOM_TELEMETRY_INTERVAL; default 10s, at least 1s).
	TelemetryInterval time.Duration
	// Device is the node's GPUs; Run opens it (from GPUMode) when nil,
	// and closes it when it returns.
	Device gpu.Device
}

// registerGPUFlags adds the GPU flags to fs.
func (c *GPUConfig) registerGPUFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.GPUMode, "gpu-mode", config.Env("LOOM_AGENT_GPU_MODE", GPUModeAuto),
		"the node's GPUs: auto (NVML where a driver loads, else simulated), nvml or simulated (LOOM_AGENT_GPU_MODE)")
	fs.StringVar(&c.GPUModel, "gpu-model", config.Env("LOOM_AGENT_GPU_MODEL", gpu.DefaultModel),
		"the simulated GPUs' model (LOOM_AGENT_GPU_MODEL)")
	fs.DurationVar(&c.TelemetryInterval, "telemetry-interval", config.EnvDuration("LOOM_TELEMETRY_INTERVAL", app.DefaultTelemetryInterval),
		"how often GPU telemetry is published, at least 1s (LOOM_TELEMETRY_INTERVAL)")
}

// validateGPU checks the GPU settings and fills their defaults.
func (c *GPUConfig) validateGPU(v *errs.Validator) {
	if c.GPUMode == "" {
		c.GPUMode = GPUModeAuto
	}
	v.Check(c.GPUMode == GPUModeAuto || c.GPUMode == GPUModeNVML || c.GPUMode == GPUModeSimulated,
		"gpu_mode", "must be auto, nvml or simulated, got %q", c.GPUMode)
	if c.GPUModel == "" {
		c.GPUModel = gpu.DefaultModel
	}
	if c.TelemetryInterval <= 0 {
		c.TelemetryInterval = app.DefaultTelemetryInterval
	}
	v.Check(c.TelemetryInterval >= app.MinTelemetryInterval, "telemetry_interval", "must be at least %s, got %s",
		app.MinTelemetryInterval, c.TelemetryInterval)
}

// openDevice opens the node's GPUs as cfg.GPUMode says: the simulated
// device keeps its state in <work dir>/gpu, with cfg.GPUs GPUs, and sees
// a new host boot id as a reboot.
func openDevice(cfg *Config) (gpu.Device, error) {
	o := gpu.Options{Count: cfg.GPUs, Model: cfg.GPUModel, StateDir: filepath.Join(cfg.WorkDir, GPUStateDir),
		BootID: app.ReadHostBootID(cfg.WorkDir), Simulate: cfg.GPUMode == GPUModeSimulated}
	if cfg.GPUMode == GPUModeNVML {
		d, err := gpu.OpenNVML()
		if err != nil {
			return nil, fmt.Errorf("-gpu-mode nvml: %w", err)
		}
		return d, nil
	}
	return gpu.Open(o)
}

// startNode opens the node's GPUs (cfg.Device, unless given) and builds
// the agent's hardware-health side: telemetry, Xids, /metrics and the
// node-commands consumer.
func startNode(cfg *Config, base *service.Base) (*app.Node, error) {
	if cfg.Device == nil {
		d, err := openDevice(cfg)
		if err != nil {
			return nil, fmt.Errorf("agent %s: GPUs: %w", cfg.Node, err)
		}
		cfg.Device = d
	}
	n, err := app.NewNode(app.NodeOptions{
		Store: base.Store, Publisher: base.Producer, Device: cfg.Device,
		Self: domain.Self{Node: cfg.Node, Cluster: cfg.Cluster}, Hostname: cfg.Hostname, WorkDir: cfg.WorkDir, GPUs: cfg.GPUs,
		DiskPaths: []string{cfg.WorkDir, cfg.SharedDir, "/"}, Interval: cfg.TelemetryInterval,
		Log: base.Log, Clock: base.Clock,
	})
	if err != nil {
		return nil, err
	}
	if base.Telemetry != nil && base.Telemetry.Registry != nil {
		if err := base.Telemetry.Registry.Register(n.Collector()); err != nil {
			return nil, fmt.Errorf("agent %s: GPU metrics: %w", cfg.Node, err)
		}
	}
	sim := "simulated"
	if !cfg.Device.Simulated() {
		sim = "nvml"
	}
	base.Log.Info("GPUs opened", "mode", sim, "gpus", len(cfg.Device.Info()), "telemetry_interval", cfg.TelemetryInterval)
	if n := len(cfg.Device.Info()); n < cfg.GPUs {
		// Health takes the node out for it at the first telemetry, and
		// gpu_diag fails it; the log says so at once.
		base.Log.Warn("the driver lists fewer GPUs than the node offers", "offers", cfg.GPUs, "listed", n)
	}
	return n, nil
}

// nodeEnv is what every step and task learns from the node: where its
// simulated GPUs are (gpu.StateDirEnv), for the node's nvidia-smi.
func nodeEnv(cfg *Config) []string {
	if s, ok := cfg.Device.(*gpu.Simulated); ok {
		return []string{gpu.StateDirEnv + "=" + s.StateDir()}
	}
	return nil
}

// nodeConsume is the consumer of loom.node.commands.v1 for this node, as
// the step commands' (its own partition, the node's key, services-signed
// only), in a consumer group of its own; sole: the agent holds the node's
// lock (lock.go), so a member the group has at start is a dead one's.
func nodeConsume(cfg *Config, clusterID string, n *app.Node, sole bool) service.Consume {
	return service.Consume{
		Topics:  []string{topics.NodeCommands},
		Handler: ports.NodeHandler(n),
		Group:   "loom-" + ServiceName(clusterID, cfg.Hostname) + "-node",
		Config: &bus.ConsumerConfig{MaxAttempts: 20, MaxBackoff: 5 * time.Second, PartitionKey: cfg.Node, SoleMember: sole,
			Filter: func(r bus.Record) bool { return r.Key == cfg.Node }, Policy: envelope.ServicesOnly},
	}
}

// Package local is the provider that runs each node as an agent process on
// this machine, in its own process group, with its own directory under
// <DataDir>/clusters/<cluster-id>/nodes/<hostname> and the cluster's shared
// home <DataDir>/clusters/<cluster-id>/home and scratch
// <DataDir>/clusters/<cluster-id>/scratch, seen by every node at the same
// paths.
//
// A pidfile in the node's directory names the running agent (pid and start
// time), so a restarted provisioner finds it instead of starting a second one.
package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/loom-ml/loom/libs/proc"
	"github.com/loom-ml/loom/services/provisioner/internal/provider"
)

// File names in a node's directory.
const (
	PIDFile = "agent.pid"
	LogFile = "agent.log"
)

// idPattern is a cluster id or hostname, which become directory names.
var idPattern = regexp.MustCompile(`^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$`)

// ClusterDir is a cluster's directory under dataDir.
func ClusterDir(dataDir, clusterID string) string {
	return filepath.Join(dataDir, "clusters", clusterID)
}

// HomeDir is a cluster's shared home under dataDir (also its shared_dir).
func HomeDir(dataDir, clusterID string) string {
	return filepath.Join(ClusterDir(dataDir, clusterID), "home")
}

// ScratchDir is a cluster's scratch directory under dataDir.
func ScratchDir(dataDir, clusterID string) string {
	return filepath.Join(ClusterDir(dataDir, clusterID), "scratch")
}

// SharedDir is a cluster's shared directory under dataDir: its home.
func SharedDir(dataDir, clusterID string) string { return HomeDir(dataDir, clusterID) }

// WorkDir is a node's own directory under dataDir.
func WorkDir(dataDir, clusterID, hostname string) string {
	return filepath.Join(ClusterDir(dataDir, clusterID), "nodes", hostname)
}

// Config configures the local provider.
type Config struct {
	// DataDir is the root of every cluster's directories (absolute).
	DataDir string
	// AgentCommand is the argv that starts an agent.
	AgentCommand []string
	// AgentEnv is added to each agent's environment (after os.Environ()).
	AgentEnv []string
	// Credentials, when set, is called for each start of an agent, after
	// its directories exist and before it starts: what it returns is added
	// to the agent's environment (its bootstrap token). A failure fails the
	// launch. Each launch gets fresh credentials: a replaced node
	// bootstraps again.
	Credentials func(n provider.Node) ([]string, error)
	// Brokers and RedisAddr are handed to agents (LOOM_BROKERS, LOOM_REDIS_ADDR).
	Brokers   []string
	RedisAddr string
	// RedisUsername and RedisPasswordFile, when set, are handed to agents
	// (LOOM_REDIS_USERNAME, LOOM_REDIS_PASSWORD_FILE): the password stays
	// in its 0600 file, out of their environment.
	RedisUsername, RedisPasswordFile string
	// StopGrace is how long Stop waits after SIGTERM before SIGKILL (default 15 s,
	// longer than an agent needs to kill its own steps).
	StopGrace time.Duration
	// LaunchRate bounds how many agents Launch starts per second (default
	// 10), and LaunchConcurrency how many it starts at once (default 4):
	// every agent is a process that connects to Kafka and Redis as it
	// starts, and a cluster's worth of them at once starves this machine.
	// A Launch that finds its agent running does not wait.
	LaunchRate        float64
	LaunchConcurrency int
	Log               *slog.Logger
}

// Defaults of Config.LaunchRate and Config.LaunchConcurrency.
const (
	DefaultLaunchRate        = 10
	DefaultLaunchConcurrency = 4
)

// Provider is the local provider. It is safe for concurrent use on
// different nodes.
type Provider struct {
	cfg Config

	// starting holds a token per agent being started (LaunchConcurrency).
	starting chan struct{}
	// interval is the least time between two starts (1/LaunchRate).
	interval time.Duration

	mu sync.Mutex
	// exits records how agents this process started ended, by node name.
	exits map[string]string
	// nextStart is when the next agent may start.
	nextStart time.Time
}

var (
	_ provider.Provider = (*Provider)(nil)
	_ provider.Preparer = (*Provider)(nil)
)

// New returns a local provider.
func New(cfg Config) (*Provider, error) {
	if !filepath.IsAbs(cfg.DataDir) {
		return nil, fmt.Errorf("local provider: data dir %q is not absolute", cfg.DataDir)
	}
	if len(cfg.AgentCommand) == 0 || cfg.AgentCommand[0] == "" {
		return nil, errors.New("local provider: empty agent command")
	}
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = 15 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.LaunchRate <= 0 {
		cfg.LaunchRate = DefaultLaunchRate
	}
	if cfg.LaunchConcurrency <= 0 {
		cfg.LaunchConcurrency = DefaultLaunchConcurrency
	}
	return &Provider{cfg: cfg, exits: map[string]string{},
		starting: make(chan struct{}, cfg.LaunchConcurrency),
		interval: time.Duration(float64(time.Second) / cfg.LaunchRate)}, nil
}

// pace waits until an agent may start: at most one every interval. Waiters
// reserve nothing, so one that gives up (ctx) delays no other.
func (p *Provider) pace(ctx context.Context) error {
	for {
		p.mu.Lock()
		now := time.Now()
		if !now.Before(p.nextStart) {
			p.nextStart = now.Add(p.interval)
			p.mu.Unlock()
			return nil
		}
		wait := p.nextStart.Sub(now)
		p.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// check refuses nodes whose directories are not where this provider puts
// them: Remove deletes them recursively.
func (p *Provider) check(n provider.Node) error {
	if !idPattern.MatchString(n.ClusterID) || !idPattern.MatchString(n.Hostname) {
		return fmt.Errorf("node %s: bad cluster id %q or hostname %q", n.Name, n.ClusterID, n.Hostname)
	}
	if n.WorkDir != WorkDir(p.cfg.DataDir, n.ClusterID, n.Hostname) || n.SharedDir != SharedDir(p.cfg.DataDir, n.ClusterID) ||
		(n.ScratchDir != "" && n.ScratchDir != ScratchDir(p.cfg.DataDir, n.ClusterID)) {
		return fmt.Errorf("node %s: directories %q, %q, %q are not where this provider puts them under %s",
			n.Name, n.WorkDir, n.SharedDir, n.ScratchDir, p.cfg.DataDir)
	}
	return nil
}

// Running returns the pid of the node's agent and whether it runs.
func (p *Provider) Running(n provider.Node) (int, bool) {
	pid, start, err := proc.ReadPIDFile(filepath.Join(n.WorkDir, PIDFile))
	if err != nil {
		return 0, false
	}
	return pid, proc.Alive(pid, start)
}

// Launch starts the node's agent unless it runs, at most LaunchRate a
// second and LaunchConcurrency at once; it returns ctx's error, having
// started nothing, when ctx ends while it waits for its turn.
func (p *Provider) Launch(ctx context.Context, n provider.Node) (provider.Launched, error) {
	if err := p.check(n); err != nil {
		return provider.Launched{}, err
	}
	if pid, ok := p.Running(n); ok {
		return provider.Launched{PID: pid}, nil
	}
	select {
	case p.starting <- struct{}{}:
	case <-ctx.Done():
		return provider.Launched{}, fmt.Errorf("launch %s: %w", n.Name, ctx.Err())
	}
	defer func() { <-p.starting }()
	if err := p.pace(ctx); err != nil {
		return provider.Launched{}, fmt.Errorf("launch %s: %w", n.Name, err)
	}
	return p.start(n)
}

// start starts the node's agent.
func (p *Provider) start(n provider.Node) (provider.Launched, error) {
	for _, d := range []string{n.WorkDir, n.SharedDir, n.ScratchDir} {
		if d == "" {
			continue
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			return provider.Launched{}, fmt.Errorf("create %s: %w", d, err)
		}
	}
	var creds []string
	if p.cfg.Credentials != nil {
		c, err := p.cfg.Credentials(n)
		if err != nil {
			return provider.Launched{}, fmt.Errorf("credentials for %s: %w", n.Name, err)
		}
		creds = c
	}
	logPath := filepath.Join(n.WorkDir, LogFile)
	// The agent's log names the node's jobs, every user's: its
	// administrator's alone.
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return provider.Launched{}, fmt.Errorf("open agent log: %w", err)
	}
	defer logf.Close()

	argv := p.cfg.AgentCommand
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = n.WorkDir
	cmd.Env = append(p.env(n), creds...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own group, so that Stop reaches whatever the agent runs in it and a
	// signal to the provisioner's group does not reach the agent.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return provider.Launched{}, fmt.Errorf("start agent %q: %w", strings.Join(argv, " "), err)
	}
	pid := cmd.Process.Pid
	start, _ := proc.StartTime(pid)
	if err := proc.WritePIDFile(filepath.Join(n.WorkDir, PIDFile), pid, start); err != nil {
		// Without a pidfile the next Launch would start a second agent.
		_ = proc.KillGroup(pid, syscall.SIGKILL)
		_ = cmd.Wait()
		return provider.Launched{}, fmt.Errorf("record agent pid: %w", err)
	}
	p.mu.Lock()
	prev := p.exits[n.Name]
	delete(p.exits, n.Name)
	p.mu.Unlock()
	go func() {
		// Reap the child, and remember how it ended for the next Launch.
		_ = cmd.Wait()
		p.mu.Lock()
		p.exits[n.Name] = cmd.ProcessState.String() + "; log " + logPath
		p.mu.Unlock()
	}()
	p.cfg.Log.Info("agent started", "node", n.Name, "pid", pid, "log", logPath)
	return provider.Launched{PID: pid, Started: true, PrevExit: prev}, nil
}

// env is the agent's environment: ours, then defaults that keep several
// agents on one machine from colliding, then AgentEnv, then the node's settings.
func (p *Provider) env(n provider.Node) []string {
	// The services' secret is the provisioner's, never an agent's: an
	// agent holding it could sign as any service.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LOOM_SERVICE_KEY_FILE=") {
			env = append(env, kv)
		}
	}
	env = append(env, "LOOM_AGENT_GRPC_ADDR=127.0.0.1:0", "LOOM_AGENT_HTTP_ADDR=127.0.0.1:0")
	env = append(env, p.cfg.AgentEnv...)
	return append(env,
		"LOOM_BROKERS="+strings.Join(p.cfg.Brokers, ","),
		"LOOM_REDIS_ADDR="+p.cfg.RedisAddr,
		"LOOM_NODE="+n.Name,
		"LOOM_HOSTNAME="+n.Hostname,
		"LOOM_WORK_DIR="+n.WorkDir,
		"LOOM_GPUS="+strconv.Itoa(n.GPUs),
		"LOOM_CLUSTER="+n.Cluster,
		"LOOM_SHARED_DIR="+n.SharedDir,
		"LOOM_SCRATCH_DIR="+n.ScratchDir,
		"LOOM_REDIS_USERNAME="+p.cfg.RedisUsername,
		"LOOM_REDIS_PASSWORD_FILE="+p.cfg.RedisPasswordFile,
	)
}

// PrepareCluster makes the cluster's home and scratch directories and
// writes its files under the home, each atomically and only when its
// content differs.
func (p *Provider) PrepareCluster(_ context.Context, c provider.ClusterSetup) error {
	if !idPattern.MatchString(c.ClusterID) {
		return fmt.Errorf("prepare cluster: bad cluster id %q", c.ClusterID)
	}
	home, scratch := HomeDir(p.cfg.DataDir, c.ClusterID), ScratchDir(p.cfg.DataDir, c.ClusterID)
	if c.HomeDir != home || c.ScratchDir != scratch {
		return fmt.Errorf("prepare cluster %s: directories %q, %q are not %q, %q", c.Cluster, c.HomeDir, c.ScratchDir, home, scratch)
	}
	for _, d := range []string{home, scratch} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("prepare cluster %s: %w", c.Cluster, err)
		}
	}
	for rel, content := range c.Files {
		path := filepath.Join(home, rel)
		if !filepath.IsLocal(rel) {
			return fmt.Errorf("prepare cluster %s: file %q is not under the home", c.Cluster, rel)
		}
		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, content) {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return fmt.Errorf("prepare cluster %s: %w", c.Cluster, err)
		}
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, content, 0o644); err != nil {
			return fmt.Errorf("prepare cluster %s: %w", c.Cluster, err)
		}
		if err := os.Rename(tmp, path); err != nil {
			return fmt.Errorf("prepare cluster %s: %w", c.Cluster, err)
		}
	}
	return nil
}

// Stop terminates the node's agent's process group: SIGTERM, then SIGKILL
// after StopGrace. It returns once the agent is gone.
func (p *Provider) Stop(ctx context.Context, n provider.Node) error {
	pidPath := filepath.Join(n.WorkDir, PIDFile)
	pid, start, err := proc.ReadPIDFile(pidPath)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		// A torn pidfile names no process we could signal safely.
		p.cfg.Log.Warn("ignoring unreadable agent pidfile", "node", n.Name, "err", err)
		if err := os.Remove(pidPath); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("stop %s: %w", n.Name, err)
		}
		return nil
	}
	gone := func() bool { return !proc.Alive(pid, start) }
	if !gone() {
		if err := proc.KillGroup(pid, syscall.SIGTERM); err != nil {
			return fmt.Errorf("stop %s: %w", n.Name, err)
		}
		if !waitUntil(p.cfg.StopGrace, ctx.Done(), gone) {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("stop %s: %w", n.Name, err)
			}
			p.cfg.Log.Warn("agent ignored SIGTERM, killing it", "node", n.Name, "pid", pid, "grace", p.cfg.StopGrace)
			if err := proc.KillGroup(pid, syscall.SIGKILL); err != nil {
				return fmt.Errorf("stop %s: %w", n.Name, err)
			}
			if !waitUntil(5*time.Second, ctx.Done(), gone) {
				return fmt.Errorf("stop %s: agent %d survived SIGKILL", n.Name, pid)
			}
		}
		p.cfg.Log.Info("agent stopped", "node", n.Name, "pid", pid)
	}
	if err := os.Remove(pidPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("stop %s: %w", n.Name, err)
	}
	return nil
}

// Remove deletes the node's directory.
func (p *Provider) Remove(_ context.Context, n provider.Node) error {
	if err := p.check(n); err != nil {
		return err
	}
	if err := os.RemoveAll(n.WorkDir); err != nil {
		return fmt.Errorf("remove %s: %w", n.WorkDir, err)
	}
	return nil
}

// RemoveCluster deletes the cluster's directory, shared directory included.
func (p *Provider) RemoveCluster(_ context.Context, clusterID string) error {
	if !idPattern.MatchString(clusterID) {
		return fmt.Errorf("remove cluster: bad cluster id %q", clusterID)
	}
	dir := ClusterDir(p.cfg.DataDir, clusterID)
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}

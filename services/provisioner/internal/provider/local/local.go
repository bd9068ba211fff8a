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
	"crypto/rand"
	"encoding/hex"
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

	"github.com/loom-ml/loom/libs/clusterspec"
	"github.com/loom-ml/loom/libs/proc"
	"github.com/loom-ml/loom/services/provisioner/internal/provider"
)

// File names in a node's directory.
const (
	PIDFile = "agent.pid"
	LogFile = "agent.log"
	// BootIDFile holds the node's host boot id: written at its first
	// launch and at every reboot or reimage (a new random id), never when
	// only its agent restarts. The agent reports it (AgentRegistered.
	// host_boot_id); a new one means every process of the node's previous
	// boot is gone.
	BootIDFile = "host_boot_id"
	// StepsDir holds one pidfile (libs/proc format) per process group the
	// agent started for a step or task; a reboot kills those groups, which
	// outlive an agent crash.
	StepsDir = "steps"
)

// killWait bounds how long a reboot waits for the processes it killed.
const killWait = 10 * time.Second

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
	// RedisUsers, when set, gives each agent a Redis user of its own
	// instead (its name and password file replace RedisUsername and
	// RedisPasswordFile, and the provisioner's LOOM_REDIS_PASSWORD is kept
	// out of the agent's environment): made before each start of the agent
	// (a failure fails the launch) and again whenever Launch finds it
	// running (a Redis that restarted has lost it), deleted by Remove with
	// the agent's keys.
	RedisUsers RedisUsers
	// RedisKeys, when set and RedisUsers is not (the agents share
	// RedisUsername's credential), deletes a removed node's agent's keys
	// in Remove, as RedisUsers.Delete does with its user.
	RedisKeys RedisKeys
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

// RedisUsers makes and deletes the agents' own Redis users
// (agentredis.Users).
type RedisUsers interface {
	// LoadScripts loads the scripts the agents' users run (they may not
	// EVAL their own); StartPass calls it once per reconciler pass.
	LoadScripts(ctx context.Context) error
	// Ensure makes n's agent's user, idempotently, and returns its name
	// and the path of its password file.
	Ensure(ctx context.Context, n provider.Node) (user, passwordFile string, err error)
	// DeleteAll deletes the users of nodes' agents, then every key under
	// their prefixes (the agents are stopped), with one walk of the
	// keyspace for them all; an error per node, in order. Idempotent: what
	// does not exist is not an error, and a failure is retried by calling
	// it again.
	DeleteAll(ctx context.Context, nodes []provider.Node) []error
}

// RedisKeys deletes removed nodes' agents' keys (agentredis.Keys).
type RedisKeys interface {
	// DeleteAll deletes every key under the prefixes of nodes' agents
	// (stopped), with one walk of the keyspace for them all; an error per
	// node, in order. Idempotent, and a failure is retried by calling it
	// again.
	DeleteAll(ctx context.Context, nodes []provider.Node) []error
}

// redisCred is the Redis user and password file handed to an agent.
type redisCred struct{ user, passwordFile string }

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

// StartPass loads the scripts the agents' Redis users run
// (RedisUsers.LoadScripts), once per reconciler pass rather than with
// every agent's Ensure: a Redis that lost its script cache (a restart,
// SCRIPT FLUSH) has them again within a pass.
func (p *Provider) StartPass(ctx context.Context) error {
	if p.cfg.RedisUsers == nil {
		return nil
	}
	return p.cfg.RedisUsers.LoadScripts(ctx)
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
		if p.cfg.RedisUsers != nil {
			// Its user again, as it is: a Redis that restarted without
			// it would lock the running agent out.
			if _, _, err := p.cfg.RedisUsers.Ensure(ctx, n); err != nil {
				p.cfg.Log.Warn("making the running agent's redis user again failed; will retry", "node", n.Name, "err", err)
			}
		}
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
	return p.start(ctx, n)
}

// start starts the node's agent.
func (p *Provider) start(ctx context.Context, n provider.Node) (provider.Launched, error) {
	for _, d := range []string{n.WorkDir, n.SharedDir, n.ScratchDir} {
		if d == "" {
			continue
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			return provider.Launched{}, fmt.Errorf("create %s: %w", d, err)
		}
	}
	cred := redisCred{p.cfg.RedisUsername, p.cfg.RedisPasswordFile}
	if p.cfg.RedisUsers != nil {
		user, file, err := p.cfg.RedisUsers.Ensure(ctx, n)
		if err != nil {
			return provider.Launched{}, fmt.Errorf("launch %s: %w", n.Name, err)
		}
		cred = redisCred{user, file}
	}
	// The node's first boot: later launches (its agent died) are not boots.
	if _, err := os.Stat(filepath.Join(n.WorkDir, BootIDFile)); errors.Is(err, os.ErrNotExist) {
		if err := writeBootID(n.WorkDir, NewBootID()); err != nil {
			return provider.Launched{}, err
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
	cmd.Env = append(p.env(n, cred), creds...)
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
// agents on one machine from colliding, then AgentEnv, then the node's
// settings (its simulated GPUs' model among them) and its Redis
// credential, cred.
func (p *Provider) env(n provider.Node, cred redisCred) []string {
	// The services' secret is the provisioner's, never an agent's: an
	// agent holding it could sign as any service. Nor is the
	// provisioner's Redis password an agent's that has a user of its own.
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "LOOM_SERVICE_KEY_FILE=") ||
			(p.cfg.RedisUsers != nil && strings.HasPrefix(kv, "LOOM_REDIS_PASSWORD=")) {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "LOOM_AGENT_GRPC_ADDR=127.0.0.1:0", "LOOM_AGENT_HTTP_ADDR=127.0.0.1:0")
	env = append(env, p.cfg.AgentEnv...)
	if m, ok := clusterspec.Machine(n.MachineType); ok && m.HasGPUs() {
		// Simulated GPUs are the machine type's: nvidia-smi on an
		// a3-highgpu-8g shows H100s, as the scheduler's gres does.
		env = append(env, "LOOM_AGENT_GPU_MODEL="+m.GPUName())
	}
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
		"LOOM_REDIS_USERNAME="+cred.user,
		"LOOM_REDIS_PASSWORD_FILE="+cred.passwordFile,
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

// Remove deletes the node's directory, after killing the step process
// groups its agent left behind (steps outlive an agent that dies) and
// deleting its agent's Redis user and then its keys (RedisUsers; its keys
// alone, RedisKeys, where agents share the provisioner's user): nothing of
// a removed node keeps running or can reach Redis, and nothing of it is left
// there for an agent of the same name (a cluster id used again) to inherit.
// Call it once the agent is stopped; a failure leaves the directory, and
// calling it again finishes. RemoveNodes removes many nodes at once.
func (p *Provider) Remove(ctx context.Context, n provider.Node) error {
	return p.RemoveNodes(ctx, []provider.Node{n})[0]
}

var _ provider.BatchRemover = (*Provider)(nil)

// RemoveNodes does what Remove does for every node of nodes, with one walk
// of Redis's keyspace for all their agents' keys (RedisUsers.DeleteAll,
// RedisKeys.DeleteAll) where a Remove each would walk it once per node:
// among 200,000 keys a walk takes about 0.2 s, which made a 1,000-node
// cluster's delete spend minutes walking. The step process groups are
// killed and the directories deleted LaunchConcurrency nodes at a time. It
// returns an error per node, in order; a node whose error is not nil keeps
// its directory (whatever else of it went), and removing it again
// finishes.
func (p *Provider) RemoveNodes(ctx context.Context, nodes []provider.Node) []error {
	errs := make([]error, len(nodes))
	p.eachNode(nodes, func(i int, n provider.Node) {
		if err := p.check(n); err != nil {
			errs[i] = err
			return
		}
		if err := p.killSteps(n); err != nil {
			errs[i] = fmt.Errorf("remove %s: %w", n.Name, err)
		}
	})
	var ready []provider.Node
	var at []int
	for i, n := range nodes {
		if errs[i] == nil {
			ready = append(ready, n)
			at = append(at, i)
		}
	}
	redisErrs := make([]error, len(ready))
	switch {
	case len(ready) == 0:
	case p.cfg.RedisUsers != nil:
		redisErrs = p.cfg.RedisUsers.DeleteAll(ctx, ready)
	case p.cfg.RedisKeys != nil:
		redisErrs = p.cfg.RedisKeys.DeleteAll(ctx, ready)
	}
	for j, i := range at {
		switch {
		case len(redisErrs) != len(ready):
			errs[i] = fmt.Errorf("remove %s: deleting the agents' Redis users or keys gave %d results for %d nodes", nodes[i].Name, len(redisErrs), len(ready))
		case redisErrs[j] != nil:
			errs[i] = fmt.Errorf("remove %s: %w", nodes[i].Name, redisErrs[j])
		}
	}
	p.eachNode(nodes, func(i int, n provider.Node) {
		if errs[i] != nil {
			return
		}
		if err := os.RemoveAll(n.WorkDir); err != nil {
			errs[i] = fmt.Errorf("remove %s: %w", n.WorkDir, err)
		}
	})
	return errs
}

// eachNode calls f for every node of nodes, LaunchConcurrency at a time,
// and returns when every call has.
func (p *Provider) eachNode(nodes []provider.Node, f func(int, provider.Node)) {
	if len(nodes) == 1 {
		f(0, nodes[0])
		return
	}
	sem := make(chan struct{}, p.cfg.LaunchConcurrency)
	var wg sync.WaitGroup
	for i, n := range nodes {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			f(i, n)
		})
	}
	wg.Wait()
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

// NewBootID returns a new random host boot id (32 hex digits).
func NewBootID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ReadBootID returns the host boot id of the node whose directory is
// workDir ("" when it has none).
func ReadBootID(workDir string) string {
	b, err := os.ReadFile(filepath.Join(workDir, BootIDFile))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// writeBootID writes the node's boot id atomically.
func writeBootID(workDir, id string) error {
	path := filepath.Join(workDir, BootIDFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o644); err != nil {
		return fmt.Errorf("write boot id: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write boot id: %w", err)
	}
	return nil
}

var _ provider.Repairer = (*Provider)(nil)
var _ provider.PassStarter = (*Provider)(nil)

// Repair carries out a repair for real. Reboot: every process of the node
// is killed (SIGKILL, as a power cycle does: its agent's process group,
// then the step process groups named by <work dir>/steps/*.pid, each
// checked by its start time), bootID is written to <work dir>/host_boot_id
// and the agent starts again with the node's directory, identity
// included, as it was. Reimage: the same, with the node's directory wiped
// (everything the node had) before the agent starts, so it bootstraps a
// new identity with the fresh credentials every start gets. Replace: n is
// the new node; it boots as bootID. Once host_boot_id is bootID the kill
// and wipe are done (they come first), so a repeated call only makes sure
// the agent runs.
func (p *Provider) Repair(ctx context.Context, n provider.Node, kind provider.RepairKind, bootID string) (provider.Launched, error) {
	if err := p.check(n); err != nil {
		return provider.Launched{}, err
	}
	if bootID == "" {
		return provider.Launched{}, fmt.Errorf("%s %s: empty boot id", kind, n.Name)
	}
	if ReadBootID(n.WorkDir) != bootID {
		if err := p.killAll(n); err != nil {
			return provider.Launched{}, fmt.Errorf("%s %s: %w", kind, n.Name, err)
		}
		if kind == provider.Reimage {
			if err := os.RemoveAll(n.WorkDir); err != nil {
				return provider.Launched{}, fmt.Errorf("reimage %s: wipe: %w", n.Name, err)
			}
		}
		if err := os.MkdirAll(n.WorkDir, 0o755); err != nil {
			return provider.Launched{}, fmt.Errorf("%s %s: %w", kind, n.Name, err)
		}
		if err := writeBootID(n.WorkDir, bootID); err != nil {
			return provider.Launched{}, fmt.Errorf("%s %s: %w", kind, n.Name, err)
		}
		p.cfg.Log.Info("node booted", "node", n.Name, "repair", kind.String(), "host_boot_id", bootID)
	}
	return p.Launch(ctx, n)
}

// killAll kills every process of the node: its agent's process group
// first (once it is gone it starts no new step), then its steps' groups.
func (p *Provider) killAll(n provider.Node) error {
	pidPath := filepath.Join(n.WorkDir, PIDFile)
	if pid, start, err := proc.ReadPIDFile(pidPath); err == nil && proc.Alive(pid, start) {
		if err := proc.KillGroup(pid, syscall.SIGKILL); err != nil {
			return err
		}
		if !proc.WaitGone(killWait, func() bool { return !proc.Alive(pid, start) }) {
			return fmt.Errorf("agent %d survived SIGKILL", pid)
		}
		p.cfg.Log.Info("agent killed", "node", n.Name, "pid", pid)
	}
	if err := p.killSteps(n); err != nil {
		return err
	}
	if err := os.Remove(pidPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	// How the killed agent ended is no news for the next Launch.
	p.mu.Lock()
	delete(p.exits, n.Name)
	p.mu.Unlock()
	return nil
}

// killSteps kills the step process groups named by <work dir>/steps/*.pid
// whose leader is still the process the file names, and waits until they
// are gone. The files stay: the agent reports those steps as lost.
func (p *Provider) killSteps(n provider.Node) error {
	files, err := filepath.Glob(filepath.Join(n.WorkDir, StepsDir, "*.pid"))
	if err != nil {
		return err
	}
	type group struct {
		pid   int
		start uint64
	}
	var killed []group
	for _, f := range files {
		pid, start, err := proc.ReadPIDFile(f)
		if err != nil || !proc.Alive(pid, start) {
			continue
		}
		if err := proc.KillGroup(pid, syscall.SIGKILL); err != nil {
			return err
		}
		killed = append(killed, group{pid, start})
	}
	for _, g := range killed {
		if !proc.WaitGone(killWait, func() bool { return !proc.Alive(g.pid, g.start) && !proc.GroupAlive(g.pid) }) {
			return fmt.Errorf("step process group %d survived SIGKILL", g.pid)
		}
	}
	if len(killed) > 0 {
		p.cfg.Log.Info("step process groups killed", "node", n.Name, "groups", len(killed))
	}
	return nil
}

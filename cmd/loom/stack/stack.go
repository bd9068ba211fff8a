// Package stack runs Loom's embedded default on one machine: a Kafka-protocol
// broker, Redis and a Google Pub/Sub fake (pstest) on loopback, and the
// central services (gateway, provisioner, scheduler, health, registry,
// training, bridge) in this process, each in its own goroutine with its own
// configuration. Agents are started by the
// provisioner's local provider as child processes.
//
// It is what `loom up` and `loom demo` run, and what integration tests start.
package stack

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	osuser "os/user"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/loom-ml/loom/cmd/loom/internal/slurmcli"
	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/embedded"
	svcbase "github.com/loom-ml/loom/libs/service"
	"github.com/loom-ml/loom/libs/topics"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/bridge"
	"github.com/loom-ml/loom/services/gateway"
	"github.com/loom-ml/loom/services/health"
	"github.com/loom-ml/loom/services/provisioner"
	"github.com/loom-ml/loom/services/registry"
	"github.com/loom-ml/loom/services/scheduler"
	"github.com/loom-ml/loom/services/training"
)

// Addrs are the loopback addresses the stack listens on. An empty field means
// a free port picked at start.
type Addrs struct {
	// Broker is the Kafka-protocol broker.
	Broker string
	// Redis is the Redis every service shares (each under its own key prefix).
	Redis string
	// Gateway is the public gRPC API; GatewayREST the same API as REST/JSON.
	Gateway, GatewayREST string
	// Provisioner, Scheduler, Health and Registry are the services' internal
	// gRPC addresses.
	Provisioner, Scheduler, Health, Registry string
	// The services' HTTP addresses for /metrics, /healthz and /readyz.
	GatewayHTTP, ProvisionerHTTP, SchedulerHTTP, HealthHTTP, RegistryHTTP string
	// Training is the training service's internal gRPC address, and
	// TrainingHTTP its HTTP address.
	Training, TrainingHTTP string
	// Bridge is the bridge's internal gRPC address (IngressService), and
	// BridgeHTTP its HTTP address.
	Bridge, BridgeHTTP string
	// PubSub is the Google Pub/Sub fake (pstest) other systems publish
	// ingress messages to (PUBSUB_EMULATOR_HOST); empty picks a free port.
	// PubSubREST serves its publish call over REST, for gcloud; empty
	// picks a free port.
	PubSub, PubSubREST string
}

// DefaultPortBase is the port base of `loom up`'s documented fixed ports
// (DefaultAddrs): every listener's port is the base plus its offset
// (AddrsAt), so the defaults are 127.0.0.1:7070 for the gateway and so on.
const DefaultPortBase = 7000

// The limits of a port base: its lowest port (base+70) must be
// unprivileged and its highest (base+maxPortOffset) at most 65535.
const (
	MinPortBase   = 1024
	maxPortOffset = 2176
	MaxPortBase   = 65535 - maxPortOffset
)

// DefaultAddrs returns the documented fixed ports of `loom up` (see
// docs/CONTRACTS.md): AddrsAt(DefaultPortBase), with the broker on
// 127.0.0.1:7092 and Redis on 127.0.0.1:7379 so that they do not clash
// with a Kafka or Redis already running on their usual ports.
func DefaultAddrs() Addrs {
	a, err := AddrsAt(DefaultPortBase)
	if err != nil {
		panic(err) // DefaultPortBase lies within the limits
	}
	return a
}

// AddrsAt returns the loopback addresses of a stack whose ports derive
// from base, each at a fixed offset: the gateway's gRPC API base+70, the
// internal services' gRPC base+71..76, REST and the console base+80, the
// Pub/Sub fake base+85 (REST base+86), the broker base+92, Redis base+379,
// and the services' /metrics base+2170..2176 (gateway first, in the order
// of the gRPC ports). Two stacks with bases 100 or more apart share no
// port. It refuses a base outside [MinPortBase, MaxPortBase].
func AddrsAt(base int) (Addrs, error) {
	if base < MinPortBase || base > MaxPortBase {
		return Addrs{}, fmt.Errorf("port base %d is out of range: it must be from %d to %d (its ports run from base+70 to base+%d)",
			base, MinPortBase, MaxPortBase, maxPortOffset)
	}
	at := func(offset int) string { return "127.0.0.1:" + strconv.Itoa(base+offset) }
	return Addrs{
		Broker:          at(92),
		Redis:           at(379),
		Gateway:         at(70),
		GatewayREST:     at(80),
		Provisioner:     at(71),
		Scheduler:       at(72),
		Health:          at(73),
		Registry:        at(74),
		GatewayHTTP:     at(2170),
		ProvisionerHTTP: at(2171),
		SchedulerHTTP:   at(2172),
		HealthHTTP:      at(2173),
		RegistryHTTP:    at(2174),
		Training:        at(75),
		TrainingHTTP:    at(2175),
		Bridge:          at(76),
		BridgeHTTP:      at(2176),
		PubSub:          at(85),
		PubSubREST:      at(86),
	}, nil
}

// Listener is one address of Addrs and what listens on it, in words.
type Listener struct {
	// Name says what listens, e.g. "the REST API and web console".
	Name string
	// Addr is the address (empty: a free port picked at start).
	Addr string
}

// Listeners returns every address of a with what listens on it, the
// public ones first.
func (a Addrs) Listeners() []Listener {
	return []Listener{
		{"the gateway's gRPC API", a.Gateway},
		{"the REST API and web console", a.GatewayREST},
		{"the gateway's /metrics", a.GatewayHTTP},
		{"the Pub/Sub fake", a.PubSub},
		{"the Pub/Sub fake's REST", a.PubSubREST},
		{"the broker", a.Broker},
		{"Redis", a.Redis},
		{"the provisioner", a.Provisioner},
		{"the scheduler", a.Scheduler},
		{"the health service", a.Health},
		{"the registry", a.Registry},
		{"the training service", a.Training},
		{"the bridge", a.Bridge},
		{"the provisioner's /metrics", a.ProvisionerHTTP},
		{"the scheduler's /metrics", a.SchedulerHTTP},
		{"the health service's /metrics", a.HealthHTTP},
		{"the registry's /metrics", a.RegistryHTTP},
		{"the training service's /metrics", a.TrainingHTTP},
		{"the bridge's /metrics", a.BridgeHTTP},
	}
}

// picked says whether addr is one Start picks free (empty, or port 0).
func picked(addr string) bool { return addr == "" || strings.HasSuffix(addr, ":0") }

// PortInUseError is CheckFree's error when a given address (not one Start
// picks) is taken by another process: the listener that wanted it.
type PortInUseError struct {
	Listener
	// Err is the listen error.
	Err error
}

func (e *PortInUseError) Error() string {
	return fmt.Sprintf("%s (%s) is in use by another process: %v", e.Addr, e.Name, e.Err)
}

func (e *PortInUseError) Unwrap() error { return e.Err }

// InUse returns the listener of a whose given address err says is in use:
// a PortInUseError's, or the one whose address an "address already in
// use" error names (a port taken between Start's check and the bind).
func (a Addrs) InUse(err error) (Listener, bool) {
	var pe *PortInUseError
	if errors.As(err, &pe) {
		return pe.Listener, true
	}
	if err == nil || (!errors.Is(err, syscall.EADDRINUSE) && !strings.Contains(err.Error(), "address already in use")) {
		return Listener{}, false
	}
	for _, l := range a.Listeners() {
		if !picked(l.Addr) && strings.Contains(err.Error(), l.Addr) {
			return l, true
		}
	}
	return Listener{}, false
}

// CheckFree returns a PortInUseError for the first given address of a
// (public listeners first) that another process holds, so that a caller
// can say which before it starts anything (`loom up`); a port taken after
// the check still fails Start, which InUse names. Picked addresses are
// not checked.
func CheckFree(a Addrs) error {
	for _, l := range a.Listeners() {
		if picked(l.Addr) {
			continue
		}
		ln, err := net.Listen("tcp", l.Addr)
		if err != nil {
			if errors.Is(err, syscall.EADDRINUSE) {
				return &PortInUseError{Listener: l, Err: err}
			}
			return fmt.Errorf("%s on %s: %w", l.Name, l.Addr, err)
		}
		_ = ln.Close()
	}
	return nil
}

// Options configures Start. The zero value is valid: free ports, a temporary
// data directory removed by Close, agents started as `<this executable> agent`.
type Options struct {
	// DataDir holds the broker's log, Redis' data, the local provider's
	// node and shared directories and the training service's log directory
	// (DataDir/broker, DataDir/redis, DataDir/provisioner,
	// DataDir/training/logs). Empty: a temporary directory that Close
	// removes.
	DataDir string
	// Addrs picks the listen addresses; empty fields get free ports.
	Addrs Addrs
	// AgentCommand is the argv that starts one agent process (the provider
	// adds the agent's settings as LOOM_* variables). Default:
	// [os.Executable(), "agent"].
	AgentCommand []string
	// AgentEnv is added to every agent's environment.
	AgentEnv []string
	// Provider is the provisioner's compute provider: "local" (an agent
	// process per node, the default) or "sim" (simulated nodes, no
	// processes; for scale).
	Provider string
	// ProvisionerArgs are more provisioner flags, given after the stack's
	// own (a flag given twice takes its last value): the sim provider's
	// -sim-* settings, say, or -max-batch.
	ProvisionerArgs []string
	// SchedulerArgs are more scheduler flags, given after the stack's own
	// (e.g. -backend=slurm -slurm-url=... to run jobs on a real Slurm:
	// docs/slurm-backend.md).
	SchedulerArgs []string
	// HealthArgs are more health flags, given after the stack's own (e.g.
	// -remediation=dry-run, -max-remediating=0.5, -mass-silence=0.5).
	HealthArgs []string
	// RegistryArgs are more registry flags, given after the stack's own
	// (e.g. -export-endpoints=https://minio.internal:9000, `loom up
	// --export-endpoints`).
	RegistryArgs []string
	// OnSimLaunch, when set, is told of every boot the sim provider starts:
	// the node's full name and the real time until its simulated agent
	// registers (sim.Config.OnLaunch) — how a benchmark learns the
	// provider's share of a create. It is called from the provisioner's
	// launches and must be quick and safe for concurrent use. It needs the
	// provisioner in this process: Start refuses it with BinDir.
	OnSimLaunch func(node string, latency time.Duration)
	// Capacity is the non-reserved capacity the provisioner hands out, in
	// its -capacity syntax ("us-central1-a/a3-ultragpu-8g/SPOT=8,*/*/ON_DEMAND=64").
	// Empty: LOOM_CAPACITY, else the provisioner's generous default.
	Capacity string
	// LogLevel is the services' log level: debug, info, warn or error
	// (default: LOOM_LOG_LEVEL, else info).
	LogLevel string
	// HeartbeatTimeout, when set, overrides how long the health service lets a
	// node be silent before it is DOWN.
	HeartbeatTimeout time.Duration
	// BusSessionTimeout, when set, is every central service's
	// -bus-session-timeout: how long a SIGKILLed service's consumer-group
	// partitions wait before its restarted instance (or another) reads
	// them. Default: LOOM_BUS_SESSION_TIMEOUT, else 10 s. Tests that kill
	// services set a few seconds (the embedded broker takes down to 1 s).
	BusSessionTimeout time.Duration
	// KeepAgents leaves the local provider's node agents running when the
	// stack closes, with their steps, as agents outlive a restart of a
	// control plane (`loom up`): the next Start with the same DataDir adopts
	// them, StopAgents ends them, and each ends itself once its control
	// plane has been gone for LOOM_AGENT_ORPHAN_AFTER (10 min). Default:
	// Close stops them.
	KeepAgents bool
	// StartTimeout bounds how long Start waits for the services to be ready
	// (default 60s; ctx's deadline applies too).
	StartTimeout time.Duration
	// Log receives the stack's own progress messages (default: discarded).
	Log *slog.Logger
	// Admin is the user who becomes the cluster administrator when the
	// gateway first starts on DataDir (its -bootstrap-admin): default, the
	// OS user running the stack.
	Admin string
	// BinDir, when set, runs each central service as its own process,
	// BinDir/<service>, given the same settings as flags that the in-process
	// services parse, with its output in DataDir/logs/<service>.log; agents
	// are BinDir/agent unless AgentCommand names another. Empty: every
	// service in this process. One test body can so run against both, as
	// etcd's tests run each member in-process or as its own binary.
	BinDir string
}

// Stack is a running embedded Loom. Close it when done.
type Stack struct {
	// GatewayAddr is the public gRPC API; RESTAddr the REST/JSON API.
	GatewayAddr, RESTAddr string
	// BrokerAddr and RedisAddr are the embedded infrastructure.
	BrokerAddr, RedisAddr string
	// PubSubAddr is the Pub/Sub fake (pstest; in memory only: a restart
	// starts it empty), with the topics and subscriptions of
	// embedded.LoomPubSubTopics in project embedded.PubSubProject.
	PubSubAddr string
	// PubSubRESTAddr serves the fake's publish over REST
	// (`POST /v1/projects/{p}/topics/{t}:publish`), what gcloud speaks.
	PubSubRESTAddr string
	// RedisPassword is what a client of RedisAddr AUTHs with (the embedded
	// Redis requires the password it generated in its data dir).
	RedisPassword string
	// RedisKind says which Redis runs: embedded.KindRedisServer or
	// embedded.KindMiniredis.
	RedisKind string
	// DataDir is where the stack keeps its data.
	DataDir string
	// Addrs are every address the stack listens on, resolved.
	Addrs Addrs
	// Keys are the stack's key files, in DataDir/keys (mode 0700).
	Keys Keys
	// Admin is the cluster administrator's user name (Options.Admin).
	Admin string
	// NewAdminKey says that the administrator's key was made at this start
	// (Keys.Admin did not exist before it): the one time `loom up` hands
	// it to the CLI and says so.
	NewAdminKey bool

	log     *slog.Logger
	broker  *embedded.Broker
	redis   *embedded.Redis
	pubsub  *embedded.PubSub
	tempDir string

	binDir   string
	services map[string]*service // by name
	wg       sync.WaitGroup
	mu       sync.Mutex
	exits    []serviceExit // services that have returned, in order
	closing  bool
	done     chan struct{} // closed when the first service exits on its own
	doneOnce sync.Once

	closeOnce sync.Once
	closeErr  error
}

// Keys are the paths of the stack's secrets, all in DataDir/keys, each
// mode 0600 in a directory of mode 0700 (see docs/security.md).
type Keys struct {
	// Dir is DataDir/keys.
	Dir string
	// Token is the gateway's token signing secret (-token-key-file).
	Token string
	// Service is the services' shared secret (-service-key-file,
	// LOOM_SERVICE_KEY_FILE): every service signs and verifies the bus
	// with it, and a tool that writes to the bus or calls an internal API
	// directly (a benchmark) uses it too.
	Service string
	// Admin holds the administrator's API key, which the gateway writes at
	// its first start (-bootstrap-key-file).
	Admin string
	// Login holds the login daemon's API key, which the gateway writes at
	// its first start (-login-key-file).
	Login string
}

// KeysIn returns the key file paths of a stack with dataDir.
func KeysIn(dataDir string) Keys {
	dir := filepath.Join(dataDir, "keys")
	return Keys{Dir: dir, Token: filepath.Join(dir, "token.key"), Service: filepath.Join(dir, "service.key"),
		Admin: filepath.Join(dir, "admin.key"), Login: filepath.Join(dir, "login.key")}
}

// keySize is the size of the stack's random secrets (HS256 and Ed25519
// seeds both want 32 bytes).
const keySize = 32

type serviceExit struct {
	name string
	err  error
}

// Start starts the broker, Redis, the Pub/Sub fake and the central
// services, and returns once every service reports SERVING (gRPC health) and the gateway answers
// ListClusters. On failure everything it started is stopped again and the
// error names the step (or the service) that failed.
//
// A port picked free (an empty address in opts.Addrs) can be taken by
// another process before its service binds it; Start then starts again on
// new ports, up to startAttempts times in all.
func Start(ctx context.Context, opts Options) (*Stack, error) {
	// Whether the administrator key is new is decided against the data
	// directory as it was before the first attempt: a failed attempt's
	// gateway may already have written the key.
	adminKeyExisted := false
	if opts.DataDir != "" {
		_, err := os.Stat(KeysIn(opts.DataDir).Admin)
		adminKeyExisted = err == nil
	}
	for attempt := 1; ; attempt++ {
		s, err := startOnce(ctx, opts)
		if err == nil {
			_, statErr := os.Stat(s.Keys.Admin)
			s.NewAdminKey = statErr == nil && !adminKeyExisted
		}
		if err == nil || attempt == startAttempts || !retryable(err, opts.Addrs) || ctx.Err() != nil {
			return s, err
		}
		if opts.Log != nil {
			opts.Log.Warn("a port picked free was taken before its service bound it; starting again on new ports", "err", err)
		}
	}
}

// startAttempts bounds Start's attempts when picked ports are taken.
const startAttempts = 3

// retryable says whether a failed start may succeed on new ports: a
// listener found its address in use, Start picks some addresses itself,
// and the address in use is not one of those given.
func retryable(err error, a Addrs) bool {
	if !errors.Is(err, syscall.EADDRINUSE) && !strings.Contains(err.Error(), "address already in use") {
		return false
	}
	if _, given := a.InUse(err); given {
		return false // a given address is taken: new ports would not help
	}
	for _, l := range a.Listeners() {
		if picked(l.Addr) {
			return true
		}
	}
	return false
}

func startOnce(ctx context.Context, opts Options) (*Stack, error) {
	s := &Stack{log: opts.Log, done: make(chan struct{})}
	if s.log == nil {
		s.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if err := s.start(ctx, opts); err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		// A service that failed is named in err already; Close would
		// report it again.
		if cerr := s.Close(cctx); cerr != nil && s.Err() == nil {
			err = fmt.Errorf("%w (while stopping: %v)", err, cerr)
		}
		return nil, err
	}
	return s, nil
}

func (s *Stack) start(ctx context.Context, opts Options) error {
	if opts.OnSimLaunch != nil && opts.BinDir != "" {
		return errors.New("start stack: OnSimLaunch needs the provisioner in this process, not BinDir's")
	}
	dataDir := opts.DataDir
	if dataDir == "" {
		d, err := os.MkdirTemp("", "loom-stack-")
		if err != nil {
			return fmt.Errorf("start stack: data dir: %w", err)
		}
		dataDir, s.tempDir = d, d
	} else if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return fmt.Errorf("start stack: data dir: %w", err)
	}
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return fmt.Errorf("start stack: data dir: %w", err)
	}
	s.DataDir = abs

	// The secrets first, made by one creator before any service reads them.
	s.Keys = KeysIn(s.DataDir)
	if err := os.MkdirAll(s.Keys.Dir, 0o700); err != nil {
		return fmt.Errorf("start stack: keys: %w", err)
	}
	if err := os.Chmod(s.Keys.Dir, 0o700); err != nil {
		return fmt.Errorf("start stack: keys: %w", err)
	}
	for _, k := range []string{s.Keys.Token, s.Keys.Service} {
		if _, err := auth.LoadOrCreateSecret(k, keySize); err != nil {
			return fmt.Errorf("start stack: %w", err)
		}
	}
	s.Admin = opts.Admin
	if s.Admin == "" {
		u, err := osuser.Current()
		if err != nil {
			return fmt.Errorf("start stack: the OS user to make administrator: %w (set Options.Admin)", err)
		}
		s.Admin = u.Username
	}

	agentCmd, agentEnv := opts.AgentCommand, opts.AgentEnv
	if len(agentCmd) == 0 && opts.BinDir != "" {
		agentCmd = []string{filepath.Join(opts.BinDir, "agent")}
	}
	if len(agentCmd) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("start stack: agent command: %w", err)
		}
		agentCmd = []string{exe, "agent"}
		// The agents are this loom, and so are the Slurm commands its jobs
		// run (srun in a batch script): links to it lead the jobs' PATH.
		bin := filepath.Join(s.DataDir, "bin")
		if err := slurmcli.LinkCommands(bin, exe); err != nil {
			return fmt.Errorf("start stack: %w", err)
		}
		agentEnv = append([]string{"LOOM_SLURM_BIN=" + bin}, agentEnv...)
		// Nodes whose GPUs are simulated get Loom's nvidia-smi there too;
		// where a driver loads, the real one stays the jobs' nvidia-smi.
		if err := linkNvidiaSMI(bin, exe, agentEnv); err != nil {
			return fmt.Errorf("start stack: %w", err)
		}
	}

	// The local agents may run root's jobs: `loom up` is one machine's
	// stack, whose administrator (who started it) is typically root. Every
	// other owner's jobs run as that owner's account. AgentEnv comes later
	// and may turn it off (LOOM_AGENT_ALLOW_ROOT_JOBS=false).
	agentEnv = append([]string{"LOOM_AGENT_ALLOW_ROOT_JOBS=true"}, agentEnv...)

	// The provisioner's -agent-command and -agent-env split on white space.
	for _, w := range append(append([]string{}, agentCmd...), agentEnv...) {
		if strings.ContainsAny(w, " \t\n") {
			return fmt.Errorf("start stack: agent command or environment %q holds white space, which the provisioner's -agent-command and -agent-env split on", w)
		}
	}

	a, err := resolveAddrs(opts.Addrs)
	if err != nil {
		return fmt.Errorf("start stack: %w", err)
	}

	s.broker, err = embedded.StartBroker(ctx, a.Broker, filepath.Join(s.DataDir, "broker"))
	if err != nil {
		return fmt.Errorf("start stack: %w", err)
	}
	a.Broker = s.broker.Addr
	s.log.Info("broker started", "addr", a.Broker)

	s.redis, err = embedded.StartRedis(ctx, a.Redis, filepath.Join(s.DataDir, "redis"))
	if err != nil {
		return fmt.Errorf("start stack: %w", err)
	}
	a.Redis = s.redis.Addr
	s.RedisKind = s.redis.Kind
	s.RedisPassword = s.redis.Password
	s.log.Info("redis started", "addr", a.Redis, "kind", s.redis.Kind)

	// One creator for the topics, before any service, so that the services do
	// not race each other creating them.
	if err := bus.EnsureTopics(ctx, []string{a.Broker}, topics.All()); err != nil {
		return fmt.Errorf("start stack: create topics: %w", err)
	}

	// Pub/Sub for other systems, with no setup: the fake and its topics
	// and subscriptions, made at every start since it keeps nothing.
	s.pubsub, err = embedded.StartPubSub(ctx, a.PubSub)
	if err != nil {
		return fmt.Errorf("start stack: %w", err)
	}
	a.PubSub = s.pubsub.Addr
	if err := s.pubsub.StartREST(a.PubSubREST); err != nil {
		return fmt.Errorf("start stack: %w", err)
	}
	a.PubSubREST = s.pubsub.RESTAddr
	if err := s.pubsub.Ensure(ctx, embedded.PubSubProject, embedded.LoomPubSubTopics()); err != nil {
		return fmt.Errorf("start stack: %w", err)
	}
	s.log.Info("pubsub started", "addr", a.PubSub, "rest", a.PubSubREST, "project", embedded.PubSubProject)

	s.Addrs = a
	s.BrokerAddr, s.RedisAddr, s.PubSubAddr, s.PubSubRESTAddr = a.Broker, a.Redis, a.PubSub, a.PubSubREST
	s.GatewayAddr, s.RESTAddr = a.Gateway, a.GatewayREST

	level := opts.LogLevel
	if level == "" {
		level = config.Env("LOOM_LOG_LEVEL", "info")
	}
	// Every service's settings are flags, the same whether it runs in this
	// process (parsed by its RegisterFlags, which fills in the documented
	// defaults and LOOM_* variables for the rest) or as its own binary.
	common := func(grpcAddr, httpAddr string) []string {
		args := []string{"-brokers=" + a.Broker, "-redis=" + a.Redis, "-grpc-addr=" + grpcAddr,
			"-http-addr=" + httpAddr, "-log-level=" + level, "-service-key-file=" + s.Keys.Service,
			"-create-topics=false"} // created above
		if s.redis.PasswordFile != "" {
			args = append(args, "-redis-password-file="+s.redis.PasswordFile)
		}
		return args
	}
	provider := provisioner.ProviderLocal
	if opts.Provider != "" {
		provider = opts.Provider
	}
	provArgs := append(common(a.Provisioner, a.ProvisionerHTTP), "-provider="+provider,
		"-data-dir="+filepath.Join(s.DataDir, "provisioner"),
		// Unless kept, agents belong to this stack: a stopped stack leaves
		// none behind (the provisioner starts them again from its state at
		// the next start).
		"-stop-agents-on-exit="+strconv.FormatBool(!opts.KeepAgents),
		"-agent-command="+strings.Join(agentCmd, " "),
		// Each launch gets a one-time bootstrap token, which the agent
		// exchanges at the gateway (AuthService.RegisterNode) for its node
		// identity; its jobs get workload tokens the same way.
		"-agent-identity=bootstrap",
		// The Slurm commands in jobs (srun) find this gateway.
		"-agent-env=LOOM_GATEWAY="+a.Gateway)
	for _, e := range agentEnv {
		provArgs = append(provArgs, "-agent-env="+e)
	}
	// Each agent gets a Redis user of its own, confined to its keys, where
	// the embedded Redis is a redis-server with a password (this stack's
	// provisioner is its default user, which may make users); miniredis
	// has no ACLs, and its agents share the provisioner's credential.
	agentUsers := provisioner.AgentRedisUsersOff
	if s.redis.Kind == embedded.KindRedisServer && s.redis.PasswordFile != "" {
		agentUsers = provisioner.AgentRedisUsersOn
	}
	provArgs = append(provArgs, "-agent-redis-users="+agentUsers)
	if opts.Capacity != "" {
		provArgs = append(provArgs, "-capacity="+opts.Capacity)
	}
	provArgs = append(provArgs, opts.ProvisionerArgs...)
	runProvisioner := provisioner.RunArgs
	if onLaunch := opts.OnSimLaunch; onLaunch != nil {
		runProvisioner = func(ctx context.Context, args []string) error {
			return provisioner.RunArgsWith(ctx, args, func(c *provisioner.Config) { c.Sim.OnLaunch = onLaunch })
		}
	}
	healthArgs := common(a.Health, a.HealthHTTP)
	if opts.HeartbeatTimeout > 0 {
		healthArgs = append(healthArgs, "-heartbeat-timeout="+opts.HeartbeatTimeout.String())
	}
	healthArgs = append(healthArgs, opts.HealthArgs...)
	gwArgs := append(common(a.Gateway, a.GatewayHTTP), "-rest-addr="+a.GatewayREST,
		"-provisioner-addr="+a.Provisioner, "-scheduler-addr="+a.Scheduler, "-registry-addr="+a.Registry,
		"-health-addr="+a.Health, "-training-addr="+a.Training, "-bridge-addr="+a.Bridge,
		// The console's dashboards scrape every central service's /metrics.
		"-metrics-targets="+metricsTargets(a))
	// Authentication's keys (docs/security.md): the gateway signs tokens
	// with one and makes the administrator's and the login daemon's API
	// keys at its first start.
	gwAuth := []keyArg{
		{"token-key-file", "LOOM_GATEWAY_TOKEN_KEY_FILE", s.Keys.Token},
		{"bootstrap-admin", "LOOM_GATEWAY_BOOTSTRAP_ADMIN", s.Admin},
		{"bootstrap-key-file", "LOOM_GATEWAY_BOOTSTRAP_KEY_FILE", s.Keys.Admin},
		{"login-key-file", "LOOM_GATEWAY_LOGIN_KEY_FILE", s.Keys.Login},
		// The scheduler's backend as the scheduler reads it from its
		// flags: the gateway refuses at once what the Slurm backend does
		// not map (docs/slurm-backend.md), and cannot be told otherwise.
		{"scheduler-backend", "LOOM_SCHEDULER_BACKEND", schedulerBackend(opts.SchedulerArgs)},
	}

	// A CustomJob's output outlives its ephemeral cluster (whose shared
	// directory goes with it) in the training service's log directory, as
	// Vertex keeps a job's logs (services/training/README.md).
	trainingArgs := append(common(a.Training, a.TrainingHTTP), "-log-dir="+filepath.Join(s.DataDir, "training", "logs"))

	bridgeArgs := append(common(a.Bridge, a.BridgeHTTP), "-gateway-addr="+a.Gateway,
		// Pub/Sub in and out on the fake; public events to Kafka and to
		// the fake's events topic.
		"-pubsub-endpoint="+a.PubSub, "-pubsub-project="+embedded.PubSubProject,
		"-pubsub-subscriptions="+embedded.PubSubIngressSubscription,
		"-pubsub-dead-letter-topic="+embedded.PubSubDeadLetterTopic,
		"-egress=kafka:"+topics.Public+" pubsub:projects/"+embedded.PubSubProject+"/topics/"+embedded.PubSubEventsTopic)

	s.binDir = opts.BinDir
	s.services = map[string]*service{}
	for _, svc := range []*service{
		{name: "provisioner", addr: a.Provisioner, args: provArgs, run: runProvisioner, flags: flagsOf((*provisioner.Config).RegisterFlags)},
		{name: "scheduler", addr: a.Scheduler, args: append(common(a.Scheduler, a.SchedulerHTTP), opts.SchedulerArgs...), run: scheduler.RunArgs, flags: flagsOf((*scheduler.Config).RegisterFlags)},
		{name: "health", addr: a.Health, args: healthArgs, run: health.RunArgs, flags: flagsOf((*health.Config).RegisterFlags)},
		{name: "registry", addr: a.Registry, args: append(common(a.Registry, a.RegistryHTTP), opts.RegistryArgs...), run: registry.RunArgs, flags: flagsOf((*registry.Config).RegisterFlags)},
		{name: "training", addr: a.Training, args: trainingArgs, run: training.RunArgs, flags: flagsOf((*training.Config).RegisterFlags)},
		{name: "gateway", addr: a.Gateway, args: gwArgs, run: gateway.RunArgs, flags: flagsOf((*gateway.Config).RegisterFlags), keys: gwAuth},
		// The bridge applies other systems' messages as calls to the
		// gateway (docs/integration.md).
		{name: "bridge", addr: a.Bridge, args: bridgeArgs, run: bridge.RunArgs, flags: flagsOf((*bridge.Config).RegisterFlags)},
	} {
		// Every service gets -service-key-file from common (config.Common).
		// Its launch id is how readiness knows the process that answers
		// on svc.addr is this one, not another that took the picked port.
		svc.keys = append(svc.keys, keyArg{"launch-id", "LOOM_LAUNCH_ID", newLaunchID()})
		if opts.BusSessionTimeout > 0 {
			svc.keys = append(svc.keys, keyArg{"bus-session-timeout", "LOOM_BUS_SESSION_TIMEOUT", opts.BusSessionTimeout.String()})
		}
		svc.addKeyArgs()
		s.services[svc.name] = svc
		if err := s.launch(ctx, svc); err != nil {
			return fmt.Errorf("start stack: %w", err)
		}
	}

	timeout := opts.StartTimeout
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	if err := s.waitReady(ctx, timeout); err != nil {
		return fmt.Errorf("start stack: %w", err)
	}
	s.log.Info("loom is up", "gateway", a.Gateway, "rest", a.GatewayREST, "data", s.DataDir)
	return nil
}

// schedulerBackend is the -backend the scheduler runs with given args
// (SchedulerArgs, after its LOOM_SCHEDULER_BACKEND default), read with
// the scheduler's own flags; its default when args do not parse, which
// the scheduler then refuses at its start anyway.
func schedulerBackend(args []string) string {
	var c scheduler.Config
	fs := flag.NewFlagSet("scheduler", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		return scheduler.BackendBuiltin
	}
	return c.Backend
}

// metricsTargets is the gateway's -metrics-targets for the stack's
// services (agents listen on ports of their own choosing: not listed).
func metricsTargets(a Addrs) string {
	var out []string
	for _, t := range []struct{ svc, addr string }{{"gateway", a.GatewayHTTP}, {"provisioner", a.ProvisionerHTTP},
		{"scheduler", a.SchedulerHTTP}, {"health", a.HealthHTTP}, {"registry", a.RegistryHTTP}, {"training", a.TrainingHTTP},
		{"bridge", a.BridgeHTTP}} {
		out = append(out, t.svc+"=http://"+t.addr+"/metrics")
	}
	return strings.Join(out, ",")
}

// resolveAddrs fills empty addresses with free loopback ports. The broker
// and Redis pick their own when empty.
func resolveAddrs(a Addrs) (Addrs, error) {
	fields := []*string{&a.Gateway, &a.GatewayREST, &a.Provisioner, &a.Scheduler, &a.Health,
		&a.Registry, &a.GatewayHTTP, &a.ProvisionerHTTP, &a.SchedulerHTTP, &a.HealthHTTP, &a.RegistryHTTP, &a.Training, &a.TrainingHTTP,
		&a.Bridge, &a.BridgeHTTP}
	for _, f := range fields {
		if *f != "" && !strings.HasSuffix(*f, ":0") {
			continue
		}
		p, err := embedded.FreePort()
		if err != nil {
			return a, err
		}
		*f = fmt.Sprintf("127.0.0.1:%d", p)
	}
	return a, nil
}

// newLaunchID returns a random id for a service's -launch-id.
func newLaunchID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// flagsOf is a service's flag registration without its config.
func flagsOf[C any](register func(*C, *flag.FlagSet)) func(*flag.FlagSet) {
	return func(fs *flag.FlagSet) { register(new(C), fs) }
}

// keyArg is a setting of authentication given to a service: as its flag
// when the service has it, else (a service as its own process) as its
// variable, so that a service that predates the setting still starts.
type keyArg struct{ flag, env, value string }

// service is one central service of the stack and how it runs.
type service struct {
	name, addr string
	args       []string // its settings, as flags
	run        func(context.Context, []string) error
	// flags registers the service's flags: what tells whether it has a
	// keyArg's flag.
	flags func(*flag.FlagSet)
	// keys are its authentication settings; env the ones given as
	// variables (BinDir only).
	keys []keyArg
	env  []string
	// launchID is its -launch-id: readiness asks gRPC health for
	// svcbase.LaunchHealthName(launchID), which only this process
	// answers ("" when the service has no such flag: any answer counts).
	launchID string

	mu     sync.Mutex
	stop   func()        // asks the running instance to stop (cancel, or SIGTERM)
	kill   func()        // ends it at once (SIGKILL; in-process, the same as stop)
	done   chan struct{} // closed when the running instance has returned
	killed bool          // the exit was asked for by Kill: not a failure
	// parked holds the gRPC port of a service that Kill ended until
	// Restart launches it again (nil otherwise).
	parked net.Listener
}

// addKeyArgs adds svc's keys to its args as flags where it has them, and
// to its env otherwise. In this process a variable would be every
// service's, and every stack's: a setting a service has no flag for is
// left out, which the service ignores anyway.
func (svc *service) addKeyArgs() {
	defined := map[string]bool{}
	if svc.flags != nil {
		fs := flag.NewFlagSet(svc.name, flag.ContinueOnError)
		svc.flags(fs)
		fs.VisitAll(func(f *flag.Flag) { defined[f.Name] = true })
	}
	for _, k := range svc.keys {
		if k.flag == "launch-id" && defined[k.flag] {
			svc.launchID = k.value
		}
		if defined[k.flag] {
			svc.args = append(svc.args, "-"+k.flag+"="+k.value)
		} else {
			svc.env = append(svc.env, k.env+"="+k.value)
		}
	}
}

// launch starts svc: in this process, or as BinDir/<name> when the stack
// runs services as processes.
func (s *Stack) launch(ctx context.Context, svc *service) error {
	done := make(chan struct{})
	if s.binDir == "" {
		sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		svc.mu.Lock()
		svc.stop, svc.kill, svc.done, svc.killed = cancel, cancel, done, false
		svc.mu.Unlock()
		s.watch(svc, done, func() (err error) {
			defer func() {
				if r := recover(); r != nil {
					s.log.Error("service panicked", "service", svc.name, "panic", r, "stack", string(debug.Stack()))
					err = fmt.Errorf("panic: %v", r)
				}
			}()
			return svc.run(sctx, svc.args)
		})
		return nil
	}
	logs := filepath.Join(s.DataDir, "logs")
	// The services' logs are the administrator's (0700, 0600): they name
	// every user's jobs.
	if err := os.MkdirAll(logs, 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(logs, svc.name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(s.binDir, svc.name), svc.args...)
	cmd.Env = append(os.Environ(), svc.env...)
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group: a terminal's Ctrl-C reaches the stack, which
	// stops the services in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return fmt.Errorf("%s: %w", svc.name, err)
	}
	svc.mu.Lock()
	svc.stop = func() { _ = cmd.Process.Signal(syscall.SIGTERM) }
	svc.kill = func() { _ = cmd.Process.Signal(syscall.SIGKILL) }
	svc.done, svc.killed = done, false
	svc.mu.Unlock()
	s.watch(svc, done, func() error {
		defer f.Close()
		if err := cmd.Wait(); err != nil {
			// The service's last words say why (and let Start tell a port
			// taken from under it, which a new start on other ports mends).
			return fmt.Errorf("%w: %s (its log: %s)", err, lastLine(f.Name()), f.Name())
		}
		return nil
	})
	return nil
}

// lastLine returns the last non-empty line of the file at path, at most
// 1 KiB of it (read from its last 4 KiB), or "" when it cannot be read.
func lastLine(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > 4096 {
		_, _ = f.Seek(st.Size()-4096, io.SeekStart)
	}
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	last := lines[len(lines)-1]
	if len(last) > 1024 {
		last = last[len(last)-1024:]
	}
	return last
}

// watch runs wait in its own goroutine and records how the service ended:
// an exit that neither Close nor Kill asked for breaks the stack (Done).
func (s *Stack) watch(svc *service, done chan struct{}, wait func() error) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(done)
		err := wait()
		svc.mu.Lock()
		killed := svc.killed
		svc.mu.Unlock()
		s.mu.Lock()
		closing := s.closing
		if !killed {
			s.exits = append(s.exits, serviceExit{name: svc.name, err: err})
		}
		s.mu.Unlock()
		if !closing && !killed {
			s.log.Error("service exited", "service", svc.name, "err", err)
			s.doneOnce.Do(func() { close(s.done) })
		}
	}()
}

// Kill ends one service at once, as a crash would: SIGKILL when services
// run as processes; in this process a goroutine cannot be killed, so it is
// stopped (gracefully). It returns once the service is gone. Its exit does
// not break the stack; Restart starts it again.
func (s *Stack) Kill(ctx context.Context, name string) error {
	svc, ok := s.services[name]
	if !ok {
		return fmt.Errorf("stack: no service %q", name)
	}
	svc.mu.Lock()
	svc.killed = true
	kill, done := svc.kill, svc.done
	svc.mu.Unlock()
	kill()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("stack: %s did not end: %w", name, ctx.Err())
	}
	svc.mu.Lock()
	svc.parked = park(svc.addr)
	svc.mu.Unlock()
	return nil
}

// park listens on addr and closes every connection at once, so that
// callers of a killed service see it down (a connection ended: gRPC's
// Unavailable), as they would with the port closed, while no other
// process can take the port. Without it, a parallel test that picked a
// free port could bind the killed service's, and the service's callers
// would reach a stranger (a CI run saw a bridge's retry answered by a
// gateway whose scheduler had no JobService). It returns nil when addr
// cannot be held: the port is then merely closed.
func park(addr string) net.Listener {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return ln
}

// Restart starts a service that Kill ended again, with the same settings,
// and returns once it reports SERVING.
func (s *Stack) Restart(ctx context.Context, name string) error {
	svc, ok := s.services[name]
	if !ok {
		return fmt.Errorf("stack: no service %q", name)
	}
	svc.mu.Lock()
	done := svc.done
	svc.mu.Unlock()
	select {
	case <-done:
	default:
		return fmt.Errorf("stack: %s is running; Kill it first", name)
	}
	svc.mu.Lock()
	if svc.parked != nil {
		svc.parked.Close()
		svc.parked = nil
	}
	svc.mu.Unlock()
	if err := s.launch(ctx, svc); err != nil {
		return fmt.Errorf("stack: restart %s: %w", name, err)
	}
	return s.serving(ctx, ctx, svc)
}

// waitReady waits until every service reports SERVING on the gRPC health
// service and the gateway answers ListClusters, a service exits, or the
// timeout passes.
func (s *Stack) waitReady(ctx context.Context, timeout time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for _, name := range []string{"provisioner", "scheduler", "health", "registry", "training", "gateway", "bridge"} {
		if err := s.serving(ctx, wctx, s.services[name]); err != nil {
			return err
		}
	}
	err := s.poll(ctx, wctx, s.GatewayAddr, func(ctx context.Context, conn *grpc.ClientConn) error {
		opts := []grpc.CallOption{grpc.WaitForReady(true)}
		// With authentication on, as the administrator; a gateway that
		// made no key takes the call as it is.
		if key, err := s.AdminKey(); err == nil {
			opts = append(opts, grpc.PerRPCCredentials(auth.Bearer(key)))
		}
		_, err := loomv1.NewClusterServiceClient(conn).ListClusters(ctx, &loomv1.ListClustersRequest{Parent: "projects/default"}, opts...)
		switch status.Code(err) {
		case codes.Unauthenticated, codes.PermissionDenied:
			// The administrator's key was revoked: the gateway answers,
			// which is what is waited for here.
			s.log.Warn("the gateway refuses the administrator key of this data directory", "file", s.Keys.Admin, "err", err)
			return nil
		}
		return err
	})
	if errors.Is(err, errServiceExited) {
		return s.Err()
	}
	if err != nil {
		return fmt.Errorf("gateway on %s does not answer: %w", s.GatewayAddr, err)
	}
	return nil
}

// serving waits until svc reports SERVING on the gRPC health service.
func (s *Stack) serving(ctx, wctx context.Context, svc *service) error {
	err := s.poll(ctx, wctx, svc.addr, func(ctx context.Context, conn *grpc.ClientConn) error {
		req := &healthpb.HealthCheckRequest{}
		if svc.launchID != "" {
			// Another process on the picked port answers NotFound here;
			// the wait goes on until this service binds or exits.
			req.Service = svcbase.LaunchHealthName(svc.launchID)
		}
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, req, grpc.WaitForReady(true))
		if err == nil && resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			err = fmt.Errorf("health %s", resp.GetStatus())
		}
		return err
	})
	if errors.Is(err, errServiceExited) {
		return s.Err()
	}
	if err != nil {
		return fmt.Errorf("%s on %s is not ready: %w", svc.name, svc.addr, err)
	}
	return nil
}

// errServiceExited stops waiting for readiness: a service is gone.
var errServiceExited = errors.New("a service exited")

// poll calls check on a connection to addr until it succeeds, a service
// exits, or wctx ends (ctx is the caller's, to tell an interruption from a
// timeout).
func (s *Stack) poll(ctx, wctx context.Context, addr string, check func(context.Context, *grpc.ClientConn) error) error {
	// A short reconnect backoff: gRPC's default grows to seconds while a
	// service is still starting, which would delay Start for nothing.
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, MaxDelay: 250 * time.Millisecond},
			MinConnectTimeout: time.Second,
		}))
	if err != nil {
		return err
	}
	defer conn.Close()
	for {
		cctx, ccancel := context.WithTimeout(wctx, 2*time.Second)
		lastErr := check(cctx, conn)
		ccancel()
		if lastErr == nil {
			return nil
		}
		select {
		case <-s.done:
			return errServiceExited
		case <-wctx.Done():
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("not within the start timeout: %v", lastErr)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// AdminKey returns the administrator's API key (Keys.Admin's content),
// which the CLI on this machine uses; fs.ErrNotExist when the gateway made
// none (authentication off, or a gateway without -bootstrap-key-file).
func (s *Stack) AdminKey() (string, error) { return ReadKeyFile(s.Keys.Admin) }

// LoginKey returns the login daemon's API key (Keys.Login's content).
func (s *Stack) LoginKey() (string, error) { return ReadKeyFile(s.Keys.Login) }

// ReadKeyFile reads an API key file the gateway wrote (the whole key, one
// line), refusing one that group or others may read.
func ReadKeyFile(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("key file %s has mode %v: it must not be readable by group or others (chmod 600 %s)", path, st.Mode().Perm(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	key := strings.TrimSpace(string(b))
	if key == "" {
		return "", fmt.Errorf("key file %s is empty", path)
	}
	return key, nil
}

// UserToken returns an access token for user, as the login daemon gets
// one (CreateToken with the login key): how tests and benchmarks act as a
// given user without an account on this machine.
func (s *Stack) UserToken(ctx context.Context, user string) (string, error) {
	key, err := s.LoginKey()
	if err != nil {
		return "", fmt.Errorf("stack: login key: %w", err)
	}
	conn, err := grpc.NewClient(s.GatewayAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return "", err
	}
	defer conn.Close()
	tok, err := loomv1.NewAuthServiceClient(conn).CreateToken(ctx, &loomv1.CreateTokenRequest{User: user}, grpc.PerRPCCredentials(auth.Bearer(key)))
	if err != nil {
		return "", fmt.Errorf("stack: token for %s: %w", user, err)
	}
	return tok.GetAccessToken(), nil
}

// Done is closed when a service exits on its own (before Close): the stack is
// then broken and should be closed. Err says which service and why.
func (s *Stack) Done() <-chan struct{} { return s.done }

// Err returns the services that exited before Close and their errors, or nil.
func (s *Stack) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for _, e := range s.exits {
		if e.err == nil {
			errs = append(errs, fmt.Errorf("%s exited", e.name))
		} else {
			errs = append(errs, fmt.Errorf("%s: %w", e.name, e.err))
		}
	}
	return errors.Join(errs...)
}

// Close stops the services gracefully (waiting for them until ctx ends), then
// Redis and the broker, and removes a temporary data directory. It returns
// the errors of services that failed (a service that stops because it was
// asked to is not an error) and of stopping the infrastructure. Calling it
// again returns the first result.
func (s *Stack) Close(ctx context.Context) error {
	s.closeOnce.Do(func() { s.closeErr = s.close(ctx) })
	return s.closeErr
}

func (s *Stack) close(ctx context.Context) error {
	var errs []error
	s.mu.Lock()
	early := append([]serviceExit(nil), s.exits...)
	s.closing = true
	s.mu.Unlock()

	if len(s.services) > 0 {
		for _, svc := range s.services {
			svc.mu.Lock()
			stop := svc.stop
			if svc.parked != nil {
				svc.parked.Close()
				svc.parked = nil
			}
			svc.mu.Unlock()
			if stop != nil {
				stop()
			}
		}
		stopped := make(chan struct{})
		go func() {
			s.wg.Wait()
			close(stopped)
		}()
		select {
		case <-stopped:
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("services did not stop in time: %w", ctx.Err()))
			for _, svc := range s.services { // processes that ignored SIGTERM
				svc.mu.Lock()
				kill := svc.kill
				svc.mu.Unlock()
				kill()
			}
		}
	}
	s.mu.Lock()
	exits := append([]serviceExit(nil), s.exits...)
	s.mu.Unlock()
	for i, e := range exits {
		if e.err == nil || (i >= len(early) && errors.Is(e.err, context.Canceled)) {
			continue
		}
		errs = append(errs, fmt.Errorf("%s: %w", e.name, e.err))
	}
	if s.redis != nil {
		if err := s.redis.Close(); err != nil {
			errs = append(errs, fmt.Errorf("stop redis: %w", err))
		}
	}
	if s.broker != nil {
		if err := s.broker.Close(); err != nil {
			errs = append(errs, fmt.Errorf("stop broker: %w", err))
		}
	}
	if s.pubsub != nil {
		if err := s.pubsub.Close(); err != nil {
			errs = append(errs, fmt.Errorf("stop pubsub: %w", err))
		}
	}
	if s.tempDir != "" {
		if err := os.RemoveAll(s.tempDir); err != nil {
			errs = append(errs, fmt.Errorf("remove data dir: %w", err))
		}
	}
	return errors.Join(errs...)
}

// provisionerDir is where a stack with dataDir keeps the local provider's
// cluster and node directories.
func provisionerDir(dataDir string) string { return filepath.Join(dataDir, "provisioner") }

// Agents returns the node agents that a stack with dataDir started and that
// still run (a stack closed with KeepAgents leaves them), each checked to be
// the process its node's pidfile names.
func Agents(dataDir string) ([]provisioner.LocalAgent, error) {
	return provisioner.LocalAgents(provisionerDir(dataDir))
}

// StopAgents ends the agents Agents finds for dataDir, all at once, each as
// the provisioner stops one (SIGTERM, so that it stops its steps; SIGKILL
// after grace, default 15s), and returns those it stopped. Run it while no
// stack runs on dataDir: a running one starts them again.
func StopAgents(ctx context.Context, dataDir string, grace time.Duration, log *slog.Logger) ([]provisioner.LocalAgent, error) {
	agents, err := Agents(dataDir)
	if err != nil {
		return nil, err
	}
	errs := make([]error, len(agents))
	var wg sync.WaitGroup
	for i, a := range agents {
		wg.Go(func() { errs[i] = provisioner.StopLocalAgent(ctx, a, grace, log) })
	}
	wg.Wait()
	return agents, errors.Join(errs...)
}

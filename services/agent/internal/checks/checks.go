// Package checks runs a node's health checks, as Google's Cluster Health
// Scanner runs them: GPU diagnostics (levels 1 to 3, in the shape of
// `dcgmi diag -j`), an NCCL-tests-style ring all-reduce over TCP between the
// agents, disk space, a speed check, and a site's own check programs.
//
// Every check runs under a timeout and is abandoned (its processes killed)
// when it passes it: a check that hangs is CHECK_ERROR, a failure of the
// check and not of the node, so that a hung check never drains a healthy
// node. Checks refuse to run while jobs hold the node unless asked to
// (allow_busy): the result is then CHECK_SKIPPED.
package checks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/gpu"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Names of the built-in checks (RunHealthCheck.check). Any other name is a
// site check: an executable of that name in Config.CheckDir.
const (
	GPUDiag       = "gpu_diag"
	AllReduce     = "allreduce"
	AllReducePair = "allreduce_pair"
	Disk          = "disk"
	Speed         = "speed"
)

// DefaultTimeout is each check's timeout when the command gives none; a
// site check gets DefaultSiteTimeout. gpu_diag's grows with its level.
var DefaultTimeout = map[string]time.Duration{
	GPUDiag:       time.Minute,
	AllReduce:     2 * time.Minute,
	AllReducePair: time.Minute,
	Disk:          30 * time.Second,
	Speed:         time.Minute,
}

// DefaultSiteTimeout is a site check's timeout when the command gives none.
const DefaultSiteTimeout = 5 * time.Minute

// abandonGrace is how long Run waits past a check's timeout for the check
// to notice its context and return before it gives up on it: a check that
// ignores its context is abandoned, not waited for.
const abandonGrace = 2 * time.Second

// Config is what a Runner needs from its agent.
type Config struct {
	// Device is the node's GPUs (nil: a node without GPUs; gpu_diag is then
	// CHECK_SKIPPED).
	Device gpu.Device
	// GPUs is how many GPUs the node offers the scheduler (its machine
	// type's; 0: not known). gpu_diag fails a node whose driver shows
	// fewer: a GPU gone from the bus altogether is no longer listed.
	GPUs int
	// Node is the node's full name, Hostname its Slurm-style name and
	// Cluster the cluster's full name (projects/p/clusters/c): the result's
	// node, hostname and name prefix.
	Node, Hostname, Cluster string
	// WorkDir is the node's directory: the disk check's default path and
	// where the speed check's scratch goes.
	WorkDir string
	// CheckDir holds the site's check programs (-check-dir,
	// LOOM_AGENT_CHECK_DIR); empty: none.
	CheckDir string
	// Busy reports whether jobs hold the node now (nil: never busy).
	Busy func() bool
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// Log receives the checks' log lines (nil: slog.Default()).
	Log *slog.Logger
	// Disks, when set, reads the filesystems the disk check judges
	// (gpu.DiskUsage on the node, which the simulated device's
	// FAULT_DISK_FULL shows); nil: statfs of WorkDir and params["paths"].
	Disks func(paths ...string) []*loomv1.DiskSample
	// Dial connects to a peer's check endpoint (nil: a net.Dialer); tests
	// give a slow or corrupting link here.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// LookPath finds dcgmi (nil: exec.LookPath); tests hide or fake it.
	LookPath func(file string) (string, error)
	// Identity is the node's current identity (it is renewed, so a
	// function). With one, the all-reduce endpoint takes connections only
	// from nodes of the same cluster, proven with their identity, and this
	// node proves its own to its neighbours (peerauth.go). nil, or nil
	// returned: an agent without an identity (an insecure development bus),
	// whose endpoint authenticates nobody.
	Identity func() *auth.NodeIdentity
}

// Runner runs checks on one node and serves its all-reduce endpoint. It is
// safe for concurrent use: checks of different runs may run at once.
type Runner struct {
	cfg Config
	log *slog.Logger
	// rings hands the connection from a ring's left neighbour, accepted by
	// Serve, to the check of that ring (see allreduce.go).
	mu    sync.Mutex
	rings map[string]*mailbox
	// held counts the connections Serve holds (see maxHeld).
	held atomic.Int32
	// refused counts the connections the endpoint refused, by reason.
	refused *prometheus.CounterVec
}

// New returns a Runner with cfg's defaults filled in.
func New(cfg Config) *Runner {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Busy == nil {
		cfg.Busy = func() bool { return false }
	}
	return &Runner{cfg: cfg, log: cfg.Log, rings: map[string]*mailbox{}, refused: newRefusedCounter()}
}

// verdict is what one check found: the parts of a result the check decides.
type verdict struct {
	outcome loomv1.CheckOutcome
	summary string
	detail  string
	metrics map[string]float64
	gpu     int32
}

func pass(summary string) verdict {
	return verdict{outcome: loomv1.CheckOutcome_CHECK_PASS, summary: summary, gpu: -1}
}

func fail(gpu int, format string, args ...any) verdict {
	return verdict{outcome: loomv1.CheckOutcome_CHECK_FAIL, summary: fmt.Sprintf(format, args...), gpu: int32(gpu)}
}

func checkError(format string, args ...any) verdict {
	return verdict{outcome: loomv1.CheckOutcome_CHECK_ERROR, summary: fmt.Sprintf(format, args...), gpu: -1}
}

func skipped(format string, args ...any) verdict {
	return verdict{outcome: loomv1.CheckOutcome_CHECK_SKIPPED, summary: fmt.Sprintf(format, args...), gpu: -1}
}

// Run runs the check cmd names and returns its result; it never returns
// nil. The result's name is the cluster's healthResults/<run_id>.
//
// A check still running at its timeout (cmd.timeout, else DefaultTimeout)
// is stopped: its context ends, its processes are killed, and the result is
// CHECK_ERROR "killed at its timeout" — the check failed, not the node. A
// node busy with jobs (Config.Busy) gives CHECK_SKIPPED unless
// cmd.allow_busy. A name that is neither a built-in nor a program in
// CheckDir is CHECK_SKIPPED (errNoSuchCheck): the node cannot run it.
func (r *Runner) Run(ctx context.Context, cmd *eventsv1.RunHealthCheck) *loomv1.HealthCheckResult {
	start := r.cfg.Now()
	res := &loomv1.HealthCheckResult{
		Name:     r.cfg.Cluster + "/healthResults/" + cmd.GetRunId(),
		Node:     r.cfg.Node,
		Hostname: r.cfg.Hostname,
		Check:    cmd.GetCheck(),
		Level:    cmd.GetLevel(),
		Trigger:  cmd.GetTrigger(),
		ScanId:   cmd.GetScanId(),
		Gpu:      -1,
	}
	v := r.run(ctx, cmd)
	res.Outcome, res.Summary, res.Detail, res.Metrics, res.Gpu = v.outcome, v.summary, v.detail, v.metrics, v.gpu
	res.StartTime = timestamppb.New(start)
	res.EndTime = timestamppb.New(r.cfg.Now())
	r.log.Info("health check done", "check", cmd.GetCheck(), "run", cmd.GetRunId(), "outcome", v.outcome, "summary", v.summary)
	return res
}

func (r *Runner) run(ctx context.Context, cmd *eventsv1.RunHealthCheck) verdict {
	name := cmd.GetCheck()
	if !cmd.GetAllowBusy() && r.cfg.Busy() {
		return skipped("node busy with jobs (allow_busy not set)")
	}
	check, timeout, err := r.lookup(cmd)
	if errors.Is(err, errNoSuchCheck) {
		return skipped("%s", strings.TrimSuffix(err.Error(), ": "+errNoSuchCheck.Error()))
	}
	if err != nil {
		return checkError("%v", err)
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	done := make(chan verdict, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- checkError("check %s panicked: %v", name, p)
			}
		}()
		done <- check(cctx, cmd)
	}()
	select {
	case v := <-done:
		// ctx past its deadline (a prolog's or epilog's, all its checks
		// together) is a timeout too; only a cancelled ctx is the agent
		// stopping.
		if cctx.Err() == context.DeadlineExceeded && ctx.Err() != context.Canceled {
			return killed(name, timeout)
		}
		if ctx.Err() != nil && v.outcome != loomv1.CheckOutcome_CHECK_PASS {
			return checkError("check %s stopped: the agent is stopping", name)
		}
		return v
	case <-cctx.Done():
	}
	// The check's context ended: give it a moment to return, then abandon
	// it (its processes were killed by their own context).
	t := time.NewTimer(abandonGrace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		r.log.Warn("health check abandoned: it did not return after its timeout", "check", name, "run", cmd.GetRunId())
	}
	if ctx.Err() == context.Canceled {
		return checkError("check %s stopped: the agent is stopping", name)
	}
	return killed(name, timeout)
}

func killed(name string, timeout time.Duration) verdict {
	return checkError("check %s killed at its timeout (%s): the check failed, not the node", name, timeout)
}

type checkFunc func(ctx context.Context, cmd *eventsv1.RunHealthCheck) verdict

// lookup returns the check cmd names and its timeout.
func (r *Runner) lookup(cmd *eventsv1.RunHealthCheck) (checkFunc, time.Duration, error) {
	name := cmd.GetCheck()
	timeout := cmd.GetTimeout().AsDuration()
	var f checkFunc
	switch name {
	case GPUDiag:
		f = r.gpuDiag
		if timeout <= 0 {
			timeout = DefaultTimeout[name] * time.Duration(max(1, cmd.GetLevel()))
		}
	case AllReduce, AllReducePair:
		f = r.allReduce
	case Disk:
		f = r.disk
	case Speed:
		f = r.speed
	case "":
		return nil, 0, fmt.Errorf("no check named")
	default:
		path, err := r.sitePath(name)
		if err != nil {
			return nil, 0, err
		}
		f = func(ctx context.Context, cmd *eventsv1.RunHealthCheck) verdict { return r.site(ctx, path, cmd) }
		if timeout <= 0 {
			timeout = DefaultSiteTimeout
		}
	}
	if timeout <= 0 {
		timeout = DefaultTimeout[name]
	}
	return f, timeout, nil
}

// param returns cmd's parameter k, or def.
func param(cmd *eventsv1.RunHealthCheck, k, def string) string {
	if v, ok := cmd.GetParams()[k]; ok && strings.TrimSpace(v) != "" {
		return strings.TrimSpace(v)
	}
	return def
}

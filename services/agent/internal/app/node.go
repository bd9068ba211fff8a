package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/jonboulle/clockwork"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/gpu"
	"github.com/loom-ml/loom/libs/proc"
	"github.com/loom-ml/loom/libs/store"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/agent/internal/adapters"
	"github.com/loom-ml/loom/services/agent/internal/domain"
)

// CheckRunner runs one health check on this node (services/agent/internal/checks
// is the agent's): the result, whatever happened (a check that could not run
// is a CHECK_ERROR result, not an error). Run returns by ctx's deadline.
type CheckRunner interface {
	Run(ctx context.Context, cmd *eventsv1.RunHealthCheck) *loomv1.HealthCheckResult
}

// DefaultTelemetryInterval and MinTelemetryInterval bound how often GPU
// telemetry is published (the agent's -telemetry-interval).
const (
	DefaultTelemetryInterval = 10 * time.Second
	MinTelemetryInterval     = time.Second
)

// xidPoll is how often the Xid loop reads the device when nothing kicks it
// (an NVML event set is drained, the simulated state read).
const xidPoll = time.Second

// staleCheck is how old a RunHealthCheck may be (beyond its own timeout)
// and still run: one found in a backlog after the agent was down for long
// is answered by nobody waiting.
const staleCheck = 10 * time.Minute

// NodeOptions configure a Node.
type NodeOptions struct {
	// Store is the agent's: inbox marks of node commands and the outbox
	// of XidObserved and HealthCheckCompleted.
	Store *store.Store
	// Publisher sends GpuTelemetry (which, like heartbeats, bypasses the
	// outbox: a reading is worth something only now).
	Publisher Publisher
	// Device is the node's GPUs (required).
	Device gpu.Device
	// Checks runs RunHealthCheck (nil: every check is answered CHECK_ERROR
	// "checks not available"); SetChecks sets it later.
	Checks   CheckRunner
	Self     domain.Self
	Hostname string
	// WorkDir is the node's directory: its steps/*.pid name the process
	// groups FAULT_HUNG_JOB stops.
	WorkDir string
	// GPUs is how many GPUs the node offers the scheduler (GpuTelemetry's
	// offered_gpus, which health compares with the GPUs the device lists).
	GPUs int
	// DiskPaths are the paths whose filesystems GpuTelemetry reports
	// (default WorkDir).
	DiskPaths []string
	// Interval is how often GpuTelemetry is published (default
	// DefaultTelemetryInterval, at least MinTelemetryInterval).
	Interval time.Duration
	Log      *slog.Logger
	Clock    clockwork.Clock
}

// Node is the agent's side of hardware health: it publishes the GPUs'
// telemetry and Xids, serves them as dcgm-exporter metrics, and applies
// loom.node.commands.v1 (InjectNodeFault, RunHealthCheck) for its node.
// Safe for concurrent use.
type Node struct {
	opts NodeOptions
	log  *slog.Logger

	// mutedUntil is when FAULT_NO_HEARTBEAT ends (unix nanoseconds; 0:
	// not muted; math.MaxInt64: until cleared).
	mutedUntil atomic.Int64
	// hung is set while FAULT_HUNG_JOB holds the node's steps stopped.
	hung atomic.Bool

	// kick wakes the Xid loop at once (after an injection).
	kick chan struct{}

	mu sync.Mutex
	// last is the latest reading, for /metrics.
	last     []*loomv1.GpuSample
	lastDisk []*loomv1.DiskSample
	// xidSent is when an Xid was last emitted per (GPU, code): at most
	// one a second each.
	xidSent map[[2]int]time.Time

	checks sync.WaitGroup
	// runner is the CheckRunner (Options.Checks, SetChecks).
	runner atomic.Pointer[CheckRunner]
}

// NewNode returns the Node of opts.
func NewNode(opts NodeOptions) (*Node, error) {
	if opts.Device == nil {
		return nil, errors.New("agent: no GPU device")
	}
	if opts.Clock == nil {
		opts.Clock = clockwork.NewRealClock()
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultTelemetryInterval
	}
	opts.Interval = max(opts.Interval, MinTelemetryInterval)
	if len(opts.DiskPaths) == 0 && opts.WorkDir != "" {
		opts.DiskPaths = []string{opts.WorkDir}
	}
	n := &Node{opts: opts, log: opts.Log, kick: make(chan struct{}, 1), xidSent: map[[2]int]time.Time{}}
	n.SetChecks(opts.Checks)
	return n, nil
}

// SetChecks sets what runs RunHealthCheck from now on (nil: none): the
// agent's checks are built once its App is (they ask it whether the node
// is busy).
func (n *Node) SetChecks(r CheckRunner) {
	if r == nil {
		n.runner.Store(nil)
		return
	}
	n.runner.Store(&r)
}

// Device is the node's GPUs.
func (n *Node) Device() gpu.Device { return n.opts.Device }

// nodeEvent wraps a payload the node emits, keyed by the node.
func (n *Node) nodeEvent(p proto.Message) (envelope.Event, error) {
	return envelope.Route(n.opts.Self.Node, adapters.Source, p)
}

// forUs reports whether a node command is this node's (the partition is
// shared with other nodes; the consumer's key filter passes over theirs,
// this is the payload's own say).
func (n *Node) forUs(node string) bool { return node == n.opts.Self.Node }

// mark writes the inbox mark of event id (with tx's writes and events, if
// any) and reports whether this is its first delivery.
func (n *Node) mark(ctx context.Context, id string, tx *store.Tx) (bool, error) {
	if tx == nil {
		tx = &store.Tx{}
	}
	applied, err := n.opts.Store.Apply(ctx, id, tx)
	if store.OutcomeUnknown(err) {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if seen, serr := n.opts.Store.Seen(sctx, id); serr == nil && seen {
			return true, nil
		}
	}
	return applied, err
}

// InjectNodeFault applies an InjectNodeFault delivered as event id, once
// (its inbox mark is written first): FAULT_HUNG_JOB and FAULT_NO_HEARTBEAT
// here, every other kind into the device (the simulated one; real GPUs
// refuse, which is logged: the command is not retried). FAULT_CLEAR with
// gpu -1 also ends the agent-side faults.
func (n *Node) InjectNodeFault(ctx context.Context, id string, cmd *eventsv1.InjectNodeFault) error {
	if !n.forUs(cmd.GetNode()) || cmd.GetFault() == nil {
		return nil
	}
	first, err := n.mark(ctx, id, nil)
	if err != nil {
		return fmt.Errorf("record fault injection: %w", err)
	}
	if !first {
		return nil
	}
	f := cmd.GetFault()
	log := n.log.With("fault", f.GetKind().String(), "gpu", f.GetGpu(), "xid", f.GetXid(), "value", f.GetValue(), "user", cmd.GetUser())
	if err := n.Inject(f); err != nil {
		log.Warn("fault not injected", "err", err)
		return nil
	}
	log.Warn("fault injected")
	return nil
}

// Inject applies fault f now (the API tests and InjectNodeFault use).
func (n *Node) Inject(f *loomv1.Fault) error {
	switch f.GetKind() {
	case loomv1.FaultKind_FAULT_HUNG_JOB:
		n.hung.Store(true)
		n.signalSteps(syscall.SIGSTOP)
		return nil
	case loomv1.FaultKind_FAULT_NO_HEARTBEAT:
		until := int64(math.MaxInt64)
		if f.GetValue() > 0 {
			until = n.opts.Clock.Now().Add(time.Duration(f.GetValue() * float64(time.Second))).UnixNano()
		}
		n.mutedUntil.Store(until)
		return nil
	case loomv1.FaultKind_FAULT_CLEAR:
		if f.GetGpu() < 0 {
			n.mutedUntil.Store(0)
			if n.hung.Swap(false) {
				n.signalSteps(syscall.SIGCONT)
			}
		}
	}
	err := n.opts.Device.Inject(f)
	if f.GetKind() == loomv1.FaultKind_FAULT_CLEAR && errors.Is(err, gpu.ErrNotSimulated) {
		// Clearing what only the agent held is fine on real GPUs.
		err = nil
	}
	select {
	case n.kick <- struct{}{}:
	default:
	}
	return err
}

// HeartbeatsMuted reports whether FAULT_NO_HEARTBEAT holds the node's signs
// of life to health (heartbeats and GPU telemetry) back now.
func (n *Node) HeartbeatsMuted() bool {
	u := n.mutedUntil.Load()
	return u != 0 && n.opts.Clock.Now().UnixNano() < u
}

// Hung reports whether FAULT_HUNG_JOB holds the node's steps stopped.
func (n *Node) Hung() bool { return n.hung.Load() }

// HeartbeatGate wraps p so that heartbeats are dropped, as sent, while
// FAULT_NO_HEARTBEAT holds: the agent goes silent to health, but not to
// itself (its lifeline sees Kafka answer). Everything else passes.
func (n *Node) HeartbeatGate(p Publisher) Publisher {
	return publisherFunc(func(ctx context.Context, events ...envelope.Event) error {
		if !n.HeartbeatsMuted() {
			return p.Publish(ctx, events...)
		}
		keep := events[:0:0]
		for _, e := range events {
			if _, hb := e.Payload.(*eventsv1.Heartbeat); !hb {
				keep = append(keep, e)
			}
		}
		if len(keep) == 0 {
			return nil
		}
		return p.Publish(ctx, keep...)
	})
}

type publisherFunc func(ctx context.Context, events ...envelope.Event) error

func (f publisherFunc) Publish(ctx context.Context, events ...envelope.Event) error {
	return f(ctx, events...)
}

// signalSteps sends sig to the process group of every step the node's
// steps directory names (<work dir>/steps/*.pid: pid and start time, so
// that a reused pid is left alone).
func (n *Node) signalSteps(sig syscall.Signal) {
	files, _ := filepath.Glob(filepath.Join(n.opts.WorkDir, "steps", "*.pid"))
	for _, f := range files {
		pid, start, err := proc.ReadPIDFile(f)
		if err != nil || pid <= 1 {
			continue
		}
		if st, ok := proc.StartTime(pid); !ok || (start != 0 && st != start) {
			continue
		}
		if err := syscall.Kill(-pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			n.log.Warn("signal step group", "pgid", pid, "signal", sig.String(), "err", err)
		}
	}
}

// RunHealthCheck applies a RunHealthCheck delivered as event id, once: the
// check runs in a goroutine of its own (bounded by its timeout) and its
// result is emitted as HealthCheckCompleted through the outbox. A command
// older than its timeout plus staleCheck is passed over.
func (n *Node) RunHealthCheck(ctx context.Context, id string, cmd *eventsv1.RunHealthCheck, sent time.Time) error {
	if !n.forUs(cmd.GetNode()) {
		return nil
	}
	timeout := cmd.GetTimeout().AsDuration()
	if timeout <= 0 {
		timeout = 10 * time.Minute
	}
	if !sent.IsZero() && n.opts.Clock.Since(sent) > timeout+staleCheck {
		n.log.Info("not running a stale health check", "check", cmd.GetCheck(), "run", cmd.GetRunId(), "sent", sent)
		return nil
	}
	first, err := n.mark(ctx, id, nil)
	if err != nil {
		return fmt.Errorf("record health check: %w", err)
	}
	if !first {
		return nil
	}
	n.checks.Go(func() {
		start := n.opts.Clock.Now()
		cctx, cancel := context.WithTimeout(context.Background(), timeout)
		res := n.runCheck(cctx, cmd)
		cancel()
		n.fill(res, cmd, start)
		n.emitResult(res)
	})
	return nil
}

// runCheck runs cmd on the CheckRunner, or answers CHECK_ERROR without one.
func (n *Node) runCheck(ctx context.Context, cmd *eventsv1.RunHealthCheck) *loomv1.HealthCheckResult {
	r := n.runner.Load()
	if r == nil {
		return &loomv1.HealthCheckResult{Outcome: loomv1.CheckOutcome_CHECK_ERROR, Summary: "checks not available", Gpu: -1}
	}
	res := (*r).Run(ctx, cmd)
	if res == nil {
		res = &loomv1.HealthCheckResult{Outcome: loomv1.CheckOutcome_CHECK_ERROR, Summary: "the check returned no result", Gpu: -1}
	}
	return res
}

// fill completes what a result must say whoever ran it: whose, which
// check and run, when.
func (n *Node) fill(res *loomv1.HealthCheckResult, cmd *eventsv1.RunHealthCheck, start time.Time) {
	if res.GetName() == "" && cmd.GetRunId() != "" {
		res.Name = cmd.GetCluster() + "/healthResults/" + cmd.GetRunId()
	}
	res.Node, res.Hostname = n.opts.Self.Node, n.opts.Hostname
	// What a check found is what a program printed (a site check's stdout
	// and stderr): bytes that are not UTF-8 would make the result fail to
	// encode, and a dropped result reads to health as a check that never
	// answered.
	res.Summary = strings.ToValidUTF8(res.Summary, "\uFFFD")
	res.Detail = strings.ToValidUTF8(res.Detail, "\uFFFD")
	for k, v := range res.Metrics {
		if !utf8.ValidString(k) {
			delete(res.Metrics, k)
			res.Metrics[strings.ToValidUTF8(k, "\uFFFD")] = v
		}
	}
	if res.Check == "" {
		res.Check = cmd.GetCheck()
	}
	if res.Level == 0 {
		res.Level = cmd.GetLevel()
	}
	if res.Trigger == "" {
		res.Trigger = cmd.GetTrigger()
	}
	if res.ScanId == "" {
		res.ScanId = cmd.GetScanId()
	}
	if res.StartTime == nil {
		res.StartTime = timestamppb.New(start)
	}
	if res.EndTime == nil {
		res.EndTime = timestamppb.New(n.opts.Clock.Now())
	}
}

// emitResult writes HealthCheckCompleted to the outbox, retrying for a
// while (persistTimeout): nothing redelivers a check that has run.
func (n *Node) emitResult(res *loomv1.HealthCheckResult) {
	ev, err := n.nodeEvent(&eventsv1.HealthCheckCompleted{Result: res})
	if err != nil {
		n.log.Error("encode health check result", "err", err)
		return
	}
	n.emit(ev, "health check result")
	n.log.Info("health check done", "check", res.GetCheck(), "outcome", res.GetOutcome().String(), "summary", res.GetSummary())
}

// emit writes ev to the outbox, retrying with backoff for persistTimeout.
// A write whose outcome is unknown is written again: it may never have
// reached Redis, and nothing else would send ev; a second copy has the same
// event id, which its readers' inboxes drop.
func (n *Node) emit(ev envelope.Event, what string) {
	ctx, cancel := context.WithTimeout(context.Background(), persistTimeout)
	defer cancel()
	delay := 50 * time.Millisecond
	for {
		var tx store.Tx
		tx.Emit(ev)
		_, err := n.opts.Store.Apply(ctx, "", &tx)
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			n.log.Error("could not write "+what, "err", err)
			return
		case <-time.After(delay):
			delay = min(2*delay, 2*time.Second)
		}
	}
}

// WaitChecks waits until the checks running end or ctx does.
func (n *Node) WaitChecks(ctx context.Context) {
	done := make(chan struct{})
	go func() { n.checks.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// Telemetry publishes GpuTelemetry (every GPU's reading and the disks')
// every interval until ctx ends, and keeps the latest for /metrics. While
// FAULT_HUNG_JOB holds, it also stops steps started since.
func (n *Node) Telemetry(ctx context.Context) error {
	t := n.opts.Clock.NewTicker(n.opts.Interval)
	defer t.Stop()
	for {
		n.publishTelemetry(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.Chan():
		}
	}
}

// LastGPUs is the latest reading of the node's GPUs (nil before the first):
// what job accounting attributes to the steps holding them.
func (n *Node) LastGPUs() []*loomv1.GpuSample {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.last
}

// Sample reads the GPUs and disks now and keeps them for /metrics.
func (n *Node) Sample(ctx context.Context) ([]*loomv1.GpuSample, []*loomv1.DiskSample, error) {
	gpus, err := n.opts.Device.Sample(ctx)
	disks := gpu.Disks(n.opts.Device, n.opts.DiskPaths...)
	n.mu.Lock()
	if err == nil {
		n.last = gpus
	}
	n.lastDisk = disks
	n.mu.Unlock()
	return gpus, disks, err
}

func (n *Node) publishTelemetry(ctx context.Context) {
	if n.hung.Load() {
		n.signalSteps(syscall.SIGSTOP)
	}
	gpus, disks, err := n.Sample(ctx)
	if err != nil {
		if ctx.Err() == nil {
			n.log.Warn("GPU telemetry not read", "err", err)
		}
		return
	}
	ev, err := n.nodeEvent(&eventsv1.GpuTelemetry{Node: n.opts.Self.Node, Cluster: n.opts.Self.Cluster,
		Time: timestamppb.New(n.opts.Clock.Now()), Gpus: gpus, Disks: disks, Simulated: n.opts.Device.Simulated(),
		OfferedGpus: int32(n.opts.GPUs)})
	if err != nil {
		n.log.Error("encode GPU telemetry", "err", err)
		return
	}
	if n.HeartbeatsMuted() {
		// Health takes telemetry for a sign of life too: an agent gone
		// silent under FAULT_NO_HEARTBEAT that still sent it every 10s
		// would never be silent past the 15s timeout. The reading is
		// taken all the same (/metrics serves it).
		return
	}
	pctx, cancel := context.WithTimeout(ctx, n.opts.Interval)
	defer cancel()
	if err := n.opts.Publisher.Publish(pctx, ev); err != nil && ctx.Err() == nil {
		n.log.Warn("GPU telemetry not sent", "err", err)
	}
}

// Xids emits an XidObserved for each Xid the device reports, at once
// (through the outbox; at most one per GPU and code a second), until ctx
// ends. It reads the device every xidPoll, and right after an injection.
func (n *Node) Xids(ctx context.Context) error {
	t := n.opts.Clock.NewTicker(xidPoll)
	defer t.Stop()
	for {
		n.pollXids(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.Chan():
		case <-n.kick:
		}
	}
}

func (n *Node) pollXids(ctx context.Context) {
	xids, err := n.opts.Device.Xids(ctx)
	if err != nil && ctx.Err() == nil {
		n.log.Warn("Xids not read", "err", err)
	}
	for _, x := range xids {
		now := n.opts.Clock.Now()
		k := [2]int{x.GPU, x.Code}
		n.mu.Lock()
		last, seen := n.xidSent[k]
		if !seen || now.Sub(last) >= time.Second {
			n.xidSent[k] = now
		}
		n.mu.Unlock()
		if seen && now.Sub(last) < time.Second {
			continue
		}
		at := x.Time
		if at.IsZero() {
			at = now
		}
		ev, err := n.nodeEvent(&eventsv1.XidObserved{Node: n.opts.Self.Node, Cluster: n.opts.Self.Cluster,
			Gpu: int32(x.GPU), Xid: int32(x.Code), Message: x.Message, Time: timestamppb.New(at)})
		if err != nil {
			n.log.Error("encode Xid", "err", err)
			continue
		}
		n.log.Warn("Xid", "gpu", x.GPU, "xid", x.Code, "message", x.Message)
		n.emit(ev, "Xid")
	}
}

// ReadHostBootID is the node's boot id: <work dir>/host_boot_id (the local
// provider's, new at every node "boot"), else the kernel's.
func ReadHostBootID(workDir string) string {
	for _, p := range []string{filepath.Join(workDir, "host_boot_id"), "/proc/sys/kernel/random/boot_id"} {
		if b, err := os.ReadFile(p); err == nil {
			if s := strings.TrimSpace(string(b)); s != "" {
				return s
			}
		}
	}
	return ""
}

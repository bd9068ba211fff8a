package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/healthcheck"
	"github.com/loom-ml/loom/libs/noderate"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/health/internal/domain"
	"github.com/loom-ml/loom/services/health/internal/scan"
)

// Redis hashes of the scans, relative to health's store prefix: node
// records (check endpoint, machine type), results (protobuf) and scans in
// progress (JSON).
const (
	KeyScanNodes   = "scan:nodes"
	KeyScanResults = "scan:results"
	KeyScans       = "scan:scans"
)

// ScanGroup is the scans' consumer group: their own, so that they read the
// topics they need at their own pace and keep their own inbox marks.
const ScanGroup = "loom-health-scan"

// ScanTopics are what the scans consume.
var ScanTopics = []string{topics.NodeTelemetry, topics.NodeEvents, topics.HealthCommands, topics.JobEvents}

// scanTypes are the event types the scans handle; the consumer passes over
// the others (GPU telemetry above all) without decoding them.
var scanTypes = map[string]bool{}

func init() {
	for _, t := range []string{
		envelope.TypeOf(&eventsv1.AgentRegistered{}), envelope.TypeOf(&eventsv1.Heartbeat{}),
		envelope.TypeOf(&eventsv1.HealthCheckCompleted{}), envelope.TypeOf(&eventsv1.NodeChanged{}),
		envelope.TypeOf(&eventsv1.NodeRemoved{}), envelope.TypeOf(&eventsv1.ScanNodes{}),
		envelope.TypeOf(&eventsv1.NodesNeedCheck{}),
	} {
		scanTypes[t] = true
	}
}

// ScanFilter is the scans' consumer filter: the types they handle.
func ScanFilter(r bus.Record) bool { return scanTypes[r.Type] }

// ScanFlags are the scans' settings.
type ScanFlags struct {
	// Interval runs a scan of every cluster that often (-scan-interval,
	// LOOM_HEALTH_SCAN_INTERVAL; default 0: never).
	Interval time.Duration
	// Validity is each check's validity window, "check=duration,…"
	// (-check-validity, LOOM_HEALTH_CHECK_VALIDITY) over the defaults
	// gpu_diag=24h, allreduce=6h, disk=1h, speed=1h; other checks 1h.
	Validity string
	// StragglerRatio: a node under this share of the fleet's median speed
	// fails the speed check (-straggler-ratio, LOOM_HEALTH_STRAGGLER_RATIO;
	// default 0.8).
	StragglerRatio float64
	// MinBusBW is the all-reduce's bus bandwidth threshold by machine type
	// in GB/s, "type=GB/s,…" with "*" for any other type
	// (-allreduce-min-busbw, LOOM_HEALTH_ALLREDUCE_MIN_BUSBW; default none).
	MinBusBW string
	// Sizes are the all-reduce's message sizes (-allreduce-sizes,
	// LOOM_HEALTH_ALLREDUCE_SIZES; default the agent's, 256K,1M,4M).
	Sizes string
	// Timeouts is each check's run timeout, "check=duration,…"
	// (-check-timeouts, LOOM_HEALTH_CHECK_TIMEOUTS) over the defaults
	// gpu_diag=1m (a level), allreduce=2m, allreduce_pair=1m, disk=30s,
	// speed=1m; other checks (a site's) 5m.
	Timeouts string
	// Grace is how long past a run's timeout health waits for its result
	// before the silent node counts as failing the check (-check-grace,
	// LOOM_HEALTH_CHECK_GRACE; default 30s).
	Grace time.Duration
}

// Register adds the scans' flags to fs, defaults from LOOM_* variables.
func (f *ScanFlags) Register(fs *flag.FlagSet) {
	fs.DurationVar(&f.Interval, "scan-interval", config.EnvDuration("LOOM_HEALTH_SCAN_INTERVAL", 0),
		"scan every cluster's idle nodes this often, 0 never (LOOM_HEALTH_SCAN_INTERVAL)")
	fs.StringVar(&f.Validity, "check-validity", config.Env("LOOM_HEALTH_CHECK_VALIDITY", ""),
		"check=duration,… validity windows over gpu_diag=24h,allreduce=6h,disk=1h,speed=1h (LOOM_HEALTH_CHECK_VALIDITY)")
	fs.Float64Var(&f.StragglerRatio, "straggler-ratio", config.EnvFloat("LOOM_HEALTH_STRAGGLER_RATIO", 0.8),
		"a node under this share of the fleet's median speed fails the speed check (LOOM_HEALTH_STRAGGLER_RATIO)")
	fs.StringVar(&f.MinBusBW, "allreduce-min-busbw", config.Env("LOOM_HEALTH_ALLREDUCE_MIN_BUSBW", ""),
		"machine-type=GB/s,… all-reduce bus bandwidth thresholds, * for any other type (LOOM_HEALTH_ALLREDUCE_MIN_BUSBW)")
	fs.StringVar(&f.Sizes, "allreduce-sizes", config.Env("LOOM_HEALTH_ALLREDUCE_SIZES", ""),
		"the all-reduce's message sizes, e.g. 256K,1M,4M (LOOM_HEALTH_ALLREDUCE_SIZES; default the agent's)")
	fs.StringVar(&f.Timeouts, "check-timeouts", config.Env("LOOM_HEALTH_CHECK_TIMEOUTS", ""),
		"check=duration,… run timeouts over gpu_diag=1m,allreduce=2m,allreduce_pair=1m,disk=30s,speed=1m, other checks 5m (LOOM_HEALTH_CHECK_TIMEOUTS)")
	fs.DurationVar(&f.Grace, "check-grace", config.EnvDuration("LOOM_HEALTH_CHECK_GRACE", scan.DefaultConfig().Grace),
		"how long past a check's timeout health waits for its result before the silent node counts as failing it (LOOM_HEALTH_CHECK_GRACE)")
}

// Config turns the flags into the scan policy; a malformed list is an
// *errs.InvalidError naming the flag.
func (f *ScanFlags) Config() (scan.Config, error) {
	cfg := scan.DefaultConfig()
	var v errs.Validator
	cfg.Interval = f.Interval
	v.Check(f.Interval >= 0, "scan_interval", "must not be negative, got %s", f.Interval)
	validity := map[string]time.Duration{}
	for k, d := range scan.DefaultValidity {
		validity[k] = d
	}
	for k, s := range pairs(&v, "check_validity", f.Validity) {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			v.Add("check_validity", "%s=%q: want a positive duration such as 6h", k, s)
			continue
		}
		validity[k] = d
		if k == scan.AllReduce {
			validity[scan.AllReducePair] = d
		}
	}
	cfg.Validity = validity
	if f.StragglerRatio != 0 {
		v.Check(f.StragglerRatio > 0 && f.StragglerRatio < 1, "straggler_ratio", "must be between 0 and 1, got %v", f.StragglerRatio)
		cfg.StragglerRatio = f.StragglerRatio
	}
	cfg.MinBusBW = map[string]float64{}
	for k, s := range pairs(&v, "allreduce_min_busbw", f.MinBusBW) {
		// The rule the agent applies to the same threshold given a scan
		// (a finite number >= 0): a value it refuses errs every all-reduce.
		g, err := strconv.ParseFloat(s, 64)
		if why := healthcheck.CheckParam("min_busbw_gbps", s); err != nil || why != "" {
			v.Add("allreduce_min_busbw", "%s=%q: want GB/s, a finite number >= 0", k, s)
			continue
		}
		if k == "*" {
			k = ""
		}
		cfg.MinBusBW[k] = g
	}
	if f.Sizes != "" {
		if why := healthcheck.CheckParam("sizes", f.Sizes); why != "" {
			v.Add("allreduce_sizes", "%s", why)
		}
		cfg.AllReduceParams = map[string]string{"sizes": f.Sizes}
	}
	timeouts := map[string]time.Duration{}
	for k, d := range cfg.Timeouts {
		timeouts[k] = d
	}
	for k, s := range pairs(&v, "check_timeouts", f.Timeouts) {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			v.Add("check_timeouts", "%s=%q: want a positive duration such as 2m", k, s)
			continue
		}
		timeouts[k] = d
	}
	cfg.Timeouts = timeouts
	v.Check(f.Grace >= 0, "check_grace", "must not be negative, got %s", f.Grace)
	if f.Grace > 0 {
		cfg.Grace = f.Grace
	}
	return cfg, v.Err()
}

// pairs reads "k=v,k=v".
func pairs(v *errs.Validator, field, s string) map[string]string {
	out := map[string]string{}
	for _, item := range config.SplitList(s) {
		k, val, ok := strings.Cut(item, "=")
		if !ok || strings.TrimSpace(k) == "" {
			v.Add(field, "%q: want name=value", item)
			continue
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(val)
	}
	return out
}

// Scanner runs health's scans (internal/scan) over Redis and the bus: each
// change is computed by the pure core, written with its commands and inbox
// mark in one store.Apply, and only then taken into memory. Its methods are
// safe for concurrent use.
type Scanner struct {
	st  *store.Store
	cfg scan.Config
	now func() time.Time
	log *slog.Logger
	drv *store.Driver
	// onVerdict receives the results health decides itself (a bisection's
	// culprit, a straggler) once they are written, for remediation.
	onVerdict func(ctx context.Context, r *loomv1.HealthCheckResult)

	mu    sync.Mutex
	state *scan.State
	// dropped counts and logs what the scans refuse (SetDropped; nil: only
	// logged); drops rate-limits its log.
	dropped func(reason string, args ...any)
	drops   *noderate.DropLog
	// buckets hold each node to its rate on the records it signs on the
	// telemetry topic, as the app's own (SetNodeRate).
	buckets *noderate.Buckets
}

// DropCheckAddr is loom_health_dropped_total's reason for an
// AgentRegistered whose check_addr is not a host:port (scan.CheckAddr).
const DropCheckAddr = "check-addr"

// DropScanRate is loom_health_dropped_total's reason for a node's record
// the scans dropped unhandled, past the node's rate (their own count: the
// app's consumer group reads the same records and drops them as "rate").
const DropScanRate = "scan-rate"

// SetNodeRate holds each node to perSecond records a second, burst at
// once, on the records it signs on the telemetry topic (-node-rate,
// -node-burst; the defaults, domain.DefaultNodeRate and DefaultNodeBurst,
// until it is called). Call before the consumer starts.
func (s *Scanner) SetNodeRate(perSecond float64, burst int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buckets = domain.NewNodeBuckets(perSecond, burst)
}

// SetDropped makes f count what the scans refuse (App.Dropped); call before
// the consumer starts.
func (s *Scanner) SetDropped(f func(reason string, args ...any)) { s.dropped = f }

// NewScanner returns a scanner over st with policy cfg; onVerdict (nil:
// none) is told each verdict health decides. Start loads it.
func NewScanner(st *store.Store, cfg scan.Config, now func() time.Time, log *slog.Logger,
	onVerdict func(ctx context.Context, r *loomv1.HealthCheckResult)) *Scanner {
	s := &Scanner{st: st, cfg: cfg, now: now, log: log, onVerdict: onVerdict, state: scan.NewState(cfg), drops: noderate.NewDropLog(log, dropLogMsg),
		buckets: domain.NewNodeBuckets(0, 0)}
	s.drv = store.NewDriver(st, s.reload)
	return s
}

// Start loads the nodes, results and scans in progress.
func (s *Scanner) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reload(ctx)
}

func (s *Scanner) reload(ctx context.Context) error {
	st := scan.NewState(s.cfg)
	var nodes []*scan.Node
	var results []*loomv1.HealthCheckResult
	var scans []*scan.Scan
	if err := loadHash(ctx, s.st, KeyScanNodes, func(b []byte) error {
		n, err := scan.DecodeNode(b)
		nodes = append(nodes, n)
		return err
	}); err != nil {
		return err
	}
	if err := loadHash(ctx, s.st, KeyScanResults, func(b []byte) error {
		r, err := scan.DecodeResult(b)
		results = append(results, r)
		return err
	}); err != nil {
		return err
	}
	if err := loadHash(ctx, s.st, KeyScans, func(b []byte) error {
		sc, err := scan.DecodeScan(b)
		scans = append(scans, sc)
		return err
	}); err != nil {
		return err
	}
	st.Load(nodes, results, scans)
	s.state = st
	s.log.Info("scans loaded", "nodes", len(nodes), "results", len(results), "scans", len(scans))
	return nil
}

func loadHash(ctx context.Context, st *store.Store, key string, each func([]byte) error) error {
	raw, err := st.HGetAll(ctx, key)
	if err != nil {
		return fmt.Errorf("load %s: %w", key, err)
	}
	for k, b := range raw {
		if err := each(b); err != nil {
			return fmt.Errorf("load %s %s: %w", key, k, err)
		}
	}
	return nil
}

// Handle applies one consumed event; it is the scans' bus.Handler. An
// event that can never apply is returned as bus.Permanent (dead-lettered).
// A node's record past its rate (SetNodeRate) is dropped unhandled: a
// result is a Redis write of up to 64 KiB, a malformed one a write to the
// dead-letter topic, and a flood of them must cost no more than reading.
func (s *Scanner) Handle(ctx context.Context, ev envelope.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.drv.Ready(ctx); err != nil {
		return err
	}
	now := s.now()
	rec := recordOf(ev)
	limited := rec.Telemetry && rec.Limited && rec.Node != ""
	if limited && !s.buckets.Allowed(now, rec.Node) {
		s.drop(DropScanRate, "node", rec.Node, "type", ev.Type, "event", ev.ID)
		return nil
	}
	c, err := s.state.Handle(now, ev.ID, ev.Payload)
	if err != nil {
		var inv *errs.InvalidError
		if errors.As(err, &inv) {
			if limited {
				s.buckets.Take(now, rec.Node)
			}
			return bus.Permanent(fmt.Errorf("event %s (%s): %w", ev.ID, ev.Type, err))
		}
		return fmt.Errorf("event %s (%s): %w", ev.ID, ev.Type, err)
	}
	// The inbox marks are health's too: the scans' are told apart.
	if err := s.apply(ctx, "scan:"+ev.ID, c); err != nil {
		return fmt.Errorf("event %s (%s): %w", ev.ID, ev.Type, err)
	}
	if limited {
		s.buckets.Take(now, rec.Node)
	}
	if c.BadCheckAddr != "" {
		s.drop(DropCheckAddr, "event", ev.ID, "signer", ev.Signer, "err", c.BadCheckAddr)
	}
	return nil
}

// drop counts and logs a record the scans refused, for reason. Callers
// hold mu.
func (s *Scanner) drop(reason string, args ...any) {
	if s.dropped != nil {
		s.dropped(reason, args...)
	} else {
		logDropped(s.drops, nil, s.now(), reason, args...)
	}
}

// Tick times out unanswered runs, starts scheduled scans and prunes, and
// logs the drops that no later drop has (a flood's last).
func (s *Scanner) Tick(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.drops.Flush(now)
	if err := s.drv.Ready(ctx); err != nil {
		return err
	}
	s.buckets.Prune(now)
	return s.apply(ctx, "", s.state.Tick(now))
}

// Loop runs Tick every interval of clock until ctx ends; a failed tick is
// logged and tried again at the next. It is a service.Base loop.
func (s *Scanner) Loop(interval time.Duration, clock clockwork.Clock) func(context.Context) error {
	return func(ctx context.Context) error {
		t := clock.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.Chan():
				if err := s.Tick(ctx); err != nil && ctx.Err() == nil {
					s.log.Warn("scan tick failed", "err", err)
				}
			}
		}
	}
}

func (s *Scanner) apply(ctx context.Context, inboxID string, c *scan.Change) error {
	if !c.Durable() {
		s.state.Commit(c)
		return nil
	}
	var tx store.Tx
	if err := writeScan(&tx, c); err != nil {
		return err
	}
	for _, e := range c.Emits {
		ev, err := envelope.Route(e.Key, Source, e.Payload)
		if err != nil {
			return err
		}
		tx.Emit(ev)
	}
	applied, err := s.drv.Apply(ctx, inboxID, &tx, func() { s.state.Commit(c) })
	if err != nil {
		return fmt.Errorf("apply: %w", err)
	}
	if !applied {
		return nil
	}
	for _, v := range c.Verdicts {
		s.log.Info("health check verdict", "node", v.GetNode(), "check", v.GetCheck(), "outcome", v.GetOutcome(), "summary", v.GetSummary())
		if s.onVerdict != nil {
			s.onVerdict(ctx, v)
		}
	}
	return nil
}

func writeScan(tx *store.Tx, c *scan.Change) error {
	for _, k := range slices.Sorted(maps.Keys(c.Nodes)) {
		if n := c.Nodes[k]; n == nil {
			tx.HDel(KeyScanNodes, k)
		} else {
			b, err := scan.EncodeNode(n)
			if err != nil {
				return err
			}
			tx.HSet(KeyScanNodes, k, b)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(c.Results)) {
		if r := c.Results[k]; r == nil {
			tx.HDel(KeyScanResults, k)
		} else {
			b, err := scan.EncodeResult(r)
			if err != nil {
				return err
			}
			tx.HSet(KeyScanResults, k, b)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(c.Scans)) {
		if sc := c.Scans[k]; sc == nil {
			tx.HDel(KeyScans, k)
		} else {
			b, err := scan.EncodeScan(sc)
			if err != nil {
				return err
			}
			tx.HSet(KeyScans, k, b)
		}
	}
	return nil
}

// ListHealthResults serves loom.v1.HealthService's ListHealthResults from
// the stored results (the ResultLister the health server delegates to).
func (s *Scanner) ListHealthResults(_ context.Context, req *loomv1.ListHealthResultsRequest) (*loomv1.ListHealthResultsResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.List(req)
}

// GetHealthScan serves loom.v1.HealthService's GetHealthScan: the scan's
// progress, NotFound once it is dropped (an hour after its start) or when
// there never was one.
func (s *Scanner) GetHealthScan(_ context.Context, req *loomv1.GetHealthScanRequest) (*loomv1.HealthScan, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.state.Progress(req.GetCluster(), req.GetScanId()); p != nil {
		return p, nil
	}
	return nil, fmt.Errorf("scan %s of %s: %w (a scan is kept for an hour after its start; its results stay: loom health results CLUSTER --scan %s)",
		req.GetScanId(), req.GetCluster(), errs.NotFound, req.GetScanId())
}

// ListHealthScans serves loom.v1.HealthService's ListHealthScans: the
// cluster's scans still kept, newest first.
func (s *Scanner) ListHealthScans(_ context.Context, req *loomv1.ListHealthScansRequest) (*loomv1.ListHealthScansResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.ListScans(req)
}

// FillPolicy adds the scans' part of the health policy to p.
func (s *Scanner) FillPolicy(p *loomv1.HealthPolicy) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state.FillPolicy(p)
}

// Busy reports whether jobs hold the node, as its last heartbeat said.
func (s *Scanner) Busy(node string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.Busy(node)
}

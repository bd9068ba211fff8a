package app

// Metrics: every step gets CLOUD_ML_HP_METRIC_FILE (unless its job set
// one), a file of its own in the run's directory that its program reports
// metrics in as cloudml-hypertune does, one JSON line per measurement. The
// agent tails it, turns each new complete line into a point and sends the
// points as MetricsReported: at most Options.Metrics.Batch points a record
// and Metrics.Rate records a second per step, through the outbox, with the
// tail's position in the same write (so a restarted agent goes on where
// its predecessor's sent records end). When the step ends, what is left is
// read and sent before its end is recorded, so that the last epoch's line
// comes before the step's end.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/tbevents"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	"github.com/loom-ml/loom/services/agent/internal/adapters"
	"github.com/loom-ml/loom/services/agent/internal/domain"
)

// MetricsOptions bound the metrics the agent reads from its steps and sends.
type MetricsOptions struct {
	// Interval is how often each step's file is read (default 1s).
	Interval time.Duration
	// Batch is the most points one MetricsReported carries (default 100).
	Batch int
	// Rate is the most MetricsReported records a second per step
	// (default 2). Lines beyond wait in the file.
	Rate float64
	// Limits bound one line (default domain.DefaultMetricLimits).
	Limits domain.MetricLimits
}

// Defaults of MetricsOptions.
const (
	DefaultMetricsInterval = time.Second
	DefaultMetricsBatch    = 100
	DefaultMetricsRate     = 2.0
)

// metricsFileName is the metrics file's name in the run's directory.
const metricsFileName = "metrics.jsonl"

// Bounds of a tail's memory and of one end's flush.
const (
	// seenLines is how many recent lines' hashes a tail keeps, so that a
	// file rewritten whole (hypertune keeps its last 100 lines and writes
	// them all again at every report) yields only its new lines.
	seenLines = 4096
	// markLen is how many bytes before the tail's position it keeps, to
	// notice a file rewritten with other bytes there.
	markLen = 64
	// flushBytes bounds what is read of a file when its step ends.
	flushBytes = 1 << 20
)

func (o *MetricsOptions) fill() {
	if o.Interval <= 0 {
		o.Interval = DefaultMetricsInterval
	}
	if o.Batch <= 0 {
		o.Batch = DefaultMetricsBatch
	}
	if o.Rate <= 0 {
		o.Rate = DefaultMetricsRate
	}
	if o.Limits.Line <= 0 {
		o.Limits.Line = domain.DefaultMetricLimits.Line
	}
	if o.Limits.Values <= 0 {
		o.Limits.Values = domain.DefaultMetricLimits.Values
	}
	if o.Limits.Name <= 0 {
		o.Limits.Name = domain.DefaultMetricLimits.Name
	}
}

// newDroppedLines is loom_agent_metric_lines_dropped_total.
func newDroppedLines() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "loom_agent_metric_lines_dropped_total",
		Help: "Lines of steps' metrics files (CLOUD_ML_HP_METRIC_FILE) the agent dropped, by reason.",
	}, []string{"reason"})
}

// MetricsCollector is the agent's metrics-file counter, for its /metrics.
func (a *App) MetricsCollector() prometheus.Collector { return a.dropped }

// metricsFile is the run's CLOUD_ML_HP_METRIC_FILE.
func (a *App) metricsFile(run string) string {
	return filepath.Join(a.progressDir(run), metricsFileName)
}

// tailPos is where a tail stands in its file: what is kept in Redis with
// every record sent.
type tailPos struct {
	Off  int64  `json:"off"`
	Ino  uint64 `json:"ino"`
	Mark []byte `json:"mark,omitempty"`
	// TBDir is the step's TensorBoard directory ("" for none), TBUID the
	// user whose files in it are read, and TB where each event file
	// (relative to it) was read up to (tensorboard.go).
	TBDir string           `json:"tbDir,omitempty"`
	TBUID uint32           `json:"tbUid,omitempty"`
	TB    map[string]int64 `json:"tb,omitempty"`
}

// tail follows one step's metrics file.
type tail struct {
	job     string
	attempt int32
	path    string

	// mu orders the reads and sends of this tail (the loop's and the
	// step's end's).
	mu      sync.Mutex
	pos     tailPos
	partial []byte // the last line read so far, not yet complete
	skip    bool   // within a line too long: dropped up to its newline
	seen    map[uint64]struct{}
	order   []uint64
	pending []*eventsv1.MetricsReported_Point
	tb      *tbTail
	tokens  float64
	last    time.Time
	closed  bool
	// stored is whether a position of this tail is in Redis.
	stored bool
	warned map[string]bool
}

func newTail(job string, attempt int32, path string, pos tailPos) *tail {
	tl := &tail{job: job, attempt: attempt, path: path, pos: pos, seen: map[uint64]struct{}{}, warned: map[string]bool{}}
	if pos.TBDir != "" {
		tl.tb = &tbTail{dir: pos.TBDir, uid: pos.TBUID, dec: map[string]*tbevents.Decoder{}}
	}
	return tl
}

// newTail is newTail with the agent's shared directory as its TensorBoard
// directory's trusted root (openPath).
func (a *App) newTail(job string, attempt int32, path string, pos tailPos) *tail {
	tl := newTail(job, attempt, path, pos)
	if tl.tb != nil {
		tl.tb.root = a.opts.SharedDir
	}
	return tl
}

// prepareMetrics makes the step's metrics file, its owner's (0600, empty),
// and starts tailing it, and the event files of tbDir (unless "") that uid
// owns. The caller puts its path in the step's environment. A failure is
// logged: the program's own open then says why.
func (a *App) prepareMetrics(user, key, job string, attempt int32, tbDir string, uid uint32) {
	path := a.metricsFile(key)
	f, err := a.rt.OpenOutput(user, path, false)
	if err != nil {
		a.log.Warn("could not make a step's metrics file", "step", key, "err", err)
	} else {
		f.Close()
	}
	tl := a.newTail(job, attempt, path, tailPos{TBDir: tbDir, TBUID: uid})
	if tl.tb != nil {
		// Before the program starts: what is there now is not its.
		tl.pos.TB = tl.tb.startOffsets()
		// Stored now, not only with the first record sent: an agent
		// restarted before that finds the directory, and its start marks,
		// only in the stored position (resumeMetrics).
		var tx store.Tx
		b, _ := json.Marshal(tl.pos)
		tx.HSet(adapters.KeyMetrics, key, b)
		tl.stored = a.persist(&tx, "metrics", key, "start")
	}
	a.mu.Lock()
	a.tails[key] = tl
	a.mu.Unlock()
	if tbDir == filepath.Join(a.progressDir(key), "tensorboard") {
		if err := a.rt.GiveDir(user, tbDir); err != nil {
			a.log.Warn("could not make a step's TensorBoard directory", "step", key, "err", err)
		}
	}
}

// dropMetrics stops tailing a step that did not start, and removes its
// stored position (prepareMetrics).
func (a *App) dropMetrics(key string) {
	a.mu.Lock()
	tl := a.tails[key]
	delete(a.tails, key)
	a.mu.Unlock()
	if tl == nil {
		return
	}
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.closed = true
	if tl.stored {
		var tx store.Tx
		tx.HDel(adapters.KeyMetrics, key)
		a.persist(&tx, "metrics", key, "dropped")
	}
}

// resumeMetrics goes on tailing an adopted step's metrics file from where
// a predecessor's last sent record left it (from its start when none was
// sent). The caller holds a.mu.
func (a *App) resumeMetrics(key string, s *domain.Step, positions map[string][]byte) {
	path := a.metricsFile(key)
	if _, err := os.Lstat(path); err != nil {
		return // the job named its own file, or the run made none
	}
	var pos tailPos
	b := positions[key]
	if b != nil {
		_ = json.Unmarshal(b, &pos)
	}
	tl := a.newTail(s.Job, s.Attempt, path, pos)
	tl.stored = b != nil
	a.tails[key] = tl
}

// MetricsLoop reads every running step's metrics file each interval and
// sends what it may, until ctx ends.
func (a *App) MetricsLoop(ctx context.Context) error {
	t := a.opts.Clock.NewTicker(a.opts.Metrics.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.Chan():
		}
		a.mu.Lock()
		tails := make(map[string]*tail, len(a.tails))
		for k, tl := range a.tails {
			tails[k] = tl
		}
		a.mu.Unlock()
		for k, tl := range tails {
			a.pumpMetrics(ctx, k, tl, false)
		}
	}
}

// finishMetrics reads what is left of a step's metrics file and sends all
// of it, then stops tailing it: called when the step ended, before its end
// is recorded.
func (a *App) finishMetrics(key string) {
	a.mu.Lock()
	tl := a.tails[key]
	delete(a.tails, key)
	a.mu.Unlock()
	if tl != nil {
		a.pumpMetrics(context.Background(), key, tl, true)
	}
}

// pumpMetrics reads tl's new lines and sends the points it may: within the
// rate, or all of them when final (the step ended; the tail closes).
func (a *App) pumpMetrics(ctx context.Context, key string, tl *tail, final bool) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if tl.closed {
		return
	}
	o := a.opts.Metrics
	limit := int64(0)
	switch {
	case final:
		limit = flushBytes
	case len(tl.pending) < 4*o.Batch:
		// Backpressure: what cannot be sent soon stays in the file.
		limit = int64(o.Limits.Line+1) * int64(o.Batch)
	}
	if limit > 0 {
		a.readTail(key, tl, limit, final)
		a.readTensorBoard(key, tl, max(limit, tbPollBytes))
	}
	now := a.opts.Now()
	burst := max(1, o.Rate*o.Interval.Seconds())
	if tl.last.IsZero() {
		tl.tokens = burst
	} else {
		tl.tokens = min(burst, tl.tokens+now.Sub(tl.last).Seconds()*o.Rate)
	}
	tl.last = now
	var tx store.Tx
	sent := 0
	for len(tl.pending) > 0 && (final || tl.tokens >= 1) {
		n := min(len(tl.pending), o.Batch)
		e, err := adapters.Event(domain.MetricsReported(a.opts.Self, tl.job, tl.attempt, tl.pending[:n]))
		if err != nil {
			a.log.Error("encode metrics", "step", key, "err", err)
			tl.pending = tl.pending[n:]
			continue
		}
		tx.Emit(e)
		tl.pending = tl.pending[n:]
		tl.tokens--
		sent += n
	}
	if final {
		tl.closed = true
		if tl.stored {
			tx.HDel(adapters.KeyMetrics, key)
		}
		if sent > 0 || tl.stored {
			// As a step's end is written: retried, since the last epoch's
			// measurement is what a trial is judged by.
			a.persist(&tx, "metrics", key, "final")
		}
		return
	}
	if sent == 0 {
		return
	}
	pos, _ := json.Marshal(tl.pos)
	tx.HSet(adapters.KeyMetrics, key, pos)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := a.drv.Apply(wctx, "", &tx, nil); err != nil {
		// Not sent: the points are lost, the file goes on. A restart
		// re-reads from the last position written.
		a.log.Warn("step metrics not sent", "step", key, "points", sent, "err", err)
		return
	}
	tl.stored = true
}

// readTail reads up to limit new bytes of tl's file and parses the complete
// lines among them into tl.pending. A file replaced, truncated or rewritten
// (the bytes before the position changed) is read again from its start,
// lines already seen passed over. When final, a last line without its
// newline counts as complete.
func (a *App) readTail(key string, tl *tail, limit int64, final bool) {
	// Only the job's owner's own file (openRunFile): the directory is
	// theirs, the agent reads as root.
	f, fi := openRunFile(tl.path)
	if f == nil {
		return
	}
	defer f.Close()
	ino := uint64(0)
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		ino = st.Ino
	}
	reset := func() {
		// The TensorBoard directory's positions are not this file's: its
		// event files are not read again.
		tl.pos = tailPos{Ino: ino, TBDir: tl.pos.TBDir, TBUID: tl.pos.TBUID, TB: tl.pos.TB}
		tl.partial, tl.skip = nil, false
	}
	switch {
	case tl.pos.Ino != 0 && tl.pos.Ino != ino, fi.Size() < tl.pos.Off:
		reset()
	case tl.pos.Off > 0 && len(tl.pos.Mark) > 0:
		b := make([]byte, len(tl.pos.Mark))
		if _, err := f.ReadAt(b, tl.pos.Off-int64(len(b))); err != nil || !bytes.Equal(b, tl.pos.Mark) {
			reset()
		}
	}
	tl.pos.Ino = ino
	if fi.Size() == tl.pos.Off && !final {
		return
	}
	buf, err := io.ReadAll(io.LimitReader(io.NewSectionReader(f, tl.pos.Off, fi.Size()-tl.pos.Off), limit))
	if err != nil && !errors.Is(err, io.EOF) {
		return
	}
	tl.pos.Off += int64(len(buf))
	mark := append(tl.pos.Mark, buf...)
	tl.pos.Mark = append([]byte(nil), mark[max(0, len(mark)-markLen):]...)
	lim := a.opts.Metrics.Limits
	for len(buf) > 0 {
		i := bytes.IndexByte(buf, '\n')
		if i < 0 {
			if tl.skip {
				break
			}
			tl.partial = append(tl.partial, buf...)
			if len(tl.partial) > lim.Line {
				a.dropLine(key, tl, domain.DropTooLong)
				tl.partial, tl.skip = nil, true
			}
			break
		}
		chunk := buf[:i]
		buf = buf[i+1:]
		if tl.skip {
			tl.skip = false
			continue
		}
		line := append(tl.partial, chunk...)
		tl.partial = nil
		a.takeLine(key, tl, line)
	}
	if final && len(tl.partial) > 0 && !tl.skip {
		a.takeLine(key, tl, tl.partial)
		tl.partial = nil
	}
}

// takeLine parses one complete line into a point, unless it is blank or
// was seen already.
func (a *App) takeLine(key string, tl *tail, line []byte) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return
	}
	h := fnv.New64a()
	_, _ = h.Write(line)
	sum := h.Sum64()
	if _, ok := tl.seen[sum]; ok {
		return
	}
	tl.seen[sum] = struct{}{}
	tl.order = append(tl.order, sum)
	if len(tl.order) > seenLines {
		delete(tl.seen, tl.order[0])
		tl.order = tl.order[1:]
	}
	p, why, badNames := domain.ParseMetricLine(line, a.opts.Metrics.Limits, a.opts.Now())
	for range badNames {
		a.dropLine(key, tl, domain.DropBadName)
	}
	if p == nil {
		a.dropLine(key, tl, why)
		return
	}
	tl.pending = append(tl.pending, p)
}

// dropLine counts a dropped line, and logs the first of each reason per
// step.
func (a *App) dropLine(key string, tl *tail, why string) {
	a.dropped.WithLabelValues(why).Inc()
	if !tl.warned[why] {
		tl.warned[why] = true
		a.log.Warn("dropped a line of a step's metrics file", "step", key, "reason", why, "file", tl.path)
	}
}

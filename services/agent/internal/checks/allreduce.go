package checks

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/loom-ml/loom/libs/healthcheck"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// The all-reduce check is NCCL-tests' all_reduce_perf between nodes, over
// TCP between the agents' check endpoints: a ring all-reduce (reduce-scatter
// then all-gather, 2(n-1) steps) of float32 sums. Each rank dials its right
// neighbour's endpoint (peers[(rank+1)%n]) and takes the connection from its
// left neighbour from Serve, which hands it over by ring id. Per message
// size it times iters all-reduces after one warm-up (which is also the
// barrier: it ends only when the whole ring is connected) and reports, as
// nccl-tests does, algbw = size/time and busbw = algbw × 2(n−1)/n.
//
// Parameters: "ring" (the ring's id, the same on every rank: health mints
// it; default scan_id + the peers), "sizes" (bytes, e.g. "64K,1M,8M"),
// "iters" (default 5), "min_busbw_gbps" (the machine type's threshold on
// the largest size, GB/s; default none).
//
// A ring that fails, computes a wrong sum or is slower than the threshold
// cannot say which node or link is at fault: the node reports CHECK_WARN,
// and health's pairwise bisection finds the culprit. Only a check that
// cannot run at all (bad parameters) is CHECK_ERROR.

// helloMagic starts every connection to a check endpoint.
const helloMagic = "LOOMAR2\n"

// handoffTTL is how long Serve holds a neighbour's connection for a ring
// whose check has not started here.
const handoffTTL = 2 * time.Minute

// maxRingID bounds a hello's ring id.
const maxRingID = 512

// maxHeld bounds the connections Serve holds for checks not started yet, so
// that connections nobody claims cannot pile up for handoffTTL each.
const maxHeld = 256

type mailbox struct {
	ch chan *peerConn
}

// peerConn is an accepted connection from a ring's left neighbour.
type peerConn struct {
	net.Conn
	r    *bufio.Reader
	from int
	n    int
}

func (p *peerConn) Read(b []byte) (int, error) { return p.r.Read(b) }

func (r *Runner) mailbox(ring string) *mailbox {
	r.mu.Lock()
	defer r.mu.Unlock()
	mb := r.rings[ring]
	if mb == nil {
		mb = &mailbox{ch: make(chan *peerConn)}
		r.rings[ring] = mb
	}
	return mb
}

func (r *Runner) dropMailbox(ring string, mb *mailbox) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rings[ring] == mb {
		delete(r.rings, ring)
	}
}

// Serve accepts all-reduce peers' connections on ln until ctx ends (it then
// closes ln and returns nil) or ln fails. Each connection says which ring it
// belongs to and is handed to that ring's check on this node, which may
// start up to two minutes later; a connection nobody claims is closed.
func (r *Runner) Serve(ctx context.Context, ln net.Listener) error {
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer stop()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("check endpoint: %w", err)
		}
		go r.handoff(ctx, c)
	}
}

func (r *Runner) handoff(ctx context.Context, c net.Conn) {
	if r.held.Add(1) > maxHeld {
		r.held.Add(-1)
		r.refused.WithLabelValues(refusedBusy).Inc()
		r.log.Warn("check endpoint: refused a connection: too many waiting for their check", "remote", c.RemoteAddr())
		_ = c.Close()
		return
	}
	defer r.held.Add(-1)
	// The challenge and the hello have handshakeTimeout together; the
	// ring's data after it is bounded by the check's own timeout.
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	br := bufio.NewReaderSize(c, 64<<10)
	nonce, err := challenge(c)
	var ring string
	var from, n int
	if err == nil {
		ring, from, n, err = readHello(br, nonce, r.identity(), r.cfg.Now())
	}
	_ = c.SetDeadline(time.Time{})
	if err != nil {
		reason := refusedMalformed
		var rf *refusal
		if errors.As(err, &rf) {
			reason = rf.reason
		}
		r.refused.WithLabelValues(reason).Inc()
		r.log.Warn("check endpoint: refused a connection", "remote", c.RemoteAddr(), "reason", reason, "err", err)
		_ = c.Close()
		return
	}
	mb := r.mailbox(ring)
	t := time.NewTimer(handoffTTL)
	defer t.Stop()
	select {
	case mb.ch <- &peerConn{Conn: c, r: br, from: from, n: n}:
	case <-t.C:
		r.dropMailbox(ring, mb)
		_ = c.Close()
	case <-ctx.Done():
		_ = c.Close()
	}
}

// SizeResult is one message size's measurement, as a line of
// all_reduce_perf's table.
type SizeResult struct {
	Bytes    int64   `json:"size"`
	Count    int64   `json:"count"`
	TimeUS   float64 `json:"time_us"`
	AlgBWGBs float64 `json:"algbw"`
	BusBWGBs float64 `json:"busbw"`
	Errors   int64   `json:"wrong"`
}

// RingReport is the all-reduce check's detail.
type RingReport struct {
	Ring    string       `json:"ring"`
	Rank    int          `json:"rank"`
	Ranks   int          `json:"ranks"`
	Peers   []string     `json:"peers"`
	Iters   int          `json:"iters"`
	Results []SizeResult `json:"results"`
}

// BusBW is nccl-tests' bus bandwidth of an all-reduce of n ranks with
// algorithm bandwidth algbw: algbw × 2(n−1)/n.
func BusBW(algbw float64, n int) float64 {
	if n <= 1 {
		return 0
	}
	return algbw * 2 * float64(n-1) / float64(n)
}

func warnRing(format string, args ...any) verdict {
	return verdict{outcome: loomv1.CheckOutcome_CHECK_WARN, gpu: -1,
		summary: fmt.Sprintf(format, args...) + " (health's bisection finds the node or link at fault)"}
}

// allReduce is the allreduce and allreduce_pair check.
func (r *Runner) allReduce(ctx context.Context, cmd *eventsv1.RunHealthCheck) verdict {
	peers, rank := cmd.GetPeers(), int(cmd.GetRank())
	n := len(peers)
	switch {
	case n < 2:
		return checkError("%s needs at least 2 peers, got %d", cmd.GetCheck(), n)
	case cmd.GetCheck() == AllReducePair && n != 2:
		return checkError("allreduce_pair needs exactly 2 peers, got %d", n)
	case rank < 0 || rank >= n:
		return checkError("rank %d is not in the ring of %d", rank, n)
	}
	sizes, err := healthcheck.ParseSizes(param(cmd, "sizes", "256K,1M,4M"))
	if err != nil {
		return checkError("params.sizes: %v", err)
	}
	iters, err := strconv.Atoi(param(cmd, "iters", "5"))
	if err != nil || iters < 1 || iters > 1000 {
		return checkError("params.iters: want 1 to 1000, got %q", param(cmd, "iters", ""))
	}
	var minBus float64
	if s := param(cmd, "min_busbw_gbps", ""); s != "" {
		if minBus, err = strconv.ParseFloat(s, 64); err != nil || minBus < 0 {
			return checkError("params.min_busbw_gbps: want a number of GB/s, got %q", s)
		}
	}
	ring := param(cmd, "ring", cmd.GetScanId()+"|"+strings.Join(peers, ","))
	if len(ring) > maxRingID {
		return checkError("params.ring: at most %d bytes", maxRingID)
	}
	// The ring gives up a little before the check's timeout, so that a dead
	// peer is reported as the ring's failure, not as this check hanging.
	rctx := ctx
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		rctx, cancel = context.WithDeadline(ctx, dl.Add(-min(time.Until(dl)/10, 2*time.Second)))
		defer cancel()
	}
	rep := &RingReport{Ring: ring, Rank: rank, Ranks: n, Peers: peers, Iters: iters}
	err = r.ring(rctx, ring, peers, rank, sizes, iters, rep)
	b, _ := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		v := warnRing("ring of %d failed at rank %d: %v", n, rank, err)
		v.detail = string(b)
		return v
	}
	v := pass("")
	v.detail = string(b)
	v.metrics = map[string]float64{}
	for _, s := range rep.Results {
		v.metrics["busbw_gbps:"+strconv.FormatInt(s.Bytes, 10)] = s.BusBWGBs
	}
	last := rep.Results[len(rep.Results)-1]
	v.metrics["busbw_gbps"], v.metrics["algbw_gbps"], v.metrics["time_us"] = last.BusBWGBs, last.AlgBWGBs, last.TimeUS
	v.metrics["ranks"] = float64(n)
	switch {
	case last.Errors > 0:
		v = withDetail(warnRing("ring of %d summed wrong: %d wrong elements at %d bytes", n, last.Errors, last.Bytes), v)
	case minBus > 0 && last.BusBWGBs < minBus:
		v = withDetail(warnRing("ring of %d is slow: busbw %.3f GB/s at %d bytes, under the threshold %.3f GB/s",
			n, last.BusBWGBs, last.Bytes, minBus), v)
	default:
		v.summary = fmt.Sprintf("ring of %d: busbw %.3f GB/s, algbw %.3f GB/s at %d bytes", n, last.BusBWGBs, last.AlgBWGBs, last.Bytes)
	}
	return v
}

func withDetail(v, from verdict) verdict {
	v.detail, v.metrics = from.detail, from.metrics
	return v
}

// ring connects to both neighbours and runs the measurements into rep.
func (r *Runner) ring(ctx context.Context, ring string, peers []string, rank int, sizes []int64, iters int, rep *RingReport) error {
	n := len(peers)
	left, right := (rank-1+n)%n, (rank+1)%n
	mb := r.mailbox(ring)
	defer r.dropMailbox(ring, mb)

	type dialed struct {
		c   net.Conn
		err error
	}
	out := make(chan dialed, 1)
	go func() {
		c, err := r.dialPeer(ctx, peers[right])
		if err == nil {
			if err = r.answer(ctx, c, ring, rank, n); err != nil {
				_ = c.Close()
				c = nil
			}
		}
		out <- dialed{c, err}
	}()
	var in *peerConn
	select {
	case in = <-mb.ch:
	case <-ctx.Done():
		d := <-out
		if d.c != nil {
			_ = d.c.Close()
		}
		return fmt.Errorf("rank %d (%s) never connected: %w", left, peers[left], ctx.Err())
	}
	defer in.Close()
	d := <-out
	if d.err != nil {
		return fmt.Errorf("connecting to rank %d (%s): %w", right, peers[right], d.err)
	}
	defer d.c.Close()
	if in.from != left || in.n != n {
		return fmt.Errorf("the connection for this ring came from rank %d of %d, want rank %d of %d", in.from, in.n, left, n)
	}
	// A connection is closed when ctx ends, which unblocks any read or
	// write in progress.
	stop := context.AfterFunc(ctx, func() { _ = in.Close(); _ = d.c.Close() })
	defer stop()

	for _, size := range sizes {
		count := size / 4
		if count < int64(n) {
			count = int64(n)
		}
		ar := newAllReducer(in, d.c, rank, n, int(count))
		ar.abort = func() { _ = in.Close(); _ = d.c.Close() }
		// One warm-up, then the timed iterations.
		var total time.Duration
		var wrong int64
		for it := 0; it <= iters; it++ {
			ar.fill()
			t0 := time.Now()
			if err := ar.run(); err != nil {
				if ctx.Err() != nil {
					return fmt.Errorf("at %d bytes: %w", size, ctx.Err())
				}
				return fmt.Errorf("at %d bytes: %w", size, err)
			}
			if it > 0 {
				total += time.Since(t0)
			}
			wrong = ar.verify()
		}
		per := total / time.Duration(iters)
		sec := max(per.Seconds(), 1e-9)
		bytes := count * 4
		algbw := float64(bytes) / sec / 1e9
		rep.Results = append(rep.Results, SizeResult{Bytes: bytes, Count: count, TimeUS: float64(per.Nanoseconds()) / 1e3,
			AlgBWGBs: algbw, BusBWGBs: BusBW(algbw, n), Errors: wrong})
	}
	return nil
}

// answer reads the right neighbour's challenge on c and sends it this
// rank's hello, signed with the node's identity (see peerauth.go).
func (r *Runner) answer(ctx context.Context, c net.Conn, ring string, rank, n int) error {
	dl := time.Now().Add(handshakeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	_ = c.SetDeadline(dl)
	defer c.SetDeadline(time.Time{})
	nonce, err := readChallenge(c)
	if err != nil {
		return err
	}
	return writeHello(c, nonce, r.identity(), ring, rank, n)
}

func (r *Runner) dialPeer(ctx context.Context, addr string) (net.Conn, error) {
	dial := r.cfg.Dial
	if dial == nil {
		var d net.Dialer
		dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	// The neighbour's agent may be restarting: retry a refused connection
	// until ctx ends.
	wait := 50 * time.Millisecond
	for {
		c, err := dial(ctx, addr)
		if err == nil {
			return c, nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-t.C:
		}
		wait = min(2*wait, time.Second)
	}
}

// allReducer is one rank's ring all-reduce of count float32s.
type allReducer struct {
	in        io.Reader
	out       io.Writer
	rank, n   int
	data      []float32
	bounds    []int // chunk k is data[bounds[k]:bounds[k+1]]
	sbuf, rbu []byte
	// abort closes both connections: a failed receive ends the send too.
	abort func()
}

func newAllReducer(in io.Reader, out io.Writer, rank, n, count int) *allReducer {
	a := &allReducer{in: in, out: out, rank: rank, n: n, data: make([]float32, count)}
	a.bounds = make([]int, n+1)
	for k := 0; k <= n; k++ {
		a.bounds[k] = count * k / n
	}
	maxChunk := 0
	for k := range n {
		maxChunk = max(maxChunk, a.bounds[k+1]-a.bounds[k])
	}
	a.sbuf, a.rbu = make([]byte, 4*maxChunk), make([]byte, 4*maxChunk)
	return a
}

// fill sets this rank's input: element i is (rank+1)·(1 + i mod 13), so the
// sum over n ranks is (1 + i mod 13)·n(n+1)/2, exact in float32.
func (a *allReducer) fill() {
	k := 0 // i mod 13, without a division per element
	for i := range a.data {
		a.data[i] = float32((a.rank + 1) * (1 + k))
		if k++; k == 13 {
			k = 0
		}
	}
}

// verify counts the elements that are not the expected sum.
func (a *allReducer) verify() int64 {
	var wrong int64
	tri := a.n * (a.n + 1) / 2
	k := 0
	for _, v := range a.data {
		if v != float32((1+k)*tri) {
			wrong++
		}
		if k++; k == 13 {
			k = 0
		}
	}
	return wrong
}

func (a *allReducer) chunk(k int) []float32 {
	k = ((k % a.n) + a.n) % a.n
	return a.data[a.bounds[k]:a.bounds[k+1]]
}

// run is reduce-scatter then all-gather: in step s of the first, chunk
// rank−s goes right and chunk rank−s−1 comes from the left and is added;
// in step s of the second, chunk rank+1−s goes right and chunk rank−s
// comes from the left and replaces.
func (a *allReducer) run() error {
	for s := 0; s < a.n-1; s++ {
		if err := a.step(a.chunk(a.rank-s), a.chunk(a.rank-s-1), true); err != nil {
			return err
		}
	}
	for s := 0; s < a.n-1; s++ {
		if err := a.step(a.chunk(a.rank+1-s), a.chunk(a.rank-s), false); err != nil {
			return err
		}
	}
	return nil
}

// step sends send to the right while it receives recv from the left (both
// at once: a ring where everyone sends first would deadlock on full socket
// buffers).
func (a *allReducer) step(send, recv []float32, add bool) error {
	sb := a.sbuf[:4*len(send)]
	for i, v := range send {
		binary.LittleEndian.PutUint32(sb[4*i:], math.Float32bits(v))
	}
	errc := make(chan error, 1)
	go func() {
		_, err := a.out.Write(sb)
		errc <- err
	}()
	rb := a.rbu[:4*len(recv)]
	_, rerr := io.ReadFull(a.in, rb)
	if rerr != nil && a.abort != nil {
		a.abort() // the send may be blocked on a neighbour that stopped reading
	}
	werr := <-errc
	if rerr != nil {
		return fmt.Errorf("receiving from the left neighbour: %w", rerr)
	}
	if werr != nil {
		return fmt.Errorf("sending to the right neighbour: %w", werr)
	}
	for i := range recv {
		v := math.Float32frombits(binary.LittleEndian.Uint32(rb[4*i:]))
		if add {
			recv[i] += v
		} else {
			recv[i] = v
		}
	}
	return nil
}

package checks

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// slowConn reads at most rate bytes a second: a slow link into its node.
type slowConn struct {
	net.Conn
	rate float64
}

func (c *slowConn) Read(b []byte) (int, error) {
	if len(b) > 4096 {
		b = b[:4096]
	}
	n, err := c.Conn.Read(b)
	time.Sleep(time.Duration(float64(n) / c.rate * float64(time.Second))) // the link's pace, not a synchronisation
	return n, err
}

// corruptConn flips a bit in everything it reads after the hello: a node
// (or NIC) that delivers wrong data.
type corruptConn struct {
	net.Conn
	read int
}

// Read flips a bit of every 1024th byte of the stream past its first 128
// (the handshake): by stream offset, not per read, since the reader may
// buffer several steps' data in one read, and a corruption only in the
// last step would reach this rank alone.
func (c *corruptConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	for i := range b[:n] {
		if off := c.read + i; off >= 128 && off%1024 == 1023 {
			b[i] ^= 0x40
		}
	}
	c.read += n
	return n, err
}

// wrapListener wraps every accepted connection.
type wrapListener struct {
	net.Listener
	wrap func(net.Conn) net.Conn
}

func (l *wrapListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.wrap(c), nil
}

// peer is one node's runner serving its check endpoint on 127.0.0.1.
type peer struct {
	r    *Runner
	addr string
}

// startPeers starts n runners with endpoints; wrap[i], when set, wraps
// node i's incoming connections.
func startPeers(t *testing.T, n int, wrap map[int]func(net.Conn) net.Conn) []peer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	var out []peer
	for i := range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		if w := wrap[i]; w != nil {
			ln = &wrapListener{Listener: ln, wrap: w}
		}
		r := New(Config{Node: fmt.Sprintf("%s/nodes/n%d", cluster, i), Hostname: fmt.Sprintf("n%d", i), Cluster: cluster})
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.Serve(ctx, ln); err != nil {
				t.Errorf("serve: %v", err)
			}
		}()
		out = append(out, peer{r: r, addr: addr})
	}
	return out
}

// ring runs one all-reduce check on the members (indexes into peers), in
// that rank order, all at once, and returns each member's result.
func ring(t *testing.T, peers []peer, members []int, ringID string, params map[string]string) []*loomv1.HealthCheckResult {
	t.Helper()
	var addrs []string
	for _, m := range members {
		addrs = append(addrs, peers[m].addr)
	}
	check := AllReduce
	if len(members) == 2 {
		check = AllReducePair
	}
	out := make([]*loomv1.HealthCheckResult, len(members))
	var wg sync.WaitGroup
	for rank, m := range members {
		p := map[string]string{"ring": ringID}
		for k, v := range params {
			p[k] = v
		}
		cmd := &eventsv1.RunHealthCheck{Check: check, RunId: fmt.Sprintf("%s-%d", ringID, rank), Peers: addrs, Rank: int32(rank),
			Params: p, Timeout: durationpb.New(20 * time.Second)}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[rank] = peers[m].r.Run(context.Background(), cmd)
		}()
	}
	wg.Wait()
	return out
}

func TestRingAllReduceOverTCP(t *testing.T) {
	t.Parallel()
	for _, n := range []int{3, 4} {
		peers := startPeers(t, n, nil)
		members := make([]int, n)
		for i := range members {
			members[i] = i
		}
		res := ring(t, peers, members, fmt.Sprintf("ring-%d", n), map[string]string{"sizes": "4K,64K,1M", "iters": "3"})
		for rank, r := range res {
			if r.GetOutcome() != loomv1.CheckOutcome_CHECK_PASS {
				t.Fatalf("n=%d rank %d: %v %q", n, rank, r.GetOutcome(), r.GetSummary())
			}
			var rep RingReport
			if err := json.Unmarshal([]byte(r.GetDetail()), &rep); err != nil {
				t.Fatal(err)
			}
			if len(rep.Results) != 3 || rep.Ranks != n || rep.Rank != rank {
				t.Fatalf("report %+v", rep)
			}
			for _, s := range rep.Results {
				if s.Errors != 0 || s.AlgBWGBs <= 0 {
					t.Errorf("n=%d rank %d size %d: %+v", n, rank, s.Bytes, s)
				}
				// nccl-tests' bus bandwidth: algbw × 2(n−1)/n.
				if want := s.AlgBWGBs * 2 * float64(n-1) / float64(n); math.Abs(s.BusBWGBs-want) > 1e-9*want {
					t.Errorf("busbw %v, want %v", s.BusBWGBs, want)
				}
			}
			if r.GetMetrics()["busbw_gbps"] != rep.Results[2].BusBWGBs || r.GetMetrics()["busbw_gbps:1048576"] != rep.Results[2].BusBWGBs {
				t.Errorf("metrics %v", r.GetMetrics())
			}
		}
	}
}

func TestAllReduceBadParams(t *testing.T) {
	t.Parallel()
	r := New(Config{Cluster: cluster})
	for _, cmd := range []*eventsv1.RunHealthCheck{
		{Check: AllReduce, Peers: []string{"a"}},
		{Check: AllReducePair, Peers: []string{"a", "b", "c"}},
		{Check: AllReduce, Peers: []string{"a", "b"}, Rank: 2},
		{Check: AllReduce, Peers: []string{"a", "b"}, Params: map[string]string{"sizes": "lots"}},
	} {
		if got := r.Run(context.Background(), cmd); got.GetOutcome() != loomv1.CheckOutcome_CHECK_ERROR {
			t.Errorf("%v: %v %q", cmd, got.GetOutcome(), got.GetSummary())
		}
	}
}

// A ring whose neighbour never comes is the ring's failure (a warning
// for bisection to attribute), reported before the check's own timeout.
func TestRingWithDeadPeerWarns(t *testing.T) {
	t.Parallel()
	peers := startPeers(t, 2, nil)
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	_ = dead.Close()
	cmd := &eventsv1.RunHealthCheck{Check: AllReduce, RunId: "d", Peers: []string{peers[0].addr, peers[1].addr, deadAddr}, Rank: 0,
		Params: map[string]string{"ring": "dead"}, Timeout: durationpb.New(time.Second)}
	got := peers[0].r.Run(context.Background(), cmd)
	if got.GetOutcome() != loomv1.CheckOutcome_CHECK_WARN {
		t.Fatalf("dead peer: %v %q", got.GetOutcome(), got.GetSummary())
	}
}

// bisect is health's pairwise bisection driven over real pair checks: the
// members are paired in ring order; a node of a failed pair is then paired
// with a node known good, and the one that fails again is the culprit.
func bisect(t *testing.T, peers []peer, members []int, params map[string]string) (bad []int) {
	t.Helper()
	good := map[int]bool{}
	var suspects []int
	for i := 0; i+1 < len(members); i += 2 {
		a, b := members[i], members[i+1]
		res := ring(t, peers, []int{a, b}, fmt.Sprintf("pair-%d-%d", a, b), params)
		if res[0].GetOutcome() == loomv1.CheckOutcome_CHECK_PASS && res[1].GetOutcome() == loomv1.CheckOutcome_CHECK_PASS {
			good[a], good[b] = true, true
		} else {
			suspects = append(suspects, a, b)
		}
	}
	if len(members)%2 == 1 {
		suspects = append(suspects, members[len(members)-1])
	}
	for _, s := range suspects {
		var g = -1
		for k := range good {
			g = k
			break
		}
		if g < 0 {
			t.Fatal("no node known good to pair with")
		}
		res := ring(t, peers, []int{g, s}, fmt.Sprintf("pair-%d-%d", g, s), params)
		if res[0].GetOutcome() != loomv1.CheckOutcome_CHECK_PASS || res[1].GetOutcome() != loomv1.CheckOutcome_CHECK_PASS {
			bad = append(bad, s)
		} else {
			good[s] = true
		}
	}
	return bad
}

// A slow link into one of 4 nodes makes the ring slow; pairwise bisection
// over real pair checks finds that node.
func TestBisectionFindsSlowPeer(t *testing.T) {
	t.Parallel()
	peers := startPeers(t, 4, map[int]func(net.Conn) net.Conn{
		2: func(c net.Conn) net.Conn { return &slowConn{Conn: c, rate: 100e3} },
	})
	// The slow link carries 100 kB/s; the threshold (400 kB/s of bus
	// bandwidth) is far under what loopback gives even under the race
	// detector on a loaded machine (MB/s).
	params := map[string]string{"sizes": "64K", "iters": "1", "min_busbw_gbps": "0.0004"}
	res := ring(t, peers, []int{0, 1, 2, 3}, "slow-ring", params)
	for rank, r := range res {
		if r.GetOutcome() != loomv1.CheckOutcome_CHECK_WARN || !strings.Contains(r.GetSummary(), "slow") {
			t.Fatalf("rank %d of the ring with a slow link: %v %q", rank, r.GetOutcome(), r.GetSummary())
		}
	}
	if bad := bisect(t, peers, []int{0, 1, 2, 3}, params); len(bad) != 1 || bad[0] != 2 {
		t.Fatalf("bisection found %v, want [2]", bad)
	}
}

// A node that corrupts what it receives makes the ring's sum wrong;
// bisection finds it.
func TestBisectionFindsCorruptingPeer(t *testing.T) {
	t.Parallel()
	peers := startPeers(t, 3, map[int]func(net.Conn) net.Conn{
		1: func(c net.Conn) net.Conn { return &corruptConn{Conn: c} },
	})
	params := map[string]string{"sizes": "16K", "iters": "1"}
	res := ring(t, peers, []int{0, 1, 2}, "bad-ring", params)
	for rank, r := range res {
		if r.GetOutcome() != loomv1.CheckOutcome_CHECK_WARN || !strings.Contains(r.GetSummary(), "summed wrong") {
			t.Fatalf("rank %d of the ring with a corrupting node: %v %q", rank, r.GetOutcome(), r.GetSummary())
		}
	}
	if bad := bisect(t, peers, []int{2, 0, 1}, params); len(bad) != 1 || bad[0] != 1 {
		t.Fatalf("bisection found %v, want [1]", bad)
	}
}

// What is not an all-reduce peer is turned away at once.
func TestEndpointRefusesStrangers(t *testing.T) {
	t.Parallel()
	peers := startPeers(t, 1, nil)
	c, err := net.Dial("tcp", peers[0].addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil || n != 0 {
		t.Fatalf("a stranger's connection was kept: %d bytes, %v", n, err)
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("a stranger's connection was kept open")
	}
}

func TestParseSizesAndBusBW(t *testing.T) {
	t.Parallel()
	got, err := ParseSizes("8M, 64K,1024")
	if err != nil || fmt.Sprint(got) != "[1024 65536 8388608]" {
		t.Fatalf("ParseSizes: %v %v", got, err)
	}
	for _, bad := range []string{"", "0", "-1K", "2G", "lots"} {
		if _, err := ParseSizes(bad); err == nil {
			t.Errorf("ParseSizes(%q) accepted", bad)
		}
	}
	if BusBW(10, 8) != 17.5 || BusBW(10, 2) != 10 || BusBW(10, 1) != 0 {
		t.Fatalf("BusBW: %v %v %v", BusBW(10, 8), BusBW(10, 2), BusBW(10, 1))
	}
}

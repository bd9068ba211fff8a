package checks

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/healthcheck"
	"github.com/loom-ml/loom/libs/testkit"
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

// Read flips a bit of every 1024th byte of the stream past its first 2048
// (the handshake: hello, certificate and signature): by stream offset, not per read, since the reader may
// buffer several steps' data in one read, and a corruption only in the
// last step would reach this rank alone.
func (c *corruptConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	for i := range b[:n] {
		if off := c.read + i; off >= 2048 && off%1024 == 1023 {
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

// testServiceKey is the services' key the test peers' identities come
// from.
var testServiceKey = func() ed25519.PrivateKey {
	_, k, err := ed25519.GenerateKey(nil)
	if err != nil {
		panic(err)
	}
	return k
}()

// nodeIdentity is node i's identity in cluster cl, issued with key.
func nodeIdentity(t *testing.T, key ed25519.PrivateKey, cl string, i int) *auth.NodeIdentity {
	t.Helper()
	id, err := auth.IssueNodeIdentity(key, fmt.Sprintf("%s/nodes/n%d", cl, i), cl, "gpu", "", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// startPeers starts n runners with endpoints, each with its node identity
// of cluster; wrap[i], when set, wraps node i's incoming connections.
func startPeers(t *testing.T, n int, wrap map[int]func(net.Conn) net.Conn) []peer {
	t.Helper()
	ids := make([]*auth.NodeIdentity, n)
	for i := range n {
		ids[i] = nodeIdentity(t, testServiceKey, cluster, i)
	}
	return startPeersWith(t, ids, wrap)
}

// startPeersWith starts a runner with an endpoint for each of ids (a nil
// one: an agent without an identity).
func startPeersWith(t *testing.T, ids []*auth.NodeIdentity, wrap map[int]func(net.Conn) net.Conn) []peer {
	t.Helper()
	n := len(ids)
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
		cfg := Config{Node: fmt.Sprintf("%s/nodes/n%d", cluster, i), Hostname: fmt.Sprintf("n%d", i), Cluster: cluster}
		if id := ids[i]; id != nil {
			cfg.Identity = func() *auth.NodeIdentity { return id }
		}
		r := New(cfg)
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
	// The dead rank's address: a port reserved for this test process
	// (testkit.FreeAddr) that nothing listens on, not a :0 port closed
	// again, which a parallel test's endpoint may be given.
	deadAddr := testkit.FreeAddr()
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
	// The stranger gets the challenge, then the connection is closed.
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("a stranger's connection was kept open")
	}
	if len(b) != len(challengeMagic)+nonceSize {
		t.Fatalf("a stranger's connection was kept: %d bytes, %v", len(b), err)
	}
	if got := peers[0].r.Refused(refusedMalformed); got != 1 {
		t.Errorf("refused as malformed: %v, want 1", got)
	}
}

// helloAs connects to addr as a node with identity id (nil: none) would for
// rank 1 of a pair, and reports whether the endpoint closed the connection
// (it refused it) before wait ended.
func helloAs(t *testing.T, id *auth.NodeIdentity, addr string, wait time.Duration) (closed bool) {
	t.Helper()
	r := New(Config{Identity: func() *auth.NodeIdentity { return id }})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := r.answer(context.Background(), c, "pair-x", 1, 2); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	_, err = c.Read(make([]byte, 1))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false
	}
	return err != nil
}

// The endpoint takes a ring connection only from a node of its cluster
// that proves its identity over the connection's fresh challenge: a peer
// without an identity, with one the services' key did not sign, of another
// cluster, or answering another challenge is refused and counted, while a
// ring of the cluster's nodes passes.
func TestEndpointAuthenticatesPeers(t *testing.T) {
	t.Parallel()
	peers := startPeers(t, 2, nil)
	res := ring(t, peers, []int{0, 1}, "pair-ok", map[string]string{"sizes": "4K", "iters": "1"})
	for rank, r := range res {
		if r.GetOutcome() != loomv1.CheckOutcome_CHECK_PASS {
			t.Fatalf("rank %d of the cluster's pair: %v %q", rank, r.GetOutcome(), r.GetSummary())
		}
	}
	_, otherKey, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, reason string
		id           *auth.NodeIdentity
	}{
		{"no identity", refusedNoCertificate, nil},
		{"another services' key", refusedUnauthentic, nodeIdentity(t, otherKey, cluster, 7)},
		{"another cluster", refusedOtherCluster, nodeIdentity(t, testServiceKey, "projects/p/clusters/other", 7)},
	} {
		if !helloAs(t, tc.id, peers[0].addr, 10*time.Second) {
			t.Errorf("%s: the connection was kept", tc.name)
		}
		if got := peers[0].r.Refused(tc.reason); got != 1 {
			t.Errorf("%s: refused as %s: %v, want 1", tc.name, tc.reason, got)
		}
	}
	for _, reason := range []string{refusedNoCertificate, refusedUnauthentic, refusedOtherCluster, refusedMalformed, refusedBusy} {
		if got := peers[1].r.Refused(reason); got != 0 {
			t.Errorf("node 1 refused %v connections as %s, want none", got, reason)
		}
	}
}

// A hello signed over another challenge (a replayed answer) does not pass,
// nor one of another node's certificate with this node's key.
func TestHelloIsBoundToItsChallenge(t *testing.T) {
	t.Parallel()
	me, peer := nodeIdentity(t, testServiceKey, cluster, 0), nodeIdentity(t, testServiceKey, cluster, 1)
	nonce, other := bytes.Repeat([]byte{1}, nonceSize), bytes.Repeat([]byte{2}, nonceSize)
	read := func(answered []byte, id *auth.NodeIdentity) error {
		var b bytes.Buffer
		if err := writeHello(&b, answered, id, "r", 1, 2); err != nil {
			t.Fatal(err)
		}
		_, _, _, err := readHello(bufio.NewReader(&b), nonce, me, time.Now())
		return err
	}
	if err := read(nonce, peer); err != nil {
		t.Fatalf("a hello answering this challenge: %v", err)
	}
	if err := read(other, peer); err == nil || !strings.Contains(err.Error(), "signature") {
		t.Errorf("a hello answering another challenge: %v, want refused for its signature", err)
	}
	forged := *peer
	forged.Key = me.Key
	if err := read(nonce, &forged); err == nil || !strings.Contains(err.Error(), "signature") {
		t.Errorf("a hello of node 1's certificate signed with node 0's key: %v, want refused", err)
	}
}

func TestParseSizesAndBusBW(t *testing.T) {
	t.Parallel()
	got, err := healthcheck.ParseSizes("8M, 64K,1024")
	if err != nil || fmt.Sprint(got) != "[1024 65536 8388608]" {
		t.Fatalf("ParseSizes: %v %v", got, err)
	}
	for _, bad := range []string{"", "0", "-1K", "2G", "lots"} {
		if _, err := healthcheck.ParseSizes(bad); err == nil {
			t.Errorf("ParseSizes(%q) accepted", bad)
		}
	}
	if BusBW(10, 8) != 17.5 || BusBW(10, 2) != 10 || BusBW(10, 1) != 0 {
		t.Fatalf("BusBW: %v %v %v", BusBW(10, 8), BusBW(10, 2), BusBW(10, 1))
	}
}

package agent

import (
	"context"
	"fmt"
	"io"
	"net"
	"regexp"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Two real agents of the cluster, each with its node identity, run the
// all-reduce pair check between their endpoints and pass; a stranger
// without an identity that connects to an endpoint is refused, and the
// agent counts it on its /metrics.
func TestAllReduceBetweenAgentsAuthenticated(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	node2 := cluster + "/nodes/gpu-0002"
	work2 := t.TempDir()
	giveIdentity(t, work2, node2)
	regs := map[string]*eventsv1.AgentRegistered{}
	var httpAddrs []string
	for _, n := range []struct{ node, work string }{{node, e.work}, {node2, work2}} {
		cfg := e.config()
		cfg.Node, cfg.WorkDir, cfg.SharedDir = n.node, n.work, t.TempDir()
		cfg.HTTPAddr = testkit.FreeAddr()
		cfg.RedisAddr, _ = testkit.Redis(t)
		httpAddrs = append(httpAddrs, cfg.HTTPAddr)
		testkit.Start(t, "agent "+n.node, func(ctx context.Context) error { return Run(ctx, cfg) })
		regs[n.node] = testkit.WaitEvent(t, e.broker, topics.NodeTelemetry, wait, func(ev envelope.Event) bool {
			r, ok := ev.Payload.(*eventsv1.AgentRegistered)
			return ok && r.GetNode() == n.node
		}).Payload.(*eventsv1.AgentRegistered)
	}
	peers := []string{regs[node].GetCheckAddr(), regs[node2].GetCheckAddr()}
	for rank, n := range []string{node, node2} {
		chk := &eventsv1.RunHealthCheck{Node: n, Cluster: cluster, RunId: fmt.Sprintf("pair-%d", rank), ScanId: "scan-pair",
			Check: "allreduce_pair", Trigger: "scan", Peers: peers, Rank: int32(rank),
			Params: map[string]string{"ring": "scan-pair", "sizes": "64K", "iters": "2"}, Timeout: durationpb.New(20 * time.Second)}
		publish(t, e.broker, envelope.New(topics.NodeCommands, n, "loom/test", chk))
	}
	for _, n := range []string{node, node2} {
		ev := testkit.WaitEvent(t, e.broker, topics.NodeTelemetry, wait, func(ev envelope.Event) bool {
			h, ok := ev.Payload.(*eventsv1.HealthCheckCompleted)
			return ok && h.GetResult().GetScanId() == "scan-pair" && h.GetResult().GetNode() == n
		})
		if r := ev.Payload.(*eventsv1.HealthCheckCompleted).GetResult(); r.GetOutcome() != loomv1.CheckOutcome_CHECK_PASS {
			t.Fatalf("%s: %v %q", n, r.GetOutcome(), r.GetSummary())
		}
	}

	// A stranger: it gets the challenge, answers with a hello of no
	// certificate, and is closed.
	c, err := net.DialTimeout("tcp", peers[0], wait)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(wait))
	if _, err := io.ReadFull(c, make([]byte, 40)); err != nil {
		t.Fatalf("challenge: %v", err)
	}
	hello := append([]byte("LOOMAR2\n\x00\x01r"), 0, 0, 0, 1, 0, 0, 0, 2, 0, 0)
	if _, err := c.Write(hello); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("the stranger's connection was kept")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the stranger's connection was kept open")
	}
	refused := regexp.MustCompile(`(?m)^loom_agent_check_peers_refused_total\{reason="no_certificate"\} 1$`)
	testkit.WaitFor(t, wait, "the refusal counted on /metrics", func() (bool, error) {
		return refused.MatchString(metrics(httpAddrs[0])), nil
	})
}

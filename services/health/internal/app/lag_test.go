package app

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/noderate"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/health/internal/domain"
)

// TestNodeFloodDeclaresNobody checks, on a real Redis with a fake clock,
// the audit's attack: one node, with a valid identity, floods the
// telemetry topic with heartbeats signed by itself, so that the other
// nodes' heartbeats wait behind them in the partition. Its records past
// its rate are dropped and counted; health, behind, declares nobody (no
// verdict reaches the outbox) for four timeouts; caught up, it fails only
// the node that is really silent.
func TestNodeFloodDeclaresNobody(t *testing.T) {
	t.Parallel()
	st, clk, ctx := onRedis(t)
	const timeout = 15 * time.Second
	a := NewWith(st, domain.Config{Timeout: timeout, NodeRate: 1, NodeBurst: 5}, clk.now, slog.Default())
	reg := prometheus.NewRegistry()
	if err := a.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	name := func(i int) string { return fmt.Sprintf("projects/default/clusters/c1/nodes/gpu-%04d", i) }
	flooder := name(9)
	for _, n := range []string{name(0), name(1), name(2), flooder} {
		if err := a.Handle(ctx, event(topics.NodeEvents, &eventsv1.NodeChanged{Node: &loomv1.Node{Name: n, State: loomv1.Node_READY}})); err != nil {
			t.Fatal(err)
		}
	}
	// signed is a telemetry record n signed, at offset of a partition
	// whose high-water mark is hwm.
	signed := func(n string, offset, hwm int64) envelope.Event {
		ev := envelope.New(topics.NodeTelemetry, n, "loom/agent", &eventsv1.Heartbeat{Node: n})
		ev.Signer, ev.Offset, ev.HighWaterMark, ev.Time = "nodes/"+n, offset, hwm, clk.now()
		return ev
	}
	const end = 100000
	off := int64(0)
	for range 16 {
		for range 20 {
			if err := a.Handle(ctx, signed(flooder, off, end)); err != nil {
				t.Fatal(err)
			}
			off++
		}
		clk.advance(timeout / 4)
		if err := a.Check(ctx); err != nil {
			t.Fatal(err)
		}
		if n, err := st.OutboxLen(ctx); err != nil || n != 0 {
			t.Fatalf("behind the flood, the outbox holds %d verdicts (%v), want none", n, err)
		}
	}
	if d := testutil.ToFloat64(a.metrics.dropped.WithLabelValues(domain.DropRate)); d < 16*20-5-16*4 {
		t.Fatalf("loom_health_dropped_total{reason=rate} = %v, want the flood past 1/s", d)
	}
	// The flooded partition's lag is shown by itself as well.
	if got := partitionBehind(t, reg, "0"); got < 3*timeout.Seconds() {
		t.Fatalf("loom_health_partition_behind_seconds{partition=0} = %v, want the flood's four timeouts", got)
	}
	// Health reaches the waiting heartbeats (node 2 is dead) and the end.
	for i, n := range []string{name(0), name(1), flooder} {
		if err := a.Handle(ctx, signed(n, end-3+int64(i), end)); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := st.OutboxLen(ctx); n != 1 {
		t.Fatalf("caught up, the outbox holds %d verdicts, want node 2's", n)
	}
	if n, _ := a.Node(name(2)); !n.Unhealthy {
		t.Fatalf("node 2: %+v, want UNHEALTHY", n)
	}
	for _, i := range []int{0, 1} {
		if n, _ := a.Node(name(i)); n.Unhealthy || n.Unreachable {
			t.Fatalf("node %d: %+v", i, n)
		}
	}
}

// TestRecordNeverCommittedLeavesNoLag: the last record of a quiet partition
// is one health does not commit (refused: a node's record naming no node;
// the same holds for one applied before, a record written twice), fetched
// together with the record before it. Health has passed it all the same:
// it is not behind, and the node that fell silent there is failed a
// timeout later. Before, the partition stayed "behind" until another
// record came there, and health judged no silence anywhere.
func TestRecordNeverCommittedLeavesNoLag(t *testing.T) {
	t.Parallel()
	st, clk, ctx := onRedis(t)
	const timeout = 15 * time.Second
	a := NewWith(st, domain.Config{Timeout: timeout}, clk.now, slog.Default())
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	name := func(i int) string { return fmt.Sprintf("projects/default/clusters/c1/nodes/gpu-%04d", i) }
	for i := range 3 {
		if err := a.Handle(ctx, event(topics.NodeEvents, &eventsv1.NodeChanged{Node: &loomv1.Node{Name: name(i), State: loomv1.Node_READY}})); err != nil {
			t.Fatal(err)
		}
	}
	signed := func(n string, p *eventsv1.Heartbeat, partition int, offset, hwm int64) envelope.Event {
		ev := envelope.New(topics.NodeTelemetry, n, "loom/agent", p)
		ev.Signer, ev.Partition, ev.Offset, ev.HighWaterMark, ev.Time = "nodes/"+n, partition, offset, hwm, clk.now()
		return ev
	}
	// Node 2, alone on partition 0: a heartbeat, then a record health
	// refuses, fetched together; then node 2 is dead.
	if err := a.Handle(ctx, signed(name(2), &eventsv1.Heartbeat{Node: name(2)}, 0, 0, 2)); err != nil {
		t.Fatal(err)
	}
	if err := a.Handle(ctx, signed(name(2), &eventsv1.Heartbeat{}, 0, 1, 2)); err == nil {
		t.Fatal("a heartbeat naming no node was taken")
	}
	// Nodes 0 and 1 go on, on partition 1, health caught up there.
	off := int64(0)
	for range 12 {
		clk.advance(timeout / 4)
		for _, i := range []int{0, 1} {
			if err := a.Handle(ctx, signed(name(i), &eventsv1.Heartbeat{Node: name(i)}, 1, off, off+1)); err != nil {
				t.Fatal(err)
			}
			off++
		}
		if err := a.Check(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := a.Node(name(2)); !n.Unhealthy {
		t.Fatalf("node 2, silent for three timeouts: %+v, want UNHEALTHY (behind %s)", n, a.state.Behind(clk.now()))
	}
	for _, i := range []int{0, 1} {
		if n, _ := a.Node(name(i)); n.Unhealthy || n.Unreachable {
			t.Fatalf("node %d: %+v", i, n)
		}
	}
}

// partitionBehind is loom_health_partition_behind_seconds{partition} as
// reg serves it (-1 when absent).
func partitionBehind(t *testing.T, reg *prometheus.Registry, partition string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "loom_health_partition_behind_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "partition" && l.GetValue() == partition {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}

// TestDropLogNamesTheNode: the log line of records dropped past a node's
// rate names that node (latest.node=…), so that an operator finds the
// flooder; before, the node's name came out as a key and the event as a
// !BADKEY.
func TestDropLogNamesTheNode(t *testing.T) {
	t.Parallel()
	st, clk, ctx := onRedis(t)
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	a := NewWith(st, domain.Config{Timeout: 15 * time.Second, NodeRate: 0.001, NodeBurst: 1}, clk.now, log)
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	const n = "projects/default/clusters/c1/nodes/gpu-0009"
	for i := range 2 {
		ev := envelope.New(topics.NodeTelemetry, n, "loom/agent", &eventsv1.Heartbeat{Node: n})
		ev.Signer, ev.Offset, ev.HighWaterMark, ev.Time = "nodes/"+n, int64(i), 2, clk.now()
		if err := a.Handle(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	var line string
	for _, l := range strings.Split(buf.String(), "\n") {
		if strings.Contains(l, "records dropped unhandled") {
			line = l
		}
	}
	if !strings.Contains(line, "reason=rate") || !strings.Contains(line, "latest.node="+n+" ") || strings.Contains(line, "BADKEY") {
		t.Fatalf("drop log %q, want reason=rate and latest.node=%s", line, n)
	}
}

// TestDropLogSumsUpEveryFloodingNode: the drop log, one line per reason
// every noderate.LogEvery, counts the drops since its last line by node
// (by_node="n1=5 n2=2"), so that an operator sees every node flooding the
// telemetry topic, not only the one whose record happened to come last.
func TestDropLogSumsUpEveryFloodingNode(t *testing.T) {
	t.Parallel()
	st, clk, ctx := onRedis(t)
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	a := NewWith(st, domain.Config{Timeout: 15 * time.Second, NodeRate: 0.001, NodeBurst: 1}, clk.now, log)
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	const n1, n2 = "projects/default/clusters/c1/nodes/gpu-0001", "projects/default/clusters/c1/nodes/gpu-0002"
	offset := int64(0)
	send := func(n string, times int) {
		t.Helper()
		for range times {
			ev := envelope.New(topics.NodeTelemetry, n, "loom/agent", &eventsv1.Heartbeat{Node: n})
			ev.Signer, ev.Offset, ev.HighWaterMark, ev.Time = "nodes/"+n, offset, offset+1, clk.now()
			offset++
			if err := a.Handle(ctx, ev); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Each node's first record passes; n1's second is dropped and logged
	// at once; then n1 drops 4 more, n2 2, within the 10 s.
	send(n1, 2)
	send(n2, 1)
	send(n1, 4)
	send(n2, 2)
	clk.advance(noderate.LogEvery)
	send(n2, 1) // the line: 4 of n1's since the first line, 3 of n2's
	var lines []string
	for _, l := range strings.Split(buf.String(), "\n") {
		if strings.Contains(l, "records dropped unhandled") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 2 {
		t.Fatalf("drop log lines %q, want 2", lines)
	}
	want := `reason=rate dropped=7 nodes=2 by_node="` + n1 + `=4 ` + n2 + `=3"`
	if !strings.Contains(lines[1], want) || !strings.Contains(lines[1], "latest.node="+n2+" ") {
		t.Fatalf("drop log %q, want %s and latest.node=%s", lines[1], want, n2)
	}
}

// TestDropLogWritesAFloodsLastDrops: drops that no later drop comes to
// write (a flood's last) are logged by the next check once
// noderate.LogEvery has passed since the last line.
func TestDropLogWritesAFloodsLastDrops(t *testing.T) {
	t.Parallel()
	st, clk, ctx := onRedis(t)
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	a := NewWith(st, domain.Config{Timeout: 15 * time.Second, NodeRate: 0.001, NodeBurst: 1}, clk.now, log)
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	const n = "projects/default/clusters/c1/nodes/gpu-0001"
	// The first passes, the second is dropped and logged at once, the
	// last 3 within the 10 s.
	for i := range 5 {
		ev := envelope.New(topics.NodeTelemetry, n, "loom/agent", &eventsv1.Heartbeat{Node: n})
		ev.Signer, ev.Offset, ev.HighWaterMark, ev.Time = "nodes/"+n, int64(i), int64(i+1), clk.now()
		if err := a.Handle(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	clk.advance(noderate.LogEvery)
	if err := a.Check(ctx); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(buf.String(), "\n") {
		if strings.Contains(l, "records dropped unhandled") {
			lines = append(lines, l)
		}
	}
	if want := `reason=rate dropped=3 nodes=1 by_node="` + n + `=3"`; len(lines) != 2 || !strings.Contains(lines[1], want) {
		t.Fatalf("drop log lines %q, want a second with %s", lines, want)
	}
}

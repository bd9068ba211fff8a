package domain

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// flooder is the compromised node of these tests: a member, with a valid
// identity, that signs records about itself only.
var flooder = nodeN(9)

// record hands the state a telemetry record node signed, at offset of a
// partition whose high-water mark is hwm, stamped at.
func (f *fake) record(node string, offset, hwm int64, at time.Time, ev proto.Message) *Change {
	f.t.Helper()
	return f.recordOn(0, node, offset, hwm, at, ev)
}

// recordOn is record on partition part.
func (f *fake) recordOn(part int, node string, offset, hwm int64, at time.Time, ev proto.Message) *Change {
	f.t.Helper()
	c, err := f.s.HandleRecord(f.now, Record{Telemetry: true, Node: node, Limited: true, Partition: part, Offset: offset, HighWaterMark: hwm, Time: at}, ev)
	if err != nil {
		f.t.Fatalf("handle %T: %v", ev, err)
	}
	f.s.Commit(c)
	return c
}

// cluster3AndFlooder is cluster3 with the flooder a fourth member.
func cluster3AndFlooder(t *testing.T) *fake {
	f := cluster3(t)
	f.join(flooder, loomv1.Node_READY)
	f.beat(flooder)
	return f
}

// TestFloodBehindGivesNoSilenceVerdict: one node floods the telemetry topic
// with its own signed records, stamped now, so that the others' heartbeats
// wait behind them. Health, behind (records wait after each one it
// handles, for longer than half a timeout), declares nobody: neither
// unreachable nor failed. Once it has caught up, the node that really is
// silent is failed, the others are not.
func TestFloodBehindGivesNoSilenceVerdict(t *testing.T) {
	t.Parallel()
	f := cluster3AndFlooder(t)
	off := int64(0)
	flood := func() {
		f.record(flooder, off, 1000, f.now, &eventsv1.Heartbeat{Node: flooder, Cluster: cluster})
		off++
	}
	flood()
	for range 16 { // four timeouts
		f.advance(timeout / 4)
		flood()
		if v := healthOf(f.checkAll()); len(v) != 0 {
			t.Fatalf("behind by %s, declared: %v", f.s.Behind(f.now), v)
		}
	}
	if lag := f.s.Behind(f.now); lag < 3*timeout {
		t.Fatalf("Behind = %s, want the flood's four timeouts", lag)
	}
	// Health reaches the heartbeats that waited (nodes 0 and 1; node 2 is
	// dead), and the partition's end.
	f.record(nodeN(0), 997, 1000, f.now, &eventsv1.Heartbeat{Node: nodeN(0), Cluster: cluster})
	f.record(nodeN(1), 998, 1000, f.now, &eventsv1.Heartbeat{Node: nodeN(1), Cluster: cluster})
	f.record(flooder, 999, 1000, f.now, &eventsv1.Heartbeat{Node: flooder, Cluster: cluster})
	if lag := f.s.Behind(f.now); lag != 0 {
		t.Fatalf("caught up, Behind = %s", lag)
	}
	v := healthOf(f.checkAll())
	if len(v) != 1 || v[0].GetNode() != nodeN(2) || v[0].GetHealth() != eventsv1.NodeHealth_UNHEALTHY || v[0].GetUnreachable() {
		t.Fatalf("caught up: %v, want node 2 alone UNHEALTHY", v)
	}
}

// TestIdlePartitionIsNotBehind: a partition whose last record health
// handled was its last (a dead node's, say) is not behind however long it
// stays quiet: its node's silence is judged.
func TestIdlePartitionIsNotBehind(t *testing.T) {
	t.Parallel()
	f := cluster3(t)
	f.record(nodeN(2), 41, 42, f.now, &eventsv1.Heartbeat{Node: nodeN(2), Cluster: cluster})
	for range 4 {
		f.advance(timeout / 4)
		f.beat(nodeN(0))
		f.beat(nodeN(1))
		f.checkAll()
	}
	if lag := f.s.Behind(f.now); lag != 0 {
		t.Fatalf("Behind = %s on an idle partition", lag)
	}
	if n := f.s.Node(nodeN(2)); !n.Unhealthy {
		t.Fatalf("node 2 silent a timeout: %+v, want UNHEALTHY", n)
	}
}

// TestFloodAloneDoesNotConfirmUnreachable: once nodes are unreachable, the
// bus counts as delivering again only on recent records of two distinct
// other nodes: not on the flooding node's records however many, not on a
// service's record, not on a node's record stamped long ago.
func TestFloodAloneDoesNotConfirmUnreachable(t *testing.T) {
	t.Parallel()
	f := cluster3AndFlooder(t)
	const other = "projects/default/clusters/c2/nodes/x"
	f.handle(&eventsv1.NodeChanged{Node: &loomv1.Node{Name: other, Cluster: "projects/default/clusters/c2", State: loomv1.Node_READY}})
	off := int64(0)
	beat := func(node string, at time.Time) {
		f.record(node, off, off+1, at, &eventsv1.Heartbeat{Node: node, Cluster: cluster})
		off++
	}
	for range 4 {
		f.advance(timeout / 4)
		beat(flooder, f.now)
		beat(other, f.now)
		f.checkAll()
	}
	for _, i := range []int{0, 1, 2} {
		if n := f.s.Node(nodeN(i)); !n.Unreachable {
			t.Fatalf("node %d: %+v, want unreachable (3 of 4 silent)", i, n)
		}
	}
	// The flooder's records, a service's, and the other node's stamped a
	// timeout ago: none proves the bus delivers.
	for range 12 {
		f.advance(timeout / 4)
		for range 5 {
			beat(flooder, f.now)
		}
		f.handle(&eventsv1.NodeChanged{Node: &loomv1.Node{Name: "projects/default/clusters/c2/nodes/y", Cluster: "projects/default/clusters/c2", State: loomv1.Node_PROVISIONING}})
		beat(other, f.now.Add(-timeout))
		if v := healthOf(f.checkAll()); len(v) != 0 {
			t.Fatalf("confirmed on the flood alone: %v", v)
		}
	}
	// A second node, heard recently: a timeout later, they are failed.
	beat(other, f.now)
	got := 0
	for i := range 4 {
		f.advance(timeout / 4)
		beat(flooder, f.now)
		beat(other, f.now)
		for _, x := range healthOf(f.checkAll()) {
			if i < 3 || x.GetHealth() != eventsv1.NodeHealth_UNHEALTHY {
				t.Fatalf("check %d: %v", i, x)
			}
			got++
		}
	}
	if got != 3 {
		t.Fatalf("%d confirmed, want 3", got)
	}
}

// TestNodeRateDropsRecords: a node's records past its token bucket are
// dropped unhandled: a dropped heartbeat is no sign of life, a dropped Xid
// starts no repair, and a dropped record proves no delivery. A service's
// records (the sim provider's) are not limited. Buckets of nodes quiet long
// enough to have filled up again are forgotten.
func TestNodeRateDropsRecords(t *testing.T) {
	t.Parallel()
	f := &fake{t: t, s: NewStateWith(Config{Timeout: timeout, NodeRate: 1, NodeBurst: 2}), now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	f.join(node, loomv1.Node_READY)
	for i := range 2 {
		if c := f.record(node, int64(i), 100, f.now, &eventsv1.Heartbeat{Node: node, Cluster: cluster}); c.Dropped != "" {
			t.Fatalf("record %d within the burst dropped: %s", i, c.Dropped)
		}
	}
	xid := f.record(node, 2, 100, f.now, &eventsv1.XidObserved{Node: node, Cluster: cluster, Gpu: 0, Xid: 79})
	if xid.Dropped != DropRate || xid.Remedy != nil || len(xid.AllEmits()) != 0 || xid.Durable() {
		t.Fatalf("Xid past the rate: dropped %q, remedy %v, emits %v", xid.Dropped, xid.Remedy, allEmits(xid))
	}
	// The bucket refills at the rate; a burst past it is dropped again.
	f.advance(timeout)
	f.record(node, 3, 4, f.now, &eventsv1.Heartbeat{Node: node, Cluster: cluster}) // refilled: handled
	f.advance(timeout)
	f.record(node, 4, 7, f.now, &eventsv1.Heartbeat{Node: node, Cluster: cluster})
	f.record(node, 5, 7, f.now, &eventsv1.Heartbeat{Node: node, Cluster: cluster})
	if c := f.record(node, 6, 7, f.now, &eventsv1.Heartbeat{Node: node, Cluster: cluster}); c.Dropped != DropRate {
		t.Fatalf("third heartbeat at once: dropped %q", c.Dropped)
	}
	// A service's records are trusted: never dropped.
	for i := range 5 {
		c, err := f.s.HandleRecord(f.now, Record{Telemetry: true, Node: node, Partition: 0, Offset: int64(7 + i), HighWaterMark: 12, Time: f.now},
			&eventsv1.Heartbeat{Node: node, Cluster: cluster})
		if err != nil || c.Dropped != "" {
			t.Fatalf("service's record %d: %v, dropped %q", i, err, c.Dropped)
		}
		f.s.Commit(c)
	}
	if f.s.Buckets() != 1 {
		t.Fatalf("%d buckets, want the node's", f.s.Buckets())
	}
	f.advance(3 * time.Second) // the bucket is full again
	f.checkAll()
	if f.s.Buckets() != 0 {
		t.Fatalf("%d buckets after they filled up, want 0", f.s.Buckets())
	}
}

// TestDroppedRecordIsNoWitness: a record past its node's rate does not
// count as the bus delivering.
func TestDroppedRecordIsNoWitness(t *testing.T) {
	t.Parallel()
	f := &fake{t: t, s: NewStateWith(Config{Timeout: timeout, NodeRate: 0.001, NodeBurst: 1}), now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	for i := range 3 {
		f.handle(&eventsv1.NodeChanged{Node: &loomv1.Node{Name: nodeN(i), Cluster: cluster, State: loomv1.Node_READY}})
	}
	const a, b = "projects/default/clusters/c2/nodes/a", "projects/default/clusters/c2/nodes/b"
	for _, n := range []string{a, b} {
		f.handle(&eventsv1.NodeChanged{Node: &loomv1.Node{Name: n, Cluster: "projects/default/clusters/c2", State: loomv1.Node_PROVISIONING}})
	}
	f.record(b, 0, 1, f.now, &eventsv1.Heartbeat{Node: b}) // b's one token
	f.advance(timeout / 2)
	f.checkAll()
	f.advance(timeout / 2)
	if v := healthOf(f.checkAll()); len(v) != 3 || !v[0].GetUnreachable() {
		t.Fatalf("want 3 unreachable: %v", v)
	}
	f.advance(time.Second)
	if c := f.record(b, 1, 3, f.now, &eventsv1.Heartbeat{Node: b}); c.Dropped != DropRate {
		t.Fatalf("b's second record: dropped %q, want %q", c.Dropped, DropRate)
	}
	f.record(a, 2, 3, f.now, &eventsv1.Heartbeat{Node: a})
	for range 8 {
		f.advance(timeout / 4)
		if v := healthOf(f.checkAll()); len(v) != 0 {
			t.Fatalf("confirmed with one witness handled, one dropped: %v", v)
		}
	}
}

// TestFewNodesLeftConfirmUnreachable: two nodes of a three-node fleet fall
// silent together (a mass silence: unreachable). The third keeps sending
// its heartbeats, health is never behind: it is the only node that can
// witness the bus delivering, and that must do; a timeout after it is
// heard, the two are failed (their runs end), not kept unreachable for
// ever.
func TestFewNodesLeftConfirmUnreachable(t *testing.T) {
	t.Parallel()
	f := cluster3(t)
	off := int64(0)
	beat := func() {
		f.record(nodeN(0), off, off+1, f.now, &eventsv1.Heartbeat{Node: nodeN(0), Cluster: cluster})
		off++
	}
	for range 4 {
		f.advance(timeout / 4)
		beat()
		f.checkAll()
	}
	for _, i := range []int{1, 2} {
		if n := f.s.Node(nodeN(i)); !n.Unreachable {
			t.Fatalf("node %d: %+v, want unreachable (2 of 3 silent)", i, n)
		}
	}
	failed := map[string]bool{}
	for range 12 {
		f.advance(timeout / 4)
		beat()
		for _, x := range healthOf(f.checkAll()) {
			if x.GetHealth() == eventsv1.NodeHealth_UNHEALTHY {
				failed[x.GetNode()] = true
			}
		}
	}
	if len(failed) != 2 || !failed[nodeN(1)] || !failed[nodeN(2)] {
		t.Fatalf("failed %v, want nodes 1 and 2 UNHEALTHY three timeouts after they fell silent, node 0 heard throughout", failed)
	}
}

// TestFloodBlindsOnlyItsPartition: the flooder keeps partition 0 behind.
// Health judges each node by the partition its records arrive on: node 2,
// whose records go to partition 1 (caught up), is failed a timeout after
// it falls silent, flood or not; node 3, silent on the flooded partition,
// is not judged until health has caught up there; and Behind still says
// how far behind the flood keeps health.
func TestFloodBlindsOnlyItsPartition(t *testing.T) {
	t.Parallel()
	f := cluster3AndFlooder(t)
	f.join(nodeN(3), loomv1.Node_READY)
	off1 := int64(0)
	beat1 := func(i int) {
		f.recordOn(1, nodeN(i), off1, off1+1, f.now, &eventsv1.Heartbeat{Node: nodeN(i), Cluster: cluster})
		off1++
	}
	for i := range 3 {
		beat1(i)
	}
	f.record(nodeN(3), 0, 1, f.now, &eventsv1.Heartbeat{Node: nodeN(3), Cluster: cluster})
	off0 := int64(1)
	flood := func() {
		f.record(flooder, off0, 1000, f.now, &eventsv1.Heartbeat{Node: flooder, Cluster: cluster})
		off0++
	}
	flood()
	failed := map[string]bool{}
	for i := range 16 { // four timeouts
		f.advance(timeout / 4)
		flood()
		beat1(0)
		beat1(1)
		for _, v := range healthOf(f.checkAll()) {
			if v.GetHealth() != eventsv1.NodeHealth_UNHEALTHY || v.GetUnreachable() || i < 3 {
				t.Fatalf("check %d: %v", i, v)
			}
			failed[v.GetNode()] = true
		}
	}
	if len(failed) != 1 || !failed[nodeN(2)] {
		t.Fatalf("behind on partition 0 only: failed %v, want node 2 (partition 1), node 3 (partition 0) not judged", failed)
	}
	if lag := f.s.Behind(f.now); lag < 3*timeout {
		t.Fatalf("Behind = %s, want the flood's four timeouts", lag)
	}
	// Caught up on partition 0: node 3's silence is judged now.
	f.record(flooder, 999, 1000, f.now, &eventsv1.Heartbeat{Node: flooder, Cluster: cluster})
	v := healthOf(f.checkAll())
	if len(v) != 1 || v[0].GetNode() != nodeN(3) || v[0].GetHealth() != eventsv1.NodeHealth_UNHEALTHY || v[0].GetUnreachable() {
		t.Fatalf("caught up: %v, want node 3 alone UNHEALTHY", v)
	}
}

// TestWitnessesOfAnotherPartitionConfirm: nodes 0 to 2, whose records go
// to partition 1, fall silent together (unreachable) while the flooder
// keeps partition 0 behind. Records of two nodes of another cluster on
// partition 1, which is not behind, prove the bus delivers there: the
// three are failed a timeout later. The flooder's records, on the
// partition behind, prove nothing.
func TestWitnessesOfAnotherPartitionConfirm(t *testing.T) {
	t.Parallel()
	f := cluster3AndFlooder(t)
	const c2 = "projects/default/clusters/c2"
	const a, b = c2 + "/nodes/a", c2 + "/nodes/b"
	for _, n := range []string{a, b} {
		f.handle(&eventsv1.NodeChanged{Node: &loomv1.Node{Name: n, Cluster: c2, State: loomv1.Node_READY}})
	}
	off1 := int64(0)
	beat1 := func(n string) {
		f.recordOn(1, n, off1, off1+1, f.now, &eventsv1.Heartbeat{Node: n})
		off1++
	}
	for _, n := range []string{nodeN(0), nodeN(1), nodeN(2), a, b} {
		beat1(n)
	}
	f.record(flooder, 0, 1, f.now, &eventsv1.Heartbeat{Node: flooder, Cluster: cluster})
	off0 := int64(1)
	flood := func() {
		f.record(flooder, off0, 1000, f.now, &eventsv1.Heartbeat{Node: flooder, Cluster: cluster})
		off0++
	}
	unreachable, failed := map[string]bool{}, map[string]bool{}
	for range 16 {
		f.advance(timeout / 4)
		flood()
		beat1(a)
		beat1(b)
		for _, v := range healthOf(f.checkAll()) {
			switch {
			case v.GetUnreachable():
				unreachable[v.GetNode()] = true
			case v.GetHealth() == eventsv1.NodeHealth_UNHEALTHY:
				if !unreachable[v.GetNode()] {
					t.Fatalf("%s failed before it was unreachable: %v", v.GetNode(), v)
				}
				failed[v.GetNode()] = true
			}
		}
	}
	for i := range 3 {
		if !failed[nodeN(i)] {
			t.Fatalf("node %d: unreachable %v, failed %v; want each unreachable, then failed on the witnesses of partition 1", i, unreachable, failed)
		}
	}
	if failed[flooder] || unreachable[flooder] {
		t.Fatalf("the flooder, heard throughout, was judged: %v %v", unreachable, failed)
	}
}

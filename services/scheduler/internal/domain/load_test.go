package domain

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/btree"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"

	"github.com/loom-ml/loom/services/scheduler/internal/domain/views"
)

// loadEach is Load as it was before its bulk paths: every record through
// putNode, putJob and putRun, one at a time, as Commit adds them, then each
// run's job mirrored again. The bulk paths must leave exactly its state.
func (s *State) loadEach(snap Snapshot) {
	for _, c := range snap.Clusters {
		s.clusters[c.Name] = c
	}
	for _, n := range snap.Nodes {
		s.putNode(n.Name, n)
	}
	for _, a := range snap.Arrays {
		s.arrays[a.Name] = a
	}
	for _, j := range snap.Jobs {
		s.withTemplate(j)
		s.putJob(j.Name(), j)
	}
	for _, r := range snap.Runs {
		s.putRun(r.Key(), r)
	}
	for _, r := range snap.Runs {
		s.mirrorJob(r)
	}
	for _, u := range snap.Usage {
		s.usage[u.Key] = u
	}
	s.LoadAssocLimits(snap.Assocs)
}

// secondCluster returns snap's records moved to cluster c2 in project p2
// (every name and reference renamed), for a snapshot of two clusters.
func secondCluster(snap Snapshot) Snapshot {
	const c2 = "projects/p2/clusters/c2"
	job := func(name string) string {
		if name == "" {
			return ""
		}
		return strings.Replace(name, "projects/default/", "projects/p2/", 1)
	}
	node := func(name string) string { return strings.Replace(name, cl, c2, 1) }
	var out Snapshot
	for _, c := range snap.Clusters {
		cc := *c
		cc.Name = c2
		out.Clusters = append(out.Clusters, &cc)
	}
	for _, n := range snap.Nodes {
		nn := *n
		nn.Name, nn.Cluster = node(n.Name), c2
		out.Nodes = append(out.Nodes, &nn)
	}
	for _, j := range snap.Jobs {
		jj := *j
		jj.Job = proto.Clone(j.Job).(*loomv1.Job)
		jj.Job.Name, jj.Job.Cluster = job(j.Job.Name), c2
		out.Jobs = append(out.Jobs, &jj)
	}
	for _, r := range snap.Runs {
		rr := r.clone()
		rr.Job, rr.Cluster, rr.PreemptBy = job(r.Job), c2, job(r.PreemptBy)
		for i, n := range rr.Nodes {
			rr.Nodes[i] = node(n)
		}
		rr.GPUs, rr.Steps = map[string][]int32{}, map[string]Step{}
		for n, g := range r.GPUs {
			rr.GPUs[node(n)] = g
		}
		for n, st := range r.Steps {
			rr.Steps[node(n)] = st
		}
		out.Runs = append(out.Runs, rr)
	}
	for _, a := range snap.Arrays {
		aa := *a
		aa.Name, aa.Cluster = job(a.Name), c2
		aa.Tasks = make([]string, len(a.Tasks))
		for i, t := range a.Tasks {
			aa.Tasks[i] = job(t)
		}
		if a.Template != nil {
			aa.Template = proto.Clone(a.Template).(*loomv1.Job)
			aa.Template.Name, aa.Template.Cluster = job(a.Template.Name), c2
		}
		out.Arrays = append(out.Arrays, &aa)
	}
	return out
}

// interleave returns a's and b's records of each kind alternately.
func interleave(a, b Snapshot) Snapshot {
	mix := func(x, y any) any {
		xv, yv := reflect.ValueOf(x), reflect.ValueOf(y)
		out := reflect.MakeSlice(xv.Type(), 0, xv.Len()+yv.Len())
		for i := range max(xv.Len(), yv.Len()) {
			if i < xv.Len() {
				out = reflect.Append(out, xv.Index(i))
			}
			if i < yv.Len() {
				out = reflect.Append(out, yv.Index(i))
			}
		}
		return out.Interface()
	}
	return Snapshot{
		Clusters: mix(a.Clusters, b.Clusters).([]*Cluster), Nodes: mix(a.Nodes, b.Nodes).([]*Node),
		Jobs: mix(a.Jobs, b.Jobs).([]*Job), Runs: mix(a.Runs, b.Runs).([]*Run),
		Arrays: mix(a.Arrays, b.Arrays).([]*Array), Usage: append(slices.Clone(a.Usage), b.Usage...),
		Assocs: append(slices.Clone(a.Assocs), b.Assocs...),
	}
}

// sameState fails t unless a and b hold the same records and indexes (their
// configurations and scratch aside), naming the fields that differ.
func sameState(t *testing.T, label string, a, b *State) {
	t.Helper()
	av, bv := reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem()
	for i := range av.NumField() {
		name := av.Type().Field(i).Name
		if name == "cfg" || name == "scratch" {
			continue
		}
		if name == "lists" {
			// B-trees built in another order differ in shape: compare what
			// they hold.
			if al, bl := listsText(a), listsText(b); al != bl {
				t.Errorf("%s: State.lists differs between the bulk load and the load one record at a time:\n%s\nvs\n%s", label, al, bl)
			}
			continue
		}
		// Unexported: compare through DeepEqual of copies holding only
		// this field.
		ac, bc := reflect.New(av.Type()).Elem(), reflect.New(av.Type()).Elem()
		reflect.NewAt(av.Field(i).Type(), ac.Field(i).Addr().UnsafePointer()).Elem().Set(
			reflect.NewAt(av.Field(i).Type(), av.Field(i).Addr().UnsafePointer()).Elem())
		reflect.NewAt(bv.Field(i).Type(), bc.Field(i).Addr().UnsafePointer()).Elem().Set(
			reflect.NewAt(bv.Field(i).Type(), bv.Field(i).Addr().UnsafePointer()).Elem())
		if !reflect.DeepEqual(ac.Interface(), bc.Interface()) {
			t.Errorf("%s: State.%s differs between the bulk load and the load one record at a time", label, name)
		}
	}
}

// listsText renders a state's project lists (listindex.go) in order.
func listsText(s *State) string {
	var b strings.Builder
	for _, p := range slices.Sorted(maps.Keys(s.lists)) {
		for _, t := range []struct {
			name string
			tree *btree.BTreeG[views.ListKey]
		}{{"all", s.lists[p].all}, {"active", s.lists[p].active}} {
			fmt.Fprintf(&b, "%s %s:", p, t.name)
			t.tree.Ascend(func(k views.ListKey) bool { fmt.Fprintf(&b, " %s", k); return true })
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// changeText renders what a pass decided: its events, decisions and
// reservations.
func changeText(c *Change) string {
	var b strings.Builder
	for _, e := range c.Emits {
		p, _ := prototext.MarshalOptions{}.Marshal(e.Payload)
		fmt.Fprintf(&b, "emit %s %s %s %s\n", e.Key, e.Subject, proto.MessageName(e.Payload), strings.Join(strings.Fields(string(p)), " "))
	}
	for _, d := range c.Decisions {
		fmt.Fprintf(&b, "decision %s %q %d %q", d.Job, d.Reason, d.Nodes, d.Note)
		for _, k := range slices.Sorted(maps.Keys(d.Filtered)) {
			fmt.Fprintf(&b, " %s=%d", k, d.Filtered[k])
		}
		b.WriteByte('\n')
	}
	for _, r := range c.Reservations {
		fmt.Fprintf(&b, "reservation %s %s %s %v %v\n", r.Cluster, r.Job, r.Start.Format(time.RFC3339Nano), r.Unbounded, r.Nodes)
	}
	return b.String()
}

// TestBulkLoadMatchesEach loads snapshots through Load (its bulk paths) and
// one record at a time (loadEach, Load as it was), and checks both states
// are the same (every record, index, counter and version) and decide the
// same in passes at several instants: big and random states, one cluster
// and two interleaved (the per-cluster queues), into an empty state and
// into one with nodes already (jobs and runs in bulk, nodes one at a time).
func TestBulkLoadMatchesEach(t *testing.T) {
	t.Parallel()
	type source struct {
		name string
		s    *State
		now  time.Time
	}
	var sources []source
	big, now := benchCluster(200, 3000, 0.9, 7)
	big.Commit(big.Schedule(now))
	sources = append(sources, source{"bench", big, now})
	for seed := uint64(1); seed <= 6; seed++ {
		h := randomFeatures(t, seed, 200, nil)
		sources = append(sources, source{"random" + strconv.Itoa(int(seed)), h.s, h.now})
	}
	for _, src := range sources {
		snap := src.s.Snapshot()
		for _, c := range []struct {
			name string
			snap Snapshot
		}{{"one cluster", snap}, {"two clusters", interleave(snap, secondCluster(snap))}} {
			label := src.name + ", " + c.name
			bulk, each := NewState(src.s.Config()), NewState(src.s.Config())
			bulk.Restore(c.snap.Copy())
			each.loadEach(c.snap.Copy())
			if len(bulk.jobs) != len(c.snap.Jobs) || len(bulk.runs) != len(c.snap.Runs) || len(bulk.nodes) != len(c.snap.Nodes) {
				t.Fatalf("%s: loaded %d jobs, %d runs, %d nodes of %d, %d, %d", label, len(bulk.jobs), len(bulk.runs), len(bulk.nodes),
					len(c.snap.Jobs), len(c.snap.Runs), len(c.snap.Nodes))
			}
			sameState(t, label, bulk, each)
			// Nodes first, as CycleState loads: jobs and runs in bulk into
			// a state with nodes.
			withNodes := NewState(src.s.Config())
			withNodes.Load(c.snap.Copy().Clusters, c.snap.Copy().Nodes, nil, nil, nil, nil)
			rest := c.snap.Copy()
			withNodes.Load(nil, nil, rest.Jobs, rest.Runs, rest.Arrays, rest.Usage)
			withNodes.LoadAssocLimits(rest.Assocs)
			sameState(t, label+", nodes first", withNodes, each)
			for step, d := range []time.Duration{time.Second, time.Minute, time.Hour, 5 * time.Hour} {
				at := src.now.Add(d)
				got, want := bulk.Schedule(at), each.Schedule(at)
				if g, w := changeText(got), changeText(want); g != w {
					t.Fatalf("%s, pass %d: the bulk-loaded state decides otherwise\n got  %.2000s\n want %.2000s", label, step, g, w)
				}
				bulk.Commit(got)
				each.Commit(want)
			}
		}
	}
}

// TestLoadDuplicateRecords checks Load of records that name one job, run or
// node twice keeps the later one, as one at a time does (the bulk paths
// step aside).
func TestLoadDuplicateRecords(t *testing.T) {
	t.Parallel()
	s, now := benchCluster(20, 200, 0.9, 3)
	snap := s.Snapshot()
	dup := snap.Copy()
	extra := snap.Copy()
	dup.Nodes = append(dup.Nodes, extra.Nodes[0])
	dup.Jobs = append(dup.Jobs, extra.Jobs[:5]...)
	dup.Runs = append(dup.Runs, extra.Runs[0])
	bulk, each := NewState(s.Config()), NewState(s.Config())
	bulk.Restore(dup)
	each.loadEach(dup.Copy())
	if len(bulk.jobs) != len(snap.Jobs) || len(bulk.runs) != len(snap.Runs) || len(bulk.nodes) != len(snap.Nodes) {
		t.Fatalf("loaded %d jobs, %d runs, %d nodes, want %d, %d, %d", len(bulk.jobs), len(bulk.runs), len(bulk.nodes),
			len(snap.Jobs), len(snap.Runs), len(snap.Nodes))
	}
	if bulk.jobs[extra.Jobs[0].Name()] != extra.Jobs[0] || bulk.nodes[extra.Nodes[0].Name] != extra.Nodes[0] {
		t.Errorf("a record given twice: the first one kept")
	}
	sameState(t, "duplicates", bulk, each)
	if g, w := changeText(bulk.Schedule(now.Add(time.Minute))), changeText(each.Schedule(now.Add(time.Minute))); g != w {
		t.Fatalf("duplicates: the passes differ\n got  %.2000s\n want %.2000s", g, w)
	}
}

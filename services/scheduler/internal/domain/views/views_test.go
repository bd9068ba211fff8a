package views

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/clusterspec"
	"github.com/loom-ml/loom/libs/paging"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler/internal/domain/place"
)

// fakeJobs is a JobSource over stored resources; its viewer marks the copies
// it serves so that the test sees views, not records.
type fakeJobs map[string]*loomv1.Job

func (f fakeJobs) ResolveJobName(name string) string { return name }
func (f fakeJobs) EachJob(fn func(*loomv1.Job)) {
	for _, j := range f {
		fn(j)
	}
}
func (f fakeJobs) ProjectJobs(project string, active bool, after ListKey, first, desc bool, fn func(*loomv1.Job) bool) {
	var js []*loomv1.Job
	for _, j := range f {
		if strings.HasPrefix(j.GetName(), project+"/jobs/") && (!active || !j.GetState().Terminal()) &&
			(first || (!desc && after.Less(KeyOf(j))) || (desc && KeyOf(j).Less(after))) {
			js = append(js, j)
		}
	}
	slices.SortFunc(js, func(a, b *loomv1.Job) int { return KeyOf(a).Compare(KeyOf(b)) })
	if desc {
		slices.Reverse(js)
	}
	for _, j := range js {
		if !fn(j) {
			return
		}
	}
}
func (f fakeJobs) JobViewer(time.Time) func(string) *loomv1.Job {
	return func(name string) *loomv1.Job {
		if j := f[name]; j != nil {
			return &loomv1.Job{Name: j.GetName(), JobId: j.GetJobId(), Placement: "viewed"}
		}
		return nil
	}
}

func TestListPageFiltersSortsAndPages(t *testing.T) {
	t.Parallel()
	src := fakeJobs{}
	for _, id := range []string{"3", "10", "2", "7"} {
		n := "projects/p/jobs/" + id
		src[n] = &loomv1.Job{Name: n, JobId: id, User: "ada", Command: []string{"/bin/train"}}
	}
	src["projects/p/jobs/7"].User = "bob"
	f := JobFilter{Users: []string{"ada"}, Names: []string{"train"}}
	var got []string
	after := ""
	for range 4 {
		page, next := ListPage(src, f, after, 2, time.Time{})
		for _, j := range page {
			if j.GetPlacement() != "viewed" {
				t.Fatalf("page holds a record, not a view: %v", j)
			}
			got = append(got, j.GetJobId())
		}
		if after = next; next == "" {
			break
		}
	}
	if !slices.Equal(got, []string{"2", "3", "10"}) {
		t.Fatalf("pages: %v, want ada's jobs in submission order [2 3 10]", got)
	}
	if all := List(src, JobFilter{JobIDs: []string{"7"}}, time.Time{}); len(all) != 1 || all[0].GetJobId() != "7" {
		t.Fatalf("List by id: %v", all)
	}
	if Job(src, "projects/p/jobs/99", time.Time{}) != nil {
		t.Fatal("Job of an unknown name is not nil")
	}
}

func TestKeepArrayIDsAndActive(t *testing.T) {
	t.Parallel()
	j := &loomv1.Job{JobId: "12", ArrayJobId: "10", ArrayTaskId: 4, State: loomv1.JobState_COMPLETED}
	for _, id := range []string{"12", "10", "10_4"} {
		if f := (JobFilter{JobIDs: []string{id}}); !f.Keep(j) {
			t.Errorf("JobIDs %q drops task 10_4 (job 12)", id)
		}
	}
	if f := (JobFilter{JobIDs: []string{"10_3"}}); f.Keep(j) {
		t.Error("JobIDs 10_3 keeps task 10_4")
	}
	if f := (JobFilter{ActiveOnly: true}); f.Keep(j) {
		t.Error("ActiveOnly keeps a completed job")
	}
	if SlurmJobName(&loomv1.Job{}) != "sbatch" {
		t.Error("a script's name is not sbatch")
	}
}

func TestExplainOrdersByCount(t *testing.T) {
	t.Parallel()
	got := Explain(12, map[string]int{"Excluded": 1, "InsufficientGPUs": 8, "NodeDrained": 3}, "preempting 1 job(s)")
	if want := "12 nodes filtered: InsufficientGPUs 8, NodeDrained 3, Excluded 1; preempting 1 job(s)"; got != want {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	if got := Explain(0, nil, "waiting"); got != "waiting" {
		t.Fatalf("note alone: %q", got)
	}
}

type fakeNodes ClusterTable

func (f fakeNodes) NodeTable(cluster string) (ClusterTable, bool) {
	return ClusterTable(f), cluster == "c"
}

func TestSlurmNodesStates(t *testing.T) {
	t.Parallel()
	node := func(host string, gpus int32) *place.Node {
		return &place.Node{Name: "nodes/" + host, Hostname: host, GPUs: gpus, State: loomv1.Node_READY}
	}
	tab := fakeNodes{Schedulable: true, Partitions: []Partition{{Name: "gpu", Default: true}}, Nodes: []NodeRow{
		{View: place.NodeView{Node: node("a", 8), Parts: 1, FreeGPUs: 8}},
		{View: place.NodeView{Node: node("b", 8), Parts: 1, FreeGPUs: 0, Runs: 1}},
		{View: place.NodeView{Node: node("c", 8), Parts: 1, FreeGPUs: 4, Runs: 1}},
		{View: place.NodeView{Node: node("d", 8), Parts: 1}, Down: true, DownReason: "node d down: unhealthy"},
		{View: place.NodeView{Node: &place.Node{Hostname: "login", Role: clusterspec.RoleLogin}, Parts: 1}},
	}}
	var states []loomv1.SlurmNode_State
	for _, n := range SlurmNodes(tab, "c") {
		states = append(states, n.GetState())
	}
	want := []loomv1.SlurmNode_State{loomv1.SlurmNode_IDLE, loomv1.SlurmNode_ALLOCATED, loomv1.SlurmNode_MIXED, loomv1.SlurmNode_DOWN}
	if !slices.Equal(states, want) {
		t.Fatalf("states %v, want %v", states, want)
	}
	if r := SlurmNodes(tab, "c")[3].GetReason(); r != "unhealthy" {
		t.Fatalf("down reason %q", r)
	}
	ps := Partitions(tab, "c")
	if len(ps) != 1 || ps[0].GetTotalGpus() != 32 || ps[0].GetAllocGpus() != 32-12 || ps[0].GetMaxTime() != "UNLIMITED" || len(ps[0].GetNodes()) != 4 {
		t.Fatalf("partitions: %v", ps)
	}
	if SlurmNodes(tab, "other") != nil || Partitions(tab, "other") != nil {
		t.Fatal("an unknown cluster has rows")
	}
}

// TestSlurmNodesHealthStates: the states health's verdicts and repairs show
// in sinfo, with health's reason, who set it and when.
func TestSlurmNodesHealthStates(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)
	node := func(host string, st loomv1.Node_State) *place.Node {
		return &place.Node{Name: "nodes/" + host, Hostname: host, GPUs: 8, State: st}
	}
	xid := NodeHealth{Out: true, Reason: "Xid 79: GPU has fallen off the bus", SetBy: "loom-health", Time: at}
	drain, reboot, issued := xid, xid, xid
	drain.Drain, reboot.RebootRequested, issued.RebootIssued = true, true, true
	tab := fakeNodes{Schedulable: true, Partitions: []Partition{{Name: "gpu", Default: true}}, Nodes: []NodeRow{
		{View: place.NodeView{Node: node("a", loomv1.Node_READY), Parts: 1, FreeGPUs: 4, Runs: 1}, Health: drain, Down: true},
		{View: place.NodeView{Node: node("b", loomv1.Node_READY), Parts: 1, FreeGPUs: 8}, Health: drain, Down: true},
		{View: place.NodeView{Node: node("c", loomv1.Node_READY), Parts: 1, FreeGPUs: 8}, Health: reboot, Down: true},
		{View: place.NodeView{Node: node("d", loomv1.Node_REBOOTING), Parts: 1}, Health: issued, Down: true},
		{View: place.NodeView{Node: node("e", loomv1.Node_DOWN), Parts: 1}, Health: xid, Down: true, DownReason: "node e down: x"},
	}}
	want := []loomv1.SlurmNode_State{loomv1.SlurmNode_DRAINING, loomv1.SlurmNode_DRAINED, loomv1.SlurmNode_REBOOT_REQUESTED,
		loomv1.SlurmNode_REBOOT_ISSUED, loomv1.SlurmNode_DOWN}
	for i, n := range SlurmNodes(tab, "c") {
		if n.GetState() != want[i] || n.GetReason() != xid.Reason || n.GetReasonUser() != "loom-health" || !n.GetReasonTime().AsTime().Equal(at) {
			t.Fatalf("node %s: %v %q by %q at %v, want %v with health's reason", n.GetHostname(), n.GetState(), n.GetReason(),
				n.GetReasonUser(), n.GetReasonTime(), want[i])
		}
	}
}

// TestListPageMatchesASortOfEveryJob: ListPage's pages (one pass with a
// bounded heap) are exactly those of sorting every selected job by
// paging.JobKey and cutting after the key: for random jobs (ids numeric,
// not numeric, equal between projects), filters, page sizes and keys,
// including keys the scheduler never writes.
func TestListPageMatchesASortOfEveryJob(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 9))
	for round := range 200 {
		src := fakeJobs{}
		for i := range 1 + rng.IntN(60) {
			id := strconv.Itoa(rng.IntN(40))
			switch rng.IntN(8) {
			case 0:
				id = "x" + id
			case 1:
				id = ""
			}
			name := fmt.Sprintf("projects/p%d/jobs/%s-%d", rng.IntN(2), id, i)
			src[name] = &loomv1.Job{Name: name, JobId: id, User: []string{"a", "b"}[rng.IntN(2)],
				State: []loomv1.JobState{loomv1.JobState_PENDING, loomv1.JobState_RUNNING, loomv1.JobState_COMPLETED}[rng.IntN(3)]}
		}
		f := JobFilter{}
		if rng.IntN(2) == 0 {
			f.Project = "projects/p1"
		}
		if rng.IntN(3) == 0 {
			f.Users = []string{"a"}
		}
		f.ActiveOnly = rng.IntN(2) == 0
		if rng.IntN(3) == 0 {
			f.JobIDs = []string{strconv.Itoa(rng.IntN(40)), strconv.Itoa(rng.IntN(40)) + "_1"}
			if rng.IntN(4) == 0 {
				f.JobIDs = append(f.JobIDs, "x3")
			}
		}
		var want []string
		src.EachJob(func(j *loomv1.Job) {
			if f.Keep(j) {
				want = append(want, paging.JobKey(j))
			}
		})
		slices.Sort(want)
		afters := []string{"", "garbage", "0000", "00000000000000000012", "00000000000000000012 ", "00000000000000000012 projects/p1/jobs/12-9",
			"0000000000000000001x", "99999999999999999999 z", strings.Repeat("9", 25)}
		for _, k := range want {
			afters = append(afters, k, k[:rng.IntN(len(k))])
		}
		for _, after := range afters {
			size := 1 + rng.IntN(12)
			page, next := ListPage(src, f, after, size, time.Time{})
			i, _ := slices.BinarySearch(want, after)
			if i < len(want) && want[i] == after {
				i++
			}
			exp := want[i:min(len(want), i+size)]
			var got []string
			for _, j := range page {
				got = append(got, paging.JobKey(j))
			}
			if !slices.Equal(got, exp) {
				t.Fatalf("round %d, after %q, size %d: got %q, want %q", round, after, size, got, exp)
			}
			wantNext := ""
			if i+size < len(want) {
				wantNext = exp[len(exp)-1]
			}
			if next != wantNext {
				t.Fatalf("round %d, after %q, size %d: next %q, want %q", round, after, size, next, wantNext)
			}
		}
	}
}

// TestListPageScansABoundedNumber: a filter that leaves out most of a
// project's jobs gets short pages, each after at most MaxScan jobs tested,
// with a key to go on from; paging on lists every selected job once.
func TestListPageScansABoundedNumber(t *testing.T) {
	t.Parallel()
	src := fakeJobs{}
	mine := map[int]bool{5: true, MaxScan + 7: true, 2*MaxScan + 100: true}
	for i := 1; i <= 2*MaxScan+200; i++ {
		name := fmt.Sprintf("projects/p/jobs/%d", i)
		u := "others"
		if mine[i] {
			u = "me"
		}
		src[name] = &loomv1.Job{Name: name, JobId: strconv.Itoa(i), User: u, State: loomv1.JobState_PENDING}
	}
	var got []string
	after, pages := "", 0
	for {
		page, next := ListPage(src, JobFilter{Project: "projects/p", Users: []string{"me"}}, after, 100, time.Time{})
		for _, j := range page {
			got = append(got, j.GetJobId())
		}
		if pages++; next == "" || pages > 10 {
			break
		}
		after = next
	}
	if want := []string{"5", strconv.Itoa(MaxScan + 7), strconv.Itoa(2*MaxScan + 100)}; !slices.Equal(got, want) || pages != 3 {
		t.Errorf("%d pages listing %v, want 3 pages (each at most %d jobs tested) listing %v", pages, got, MaxScan, want)
	}
}

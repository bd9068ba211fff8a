package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// watchView is what a WatchChanges client holds: per collection, each
// resource by name, as the events told it.
type watchView struct {
	mu     sync.Mutex
	items  map[string]map[string]proto.Message
	synced bool
	names  map[string]bool // every name an event carried
	err    error           // the stream's end
}

// apply takes one event into the view.
func (v *watchView) apply(ev *loomv1.ChangeEvent) {
	v.mu.Lock()
	defer v.mu.Unlock()
	switch ev.GetType() {
	case loomv1.ChangeEvent_SYNCED:
		v.synced = true
	case loomv1.ChangeEvent_RESYNC:
		v.items, v.synced = map[string]map[string]proto.Message{}, false
	case loomv1.ChangeEvent_CHANGED:
		if v.items[ev.GetCollection()] == nil {
			v.items[ev.GetCollection()] = map[string]proto.Message{}
		}
		var m proto.Message
		switch r := ev.GetResource().(type) {
		case *loomv1.ChangeEvent_Job:
			m = r.Job
		case *loomv1.ChangeEvent_Cluster:
			m = r.Cluster
		case *loomv1.ChangeEvent_Node:
			m = r.Node
		}
		v.items[ev.GetCollection()][ev.GetName()] = m
		v.names[ev.GetName()] = true
	case loomv1.ChangeEvent_DELETED:
		delete(v.items[ev.GetCollection()], ev.GetName())
		v.names[ev.GetName()] = true
	}
}

// follow opens a watch and applies its events to a new view until ctx ends.
func follow(t *testing.T, ctx context.Context, conn *grpc.ClientConn, req *loomv1.WatchChangesRequest) *watchView {
	t.Helper()
	stream, err := loomv1.NewChangeServiceClient(conn).WatchChanges(ctx, req)
	if err != nil {
		t.Fatalf("WatchChanges: %v", err)
	}
	v := &watchView{items: map[string]map[string]proto.Message{}, names: map[string]bool{}}
	go func() {
		for {
			ev, err := stream.Recv()
			if err != nil {
				v.mu.Lock()
				v.err = err
				v.mu.Unlock()
				return
			}
			v.apply(ev)
		}
	}()
	return v
}

// watchEvents opens a watch and returns next, which waits for the event
// match accepts, passing over others, and returns how long it waited. Its
// deadline (wait) is far below the tests' hour-long refresh, so what it
// sees came from a feed.
func watchEvents(t *testing.T, ctx context.Context, conn *grpc.ClientConn, req *loomv1.WatchChangesRequest) func(what string, match func(*loomv1.ChangeEvent) bool) time.Duration {
	t.Helper()
	stream, err := loomv1.NewChangeServiceClient(conn).WatchChanges(ctx, req)
	if err != nil {
		t.Fatalf("WatchChanges: %v", err)
	}
	events := make(chan *loomv1.ChangeEvent, 64)
	go func() {
		defer close(events)
		for {
			ev, err := stream.Recv()
			if err != nil {
				return
			}
			events <- ev
		}
	}()
	return func(what string, match func(*loomv1.ChangeEvent) bool) time.Duration {
		t.Helper()
		start := time.Now()
		deadline := time.After(wait)
		for {
			select {
			case ev, ok := <-events:
				if !ok {
					t.Fatalf("%s: the watch ended", what)
				}
				if match(ev) {
					return time.Since(start)
				}
			case <-deadline:
				t.Fatalf("%s: not on the watch within %s (the refresh is an hour away)", what, wait)
			}
		}
	}
}

// sameAs reports how the view's collection differs from a list's items
// ("" when it holds exactly them, each equal).
func (v *watchView) sameAs(col string, list []proto.Message, name func(proto.Message) string) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.err != nil {
		return "the watch ended: " + v.err.Error()
	}
	if !v.synced {
		return "not synced yet"
	}
	held := v.items[col]
	if len(held) != len(list) {
		return fmt.Sprintf("%s: the watch holds %d, the list %d", col, len(held), len(list))
	}
	for _, m := range list {
		if got, ok := held[name(m)]; !ok || !proto.Equal(got, m) {
			return fmt.Sprintf("%s: %s is %v in the watch, %v in the list", col, name(m), got, m)
		}
	}
	return ""
}

func watchJob(id, user string, st loomv1.JobState) *loomv1.Job {
	return &loomv1.Job{Name: project + "/jobs/" + id, JobId: id, Cluster: cluster1, User: user, State: st, NodeCount: 1}
}

// TestWatchChangesShowsWhatListsShow: what a watch holds (its initial state
// and every change after it applied) is what the list RPCs return to the
// same caller, PrivateData included, after job changes (from the job
// feed), a job gone, and a cluster change (from the change feed: the
// refresh is an hour here).
func TestWatchChangesShowsWhatListsShow(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.PrivateData = "jobs"; c.ChangeRefresh = time.Hour })
	ctx := testkit.Context(t, 3*wait)
	h.w.setJob(watchJob("1", "ana", loomv1.JobState_PENDING))
	h.w.setJob(watchJob("2", "bob", loomv1.JobState_RUNNING))
	h.w.setJob(watchJob("4", "ana", loomv1.JobState_PENDING))
	ana := h.as(t, "ana")
	v := follow(t, ctx, ana, &loomv1.WatchChangesRequest{Project: project, Collections: []string{"jobs", "clusters,nodes"}})

	jobsOf := func() []proto.Message {
		r, err := loomv1.NewJobServiceClient(ana).ListJobs(ctx, &loomv1.ListJobsRequest{Parent: project, PageSize: 1000})
		if err != nil {
			t.Fatalf("ListJobs: %v", err)
		}
		out := []proto.Message{}
		for _, j := range r.GetJobs() {
			out = append(out, j)
		}
		return out
	}
	clustersOf := func() []proto.Message {
		r, err := loomv1.NewClusterServiceClient(ana).ListClusters(ctx, &loomv1.ListClustersRequest{Parent: project})
		if err != nil {
			t.Fatalf("ListClusters: %v", err)
		}
		out := []proto.Message{}
		for _, c := range r.GetClusters() {
			out = append(out, c)
		}
		return out
	}
	nodesOf := func() []proto.Message {
		r, err := loomv1.NewNodeServiceClient(ana).ListNodes(ctx, &loomv1.ListNodesRequest{Parent: cluster1})
		if err != nil {
			t.Fatalf("ListNodes: %v", err)
		}
		out := []proto.Message{}
		for _, n := range r.GetNodes() {
			out = append(out, n)
		}
		return out
	}
	jobName := func(m proto.Message) string { return m.(*loomv1.Job).GetName() }
	clusterName := func(m proto.Message) string { return m.(*loomv1.Cluster).GetName() }
	nodeName := func(m proto.Message) string { return cluster1 + "/nodes/" + m.(*loomv1.Node).GetHostname() }
	same := func(what string) {
		t.Helper()
		last := ""
		testkit.WaitFor(t, 2*wait, what, func() (bool, error) {
			last = v.sameAs("jobs", jobsOf(), jobName) + v.sameAs("clusters", clustersOf(), clusterName) + v.sameAs("nodes", nodesOf(), nodeName)
			return last == "", nil
		})
		if last != "" {
			t.Fatalf("%s: %s", what, last)
		}
	}
	same("the watch's initial state is what the lists show")
	if n := len(jobsOf()); n != 2 {
		t.Fatalf("ana lists %d jobs, want her 2 (PrivateData)", n)
	}

	// Job changes come through the feed, as the scheduler sends them; a
	// job gone from the scheduler (4) is gone from the list.
	prod := bus.NewProducer([]string{h.broker})
	prod.SetSigner(testkit.SignerAs("scheduler"))
	defer prod.Close()
	change := func(j *loomv1.Job) {
		h.w.setJob(j)
		ev := envelope.New(topics.JobEvents, cluster1, "loom/scheduler", &eventsv1.JobChanged{Job: j, Attempt: 1})
		ev.Subject = j.GetName()
		if err := prod.Publish(ctx, ev); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	change(watchJob("1", "ana", loomv1.JobState_RUNNING))
	change(watchJob("3", "ana", loomv1.JobState_PENDING))
	change(watchJob("2", "bob", loomv1.JobState_COMPLETED))
	h.w.mu.Lock()
	delete(h.w.jobs, project+"/jobs/4")
	h.w.mu.Unlock()
	c := c1()
	c.Status.ReadyNodes = 2
	h.w.setCluster(c)
	testkit.PublishAs(t, h.broker, "provisioner", envelope.New(topics.ClusterEvents, cluster1, "loom/provisioner", &eventsv1.ClusterChanged{Cluster: c}))
	same("after the changes, the watch holds what the lists show")
	v.mu.Lock()
	defer v.mu.Unlock()
	if j, _ := v.items["jobs"][project+"/jobs/1"].(*loomv1.Job); j.GetState() != loomv1.JobState_RUNNING {
		t.Errorf("job 1 in the watch: %v, want RUNNING", j)
	}
	if _, ok := v.items["jobs"][project+"/jobs/4"]; ok {
		t.Error("job 4, gone, is still in the watch")
	}
	if v.names[project+"/jobs/2"] {
		t.Error("ana's watch told of bob's job 2, which PrivateData hides from her")
	}
	if cl, _ := v.items["clusters"][cluster1].(*loomv1.Cluster); cl.GetStatus().GetReadyNodes() != 2 {
		t.Errorf("cluster in the watch: %v, want 2 ready nodes", cl)
	}
}

// firstEvent opens a watch as conn's caller and returns its first event,
// or the error the stream ends with; cancel closes it.
func firstEvent(ctx context.Context, conn *grpc.ClientConn, req *loomv1.WatchChangesRequest) (ev *loomv1.ChangeEvent, cancel func(), err error) {
	ctx, cancel = context.WithCancel(ctx)
	stream, err := loomv1.NewChangeServiceClient(conn).WatchChanges(ctx, req)
	if err != nil {
		return nil, cancel, err
	}
	ev, err = stream.Recv()
	return ev, cancel, err
}

// TestWatchChangesRefusesAndStreamsOverREST: a collection the gateway does
// not watch, too many collections, a project the caller has no role in,
// and watches past the per-principal and per-gateway caps are refused,
// each naming the field or the limit; over REST the watch streams one
// JSON object a line, each change as it happens.
func TestWatchChangesRefusesAndStreamsOverREST(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.Limits.MaxWatches = 2; c.Limits.MaxChangeWatches = 3 })
	ctx := testkit.Context(t, 3*wait)
	vic := h.as(t, "vic")
	req := func(cols ...string) *loomv1.WatchChangesRequest {
		return &loomv1.WatchChangesRequest{Project: project, Collections: cols}
	}

	_, cancel, err := firstEvent(ctx, vic, req("jobs", "bogus"))
	cancel()
	wantCode(t, "an unknown collection", err, codes.InvalidArgument, "collections", `"bogus"`, "nodes")
	_, cancel, err = firstEvent(ctx, vic, req("jobs", "nodes", "clusters", "models", "customJobs", "nodeHealth", "slurmNodes", "trainingPipelines", "hyperparameterTuningJobs", "jobs"))
	cancel()
	wantCode(t, "ten collections", err, codes.InvalidArgument, "collections", "at most 9")
	_, cancel, err = firstEvent(ctx, vic, req("jobs,nodes,clusters,models,customJobs,nodeHealth,slurmNodes,trainingPipelines,hyperparameterTuningJobs"))
	cancel()
	if err != nil {
		t.Errorf("all nine collections, comma-separated: %v", err)
	}
	_, cancel, err = firstEvent(ctx, vic, req())
	cancel()
	wantCode(t, "no collection", err, codes.InvalidArgument, "collections")
	_, cancel, err = firstEvent(ctx, h.as(t, "oz"), req("jobs"))
	cancel()
	wantCode(t, "a project the caller has no role in", err, codes.NotFound, "default")

	// Caps: vic may hold 2 (-max-watches), the gateway 3 (-max-change-watches).
	var open []func()
	defer func() {
		for _, c := range open {
			c()
		}
	}()
	hold := func(who string) {
		t.Helper()
		testkit.WaitFor(t, wait, who+" opens a watch", func() (bool, error) {
			ev, cancel, err := firstEvent(ctx, h.as(t, who), req("clusters"))
			if err != nil {
				cancel()
				return false, nil // an earlier watch may not be counted out yet
			}
			open = append(open, cancel)
			return ev.GetType() == loomv1.ChangeEvent_CHANGED, nil
		})
	}
	hold("vic")
	hold("vic")
	_, cancel, err = firstEvent(ctx, vic, req("clusters"))
	cancel()
	wantCode(t, "vic's third watch", err, codes.ResourceExhausted, "LOOM_GATEWAY_MAX_WATCHES", "2")
	hold("ana")
	_, cancel, err = firstEvent(ctx, h.as(t, "bob"), req("clusters"))
	cancel()
	wantCode(t, "the gateway's fourth watch", err, codes.ResourceExhausted, "LOOM_GATEWAY_MAX_CHANGE_WATCHES", "3")
	for _, c := range open {
		c()
	}
	open = nil

	// REST: refusals as JSON errors, then a stream.
	get := func(who, query string) *http.Response {
		t.Helper()
		r, err := http.NewRequestWithContext(ctx, http.MethodGet, h.restBase+"/v1/"+project+":watchChanges?"+query, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := h.restAs(who).Do(r)
		if err != nil {
			t.Fatalf("GET :watchChanges?%s: %v", query, err)
		}
		return resp
	}
	type line struct {
		Result *struct {
			Type       string          `json:"type"`
			Collection string          `json:"collection"`
			Name       string          `json:"name"`
			Job        json.RawMessage `json:"job"`
		} `json:"result"`
		Error *struct {
			Message  string `json:"message"`
			HTTPCode int    `json:"http_code"`
		} `json:"error"`
	}
	// grpc-gateway answers a stream that fails before its first message
	// with status 200 and an error line, or with the error's status.
	refused := func(what string, resp *http.Response, code int, want string) {
		t.Helper()
		defer resp.Body.Close()
		var l line
		if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		msg, got := "", resp.StatusCode
		if l.Error != nil {
			msg = l.Error.Message
			if l.Error.HTTPCode != 0 {
				got = l.Error.HTTPCode
			}
		}
		if got != code || !strings.Contains(msg, want) {
			t.Errorf("%s: HTTP %d %q, want %d naming %q", what, got, msg, code, want)
		}
	}
	// vic's and ana's watches closed above are counted out when their
	// handlers return, which a client's cancel does not wait for: a request
	// of vic's is sent again while it is refused for a cap (as hold does).
	getSettled := func(who, query string) *http.Response {
		t.Helper()
		var resp *http.Response
		testkit.WaitFor(t, wait, who+"'s closed watches counted out", func() (bool, error) {
			resp = get(who, query)
			br := bufio.NewReader(resp.Body)
			first, err := br.ReadBytes('\n')
			if err != nil && err != io.EOF {
				resp.Body.Close()
				return false, err
			}
			var l line
			capped := resp.StatusCode == http.StatusTooManyRequests ||
				json.Unmarshal(first, &l) == nil && l.Error != nil && strings.Contains(l.Error.Message, "LOOM_GATEWAY_MAX")
			if capped {
				resp.Body.Close()
				return false, nil
			}
			resp.Body = struct {
				io.Reader
				io.Closer
			}{io.MultiReader(bytes.NewReader(first), br), resp.Body}
			return true, nil
		})
		return resp
	}
	refused("REST, an unknown collection", getSettled("vic", "collections=jobs,bogus"), http.StatusBadRequest, "collections")
	refused("REST, another project", get("oz", "collections=jobs"), http.StatusNotFound, "default")

	h.w.setJob(watchJob("1", "ana", loomv1.JobState_PENDING))
	resp := getSettled("vic", "collections=jobs,clusters")
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("REST watch: HTTP %d", resp.StatusCode)
	}
	lines := make(chan line, 16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 0, 1<<20), 8<<20)
		for sc.Scan() {
			var l line
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Errorf("a line that is not JSON: %q", sc.Text())
				return
			}
			lines <- l
		}
	}()
	next := func(what string) line {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("%s: the REST stream ended", what)
			}
			if l.Error != nil || l.Result == nil {
				t.Fatalf("%s: %+v", what, l.Error)
			}
			return l
		case <-time.After(wait):
			t.Fatalf("%s: nothing within %s", what, wait)
		}
		return line{}
	}
	seen := map[string]string{}
	for l := next("initial state"); l.Result.Type != "SYNCED"; l = next("initial state") {
		if l.Result.Type != "CHANGED" {
			t.Fatalf("initial state: %+v, want CHANGED until SYNCED", l.Result)
		}
		seen[l.Result.Name] = l.Result.Collection
	}
	if seen[project+"/jobs/1"] != "jobs" || seen[cluster1] != "clusters" {
		t.Errorf("initial state over REST: %v, want job 1 and cluster c1", seen)
	}
	// A change reaches the open stream (each event is flushed).
	prod := bus.NewProducer([]string{h.broker})
	prod.SetSigner(testkit.SignerAs("scheduler"))
	defer prod.Close()
	j := watchJob("5", "bob", loomv1.JobState_PENDING)
	h.w.setJob(j)
	ev := envelope.New(topics.JobEvents, cluster1, "loom/scheduler", &eventsv1.JobChanged{Job: j, Attempt: 1})
	ev.Subject = j.GetName()
	if err := prod.Publish(ctx, ev); err != nil {
		t.Fatalf("publish: %v", err)
	}
	l := next("the new job")
	var got loomv1.Job
	if err := json.Unmarshal(l.Result.Job, &struct {
		JobID *string `json:"job_id"`
		User  *string `json:"user"`
	}{&got.JobId, &got.User}); err != nil {
		t.Fatal(err)
	}
	if l.Result.Type != "CHANGED" || l.Result.Name != j.GetName() || got.JobId != "5" || got.User != "bob" {
		t.Errorf("after the submit: %+v (job %s of %s), want job 5 CHANGED in proto field names", l.Result, got.JobId, got.User)
	}
}

// TestWatchChangesFeedsEveryCollection: with the refresh an hour away, a
// cluster created, a CustomJob's change and a node's change reach an open
// watch from the events their owners publish (ClusterChanged,
// CustomJobChanged, NodeChanged), each listed again with the watcher's
// credentials; an event of another project changes nothing in the watch.
func TestWatchChangesFeedsEveryCollection(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.ChangeRefresh = time.Hour })
	ctx := testkit.Context(t, 3*wait)
	ana := h.as(t, "ana")
	next := watchEvents(t, ctx, ana, &loomv1.WatchChangesRequest{Project: project, Collections: []string{"clusters", "customJobs"}})
	next("SYNCED", func(ev *loomv1.ChangeEvent) bool { return ev.GetType() == loomv1.ChangeEvent_SYNCED })
	// Each event as its owner sends it: the provisioner's clusters,
	// training's jobs.
	publish := func(key string, m proto.Message) {
		t.Helper()
		service := "provisioner"
		if _, ok := m.(*eventsv1.CustomJobChanged); ok {
			service = "training"
		}
		ev, err := envelope.Route(key, "loom/"+service, m)
		if err != nil {
			t.Fatal(err)
		}
		testkit.PublishAs(t, h.broker, service, ev)
	}

	const c2 = project + "/clusters/c2"
	h.w.setCluster(&loomv1.Cluster{Name: c2, DisplayName: "fed"})
	publish(c2, &eventsv1.ClusterChanged{Cluster: &loomv1.Cluster{Name: c2}})
	took := next("the new cluster", func(ev *loomv1.ChangeEvent) bool {
		return ev.GetType() == loomv1.ChangeEvent_CHANGED && ev.GetName() == c2
	})
	t.Logf("a created cluster reached the watch %s after its event", took.Round(time.Millisecond))

	// Another project's cluster event lists nothing new for this one; the
	// CustomJob that follows comes next, with nothing before it.
	publish("projects/other/clusters/x", &eventsv1.ClusterChanged{Cluster: &loomv1.Cluster{Name: "projects/other/clusters/x"}})
	cj := &trainingv1.CustomJob{Name: location + "/customJobs/7", DisplayName: "fed", User: "ana", State: trainingv1.JobState_JOB_STATE_RUNNING}
	h.w.setTraining(cj)
	publish(project, &eventsv1.CustomJobChanged{CustomJob: cj})
	var first *loomv1.ChangeEvent
	next("the CustomJob", func(ev *loomv1.ChangeEvent) bool {
		if first == nil {
			first = ev
		}
		return ev.GetType() == loomv1.ChangeEvent_CHANGED && ev.GetName() == cj.GetName()
	})
	if first.GetName() != cj.GetName() {
		t.Errorf("first event after the other project's change: %v, want the CustomJob's", first)
	}

}

// TestWatchChangesFeedsSlurmNodes: with the refresh an hour away, an
// administrator's drain reaches an open watch of slurmNodes from the
// scheduler's SlurmNodeChanged on the job events (here published as the
// scheduler would, once the fake scheduler shows the drain), as the Slurm
// node the list shows; a job's change lists them again too.
func TestWatchChangesFeedsSlurmNodes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.ChangeRefresh = time.Hour })
	ctx := testkit.Context(t, 3*wait)
	setNode := func(n *loomv1.SlurmNode) {
		h.w.mu.Lock()
		defer h.w.mu.Unlock()
		h.w.slurmNodes = []*loomv1.SlurmNode{n}
	}
	setNode(&loomv1.SlurmNode{Hostname: "gpu-0001", Cluster: cluster1, State: loomv1.SlurmNode_IDLE, Gpus: 8})
	next := watchEvents(t, ctx, h.as(t, "ana"), &loomv1.WatchChangesRequest{Project: project, Collections: []string{"slurmNodes"}})
	const name = cluster1 + "/nodes/gpu-0001"
	next("the node listed", func(ev *loomv1.ChangeEvent) bool {
		return ev.GetType() == loomv1.ChangeEvent_CHANGED && ev.GetCollection() == "slurmNodes" && ev.GetName() == name &&
			ev.GetSlurmNode().GetState() == loomv1.SlurmNode_IDLE
	})
	next("SYNCED", func(ev *loomv1.ChangeEvent) bool { return ev.GetType() == loomv1.ChangeEvent_SYNCED })

	if _, err := h.slurm().UpdateSlurmNode(ctx, &loomv1.UpdateSlurmNodeRequest{Cluster: cluster1, Hostname: "gpu-0001",
		State: "DRAIN", Reason: "bad fan"}); err != nil {
		t.Fatalf("UpdateSlurmNode: %v", err)
	}
	// The scheduler's SlurmNodeChanged and JobChanged, signed as it.
	prod := bus.NewProducer([]string{h.broker})
	prod.SetSigner(testkit.SignerAs("scheduler"))
	defer prod.Close()
	publish := func(subject string, m proto.Message) {
		t.Helper()
		ev, err := envelope.Route(cluster1, "loom/scheduler", m)
		if err != nil {
			t.Fatal(err)
		}
		ev.Subject = subject
		if err := prod.Publish(ctx, ev); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	// The scheduler applied it: its list shows the drain, and it says so.
	setNode(&loomv1.SlurmNode{Hostname: "gpu-0001", Cluster: cluster1, State: loomv1.SlurmNode_DRAINED, Gpus: 8, Reason: "bad fan", ReasonUser: "ana"})
	publish(cluster1+"/nodes/gpu-0001", &eventsv1.SlurmNodeChanged{Cluster: cluster1, Hostname: "gpu-0001", State: "DRAIN"})
	next("the drain", func(ev *loomv1.ChangeEvent) bool {
		return ev.GetType() == loomv1.ChangeEvent_CHANGED && ev.GetName() == name &&
			ev.GetSlurmNode().GetState() == loomv1.SlurmNode_DRAINED && ev.GetSlurmNode().GetReason() == "bad fan"
	})

	// A job placed there changes the node's allocation: JobChanged lists
	// the Slurm nodes again.
	setNode(&loomv1.SlurmNode{Hostname: "gpu-0001", Cluster: cluster1, State: loomv1.SlurmNode_ALLOCATED, Gpus: 8, AllocGpus: 8})
	j := watchJob("9", "ana", loomv1.JobState_RUNNING)
	publish(j.GetName(), &eventsv1.JobChanged{Job: j, Attempt: 1})
	next("the allocation", func(ev *loomv1.ChangeEvent) bool {
		return ev.GetType() == loomv1.ChangeEvent_CHANGED && ev.GetName() == name && ev.GetSlurmNode().GetAllocGpus() == 8
	})
}

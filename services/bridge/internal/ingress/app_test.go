package ingress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	publicv1 "github.com/loom-ml/loom/proto/loom/public/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/bridge/internal/cloudevent"
)

// gateway stands in for the gateway in the decision-path tests: it knows
// two keys, answers SubmitJob from a script and, as the real one, returns
// the first call's job for a repeated request_id.
type gateway struct {
	loomv1.UnimplementedJobServiceServer
	loomv1.UnimplementedAuthServiceServer
	mu     sync.Mutex
	calls  int
	errs   []error // returned in turn by SubmitJob, then OK
	always error   // returned by SubmitJob when set
	byRID  map[string]*loomv1.Job
	ids    []string // request ids seen
	nextID int
	// entered, when set, is told of each SubmitJob; hold, when set, is
	// waited for before it answers.
	entered chan struct{}
	hold    chan struct{}
}

func credOf(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("authorization"); len(v) == 1 {
		return strings.TrimPrefix(v[0], "Bearer ")
	}
	return ""
}

func (g *gateway) WhoAmI(ctx context.Context, _ *loomv1.WhoAmIRequest) (*loomv1.Principal, error) {
	switch credOf(ctx) {
	case "loomk_good":
		return &loomv1.Principal{Name: "users/alice", Roles: map[string]string{"projects/default": "user"}}, nil
	case "loomk_other":
		// A member who may not submit: refused by the call, in the project.
		// Roles are keyed by the project's resource name, as the gateway's
		// WhoAmI answers.
		return &loomv1.Principal{Name: "users/mallory", Roles: map[string]string{"projects/default": "viewer"}}, nil
	case "loomk_stranger":
		return &loomv1.Principal{Name: "users/eve", Roles: map[string]string{"projects/elsewhere": "admin"}}, nil
	}
	return nil, status.Error(codes.Unauthenticated, "the API key is not valid")
}

func (g *gateway) SubmitJob(ctx context.Context, req *loomv1.SubmitJobRequest) (*loomv1.Job, error) {
	if g.entered != nil {
		g.entered <- struct{}{}
	}
	if g.hold != nil {
		select {
		case <-g.hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls++
	g.ids = append(g.ids, req.GetRequestId())
	if credOf(ctx) == "loomk_other" {
		return nil, status.Error(codes.PermissionDenied, "users/mallory may not submit jobs in "+req.GetParent())
	}
	if credOf(ctx) == "loomk_stranger" {
		return nil, status.Error(codes.NotFound, req.GetParent()+" not found")
	}
	if g.always != nil {
		return nil, g.always
	}
	if len(g.errs) > 0 {
		err := g.errs[0]
		g.errs = g.errs[1:]
		return nil, err
	}
	if j, ok := g.byRID[req.GetRequestId()]; ok {
		return j, nil
	}
	g.nextID++
	j := &loomv1.Job{Name: req.GetParent() + "/jobs/" + string(rune('0'+g.nextID))}
	g.byRID[req.GetRequestId()] = j
	return j, nil
}

func (g *gateway) state() (calls, jobs int, ids []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls, len(g.byRID), append([]string(nil), g.ids...)
}

// sink collects dead letters and results (the App's injected seams; the
// Kafka ones are tested against the broker below).
type sink struct {
	mu      sync.Mutex
	dead    []deadLetter
	results []*publicv1.IngressResult
	events  []cloudevent.Event
	failRes int // results to fail before accepting
}

type deadLetter struct {
	raw          cloudevent.Raw
	code, reason string
}

func (s *sink) DeadLetter(_ context.Context, raw cloudevent.Raw, code, reason string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dead = append(s.dead, deadLetter{raw, code, reason})
	return nil
}

func (s *sink) publish(_ context.Context, project string, ev cloudevent.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failRes > 0 {
		s.failRes--
		return status.Error(codes.Unavailable, "sink down")
	}
	r := &publicv1.IngressResult{}
	if err := protojson.Unmarshal(ev.Data, r); err != nil {
		return err
	}
	if r.GetProject() != project {
		return status.Errorf(codes.Internal, "published for %q, result of %q", project, r.GetProject())
	}
	s.results = append(s.results, r)
	s.events = append(s.events, ev)
	return nil
}

type fixture struct {
	reg  *prometheus.Registry
	app  *App
	gw   *gateway
	sink *sink
	h    cloudevent.Handler
}

func newFixture(t testing.TB, tune ...func(*Config)) *fixture {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gw := &gateway{byRID: map[string]*loomv1.Job{}}
	srv := grpc.NewServer()
	loomv1.RegisterJobServiceServer(srv, gw)
	loomv1.RegisterAuthServiceServer(srv, gw)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	_, rdb := testkit.Redis(t)
	s := &sink{}
	cfg := Config{Gateway: conn, Store: store.New(rdb, "bridge:"), Results: s.publish, DedupeTTL: time.Hour,
		Backoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond, Kept: 5}
	for _, f := range tune {
		f(&cfg)
	}
	app, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if err := app.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	return &fixture{reg: reg, app: app, gw: gw, sink: s, h: app.Handler(s)}
}

func submit(id, cred string) cloudevent.Delivery {
	return Delivery("kafka:loom.ingress.v1", record(TypePrefix+"SubmitJob",
		`{"parent":"projects/default","job":{"cluster":"projects/default/clusters/c"}}`,
		map[string]string{"ce_id": id, "ce_credential": cred}))
}

func TestHandleAppliesOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := testkit.Context(t, 30*time.Second)
	d := submit("m-1", "loomk_good")
	for range 5 {
		if err := f.h(ctx, d); err != nil {
			t.Fatalf("Handle: %v", err)
		}
	}
	calls, jobs, ids := f.gw.state()
	if calls != 1 || jobs != 1 || ids[0] != RequestID(Key(d)) {
		t.Fatalf("%d calls, %d jobs, request ids %v; want 1, 1, [%s]", calls, jobs, ids, RequestID(Key(d)))
	}
	if len(f.sink.dead) != 0 || len(f.sink.results) != 1 {
		t.Fatalf("%d dead letters, %d results; want 0, 1", len(f.sink.dead), len(f.sink.results))
	}
	r, ev := f.sink.results[0], f.sink.events[0]
	if r.GetOutcome() != publicv1.IngressResult_ACCEPTED || r.GetCode() != "OK" || r.GetResource() != "projects/default/jobs/1" ||
		r.GetPrincipal() != "users/alice" || r.GetProject() != "default" || r.GetMessageId() != "m-1" {
		t.Fatalf("result %v", r)
	}
	if ev.ID != "result-"+Key(d) || ev.Source != "loom/bridge" || ev.Type != "loom.public.v1.IngressResult" || ev.Subject != "m-1" ||
		ev.Extensions[cloudevent.ExtProject] != "default" || ev.Validate(0) != nil {
		t.Fatalf("result event %+v", ev)
	}
	if err := testutil.GatherAndCompare(f.reg, strings.NewReader(`
# HELP loom_bridge_ingress_messages_total Ingress messages handled, by transport and outcome (ACCEPTED, REFUSED, INVALID, FAILED, DUPLICATE).
# TYPE loom_bridge_ingress_messages_total counter
loom_bridge_ingress_messages_total{outcome="ACCEPTED",transport="kafka:loom.ingress.v1"} 1
loom_bridge_ingress_messages_total{outcome="DUPLICATE",transport="kafka:loom.ingress.v1"} 4
`), "loom_bridge_ingress_messages_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(f.reg, "loom_bridge_ingress_seconds"); n != 1 {
		t.Errorf("%d latency series, want 1", n)
	}
	srv := f.app.Server()
	msgs, err := srv.ListIngressMessages(ctx, &loomv1.ListIngressMessagesRequest{Parent: "projects/default"})
	if err != nil || len(msgs.GetMessages()) != 1 || msgs.Messages[0].GetDeliveries() != 5 || msgs.Messages[0].GetOutcome() != OutcomeAccepted {
		t.Fatalf("ListIngressMessages: %v %v", msgs, err)
	}
	ps, err := srv.ListIngressProducers(ctx, &loomv1.ListIngressProducersRequest{Parent: "projects/-"})
	if err != nil || len(ps.GetProducers()) != 1 {
		t.Fatalf("ListIngressProducers: %v %v", ps, err)
	}
	if p := ps.Producers[0]; p.GetReceived() != 1 || p.GetAccepted() != 1 || p.GetDuplicates() != 4 || p.GetPrincipal() != "users/alice" ||
		p.GetSource() != "//pipeline/a" || p.GetProject() != "default" {
		t.Fatalf("producer %v", p)
	}
}

func TestHandleRefusesAndDeadLetters(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := testkit.Context(t, 30*time.Second)
	bad := Delivery("kafka:loom.ingress.v1", record(TypePrefix+"SubmitJob", `{"parent":`, map[string]string{"ce_id": "m-json", "ce_credential": "loomk_good"}))
	// Only m-perm's key is a member of the project it names: the others
	// are filed under no project, and their results withheld.
	cases := []struct {
		d             cloudevent.Delivery
		outcome, code string
		project       string
	}{
		{submit("m-cred", "loomk_wrong"), OutcomeRefused, "UNAUTHENTICATED", ""},
		{submit("m-perm", "loomk_other"), OutcomeRefused, "PERMISSION_DENIED", "default"},
		{bad, OutcomeInvalid, "INVALID_ARGUMENT", ""},
		{submit("m-stranger", "loomk_stranger"), OutcomeInvalid, "NOT_FOUND", ""},
	}
	for i, c := range cases {
		if err := f.h(ctx, c.d); err != nil {
			t.Fatalf("Handle %s: %v", c.d.Event.ID, err)
		}
		if err := f.h(ctx, c.d); err != nil { // a redelivery: not dead-lettered twice
			t.Fatalf("Handle again %s: %v", c.d.Event.ID, err)
		}
		if len(f.sink.dead) != i+1 {
			t.Fatalf("%d dead letters after %d refusals", len(f.sink.dead), i+1)
		}
		dl := f.sink.dead[i]
		var r *publicv1.IngressResult
		for _, res := range f.sink.results {
			if res.GetMessageId() == c.d.Event.ID {
				r = res
			}
		}
		if c.project == "" {
			if r != nil {
				t.Errorf("%s, of no project: result %v published", c.d.Event.ID, r)
			}
			if dl.code != c.code || dl.reason == "" {
				t.Errorf("%s: dead letter %s %q; want %s", c.d.Event.ID, dl.code, dl.reason, c.code)
			}
		} else if dl.code != c.code || dl.reason == "" || r.GetOutcome().String() != c.outcome || r.GetCode() != c.code ||
			r.GetReason() != dl.reason || r.GetProject() != c.project {
			t.Errorf("%s: dead letter %s %q, result %v; want %s %s in %s", c.d.Event.ID, dl.code, dl.reason, r, c.outcome, c.code, c.project)
		}
		if _, ok := dl.raw.Attributes["ce_credential"]; ok || string(dl.raw.Data) != string(c.d.Raw.Data) || dl.raw.Attributes["ce_id"] != c.d.Event.ID {
			t.Errorf("%s: dead letter %v: want the message as it came without its credential", c.d.Event.ID, dl.raw.Attributes)
		}
	}
	if calls, _, _ := f.gw.state(); calls != 2 {
		t.Errorf("%d SubmitJob calls; want 2 (the bad key stops at WhoAmI, bad JSON before any call)", calls)
	}
	// A member of another project naming this one: neither its record nor
	// its result is this project's (checked above: no result at all).
	msgs, err := f.app.Server().ListIngressMessages(ctx, &loomv1.ListIngressMessagesRequest{Parent: "projects/default", Filter: `outcome = "REFUSED"`})
	// A message whose credential is no one's is not the project's to see
	// (anyone may publish naming any project): it is filed under none.
	if err != nil || len(msgs.GetMessages()) != 1 || msgs.Messages[0].GetId() != "m-perm" {
		t.Fatalf("refused messages of the project, newest first: %v %v", msgs, err)
	}
	refused, err := f.app.Server().ListIngressMessages(ctx, &loomv1.ListIngressMessagesRequest{Parent: "projects/-", Filter: `outcome = "REFUSED"`})
	if err != nil || len(refused.GetMessages()) != 2 || refused.Messages[1].GetId() != "m-cred" || refused.Messages[1].GetProject() != "" {
		t.Fatalf("refused messages of every project: %v %v", refused, err)
	}
	// The bad JSON named no project: it is listed with every project's.
	all, err := f.app.Server().ListIngressMessages(ctx, &loomv1.ListIngressMessagesRequest{Parent: "projects/-", Filter: `outcome = "INVALID"`})
	if err != nil || len(all.GetMessages()) != 2 || all.Messages[0].GetId() != "m-stranger" || all.Messages[1].GetId() != "m-json" {
		t.Fatalf("invalid messages of every project: %v %v", all, err)
	}
}

func TestHandleRetriesTransientFailures(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := testkit.Context(t, 30*time.Second)
	unavailable := status.Error(codes.Unavailable, "gateway restarting")

	// Two failures, then OK: decided within one delivery.
	f.gw.errs = []error{unavailable, status.Error(codes.Aborted, "conflict")}
	if err := f.h(ctx, submit("m-1", "loomk_good")); err != nil {
		t.Fatalf("Handle: %v", err)
	}
	if calls, jobs, _ := f.gw.state(); calls != 3 || jobs != 1 {
		t.Fatalf("%d calls, %d jobs; want 3, 1", calls, jobs)
	}

	// The gateway down: the delivery is given back, nothing recorded, and
	// decided once it is up.
	f.gw.mu.Lock()
	f.gw.always = unavailable
	f.gw.mu.Unlock()
	d := submit("m-2", "loomk_good")
	d.Attempt = 50 // Unavailable is retried however often it was delivered
	if err := f.h(ctx, d); err == nil || !strings.Contains(err.Error(), "UNAVAILABLE") {
		t.Fatalf("Handle with the gateway down = %v, want a transient error", err)
	}
	if len(f.sink.dead) != 0 || len(f.sink.results) != 1 {
		t.Fatalf("the undecided message was answered: %d dead, %d results", len(f.sink.dead), len(f.sink.results))
	}
	f.gw.mu.Lock()
	f.gw.always = nil
	f.gw.mu.Unlock()
	if err := f.h(ctx, d); err != nil || len(f.sink.results) != 2 || f.sink.results[1].GetOutcome() != publicv1.IngressResult_ACCEPTED {
		t.Fatalf("Handle once up: %v, results %v", err, f.sink.results)
	}

	// The rate limit: retried, then given back, then after MaxDeliveries
	// decided REFUSED (RESOURCE_EXHAUSTED), dead-lettered.
	f.gw.mu.Lock()
	f.gw.always = status.Error(codes.ResourceExhausted, "users/alice: more than 1 requests a second; slow down and retry: rate limit: resource exhausted")
	f.gw.mu.Unlock()
	d = submit("m-3", "loomk_good")
	d.Attempt = 1
	if err := f.h(ctx, d); err == nil {
		t.Fatal("rate limited on the first delivery: want the delivery given back")
	}
	d.Attempt = DefaultMaxDeliveries
	if err := f.h(ctx, d); err != nil {
		t.Fatalf("rate limited on the last delivery: %v", err)
	}
	if len(f.sink.dead) != 1 || f.sink.dead[0].code != "RESOURCE_EXHAUSTED" || !strings.Contains(f.sink.dead[0].reason, "gave up") {
		t.Fatalf("dead letters %+v", f.sink.dead)
	}

	// Internal: retried a bounded number of times, then FAILED.
	f.gw.mu.Lock()
	f.gw.always = status.Error(codes.Internal, "boom")
	before := f.gw.calls
	f.gw.mu.Unlock()
	if err := f.h(ctx, submit("m-4", "loomk_good")); err != nil {
		t.Fatalf("Handle: %v", err)
	}
	calls, _, _ := f.gw.state()
	if n := calls - before; n != DefaultInternalAttempts || len(f.sink.dead) != 2 || f.sink.dead[1].code != "INTERNAL" ||
		f.sink.results[len(f.sink.results)-1].GetOutcome() != publicv1.IngressResult_FAILED {
		t.Fatalf("%d calls, dead letters %+v", n, f.sink.dead)
	}
}

// A crash between the call and the record (here: the result's destination
// fails, so the message is not acknowledged) applies nothing twice: the
// redelivery calls again with the same request id and gets the first job.
func TestHandleRedeliveryAfterFailureAppliesOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := testkit.Context(t, 30*time.Second)
	f.sink.failRes = 1
	d := submit("m-1", "loomk_good")
	if err := f.h(ctx, d); err == nil {
		t.Fatal("Handle with the result's destination down: want an error")
	}
	if err := f.h(ctx, d); err != nil {
		t.Fatalf("redelivery: %v", err)
	}
	calls, jobs, ids := f.gw.state()
	if calls != 2 || jobs != 1 || ids[0] != ids[1] {
		t.Fatalf("%d calls, %d jobs, request ids %v; want 2 calls with one id, 1 job", calls, jobs, ids)
	}
	if len(f.sink.results) != 1 || f.sink.results[0].GetResource() != "projects/default/jobs/1" {
		t.Fatalf("results %v", f.sink.results)
	}
}

func TestServerPagesAndBounds(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := testkit.Context(t, 30*time.Second)
	for i := range 8 { // Kept is 5: the oldest 3 fall off
		if err := f.h(ctx, submit(string(rune('a'+i)), "loomk_good")); err != nil {
			t.Fatal(err)
		}
	}
	srv := f.app.Server()
	var got []string
	token := ""
	for range 10 {
		resp, err := srv.ListIngressMessages(ctx, &loomv1.ListIngressMessagesRequest{Parent: "projects/default", PageSize: 2, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range resp.GetMessages() {
			got = append(got, m.GetId())
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	if strings.Join(got, "") != "hgfed" {
		t.Fatalf("messages %v, want the 5 newest, newest first", got)
	}
	// A message no list holds keeps only what dedupes it, and still does.
	rdb := f.app.rec.st
	old := Key(submit("a", "loomk_good"))
	if h, err := rdb.Client().HGetAll(ctx, rdb.Key(keyMsg+old)).Result(); err != nil || h["rec"] != "" || h["producer"] == "" {
		t.Fatalf("the oldest message's hash %v (%v): want its record dropped, its dedupe kept", h, err)
	}
	if h, _ := rdb.Client().HGetAll(ctx, rdb.Key(keyMsg+Key(submit("d", "loomk_good")))).Result(); h["rec"] == "" {
		t.Fatal("a listed message's record was dropped")
	}
	callsBefore, _, _ := f.gw.state()
	if err := f.h(ctx, submit("a", "loomk_good")); err != nil {
		t.Fatal(err)
	}
	if calls, _, _ := f.gw.state(); calls != callsBefore {
		t.Fatal("a redelivery of a message no longer listed was applied again")
	}
	for _, req := range []*loomv1.ListIngressMessagesRequest{
		{Parent: "projects/default", Filter: `color = "red"`},
		{Parent: "projects/Bad_Project"},
		{Parent: "projects/default", PageSize: -1},
		{Parent: "projects/default", PageToken: "not-a-token"},
	} {
		_, err := srv.ListIngressMessages(ctx, req)
		if status.Code(toStatus(err)) != codes.InvalidArgument {
			t.Errorf("ListIngressMessages(%v) = %v, want InvalidArgument", req, err)
		}
	}
	ps, err := srv.ListIngressProducers(ctx, &loomv1.ListIngressProducersRequest{Parent: "projects/other"})
	if err != nil || len(ps.GetProducers()) != 0 {
		t.Fatalf("another project's producers: %v %v", ps, err)
	}
}

// The Kafka source on the embedded broker: a record is committed only once
// the handler returned nil (a failure retries it in place, with the
// attempt counted), and the dead letters carry the reason headers and
// never the credential.
func TestKafkaSourceAndDeadLetters(t *testing.T) {
	t.Parallel()
	broker := testkit.Broker(t)
	ctx := testkit.Context(t, 60*time.Second)
	const topic = "loom.ingress.v1"
	w := NewKafkaWriter([]string{broker}, nil)
	defer w.Close()
	good := record(TypePrefix+"SubmitJob", `{}`, map[string]string{"ce_id": "k-1"})
	good.Topic, good.Key = topic, []byte("k")
	if err := w.WriteMessages(ctx, good); err != nil {
		t.Fatal(err)
	}
	src := &KafkaSource{Brokers: []string{broker}, Topic: topic, Group: "test-" + t.Name(), Backoff: time.Millisecond}
	dl := &KafkaDeadLetters{W: w, Topic: topic + ".dlq", Transport: src.Name()}
	var mu sync.Mutex
	var attempts []int
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- src.Run(runCtx, func(ctx context.Context, d cloudevent.Delivery) error {
			mu.Lock()
			attempts = append(attempts, d.Attempt)
			n := len(attempts)
			mu.Unlock()
			if n == 1 {
				return ErrTransient
			}
			return dl.DeadLetter(ctx, d.Raw, "INVALID_ARGUMENT", "because")
		})
	}()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{broker}, Topic: topic + ".dlq", StartOffset: kafka.FirstOffset, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	m, err := r.ReadMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h := map[string]string{}
	for _, x := range m.Headers {
		h[x.Key] = string(x.Value)
	}
	if h[HeaderDLQReason] != "because" || h[HeaderDLQCode] != "INVALID_ARGUMENT" || h[HeaderDLQTransport] != "kafka:"+topic ||
		h[HeaderDLQTime] == "" || h["ce_id"] != "k-1" || string(m.Key) != "k" || string(m.Value) != "{}" {
		t.Fatalf("dead letter %q %q %v", m.Key, m.Value, h)
	}
	if _, ok := h["ce_credential"]; ok {
		t.Fatal("the dead letter carries the credential")
	}
	// Committed once decided: the group's offset moves past the record.
	testkit.WaitFor(t, 20*time.Second, "the record's commit", func() (bool, error) {
		c := &kafka.Client{Addr: kafka.TCP(broker)}
		resp, err := c.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: src.Group, Topics: map[string][]int{topic: {0, 1, 2, 3, 4, 5, 6, 7}}})
		if err != nil {
			return false, nil
		}
		for _, p := range resp.Topics[topic] {
			if p.CommittedOffset > 0 {
				return true, nil
			}
		}
		return false, nil
	})
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(attempts) != 2 || attempts[0] != 1 || attempts[1] != 2 {
		t.Fatalf("attempts %v, want [1 2]", attempts)
	}
}

// Records of one partition are handled in order, whatever the workers;
// every record of every partition is handled once.
func TestKafkaSourceKeepsPartitionOrder(t *testing.T) {
	t.Parallel()
	broker := testkit.Broker(t)
	ctx := testkit.Context(t, 60*time.Second)
	const topic = "loom.ingress.v1"
	w := NewKafkaWriter([]string{broker}, nil)
	defer w.Close()
	var msgs []kafka.Message
	for i := range 40 {
		m := record(TypePrefix+"SubmitJob", `{}`, map[string]string{"ce_id": fmt.Sprintf("%02d", i)})
		m.Topic, m.Key = topic, []byte(fmt.Sprintf("producer-%d", i%3))
		msgs = append(msgs, m)
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	src := &KafkaSource{Brokers: []string{broker}, Topic: topic, Group: "test-order", Workers: 4}
	var mu sync.Mutex
	seen := map[string][]string{} // key → ids in handling order
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- src.Run(runCtx, func(_ context.Context, d cloudevent.Delivery) error {
			mu.Lock()
			defer mu.Unlock()
			seen[string(d.Raw.Key)] = append(seen[string(d.Raw.Key)], d.Event.ID)
			return nil
		})
	}()
	testkit.WaitFor(t, 30*time.Second, "every record handled", func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, ids := range seen {
			n += len(ids)
		}
		return n >= 40, nil
	})
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for k, ids := range seen {
		want := 13
		if k == "producer-0" {
			want = 14
		}
		if !slices.IsSorted(ids) || len(ids) != want {
			t.Errorf("%s handled %v: want its records once each, in order", k, ids)
		}
	}
}

// A message at the record limit on the way in is over it with the reason
// headers: its dead letter goes without the data rather than never.
func TestKafkaDeadLetterOverTheRecordLimit(t *testing.T) {
	t.Parallel()
	broker := testkit.Broker(t)
	ctx := testkit.Context(t, 60*time.Second)
	const topic = "loom.ingress.v1.dlq"
	w := NewKafkaWriter([]string{broker}, nil)
	w.BatchBytes = 4096 // the record limit, small for the test
	defer w.Close()
	dl := &KafkaDeadLetters{W: w, Topic: topic, Transport: "kafka:loom.ingress.v1"}
	raw := cloudevent.Raw{Attributes: map[string]string{"ce_id": "big", "ce_credential": "loomk_secret"}, Data: []byte(strings.Repeat("x", 4000))}
	if err := dl.DeadLetter(ctx, raw, "INVALID_ARGUMENT", strings.Repeat("r", 500)); err != nil {
		t.Fatalf("DeadLetter: %v", err)
	}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{broker}, Topic: topic, StartOffset: kafka.FirstOffset, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	m, err := r.ReadMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h := map[string]string{}
	for _, x := range m.Headers {
		h[x.Key] = string(x.Value)
	}
	if len(m.Value) != 0 || !strings.HasPrefix(h[HeaderDLQDataDropped], "4000 bytes") || h["ce_id"] != "big" || h[HeaderDLQCode] != "INVALID_ARGUMENT" {
		t.Fatalf("dead letter %d bytes, headers %v", len(m.Value), h)
	}
	if _, ok := h["ce_credential"]; ok {
		t.Fatal("the dead letter carries the credential")
	}

	// Over the limit by its key and attributes: they go too, but for its id,
	// source and type, which fit any limit (1 KiB each at most here).
	raw = cloudevent.Raw{Attributes: map[string]string{"ce_id": "big-attr", "ce_type": TypePrefix + "SubmitJob", "x_big": strings.Repeat("h", 4000)},
		Data: []byte("{}"), Key: []byte(strings.Repeat("k", 100))}
	if err := dl.DeadLetter(ctx, raw, "INVALID_ARGUMENT", "attribute x_big is over 1024 bytes"); err != nil {
		t.Fatalf("DeadLetter: %v", err)
	}
	m, err = r.ReadMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h = map[string]string{}
	for _, x := range m.Headers {
		h[x.Key] = string(x.Value)
	}
	if _, ok := h["x_big"]; ok || len(m.Value) != 0 || len(m.Key) != 0 || h["ce_id"] != "big-attr" || h["ce_type"] != TypePrefix+"SubmitJob" ||
		!strings.HasPrefix(h[HeaderDLQDataDropped], "2 bytes of data, 100 of key, 3 attributes") || h[HeaderDLQReason] == "" {
		t.Fatalf("dead letter of %d bytes, key %d bytes, headers %v", len(m.Value), len(m.Key), h)
	}
}

// A record larger than the source's fetch limit does not stall the
// ingress: it is refused to the dead-letter topic with its reason, and the
// message after it, in the same partition, is applied. Such a record can
// exist only where the topic's max.message.bytes was raised above the
// fetch limit: as Loom creates the topic, the broker refuses it at produce.
func TestKafkaRecordOverTheFetchLimitDoesNotStall(t *testing.T) {
	t.Parallel()
	const topic = topics.Ingress
	broker := testkit.BrokerWith(t,
		topics.Spec{Name: topic, Partitions: 1, Configs: map[string]string{"max.message.bytes": strconv.Itoa(bus.FetchMaxBytes + 2<<20)}},
		topics.Spec{Name: topic + topics.DLQSuffix, Partitions: 1},
		topics.Spec{Name: "loom.ingress.as-created", Partitions: 1, Configs: specOf(t, topic).Configs})
	ctx := testkit.Context(t, 60*time.Second)
	f := newFixture(t)

	big := record(TypePrefix+"SubmitJob", strings.Repeat("x", bus.FetchMaxBytes+1<<20), map[string]string{"ce_id": "big", "ce_credential": "loomk_good"})
	big.Key = []byte("k")
	w := NewKafkaWriter([]string{broker}, nil)
	w.BatchBytes = int64(bus.FetchMaxBytes + 2<<20) // a producer's own limit, whatever Loom's
	defer w.Close()
	asCreated := big
	asCreated.Topic = "loom.ingress.as-created"
	if err := w.WriteMessages(ctx, asCreated); !bus.TooLarge(err) {
		t.Fatalf("the big record written to the topic as Loom creates it: %v, want MESSAGE_TOO_LARGE", err)
	}
	big.Topic = topic
	if err := w.WriteMessages(ctx, big); err != nil {
		t.Fatalf("write the big record: %v", err)
	}
	good := record(TypePrefix+"SubmitJob", `{"parent":"projects/default","job":{"cluster":"projects/default/clusters/c"}}`,
		map[string]string{"ce_id": "good", "ce_credential": "loomk_good"})
	good.Topic, good.Key = topic, []byte("k")
	if err := w.WriteMessages(ctx, good); err != nil {
		t.Fatal(err)
	}

	dlw := NewKafkaWriter([]string{broker}, nil)
	defer dlw.Close()
	src := &KafkaSource{Brokers: []string{broker}, Topic: topic, Group: "test-big", Backoff: time.Millisecond}
	h := f.app.Handler(&KafkaDeadLetters{W: dlw, Topic: topic + topics.DLQSuffix, Transport: src.Name()})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- src.Run(runCtx, h) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	testkit.WaitFor(t, 30*time.Second, "the message after the big one applied", func() (bool, error) {
		_, jobs, _ := f.gw.state()
		return jobs == 1, nil
	})
	if _, _, ids := f.gw.state(); len(ids) != 1 {
		t.Errorf("the gateway was called for %v, want the good message only", ids)
	}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{broker}, Topic: topic + topics.DLQSuffix, StartOffset: kafka.FirstOffset, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	m, err := r.ReadMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hs := map[string]string{}
	for _, x := range m.Headers {
		hs[x.Key] = string(x.Value)
	}
	if hs["ce_id"] != "big" || hs[HeaderDLQCode] != "INVALID_ARGUMENT" || !strings.Contains(hs[HeaderDLQReason], "over the limit") ||
		!strings.HasPrefix(hs[HeaderDLQDataDropped], strconv.Itoa(bus.FetchMaxBytes+1<<20)+" bytes") {
		t.Fatalf("dead letter of %d bytes, headers %v", len(m.Value), hs)
	}
}

// specOf returns topics.All()'s spec of name.
func specOf(t testing.TB, name string) topics.Spec {
	t.Helper()
	for _, s := range topics.All() {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("%s is not one of Loom's topics", name)
	return topics.Spec{}
}

// A producer that sends another's source and id first (even with no
// credential) does not get the real message taken for its redelivery.
func TestHandleImpostorCannotPreemptAMessage(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := testkit.Context(t, 30*time.Second)
	impostor := submit("m-1", "")
	real := submit("m-1", "loomk_good")
	for _, d := range []cloudevent.Delivery{impostor, real, real, impostor} {
		if err := f.h(ctx, d); err != nil {
			t.Fatalf("Handle: %v", err)
		}
	}
	calls, jobs, ids := f.gw.state()
	if calls != 1 || jobs != 1 || ids[0] != RequestID(ScopedKey(Key(real), CredentialTag(real))) {
		t.Fatalf("%d calls, %d jobs, ids %v: want the real message applied once", calls, jobs, ids)
	}
	// The impostor's message, with no credential, is filed under no
	// project: its result is withheld.
	if len(f.sink.results) != 1 || f.sink.results[0].GetOutcome() != publicv1.IngressResult_ACCEPTED {
		t.Fatalf("results %v", f.sink.results)
	}
	if CredentialTag(real) == "" || CredentialTag(impostor) != "" || strings.Contains(CredentialTag(real), "good") {
		t.Fatal("CredentialTag")
	}
}

// Bytes that are not UTF-8 in a message's attributes do not keep it from
// being decided (protojson refuses invalid strings).
func TestHandleInvalidUTF8(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := testkit.Context(t, 30*time.Second)
	d := submit("bad-\xff\xfe", "loomk_good")
	d.Event.Source = "//s\xc3"
	if err := f.h(ctx, d); err != nil {
		t.Fatalf("Handle: %v", err)
	}
	if len(f.sink.results) != 1 || f.sink.results[0].GetMessageId() != "bad-\uFFFD" {
		t.Fatalf("results %v", f.sink.results)
	}
	if err := f.h(ctx, d); err != nil {
		t.Fatalf("redelivery: %v", err)
	}
	if calls, _, _ := f.gw.state(); calls != 1 {
		t.Fatalf("%d calls, want 1", calls)
	}
}

// TestHandleConcurrentCopiesDecideOnce: Pub/Sub hands out copies of one
// message at once (and a producer may publish it twice); only one copy
// decides it, the others are redelivered (an error) and then count as
// duplicates: one gateway call, one result.
func TestHandleConcurrentCopiesDecideOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := testkit.Context(t, 30*time.Second)
	d := submit("m-conc", "loomk_good")
	const copies = 8
	errsc := make(chan error, copies)
	var wg sync.WaitGroup
	for range copies {
		wg.Add(1)
		go func() { defer wg.Done(); errsc <- f.h(ctx, d) }()
	}
	wg.Wait()
	close(errsc)
	redeliver := 0
	for err := range errsc {
		if err != nil {
			if !errors.Is(err, ErrTransient) {
				t.Fatalf("a copy failed with %v, want nil or a transient error", err)
			}
			redeliver++
		}
	}
	// The transport redelivers the copies that were told to come again.
	for range redeliver {
		if err := f.h(ctx, d); err != nil {
			t.Fatalf("redelivery: %v", err)
		}
	}
	calls, jobs, _ := f.gw.state()
	f.sink.mu.Lock()
	results := len(f.sink.results)
	f.sink.mu.Unlock()
	if calls != 1 || jobs != 1 || results != 1 {
		t.Fatalf("%d copies at once: %d gateway calls, %d jobs, %d results; want 1 each", copies, calls, jobs, results)
	}
}

// A message whose decision takes longer than a claim lives (a slow
// gateway: four calls of up to 30 s each, against a 2 min claim) keeps its
// claim while it is decided: a copy delivered meanwhile is told to come
// again, and calls nothing. An expired claim let that copy make a second
// call and publish a second result under the same id (a cancel's second
// answer differs from the first's).
//
// The test drives the renewals (records.renewTick) and ages the claim in
// Redis itself: with a claim of 150 ms renewed every 50 ms by the clock, a
// loaded machine that ran neither the renewal nor Redis for 100 ms let the
// claim lapse, and the test failed on a live bridge's correct claim.
func TestHandleKeepsItsClaimWhileDeciding(t *testing.T) {
	t.Parallel()
	const ttl = time.Minute
	f := newFixture(t, func(c *Config) { c.ClaimTTL = ttl })
	tick := make(chan time.Time)
	f.app.rec.renewTick = tick
	f.gw.entered, f.gw.hold = make(chan struct{}, 2), make(chan struct{})
	ctx := testkit.Context(t, 30*time.Second)
	d := submit("m-slow", "loomk_good")
	first := make(chan error, 1)
	go func() { first <- f.h(ctx, d) }()
	<-f.gw.entered
	// The gateway has taken three quarters of the claim's life. A renewal
	// gives it its whole life again, more than the quarter left could
	// ever be; the quarter outlasts the wait below, however loaded the
	// machine.
	cl, claimKey := f.app.rec.st.Client(), f.app.rec.st.Key(keyClaim+Key(d))
	if ok, err := cl.PExpire(ctx, claimKey, ttl/4).Result(); err != nil || !ok {
		t.Fatalf("age the claim: %v, %v; want it held while the gateway answers", ok, err)
	}
	tick <- time.Now()
	testkit.WaitFor(t, 10*time.Second, "the claim renewed to its whole life", func() (bool, error) {
		left, err := cl.PTTL(ctx, claimKey).Result()
		if err == nil && left < 0 {
			err = errors.New("the claim lapsed while the message was being decided")
		}
		return left > ttl/2, err
	})
	second := make(chan error, 1)
	go func() { second <- f.h(ctx, d) }()
	var err2 error
	select {
	case err2 = <-second:
	case <-f.gw.entered:
		err2 = errors.New("the copy called the gateway")
	}
	close(f.gw.hold)
	if err := <-first; err != nil {
		t.Fatalf("first delivery: %v", err)
	}
	if !errors.Is(err2, ErrTransient) {
		t.Fatalf("a copy delivered while the message was decided: %v, want to be told to come again", err2)
	}
	if err := f.h(ctx, d); err != nil { // the copy again: a duplicate now
		t.Fatal(err)
	}
	calls, _, _ := f.gw.state()
	f.sink.mu.Lock()
	results := len(f.sink.results)
	f.sink.mu.Unlock()
	if calls != 1 || results != 1 {
		t.Fatalf("%d gateway calls, %d results; want 1 each", calls, results)
	}
}

// A transport that does not count deliveries (Pub/Sub without a
// dead-letter policy: Attempt 0) still gets a message that keeps timing out
// decided after MaxDeliveries, dead-lettered and answered FAILED; it was
// given back on every delivery until Pub/Sub's retention dropped it,
// unanswered.
func TestHandleDecidesAfterMaxDeliveriesUncounted(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := testkit.Context(t, 30*time.Second)
	f.gw.mu.Lock()
	f.gw.always = status.Error(codes.DeadlineExceeded, "the gateway's deadline passed")
	f.gw.mu.Unlock()
	d := submit("m-uncounted", "loomk_good") // Attempt 0, as Pub/Sub reports it
	for i := 1; i < DefaultMaxDeliveries; i++ {
		if err := f.h(ctx, d); !errors.Is(err, ErrTransient) {
			t.Fatalf("delivery %d: %v, want it given back", i, err)
		}
	}
	if err := f.h(ctx, d); err != nil {
		t.Fatalf("delivery %d: %v, want it decided", DefaultMaxDeliveries, err)
	}
	f.sink.mu.Lock()
	defer f.sink.mu.Unlock()
	if len(f.sink.dead) != 1 || f.sink.dead[0].code != "DEADLINE_EXCEEDED" || len(f.sink.results) != 1 ||
		f.sink.results[0].GetOutcome() != publicv1.IngressResult_FAILED {
		t.Fatalf("dead letters %+v, results %v; want one each, FAILED", f.sink.dead, f.sink.results)
	}
}

// The result of a message filed under no project (no credential, or one
// of no member of the project it names) is not published: the public
// stream's every reader would get what anyone may publish. The operator
// still has it: its dead letter, its record under projects/-, the count.
func TestResultsOfNoProjectAreWithheld(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := testkit.Context(t, 30*time.Second)
	for _, d := range []cloudevent.Delivery{submit("anon", ""), submit("stranger", "loomk_stranger"), submit("member", "loomk_good")} {
		for range 2 { // the redelivery is a duplicate: counted once
			if err := f.h(ctx, d); err != nil {
				t.Fatalf("Handle %s: %v", d.Event.ID, err)
			}
		}
	}
	if len(f.sink.results) != 1 || f.sink.results[0].GetMessageId() != "member" || f.sink.results[0].GetProject() != "default" {
		t.Fatalf("results published %v; want only the member's, under default", f.sink.results)
	}
	if len(f.sink.dead) != 2 {
		t.Fatalf("%d dead letters; want the two messages of no project's", len(f.sink.dead))
	}
	if err := testutil.GatherAndCompare(f.reg, strings.NewReader(`
# HELP loom_bridge_ingress_results_withheld_total Ingress messages filed under no project (no credential, or one of no member), whose result is not published, by transport and outcome.
# TYPE loom_bridge_ingress_results_withheld_total counter
loom_bridge_ingress_results_withheld_total{outcome="INVALID",transport="kafka:loom.ingress.v1"} 1
loom_bridge_ingress_results_withheld_total{outcome="REFUSED",transport="kafka:loom.ingress.v1"} 1
`), "loom_bridge_ingress_results_withheld_total"); err != nil {
		t.Error(err)
	}
	msgs, err := f.app.Server().ListIngressMessages(ctx, &loomv1.ListIngressMessagesRequest{Parent: "projects/-"})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range msgs.GetMessages() {
		ids = append(ids, m.GetId()+" "+m.GetProject())
	}
	if !slices.Equal(ids, []string{"member default", "stranger ", "anon "}) {
		t.Fatalf("every project's messages, newest first: %q", ids)
	}
}

package pubsub

import (
	"context"
	"errors"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/services/bridge/internal/cloudevent"
)

const project = "loom-test"

// fake is a pstest server (the real Pub/Sub fake) with admin and data
// clients of its gRPC API.
type fake struct {
	srv *pstest.Server
	pub pubsubpb.PublisherClient
	sub pubsubpb.SubscriberClient
}

func newFake(t testing.TB) *fake {
	t.Helper()
	srv := pstest.NewServer()
	t.Cleanup(func() { _ = srv.Close() })
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &fake{srv: srv, pub: pubsubpb.NewPublisherClient(conn), sub: pubsubpb.NewSubscriberClient(conn)}
}

func testCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func topicName(id string) string { return "projects/" + project + "/topics/" + id }
func subName(id string) string   { return "projects/" + project + "/subscriptions/" + id }

// topic creates topic id with a subscription of the same id; with
// attempts, the subscription has a dead-letter policy, so that Pub/Sub
// counts delivery attempts (its own dead-lettering is past the test's
// attempts).
func (f *fake) topic(t testing.TB, id string, attempts bool) {
	t.Helper()
	ctx := testCtx(t)
	if _, err := f.pub.CreateTopic(ctx, &pubsubpb.Topic{Name: topicName(id)}); err != nil {
		t.Fatal(err)
	}
	s := &pubsubpb.Subscription{Name: subName(id), Topic: topicName(id), AckDeadlineSeconds: 10}
	if attempts {
		if _, err := f.pub.CreateTopic(ctx, &pubsubpb.Topic{Name: topicName(id + "-policy-dlq")}); err != nil {
			t.Fatal(err)
		}
		s.DeadLetterPolicy = &pubsubpb.DeadLetterPolicy{DeadLetterTopic: topicName(id + "-policy-dlq"), MaxDeliveryAttempts: 100}
	}
	if _, err := f.sub.CreateSubscription(ctx, s); err != nil {
		t.Fatal(err)
	}
}

func (f *fake) publish(t testing.TB, topic string, data []byte, attrs map[string]string) string {
	t.Helper()
	resp, err := f.pub.Publish(testCtx(t), &pubsubpb.PublishRequest{Topic: topicName(topic),
		Messages: []*pubsubpb.PubsubMessage{{Data: data, Attributes: attrs}}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.MessageIds[0]
}

// pull takes n messages from subscription id, acknowledging them.
func (f *fake) pull(t testing.TB, id string, n int) []*pubsubpb.PubsubMessage {
	t.Helper()
	ctx := testCtx(t)
	var out []*pubsubpb.PubsubMessage
	testkit.WaitFor(t, 20*time.Second, "messages on "+id, func() (bool, error) {
		resp, err := f.sub.Pull(ctx, &pubsubpb.PullRequest{Subscription: subName(id), MaxMessages: int32(n - len(out)), ReturnImmediately: true})
		if err != nil {
			return false, err
		}
		var acks []string
		for _, m := range resp.ReceivedMessages {
			out = append(out, m.Message)
			acks = append(acks, m.AckId)
		}
		if len(acks) > 0 {
			if _, err := f.sub.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: subName(id), AckIds: acks}); err != nil {
				return false, err
			}
		}
		return len(out) >= n, nil
	})
	return out
}

func (f *fake) client(t testing.TB) *Client {
	t.Helper()
	c, err := Dial(testCtx(t), Config{Endpoint: f.srv.Addr, Project: project})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// run runs src with h until the test ends, failing it if Run fails.
func run(t *testing.T, src cloudevent.Source, h cloudevent.Handler) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, h) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

func ceAttrs(id string) map[string]string {
	return map[string]string{"ce-specversion": "1.0", "ce-id": id, "ce-source": "//pipeline/a",
		"ce-type": "loom.ingress.v1.SubmitJob", "content-type": "application/json",
		"ce-credential": "loomk_secret", "team": "data"}
}

// A message published with CloudEvents attributes arrives as a Delivery:
// the event parsed, the raw message as it arrived, the transport and the
// delivery attempt; the handler's nil acknowledges it once, and it does
// not come again. A message that is not a CloudEvent arrives with its
// parse error, for the handler to dead-letter.
func TestSourceDeliversMessagesAndAcksOnNil(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.topic(t, "ingress", true)
	src, err := f.client(t).Source(testCtx(t), "ingress", ReceiveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if src.Name() != "pubsub:"+subName("ingress") {
		t.Fatalf("Name = %q", src.Name())
	}
	got := make(chan cloudevent.Delivery, 10)
	run(t, src, func(ctx context.Context, d cloudevent.Delivery) error {
		got <- d
		return nil
	})
	attrs := ceAttrs("m-1")
	id := f.publish(t, "ingress", []byte(`{"parent":"projects/p"}`), attrs)
	d := <-got
	if d.ParseErr != nil || d.Transport != src.Name() || d.Attempt != 1 {
		t.Fatalf("delivery: parse %v, transport %q, attempt %d", d.ParseErr, d.Transport, d.Attempt)
	}
	e := d.Event
	if e.ID != "m-1" || e.Source != "//pipeline/a" || e.Type != "loom.ingress.v1.SubmitJob" || e.DataContentType != "application/json" ||
		e.Extensions[cloudevent.ExtCredential] != "loomk_secret" || string(e.Data) != `{"parent":"projects/p"}` {
		t.Fatalf("event = %+v", e)
	}
	if !maps.Equal(d.Raw.Attributes, attrs) || string(d.Raw.Data) != `{"parent":"projects/p"}` {
		t.Fatalf("raw = %+v", d.Raw)
	}
	testkit.WaitFor(t, 20*time.Second, "the ack", func() (bool, error) { return f.srv.Message(id).Acks == 1, nil })

	bad := f.publish(t, "ingress", []byte("not json"), map[string]string{"ce-id": "m-2"})
	d = <-got
	if d.ParseErr == nil || !strings.Contains(d.ParseErr.Error(), "specversion") || d.Raw.Attributes["ce-id"] != "m-2" || string(d.Raw.Data) != "not json" {
		t.Fatalf("malformed delivery: %+v", d)
	}
	testkit.WaitFor(t, 20*time.Second, "the second ack", func() (bool, error) { return f.srv.Message(bad).Acks == 1, nil })
	if m := f.srv.Message(id); m.Deliveries != 1 || m.Acks != 1 {
		t.Fatalf("acked message: %d deliveries, %d acks; want 1, 1", m.Deliveries, m.Acks)
	}
	select {
	case d := <-got:
		t.Fatalf("an acknowledged message came again: %+v", d.Event)
	default:
	}
}

// A handler error leaves the message unacknowledged: it comes again (the
// attempt counted), and once the handler decides it, it is acknowledged.
func TestSourceRedeliversWhenHandlerFails(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.topic(t, "ingress", true)
	src, err := f.client(t).Source(testCtx(t), "ingress", ReceiveOptions{RetryDelay: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var attempts []int
	run(t, src, func(ctx context.Context, d cloudevent.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		attempts = append(attempts, d.Attempt)
		if len(attempts) == 1 {
			return errors.New("gateway unavailable")
		}
		return nil
	})
	id := f.publish(t, "ingress", []byte("{}"), ceAttrs("m-1"))
	testkit.WaitFor(t, 20*time.Second, "the ack after a redelivery", func() (bool, error) { return f.srv.Message(id).Acks == 1, nil })
	mu.Lock()
	defer mu.Unlock()
	if len(attempts) != 2 || attempts[0] != 1 || attempts[1] != 2 {
		t.Fatalf("attempts = %v, want [1 2]", attempts)
	}
}

// The bound on bytes in flight never holds back a message larger than it:
// it is delivered, alone, and the handler decides.
func TestSourceDeliversDataLargerThanTheBound(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.topic(t, "ingress", false)
	src, err := f.client(t).Source(testCtx(t), "ingress", ReceiveOptions{MaxOutstandingBytes: 1024, MaxOutstandingMessages: 1})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan cloudevent.Delivery, 2)
	run(t, src, func(ctx context.Context, d cloudevent.Delivery) error {
		got <- d
		return nil
	})
	big := strings.Repeat("x", 8*1024)
	f.publish(t, "ingress", []byte(big), ceAttrs("big"))
	f.publish(t, "ingress", []byte("{}"), ceAttrs("small"))
	seen := map[string]int{}
	for range 2 {
		d := <-got
		seen[d.Event.ID] = len(d.Event.Data)
	}
	if seen["big"] != len(big) || seen["small"] != 2 {
		t.Fatalf("delivered = %v", seen)
	}
	if d := (cloudevent.Event{ID: "big", Source: "s", Type: "t", Data: []byte(big)}); d.Validate(1024) == nil {
		t.Fatal("the handler's own bound should refuse the big message") // what the ingress does with it
	}
}

// A dead letter carries the message as it arrived without the credential,
// and the reason, code, transport (the source's, from the handler's
// context) and time.
func TestDeadLetterCarriesReasonAndNoCredential(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.topic(t, "ingress", false)
	f.topic(t, "dlq", false)
	in, err := OpenIngress(testCtx(t), Config{Endpoint: f.srv.Addr, Project: project, Subscriptions: []string{"ingress"}, DeadLetterTopic: "dlq"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = in.Close() })
	if len(in.Sources) != 1 || in.DeadLetters.Topic() != topicName("dlq") {
		t.Fatalf("ingress = %+v", in)
	}
	before := time.Now().UTC().Add(-time.Second)
	run(t, in.Sources[0], func(ctx context.Context, d cloudevent.Delivery) error {
		return in.DeadLetters.DeadLetter(ctx, d.Raw.Redacted(), "PermissionDenied", "the key may not submit jobs in project p")
	})
	f.publish(t, "ingress", []byte(`{"x":1}`), ceAttrs("m-1"))
	m := f.pull(t, "dlq", 1)[0]
	a := m.Attributes
	if _, ok := a["ce-credential"]; ok {
		t.Fatalf("dead letter carries the credential: %v", a)
	}
	if a[AttrDLQReason] != "the key may not submit jobs in project p" || a[AttrDLQCode] != "PermissionDenied" ||
		a[AttrDLQTransport] != "pubsub:"+subName("ingress") || a["ce-id"] != "m-1" || a["team"] != "data" || string(m.Data) != `{"x":1}` {
		t.Fatalf("dead letter = %v %q", a, m.Data)
	}
	if ts, err := time.Parse(time.RFC3339Nano, a[AttrDLQTime]); err != nil || ts.Before(before) {
		t.Fatalf("loom-dlq-time %q: %v", a[AttrDLQTime], err)
	}

	// Without a source's context: the transport given, and the credential
	// removed even when the caller forgot to.
	err = in.DeadLetters.For("pubsub:elsewhere").DeadLetter(testCtx(t),
		cloudevent.Raw{Attributes: ceAttrs("m-2"), Data: []byte("{")}, "InvalidArgument", strings.Repeat("é", 600))
	if err != nil {
		t.Fatal(err)
	}
	m = f.pull(t, "dlq", 1)[0]
	if _, ok := m.Attributes["ce-credential"]; ok || m.Attributes[AttrDLQTransport] != "pubsub:elsewhere" || len(m.Attributes[AttrDLQReason]) > 1024 ||
		!strings.HasPrefix(strings.Repeat("é", 600), m.Attributes[AttrDLQReason]) {
		t.Fatalf("dead letter = %v", m.Attributes)
	}
}

// Pub/Sub allows 100 attributes: a message that had them all keeps the
// first in name order and says how many were left out; the reason always
// goes in.
func TestDeadLetterAttributesStayWithinPubSubLimit(t *testing.T) {
	t.Parallel()
	own := map[string]string{AttrDLQReason: "forged"}
	for i := range 100 {
		own[string(rune('a'+i/26))+string(rune('a'+i%26))] = "v"
	}
	out := deadLetterAttributes(own, map[string]string{AttrDLQReason: "r", AttrDLQCode: "c", AttrDLQTransport: "t", AttrDLQTime: "x"})
	if len(out) != maxAttributes || out[AttrDLQReason] != "r" || out[AttrDLQDropped] != "5" || out["aa"] != "v" || out["dv"] != "" {
		t.Fatalf("%d attributes, reason %q, dropped %q", len(out), out[AttrDLQReason], out[AttrDLQDropped])
	}
}

// Events published to a sink arrive on a subscription of its topic with
// their CloudEvents attributes and data, each with its project as the
// ordering key.
func TestSinkPublishesEventsWithAttributes(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.topic(t, "events", false)
	sink, err := NewSink(testCtx(t), f.client(t), topicName("events"))
	if err != nil {
		t.Fatal(err)
	}
	if sink.Name() != "pubsub:"+topicName("events") {
		t.Fatalf("Name = %q", sink.Name())
	}
	now := time.Date(2026, 12, 2, 16, 0, 0, 123, time.UTC)
	evs := []cloudevent.Event{
		{ID: "e1", Source: "loom/scheduler", Type: "loom.public.v1.JobStateChanged", Subject: "projects/a/jobs/1", Time: now,
			DataContentType: "application/json", Extensions: map[string]string{cloudevent.ExtProject: "a"}, Data: []byte(`{"state":"RUNNING"}`)},
		{ID: "e2", Source: "loom/registry", Type: "loom.public.v1.ModelVersionRegistered", Subject: "projects/b/models/m",
			Extensions: map[string]string{cloudevent.ExtProject: "b"}, Data: []byte(`{}`)},
		{ID: "e3", Source: "loom/health", Type: "loom.public.v1.NodeHealthChanged", Data: []byte(`{}`)},
	}
	if err := sink.Publish(testCtx(t), evs...); err != nil {
		t.Fatal(err)
	}
	got := map[string]cloudevent.Event{}
	for _, m := range f.pull(t, "events", len(evs)) {
		e, err := cloudevent.FromPubSub(m.Attributes, m.Data)
		if err != nil {
			t.Fatal(err)
		}
		got[e.ID] = e
		if want := e.Extensions[cloudevent.ExtProject]; m.OrderingKey != want {
			t.Fatalf("event %s: ordering key %q, want %q", e.ID, m.OrderingKey, want)
		}
	}
	for _, want := range evs {
		g := got[want.ID]
		if g.Source != want.Source || g.Type != want.Type || g.Subject != want.Subject || !g.Time.Equal(want.Time) ||
			g.DataContentType != want.DataContentType || !maps.Equal(g.Extensions, want.Extensions) || string(g.Data) != string(want.Data) {
			t.Fatalf("event %s = %+v, want %+v", want.ID, g, want)
		}
	}
}

// Names: ids need a project; full names are taken as they are; anything
// else, or a missing resource, is refused naming the flag.
func TestNamesAndMissingResources(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.topic(t, "ingress", false)
	c := f.client(t)
	if n, err := c.SubscriptionName("pubsub-subscriptions", "ingress"); err != nil || n != subName("ingress") {
		t.Fatalf("id: %q %v", n, err)
	}
	if n, err := c.TopicName("egress", "projects/other/topics/t-1"); err != nil || n != "projects/other/topics/t-1" {
		t.Fatalf("full name: %q %v", n, err)
	}
	for _, bad := range []string{"projects/p/subscriptions/in", "a", "1abc", "projects//topics/abc", "a/b", "projects/p/topics/bad name", strings.Repeat("a", 256)} {
		_, err := c.TopicName("egress", bad)
		var inv *errs.InvalidError
		if !errors.As(err, &inv) || inv.Violations[0].Field != "egress" {
			t.Fatalf("TopicName(%q) = %v, want InvalidArgument on egress", bad, err)
		}
	}
	noProject, err := Dial(testCtx(t), Config{Endpoint: f.srv.Addr})
	if err != nil {
		t.Fatal(err)
	}
	defer noProject.Close()
	if _, err := noProject.SubscriptionName("pubsub-subscriptions", "ingress"); err == nil || !strings.Contains(err.Error(), "-pubsub-project") {
		t.Fatalf("id without a project: %v", err)
	}
	ctx := testCtx(t)
	if _, err := OpenIngress(ctx, Config{Endpoint: f.srv.Addr, Project: project, Subscriptions: []string{"nope"}, DeadLetterTopic: "ingress"}); err == nil ||
		!strings.Contains(err.Error(), subName("nope")+" does not exist") {
		t.Fatalf("missing subscription: %v", err)
	}
	if _, err := OpenIngress(ctx, Config{Endpoint: f.srv.Addr, Project: project, Subscriptions: []string{"ingress"}, DeadLetterTopic: "nope"}); err == nil ||
		!strings.Contains(err.Error(), "-pubsub-dead-letter-topic") {
		t.Fatalf("missing dead-letter topic: %v", err)
	}
	if _, err := OpenIngress(ctx, Config{Endpoint: f.srv.Addr, Project: project, Subscriptions: []string{"ingress"}}); err == nil {
		t.Fatal("subscriptions without a dead-letter topic were accepted")
	}
	if _, err := OpenIngress(ctx, Config{Endpoint: f.srv.Addr, Project: project, Subscriptions: make([]string, MaxSubscriptions+1), DeadLetterTopic: "ingress"}); err == nil || !strings.Contains(err.Error(), "over the limit of 32") {
		t.Fatalf("too many subscriptions: %v", err)
	}
	if in, err := OpenIngress(ctx, Config{Endpoint: f.srv.Addr}); in != nil || err != nil {
		t.Fatalf("no subscriptions: %v %v", in, err)
	}
	if _, err := NewSink(ctx, c, "nope"); err == nil || !strings.Contains(err.Error(), "-egress") {
		t.Fatalf("missing sink topic: %v", err)
	}
}

// A failed publish is an error naming the event, and the project's
// ordering key is resumed: once the topic is back, the same project's
// events publish again.
func TestSinkResumesAProjectAfterAFailedPublish(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.topic(t, "events", false)
	sink, err := NewSink(testCtx(t), f.client(t), "events")
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	if _, err := f.pub.DeleteTopic(ctx, &pubsubpb.DeleteTopicRequest{Topic: topicName("events")}); err != nil {
		t.Fatal(err)
	}
	ev := func(id string) cloudevent.Event {
		return cloudevent.Event{ID: id, Source: "loom/scheduler", Type: "t", Extensions: map[string]string{cloudevent.ExtProject: "a"}, Data: []byte("{}")}
	}
	err = sink.Publish(ctx, ev("e1"), ev("e2"))
	if err == nil || !strings.Contains(err.Error(), `"e1"`) || !strings.Contains(err.Error(), "2 of 2 events not published") {
		t.Fatalf("publish to a deleted topic: %v", err)
	}
	if _, err := f.pub.CreateTopic(ctx, &pubsubpb.Topic{Name: topicName("events")}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.sub.CreateSubscription(ctx, &pubsubpb.Subscription{Name: subName("events-again"), Topic: topicName("events")}); err != nil {
		t.Fatal(err)
	}
	if err := sink.Publish(ctx, ev("e3")); err != nil {
		t.Fatalf("publish after the topic is back: %v", err)
	}
	if m := f.pull(t, "events-again", 1)[0]; m.Attributes["ce-id"] != "e3" || m.OrderingKey != "a" {
		t.Fatalf("got %v", m)
	}
}

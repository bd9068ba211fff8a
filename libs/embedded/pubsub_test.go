package embedded

import (
	"net"
	"strings"
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

func startPubSub(t *testing.T) *PubSub {
	t.Helper()
	p, err := StartPubSub(testCtx(t), "")
	if err != nil {
		t.Fatalf("StartPubSub: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func pubsubConn(t *testing.T, addr string) (pubsubpb.PublisherClient, pubsubpb.SubscriberClient) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return pubsubpb.NewPublisherClient(conn), pubsubpb.NewSubscriberClient(conn)
}

// The resources of `loom up` are created, creating them again changes
// nothing, and a message published to a topic is pulled from its
// subscription.
func TestPubSubEnsureIsIdempotentAndCarriesMessages(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	p := startPubSub(t)
	if !strings.HasPrefix(p.Addr, "127.0.0.1:") {
		t.Fatalf("Addr = %q, want loopback", p.Addr)
	}
	for i := 0; i < 2; i++ {
		if err := p.Ensure(ctx, PubSubProject, LoomPubSubTopics()); err != nil {
			t.Fatalf("Ensure #%d: %v", i+1, err)
		}
	}
	pub, sub := pubsubConn(t, p.Addr)
	topics, err := pub.ListTopics(ctx, &pubsubpb.ListTopicsRequest{Project: "projects/" + PubSubProject})
	if err != nil {
		t.Fatal(err)
	}
	if len(topics.Topics) != 3 {
		t.Fatalf("topics = %v, want 3", topics.Topics)
	}
	for _, tc := range []struct{ topic, sub string }{
		{PubSubIngressTopic, PubSubIngressSubscription},
		{PubSubDeadLetterTopic, PubSubDeadLetterSubscription},
		{PubSubEventsTopic, PubSubEventsSubscription},
	} {
		topic := "projects/" + PubSubProject + "/topics/" + tc.topic
		_, err := pub.Publish(ctx, &pubsubpb.PublishRequest{Topic: topic, Messages: []*pubsubpb.PubsubMessage{
			{Data: []byte("hello " + tc.topic), Attributes: map[string]string{"ce-id": "1"}}}})
		if err != nil {
			t.Fatalf("publish to %s: %v", topic, err)
		}
		resp, err := sub.Pull(ctx, &pubsubpb.PullRequest{Subscription: "projects/" + PubSubProject + "/subscriptions/" + tc.sub, MaxMessages: 10})
		if err != nil {
			t.Fatalf("pull %s: %v", tc.sub, err)
		}
		if len(resp.ReceivedMessages) != 1 || string(resp.ReceivedMessages[0].Message.Data) != "hello "+tc.topic ||
			resp.ReceivedMessages[0].Message.Attributes["ce-id"] != "1" {
			t.Fatalf("pulled from %s: %v", tc.sub, resp.ReceivedMessages)
		}
	}
}

// The fake keeps nothing across a restart: a new one on the same port has
// no topics.
func TestPubSubRestartStartsEmpty(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	p := startPubSub(t)
	if err := p.Ensure(ctx, PubSubProject, LoomPubSubTopics()); err != nil {
		t.Fatal(err)
	}
	addr := p.Addr
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil { // a second Close does nothing
		t.Fatal(err)
	}
	p2, err := StartPubSub(ctx, addr)
	if err != nil {
		t.Fatalf("restart on %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = p2.Close() })
	pub, _ := pubsubConn(t, p2.Addr)
	_, err = pub.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: "projects/" + PubSubProject + "/topics/" + PubSubIngressTopic})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("GetTopic after restart: %v, want NotFound", err)
	}
}

// A taken port is an error naming it, not a panic; so is a non-loopback
// address.
func TestStartPubSubRefusesTakenPortAndNonLoopback(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if p, err := StartPubSub(testCtx(t), ln.Addr().String()); err == nil {
		_ = p.Close()
		t.Fatal("StartPubSub on a taken port succeeded")
	} else if !strings.Contains(err.Error(), "address already in use") || !strings.Contains(err.Error(), ln.Addr().String()) {
		t.Fatalf("err = %v, want address in use naming %s", err, ln.Addr())
	}
	if _, err := StartPubSub(testCtx(t), "10.1.2.3:7085"); err == nil || !strings.Contains(err.Error(), "only 127.0.0.1") {
		t.Fatalf("non-loopback: %v", err)
	}
	if err := EnsurePubSub(testCtx(t), "127.0.0.1:1", "", LoomPubSubTopics()); err == nil || !strings.Contains(err.Error(), "project") {
		t.Fatalf("EnsurePubSub without project: %v", err)
	}
}

package stack

import (
	"context"
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/loom-ml/loom/libs/embedded"
)

// checkPubSub checks that the stack's Pub/Sub fake serves the topics and
// subscriptions `loom up` promises, and that a message published to the
// ingress topic is accepted.
func checkPubSub(ctx context.Context, t *testing.T, st *Stack) {
	t.Helper()
	if st.PubSubAddr == "" || st.PubSubAddr != st.Addrs.PubSub {
		t.Fatalf("PubSubAddr %q, Addrs.PubSub %q", st.PubSubAddr, st.Addrs.PubSub)
	}
	conn, err := grpc.NewClient(st.PubSubAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sub := pubsubpb.NewSubscriberClient(conn)
	for _, tp := range embedded.LoomPubSubTopics() {
		for _, s := range tp.Subscriptions {
			got, err := sub.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: "projects/" + embedded.PubSubProject + "/subscriptions/" + s})
			if err != nil || got.Topic != "projects/"+embedded.PubSubProject+"/topics/"+tp.Topic {
				t.Fatalf("subscription %s: %v, %v", s, got, err)
			}
		}
	}
	_, err = pubsubpb.NewPublisherClient(conn).Publish(ctx, &pubsubpb.PublishRequest{
		Topic:    "projects/" + embedded.PubSubProject + "/topics/" + embedded.PubSubIngressTopic,
		Messages: []*pubsubpb.PubsubMessage{{Data: []byte("{}"), Attributes: map[string]string{"ce-specversion": "1.0"}}}})
	if err != nil {
		t.Fatalf("publish to the ingress topic: %v", err)
	}
}

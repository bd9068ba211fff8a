package embedded

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// The Google Pub/Sub resources `loom up` creates on its fake (see
// services/bridge/README.md): the bridge reads PubSubIngressSubscription,
// dead-letters what it refuses to PubSubDeadLetterTopic, and publishes
// Loom's public events to PubSubEventsTopic. Each topic has a subscription
// of its own so that a user can pull from it with no setup.
const (
	PubSubProject                = "loom-local"
	PubSubIngressTopic           = "loom-ingress"
	PubSubIngressSubscription    = "loom-ingress-bridge"
	PubSubDeadLetterTopic        = "loom-ingress-dlq"
	PubSubDeadLetterSubscription = "loom-ingress-dlq"
	PubSubEventsTopic            = "loom-events"
	PubSubEventsSubscription     = "loom-events"
)

// PubSubTopic is a topic to create and the subscriptions to create on it
// (ids, in the project EnsurePubSub is given).
type PubSubTopic struct {
	Topic         string
	Subscriptions []string
}

// LoomPubSubTopics are the topics and subscriptions of `loom up`.
func LoomPubSubTopics() []PubSubTopic {
	return []PubSubTopic{
		{Topic: PubSubIngressTopic, Subscriptions: []string{PubSubIngressSubscription}},
		{Topic: PubSubDeadLetterTopic, Subscriptions: []string{PubSubDeadLetterSubscription}},
		{Topic: PubSubEventsTopic, Subscriptions: []string{PubSubEventsSubscription}},
	}
}

// pubSubAckDeadline is the subscriptions' ack deadline; the client library
// extends it while a handler runs, so it only bounds how soon a message
// whose reader died is delivered again.
const pubSubAckDeadline = 30 * time.Second

// PubSub is a running Google Pub/Sub fake (pstest), serving the Pub/Sub
// gRPC API in this process without credentials. Clients reach it with
// PUBSUB_EMULATOR_HOST=Addr, or an insecure gRPC connection to Addr.
//
// pstest keeps everything in memory only: its topics, subscriptions and
// messages are gone when it closes, so a restarted `loom up` starts with
// no messages (and creates the topics again). It also drops a message
// still unacknowledged 10 minutes after it was published, and streams
// about 95 messages a second per stream: it is for one machine and for
// tests, not for production. It serves gRPC; of the REST API only publish
// (StartREST), which is what gcloud needs to send it a message.
type PubSub struct {
	// Addr is host:port, on 127.0.0.1.
	Addr string
	// RESTAddr is where StartREST serves publish over REST ("" until then).
	RESTAddr string

	srv  *pstest.Server
	rest *http.Server
	once sync.Once
}

// StartPubSub starts the fake on addr ("" or port 0 picks a free port;
// loopback only).
func StartPubSub(ctx context.Context, addr string) (*PubSub, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("start pubsub: %w", err)
	}
	port, err := loopbackPort(addr)
	if err != nil {
		return nil, fmt.Errorf("start pubsub: %w", err)
	}
	srv, err := newPstest(fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return nil, fmt.Errorf("start pubsub on 127.0.0.1:%d: %w", port, err)
	}
	return &PubSub{Addr: srv.Addr, srv: srv}, nil
}

// newPstest starts pstest on address. pstest panics when it cannot listen
// (a port in use); that becomes an error here, so that a taken port is
// reported like the broker's and Redis'.
func newPstest(address string) (srv *pstest.Server, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	return pstest.NewServerWithAddress(address), nil
}

// Close stops the fake; its messages are lost. Calling it again does
// nothing.
func (p *PubSub) Close() error {
	var err error
	p.once.Do(func() {
		if p.rest != nil {
			_ = p.rest.Close()
		}
		err = p.srv.Close()
	})
	return err
}

// Ensure creates ts in project on this fake (see EnsurePubSub).
func (p *PubSub) Ensure(ctx context.Context, project string, ts []PubSubTopic) error {
	return EnsurePubSub(ctx, p.Addr, project, ts)
}

// EnsurePubSub creates the topics and subscriptions of ts in project on
// the Pub/Sub at addr (plaintext, no credentials: a fake or an emulator),
// leaving those that exist as they are, so that it can run at every start.
func EnsurePubSub(ctx context.Context, addr, project string, ts []PubSubTopic) error {
	if project == "" {
		return errors.New("ensure pubsub: project is required")
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("ensure pubsub: %w", err)
	}
	defer conn.Close()
	pub, sub := pubsubpb.NewPublisherClient(conn), pubsubpb.NewSubscriberClient(conn)
	for _, t := range ts {
		topic := "projects/" + project + "/topics/" + t.Topic
		if _, err := pub.CreateTopic(ctx, &pubsubpb.Topic{Name: topic}); err != nil && status.Code(err) != codes.AlreadyExists {
			return fmt.Errorf("ensure pubsub: create topic %s: %w", topic, err)
		}
		for _, s := range t.Subscriptions {
			name := "projects/" + project + "/subscriptions/" + s
			_, err := sub.CreateSubscription(ctx, &pubsubpb.Subscription{Name: name, Topic: topic,
				AckDeadlineSeconds: int32(pubSubAckDeadline / time.Second)})
			if err != nil && status.Code(err) != codes.AlreadyExists {
				return fmt.Errorf("ensure pubsub: create subscription %s: %w", name, err)
			}
		}
	}
	return nil
}

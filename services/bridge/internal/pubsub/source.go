package pubsub

import (
	"context"
	"fmt"
	"maps"
	"time"

	ps "cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/loom-ml/loom/services/bridge/internal/cloudevent"
)

// ReceiveOptions bound what one subscription holds in flight. Zero fields
// take the defaults.
type ReceiveOptions struct {
	// MaxOutstandingMessages is the most messages handed to the handler and
	// not yet acknowledged (default 100): the ingress's concurrency per
	// subscription, and what a slow gateway can back up.
	MaxOutstandingMessages int
	// MaxOutstandingBytes bounds those messages' data together (default
	// 64 MiB). A single message larger than it is still delivered, alone:
	// the handler decides (the bridge dead-letters data over
	// -max-message-bytes), so that it can never block the subscription.
	MaxOutstandingBytes int
	// RetryDelay is how long a message the handler could not decide (it
	// returned an error) waits before it is nacked and so delivered again
	// (default 1s; negative: at once), so that a gateway that is down is not
	// called in a tight loop.
	RetryDelay time.Duration
	// Streams is the number of streaming pulls on the subscription (default
	// 8, at most MaxStreams). Pub/Sub spreads messages over them; pstest
	// hands out about 95 messages a second per stream (8: about 750), so
	// that streams are what bounds `loom up`'s Pub/Sub ingress.
	Streams int
	// ShutdownTimeout bounds how long stopping waits for the handlers in
	// flight; what they have not decided by then is delivered again later
	// (default 10s).
	ShutdownTimeout time.Duration
}

// Defaults of ReceiveOptions.
const (
	DefaultMaxOutstandingMessages = 100
	DefaultMaxOutstandingBytes    = 64 << 20
	DefaultRetryDelay             = time.Second
	DefaultStreams                = 8
	// MaxStreams bounds Streams.
	MaxStreams             = 16
	DefaultShutdownTimeout = 10 * time.Second
)

func (o ReceiveOptions) withDefaults() ReceiveOptions {
	if o.MaxOutstandingMessages <= 0 {
		o.MaxOutstandingMessages = DefaultMaxOutstandingMessages
	}
	if o.MaxOutstandingBytes <= 0 {
		o.MaxOutstandingBytes = DefaultMaxOutstandingBytes
	}
	if o.RetryDelay == 0 {
		o.RetryDelay = DefaultRetryDelay
	}
	if o.Streams <= 0 {
		o.Streams = DefaultStreams
	}
	o.Streams = min(o.Streams, MaxStreams)
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = DefaultShutdownTimeout
	}
	return o
}

// Source reads one subscription: a cloudevent.Source.
type Source struct {
	sub  *ps.Subscriber
	name string
	opts ReceiveOptions
}

var _ cloudevent.Source = (*Source)(nil)

// Source returns the source of the subscription nameOrID (an id in the
// client's project, or a full name), checking that it exists.
func (c *Client) Source(ctx context.Context, nameOrID string, opts ReceiveOptions) (*Source, error) {
	name, err := c.SubscriptionName("pubsub-subscriptions", nameOrID)
	if err != nil {
		return nil, err
	}
	_, err = c.ps.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: name})
	if err := exists(err, "subscription", name, "-pubsub-subscriptions"); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	sub := c.ps.Subscriber(name)
	sub.ReceiveSettings.MaxOutstandingMessages = opts.MaxOutstandingMessages
	sub.ReceiveSettings.MaxOutstandingBytes = opts.MaxOutstandingBytes
	sub.ReceiveSettings.NumGoroutines = opts.Streams
	sub.ReceiveSettings.ShutdownOptions = &ps.ShutdownOptions{Behavior: ps.ShutdownBehaviorWaitForProcessing, Timeout: opts.ShutdownTimeout}
	return &Source{sub: sub, name: "pubsub:" + name, opts: opts}, nil
}

// Name is "pubsub:projects/{p}/subscriptions/{s}" (Delivery.Transport).
func (s *Source) Name() string { return s.name }

// Run hands each message to h as a Delivery (the event parsed from its
// "ce-" attributes, or ParseErr; Raw as it arrived; Attempt from Pub/Sub's
// delivery attempt, which the service counts only on subscriptions with a
// dead-letter policy, else 0). A message is acknowledged when h returns
// nil and nacked, after RetryDelay, when h returns an error, so that it
// comes again. Run returns nil when ctx ends, after the handlers in flight
// (ShutdownTimeout), and an error when the subscription cannot be read.
//
// h's context carries the transport, which this package's DeadLetters
// name in loom-dlq-transport.
func (s *Source) Run(ctx context.Context, h cloudevent.Handler) error {
	err := s.sub.Receive(ctx, func(mctx context.Context, m *ps.Message) {
		if err := h(withTransport(mctx, s.name), delivery(s.name, m)); err != nil {
			if s.opts.RetryDelay > 0 {
				t := time.NewTimer(s.opts.RetryDelay)
				select {
				case <-t.C:
				case <-mctx.Done():
					t.Stop()
				}
			}
			m.Nack()
			return
		}
		m.Ack()
	})
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: %w", s.name, err)
	}
	return nil
}

// delivery is m as the ingress sees it.
func delivery(transport string, m *ps.Message) cloudevent.Delivery {
	ev, perr := cloudevent.FromPubSub(m.Attributes, m.Data)
	d := cloudevent.Delivery{Transport: transport, Event: ev, ParseErr: perr,
		Raw: cloudevent.Raw{Attributes: maps.Clone(m.Attributes), Data: m.Data}}
	if d.Raw.Attributes == nil {
		d.Raw.Attributes = map[string]string{}
	}
	if m.DeliveryAttempt != nil {
		d.Attempt = *m.DeliveryAttempt
	}
	return d
}

type transportKey struct{}

func withTransport(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, transportKey{}, name)
}

// transportOf is the transport a Source put in ctx ("" if none).
func transportOf(ctx context.Context) string {
	s, _ := ctx.Value(transportKey{}).(string)
	return s
}

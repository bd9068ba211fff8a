package pubsub

import (
	"context"
	"errors"

	"github.com/loom-ml/loom/libs/errs"

	"github.com/loom-ml/loom/services/bridge/internal/cloudevent"
)

// MaxSubscriptions bounds -pubsub-subscriptions: each is a stream and up
// to ReceiveOptions.MaxOutstandingMessages handlers at once.
const MaxSubscriptions = 32

// Ingress is what the bridge reads from Pub/Sub: a Source per configured
// subscription and the dead letters they share.
type Ingress struct {
	// Client is the connection the sources use; the egress may make its
	// sinks from it (NewSink).
	Client *Client
	// Sources are cfg.Subscriptions' sources, in order.
	Sources []cloudevent.Source
	// DeadLetters publishes to cfg.DeadLetterTopic; it names the transport
	// a Source put in the handler's context.
	DeadLetters *DeadLetters
}

// Close closes the client (stopping the dead letters' publisher).
func (in *Ingress) Close() error { return in.Client.Close() }

// OpenIngress dials Pub/Sub and builds a Source for each of
// cfg.Subscriptions and the DeadLetters of cfg.DeadLetterTopic (required
// then), checking that each exists. With no subscriptions it returns nil,
// nil: Pub/Sub ingress is off.
func OpenIngress(ctx context.Context, cfg Config) (*Ingress, error) {
	if len(cfg.Subscriptions) == 0 {
		return nil, nil
	}
	if len(cfg.Subscriptions) > MaxSubscriptions {
		return nil, errs.Invalid("pubsub-subscriptions", "%d subscriptions, over the limit of %d", len(cfg.Subscriptions), MaxSubscriptions)
	}
	if cfg.DeadLetterTopic == "" {
		return nil, errors.New("-pubsub-subscriptions needs -pubsub-dead-letter-topic: refused messages must go somewhere")
	}
	c, err := Dial(ctx, cfg)
	if err != nil {
		return nil, err
	}
	in := &Ingress{Client: c}
	seen := map[string]bool{}
	for _, s := range cfg.Subscriptions {
		src, err := c.Source(ctx, s, cfg.Receive)
		if err != nil {
			_ = c.Close()
			return nil, err
		}
		if seen[src.Name()] { // two readers of one subscription in one process share its messages for nothing
			continue
		}
		seen[src.Name()] = true
		in.Sources = append(in.Sources, src)
	}
	if in.DeadLetters, err = c.DeadLetters(ctx, cfg.DeadLetterTopic); err != nil {
		_ = c.Close()
		return nil, err
	}
	return in, nil
}

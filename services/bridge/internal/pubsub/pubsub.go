// Package pubsub is the bridge's Google Pub/Sub transport: a
// cloudevent.Source per ingress subscription, cloudevent.DeadLetters on a
// dead-letter topic, and a cloudevent.Sink per egress topic, all through
// cloud.google.com/go/pubsub/v2 and one Client. Against Google it uses
// Application Default Credentials; against an emulator or pstest (`loom
// up`'s, libs/embedded.StartPubSub) a plaintext connection and no
// credentials.
package pubsub

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	ps "cloud.google.com/go/pubsub/v2"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/loom-ml/loom/libs/errs"
)

// Config is what the bridge's Pub/Sub flags say (bridge.PubSubConfig),
// plus the bounds on what a subscription holds in flight.
type Config struct {
	// Endpoint is an emulator's or pstest's host:port, reached in
	// plaintext without credentials; empty: Google's, with Application
	// Default Credentials (or PUBSUB_EMULATOR_HOST, which the client
	// library reads itself).
	Endpoint string
	// Project is the Google Cloud project of the names given as ids.
	Project string
	// Subscriptions are the ingress subscriptions, ids or full names
	// (projects/{p}/subscriptions/{s}).
	Subscriptions []string
	// DeadLetterTopic receives refused ingress messages: an id or
	// projects/{p}/topics/{t}.
	DeadLetterTopic string
	// Receive bounds each subscription's messages in flight.
	Receive ReceiveOptions
}

// Client is one connection to Pub/Sub, shared by the bridge's sources,
// dead letters and sinks. Close it when done: it stops their publishers.
type Client struct {
	ps      *ps.Client
	conn    *grpc.ClientConn // the emulator's; nil against Google
	project string

	mu   sync.Mutex
	pubs []*ps.Publisher
}

// noProject stands in for the client library's project when none is
// configured: the library only uses it to expand ids, and every name this
// package hands it is already a full one.
const noProject = "loom-no-project"

// Dial connects to Pub/Sub as cfg says (Endpoint, Project). It does not
// call the service: a name that does not exist is found by Source,
// DeadLetters and NewSink.
func Dial(ctx context.Context, cfg Config) (*Client, error) {
	c := &Client{project: cfg.Project}
	var opts []option.ClientOption
	if cfg.Endpoint != "" {
		conn, err := grpc.NewClient(cfg.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, fmt.Errorf("pubsub endpoint %q: %w", cfg.Endpoint, err)
		}
		c.conn = conn
		opts = append(opts, option.WithGRPCConn(conn), option.WithoutAuthentication())
	}
	project := cfg.Project
	if project == "" {
		project = noProject
	}
	client, err := ps.NewClient(ctx, project, opts...)
	if err != nil {
		if c.conn != nil {
			_ = c.conn.Close()
		}
		return nil, fmt.Errorf("pubsub client: %w", err)
	}
	c.ps = client
	return c, nil
}

// Project is the configured project of names given as ids ("" if none).
func (c *Client) Project() string { return c.project }

// Close stops every publisher made from c (publishing what they hold)
// and closes the connection. Calling it again does nothing harmful.
func (c *Client) Close() error {
	c.mu.Lock()
	pubs := c.pubs
	c.pubs = nil
	c.mu.Unlock()
	for _, p := range pubs {
		p.Stop()
	}
	if c.ps == nil {
		return nil
	}
	err := c.ps.Close()
	if c.conn != nil {
		err = errors.Join(err, c.conn.Close())
		c.conn = nil
	}
	c.ps = nil
	return err
}

func (c *Client) publisher(name string) *ps.Publisher {
	p := c.ps.Publisher(name)
	c.mu.Lock()
	c.pubs = append(c.pubs, p)
	c.mu.Unlock()
	return p
}

// SubscriptionName resolves an id or a full name to the full name
// projects/{p}/subscriptions/{s}; field names the flag it came from, for
// the error.
func (c *Client) SubscriptionName(field, nameOrID string) (string, error) {
	return c.resolve(field, "subscriptions", nameOrID)
}

// TopicName resolves an id or a full name to projects/{p}/topics/{t}.
func (c *Client) TopicName(field, nameOrID string) (string, error) {
	return c.resolve(field, "topics", nameOrID)
}

// maxNameLen bounds a Pub/Sub id (Google's limit for topic and
// subscription ids).
const maxNameLen = 255

func (c *Client) resolve(field, kind, s string) (string, error) {
	parts := strings.Split(s, "/")
	switch {
	case len(parts) == 1:
		if c.project == "" {
			return "", errs.Invalid(field, "%q is an id: give -pubsub-project, or the full name projects/{project}/%s/%s", s, kind, s)
		}
		if err := checkID(s); err != nil {
			return "", errs.Invalid(field, "%q: %v", s, err)
		}
		return "projects/" + c.project + "/" + kind + "/" + s, nil
	case len(parts) == 4 && parts[0] == "projects" && parts[1] != "" && parts[2] == kind:
		if err := checkID(parts[3]); err != nil {
			return "", errs.Invalid(field, "%q: %v", s, err)
		}
		return s, nil
	default:
		return "", errs.Invalid(field, "%q: want an id or projects/{project}/%s/{id}", s, kind)
	}
}

// checkID applies Pub/Sub's rules for a topic or subscription id: 3 to 255
// characters, starting with a letter, of letters, digits and -_.~+%.
func checkID(id string) error {
	if len(id) < 3 || len(id) > maxNameLen {
		return fmt.Errorf("an id is 3 to %d characters", maxNameLen)
	}
	if c := id[0]; (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') {
		return errors.New("an id starts with a letter")
	}
	for _, c := range id {
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && !strings.ContainsRune("-_.~+%", c) {
			return fmt.Errorf("%q is not allowed in an id (letters, digits and -_.~+%%)", c)
		}
	}
	return nil
}

// exists reports a missing topic or subscription at start rather than at
// the first message. A credential that may publish or consume but not read
// the resource (roles/pubsub.publisher has no topics.get) is not refused:
// the first use tells.
func exists(err error, what, name, flag string) error {
	switch status.Code(err) {
	case codes.OK, codes.PermissionDenied:
		return nil
	case codes.NotFound:
		return fmt.Errorf("pubsub %s %s does not exist: create it, or fix %s", what, name, flag)
	default:
		return fmt.Errorf("pubsub %s %s: %w", what, name, err)
	}
}

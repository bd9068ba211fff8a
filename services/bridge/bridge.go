// Package bridge is Loom's bridge service: other systems' way in and out.
// In: it reads CloudEvents from Pub/Sub subscriptions and from the Kafka
// topic loom.ingress.v1, and applies each as the same call through the
// gateway's API, with the credential the message carries, so that the same
// authentication, permission table, validation and quotas decide it; each
// message is applied once (its CloudEvents id and source are the key), and
// what is refused goes to dead letters with the reason and is answered by a
// result event. Out: it turns Loom's internal events into the public contract
// (loom.public.v1) and publishes them to Kafka and Pub/Sub as CloudEvents.
// See README.md beside this file for what it owns, the topics it reads and
// writes, and how it recovers.
package bridge

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/service"
	"github.com/loom-ml/loom/libs/topics"
	"github.com/loom-ml/loom/services/bridge/internal/cloudevent"
)

// Default addresses (LOOM_BRIDGE_GRPC_ADDR, LOOM_BRIDGE_HTTP_ADDR).
const (
	DefaultGRPCAddr = "127.0.0.1:7076"
	DefaultHTTPAddr = "127.0.0.1:9176"
)

// Config is the bridge's configuration.
type Config struct {
	config.Common
	// GatewayAddr is the gateway's gRPC address: every ingress message is
	// applied as a call there, with the message's credential.
	GatewayAddr string
	// IngressTopic is the Kafka topic other systems produce to ("" turns
	// Kafka ingress off); its dead letters go to "<IngressTopic>.dlq".
	IngressTopic string
	// MaxMessageBytes bounds one message's data.
	MaxMessageBytes int
	// PubSub configures Google Pub/Sub, in and out.
	PubSub PubSubConfig
	// Egress lists where public events go, each "kafka:{topic}" or
	// "pubsub:projects/{p}/topics/{t}", optionally followed by
	// "?project=a,b&type=prefix" to send only some.
	Egress []string
	// DedupeTTL is how long a decided message's id is remembered: a
	// redelivery within it is not applied again.
	DedupeTTL time.Duration
}

// PubSubConfig is the bridge's Pub/Sub.
type PubSubConfig struct {
	// Endpoint is an emulator's or pstest's address ("host:port", plaintext,
	// no credentials); empty uses Google's with Application Default
	// Credentials (or PUBSUB_EMULATOR_HOST, as the client library reads it).
	Endpoint string
	// Project is the Google Cloud project of the subscriptions and topics
	// named by id alone.
	Project string
	// Subscriptions are the ingress subscriptions (ids or full names).
	Subscriptions []string
	// DeadLetterTopic receives the Pub/Sub messages the bridge refused, with
	// the reason (id or full name); required with Subscriptions.
	DeadLetterTopic string
}

// RegisterFlags adds the bridge's flags to fs, defaults from LOOM_* variables.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Common.Register(fs, "BRIDGE", DefaultGRPCAddr, DefaultHTTPAddr)
	fs.StringVar(&c.GatewayAddr, "gateway-addr", config.Env("LOOM_BRIDGE_GATEWAY_ADDR", "127.0.0.1:7070"),
		"the gateway's gRPC address: ingress messages are applied as calls there (LOOM_BRIDGE_GATEWAY_ADDR)")
	fs.StringVar(&c.IngressTopic, "ingress-topic", config.Env("LOOM_BRIDGE_INGRESS_TOPIC", topics.Ingress),
		"Kafka topic other systems produce CloudEvents to; empty turns Kafka ingress off (LOOM_BRIDGE_INGRESS_TOPIC)")
	fs.IntVar(&c.MaxMessageBytes, "max-message-bytes", int(config.EnvInt("LOOM_BRIDGE_MAX_MESSAGE_BYTES", cloudevent.DefaultMaxData)),
		"largest message data accepted; a larger one is dead-lettered (LOOM_BRIDGE_MAX_MESSAGE_BYTES)")
	fs.StringVar(&c.PubSub.Endpoint, "pubsub-endpoint", config.Env("LOOM_BRIDGE_PUBSUB_ENDPOINT", ""),
		"Pub/Sub emulator or pstest address (host:port); empty: Google's, with Application Default Credentials (LOOM_BRIDGE_PUBSUB_ENDPOINT)")
	fs.StringVar(&c.PubSub.Project, "pubsub-project", config.Env("LOOM_BRIDGE_PUBSUB_PROJECT", ""),
		"Google Cloud project of subscriptions and topics named by id (LOOM_BRIDGE_PUBSUB_PROJECT)")
	listVar(fs, &c.PubSub.Subscriptions, "pubsub-subscriptions", "LOOM_BRIDGE_PUBSUB_SUBSCRIPTIONS",
		"Pub/Sub subscriptions to read ingress messages from, comma-separated; empty: none")
	fs.StringVar(&c.PubSub.DeadLetterTopic, "pubsub-dead-letter-topic", config.Env("LOOM_BRIDGE_PUBSUB_DEAD_LETTER_TOPIC", ""),
		"Pub/Sub topic the refused Pub/Sub messages go to, with the reason (LOOM_BRIDGE_PUBSUB_DEAD_LETTER_TOPIC)")
	listVar(fs, &c.Egress, "egress", "LOOM_BRIDGE_EGRESS",
		"where public events go, separated by spaces: kafka:{topic} or pubsub:projects/{p}/topics/{t}, each optionally ?project=a,b&type=prefix; empty: kafka:"+topics.Public)
	fs.DurationVar(&c.DedupeTTL, "dedupe-ttl", config.EnvDuration("LOOM_BRIDGE_DEDUPE_TTL", 8*24*time.Hour),
		"how long a decided message id is remembered; longer than any transport keeps a message (LOOM_BRIDGE_DEDUPE_TTL)")
}

// RunArgs runs the bridge from a command line (args, without the program
// name), as the bridge binary and loom's in-process stack both do.
func RunArgs(ctx context.Context, args []string) error {
	cfg, err := config.ParseArgs("bridge", args, (*Config).RegisterFlags)
	if err != nil {
		return err
	}
	return Run(ctx, cfg)
}

// Run runs the bridge until ctx ends, then shuts down gracefully.
func Run(ctx context.Context, cfg Config) error {
	if len(cfg.Egress) == 0 {
		cfg.Egress = []string{"kafka:" + topics.Public}
	}
	if len(cfg.PubSub.Subscriptions) > 0 && cfg.PubSub.DeadLetterTopic == "" {
		return fmt.Errorf("bridge: -pubsub-subscriptions needs -pubsub-dead-letter-topic: refused messages must go somewhere")
	}
	// Only Loom services (the gateway) call this API: each call carries a
	// service token.
	internal, err := service.InternalAuth(cfg.Common)
	if err != nil {
		return err
	}
	base, err := service.New(ctx, "bridge", cfg.Common, internal...)
	if err != nil {
		return fmt.Errorf("bridge: %w", err)
	}
	w, err := wire(ctx, cfg, base)
	if err != nil {
		_ = base.Close()
		return fmt.Errorf("bridge: %w", err)
	}
	defer w.close()
	return base.Run(ctx, w.consumers, w.loops...)
}

// wiring is what Run runs: the egress's consumers and the ingress's sources
// as loops, and what to close after.
type wiring struct {
	consumers []service.Consume
	loops     []func(context.Context) error
	closers   []func()
}

func (w *wiring) close() {
	for i := len(w.closers) - 1; i >= 0; i-- {
		w.closers[i]()
	}
}

// listVar registers a list flag whose default is the variable env's value;
// the egress list is separated by spaces (a sink's filter holds commas),
// the others by commas.
func listVar(fs *flag.FlagSet, p *[]string, name, env, usage string) {
	split := config.SplitList
	if name == "egress" {
		split = strings.Fields
	}
	*p = split(config.Env(env, ""))
	fs.Func(name, usage+" ("+env+")", func(s string) error {
		*p = split(s)
		return nil
	})
}

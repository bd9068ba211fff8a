package bridge

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestRunRefusesPubSubWithoutDeadLetters: Pub/Sub ingress without a
// dead-letter topic would have nowhere to put what it refuses, so the
// bridge does not start, and says which flag is missing.
func TestRunRefusesPubSubWithoutDeadLetters(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := RunArgs(ctx, []string{"-pubsub-subscriptions=loom-ingress-bridge", "-pubsub-project=p"})
	if err == nil || !strings.Contains(err.Error(), "-pubsub-dead-letter-topic") {
		t.Fatalf("RunArgs = %v, want a refusal naming -pubsub-dead-letter-topic", err)
	}
}

// TestEgressListSplitsOnSpaces: a sink's filter holds commas, so -egress
// is a space-separated list, and the Pub/Sub subscriptions a comma one.
func TestEgressListSplitsOnSpaces(t *testing.T) {
	t.Parallel()
	cfg, err := parseForTest([]string{"-egress=kafka:a?project=x,y pubsub:projects/p/topics/t",
		"-pubsub-subscriptions=s1, s2"})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Egress) != 2 || cfg.Egress[0] != "kafka:a?project=x,y" || len(cfg.PubSub.Subscriptions) != 2 || cfg.PubSub.Subscriptions[1] != "s2" {
		t.Fatalf("egress %q, subscriptions %q", cfg.Egress, cfg.PubSub.Subscriptions)
	}
}

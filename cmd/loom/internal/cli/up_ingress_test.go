package cli

import (
	"bytes"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/loom-ml/loom/cmd/loom/stack"
)

// `loom up` says where to send messages over each transport, its columns
// aligned.
func TestPrintIngressAligned(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	printIngress(&b, &stack.Stack{BrokerAddr: "127.0.0.1:7092", PubSubAddr: "127.0.0.1:7085", PubSubRESTAddr: "127.0.0.1:7086"})
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 6 {
		t.Fatalf("output:\n%s", b.String())
	}
	for i, want := range [][]string{
		{"Kafka", "broker 127.0.0.1:7092", "topic loom.ingress.v1"},
		{"dead letters loom.ingress.v1.dlq", "public events loom.public.v1"},
		{"Pub/Sub", "PUBSUB_EMULATOR_HOST=127.0.0.1:7085", "project loom-local", "topic loom-ingress"},
		{"dead letters loom-ingress-dlq", "public events loom-events"},
		{"gcloud: CLOUDSDK_API_ENDPOINT_OVERRIDES_PUBSUB=http://127.0.0.1:7086/"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i+1], w) {
				t.Errorf("line %q lacks %q", lines[i+1], w)
			}
		}
	}
	col := strings.Index(lines[1], "broker")
	for _, l := range lines[2:] {
		if len(l) <= col || l[col-1] != ' ' || l[col] == ' ' {
			t.Errorf("second column not at %d:\n%s", col, b.String())
		}
	}
}

// `loom up` runs the Pub/Sub fake, says where it and the Kafka ingress
// are, and stops the fake when it stops.
func TestUpSaysWhereToSendMessages(t *testing.T) {
	t.Parallel()
	out := upAndStop(t, t.TempDir(), t.TempDir(), func(string) {})
	m := regexp.MustCompile(`PUBSUB_EMULATOR_HOST=(127\.0\.0\.1:\d+), project loom-local, topic loom-ingress\n`).FindStringSubmatch(out)
	if m == nil || !strings.Contains(out, "  Kafka    broker 127.0.0.1:") {
		t.Fatalf("loom up did not say where to send messages:\n%s", out)
	}
	rest := regexp.MustCompile(`CLOUDSDK_API_ENDPOINT_OVERRIDES_PUBSUB=http://(127\.0\.0\.1:\d+)/`).FindStringSubmatch(out)
	if rest == nil {
		t.Fatalf("loom up did not say where gcloud publishes:\n%s", out)
	}
	// Stopped with loom up: nothing listens there any more.
	for _, host := range []string{m[1], rest[1]} {
		if c, err := net.DialTimeout("tcp", host, time.Second); err == nil {
			c.Close()
			t.Fatalf("the Pub/Sub fake on %s outlived loom up", host)
		}
	}
}

package bus_test

import (
	"context"
	"crypto/tls"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
)

// Against a broker that requires SASL/SCRAM, a producer and a consumer
// with the service's user and password create topics, write and read; a
// client without them, or with a wrong password, is refused.
func TestSASLSCRAMAgainstKfake(t *testing.T) {
	t.Parallel()
	for _, mech := range []string{"SCRAM-SHA-256", "SCRAM-SHA-512"} {
		t.Run(mech, func(t *testing.T) {
			t.Parallel()
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.Superuser(mech, "loom-scheduler", "s3cret"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			broker := c.ListenAddrs()[0]
			sec, err := bus.NewSecurity(bus.KafkaOptions{SASLMechanism: mech, User: "loom-scheduler", Password: "s3cret"})
			if err != nil || sec == nil {
				t.Fatalf("NewSecurity: %v, %v", sec, err)
			}
			checkSecureBroker(t, broker, sec, "sasl.test", "with SCRAM", "a SASL broker",
				map[string]*bus.Security{"no SASL": nil, "wrong password": mustSecurity(t, mech, "loom-scheduler", "guess")})
		})
	}
}

func mustSecurity(t *testing.T, mech, user, pass string) *bus.Security {
	s, err := bus.NewSecurity(bus.KafkaOptions{SASLMechanism: mech, User: user, Password: pass})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestNewSecurityRefusesWhatCannotWork(t *testing.T) {
	t.Parallel()
	if s, err := bus.NewSecurity(bus.KafkaOptions{}); s != nil || err != nil {
		t.Fatalf("nothing asked: %v, %v; want nil, nil", s, err)
	}
	for _, o := range []bus.KafkaOptions{{SASLMechanism: "GSSAPI", User: "u"}, {SASLMechanism: "PLAIN"}, {TLSCert: "/x"}, {TLSCA: "/nonexistent"}} {
		if _, err := bus.NewSecurity(o); err == nil {
			t.Errorf("NewSecurity(%+v) accepted", o)
		}
	}
}

// TestTLSAgainstKfake: with LOOM_KAFKA_TLS_CA naming the broker's CA,
// producers, consumers and topic creation speak TLS to a TLS-only broker;
// a plaintext client, or one trusting another CA, does not get through.
func TestTLSAgainstKfake(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, cert, key := testkit.TLSFiles(t, dir, "kafka")
	other, _, _ := testkit.TLSFiles(t, dir, "other")
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.TLS(&tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	broker := c.ListenAddrs()[0]
	sec, err := bus.NewSecurity(bus.KafkaOptions{TLS: true, TLSCA: ca})
	if err != nil || sec == nil {
		t.Fatalf("NewSecurity: %v, %v", sec, err)
	}
	otherCA, err := bus.NewSecurity(bus.KafkaOptions{TLS: true, TLSCA: other})
	if err != nil {
		t.Fatal(err)
	}
	checkSecureBroker(t, broker, sec, "tls.test", "over TLS", "a TLS-only broker",
		map[string]*bus.Security{"plaintext": nil, "another CA": otherCA})
}

// checkSecureBroker shows that sec reaches broker (topic creation, a
// publish, a consumer reading it back) and that each of refused does not
// get a record published; how says how sec connects, broker what it is
// (for the messages).
func checkSecureBroker(t *testing.T, broker string, sec *bus.Security, topic, how, what string, refused map[string]*bus.Security) {
	t.Helper()
	ctx := testkit.Context(t, 30*time.Second)
	if err := bus.EnsureTopicsWith(ctx, []string{broker}, sec, []topics.Spec{{Name: topic, Partitions: 1}, {Name: topic + topics.DLQSuffix, Partitions: 1}}); err != nil {
		t.Fatalf("EnsureTopics %s: %v", how, err)
	}
	p := bus.NewSecureProducer([]string{broker}, sec)
	t.Cleanup(func() { _ = p.Close() })
	ev := event(topic, "k", 1)
	if err := p.Publish(ctx, ev); err != nil {
		t.Fatalf("publish %s: %v", how, err)
	}
	var got atomic.Value
	startConsumer(t, bus.ConsumerConfig{Brokers: []string{broker}, GroupID: "g", Topics: []string{topic}, Security: sec}, p,
		func(ctx context.Context, e envelope.Event) error { got.Store(e.ID); return nil })
	testkit.WaitFor(t, 30*time.Second, "the record read "+how, func() (bool, error) { return got.Load() == ev.ID, nil })
	for name, s := range refused {
		bad := bus.NewSecureProducer([]string{broker}, s)
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		err := bad.Publish(pctx, event(topic, "k", 2))
		cancel()
		_ = bad.CloseWithin(time.Second)
		if err == nil {
			t.Errorf("%s: publish succeeded against %s", name, what)
		}
	}
}

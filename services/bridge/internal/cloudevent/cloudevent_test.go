package cloudevent

import (
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

func TestRoundTripKafkaAndPubSub(t *testing.T) {
	t.Parallel()
	ev := Event{ID: "1", Source: "//pipelines/etl", Type: "loom.ingress.v1.SubmitJob", Subject: "s",
		Time: time.Date(2026, 12, 2, 10, 0, 0, 5, time.UTC), DataContentType: "application/json",
		Extensions: map[string]string{ExtCredential: "loomk_x"}, Data: []byte(`{}`)}
	k, err := FromKafka(ev.KafkaHeaders(), ev.Data)
	if err != nil || k.ID != ev.ID || k.Source != ev.Source || k.Type != ev.Type || !k.Time.Equal(ev.Time) ||
		k.Extensions[ExtCredential] != "loomk_x" || k.DataContentType != "application/json" {
		t.Fatalf("kafka round trip: %+v, %v", k, err)
	}
	p, err := FromPubSub(ev.PubSubAttributes(), ev.Data)
	if err != nil || p.ID != ev.ID || p.Subject != "s" || p.Extensions[ExtCredential] != "loomk_x" {
		t.Fatalf("pubsub round trip: %+v, %v", p, err)
	}
	if err := k.Validate(DefaultMaxData); err != nil {
		t.Fatal(err)
	}
}

func TestRefusals(t *testing.T) {
	t.Parallel()
	if _, err := FromKafka([]kafka.Header{{Key: "ce_id", Value: []byte("1")}}, nil); err == nil || !strings.Contains(err.Error(), "specversion") {
		t.Fatalf("no specversion: %v", err)
	}
	if _, err := FromKafka([]kafka.Header{{Key: "ce_specversion", Value: []byte("1.0")}, {Key: "ce_id", Value: []byte("1")}, {Key: "ce_id", Value: []byte("2")}}, nil); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("duplicate header: %v", err)
	}
	long := strings.Repeat("x", MaxAttrLen+1)
	if _, err := FromPubSub(map[string]string{"ce-specversion": "1.0", "ce-id": long}, nil); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("long attribute: %v", err)
	}
	ev := Event{ID: "1", Source: "s", Type: "t", Data: make([]byte, 11)}
	if err := ev.Validate(10); err == nil || !strings.Contains(err.Error(), "limit of 10") {
		t.Fatalf("data limit: %v", err)
	}
	if err := (Event{Source: "s", Type: "t"}).Validate(0); err == nil || !strings.Contains(err.Error(), `"id"`) {
		t.Fatalf("missing id: %v", err)
	}
	if r := (Raw{Attributes: map[string]string{"ce_credential": "k", "ce-credential": "k", "ce_id": "1"}}).Redacted(); len(r.Attributes) != 1 {
		t.Fatalf("redacted: %v", r.Attributes)
	}
}

package ingress

import (
	"strings"
	"testing"

	"github.com/segmentio/kafka-go"
)

// FuzzDecide: whatever a record holds, Decide neither panics nor both
// calls and refuses, a refusal's reason is bounded and never carries the
// credential, and a call's request id stays within the gateway's bound.
//
//	go test -run '^$' -fuzz FuzzDecide -fuzztime 30s ./services/bridge/internal/ingress/
func FuzzDecide(f *testing.F) {
	f.Add("loom.ingress.v1.SubmitJob", "m-1", "application/json", `{"parent":"projects/p","job":{"nodeCount":1}}`, "loomk_SECRET")
	f.Add("loom.ingress.v1.CancelJob", "", "text/plain", `{"name":5}`, "")
	f.Add("loom.ingress.v1.UploadModel", "x", "application/cloudevents+json", `{"model":{"labels":{"a":"b"}}}`, "loomk_SECRET")
	f.Add("nope", strings.Repeat("i", 2000), "", `[[[[`, "loomk_SECRET")
	f.Fuzz(func(t *testing.T, typ, id, ct, data, cred string) {
		m := kafka.Message{Value: []byte(data), Headers: []kafka.Header{
			{Key: "ce_specversion", Value: []byte("1.0")}, {Key: "ce_id", Value: []byte(id)},
			{Key: "ce_source", Value: []byte("//s")}, {Key: "ce_type", Value: []byte(typ)},
			{Key: "content-type", Value: []byte(ct)}, {Key: "ce_credential", Value: []byte(cred)}}}
		call, ref := Decide(Delivery("kafka:t", m), 1<<16)
		if (call == nil) == (ref == nil) {
			t.Fatalf("Decide = %v, %v: want exactly one", call, ref)
		}
		if ref != nil {
			if len(ref.Reason) > maxReason+len("…") || ref.Reason == "" {
				t.Fatalf("reason of %d bytes", len(ref.Reason))
			}
			if len(cred) >= 8 && strings.Contains(ref.Reason, cred) && !strings.Contains(data+id+typ+ct, cred) {
				t.Fatalf("the reason %q carries the credential", ref.Reason)
			}
			return
		}
		r := call.Request.ProtoReflect()
		if fd := r.Descriptor().Fields().ByName("request_id"); fd != nil && len(r.Get(fd).String()) > 128 {
			// A producer's own over-long request_id is the gateway's to refuse.
			if !strings.Contains(data, "equest") {
				t.Fatalf("derived request_id %q over 128 bytes", r.Get(fd).String())
			}
		}
	})
}

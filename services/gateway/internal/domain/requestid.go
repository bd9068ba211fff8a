package domain

import (
	"crypto/sha256"
	"encoding/hex"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/errs"
)

// RequestFingerprint is what a request_id is remembered with besides the
// result it gave: a hash of the request as sent, its request_id left out.
// A retry sends the same request again and matches it; the same id sent
// with another request (another cluster_id, another script) does not,
// and is refused (RequestIDReused) instead of being answered the first
// request's result, as Stripe's and Twilio's idempotency keys are: the
// caller would otherwise believe the second request was carried out.
// "" for a request that cannot be encoded (it then matches anything).
func RequestFingerprint(req proto.Message) string {
	m := proto.Clone(req)
	if fd := m.ProtoReflect().Descriptor().Fields().ByName("request_id"); fd != nil {
		m.ProtoReflect().Clear(fd)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// RequestIDReused is the error for a request_id sent again with another
// request than the first (stored and sent are their fingerprints; either
// "" — a record from before fingerprints were kept — matches anything):
// InvalidArgument naming request_id; nil when they match. rid has passed
// CheckRequestID (every replay checks it before it looks the id up).
func RequestIDReused(rid, stored, sent string) error {
	if stored == "" || sent == "" || stored == sent {
		return nil
	}
	return errs.Invalid("request_id", "%q was sent before with a different request; a retry must repeat the request exactly, and a new request needs a new request_id", rid)
}

package clusterspec

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/errs"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Etag returns the strong etag (AIP-154) of c's spec: a hash of the
// deterministic encoding of every field but the output-only ones (status,
// create_time, update_time) and etag itself. Node churn, which changes only
// the status, does not change it; any change an update makes to the spec
// does. c is not changed.
func Etag(c *loomv1.Cluster) string {
	spec := proto.Clone(c).(*loomv1.Cluster)
	spec.Status, spec.CreateTime, spec.UpdateTime, spec.Etag = nil, nil, nil, ""
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(spec)
	if err != nil {
		// A Cluster always encodes (proto3 strings are checked for UTF-8
		// when they are decoded or built by Loom); an etag that matches
		// nothing refuses a conditional request rather than letting it by.
		return "unencodable"
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// CheckEtag is the AIP-154 freshness check of a request that sent etag
// sent (empty: no check) for cluster name, whose spec now has etag current:
// nil when they match, otherwise an errs.Aborted error with EtagMismatch's
// message.
func CheckEtag(verb, name, sent, current string) error {
	if msg := EtagMismatch(verb, name, sent, current); msg != "" {
		return fmt.Errorf("%s: %w", msg, errs.Aborted)
	}
	return nil
}

// EtagMismatch is "" when sent is empty or current, otherwise why a
// request (verb: "update", "delete") that sent etag sent for cluster name is
// refused: both etags, and what to do (read the cluster again and retry).
func EtagMismatch(verb, name, sent, current string) string {
	if sent == "" || sent == current {
		return ""
	}
	return fmt.Sprintf("%s cluster %s: etag %q does not match the cluster's current etag %q: the cluster changed since it was read; "+
		"read it again (loom clusters get %s -o json), make the change on what it is now and retry",
		verb, name, sent, current, name[strings.LastIndexByte(name, '/')+1:])
}

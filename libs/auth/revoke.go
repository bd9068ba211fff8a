package auth

import (
	"encoding/json"
	"fmt"
	"time"
)

// The revocation list of removed nodes' identities, in Redis: the
// provisioner writes it (under its own prefix) in the same step that removes
// a node and emits NodeRemoved; every service reads it (the gateway on each
// call of a node, the bus verifiers through a copy refreshed every second).
const (
	// RevokedNodesKey is the hash of revocations: field the node's full
	// name, value a NodeRevocation (EncodeNodeRevocation).
	RevokedNodesKey = "provisioner:revoked-nodes"
	// RevokedNodesVersionKey changes with every write of RevokedNodesKey,
	// so that a reader polls one short string and reads the hash only
	// when it changed.
	RevokedNodesVersionKey = "provisioner:revoked-nodes:version"
	// RevocationSlack is how long past the longest lifetime of the
	// identities it revokes a revocation is kept: clocks of the machines
	// that issue and check identities may differ by up to it.
	RevocationSlack = 5 * time.Minute
)

// NodeRevocation says that the identities of a removed node made before a
// point are no longer valid: those of a registration (NodeCert.Reg) made
// at or before Before's time, and those of no timed registration at all.
// A node made again with the same name registers after it (the gateway
// names its registration after Before), so its new identities are not
// revoked. Until is when every identity it revokes has expired: the entry
// can go then.
type NodeRevocation struct {
	// Before is a registration (NewRegistration): the latest one revoked.
	Before string `json:"before"`
	// Until is when the entry can be forgotten.
	Until time.Time `json:"until"`
}

// Revokes reports whether an identity of registration reg is revoked by r:
// reg was not made after r.Before (SupersedesRegistration), or does not say
// when it was made (issued before registrations were timed, or adopted).
func (r NodeRevocation) Revokes(reg string) bool {
	if RegisteredAt(reg).IsZero() {
		return true
	}
	return !SupersedesRegistration(reg, r.Before)
}

// Live reports whether r is still to be checked at now.
func (r NodeRevocation) Live(now time.Time) bool { return now.Before(r.Until) }

// EncodeNodeRevocation is r as the revocation list stores it.
func EncodeNodeRevocation(r NodeRevocation) ([]byte, error) {
	if RegisteredAt(r.Before).IsZero() || r.Until.IsZero() {
		return nil, fmt.Errorf("node revocation: a timed registration (before) and an expiry (until) are required")
	}
	return json.Marshal(r)
}

// DecodeNodeRevocation reads what EncodeNodeRevocation wrote.
func DecodeNodeRevocation(b []byte) (NodeRevocation, error) {
	var r NodeRevocation
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("node revocation: %v", err)
	}
	if RegisteredAt(r.Before).IsZero() || r.Until.IsZero() {
		return r, fmt.Errorf("node revocation: incomplete (before %q, until %v)", r.Before, r.Until)
	}
	return r, nil
}

// RevocationFor is the revocation of node removed at now, whose latest
// registration known is known (maybe ""), for identities lasting at most
// lifetime: it revokes every registration made up to now, and up to known
// should that one name a later time (the clock of the gateway that made
// it ahead of this one), and is kept until lifetime and RevocationSlack
// have passed.
func RevocationFor(now time.Time, known string, lifetime time.Duration) NodeRevocation {
	r := NodeRevocation{Before: NewRegistration(now, "removed"), Until: now.Add(lifetime + RevocationSlack)}
	if SupersedesRegistration(known, r.Before) && !RegisteredAt(known).IsZero() {
		r.Before = known
	}
	return r
}

package auth

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// PurposeStepCommands is the prefix of the purpose a node's command key is
// derived for (CommandKey) when it has no registration: the node's full name
// follows it.
const PurposeStepCommands = "loom step commands v1 "

// PurposeRegistrationCommands is the prefix of the purpose of a registration's
// command key: the node's full name, "|" and the registration follow it.
const PurposeRegistrationCommands = "loom step commands v2 "

// CommandKey is the 32-byte key that seals the step commands for node (its
// full name, "clusters/…/nodes/…" as in StartStep.node) of registration reg
// (the registration of the node's identity, NodeCert.Reg): DeriveKey of the
// services' secret for PurposeRegistrationCommands + node + "|" + reg. The
// scheduler seals with the key of the node's current registration; the
// gateway hands a registration's key only to that registration's identity.
// Another node's key, or the same node's under another registration (the
// image before a reimage, whatever it kept), opens nothing of it, and no key
// reveals the secret. reg "" (or an untimed one: SealingRegistration) is
// the key of a node with no registration known (identities issued before
// registrations were certified): PurposeStepCommands + node, the same for
// every such identity of node.
func CommandKey(serviceSecret []byte, node, reg string) []byte {
	if SealingRegistration(reg) == "" {
		return DeriveKey(serviceSecret, PurposeStepCommands+node)
	}
	return DeriveKey(serviceSecret, PurposeRegistrationCommands+node+"|"+reg)
}

// AdoptedRegistrationPrefix begins the registration a node identity
// issued without one (before registrations were kept) adopts at its first
// renewal, so that the node's next registration ends it. It is no new
// registration of the machine: the node's commands stay sealed as for an
// identity of no registration (SealingRegistration), since nothing tells the
// scheduler of the adoption and the agent must open what it seals meanwhile.
const AdoptedRegistrationPrefix = "adopted-"

// SealingRegistration is the registration whose key seals a node's step
// commands when reg is the one known: reg when it says when it was made
// (NewRegistration), else "", whose key is that of no registration. Such
// an untimed one is adopted (AdoptedRegistrationPrefix), or was kept by a
// gateway of the release before registrations were timed (the bootstrap
// token's id) and carried into a certificate by a renewal since: no
// AgentRegistered named either to the scheduler, which seals the node's
// commands for none meanwhile. The scheduler seals, and an agent compares
// what it was sealed for with its own, through it.
func SealingRegistration(reg string) string {
	if RegisteredAt(reg).IsZero() {
		return ""
	}
	return reg
}

// NewRegistration names a new registration of a node, made at t: the time
// (Unix nanoseconds, 19 digits) first, then id (the bootstrap token's id, or
// a random one when id is ""). Registrations of a node order by the time
// they were made (RegisteredAt), so that whoever learns them learns which
// is the latest, whatever order they arrive in.
func NewRegistration(t time.Time, id string) string {
	if id == "" {
		b := make([]byte, 12)
		_, _ = rand.Read(b)
		id = hex.EncodeToString(b)
	}
	return fmt.Sprintf("%019d.%s", t.UnixNano(), id)
}

// RegisteredAt is when registration reg was made, as NewRegistration
// wrote it; zero for one that does not say (made before registrations
// carried their time, or adopted).
func RegisteredAt(reg string) time.Time {
	ts, _, ok := strings.Cut(reg, ".")
	if !ok || len(ts) != 19 {
		return time.Time{}
	}
	n, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || n <= 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// SupersedesRegistration reports whether registration reg, learnt now, is
// to replace cur as a node's current one: it is another, and it was made
// after cur (or neither says when it was made). A registration that says
// nothing never replaces one that does, and an earlier one never replaces
// a later one: the identity of an image since reimaged, still valid for up
// to an hour, cannot make itself current again.
func SupersedesRegistration(reg, cur string) bool {
	if reg == "" || reg == cur {
		return false
	}
	if cur == "" {
		return true
	}
	r, c := RegisteredAt(reg), RegisteredAt(cur)
	if c.IsZero() {
		return true
	}
	return r.After(c)
}

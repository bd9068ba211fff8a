package envelope

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/crypto/chacha20poly1305"
	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
)

// Step commands are signed (anything may read them, nothing else may write
// them) and their confidential fields are sealed: the topic is shared by
// every agent, and a command's script, command line and environment (the
// job's secrets) are for the node that runs it. The key is the node's
// command key (auth.CommandKey), which the scheduler derives from the
// services' secret and the gateway gives to that node only.

// Reasons an agent refuses a step command it cannot open (a Rejection: it
// is dead-lettered with the reason, never run).
const (
	// ReasonBadSeal: the sealed fields do not open with the node's key:
	// sealed for another node, moved from another command, or tampered with.
	ReasonBadSeal = "bad-seal"
	// ReasonNoCommandKey: the command is sealed and the agent has no command
	// key (it runs without a node identity from the gateway).
	ReasonNoCommandKey = "no-command-key"
	// ReasonUnsealed: a StartStep or LaunchTasks for the node arrived with
	// its confidential fields in the clear on a signed bus, where the
	// scheduler seals every one.
	ReasonUnsealed = "unsealed"
)

// sealVersion is the first byte of a sealed blob: the format (XChaCha20-
// Poly1305, a 24-byte random nonce, then the ciphertext).
const sealVersion = 1

// IsSealable reports whether cmd is a command whose confidential fields
// SealCommand seals: a StartStep or a LaunchTasks.
func IsSealable(cmd proto.Message) bool {
	switch cmd.(type) {
	case *eventsv1.StartStep, *eventsv1.LaunchTasks:
		return true
	}
	return false
}

// IsSealed reports whether cmd carries sealed fields.
func IsSealed(cmd proto.Message) bool {
	switch c := cmd.(type) {
	case *eventsv1.StartStep:
		return len(c.GetSealed()) > 0
	case *eventsv1.LaunchTasks:
		return len(c.GetSealed()) > 0
	}
	return false
}

// SealCommand returns a copy of cmd whose confidential fields — a
// StartStep's command, script and env, a LaunchTasks' command and env —
// are encrypted under key (32 bytes: the node's auth.CommandKey) into its
// sealed field, and are empty in the clear. The associated data binds the
// message type, node, job, attempt (and a LaunchTasks' step), so the blob
// opens only in the command it was sealed in. cmd is not changed (the
// scheduler's domain keeps it). Another message type is returned as is.
func SealCommand(key []byte, cmd proto.Message) (proto.Message, error) {
	if !IsSealable(cmd) {
		return cmd, nil
	}
	if IsSealed(cmd) {
		return nil, errors.New("seal command: already sealed")
	}
	aead, err := chacha20poly1305.NewX(key)
	if err != nil {
		return nil, fmt.Errorf("seal command: %w", err)
	}
	out := proto.Clone(cmd)
	var secret proto.Message
	switch c := out.(type) {
	case *eventsv1.StartStep:
		secret = &eventsv1.StartStep{Command: c.Command, Script: c.Script, Env: c.Env}
		c.Command, c.Script, c.Env = nil, "", nil
	case *eventsv1.LaunchTasks:
		secret = &eventsv1.LaunchTasks{Command: c.Command, Env: c.Env}
		c.Command, c.Env = nil, nil
	}
	plain, err := proto.Marshal(secret)
	if err != nil {
		return nil, fmt.Errorf("seal command: %w", err)
	}
	blob := make([]byte, 1+chacha20poly1305.NonceSizeX, 1+chacha20poly1305.NonceSizeX+len(plain)+aead.Overhead())
	blob[0] = sealVersion
	if _, err := rand.Read(blob[1:]); err != nil {
		return nil, fmt.Errorf("seal command: nonce: %w", err)
	}
	blob = aead.Seal(blob, blob[1:], plain, sealAAD(out))
	switch c := out.(type) {
	case *eventsv1.StartStep:
		c.Sealed = blob
	case *eventsv1.LaunchTasks:
		c.Sealed = blob
	}
	return out, nil
}

// OpenCommand returns a copy of cmd with its sealed fields decrypted under
// key and restored in the clear (sealed empty). A command with nothing
// sealed is returned as is. A blob that does not open — another node's
// key, another command's associated data, a changed byte — or a sealed
// command that also carries its confidential fields in the clear is a
// Rejection with ReasonBadSeal; a sealed command with no key one with
// ReasonNoCommandKey.
func OpenCommand(key []byte, cmd proto.Message) (proto.Message, error) {
	if !IsSealed(cmd) {
		return cmd, nil
	}
	if len(key) == 0 {
		return nil, reject(ReasonNoCommandKey, "%s is sealed for its node and this agent has no command key (it gets one with its node identity from the gateway)", proto.MessageName(cmd))
	}
	aead, err := chacha20poly1305.NewX(key)
	if err != nil {
		return nil, reject(ReasonNoCommandKey, "command key: %v", err)
	}
	out := proto.Clone(cmd)
	var blob []byte
	var clear bool
	switch c := out.(type) {
	case *eventsv1.StartStep:
		blob, c.Sealed = c.Sealed, nil
		clear = len(c.Command) > 0 || c.Script != "" || len(c.Env) > 0
	case *eventsv1.LaunchTasks:
		blob, c.Sealed = c.Sealed, nil
		clear = len(c.Command) > 0 || len(c.Env) > 0
	}
	if clear {
		return nil, reject(ReasonBadSeal, "%s carries sealed fields and the same fields in the clear", proto.MessageName(cmd))
	}
	if len(blob) < 1+chacha20poly1305.NonceSizeX+aead.Overhead() || blob[0] != sealVersion {
		return nil, reject(ReasonBadSeal, "sealed fields of %d bytes, version %d: not a sealed command", len(blob), blob[0])
	}
	nonce := blob[1 : 1+chacha20poly1305.NonceSizeX]
	plain, err := aead.Open(nil, nonce, blob[1+chacha20poly1305.NonceSizeX:], sealAAD(out))
	if err != nil {
		return nil, reject(ReasonBadSeal, "%s's sealed fields do not open with this node's key: sealed for another node or command, or changed", proto.MessageName(cmd))
	}
	switch c := out.(type) {
	case *eventsv1.StartStep:
		var s eventsv1.StartStep
		if err := proto.Unmarshal(plain, &s); err != nil {
			return nil, reject(ReasonBadSeal, "sealed fields: %v", err)
		}
		c.Command, c.Script, c.Env = s.Command, s.Script, s.Env
	case *eventsv1.LaunchTasks:
		var s eventsv1.LaunchTasks
		if err := proto.Unmarshal(plain, &s); err != nil {
			return nil, reject(ReasonBadSeal, "sealed fields: %v", err)
		}
		c.Command, c.Env = s.Command, s.Env
	}
	return out, nil
}

// sealAAD is the associated data of cmd's sealed fields: its type, node,
// job, attempt and (LaunchTasks) step, each length-prefixed, so that no two
// commands share it.
func sealAAD(cmd proto.Message) []byte {
	var node, job string
	var attempt, step int32
	switch c := cmd.(type) {
	case *eventsv1.StartStep:
		node, job, attempt, step = c.GetNode(), c.GetJob(), c.GetAttempt(), -1
	case *eventsv1.LaunchTasks:
		node, job, attempt, step = c.GetNode(), c.GetJob(), c.GetAttempt(), c.GetStepId()
	}
	b := []byte("loom sealed step command v1")
	for _, s := range []string{string(proto.MessageName(cmd)), node, job} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(attempt))
	return binary.BigEndian.AppendUint32(b, uint32(step))
}

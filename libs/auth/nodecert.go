package auth

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// DefaultNodeIdentityLifetime is how long a node identity (its certificate
// and access token) lasts; agents renew it when a third of it is left.
const DefaultNodeIdentityLifetime = time.Hour

// MaxCertBytes bounds an encoded certificate accepted for verification.
const MaxCertBytes = 1024

// NodeCert binds a node's Ed25519 public key to the node, its cluster and
// pool, until NotAfter. The services' key signs it; a consumer that checks
// it with the services' public key knows which node signed an event
// without asking anyone.
type NodeCert struct {
	Node      string    `json:"node"`
	Cluster   string    `json:"cluster"`
	Pool      string    `json:"pool"`
	PublicKey []byte    `json:"pub"`
	NotAfter  time.Time `json:"exp"`
	// Reg is the registration the identity belongs to (NewRegistration;
	// kept through renewals): whose command key (CommandKey) the node
	// holds. Empty in certificates issued before registrations were
	// certified.
	Reg string `json:"reg,omitempty"`
}

// certWire is a certificate on the wire: the JSON body and the signature
// over exactly those bytes.
type certWire struct {
	Body []byte `json:"b"`
	Sig  []byte `json:"s"`
}

// SignNodeCert encodes c signed with the services' private key.
func SignNodeCert(priv ed25519.PrivateKey, c NodeCert) ([]byte, error) {
	if len(c.PublicKey) != ed25519.PublicKeySize || c.Node == "" {
		return nil, errors.New("node certificate: a node name and a 32-byte Ed25519 public key are required")
	}
	body, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	return json.Marshal(certWire{Body: body, Sig: ed25519.Sign(priv, body)})
}

// VerifyNodeCert checks raw's signature with the services' public key and
// its expiry at now, and returns the certificate.
func VerifyNodeCert(pub ed25519.PublicKey, raw []byte, now time.Time) (NodeCert, error) {
	var c NodeCert
	if len(raw) > MaxCertBytes {
		return c, fmt.Errorf("node certificate: %d bytes, more than the limit of %d", len(raw), MaxCertBytes)
	}
	var w certWire
	if err := json.Unmarshal(raw, &w); err != nil {
		return c, fmt.Errorf("node certificate: %v", err)
	}
	if len(pub) != ed25519.PublicKeySize || !ed25519.Verify(pub, w.Body, w.Sig) {
		return c, errors.New("node certificate: bad signature")
	}
	if err := json.Unmarshal(w.Body, &c); err != nil {
		return c, fmt.Errorf("node certificate: %v", err)
	}
	if len(c.PublicKey) != ed25519.PublicKeySize {
		return c, errors.New("node certificate: public key is not 32 bytes")
	}
	if !now.Before(c.NotAfter) {
		return c, fmt.Errorf("node certificate of %s expired at %s", c.Node, c.NotAfter.UTC().Format(time.RFC3339))
	}
	return c, nil
}

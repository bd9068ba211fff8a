package auth

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// NodeIdentity is what a node holds to prove who it is: its Ed25519 key,
// the certificate the services' key signed for it, the services' public
// key (what it checks commands against), its command key (CommandKey: what
// opens the step commands sealed for it; empty from an issuer that has
// none), and, when the gateway issued it, the access token it calls the
// gateway with (renewal, workload tokens).
type NodeIdentity struct {
	Node, Cluster, Pool string
	Key                 ed25519.PrivateKey
	Cert                []byte
	ServicePublicKey    ed25519.PublicKey
	CommandKey          []byte
	AccessToken         string
	NotAfter            time.Time
	// Registration is the registration the identity belongs to (its
	// certificate's Reg, or the one it had before a renewal by a gateway
	// of an earlier release, whose certificate names none), whose command
	// key CommandKey is.
	Registration string
}

// identityFile is a NodeIdentity on disk.
type identityFile struct {
	Node             string    `json:"node"`
	Cluster          string    `json:"cluster,omitempty"`
	Pool             string    `json:"pool,omitempty"`
	Seed             []byte    `json:"seed"`
	Cert             []byte    `json:"cert"`
	ServicePublicKey []byte    `json:"service_public_key"`
	CommandKey       []byte    `json:"command_key,omitempty"`
	AccessToken      string    `json:"access_token,omitempty"`
	NotAfter         time.Time `json:"not_after"`
	// Registration is kept for an identity whose certificate names none
	// while the identity has one (NodeIdentity.Registration: renewed by a
	// gateway of an earlier release).
	Registration string `json:"registration,omitempty"`
}

// IssueNodeIdentity makes a node identity without a gateway: a fresh key
// and a certificate signed with the services' key, valid for ttl from now,
// with the command key of registration reg (derived from the key's seed,
// the services' secret): the provisioner makes a new one (NewRegistration)
// for each launch of an agent; "" issues one of no registration.
// The provisioner uses it for the agents it runs on its own machine (the
// local provider), which share its trust boundary.
func IssueNodeIdentity(serviceKey ed25519.PrivateKey, node, cluster, pool, reg string, now time.Time, ttl time.Duration) (*NodeIdentity, error) {
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		return nil, err
	}
	exp := now.Add(ttl)
	cert, err := SignNodeCert(serviceKey, NodeCert{Node: node, Cluster: cluster, Pool: pool, PublicKey: pub, NotAfter: exp, Reg: reg})
	if err != nil {
		return nil, err
	}
	return &NodeIdentity{Node: node, Cluster: cluster, Pool: pool, Key: priv, Cert: cert,
		ServicePublicKey: serviceKey.Public().(ed25519.PublicKey), CommandKey: CommandKey(serviceKey.Seed(), node, reg), NotAfter: exp,
		Registration: reg}, nil
}

// WriteNodeIdentity writes id to path, mode 0600 (its directory 0700 if
// it has to be made), atomically: a reader sees the old or the new one.
func WriteNodeIdentity(path string, id *NodeIdentity) error {
	if id == nil || len(id.Key) != ed25519.PrivateKeySize {
		return errors.New("node identity: a key is required")
	}
	b, err := json.Marshal(identityFile{Node: id.Node, Cluster: id.Cluster, Pool: id.Pool, Seed: id.Key.Seed(), Cert: id.Cert,
		ServicePublicKey: id.ServicePublicKey, CommandKey: id.CommandKey, AccessToken: id.AccessToken, NotAfter: id.NotAfter,
		Registration: id.Registration})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".identity-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// LoadNodeIdentity reads what WriteNodeIdentity wrote. A file readable by
// group or others is refused.
func LoadNodeIdentity(path string) (*NodeIdentity, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("node identity %s has mode %v: it must not be readable by group or others (chmod 600 %s)", path, st.Mode().Perm(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f identityFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("node identity %s: %v", path, err)
	}
	if len(f.Seed) != ed25519.SeedSize || len(f.ServicePublicKey) != ed25519.PublicKeySize || len(f.Cert) == 0 || f.Node == "" {
		return nil, fmt.Errorf("node identity %s: incomplete (node, seed, certificate and service public key are required)", path)
	}
	// The certificate's registration, or the one kept with an identity
	// whose certificate names none (renewed by a gateway of an earlier
	// release, which keeps the registration but does not certify it).
	reg := CertRegistration(f.Cert)
	if reg == "" {
		reg = f.Registration
	}
	return &NodeIdentity{Node: f.Node, Cluster: f.Cluster, Pool: f.Pool, Key: ed25519.NewKeyFromSeed(f.Seed), Cert: f.Cert,
		ServicePublicKey: f.ServicePublicKey, CommandKey: f.CommandKey, AccessToken: f.AccessToken, NotAfter: f.NotAfter,
		Registration: reg}, nil
}

// CertRegistration is the registration a node certificate names (its Reg),
// read without checking its signature: for a node reading its own
// certificate. "" when it names none or does not parse.
func CertRegistration(raw []byte) string {
	var w certWire
	if len(raw) > MaxCertBytes || json.Unmarshal(raw, &w) != nil {
		return ""
	}
	var c NodeCert
	if json.Unmarshal(w.Body, &c) != nil {
		return ""
	}
	return c.Reg
}

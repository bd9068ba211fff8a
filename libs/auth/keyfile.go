package auth

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Secret files hold one base64 (standard encoding) line: a token signing
// secret, or the seed of the services' Ed25519 key.

// LoadOrCreateSecret reads the secret in path, or when the file does not
// exist creates it with size fresh random bytes, mode 0600 in a 0700
// directory. A file readable by group or others is refused: a secret the
// whole machine can read is no secret.
func LoadOrCreateSecret(path string, size int) ([]byte, error) {
	b, err := LoadSecret(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return b, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	b = make([]byte, size)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return LoadSecret(path) // another process made it first
	}
	if err != nil {
		return nil, err
	}
	_, err = f.WriteString(base64.StdEncoding.EncodeToString(b) + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	return b, nil
}

// LoadSecret reads the secret in path (see LoadOrCreateSecret).
func LoadSecret(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("secret file %s has mode %v: it must not be readable by group or others (chmod 600 %s)", path, st.Mode().Perm(), path)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(raw)))
	if err != nil {
		return nil, fmt.Errorf("secret file %s: not base64: %v", path, err)
	}
	return b, nil
}

// ServiceKey is the services' Ed25519 key from its seed (32 bytes, a
// secret file's content).
func ServiceKey(seed []byte) (ed25519.PrivateKey, error) {
	if len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("service key seed: %d bytes, want %d", len(seed), ed25519.SeedSize)
	}
	return ed25519.NewKeyFromSeed(seed), nil
}

// DeriveKey derives a purpose-bound key from a secret (HMAC-SHA256 of
// purpose under secret), so that one service secret yields independent
// keys: a key for one purpose (bootstrap tokens, service tokens) reveals
// nothing of the secret or of the others.
func DeriveKey(secret []byte, purpose string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(purpose))
	return m.Sum(nil)
}

// Purposes of keys derived from the services' secret (DeriveKey).
const (
	// PurposeBootstrap keys the node bootstrap tokens the provisioner mints
	// and the gateway checks.
	PurposeBootstrap = "loom bootstrap token v1"
	// PurposeService keys the tokens services present to each other's
	// internal gRPC APIs.
	PurposeService = "loom service token v1"
)

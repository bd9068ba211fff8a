package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"

	"golang.org/x/crypto/argon2"

	"github.com/loom-ml/loom/libs/errs"
)

// APIKeyPrefix starts every API key, so that a leaked key is recognisable
// (secret scanners) and cannot be mistaken for a token.
const APIKeyPrefix = "lk_"

// Sizes of an API key's parts, in random bytes.
const (
	apiKeyIDBytes     = 8
	apiKeySecretBytes = 32
)

// argon2id parameters of the secrets stored before keys were hashed with
// SHA-256 (still checked: see CheckSecret).
const (
	argonTime    = 1
	argonMemory  = 8 * 1024 // KiB
	argonThreads = 1
	argonKeyLen  = 32
	argonSaltLen = 16
)

// A stored secret is "sha256$<salt>$<SHA-256(salt || secret)>". The
// secrets are 256 random bits, so the hash is there so that a copy of the
// store gives no usable key, not to slow guessing (no guess of 256 bits
// succeeds): a slow hash (argon2id, as the first keys were stored) only
// made each check cost ~6 ms of the gateway's CPU, a check anyone who knows
// a key id could ask for at will, before any rate limit.
const (
	sha256SaltLen = 16
)

// NewAPIKey returns a fresh key: its public id and the whole key
// ("lk_<id>.<secret>") that is shown to its owner once.
func NewAPIKey() (id, key string, err error) {
	b := make([]byte, apiKeyIDBytes+apiKeySecretBytes)
	if _, err := rand.Read(b); err != nil {
		return "", "", err
	}
	id = hex.EncodeToString(b[:apiKeyIDBytes])
	secret := base64.RawURLEncoding.EncodeToString(b[apiKeyIDBytes:])
	return id, APIKeyPrefix + id + "." + secret, nil
}

// IsAPIKey reports whether cred looks like an API key (not a token).
func IsAPIKey(cred string) bool { return strings.HasPrefix(cred, APIKeyPrefix) }

// ParseAPIKey splits a whole key into its id and secret. A malformed key
// is errs.Unauthenticated.
func ParseAPIKey(key string) (id, secret string, err error) {
	rest, ok := strings.CutPrefix(key, APIKeyPrefix)
	if ok {
		id, secret, ok = strings.Cut(rest, ".")
	}
	if !ok || len(id) != 2*apiKeyIDBytes || len(secret) == 0 || len(secret) > 64 {
		return "", "", fmt.Errorf("%w: malformed API key (want %s<id>.<secret>)", errs.Unauthenticated, APIKeyPrefix)
	}
	if _, err := hex.DecodeString(id); err != nil {
		return "", "", fmt.Errorf("%w: malformed API key id", errs.Unauthenticated)
	}
	return id, secret, nil
}

// HashSecret returns what is stored for secret: "sha256$<salt>$<hash>".
func HashSecret(secret string) (string, error) {
	salt := make([]byte, sha256SaltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	sum := sha256.Sum256(append(salt, secret...))
	return "sha256$" + base64.RawStdEncoding.EncodeToString(salt) + "$" + base64.RawStdEncoding.EncodeToString(sum[:]), nil
}

// SlowSecret reports whether stored is hashed the slow way (argon2id, keys
// made before SHA-256): its check costs milliseconds.
func SlowSecret(stored string) bool { return strings.HasPrefix(stored, "argon2id$") }

// CheckSecret reports whether secret hashes to stored (HashSecret's
// output, or an argon2id hash of the first keys), in constant time for a
// given stored value.
func CheckSecret(stored, secret string) bool {
	parts := strings.Split(stored, "$")
	if len(parts) != 3 {
		return false
	}
	salt, err1 := base64.RawStdEncoding.DecodeString(parts[1])
	want, err2 := base64.RawStdEncoding.DecodeString(parts[2])
	if err1 != nil || err2 != nil {
		return false
	}
	var got []byte
	switch parts[0] {
	case "sha256":
		sum := sha256.Sum256(append(salt, secret...))
		got = sum[:]
	case "argon2id":
		if len(want) != argonKeyLen {
			return false
		}
		got = argon2.IDKey([]byte(secret), salt, argonTime, argonMemory, argonThreads, argonKeyLen)
	default:
		return false
	}
	return len(got) == len(want) && subtle.ConstantTimeCompare(got, want) == 1
}

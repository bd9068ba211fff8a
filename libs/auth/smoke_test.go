package auth

import (
	"crypto/ed25519"
	"errors"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/errs"
)

func TestSmoke(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	iss, err := NewIssuer(make([]byte, 32), "loom", func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err := iss.Issue(Claims{Use: UseAccess, Kind: "user", User: "alice", RegisteredClaims: ForSubject("users/alice")}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := iss.Verify(tok, UseAccess); err != nil || c.User != "alice" {
		t.Fatalf("verify: %v %+v", err, c)
	}
	if _, err := iss.Verify(tok, UseRefresh); !errors.Is(err, errs.Unauthenticated) {
		t.Fatalf("wrong use accepted: %v", err)
	}
	now = now.Add(2 * time.Minute)
	if _, err := iss.Verify(tok, UseAccess); !errors.Is(err, errs.Unauthenticated) {
		t.Fatalf("expired accepted: %v", err)
	}
	id, key, _ := NewAPIKey()
	gid, sec, err := ParseAPIKey(key)
	if err != nil || gid != id {
		t.Fatal(err)
	}
	h, _ := HashSecret(sec)
	if !CheckSecret(h, sec) || CheckSecret(h, sec+"x") {
		t.Fatal("hash")
	}
	pub, priv, _ := ed25519.GenerateKey(nil)
	npub, _, _ := ed25519.GenerateKey(nil)
	raw, err := SignNodeCert(priv, NodeCert{Node: "n1", PublicKey: npub, NotAfter: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := VerifyNodeCert(pub, raw, now); err != nil || c.Node != "n1" {
		t.Fatal(err)
	}
	if _, err := VerifyNodeCert(npub, raw, now); err == nil {
		t.Fatal("wrong key accepted")
	}
}

package auth

import (
	"context"
	"crypto/ed25519"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/loom-ml/loom/libs/errs"
)

// The fuzz tests run their seed corpora as ordinary tests; run one for
// minutes with e.g. `go test -run '^$' -fuzz FuzzVerify -fuzztime 5m ./libs/auth`.

var fuzzNow = time.Unix(1_800_000_000, 0)

// FuzzCredentialFromContext: any authorization header is either refused
// with Unauthenticated or yields a bounded, trimmed, non-empty credential;
// it never panics.
func FuzzCredentialFromContext(f *testing.F) {
	for _, s := range []string{"", "Bearer abc", "bearer  lk_0123456789abcdef.x ", "Basic Zm9v", "Bearer", "Bearer ", "Bearer\tx",
		"BEARER x y", strings.Repeat("a", MaxTokenBytes+17), "Bearer " + strings.Repeat("b", MaxTokenBytes)} {
		f.Add(s, false)
	}
	f.Add("Bearer a", true)
	f.Fuzz(func(t *testing.T, header string, twice bool) {
		md := metadata.MD{}
		if header != "" || twice {
			md.Append(MetadataKey, header)
		}
		if twice {
			md.Append(MetadataKey, header)
		}
		cred, err := CredentialFromContext(metadata.NewIncomingContext(context.Background(), md))
		if err != nil {
			if !errors.Is(err, errs.Unauthenticated) {
				t.Fatalf("error of another kind: %v", err)
			}
			if cred != "" {
				t.Fatalf("a credential with an error: %q", cred)
			}
			return
		}
		if twice {
			t.Fatalf("two headers accepted")
		}
		if header == "" {
			if cred != "" {
				t.Fatalf("no header gave %q", cred)
			}
			return
		}
		if cred == "" || cred != strings.TrimSpace(cred) || len(cred) > MaxTokenBytes+16 {
			t.Fatalf("header %q gave credential %q", header, cred)
		}
		if !strings.HasSuffix(strings.TrimSpace(header), cred) {
			t.Fatalf("credential %q is not the header's %q", cred, header)
		}
	})
}

// FuzzVerify: whatever the token, Verify either refuses it with
// Unauthenticated or returns claims of the use asked for; a token issued
// and then changed in any byte is refused.
func FuzzVerify(f *testing.F) {
	iss, err := NewIssuer(make([]byte, 32), "loom", func() time.Time { return fuzzNow })
	if err != nil {
		f.Fatal(err)
	}
	good, _, err := iss.Issue(Claims{Use: UseAccess, Kind: "user", User: "alice", RegisteredClaims: ForSubject("users/alice")}, time.Minute)
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{good, "", "a.b.c", "eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.", good + "x", strings.Repeat("A", MaxTokenBytes+1),
		"eyJhbGciOiJIUzI1NiJ9.e30.ZZZ"} {
		f.Add(s, 0, byte(0))
	}
	f.Add(good, 10, byte(1))
	f.Fuzz(func(t *testing.T, tok string, at int, flip byte) {
		if flip != 0 && at >= 0 && at < len(tok) {
			b := []byte(tok)
			b[at] ^= flip
			tok = string(b)
		}
		c, err := iss.Verify(tok, UseAccess)
		if err != nil {
			if !errors.Is(err, errs.Unauthenticated) {
				t.Fatalf("error of another kind: %v", err)
			}
			if strings.Contains(err.Error(), tok) && len(tok) > 8 {
				t.Fatalf("the error echoes the token: %v", err)
			}
			return
		}
		if c.Use != UseAccess || c.Subject == "" || c.ID == "" {
			t.Fatalf("accepted claims %+v", c)
		}
		// Only alice's tokens were ever signed (each fuzz worker issues its
		// own, with its own id): anything else accepted is a forgery.
		if c.User != "alice" || c.Subject != "users/alice" || c.Kind != "user" || c.Issuer != "loom" {
			t.Fatalf("a token that was never issued was accepted: %q (%+v)", tok, c)
		}
	})
}

// FuzzParseAPIKey: a key either parses to a 16-hex-digit id and a bounded
// secret that rebuild it exactly, or is refused with Unauthenticated.
func FuzzParseAPIKey(f *testing.F) {
	_, key, err := NewAPIKey()
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{key, "", "lk_", "lk_0123456789abcdef.", "lk_0123456789ABCDEF.x", "lk_0123456789abcdeg.x", "lk_0123456789abcdef.x.y",
		"lk_0123456789abcdef." + strings.Repeat("s", 65), "xx_0123456789abcdef.s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, secret, err := ParseAPIKey(s)
		if err != nil {
			if !errors.Is(err, errs.Unauthenticated) || id != "" || secret != "" {
				t.Fatalf("refusal %q %q %v", id, secret, err)
			}
			return
		}
		if len(id) != 16 || strings.Trim(id, "0123456789abcdefABCDEF") != "" || secret == "" || len(secret) > 64 {
			t.Fatalf("parsed %q into id %q secret %q", s, id, secret)
		}
		if APIKeyPrefix+id+"."+secret != s {
			t.Fatalf("parts %q %q do not rebuild %q", id, secret, s)
		}
	})
}

// FuzzVerifyNodeCert: any bytes are either refused or a certificate the
// services' key signed, unexpired, with a 32-byte key; a signed
// certificate changed in any byte is refused.
func FuzzVerifyNodeCert(f *testing.F) {
	seed := make([]byte, ed25519.SeedSize)
	priv, _ := ServiceKey(seed)
	pub := priv.Public().(ed25519.PublicKey)
	nodePub := make([]byte, ed25519.PublicKeySize)
	good, err := SignNodeCert(priv, NodeCert{Node: "n1", Cluster: "projects/p/clusters/c", Pool: "gpu", PublicKey: nodePub, NotAfter: fuzzNow.Add(time.Hour)})
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range [][]byte{good, nil, []byte("{}"), []byte(`{"b":"e30=","s":""}`), []byte("null"), make([]byte, MaxCertBytes+1)} {
		f.Add(s, 0, byte(0))
	}
	f.Add(good, 20, byte(4))
	f.Fuzz(func(t *testing.T, raw []byte, at int, flip byte) {
		changed := false
		if flip != 0 && at >= 0 && at < len(raw) {
			raw = append([]byte(nil), raw...)
			raw[at] ^= flip
			changed = true
		}
		c, err := VerifyNodeCert(pub, raw, fuzzNow)
		if err != nil {
			return
		}
		if len(c.PublicKey) != ed25519.PublicKeySize || !fuzzNow.Before(c.NotAfter) {
			t.Fatalf("accepted %+v", c)
		}
		if changed && c.Node != "n1" {
			t.Fatalf("a changed certificate was accepted as %+v", c)
		}
	})
}

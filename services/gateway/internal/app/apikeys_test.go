package app

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/adapters"
)

// keysAuth is an AuthService over a real Redis, and alice's principal.
func keysAuth(t *testing.T) (*Auth, *adapters.AuthStore, context.Context) {
	t.Helper()
	ctx := testkit.Context(t, 60*time.Second)
	_, rdb := testkit.Redis(t)
	st := adapters.NewAuthStore(store.New(rdb, "gateway:"))
	p := &auth.Principal{Name: auth.UserName("alice"), Kind: auth.KindUser, User: "alice", How: "api-key"}
	return NewAuth(AuthOptions{Store: st}), st, auth.NewContext(ctx, p)
}

// putEndedKey stores a key of alice's that expired ago, never revoked,
// and returns its resource name.
func putEndedKey(t *testing.T, ctx context.Context, st *adapters.AuthStore, ago time.Duration) (string, string) {
	t.Helper()
	id, _, err := auth.NewAPIKey()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	rec := &adapters.KeyRecord{ID: id, Owner: "users/alice", Hash: "x", CreateTime: now.Add(-ago - time.Hour), ExpireTime: now.Add(-ago)}
	if err := st.PutAPIKey(ctx, rec); err != nil {
		t.Fatal(err)
	}
	return id, "users/alice/keys/" + id
}

// TestKeyRetentionFromItsEnd: a key is kept KeyRetention after it first
// ended. Revoking a key that expired longer ago than that does not keep it
// another KeyRetention (counted against MaxKeysPerOwner): the next create
// drops it. One that expired a day ago and is revoked now stays listed.
func TestKeyRetentionFromItsEnd(t *testing.T) {
	t.Parallel()
	a, st, ctx := keysAuth(t)
	oldID, old := putEndedKey(t, ctx, st, KeyRetention+24*time.Hour)
	recentID, recent := putEndedKey(t, ctx, st, 24*time.Hour)
	for _, name := range []string{old, recent} {
		k, err := a.RevokeApiKey(ctx, &loomv1.RevokeApiKeyRequest{Name: name})
		if err != nil || k.GetRevokeTime() == nil {
			t.Fatalf("revoke %s: %v, %v", name, k, err)
		}
	}
	if _, err := a.CreateApiKey(ctx, &loomv1.CreateApiKeyRequest{Parent: "users/alice"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.APIKey(ctx, oldID); !errors.Is(err, errs.NotFound) {
		t.Fatalf("the key that expired %v ago, revoked since: %v, want it dropped (NotFound)", KeyRetention+24*time.Hour, err)
	}
	if k, err := st.APIKey(ctx, recentID); err != nil || k.RevokeTime.IsZero() {
		t.Fatalf("the key that expired a day ago, revoked since: %v, %v; want it kept, revoked", k, err)
	}
}

// TestRevokeApiKeyRacingTheSweep: a key that expired longer ago than
// KeyRetention is revoked while a create of its owner's sweeps it (both
// released together, many rounds, on a real Redis). The revoke writes only
// while the record is as it read it: the swept key does not come back
// (revoked, counted against MaxKeysPerOwner); the revoke answers the key
// revoked (it wrote first; the sweep then drops it, ended long ago) or
// NotFound (the sweep was first).
func TestRevokeApiKeyRacingTheSweep(t *testing.T) {
	t.Parallel()
	a, st, ctx := keysAuth(t)
	for round := range 40 {
		id, name := putEndedKey(t, ctx, st, KeyRetention+24*time.Hour)
		var revokeErr, createErr error
		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			<-start
			_, revokeErr = a.RevokeApiKey(ctx, &loomv1.RevokeApiKeyRequest{Name: name})
		})
		wg.Go(func() {
			<-start
			_, createErr = a.CreateApiKey(ctx, &loomv1.CreateApiKeyRequest{Parent: "users/alice"})
		})
		close(start)
		wg.Wait()
		if createErr != nil {
			t.Fatalf("round %d: create: %v", round, createErr)
		}
		if revokeErr != nil && !errors.Is(revokeErr, errs.NotFound) {
			t.Fatalf("round %d: revoke: %v, want OK or NotFound", round, revokeErr)
		}
		if k, err := st.APIKey(ctx, id); !errors.Is(err, errs.NotFound) {
			t.Fatalf("round %d: the swept key is stored again: %+v, %v (revoke: %v)", round, k, err, revokeErr)
		}
	}
}

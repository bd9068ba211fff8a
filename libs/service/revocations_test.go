package service

import (
	"strings"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/testkit"
)

// The copy of the revocation list reads the hash when its version changed
// only, leaves out the entries past their expiry and those that do not
// decode, and answers Lookup from memory.
func TestNodeRevocationsFollowTheVersion(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	ctx := testkit.Context(t, 30*time.Second)
	now := time.Now()
	put := func(node string, r auth.NodeRevocation, version string) {
		t.Helper()
		b, err := auth.EncodeNodeRevocation(r)
		if err != nil {
			t.Fatal(err)
		}
		if err := rdb.HSet(ctx, auth.RevokedNodesKey, node, b).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.Set(ctx, auth.RevokedNodesVersionKey, version, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	r := NewNodeRevocations(rdb, nil)
	if err := r.Refresh(ctx); err != nil {
		t.Fatalf("refresh of no list: %v", err)
	}
	if _, ok := r.Lookup("a"); ok {
		t.Fatal("a revocation where none was written")
	}
	live := auth.RevocationFor(now, "", time.Hour)
	put("a", live, "1")
	put("gone", auth.NodeRevocation{Before: live.Before, Until: now.Add(-time.Second)}, "1")
	if err := rdb.HSet(ctx, auth.RevokedNodesKey, "bad", "{").Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got, ok := r.Lookup("a"); !ok || got.Before != live.Before {
		t.Fatalf("a: %+v %v, want %+v", got, ok, live)
	}
	for _, node := range []string{"gone", "bad"} {
		if _, ok := r.Lookup(node); ok {
			t.Errorf("%s: looked up, want left out", node)
		}
	}
	// Written without a new version: not read.
	b, _ := auth.EncodeNodeRevocation(live)
	if err := rdb.HSet(ctx, auth.RevokedNodesKey, "b", b).Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Lookup("b"); ok {
		t.Fatal("b read though the version did not change")
	}
	put("c", live, "2")
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	for _, node := range []string{"a", "b", "c"} {
		if _, ok := r.Lookup(node); !ok {
			t.Errorf("%s: not looked up after the version changed", node)
		}
	}
}

// Check says the copy is not current, naming the key, until a read
// succeeds and again once reads have failed for RevocationStale (the
// service's /readyz then answers 503 with it), with the last failure.
func TestNodeRevocationsCheckSaysWhenStale(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	ctx := testkit.Context(t, 30*time.Second)
	now := time.Now()
	r := NewNodeRevocations(rdb, func() time.Time { return now })
	if err := r.Check(); err == nil || !strings.Contains(err.Error(), "never been read") || !strings.Contains(err.Error(), auth.RevokedNodesKey) {
		t.Fatalf("Check before any read = %v, want never read, naming %s", err, auth.RevokedNodesKey)
	}
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Check(); err != nil {
		t.Fatalf("Check after a read: %v", err)
	}
	// Reads fail from now on (Redis gone): current until RevocationStale.
	_ = rdb.Close()
	if err := r.Refresh(ctx); err == nil {
		t.Fatal("Refresh on a closed client succeeded")
	}
	now = now.Add(RevocationStale)
	if err := r.Check(); err != nil {
		t.Fatalf("Check %v after the last read: %v, want current", RevocationStale, err)
	}
	now = now.Add(time.Second)
	err := r.Check()
	if err == nil || !strings.Contains(err.Error(), "has not been read for 6s") || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("Check 6s after the last read = %v, want stale since 6s with the read's error", err)
	}
}

// Check names the failure of the last read only while no read has
// succeeded since: a copy gone stale after a recovery is not blamed on
// the error that came before it.
func TestNodeRevocationsCheckForgetsAMendedFailure(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	ctx := testkit.Context(t, 30*time.Second)
	now := time.Now()
	r := NewNodeRevocations(rdb, func() time.Time { return now })
	// The list is not a hash: the read fails.
	if err := rdb.Set(ctx, auth.RevokedNodesKey, "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, auth.RevokedNodesVersionKey, "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	err := r.Refresh(ctx)
	if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("Refresh of a list that is not a hash = %v, want WRONGTYPE", err)
	}
	if err := r.Check(); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("Check after the failed read = %v, want it named", err)
	}
	// Mended, and read.
	if err := rdb.Del(ctx, auth.RevokedNodesKey).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, auth.RevokedNodesVersionKey, "2", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	// No read since: stale, for no error of its own.
	now = now.Add(RevocationStale + time.Second)
	if err := r.Check(); err == nil || strings.Contains(err.Error(), "WRONGTYPE") {
		t.Errorf("Check stale after a good read = %v, want stale without the mended failure", err)
	}
}

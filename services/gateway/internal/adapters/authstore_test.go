package adapters

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
)

// TestSetMemberAtMost: a project's member cap refuses a new member past it,
// naming the count and the limit, but never a member already there
// changing role or leaving; and concurrent adds cannot pass it together.
func TestSetMemberAtMost(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	s := NewAuthStore(store.New(rdb, "gateway:"))
	ctx := testkit.Context(t, 30*time.Second)
	const p = "projects/p"
	for _, u := range []string{"ana", "bob"} {
		if err := s.SetMemberAtMost(ctx, p, u, "user", 2); err != nil {
			t.Fatal(err)
		}
	}
	err := s.SetMemberAtMost(ctx, p, "cat", "user", 2)
	if errs.Code(err).String() != "ResourceExhausted" || !strings.Contains(err.Error(), "projects/p has 2 members, the limit is 2") {
		t.Fatalf("a third member past a cap of 2: %v", err)
	}
	if err := s.SetMemberAtMost(ctx, p, "bob", "admin", 2); err != nil {
		t.Fatalf("a member changing role at the cap: %v", err)
	}
	if err := s.SetMemberAtMost(ctx, p, "ana", "", 2); err != nil {
		t.Fatalf("a member leaving at the cap: %v", err)
	}
	if err := s.SetMemberAtMost(ctx, p, "cat", "viewer", 2); err != nil {
		t.Fatalf("a member once there is room: %v", err)
	}
	roles, _, err := s.Roles(ctx, "bob")
	if err != nil || roles["p"].String() != "admin" {
		t.Fatalf("bob's roles %v, %v", roles, err)
	}

	const q = "projects/q"
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() { _ = s.SetMemberAtMost(ctx, q, fmt.Sprintf("u%d", i), "user", 5) })
	}
	wg.Wait()
	if m, err := s.Members(ctx, q); err != nil || len(m) != 5 {
		t.Fatalf("20 concurrent adds under a cap of 5: %d members (%v)", len(m), err)
	}
}

// TestRenewNodeRegistrationKeepsANewerOne: the renewal of a node's
// identity keeps its registration only while it is still the node's. One
// checked just before the node registered again (the old image's renewal
// racing the new agent's registration) must not write the old
// registration back: the new agent would be locked out and the old image
// would hold the node.
func TestRenewNodeRegistrationKeepsANewerOne(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	s := NewAuthStore(store.New(rdb, "gateway:"))
	ctx := testkit.Context(t, 30*time.Second)
	const cl, node = "projects/p/clusters/c", "projects/p/clusters/c/nodes/n"
	if ok, err := s.RenewNodeRegistration(ctx, cl, node, "old", time.Hour); err != nil || !ok {
		t.Fatalf("renew with none kept: %v, %v", ok, err)
	}
	if err := s.SetNodeRegistration(ctx, cl, node, "new", time.Hour); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.RenewNodeRegistration(ctx, cl, node, "old", time.Hour); err != nil || ok {
		t.Fatalf("renewing the old registration over the new: %v, %v; want refused", ok, err)
	}
	if reg, err := s.NodeRegistration(ctx, cl, node); err != nil || reg != "new" {
		t.Fatalf("registration %q, %v; want the new one kept", reg, err)
	}
	if ok, err := s.RenewNodeRegistration(ctx, cl, node, "new", time.Hour); err != nil || !ok {
		t.Fatalf("renewing the current registration: %v, %v", ok, err)
	}
	if ttl := rdb.PTTL(ctx, "gateway:"+KeyNodeRegPrefix+cl+"|"+node).Val(); ttl < 59*time.Minute {
		t.Fatalf("TTL after renewal %s, want about an hour", ttl)
	}
}

// TestPutNewAPIKeyCountsOnlyKeysThatExist: an owner's index entry whose
// key record is gone (a delete cut short between its two writes) is not
// counted toward the limit, and leaves the index; before, it counted for
// ever and was listed nowhere, so the owner could be stuck at the limit
// with nothing to revoke.
func TestPutNewAPIKeyCountsOnlyKeysThatExist(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	st := store.New(rdb, "gateway:")
	s := NewAuthStore(st)
	ctx := testkit.Context(t, 10*time.Second)
	for i := range 2 {
		if err := rdb.SAdd(ctx, st.Key(KeyOwnerKeysPrefix+"users/ada"), fmt.Sprintf("gone%d", i)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 {
		if err := s.PutNewAPIKey(ctx, &KeyRecord{ID: fmt.Sprintf("k%d", i), Owner: "users/ada", CreateTime: time.Now()}, 2); err != nil {
			t.Fatalf("key %d of a limit of 2, beside two dangling index entries: %v", i, err)
		}
	}
	if err := s.PutNewAPIKey(ctx, &KeyRecord{ID: "k2", Owner: "users/ada", CreateTime: time.Now()}, 2); errs.Code(err).String() != "ResourceExhausted" {
		t.Fatalf("a third key of a limit of 2: %v, want ResourceExhausted", err)
	}
	if n := rdb.SCard(ctx, st.Key(KeyOwnerKeysPrefix+"users/ada")).Val(); n != 2 {
		t.Errorf("the owner's index holds %d ids, want the 2 keys that exist", n)
	}
}

package app

import (
	"context"
	"fmt"
	"strings"
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

// principalOf is user's principal as authentication makes it: their roles
// read from the store when the call begins.
func principalOf(t *testing.T, ctx context.Context, st *adapters.AuthStore, user string) *auth.Principal {
	t.Helper()
	roles, admin, err := st.Roles(ctx, user)
	if err != nil {
		t.Fatal(err)
	}
	return &auth.Principal{Name: auth.UserName(user), Kind: auth.KindUser, User: user, Roles: roles, ClusterAdmin: admin, How: "api-key"}
}

// TestSetMemberRaceLeavesAnAdmin: two admins who remove each other at once
// (each call authenticated, its principal read, before either write) must
// not both succeed: the project, or the cluster, would be left with no
// admin, which no order of the two calls allows (the second caller is no
// admin any more). Run on a real Redis, many rounds, each pair released
// together; exactly one of each pair wins, and its write stands.
func TestSetMemberRaceLeavesAnAdmin(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 60*time.Second)
	_, rdb := testkit.Redis(t)
	st := adapters.NewAuthStore(store.New(rdb, "gateway:"))
	a := NewAuth(AuthOptions{Store: st})

	type pair struct{ parent, role string }
	cases := []pair{{"projects/p", "viewer"}, {"projects/q", ""}, {adapters.GlobalParent, ""}}
	for round := range 10 {
		for _, c := range cases {
			x, y := fmt.Sprintf("x%d", round), fmt.Sprintf("y%d", round)
			granted := "admin"
			if c.parent == adapters.GlobalParent {
				granted = adapters.RoleClusterAdmin
			}
			for _, u := range []string{x, y} {
				if err := st.SetMember(ctx, c.parent, u, granted); err != nil {
					t.Fatal(err)
				}
			}
			px, py := principalOf(t, ctx, st, x), principalOf(t, ctx, st, y)
			var wg sync.WaitGroup
			start := make(chan struct{})
			errc := make([]error, 2)
			for i, call := range []struct {
				p      *auth.Principal
				target string
			}{{px, y}, {py, x}} {
				wg.Go(func() {
					<-start
					_, errc[i] = a.SetMember(auth.NewContext(ctx, call.p), &loomv1.SetMemberRequest{Parent: c.parent, User: call.target, Role: c.role})
				})
			}
			close(start)
			wg.Wait()
			m, err := st.Members(ctx, c.parent)
			if err != nil {
				t.Fatal(err)
			}
			admins := 0
			for _, u := range []string{x, y} {
				if m[u] == granted {
					admins++
				}
			}
			wins := 0
			for _, err := range errc {
				switch {
				case err == nil:
					wins++
				case errs.Code(err).String() != "PermissionDenied":
					t.Fatalf("%s: the losing call: %v, want PermissionDenied", c.parent, err)
				}
			}
			if admins != 1 || wins != 1 {
				t.Fatalf("%s round %d: %s and %s removed each other at once: %d calls succeeded (%v), %d of them still %s (members %v)",
					c.parent, round, x, y, wins, errc, admins, granted, m)
			}
		}
	}
}

// TestSetMemberChecksTheCallerAsItWrites: a principal read before the
// caller lost the role (another gateway's cache, or a call in flight) no
// longer manages members, with a PermissionDenied that says why; and a
// cluster administrator's call, and an admin's in their own project, still
// work.
func TestSetMemberChecksTheCallerAsItWrites(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	_, rdb := testkit.Redis(t)
	st := adapters.NewAuthStore(store.New(rdb, "gateway:"))
	a := NewAuth(AuthOptions{Store: st})
	for _, m := range [][3]string{{adapters.GlobalParent, "root1", adapters.RoleClusterAdmin}, {"projects/p", "ann", "admin"}} {
		if err := st.SetMember(ctx, m[0], m[1], m[2]); err != nil {
			t.Fatal(err)
		}
	}
	root, ann := principalOf(t, ctx, st, "root1"), principalOf(t, ctx, st, "ann")
	if _, err := a.SetMember(auth.NewContext(ctx, ann), &loomv1.SetMemberRequest{Parent: "projects/p", User: "ben", Role: "user"}); err != nil {
		t.Fatalf("a project admin adds a member: %v", err)
	}
	if _, err := a.SetMember(auth.NewContext(ctx, root), &loomv1.SetMemberRequest{Parent: "projects/p", User: "ann", Role: "viewer"}); err != nil {
		t.Fatalf("a cluster admin demotes a project admin: %v", err)
	}
	_, err := a.SetMember(auth.NewContext(ctx, ann), &loomv1.SetMemberRequest{Parent: "projects/p", User: "ben", Role: "admin"})
	if errs.Code(err).String() != "PermissionDenied" || !contains(err, "users/ann is no longer an admin of projects/p") {
		t.Fatalf("a demoted admin's call with the principal read before: %v", err)
	}
	if m, _ := st.Members(ctx, "projects/p"); m["ben"] != "user" {
		t.Fatalf("ben after the refused call: %q", m["ben"])
	}
	if _, err := a.SetMember(auth.NewContext(ctx, root), &loomv1.SetMemberRequest{Parent: adapters.GlobalParent, User: "root1"}); err != nil {
		t.Fatal(err)
	}
	_, err = a.SetMember(auth.NewContext(ctx, root), &loomv1.SetMemberRequest{Parent: adapters.GlobalParent, User: "ben", Role: adapters.RoleClusterAdmin})
	if errs.Code(err).String() != "PermissionDenied" || !contains(err, "users/root1 is no longer a cluster administrator") {
		t.Fatalf("a removed cluster admin's call with the principal read before: %v", err)
	}
	if _, admin, _ := st.Roles(ctx, "ben"); admin {
		t.Fatal("ben was made a cluster administrator by a removed one")
	}
}

func contains(err error, s string) bool { return err != nil && strings.Contains(err.Error(), s) }

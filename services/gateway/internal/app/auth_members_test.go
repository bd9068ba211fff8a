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
	// root2 and amy stay: neither root1 nor ann is the last of their role.
	for _, m := range [][3]string{{adapters.GlobalParent, "root1", adapters.RoleClusterAdmin}, {"projects/p", "ann", "admin"},
		{adapters.GlobalParent, "root2", adapters.RoleClusterAdmin}, {"projects/p", "amy", "admin"}} {
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

// TestSetMemberKeepsTheLastAdmin: no call takes the role that administers
// a project (admin) or the cluster (cluster-admin) from its last holder,
// neither the holder's own nor a cluster administrator's: FailedPrecondition
// naming the project (or the cluster) and the user, saying to make another
// admin first, nothing written. Once there is another, it may go. A
// cluster administrator may still remove a project's last admin who is its
// only member (emptying the project).
func TestSetMemberKeepsTheLastAdmin(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	_, rdb := testkit.Redis(t)
	st := adapters.NewAuthStore(store.New(rdb, "gateway:"))
	a := NewAuth(AuthOptions{Store: st})
	for _, m := range [][3]string{{adapters.GlobalParent, "root1", adapters.RoleClusterAdmin}, {"projects/p", "ann", "admin"},
		{"projects/p", "ben", "user"}, {"projects/solo", "sam", "admin"}} {
		if err := st.SetMember(ctx, m[0], m[1], m[2]); err != nil {
			t.Fatal(err)
		}
	}
	root, ann, sam := principalOf(t, ctx, st, "root1"), principalOf(t, ctx, st, "ann"), principalOf(t, ctx, st, "sam")
	set := func(p *auth.Principal, parent, user, role string) error {
		_, err := a.SetMember(auth.NewContext(ctx, p), &loomv1.SetMemberRequest{Parent: parent, User: user, Role: role})
		return err
	}
	for _, c := range []struct {
		by           *auth.Principal
		parent, user string
		role, says   string
	}{
		{ann, "projects/p", "ann", "user", "users/ann is the last admin of projects/p: making them user would leave no one to administer the project; make another member admin first"},
		{ann, "projects/p", "ann", "", "users/ann is the last admin of projects/p: removing them would leave no one"},
		{root, "projects/p", "ann", "viewer", "users/ann is the last admin of projects/p"},
		{root, "projects/p", "ann", "", "`loom auth members set USER admin --project p`"},
		{sam, "projects/solo", "sam", "", "users/sam is the last admin of projects/solo"},
		{root, adapters.GlobalParent, "root1", "", "users/root1 is the last cluster administrator: removing them would leave no one to administer the cluster; make another user cluster-admin first"},
	} {
		err := set(c.by, c.parent, c.user, c.role)
		if errs.Code(err).String() != "FailedPrecondition" || !contains(err, c.says) {
			t.Fatalf("%s sets %s in %s to %q: %v, want FailedPrecondition saying %q", c.by.User, c.user, c.parent, c.role, err, c.says)
		}
	}
	if m, _ := st.Members(ctx, "projects/p"); m["ann"] != "admin" {
		t.Fatalf("ann after the refused calls: %q", m["ann"])
	}
	if roles, _, _ := st.Roles(ctx, "ann"); roles["p"] != auth.RoleAdmin {
		t.Fatalf("ann's roles after the refused calls: %v", roles)
	}
	if _, admin, _ := st.Roles(ctx, "root1"); !admin {
		t.Fatal("root1 removed as the last cluster administrator")
	}
	// Another admin first: then the last but one may go, themselves.
	if err := set(ann, "projects/p", "ben", "admin"); err != nil {
		t.Fatal(err)
	}
	if err := set(ann, "projects/p", "ann", ""); err != nil {
		t.Fatalf("an admin leaving while another stays: %v", err)
	}
	if err := set(root, adapters.GlobalParent, "ops", adapters.RoleClusterAdmin); err != nil {
		t.Fatal(err)
	}
	if err := set(root, adapters.GlobalParent, "root1", ""); err != nil {
		t.Fatalf("a cluster administrator leaving while another stays: %v", err)
	}
	// A cluster administrator empties a project whose only member is its admin.
	ops := principalOf(t, ctx, st, "ops")
	if err := set(ops, "projects/solo", "sam", ""); err != nil {
		t.Fatalf("a cluster administrator removing a project's only member: %v", err)
	}
	if m, _ := st.Members(ctx, "projects/solo"); len(m) != 0 {
		t.Fatalf("projects/solo after its only member was removed: %v", m)
	}
}

// TestSetMemberRaceKeepsTheLastAdmin: two admins, the project's (or the
// cluster's) only ones, who each remove or demote themselves at once:
// each call alone is allowed (there is another admin), both together are
// not. Counted in the script that writes, exactly one of each pair wins;
// the other is FailedPrecondition and one admin is left. Many rounds on a
// real Redis, each pair released together.
func TestSetMemberRaceKeepsTheLastAdmin(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 60*time.Second)
	_, rdb := testkit.Redis(t)
	st := adapters.NewAuthStore(store.New(rdb, "gateway:"))
	a := NewAuth(AuthOptions{Store: st})
	survivor := ""
	for round := range 20 {
		for _, c := range []struct{ parent, role string }{
			{fmt.Sprintf("projects/p%d", round), ""}, {fmt.Sprintf("projects/q%d", round), "viewer"}, {adapters.GlobalParent, ""},
		} {
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
			switch {
			case c.parent != adapters.GlobalParent:
				if err := st.SetMember(ctx, c.parent, "z", "user"); err != nil {
					t.Fatal(err) // a member the project keeps
				}
			case survivor != "":
				// The last round's: x and y are the cluster's only ones.
				if err := st.SetMember(ctx, c.parent, survivor, ""); err != nil {
					t.Fatal(err)
				}
			}
			px, py := principalOf(t, ctx, st, x), principalOf(t, ctx, st, y)
			errc := make([]error, 2)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i, p := range []*auth.Principal{px, py} {
				wg.Go(func() {
					<-start
					_, errc[i] = a.SetMember(auth.NewContext(ctx, p), &loomv1.SetMemberRequest{Parent: c.parent, User: p.User, Role: c.role})
				})
			}
			close(start)
			wg.Wait()
			m, err := st.Members(ctx, c.parent)
			if err != nil {
				t.Fatal(err)
			}
			var admins []string
			for u, r := range m {
				if r == granted {
					admins = append(admins, u)
				}
			}
			wins := 0
			for _, err := range errc {
				switch {
				case err == nil:
					wins++
				case errs.Code(err).String() != "FailedPrecondition" || !contains(err, "make another"):
					t.Fatalf("%s: the losing call: %v, want FailedPrecondition", c.parent, err)
				}
			}
			if len(admins) != 1 || wins != 1 {
				t.Fatalf("%s round %d: %s and %s each left the role %s at once: %d calls succeeded (%v), admins left %v",
					c.parent, round, x, y, granted, wins, errc, admins)
			}
			if c.parent == adapters.GlobalParent {
				survivor = admins[0]
			}
		}
	}
}

func contains(err error, s string) bool { return err != nil && strings.Contains(err.Error(), s) }

// TestMemberParentMessage: a bad parent is refused in one clause naming
// both forms, with the name clipped once (not "want ...: want ...", not a
// long name twice) and the id's limit named.
func TestMemberParentMessage(t *testing.T) {
	t.Parallel()
	long := "projects/" + strings.Repeat("a", 100)
	_, err := parseMemberParent(long)
	if err == nil {
		t.Fatal("parseMemberParent accepted a 100-character project id")
	}
	msg := err.Error()
	if strings.Count(msg, "want") != 1 || !strings.Contains(msg, "want projects/{project} or global, got ") ||
		strings.Count(msg, strings.Repeat("a", 50)) != 1 || !strings.Contains(msg, "is 100 characters, more than the 63 an id takes") || len(msg) > 400 {
		t.Errorf("message %q: want one \"want projects/{project} or global, got ...\", the name clipped", msg)
	}
	if _, err := parseMemberParent("global"); err != nil {
		t.Errorf("global: %v", err)
	}
}

package gateway

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/loom-ml/loom/libs/testkit"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/adapters"
	"github.com/loom-ml/loom/services/gateway/internal/domain"
)

// raceRounds is how many times each race below is run: each round
// releases its calls together, so a check-then-write that is not one step
// loses in some of them.
const raceRounds = 25

// together runs calls at once (released by one channel close) and returns
// their errors, in order.
func together(calls ...func() error) []error {
	errc := make([]error, len(calls))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, call := range calls {
		wg.Go(func() {
			<-start
			errc[i] = call()
		})
	}
	close(start)
	wg.Wait()
	return errc
}

// wantRaceLoser checks the error of a call that lost a race: nil (it won),
// or one of codes (what the call answers when it decides after the winner
// wrote), or Aborted saying to retry (it decided before and wrote after).
func wantRaceLoser(t *testing.T, what string, err error, codes_ ...codes.Code) {
	t.Helper()
	if err == nil {
		return
	}
	c := status.Code(err)
	if c == codes.Aborted {
		wantAcctCode(t, err, codes.Aborted, "meanwhile", "retry")
		return
	}
	for _, want := range codes_ {
		if c == want {
			return
		}
	}
	t.Fatalf("%s: %v, want OK, %v or Aborted", what, err, codes_)
}

func (h *harness) createAccounts(t *testing.T, ctx context.Context, accts ...*loomv1.Account) {
	t.Helper()
	for _, a := range accts {
		if _, err := h.accounts().CreateAccount(ctx, &loomv1.CreateAccountRequest{Parent: project, Account: a}, h.call("pat")); err != nil {
			t.Fatalf("create %s: %v", a.GetName(), err)
		}
	}
}

// storedAccounts is the project's accounts by id, as ListAccounts shows them.
func (h *harness) storedAccounts(t *testing.T, ctx context.Context) map[string]*loomv1.Account {
	t.Helper()
	out := map[string]*loomv1.Account{}
	l, err := h.accounts().ListAccounts(ctx, &loomv1.ListAccountsRequest{Parent: project, PageSize: 1000}, h.call("vic"))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range l.GetAccounts() {
		out[a.GetName()[len("projects/default/accounts/"):]] = a
	}
	return out
}

// TestUpdateAccountRace: UpdateAccount's write holds only while the
// account and every parent its loop check read are as read. Moving a under
// b and b under a at once leaves no loop (one of them is refused: the loop
// check, or Aborted); two updates of one account with different masks at
// once lose neither change (the later one is Aborted unless it read the
// first's write).
func TestUpdateAccountRace(t *testing.T) {
	t.Parallel()
	h := newAccountsHarness(t)
	ctx := testkit.Context(t, 120*time.Second)
	acc := h.accounts()
	update := func(name string, a *loomv1.Account, paths ...string) func() error {
		return func() error {
			a.Name = "projects/default/accounts/" + name
			_, err := acc.UpdateAccount(ctx, &loomv1.UpdateAccountRequest{Account: a, UpdateMask: &fieldmaskpb.FieldMask{Paths: paths}}, h.call("pat"))
			return err
		}
	}
	for round := range raceRounds {
		a, b, c := fmt.Sprintf("a%d", round), fmt.Sprintf("b%d", round), fmt.Sprintf("c%d", round)
		h.createAccounts(t, ctx, &loomv1.Account{Name: a}, &loomv1.Account{Name: b}, &loomv1.Account{Name: c})
		errc := together(
			update(a, &loomv1.Account{ParentAccount: b}, "parent_account"),
			update(b, &loomv1.Account{ParentAccount: a}, "parent_account"),
			update(c, &loomv1.Account{Description: "shared"}, "description"),
			update(c, &loomv1.Account{Fairshare: 7}, "fairshare"),
		)
		if errc[0] == nil && errc[1] == nil {
			t.Fatalf("round %d: %s under %s and %s under %s both succeeded: a loop", round, a, b, b, a)
		}
		wantRaceLoser(t, "move "+a, errc[0], codes.InvalidArgument)
		wantRaceLoser(t, "move "+b, errc[1], codes.InvalidArgument)
		wantRaceLoser(t, "describe "+c, errc[2])
		wantRaceLoser(t, "share "+c, errc[3])
		stored := h.storedAccounts(t, ctx)
		for _, id := range []string{a, b} {
			seen := map[string]bool{}
			for p := id; p != "root"; p = stored[p].GetParentAccount() {
				if seen[p] || stored[p] == nil {
					t.Fatalf("round %d: the parents of %s make a loop or lead nowhere: %v", round, id, seen)
				}
				seen[p] = true
			}
		}
		if got := stored[c]; (errc[2] == nil && got.GetDescription() != "shared") || (errc[3] == nil && got.GetFairshare() != 7) {
			t.Fatalf("round %d: %s stored as %v, after the description (%v) and the fairshare (%v) updates: one was lost",
				round, c, got, errc[2], errc[3])
		}
	}
}

// TestDeleteAccountRace: DeleteAccount checks that nothing points at the
// account (no sub-account, no user) and then deletes it; CreateAccount
// (parent = it), UpdateAccount (moved under it) and SetAssociation (a user
// added to it) check that it exists and then write. Each round releases
// the delete and one of them together: whichever writes second is refused
// (Aborted, or its own check), and an account that is gone leaves no
// sub-account and no association pointing at it.
func TestDeleteAccountRace(t *testing.T) {
	t.Parallel()
	h := newAccountsHarness(t)
	ctx := testkit.Context(t, 120*time.Second)
	acc := h.accounts()
	for round := range 2 * raceRounds {
		x, kid, moved, user := fmt.Sprintf("x%d", round), fmt.Sprintf("k%d", round), fmt.Sprintf("m%d", round), fmt.Sprintf("u%d", round)
		h.createAccounts(t, ctx, &loomv1.Account{Name: x}, &loomv1.Account{Name: moved})
		rival, what := func() error {
			_, err := acc.CreateAccount(ctx, &loomv1.CreateAccountRequest{Parent: project, Account: &loomv1.Account{Name: kid, ParentAccount: x}}, h.call("pat"))
			return err
		}, "create "+kid+" under it"
		switch round % 3 {
		case 1:
			rival, what = func() error {
				_, err := acc.UpdateAccount(ctx, &loomv1.UpdateAccountRequest{Account: &loomv1.Account{Name: "projects/default/accounts/" + moved, ParentAccount: x},
					UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"parent_account"}}}, h.call("pat"))
				return err
			}, "move "+moved+" under it"
		case 2:
			rival, what = func() error {
				_, err := acc.SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: project, Association: &loomv1.Association{Account: x, User: user}}, h.call("pat"))
				return err
			}, "add "+user+" to it"
		}
		errc := together(func() error {
			_, err := acc.DeleteAccount(ctx, &loomv1.DeleteAccountRequest{Name: "projects/default/accounts/" + x}, h.call("pat"))
			return err
		}, rival)
		wantRaceLoser(t, "delete "+x, errc[0], codes.FailedPrecondition)
		wantRaceLoser(t, what, errc[1], codes.InvalidArgument)
		if errc[0] == nil && errc[1] == nil {
			t.Fatalf("round %d: delete %s and %s both succeeded", round, x, what)
		}
		stored := h.storedAccounts(t, ctx)
		if stored[x] != nil {
			continue
		}
		for id, a := range stored {
			if a.GetParentAccount() == x {
				t.Fatalf("round %d: %s was deleted but %s is under it", round, x, id)
			}
		}
		l, err := acc.ListAssociations(ctx, &loomv1.ListAssociationsRequest{Parent: project, User: user}, h.call("vic"))
		if err != nil {
			t.Fatal(err)
		}
		if len(l.GetAssociations()) > 0 {
			t.Fatalf("round %d: %s was deleted but %s is in it", round, x, user)
		}
	}
}

// TestCreateAccountAgainAfterItsDelete: a deleted account may be made
// again at once, and two creates of one account released together make it
// once: the other is AlreadyExists.
func TestCreateAccountAgainAfterItsDelete(t *testing.T) {
	t.Parallel()
	h := newAccountsHarness(t)
	ctx := testkit.Context(t, 60*time.Second)
	acc := h.accounts()
	create := func(id string) func() error {
		return func() error {
			_, err := acc.CreateAccount(ctx, &loomv1.CreateAccountRequest{Parent: project, Account: &loomv1.Account{Name: id}}, h.call("pat"))
			return err
		}
	}
	for round := range raceRounds {
		id := fmt.Sprintf("again%d", round)
		errc := together(create(id), create(id))
		if (errc[0] == nil) == (errc[1] == nil) {
			t.Fatalf("round %d: two creates of %s: %v, %v; want one made, one AlreadyExists", round, id, errc[0], errc[1])
		}
		for _, err := range errc {
			if err != nil {
				wantAcctCode(t, err, codes.AlreadyExists)
			}
		}
		if _, err := acc.DeleteAccount(ctx, &loomv1.DeleteAccountRequest{Name: "projects/default/accounts/" + id}, h.call("pat")); err != nil {
			t.Fatalf("round %d: delete %s: %v", round, id, err)
		}
		if err := create(id)(); err != nil {
			t.Fatalf("round %d: %s made again after its delete: %v", round, id, err)
		}
	}
}

// storedAssociations is user's associations by account, as
// ListAssociations shows them.
func (h *harness) storedAssociations(t *testing.T, ctx context.Context, user string) map[string]*loomv1.Association {
	t.Helper()
	l, err := h.accounts().ListAssociations(ctx, &loomv1.ListAssociationsRequest{Parent: project, User: user, PageSize: 1000}, h.call("vic"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*loomv1.Association{}
	for _, a := range l.GetAssociations() {
		out[a.GetAccount()] = a
	}
	return out
}

// TestSetAssociationRace: SetAssociation and DeleteAssociation write only
// while the association and the user's default account are as they read
// them. Two first associations of a user set at once do not both answer
// that they are the default (one is, as stored; the other is Aborted or
// read the first); making an association the default while it is deleted
// never leaves the user a default account they are no longer in.
func TestSetAssociationRace(t *testing.T) {
	t.Parallel()
	h := newAccountsHarness(t)
	ctx := testkit.Context(t, 120*time.Second)
	acc := h.accounts()
	h.createAccounts(t, ctx, &loomv1.Account{Name: "p"})
	set := func(a *loomv1.Association, got **loomv1.Association) func() error {
		return func() error {
			r, err := acc.SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: project, Association: a}, h.call("pat"))
			*got = r
			return err
		}
	}
	for round := range raceRounds {
		u, v := fmt.Sprintf("u%d", round), fmt.Sprintf("v%d", round)
		var got [2]*loomv1.Association
		errc := together(set(&loomv1.Association{User: u, Account: "root"}, &got[0]), set(&loomv1.Association{User: u, Account: "p", MaxJobs: 3}, &got[1]))
		stored := h.storedAssociations(t, ctx, u)
		for i, err := range errc {
			wantRaceLoser(t, "set "+u, err)
			if err != nil {
				continue
			}
			if s := stored[got[i].GetAccount()]; got[i].GetDefaultAccount() != s.GetDefaultAccount() {
				t.Fatalf("round %d: set %s account=%s answered default_account=%v, stored %v (the two calls: %v, %v)",
					round, u, got[i].GetAccount(), got[i].GetDefaultAccount(), s, errc[0], errc[1])
			}
		}

		// v: root (the default) and p; p made the default while deleted.
		var ignored, ignored2 *loomv1.Association
		if err := set(&loomv1.Association{User: v, Account: "root"}, &ignored)(); err != nil {
			t.Fatal(err)
		}
		if err := set(&loomv1.Association{User: v, Account: "p"}, &ignored)(); err != nil {
			t.Fatal(err)
		}
		errc = together(set(&loomv1.Association{User: v, Account: "p", DefaultAccount: true}, &ignored2), func() error {
			_, err := acc.DeleteAssociation(ctx, &loomv1.DeleteAssociationRequest{Parent: project, User: v, Account: "p"}, h.call("pat"))
			return err
		})
		wantRaceLoser(t, "make p "+v+"'s default", errc[0])
		wantRaceLoser(t, "delete "+v+" from p", errc[1], codes.FailedPrecondition)
		stored = h.storedAssociations(t, ctx, v)
		defaults := 0
		for _, a := range stored {
			if a.GetDefaultAccount() {
				defaults++
			}
		}
		if defaults != 1 {
			t.Fatalf("round %d: %s has %d default accounts among %v (set: %v, delete: %v)", round, v, defaults, stored, errc[0], errc[1])
		}
	}
}

// TestLastAssociationDeleteRace: a user in one account (their default)
// is added to another while that one is deleted. The delete of what it
// read as the user's last association takes their default with it; the
// add kept the default as read. Released together, whichever writes second
// is Aborted (or decides on what the first wrote): the user never ends in
// an account with no default account, nor with a default and no account.
func TestLastAssociationDeleteRace(t *testing.T) {
	t.Parallel()
	h := newAccountsHarness(t)
	ctx := testkit.Context(t, 120*time.Second)
	acc := h.accounts()
	h.createAccounts(t, ctx, &loomv1.Account{Name: "q"})
	defKey := "gateway:" + adapters.KeyAssocDefaultPrefix + "default"
	for round := range 2 * raceRounds {
		u := fmt.Sprintf("w%d", round)
		if _, err := acc.SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: project, Association: &loomv1.Association{User: u, Account: "root"}}, h.call("pat")); err != nil {
			t.Fatal(err)
		}
		errc := together(func() error {
			_, err := acc.SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: project, Association: &loomv1.Association{User: u, Account: "q"}}, h.call("pat"))
			return err
		}, func() error {
			_, err := acc.DeleteAssociation(ctx, &loomv1.DeleteAssociationRequest{Parent: project, User: u, Account: "root"}, h.call("pat"))
			return err
		})
		wantRaceLoser(t, "add "+u+" to q", errc[0])
		wantRaceLoser(t, "delete "+u+" from root", errc[1], codes.FailedPrecondition)
		stored := h.storedAssociations(t, ctx, u)
		defaults := 0
		for _, a := range stored {
			if a.GetDefaultAccount() {
				defaults++
			}
		}
		def, err := h.redis.HGet(ctx, defKey, u).Result()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		if (len(stored) > 0 && defaults != 1) || (len(stored) == 0 && def != "") {
			t.Fatalf("round %d: %s is in %v with %d default accounts (stored default %q) (add: %v, delete: %v)",
				round, u, stored, defaults, def, errc[0], errc[1])
		}
	}
}

// TestAssociationLimitRace: the limit on a project's associations holds
// under racing adds. With one place left, new associations released
// together make one; the others are ResourceExhausted (or Aborted), and
// the project never holds more than the limit.
func TestAssociationLimitRace(t *testing.T) {
	t.Parallel()
	h := newAccountsHarness(t)
	ctx := testkit.Context(t, 120*time.Second)
	acc := h.accounts()
	key := "gateway:" + adapters.KeyAssocsPrefix + "default"
	filler := map[string]any{}
	for i := range domain.MaxAssociationsPerProject - 1 {
		filler[adapters.AssocField(fmt.Sprintf("filler%d", i), "root")] = ""
	}
	if err := h.redis.HSet(ctx, key, filler).Err(); err != nil {
		t.Fatal(err)
	}
	const racers = 4
	for round := range raceRounds {
		calls := make([]func() error, racers)
		for i := range calls {
			user := fmt.Sprintf("r%d-%d", round, i)
			calls[i] = func() error {
				_, err := acc.SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: project, Association: &loomv1.Association{User: user, Account: "root"}}, h.call("pat"))
				return err
			}
		}
		errc := together(calls...)
		made := 0
		for i, err := range errc {
			if err == nil {
				made++
				continue
			}
			wantRaceLoser(t, fmt.Sprintf("add r%d-%d", round, i), err, codes.ResourceExhausted)
		}
		n, err := h.redis.HLen(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n > domain.MaxAssociationsPerProject || made > 1 {
			t.Fatalf("round %d: %d of %d racing adds made with one place left; the project holds %d associations, the limit is %d (%v)",
				round, made, racers, n, domain.MaxAssociationsPerProject, errc)
		}
		// Make the place free again for the next round.
		for i := range racers {
			h.redis.HDel(ctx, key, adapters.AssocField(fmt.Sprintf("r%d-%d", round, i), "root"))
		}
	}
	_, err := acc.SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: project, Association: &loomv1.Association{User: "last", Account: "root"}}, h.call("pat"))
	if err != nil {
		t.Fatalf("the last place: %v", err)
	}
	_, err = acc.SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: project, Association: &loomv1.Association{User: "past", Account: "root"}}, h.call("pat"))
	wantAcctCode(t, err, codes.ResourceExhausted, "associations per project: 10000")
}

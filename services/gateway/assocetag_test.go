package gateway

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/testkit"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// assocOf is user's association with account as ListAssociations shows it.
func (h *harness) assocOf(t *testing.T, ctx context.Context, user, account string) *loomv1.Association {
	t.Helper()
	l, err := h.accounts().ListAssociations(ctx, &loomv1.ListAssociationsRequest{Parent: project, User: user, Account: account}, h.call("vic"))
	if err != nil {
		t.Fatal(err)
	}
	if len(l.GetAssociations()) != 1 {
		t.Fatalf("associations of %s in %s: %v, want one", user, account, l.GetAssociations())
	}
	return l.GetAssociations()[0]
}

// TestAssociationEtag: an association carries an AIP-154 etag on every
// read and write; a SetAssociation sending one writes only while the
// association still has it (else Aborted, HTTP 409, saying it changed
// meanwhile and to read again and retry, nothing written), and one
// sending none replaces it as before. A change of the user's default
// account leaves the etag alone.
func TestAssociationEtag(t *testing.T) {
	t.Parallel()
	h := newAccountsHarness(t)
	ctx := testkit.Context(t, 60*time.Second)
	acc := h.accounts()
	h.createAccounts(t, ctx, &loomv1.Account{Name: "physics"}, &loomv1.Account{Name: "chem"})
	set := func(a *loomv1.Association) (*loomv1.Association, error) {
		return acc.SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: project, Association: a}, h.call("pat"))
	}
	got, err := set(&loomv1.Association{Account: "physics", User: "alice", MaxJobs: 2})
	if err != nil {
		t.Fatal(err)
	}
	read := h.assocOf(t, ctx, "alice", "physics")
	if got.GetEtag() == "" || read.GetEtag() != got.GetEtag() {
		t.Fatalf("etag as written %q, as listed %q: want the same, set", got.GetEtag(), read.GetEtag())
	}
	// Another account made the default: the association's values, and so
	// its etag, are as they were.
	if _, err := set(&loomv1.Association{Account: "chem", User: "alice", DefaultAccount: true}); err != nil {
		t.Fatal(err)
	}
	if e := h.assocOf(t, ctx, "alice", "physics").GetEtag(); e != read.GetEtag() {
		t.Fatalf("etag after the default moved: %q, want %q", e, read.GetEtag())
	}

	// The current etag: written, and a new etag answered.
	first := proto.Clone(read).(*loomv1.Association)
	first.Qos, first.DefaultAccount = []string{"high"}, false
	got, err = set(first)
	if err != nil {
		t.Fatalf("set with the current etag: %v", err)
	}
	if got.GetEtag() == read.GetEtag() || got.GetEtag() != h.assocOf(t, ctx, "alice", "physics").GetEtag() {
		t.Fatalf("etag after a change %q (before %q): want a new one, as listed", got.GetEtag(), read.GetEtag())
	}
	// The same read again: stale, refused, nothing written.
	second := proto.Clone(read).(*loomv1.Association)
	second.MaxSubmitJobs = 9
	_, err = set(second)
	wantAcctCode(t, err, codes.Aborted, "user=alice account=physics", "changed meanwhile", read.GetEtag(), "read again and retry")
	if a := h.assocOf(t, ctx, "alice", "physics"); a.GetMaxSubmitJobs() != 0 || !slices.Equal(a.GetQos(), []string{"high"}) {
		t.Fatalf("after the stale write: %v, want the first write's values", a)
	}
	// No etag: replaced, as before.
	if _, err := set(&loomv1.Association{Account: "physics", User: "alice", MaxJobs: 5}); err != nil {
		t.Fatalf("set without an etag: %v", err)
	}
	if a := h.assocOf(t, ctx, "alice", "physics"); a.GetMaxJobs() != 5 || len(a.GetQos()) != 0 {
		t.Fatalf("after a write without an etag: %v", a)
	}
	// Deleted since it was read: Aborted, and not made again.
	stale := h.assocOf(t, ctx, "alice", "physics")
	if _, err := acc.DeleteAssociation(ctx, &loomv1.DeleteAssociationRequest{Parent: project, User: "alice", Account: "physics"}, h.call("pat")); err != nil {
		t.Fatal(err)
	}
	_, err = set(stale)
	wantAcctCode(t, err, codes.Aborted, "deleted meanwhile", "read again and retry")
	if l, _ := acc.ListAssociations(ctx, &loomv1.ListAssociationsRequest{Parent: project, User: "alice", Account: "physics"}, h.call("vic")); len(l.GetAssociations()) != 0 {
		t.Fatalf("a stale write made the deleted association again: %v", l.GetAssociations())
	}
	// Bad etags name the field and the limit.
	_, err = set(&loomv1.Association{Account: "chem", User: "alice", Etag: strings.Repeat("e", 129)})
	wantAcctCode(t, err, codes.InvalidArgument, "association.etag", "limit of 128")

	// Over REST a stale etag is 409.
	cur := h.assocOf(t, ctx, "alice", "chem")
	body := fmt.Sprintf(`{"account":"chem","user":"alice","max_jobs":3,"etag":%q}`, cur.GetEtag()+"x")
	code, b := restCall(ctx, t, h.restAs("pat"), h.restBase, "POST", "/v1/projects/default/associations", body)
	if code != http.StatusConflict || !strings.Contains(b, "changed meanwhile") {
		t.Fatalf("stale etag over REST: %d %s", code, b)
	}
}

// TestRacingAssociationEditsBothLand: two admins each adding a QOS to one
// association at once, as sacctmgr modify user ... set QOS+=x does (read
// the association, add to its list, write it whole with the etag read,
// and once more from a new read when Aborted), both land: neither write
// puts back the list the other replaced.
func TestRacingAssociationEditsBothLand(t *testing.T) {
	t.Parallel()
	h := newAccountsHarness(t)
	ctx := testkit.Context(t, 120*time.Second)
	acc := h.accounts()
	h.createAccounts(t, ctx, &loomv1.Account{Name: "physics"})
	addQOS := func(user, q string) func() error {
		return func() error {
			var err error
			for range 2 {
				l, lerr := acc.ListAssociations(ctx, &loomv1.ListAssociationsRequest{Parent: project, User: user, Account: "physics"}, h.call("pat"))
				if lerr != nil {
					return lerr
				}
				a := l.GetAssociations()[0]
				a.Qos = append(a.Qos, q)
				if _, err = acc.SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: project, Association: a}, h.call("pat")); status.Code(err) != codes.Aborted {
					return err
				}
			}
			return err
		}
	}
	for round := range raceRounds {
		user := fmt.Sprintf("u%d", round)
		if _, err := acc.SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: project, Association: &loomv1.Association{Account: "physics", User: user}}, h.call("pat")); err != nil {
			t.Fatal(err)
		}
		for i, err := range together(addQOS(user, "high"), addQOS(user, "debug")) {
			if err != nil {
				t.Fatalf("round %d: edit %d: %v", round, i, err)
			}
		}
		if q := h.assocOf(t, ctx, user, "physics").GetQos(); !slices.Equal(q, []string{"debug", "high"}) {
			t.Fatalf("round %d: QOS after two racing QOS+= edits: %v, want both (debug, high)", round, q)
		}
	}
}

// TestCreateOnlyAssociationNeverReplaces: an add (create_only, as sacctmgr
// add user sends it) of an association that exists is AlreadyExists and
// writes nothing; of two racing adds of one association, one lands whole
// and the other is refused, so neither admin's limits are replaced
// unseen.
func TestCreateOnlyAssociationNeverReplaces(t *testing.T) {
	t.Parallel()
	h := newAccountsHarness(t)
	ctx := testkit.Context(t, 120*time.Second)
	acc := h.accounts()
	h.createAccounts(t, ctx, &loomv1.Account{Name: "physics"})
	add := func(a *loomv1.Association) (*loomv1.Association, error) {
		return acc.SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: project, Association: a, CreateOnly: true}, h.call("pat"))
	}
	if _, err := add(&loomv1.Association{Account: "physics", User: "bob", MaxJobs: 5}); err != nil {
		t.Fatal(err)
	}
	_, err := add(&loomv1.Association{Account: "physics", User: "bob", Qos: []string{"high"}})
	wantAcctCode(t, err, codes.AlreadyExists, "user=bob account=physics exists", "nothing was written", "sacctmgr modify user")
	if got := h.assocOf(t, ctx, "bob", "physics"); got.GetMaxJobs() != 5 || len(got.GetQos()) != 0 {
		t.Fatalf("after a refused add: %v, want MaxJobs 5 and no QOS kept", got)
	}
	for round := range raceRounds {
		user := fmt.Sprintf("u%d", round)
		var got [2]*loomv1.Association
		errs := together(
			func() (err error) {
				got[0], err = add(&loomv1.Association{Account: "physics", User: user, MaxJobs: 3})
				return err
			},
			func() (err error) {
				got[1], err = add(&loomv1.Association{Account: "physics", User: user, Qos: []string{"high"}})
				return err
			})
		won := -1
		for i, err := range errs {
			switch {
			case err == nil && won < 0:
				won = i
			case err == nil:
				t.Fatalf("round %d: both racing adds landed", round)
			case status.Code(err) != codes.AlreadyExists:
				t.Fatalf("round %d: add %d: %v, want AlreadyExists or success", round, i, err)
			}
		}
		if won < 0 {
			t.Fatalf("round %d: neither racing add landed: %v", round, errs)
		}
		now := h.assocOf(t, ctx, user, "physics")
		if now.GetMaxJobs() != got[won].GetMaxJobs() || !slices.Equal(now.GetQos(), got[won].GetQos()) {
			t.Fatalf("round %d: stored %v, want the winner's %v whole", round, now, got[won])
		}
	}
}

// TestDeleteAssociationEtag: a DeleteAssociation sending the etag it read
// deletes only while the association still has it: after another admin
// changed it, Aborted (HTTP 409, saying it changed meanwhile), nothing
// deleted and the other admin's values kept; with the current etag, or
// none, it deletes. An etag past the limit names the field.
func TestDeleteAssociationEtag(t *testing.T) {
	t.Parallel()
	h := newAccountsHarness(t)
	ctx := testkit.Context(t, 60*time.Second)
	acc := h.accounts()
	h.createAccounts(t, ctx, &loomv1.Account{Name: "physics"}, &loomv1.Account{Name: "chem"})
	del := func(user, account, etag string) (*loomv1.Association, error) {
		return acc.DeleteAssociation(ctx, &loomv1.DeleteAssociationRequest{Parent: project, User: user, Account: account, Etag: etag}, h.call("pat"))
	}
	for _, a := range []*loomv1.Association{{Account: "chem", User: "alice"}, {Account: "physics", User: "alice", MaxJobs: 2}} {
		if _, err := acc.SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: project, Association: a}, h.call("pat")); err != nil {
			t.Fatal(err)
		}
	}
	seen := h.assocOf(t, ctx, "alice", "physics")
	// Another admin changes it after this one read it.
	changed := proto.Clone(seen).(*loomv1.Association)
	changed.MaxJobs, changed.DefaultAccount = 9, false
	if _, err := acc.SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: project, Association: changed}, h.call("pat")); err != nil {
		t.Fatal(err)
	}
	_, err := del("alice", "physics", seen.GetEtag())
	wantAcctCode(t, err, codes.Aborted, "user=alice account=physics", "changed meanwhile", seen.GetEtag(), "nothing was deleted")
	now := h.assocOf(t, ctx, "alice", "physics")
	if now.GetMaxJobs() != 9 {
		t.Fatalf("after a stale delete: %v, want the other admin's MaxJobs 9 kept", now)
	}
	// The current etag: deleted, and what was deleted answered.
	got, err := del("alice", "physics", now.GetEtag())
	if err != nil {
		t.Fatalf("delete with the current etag: %v", err)
	}
	if got.GetEtag() != now.GetEtag() || got.GetMaxJobs() != 9 {
		t.Fatalf("deleted %v, want the association as read (etag %q)", got, now.GetEtag())
	}
	_, err = del("alice", "chem", strings.Repeat("e", 129))
	wantAcctCode(t, err, codes.InvalidArgument, "etag", "limit of 128")
	// No etag: deleted as before.
	if _, err := del("alice", "chem", ""); err != nil {
		t.Fatalf("delete without an etag: %v", err)
	}

	// Over REST a stale etag is 409.
	if _, err := acc.SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: project, Association: &loomv1.Association{Account: "chem", User: "bob"}}, h.call("pat")); err != nil {
		t.Fatal(err)
	}
	stale := h.assocOf(t, ctx, "bob", "chem").GetEtag() + "x"
	code, b := restCall(ctx, t, h.restAs("pat"), h.restBase, "DELETE", "/v1/projects/default/associations?user=bob&account=chem&etag="+stale, "")
	if code != http.StatusConflict || !strings.Contains(b, "changed meanwhile") {
		t.Fatalf("stale etag over REST: %d %s", code, b)
	}
	h.assocOf(t, ctx, "bob", "chem") // still there
}

// TestRacingDeleteAndEditOneWins: an admin deleting an association with
// the etag they read while another edits it from the same read (etag
// sent too, as sacctmgr modify does): exactly one lands, the other is
// Aborted. Without the delete's etag both would land, the delete removing
// values its admin never saw.
func TestRacingDeleteAndEditOneWins(t *testing.T) {
	t.Parallel()
	h := newAccountsHarness(t)
	ctx := testkit.Context(t, 120*time.Second)
	acc := h.accounts()
	h.createAccounts(t, ctx, &loomv1.Account{Name: "physics"})
	for round := range raceRounds {
		user := fmt.Sprintf("u%d", round)
		if _, err := acc.SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: project, Association: &loomv1.Association{Account: "physics", User: user}}, h.call("pat")); err != nil {
			t.Fatal(err)
		}
		seen := h.assocOf(t, ctx, user, "physics")
		edit := proto.Clone(seen).(*loomv1.Association)
		edit.MaxJobs = 4
		errs := together(
			func() error {
				_, err := acc.DeleteAssociation(ctx, &loomv1.DeleteAssociationRequest{Parent: project, User: user, Account: "physics", Etag: seen.GetEtag()}, h.call("pat"))
				return err
			},
			func() error {
				_, err := acc.SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: project, Association: edit}, h.call("pat"))
				return err
			})
		for i, err := range errs {
			if err != nil && status.Code(err) != codes.Aborted {
				t.Fatalf("round %d: call %d: %v", round, i, err)
			}
		}
		if (errs[0] == nil) == (errs[1] == nil) {
			t.Fatalf("round %d: delete %v, edit %v: want exactly one to land", round, errs[0], errs[1])
		}
		l, err := acc.ListAssociations(ctx, &loomv1.ListAssociationsRequest{Parent: project, User: user, Account: "physics"}, h.call("vic"))
		if err != nil {
			t.Fatal(err)
		}
		if kept := len(l.GetAssociations()) == 1; kept != (errs[1] == nil) || kept && l.GetAssociations()[0].GetMaxJobs() != 4 {
			t.Fatalf("round %d: delete %v, edit %v: stored %v", round, errs[0], errs[1], l.GetAssociations())
		}
	}
}

package gateway

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/domain"
)

// newAccountsHarness is the harness; its callers here are pat (admin of
// project default), vic (viewer), alice (user) and oz (admin of another
// project), from testPrincipals.
func newAccountsHarness(t *testing.T) *harness { return newHarness(t) }

// accounts is AccountService over an anonymous connection: each call
// names its caller with h.call.
func (h *harness) accounts() loomv1.AccountServiceClient {
	return loomv1.NewAccountServiceClient(h.anon)
}

func wantAcctCode(t *testing.T, err error, code codes.Code, contains ...string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("got %v, want %v", err, code)
	}
	for _, s := range contains {
		if !strings.Contains(status.Convert(err).Message(), s) {
			t.Fatalf("%v: message does not name %q", err, s)
		}
	}
}

func TestAccountsCreateListAndAssociate(t *testing.T) {
	t.Parallel()
	h := newAccountsHarness(t)
	ctx := testkit.Context(t, 30*time.Second)
	acc := h.accounts()

	got, err := acc.CreateAccount(ctx, &loomv1.CreateAccountRequest{Parent: project, Account: &loomv1.Account{Name: "physics"}}, h.call("pat"))
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	want := &loomv1.Account{Name: "projects/default/accounts/physics", Description: "physics", Organization: "physics", ParentAccount: "root", Fairshare: 1}
	if !proto.Equal(got, want) {
		t.Fatalf("created %v, want %v", got, want)
	}
	if _, err := acc.CreateAccount(ctx, &loomv1.CreateAccountRequest{Parent: project, Account: &loomv1.Account{
		Name: "projects/default/accounts/qcd", ParentAccount: "physics", Description: "lattice"}}, h.call("pat")); err != nil {
		t.Fatalf("create qcd: %v", err)
	}
	_, err = acc.CreateAccount(ctx, &loomv1.CreateAccountRequest{Parent: project, Account: &loomv1.Account{Name: "physics"}}, h.call("pat"))
	wantAcctCode(t, err, codes.AlreadyExists)
	_, err = acc.CreateAccount(ctx, &loomv1.CreateAccountRequest{Parent: project, Account: &loomv1.Account{Name: "root"}}, h.call("pat"))
	wantAcctCode(t, err, codes.AlreadyExists)

	// Who may: a viewer reads but does not write, another project's admin
	// finds nothing, an anonymous caller is refused.
	_, err = acc.CreateAccount(ctx, &loomv1.CreateAccountRequest{Parent: project, Account: &loomv1.Account{Name: "chem"}}, h.call("vic"))
	wantAcctCode(t, err, codes.PermissionDenied, "admin")
	_, err = acc.ListAccounts(ctx, &loomv1.ListAccountsRequest{Parent: project}, h.call("oz"))
	wantAcctCode(t, err, codes.NotFound)
	_, err = acc.ListAccounts(ctx, &loomv1.ListAccountsRequest{Parent: project})
	wantAcctCode(t, err, codes.Unauthenticated)

	list, err := acc.ListAccounts(ctx, &loomv1.ListAccountsRequest{Parent: project}, h.call("vic"))
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	var names []string
	for _, a := range list.GetAccounts() {
		names = append(names, a.GetName()+"<"+a.GetParentAccount()+">"+a.GetOrganization())
	}
	if got, want := strings.Join(names, " "), "projects/default/accounts/physics<root>physics projects/default/accounts/qcd<physics>physics projects/default/accounts/root<>root"; got != want {
		t.Fatalf("accounts: %s, want %s", got, want)
	}

	// alice's first association is her default; a second one is not.
	a, err := acc.SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: project, Association: &loomv1.Association{
		Account: "physics", User: "alice", MaxJobs: 2, MaxSubmitJobs: 5}}, h.call("pat"))
	if err != nil {
		t.Fatalf("set: %v", err)
	}
	if !a.GetDefaultAccount() || a.GetFairshare() != 1 || a.GetMaxJobs() != 2 {
		t.Fatalf("association %v: want default account, fairshare 1, MaxJobs 2", a)
	}
	if _, err := acc.SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: project, Association: &loomv1.Association{
		Account: "qcd", User: "alice"}}, h.call("pat")); err != nil {
		t.Fatalf("set qcd: %v", err)
	}
	if _, err := acc.SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: project, Association: &loomv1.Association{
		Account: "qcd", User: "bob", MaxJobs: 1}}, h.call("pat")); err != nil {
		t.Fatalf("set bob: %v", err)
	}
	_, err = acc.SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: project, Association: &loomv1.Association{
		Account: "qcd", User: "carl"}}, h.call("alice"))
	wantAcctCode(t, err, codes.PermissionDenied)

	mine, err := acc.ListAssociations(ctx, &loomv1.ListAssociationsRequest{Parent: project, User: "alice"}, h.call("vic"))
	if err != nil {
		t.Fatalf("list associations: %v", err)
	}
	var rows []string
	for _, a := range mine.GetAssociations() {
		rows = append(rows, fmt.Sprintf("%s/%s max=%d submit=%d default=%v", a.GetUser(), a.GetAccount(), a.GetMaxJobs(), a.GetMaxSubmitJobs(), a.GetDefaultAccount()))
	}
	if got, want := strings.Join(rows, "; "), "alice/physics max=2 submit=5 default=true; alice/qcd max=0 submit=0 default=false"; got != want {
		t.Fatalf("alice's associations: %s, want %s", got, want)
	}
	qcd, err := acc.ListAssociations(ctx, &loomv1.ListAssociationsRequest{Parent: project, Account: "projects/default/accounts/qcd"}, h.call("vic"))
	if err != nil || len(qcd.GetAssociations()) != 2 {
		t.Fatalf("qcd's associations: %v, %v; want alice and bob", qcd, err)
	}

	// The scheduler learns MaxJobs from the command the outbox publishes,
	// keyed by the project.
	ev := testkit.WaitEvent(t, h.broker, topics.JobCommands, 30*time.Second, func(e envelope.Event) bool {
		ac, ok := e.Payload.(*eventsv1.AssociationChanged)
		return ok && ac.GetAssociation().GetUser() == "alice" && ac.GetAssociation().GetAccount() == "physics"
	})
	ac := ev.Payload.(*eventsv1.AssociationChanged)
	if ev.Key != project || ac.GetProject() != "default" || ac.GetAssociation().GetMaxJobs() != 2 || !ac.GetAssociation().GetDefaultAccount() {
		t.Fatalf("AssociationChanged key %q: %v", ev.Key, ac)
	}
	// And each account's place in the tree and its shares, for fair share.
	ev = testkit.WaitEvent(t, h.broker, topics.JobCommands, 30*time.Second, func(e envelope.Event) bool {
		ac, ok := e.Payload.(*eventsv1.AccountChanged)
		return ok && ac.GetAccount().GetName() == "projects/default/accounts/qcd"
	})
	if ac := ev.Payload.(*eventsv1.AccountChanged); ev.Key != project || ac.GetProject() != "default" ||
		ac.GetAccount().GetParentAccount() != "physics" || ac.GetAccount().GetFairshare() != 1 {
		t.Fatalf("AccountChanged key %q: %v", ev.Key, ac)
	}
}

// TestUpdateAccount: an admin changes an account's shares and parent
// (sacctmgr modify account); the change is stored, returned, and sent to
// the scheduler as AccountChanged. A parent that would make a loop, one
// that is not there, root itself, an empty or unknown mask and a value out
// of bounds are refused naming the field; a viewer may not; an account the
// project does not have is NotFound.
func TestUpdateAccount(t *testing.T) {
	t.Parallel()
	h := newAccountsHarness(t)
	ctx := testkit.Context(t, 30*time.Second)
	acc := h.accounts()
	for _, a := range []*loomv1.Account{{Name: "physics"}, {Name: "qcd", ParentAccount: "physics"}, {Name: "chem"}} {
		if _, err := acc.CreateAccount(ctx, &loomv1.CreateAccountRequest{Parent: project, Account: a}, h.call("pat")); err != nil {
			t.Fatalf("create %s: %v", a.GetName(), err)
		}
	}
	mask := func(paths ...string) *fieldmaskpb.FieldMask { return &fieldmaskpb.FieldMask{Paths: paths} }
	got, err := acc.UpdateAccount(ctx, &loomv1.UpdateAccountRequest{
		Account:    &loomv1.Account{Name: "projects/default/accounts/qcd", ParentAccount: "chem", Fairshare: 5, Description: "not in the mask"},
		UpdateMask: mask("fairshare", "parentAccount")}, h.call("pat"))
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	want := &loomv1.Account{Name: "projects/default/accounts/qcd", Description: "qcd", Organization: "physics", ParentAccount: "chem", Fairshare: 5}
	if !proto.Equal(got, want) {
		t.Fatalf("updated %v, want %v", got, want)
	}
	list, err := acc.ListAccounts(ctx, &loomv1.ListAccountsRequest{Parent: project}, h.call("vic"))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range list.GetAccounts() {
		if a.GetName() == want.GetName() && !proto.Equal(a, want) {
			t.Fatalf("stored %v, want %v", a, want)
		}
	}
	ev := testkit.WaitEvent(t, h.broker, topics.JobCommands, 30*time.Second, func(e envelope.Event) bool {
		ac, ok := e.Payload.(*eventsv1.AccountChanged)
		return ok && ac.GetAccount().GetFairshare() == 5
	})
	if ac := ev.Payload.(*eventsv1.AccountChanged); ev.Key != project || !proto.Equal(ac.GetAccount(), want) {
		t.Fatalf("AccountChanged key %q: %v", ev.Key, ac)
	}

	update := func(caller string, a *loomv1.Account, paths ...string) error {
		_, err := acc.UpdateAccount(ctx, &loomv1.UpdateAccountRequest{Account: a, UpdateMask: mask(paths...)}, h.call(caller))
		return err
	}
	// chem is now above qcd: qcd may not become chem's parent.
	wantAcctCode(t, update("pat", &loomv1.Account{Name: "projects/default/accounts/chem", ParentAccount: "qcd"}, "parent_account"),
		codes.InvalidArgument, "account.parent_account", "loop")
	wantAcctCode(t, update("pat", &loomv1.Account{Name: "projects/default/accounts/chem", ParentAccount: "chem"}, "parent_account"),
		codes.InvalidArgument, "account.parent_account")
	wantAcctCode(t, update("pat", &loomv1.Account{Name: "projects/default/accounts/chem", ParentAccount: "nope"}, "parent_account"),
		codes.InvalidArgument, "account.parent_account", "nope")
	wantAcctCode(t, update("pat", &loomv1.Account{Name: "projects/default/accounts/root", Fairshare: 2}, "fairshare"),
		codes.InvalidArgument, "account.name", "root")
	wantAcctCode(t, update("pat", &loomv1.Account{Name: "projects/default/accounts/chem"}), codes.InvalidArgument, "update_mask")
	wantAcctCode(t, update("pat", &loomv1.Account{Name: "projects/default/accounts/chem"}, "name"), codes.InvalidArgument, "update_mask.paths[0]")
	wantAcctCode(t, update("pat", &loomv1.Account{Name: "projects/default/accounts/chem", Fairshare: domain.MaxFairshare + 1}, "fairshare"),
		codes.InvalidArgument, "account.fairshare", "1000000")
	wantAcctCode(t, update("pat", &loomv1.Account{Name: "projects/default/accounts/chem", Description: strings.Repeat("x", 300)}, "description"),
		codes.InvalidArgument, "account.description")
	wantAcctCode(t, update("vic", &loomv1.Account{Name: "projects/default/accounts/chem", Fairshare: 2}, "fairshare"), codes.PermissionDenied)
	wantAcctCode(t, update("pat", &loomv1.Account{Name: "projects/default/accounts/gone", Fairshare: 2}, "fairshare"), codes.NotFound)
	// Nothing refused was applied.
	list, err = acc.ListAccounts(ctx, &loomv1.ListAccountsRequest{Parent: project}, h.call("vic"))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range list.GetAccounts() {
		if a.GetName() == "projects/default/accounts/chem" && (a.GetParentAccount() != "root" || a.GetFairshare() != 1 || a.GetDescription() != "chem") {
			t.Fatalf("chem after refused updates: %v", a)
		}
	}
}

// TestDeleteAccountAndAssociation: sacctmgr delete. An account goes only
// once it has no sub-accounts and no users, an association only once no
// job of its user charged there is active, and a user's default account
// only last; each refusal says what to do first and leaves everything as
// it was. Each delete reaches the scheduler; the user's last association
// takes their default with it.
func TestDeleteAccountAndAssociation(t *testing.T) {
	t.Parallel()
	h := newAccountsHarness(t)
	ctx := testkit.Context(t, 30*time.Second)
	acc := h.accounts()
	for _, a := range []*loomv1.Account{{Name: "physics"}, {Name: "qcd", ParentAccount: "physics"}} {
		if _, err := acc.CreateAccount(ctx, &loomv1.CreateAccountRequest{Parent: project, Account: a}, h.call("pat")); err != nil {
			t.Fatalf("create %s: %v", a.GetName(), err)
		}
	}
	for _, a := range []*loomv1.Association{{Account: "physics", User: "alice"}, {Account: "qcd", User: "alice"}, {Account: "qcd", User: "bob"}} {
		if _, err := acc.SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: project, Association: a}, h.call("pat")); err != nil {
			t.Fatalf("associate %v: %v", a, err)
		}
	}
	delAcct := func(caller, name string) error {
		_, err := acc.DeleteAccount(ctx, &loomv1.DeleteAccountRequest{Name: name}, h.call(caller))
		return err
	}
	delAssoc := func(caller, user, account string) error {
		_, err := acc.DeleteAssociation(ctx, &loomv1.DeleteAssociationRequest{Parent: project, User: user, Account: account}, h.call(caller))
		return err
	}
	wantAcctCode(t, delAcct("pat", "projects/default/accounts/physics"), codes.FailedPrecondition, "sub-accounts (qcd)", "modify account qcd set parent=root")
	wantAcctCode(t, delAcct("pat", "projects/default/accounts/qcd"), codes.FailedPrecondition, "users (alice, bob)", "delete user alice account=qcd")
	wantAcctCode(t, delAssoc("pat", "alice", "physics"), codes.FailedPrecondition, "default account", "DefaultAccount=qcd")
	// bob's running job charged to qcd keeps him in it.
	job := &loomv1.Job{Name: "projects/default/jobs/77", JobId: "77", Cluster: cluster1, State: loomv1.JobState_RUNNING, User: "bob", Account: "qcd"}
	h.w.setJob(job)
	wantAcctCode(t, delAssoc("pat", "bob", "qcd"), codes.FailedPrecondition, "Job(s) active", "job 77")
	wantAcctCode(t, delAssoc("vic", "bob", "qcd"), codes.PermissionDenied)
	wantAcctCode(t, delAssoc("pat", "Bad User", "qcd"), codes.InvalidArgument, "user")
	wantAcctCode(t, delAssoc("pat", "bob", "nope"), codes.NotFound)
	wantAcctCode(t, delAcct("pat", "projects/default/accounts/root"), codes.InvalidArgument, "name", "root")
	wantAcctCode(t, delAcct("vic", "projects/default/accounts/qcd"), codes.PermissionDenied)
	if l, err := acc.ListAssociations(ctx, &loomv1.ListAssociationsRequest{Parent: project}, h.call("vic")); err != nil || len(l.GetAssociations()) != 3 {
		t.Fatalf("associations after the refusals: %v %v", l, err)
	}

	job.State = loomv1.JobState_COMPLETED
	h.w.setJob(job)
	for _, d := range [][2]string{{"bob", "qcd"}, {"alice", "qcd"}, {"alice", "physics"}} {
		if err := delAssoc("pat", d[0], d[1]); err != nil {
			t.Fatalf("delete %s from %s: %v", d[0], d[1], err)
		}
	}
	ev := testkit.WaitEvent(t, h.broker, topics.JobCommands, 30*time.Second, func(e envelope.Event) bool {
		ac, ok := e.Payload.(*eventsv1.AssociationChanged)
		return ok && ac.GetDeleted() && ac.GetAssociation().GetUser() == "bob"
	})
	if ev.Key != project {
		t.Fatalf("AssociationChanged (deleted) key %q", ev.Key)
	}
	// alice's default went with her last association: her next is the default.
	a, err := acc.SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: project, Association: &loomv1.Association{Account: "root", User: "alice"}}, h.call("pat"))
	if err != nil || !a.GetDefaultAccount() {
		t.Fatalf("alice's next association %v %v: want her default", a, err)
	}
	for _, name := range []string{"projects/default/accounts/qcd", "projects/default/accounts/physics"} {
		if err := delAcct("pat", name); err != nil {
			t.Fatalf("delete %s: %v", name, err)
		}
	}
	wantAcctCode(t, delAcct("pat", "projects/default/accounts/qcd"), codes.NotFound)
	testkit.WaitEvent(t, h.broker, topics.JobCommands, 30*time.Second, func(e envelope.Event) bool {
		ac, ok := e.Payload.(*eventsv1.AccountChanged)
		return ok && ac.GetDeleted() && ac.GetAccount().GetName() == "projects/default/accounts/physics"
	})
	if l, err := acc.ListAccounts(ctx, &loomv1.ListAccountsRequest{Parent: project}, h.call("vic")); err != nil || len(l.GetAccounts()) != 1 {
		t.Fatalf("accounts after the deletes: %v %v, want root alone", l, err)
	}
}

func TestAccountsRefuseBadInputNamingTheField(t *testing.T) {
	t.Parallel()
	h := newAccountsHarness(t)
	ctx := testkit.Context(t, 30*time.Second)
	acc := h.accounts()
	if _, err := acc.CreateAccount(ctx, &loomv1.CreateAccountRequest{Parent: project, Account: &loomv1.Account{Name: "physics"}}, h.call("pat")); err != nil {
		t.Fatalf("create: %v", err)
	}
	for _, tc := range []struct {
		name string
		call func() error
		want []string
	}{
		{"account id", func() error {
			_, err := acc.CreateAccount(ctx, &loomv1.CreateAccountRequest{Parent: project, Account: &loomv1.Account{Name: "Bad Name"}}, h.call("pat"))
			return err
		}, []string{"account.name"}},
		{"account in another project", func() error {
			_, err := acc.CreateAccount(ctx, &loomv1.CreateAccountRequest{Parent: project, Account: &loomv1.Account{Name: "projects/other/accounts/x"}}, h.call("pat"))
			return err
		}, []string{"account.name"}},
		{"unknown parent", func() error {
			_, err := acc.CreateAccount(ctx, &loomv1.CreateAccountRequest{Parent: project, Account: &loomv1.Account{Name: "chem", ParentAccount: "nope"}}, h.call("pat"))
			return err
		}, []string{"account.parent_account", "nope"}},
		{"control characters", func() error {
			_, err := acc.CreateAccount(ctx, &loomv1.CreateAccountRequest{Parent: project, Account: &loomv1.Account{Name: "chem", Description: "x\x1b[2J"}}, h.call("pat"))
			return err
		}, []string{"account.description"}},
		{"negative MaxJobs", func() error {
			_, err := acc.SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: project, Association: &loomv1.Association{Account: "physics", User: "alice", MaxJobs: -1}}, h.call("pat"))
			return err
		}, []string{"association.max_jobs"}},
		{"MaxSubmitJobs past the limit", func() error {
			_, err := acc.SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: project, Association: &loomv1.Association{Account: "physics", User: "alice", MaxSubmitJobs: 2_000_000}}, h.call("pat"))
			return err
		}, []string{"association.max_submit_jobs", "1000000"}},
		{"unknown account", func() error {
			_, err := acc.SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: project, Association: &loomv1.Association{Account: "chem", User: "alice"}}, h.call("pat"))
			return err
		}, []string{"association.account", "chem"}},
		{"bad user", func() error {
			_, err := acc.SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: project, Association: &loomv1.Association{Account: "physics", User: "Root;rm"}}, h.call("pat"))
			return err
		}, []string{"association.user"}},
		{"QOS name", func() error {
			_, err := acc.SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: project, Association: &loomv1.Association{Account: "physics", User: "alice", Qos: []string{"high", "x\x1b[2J"}}}, h.call("pat"))
			return err
		}, []string{"association.qos[1]", "not a QOS name"}},
		{"too many QOS", func() error {
			many := make([]string, domain.MaxAssocQOS+1)
			for i := range many {
				many[i] = fmt.Sprintf("q%d", i)
			}
			_, err := acc.SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: project, Association: &loomv1.Association{Account: "physics", User: "alice", Qos: many}}, h.call("pat"))
			return err
		}, []string{"association.qos", "the limit is 32"}},
		{"default QOS not granted", func() error {
			_, err := acc.SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: project, Association: &loomv1.Association{Account: "physics", User: "alice", Qos: []string{"high"}, DefaultQos: "urgent"}}, h.call("pat"))
			return err
		}, []string{"association.default_qos", "urgent", "high", "low,normal"}},
		{"list filter", func() error {
			_, err := acc.ListAssociations(ctx, &loomv1.ListAssociationsRequest{Parent: project, Account: "A B"}, h.call("vic"))
			return err
		}, []string{"account"}},
	} {
		err := tc.call()
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: got %v, want InvalidArgument", tc.name, err)
			continue
		}
		for _, s := range tc.want {
			if !strings.Contains(status.Convert(err).Message(), s) {
				t.Errorf("%s: %v does not name %q", tc.name, err, s)
			}
		}
	}
	list, err := acc.ListAssociations(ctx, &loomv1.ListAssociationsRequest{Parent: project}, h.call("vic"))
	if err != nil || len(list.GetAssociations()) != 0 {
		t.Fatalf("after refusals: %v, %v; want no association", list, err)
	}
}

func TestSubmitJobMaxSubmitJobs(t *testing.T) {
	t.Parallel()
	h := newAccountsHarness(t)
	ctx := testkit.Context(t, 30*time.Second)
	acc := h.accounts()
	for _, id := range []string{"physics", "chem"} {
		if _, err := acc.CreateAccount(ctx, &loomv1.CreateAccountRequest{Parent: project, Account: &loomv1.Account{Name: id}}, h.call("pat")); err != nil {
			t.Fatalf("create %s: %v", id, err)
		}
	}
	if _, err := acc.SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: project, Association: &loomv1.Association{
		Account: "physics", User: "alice", MaxSubmitJobs: 2}}, h.call("pat")); err != nil {
		t.Fatalf("set: %v", err)
	}
	if _, err := acc.SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: project, Association: &loomv1.Association{
		Account: "chem", User: "alice", MaxSubmitJobs: 1}}, h.call("pat")); err != nil {
		t.Fatalf("set chem: %v", err)
	}
	submit := func(account string) (*loomv1.Job, error) {
		req := validJob()
		req.Job.User, req.Job.Account = "alice", account
		return h.jobs().SubmitJob(ctx, req)
	}
	// Two jobs fill physics, alice's default account, which they are charged to.
	var first *loomv1.Job
	for i := range 2 {
		j, err := submit("")
		if err != nil {
			t.Fatalf("submit %d: %v", i, err)
		}
		if j.GetAccount() != "physics" {
			t.Fatalf("job %s charged to %q, want the default account physics", j.GetJobId(), j.GetAccount())
		}
		if first == nil {
			first = j
		}
	}
	_, err := submit("")
	wantAcctCode(t, err, codes.ResourceExhausted, domain.MsgSubmitLimit, "MaxSubmitJobs=2", "account=physics", "2 pending or running")
	// An array of two tasks does not fit chem's limit of one; one job does.
	arr := validJob()
	arr.Job.User, arr.Job.Account, arr.Job.Array = "alice", "chem", "0-1"
	_, err = h.jobs().SubmitJob(ctx, arr)
	wantAcctCode(t, err, codes.ResourceExhausted, "MaxSubmitJobs=1")
	if j, err := submit("Chem"); err != nil || j.GetAccount() != "chem" {
		t.Fatalf("submit to Chem: %v, account %q; want chem, in lower case as Slurm keeps it", err, j.GetAccount())
	}
	if _, err := submit("chem"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second job in chem: %v, want ResourceExhausted", err)
	}
	// An account alice has no association with is refused.
	_, err = submit("biology")
	wantAcctCode(t, err, codes.InvalidArgument, "job.account", "Invalid account")
	// Once the scheduler has ended one of physics' jobs, there is room.
	done := proto.Clone(first).(*loomv1.Job)
	done.State = loomv1.JobState_COMPLETED
	h.w.setJob(done)
	j, err := submit("physics")
	if err != nil {
		t.Fatalf("submit after one ended: %v", err)
	}
	// A user outside the accounting database submits as before: no account, no limit.
	other := validJob()
	other.Job.User = "zed"
	z, err := h.jobs().SubmitJob(ctx, other)
	if err != nil || z.GetAccount() != "" {
		t.Fatalf("zed's submit: %v, account %q; want accepted without an account", err, z.GetAccount())
	}
	_ = j
}

// TestSubmitJobQOS: a QOS outside the open ones (low, normal by default)
// needs an association granting it, so that no member can preempt others
// or jump the queue by asking for high; the association's default QOS
// fills a job that names none.
func TestSubmitJobQOS(t *testing.T) {
	t.Parallel()
	h := newAccountsHarness(t)
	ctx := testkit.Context(t, 30*time.Second)
	acc := h.accounts()
	for _, id := range []string{"physics", "chem"} {
		if _, err := acc.CreateAccount(ctx, &loomv1.CreateAccountRequest{Parent: project, Account: &loomv1.Account{Name: id}}, h.call("pat")); err != nil {
			t.Fatalf("create %s: %v", id, err)
		}
	}
	a, err := acc.SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: project, Association: &loomv1.Association{
		Account: "physics", User: "alice", Qos: []string{"High", "high", "debug"}, DefaultQos: "HIGH"}}, h.call("pat"))
	if err != nil || strings.Join(a.GetQos(), ",") != "debug,high" || a.GetDefaultQos() != "high" {
		t.Fatalf("grant: %v, %v; want qos debug,high (lower-case, sorted, once) and default high", a, err)
	}
	if _, err := acc.SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: project, Association: &loomv1.Association{
		Account: "chem", User: "bob"}}, h.call("pat")); err != nil {
		t.Fatalf("bob: %v", err)
	}
	submit := func(user, qos string) (*loomv1.Job, error) {
		req := validJob()
		req.Job.User, req.Job.Qos = user, qos
		return h.jobs().SubmitJob(ctx, req)
	}
	for _, tc := range []struct {
		user, qos, want string
	}{
		{"alice", "", "high"},         // the association's default
		{"alice", "normal", "normal"}, // open to everyone
		{"alice", "Debug", "debug"},   // granted, in any case
		{"bob", "", ""},               // the scheduler's default
		{"bob", "low", "low"},
		{"zed", "LOW", "low"}, // no association: the open ones
	} {
		j, err := submit(tc.user, tc.qos)
		if err != nil || j.GetQos() != tc.want {
			t.Errorf("%s --qos=%q: %v, qos %q; want accepted with %q", tc.user, tc.qos, err, j.GetQos(), tc.want)
		}
	}
	_, err = submit("bob", "high")
	wantAcctCode(t, err, codes.InvalidArgument, "job.qos", domain.MsgInvalidQOS, "user bob may not use QOS high",
		"open to every member: low,normal", "granted to user=bob account=chem: none", "sacctmgr modify user bob account=chem set QOS+=high")
	_, err = submit("zed", "high")
	wantAcctCode(t, err, codes.InvalidArgument, "job.qos", "granted to user=zed: none", "sacctmgr add user zed account=root QOS=high")
	_, err = submit("alice", "urgent")
	wantAcctCode(t, err, codes.InvalidArgument, "job.qos", "granted to user=alice account=physics: debug,high")
	_, err = submit("zed", "x\x1b]0;pwned\x07")
	wantAcctCode(t, err, codes.InvalidArgument, "job.qos")
	if msg := status.Convert(err).Message(); strings.ContainsAny(msg, "\x1b\x07") {
		t.Errorf("the refusal echoes control characters: %q", msg)
	}
	list, err := acc.ListAssociations(ctx, &loomv1.ListAssociationsRequest{Parent: project, User: "alice"}, h.call("vic"))
	if err != nil || strings.Join(list.GetOpenQos(), ",") != "low,normal" || len(list.GetAssociations()) != 1 ||
		strings.Join(list.GetAssociations()[0].GetQos(), ",") != "debug,high" {
		t.Fatalf("list: %v, %v; want open low,normal and alice's grant", list, err)
	}
}

// TestAccountsOverREST: REST reaches AccountService through the same
// checks (the bearer header becomes the call's credential).
func TestAccountsOverREST(t *testing.T) {
	t.Parallel()
	h := newAccountsHarness(t)
	ctx := testkit.Context(t, 30*time.Second)
	call := func(method, path, cred, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, h.restBase+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if cred != "" {
			req.Header.Set("Authorization", "Bearer "+h.cred(cred))
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := call("POST", "/v1/projects/default/accounts", "pat", `{"name":"physics","description":"Physics"}`); code != http.StatusOK ||
		!strings.Contains(body, `"parent_account":"root"`) {
		t.Fatalf("create over REST: %d %s", code, body)
	}
	if code, body := call("POST", "/v1/projects/default/associations", "pat", `{"account":"physics","user":"alice","max_jobs":-3}`); code != http.StatusBadRequest ||
		!strings.Contains(body, "association.max_jobs") {
		t.Fatalf("bad association over REST: %d %s", code, body)
	}
	if code, body := call("POST", "/v1/projects/default/accounts", "vic", `{"name":"chem"}`); code != http.StatusForbidden {
		t.Fatalf("viewer's create over REST: %d %s", code, body)
	}
	if code, body := call("GET", "/v1/projects/default/accounts", "", ""); code != http.StatusUnauthorized {
		t.Fatalf("anonymous list over REST: %d %s", code, body)
	}
	if code, body := call("GET", "/v1/projects/default/accounts", "vic", ""); code != http.StatusOK || !strings.Contains(body, "projects/default/accounts/physics") {
		t.Fatalf("viewer's list over REST: %d %s", code, body)
	}
}

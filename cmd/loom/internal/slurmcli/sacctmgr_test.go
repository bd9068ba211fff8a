package slurmcli

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loom-ml/loom/cmd/loom/internal/fakegw"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestSacctmgrGolden runs a session of sacctmgr against one fake gateway:
// each step's whole output and exit status, in Slurm's layouts (print_fields:
// right-justified columns with a trailing space, '|' with -p and -P).
func TestSacctmgrGolden(t *testing.T) {
	t.Parallel()
	g := &fakegw.Gateway{}
	const assocHeader = "   Cluster    Account       User  Partition     Share   Priority GrpJobs       GrpTRES GrpSubmit     GrpWall   GrpTRESMins MaxJobs       MaxTRES MaxTRESPerNode MaxSubmit     MaxWall   MaxTRESMins                  QOS   Def QOS GrpTRESRunMin \n" +
		"---------- ---------- ---------- ---------- --------- ---------- ------- ------------- --------- ----------- ------------- ------- ------------- -------------- --------- ----------- ------------- -------------------- --------- ------------- \n"
	for _, tc := range []struct {
		args          []string
		code          int
		stdout, other string
	}{
		{[]string{"-i", "add", "account", "physics", "Description=Physics dept", "Organization=Science"}, 0,
			" Adding Account(s)\n  physics\n Settings\n  Description     = Physics dept\n  Organization    = Science\n" +
				" Associations\n  A = physics    C = default   \n Settings\n  Parent        = root\n", ""},
		{[]string{"add", "account", "qcd", "parent=physics"}, 0,
			" Adding Account(s)\n  qcd\n Settings\n  Description     = qcd\n  Organization    = physics\n" +
				" Associations\n  A = qcd        C = default   \n Settings\n  Parent        = physics\n", ""},
		{[]string{"add", "account", "physics"}, 1, " Nothing new added.\n", ""},
		{[]string{"-i", "add", "user", "alice", "Account=physics", "MaxJobs=2"}, 0,
			" Adding User(s)\n  alice\n Settings =\n  Default Account = physics\n Associations =\n" +
				"  U = alice     A = physics    C = default   \n Non Default Settings\n  MaxJobs       = 2\n", ""},
		{[]string{"add", "user", "bob,carl", "account=qcd", "defaultaccount=qcd", "maxsubmitjobs=10"}, 0,
			" Adding User(s)\n  bob\n  carl\n Settings =\n  Default Account = qcd\n Associations =\n" +
				"  U = bob       A = qcd        C = default   \n  U = carl      A = qcd        C = default   \n" +
				" Non Default Settings\n  MaxSubmitJobs = 10\n", ""},
		{[]string{"add", "user", "dan", "account=nope"}, 1, "",
			"sacctmgr: error: adding user dan to account nope: association.account: no account \"nope\" in project default\n"},
		{[]string{"show", "assoc"}, 0, assocHeader +
			"   default       root                               1                                                                                                                                                         low,normal                         \n" +
			"   default    physics                               1                                                                                                                                                         low,normal                         \n" +
			"   default    physics      alice                    1                                                                            2                                                                            low,normal                         \n" +
			"   default        qcd                               1                                                                                                                                                         low,normal                         \n" +
			"   default        qcd        bob                    1                                                                                                                  10                                     low,normal                         \n" +
			"   default        qcd       carl                    1                                                                                                                  10                                     low,normal                         \n", ""},
		{[]string{"show", "associations", "-P", "user=alice"}, 0,
			"Cluster|Account|User|Partition|Share|Priority|GrpJobs|GrpTRES|GrpSubmit|GrpWall|GrpTRESMins|MaxJobs|MaxTRES|MaxTRESPerNode|MaxSubmit|MaxWall|MaxTRESMins|QOS|Def QOS|GrpTRESRunMins\n" +
				"default|physics|alice||1|||||||2||||||low,normal||\n", ""},
		{[]string{"--parsable", "--noheader", "show", "assoc", "account=qcd"}, 0,
			"default|qcd|||1|||||||||||||low,normal|||\n" +
				"default|qcd|bob||1||||||||||10|||low,normal|||\n" +
				"default|qcd|carl||1||||||||||10|||low,normal|||\n", ""},
		{[]string{"show", "user"}, 0,
			"      User   Def Acct     Admin \n---------- ---------- --------- \n" +
				"     alice    physics      None \n       bob        qcd      None \n      carl        qcd      None \n", ""},
		{[]string{"-n", "show", "user", "alice"}, 0, "     alice    physics      None \n", ""},
		{[]string{"-p", "list", "account"}, 0,
			"Account|Descr|Org|\nphysics|Physics dept|Science|\nqcd|qcd|physics|\nroot|default root account|root|\n", ""},
		{[]string{"show", "account"}, 0,
			"   Account                Descr                  Org \n---------- -------------------- -------------------- \n" +
				"   physics         Physics dept              Science \n       qcd                  qcd              physics \n" +
				"      root default root account                 root \n", ""},
		{[]string{"modify", "user", "where", "name=alice", "set", "MaxJobs=4", "MaxSubmitJobs=10"}, 0,
			" Modified user associations...\n  C = default    A = physics    U = alice    \n", ""},
		{[]string{"-n", "-P", "show", "assoc", "user=alice", "account=physics"}, 0,
			"default|physics|alice||1|||||||4|||10|||low,normal||\n", ""},
		{[]string{"modify", "user", "alice", "set", "MaxJobs=-1"}, 0,
			" Modified user associations...\n  C = default    A = physics    U = alice    \n", ""},
		{[]string{"modify", "user", "alice", "set", "MaxJobs=x"}, 1, "", " Bad MaxJobs value: x\n"},
		{[]string{"modify", "user", "where", "name=zed", "set", "MaxJobs=1"}, 1, " Nothing modified\n", ""},
		{[]string{"show", "foo"}, 1, "", "No valid entity in list command\nInput line must include \"Account\", \"Association\", or \"User\"\n"},
		{[]string{"add", "account", "x", "bogus=1"}, 1, "", " Unknown option: bogus=1\n Use keyword 'where' to modify condition\n"},
		{[]string{"-i", "add", "user", "alice", "account=qcd"}, 0,
			" Adding User(s)\n  alice\n Settings =\n  Default Account = physics\n Associations =\n  U = alice     A = qcd        C = default   \n", ""},
		{[]string{"modify", "user", "where", "name=alice", "set", "defaultaccount=qcd"}, 0, " Modified users...\n  alice\n", ""},
		{[]string{"-P", "show", "user"}, 0, "User|Def Acct|Admin\nalice|qcd|None\nbob|qcd|None\ncarl|qcd|None\n", ""},
		{[]string{"show", "assoc", "format=Account,User,MaxJobs,MaxSubmitJobs"}, 0,
			"   Account       User MaxJobs MaxSubmit \n---------- ---------- ------- --------- \n" +
				"      root                              \n   physics                              \n" +
				"   physics      alice                10 \n" +
				"       qcd                              \n       qcd      alice                   \n" +
				"       qcd        bob                10 \n       qcd       carl                10 \n", ""},
		{[]string{"-P", "show", "assoc", "user=alice", "format=account,user,share"}, 0,
			"Account|User|Share\nphysics|alice|1\nqcd|alice|1\n", ""},
		{[]string{"show", "user", "format=User%-12,DefaultAccount%4"}, 0,
			"User         Def  \n------------ ---- \nalice         qcd \nbob           qcd \ncarl          qcd \n", ""},
		{[]string{"show", "assoc", "format=bogus"}, 1, "", "Unknown field 'bogus'\n"},
		// QOS grants: QOS+= adds to the association's, beside the open
		// ones (low, normal) the QOS column also shows; modify keeps them.
		{[]string{"modify", "user", "where", "name=alice", "account=physics", "set", "QOS+=High,debug", "DefaultQOS=high"}, 0,
			" Modified user associations...\n  C = default    A = physics    U = alice    \n", ""},
		{[]string{"-Q", "modify", "user", "alice", "account=physics", "set", "MaxJobs=3"}, 0, "", ""},
		{[]string{"-n", "-P", "show", "assoc", "user=alice", "account=physics"}, 0,
			"default|physics|alice||1|||||||3|||10|||debug,high,low,normal|high|\n", ""},
		{[]string{"-Q", "modify", "user", "alice", "account=physics", "set", "qoslevel-=debug"}, 0, "", ""},
		{[]string{"-i", "add", "user", "erin", "account=qcd", "QOS=high", "DefaultQOS=high"}, 0,
			" Adding User(s)\n  erin\n Settings =\n  Default Account = qcd\n Associations =\n  U = erin      A = qcd        C = default   \n" +
				" Non Default Settings\n  QOS           = high\n  Default QOS   = high\n", ""},
		// modify account: shares and parent (the account's association in
		// Slurm's words), description; what is not set is kept.
		{[]string{"modify", "account", "where", "name=qcd", "set", "Fairshare=5", "Parent=root"}, 0,
			" Modified account associations...\n  C = default    A = qcd                  of root\n", ""},
		{[]string{"-i", "modify", "account", "qcd", "set", "description=Lattice QCD"}, 0, " Modified accounts...\n  qcd\n", ""},
		{[]string{"-p", "-n", "list", "account", "qcd"}, 0, "qcd|Lattice QCD|physics|\n", ""},
		{[]string{"-P", "-n", "show", "assoc", "account=qcd", "format=account,user,share"}, 0, "qcd||5\nqcd|alice|1\nqcd|bob|1\nqcd|carl|1\nqcd|erin|1\n", ""},
		{[]string{"modify", "account", "where", "name=nope", "set", "fairshare=2"}, 1, "",
			"sacctmgr: error: modifying account nope: account projects/default/accounts/nope: not found\n"},
		{[]string{"modify", "account", "qcd"}, 1, "", " You didn't give me anything to set\n"},
		{[]string{"modify", "account", "qcd", "set", "maxjobs=1"}, 1, "", " Unknown option: maxjobs=1\n Use keyword 'where' to modify condition\n"},
		// tree: each level one space further in, left-justified.
		{[]string{"show", "assoc", "tree", "format=account,user,share"}, 0,
			"Account                    User     Share \n-------------------- ---------- --------- \n" +
				"root                                    1 \n physics                                1 \n  physics                 alice         1 \n" +
				" qcd                                    5 \n  qcd                     alice         1 \n  qcd                       bob         1 \n" +
				"  qcd                      carl         1 \n  qcd                      erin         1 \n", ""},
		// delete: a user from one account, then from all (the default
		// last); an account only once it has no users or sub-accounts.
		{[]string{"delete", "account", "physics"}, 1, "",
			"sacctmgr: error: deleting account physics: account physics has users (alice)\n"},
		{[]string{"delete", "user", "carl", "where", "account=qcd"}, 0,
			" Deleting user associations...\n  C = default    A = qcd        U = carl     \n", ""},
		{[]string{"delete", "user", "alice"}, 0,
			" Deleting user associations...\n  C = default    A = physics    U = alice    \n  C = default    A = qcd        U = alice    \n", ""},
		{[]string{"delete", "user", "alice"}, 1, " Nothing deleted\n", ""},
		{[]string{"-i", "delete", "account", "where", "name=physics"}, 0, " Deleting accounts...\n  physics\n", ""},
		{[]string{"-p", "-n", "list", "account"}, 0, "qcd|Lattice QCD|physics|\nroot|default root account|root|\n", ""},
		{[]string{"delete", "account"}, 1, "", " No conditions given to delete: say which account (where name=NAME)\n"},
		{[]string{"delete", "qos", "high"}, 1, "", "No valid entity in delete command\nInput line must include \"User\" or \"Account\"\n"},
	} {
		code, out, errOut := run(t, g, "sacctmgr", Env{}, tc.args...)
		if code != tc.code || out != tc.stdout || errOut != tc.other {
			t.Errorf("sacctmgr %q: exit %d, stdout\n%s\nstderr\n%s\nwant exit %d, stdout\n%s\nstderr\n%s", tc.args, code, out, errOut, tc.code, tc.stdout, tc.other)
		}
	}
	// What the commands sent: modify keeps what it does not set (the QOS
	// grant through MaxJobs=3), QOS-= takes one grant away.
	last, _ := fakegw.LastRequest[*loomv1.SetAssociationRequest](g)
	if a := last.GetAssociation(); a.GetUser() != "erin" || a.GetAccount() != "qcd" || strings.Join(a.GetQos(), ",") != "high" || a.GetDefaultQos() != "high" {
		t.Errorf("last SetAssociation: %v", a)
	}
	for _, a := range g.Associations {
		if a.GetUser() == "alice" && a.GetAccount() == "physics" && (a.GetMaxJobs() != 3 || a.GetMaxSubmitJobs() != 10 ||
			strings.Join(a.GetQos(), ",") != "high" || a.GetDefaultQos() != "high") {
			t.Errorf("alice/physics after MaxJobs=3 and QOS-=debug: %v", a)
		}
	}
}

// TestSbatchInvalidQOS: the gateway's refusal of a QOS the user was not
// granted prints as Slurm's, then what they may use and how to get more.
func TestSbatchInvalidQOS(t *testing.T) {
	t.Parallel()
	detail := "user alice may not use QOS high (open to every member: low,normal; granted to user=alice: none); " +
		"a project admin grants it with: sacctmgr modify user alice set QOS+=high"
	g := &fakegw.Gateway{Clusters: []*loomv1.Cluster{{Name: "projects/default/clusters/demo"}},
		SubmitErr: status.Error(codes.InvalidArgument, "job.qos: "+msgInvalidQOS+": "+detail)}
	code, out, errOut := run(t, g, "sbatch", Env{}, "--qos=high", "--wrap", "true")
	want := "sbatch: error: Batch job submission failed: Invalid qos specification\nsbatch: error: " + detail + "\n"
	if code != 1 || out != "" || errOut != want {
		t.Errorf("sbatch --qos=high: exit %d, %q, stderr\n%s\nwant\n%s", code, out, errOut, want)
	}
}

// TestSbatchSubmitLimit: the gateway's MaxSubmitJobs refusal prints as
// Slurm's, then the limit it names.
func TestSbatchSubmitLimit(t *testing.T) {
	t.Parallel()
	g := &fakegw.Gateway{Clusters: []*loomv1.Cluster{{Name: "projects/default/clusters/demo"}},
		SubmitErr: status.Error(codes.ResourceExhausted, msgPolicyViolation+": MaxSubmitJobs=2 of association user=alice account=physics: 2 pending or running, 1 more submitted: resource exhausted")}
	code, out, errOut := run(t, g, "sbatch", Env{}, "--wrap", "true")
	want := "sbatch: error: Batch job submission failed: Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)\n" +
		"sbatch: error: MaxSubmitJobs=2 of association user=alice account=physics: 2 pending or running, 1 more submitted\n"
	if code != 1 || out != "" || errOut != want {
		t.Errorf("sbatch past MaxSubmitJobs: exit %d, %q, stderr\n%s\nwant\n%s", code, out, errOut, want)
	}
}

// TestSacctmgrRetriesChangedMeanwhile: a write the gateway refuses as
// changed meanwhile (Aborted: another call wrote what it was decided on)
// is sent once more, after reading again what it needs: what the other
// call wrote is kept. A second refusal is the command's error.
func TestSacctmgrRetriesChangedMeanwhile(t *testing.T) {
	t.Parallel()
	g := &fakegw.Gateway{
		Accounts:     []*loomv1.Account{{Name: "projects/default/accounts/physics", ParentAccount: "root", Description: "physics", Organization: "physics", Fairshare: 1}},
		Associations: []*loomv1.Association{{User: "alice", Account: "physics", MaxJobs: 2, Fairshare: 1, DefaultAccount: true}},
	}
	// Another admin sets alice's MaxJobs while this one grants a QOS.
	g.AbortAccountWrites, g.Meanwhile = 1, func(g *fakegw.Gateway) { g.Associations[0].MaxJobs = 7 }
	code, out, errOut := run(t, g, "sacctmgr", Env{}, "-i", "modify", "user", "alice", "account=physics", "set", "QOS+=high")
	if code != 0 || errOut != "" || out != " Modified user associations...\n  C = default    A = physics    U = alice    \n" {
		t.Fatalf("modify after a refusal: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if a := g.Associations[0]; a.GetMaxJobs() != 7 || strings.Join(a.GetQos(), ",") != "high" {
		t.Fatalf("alice/physics after the retry: %v, want MaxJobs=7 (the other call's) and QOS high", a)
	}
	if n := len(fakegw.Requests[*loomv1.SetAssociationRequest](g)); n != 2 {
		t.Fatalf("%d SetAssociation calls, want 2 (one refused, one retried)", n)
	}

	// Added meanwhile by another call: as an association that was there.
	g.AbortAccountWrites, g.Meanwhile = 1, func(g *fakegw.Gateway) {
		g.Associations = append(g.Associations, &loomv1.Association{User: "bob", Account: "physics", Fairshare: 1, DefaultAccount: true})
	}
	if code, out, _ := run(t, g, "sacctmgr", Env{}, "add", "user", "bob", "account=physics"); code != 1 || out != " Nothing new added.\n" {
		t.Fatalf("add user after another call added it: exit %d, %q", code, out)
	}

	// The gateway re-reads an account update and a delete itself.
	g.AbortAccountWrites, g.Meanwhile = 1, nil
	if code, _, errOut := run(t, g, "sacctmgr", Env{}, "-Q", "modify", "account", "physics", "set", "fairshare=3"); code != 0 {
		t.Fatalf("modify account after a refusal: exit %d, %s", code, errOut)
	}
	g.AbortAccountWrites = 1
	if code, _, errOut := run(t, g, "sacctmgr", Env{}, "-Q", "delete", "user", "bob"); code != 0 {
		t.Fatalf("delete user after a refusal: exit %d, %s", code, errOut)
	}

	// Refused twice: the refusal, once, and no third try.
	g.AbortAccountWrites = 2
	before := len(fakegw.Requests[*loomv1.SetAssociationRequest](g))
	code, _, errOut = run(t, g, "sacctmgr", Env{}, "modify", "user", "alice", "set", "MaxJobs=1")
	if code != 1 || !strings.HasPrefix(errOut, "sacctmgr: error: modifying user alice in account physics: changed meanwhile") {
		t.Fatalf("refused twice: exit %d, stderr %q", code, errOut)
	}
	if n := len(fakegw.Requests[*loomv1.SetAssociationRequest](g)) - before; n != 2 {
		t.Fatalf("%d SetAssociation calls when refused twice, want 2", n)
	}
}

// TestSacctmgrModifyDefaultAndLimits: modify user ... set
// DefaultAccount=A with limits makes A the default and sets the limits of
// every association named, without giving the default back to the
// account that held it when the associations were read.
func TestSacctmgrModifyDefaultAndLimits(t *testing.T) {
	t.Parallel()
	g := &fakegw.Gateway{
		Accounts: []*loomv1.Account{{Name: "projects/default/accounts/aaa", ParentAccount: "root"}, {Name: "projects/default/accounts/physics", ParentAccount: "root"}},
		Associations: []*loomv1.Association{{User: "alice", Account: "aaa", Fairshare: 1},
			{User: "alice", Account: "physics", Fairshare: 1, DefaultAccount: true}},
	}
	if code, _, errOut := run(t, g, "sacctmgr", Env{}, "-Q", "modify", "user", "alice", "set", "DefaultAccount=aaa", "MaxJobs=3"); code != 0 {
		t.Fatalf("modify: exit %d, %s", code, errOut)
	}
	for _, a := range g.Associations {
		if a.GetMaxJobs() != 3 || a.GetDefaultAccount() != (a.GetAccount() == "aaa") {
			t.Errorf("alice/%s after DefaultAccount=aaa MaxJobs=3: %v", a.GetAccount(), a)
		}
	}
}

// TestSacctmgrDeleteWhatWasSeen: delete user sends the etag of each
// association as it read it, so the gateway deletes only what it saw. When
// another admin changed the association meanwhile, it is not deleted: the
// command says so and what to do (look again, run the delete again), and
// prints the associations it did delete before. A refusal over something
// else (the association as read) is retried with the same etag.
func TestSacctmgrDeleteWhatWasSeen(t *testing.T) {
	t.Parallel()
	g := &fakegw.Gateway{
		Accounts: []*loomv1.Account{
			{Name: "projects/default/accounts/physics", ParentAccount: "root", Description: "physics", Organization: "physics", Fairshare: 1},
			{Name: "projects/default/accounts/chem", ParentAccount: "root", Description: "chem", Organization: "chem", Fairshare: 1},
		},
		Associations: []*loomv1.Association{
			{User: "alice", Account: "chem", Fairshare: 1, DefaultAccount: true},
			{User: "alice", Account: "physics", MaxJobs: 2, Fairshare: 1},
			{User: "bob", Account: "physics", Fairshare: 1, DefaultAccount: true},
		},
	}
	// Another admin raises alice's MaxJobs in physics after this command
	// read it, as this one deletes it.
	g.AbortAccountWrites, g.Meanwhile = 1, func(g *fakegw.Gateway) {
		for _, a := range g.Associations {
			if a.GetUser() == "alice" && a.GetAccount() == "physics" {
				a.MaxJobs = 7
			}
		}
	}
	code, out, errOut := run(t, g, "sacctmgr", Env{}, "-i", "delete", "user", "alice", "account=physics")
	if code != 1 || out != "" || !strings.Contains(errOut, "changed by another admin after this command read it; it was not deleted") ||
		!strings.Contains(errOut, "sacctmgr show assoc user=alice account=physics") {
		t.Fatalf("delete of a changed association: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if !slices.ContainsFunc(g.Associations, func(a *loomv1.Association) bool {
		return a.GetUser() == "alice" && a.GetAccount() == "physics" && a.GetMaxJobs() == 7
	}) {
		t.Fatalf("alice/physics after the refused delete: %v, want it kept with the other admin's MaxJobs 7", g.Associations)
	}
	dels := fakegw.Requests[*loomv1.DeleteAssociationRequest](g)
	if len(dels) != 1 || dels[0].GetEtag() == "" {
		t.Fatalf("DeleteAssociation calls %v: want one, carrying the etag read", dels)
	}

	// Refused over something else (the association itself as read): sent
	// again with the same etag, and deleted.
	g.AbortAccountWrites, g.Meanwhile = 1, nil
	if code, _, errOut := run(t, g, "sacctmgr", Env{}, "-i", "delete", "user", "bob"); code != 0 {
		t.Fatalf("delete after an unrelated refusal: exit %d, %s", code, errOut)
	}
	dels = fakegw.Requests[*loomv1.DeleteAssociationRequest](g)
	if n := len(dels); n != 3 || dels[1].GetEtag() == "" || dels[2].GetEtag() != dels[1].GetEtag() {
		t.Fatalf("DeleteAssociation calls %v: want two more, with the same etag", dels)
	}
}

package gateway

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestAccountTRESLimits: GrpTRES on an account (CreateAccount, then
// UpdateAccount's grp_tres.gpu path changing one TRES and keeping the
// others), and GrpTRES, MaxTRESPerJob and MaxWall on an association, are
// stored, returned and sent to the scheduler; values out of bounds are
// refused naming the field and the limit, and a viewer may not set them.
func TestAccountTRESLimits(t *testing.T) {
	t.Parallel()
	h := newAccountsHarness(t)
	ctx := testkit.Context(t, 30*time.Second)
	acc := h.accounts()
	created, err := acc.CreateAccount(ctx, &loomv1.CreateAccountRequest{Parent: project,
		Account: &loomv1.Account{Name: "team-a", GrpTres: &loomv1.Tres{Gpu: proto.Int64(64), Cpu: proto.Int64(512)}}}, h.call("pat"))
	if err != nil || !proto.Equal(created.GetGrpTres(), &loomv1.Tres{Gpu: proto.Int64(64), Cpu: proto.Int64(512)}) {
		t.Fatalf("create: %v, %v", created, err)
	}
	mask := func(paths ...string) *fieldmaskpb.FieldMask { return &fieldmaskpb.FieldMask{Paths: paths} }
	// GrpTRES=gres/gpu=32,node=-1: the gpu and node paths; cpu kept.
	got, err := acc.UpdateAccount(ctx, &loomv1.UpdateAccountRequest{Account: &loomv1.Account{Name: "projects/default/accounts/team-a",
		GrpTres: &loomv1.Tres{Gpu: proto.Int64(32), Cpu: proto.Int64(1)}}, UpdateMask: mask("grp_tres.gpu", "grp_tres.node")}, h.call("pat"))
	if err != nil || !proto.Equal(got.GetGrpTres(), &loomv1.Tres{Gpu: proto.Int64(32), Cpu: proto.Int64(512)}) {
		t.Fatalf("update: %v, %v", got, err)
	}
	testkit.WaitEvent(t, h.broker, topics.JobCommands, 30*time.Second, func(e envelope.Event) bool {
		ac, ok := e.Payload.(*eventsv1.AccountChanged)
		return ok && e.Key == project && proto.Equal(ac.GetAccount().GetGrpTres(), &loomv1.Tres{Gpu: proto.Int64(32), Cpu: proto.Int64(512)})
	})
	// Clearing every TRES leaves none.
	got, err = acc.UpdateAccount(ctx, &loomv1.UpdateAccountRequest{Account: &loomv1.Account{Name: "projects/default/accounts/team-a"},
		UpdateMask: mask("grp_tres")}, h.call("pat"))
	if err != nil || got.GetGrpTres() != nil {
		t.Fatalf("clear: %v, %v", got, err)
	}

	a := &loomv1.Association{Account: "team-a", User: "alice", GrpTres: &loomv1.Tres{Gpu: proto.Int64(16), MemMb: proto.Int64(1 << 20)},
		MaxTresPerJob: &loomv1.Tres{Gpu: proto.Int64(8), Node: proto.Int64(2)}, MaxWallMinutes: proto.Int32(24 * 60)}
	set, err := acc.SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: project, Association: a}, h.call("pat"))
	if err != nil || !proto.Equal(set.GetGrpTres(), a.GetGrpTres()) || !proto.Equal(set.GetMaxTresPerJob(), a.GetMaxTresPerJob()) ||
		set.GetMaxWallMinutes() != 24*60 {
		t.Fatalf("set association: %v, %v", set, err)
	}
	testkit.WaitEvent(t, h.broker, topics.JobCommands, 30*time.Second, func(e envelope.Event) bool {
		ac, ok := e.Payload.(*eventsv1.AssociationChanged)
		return ok && ac.GetAssociation().GetMaxWallMinutes() == 24*60 && proto.Equal(ac.GetAssociation().GetMaxTresPerJob(), a.GetMaxTresPerJob())
	})
	list, err := acc.ListAssociations(ctx, &loomv1.ListAssociationsRequest{Parent: project, User: "alice"}, h.call("vic"))
	if err != nil || len(list.GetAssociations()) != 1 || !proto.Equal(list.GetAssociations()[0].GetGrpTres(), a.GetGrpTres()) {
		t.Fatalf("list: %v, %v", list, err)
	}
	// MaxWall=0 is a limit (no job runs, as Slurm's): kept as a present 0,
	// stored, listed and sent to the scheduler; absent is none.
	zero := &loomv1.Association{Account: "team-a", User: "carol", MaxWallMinutes: proto.Int32(0)}
	if set, err := acc.SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: project, Association: zero}, h.call("pat")); err != nil || set.MaxWallMinutes == nil {
		t.Fatalf("set MaxWall=0: %v, %v: want a present 0", set, err)
	}
	testkit.WaitEvent(t, h.broker, topics.JobCommands, 30*time.Second, func(e envelope.Event) bool {
		ac, ok := e.Payload.(*eventsv1.AssociationChanged)
		return ok && ac.GetAssociation().GetUser() == "carol" && ac.GetAssociation().MaxWallMinutes != nil && ac.GetAssociation().GetMaxWallMinutes() == 0
	})
	if l, err := acc.ListAssociations(ctx, &loomv1.ListAssociationsRequest{Parent: project, User: "carol"}, h.call("vic")); err != nil ||
		len(l.GetAssociations()) != 1 || l.GetAssociations()[0].MaxWallMinutes == nil {
		t.Fatalf("list MaxWall=0: %v, %v: want a present 0", l, err)
	}
	if l, err := acc.ListAssociations(ctx, &loomv1.ListAssociationsRequest{Parent: project, User: "alice"}, h.call("vic")); err != nil ||
		l.GetAssociations()[0].GetMaxWallMinutes() != 24*60 {
		t.Fatalf("alice's MaxWall: %v, %v", l, err)
	}

	for _, tc := range []struct {
		name string
		err  error
		code codes.Code
		want []string
	}{
		{"account gpu past the bound", func() error {
			_, err := acc.CreateAccount(ctx, &loomv1.CreateAccountRequest{Parent: project, Account: &loomv1.Account{Name: "b", GrpTres: &loomv1.Tres{Gpu: proto.Int64(1<<30 + 1)}}}, h.call("pat"))
			return err
		}(), codes.InvalidArgument, []string{"account.grp_tres.gpu", "1073741824 is the limit"}},
		{"update negative cpu", func() error {
			_, err := acc.UpdateAccount(ctx, &loomv1.UpdateAccountRequest{Account: &loomv1.Account{Name: "projects/default/accounts/team-a",
				GrpTres: &loomv1.Tres{Cpu: proto.Int64(-1)}}, UpdateMask: mask("grp_tres.cpu")}, h.call("pat"))
			return err
		}(), codes.InvalidArgument, []string{"account.grp_tres.cpu"}},
		{"unknown TRES path", func() error {
			_, err := acc.UpdateAccount(ctx, &loomv1.UpdateAccountRequest{Account: &loomv1.Account{Name: "projects/default/accounts/team-a"},
				UpdateMask: mask("grp_tres.billing")}, h.call("pat"))
			return err
		}(), codes.InvalidArgument, []string{"update_mask.paths[0]", "grp_tres.gpu"}},
		{"association mem past the bound", func() error {
			_, err := acc.SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: project, Association: &loomv1.Association{Account: "team-a", User: "bob",
				GrpTres: &loomv1.Tres{MemMb: proto.Int64(1<<40 + 1)}}}, h.call("pat"))
			return err
		}(), codes.InvalidArgument, []string{"association.grp_tres.mem_mb", "1099511627776 is the limit"}},
		{"per-job node negative", func() error {
			_, err := acc.SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: project, Association: &loomv1.Association{Account: "team-a", User: "bob",
				MaxTresPerJob: &loomv1.Tres{Node: proto.Int64(-2)}}}, h.call("pat"))
			return err
		}(), codes.InvalidArgument, []string{"association.max_tres_per_job.node"}},
		{"MaxWall past the bound", func() error {
			_, err := acc.SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: project, Association: &loomv1.Association{Account: "team-a", User: "bob",
				MaxWallMinutes: proto.Int32(100*365*24*60 + 1)}}, h.call("pat"))
			return err
		}(), codes.InvalidArgument, []string{"association.max_wall_minutes", "52560000 minutes"}},
		{"a viewer sets a limit", func() error {
			_, err := acc.SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: project, Association: &loomv1.Association{Account: "team-a", User: "bob",
				GrpTres: &loomv1.Tres{Gpu: proto.Int64(1)}}}, h.call("vic"))
			return err
		}(), codes.PermissionDenied, nil},
	} {
		if tc.err == nil {
			t.Errorf("%s: accepted", tc.name)
			continue
		}
		t.Run(tc.name, func(t *testing.T) { wantAcctCode(t, tc.err, tc.code, tc.want...) })
	}
	list, err = acc.ListAssociations(ctx, &loomv1.ListAssociationsRequest{Parent: project, User: "bob"}, h.call("vic"))
	if err != nil || len(list.GetAssociations()) != 0 {
		t.Fatalf("bob after refusals: %v, %v", list, err)
	}
}

// TestAccountTRESLimitOfZero: GrpTRES=gres/gpu=0 (a limit of 0, Slurm's
// way to freeze an account) is a limit, not none: stored, returned and
// sent to the scheduler with gpu 0 present; UpdateAccount's grp_tres.gpu
// path sets a 0 keeping the cpu limit, and the path with gpu absent
// clears it. An association's MaxTRESPerJob of 0 is kept the same way.
func TestAccountTRESLimitOfZero(t *testing.T) {
	t.Parallel()
	h := newAccountsHarness(t)
	ctx := testkit.Context(t, 30*time.Second)
	acc := h.accounts()
	frozen := &loomv1.Tres{Gpu: proto.Int64(0)}
	created, err := acc.CreateAccount(ctx, &loomv1.CreateAccountRequest{Parent: project,
		Account: &loomv1.Account{Name: "frozen", GrpTres: frozen}}, h.call("pat"))
	if err != nil || created.GetGrpTres() == nil || created.GetGrpTres().Gpu == nil || created.GetGrpTres().GetGpu() != 0 {
		t.Fatalf("create with gpu=0: %v, %v", created, err)
	}
	testkit.WaitEvent(t, h.broker, topics.JobCommands, 30*time.Second, func(e envelope.Event) bool {
		ac, ok := e.Payload.(*eventsv1.AccountChanged)
		return ok && ac.GetAccount().GetName() == "projects/default/accounts/frozen" && proto.Equal(ac.GetAccount().GetGrpTres(), frozen)
	})
	mask := func(paths ...string) *fieldmaskpb.FieldMask { return &fieldmaskpb.FieldMask{Paths: paths} }
	name := "projects/default/accounts/frozen"
	got, err := acc.UpdateAccount(ctx, &loomv1.UpdateAccountRequest{Account: &loomv1.Account{Name: name,
		GrpTres: &loomv1.Tres{Cpu: proto.Int64(64)}}, UpdateMask: mask("grp_tres.cpu")}, h.call("pat"))
	if want := (&loomv1.Tres{Cpu: proto.Int64(64), Gpu: proto.Int64(0)}); err != nil || !proto.Equal(got.GetGrpTres(), want) {
		t.Fatalf("cpu=64 kept gpu=0? %v, %v", got, err)
	}
	got, err = acc.UpdateAccount(ctx, &loomv1.UpdateAccountRequest{Account: &loomv1.Account{Name: name},
		UpdateMask: mask("grp_tres.gpu")}, h.call("pat"))
	if want := (&loomv1.Tres{Cpu: proto.Int64(64)}); err != nil || !proto.Equal(got.GetGrpTres(), want) {
		t.Fatalf("gpu cleared: %v, %v", got, err)
	}
	list, err := acc.ListAccounts(ctx, &loomv1.ListAccountsRequest{Parent: project}, h.call("vic"))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range list.GetAccounts() {
		if a.GetName() == name && !proto.Equal(a.GetGrpTres(), &loomv1.Tres{Cpu: proto.Int64(64)}) {
			t.Fatalf("listed: %v", a)
		}
	}

	a := &loomv1.Association{Account: "frozen", User: "alice", MaxTresPerJob: &loomv1.Tres{Gpu: proto.Int64(0), Node: proto.Int64(2)}}
	set, err := acc.SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: project, Association: a}, h.call("pat"))
	if err != nil || !proto.Equal(set.GetMaxTresPerJob(), a.GetMaxTresPerJob()) {
		t.Fatalf("set association with gpu=0: %v, %v", set, err)
	}
	assocs, err := acc.ListAssociations(ctx, &loomv1.ListAssociationsRequest{Parent: project, User: "alice"}, h.call("vic"))
	if err != nil || len(assocs.GetAssociations()) != 1 || !proto.Equal(assocs.GetAssociations()[0].GetMaxTresPerJob(), a.GetMaxTresPerJob()) {
		t.Fatalf("listed association: %v, %v", assocs, err)
	}
}

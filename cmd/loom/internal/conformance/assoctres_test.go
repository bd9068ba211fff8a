package conformance

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestAssocGrpTRES: end to end, GrpTRES=node=1 on a user's association
// (set as sacctmgr modify user does, by the project's admin) keeps their
// second job pending with Slurm's reason AssocGrpNodeLimit while the
// first runs, and it starts once the first ends.
func TestAssocGrpTRES(t *testing.T) {
	needs(t, needSacctmgr)
	t.Parallel()
	f := setup(t)
	s := f.session(t, "main")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := loomv1.NewAccountServiceClient(f.conn).SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: "projects/default",
		Association: &loomv1.Association{Account: "root", User: s.user, GrpTres: &loomv1.Tres{Node: proto.Int64(1)}}}); err != nil {
		t.Fatalf("GrpTRES for %s: %v", s.user, err)
	}
	// The first job runs until the test lets it end (the file go).
	first := s.sbatch("-o", "first-%j.out", "--wrap", "while [ ! -e go ]; do sleep 0.1; done; echo first")
	s.waitFor(60*time.Second, "job "+first+" running", func() bool {
		r := s.queue("-j", first)
		return len(r) == 1 && r[0]["ST"] == "R"
	})
	second := s.sbatch("-o", "second-%j.out", "--wrap", "echo second")
	s.waitFor(30*time.Second, "job "+second+" pending on AssocGrpNodeLimit", func() bool {
		r := s.queue("-j", second)
		return len(r) == 1 && r[0]["ST"] == "PD" && r[0]["REASON"] == "AssocGrpNodeLimit"
	})
	if err := os.WriteFile(filepath.Join(s.dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{first, second} {
		r := s.waitDone(id, 90*time.Second)
		wantEqual(t, "job "+id+" state", state(r), "COMPLETED")
	}
	wantEqual(t, "second's output", s.read("second-"+second+".out"), "second\n")
}

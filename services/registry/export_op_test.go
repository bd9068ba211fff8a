package registry

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// exportAnswer waits for the registry's answer to the export operation op.
func exportAnswer(t *testing.T, broker, op string) proto.Message {
	t.Helper()
	ev := testkit.WaitEvent(t, broker, topics.ModelEvents, 30*time.Second, func(e envelope.Event) bool {
		switch p := e.Payload.(type) {
		case *eventsv1.ModelExported:
			return p.GetOperation() == op
		case *eventsv1.ModelExportFailed:
			return p.GetOperation() == op
		}
		return false
	})
	return ev.Payload
}

// TestExportModelCommand: the ExportModel command (what the gateway's
// ExportModel operation sends) copies the version and answers
// ModelExported naming the operation; a command accepted while the registry
// is down is run when it comes back (nothing lost); an export cut short
// resumes (only the missing object copied); a command that cannot succeed
// is answered ModelExportFailed with the code and the reason.
func TestExportModelCommand(t *testing.T) {
	t.Parallel()
	x := newExportFixture(t, 2*time.Minute, nil)
	ctx, broker, root := x.ctx, x.broker, x.root
	dir := modelDir(t)
	x.upload(dir)
	prod := bus.NewProducer([]string{broker})
	prod.SetSigner(testkit.SignerAs("gateway"))
	t.Cleanup(func() { _ = prod.Close() })
	send := func(op, name, dst string) {
		t.Helper()
		// A cluster administrator's: written with the registry's own
		// rights (TestExportWritesAsItsCaller has the callers' own).
		ev := envelope.New(topics.ModelCommands, testModel, "loom/gateway",
			&eventsv1.ExportModel{Operation: op, Name: name, Destination: dst, User: "alice", AnyOwner: true})
		if err := prod.Publish(ctx, ev); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	exported := func(op string, copied, skipped int32) {
		t.Helper()
		got, ok := exportAnswer(t, broker, op).(*eventsv1.ModelExported)
		if !ok || got.GetResponse().GetCopied() != copied || got.GetResponse().GetSkipped() != skipped ||
			got.GetResponse().GetObjects() != 2 || !strings.HasSuffix(got.GetVersion(), "models/tiny/versions/1") {
			t.Fatalf("operation %s answered %v; want ModelExported of tiny@1, %d copied, %d skipped", op, got, copied, skipped)
		}
	}

	// Sent while the registry is down: the command waits on the topic.
	x.stop()
	dst := filepath.Join(root, "default", "tiny-1")
	send("projects/default/operations/op1", vertexModel+"@1", "file://"+dst)
	x.restart()
	exported("projects/default/operations/op1", 2, 0)
	for _, f := range []string{"model.json", "MANIFEST"} {
		want, _ := os.ReadFile(filepath.Join(dir, f))
		got, err := os.ReadFile(filepath.Join(dst, f))
		if err != nil || string(got) != string(want) {
			t.Fatalf("exported %s = %q, %v; want %q", f, got, err, want)
		}
	}

	// An export cut short left one object: the next copies only the other.
	if err := os.Remove(filepath.Join(dst, "model.json")); err != nil {
		t.Fatal(err)
	}
	send("projects/default/operations/op2", vertexModel, "file://"+dst)
	exported("projects/default/operations/op2", 1, 1)

	// Refusals: each operation answered with its code and what to change.
	for _, tc := range []struct {
		op, name, dst string
		code          codes.Code
		reason        string
	}{
		{"projects/default/operations/op3", vertexModel + "@9", "file://" + dst, codes.NotFound, "no version 9"},
		{"projects/default/operations/op4", vertexModel, "file://" + root + "/../escape", codes.InvalidArgument, "outside project default's directory of the export root"},
		{"projects/default/operations/op5", vertexModel, "", codes.InvalidArgument, "required"},
	} {
		send(tc.op, tc.name, tc.dst)
		got, ok := exportAnswer(t, broker, tc.op).(*eventsv1.ModelExportFailed)
		if !ok || codes.Code(got.GetCode()) != tc.code || !strings.Contains(got.GetMessage(), tc.reason) {
			t.Errorf("%s (%s → %q) answered %v; want ModelExportFailed %v naming %q", tc.op, tc.name, tc.dst, got, tc.code, tc.reason)
		}
	}
	if _, err := x.c.GetModel(ctx, &loomv1.GetModelRequest{Name: vertexModel}); err != nil {
		t.Fatalf("the registry after the refusals: %v", err)
	}
}

// TestExportModelAttemptsEnd: an export that cannot finish within the
// registry's -export-timeout is tried ExportAttempts times (each resuming)
// and then its operation is answered DeadlineExceeded, saying to export
// again, rather than left unanswered.
func TestExportModelAttemptsEnd(t *testing.T) {
	t.Parallel()
	x := newExportFixture(t, time.Minute, func(cfg *Config) { cfg.ExportTimeout = time.Nanosecond })
	broker, root := x.broker, x.root
	x.upload(modelDir(t))
	const op = "projects/default/operations/slow"
	testkit.PublishAs(t, broker, "gateway", envelope.New(topics.ModelCommands, testModel, "loom/gateway",
		&eventsv1.ExportModel{Operation: op, Name: vertexModel, Destination: "file://" + filepath.Join(root, "default", "slow"), AnyOwner: true}))
	got, ok := exportAnswer(t, broker, op).(*eventsv1.ModelExportFailed)
	if !ok || codes.Code(got.GetCode()) != codes.DeadlineExceeded || !strings.Contains(got.GetMessage(), "export again") {
		t.Fatalf("answered %v; want ModelExportFailed DeadlineExceeded saying to export again", got)
	}
}

// TestExportWritesAsItsCaller: a local export is written as its caller's OS
// account (the gateway's os_user), in the caller's own directory of the
// project's, which the registry makes for them: the files are theirs; a
// caller may not write elsewhere in the project's directory (the
// registry's) nor replace another's export (PermissionDenied); a cluster
// administrator's export into a caller's directory is written as its
// owner, never as root through a directory someone else owns; a caller
// with no OS account cannot export locally (FailedPrecondition).
func TestExportWritesAsItsCaller(t *testing.T) {
	t.Parallel()
	users := testkit.OSUsers(t, 2)
	ana, bob := users[0], users[1]
	root := filepath.Join(t.TempDir(), "exports")
	// The test's temporary directories are root's, 0700: open the way.
	for _, d := range []string{filepath.Dir(filepath.Dir(root)), filepath.Dir(root)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	x := newExportFixture(t, 2*time.Minute, func(cfg *Config) { cfg.ExportRoot = root })
	broker := x.broker
	x.upload(modelDir(t))
	n := 0
	export := func(dst string, cmd *eventsv1.ExportModel) proto.Message {
		t.Helper()
		n++
		op := fmt.Sprintf("projects/default/operations/op%d", n)
		cmd.Operation, cmd.Name, cmd.Destination = op, vertexModel, "file://"+dst
		testkit.PublishAs(t, broker, "gateway", envelope.New(topics.ModelCommands, testModel, "loom/gateway", cmd))
		return exportAnswer(t, broker, op)
	}
	failed := func(what string, ans proto.Message, code codes.Code, says ...string) {
		t.Helper()
		got, ok := ans.(*eventsv1.ModelExportFailed)
		if !ok || codes.Code(got.GetCode()) != code {
			t.Fatalf("%s answered %v; want ModelExportFailed %v", what, ans, code)
		}
		for _, s := range says {
			if !strings.Contains(got.GetMessage(), s) {
				t.Fatalf("%s: %q does not say %q", what, got.GetMessage(), s)
			}
		}
	}
	owner := func(p string) uint32 {
		t.Helper()
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Sys().(*syscall.Stat_t).Uid
	}
	anas := filepath.Join(root, "default", ana.Name)
	dst := filepath.Join(anas, "tiny")
	if ans := export(dst, &eventsv1.ExportModel{User: "ana", OsUser: ana.Name}); ans == nil {
		t.Fatal("ana's export unanswered")
	} else if got, ok := ans.(*eventsv1.ModelExported); !ok || got.GetResponse().GetCopied() != 2 {
		t.Fatalf("ana's export answered %v; want ModelExported, 2 copied", ans)
	}
	for _, p := range []string{anas, dst, filepath.Join(dst, "MANIFEST"), filepath.Join(dst, "model.json")} {
		if uid := owner(p); uid != ana.UID {
			t.Errorf("%s is uid %d's, want ana's (%d)", p, uid, ana.UID)
		}
	}
	if fi, err := os.Stat(filepath.Join(root, "default")); err != nil || fi.Mode().Perm() != 0o755 || owner(filepath.Join(root, "default")) != 0 {
		t.Fatalf("the project's directory: %v, %v; want the registry's, 0755", fi.Mode(), err)
	}
	failed("ana's export outside her directory", export(filepath.Join(root, "default", "loose"), &eventsv1.ExportModel{User: "ana", OsUser: ana.Name}),
		codes.PermissionDenied, ana.Name, anas+"/")
	// Bob may not replace hers (the export would rewrite model.json).
	if err := os.WriteFile(filepath.Join(dst, "model.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	failed("bob's export over ana's", export(dst, &eventsv1.ExportModel{User: "bob", OsUser: bob.Name}), codes.PermissionDenied, bob.Name)
	// An administrator's export into ana's directory is written as ana.
	admins := filepath.Join(anas, "by-admin")
	if got, ok := export(admins, &eventsv1.ExportModel{User: "root", AnyOwner: true}).(*eventsv1.ModelExported); !ok || got.GetResponse().GetCopied() != 2 {
		t.Fatalf("an administrator's export answered %v", got)
	}
	if uid := owner(filepath.Join(admins, "MANIFEST")); uid != ana.UID {
		t.Errorf("an administrator's export into ana's directory is uid %d's, want ana's", uid)
	}
	failed("an export by a caller of no OS account", export(filepath.Join(root, "default", "svc"), &eventsv1.ExportModel{User: "svc"}),
		codes.FailedPrecondition, "object store")
}

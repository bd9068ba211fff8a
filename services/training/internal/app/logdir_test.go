package app

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/osuser"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/training/internal/adapters"
)

// fakeLogDirs makes nothing; it records what it was asked for.
type fakeLogDirs struct {
	asked []string
	err   error
}

func (f *fakeLogDirs) Make(project, user string) (string, error) {
	f.asked = append(f.asked, project+"/"+user)
	if f.err != nil {
		return "", f.err
	}
	return "/logs/" + project + "/" + user, nil
}

func (f *fakeLogDirs) MakeAgain(dir, user string) error {
	f.asked = append(f.asked, "again "+dir+" "+user)
	return f.err
}

// TestCreateMakesTheOwnersLogDirectory: the app has the owner's log
// directory made when it takes a create, before the domain decides it, and
// the CustomJob's output goes there; where it cannot be made the job is
// still taken, and says that its output goes with its cluster and what
// the user can do, while why (host paths, uids: not for every member of
// the project) goes to the service's log, with the job's name.
func TestCreateMakesTheOwnersLogDirectory(t *testing.T) {
	t.Parallel()
	const why = "make /srv/loom/logs/p/alice for alice (uid 1001): permission denied"
	for _, c := range []struct {
		name    string
		err     error
		dir     string
		warning string
	}{
		{"made", nil, "/logs/p/alice", ""},
		{"refused", errors.New(why), "", "could not make its owner's log directory"},
	} {
		ctx := testkit.Context(t, 30*time.Second)
		_, rdb := testkit.Redis(t)
		var logs testkit.Buffer
		a, err := New(ctx, adapters.NewRepo(store.New(rdb, "training:")), slog.New(slog.NewTextHandler(&logs, nil)), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		f := &fakeLogDirs{err: c.err}
		a.UseLogDirs(f)
		if err := a.Handle(ctx, create()); err != nil {
			t.Fatal(err)
		}
		got, err := a.GetCustomJob(cj)
		if err != nil {
			t.Fatal(err)
		}
		if len(f.asked) != 1 || f.asked[0] != "p/alice" || got.GetOutputDir() != c.dir ||
			(c.warning == "") != (got.GetOutputWarning() == "") || !strings.Contains(got.GetOutputWarning(), c.warning) {
			t.Errorf("%s: asked %v; output_dir %q, output_warning %q", c.name, f.asked, got.GetOutputDir(), got.GetOutputWarning())
		}
		if c.err == nil {
			continue
		}
		if strings.Contains(got.GetOutputWarning(), "/srv/loom") || strings.Contains(got.GetOutputWarning(), "uid") {
			t.Errorf("output_warning %q quotes the host's detail to the project", got.GetOutputWarning())
		}
		if l := logs.String(); !strings.Contains(l, "name="+cj) || !strings.Contains(l, why) {
			t.Errorf("the service's log does not name the job and say why: %s", l)
		}
	}
}

// TestSubmitMakesTheLogDirectoryAgain: an owner's log directory an
// operator deleted after the create (here before its cluster ran: a
// tuning job's later trial is submitted the same way) is made again, as
// the owner's, before the job is submitted: the agent, which opens the
// output file as the owner, could not make it under the service's
// directories.
func TestSubmitMakesTheLogDirectoryAgain(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	_, rdb := testkit.Redis(t)
	a, err := New(ctx, adapters.NewRepo(store.New(rdb, "training:")), slog.Default(), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(t.TempDir(), "logs")
	a.UseLogDirs(adapters.LogDirs{Root: root})
	self := osuser.Self()
	ev := create()
	ev.Payload.(*eventsv1.CreateCustomJob).CustomJob.User = self.Name
	if err := a.Handle(ctx, ev); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "p", self.Name)
	if got, _ := a.GetCustomJob(cj); got.GetOutputDir() != dir {
		t.Fatalf("output_dir %q, want %s", got.GetOutputDir(), dir)
	}
	if err := os.RemoveAll(root); err != nil {
		t.Fatal(err)
	}
	if err := a.Handle(ctx, envelope.New(topics.ClusterEvents, "projects/p/clusters/cj-7", "loom/provisioner", &eventsv1.ClusterChanged{
		Cluster: &loomv1.Cluster{Name: "projects/p/clusters/cj-7", Status: &loomv1.ClusterStatus{State: loomv1.Cluster_RUNNING}}})); err != nil {
		t.Fatal(err)
	}
	if got, _ := a.GetCustomJob(cj); got.GetJob() == "" {
		t.Fatalf("not submitted: %v", got)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		t.Fatalf("the owner's log directory was not made again before the submit: %v", err)
	}
	if st := fi.Sys().(*syscall.Stat_t); !fi.IsDir() || st.Uid != self.UID || fi.Mode().Perm() != 0o700 {
		t.Errorf("%s: %v uid %d, want the owner's, 0700", dir, fi.Mode(), st.Uid)
	}
}

package app

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
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

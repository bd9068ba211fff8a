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
// still taken, and says that its output goes with its cluster, and why.
func TestCreateMakesTheOwnersLogDirectory(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		err     error
		dir     string
		warning string
	}{
		{"made", nil, "/logs/p/alice", ""},
		{"refused", errors.New("user alice has no account here"), "", "user alice has no account here"},
	} {
		ctx := testkit.Context(t, 30*time.Second)
		_, rdb := testkit.Redis(t)
		a, err := New(ctx, adapters.NewRepo(store.New(rdb, "training:")), slog.Default(), nil, 0)
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
	}
}

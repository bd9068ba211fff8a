package domain

import (
	"fmt"
	"strings"
	"testing"
	"time"

	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestRegistrationMarksOverwrittenVersions: a registration from a location
// another version was registered from marks that version changed, in the
// same Registration: two jobs with one model directory (no MANIFEST digest:
// always a rewrite), a directory written the same but for a trailing '/',
// a version of another model, and one that loses an alias to the new
// version (marked in Moved, so one write holds both); the same MANIFEST
// again is no change, and a mark is never rewritten.
func TestRegistrationMarksOverwrittenVersions(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := NewState()
	a := completed("1", "alpha")
	a.ModelDir = "/data/p/model"
	s.Apply(Decide(s, a, now))
	b := completed("2", "alpha")
	b.ModelDir = "/data/p/model/"
	r := Decide(s, b, now)
	if len(r.Overwritten) != 1 || r.Overwritten[0].GetName() != "projects/default/models/alpha/versions/1" ||
		!strings.Contains(r.Overwritten[0].GetArtifactChanged(), "registered again as projects/default/models/alpha/versions/2 at 2026-01-02T03:04:05Z") {
		t.Fatalf("second job of /data/p/model: overwritten %v; want alpha v1 marked", r.Overwritten)
	}
	s.Apply(r)
	if got := s.Versions["projects/default/models/alpha"][0].GetArtifactChanged(); got == "" {
		t.Fatal("Apply left version 1 unmarked")
	}

	// Uploads: another model from the same directory marks alpha's v2
	// (v1 is marked already and keeps its mark).
	up := func(rid, sha string, aliases ...string) *Registration {
		t.Helper()
		cmd := upload(rid)
		cmd.Model.ArtifactUri, cmd.Model.VersionAliases = "file:///data/p/model", aliases
		u, err := ValidateUpload(s, cmd)
		if err != nil {
			t.Fatal(err)
		}
		u.Manifest = sha
		r := RegisterUpload(s, u, now)
		s.Apply(r)
		return r
	}
	r = up("u1", "aaa", "prod")
	if len(r.Overwritten) != 1 || r.Overwritten[0].GetName() != "projects/default/models/alpha/versions/2" {
		t.Fatalf("upload of /data/p/model: overwritten %v; want alpha v2 only", r.Overwritten)
	}
	if r = up("u2", "aaa"); len(r.Overwritten) != 0 {
		t.Fatalf("the same MANIFEST registered again: overwritten %v; want none", r.Overwritten)
	}
	// Another set, taking prod from tiny v1: tiny v1 is rewritten once,
	// without prod and marked; v2 (the same set as v1) too.
	r = up("u3", "bbb", "prod")
	var moved []string
	for _, m := range r.Moved {
		if m.GetArtifactChanged() == "" {
			t.Errorf("%s lost prod but is not marked", m.GetName())
		}
		moved = append(moved, m.GetName())
	}
	if len(moved) != 1 || moved[0] != "projects/default/models/tiny/versions/1" || len(r.Overwritten) != 1 ||
		r.Overwritten[0].GetName() != "projects/default/models/tiny/versions/2" {
		t.Fatalf("moved %v, overwritten %v; want tiny v1 moved and marked, v2 overwritten", moved, r.Overwritten)
	}
	// A bucket's objects are not a directory of the same path.
	cmd := upload("u4")
	cmd.Model = &trainingv1.Model{ArtifactUri: "s3://b/data/p/model"}
	u, err := ValidateUpload(s, cmd)
	if err != nil {
		t.Fatal(err)
	}
	if r := RegisterUpload(s, u, now); len(r.Overwritten) != 0 {
		t.Errorf("a bucket marked %v", r.Overwritten)
	}
}

// BenchmarkMarkOverwritten is the cost a registration pays to find the
// versions it overwrites: 100 models of 1,000 versions each, all in
// directories of their own.
func BenchmarkMarkOverwritten(b *testing.B) {
	s := NewState()
	now := time.Now()
	for m := range 100 {
		model := fmt.Sprintf("projects/default/models/m%d", m)
		for n := range 1000 {
			s.Versions[model] = append(s.Versions[model], &loomv1.ModelVersion{
				Name: fmt.Sprintf("%s/versions/%d", model, n+1), ArtifactUri: fmt.Sprintf("file:///data/p%d/run-%d/model", m, n),
			})
		}
	}
	reg := &Registration{Model: &loomv1.Model{Name: "projects/default/models/new"},
		Version: &loomv1.ModelVersion{Name: "projects/default/models/new/versions/1", ArtifactUri: "file:///data/new/model"}}
	b.ResetTimer()
	for b.Loop() {
		markOverwritten(s, reg, now)
	}
}

// TestRegistrationMarksOnlyItsOwnProject: a registration of another
// project from the same location marks nothing of this one. A tenant may
// name any directory it can read (or a job output it never wrote), and a
// mark is permanent and blocks every export: another project's word must
// not disable this one's versions, nor put that project's version names
// in this one's records.
func TestRegistrationMarksOnlyItsOwnProject(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := NewState()
	a := completed("1", "alpha")
	a.ModelDir = "/data/victim/model"
	s.Apply(Decide(s, a, now))

	cmd := upload("other-1")
	cmd.Project = "mallory"
	cmd.Lineage = nil
	cmd.Model.ArtifactUri = "file:///data/victim/model"
	u, err := ValidateUpload(s, cmd)
	if err != nil {
		t.Fatal(err)
	}
	u.Manifest = "eee"
	r := RegisterUpload(s, u, now)
	if len(r.Overwritten) != 0 || len(r.Moved) != 0 {
		t.Fatalf("an upload of project mallory marked %v (moved %v); want nothing of project default", r.Overwritten, r.Moved)
	}
	s.Apply(r)

	b := completed("2", "beta")
	b.Job.Name, b.ModelDir = "projects/mallory/jobs/2", "/data/victim/model/"
	// It marks mallory's own upload of that directory, and nothing else.
	if r := Decide(s, b, now); len(r.Overwritten) != 1 || r.Overwritten[0].GetName() != "projects/mallory/models/tiny/versions/1" {
		t.Fatalf("a job of project mallory marked %v; want only mallory's tiny v1", r.Overwritten)
	}
	if got := s.Versions["projects/default/models/alpha"][0].GetArtifactChanged(); got != "" {
		t.Fatalf("project default's version marked by project mallory: %s", got)
	}
}

// TestJobOutputDigestTellsARewrite: a job's version keeps the MANIFEST
// digest recorded of its directory, so a second job's registration of the
// same directory marks it only when the set differs.
func TestJobOutputDigestTellsARewrite(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := NewState()
	job := func(id string) *Registration {
		ev := completed(id, "alpha")
		ev.ModelDir = "/data/p/model"
		return DecideRecorded(s, ev, map[string]string{"1": "aaa", "2": "aaa", "3": "bbb"}[id], now)
	}
	r := job("1")
	if got := r.Version.GetManifestSha256(); got != "aaa" {
		t.Fatalf("job 1's version records digest %q, want aaa", got)
	}
	s.Apply(r)
	if r = job("2"); len(r.Overwritten) != 0 {
		t.Fatalf("the same set registered by job 2 marked %v", r.Overwritten)
	}
	s.Apply(r)
	if r = job("3"); len(r.Overwritten) != 2 || !strings.Contains(r.Overwritten[0].GetArtifactChanged(), "SHA-256 bbb; this version's aaa") {
		t.Fatalf("another set registered by job 3: overwritten %v; want versions 1 and 2 marked", r.Overwritten)
	}
}

package domain

import (
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/resname"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

func completed(jobID, model string) *eventsv1.JobChanged {
	j := &loomv1.Job{
		Name:    "projects/default/jobs/" + jobID,
		JobId:   jobID,
		Cluster: "projects/default/clusters/c1",
		State:   loomv1.JobState_COMPLETED,
		User:    "ana",
	}
	if model != "" {
		j.ModelOutput = &loomv1.ModelOutput{ModelId: model}
	}
	return &eventsv1.JobChanged{Job: j, Attempt: 1, ModelDir: "/data/shared/models/" + model + "/job-" + jobID}
}

func TestVersionsCountUpPerModel(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	s := NewState()
	for i, tc := range []struct {
		job, model string
		want       int64
	}{
		{"1", "alpha", 1}, {"2", "alpha", 2}, {"3", "beta", 1}, {"4", "alpha", 3},
	} {
		r := Decide(s, completed(tc.job, tc.model), now)
		if r == nil {
			t.Fatalf("step %d: no registration", i)
		}
		if r.Version.GetVersion() != tc.want || r.Model.GetLatestVersion() != tc.want {
			t.Fatalf("step %d: version %d latest %d, want %d", i, r.Version.GetVersion(), r.Model.GetLatestVersion(), tc.want)
		}
		wantName := "projects/default/models/" + tc.model + "/versions/" + string(rune('0'+tc.want))
		if r.Version.GetName() != wantName {
			t.Fatalf("step %d: name %q, want %q", i, r.Version.GetName(), wantName)
		}
		if r.Version.GetSourceJob() != "projects/default/jobs/"+tc.job || r.Version.GetLabels()["job_id"] != tc.job {
			t.Fatalf("step %d: lineage %q %v", i, r.Version.GetSourceJob(), r.Version.GetLabels())
		}
		if want := "file:///data/shared/models/" + tc.model + "/job-" + tc.job; r.Version.GetArtifactUri() != want || r.Version.GetArtifactOwner() != "ana" {
			t.Fatalf("step %d: artifact %q of %q, want %q of the job's owner ana", i, r.Version.GetArtifactUri(), r.Version.GetArtifactOwner(), want)
		}
		// A model's first version holds "default"; later ones nothing.
		if first := tc.want == 1; first != (len(r.Version.GetAliases()) == 1 && r.Version.GetAliases()[0] == DefaultAlias) || (!first && len(r.Version.GetAliases()) != 0) {
			t.Fatalf("step %d: aliases %v", i, r.Version.GetAliases())
		}
		if r.Event.GetModel() != "projects/default/models/"+tc.model || r.Event.GetVersion() != r.Version {
			t.Fatalf("step %d: event %v", i, r.Event)
		}
		s.Apply(r)
	}
	if got := len(s.Versions["projects/default/models/alpha"]); got != 3 {
		t.Fatalf("alpha has %d versions, want 3", got)
	}
}

func TestOneVersionPerJob(t *testing.T) {
	t.Parallel()
	s := NewState()
	now := time.Now()
	r := Decide(s, completed("7", "m"), now)
	if r == nil {
		t.Fatal("first COMPLETED registered nothing")
	}
	if Decide(s, completed("7", "m"), now) == nil {
		t.Fatal("Decide must not change the state before Apply")
	}
	s.Apply(r)
	if again := Decide(s, completed("7", "m"), now); again != nil {
		t.Fatalf("second COMPLETED for the same job registered %v", again.Version)
	}
	// The job → version record survives a reload from storage.
	re := Load([]*loomv1.Model{r.Model}, []*loomv1.ModelVersion{r.Version}, nil, nil)
	if again := Decide(re, completed("7", "m"), now); again != nil {
		t.Fatal("reloaded state registered the job twice")
	}
	if next := Decide(re, completed("8", "m"), now); next == nil || next.Version.GetVersion() != 2 {
		t.Fatalf("after reload the next version is %v, want 2", next)
	}
}

func TestIgnoredEvents(t *testing.T) {
	t.Parallel()
	s := NewState()
	for name, ev := range map[string]*eventsv1.JobChanged{
		"running":         func() *eventsv1.JobChanged { e := completed("1", "m"); e.Job.State = loomv1.JobState_RUNNING; return e }(),
		"failed":          func() *eventsv1.JobChanged { e := completed("1", "m"); e.Job.State = loomv1.JobState_FAILED; return e }(),
		"no model_output": completed("1", ""),
		"bad model id":    completed("1", "Bad_Model"),
		"bad job name":    func() *eventsv1.JobChanged { e := completed("1", "m"); e.Job.Name = "jobs/1"; return e }(),
		"no job":          {},
	} {
		if r := Decide(s, ev, time.Now()); r != nil {
			t.Errorf("%s: registered %v", name, r.Version)
		}
	}
}

// TestNames: the registry's names, through libs/resname.
func TestNames(t *testing.T) {
	t.Parallel()
	if p, err := resname.ParseProject("projects/default"); err != nil || p.ID != "default" {
		t.Fatalf("ParseProject: %q %v", p, err)
	}
	for _, bad := range []string{"", "projects/", "default", "projects/a/b"} {
		if _, err := resname.ParseProject(bad); err == nil {
			t.Errorf("ParseProject(%q) accepted", bad)
		}
	}
	if m, err := resname.ParseModel("projects/default/models/m-1"); err != nil || m.ID != "m-1" {
		t.Fatalf("ParseModel: %q %v", m, err)
	}
	if _, err := resname.ParseModel("projects/default/jobs/1"); err == nil {
		t.Fatal("ParseModel accepted a job name")
	}
}

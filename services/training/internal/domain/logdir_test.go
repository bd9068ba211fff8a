package domain

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// submittedJob creates a CustomJob with spec sp and log directory ld (as
// the app decided it), brings its cluster up when it has its own, and
// returns the job it submitted.
func submittedJob(t *testing.T, s *State, sp *trainingv1.CustomJobSpec, ld LogDir) *loomv1.Job {
	t.Helper()
	c := step(t, s, t0, Input{Payload: customJob(cjName, "alice", sp), LogDir: ld})
	if sp.GetPersistentResourceId() == "" {
		c = feed(t, s, clusterIs("projects/p/clusters/cj-101", loomv1.Cluster_RUNNING))
	}
	subs, _ := emitted[*eventsv1.SubmitJob](c)
	if len(subs) != 1 {
		t.Fatalf("no SubmitJob: %v", c.Emits)
	}
	return subs[0].GetJob()
}

// TestOutputGoesToTheLogDirectory: a CustomJob on its own cluster without
// a local base_output_directory writes its output to the owner's log
// directory the app made (<log dir>/<project>/<user>), where it outlives
// the cluster; the CustomJob says where, and a failure sends the user to
// it. A local base output directory still wins, and a job on a cluster
// that stays keeps its output in the cluster's shared directory.
func TestOutputGoesToTheLogDirectory(t *testing.T) {
	t.Parallel()
	noBase := func() *trainingv1.CustomJobSpec {
		sp := spec()
		sp.BaseOutputDirectory = nil
		return sp
	}
	ld := LogDir{Dir: "/var/lib/loom/logs/p/alice%x"}

	s := NewState()
	j := submittedJob(t, s, noBase(), ld)
	if j.GetOutputPattern() != "/var/lib/loom/logs/p/alice%%x/job-%j.out" {
		t.Errorf("output pattern %q, want the log directory's (its %% escaped)", j.GetOutputPattern())
	}
	if got := cjOf(t, s, cjName); got.GetOutputDir() != ld.Dir || got.GetOutputWarning() != "" {
		t.Errorf("output_dir %q, output_warning %q", got.GetOutputDir(), got.GetOutputWarning())
	}
	c := feed(t, s, jobIs("projects/p/jobs/101", loomv1.JobState_FAILED))
	if dels, _ := emitted[*eventsv1.DeleteCluster](c); len(dels) != 1 {
		t.Fatalf("the cluster is still deleted: %v", c.Emits)
	}
	msg := cjOf(t, s, cjName).GetError().GetMessage()
	if !strings.Contains(msg, "see the job's output (loom jobs logs 101; kept in "+ld.Dir+")") || strings.Contains(msg, "deleted") {
		t.Errorf("failure %q: want it sent to the output kept in %s", msg, ld.Dir)
	}

	s = NewState()
	if j := submittedJob(t, s, spec(), ld); j.GetOutputPattern() != "/shared/out/output/job-%j.out" {
		t.Errorf("a local base output directory: pattern %q", j.GetOutputPattern())
	}
	if got := cjOf(t, s, cjName).GetOutputDir(); got != "/shared/out/output" {
		t.Errorf("a local base output directory: output_dir %q", got)
	}

	s = NewState()
	sp := noBase()
	sp.PersistentResourceId = "pool"
	if j := submittedJob(t, s, sp, ld); j.GetOutputPattern() != "" {
		t.Errorf("a persistent cluster's job: pattern %q, want its shared directory's (none set)", j.GetOutputPattern())
	}
	if got := cjOf(t, s, cjName); got.GetOutputDir() != "" || got.GetOutputWarning() != "" {
		t.Errorf("a persistent cluster's job: output_dir %q, output_warning %q", got.GetOutputDir(), got.GetOutputWarning())
	}
}

// TestOutputWithoutALogDirectorySaysSo: where the app could not make the
// owner's log directory (LogDir.Why), the job runs as before, its output
// in its cluster's shared directory, and the CustomJob says that it goes
// with the cluster and what the user can do, from its creation, not only
// once it failed; as does one of a service that keeps no log directory.
// Neither it nor the failure's message quotes LogDir.Why (host paths,
// uids, errnos: every project member reads them; the service's log has
// them). The output fields
// a create carries are the service's to set, not the caller's.
func TestOutputWithoutALogDirectorySaysSo(t *testing.T) {
	t.Parallel()
	sp := spec()
	sp.BaseOutputDirectory = nil
	create := customJob(cjName, "alice", sp)
	create.CustomJob.OutputDir, create.CustomJob.OutputWarning = "/etc", "forged"

	s := NewState()
	// What the app's make said: host paths, a uid, an errno.
	why := "make /srv/loom/logs/p/alice for alice (uid 1001): mkdir /srv/loom/logs/p: permission denied"
	c := step(t, s, t0, Input{Payload: create, LogDir: LogDir{Why: why}})
	if _, es := emitted[*eventsv1.CreateCluster](c); len(es) != 1 {
		t.Fatalf("the job still runs: %v", c.Emits)
	}
	got := cjOf(t, s, cjName)
	if got.GetOutputDir() != "" || !strings.Contains(got.GetOutputWarning(), "deleted with the cluster") ||
		!strings.Contains(got.GetOutputWarning(), "could not make its owner's log directory") ||
		!strings.Contains(got.GetOutputWarning(), "give base_output_directory a local path") ||
		strings.Contains(got.GetOutputWarning(), why) {
		t.Errorf("output_dir %q, output_warning %q: want it to say what the user can do, not the host's detail", got.GetOutputDir(), got.GetOutputWarning())
	}
	c = feed(t, s, clusterIs("projects/p/clusters/cj-101", loomv1.Cluster_RUNNING))
	if subs, _ := emitted[*eventsv1.SubmitJob](c); len(subs) != 1 || subs[0].GetJob().GetOutputPattern() != "" {
		t.Fatalf("submitted %v", c.Emits)
	}
	failed := jobIs("projects/p/jobs/101", loomv1.JobState_FAILED)
	failed.Job.Cluster = "projects/p/clusters/cj-101"
	feed(t, s, failed)
	msg := cjOf(t, s, cjName).GetError().GetMessage()
	if !strings.Contains(msg, "deleted with its cluster cj-101 (the training service could not make its owner's log directory") ||
		strings.Contains(msg, why) || strings.Contains(msg, "/srv/loom") {
		t.Errorf("failure %q: want it to say the output went with the cluster, without the host's detail", msg)
	}

	s = NewState()
	step(t, s, t0, Input{Payload: customJob(cjName, "alice", sp)})
	if w := cjOf(t, s, cjName).GetOutputWarning(); !strings.Contains(w, "keeps no log directory (-log-dir)") {
		t.Errorf("no log directory: output_warning %q", w)
	}
}

// TestTrialOutputGoesToTheLogDirectory: a tuning job's trials, made long
// after its create, take the log directory decided then (Root.LogDir).
func TestTrialOutputGoesToTheLogDirectory(t *testing.T) {
	t.Parallel()
	s := NewState()
	tj := tuningJob(tunName, 2, 1, 0)
	tj.TuningJob.TrialJobSpec.BaseOutputDirectory = nil
	ld := LogDir{Dir: "/logs/p/alice"}
	step(t, s, t0, Input{Payload: tj, LogDir: ld})
	tr := active(tuningOf(t, s, tunName))
	if len(tr) != 1 {
		t.Fatalf("active trials %v", tr)
	}
	n, _ := ParseName(tr[0].GetCustomJob(), CustomJobs)
	c := feed(t, s, clusterIs(n.EphemeralCluster(), loomv1.Cluster_RUNNING))
	subs, _ := emitted[*eventsv1.SubmitJob](c)
	if len(subs) != 1 || subs[0].GetJob().GetOutputPattern() != "/logs/p/alice/job-%j.out" {
		t.Fatalf("trial submitted %v", c.Emits)
	}
	// The app makes the directory again before the trial can start: it
	// may have been deleted since the create.
	if js := c.LogDirSubmits(); len(js) != 1 || js[0] != subs[0].GetJob() {
		t.Errorf("LogDirSubmits = %v, want the trial's job", js)
	}
	if r := s.Lookup(tunName); r.LogDir != ld {
		t.Errorf("root's log dir %+v", r.LogDir)
	}
}

// TestCreateOwner: the app makes the log directory of the project and
// owner of a create, and of nothing else.
func TestCreateOwner(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in            proto.Message
		project, user string
		ok            bool
	}{
		{customJob(cjName, "alice", spec()), "p", "alice", true},
		{tuningJob(tunName, 1, 1, 0), "p", "alice", true},
		{&eventsv1.CreateTrainingPipeline{Pipeline: &trainingv1.TrainingPipeline{Name: plName, User: "bob"}}, "p", "bob", true},
		{customJob(cjName, "", spec()), "", "", false},
		{customJob("projects/p/clusters/x", "alice", spec()), "", "", false},
		{&eventsv1.CancelTraining{Name: cjName, User: "alice"}, "", "", false},
	} {
		name, p, u, ok := CreateOwner(c.in)
		if p != c.project || u != c.user || ok != c.ok || (ok && !strings.HasPrefix(name, "projects/p/locations/")) {
			t.Errorf("CreateOwner(%v) = %q %q %v, want %q %q %v", c.in, p, u, ok, c.project, c.user, c.ok)
		}
	}
}

// TestJobRunning: the pruner keeps the output of a CustomJob's job until
// the CustomJob ends (a trial's too), however long it was quiet; an
// unknown job is not running.
func TestJobRunning(t *testing.T) {
	t.Parallel()
	s := NewState()
	sp := spec()
	sp.BaseOutputDirectory = nil
	submittedJob(t, s, sp, LogDir{Dir: "/logs/p/alice"})
	if !s.JobRunning("projects/p/jobs/101") {
		t.Error("a submitted CustomJob's job: not running")
	}
	for _, other := range []string{"projects/q/jobs/101", "projects/p/jobs/102", "projects/p/jobs/10"} {
		if s.JobRunning(other) {
			t.Errorf("%s: running", other)
		}
	}
	feed(t, s, jobIs("projects/p/jobs/101", loomv1.JobState_COMPLETED))
	if st := cjOf(t, s, cjName).GetState(); !JobEnded(st) {
		t.Fatalf("the CustomJob is %v", st)
	}
	if s.JobRunning("projects/p/jobs/101") {
		t.Error("an ended CustomJob's job: running")
	}

	s = NewState()
	tj := tuningJob(tunName, 2, 1, 0)
	step(t, s, t0, Input{Payload: tj, LogDir: LogDir{Dir: "/logs/p/alice"}})
	tr := active(tuningOf(t, s, tunName))
	if len(tr) != 1 {
		t.Fatalf("active trials %v", tr)
	}
	n, _ := ParseName(tr[0].GetCustomJob(), CustomJobs)
	if !s.JobRunning(n.Job()) {
		t.Errorf("trial %s's job %s: not running", tr[0].GetId(), n.Job())
	}
}

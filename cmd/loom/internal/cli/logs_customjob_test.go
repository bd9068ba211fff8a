package cli

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
)

// TestLogsOfACustomJobNotStarted: a CustomJob's id is its scheduler
// job's, but that job is submitted only once the CustomJob's cluster runs.
// A tester's `loom jobs logs 56 -f` right after `loom jobs custom create`
// answered "job projects/default/jobs/56: not found (see `loom jobs
// list`)", as if the id were wrong. Now the answer says that the custom
// job has not started its job yet, -f waits for it, and a custom job that
// ended before its job started says so.
func TestLogsOfACustomJobNotStarted(t *testing.T) {
	t.Parallel()
	_, tr, gw := newTrainingGateway(t)
	pending := customJob(t, trainingParent+"/customJobs/7", trainingv1.JobState_JOB_STATE_PENDING, func(j *trainingv1.CustomJob) { j.Job = "" })
	tr.Resources[trainingParent+"/customJobs/7"] = pending
	// Submitted, but its job is not known (cancelled right after its create,
	// its cluster deleted before the scheduler took the job).
	tr.Resources[trainingParent+"/customJobs/8"] = customJob(t, trainingParent+"/customJobs/8", trainingv1.JobState_JOB_STATE_CANCELLED)
	// Its states as GetCustomJob answers them, one a call (set before the
	// fake serves: its handlers read them): the first run reads one, the
	// second (-f) waits through two more, then reads it cancelled before
	// its job started.
	cancelled := proto.Clone(pending).(*trainingv1.CustomJob)
	cancelled.State, cancelled.Error = trainingv1.JobState_JOB_STATE_CANCELLED, &trainingv1.Status{Code: 1, Message: "cancelled by users/ana"}
	tr.Progress[trainingParent+"/customJobs/7"] = []proto.Message{pending, pending, pending, cancelled}
	_, errOut, code := run(t, gw, "jobs", "logs", "7")
	if code != 1 || !strings.Contains(errOut, "custom job 7 is PENDING") || !strings.Contains(errOut, "loom jobs logs 7 -f") ||
		strings.Contains(errOut, "not found") {
		t.Errorf("logs of a pending custom job: exit %d, %q", code, errOut)
	}

	// -f waits while it is pending; this one is cancelled before its job starts.
	_, errOut, code = run(t, gw, "jobs", "logs", "7", "-f")
	if code != 1 || !strings.Contains(errOut, "Waiting for custom job 7") ||
		!strings.Contains(errOut, "custom job 7 ended CANCELLED before its job started: it has no output (cancelled by users/ana)") {
		t.Errorf("logs -f of a custom job cancelled before it started: exit %d, %q", code, errOut)
	}

	// One submitted whose job the scheduler does not know.
	if _, errOut, code := run(t, gw, "jobs", "logs", "8"); code != 1 || !strings.Contains(errOut, "custom job 8 ended CANCELLED and its job 8 is not known") {
		t.Errorf("logs of a custom job whose job is not known: exit %d, %q", code, errOut)
	}

	// Submitted, not yet taken by the scheduler: no wait for a cluster
	// that already runs.
	tr.Resources[trainingParent+"/customJobs/11"] = customJob(t, trainingParent+"/customJobs/11", trainingv1.JobState_JOB_STATE_PENDING)
	if _, errOut, code := run(t, gw, "jobs", "logs", "11"); code != 1 ||
		!strings.Contains(errOut, "it was submitted and the scheduler does not show it yet") || strings.Contains(errOut, "once its cluster") {
		t.Errorf("logs of a submitted custom job the scheduler does not show yet: exit %d, %q", code, errOut)
	}

	// An id that is no custom job's is the job's NotFound, as before.
	if _, errOut, code := run(t, gw, "jobs", "logs", "99"); code != 1 || !strings.Contains(errOut, "not found") || strings.Contains(errOut, "custom job") {
		t.Errorf("logs of no job: exit %d, %q", code, errOut)
	}
}

// TestGetJobOfACustomJobWithoutOne: `loom jobs custom cancel 9` right
// after its create, then `loom jobs get 9`, answered a bare NotFound while
// the custom job named the job as if it existed. The custom job now names
// none until its job is submitted, and `loom jobs get` says why there is
// no job 9.
func TestGetJobOfACustomJobWithoutOne(t *testing.T) {
	t.Parallel()
	_, tr, gw := newTrainingGateway(t)
	noJob := func(j *trainingv1.CustomJob) { j.Job = "" }
	tr.Resources[trainingParent+"/customJobs/9"] = customJob(t, trainingParent+"/customJobs/9", trainingv1.JobState_JOB_STATE_CANCELLED,
		noJob, func(j *trainingv1.CustomJob) {
			j.Error = &trainingv1.Status{Code: 1, Message: "cancelled by users/ana"}
		})
	tr.Resources[trainingParent+"/customJobs/10"] = customJob(t, trainingParent+"/customJobs/10", trainingv1.JobState_JOB_STATE_PENDING, noJob)
	if _, errOut, code := run(t, gw, "jobs", "get", "9"); code != 1 ||
		!strings.Contains(errOut, "custom job 9 ended CANCELLED") || !strings.Contains(errOut, "before its job was submitted: there is no job 9") ||
		!strings.Contains(errOut, "(cancelled by users/ana; `loom jobs custom get 9` shows the custom job)") {
		t.Errorf("get job of a custom job cancelled before its job: exit %d, %q", code, errOut)
	}
	if _, errOut, code := run(t, gw, "jobs", "get", "10"); code != 1 ||
		!strings.Contains(errOut, "custom job 10 is PENDING") || !strings.Contains(errOut, "submitted once its cluster cj-10 runs") {
		t.Errorf("get job of a pending custom job: exit %d, %q", code, errOut)
	}
	// An id that is no custom job's is the job's NotFound, as before.
	if _, errOut, code := run(t, gw, "jobs", "get", "99"); code != 1 || !strings.Contains(errOut, "not found") || strings.Contains(errOut, "custom job") {
		t.Errorf("get of no job: exit %d, %q", code, errOut)
	}
}

// TestGetJobOfACustomJobJustSubmitted: a custom job that names its job
// (submitted: on a persistent cluster at its create) whose job the
// scheduler has not taken yet was answered "its job is submitted once its
// cluster runs", sending the user to wait for a cluster that runs already.
// It says the job was submitted and the scheduler does not show it yet.
func TestGetJobOfACustomJobJustSubmitted(t *testing.T) {
	t.Parallel()
	_, tr, gw := newTrainingGateway(t)
	tr.Resources[trainingParent+"/customJobs/11"] = customJob(t, trainingParent+"/customJobs/11", trainingv1.JobState_JOB_STATE_PENDING)
	_, errOut, code := run(t, gw, "jobs", "get", "11")
	if code != 1 || !strings.Contains(errOut, "custom job 11 is PENDING: its job 11 was submitted and the scheduler does not show it yet") ||
		strings.Contains(errOut, "once its cluster") {
		t.Errorf("get job of a custom job just submitted: exit %d, %q", code, errOut)
	}
}

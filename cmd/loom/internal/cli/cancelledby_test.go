package cli

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestJobsGetCancelledBy: `loom jobs get` of a cancelled job says who
// cancelled it (Job.cancelled_by, as the scheduler recorded it) and how
// its script ended when the cancel killed it (its run's batch end), where
// the job's own exit code is 0.
func TestJobsGetCancelledBy(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	j := &loomv1.Job{Name: "projects/default/jobs/12", JobId: "12", Cluster: "projects/default/clusters/demo",
		State: loomv1.JobState_CANCELLED, CancelledBy: "ana", NodeCount: 1, SubmitTime: timestamppb.New(now.Add(-time.Minute)),
		Runs: []*loomv1.JobRun{{Attempt: 1, State: loomv1.JobState_CANCELLED, BatchExitCode: proto.Int32(143), BatchExitSignal: proto.Int32(15)}}}
	var b strings.Builder
	if err := renderJob(&b, j, now); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"State:          CANCELLED\n", "Cancelled by:   ana\n", "Exit code:      0 (its script killed by signal 15)\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("jobs get of a cancelled job:\n%s\nwant a line %q", b.String(), want)
		}
	}
}

// TestJobsListExit: `loom jobs list`'s EXIT says what `loom jobs get`
// says: the signal that killed a cancelled job's script (sacct's 0:15,
// where the job's own exit code is 0), "-" for a job that never ran
// (cancelled while pending) and for one not ended, the code otherwise.
func TestJobsListExit(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	submit := timestamppb.New(now.Add(-time.Minute))
	killed := &loomv1.Job{JobId: "12", State: loomv1.JobState_CANCELLED, NodeCount: 1, SubmitTime: submit, StartTime: submit,
		Runs: []*loomv1.JobRun{{Attempt: 1, State: loomv1.JobState_CANCELLED, BatchExitCode: proto.Int32(143), BatchExitSignal: proto.Int32(15)}}}
	pending := &loomv1.Job{JobId: "13", State: loomv1.JobState_CANCELLED, NodeCount: 1, SubmitTime: submit}
	failed := &loomv1.Job{JobId: "14", State: loomv1.JobState_FAILED, ExitCode: 3, NodeCount: 1, SubmitTime: submit, StartTime: submit,
		Runs: []*loomv1.JobRun{{Attempt: 1, State: loomv1.JobState_FAILED, ExitCode: 3, BatchExitCode: proto.Int32(3), BatchExitSignal: proto.Int32(0)}}}
	oomed := &loomv1.Job{JobId: "15", State: loomv1.JobState_FAILED, ExitCode: 137, ExitSignal: proto.Int32(9), NodeCount: 1,
		SubmitTime: submit, StartTime: submit, Runs: []*loomv1.JobRun{{Attempt: 1, State: loomv1.JobState_FAILED, ExitCode: 137}}}
	running := &loomv1.Job{JobId: "16", State: loomv1.JobState_RUNNING, NodeCount: 1, SubmitTime: submit, StartTime: submit,
		Runs: []*loomv1.JobRun{{Attempt: 1, State: loomv1.JobState_RUNNING}}}
	var b strings.Builder
	if err := renderJobs(&b, []*loomv1.Job{killed, pending, failed, oomed, running}, now); err != nil {
		t.Fatal(err)
	}
	exits := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n")[1:] {
		f := strings.Fields(l)
		exits[f[0]] = strings.Join(f[7:], " ")
	}
	for id, want := range map[string]string{"12": "signal 15", "13": "-", "14": "3", "15": "signal 9", "16": "-"} {
		if exits[id] != want {
			t.Errorf("jobs list EXIT of job %s = %q, want %q:\n%s", id, exits[id], want, b.String())
		}
	}
	for j, want := range map[*loomv1.Job]string{pending: "Exit code:      - (it never ran)\n", oomed: "Exit code:      137 (killed by signal 9)\n"} {
		var g strings.Builder
		if err := renderJob(&g, j, now); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(g.String(), want) {
			t.Errorf("jobs get of job %s:\n%s\nwant a line %q", j.GetJobId(), g.String(), want)
		}
	}
}

// TestJobsCancelEndedJob: the gateway refuses to cancel an ended job in
// Slurm's words (for scancel); `loom jobs cancel` says in Loom's how the
// job ended, that there is nothing to cancel and what to run next, and
// exits 1 (with -o json too), so that a script does not take a job that
// ended on its own for one it cancelled.
func TestJobsCancelEndedJob(t *testing.T) {
	t.Parallel()
	f, gw := newFakeGateway(t)
	f.CancelErr = status.Error(codes.FailedPrecondition, "Job/step already completing or completed")
	for _, args := range [][]string{{"jobs", "cancel", "8"}, {"jobs", "cancel", "8", "-o", "json"}} {
		out, errOut, code := run(t, gw, args...)
		if code != 1 || out != "" || strings.Contains(errOut, "Job/step") ||
			errOut != "Error: cancel job 8: it is already FAILED (exit 3): nothing to cancel (see how it ended with `loom jobs get 8`)\n" {
			t.Errorf("%v of an ended job: exit %d, stdout %q, stderr %q; want exit 1, nothing on stdout, Loom's words and the next step on stderr", args, code, out, errOut)
		}
	}
	// A job the gateway no longer shows after refusing the cancel.
	out, errOut, code := run(t, gw, "jobs", "cancel", "99")
	if code != 1 || out != "" || errOut != "Error: cancel job 99: it has already ended: nothing to cancel (see how it ended with `loom jobs get 99`)\n" {
		t.Errorf("cancel of an ended job the gateway no longer shows: exit %d, stdout %q, stderr %q; want exit 1", code, out, errOut)
	}
	// --ignore-ended: the same words as a note, exit 0; -o json the job.
	out, errOut, code = run(t, gw, "jobs", "cancel", "8", "--ignore-ended")
	if code != 0 || out != "" || errOut != "Note: cancel job 8: it is already FAILED (exit 3): nothing to cancel (see how it ended with `loom jobs get 8`)\n" {
		t.Errorf("cancel --ignore-ended of an ended job: exit %d, stdout %q, stderr %q; want exit 0 and the note", code, out, errOut)
	}
	if out, _, code = run(t, gw, "jobs", "cancel", "8", "--ignore-ended", "-o", "json"); code != 0 || !strings.Contains(out, `"state": "FAILED"`) {
		t.Errorf("cancel --ignore-ended -o json of an ended job: exit %d, stdout %q; want exit 0 and the job", code, out)
	}
	// Ending (COMPLETING): its processes are being stopped already.
	f.Jobs = append(f.Jobs, &loomv1.Job{Name: "projects/default/jobs/5", JobId: "5", Cluster: "projects/default/clusters/demo",
		State: loomv1.JobState_COMPLETING, Nodes: []string{"cpu-0001"}})
	out, errOut, code = run(t, gw, "jobs", "cancel", "5")
	if code != 1 || out != "" || errOut != "Error: cancel job 5: it is already ending, COMPLETING on cpu-0001: nothing to cancel (follow it to its end with `loom jobs watch 5`)\n" {
		t.Errorf("cancel of an ending job: exit %d, stdout %q, stderr %q; want exit 1", code, out, errOut)
	}
}

// TestJobsListCutsALongReason: a failure's whole message as its state
// reason does not stretch `loom jobs list`'s table: the STATE cell is cut
// (with "…"), the columns after it stay in line, and jobs get keeps it
// whole.
func TestJobsListCutsALongReason(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 8, 10, 0, 0, 0, time.UTC)
	reason := "JobLaunchFailure: " + strings.Repeat("no account for user alice on node gpu-0001; ", 5)
	long := &loomv1.Job{JobId: "21", State: loomv1.JobState_FAILED, StateReason: reason, NodeCount: 1,
		SubmitTime: timestamppb.New(now.Add(-time.Minute))}
	short := &loomv1.Job{JobId: "22", State: loomv1.JobState_PENDING, StateReason: "Resources", NodeCount: 1,
		SubmitTime: timestamppb.New(now.Add(-time.Minute))}
	var b strings.Builder
	if err := renderJobs(&b, []*loomv1.Job{long, short}, now); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("jobs list:\n%s", b.String())
	}
	if !strings.Contains(lines[1], "…") || strings.Contains(lines[1], reason) || utf8.RuneCountInString(lines[1]) > 130 {
		t.Errorf("jobs list row of the long reason not cut (%d columns):\n%s", utf8.RuneCountInString(lines[1]), b.String())
	}
	if !strings.Contains(lines[2], "PENDING (Resources)") {
		t.Errorf("jobs list row of a short reason:\n%s", b.String())
	}
	if h, r := strings.Index(lines[0], "NODES"), strings.Index(lines[2], " 1 "); r < 0 || r+1 != h {
		t.Errorf("NODES column out of line (header at %d, value at %d):\n%s", h, r+1, b.String())
	}
	var g strings.Builder
	if err := renderJob(&g, long, now); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(g.String(), reason) {
		t.Errorf("jobs get lost the whole reason:\n%s", g.String())
	}
}

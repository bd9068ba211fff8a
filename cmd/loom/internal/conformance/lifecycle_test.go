package conformance

import (
	"strings"
	"testing"
	"time"
)

// as returns a session like s run by another user (their token, and USER
// and LOGNAME as their login would have).
func (s *session) as(user string) *session {
	c := *s
	c.env = append(append(append([]string(nil), s.env...), "USER="+user, "LOGNAME="+user), s.f.userToken(s.t, user)...)
	c.user = user
	return &c
}

// TestCompletingUntilStepsEnd: a cancelled job whose script ignores SIGTERM
// shows CG (COMPLETING) in squeue and scontrol until its agent has killed it
// (SIGKILL after the grace period) and reported the end; then sacct says
// CANCELLED.
func TestCompletingUntilStepsEnd(t *testing.T) {
	t.Parallel()
	s := setup(t).session(t, "main")
	stubborn := "trap 'echo ignored TERM' TERM; echo started; while :; do sleep 1; done"
	id := s.sbatch("-J", "stubborn", "-o", "stubborn.out", "--wrap", stubborn)
	s.waitFor(60*time.Second, "job "+id+" to run", func() bool { return strings.Contains(s.read("stubborn.out"), "started") })
	s.waitFor(30*time.Second, "job "+id+" to show R", func() bool {
		r := s.queue("-j", id)
		return len(r) == 1 && r[0]["ST"] == "R"
	})
	s.ok("scancel", id)
	s.waitFor(30*time.Second, "job "+id+" to show CG", func() bool {
		r := s.queue("-j", id)
		return len(r) == 1 && r[0]["ST"] == "CG"
	})
	if kv := s.showJob(id); kv["JobState"] != "COMPLETING" {
		t.Errorf("scontrol show job %s: JobState=%s while its step ends, want COMPLETING", id, kv["JobState"])
	}
	if r := s.run("squeue", "-h", "-j", id, "-t", "CG", "-o", "%i %t"); r.code != 0 || strings.TrimSpace(r.stdout) != id+" CG" {
		t.Errorf("squeue -t CG -j %s: %s", id, r)
	}
	// A second scancel while it completes is no error, as in Slurm 22.05:
	// silent, exit 0; -v says why nothing was done.
	if r := s.run("scancel", id); r.code != 0 || r.stderr != "" {
		t.Errorf("scancel of a completing job: %s, want exit 0 and nothing said", r)
	}
	if r := s.run("scancel", "-v", id); r.code != 0 || !strings.Contains(r.stderr, "Job/step already completing or completed") {
		t.Errorf("scancel -v of a completing job: %s", r)
	}
	row := s.waitDone(id, 60*time.Second)
	wantEqual(t, "cancelled stubborn job", state(row), "CANCELLED")
	if out := s.read("stubborn.out"); !strings.Contains(out, "ignored TERM") {
		t.Errorf("the job's output %q: SIGTERM never reached it", out)
	}
}

// TestAdminHoldAndPermissions: root's hold is an admin hold, which the
// job's owner may not release ("Access/permission denied"); another user
// may neither hold nor cancel the job; root may release it.
func TestAdminHoldAndPermissions(t *testing.T) {
	t.Parallel()
	s := setup(t).session(t, "main")
	root, other := s.as("root"), s.as("intruder")
	id := s.sbatch("--begin=now+600", "--wrap", "true")
	reason := func() string {
		r := s.queue("-j", id)
		if len(r) != 1 {
			return "not listed"
		}
		return r[0]["ST"] + " " + r[0]["REASON"]
	}
	root.ok("scontrol", "hold", id)
	s.waitFor(30*time.Second, "job "+id+" admin-held", func() bool { return reason() == "PD JobHeldAdmin" })
	if r := s.run("scontrol", "release", id); r.code != 1 || r.stderr != "Access/permission denied for job "+id+"\n" {
		t.Errorf("owner releasing an admin hold: %s; want exit 1, \"Access/permission denied for job %s\"", r, id)
	}
	if r := other.run("scontrol", "hold", id); r.code != 1 || !strings.Contains(r.stderr, "Access/permission denied") {
		t.Errorf("another user holding the job: %s", r)
	}
	if r := other.run("scancel", id); r.code == 0 || !strings.Contains(r.stderr, "Access/permission denied") {
		t.Errorf("another user cancelling the job: %s", r)
	}
	root.ok("scontrol", "release", id)
	s.waitFor(30*time.Second, "job "+id+" released", func() bool { return reason() == "PD BeginTime" })
	// uhold by root is a user hold: its owner may release it.
	root.ok("scontrol", "uhold", id)
	s.waitFor(30*time.Second, "job "+id+" user-held", func() bool { return reason() == "PD JobHeldUser" })
	s.ok("scontrol", "release", id)
	s.waitFor(30*time.Second, "job "+id+" released by its owner", func() bool { return reason() == "PD BeginTime" })
	s.ok("scancel", id)
	wantEqual(t, "cancelled job", state(s.waitDone(id, 30*time.Second)), "CANCELLED")
}

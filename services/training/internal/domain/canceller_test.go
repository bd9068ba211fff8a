package domain

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// cancelOf is the one CancelJob c emits and its envelope's principal.
func cancelOf(t *testing.T, c *Change) (*eventsv1.CancelJob, string) {
	t.Helper()
	cancels, es := emitted[*eventsv1.CancelJob](c)
	if len(cancels) != 1 {
		t.Fatalf("want one CancelJob, emitted %v", c.Emits)
	}
	return cancels[0], es[0].Principal
}

// TestCancelJobNamesWhoCancelled: a CustomJob's scheduler job is cancelled
// as whoever actually cancelled it, so that the scheduler's
// Job.cancelled_by names them: the authenticated administrator (not the
// job's owner, nor the user the payload names), the owner, or, for the
// service's own cancels (a FLEX_START expiry, the search's early stop, a
// tuning job failing), nobody: no user, no principal, the scheduler's ""
// for a cancel no caller asked for. Before, each went as the owner. The
// service's own cancel names the owner it acts for (on_behalf_of), so that
// the scheduler, which refuses training's cancels naming no one, holds it
// to the owner's jobs.
func TestCancelJobNamesWhoCancelled(t *testing.T) {
	t.Parallel()
	running := func() *State {
		s := NewState()
		feed(t, s, customJob(cjName, "alice", spec()))
		feed(t, s, clusterIs("projects/p/clusters/cj-101", loomv1.Cluster_RUNNING))
		return s
	}
	for _, tc := range []struct {
		what        string
		in          Input
		user, princ string
		admin       bool
	}{
		{"an admin's cancel", Input{Payload: &eventsv1.CancelTraining{Name: cjName, User: "alice", Admin: true}, Principal: "users/root"}, "root", "users/root", true},
		{"the owner's cancel", Input{Payload: &eventsv1.CancelTraining{Name: cjName, User: "root"}, Principal: "users/alice"}, "alice", "users/alice", false},
	} {
		s := running()
		c, p := cancelOf(t, step(t, s, t0, tc.in))
		if c.GetUser() != tc.user || c.GetAdmin() != tc.admin || p != tc.princ {
			t.Errorf("%s: CancelJob as user %q admin %v principal %q; want %q %v %q", tc.what, c.GetUser(), c.GetAdmin(), p, tc.user, tc.admin, tc.princ)
		}
	}

	// Expiry: a submitted FLEX_START job not started within max_wait_duration.
	s := NewState()
	sp := spec()
	sp.Scheduling = &trainingv1.Scheduling{Strategy: trainingv1.Scheduling_FLEX_START, MaxWaitDuration: durationpb.New(time.Hour)}
	feed(t, s, customJob(cjName, "alice", sp))
	feed(t, s, clusterIs("projects/p/clusters/cj-101", loomv1.Cluster_RUNNING))
	cs := s.Tick(t0.Add(time.Hour))
	if len(cs) != 1 {
		t.Fatalf("Tick at max_wait_duration: %d changes", len(cs))
	}
	if c, p := cancelOf(t, cs[0]); c.GetUser() != "" || c.GetAdmin() || p != "" || c.GetOnBehalfOf() != "alice" {
		t.Errorf("expiry: CancelJob as user %q admin %v principal %q on behalf of %q; want the service's own (no user, no principal) for alice",
			c.GetUser(), c.GetAdmin(), p, c.GetOnBehalfOf())
	}

	// A tuning job an admin cancels: its trials' jobs are cancelled as
	// the admin, even once the service was restarted in between (EndBy
	// is stored: TestTuningEndByStored).
	s = NewState()
	feed(t, s, tuningJob(tunName, 2, 1, 0))
	tr := active(tuningOf(t, s, tunName))[0]
	n, _ := ParseName(tr.GetCustomJob(), CustomJobs)
	feed(t, s, clusterIs(n.EphemeralCluster(), loomv1.Cluster_RUNNING))
	c, p := cancelOf(t, step(t, s, t0, Input{Payload: &eventsv1.CancelTraining{Name: tunName, Admin: true}, Principal: "users/root"}))
	if c.GetUser() != "root" || !c.GetAdmin() || p != "users/root" || c.GetJob() != n.Job() || c.GetOnBehalfOf() != "" {
		t.Errorf("tuning cancel: CancelJob of %s as user %q admin %v principal %q; want %s as root, admin", c.GetJob(), c.GetUser(), c.GetAdmin(), p, n.Job())
	}
	if by := s.Lookup(tunName).Tuning.EndBy; by != (Canceller{User: "root", Admin: true}) {
		t.Errorf("tuning job's EndBy %+v, want root, admin", by)
	}
}

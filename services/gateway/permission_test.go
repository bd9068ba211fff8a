package gateway

import (
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/loom-ml/loom/libs/testkit"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestJobPermissions: users act on their own jobs only, administrators
// (default root, slurm) on any; an administrator's hold is an admin hold
// (uhold a user hold), which a user may not release. Refusals are
// PermissionDenied with Slurm's "Access/permission denied".
func TestJobPermissions(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, 2*wait)

	ana := &loomv1.Job{Name: "projects/default/jobs/40", JobId: "40", Cluster: cluster1, State: loomv1.JobState_PENDING,
		User: "ana", Partition: "all", StateReason: "Priority"}
	h.w.setJob(ana)

	for _, tc := range []struct {
		what string
		err  error
	}{
		{"bob holds ana's job", func() error {
			_, err := h.jobs().UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: ana.GetName(), Action: "hold", User: "bob"})
			return err
		}()},
		{"bob cancels ana's job", func() error {
			_, err := h.jobs().CancelJob(ctx, &loomv1.CancelJobRequest{Name: ana.GetName(), User: "bob"})
			return err
		}()},
		{"an anonymous caller updates ana's job", func() error {
			_, err := h.jobs().UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: ana.GetName(), Action: "update", TimeLimitSeconds: 60})
			return err
		}()},
	} {
		wantCode(t, tc.what, tc.err, codes.PermissionDenied, "Access/permission denied")
	}

	// The commands name the caller and whether they are an administrator
	// (the scheduler makes root's hold an admin hold, its uhold a user hold).
	for _, tc := range []struct {
		user, action string
		admin        bool
	}{{"ana", "hold", false}, {"root", "hold", true}, {"root", "uhold", true}, {"slurm", "release", true}} {
		if _, err := h.jobs().UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: ana.GetName(), Action: tc.action, User: tc.user}); err != nil {
			t.Fatalf("%s by %s: %v", tc.action, tc.user, err)
		}
		jobCommand(t, h, func(u *eventsv1.UpdateJob) bool {
			return u.GetJob() == ana.GetName() && u.GetAction() == tc.action && u.GetUser() == tc.user && u.GetAdmin() == tc.admin
		})
	}

	// An admin hold: ana may not release it, root may.
	held := &loomv1.Job{Name: "projects/default/jobs/41", JobId: "41", Cluster: cluster1, State: loomv1.JobState_PENDING,
		User: "ana", Partition: "all", Hold: true, StateReason: "JobHeldAdmin"}
	h.w.setJob(held)
	_, err := h.jobs().UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: held.GetName(), Action: "release", User: "ana"})
	wantCode(t, "ana releases an admin hold", err, codes.PermissionDenied, "Access/permission denied")
	if _, err := h.jobs().UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: held.GetName(), Action: "release", User: "root"}); err != nil {
		t.Fatalf("root releases an admin hold: %v", err)
	}
	// root cancels ana's job.
	if _, err := h.jobs().CancelJob(ctx, &loomv1.CancelJobRequest{Name: held.GetName(), User: "root"}); err != nil {
		t.Fatalf("root cancels ana's job: %v", err)
	}
	jobCommand(t, h, func(c *eventsv1.CancelJob) bool {
		return c.GetJob() == held.GetName() && c.GetUser() == "root" && c.GetAdmin()
	})
}

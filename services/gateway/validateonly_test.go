package gateway

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/status"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestSubmitJobValidateOnly: a validate_only submission (sbatch
// --test-only) runs every check a submission runs and writes nothing: it
// takes no job id, holds no quota, sends no command and leaves no record
// of a submit in the audit trail; a refusal is the one the same submission
// gets, word for word.
func TestSubmitJobValidateOnly(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.Limits.MaxSubmitJobs = 1 })
	ctx := testkit.Context(t, 30*time.Second)
	if _, err := h.accounts().CreateAccount(ctx, &loomv1.CreateAccountRequest{Parent: project, Account: &loomv1.Account{Name: "physics"}}, h.call("pat")); err != nil {
		t.Fatal(err)
	}
	if _, err := h.accounts().SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: project, Association: &loomv1.Association{
		Account: "physics", User: "alice"}}, h.call("pat")); err != nil {
		t.Fatal(err)
	}
	req := func(validate bool, edit func(*loomv1.SubmitJobRequest)) *loomv1.SubmitJobRequest {
		r := validJob()
		r.Job.User, r.ValidateOnly = "alice", validate
		if edit != nil {
			edit(r)
		}
		return r
	}
	// same calls the submission as a validation, then for real (when it
	// is refused: a refused real one writes nothing either), and wants the
	// same answer.
	same := func(what, who string, edit func(*loomv1.SubmitJobRequest)) {
		t.Helper()
		_, verr := h.jobs().SubmitJob(ctx, req(true, edit), h.call(who))
		if verr == nil {
			t.Fatalf("%s: validated, want refused", what)
		}
		_, err := h.jobs().SubmitJob(ctx, req(false, edit), h.call(who))
		if status.Code(verr) != status.Code(err) || status.Convert(verr).Message() != status.Convert(err).Message() {
			t.Errorf("%s: validate_only got %v, a submission %v: want the same refusal", what, verr, err)
		}
	}
	same("bad spec", "alice", func(r *loomv1.SubmitJobRequest) { r.Job.NodeCount = -1 })
	same("too many nodes", "alice", func(r *loomv1.SubmitJobRequest) { r.Job.NodeCount = 50 })
	same("a viewer", "vic", nil)
	same("no association with the account", "alice", func(r *loomv1.SubmitJobRequest) { r.Job.Account = "chem" })
	same("a QOS not granted", "alice", func(r *loomv1.SubmitJobRequest) { r.Job.Qos = "high" })

	// Validated twice: charged as a submission would be, with no id (the
	// installation's job counter is not told to any caller); neither holds
	// alice's one MaxSubmitJobs slot.
	for i := range 2 {
		j, err := h.jobs().SubmitJob(ctx, req(true, func(r *loomv1.SubmitJobRequest) { r.RequestId = "r-1" }), h.call("alice"))
		if err != nil {
			t.Fatalf("validate %d: %v", i, err)
		}
		if j.GetJobId() != "" || j.GetName() != "" || j.GetAccount() != "physics" || j.GetUser() != "alice" || j.GetState() != loomv1.JobState_PENDING {
			t.Fatalf("validate %d answered job %q (%q) account %q user %q %v; want no id, alice's, charged to physics, pending",
				i, j.GetJobId(), j.GetName(), j.GetAccount(), j.GetUser(), j.GetState())
		}
	}
	// REST: ?validate_only=true, the same answer.
	hr, err := http.NewRequestWithContext(ctx, "POST", h.restBase+"/v1/projects/default/jobs?validate_only=true",
		strings.NewReader(`{"cluster": "c1", "script": "echo hello", "node_count": 2, "gpus_per_node": 8}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := h.restAs("alice").Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || strings.Contains(string(b), `"job_id"`) || !strings.Contains(string(b), `"account":"physics"`) {
		t.Fatalf("REST validate_only: HTTP %d %s, want 200 with the job, no job_id", resp.StatusCode, b)
	}
	// The request id was not recorded: the submission under it is new.
	real, err := h.jobs().SubmitJob(ctx, req(false, func(r *loomv1.SubmitJobRequest) { r.RequestId = "r-1" }), h.call("alice"))
	if err != nil || real.GetJobId() != "1" {
		t.Fatalf("the submission after the validations: job %s, %v; want job 1 (no id taken, no quota held)", real.GetJobId(), err)
	}
	// Now at MaxSubmitJobs: the validation is refused as the submission is.
	same("past MaxSubmitJobs", "alice", nil)

	// One command (the submission's): the outbox publishes in order, so a
	// validation's would have come first.
	testkit.WaitEvent(t, h.broker, topics.JobCommands, wait, func(e envelope.Event) bool {
		return e.Subject == cluster1 && e.Type == "loom.events.v1.SubmitJob"
	})
	submits := slices.DeleteFunc(testkit.Events(t, h.broker, topics.JobCommands), func(e envelope.Event) bool {
		return e.Type != "loom.events.v1.SubmitJob"
	})
	if len(submits) != 1 {
		t.Errorf("SubmitJob commands: %d, want only the one submission's", len(submits))
	}
	// In the trail: the one submission allowed, the refused validations
	// said to be validations, no validation allowed.
	recs := waitAudit(t, ctx, h, "pat", project, func(r *loomv1.AuditRecord) bool {
		return record("users/alice", "/loom.v1.JobService/SubmitJob", "rejected", "ResourceExhausted")(r) &&
			strings.HasPrefix(r.GetReason(), "validate only: ")
	})
	allowed := slices.DeleteFunc(slices.Clone(recs), func(r *loomv1.AuditRecord) bool {
		return !record("users/alice", "/loom.v1.JobService/SubmitJob", "allowed", "OK")(r)
	})
	if len(allowed) != 1 {
		t.Errorf("%d submissions allowed in the trail, want 1: %v", len(allowed), allowed)
	}
}

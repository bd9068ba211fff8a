package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/testkit"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/adapters"
)

func (h *harness) audit() loomv1.AuditServiceClient { return loomv1.NewAuditServiceClient(h.conn) }

// auditRows lists every record of parent (all pages of size) as who,
// filtered by principal.
func auditRows(t *testing.T, ctx context.Context, h *harness, who, parent, principal string, size int32) []*loomv1.AuditRecord {
	t.Helper()
	var out []*loomv1.AuditRecord
	token := ""
	for range 1000 {
		resp, err := h.audit().ListAuditRecords(ctx, &loomv1.ListAuditRecordsRequest{Parent: parent, Principal: principal,
			PageSize: size, PageToken: token}, h.call(who))
		if err != nil {
			t.Fatalf("list audit records of %s as %s: %v", parent, who, err)
		}
		if size > 0 && len(resp.GetRecords()) > int(size) {
			t.Fatalf("a page of %d records, more than the page size %d", len(resp.GetRecords()), size)
		}
		out = append(out, resp.GetRecords()...)
		if token = resp.GetNextPageToken(); token == "" {
			return out
		}
	}
	t.Fatal("paging did not end")
	return nil
}

// waitAudit waits until parent's trail (read as who) holds a record that
// match accepts, and returns the trail.
func waitAudit(t *testing.T, ctx context.Context, h *harness, who, parent string, match func(*loomv1.AuditRecord) bool) []*loomv1.AuditRecord {
	t.Helper()
	for {
		recs := auditRows(t, ctx, h, who, parent, "", 0)
		if slices.ContainsFunc(recs, match) {
			return recs
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no such audit record in %s: %v", parent, recs)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func record(principal, method, decision, code string) func(*loomv1.AuditRecord) bool {
	return func(r *loomv1.AuditRecord) bool {
		return r.GetPrincipal() == principal && r.GetMethod() == method && r.GetDecision() == decision && r.GetCode() == code
	}
}

// restart stops the gateway and starts it again on the same Redis and
// broker.
func (h *harness) restart(t *testing.T) {
	t.Helper()
	if err := h.svc.Stop(); err != nil {
		t.Fatalf("stop the gateway: %v", err)
	}
	type addrs struct{ grpc, rest string }
	started := make(chan addrs, 1)
	cfg := h.cfg
	svc := testkit.Start(t, "gateway", func(ctx context.Context) error {
		return run(ctx, cfg, hooks{started: func(g, r string) { started <- addrs{g, r} }})
	})
	select {
	case a := <-started:
		// The keys and members are in Redis: the same credentials work.
		h.grpcAddr, h.restBase, h.svc = a.grpc, "http://"+a.rest, svc
		h.conn, h.anon = h.as(t, defaultCaller), h.dial(t, "")
	case <-svc.Done():
		t.Fatalf("gateway stopped at start: %v", svc.Err())
	case <-time.After(wait):
		t.Fatal("gateway did not start again")
	}
}

func TestAuditTrail(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.Limits.MaxWatches = 1 })
	ctx := testkit.Context(t, 3*wait)

	// A mutation that is allowed, and refusals: a bad request, a quota, an
	// unknown credential (authentication's refusal), and a read refused.
	req := validJob()
	req.Job.User = "pat"
	job, err := h.jobs().SubmitJob(ctx, req, h.call("pat"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = h.clusters().CreateCluster(ctx, &loomv1.CreateClusterRequest{Parent: project, ClusterId: "Bad"}, h.call("bob"))
	wantCode(t, "a user creates a cluster", err, codes.PermissionDenied)
	_, err = h.clusters().DeleteCluster(ctx, &loomv1.DeleteClusterRequest{Name: project + "/clusters/c9"}, h.call("mallory"))
	wantCode(t, "unknown credential", err, codes.Unauthenticated)
	_, err = h.jobs().GetJob(ctx, &loomv1.GetJobRequest{Name: project + "/jobs/12345"}, h.call("bob"))
	wantCode(t, "unknown job", err, codes.NotFound)
	_, err = h.jobs().GetJob(ctx, &loomv1.GetJobRequest{Name: job.GetName()}, h.call("bob")) // a read that succeeds: not recorded
	if err != nil {
		t.Fatal(err)
	}

	// A stream refused by the watch cap names the job it asked for.
	wctx, stopWatch := context.WithCancel(ctx)
	w1, err := h.jobs().WatchJob(wctx, &loomv1.WatchJobRequest{Name: job.GetName()}, h.call("pat"))
	if err == nil {
		_, err = w1.Recv()
	}
	if err != nil {
		t.Fatalf("ana's watch: %v", err)
	}
	w2, err := h.jobs().WatchJob(ctx, &loomv1.WatchJobRequest{Name: job.GetName()}, h.call("pat"))
	if err == nil {
		_, err = w2.Recv()
	}
	wantCode(t, "ana's second watch", err, codes.ResourceExhausted)
	stopWatch()
	recs := waitAudit(t, ctx, h, "pat", project, func(r *loomv1.AuditRecord) bool {
		return record("users/pat", "/loom.v1.JobService/WatchJob", "rejected", "ResourceExhausted")(r) && r.GetResource() == job.GetName()
	})
	if slices.ContainsFunc(recs, record("users/pat", "/loom.v1.JobService/WatchJob", "allowed", "OK")) {
		t.Error("a watch that was let through was recorded")
	}
	// An anonymous refusal is the cluster's to read, not the project's.
	waitAudit(t, ctx, h, "root", "projects/-", func(r *loomv1.AuditRecord) bool {
		return record("anonymous", "/loom.v1.ClusterService/DeleteCluster", "denied", "Unauthenticated")(r) && r.GetProject() == "-"
	})
	recs = waitAudit(t, ctx, h, "pat", project, record("users/bob", "/loom.v1.JobService/GetJob", "rejected", "NotFound"))
	for _, want := range []func(*loomv1.AuditRecord) bool{
		record("users/pat", "/loom.v1.JobService/SubmitJob", "allowed", "OK"),
		record("users/bob", "/loom.v1.ClusterService/CreateCluster", "denied", "PermissionDenied"),
	} {
		if !slices.ContainsFunc(recs, want) {
			t.Errorf("missing a record in %v", recs)
		}
	}
	for _, r := range recs {
		if r.GetMethod() == "/loom.v1.JobService/GetJob" && r.GetCode() == "OK" {
			t.Errorf("a successful read was recorded: %v", r)
		}
		if r.GetMethod() == "/loom.v1.JobService/SubmitJob" && (r.GetResource() != project || r.GetProject() != "default") {
			t.Errorf("submit record: %v", r)
		}
	}
	for i := 1; i < len(recs); i++ {
		if recs[i].GetTime().AsTime().After(recs[i-1].GetTime().AsTime()) {
			t.Errorf("records not newest first: %v before %v", recs[i-1], recs[i])
		}
	}

	// Only admins read the trail: a project's admins their project's, cluster
	// administrators every project's.
	_, err = h.audit().ListAuditRecords(ctx, &loomv1.ListAuditRecordsRequest{Parent: project}, h.call("bob"))
	wantCode(t, "a user of the project", err, codes.PermissionDenied)
	_, err = h.audit().ListAuditRecords(ctx, &loomv1.ListAuditRecordsRequest{Parent: project}, h.call("oz"))
	wantCode(t, "another project's admin", err, codes.NotFound)
	_, err = loomv1.NewAuditServiceClient(h.anon).ListAuditRecords(ctx, &loomv1.ListAuditRecordsRequest{Parent: project})
	wantCode(t, "anonymous", err, codes.Unauthenticated)
	_, err = h.audit().ListAuditRecords(ctx, &loomv1.ListAuditRecordsRequest{Parent: "projects/-"}, h.call("pat"))
	wantCode(t, "a project admin for every project", err, codes.PermissionDenied)
	all := waitAudit(t, ctx, h, "root", "projects/-", record("users/oz", "/loom.v1.AuditService/ListAuditRecords", "denied", "NotFound"))
	if len(all) < len(recs) {
		t.Errorf("projects/- has %d records, fewer than default's %d", len(all), len(recs))
	}

	// Filter and paging: bob's records, one page at a time, are the
	// unpaged list's, in the same order.
	bobs := auditRows(t, ctx, h, "root", "projects/-", "users/bob", 0)
	paged := auditRows(t, ctx, h, "root", "projects/-", "users/bob", 1)
	if len(bobs) < 3 || len(paged) != len(bobs) {
		t.Fatalf("bob's records: %d unpaged, %d paged", len(bobs), len(paged))
	}
	for i := range bobs {
		if bobs[i].GetPrincipal() != "users/bob" || paged[i].GetId() != bobs[i].GetId() {
			t.Errorf("record %d: %v paged, %v unpaged", i, paged[i], bobs[i])
		}
	}
	_, err = h.audit().ListAuditRecords(ctx, &loomv1.ListAuditRecordsRequest{Parent: project, PageToken: "bogus"}, h.call("pat"))
	wantCode(t, "a made-up token", err, codes.InvalidArgument, "page_token")

	// REST reads the same trail, with the same checks.
	if code, body := restAs(t, ctx, h, "pat", "/v1/projects/default/auditRecords?principal=users/bob&page_size=1"); code != 200 ||
		!strings.Contains(body, `"principal":"users/bob"`) || !strings.Contains(body, `"next_page_token"`) {
		t.Errorf("REST as ana: %d %s", code, body)
	}
	if code, body := restAs(t, ctx, h, "bob", "/v1/projects/default/auditRecords"); code != 403 {
		t.Errorf("REST as bob: %d %s, want 403", code, body)
	}

	// The trail survives a restart, and records go on.
	h.restart(t)
	after := auditRows(t, ctx, h, "root", "projects/-", "", 0)
	for _, r := range all {
		if !slices.ContainsFunc(after, func(a *loomv1.AuditRecord) bool { return a.GetId() == r.GetId() }) {
			t.Errorf("record lost in the restart: %v", r)
		}
	}
	if _, err := h.jobs().CancelJob(ctx, &loomv1.CancelJobRequest{Name: job.GetName(), User: "pat"}, h.call("pat")); err != nil && !isCode(err, codes.NotFound, codes.FailedPrecondition) {
		t.Fatal(err)
	}
	waitAudit(t, ctx, h, "pat", project, func(r *loomv1.AuditRecord) bool {
		return r.GetPrincipal() == "users/pat" && r.GetMethod() == "/loom.v1.JobService/CancelJob"
	})
}

// TestAuditRefusalsKeepOutOfAProjectsRecords: a flood of refused calls
// naming a project cannot push that project's records out of its capped
// trail. A stranger's (no role there) and an anonymous caller's refusals
// go to the cluster's trail ("-", cluster administrators'), naming what
// they probed; a member's go to the project's refusals, capped on their
// own.
func TestAuditRefusalsKeepOutOfAProjectsRecords(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.Limits.AuditMaxRecords = 20 })
	ctx := testkit.Context(t, 3*wait)
	req := validJob()
	req.Job.User = "ana"
	if _, err := h.jobs().SubmitJob(ctx, req, h.call("ana")); err != nil {
		t.Fatal(err)
	}
	submitted := record("users/ana", "/loom.v1.JobService/SubmitJob", "allowed", "OK")
	waitAudit(t, ctx, h, "pat", project, submitted)
	anon := loomv1.NewClusterServiceClient(h.anon)
	for i := range 30 {
		_, err := h.clusters().GetCluster(ctx, &loomv1.GetClusterRequest{Name: fmt.Sprintf("%s/clusters/x%d", project, i)}, h.call("nora"))
		wantCode(t, "nora reads default", err, codes.NotFound)
		_, err = anon.GetCluster(ctx, &loomv1.GetClusterRequest{Name: fmt.Sprintf("%s/clusters/y%d", project, i)})
		wantCode(t, "anonymous reads default", err, codes.Unauthenticated)
		_, err = h.clusters().DeleteCluster(ctx, &loomv1.DeleteClusterRequest{Name: fmt.Sprintf("%s/clusters/z%d", project, i)}, h.call("vic"))
		wantCode(t, "the viewer deletes a cluster", err, codes.PermissionDenied)
		_, err = h.clusters().GetCluster(ctx, &loomv1.GetClusterRequest{Name: fmt.Sprintf("projects/made-up-%d/clusters/c", i)}, h.call("nora"))
		wantCode(t, "nora reads a made-up project", err, codes.NotFound)
	}
	last := func(res string) func(*loomv1.AuditRecord) bool {
		return func(r *loomv1.AuditRecord) bool { return r.GetResource() == res }
	}
	cluster := waitAudit(t, ctx, h, "root", "projects/-", last(project+"/clusters/y29"))
	waitAudit(t, ctx, h, "root", "projects/-", last(project+"/clusters/x29"))
	waitAudit(t, ctx, h, "root", "projects/-", last("projects/made-up-29/clusters/c"))
	recs := waitAudit(t, ctx, h, "pat", project, last(project+"/clusters/z29"))
	if !slices.ContainsFunc(recs, submitted) {
		t.Errorf("ana's SubmitJob was pushed out of default's trail (cap 20) by refusals: %d records left", len(recs))
	}
	vics := 0
	for _, r := range recs {
		switch r.GetPrincipal() {
		case "users/nora", "anonymous":
			t.Errorf("a stranger's refusal in default's trail: %v", r)
		case "users/vic":
			vics++
		}
	}
	if vics != 20 {
		t.Errorf("default's trail holds %d of the viewer's 30 refusals, want the newest 20 (refusals are capped on their own)", vics)
	}
	for _, r := range cluster {
		if r.GetPrincipal() == "users/nora" && r.GetProject() != "-" {
			t.Errorf("a stranger's refusal filed under project %q: %v", r.GetProject(), r)
		}
	}
	if n, err := h.redis.SCard(ctx, "gateway:"+adapters.KeyAuditProjects).Result(); err != nil || n > 4 {
		trails, _ := h.redis.SMembers(ctx, "gateway:"+adapters.KeyAuditProjects).Result()
		t.Errorf("audit trails %v (%v): refusals naming made-up projects made trails", trails, err)
	}
}

func isCode(err error, cs ...codes.Code) bool { return slices.Contains(cs, status.Code(err)) }

// restAs GETs path from the REST API with who's credential.
func restAs(t *testing.T, ctx context.Context, h *harness, who, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.restBase+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+h.cred(who))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestRESTCallsCountAsTheirClient: a REST call reaches the gateway's gRPC
// port over loopback, yet its refusal is recorded (and rate-limited) as
// coming from its HTTP client's address, not 127.0.0.1; a header of the
// caller's naming another address is not believed.
func TestRESTCallsCountAsTheirClient(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, 2*wait)
	from := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}
	client := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{LocalAddr: from}).DialContext}}
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, h.restBase+"/v1/"+project+"/clusters/c8", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Grpc-Metadata-X-Loom-Rest-Client", "10.9.9.9")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("DELETE from %s: %v", from.IP, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("anonymous DELETE: HTTP %d, want 401", resp.StatusCode)
	}
	// An anonymous refusal is the cluster's trail's (cluster administrators').
	recs := waitAudit(t, ctx, h, "root", "projects/-", record("anonymous", "/loom.v1.ClusterService/DeleteCluster", "denied", "Unauthenticated"))
	for _, r := range recs {
		if r.GetMethod() == "/loom.v1.ClusterService/DeleteCluster" && !strings.HasPrefix(r.GetReason(), "from 127.0.0.2: ") {
			t.Errorf("the anonymous REST refusal's reason %q; want it from the HTTP client 127.0.0.2", r.GetReason())
		}
	}
}

// TestAuditTellsHiddenDenialsFromNotFound: the NotFound the gateway gives
// in place of a refusal (a viewer reading another user's job with
// PrivateData; another project's job) is audited denied, a job that is not
// there rejected, and the caller gets the same answer, byte for byte, for
// both.
func TestAuditTellsHiddenDenialsFromNotFound(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.PrivateData = "jobs" })
	ctx := testkit.Context(t, 3*wait)
	submit := func() *loomv1.Job {
		t.Helper()
		req := validJob()
		req.Job.User = "pat"
		j, err := h.jobs().SubmitJob(ctx, req, h.call("pat"))
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	// answer is what the caller gets for GetJob of name: its status as
	// sent (code, message, details) and its trailers.
	answer := func(who, name string) []byte {
		t.Helper()
		var trailer metadata.MD
		_, err := h.jobs().GetJob(ctx, &loomv1.GetJobRequest{Name: name}, h.call(who), grpc.Trailer(&trailer))
		wantCode(t, who+" reads "+name, err, codes.NotFound)
		b, merr := proto.Marshal(status.Convert(err).Proto())
		if merr != nil {
			t.Fatal(merr)
		}
		return append(b, fmt.Sprint(trailer)...)
	}
	first := submit()
	id, err := strconv.Atoi(first.GetJobId())
	if err != nil {
		t.Fatalf("job id %q: %v", first.GetJobId(), err)
	}
	next := fmt.Sprintf("%s/jobs/%d", project, id+1)
	missing := answer("vic", next) // not there yet: rejected
	if j := submit(); j.GetName() != next {
		t.Fatalf("second job %s, want %s", j.GetName(), next)
	}
	if hidden := answer("vic", next); !bytes.Equal(hidden, missing) { // pat's, hidden from a viewer: denied
		t.Errorf("the viewer tells a hidden job from a missing one: %q, %q", hidden, missing)
	}
	// Another project's admin: the same answer for a job that is there
	// and one that is not, both denied.
	if there, notThere := answer("oz", next), answer("oz", project+"/jobs/999999"); !bytes.Equal(there, notThere) {
		t.Errorf("a stranger tells a job from a missing one: %q, %q", there, notThere)
	}

	vics := func(decision string) func(*loomv1.AuditRecord) bool {
		return func(r *loomv1.AuditRecord) bool {
			return record("users/vic", "/loom.v1.JobService/GetJob", decision, "NotFound")(r) && r.GetResource() == next
		}
	}
	waitAudit(t, ctx, h, "pat", project, vics("rejected"))
	recs := waitAudit(t, ctx, h, "pat", project, vics("denied"))
	if n := len(slices.DeleteFunc(slices.Clone(recs), func(r *loomv1.AuditRecord) bool { return !vics("rejected")(r) && !vics("denied")(r) })); n != 2 {
		t.Errorf("%d records of vic's reads of %s, want one rejected and one denied: %v", n, next, recs)
	}
	all := waitAudit(t, ctx, h, "root", "projects/-", func(r *loomv1.AuditRecord) bool {
		return record("users/oz", "/loom.v1.JobService/GetJob", "denied", "NotFound")(r) && r.GetResource() == project+"/jobs/999999"
	})
	for _, r := range all {
		if r.GetPrincipal() == "users/oz" && r.GetDecision() != "denied" {
			t.Errorf("a stranger's refusal audited %s: %v", r.GetDecision(), r)
		}
	}
}

// TestAuditRecordsReadsRefusedForWhatTheyAsk: a read answered
// FailedPrecondition (the Slurm files of a cluster that has none) is in
// the project's trail of refused calls, rejected, as a read refused
// InvalidArgument is; before, only some codes of a read were recorded and
// this refusal left no trace.
func TestAuditRecordsReadsRefusedForWhatTheyAsk(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, 3*wait)
	broken := project + "/clusters/broken"
	h.w.setCluster(&loomv1.Cluster{Name: broken, Status: &loomv1.ClusterStatus{State: loomv1.Cluster_ERROR}})
	_, err := h.clusters().GetSlurmConfig(ctx, &loomv1.GetSlurmConfigRequest{Name: broken}, h.call("vic"))
	wantCode(t, "slurm files of a cluster in ERROR", err, codes.FailedPrecondition)
	waitAudit(t, ctx, h, "pat", project, func(r *loomv1.AuditRecord) bool {
		return record("users/vic", "/loom.v1.ClusterService/GetSlurmConfig", "rejected", "FailedPrecondition")(r) && r.GetResource() == broken
	})
}

// wireAnswer is what a caller got for a refused call: its status as sent
// (code, message, details) and its trailers.
func wireAnswer(t *testing.T, what string, err error, trailer metadata.MD) []byte {
	t.Helper()
	wantCode(t, what, err, codes.NotFound)
	b, merr := proto.Marshal(status.Convert(err).Proto())
	if merr != nil {
		t.Fatal(merr)
	}
	return append(b, fmt.Sprint(trailer)...)
}

// TestAuditHiddenNotFoundsBeyondJobs: the NotFound answered in place of a
// refusal outside the jobs (a CustomJob PrivateData hides, another owner's
// API key named under the caller, another user's OIDC binding) is audited
// denied, and the caller's answer is the one a resource that is not there
// gets, byte for byte.
func TestAuditHiddenNotFoundsBeyondJobs(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.PrivateData = "jobs" })
	ctx := testkit.Context(t, 3*wait)

	// A CustomJob of ana's: vic's read before it was there, and after.
	cj := location + "/customJobs/77"
	getCJ := func() []byte {
		t.Helper()
		var tr metadata.MD
		_, err := h.trainingAs(t, "vic").GetCustomJob(ctx, &trainingv1.GetCustomJobRequest{Name: cj}, grpc.Trailer(&tr))
		return wireAnswer(t, "vic reads "+cj, err, tr)
	}
	missing := getCJ()
	j := customJobSpec(t)
	j.Name, j.User, j.State = cj, "ana", trainingv1.JobState_JOB_STATE_RUNNING
	h.w.setTraining(j)
	if hidden := getCJ(); !bytes.Equal(hidden, missing) {
		t.Errorf("vic tells ana's CustomJob from a missing one: %q, %q", hidden, missing)
	}

	// One of ana's API keys, named under bob (who may manage his own
	// keys only), and a key id that is no one's.
	keys := loomv1.NewAuthServiceClient(h.conn)
	k, err := keys.CreateApiKey(ctx, &loomv1.CreateApiKeyRequest{Parent: "users/-"}, h.call("ana"))
	if err != nil {
		t.Fatal(err)
	}
	anaID := k.GetName()[strings.LastIndex(k.GetName(), "/")+1:]
	const noID = "00000000000000ff"
	revoke := func(id string) []byte {
		t.Helper()
		var tr metadata.MD
		_, err := keys.RevokeApiKey(ctx, &loomv1.RevokeApiKeyRequest{Name: "users/bob/keys/" + id}, h.call("bob"), grpc.Trailer(&tr))
		// Both ids are 16 hex digits: the answers compare with the id
		// named in them taken out.
		return bytes.ReplaceAll(wireAnswer(t, "bob revokes key "+id, err, tr), []byte(id), []byte("ID"))
	}
	if hidden, missing := revoke(anaID), revoke(noID); !bytes.Equal(hidden, missing) {
		t.Errorf("bob tells ana's key from a missing one: %q, %q", hidden, missing)
	}

	// ana's OIDC binding, asked for by her project's admin.
	_, err = keys.GetOidcBinding(ctx, &loomv1.GetOidcBindingRequest{Name: "users/ana/oidcBinding"}, h.call("pat"))
	wantCode(t, "pat reads ana's OIDC binding", err, codes.NotFound)

	of := func(who, method, resource, decision string) func(*loomv1.AuditRecord) bool {
		return func(r *loomv1.AuditRecord) bool {
			return record(who, method, decision, "NotFound")(r) && r.GetResource() == resource
		}
	}
	getCJMethod := "/loom.training.v1.TrainingService/GetCustomJob"
	waitAudit(t, ctx, h, "pat", project, of("users/vic", getCJMethod, cj, "rejected"))
	recs := waitAudit(t, ctx, h, "pat", project, of("users/vic", getCJMethod, cj, "denied"))
	if n := len(slices.DeleteFunc(slices.Clone(recs), func(r *loomv1.AuditRecord) bool { return r.GetMethod() != getCJMethod })); n != 2 {
		t.Errorf("%d records of vic's reads of %s, want one rejected and one denied: %v", n, cj, recs)
	}
	revokeMethod := "/loom.v1.AuthService/RevokeApiKey"
	waitAudit(t, ctx, h, "root", "projects/-", of("users/bob", revokeMethod, "users/bob/keys/"+anaID, "denied"))
	waitAudit(t, ctx, h, "root", "projects/-", of("users/bob", revokeMethod, "users/bob/keys/"+noID, "rejected"))
	waitAudit(t, ctx, h, "root", "projects/-", of("users/pat", "/loom.v1.AuthService/GetOidcBinding", "users/ana/oidcBinding", "denied"))
}

package gateway

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// rest calls the gateway's REST API and returns the status code and body.
func (h *harness) rest(t *testing.T, ctx context.Context, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, h.restBase+path, strings.NewReader(body))
	if err != nil {
		t.Fatalf("request: %v", err)
	}
	h.authorize(req)
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.http.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return resp.StatusCode, string(b)
}

// jobCommand waits for the job command on loom.job.commands.v1 (key: the
// cluster) that match accepts.
func jobCommand[T any](t *testing.T, h *harness, match func(T) bool) T {
	t.Helper()
	ev := testkit.WaitEvent(t, h.broker, topics.JobCommands, wait, func(e envelope.Event) bool {
		p, ok := e.Payload.(T)
		return ok && e.Key == cluster1 && match(p)
	})
	return ev.Payload.(T)
}

// wantRemediation waits for the first UpdateNodeRemediation on the health
// commands with want's action, and fails unless it is want, sent as by.
func wantRemediation(t *testing.T, h *harness, want *eventsv1.UpdateNodeRemediation, by string) {
	t.Helper()
	ev := testkit.WaitEvent(t, h.broker, topics.HealthCommands, wait, func(e envelope.Event) bool {
		u, ok := e.Payload.(*eventsv1.UpdateNodeRemediation)
		return ok && u.GetAction() == want.GetAction()
	})
	if !proto.Equal(ev.Payload, want) || ev.Principal != by {
		t.Fatalf("health's %v: %v by %q, want %v by %s", want.GetAction(), ev.Payload, ev.Principal, want, by)
	}
}

// TestArraysAndJobCommands checks array submissions (a block of ids, one
// command), A_i names, CancelJob with a signal, UpdateJob and the Slurm
// refusals.
func TestArraysAndJobCommands(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, 2*wait)

	arr := validJob()
	arr.Job.Array = "0-6:2%2" // tasks 0, 2, 4, 6
	a, err := h.jobs().SubmitJob(ctx, arr)
	if err != nil {
		t.Fatalf("array SubmitJob: %v", err)
	}
	next, err := h.jobs().SubmitJob(ctx, validJob())
	if err != nil {
		t.Fatalf("SubmitJob after the array: %v", err)
	}
	if a.GetJobId() != "1" || a.GetArray() != "0-6:2%2" || a.GetPartition() != "all" || next.GetJobId() != "5" {
		t.Fatalf("array job %s (array %q, partition %q), next job %s; want 1 with its spec in partition all, then 5 (ids 1-4 reserved)",
			a.GetJobId(), a.GetArray(), a.GetPartition(), next.GetJobId())
	}
	sub := jobCommand(t, h, func(s *eventsv1.SubmitJob) bool { return s.GetJob().GetJobId() == "1" })
	if sub.GetJob().GetArray() != "0-6:2%2" {
		t.Errorf("SubmitJob command for the array: %v", sub.GetJob())
	}
	submits := 0
	for _, e := range testkit.Events(t, h.broker, topics.JobCommands) {
		if _, ok := e.Payload.(*eventsv1.SubmitJob); ok {
			submits++
		}
	}
	if submits != 2 {
		t.Errorf("%d SubmitJob commands, want 2 (one for the whole array)", submits)
	}

	// Task 4 is the third index: job 1+2. The scheduler has it running.
	task := &loomv1.Job{Name: "projects/default/jobs/3", JobId: "3", Cluster: cluster1, State: loomv1.JobState_RUNNING,
		ArrayJobId: "1", ArrayTaskId: 4, Partition: "all"}
	h.w.setJob(task)
	got, err := h.jobs().GetJob(ctx, &loomv1.GetJobRequest{Name: "projects/default/jobs/1_4"})
	if err != nil || got.GetName() != task.GetName() || got.GetArrayTaskId() != 4 {
		t.Fatalf("GetJob 1_4: %v %v, want job 3", got, err)
	}
	_, err = h.jobs().GetJob(ctx, &loomv1.GetJobRequest{Name: "projects/default/jobs/1_5"})
	wantCode(t, "GetJob of a task the array does not have", err, codes.NotFound, "has no task 5")
	_, err = h.jobs().GetJob(ctx, &loomv1.GetJobRequest{Name: "projects/default/jobs/5_0"})
	wantCode(t, "GetJob of a task of a job that is no array", err, codes.NotFound, "not an array")

	// CancelJob with a signal, by task name.
	if j, err := h.jobs().CancelJob(ctx, &loomv1.CancelJobRequest{Name: "projects/default/jobs/1_4", Signal: "sigusr1", Full: true}); err != nil || j.GetName() != task.GetName() {
		t.Fatalf("signal task 1_4: %v %v", j, err)
	}
	jobCommand(t, h, func(c *eventsv1.CancelJob) bool { // whom it reaches (scancel -f) goes with it
		return c.GetJob() == task.GetName() && c.GetSignal() == "USR1" && c.GetCluster() == cluster1 && c.GetFull() && !c.GetBatch()
	})
	// The first task's own record name is the array's: a command for it
	// names the task, or the scheduler would act on every task.
	if _, err := h.jobs().CancelJob(ctx, &loomv1.CancelJobRequest{Name: "projects/default/jobs/1_0"}); err != nil {
		t.Fatalf("cancel task 1_0: %v", err)
	}
	jobCommand(t, h, func(c *eventsv1.CancelJob) bool {
		return c.GetJob() == "projects/default/jobs/1_0" && c.GetSignal() == ""
	})
	_, err = h.jobs().CancelJob(ctx, &loomv1.CancelJobRequest{Name: task.GetName(), Signal: "SIGFOO"})
	wantCode(t, "bad signal", err, codes.InvalidArgument, "signal")
	_, err = h.jobs().CancelJob(ctx, &loomv1.CancelJobRequest{Name: next.GetName(), Signal: "TERM"})
	wantCode(t, "signal to a pending job", err, codes.FailedPrecondition, "Job is pending execution")
	done := &loomv1.Job{Name: "projects/default/jobs/2", JobId: "2", Cluster: cluster1, State: loomv1.JobState_COMPLETED, ArrayJobId: "1"}
	h.w.setJob(done)
	_, err = h.jobs().CancelJob(ctx, &loomv1.CancelJobRequest{Name: "projects/default/jobs/1_2"})
	wantCode(t, "cancel a finished task", err, codes.FailedPrecondition, "Job/step already completing or completed")
	// The whole array: one command naming the array; the scheduler acts on each task.
	if _, err := h.jobs().CancelJob(ctx, &loomv1.CancelJobRequest{Name: a.GetName()}); err != nil {
		t.Fatalf("cancel the whole array: %v", err)
	}
	jobCommand(t, h, func(c *eventsv1.CancelJob) bool { return c.GetJob() == a.GetName() && c.GetSignal() == "" })

	// UpdateJob.
	if j, err := h.jobs().UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: next.GetName(), Action: "HOLD"}); err != nil || j.GetName() != next.GetName() {
		t.Fatalf("hold: %v %v", j, err)
	}
	jobCommand(t, h, func(u *eventsv1.UpdateJob) bool { return u.GetJob() == next.GetName() && u.GetAction() == "hold" })
	if _, err := h.jobs().UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: "projects/default/jobs/1_4", Action: "update", TimeLimitSeconds: 600}); err != nil {
		t.Fatalf("update task 1_4: %v", err)
	}
	jobCommand(t, h, func(u *eventsv1.UpdateJob) bool {
		return u.GetJob() == task.GetName() && u.GetAction() == "update" && u.GetTimeLimitSeconds() == 600
	})
	for _, tc := range []struct {
		what string
		req  *loomv1.UpdateJobRequest
		code codes.Code
		text string
	}{
		{"unknown action", &loomv1.UpdateJobRequest{Name: next.GetName(), Action: "suspend"}, codes.InvalidArgument, "action"},
		{"update without values", &loomv1.UpdateJobRequest{Name: next.GetName(), Action: "update"}, codes.InvalidArgument, "action"},
		{"unknown partition", &loomv1.UpdateJobRequest{Name: next.GetName(), Action: "update", Partition: "gpu"}, codes.InvalidArgument,
			`partition: no partition "gpu" in cluster c1 (partitions: all; Slurm: Invalid partition name specified)`},
		{"unknown job", &loomv1.UpdateJobRequest{Name: "projects/default/jobs/99", Action: "hold"}, codes.NotFound, "99"},
		{"bad name", &loomv1.UpdateJobRequest{Name: "jobs/1", Action: "hold"}, codes.InvalidArgument, "name"},
		{"requeue a pending job", &loomv1.UpdateJobRequest{Name: next.GetName(), Action: "requeue"}, codes.FailedPrecondition, "Job is pending execution"},
		{"release a finished job", &loomv1.UpdateJobRequest{Name: done.GetName(), Action: "release"}, codes.FailedPrecondition, "Job has already finished"},
	} {
		_, err := h.jobs().UpdateJob(ctx, tc.req)
		wantCode(t, tc.what, err, tc.code, tc.text)
	}

	// Submit validation of the Slurm options, with the field in the message.
	for _, tc := range []struct {
		what string
		mut  func(*loomv1.Job)
		text string
	}{
		{"partition", func(j *loomv1.Job) { j.Partition = "gpu" }, `job.partition: no partition "gpu" in cluster c1 (partitions: all; Slurm: Invalid partition name specified)`},
		{"array", func(j *loomv1.Job) { j.Array = "1-x" }, "job.array"},
		{"dependency", func(j *loomv1.Job) { j.Dependency = "afterok" }, "job.dependency"},
		{"time limit", func(j *loomv1.Job) { j.TimeLimitSeconds = -1 }, "job.time_limit_seconds"},
	} {
		r := validJob()
		tc.mut(r.Job)
		_, err := h.jobs().SubmitJob(ctx, r)
		wantCode(t, "submit with a bad "+tc.what, err, codes.InvalidArgument, tc.text)
	}
	if j, err := h.jobs().SubmitJob(ctx, validJob()); err != nil || j.GetJobId() != "6" {
		t.Errorf("submit after the rejected ones: %v %v, want job 6 (rejected calls take no ids)", j, err)
	}
}

// TestListJobsFilters checks that the filters reach the scheduler and that
// accepted jobs are added only when they pass them and the scheduler does
// not know them.
func TestListJobsFilters(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, wait)
	for range 3 {
		r := validJob()
		r.Job.User = "ana"
		if _, err := h.jobs().SubmitJob(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	// The scheduler knows job 1 (finished) and 2 (running), not 3 yet.
	h.w.setJob(&loomv1.Job{Name: "projects/default/jobs/1", JobId: "1", Cluster: cluster1, User: "ana", State: loomv1.JobState_COMPLETED})
	h.w.setJob(&loomv1.Job{Name: "projects/default/jobs/2", JobId: "2", Cluster: cluster1, User: "ana", State: loomv1.JobState_RUNNING})

	// The submissions' quota checks asked the scheduler for counts: what
	// is checked below is the list's own request.
	h.w.mu.Lock()
	h.w.listRequests = nil
	h.w.mu.Unlock()
	req := &loomv1.ListJobsRequest{Parent: project, Cluster: "c1", Users: []string{"ana"}, ActiveOnly: true,
		States: []loomv1.JobState{loomv1.JobState_PENDING, loomv1.JobState_RUNNING}, Names: nil, Partitions: []string{"all"}}
	list, err := h.jobs().ListJobs(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, j := range list.GetJobs() {
		got = append(got, j.GetJobId()+":"+j.GetState().String())
	}
	// Job 1 passes as accepted (PENDING) but the scheduler has it finished.
	if want := []string{"2:RUNNING", "3:PENDING"}; !slices.Equal(got, want) {
		t.Errorf("active jobs of ana: %v, want %v", got, want)
	}
	h.w.mu.Lock()
	first := h.w.listRequests[0]
	h.w.mu.Unlock()
	if first.GetCluster() != cluster1 || !slices.Equal(first.GetUsers(), []string{"ana"}) || !first.GetActiveOnly() ||
		len(first.GetStates()) != 2 || !slices.Equal(first.GetPartitions(), []string{"all"}) {
		t.Errorf("request to the scheduler %v, want the filters (and the full cluster name)", first)
	}
	list, err = h.jobs().ListJobs(ctx, &loomv1.ListJobsRequest{Parent: project, Users: []string{"bob"}})
	if err != nil || len(list.GetJobs()) != 0 {
		t.Errorf("jobs of bob: %v %v, want none", list, err)
	}
	_, err = h.jobs().ListJobs(ctx, &loomv1.ListJobsRequest{Parent: project, JobIds: []string{"1_x"}})
	wantCode(t, "bad job id filter", err, codes.InvalidArgument, "job_ids[0]")
}

// TestSlurmService checks the partition and node reads (proxied to the
// scheduler) and UpdateSlurmNode, over gRPC and REST.
func TestSlurmService(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, wait)
	h.w.mu.Lock()
	h.w.partitions = []*loomv1.Partition{{Name: "all", Cluster: cluster1, Default: true, State: "up", MaxTime: "UNLIMITED", Nodes: []string{"gpu-0001"}}}
	h.w.slurmNodes = []*loomv1.SlurmNode{{Hostname: "gpu-0001", Cluster: cluster1, State: loomv1.SlurmNode_IDLE, Gpus: 8}}
	h.w.mu.Unlock()

	parts, err := h.slurm().ListPartitions(ctx, &loomv1.ListPartitionsRequest{Cluster: cluster1})
	if err != nil || len(parts.GetPartitions()) != 1 || parts.GetPartitions()[0].GetName() != "all" {
		t.Fatalf("ListPartitions: %v %v", parts, err)
	}
	// sinfo of a cluster the scheduler does not know says so: NotFound
	// naming it, not an empty table (the CLI's fake gateway answers so too).
	_, err = h.slurm().ListPartitions(ctx, &loomv1.ListPartitionsRequest{Cluster: "projects/default/clusters/nope"})
	wantCode(t, "ListPartitions of an unknown cluster", err, codes.NotFound, "nope")
	_, err = h.slurm().ListSlurmNodes(ctx, &loomv1.ListSlurmNodesRequest{Cluster: "c1"})
	wantCode(t, "ListSlurmNodes with a bare id", err, codes.InvalidArgument, "cluster")
	_, err = h.slurm().ListSlurmNodes(ctx, &loomv1.ListSlurmNodesRequest{Cluster: "projects/default/clusters/nope"})
	wantCode(t, "ListSlurmNodes of an unknown cluster", err, codes.NotFound, "nope")
	// sshare's rows, from the scheduler; names checked and bounded first.
	if sh, err := h.slurm().ListShares(ctx, &loomv1.ListSharesRequest{Cluster: cluster1}); err != nil || len(sh.GetShares()) != 2 || sh.GetShares()[1].GetUser() != "ana" {
		t.Fatalf("ListShares: %v %v", sh, err)
	}
	_, err = h.slurm().ListShares(ctx, &loomv1.ListSharesRequest{Cluster: "projects/default/clusters/nope"})
	wantCode(t, "ListShares of an unknown cluster", err, codes.NotFound, "nope")
	_, err = h.slurm().ListShares(ctx, &loomv1.ListSharesRequest{Cluster: "projects/default/clusters/" + strings.Repeat("c", 300)})
	wantCode(t, "ListShares of a name past its bound", err, codes.InvalidArgument, "cluster")

	before := time.Now()
	// Who drains is the principal (ops, a cluster administrator); the
	// request's user field is not believed.
	n, err := loomv1.NewSlurmServiceClient(h.as(t, "ops")).UpdateSlurmNode(ctx,
		&loomv1.UpdateSlurmNodeRequest{Cluster: cluster1, Hostname: "gpu-0001", State: "drain", Reason: "bad gpu", User: "root"})
	if err != nil || n.GetHostname() != "gpu-0001" || n.GetState() != loomv1.SlurmNode_IDLE {
		t.Fatalf("drain: %v %v, want the node as the scheduler has it", n, err)
	}
	// Who asked and when go with it: sinfo -R's USER and TIMESTAMP.
	jobCommand(t, h, func(u *eventsv1.UpdateSlurmNode) bool {
		return u.GetHostname() == "gpu-0001" && u.GetState() == "DRAIN" && u.GetReason() == "bad gpu" && u.GetCluster() == cluster1 &&
			u.GetUser() == "ops" && !u.GetTime().AsTime().Before(before.Truncate(time.Second))
	})
	// Health holds the node too, as after loom nodes drain, in the same
	// Apply: loom health nodes and its history show the drain.
	wantRemediation(t, h, &eventsv1.UpdateNodeRemediation{Cluster: cluster1, Hostname: "gpu-0001", Action: loomv1.RemediationAction_ACTION_DRAIN,
		Reason: "bad gpu", User: "ops"}, "users/ops")
	_, err = h.slurm().UpdateSlurmNode(ctx, &loomv1.UpdateSlurmNodeRequest{Cluster: cluster1, Hostname: "gpu-0001", State: "DRAIN"})
	wantCode(t, "drain without a reason", err, codes.InvalidArgument, "reason: You must specify a reason when DOWNING or DRAINING a node")
	_, err = h.slurm().UpdateSlurmNode(ctx, &loomv1.UpdateSlurmNodeRequest{Cluster: cluster1, Hostname: "gpu-0099", State: "RESUME"})
	wantCode(t, "unknown node", err, codes.NotFound, "gpu-0099")

	// REST.
	if code, body := h.rest(t, ctx, "GET", "/v1/projects/default/clusters/c1/partitions", ""); code != http.StatusOK || !strings.Contains(body, `"max_time":"UNLIMITED"`) {
		t.Errorf("GET partitions: HTTP %d %s", code, body)
	}
	if code, body := h.rest(t, ctx, "GET", "/v1/projects/default/clusters/c1/slurmNodes", ""); code != http.StatusOK || !strings.Contains(body, `"hostname":"gpu-0001"`) {
		t.Errorf("GET slurm nodes: HTTP %d %s", code, body)
	}
	code, body := h.rest(t, ctx, "POST", "/v1/projects/default/clusters/c1/slurmNodes/gpu-0001:update", `{"state":"RESUME"}`)
	if code != http.StatusOK || !strings.Contains(body, `"hostname":"gpu-0001"`) {
		t.Errorf("POST node update: HTTP %d %s", code, body)
	}
	jobCommand(t, h, func(u *eventsv1.UpdateSlurmNode) bool { return u.GetState() == "RESUME" })
	// Health holds gpu-0001 no more than the scheduler knows: that RESUME
	// asked health for nothing.
	for _, e := range testkit.Events(t, h.broker, topics.HealthCommands) {
		if u, ok := e.Payload.(*eventsv1.UpdateNodeRemediation); ok && u.GetAction() == loomv1.RemediationAction_ACTION_RESUME {
			t.Fatalf("RESUME of a node health does not hold sent health %v", e.Payload)
		}
	}
	// A RESUME of a node health drained resumes it at health too (in the
	// same Apply), as loom nodes resume does: scontrol's resume puts a node
	// back in service whoever took it out.
	h.w.mu.Lock()
	h.w.nodeHealth = []*loomv1.NodeHealth{{Node: cluster1 + "/nodes/gpu-0001", Hostname: "gpu-0001", Cluster: cluster1,
		State: loomv1.RemediationState_NODE_QUARANTINED}}
	h.w.mu.Unlock()
	if _, err := loomv1.NewSlurmServiceClient(h.as(t, "ops")).UpdateSlurmNode(ctx,
		&loomv1.UpdateSlurmNodeRequest{Cluster: cluster1, Hostname: "gpu-0001", State: "resume"}); err != nil {
		t.Fatal(err)
	}
	wantRemediation(t, h, &eventsv1.UpdateNodeRemediation{Cluster: cluster1, Hostname: "gpu-0001", Action: loomv1.RemediationAction_ACTION_RESUME,
		Reason: "resumed with scontrol", User: "ops"}, "users/ops")
	if code, body = h.rest(t, ctx, "POST", "/v1/projects/default/clusters/c1/slurmNodes/gpu-0001:update", `{"state":"FUTURE"}`); code != http.StatusBadRequest || !strings.Contains(body, "state") {
		t.Errorf("POST bad node state: HTTP %d %s, want 400 naming state", code, body)
	}
	if code, body = h.rest(t, ctx, "POST", "/v1/projects/default/clusters/c1/slurmNodes/gpu-0001:update", `{"state":"DOWN"}`); code != http.StatusBadRequest || !strings.Contains(body, "reason") {
		t.Errorf("POST DOWN without a reason: HTTP %d %s, want 400 naming reason", code, body)
	}

	// UpdateJob over REST, by task name.
	arr := validJob()
	arr.Job.Array = "3-4"
	a, err := h.jobs().SubmitJob(ctx, arr)
	if err != nil {
		t.Fatal(err)
	}
	h.w.setJob(&loomv1.Job{Name: "projects/default/jobs/2", JobId: "2", Cluster: cluster1, State: loomv1.JobState_PENDING, ArrayJobId: a.GetJobId(), ArrayTaskId: 4})
	code, body = h.rest(t, ctx, "POST", "/v1/projects/default/jobs/"+a.GetJobId()+"_4:update", `{"action":"hold"}`)
	if code != http.StatusOK || !strings.Contains(body, `"name":"projects/default/jobs/2"`) {
		t.Errorf("POST job update by task name: HTTP %d %s", code, body)
	}
	jobCommand(t, h, func(u *eventsv1.UpdateJob) bool {
		return u.GetJob() == "projects/default/jobs/2" && u.GetAction() == "hold"
	})
	if code, body = h.rest(t, ctx, "POST", "/v1/projects/default/jobs/2:cancel", `{"signal":"USR1"}`); code != http.StatusBadRequest || !strings.Contains(body, "Job is pending execution") {
		t.Errorf("POST signal to a pending job: HTTP %d %s, want 400 with Slurm's words", code, body)
	}
}

// TestSubmitNodeLists: a --nodelist or --exclude naming a host the cluster
// does not have, or leaving the partition too few nodes, and a
// --dependency on a job never issued, are refused at submission in Slurm's
// words, not left to pend forever.
func TestSubmitNodeLists(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, wait)
	job := func(nodelist, exclude []string) *loomv1.SubmitJobRequest {
		r := validJob()
		r.Job.NodeCount, r.Job.GpusPerNode, r.Job.Nodelist, r.Job.Exclude = 1, 0, nodelist, exclude
		return r
	}
	if _, err := h.jobs().SubmitJob(ctx, job([]string{"gpu-0001"}, []string{"cpu-0001"})); err != nil {
		t.Fatalf("-w gpu-0001 -x cpu-0001: %v", err)
	}
	_, err := h.jobs().SubmitJob(ctx, job([]string{"gpu-0099"}, nil))
	wantCode(t, "-w gpu-0099", err, codes.InvalidArgument, "job.nodelist[0]", `"gpu-0099" is not a node of`, "Invalid node name specified")
	_, err = h.jobs().SubmitJob(ctx, job(nil, []string{"gpu-0001", "nope"}))
	wantCode(t, "-x gpu-0001,nope", err, codes.InvalidArgument, "job.exclude[1]", `"nope" is not a node of`)
	_, err = h.jobs().SubmitJob(ctx, job(nil, []string{"gpu-0001", "cpu-0001"}))
	wantCode(t, "-x every node", err, codes.InvalidArgument, "job.exclude", "leaves 0 of partition all's nodes", "Requested node configuration is not available")

	// A dependency on a job id never issued (a typo) is refused; one on a
	// job that was is taken.
	dep := func(d string) *loomv1.SubmitJobRequest {
		r := job(nil, nil)
		r.Job.Dependency = d
		return r
	}
	_, err = h.jobs().SubmitJob(ctx, dep("afterok:1,afterany:999"))
	wantCode(t, "-d afterany:999", err, codes.InvalidArgument, "job.dependency: job 999 does not exist: the newest job is 1", "Job dependency problem")
	if _, err := h.jobs().SubmitJob(ctx, dep("afterok:1")); err != nil {
		t.Errorf("-d afterok:1 (job 1 was submitted): %v", err)
	}
	// A host that -n1 drops is not looked up, as Slurm's sbatch and srun
	// drop it before its controller looks (measured: -n1 -w
	// node1,nosuchnode ran on node1); the one kept is.
	dropped := job([]string{"gpu-0099", "gpu-0001"}, nil)
	dropped.Job.NodeCount, dropped.Job.Ntasks = 0, 1
	if j, err := h.jobs().SubmitJob(ctx, dropped); err != nil || !slices.Equal(j.GetNodelist(), []string{"gpu-0001"}) {
		t.Fatalf("-n1 -w gpu-0099,gpu-0001: %v, node list %v; want gpu-0001 alone", err, j.GetNodelist())
	}
	dropped.Job.Nodelist = []string{"gpu-0001", "aaa"}
	_, err = h.jobs().SubmitJob(ctx, dropped)
	wantCode(t, "-n1 -w gpu-0001,aaa", err, codes.InvalidArgument, "job.nodelist[1]", `"aaa" is not a node of`, "Invalid node name specified")
}

// TestSignalArrayWithPendingTasks: a signal to an array, or to any of its
// tasks, while two or more of its tasks are still pending is refused by
// the gateway itself, over gRPC and REST alike, as slurmctld 22.05
// answers it ("Job can not be altered now", the pending record named as
// squeue names it), and no task is signalled: no command leaves. A
// cancel is not refused; with one task left waiting a running task takes
// the signal, as in Slurm, and once none waits the array does.
func TestSignalArrayWithPendingTasks(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, 2*wait)

	arr := validJob()
	arr.Job.Array = "0-3%2"
	a, err := h.jobs().SubmitJob(ctx, arr)
	if err != nil || a.GetJobId() != "1" {
		t.Fatalf("array SubmitJob: %v %v, want job 1", a, err)
	}
	// Not yet split by the scheduler: every task waits.
	_, err = h.jobs().CancelJob(ctx, &loomv1.CancelJobRequest{Name: a.GetName(), Signal: "USR1"})
	wantCode(t, "signal to an array not yet split", err, codes.FailedPrecondition,
		"Job can not be altered now, try again later: array 1 has tasks still pending (1_[0-3%2])")

	// Task 0 (job 1) runs, tasks 1-3 (jobs 2-4) wait.
	task := func(id string, i int32, st loomv1.JobState) *loomv1.Job {
		return &loomv1.Job{Name: "projects/default/jobs/" + id, JobId: id, Cluster: cluster1, State: st,
			Array: "0-3%2", ArrayJobId: "1", ArrayTaskId: i, Partition: "all"}
	}
	h.w.setJob(task("1", 0, loomv1.JobState_RUNNING))
	for i, id := range []string{"2", "3", "4"} {
		h.w.setJob(task(id, int32(i+1), loomv1.JobState_PENDING))
	}
	const rec = "(1_[1-3%2])"
	for _, name := range []string{"1", "1_0", "1_2"} {
		_, err := h.jobs().CancelJob(ctx, &loomv1.CancelJobRequest{Name: "projects/default/jobs/" + name, Signal: "USR1", Full: true})
		wantCode(t, "signal to "+name, err, codes.FailedPrecondition, "Job can not be altered now, try again later", rec)
	}
	code, body := h.rest(t, ctx, http.MethodPost, "/v1/projects/default/jobs/1_0:cancel", `{"signal":"USR1"}`)
	if code != http.StatusBadRequest || !strings.Contains(body, rec) {
		t.Errorf("REST signal to the running task 1_0: %d %s, want 400 naming %s", code, body, rec)
	}
	// Two left waiting: still refused, naming them.
	h.w.setJob(task("2", 1, loomv1.JobState_RUNNING))
	_, err = h.jobs().CancelJob(ctx, &loomv1.CancelJobRequest{Name: "projects/default/jobs/1_0", Signal: "USR1"})
	wantCode(t, "signal beside two pending tasks", err, codes.FailedPrecondition, "(1_[2-3%2])")
	// One left waiting: a pending job of its own to Slurm, whose running
	// siblings take a signal (measured: 1-2%1, task 1 alone, exit 0).
	h.w.setJob(task("3", 2, loomv1.JobState_RUNNING))
	if _, err := h.jobs().CancelJob(ctx, &loomv1.CancelJobRequest{Name: "projects/default/jobs/1_0", Signal: "USR1"}); err != nil {
		t.Errorf("signal to 1_0 beside one pending task: %v", err)
	}
	_, err = h.jobs().CancelJob(ctx, &loomv1.CancelJobRequest{Name: "projects/default/jobs/1_3", Signal: "USR1"})
	wantCode(t, "signal to the one pending task", err, codes.FailedPrecondition, "Job is pending execution")

	if _, err := h.jobs().CancelJob(ctx, &loomv1.CancelJobRequest{Name: a.GetName()}); err != nil {
		t.Errorf("cancel the array while a task waits: %v", err)
	}
	// None waits: the signal goes out, for the whole array.
	h.w.setJob(task("4", 3, loomv1.JobState_RUNNING))
	if _, err := h.jobs().CancelJob(ctx, &loomv1.CancelJobRequest{Name: a.GetName(), Signal: "USR1"}); err != nil {
		t.Fatalf("signal to the array, every task running: %v", err)
	}
	jobCommand(t, h, func(c *eventsv1.CancelJob) bool { return c.GetJob() == a.GetName() && c.GetSignal() == "USR1" })
	signals := 0 // 1_0's beside one pending task, and the array's
	for _, e := range testkit.Events(t, h.broker, topics.JobCommands) {
		if c, ok := e.Payload.(*eventsv1.CancelJob); ok && c.GetSignal() != "" {
			signals++
		}
	}
	if signals != 2 {
		t.Errorf("%d signal commands left the gateway, want 2 (the refused ones send none)", signals)
	}
}

package slurmbackend

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/slurmrest"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler/internal/domain/views"
)

var testKey = []byte("0123456789abcdef0123456789abcdef")

// fakeSlurm is slurmrestd as far as the backend uses it: submit, list,
// cancel. It checks every request's token against the key and records
// who made each.
type fakeSlurm struct {
	t  *testing.T
	mu sync.Mutex
	// down answers every request 503 (slurmrestd unreachable); downFor
	// only the requests of that kind ("POST job/submit", "GET job").
	down      bool
	downFor   string
	calls     map[string]int
	next      int64
	jobs      map[int64]map[string]any
	submits   []map[string]any
	submitter []string
	cancels   []string
	// updates are the POST job/{id} made: "user id body".
	updates []string
	// hold keeps each request of a kind waiting, before it is answered,
	// until its channel is closed: slurmrestd hung.
	hold map[string]chan struct{}
}

func (f *fakeSlurm) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	kind := r.Method + " " + strings.TrimPrefix(r.URL.Path, "/slurm/v0.0.38/")
	if r.Method != "POST" {
		kind, _, _ = strings.Cut(kind, "/")
	}
	f.mu.Lock()
	if f.calls == nil {
		f.calls = map[string]int{}
	}
	f.calls[kind]++
	gate := f.hold[kind]
	f.mu.Unlock()
	if gate != nil {
		<-gate // not under f.mu: the other requests are answered meanwhile
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down || f.downFor == kind {
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	user := r.Header.Get("X-SLURM-USER-NAME")
	if sun := tokenUser(f.t, r.Header.Get("X-SLURM-USER-TOKEN")); sun != user {
		f.t.Errorf("%s %s: token for %q sent as user %q", r.Method, r.URL.Path, sun, user)
	}
	path := strings.TrimPrefix(r.URL.Path, "/slurm/v0.0.38/")
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == "POST" && path == "job/submit":
		var body struct {
			Job map[string]any `json:"job"`
		}
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &body); err != nil {
			f.t.Errorf("submit body: %v", err)
		}
		if body.Job["partition"] == "nope" {
			w.WriteHeader(500)
			_, _ = io.WriteString(w, `{"errors":[{"error_number":2009,"error":"Invalid partition name specified"}]}`)
			return
		}
		f.next++
		f.submits, f.submitter = append(f.submits, body.Job), append(f.submitter, user)
		f.jobs[f.next] = map[string]any{"job_id": f.next, "job_state": "PENDING", "state_reason": "None", "comment": body.Job["comment"],
			"user_name": user}
		if body.Job["hold"] == true {
			// As slurmrestd 22.05 answers a held submission.
			_ = json.NewEncoder(w).Encode(map[string]any{"job_id": f.next,
				"errors": []any{map[string]any{"error_code": 2042, "error": "Job is in held state, pending scheduler release"}}})
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"job_id": f.next})
	case r.Method == "POST" && strings.HasPrefix(path, "job/"):
		b, _ := io.ReadAll(r.Body)
		f.updates = append(f.updates, user+" "+strings.TrimPrefix(path, "job/")+" "+string(b))
		_, _ = io.WriteString(w, `{"errors":[]}`)
	case r.Method == "GET" && path == "jobs":
		var list []map[string]any
		for _, j := range f.jobs {
			list = append(list, j)
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"jobs": list})
	case r.Method == "GET" && strings.HasPrefix(path, "job/"):
		w.WriteHeader(500)
		_, _ = io.WriteString(w, `{"errors":[{"error_number":2017,"error":"Invalid job id specified"}]}`)
	case r.Method == "DELETE" && strings.HasPrefix(path, "job/"):
		f.cancels = append(f.cancels, user+" "+strings.TrimPrefix(path, "job/")+" "+r.URL.Query().Get("signal"))
		_, _ = io.WriteString(w, `{}`)
	default:
		f.t.Errorf("unexpected %s %s", r.Method, r.URL)
		http.NotFound(w, r)
	}
}

// holdCalls makes the requests of kind hang until the returned release is
// called (at the latest when the test ends, before the server closes).
func (f *fakeSlurm) holdCalls(t *testing.T, kind string) (release func()) {
	gate := make(chan struct{})
	f.mu.Lock()
	if f.hold == nil {
		f.hold = map[string]chan struct{}{}
	}
	f.hold[kind] = gate
	f.mu.Unlock()
	var once sync.Once
	release = func() {
		once.Do(func() {
			f.mu.Lock()
			delete(f.hold, kind)
			f.mu.Unlock()
			close(gate)
		})
	}
	t.Cleanup(release)
	return release
}

// callCount is how many requests of kind came.
func (f *fakeSlurm) callCount(kind string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[kind]
}

func (f *fakeSlurm) set(id int64, kv map[string]any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, v := range kv {
		f.jobs[id][k] = v
	}
}

// tokenUser checks tok's HS256 signature with testKey and returns its "sun".
func tokenUser(t *testing.T, tok string) string {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Errorf("token %q is not a JWT", tok)
		return ""
	}
	mac := hmac.New(sha256.New, testKey)
	mac.Write([]byte(parts[0] + "." + parts[1]))
	if got := base64.RawURLEncoding.EncodeToString(mac.Sum(nil)); got != parts[2] {
		t.Errorf("token signature does not verify with the key")
	}
	b, _ := base64.RawURLEncoding.DecodeString(parts[1])
	var c struct {
		Sun      string
		Exp, Iat int64
	}
	_ = json.Unmarshal(b, &c)
	if c.Exp <= c.Iat {
		t.Errorf("token claims %s: exp not after iat", b)
	}
	return c.Sun
}

type rig struct {
	fake *fakeSlurm
	st   *store.Store
	cfg  Config
}

func newRig(t *testing.T) *rig {
	f := &fakeSlurm{t: t, next: 100, jobs: map[int64]map[string]any{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	_, rdb := testkit.Redis(t)
	signer, err := NewSigner(testKey, 10*time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &rig{fake: f, st: store.New(rdb, "scheduler:"), cfg: Config{URL: srv.URL, Signer: signer, ReadUser: "root"}}
}

// backend starts a backend over the rig's store, as a restart would.
func (r *rig) backend(t *testing.T) *Backend {
	b, err := New(r.st, r.cfg, time.Now, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(testkit.Context(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	return b
}

func job(id string) *loomv1.Job {
	return &loomv1.Job{Name: "projects/p/jobs/" + id, JobId: id, Cluster: "projects/p/clusters/c", User: "ana",
		DisplayName: "train", Script: "#!/bin/sh\necho hi\n", NodeCount: 2, Ntasks: 4, CpusPerTask: 2, GpusPerNode: 1,
		MemMb: 512, TimeLimitSeconds: 90, Partition: "debug", SubmitDir: "/home/ana", OutputPattern: "out-%j-%N-%%.log",
		Env: map[string]string{"FOO": "bar"}, Account: "acct", Qos: "normal"}
}

func submitEv(id string, j *loomv1.Job) envelope.Event {
	return envelope.Event{ID: id, Type: "SubmitJob", Payload: &eventsv1.SubmitJob{Job: j}}
}

func getJob(t *testing.T, b *Backend, name string) *loomv1.Job {
	t.Helper()
	j, err := b.GetJob(name)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// TestSubmitPollRestart: a job goes to Slurm as its owner with its options
// mapped, Slurm's states come back through the poll (with the nodes and the
// exit code decoded), each change goes out as a JobChanged, and a new
// backend over the same Redis (a restart) has it all.
func TestSubmitPollRestart(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	b := r.backend(t)
	ctx := testkit.Context(t, 30*time.Second)
	if err := b.Handle(ctx, submitEv("e1", job("7"))); err != nil {
		t.Fatal(err)
	}
	if len(r.fake.submits) != 1 || r.fake.submitter[0] != "ana" {
		t.Fatalf("submissions %v by %v: want one, by the owner ana", r.fake.submits, r.fake.submitter)
	}
	got := r.fake.submits[0]
	want := map[string]any{"name": "train", "partition": "debug", "nodes": 2.0, "tasks": 4.0, "cpus_per_task": 2.0,
		"gpus_per_node": "1", "memory_per_node": 512.0, "time_limit": 2.0, "current_working_directory": "/home/ana",
		"standard_output": "/home/ana/out-7-%N-%%.log", "account": "acct", "qos": "normal", "comment": "loom:projects/p/jobs/7"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("submitted %s = %v, want %v", k, got[k], v)
		}
	}
	if env, _ := got["environment"].(map[string]any); env["FOO"] != "bar" || env["LOOM_JOB_ID"] != "7" {
		t.Errorf("submitted environment %v", env)
	}
	if j := getJob(t, b, "projects/p/jobs/7"); j.State != loomv1.JobState_PENDING || j.Placement != "Slurm job 101" ||
		j.OutputPath != "/home/ana/out-7-%N-%%.log" {
		t.Errorf("after submit: %v %q %q", j.State, j.Placement, j.OutputPath)
	}
	// A redelivery changes nothing and submits nothing.
	if err := b.Handle(ctx, submitEv("e1", job("7"))); err != nil || len(r.fake.submits) != 1 {
		t.Fatalf("redelivered SubmitJob: %v, %d submissions", err, len(r.fake.submits))
	}
	outbox := func() int64 {
		n, err := r.st.OutboxLen(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := outbox()
	r.fake.set(101, map[string]any{"job_state": "RUNNING", "nodes": "node[1-2]", "batch_host": "node1", "start_time": 1700000000})
	if err := b.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if j := getJob(t, b, "projects/p/jobs/7"); j.State != loomv1.JobState_RUNNING || strings.Join(j.Nodes, ",") != "node1,node2" ||
		j.StartTime.AsTime().Unix() != 1700000000 {
		t.Errorf("after RUNNING: %v %v %v", j.State, j.Nodes, j.StartTime)
	}
	if n := outbox(); n != before+1 {
		t.Errorf("outbox %d → %d: want one JobChanged for RUNNING", before, n)
	}
	if err := b.Poll(ctx); err != nil || outbox() != before+1 {
		t.Errorf("a poll that sees no change: %v, outbox %d", err, outbox())
	}
	r.fake.set(101, map[string]any{"job_state": "FAILED", "exit_code": 768, "end_time": 1700000100})
	if err := b.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if j := getJob(t, b, "projects/p/jobs/7"); j.State != loomv1.JobState_FAILED || j.ExitCode != 3 || len(j.Runs) != 1 {
		t.Errorf("after FAILED: %v exit %d runs %v", j.State, j.ExitCode, j.Runs)
	}
	b2 := r.backend(t)
	if j := getJob(t, b2, "projects/p/jobs/7"); j.State != loomv1.JobState_FAILED || j.ExitCode != 3 || j.Placement != "Slurm job 101" {
		t.Errorf("after a restart: %v exit %d %q", j.State, j.ExitCode, j.Placement)
	}
	// Past MinJobAge after its end (1700000100, long ago) the record goes,
	// from memory and from Redis.
	if err := b2.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b2.GetJob("projects/p/jobs/7"); err == nil {
		t.Error("an ended job past MinJobAge is still kept")
	}
	if _, err := r.backend(t).GetJob("projects/p/jobs/7"); err == nil {
		t.Error("an ended job past MinJobAge is still stored")
	}
}

// TestUnknownSlurmStateKeepsTheLastOne: a Slurm state Loom has no word
// for leaves the state as it was and says Slurm's word.
func TestUnknownSlurmStateKeepsTheLastOne(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	b := r.backend(t)
	ctx := testkit.Context(t, 30*time.Second)
	if err := b.Handle(ctx, submitEv("e1", job("8"))); err != nil {
		t.Fatal(err)
	}
	r.fake.set(101, map[string]any{"job_state": "RUNNING", "nodes": "node1"})
	_ = b.Poll(ctx)
	r.fake.set(101, map[string]any{"job_state": "SUSPENDED"})
	if err := b.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if j := getJob(t, b, "projects/p/jobs/8"); j.State != loomv1.JobState_RUNNING || j.StateReason != "Slurm state SUSPENDED" {
		t.Errorf("SUSPENDED in Slurm: %v %q", j.State, j.StateReason)
	}
}

// TestSubmissionLostInFlightIsAdopted: a submission whose answer was lost
// (slurmrestd down after Slurm took the job, or a crash before its id was
// written) is found again by its comment, not submitted twice.
func TestSubmissionLostInFlightIsAdopted(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	b := r.backend(t)
	ctx := testkit.Context(t, 30*time.Second)
	r.fake.down = true
	if err := b.Handle(ctx, submitEv("e1", job("9"))); err != nil {
		t.Fatal(err)
	}
	if j := getJob(t, b, "projects/p/jobs/9"); j.State != loomv1.JobState_PENDING || j.Placement != "submitting to Slurm" {
		t.Fatalf("while slurmrestd is down: %v %q", j.State, j.Placement)
	}
	// Slurm had it after all.
	r.fake.jobs[555] = map[string]any{"job_id": 555, "job_state": "RUNNING", "nodes": "node1", "comment": "loom:projects/p/jobs/9",
		"user_name": "ana"}
	r.fake.down = false
	b2 := r.backend(t) // and the scheduler restarted meanwhile
	if err := b2.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if len(r.fake.submits) != 0 {
		t.Errorf("submitted again: %v", r.fake.submits)
	}
	if j := getJob(t, b2, "projects/p/jobs/9"); j.State != loomv1.JobState_RUNNING || j.Placement != "Slurm job 555" {
		t.Errorf("adopted: %v %q", j.State, j.Placement)
	}
	// Without a job under its comment, the poll submits it.
	r.fake.down = true
	if err := b2.Handle(ctx, submitEv("e2", job("10"))); err != nil {
		t.Fatal(err)
	}
	r.fake.down = false
	if err := b2.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if len(r.fake.submits) != 1 || getJob(t, b2, "projects/p/jobs/10").Placement != "Slurm job 101" {
		t.Errorf("retried submission: %v", r.fake.submits)
	}
}

// TestRefusals: what the backend does not map ends the job FAILED naming
// it (nothing reaches Slurm), Slurm's own refusal too, and commands it
// does not carry out are dead-lettered as FailedPrecondition naming them.
func TestRefusals(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	b := r.backend(t)
	ctx := testkit.Context(t, 30*time.Second)
	for i, c := range []struct {
		change func(j *loomv1.Job)
		want   string
	}{
		{func(j *loomv1.Job) { j.Array = "0-3" }, "job arrays (--array)"},
		{func(j *loomv1.Job) { j.Nodelist = []string{"node1"} }, "node lists (--nodelist)"},
		{func(j *loomv1.Job) { j.Command = []string{"python"}; j.Script = "" }, "a job given as a command"},
		{func(j *loomv1.Job) { j.SubmitDir = "" }, "needs the job's working directory"},
		{func(j *loomv1.Job) { j.Partition = "nope" }, "Slurm refused the job: slurmrest: POST /slurm/v0.0.38/job/submit: HTTP 500: Invalid partition name specified"},
	} {
		j := job(string(rune('a' + i)))
		c.change(j)
		if err := b.Handle(ctx, submitEv(j.JobId, j)); err != nil {
			t.Fatal(err)
		}
		got := getJob(t, b, j.Name)
		if got.State != loomv1.JobState_FAILED || !strings.Contains(got.StateReason, c.want) || got.EndTime == nil {
			t.Errorf("%s: %v %q, want FAILED naming %q", j.JobId, got.State, got.StateReason, c.want)
		}
	}
	if len(r.fake.submits) != 0 {
		t.Errorf("refused jobs reached Slurm: %v", r.fake.submits)
	}
	for _, ev := range []envelope.Event{
		{ID: "u", Type: "UpdateJob", Payload: &eventsv1.UpdateJob{Job: "projects/p/jobs/a", Action: "requeue"}},
		{ID: "u2", Type: "UpdateJob", Payload: &eventsv1.UpdateJob{Job: "projects/p/jobs/a", Action: "update", TimeLimitSeconds: 60}},
		{ID: "u3", Type: "UpdateJob", Payload: &eventsv1.UpdateJob{Job: "projects/p/jobs/a", Action: "hold", Partition: "debug"}},
		{ID: "s", Type: "CreateJobStep", Payload: &eventsv1.CreateJobStep{}},
		{ID: "n", Type: "UpdateSlurmNode", Payload: &eventsv1.UpdateSlurmNode{}},
		{ID: "c", Type: "CancelJob", Payload: &eventsv1.CancelJob{Job: "projects/p/jobs/a", Signal: "USR1", Batch: true}},
	} {
		err := b.Handle(ctx, ev)
		if err == nil || !strings.Contains(err.Error(), "slurm scheduler backend") || errs.Code(err).String() != "FailedPrecondition" {
			t.Errorf("%s: %v, want a FailedPrecondition naming the backend", ev.Type, err)
		}
	}
}

// TestDependencies: a --dependency goes to Slurm over Slurm's ids of the
// jobs it names (delays, singleton and '?' as given); a job waiting for
// one not in Slurm yet is held back, pending on Dependency, and the poll
// submits it once that one has its id; one naming a job the backend does
// not hold, one that ended without reaching Slurm, or what Slurm's
// dependency has and Loom's cannot name here ends FAILED naming it.
func TestDependencies(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	b := r.backend(t)
	ctx := testkit.Context(t, 30*time.Second)
	submit := func(id, dep string, change func(j *loomv1.Job)) *loomv1.Job {
		t.Helper()
		j := job(id)
		j.Dependency = dep
		if change != nil {
			change(j)
		}
		if err := b.Handle(ctx, submitEv("e"+id, j)); err != nil {
			t.Fatal(err)
		}
		return getJob(t, b, j.Name)
	}
	sentDep := func(i int) any {
		r.fake.mu.Lock()
		defer r.fake.mu.Unlock()
		if i >= len(r.fake.submits) {
			t.Fatalf("%d submissions, want a %dth", len(r.fake.submits), i+1)
		}
		return r.fake.submits[i]["dependency"]
	}
	submit("7", "", nil) // Slurm job 101
	if j := submit("8", "after:7+5,singleton", nil); j.Placement != "Slurm job 102" || sentDep(1) != "after:101+5,singleton" {
		t.Errorf("job 8: %q, sent dependency %v; want Slurm job 102 with after:101+5,singleton", j.Placement, sentDep(1))
	}
	// Job 9's submission gets no answer: the job waiting for it is held
	// back, pending on Dependency, not sent without it.
	r.fake.mu.Lock()
	r.fake.downFor = "POST job/submit"
	r.fake.mu.Unlock()
	submit("9", "", nil)
	j := submit("10", "afterok:9?afternotok:7", nil)
	if j.State != loomv1.JobState_PENDING || j.StateReason != "Dependency" || !strings.Contains(j.Placement, "waiting for job 9 to reach Slurm") {
		t.Errorf("job 10 waiting for job 9 not in Slurm: %v %q %q", j.State, j.StateReason, j.Placement)
	}
	r.fake.mu.Lock()
	r.fake.downFor = ""
	r.fake.mu.Unlock()
	for poll := 0; poll < 2; poll++ { // 9 goes, then 10
		if err := b.Poll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	j = getJob(t, b, "projects/p/jobs/10")
	if j.Placement != "Slurm job 104" || sentDep(3) != "afterok:103?afternotok:101" || j.OutputPath == "" {
		t.Errorf("job 10 after job 9 reached Slurm as 103: %q output %q, sent dependency %v", j.Placement, j.OutputPath, sentDep(3))
	}
	// Slurm's reasons show as Slurm's.
	r.fake.set(104, map[string]any{"state_reason": "DependencyNeverSatisfied"})
	if err := b.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if j := getJob(t, b, "projects/p/jobs/10"); j.StateReason != "DependencyNeverSatisfied" {
		t.Errorf("job 10's reason %q, want Slurm's DependencyNeverSatisfied", j.StateReason)
	}
	submit("13", "", func(j *loomv1.Job) { j.Nodelist = []string{"node1"} }) // refused: ends FAILED outside Slurm
	for _, c := range []struct{ id, dep, want string }{
		{"11", "afterok:99", "--dependency names job 99, which the slurm scheduler backend does not hold"},
		{"12", "afterany:7,afterok:13", "--dependency names job 13, which ended FAILED without reaching Slurm"},
		{"14", "aftercorr:7", "--dependency=aftercorr is not supported"},
		{"15", "afterok:7_2", "dependencies on array tasks (--dependency=afterok:7_2)"},
	} {
		if j := submit(c.id, c.dep, nil); j.State != loomv1.JobState_FAILED || !strings.Contains(j.StateReason, c.want) {
			t.Errorf("job %s --dependency=%s: %v %q, want FAILED naming %q", c.id, c.dep, j.State, j.StateReason, c.want)
		}
	}
	if n := r.fake.callCount("POST job/submit"); n != 5 { // 7, 8, 9 (down), 9, 10
		t.Errorf("%d submissions, want 5: the refused jobs reach Slurm", n)
	}
}

// TestHoldRelease: --hold and --begin go to Slurm with the submission;
// scontrol hold, uhold and release are POST job/{id} made as whom Slurm
// takes the hold to be of (an administrator's hold as -slurm-read-user,
// an operator: JobHeldAdmin; uhold and a user's own as the owner), a user
// who neither owns nor administers the job changes nothing, and Slurm's
// hold reasons show as the job's hold.
func TestHoldRelease(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	b := r.backend(t)
	ctx := testkit.Context(t, 30*time.Second)
	j := job("7")
	j.Hold, j.BeginTime = true, timestamppb.New(time.Now().Add(time.Hour))
	if err := b.Handle(ctx, submitEv("e1", j)); err != nil {
		t.Fatal(err)
	}
	if got := getJob(t, b, j.Name); got.Placement != "Slurm job 101" || got.State != loomv1.JobState_PENDING {
		t.Fatalf("held submission: %v %q %q; want it in Slurm as job 101", got.State, got.Placement, got.StateReason)
	}
	sent := r.fake.submits[0]
	if begin, _ := sent["begin_time"].(string); sent["hold"] != true || !strings.HasPrefix(begin, "now+") {
		t.Errorf("submitted hold %v begin_time %v; want true and now+<seconds>", sent["hold"], sent["begin_time"])
	}
	poll := func(reason string) *loomv1.Job {
		t.Helper()
		r.fake.set(101, map[string]any{"state_reason": reason})
		if err := b.Poll(ctx); err != nil {
			t.Fatal(err)
		}
		return getJob(t, b, j.Name)
	}
	if got := poll("JobHeldUser"); !got.Hold || got.StateReason != "JobHeldUser" {
		t.Errorf("Slurm says JobHeldUser: hold %v %q", got.Hold, got.StateReason)
	}
	for _, ev := range []envelope.Event{
		{ID: "u1", Principal: "users/ana", Payload: &eventsv1.UpdateJob{Job: j.Name, Action: "release"}},
		{ID: "u2", Principal: "users/bob", Payload: &eventsv1.UpdateJob{Job: j.Name, Action: "hold", User: "ana"}},
		{ID: "u3", Principal: "users/root", Payload: &eventsv1.UpdateJob{Job: j.Name, Action: "hold", User: "root", Admin: true}},
		{ID: "u4", Principal: "users/root", Payload: &eventsv1.UpdateJob{Job: j.Name, Action: "uhold", User: "root", Admin: true}},
		{ID: "u5", Principal: "users/root", Payload: &eventsv1.UpdateJob{Job: j.Name, Action: "release", User: "root", Admin: true}},
	} {
		if err := b.Handle(ctx, ev); err != nil {
			t.Fatalf("%s: %v", ev.ID, err)
		}
	}
	want := `ana 101 {"hold":false}|root 101 {"hold":true}|ana 101 {"hold":true}|root 101 {"hold":false}`
	if got := strings.Join(r.fake.updates, "|"); got != want {
		t.Errorf("updates sent %q\nwant %q (bob's changes nothing)", got, want)
	}
	if got := poll("BeginTime"); got.Hold || got.StateReason != "BeginTime" {
		t.Errorf("released, pending on its begin time: hold %v %q", got.Hold, got.StateReason)
	}
	// A job not in Slurm yet cannot be held there: refused by name.
	r.fake.mu.Lock()
	r.fake.downFor = "POST job/submit"
	r.fake.mu.Unlock()
	if err := b.Handle(ctx, submitEv("e2", job("8"))); err != nil {
		t.Fatal(err)
	}
	err := b.Handle(ctx, envelope.Event{ID: "u6", Payload: &eventsv1.UpdateJob{Job: "projects/p/jobs/8", Action: "hold"}})
	if err == nil || !strings.Contains(err.Error(), "holding or releasing a job not in Slurm yet") {
		t.Errorf("hold of a job not in Slurm: %v", err)
	}
}

// TestCancel: scancel and scancel --signal go to Slurm as the job's owner;
// a user who neither owns nor administers the job changes nothing.
func TestCancel(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	b := r.backend(t)
	ctx := testkit.Context(t, 30*time.Second)
	if err := b.Handle(ctx, submitEv("e1", job("7"))); err != nil {
		t.Fatal(err)
	}
	for _, ev := range []envelope.Event{
		{ID: "c1", Principal: "users/bob", Payload: &eventsv1.CancelJob{Job: "projects/p/jobs/7", User: "ana"}},
		{ID: "c2", Principal: "users/ana", Payload: &eventsv1.CancelJob{Job: "projects/p/jobs/7", Signal: "USR1"}},
		{ID: "c3", Principal: "users/root", Payload: &eventsv1.CancelJob{Job: "projects/p/jobs/7", User: "root", Admin: true}},
	} {
		if err := b.Handle(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	if got := strings.Join(r.fake.cancels, "|"); got != "ana 101 USR1|ana 101 " {
		t.Errorf("cancels sent %q, want the owner's signal and the admin's cancel, both as ana", got)
	}
}

// TestSigner: tokens verify with the key and name the user, are reused
// until half their life, and a key others may read or a short one is
// refused.
func TestSigner(t *testing.T) {
	t.Parallel()
	now := time.Unix(1700000000, 0)
	s, err := NewSigner(testKey, 10*time.Minute, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	a1, _ := s.Token("ana")
	if tokenUser(t, a1) != "ana" {
		t.Errorf("token %q", a1)
	}
	now = now.Add(4 * time.Minute)
	if a2, _ := s.Token("ana"); a2 != a1 {
		t.Error("a token was not reused within half its life")
	}
	now = now.Add(2 * time.Minute)
	if a3, _ := s.Token("ana"); a3 == a1 {
		t.Error("a token past half its life was reused")
	}
	if _, err := NewSigner([]byte("short"), time.Minute, nil); err == nil || !strings.Contains(err.Error(), "at least 32") {
		t.Errorf("short key: %v", err)
	}
	path := filepath.Join(t.TempDir(), "jwt.key")
	if err := os.WriteFile(path, testKey, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadSigner(path, time.Minute, nil); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("key readable by others: %v", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadSigner(path, time.Minute, nil); err != nil {
		t.Error(err)
	}
}

// TestOwnerRefusals: the backend mints a token for whatever owner a job
// names, so a job of root goes to Slurm only with AllowRootJobs (as a node
// agent's -allow-root-jobs), and an owner that is no account name (a
// header with a newline, "../x") ends FAILED naming job.user rather than
// failing every poll.
func TestOwnerRefusals(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	b := r.backend(t)
	ctx := testkit.Context(t, 30*time.Second)
	for id, c := range map[string]struct{ owner, want string }{
		"r": {"root", "-slurm-allow-root-jobs"},
		"s": {"slurm", "-slurm-refused-owners"}, // Slurm's account reads the JWT key: it could mint root's token
		"n": {"ana\nX-Evil: 1", "job.user"},
		"d": {"../ana", "job.user"},
	} {
		j := job(id)
		j.User = c.owner
		if err := b.Handle(ctx, submitEv(id, j)); err != nil {
			t.Fatal(err)
		}
		if got := getJob(t, b, j.Name); got.State != loomv1.JobState_FAILED || !strings.Contains(got.StateReason, c.want) {
			t.Errorf("owner %q: %v %q, want FAILED naming %s", c.owner, got.State, got.StateReason, c.want)
		}
	}
	r.fake.mu.Lock()
	n := len(r.fake.submits)
	r.fake.mu.Unlock()
	if n != 0 {
		t.Fatalf("refused owners' jobs reached Slurm: %v", r.fake.submitter)
	}
	r.cfg.AllowRootJobs = true
	b2 := r.backend(t)
	if err := b2.Handle(ctx, submitEv("e2", func() *loomv1.Job { j := job("r2"); j.User = "root"; return j }())); err != nil {
		t.Fatal(err)
	}
	r.fake.mu.Lock()
	defer r.fake.mu.Unlock()
	if len(r.fake.submitter) != 1 || r.fake.submitter[0] != "root" {
		t.Errorf("with AllowRootJobs, root's job: submitted by %v, want root", r.fake.submitter)
	}
}

// TestRefusedOwnersList: the refused owners are the operator's list (one
// rule with root's): a listed owner's job ends FAILED naming the flag,
// whether it comes as a command or from a record the poll submits again;
// an owner off the list goes to Slurm; and a list naming no account, or
// root while root is allowed, is refused at start naming the flag.
func TestRefusedOwnersList(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := testkit.Context(t, 30*time.Second)
	as := func(id, owner string) *loomv1.Job { j := job(id); j.User = owner; return j }
	setDown := func(down bool) {
		r.fake.mu.Lock()
		defer r.fake.mu.Unlock()
		r.fake.down = down
	}
	// A record of svc-b stored before svc-b was listed: tried, its
	// submission unanswered.
	r.cfg.RefusedOwners = []string{}
	setDown(true)
	if err := r.backend(t).Handle(ctx, submitEv("e0", as("50", "svc-b"))); err != nil {
		t.Fatal(err)
	}
	setDown(false)
	r.cfg.RefusedOwners = []string{"svc-a", "svc-b"}
	b := r.backend(t)
	for _, ev := range []envelope.Event{submitEv("e1", as("51", "svc-a")), submitEv("e2", as("52", "slurm"))} {
		if err := b.Handle(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ id, owner string }{{"50", "svc-b"}, {"51", "svc-a"}} {
		if j := getJob(t, b, "projects/p/jobs/"+c.id); j.State != loomv1.JobState_FAILED || !strings.Contains(j.StateReason, "-slurm-refused-owners") ||
			!strings.Contains(j.StateReason, "as "+c.owner+":") {
			t.Errorf("%s's job: %v %q, want FAILED naming the owner and -slurm-refused-owners", c.owner, j.State, j.StateReason)
		}
	}
	if j := getJob(t, b, "projects/p/jobs/52"); j.Placement != "Slurm job 101" {
		t.Errorf("with slurm off the list, its job: %v %q, want it in Slurm", j.State, j.Placement)
	}
	r.fake.mu.Lock()
	submitters := strings.Join(r.fake.submitter, ",")
	r.fake.mu.Unlock()
	if submitters != "slurm" {
		t.Errorf("jobs submitted as %q, want slurm's alone", submitters)
	}
	for _, c := range []struct {
		list  []string
		allow bool
		want  string
	}{
		{[]string{"ok", "bad\nname"}, false, "slurm-refused-owners: "},
		{[]string{"root"}, true, "slurm-refused-owners: lists root, which -slurm-allow-root-jobs allows"},
	} {
		cfg := r.cfg
		cfg.RefusedOwners, cfg.AllowRootJobs = c.list, c.allow
		if _, err := New(r.st, cfg, time.Now, slog.New(slog.NewTextHandler(io.Discard, nil))); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New with refused owners %q (allow root %v): %v, want %q", c.list, c.allow, err, c.want)
		}
	}
}

// TestAdoptsOnlyTheOwnersJob: a Slurm job of another user that carries a
// lost submission's comment (any Slurm user may set --comment) is not
// adopted: the job is submitted as its owner, and a cancel before that
// sends no scancel to the other user's job.
func TestAdoptsOnlyTheOwnersJob(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	b := r.backend(t)
	ctx := testkit.Context(t, 30*time.Second)
	setDown := func(down bool) {
		r.fake.mu.Lock()
		defer r.fake.mu.Unlock()
		r.fake.down = down
	}
	setDown(true)
	for _, id := range []string{"11", "12"} {
		if err := b.Handle(ctx, submitEv("e"+id, job(id))); err != nil {
			t.Fatal(err)
		}
	}
	r.fake.mu.Lock()
	r.fake.jobs[666] = map[string]any{"job_id": 666, "job_state": "RUNNING", "user_name": "mallory", "comment": "loom:projects/p/jobs/11"}
	r.fake.jobs[667] = map[string]any{"job_id": 667, "job_state": "RUNNING", "user_name": "mallory", "comment": "loom:projects/p/jobs/12"}
	r.fake.down = false
	r.fake.mu.Unlock()
	// A cancel of job 12 before its submission is retried: cancelled in
	// Loom alone, mallory's job 667 untouched.
	if err := b.Handle(ctx, envelope.Event{ID: "c12", Principal: "users/ana", Payload: &eventsv1.CancelJob{Job: "projects/p/jobs/12"}}); err != nil {
		t.Fatal(err)
	}
	if err := b.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if j := getJob(t, b, "projects/p/jobs/11"); j.Placement != "Slurm job 101" {
		t.Errorf("job 11: placement %q, want its own submission (Slurm job 101), not mallory's 666", j.Placement)
	}
	if j := getJob(t, b, "projects/p/jobs/12"); j.State != loomv1.JobState_CANCELLED {
		t.Errorf("job 12: %v, want CANCELLED in Loom", j.State)
	}
	r.fake.mu.Lock()
	defer r.fake.mu.Unlock()
	if len(r.fake.submitter) != 1 || r.fake.submitter[0] != "ana" || len(r.fake.cancels) != 0 {
		t.Errorf("submissions by %v, cancels %v: want one by ana, none", r.fake.submitter, r.fake.cancels)
	}
}

// TestCancelPrincipalAsBuiltin: a cancel is held to the built-in engine's
// rules: one naming no one is refused (no-principal) unless the gateway
// signed it, a service's own cancel acts only on the jobs of the owner it
// names, and a user's cancel acts as that user whatever on_behalf_of says.
func TestCancelPrincipalAsBuiltin(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	b := r.backend(t)
	ctx := testkit.Context(t, 30*time.Second)
	if err := b.Handle(ctx, submitEv("e1", job("7"))); err != nil {
		t.Fatal(err)
	}
	const name = "projects/p/jobs/7"
	err := b.Handle(ctx, envelope.Event{ID: "c1", Signer: "services/training", Payload: &eventsv1.CancelJob{Job: name}})
	if err == nil || !strings.Contains(err.Error(), "names no user nor on_behalf_of") {
		t.Errorf("a training cancel naming no one: %v, want no-principal", err)
	}
	for _, ev := range []envelope.Event{
		{ID: "c2", Signer: "services/training", Payload: &eventsv1.CancelJob{Job: name, OnBehalfOf: "bob"}},
		{ID: "c3", Signer: "services/gateway", Principal: "users/bob", Payload: &eventsv1.CancelJob{Job: name, User: "bob", OnBehalfOf: "ana"}},
	} {
		if err := b.Handle(ctx, ev); err != nil {
			t.Fatalf("%s: %v", ev.ID, err)
		}
	}
	r.fake.mu.Lock()
	got := strings.Join(r.fake.cancels, "|")
	r.fake.mu.Unlock()
	if got != "" {
		t.Errorf("cancels sent %q: want none (no one, bob's behalf, bob)", got)
	}
	if err := b.Handle(ctx, envelope.Event{ID: "c4", Signer: "services/gateway", Payload: &eventsv1.CancelJob{Job: name}}); err != nil {
		t.Fatal(err)
	}
	r.fake.mu.Lock()
	defer r.fake.mu.Unlock()
	if got := strings.Join(r.fake.cancels, "|"); got != "ana 101 " {
		t.Errorf("the gateway's cancel: sent %q, want ana's cancel of 101", got)
	}
}

// TestPollStopsAtAnUnreachableSlurm: once a call of a poll fails for want
// of slurmrestd, the poll makes no more (each could wait the client's
// whole timeout, all while commands wait): one submission tried, one job
// looked up, and the rest left as they were for the next poll.
func TestPollStopsAtAnUnreachableSlurm(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	b := r.backend(t)
	ctx := testkit.Context(t, 30*time.Second)
	set := func(down bool, downFor string) {
		r.fake.mu.Lock()
		defer r.fake.mu.Unlock()
		r.fake.down, r.fake.downFor, r.fake.calls = down, downFor, map[string]int{}
	}
	calls := func(kind string) int {
		r.fake.mu.Lock()
		defer r.fake.mu.Unlock()
		return r.fake.calls[kind]
	}
	set(true, "")
	for _, id := range []string{"21", "22", "23"} {
		if err := b.Handle(ctx, submitEv("e"+id, job(id))); err != nil {
			t.Fatal(err)
		}
	}
	set(false, "POST job/submit")
	if err := b.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if n := calls("POST job/submit"); n != 1 {
		t.Errorf("a poll with submissions failing: %d submissions tried, want 1", n)
	}
	// Jobs Slurm does not list, looked up one by one: not past the first
	// lookup that fails, and none ends FAILED for it.
	set(false, "")
	if err := b.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	r.fake.mu.Lock()
	clear(r.fake.jobs)
	r.fake.mu.Unlock()
	set(false, "GET job")
	if err := b.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if n := calls("GET job"); n != 1 {
		t.Errorf("a poll with lookups failing: %d lookups, want 1", n)
	}
	for _, id := range []string{"21", "22", "23"} {
		if j := getJob(t, b, "projects/p/jobs/"+id); j.State != loomv1.JobState_PENDING || j.Placement == "" {
			t.Errorf("job %s: %v %q, want PENDING in Slurm still", id, j.State, j.Placement)
		}
	}
}

// TestPollBoundsSlurmText: what the poll copies from slurmrestd's reply
// into the job (the reason, a node list it cannot expand, the batch
// host) is bounded, however long the reply makes it.
func TestPollBoundsSlurmText(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	b := r.backend(t)
	ctx := testkit.Context(t, 30*time.Second)
	if err := b.Handle(ctx, submitEv("e1", job("31"))); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("é", 100<<10)
	r.fake.set(101, map[string]any{"job_state": "RUNNING", "state_reason": long, "nodes": "bad node " + long, "batch_host": long})
	if err := b.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	j := getJob(t, b, "projects/p/jobs/31")
	for what, v := range map[string]string{"state_reason": j.StateReason, "nodes": strings.Join(j.Nodes, ","), "batch_host": j.BatchHost} {
		if len(v) > 2*maxSlurmText || !utf8.ValidString(v) || v == "" {
			t.Errorf("%s: %d bytes (valid UTF-8 %v), want 1 to %d", what, len(v), utf8.ValidString(v), 2*maxSlurmText)
		}
	}
}

// TestRefusedOnlyForFinalAnswers: Slurm's "try again" numbers (sbatch
// retries on them) and slurmctld out of reach leave a submission to the
// next poll; any other number is Slurm's answer about the job, which
// ends it FAILED.
func TestRefusedOnlyForFinalAnswers(t *testing.T) {
	t.Parallel()
	slurmErr := func(nums ...int) error {
		e := &slurmrest.Error{Endpoint: "POST /slurm/v0.0.38/job/submit", Status: 500}
		for _, n := range nums {
			e.Slurm = append(e.Slurm, slurmrest.SlurmError{Number: n})
		}
		return e
	}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{slurmErr(2000), true},        // ESLURM_INVALID_PARTITION_NAME
		{slurmErr(2007), false},       // ESLURM_ERROR_ON_DESC_TO_RECORD_COPY: try again
		{slurmErr(11), false},         // EAGAIN
		{slurmErr(1800), false},       // slurmctld out of reach
		{slurmErr(2027), false},       // standby
		{slurmErr(-1), false},         // a bad token, an outage
		{slurmErr(2000, 2007), false}, // any "try again" wins
		{errors.New("dial tcp: refused"), false},
	} {
		if got := refused(c.err); got != c.want {
			t.Errorf("refused(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestHungSlurmBlocksNoOne: while a submission waits on a slurmrestd that
// does not answer (up to the client's 30 s), reads, the commands about
// other jobs and the poll go on: no call to slurmrestd is made under the
// lock they wait for. The job is recorded before it is sent, the poll
// does not submit it a second time meanwhile, and a cancel of that job
// waits for the submission's answer and then cancels it in Slurm (rather
// than cancelling it in Loom alone while Slurm starts it).
func TestHungSlurmBlocksNoOne(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	b := r.backend(t)
	ctx := testkit.Context(t, 60*time.Second)
	if err := b.Handle(ctx, submitEv("e1", job("41"))); err != nil { // Slurm job 101
		t.Fatal(err)
	}
	release := r.fake.holdCalls(t, "POST job/submit")
	submitted := make(chan error, 1)
	go func() { submitted <- b.Handle(ctx, submitEv("e2", job("42"))) }()
	testkit.WaitFor(t, 10*time.Second, "job 42's submission to reach slurmrestd", func() (bool, error) {
		return r.fake.callCount("POST job/submit") == 2, nil
	})
	// Each of these must finish well within the client's 30 s.
	const bound = 5 * time.Second
	within := func(what string, fn func() error) {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- fn() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		case <-time.After(bound):
			t.Fatalf("%s: not done after %v while a submission hangs in slurmrestd", what, bound)
		}
	}
	within("GetJob", func() error {
		if j, err := b.GetJob("projects/p/jobs/42"); err != nil || j.Placement != "submitting to Slurm" {
			return fmt.Errorf("job 42 while its submission hangs: %v %q, want it recorded as submitting", err, j.GetPlacement())
		}
		return nil
	})
	within("ListJobs", func() error {
		if js, _ := b.ListJobs(views.JobFilter{Project: "projects/p"}, "", 10); len(js) != 2 {
			return fmt.Errorf("%d jobs, want 2", len(js))
		}
		return nil
	})
	within("a cancel of another job", func() error {
		return b.Handle(ctx, envelope.Event{ID: "c41", Principal: "users/ana", Payload: &eventsv1.CancelJob{Job: "projects/p/jobs/41"}})
	})
	within("a submission refused without a call", func() error {
		j := job("43")
		j.Dependency = "afterok:1"
		return b.Handle(ctx, submitEv("e3", j))
	})
	within("a poll", func() error { return b.Poll(ctx) })
	if n := r.fake.callCount("POST job/submit"); n != 2 {
		t.Errorf("%d submissions, want 2: the poll submitted job 42 again while its submission was under way", n)
	}
	cancelled := make(chan error, 1)
	go func() {
		cancelled <- b.Handle(ctx, envelope.Event{ID: "c42", Principal: "users/ana", Payload: &eventsv1.CancelJob{Job: "projects/p/jobs/42"}})
	}()
	testkit.WaitFor(t, 10*time.Second, "the cancel of job 42 to wait for its submission", func() (bool, error) {
		return b.parked.Load() == 1, nil
	})
	release()
	for what, ch := range map[string]chan error{"submission": submitted, "cancel": cancelled} {
		select {
		case err := <-ch:
			if err != nil {
				t.Fatalf("job 42's %s: %v", what, err)
			}
		case <-ctx.Done():
			t.Fatalf("job 42's %s never ended", what)
		}
	}
	if j := getJob(t, b, "projects/p/jobs/42"); j.Placement != "Slurm job 102" {
		t.Errorf("job 42: placement %q, want Slurm job 102", j.Placement)
	}
	r.fake.mu.Lock()
	defer r.fake.mu.Unlock()
	if got := strings.Join(r.fake.cancels, "|"); got != "ana 101 |ana 102 " {
		t.Errorf("cancels sent %q, want job 41's (101) and job 42's once submitted (102)", got)
	}
}

// TestPanickedSubmissionReleasesItsClaim: a submission whose call panics
// (the bus recovers a handler's panic and retries the command, which
// then finds the job recorded) must not leave the job claimed: a claim
// never released made every later poll skip the job, which stayed
// "submitting to Slurm" for ever, and every cancel of it wait until its
// handler's deadline, retried until dead-lettered.
func TestPanickedSubmissionReleasesItsClaim(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	var panicking atomic.Bool
	signer, err := NewSigner(testKey, 10*time.Minute, func() time.Time {
		if panicking.Load() {
			panic("signer broke")
		}
		return time.Now()
	})
	if err != nil {
		t.Fatal(err)
	}
	r.cfg.Signer = signer
	b := r.backend(t)
	ctx := testkit.Context(t, 30*time.Second)
	panicking.Store(true)
	func() {
		defer func() {
			if p := recover(); p == nil {
				t.Fatal("the submission did not panic; the test's signer no longer reaches it")
			}
		}()
		_ = b.Handle(ctx, submitEv("e1", job("42")))
	}()
	panicking.Store(false)
	if err := b.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if j := getJob(t, b, "projects/p/jobs/42"); !strings.HasPrefix(j.Placement, "Slurm job ") {
		t.Fatalf("job 42 after a poll: placement %q, want it submitted by the poll (its claim was never released)", j.Placement)
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := b.Handle(cctx, envelope.Event{ID: "c42", Principal: "users/ana", Payload: &eventsv1.CancelJob{Job: "projects/p/jobs/42"}}); err != nil {
		t.Fatalf("cancel of job 42: %v", err)
	}
}

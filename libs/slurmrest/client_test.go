package slurmrest

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// These tests use fake servers for what a real slurmrestd does not do on
// demand (huge or broken replies, hanging); bench/slurm's rest_test.go runs
// every call against a real slurmrestd.

func fake(t *testing.T, h http.HandlerFunc) *Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := New(srv.URL, "root", "tok")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestTooLargeReplyIsAnError(t *testing.T) {
	t.Parallel()
	c := fake(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"errors":[],"jobs":[`+strings.Repeat(`{"job_id":1},`, 1000)+`{"job_id":2}]}`)
	})
	c.MaxResponseBytes = 1000
	_, err := c.ListJobs(context.Background())
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "GET /slurm/v0.0.38/jobs") ||
		!strings.Contains(err.Error(), "1000 bytes") {
		t.Fatalf("a 13 kB reply under a 1000-byte cap: got %v, want ErrTooLarge naming the endpoint and the cap", err)
	}
	c.MaxResponseBytes = 0 // the default cap holds it
	if jobs, err := c.ListJobs(context.Background()); err != nil || len(jobs) != 1001 {
		t.Fatalf("default cap: %d jobs, %v", len(jobs), err)
	}
}

func TestGarbageRepliesAreErrorsNotPanics(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body string
		status     int
		want       string
	}{
		{"not json", "<html>proxy error</html>", 200, "not slurmrestd JSON"},
		{"plain-text 400", "Unable to parse query.", 400, `HTTP 400: "Unable to parse query."`},
		{"wrong types", `{"errors":[],"jobs":"many"}`, 200, "decoding the reply"},
		{"errors not a list", `{"errors":{"x":1}}`, 200, "not slurmrestd JSON"},
		{"binary", "\x00\xff\xfe", 200, "not slurmrestd JSON"},
		{"empty", "", 502, "HTTP 502"},
		{"nulls", `{"errors":null,"jobs":[null,{"job_id":null,"job_state":null}]}`, 200, ""},
	} {
		c := fake(t, func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(tc.status)
			_, _ = io.WriteString(w, tc.body)
		})
		_, err := c.ListJobs(context.Background())
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v, want nulls taken as zero values", tc.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "GET /slurm/v0.0.38/jobs") {
			t.Errorf("%s: got %v, want an error naming the endpoint and %q", tc.name, err, tc.want)
		}
	}
}

func TestSlurmErrorsAreReported(t *testing.T) {
	t.Parallel()
	// What 22.05 answers for an unknown job (HTTP 500, error 2017).
	c := fake(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(500)
		_, _ = io.WriteString(w, `{"errors":[{"description":"Unable to find JobId=999","error_number":2017,`+
			`"error":"Invalid job id specified","source":"slurm_load_job"}],"jobs":[]}`)
	})
	_, err := c.GetJob(context.Background(), "999")
	want := "slurmrest: GET /slurm/v0.0.38/job/999: HTTP 500: slurm_load_job: Unable to find JobId=999 (Invalid job id specified) [slurm error 2017]"
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("%v does not wrap ErrNotFound", err)
	}
	// A 200 with errors is a failure too.
	c = fake(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"errors":[{"error":"environment must be set","error_code":2127}]}`)
	})
	if _, err := c.ListNodes(context.Background()); err == nil || !strings.Contains(err.Error(), "environment must be set [slurm error 2127]") {
		t.Errorf("200 with errors: %v", err)
	}
}

func TestContextEndsACall(t *testing.T) {
	t.Parallel()
	c := fake(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, _, err := c.Ping(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "GET /slurm/v0.0.38/ping") {
		t.Fatalf("a hanging server: got %v, want the deadline, naming the endpoint", err)
	}
}

func TestSubmitSendsWhatSlurmrestdTakes(t *testing.T) {
	t.Parallel()
	var got map[string]any
	var hdr http.Header
	c := fake(t, func(w http.ResponseWriter, r *http.Request) {
		hdr = r.Header.Clone()
		if r.Method != "POST" || r.URL.Path != "/slurm/v0.0.38/job/submit" {
			t.Errorf("%s %s", r.Method, r.URL.Path)
		}
		if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
			t.Error(err)
		}
		_, _ = io.WriteString(w, `{"errors":[],"job_id":42,"step_id":"BATCH","job_submit_user_msg":"hi"}`)
	})
	s, err := c.SubmitJob(context.Background(), JobSpec{Script: "#!/bin/sh\ntrue\n", Name: "n", Nodes: 2, Tasks: 4,
		CPUsPerTask: 2, GPUsPerNode: 2, MemoryPerNodeMB: 100, TimeLimit: 61 * time.Second, WorkingDir: "/w",
		Environment: map[string]string{"PATH": "/bin"}, Account: "a", QOS: "q", Comment: "loom:projects/p/jobs/7",
		Dependency: "afterok:12:13,singleton", BeginTime: time.Now().Add(90 * time.Minute)})
	if err != nil || s.JobID != "42" || s.UserMessage != "hi" {
		t.Fatalf("submit: %+v, %v", s, err)
	}
	for k, v := range map[string]string{"X-Slurm-User-Name": "root", "X-Slurm-User-Token": "tok", "Content-Type": "application/json"} {
		if hdr.Get(k) != v {
			t.Errorf("header %s = %q, want %q", k, hdr.Get(k), v)
		}
	}
	job, _ := json.Marshal(got["job"])
	// nodes an int ([min,max] is ignored), gpus_per_node a plain count
	// ("gpu:2" fails the job), time_limit in minutes rounded up.
	want := `{"account":"a","begin_time":"now+5400","comment":"loom:projects/p/jobs/7","cpus_per_task":2,"current_working_directory":"/w","dependency":"afterok:12:13,singleton","environment":{"PATH":"/bin"},` +
		`"gpus_per_node":"2","memory_per_node":100,"name":"n","nodes":2,"qos":"q","tasks":4,"time_limit":2}`
	if string(job) != want || got["script"] != "#!/bin/sh\ntrue\n" {
		t.Errorf("job %s\nwant %s (script %q)", job, want, got["script"])
	}
}

// TestHeldSubmissionAndHoldJob: a held submission is sent with "hold" and
// taken with ESLURM_JOB_HELD among the reply's errors, as slurmrestd
// answers it (that error fails any other submission); a begin time not in
// the future is not sent; HoldJob and its release are POST job/{id}.
func TestHeldSubmissionAndHoldJob(t *testing.T) {
	t.Parallel()
	var bodies []string
	c := fake(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies = append(bodies, r.Method+" "+strings.TrimPrefix(r.URL.Path, "/slurm/v0.0.38/")+" "+string(b))
		if r.URL.Path == "/slurm/v0.0.38/job/submit" {
			_, _ = io.WriteString(w, `{"errors":[{"error_code":2042,"error":"Job is in held state, pending scheduler release"}],"job_id":43}`)
			return
		}
		_, _ = io.WriteString(w, `{"errors":[]}`)
	})
	ctx := context.Background()
	spec := JobSpec{Script: "#!/bin/sh\n", WorkingDir: "/w", Environment: map[string]string{"A": "1"}, Hold: true,
		BeginTime: time.Now().Add(-time.Minute)}
	if s, err := c.SubmitJob(ctx, spec); err != nil || s.JobID != "43" {
		t.Fatalf("held submission: %+v, %v; want job 43", s, err)
	}
	if !strings.Contains(bodies[0], `"hold":true`) || strings.Contains(bodies[0], "begin_time") {
		t.Errorf("held submission sent %s; want hold and no begin_time (a past one)", bodies[0])
	}
	spec.Hold = false
	if _, err := c.SubmitJob(ctx, spec); err == nil || !strings.Contains(err.Error(), "held state") {
		t.Errorf("unheld submission answered with ESLURM_JOB_HELD: %v, want the error", err)
	}
	if err := c.HoldJob(ctx, "43", true); err != nil {
		t.Fatal(err)
	}
	if err := c.HoldJob(ctx, "43", false); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(bodies[2:], "|"); got != `POST job/43 {"hold":true}|POST job/43 {"hold":false}` {
		t.Errorf("hold and release sent %q", got)
	}
	if err := c.HoldJob(ctx, "4x", true); err == nil || len(bodies) != 4 {
		t.Errorf("HoldJob of a bad id: %v, %d requests", err, len(bodies))
	}
}

func TestValidateNamesEveryBadField(t *testing.T) {
	t.Parallel()
	err := JobSpec{Script: "echo no shebang", Nodes: -1, Tasks: MaxTasks + 1, GPUsPerNode: 5000,
		MemoryPerNodeMB: -1, TimeLimit: -time.Second, WorkingDir: "rel", Name: "a\nb",
		Environment: map[string]string{"A=B": "x"}, Dependency: strings.Repeat("afterok:1,", MaxDependencyBytes/10+1),
		BeginTime: time.Now().Add(MaxBeginAhead + time.Hour)}.Validate()
	for _, want := range []string{"JobSpec.Script must start with #!", "JobSpec.Nodes must be 0..", "JobSpec.Tasks",
		"JobSpec.GPUsPerNode must be 0..1024", "JobSpec.MemoryPerNodeMB", "JobSpec.TimeLimit", "JobSpec.WorkingDir",
		"JobSpec.Name must be one line", `JobSpec.Environment key "A=B"`, "JobSpec.Dependency is 65540 bytes, at most 65536",
		"JobSpec.BeginTime"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not say %q", err, want)
		}
	}
	if err := (JobSpec{Script: "#!/bin/sh\n", WorkingDir: "/"}).Validate(); err == nil ||
		!strings.Contains(err.Error(), "JobSpec.Environment must hold at least one variable") {
		t.Errorf("no environment: %v", err)
	}
	if err := (JobSpec{Script: "#!/bin/sh\n", WorkingDir: "/", Environment: map[string]string{"A": "1"},
		Dependency: "afterok:1\nsingleton"}).Validate(); err == nil || !strings.Contains(err.Error(), "JobSpec.Dependency must be one line") {
		t.Errorf("two-line dependency: %v", err)
	}
}

func TestRequestsAreChecked(t *testing.T) {
	t.Parallel()
	c := fake(t, func(w http.ResponseWriter, r *http.Request) { t.Errorf("request sent: %s", r.URL) })
	for _, id := range []string{"", "0", "-1", "1/../nodes", "12a", "99999999999"} {
		if _, err := c.GetJob(context.Background(), id); err == nil || !strings.Contains(err.Error(), "job id") {
			t.Errorf("GetJob(%q): %v, want an error about the job id", id, err)
		}
	}
	if err := c.CancelJob(context.Background(), "1", "SIGWHAT"); err == nil || !strings.Contains(err.Error(), "USR1") {
		t.Errorf("unknown signal: %v", err)
	}
	for _, bad := range [][3]string{{"ftp://x", "u", "t"}, {"http://x/slurm", "u", "t"}, {"http://x", "", "t"}, {"http://x", "u", "a\nb"}} {
		if _, err := New(bad[0], bad[1], bad[2]); err == nil {
			t.Errorf("New(%q, %q, %q) accepted", bad[0], bad[1], bad[2])
		}
	}
}

func TestCancelSendsTheSignalName(t *testing.T) {
	t.Parallel()
	var got []string
	c := fake(t, func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.URL.RequestURI())
		_, _ = io.WriteString(w, `{"errors":[]}`)
	})
	for _, sig := range []string{"", "SIGUSR1", "term"} {
		if err := c.CancelJob(context.Background(), "7", sig); err != nil {
			t.Fatal(err)
		}
	}
	want := "DELETE /slurm/v0.0.38/job/7,DELETE /slurm/v0.0.38/job/7?signal=USR1,DELETE /slurm/v0.0.38/job/7?signal=TERM"
	if strings.Join(got, ",") != want {
		t.Errorf("requests %v, want %s", got, want)
	}
}

func TestBadTokenHint(t *testing.T) {
	t.Parallel()
	// What 22.05 answers a bad token (SLURM.md: HTTP 500, not 401).
	c := fake(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(500)
		_, _ = io.WriteString(w, `{"errors":[{"description":"slurmctld config is unable to load","error_number":-1,`+
			`"error":"Unspecified error","source":"slurm_load_ctl_conf"}]}`)
	})
	_, _, err := c.Ping(context.Background())
	if err == nil || !strings.Contains(err.Error(), "slurmctld config is unable to load") || !strings.Contains(err.Error(), "check the token") {
		t.Fatalf("bad token: %v", err)
	}
}

func TestLoomStateCoversLoomsVocabulary(t *testing.T) {
	t.Parallel()
	reached := map[loomv1.JobState]bool{}
	// The states slurmrestd 22.05 names that Loom maps (Slurm's
	// job_state_string), each to its own name or its approximation.
	for _, s := range []string{"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "COMPLETED", "FAILED",
		"CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "REQUEUED", "OUT_OF_MEMORY",
		"BOOT_FAIL", "DEADLINE", "REQUEUE_HOLD", "STAGE_OUT"} {
		got, ok := LoomState(s)
		want, approx := approximations[s]
		if !approx {
			want = loomv1.JobState(loomv1.JobState_value[s])
		}
		if !ok || got != want || got == loomv1.JobState_JOB_STATE_UNSPECIFIED {
			t.Errorf("LoomState(%s) = %v, %v, want %v", s, got, ok, want)
		}
		reached[got] = true
	}
	// Every Loom state but UNSPECIFIED is some Slurm state.
	for v, name := range loomv1.JobState_name {
		if st := loomv1.JobState(v); st != loomv1.JobState_JOB_STATE_UNSPECIFIED && !reached[st] {
			t.Errorf("no Slurm state maps to %s", name)
		}
	}
	// Terminal stays terminal across the mapping.
	for s, want := range map[string]bool{"BOOT_FAIL": true, "DEADLINE": true, "CANCELLED": true, "COMPLETING": false, "REQUEUE_HOLD": false} {
		if st, _ := LoomState(s); st.Terminal() != want {
			t.Errorf("%s → %s: Terminal %v, want %v", s, st, st.Terminal(), want)
		}
	}
	for _, s := range []string{"SUSPENDED", "RESIZING", "SIGNALING", "", "running", "JOB_STATE_UNSPECIFIED"} {
		if st, ok := LoomState(s); ok {
			t.Errorf("LoomState(%q) = %s, want no mapping", s, st)
		}
	}
}

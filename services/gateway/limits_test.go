package gateway

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loom-ml/loom/libs/testkit"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/domain"
	"github.com/loom-ml/loom/services/gateway/internal/ports"
)

// restTimeout is the read timeouts of TestRESTLimits' slow gateway: short,
// so a slow client is cut off quickly. Only the subtests about the timeouts
// use that gateway: on a loaded machine a stall of about a second mid-request
// is seen, and a large body (a 256 KiB script, the 4 MiB of an endless
// chunked body) would be cut off by it and answered 408 instead of the
// 400 or 413 its subtest is about.
const restTimeout = time.Second

// rawHTTP sends head (and then body, in its own goroutine, when not nil) on
// a new connection to the gateway's REST port and returns the response, or
// nil and the read error when the server closed the connection first.
func rawHTTP(t *testing.T, h *harness, head string, body io.Reader) (*http.Response, string, error) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(h.restBase, "http://"))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	// A deadline far past the server's timeouts: a server that never
	// closes the connection fails the test instead of hanging it.
	_ = conn.SetDeadline(time.Now().Add(wait))
	if h.adminKey != "" {
		head = strings.Replace(head, "\r\nHost: gw\r\n", "\r\nHost: gw\r\nAuthorization: Bearer "+h.adminKey+"\r\n", 1)
	}
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatalf("write head: %v", err)
	}
	if body != nil {
		go func() { _, _ = io.Copy(conn, body) }() // ends when the server closes
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b), nil
}

// endlessChunks is an endless chunked body: 1 MiB chunks of 'x'.
type endlessChunks struct{ pending []byte }

func (e *endlessChunks) Read(p []byte) (int, error) {
	if len(e.pending) == 0 {
		e.pending = []byte("100000\r\n" + strings.Repeat("x", 1<<20) + "\r\n")
	}
	n := copy(p, e.pending)
	e.pending = e.pending[n:]
	return n, nil
}

func TestRESTLimits(t *testing.T) {
	t.Parallel()
	// h has the default read timeouts (far past any stall), for the
	// subtests about sizes and contents; slow has restTimeout, for those
	// about the timeouts, which send nothing that takes long to read.
	h := newHarness(t)
	slow := newHarness(t, func(c *Config) {
		c.REST.ReadHeaderTimeout, c.REST.ReadTimeout = restTimeout, restTimeout
	})
	const jobs = "/v1/projects/default/jobs"

	t.Run("a 100 MB body is 413, unread", func(t *testing.T) {
		t.Parallel()
		resp, body, err := rawHTTP(t, h, "POST "+jobs+" HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: 104857600\r\n\r\n", nil)
		if err != nil {
			t.Fatalf("no response: %v", err)
		}
		var e struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}
		if resp.StatusCode != http.StatusRequestEntityTooLarge || json.Unmarshal([]byte(body), &e) != nil ||
			e.Code != int(codes.InvalidArgument) || !strings.Contains(e.Message, fmt.Sprintf("limit of %d", ports.DefaultMaxBodyBytes)) {
			t.Fatalf("HTTP %d %s, want 413 with a JSON error naming the limit", resp.StatusCode, body)
		}
	})
	t.Run("an endless chunked body is 413", func(t *testing.T) {
		t.Parallel()
		resp, body, err := rawHTTP(t, h, "POST "+jobs+" HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
			&endlessChunks{})
		if err != nil {
			t.Fatalf("no response: %v", err)
		}
		if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(body, "larger than the limit") {
			t.Fatalf("HTTP %d %s, want 413", resp.StatusCode, body)
		}
	})
	t.Run("a body sent slowly is cut off", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		// 10 of the 100 bytes announced, then nothing.
		resp, body, err := rawHTTP(t, slow, "POST "+jobs+" HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"cluster\"", nil)
		switch {
		case err == nil && resp.StatusCode != http.StatusRequestTimeout:
			t.Fatalf("HTTP %d %s, want 408 or the connection closed", resp.StatusCode, body)
		case err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !strings.Contains(err.Error(), "reset"):
			t.Fatalf("read: %v, want 408 or the connection closed", err)
		}
		if took := time.Since(start); took > restTimeout+10*time.Second {
			t.Fatalf("cut off after %v, want about %v", took, restTimeout)
		}
	})
	t.Run("headers sent slowly are cut off", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		resp, _, err := rawHTTP(t, slow, "GET /v1/projects/default/clusters HTTP/1.1\r\nHost: gw\r\n", nil)
		if err == nil && resp.StatusCode < 400 {
			t.Fatalf("HTTP %d to half a request", resp.StatusCode)
		}
		if took := time.Since(start); took > restTimeout+10*time.Second {
			t.Fatalf("cut off after %v, want about %v", took, restTimeout)
		}
	})
	t.Run("unknown fields are refused", func(t *testing.T) {
		t.Parallel()
		// Its own deadline: a parallel subtest may start long after its
		// parent (on two cores, 30 s later was seen).
		ctx := testkit.Context(t, wait)
		code, body := h.rest(t, ctx, "POST", jobs, `{"cluster": "c1", "command": ["true"], "nodes_count": 2}`)
		if code != http.StatusBadRequest || !strings.Contains(body, `unknown field \"nodes_count\"`) {
			t.Fatalf("HTTP %d %s, want 400 naming nodes_count", code, body)
		}
	})
	t.Run("control characters and sizes are 400", func(t *testing.T) {
		t.Parallel()
		ctx := testkit.Context(t, wait)
		for _, tc := range []struct{ method, path, body, want string }{
			{"POST", "/v1/projects/default/clusters/c1/slurmNodes/gpu-0001:update", `{"state":"DRAIN","reason":"bad\u001b[1A\u001b[2Kgpu-0002 idle"}`, "reason: "},
			{"POST", jobs, `{"cluster":"c1","command":["true"],"display_name":"x\u001b[2J"}`, "job.display_name: "},
			{"POST", jobs, `{"cluster":"c1","command":["true"],"user":"ana\nroot"}`, "job.user: "},
			{"POST", jobs, `{"cluster":"c1","command":["sh","-c","a\u0000b"]}`, "job.command[2]: holds a NUL byte"},
			{"POST", jobs, `{"cluster":"c1","script":"` + strings.Repeat("x", domain.MaxScriptBytes+1) + `"}`,
				fmt.Sprintf("job.script: %d bytes, longer than the limit of %d", domain.MaxScriptBytes+1, domain.MaxScriptBytes)},
			{"PATCH", "/v1/projects/default/clusters/c1?update_mask=status", `{}`, "update_mask: names only output-only fields (status)"},
		} {
			code, body := h.rest(t, ctx, tc.method, tc.path, tc.body)
			if code != http.StatusBadRequest || !strings.Contains(body, tc.want) {
				t.Errorf("%s %s: HTTP %d %.300s, want 400 with %q", tc.method, tc.path, code, body, tc.want)
			}
		}
	})
	t.Run("a stream outlives the read timeout", func(t *testing.T) {
		t.Parallel()
		ctx := testkit.Context(t, wait)
		code, body := slow.rest(t, ctx, "POST", jobs, `{"cluster": "c1", "command": ["true"]}`)
		var j struct {
			Name string `json:"name"`
		}
		if code != http.StatusOK || json.Unmarshal([]byte(body), &j) != nil {
			t.Fatalf("submit: HTTP %d %s", code, body)
		}
		req, _ := http.NewRequestWithContext(ctx, "GET", slow.restBase+"/v1/"+j.Name+":watch", nil)
		resp, err := slow.http.Do(req)
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		if !sc.Scan() || !strings.Contains(sc.Text(), "PENDING") {
			t.Fatalf("first line %q (%v), want the pending job", sc.Text(), sc.Err())
		}
		opened := time.Now()
		// The watch's refresh (every 2 s, past restTimeout) brings the end.
		slow.w.setJob(&loomv1.Job{Name: j.Name, Cluster: cluster1, State: loomv1.JobState_COMPLETED})
		for sc.Scan() && !strings.Contains(sc.Text(), "COMPLETED") {
		}
		if !strings.Contains(sc.Text(), "COMPLETED") {
			t.Fatalf("stream ended after %v without the COMPLETED job: %v", time.Since(opened), sc.Err())
		}
	})
}

// A command larger than the broker takes used to be accepted and then
// retried by the relay forever. Now the largest accepted job is published,
// and a larger one is refused naming the field and the limit.
func TestLargestAcceptedJobIsPublished(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, wait)

	req := validJob()
	req.Job.Script = "#!/bin/sh\n" + strings.Repeat("#", domain.MaxScriptBytes-10)
	req.Job.Env = map[string]string{"BIG": strings.Repeat("v", domain.MaxEnvBytes-len("BIG")-2)}
	req.Job.Export = strings.Repeat("e", domain.MaxSpecBytes)
	job, err := h.jobs().SubmitJob(ctx, req)
	if err != nil {
		t.Fatalf("a job at the bounds refused: %v", err)
	}
	cmd := jobCommand(t, h, func(c *eventsv1.SubmitJob) bool { return c.GetJob().GetName() == job.GetName() })
	if len(cmd.GetJob().GetScript()) != domain.MaxScriptBytes {
		t.Errorf("published script is %d bytes, want %d", len(cmd.GetJob().GetScript()), domain.MaxScriptBytes)
	}

	for _, tc := range []struct {
		name   string
		mutate func(*loomv1.Job)
		want   string
	}{
		{"a 2 MB script", func(j *loomv1.Job) { j.Script = "#!/bin/sh\n" + strings.Repeat("#", 2<<20) }, "job.script: "},
		{"a NUL in the command", func(j *loomv1.Job) { j.Script, j.Command = "", []string{"echo", "a\x00b"} }, "job.command[1]: holds a NUL byte"},
	} {
		req := validJob()
		tc.mutate(req.Job)
		_, err := h.jobs().SubmitJob(ctx, req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.want) {
			t.Errorf("%s: %v, want InvalidArgument with %q", tc.name, err, tc.want)
		}
	}
}

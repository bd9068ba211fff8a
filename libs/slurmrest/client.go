// Package slurmrest is a typed client for slurmrestd 22.05's
// /slurm/v0.0.38/ API: the calls the Slurm scheduler backend needs (ping,
// submit, get, list, cancel, nodes, partitions) and the mapping of Slurm's
// job states to Loom's (loomv1.JobState). It is the backend's first part;
// the backend itself is not built yet (docs/slurm-backend.md).
//
// It treats slurmrestd as untrusted: every response body is read through a
// limit (Client.MaxResponseBytes, default DefaultMaxResponseBytes), every
// call ends with its context, and an error names the endpoint, the HTTP
// status and Slurm's own text from the reply's "errors" array. Odd JSON
// gives an error, never a panic.
//
// Facts it relies on (../../../shared/design/SLURM.md, "slurmrestd (REST)"):
// requests carry X-SLURM-USER-NAME and X-SLURM-USER-TOKEN (a JWT from
// `scontrol token`); a bad token gives HTTP 500 (not 401) with "errors";
// a request body needs Content-Type: application/json, else slurmrestd
// answers 400 with the plain text "Unable to parse query.".
package slurmrest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// APIVersion is the slurmrestd OpenAPI plugin this client speaks
// (slurmrestd -s openapi/v0.0.38).
const APIVersion = "v0.0.38"

// DefaultMaxResponseBytes caps a response body when Client.MaxResponseBytes
// is 0. A job in a v0.0.38 listing is about 2.5 KB of JSON, so 64 MiB holds
// about 25,000 jobs; a cluster with more (MaxJobCount allows 100,000) needs
// a larger cap.
const DefaultMaxResponseBytes = 64 << 20

// DefaultTimeout bounds a call whose context has no deadline.
const DefaultTimeout = 30 * time.Second

// ErrNotFound is wrapped by the error of a call about a job that Slurm does
// not know (Slurm error 2017, "Invalid job id specified").
var ErrNotFound = errors.New("slurmrest: no such job")

// slurmInvalidJobID is ESLURM_INVALID_JOB_ID.
const slurmInvalidJobID = 2017

// Client calls one slurmrestd. Its fields must not change once calls have
// started; a Client is then safe for concurrent use.
type Client struct {
	// BaseURL is slurmrestd's address, "http://127.0.0.1:6820" (no path).
	BaseURL string
	// User and Token are the X-SLURM-USER-NAME and X-SLURM-USER-TOKEN
	// headers: the Slurm user the calls act as and its JWT.
	User, Token string
	// HTTP is the client used (nil: a client without its own timeout; the
	// calls' contexts bound them).
	HTTP *http.Client
	// MaxResponseBytes caps every response body (0: DefaultMaxResponseBytes).
	// A larger body is an error, not a truncated result.
	MaxResponseBytes int64
}

// New returns a client for slurmrestd at baseURL ("http://host:port")
// acting as user with token. It checks its arguments, not the server: call
// Ping for that.
func New(baseURL, user, token string) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("slurmrest: base URL %q must be http(s)://host:port", baseURL)
	}
	if u.Path != "" && u.Path != "/" || u.RawQuery != "" {
		return nil, fmt.Errorf("slurmrest: base URL %q must have no path or query (the client adds /slurm/%s/)", baseURL, APIVersion)
	}
	if user == "" || strings.ContainsAny(user, "\r\n") {
		return nil, errors.New("slurmrest: user is required and must be one line (X-SLURM-USER-NAME)")
	}
	if token == "" || strings.ContainsAny(token, "\r\n") {
		return nil, errors.New("slurmrest: token is required and must be one line (X-SLURM-USER-TOKEN; scontrol token)")
	}
	return &Client{BaseURL: strings.TrimSuffix(baseURL, "/"), User: user, Token: token}, nil
}

// Error is a failed call: the endpoint, the HTTP status (0 when no reply
// came) and Slurm's own errors, or the transport or decoding failure.
type Error struct {
	// Endpoint is "METHOD /slurm/v0.0.38/path".
	Endpoint string
	// Status is the HTTP status code; 0 when the request got no reply.
	Status int
	// Slurm are the entries of the reply's "errors" array.
	Slurm []SlurmError
	// Err is the underlying failure when there was no usable reply
	// (transport, limit, JSON); nil otherwise.
	Err error
	// Body is the start of a reply that was not JSON (slurmrestd answers
	// some bad requests in plain text).
	Body string
}

// SlurmError is one entry of a slurmrestd reply's "errors" array. 22.05
// names the number "error_number" in some replies and "error_code" in
// others; Number holds either.
type SlurmError struct {
	Number      int    `json:"error_number"`
	Code        int    `json:"error_code"`
	Error       string `json:"error"`
	Description string `json:"description"`
	Source      string `json:"source"`
}

func (e SlurmError) number() int {
	if e.Number != 0 {
		return e.Number
	}
	return e.Code
}

func (e SlurmError) String() string {
	var b strings.Builder
	if e.Source != "" {
		b.WriteString(e.Source + ": ")
	}
	switch {
	case e.Description != "" && e.Error != "" && !strings.Contains(e.Description, e.Error):
		b.WriteString(e.Description + " (" + e.Error + ")")
	case e.Description != "":
		b.WriteString(e.Description)
	default:
		b.WriteString(e.Error)
	}
	if n := e.number(); n != 0 {
		fmt.Fprintf(&b, " [slurm error %d]", n)
	}
	return b.String()
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("slurmrest: " + e.Endpoint)
	if e.Status != 0 {
		fmt.Fprintf(&b, ": HTTP %d", e.Status)
	}
	for _, s := range e.Slurm {
		b.WriteString(": " + s.String())
	}
	if e.Err != nil {
		b.WriteString(": " + e.Err.Error())
	}
	if e.Body != "" {
		fmt.Fprintf(&b, ": %q", e.Body)
	}
	if e.authLike() {
		b.WriteString(" (slurmrestd answers a bad or expired token this way: check the token, X-SLURM-USER-TOKEN)")
	}
	return b.String()
}

// authLike reports whether the reply looks like slurmrestd's answer to a
// bad token: HTTP 500 (not 401, SLURM.md) whose errors are all "Unspecified
// error" (-1), Slurm's failure to talk to slurmctld as that user. A real
// slurmctld outage looks the same, so the message says "check", no more.
func (e *Error) authLike() bool {
	if e.Status != http.StatusInternalServerError || len(e.Slurm) == 0 {
		return false
	}
	for _, s := range e.Slurm {
		if s.number() != -1 {
			return false
		}
	}
	return true
}

// Unwrap gives Err, and ErrNotFound for Slurm's "Invalid job id specified".
func (e *Error) Unwrap() []error {
	var errs []error
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	for _, s := range e.Slurm {
		if s.number() == slurmInvalidJobID {
			errs = append(errs, ErrNotFound)
			break
		}
	}
	return errs
}

// envelope is the part every v0.0.38 reply has.
type envelope struct {
	Errors []SlurmError `json:"errors"`
}

// ErrTooLarge is wrapped by the error of a call whose reply exceeds the cap.
var ErrTooLarge = errors.New("response body over the limit")

// do sends one request and decodes the reply into out (which must embed
// nothing; do reads "errors" itself). A reply is a success when its status
// is 2xx and its "errors" array is empty.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, in, out any) error {
	return c.doAccepting(ctx, method, path, query, in, out, nil)
}

// doAccepting is do that also takes a 2xx reply whose every error accept
// (nil: none) says is part of a success, as slurmrestd reports some.
func (c *Client) doAccepting(ctx context.Context, method, path string, query url.Values, in, out any, accept func(SlurmError) bool) error {
	endpoint := method + " /slurm/" + APIVersion + "/" + path
	fail := func(status int, err error) error { return &Error{Endpoint: endpoint, Status: status, Err: err} }
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	u := c.BaseURL + "/slurm/" + APIVersion + "/" + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fail(0, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return fail(0, err)
	}
	req.Header.Set("X-SLURM-USER-NAME", c.User)
	req.Header.Set("X-SLURM-USER-TOKEN", c.Token)
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fail(0, err)
	}
	defer resp.Body.Close()
	limit := c.MaxResponseBytes
	if limit <= 0 {
		limit = DefaultMaxResponseBytes
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return fail(resp.StatusCode, fmt.Errorf("reading the reply: %w", err))
	}
	if int64(len(raw)) > limit {
		return fail(resp.StatusCode, fmt.Errorf("%w of %d bytes (Client.MaxResponseBytes)", ErrTooLarge, limit))
	}
	var env envelope
	if err := json.Unmarshal(raw, &env); err != nil {
		e := &Error{Endpoint: endpoint, Status: resp.StatusCode, Body: snippet(raw)}
		if resp.StatusCode/100 == 2 {
			e.Err = fmt.Errorf("reply is not slurmrestd JSON: %w", err)
		}
		return e
	}
	accepted := accept != nil
	for _, e := range env.Errors {
		accepted = accepted && accept(e)
	}
	if resp.StatusCode/100 != 2 || (len(env.Errors) > 0 && !accepted) {
		return &Error{Endpoint: endpoint, Status: resp.StatusCode, Slurm: env.Errors}
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return fail(resp.StatusCode, fmt.Errorf("decoding the reply: %w", err))
		}
	}
	return nil
}

// snippet is the start of a non-JSON body, for an error message.
func snippet(b []byte) string {
	const n = 200
	s := strings.ToValidUTF8(string(b), "?")
	if len(s) > n {
		s = s[:n] + "…"
	}
	return strings.TrimSpace(s)
}

// jobPath is "job/<id>", refusing ids that are not Slurm job ids so that
// nothing else lands in the path.
func jobPath(id string) (string, error) {
	if n, err := strconv.ParseUint(id, 10, 32); err != nil || n == 0 {
		return "", fmt.Errorf("slurmrest: job id %q must be a positive decimal number below 2^32", id)
	}
	return "job/" + id, nil
}

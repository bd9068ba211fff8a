package ports

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
)

// TestMalformedBodySaysWhere: a REST body that is not JSON used to be
// answered with encoding/json's words alone ("invalid character 'b'
// looking for beginning of value"), saying neither that the body was at
// fault, nor where, nor what to send. It is 400 InvalidArgument (the one
// mapping, grpc-gateway's, from the decode error's code) saying the body
// is not valid JSON, at which line, column and byte, and what to send; on
// both muxes (Vertex's camelCase paths and Loom's). The request never
// reaches the gRPC endpoint (nothing listens there).
func TestMalformedBodySaysWhere(t *testing.T) {
	t.Parallel()
	h, closeConn, err := RESTMux(context.Background(), "127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = closeConn() })
	for _, c := range []struct {
		name, path, body string
		says             []string
	}{
		{"a bare word", "/v1/projects/p/locations/l/customJobs", "{\n  \"displayName\": bad\n}",
			[]string{"request body: not valid JSON at line 2, column 18 (byte offset 19)", "invalid character 'b' looking for beginning of value", "send one JSON object"}},
		{"a trailing comma", "/v1/projects/p/clusters", `{"name": "x",}`,
			[]string{"request body: not valid JSON at line 1, column 14 (byte offset 13)", "send one JSON object"}},
		{"cut short", "/v1/projects/p/locations/l/customJobs", `{"displayName": "x`,
			[]string{"request body: not valid JSON: it ends after 18 bytes before its JSON value does", "send one JSON object"}},
	} {
		req := httptest.NewRequest(http.MethodPost, c.path, strings.NewReader(c.body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var a struct {
			Code    codes.Code `json:"code"`
			Message string     `json:"message"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &a); err != nil || rec.Code != http.StatusBadRequest || a.Code != codes.InvalidArgument {
			t.Errorf("%s: HTTP %d %s (%v); want 400 InvalidArgument", c.name, rec.Code, rec.Body, err)
			continue
		}
		for _, s := range c.says {
			if !strings.Contains(a.Message, s) {
				t.Errorf("%s: message %q; want it to hold %q", c.name, a.Message, s)
			}
		}
	}
}

// TestBodyErrorBounded: protojson's errors quote the offending token whole
// (an unknown field's name, a value of the wrong type), so a 4 MiB body
// made of one such token came back as a 4 MiB 400 message, spoofing
// characters and all. The message is cut to maxBodyErrorBytes, still
// naming the field, on both muxes; a short one passes as it was.
func TestBodyErrorBounded(t *testing.T) {
	t.Parallel()
	h, closeConn, err := RESTMux(context.Background(), "127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = closeConn() })
	long := strings.Repeat("a", 100_000)
	for _, c := range []struct {
		name, path, body, says string
	}{
		{"an unknown field's long name", "/v1/projects/p/locations/l/customJobs", `{"` + long + `": 1}`, `unknown field "aaaa`},
		{"a long value of the wrong type", "/v1/projects/p/clusters", `{"name": 1` + strings.Repeat("2", 100_000) + `}`, "invalid value for string field name"},
		{"spoofing characters", "/v1/projects/p/clusters", "{\"x\u202e" + long + `": 1}`, `unknown field "x`},
		{"a short one", "/v1/projects/p/clusters", `{"nope": 1}`, `unknown field "nope"`},
	} {
		req := httptest.NewRequest(http.MethodPost, c.path, strings.NewReader(c.body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var a struct {
			Code    codes.Code `json:"code"`
			Message string     `json:"message"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &a); err != nil || rec.Code != http.StatusBadRequest || a.Code != codes.InvalidArgument {
			t.Errorf("%s: HTTP %d %.200s (%v); want 400 InvalidArgument", c.name, rec.Code, rec.Body, err)
			continue
		}
		if len(a.Message) > maxBodyErrorBytes || !strings.Contains(a.Message, c.says) || strings.ContainsRune(a.Message, '\u202e') {
			t.Errorf("%s: message of %d bytes %.300q; want at most %d bytes, no spoofing characters, holding %q",
				c.name, len(a.Message), a.Message, maxBodyErrorBytes, c.says)
		}
	}
}

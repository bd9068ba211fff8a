package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/loom-ml/loom/libs/paging"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/services/gateway/internal/ports"
)

// restServiceNames are the services RESTMux serves over REST.
var restServiceNames = []protoreflect.FullName{
	"loom.v1.ClusterService", "loom.v1.ReservationService", "loom.v1.JobService", "loom.v1.SlurmService",
	"loom.v1.OperationService", "loom.v1.NodeService", "loom.v1.ModelService", "loom.v1.AuthService",
	"loom.v1.AccountService", "loom.v1.AuditService", "loom.v1.HealthService", "loom.v1.GoodputService",
	"loom.v1.IngressService", "loom.v1.ChangeService", "loom.training.v1.TrainingService", "loom.training.v1.MetricsService",
}

// restRoute is one REST route: its method, its path template (rule), the
// path with every variable filled in, and whether it takes a body.
type restRoute struct {
	verb, rule, path string
	body, pageSize   bool   // takes a body; its request has page_size
	bodyField        string // the rule's body: a field, "*" or ""
	pathVar          string // the field its path's first variable sets ("" for none)
}

// restPathVar is a variable of a path template: {name=projects/*/jobs/*}
// or {hostname}.
var restPathVar = regexp.MustCompile(`\{([a-z_.]+)(?:=([^}]*))?\}`)

// fillPathVar fills a path variable with ids the harness's world has
// (project default, cluster c1, job 40, node gpu-0001) and x1 elsewhere.
func fillPathVar(v string) string {
	m := restPathVar.FindStringSubmatch(v)
	switch {
	case m[2] == "" && m[1] == "hostname":
		return "gpu-0001"
	case m[2] == "":
		return "x1"
	}
	segs := strings.Split(m[2], "/")
	for i := 1; i < len(segs); i += 2 {
		if segs[i] != "*" {
			continue
		}
		segs[i] = map[string]string{"projects": "default", "locations": "us-central1", "clusters": "c1", "jobs": "40", "users": adminUser}[segs[i-1]]
		if segs[i] == "" {
			segs[i] = "x1"
		}
	}
	return strings.Join(segs, "/")
}

// restRoutes are every route the REST API serves, read from the
// google.api.http options of the services RESTMux registers, so that a
// route added later is in the table without anyone adding it.
func restRoutes(t *testing.T) []restRoute {
	t.Helper()
	var out []restRoute
	seen := map[string]bool{}
	for _, name := range restServiceNames {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		methods := d.(protoreflect.ServiceDescriptor).Methods()
		for i := range methods.Len() {
			md := methods.Get(i)
			rule, _ := proto.GetExtension(md.Options(), annotations.E_Http).(*annotations.HttpRule)
			if rule == nil {
				continue
			}
			for _, r := range append([]*annotations.HttpRule{rule}, rule.GetAdditionalBindings()...) {
				var verb, tmpl string
				switch p := r.GetPattern().(type) {
				case *annotations.HttpRule_Get:
					verb, tmpl = http.MethodGet, p.Get
				case *annotations.HttpRule_Post:
					verb, tmpl = http.MethodPost, p.Post
				case *annotations.HttpRule_Patch:
					verb, tmpl = http.MethodPatch, p.Patch
				case *annotations.HttpRule_Put:
					verb, tmpl = http.MethodPut, p.Put
				case *annotations.HttpRule_Delete:
					verb, tmpl = http.MethodDelete, p.Delete
				default:
					continue
				}
				if seen[verb+" "+tmpl] {
					continue
				}
				seen[verb+" "+tmpl] = true
				rt := restRoute{verb: verb, rule: tmpl, path: restPathVar.ReplaceAllStringFunc(tmpl, fillPathVar),
					body: r.GetBody() != "", bodyField: r.GetBody(), pageSize: md.Input().Fields().ByName("page_size") != nil}
				if m := restPathVar.FindStringSubmatch(tmpl); m != nil {
					rt.pathVar = m[1]
				}
				out = append(out, rt)
			}
		}
	}
	if len(out) < 90 {
		t.Fatalf("found %d REST routes in the services' http options, want the whole API (about 100)", len(out))
	}
	return out
}

// TestRESTRefusesHostileInputOnEveryRoute sends every REST route (all of
// them, from the services' http options) what a hostile or careless
// caller sends: a body past the limit, malformed JSON, an unknown field,
// JSON nested thousands deep, invalid UTF-8 in the path and in the query,
// JSON nested 100,000 deep (arrays or objects, unterminated), a query
// parameter the route does not take (no such field, or one its path sets), a page size past int32 or negative, an overlong path
// segment. Each is refused as
// the caller's mistake (400 or 413, a JSON error naming what and the
// limit), never a server error: invalid UTF-8 in the path used to reach
// the gateway's own gRPC call and fail there (500, "error while
// marshaling"), and a deeply nested google.protobuf.Value (a
// TrainingPipeline's training_task_inputs) to exceed protobuf's recursion
// limit (500). An unknown query parameter used to be refused only where
// some field was left for grpc-gateway to parse the query into
// (GET .../clusters/c1?page_size=-1 and GET /v1/auth:whoami?bogus=1 were
// 200), and a negative page size only by the lists the gateway pages
// itself (the ones it passes on were the owner's to refuse, or not).
func TestRESTRefusesHostileInputOnEveryRoute(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, 2*wait)
	deep := `{"training_task_inputs":` + strings.Repeat("[", 6000) + strings.Repeat("]", 6000) + `}`
	// Past encoding/json's and protojson's own depth limits (10,000 each),
	// unterminated: what a hostile caller sends to overflow a recursive
	// decoder's stack.
	deepest := `{"training_task_inputs":` + strings.Repeat("[", 100000)
	deepestObjects := strings.Repeat(`{"a":`, 100000)
	long := strings.Repeat("x", 10000)
	type answer struct {
		Code    codes.Code `json:"code"`
		Message string     `json:"message"`
	}
	send := func(verb, path, body string) (int, answer, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, verb, h.restBase+path, strings.NewReader(body))
		if err != nil {
			t.Fatalf("%s %s: %v", verb, path, err)
		}
		h.authorize(req)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %.200s: %v", verb, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		var a answer
		// A stream (:watch, :logs, :watchChanges) wraps its error.
		var streamed struct {
			Error *answer `json:"error"`
		}
		if json.Unmarshal(b, &streamed) == nil && streamed.Error != nil {
			a = *streamed.Error
		} else {
			_ = json.Unmarshal(b, &a)
		}
		return resp.StatusCode, a, string(b)
	}
	for _, r := range restRoutes(t) {
		type probe struct {
			name, path, body string
			want             int    // 0: any client error (4xx)
			says             string // what the message must hold
		}
		// A query parameter the route does not take is refused on every
		// route, those whose path and body leave grpc-gateway no field to
		// parse a query into (GetCluster, a body "*") included.
		const unknown = "no_such_param_x: query parameter: "
		bound := "the path sets " + r.pathVar
		if r.bodyField == "*" {
			bound = "takes every field in the request body"
		}
		probes := []probe{
			{"an unknown query parameter", r.path + "?no_such_param_x=1", "{}", http.StatusBadRequest, unknown},
			{"invalid UTF-8 in a query value", r.path + "?x=a%ff%fe", "", http.StatusBadRequest, "query parameter x: holds invalid UTF-8"},
			{"invalid UTF-8 in a query name", r.path + "?a%ffb=1", "", http.StatusBadRequest, "holds invalid UTF-8"},
			{"an overlong path segment", strings.Replace(r.path, "/x1", "/"+long, 1), "{}", 0, ""},
		}
		if i := strings.LastIndex(r.path, "/x1"); i >= 0 {
			probes = append(probes, probe{"invalid UTF-8 in the path", r.path[:i] + "/a%ff%fe" + r.path[i+3:], "{}", http.StatusBadRequest, "path: holds invalid UTF-8"})
		} else if strings.Contains(r.path, "/c1") {
			probes = append(probes, probe{"invalid UTF-8 in the path", strings.Replace(r.path, "/c1", "/c%ff", 1), "{}", http.StatusBadRequest, "path: holds invalid UTF-8"})
		}
		if r.body {
			probes = append(probes,
				probe{"malformed JSON", r.path, `{"`, http.StatusBadRequest, "request body: not valid JSON: it ends after 2 bytes"},
				probe{"not JSON", r.path, "{\n bad", http.StatusBadRequest, "request body: not valid JSON at line 2, column 2 (byte offset 3)"},
				probe{"an unknown field", r.path, `{"no_such_field_x": 1}`, http.StatusBadRequest, "no_such_field_x"},
				probe{"JSON nested 6000 deep", r.path, deep, http.StatusBadRequest, fmt.Sprintf("nested deeper than the limit of %d levels", ports.MaxJSONDepth)},
				probe{"100,000 nested [", r.path, deepest, http.StatusBadRequest, fmt.Sprintf("nested deeper than the limit of %d levels", ports.MaxJSONDepth)},
				probe{"100,000 nested {", r.path, deepestObjects, http.StatusBadRequest, fmt.Sprintf("nested deeper than the limit of %d levels", ports.MaxJSONDepth)},
				// Brackets in a string (escaped quote included) are no nesting.
				probe{"brackets in a string", r.path, `{"no_such_field_x": "\"` + strings.Repeat("[{", 200) + `"}`, http.StatusBadRequest, "no_such_field_x"},
				probe{"invalid UTF-8 in a body", r.path, "{\"a\xff\": 1}", http.StatusBadRequest, "invalid UTF-8"},
			)
		}
		if r.pathVar != "" {
			probes = append(probes, probe{"a query parameter the path sets", r.path + "?" + r.pathVar + "=x", "{}", http.StatusBadRequest, bound})
		}
		if r.pageSize && r.verb == http.MethodGet {
			probes = append(probes,
				probe{"a page size past int32", r.path + "?page_size=99999999999", "", http.StatusBadRequest, "page_size"},
				// The gateway's rule for every list, those it passes to
				// their owner included (ListJobs' words).
				probe{"a negative page size", r.path + "?page_size=-1", "", http.StatusBadRequest,
					fmt.Sprintf("page_size: must not be negative, got -1 (0 is the default, %d; at most %d)", paging.DefaultSize, paging.MaxSize)})
		}
		for _, p := range probes {
			body := p.body
			if r.verb == http.MethodGet || r.verb == http.MethodDelete {
				body = ""
			}
			code, a, raw := send(r.verb, p.path, body)
			switch {
			case code >= 500 || code < 400 && p.want != 0:
				t.Errorf("%s %s, %s: HTTP %d %.300s, want a client error", r.verb, r.rule, p.name, code, raw)
			case code >= 400 && a.Message == "":
				t.Errorf("%s %s, %s: HTTP %d %.300q, want a JSON error with a message", r.verb, r.rule, p.name, code, raw)
			case p.want != 0 && code != p.want:
				t.Errorf("%s %s, %s: HTTP %d %.300s, want %d", r.verb, r.rule, p.name, code, raw, p.want)
			case p.want != 0 && code == p.want && !strings.Contains(a.Message, p.says):
				t.Errorf("%s %s, %s: HTTP %d %.300s, want a message holding %q", r.verb, r.rule, p.name, code, raw, p.says)
			case strings.Contains(a.Message, "takes none"):
				t.Errorf("%s %s, %s: HTTP %d %.300s: the route is not in the query check's table", r.verb, r.rule, p.name, code, raw)
			}
		}
		if r.body {
			// Announced past the limit: refused before a byte of it is read.
			resp, raw, err := rawHTTP(t, h, fmt.Sprintf("%s %s HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n",
				r.verb, r.path, ports.DefaultMaxBodyBytes+1), nil)
			switch {
			case err != nil:
				t.Errorf("%s %s, a body past the limit: no answer: %v", r.verb, r.rule, err)
			case resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(raw, fmt.Sprintf("limit of %d", ports.DefaultMaxBodyBytes)):
				t.Errorf("%s %s, a body past the limit: HTTP %d %.300s, want 413 naming the limit", r.verb, r.rule, resp.StatusCode, raw)
			}
		}
	}
}

// TestRESTReadsNoFormFromABody: a body sent as a form (what curl -d sends
// unless told otherwise) is the request's JSON, never query parameters.
// grpc-gateway's handlers call ParseForm after decoding the body's one JSON
// value, which read the rest of a form-encoded body (past the JSON
// decoder's first 512 bytes) as parameters: past strictQuery (an unknown
// one silently dropped) and the UTF-8 check (HTTP 500 from the gateway's
// own gRPC endpoint).
func TestRESTReadsNoFormFromABody(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, wait)
	for _, smuggled := range []string{"cluster_id=a%ffb"} {
		body := `{}` + strings.Repeat(" ", 1024) + "&" + smuggled
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.restBase+"/v1/projects/default/clusters", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		h.authorize(req)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
		if resp.StatusCode >= 500 {
			t.Errorf("form-encoded body with %q: HTTP %d %s; want the body read as JSON only (nothing parsed from its rest)", smuggled, resp.StatusCode, b)
		}
	}
}

// TestJSONDecodersBoundTheirDepth: behind the REST port's own depth check
// (ports.MaxJSONDepth, 100 levels), the decoders grpc-gateway uses refuse
// JSON nested 100,000 deep with an error rather than recursing until the
// stack overflows: encoding/json, which grpc-gateway's JSONPb reads a body
// with first, and protojson, which then decodes it, both stop at 10,000
// levels. What they let through (up to 10,000 levels of a
// google.protobuf.Value, two or three messages a level) can still exceed
// protobuf's binary recursion limit on the gateway's own gRPC port, which
// answers it InvalidArgument (TestGRPCRefusesUndecodableRequests).
func TestJSONDecodersBoundTheirDepth(t *testing.T) {
	t.Parallel()
	for _, body := range []string{
		strings.Repeat("[", 100000) + strings.Repeat("]", 100000),
		strings.Repeat(`{"a":`, 100000) + "1" + strings.Repeat("}", 100000),
	} {
		if err := protojson.Unmarshal([]byte(body), &structpb.Value{}); err == nil || !strings.Contains(err.Error(), "recursion depth") {
			t.Errorf("protojson, %.10s...: %v, want its recursion depth error", body, err)
		}
		var v structpb.Value
		if err := (&runtime.JSONPb{}).NewDecoder(strings.NewReader(body)).Decode(&v); err == nil || !strings.Contains(err.Error(), "depth") {
			t.Errorf("grpc-gateway's JSONPb, %.10s...: %v, want a depth error", body, err)
		}
	}
}

package ports

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/loom-ml/loom/libs/localsite"
	"github.com/loom-ml/loom/libs/termtext"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"

	"github.com/loom-ml/loom/services/gateway/internal/guard"
)

// RESTMux returns the REST/JSON API: grpc-gateway handlers that call the
// gateway's own gRPC endpoint at grpcAddr, so both APIs share one code path
// (validation, error mapping). JSON uses the proto field names, except on
// the training paths (TrainingPath), which answer in camelCase as Vertex's
// REST documentation writes them; input takes either spelling everywhere.
// Server streams come out as newline-delimited JSON objects {"result": ...}.
// A field the request message does not have, in the body or as a query
// parameter, and a query parameter naming a field the route's path or
// body sets, are refused on every route (InvalidArgument, HTTP 400, naming
// it: strictQuery), as Google's APIs do, rather than silently dropped.
// A body that is not JSON is InvalidArgument (HTTP 400) saying so, where
// and what to send (jsonBody). The returned function closes the connection to grpcAddr.
func RESTMux(ctx context.Context, grpcAddr string) (http.Handler, func() error, error) {
	conn, err := grpc.NewClient(dialable(grpcAddr),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler()))
	if err != nil {
		return nil, nil, fmt.Errorf("rest: dial own gRPC at %s: %w", grpcAddr, err)
	}
	// Every call carries its HTTP client's address (guard.RESTClient):
	// the gRPC port sees only this connection's loopback peer.
	client := runtime.WithMetadata(func(_ context.Context, r *http.Request) metadata.MD { return guard.RESTClient(r.RemoteAddr) })
	// Query parameters are held to what a body is: one that names no
	// field the route leaves to the query is refused (strictQuery), not
	// ignored, on every route of either mux.
	services := []grpc.ServiceDesc{trainingv1.TrainingService_ServiceDesc, trainingv1.MetricsService_ServiceDesc}
	for _, l := range loomREST {
		services = append(services, l.service)
	}
	routes, err := queryRoutes(services)
	if err != nil {
		_ = conn.Close()
		return nil, nil, fmt.Errorf("rest: read the routes' http options: %w", err)
	}
	loomQuery, vertexQuery := &strictQuery{routes: routes}, &strictQuery{routes: routes}
	// A request is the method it says: grpc-gateway would otherwise take a
	// form-encoded POST as the GET of the same path, or as any method its
	// X-HTTP-Method-Override header names (a DELETE sent as a POST, past
	// whatever in front of this port tells methods apart).
	verbs := runtime.WithDisablePathLengthFallback()
	// A path served under other methods answers 405 with their Allow list
	// (RFC 9110 §15.5.6), not grpc-gateway's 501, which reads as "this
	// gateway has no such API" (the console takes it so).
	allow := &allowed{}
	wrong := runtime.WithRoutingErrorHandler(allow.routingError)
	mux := runtime.NewServeMux(verbs, wrong, runtime.WithMiddlewares(probed, loomQuery.middleware), runtime.WithMarshalerOption(runtime.MIMEWildcard, jsonBody{&runtime.JSONPb{
		MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true},
		UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
	}}), client)
	loomQuery.mux = mux
	// ModelService is on both: its Loom paths (projects/*/models/...) answer
	// with proto names, its Vertex paths (TrainingPath) in camelCase.
	for _, l := range loomREST {
		if err := l.register(ctx, mux, conn); err != nil {
			_ = conn.Close()
			return nil, nil, fmt.Errorf("rest: register handlers: %w", err)
		}
	}
	// Vertex's resources answer in Vertex's JSON: camelCase field names.
	vertex := runtime.NewServeMux(verbs, wrong, runtime.WithMiddlewares(probed, vertexQuery.middleware), runtime.WithMarshalerOption(runtime.MIMEWildcard, jsonBody{&runtime.JSONPb{
		MarshalOptions:   protojson.MarshalOptions{UseProtoNames: false},
		UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
	}}), client)
	vertexQuery.mux = vertex
	if err := trainingv1.RegisterTrainingServiceHandler(ctx, vertex, conn); err != nil {
		_ = conn.Close()
		return nil, nil, fmt.Errorf("rest: register training handlers: %w", err)
	}
	if err := loomv1.RegisterModelServiceHandler(ctx, vertex, conn); err != nil {
		_ = conn.Close()
		return nil, nil, fmt.Errorf("rest: register model handlers: %w", err)
	}
	// Metrics are read under jobs (mux) and under CustomJobs and trials
	// (vertex, by TrainingPath): registered on both.
	for _, m := range []*runtime.ServeMux{mux, vertex} {
		if err := trainingv1.RegisterMetricsServiceHandler(ctx, m, conn); err != nil {
			_ = conn.Close()
			return nil, nil, fmt.Errorf("rest: register metrics handlers: %w", err)
		}
	}
	allow.muxes = func(path string) *runtime.ServeMux {
		if TrainingPath(path) {
			return vertex
		}
		return mux
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for h := range r.Header {
			// A caller's own metadata under the REST client's key would
			// sit beside the address the port vouches for.
			if strings.HasPrefix(http.CanonicalHeaderKey(h), guard.RESTHeaderPrefix) {
				r.Header.Del(h)
			}
		}
		w = challenge{w}
		// A body is the request's JSON, whatever its Content-Type says
		// (curl -d sends a form's): grpc-gateway's handlers call ParseForm
		// after decoding its one JSON value, and a form-encoded body's rest
		// would be read as query parameters, past strictQuery and the
		// UTF-8 check below. An empty PostForm makes ParseForm read the
		// URL's query only.
		r.PostForm = url.Values{}
		if msg := invalidUTF8(r.URL); msg != "" {
			writeError(w, http.StatusBadRequest, codes.InvalidArgument, msg)
			return
		}
		if TrainingPath(r.URL.Path) {
			vertex.ServeHTTP(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	}), conn.Close, nil
}

// loomREST are the loom.v1 services RESTMux serves on its proto-named
// mux: each one's handlers' registration and its service (whose http
// options strictQuery reads).
var loomREST = []struct {
	register func(context.Context, *runtime.ServeMux, *grpc.ClientConn) error
	service  grpc.ServiceDesc
}{
	{loomv1.RegisterClusterServiceHandler, loomv1.ClusterService_ServiceDesc},
	{loomv1.RegisterReservationServiceHandler, loomv1.ReservationService_ServiceDesc},
	{loomv1.RegisterJobServiceHandler, loomv1.JobService_ServiceDesc},
	{loomv1.RegisterSlurmServiceHandler, loomv1.SlurmService_ServiceDesc},
	{loomv1.RegisterOperationServiceHandler, loomv1.OperationService_ServiceDesc},
	{loomv1.RegisterNodeServiceHandler, loomv1.NodeService_ServiceDesc},
	{loomv1.RegisterModelServiceHandler, loomv1.ModelService_ServiceDesc},
	{loomv1.RegisterAuthServiceHandler, loomv1.AuthService_ServiceDesc},
	{loomv1.RegisterAccountServiceHandler, loomv1.AccountService_ServiceDesc},
	{loomv1.RegisterAuditServiceHandler, loomv1.AuditService_ServiceDesc},
	{loomv1.RegisterHealthServiceHandler, loomv1.HealthService_ServiceDesc},
	{loomv1.RegisterGoodputServiceHandler, loomv1.GoodputService_ServiceDesc},
	{loomv1.RegisterIngressServiceHandler, loomv1.IngressService_ServiceDesc},
	{loomv1.RegisterChangeServiceHandler, loomv1.ChangeService_ServiceDesc},
}

// invalidUTF8 says which part of u, decoded, is not UTF-8 (the path, or a
// query parameter's name or value), or "" when all of it is. A string
// field of a request must be UTF-8: grpc-gateway would put the bytes in
// the request anyway, and the call to the gateway's own gRPC endpoint
// fail to marshal it (an Internal error, HTTP 500) instead of saying
// what the caller sent wrong.
func invalidUTF8(u *url.URL) string {
	const why = "%s: holds invalid UTF-8 (byte %d, decoded); send percent-encoded UTF-8"
	if i := badUTF8At(u.Path); i >= 0 {
		return fmt.Sprintf(why, "path", i)
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return "" // grpc-gateway answers a malformed query itself (400)
	}
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if i := badUTF8At(k); i >= 0 {
			return fmt.Sprintf(why, "query parameter name "+strconv.Quote(termtext.Clean(k, 100)), i)
		}
		for _, v := range q[k] {
			if i := badUTF8At(v); i >= 0 {
				return fmt.Sprintf(why, "query parameter "+termtext.Clean(k, 100), i)
			}
		}
	}
	return ""
}

// badUTF8At is the byte offset of the first invalid UTF-8 in s, or -1.
func badUTF8At(s string) int {
	if utf8.ValidString(s) {
		return -1
	}
	for i, r := range s {
		if r == utf8.RuneError {
			if _, n := utf8.DecodeRuneInString(s[i:]); n <= 1 {
				return i
			}
		}
	}
	return -1
}

// challenge makes a 401's WWW-Authenticate the challenge RFC 6750 asks
// for, `Bearer realm="loom"`, as the dashboards send it: grpc-gateway puts
// the status message there ("… needs a credential: …"), which is no
// challenge a client can parse.
type challenge struct{ http.ResponseWriter }

// restMethods are the methods the REST API's routes use.
var restMethods = []string{http.MethodGet, http.MethodPost, http.MethodPatch, http.MethodPut, http.MethodDelete}

// probeKey marks a request sent through a mux only to learn whether a
// route takes its method: probed answers it without calling the handler.
type probeKey struct{}

// probed is the muxes' middleware that answers a probe (probeKey) by
// marking it matched, so that finding a path's methods runs no handler.
func probed(next runtime.HandlerFunc) runtime.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request, params map[string]string) {
		if hit, ok := r.Context().Value(probeKey{}).(*bool); ok {
			*hit = true
			return
		}
		next(w, r, params)
	}
}

// allowed answers grpc-gateway's routing errors: a wrong method gets 405
// naming the methods the path takes (found by probing the mux that serves
// it with each of restMethods); the rest are grpc-gateway's own.
type allowed struct {
	muxes func(path string) *runtime.ServeMux // set once both muxes exist
}

func (a *allowed) routingError(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, httpStatus int) {
	if _, probing := ctx.Value(probeKey{}).(*bool); probing {
		return // a probe's method is not served there: nothing to write
	}
	if httpStatus != http.StatusMethodNotAllowed || a.muxes == nil {
		runtime.DefaultRoutingErrorHandler(ctx, mux, m, w, r, httpStatus)
		return
	}
	var methods []string
	for _, method := range restMethods {
		if method == r.Method {
			continue
		}
		hit := false
		p := r.Clone(context.WithValue(ctx, probeKey{}, &hit))
		p.Method, p.Body = method, http.NoBody
		a.muxes(r.URL.Path).ServeHTTP(discard{}, p)
		if hit {
			methods = append(methods, method)
		}
	}
	w.Header().Set("Allow", strings.Join(methods, ", "))
	writeError(w, http.StatusMethodNotAllowed, codes.Unimplemented,
		fmt.Sprintf("%s %s: method not allowed; this path takes %s", r.Method, termtext.Clean(r.URL.Path, 200), strings.Join(methods, ", ")))
}

// discard is a ResponseWriter that keeps nothing: a probe writes nothing,
// and whatever it might is not the caller's.
type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) WriteHeader(int)             {}

func (c challenge) WriteHeader(code int) {
	if code == http.StatusUnauthorized {
		c.Header().Set("WWW-Authenticate", `Bearer realm="loom"`)
	}
	c.ResponseWriter.WriteHeader(code)
}

// Flush passes a stream's flushes on (grpc-gateway flushes each message
// of a server stream through http.Flusher).
func (c challenge) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap gives http.ResponseController the writer underneath.
func (c challenge) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// trainingCollections are the collections TrainingService serves under a
// location; TrainingPath adds the registry's models (ModelService at
// Vertex's paths).
var trainingCollections = map[string]bool{"customJobs": true, "hyperparameterTuningJobs": true, "trainingPipelines": true}

// TrainingPath reports whether a REST path is a Vertex one, answered in
// camelCase: TrainingService's
// /v1/projects/*/locations/*/(customJobs|hyperparameterTuningJobs|trainingPipelines)[/ID[:verb]]
// and ModelService's /v1/projects/*/locations/*/models[:upload|/ID[:verb]].
func TrainingPath(p string) bool {
	parts := strings.SplitN(p, "/", 8)
	if len(parts) < 7 || parts[0] != "" || parts[1] != "v1" || parts[2] != "projects" || parts[4] != "locations" {
		return false
	}
	return trainingCollections[parts[6]] || parts[6] == "models" || parts[6] == "models:upload"
}

// dialable turns a listen address with an unspecified host (":7070",
// "0.0.0.0:7070") into one to dial on loopback.
func dialable(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return net.JoinHostPort("127.0.0.1", port)
	}
	return addr
}

// REST limits' defaults (the gateway's -rest-* flags).
const (
	// DefaultMaxBodyBytes is gRPC's default largest message (4 MiB): a body
	// any larger could not be passed on to the gateway's own gRPC endpoint.
	DefaultMaxBodyBytes = 4 << 20
	// DefaultReadHeaderTimeout bounds reading a request's headers.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultReadTimeout bounds reading a whole request, body included.
	DefaultReadTimeout = 30 * time.Second
	// DefaultIdleTimeout bounds how long a kept-alive connection waits for
	// its next request.
	DefaultIdleTimeout = 2 * time.Minute
)

// RESTLimits bounds what a REST client may send and how slowly.
type RESTLimits struct {
	// MaxBodyBytes is the largest request body; a larger one is answered
	// 413 without being read further.
	MaxBodyBytes int64
	// ReadHeaderTimeout, ReadTimeout and IdleTimeout are http.Server's: a
	// client slower than them has its connection closed (a body still
	// being read then is answered 408).
	ReadHeaderTimeout, ReadTimeout, IdleTimeout time.Duration
}

// RESTServer returns the HTTP server for the REST handler h under limits.
// There is no write timeout: :watch and :logs stream for as long as the job
// runs. ReadTimeout bounds reading the request only: once its body is read
// to the end, net/http lifts the read deadline for its wait for the client
// to hang up, so a stream is not ended by it (TestRESTLimits holds one open
// past the timeout).
func RESTServer(h http.Handler, limits RESTLimits) *http.Server {
	return &http.Server{
		Handler:           limitBody(h, limits.MaxBodyBytes),
		ReadHeaderTimeout: limits.ReadHeaderTimeout,
		ReadTimeout:       limits.ReadTimeout,
		IdleTimeout:       limits.IdleTimeout,
	}
}

// limitBody reads each request's body (at most max bytes) before h sees
// it: too large → 413, too slow (the server's ReadTimeout) → 408, malformed
// (a broken chunked encoding) or nested deeper than MaxJSONDepth → 400,
// each with a JSON error as grpc-gateway writes them.
func limitBody(h http.Handler, max int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > max {
			writeError(w, http.StatusRequestEntityTooLarge, codes.InvalidArgument,
				fmt.Sprintf("request body: %d bytes, larger than the limit of %d", r.ContentLength, max))
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			writeError(w, http.StatusRequestEntityTooLarge, codes.InvalidArgument,
				fmt.Sprintf("request body: larger than the limit of %d bytes", max))
			return
		case isTimeout(err):
			writeError(w, http.StatusRequestTimeout, codes.DeadlineExceeded, fmt.Sprintf("request body: not received in time: %v", err))
			return
		case err != nil:
			writeError(w, http.StatusBadRequest, codes.InvalidArgument, fmt.Sprintf("request body: %v", err))
			return
		}
		if tooDeep(body, MaxJSONDepth) {
			writeError(w, http.StatusBadRequest, codes.InvalidArgument,
				fmt.Sprintf("request body: JSON nested deeper than the limit of %d levels", MaxJSONDepth))
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		h.ServeHTTP(w, r)
	})
}

// MaxJSONDepth bounds how deeply a request body's JSON nests (objects and
// arrays). No request needs more than a few levels, but a free-form field
// (a TrainingPipeline's training_task_inputs, a google.protobuf.Value)
// takes any depth, and each level is two or three protobuf messages: a few
// thousand levels pass the JSON decoder and then exceed protobuf's
// recursion limit when the gateway's own gRPC endpoint reads the request,
// an Internal error (HTTP 500) instead of the caller's mistake.
const MaxJSONDepth = 100

// tooDeep reports whether the JSON in body nests objects and arrays more
// than limit levels deep. It only counts brackets outside strings: whether
// body is JSON at all is the decoder's to say.
func tooDeep(body []byte, limit int) bool {
	depth, inString, escaped := 0, false, false
	for _, c := range body {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			if depth++; depth > limit {
				return true
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return false
}

// writeError writes the JSON error body grpc-gateway writes for a gRPC
// status ({"code": N, "message": "...", "details": []}) with HTTP status
// httpStatus, and closes the connection (what is left of the body is not read).
func writeError(w http.ResponseWriter, httpStatus int, code codes.Code, msg string) {
	setAPIHeaders(w.Header())
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Connection", "close")
	w.WriteHeader(httpStatus)
	_ = json.NewEncoder(w).Encode(struct {
		Code    codes.Code `json:"code"`
		Message string     `json:"message"`
		Details []any      `json:"details"`
	}{code, msg, []any{}})
}

// isTimeout reports whether err is a read that ran past its deadline.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// APIHeaders sets on every answer of the API (not the console's files,
// which set their own) the headers that keep it out of caches and out of
// HTML: Cache-Control: no-store (with Pragma: no-cache for HTTP/1.0
// caches), as RFC 6749 requires of a token response and as any answer
// read with a credential (an API key's secret, a job's environment, logs)
// needs, so that no shared cache, proxy or browser disk keeps it; and
// X-Content-Type-Options: nosniff with a Content-Security-Policy that
// allows nothing, so that a browser never renders an answer (which holds
// job names, labels and error messages its callers chose) as a page or
// in a frame.
func APIHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		setAPIHeaders(w.Header())
		h.ServeHTTP(w, r)
	})
}

// setAPIHeaders sets APIHeaders' headers on hd; writeError sets them too,
// since limitBody answers before APIHeaders runs.
func setAPIHeaders(hd http.Header) {
	hd.Set("Cache-Control", "no-store")
	hd.Set("Pragma", "no-cache")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Content-Security-Policy", APICSP)
}

// APICSP is the Content-Security-Policy of the API's answers: they are
// data, never a page, so nothing may load or frame them.
const APICSP = "default-src 'none'; frame-ancestors 'none'"

// OnlyFromThisSite guards the REST port of a gateway with authentication
// off, where every caller is a cluster administrator: there the caller's
// own browser is the risk (a web page that POSTs a job as text/plain, or
// rebinds a name to 127.0.0.1 and reads the answers). It refuses, 403 with
// the reason, what localsite.Refusal refuses.
func OnlyFromThisSite(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if why := localsite.Refusal(r); why != "" {
			const off = "authentication is off on this gateway, so it takes requests only from its own pages and clients: "
			writeError(w, http.StatusForbidden, codes.PermissionDenied, off+why)
			return
		}
		h.ServeHTTP(w, r)
	})
}

package embedded

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	rpccode "google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loom-ml/loom/libs/localsite"
)

// Bounds of the REST publish endpoint: Google's own Pub/Sub limits (a
// publish request of at most 10 MB and 1,000 messages).
const (
	pubSubRESTMaxBody     = 10 << 20
	pubSubRESTMaxMessages = 1000
)

// StartREST serves the fake's publish call as Google's REST API does,
// `POST /v1/projects/{project}/topics/{topic}:publish`, on addr ("" or
// port 0 picks a free port; loopback only), and sets RESTAddr. pstest
// serves gRPC only, and `gcloud pubsub topics publish` speaks REST: with
// CLOUDSDK_API_ENDPOINT_OVERRIDES_PUBSUB=http://<RESTAddr>/ gcloud
// publishes to the fake. Nothing else of the REST API is served: other
// paths answer 404 saying so. A request a web page could have sent
// (localsite.Refusal: text/plain, another Origin, a rebound Host) is
// refused 403. Close stops it with the fake.
func (p *PubSub) StartREST(addr string) error {
	port, err := loopbackPort(addr)
	if err != nil {
		return fmt.Errorf("start pubsub REST: %w", err)
	}
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return fmt.Errorf("start pubsub REST on 127.0.0.1:%d: %w", port, err)
	}
	p.RESTAddr = ln.Addr().String()
	p.rest = &http.Server{Handler: http.HandlerFunc(p.servePublish), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.rest.Serve(ln) }()
	return nil
}

// restMessage is a PubsubMessage as the REST API writes it: data in
// base64 (encoding/json decodes []byte from it).
type restMessage struct {
	Data        []byte            `json:"data"`
	Attributes  map[string]string `json:"attributes"`
	OrderingKey string            `json:"orderingKey"`
}

func (p *PubSub) servePublish(w http.ResponseWriter, r *http.Request) {
	topic, ok := strings.CutSuffix(strings.TrimPrefix(r.URL.Path, "/v1/"), ":publish")
	parts := strings.Split(topic, "/")
	if !ok || !strings.HasPrefix(r.URL.Path, "/v1/") || len(parts) != 4 || parts[0] != "projects" || parts[2] != "topics" || parts[1] == "" || parts[3] == "" {
		writeRESTError(w, status.Error(codes.NotFound, r.URL.Path+": this Pub/Sub fake serves only POST /v1/projects/{project}/topics/{topic}:publish over REST; use its gRPC API (PUBSUB_EMULATOR_HOST) for the rest"))
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeRESTError(w, status.Errorf(codes.Unimplemented, "%s %s: only POST publishes", r.Method, r.URL.Path))
		return
	}
	// It publishes for whoever asks, as the fake's gRPC port does; but a
	// web page the user visits reaches this one too (a text/plain POST
	// needs no CORS preflight, and the JSON below is read all the same):
	// forged events on loom-events, messages on the ingress.
	if why := localsite.Refusal(r); why != "" {
		writeRESTError(w, status.Error(codes.PermissionDenied, "this Pub/Sub fake publishes over REST only for this machine's clients (gcloud), not for web pages: "+why))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, pubSubRESTMaxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusRequestEntityTooLarge)
			_ = json.NewEncoder(w).Encode(restError(http.StatusRequestEntityTooLarge, codes.InvalidArgument, fmt.Sprintf("request: larger than %d bytes, Pub/Sub's limit for a publish request", pubSubRESTMaxBody)))
			return
		}
		writeRESTError(w, status.Errorf(codes.InvalidArgument, "request: %v", err))
		return
	}
	var req struct {
		Messages []restMessage `json:"messages"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		writeRESTError(w, status.Errorf(codes.InvalidArgument, "request: not a publish request (JSON {\"messages\": [{\"data\": base64, \"attributes\": {...}}]}): %v", err))
		return
	}
	if n := len(req.Messages); n == 0 || n > pubSubRESTMaxMessages {
		writeRESTError(w, status.Errorf(codes.InvalidArgument, "messages: %d given, want 1 to %d", n, pubSubRESTMaxMessages))
		return
	}
	preq := &pubsubpb.PublishRequest{Topic: topic}
	for _, m := range req.Messages {
		preq.Messages = append(preq.Messages, &pubsubpb.PubsubMessage{Data: m.Data, Attributes: m.Attributes, OrderingKey: m.OrderingKey})
	}
	// The fake's own Publish: the same checks (the topic exists, a
	// message has data or attributes) and the same delivery as over gRPC.
	resp, err := p.srv.GServer.Publish(r.Context(), preq)
	if err != nil {
		writeRESTError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string][]string{"messageIds": resp.GetMessageIds()})
}

// restError is Google's JSON error body, for HTTP status httpCode; its
// status is google.rpc.Code's name ("INVALID_ARGUMENT").
func restError(httpCode int, code codes.Code, msg string) any {
	return map[string]any{"error": map[string]any{
		"code": httpCode, "message": msg, "status": rpccode.Code(code).String(),
	}}
}

// writeRESTError writes err as Google's REST APIs do, with the HTTP status
// grpc-gateway maps its gRPC code to.
func writeRESTError(w http.ResponseWriter, err error) {
	st := status.Convert(err)
	w.Header().Set("Content-Type", "application/json")
	httpCode := runtime.HTTPStatusFromCode(st.Code())
	w.WriteHeader(httpCode)
	_ = json.NewEncoder(w).Encode(restError(httpCode, st.Code(), st.Message()))
}

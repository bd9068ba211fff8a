// Package ingress is the bridge's way in: CloudEvents that other systems
// produce (the Kafka topic loom.ingress.v1, Pub/Sub subscriptions) become
// calls through the gateway's API, with the credential each message carries,
// so that the gateway's authentication, permission table, validation, rate
// limits and quotas decide them exactly as they decide an API call.
//
// The package has three layers:
//
//   - the core (this file, no I/O): Decide turns a delivery into a Call or a
//     Refusal, and Classify turns the gateway's answer into a decision or a
//     retry;
//   - the App (app.go): the cloudevent.Handler that dedupes in Redis, calls
//     the gateway, dead-letters refusals, publishes the IngressResult and
//     records the decision, and the IngressService server (server.go) that
//     reads those records;
//   - the Kafka transport (kafka.go): the Source on loom.ingress.v1 and its
//     dead letters on loom.ingress.v1.dlq.
package ingress

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"mime"
	"sort"
	"strings"
	"time"

	rpccode "google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/loom-ml/loom/libs/resname"
	publicv1 "github.com/loom-ml/loom/proto/loom/public/v1"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/bridge/internal/cloudevent"
)

// TypePrefix starts every ingress message type (ce_type).
const TypePrefix = "loom.ingress.v1."

// RequestIDPrefix starts the request ids the bridge derives from a message's
// idempotency key: "ing-" and 32 hex digits, far inside the gateway's
// request_id bound (128 bytes of text without control characters).
const RequestIDPrefix = "ing-"

// JSONRecursionLimit bounds how deep a message's JSON may nest. No request
// Loom accepts comes near it; a deeper document is refused as invalid
// rather than parsed.
const JSONRecursionLimit = 64

// Outcome names, as IngressMessage.outcome and the metrics' label spell them.
const (
	OutcomeAccepted = "ACCEPTED"
	OutcomeRefused  = "REFUSED"
	OutcomeInvalid  = "INVALID"
	OutcomeFailed   = "FAILED"
)

// Method is one ingress message type's API call.
type Method struct {
	// Type is the CloudEvents type, "loom.ingress.v1.SubmitJob".
	Type string
	// FullMethod is the gRPC method, "/loom.v1.JobService/SubmitJob".
	FullMethod string
	// NewRequest and NewResponse make the call's messages.
	NewRequest, NewResponse func() proto.Message
}

func method[Req, Resp any, PReq interface {
	*Req
	proto.Message
}, PResp interface {
	*Resp
	proto.Message
}](name, full string) Method {
	return Method{Type: TypePrefix + name, FullMethod: full,
		NewRequest:  func() proto.Message { return PReq(new(Req)) },
		NewResponse: func() proto.Message { return PResp(new(Resp)) }}
}

// Methods is the table of ingress message types (docs/integration.md
// "Messages"): each is the API call of the same name, its data the request
// as JSON.
var Methods = map[string]Method{}

func init() {
	for _, m := range []Method{
		method[loomv1.SubmitJobRequest, loomv1.Job]("SubmitJob", loomv1.JobService_SubmitJob_FullMethodName),
		method[loomv1.CancelJobRequest, loomv1.Job]("CancelJob", loomv1.JobService_CancelJob_FullMethodName),
		method[trainingv1.CreateCustomJobRequest, trainingv1.CustomJob]("CreateCustomJob", trainingv1.TrainingService_CreateCustomJob_FullMethodName),
		method[trainingv1.CancelCustomJobRequest, trainingv1.Empty]("CancelCustomJob", trainingv1.TrainingService_CancelCustomJob_FullMethodName),
		method[trainingv1.CreateHyperparameterTuningJobRequest, trainingv1.HyperparameterTuningJob]("CreateHyperparameterTuningJob", trainingv1.TrainingService_CreateHyperparameterTuningJob_FullMethodName),
		method[trainingv1.CancelHyperparameterTuningJobRequest, trainingv1.Empty]("CancelHyperparameterTuningJob", trainingv1.TrainingService_CancelHyperparameterTuningJob_FullMethodName),
		method[trainingv1.CreateTrainingPipelineRequest, trainingv1.TrainingPipeline]("CreateTrainingPipeline", trainingv1.TrainingService_CreateTrainingPipeline_FullMethodName),
		method[loomv1.ReportFaultyNodesRequest, loomv1.ReportFaultyNodesResponse]("ReportFaultyNodes", loomv1.HealthService_ReportFaultyNodes_FullMethodName),
		method[loomv1.UploadModelRequest, loomv1.Operation]("UploadModel", loomv1.ModelService_UploadModel_FullMethodName),
	} {
		Methods[m.Type] = m
	}
}

// typeNames is the sorted list of known types, for the unknown-type reason.
func typeNames() string {
	names := make([]string, 0, len(Methods))
	for t := range Methods {
		names = append(names, strings.TrimPrefix(t, TypePrefix))
	}
	sort.Strings(names)
	return TypePrefix + "{" + strings.Join(names, ",") + "}"
}

// Key is a message's idempotency key: hex(sha256(source "\n" id)). A
// message without an id or a source (malformed, never applied) is keyed by
// a hash of everything it carried instead, so that two different malformed
// messages are not taken for redeliveries of one another.
func Key(d cloudevent.Delivery) string {
	if d.Event.ID != "" && d.Event.Source != "" {
		sum := sha256.Sum256([]byte(d.Event.Source + "\n" + d.Event.ID))
		return hex.EncodeToString(sum[:])
	}
	h := sha256.New()
	keys := make([]string, 0, len(d.Raw.Attributes))
	for k := range d.Raw.Attributes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	h.Write([]byte("malformed\n"))
	for _, k := range keys {
		fmt.Fprintf(h, "%q=%q\n", k, d.Raw.Attributes[k])
	}
	h.Write(d.Raw.Key)
	h.Write([]byte{0})
	h.Write(d.Raw.Data)
	return hex.EncodeToString(h.Sum(nil))
}

// CredentialTag is a short hash of the message's credential ("" without
// one): what tells two producers' messages with the same key apart
// without keeping the credential.
func CredentialTag(d cloudevent.Delivery) string {
	c := d.Event.Extensions[cloudevent.ExtCredential]
	if c == "" {
		c = d.Raw.Attributes["ce_"+cloudevent.ExtCredential] + d.Raw.Attributes["ce-"+cloudevent.ExtCredential]
	}
	if c == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(c))
	return hex.EncodeToString(sum[:8])
}

// ScopedKey is the key of a message whose key another credential used
// first: hex(sha256(key "\n" tag)). Without it a producer (even one with
// no valid credential) could send another's source and id first and have
// the real message taken for its redelivery and dropped.
func ScopedKey(key, tag string) string {
	sum := sha256.Sum256([]byte(key + "\n" + tag))
	return hex.EncodeToString(sum[:])
}

// RequestID is the request id the bridge sends for a message's key: stable
// across redeliveries, so that the gateway's request_id idempotency applies
// the message once even when the bridge crashed between the call and its
// record.
func RequestID(key string) string { return RequestIDPrefix + key[:min(32, len(key))] }

// Call is what an acceptable message becomes: one API call.
type Call struct {
	Method Method
	// Request is the parsed request, its request_id set where it has one.
	Request proto.Message
	// Credential is the producer's API key (never logged or copied).
	Credential string
	// Project is the project the request acts in ("" when it names none,
	// as ReportFaultyNodes of a cluster outside projects).
	Project string
}

// Refusal is a message refused before or by the call: its outcome
// (REFUSED, INVALID or FAILED), the gRPC code name the same call through
// the API would get, and a reason that says what to change.
type Refusal struct {
	Outcome string
	Code    codes.Code
	Reason  string
}

// CodeName is the gRPC code's name as the API spells it
// ("PERMISSION_DENIED"): google.rpc.Code's.
func CodeName(c codes.Code) string { return rpccode.Code(c).String() }

func invalid(format string, args ...any) *Refusal {
	return &Refusal{Outcome: OutcomeInvalid, Code: codes.InvalidArgument, Reason: fmt.Sprintf(format, args...)}
}

// Decide reads one delivery into the call it asks for, or refuses it: not a
// CloudEvent, over a bound (maxData bytes of data), an unknown type, no
// credential, data that is not JSON or not the request's shape. Nothing is
// called here; the gateway decides the rest (who may, and what is valid).
func Decide(d cloudevent.Delivery, maxData int) (*Call, *Refusal) {
	return decideKeyed(d, maxData, Key(d))
}

// decideKeyed is Decide with the message's key given (ScopedKey's when
// another credential had the message's key first).
func decideKeyed(d cloudevent.Delivery, maxData int, key string) (*Call, *Refusal) {
	if d.ParseErr != nil {
		return nil, invalid("%v", d.ParseErr)
	}
	ev := d.Event
	if err := ev.Validate(maxData); err != nil {
		return nil, invalid("%v", err)
	}
	m, ok := Methods[ev.Type]
	if !ok {
		return nil, invalid("CloudEvents type %q is not an ingress message type: want one of %s", clip(ev.Type), typeNames())
	}
	cred := ev.Extensions[cloudevent.ExtCredential]
	if cred == "" {
		return nil, &Refusal{Outcome: OutcomeRefused, Code: codes.Unauthenticated,
			Reason: "the CloudEvents extension attribute \"credential\" (Kafka header ce_credential, Pub/Sub attribute ce-credential) is required: " +
				"a Loom API key of a member of the project, made with `loom auth keys create`"}
	}
	if ct := ev.DataContentType; ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return nil, invalid("datacontenttype %q: the data must be JSON (application/json)", clip(ct))
		}
	}
	if len(ev.Data) == 0 {
		return nil, invalid("data is empty: want the %s request as JSON", strings.TrimPrefix(m.FullMethod, "/"))
	}
	req := m.NewRequest()
	opts := protojson.UnmarshalOptions{DiscardUnknown: false, RecursionLimit: JSONRecursionLimit}
	if err := opts.Unmarshal(ev.Data, req); err != nil {
		return nil, invalid("data is not a %s as JSON (protojson, camelCase or snake_case field names, at most %d levels deep): %v",
			req.ProtoReflect().Descriptor().FullName(), JSONRecursionLimit, clip(err.Error()))
	}
	setRequestID(req, RequestID(key))
	return &Call{Method: m, Request: req, Credential: cred, Project: ProjectOf(req)}, nil
}

// setRequestID sets the request's request_id, where it has one, unless the
// producer set its own: both are stable across redeliveries.
func setRequestID(req proto.Message, id string) {
	r := req.ProtoReflect()
	f := r.Descriptor().Fields().ByName("request_id")
	if f == nil || f.Kind() != protoreflect.StringKind || r.Get(f).String() != "" {
		return
	}
	r.Set(f, protoreflect.ValueOfString(id))
}

// ProjectOf is the project a request acts in: the project of its parent,
// name or cluster ("projects/{p}/..."), or "" when it names none that is a
// valid project id.
func ProjectOf(req proto.Message) string {
	r := req.ProtoReflect()
	for _, name := range []protoreflect.Name{"parent", "name", "cluster"} {
		f := r.Descriptor().Fields().ByName(name)
		if f == nil || f.Kind() != protoreflect.StringKind {
			continue
		}
		if p := projectOfName(r.Get(f).String()); p != "" {
			return p
		}
	}
	return ""
}

func projectOfName(name string) string {
	rest, ok := strings.CutPrefix(name, "projects/")
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(rest, "/")
	if !resname.ValidID(id) {
		return ""
	}
	return id
}

// ResourceOf is the name of what a call created or touched: the response's
// name (for UploadModel, its operation's: the gateway answers the upload
// accepted, and the version is the operation's once done), or else the
// request's name.
func ResourceOf(req, resp proto.Message) string {
	if resp != nil {
		r := resp.ProtoReflect()
		fs := r.Descriptor().Fields()
		if f := fs.ByName("name"); f != nil && f.Kind() == protoreflect.StringKind && r.Get(f).String() != "" {
			return r.Get(f).String()
		}
	}
	if req != nil {
		r := req.ProtoReflect()
		if f := r.Descriptor().Fields().ByName("name"); f != nil && f.Kind() == protoreflect.StringKind {
			return r.Get(f).String()
		}
	}
	return ""
}

// Class is what to do with the gateway's answer.
type Class int

const (
	// Applied: the call succeeded (OK).
	Applied Class = iota
	// Decided: the gateway refused; Classify's Refusal says how.
	Decided
	// Retry: a transient failure (the gateway or a service behind it is
	// down, a deadline, a conflict, the rate limit): call again with backoff.
	Retry
	// RetryThenFail: an internal or unknown error: call again a bounded
	// number of times, then the message FAILED.
	RetryThenFail
)

// Classify sorts the gateway's error:
//
//   - OK → Applied;
//   - Unauthenticated, PermissionDenied, and ResourceExhausted for a quota
//     or a count limit → REFUSED: the caller may not, or not now without
//     freeing something;
//   - InvalidArgument, NotFound, AlreadyExists, FailedPrecondition,
//     OutOfRange, Unimplemented → INVALID (but see ForProject: NotFound
//     naming the request's project is REFUSED): the request is wrong for
//     the state it met. AlreadyExists is a decision too: with the bridge's
//     own request ids a retried create is answered with the first result
//     (OK), so AlreadyExists means a producer-chosen id or request_id that
//     another request took;
//   - Unavailable, DeadlineExceeded, Aborted, Canceled, and
//     ResourceExhausted from the rate limit → Retry. The gateway marks a
//     rate refusal with a RetryInfo detail or, as its limiter does today,
//     with "rate limit:" in the message (guard.ErrRateLimited);
//   - Internal, Unknown, DataLoss and anything else → RetryThenFail.
func Classify(err error) (Class, *Refusal) {
	if err == nil {
		return Applied, nil
	}
	st := status.Convert(err)
	ref := func(outcome string) *Refusal {
		return &Refusal{Outcome: outcome, Code: st.Code(), Reason: clip(st.Message())}
	}
	switch st.Code() {
	case codes.OK:
		return Applied, nil
	case codes.Unauthenticated, codes.PermissionDenied:
		return Decided, ref(OutcomeRefused)
	case codes.ResourceExhausted:
		if RateLimited(st) {
			return Retry, ref(OutcomeRefused)
		}
		return Decided, ref(OutcomeRefused)
	case codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.FailedPrecondition, codes.OutOfRange, codes.Unimplemented:
		return Decided, ref(OutcomeInvalid)
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted, codes.Canceled:
		return Retry, ref(OutcomeFailed)
	}
	return RetryThenFail, ref(OutcomeFailed)
}

// ForProject refines a refusal of a call acting in project: the gateway
// answers a caller with no role in the project NotFound naming the project
// ("projects/p: not found"), whether or not the project exists, so that
// ids cannot be probed. For a message that is a key acting outside its
// projects: REFUSED, with the code kept as the API gives it (NOT_FOUND, not
// PERMISSION_DENIED, which would say that the project exists) and a reason
// that says what to check.
func ForProject(ref *Refusal, project string) *Refusal {
	if ref == nil || ref.Code != codes.NotFound || project == "" ||
		!strings.HasPrefix(ref.Reason, resname.Project{ID: project}.String()+": not found") {
		return ref
	}
	out := *ref
	out.Outcome = OutcomeRefused
	out.Reason = clip(ref.Reason + ": the credential's principal has no role in project " + project +
		" (or the project does not exist); a message acts with its key's rights, so use a key of a member of " + project)
	return &out
}

// RateLimited says whether a ResourceExhausted status is the rate limit
// (retry later) rather than a quota (a decision).
func RateLimited(st *status.Status) bool {
	for _, d := range st.Details() {
		if _, ok := d.(*errdetails.RetryInfo); ok {
			return true
		}
	}
	return strings.Contains(st.Message(), "rate limit:")
}

// RetryDelay is the server's RetryInfo delay, or 0.
func RetryDelay(err error) time.Duration {
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return 0
}

// OutcomeOf is the public contract's outcome of an outcome name.
func OutcomeOf(outcome string) publicv1.IngressResult_Outcome {
	return publicv1.IngressResult_Outcome(publicv1.IngressResult_Outcome_value[outcome])
}

// maxReason bounds a reason (and anything quoted into one) copied into a
// dead letter header, a record and a result.
const maxReason = 900

// clip bounds s for a reason, marking the cut.
func clip(s string) string {
	if len(s) <= maxReason {
		return s
	}
	cut := maxReason
	for cut > 0 && s[cut]&0xC0 == 0x80 { // not inside a UTF-8 sequence
		cut--
	}
	return s[:cut] + "…"
}

package ingress

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/segmentio/kafka-go"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	publicv1 "github.com/loom-ml/loom/proto/loom/public/v1"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/bridge/internal/cloudevent"
)

// record is a Kafka record in binary mode with the given overrides; a
// header set to "" is left out.
func record(typ, data string, over map[string]string) kafka.Message {
	h := map[string]string{"ce_specversion": "1.0", "ce_id": "m-1", "ce_source": "//pipeline/a",
		"ce_type": typ, "ce_credential": "loomk_secret", "content-type": "application/json"}
	for k, v := range over {
		h[k] = v
	}
	m := kafka.Message{Value: []byte(data)}
	for k, v := range h {
		if v != "" {
			m.Headers = append(m.Headers, kafka.Header{Key: k, Value: []byte(v)})
		}
	}
	return m
}

func TestDecideRefuses(t *testing.T) {
	t.Parallel()
	submit := TypePrefix + "SubmitJob"
	good := `{"parent":"projects/default","job":{"cluster":"projects/default/clusters/c","script":"#!/bin/sh\ntrue\n","nodeCount":1}}`
	dupHeaders := record(submit, good, nil)
	dupHeaders.Headers = append(dupHeaders.Headers, kafka.Header{Key: "ce_credential", Value: []byte("loomk_other")})
	manyHeaders := record(submit, good, nil)
	for i := range 100 {
		manyHeaders.Headers = append(manyHeaders.Headers, kafka.Header{Key: "x" + strings.Repeat("y", i), Value: []byte("v")})
	}
	cases := []struct {
		name    string
		m       kafka.Message
		outcome string
		code    codes.Code
		want    []string // in the reason
	}{
		{"not a CloudEvent", record(submit, good, map[string]string{"ce_specversion": ""}), OutcomeInvalid, codes.InvalidArgument, []string{"specversion"}},
		{"other specversion", record(submit, good, map[string]string{"ce_specversion": "0.3"}), OutcomeInvalid, codes.InvalidArgument, []string{"0.3"}},
		{"no id", record(submit, good, map[string]string{"ce_id": ""}), OutcomeInvalid, codes.InvalidArgument, []string{`"id" is required`}},
		{"huge id", record(submit, good, map[string]string{"ce_id": strings.Repeat("i", 2000)}), OutcomeInvalid, codes.InvalidArgument, []string{"ce_id", "1024"}},
		{"duplicate header", dupHeaders, OutcomeInvalid, codes.InvalidArgument, []string{"ce_credential", "twice"}},
		{"too many headers", manyHeaders, OutcomeInvalid, codes.InvalidArgument, []string{"limit of 72"}},
		{"bad time", record(submit, good, map[string]string{"ce_time": "yesterday"}), OutcomeInvalid, codes.InvalidArgument, []string{"RFC 3339"}},
		{"unknown type", record("com.example.DoIt", good, nil), OutcomeInvalid, codes.InvalidArgument, []string{"com.example.DoIt", "SubmitJob", "UploadModel"}},
		{"no credential", record(submit, good, map[string]string{"ce_credential": ""}), OutcomeRefused, codes.Unauthenticated, []string{"ce_credential", "required"}},
		{"not JSON content", record(submit, good, map[string]string{"content-type": "text/plain"}), OutcomeInvalid, codes.InvalidArgument, []string{"text/plain", "JSON"}},
		{"empty data", record(submit, "", nil), OutcomeInvalid, codes.InvalidArgument, []string{"empty", "SubmitJob"}},
		{"bad JSON", record(submit, `{"parent":`, nil), OutcomeInvalid, codes.InvalidArgument, []string{"loom.v1.SubmitJobRequest"}},
		{"wrong type", record(submit, `{"parent":5}`, nil), OutcomeInvalid, codes.InvalidArgument, []string{"parent"}},
		{"unknown field", record(submit, `{"parent":"projects/p","bogus":1}`, nil), OutcomeInvalid, codes.InvalidArgument, []string{"bogus"}},
		{"deep nesting", record(submit, `{"parent":`+strings.Repeat("[", 1500)+strings.Repeat("]", 1500)+`}`, nil), OutcomeInvalid, codes.InvalidArgument, []string{"SubmitJobRequest"}},
		{"over the data limit", record(submit, `{"parent":"`+strings.Repeat("p", 5000)+`"}`, nil), OutcomeInvalid, codes.InvalidArgument, []string{"4096", "-max-message-bytes"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			call, ref := Decide(Delivery("kafka:t", c.m), 4096)
			if call != nil || ref == nil {
				t.Fatalf("Decide = %v, %v; want a refusal", call, ref)
			}
			if ref.Outcome != c.outcome || ref.Code != c.code {
				t.Errorf("refusal %s %v, want %s %v (%s)", ref.Outcome, ref.Code, c.outcome, c.code, ref.Reason)
			}
			for _, w := range c.want {
				if !strings.Contains(ref.Reason, w) {
					t.Errorf("reason %q does not say %q", ref.Reason, w)
				}
			}
			if strings.Contains(ref.Reason, "loomk_secret") {
				t.Errorf("reason %q carries the credential", ref.Reason)
			}
			if len(ref.Reason) > maxReason+10 {
				t.Errorf("reason is %d bytes, over the bound", len(ref.Reason))
			}
		})
	}
}

func TestDecideCalls(t *testing.T) {
	t.Parallel()
	d := Delivery("kafka:t", record(TypePrefix+"SubmitJob",
		`{"parent":"projects/default","job":{"cluster":"projects/default/clusters/c","node_count":2}}`, nil))
	call, ref := Decide(d, 0)
	if ref != nil {
		t.Fatalf("refused: %+v", ref)
	}
	req := call.Request.(*loomv1.SubmitJobRequest)
	if call.Method.FullMethod != "/loom.v1.JobService/SubmitJob" || call.Project != "default" || call.Credential != "loomk_secret" ||
		req.GetJob().GetNodeCount() != 2 {
		t.Fatalf("call %+v %v", call, req)
	}
	// The request id: derived from the key, stable, within the gateway's
	// request_id bound (128 bytes, no control characters).
	if want := RequestID(Key(d)); req.GetRequestId() != want || len(want) != 36 || !strings.HasPrefix(want, "ing-") {
		t.Fatalf("request_id %q, want %q", req.GetRequestId(), want)
	}
	again, _ := Decide(Delivery("kafka:t", record(TypePrefix+"SubmitJob", `{"parent":"projects/default"}`, nil)), 0)
	if again.Request.(*loomv1.SubmitJobRequest).GetRequestId() != req.GetRequestId() {
		t.Error("the same source and id gave another request id")
	}
	other, _ := Decide(Delivery("kafka:t", record(TypePrefix+"SubmitJob", `{"parent":"projects/default"}`, map[string]string{"ce_id": "m-2"})), 0)
	if other.Request.(*loomv1.SubmitJobRequest).GetRequestId() == req.GetRequestId() {
		t.Error("another id gave the same request id")
	}
	// A producer's own request_id is kept.
	own, _ := Decide(Delivery("kafka:t", record(TypePrefix+"SubmitJob", `{"parent":"projects/default","requestId":"mine"}`, nil)), 0)
	if got := own.Request.(*loomv1.SubmitJobRequest).GetRequestId(); got != "mine" {
		t.Errorf("request_id %q, want the producer's", got)
	}

	for _, c := range []struct {
		typ, data, method, project string
	}{
		{"CancelJob", `{"name":"projects/a/jobs/12"}`, "/loom.v1.JobService/CancelJob", "a"},
		{"CreateCustomJob", `{"parent":"projects/b/locations/local","customJob":{"displayName":"x"}}`, "/loom.training.v1.TrainingService/CreateCustomJob", "b"},
		{"CancelCustomJob", `{"name":"projects/b/locations/local/customJobs/7"}`, "/loom.training.v1.TrainingService/CancelCustomJob", "b"},
		{"CreateHyperparameterTuningJob", `{"parent":"projects/b/locations/local"}`, "/loom.training.v1.TrainingService/CreateHyperparameterTuningJob", "b"},
		{"CancelHyperparameterTuningJob", `{"name":"projects/b/locations/local/hyperparameterTuningJobs/7"}`, "/loom.training.v1.TrainingService/CancelHyperparameterTuningJob", "b"},
		{"CreateTrainingPipeline", `{"parent":"projects/b/locations/local"}`, "/loom.training.v1.TrainingService/CreateTrainingPipeline", "b"},
		{"ReportFaultyNodes", `{"cluster":"projects/c/clusters/x","hostnames":["n1"]}`, "/loom.v1.HealthService/ReportFaultyNodes", "c"},
		{"UploadModel", `{"parent":"projects/d/locations/local","model":{"displayName":"m"}}`, "/loom.v1.ModelService/UploadModel", "d"},
		{"CancelJob", `{"name":"projects/NOT-AN-ID/jobs/1"}`, "/loom.v1.JobService/CancelJob", ""},
	} {
		call, ref := Decide(Delivery("kafka:t", record(TypePrefix+c.typ, c.data, nil)), 0)
		if ref != nil {
			t.Errorf("%s refused: %+v", c.typ, ref)
			continue
		}
		if call.Method.FullMethod != c.method || call.Project != c.project {
			t.Errorf("%s: method %s project %q, want %s %q", c.typ, call.Method.FullMethod, call.Project, c.method, c.project)
		}
	}
	if len(Methods) != 9 {
		t.Errorf("%d methods, want the 9 of docs/integration.md's Messages", len(Methods))
	}
}

func TestKeyOfMalformedMessages(t *testing.T) {
	t.Parallel()
	a := Delivery("k", record("x", "one", map[string]string{"ce_id": ""}))
	b := Delivery("k", record("x", "two", map[string]string{"ce_id": ""}))
	if Key(a) == Key(b) {
		t.Error("two different malformed messages share a key: the second would be taken for a redelivery")
	}
	if Key(a) != Key(Delivery("k", record("x", "one", map[string]string{"ce_id": ""}))) {
		t.Error("a malformed message's key is not stable")
	}
	good := Delivery("k", record("x", "one", nil))
	if Key(good) != Key(Delivery("k", record("y", "other data", nil))) {
		t.Error("the key of a well-formed message depends on more than its source and id")
	}
}

func TestResourceOf(t *testing.T) {
	t.Parallel()
	if got := ResourceOf(&loomv1.SubmitJobRequest{}, &loomv1.Job{Name: "projects/p/jobs/3"}); got != "projects/p/jobs/3" {
		t.Errorf("job: %q", got)
	}
	if got := ResourceOf(&loomv1.UploadModelRequest{}, &loomv1.Operation{Name: "projects/p/operations/o1"}); got != "projects/p/operations/o1" {
		t.Errorf("upload: %q", got)
	}
	if got := ResourceOf(&trainingv1.CancelCustomJobRequest{Name: "projects/p/locations/l/customJobs/1"}, &trainingv1.Empty{}); got != "projects/p/locations/l/customJobs/1" {
		t.Errorf("cancel: %q", got)
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	retryInfo, err := status.New(codes.ResourceExhausted, "slow down").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(3e9)})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		err     error
		class   Class
		outcome string
	}{
		{"ok", nil, Applied, ""},
		{"unauthenticated", status.Error(codes.Unauthenticated, "bad key"), Decided, OutcomeRefused},
		{"permission", status.Error(codes.PermissionDenied, "not a member"), Decided, OutcomeRefused},
		{"quota", status.Error(codes.ResourceExhausted, "project p: pending_jobs 11, the quota is 10: resource exhausted"), Decided, OutcomeRefused},
		{"rate limit (the gateway's message)", status.Error(codes.ResourceExhausted, "users/a: more than 5 requests a second (LOOM_GATEWAY_RATE); slow down and retry: rate limit: resource exhausted"), Retry, OutcomeRefused},
		{"rate limit (RetryInfo)", retryInfo.Err(), Retry, OutcomeRefused},
		{"invalid", status.Error(codes.InvalidArgument, "job.node_count: must be positive"), Decided, OutcomeInvalid},
		{"not found", status.Error(codes.NotFound, "no job"), Decided, OutcomeInvalid},
		{"already exists", status.Error(codes.AlreadyExists, "request_id taken"), Decided, OutcomeInvalid},
		{"precondition", status.Error(codes.FailedPrecondition, "job ended"), Decided, OutcomeInvalid},
		{"unavailable", status.Error(codes.Unavailable, "down"), Retry, OutcomeFailed},
		{"deadline", status.Error(codes.DeadlineExceeded, "slow"), Retry, OutcomeFailed},
		{"aborted", status.Error(codes.Aborted, "conflict"), Retry, OutcomeFailed},
		{"internal", status.Error(codes.Internal, "bug"), RetryThenFail, OutcomeFailed},
		{"unknown", status.Error(codes.Unknown, "?"), RetryThenFail, OutcomeFailed},
		{"not a status", errors.New("plain"), RetryThenFail, OutcomeFailed},
	}
	for _, c := range cases {
		class, ref := Classify(c.err)
		if class != c.class || (ref == nil) != (c.outcome == "") || (ref != nil && ref.Outcome != c.outcome) {
			t.Errorf("%s: class %d ref %+v, want %d %s", c.name, class, ref, c.class, c.outcome)
		}
	}
	if d := RetryDelay(retryInfo.Err()); d != 3e9 {
		t.Errorf("RetryDelay %v, want 3s", d)
	}
	for c, want := range map[codes.Code]string{codes.OK: "OK", codes.PermissionDenied: "PERMISSION_DENIED",
		codes.InvalidArgument: "INVALID_ARGUMENT", codes.DeadlineExceeded: "DEADLINE_EXCEEDED", codes.Unauthenticated: "UNAUTHENTICATED"} {
		if got := CodeName(c); got != want {
			t.Errorf("CodeName(%v) = %q, want %q", c, got, want)
		}
	}
}

func TestParseFilter(t *testing.T) {
	t.Parallel()
	m := &loomv1.IngressMessage{Outcome: OutcomeRefused, Source: "//a b", Type: TypePrefix + "SubmitJob", Principal: "users/x"}
	for _, c := range []struct {
		filter string
		match  bool
	}{
		{"", true},
		{`outcome = "REFUSED"`, true},
		{`outcome = refused`, true},
		{`outcome="ACCEPTED"`, false},
		{`outcome = "REFUSED" AND source = "//a b"`, true},
		{`source = "//a b" AND principal = "users/y"`, false},
		{`type = "loom.ingress.v1.SubmitJob" AND source = "x AND y"`, false},
	} {
		f, err := ParseFilter(c.filter)
		if err != nil {
			t.Errorf("ParseFilter(%q): %v", c.filter, err)
			continue
		}
		if f.Match(m) != c.match {
			t.Errorf("%q matches %v, want %v", c.filter, !c.match, c.match)
		}
	}
	for _, bad := range []string{`color = "red"`, `outcome = "MAYBE"`, `outcome = "REFUSED" OR outcome = "INVALID"`,
		`source = "unterminated`, `source = a b`, `outcome`, strings.Repeat("x", MaxFilterLen+1),
		`outcome = "REFUSED" AND outcome = "INVALID"`} {
		_, err := ParseFilter(bad)
		if status.Code(toStatus(err)) != codes.InvalidArgument || !strings.Contains(err.Error(), "filter") {
			t.Errorf("ParseFilter(%q) = %v, want InvalidArgument naming filter", clip(bad), err)
		}
	}
}

func TestForProject(t *testing.T) {
	t.Parallel()
	_, nf := Classify(status.Error(codes.NotFound, "projects/default: not found"))
	r := ForProject(nf, "default")
	if r.Outcome != OutcomeRefused || r.Code != codes.NotFound || !strings.Contains(r.Reason, "no role in project default") {
		t.Errorf("a key outside its projects: %+v", r)
	}
	_, job := Classify(status.Error(codes.NotFound, "job projects/default/jobs/9: not found"))
	if r := ForProject(job, "default"); r.Outcome != OutcomeInvalid {
		t.Errorf("a missing job: %+v, want INVALID", r)
	}
	if r := ForProject(nf, "other"); r.Outcome != OutcomeInvalid {
		t.Errorf("another project's not found: %+v, want INVALID", r)
	}
}

func TestResultEventBoundsItsSubject(t *testing.T) {
	t.Parallel()
	id := strings.Repeat("é", 600) // 1200 bytes
	ev, err := ResultEvent("k", &publicv1.IngressResult{MessageId: id, Project: "p"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ev.Subject) > cloudevent.MaxAttrLen || !utf8.ValidString(ev.Subject) || ev.Validate(0) != nil || ev.Extensions[cloudevent.ExtProject] != "p" {
		t.Fatalf("subject of %d bytes (valid UTF-8: %v), %v", len(ev.Subject), utf8.ValidString(ev.Subject), ev.Validate(0))
	}
}

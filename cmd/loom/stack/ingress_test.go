package stack

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	publicv1 "github.com/loom-ml/loom/proto/loom/public/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// ingressStack is the stack with what the ingress tests share: a cluster
// in project default, API keys of a user of default ("ingbot"), of a user
// of project other only ("mallory") and of a viewer of default ("peek"),
// a gateway client as the administrator, a SubmitJob request as JSON and a
// writer to loom.ingress.v1.
type ingressStack struct {
	st                          *Stack
	gw                          *grpc.ClientConn
	botKey, otherKey, viewerKey string
	submit                      []byte
	w                           *kafka.Writer
}

const ingressSource = "//pipeline.example/ingest"

func startIngressStack(ctx context.Context, t *testing.T) *ingressStack {
	t.Helper()
	st, err := Start(ctx, testOptions(t))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = st.Close(context.Background()) })
	gw := adminConn(t, st)
	createCPUCluster(ctx, t, gw, "ing")
	authc := loomv1.NewAuthServiceClient(gw)
	keyOf := func(project, user, role string) string {
		t.Helper()
		if _, err := authc.SetMember(ctx, &loomv1.SetMemberRequest{Parent: "projects/" + project, User: user, Role: role}); err != nil {
			t.Fatalf("SetMember %s in %s: %v", user, project, err)
		}
		k, err := authc.CreateApiKey(ctx, &loomv1.CreateApiKeyRequest{Parent: "users/" + user, Key: &loomv1.ApiKey{DisplayName: "ingress"}})
		if err != nil || k.GetSecret() == "" {
			t.Fatalf("CreateApiKey for %s: %v", user, err)
		}
		return k.GetSecret()
	}
	submit, err := protojson.Marshal(&loomv1.SubmitJobRequest{Parent: "projects/default",
		Job: &loomv1.Job{Cluster: "projects/default/clusters/ing", Script: "#!/bin/sh\ntrue\n", NodeCount: 1}})
	if err != nil {
		t.Fatal(err)
	}
	w := &kafka.Writer{Addr: kafka.TCP(st.BrokerAddr), Balancer: kafka.Murmur2Balancer{}, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	t.Cleanup(func() { _ = w.Close() })
	return &ingressStack{st: st, gw: gw, submit: submit, w: w,
		botKey: keyOf("default", "ingbot", "user"), otherKey: keyOf("other", "mallory", "user"), viewerKey: keyOf("default", "peek", "viewer")}
}

// msg is a binary-mode CloudEvent record for loom.ingress.v1 ("" cred:
// none).
func (s *ingressStack) msg(id, typ, cred string, data []byte) kafka.Message {
	m := kafka.Message{Topic: topics.Ingress, Key: []byte(id), Value: data, Headers: []kafka.Header{
		{Key: "ce_specversion", Value: []byte("1.0")}, {Key: "ce_id", Value: []byte(id)},
		{Key: "ce_source", Value: []byte(ingressSource)}, {Key: "ce_type", Value: []byte("loom.ingress.v1." + typ)},
		{Key: "content-type", Value: []byte("application/json")}}}
	if cred != "" {
		m.Headers = append(m.Headers, kafka.Header{Key: "ce_credential", Value: []byte(cred)})
	}
	return m
}

func (s *ingressStack) produce(ctx context.Context, t *testing.T, ms ...kafka.Message) {
	t.Helper()
	if err := s.w.WriteMessages(ctx, ms...); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// results collects the IngressResult events on loom.public.v1 by message id.
type results struct {
	mu sync.Mutex
	m  map[string][]*publicv1.IngressResult
}

func (s *ingressStack) readResults(ctx context.Context, t *testing.T) *results {
	rs := &results{m: map[string][]*publicv1.IngressResult{}}
	readTopic(ctx, t, s.st.BrokerAddr, topics.Public, func(m kafka.Message) {
		if header(m, "ce_type") != "loom.public.v1.IngressResult" || header(m, "ce_source") != "loom/bridge" {
			return
		}
		r := &publicv1.IngressResult{}
		if err := protojson.Unmarshal(m.Value, r); err != nil {
			t.Errorf("result %s: %v", m.Value, err)
			return
		}
		if header(m, "ce_subject") != r.GetMessageId() || !strings.HasPrefix(header(m, "ce_id"), "result-") {
			t.Errorf("result event headers %v for %v", m.Headers, r)
		}
		rs.mu.Lock()
		rs.m[r.GetMessageId()] = append(rs.m[r.GetMessageId()], r)
		rs.mu.Unlock()
	})
	return rs
}

// get returns id's results so far.
func (rs *results) get(id string) []*publicv1.IngressResult {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return append([]*publicv1.IngressResult(nil), rs.m[id]...)
}

// TestKafkaIngressAppliesOnceAndDeadLettersRefusals is issue 17's Kafka
// ingress end to end on `loom up`'s stack (embedded broker, real gateway,
// scheduler and bridge): CloudEvents produced to loom.ingress.v1 with a
// plain kafka-go writer, as any other system would.
//
//   - a SubmitJob message makes a job, and the same message delivered 5
//     times makes one job;
//   - a bad credential, no credential, bad JSON and an unknown type each land in
//     loom.ingress.v1.dlq with the reason, while a later good message still
//     makes its job;
//   - a key of project "other" asking for project "default" is refused:
//     REFUSED with the code the API gives it, NOT_FOUND (the gateway does
//     not tell a non-member whether a project exists), in the dead letter
//     and in the IngressResult; a viewer of "default" asking to submit is
//     REFUSED with PERMISSION_DENIED;
//   - every message filed under a project is answered by one IngressResult
//     on loom.public.v1; one filed under none (no credential or a bad one,
//     a stranger's, or refused before its credential was read) is not:
//     its answer is its dead letter alone;
//   - the bridge's records count the producer's duplicates.
func TestKafkaIngressAppliesOnceAndDeadLettersRefusals(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole stack with a cluster")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := startIngressStack(ctx, t)
	st, gw, botKey, otherKey, viewerKey, submit := s.st, s.gw, s.botKey, s.otherKey, s.viewerKey, s.submit
	const source = ingressSource
	msg := s.msg
	produce := func(ms ...kafka.Message) { t.Helper(); s.produce(ctx, t, ms...) }
	dup := msg("dup-1", "SubmitJob", botKey, submit)
	for range 5 {
		produce(dup)
	}
	produce(msg("bad-cred", "SubmitJob", "loomk_not-a-key", submit),
		msg("no-cred", "SubmitJob", "", submit),
		msg("bad-json", "SubmitJob", botKey, []byte(`{"parent": "projects/default", "job": {`)),
		msg("bad-type", "DeleteEverything", botKey, submit),
		msg("cross", "SubmitJob", otherKey, submit),
		msg("viewer", "SubmitJob", viewerKey, submit))
	produce(msg("after", "SubmitJob", botKey, submit))

	// Every message's IngressResult, from the public topic.
	rs := s.readResults(ctx, t)
	var mu sync.Mutex
	dead := map[string]kafka.Message{}
	readTopic(ctx, t, st.BrokerAddr, topics.Ingress+topics.DLQSuffix, func(m kafka.Message) {
		mu.Lock()
		dead[header(m, "ce_id")] = m
		mu.Unlock()
	})
	ids := []string{"dup-1", "bad-cred", "no-cred", "bad-json", "bad-type", "cross", "viewer", "after"}
	// Filed under no project: their results are withheld.
	withheld := map[string]bool{"bad-cred": true, "no-cred": true, "bad-json": true, "bad-type": true, "cross": true}
	testkit.WaitFor(t, 90*time.Second, "the IngressResults of a project's messages and the dead letters", func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			if len(rs.get(id)) == 0 && !withheld[id] {
				return false, nil
			}
		}
		return len(dead) >= 6, nil
	})

	mu.Lock()
	defer mu.Unlock()
	results := map[string][]*publicv1.IngressResult{}
	for _, id := range ids {
		results[id] = rs.get(id)
	}
	want := map[string]struct{ outcome, code, reason string }{
		"dup-1":    {"ACCEPTED", "OK", ""},
		"after":    {"ACCEPTED", "OK", ""},
		"bad-cred": {"REFUSED", "UNAUTHENTICATED", ""},
		"no-cred":  {"REFUSED", "UNAUTHENTICATED", "ce_credential"},
		"bad-json": {"INVALID", "INVALID_ARGUMENT", "loom.v1.SubmitJobRequest"},
		"bad-type": {"INVALID", "INVALID_ARGUMENT", "loom.ingress.v1.DeleteEverything"},
		"cross":    {"REFUSED", "NOT_FOUND", "no role in project default"},
		"viewer":   {"REFUSED", "PERMISSION_DENIED", ""},
	}
	jobsc := loomv1.NewJobServiceClient(gw)
	for _, id := range ids {
		w := want[id]
		if withheld[id] {
			m, ok := dead[id]
			if len(results[id]) != 0 || !ok || header(m, "loom_dlq_code") != w.code ||
				!strings.Contains(header(m, "loom_dlq_reason"), w.reason) {
				t.Errorf("%s, of no project: results %v, dead letter %v; want no result, a dead letter %s", id, results[id], m.Headers, w.code)
			}
			if header(m, "ce_credential") != "" || strings.Contains(string(m.Value)+fmt.Sprint(m.Headers), "loomk_") {
				t.Errorf("%s: the dead letter carries the credential", id)
			}
			continue
		}
		if len(results[id]) == 0 {
			t.Errorf("%s: no result", id)
			continue
		}
		r := results[id][0]
		if r.GetOutcome().String() != w.outcome || r.GetCode() != w.code || !strings.Contains(r.GetReason(), w.reason) ||
			r.GetMessageSource() != source || r.GetProject() != "default" {
			t.Errorf("%s: result %v, want %s %s in default", id, r, w.outcome, w.code)
		}
		if w.outcome == "ACCEPTED" {
			if _, ok := dead[id]; ok {
				t.Errorf("%s was accepted and dead-lettered", id)
			}
			// The job the message made, through the gateway.
			j, err := jobsc.GetJob(ctx, &loomv1.GetJobRequest{Name: r.GetResource()})
			if err != nil || r.GetProject() != "default" || r.GetPrincipal() != "users/ingbot" {
				t.Errorf("%s: GetJob(%q) = %v, %v; result %v", id, r.GetResource(), j, err, r)
			}
			continue
		}
		m, ok := dead[id]
		if !ok {
			t.Errorf("%s (%s) is not in %s", id, w.code, topics.Ingress+topics.DLQSuffix)
			continue
		}
		if header(m, "loom_dlq_code") != w.code || header(m, "loom_dlq_reason") != r.GetReason() || r.GetReason() == "" ||
			header(m, "loom_dlq_transport") != "kafka:"+topics.Ingress || header(m, "loom_dlq_time") == "" {
			t.Errorf("%s: dead letter headers %v, result %v", id, m.Headers, r)
		}
		if header(m, "ce_credential") != "" || strings.Contains(string(m.Value)+fmt.Sprint(m.Headers), "loomk_") {
			t.Errorf("%s: the dead letter carries the credential", id)
		}
	}
	// mallory is no member of default: the refusal is filed under no
	// project, and its result withheld (checked above).
	// Five deliveries, one job: ingbot's jobs are dup-1's and after's.
	list, err := jobsc.ListJobs(ctx, &loomv1.ListJobsRequest{Parent: "projects/default", Users: []string{"ingbot"}})
	if err != nil {
		t.Fatalf("ListJobs: %v", err)
	}
	var names []string
	for _, j := range list.GetJobs() {
		names = append(names, j.GetName())
	}
	slices.Sort(names)
	wantNames := []string{results["dup-1"][0].GetResource(), results["after"][0].GetResource()}
	slices.Sort(wantNames)
	if !slices.Equal(names, wantNames) || len(results["dup-1"]) != 1 {
		t.Fatalf("ingbot's jobs %v, want %v (dup-1 delivered 5 times, answered %d times)", names, wantNames, len(results["dup-1"]))
	}

	// The bridge's records: the producer's duplicates counted.
	bridge := bridgeClient(ctx, t, st)
	testkit.WaitFor(t, 30*time.Second, "the duplicates counted", func() (bool, error) {
		ps, err := bridge.ListIngressProducers(ctx, &loomv1.ListIngressProducersRequest{Parent: "projects/default"})
		if err != nil {
			return false, err
		}
		for _, p := range ps.GetProducers() {
			if p.GetPrincipal() == "users/ingbot" && p.GetSource() == source {
				return p.GetDuplicates() == 4 && p.GetAccepted() == 2, nil
			}
		}
		return false, nil
	})
}

// readers numbers readTopic's consumer groups.
var readers atomic.Int64

// readTopic reads every partition of topic from its start in the
// background until the test ends, calling f for each record. Each call is
// a consumer group of its own, so that two readers of one topic in a test
// both see every record.
func readTopic(ctx context.Context, t *testing.T, broker, topic string, f func(kafka.Message)) {
	t.Helper()
	group := fmt.Sprintf("test-%s-%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), topic, readers.Add(1))
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{broker}, GroupID: group,
		Topic: topic, StartOffset: kafka.FirstOffset, MaxWait: 100 * time.Millisecond})
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	t.Cleanup(func() { stop(); <-done; _ = r.Close() })
	go func() {
		defer close(done)
		for {
			m, err := r.ReadMessage(rctx)
			if err != nil {
				return
			}
			f(m)
		}
	}()
}

func header(m kafka.Message, key string) string {
	for _, h := range m.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// bridgeClient is the bridge's internal IngressService, called as the
// gateway calls it (a service token).
func bridgeClient(ctx context.Context, t *testing.T, st *Stack) loomv1.IngressServiceClient {
	t.Helper()
	secret, err := auth.LoadSecret(st.Keys.Service)
	if err != nil {
		t.Fatal(err)
	}
	iss, err := auth.NewServiceTokenIssuer(secret, nil)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(st.Addrs.Bridge, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(auth.ServiceTokenSource(iss, "gateway")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return loomv1.NewIngressServiceClient(conn)
}

// TestKafkaIngressSurvivesOutages: a message produced while the gateway is
// down waits (neither dead-lettered nor FAILED) and is applied once the
// gateway is back; messages produced while the bridge is down are applied
// once it is back, each once, and a message sent again after it was
// applied is a duplicate, not a second job.
func TestKafkaIngressSurvivesOutages(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole stack with a cluster")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := startIngressStack(ctx, t)
	rs := s.readResults(ctx, t)
	accepted := func(ids ...string) {
		t.Helper()
		testkit.WaitFor(t, 90*time.Second, fmt.Sprintf("the results of %v", ids), func() (bool, error) {
			for _, id := range ids {
				if len(rs.get(id)) == 0 {
					return false, nil
				}
			}
			return true, nil
		})
		for _, id := range ids {
			if r := rs.get(id); len(r) != 1 || r[0].GetOutcome() != publicv1.IngressResult_ACCEPTED {
				t.Fatalf("%s: results %v, want one ACCEPTED", id, r)
			}
		}
	}

	if err := s.st.Kill(ctx, "gateway"); err != nil {
		t.Fatal(err)
	}
	s.produce(ctx, t, s.msg("while-gateway-down", "SubmitJob", s.botKey, s.submit))
	if err := s.st.Restart(ctx, "gateway"); err != nil {
		t.Fatal(err)
	}
	accepted("while-gateway-down")
	// The bridge publishes a result before it records the message, and a
	// crash between the two redelivers it: results are at least once
	// (README). Kill the bridge only once the message is recorded, so that
	// what follows tests the re-sent copy, not that window.
	bridge := bridgeClient(ctx, t, s.st)
	delivered := func(id string, atLeast int64) func() (bool, error) {
		return func() (bool, error) {
			ms, err := bridge.ListIngressMessages(ctx, &loomv1.ListIngressMessagesRequest{Parent: "projects/default"})
			if status.Code(err) == codes.Unavailable {
				return false, nil // the connection to the restarted bridge, backing off
			}
			if err != nil {
				return false, err
			}
			for _, m := range ms.GetMessages() {
				if m.GetId() == id {
					return m.GetDeliveries() >= atLeast, nil
				}
			}
			return false, nil
		}
	}
	testkit.WaitFor(t, 30*time.Second, "the first message recorded", delivered("while-gateway-down", 1))

	if err := s.st.Kill(ctx, "bridge"); err != nil {
		t.Fatal(err)
	}
	s.produce(ctx, t, s.msg("while-bridge-down-1", "SubmitJob", s.botKey, s.submit),
		s.msg("while-bridge-down-2", "SubmitJob", s.botKey, s.submit),
		s.msg("while-gateway-down", "SubmitJob", s.botKey, s.submit))
	if err := s.st.Restart(ctx, "bridge"); err != nil {
		t.Fatal(err)
	}
	accepted("while-bridge-down-1", "while-bridge-down-2")
	// At least 2: the killed bridge may not have committed the first
	// copy's offset, and then it comes again too, as a duplicate.
	testkit.WaitFor(t, 30*time.Second, "the re-sent message counted as a duplicate", delivered("while-gateway-down", 2))
	if r := rs.get("while-gateway-down"); len(r) != 1 {
		t.Fatalf("the re-sent message was answered %d times", len(r))
	}
	list, err := loomv1.NewJobServiceClient(s.gw).ListJobs(ctx, &loomv1.ListJobsRequest{Parent: "projects/default", Users: []string{"ingbot"}})
	if err != nil || len(list.GetJobs()) != 3 {
		t.Fatalf("ingbot's jobs: %v, %v; want 3", list.GetJobs(), err)
	}
}

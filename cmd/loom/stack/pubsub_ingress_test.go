package stack

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/loom-ml/loom/libs/embedded"
	"github.com/loom-ml/loom/libs/testkit"
	publicv1 "github.com/loom-ml/loom/proto/loom/public/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// pubsubInbox pulls a subscription of the stack's Pub/Sub fake until the
// test ends, acknowledging and keeping every message, as a subscriber of
// Loom's Pub/Sub topics would.
type pubsubInbox struct {
	mu   sync.Mutex
	msgs []*pubsubpb.PubsubMessage
}

func (in *pubsubInbox) all() []*pubsubpb.PubsubMessage {
	in.mu.Lock()
	defer in.mu.Unlock()
	return slices.Clone(in.msgs)
}

func pullAll(ctx context.Context, t *testing.T, sub pubsubpb.SubscriberClient, name string) *pubsubInbox {
	t.Helper()
	in := &pubsubInbox{}
	pctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	t.Cleanup(func() { stop(); <-done })
	go func() {
		defer close(done)
		for pctx.Err() == nil {
			// Pull waits for messages (pstest answers at once when some
			// are there), so this loop is not a busy wait.
			resp, err := sub.Pull(pctx, &pubsubpb.PullRequest{Subscription: name, MaxMessages: 100})
			if err != nil {
				continue
			}
			var acks []string
			in.mu.Lock()
			for _, m := range resp.GetReceivedMessages() {
				in.msgs = append(in.msgs, m.GetMessage())
				acks = append(acks, m.GetAckId())
			}
			in.mu.Unlock()
			if len(acks) > 0 {
				_, _ = sub.Acknowledge(pctx, &pubsubpb.AcknowledgeRequest{Subscription: name, AckIds: acks})
			}
		}
	}()
	return in
}

// TestPubSubIngressEndToEnd is the Pub/Sub path on `loom up`'s own
// fake, with no setup beyond the stack: a job submitted by a Pub/Sub
// message runs and its state changes come back out on the Pub/Sub events
// topic; the same message published 5 times makes one job; a bad
// credential, bad JSON and an unknown type land in the Pub/Sub dead
// letters with their reasons while a later message still flows; another
// project's key cannot touch project default; a subscription with the
// documented filter receives only its project's results.
func TestPubSubIngressEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole stack with a cluster")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := startIngressStack(ctx, t)
	conn, err := grpc.NewClient(s.st.PubSubAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	pub, sub := pubsubpb.NewPublisherClient(conn), pubsubpb.NewSubscriberClient(conn)
	full := func(kind, id string) string { return "projects/" + embedded.PubSubProject + "/" + kind + "/" + id }
	events := pullAll(ctx, t, sub, full("subscriptions", embedded.PubSubEventsSubscription))
	dead := pullAll(ctx, t, sub, full("subscriptions", embedded.PubSubDeadLetterSubscription))
	// A subscriber choosing by project and type, with the filter
	// docs/integration.md shows.
	if _, err := sub.CreateSubscription(ctx, &pubsubpb.Subscription{Name: full("subscriptions", "default-results"),
		Topic:  full("topics", embedded.PubSubEventsTopic),
		Filter: `attributes.ce-loomproject = "default" AND attributes.ce-type = "loom.public.v1.IngressResult"`}); err != nil {
		t.Fatalf("CreateSubscription with a filter: %v", err)
	}
	chosen := pullAll(ctx, t, sub, full("subscriptions", "default-results"))

	const source = "//orchestrator.example/studies"
	msg := func(id, typ, cred string, data []byte) *pubsubpb.PubsubMessage {
		a := map[string]string{"ce-specversion": "1.0", "ce-id": id, "ce-source": source,
			"ce-type": "loom.ingress.v1." + typ, "content-type": "application/json"}
		if cred != "" {
			a["ce-credential"] = cred
		}
		return &pubsubpb.PubsubMessage{Data: data, Attributes: a}
	}
	publish := func(ms ...*pubsubpb.PubsubMessage) {
		t.Helper()
		if _, err := pub.Publish(ctx, &pubsubpb.PublishRequest{Topic: full("topics", embedded.PubSubIngressTopic), Messages: ms}); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	// The jobs that must run to the end are the administrator's: the stack
	// runs jobs as their owner, and only the administrator (who started it)
	// has an account on this machine. The refusals use the shared keys.
	k, err := loomv1.NewAuthServiceClient(s.gw).CreateApiKey(ctx, &loomv1.CreateApiKeyRequest{Parent: "users/" + s.st.Admin,
		Key: &loomv1.ApiKey{DisplayName: "pubsub-ingress"}})
	if err != nil || k.GetSecret() == "" {
		t.Fatalf("CreateApiKey for %s: %v", s.st.Admin, err)
	}
	runKey := k.GetSecret()
	dup := msg("ps-dup", "SubmitJob", runKey, s.submit)
	for range 5 {
		publish(dup)
	}
	publish(msg("ps-bad-cred", "SubmitJob", "loomk_not-a-key", s.submit),
		msg("ps-bad-json", "SubmitJob", s.botKey, []byte(`{"parent": `)),
		msg("ps-bad-type", "DropTables", s.botKey, s.submit),
		msg("ps-cross", "SubmitJob", s.otherKey, s.submit))
	publish(msg("ps-after", "SubmitJob", runKey, s.submit))

	// results are the IngressResult events on the Pub/Sub events topic, by
	// message id; finals the final JobStateChanged of each job.
	results := func() map[string][]*publicv1.IngressResult {
		out := map[string][]*publicv1.IngressResult{}
		for _, m := range events.all() {
			if m.Attributes["ce-type"] != "loom.public.v1.IngressResult" {
				continue
			}
			r := &publicv1.IngressResult{}
			if err := protojson.Unmarshal(m.Data, r); err != nil {
				t.Errorf("result %s: %v", m.Data, err)
				continue
			}
			out[r.GetMessageId()] = append(out[r.GetMessageId()], r)
		}
		return out
	}
	finals := func() map[string]string {
		out := map[string]string{}
		for _, m := range events.all() {
			if m.Attributes["ce-type"] != "loom.public.v1.JobStateChanged" {
				continue
			}
			var j struct {
				Job, State string
				Final      bool
			}
			if err := json.Unmarshal(m.Data, &j); err == nil && j.Final {
				out[j.Job] = j.State
			}
		}
		return out
	}
	ids := []string{"ps-dup", "ps-bad-cred", "ps-bad-json", "ps-bad-type", "ps-cross", "ps-after"}
	// Filed under no project: their results are withheld, their dead
	// letters are their answer.
	withheld := map[string]bool{"ps-bad-cred": true, "ps-bad-json": true, "ps-bad-type": true, "ps-cross": true}
	testkit.WaitFor(t, 2*time.Minute, "the project's results, the dead letters and the jobs' final states", func() (bool, error) {
		rs := results()
		for _, id := range ids {
			if len(rs[id]) == 0 && !withheld[id] {
				return false, nil
			}
		}
		f := finals()
		return len(dead.all()) >= 4 && f[rs["ps-dup"][0].GetResource()] != "" && f[rs["ps-after"][0].GetResource()] != "", nil
	})

	rs := results()
	want := map[string]struct{ outcome, code string }{
		"ps-dup": {"ACCEPTED", "OK"}, "ps-after": {"ACCEPTED", "OK"},
		"ps-bad-cred": {"REFUSED", "UNAUTHENTICATED"}, "ps-bad-json": {"INVALID", "INVALID_ARGUMENT"},
		"ps-bad-type": {"INVALID", "INVALID_ARGUMENT"}, "ps-cross": {"REFUSED", "NOT_FOUND"},
	}
	letters := map[string]*pubsubpb.PubsubMessage{}
	for _, m := range dead.all() {
		letters[m.Attributes["ce-id"]] = m
	}
	for _, id := range ids {
		w := want[id]
		l, lettered := letters[id]
		if withheld[id] {
			if len(rs[id]) != 0 || !lettered || l.Attributes["loom-dlq-code"] != w.code || l.Attributes["loom-dlq-reason"] == "" {
				t.Errorf("%s, of no project: results %v, dead letter %v; want no result, a dead letter %s", id, rs[id], l, w.code)
			}
			if _, ok := l.GetAttributes()["ce-credential"]; ok {
				t.Errorf("%s: the dead letter carries the credential", id)
			}
			continue
		}
		if len(rs[id]) == 0 {
			t.Errorf("%s: no result", id)
			continue
		}
		r := rs[id][0]
		if r.GetOutcome().String() != w.outcome || r.GetCode() != w.code || r.GetMessageSource() != source {
			t.Errorf("%s: result %v, want %s %s", id, r, w.outcome, w.code)
		}
		if w.outcome == "ACCEPTED" {
			if lettered {
				t.Errorf("%s was accepted and dead-lettered", id)
			}
			continue
		}
		if !lettered {
			t.Errorf("%s (%s) is not in the Pub/Sub dead letters", id, w.code)
			continue
		}
		if l.Attributes["loom-dlq-code"] != w.code || l.Attributes["loom-dlq-reason"] != r.GetReason() || r.GetReason() == "" ||
			!strings.HasPrefix(l.Attributes["loom-dlq-transport"], "pubsub:") {
			t.Errorf("%s: dead letter attributes %v, result %v", id, l.Attributes, r)
		}
		if _, ok := l.Attributes["ce-credential"]; ok {
			t.Errorf("%s: the dead letter carries the credential", id)
		}
	}
	// The filtered subscription got the results, and only them.
	testkit.WaitFor(t, 30*time.Second, "ps-after's result on the filtered subscription", func() (bool, error) {
		for _, m := range chosen.all() {
			if m.Attributes["ce-subject"] == "ps-after" {
				return true, nil
			}
		}
		return false, nil
	})
	for _, m := range chosen.all() {
		if m.Attributes["ce-loomproject"] != "default" || m.Attributes["ce-type"] != "loom.public.v1.IngressResult" {
			t.Errorf("the filtered subscription got %v", m.Attributes)
		}
	}
	if len(chosen.all()) >= len(events.all()) {
		t.Errorf("the filtered subscription got %d messages, the unfiltered one %d: nothing was filtered out", len(chosen.all()), len(events.all()))
	}
	if n := len(rs["ps-dup"]); n != 1 {
		t.Errorf("ps-dup published 5 times was answered %d times", n)
	}
	f := finals()
	for _, id := range []string{"ps-dup", "ps-after"} {
		if job := rs[id][0].GetResource(); f[job] != "COMPLETED" {
			t.Errorf("%s's job %s ended %q on the Pub/Sub events topic, want COMPLETED", id, job, f[job])
		}
	}
	// Five deliveries, one job: the administrator's jobs are ps-dup's and
	// ps-after's.
	list, err := loomv1.NewJobServiceClient(s.gw).ListJobs(ctx, &loomv1.ListJobsRequest{Parent: "projects/default", Users: []string{s.st.Admin}})
	if err != nil {
		t.Fatalf("ListJobs: %v", err)
	}
	var names, wantNames []string
	for _, j := range list.GetJobs() {
		names = append(names, j.GetName())
	}
	wantNames = []string{rs["ps-dup"][0].GetResource(), rs["ps-after"][0].GetResource()}
	slices.Sort(names)
	slices.Sort(wantNames)
	if !slices.Equal(names, wantNames) {
		t.Fatalf("%s's jobs %v, want %v", s.st.Admin, names, wantNames)
	}
}

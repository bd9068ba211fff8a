package egress

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/bridge/internal/cloudevent"
)

// publicRecord is one record read back from a public topic.
type publicRecord struct {
	Key   string
	Event cloudevent.Event
	Raw   kafka.Message
}

// tap reads every partition of topic from its start until the test ends,
// collecting what it reads.
type tap struct {
	mu   sync.Mutex
	recs []publicRecord
	errs []error
}

func startTap(t *testing.T, broker, topic string) *tap {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	tp := &tap{}
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for p := 0; p < topics.Partitions(topic); p++ {
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{broker}, Topic: topic, Partition: p,
			MinBytes: 1, MaxBytes: 10 << 20, MaxWait: 100 * time.Millisecond, Dialer: &kafka.Dialer{Timeout: 5 * time.Second}})
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer r.Close()
			for {
				m, err := r.ReadMessage(ctx)
				if err != nil {
					if ctx.Err() == nil {
						tp.mu.Lock()
						tp.errs = append(tp.errs, err)
						tp.mu.Unlock()
					}
					return
				}
				ev, err := cloudevent.FromKafka(m.Headers, m.Value)
				tp.mu.Lock()
				if err != nil {
					tp.errs = append(tp.errs, fmt.Errorf("offset %d: %w", m.Offset, err))
				}
				tp.recs = append(tp.recs, publicRecord{Key: string(m.Key), Event: ev, Raw: m})
				tp.mu.Unlock()
			}
		}()
	}
	return tp
}

// wait returns the records read once cond holds for them.
func (tp *tap) wait(t *testing.T, msg string, cond func([]publicRecord) bool) []publicRecord {
	t.Helper()
	var out []publicRecord
	testkit.WaitFor(t, 60*time.Second, msg, func() (bool, error) {
		tp.mu.Lock()
		defer tp.mu.Unlock()
		if len(tp.errs) > 0 {
			return false, errors.Join(tp.errs...)
		}
		out = append(out[:0], tp.recs...)
		return cond(out), nil
	})
	return out
}

// unique drops redeliveries (same CloudEvent id), as a reader does.
func unique(rs []publicRecord) []publicRecord {
	seen := map[string]bool{}
	var out []publicRecord
	for _, r := range rs {
		if !seen[r.Event.ID] {
			seen[r.Event.ID] = true
			out = append(out, r)
		}
	}
	return out
}

func has(rs []publicRecord, subject, state string) bool {
	for _, r := range rs {
		var d struct{ State string }
		_ = json.Unmarshal(r.Event.Data, &d)
		if r.Event.Subject == subject && d.State == state {
			return true
		}
	}
	return false
}

// harness runs an Egress over an embedded broker and a real Redis, its
// consumer verifying signatures as the bridge's does.
type harness struct {
	broker string
	eg     *Egress
	// failures counts the sinks' failed publishes.
	failures *atomic.Int64
}

// spySink is a real sink that counts its failures.
type spySink struct {
	cloudevent.Sink
	failures *atomic.Int64
}

func (s spySink) Publish(ctx context.Context, evs ...cloudevent.Event) error {
	err := s.Sink.Publish(ctx, evs...)
	if err != nil {
		s.failures.Add(1)
	}
	return err
}

func (s spySink) Close() error { return s.Sink.(*KafkaSink).Close() }

func startEgress(t *testing.T, broker string, entries ...string) *harness {
	t.Helper()
	_, rdb := testkit.Redis(t)
	routes, err := ParseRoutes(entries)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Context(t, 2*time.Minute)
	failures := &atomic.Int64{}
	kafkaSinks := KafkaOpener([]string{broker}, nil)
	spy := func(ctx context.Context, r Route) (cloudevent.Sink, error) {
		s, err := kafkaSinks(ctx, r)
		return spySink{Sink: s, failures: failures}, err
	}
	eg, err := New(ctx, Options{Routes: routes, Openers: map[string]SinkOpener{"kafka": spy}, Redis: rdb})
	if err != nil {
		t.Fatal(err)
	}
	c := eg.Consume()
	cfg := *c.Config
	cfg.Brokers, cfg.Topics, cfg.GroupID = []string{broker}, c.Topics, c.Group
	cfg.Verifier = envelope.NewVerifier(testkit.ServiceKey().Public().(ed25519.PublicKey), nil)
	cons := bus.NewConsumer(cfg, nil, c.Handler).WithBatch(c.Batch, c.MaxBatch)
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cons.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("consumer: %v", err)
		}
		eg.Close()
	})
	return &harness{broker: broker, eg: eg, failures: failures}
}

func jobEvent(id, name string, state loomv1.JobState, reason string) envelope.Event {
	ev := envelope.New(topics.JobEvents, "projects/x/clusters/c", "loom/scheduler",
		&eventsv1.JobChanged{Attempt: 1, Job: &loomv1.Job{Name: name, JobId: "1", Cluster: "projects/x/clusters/c", State: state,
			StateReason: reason, Script: "#!/bin/sh\necho secret-script", Env: map[string]string{"TOKEN": "secret-env"}}})
	ev.ID = id
	return ev
}

// TestEgressPublishesStateChanges feeds signed internal events to the
// broker and reads the public CloudEvents back: headers, JSON, key, the
// filters of a second sink, updates that are not state changes left out,
// and a redelivery republished with the same id.
func TestEgressPublishesStateChanges(t *testing.T) {
	t.Parallel()
	broker := testkit.Broker(t)
	ctx := testkit.Context(t, 2*time.Minute)
	if err := testkit.CreateTopics(ctx, broker, topics.Spec{Name: "team-a", Partitions: 4}); err != nil {
		t.Fatal(err)
	}
	h := startEgress(t, broker, "kafka:"+topics.Public, "kafka:team-a?project=a&type=loom.public.v1.Job")
	public := startTap(t, broker, topics.Public)
	teamA := startTap(t, broker, "team-a")

	const jobA, jobB = "projects/a/jobs/1", "projects/b/jobs/2"
	health := envelope.New(topics.HealthEvents, "projects/a/clusters/c/nodes/gpu-1", "loom/health",
		&eventsv1.NodeHealthChanged{Node: "projects/a/clusters/c/nodes/gpu-1", Cluster: "projects/a/clusters/c",
			Health: eventsv1.NodeHealth_UNHEALTHY, Reason: "xid 79", SetBy: "users/operator"})
	testkit.PublishAs(t, broker, "scheduler",
		jobEvent("01JOBA1", jobA, loomv1.JobState_PENDING, "Priority"),
		jobEvent("01JOBA2", jobA, loomv1.JobState_PENDING, "Resources"), // not a state change
		jobEvent("01JOBA3", jobA, loomv1.JobState_RUNNING, ""),
		jobEvent("01JOBB1", jobB, loomv1.JobState_RUNNING, ""),
	)
	// A node's health is health's to say (envelope.Senders).
	testkit.PublishAs(t, broker, "health", health)
	testkit.PublishAs(t, broker, "scheduler", jobEvent("01JOBA4", jobA, loomv1.JobState_COMPLETED, ""))
	got := public.wait(t, "public events of both projects", func(rs []publicRecord) bool {
		return has(rs, jobA, "COMPLETED") && has(rs, jobB, "RUNNING") && has(rs, "projects/a/clusters/c/nodes/gpu-1", "")
	})
	var aStates []string
	for _, r := range unique(got) {
		ev := r.Event
		if ev.Source == "" || ev.Time.IsZero() || ev.DataContentType != "application/json" || ev.Extensions[cloudevent.ExtProject] != r.Key {
			t.Errorf("record %+v: want source, time, application/json and loomproject = key", ev)
		}
		if h := r.Raw.Headers; len(h) == 0 || string(r.Raw.Value) == "" {
			t.Errorf("record without headers or data: %+v", r.Raw)
		}
		for _, hd := range r.Raw.Headers {
			if hd.Key == "loom_signer" || hd.Key == "loom_sig" || hd.Key == "traceparent" {
				t.Errorf("internal header %s on a public event", hd.Key)
			}
		}
		var d map[string]any
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			t.Fatalf("data: %v", err)
		}
		for _, v := range d {
			if s, ok := v.(string); ok && (s == "secret-script" || s == "users/operator") {
				t.Errorf("internal value %q on the public %s", s, ev.Type)
			}
		}
		if string(ev.Data) != "" && (json.Valid(ev.Data) == false) {
			t.Errorf("invalid JSON %s", ev.Data)
		}
		if ev.Subject == jobA {
			if ev.Type != "loom.public.v1.JobStateChanged" || ev.Source != "loom/scheduler" || r.Key != "a" || d["project"] != "a" {
				t.Errorf("job event: %+v %v", ev, d)
			}
			aStates = append(aStates, d["state"].(string))
		}
		if ev.Type == "loom.public.v1.NodeHealthChanged" && (r.Key != "a" || d["health"] != "UNHEALTHY" || d["hostname"] != "gpu-1" || ev.Source != "loom/health") {
			t.Errorf("health event: key %q %v", r.Key, d)
		}
	}
	if fmt.Sprint(aStates) != "[PENDING RUNNING COMPLETED]" {
		t.Errorf("job a's public states: %v, want one per state change", aStates)
	}

	// The filtered sink takes project a's job events only.
	ta := teamA.wait(t, "team-a's events", func(rs []publicRecord) bool { return has(rs, jobA, "COMPLETED") })
	for _, r := range ta {
		if r.Key != "a" || r.Event.Type != "loom.public.v1.JobStateChanged" {
			t.Errorf("team-a got %s of project %q", r.Event.Type, r.Key)
		}
	}
	if n := len(unique(ta)); n != 3 {
		t.Errorf("team-a got %d distinct events, want 3", n)
	}

	// A redelivery after a crash that lost the recorded state (publish
	// done, state not saved) publishes again, with the same id.
	var first string
	for _, r := range got {
		if r.Event.Subject == jobA && has([]publicRecord{r}, jobA, "COMPLETED") {
			first = r.Event.ID
		}
	}
	// The state is saved after the publish the wait above saw: wait for it,
	// or the delete below races the save and the redelivery is skipped.
	testkit.WaitFor(t, 60*time.Second, "job a's COMPLETED state saved", func() (bool, error) {
		v, err := h.eg.rdb.Get(ctx, h.eg.stateKey("job:"+jobA)).Result()
		if errors.Is(err, redis.Nil) {
			return false, nil
		}
		return strings.HasPrefix(v, "COMPLETED"), err
	})
	if err := h.eg.rdb.Del(ctx, h.eg.stateKey("job:"+jobA)).Err(); err != nil {
		t.Fatal(err)
	}
	testkit.PublishAs(t, broker, "scheduler", jobEvent("01JOBA4", jobA, loomv1.JobState_COMPLETED, ""))
	public.wait(t, "the redelivered event", func(rs []publicRecord) bool {
		n := 0
		for _, r := range rs {
			if r.Event.ID == first {
				n++
			}
		}
		return n == 2
	})
}

// TestEgressBlocksWhileASinkIsDown: a sink whose topic does not exist yet
// fails every publish; the consumer retries (no dead letter) and delivers
// everything once the topic exists.
func TestEgressBlocksWhileASinkIsDown(t *testing.T) {
	t.Parallel()
	broker := testkit.Broker(t)
	ctx := testkit.Context(t, 2*time.Minute)
	h := startEgress(t, broker, "kafka:late")
	testkit.PublishAs(t, broker, "scheduler",
		jobEvent("01DOWN1", "projects/a/jobs/7", loomv1.JobState_RUNNING, ""),
		jobEvent("01DOWN2", "projects/a/jobs/7", loomv1.JobState_COMPLETED, ""))
	// More failed attempts than the bus's default of 5 before a dead
	// letter.
	testkit.WaitFor(t, 90*time.Second, "the sink to fail 7 times", func() (bool, error) { return h.failures.Load() >= 7, nil })
	if evs := testkit.Events(t, broker, topics.JobEvents+topics.DLQSuffix); len(evs) != 0 {
		t.Fatalf("dead-lettered while the sink was down: %d", len(evs))
	}
	if err := testkit.CreateTopics(ctx, broker, topics.Spec{Name: "late", Partitions: 4}); err != nil {
		t.Fatal(err)
	}
	late := startTap(t, broker, "late")
	late.wait(t, "both states once the sink is back", func(rs []publicRecord) bool {
		return has(rs, "projects/a/jobs/7", "RUNNING") && has(rs, "projects/a/jobs/7", "COMPLETED")
	})
	if evs := testkit.Events(t, broker, topics.JobEvents+topics.DLQSuffix); len(evs) != 0 {
		t.Fatalf("dead letters: %d", len(evs))
	}
}

// TestPublishPublic sends an ingress result through the filters.
func TestPublishPublic(t *testing.T) {
	t.Parallel()
	broker := testkit.Broker(t)
	ctx := testkit.Context(t, time.Minute)
	if err := testkit.CreateTopics(ctx, broker, topics.Spec{Name: "only-b", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	h := startEgress(t, broker, "kafka:"+topics.Public, "kafka:only-b?project=b")
	ev := cloudevent.Event{ID: "result-1", Source: "loom/bridge", Type: "loom.public.v1.IngressResult", Subject: "m1",
		DataContentType: "application/json", Data: []byte(`{"outcome":"ACCEPTED"}`),
		Extensions: map[string]string{cloudevent.ExtCredential: "loomk_secret"}}
	if err := h.eg.PublishPublic(ctx, "a", ev); err != nil {
		t.Fatal(err)
	}
	if err := h.eg.PublishPublic(ctx, "a", cloudevent.Event{Source: "s", Type: "t"}); err == nil {
		t.Fatal("an event without an id was published")
	}
	rs := startTap(t, broker, topics.Public).wait(t, "the result", func(rs []publicRecord) bool { return len(rs) == 1 })
	if rs[0].Key != "a" || rs[0].Event.ID != "result-1" || rs[0].Event.Extensions[cloudevent.ExtProject] != "a" ||
		rs[0].Event.Extensions[cloudevent.ExtCredential] != "" {
		t.Fatalf("result: key %q %+v", rs[0].Key, rs[0].Event)
	}
	// PublishPublic returned after every sink acknowledged: only-b took nothing.
	if err := h.eg.PublishPublic(ctx, "b", cloudevent.Event{ID: "result-2", Source: "loom/bridge", Type: "loom.public.v1.IngressResult"}); err != nil {
		t.Fatal(err)
	}
	// A result whose project is unknown goes only where no project filter
	// is set, without loomproject.
	if err := h.eg.PublishPublic(ctx, "", cloudevent.Event{ID: "result-3", Source: "loom/bridge", Type: "loom.public.v1.IngressResult"}); err != nil {
		t.Fatal(err)
	}
	if err := h.eg.PublishPublic(ctx, "b", cloudevent.Event{ID: "result-4", Source: "loom/bridge", Type: "loom.public.v1.IngressResult"}); err != nil {
		t.Fatal(err)
	}
	ob := startTap(t, broker, "only-b").wait(t, "project b's results", func(rs []publicRecord) bool { return len(rs) >= 2 })
	if len(ob) != 2 || ob[0].Event.ID != "result-2" || ob[1].Event.ID != "result-4" {
		t.Fatalf("only-b: %+v", ob)
	}
	all := startTap(t, broker, topics.Public).wait(t, "every result", func(rs []publicRecord) bool { return len(rs) == 4 })
	for _, r := range all {
		if _, has := r.Event.Extensions[cloudevent.ExtProject]; r.Event.ID == "result-3" && (has || r.Key != "") {
			t.Fatalf("a result without a project: key %q, extensions %v", r.Key, r.Event.Extensions)
		}
	}
}

// memSink keeps what it is given, in order.
type memSink struct {
	mu  sync.Mutex
	evs []cloudevent.Event
}

func (s *memSink) Name() string { return "kafka:mem" }

func (s *memSink) Publish(_ context.Context, evs ...cloudevent.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.evs = append(s.evs, evs...)
	return nil
}

// TestRequeuedRunsEndSaysSo: a run that ends FAILED and is requeued in
// the same change (the scheduler's requeue_follows) is published final
// with requeueFollows, so that a Pub/Sub or Kafka consumer does not end
// the job under its retry; the job's real end, after the next attempt,
// is final without it.
func TestRequeuedRunsEndSaysSo(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	ctx := testkit.Context(t, time.Minute)
	routes, err := ParseRoutes([]string{"kafka:mem"})
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	eg, err := New(ctx, Options{Routes: routes, Redis: rdb,
		Openers: map[string]SinkOpener{"kafka": func(context.Context, Route) (cloudevent.Sink, error) { return sink, nil }}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eg.Close)
	const name = "projects/a/jobs/9"
	ev := func(id string, attempt int32, state loomv1.JobState, requeue bool) envelope.Event {
		e := jobEvent(id, name, state, "")
		jc := e.Payload.(*eventsv1.JobChanged)
		jc.Attempt, jc.RequeueFollows = attempt, requeue
		return e
	}
	// The scheduler's requeue is one change: the run's end, REQUEUED and
	// PENDING again (the attempt moves on at the next start), one batch.
	for _, batch := range [][]envelope.Event{
		{ev("01RQ1", 1, loomv1.JobState_RUNNING, false)},
		{ev("01RQ2", 1, loomv1.JobState_FAILED, true), ev("01RQ3", 1, loomv1.JobState_REQUEUED, false), ev("01RQ4", 1, loomv1.JobState_PENDING, false)},
		{ev("01RQ5", 2, loomv1.JobState_RUNNING, false)},
		{ev("01RQ6", 2, loomv1.JobState_FAILED, false)},
	} {
		if err := eg.HandleBatch(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for _, e := range sink.evs {
		var d struct {
			State          string
			Attempt        int32
			Final          bool
			RequeueFollows *bool
		}
		if err := json.Unmarshal(e.Data, &d); err != nil {
			t.Fatalf("%s: %v", e.Data, err)
		}
		s := fmt.Sprintf("%s/%d", d.State, d.Attempt)
		if d.Final {
			s += " final"
		}
		if d.RequeueFollows != nil {
			s += fmt.Sprintf(" requeueFollows=%v", *d.RequeueFollows)
		}
		got = append(got, s)
	}
	want := []string{"RUNNING/1", "FAILED/1 final requeueFollows=true", "REQUEUED/1", "PENDING/1", "RUNNING/2", "FAILED/2 final"}
	if !slices.Equal(got, want) {
		t.Errorf("published %q, want %q", got, want)
	}
}

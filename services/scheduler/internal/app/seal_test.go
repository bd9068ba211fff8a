package app

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler/internal/domain"
)

// The StartStep the scheduler writes holds the job's script and secrets
// sealed for its node: the record's bytes do not contain them, the node's
// key opens them, and the scheduler's own state keeps them in the clear.
func TestStartStepIsSealedForItsNode(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	_, rdb := testkit.Redis(t)
	st := store.New(rdb, "scheduler:")
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	secret := bytes.Repeat([]byte{5}, 32)
	a := New(st, domain.Config{}, func() time.Time { return now }, slog.New(slog.DiscardHandler))
	a.SealCommands(secret)
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	const node = cl + "/nodes/n1"
	const password = "s3cret-password-of-job-1"
	const job = "projects/p/jobs/1"
	for _, p := range []proto.Message{
		&eventsv1.ClusterChanged{Cluster: &loomv1.Cluster{Name: cl, Status: &loomv1.ClusterStatus{State: loomv1.Cluster_RUNNING, SharedDir: "/shared"}}},
		&eventsv1.NodeChanged{Node: &loomv1.Node{Name: node, Cluster: cl, Hostname: "n1", State: loomv1.Node_READY}},
		&eventsv1.SubmitJob{Job: &loomv1.Job{Name: job, JobId: "1", Cluster: cl, Script: "#!/bin/sh\necho the-script\n",
			Env: map[string]string{"DB_PASSWORD": password}}},
	} {
		if err := a.Handle(ctx, envelope.New(topics.JobCommands, cl, "test", p)); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var records []kafka.Message
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = st.RunRelay(rctx, store.PublisherFunc(func(_ context.Context, msgs ...kafka.Message) error {
			mu.Lock()
			records = append(records, msgs...)
			mu.Unlock()
			return nil
		}))
	}()
	var start kafka.Message
	testkit.WaitFor(t, 10*time.Second, "the StartStep relayed", func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range records {
			if m.Topic == topics.StepCommands {
				start = m
				return true, nil
			}
		}
		return false, nil
	})
	cancel()
	<-done
	for _, plain := range []string{password, "DB_PASSWORD", "the-script"} {
		if bytes.Contains(start.Value, []byte(plain)) {
			t.Fatalf("the StartStep record holds %q in the clear", plain)
		}
	}
	ev, err := envelope.Default.Decode(start)
	if err != nil {
		t.Fatal(err)
	}
	s, ok := ev.Payload.(*eventsv1.StartStep)
	if !ok || s.GetNode() != node || s.GetJob() != job || len(s.GetSealed()) == 0 || s.GetEnv() != nil || s.GetScript() != "" {
		t.Fatalf("StartStep on the bus: %v", ev.Payload)
	}
	if _, err := envelope.OpenCommand(auth.CommandKey(secret, cl+"/nodes/n2", ""), s); envelope.ReasonOf(err) != envelope.ReasonBadSeal {
		t.Fatalf("another node's key opened it: %v", err)
	}
	opened, err := envelope.OpenCommand(auth.CommandKey(secret, node, ""), s)
	if err != nil {
		t.Fatal(err)
	}
	o := opened.(*eventsv1.StartStep)
	if o.GetEnv()["DB_PASSWORD"] != password || o.GetScript() != "#!/bin/sh\necho the-script\n" {
		t.Fatalf("opened StartStep: %v", o)
	}
	if j, err := a.GetJob(job); err != nil || j.GetEnv()["DB_PASSWORD"] != password || j.GetScript() == "" {
		t.Fatalf("the scheduler's job lost its fields: %v %v", j, err)
	}
}

// A node that registered again (its machine reimaged: a new agent with a new
// identity) gets its step commands sealed for its new registration, as the
// provisioner's NodeChanged names it: the command key the earlier
// registration's identity held (whatever the old image kept) opens nothing
// of a command sealed after the re-registration, and the new one's does.
func TestStartStepIsSealedForTheNodesCurrentRegistration(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	_, rdb := testkit.Redis(t)
	st := store.New(rdb, "scheduler:")
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	secret := bytes.Repeat([]byte{6}, 32)
	a := New(st, domain.Config{}, func() time.Time { return now }, slog.New(slog.DiscardHandler))
	a.SealCommands(secret)
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	const node = cl + "/nodes/n1"
	const job = "projects/p/jobs/1"
	before := auth.NewRegistration(now.Add(-time.Hour), "boot-1")
	after := auth.NewRegistration(now.Add(-time.Minute), "boot-2")
	for _, p := range []proto.Message{
		&eventsv1.ClusterChanged{Cluster: &loomv1.Cluster{Name: cl, Status: &loomv1.ClusterStatus{State: loomv1.Cluster_RUNNING, SharedDir: "/shared"}}},
		&eventsv1.NodeChanged{Node: &loomv1.Node{Name: node, Cluster: cl, Hostname: "n1", State: loomv1.Node_READY, Registration: before}},
		&eventsv1.NodeChanged{Node: &loomv1.Node{Name: node, Cluster: cl, Hostname: "n1", State: loomv1.Node_REIMAGING, Registration: before}},
		&eventsv1.NodeChanged{Node: &loomv1.Node{Name: node, Cluster: cl, Hostname: "n1", State: loomv1.Node_READY, Registration: after}},
		&eventsv1.SubmitJob{Job: &loomv1.Job{Name: job, JobId: "1", Cluster: cl, Script: "#!/bin/sh\necho the-script\n",
			Env: map[string]string{"DB_PASSWORD": "pw"}}},
	} {
		if err := a.Handle(ctx, envelope.New(topics.JobCommands, cl, "test", p)); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var start *kafka.Message
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = st.RunRelay(rctx, store.PublisherFunc(func(_ context.Context, msgs ...kafka.Message) error {
			mu.Lock()
			defer mu.Unlock()
			for i := range msgs {
				if msgs[i].Topic == topics.StepCommands && start == nil {
					start = &msgs[i]
				}
			}
			return nil
		}))
	}()
	testkit.WaitFor(t, 10*time.Second, "the StartStep relayed", func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return start != nil, nil
	})
	cancel()
	<-done
	ev, err := envelope.Default.Decode(*start)
	if err != nil {
		t.Fatal(err)
	}
	s, ok := ev.Payload.(*eventsv1.StartStep)
	if !ok || s.GetNode() != node || s.GetRegistration() != after || len(s.GetSealed()) == 0 {
		t.Fatalf("StartStep on the bus: %v; want one sealed for registration %s", ev.Payload, after)
	}
	for what, key := range map[string][]byte{
		"the earlier registration's key": auth.CommandKey(secret, node, before),
		"the key of no registration":     auth.CommandKey(secret, node, ""),
	} {
		if _, err := envelope.OpenCommand(key, s); envelope.ReasonOf(err) != envelope.ReasonBadSeal {
			t.Fatalf("%s on a command sealed after the re-registration: %v, want %s", what, err, envelope.ReasonBadSeal)
		}
	}
	opened, err := envelope.OpenCommand(auth.CommandKey(secret, node, after), s)
	if err != nil || opened.(*eventsv1.StartStep).GetEnv()["DB_PASSWORD"] != "pw" {
		t.Fatalf("the current registration's key: %v, %v", opened, err)
	}
}

package stack

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// publicEvent is a record of loom.public.v1 as an outside reader sees it.
type publicEvent struct {
	key     string
	headers map[string]string
	data    map[string]any
}

// TestJobStateChangesGoOut: a job submitted through the gateway comes back
// out of the bridge on loom.public.v1 as JobStateChanged CloudEvents, one
// per state, through COMPLETED; its cluster's node as NodeChanged.
func TestJobStateChangesGoOut(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	opts := testOptions(t)
	st := startOnChosenGateway(ctx, t, &opts)
	t.Cleanup(func() { _ = st.Close(context.Background()) })
	conn := adminConn(t, st)

	// Read the public topic as any Kafka client would, every partition.
	var mu sync.Mutex
	var got []publicEvent
	rctx, stopReading := context.WithCancel(ctx)
	var readers sync.WaitGroup
	t.Cleanup(func() { stopReading(); readers.Wait() })
	for p := 0; p < topics.Partitions(topics.Public); p++ {
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{st.BrokerAddr}, Topic: topics.Public, Partition: p,
			MinBytes: 1, MaxBytes: 10 << 20, MaxWait: 100 * time.Millisecond})
		readers.Add(1)
		go func() {
			defer readers.Done()
			defer r.Close()
			for {
				m, err := r.ReadMessage(rctx)
				if err != nil {
					return
				}
				ev := publicEvent{key: string(m.Key), headers: map[string]string{}}
				for _, h := range m.Headers {
					ev.headers[h.Key] = string(h.Value)
				}
				_ = json.Unmarshal(m.Value, &ev.data)
				mu.Lock()
				got = append(got, ev)
				mu.Unlock()
			}
		}()
	}

	createCPUCluster(ctx, t, conn, "eg")
	// The job runs until the test has seen RUNNING go out and releases it:
	// a job that ended at once could have its RUNNING and its end handled
	// by the scheduler in one batch, where a job's later state replaces the
	// earlier one's event (one JobChanged per job and change).
	gate := t.TempDir()
	// The job may run as another user (its owner): it must reach the file.
	for _, d := range []string{filepath.Dir(gate), gate} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	release := filepath.Join(gate, "release")
	script := fmt.Sprintf("#!/bin/sh\necho egress-secret\ni=0\nwhile [ ! -e %s ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done\n", release)
	job, err := loomv1.NewJobServiceClient(conn).SubmitJob(ctx, &loomv1.SubmitJobRequest{Parent: "projects/default",
		Job: &loomv1.Job{Cluster: "projects/default/clusters/eg", Script: script, NodeCount: 1}})
	if err != nil {
		t.Fatalf("SubmitJob: %v", err)
	}

	var states []string
	var nodeReady bool
	// published reads what the public topic carried so far into states and
	// nodeReady.
	published := func() error {
		mu.Lock()
		defer mu.Unlock()
		states, nodeReady = nil, false
		seen := map[string]bool{}
		for _, ev := range got {
			if seen[ev.headers["ce_id"]] {
				continue // a redelivery: readers dedupe on the id
			}
			seen[ev.headers["ce_id"]] = true
			switch ev.headers["ce_type"] {
			case "loom.public.v1.JobStateChanged":
				if ev.headers["ce_subject"] != job.GetName() {
					continue
				}
				if ev.key != "default" || ev.headers["ce_loomproject"] != "default" || ev.headers["ce_source"] != "loom/scheduler" ||
					ev.headers["ce_specversion"] != "1.0" || ev.headers["content-type"] != "application/json" || ev.headers["ce_time"] == "" {
					return fmt.Errorf("job event's attributes: key %q %v", ev.key, ev.headers)
				}
				if _, ok := ev.data["script"]; ok {
					return fmt.Errorf("a script on a public event: %v", ev.data)
				}
				states = append(states, fmt.Sprint(ev.data["state"]))
			case "loom.public.v1.NodeChanged":
				if ev.data["cluster"] == "projects/default/clusters/eg" && ev.data["state"] == "READY" {
					nodeReady = true
				}
			}
		}
		return nil
	}
	testkit.WaitFor(t, 2*time.Minute, "the job's RUNNING on "+topics.Public, func() (bool, error) {
		err := published()
		return slices.Contains(states, "RUNNING"), err
	})
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 2*time.Minute, "the job's COMPLETED on "+topics.Public, func() (bool, error) {
		err := published()
		return slices.Contains(states, "COMPLETED") && nodeReady, err
	})
	t.Logf("job states published: %v", states)
	if states[len(states)-1] != "COMPLETED" || !slices.Contains(states, "RUNNING") {
		t.Fatalf("job states published: %v, want ... RUNNING ... COMPLETED last", states)
	}
	for i := 1; i < len(states); i++ {
		if states[i] == states[i-1] {
			t.Fatalf("job states published: %v: %s twice in a row, want only changes", states, states[i])
		}
	}
}

package domain

import (
	"strings"
	"testing"
	"time"
)

func TestLifeline(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	l := NewLifeline(t0, 10*time.Minute)
	if e := l.Check(t0.Add(10*time.Minute), "/n", false); e != nil {
		t.Fatalf("at the bound: %+v, want none (the bound is the silence allowed)", e)
	}
	// Kafka answers throughout; Redis stops at t0.
	for m := time.Duration(1); m <= 11; m++ {
		l.KafkaAnswered(t0.Add(m * time.Minute))
	}
	e := l.Check(t0.Add(10*time.Minute+time.Second), "/n", false)
	if e == nil || !e.Orphaned || !strings.Contains(e.Reason, "Redis has not answered for 10m1s") || !strings.Contains(e.Reason, "LOOM_AGENT_ORPHAN_AFTER (10m0s)") {
		t.Fatalf("Redis silent past the bound: %+v", e)
	}
	// An answer resets it; an older observation arriving late does not undo a newer one.
	l.RedisAnswered(t0.Add(10 * time.Minute))
	l.RedisAnswered(t0.Add(time.Minute))
	if e := l.Check(t0.Add(19*time.Minute), "/n", false); e != nil {
		t.Fatalf("after Redis answered again: %+v", e)
	}
	e = l.Check(t0.Add(21*time.Minute+30*time.Second), "/n", false)
	if e == nil || !e.Orphaned || !strings.Contains(e.Reason, "Kafka has not answered for 10m30s") {
		t.Fatalf("Kafka silent past the bound: %+v", e)
	}
	// A directory that is gone ends it at once, whatever the control plane.
	l = NewLifeline(t0, time.Hour)
	e = l.Check(t0, "/data/nodes/gpu-0001", true)
	if e == nil || e.Orphaned || e.Reason != "its node directory /data/nodes/gpu-0001 is gone (the node was removed)" {
		t.Fatalf("directory gone: %+v", e)
	}
}

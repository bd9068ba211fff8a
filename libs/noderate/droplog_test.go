package noderate_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/noderate"
)

// TestDropLogBoundsItsList: a line names the MaxNamed nodes that dropped
// the most, greatest first, and counts the others' drops (others=), however
// many nodes flood; the next line, LogEvery later, counts afresh.
func TestDropLogBoundsItsList(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	d := noderate.NewDropLog(slog.New(slog.NewTextHandler(&buf, nil)), "dropped")
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	d.Note(now, "node-rate", "first")
	// 15 nodes: n00 drops once, n01 twice, ... n14 15 times.
	for i := range 15 {
		for range i + 1 {
			d.Note(now, "node-rate", fmt.Sprintf("n%02d", i), "node", fmt.Sprintf("n%02d", i))
		}
	}
	d.Note(now.Add(noderate.LogEvery), "node-rate", "n14", "node", "n14")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("lines %q, want 2", lines)
	}
	want := `reason=node-rate dropped=121 nodes=15 by_node="n14=16 n13=14 n12=13 n11=12 n10=11 n09=10 n08=9 n07=8 n06=7 n05=6" others=15 latest.node=n14`
	if !strings.Contains(lines[1], want) {
		t.Fatalf("line %q, want %s", lines[1], want)
	}
	d.Note(now.Add(2*noderate.LogEvery), "node-rate", "n00", "node", "n00")
	if last := strings.Split(strings.TrimSpace(buf.String()), "\n")[2]; !strings.Contains(last, `dropped=1 nodes=1 by_node="n00=1" latest.node=n00`) {
		t.Fatalf("line %q, want only n00's drop", last)
	}
}

// The drops of a flood's last window, which no later drop writes, are
// logged by Flush once LogEvery has passed since the last line, once.
func TestDropLogFlushWritesTheLastWindow(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	d := noderate.NewDropLog(slog.New(slog.NewTextHandler(&buf, nil)), "dropped")
	lines := func() []string { return strings.Fields(strings.ReplaceAll(strings.TrimSpace(buf.String()), " ", "_")) }
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	d.Note(now, "node-rate", "n1", "node", "n1")
	d.Note(now.Add(time.Second), "node-rate", "n1", "node", "n1")
	d.Note(now.Add(2*time.Second), "node-rate", "n2", "node", "n2", "type", "last")
	d.Flush(now.Add(noderate.LogEvery - time.Nanosecond))
	if got := lines(); len(got) != 1 {
		t.Fatalf("lines %q before LogEvery passed, want the first only", got)
	}
	d.Flush(now.Add(noderate.LogEvery))
	got := lines()
	if len(got) != 2 || !strings.Contains(got[1], `reason=node-rate_dropped=2_nodes=2_by_node="n1=1_n2=1"_latest.node=n2_latest.type=last`) {
		t.Fatalf("lines %q, want a second summing up the last window's 2 drops", got)
	}
	d.Flush(now.Add(3 * noderate.LogEvery))
	if got := lines(); len(got) != 2 {
		t.Fatalf("lines %q, want no line without new drops", got)
	}
}

// Close writes the drops still waiting for their line at once, whatever
// time has passed since the last, and nothing for a reason without any.
func TestDropLogCloseWritesWhatWaits(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	d := noderate.NewDropLog(slog.New(slog.NewTextHandler(&buf, nil)), "dropped")
	lines := func() []string { return strings.Fields(strings.ReplaceAll(strings.TrimSpace(buf.String()), " ", "_")) }
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	d.Note(now, "node-rate", "n1", "node", "n1")
	d.Note(now.Add(time.Second), "node-rate", "n2", "node", "n2")
	d.Note(now.Add(time.Second), "other", "n3", "node", "n3")
	d.Close(now.Add(time.Second))
	got := lines()
	if len(got) != 3 || !strings.Contains(got[2], `reason=node-rate_dropped=1_nodes=1_by_node="n2=1"`) {
		t.Fatalf("lines %q, want the first two at once and the waiting node-rate drop at the close", got)
	}
	d.Close(now.Add(2 * time.Second))
	if got := lines(); len(got) != 3 {
		t.Fatalf("lines %q, want no line without new drops", got)
	}
}

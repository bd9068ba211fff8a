package telemetry

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestWarningsAreRateLimitedPerMessage: a flood of one warning (a
// consumer refusing a hostile producer's records) logs LogBurst lines,
// then LogPerSecond a second, and the next line logged says how many were
// dropped; another message and info lines are not held back by it.
func TestWarningsAreRateLimitedPerMessage(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	var buf bytes.Buffer
	log := loggerTo(&buf, "svc", "info", func() time.Time { return now }).With("k", "v")
	for range 1000 {
		log.Warn("event refused", "id", "x")
	}
	log.Warn("another warning")
	log.Info("progress")
	lines := func() []map[string]any {
		var out []map[string]any
		for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatal(err)
			}
			out = append(out, m)
		}
		return out
	}
	count := func(msg string) int {
		n := 0
		for _, m := range lines() {
			if m["msg"] == msg {
				n++
			}
		}
		return n
	}
	if n := count("event refused"); n != LogBurst {
		t.Fatalf("%d of 1000 warnings logged at once, want the burst, %d", n, LogBurst)
	}
	if count("another warning") != 1 || count("progress") != 1 {
		t.Fatalf("another message or an info line was held back:\n%s", buf.String())
	}
	now = now.Add(time.Second)
	for range 100 {
		log.Warn("event refused", "id", "y")
	}
	if n := count("event refused"); n != LogBurst+LogPerSecond {
		t.Fatalf("%d warnings after a second, want %d", n, LogBurst+LogPerSecond)
	}
	var first map[string]any
	for _, m := range lines() {
		if m["msg"] == "event refused" && m["id"] == "y" {
			first = m
			break
		}
	}
	if first["suppressed"] != float64(1000-LogBurst) || first["k"] != "v" {
		t.Errorf("the first line after the drops: %v, want suppressed %d and the logger's attributes", first, 1000-LogBurst)
	}
}

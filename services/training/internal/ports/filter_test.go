package ports

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/trainingspec"
)

// TestFilter checks the read API's fields against the one filter grammar
// (libs/trainingspec), which also takes OR, NOT and parentheses.
func TestFilter(t *testing.T) {
	t.Parallel()
	f := fields{state: "JOB_STATE_RUNNING", displayName: "a b", labels: map[string]string{"team": "x"},
		created: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	for filter, want := range map[string]bool{
		`state=JOB_STATE_RUNNING`:                     true,
		`state="JOB_STATE_RUNNING" AND labels.team=x`: true,
		`display_name="a b"`:                          true,
		`labels.team=y`:                               false,
		`labels.other!=x`:                             false, // an absent field matches no comparison
		`NOT labels.other=x`:                          true,
		`create_time>"2026-11-30T00:00:00Z"`:          true,
		`create_time<"2026-11-30T00:00:00Z"`:          false,
		`state=JOB_STATE_RUNNING AND create_time>="2026-12-02T00:00:00Z"`: false,
		`state=JOB_STATE_QUEUED OR labels.team=x`:                         true,
		`NOT (state=JOB_STATE_RUNNING)`:                                   false,
	} {
		p, err := trainingspec.ParseFilter(filter)
		if err != nil {
			t.Fatalf("%s: %v", filter, err)
		}
		if got := p.Match(f.lookup); got != want {
			t.Errorf("%s: %v, want %v", filter, got, want)
		}
	}
	for _, bad := range []string{`state`, `display_name="a`, `x=1 AND `, `(state=A`} {
		if _, err := trainingspec.ParseFilter(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// TestListsComeInIDOrder checks the list key orders ids as numbers: a
// list of CustomJobs 2, 10 and 9 comes back 2, 9, 10, as they were made.
func TestListsComeInIDOrder(t *testing.T) {
	t.Parallel()
	names := []string{"p/customJobs/10", "p/customJobs/2", "p/customJobs/9"}
	key := byID(func(s string) string { return s })
	slices.SortFunc(names, func(a, b string) int { return strings.Compare(key(a), key(b)) })
	if got := strings.Join(names, " "); got != "p/customJobs/2 p/customJobs/9 p/customJobs/10" {
		t.Fatalf("sorted %s", got)
	}
}

package ports

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/errs"
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

// TestKeepRefusesUnknownKeys (a tester found `filter=foo=bar` and
// `state=JOB_STATE_SUCEEDED` answered an empty list): the lists refuse what
// would match nothing, InvalidArgument naming the filter and the fields.
func TestKeepRefusesUnknownKeys(t *testing.T) {
	t.Parallel()
	items := []fields{{state: "JOB_STATE_SUCCEEDED", labels: map[string]string{"team": "vision"}}}
	of := func(f fields) fields { return f }
	for _, c := range []struct {
		filter string
		keys   trainingspec.FilterKeys
		want   string
	}{
		{"foo=bar", trainingspec.JobFilterKeys, `unknown field "foo": filter on state, display_name, labels.KEY, create_time`},
		{"lables.team=vision", trainingspec.JobFilterKeys, `unknown field "lables.team"`},
		{"state=JOB_STATE_SUCEEDED", trainingspec.JobFilterKeys, "is not a state"},
		{"state=JOB_STATE_SUCCEEDED", trainingspec.PipelineFilterKeys, "one of PIPELINE_STATE_"},
		{`create_time>"garbage"`, trainingspec.JobFilterKeys, "not an RFC 3339 time"},
	} {
		_, err := keep(c.filter, c.keys, items, of)
		var inv *errs.InvalidError
		if !errors.As(err, &inv) || len(inv.Violations) != 1 || inv.Violations[0].Field != "filter" ||
			!strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "filter: filter") {
			t.Errorf("keep(%q) = %v, want InvalidArgument on filter saying %q", c.filter, err, c.want)
		}
	}
	if got, err := keep("labels.team=vision AND state=JOB_STATE_SUCCEEDED", trainingspec.JobFilterKeys, items, of); err != nil || len(got) != 1 {
		t.Errorf("a good filter: %v, %v", got, err)
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

package trainingspec

import (
	"errors"
	"strings"
	"testing"

	"github.com/loom-ml/loom/libs/errs"
)

// resource is a CustomJob's filterable fields.
var resource = map[string]string{
	"state":        "JOB_STATE_SUCCEEDED",
	"display_name": "mnist train",
	"labels.team":  "vision",
	"create_time":  "2026-01-02T15:04:05Z",
}

func fields(key string) (string, bool) {
	v, ok := resource[key]
	return v, ok
}

func TestFilterMatch(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		filter string
		want   bool
	}{
		{"", true},
		{"   ", true},
		{"state=JOB_STATE_SUCCEEDED", true},
		{`state="JOB_STATE_SUCCEEDED"`, true},
		{"state=JOB_STATE_FAILED", false},
		{"state!=JOB_STATE_FAILED", true},
		{`display_name="mnist train"`, true},
		{`display_name="mnist*"`, true},
		{`display_name="cifar*"`, false},
		{"labels.team=vision", true},
		{`displayName="mnist train"`, true},
		{`createTime>"2026-01-01T00:00:00Z"`, true},
		{"labels.team:*", true},
		{"labels.owner:*", false},
		{"NOT labels.owner:*", true},
		{"-labels.owner:*", true},
		{"labels.owner=x", false},
		{"labels.owner!=x", false},
		{`create_time>"2026-01-01T00:00:00Z"`, true},
		{`create_time>2026-01-01T00:00:00Z`, true},
		{`create_time<"2026-01-01T00:00:00+01:00"`, false},
		{`create_time>="2026-01-02T15:04:05Z"`, true},
		{`create_time<="2026-01-02T16:04:05+01:00"`, true},
		{"state=JOB_STATE_FAILED OR state=JOB_STATE_SUCCEEDED", true},
		{"state=JOB_STATE_FAILED AND labels.team=vision", false},
		{"labels.team=vision state=JOB_STATE_SUCCEEDED", true}, // juxtaposed: AND
		// AIP-160: OR binds tighter than AND.
		{"state=JOB_STATE_FAILED AND labels.team=vision OR labels.team=x", false},
		{"labels.team=vision AND state=JOB_STATE_FAILED OR state=JOB_STATE_SUCCEEDED", true},
		{"(state=JOB_STATE_FAILED AND labels.team=vision) OR labels.team=vision", true},
		{"NOT (state=JOB_STATE_FAILED OR state=JOB_STATE_CANCELLED)", true},
		{`display_name="with \"quote\""`, false},
	} {
		f, err := ParseFilter(c.filter)
		if err != nil {
			t.Errorf("ParseFilter(%q): %v", c.filter, err)
			continue
		}
		if got := f.Match(fields); got != c.want {
			t.Errorf("%q matches = %v, want %v", c.filter, got, c.want)
		}
	}
	if !(Filter{}).Match(fields) || !(Filter{}).Empty() {
		t.Error("the zero Filter must match everything")
	}
}

func TestFilterErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		filter, want string
	}{
		{"state=", "a value expected after state ="},
		{"state", "an operator"},
		{"state=(", "a value expected"},
		{"state=)", "a value expected"},
		{"=x", "a key"},
		{"(state=x", "')' expected"},
		{"state=x)", "unexpected ')'"},
		{`display_name="open`, "not closed"},
		{"state!x", "'!' must be '!='"},
		{"state=x AND", "missing at the end"},
		{"state=x OR OR y=z", "a key"},
		{strings.Repeat("(", 40) + "a=b" + strings.Repeat(")", 40), "nested more than 32"},
		{strings.Repeat("NOT ", 40) + "a=b", "nested more than 32"},
		{strings.Repeat("a=b ", 129), "more than 128 comparisons"},
		{strings.Repeat("x", MaxFilterLen+1), "limit of 4096"},
	} {
		_, err := ParseFilter(c.filter)
		var inv *errs.InvalidError
		if !errors.As(err, &inv) || inv.Violations[0].Field != "filter" || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseFilter(%.40q) = %v, want an InvalidError on filter with %q", c.filter, err, c.want)
		}
	}
}

// FuzzParseFilter: no input panics, parsing stays within its bounds, and a
// parsed filter matches without panicking.
func FuzzParseFilter(f *testing.F) {
	for _, s := range []string{"", "state=JOB_STATE_SUCCEEDED", `display_name="x*" OR NOT labels.a:*`,
		`(a=1 AND -b<2) c>="2026-01-01T00:00:00Z"`, `"`, "((((", "a=b)", `a="\"`, "-", "NOT NOT a!=b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		flt, err := ParseFilter(s)
		if err != nil {
			var inv *errs.InvalidError
			if !errors.As(err, &inv) {
				t.Fatalf("ParseFilter(%q) error %v is not an InvalidError", s, err)
			}
			return
		}
		if len(s) > MaxFilterLen {
			t.Fatalf("ParseFilter accepted %d bytes", len(s))
		}
		if d := depth(flt.root); d > 2*MaxFilterDepth+4 {
			t.Fatalf("ParseFilter(%q) nests %d deep", s, d)
		}
		flt.Match(fields)
		flt.Match(func(string) (string, bool) { return s, true })
	})
}

func depth(n *node) int {
	if n == nil {
		return 0
	}
	d := 0
	for _, k := range n.kids {
		d = max(d, depth(k))
	}
	return d + 1
}

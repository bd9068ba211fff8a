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
		{`display_name:"mnist*"`, true}, // Vertex's ':' wildcard
		{`display_name:"cifar*"`, false},
		{`display_name!="mnist*"`, false},
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
		// Every key, operator and value above is one a CustomJob list takes.
		if f, err := ParseFilterFor(c.filter, JobFilterKeys); err != nil || f.Match(fields) != c.want {
			t.Errorf("ParseFilterFor(%q): matches %v, %v; want %v", c.filter, f.Match(fields), err, c.want)
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

// TestFilterForRefusesWhatMatchesNothing (a tester found these answered an
// empty list): an unknown field, an unknown state, an unparsable time or an
// operator the field does not take is InvalidArgument on "filter", saying
// what is wrong and what is allowed, as Vertex refuses them.
func TestFilterForRefusesWhatMatchesNothing(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		filter string
		keys   FilterKeys
		want   string
	}{
		{"foo=bar", JobFilterKeys, `at 1: unknown field "foo": filter on state, display_name, labels.KEY, create_time`},
		{"stat=JOB_STATE_RUNNING", JobFilterKeys, `unknown field "stat"`},
		{"lables.team=vision", JobFilterKeys, `unknown field "lables.team"`},
		{"display_name.x=y", JobFilterKeys, `unknown field "display_name.x"`},
		{"labels=vision", JobFilterKeys, "labels needs a key: labels.KEY=VALUE, or labels.KEY:* for the key's presence"},
		{"state=JOB_STATE_SUCEEDED", JobFilterKeys, `"JOB_STATE_SUCEEDED" is not a state: one of JOB_STATE_QUEUED, JOB_STATE_PENDING, JOB_STATE_RUNNING, JOB_STATE_SUCCEEDED`},
		{"state=PIPELINE_STATE_SUCCEEDED", JobFilterKeys, `"PIPELINE_STATE_SUCCEEDED" is not a state`},
		{"state=JOB_STATE_SUCCEEDED", PipelineFilterKeys, `"JOB_STATE_SUCCEEDED" is not a state: one of PIPELINE_STATE_QUEUED`},
		{"state=JOB_STATE_UNSPECIFIED", JobFilterKeys, "is not a state"},
		{"state=SUCC*", JobFilterKeys, `"SUCC*" is not a state`},
		{"state<JOB_STATE_RUNNING", JobFilterKeys, "state takes =, !=, not <"},
		{"display_name>=a", JobFilterKeys, "display_name takes =, !=, :, not >="},
		{"labels.team<x", JobFilterKeys, "labels takes =, !=, :, not <"},
		{"state:JOB_STATE_RUNNING", JobFilterKeys, "state takes =, !=, not :"},
		{`create_time>"garbage"`, JobFilterKeys, `create_time "garbage" is not an RFC 3339 time (e.g. create_time>"2026-01-02T15:04:05Z")`},
		{`createTime>2026-01-02`, JobFilterKeys, `create_time "2026-01-02" is not an RFC 3339 time`},
		{`create_time="2026*"`, JobFilterKeys, `create_time "2026*" is not an RFC 3339 time`},
		{`create_time:"2026-01-02T15:04:05Z"`, JobFilterKeys, "create_time takes =, !=, <, <=, >, >=, not :"},
		{`labels.team=vision AND (state=JOB_STATE_FAILED OR nope=1)`, JobFilterKeys, `at 51: unknown field "nope"`},
		{`NOT bogus:*`, JobFilterKeys, `at 5: unknown field "bogus"`},
	} {
		_, err := ParseFilterFor(c.filter, c.keys)
		var inv *errs.InvalidError
		if !errors.As(err, &inv) || inv.Violations[0].Field != "filter" || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseFilterFor(%q) = %v, want an InvalidError on filter with %q", c.filter, err, c.want)
		}
	}
	// What is right passes, the states of its own resource included.
	for _, ok := range []struct {
		filter string
		keys   FilterKeys
	}{
		{"", JobFilterKeys},
		{"state=JOB_STATE_*", JobFilterKeys},
		{"state!=JOB_STATE_FAILED", JobFilterKeys},
		{"state=PIPELINE_STATE_SUCCEEDED", PipelineFilterKeys},
		{`labels.my-key:* AND createTime<="2026-01-02T15:04:05.5+01:00"`, PipelineFilterKeys},
	} {
		if _, err := ParseFilterFor(ok.filter, ok.keys); err != nil {
			t.Errorf("ParseFilterFor(%q): %v", ok.filter, err)
		}
	}
	// Syntax is judged as ParseFilter judges it.
	if _, err := ParseFilterFor("state=((", JobFilterKeys); err == nil || !strings.Contains(err.Error(), "a value expected") {
		t.Errorf("a syntax error: %v", err)
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
		if _, err := ParseFilterFor(s, JobFilterKeys); err != nil {
			var inv *errs.InvalidError
			if !errors.As(err, &inv) {
				t.Fatalf("ParseFilterFor(%q) error %v is not an InvalidError", s, err)
			}
		}
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

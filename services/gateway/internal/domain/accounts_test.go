package domain

import (
	"strings"
	"testing"
)

// TestParseQOSList: -open-qos is lower-cased, sorted and without repeats;
// "none" is no QOS at all (never nil, which would mean the default); a bad
// name or too many are refused naming the option.
func TestParseQOSList(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"low,normal":          "low,normal",
		" Normal , low,LOW,":  "low,normal",
		"none":                "",
		"":                    "",
		"debug.1,a_b,standby": "a_b,debug.1,standby",
	} {
		got, err := ParseQOSList("open-qos", in)
		if err != nil || got == nil || strings.Join(got, ",") != want {
			t.Errorf("ParseQOSList(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"low,hi gh", "x\x1b[2J", strings.Repeat("q,", MaxAssocQOS+1) + "q"} {
		if _, err := ParseQOSList("open-qos", in); err == nil || !strings.Contains(err.Error(), "open-qos") {
			t.Errorf("ParseQOSList(%q): %v, want refused naming open-qos", in, err)
		}
	}
	if !QOSAllowed("", nil, nil) || !QOSAllowed("high", []string{"low"}, []string{"high"}) || QOSAllowed("high", []string{"low", "normal"}, nil) {
		t.Error("QOSAllowed: the default is always allowed, a granted QOS is, an unopened ungranted one is not")
	}
}

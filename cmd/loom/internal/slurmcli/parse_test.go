package slurmcli

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/slurmspec"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

func TestParseTimeLimit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in        string
		secs      int64
		unlimited bool
		bad       bool
	}{
		{in: "30", secs: 30 * 60},
		{in: "0", secs: 0},
		{in: "5:30", secs: 5*60 + 30},
		{in: "1:00:00", secs: 3600},
		{in: "01:02:03", secs: 3723},
		{in: "2-0", secs: 2 * 86400},
		{in: "2-3", secs: 2*86400 + 3*3600},
		{in: "1-2:30", secs: 86400 + 2*3600 + 30*60},
		{in: "1-02:30:15", secs: 86400 + 2*3600 + 30*60 + 15},
		{in: "UNLIMITED", unlimited: true},
		{in: "infinite", unlimited: true},
		{in: "-1", unlimited: true},
		{in: "", bad: true},
		{in: "abc", bad: true},
		{in: "1:2:3:4", bad: true},
		{in: "1h", bad: true},
		{in: "-5", bad: true},
		{in: "1-2:3:4:5", bad: true},
		{in: "1--2", bad: true},
		{in: "1:", bad: true},
		{in: "99999999999", bad: true},
	} {
		secs, unl, err := ParseTimeLimit(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("ParseTimeLimit(%q) = %d, want an error", tc.in, secs)
			}
			continue
		}
		if err != nil || secs != tc.secs || unl != tc.unlimited {
			t.Errorf("ParseTimeLimit(%q) = %d, %v, %v; want %d, %v", tc.in, secs, unl, err, tc.secs, tc.unlimited)
		}
	}
}

func TestFormatTimes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		secs            int64
		squeue, elapsed string
	}{
		{0, "0:00", "00:00:00"},
		{5, "0:05", "00:00:05"},
		{65, "1:05", "00:01:05"},
		{3600, "1:00:00", "01:00:00"},
		{3723, "1:02:03", "01:02:03"},
		{86400 + 3723, "1-01:02:03", "1-01:02:03"},
		{-1, "INVALID", "INVALID"},
		{400 * 86400, "INVALID", "400-00:00:00"},
	} {
		if got := formatSecs(tc.secs, true); got != tc.squeue {
			t.Errorf("formatSecs(%d) = %q, want %q", tc.secs, got, tc.squeue)
		}
		if got := formatDuration(tc.secs); got != tc.elapsed {
			t.Errorf("formatDuration(%d) = %q, want %q", tc.secs, got, tc.elapsed)
		}
	}
	if got := formatSecs(400*86400, false); got != "400-00:00:00" {
		t.Errorf("sinfo's formatSecs has no year cap: %q", got)
	}
}

// The array and dependency grammars are libs/slurmspec's, tested there.

func TestParseBegin(t *testing.T) {
	t.Parallel()
	loc := time.FixedZone("X", 3600)
	now := time.Date(2026, 3, 10, 14, 30, 0, 0, loc)
	for _, tc := range []struct {
		in   string
		want time.Time
	}{
		{"now", now},
		{"now+60", now.Add(time.Minute)},
		{"now+1hour", now.Add(time.Hour)},
		{"now+2hours", now.Add(2 * time.Hour)},
		{"now+30minutes", now.Add(30 * time.Minute)},
		{"now+3days", now.Add(72 * time.Hour)},
		{"now+1week", now.Add(7 * 24 * time.Hour)},
		{"now+10seconds", now.Add(10 * time.Second)},
		{"16:00", time.Date(2026, 3, 10, 16, 0, 0, 0, loc)},
		{"10:00", time.Date(2026, 3, 11, 10, 0, 0, 0, loc)}, // passed: tomorrow
		{"16:00:30", time.Date(2026, 3, 10, 16, 0, 30, 0, loc)},
		{"4:00PM", time.Date(2026, 3, 10, 16, 0, 0, 0, loc)},
		{"2026-04-01", time.Date(2026, 4, 1, 0, 0, 0, 0, loc)},
		{"2026-04-01T08:15", time.Date(2026, 4, 1, 8, 15, 0, 0, loc)},
		{"2026-04-01T08:15:30", time.Date(2026, 4, 1, 8, 15, 30, 0, loc)},
		{"0401", time.Date(2026, 4, 1, 0, 0, 0, 0, loc)},
		{"04/01/27", time.Date(2027, 4, 1, 0, 0, 0, 0, loc)},
		{"04.01", time.Date(2026, 4, 1, 0, 0, 0, 0, loc)},
		{"tomorrow", time.Date(2026, 3, 11, 0, 0, 0, 0, loc)},
		{"midnight", time.Date(2026, 3, 11, 0, 0, 0, 0, loc)},
		{"teatime", time.Date(2026, 3, 10, 16, 0, 0, 0, loc)},
		{"noon", time.Date(2026, 3, 11, 12, 0, 0, 0, loc)},
		{"0301", time.Date(2027, 3, 1, 0, 0, 0, 0, loc)}, // passed this year: next year's
		{"03/10-15:00", time.Date(2026, 3, 10, 15, 0, 0, 0, loc)},
		{"03/10-14:00", time.Date(2027, 3, 10, 14, 0, 0, 0, loc)},
		{"04/01/27-08:30:15", time.Date(2027, 4, 1, 8, 30, 15, 0, loc)},
		{"uts1790000000", time.Unix(1790000000, 0)},
	} {
		got, err := ParseBegin(tc.in, now)
		if err != nil || !got.Equal(tc.want) {
			t.Errorf("ParseBegin(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	// sacct's -S and -E look back, as Slurm's parse_time with its past flag.
	for _, tc := range []struct {
		in   string
		want time.Time
	}{
		{"10:00", time.Date(2026, 3, 10, 10, 0, 0, 0, loc)},
		{"16:00", time.Date(2026, 3, 10, 16, 0, 0, 0, loc)},
		{"midnight", time.Date(2026, 3, 10, 0, 0, 0, 0, loc)},
		{"noon", time.Date(2026, 3, 10, 12, 0, 0, 0, loc)},
		{"today", time.Date(2026, 3, 10, 0, 0, 0, 0, loc)},
		{"0301", time.Date(2026, 3, 1, 0, 0, 0, 0, loc)},
		{"12/24", time.Date(2025, 12, 24, 0, 0, 0, 0, loc)}, // a later month: last year's
		{"03/10-09:00", time.Date(2026, 3, 10, 9, 0, 0, 0, loc)},
		{"now-2hours", now.Add(-2 * time.Hour)},
		{"2026-01-02", time.Date(2026, 1, 2, 0, 0, 0, 0, loc)},
	} {
		got, err := ParsePast(tc.in, now)
		if err != nil || !got.Equal(tc.want) {
			t.Errorf("ParsePast(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "later", "now+", "uts12", "utsnow", "03/10-25:00", "13/10-10:00", "now+5fortnights", "now+3000000000weeks", "25:00", "2026-13-01", "02/30", "13/01", "12:61", "2026-04-01T99:00",
		"2263-01-01", "2263-01-01T00:00", "9999-12-31", "1700-01-01", "now+36600days"} { // past 2262 the scheduler's nanoseconds overflow
		if got, err := ParseBegin(bad, now); err == nil {
			t.Errorf("ParseBegin(%q) = %v, want an error", bad, got)
		}
	}
}

func TestParseSignal(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"USR1":        "USR1@60",
		"SIGUSR1":     "USR1@60",
		"usr2@90":     "USR2@90",
		"B:USR1@120":  "B:USR1@120",
		"10":          "USR1@60",
		"R:TERM@0":    "R:TERM@0",
		"b:sigterm@5": "B:TERM@5",
	} {
		s, err := slurmspec.ParseSignal(in)
		if err != nil || s.String() != want {
			t.Errorf("ParseSignal(%q) = %v, %v; want %s", in, s, err, want)
		}
	}
	for _, bad := range []string{"", "FOO", "99", "USR1@", "USR1@70000", "X:USR1", "USR1@-1"} {
		if s, err := slurmspec.ParseSignal(bad); err == nil {
			t.Errorf("ParseSignal(%q) = %v, want an error", bad, s)
		}
	}
}

func TestOptParser(t *testing.T) {
	t.Parallel()
	p := &optParser{prog: "x", defs: []optDef{
		{long: []string{"nodes"}, short: 'N', arg: requiredArg},
		{long: []string{"hold"}, short: 'H', arg: noArg},
		{long: []string{"exclusive"}, arg: optionalArg},
		{long: []string{"no-requeue"}, arg: noArg},
		{long: []string{"no-kill"}, short: 'k', arg: optionalArg},
	}}
	opts, rest, err := p.parse([]string{"-N2", "-N", "3", "--nodes=4", "--nodes", "5", "-HN6", "--excl", "--exclusive=user", "--no-r", "a", "--", "-H"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range opts {
		got = append(got, o.key+"="+o.value)
	}
	want := []string{"nodes=2", "nodes=3", "nodes=4", "nodes=5", "hold=", "nodes=6", "exclusive=", "exclusive=user", "no-requeue="}
	if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(rest, []string{"a", "-H"}) {
		t.Errorf("parse = %v rest %v; want %v rest [a -H]", got, rest, want)
	}
	for args, msg := range map[string]string{
		"--foo":       "x: unrecognized option '--foo'",
		"-Z":          "x: invalid option -- 'Z'",
		"--nodes":     "x: option '--nodes' requires an argument",
		"-N":          "x: option requires an argument -- 'N'",
		"--hold=1":    "x: option '--hold' doesn't allow an argument",
		"--no":        "x: option '--no' is ambiguous; possibilities: '--no-kill' '--no-requeue' '--nodes'",
		"--nodes2=10": "x: unrecognized option '--nodes2'",
	} {
		if _, _, err := p.parse(strings.Fields(args)); err == nil || err.Error() != msg {
			t.Errorf("parse(%s) error = %v, want %q", args, err, msg)
		}
	}
	// Stopping at the first non-option keeps the script's own arguments.
	p.stopAtFirst = true
	opts, rest, err = p.parse([]string{"-H", "job.sh", "-N", "2"})
	if err != nil || len(opts) != 1 || !reflect.DeepEqual(rest, []string{"job.sh", "-N", "2"}) {
		t.Errorf("stopAtFirst: %v %v %v", opts, rest, err)
	}
}

func TestFormatParsingAndCells(t *testing.T) {
	t.Parallel()
	f := parseFormat(">%.18i %-20j|%5t%R")
	if f.prefix != ">" || len(f.fields) != 4 {
		t.Fatalf("parseFormat = %+v", f)
	}
	want := []fmtField{
		{spec: "i", width: 18, right: true, suffix: " ", token: "%.18i "},
		{spec: "j", width: 20, suffix: "|", token: "%-20j|"},
		{spec: "t", width: 5, token: "%5t"},
		{spec: "R", token: "%R"},
	}
	if !reflect.DeepEqual(f.fields, want) {
		t.Errorf("fields = %+v\nwant %+v", f.fields, want)
	}
	var b strings.Builder
	writeCell(&b, "abc", 5, true, true)
	writeCell(&b, "|", 0, false, false)
	writeCell(&b, "abcdefgh", 5, true, true)
	writeCell(&b, "|", 0, false, false)
	writeCell(&b, "abcdefgh", 5, true, false)
	writeCell(&b, "|", 0, false, false)
	writeCell(&b, "abcdefgh", 5, false, false)
	writeCell(&b, "|", 0, false, false)
	writeCell(&b, "ab", 5, false, true)
	writeCell(&b, "|", 0, false, false)
	if got := b.String(); got != "  abc|abcde|abcdefgh|abcde|ab   |" {
		t.Errorf("cells = %q", got)
	}
	long, unknown := parseLongFormat("JobID:.10,Name:5|,Bogus,State", squeueLongNames)
	if len(unknown) != 1 || unknown[0] != "Bogus" || len(long.fields) != 3 ||
		long.fields[0] != (fmtField{spec: "A", width: 10, right: true, token: "JobID:.10"}) ||
		long.fields[1].suffix != "|" || long.fields[2].width != 20 {
		t.Errorf("parseLongFormat = %+v %v", long, unknown)
	}
}

// sacct's and sstat's --format widths are bounded as squeue's are:
// "sacct -o JobID%2000000000" padded every cell to 2 GB (and a wider one
// killed sacct with "fatal error: out of memory" before printing a row).
func TestSacctFormatWidthBounded(t *testing.T) {
	t.Parallel()
	known := sacctFields(testNow, testNow.Location(), func(*loomv1.Job) int64 { return -1 }, defaultUnits)
	fields, err := parseSacctFormat("JobID%2000000000,JobName%-2000000000,State%99999999999999999999999,User%-99999999999999999999999,Partition%12", known)
	if err != nil {
		t.Fatal(err)
	}
	want := []int{maxFieldWidth, -maxFieldWidth, maxFieldWidth, -maxFieldWidth, 12}
	for i, f := range fields {
		if f.width != want[i] {
			t.Errorf("%s width = %d, want %d", f.name, f.width, want[i])
		}
	}
	var b strings.Builder
	sacctCell(&b, "7", fields[0].width)
	if b.Len() != maxFieldWidth+1 {
		t.Errorf("a cell is %d bytes, want %d", b.Len(), maxFieldWidth+1)
	}
}

// A huge width is cut to maxFieldWidth: "squeue -O JobID:100000000" once
// padded every row to 100 MB.
func TestFormatWidthBounded(t *testing.T) {
	t.Parallel()
	for _, f := range []format{
		parseFormat("%100000000i|%.99999999999999999999999j"),
		func() format {
			f, _ := parseLongFormat("JobID:100000000,Name:.99999999999999999999999", squeueLongNames)
			return f
		}(),
	} {
		if len(f.fields) != 2 || f.fields[0].width != maxFieldWidth || f.fields[1].width != maxFieldWidth {
			t.Fatalf("fields = %+v, want both %d wide", f.fields, maxFieldWidth)
		}
		var b strings.Builder
		f.render(&b, func(string) (cell, bool) { return cell{text: "7"}, true })
		// Two padded fields and their separators or suffixes.
		if n := b.Len(); n < 2*maxFieldWidth || n > 2*maxFieldWidth+8 {
			t.Errorf("a row of two fields is %d bytes, want about %d", n, 2*maxFieldWidth)
		}
	}
}

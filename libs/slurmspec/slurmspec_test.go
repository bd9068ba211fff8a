package slurmspec

import (
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
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

func TestParseArray(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in    string
		idx   []int
		limit int
		bad   string
	}{
		{in: "0-3", idx: []int{0, 1, 2, 3}},
		{in: "1,3,5", idx: []int{1, 3, 5}},
		{in: "0-15:4", idx: []int{0, 4, 8, 12}},
		{in: "1-5%2", idx: []int{1, 2, 3, 4, 5}, limit: 2},
		{in: "7", idx: []int{7}},
		{in: "0-2,1-3", idx: []int{0, 1, 2, 3}},
		{in: "10-1", bad: "ends before it starts"},
		{in: "1-10:0", bad: "not a positive number"},
		{in: "1-", bad: "not a number"},
		{in: "-5", bad: "not a number"},
		{in: "a-b", bad: "not a number"},
		{in: "1,,2", bad: "empty element"},
		{in: "1-4%0", idx: []int{1, 2, 3, 4}}, // no limit, as Slurm's
		{in: "%4", bad: "no indexes"},
		{in: "3:2", bad: "needs a range"},
		{in: "1-4%x", bad: "not a number"},
		{in: "1-4%-1", bad: "not a number"},
		// Slurm's MaxArraySize: task ids below it (default 1001: 0..1000).
		{in: "0-1000", idx: seq(0, 1000)},
		{in: "1000", idx: []int{1000}},
		{in: "0-1001", bad: "task id 1001 is not below MaxArraySize 1001 (task ids are 0-1000)"},
		{in: "0-1999", bad: "not below MaxArraySize 1001"},
		{in: "4000001", bad: "not below MaxArraySize"},
		{in: "99999999999999999999999", bad: "not below MaxArraySize"},
		{in: strings.Repeat("1,", 1001) + "1", bad: "1002 elements, more than MaxArraySize 1001"},
		{in: "", bad: "empty"},
	} {
		a, err := ParseArray(tc.in, DefaultMaxArraySize)
		if tc.bad != "" {
			if err == nil || !strings.Contains(err.Error(), tc.bad) {
				t.Errorf("ParseArray(%q) error = %v, want one containing %q", tc.in, err, tc.bad)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseArray(%q): %v", tc.in, err)
			continue
		}
		if !reflect.DeepEqual(a.Indexes(), tc.idx) || a.Limit != tc.limit || a.Count() != len(tc.idx) {
			t.Errorf("ParseArray(%q) = %v %%%d, want %v %%%d", tc.in, a.Indexes(), a.Limit, tc.idx, tc.limit)
		}
	}
	// The limit is the caller's (the configured MaxArraySize), bounded by
	// Slurm's own ceiling.
	if a, err := ParseArray("0-4000000", MaxArraySizeCeiling); err != nil || a.Count() != MaxArraySizeCeiling {
		t.Errorf("ParseArray(0-4000000, ceiling) = %v, %v", a, err)
	}
	// Repeated elements that would have the count walk billions of ids are
	// refused at once: the whole of the largest array once is the bound.
	if _, err := ParseArray(strings.Repeat("0-4000000,", 6553)+"0", MaxArraySizeCeiling); err == nil ||
		!strings.Contains(err.Error(), "more than 4000001 task ids, repeats included") {
		t.Errorf("6,553 repeats of the largest range: %v", err)
	}
	if a, err := ParseArray("0-1999999,2000000-4000000", MaxArraySizeCeiling); err != nil || a.Count() != MaxArraySizeCeiling {
		t.Errorf("two halves of the largest array: %v, %v", a, err)
	}
	if _, err := ParseArray("5-9", 5); err == nil || !strings.Contains(err.Error(), "task id 5 is not below MaxArraySize 5") {
		t.Errorf("ParseArray(5-9, 5) error = %v", err)
	}
	for _, n := range []int{0, -1, MaxArraySizeCeiling + 1} {
		if _, err := ParseArray("0", n); err == nil || CheckMaxArraySize(n) == nil {
			t.Errorf("MaxArraySize %d accepted", n)
		}
	}
	if got := FormatIndexes([]int{0, 1, 2, 5, 7, 8}); got != "0-2,5,7-8" {
		t.Errorf("FormatIndexes = %q", got)
	}
}

// seq is lo..hi.
func seq(lo, hi int) []int {
	out := make([]int, 0, hi-lo+1)
	for i := lo; i <= hi; i++ {
		out = append(out, i)
	}
	return out
}

func TestParseDependency(t *testing.T) {
	t.Parallel()
	d, err := ParseDependency("afterok:12:13_2,singleton,after:7+5")
	if err != nil {
		t.Fatal(err)
	}
	want := &Dependency{Items: []DepItem{
		{Type: "afterok", Jobs: []DepJob{{JobID: "12", Task: -1}, {JobID: "13", Task: 2}}},
		{Type: "singleton"},
		{Type: "after", Jobs: []DepJob{{JobID: "7", Task: -1, DelayMinutes: 5}}},
	}}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("ParseDependency = %+v, want %+v", d, want)
	}
	any, err := ParseDependency("afterany:1?afternotok:2")
	if err != nil || !any.Any || len(any.Items) != 2 {
		t.Errorf("'?' dependency = %+v, %v", any, err)
	}
	for _, tc := range []struct{ in, bad string }{
		{"afterok", "needs at least one job id"},
		{"afterok:", "not a job id"},
		{"afterok:abc", "not a job id"},
		{"before:12", "unknown dependency type"},
		{"singleton:12", "takes no job ids"},
		{"afterok:1,afterany:2?after:3", "cannot be mixed"},
		{"afterok:12+x", "not a number of minutes"},
		{"afterany:12+", "not a number of minutes"},
		{"afternotok:12+-3", "not a number of minutes"},
		{"after:12+x", "not a number of minutes"},
		{"afterok:12_x", "not an index"},
		{"afterok:0", "not a job id"},
		{"afterok:1,,afterok:2", "empty element"},
	} {
		if _, err := ParseDependency(tc.in); err == nil || !strings.Contains(err.Error(), tc.bad) {
			t.Errorf("ParseDependency(%q) error = %v, want one containing %q", tc.in, err, tc.bad)
		}
	}
	// Slurm 22.05 takes a +time on every type (it waits for it on after
	// alone): it is kept, for squeue's and scontrol's Dependency.
	if d, err := ParseDependency("afterok:12+5,aftercorr:13_1+2"); err != nil ||
		!reflect.DeepEqual(d.Items[0].Jobs, []DepJob{{JobID: "12", Task: -1, DelayMinutes: 5}}) ||
		!reflect.DeepEqual(d.Items[1].Jobs, []DepJob{{JobID: "13", Task: 1, DelayMinutes: 2}}) {
		t.Errorf("afterok:12+5,aftercorr:13_1+2 = %+v, %v", d, err)
	}
	if _, err := ParseDependency("afterok:12_*"); err != nil {
		t.Errorf("whole-array dependency: %v", err)
	}
	// A job named twice in an element is kept once, so that repeating one
	// costs nothing at each pass; the references are bounded.
	if d, err := ParseDependency("afterok" + strings.Repeat(":5", 32000) + ":6_1:6_1"); err != nil ||
		!reflect.DeepEqual(d.Items[0].Jobs, []DepJob{{JobID: "5", Task: -1}, {JobID: "6", Task: 1}}) {
		t.Errorf("repeated references: %+v, %v", d, err)
	}
	refs := func(n int) string {
		var b strings.Builder
		b.WriteString("afterany")
		for i := 1; i <= n; i++ {
			fmt.Fprintf(&b, ":%d", i)
		}
		return b.String()
	}
	if _, err := ParseDependency(refs(MaxDependencyJobs)); err != nil {
		t.Errorf("%d references: %v", MaxDependencyJobs, err)
	}
	for _, in := range []string{refs(MaxDependencyJobs + 1), refs(600) + "," + strings.Replace(refs(401), "afterany", "afterok", 1)} {
		if _, err := ParseDependency(in); err == nil || !strings.Contains(err.Error(), "more than 1000 job references") {
			t.Errorf("past %d references: %v", MaxDependencyJobs, err)
		}
	}
	// A delay past a century overflowed a time.Duration (read as none).
	if _, err := ParseDependency("after:5+153722868"); err == nil || !strings.Contains(err.Error(), "minutes after") {
		t.Errorf("after:5+153722868: %v", err)
	}
	if d, err := ParseDependency(fmt.Sprintf("after:5+%d", MaxDelayMinutes)); err != nil || d.Items[0].Jobs[0].DelayMinutes != MaxDelayMinutes {
		t.Errorf("a century's delay: %+v, %v", d, err)
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
		s, err := ParseSignal(in)
		if err != nil || s.String() != want {
			t.Errorf("ParseSignal(%q) = %v, %v; want %s", in, s, err, want)
		}
	}
	for _, bad := range []string{"", "FOO", "99", "USR1@", "USR1@70000", "X:USR1", "USR1@-1"} {
		if s, err := ParseSignal(bad); err == nil {
			t.Errorf("ParseSignal(%q) = %v, want an error", bad, s)
		}
	}
	for in, want := range map[string]string{"hup": "HUP", "SIGKILL": "KILL", "9": "KILL", "15": "TERM", "cont": "CONT", "19": "STOP"} {
		if got, err := ParseSignalName(in); err != nil || got != want {
			t.Errorf("ParseSignalName(%q) = %q, %v; want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "0", "32", "SIGFOO", "B:USR1"} {
		if got, err := ParseSignalName(bad); err == nil {
			t.Errorf("ParseSignalName(%q) = %q, want an error", bad, got)
		}
	}
}

func TestParseJobRef(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]JobRef{"12": {JobID: 12, Task: -1}, "12_0": {JobID: 12, Task: 0}, "7_15": {JobID: 7, Task: 15}} {
		got, err := ParseJobRef(in)
		if err != nil || got != want || got.String() != in {
			t.Errorf("ParseJobRef(%q) = %+v (%s), %v; want %+v", in, got, got.String(), err, want)
		}
	}
	for _, bad := range []string{"", "0", "012", "a", "12_", "12_x", "12_-1", "_3", "12_4000001", "99999999999999999999",
		"1_00", "12_03"} { // leading zeros would not round-trip (FuzzSpecs)
		if got, err := ParseJobRef(bad); err == nil {
			t.Errorf("ParseJobRef(%q) = %+v, want an error", bad, got)
		}
	}
}

func FuzzSpecs(f *testing.F) {
	for _, s := range []string{"0-15:2%4", "afterok:12:13_2,singleton", "1-02:03:04", "B:USR1@60", "12_3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if a, err := ParseArray(s, DefaultMaxArraySize); err == nil && (a.Count() == 0 || a.Count() != len(a.Indexes()) || a.Count() > DefaultMaxArraySize) {
			t.Fatalf("array %q: count %d, indexes %v", s, a.Count(), a.Indexes())
		}
		_, _ = ParseDependency(s)
		if secs, _, err := ParseTimeLimit(s); err == nil && secs < 0 {
			t.Fatalf("negative time limit for %q", s)
		}
		_, _ = ParseSignal(s)
		// What --hang-timeout accepts is what the gateway accepts.
		if secs, err := ParseHangTimeout(s); err == nil && CheckHangTimeout(secs) != nil {
			t.Fatalf("ParseHangTimeout(%q) = %d, which CheckHangTimeout refuses", s, secs)
		}
		if CheckCheckpointDir(s) == nil && !filepath.IsAbs(s) && s != "" && !filepath.IsLocal(s) {
			t.Fatalf("CheckCheckpointDir(%q) accepted a path that leaves the shared dir", s)
		}
		if r, err := ParseJobRef(s); err == nil && r.String() != s {
			t.Fatalf("ParseJobRef(%q) round-trips to %q", s, r.String())
		}
		// A pattern's expansion is bounded by its length: each field of at
		// least two bytes becomes at most MaxPatternWidth bytes or its value.
		f := PatternFields{JobID: "42", ArrayJobID: "40", ArrayTaskID: "4294967294", Name: "name", User: "user",
			Node: "node-0001", StepID: "3", TaskID: "1023", NodeID: "7"}
		if out := ExpandPattern(s, f); len(out) > len(s)*(MaxPatternWidth+len(f.ArrayTaskID)) {
			t.Fatalf("ExpandPattern(%q) is %d bytes", s, len(out))
		}
		if ParseInput(s, 4) == nil && s != InputNone && s != InputAll && (len(s) != 1 || s[0] < '0' || s[0] > '3') {
			t.Fatalf("ParseInput(%q, 4) accepted it", s)
		}
	})
}

func TestParseOpenMode(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"append": OpenModeAppend, "a": OpenModeAppend, "truncate": OpenModeTruncate, "trunc": OpenModeTruncate} {
		if got, err := ParseOpenMode(in); err != nil || got != want {
			t.Errorf("ParseOpenMode(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "x", "appendix", "truncated"} {
		if _, err := ParseOpenMode(in); err == nil {
			t.Errorf("ParseOpenMode(%q) accepted it", in)
		}
	}
}

// TestValidEnvName: identifiers and exported bash functions name a job's
// variables; nothing with '=', NUL, spaces or a leading digit does.
func TestValidEnvName(t *testing.T) {
	t.Parallel()
	for _, k := range []string{"PATH", "_x", "a1", "BASH_FUNC_module%%", "BASH_FUNC_ml%%", "BASH_FUNC__module_raw%%",
		"BASH_FUNC_my-func.v2:x%%", "BASH_FUNC_x", "BASH_FUNC_"} {
		if !ValidEnvName(k) {
			t.Errorf("ValidEnvName(%q) = false, want true", k)
		}
	}
	for _, k := range []string{"", "1A", "A=B", "A\x00", "A B", "a-b", "BASH_FUNC_%%", "BASH_FUNC_a=b%%", "BASH_FUNC_1a%%",
		"BASH_FUNC_a%%%", "BASH_FUNC_a b%%", "X%%", "é"} {
		if ValidEnvName(k) {
			t.Errorf("ValidEnvName(%q) = true, want false", k)
		}
	}
}

// TestCPUsPerNode: tasks per node (--ntasks-per-node, else --ntasks over
// the nodes rounded up, else 1) times --cpus-per-task, or the node's GPUs
// times --cpus-per-gpu when more (Slurm 22.05's counts, checked beside
// one), in 64 bits.
func TestCPUsPerNode(t *testing.T) {
	for _, c := range []struct {
		tpn, ntasks, cpt int32
		nodes            int
		gpn, cpg         int32
		want             int64
	}{
		{0, 0, 0, 1, 0, 0, 1},
		{0, 0, 4, 3, 0, 0, 4},
		{4, 100, 2, 2, 0, 0, 8},              // --ntasks-per-node wins
		{0, 5, 2, 2, 0, 0, 6},                // 3 tasks on the first node
		{0, 5, 1, 0, 0, 0, 5},                // no node count: one node
		{0, 1 << 20, 4096, 1, 0, 0, 1 << 32}, // past an int32
		{0, 0, 0, 1, 2, 3, 6},                // --gres=gpu:2 --cpus-per-gpu=3
		{0, 8, 0, 1, 2, 3, 8},                // with -n8: the tasks' 8
		{0, 8, 0, 2, 2, 3, 6},                // -N2 -n8: 4 tasks, 6 for the GPUs
		{8, 0, 0, 2, 2, 3, 8},                // --ntasks-per-node=8
		{0, 0, 0, 1, 0, 3, 1},                // no GPUs: the one task's
		{0, 0, 0, 1, 8, 0, 1},                // GPUs without --cpus-per-gpu
		{0, 0, 0, 1, 1 << 20, 4096, 1 << 32}, // past an int32
	} {
		if got := CPUsPerNode(c.tpn, c.ntasks, c.cpt, c.nodes, c.gpn, c.cpg); got != c.want {
			t.Errorf("CPUsPerNode(%d, %d, %d, %d, %d, %d) = %d, want %d", c.tpn, c.ntasks, c.cpt, c.nodes, c.gpn, c.cpg, got, c.want)
		}
	}
}

// TestArrayTaskStep: SLURM_ARRAY_TASK_STEP as Slurm 22.05 sets it, each
// case checked there (sbatch -a SPEC --wrap 'echo $SLURM_ARRAY_TASK_STEP').
func TestArrayTaskStep(t *testing.T) {
	t.Parallel()
	for spec, want := range map[string]int{
		"1,3":          1, // evenly spaced, but no step written
		"1,3,5":        1,
		"2,4,8":        1,
		"5":            1,
		"1-3,7":        1,
		"0-15:4":       4,
		"0-6:3%1":      3,
		"0-6:3,10":     3,
		"0-6:3,9-15:5": 3, // the first step written
		"10,0-6:3":     3,
		"0-0:5":        5, // one task, step as written
		"":             1,
	} {
		if got := ArrayTaskStep(spec); got != want {
			t.Errorf("ArrayTaskStep(%q) = %d, want %d", spec, got, want)
		}
	}
}

func TestWithArrayLimit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		spec  string
		limit int
		want  string
	}{
		{"0-15", 4, "0-15%4"},
		{"0-15:2%4", 2, "0-15:2%2"},
		{"1,3,7%1", 0, "1,3,7"},
		{" 0-3 ", 0, "0-3"},
	} {
		got := WithArrayLimit(tc.spec, tc.limit)
		if got != tc.want {
			t.Errorf("WithArrayLimit(%q, %d) = %q, want %q", tc.spec, tc.limit, got, tc.want)
		}
		if a, err := ParseArray(got, DefaultMaxArraySize); err != nil || a.Limit != tc.limit {
			t.Errorf("ParseArray(%q) = %v, %v; want limit %d", got, a, err, tc.limit)
		}
	}
}

// TestSignalNumber: the number of each name ParseSignalName returns.
func TestSignalNumber(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]int{"HUP": 1, "KILL": 9, "USR1": 10, "TERM": 15, "SYS": 31} {
		if n, ok := SignalNumber(name); !ok || n != want {
			t.Errorf("SignalNumber(%q) = %d, %v; want %d", name, n, ok, want)
		}
	}
	if n, ok := SignalNumber("NOPE"); ok {
		t.Errorf("SignalNumber(NOPE) = %d, true; want false", n)
	}
}

// TestNodeCPUs: a node's tasks (at least 1) times --cpus-per-task (at
// least 1), or its GPUs times --cpus-per-gpu when more; nothing negative
// counts, and nothing wraps.
func TestNodeCPUs(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ tasks, cpt, gpus, cpg, want int64 }{
		{0, 0, 0, 0, 1},
		{2, 3, 0, 0, 6},
		{2, 1, 2, 3, 6},   // the GPUs' 6 over the tasks' 2
		{8, 1, 2, 3, 8},   // the tasks' 8 over the GPUs' 6
		{1, 1, 2, 0, 1},   // GPUs without --cpus-per-gpu
		{1, 1, -2, -3, 1}, // negatives count as none, not as a product
		{1, -4, 0, 0, 1},  // no negative --cpus-per-task
		{1 << 20, 1 << 12, 0, 0, 1 << 32},
		{1, 1, 1 << 20, 1 << 12, 1 << 32},
	} {
		if got := NodeCPUs(c.tasks, c.cpt, c.gpus, c.cpg); got != c.want {
			t.Errorf("NodeCPUs(%d, %d, %d, %d) = %d, want %d", c.tasks, c.cpt, c.gpus, c.cpg, got, c.want)
		}
	}
}

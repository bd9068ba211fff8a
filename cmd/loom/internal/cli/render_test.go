package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/loom-ml/loom/libs/termtext"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"google.golang.org/protobuf/proto"
)

// TestCellText: a free-text cell is its first line, control characters as
// spaces, cut at n runes (never inside one) with "…" marking the cut.
func TestCellText(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"ok", 10, "ok"},
		{"  padded  ", 10, "padded"},
		{"exactly10!", 10, "exactly10!"},
		{"eleven runes", 10, "eleven ru…"},
		{"memory test: GPU 0 not found\n(detail follows)", 60, "memory test: GPU 0 not found"},
		{"a\x1b[31mred\x1b[0m\tb", 20, "a\ufffd[31mred\ufffd[0m b"},
		{"bidi \u202eevil", 20, "bidi \ufffdevil"},
		{"ééééééééééé", 5, "éééé…"},
		{"python3 -m trainer --lr=0.1 ∑∑", 30, "python3 -m trainer --lr=0.1 ∑∑"},
		{"python3 -m trainer --lr=0.1 ∑∑∑", 30, "python3 -m trainer --lr=0.1 ∑…"},
	} {
		got := cellText(c.in, c.n)
		if got != c.want || !utf8.ValidString(got) {
			t.Errorf("cellText(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}

// TestTableAlignsWideCharacters: a table pads by the columns a cell takes
// on a terminal, so that a CJK or emoji display name (two columns a
// character) does not push the columns after it out of line, as
// text/tabwriter's rune count did; a long name is cut at 40 columns.
func TestTableAlignsWideCharacters(t *testing.T) {
	t.Parallel()
	f := newFakeGatewayData()
	f.Jobs[0].DisplayName = "训练模型-α"
	f.Jobs[1].DisplayName = "🚀 launch"
	f.Jobs[2].DisplayName = strings.Repeat("长", 30)
	out, errOut, code := run(t, f.Serve(t), "jobs", "list")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	// col is the terminal column where s starts in line.
	col := func(line, s string) int {
		i := strings.Index(line, s)
		if i < 0 {
			t.Fatalf("%q not in %q", s, line)
		}
		return termtext.Width(line[:i])
	}
	want := col(lines[0], "CLUSTER")
	for _, l := range lines[1:] {
		if got := col(l, "demo"); got != want {
			t.Errorf("CLUSTER at column %d, a row's value at %d: not aligned\n%s", want, got, out)
		}
	}
	if !strings.Contains(out, strings.Repeat("长", 19)+"…") || strings.Contains(out, strings.Repeat("长", 20)) {
		t.Errorf("a 60-column name is not cut at 40 columns:\n%s", out)
	}
}

// TestPermissionDeniedSaysWhatNext: a refusal names what to run next (see
// whom the gateway took you for, and ask for a role).
func TestPermissionDeniedSaysWhatNext(t *testing.T) {
	t.Parallel()
	f := newFakeGatewayData()
	f.DenyOthers = true
	f.Jobs = append(f.Jobs, &loomv1.Job{Name: "projects/default/jobs/4", JobId: "4", User: "someone-else", Cluster: "projects/default/clusters/demo",
		State: loomv1.JobState_PENDING})
	_, errOut, code := run(t, f.Serve(t), "jobs", "cancel", "4")
	if code != 1 || !strings.Contains(errOut, "`loom auth whoami` shows who you are and your roles") || !strings.Contains(errOut, "`loom auth members set`") {
		t.Errorf("exit %d, %q: want the next step", code, errOut)
	}
}

// TestJSONEmptyListIsArray: a List response with nothing in it prints its
// list as [] (protojson leaves it out, and `jq '.clusters[]'` then fails);
// a list with items and any other message print as protojson has them.
func TestJSONEmptyListIsArray(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		m    proto.Message
		want string
	}{
		{&loomv1.ListClustersResponse{}, `{"clusters":[]}`},
		{&loomv1.ListClustersResponse{NextPageToken: "t"}, `{"clusters":[],"nextPageToken":"t"}`},
		{&loomv1.ListClustersResponse{Clusters: []*loomv1.Cluster{{Name: "c"}}}, `{"clusters":[{"name":"c"}]}`},
		{&loomv1.Cluster{Name: "c"}, `{"name":"c"}`},
	} {
		var out bytes.Buffer
		if err := writeJSON(&out, c.m); err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		if err := json.Compact(&got, out.Bytes()); err != nil {
			t.Fatalf("%T: not JSON: %v\n%s", c.m, err, out.String())
		}
		if got.String() != c.want {
			t.Errorf("%T: %s, want %s", c.m, got.String(), c.want)
		}
	}
}

// TestStateCellCutByWidth: a STATE cell is said to be cut (cutNote) when
// it was: by its columns, as cellText cuts it. 40 CJK characters are 80
// columns, cut at 60, though they are 40 runes.
func TestStateCellCutByWidth(t *testing.T) {
	t.Parallel()
	wide := strings.Repeat("失", 40)
	if c, cut := stateCell(wide); !cut || termtext.Width(c) > stateWidth {
		t.Errorf("stateCell(40 CJK): %q (%d columns), cut %v; want cut to at most %d columns", c, termtext.Width(c), cut, stateWidth)
	}
	if c, cut := stateCell(strings.Repeat("x", 40)); cut || c != strings.Repeat("x", 40) {
		t.Errorf("stateCell(40 x): %q cut %v; want it whole", c, cut)
	}
}

// TestNodesListReasonColumn: loom nodes list's HEALTH is the health state
// alone and the reason health gave goes under REASON/NEXT, after the
// provisioner's own (cut at nodeReasonWidth columns), the columns aligned.
func TestNodesListReasonColumn(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 60)
	ns := []*loomv1.Node{
		{Hostname: "a-1", Cluster: "projects/p/clusters/c", NodePool: "p", State: loomv1.Node_READY, Gpus: 8},
		{Hostname: "a-2", Cluster: "projects/p/clusters/c", NodePool: "p", State: loomv1.Node_FAILED, Gpus: 8, Reason: "preempted"},
	}
	health := func(n *loomv1.Node) (string, string) {
		if n.GetHostname() == "a-1" {
			return "DRAINING", long
		}
		return "QUARANTINED", "xid 79"
	}
	var b strings.Builder
	if err := renderNodes(&b, ns, health, false); err != nil {
		t.Fatal(err)
	}
	golden(t, b.String(), `
NODE  CLUSTER  POOL  STATE   HEALTH       GPUS  ZONE  CAPACITY  REASON/NEXT
a-1   c        p     READY   DRAINING     8     -     -         `+strings.Repeat("x", 49)+`…
a-2   c        p     FAILED  QUARANTINED  8     -     -         preempted; xid 79
`)
}

package domain

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/errs"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestParseRefHostile: names from the MLflow path-traversal tries and other
// malformed input are InvalidArgument naming the field, never a panic or a
// name that resolves elsewhere.
func TestParseRefHostile(t *testing.T) {
	t.Parallel()
	bad := []string{
		"", "/", "projects", "projects/p", "projects/p/models", "projects/p/models/",
		"projects/p/models/..", "projects/p/models/../q", "projects/../models/m", "projects/p/models/m/..",
		"projects/p/models/m#frag", "projects/p/models/m?x=1", "projects/p//models/m", "projects/p/models//m",
		"/projects/p/models/m", "/etc/passwd", "projects/p/models/m/", "projects/p/models/%2e%2e",
		"projects/p/locations/../models/m", "projects/p/locations//models/m", "projects/p/locations/l/models/m/x",
		"projects/p/models/m@", "projects/p/models/m@0", "projects/p/models/m@-1", "projects/p/models/m@01",
		"projects/p/models/m@v1", "projects/p/models/m@a", "projects/p/models/m@Prod", "projects/p/models/m@a b",
		"projects/p/models/m@x@y", "projects/p/models/m@../x", "projects/p/models/M", "projects/P/models/m",
		"projects/p/models/m\x00", "projects/p/models/m\n", "projects/p/models/" + strings.Repeat("a", 64),
		"projects/p/models/m@99999999999999999999", strings.Repeat("projects/p/models/m", 40),
		"projects/p/models/m@" + strings.Repeat("a", 200),
	}
	for _, name := range bad {
		r, err := ParseRef("name", name)
		var inv *errs.InvalidError
		if !errors.As(err, &inv) || inv.Violations[0].Field != "name" {
			t.Errorf("ParseRef(%q) = %+v, %v; want InvalidArgument on name", name, r, err)
		}
	}
	good := []struct {
		in   string
		want Ref
	}{
		{"projects/p/models/m", Ref{Project: "p", ID: "m"}},
		{"projects/p/locations/global/models/m", Ref{Project: "p", Location: "global", ID: "m", Vertex: true}},
		{"projects/p/locations/us-east1/models/m@12", Ref{Project: "p", Location: "us-east1", ID: "m", Version: 12, Vertex: true}},
		{"projects/p/models/m@prod-2", Ref{Project: "p", ID: "m", Alias: "prod-2"}},
		{"projects/p/models/m@latest", Ref{Project: "p", ID: "m", Alias: "latest"}},
		{"projects/p/models/m@blueGreen", Ref{Project: "p", ID: "m", Alias: "blueGreen"}},
	}
	for _, g := range good {
		r, err := ParseRef("name", g.in)
		if err != nil || r != g.want {
			t.Errorf("ParseRef(%q) = %+v, %v; want %+v", g.in, r, err, g.want)
		}
	}
}

// FuzzParseRef: whatever the input, ParseRef either refuses it or returns a
// ref whose parts are plain ids, so the stored name it maps to has no
// separators, dots or query characters of its own.
func FuzzParseRef(f *testing.F) {
	for _, s := range []string{"projects/p/models/m", "projects/p/locations/l/models/m@3", "projects/p/models/m@a1", "projects/../models/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRef("name", s)
		if err != nil {
			return
		}
		for _, part := range []string{r.Project, r.Location, r.ID, r.Alias} {
			if strings.ContainsAny(part, "/.#?@\\\x00") {
				t.Fatalf("ParseRef(%q) = %+v: a part holds a separator", s, r)
			}
		}
		if !strings.HasPrefix(r.Model(), "projects/"+r.Project+"/models/") {
			t.Fatalf("ParseRef(%q).Model() = %s", s, r.Model())
		}
	})
}

func TestCheckAlias(t *testing.T) {
	t.Parallel()
	for _, a := range []string{"ab", "prod", "blue-green", "canaryV2", "a" + strings.Repeat("b", 126) + "c"} {
		if err := CheckAlias(a); err != nil {
			t.Errorf("CheckAlias(%q) = %v", a, err)
		}
	}
	for _, a := range []string{"", "a", "1a", "-a", "a-", "aB", "Ab", "a_b", "a.b", "latest", "v1", "v123", "a" + strings.Repeat("b", 127) + "c"} {
		if err := CheckAlias(a); err == nil {
			t.Errorf("CheckAlias(%q) accepted", a)
		}
	}
}

// threeVersions is model m of project p with versions 1..3, 1 holding
// "default" and 2 "prod".
func threeVersions() *State {
	s := NewState()
	ts := timestamppb.New(time.Unix(100, 0))
	s.Models["projects/p/models/m"] = &loomv1.Model{Name: "projects/p/models/m", LatestVersion: 3, CreateTime: ts, DisplayName: "M"}
	for i, aliases := range [][]string{{"default"}, {"prod"}, nil} {
		s.Versions["projects/p/models/m"] = append(s.Versions["projects/p/models/m"], &loomv1.ModelVersion{
			Name: "projects/p/models/m/versions/" + string(rune('1'+i)), Version: int64(i + 1), Aliases: aliases, CreateTime: ts,
			Labels: map[string]string{"n": string(rune('1' + i))},
		})
	}
	return s
}

func ref(t *testing.T, name string) Ref {
	t.Helper()
	r, err := ParseRef("name", name)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func aliasesOf(s *State) map[string][]int64 {
	out := map[string][]int64{}
	for _, v := range s.Versions["projects/p/models/m"] {
		for _, a := range v.GetAliases() {
			out[a] = append(out[a], v.GetVersion())
		}
	}
	return out
}

func TestResolve(t *testing.T) {
	t.Parallel()
	s := threeVersions()
	for name, want := range map[string]int64{
		"projects/p/models/m": 1, "projects/p/models/m@prod": 2, "projects/p/models/m@3": 3,
		"projects/p/models/m@latest": 3, "projects/p/locations/global/models/m@default": 1,
	} {
		_, v, err := s.Resolve(ref(t, name))
		if err != nil || v.GetVersion() != want {
			t.Errorf("Resolve(%s) = %v, %v; want version %d", name, v, err, want)
		}
	}
	for _, name := range []string{"projects/p/models/m@4", "projects/p/models/m@staging", "projects/p/models/x", "projects/q/models/m"} {
		if _, _, err := s.Resolve(ref(t, name)); !errors.Is(err, errs.NotFound) {
			t.Errorf("Resolve(%s) = %v, want NotFound", name, err)
		}
	}
	m, v, _ := s.Resolve(ref(t, "projects/p/models/m@2"))
	view := View(m, v, "global")
	if view.GetName() != "projects/p/locations/global/models/m@2" || view.GetVersionId() != "2" ||
		!slices.Equal(view.GetVersionAliases(), []string{"prod"}) || view.GetDisplayName() != "M" {
		t.Errorf("View = %v", view)
	}
}

// TestMergeAliases: adding moves an alias in one change (both versions
// rewritten), "-alias" removes, "default" can be moved but never removed,
// and a refused merge changes nothing.
func TestMergeAliases(t *testing.T) {
	t.Parallel()
	now := time.Unix(200, 0)
	s := threeVersions()
	c, err := MergeAliases(s, ref(t, "projects/p/models/m@3"), []string{"prod", "default", "canary"}, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Versions) != 3 {
		t.Fatalf("merge rewrote %d versions, want 3 (the two that lost an alias and 3)", len(c.Versions))
	}
	s.ApplyChange(c)
	got := aliasesOf(s)
	if !slices.Equal(got["default"], []int64{3}) || !slices.Equal(got["prod"], []int64{3}) || !slices.Equal(got["canary"], []int64{3}) {
		t.Fatalf("after the merge: %v", got)
	}
	c, err = MergeAliases(s, ref(t, "projects/p/models/m@canary"), []string{"-canary"}, now)
	if err != nil {
		t.Fatal(err)
	}
	s.ApplyChange(c)
	if _, ok := aliasesOf(s)["canary"]; ok {
		t.Fatal("-canary kept it")
	}
	for _, bad := range [][]string{{"-default"}, {"latest"}, {"v2"}, {"x"}, {"prod", "-prod"}, nil, slices.Repeat([]string{"ab"}, MaxAliases+1)} {
		before := aliasesOf(s)
		if _, err := MergeAliases(s, ref(t, "projects/p/models/m@3"), bad, now); err == nil {
			t.Errorf("MergeAliases(%q) accepted", bad)
		}
		if after := aliasesOf(s); !equalHolders(before, after) {
			t.Errorf("refused MergeAliases(%q) changed %v to %v", bad, before, after)
		}
	}
}

func equalHolders(a, b map[string][]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

func TestUpdate(t *testing.T) {
	t.Parallel()
	now := time.Unix(300, 0)
	s := threeVersions()
	c, err := Update(s, ref(t, "projects/p/models/m@2"), &loomv1.Model{
		DisplayName: "New", VersionDescription: "v2 desc", Labels: map[string]string{"k": "v"}, VersionAliases: []string{"default"},
	}, []string{"displayName", "version_description", "labels", "version_aliases"}, now)
	if err != nil {
		t.Fatal(err)
	}
	s.ApplyChange(c)
	_, v, _ := s.Resolve(ref(t, "projects/p/models/m"))
	if v.GetVersion() != 2 || v.GetDescription() != "v2 desc" || v.GetLabels()["k"] != "v" || len(v.GetLabels()) != 1 ||
		s.Models["projects/p/models/m"].GetDisplayName() != "New" || !v.GetUpdateTime().AsTime().Equal(now) {
		t.Fatalf("after Update: %v, model %v", v, s.Models["projects/p/models/m"])
	}
	if got := aliasesOf(s); !slices.Equal(got["default"], []int64{2}) || len(got["prod"]) != 0 {
		t.Fatalf("version_aliases replaced the set: %v (prod dropped, default moved)", got)
	}
	for _, tc := range []struct {
		mask  []string
		patch *loomv1.Model
		field string
	}{
		{nil, &loomv1.Model{}, "update_mask"},
		{[]string{"name"}, &loomv1.Model{}, "update_mask.paths[0]"},
		{[]string{"version_aliases"}, &loomv1.Model{VersionAliases: []string{"prod"}}, "model.version_aliases"},
		{[]string{"description"}, &loomv1.Model{Description: strings.Repeat("x", MaxDescription+1)}, "model.description"},
		{[]string{"display_name"}, &loomv1.Model{DisplayName: "a\x00b"}, "model.display_name"},
		{[]string{"labels"}, &loomv1.Model{Labels: map[string]string{"Bad": "x"}}, "model.labels"},
		// Printed by loom models get and versions: an escape would act on
		// the reader's terminal (a tester's report).
		{[]string{"versionDescription"}, &loomv1.Model{VersionDescription: "ok\x1b[2J"}, "model.version_description"},
		{[]string{"description"}, &loomv1.Model{Description: "x\x1b]0;pwned\x07"}, "model.description"},
		{[]string{"description"}, &loomv1.Model{Description: "line\r\nover"}, "model.description"},
		{[]string{"display_name"}, &loomv1.Model{DisplayName: "rtl\u202eexe"}, "model.display_name"},
		{[]string{"display_name"}, &loomv1.Model{DisplayName: "c1\u009b2J"}, "model.display_name"},
	} {
		_, err := Update(s, ref(t, "projects/p/models/m"), tc.patch, tc.mask, now)
		var inv *errs.InvalidError
		if !errors.As(err, &inv) || inv.Violations[0].Field != tc.field {
			t.Errorf("Update(mask %v) = %v, want InvalidArgument on %s", tc.mask, err, tc.field)
		}
	}
	// A description is multi-line text: newlines and tabs are kept.
	c, err = Update(s, ref(t, "projects/p/models/m@2"), &loomv1.Model{VersionDescription: "line one\n\tline two", Description: "a\nb"},
		[]string{"version_description", "description"}, now)
	if err != nil || c.Served.GetDescription() != "line one\n\tline two" || c.Model.GetDescription() != "a\nb" {
		t.Fatalf("multi-line descriptions: %v, %v", c, err)
	}
}

func TestDeleteVersionRefusals(t *testing.T) {
	t.Parallel()
	now := time.Unix(400, 0)
	s := threeVersions()
	// The default version is refused, even with force (Vertex's rule).
	for _, force := range []bool{false, true} {
		if _, err := DeleteVersion(s, ref(t, "projects/p/models/m@1"), force, now); !errors.Is(err, errs.FailedPrecondition) || !strings.Contains(err.Error(), "default") {
			t.Fatalf("deleting the default version (force %v): %v", force, err)
		}
	}
	if _, err := DeleteVersion(s, ref(t, "projects/p/models/m"), false, now); err == nil {
		t.Fatal("deleting a bare name accepted")
	}
	// A version holding a serving alias is refused without force, naming
	// the alias and the commands that move or remove it: "prod" must not
	// vanish unasked.
	_, err := DeleteVersion(s, ref(t, "projects/p/models/m@2"), false, now)
	if !errors.Is(err, errs.FailedPrecondition) {
		t.Fatalf("deleting the version holding prod = %v, want FailedPrecondition", err)
	}
	for _, want := range []string{"holds alias prod", "loom models alias m@N prod", "loom models alias m@2 -- -prod", "loom models delete m@2 --force"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	if len(s.Versions["projects/p/models/m"]) != 3 {
		t.Fatal("a refused delete changed the state")
	}
	for _, name := range []string{"projects/p/models/m@prod", "projects/p/models/m@3"} {
		c, err := DeleteVersion(s, ref(t, name), true, now)
		if err != nil {
			t.Fatalf("DeleteVersion(%s, force): %v", name, err)
		}
		s.ApplyChange(c)
	}
	if _, _, err := s.Resolve(ref(t, "projects/p/models/m@prod")); !errors.Is(err, errs.NotFound) {
		t.Fatalf("prod after its version was deleted with force: %v, want NotFound", err)
	}
	if _, err := DeleteVersion(s, ref(t, "projects/p/models/m@1"), false, now); !errors.Is(err, errs.FailedPrecondition) || !strings.Contains(err.Error(), "only version") {
		t.Fatalf("deleting the only version: %v", err)
	}
	if s.Models["projects/p/models/m"].GetLatestVersion() != 3 {
		t.Fatal("a delete lowered latest_version: ids would be reused")
	}
	c, err := DeleteModel(s, ref(t, "projects/p/models/m"))
	if err != nil {
		t.Fatal(err)
	}
	s.ApplyChange(c)
	if _, ok := s.Models["projects/p/models/m"]; ok || len(s.Versions["projects/p/models/m"]) != 0 {
		t.Fatal("DeleteModel left the model")
	}
}

// TestOrderKeys: order_by keys sort as asked, descending included, and
// ties fall back to the name so keys are unique.
func TestOrderKeys(t *testing.T) {
	t.Parallel()
	mk := func(name, display string, created int64) *loomv1.Model {
		return &loomv1.Model{Name: name, DisplayName: display, CreateTime: timestamppb.New(time.Unix(created, 0)), VersionId: name[strings.IndexByte(name, '@')+1:]}
	}
	ms := []*loomv1.Model{mk("x/a@1", "b", 5), mk("x/a@10", "ab", 7), mk("x/a@2", "a", 6), mk("x/b@1", "b", -5)}
	for _, tc := range []struct {
		order string
		want  []string
	}{
		{"", []string{"x/a@1", "x/a@2", "x/a@10", "x/b@1"}},
		{"display_name desc", []string{"x/a@1", "x/b@1", "x/a@10", "x/a@2"}},
		{"displayName, create_time desc", []string{"x/a@2", "x/a@10", "x/a@1", "x/b@1"}},
		{"create_time", []string{"x/b@1", "x/a@1", "x/a@2", "x/a@10"}},
		{"version_id desc", []string{"x/a@10", "x/a@2", "x/a@1", "x/b@1"}},
	} {
		o, err := ParseOrderBy(tc.order)
		if err != nil {
			t.Fatal(err)
		}
		got := slices.Clone(ms)
		slices.SortFunc(got, func(a, b *loomv1.Model) int { return strings.Compare(o.Key(a), o.Key(b)) })
		var names []string
		for _, m := range got {
			names = append(names, m.GetName())
		}
		if !slices.Equal(names, tc.want) {
			t.Errorf("order %q: %v, want %v", tc.order, names, tc.want)
		}
	}
	for _, bad := range []string{"name", "display_name up", "a,b,c,d,e,f", strings.Repeat("x", MaxOrderBy+1), ",", "display_name desc desc"} {
		if _, err := ParseOrderBy(bad); err == nil {
			t.Errorf("ParseOrderBy(%q) accepted", bad)
		}
	}
}

func TestFilter(t *testing.T) {
	t.Parallel()
	ms := []*loomv1.Model{
		{Name: "a", DisplayName: "Alpha", Labels: map[string]string{"team": "x"}, CreateTime: timestamppb.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))},
		{Name: "b", DisplayName: "Beta", Labels: map[string]string{"team": "y"}, CreateTime: timestamppb.New(time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC))},
	}
	for filter, want := range map[string][]string{
		"labels.team=x":       {"a"},
		`display_name="Beta"`: {"b"},
		`create_time>="2026-03-01T00:00:00Z" AND create_time<"2027-01-01T00:00:00Z"`: {"b"},
		"labels.team:*": {"a", "b"},
		"":              {"a", "b"},
	} {
		got, err := Filter(filter, ms)
		if err != nil {
			t.Fatalf("Filter(%q): %v", filter, err)
		}
		var names []string
		for _, m := range got {
			names = append(names, m.GetName())
		}
		if !slices.Equal(names, want) {
			t.Errorf("Filter(%q) = %v, want %v", filter, names, want)
		}
	}
	if _, err := Filter("labels.team=(", ms); err == nil {
		t.Error("a malformed filter was accepted")
	}
	// A misspelt key or a time that is not one would match nothing and
	// read as "no such models": each is refused, naming the filter.
	for _, bad := range []string{"lables.team=x", "name=a", "create_time>yesterday", "labels=x", "versionid=1"} {
		_, err := Filter(bad, ms)
		var inv *errs.InvalidError
		if !errors.As(err, &inv) || inv.Violations[0].Field != "filter" {
			t.Errorf("Filter(%q) = %v, want an InvalidError on filter", bad, err)
		}
	}
	// The REST spellings of the version keys are the same keys.
	if got, err := Filter(`versionId="1" OR version_id="1"`, ms); err != nil || len(got) != 0 {
		t.Errorf("camelCase key: %v, %v", got, err)
	}
}

package resname

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/slurmspec"
)

// parser is one parse function under a uniform signature: the parsed value's
// String, or the error.
type parser struct {
	name  string
	parse func(string) (fmt.Stringer, error)
}

func wrap[T fmt.Stringer](f func(string) (T, error)) func(string) (fmt.Stringer, error) {
	return func(s string) (fmt.Stringer, error) {
		v, err := f(s)
		if err != nil {
			return nil, err
		}
		return v, nil
	}
}

var strict = []parser{
	{"ParseProject", wrap(ParseProject)},
	{"ParseCluster", wrap(ParseCluster)},
	{"ParseClusterParent", wrap(ParseClusterParent)},
	{"ParseNode", wrap(ParseNode)},
	{"ParseReservation", wrap(ParseReservation)},
	{"ParseJob", wrap(ParseJob)},
	{"ParseStep", wrap(ParseStep)},
	{"ParseModel", wrap(ParseModel)},
	{"ParseModelVersion", wrap(ParseModelVersion)},
	{"ParseOperation", wrap(ParseOperation)},
}

// loose pairs each Split with the Parse of the same shape.
var loose = []struct {
	parser
	strict string
}{
	{parser{"SplitProject", wrap(SplitProject)}, "ParseProject"},
	{parser{"SplitCluster", wrap(SplitCluster)}, "ParseCluster"},
	{parser{"SplitNode", wrap(SplitNode)}, "ParseNode"},
	{parser{"SplitReservation", wrap(SplitReservation)}, "ParseReservation"},
	{parser{"SplitJob", wrap(SplitJob)}, "ParseJob"},
	{parser{"SplitStep", wrap(SplitStep)}, "ParseStep"},
	{parser{"SplitModel", wrap(SplitModel)}, "ParseModel"},
	{parser{"SplitModelVersion", wrap(SplitModelVersion)}, "ParseModelVersion"},
	{parser{"SplitOperation", wrap(SplitOperation)}, "ParseOperation"},
}

func TestParse(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 64)
	cases := []struct {
		fn   func(string) (fmt.Stringer, error)
		in   string
		want any    // the parsed value, when it parses
		seg  string // the segment named by the error, when it does not
	}{
		{wrap(ParseProject), "projects/p", Project{"p"}, ""},
		{wrap(ParseProject), "projects/my-proj-1", Project{"my-proj-1"}, ""},
		{wrap(ParseProject), "projects/-", nil, "{project}"},
		{wrap(ParseProject), "projects/", nil, "{project}"},
		{wrap(ParseProject), "projects", nil, ""},
		{wrap(ParseProject), "project/p", nil, "projects"},
		{wrap(ParseProject), "projects/P", nil, "{project}"},
		{wrap(ParseProject), "projects/p-", nil, "{project}"},
		{wrap(ParseProject), "projects/1p", nil, "{project}"},
		{wrap(ParseProject), "projects/" + long, nil, "{project}"},
		{wrap(ParseProject), "projects/" + long[:63], Project{long[:63]}, ""},
		{wrap(ParseProject), "projects/p/clusters/c", nil, ""},

		{wrap(ParseCluster), "projects/p/clusters/c1", Cluster{"p", "c1"}, ""},
		{wrap(ParseCluster), "projects/p/clusters/-", nil, "{cluster}"},
		{wrap(ParseCluster), "projects/p/things/x", nil, "clusters"},
		{wrap(ParseCluster), "projects/p/clusters/Bad_Name", nil, "{cluster}"},
		{wrap(ParseCluster), "projects/Bad/clusters/c", nil, "{project}"},
		{wrap(ParseCluster), "/projects/p/clusters/c", nil, ""},
		{wrap(ParseCluster), "projects/p/clusters/c/", nil, ""},
		{wrap(ParseClusterParent), "projects/p/clusters/-", Cluster{"p", Wildcard}, ""},
		{wrap(ParseClusterParent), "projects/p/clusters/c", Cluster{"p", "c"}, ""},
		{wrap(ParseClusterParent), "projects/-/clusters/-", nil, "{project}"},
		{wrap(ParseClusterParent), "projects/p/clusters/--", nil, "{cluster}"},

		{wrap(ParseNode), "projects/p/clusters/c/nodes/gpu-0001", Node{Cluster{"p", "c"}, "gpu-0001"}, ""},
		{wrap(ParseNode), "projects/p/clusters/c/nodes/", nil, "{host}"},
		{wrap(ParseNode), "projects/p/clusters/c/hosts/h", nil, "nodes"},
		{wrap(ParseNode), "projects/p/clusters/c/nodes/0001", nil, "{host}"},

		{wrap(ParseReservation), "projects/p/reservations/r1", Reservation{"p", "r1"}, ""},
		{wrap(ParseReservation), "projects/p/reservations/R 1", nil, "{reservation}"},

		{wrap(ParseJob), "projects/p/jobs/12", Job{"p", "12"}, ""},
		{wrap(ParseJob), "projects/p/jobs/12_3", Job{"p", "12_3"}, ""},
		{wrap(ParseJob), "projects/p/jobs/12_0", Job{"p", "12_0"}, ""},
		{wrap(ParseJob), "projects/default/jobs/0", nil, "{job}"},
		{wrap(ParseJob), "projects/default/jobs/012", nil, "{job}"},
		{wrap(ParseJob), "projects/default/jobs/abc", nil, "{job}"},
		{wrap(ParseJob), "projects/default/jobs/12_", nil, "{job}"},
		{wrap(ParseJob), "projects/default/jobs/12_x", nil, "{job}"},
		{wrap(ParseJob), "projects/default/jobs/12_03", nil, "{job}"},
		{wrap(ParseJob), "projects/default/jobs/1/x", nil, ""},
		{wrap(ParseJob), "projects/Bad/jobs/1", nil, "{project}"},

		{wrap(ParseStep), "projects/p/jobs/12/steps/0", Step{Job{"p", "12"}, 0}, ""},
		{wrap(ParseStep), "projects/p/jobs/12_3/steps/2147483647", Step{Job{"p", "12_3"}, 2147483647}, ""},
		{wrap(ParseStep), "projects/p/jobs/12/steps/2147483648", nil, "{step}"},
		{wrap(ParseStep), "projects/p/jobs/12/steps/01", nil, "{step}"},
		{wrap(ParseStep), "projects/p/jobs/12/steps/-1", nil, "{step}"},
		{wrap(ParseStep), "projects/p/jobs/12/steps/+1", nil, "{step}"},
		{wrap(ParseStep), "projects/p/jobs/x/steps/1", nil, "{job}"},
		// The project "steps" is a project like any other.
		{wrap(ParseStep), "projects/steps/jobs/1/steps/2", Step{Job{"steps", "1"}, 2}, ""},

		{wrap(ParseModel), "projects/p/models/m", Model{"p", "m"}, ""},
		{wrap(ParseModel), "projects/p/models/M", nil, "{model}"},
		{wrap(ParseModelVersion), "projects/p/models/m/versions/1", ModelVersion{Model{"p", "m"}, 1}, ""},
		{wrap(ParseModelVersion), "projects/p/models/m/versions/0", nil, "{version}"},
		{wrap(ParseModelVersion), "projects/p/models/m/versions/01", nil, "{version}"},
		{wrap(ParseModelVersion), "projects/p/models/m/versions/9223372036854775808", nil, "{version}"},

		{wrap(ParseOperation), "projects/default/operations/01ABC", Operation{"default", "01ABC"}, ""},
		{wrap(ParseOperation), "projects/default/operations/a b", nil, "{operation}"},
		{wrap(ParseOperation), "projects/default/operations/", nil, "{operation}"},

		{wrap(SplitProject), "projects/-", Project{"-"}, ""},
		{wrap(SplitProject), "projects/P Q", Project{"P Q"}, ""},
		{wrap(SplitProject), "projects/", nil, "{project}"},
		{wrap(SplitProject), "projects/a/b", nil, ""},
		{wrap(SplitCluster), "projects/-/clusters/-", Cluster{"-", "-"}, ""},
		{wrap(SplitCluster), "projects/p/clusters/", nil, "{cluster}"},
		{wrap(SplitNode), "projects/P/clusters/C/nodes/H", Node{Cluster{"P", "C"}, "H"}, ""},
		{wrap(SplitJob), "projects/p/jobs/x", Job{"p", "x"}, ""},
		{wrap(SplitJob), "jobs/1", nil, ""},
		{wrap(SplitStep), "projects/p/jobs/x/steps/007", Step{Job{"p", "x"}, 7}, ""},
		{wrap(SplitStep), "projects/p/jobs/x/steps/a", nil, "{step}"},
		{wrap(SplitStep), "projects/p/jobs/x/steps/4294967296", nil, "{step}"},
		{wrap(SplitModelVersion), "projects/p/models/m/versions/0", nil, "{version}"},
		{wrap(SplitOperation), "projects/p/operations/a b", Operation{"p", "a b"}, ""},
		{wrap(SplitReservation), "projects/p/reservations/R", Reservation{"p", "R"}, ""},
	}
	for _, c := range cases {
		got, err := c.fn(c.in)
		if c.want != nil {
			if err != nil || got != c.want {
				t.Errorf("%q: got %#v, %v; want %#v", c.in, got, err, c.want)
				continue
			}
			if got.String() != c.in && !strings.HasSuffix(c.in, "/007") { // Split keeps no leading zeros
				t.Errorf("%q formats back as %q", c.in, got.String())
			}
			continue
		}
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("%q: got %#v, %v; want an *Error", c.in, got, err)
			continue
		}
		if e.Segment != c.seg || e.Name != c.in {
			t.Errorf("%q: error %+v names segment %q, want %q", c.in, e, e.Segment, c.seg)
		}
		if errs.Code(err) != codes.InvalidArgument {
			t.Errorf("%q: code %v, want InvalidArgument", c.in, errs.Code(err))
		}
		if c.seg != "" && !strings.Contains(err.Error(), c.seg) {
			t.Errorf("%q: %q does not name %s", c.in, err, c.seg)
		}
	}
}

func TestFormat(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		got  fmt.Stringer
		want string
	}{
		{Project{"p"}, "projects/p"},
		{Cluster{"p", "c"}, "projects/p/clusters/c"},
		{Cluster{"p", "c"}.Parent(), "projects/p"},
		{Cluster{"p", Wildcard}, "projects/p/clusters/-"},
		{Node{Cluster{"p", "c"}, "h-0001"}, "projects/p/clusters/c/nodes/h-0001"},
		{Reservation{"p", "r"}, "projects/p/reservations/r"},
		{JobOf("p", 12), "projects/p/jobs/12"},
		{JobRefOf("p", slurmspec.JobRef{JobID: 12, Task: 3}), "projects/p/jobs/12_3"},
		{JobRefOf("p", slurmspec.JobRef{JobID: 12, Task: -1}), "projects/p/jobs/12"},
		{Step{JobOf("p", 12), 4}, "projects/p/jobs/12/steps/4"},
		{Model{"p", "m"}, "projects/p/models/m"},
		{ModelVersion{Model{"p", "m"}, 3}, "projects/p/models/m/versions/3"},
		{Operation{"p", "01ABC"}, "projects/p/operations/01ABC"},
	} {
		if got := c.got.String(); got != c.want {
			t.Errorf("%#v formats as %q, want %q", c.got, got, c.want)
		}
	}
	for got, want := range map[string]string{
		NodeIn("projects/p/clusters/c", "h"):               "projects/p/clusters/c/nodes/h",
		StepIn("projects/p/jobs/12_3", 7):                  "projects/p/jobs/12_3/steps/7",
		VersionIn("projects/p/models/m", 2):                "projects/p/models/m/versions/2",
		ModelVersion{Model{"p", "m"}, 3}.APIName("global"): "projects/p/locations/global/models/m@3",
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
	ref, err := JobRefOf("p", slurmspec.JobRef{JobID: 12, Task: 3}).Ref()
	if err != nil || ref != (slurmspec.JobRef{JobID: 12, Task: 3}) {
		t.Errorf("Ref: %+v, %v", ref, err)
	}
}

// TestErrorClipsLongNames: an error names a refused name without echoing all of it.
func TestErrorClipsLongNames(t *testing.T) {
	t.Parallel()
	huge := "projects/" + strings.Repeat("x", 1<<20)
	_, err := ParseCluster(huge)
	if err == nil || len(err.Error()) > 400 {
		t.Fatalf("error of %d bytes: %.200v", len(err.Error()), err)
	}
	field := errs.Invalid("parent", "%v", err)
	if errs.Code(field) != codes.InvalidArgument || !strings.HasPrefix(field.Error(), "parent: want projects/{project}/clusters/{cluster}") {
		t.Fatalf("wrapped: %v", field)
	}
}

// TestErrorNamesTheIDLimit: an id past 63 characters is refused for its
// length, saying the limit, with the name quoted once (clipped), not a
// second time as the segment: "want projects/{project}, got
// "projects/aaa..."... (109 bytes): {project} is 100 characters, ...".
func TestErrorNamesTheIDLimit(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"projects/" + strings.Repeat("a", 100), "projects/p/clusters/" + strings.Repeat("c", 64)} {
		_, err := ParseClusterParent(name)
		if _, perr := ParseProject(name); strings.Count(name, "/") == 1 {
			err = perr
		}
		if err == nil {
			t.Fatalf("%.30s… accepted", name)
		}
		msg, n := err.Error(), len(name)-strings.LastIndexByte(name, '/')-1
		if !strings.Contains(msg, fmt.Sprintf(" is %d characters, more than the 63 an id takes", n)) ||
			strings.Count(msg, strings.Repeat(name[len(name)-1:], 40)) != 1 {
			t.Errorf("%.30s…: %q; want the length and the limit, the name once", name, msg)
		}
	}
	// A short id keeps the grammar's reason.
	if _, err := ParseProject("projects/Bad"); err == nil || !strings.Contains(err.Error(), `{project} "Bad" is not an id (a lowercase letter`) {
		t.Errorf("projects/Bad: %v", err)
	}
}

// FuzzRoundTrip: whatever a parser accepts formats back to exactly the input
// (Parse*; Split* too but for the leading zeros of numbers), Split* accept
// everything Parse* does with the same value, and every refusal is an *Error
// that is an InvalidArgument.
func FuzzRoundTrip(f *testing.F) {
	for _, s := range []string{
		"projects/p", "projects/-", "projects/", "projects/p/clusters/c", "projects/p/clusters/-",
		"projects/-/clusters/-", "projects/p/clusters/c/nodes/gpu-0001", "projects/p/reservations/r1",
		"projects/p/jobs/12", "projects/p/jobs/12_3", "projects/p/jobs/012", "projects/p/jobs/x",
		"projects/p/jobs/12/steps/0", "projects/p/jobs/12/steps/007", "projects/p/models/m",
		"projects/p/models/m/versions/1", "projects/p/operations/01ABC", "projects/p/operations/a b",
		"projects/steps/jobs/1/steps/2", "projects/p/things/x", "projects//clusters/c", "",
		"projects/p/clusters/c/nodes/", "projects/P/clusters/C", "projects/p/jobs/1/steps/99999999999",
	} {
		f.Add(s)
	}
	byName := map[string]parser{}
	for _, p := range strict {
		byName[p.name] = p
	}
	f.Fuzz(func(t *testing.T, name string) {
		for _, p := range strict {
			v, err := p.parse(name)
			if err != nil {
				checkError(t, p.name, name, err)
				continue
			}
			if v.String() != name {
				t.Fatalf("%s(%q) formats back as %q", p.name, name, v.String())
			}
		}
		for _, l := range loose {
			v, err := l.parse(name)
			sv, serr := byName[l.strict].parse(name)
			if err != nil {
				checkError(t, l.name, name, err)
				if serr == nil {
					t.Fatalf("%s refuses %q that %s accepts", l.name, name, l.strict)
				}
				continue
			}
			if serr == nil && sv != v {
				t.Fatalf("%s(%q) = %#v, %s gives %#v", l.name, name, v, l.strict, sv)
			}
			// A Split value formats to a name that splits to the same value.
			again, err := l.parse(v.String())
			if err != nil || again != v {
				t.Fatalf("%s(%q) = %#v formats as %q, which splits to %#v, %v", l.name, name, v, v.String(), again, err)
			}
			if !strings.HasSuffix(l.name, "Step") && !strings.HasSuffix(l.name, "Version") && v.String() != name {
				t.Fatalf("%s(%q) formats back as %q", l.name, name, v.String())
			}
		}
	})
}

func checkError(t *testing.T, fn, name string, err error) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || e.Name != name || errs.Code(err) != codes.InvalidArgument {
		t.Fatalf("%s(%q): error %#v (%v) is not an *Error of InvalidArgument", fn, name, err, errs.Code(err))
	}
}

// TestSplitAllocatesNothing: the scheduler splits node names on its event path.
func TestSplitAllocatesNothing(t *testing.T) {
	name := "projects/p/clusters/c/nodes/gpu-0001"
	if n := testing.AllocsPerRun(100, func() { _, _ = SplitNode(name); _, _ = ParseNode(name) }); n != 0 {
		t.Fatalf("%v allocations per split", n)
	}
}

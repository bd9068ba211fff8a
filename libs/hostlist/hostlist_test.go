package hostlist

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestExpand(t *testing.T) {
	t.Parallel()
	cases := []struct {
		expr string
		want []string
	}{
		{"", nil},
		{"login", []string{"login"}},
		{"a,b", []string{"a", "b"}},
		{"a[1-3]", []string{"a1", "a2", "a3"}},
		{"a[001-003]", []string{"a001", "a002", "a003"}},
		{"a[008-011]", []string{"a008", "a009", "a010", "a011"}},
		{"a[9-11]", []string{"a9", "a10", "a11"}},
		{"a[0998-1001]", []string{"a0998", "a0999", "a1000", "a1001"}},
		{"gpu-[01-02,07]", []string{"gpu-01", "gpu-02", "gpu-07"}},
		{"gpu-[01-02],cpu-5", []string{"gpu-01", "gpu-02", "cpu-5"}},
		{"r[1-2]n[1-2]", []string{"r1n1", "r1n2", "r2n1", "r2n2"}},
		{"r[1-2]-x", []string{"r1-x", "r2-x"}},
		{"[1-2]", []string{"1", "2"}},
		{"a[3],a[3]", []string{"a3", "a3"}},
		{"a3u-[0001-0003],a3u-login-001", []string{"a3u-0001", "a3u-0002", "a3u-0003", "a3u-login-001"}},
		{"n.x_y-1", []string{"n.x_y-1"}},
	}
	for _, c := range cases {
		got, err := Expand(c.expr)
		if err != nil {
			t.Errorf("Expand(%q): %v", c.expr, err)
			continue
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("Expand(%q) = %q, want %q", c.expr, got, c.want)
		}
	}
}

func TestExpandErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		expr string
		pos  int
		msg  string
	}{
		{"a[1-3", 1, "unclosed '['"},
		{"a1-3]", 4, "unexpected ']'"},
		{"a[1-[2]]", 4, "nested '['"},
		{"a[]", 2, "empty brackets"},
		{"a[1,]", 4, "empty range"},
		{"a[3-1]", 2, "range 3-1 is backwards"},
		{"a[1-]", 4, "missing number"},
		{"a[-1]", 2, "missing number"},
		{"a[x]", 2, "invalid character 'x' in range"},
		{"a[1-2x]", 5, "invalid character 'x' in range"},
		{"a,,b", 2, "empty name"},
		{",a", 0, "empty name"},
		{"a,", 2, "empty name"},
		{"a b", 1, "invalid character ' '"},
		{"a[1-1234567890123456789]", 4, "number too long"},
		{"n[0-99999999]", 2, "expands to more than 1048576 names"},
		{"n[0-1023]m[0-1024]", 10, "expands to more than 1048576 names"},
	}
	for _, c := range cases {
		got, err := Expand(c.expr)
		var se *SyntaxError
		if !errors.As(err, &se) {
			t.Errorf("Expand(%q) = %q, %v; want a SyntaxError", c.expr, got, err)
			continue
		}
		if se.Pos != c.pos || se.Msg != c.msg {
			t.Errorf("Expand(%q): error %q at %d, want %q at %d", c.expr, se.Msg, se.Pos, c.msg, c.pos)
		}
		if !strings.Contains(err.Error(), "position") {
			t.Errorf("error %q does not name the position", err)
		}
	}
}

func TestCompress(t *testing.T) {
	t.Parallel()
	cases := []struct {
		names []string
		want  string
	}{
		{nil, ""},
		{[]string{"login"}, "login"},
		{[]string{"gpu-01"}, "gpu-01"},
		{[]string{"gpu-04", "gpu-01", "gpu-03", "gpu-02", "gpu-07", "gpu-01"}, "gpu-[01-04,07]"},
		{[]string{"cpu-2", "gpu-0002", "cpu-1", "gpu-0001"}, "cpu-[1-2],gpu-[0001-0002]"},
		{[]string{"n9", "n10", "n11"}, "n[9-11]"},
		{[]string{"n2", "n10", "n3"}, "n[2-3,10]"},
		{[]string{"a0999", "a1000", "a10000"}, "a[0999-1000,10000]"},
		{[]string{"a1000", "a1001"}, "a[1000-1001]"},
		{[]string{"n01", "n1", "n001"}, "n1,n01,n001"},
		{[]string{"r1n1", "r1n2", "r2n1"}, "r1n[1-2],r2n1"},
		{[]string{"zeta", "alpha-3", "alpha-1", "alpha"}, "alpha,alpha-[1,3],zeta"},
		{[]string{"a0", "a00", "a1"}, "a[0-1],a00"},
	}
	for _, c := range cases {
		got := Compress(c.names)
		if got != c.want {
			t.Errorf("Compress(%q) = %q, want %q", c.names, got, c.want)
		}
		back, err := Expand(got)
		if err != nil {
			t.Errorf("Expand(Compress(%q)) = %v", c.names, err)
			continue
		}
		if want := sortedUnique(c.names); !slices.Equal(sortedUnique(back), want) || len(back) != len(want) {
			t.Errorf("Expand(%q) = %q, want the names %q", got, back, want)
		}
	}
}

// TestCompressLargePool checks the shape the provisioner renders for big pools.
func TestCompressLargePool(t *testing.T) {
	t.Parallel()
	var names []string
	for i := 1; i <= 1000; i++ {
		if i != 500 {
			names = append(names, "a3u-"+pad(int64(i), 4))
		}
	}
	if got, want := Compress(names), "a3u-[0001-0499,0501-1000]"; got != want {
		t.Fatalf("Compress = %q, want %q", got, want)
	}
}

func sortedUnique(names []string) []string {
	out := slices.Clone(names)
	slices.Sort(out)
	return slices.Compact(out)
}

// validName reports whether n is a name Compress can express.
func validName(n string) bool {
	if n == "" {
		return false
	}
	for i := 0; i < len(n); i++ {
		if !isNameByte(n[i]) {
			return false
		}
	}
	_, digits := splitNumber(n)
	return len(digits) <= maxDigits
}

func FuzzExpandCompress(f *testing.F) {
	f.Add("gpu-0001,gpu-0002,gpu-0010,cpu-1", "a[1-3]")
	f.Add("n9,n10,n010,n0010,x", "r[1-2]n[001-002]")
	f.Add("a0,a00,a1,a999,a1000", "a[0998-1001],b")
	f.Add("", "a[1-[2]]")
	f.Fuzz(func(t *testing.T, csv, expr string) {
		// Expand must never panic, whatever it is given.
		if names, err := Expand(expr); err == nil && len(names) > MaxNames {
			t.Fatalf("Expand(%q) gave %d names", expr, len(names))
		}
		var names []string
		for n := range strings.SplitSeq(csv, ",") {
			if validName(n) {
				names = append(names, n)
			}
		}
		c := Compress(names)
		back, err := Expand(c)
		if err != nil {
			t.Fatalf("Expand(Compress(%q)) = Expand(%q): %v", names, c, err)
		}
		if len(back) != len(sortedUnique(names)) || !slices.Equal(sortedUnique(back), sortedUnique(names)) {
			t.Fatalf("Expand(Compress(%q)) = Expand(%q) = %q", names, c, back)
		}
	})
}

// TestExpandMax: exactly max names expand; one more is ErrTooMany, found
// before the names are built, for one range and for groups multiplied.
func TestExpandMax(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		expr    string
		max     int
		n       int
		tooMany bool
	}{
		{"n[0000-4095]", 4096, 4096, false},
		{"n[0000-4096]", 4096, 0, true},
		{"r[1-2]n[1-3]", 6, 6, false},
		{"r[1-2]n[1-3]", 5, 0, true},
		{"a,b,c", 3, 3, false},
		{"a,b,c,d", 3, 0, true},
		{"n[0-999999999999]", 10, 0, true},
	} {
		names, err := ExpandMax(c.expr, c.max)
		if got := errors.Is(err, ErrTooMany); got != c.tooMany || len(names) != c.n || (err != nil && !c.tooMany) {
			t.Errorf("ExpandMax(%q, %d) = %d names, %v; want %d names, too many %v", c.expr, c.max, len(names), err, c.n, c.tooMany)
		}
	}
	if _, err := Expand("n[1-2"); errors.Is(err, ErrTooMany) {
		t.Errorf("a syntax error is ErrTooMany: %v", err)
	}
}

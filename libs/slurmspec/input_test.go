package slurmspec

import "testing"

func TestParseInputAndTakesInput(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in     string
		ntasks int
		ok     bool
	}{
		{"", 4, true}, {"all", 4, true}, {"0", 4, true}, {"3", 4, true}, {"4", 4, false}, {"4095", 0, true},
		{"4096", 0, false}, {"01", 4, false}, {"+1", 4, false}, {"-1", 4, false}, {"none", 4, false}, {"ALL", 4, false},
		{"99999999999999999999", 0, false},
	} {
		if err := ParseInput(c.in, c.ntasks); (err == nil) != c.ok {
			t.Errorf("ParseInput(%q, %d) = %v, want ok %v", c.in, c.ntasks, err, c.ok)
		}
	}
	for _, c := range []struct {
		in   string
		rank int32
		want bool
	}{{"", 0, false}, {"all", 7, true}, {"2", 2, true}, {"2", 3, false}, {"12", 1, false}} {
		if got := TakesInput(c.in, c.rank); got != c.want {
			t.Errorf("TakesInput(%q, %d) = %v", c.in, c.rank, got)
		}
	}
}

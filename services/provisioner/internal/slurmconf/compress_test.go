package slurmconf

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/loom-ml/loom/libs/hostlist"
)

// compress must say exactly what hostlist.Compress says.
func TestCompressMatchesHostlist(t *testing.T) {
	t.Parallel()
	cases := [][]string{
		{"gpu-0001"},
		{"gpu-0003", "gpu-0001", "gpu-0002", "gpu-0007"},
		{"a3u-0001", "a3u-dbg-0001", "a3u-0002"},
		{"n9", "n10", "n11"},                 // mixed widths: the library decides
		{"gpu-0001", "gpu-0001"},             // duplicates
		{"login", "gpu-0001"},                // no number
		{"gpu-9999", "gpu-10000"},            // wider than the padding
		{"block-01", "block-02", "spine-01"}, // several prefixes
		{"x-1", "x-2", "x-3", "y-7", "x-5"},
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 300 {
		var names []string
		for range 1 + r.IntN(60) {
			prefix := []string{"gpu-", "a3u-", "n", "rack1-"}[r.IntN(4)]
			width := []int{1, 2, 4, 4, 4}[r.IntN(5)]
			names = append(names, fmt.Sprintf("%s%0*d", prefix, width, r.IntN(40)))
		}
		cases = append(cases, names)
	}
	for _, names := range cases {
		if got, want := compress(names), hostlist.Compress(names); got != want {
			t.Errorf("compress(%q) = %q, hostlist.Compress says %q", names, got, want)
		}
	}
	if compress(nil) != "" {
		t.Error("compress(nil) is not empty")
	}
}

package cli

import (
	"strings"
	"testing"
)

// TestMetricsPointsWithoutMetric: --points, --from and --to shape one
// series' read; without --metric the command lists every series, and a
// tester's `loom metrics 12 --points -1` printed that list, exit 0, as if
// the flag had been taken. It is a usage error (exit 2) before anything is asked.
func TestMetricsPointsWithoutMetric(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--points", "-1"}, {"--from", "5"}, {"--to", "9"}} {
		_, errOut, code := run(t, "127.0.0.1:1", append([]string{"metrics", "12"}, args...)...)
		if code != 2 || !strings.Contains(errOut, args[0]) || !strings.Contains(errOut, "--metric") || strings.Contains(errOut, "gateway") {
			t.Errorf("metrics 12 %v: exit %d, %q; want a usage error naming %s and --metric", args, code, errOut, args[0])
		}
	}
}

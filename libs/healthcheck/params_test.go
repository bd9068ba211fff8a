package healthcheck

import (
	"fmt"
	"strings"
	"testing"
)

// TestParseSizes: the all-reduce's sizes read in ascending bytes; a size
// past 1G is refused however it is written, one whose product with its
// multiple overflows included.
func TestParseSizes(t *testing.T) {
	t.Parallel()
	got, err := ParseSizes("8M, 64k,1024,1G")
	if err != nil || fmt.Sprint(got) != "[1024 65536 8388608 1073741824]" {
		t.Fatalf("ParseSizes: %v %v", got, err)
	}
	for _, bad := range []string{"", " , ", "0", "-1K", "2G", "1025M", "lots", "9223372036854775807K", "17179869184G"} {
		if s, err := ParseSizes(bad); err == nil {
			t.Errorf("ParseSizes(%q) = %v, accepted", bad, s)
		}
	}
}

// TestCheckParam: each built-in check's parameter takes what the agent
// takes and says what it wants otherwise; a blank value is the default;
// another name (a site check's own) is not judged; ring is health's.
func TestCheckParam(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ k, v, want string }{
		{"stress", "30s", ""}, {"stress", "0s", "duration above 0"}, {"stress", "2h", "longer than the limit of 1h0m0s"},
		{"memory_mib", "1024", ""}, {"memory_mib", "1025", "whole number from 1 to 1024"},
		{"max_pcie_replays", "0", ""}, {"max_pcie_replays", "-1", "whole number from 0"},
		{"max_pcie_replays", "99999999999", "whole number from 0 to 2147483647"},
		{"dcgmi", "off", ""}, {"dcgmi", "on", "want auto"},
		{"paths", "/,/scratch", ""}, {"paths", "/,scratch", "not an absolute path"},
		{"max_used_percent", "101", "from 0 to 100"}, {"min_free_gb", "NaN", "finite number"}, {"min_free_gb", "-1", "from 0 up"},
		{"products", "200", ""}, {"products", "x", "whole number"},
		{"sizes", "256K,1M", ""}, {"sizes", "2G", "from 1 to 1G"},
		{"iters", "1001", "from 1 to 1000"}, {"min_busbw_gbps", "12.5", ""},
		{"ring", "r1", "set by health"}, {"ring", "", "set by health"},
		{"stress", "  ", ""}, {"my_site_knob", "anything at all", ""},
	} {
		got := CheckParam(tc.k, tc.v)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("CheckParam(%q, %q) = %q, want %q", tc.k, tc.v, got, tc.want)
		}
	}
	for k, ok := range map[string]bool{"sizes": true, "a_1": true, "": false, "A": false, "a-b": false, strings.Repeat("a", 65): false} {
		if ValidParamKey(k, 64) != ok {
			t.Errorf("ValidParamKey(%q) = %v, want %v", k, !ok, ok)
		}
	}
}

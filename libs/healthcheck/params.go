package healthcheck

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// MaxStress bounds gpu_diag level 3's stress run (params["stress"]): no
// longer than a scan may last.
const MaxStress = time.Hour

// paramKey is a check parameter's name. The agent gives a site check each
// parameter as LOOM_CHECK_PARAM_ + the name upper-cased with every other
// character made '_': only lower-case letters, digits and '_' map onto
// distinct variables ("a-b" and "a_b", "x" and "X" would be one).
var paramKey = regexp.MustCompile(`^[a-z0-9_]+$`)

// ValidParamKey reports whether k may name a check parameter: 1 to
// maxBytes of a-z, 0-9 and '_'.
func ValidParamKey(k string, maxBytes int) bool {
	return len(k) <= maxBytes && paramKey.MatchString(k)
}

// CheckParam says why value is not one the built-in checks take for their
// parameter k ("" when it is, or when no built-in check reads k: a site
// check's own parameter). value is trimmed first; an empty one is the
// check's default, as the agent reads it. The gateway asks before a scan
// is accepted, because a value the agent refuses is a CHECK_ERROR on every
// node scanned, and two in a row drain a node.
func CheckParam(k, value string) string {
	rule := params[k]
	if rule == nil {
		return ""
	}
	value = strings.TrimSpace(value)
	if value == "" && k != "ring" {
		return ""
	}
	return rule(value)
}

// params are the parameters the built-in checks read (the agent's
// internal/checks), each with the rule the agent applies to its value, or
// why it cannot be given.
var params = map[string]func(string) string{
	// gpu_diag
	"stress": func(s string) string {
		d, err := time.ParseDuration(s)
		switch {
		case err != nil || d <= 0:
			return "want a duration above 0, such as 3s (gpu_diag level 3's stress run)"
		case d > MaxStress:
			return fmt.Sprintf("%s, longer than the limit of %s", d, MaxStress)
		}
		return ""
	},
	"memory_mib":       wholeParam(1, 1024, "gpu_diag level 2's memory test, MiB per GPU"),
	"max_pcie_replays": wholeParam(0, math.MaxInt32, "gpu_diag level 2's PCIe replays a GPU may have before it warns"),
	"dcgmi": func(s string) string {
		if s != "auto" && s != "off" {
			return "want auto (run dcgmi diag where it is on the agent's PATH) or off"
		}
		return ""
	},
	// disk
	"paths": func(s string) string {
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" && !strings.HasPrefix(p, "/") {
				return fmt.Sprintf("%q is not an absolute path (want a comma-separated list, e.g. /,/scratch)", p)
			}
		}
		return ""
	},
	"min_free_gb":       numberParam(0, math.MaxFloat64, "the disk check's free space, GB"),
	"max_used_percent":  numberParam(0, 100, "the disk check's usage that fails"),
	"warn_used_percent": numberParam(0, 100, "the disk check's usage that warns"),
	// speed
	"products":       wholeParam(1, 1_000_000, "the speed check's matrix products"),
	"min_throughput": numberParam(0, math.MaxFloat64, "the speed check's throughput below which a node fails"),
	// allreduce, allreduce_pair
	"sizes": func(s string) string {
		if _, err := ParseSizes(s); err != nil {
			return err.Error()
		}
		return ""
	},
	"iters":          wholeParam(1, 1000, "the all-reduce's timed iterations"),
	"min_busbw_gbps": numberParam(0, math.MaxFloat64, "the all-reduce's bus bandwidth threshold, GB/s"),
	"ring": func(string) string {
		return "set by health: it names each all-reduce ring of the scan"
	},
}

// wholeParam is the rule of a parameter that is a whole number lo to hi.
func wholeParam(lo, hi int, what string) func(string) string {
	return func(s string) string {
		if n, err := strconv.Atoi(s); err != nil || n < lo || n > hi {
			return fmt.Sprintf("want a whole number from %d to %d (%s)", lo, hi, what)
		}
		return ""
	}
}

// numberParam is the rule of a parameter that is a finite number lo to hi.
func numberParam(lo, hi float64, what string) func(string) string {
	return func(s string) string {
		f, err := strconv.ParseFloat(s, 64)
		switch {
		case err != nil || math.IsNaN(f) || math.IsInf(f, 0):
			return fmt.Sprintf("want a finite number (%s)", what)
		case f < lo || f > hi:
			if hi == math.MaxFloat64 {
				return fmt.Sprintf("want a number from %g up (%s)", lo, what)
			}
			return fmt.Sprintf("want a number from %g to %g (%s)", lo, hi, what)
		}
		return ""
	}
}

// ParseSizes reads the all-reduce's message sizes (params["sizes"],
// health's -allreduce-sizes), such as "64K,1M,8M": K, M and G are
// binary multiples, each size 1 byte to 1G; returned in ascending order.
func ParseSizes(s string) ([]int64, error) {
	var out []int64
	for _, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		f := strings.ToUpper(entry)
		mult := int64(1)
		switch {
		case strings.HasSuffix(f, "K"):
			mult, f = 1<<10, strings.TrimSuffix(f, "K")
		case strings.HasSuffix(f, "M"):
			mult, f = 1<<20, strings.TrimSuffix(f, "M")
		case strings.HasSuffix(f, "G"):
			mult, f = 1<<30, strings.TrimSuffix(f, "G")
		}
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil || n <= 0 || n > (1<<30)/mult {
			return nil, fmt.Errorf("size %q: want a number of bytes from 1 to 1G, with K, M or G (e.g. 256K,1M,4M)", entry)
		}
		out = append(out, n*mult)
	}
	if len(out) == 0 {
		return nil, errors.New("no sizes: want a comma-separated list such as 256K,1M,4M")
	}
	sort.Slice(out, func(a, b int) bool { return out[a] < out[b] })
	return out, nil
}

package slurmspec

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TRES limits (sacctmgr's GrpTRES= and MaxTRESPerJob=): the trackable
// resources Loom counts are Slurm's cpu, mem, node and gres/gpu.

// Bounds of a TRES limit: a count past them is a typo (no installation
// has a billion GPUs), and they keep every sum of a project's runs within
// an int64.
const (
	// MaxTRESCount bounds a cpu, node or gres/gpu limit.
	MaxTRESCount = 1 << 30
	// MaxTRESMemMB bounds a mem limit, in megabytes (1 EiB).
	MaxTRESMemMB = 1 << 40
	// MaxTRESStringBytes bounds a TRES string.
	MaxTRESStringBytes = 256
)

// TRES are limits on trackable resources. MemMB is in megabytes. A value
// above 0 is a limit; 0 is none, unless Zero marks it: a limit of 0, which
// lets no job use that TRES (Slurm's GrpTRES=gres/gpu=0, how a site
// freezes an account). Records written before limits of 0 existed have no
// Zero, and read as they were written.
type TRES struct {
	CPU   int64 `json:"cpu,omitempty"`
	MemMB int64 `json:"mem_mb,omitempty"`
	Node  int64 `json:"node,omitempty"`
	GPU   int64 `json:"gpu,omitempty"`
	// Zero has a bit (1<<TRESCPU and so on) for each TRES whose limit is
	// 0; that TRES's value is 0.
	Zero uint8 `json:"zero,omitempty"`
}

// Indexes of the TRES in TRESNames' order, for Limit and SetLimit.
const (
	TRESCPU = iota
	TRESMem
	TRESNode
	TRESGPU
)

// Limit returns TRES i's limit (TRESCPU..TRESGPU) and whether it has one.
func (t TRES) Limit(i int) (int64, bool) {
	v := [4]int64{t.CPU, t.MemMB, t.Node, t.GPU}[i]
	return v, v > 0 || t.Zero&(1<<i) != 0
}

// SetLimit sets TRES i's limit to v (0 included), or clears it (ok false).
func (t *TRES) SetLimit(i int, v int64, ok bool) {
	if !ok {
		v = 0
	}
	switch i {
	case TRESCPU:
		t.CPU = v
	case TRESMem:
		t.MemMB = v
	case TRESNode:
		t.Node = v
	case TRESGPU:
		t.GPU = v
	}
	t.Zero &^= 1 << i
	if ok && v == 0 {
		t.Zero |= 1 << i
	}
}

// TRESNames are the TRES a string may name, in Slurm's order (its TRES
// ids: cpu 1, mem 2, node 4, then the GRES).
var TRESNames = []string{"cpu", "mem", "node", "gres/gpu"}

// TRESSetting is one name=value of a TRES string; Value -1 clears the
// limit (Slurm's "-1").
type TRESSetting struct {
	Name  string
	Value int64
}

// TRESOf builds a TRES from optional values in TRESNames' order, as the
// API's Tres holds them: nil is no limit, 0 a limit of 0.
func TRESOf(cpu, memMB, node, gpu *int64) TRES {
	var t TRES
	for i, v := range [4]*int64{cpu, memMB, node, gpu} {
		if v != nil {
			t.SetLimit(i, *v, true)
		}
	}
	return t
}

// TRESFromProto is the API's TRES limit as a TRES: none for nil; an
// absent value is no limit, 0 a limit of 0.
func TRESFromProto(t *loomv1.Tres) TRES {
	if t == nil {
		return TRES{}
	}
	return TRESOf(t.Cpu, t.MemMb, t.Node, t.Gpu)
}

// Proto returns t as the API's TRES limit, nil when it sets none.
func (t TRES) Proto() *loomv1.Tres {
	if t == (TRES{}) {
		return nil
	}
	out := &loomv1.Tres{}
	out.Cpu, out.MemMb, out.Node, out.Gpu = t.Optional()
	return out
}

// Optional returns t's limits in TRESNames' order, nil where it has none:
// the API's Tres fields.
func (t TRES) Optional() (cpu, memMB, node, gpu *int64) {
	var out [4]*int64
	for i := range out {
		if v, ok := t.Limit(i); ok {
			out[i] = &v
		}
	}
	return out[0], out[1], out[2], out[3]
}

// ParseTRES reads a TRES string as sacctmgr takes it ("gres/gpu=64,cpu=512",
// "mem=100G", "gres/gpu=0", "gres/gpu=-1"): names any case, mem with an
// optional K, M, G or T suffix (M when none), 0 a limit no job may pass
// (none may use that TRES), -1 clearing one. The error names the bad
// entry and what is taken: one of TRESNames, 0..the bound, or -1.
func ParseTRES(s string) ([]TRESSetting, error) {
	if len(s) > MaxTRESStringBytes {
		return nil, fmt.Errorf("TRES string of %d bytes, the limit is %d", len(s), MaxTRESStringBytes)
	}
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("empty TRES string: name=count[,name=count], names %s", strings.Join(TRESNames, ", "))
	}
	var out []TRESSetting
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		name, val, ok := strings.Cut(item, "=")
		name = strings.ToLower(strings.TrimSpace(name))
		if !ok {
			return nil, fmt.Errorf("%q is not name=count", item)
		}
		switch name {
		case "gres/gpu", "cpu", "node", "mem":
		case "gpu":
			name = "gres/gpu"
		default:
			if strings.HasPrefix(name, "gres/gpu:") {
				return nil, fmt.Errorf("%s: limits per GPU type are not supported by Loom; name gres/gpu", item)
			}
			return nil, fmt.Errorf("%s: Loom limits only %s", item, strings.Join(TRESNames, ", "))
		}
		v, err := parseTRESValue(name, strings.TrimSpace(val))
		if err != nil {
			return nil, fmt.Errorf("%s: %v", item, err)
		}
		out = append(out, TRESSetting{Name: name, Value: v})
	}
	return out, nil
}

// parseTRESValue reads one value: -1, or 0..the bound of name (mem: with
// a unit suffix, in megabytes; kilobytes round up).
func parseTRESValue(name, val string) (int64, error) {
	if val == "-1" {
		return -1, nil
	}
	bound, unit, kilo, orig := int64(MaxTRESCount), int64(1), false, val
	if name == "mem" && val != "" {
		bound = MaxTRESMemMB
		switch val[len(val)-1] {
		case 'K', 'k':
			kilo = true
		case 'M', 'm':
		case 'G', 'g':
			unit = 1024
		case 'T', 't':
			unit = 1024 * 1024
		default:
			val += "M"
		}
		val = val[:len(val)-1]
	}
	n, err := strconv.ParseInt(val, 10, 64)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%q is not a count (or -1 to clear the limit)", val)
	case kilo:
		n = (n + 1023) / 1024
	}
	if n < 0 || n > bound/unit {
		what := ""
		if name == "mem" {
			what = " megabytes"
		}
		return 0, fmt.Errorf("%s is outside 0..%d%s (the limit), or -1 to clear it", orig, bound, what)
	}
	return n * unit, nil
}

// With returns t with the settings applied: each named TRES set (0
// included), -1 clearing it.
func (t TRES) With(settings []TRESSetting) TRES {
	for _, s := range settings {
		if i := slices.Index(TRESNames, s.Name); i >= 0 {
			t.SetLimit(i, max(s.Value, 0), s.Value >= 0)
		}
	}
	return t
}

// String writes t as sacctmgr prints a TRES limit: the TRES set, in
// Slurm's order, mem with its largest whole unit ("cpu=512,mem=1T,
// node=4,gres/gpu=64"; a limit of 0 as "gres/gpu=0"); "" when none is set.
func (t TRES) String() string {
	var b []string
	for i, name := range TRESNames {
		v, ok := t.Limit(i)
		switch {
		case !ok:
		case i == TRESMem && v > 0:
			b = append(b, name+"="+FormatMemMB(v))
		default:
			b = append(b, name+"="+strconv.FormatInt(v, 10))
		}
	}
	return strings.Join(b, ",")
}

// FormatMemMB writes megabytes as Slurm's TRES strings do: in the largest
// unit that divides them whole ("100M", "10G", "1T").
func FormatMemMB(mb int64) string {
	switch {
	case mb%(1024*1024) == 0:
		return strconv.FormatInt(mb/(1024*1024), 10) + "T"
	case mb%1024 == 0:
		return strconv.FormatInt(mb/1024, 10) + "G"
	}
	return strconv.FormatInt(mb, 10) + "M"
}

// ParseMaxWall reads sacctmgr's MaxWall= (a time limit in any of
// ParseTimeLimit's forms) into minutes, as Slurm keeps it (seconds round
// up); -1, UNLIMITED or INFINITE clear it (clear true). 0 is a limit, as
// in Slurm (sacctmgr's time_str2mins reads it as 0 minutes, and
// slurmctld's acct_policy holds every job past it): no job of the
// association runs. The error says what is taken and the bound,
// MaxTimeLimitSeconds.
func ParseMaxWall(s string) (minutes int32, clear bool, err error) {
	secs, unlimited, err := ParseTimeLimit(s)
	switch {
	case err != nil:
		return 0, false, fmt.Errorf("%q is not a time ([days-]hours:minutes:seconds, minutes, or -1 to clear it): %v", s, err)
	case unlimited:
		return 0, true, nil
	case secs < 0:
		return 0, false, fmt.Errorf("%q is negative: -1 clears it", s)
	case secs > MaxTimeLimitSeconds:
		return 0, false, fmt.Errorf("%q is longer than %d days (the limit)", s, MaxTimeLimitSeconds/86400)
	}
	return int32((secs + 59) / 60), false, nil
}

// MaxWallMinutes bounds MaxWall, in minutes (MaxTimeLimitSeconds).
const MaxWallMinutes = MaxTimeLimitSeconds / 60

// Check calls report for each of t's values out of bounds (negative, or
// past MaxTRESCount, MaxTRESMemMB), with the field's proto name (cpu,
// mem_mb, node, gpu) and a message naming the limit: the gateway's
// validation and the scheduler's of the events share it.
func (t TRES) Check(report func(field, msg string)) {
	for _, f := range []struct {
		name     string
		v, bound int64
	}{{"cpu", t.CPU, MaxTRESCount}, {"mem_mb", t.MemMB, MaxTRESMemMB}, {"node", t.Node, MaxTRESCount}, {"gpu", t.GPU, MaxTRESCount}} {
		if f.v < 0 || f.v > f.bound {
			report(f.name, fmt.Sprintf("%d is outside 0..%d (absent: no limit; 0: none may use it; %d is the limit)", f.v, f.bound, f.bound))
		}
	}
}

package slurmspec

import (
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// MaxArrayIndex is the largest array task index Loom accepts (Slurm's
// ceiling for MaxArraySize is 4000001, so its largest index is 4000000).
const MaxArrayIndex = 4000000

// ArrayRange is one element of an --array spec: First..Last every Step
// (a single index has First == Last and Step 1).
type ArrayRange struct {
	First, Last, Step int
}

// ArraySpec is a parsed --array spec ("0-15:2,20,30-32%4").
type ArraySpec struct {
	Ranges []ArrayRange
	// Limit is the most tasks that may run at once (the "%N" suffix); 0
	// means no limit.
	Limit int
}

// ParseArray parses and validates an --array spec as sbatch does: a
// comma-separated list of indexes "N", ranges "N-M" and stepped ranges
// "N-M:S", optionally followed by "%L", the most tasks running at once.
// Indexes are 0..MaxArrayIndex, a range's end is not below its start, and
// steps and limits are at least 1.
func ParseArray(spec string) (*ArraySpec, error) {
	s := strings.TrimSpace(spec)
	if s == "" {
		return nil, errors.New("empty array spec")
	}
	out := &ArraySpec{}
	if body, lim, ok := strings.Cut(s, "%"); ok {
		n, err := strconv.Atoi(lim)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("task limit %q after %% is not a positive number", lim)
		}
		out.Limit = n
		s = body
	}
	if s == "" {
		return nil, errors.New("no indexes before the % limit")
	}
	total := 0
	for _, el := range strings.Split(s, ",") {
		r, err := parseArrayRange(el)
		if err != nil {
			return nil, err
		}
		out.Ranges = append(out.Ranges, r)
		if total += (r.Last-r.First)/r.Step + 1; total > MaxArrayIndex+1 {
			return nil, fmt.Errorf("more than %d tasks", MaxArrayIndex+1)
		}
	}
	return out, nil
}

func parseArrayRange(el string) (ArrayRange, error) {
	if el == "" {
		return ArrayRange{}, errors.New("empty element (two commas in a row?)")
	}
	rng, stepStr, hasStep := strings.Cut(el, ":")
	firstStr, lastStr, isRange := strings.Cut(rng, "-")
	first, err := arrayIndex(firstStr)
	if err != nil {
		return ArrayRange{}, err
	}
	r := ArrayRange{First: first, Last: first, Step: 1}
	if isRange {
		if r.Last, err = arrayIndex(lastStr); err != nil {
			return ArrayRange{}, err
		}
		if r.Last < r.First {
			return ArrayRange{}, fmt.Errorf("range %q ends before it starts", rng)
		}
	}
	if hasStep {
		if !isRange {
			return ArrayRange{}, fmt.Errorf("step in %q needs a range (N-M:S)", el)
		}
		st, err := strconv.Atoi(stepStr)
		if err != nil || st < 1 || !isDigits(stepStr) {
			return ArrayRange{}, fmt.Errorf("step %q is not a positive number", stepStr)
		}
		r.Step = st
	}
	return r, nil
}

func arrayIndex(s string) (int, error) {
	if !isDigits(s) {
		return 0, fmt.Errorf("index %q is not a number", s)
	}
	n, err := strconv.Atoi(s)
	if err != nil || n > MaxArrayIndex {
		return 0, fmt.Errorf("index %s is above the largest allowed, %d", s, MaxArrayIndex)
	}
	return n, nil
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// Count is how many distinct tasks the spec names.
func (a *ArraySpec) Count() int {
	n := 0
	for _, w := range a.bitmap() {
		n += bits.OnesCount64(w)
	}
	return n
}

// Indexes returns the spec's distinct task indexes in ascending order.
func (a *ArraySpec) Indexes() []int {
	var out []int
	for i, w := range a.bitmap() {
		for w != 0 {
			b := bits.TrailingZeros64(w)
			out = append(out, i*64+b)
			w &^= 1 << b
		}
	}
	return out
}

// bitmap marks the spec's indexes (at most MaxArrayIndex+1 bits).
func (a *ArraySpec) bitmap() []uint64 {
	top := 0
	for _, r := range a.Ranges {
		top = max(top, r.Last)
	}
	bm := make([]uint64, top/64+1)
	for _, r := range a.Ranges {
		step := max(r.Step, 1)
		for i := r.First; i <= r.Last; i += step {
			bm[i/64] |= 1 << (i % 64)
		}
	}
	return bm
}

// FormatIndexes writes sorted distinct indexes as Slurm prints an array's
// pending tasks: consecutive runs as ranges ("0-3,7,9-10").
func FormatIndexes(idx []int) string {
	var b strings.Builder
	for i := 0; i < len(idx); {
		j := i
		for j+1 < len(idx) && idx[j+1] == idx[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		if j == i {
			b.WriteString(strconv.Itoa(idx[i]))
		} else {
			fmt.Fprintf(&b, "%d-%d", idx[i], idx[j])
		}
		i = j + 1
	}
	return b.String()
}

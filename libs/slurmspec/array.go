package slurmspec

import (
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// DefaultMaxArraySize is Slurm's default MaxArraySize (slurm.conf): an
// array's task ids must be below it, so 0..1000 by default, and an array has
// at most that many tasks.
const DefaultMaxArraySize = 1001

// MaxArraySizeCeiling is the largest MaxArraySize Slurm accepts in
// slurm.conf (4000001). It bounds the setting, not a submission: a
// submission is checked against the MaxArraySize configured.
const MaxArraySizeCeiling = 4000001

// MaxArrayIndex is the largest task id any MaxArraySize allows
// (MaxArraySizeCeiling-1): the bound of a reference to an array task
// ("12_3"), which may name an array accepted under any setting.
const MaxArrayIndex = MaxArraySizeCeiling - 1

// MsgInvalidArray is Slurm's reason for refusing an --array spec
// ("sbatch: error: Batch job submission failed: Invalid job array
// specification").
const MsgInvalidArray = "Invalid job array specification"

// CheckMaxArraySize reports whether n is a MaxArraySize Slurm accepts:
// 1..MaxArraySizeCeiling. (Slurm also takes 0, which turns arrays off; Loom
// has no use for that.)
func CheckMaxArraySize(n int) error {
	if n < 1 || n > MaxArraySizeCeiling {
		return fmt.Errorf("MaxArraySize %d is outside 1..%d", n, MaxArraySizeCeiling)
	}
	return nil
}

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

// ParseArray parses and validates an --array spec as Slurm does: a
// comma-separated list of task ids "N", ranges "N-M" and stepped ranges
// "N-M:S", optionally followed by "%L", the most tasks running at once.
// Every task id is below maxArraySize (Slurm's MaxArraySize: ids
// 0..maxArraySize-1, so at most maxArraySize tasks and elements), a range's
// end is not below its start, and steps are at least 1 (a limit of 0 is
// none). This is
// the one array grammar: the Slurm commands check a spec's syntax with it
// (against MaxArraySizeCeiling), the gateway and the scheduler check
// submissions against the MaxArraySize configured. A maxArraySize outside
// CheckMaxArraySize's range is an error.
func ParseArray(spec string, maxArraySize int) (*ArraySpec, error) {
	if err := CheckMaxArraySize(maxArraySize); err != nil {
		return nil, err
	}
	s := strings.TrimSpace(spec)
	if s == "" {
		return nil, errors.New("empty array spec")
	}
	out := &ArraySpec{}
	if body, lim, ok := strings.Cut(s, "%"); ok {
		n, err := strconv.Atoi(lim)
		// %0 is no limit, as Slurm 22.05 takes it (checked against it).
		if err != nil || n < 0 || !isDigits(lim) {
			return nil, fmt.Errorf("task limit %q after %% is not a number (0 or more; 0 is no limit)", lim)
		}
		out.Limit = n
		s = body
	}
	if s == "" {
		return nil, errors.New("no indexes before the % limit")
	}
	// More elements than task ids can only repeat ids: refused before the
	// list is split, so a huge spec costs no more than its length.
	if n := strings.Count(s, ",") + 1; n > maxArraySize {
		return nil, fmt.Errorf("%d elements, more than MaxArraySize %d allows", n, maxArraySize)
	}
	// Counting the tasks walks every element's ids: with MaxArraySize
	// raised, 6,553 elements "0-4000000" would be 26 billion steps at each
	// count (the gateway counts an array's tasks at submission and for
	// every live job in a limits check). Repeats past what the largest
	// MaxArraySize allows are refused; a MaxArraySize of 1001 never gets
	// there (1001 elements of 1001 ids).
	total := 0
	for _, el := range strings.Split(s, ",") {
		r, err := parseArrayRange(el, maxArraySize)
		if err != nil {
			return nil, err
		}
		if total += (r.Last-r.First)/r.Step + 1; total > MaxArraySizeCeiling {
			return nil, fmt.Errorf("its elements name more than %d task ids, repeats included", MaxArraySizeCeiling)
		}
		out.Ranges = append(out.Ranges, r)
	}
	return out, nil
}

// WithArrayLimit returns an --array spec with its "%L" task limit set to
// limit, or taken off for 0 (scontrol update ArrayTaskThrottle=); the
// indexes are left as written.
func WithArrayLimit(spec string, limit int) string {
	body, _, _ := strings.Cut(strings.TrimSpace(spec), "%")
	if limit <= 0 {
		return body
	}
	return body + "%" + strconv.Itoa(limit)
}

// ArrayTaskStep is SLURM_ARRAY_TASK_STEP of an array's tasks, as Slurm
// 22.05 sets it: the step written in the spec — that of its first stepped
// element, N-M:S ("0-15:4" is 4, "10,0-6:3" is 3) — else 1, whatever the
// spacing of the indexes ("1,3,5" is 1, not 2). Checked against Slurm
// 22.05. A spec with no step, or one ParseArray refuses, gives 1.
func ArrayTaskStep(spec string) int {
	body, _, _ := strings.Cut(strings.TrimSpace(spec), "%")
	for _, el := range strings.Split(body, ",") {
		if _, st, ok := strings.Cut(el, ":"); ok {
			if n, err := strconv.Atoi(st); err == nil && n >= 1 && isDigits(st) {
				return n
			}
			return 1
		}
	}
	return 1
}

func parseArrayRange(el string, maxArraySize int) (ArrayRange, error) {
	if el == "" {
		return ArrayRange{}, errors.New("empty element (two commas in a row?)")
	}
	rng, stepStr, hasStep := strings.Cut(el, ":")
	firstStr, lastStr, isRange := strings.Cut(rng, "-")
	first, err := taskID(firstStr, maxArraySize)
	if err != nil {
		return ArrayRange{}, err
	}
	r := ArrayRange{First: first, Last: first, Step: 1}
	if isRange {
		if r.Last, err = taskID(lastStr, maxArraySize); err != nil {
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

// taskID parses a task id of a spec checked against maxArraySize.
func taskID(s string, maxArraySize int) (int, error) {
	if !isDigits(s) {
		return 0, fmt.Errorf("task id %q is not a number", s)
	}
	n, err := strconv.Atoi(s)
	if err != nil || n >= maxArraySize {
		return 0, fmt.Errorf("task id %s is not below MaxArraySize %d (task ids are 0-%d)", s, maxArraySize, maxArraySize-1)
	}
	return n, nil
}

// arrayIndex parses the task id of a reference to an array task (ParseJobRef):
// 0..MaxArrayIndex.
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

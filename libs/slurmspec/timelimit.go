package slurmspec

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParseTimeLimit parses a Slurm time limit (--time, TimeLimit=, a
// partition's MaxTime) into seconds. The forms are Slurm's: "M", "M:S",
// "H:M:S", "D-H", "D-H:M" and "D-H:M:S"; "UNLIMITED", "INFINITE" and "-1"
// (any case) mean no limit and return unlimited=true. Slurm itself rounds
// to whole minutes; Loom keeps the seconds.
func ParseTimeLimit(s string) (seconds int64, unlimited bool, err error) {
	switch strings.ToUpper(strings.TrimSpace(s)) {
	case "UNLIMITED", "INFINITE", "-1":
		return 0, true, nil
	case "":
		return 0, false, errors.New("empty time")
	}
	s = strings.TrimSpace(s)
	var days int64
	rest := s
	hasDays := false
	if d, r, ok := strings.Cut(s, "-"); ok {
		n, err := parseTimeNum(d)
		if err != nil {
			return 0, false, err
		}
		days, rest, hasDays = n, r, true
	}
	parts := strings.Split(rest, ":")
	nums := make([]int64, len(parts))
	for i, p := range parts {
		n, err := parseTimeNum(p)
		if err != nil {
			return 0, false, err
		}
		nums[i] = n
	}
	var total int64
	switch {
	case hasDays && len(nums) == 1: // D-H
		total = days*86400 + nums[0]*3600
	case hasDays && len(nums) == 2: // D-H:M
		total = days*86400 + nums[0]*3600 + nums[1]*60
	case hasDays && len(nums) == 3: // D-H:M:S
		total = days*86400 + nums[0]*3600 + nums[1]*60 + nums[2]
	case len(nums) == 1: // M
		total = nums[0] * 60
	case len(nums) == 2: // M:S
		total = nums[0]*60 + nums[1]
	case len(nums) == 3: // H:M:S
		total = nums[0]*3600 + nums[1]*60 + nums[2]
	default:
		return 0, false, fmt.Errorf("%q has too many fields", s)
	}
	if total < 0 || total > math.MaxInt32*60 {
		return 0, false, fmt.Errorf("%q is out of range", s)
	}
	return total, false, nil
}

// parseTimeNum parses one field of a time: a non-negative decimal.
func parseTimeNum(s string) (int64, error) {
	if s == "" {
		return 0, errors.New("empty field")
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%q is not a number", s)
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n > math.MaxInt32 {
		return 0, fmt.Errorf("%q is out of range", s)
	}
	return n, nil
}

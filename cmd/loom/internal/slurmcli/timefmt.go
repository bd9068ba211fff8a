package slurmcli

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
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

// formatSecs formats a duration as squeue and sinfo print TIME and
// TIMELIMIT: "M:SS", "H:MM:SS" or "D-HH:MM:SS". squeue prints INVALID for
// negative times and for more than a year (checked=true); sinfo does not.
func formatSecs(secs int64, checked bool) string {
	if checked && (secs < 0 || secs > 365*24*3600) {
		return "INVALID"
	}
	if secs < 0 {
		secs = 0
	}
	d, h, m, s := secs/86400, secs/3600%24, secs/60%60, secs%60
	switch {
	case d > 0:
		return fmt.Sprintf("%d-%02d:%02d:%02d", d, h, m, s)
	case h > 0:
		return fmt.Sprintf("%d:%02d:%02d", h, m, s)
	default:
		return fmt.Sprintf("%d:%02d", m, s)
	}
}

// formatDuration formats a duration as sacct's Elapsed and scontrol's
// RunTime/TimeLimit do (Slurm's secs2time_str): "HH:MM:SS" or
// "D-HH:MM:SS".
func formatDuration(secs int64) string {
	if secs < 0 {
		return "INVALID"
	}
	d, h, m, s := secs/86400, secs/3600%24, secs/60%60, secs%60
	if d > 0 {
		return fmt.Sprintf("%d-%02d:%02d:%02d", d, h, m, s)
	}
	return fmt.Sprintf("%02d:%02d:%02d", h, m, s)
}

// timestampLayout is Slurm's default time format ("%FT%T").
const timestampLayout = "2006-01-02T15:04:05"

// ctimeLayout is ctime(3)'s format, which squeue -l and sinfo -l print first.
const ctimeLayout = "Mon Jan _2 15:04:05 2006"

// formatTimestamp formats t as Slurm prints times, in loc.
func formatTimestamp(t time.Time, loc *time.Location) string {
	return t.In(loc).Format(timestampLayout)
}

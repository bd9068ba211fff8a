package clusterspec

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/loom-ml/loom/libs/slurmspec"
)

// Unlimited is the max_time Normalize fills in: no time limit.
const Unlimited = "UNLIMITED"

// ParseMaxTime parses a Slurm time limit as slurm.conf's MaxTime takes it:
// "UNLIMITED" or "INFINITE" (any case; unlimited is true), or "M", "M:S",
// "H:M:S", "D-H", "D-H:M", "D-H:M:S". Minutes and seconds after an hour field
// are below 60 and hours after a day field below 24 (Slurm would silently carry
// them over; a typo such as "1:90:00" is more likely than intent). A limit of
// zero is refused: no job could run.
func ParseMaxTime(s string) (d time.Duration, unlimited bool, err error) {
	if strings.EqualFold(s, "UNLIMITED") || strings.EqualFold(s, "INFINITE") {
		return 0, true, nil
	}
	if s == "" {
		return 0, false, errors.New("empty time limit")
	}
	var days int64
	rest := s
	hasDays := false
	if dd, hms, ok := strings.Cut(s, "-"); ok {
		v, err := field(dd, "days", -1)
		if err != nil {
			return 0, false, err
		}
		days, rest, hasDays = v, hms, true
	}
	parts := strings.Split(rest, ":")
	var h, m, sec int64
	switch {
	case hasDays && len(parts) <= 3:
		// D-H, D-H:M, D-H:M:S
		limits := []int64{24, 60, 60}
		vals := []*int64{&h, &m, &sec}
		for i, p := range parts {
			if *vals[i], err = field(p, []string{"hours", "minutes", "seconds"}[i], limits[i]); err != nil {
				return 0, false, err
			}
		}
	case !hasDays && len(parts) == 1:
		if m, err = field(parts[0], "minutes", -1); err != nil {
			return 0, false, err
		}
	case !hasDays && len(parts) == 2:
		if m, err = field(parts[0], "minutes", -1); err != nil {
			return 0, false, err
		}
		if sec, err = field(parts[1], "seconds", 60); err != nil {
			return 0, false, err
		}
	case !hasDays && len(parts) == 3:
		if h, err = field(parts[0], "hours", -1); err != nil {
			return 0, false, err
		}
		if m, err = field(parts[1], "minutes", 60); err != nil {
			return 0, false, err
		}
		if sec, err = field(parts[2], "seconds", 60); err != nil {
			return 0, false, err
		}
	default:
		return 0, false, fmt.Errorf("%q has too many ':' fields", s)
	}
	total := ((days*24+h)*60+m)*60 + sec
	if total <= 0 {
		return 0, false, errors.New("time limit must be positive")
	}
	// Seven-digit fields reach 10^7 days: past 292 years the seconds
	// overflow a time.Duration, to a limit of seconds or none at all.
	if total > slurmspec.MaxTimeLimitSeconds {
		return 0, false, fmt.Errorf("%q is more than a century", s)
	}
	return time.Duration(total) * time.Second, false, nil
}

// field parses one decimal field of a time limit; limit < 0 means unbounded
// (up to 7 digits; ParseMaxTime bounds the total).
func field(s, what string, limit int64) (int64, error) {
	if s == "" || len(s) > 7 {
		return 0, fmt.Errorf("%s %q is not a number of up to 7 digits", what, s)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("%s %q is not a number", what, s)
		}
	}
	v, _ := strconv.ParseInt(s, 10, 64)
	if limit >= 0 && v >= limit {
		return 0, fmt.Errorf("%s %d must be below %d", what, v, limit)
	}
	return v, nil
}

package slurmcli

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ParseBegin parses a --begin time relative to now (whose location is the
// user's time zone), in the forms Slurm accepts, looking ahead:
//
//	now, now+N[seconds|minutes|hours|days|weeks] (also singular and
//	s/sec/m/min/h/hr/d/w; no unit means seconds), now-N...
//	HH:MM[:SS][AM|PM]          today, or tomorrow if that time has passed
//	MMDD[YY], MM/DD[/YY], MM.DD[.YY]     that day at midnight (with no
//	                           year, next year's if that day has passed)
//	MM/DD[/YY]-HH:MM[:SS]      that day at that time
//	YYYY-MM-DD[THH:MM[:SS]]
//	uts<seconds since 1970>
//	today, tomorrow, midnight, noon, elevenses (11:00), fika (15:00),
//	teatime (16:00)
//
// A time more than MaxBeginAhead from now is refused: past 2262 a time no
// longer fits the nanoseconds the scheduler compares, and it would start
// the job at once.
func ParseBegin(s string, now time.Time) (time.Time, error) {
	return parseTime(s, now, false)
}

// ParsePast parses a time as ParseBegin does, but looking back, as Slurm's
// parse_time with its past flag (sacct -S/-E): a time of day with no date
// is today's even when it is still to come (10:00 is this morning, midnight
// the one that began today), and a date with no year the last one that has
// begun (12/24 in January is last Christmas).
func ParsePast(s string, now time.Time) (time.Time, error) {
	return parseTime(s, now, true)
}

func parseTime(s string, now time.Time, past bool) (time.Time, error) {
	t, err := parseBegin(s, now, past)
	if err != nil {
		return time.Time{}, err
	}
	if t.Sub(now) > MaxBeginAhead || now.Sub(t) > MaxBeginAhead {
		return time.Time{}, fmt.Errorf("%s is more than 100 years away", t.Format("2006-01-02"))
	}
	return t, nil
}

// MaxBeginAhead is how far from now a --begin time may be (the gateway
// takes begin_time up to as far after the submission).
const MaxBeginAhead = 100 * 365 * 24 * time.Hour

func parseBegin(s string, now time.Time, past bool) (time.Time, error) {
	in := strings.TrimSpace(s)
	lower := strings.ToLower(in)
	loc := now.Location()
	day := func(t time.Time) time.Time { return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, loc) }
	// A time of day alone: today's; looking ahead, tomorrow's once it has
	// passed.
	at := func(h, m, sec int) time.Time {
		t := time.Date(now.Year(), now.Month(), now.Day(), h, m, sec, 0, loc)
		if !past && t.Before(now) {
			t = t.AddDate(0, 0, 1)
		}
		return t
	}
	switch lower {
	case "":
		return time.Time{}, errors.New("empty time")
	case "now":
		return now, nil
	case "today":
		return day(now), nil
	case "tomorrow":
		return day(now).AddDate(0, 0, 1), nil
	case "midnight":
		return at(0, 0, 0), nil
	case "noon":
		return at(12, 0, 0), nil
	case "elevenses":
		return at(11, 0, 0), nil
	case "fika":
		return at(15, 0, 0), nil
	case "teatime":
		return at(16, 0, 0), nil
	}
	if strings.HasPrefix(lower, "now+") || strings.HasPrefix(lower, "now-") {
		d, err := parseDelta(lower[4:])
		if err != nil {
			return time.Time{}, err
		}
		if lower[3] == '-' {
			d = -d
		}
		return now.Add(d), nil
	}
	// YYYY-MM-DD[THH:MM[:SS]]
	if len(in) >= 10 && in[4] == '-' && in[7] == '-' {
		date, clock, hasClock := strings.Cut(in, "T")
		t, err := time.ParseInLocation("2006-01-02", date, loc)
		if err != nil {
			return time.Time{}, fmt.Errorf("%q is not a date YYYY-MM-DD", date)
		}
		if hasClock {
			h, m, sec, err := parseClock(clock)
			if err != nil {
				return time.Time{}, err
			}
			t = time.Date(t.Year(), t.Month(), t.Day(), h, m, sec, 0, loc)
		}
		return t, nil
	}
	if strings.HasPrefix(lower, "uts") {
		n, err := strconv.ParseInt(lower[3:], 10, 64)
		if err != nil || n < 1000000 || !isDigits(lower[3:]) {
			return time.Time{}, fmt.Errorf("%q is not uts and seconds since 1970", in)
		}
		return time.Unix(n, 0).In(loc), nil
	}
	// MM/DD[/YY]-HH:MM[:SS]
	if date, clock, ok := strings.Cut(in, "-"); ok && strings.Contains(clock, ":") {
		h, m, sec, err := parseClock(clock)
		if err != nil {
			return time.Time{}, err
		}
		return parseMonthDay(date, now, past, h, m, sec)
	}
	// HH:MM[:SS][AM|PM]
	if strings.Contains(in, ":") {
		clock := lower
		pm, am := strings.HasSuffix(clock, "pm"), strings.HasSuffix(clock, "am")
		if pm || am {
			clock = strings.TrimSpace(clock[:len(clock)-2])
		}
		h, m, sec, err := parseClock(clock)
		if err != nil {
			return time.Time{}, err
		}
		if pm || am {
			if h < 1 || h > 12 {
				return time.Time{}, fmt.Errorf("hour %d is not 1-12 with AM/PM", h)
			}
			h %= 12
			if pm {
				h += 12
			}
		}
		return at(h, m, sec), nil
	}
	return parseMonthDay(in, now, past, 0, 0, 0)
}

// parseDelta parses the "N[unit]" of now+N.
func parseDelta(s string) (time.Duration, error) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, fmt.Errorf("%q: a count must follow now+", s)
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is out of range", s)
	}
	unit := time.Second
	switch strings.TrimSpace(s[i:]) {
	case "", "s", "sec", "secs", "second", "seconds":
	case "m", "min", "mins", "minute", "minutes":
		unit = time.Minute
	case "h", "hr", "hrs", "hour", "hours":
		unit = time.Hour
	case "d", "day", "days":
		unit = 24 * time.Hour
	case "w", "week", "weeks":
		unit = 7 * 24 * time.Hour
	default:
		return 0, fmt.Errorf("unknown time unit %q (seconds, minutes, hours, days or weeks)", s[i:])
	}
	if n > int64(100*365*24*time.Hour/unit) {
		return 0, fmt.Errorf("%q is more than 100 years away", s)
	}
	return time.Duration(n) * unit, nil
}

// parseClock parses HH:MM[:SS].
func parseClock(s string) (h, m, sec int, err error) {
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return 0, 0, 0, fmt.Errorf("%q is not a time HH:MM[:SS]", s)
	}
	vals := make([]int, 3)
	limits := []int{23, 59, 59}
	for i, p := range parts {
		if !isDigits(p) || len(p) > 2 {
			return 0, 0, 0, fmt.Errorf("%q is not a time HH:MM[:SS]", s)
		}
		vals[i], _ = strconv.Atoi(p)
		if vals[i] > limits[i] {
			return 0, 0, 0, fmt.Errorf("%q is not a time HH:MM[:SS]", s)
		}
	}
	return vals[0], vals[1], vals[2], nil
}

// parseMonthDay parses MMDD[YY], MM/DD[/YY] and MM.DD[.YY]: that day at
// h:m:sec. With no year it is the soonest such time to come (this year's,
// or next year's once it has passed), or with past this year's (last
// year's for a later month), as Slurm's parse_time.
func parseMonthDay(s string, now time.Time, past bool, h, m, sec int) (time.Time, error) {
	var parts []string
	switch {
	case strings.Contains(s, "/"):
		parts = strings.Split(s, "/")
	case strings.Contains(s, "."):
		parts = strings.Split(s, ".")
	case isDigits(s) && (len(s) == 4 || len(s) == 6):
		for i := 0; i < len(s); i += 2 {
			parts = append(parts, s[i:i+2])
		}
	default:
		return time.Time{}, fmt.Errorf("%q is not a time Slurm understands", s)
	}
	if len(parts) < 2 || len(parts) > 3 {
		return time.Time{}, fmt.Errorf("%q is not a date MM/DD[/YY]", s)
	}
	nums := make([]int, len(parts))
	for i, p := range parts {
		if !isDigits(p) || len(p) > 2 {
			return time.Time{}, fmt.Errorf("%q is not a date MM/DD[/YY]", s)
		}
		nums[i], _ = strconv.Atoi(p)
	}
	year := now.Year()
	month, dayN := nums[0], nums[1]
	switch {
	case len(nums) == 3:
		year = 2000 + nums[2]
	case past && time.Month(month) > now.Month():
		year--
	case !past && !time.Date(year, time.Month(month), dayN, h, m, sec, 0, now.Location()).After(now):
		year++
	}
	t := time.Date(year, time.Month(month), dayN, h, m, sec, 0, now.Location())
	if month < 1 || month > 12 || dayN < 1 || t.Day() != dayN {
		return time.Time{}, fmt.Errorf("%q is not a valid date", s)
	}
	return t, nil
}

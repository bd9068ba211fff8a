package slurmcli

import (
	"fmt"
	"time"

	"github.com/loom-ml/loom/libs/slurmspec"
)

// ParseTimeLimit parses a Slurm time limit into seconds (see
// slurmspec.ParseTimeLimit, shared with the gateway's validation).
func ParseTimeLimit(s string) (seconds int64, unlimited bool, err error) {
	return slurmspec.ParseTimeLimit(s)
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

// ctimeLayout is the time squeue -l and sinfo -l print first: ctime(3)'s
// format but with the day of the month zero-padded, as Slurm 22.05 prints
// it ("Sun Dec 06 19:48:04 2026", checked there; ctime's is "Dec  6").
const ctimeLayout = "Mon Jan 02 15:04:05 2006"

// formatTimestamp formats t as Slurm prints times, in loc.
func formatTimestamp(t time.Time, loc *time.Location) string {
	return t.In(loc).Format(timestampLayout)
}

package slurmspec

import (
	"strings"
	"testing"
)

func TestParseHangTimeout(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{
		"10": 600, "5:30": 330, "1:00:00": 3600, "7-0": MaxHangTimeoutSeconds, "0": 0,
		"UNLIMITED": HangTimeoutOff, "infinite": HangTimeoutOff, "-1": HangTimeoutOff, "Off": HangTimeoutOff, " off ": HangTimeoutOff,
	} {
		if got, err := ParseHangTimeout(in); err != nil || got != want {
			t.Errorf("ParseHangTimeout(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for in, reason := range map[string]string{
		"7-0:0:1": "604801 seconds is more than a week (7-0), the longest hang timeout", // a second past the bound
		"":        "empty time: expected a time like --time's",
		"10m":     "expected a time like --time's",
		"-2":      "",
		"on":      "",
	} {
		got, err := ParseHangTimeout(in)
		if err == nil || !strings.Contains(err.Error(), reason) {
			t.Errorf("ParseHangTimeout(%q) = %d, %v; want an error containing %q", in, got, err, reason)
		}
	}
}

func TestCheckHangTimeout(t *testing.T) {
	t.Parallel()
	for _, ok := range []int64{HangTimeoutOff, 0, 1, 120, MaxHangTimeoutSeconds} {
		if err := CheckHangTimeout(ok); err != nil {
			t.Errorf("CheckHangTimeout(%d) = %v", ok, err)
		}
	}
	// 1<<62 seconds as a time.Duration would wrap to a few seconds' hang
	// timeout: refused, as is every other value out of range.
	for _, bad := range []int64{-2, MaxHangTimeoutSeconds + 1, 1 << 62, -1 << 63} {
		if err := CheckHangTimeout(bad); err == nil {
			t.Errorf("CheckHangTimeout(%d) accepted it", bad)
		}
	}
}

func TestCheckCheckpointDir(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"", "/shared/ckpt", "/a/../b", "ckpt", "ckpt/run-1", "./ckpt", "a/../b", "."} {
		if err := CheckCheckpointDir(ok); err != nil {
			t.Errorf("CheckCheckpointDir(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"..", "../x", "a/../../x"} {
		if err := CheckCheckpointDir(bad); err == nil || !strings.Contains(err.Error(), "leaves the cluster's shared directory") {
			t.Errorf("CheckCheckpointDir(%q) = %v, want a refusal", bad, err)
		}
	}
}

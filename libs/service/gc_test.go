package service

import (
	"fmt"
	"os"
	"os/exec"
	"runtime/debug"
	"strings"
	"testing"
)

// gcPercent returns the collector's current target.
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

// TestTuneGC runs this test binary again, once without GOGC and once with
// it, since the setting is per process and TuneGC acts once.
func TestTuneGC(t *testing.T) {
	t.Parallel()
	if os.Getenv("LOOM_TEST_TUNE_GC") == "1" {
		TuneGC()
		fmt.Printf("gc-percent=%d\n", gcPercent())
		return
	}
	for _, tc := range []struct {
		gogc string // "" = unset
		want int
	}{{"", DefaultGCPercent}, {"50", 50}} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestTuneGC$", "-test.count=1")
		var env []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "GOGC=") {
				env = append(env, kv)
			}
		}
		env = append(env, "LOOM_TEST_TUNE_GC=1")
		if tc.gogc != "" {
			env = append(env, "GOGC="+tc.gogc)
		}
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("GOGC=%q: %v\n%s", tc.gogc, err, out)
		}
		if want := fmt.Sprintf("gc-percent=%d\n", tc.want); !strings.Contains(string(out), want) {
			t.Errorf("GOGC=%q: the process says %q, want %q", tc.gogc, out, want)
		}
	}
}

// Package need lets a test say which programs of the machine it needs. Where
// one is missing the test is skipped, except when LOOM_TEST_REQUIRE_TOOLS is
// set (CI sets it): there a missing program fails the test, so that a package
// missing from .ci/run's install list shows as a red CI instead of a skipped,
// silently green one. It imports nothing of Loom's, so every package's tests
// can use it (libs/embedded's too, which testkit imports).
package need

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// RequireEnv is the variable that turns a missing program from a skip into a
// failure.
const RequireEnv = "LOOM_TEST_REQUIRE_TOOLS"

// Required reports whether missing programs fail tests (RequireEnv is set to
// anything but "", "0" or "false").
func Required() bool {
	v := os.Getenv(RequireEnv)
	return v != "" && v != "0" && v != "false"
}

// Tools skips t (fails it when Required) unless every program in bins is on
// PATH. hint says how to install them ("apt-get install slurmctld").
func Tools(t testing.TB, hint string, bins ...string) {
	t.Helper()
	var missing []string
	for _, b := range bins {
		if _, err := exec.LookPath(b); err != nil {
			missing = append(missing, b)
		}
	}
	if len(missing) == 0 {
		return
	}
	Missing(t, "not installed: "+strings.Join(missing, ", ")+" ("+hint+")")
}

// Missing skips t (fails it when Required) for a need that is not met and
// that Tools cannot see, such as a Python module: msg says what is missing
// and how to install it.
func Missing(t testing.TB, msg string) {
	t.Helper()
	if Required() {
		t.Fatalf("%s; %s is set, so a missing program fails the test: add its package to .ci/run", msg, RequireEnv)
	}
	t.Skip(msg)
}

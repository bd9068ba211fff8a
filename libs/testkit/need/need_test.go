package need

import (
	"runtime"
	"testing"
)

// TestToolsPresent passes through when the programs exist (sh is on every
// machine these tests run on).
func TestToolsPresent(t *testing.T) {
	t.Parallel()
	Tools(t, "apt-get install dash", "sh")
}

// TestRequired reads the variable as documented. Not parallel: it sets the
// environment.
func TestRequired(t *testing.T) {
	for v, want := range map[string]bool{"": false, "0": false, "false": false, "1": true, "yes": true} {
		t.Setenv(RequireEnv, v)
		if got := Required(); got != want {
			t.Errorf("%s=%q: Required() = %v, want %v", RequireEnv, v, got, want)
		}
	}
}

// TestMissingToolFailsWhenRequired runs Tools for a program that does not
// exist in a subtest-like recorder and checks it fails, not skips, when
// required, and skips otherwise.
func TestMissingToolFailsWhenRequired(t *testing.T) {
	for _, required := range []bool{false, true} {
		if required {
			t.Setenv(RequireEnv, "1")
		} else {
			t.Setenv(RequireEnv, "")
		}
		r := &recorder{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			Tools(r, "apt-get install nothing", "loom-no-such-program")
		}()
		<-done
		if required && (!r.failed || r.skipped) {
			t.Errorf("required: failed=%v skipped=%v, want a failure", r.failed, r.skipped)
		}
		if !required && (r.failed || !r.skipped) {
			t.Errorf("not required: failed=%v skipped=%v, want a skip", r.failed, r.skipped)
		}
	}
}

// recorder records Fatalf and Skip instead of ending the test; both end the
// goroutine as the testing package's do.
type recorder struct {
	testing.TB
	failed, skipped bool
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(string, ...any) {
	r.failed = true
	runtime.Goexit()
}
func (r *recorder) Skip(...any) {
	r.skipped = true
	runtime.Goexit()
}

package config

import (
	"errors"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/errs"
)

// TestEnvParsersFallBackAndCheckEnvNamesTheBadVariables: an unparsable
// value gives the default (flags can still be registered), and CheckEnv
// names each such variable with what it must be; set right, it passes.
// Not parallel: it sets the environment.
func TestEnvParsersFallBackAndCheckEnvNamesTheBadVariables(t *testing.T) {
	t.Setenv("LOOM_TEST_DURATION", "ten seconds")
	t.Setenv("LOOM_TEST_INT", "3.5")
	t.Setenv("LOOM_TEST_BOOL", "yes please")
	t.Setenv("LOOM_TEST_FLOAT", "1e3")
	t.Setenv("LOOM_TEST_UNSET", "")
	if d := EnvDuration("LOOM_TEST_DURATION", time.Second); d != time.Second {
		t.Errorf("EnvDuration of a bad value = %v, want the default", d)
	}
	if n := EnvInt("LOOM_TEST_INT", 7); n != 7 {
		t.Errorf("EnvInt of a bad value = %d, want the default", n)
	}
	if b := EnvBool("LOOM_TEST_BOOL", true); !b {
		t.Error("EnvBool of a bad value = false, want the default")
	}
	if f := EnvFloat("LOOM_TEST_FLOAT", 0); f != 1000 {
		t.Errorf("EnvFloat(1e3) = %v", f)
	}
	if n := EnvInt("LOOM_TEST_UNSET", 4); n != 4 {
		t.Errorf("EnvInt of an empty variable = %d, want the default", n)
	}
	err := CheckEnv()
	var inv *errs.InvalidError
	if !errors.As(err, &inv) {
		t.Fatalf("CheckEnv = %v, want an InvalidError", err)
	}
	for _, want := range []string{
		`LOOM_TEST_BOOL: must be true or false, got "yes please"`,
		`LOOM_TEST_DURATION: must be a duration such as 500ms, 30s or 5m, got "ten seconds"`,
		`LOOM_TEST_INT: must be an integer, got "3.5"`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("CheckEnv = %q, want it to say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "LOOM_TEST_FLOAT") || strings.Contains(err.Error(), "LOOM_TEST_UNSET") {
		t.Errorf("CheckEnv = %q names a good or empty variable", err)
	}

	t.Setenv("LOOM_TEST_DURATION", "10s")
	t.Setenv("LOOM_TEST_INT", "3")
	t.Setenv("LOOM_TEST_BOOL", "true")
	if err := CheckEnv(); err != nil {
		t.Fatalf("CheckEnv once fixed = %v", err)
	}
}

// TestFlagWinsOverTheVariable: the documented order, command line first.
func TestFlagWinsOverTheVariable(t *testing.T) {
	t.Setenv("LOOM_TEST_TICK", "2s")
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	tick := fs.Duration("tick", EnvDuration("LOOM_TEST_TICK", time.Second), "")
	if *tick != 2*time.Second {
		t.Fatalf("from the variable: %v", *tick)
	}
	if err := fs.Parse([]string{"-tick", "3s"}); err != nil || *tick != 3*time.Second {
		t.Fatalf("from the flag: %v (%v)", *tick, err)
	}
}

// TestCommonFlagsSayTheirDefaultOnce: flag's -help appends "(default X)"
// to a flag whose value is not its zero, so a usage that also spells out
// its default printed it twice ("-brokers ... (LOOM_BROKERS; default
// 127.0.0.1:9092) (default 127.0.0.1:9092)", in every service's and the
// agent's -help). Each common flag's help says its default at most once.
func TestCommonFlagsSayTheirDefaultOnce(t *testing.T) {
	t.Parallel()
	fs := flag.NewFlagSet("svc", flag.ContinueOnError)
	var c Common
	c.Register(fs, "SVC", "127.0.0.1:7071", "127.0.0.1:9171")
	var b strings.Builder
	fs.SetOutput(&b)
	fs.PrintDefaults()
	var block []string
	check := func() {
		if len(block) == 0 {
			return
		}
		text := strings.Join(block, " ")
		if n := strings.Count(text, "(default ") + strings.Count(text, "; default "); n > 1 {
			t.Errorf("a flag's help says its default %d times: %q", n, text)
		}
		block = nil
	}
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(line, "  -") {
			check()
		}
		block = append(block, line)
	}
	check()
	if !strings.Contains(b.String(), "-brokers") {
		t.Fatalf("no -brokers in the common flags' help:\n%s", b.String())
	}
}

package config

import (
	"errors"
	"flag"
	"strings"
	"testing"
)

type argsConfig struct {
	Name  string
	Count int
}

func (c *argsConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&c.Name, "name", Env("LOOM_TEST_ARGS_NAME", "default"), "a name (LOOM_TEST_ARGS_NAME)")
	fs.IntVar(&c.Count, "count", 1, "a count")
}

// TestParseArgs: a flag wins over its variable, which wins over the
// default; a command line that does not parse is a UsageError that says
// what the flag package would have printed, and Exit tells the user as
// flag.ExitOnError did (usage; 0 for -help, 2 otherwise), a failed run
// "name: err" and 1.
func TestParseArgs(t *testing.T) {
	t.Setenv("LOOM_TEST_ARGS_NAME", "from-env")
	cfg, err := ParseArgs("svc", nil, (*argsConfig).register)
	if err != nil || cfg.Name != "from-env" || cfg.Count != 1 {
		t.Fatalf("no flags: %+v (%v), want the variable's name and count 1", cfg, err)
	}
	cfg, err = ParseArgs("svc", []string{"-name=flag", "-count", "3"}, (*argsConfig).register)
	if err != nil || cfg.Name != "flag" || cfg.Count != 3 {
		t.Fatalf("flags: %+v (%v)", cfg, err)
	}

	_, err = ParseArgs("svc", []string{"-bogus"}, (*argsConfig).register)
	var u *UsageError
	if !errors.As(err, &u) || err.Error() != "flags: flag provided but not defined: -bogus" ||
		!strings.HasPrefix(u.Usage, "flag provided but not defined: -bogus\nUsage of svc:\n") || !strings.Contains(u.Usage, "-count int") {
		t.Fatalf("a bad flag: %v, usage %q", err, u.Usage)
	}
	var out strings.Builder
	if code := Exit("svc", err, &out); code != 2 || out.String() != u.Usage {
		t.Fatalf("a bad flag exits %d writing %q, want 2 and the usage", code, out.String())
	}

	_, err = ParseArgs("svc", []string{"-name", "a", "b"}, (*argsConfig).register)
	if !errors.As(err, &u) || err.Error() != `flags: unexpected arguments ["b"]: svc takes only flags` ||
		!strings.Contains(u.Usage, "Usage of svc:\n") {
		t.Fatalf("a stray argument: %v, usage %q", err, u.Usage)
	}
	out.Reset()
	if code := Exit("svc", err, &out); code != 2 {
		t.Fatalf("a stray argument exits %d, want 2", code)
	}

	_, err = ParseArgs("svc", []string{"-help"}, (*argsConfig).register)
	out.Reset()
	if code := Exit("svc", err, &out); !errors.Is(err, flag.ErrHelp) || code != 0 || !strings.HasPrefix(out.String(), "Usage of svc:\n") {
		t.Fatalf("-help: %v exits %d writing %q, want 0 and the usage", err, code, out.String())
	}

	out.Reset()
	if code := Exit("svc", errors.New("redis: refused"), &out); code != 1 || out.String() != "svc: redis: refused\n" {
		t.Fatalf("a failed run exits %d writing %q", code, out.String())
	}
	out.Reset()
	if code := Exit("svc", nil, &out); code != 0 || out.Len() != 0 {
		t.Fatalf("a clean end exits %d writing %q", code, out.String())
	}
}

package agent

import (
	"strings"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/services/agent/internal/app"
	"github.com/loom-ml/loom/services/agent/internal/checks"
)

// checkList splits a comma list of check names (-prolog-checks,
// -epilog-checks), dropping blanks.
func checkList(s string) []string {
	var out []string
	for _, n := range strings.Split(s, ",") {
		if n = strings.TrimSpace(n); n != "" {
			out = append(out, n)
		}
	}
	return out
}

// validateJobChecks checks the prolog and epilog settings: plain check
// names, none of them an all-reduce (which needs its peers from health),
// and timeouts that are not negative (the epilog's defaulting to the
// prolog's).
func (c *Config) validateJobChecks(v *errs.Validator) {
	for _, f := range [...]struct{ field, list string }{{"prolog_checks", c.PrologChecks}, {"epilog_checks", c.EpilogChecks}} {
		field := f.field
		for _, n := range checkList(f.list) {
			v.Check(n != checks.AllReduce && n != checks.AllReducePair, field,
				"%s runs between nodes: health runs it (loom health scan), not a node's prolog or epilog", n)
			v.Check(!strings.ContainsAny(n, "/\\") && n != "." && n != ".." && len(n) <= 64, field,
				"must be check names (gpu_diag, disk, speed, or a program of -check-dir), got %q", n)
		}
	}
	v.Check(c.PrologTimeout >= 0, "prolog_timeout", "must not be negative, got %s", c.PrologTimeout)
	if c.PrologTimeout == 0 {
		c.PrologTimeout = app.DefaultPrologTimeout
	}
	v.Check(c.EpilogTimeout >= 0, "epilog_timeout", "must not be negative, got %s", c.EpilogTimeout)
	if c.EpilogTimeout == 0 {
		c.EpilogTimeout = c.PrologTimeout
	}
}

// jobChecks is the app's view of the prolog and epilog settings.
func (c *Config) jobChecks() app.JobChecks {
	return app.JobChecks{Prolog: checkList(c.PrologChecks), Epilog: checkList(c.EpilogChecks), Timeout: c.PrologTimeout,
		EpilogTimeout: c.EpilogTimeout}
}

package main

import (
	"flag"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/loom-ml/loom/libs/testkit/need"
)

// TestQuickReport runs the whole benchmark in -quick mode with 2 seeds and
// without Optuna, into a report that has another program's section, and
// checks the section's shape: every table and row is there, the other
// section is untouched, and the rerun command reproduces the flags.
func TestQuickReport(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "REPORT.md")
	other := "# Report\n\n<!-- other:begin -->\nother\n<!-- other:end -->\n"
	if err := os.WriteFile(path, []byte(other), 0o644); err != nil {
		t.Fatal(err)
	}
	o, err := parseFlags(flag.NewFlagSet("hpobench", flag.ContinueOnError),
		[]string{"-quick", "-seeds", "2", "-optuna=false", "-report", path})
	if err != nil {
		t.Fatal(err)
	}
	if err := run(o, io.Discard); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if !strings.HasPrefix(s, other+"\n<!-- hpobench:begin -->\n") || !strings.HasSuffix(s, "<!-- hpobench:end -->\n") {
		t.Fatalf("report does not keep the other section and append hpobench's:\n%s", s)
	}
	for _, want := range []string{
		"## Hyperparameter search against Optuna (hpobench)",
		"Rerun: `go run ./bench/cmd/hpobench -quick -optuna=false -report bench/REPORT.md`",
		"### Target: Loom's default is not worse than TPE on any function and beats random search on all",
		"### Per function and method (2 seeds each)",
		"### Suggestion latency",
		"### ASHA against no early stopping",
		"| no stopping |", "| ASHA |", "kept the best configuration in",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	names := []string{trainerProblem(o.trainerEpochs, o.trainerTrials).name}
	for _, f := range testFuncs() {
		names = append(names, f.name)
	}
	for _, name := range names {
		// One verdict row (with a verdict) and two method rows per function.
		verdict := regexp.MustCompile(`(?m)^\| ` + regexp.QuoteMeta(name) + ` \| [^|]+ \| — \| — \(Optuna not run\) \| [^|]+, p[=<][0-9.]+ \| — \(Optuna not run\) \| (met|missed) \(Loom random only\) \|$`)
		if !verdict.MatchString(s) {
			t.Errorf("no verdict row for %s", name)
		}
		for _, m := range []string{"Loom default (GP-EI)", "Loom RANDOM_SEARCH"} {
			row := regexp.MustCompile(`(?m)^\| ` + regexp.QuoteMeta(name) + ` \| ` + regexp.QuoteMeta(m) + ` \| [0-9.e+-]+ ± [0-9.e+-]+ \| [0-9.e+-]+ \| -?[0-9.]+ ± [0-9.]+ \| >?[0-9]+ \([0-9]/2\) \|`)
			if !row.MatchString(s) {
				t.Errorf("no %s row for %s", m, name)
			}
		}
		if strings.Contains(s, "| "+name+" | Optuna") {
			t.Errorf("Optuna rows for %s without Optuna", name)
		}
	}
	if !regexp.MustCompile(`(?m)^\| 100 \| 8 \| 10 \| CPU time \| [0-9.]+ ms \| [0-9.]+ ms \| [0-9.]+ ms \| (met|missed) \|$`).MatchString(s) {
		t.Error("no latency row for 100 trials × 8 parameters, 10 calls")
	}
	if !regexp.MustCompile(`(?m)^\| 100 \| 8 \| 10 \| wall time \| [0-9.]+ ms \| [0-9.]+ ms \| [0-9.]+ ms \| \(not judged\) \|$`).MatchString(s) {
		t.Error("no wall-time latency row")
	}
	if !regexp.MustCompile(`load average [0-9.?]+ → [0-9.?]+ on [0-9]+ CPUs`).MatchString(s) {
		t.Error("no load average with the latency")
	}
	if !regexp.MustCompile(`Target (met|missed): ASHA trained [0-9.]+ % of the trial-epochs`).MatchString(s) {
		t.Error("no ASHA verdict")
	}
	if strings.Contains(s, "NaN") {
		t.Error("report has a NaN")
	}
}

// TestOptunaDriver runs short Optuna studies through the embedded driver
// (Debian's python3-optuna, which CI installs): every suggestion is inside the box, integer
// parameters come back whole, and TPE with a seed is reproducible.
func TestOptunaDriver(t *testing.T) {
	t.Parallel()
	python, err := findPython("")
	if err != nil {
		need.Missing(t, err.Error())
	}
	drv, err := startOptuna(python)
	if err != nil {
		t.Fatal(err)
	}
	defer drv.close()
	if v, err := drv.version(); err != nil || v == "" {
		t.Fatalf("version = %q, %v", v, err)
	}
	var seen [][]float64
	p := trainerProblem(1, 12)
	p.eval = func(x []float64) float64 {
		for i, q := range p.params {
			if x[i] < q.lo || x[i] > q.hi || (q.int && x[i] != math.Round(x[i])) {
				t.Errorf("suggested %s = %v, outside [%v, %v] or not whole", q.name, x[i], q.lo, q.hi)
			}
		}
		seen = append(seen, x)
		return math.Log(x[0]) * math.Log(x[0]) // best near learning rate 1
	}
	var runs [2]runResult
	for i := range runs {
		if runs[i], err = drv.run(p, "tpe", 7); err != nil {
			t.Fatal(err)
		}
	}
	if len(runs[0].values) != 12 || !slicesEqual(runs[0].values, runs[1].values) {
		t.Errorf("TPE seed 7 twice: %v and %v", runs[0].values, runs[1].values)
	}
	if _, err := drv.run(p, "no-such-sampler", 1); err == nil || !strings.Contains(err.Error(), "unknown sampler") {
		t.Errorf("unknown sampler: %v", err)
	}
}

func slicesEqual(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestPointChecksRange: a suggestion outside the box fails the run rather
// than being scored; one off by rounding is clamped; integers are rounded.
func TestPointChecksRange(t *testing.T) {
	t.Parallel()
	p := &problem{params: []param{{name: "a", lo: 0, hi: 1}, {name: "n", lo: 1, hi: 8, int: true}}}
	at := func(vs ...float64) func(int, param) (float64, bool) {
		return func(i int, _ param) (float64, bool) { return vs[i], true }
	}
	if _, err := p.point(at(1.5, 2)); err == nil {
		t.Error("a = 1.5 accepted in [0, 1]")
	}
	x, err := p.point(at(1+1e-12, 2.0000001))
	if err != nil || x[0] != 1 || x[1] != 2 {
		t.Errorf("point = %v, %v; want [1 2]", x, err)
	}
}

// TestQuickFlags: -quick shrinks the budgets not given and keeps those
// given; a zero budget is refused.
func TestQuickFlags(t *testing.T) {
	t.Parallel()
	o, err := parseFlags(flag.NewFlagSet("x", flag.ContinueOnError), []string{"-quick", "-trials", "30"})
	if err != nil {
		t.Fatal(err)
	}
	q := quickDefaults()
	if o.trials != 30 || o.seeds != q.seeds || o.latencyTrials != q.latencyTrials {
		t.Errorf("quick: trials %d seeds %d latency %d", o.trials, o.seeds, o.latencyTrials)
	}
	if got := rerun(o); got != "go run ./bench/cmd/hpobench -quick -trials 30 -report bench/REPORT.md" {
		t.Errorf("rerun = %q", got)
	}
	if _, err := parseFlags(flag.NewFlagSet("x", flag.ContinueOnError), []string{"-seeds", "0"}); err == nil {
		t.Error("-seeds 0 accepted")
	}
}

// TestOnly: -only keeps the functions whose name contains it, and one
// that matches nothing is an error naming the flag, not an empty report.
func TestOnly(t *testing.T) {
	t.Parallel()
	o, err := parseFlags(flag.NewFlagSet("hpobench", flag.ContinueOnError),
		[]string{"-quick", "-seeds", "1", "-optuna=false", "-only", "BRANIN"})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := run(o, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "| Branin | Loom default") || strings.Contains(out.String(), "| Hartmann-3 |") || strings.Contains(out.String(), "| Trainer val_loss") {
		t.Errorf("-only BRANIN did not keep Branin alone:\n%s", out.String())
	}
	o.only = "no-such-function"
	if err := run(o, io.Discard); err == nil || !strings.Contains(err.Error(), `-only "no-such-function" matches no function`) {
		t.Errorf("run with -only matching nothing = %v", err)
	}
}

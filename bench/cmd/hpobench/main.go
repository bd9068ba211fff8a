// Command hpobench compares Loom's hyperparameter search (libs/hpo) with
// Optuna's, side by side, at equal trial budgets.
//
// Objectives: the standard test functions with known optima (Branin,
// Hartmann-3, Hartmann-6, Goldstein-Price, six-hump camel, Styblinski-Tang
// in 4 dimensions) and the built-in trainer's validation loss
// (libs/toytrain) over learning rate, batch size, weight decay and hidden
// units. Each is searched, for every seed, by Loom's default (Bayesian
// optimisation, algorithm unspecified), Loom's RANDOM_SEARCH, Optuna's
// TPESampler(seed) and Optuna's RandomSampler(seed), one trial after the
// other. Every objective value is computed here in Go; Optuna runs in a
// small embedded Python driver that only suggests points (ask) and is told
// their values (tell) over JSON lines, so both systems search the
// identical function.
//
// The report gives, per function and method, the final regret, the area
// under the best-so-far log-regret curve and the trials to reach a regret
// threshold, with Mann-Whitney U tests of Loom's default against TPE and
// against both random searches, and a verdict on the target "Loom's
// default is not worse than TPE on any function and beats random search on
// all". It also times hpo.Suggest at 1,000 trials × 8 parameters (target
// p99 ≤ 5 ms) and compares ASHA with no early stopping on the trainer's
// learning curves (target: the same best result in ≤ 1/3 of the
// trial-epochs).
//
// Optuna is Debian's python3-optuna (`apt-get install -y python3-optuna`);
// -optuna=false runs Loom alone. -quick is a smoke test. Results go to
// stdout and, with -report, into the hpobench section of a Markdown report.
package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/loom-ml/loom/bench/internal/report"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
)

// options are the benchmark's settings.
type options struct {
	seeds, trials                int
	trainerTrials, trainerEpochs int
	ashaSeeds, ashaTrials        int
	ashaMin, ashaEpochs, ashaEta int
	latencyTrials, latencyCalls  int
	optuna                       bool
	python                       string
	workers                      int
	quick                        bool
	report                       string
	// only, when set, keeps the problems whose name contains it (any
	// case): a quicker rerun of one function.
	only string
}

// defaults are the full run's settings.
func defaults() options {
	// The trainer's budgets are smaller: its trials train for real (an
	// epoch takes milliseconds, tens of them at 256 hidden units and small
	// batches, where its best configurations are).
	//
	// ASHA's trials train up to 81 epochs with rungs at 9 and 36
	// (reduction factor 4): the trainer's best configurations (learning
	// rates 0.1 to 0.3) sit near the untrained loss for their first 5 to
	// 12 epochs and then drop below every slower learner, so rungs before
	// about epoch 9 rank them last.
	return options{seeds: 20, trials: 60, trainerTrials: 30, trainerEpochs: 5,
		ashaSeeds: 10, ashaTrials: 30, ashaMin: 9, ashaEpochs: 81, ashaEta: 4,
		latencyTrials: 1000, latencyCalls: 200, optuna: true, workers: runtime.GOMAXPROCS(0)}
}

// quickDefaults are -quick's settings: every part runs, small.
func quickDefaults() options {
	o := defaults()
	o.seeds, o.trials, o.trainerTrials, o.trainerEpochs = 2, 12, 8, 2
	o.ashaSeeds, o.ashaTrials, o.ashaMin, o.ashaEpochs = 2, 9, 3, 9
	o.latencyTrials, o.latencyCalls = 100, 10
	return o
}

// parseFlags reads the command line: -quick changes the defaults of the
// flags not given.
func parseFlags(fs *flag.FlagSet, args []string) (options, error) {
	var o options
	d := defaults()
	fs.IntVar(&o.seeds, "seeds", d.seeds, "seeds per function and method")
	fs.IntVar(&o.trials, "trials", d.trials, "trials per study on the test functions")
	fs.IntVar(&o.trainerTrials, "trainer-trials", d.trainerTrials, "trials per study on the trainer")
	fs.IntVar(&o.trainerEpochs, "trainer-epochs", d.trainerEpochs, "epochs each trainer trial trains")
	fs.IntVar(&o.ashaSeeds, "asha-seeds", d.ashaSeeds, "seeds of the ASHA comparison")
	fs.IntVar(&o.ashaTrials, "asha-trials", d.ashaTrials, "trials per study in the ASHA comparison")
	fs.IntVar(&o.ashaMin, "asha-min", d.ashaMin, "ASHA's min_step_count: the first rung, in epochs")
	fs.IntVar(&o.ashaEpochs, "asha-epochs", d.ashaEpochs, "epochs of a trial that is not stopped (ASHA's max_step_count)")
	fs.IntVar(&o.ashaEta, "asha-eta", d.ashaEta, "ASHA's reduction_factor")
	fs.IntVar(&o.latencyTrials, "latency-trials", d.latencyTrials, "trials in the history Suggest is timed on")
	fs.IntVar(&o.latencyCalls, "latency-calls", d.latencyCalls, "Suggest calls timed")
	fs.BoolVar(&o.optuna, "optuna", d.optuna, "run Optuna's samplers too (needs python3-optuna)")
	fs.StringVar(&o.python, "python", "", "python with optuna (default: python3, then /usr/bin/python3)")
	fs.IntVar(&o.workers, "workers", d.workers, "studies run at once")
	fs.StringVar(&o.only, "only", "", "run only the functions whose name contains this (case-insensitive), e.g. trainer or branin")
	fs.BoolVar(&o.quick, "quick", false, "smoke test: small budgets unless given")
	fs.StringVar(&o.report, "report", "", "Markdown file to write the results into (the section between the hpobench markers is replaced)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	q := quickDefaults()
	sizes := []struct {
		name       string
		dst, quick *int
	}{
		{"seeds", &o.seeds, &q.seeds}, {"trials", &o.trials, &q.trials},
		{"trainer-trials", &o.trainerTrials, &q.trainerTrials}, {"trainer-epochs", &o.trainerEpochs, &q.trainerEpochs},
		{"asha-seeds", &o.ashaSeeds, &q.ashaSeeds}, {"asha-trials", &o.ashaTrials, &q.ashaTrials},
		{"asha-epochs", &o.ashaEpochs, &q.ashaEpochs}, {"asha-min", &o.ashaMin, &q.ashaMin}, {"latency-trials", &o.latencyTrials, &q.latencyTrials},
		{"latency-calls", &o.latencyCalls, &q.latencyCalls}, {"workers", &o.workers, &q.workers},
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, f := range sizes {
		if o.quick && !set[f.name] {
			*f.dst = *f.quick
		}
		if *f.dst < 1 {
			return o, fmt.Errorf("-%s must be at least 1", f.name)
		}
	}
	if o.ashaMin > o.ashaEpochs {
		return o, fmt.Errorf("-asha-min must be at most -asha-epochs")
	}
	if o.ashaEta < 2 {
		return o, fmt.Errorf("-asha-eta must be at least 2")
	}
	return o, nil
}

func main() {
	o, err := parseFlags(flag.CommandLine, os.Args[1:])
	if err == nil {
		err = run(o, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "hpobench:", err)
		os.Exit(1)
	}
}

// logf reports progress on stderr.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "hpobench: "+format+"\n", args...)
}

// method is one search system.
type method struct {
	name   string
	optuna bool
	run    func(o *optunaProc, p *problem, seed int64) (runResult, error)
}

// methods are the compared searches; Loom's default is first (the one
// tested against the others).
func methods(withOptuna bool) []method {
	ms := []method{
		{name: "Loom default (GP-EI)", run: func(_ *optunaProc, p *problem, seed int64) (runResult, error) {
			return runLoom(p, trainingv1.StudySpec_ALGORITHM_UNSPECIFIED, seed)
		}},
		{name: "Loom RANDOM_SEARCH", run: func(_ *optunaProc, p *problem, seed int64) (runResult, error) {
			return runLoom(p, trainingv1.StudySpec_RANDOM_SEARCH, seed)
		}},
	}
	if withOptuna {
		ms = append(ms,
			method{name: "Optuna TPE", optuna: true, run: func(o *optunaProc, p *problem, seed int64) (runResult, error) {
				return o.run(p, "tpe", seed)
			}},
			method{name: "Optuna random", optuna: true, run: func(o *optunaProc, p *problem, seed int64) (runResult, error) {
				return o.run(p, "random", seed)
			}})
	}
	return ms
}

// Indices of the methods, in methods' order.
const (
	mDefault = iota
	mLoomRandom
	mTPE
	mOptunaRandom
)

// results holds every study: res[problem][method][seed].
type results [][][]runResult

// runStudies runs every (problem, method, seed) study on o.workers
// workers, each with its own Optuna driver started when first needed.
func runStudies(o options, python string, probs []*problem, ms []method) (results, error) {
	res := make(results, len(probs))
	type job struct{ p, m, s int }
	var jobs []job
	for p := range probs {
		res[p] = make([][]runResult, len(ms))
		for m := range ms {
			res[p][m] = make([]runResult, o.seeds)
		}
		// Seeds outermost so the costly studies (the trainer, listed first)
		// spread over the workers from the start.
		for s := range o.seeds {
			for m := range ms {
				jobs = append(jobs, job{p, m, s})
			}
		}
	}
	ch := make(chan job)
	var (
		mu       sync.Mutex
		firstErr error
		done     int
		wg       sync.WaitGroup
	)
	began, last := time.Now(), time.Now()
	for range o.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var drv *optunaProc
			defer func() {
				if drv != nil {
					drv.close()
				}
			}()
			for j := range ch {
				var err error
				if ms[j.m].optuna && drv == nil {
					drv, err = startOptuna(python)
				}
				var r runResult
				if err == nil {
					r, err = ms[j.m].run(drv, probs[j.p], int64(j.s+1))
				}
				mu.Lock()
				res[j.p][j.m][j.s] = r
				done++
				if err != nil && firstErr == nil {
					firstErr = fmt.Errorf("%s, %s, seed %d: %w", probs[j.p].name, ms[j.m].name, j.s+1, err)
				}
				if time.Since(last) > 10*time.Second {
					last = time.Now()
					logf("%d/%d studies in %v", done, len(jobs), time.Since(began).Round(time.Second))
				}
				mu.Unlock()
			}
		}()
	}
	for _, j := range jobs {
		mu.Lock()
		stop := firstErr != nil
		mu.Unlock()
		if stop {
			break
		}
		ch <- j
	}
	close(ch)
	wg.Wait()
	return res, firstErr
}

// runASHAs runs the ASHA comparison for every seed on o.workers workers.
func runASHAs(o options, p *problem) ([]ashaResult, error) {
	out := make([]ashaResult, o.ashaSeeds)
	errs := make([]error, o.ashaSeeds)
	sem := make(chan struct{}, o.workers)
	var wg sync.WaitGroup
	for s := range o.ashaSeeds {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			out[s], errs[s] = runASHA(p, int64(s+1), o.ashaTrials, o.ashaMin, o.ashaEpochs, o.ashaEta)
		}()
	}
	wg.Wait()
	for s, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("asha seed %d: %w", s+1, err)
		}
	}
	return out, nil
}

// run runs the benchmark and writes its section to w (and the report).
func run(o options, w io.Writer) error {
	began := time.Now()
	python, optunaVersion := "", ""
	if o.optuna {
		var err error
		if python, err = findPython(o.python); err != nil {
			return err
		}
		drv, err := startOptuna(python)
		if err != nil {
			return err
		}
		optunaVersion, err = drv.version()
		drv.close()
		if err != nil {
			return err
		}
		logf("Optuna %s (%s)", optunaVersion, python)
	}
	// Latency first and alone: no study shares the CPU, and the process's
	// heap holds the history only, not every study's results, whose
	// marking would otherwise land in the calls a collection happens in.
	t0 := time.Now()
	lat, err := measureLatency(o.latencyTrials, o.latencyCalls)
	if err != nil {
		return err
	}
	logf("latency done in %v", time.Since(t0).Round(time.Second))

	studiesBegan := time.Now()
	probs := []*problem{trainerProblem(o.trainerEpochs, o.trainerTrials)}
	for _, f := range testFuncs() {
		probs = append(probs, fromTestFunc(f, o.trials))
	}
	if o.only != "" {
		kept := probs[:0]
		for _, p := range probs {
			if strings.Contains(strings.ToLower(p.name), strings.ToLower(o.only)) {
				kept = append(kept, p)
			}
		}
		if len(kept) == 0 {
			return fmt.Errorf("-only %q matches no function", o.only)
		}
		probs = kept
	}
	ms := methods(o.optuna)
	res, err := runStudies(o, python, probs, ms)
	if err != nil {
		return err
	}
	studiesTook := time.Since(studiesBegan)
	logf("studies done in %v", studiesTook.Round(time.Second))

	t0 = time.Now()
	ashas, err := runASHAs(o, trainerProblem(o.ashaEpochs, o.ashaTrials))
	if err != nil {
		return err
	}
	ashaTook := time.Since(t0)
	logf("asha done in %v", ashaTook.Round(time.Second))

	section := render(o, renderInput{
		probs: probs, methods: ms, res: res, ashas: ashas, latency: lat,
		optunaVersion: optunaVersion, took: time.Since(began), studiesTook: studiesTook, ashaTook: ashaTook,
	})
	if _, err := w.Write([]byte(section)); err != nil {
		return err
	}
	if o.report != "" {
		return report.WriteSection(o.report, "hpobench", section)
	}
	return nil
}

// analysis is one method's scores on one problem, one entry per seed.
type analysis struct {
	final []float64 // final regret
	auc   []float64 // mean over trials of log10(best-so-far regret)
	hit   []float64 // trials to reach the threshold; budget+1 if never
	// suggestMs is the mean suggestion time per trial, in ms.
	suggestMs float64
}

// regretFloor keeps log10 regret finite where a run found the reference
// value itself.
const regretFloor = 1e-8

// reference is the value regret is measured against: the known optimum,
// or the best value any study found.
func reference(p *problem, byMethod [][]runResult) float64 {
	if !math.IsNaN(p.fopt) {
		return p.fopt
	}
	ref := math.Inf(1)
	for _, rs := range byMethod {
		for _, r := range rs {
			for _, v := range r.values {
				ref = math.Min(ref, v)
			}
		}
	}
	return ref
}

// threshold is p's regret threshold in absolute terms.
func threshold(p *problem, ref float64) float64 {
	if p.relative {
		return p.threshold * math.Abs(ref)
	}
	return p.threshold
}

// analyse scores one method's studies of p.
func analyse(p *problem, rs []runResult, ref float64) analysis {
	var a analysis
	thr := threshold(p, ref)
	var sug time.Duration
	trials := 0
	for _, r := range rs {
		best := math.Inf(1)
		area := 0.0
		hit := float64(p.trials + 1)
		for k, v := range r.values {
			best = math.Min(best, v)
			reg := math.Max(best-ref, 0)
			area += math.Log10(math.Max(reg, regretFloor))
			if reg <= thr && hit > float64(p.trials) {
				hit = float64(k + 1)
			}
		}
		a.final = append(a.final, math.Max(best-ref, 0))
		a.auc = append(a.auc, area/float64(len(r.values)))
		a.hit = append(a.hit, hit)
		sug += r.suggest
		trials += len(r.values)
	}
	if trials > 0 {
		a.suggestMs = float64(sug) / float64(trials) / 1e6
	}
	return a
}

// alpha is the significance level of every test (two-sided, no
// correction for the number of tests: each verdict cell is its own
// question).
const alpha = 0.05

// compare says how Loom's default (a) stands against another method (b)
// on a regret sample: "better"/"worse" when the test is significant at
// alpha, else "no difference", with the p-value.
func compare(a, b []float64) (word string, p float64) {
	u, p := mannWhitney(a, b)
	half := float64(len(a)*len(b)) / 2
	switch {
	case p < alpha && u > half:
		return "better", p
	case p < alpha && u < half:
		return "worse", p
	}
	return "no difference", p
}

// fmtP prints a p-value.
func fmtP(p float64) string {
	if math.IsNaN(p) {
		return "—"
	}
	if p < 1e-4 {
		return "p<0.0001"
	}
	return fmt.Sprintf("p=%.4f", p)
}

// g prints a regret compactly.
func g(x float64) string {
	if x == 0 {
		return "0"
	}
	return fmt.Sprintf("%.3g", x)
}

// renderInput is everything the section shows.
type renderInput struct {
	probs             []*problem
	methods           []method
	res               results
	ashas             []ashaResult
	latency           latencyResult
	optunaVersion     string
	took, studiesTook time.Duration
	ashaTook          time.Duration
}

// rerun is the command line that reproduces the run.
func rerun(o options) string {
	d := defaults()
	if o.quick {
		d = quickDefaults()
	}
	args := []string{"go run ./bench/cmd/hpobench"}
	if o.quick {
		args = append(args, "-quick")
	}
	add := func(name string, v, def int) {
		if v != def {
			args = append(args, fmt.Sprintf("-%s %d", name, v))
		}
	}
	add("seeds", o.seeds, d.seeds)
	add("trials", o.trials, d.trials)
	add("trainer-trials", o.trainerTrials, d.trainerTrials)
	add("trainer-epochs", o.trainerEpochs, d.trainerEpochs)
	add("asha-seeds", o.ashaSeeds, d.ashaSeeds)
	add("asha-trials", o.ashaTrials, d.ashaTrials)
	add("asha-min", o.ashaMin, d.ashaMin)
	add("asha-epochs", o.ashaEpochs, d.ashaEpochs)
	add("asha-eta", o.ashaEta, d.ashaEta)
	add("latency-trials", o.latencyTrials, d.latencyTrials)
	add("latency-calls", o.latencyCalls, d.latencyCalls)
	if !o.optuna {
		args = append(args, "-optuna=false")
	}
	return strings.Join(append(args, "-report bench/REPORT.md"), " ")
}

// render writes the report's section.
func render(o options, in renderInput) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	host, _ := os.Hostname()
	withOptuna := len(in.methods) > mTPE
	w("<!-- hpobench:begin -->\n## Hyperparameter search against Optuna (hpobench)\n\n")
	optunaWhat := "Optuna was not run (`-optuna=false`): only Loom's two searches are compared, and the verdict against TPE is open."
	if withOptuna {
		optunaWhat = fmt.Sprintf("Optuna %s (Debian's python3-optuna; `apt-get install -y python3-optuna`) runs in an embedded Python driver that suggests points (ask) and is told the values Go computes (tell), so both systems search the identical function; `TPESampler(seed=s)` and `RandomSampler(seed=s)` with their defaults.", in.optunaVersion)
	}
	w("Each function is minimised by sequential studies of equal budgets, one per seed (seeds 1..%d) and method: Loom's default search (`libs/hpo`, algorithm unspecified: Bayesian optimisation), Loom's `RANDOM_SEARCH`, Optuna's TPE and Optuna's random sampler. %s "+
		"Budgets: %d trials on the test functions, %d on the trainer (`libs/toytrain`, training seed %d, %d epochs a trial, over learning rate, batch size, weight decay and hidden units, log scales). "+
		"Regret is the best value so far minus the known optimum (the trainer's: the best value any study found). "+
		"AUC is the mean over trials of log10 of the best-so-far regret (floored at %g): lower is better, and it rewards getting there early. "+
		"Tests are two-sided Mann-Whitney U on the per-seed final regrets (studies with independent seeds; exact without ties), at α = %g. "+
		"Run on %s (%d CPUs, %s/%s, %d workers) in %v (studies %v, ASHA %v). Rerun: `%s`.\n\n",
		o.seeds, optunaWhat, o.trials, o.trainerTrials, trainSeed, o.trainerEpochs, regretFloor, alpha,
		host, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, o.workers, in.took.Round(time.Second),
		in.studiesTook.Round(time.Second), in.ashaTook.Round(time.Second), rerun(o))

	// Scores per problem and method.
	an := make([][]analysis, len(in.probs))
	refs := make([]float64, len(in.probs))
	for p, prob := range in.probs {
		refs[p] = reference(prob, in.res[p])
		for m := range in.methods {
			an[p] = append(an[p], analyse(prob, in.res[p][m], refs[p]))
		}
	}

	w("### Target: Loom's default is not worse than TPE on any function and beats random search on all\n\n")
	w("| function | Loom default final regret (median) | Optuna TPE (median) | default vs TPE | default vs Loom random | default vs Optuna random | verdict |\n|---|---:|---:|---|---|---|---|\n")
	met := 0
	for p, prob := range in.probs {
		d := an[p][mDefault]
		tpeMed, vsTPE := "—", "— (Optuna not run)"
		ok := true
		if withOptuna {
			tpeMed = g(quantile(an[p][mTPE].final, 0.5))
			word, pv := compare(d.final, an[p][mTPE].final)
			vsTPE = word + ", " + fmtP(pv)
			ok = ok && word != "worse"
		}
		word, pv := compare(d.final, an[p][mLoomRandom].final)
		vsLR := word + ", " + fmtP(pv)
		ok = ok && word == "better"
		vsOR := "— (Optuna not run)"
		if withOptuna {
			word, pv := compare(d.final, an[p][mOptunaRandom].final)
			vsOR = word + ", " + fmtP(pv)
			ok = ok && word == "better"
		}
		verdict := "met"
		if !ok {
			verdict = "missed"
		} else {
			met++
		}
		if !withOptuna {
			verdict += " (Loom random only)"
		}
		w("| %s | %s | %s | %s | %s | %s | %s |\n", prob.name, g(quantile(d.final, 0.5)), tpeMed, vsTPE, vsLR, vsOR, verdict)
	}
	overall := "met"
	if met < len(in.probs) {
		overall = "missed"
	}
	w("\nTarget %s: %d of %d functions meet it (not worse than TPE: TPE not significantly better; beats random: significantly better than each random search).\n\n", overall, met, len(in.probs))

	w("### Per function and method (%d seeds each)\n\n", o.seeds)
	w("| function | method | final regret mean ± sd | median | AUC (mean log10 regret) mean ± sd | trials to threshold: median (reached) | final vs default | AUC vs default | suggest ms/trial |\n|---|---|---:|---:|---:|---|---|---|---:|\n")
	for p, prob := range in.probs {
		for m, meth := range in.methods {
			a := an[p][m]
			fm, fs := meanSD(a.final)
			am, as := meanSD(a.auc)
			reached := 0
			for _, h := range a.hit {
				if h <= float64(prob.trials) {
					reached++
				}
			}
			med := quantile(a.hit, 0.5)
			hit := fmt.Sprintf("%.0f (%d/%d)", med, reached, len(a.hit))
			if med > float64(prob.trials) {
				hit = fmt.Sprintf(">%d (%d/%d)", prob.trials, reached, len(a.hit))
			}
			vsF, vsA := "—", "—"
			if m != mDefault {
				word, pv := compare(an[p][mDefault].final, a.final)
				vsF = "default " + word + ", " + fmtP(pv)
				word, pv = compare(an[p][mDefault].auc, a.auc)
				vsA = "default " + word + ", " + fmtP(pv)
			}
			w("| %s | %s | %s ± %s | %s | %.2f ± %.2f | %s | %s | %s | %.2f |\n", prob.name, meth.name, g(fm), g(fs), g(quantile(a.final, 0.5)), am, as, hit, vsF, vsA, a.suggestMs)
		}
	}
	w("\nReference and threshold per function: ")
	var parts []string
	for p, prob := range in.probs {
		what := "known optimum"
		if math.IsNaN(prob.fopt) {
			what = "best found"
		}
		parts = append(parts, fmt.Sprintf("%s %s %.6g, threshold %.3g", prob.name, what, refs[p], threshold(prob, refs[p])))
	}
	w("%s. A threshold is a regret that means \"in the optimum's basin\" (the trainer's: 2 %% of the best loss). The suggest column is the mean time to get one suggestion, Optuna's including the JSON round trip to its driver.\n\n", strings.Join(parts, "; "))

	w("### Suggestion latency\n\n")
	l := in.latency
	verdict := "met"
	if l.p99 > 5*time.Millisecond {
		verdict = "missed"
	}
	w("`hpo.Suggest(trials, 1)` of Loom's default search on a synthetic history of %d SUCCEEDED trials × %d parameters (5 doubles, 2 on log scales; 2 integers; a categorical of 3), %d calls, each with a fresh searcher (another seed), one at a time on one goroutine, with GOMAXPROCS 1, first and alone (before any study, so the process's heap holds the history only). "+
		"CPU time is the process's (every thread, so the garbage collector counts too): the work of a call, which the target is judged on. Wall time adds the time spent waiting for a CPU, which on a shared machine is mostly other processes' load (1-minute load average %s on %d CPUs during the measurement).\n\n", l.history, l.params, l.calls, l.load, runtime.NumCPU())
	w("| history | parameters | calls | measure | p50 | p99 | max | target p99 ≤ 5 ms |\n|---:|---:|---:|---|---:|---:|---:|---|\n")
	w("| %d | %d | %d | CPU time | %s | %s | %s | %s |\n", l.history, l.params, l.calls, dur(l.p50), dur(l.p99), dur(l.max), verdict)
	w("| %d | %d | %d | wall time | %s | %s | %s | (not judged) |\n\n", l.history, l.params, l.calls, dur(l.wallP50), dur(l.wallP99), dur(l.wallMax))

	w("### ASHA against no early stopping (trainer learning curves)\n\n")
	renderASHA(&b, o, in.ashas)
	w("<!-- hpobench:end -->\n")
	return b.String()
}

// dur prints a latency in ms.
func dur(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }

// ashaTolerance is how much worse (relatively) ASHA's best loss may be
// than no stopping's and still count as "the same best result": the
// trainer's best configurations' own validation loss moves by more than
// that from one epoch to the next near the end of training (the report
// prints that movement), so a smaller difference is not a different
// result.
const ashaTolerance = 0.02

// renderASHA writes the ASHA table.
func renderASHA(b *strings.Builder, o options, rs []ashaResult) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	var fullE, ashaE, fullB, ashaB, ratio, stopped, wobble []float64
	kept, within := 0, 0
	for _, r := range rs {
		fullE = append(fullE, float64(r.fullEpochs))
		ashaE = append(ashaE, float64(r.ashaEpochs))
		fullB = append(fullB, r.fullBest)
		ashaB = append(ashaB, r.ashaBest)
		ratio = append(ratio, r.ashaBest/r.fullBest)
		stopped = append(stopped, float64(r.ashaStopped))
		wobble = append(wobble, r.bestWobble)
		if r.ashaBest <= r.fullBest*(1+1e-12) {
			kept++
		}
		if r.ashaBest <= r.fullBest*(1+ashaTolerance) {
			within++
		}
	}
	sum := func(xs []float64) float64 {
		s := 0.0
		for _, x := range xs {
			s += x
		}
		return s
	}
	w("Per seed (1..%d), %d configurations of the trainer (training seed %d) drawn by Loom's `RANDOM_SEARCH` with that seed (the ASHA paper, Li et al. 2018, pairs ASHA with random sampling), trained one after the other twice: "+
		"**no stopping** (every configuration trains all %d epochs) and **ASHA** (the same configurations in the same order under `AshaStoppingSpec{min_step_count: %d, max_step_count: %d, reduction_factor: %d}`: rungs at %s epochs, `ShouldStop` asked after every epoch). The study selects `BEST_MEASUREMENT`: a trial's result is its best epoch's loss (the checkpoint one keeps), on both sides, and ASHA ranks a trial at a rung on its best loss up to the rung, so one bad epoch of a noisy curve does not stop it. "+
		"The validation loss is measured after every epoch; trial-epochs count every epoch trained. Same configurations on both sides, so \"the same best result\" compares the stopping rule alone. "+
		"Target: the same best result in ≤ 1/3 of the trial-epochs. \"Same\" is taken as: the median over seeds of ASHA's best loss ÷ no stopping's ≤ %.2f (a %.0f %% tolerance: the best configuration's own loss moves by a median %.1f %% between consecutive epochs over its last 5, so a smaller difference is within the curve's own wobble), and ASHA's best not significantly worse (Mann-Whitney, α = %g). "+
		"The first rung is at %d epochs because the trainer's best configurations (learning rates 0.1 to 0.3) stay near the untrained loss for their first 5 to 12 epochs before they drop below every slower learner: earlier rungs rank them last.\n\n",
		len(rs), o.ashaTrials, trainSeed, o.ashaEpochs, o.ashaMin, o.ashaEpochs, o.ashaEta, rungList(o), 1+ashaTolerance, 100*ashaTolerance, 100*quantile(wobble, 0.5), alpha, o.ashaMin)
	w("| study | trial-epochs (total over seeds) | fraction of no stopping | trials stopped (mean of %d) | best val_loss mean ± sd | vs no stopping |\n|---|---:|---:|---:|---:|---|\n", o.ashaTrials)
	fm, fs := meanSD(fullB)
	w("| no stopping | %.0f | 1 | 0 | %.4g ± %.2g | — |\n", sum(fullE), fm, fs)
	am, as := meanSD(ashaB)
	sm, _ := meanSD(stopped)
	word, p := compare(ashaB, fullB)
	w("| ASHA | %.0f | %.3f | %.1f | %.4g ± %.2g | %s, %s; kept the best configuration in %d/%d seeds, within %.0f %% in %d/%d |\n",
		sum(ashaE), sum(ashaE)/sum(fullE), sm, am, as, word, fmtP(p), kept, len(rs), 100*ashaTolerance, within, len(rs))
	frac := sum(ashaE) / sum(fullE)
	medRatio := quantile(ratio, 0.5)
	verdict := "met"
	if frac > 1.0/3 || medRatio > 1+ashaTolerance || word == "worse" {
		verdict = "missed"
	}
	w("\nTarget %s: ASHA trained %.1f %% of the trial-epochs; its best loss is %.2f %% of no stopping's (median of the per-seed ratios; below 100 %% is better).\n",
		verdict, 100*frac, 100*medRatio)
}

// rungList is ASHA's rungs for o, e.g. "9 and 27".
func rungList(o options) string {
	var rs []string
	for r := max(1, o.ashaMin); r < o.ashaEpochs; r *= o.ashaEta {
		rs = append(rs, strconv.Itoa(r))
	}
	switch len(rs) {
	case 0:
		return "none"
	case 1:
		return rs[0]
	}
	return strings.Join(rs[:len(rs)-1], ", ") + " and " + rs[len(rs)-1]
}

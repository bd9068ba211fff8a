package main

import (
	"bufio"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/loom-ml/loom/libs/hpo"
	"github.com/loom-ml/loom/libs/toytrain"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
)

// param is one search dimension, the same for both systems: Loom gets it as
// a StudySpec ParameterSpec, Optuna as suggest_float / suggest_int.
type param struct {
	name     string
	lo, hi   float64
	log, int bool
}

// problem is an objective to minimise with its search space and budget.
type problem struct {
	name   string
	params []param
	eval   func(x []float64) float64
	// fopt is the known minimum; NaN when unknown (the best value any run
	// found is used instead).
	fopt float64
	// threshold is the regret counted as reached: absolute, or with
	// relative a fraction of |reference|.
	threshold float64
	relative  bool
	trials    int
	note      string
}

// fromTestFunc makes a test function a problem with the given budget.
func fromTestFunc(t *testFunc, trials int) *problem {
	p := &problem{name: t.name, eval: t.f, fopt: t.fopt, threshold: t.threshold, relative: t.relative, trials: trials}
	for i := range t.lo {
		p.params = append(p.params, param{name: "x" + strconv.Itoa(i+1), lo: t.lo[i], hi: t.hi[i]})
	}
	return p
}

// trainerProblem is the built-in trainer's validation loss after epochs
// epochs (training seed fixed, so it is a deterministic function of the
// hyperparameters), over the flags of `loom train`.
func trainerProblem(epochs, trials int) *problem {
	return &problem{
		name: fmt.Sprintf("Trainer val_loss (%d epochs)", epochs),
		params: []param{
			{name: "learning_rate", lo: 1e-4, hi: 1, log: true},
			{name: "batch_size", lo: 8, hi: 512, log: true, int: true},
			{name: "weight_decay", lo: 1e-6, hi: 1e-1, log: true},
			{name: "hidden_units", lo: 4, hi: 256, log: true, int: true},
		},
		eval: func(x []float64) float64 {
			return trainLoss(hyper(x), epochs)
		},
		fopt: math.NaN(), threshold: 0.02, relative: true, trials: trials,
		note: "optimum unknown: regret is against the best value any run found; threshold 2 % of it",
	}
}

// hyper maps the trainer problem's point to toytrain's hyperparameters.
func hyper(x []float64) toytrain.Hyper {
	return toytrain.Hyper{LearningRate: x[0], BatchSize: int(math.Round(x[1])), WeightDecay: x[2], HiddenUnits: int(math.Round(x[3]))}
}

// trainSeed fixes the trainer's data and initialisation, so that every
// method sees the same function of the hyperparameters.
const trainSeed = 1

// trainLoss trains for epochs epochs and returns the validation loss. A
// run that diverges (not finite, or worse than untrained) scores its
// untrained loss, as a trial that learnt nothing would, so that neither
// search is told an infinity. The search space is within the trainer's
// limits, so a refused configuration is the benchmark's bug: it panics.
func trainLoss(h toytrain.Hyper, epochs int) float64 {
	tr, err := toytrain.New(h, trainSeed)
	if err != nil {
		panic(fmt.Sprintf("hpobench: the trainer refuses %+v: %v", h, err))
	}
	untrained := tr.ValidationLoss()
	for range epochs {
		tr.TrainEpoch()
	}
	v := tr.ValidationLoss()
	if math.IsNaN(v) || math.IsInf(v, 0) || v > untrained {
		return untrained
	}
	return v
}

// objectiveID is the metric the benchmark's studies minimise.
const objectiveID = "objective"

// spec is the problem as a StudySpec for algorithm alg.
func (p *problem) spec(alg trainingv1.StudySpec_Algorithm, seed int64) *trainingv1.StudySpec {
	s := &trainingv1.StudySpec{
		Metrics:   []*trainingv1.StudySpec_MetricSpec{{MetricId: objectiveID, Goal: trainingv1.StudySpec_MetricSpec_MINIMIZE}},
		Algorithm: alg,
		Seed:      seed,
	}
	for _, q := range p.params {
		scale := trainingv1.StudySpec_ParameterSpec_UNIT_LINEAR_SCALE
		if q.log {
			scale = trainingv1.StudySpec_ParameterSpec_UNIT_LOG_SCALE
		}
		ps := &trainingv1.StudySpec_ParameterSpec{ParameterId: q.name, ScaleType: scale}
		if q.int {
			ps.ParameterValueSpec = &trainingv1.StudySpec_ParameterSpec_IntegerValueSpec_{
				IntegerValueSpec: &trainingv1.StudySpec_ParameterSpec_IntegerValueSpec{MinValue: int64(q.lo), MaxValue: int64(q.hi)}}
		} else {
			ps.ParameterValueSpec = &trainingv1.StudySpec_ParameterSpec_DoubleValueSpec_{
				DoubleValueSpec: &trainingv1.StudySpec_ParameterSpec_DoubleValueSpec{MinValue: q.lo, MaxValue: q.hi}}
		}
		s.Parameters = append(s.Parameters, ps)
	}
	return s
}

// point checks a suggestion against the space and returns it in the
// params' order. A value off its range by more than rounding is an error:
// the benchmark would otherwise score a point outside the box.
func (p *problem) point(values func(i int, q param) (float64, bool)) ([]float64, error) {
	x := make([]float64, len(p.params))
	for i, q := range p.params {
		v, ok := values(i, q)
		if !ok {
			return nil, fmt.Errorf("suggestion lacks %s", q.name)
		}
		tol := 1e-9 * math.Max(1, math.Max(math.Abs(q.lo), math.Abs(q.hi)))
		if math.IsNaN(v) || v < q.lo-tol || v > q.hi+tol {
			return nil, fmt.Errorf("suggested %s = %v, outside [%v, %v]", q.name, v, q.lo, q.hi)
		}
		x[i] = math.Min(q.hi, math.Max(q.lo, v))
		if q.int {
			x[i] = math.Round(x[i])
		}
	}
	return x, nil
}

// runResult is one study: every trial's objective in order, and the time
// spent suggesting.
type runResult struct {
	values  []float64
	suggest time.Duration
}

// trialOf records a finished trial as the training service would.
func trialOf(id int, ps []*trainingv1.Trial_Parameter, v float64) *trainingv1.Trial {
	return &trainingv1.Trial{
		Id: strconv.Itoa(id), State: trainingv1.Trial_SUCCEEDED, Parameters: ps,
		FinalMeasurement: &trainingv1.Measurement{Metrics: []*trainingv1.Measurement_Metric{{MetricId: objectiveID, Value: v}}},
	}
}

// paramValues reads a Loom suggestion by parameter id.
func paramValues(ps []*trainingv1.Trial_Parameter) func(int, param) (float64, bool) {
	byID := map[string]*structpb.Value{}
	for _, p := range ps {
		byID[p.GetParameterId()] = p.GetValue()
	}
	return func(_ int, q param) (float64, bool) {
		v, ok := byID[q.name]
		if !ok {
			return 0, false
		}
		n, isNum := v.GetKind().(*structpb.Value_NumberValue)
		if !isNum {
			return 0, false
		}
		return n.NumberValue, true
	}
}

// runLoom runs one sequential study with Loom's search.
func runLoom(p *problem, alg trainingv1.StudySpec_Algorithm, seed int64) (runResult, error) {
	s, err := hpo.New(p.spec(alg, seed), hpo.Options{Seed: seed, MaxTrials: p.trials})
	if err != nil {
		return runResult{}, err
	}
	var r runResult
	trials := make([]*trainingv1.Trial, 0, p.trials)
	for k := range p.trials {
		t0 := time.Now()
		sug, err := s.Suggest(trials, 1)
		r.suggest += time.Since(t0)
		if err != nil {
			return r, fmt.Errorf("suggest trial %d: %w", k+1, err)
		}
		if len(sug) != 1 {
			return r, fmt.Errorf("suggest trial %d: got %d suggestions", k+1, len(sug))
		}
		x, err := p.point(paramValues(sug[0]))
		if err != nil {
			return r, fmt.Errorf("trial %d: %w", k+1, err)
		}
		v := p.eval(x)
		r.values = append(r.values, v)
		trials = append(trials, trialOf(k+1, sug[0], v))
	}
	return r, nil
}

//go:embed optuna_driver.py
var optunaDriver string

// optunaProc is one Optuna driver process, running one study at a time.
type optunaProc struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

// startOptuna starts the driver under python.
func startOptuna(python string) (*optunaProc, error) {
	cmd := exec.Command(python, "-c", optunaDriver)
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	// Python's own complaints (a traceback, an import error) go where
	// hpobench's progress goes.
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the Optuna driver: %w", err)
	}
	return &optunaProc{cmd: cmd, in: in, out: bufio.NewReader(out)}, nil
}

// call sends one request and decodes its reply into resp.
func (o *optunaProc) call(req, resp any) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if _, err := o.in.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("optuna driver: %w", err)
	}
	line, err := o.out.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("optuna driver: %w", err)
	}
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(line, &e) == nil && e.Error != "" {
		return errors.New("optuna driver: " + e.Error)
	}
	return json.Unmarshal(line, resp)
}

// version asks the driver for Optuna's version.
func (o *optunaProc) version() (string, error) {
	var r struct {
		Optuna string `json:"optuna"`
	}
	err := o.call(map[string]string{"op": "hello"}, &r)
	return r.Optuna, err
}

// close ends the driver (end of its input) and waits for it.
func (o *optunaProc) close() error {
	o.in.Close()
	return o.cmd.Wait()
}

// run runs one sequential study with sampler ("tpe" or "random").
func (o *optunaProc) run(p *problem, sampler string, seed int64) (runResult, error) {
	type pj struct {
		Name string  `json:"name"`
		Low  float64 `json:"low"`
		High float64 `json:"high"`
		Log  bool    `json:"log"`
		Int  bool    `json:"int"`
	}
	var ps []pj
	for _, q := range p.params {
		ps = append(ps, pj{q.name, q.lo, q.hi, q.log, q.int})
	}
	var ok struct {
		OK bool `json:"ok"`
	}
	if err := o.call(map[string]any{"op": "new", "sampler": sampler, "seed": seed, "params": ps}, &ok); err != nil {
		return runResult{}, err
	}
	var r runResult
	for k := range p.trials {
		var ask struct {
			Values []float64 `json:"values"`
		}
		t0 := time.Now()
		err := o.call(map[string]string{"op": "ask"}, &ask)
		r.suggest += time.Since(t0)
		if err != nil {
			return r, fmt.Errorf("ask trial %d: %w", k+1, err)
		}
		x, err := p.point(func(i int, _ param) (float64, bool) {
			if i >= len(ask.Values) {
				return 0, false
			}
			return ask.Values[i], true
		})
		if err != nil {
			return r, fmt.Errorf("trial %d: %w", k+1, err)
		}
		v := p.eval(x)
		r.values = append(r.values, v)
		if err := o.call(map[string]any{"op": "tell", "value": v}, &ok); err != nil {
			return r, fmt.Errorf("tell trial %d: %w", k+1, err)
		}
	}
	return r, nil
}

// findPython returns the python that imports optuna: the one named, or
// else python3 on PATH, then Debian's /usr/bin/python3 (where
// python3-optuna installs, when PATH's python3 is another one).
func findPython(named string) (string, error) {
	cands := []string{"python3", "/usr/bin/python3"}
	if named != "" {
		cands = []string{named}
	}
	for _, py := range cands {
		if exec.Command(py, "-c", "import optuna").Run() == nil {
			return py, nil
		}
	}
	return "", fmt.Errorf("Optuna is not installed (%s -c 'import optuna' fails): run `apt-get install -y python3-optuna` (Debian's, 3.1), or pass -optuna=false to run Loom alone", strings.Join(cands, ", "))
}

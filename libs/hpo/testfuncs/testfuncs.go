// Package testfuncs holds the standard global-optimisation test functions
// with known optima that Loom's search is measured on (the Go tests and
// benchmarks of libs/hpo, and bench/cmd/hpobench against Optuna), and a
// driver that runs a study on one of them in-process.
package testfuncs

import (
	"fmt"
	"math"

	"github.com/loom-ml/loom/libs/hpo"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
)

// Func is a test function to minimise over a box.
type Func struct {
	// Name identifies the function, e.g. "branin" or "styblinski-tang-4".
	Name string
	// Lower and Upper bound the box (one entry per dimension).
	Lower, Upper []float64
	// Optimum is the known global minimum value, reached at Argmin (one
	// of the minimisers where there are several).
	Optimum float64
	Argmin  []float64
	// F evaluates the function at x (len(x) == Dim()).
	F func(x []float64) float64
}

// Dim is the number of dimensions.
func (f Func) Dim() int { return len(f.Lower) }

// Branin (Branin-Hoo) on [-5,10]×[0,15]; three global minima of 0.397887.
func Branin() Func {
	return Func{
		Name: "branin", Lower: []float64{-5, 0}, Upper: []float64{10, 15}, Optimum: 0.39788735772973816,
		Argmin: []float64{math.Pi, 2.275},
		F: func(x []float64) float64 {
			const a, r, s = 1.0, 6.0, 10.0
			b := 5.1 / (4 * math.Pi * math.Pi)
			c := 5 / math.Pi
			t := 1 / (8 * math.Pi)
			u := x[1] - b*x[0]*x[0] + c*x[0] - r
			return a*u*u + s*(1-t)*math.Cos(x[0]) + s
		},
	}
}

var (
	h3A = [4][3]float64{{3, 10, 30}, {0.1, 10, 35}, {3, 10, 30}, {0.1, 10, 35}}
	h3P = [4][3]float64{{0.3689, 0.1170, 0.2673}, {0.4699, 0.4387, 0.7470}, {0.1091, 0.8732, 0.5547}, {0.0381, 0.5743, 0.8828}}
	h6A = [4][6]float64{
		{10, 3, 17, 3.5, 1.7, 8}, {0.05, 10, 17, 0.1, 8, 14},
		{3, 3.5, 1.7, 10, 17, 8}, {17, 8, 0.05, 10, 0.1, 14}}
	h6P = [4][6]float64{
		{0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886}, {0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991},
		{0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650}, {0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381}}
	hAlpha = [4]float64{1.0, 1.2, 3.0, 3.2}
)

// Hartmann3 on [0,1]³; minimum -3.86278.
func Hartmann3() Func {
	return Func{
		Name: "hartmann3", Lower: []float64{0, 0, 0}, Upper: []float64{1, 1, 1}, Optimum: -3.8627797869493365,
		Argmin: []float64{0.114614, 0.555649, 0.852547},
		F: func(x []float64) float64 {
			s := 0.0
			for i := range 4 {
				e := 0.0
				for j := range 3 {
					d := x[j] - h3P[i][j]
					e += h3A[i][j] * d * d
				}
				s += hAlpha[i] * math.Exp(-e)
			}
			return -s
		},
	}
}

// Hartmann6 on [0,1]⁶; minimum -3.32237.
func Hartmann6() Func {
	return Func{
		Name: "hartmann6", Lower: []float64{0, 0, 0, 0, 0, 0}, Upper: []float64{1, 1, 1, 1, 1, 1}, Optimum: -3.3223680114155147,
		Argmin: []float64{0.20169, 0.150011, 0.476874, 0.275332, 0.311652, 0.6573},
		F: func(x []float64) float64 {
			s := 0.0
			for i := range 4 {
				e := 0.0
				for j := range 6 {
					d := x[j] - h6P[i][j]
					e += h6A[i][j] * d * d
				}
				s += hAlpha[i] * math.Exp(-e)
			}
			return -s
		},
	}
}

// GoldsteinPrice on [-2,2]²; minimum 3 at (0,-1).
func GoldsteinPrice() Func {
	return Func{
		Name: "goldstein-price", Lower: []float64{-2, -2}, Upper: []float64{2, 2}, Optimum: 3,
		Argmin: []float64{0, -1},
		F: func(x []float64) float64 {
			a, b := x[0], x[1]
			p := 1 + (a+b+1)*(a+b+1)*(19-14*a+3*a*a-14*b+6*a*b+3*b*b)
			q := 30 + (2*a-3*b)*(2*a-3*b)*(18-32*a+12*a*a+48*b-36*a*b+27*b*b)
			return p * q
		},
	}
}

// SixHumpCamel on [-3,3]×[-2,2]; minimum -1.0316 at (±0.0898, ∓0.7126).
func SixHumpCamel() Func {
	return Func{
		Name: "six-hump-camel", Lower: []float64{-3, -2}, Upper: []float64{3, 2}, Optimum: -1.0316284534898774,
		Argmin: []float64{0.08984201368301331, -0.7126564032704135},
		F: func(x []float64) float64 {
			a, b := x[0], x[1]
			return (4-2.1*a*a+a*a*a*a/3)*a*a + a*b + (-4+4*b*b)*b*b
		},
	}
}

// StyblinskiTang in d dimensions on [-5,5]^d; minimum -39.16617·d at
// x_i = -2.903534.
func StyblinskiTang(d int) Func {
	lo, hi, arg := make([]float64, d), make([]float64, d), make([]float64, d)
	for i := range d {
		lo[i], hi[i], arg[i] = -5, 5, -2.903534027771177
	}
	return Func{
		Name: fmt.Sprintf("styblinski-tang-%d", d), Lower: lo, Upper: hi, Optimum: -39.16616570377142 * float64(d), Argmin: arg,
		F: func(x []float64) float64 {
			s := 0.0
			for _, v := range x {
				s += v*v*v*v - 16*v*v + 5*v
			}
			return s / 2
		},
	}
}

// All is the standard set: Branin, Hartmann-3, Hartmann-6, Goldstein-Price,
// six-hump camel and Styblinski-Tang in 4 dimensions.
func All() []Func {
	return []Func{Branin(), Hartmann3(), Hartmann6(), GoldsteinPrice(), SixHumpCamel(), StyblinskiTang(4)}
}

// MetricID is the metric the studies of Spec minimise.
const MetricID = "value"

// ParamID is the parameter id of dimension i ("x0", "x1", …).
func ParamID(i int) string { return fmt.Sprintf("x%d", i) }

// Spec is a study spec that minimises f over its box with algorithm
// (one DOUBLE parameter per dimension, linear scale).
func (f Func) Spec(algorithm trainingv1.StudySpec_Algorithm, seed int64) *trainingv1.StudySpec {
	spec := &trainingv1.StudySpec{
		Metrics:   []*trainingv1.StudySpec_MetricSpec{{MetricId: MetricID, Goal: trainingv1.StudySpec_MetricSpec_MINIMIZE}},
		Algorithm: algorithm,
		Seed:      seed,
	}
	for i := range f.Dim() {
		spec.Parameters = append(spec.Parameters, &trainingv1.StudySpec_ParameterSpec{
			ParameterId: ParamID(i),
			ScaleType:   trainingv1.StudySpec_ParameterSpec_UNIT_LINEAR_SCALE,
			ParameterValueSpec: &trainingv1.StudySpec_ParameterSpec_DoubleValueSpec_{
				DoubleValueSpec: &trainingv1.StudySpec_ParameterSpec_DoubleValueSpec{MinValue: f.Lower[i], MaxValue: f.Upper[i]},
			},
		})
	}
	return spec
}

// Point reads a suggestion of a Spec study back as a point of f.
func (f Func) Point(ps []*trainingv1.Trial_Parameter) ([]float64, error) {
	x := make([]float64, f.Dim())
	seen := 0
	for _, p := range ps {
		for i := range x {
			if p.GetParameterId() == ParamID(i) {
				x[i] = p.GetValue().GetNumberValue()
				seen++
			}
		}
	}
	if seen != len(x) {
		return nil, fmt.Errorf("%s: suggestion has %d of %d parameters", f.Name, seen, len(x))
	}
	return x, nil
}

// Trial is a completed trial (id, SUCCEEDED, final measurement value).
func Trial(id int, ps []*trainingv1.Trial_Parameter, value float64) *trainingv1.Trial {
	return &trainingv1.Trial{
		Id:               fmt.Sprint(id),
		State:            trainingv1.Trial_SUCCEEDED,
		Parameters:       ps,
		FinalMeasurement: &trainingv1.Measurement{Metrics: []*trainingv1.Measurement_Metric{{MetricId: MetricID, Value: value}}},
	}
}

// Run minimises f with algorithm for budget trials, batch suggestions at a
// time (each batch evaluated before the next is asked for), and returns the
// best value found after each trial (len budget).
func Run(f Func, algorithm trainingv1.StudySpec_Algorithm, seed int64, budget, batch int) ([]float64, error) {
	s, err := hpo.New(f.Spec(algorithm, seed), hpo.Options{Seed: seed, MaxTrials: budget})
	if err != nil {
		return nil, err
	}
	batch = max(batch, 1)
	var trials []*trainingv1.Trial
	trace := make([]float64, 0, budget)
	best := math.Inf(1)
	for len(trials) < budget {
		sug, err := s.Suggest(trials, min(batch, budget-len(trials)))
		if err != nil {
			return nil, err
		}
		if len(sug) == 0 {
			break
		}
		for _, ps := range sug {
			x, err := f.Point(ps)
			if err != nil {
				return nil, err
			}
			v := f.F(x)
			best = math.Min(best, v)
			trace = append(trace, best)
			trials = append(trials, Trial(len(trials)+1, ps, v))
		}
	}
	return trace, nil
}

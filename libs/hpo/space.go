package hpo

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/loom-ml/loom/libs/errs"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
)

// MaxConditionalDepth is how deep conditional parameters may nest: a
// top-level parameter's children are at depth 1.
const MaxConditionalDepth = 4

// MaxIntegerBound bounds an INTEGER parameter's min_value and max_value
// (±2^52): the search works in float64, which holds every integer up to it
// exactly.
const MaxIntegerBound = 1 << 52

type kind int

const (
	kDouble kind = iota
	kInt
	kCat
	kDisc
)

type scale int

const (
	sLinear scale = iota
	sLog
	sRevLog
)

// param is one compiled parameter (top-level or conditional). Every point
// of the search holds one float per param: for numeric params the value in
// the [0,1] scaled space (already snapped to a legal value), for a
// categorical one the index of its value, and NaN when the param is
// inactive (a conditional one whose parent's value does not select it).
type param struct {
	id    string
	kind  kind
	scale scale
	// lo, hi bound the value (double, integer; the smallest and largest
	// value of a discrete param).
	lo, hi float64
	// logLo and logHi are log(lo) and log(hi) for the log scales, computed
	// once: toUnit runs for every parameter of every stored trial.
	logLo, logHi float64
	cats         []string
	disc         []float64 // sorted, unique
	discU        []float64 // disc in unit space
	// parent is the index of the parent param, -1 for a top-level one;
	// cond holds the parent values (as the parent's point value: unit
	// space for numeric parents, index for categorical) that activate it.
	parent   int
	cond     []float64
	children []int
	depth    int
}

// space is a compiled parameter tree, flattened in depth-first order so
// that a parent always precedes its children.
type space struct {
	params []param
	byID   map[string]int
}

func compileSpace(specs []*trainingv1.StudySpec_ParameterSpec, v *errs.Validator) *space {
	sp := &space{byID: map[string]int{}}
	for i, ps := range specs {
		sp.add(ps, fmt.Sprintf("study_spec.parameters[%d]", i), -1, nil, 0, v)
	}
	for i := range sp.params {
		p := &sp.params[i]
		p.logLo, p.logHi = math.Log(p.lo), math.Log(p.hi)
	}
	return sp
}

// add compiles ps (at field path f) and its children.
func (sp *space) add(ps *trainingv1.StudySpec_ParameterSpec, f string, parent int, cond []float64, depth int, v *errs.Validator) {
	if ps == nil {
		v.Add(f, "a parameter spec is required")
		return
	}
	p := param{id: ps.GetParameterId(), parent: parent, cond: cond, depth: depth}
	switch {
	case p.id == "":
		v.Add(f+".parameter_id", "is required")
	case !validID(p.id):
		v.Add(f+".parameter_id", "%q: use letters, digits, '_', '-' and '.' (it becomes the flag --%s=…)", p.id, p.id)
	default:
		if _, dup := sp.byID[p.id]; dup {
			v.Add(f+".parameter_id", "%q is used by another parameter", p.id)
		}
	}
	switch ps.GetScaleType() {
	case trainingv1.StudySpec_ParameterSpec_UNIT_LOG_SCALE:
		p.scale = sLog
	case trainingv1.StudySpec_ParameterSpec_UNIT_REVERSE_LOG_SCALE:
		p.scale = sRevLog
	}
	ok := true
	switch pv := ps.GetParameterValueSpec().(type) {
	case *trainingv1.StudySpec_ParameterSpec_DoubleValueSpec_:
		p.kind = kDouble
		p.lo, p.hi = pv.DoubleValueSpec.GetMinValue(), pv.DoubleValueSpec.GetMaxValue()
		ok = checkRange(p, f+".double_value_spec", v)
	case *trainingv1.StudySpec_ParameterSpec_IntegerValueSpec_:
		p.kind = kInt
		lo, hi := pv.IntegerValueSpec.GetMinValue(), pv.IntegerValueSpec.GetMaxValue()
		p.lo, p.hi = float64(lo), float64(hi)
		if lo < -MaxIntegerBound || hi > MaxIntegerBound {
			v.Add(f+".integer_value_spec", "bounds must lie within ±2^52 (%d)", int64(MaxIntegerBound))
			ok = false
		} else {
			ok = checkRange(p, f+".integer_value_spec", v)
		}
	case *trainingv1.StudySpec_ParameterSpec_CategoricalValueSpec_:
		p.kind = kCat
		p.cats = pv.CategoricalValueSpec.GetValues()
		seen := map[string]bool{}
		for j, c := range p.cats {
			if seen[c] {
				v.Add(fmt.Sprintf("%s.categorical_value_spec.values[%d]", f, j), "%q is listed twice", c)
				ok = false
			}
			seen[c] = true
		}
		if len(p.cats) == 0 {
			v.Add(f+".categorical_value_spec.values", "at least one value is required")
			ok = false
		}
		if p.scale != sLinear {
			v.Add(f+".scale_type", "a categorical parameter has no scale")
		}
	case *trainingv1.StudySpec_ParameterSpec_DiscreteValueSpec_:
		p.kind = kDisc
		vals := pv.DiscreteValueSpec.GetValues()
		if len(vals) == 0 {
			v.Add(f+".discrete_value_spec.values", "at least one value is required")
			ok = false
		}
		for j, x := range vals {
			switch {
			case math.IsNaN(x) || math.IsInf(x, 0):
				v.Add(fmt.Sprintf("%s.discrete_value_spec.values[%d]", f, j), "must be finite")
				ok = false
			case p.scale != sLinear && x <= 0:
				v.Add(fmt.Sprintf("%s.discrete_value_spec.values[%d]", f, j), "must be > 0 on a log scale")
				ok = false
			case slices.Contains(vals[:j], x):
				v.Add(fmt.Sprintf("%s.discrete_value_spec.values[%d]", f, j), "%v is listed twice", x)
				ok = false
			}
		}
		if ok {
			p.disc = slices.Clone(vals)
			slices.Sort(p.disc)
			p.lo, p.hi = p.disc[0], p.disc[len(p.disc)-1]
			p.discU = make([]float64, len(p.disc))
			for j, x := range p.disc {
				p.discU[j] = p.toUnit(x)
			}
		}
	default:
		v.Add(f, "one of double_value_spec, integer_value_spec, categorical_value_spec, discrete_value_spec is required")
		ok = false
	}
	idx := len(sp.params)
	sp.params = append(sp.params, p)
	if p.id != "" {
		if _, dup := sp.byID[p.id]; !dup {
			sp.byID[p.id] = idx
		}
	}
	for j, c := range ps.GetConditionalParameterSpecs() {
		cf := fmt.Sprintf("%s.conditional_parameter_specs[%d]", f, j)
		if depth+1 > MaxConditionalDepth {
			v.Add(cf, "conditional parameters nest at most %d deep", MaxConditionalDepth)
			continue
		}
		var cc []float64
		if ok {
			cc = sp.condition(idx, c, cf, v)
		}
		child := len(sp.params)
		sp.params[idx].children = append(sp.params[idx].children, child)
		sp.add(c.GetParameterSpec(), cf+".parameter_spec", idx, cc, depth+1, v)
	}
}

// condition compiles a conditional spec's parent values into the parent's
// point values.
func (sp *space) condition(parent int, c *trainingv1.StudySpec_ParameterSpec_ConditionalParameterSpec, f string, v *errs.Validator) []float64 {
	p := &sp.params[parent]
	var out []float64
	switch pc := c.GetParentValueCondition().(type) {
	case *trainingv1.StudySpec_ParameterSpec_ConditionalParameterSpec_ParentCategoricalValues:
		if p.kind != kCat {
			v.Add(f+".parent_categorical_values", "the parent %q is not categorical", p.id)
			return nil
		}
		for j, s := range pc.ParentCategoricalValues.GetValues() {
			k := slices.Index(p.cats, s)
			if k < 0 {
				v.Add(fmt.Sprintf("%s.parent_categorical_values.values[%d]", f, j), "%q is not a value of %q", s, p.id)
				continue
			}
			out = append(out, float64(k))
		}
	case *trainingv1.StudySpec_ParameterSpec_ConditionalParameterSpec_ParentIntValues:
		if p.kind != kInt {
			v.Add(f+".parent_int_values", "the parent %q is not an integer parameter", p.id)
			return nil
		}
		for j, x := range pc.ParentIntValues.GetValues() {
			if float64(x) < p.lo || float64(x) > p.hi {
				v.Add(fmt.Sprintf("%s.parent_int_values.values[%d]", f, j), "%d is outside %q's range [%v, %v]", x, p.id, p.lo, p.hi)
				continue
			}
			out = append(out, p.toUnit(float64(x)))
		}
	case *trainingv1.StudySpec_ParameterSpec_ConditionalParameterSpec_ParentDiscreteValues:
		if p.kind != kDisc {
			v.Add(f+".parent_discrete_values", "the parent %q is not a discrete parameter", p.id)
			return nil
		}
		for j, x := range pc.ParentDiscreteValues.GetValues() {
			k := slices.Index(p.disc, x)
			if k < 0 {
				v.Add(fmt.Sprintf("%s.parent_discrete_values.values[%d]", f, j), "%v is not a value of %q", x, p.id)
				continue
			}
			out = append(out, p.discU[k])
		}
	default:
		v.Add(f, "one of parent_categorical_values, parent_int_values, parent_discrete_values is required")
		return nil
	}
	if len(out) == 0 {
		v.Add(f, "at least one parent value is required")
	}
	return out
}

func checkRange(p param, f string, v *errs.Validator) bool {
	switch {
	case math.IsNaN(p.lo) || math.IsInf(p.lo, 0) || math.IsNaN(p.hi) || math.IsInf(p.hi, 0):
		v.Add(f, "min_value and max_value must be finite")
	case WideRange(p.lo, p.hi):
		v.Add(f, "[%g, %g] is too wide to search: |min_value| + |max_value| must stay below %g", p.lo, p.hi, math.MaxFloat64)
	case p.lo > p.hi:
		v.Add(f+".min_value", "%v is above max_value %v", p.lo, p.hi)
	case p.scale != sLinear && p.lo <= 0:
		v.Add(f+".min_value", "must be > 0 on a log scale (is %v)", p.lo)
	default:
		return true
	}
	return false
}

// WideRange reports whether a DOUBLE range [lo, hi] of finite bounds is too
// wide to search: its width (or, on a reverse log scale, hi+lo) overflows
// float64, so every point the search maps into it would be a bound.
func WideRange(lo, hi float64) bool { return math.IsInf(math.Abs(lo)+math.Abs(hi), 0) }

func validID(s string) bool {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}

// toUnit maps a numeric value into [0,1] by the param's scale.
func (p *param) toUnit(x float64) float64 {
	if p.hi > p.lo {
		// unitOf's arithmetic, with the bounds' logarithms precomputed.
		switch p.scale {
		case sLog:
			return min(1, max(0, (math.Log(x)-p.logLo)/(p.logHi-p.logLo)))
		case sRevLog:
			return min(1, max(0, 1-(math.Log(p.hi+p.lo-x)-p.logLo)/(p.logHi-p.logLo)))
		}
	}
	return unitOf(x, p.lo, p.hi, p.scale)
}

func unitOf(x, lo, hi float64, s scale) float64 {
	if hi <= lo {
		return 0.5
	}
	var u float64
	switch s {
	case sLog:
		u = (math.Log(x) - math.Log(lo)) / (math.Log(hi) - math.Log(lo))
	case sRevLog:
		u = 1 - (math.Log(hi+lo-x)-math.Log(lo))/(math.Log(hi)-math.Log(lo))
	default:
		u = (x - lo) / (hi - lo)
	}
	return min(1, max(0, u))
}

func valueOf(u, lo, hi float64, s scale) float64 {
	switch {
	case hi <= lo || u <= 0:
		return lo
	case u >= 1:
		return hi
	}
	var x float64
	switch s {
	case sLog:
		x = math.Exp(math.Log(lo) + u*(math.Log(hi)-math.Log(lo)))
	case sRevLog:
		x = hi + lo - math.Exp(math.Log(lo)+(1-u)*(math.Log(hi)-math.Log(lo)))
	default:
		x = lo + u*(hi-lo)
	}
	return min(hi, max(lo, x))
}

// snap returns the legal point value nearest to unit value u of a numeric
// param (the identity for a double).
func (p *param) snap(u float64) float64 {
	u = min(1, max(0, u))
	switch p.kind {
	case kInt:
		return p.toUnit(math.Round(valueOf(u, p.lo, p.hi, p.scale)))
	case kDisc:
		return p.discU[nearest(p.discU, u)]
	}
	return u
}

func nearest(sorted []float64, u float64) int {
	j, _ := slices.BinarySearch(sorted, u)
	switch {
	case j == 0:
		return 0
	case j == len(sorted):
		return j - 1
	case u-sorted[j-1] <= sorted[j]-u:
		return j - 1
	}
	return j
}

// fromUniform maps a uniform number in [0,1) to a legal point value, so that
// every legal value of an integer, discrete or categorical param is equally
// likely and a double is uniform in its scaled space.
func (p *param) fromUniform(r float64) float64 {
	switch p.kind {
	case kCat:
		return float64(min(len(p.cats)-1, int(r*float64(len(p.cats)))))
	case kDisc:
		return p.discU[min(len(p.disc)-1, int(r*float64(len(p.disc))))]
	case kInt:
		x := math.Round(valueOf(r, p.lo-0.5, p.hi+0.5, p.scale))
		return p.toUnit(min(p.hi, max(p.lo, x)))
	}
	return r
}

// active reports whether param i is active in point x (whose parents are
// already set).
func (sp *space) active(x []float64, i int) bool {
	p := &sp.params[i]
	if p.parent < 0 {
		return true
	}
	pv := x[p.parent]
	if math.IsNaN(pv) {
		return false
	}
	for _, c := range p.cond {
		if c == pv {
			return true
		}
	}
	return false
}

// fill sets every param of x from draw (in depth-first order), NaN for the
// inactive ones.
func (sp *space) fill(x []float64, draw func(i int) float64) {
	for i := range sp.params {
		if sp.active(x, i) {
			x[i] = draw(i)
		} else {
			x[i] = math.NaN()
		}
	}
}

// fixActivity recomputes which params are active after parents changed:
// newly active ones are drawn from draw, newly inactive ones become NaN.
func (sp *space) fixActivity(x []float64, draw func(i int) float64) {
	for i := range sp.params {
		act := sp.active(x, i)
		switch {
		case act && math.IsNaN(x[i]):
			x[i] = draw(i)
		case !act:
			x[i] = math.NaN()
		}
	}
}

// random draws a point uniformly (in each param's scaled space).
func (sp *space) random(rng *rand.Rand) []float64 {
	x := make([]float64, len(sp.params))
	sp.fill(x, func(i int) float64 { return sp.params[i].fromUniform(rng.Float64()) })
	return x
}

// encode turns a point into trial parameters, active ones in depth-first
// order.
func (sp *space) encode(x []float64) []*trainingv1.Trial_Parameter {
	var out []*trainingv1.Trial_Parameter
	for i := range sp.params {
		if math.IsNaN(x[i]) {
			continue
		}
		p := &sp.params[i]
		var v *structpb.Value
		switch p.kind {
		case kCat:
			v = structpb.NewStringValue(p.cats[int(x[i])])
		case kDisc:
			v = structpb.NewNumberValue(p.disc[nearest(p.discU, x[i])])
		case kInt:
			v = structpb.NewNumberValue(math.Round(valueOf(x[i], p.lo, p.hi, p.scale)))
		default:
			v = structpb.NewNumberValue(valueOf(x[i], p.lo, p.hi, p.scale))
		}
		out = append(out, &trainingv1.Trial_Parameter{ParameterId: p.id, Value: v})
	}
	return out
}

// decode reads a trial's parameters as a point; ok is false when they do
// not describe a point of the space (a missing active parameter, a value
// outside it), so such a trial is left out of the model.
func (sp *space) decode(ps []*trainingv1.Trial_Parameter) ([]float64, bool) {
	return sp.decodeInto(ps, make([]float64, len(sp.params)))
}

// decodeInto is decode into x (len(sp.params)), so that a caller decoding
// many trials can allocate once.
func (sp *space) decodeInto(ps []*trainingv1.Trial_Parameter, x []float64) ([]float64, bool) {
	// Parameters come in encode's order, so the search for each starts
	// where the last one was found (one comparison each, usually).
	next := 0
	for i := range sp.params {
		x[i] = math.NaN()
		if !sp.active(x, i) {
			continue
		}
		p := &sp.params[i]
		var v *structpb.Value
		for j := range ps {
			k := next + j
			if k >= len(ps) {
				k -= len(ps)
			}
			if ps[k].GetParameterId() == p.id {
				next = k + 1
				v = ps[k].GetValue()
				break
			}
		}
		if v == nil {
			return nil, false
		}
		if p.kind == kCat {
			s, isStr := v.GetKind().(*structpb.Value_StringValue)
			var str string
			if isStr {
				str = s.StringValue
			} else if n, isNum := v.GetKind().(*structpb.Value_NumberValue); isNum {
				str = strconv.FormatFloat(n.NumberValue, 'g', -1, 64)
			}
			k := slices.Index(p.cats, str)
			if k < 0 {
				return nil, false
			}
			x[i] = float64(k)
			continue
		}
		var f float64
		switch k := v.GetKind().(type) {
		case *structpb.Value_NumberValue:
			f = k.NumberValue
		case *structpb.Value_StringValue:
			var err error
			if f, err = strconv.ParseFloat(k.StringValue, 64); err != nil {
				return nil, false
			}
		default:
			return nil, false
		}
		if math.IsNaN(f) || f < p.lo-0.5 || f > p.hi+0.5 {
			return nil, false
		}
		f = min(p.hi, max(p.lo, f))
		if p.kind == kInt && f == math.Round(f) {
			// Already a legal value: snap would map it back to itself
			// through an exp and a log.
			x[i] = p.toUnit(f)
			continue
		}
		x[i] = p.snap(p.toUnit(f))
	}
	return x, true
}

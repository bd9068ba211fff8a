package sim

import (
	"math"
	"sort"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Tau is the bounded slowdown's threshold: runs shorter than it count as
// this long, so that a one-second job that waits a minute does not dominate.
const Tau = 10.0

// Metrics summarise a run of a trace. Durations are in seconds.
type Metrics struct {
	// Jobs submitted; Finished ran to their end (COMPLETED, FAILED, TIMEOUT,
	// NODE_FAIL, OUT_OF_MEMORY); Cancelled were cancelled (by the trace's
	// user); Unfinished never ended (never started, or still held).
	Jobs       int `json:"jobs"`
	Finished   int `json:"finished"`
	TimedOut   int `json:"timed_out"`
	Cancelled  int `json:"cancelled"`
	Unfinished int `json:"unfinished"`
	Requeues   int `json:"requeues"`
	// Makespan is from the first submission to the last end.
	Makespan float64 `json:"makespan_s"`
	// Utilisation is the resource-seconds runs held over capacity × makespan.
	Utilisation float64 `json:"utilisation"`
	// Wait is from submission to first start; JCT from submission to end;
	// both over Finished jobs.
	MeanWait float64 `json:"mean_wait_s"`
	P95Wait  float64 `json:"p95_wait_s"`
	MeanJCT  float64 `json:"mean_jct_s"`
	// MeanBSLD is the mean bounded slowdown: max(1, JCT / max(run, Tau)),
	// run being the last run's length.
	MeanBSLD float64 `json:"mean_bsld"`
	// Fairness is Jain's index over the accounts' mean bounded slowdowns:
	// 1 when every account is slowed down alike, 1/n at worst.
	Fairness float64 `json:"fairness"`
	Accounts int     `json:"accounts"`
	// WorstAccount has the highest mean bounded slowdown, WorstBSLD.
	WorstAccount string  `json:"worst_account"`
	WorstBSLD    float64 `json:"worst_bsld"`
}

// finished reports whether a job in state s ran to its end.
func finished(s loomv1.JobState) bool {
	switch s {
	case loomv1.JobState_COMPLETED, loomv1.JobState_FAILED, loomv1.JobState_TIMEOUT,
		loomv1.JobState_NODE_FAIL, loomv1.JobState_OUT_OF_MEMORY:
		return true
	}
	return false
}

// Measure computes the metrics of jobs, whose runs held held resource-seconds
// on a cluster of capacity.
func Measure(jobs []JobResult, held float64, capacity int64) Metrics {
	m := Metrics{Jobs: len(jobs)}
	var waits []float64
	var sumWait, sumJCT, sumBSLD float64
	type acc struct {
		sum float64
		n   int
	}
	accounts := map[string]*acc{}
	var first, last int64 = math.MaxInt64, 0
	for _, j := range jobs {
		first = min(first, j.Submit)
		if j.End >= 0 {
			last = max(last, j.End)
		}
		m.Requeues += j.Requeues
		switch {
		case j.State == loomv1.JobState_CANCELLED:
			m.Cancelled++
			continue
		case j.End < 0 || !finished(j.State):
			m.Unfinished++
			continue
		}
		m.Finished++
		if j.State == loomv1.JobState_TIMEOUT {
			m.TimedOut++
		}
		wait := float64(j.Start - j.Submit)
		jct := float64(j.End - j.Submit)
		bsld := BoundedSlowdown(jct, float64(j.End-j.LastStart))
		waits = append(waits, wait)
		sumWait += wait
		sumJCT += jct
		sumBSLD += bsld
		a := accounts[j.Account]
		if a == nil {
			a = &acc{}
			accounts[j.Account] = a
		}
		a.sum += bsld
		a.n++
	}
	if first != math.MaxInt64 && last > first {
		m.Makespan = float64(last - first)
		if capacity > 0 {
			m.Utilisation = held / (float64(capacity) * m.Makespan)
		}
	}
	if m.Finished == 0 {
		return m
	}
	n := float64(m.Finished)
	m.MeanWait, m.MeanJCT, m.MeanBSLD = sumWait/n, sumJCT/n, sumBSLD/n
	m.P95Wait = Percentile(waits, 0.95)
	names := make([]string, 0, len(accounts))
	for name := range accounts {
		names = append(names, name)
	}
	sort.Strings(names)
	means := make([]float64, len(names))
	for i, name := range names {
		a := accounts[name]
		means[i] = a.sum / float64(a.n)
		if means[i] > m.WorstBSLD {
			m.WorstAccount, m.WorstBSLD = name, means[i]
		}
	}
	m.Accounts = len(names)
	m.Fairness = Jain(means)
	return m
}

// BoundedSlowdown is max(1, jct / max(run, Tau)).
func BoundedSlowdown(jct, run float64) float64 {
	return max(1, jct/max(run, Tau))
}

// Percentile returns the p-th quantile (0 < p <= 1) of xs by the nearest-rank
// method; xs is sorted in place. It is 0 for no values.
func Percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	sort.Float64s(xs)
	k := int(math.Ceil(p*float64(len(xs)))) - 1
	return xs[min(max(k, 0), len(xs)-1)]
}

// Jain is Jain's fairness index of xs: (Σx)² / (n Σx²), 1 when all are
// equal; 1 for none or all zero.
func Jain(xs []float64) float64 {
	var s, s2 float64
	for _, x := range xs {
		s += x
		s2 += x * x
	}
	if len(xs) == 0 || s2 == 0 {
		return 1
	}
	return s * s / (float64(len(xs)) * s2)
}

package trainingspec

import (
	"sort"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
)

// MaxTuningJobAnswer bounds a GetHyperparameterTuningJob answer (encoded):
// under gRPC's default 4 MiB receive limit, which the gateway's client of
// the training service and the CLI's of the gateway keep, with room for
// the rest of the message. BoundTuningJobAnswer keeps an answer within it.
const MaxTuningJobAnswer = 3 << 20

// BoundTuningJobAnswer makes j, an answer the caller owns (a copy: its
// trials' measurements are replaced), encode in at most limit bytes, and
// says in j what it left out. First it thins the trials' intermediate
// measurements (measurements_thinned): at most k a trial, k halved from
// the longest trial's count, each trial keeping its first, its last and
// measurements evenly spaced between; at k = 0 they are left out. When
// that is not enough (a study's parameters, up to MaxParameters values of
// MaxCategoricalValueBytes a trial, and final measurements, over up to
// MaxTrialCount trials, pass any answer), it leaves whole trials out
// (omitted_trials lists their ids), keeping first the best trial, then the
// unfinished ones, then the newest. Nothing is done when j fits; j's other
// fields (its owner and state among them) are always kept, so that the
// gateway's cancel and delete, which read them, never depend on the size
// of a study.
func BoundTuningJobAnswer(j *trainingv1.HyperparameterTuningJob, limit int) {
	j.MeasurementsThinned, j.OmittedTrials = false, nil
	if proto.Size(j) <= limit {
		return
	}
	if thinMeasurements(j, limit) {
		return
	}
	omitTrials(j, limit)
}

// thinMeasurements thins j's trials' intermediate measurements until j
// encodes in limit bytes or they are all left out; it reports whether j
// fits.
func thinMeasurements(j *trainingv1.HyperparameterTuningJob, limit int) bool {
	all := make([][]*trainingv1.Measurement, len(j.GetTrials()))
	most := 0
	for i, tr := range j.GetTrials() {
		all[i] = tr.GetMeasurements()
		most = max(most, len(all[i]))
	}
	if most == 0 {
		return false
	}
	j.MeasurementsThinned = true
	for k := most / 2; ; k /= 2 {
		for i, tr := range j.GetTrials() {
			tr.Measurements = spread(all[i], k)
		}
		if proto.Size(j) <= limit {
			return true
		}
		if k == 0 {
			return false
		}
	}
}

// omitTrials leaves out of j the trials that do not fit in limit bytes,
// taken in order of keeping (the best, the unfinished, then the newest),
// and lists their ids in omitted_trials; the kept ones stay in their
// order. The room for the list is reserved first, as if every trial were
// left out.
func omitTrials(j *trainingv1.HyperparameterTuningJob, limit int) {
	trials := j.GetTrials()
	j.Trials = nil
	const trialsField, omittedField = 9, 103
	budget := limit - proto.Size(j)
	for _, tr := range trials {
		budget -= protowire.SizeTag(omittedField) + protowire.SizeBytes(len(tr.GetId()))
	}
	rank := func(i int) int {
		switch tr := trials[i]; {
		case j.GetBestTrial() != "" && tr.GetId() == j.GetBestTrial():
			return 0
		case tr.GetState() != trainingv1.Trial_SUCCEEDED && tr.GetState() != trainingv1.Trial_INFEASIBLE:
			return 1
		}
		return 2
	}
	order := make([]int, len(trials))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		if ra, rb := rank(order[a]), rank(order[b]); ra != rb {
			return ra < rb
		}
		return order[a] > order[b] // the newest first
	})
	keep := make([]bool, len(trials))
	for _, i := range order {
		if n := protowire.SizeTag(trialsField) + protowire.SizeBytes(proto.Size(trials[i])); n <= budget {
			keep[i], budget = true, budget-n
		}
	}
	for i, tr := range trials {
		if keep[i] {
			j.Trials = append(j.Trials, tr)
		} else {
			j.OmittedTrials = append(j.OmittedTrials, tr.GetId())
		}
	}
}

// spread returns at most k of ms: all when there are no more; else the
// first, the last and evenly spaced ones between (k = 1: the last).
func spread(ms []*trainingv1.Measurement, k int) []*trainingv1.Measurement {
	switch {
	case len(ms) <= k:
		return ms
	case k == 0:
		return nil
	case k == 1:
		return ms[len(ms)-1:]
	}
	out := make([]*trainingv1.Measurement, 0, k)
	for i := range k {
		out = append(out, ms[i*(len(ms)-1)/(k-1)])
	}
	return out
}

package domain

import (
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/hpo"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
)

// Tuning limits (libs/trainingspec's, which the gateway checks; checked here
// again so that a command that bypassed it cannot make the service loop).
const (
	// DefaultParallelTrials is parallel_trial_count when 0.
	DefaultParallelTrials = 1
	// MaxTrialCount bounds max_trial_count.
	MaxTrialCount = 1000
	// MaxParallelTrials bounds parallel_trial_count.
	MaxParallelTrials = 64
	// MaxMeasurements bounds a trial's intermediate measurements, so that a
	// trial's record (one per trial, updated in place) stays bounded
	// however long its program reports: past it, thinMeasurements halves
	// the older ones.
	MaxMeasurements = 1000
	// MaxMeasurementMetrics bounds the metrics one measurement keeps, and
	// MaxMetricIDBytes a metric id it keeps that the study does not name:
	// one step's values come in several records (hypertune lines,
	// TensorBoard scalars), merged, and the node that sends them is bound
	// by no agent's limits, so without these a node that runs a trial could
	// name ever new metrics at one step and grow the trial (the service's
	// memory, its state's record, each TrialChanged) without bound. The
	// study's metrics are kept first, then the others in id order.
	MaxMeasurementMetrics = 64
	MaxMetricIDBytes      = 128
	// DefaultMetricGrace is how long a trial whose CustomJob succeeded
	// waits for a measurement of its study's metric (State.MetricGrace;
	// the service's LOOM_TRAINING_METRIC_GRACE).
	DefaultMetricGrace = 60 * time.Second
	// MaxMetricGrace bounds that wait.
	MaxMetricGrace = time.Hour
)

// thinMeasurements keeps ms within MaxMeasurements (thinTo).
func thinMeasurements(ms []*trainingv1.Measurement, keep *trainingv1.Measurement) []*trainingv1.Measurement {
	return thinTo(ms, keep, MaxMeasurements)
}

// thinTo keeps ms within limit (at least 2): while there are too many,
// every second one of all but the last is dropped (the first is kept), so
// that the curve still spans every step reported at half the resolution,
// and the last (LAST selection's) stays, as does keep (BEST selection's,
// nil for none). It is a function of its arguments only, so a replay
// thins the same.
func thinTo(ms []*trainingv1.Measurement, keep *trainingv1.Measurement, limit int) []*trainingv1.Measurement {
	limit = max(limit, 2)
	for len(ms) > limit {
		last := ms[len(ms)-1]
		kept := ms[:0]
		for i := 0; i < len(ms)-1; i++ {
			if i%2 == 0 || ms[i] == keep {
				kept = append(kept, ms[i])
			}
		}
		kept = append(kept, last)
		clear(ms[len(kept):])
		ms = kept
	}
	return ms
}

// thinKept is thinTo keeping, for a study that selects its best
// measurement, the best of ms.
func thinKept(job *trainingv1.HyperparameterTuningJob, ms []*trainingv1.Measurement, limit int) []*trainingv1.Measurement {
	if len(ms) <= limit {
		return ms
	}
	var keep *trainingv1.Measurement
	if srch, err := searcher(job); err == nil && job.GetStudySpec().GetMeasurementSelectionType() == trainingv1.StudySpec_BEST_MEASUREMENT {
		keep = selectMeasurement(srch, ms, job.GetStudySpec().GetMetrics()[0].GetMetricId(), trainingv1.StudySpec_BEST_MEASUREMENT)
	}
	return thinTo(ms, keep, limit)
}

func (s *State) createTuningJob(now time.Time, c *eventsv1.CreateHyperparameterTuningJob, logDir LogDir) (*Change, error) {
	in := c.GetTuningJob()
	n, err := ParseName(in.GetName(), TuningJobs)
	if err != nil {
		return nil, ignored("create tuning job: name: %v", err)
	}
	if s.Lookup(in.GetName()) != nil {
		return nil, nil // a copy of a create already applied
	}
	if in.GetMaxTrialCount() > MaxTrialCount {
		return nil, ignored("create %s: max_trial_count: at most %d, got %d", in.GetName(), MaxTrialCount, in.GetMaxTrialCount())
	}
	for k := int64(1); k <= int64(max(in.GetMaxTrialCount(), 0)); k++ {
		if s.Lookup(n.With(CustomJobs, n.ID+k).String()) != nil {
			return nil, ignored("create %s: trial %d's id %d is in use", in.GetName(), k, n.ID+k)
		}
	}
	if in.GetUser() == "" {
		return nil, ignored("create %s: user: %v (required: its trials run as their owner)", in.GetName(), errs.FailedPrecondition)
	}
	r := &Root{Name: in.GetName(), Tuning: newTuning(now, proto.Clone(in).(*trainingv1.HyperparameterTuningJob)), LogDir: logDir}
	em := &emitter{}
	advance(now, s.metricGrace(), r, em)
	return finish(now, nil, r, em), nil
}

// newTuning makes the record of a tuning job accepted at now: RUNNING, or
// FAILED when its study cannot be searched.
func newTuning(now time.Time, job *trainingv1.HyperparameterTuningJob) *Tuning {
	ts := timestamppb.New(now)
	if job.CreateTime == nil {
		job.CreateTime = ts
	}
	job.Trials, job.BestTrial, job.Error, job.EndTime = nil, "", nil, nil
	job.State, job.StartTime = trainingv1.JobState_JOB_STATE_RUNNING, ts
	t := &Tuning{Job: job}
	fail := func(msg string) {
		job.State, job.EndTime = trainingv1.JobState_JOB_STATE_FAILED, ts
		job.Error = &trainingv1.Status{Code: codeInvalidArgument, Message: msg}
	}
	if job.GetMaxTrialCount() <= 0 || job.GetMaxTrialCount() > MaxTrialCount {
		fail(fmt.Sprintf("max_trial_count: must be 1..%d, got %d", MaxTrialCount, job.GetMaxTrialCount()))
	} else if job.GetParallelTrialCount() < 0 || job.GetParallelTrialCount() > MaxParallelTrials {
		fail(fmt.Sprintf("parallel_trial_count: must be 0..%d, got %d", MaxParallelTrials, job.GetParallelTrialCount()))
	} else if _, err := searcher(job); err != nil {
		fail(err.Error())
	} else if job.GetTrialJobSpec() == nil {
		fail("trial_job_spec: required")
	}
	return t
}

// Seed is the search's seed of a tuning job: study_spec.seed, else the FNV
// hash of its name, so that a study is reproducible.
func Seed(job *trainingv1.HyperparameterTuningJob) int64 {
	if s := job.GetStudySpec().GetSeed(); s != 0 {
		return s
	}
	h := fnv.New64a()
	h.Write([]byte(job.GetName()))
	return int64(h.Sum64() & math.MaxInt64)
}

// suggest and shouldStop are the search's Suggest and ShouldStop; tests
// replace them to drive what the search decides (an exhausted grid, an early
// stop) whatever libs/hpo's algorithms are.
var (
	suggest = func(s *hpo.Searcher, trials []*trainingv1.Trial, n int) ([][]*trainingv1.Trial_Parameter, error) {
		return s.Suggest(trials, n)
	}
	shouldStop = func(s *hpo.Searcher, trials []*trainingv1.Trial, i int) (bool, string) {
		return s.ShouldStop(trials, i)
	}
)

func searcher(job *trainingv1.HyperparameterTuningJob) (*hpo.Searcher, error) {
	return hpo.New(job.GetStudySpec(), hpo.Options{Seed: Seed(job), MaxTrials: int(job.GetMaxTrialCount())})
}

// trialActive reports whether a trial still runs.
func trialActive(tr *trainingv1.Trial) bool {
	switch tr.GetState() {
	case trainingv1.Trial_REQUESTED, trainingv1.Trial_ACTIVE, trainingv1.Trial_STOPPING:
		return true
	}
	return false
}

// advance moves r on from what its parts' states are now: trials end with
// their CustomJobs, new trials start, tuning jobs and pipelines end. It is
// idempotent, so every change runs it. grace is State.MetricGrace.
func advance(now time.Time, grace time.Duration, r *Root, em *emitter) {
	if r.Tuning != nil {
		// A round can start trials that fail at once (a spec no cluster can
		// be made from): run rounds until nothing moves, bounded by the budget.
		for i := 0; i <= int(r.Tuning.Job.GetMaxTrialCount())+1; i++ {
			if !advanceTuning(now, grace, r, em) {
				break
			}
		}
	}
	if r.Pipeline != nil {
		advancePipeline(now, r, em)
	}
}

// advanceTuning runs one round; it reports whether a trial started or ended.
// A trial whose job succeeded without a measurement of the metric stays
// active (finalizing) until one comes or grace from the job's end passes.
func advanceTuning(now time.Time, grace time.Duration, r *Root, em *emitter) bool {
	t := r.Tuning
	job := t.Job
	if JobEnded(job.GetState()) {
		return false
	}
	srch, err := searcher(job)
	if err != nil {
		return false // refused at create
	}
	moved := false
	for _, tr := range job.GetTrials() {
		if !trialActive(tr) {
			continue
		}
		if cj := r.cj(tr.GetCustomJob()); cj != nil && JobEnded(cj.Job.GetState()) && !awaitingMetric(now, grace, job, tr, cj) {
			tr, cj := r.edit(tr.GetId())
			finishTrial(now, srch, job, tr, cj)
			moved = true
		}
	}
	if b := srch.Best(job.GetTrials()); b >= 0 {
		job.BestTrial = job.GetTrials()[b].GetId()
	}
	failed, last := 0, ""
	for _, tr := range job.GetTrials() {
		if tr.GetState() == trainingv1.Trial_INFEASIBLE {
			failed++
			last = tr.GetInfeasibleReason()
		}
	}
	if t.Ending == 0 && job.GetMaxFailedTrialCount() > 0 && failed >= int(job.GetMaxFailedTrialCount()) {
		t.Ending = trainingv1.JobState_JOB_STATE_FAILED
		t.EndError = &trainingv1.Status{Code: codeFailedPrecondition, Message: fmt.Sprintf(
			"%d trials failed (max_failed_trial_count %d); the last: %s", failed, job.GetMaxFailedTrialCount(), last)}
	}
	active := 0
	for _, tr := range job.GetTrials() {
		if trialActive(tr) {
			active++
		}
	}
	if t.Ending != 0 {
		for _, tr := range job.GetTrials() {
			if trialActive(tr) {
				tr, cj := r.edit(tr.GetId())
				tr.State = trainingv1.Trial_STOPPING
				if cj != nil {
					stopCJ(now, cj, "its tuning job "+job.GetName()+" is ending: "+t.EndError.GetMessage(), t.EndBy, em)
					if JobEnded(cj.Job.GetState()) && !awaitingMetric(now, grace, job, tr, cj) {
						finishTrial(now, srch, job, tr, cj)
						active--
					}
				}
			}
		}
		if active == 0 {
			job.State, job.Error, job.EndTime = t.Ending, t.EndError, timestamppb.New(now)
			return false
		}
		if job.GetState() != trainingv1.JobState_JOB_STATE_CANCELLING && t.Ending == trainingv1.JobState_JOB_STATE_CANCELLED {
			job.State = trainingv1.JobState_JOB_STATE_CANCELLING
		}
		return moved
	}
	parallel := int(job.GetParallelTrialCount())
	if parallel <= 0 {
		parallel = DefaultParallelTrials
	}
	want := min(parallel-active, int(job.GetMaxTrialCount())-len(job.GetTrials()))
	exhausted := false
	if want > 0 {
		ps, err := suggest(srch, job.GetTrials(), want)
		if err != nil {
			t.Ending = trainingv1.JobState_JOB_STATE_FAILED
			t.EndError = &trainingv1.Status{Code: codeInternal, Message: "the search failed: " + err.Error()}
			return true
		}
		exhausted = len(ps) < want
		for _, p := range ps {
			startTrial(now, r, p, em)
			active++
			moved = true
		}
	}
	if active == 0 && (len(job.GetTrials()) >= int(job.GetMaxTrialCount()) || exhausted) {
		job.EndTime = timestamppb.New(now)
		if job.GetBestTrial() != "" {
			job.State = trainingv1.JobState_JOB_STATE_SUCCEEDED
		} else {
			job.State = trainingv1.JobState_JOB_STATE_FAILED
			job.Error = &trainingv1.Status{Code: codeFailedPrecondition,
				Message: fmt.Sprintf("no trial succeeded with a value of metric %q; the last failure: %s",
					job.GetStudySpec().GetMetrics()[0].GetMetricId(), last)}
		}
	}
	return moved
}

// startTrial starts the next trial with parameters ps: its CustomJob is the
// tuning job's id + k, its spec trial_job_spec with the parameters appended
// to every pool's args as --<parameter_id>=<value>.
func startTrial(now time.Time, r *Root, ps []*trainingv1.Trial_Parameter, em *emitter) {
	job := r.Tuning.Job
	n, _ := ParseName(job.GetName(), TuningJobs)
	k := int64(len(job.GetTrials()) + 1)
	id := strconv.FormatInt(k, 10)
	cjName := n.With(CustomJobs, n.ID+k).String()
	spec := proto.Clone(job.GetTrialJobSpec()).(*trainingv1.CustomJobSpec)
	flags := ParamFlags(ps)
	for _, p := range spec.GetWorkerPoolSpecs() {
		switch {
		case p.GetContainerSpec() != nil:
			p.GetContainerSpec().Args = append(p.GetContainerSpec().Args, flags...)
		case p.GetPythonPackageSpec() != nil:
			p.GetPythonPackageSpec().Args = append(p.GetPythonPackageSpec().Args, flags...)
		}
	}
	tr := &trainingv1.Trial{
		Name: job.GetName() + "/trials/" + id, Id: id, State: trainingv1.Trial_ACTIVE,
		Parameters: ps, StartTime: timestamppb.New(now), CustomJob: cjName,
	}
	job.Trials = append(job.Trials, tr)
	cj := newCJ(now, &trainingv1.CustomJob{
		Name: cjName, DisplayName: fmt.Sprintf("%s-trial-%s", job.GetDisplayName(), id), JobSpec: spec,
		Labels: job.GetLabels(), User: job.GetUser(),
	}, id, r.LogDir)
	r.CJs = append(r.CJs, cj)
	r.added(id)
	startCJ(now, cj, em)
}

// ParamFlags renders trial parameters as Vertex passes them: --<id>=<value>.
func ParamFlags(ps []*trainingv1.Trial_Parameter) []string {
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, "--"+p.GetParameterId()+"="+ParamString(p.GetValue()))
	}
	return out
}

// ParamString is a parameter value as a flag or lineage holds it: a whole
// number without a fraction, other numbers in the shortest form, strings as
// they are.
func ParamString(v *structpb.Value) string {
	switch x := v.GetKind().(type) {
	case *structpb.Value_NumberValue:
		f := x.NumberValue
		if f == math.Trunc(f) && math.Abs(f) < 1e15 {
			return strconv.FormatInt(int64(f), 10)
		}
		return strconv.FormatFloat(f, 'g', -1, 64)
	case *structpb.Value_StringValue:
		return x.StringValue
	case *structpb.Value_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	}
	return ""
}

// trialJobOK reports whether trial tr's ended CustomJob cj did its work:
// it succeeded, or the search's early stop cancelled it.
func trialJobOK(tr *trainingv1.Trial, cj *CJ) bool {
	return cj.Job.GetState() == trainingv1.JobState_JOB_STATE_SUCCEEDED ||
		(tr.GetEarlyStopped() && cj.Job.GetState() == trainingv1.JobState_JOB_STATE_CANCELLED)
}

// awaitingMetric reports whether trial tr, whose CustomJob cj ended, is
// finalizing at now: its job did its work, no measurement of the study's
// metric has come yet, and grace has not passed since the job's end. Job
// and metrics events travel on different topics, unordered with each other,
// so a job's end can be seen before its program's last metrics. The
// deadline is the stored end time plus grace, so that a replay decides the
// same; State.Tick judges the trial once it passes.
func awaitingMetric(now time.Time, grace time.Duration, job *trainingv1.HyperparameterTuningJob, tr *trainingv1.Trial, cj *CJ) bool {
	if !JobEnded(cj.Job.GetState()) || !trialJobOK(tr, cj) || cj.Job.GetEndTime() == nil {
		return false
	}
	if !now.Before(cj.Job.GetEndTime().AsTime().Add(grace)) {
		return false
	}
	// Until every node's step end has been read, later points of its
	// metrics may still be on their way (a restarted service reads the
	// step topic's backlog after the job's end): the measurements so far
	// are not final, whatever they hold.
	if !stepsEnded(cj) {
		return true
	}
	metric := job.GetStudySpec().GetMetrics()[0].GetMetricId()
	for _, m := range tr.GetMeasurements() {
		if _, ok := metricValue(m, metric); ok {
			return false
		}
	}
	return true
}

// stepsEnded reports whether the step end of every node of cj's run has
// been read (CJ.StepsEnded): every metric point its agents sent came
// before. A run of no known node has nothing to wait for.
func stepsEnded(cj *CJ) bool {
	for _, n := range cj.Nodes {
		if !slices.ContainsFunc(cj.StepsEnded, func(e string) bool { return runsOn(cj.Job.GetCluster(), []string{n}, e) }) {
			return false
		}
	}
	return true
}

// stepEnded records that a node's step of a trial's run ended
// (CJ.StepsEnded): the agent sent its last metrics before it.
func (s *State) stepEnded(now time.Time, ev *eventsv1.StepChanged, signer string) (*Change, error) {
	switch ev.GetState() {
	case eventsv1.StepState_STEP_EXITED, eventsv1.StepState_STEP_KILLED, eventsv1.StepState_STEP_FAILED_TO_START, eventsv1.StepState_STEP_LOST:
	default:
		return nil, nil
	}
	r := s.Lookup("job:" + ev.GetJob())
	if r == nil || r.Tuning == nil {
		return nil, nil
	}
	cur := r.cjRunning(ev.GetJob())
	// A node speaks for itself only: a signed record's node is its signer.
	node := ev.GetNode()
	if n, ok := strings.CutPrefix(signer, "nodes/"); ok {
		node = n
	}
	if cur == nil || cur.TrialID == "" {
		return nil, nil
	}
	if ev.GetAttempt() > cur.Attempt || (ev.GetAttempt() == cur.Attempt && len(cur.Nodes) == 0) {
		// Its run's event (the attempt, its nodes) is not read yet: kept
		// until it is (takePendingStepEnds), bounded.
		e := StepEnd{Attempt: ev.GetAttempt(), Node: node, Exited: exitedByItself(ev)}
		if JobEnded(cur.Job.GetState()) || !inCluster(cur.Job.GetCluster(), node) ||
			slices.Contains(cur.PendingStepEnds, e) {
			return nil, nil
		}
		kept, ok := holdStepEnd(cur.PendingStepEnds, e, cur.Attempt)
		if !ok {
			return nil, nil
		}
		return s.change(now, r.Name, func(r *Root, em *emitter) error {
			_, cj := r.edit(cur.TrialID)
			cj.PendingStepEnds = kept
			return nil
		})
	}
	if ev.GetAttempt() != cur.Attempt || !runsOn(cur.Job.GetCluster(), cur.Nodes, node) ||
		slices.Contains(cur.StepsEnded, node) {
		return nil, nil
	}
	return s.change(now, r.Name, func(r *Root, em *emitter) error {
		_, cj := r.edit(cur.TrialID)
		cj.StepsEnded = append(cj.StepsEnded, node)
		if exitedByItself(ev) {
			cj.StepsExited = append(cj.StepsExited, node)
		}
		return nil
	})
}

// exitedByItself reports whether a step end says the node's program ran
// to its own end: it exited with code 0, not by a signal (a cancel's kill
// is STEP_KILLED, or a signal's exit).
func exitedByItself(ev *eventsv1.StepChanged) bool {
	return ev.GetState() == eventsv1.StepState_STEP_EXITED && ev.GetExitCode() == 0 && ev.GetExitSignal() == 0
}

// ranToEnd reports whether every node of cj's run had its program exit by
// itself with code 0 (CJ.StepsExited): the run was complete whatever its
// job's end says (a cancel read by the scheduler after the program's exit
// but before its step's end makes the job CANCELLED).
func ranToEnd(cj *CJ) bool {
	if len(cj.Nodes) == 0 {
		return false
	}
	for _, n := range cj.Nodes {
		if !slices.ContainsFunc(cj.StepsExited, func(e string) bool { return runsOn(cj.Job.GetCluster(), []string{n}, e) }) {
			return false
		}
	}
	return true
}

// holdStepEnd returns held (CJ.PendingStepEnds) with e added, and true;
// or false when there is no room for it. Past MaxHeldStepEnds, room is
// made from the node holding the most while it holds more than e's node
// will (its end of the attempt farthest from the current one goes), so a
// node's held end is never given up for a node that then holds as many:
// until the
// run's event names its nodes they cannot be told from the cluster's other
// nodes, so what is bounded is the nodes that hold. While at most
// MaxHeldStepEnds nodes do, a node's first held end is never refused, so
// a node that floods ends of attempts to come cannot push out the run's
// nodes' (it would make a trial wait out the metric grace).
func holdStepEnd(held []StepEnd, e StepEnd, attempt int32) ([]StepEnd, bool) {
	out := append(slices.Clip(held), e)
	if len(held) < MaxHeldStepEnds {
		return out, true
	}
	count := map[string]int{}
	for _, h := range held {
		count[h.Node]++
	}
	most := ""
	for _, h := range held {
		if c := count[h.Node]; most == "" || c > count[most] || (c == count[most] && h.Node < most) {
			most = h.Node
		}
	}
	if count[most] <= count[e.Node]+1 {
		return nil, false // it would hold no fewer than the node it evicts
	}
	far := -1
	for i, h := range held {
		if h.Node == most && (far < 0 || dist(h.Attempt, attempt) > dist(held[far].Attempt, attempt)) {
			far = i
		}
	}
	return slices.Delete(out, far, far+1), true
}

// dist is how far attempt a is from b (holdStepEnd, farthestAttempt).
func dist(a, b int32) int64 {
	d := int64(a) - int64(b)
	if d < 0 {
		return -d
	}
	return d
}

// takePendingStepEnds counts the kept step ends of cj's run, now that the
// job's event names it (cj.Attempt, cj.Nodes): a node of the run's joins
// StepsEnded, another node's is dropped, as are an earlier run's; a later
// run's, or this one's while its nodes are not known, stay.
func takePendingStepEnds(cj *CJ) {
	if len(cj.PendingStepEnds) == 0 {
		return
	}
	var keep []StepEnd
	for _, e := range cj.PendingStepEnds {
		switch {
		case e.Attempt < cj.Attempt:
		case e.Attempt > cj.Attempt || len(cj.Nodes) == 0:
			keep = append(keep, e)
		case runsOn(cj.Job.GetCluster(), cj.Nodes, e.Node) && !slices.Contains(cj.StepsEnded, e.Node):
			cj.StepsEnded = append(cj.StepsEnded, e.Node)
			if e.Exited {
				cj.StepsExited = append(cj.StepsExited, e.Node)
			}
		}
	}
	cj.PendingStepEnds = keep
}

// inCluster reports whether node, named in full, is a node of cluster; a
// bare hostname may be (runsOn judges it against the run's nodes).
func inCluster(cluster, node string) bool {
	if cluster == "" || !strings.Contains(node, "/") {
		return true
	}
	return strings.HasPrefix(node, cluster+"/nodes/")
}

// finalizeDue reports whether a finalizing trial of r is due to be judged
// at now (its grace passed), so that State.Tick changes r.
func finalizeDue(now time.Time, grace time.Duration, r *Root) bool {
	if r.Tuning == nil || JobEnded(r.Tuning.Job.GetState()) {
		return false
	}
	for _, tr := range r.Tuning.Job.GetTrials() {
		if cj := r.cj(tr.GetCustomJob()); trialActive(tr) && cj != nil && JobEnded(cj.Job.GetState()) &&
			!awaitingMetric(now, grace, r.Tuning.Job, tr, cj) {
			return true
		}
	}
	return false
}

// finishTrial ends trial tr after its CustomJob cj ended: SUCCEEDED with
// its final measurement (per measurement_selection_type; an early-stopped
// trial's last), or INFEASIBLE with the reason. A trial the search stopped
// whose job still SUCCEEDED, or whose every node's program exited 0 by
// itself (ranToEnd), ran to its end and is not early-stopped; nor is one
// that reported its last step (reachedLastStep) before the stop killed
// its program.
func finishTrial(now time.Time, srch *hpo.Searcher, job *trainingv1.HyperparameterTuningJob, tr *trainingv1.Trial, cj *CJ) {
	tr.EndTime = timestamppb.New(now)
	metric := job.GetStudySpec().GetMetrics()[0].GetMetricId()
	if !trialJobOK(tr, cj) {
		tr.State = trainingv1.Trial_INFEASIBLE
		tr.InfeasibleReason = fmt.Sprintf("its custom job ended %s: %s", cj.Job.GetState(), cj.Job.GetError().GetMessage())
		return
	}
	if tr.GetEarlyStopped() && (cj.Job.GetState() == trainingv1.JobState_JOB_STATE_SUCCEEDED || ranToEnd(cj) ||
		reachedLastStep(job, tr, metric)) {
		// The search's stop came too late: the program ran to its end
		// before the cancel reached it. Its job SUCCEEDED, or, when the
		// scheduler read the cancel after the program's exit but before
		// its step's end, CANCELLED while every node's program exited 0
		// by itself; or the program had reported its last step and was
		// killed while it wound up (saving, exiting). The trial is
		// complete, and the search must learn from it as such, not hold
		// it as a point without a value; nor may it be shown "stopped
		// early".
		tr.EarlyStopped = false
		completeCJ(cj)
	}
	sel := job.GetStudySpec().GetMeasurementSelectionType()
	if tr.GetEarlyStopped() {
		sel = trainingv1.StudySpec_LAST_MEASUREMENT
	}
	final := selectMeasurement(srch, tr.GetMeasurements(), metric, sel)
	if final == nil {
		tr.State = trainingv1.Trial_INFEASIBLE
		tr.InfeasibleReason = fmt.Sprintf("it reported no finite value of metric %q (append hypertune JSON lines to $CLOUD_ML_HP_METRIC_FILE)", metric)
		return
	}
	tr.State = trainingv1.Trial_SUCCEEDED
	tr.FinalMeasurement = proto.Clone(final).(*trainingv1.Measurement)
}

// completeCJ makes the CustomJob cj of a trial the search stopped too
// late (finishTrial) say what its trial says: SUCCEEDED, without the
// error "stopped early by the search" its cancel left (its job CANCELLED).
// Its program's result was complete before the cancel reached it; a
// complete trial whose job still read as cancelled by the search, with
// an error, would tell whoever opens the job (`loom jobs custom get`, the
// REST view, its CustomJobChanged) the opposite of what the trial list
// says. Its end time stays the scheduler job's.
func completeCJ(cj *CJ) {
	if cj.Job.GetState() != trainingv1.JobState_JOB_STATE_CANCELLED {
		return
	}
	cj.Job.State = trainingv1.JobState_JOB_STATE_SUCCEEDED
	cj.Job.Error = nil
}

// reachedLastStep reports whether trial tr has a measurement of metric at
// or past the study's last step: ASHA's max_step_count, the one stopping
// spec that knows where a trial ends (median stopping does not, so none
// is taken as the last there). As ASHA judges a trial (libs/hpo), only a
// measurement with a finite value of metric counts: its result at the
// last step is there, whatever the cancel did to the program after.
func reachedLastStep(job *trainingv1.HyperparameterTuningJob, tr *trainingv1.Trial, metric string) bool {
	last := job.GetStudySpec().GetAshaStoppingSpec().GetMaxStepCount()
	if last <= 0 {
		return false
	}
	return slices.ContainsFunc(tr.GetMeasurements(), func(m *trainingv1.Measurement) bool {
		_, ok := metricValue(m, metric)
		return ok && m.GetStepCount() >= last
	})
}

// selectMeasurement picks the final measurement among ms: the last with
// metric, or (BEST_MEASUREMENT) the best by the first metric's goal.
func selectMeasurement(srch *hpo.Searcher, ms []*trainingv1.Measurement, metric string, sel trainingv1.StudySpec_MeasurementSelectionType) *trainingv1.Measurement {
	var pick *trainingv1.Measurement
	var pv float64
	for _, m := range ms {
		v, ok := metricValue(m, metric)
		if !ok {
			continue
		}
		if pick == nil || sel != trainingv1.StudySpec_BEST_MEASUREMENT || srch.Better(v, pv) {
			pick, pv = m, v
		}
	}
	return pick
}

// metricValue is m's value of metric when it has a finite one. ±Inf is
// stored with the job's series (a loss that blew up is worth seeing) but
// is no measurement to judge a trial by, as the search (libs/hpo) judges
// only finite values: a trial's final measurement is its last (or best)
// finite one, and one with none is INFEASIBLE.
func metricValue(m *trainingv1.Measurement, metric string) (float64, bool) {
	for _, x := range m.GetMetrics() {
		if v := x.GetValue(); x.GetMetricId() == metric && !math.IsInf(v, 0) && !math.IsNaN(v) {
			return v, true
		}
	}
	return 0, false
}

// cancelTuning makes a tuning job end CANCELLED by by once its trials
// stopped.
func cancelTuning(now time.Time, t *Tuning, r *Root, reason string, by Canceller, em *emitter) {
	// An ending already decided stands: a cancel while the job drains
	// towards FAILED (max_failed_trial_count, a failed search) would
	// otherwise replace why it failed with "cancelled".
	if JobEnded(t.Job.GetState()) || t.Ending != trainingv1.JobState_JOB_STATE_UNSPECIFIED {
		return
	}
	t.Ending = trainingv1.JobState_JOB_STATE_CANCELLED
	t.EndError = &trainingv1.Status{Code: codeCancelled, Message: reason}
	t.EndBy = by
	t.Job.State = trainingv1.JobState_JOB_STATE_CANCELLING
}

// metrics turns a trial's reported points into measurements (one per step:
// a step reported again, by a run resumed from a checkpoint, replaces the
// earlier one) and asks the search whether to stop the trial early. A
// node's points whose run the job's events have not named yet (no
// placement known, a later attempt, an earlier one on other nodes) are
// held (holdMetrics) until one does (jobChanged).
func (s *State) metrics(now time.Time, ev *eventsv1.MetricsReported, signer string) (*Change, error) {
	r := s.Lookup("job:" + ev.GetJob())
	if r == nil || r.Tuning == nil {
		return nil, nil
	}
	return s.change(now, r.Name, func(r *Root, em *emitter) error {
		cj := r.cjRunning(ev.GetJob())
		if cj == nil || cj.TrialID == "" {
			return nil
		}
		node, fromNode := strings.CutPrefix(signer, "nodes/")
		hold := false
		if fromNode {
			// A node reports only for a run it holds: one of this run's
			// nodes, or (held) one whose run is not named yet.
			switch {
			case len(cj.Nodes) > 0 && ev.GetAttempt() <= cj.Attempt && runsOn(cj.Job.GetCluster(), cj.Nodes, node):
			case len(cj.Nodes) > 0 && ev.GetAttempt() == cj.Attempt:
				return dropped(DroppedNotPlaced, "metrics for %s of attempt %d from %s, which does not run it", ev.GetJob(), ev.GetAttempt(), signer)
			case !inCluster(cj.Job.GetCluster(), node):
				return dropped(DroppedOtherCluster, "metrics for %s from %s, not a node of its cluster %s", ev.GetJob(), signer, cj.Job.GetCluster())
			default:
				hold = true
			}
		}
		// Metrics after the trial was judged change nothing: its final
		// measurement and state stand (a redelivery, or a late point).
		tr := r.trial(cj.TrialID)
		if tr == nil || !trialActive(tr) {
			return nil
		}
		in := pointMeasurements(ev.GetPoints(), tr.GetStartTime(), studyMetrics(r.Tuning.Job))
		if hold {
			return holdMetrics(r, cj, ev.GetAttempt(), node, in, em)
		}
		addTrialMeasurements(now, r, cj.TrialID, in, em)
		return nil
	})
}

// studyMetrics are the ids of job's study's metrics.
func studyMetrics(job *trainingv1.HyperparameterTuningJob) []string {
	var out []string
	for _, sm := range job.GetStudySpec().GetMetrics() {
		out = append(out, sm.GetMetricId())
	}
	return out
}

// addTrialMeasurements merges in (in step order) into trial id's
// measurements, thinned to MaxMeasurements, and asks the search whether to
// stop it early. A trial already judged is left as it is.
func addTrialMeasurements(now time.Time, r *Root, id string, in []*trainingv1.Measurement, em *emitter) {
	job := r.Tuning.Job
	if t := r.trial(id); len(in) == 0 || t == nil || !trialActive(t) {
		return
	}
	tr, cj := r.edit(id)
	tr.Measurements = thinKept(job, addMeasurements(tr.Measurements, in, studyMetrics(job)), MaxMeasurements)
	// A finalizing trial (its job ended) is not stopped early: its
	// measurements are final. Nor is one whose job is being stopped
	// already (its owner cancelled it): its end is that cancel's, which
	// finishTrial must not read as the search's stop (an early-stopped
	// trial's CANCELLED job is no failure, and one that came too late is
	// rewritten SUCCEEDED: completeCJ).
	if cj == nil || tr.GetState() != trainingv1.Trial_ACTIVE || r.Tuning.Ending != 0 || !stoppable(cj) {
		return
	}
	srch, err := searcher(job)
	if err != nil {
		return
	}
	if stop, why := shouldStop(srch, job.GetTrials(), slices.Index(job.GetTrials(), tr)); stop {
		tr.State, tr.EarlyStopped = trainingv1.Trial_STOPPING, true
		stopCJ(now, cj, "stopped early by the search: "+why, Canceller{}, em)
	}
}

// holdMetrics keeps a node's measurements of run attempt of cj's job,
// read before the job's event that names that run, in cj.PendingMetrics:
// a node of the job's cluster only (inCluster), while the job has not
// ended, within MaxPendingMetricRuns groups and MaxPendingMeasurements
// measurements in all. The hold is shared by node (a node of the cluster
// that is not the run's must not fill it and so starve the run's nodes):
// past the groups, the attempt farthest from the job's current one of the
// node that holds the most groups makes room, as long as it holds more
// than the sender will; past the measurements, the node that holds the
// most (the sender on a tie) gives room: its largest group's older ones
// thinned (once, to about half), or, when its groups hold at most 2 each,
// its farthest attempt evicted. Only when every node holds at most 2
// (more nodes hold than the bounds are for) is a record refused
// (DroppedHeldFull), as is one whose own group would be evicted. The
// records of a group evicted are counted (DroppedEvicted).
func holdMetrics(r *Root, cj *CJ, attempt int32, node string, in []*trainingv1.Measurement, em *emitter) error {
	if len(in) == 0 {
		return nil
	}
	if JobEnded(cj.Job.GetState()) {
		return dropped(DroppedJobEnded, "metrics for %s of attempt %d from nodes/%s after its job ended: none of its runs was named on that node",
			cj.Job.GetJob(), attempt, node)
	}
	job := r.Tuning.Job
	// Planned on a copy (each group's measurements copied before they are
	// thinned): a refusal leaves cj as it was.
	held := slices.Clone(cj.PendingMetrics)
	evicted := 0
	i := slices.IndexFunc(held, func(p PendingMetrics) bool { return p.Attempt == attempt && p.Node == node })
	if i < 0 {
		if len(held) >= MaxPendingMetricRuns {
			one := func(PendingMetrics) int { return 1 }
			v := mostHeld(held, node, one)
			if v == "" || heldBy(held, v, one) <= heldBy(held, node, one)+1 {
				return dropped(DroppedHeldFull, "metrics for %s from nodes/%s held until its run is named: %d attempts of nodes already are (at most %d), none of a node holding more than it",
					cj.Job.GetJob(), node, len(held), MaxPendingMetricRuns)
			}
			// v's attempt the least likely to be named soon makes room.
			k := farthestAttempt(held, v, cj.Attempt)
			evicted += held[k].Records
			held = slices.Delete(held, k, k+1)
		}
		held = append(held, PendingMetrics{Attempt: attempt, Node: node})
		i = len(held) - 1
	}
	held[i].Measurements = addMeasurements(held[i].Measurements, in, studyMetrics(job))
	held[i].Records++
	size := func(p PendingMetrics) int { return len(p.Measurements) }
	for {
		total := 0
		for _, p := range held {
			total += len(p.Measurements)
		}
		if total <= MaxPendingMeasurements {
			break
		}
		v := mostHeld(held, node, size)
		if v == "" || heldBy(held, v, size) <= heldBy(held, node, size) {
			v = node
		}
		// v's largest group is thinned once (to about half) while it can
		// be; a node whose groups hold at most 2 each loses its attempt
		// farthest from the job's current one, if it holds more than 2.
		k := -1
		for j, p := range held {
			if p.Node == v && (k < 0 || len(p.Measurements) > len(held[k].Measurements)) {
				k = j
			}
		}
		if n := len(held[k].Measurements); n > 2 {
			held[k].Measurements = thinKept(job, slices.Clone(held[k].Measurements), n-1)
			continue
		}
		if heldBy(held, v, size) > 2 {
			k = farthestAttempt(held, v, cj.Attempt)
		}
		if heldBy(held, v, size) <= 2 || k == i {
			return dropped(DroppedHeldFull, "metrics for %s from nodes/%s held until its run is named: %d measurements already are (at most %d), none of a node holding more than its share",
				cj.Job.GetJob(), node, total-len(held[i].Measurements), MaxPendingMeasurements)
		}
		evicted += held[k].Records
		held = slices.Delete(held, k, k+1)
		if k < i {
			i--
		}
	}
	_, cj = r.edit(cj.TrialID)
	cj.PendingMetrics = held
	em.drop(DroppedEvicted, evicted)
	return nil
}

// heldBy is what node holds in held, each group counting size.
func heldBy(held []PendingMetrics, node string, size func(PendingMetrics) int) int {
	n := 0
	for _, p := range held {
		if p.Node == node {
			n += size(p)
		}
	}
	return n
}

// mostHeld is the node other than but that holds the most in held (each
// group counting size), the first to hold it on a tie; "" when none.
func mostHeld(held []PendingMetrics, but string, size func(PendingMetrics) int) string {
	by := make(map[string]int, len(held))
	for _, p := range held {
		by[p.Node] += size(p)
	}
	best := ""
	for _, p := range held {
		if p.Node != but && (best == "" || by[p.Node] > by[best]) {
			best = p.Node
		}
	}
	return best
}

// farthestAttempt is the index in held of node's group whose attempt is
// the farthest from the job's current one (the later on a tie): the least
// likely to be named soon.
func farthestAttempt(held []PendingMetrics, node string, current int32) int {
	k := -1
	for j, p := range held {
		if p.Node != node {
			continue
		}
		if k < 0 || dist(p.Attempt, current) > dist(held[k].Attempt, current) ||
			(dist(p.Attempt, current) == dist(held[k].Attempt, current) && p.Attempt > held[k].Attempt) {
			k = j
		}
	}
	return k
}

// takePendingMetrics takes from cj.PendingMetrics the measurements of the
// runs the job's event ev names (the event's attempt on its nodes, and
// each run it lists): those of a node of the run are returned, to join
// the trial's (addTrialMeasurements); those of a node that did not run it
// are dropped (counted, DroppedNotRun); the rest (a run not named yet) stay.
func takePendingMetrics(cj *CJ, ev *eventsv1.JobChanged, em *emitter) [][]*trainingv1.Measurement {
	if len(cj.PendingMetrics) == 0 {
		return nil
	}
	var keep []PendingMetrics
	var out [][]*trainingv1.Measurement
	for _, p := range cj.PendingMetrics {
		nodes, known := runNodes(ev, p.Attempt)
		switch {
		case !known:
			keep = append(keep, p)
		case runsOn(cj.Job.GetCluster(), nodes, p.Node):
			out = append(out, p.Measurements)
		default:
			em.drop(DroppedNotRun, p.Records)
		}
	}
	cj.PendingMetrics = keep
	return out
}

// runNodes are the nodes the job's event ev names for run attempt: the
// event's own attempt's, or those of a run it lists (a job's final event
// lists them all); known false when it names none.
func runNodes(ev *eventsv1.JobChanged, attempt int32) ([]string, bool) {
	j := ev.GetJob()
	if attempt == ev.GetAttempt() && len(j.GetNodes()) > 0 {
		return j.GetNodes(), true
	}
	for _, run := range j.GetRuns() {
		if run.GetAttempt() == attempt && len(run.GetNodes()) > 0 {
			return run.GetNodes(), true
		}
	}
	return nil, false
}

// addPoints returns ms (measurements in step order, one per step) with
// points added (addMeasurements of pointMeasurements). ms is not changed.
func addPoints(ms []*trainingv1.Measurement, points []*eventsv1.MetricsReported_Point, start *timestamppb.Timestamp,
	studyMetrics []string) []*trainingv1.Measurement {
	return addMeasurements(ms, pointMeasurements(points, start, studyMetrics), studyMetrics)
}

// pointMeasurements makes each point a measurement: its kept metrics
// (keptMetrics), its time since start; in the points' order.
func pointMeasurements(points []*eventsv1.MetricsReported_Point, start *timestamppb.Timestamp, studyMetrics []string) []*trainingv1.Measurement {
	in := make([]*trainingv1.Measurement, 0, len(points))
	for _, p := range points {
		m := &trainingv1.Measurement{StepCount: p.GetStep()}
		for _, k := range keptMetrics(p.GetValues(), studyMetrics) {
			m.Metrics = append(m.Metrics, &trainingv1.Measurement_Metric{MetricId: k, Value: p.GetValues()[k]})
		}
		if p.GetTime() != nil && start != nil {
			if d := p.GetTime().AsTime().Sub(start.AsTime()); d > 0 {
				m.ElapsedDuration = durationpb.New(d)
			}
		}
		in = append(in, m)
	}
	return in
}

// addMeasurements returns ms (measurements in step order, one per step)
// with in added: one of a step already there merged into it
// (mergeMeasurement), those of one step in the order they came. It is what
// inserting them one by one gives, but sorts them first and merges the two
// sorted lists in one pass: one insert at a time moved every later
// measurement, so a record of many points in descending step order cost
// points × measurements. ms is not changed, nor is in's order.
func addMeasurements(ms, in []*trainingv1.Measurement, studyMetrics []string) []*trainingv1.Measurement {
	if len(in) == 0 {
		return ms
	}
	in = slices.Clone(in)
	sort.SliceStable(in, func(i, j int) bool { return in[i].GetStepCount() < in[j].GetStepCount() })
	out := make([]*trainingv1.Measurement, 0, len(ms)+len(in))
	i := 0
	for j := 0; j < len(in); {
		step := in[j].GetStepCount()
		for i < len(ms) && ms[i].GetStepCount() < step {
			out = append(out, ms[i])
			i++
		}
		var m *trainingv1.Measurement
		if i < len(ms) && ms[i].GetStepCount() == step {
			m = mergeMeasurement(ms[i], in[j], studyMetrics)
			i++
		} else {
			m = in[j]
		}
		for j++; j < len(in) && in[j].GetStepCount() == step; j++ {
			m = mergeMeasurement(m, in[j], studyMetrics)
		}
		out = append(out, m)
	}
	return append(out, ms[i:]...)
}

// mergeMeasurement merges m into old, both of one step: m's values replace
// old's of the same metric (a run resumed from a checkpoint reports the step
// again) and old's other metrics stay, since one step's values come in
// several events (the hypertune lines and the TensorBoard scalars are
// tailed apart). The result is in metric id order, at most
// MaxMeasurementMetrics of them (keptMetrics).
func mergeMeasurement(old, m *trainingv1.Measurement, studyMetrics []string) *trainingv1.Measurement {
	vals := make(map[string]float64, len(old.GetMetrics())+len(m.GetMetrics()))
	for _, x := range old.GetMetrics() {
		vals[x.GetMetricId()] = x.GetValue()
	}
	for _, x := range m.GetMetrics() {
		vals[x.GetMetricId()] = x.GetValue()
	}
	out := &trainingv1.Measurement{StepCount: m.GetStepCount(), ElapsedDuration: m.GetElapsedDuration()}
	if out.ElapsedDuration == nil {
		out.ElapsedDuration = old.GetElapsedDuration()
	}
	for _, k := range keptMetrics(vals, studyMetrics) {
		out.Metrics = append(out.Metrics, &trainingv1.Measurement_Metric{MetricId: k, Value: vals[k]})
	}
	return out
}

// keptMetrics are the ids of vals a measurement keeps, in id order: the
// study's metrics (studyMetrics), then the others of at most
// MaxMetricIDBytes in id order, MaxMeasurementMetrics in all.
func keptMetrics(vals map[string]float64, studyMetrics []string) []string {
	keep := make(map[string]bool, min(len(vals), MaxMeasurementMetrics))
	for _, k := range studyMetrics {
		if _, ok := vals[k]; ok && len(keep) < MaxMeasurementMetrics {
			keep[k] = true
		}
	}
	for _, k := range sortedKeys(vals) {
		if len(keep) >= MaxMeasurementMetrics {
			break
		}
		if len(k) <= MaxMetricIDBytes {
			keep[k] = true
		}
	}
	return sortedKeys(keep)
}

// runsOn reports whether node (the signer's full node name,
// "projects/p/clusters/c/nodes/h") is one of a run's nodes on cluster:
// nodes are full names or hostnames of cluster's. A hostname alone is not
// enough: "a3-0001" is a host of many clusters, in many projects.
func runsOn(cluster string, nodes []string, node string) bool {
	host, inCluster := strings.CutPrefix(node, cluster+"/nodes/")
	for _, x := range nodes {
		if x == node || (cluster != "" && inCluster && !strings.Contains(x, "/") && x == host) {
			return true
		}
	}
	return false
}

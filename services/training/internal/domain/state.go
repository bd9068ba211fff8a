// Package domain is the training service's pure core: CustomJobs,
// hyperparameter tuning jobs (their studies and trials) and training
// pipelines as state machines. Events come in (training commands, cluster,
// job, metrics and model events, a clock tick), the next state and the
// commands and events to emit come out. It does no I/O and reads no clock:
// the time is passed in, and the search (libs/hpo) is a pure function of
// the stored trials, so replaying after a restart decides the same.
package domain

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/errs"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// CJ is a CustomJob with what the service tracks beyond the resource.
type CJ struct {
	Job *trainingv1.CustomJob
	// TrialID is the trial it runs ("" when not a trial).
	TrialID string
	// Ephemeral: it runs on its own cluster, created for it and deleted
	// when it ends.
	Ephemeral bool
	// Submitted: its SubmitJob was emitted.
	Submitted bool
	// ClusterDeleted: its DeleteCluster was emitted.
	ClusterDeleted bool
	// CancelSent: its CancelJob was emitted.
	CancelSent bool
	// Stop is why the service stops it ("" when it does not): a user's
	// cancel, the search's early stop, the parent ending.
	Stop string
	// Nodes are the scheduler's nodes of its run (hostnames), and Attempt
	// the run's number: a node's metrics are taken only from these.
	Nodes   []string
	Attempt int32
	// StepsEnded are the nodes (as their StepChanged names them) whose
	// step of run Attempt ended, as seen on the step topic. An agent sends
	// a step's last metrics before its end, on the same topic and key, so
	// a node here has had every metric point of the run read: a trial
	// waits for all of its nodes before its measurements are final.
	StepsEnded []string
	// StepsExited are the nodes of StepsEnded whose program exited by
	// itself with code 0 (STEP_EXITED, no signal): a run all of whose
	// nodes are here ran to its end, even when a cancel that came after
	// made its job CANCELLED, so a trial the search stopped too late is
	// not shown stopped early (finishTrial).
	StepsExited []string
	// PendingStepEnds are step ends read before the job's event that names
	// their run (its attempt, with its nodes): the step topic and the job
	// topic are not ordered with each other, so a short run's, or a
	// requeued attempt's, end can come first. They count (StepsEnded) once
	// that event comes; at most MaxHeldStepEnds, shared by node
	// (holdStepEnd), dropped when the job ends.
	PendingStepEnds []StepEnd
	// PendingMetrics are a trial's metric points a node sent before the
	// job's event that names the node's run (its attempt, with its nodes):
	// a short run's (one scheduler pass took it from PENDING to
	// COMPLETED), a requeued attempt's, or any read from the backlog after
	// a restart. They join the trial's measurements once that event shows
	// the node ran that attempt, and are dropped if it shows it did not;
	// at most MaxPendingMetricRuns (attempt, node) groups of
	// MaxPendingMeasurements measurements in all, shared by node
	// (holdMetrics), dropped when the job ends.
	PendingMetrics []PendingMetrics
	// RetryAt is when its ephemeral cluster is asked for again after the
	// provisioner refused it for capacity or quota (zero: no retry due);
	// Refused is that refusal, kept for the error should the wait end.
	RetryAt time.Time
	Refused string
	// LogDir is where its output goes when it would otherwise be deleted
	// with its ephemeral cluster (its root's, taken when it was made).
	LogDir LogDir
}

// LogDir is where the replicas' output of a root's CustomJobs goes when it
// would otherwise be deleted with their ephemeral cluster (no local
// base_output_directory): Dir, the owner's own directory under the
// service's log directory (<log dir>/<project>/<user>), which the app made
// for the owner (osuser.MakeDirFor) before the create was decided, so that
// it exists before any of the root's jobs is submitted (and made again
// before each submit, should it be gone: Change.LogDirSubmits). When the
// service has a log directory but could not make the owner's there, Dir
// is "" and Why says why (stored for operators, never answered: it names
// host paths and uids; logDirUnmade): the output then goes to the
// cluster's shared directory as before, and the CustomJob says so
// (output_warning). The zero value: the service keeps no log directory. It is recorded with the root and its
// CustomJobs, so that a restart with another -log-dir changes nothing of
// what was decided.
type LogDir struct {
	Dir, Why string
}

// StepEnd is a node's step end of run Attempt (CJ.PendingStepEnds).
type StepEnd struct {
	Attempt int32
	Node    string
	// Exited: the node's program exited by itself with code 0
	// (CJ.StepsExited).
	Exited bool
}

// MaxPendingStepEnds is as many nodes as a CustomJob may have (4 pools
// of at most 64 replicas).
const MaxPendingStepEnds = 256

// MaxHeldStepEnds bounds CJ.PendingStepEnds: ends of twice as many nodes
// as a run may have, shared by node (holdStepEnd).
const MaxHeldStepEnds = 2 * MaxPendingStepEnds

// PendingMetrics are one node's metric points of run Attempt, read before
// the job's event that names the run (CJ.PendingMetrics), as measurements
// (one per step, in step order, their metrics kept as a trial's are).
type PendingMetrics struct {
	Attempt      int32
	Node         string
	Measurements []*trainingv1.Measurement
	// Records is how many records (MetricsReported) were merged into
	// Measurements: what a drop of the group counts (Change.Dropped).
	Records int
}

// Why a node's metric records of a trial count for nothing, the reason of
// loom_training_trial_metrics_refused_total (besides the app's "rate"):
// a record the hold had no room for (refused); records held until their
// run was named and then dropped, because the run turned out to be on
// other nodes, the job ended first (or a record came for an unnamed run
// after it ended: refused), or another node's needed the room; a record
// refused at once because its run is named and the node is not one of
// its nodes (not-placed, as the series' refusal), or because the node is
// not of the job's cluster (other-cluster).
const (
	DroppedHeldFull     = "held-full"
	DroppedNotRun       = "not-run"
	DroppedJobEnded     = "job-ended"
	DroppedEvicted      = "evicted"
	DroppedNotPlaced    = "not-placed"
	DroppedOtherCluster = "other-cluster"
)

// DropReasons are the reasons a change or a refusal reports (Dropped,
// DroppedBy), in the order to export them.
var DropReasons = []string{DroppedHeldFull, DroppedNotRun, DroppedJobEnded, DroppedEvicted, DroppedNotPlaced, DroppedOtherCluster}

// dropReason is the reason a refusal carries among its causes (dropped).
type dropReason string

func (d dropReason) Error() string { return string(d) }

// dropped is ignored(format, args...) carrying reason, for DroppedBy.
func dropped(reason string, format string, args ...any) error {
	e := ignored(format, args...).(*ignoredError)
	e.causes = append(e.causes, dropReason(reason))
	return e
}

// DroppedBy is the reason (one of DropReasons) a refusal of a trial's
// metric record carries; false when err carries none.
func DroppedBy(err error) (string, bool) {
	var d dropReason
	if errors.As(err, &d) {
		return string(d), true
	}
	return "", false
}

// Bounds of CJ.PendingMetrics: groups for twice as many nodes as a run
// may have (MaxPendingStepEnds), and 2 measurements for each. They are
// shared by node: past them, room is made from the node holding the most
// (an attempt evicted, a group's older ones thinned; holdMetrics). Until
// the run's event is read its nodes cannot be told from the cluster's
// other nodes, so the bound is on the nodes that hold: while at most
// MaxPendingMetricRuns do (the run's among them: at least
// MaxPendingStepEnds strangers whatever the job's worker count), a node
// that holds at most one attempt, as a run's nodes do before its event,
// never has a record refused nor its group evicted: its measurements are
// thinned only while it holds the most, never below its last 2 (all of
// them are kept while it holds no more than 2, or than its share).
const (
	MaxPendingMetricRuns   = 2 * MaxPendingStepEnds
	MaxPendingMeasurements = 2 * MaxPendingMetricRuns
)

// Tuning is a hyperparameter tuning job with its trials (with their
// intermediate measurements).
type Tuning struct {
	Job *trainingv1.HyperparameterTuningJob
	// Ending is the state the job ends in once its active trials have
	// stopped (FAILED or CANCELLED), with EndError; 0 while it runs.
	Ending   trainingv1.JobState
	EndError *trainingv1.Status
	// EndBy is who cancelled it (Ending CANCELLED): its trials' jobs are
	// cancelled as them. The zero value when the service ends it.
	EndBy Canceller
}

// Pipeline is a training pipeline.
type Pipeline struct {
	P *trainingv1.TrainingPipeline
	// Reserved is the block of job ids the gateway reserved from its id.
	Reserved int64
	// Child is its CustomJob's or tuning job's name.
	Child string
	// RequestID is its UploadModel's request id, once sent.
	RequestID string
	// Cancelling: a cancel was asked.
	Cancelling bool
}

// Root is one top-level resource as created by a command, with everything
// it owns: a CustomJob; a tuning job with its trials' CustomJobs; a
// pipeline with its CustomJob or its tuning job and trials. It is the unit
// of storage: every event changes at most one root.
//
// A root in State never changes: a change works on a copy (derive) and
// replaces the root once stored. That copy shares the study's trials and
// their CustomJobs with the root it came from until it changes one (edit),
// so that an event costs what it touched, not the study's size.
type Root struct {
	Name     string
	CJs      []*CJ
	Tuning   *Tuning
	Pipeline *Pipeline
	// LogDir is where its CustomJobs' output goes (CJ.LogDir), decided
	// when it was created: a tuning job's later trials take it too.
	LogDir LogDir
	// copied is nil on a root that owns all it holds (made by a command,
	// loaded, or Clone). On a root derive made, it holds the ids of the
	// trials the root owns: copied by edit, or added. Its other trials and
	// their CustomJobs are the objects of the root it was derived from,
	// which must stay as they are: they are only read.
	copied map[string]bool
}

// Clone returns a deep copy of r, which owns all it holds.
func (r *Root) Clone() *Root {
	c := &Root{Name: r.Name, LogDir: r.LogDir}
	for _, j := range r.CJs {
		c.CJs = append(c.CJs, cloneCJ(j))
	}
	var job *trainingv1.HyperparameterTuningJob
	if r.Tuning != nil {
		job = proto.Clone(r.Tuning.Job).(*trainingv1.HyperparameterTuningJob)
	}
	r.copyRest(c, job)
	return c
}

// copyRest gives c a copy of r's tuning, with job as its job, and of r's
// pipeline.
func (r *Root) copyRest(c *Root, job *trainingv1.HyperparameterTuningJob) {
	if r.Tuning != nil {
		t := *r.Tuning
		t.Job = job
		if t.EndError != nil {
			t.EndError = proto.Clone(t.EndError).(*trainingv1.Status)
		}
		c.Tuning = &t
	}
	if r.Pipeline != nil {
		p := *r.Pipeline
		p.P = proto.Clone(r.Pipeline.P).(*trainingv1.TrainingPipeline)
		c.Pipeline = &p
	}
}

// cloneCJ returns a deep copy of j.
func cloneCJ(j *CJ) *CJ {
	c := *j
	c.Job = proto.Clone(j.Job).(*trainingv1.CustomJob)
	c.Nodes = append([]string(nil), j.Nodes...)
	c.StepsEnded = append([]string(nil), j.StepsEnded...)
	c.StepsExited = append([]string(nil), j.StepsExited...)
	c.PendingStepEnds = append([]StepEnd(nil), j.PendingStepEnds...)
	c.PendingMetrics = nil
	for _, p := range j.PendingMetrics {
		c.PendingMetrics = append(c.PendingMetrics, PendingMetrics{Attempt: p.Attempt, Node: p.Node, Records: p.Records,
			Measurements: append([]*trainingv1.Measurement(nil), p.Measurements...)})
	}
	return &c
}

// derive returns a copy of r for a change to work on: like Clone, except
// that the trials and the trials' CustomJobs (a study's bulk: up to
// MaxTrialCount trials of MaxMeasurements each) are r's own objects until
// edit copies them. r must not change while the copy lives.
func (r *Root) derive() *Root {
	c := &Root{Name: r.Name, LogDir: r.LogDir, copied: map[string]bool{}}
	for _, j := range r.CJs {
		if j.TrialID == "" {
			j = cloneCJ(j)
		}
		c.CJs = append(c.CJs, j)
	}
	var job *trainingv1.HyperparameterTuningJob
	if r.Tuning != nil {
		job = WithoutTrials(r.Tuning.Job)
		job.Trials = slices.Clone(r.Tuning.Job.GetTrials())
	}
	r.copyRest(c, job)
	return c
}

// shared reports whether r holds trial id's Trial and CustomJob as the
// root it was derived from does (the same objects: not to be changed, and
// unchanged). An own CustomJob (trialID "") is never shared.
func (r *Root) shared(trialID string) bool {
	return r.copied != nil && trialID != "" && !r.copied[trialID]
}

// edit returns trial id's Trial and CustomJob (nil when r has none) for a
// change to modify, copying them into r first when r shares them with the
// root it was derived from. Every change to a trial or to a trial's
// CustomJob goes through edit (or editCJ), so that none reaches that root.
func (r *Root) edit(id string) (*trainingv1.Trial, *CJ) {
	var tr *trainingv1.Trial
	ti := -1
	if r.Tuning != nil {
		for i, x := range r.Tuning.Job.GetTrials() {
			if x.GetId() == id {
				tr, ti = x, i
				break
			}
		}
	}
	var cj *CJ
	ci := -1
	for i, j := range r.CJs {
		if j.TrialID == id {
			cj, ci = j, i
			break
		}
	}
	if !r.shared(id) {
		return tr, cj
	}
	r.copied[id] = true
	if tr != nil {
		tr = proto.Clone(tr).(*trainingv1.Trial)
		r.Tuning.Job.Trials[ti] = tr
	}
	if cj != nil {
		cj = cloneCJ(cj)
		r.CJs[ci] = cj
	}
	return tr, cj
}

// editCJ is edit for a CustomJob of r: cj itself when r owns it, else
// r's copy of it (with its trial's).
func (r *Root) editCJ(cj *CJ) *CJ {
	if !r.shared(cj.TrialID) {
		return cj
	}
	_, c := r.edit(cj.TrialID)
	return c
}

// added records that r owns trial id, new in it.
func (r *Root) added(id string) {
	if r.copied != nil {
		r.copied[id] = true
	}
}

// cj returns r's CustomJob named name.
func (r *Root) cj(name string) *CJ {
	for _, j := range r.CJs {
		if j.Job.GetName() == name {
			return j
		}
	}
	return nil
}

// trial returns r's trial id (nil when r has none).
func (r *Root) trial(id string) *trainingv1.Trial {
	if r.Tuning == nil {
		return nil
	}
	for _, t := range r.Tuning.Job.GetTrials() {
		if t.GetId() == id {
			return t
		}
	}
	return nil
}

// cjRunning returns r's CustomJob whose scheduler job is job
// ("projects/{p}/jobs/{id}"; runsJob), the last when several are, nil
// when none is.
func (r *Root) cjRunning(job string) *CJ {
	var cur *CJ
	for _, j := range r.CJs {
		if runsJob(j, job) {
			cur = j
		}
	}
	return cur
}

// Owner is r's owner.
func (r *Root) Owner() string {
	switch {
	case r.Pipeline != nil:
		return r.Pipeline.P.GetUser()
	case r.Tuning != nil:
		return r.Tuning.Job.GetUser()
	case len(r.CJs) > 0:
		return r.CJs[0].Job.GetUser()
	}
	return ""
}

// Ended reports whether r's top-level resource has ended.
func (r *Root) Ended() bool {
	switch {
	case r.Pipeline != nil:
		return pipelineEnded(r.Pipeline.P.GetState())
	case r.Tuning != nil:
		return JobEnded(r.Tuning.Job.GetState())
	case len(r.CJs) > 0:
		return JobEnded(r.CJs[0].Job.GetState())
	}
	return true
}

// JobEnded reports whether s is a final JobState.
func JobEnded(s trainingv1.JobState) bool {
	switch s {
	case trainingv1.JobState_JOB_STATE_SUCCEEDED, trainingv1.JobState_JOB_STATE_FAILED,
		trainingv1.JobState_JOB_STATE_CANCELLED, trainingv1.JobState_JOB_STATE_EXPIRED,
		trainingv1.JobState_JOB_STATE_PARTIALLY_SUCCEEDED:
		return true
	}
	return false
}

func pipelineEnded(s trainingv1.PipelineState) bool {
	switch s {
	case trainingv1.PipelineState_PIPELINE_STATE_SUCCEEDED, trainingv1.PipelineState_PIPELINE_STATE_FAILED,
		trainingv1.PipelineState_PIPELINE_STATE_CANCELLED:
		return true
	}
	return false
}

// State is everything the service knows, with indexes from the names
// other services' events carry to the root they concern.
type State struct {
	Roots map[string]*Root
	// index maps every CustomJob, tuning job and pipeline name, scheduler
	// job name, ephemeral cluster name and upload request id to its root.
	index map[string]string
	// MetricGrace is how long a trial whose CustomJob succeeded waits for
	// its metric's measurements before it is judged INFEASIBLE (0:
	// DefaultMetricGrace). Job and metrics events come on different topics,
	// unordered with each other: a job's end can be seen before the last
	// metrics its program reported.
	MetricGrace time.Duration
}

// metricGrace is s.MetricGrace, DefaultMetricGrace when unset.
func (s *State) metricGrace() time.Duration {
	if s.MetricGrace > 0 {
		return s.MetricGrace
	}
	return DefaultMetricGrace
}

// NewState returns a state of roots.
func NewState(roots ...*Root) *State {
	s := &State{Roots: map[string]*Root{}, index: map[string]string{}}
	for _, r := range roots {
		s.put(r)
	}
	return s
}

// keys are the index entries of r; with trials not nil, of the trials'
// CustomJobs only those of the trial ids in trials.
func keys(r *Root, trials map[string]bool) []string {
	k := []string{r.Name}
	for _, j := range r.CJs {
		if trials != nil && j.TrialID != "" && !trials[j.TrialID] {
			continue
		}
		k = append(k, j.Job.GetName())
		if n, err := ParseName(j.Job.GetName(), CustomJobs); err == nil {
			k = append(k, "job:"+n.Job(), "cluster:"+j.Job.GetCluster())
		}
	}
	if r.Tuning != nil {
		k = append(k, r.Tuning.Job.GetName())
	}
	if r.Pipeline != nil && r.Pipeline.RequestID != "" {
		k = append(k, "upload:"+r.Pipeline.RequestID)
	}
	return k
}

func (s *State) put(r *Root) {
	if old, ok := s.Roots[r.Name]; ok {
		for _, k := range keys(old, nil) {
			delete(s.index, k)
		}
	}
	s.Roots[r.Name] = r
	for _, k := range keys(r, nil) {
		s.index[k] = r.Name
	}
}

// replace is put for c.After, derived from c.Before, the root in s: of
// the trials' CustomJobs it indexes only those of c.Trials, since After
// holds the others as Before does, with the entries they have. It reports
// false, changing nothing, when Before's entries are not all After's,
// for put to remove what is gone (never so far: a CustomJob's names stay
// as they were made).
func (s *State) replace(c *Change) bool {
	trials := make(map[string]bool, len(c.Trials))
	for _, id := range c.Trials {
		trials[id] = true
	}
	now := keys(c.After, trials)
	held := make(map[string]bool, len(now))
	for _, k := range now {
		held[k] = true
	}
	for _, k := range keys(c.Before, trials) {
		if !held[k] {
			return false
		}
	}
	s.Roots[c.Root] = c.After
	for _, k := range now {
		s.index[k] = c.Root
	}
	return true
}

func (s *State) del(name string) {
	if old, ok := s.Roots[name]; ok {
		for _, k := range keys(old, nil) {
			delete(s.index, k)
		}
		delete(s.Roots, name)
	}
}

// Lookup returns the root holding the resource or index key name.
func (s *State) Lookup(name string) *Root {
	if rn, ok := s.index[name]; ok {
		return s.Roots[rn]
	}
	return nil
}

// JobRunning reports whether scheduler job job ("projects/{p}/jobs/{id}")
// is a CustomJob's (a trial's, a pipeline's) that has not ended: its
// output file may still be written to, however long it has been quiet.
func (s *State) JobRunning(job string) bool {
	r := s.Lookup("job:" + job)
	if r == nil {
		return false
	}
	j := r.cjRunning(job)
	return j != nil && !JobEnded(j.Job.GetState())
}

// Emit is a command or event to write: its record key, payload and, for a
// command the scheduler runs as a user, the principal ("users/<owner>").
type Emit struct {
	Key       string
	Payload   proto.Message
	Principal string
}

// Change is what one input does: the root after it (nil: deleted) and what
// to emit. Apply it to the state only once it is stored.
type Change struct {
	Root string
	// Before is the root as it was (nil: new), so that storage writes only
	// what changed (a tuning root's trials); After is it now (nil: deleted).
	Before *Root
	After  *Root
	// Trials, when not nil, are the ids, in id order, of the only trials
	// (each with its CustomJob) that After may hold differently from
	// Before: those the change copied to modify, or added. After holds its
	// other trials as Before does (the same objects), so storage need not
	// look at them. nil: not known (a new root, a Change made otherwise):
	// any trial may differ.
	Trials []string
	Emits  []Emit
	// Dropped counts, by reason (DropReasons), the metric records of
	// trials held until their run was named that the change dropped;
	// nil: none.
	Dropped map[string]int
}

// LogDirSubmits returns the jobs c submits (SubmitJob) whose output goes
// to their root's log directory (Root.LogDir.Dir), for the app to make
// that directory again before they can start, should it be gone: it was
// made at the create, but an operator may have deleted it since (a tuning
// job's later trials, a job that waited for its cluster), and the agent,
// which opens the output file as the owner, cannot make it under the
// service's directories.
func (c *Change) LogDirSubmits() []*loomv1.Job {
	if c.After == nil || c.After.LogDir.Dir == "" {
		return nil
	}
	pattern := outputPattern(c.After.LogDir.Dir)
	var jobs []*loomv1.Job
	for _, e := range c.Emits {
		if s, ok := e.Payload.(*eventsv1.SubmitJob); ok && s.GetJob().GetOutputPattern() == pattern {
			jobs = append(jobs, s.GetJob())
		}
	}
	return jobs
}

// Apply records c in s. Its cost follows what c changed: of a study's
// trials, only those c.Trials names are indexed again.
func (s *State) Apply(c *Change) {
	switch {
	case c.After == nil:
		s.del(c.Root)
	case c.Trials != nil && c.Before != nil && s.Roots[c.Root] == c.Before && s.replace(c):
	default:
		s.put(c.After)
	}
}

// Input is one consumed event as the domain sees it.
type Input struct {
	Payload proto.Message
	// Principal is the authenticated principal a command was made for.
	Principal string
	// Signer is who signed the record ("nodes/<node>" for an agent).
	Signer string
	// LogDir is, for a create, where the new root's CustomJobs' output goes
	// (Root.LogDir): the app makes the owner's directory (CreateOwner)
	// before it hands the create over.
	LogDir LogDir
}

// CreateOwner returns the name, the project and the owner of the root a
// create command makes (a CustomJob, tuning job or pipeline), whose log
// directory the app makes first; ok is false for any other payload, or a
// name that does not parse.
func CreateOwner(payload proto.Message) (name, project, user string, ok bool) {
	var kind string
	switch p := payload.(type) {
	case *eventsv1.CreateCustomJob:
		name, kind, user = p.GetCustomJob().GetName(), CustomJobs, p.GetCustomJob().GetUser()
	case *eventsv1.CreateHyperparameterTuningJob:
		name, kind, user = p.GetTuningJob().GetName(), TuningJobs, p.GetTuningJob().GetUser()
	case *eventsv1.CreateTrainingPipeline:
		name, kind, user = p.GetPipeline().GetName(), Pipelines, p.GetPipeline().GetUser()
	default:
		return "", "", "", false
	}
	n, err := ParseName(name, kind)
	if err != nil || user == "" {
		return "", "", "", false
	}
	return name, n.Project, user, true
}

// ErrIgnored wraps why an input changed nothing that a person may want to
// know about (an unknown name, a refused cancel): the app logs it.
var ErrIgnored = errors.New("ignored")

// ignoredError is a refusal: its message, and ErrIgnored with every error
// among its arguments (errs.NotFound, errs.PermissionDenied, ...) to match.
type ignoredError struct {
	msg    string
	causes []error
}

func (e *ignoredError) Error() string   { return "ignored: " + e.msg }
func (e *ignoredError) Unwrap() []error { return e.causes }

func ignored(format string, args ...any) error {
	e := &ignoredError{msg: fmt.Sprintf(format, args...), causes: []error{ErrIgnored}}
	for _, a := range args {
		if err, ok := a.(error); ok {
			e.causes = append(e.causes, err)
		}
	}
	return e
}

// Handle decides what in does at now. It never changes s: the change is
// applied with Apply once stored. A nil change with a nil error means the
// input does not concern the service; a nil change with an error says why
// a command was refused (errs.NotFound, errs.PermissionDenied, ...,
// wrapped in ErrIgnored).
func (s *State) Handle(now time.Time, in Input) (*Change, error) {
	switch p := in.Payload.(type) {
	case *eventsv1.CreateCustomJob:
		return s.createCustomJob(now, p, in.LogDir)
	case *eventsv1.CreateHyperparameterTuningJob:
		return s.createTuningJob(now, p, in.LogDir)
	case *eventsv1.CreateTrainingPipeline:
		return s.createPipeline(now, p, in.LogDir)
	case *eventsv1.CancelTraining:
		return s.cancel(now, p.GetName(), actor(in.Principal, p.GetUser()), p.GetAdmin())
	case *eventsv1.DeleteTraining:
		return s.delete(p.GetName(), actor(in.Principal, p.GetUser()), p.GetAdmin())
	case *eventsv1.ClusterChanged:
		return s.onCluster(now, p.GetCluster().GetName(), func(r *Root, cj *CJ, em *emitter) {
			clusterChanged(now, r, cj, p, em)
		})
	case *eventsv1.ClusterOperationFailed:
		return s.onCluster(now, p.GetCluster(), func(r *Root, cj *CJ, em *emitter) {
			clusterRefused(now, cj, p, em)
		})
	case *eventsv1.ClusterDeleted:
		return s.onCluster(now, p.GetCluster(), func(r *Root, cj *CJ, em *emitter) {
			cj.ClusterDeleted = true
		})
	case *eventsv1.JobChanged:
		return s.jobChanged(now, p)
	case *eventsv1.MetricsReported:
		return s.metrics(now, p, in.Signer)
	case *eventsv1.StepChanged:
		return s.stepEnded(now, p, in.Signer)
	case *eventsv1.ModelVersionRegistered:
		return s.modelAnswer(now, p.GetRequestId(), p, nil)
	case *eventsv1.ModelUploadFailed:
		return s.modelAnswer(now, p.GetRequestId(), nil, p)
	}
	return nil, nil
}

// actor is who a command acts for: the principal the gateway stamped,
// whatever user the payload names.
func actor(principal, user string) string {
	if u, ok := strings.CutPrefix(principal, "users/"); ok && u != "" {
		return u
	}
	return user
}

// Status codes set in errors (google.rpc.Code values).
const (
	codeCancelled          = 1
	codeInvalidArgument    = 3
	codeDeadlineExceeded   = 4
	codeResourceExhausted  = 8
	codeFailedPrecondition = 9
	codeInternal           = 13
	codeUnavailable        = 14
)

// emitter collects what a change emits.
type emitter struct {
	out     []Emit
	dropped map[string]int
}

// drop counts n held metric records dropped for reason (Change.Dropped).
func (e *emitter) drop(reason string, n int) {
	if n <= 0 {
		return
	}
	if e.dropped == nil {
		e.dropped = map[string]int{}
	}
	e.dropped[reason] += n
}

func (e *emitter) add(key string, p proto.Message, principal string) {
	e.out = append(e.out, Emit{Key: key, Payload: p, Principal: principal})
}

// change runs f on a copy of the root name, advances it, and returns the
// change with the commands f and the advance emitted and the Changed events
// of everything that changed; nil when nothing did. The copy shares the
// root's trials until f or the advance edits them, and the root itself is
// left as it is, whatever f does.
func (s *State) change(now time.Time, name string, f func(r *Root, em *emitter) error) (*Change, error) {
	old := s.Roots[name]
	if old == nil {
		return nil, nil
	}
	r := old.derive()
	em := &emitter{}
	if err := f(r, em); err != nil {
		return nil, err
	}
	advance(now, s.metricGrace(), r, em)
	return finish(now, old, r, em), nil
}

// finish stamps update_time on what changed and adds their Changed events
// after the commands; nil when nothing changed. Of r's trials and trial
// CustomJobs, only those r does not share with old can have changed, and
// only those are compared.
func finish(now time.Time, old, r *Root, em *emitter) *Change {
	ts := timestamppb.New(now)
	var events []Emit
	project := func(name string) string {
		if n, err := ParseName(name, ""); err == nil {
			return "projects/" + n.Project
		}
		return name
	}
	for _, j := range r.CJs {
		if r.shared(j.TrialID) {
			continue
		}
		var prev *trainingv1.CustomJob
		if old != nil {
			if o := old.cj(j.Job.GetName()); o != nil {
				prev = o.Job
			}
		}
		if changed(prev, j.Job, func(m *trainingv1.CustomJob) **timestamppb.Timestamp { return &m.UpdateTime }) {
			j.Job.UpdateTime = ts
			events = append(events, Emit{Key: project(j.Job.GetName()),
				Payload: &eventsv1.CustomJobChanged{CustomJob: proto.Clone(j.Job).(*trainingv1.CustomJob)}})
		}
	}
	if t := r.Tuning; t != nil {
		var prev *trainingv1.HyperparameterTuningJob
		if old != nil && old.Tuning != nil {
			prev = old.Tuning.Job
		}
		prevTrials := map[string]*trainingv1.Trial{}
		for _, tr := range prev.GetTrials() {
			if !r.shared(tr.GetId()) {
				prevTrials[tr.GetId()] = tr
			}
		}
		for _, tr := range t.Job.GetTrials() {
			if !r.shared(tr.GetId()) && !proto.Equal(prevTrials[tr.GetId()], tr) {
				events = append(events, Emit{Key: project(t.Job.GetName()),
					Payload: &eventsv1.TrialChanged{TuningJob: t.Job.GetName(), Trial: proto.Clone(tr).(*trainingv1.Trial)}})
			}
		}
		// Its event carries no measurements: a new measurement is a
		// TrialChanged only.
		if summaryChanged(prev, r) {
			t.Job.UpdateTime = ts
			events = append(events, Emit{Key: project(t.Job.GetName()),
				Payload: &eventsv1.HyperparameterTuningJobChanged{TuningJob: Summary(t.Job)}})
		}
	}
	if p := r.Pipeline; p != nil {
		var prev *trainingv1.TrainingPipeline
		if old != nil && old.Pipeline != nil {
			prev = old.Pipeline.P
		}
		if changed(prev, p.P, func(m *trainingv1.TrainingPipeline) **timestamppb.Timestamp { return &m.UpdateTime }) {
			p.P.UpdateTime = ts
			events = append(events, Emit{Key: project(p.P.GetName()),
				Payload: &eventsv1.TrainingPipelineChanged{Pipeline: proto.Clone(p.P).(*trainingv1.TrainingPipeline)}})
		}
	}
	if old != nil && len(em.out) == 0 && len(events) == 0 && rootEqual(old, r) {
		return nil
	}
	c := &Change{Root: r.Name, Before: old, After: r, Emits: append(em.out, events...), Dropped: em.dropped}
	if r.copied != nil {
		c.Trials = make([]string, 0, len(r.copied))
		for id := range r.copied {
			c.Trials = append(c.Trials, id)
		}
		slices.SortFunc(c.Trials, compareTrialIDs)
	}
	return c
}

// compareTrialIDs orders trial ids numerically ("2" before "10"): they
// are decimal numbers without leading zeros.
func compareTrialIDs(a, b string) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	return strings.Compare(a, b)
}

// changed reports whether cur differs from prev beyond its update time.
func changed[M proto.Message](prev, cur M, upd func(M) **timestamppb.Timestamp) bool {
	if any(prev) == nil || !prev.ProtoReflect().IsValid() {
		return true
	}
	p := *upd(prev)
	c := proto.Clone(cur).(M)
	*upd(c) = p
	return !proto.Equal(prev, c)
}

// summaryChanged reports whether r's tuning job as Summary gives it
// (HyperparameterTuningJobChanged's) differs from prev's beyond its update
// time. r derives from prev's root, so its trials are prev's, at the same
// index, and added ones after them: a trial r shares is prev's.
func summaryChanged(prev *trainingv1.HyperparameterTuningJob, r *Root) bool {
	cur := r.Tuning.Job
	if prev == nil || len(prev.GetTrials()) != len(cur.GetTrials()) {
		return true
	}
	a, b := without(prev, trialsField), without(cur, trialsField)
	b.UpdateTime = a.UpdateTime
	if !proto.Equal(a, b) {
		return true
	}
	for i, tr := range cur.GetTrials() {
		if !r.shared(tr.GetId()) && !proto.Equal(without(prev.GetTrials()[i], measurementsField), without(tr, measurementsField)) {
			return true
		}
	}
	return false
}

// rootEqual reports whether a and b hold the same state. What they share
// (one object) is equal without a look.
func rootEqual(a, b *Root) bool {
	if len(a.CJs) != len(b.CJs) {
		return false
	}
	for i := range a.CJs {
		if !cjEqual(a.CJs[i], b.CJs[i]) {
			return false
		}
	}
	if (a.Tuning == nil) != (b.Tuning == nil) || (a.Pipeline == nil) != (b.Pipeline == nil) {
		return false
	}
	if a.Tuning != nil && (!tuningJobEqual(a.Tuning.Job, b.Tuning.Job) || a.Tuning.Ending != b.Tuning.Ending ||
		!proto.Equal(a.Tuning.EndError, b.Tuning.EndError)) {
		return false
	}
	if a.Pipeline != nil {
		x, y := *a.Pipeline, *b.Pipeline
		if !proto.Equal(x.P, y.P) {
			return false
		}
		x.P, y.P = nil, nil
		if x != y {
			return false
		}
	}
	return true
}

// cjEqual reports whether x and y hold the same state; one object is
// equal to itself without a look.
func cjEqual(x, y *CJ) bool {
	if x == y || x == nil || y == nil {
		return x == y
	}
	return proto.Equal(x.Job, y.Job) && strings.Join(x.Nodes, ",") == strings.Join(y.Nodes, ",") &&
		x.TrialID == y.TrialID && x.Ephemeral == y.Ephemeral && x.Submitted == y.Submitted &&
		x.ClusterDeleted == y.ClusterDeleted && x.CancelSent == y.CancelSent && x.Stop == y.Stop && x.Attempt == y.Attempt &&
		slices.Equal(x.StepsEnded, y.StepsEnded) && slices.Equal(x.StepsExited, y.StepsExited) && slices.Equal(x.PendingStepEnds, y.PendingStepEnds) &&
		slices.EqualFunc(x.PendingMetrics, y.PendingMetrics, func(a, b PendingMetrics) bool {
			return a.Attempt == b.Attempt && a.Node == b.Node && a.Records == b.Records &&
				slices.EqualFunc(a.Measurements, b.Measurements, func(m, n *trainingv1.Measurement) bool { return proto.Equal(m, n) })
		}) &&
		x.RetryAt.Equal(y.RetryAt) && x.Refused == y.Refused
}

// tuningJobEqual is proto.Equal for tuning jobs, trial by trial, taking a
// trial both hold (one object) as equal without a look.
func tuningJobEqual(a, b *trainingv1.HyperparameterTuningJob) bool {
	if len(a.GetTrials()) != len(b.GetTrials()) || !proto.Equal(without(a, trialsField), without(b, trialsField)) {
		return false
	}
	for i, x := range a.GetTrials() {
		if y := b.GetTrials()[i]; x != y && !proto.Equal(x, y) {
			return false
		}
	}
	return true
}

// Fields left out of a tuning job's own record and of its summary.
var (
	trialsField       = field(&trainingv1.HyperparameterTuningJob{}, "trials")
	measurementsField = field(&trainingv1.Trial{}, "measurements")
)

func field(m proto.Message, name protoreflect.Name) protoreflect.FieldNumber {
	fd := m.ProtoReflect().Descriptor().Fields().ByName(name)
	if fd == nil {
		panic(fmt.Sprintf("%T has no field %s", m, name))
	}
	return fd.Number()
}

// without returns a new message holding m's fields but the field numbered
// f, sharing their values with m: a view to read, not to change (clone it
// for a copy of its own).
func without[M proto.Message](m M, f protoreflect.FieldNumber) M {
	src := m.ProtoReflect()
	dst := src.New()
	src.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Number() != f {
			dst.Set(fd, v)
		}
		return true
	})
	if u := src.GetUnknown(); len(u) > 0 {
		dst.SetUnknown(u)
	}
	return dst.Interface().(M)
}

// WithoutTrials returns a deep copy of a tuning job without its trials:
// the job's own fields, as its root's record stores them.
func WithoutTrials(t *trainingv1.HyperparameterTuningJob) *trainingv1.HyperparameterTuningJob {
	return proto.Clone(without(t, trialsField)).(*trainingv1.HyperparameterTuningJob)
}

// Summary is a tuning job as HyperparameterTuningJobChanged carries it:
// its trials without their intermediate measurements (a deep copy).
func Summary(t *trainingv1.HyperparameterTuningJob) *trainingv1.HyperparameterTuningJob {
	c := WithoutTrials(t)
	for _, tr := range t.GetTrials() {
		c.Trials = append(c.Trials, proto.Clone(without(tr, measurementsField)).(*trainingv1.Trial))
	}
	return c
}

// ---- commands ----

func (s *State) cancel(now time.Time, name, user string, admin bool) (*Change, error) {
	r := s.Lookup(name)
	if r == nil || strings.HasPrefix(name, "job:") || strings.HasPrefix(name, "cluster:") || strings.HasPrefix(name, "upload:") {
		return nil, ignored("cancel %s: %v", name, errs.NotFound)
	}
	if user == "" || (user != r.Owner() && !admin) {
		return nil, ignored("cancel %s by %q: %v (only its owner or an administrator may)", name, user, errs.PermissionDenied)
	}
	reason := fmt.Sprintf("cancelled by users/%s", user)
	by := Canceller{User: user, Admin: admin}
	return s.change(now, r.Name, func(r *Root, em *emitter) error {
		switch {
		case r.Pipeline != nil && r.Pipeline.P.GetName() == name:
			if pipelineEnded(r.Pipeline.P.GetState()) || r.Pipeline.Cancelling {
				return nil
			}
			r.Pipeline.Cancelling = true
			r.Pipeline.P.State = trainingv1.PipelineState_PIPELINE_STATE_CANCELLING
			r.Pipeline.P.Error = &trainingv1.Status{Code: codeCancelled, Message: reason}
			if r.Tuning != nil {
				cancelTuning(now, r.Tuning, r, reason, by, em)
			}
			for _, cj := range r.CJs {
				if stoppable(cj) {
					stopCJ(now, r.editCJ(cj), reason, by, em)
				}
			}
		case r.Tuning != nil && r.Tuning.Job.GetName() == name:
			cancelTuning(now, r.Tuning, r, reason, by, em)
		default:
			cj := r.cj(name)
			if cj == nil {
				return ignored("cancel %s: %v", name, errs.NotFound)
			}
			stopCJ(now, r.editCJ(cj), reason, by, em)
		}
		return nil
	})
}

func (s *State) delete(name, user string, admin bool) (*Change, error) {
	r := s.Roots[name]
	if r == nil {
		if s.Lookup(name) != nil {
			return nil, ignored("delete %s: %v: it belongs to %s; delete that", name, errs.FailedPrecondition, s.Lookup(name).Name)
		}
		return nil, ignored("delete %s: %v", name, errs.NotFound)
	}
	if user == "" || (user != r.Owner() && !admin) {
		return nil, ignored("delete %s by %q: %v (only its owner or an administrator may)", name, user, errs.PermissionDenied)
	}
	if !r.Ended() {
		return nil, ignored("delete %s: %v: it is still running; cancel it first", name, errs.FailedPrecondition)
	}
	for _, cj := range r.CJs {
		if !JobEnded(cj.Job.GetState()) {
			return nil, ignored("delete %s: %v: %s is still running", name, errs.FailedPrecondition, cj.Job.GetName())
		}
	}
	return &Change{Root: name}, nil
}

// ---- cluster and job events ----

func (s *State) onCluster(now time.Time, cluster string, f func(r *Root, cj *CJ, em *emitter)) (*Change, error) {
	r := s.Lookup("cluster:" + cluster)
	if r == nil {
		return nil, nil
	}
	return s.change(now, r.Name, func(r *Root, em *emitter) error {
		for _, cj := range r.CJs {
			if cj.Ephemeral && cj.Job.GetCluster() == cluster {
				f(r, r.editCJ(cj), em)
			}
		}
		return nil
	})
}

func (s *State) jobChanged(now time.Time, ev *eventsv1.JobChanged) (*Change, error) {
	r := s.Lookup("job:" + ev.GetJob().GetName())
	if r == nil {
		return nil, nil
	}
	return s.change(now, r.Name, func(r *Root, em *emitter) error {
		for _, cj := range r.CJs {
			if runsJob(cj, ev.GetJob().GetName()) {
				jobChanged(now, r, r.editCJ(cj), ev, em)
			}
		}
		return nil
	})
}

// runsJob reports whether cj's scheduler job is job
// ("projects/{p}/jobs/{id}"): cj is CustomJob id of project p.
func runsJob(cj *CJ, job string) bool {
	// The id's test first: it is cheap, and a study holds many CustomJobs.
	i := strings.LastIndexByte(job, '/')
	if i < 0 || !strings.HasSuffix(cj.Job.GetName(), job[i:]) {
		return false
	}
	n, err := ParseName(cj.Job.GetName(), CustomJobs)
	return err == nil && n.Job() == job
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	k := make([]string, 0, len(m))
	for x := range m {
		k = append(k, x)
	}
	sort.Strings(k)
	return k
}

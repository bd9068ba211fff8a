package domain

import (
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/clusterspec"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/resname"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

func (s *State) createCustomJob(now time.Time, c *eventsv1.CreateCustomJob, logDir LogDir) (*Change, error) {
	in := c.GetCustomJob()
	n, err := ParseName(in.GetName(), CustomJobs)
	if err != nil {
		return nil, ignored("create custom job: name: %v", err)
	}
	if s.Lookup(in.GetName()) != nil {
		return nil, nil // a copy of a create already applied
	}
	if r := s.Lookup("job:" + n.Job()); r != nil {
		return nil, ignored("create %s: its job id is %s's: %v", in.GetName(), r.Name, errs.AlreadyExists)
	}
	if in.GetUser() == "" {
		return nil, ignored("create %s: user: %v (required: the job runs as its owner)", in.GetName(), errs.FailedPrecondition)
	}
	cj := newCJ(now, proto.Clone(in).(*trainingv1.CustomJob), "", logDir)
	r := &Root{Name: in.GetName(), CJs: []*CJ{cj}, LogDir: logDir}
	em := &emitter{}
	startCJ(now, cj, em)
	advance(now, s.metricGrace(), r, em)
	return finish(now, nil, r, em), nil
}

// newCJ makes the record of a CustomJob accepted at now, its output going
// to logDir (its root's) when it would otherwise go with its cluster.
func newCJ(now time.Time, job *trainingv1.CustomJob, trialID string, logDir LogDir) *CJ {
	job.State = trainingv1.JobState_JOB_STATE_QUEUED
	if job.CreateTime == nil {
		job.CreateTime = timestamppb.New(now)
	}
	job.StartTime, job.EndTime, job.Error, job.RestartCount = nil, nil, nil, 0
	job.OutputDir, job.OutputWarning = "", "" // output only: startCJ says
	// Output only: submit names the scheduler job once there is one. A
	// CustomJob that ends first (cancelled while its cluster is made)
	// never had one, and must not name a job that never existed.
	job.Job = ""
	return &CJ{Job: job, TrialID: trialID, LogDir: logDir}
}

// startCJ provisions a new CustomJob's cluster (or, on a persistent one,
// submits its job), or fails it when it cannot be run.
func startCJ(now time.Time, cj *CJ, em *emitter) {
	n, _ := ParseName(cj.Job.GetName(), CustomJobs)
	if pr := cj.Job.GetJobSpec().GetPersistentResourceId(); pr != "" {
		if !resname.ValidID(pr) {
			endCJ(now, cj, trainingv1.JobState_JOB_STATE_FAILED, codeInvalidArgument,
				fmt.Sprintf("job_spec.persistent_resource_id: %q is not a cluster id", pr), em)
			return
		}
		cj.Job.Cluster = resname.Cluster{Project: n.Project, ID: pr}.String()
		cj.Job.OutputDir = outputDir(cj)
		submit(now, cj, em)
		return
	}
	cj.Ephemeral = true
	cj.Job.Cluster = n.EphemeralCluster()
	cj.Job.OutputDir, cj.Job.OutputWarning = outputDir(cj), outputWarning(cj)
	if _, err := RenderJob(n, cj.Job, cj.Job.GetCluster(), cj.TrialID, jobLogDir(cj)); err != nil {
		endCJ(now, cj, trainingv1.JobState_JOB_STATE_FAILED, codeInvalidArgument, err.Error(), em)
		return
	}
	cluster, err := RenderCluster(n, cj.Job)
	if err != nil {
		cj.ClusterDeleted = true // never asked for
		endCJ(now, cj, trainingv1.JobState_JOB_STATE_FAILED, codeInvalidArgument, err.Error(), em)
		return
	}
	op := resname.Operation{Project: n.Project, ID: fmt.Sprintf("cj-%d-create", n.ID)}.String()
	em.add(cluster.GetName(), &eventsv1.CreateCluster{Operation: op, Cluster: cluster}, "")
}

// CapacityRetry is how often a CustomJob waiting for capacity or quota asks
// for its cluster again; DefaultCapacityWait how long it waits when
// scheduling.max_wait_duration does not say (Vertex keeps such a job
// QUEUED; Loom bounds the wait so that nothing waits forever unseen).
const (
	CapacityRetry       = 30 * time.Second
	DefaultCapacityWait = time.Hour
)

// clusterRefused decides a refusal of the ephemeral cluster: for capacity
// or quota (FAILED_PRECONDITION, RESOURCE_EXHAUSTED: what the provisioner
// answers when a zone has no free machines or a reservation is short) the
// CustomJob stays QUEUED and asks again every CapacityRetry, until
// max_wait_duration (else DefaultCapacityWait) from its creation; any other
// refusal, or the wait's end, fails it (FLEX_START: EXPIRED) with the
// provisioner's reason.
func clusterRefused(now time.Time, cj *CJ, ev *eventsv1.ClusterOperationFailed, em *emitter) {
	if JobEnded(cj.Job.GetState()) || cj.Submitted {
		return
	}
	capacity := ev.GetCode() == codeFailedPrecondition || ev.GetCode() == codeResourceExhausted
	if !capacity {
		endCJ(now, cj, trainingv1.JobState_JOB_STATE_FAILED, codeUnavailable,
			fmt.Sprintf("its cluster %s could not be provisioned: %s", cj.Job.GetCluster(), ev.GetMessage()), em)
		return
	}
	cj.Refused = ev.GetMessage()
	if cj.Stop != "" {
		return // being cancelled: the cancel ends it
	}
	if now.Before(capacityDeadline(cj)) {
		cj.Job.State = trainingv1.JobState_JOB_STATE_QUEUED
		cj.RetryAt = now.Add(CapacityRetry)
		return
	}
	endWaiting(now, cj, em)
}

// capacityDeadline is when a CustomJob stops waiting for capacity.
func capacityDeadline(cj *CJ) time.Time {
	wait := cj.Job.GetJobSpec().GetScheduling().GetMaxWaitDuration().AsDuration()
	if wait <= 0 {
		wait = DefaultCapacityWait
	}
	return cj.Job.GetCreateTime().AsTime().Add(wait)
}

// endWaiting ends a CustomJob whose wait for capacity is over.
func endWaiting(now time.Time, cj *CJ, em *emitter) {
	cj.RetryAt = time.Time{}
	state := trainingv1.JobState_JOB_STATE_FAILED
	if cj.Job.GetJobSpec().GetScheduling().GetStrategy() == trainingv1.Scheduling_FLEX_START {
		state = trainingv1.JobState_JOB_STATE_EXPIRED
	}
	cj.ClusterDeleted = true // never made
	endCJ(now, cj, state, codeDeadlineExceeded,
		fmt.Sprintf("no capacity for its cluster %s by %s (job_spec.scheduling.max_wait_duration, default %v): %s; free capacity (loom capacity list), add a reservation, or retry later",
			cj.Job.GetCluster(), capacityDeadline(cj).UTC().Format(time.RFC3339), DefaultCapacityWait, cj.Refused), em)
}

// retryDue reports whether a CustomJob waiting for capacity asks again
// now, or its wait is over.
func retryDue(now time.Time, cj *CJ) bool {
	return !cj.RetryAt.IsZero() && (!now.Before(cj.RetryAt) || !now.Before(capacityDeadline(cj))) &&
		!cj.Submitted && cj.Stop == "" && !JobEnded(cj.Job.GetState())
}

// retryCluster asks again for the ephemeral cluster of a CustomJob waiting
// for capacity, or ends its wait when it is over.
func retryCluster(now time.Time, cj *CJ, em *emitter) {
	if !retryDue(now, cj) {
		return
	}
	cj.RetryAt = time.Time{}
	if !now.Before(capacityDeadline(cj)) {
		endWaiting(now, cj, em)
		return
	}
	startCJ(now, cj, em)
}

// submit emits the CustomJob's SubmitJob, as its owner.
func submit(now time.Time, cj *CJ, em *emitter) {
	n, _ := ParseName(cj.Job.GetName(), CustomJobs)
	job, err := RenderJob(n, cj.Job, cj.Job.GetCluster(), cj.TrialID, jobLogDir(cj))
	if err != nil {
		endCJ(now, cj, trainingv1.JobState_JOB_STATE_FAILED, codeInvalidArgument, err.Error(), em)
		return
	}
	if cj.Ephemeral {
		// The cluster is made here (RenderCluster): its one partition.
		job.Partition = clusterspec.DefaultPartition
	}
	cj.Submitted = true
	cj.Job.Job = job.GetName()
	em.add(job.GetCluster(), &eventsv1.SubmitJob{Job: job}, "users/"+cj.Job.GetUser())
}

// clusterChanged follows the ephemeral cluster: once it runs, the job is
// submitted; a cluster in ERROR fails the CustomJob.
func clusterChanged(now time.Time, r *Root, cj *CJ, ev *eventsv1.ClusterChanged, em *emitter) {
	if JobEnded(cj.Job.GetState()) || cj.Submitted {
		return
	}
	switch ev.GetCluster().GetStatus().GetState() {
	case loomv1.Cluster_CREATING:
		if cj.Job.GetState() == trainingv1.JobState_JOB_STATE_QUEUED {
			cj.Job.State = trainingv1.JobState_JOB_STATE_PENDING
		}
	case loomv1.Cluster_RUNNING:
		if cj.Stop != "" {
			return
		}
		cj.Job.State = trainingv1.JobState_JOB_STATE_PENDING
		submit(now, cj, em)
	case loomv1.Cluster_ERROR:
		endCJ(now, cj, trainingv1.JobState_JOB_STATE_FAILED, codeUnavailable,
			fmt.Sprintf("its cluster %s failed: %s", cj.Job.GetCluster(), ev.GetCluster().GetStatus().GetMessage()), em)
	}
}

// jobChanged follows the scheduler job. A trial's metrics held until the
// event named their run (CJ.PendingMetrics) join its measurements once it
// does, the job's end included.
func jobChanged(now time.Time, r *Root, cj *CJ, ev *eventsv1.JobChanged, em *emitter) {
	if JobEnded(cj.Job.GetState()) || !cj.Submitted {
		return
	}
	j := ev.GetJob()
	cj.Nodes = append([]string(nil), j.GetNodes()...)
	if ev.GetAttempt() != cj.Attempt {
		// Step ends of another run say nothing of this one's metrics.
		cj.StepsEnded, cj.StepsExited = nil, nil
	}
	cj.Attempt = ev.GetAttempt()
	takePendingStepEnds(cj)
	held := takePendingMetrics(cj, ev, em) // before endCJ drops the rest
	cj.Job.RestartCount = j.GetRestartCount()
	set := func(s trainingv1.JobState) {
		if cj.Job.GetState() != trainingv1.JobState_JOB_STATE_CANCELLING {
			cj.Job.State = s
		}
	}
	// The scheduler's start time wins: a job that ran and ended between
	// two of its events (one pass can take it from PENDING to COMPLETED)
	// still ran, and its CustomJob says when.
	if st := j.GetStartTime(); cj.Job.StartTime == nil && st != nil && st.IsValid() {
		cj.Job.StartTime = st
	}
	switch j.GetState() {
	case loomv1.JobState_PENDING, loomv1.JobState_REQUEUED:
		if cj.Job.GetState() == trainingv1.JobState_JOB_STATE_RUNNING {
			set(trainingv1.JobState_JOB_STATE_PENDING)
		}
	case loomv1.JobState_CONFIGURING:
		set(trainingv1.JobState_JOB_STATE_PENDING)
	case loomv1.JobState_RUNNING, loomv1.JobState_COMPLETING:
		set(trainingv1.JobState_JOB_STATE_RUNNING)
		if cj.Job.StartTime == nil {
			cj.Job.StartTime = timestamppb.New(now)
		}
	case loomv1.JobState_COMPLETED:
		endCJ(now, cj, trainingv1.JobState_JOB_STATE_SUCCEEDED, 0, "", em)
	case loomv1.JobState_CANCELLED:
		why := cj.Stop
		if why == "" {
			why = "its scheduler job " + j.GetName() + " was cancelled"
			if r := j.GetStateReason(); r != "" {
				why += " (" + r + ")"
			}
		}
		endCJ(now, cj, trainingv1.JobState_JOB_STATE_CANCELLED, codeCancelled, why, em)
	case loomv1.JobState_TIMEOUT:
		endCJ(now, cj, trainingv1.JobState_JOB_STATE_FAILED, codeDeadlineExceeded,
			fmt.Sprintf("it ran past its time limit (job_spec.scheduling.timeout %v); raise the timeout or make it checkpoint and resume",
				cj.Job.GetJobSpec().GetScheduling().GetTimeout().AsDuration()), em)
	case loomv1.JobState_FAILED, loomv1.JobState_OUT_OF_MEMORY, loomv1.JobState_NODE_FAIL, loomv1.JobState_PREEMPTED:
		if ev.GetRequeueFollows() {
			// The end of a run the scheduler retries (max_retries, a
			// preemption, a node failure within its restarts): the
			// REQUEUED event that follows takes it back to PENDING.
			break
		}
		endCJ(now, cj, trainingv1.JobState_JOB_STATE_FAILED, codeInternal, failure(j, outputKept(cj), outputWhere(cj)), em)
	}
	// After the event's state is taken: a trial whose job ended is not
	// stopped early on them.
	for _, ms := range held {
		addTrialMeasurements(now, r, cj.TrialID, ms, em)
	}
}

// outputKept says whether CustomJob cj's replicas' output outlives it: it
// runs on a cluster that stays (persistent_resource_id), or its output
// goes to a local base output directory or to the service's log directory
// (RenderJob). An ephemeral cluster's shared directory, where the output
// goes otherwise, is deleted with the cluster when the job ends.
func outputKept(cj *CJ) bool {
	return !cj.Ephemeral || outputDir(cj) != ""
}

// jobLogDir is the log directory CustomJob cj's output goes to instead of
// its cluster's shared directory: its LogDir's on an ephemeral cluster,
// "" otherwise (a cluster that stays keeps its shared directory).
func jobLogDir(cj *CJ) string {
	if !cj.Ephemeral {
		return ""
	}
	return cj.LogDir.Dir
}

// outputDir is the directory CustomJob cj's output file is kept in after
// it ends (CustomJob.output_dir): the local base output directory's, else
// the log directory's (jobLogDir); "" when it goes to the cluster's
// shared directory.
func outputDir(cj *CJ) string {
	if d := localOutputDir(OutputDirs(cj.Job.GetJobSpec(), cj.TrialID)); d != "" {
		return d
	}
	return jobLogDir(cj)
}

// logDirUnmade says, to every member of the job's project, that the
// service could not make the owner's log directory. Not why: LogDir.Why
// names host paths, uids and errnos (the service's business, not the
// project's), so it goes to the service's log, with the root's name
// (app.Handle), for an operator to mend.
const logDirUnmade = "the training service could not make its owner's log directory (an operator finds why in its log)"

// outputWarning is CustomJob.output_warning: that cj's output goes with its
// ephemeral cluster, why in words the project may read, and what the user
// can do ("" when it is kept).
func outputWarning(cj *CJ) string {
	if outputKept(cj) {
		return ""
	}
	why := "the training service keeps no log directory (-log-dir)"
	if cj.LogDir.Why != "" {
		why = logDirUnmade
	}
	return "its output goes to its cluster's shared directory and is deleted with the cluster when it ends: " + why +
		"; give base_output_directory a local path (file:///...) to keep it"
}

// outputWhere says, for a failure's message, where CustomJob cj's kept
// output is ("" when it is not kept, or stays on its persistent cluster),
// or that the service could not keep it (logDirUnmade, without the
// detail: outputWarning).
func outputWhere(cj *CJ) string {
	if !outputKept(cj) {
		if cj.LogDir.Why != "" {
			return logDirUnmade
		}
		return ""
	}
	if !cj.Ephemeral {
		return ""
	}
	return "kept in " + outputDir(cj)
}

// failure says why a scheduler job failed, in words a person can act on;
// kept says whether its output is still there to read (outputKept), so
// that a job whose output went with its cluster is not sent to read it;
// where adds where the kept output is, or why it was not kept
// (outputWhere; "" adds nothing).
func failure(j *loomv1.Job, kept bool, where string) string {
	var what string
	switch j.GetState() {
	case loomv1.JobState_OUT_OF_MEMORY:
		what = "a replica ran out of memory; use a larger machine_type or less memory per replica"
	case loomv1.JobState_NODE_FAIL:
		what = "its nodes kept failing (infrastructure); it was requeued as often as allowed"
	case loomv1.JobState_PREEMPTED:
		what = "it was preempted"
	case loomv1.JobState_FAILED:
		if strings.HasPrefix(j.GetStateReason(), "JobLaunchFailure") {
			// Nothing ran: there is no output to see, and no exit code.
			what = "a replica could not start (its reason follows)"
			break
		}
		fallthrough
	default:
		what = fmt.Sprintf("a replica exited with code %d; see the job's output (loom jobs logs %s)", j.GetExitCode(), j.GetJobId())
		if kept && where != "" {
			what = fmt.Sprintf("a replica exited with code %d; see the job's output (loom jobs logs %s; %s)", j.GetExitCode(), j.GetJobId(), where)
		}
		if !kept {
			cluster := j.GetCluster()
			cluster = cluster[strings.LastIndex(cluster, "/")+1:]
			if where != "" {
				cluster += " (" + where + ")"
			}
			what = fmt.Sprintf("a replica exited with code %d; its output was deleted with its cluster %s: "+
				"give base_output_directory a local path (file:///...) to keep it for loom jobs logs %s", j.GetExitCode(), cluster, j.GetJobId())
		}
		if j.GetUserFailures() > 0 {
			what += fmt.Sprintf(" after %d failed run(s)", j.GetUserFailures())
		}
	}
	if r := j.GetStateReason(); r != "" {
		what += " [" + r + "]"
	}
	return what
}

// endCJ ends a CustomJob in state (with an error when code is not 0) and
// deletes its ephemeral cluster.
func endCJ(now time.Time, cj *CJ, state trainingv1.JobState, code int32, msg string, em *emitter) {
	if JobEnded(cj.Job.GetState()) {
		return
	}
	cj.Job.State = state
	cj.Job.EndTime = timestamppb.New(now)
	cj.PendingStepEnds = nil // no later run's event comes to take them
	for _, p := range cj.PendingMetrics {
		em.drop(DroppedJobEnded, p.Records)
	}
	cj.PendingMetrics = nil
	if state != trainingv1.JobState_JOB_STATE_SUCCEEDED {
		cj.Job.Error = &trainingv1.Status{Code: code, Message: msg}
	}
	if cj.Ephemeral && !cj.ClusterDeleted {
		cj.ClusterDeleted = true
		n, _ := ParseName(cj.Job.GetName(), CustomJobs)
		op := resname.Operation{Project: n.Project, ID: fmt.Sprintf("cj-%d-delete", n.ID)}.String()
		em.add(cj.Job.GetCluster(), &eventsv1.DeleteCluster{Operation: op, Cluster: cj.Job.GetCluster()}, "")
	}
}

// Canceller is who stops a CustomJob: the authenticated caller whose
// cancel stops it (User, and Admin when they may act on another user's
// job), or the zero value, the service itself (a FLEX_START expiry, the
// search's early stop, a tuning job failing). Its scheduler job's
// CancelJob carries it, so that the scheduler records the caller who
// actually cancelled (Job.cancelled_by), or nobody ("", its word for a
// cancel no caller asked for), never the job's owner in their stead.
type Canceller struct {
	User  string
	Admin bool
}

// cancelJob emits the CancelJob of cj's scheduler job as by: with by's
// principal, or none for the service's own cancel, which then names the
// job's owner it acts for (on_behalf_of): the scheduler refuses a cancel
// from training that names no one (no-principal), and holds this one to
// the owner's jobs, recording no cancelled_by.
func cancelJob(cj *CJ, by Canceller, em *emitter) {
	principal, owner := "", ""
	if by.User != "" {
		principal = "users/" + by.User
	} else {
		owner = cj.Job.GetUser()
	}
	em.add(cj.Job.GetCluster(), &eventsv1.CancelJob{Job: cj.Job.GetJob(), Cluster: cj.Job.GetCluster(),
		User: by.User, Admin: by.Admin, OnBehalfOf: owner}, principal)
}

// stopCJ stops a CustomJob for reason: one not yet submitted ends
// CANCELLED at once; a submitted one goes CANCELLING and its job is
// cancelled as by.
func stopCJ(now time.Time, cj *CJ, reason string, by Canceller, em *emitter) {
	if !stoppable(cj) {
		return
	}
	cj.Stop = reason
	if !cj.Submitted {
		endCJ(now, cj, trainingv1.JobState_JOB_STATE_CANCELLED, codeCancelled, reason, em)
		return
	}
	cj.Job.State = trainingv1.JobState_JOB_STATE_CANCELLING
	if !cj.CancelSent {
		cj.CancelSent = true
		cancelJob(cj, by, em)
	}
}

// stoppable reports whether stopCJ would stop cj: it has not ended, and
// is not being stopped.
func stoppable(cj *CJ) bool {
	return !JobEnded(cj.Job.GetState()) && cj.Stop == ""
}

// expire ends a FLEX_START CustomJob that has not started within its
// max_wait_duration: EXPIRED, its job cancelled, its cluster deleted.
func expire(now time.Time, cj *CJ, em *emitter) {
	if !expiryDue(now, cj) {
		return
	}
	wait := cj.Job.GetJobSpec().GetScheduling().GetMaxWaitDuration().AsDuration()
	if cj.Submitted && !cj.CancelSent {
		cj.CancelSent = true
		// Nobody asked: the service cancels it (cancelled_by "").
		cancelJob(cj, Canceller{}, em)
	}
	cj.Stop = "expired"
	endCJ(now, cj, trainingv1.JobState_JOB_STATE_EXPIRED, codeDeadlineExceeded,
		fmt.Sprintf("it did not start within job_spec.scheduling.max_wait_duration (%v): no FLEX_START capacity came free in time; retry later or use STANDARD", wait), em)
}

// expiryDue reports whether a FLEX_START CustomJob is past its
// max_wait_duration without having started.
func expiryDue(now time.Time, cj *CJ) bool {
	s := cj.Job.GetJobSpec().GetScheduling()
	if s.GetStrategy() != trainingv1.Scheduling_FLEX_START || s.GetMaxWaitDuration().AsDuration() <= 0 ||
		cj.Job.GetStartTime() != nil || JobEnded(cj.Job.GetState()) || cj.Stop != "" {
		return false
	}
	return !now.Before(cj.Job.GetCreateTime().AsTime().Add(s.GetMaxWaitDuration().AsDuration()))
}

// Tick decides what the passing of time does at now: FLEX_START jobs past
// their max_wait_duration expire; jobs waiting for capacity ask for their
// cluster again; finalizing trials past their metric grace are judged. One
// change per root that changed, in name order.
func (s *State) Tick(now time.Time) []*Change {
	var out []*Change
	for _, name := range sortedKeys(s.Roots) {
		r := s.Roots[name]
		due := finalizeDue(now, s.metricGrace(), r)
		for _, cj := range r.CJs {
			due = due || expiryDue(now, cj) || retryDue(now, cj)
		}
		if !due {
			continue
		}
		c, _ := s.change(now, name, func(r *Root, em *emitter) error {
			for _, cj := range r.CJs {
				// expire and retryCluster change only a CustomJob due
				// for one of them: only such a one is copied to change.
				if expiryDue(now, cj) || retryDue(now, cj) {
					cj = r.editCJ(cj)
					expire(now, cj, em)
					retryCluster(now, cj, em)
				}
			}
			return nil
		})
		if c != nil {
			out = append(out, c)
		}
	}
	return out
}

package slurmcli

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loom-ml/loom/libs/hostlist"
	"github.com/loom-ml/loom/libs/slurmspec"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

var scancelOptions = []optDef{
	{long: []string{"account"}, short: 'A', arg: requiredArg},
	{long: []string{"batch"}, short: 'b', arg: noArg},
	{long: []string{"clusters", "cluster"}, short: 'M', arg: requiredArg},
	{long: []string{"full"}, short: 'f', arg: noArg},
	{long: []string{"help"}, arg: noArg},
	{long: []string{"hurry"}, short: 'H', arg: noArg},
	{long: []string{"interactive"}, short: 'i', arg: noArg},
	{long: []string{"name", "jobname"}, short: 'n', arg: requiredArg},
	{long: []string{"me"}, arg: noArg},
	{long: []string{"nodelist"}, short: 'w', arg: requiredArg},
	{long: []string{"partition"}, short: 'p', arg: requiredArg},
	{long: []string{"qos"}, short: 'q', arg: requiredArg},
	{long: []string{"quiet"}, short: 'Q', arg: noArg},
	{long: []string{"reservation"}, short: 'R', arg: requiredArg},
	{long: []string{"sibling"}, arg: noArg},
	{long: []string{"signal"}, short: 's', arg: requiredArg},
	{long: []string{"state"}, short: 't', arg: requiredArg},
	{long: []string{"usage"}, arg: noArg},
	{long: []string{"user"}, short: 'u', arg: requiredArg},
	{long: []string{"verbose"}, short: 'v', arg: noArg},
	{long: []string{"version"}, short: 'V', arg: noArg},
	{long: []string{"wckey"}, arg: requiredArg},
}

// cancelTarget is one job scancel acts on: its resource name and the id
// it prints.
type cancelTarget struct {
	name, id string
	job      *loomv1.Job // nil when only its id is known
	// array is the argument that named the whole array, or the range of
	// its tasks, this task is cancelled for ("12", "12_[1-3]"), ""
	// otherwise: a refusal of permission is said once for it.
	array string
	// rng is the range of an array's tasks this task is cancelled for
	// ("12_[1-3]"), "" otherwise: -v says it once, as Slurm's scancel,
	// which sends the range as one request.
	rng string
	// arg is the index of the argument that named it (-1 and below: one
	// a filter chose): a pending array record's refusal of a signal is
	// said after that argument's other answers.
	arg int
}

// scancel is the scancel command.
func (c *cmd) scancel(ctx context.Context, args []string) error {
	p := &optParser{prog: "scancel", defs: scancelOptions}
	opts, ids, err := p.parse(args)
	if err != nil {
		return usage("scancel", err)
	}
	var users, names, parts, accounts, qos []string
	var states stateSet
	var nodes map[string]bool
	signal := ""
	interactive, quiet, verbose := false, false, false
	var scope signalScope
	var clusters []string // -M's list: the cancel runs in each in turn
	for _, o := range opts {
		switch o.key {
		case "help", "usage":
			fmt.Fprint(c.stdout, scancelUsage)
			return nil
		case "version":
			return c.printVersion()
		case "account":
			accounts = splitList(o.value)
		case "clusters":
			if clusters, err = c.clusterList(o.value); err != nil {
				return err
			}
		case "interactive":
			interactive = true
		case "batch":
			scope.batch = true
		case "full":
			scope.full = true
		case "name":
			names = splitList(o.value)
		case "me":
			users = []string{c.env.User}
		case "nodelist":
			hosts, err := hostlist.Expand(o.value)
			if err != nil {
				return c.errorf("Invalid node list: %s", o.value)
			}
			nodes = map[string]bool{}
			for _, h := range hosts {
				nodes[h] = true
			}
		case "partition":
			parts = splitList(o.value)
		case "qos":
			qos = splitList(o.value)
		case "quiet":
			quiet = true
		case "reservation":
			return c.errorf("reservations (--reservation) are not tracked by Loom")
		case "signal":
			name, err := slurmspec.ParseSignalName(o.value)
			if err != nil {
				// Slurm's scancel words, without its name (as it prints them).
				return &Error{Code: 1, Text: "Unknown job signal: " + o.value}
			}
			signal = name
		case "state":
			set, err := parseJobStates("scancel", o.value)
			if err != nil {
				// Slurm's words (its scancel takes one state; Loom a list too).
				return &Error{Code: 1, Text: "Invalid job state specified: " + o.value + "\nValid job states are PENDING, RUNNING, and SUSPENDED"}
			}
			if set != nil { // "all" leaves the filter as it was
				states = set
			}
		case "user":
			valid, invalid := resolveUsers(splitList(o.value))
			if len(invalid) > 0 {
				return c.errorf("Invalid user name: %s", invalid[0])
			}
			users = valid
		case "verbose":
			verbose = true
		}
	}
	filtered := users != nil || names != nil || parts != nil || accounts != nil || qos != nil || states != nil || nodes != nil
	if len(ids) == 0 && !filtered {
		return c.errorf("No job identification provided")
	}
	// scancel never touches finished jobs; by default it acts on pending
	// and running ones.
	if states == nil {
		states = stateSet{}
		for _, s := range jobStates {
			if s.pendingOrLive {
				states[s.state] = true
			}
		}
	}
	q := &squeueQuery{users: newStringSet(users), parts: newStringSet(parts), names: newStringSet(names),
		accounts: newStringSet(accounts), qos: newStringSet(qos), nodes: nodes, states: states}
	// Every cluster's jobs are read before any is acted on: a cluster of
	// -M's list the project does not have is said (exit 1) before the
	// clusters named ahead of it have cancelled anything, as Slurm's
	// scancel refuses an invalid -M before it acts.
	listed := make([][]*loomv1.Job, max(1, len(clusters)))
	err = c.forEachCluster(clusters, func(i int) error {
		jobs, err := c.scancelJobs(ctx, q)
		listed[i] = jobs
		return err
	})
	if err != nil {
		return err
	}
	// Each cluster of -M's list in turn, as Slurm's scancel (_multi_cluster):
	// the same ids and filters in each, exit 1 when any failed. A cluster
	// named with -M or LOOM_CLUSTER (the working cluster, as Slurm's
	// scancel asks its own slurmctld alone) acts on its own jobs alone.
	code := 0
	err = c.forEachCluster(clusters, func(i int) error {
		failed, err := c.scancelIn(ctx, listed[i], scancelRun{ids: ids, q: q, filtered: filtered, interactive: interactive,
			quiet: quiet, verbose: verbose, signal: signal, scope: scope, confine: c.clusterFilter() != ""})
		code = max(code, failed)
		return err
	})
	if err != nil {
		return err
	}
	if code != 0 {
		return &Error{Code: code}
	}
	return nil
}

// scancelRun is one scancel's ids and options, as it runs in a cluster.
type scancelRun struct {
	ids                   []string
	q                     *squeueQuery
	filtered, interactive bool
	quiet, verbose        bool
	signal                string
	scope                 signalScope
	// confine: -M or LOOM_CLUSTER named the cluster; a job it does not
	// hold is not its to act on (Slurm's scancel asks that cluster alone).
	confine bool
}

// scancelJobs reads the active jobs of the command's cluster (-M's,
// LOOM_CLUSTER's or every one) that q's server-side filters select, with
// their arrays' tasks: what scancelIn acts on.
func (c *cmd) scancelJobs(ctx context.Context, q *squeueQuery) ([]*loomv1.Job, error) {
	jobs, err := c.listJobs(ctx, &loomv1.ListJobsRequest{ActiveOnly: true, Users: q.users.keys(),
		Partitions: q.parts.keys(), Names: q.names.keys()})
	if err != nil {
		return nil, err
	}
	return c.withArrayTasks(ctx, jobs, true)
}

// scancelIn runs scancel in the command's cluster (-M's, LOOM_CLUSTER's or
// every one) over its jobs (scancelJobs): the exit status when a cancel
// failed (said on stderr), else 0. As Slurm's scancel, that is the
// highest of the failures' codes: Slurm's error number cut to 8 bits for
// a refusal slurmctld answers (228 for "Job can not be altered now", 210
// for "Access/permission denied"), 1 for one scancel says itself.
func (c *cmd) scancelIn(ctx context.Context, jobs []*loomv1.Job, o scancelRun) (int, error) {
	ids, q, filtered, interactive, quiet, verbose, signal, scope := o.ids, o.q, o.filtered, o.interactive, o.quiet, o.verbose, o.signal, o.scope
	var targets []cancelTarget
	failed := 0
	if len(ids) == 0 {
		for _, j := range jobs {
			if q.match(jobRow{job: j}) {
				t := c.taskTarget(j)
				t.arg = -1 - len(targets)
				targets = append(targets, t)
			}
		}
	} else {
		for argi, id := range ids {
			if strings.Contains(id, ".") {
				// JOB.STEP: one job step (srun), on every node (srunsteps.go).
				if err := c.cancelStep(ctx, id, signal, verbose, o.confine); err != nil {
					fmt.Fprintln(c.stderr, err.Error())
					failed = max(failed, err.Code)
				}
				continue
			}
			ts, err := c.resolveCancel(id, jobs, !filtered && !interactive)
			if err != nil {
				fmt.Fprintln(c.stderr, err.Error())
				failed = max(failed, 1)
				continue
			}
			for _, t := range ts {
				if !filtered || (t.job != nil && q.match(jobRow{job: t.job})) {
					t.arg = argi
					targets = append(targets, t)
				}
			}
		}
	}
	var in *bufio.Reader
	if interactive && c.env.Stdin != nil {
		in = bufio.NewReader(c.env.Stdin)
	}
	// refused holds the arrays whose cancel was refused: their tasks share
	// an owner, so the refusal is said once, for the id asked (as Slurm's
	// one answer for "scancel 12"), not once per task.
	refused := map[string]bool{}
	said := map[string]bool{} // the task ranges and records -v has named
	// records are, with a signal, the pending array record (squeue's row,
	// "12_[1-3%2]") of each task still inside one, by task id ("12_2"):
	// slurmctld refuses a signal to a pending task for its whole record,
	// so Slurm's scancel names the record, once however many of its tasks
	// were asked for (12_[0-1] 12_3: one refusal), after the other
	// answers of the argument that asked (tasks the array does not have
	// first), and -v names it too.
	// Whether a signal is refused is the gateway's to say (it refuses one
	// to an array, or to any of its tasks, while tasks of it wait); these
	// only name what it refused as Slurm's scancel does.
	records := map[string]string{}
	if signal != "" {
		for _, r := range newArrayView(jobs).rows(jobs, false) {
			for _, i := range r.pending {
				records[r.arrayJobID+"_"+strconv.Itoa(i)] = r.id
			}
		}
	}
	recordOf := func(t cancelTarget) string {
		if t.rng == "" {
			return records[t.id]
		}
		for _, u := range targets { // a range: its first task in a record
			if u.arg == t.arg && u.rng == t.rng && records[u.id] != "" {
				return records[u.id]
			}
		}
		return ""
	}
	recordRefused := map[string]bool{}
	var deferred []string // the argument's record refusals, said after its other answers
	// deferredTasks are the argument's refusals of running tasks beside a
	// pending record, said after the record's (Slurm 22.05: "scancel -s
	// USR1 34_[1-2]", task 1 running, named 34_[2-3%1] first, then 34_1).
	var deferredTasks []string
	flush := func() {
		for _, line := range append(deferred, deferredTasks...) {
			fmt.Fprintln(c.stderr, line)
		}
		deferred, deferredTasks = nil, nil
	}
	for i, t := range targets {
		if i > 0 && t.arg != targets[i-1].arg {
			flush()
		}
		if t.array != "" && refused[t.array] {
			continue
		}
		if interactive {
			j := t.job
			fmt.Fprintf(c.stdout, "Cancel job_id=%s name=%s partition=%s [y/n]? ", t.id, j.GetDisplayName(), j.GetPartition())
			ans := ""
			if in != nil {
				ans, _ = in.ReadString('\n')
			}
			if a := strings.TrimSpace(strings.ToLower(ans)); a != "y" && a != "yes" {
				continue
			}
		}
		// A signal to a whole array: -v names it once the gateway has
		// answered, which may name its parts instead (wholeArrayRefusal).
		whole := signal != "" && t.rng == "" && t.array != "" && t.id == t.array
		if verbose && !whole && (t.rng == "" || !said[t.rng]) {
			// A range of tasks once, before its first task; a pending
			// record once, by its name, for a signal.
			id := t.id
			if t.rng != "" {
				id, said[t.rng] = t.rng, true
			}
			rec := recordOf(t)
			if rec != "" {
				id = rec
			}
			switch {
			case rec != "" && said["record "+rec]:
			case signal != "":
				said["record "+rec] = rec != ""
				// Slurm's scancel names the signal by its number.
				n, _ := slurmspec.SignalNumber(signal)
				fmt.Fprintf(c.stderr, "scancel: Signal %d to job %s\n", n, id)
			default:
				fmt.Fprintf(c.stderr, "scancel: Terminating job %s\n", id)
			}
		}
		var err *cancelError
		if o.confine && t.job == nil && c.elsewhere(ctx, t.name) {
			// Not this cluster's job: as unknown to it.
			err = &cancelError{err: c.errorf("Kill job error on job id %s: Invalid job id specified", t.id), done: true}
		} else {
			err = c.cancelOne(ctx, t, signal, scope)
		}
		if whole && err != nil && err.record != "" {
			failed = max(failed, c.wholeArrayRefusal(jobs, t.array, err.record, signal, verbose, quiet))
			continue
		}
		if whole && verbose {
			n, _ := slurmspec.SignalNumber(signal)
			fmt.Fprintf(c.stderr, "scancel: Signal %d to job %s\n", n, t.id)
		}
		if whole && err == nil {
			// One task left waiting is a pending job of its own: the
			// gateway signals the running tasks and not it (a signal
			// before a start is refused), as slurmctld 22.05 did beside
			// Loom ("scancel -s USR1 23", 23_0 and 23_1 running and
			// signalled, 23_2 pending: "Kill job error on job id 23_2:
			// Job can not be altered now, try again later", exit 228).
			// Named from the listing scancel made: a task started since
			// then took the signal with its siblings.
			if p := pendingTaskIDs(jobs, t.array); len(p) == 1 {
				if !quiet {
					fmt.Fprintln(c.stderr, c.errorf("Kill job error on job id %s: %s", p[0], msgNotNow).Text)
				}
				failed = max(failed, exitTransitionWait)
			}
		}
		if err != nil {
			if err.done && signal == "" && !scope.batch {
				// As Slurm's scancel: cancelling a job that has already
				// ended, is ending or is unknown (long purged) is no
				// error, so that cleanup code may cancel what it started
				// without asking first; only -v says so. A signal (-s,
				// -b) to such a job is still an error; -f alone is a
				// cancel (Slurm 22.05 says nothing, exits 0).
				if verbose && !quiet {
					fmt.Fprintln(c.stderr, err.err.Error())
				}
				continue
			}
			failed = max(failed, err.err.Code)
			if err.denied {
				refused[t.array] = true
			}
			if rec := records[t.id]; rec != "" && err.err.Code == exitTransitionWait {
				if !recordRefused[rec] && !quiet {
					deferred = append(deferred, c.errorf("Kill job error on job id %s: %s", rec, msgNotNow).Text)
				}
				recordRefused[rec] = true
				continue
			}
			if err.record != "" && t.job.GetState() != loomv1.JobState_PENDING {
				// A running task of an array with tasks still waiting:
				// refused with them (Slurm 22.05 beside Loom: "scancel -s
				// USR1 32_1", 32_[2-3%1] pending, kept answering "Job can
				// not be altered now"; it signalled the task all the same,
				// which Loom's gateway does not), said after the record's
				// refusal, as Slurm's.
				if !quiet {
					deferredTasks = append(deferredTasks, err.err.Error())
				}
				continue
			}
			if !quiet {
				fmt.Fprintln(c.stderr, err.err.Error())
			}
		}
	}
	flush()
	return failed, nil
}

// wholeArrayRefusal says the gateway's refusal of a signal to the whole
// array id whose tasks rec (the record the gateway named) still wait, as
// Slurm 22.05's scancel did beside Loom: slurmctld refuses the record and,
// while it is there, every running task of the array too ("Job can not be
// altered now", each by its id; slurmctld signals them as it refuses, the
// gateway does not). Slurm's
// scancel asks for each part in a thread of its own, so its order varies
// from run to run; this is the order it gave most: the tasks first, then
// the record, and for -v the record first. It returns the exit status.
func (c *cmd) wholeArrayRefusal(jobs []*loomv1.Job, id, rec, signal string, verbose, quiet bool) int {
	var running []*loomv1.Job
	for _, j := range jobs {
		if j.GetArrayJobId() == id && j.GetState() != loomv1.JobState_PENDING && !j.GetState().Terminal() {
			running = append(running, j)
		}
	}
	slices.SortFunc(running, func(a, b *loomv1.Job) int { return cmp.Compare(a.GetArrayTaskId(), b.GetArrayTaskId()) })
	ids := make([]string, 0, len(running)+1)
	for _, j := range running {
		ids = append(ids, displayID(j))
	}
	if verbose {
		n, _ := slurmspec.SignalNumber(signal)
		for _, s := range append([]string{rec}, ids...) {
			fmt.Fprintf(c.stderr, "scancel: Signal %d to job %s\n", n, s)
		}
	}
	if !quiet {
		for _, s := range append(ids, rec) {
			fmt.Fprintln(c.stderr, c.errorf("Kill job error on job id %s: %s", s, msgNotNow).Text)
		}
	}
	return exitTransitionWait
}

// pendingTaskIDs are the ids ("12_3") of array a's tasks in jobs that
// have not started, one a task.
func pendingTaskIDs(jobs []*loomv1.Job, a string) []string {
	var ids []string
	for _, r := range newArrayView(jobs).rows(jobs, true) {
		if r.arrayJobID == a && r.arrayTask != "N/A" && effectiveState(r.job) == loomv1.JobState_PENDING {
			ids = append(ids, r.id)
		}
	}
	return ids
}

// elsewhere reports whether the gateway knows job name in a cluster other
// than the command's (-M's or LOOM_CLUSTER's): Slurm's scancel and
// scontrol ask that cluster alone, which does not know another's jobs. A
// job the gateway does not know, or cannot say about, is left for the
// cancel (or update) to answer.
func (c *cmd) elsewhere(ctx context.Context, name string) bool {
	cctx, cancel := c.call(ctx)
	defer cancel()
	j, err := c.jobsClient().GetJob(cctx, &loomv1.GetJobRequest{Name: name})
	return err == nil && j.GetCluster() != "" && j.GetCluster() != c.clusterFilter()
}

// displayID is a job's id as Slurm prints it ("12", "12_3").
func displayID(j *loomv1.Job) string {
	if a := j.GetArrayJobId(); a != "" {
		return fmt.Sprintf("%s_%d", a, j.GetArrayTaskId())
	}
	return j.GetJobId()
}

// resolveCancel turns one scancel argument into jobs: "12" is job 12 and,
// when it is an array, all its tasks (whole: as one target, the array's
// name, which the scheduler cancels in one step, as slurmctld does: task
// by task, each task cancelled would free a place for a pending one to
// start before its own cancel came); "12_3" one task; "12_[1-3]" several.
// Without whole (filters, --interactive: each task is judged) an array is
// each of its tasks.
func (c *cmd) resolveCancel(arg string, active []*loomv1.Job, whole bool) ([]cancelTarget, error) {
	id, task, isTask := strings.Cut(arg, "_")
	if strings.Contains(arg, ".") {
		return nil, c.errorf("Kill job error on job id %s: job steps are not tracked by Loom", arg)
	}
	if !isDigits(id) {
		return nil, c.errorf("Invalid job id %s", arg)
	}
	id = strings.TrimLeft(id, "0")
	if !isTask {
		if whole {
			for _, j := range active {
				if j.GetArrayJobId() == id || (j.GetJobId() == id && j.GetArray() != "") {
					return []cancelTarget{{name: c.jobName(id), id: id, array: id, job: j}}, nil
				}
			}
		}
		// Each task by its own name: the array's name would cancel them
		// all at once, and the tasks asked for after it would be refused
		// as already ended.
		var out []cancelTarget
		for _, j := range active {
			if j.GetJobId() == id || j.GetArrayJobId() == id {
				t := c.taskTarget(j)
				if j.GetArrayJobId() != "" || j.GetArray() != "" {
					t.array = id
				}
				out = append(out, t)
			}
		}
		if len(out) == 0 {
			// Not active: the gateway says what it is (ended, unknown).
			out = []cancelTarget{{name: c.jobName(id), id: id}}
		}
		return out, nil
	}
	var idx []int
	// rng is the argument when it names a range of tasks ("12_[1-3]"),
	// which Slurm's scancel sends as one request: one refusal, one -v line.
	rng := ""
	if strings.HasPrefix(task, "[") && strings.HasSuffix(task, "]") {
		spec, err := ParseArray(strings.Trim(task, "[]"))
		if err != nil {
			return nil, c.errorf("Invalid job id %s", arg)
		}
		idx = spec.Indexes()
		rng = id + "_" + task
	} else {
		n, err := strconv.Atoi(task)
		if err != nil || !isDigits(task) {
			return nil, c.errorf("Invalid job id %s", arg)
		}
		idx = []int{n}
	}
	var out []cancelTarget
	for _, i := range idx {
		t := cancelTarget{name: c.jobName(fmt.Sprintf("%s_%d", id, i)), id: fmt.Sprintf("%s_%d", id, i)}
		for _, j := range active {
			if j.GetArrayJobId() == id && int(j.GetArrayTaskId()) == i {
				t = c.taskTarget(j)
			}
		}
		t.array, t.rng = rng, rng
		out = append(out, t)
	}
	return out, nil
}

// taskTarget is the cancel target of one listed job. An array's first task
// is named "A_0": its record's name, "A", is the array's and would act on
// every task.
func (c *cmd) taskTarget(j *loomv1.Job) cancelTarget {
	t := cancelTarget{name: j.GetName(), id: displayID(j), job: j}
	if a := j.GetArrayJobId(); a != "" && a == j.GetJobId() {
		t.name = c.jobName(t.id)
	}
	return t
}

// signalScope is whom scancel -b (batch) or -f (full) sends a signal to.
type signalScope struct{ batch, full bool }

// msgAlreadyDone is Slurm's ESLURM_ALREADY_DONE, as the gateway answers it
// for a job that is ending or ended.
const msgAlreadyDone = "Job/step already completing or completed"

// msgNotNow is Slurm's ESLURM_TRANSITION_STATE_NO_UPDATE, its answer to
// a signal for a pending job.
const msgNotNow = "Job can not be altered now, try again later"

// msgJobPending is Slurm's ESLURM_JOB_PENDING, as the gateway answers a
// signal for a job that has not started.
const msgJobPending = "Job is pending execution"

// Slurm's error numbers for the refusals slurmctld answers scancel, as its
// scancel exits with them: cut to 8 bits by exit(3).
const (
	exitAccessDenied   = 2002 & 0xff // ESLURM_ACCESS_DENIED
	exitTransitionWait = 2020 & 0xff // ESLURM_TRANSITION_STATE_NO_UPDATE
	exitInvalidJobID   = 2017 & 0xff // ESLURM_INVALID_JOB_ID
	exitUserIDMissing  = 2010 & 0xff // ESLURM_USER_ID_MISSING: another user's job step
)

// cancelError is cancelOne's refusal, its err's Code the exit status it
// gives; denied marks a PermissionDenied, done a job that is unknown or
// already ending or ended (Slurm's ESLURM_INVALID_JOB_ID and
// ESLURM_ALREADY_DONE); record, for a signal the gateway refused because
// tasks of the job's array still wait, names them as the gateway did
// ("12_[2-5%1]").
type cancelError struct {
	err    *Error
	denied bool
	done   bool
	record string
}

// cancelOne cancels (or signals, within scope) one job, with Slurm's error
// wording. A refusal of a task cancelled for its whole array names the
// array's id.
func (c *cmd) cancelOne(ctx context.Context, t cancelTarget, signal string, scope signalScope) *cancelError {
	cctx, cancel := c.call(ctx)
	defer cancel()
	j, err := c.jobsClient().CancelJob(cctx, &loomv1.CancelJobRequest{Name: t.name, Signal: signal, User: c.env.User,
		Batch: scope.batch, Full: scope.full})
	// Slurm's scancel says "Kill job error" for a signal too.
	verb := "Kill job error"
	if err != nil {
		switch status.Code(err) {
		case codes.NotFound:
			return &cancelError{err: c.errorf("%s on job id %s: Invalid job id specified", verb, t.id), done: true}
		case codes.PermissionDenied:
			id := t.id
			if t.array != "" {
				id = t.array
			}
			e := c.errorf("%s on job id %s: Access/permission denied", verb, id)
			e.Code = exitAccessDenied
			return &cancelError{err: e, denied: t.array != ""}
		case codes.FailedPrecondition:
			// The gateway answers in Slurm's words ("Job is pending execution", ...).
			msg := status.Convert(err).Message()
			if msg == "" {
				msg = msgAlreadyDone
			}
			done := msg == msgAlreadyDone
			code := 1
			record := ""
			if rest, ok := strings.CutPrefix(msg, msgNotNow); ok {
				// A signal the gateway refuses while tasks of the job's
				// array wait: Slurm's words alone, and the record it names
				// ("...: array 12 has tasks still pending (12_[2-5%1]); ...").
				msg, code = msgNotNow, exitTransitionWait
				if _, after, ok := strings.Cut(rest, " pending ("); ok {
					record, _, _ = strings.Cut(after, ")")
				}
			}
			switch {
			case (signal != "" || scope.batch) && done:
				// Slurm's answer to a signal (-b's too) for an ended job.
				msg = "Invalid job id specified"
			case signal != "" && msg == msgJobPending:
				msg = msgNotNow
				code = exitTransitionWait
			}
			e := c.errorf("%s on job id %s: %s", verb, t.id, msg)
			e.Code = code
			return &cancelError{err: e, done: done, record: record}
		case codes.Unavailable, codes.DeadlineExceeded, codes.Unimplemented:
			return &cancelError{err: c.rpcError(verb+" on job id "+t.id, err)}
		default:
			return &cancelError{err: c.errorf("%s on job id %s: %s", verb, t.id, status.Convert(err).Message())}
		}
	}
	if t.job == nil && j.GetState().Terminal() && j.GetState() != loomv1.JobState_CANCELLED {
		msg := msgAlreadyDone
		if signal != "" || scope.batch {
			msg = "Invalid job id specified" // Slurm's answer to a signal (-b's too) for an ended job
		}
		return &cancelError{err: c.errorf("%s on job id %s: %s", verb, t.id, msg), done: true}
	}
	return nil
}

const scancelUsage = `Usage: scancel [-A account] [--batch] [--full] [--interactive] [-n job_name]
               [-p partition] [-Q] [-q qos] [-s signal | integer]
               [-t PENDING | RUNNING | SUSPENDED] [--usage] [-u user_name]
               [--hurry] [-V] [-v] [-w hosts...] [--wckey=wckey] [--me]
               [job_id[_array_id][.step_id]]
`

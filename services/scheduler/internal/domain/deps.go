package domain

import (
	"strconv"
	"strings"
	"time"

	"github.com/loom-ml/loom/libs/slurmspec"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Dependency kinds (--dependency), as libs/slurmspec parses them.
const (
	DepAfter      = "after"
	DepAfterAny   = "afterany"
	DepAfterOK    = "afterok"
	DepAfterNotOK = "afternotok"
	// DepAfterCorr: each task of an array after the task of the same index
	// of another array completed successfully.
	DepAfterCorr = "aftercorr"
	// DepAfterBurstBuffer: after the jobs ended and their burst buffers
	// were staged out; Loom has no burst buffers, so as afterany.
	DepAfterBurstBuffer = "afterburstbuffer"
	DepSingleton        = "singleton"
)

// depState is the state of a dependency: satisfied (at a time), waiting, or
// never to be satisfied.
type depState int

const (
	depWaiting depState = iota
	depSatisfied
	depNever
)

// jobsPrefix returns "projects/p/jobs/" of a job name.
func jobsPrefix(name string) string {
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		return name[:i+1]
	}
	return ""
}

// depJobs resolves a dependency's job id within the project of the job
// named from: "A" is job A, or every task of array A; "A_i" the task. A job
// pruned by retention resolves to its compact record (its final state, start
// and end), so a dependency on it is judged as before it was pruned.
func (t *txn) depJobs(from, id string) []*Job {
	prefix := jobsPrefix(from)
	if job, task, isTask := strings.Cut(id, "_"); isTask {
		if name := t.arrayTaskName(prefix+job, task); name != "" {
			if j := t.jobOrEnded(name); j != nil {
				return []*Job{j}
			}
		}
		return nil
	}
	if a := t.array(prefix + id); a != nil {
		out := make([]*Job, 0, len(a.Tasks))
		for _, name := range a.Tasks {
			if j := t.jobOrEnded(name); j != nil {
				out = append(out, j)
			}
		}
		return out
	}
	if j := t.jobOrEnded(prefix + id); j != nil {
		return []*Job{j}
	}
	return nil
}

// depTargets resolves one job of a dependency of j's: the jobs it waits
// on (none found: an unknown job, never satisfied). For aftercorr, an
// array task of j's waits on the task of the same index of the other array
// (none reports that the other array has no such task: nothing to wait
// for); a job that is no array task, or a dependency on a job that is no
// array, waits on the job as afterok does.
func (t *txn) depTargets(j *Job, kind string, dj slurmspec.DepJob) (jobs []*Job, none bool) {
	id := dj.JobID
	if dj.Task >= 0 {
		id += "_" + strconv.Itoa(dj.Task)
	}
	if kind == DepAfterCorr && dj.Task < 0 && j.Job.GetArrayJobId() != "" {
		array := jobsPrefix(j.Name()) + dj.JobID
		if a := t.array(array); a != nil {
			name := t.arrayTaskName(array, strconv.Itoa(int(j.Job.GetArrayTaskId())))
			if name == "" {
				return nil, true
			}
			if other := t.jobOrEnded(name); other != nil {
				return []*Job{other}, false
			}
			return nil, false
		}
	}
	return t.depJobs(j.Name(), id), false
}

// jobOrEnded returns the job named name, or the compact record of it when
// retention pruned it (read-only: for dependencies), or nil.
func (t *txn) jobOrEnded(name string) *Job {
	if j := t.job(name); j != nil {
		return j
	}
	if e := t.ended(name); e != nil {
		return endedJob(e)
	}
	return nil
}

// arrayTaskName returns the job name of task index task of the array named
// array, or "".
func (t *txn) arrayTaskName(array, task string) string {
	a := t.array(array)
	n, err := strconv.Atoi(task)
	if a == nil || err != nil {
		return ""
	}
	for i, idx := range a.Indexes {
		if int(idx) == n {
			return a.Tasks[i]
		}
	}
	return ""
}

// arrayTask returns task index task of the array named array, or nil.
func (t *txn) arrayTask(array, task string) *Job {
	if name := t.arrayTaskName(array, task); name != "" {
		return t.job(name)
	}
	return nil
}

// condState evaluates one condition on one job: its state and, when
// satisfied, from when.
func condState(kind string, j *loomv1.Job) (depState, time.Time) {
	st := j.GetState()
	end := j.GetEndTime().AsTime()
	switch kind {
	case DepAfter:
		if st == loomv1.JobState_RUNNING || st.Terminal() || j.GetStartTime() != nil {
			at := j.GetStartTime().AsTime()
			if j.GetStartTime() == nil {
				at = end
			}
			return depSatisfied, at
		}
	case DepAfterAny, DepAfterBurstBuffer:
		if st.Terminal() {
			return depSatisfied, end
		}
	case DepAfterOK, DepAfterCorr:
		if st == loomv1.JobState_COMPLETED {
			return depSatisfied, end
		}
		if st.Terminal() {
			return depNever, time.Time{}
		}
	case DepAfterNotOK:
		if st == loomv1.JobState_COMPLETED {
			return depNever, time.Time{}
		}
		if st.Terminal() {
			return depSatisfied, end
		}
	}
	return depWaiting, time.Time{}
}

// depMemo keeps, within a txn, what its passes worked out of
// dependencies: each dependency string parsed once (an array's tasks share
// theirs), and each reference's state once (a thousand tasks waiting on
// one array would each walk its thousand tasks, every pass). A reference's
// state changes only when a job or array does: gen is the txn's jobGen
// when conds was filled, and conds is emptied when it moves on.
type depMemo struct {
	parsed map[string]*slurmspec.Dependency // nil: does not parse
	conds  map[depKey]depCond
	gen    uint64
}

// depKey is one reference of a dependency: its type and the job it names.
type depKey struct{ kind, name string }

// depCond is the state of one reference before its +delay: satisfied (at
// when), waiting, or never; skip for an aftercorr twin that does not
// exist (nothing to wait for).
type depCond struct {
	state depState
	at    time.Time
	skip  bool
}

// parsedDependency returns spec parsed (nil: it does not parse), from the
// txn's memo.
func (t *txn) parsedDependency(spec string) *slurmspec.Dependency {
	if d, ok := t.deps.parsed[spec]; ok {
		return d
	}
	if t.deps.parsed == nil {
		t.deps.parsed = map[string]*slurmspec.Dependency{}
	}
	d, err := slurmspec.ParseDependency(spec)
	if err != nil {
		d = nil
	}
	t.deps.parsed[spec] = d
	return d
}

// depCondOf works out the state of reference dj, of type kind, of j's
// dependency. An aftercorr reference from an array task depends on the
// task; any other depends on kind and the job named alone, and is memoized.
func (t *txn) depCondOf(j *Job, kind string, dj slurmspec.DepJob) depCond {
	corr := kind == DepAfterCorr && dj.Task < 0 && j.Job.GetArrayJobId() != ""
	var key depKey
	if !corr {
		id := dj.JobID
		if dj.Task >= 0 {
			id += "_" + strconv.Itoa(dj.Task)
		}
		key = depKey{kind, jobsPrefix(j.Name()) + id}
		if t.deps.gen != t.jobGen {
			clear(t.deps.conds)
			t.deps.gen = t.jobGen
		}
		if c, ok := t.deps.conds[key]; ok {
			return c
		}
	}
	jobs, none := t.depTargets(j, kind, dj)
	c := depCond{state: depSatisfied, skip: none}
	if !none && len(jobs) == 0 {
		c.state = depNever
	}
	for _, other := range jobs {
		s, when := condState(kind, other.Job)
		if s == depNever {
			c.state, c.at = depNever, time.Time{}
			break
		}
		if s == depWaiting && c.state == depSatisfied {
			c.state = depWaiting
		}
		if when.After(c.at) {
			c.at = when
		}
	}
	if !corr {
		if t.deps.conds == nil {
			t.deps.conds = map[depKey]depCond{}
		}
		t.deps.conds[key] = c
	}
	return c
}

// dependencyReason returns the job's dependency reason ("" when satisfied)
// and, when it waits only for a delay, when that ends. singletonBlocked says
// whether an earlier job of its user and name is still live.
func (t *txn) dependencyReason(j *Job, singletonBlocked func(*Job) bool) (string, time.Time) {
	d := t.parsedDependency(j.Job.GetDependency())
	if d == nil {
		return ReasonDependencyNeverSatisfied, time.Time{}
	}
	var wake time.Time
	singleton := false
	results := make([]depState, 0, len(d.Items))
	for _, it := range d.Items {
		if it.Type == DepSingleton {
			singleton = true
			continue
		}
		state := depSatisfied
		for _, dj := range it.Jobs {
			c := t.depCondOf(j, it.Type, dj)
			if c.skip {
				continue // aftercorr: the other array has no such task
			}
			if c.state == depNever {
				state = depNever
				break
			}
			if c.state == depWaiting && state == depSatisfied {
				state = depWaiting
			}
			// after:ID+MIN: that long after the job started. Another
			// type's +MIN is taken and not waited for, as Slurm 22.05's.
			if delay := time.Duration(dj.DelayMinutes) * time.Minute; it.Type == DepAfter && state == depSatisfied && delay > 0 {
				if due := c.at.Add(delay); t.now.Before(due) {
					state = depWaiting
					if wake.IsZero() || due.Before(wake) {
						wake = due
					}
				}
			}
		}
		results = append(results, state)
	}
	satisfied, never := 0, 0
	for _, r := range results {
		switch r {
		case depSatisfied:
			satisfied++
		case depNever:
			never++
		}
	}
	single := true
	if singleton && singletonBlocked(j) {
		single = false
	}
	switch {
	case !d.Any && never > 0:
		return ReasonDependencyNeverSatisfied, time.Time{}
	case d.Any && len(results) > 0 && never == len(results) && !singleton:
		return ReasonDependencyNeverSatisfied, time.Time{}
	case !d.Any && satisfied == len(results) && single:
		return "", time.Time{}
	case d.Any && (satisfied > 0 || (len(results) == 0 && single)):
		return "", time.Time{}
	case d.Any && singleton && single:
		return "", time.Time{}
	}
	return ReasonDependency, wake
}

package domain

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Dependency kinds (--dependency).
const (
	DepAfter      = "after"
	DepAfterAny   = "afterany"
	DepAfterOK    = "afterok"
	DepAfterNotOK = "afternotok"
	DepSingleton  = "singleton"
)

// depCond is one "type:id[:id...][+minutes]" of a --dependency.
type depCond struct {
	kind  string
	ids   []string // "12" or "12_3"
	delay time.Duration
}

// dependency is a parsed --dependency: all of conds (",") or any of them ("?").
type dependency struct {
	any       bool
	conds     []depCond
	singleton bool
}

// parseDependency parses Slurm's --dependency syntax.
func parseDependency(s string) (dependency, error) {
	var d dependency
	sep := ","
	if strings.Contains(s, "?") {
		if strings.Contains(s, ",") {
			return d, fmt.Errorf("dependency %q mixes ',' and '?'", s)
		}
		sep, d.any = "?", true
	}
	for _, part := range strings.Split(s, sep) {
		part = strings.TrimSpace(part)
		if part == DepSingleton {
			d.singleton = true
			continue
		}
		fields := strings.Split(part, ":")
		kind := fields[0]
		switch kind {
		case DepAfter, DepAfterAny, DepAfterOK, DepAfterNotOK:
		default:
			return d, fmt.Errorf("dependency type %q is not supported (after, afterany, afterok, afternotok, singleton)", kind)
		}
		if len(fields) < 2 {
			return d, fmt.Errorf("dependency %q names no job", part)
		}
		c := depCond{kind: kind}
		for _, id := range fields[1:] {
			if base, mins, ok := strings.Cut(id, "+"); ok {
				m, err := strconv.Atoi(mins)
				if err != nil || m < 0 {
					return d, fmt.Errorf("dependency delay %q is not a number of minutes", mins)
				}
				c.delay, id = time.Duration(m)*time.Minute, base
			}
			job, task, isTask := strings.Cut(id, "_")
			if !isDigits(job) || (isTask && !isDigits(task)) {
				return d, fmt.Errorf("dependency job id %q is not a job id", id)
			}
			c.ids = append(c.ids, id)
		}
		d.conds = append(d.conds, c)
	}
	return d, nil
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

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
	case DepAfterAny:
		if st.Terminal() {
			return depSatisfied, end
		}
	case DepAfterOK:
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

// dependencyReason returns the job's dependency reason ("" when satisfied)
// and, when it waits only for a delay, when that ends. singletonBlocked says
// whether an earlier job of its user and name is still live.
func (t *txn) dependencyReason(j *Job, singletonBlocked func(*Job) bool) (string, time.Time) {
	d, err := parseDependency(j.Job.GetDependency())
	if err != nil {
		return ReasonDependencyNeverSatisfied, time.Time{}
	}
	var wake time.Time
	results := make([]depState, 0, len(d.conds))
	for _, c := range d.conds {
		state := depSatisfied
		var at time.Time
		for _, id := range c.ids {
			jobs := t.depJobs(j.Name(), id)
			if len(jobs) == 0 {
				state = depNever
				break
			}
			for _, dj := range jobs {
				s, when := condState(c.kind, dj.Job)
				if s == depNever {
					state = depNever
					break
				}
				if s == depWaiting && state == depSatisfied {
					state = depWaiting
				}
				if when.After(at) {
					at = when
				}
			}
			if state == depNever {
				break
			}
		}
		if state == depSatisfied && c.delay > 0 {
			if due := at.Add(c.delay); t.now.Before(due) {
				state = depWaiting
				if wake.IsZero() || due.Before(wake) {
					wake = due
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
	if d.singleton && singletonBlocked(j) {
		single = false
	}
	switch {
	case !d.any && never > 0:
		return ReasonDependencyNeverSatisfied, time.Time{}
	case d.any && len(results) > 0 && never == len(results) && !d.singleton:
		return ReasonDependencyNeverSatisfied, time.Time{}
	case !d.any && satisfied == len(results) && single:
		return "", time.Time{}
	case d.any && (satisfied > 0 || (len(results) == 0 && single)):
		return "", time.Time{}
	case d.any && d.singleton && single:
		return "", time.Time{}
	}
	return ReasonDependency, wake
}

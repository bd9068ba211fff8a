package slurmspec

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// DependencyTypes are the --dependency types Loom knows, as Slurm names them.
var DependencyTypes = []string{"after", "afterany", "afterburstbuffer", "aftercorr", "afternotok", "afterok", "singleton"}

// DepJob is one job a dependency waits for: "12", "12_3" (one array
// task), "12_*"/"12" for a whole array, optionally "+MIN" (any type; only
// after waits for it).
type DepJob struct {
	JobID string
	// Task is the array task index after "_", or -1 for the whole job.
	Task int
	// DelayMinutes is the "+time" of "after:12+5": how long after the
	// job started. Slurm 22.05 takes it on every type and keeps it in the
	// job's Dependency, but waits for it on after alone: "afterok:12+5"
	// starts as soon as 12 completed.
	DelayMinutes int
}

// DepItem is one "type[:job...]" element of a dependency.
type DepItem struct {
	Type string
	Jobs []DepJob
}

// Dependency is a parsed --dependency spec.
type Dependency struct {
	Items []DepItem
	// Any is true when the items were separated by '?' (any one
	// suffices); false for ',' (all must hold).
	Any bool
}

// MaxDependencyJobs bounds the job references of one dependency (after
// duplicates within an element are dropped): the scheduler judges every
// pending job's dependency at each pass, each reference to an array
// through its tasks. Slurm names no limit; its dependencies are as long
// as a job's fields may be.
const MaxDependencyJobs = 1000

// MaxDelayMinutes bounds after:ID+MIN, as MaxTimeLimitSeconds bounds a
// time limit: a larger one overflowed a time.Duration and read as none.
const MaxDelayMinutes = MaxTimeLimitSeconds / 60

// ParseDependency parses and validates a --dependency spec as Slurm
// accepts it: "type:job_id[:job_id...]" items joined by ',' (all) or '?'
// (any, not mixed with ','), where type is after, afterany, afternotok,
// afterok, aftercorr or afterburstbuffer, and "singleton" takes no ids.
// Job ids are numbers, optionally "_N" (an array task) or "_*", and may
// carry "+minutes" (at most MaxDelayMinutes; only after waits for them,
// as Slurm 22.05's). A job named twice in
// one element is kept once; at most MaxDependencyJobs references remain.
//
// A refusal ends with Slurm's words for it, "(Slurm: Job dependency
// problem)": slurmctld refuses every such spec with them alone.
func ParseDependency(spec string) (*Dependency, error) {
	d, err := parseDependency(spec)
	if err != nil {
		return nil, fmt.Errorf("%w (Slurm: %s)", err, MsgDependency)
	}
	return d, nil
}

// MsgDependency is Slurm's word for a --dependency it cannot take
// (ESLURM_DEPENDENCY): "sbatch: error: Batch job submission failed: Job
// dependency problem".
const MsgDependency = "Job dependency problem"

func parseDependency(spec string) (*Dependency, error) {
	s := strings.TrimSpace(spec)
	if s == "" {
		return nil, errors.New("empty dependency")
	}
	d := &Dependency{}
	sep := ","
	if strings.Contains(s, "?") {
		if strings.Contains(s, ",") {
			return nil, errors.New("',' (all of) and '?' (any of) cannot be mixed")
		}
		sep, d.Any = "?", true
	}
	refs := 0
	for _, el := range strings.Split(s, sep) {
		it, err := parseDepItem(el)
		if err != nil {
			return nil, err
		}
		if refs += len(it.Jobs); refs > MaxDependencyJobs {
			return nil, fmt.Errorf("more than %d job references", MaxDependencyJobs)
		}
		d.Items = append(d.Items, it)
	}
	return d, nil
}

func parseDepItem(el string) (DepItem, error) {
	if el == "" {
		return DepItem{}, errors.New("empty element")
	}
	fields := strings.Split(el, ":")
	typ := strings.ToLower(fields[0])
	known := false
	for _, t := range DependencyTypes {
		if t == typ {
			known = true
		}
	}
	if !known {
		return DepItem{}, fmt.Errorf("unknown dependency type %q (one of %s)", fields[0], strings.Join(DependencyTypes, ", "))
	}
	it := DepItem{Type: typ}
	if typ == "singleton" {
		if len(fields) > 1 {
			return DepItem{}, errors.New("singleton takes no job ids")
		}
		return it, nil
	}
	if len(fields) < 2 {
		return DepItem{}, fmt.Errorf("%s needs at least one job id (%s:JOBID)", typ, typ)
	}
	seen := make(map[DepJob]bool, len(fields)-1)
	for _, f := range fields[1:] {
		j, err := parseDepJob(f)
		if err != nil {
			return DepItem{}, err
		}
		if !seen[j] {
			seen[j] = true
			it.Jobs = append(it.Jobs, j)
		}
		if len(it.Jobs) > MaxDependencyJobs {
			return DepItem{}, fmt.Errorf("more than %d job references", MaxDependencyJobs)
		}
	}
	return it, nil
}

func parseDepJob(f string) (DepJob, error) {
	j := DepJob{Task: -1}
	if id, delay, ok := strings.Cut(f, "+"); ok {
		n, err := strconv.Atoi(delay)
		if err != nil || n < 0 || !isDigits(delay) {
			return DepJob{}, fmt.Errorf("%q: time after + is not a number of minutes", f)
		}
		if n > MaxDelayMinutes {
			return DepJob{}, fmt.Errorf("%q: more than %d minutes after (a century)", f, MaxDelayMinutes)
		}
		j.DelayMinutes, f = n, id
	}
	id, task, isTask := strings.Cut(f, "_")
	if !isDigits(id) || id == "0" || strings.HasPrefix(id, "0") {
		return DepJob{}, fmt.Errorf("%q is not a job id", f)
	}
	j.JobID = id
	if isTask && task != "*" {
		n, err := strconv.Atoi(task)
		if err != nil || !isDigits(task) || n > MaxArrayIndex {
			return DepJob{}, fmt.Errorf("%q: array task %q is not an index", f, task)
		}
		j.Task = n
	}
	return j, nil
}

package slurmspec

import (
	"fmt"
	"strconv"
	"strings"
)

// JobRef is a job id as Slurm commands take it: "12" (a job, or a whole
// array) or "12_3" (task 3 of array 12).
type JobRef struct {
	// JobID is the numeric job id (the array job id for "A_i").
	JobID int64
	// Task is the array task index after "_", or -1 when there is none.
	Task int
}

// String returns the reference as written: "12" or "12_3".
func (r JobRef) String() string {
	if r.Task < 0 {
		return strconv.FormatInt(r.JobID, 10)
	}
	return fmt.Sprintf("%d_%d", r.JobID, r.Task)
}

// ParseJobRef parses "A" or "A_i": A a positive job id and i an array index
// 0..MaxArrayIndex, both without leading zeros, so that a parsed reference
// is written back (String) exactly as given and one job has one spelling.
func ParseJobRef(s string) (JobRef, error) {
	id, task, isTask := strings.Cut(s, "_")
	if !isDigits(id) || strings.HasPrefix(id, "0") {
		return JobRef{}, fmt.Errorf("%q is not a job id (want N or N_I)", s)
	}
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil {
		return JobRef{}, fmt.Errorf("%q is not a job id: %w", s, err)
	}
	ref := JobRef{JobID: n, Task: -1}
	if isTask {
		if len(task) > 1 && task[0] == '0' {
			return JobRef{}, fmt.Errorf("%q: array task %q has a leading zero (want N_I, e.g. 12_3)", s, task)
		}
		if ref.Task, err = arrayIndex(task); err != nil {
			return JobRef{}, fmt.Errorf("%q: array task: %w", s, err)
		}
	}
	return ref, nil
}

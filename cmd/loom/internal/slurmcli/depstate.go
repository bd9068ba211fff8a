package slurmcli

import (
	"context"
	"sort"
	"strconv"
	"strings"

	"github.com/loom-ml/loom/libs/slurmspec"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// dependencyText is a job's Dependency as scontrol prints it: only the
// items still in the way, each marked "(unfulfilled)" or "(failed)", and
// "(null)" once none is (and for jobs no longer pending). byID holds every
// job the cluster knows, by job id.
func dependencyText(j *loomv1.Job, byID map[string]*loomv1.Job) string {
	if j.GetDependency() == "" || effectiveState(j) != loomv1.JobState_PENDING {
		return "(null)"
	}
	dep, err := slurmspec.ParseDependency(j.GetDependency())
	if err != nil {
		return j.GetDependency() // shown as given rather than hidden
	}
	var parts []string
	for _, item := range dep.Items {
		if item.Type == "singleton" {
			if j.GetStateReason() == "Dependency" {
				parts = append(parts, "singleton(unfulfilled)")
			}
			continue
		}
		for _, dj := range item.Jobs {
			targets := depTargets(dj, byID)
			if item.Type == "aftercorr" && dj.Task < 0 && j.GetArrayJobId() != "" {
				// Each task waits for its twin in the other array alone.
				twin := dj
				twin.Task = int(j.GetArrayTaskId())
				if targets = depTargets(twin, byID); len(targets) == 0 && isArray(dj.JobID, byID) {
					continue // no twin: nothing to wait for
				}
			}
			mark := depMark(item.Type, targets)
			if mark == "" {
				continue
			}
			// As Slurm prints it: a whole array is "20_*", a delay "+MIN".
			name := dj.JobID
			switch {
			case dj.Task >= 0:
				name += "_" + strconv.Itoa(dj.Task)
			case isArray(dj.JobID, byID):
				name += "_*"
			}
			if dj.DelayMinutes > 0 {
				name += "+" + strconv.Itoa(dj.DelayMinutes)
			}
			parts = append(parts, item.Type+":"+name+"("+mark+")")
		}
	}
	if len(parts) == 0 {
		return "(null)"
	}
	sep := ","
	if dep.Any {
		sep = "?"
	}
	return strings.Join(parts, sep)
}

// depTargets are the jobs one dependency names: a job, one array task, or
// every task of an array.
func depTargets(dj slurmspec.DepJob, byID map[string]*loomv1.Job) []*loomv1.Job {
	var out []*loomv1.Job
	for _, k := range byID {
		switch {
		case dj.Task >= 0:
			if k.GetArrayJobId() == dj.JobID && int(k.GetArrayTaskId()) == dj.Task {
				out = append(out, k)
			}
		case k.GetJobId() == dj.JobID || k.GetArrayJobId() == dj.JobID:
			out = append(out, k)
		}
	}
	return out
}

// isArray reports whether job id is an array's (its tasks carry it as
// their array job id).
func isArray(id string, byID map[string]*loomv1.Job) bool {
	for _, k := range byID {
		if k.GetArrayJobId() == id {
			return true
		}
	}
	return false
}

// depMark says whether targets still hold a dependency of type typ back:
// "" when satisfied, "unfulfilled" while it may still be, "failed" when it
// never can be.
func depMark(typ string, targets []*loomv1.Job) string {
	if len(targets) == 0 {
		return "unfulfilled"
	}
	mark := ""
	for _, t := range targets {
		st := effectiveState(t)
		var m string
		switch typ {
		case "after":
			if st == loomv1.JobState_PENDING {
				m = "unfulfilled"
			}
		case "afterany", "afterburstbuffer":
			if !st.Terminal() {
				m = "unfulfilled"
			}
		case "afterok", "aftercorr":
			switch {
			case !st.Terminal():
				m = "unfulfilled"
			case st != loomv1.JobState_COMPLETED:
				m = "failed"
			}
		case "afternotok":
			switch {
			case !st.Terminal():
				m = "unfulfilled"
			case st == loomv1.JobState_COMPLETED:
				m = "failed"
			}
		default:
			m = "unfulfilled"
		}
		if m == "failed" {
			return m
		}
		if m != "" {
			mark = m
		}
	}
	return mark
}

// maxDependencyTargets bounds the job ids one listing reads to show its
// pending jobs' dependencies (the gateway's limit on one ListJobs request's
// job_ids); past it a dependency's target may be unread and its mark
// "unfulfilled".
const maxDependencyTargets = 1000

// withDependencyTargets returns jobs by id (Job.job_id) with the jobs their
// pending jobs' dependencies name added, read by id whatever their state
// (an ended target is what fulfils "afterok"): without them every mark read
// "unfulfilled", a dependency long since met included (scontrol show job
// ID reads that job alone).
func (c *cmd) withDependencyTargets(ctx context.Context, jobs []*loomv1.Job) (map[string]*loomv1.Job, error) {
	byID := make(map[string]*loomv1.Job, len(jobs))
	for _, j := range jobs {
		byID[j.GetJobId()] = j
	}
	read := map[string]bool{}
	var ids []string
	for _, j := range jobs {
		if j.GetDependency() == "" || effectiveState(j) != loomv1.JobState_PENDING {
			continue
		}
		dep, err := slurmspec.ParseDependency(j.GetDependency())
		if err != nil {
			continue
		}
		for _, item := range dep.Items {
			for _, dj := range item.Jobs {
				if read[dj.JobID] || len(ids) >= maxDependencyTargets {
					continue
				}
				read[dj.JobID] = true
				ids = append(ids, dj.JobID)
			}
		}
	}
	if len(ids) == 0 {
		return byID, nil
	}
	sort.Strings(ids)
	more, err := c.listJobs(ctx, &loomv1.ListJobsRequest{JobIds: ids})
	if err != nil {
		return nil, err
	}
	for _, j := range more {
		byID[j.GetJobId()] = j
	}
	return byID, nil
}

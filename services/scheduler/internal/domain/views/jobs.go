// Package views renders the scheduler's read API from its state: the jobs as
// GetJob and ListJobs serve them (squeue, sacct: filters, paging, runs,
// placement explanations) and sinfo's partitions and nodes.
//
// It reads the state through narrow interfaces (JobSource, NodeSource) that
// the domain's State satisfies, so a view sees no mutable internals and
// cannot change what it reads. It imports nothing of the domain.
package views

import (
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/loom-ml/loom/libs/paging"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// JobSource is what the job views read of the state.
type JobSource interface {
	// ResolveJobName returns the record name a job name refers to: "jobs/A_i"
	// is task i of array A ("" when there is none); any other name is itself.
	ResolveJobName(name string) string
	// EachJob calls fn with every job record's stored resource, which fn
	// must neither change nor keep.
	EachJob(fn func(j *loomv1.Job))
	// JobViewer returns a function giving the job record named name as
	// GetJob serves it as of now (a copy with its read-time fields: priority
	// and factors of a pending job, runs, placement), nil when unknown. One
	// viewer shares the work of many jobs (a cluster's priority context).
	JobViewer(now time.Time) func(name string) *loomv1.Job
}

// Job returns the job named name (array task names resolved) as GetJob
// serves it as of now, nil when unknown.
func Job(src JobSource, name string, now time.Time) *loomv1.Job {
	return src.JobViewer(now)(src.ResolveJobName(name))
}

// JobFilter selects jobs for ListJobs; empty fields select everything.
type JobFilter struct {
	// Project is "projects/{p}"; Cluster a cluster name.
	Project, Cluster         string
	Users, Names, Partitions []string
	States                   []loomv1.JobState
	// JobIDs are "12" (the job, or every task of array 12) or "12_3".
	JobIDs []string
	// ActiveOnly keeps pending and running jobs (squeue).
	ActiveOnly bool
}

// Keep reports whether f selects j (Names match SlurmJobName).
func (f *JobFilter) Keep(j *loomv1.Job) bool {
	if f.Project != "" && !strings.HasPrefix(j.GetName(), f.Project+"/jobs/") {
		return false
	}
	if f.Cluster != "" && j.GetCluster() != f.Cluster {
		return false
	}
	if f.ActiveOnly && j.GetState().Terminal() {
		return false
	}
	if len(f.Users) > 0 && !slices.Contains(f.Users, j.GetUser()) {
		return false
	}
	if len(f.Names) > 0 && !slices.Contains(f.Names, SlurmJobName(j)) {
		return false
	}
	if len(f.Partitions) > 0 && !slices.Contains(f.Partitions, j.GetPartition()) {
		return false
	}
	if len(f.States) > 0 {
		ok := false
		for _, st := range f.States {
			ok = ok || st == j.GetState()
		}
		if !ok {
			return false
		}
	}
	if len(f.JobIDs) > 0 {
		ok := false
		task := ""
		if j.GetArrayJobId() != "" {
			task = j.GetArrayJobId() + "_" + strconv.Itoa(int(j.GetArrayTaskId()))
		}
		for _, id := range f.JobIDs {
			ok = ok || id == j.GetJobId() || (task != "" && (id == task || id == j.GetArrayJobId()))
		}
		if !ok {
			return false
		}
	}
	return true
}

// SlurmJobName is the job's short name as Slurm shows it: the display name,
// else the command's base name, else "sbatch" (a script).
func SlurmJobName(j *loomv1.Job) string {
	if j.GetDisplayName() != "" {
		return j.GetDisplayName()
	}
	if len(j.GetCommand()) > 0 {
		return filepath.Base(j.GetCommand()[0])
	}
	return "sbatch"
}

// List returns every job f selects, in submission order (paging.JobKey), as
// Job serves them.
func List(src JobSource, f JobFilter, now time.Time) []*loomv1.Job {
	names, _ := listed(src, f)
	view := src.JobViewer(now)
	out := make([]*loomv1.Job, len(names))
	for i, n := range names {
		out[i] = view(n)
	}
	return out
}

// ListPage returns one page of the jobs f selects, in submission order
// (paging.JobKey), as Job serves them: those after the key after ("" for
// the first page), at most size and within paging.MaxBytes. next is the key
// to continue after, "" when no job follows. Only the page's jobs are
// viewed, so a page costs the same however many jobs there are.
func ListPage(src JobSource, f JobFilter, after string, size int, now time.Time) (jobs []*loomv1.Job, next string) {
	names, keys := listed(src, f)
	i := sort.SearchStrings(keys, after)
	if i < len(keys) && keys[i] == after {
		i++
	}
	view := src.JobViewer(now)
	b := paging.NewBuilder(size)
	for ; i < len(names); i++ {
		j := view(names[i])
		if !b.Add(j) {
			return jobs, keys[i-1]
		}
		jobs = append(jobs, j)
	}
	return jobs, ""
}

// listed returns the names of the records f selects sorted by their list
// key, with the keys.
func listed(src JobSource, f JobFilter) ([]string, []string) {
	var names, keys []string
	src.EachJob(func(j *loomv1.Job) {
		if f.Keep(j) {
			names = append(names, j.GetName())
			keys = append(keys, paging.JobKey(j))
		}
	})
	sort.Sort(byKey{names, keys})
	return names, keys
}

// byKey sorts names and their keys together.
type byKey struct {
	names []string
	keys  []string
}

func (b byKey) Len() int           { return len(b.names) }
func (b byKey) Less(i, j int) bool { return b.keys[i] < b.keys[j] }
func (b byKey) Swap(i, j int) {
	b.names[i], b.names[j] = b.names[j], b.names[i]
	b.keys[i], b.keys[j] = b.keys[j], b.keys[i]
}

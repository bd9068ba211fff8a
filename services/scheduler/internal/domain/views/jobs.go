// Package views renders the scheduler's read API from its state: the jobs as
// GetJob and ListJobs serve them (squeue, sacct: filters, paging, runs,
// placement explanations) and sinfo's partitions and nodes.
//
// It reads the state through narrow interfaces (JobSource, NodeSource) that
// the domain's State satisfies, so a view sees no mutable internals and
// cannot change what it reads. It imports nothing of the domain.
package views

import (
	"container/heap"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/loom-ml/loom/libs/paging"
	"github.com/loom-ml/loom/libs/slurmspec"
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
	// ProjectJobs calls fn with the stored resource of each job of project
	// ("projects/{p}") in list order (ListKey), from the first job after
	// after (from the first job when first), only the active ones (not
	// terminal) when active, until fn returns false. fn must neither
	// change nor keep the job.
	ProjectJobs(project string, active bool, after ListKey, first, desc bool, fn func(j *loomv1.Job) bool)
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
	// Desc lists in descending list order: the newest first (order_by
	// "submit_time desc"). The key a page goes on from is then the last
	// (least) key of the previous page.
	Desc bool
}

// Keep reports whether f selects j (Names match SlurmJobName).
func (f *JobFilter) Keep(j *loomv1.Job) bool {
	prefix := ""
	if f.Project != "" {
		prefix = f.Project + "/jobs/"
	}
	return f.keep(j, prefix)
}

// keep is Keep with the project's name prefix made once ("" for any
// project): a list tests every job the scheduler keeps.
func (f *JobFilter) keep(j *loomv1.Job, prefix string) bool {
	if prefix != "" && !strings.HasPrefix(j.GetName(), prefix) {
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
	if len(f.Partitions) > 0 && !slurmspec.AnyPartitionOf(j.GetPartition(), f.Partitions) {
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

// MaxScan bounds the jobs one ListPage of a project tests against its
// filter: a filter that leaves most of a project's jobs out (squeue -u of a
// user with few jobs among a hundred thousand) gets a short page, possibly
// empty, and a key to go on from, rather than holding the state for a walk
// of every job. The gateway reads its own indexes to the same bound.
const MaxScan = 10_000

// ListPage returns one page of the jobs f selects, in submission order
// (ListKey, paging.JobKey; the newest first when f.Desc, "after" then
// meaning before in key order), as Job serves them: those after the key after
// ("" for the first page), at most size and within paging.MaxBytes. next
// is the key to continue after, "" when no job follows; a page may be
// short, even empty, with a next key, when a project's jobs were tested
// past MaxScan. Only the page's jobs are viewed and keyed. A project's page
// reads its jobs in order from after on (JobSource.ProjectJobs); a list of
// every project walks every job and keeps the first size+1 in a max-heap.
func ListPage(src JobSource, f JobFilter, after string, size int, now time.Time) (jobs []*loomv1.Job, next string) {
	size = max(size, 1)
	from, parsed := ParseListKey(after)
	prefix := ""
	if f.Project != "" {
		prefix = f.Project + "/jobs/"
	}
	var keys []ListKey
	cut := ""
	if f.Project != "" && (parsed || after == "") {
		first := after == ""
		// Jobs of the ids asked for (squeue -j) have those numbers, or,
		// tasks of an array, greater ones: the read starts at the least,
		// or, newest first, ends there.
		least, bounded := leastJobID(f.JobIDs)
		if bounded && !f.Desc && (first || from.Less(least)) {
			from, first = least, false
		}
		scanned := 0
		src.ProjectJobs(f.Project, f.ActiveOnly, from, first, f.Desc, func(j *loomv1.Job) bool {
			if bounded && f.Desc && KeyOf(j).Less(least) {
				return false
			}
			scanned++
			if f.keep(j, prefix) {
				if keys = append(keys, KeyOf(j)); len(keys) > size {
					return false
				}
			}
			if scanned >= MaxScan {
				cut = KeyOf(j).String()
				return false
			}
			return true
		})
	} else {
		keys = heapPage(src, f, prefix, after, from, parsed, size)
	}
	view := src.JobViewer(now)
	b := paging.NewBuilder(size)
	for i, k := range keys {
		j := view(k.Name)
		if !b.Add(j) {
			return jobs, keys[i-1].String()
		}
		jobs = append(jobs, j)
	}
	return jobs, cut
}

// leastJobID is a key before every job ids selects ("12": job 12, or the
// tasks of array 12, whose ids follow it; "12_3": a task of array 12): the
// least id's number with no name. false when ids is empty or an id is not
// a number.
func leastJobID(ids []string) (ListKey, bool) {
	var least uint64
	for i, id := range ids {
		num, _, _ := strings.Cut(id, "_")
		n, err := strconv.ParseUint(num, 10, 64)
		if err != nil || strconv.FormatUint(n, 10) != num {
			return ListKey{}, false
		}
		if i == 0 || n < least {
			least = n
		}
	}
	return ListKey{Num: least}, len(ids) > 0
}

// heapPage is the first size+1 keys, in order, of the jobs f selects after
// after, in one walk of every job with a bounded max-heap.
func heapPage(src JobSource, f JobFilter, prefix, after string, from ListKey, parsed bool, size int) []ListKey {
	// A key the scheduler did not write is compared as a string, as
	// JobKey sorts: slower, never wrong. Newest first, "after" is below.
	less := ListKey.Less
	isAfter := func(k ListKey) bool { return k.String() > after }
	if f.Desc {
		less = func(a, b ListKey) bool { return b.Less(a) }
		isAfter = func(k ListKey) bool { return k.String() < after }
	}
	if parsed {
		isAfter = func(k ListKey) bool { return less(from, k) }
	} else if after == "" {
		isAfter = nil
	}
	h := &pageHeap{less: less}
	src.EachJob(func(j *loomv1.Job) {
		if !f.keep(j, prefix) {
			return
		}
		k := KeyOf(j)
		if isAfter != nil && !isAfter(k) {
			return
		}
		if len(h.keys) <= size {
			heap.Push(h, k)
		} else if less(k, h.keys[0]) {
			h.keys[0] = k
			heap.Fix(h, 0)
		}
	})
	slices.SortFunc(h.keys, ListKey.Compare)
	if f.Desc {
		slices.Reverse(h.keys)
	}
	return h.keys
}

// ListKey is a job's list key (paging.JobKey) as its parts: the numeric job
// id (0 when it is not a number), then the name. Jobs list in its order.
type ListKey struct {
	Num  uint64
	Name string
}

// KeyOf is j's list key.
func KeyOf(j *loomv1.Job) ListKey {
	n, err := strconv.ParseUint(j.GetJobId(), 10, 64)
	if err != nil {
		n = 0
	}
	return ListKey{Num: n, Name: j.GetName()}
}

// Compare orders keys as their String forms sort.
func (k ListKey) Compare(o ListKey) int {
	switch {
	case k.Num < o.Num:
		return -1
	case k.Num > o.Num:
		return 1
	}
	return strings.Compare(k.Name, o.Name)
}

// Less reports whether k orders before o.
func (k ListKey) Less(o ListKey) bool { return k.Compare(o) < 0 }

// String is the key as paging.JobKey writes it.
func (k ListKey) String() string { return fmt.Sprintf("%020d %s", k.Num, k.Name) }

// ParseListKey reads a key paging.JobKey wrote; false for "" or a key of
// another shape, which the scheduler never hands out.
func ParseListKey(key string) (ListKey, bool) {
	if len(key) > 21 && key[20] == ' ' && strings.Trim(key[:20], "0123456789") == "" {
		if n, err := strconv.ParseUint(key[:20], 10, 64); err == nil {
			return ListKey{Num: n, Name: key[21:]}, true
		}
	}
	return ListKey{}, false
}

// pageHeap is a max-heap of list keys in the list's order (less): the
// last of the kept at the root.
type pageHeap struct {
	keys []ListKey
	less func(a, b ListKey) bool
}

func (h *pageHeap) Len() int           { return len(h.keys) }
func (h *pageHeap) Less(i, j int) bool { return h.less(h.keys[j], h.keys[i]) }
func (h *pageHeap) Swap(i, j int)      { h.keys[i], h.keys[j] = h.keys[j], h.keys[i] }
func (h *pageHeap) Push(x any)         { h.keys = append(h.keys, x.(ListKey)) }
func (h *pageHeap) Pop() any {
	k := h.keys[len(h.keys)-1]
	h.keys = h.keys[:len(h.keys)-1]
	return k
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

package domain

import (
	"slices"
	"strings"

	"github.com/google/btree"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"

	"github.com/loom-ml/loom/services/scheduler/internal/domain/views"
)

// projectList is one project's jobs in list order (views.ListKey): all of
// them, and the active ones (neither ended nor cancelled), so that a page
// of a project's jobs (squeue, sacct, ListJobs) reads from its token on and
// stops at its size, rather than testing and sorting every job kept (a
// page was ~250 ms of the state's read lock at 125,000 jobs).
//
// The lists are made on the first list that needs them (BuildLists, ~200 ms
// at 125,000 jobs), not by Load: a restarted scheduler's first decision
// does not wait for them (issue 12's restart), and a follower that serves
// no list never pays for them. Once made, every job put keeps them.
type projectList struct {
	all, active *btree.BTreeG[views.ListKey]
}

// listDegree is the B-trees' degree: nodes of up to 63 keys (24 bytes each).
const listDegree = 32

func newProjectList() *projectList {
	return &projectList{all: btree.NewG(listDegree, views.ListKey.Less), active: btree.NewG(listDegree, views.ListKey.Less)}
}

// projectOfJob is the project part of a job's name ("projects/{p}" of
// "projects/{p}/jobs/{id}"; a project may be named jobs), "" for a name of
// another shape. It allocates nothing: a slice of name.
func projectOfJob(name string) string {
	rest, ok := strings.CutPrefix(name, "projects/")
	if !ok {
		return ""
	}
	p, tail, ok := strings.Cut(rest, "/")
	if !ok || !strings.HasPrefix(tail, "jobs/") {
		return ""
	}
	return name[:len("projects/")+len(p)]
}

// relist moves a job's entries in its project's lists from what old (nil:
// none) had to what j (nil: none, the job is gone) has, once the lists are
// made. A change that keeps the key and whether the job is active (most: a
// reason, a run's start) costs two comparisons.
func (s *State) relist(old, j *Job) {
	if s.lists == nil {
		return
	}
	var ok, nk views.ListKey
	oldActive, newActive := false, false
	if old != nil {
		ok, oldActive = views.KeyOf(old.Job), !old.Job.GetState().Terminal()
	}
	if j != nil {
		nk, newActive = views.KeyOf(j.Job), !j.Job.GetState().Terminal()
	}
	if old != nil && j != nil && ok == nk && oldActive == newActive {
		return
	}
	if old != nil {
		if l := s.lists[projectOfJob(ok.Name)]; l != nil {
			l.all.Delete(ok)
			if oldActive {
				l.active.Delete(ok)
			}
			if l.all.Len() == 0 {
				delete(s.lists, projectOfJob(ok.Name))
			}
		}
	}
	if j != nil {
		s.list(nk, newActive)
	}
}

// list adds k to its project's lists (to the active one too when active).
func (s *State) list(k views.ListKey, active bool) {
	p := projectOfJob(k.Name)
	l := s.lists[p]
	if l == nil {
		l = newProjectList()
		s.lists[p] = l
	}
	l.all.ReplaceOrInsert(k)
	if active {
		l.active.ReplaceOrInsert(k)
	}
}

// Listed reports whether the project lists are made (BuildLists).
func (s *State) Listed() bool { return s.lists != nil }

// BuildLists makes the project lists if they are not made yet: every
// job's key sorted once, then inserted in order. It changes the state, so
// it runs under the writers' lock, like Commit; until it has run,
// ProjectJobs walks every job.
func (s *State) BuildLists() {
	if s.lists != nil {
		return
	}
	keys := make([]views.ListKey, 0, len(s.jobs))
	active := make([]bool, 0, len(s.jobs))
	for _, j := range s.jobs {
		keys = append(keys, views.KeyOf(j.Job))
	}
	slices.SortFunc(keys, views.ListKey.Compare)
	for _, k := range keys {
		active = append(active, !s.jobs[k.Name].Job.GetState().Terminal())
	}
	s.lists = map[string]*projectList{}
	for i, k := range keys {
		s.list(k, active[i])
	}
}

// ProjectJobs calls fn with project's jobs in list order from the first
// after after (or the first), the active ones only when active, until fn
// returns false (views.JobSource); desc walks the order backwards, from
// the last job before after (or the last). Before BuildLists it walks and
// sorts every job of the project: the same jobs, slower.
func (s *State) ProjectJobs(project string, active bool, after views.ListKey, first, desc bool, fn func(j *loomv1.Job) bool) {
	if s.lists == nil {
		var js []*loomv1.Job
		for _, j := range s.jobs {
			k := views.KeyOf(j.Job)
			if projectOfJob(j.Name()) == project && (!active || !j.Job.GetState().Terminal()) &&
				(first || (!desc && after.Less(k)) || (desc && k.Less(after))) {
				js = append(js, j.Job)
			}
		}
		slices.SortFunc(js, func(a, b *loomv1.Job) int { return views.KeyOf(a).Compare(views.KeyOf(b)) })
		if desc {
			slices.Reverse(js)
		}
		for _, j := range js {
			if !fn(j) {
				return
			}
		}
		return
	}
	l := s.lists[project]
	if l == nil {
		return
	}
	t := l.all
	if active {
		t = l.active
	}
	each := func(k views.ListKey) bool {
		if !first && k == after {
			return true
		}
		j := s.jobs[k.Name]
		return j == nil || fn(j.Job)
	}
	switch {
	case desc && first:
		t.Descend(each)
	case desc:
		t.DescendLessOrEqual(after, each)
	case first:
		t.Ascend(each)
	default:
		t.AscendGreaterOrEqual(after, each)
	}
}

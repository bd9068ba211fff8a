package domain

import (
	"sort"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"

	"github.com/loom-ml/loom/services/scheduler/internal/domain/goodput"
	"github.com/loom-ml/loom/services/scheduler/internal/domain/jobstore"
)

// Retention (Slurm's MinJobAge): an ended job stays in the live state, with
// its runs, for MinJobAge after its end, and only once every step of every
// run of it has ended (a COMPLETING job, or one whose old requeued run still
// stops, stays). Then Prune drops the job, its runs and, once none of its
// tasks is left, its array, and keeps a compact Ended record (state, start,
// end, cluster and final goodput) for EndedAge, so that dependencies on it
// resolve as before, and its goodput is still served: afterok
// on a pruned COMPLETED job is satisfied, afternotok on it never is. Arrays'
// % limits and fair-share usage do not read ended jobs (running tasks are
// counted from live runs; usage is charged when an attempt ends and kept in
// its own records), so pruning does not change them. The gateway keeps the
// accounting history (sacct) of pruned jobs.

// Defaults of Retention.
const (
	// DefaultMinJobAge is Slurm's MinJobAge default (300 s).
	DefaultMinJobAge = 5 * time.Minute
	// DefaultEndedAge is how long a pruned job's compact record is kept for
	// dependencies on it: as long as the gateway's job history by default.
	DefaultEndedAge = 30 * 24 * time.Hour
)

// Retention says how long ended jobs are kept.
type Retention struct {
	// MinJobAge: how long an ended job stays after its end (0: DefaultMinJobAge).
	MinJobAge time.Duration
	// EndedAge: how long a pruned job's Ended record is kept after its end
	// (0: DefaultEndedAge; at least MinJobAge).
	EndedAge time.Duration
}

func (r Retention) withDefaults() Retention {
	if r.MinJobAge <= 0 {
		r.MinJobAge = DefaultMinJobAge
	}
	if r.EndedAge <= 0 {
		r.EndedAge = DefaultEndedAge
	}
	r.EndedAge = max(r.EndedAge, r.MinJobAge)
	return r
}

// Ended is the compact record of a job pruned from the live state
// (jobstore.Ended).
type Ended = jobstore.Ended

// endedJob returns the record as the dependency code reads jobs.
func endedJob(e *Ended) *Job {
	j := &loomv1.Job{Name: e.Name, State: e.State, EndTime: timestamppb.New(e.End)}
	if !e.Start.IsZero() {
		j.StartTime = timestamppb.New(e.Start)
	}
	return &Job{JobRecord: jobstore.JobRecord{Job: j}}
}

// Pruned is what one Prune removes and adds; it is stored (one atomic
// write) before CommitPrune makes it part of the state.
type Pruned struct {
	// Jobs, Runs and Arrays are the names and keys of the records dropped.
	Jobs   []string
	Runs   []string
	Arrays []string
	// Ended are the compact records of the jobs dropped; Expired the names
	// of compact records dropped in turn (EndedAge passed).
	Ended   []*Ended
	Expired []string
	// StepRequests are the keys of requests of the dropped runs' waiting
	// steps (none, when every path that ends a run ended them: dropped with
	// the run all the same, so that none outlives it).
	StepRequests []string
	// More says that more was due than max allowed: prune again.
	More bool
}

// Empty reports whether p changes nothing.
func (p *Pruned) Empty() bool {
	return len(p.Jobs) == 0 && len(p.Runs) == 0 && len(p.Arrays) == 0 && len(p.Ended) == 0 && len(p.Expired) == 0
}

// Prune returns what retention drops as of now: at most max jobs (0: no
// bound) and max expired records. It does not change the state.
func (s *State) Prune(now time.Time, ret Retention, max int) *Pruned {
	ret = ret.withDefaults()
	p := &Pruned{}
	var names []string
	for name, j := range s.jobs {
		if !j.Terminal() || j.Job.GetEndTime() == nil || now.Sub(j.Job.GetEndTime().AsTime()) < ret.MinJobAge {
			continue
		}
		held := false
		for a := int32(1); a <= j.Attempt; a++ {
			if r := s.runs[RunKey(name, a)]; r != nil && !runDone(r) {
				held = true
				break
			}
		}
		if !held {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	if max > 0 && len(names) > max {
		names, p.More = names[:max], true
	}
	for _, name := range names {
		j := s.jobs[name]
		p.Jobs = append(p.Jobs, name)
		for a := int32(1); a <= j.Attempt; a++ {
			if r := s.runs[RunKey(name, a)]; r != nil {
				p.Runs = append(p.Runs, RunKey(name, a))
				for i := range r.JobSteps {
					if key := StepRequestKey(r.Key(), r.JobSteps[i].ID); s.stepReqs[key] != nil {
						p.StepRequests = append(p.StepRequests, key)
					}
				}
			}
		}
		// The job has ended: its goodput is final, and kept for `loom jobs
		// goodput` and the cluster's figure.
		e := &Ended{Name: name, State: j.Job.GetState(), End: j.Job.GetEndTime().AsTime(), Cluster: j.Job.GetCluster(),
			Goodput: new(goodput.Figures(j.Job, s.runsOf(j), now))}
		if j.Job.GetStartTime() != nil {
			e.Start = j.Job.GetStartTime().AsTime()
		}
		p.Ended = append(p.Ended, e)
	}
	p.Expired = s.expiredEnded(now.Add(-ret.EndedAge), max)
	expired := make(map[string]bool, len(p.Expired))
	for _, name := range p.Expired {
		expired[name] = true
	}
	sort.Strings(p.Expired)
	// An array goes when none of its tasks is left, live or as a record (a
	// task dropped now leaves its record).
	for name, a := range s.arrays {
		left := false
		for _, task := range a.Tasks {
			if s.jobs[task] != nil || (s.ended[task] != nil && !expired[task]) {
				left = true
				break
			}
		}
		if !left {
			p.Arrays = append(p.Arrays, name)
		}
	}
	sort.Strings(p.Arrays)
	return p
}

// CommitPrune makes p part of the state. p must come from this state's
// Prune with no change committed in between.
func (s *State) CommitPrune(p *Pruned) {
	for _, key := range p.Runs {
		s.putRun(key, nil)
	}
	for _, key := range p.StepRequests {
		delete(s.stepReqs, key)
	}
	for _, name := range p.Jobs {
		s.putJob(name, nil)
	}
	for _, name := range p.Arrays {
		delete(s.arrays, name)
	}
	s.dropEnded(p.Expired)
	for _, e := range p.Ended {
		s.putEnded(e)
	}
}

// LoadEnded adds compact records read from storage, as at start-up.
func (s *State) LoadEnded(ended []*Ended) {
	if s.ended == nil {
		s.ended = make(map[string]*Ended, len(ended))
	}
	for _, e := range ended {
		s.putEnded(e)
	}
}

// EndedRecord returns the compact record of a pruned job (not to be
// modified), or nil.
func (s *State) EndedRecord(name string) *Ended { return s.ended[name] }

// ended returns the compact record of a pruned job, or nil.
func (t *txn) ended(name string) *Ended { return t.s.ended[name] }

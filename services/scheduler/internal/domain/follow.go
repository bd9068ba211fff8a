package domain

import (
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Update is what a follower learns from the leader's change log: the
// stored version of every record some write touched since it last looked
// (nil: the record was deleted), by the key the store keeps it under.
type Update struct {
	Clusters map[string]*Cluster
	Nodes    map[string]*Node
	Jobs     map[string]*Job
	Runs     map[string]*Run
	Arrays   map[string]*Array
	Usage    map[string]*Usage
	Assocs   map[string]*AssocLimit
	Ended    map[string]*Ended
	// StepRequests: waiting job steps' requests (nil: deleted).
	StepRequests map[string][]byte
}

// Empty reports whether u touches nothing.
func (u *Update) Empty() bool {
	return len(u.Clusters) == 0 && len(u.Nodes) == 0 && len(u.Jobs) == 0 && len(u.Runs) == 0 &&
		len(u.Arrays) == 0 && len(u.Usage) == 0 && len(u.Assocs) == 0 && len(u.Ended) == 0 && len(u.StepRequests) == 0
}

// ArrayTemplate returns the template of the array stored under name (the
// job every task of it differs from), or nil: a follower decodes a logged
// task against it.
func (s *State) ArrayTemplate(name string) *loomv1.Job {
	if a := s.arrays[name]; a != nil {
		return a.Template
	}
	return nil
}

// Follow makes the records of u the state's, as the leader's writes left
// them: the state becomes the one loading every stored record afresh
// gives (TestFollowMatchesRestored), without the load. The state must hold
// what the store held before those writes (a load, then Follows). Commit
// does the work, as it does for the leader's own changes, so the indexes
// follow the records the same way; u's job records take their arrays'
// templates first, as Load's do. The records of u become the state's.
func (s *State) Follow(u *Update) {
	for name, a := range u.Arrays {
		if a != nil {
			s.arrays[name] = a
		}
	}
	for _, j := range u.Jobs {
		if j != nil {
			s.withTemplate(j)
		}
	}
	s.Commit(&Change{Clusters: u.Clusters, Nodes: u.Nodes, Jobs: u.Jobs, Runs: u.Runs, Usage: u.Usage, Assocs: u.Assocs,
		StepRequests: u.StepRequests})
	for name, a := range u.Arrays {
		if a == nil {
			delete(s.arrays, name)
		}
	}
	var gone []string
	for name, e := range u.Ended {
		if e == nil {
			gone = append(gone, name)
		}
	}
	s.dropEnded(gone)
	for _, e := range u.Ended {
		if e != nil {
			s.putEnded(e)
		}
	}
}

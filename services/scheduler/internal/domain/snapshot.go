package domain

import (
	"maps"
	"slices"
)

// Snapshot is every record of a state, as its store holds them: what Load
// takes back after a restart.
type Snapshot struct {
	Clusters []*Cluster
	Nodes    []*Node
	Jobs     []*Job
	Runs     []*Run
	Arrays   []*Array
	Usage    []*Usage
	Assocs   []*AssocLimit
	// StepRequests are the waiting job steps' requests (shared: never
	// changed in place).
	StepRequests map[string][]byte
}

// Snapshot returns copies of the state's records, in no particular order,
// fit to Load into a new state (as a restarted scheduler loads what it
// stored) while this one goes on. Job protobufs are shared: the state never
// mutates them.
func (s *State) Snapshot() Snapshot {
	return Snapshot{
		Clusters:     slices.Collect(maps.Values(s.clusters)),
		Nodes:        slices.Collect(maps.Values(s.nodes)),
		Jobs:         slices.Collect(maps.Values(s.jobs)),
		Runs:         slices.Collect(maps.Values(s.runs)),
		Arrays:       slices.Collect(maps.Values(s.arrays)),
		Usage:        slices.Collect(maps.Values(s.usage)),
		Assocs:       s.AssocLimits(),
		StepRequests: maps.Clone(s.stepReqs),
	}.Copy()
}

// Copy returns a snapshot of copies of snap's records, in the same order,
// fit to Load into another state while snap's records go on being used (a
// record's working fields, a job's why and placed, are not copied). Job
// protobufs are shared, as Snapshot shares them.
func (snap Snapshot) Copy() Snapshot {
	jobs := make([]*Job, len(snap.Jobs))
	for i, j := range snap.Jobs {
		jj := *j
		jj.why, jj.placed = nil, nil
		jobs[i] = &jj
	}
	runs := make([]*Run, len(snap.Runs))
	for i, r := range snap.Runs {
		runs[i] = r.clone()
	}
	return Snapshot{Clusters: copies(snap.Clusters), Nodes: copies(snap.Nodes), Jobs: jobs, Runs: runs,
		Arrays: copies(snap.Arrays), Usage: copies(snap.Usage), Assocs: copies(snap.Assocs),
		StepRequests: maps.Clone(snap.StepRequests)}
}

// copies returns a shallow copy of each record of rs.
func copies[T any](rs []*T) []*T {
	out := make([]*T, len(rs))
	for i, r := range rs {
		c := *r
		out[i] = &c
	}
	return out
}

// Restore is Load of a snapshot.
func (s *State) Restore(snap Snapshot) {
	s.Load(snap.Clusters, snap.Nodes, snap.Jobs, snap.Runs, snap.Arrays, snap.Usage)
	s.LoadAssocLimits(snap.Assocs)
	s.LoadStepRequests(snap.StepRequests)
}

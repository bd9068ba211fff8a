package domain

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
}

// Snapshot returns copies of the state's records, in no particular order,
// fit to Load into a new state (as a restarted scheduler loads what it
// stored) while this one goes on. Job protobufs are shared: the state never
// mutates them.
func (s *State) Snapshot() Snapshot {
	var out Snapshot
	for _, c := range s.clusters {
		cc := *c
		out.Clusters = append(out.Clusters, &cc)
	}
	for _, n := range s.nodes {
		nn := *n
		out.Nodes = append(out.Nodes, &nn)
	}
	for _, j := range s.jobs {
		jj := *j
		jj.why, jj.placed = nil, nil
		out.Jobs = append(out.Jobs, &jj)
	}
	for _, r := range s.runs {
		out.Runs = append(out.Runs, r.clone())
	}
	for _, a := range s.arrays {
		aa := *a
		out.Arrays = append(out.Arrays, &aa)
	}
	for _, u := range s.usage {
		uu := *u
		out.Usage = append(out.Usage, &uu)
	}
	out.Assocs = s.AssocLimits()
	return out
}

// Restore is Load of a snapshot.
func (s *State) Restore(snap Snapshot) {
	s.Load(snap.Clusters, snap.Nodes, snap.Jobs, snap.Runs, snap.Arrays, snap.Usage)
	s.LoadAssocLimits(snap.Assocs)
}

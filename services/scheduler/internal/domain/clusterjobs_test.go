package domain

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler/internal/domain/goodput"
	"github.com/loom-ml/loom/services/scheduler/internal/domain/jobstore"
)

// clusterGoodputWalk is ClusterGoodput as it was before the jobs were
// indexed by cluster (clusterJobs): a walk of every job of every cluster.
// What the index must answer exactly.
func clusterGoodputWalk(s *State, cluster string, since, now time.Time) *loomv1.Goodput {
	if s.clusters[cluster] == nil {
		return nil
	}
	var total goodput.Total
	var runs []*jobstore.RunRecord
	for _, j := range s.jobs {
		if j.Job.GetCluster() != cluster {
			continue
		}
		if j.Terminal() && j.Job.GetEndTime() != nil && j.Job.GetEndTime().AsTime().Before(since) {
			continue
		}
		runs = s.appendRuns(runs[:0], j)
		f := goodput.Figures(j.Job, runs, now)
		total.Add(&f)
	}
	s.endedGoodput(cluster, since, &total)
	return total.Goodput(cluster)
}

// checkClusterJobs fails unless clusterJobs holds every job, under its
// job's cluster, and nothing else; and ClusterGoodput answers as the walk
// of every job does, for each cluster (and one unknown), as of now, for
// windows that begin before, at, and just after the jobs' ends.
func checkClusterJobs(t *testing.T, label string, s *State, now time.Time) {
	t.Helper()
	s.IndexClusterJobs() // built at the first check; kept by every change after
	n := 0
	for cluster, names := range s.clusterJobs {
		if len(names) == 0 {
			t.Fatalf("%s: clusterJobs keeps %s with no jobs", label, cluster)
		}
		for name := range names {
			if j := s.jobs[name]; j == nil || j.Job.GetCluster() != cluster {
				t.Fatalf("%s: clusterJobs[%s] holds %s, the state %v", label, cluster, name, j)
			}
		}
		n += len(names)
	}
	if n != len(s.jobs) {
		t.Fatalf("%s: clusterJobs holds %d jobs, the state %d", label, n, len(s.jobs))
	}
	sinces := []time.Time{{}, now, now.Add(-time.Hour)}
	for _, j := range s.jobs {
		if e := j.Job.GetEndTime(); e != nil && len(sinces) < 12 {
			sinces = append(sinces, e.AsTime(), e.AsTime().Add(time.Nanosecond))
		}
	}
	clusters := []string{"projects/none/clusters/gone"}
	for c := range s.clusters {
		clusters = append(clusters, c)
	}
	for _, c := range clusters {
		for _, since := range sinces {
			got, want := s.ClusterGoodput(c, since, now), clusterGoodputWalk(s, c, since, now)
			if !proto.Equal(got, want) {
				t.Fatalf("%s: ClusterGoodput(%s, since %v) = %v; the walk of every job: %v", label, c, since, got, want)
			}
		}
	}
}

// TestClusterGoodputMatchesTheWalk: ClusterGoodput, which reads only the
// cluster's jobs (clusterJobs), answers exactly as the walk of every job
// did, on random states: after every event of random workloads; then with
// a second cluster's copy loaded beside them (the bulk load); then as
// jobs are deleted, moved to the other cluster and put back at random;
// and after retention prunes the ended ones.
func TestClusterGoodputMatchesTheWalk(t *testing.T) {
	t.Parallel()
	for seed := uint64(1); seed <= 6; seed++ {
		label := "seed " + strconv.Itoa(int(seed))
		// Any instant will do to compare the two: both read the same.
		late := time.Now().Add(24 * time.Hour)
		h := randomFeatures(t, seed, 200, func(s *State, _ *Change) { checkClusterJobs(t, label, s, late) })
		now := h.now.Add(time.Minute)
		checkClusterJobs(t, label, h.s, now)

		snap := h.s.Snapshot()
		two := NewState(h.s.Config())
		two.Restore(interleave(snap, secondCluster(snap)))
		checkClusterJobs(t, label+", two clusters", two, now)

		rng := rand.New(rand.NewPCG(seed, 3))
		names := make([]string, 0, len(two.jobs))
		for name := range two.jobs {
			names = append(names, name)
		}
		slices.Sort(names)
		clusters := []string{cl, "projects/p2/clusters/c2"}
		for step := range 60 {
			name := names[rng.IntN(len(names))]
			j := two.jobs[name]
			var nj *Job
			switch {
			case j == nil:
				nj = h.s.jobs[name] // put back (the first cluster's), or none
				if nj == nil {
					nj = snap.Copy().Jobs[rng.IntN(len(snap.Jobs))]
					name = nj.Name()
				}
			case rng.IntN(2) == 0:
				// Deleted (nj nil).
			default:
				c := *j
				c.Job = proto.Clone(j.Job).(*loomv1.Job)
				c.Job.Cluster = clusters[rng.IntN(len(clusters))]
				nj = &c
			}
			two.Commit(&Change{Jobs: map[string]*Job{name: nj}})
			checkClusterJobs(t, label+", step "+strconv.Itoa(step), two, now)
		}

		p := two.Prune(now.Add(3*time.Hour), Retention{MinJobAge: time.Hour}, 0)
		two.CommitPrune(p)
		if len(p.Jobs) == 0 {
			t.Fatalf("%s: retention pruned nothing", label)
		}
		checkClusterJobs(t, label+", pruned", two, now.Add(3*time.Hour))
	}
}

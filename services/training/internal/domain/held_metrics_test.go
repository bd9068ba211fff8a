package domain

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// heldTrial starts the study's first trial and its cluster (its job
// submitted, no JobChanged read), and returns its scheduler job's name and
// what makes a node's record of val_loss at steps (attempt, signed by the
// node of the trial's cluster named host) and a node's step end.
func heldTrial(t *testing.T, s *State) (job string,
	metrics func(attempt int32, host string, steps ...int64) Input, ended func(attempt int32, host string) Input) {
	t.Helper()
	feed(t, s, tuningJob(tunName, 2, 1, 0))
	tr := tuningOf(t, s, tunName).GetTrials()[0]
	n, err := ParseName(tr.GetCustomJob(), CustomJobs)
	if err != nil {
		t.Fatal(err)
	}
	feed(t, s, clusterIs(n.EphemeralCluster(), loomv1.Cluster_RUNNING))
	cluster := n.EphemeralCluster()
	metrics = func(attempt int32, host string, steps ...int64) Input {
		m := &eventsv1.MetricsReported{Job: n.Job(), Attempt: attempt, Node: cluster + "/nodes/" + host}
		for _, st := range steps {
			m.Points = append(m.Points, &eventsv1.MetricsReported_Point{Step: st, Values: map[string]float64{"val_loss": 1 / float64(st)}})
		}
		return Input{Payload: m, Signer: "nodes/" + cluster + "/nodes/" + host}
	}
	ended = func(attempt int32, host string) Input {
		return Input{Payload: &eventsv1.StepChanged{Job: n.Job(), Attempt: attempt, Node: cluster + "/nodes/" + host,
			State: eventsv1.StepState_STEP_EXITED}, Signer: "nodes/" + cluster + "/nodes/" + host}
	}
	return n.Job(), metrics, ended
}

// steps are the step counts of the trial's measurements.
func steps(tr *trainingv1.Trial) []int64 {
	var out []int64
	for _, m := range tr.GetMeasurements() {
		out = append(out, m.GetStepCount())
	}
	return out
}

// TestMetricsBeforeTheirRunAreHeld: a node's metrics read before the job's
// event that names its run (JobChanged and MetricsReported travel on
// different topics) are held, not lost: a job whose one scheduler pass
// took it from PENDING to COMPLETED has its trial judged on them at its
// end, not INFEASIBLE; a requeued attempt's, read before its RUNNING, join
// the trial once it comes; an earlier attempt's, read after a later one
// ran elsewhere, join when the job's final event lists its runs. A node
// that turns out not to run it counts for nothing, one of another cluster
// is refused, and nothing held outlives the job.
func TestMetricsBeforeTheirRunAreHeld(t *testing.T) {
	t.Parallel()

	// One pass, PENDING to COMPLETED: every record precedes the job's only event.
	s := NewState()
	job, metrics, ended := heldTrial(t, s)
	handle(t, s, t0, metrics(1, "n-0001", 1, 2))
	handle(t, s, t0, metrics(1, "n-0009", 3)) // not the run's node
	handle(t, s, t0, ended(1, "n-0001"))
	if got := tuningOf(t, s, tunName).GetTrials()[0]; len(got.GetMeasurements()) != 0 {
		t.Fatalf("metrics taken before the run's nodes were known: %v", got.GetMeasurements())
	}
	done := jobIs(job, loomv1.JobState_COMPLETED)
	handle(t, s, t0.Add(time.Second), Input{Payload: done})
	got := tuningOf(t, s, tunName).GetTrials()[0]
	if got.GetState() != trainingv1.Trial_SUCCEEDED || got.GetFinalMeasurement().GetStepCount() != 2 || len(got.GetMeasurements()) != 2 {
		t.Fatalf("trial of a one-pass run, its metrics read before its event: %v", got)
	}
	if p := s.Lookup(tunName).CJs[0].PendingMetrics; len(p) != 0 {
		t.Errorf("metrics still held after the job ended: %v", p)
	}

	// A requeued attempt on another node: its metrics come before its
	// RUNNING, and the previous attempt's late ones after it.
	s = NewState()
	job, metrics, _ = heldTrial(t, s)
	run := func(attempt int32, state loomv1.JobState, host string) *eventsv1.JobChanged {
		ev := jobIs(job, state)
		ev.Attempt, ev.Job.Nodes = attempt, []string{host}
		return ev
	}
	handle(t, s, t0, Input{Payload: run(1, loomv1.JobState_RUNNING, "n-0001")})
	handle(t, s, t0, metrics(1, "n-0001", 1))
	handle(t, s, t0, metrics(2, "n-0002", 2, 3))
	handle(t, s, t0, metrics(2, "n-0009", 9)) // not the run's node
	if c, err := s.Handle(t0, Input{Payload: metrics(2, "n-0002", 7).Payload, Signer: "nodes/projects/q/clusters/z/nodes/n-0002"}); c != nil || !errors.Is(err, ErrIgnored) {
		t.Fatalf("another cluster's node's metrics: %v %v", c, err)
	}
	if got := steps(tuningOf(t, s, tunName).GetTrials()[0]); fmt.Sprint(got) != "[1]" {
		t.Fatalf("steps before attempt 2's event: %v, want [1]", got)
	}
	handle(t, s, t0, Input{Payload: run(2, loomv1.JobState_RUNNING, "n-0002")})
	if got := steps(tuningOf(t, s, tunName).GetTrials()[0]); fmt.Sprint(got) != "[1 2 3]" {
		t.Fatalf("steps once attempt 2's event came: %v, want [1 2 3]", got)
	}
	handle(t, s, t0, metrics(1, "n-0001", 4)) // attempt 1's, late, from a node attempt 2 does not run on
	if p := s.Lookup(tunName).CJs[0].PendingMetrics; len(p) != 1 || p[0].Attempt != 1 {
		t.Fatalf("held after attempt 2's event: %v, want attempt 1's late record", p)
	}
	final := run(2, loomv1.JobState_COMPLETED, "n-0002")
	final.Job.Runs = []*loomv1.JobRun{{Attempt: 1, Nodes: []string{"n-0001"}}, {Attempt: 2, Nodes: []string{"n-0002"}}}
	step(t, s, t0.Add(time.Second), Input{Payload: final})
	got = tuningOf(t, s, tunName).GetTrials()[0]
	if fmt.Sprint(steps(got)) != "[1 2 3 4]" || got.GetState() != trainingv1.Trial_SUCCEEDED {
		t.Fatalf("trial at its job's end: %v, want steps [1 2 3 4]", got)
	}

	// Bounded: nodes, and measurements in all; a full hold refuses, never
	// fails the service.
	s = NewState()
	_, metrics, _ = heldTrial(t, s)
	for i := range MaxPendingMetricRuns {
		handle(t, s, t0, metrics(1, fmt.Sprintf("x-%04d", i), 1))
	}
	if c, err := s.Handle(t0, metrics(1, "x-over", 1)); c != nil || !errors.Is(err, ErrIgnored) {
		t.Fatalf("a node's record past %d nodes held: %v %v", MaxPendingMetricRuns, c, err)
	}
	long := make([]int64, 3*MaxPendingMeasurements)
	for i := range long {
		long[i] = int64(i + 1)
	}
	// (A group of the flood is thinned to make room.)
	handle(t, s, t0, metrics(1, "x-0000", long...))
	held, n := s.Lookup(tunName).CJs[0].PendingMetrics, 0
	for _, p := range held {
		n += len(p.Measurements)
	}
	if len(held) > MaxPendingMetricRuns || n > MaxPendingMeasurements {
		t.Fatalf("%d nodes', %d measurements held; bounds %d, %d", len(held), n, MaxPendingMetricRuns, MaxPendingMeasurements)
	}
	if last := held[0].Measurements[len(held[0].Measurements)-1]; last.GetStepCount() != int64(len(long)) {
		t.Errorf("thinning lost the last step held: %v", last)
	}
}

// TestNodeMetricsNeedThePlacement: after a requeue cleared a trial's
// placement (and before the first is known) a node's metrics count only
// once the job's event names the node for their run: any node could claim
// to run it.
func TestNodeMetricsNeedThePlacement(t *testing.T) {
	t.Parallel()
	s := NewState()
	n, point := runningTrial(t, s, tuningJob(tunName, 2, 1, 0))
	feed(t, s, &eventsv1.JobChanged{Job: &loomv1.Job{Name: n.Job(), JobId: fmt.Sprint(n.ID), State: loomv1.JobState_PENDING}, Attempt: 2})
	p := point(1, 5)
	p.Attempt = 2
	handle(t, s, t0, Input{Payload: p, Signer: "nodes/" + n.EphemeralCluster() + "/nodes/n-0001"})
	if got := tuningOf(t, s, tunName).GetTrials()[0]; len(got.GetMeasurements()) != 0 {
		t.Fatalf("a node's metrics for a requeued trial taken before its placement: %v", got.GetMeasurements())
	}
	// Attempt 2 runs elsewhere: n-0001's claim is dropped.
	ev := jobIs(n.Job(), loomv1.JobState_RUNNING)
	ev.Attempt, ev.Job.Nodes = 2, []string{"n-0002"}
	feed(t, s, ev)
	if got := tuningOf(t, s, tunName).GetTrials()[0]; len(got.GetMeasurements()) != 0 || len(s.Lookup(tunName).CJs[0].PendingMetrics) != 0 {
		t.Fatalf("the metrics of a node that did not run the attempt: %v, held %v", got.GetMeasurements(), s.Lookup(tunName).CJs[0].PendingMetrics)
	}
	// The trusted writers (services) are not held to it.
	if _, err := s.Handle(t0, Input{Payload: point(1, 5), Signer: "services/scheduler"}); err != nil {
		t.Fatalf("a service's metrics: %v", err)
	}
}

// held are the step counts held for (attempt, host) of the study's first
// trial, nil when none are.
func held(s *State, attempt int32, host string) []int64 {
	var out []int64
	for _, p := range s.Lookup(tunName).CJs[0].PendingMetrics {
		if p.Attempt == attempt && strings.HasSuffix(p.Node, "/nodes/"+host) {
			for _, m := range p.Measurements {
				out = append(out, m.GetStepCount())
			}
		}
	}
	return out
}

// TestHeldMetricsAreSharedByNode: the metrics held until their run is
// named are shared between the nodes that send them: a node of the job's
// cluster that is not the run's (on a persistent cluster it may run
// another job) that filled the hold, with one attempt's many steps or with
// many attempts, has its own thinned or evicted to make room for another
// node's, and not the other way round, so the run's nodes' points are
// held and count once its event comes.
func TestHeldMetricsAreSharedByNode(t *testing.T) {
	t.Parallel()

	// Measurements: a stranger fills them all with one attempt's steps.
	s := NewState()
	job, metrics, _ := heldTrial(t, s)
	flood := make([]int64, MaxPendingMeasurements)
	for i := range flood {
		flood[i] = int64(1000 + i)
	}
	handle(t, s, t0, metrics(1, "n-0009", flood...))
	if c, err := s.Handle(t0, metrics(1, "n-0001", 1, 2)); err != nil || c == nil {
		t.Fatalf("the run's node's metrics refused while a stranger's fill the hold: %v %v", c, err)
	} else {
		s.Apply(c)
	}
	if got := held(s, 1, "n-0001"); fmt.Sprint(got) != "[1 2]" {
		t.Fatalf("the run's node holds %v, want [1 2]", got)
	}
	if n := len(held(s, 1, "n-0009")); n == 0 || n > MaxPendingMeasurements-2 {
		t.Fatalf("the stranger holds %d measurements, want it thinned to make room", n)
	}
	// The stranger, holding the most, cannot take the room back.
	handle(t, s, t0, metrics(1, "n-0009", 5000, 5001, 5002))
	if got := held(s, 1, "n-0001"); fmt.Sprint(got) != "[1 2]" {
		t.Fatalf("the stranger's next record took the run's node's room: it holds %v", got)
	}
	done := jobIs(job, loomv1.JobState_COMPLETED)
	done.Job.Nodes = []string{"n-0001"}
	step(t, s, t0.Add(time.Second), Input{Payload: done})
	if got := tuningOf(t, s, tunName).GetTrials()[0]; fmt.Sprint(steps(got)) != "[1 2]" || got.GetState() != trainingv1.Trial_SUCCEEDED {
		t.Fatalf("trial at its job's end: %v, want steps [1 2], SUCCEEDED", got)
	}

	// Pairs: a stranger fills them with as many attempts.
	s = NewState()
	_, metrics, _ = heldTrial(t, s)
	for a := range MaxPendingMetricRuns {
		handle(t, s, t0, metrics(int32(a+1), "n-0009", 1))
	}
	c, err := s.Handle(t0, metrics(1, "n-0001", 7))
	if err != nil || c == nil {
		t.Fatalf("the run's node's metrics refused while a stranger's attempts fill the hold: %v %v", c, err)
	}
	s.Apply(c)
	if got := held(s, 1, "n-0001"); fmt.Sprint(got) != "[7]" {
		t.Fatalf("the run's node holds %v, want [7]", got)
	}
	if len(held(s, MaxPendingMetricRuns, "n-0009")) != 0 || len(held(s, 1, "n-0009")) == 0 {
		t.Errorf("evicted another of the stranger's attempts than its farthest from the run's: %v", s.Lookup(tunName).CJs[0].PendingMetrics)
	}
	// The stranger, holding the most, cannot evict the run's node.
	if c, err := s.Handle(t0, metrics(MaxPendingMetricRuns+1, "n-0009", 1)); c != nil || !errors.Is(err, ErrIgnored) {
		t.Fatalf("a node holding the most attempts held one more: %v %v", c, err)
	}
}

// TestHeldMetricsDropsAreCounted: each record held until its run is named
// that never joins the trial's measurements is counted by why
// (Change.Dropped, or the refusal's DroppedBy): its run was on other
// nodes, the job ended first, another node's needed the room, or there
// was no room to hold it.
func TestHeldMetricsDropsAreCounted(t *testing.T) {
	t.Parallel()
	s := NewState()
	job, metrics, _ := heldTrial(t, s)
	handle(t, s, t0, metrics(1, "n-0001", 1))
	handle(t, s, t0, metrics(1, "n-0009", 1))
	handle(t, s, t0, metrics(1, "n-0009", 2))
	handle(t, s, t0, metrics(3, "n-0008", 5))
	run := jobIs(job, loomv1.JobState_RUNNING) // attempt 1 on n-0001
	if c := handle(t, s, t0, Input{Payload: run}); fmt.Sprint(c.Dropped) != "map[not-run:2]" {
		t.Fatalf("dropped when the run was named %v, want n-0009's 2 records not-run", c.Dropped)
	}
	// Its step ends not read: the trial waits for its metrics.
	if c := handle(t, s, t0.Add(time.Second), Input{Payload: jobIs(job, loomv1.JobState_COMPLETED)}); fmt.Sprint(c.Dropped) != "map[job-ended:1]" {
		t.Fatalf("dropped at the job's end %v, want n-0008's record of attempt 3 job-ended", c.Dropped)
	}
	_, err := s.Handle(t0, metrics(4, "n-0008", 6))
	if r, ok := DroppedBy(err); !errors.Is(err, ErrIgnored) || !ok || r != DroppedJobEnded {
		t.Fatalf("a record for a run not named after the job ended: %v (reason %q)", err, r)
	}

	// Room: a stranger's attempt evicted, then a record refused.
	s = NewState()
	_, metrics, _ = heldTrial(t, s)
	for a := range MaxPendingMetricRuns {
		handle(t, s, t0, metrics(int32(a+1), "n-0009", 1))
	}
	handle(t, s, t0, metrics(MaxPendingMetricRuns, "n-0009", 2)) // the farthest attempt: 2 records
	if c := handle(t, s, t0, metrics(1, "n-0001", 7)); fmt.Sprint(c.Dropped) != "map[evicted:2]" {
		t.Fatalf("dropped for the run's node's room %v, want the stranger's farthest attempt's 2 records evicted", c.Dropped)
	}
	_, err = s.Handle(t0, metrics(MaxPendingMetricRuns+1, "n-0009", 1))
	if r, ok := DroppedBy(err); !errors.Is(err, ErrIgnored) || !ok || r != DroppedHeldFull {
		t.Fatalf("a record with no room to hold it: %v (reason %q)", err, r)
	}
	// A node refused at once: the run is named and the node is not one of
	// its nodes, or the node is not of the job's cluster.
	s = NewState()
	job, metrics, _ = heldTrial(t, s)
	handle(t, s, t0, Input{Payload: jobIs(job, loomv1.JobState_RUNNING)}) // attempt 1 on n-0001
	_, err = s.Handle(t0, metrics(1, "n-0009", 3))
	if r, ok := DroppedBy(err); !errors.Is(err, ErrIgnored) || !ok || r != DroppedNotPlaced {
		t.Fatalf("a record of the named run from a node that does not run it: %v (reason %q)", err, r)
	}
	_, err = s.Handle(t0, Input{Payload: metrics(2, "n-0001", 3).Payload, Signer: "nodes/projects/q/clusters/z/nodes/n-0001"})
	if r, ok := DroppedBy(err); !errors.Is(err, ErrIgnored) || !ok || r != DroppedOtherCluster {
		t.Fatalf("a record from a node of another cluster: %v (reason %q)", err, r)
	}
	// Other refusals carry no reason of the hold.
	if _, ok := DroppedBy(ignored("x")); ok {
		t.Fatal("a plain refusal carries a drop reason")
	}
}

// TestHeldMetricsOfTheRunWinOverStrangers: nodes of the job's cluster that
// do not run it (compromised agents: each signs as itself only), each
// holding one (attempt, node) pair, flood the hold before the run's event
// is read; the run's node's records, read after them, are still held and
// all join the trial once the event names the run. The bound: while at
// most MaxPendingMetricRuns nodes hold (the run's among them), a node
// holding one attempt is never refused nor evicted, and keeps at least
// its last 2 measurements, whatever the others hold.
func TestHeldMetricsOfTheRunWinOverStrangers(t *testing.T) {
	t.Parallel()
	for _, strangers := range []int{MaxPendingStepEnds, MaxPendingMetricRuns - 1} {
		t.Run(fmt.Sprint(strangers), func(t *testing.T) {
			t.Parallel()
			s := NewState()
			job, metrics, _ := heldTrial(t, s)
			for i := range strangers {
				handle(t, s, t0, metrics(1, fmt.Sprintf("x-%04d", i), 1))
			}
			for st := int64(1); st <= 3; st++ {
				handle(t, s, t0, metrics(1, "n-0001", st))
			}
			done := jobIs(job, loomv1.JobState_COMPLETED) // attempt 1 on n-0001
			c := step(t, s, t0.Add(time.Second), Input{Payload: done})
			got := tuningOf(t, s, tunName).GetTrials()[0]
			if fmt.Sprint(steps(got)) != "[1 2 3]" || got.GetState() != trainingv1.Trial_SUCCEEDED {
				t.Fatalf("trial at its job's end after %d strangers: %v, want steps [1 2 3], SUCCEEDED", strangers, got)
			}
			if c.Dropped[DroppedNotRun] != strangers {
				t.Errorf("dropped %v, want the %d strangers' records not-run", c.Dropped, strangers)
			}
		})
	}

	// Strangers filling the measurements (as many as the bound allows,
	// with 2 each; or fewer, with more each): the run's node's record is
	// thinned to its share, never refused, and its last step is held.
	for _, tc := range []struct{ strangers, each int }{{MaxPendingMetricRuns - 1, 2}, {MaxPendingMeasurements / 4, 4}} {
		t.Run(fmt.Sprintf("%dx%d", tc.strangers, tc.each), func(t *testing.T) {
			t.Parallel()
			s := NewState()
			job, metrics, _ := heldTrial(t, s)
			var theirs []int64
			for st := range tc.each {
				theirs = append(theirs, int64(st+1))
			}
			for i := range tc.strangers {
				handle(t, s, t0, metrics(1, fmt.Sprintf("x-%04d", i), theirs...))
			}
			handle(t, s, t0, metrics(1, "n-0001", 1, 2, 3, 4, 5, 6, 7, 8))
			if got := held(s, 1, "n-0001"); len(got) < 2 || got[len(got)-1] != 8 {
				t.Fatalf("the run's node holds %v, want at least 2 ending at step 8", got)
			}
			for i := range tc.strangers {
				if got := held(s, 1, fmt.Sprintf("x-%04d", i)); len(got) < 2 {
					t.Fatalf("x-%04d holds %v: a node within its share lost it", i, got)
				}
			}
			step(t, s, t0.Add(time.Second), Input{Payload: jobIs(job, loomv1.JobState_COMPLETED)})
			if got := tuningOf(t, s, tunName).GetTrials()[0]; got.GetFinalMeasurement().GetStepCount() != 8 {
				t.Fatalf("trial at its job's end: %v, want its final measurement at step 8", got)
			}
		})
	}
}

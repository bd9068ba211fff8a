package domain

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"

	"github.com/loom-ml/loom/services/scheduler/internal/domain/views"
)

func parts(p string) func(*loomv1.Job) { return func(j *loomv1.Job) { j.Partition = p } }

func exclusive(j *loomv1.Job) { j.Exclusive = true }

// TestMultiPartitionStartsWhereItFits: a job of -p gpu,cpu whose first
// partition is full starts in the second, shows that one alone while it
// runs, and goes back to the whole list when requeued.
func TestMultiPartitionStartsWhereItFits(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	h.gpuNode("a3-0001", "b1")
	h.cpuNode("cpu-0001")
	h.submitJob(job(1, 1, 0, parts("gpu"), exclusive))
	h.wantState(1, loomv1.JobState_RUNNING, "")
	h.submitJob(job(2, 1, 0, parts("gpu,cpu"), exclusive))
	h.wantState(2, loomv1.JobState_RUNNING, "")
	if j := h.job(2); j.GetPartition() != "cpu" || j.GetNodes()[0] != "cpu-0001" {
		t.Fatalf("job 2 runs in %q on %v; want cpu on cpu-0001", j.GetPartition(), j.GetNodes())
	}
	// The list, the partition it runs in first (slurmctld's
	// rebuild_job_part_list: a requeued job shows cpu,gpu).
	if r := h.s.JobRecord(jobName(2)); r.Partitions != "cpu,gpu" {
		t.Fatalf("job 2 keeps the list %q; want cpu,gpu", r.Partitions)
	}
	if r := h.s.Run(jobName(2), 1); r.Partition != "cpu" {
		t.Fatalf("run in %q", r.Partition)
	}
	// Both full: it waits with the list, for its first partition's reason.
	h.submitJob(job(3, 1, 0, parts("gpu,cpu"), exclusive))
	h.wantState(3, loomv1.JobState_PENDING, ReasonResources)
	if p := h.job(3).GetPartition(); p != "gpu,cpu" {
		t.Fatalf("pending job 3 in %q; want gpu,cpu", p)
	}
	// squeue -p cpu lists it.
	if l := views.List(h.s, views.JobFilter{Partitions: []string{"cpu"}}, h.now); !hasJob(l, jobName(3)) {
		t.Fatalf("squeue -p cpu leaves out job 3")
	}
	// Requeued: pending again in both, the one it ran in first.
	c := h.do(&eventsv1.UpdateJob{Job: jobName(2), Cluster: cl, Action: ActionRequeue})
	for _, jc := range jobChanges(c) {
		if jc.GetJob().GetName() == jobName(2) && jc.GetJob().GetState() == loomv1.JobState_PENDING && jc.GetJob().GetPartition() != "cpu,gpu" {
			t.Fatalf("requeued job 2 pending in %q; want cpu,gpu", jc.GetJob().GetPartition())
		}
	}
	if r := h.s.JobRecord(jobName(2)); r.Job.GetPartition() != "cpu,gpu" || r.Partitions != "" {
		t.Fatalf("requeued job 2: partition %q, list %q", r.Job.GetPartition(), r.Partitions)
	}
	// Its old run ends; the job 1 ends: job 2 and 3 both start, each
	// where there is room.
	h.step(2, 1, "cpu-0001", eventsv1.StepState_STEP_KILLED, 143)
	h.finish(1, 0)
	h.wantState(2, loomv1.JobState_RUNNING, "")
	h.wantState(3, loomv1.JobState_RUNNING, "")
	if a, b := h.job(2).GetPartition(), h.job(3).GetPartition(); a == b || (a != "gpu" && a != "cpu") || (b != "gpu" && b != "cpu") {
		t.Fatalf("jobs 2 and 3 run in %q and %q", a, b)
	}
}

// TestMultiPartitionTierFirst: among the partitions a job names, a higher
// PriorityTier is tried first whatever the order, and gives the job its
// partition factor.
func TestMultiPartitionTierFirst(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{}, &loomv1.SlurmPartition{Id: "urgent", NodeSetIds: []string{"cpu"}, PriorityTier: 10, MaxTime: "UNLIMITED"})
	h.submitJob(job(1, 1, 0, parts("cpu,urgent")))
	h.wantState(1, loomv1.JobState_PENDING, ReasonReqNodeNotAvail)
	if v := views.Job(h.s, jobName(1), h.now); v.GetPriorityFactors().GetPartition() != DefaultWeightPartition {
		t.Fatalf("partition factor %d; want the highest tier's %d", v.GetPriorityFactors().GetPartition(), DefaultWeightPartition)
	}
	h.cpuNode("cpu-0001")
	h.wantState(1, loomv1.JobState_RUNNING, "")
	if p := h.job(1).GetPartition(); p != "urgent" {
		t.Fatalf("job 1 runs in %q; want urgent (tier 10)", p)
	}
}

// TestMultiPartitionLimits: a partition whose MaxTime the job's --time
// passes is skipped; past all of them the job reads PartitionTimeLimit; a
// partition the cluster lacks is skipped, and with none it has the job
// reads PartitionConfig; scontrol update Partition=a,b gives a pending job
// the list.
func TestMultiPartitionLimits(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{}, &loomv1.SlurmPartition{Id: "short", NodeSetIds: []string{"cpu"}, MaxTime: "1:00:00"})
	h.gpuNode("a3-0001", "b1")
	h.cpuNode("cpu-0001")
	h.submitJob(job(1, 1, 0, parts("gpu,cpu"), limit(48*time.Hour)))
	h.wantState(1, loomv1.JobState_RUNNING, "")
	if p := h.job(1).GetPartition(); p != "cpu" {
		t.Fatalf("job 1 (2 days) runs in %q; want cpu (gpu's MaxTime is 1 day)", p)
	}
	h.submitJob(job(2, 1, 0, parts("gpu,short"), limit(48*time.Hour)))
	h.wantState(2, loomv1.JobState_PENDING, ReasonPartitionTimeLimit)
	h.submitJob(job(3, 1, 0, parts("nope,gone")))
	h.wantState(3, loomv1.JobState_PENDING, ReasonPartitionConfig)
	h.submitJob(job(4, 1, 0, parts("nope,gpu")))
	h.wantState(4, loomv1.JobState_RUNNING, "")
	if p := h.job(4).GetPartition(); p != "gpu" {
		t.Fatalf("job 4 runs in %q; want gpu", p)
	}
	// An update to a list: every name must exist, else nothing changes.
	h.do(&eventsv1.UpdateJob{Job: jobName(2), Cluster: cl, Action: ActionUpdate, Partition: "gpu,nope"})
	if p := h.job(2).GetPartition(); p != "gpu,short" {
		t.Fatalf("update to gpu,nope left %q", p)
	}
	h.do(&eventsv1.UpdateJob{Job: jobName(2), Cluster: cl, Action: ActionUpdate, Partition: "short,cpu"})
	h.wantState(2, loomv1.JobState_RUNNING, "")
	if p := h.job(2).GetPartition(); p != "cpu" {
		t.Fatalf("job 2 runs in %q; want cpu", p)
	}
}

func hasJob(l []*loomv1.Job, name string) bool {
	for _, j := range l {
		if j.GetName() == name {
			return true
		}
	}
	return false
}

// TestMultiPartitionTimeLimitRaise: a user's raise of the limit of a
// pending -p a,b job without --time is capped by the largest MaxTime of its
// partitions (as the gateway caps it), not let through because the list is
// no one partition's name; with an unlimited partition in the list, nothing
// caps it.
func TestMultiPartitionTimeLimitRaise(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{},
		&loomv1.SlurmPartition{Id: "short", NodeSetIds: []string{"cpu"}, MaxTime: "1:00:00"},
		&loomv1.SlurmPartition{Id: "mid", NodeSetIds: []string{"cpu"}, MaxTime: "2:00:00"})
	held := func(j *loomv1.Job) { j.Hold = true }
	h.submitJob(job(1, 1, 0, parts("short,mid"), held))
	h.do(&eventsv1.UpdateJob{Job: jobName(1), Cluster: cl, Action: ActionUpdate, TimeLimitSeconds: 3 * 3600})
	if got := h.job(1).GetTimeLimitSeconds(); got != 0 {
		t.Fatalf("a user's update set %d s on a job of short,mid (MaxTime 2 h at most); want it dropped", got)
	}
	h.do(&eventsv1.UpdateJob{Job: jobName(1), Cluster: cl, Action: ActionUpdate, TimeLimitSeconds: 5400})
	if got := h.job(1).GetTimeLimitSeconds(); got != 5400 {
		t.Fatalf("a user's 1.5 h on a job of short,mid: %d s; want 5400", got)
	}
	h.submitJob(job(2, 1, 0, parts("short,cpu"), held))
	h.do(&eventsv1.UpdateJob{Job: jobName(2), Cluster: cl, Action: ActionUpdate, TimeLimitSeconds: 3 * 3600})
	if got := h.job(2).GetTimeLimitSeconds(); got != 3*3600 {
		t.Fatalf("a user's 3 h on a job of short,cpu (cpu unlimited): %d s; want 10800", got)
	}
}

// TestMultiPartitionRemovedPartition: a cluster update that removes some of
// the partitions a job names takes them out of its list, as slurmctld does
// (b,c less c is b): a pending job shows the rest (and says so in a
// JobChanged), a running job's list (its requeue) loses them; a job left
// with none ends as a single-partition job does.
func TestMultiPartitionRemovedPartition(t *testing.T) {
	t.Parallel()
	h := harnessWith(t, Config{Policy: DefaultPolicy()})
	pa := &loomv1.SlurmPartition{Id: "pa", NodeSetIds: []string{"a"}, Default: true}
	pab := &loomv1.SlurmPartition{Id: "pab", NodeSetIds: []string{"a", "b"}}
	pb := &loomv1.SlurmPartition{Id: "pb", NodeSetIds: []string{"b"}}
	pc := &loomv1.SlurmPartition{Id: "pc", NodeSetIds: []string{"b"}}
	h.do(twoPoolCluster(pa, pab, pb, pc))
	h.poolNode("a-0001", "a")
	held := func(j *loomv1.Job) { j.Hold = true }
	h.submitJob(job(1, 1, 0, inPart("pa,pc", 8)))
	h.submitJob(job(2, 1, 0, inPart("pb,pa", 1), held))
	h.submitJob(job(3, 1, 0, inPart("pb,pc", 1), held))
	h.submitJob(job(4, 1, 0, inPart("pc,pab,pb", 1), held))
	h.wantState(1, loomv1.JobState_RUNNING, "")
	if r := h.s.JobRecord(jobName(1)); r.Partitions != "pa,pc" {
		t.Fatalf("job 1 keeps %q; want pa,pc", r.Partitions)
	}

	c := h.do(twoPoolCluster(pa, pab))
	h.wantState(1, loomv1.JobState_RUNNING, "")
	if r := h.s.JobRecord(jobName(1)); r.Partitions != "" || r.Job.GetPartition() != "pa" {
		t.Fatalf("running job 1: partition %q, list %q; want pa and no list", r.Job.GetPartition(), r.Partitions)
	}
	h.wantExact(2, loomv1.JobState_PENDING, ReasonHeldUser)
	if p := h.job(2).GetPartition(); p != "pa" {
		t.Fatalf("pending job 2 of pb,pa in %q after pb went; want pa", p)
	}
	h.wantPartitionGone(3, "pb,pc")
	if p := h.job(4).GetPartition(); p != "pab" {
		t.Fatalf("pending job 4 of pc,pab,pb in %q; want pab", p)
	}
	shown := map[string]string{}
	for _, jc := range jobChanges(c) {
		shown[jc.GetJob().GetName()] = jc.GetJob().GetPartition()
	}
	if shown[jobName(2)] != "pa" || shown[jobName(4)] != "pab" {
		t.Fatalf("JobChanged partitions %v; want job 2 in pa and job 4 in pab", shown)
	}
	// Requeued, job 1 is pending in pa alone.
	h.do(&eventsv1.UpdateJob{Job: jobName(1), Cluster: cl, Action: ActionRequeue})
	if p := h.job(1).GetPartition(); p != "pa" {
		t.Fatalf("requeued job 1 in %q; want pa", p)
	}
}

// tierHarness is a cluster of two pools, a in partition hi (PriorityTier
// 10) and b in partition lo (tier 1), one n2-standard-8 node each, under
// cfg, whose policy defaults to Loom's (multifactor order, backfill,
// preemption).
func tierHarness(t *testing.T, cfg Config) *harness {
	if cfg.Policy.Name == "" {
		cfg.Policy = DefaultPolicy()
	}
	h := harnessWith(t, cfg)
	h.do(twoPoolCluster(
		&loomv1.SlurmPartition{Id: "hi", NodeSetIds: []string{"a"}, PriorityTier: 10, Default: true},
		&loomv1.SlurmPartition{Id: "lo", NodeSetIds: []string{"b"}, PriorityTier: 1}))
	h.poolNode("a-0001", "a")
	h.poolNode("b-0001", "b")
	return h
}

// TestMultiPartitionWaitsBehindLo: a job of -p hi,lo is considered in lo at
// lo's rank, not its highest tier's. With hi full, when lo's node frees up,
// lo's own pending job of higher priority takes it; the hi,lo job does not
// jump it (as slurmctld's queue has one record per job and partition, each
// at that partition's PriorityTier and priority).
func TestMultiPartitionWaitsBehindLo(t *testing.T) {
	t.Parallel()
	h := tierHarness(t, Config{})
	h.submitJob(job(1, 1, 0, inPart("hi", 8)))
	h.submitJob(job(2, 1, 0, inPart("lo", 8)))
	h.wantState(1, loomv1.JobState_RUNNING, "")
	h.wantState(2, loomv1.JobState_RUNNING, "")
	h.submitJob(job(3, 1, 0, inPart("lo", 8)))
	h.tick(time.Hour) // job 3 is an hour older: a higher priority in lo
	h.submitJob(job(4, 1, 0, inPart("hi,lo", 8)))
	h.wantState(3, loomv1.JobState_PENDING, ReasonResources)
	h.wantState(4, loomv1.JobState_PENDING, ReasonResources)

	h.finish(2, 0)
	h.wantState(3, loomv1.JobState_RUNNING, "")
	if n := h.job(3).GetNodes(); len(n) != 1 || n[0] != "b-0001" {
		t.Fatalf("job 3 runs on %v; want b-0001", n)
	}
	// Waiting for hi, its first record: hi's Resources.
	h.wantState(4, loomv1.JobState_PENDING, ReasonResources)
	if p := h.job(4).GetPartition(); p != "hi,lo" {
		t.Fatalf("pending job 4 in %q; want hi,lo", p)
	}
}

// TestMultiPartitionStartsInLo: a job of -p hi,lo that nothing in lo
// outranks still starts in lo while hi is full, ahead of lo's job of lower
// priority, and runs with its priority in lo (lo's partition factor).
func TestMultiPartitionStartsInLo(t *testing.T) {
	t.Parallel()
	// Age and partition factors alone: a priority is 1000·age + 1000 in
	// hi, 1000·age + 100 in lo.
	h := tierHarness(t, Config{Weights: Weights{Age: DefaultWeightAge, Partition: DefaultWeightPartition}})
	h.submitJob(job(1, 1, 0, inPart("hi", 8)))
	h.submitJob(job(2, 1, 0, inPart("lo", 8)))
	h.submitJob(job(3, 1, 0, inPart("hi,lo", 8)))
	h.tick(time.Hour) // job 3 is an hour older than job 4
	h.submitJob(job(4, 1, 0, inPart("lo", 8)))
	h.wantState(3, loomv1.JobState_PENDING, ReasonResources)
	// Job 3 outranks it in lo and waits there too.
	h.wantState(4, loomv1.JobState_PENDING, ReasonPriority)

	h.finish(2, 0)
	h.wantState(3, loomv1.JobState_RUNNING, "")
	if j := h.job(3); j.GetPartition() != "lo" || len(j.GetNodes()) != 1 || j.GetNodes()[0] != "b-0001" {
		t.Fatalf("job 3 runs in %q on %v; want lo on b-0001", j.GetPartition(), j.GetNodes())
	}
	h.wantState(4, loomv1.JobState_PENDING, ReasonResources)
	// An hour of age is round(1000·1h/7d) = 6.
	if got := h.job(3).GetPriority(); got != 106 {
		t.Fatalf("job 3 started with priority %d; want 106 (its priority in lo, not hi's 1006)", got)
	}
}

// TestMultiPartitionReasonAtLastRecord: a -p hi,lo job's reason is given
// once, at its record in lo, after lo's jobs it ranks behind, in a pass
// that gives stored jobs their reasons as records (a tick): each job gets
// its own.
func TestMultiPartitionReasonAtLastRecord(t *testing.T) {
	t.Parallel()
	h := tierHarness(t, Config{})
	h.submitJob(job(1, 1, 0, inPart("hi", 8)))
	h.submitJob(job(2, 1, 0, inPart("lo", 8)))
	h.submitJob(job(3, 1, 0, inPart("lo", 8)))
	h.submitJob(job(4, 1, 0, inPart("hi,lo", 8), func(j *loomv1.Job) { j.BeginTime = timestamppb.New(h.now.Add(30 * time.Minute)) }))
	h.submitJob(job(5, 1, 0, inPart("lo", 8)))
	h.wantState(3, loomv1.JobState_PENDING, ReasonResources)
	h.wantState(4, loomv1.JobState_PENDING, ReasonBeginTime)
	h.wantState(5, loomv1.JobState_PENDING, ReasonPriority)
	h.tick(time.Hour)
	h.wantState(3, loomv1.JobState_PENDING, ReasonResources)
	h.wantState(4, loomv1.JobState_PENDING, ReasonResources)
	h.wantState(5, loomv1.JobState_PENDING, ReasonPriority)
}

// TestMultiPartitionRandomKeepsInvariants plays random submissions of jobs
// of hi, lo, hi,lo and lo,hi (their records interleaved with the queue's
// entries, over passes that reuse and mend the last order), step ends,
// holds, releases, cancels and ticks, and checks after every change that
// nothing is held twice, every gang got all its nodes and every job is
// decided once: a pending job has one reason, a started one one run.
func TestMultiPartitionRandomKeepsInvariants(t *testing.T) {
	t.Parallel()
	lists := []string{"hi", "lo", "hi,lo", "lo,hi"}
	for seed := uint64(1); seed <= 10; seed++ {
		rng := rand.New(rand.NewPCG(seed, 3))
		h := tierHarness(t, Config{})
		h.poolNode("a-0002", "a")
		h.poolNode("b-0002", "b")
		next := 1
		for range 200 {
			var c *Change
			switch op := rng.IntN(10); {
			case op < 4:
				j := job(next, 1, 0, inPart(lists[rng.IntN(len(lists))], int32(1+rng.IntN(8))),
					limit(time.Duration(1+rng.IntN(30))*time.Minute))
				j.Nice = int32(rng.IntN(3) * 500)
				c = h.submitJob(j)
				next++
			case op < 7:
				if ev := randomStepEnd(h.s, rng); ev != nil {
					c = h.do(ev)
				}
			case op < 8 && next > 1:
				c = h.do(&eventsv1.UpdateJob{Job: jobName(1 + rng.IntN(next-1)), Cluster: cl,
					Action: []string{ActionHold, ActionRelease, ActionRequeue}[rng.IntN(3)]})
			default:
				c = h.tick(time.Duration(rng.IntN(600)) * time.Second)
			}
			if c == nil {
				continue
			}
			checkInvariants(t, h.s)
			checkGangs(t, h.s, c)
			started := map[string]bool{}
			for _, jc := range jobChanges(c) {
				if j := jc.GetJob(); j.GetState() == loomv1.JobState_RUNNING && !started[j.GetName()] {
					started[j.GetName()] = true
					if slices.Contains(lists[2:], j.GetPartition()) {
						t.Fatalf("seed %d: job %s started in %q", seed, j.GetName(), j.GetPartition())
					}
				}
			}
			// One reservation at most, for a job still pending (a job
			// that started at a later record gave its own back).
			if len(c.Reservations) > 1 {
				t.Fatalf("seed %d: reservations %+v", seed, c.Reservations)
			}
			for _, r := range c.Reservations {
				if j := h.s.Job(r.Job); j == nil || j.GetState() != loomv1.JobState_PENDING {
					t.Fatalf("seed %d: reservation %+v of a job not pending", seed, r)
				}
			}
			decided := map[string]int{}
			for _, d := range c.Decisions {
				if decided[d.Job]++; decided[d.Job] > 1 {
					t.Fatalf("seed %d: job %s decided twice in one change", seed, d.Job)
				}
			}
		}
	}
}

// TestMultiPartitionReservesWhereSoonest: a job of -p hi,lo that fits in
// neither reserves in the partition where it starts soonest, here lo (its
// node frees up in 30 minutes, hi's in 2.5 hours), with lo's reason: lo's
// job of lower priority that would run past that start does not backfill
// onto the node it waits for, as it would with the reservation in hi.
func TestMultiPartitionReservesWhereSoonest(t *testing.T) {
	t.Parallel()
	h := tierHarness(t, Config{Weights: Weights{Age: DefaultWeightAge, Partition: DefaultWeightPartition}})
	h.submitJob(job(1, 1, 0, inPart("hi", 4), limit(3*time.Hour)))
	h.submitJob(job(4, 1, 0, inPart("lo", 4), limit(time.Hour)))
	h.wantState(1, loomv1.JobState_RUNNING, "")
	h.wantState(4, loomv1.JobState_RUNNING, "")
	h.submitJob(job(2, 1, 0, inPart("hi,lo", 8), limit(time.Hour)))
	h.tick(30 * time.Minute) // job 2 outranks job 6 in lo
	c := h.submitJob(job(6, 1, 0, inPart("lo", 4), limit(2*time.Hour)))
	h.wantState(6, loomv1.JobState_PENDING, ReasonPriority)
	h.wantState(2, loomv1.JobState_PENDING, ReasonResources)
	end4 := h.job(4).GetStartTime().AsTime().Add(time.Hour)
	v := views.Job(h.s, jobName(2), h.now)
	if !slices.Equal(v.GetSchedNodes(), []string{"b-0001"}) || !v.GetExpectedStartTime().AsTime().Equal(end4) {
		t.Fatalf("job 2 reserved %v from %v; want b-0001 (lo) from %v", v.GetSchedNodes(), v.GetExpectedStartTime().AsTime(), end4)
	}
	if len(c.Reservations) != 1 || c.Reservations[0].Job != jobName(2) {
		t.Fatalf("reservations %+v; want job 2's alone", c.Reservations)
	}
}

// TestMultiPartitionReservesFirstOnTie: a job of -p hi,lo that starts as
// soon in either keeps the reservation of the first by tier, hi.
func TestMultiPartitionReservesFirstOnTie(t *testing.T) {
	t.Parallel()
	h := tierHarness(t, Config{})
	begin := func(j *loomv1.Job) { j.BeginTime = timestamppb.New(h.now.Add(10 * time.Minute)) }
	h.submitJob(job(1, 1, 0, inPart("hi", 4), limit(time.Hour), begin))
	h.submitJob(job(4, 1, 0, inPart("lo", 4), limit(time.Hour), begin))
	h.tick(10 * time.Minute) // both start in one pass: their ends tie
	h.wantState(1, loomv1.JobState_RUNNING, "")
	h.wantState(4, loomv1.JobState_RUNNING, "")
	h.submitJob(job(2, 1, 0, inPart("hi,lo", 8), limit(time.Hour)))
	h.wantState(2, loomv1.JobState_PENDING, ReasonResources)
	if v := views.Job(h.s, jobName(2), h.now); !slices.Equal(v.GetSchedNodes(), []string{"a-0001"}) {
		t.Fatalf("job 2 reserved %v; want a-0001 (hi, the first by tier)", v.GetSchedNodes())
	}
}

// TestMultiPartitionReasonWhereItCanStart: a job of -p hi,lo whose hi has
// no node, lo full, waits for lo's resources (lo's reason, lo's
// reservation), not for hi's nodes that do not exist.
func TestMultiPartitionReasonWhereItCanStart(t *testing.T) {
	t.Parallel()
	h := harnessWith(t, Config{Policy: DefaultPolicy()})
	h.do(twoPoolCluster(
		&loomv1.SlurmPartition{Id: "hi", NodeSetIds: []string{"a"}, PriorityTier: 10, Default: true},
		&loomv1.SlurmPartition{Id: "lo", NodeSetIds: []string{"b"}, PriorityTier: 1}))
	h.poolNode("b-0001", "b")
	h.submitJob(job(1, 1, 0, inPart("lo", 8), limit(time.Hour)))
	h.wantState(1, loomv1.JobState_RUNNING, "")
	h.submitJob(job(2, 1, 0, inPart("hi,lo", 8)))
	h.wantState(2, loomv1.JobState_PENDING, ReasonResources)
	if v := views.Job(h.s, jobName(2), h.now); !slices.Equal(v.GetSchedNodes(), []string{"b-0001"}) {
		t.Fatalf("job 2 reserved %v; want b-0001 (lo)", v.GetSchedNodes())
	}
}

// TestMultiPartitionStartReleasesReservation: a job of -p hi,lo that
// reserved hi's node at its record in hi, then starts in lo in the same
// pass, gives the reservation back: a later job of a partition over both
// pools backfills onto hi's node instead of waiting for a reservation of a
// job that runs elsewhere.
func TestMultiPartitionStartReleasesReservation(t *testing.T) {
	t.Parallel()
	cfg := Config{Policy: DefaultPolicy(), Weights: Weights{Age: DefaultWeightAge, Partition: DefaultWeightPartition}}
	h := harnessWith(t, cfg)
	h.do(twoPoolCluster(
		&loomv1.SlurmPartition{Id: "hi", NodeSetIds: []string{"a"}, PriorityTier: 10, Default: true},
		&loomv1.SlurmPartition{Id: "lo", NodeSetIds: []string{"b"}, PriorityTier: 1},
		&loomv1.SlurmPartition{Id: "all", NodeSetIds: []string{"a", "b"}, PriorityTier: 1}))
	h.poolNode("a-0001", "a")
	h.poolNode("b-0001", "b")
	h.submitJob(job(1, 1, 0, inPart("hi", 4), limit(2*time.Hour)))
	h.submitJob(job(4, 1, 0, inPart("lo", 8), limit(2*time.Hour)))
	h.submitJob(job(2, 1, 0, inPart("hi,lo", 8), limit(time.Hour)))
	h.tick(time.Hour) // job 2 outranks job 3 in tier 1
	h.submitJob(job(3, 1, 0, inPart("all", 4), limit(3*time.Hour)))
	h.wantState(2, loomv1.JobState_PENDING, ReasonResources)
	h.wantState(3, loomv1.JobState_PENDING, ReasonResources)

	// lo's node frees up: job 2 reserves a-0001 at its record in hi, then
	// starts on b-0001 at its record in lo; job 3 takes a-0001's room.
	c := h.do(&eventsv1.StepChanged{Job: jobName(4), Attempt: 1, Node: nodeName("b-0001"), State: eventsv1.StepState_STEP_EXITED, Cluster: cl})
	h.wantState(2, loomv1.JobState_RUNNING, "")
	if p := h.job(2).GetPartition(); p != "lo" {
		t.Fatalf("job 2 runs in %q; want lo", p)
	}
	h.wantState(3, loomv1.JobState_RUNNING, "")
	if n := h.job(3).GetNodes(); len(n) != 1 || n[0] != "a-0001" {
		t.Fatalf("job 3 runs on %v; want a-0001", n)
	}
	for _, r := range c.Reservations {
		if r.Job == jobName(2) {
			t.Fatalf("job 2 started and keeps reservation %+v", r)
		}
	}
}

// TestMultiPartitionPreemptsInLaterPartition: a high-QOS job of -p lo,hi
// (equal tiers: lo, first named, is its first record) cannot preempt in lo,
// whose node runs a job of QOS normal, but can in hi, whose node runs one
// of QOS low: it preempts there (as slurmctld tries each job and partition
// record, preemption included, until one begins preempting), waits for
// that room with hi's reservation, and starts in hi once the victim's
// step has ended.
func TestMultiPartitionPreemptsInLaterPartition(t *testing.T) {
	t.Parallel()
	h := harnessWith(t, Config{Policy: DefaultPolicy()})
	h.do(twoPoolCluster(
		&loomv1.SlurmPartition{Id: "lo", NodeSetIds: []string{"a"}, PriorityTier: 1, Default: true},
		&loomv1.SlurmPartition{Id: "hi", NodeSetIds: []string{"b"}, PriorityTier: 1}))
	h.poolNode("a-0001", "a")
	h.poolNode("b-0001", "b")
	h.submitJob(job(1, 1, 0, inPart("lo", 8), qos("normal"), limit(10*time.Hour)))
	h.submitJob(job(2, 1, 0, inPart("hi", 8), qos("low"), limit(10*time.Hour)))
	h.wantState(1, loomv1.JobState_RUNNING, "")
	h.wantState(2, loomv1.JobState_RUNNING, "")
	c := h.submitJob(job(3, 1, 0, inPart("lo,hi", 8), qos("high"), limit(time.Hour)))
	h.wantState(3, loomv1.JobState_PENDING, ReasonResources)
	if st := stops(c); len(st) != 1 || st[0].GetJob() != jobName(2) {
		t.Fatalf("stops %v; want job 2's (hi, QOS low) alone", st)
	}
	v := views.Job(h.s, jobName(3), h.now)
	if !strings.Contains(v.GetPlacement(), "preempting 1 job") || !slices.Equal(v.GetSchedNodes(), []string{"b-0001"}) {
		t.Fatalf("job 3: placement %q, reserved %v; want preempting 1 job, b-0001 (hi)", v.GetPlacement(), v.GetSchedNodes())
	}
	h.wantState(1, loomv1.JobState_RUNNING, "")
	// The next pass (a submission's): it waits for its victim, in hi, and
	// preempts nothing more.
	c = h.submitJob(job(4, 1, 0, inPart("lo", 8), qos("low")))
	if len(stops(c)) != 0 {
		t.Fatalf("a second pass stops %v", stops(c))
	}
	seen := false
	for _, d := range c.Decisions {
		if d.Job == jobName(3) {
			if seen = true; d.Note != "waiting for preempted jobs to stop" {
				t.Fatalf("job 3 on the next pass: %+v", d)
			}
		}
	}
	if !seen {
		t.Fatalf("no decision for job 3 on the next pass: %+v", c.Decisions)
	}
	h.step(2, 1, "b-0001", eventsv1.StepState_STEP_KILLED, 143)
	h.wantState(3, loomv1.JobState_RUNNING, "")
	if j := h.job(3); j.GetPartition() != "hi" || j.GetNodes()[0] != "b-0001" {
		t.Fatalf("job 3 runs in %q on %v; want hi on b-0001", j.GetPartition(), j.GetNodes())
	}
	h.wantState(1, loomv1.JobState_RUNNING, "")
}

// TestMultiPartitionBackfillsAroundLaterReservation: a job of -p hi,lo
// that fits in neither and would start sooner in lo (its nodes free up in
// 1.5 hours, hi's in 10) reserves in lo, not in hi first: hi's job of lower
// priority, too long to end before the job's start in hi, backfills onto
// hi's free node instead of being kept off it for a reservation that moves
// to lo at the job's record there.
func TestMultiPartitionBackfillsAroundLaterReservation(t *testing.T) {
	t.Parallel()
	h := tierHarness(t, Config{})
	h.poolNode("a-0002", "a")
	h.poolNode("b-0002", "b")
	h.submitJob(job(1, 1, 0, inPart("hi", 8), limit(10*time.Hour)))
	h.submitJob(job(2, 2, 0, inPart("lo", 8), limit(2*time.Hour)))
	h.wantState(1, loomv1.JobState_RUNNING, "")
	h.wantState(2, loomv1.JobState_RUNNING, "")
	h.submitJob(job(3, 2, 0, inPart("hi,lo", 8), limit(time.Hour)))
	h.wantState(3, loomv1.JobState_PENDING, ReasonResources)
	h.tick(30 * time.Minute) // job 3 outranks job 4 in hi
	c := h.submitJob(job(4, 1, 0, inPart("hi", 8), limit(20*time.Hour)))
	h.wantState(4, loomv1.JobState_RUNNING, "")
	if n := h.job(4).GetNodes(); len(n) != 1 || n[0] != "a-0002" {
		t.Fatalf("job 4 runs on %v; want a-0002", n)
	}
	h.wantState(3, loomv1.JobState_PENDING, ReasonResources)
	end2 := h.job(2).GetStartTime().AsTime().Add(2 * time.Hour)
	v := views.Job(h.s, jobName(3), h.now)
	if !slices.Equal(v.GetSchedNodes(), []string{"b-0001", "b-0002"}) || !v.GetExpectedStartTime().AsTime().Equal(end2) {
		t.Fatalf("job 3 reserved %v from %v; want b-0001, b-0002 (lo) from %v", v.GetSchedNodes(), v.GetExpectedStartTime().AsTime(), end2)
	}
	if len(c.Reservations) != 1 || c.Reservations[0].Job != jobName(3) {
		t.Fatalf("reservations %+v; want job 3's alone", c.Reservations)
	}
}

// noBackfillPolicy is Loom's order and preemption without backfill (a
// custom policy): a job that cannot start blocks the later jobs of its
// partition (blockFIFO).
func noBackfillPolicy() Policy {
	p := DefaultPolicy()
	p.Name, p.Backfill = "prio-preempt-nobf", false
	return p
}

// TestMultiPartitionNoBackfillTriesLaterPartition: without backfill, a job
// of -p hi,lo blocked in hi (its first record) still starts in lo, whose
// node is free: the block it set itself keeps hi's jobs after it waiting,
// not its own later records (slurmctld tries a job in each of its
// partitions). A job of hi alone ranked after it waits with Priority; one
// of lo alone is not held by hi's block (TestFIFOBlockIsPerPartition): it
// waits for lo's node, Resources.
func TestMultiPartitionNoBackfillTriesLaterPartition(t *testing.T) {
	t.Parallel()
	h := tierHarness(t, Config{Policy: noBackfillPolicy()})
	h.submitJob(job(1, 1, 0, inPart("hi", 8)))
	h.wantState(1, loomv1.JobState_RUNNING, "")
	h.submitJob(job(2, 1, 0, inPart("hi,lo", 8)))
	h.wantState(2, loomv1.JobState_RUNNING, "")
	if j := h.job(2); j.GetPartition() != "lo" || len(j.GetNodes()) != 1 || j.GetNodes()[0] != "b-0001" {
		t.Fatalf("job 2 runs in %q on %v; want lo on b-0001", j.GetPartition(), j.GetNodes())
	}
	h.submitJob(job(3, 1, 0, inPart("hi", 8)))
	h.submitJob(job(4, 1, 0, inPart("lo", 8)))
	h.submitJob(job(5, 1, 0, inPart("hi", 1)))
	h.wantState(3, loomv1.JobState_PENDING, ReasonResources)
	h.wantState(4, loomv1.JobState_PENDING, ReasonResources)
	h.wantState(5, loomv1.JobState_PENDING, ReasonPriority)
}

// TestMultiPartitionNoBackfillPreemptsInLaterPartition: without backfill,
// a high-QOS job of -p hi,lo that cannot preempt in hi (its node runs a
// job of QOS normal) preempts lo's job of QOS low at its record in lo,
// which its own block in hi does not skip.
func TestMultiPartitionNoBackfillPreemptsInLaterPartition(t *testing.T) {
	t.Parallel()
	h := tierHarness(t, Config{Policy: noBackfillPolicy()})
	h.submitJob(job(1, 1, 0, inPart("hi", 8), qos("normal")))
	h.submitJob(job(2, 1, 0, inPart("lo", 8), qos("low")))
	h.wantState(1, loomv1.JobState_RUNNING, "")
	h.wantState(2, loomv1.JobState_RUNNING, "")
	c := h.submitJob(job(3, 1, 0, inPart("hi,lo", 8), qos("high")))
	if st := stops(c); len(st) != 1 || st[0].GetJob() != jobName(2) {
		t.Fatalf("stops %v; want job 2's (lo, QOS low) alone", st)
	}
	h.wantState(3, loomv1.JobState_PENDING, ReasonResources)
	h.step(2, 1, "b-0001", eventsv1.StepState_STEP_KILLED, 143)
	h.wantState(3, loomv1.JobState_RUNNING, "")
	if j := h.job(3); j.GetPartition() != "lo" || j.GetNodes()[0] != "b-0001" {
		t.Fatalf("job 3 runs in %q on %v; want lo on b-0001", j.GetPartition(), j.GetNodes())
	}
	h.wantState(1, loomv1.JobState_RUNNING, "")
}

// TestMultiPartitionPreemptorCountsOnce: a job of -p lo,hi that looks for
// victims in both partitions (finding none: their nodes run jobs of QOS
// normal) is one preemptor of MaxPreemptPerPass, not one per partition:
// with a budget of 2, the next preemptor of the same pass, a job of c
// whose node runs a job of QOS low, still preempts it.
func TestMultiPartitionPreemptorCountsOnce(t *testing.T) {
	t.Parallel()
	cfg := Config{MaxPreemptPerPass: 2}
	cfg.Policy = DefaultPolicy()
	h := harnessWith(t, cfg)
	h.do(twoPoolCluster(
		&loomv1.SlurmPartition{Id: "lo", NodeSetIds: []string{"a"}, PriorityTier: 1, Default: true},
		&loomv1.SlurmPartition{Id: "hi", NodeSetIds: []string{"b"}, PriorityTier: 1},
		&loomv1.SlurmPartition{Id: "c", NodeSetIds: []string{"c"}, PriorityTier: 1}))
	h.poolNode("a-0001", "a")
	h.poolNode("b-0001", "b")
	h.poolNode("c-0001", "c")
	h.submitJob(job(1, 1, 0, inPart("lo", 8), qos("normal")))
	h.submitJob(job(2, 1, 0, inPart("hi", 8), qos("normal")))
	h.submitJob(job(3, 1, 0, inPart("c", 8), qos("low")))
	for id := 1; id <= 3; id++ {
		h.wantState(id, loomv1.JobState_RUNNING, "")
	}
	// Both become eligible in one pass (the tick's), job 4 first.
	begin := func(j *loomv1.Job) { j.BeginTime = timestamppb.New(h.now.Add(30 * time.Minute)) }
	h.submitJob(job(4, 1, 0, inPart("lo,hi", 8), qos("high"), begin))
	h.submitJob(job(5, 1, 0, inPart("c", 8), qos("high"), begin))
	c := h.tick(time.Hour)
	if st := stops(c); len(st) != 1 || st[0].GetJob() != jobName(3) {
		t.Fatalf("stops %v; want job 3's (c, QOS low): job 4 counts once against MaxPreemptPerPass", st)
	}
	h.wantState(4, loomv1.JobState_PENDING, ReasonResources)
	h.wantState(5, loomv1.JobState_PENDING, ReasonResources)
}

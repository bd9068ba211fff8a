package domain

import (
	"slices"
	"strconv"
	"testing"
	"time"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestExclusiveUserSharesWithTheSameUser follows Slurm 22.05 beside
// two nodes (two OS users): an --exclusive=user job holds its
// tasks' CPUs only (NumCPUs=1), the same user's jobs join its node, another
// user's wait for Resources; and an --exclusive=user job waits while
// another user's job runs on the node it needs, but joins its own user's.
func TestExclusiveUserSharesWithTheSameUser(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.cpuNode("cpu-a") // n2-standard-8: 8 CPUs
	h.cpuNode("cpu-b")
	sub := func(id int, user string, exclUser bool, host string) *Change {
		j := &loomv1.Job{Name: jobName(id), JobId: strconv.Itoa(id), Cluster: cl, NodeCount: 1, Ntasks: 1,
			User: user, ExclusiveUser: exclUser, Command: []string{"/bin/x"}}
		if host != "" {
			j.Nodelist = []string{host}
		}
		return h.submitJob(j)
	}
	sub(1, "alice", true, "cpu-a")
	h.wantState(1, loomv1.JobState_RUNNING, "")
	if r := h.s.Run(jobName(1), 1); r == nil || len(r.CPUs) != 1 || r.CPUs[0] != 1 || !r.ExclusiveUser {
		t.Fatalf("alice's --exclusive=user run: %+v, want 1 CPU held, ExclusiveUser", r)
	}
	sub(2, "alice", false, "cpu-a")
	h.wantState(2, loomv1.JobState_RUNNING, "")
	// Anywhere, with bob's job on cpu-b: only cpu-a, where alice alone runs.
	sub(6, "bob", false, "cpu-b")
	h.wantState(6, loomv1.JobState_RUNNING, "")
	sub(7, "alice", true, "")
	h.wantState(7, loomv1.JobState_RUNNING, "")
	if r := h.s.Run(jobName(7), 1); r == nil || r.Hostnames[0] != "cpu-a" {
		t.Fatalf("alice's second --exclusive=user job: %+v, want it on cpu-a", r)
	}
	c := sub(3, "bob", false, "cpu-a")
	h.wantState(3, loomv1.JobState_PENDING, ReasonResources)
	if d := decision(c, 3); d == nil || d.Filtered["OtherUser"] != 1 {
		t.Fatalf("bob's job beside alice's --exclusive=user: want cpu-a filtered as OtherUser, got %+v", d)
	}
	sub(4, "bob", false, "cpu-b")
	h.wantState(4, loomv1.JobState_RUNNING, "")
	// Behind bob's blocked job 3 it waits for Resources, as Slurm said:
	// its -w names the one node it needs (Loom said Priority, its rule for
	// a job behind a blocked one).
	c = sub(5, "alice", true, "cpu-b")
	h.wantState(5, loomv1.JobState_PENDING, ReasonResources)
	if d := decision(c, 5); d == nil || d.Filtered["OtherUser"] != 1 {
		t.Fatalf("alice's --exclusive=user beside bob's job: want cpu-b filtered as OtherUser, got %+v", d)
	}
	// Alice's jobs end: bob's waiting job takes cpu-a.
	for _, id := range []int{1, 2, 7} {
		h.finish(id, 0)
	}
	h.tick(0)
	h.wantState(3, loomv1.JobState_RUNNING, "")
	checkInvariants(t, h.s)
}

// TestDefaultChecksKeepTheQuickCount: every policy's default capacity
// checks (CheckUser among them) are what defaultCapacity knows, so that
// fittingNow counts the shape's candidates instead of scanning the
// partition's nodes for every preemptor.
func TestDefaultChecksKeepTheQuickCount(t *testing.T) {
	t.Parallel()
	for _, pol := range []Policy{FIFOPolicy(), EASYPolicy(), DefaultPolicy()} {
		s, now := benchCluster(4, 4, 0.5, 1)
		s.cfg.Policy = pol
		tx := writerTxn(s, now)
		if p := tx.newPass(cl, tx.cluster(cl)); !p.defaultCapacity() {
			t.Errorf("policy %s: its default checks are not defaultCapacity's", pol.Name)
		}
	}
}

// cpuJob is a one-node job of user's on partition cpu (n2-standard-8
// nodes) with cpus tasks of one CPU, --exclusive=user when exclUser.
func cpuJob(id int, u string, cpus int32, exclUser bool, opts ...func(*loomv1.Job)) *loomv1.Job {
	j := job(id, 1, 0, append([]func(*loomv1.Job){user(u, "acct"), func(j *loomv1.Job) {
		j.Partition, j.Ntasks, j.ExclusiveUser = "cpu", cpus, exclUser
	}}, opts...)...)
	return j
}

// TestReservationHonoursNodeOwners: backfill's reservation plans a node
// as placement would take it: a job of another user does not get a start
// on a node an --exclusive=user run holds before that run ends, nor an
// --exclusive=user job one on a node where another user's job runs. Each
// case: cpu-a has room now but the owner rule keeps the job off it until
// its 1-hour run ends; cpu-b is full for 3 hours. The reservation is on
// cpu-a at the hour's end (placement ignoring owners would say now).
func TestReservationHonoursNodeOwners(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		onA    *loomv1.Job // 1 hour on cpu-a, leaving room
		queued *loomv1.Job
	}{
		{"another user's job beside an --exclusive=user run",
			cpuJob(1, "alice", 1, true, limit(time.Hour)), cpuJob(3, "bob", 4, false, limit(time.Hour))},
		{"an --exclusive=user job beside another user's run",
			cpuJob(1, "bob", 1, false, limit(time.Hour)), cpuJob(3, "alice", 4, true, limit(time.Hour))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newSpecHarness(t, Config{Policy: EASYPolicy()})
			h.cpuNode("cpu-a")
			h.cpuNode("cpu-b")
			tc.onA.Nodelist = []string{"cpu-a"}
			h.submitJob(tc.onA)
			h.wantState(1, loomv1.JobState_RUNNING, "")
			h.submitJob(cpuJob(2, "carol", 8, false, limit(3*time.Hour), func(j *loomv1.Job) { j.Nodelist = []string{"cpu-b"} }))
			h.wantState(2, loomv1.JobState_RUNNING, "")
			h.submitJob(tc.queued)
			h.wantState(3, loomv1.JobState_PENDING, ReasonResources)
			c := h.s.Schedule(h.now.Add(time.Second))
			want := h.job(1).GetStartTime().AsTime().Add(time.Hour)
			if len(c.Reservations) != 1 || !c.Reservations[0].Start.Equal(want) || !slices.Equal(c.Reservations[0].Nodes, []string{"cpu-a"}) {
				t.Fatalf("reservations %+v, want job 3's on cpu-a at %v", c.Reservations, want)
			}
		})
	}
}

// TestPreemptionHonoursNodeOwners: preempting the jobs on a node frees it
// for the preemptor only when the runs left there let it in: an
// --exclusive=user run of another user that is no victim keeps it, and so
// does, for an --exclusive=user preemptor, another user's run. When the
// owner's run is a victim too, both are preempted.
func TestPreemptionHonoursNodeOwners(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		stays, low *loomv1.Job // on cpu-a: stays (QOS given) and a low-QOS victim
		preemptor  *loomv1.Job
		victims    int
	}{
		{"an owner's run that stays keeps another user's preemptor off",
			cpuJob(1, "alice", 1, true, qos("normal")), cpuJob(2, "alice", 7, false, qos("low")),
			cpuJob(3, "bob", 4, false, qos("high")), 0},
		{"another user's run that stays keeps an --exclusive=user preemptor off",
			cpuJob(1, "alice", 1, false, qos("normal")), cpuJob(2, "carol", 7, false, qos("low")),
			cpuJob(3, "bob", 4, true, qos("high")), 0},
		{"the owner's run preempted too",
			cpuJob(1, "alice", 1, true, qos("low")), cpuJob(2, "alice", 7, false, qos("low")),
			cpuJob(3, "bob", 4, false, qos("high")), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newSpecHarness(t, Config{})
			h.cpuNode("cpu-a")
			h.submitJob(tc.stays)
			h.wantState(1, loomv1.JobState_RUNNING, "")
			h.submitJob(tc.low)
			h.wantState(2, loomv1.JobState_RUNNING, "")
			c := h.submitJob(tc.preemptor)
			if got := len(stops(c)); got != tc.victims {
				t.Fatalf("preemptor stopped %d runs (%v), want %d", got, stops(c), tc.victims)
			}
			if tc.victims == 0 {
				h.wantState(2, loomv1.JobState_RUNNING, "")
			}
			h.wantState(3, loomv1.JobState_PENDING, ReasonResources)
			checkInvariants(t, h.s)
		})
	}
}

// TestReasonOfJobOnItsOwnNodes: a pending job whose -w names every node it
// needs waits for Resources even behind a blocked job, as slurmctld 22.05
// judged it beside Loom (4 nodes, node1 and node2 busy: "-w node1" read
// Resources, the "-w node2" job behind it Resources, a -N3 job behind
// them Priority in Loom; Slurm's said its nodes were not available, having
// set node1 and node2 aside for the -w jobs). Loom said Priority for the
// second -w job.
func TestReasonOfJobOnItsOwnNodes(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for _, n := range []string{"gpu-0001", "gpu-0002", "gpu-0003", "gpu-0004"} {
		h.node(n, 8)
	}
	on := func(host string) func(*loomv1.Job) {
		return func(j *loomv1.Job) { j.Nodelist = []string{host} }
	}
	h.submitJob(job(1, 1, 8, on("gpu-0001")))
	h.submitJob(job(2, 1, 8, on("gpu-0002")))
	h.wantState(1, loomv1.JobState_RUNNING, "")
	h.wantState(2, loomv1.JobState_RUNNING, "")
	h.submitJob(job(3, 1, 8, on("gpu-0001")))
	h.submitJob(job(4, 1, 8, on("gpu-0002")))
	// Last in priority order, as Slurm's --nice=150 had it (its size
	// factor would put it first).
	h.submitJob(job(5, 3, 8, func(j *loomv1.Job) { j.Nice = 10000 }))
	h.tick(0)
	h.wantState(3, loomv1.JobState_PENDING, ReasonResources)
	h.wantState(4, loomv1.JobState_PENDING, ReasonResources)
	h.wantState(5, loomv1.JobState_PENDING, ReasonPriority)
	checkInvariants(t, h.s)
}

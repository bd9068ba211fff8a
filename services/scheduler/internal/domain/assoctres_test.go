package domain

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/slurmspec"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

func account(id, parent string, grp *loomv1.Tres) *eventsv1.AccountChanged {
	return &eventsv1.AccountChanged{Project: "default", Account: &loomv1.Account{Name: "projects/default/accounts/" + id, ParentAccount: parent, GrpTres: grp}}
}

// TestAssocGrpTRESCoversTheSubtree: GrpTRES=gres/gpu=16 on account team
// caps the GPUs of the running jobs of team and of its sub-account sub
// together: a third 8-GPU job waits with AssocGrpGRES though nodes are
// free, while another account's runs; it starts when one ends. A
// restarted scheduler (the limits through their stored JSON, the runs
// from the snapshot) counts the same, and clearing the limit lets the
// waiting jobs start.
func TestAssocGrpTRESCoversTheSubtree(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	for _, host := range []string{"a3-0001", "a3-0002", "a3-0003", "a3-0004", "a3-0005"} {
		h.gpuNode(host, "b1")
	}
	h.do(account("team", "", &loomv1.Tres{Gpu: proto.Int64(16)}))
	h.do(account("sub", "team", nil))
	h.submitJob(job(1, 1, 8, user("ada", "team")))
	h.submitJob(job(2, 1, 8, user("bob", "sub")))
	h.submitJob(job(3, 1, 8, user("ada", "sub")))
	h.submitJob(job(4, 1, 8, user("cy", "other")))
	h.wantState(1, loomv1.JobState_RUNNING, "")
	h.wantState(2, loomv1.JobState_RUNNING, "")
	h.wantExact(3, loomv1.JobState_PENDING, ReasonAssocGrpGRES)
	h.wantState(4, loomv1.JobState_RUNNING, "")

	// Restart: the records as stored (JSON), the rest from the snapshot.
	restartWithStoredAssocs(t, h)
	h.submitJob(job(5, 1, 8, user("bob", "team")))
	h.wantExact(5, loomv1.JobState_PENDING, ReasonAssocGrpGRES)
	h.wantExact(3, loomv1.JobState_PENDING, ReasonAssocGrpGRES)

	// One of the two waiting jobs (priority picks which) takes the 8
	// GPUs job 1 gives back; the other waits on.
	h.finish(1, 0)
	waiting := 5
	if h.job(3).GetState() == loomv1.JobState_PENDING {
		waiting = 3
		h.wantState(5, loomv1.JobState_RUNNING, "")
	} else {
		h.wantState(3, loomv1.JobState_RUNNING, "")
	}
	h.wantExact(waiting, loomv1.JobState_PENDING, ReasonAssocGrpGRES)

	// GrpTRES=gres/gpu=-1: no limit left.
	h.do(account("team", "", nil))
	h.wantState(waiting, loomv1.JobState_RUNNING, "")
	if h.s.tresLimits != 0 {
		t.Fatalf("records with TRES limits after the clear: %d", h.s.tresLimits)
	}
}

// TestAssocGrpTRESPerAssociation: GrpTRES on an association counts only
// its own runs, TRES by TRES in Slurm's order (cpu, mem, node, then
// gres/gpu), and a job asking more than the limit by itself waits too.
func TestAssocGrpTRESPerAssociation(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	for _, host := range []string{"a3-0001", "a3-0002", "a3-0003", "a3-0004"} {
		h.gpuNode(host, "b1")
	}
	h.do(&eventsv1.AssociationChanged{Project: "default", Association: &loomv1.Association{Account: "a", User: "ada",
		GrpTres: &loomv1.Tres{Node: proto.Int64(2), Gpu: proto.Int64(12)}}})
	h.submitJob(job(1, 1, 8, user("ada", "a")))
	h.submitJob(job(2, 1, 4, user("ada", "a")))
	h.submitJob(job(3, 1, 1, user("ada", "a")))
	h.submitJob(job(4, 1, 8, user("bob", "a")))
	h.submitJob(job(5, 3, 1, user("ada", "a")))
	h.wantState(1, loomv1.JobState_RUNNING, "")
	h.wantState(2, loomv1.JobState_RUNNING, "")
	// Two nodes held: the node limit is met before the GPUs' (12 of 12).
	h.wantExact(3, loomv1.JobState_PENDING, ReasonAssocGrpNodeLimit)
	h.wantState(4, loomv1.JobState_RUNNING, "")
	h.wantExact(5, loomv1.JobState_PENDING, ReasonAssocGrpNodeLimit)
	h.finish(2, 0)
	h.wantState(3, loomv1.JobState_RUNNING, "")
	// Job 5 (3 nodes) passes the node limit by itself: it waits on.
	h.finish(1, 0)
	h.finish(3, 0)
	h.wantExact(5, loomv1.JobState_PENDING, ReasonAssocGrpNodeLimit)
}

// TestAssocMaxTRESPerJobAndMaxWall: a job asking more than its
// association's MaxTRESPerJob or a time limit past its MaxWall stays
// pending with Slurm's reason (it can never start as it is), other jobs of
// the association start, and raising or clearing the limit lets it start.
// A job with no time limit of its own gets MaxWall (TestAssocMaxWallIsTheDefaultLimit).
func TestAssocMaxTRESPerJobAndMaxWall(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	for _, host := range []string{"a3-0001", "a3-0002", "a3-0003", "a3-0004", "a3-0005", "a3-0006"} {
		h.gpuNode(host, "b1")
	}
	h.cpuNode("cpu-0001")
	ada := &loomv1.Association{Account: "a", User: "ada", MaxTresPerJob: &loomv1.Tres{Gpu: proto.Int64(8), Node: proto.Int64(1)}, MaxWallMinutes: proto.Int32(60)}
	h.do(&eventsv1.AssociationChanged{Project: "default", Association: ada})
	h.submitJob(job(1, 2, 4, user("ada", "a"), limit(time.Minute)))
	h.submitJob(job(2, 1, 8, user("ada", "a"), limit(2*time.Hour)))
	h.submitJob(job(3, 1, 8, user("ada", "a"), limit(time.Hour)))
	h.wantExact(1, loomv1.JobState_PENDING, ReasonAssocMaxNodePerJobLimit)
	h.wantExact(2, loomv1.JobState_PENDING, ReasonAssocMaxWallDurationPerJobLimit)
	h.wantState(3, loomv1.JobState_RUNNING, "")

	// MaxTRESPerJob=gres/gpu=8,node=-1: job 1 (2 nodes, 8 GPUs) fits.
	ada.MaxTresPerJob = &loomv1.Tres{Gpu: proto.Int64(8)}
	h.do(&eventsv1.AssociationChanged{Project: "default", Association: ada})
	h.wantState(1, loomv1.JobState_RUNNING, "")
	h.submitJob(job(5, 2, 8, user("ada", "a"), limit(time.Minute)))
	h.wantExact(5, loomv1.JobState_PENDING, ReasonAssocMaxGRESPerJob)

	ada.MaxTresPerJob, ada.MaxWallMinutes = nil, nil
	h.do(&eventsv1.AssociationChanged{Project: "default", Association: ada})
	h.wantState(2, loomv1.JobState_RUNNING, "")
	h.wantState(5, loomv1.JobState_RUNNING, "")
}

// TestAssocMaxWallIsTheDefaultLimit: a job with no --time under an
// association with MaxWall=60 gets 60 minutes as its time limit, as
// Slurm's acct_policy_validate gives it: in a partition without MaxTime
// (cpu) and in one whose MaxTime is longer (gpu, 1 day) it starts at once,
// shows 3600 s while pending and running, and times out after an hour;
// where the partition's MaxTime is shorter (short, 30 minutes) that one
// stays its limit. A job that was pending without a limit before the
// association got its MaxWall starts within it too.
func TestAssocMaxWallIsTheDefaultLimit(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{}, &loomv1.SlurmPartition{Id: "short", NodeSetIds: []string{"cpu"}, MaxTime: "30"})
	h.gpuNode("a3-0001", "b1")
	h.do(&eventsv1.AssociationChanged{Project: "default", Association: &loomv1.Association{Account: "a", User: "ada", MaxWallMinutes: proto.Int32(60)}})
	inCPU := func(j *loomv1.Job) { j.Partition = "cpu" }
	h.submitJob(job(1, 1, 0, user("ada", "a"), inCPU))
	h.submitJob(job(2, 1, 8, user("ada", "a")))
	h.submitJob(job(3, 1, 0, user("ada", "a"), func(j *loomv1.Job) { j.Partition = "short" }))
	h.submitJob(job(4, 1, 0, user("bob", "a"), inCPU, func(j *loomv1.Job) { j.Hold = true }))
	h.wantExact(1, loomv1.JobState_PENDING, ReasonReqNodeNotAvail) // no cpu node yet
	for id, want := range map[int]int64{1: 3600, 2: 3600, 3: 0, 4: 0} {
		if got := h.job(id).GetTimeLimitSeconds(); got != want {
			t.Errorf("job %d: time limit %d s, want %d", id, got, want)
		}
	}
	h.cpuNode("cpu-0001")
	h.cpuNode("cpu-0002")
	h.wantState(1, loomv1.JobState_RUNNING, "")
	h.wantState(2, loomv1.JobState_RUNNING, "")
	h.wantState(3, loomv1.JobState_RUNNING, "")
	if got := h.job(1).GetTimeLimitSeconds(); got != 3600 {
		t.Fatalf("running job 1: time limit %d s, want 3600", got)
	}

	// Job 4's user gets MaxWall=60 while it is held: released, it
	// starts with 60 minutes.
	h.do(&eventsv1.AssociationChanged{Project: "default", Association: &loomv1.Association{Account: "a", User: "bob", MaxWallMinutes: proto.Int32(60)}})
	h.do(&eventsv1.UpdateJob{Job: jobName(4), Cluster: cl, Action: ActionRelease, Admin: true})
	h.wantState(4, loomv1.JobState_RUNNING, "")
	if got := h.job(4).GetTimeLimitSeconds(); got != 3600 {
		t.Fatalf("job 4 started with a time limit of %d s, want 3600", got)
	}
	h.tick(61 * time.Minute)
	for _, id := range []int{1, 2, 4} {
		h.wantState(id, loomv1.JobState_TIMEOUT, ReasonTimeLimit)
	}
}

// TestAssocMaxWallOfZeroHoldsAll: MaxWall=0 on an association is a limit,
// as in Slurm (acct_policy only takes INFINITE as none): no job of it
// starts, with a time limit (any is past 0) or without one (Slurm would
// give it 0 minutes), each pending with AssocMaxWallDurationPerJobLimit,
// while another user's job starts; a record read back from its stored
// JSON keeps the 0, and clearing the limit lets the jobs start.
func TestAssocMaxWallOfZeroHoldsAll(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	h.gpuNode("a3-0001", "b1")
	h.gpuNode("a3-0002", "b1")
	h.cpuNode("cpu-0001")
	h.do(&eventsv1.AssociationChanged{Project: "default", Association: &loomv1.Association{Account: "a", User: "ada", MaxWallMinutes: proto.Int32(0)}})
	h.submitJob(job(1, 1, 8, user("ada", "a"), limit(time.Minute)))
	h.submitJob(job(2, 1, 0, user("ada", "a"), func(j *loomv1.Job) { j.Partition = "cpu" }))
	h.submitJob(job(3, 1, 8, user("bob", "a"), limit(time.Minute)))
	h.wantExact(1, loomv1.JobState_PENDING, ReasonAssocMaxWallDurationPerJobLimit)
	h.wantExact(2, loomv1.JobState_PENDING, ReasonAssocMaxWallDurationPerJobLimit)
	h.wantState(3, loomv1.JobState_RUNNING, "")

	// Restart: the records as stored (JSON).
	restartWithStoredAssocs(t, h)
	h.finish(3, 0)
	h.wantExact(1, loomv1.JobState_PENDING, ReasonAssocMaxWallDurationPerJobLimit)
	h.wantExact(2, loomv1.JobState_PENDING, ReasonAssocMaxWallDurationPerJobLimit)

	// Cleared (sacctmgr MaxWall=-1: absent): both start, job 2 with no
	// time limit of its own.
	h.do(&eventsv1.AssociationChanged{Project: "default", Association: &loomv1.Association{Account: "a", User: "ada"}})
	h.wantState(1, loomv1.JobState_RUNNING, "")
	h.wantState(2, loomv1.JobState_RUNNING, "")
	if got := h.job(2).GetTimeLimitSeconds(); got != 0 {
		t.Fatalf("job 2 started with a time limit of %d s, want none", got)
	}
}

// TestAssocGrpTRESOfZeroFreezes: GrpTRES=gres/gpu=0 on an account is
// Slurm's way to freeze it: no job of the account or of an account under
// it that asks for a GPU starts (AssocGrpGRES), whatever is free, while a
// CPU-only job of it and other accounts' jobs do; a record read back from
// its stored JSON keeps the 0, and GrpTRES=gres/gpu=-1 lets the jobs
// start. MaxTRESPerJob=gres/gpu=0 on an association holds its GPU jobs with
// AssocMaxGRESPerJob the same way.
func TestAssocGrpTRESOfZeroFreezes(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	h.gpuNode("a3-0001", "b1")
	h.gpuNode("a3-0002", "b1")
	h.cpuNode("cpu-0001")
	h.do(account("team", "", &loomv1.Tres{Gpu: proto.Int64(0)}))
	h.do(account("sub", "team", nil))
	h.submitJob(job(1, 1, 1, user("ada", "team")))
	h.submitJob(job(2, 1, 8, user("bob", "sub")))
	h.submitJob(job(3, 1, 0, user("ada", "team"), func(j *loomv1.Job) { j.Partition = "cpu" }))
	h.submitJob(job(4, 1, 8, user("cy", "other")))
	h.wantExact(1, loomv1.JobState_PENDING, ReasonAssocGrpGRES)
	h.wantExact(2, loomv1.JobState_PENDING, ReasonAssocGrpGRES)
	h.wantState(3, loomv1.JobState_RUNNING, "")
	h.wantState(4, loomv1.JobState_RUNNING, "")

	// Restart: the records as stored (JSON).
	restartWithStoredAssocs(t, h)
	h.finish(4, 0)
	h.wantExact(1, loomv1.JobState_PENDING, ReasonAssocGrpGRES)
	h.wantExact(2, loomv1.JobState_PENDING, ReasonAssocGrpGRES)

	h.do(&eventsv1.AssociationChanged{Project: "default", Association: &loomv1.Association{Account: "sub", User: "bob",
		MaxTresPerJob: &loomv1.Tres{Gpu: proto.Int64(0)}}})
	h.do(account("team", "", nil))
	h.wantState(1, loomv1.JobState_RUNNING, "")
	h.wantExact(2, loomv1.JobState_PENDING, ReasonAssocMaxGRESPerJob)
}

// TestAssocTRESRefusesBadEvents: the scheduler checks the limits of the
// events again (the gateway's bounds), naming the field.
func TestAssocTRESRefusesBadEvents(t *testing.T) {
	t.Parallel()
	s := NewState(Config{})
	for _, ev := range []proto.Message{
		&eventsv1.AssociationChanged{Project: "default", Association: &loomv1.Association{Account: "a", User: "ada", GrpTres: &loomv1.Tres{Gpu: proto.Int64(-1)}}},
		&eventsv1.AssociationChanged{Project: "default", Association: &loomv1.Association{Account: "a", User: "ada", MaxTresPerJob: &loomv1.Tres{MemMb: proto.Int64(1<<40 + 1)}}},
		&eventsv1.AssociationChanged{Project: "default", Association: &loomv1.Association{Account: "a", User: "ada", MaxWallMinutes: proto.Int32(-1)}},
		account("a", "", &loomv1.Tres{Cpu: proto.Int64(1<<30 + 1)}),
	} {
		var inv *errs.InvalidError
		if _, err := s.Handle(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), ev); !errors.As(err, &inv) {
			t.Errorf("%v: got %v, want an InvalidError", ev, err)
		}
	}
	if s.tresLimits != 0 || len(s.AssocLimits()) != 0 {
		t.Fatalf("refused events left records: %v", s.AssocLimits())
	}
}

// TestAssocTRESSumsDoNotWrap: on nodes whose memory is unknown (any
// --mem fits them) a job asking 2^62 MiB a node of two nodes is past a
// MaxTRESPerJob and a GrpTRES of mem, and so is one of one node beside a
// running one as large: the product over the nodes and the sum with what
// runs saturate, where a wrap to a negative passed the limit.
func TestAssocTRESSumsDoNotWrap(t *testing.T) {
	t.Parallel()
	huge := func(j *loomv1.Job) { j.MemMb = 1 << 62 }
	for _, tc := range []struct {
		name   string
		tres   func(*loomv1.Association, *loomv1.Tres)
		reason string
	}{
		{"MaxTRESPerJob", func(a *loomv1.Association, t *loomv1.Tres) { a.MaxTresPerJob = t }, ReasonAssocMaxMemPerJob},
		{"GrpTRES", func(a *loomv1.Association, t *loomv1.Tres) { a.GrpTres = t }, ReasonAssocGrpMemLimit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			for _, host := range []string{"gpu-0001", "gpu-0002", "gpu-0003"} {
				h.node(host, 8)
			}
			a := &loomv1.Association{Account: "a", User: "ada"}
			tc.tres(a, &loomv1.Tres{MemMb: proto.Int64(slurmspec.MaxTRESMemMB)})
			h.do(&eventsv1.AssociationChanged{Project: "default", Association: a})
			h.submitJob(job(1, 2, 1, user("ada", "a"), huge))
			h.wantExact(1, loomv1.JobState_PENDING, tc.reason)
		})
	}
	t.Run("with what runs", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		for _, host := range []string{"gpu-0001", "gpu-0002"} {
			h.node(host, 8)
		}
		h.submitJob(job(1, 1, 1, user("ada", "a"), huge))
		h.wantState(1, loomv1.JobState_RUNNING, "")
		h.do(&eventsv1.AssociationChanged{Project: "default", Association: &loomv1.Association{Account: "a", User: "ada",
			GrpTres: &loomv1.Tres{MemMb: proto.Int64(slurmspec.MaxTRESMemMB)}}})
		h.submitJob(job(2, 1, 1, user("ada", "a"), huge))
		h.wantExact(2, loomv1.JobState_PENDING, ReasonAssocGrpMemLimit)
	})
}

// TestAssocGrpTRESInOnePass: the jobs a pass starts count against the
// limit at once: of three 8-GPU jobs handled in one batch under
// GrpTRES=gres/gpu=16, two start.
func TestAssocGrpTRESInOnePass(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	for _, host := range []string{"a3-0001", "a3-0002", "a3-0003"} {
		h.gpuNode(host, "b1")
	}
	h.batch(
		account("team", "", &loomv1.Tres{Gpu: proto.Int64(16)}),
		&eventsv1.SubmitJob{Job: job(1, 1, 8, user("ada", "team"))},
		&eventsv1.SubmitJob{Job: job(2, 1, 8, user("ada", "team"))},
		&eventsv1.SubmitJob{Job: job(3, 1, 8, user("bob", "team"))},
	)
	h.wantState(1, loomv1.JobState_RUNNING, "")
	h.wantState(2, loomv1.JobState_RUNNING, "")
	h.wantExact(3, loomv1.JobState_PENDING, ReasonAssocGrpGRES)
}

// TestFollowKeepsTRESLimits: a follower that takes over enforces the TRES
// limits it followed: the records arrive through Follow, and one removed
// there no longer counts (the gate is idle again).
func TestFollowKeepsTRESLimits(t *testing.T) {
	t.Parallel()
	s := NewState(Config{})
	key := AssocLimitKey("p", "ml", "")
	s.Follow(&Update{Assocs: map[string]*AssocLimit{key: {Project: "p", Account: "ml", GrpTRES: slurmspec.TRES{GPU: 64}}}})
	if got := s.AssocLimits(); s.tresLimits != 1 || len(got) != 1 || got[0].GrpTRES.GPU != 64 {
		t.Fatalf("after the follow: %d counted, %v", s.tresLimits, got)
	}
	s.Follow(&Update{Assocs: map[string]*AssocLimit{key: {Project: "p", Account: "ml", Fairshare: 2}}})
	if s.tresLimits != 0 {
		t.Fatalf("a record replaced without limits still counted: %d", s.tresLimits)
	}
	s.Follow(&Update{Assocs: map[string]*AssocLimit{key: {Project: "p", Account: "ml", GrpTRES: slurmspec.TRES{CPU: 8}}}})
	s.Follow(&Update{Assocs: map[string]*AssocLimit{key: nil}})
	if s.tresLimits != 0 || len(s.AssocLimits()) != 0 {
		t.Fatalf("after the delete: %d counted, %v", s.tresLimits, s.AssocLimits())
	}
}

// restartWithStoredAssocs restarts h's scheduler state from its snapshot,
// the associations read back from the JSON the store keeps them as (so an
// optional limit of 0 must survive the round trip), the rest as it is.
func restartWithStoredAssocs(t *testing.T, h *harness) {
	t.Helper()
	snap := h.s.Snapshot()
	raw, err := json.Marshal(snap.Assocs)
	if err != nil {
		t.Fatal(err)
	}
	snap.Assocs = nil
	if err := json.Unmarshal(raw, &snap.Assocs); err != nil {
		t.Fatal(err)
	}
	restarted := NewState(h.s.Config())
	restarted.Restore(snap)
	h.s = restarted
}

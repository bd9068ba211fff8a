package domain

import (
	"math"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/slurmspec"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler/internal/domain/views"
)

// TestNiceLowersPriority: --nice is subtracted from a job's priority (sprio
// shows it as NICE), so a nice job submitted first starts after one that is
// not; the result never falls below 1 (0 is a held job's); scontrol update
// Nice= changes a pending job's, and a running job's is left alone.
func TestNiceLowersPriority(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("gpu-0001", 8)
	h.submitJob(job(1, 1, 8))
	h.wantState(1, loomv1.JobState_RUNNING, "")
	nice := func(n int32) func(*loomv1.Job) { return func(j *loomv1.Job) { j.Nice = n } }
	h.submitJob(job(2, 1, 8, nice(500)))
	h.submitJob(job(3, 1, 8))
	h.submitJob(job(4, 1, 8, nice(slurmspec.MaxNice)))
	prio := func(id int) (int64, *loomv1.PriorityFactors) {
		v := views.Job(h.s, jobName(id), h.now)
		return v.GetPriority(), v.GetPriorityFactors()
	}
	p2, f2 := prio(2)
	p3, _ := prio(3)
	if p2 != p3-500 || f2.GetNice() != 500 {
		t.Fatalf("job 2 (nice 500): priority %d, factors %v; job 3 (none): %d", p2, f2, p3)
	}
	if p4, _ := prio(4); p4 != 1 {
		t.Errorf("job 4 (nice %d): priority %d, want 1", slurmspec.MaxNice, p4)
	}
	h.finish(1, 0)
	h.wantState(3, loomv1.JobState_RUNNING, "")
	h.wantState(2, loomv1.JobState_PENDING, "Resources")

	// An administrator gives job 2 a negative nice: its factors' sum plus
	// 100.
	h.do(&eventsv1.UpdateJob{Job: jobName(2), Cluster: cl, Action: ActionUpdate, Nice: proto.Int32(-100), Admin: true})
	if p, f := prio(2); f.GetNice() != -100 || p != f.GetAge()+f.GetFairshare()+f.GetJobSize()+f.GetPartition()+f.GetQos()+100 {
		t.Errorf("job 2 after Nice=-100: priority %d (factors %v), want their sum + 100", p, f)
	}
	// A running job's nice is not changed.
	h.do(&eventsv1.UpdateJob{Job: jobName(3), Cluster: cl, Action: ActionUpdate, Nice: proto.Int32(7), Admin: true})
	if n := h.s.Job(jobName(3)).GetNice(); n != 0 {
		t.Errorf("running job 3's nice: %d, want 0", n)
	}
	if _, err := h.s.Handle(h.now, &eventsv1.UpdateJob{Job: jobName(2), Cluster: cl, Action: ActionUpdate, Nice: proto.Int32(-slurmspec.MaxNice - 1)}); err == nil {
		t.Error("a nice past the bound was accepted")
	}
}

// TestUpdateBeginAndDependency: scontrol update StartTime=, Dependency= and
// QOS= on a pending job: a begin time not in the future makes it eligible at
// once, a later one holds it (BeginTime); a dependency holds it
// (Dependency) and "" clears it. A running job's are not changed, and a
// dependency that does not parse is refused.
func TestUpdateBeginAndDependency(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("gpu-0001", 8)
	h.submitJob(job(1, 1, 8, func(j *loomv1.Job) { j.BeginTime = timestamppb.New(h.now.Add(time.Hour)) }))
	h.wantState(1, loomv1.JobState_PENDING, ReasonBeginTime)
	update := func(id int, set func(*eventsv1.UpdateJob)) {
		ev := &eventsv1.UpdateJob{Job: jobName(id), Cluster: cl, Action: ActionUpdate}
		set(ev)
		h.do(ev)
	}
	update(1, func(ev *eventsv1.UpdateJob) { ev.BeginTime = timestamppb.New(h.now) })
	h.wantState(1, loomv1.JobState_RUNNING, "")
	if b := h.s.Job(jobName(1)).GetBeginTime(); b != nil {
		t.Errorf("job 1's begin time after StartTime=now: %v, want none", b)
	}

	h.submitJob(job(2, 1, 8))
	update(2, func(ev *eventsv1.UpdateJob) { ev.Dependency = proto.String("afterok:1") })
	h.wantState(2, loomv1.JobState_PENDING, ReasonDependency)
	later := h.now.Add(2 * time.Hour)
	update(2, func(ev *eventsv1.UpdateJob) { ev.BeginTime = timestamppb.New(later) })
	if j := h.s.Job(jobName(2)); j.GetDependency() != "afterok:1" || !j.GetBeginTime().AsTime().Equal(later) {
		t.Errorf("job 2 after the updates: dependency %q, begin %v", j.GetDependency(), j.GetBeginTime())
	}
	update(2, func(ev *eventsv1.UpdateJob) { ev.Dependency = proto.String("") })
	if d := h.s.Job(jobName(2)).GetDependency(); d != "" {
		t.Errorf("job 2's dependency after Dependency=: %q", d)
	}
	h.wantState(2, loomv1.JobState_PENDING, ReasonBeginTime)
	update(2, func(ev *eventsv1.UpdateJob) { ev.Qos, ev.Account = proto.String("high"), proto.String("lab") })
	if j := h.s.Job(jobName(2)); j.GetQos() != "high" || j.GetAccount() != "lab" {
		t.Errorf("job 2 after QOS=high Account=lab: %q, %q", j.GetQos(), j.GetAccount())
	}

	// A running job keeps its own.
	update(1, func(ev *eventsv1.UpdateJob) { ev.Dependency = proto.String("afterok:2") })
	if d := h.s.Job(jobName(1)).GetDependency(); d != "" {
		t.Errorf("running job 1's dependency: %q, want none", d)
	}
	if _, err := h.s.Handle(h.now, &eventsv1.UpdateJob{Job: jobName(2), Cluster: cl, Action: ActionUpdate, Dependency: proto.String("afterok:x")}); err == nil {
		t.Error("a dependency that does not parse was accepted")
	}
}

// TestUpdateSizeHostsNameAndThrottle: scontrol update NumNodes=, NumTasks=,
// MinMemoryNode=, ReqNodeList= and ExcNodeList= change a pending job (and
// what it waits for), not a running one; JobName= renames either; and
// ArrayTaskThrottle= changes how many of an array's tasks run at once.
func TestUpdateSizeHostsNameAndThrottle(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("gpu-0001", 8)
	h.node("gpu-0002", 8)
	update := func(id int, set func(*eventsv1.UpdateJob)) {
		ev := &eventsv1.UpdateJob{Job: jobName(id), Cluster: cl, Action: ActionUpdate}
		set(ev)
		h.do(ev)
	}
	h.submitJob(job(1, 1, 8))
	h.wantState(1, loomv1.JobState_RUNNING, "")
	h.submitJob(job(2, 1, 8, func(j *loomv1.Job) { j.Hold = true }))
	update(2, func(ev *eventsv1.UpdateJob) {
		ev.NodeCount, ev.Ntasks, ev.MemMb = proto.Int32(2), proto.Int32(4), proto.Int64(512)
		ev.Exclude = &loomv1.HostList{Hosts: []string{"gpu-0001"}}
		ev.GpusPerNode = proto.Int32(4)
	})
	j := h.s.Job(jobName(2))
	if j.GetNodeCount() != 2 || j.GetNtasks() != 4 || j.GetMemMb() != 512 || len(j.GetExclude()) != 1 || j.GetGpusPerNode() != 4 {
		t.Fatalf("job 2 after NumNodes=2 NumTasks=4 MinMemoryNode=512 ExcNodeList=gpu-0001 Gres=gpu:4: %v", j)
	}
	// Released, it cannot have two nodes without gpu-0001.
	h.do(&eventsv1.UpdateJob{Job: jobName(2), Cluster: cl, Action: ActionRelease})
	h.finish(1, 0)
	if s := h.s.Job(jobName(2)).GetState(); s != loomv1.JobState_PENDING {
		t.Fatalf("job 2 needing 2 nodes but gpu-0001: %s, want PENDING", s)
	}
	update(2, func(ev *eventsv1.UpdateJob) { ev.Exclude = &loomv1.HostList{} })
	h.wantState(2, loomv1.JobState_RUNNING, "")
	if j := h.s.Job(jobName(2)); len(j.GetNodes()) != 2 || j.GetAllocGpus() != 8 {
		t.Errorf("job 2 after ExcNodeList= (cleared): nodes %v, %d GPUs; want both, 4 each", j.GetNodes(), j.GetAllocGpus())
	}

	// Running: a name changes; sizes and hosts do not.
	update(2, func(ev *eventsv1.UpdateJob) {
		ev.JobName, ev.NodeCount = proto.String("renamed"), proto.Int32(1)
		ev.Nodelist = &loomv1.HostList{Hosts: []string{"gpu-0002"}}
	})
	if j := h.s.Job(jobName(2)); j.GetDisplayName() != "renamed" || j.GetNodeCount() != 2 || len(j.GetNodelist()) != 0 {
		t.Errorf("running job 2 after JobName=renamed NumNodes=1 ReqNodeList=gpu-0002: name %q, nodes %d, nodelist %v",
			j.GetDisplayName(), j.GetNodeCount(), j.GetNodelist())
	}
	h.finish(2, 0)

	// An array of four 8-GPU tasks, one at a time; then two at a time.
	h.submitJob(job(10, 1, 8, user("ada", "a"), func(j *loomv1.Job) { j.Array = "0-3%1" }))
	h.wantState(10, loomv1.JobState_RUNNING, "")
	h.wantState(11, loomv1.JobState_PENDING, ReasonJobArrayTaskLimit)
	update(11, func(ev *eventsv1.UpdateJob) { ev.ArrayTaskThrottle = proto.Int32(2) }) // a task names its array
	h.wantState(11, loomv1.JobState_RUNNING, "")
	h.wantState(12, loomv1.JobState_PENDING, ReasonJobArrayTaskLimit)
	if a := h.s.ArrayRecord(jobName(10)); a.Limit != 2 {
		t.Errorf("array 10's limit after ArrayTaskThrottle=2: %d", a.Limit)
	}
	for id := 10; id <= 13; id++ {
		if s := h.s.Job(jobName(id)).GetArray(); s != "0-3%2" {
			t.Errorf("task %d's array spec: %q, want 0-3%%2", id, s)
		}
	}
	update(10, func(ev *eventsv1.UpdateJob) { ev.ArrayTaskThrottle = proto.Int32(0) })
	if a := h.s.ArrayRecord(jobName(10)); a.Limit != 0 || h.s.Job(jobName(12)).GetArray() != "0-3" {
		t.Errorf("after ArrayTaskThrottle=0: limit %d, spec %q; want none", a.Limit, h.s.Job(jobName(12)).GetArray())
	}
	// A task of no array, or another user's array, changes nothing.
	update(2, func(ev *eventsv1.UpdateJob) { ev.ArrayTaskThrottle = proto.Int32(1) })
	h.do(&eventsv1.UpdateJob{Job: jobName(10), Cluster: cl, Action: ActionUpdate, ArrayTaskThrottle: proto.Int32(1), User: "mallory"})
	if a := h.s.ArrayRecord(jobName(10)); a.Limit != 0 {
		t.Errorf("another user's ArrayTaskThrottle=1 set the limit to %d", a.Limit)
	}
	for _, ev := range []*eventsv1.UpdateJob{
		{JobName: proto.String("")}, {NodeCount: proto.Int32(0)}, {Ntasks: proto.Int32(-1)}, {MemMb: proto.Int64(-1)}, {ArrayTaskThrottle: proto.Int32(-1)},
	} {
		ev.Job, ev.Cluster, ev.Action = jobName(12), cl, ActionUpdate
		if _, err := h.s.Handle(h.now, ev); err == nil {
			t.Errorf("update %v accepted", ev)
		}
	}
}

// TestUpdateNodesRaisesTasks: scontrol update NumNodes= on a pending job
// raises a task count below the new minimum to it, as Slurm 22.05's
// controller did beside Loom (-n1 then NumNodes=2: NumTasks=2, with
// NumTasks=1 in the same update too), and never lowers the nodes to the
// tasks (NumTasks=1 on a two-node job stays two nodes). Loom kept
// NumTasks=1 and ran tasks 1,0.
func TestUpdateNodesRaisesTasks(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("gpu-0001", 8)
	for _, tc := range []struct {
		id          int
		ntasks      int32
		set         func(*eventsv1.UpdateJob)
		nodes, want int32
	}{
		{2, 1, func(ev *eventsv1.UpdateJob) { ev.NodeCount = proto.Int32(2) }, 2, 2},
		{3, 1, func(ev *eventsv1.UpdateJob) { ev.NodeCount, ev.Ntasks = proto.Int32(2), proto.Int32(1) }, 2, 2},
		{4, 4, func(ev *eventsv1.UpdateJob) { ev.NodeCount, ev.MaxNodeCount = proto.Int32(3), proto.Int32(4) }, 3, 4},
		{5, 2, func(ev *eventsv1.UpdateJob) { ev.Ntasks = proto.Int32(1) }, 1, 1},
		{6, 0, func(ev *eventsv1.UpdateJob) { ev.NodeCount = proto.Int32(3) }, 3, 0},
		// A node count the gateway did not judge (the scheduler bounds
		// none) raises the tasks no further than every job's bound.
		{7, 1, func(ev *eventsv1.UpdateJob) { ev.NodeCount = proto.Int32(math.MaxInt32) }, math.MaxInt32, slurmspec.MaxJobTasks},
	} {
		h.submitJob(job(tc.id, 1, 0, func(j *loomv1.Job) { j.Hold, j.Ntasks = true, tc.ntasks }))
		ev := &eventsv1.UpdateJob{Job: jobName(tc.id), Cluster: cl, Action: ActionUpdate}
		tc.set(ev)
		h.do(ev)
		if j := h.s.Job(jobName(tc.id)); j.GetNodeCount() != tc.nodes || j.GetNtasks() != tc.want {
			t.Errorf("job %d (-n%d) after %v: %d nodes, %d tasks; want %d and %d", tc.id, tc.ntasks, ev, j.GetNodeCount(), j.GetNtasks(), tc.nodes, tc.want)
		}
	}
}

// TestHoldChangeTime: scontrol hold and release record when they acted
// (Job.hold_change_time), which Slurm's EligibleTime follows: the release
// time once released (slurmctld 22.05 beside Loom), where Loom had no time
// but the submit time to show.
func TestHoldChangeTime(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.submitJob(job(1, 1, 0, func(j *loomv1.Job) { j.Hold = true }))
	if ht := h.s.Job(jobName(1)).GetHoldChangeTime(); ht != nil {
		t.Fatalf("submitted held: hold_change_time %v, want none (the submit time stands for it)", ht.AsTime())
	}
	h.tick(time.Minute)
	h.do(&eventsv1.UpdateJob{Job: jobName(1), Cluster: cl, Action: ActionRelease})
	if j := h.s.Job(jobName(1)); j.GetHold() || !j.GetHoldChangeTime().AsTime().Equal(h.now) {
		t.Errorf("released: hold %v, hold_change_time %v; want false, %v", j.GetHold(), j.GetHoldChangeTime().AsTime(), h.now)
	}
	h.submitJob(job(2, 1, 0, func(j *loomv1.Job) { j.NodeCount = 99 }))
	h.tick(time.Minute)
	h.do(&eventsv1.UpdateJob{Job: jobName(2), Cluster: cl, Action: ActionHold})
	if j := h.s.Job(jobName(2)); !j.GetHold() || !j.GetHoldChangeTime().AsTime().Equal(h.now) {
		t.Errorf("held: hold %v, hold_change_time %v; want true, %v", j.GetHold(), j.GetHoldChangeTime().AsTime(), h.now)
	}
}

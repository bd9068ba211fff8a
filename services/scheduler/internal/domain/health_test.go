package domain

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/slurmspec"
	"github.com/loom-ml/loom/libs/termtext"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"

	"github.com/loom-ml/loom/services/scheduler/internal/domain/jobstore"
	"github.com/loom-ml/loom/services/scheduler/internal/domain/views"
)

// newHealthHarness is newHarness with cfg (the default policy unless set).
func newHealthHarness(t *testing.T, cfg Config) *harness {
	if cfg.Policy.Name == "" {
		cfg.Policy = DefaultPolicy()
	}
	h := harnessWith(t, cfg)
	h.do(&eventsv1.ClusterChanged{Cluster: &loomv1.Cluster{Name: cl, Status: &loomv1.ClusterStatus{
		State: loomv1.Cluster_RUNNING, SharedDir: "/shared/c1"}}})
	return h
}

func (h *harness) health(host string, ev *eventsv1.NodeHealthChanged) *Change {
	ev.Node, ev.Cluster = nodeName(host), cl
	return h.do(ev)
}

func (h *harness) progress(id int, attempt int32, host string, step, ckpt int64) *Change {
	return h.do(&eventsv1.StepProgress{Job: jobName(id), Attempt: attempt, Node: nodeName(host), Step: step,
		CheckpointStep: ckpt, LastProgress: timestamppb.New(h.now.Add(time.Second))})
}

func needChecks(c *Change) []*eventsv1.NodesNeedCheck {
	var out []*eventsv1.NodesNeedCheck
	for _, e := range c.Emits {
		if n, ok := e.Payload.(*eventsv1.NodesNeedCheck); ok {
			out = append(out, n)
		}
	}
	return out
}

// checkNoOverlap fails when two attempts of a job ever held nodes at once
// with the later one started: the later run's start must come after the
// earlier one let go of every node.
type overlapWatch struct {
	released map[string]time.Time // run key → when it was released
}

func (w *overlapWatch) see(t *testing.T, h *harness, id int) {
	t.Helper()
	j := h.s.JobRecord(jobName(id))
	for a := int32(1); a <= j.Attempt; a++ {
		r := h.s.Run(jobName(id), a)
		if r == nil {
			continue
		}
		if _, ok := w.released[r.Key()]; !ok && r.Released {
			w.released[r.Key()] = h.now
		}
		if a > 1 {
			prev := h.s.Run(jobName(id), a-1)
			if prev != nil && !prev.Released {
				t.Fatalf("attempt %d started at %v while attempt %d still holds %v", a, r.Start, a-1, prev.Steps)
			}
		}
	}
}

// TestFencedAttemptsNeverOverlap: a node health declares failed (its agent
// paused past the heartbeat timeout) is told to stop its run too, and the
// job's next attempt waits until that step is heard to end, the node is
// repaired, or the fence times out: two attempts never run at once.
func TestFencedAttemptsNeverOverlap(t *testing.T) {
	t.Parallel()
	for _, lift := range []string{"step-ends", "rebooting", "removed", "timeout"} {
		t.Run(lift, func(t *testing.T) {
			t.Parallel()
			h := newHealthHarness(t, Config{})
			for _, host := range []string{"gpu-0001", "gpu-0002", "gpu-0003", "gpu-0004"} {
				h.node(host, 8)
			}
			w := &overlapWatch{released: map[string]time.Time{}}
			h.submit(1, 2, 8)
			bad, other := h.job(1).GetNodes()[0], h.job(1).GetNodes()[1]
			c := h.health(bad, &eventsv1.NodeHealthChanged{Health: eventsv1.NodeHealth_UNHEALTHY, Reason: "no heartbeat for 15s"})
			var stopped []string
			for _, s := range stops(c) {
				stopped = append(stopped, s.GetNode())
			}
			slices.Sort(stopped)
			if want := []string{nodeName(bad), nodeName(other)}; !reflect.DeepEqual(stopped, want) {
				t.Fatalf("StopStep to %v, want both nodes (the failed one is fenced) %v", stopped, want)
			}
			h.step(1, 1, other, eventsv1.StepState_STEP_KILLED, 143)
			w.see(t, h, 1)
			h.wantExact(1, loomv1.JobState_PENDING, ReasonRequeued)
			if p := h.s.JobRecord(jobName(1)).why; p == nil || !strings.Contains(p.Note, "failed node(s) "+bad+" (fenced until") {
				t.Fatalf("placement while fenced: %+v", p)
			}
			if c := h.tick(DefaultRequeueStopWait + time.Second); len(starts(c)) != 0 {
				t.Fatal("the requeue stop wait shortened the fence")
			}
			var c2 *Change
			switch lift {
			case "step-ends": // the paused agent resumes, stops the step and says so
				c2 = h.step(1, 1, bad, eventsv1.StepState_STEP_KILLED, 143)
			case "rebooting": // the repair is the fence
				c2 = h.do(&eventsv1.NodeChanged{Node: &loomv1.Node{Name: nodeName(bad), Cluster: cl, Hostname: bad, Gpus: 8,
					State: loomv1.Node_REBOOTING, Reason: "remediation: reboot"}})
			case "removed":
				c2 = h.do(&eventsv1.NodeRemoved{Node: nodeName(bad), Cluster: cl})
			case "timeout":
				if c := h.tick(DefaultFenceTimeout - DefaultRequeueStopWait - 5*time.Second); len(starts(c)) != 0 {
					t.Fatal("started before the fence timed out")
				}
				c2 = h.tick(5 * time.Second)
			}
			w.see(t, h, 1)
			if st := starts(c2); len(st) != 2 || st[0].GetAttempt() != 2 {
				t.Fatalf("want attempt 2 started once the fence lifted (%s), got %v", lift, st)
			}
			if slices.Contains(h.job(1).GetNodes(), bad) {
				t.Fatalf("attempt 2 on the failed node: %v", h.job(1).GetNodes())
			}
			if r := h.s.Run(jobName(1), 1); !r.Released {
				t.Fatalf("attempt 1 not released: %+v", r.Steps)
			}
		})
	}
}

// TestStaleStartWithdrawn: a StartStep of an attempt that the same change
// ended never goes out; its step, never started, holds nothing.
func TestStaleStartWithdrawn(t *testing.T) {
	t.Parallel()
	h := newHealthHarness(t, Config{})
	h.node("gpu-0001", 8)
	c := h.submit(1, 1, 8)
	st := starts(c)
	if len(st) != 1 {
		t.Fatalf("starts %v", st)
	}
	// The same change now also ends the attempt (as a later event of its
	// batch might): the start is withdrawn.
	tx := writerTxn(h.s, h.s.Run(jobName(1), 1).Start)
	tx.c.Emits = append(tx.c.Emits, Emit{Key: st[0].GetNode(), Subject: jobName(1), Payload: st[0]})
	j := tx.editJob(jobName(1))
	tx.finish(j, loomv1.JobState_CANCELLED, 0, "")
	tx.afterPass()
	if got := starts(tx.c); len(got) != 0 {
		t.Fatalf("a StartStep of an ended attempt went out: %v", got)
	}
	if r := tx.run(RunKey(jobName(1), 1)); !r.Steps[nodeName("gpu-0001")].Abandoned || !r.Released {
		t.Fatalf("the never-started step still holds the node: %+v", r)
	}
}

// TestExclusionExpiryUnsticksJob: a job whose every node failed under it
// waits (BadConstraints) while they are repaired, runs again once health
// reports one repaired, and ends, saying why, when none is being repaired.
func TestExclusionExpiryUnsticksJob(t *testing.T) {
	t.Parallel()
	h := newHealthHarness(t, Config{})
	h.node("gpu-0001", 8)
	h.submit(1, 1, 8)
	h.health("gpu-0001", &eventsv1.NodeHealthChanged{Health: eventsv1.NodeHealth_UNHEALTHY, Reason: "Xid 79: GPU has fallen off the bus"})
	h.step(1, 1, "gpu-0001", eventsv1.StepState_STEP_KILLED, 143)
	h.wantExact(1, loomv1.JobState_PENDING, ReasonBadConstraints)
	if got := h.s.JobRecord(jobName(1)).Excluded; !reflect.DeepEqual(got, []string{"gpu-0001"}) {
		t.Fatalf("excluded %v", got)
	}
	// GetJob shows it, apart from the user's own --exclude.
	if v := h.s.JobViewer(h.now)(jobName(1)); !reflect.DeepEqual(v.GetExcludedNodes(), []string{"gpu-0001"}) || len(v.GetExclude()) != 0 {
		t.Fatalf("GetJob's excluded_nodes %v, exclude %v", v.GetExcludedNodes(), v.GetExclude())
	}
	// Still pending while the node is under repair.
	h.tick(time.Hour)
	h.wantExact(1, loomv1.JobState_PENDING, ReasonBadConstraints)
	// Back, but not repaired: not yet.
	c := h.health("gpu-0001", &eventsv1.NodeHealthChanged{Health: eventsv1.NodeHealth_HEALTHY, Repaired: true})
	if st := starts(c); len(st) != 1 || st[0].GetAttempt() != 2 {
		t.Fatalf("want attempt 2 once the node was repaired, got %v", st)
	}
	if got := h.s.JobRecord(jobName(1)).Excluded; len(got) != 0 {
		t.Fatalf("exclusion kept after the repair: %v", got)
	}
	if v := h.s.JobViewer(h.now)(jobName(1)); len(v.GetExcludedNodes()) != 0 {
		t.Fatalf("GetJob's excluded_nodes after the repair: %v", v.GetExcludedNodes())
	}

	// It fails again; health finds nothing to repair (HEALTHY without
	// repaired): the job can never run and ends, saying why.
	h.health("gpu-0001", &eventsv1.NodeHealthChanged{Health: eventsv1.NodeHealth_UNHEALTHY, Reason: "no heartbeat"})
	h.step(1, 2, "gpu-0001", eventsv1.StepState_STEP_KILLED, 143)
	h.wantExact(1, loomv1.JobState_PENDING, ReasonBadConstraints)
	h.health("gpu-0001", &eventsv1.NodeHealthChanged{Health: eventsv1.NodeHealth_HEALTHY})
	j := h.job(1)
	if j.GetState() != loomv1.JobState_NODE_FAIL || !strings.Contains(j.GetStateReason(), "every node it may use failed under it (gpu-0001)") {
		t.Fatalf("job 1: %v %q, want NODE_FAIL saying no node can take it", j.GetState(), j.GetStateReason())
	}

	// A removed node's exclusion goes too.
	h2 := newHealthHarness(t, Config{})
	h2.node("gpu-0001", 8)
	h2.node("gpu-0002", 8)
	h2.submit(1, 2, 8)
	h2.health("gpu-0001", &eventsv1.NodeHealthChanged{Health: eventsv1.NodeHealth_UNHEALTHY, Reason: "x"})
	h2.do(&eventsv1.NodeRemoved{Node: nodeName("gpu-0001"), Cluster: cl})
	if got := h2.s.JobRecord(jobName(1)).Excluded; len(got) != 0 {
		t.Fatalf("exclusion of a removed node kept: %v", got)
	}
}

// TestRetryBudgets: the program's own failures are retried up to
// max_retries (user_failures counts them); infrastructure failures do not
// use it and are bounded by MaxInfraRestarts.
func TestRetryBudgets(t *testing.T) {
	t.Parallel()
	h := newHealthHarness(t, Config{MaxInfraRestarts: 2})
	h.node("gpu-0001", 8)
	h.node("gpu-0002", 8)
	h.submitJob(&loomv1.Job{Name: jobName(1), JobId: "1", Cluster: cl, NodeCount: 1, GpusPerNode: 8,
		Command: []string{"/bin/train"}, MaxRetries: 2})
	for attempt := int32(1); attempt <= 2; attempt++ {
		host := h.job(1).GetNodes()[0]
		c := h.step(1, attempt, host, eventsv1.StepState_STEP_EXITED, 3)
		if got := statesOf(c, 1); !reflect.DeepEqual(got[:2], []loomv1.JobState{loomv1.JobState_FAILED, loomv1.JobState_REQUEUED}) {
			t.Fatalf("attempt %d failed: %v, want FAILED then REQUEUED", attempt, got)
		}
		if got := runEnds(c, 1); !reflect.DeepEqual(got, []string{"FAILED requeue_follows=true"}) {
			t.Fatalf("attempt %d failed: ends %v, want the FAILED marked as followed by a requeue", attempt, got)
		}
		j := h.job(1)
		if j.GetUserFailures() != attempt || j.GetRestartCount() != attempt || !h.s.JobRecord(jobName(1)).Running() {
			t.Fatalf("after user failure %d: %v user_failures %d restarts %d", attempt, j.GetState(), j.GetUserFailures(), j.GetRestartCount())
		}
	}
	// A node failure does not count against max_retries.
	host := h.job(1).GetNodes()[0]
	h.health(host, &eventsv1.NodeHealthChanged{Health: eventsv1.NodeHealth_UNHEALTHY, Reason: "xid"})
	h.step(1, 3, host, eventsv1.StepState_STEP_KILLED, 143)
	if j := h.job(1); j.GetUserFailures() != 2 || !h.s.JobRecord(jobName(1)).Running() {
		t.Fatalf("after a node failure: %v user_failures %d", j.GetState(), j.GetUserFailures())
	}
	h.health(host, &eventsv1.NodeHealthChanged{Health: eventsv1.NodeHealth_HEALTHY, Repaired: true})
	// The third failure of the program is one too many.
	c := h.step(1, 4, h.job(1).GetNodes()[0], eventsv1.StepState_STEP_EXITED, 3)
	h.wantExact(1, loomv1.JobState_FAILED, ReasonNonZeroExitCode)
	if got := runEnds(c, 1); !reflect.DeepEqual(got, []string{"FAILED requeue_follows=false"}) {
		t.Fatalf("the last failure: ends %v, want the job's end, not followed by a requeue", got)
	}
	if j := h.job(1); j.GetUserFailures() != 3 || j.GetExitCode() != 3 {
		t.Fatalf("final: user_failures %d exit %d", j.GetUserFailures(), j.GetExitCode())
	}

	// Infrastructure restarts are bounded by the cluster's limit (2 here).
	h.submit(2, 1, 8)
	var ends []string
	for i := 0; i < 3; i++ {
		host := h.job(2).GetNodes()[0]
		attempt := h.s.JobRecord(jobName(2)).Attempt
		ends = append(ends, runEnds(h.health(host, &eventsv1.NodeHealthChanged{Health: eventsv1.NodeHealth_UNHEALTHY, Reason: "xid"}), 2)...)
		ends = append(ends, runEnds(h.step(2, attempt, host, eventsv1.StepState_STEP_KILLED, 143), 2)...)
		h.health(host, &eventsv1.NodeHealthChanged{Health: eventsv1.NodeHealth_HEALTHY, Repaired: true})
	}
	if n := len(ends); n == 0 || ends[n-1] != "NODE_FAIL requeue_follows=false" || slices.Contains(ends[:n-1], "NODE_FAIL requeue_follows=false") {
		t.Fatalf("job 2's run ends: %v, want only the last NODE_FAIL unfollowed by a requeue", ends)
	}
	if j := h.job(2); j.GetState() != loomv1.JobState_NODE_FAIL || !strings.Contains(j.GetStateReason(), "2 infrastructure restarts") {
		t.Fatalf("job 2 after 3 node failures: %v %q", j.GetState(), j.GetStateReason())
	}

	// max_retries is bounded.
	h.submitJob(&loomv1.Job{Name: jobName(3), JobId: "3", Cluster: cl, Command: []string{"x"}, MaxRetries: 1000, Hold: true})
	h.submitJob(&loomv1.Job{Name: jobName(4), JobId: "4", Cluster: cl, Command: []string{"x"}, MaxRetries: -4, Hold: true})
	if a, b := h.job(3).GetMaxRetries(), h.job(4).GetMaxRetries(); a != slurmspec.MaxRetries || b != 0 {
		t.Fatalf("max_retries bounded to %d and %d, want %d and 0", a, b, slurmspec.MaxRetries)
	}
}

// TestCheckpointAwareDrain: a fault that is not urgent signals the job
// (its --signal, default USR1), waits for a newer checkpoint, then requeues
// it and drains the node; without a checkpoint, the grace bounds the wait.
func TestCheckpointAwareDrain(t *testing.T) {
	t.Parallel()
	h := newHealthHarness(t, Config{CheckpointGrace: 2 * time.Minute})
	h.node("gpu-0001", 8)
	h.node("gpu-0002", 8)
	h.submit(1, 1, 8)
	h.submitJob(&loomv1.Job{Name: jobName(2), JobId: "2", Cluster: cl, NodeCount: 1, GpusPerNode: 8,
		Command: []string{"/bin/train"}, Signal: "TERM@30"})
	n1, n2 := h.job(1).GetNodes()[0], h.job(2).GetNodes()[0]
	h.progress(1, 1, n1, 100, 40)
	c := h.health(n1, &eventsv1.NodeHealthChanged{Health: eventsv1.NodeHealth_UNHEALTHY, CheckpointFirst: true,
		Reason: "ECC single-bit errors rising"})
	if sg := signals(c); len(sg) != 1 || sg[0].GetSignal() != "USR1" || sg[0].GetNode() != nodeName(n1) || len(stops(c)) != 0 {
		t.Fatalf("checkpoint-first: signals %v stops %v, want USR1 and no stop", sg, stops(c))
	}
	h.wantState(1, loomv1.JobState_RUNNING, "")
	// The provisioner's DOWN that follows health's verdict does not cut the grace short.
	if c := h.do(&eventsv1.NodeChanged{Node: &loomv1.Node{Name: nodeName(n1), Cluster: cl, Hostname: n1,
		Gpus: 8, State: loomv1.Node_DOWN, Reason: "ECC single-bit errors rising"}}); len(stops(c)) != 0 {
		t.Fatalf("DOWN during a checkpoint-aware drain ended runs: %v", stops(c))
	}
	if n := h.s.Node(nodeName(n1)); n.Usable() {
		t.Fatal("a node being drained for a checkpoint takes new work")
	}
	// An old checkpoint is not the one asked for.
	if c := h.progress(1, 1, n1, 120, 40); len(stops(c)) != 0 {
		t.Fatalf("requeued on an old checkpoint: %v", stops(c))
	}
	c = h.progress(1, 1, n1, 130, 125)
	if len(stops(c)) != 1 {
		t.Fatalf("a new checkpoint: want the run stopped, got %v", stops(c))
	}
	if j := h.job(1); j.GetState() != loomv1.JobState_PENDING || !strings.Contains(strings.Join(stateLines(jobChanges(c)), ";"), "checkpointed at step 125") {
		t.Fatalf("job 1 after its checkpoint: %v, events %v", j.GetState(), stateLines(jobChanges(c)))
	}
	if u := h.job(1).GetUserFailures(); u != 0 {
		t.Fatalf("a drain counted as a user failure: %d", u)
	}
	wantDrained(t, h.step(1, 1, n1, eventsv1.StepState_STEP_KILLED, 143), n1)

	// No checkpoint within the grace: requeued at its end, with the job's own signal.
	c = h.health(n2, &eventsv1.NodeHealthChanged{Health: eventsv1.NodeHealth_UNHEALTHY, CheckpointFirst: true, Reason: "thermal"})
	if sg := signals(c); len(sg) != 1 || sg[0].GetSignal() != "TERM" {
		t.Fatalf("job 2's --signal: %v", sg)
	}
	if c := h.tick(time.Minute); len(stops(c)) != 0 {
		t.Fatal("requeued before the grace ended")
	}
	if c := h.tick(time.Minute); len(stops(c)) != 1 || h.job(2).GetState() == loomv1.JobState_RUNNING {
		t.Fatalf("grace over: stops %v, job 2 %v", stops(c), h.job(2).GetState())
	}
	if got := h.s.JobRecord(jobName(2)).Excluded; !reflect.DeepEqual(got, []string{n2}) {
		t.Fatalf("job 2 excludes %v, want the drained node", got)
	}
}

// TestCheckpointAwareDrainWaitsForACheckpointAfterTheSignal: a run that
// had not reported its latest checkpoint when it was signalled (here the
// one a resumed attempt started from, an hour old) is not requeued on it
// when the agent's first look after the signal reports it; the checkpoint
// written since the signal requeues it.
func TestCheckpointAwareDrainWaitsForACheckpointAfterTheSignal(t *testing.T) {
	t.Parallel()
	h := newHealthHarness(t, Config{CheckpointGrace: 2 * time.Minute})
	h.node("gpu-0001", 8)
	h.submit(1, 1, 8)
	n1 := h.job(1).GetNodes()[0]
	h.step(1, 1, n1, eventsv1.StepState_STEP_RUNNING, 0)
	ckpt := func(step int64, written time.Time) *Change {
		return h.do(&eventsv1.StepProgress{Job: jobName(1), Attempt: 1, Node: nodeName(n1), Step: step,
			CheckpointStep: step, CheckpointTime: timestamppb.New(written), LastProgress: timestamppb.New(h.now)})
	}
	resumed := h.now.Add(-time.Hour)
	if sg := signals(h.health(n1, &eventsv1.NodeHealthChanged{Health: eventsv1.NodeHealth_UNHEALTHY, CheckpointFirst: true,
		Reason: "ECC single-bit errors rising"})); len(sg) != 1 {
		t.Fatalf("checkpoint-first: signals %v, want the job's", sg)
	}
	if c := ckpt(100, resumed); len(stops(c)) != 0 || h.job(1).GetState() != loomv1.JobState_RUNNING {
		t.Fatalf("requeued on the checkpoint written before the signal: stops %v, job %v", stops(c), h.job(1).GetState())
	}
	c := ckpt(101, h.now)
	if len(stops(c)) != 1 || !strings.Contains(strings.Join(stateLines(jobChanges(c)), ";"), "checkpointed at step 101") {
		t.Fatalf("the checkpoint written on the signal: stops %v, events %v", stops(c), stateLines(jobChanges(c)))
	}
}

// stateLines returns the states and reasons of JobChanged events, for messages.
func stateLines(jcs []*eventsv1.JobChanged) []string {
	var out []string
	for _, jc := range jcs {
		out = append(out, jc.GetJob().GetState().String()+" "+jc.GetJob().GetStateReason())
	}
	return out
}

// TestHangDetection: a run that reports no progress for its hang timeout
// (the job's, else the cluster's) is ended as hung and requeued, and its
// nodes get a check; progress keeps it alive.
func TestHangDetection(t *testing.T) {
	t.Parallel()
	h := newHealthHarness(t, Config{HangTimeout: 5 * time.Minute})
	h.node("gpu-0001", 8)
	h.node("gpu-0002", 8)
	h.submit(1, 1, 8)
	h.submitJob(&loomv1.Job{Name: jobName(2), JobId: "2", Cluster: cl, NodeCount: 1, GpusPerNode: 8,
		Command: []string{"/bin/train"}, HangTimeoutSeconds: 60})
	n1 := h.job(1).GetNodes()[0]
	// Job 2's own timeout (1 m) comes first; it never reported progress:
	// counted from its start.
	c := h.tick(time.Minute)
	nc := needChecks(c)
	if len(nc) != 1 || nc[0].GetTrigger() != TriggerHang || nc[0].GetJob() != jobName(2) || len(nc[0].GetNodes()) != 1 {
		t.Fatalf("NodesNeedCheck %v", nc)
	}
	if got := stateLines(jobChanges(c)); !slices.Contains(got, "REQUEUED hung: no progress for 1m0s") {
		t.Fatalf("job 2's events: %v", got)
	}
	// Job 1 moves at 3 m: its 5 m run from there.
	h.tick(2 * time.Minute)
	h.progress(1, 1, n1, 10, 0)
	of1 := func(c *Change) []*eventsv1.NodesNeedCheck {
		var out []*eventsv1.NodesNeedCheck
		for _, n := range needChecks(c) {
			if n.GetJob() == jobName(1) {
				out = append(out, n)
			}
		}
		return out
	}
	if c := h.tick(4 * time.Minute); len(of1(c)) != 0 || !h.s.JobRecord(jobName(1)).Running() {
		t.Fatalf("job 1 ended while it moved %v ago", 4*time.Minute)
	}
	c = h.tick(time.Minute + time.Second)
	if nc := of1(c); len(nc) != 1 || nc[0].GetReason() != "hung: no progress for 5m0s" || nc[0].GetCluster() != cl {
		t.Fatalf("job 1 hung: %v", nc)
	}
	if h.s.JobRecord(jobName(1)).InfraRestarts != 1 || h.job(1).GetUserFailures() != 0 {
		t.Fatal("a hang is an infrastructure restart, not a user failure")
	}
}

// TestHangTimeoutOfTheJob: a job's hang timeout of -1 turns detection off
// under a cluster default, and one past the bound (from a producer other
// than the gateway, which refuses it) is a week, not a duration that
// overflowed.
func TestHangTimeoutOfTheJob(t *testing.T) {
	t.Parallel()
	h := newHealthHarness(t, Config{HangTimeout: time.Minute})
	h.node("gpu-0001", 8)
	h.node("gpu-0002", 8)
	h.submitJob(&loomv1.Job{Name: jobName(1), JobId: "1", Cluster: cl, NodeCount: 1, GpusPerNode: 8,
		Command: []string{"/bin/prep"}, HangTimeoutSeconds: slurmspec.HangTimeoutOff})
	// 1<<62 seconds times a second wraps to -1.5 s as a time.Duration.
	h.submitJob(&loomv1.Job{Name: jobName(2), JobId: "2", Cluster: cl, NodeCount: 1, GpusPerNode: 8,
		Command: []string{"/bin/train"}, HangTimeoutSeconds: 1 << 62})
	if got := h.job(2).GetHangTimeoutSeconds(); got != slurmspec.MaxHangTimeoutSeconds {
		t.Fatalf("hang_timeout_seconds 1<<62 kept as %d, want the bound %d", got, slurmspec.MaxHangTimeoutSeconds)
	}
	// Neither moves for six days: neither is hung (the default would have
	// ended job 1 after a minute).
	for range 6 {
		if c := h.tick(24 * time.Hour); len(needChecks(c)) != 0 {
			t.Fatalf("a job ended as hung: %v", needChecks(c))
		}
	}
	if !h.s.JobRecord(jobName(1)).Running() || !h.s.JobRecord(jobName(2)).Running() {
		t.Fatal("a job stopped running")
	}
	// On the seventh day job 2's week is up; job 1 runs on.
	c := h.tick(24 * time.Hour)
	if nc := needChecks(c); len(nc) != 1 || nc[0].GetJob() != jobName(2) || nc[0].GetReason() != "hung: no progress for 168h0m0s" {
		t.Fatalf("after a week: %v", nc)
	}
	if !h.s.JobRecord(jobName(1)).Running() {
		t.Fatal("job 1, with hang detection off, was stopped")
	}
}

// TestHostileCountsAreClamped: a job whose counts would wrap the
// placement's int32 arithmetic (GPUs over nodes, tasks per node times CPUs
// per task), from a producer other than the gateway, which refuses them,
// is clamped to slurmspec's bounds: the passes that follow neither panic
// nor place it on a wrapped request, and it waits as too big.
func TestHostileCountsAreClamped(t *testing.T) {
	t.Parallel()
	h := newHealthHarness(t, Config{})
	h.node("gpu-0001", 8)
	const most = 1<<31 - 1
	h.submitJob(&loomv1.Job{Name: jobName(1), JobId: "1", Cluster: cl, Command: []string{"x"}, Gpus: most, Hold: true})
	h.submitJob(&loomv1.Job{Name: jobName(2), JobId: "2", Cluster: cl, Command: []string{"x"}, NodeCount: 2,
		NtasksPerNode: most, CpusPerTask: most, Ntasks: most, TimeLimitSeconds: 1 << 62, Hold: true})
	j1, j2 := h.job(1), h.job(2)
	if j1.GetGpus() != slurmspec.MaxJobGPUs || j2.GetNtasksPerNode() != slurmspec.MaxTasksPerNode ||
		j2.GetCpusPerTask() != slurmspec.MaxCPUsPerTask || j2.GetNtasks() != slurmspec.MaxJobTasks ||
		j2.GetTimeLimitSeconds() != slurmspec.MaxTimeLimitSeconds {
		t.Fatalf("kept gpus %d, ntasks %d, ntasks_per_node %d, cpus_per_task %d, time limit %d", j1.GetGpus(),
			j2.GetNtasks(), j2.GetNtasksPerNode(), j2.GetCpusPerTask(), j2.GetTimeLimitSeconds())
	}
	// Released, both go through passes (the clock's too) without a panic,
	// and neither runs on the one 8-GPU node.
	for _, id := range []int{1, 2} {
		h.do(&eventsv1.UpdateJob{Job: jobName(id), Cluster: cl, Action: ActionRelease, User: "root", Admin: true})
	}
	h.tick(time.Minute)
	for _, id := range []int{1, 2} {
		if st := h.job(id).GetState(); st != loomv1.JobState_PENDING {
			t.Fatalf("job %d is %v, want PENDING", id, st)
		}
	}
	// A begin time in the year 1000 is past, not (its nanoseconds wrapped)
	// the year 2160: the job starts now.
	h.submitJob(&loomv1.Job{Name: jobName(3), JobId: "3", Cluster: cl, Command: []string{"x"}, GpusPerNode: 8,
		BeginTime: timestamppb.New(time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC))})
	if j := h.job(3); j.GetState() == loomv1.JobState_PENDING || j.GetBeginTime() != nil {
		t.Fatalf("job 3 begun in the year 1000: %v (%s), begin %v", j.GetState(), j.GetStateReason(), j.GetBeginTime())
	}
}

// TestNodeReportsAreBounded: what a node reports is kept as the scheduler
// can trust it. A last progress in the year 9999 (a clock far ahead, or a
// hostile node) counts as now, so hang detection still ends the run once it
// stops; an invalid time is now; and a message with terminal escapes and a
// megabyte of text reaches the job's reason cleaned and cut.
func TestNodeReportsAreBounded(t *testing.T) {
	t.Parallel()
	h := newHealthHarness(t, Config{HangTimeout: time.Minute})
	h.node("gpu-0001", 8)
	h.node("gpu-0002", 8)
	h.submit(1, 1, 8)
	h.submit(2, 1, 8)
	host := h.job(2).GetNodes()[0]
	h.do(&eventsv1.StepChanged{Job: jobName(2), Attempt: 1, Node: nodeName(host), State: eventsv1.StepState_STEP_FAILED_TO_START,
		ExitCode: 3, Cluster: cl, Message: "\x1b[2J\x1b[Hforged row\n" + strings.Repeat("x", 1<<20)})
	msg := h.s.Run(jobName(2), 1).Steps[nodeName(host)].Message
	reason := h.job(2).GetStateReason()
	for what, text := range map[string]string{"the step's message": msg, "the job's reason": reason} {
		if _, bad := termtext.FirstSpoofing(text, ""); bad || len(text) > MaxNodeMessageBytes+256 {
			t.Fatalf("%s: %d bytes, %q…", what, len(text), text[:min(len(text), 80)])
		}
	}
	if !strings.HasPrefix(msg, "\uFFFD[2J\uFFFD[Hforged row\uFFFD") || !strings.HasSuffix(msg, "…") {
		t.Fatalf("the step's message: %q…", msg[:min(len(msg), 80)])
	}

	h.do(&eventsv1.StepProgress{Job: jobName(1), Attempt: 1, Node: nodeName(h.job(1).GetNodes()[0]), Step: 5,
		LastProgress:   timestamppb.New(time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)),
		CheckpointStep: 5, CheckpointTime: &timestamppb.Timestamp{Seconds: 1 << 62}})
	r := h.s.Run(jobName(1), 1)
	if !r.Progress.Last.Equal(h.now) || !r.Progress.CheckpointTime.Equal(h.now) {
		t.Fatalf("progress kept last %v, checkpoint time %v; want now, %v", r.Progress.Last, r.Progress.CheckpointTime, h.now)
	}
	if c := h.tick(time.Minute + time.Second); len(needChecks(c)) != 1 {
		t.Fatalf("a run whose node reported the year 9999 was not ended as hung a minute later: %v", needChecks(c))
	}
}

// TestRestartJobAction: an application's fault (Xid 13: HEALTHY with
// ACTION_RESTART_JOB) requeues the runs on the node without excluding or
// draining it.
func TestRestartJobAction(t *testing.T) {
	t.Parallel()
	h := newHealthHarness(t, Config{})
	h.node("gpu-0001", 8)
	h.submit(1, 1, 8)
	c := h.health("gpu-0001", &eventsv1.NodeHealthChanged{Health: eventsv1.NodeHealth_HEALTHY,
		Action: loomv1.RemediationAction_ACTION_RESTART_JOB, Xid: 13, Reason: "Xid 13: Graphics Engine Exception"})
	if len(stops(c)) != 1 || len(drainedEvents(c)) != 0 {
		t.Fatalf("restart: stops %v, drained %v", stops(c), drainedEvents(c))
	}
	h.wantExact(1, loomv1.JobState_PENDING, ReasonRequeued)
	c = h.step(1, 1, "gpu-0001", eventsv1.StepState_STEP_KILLED, 143)
	if st := starts(c); len(st) != 1 || st[0].GetAttempt() != 2 || st[0].GetEnv()["LOOM_RESTART_COUNT"] != "1" {
		t.Fatalf("want attempt 2 on the same node with LOOM_RESTART_COUNT=1, got %v", st)
	}
	if len(h.s.JobRecord(jobName(1)).Excluded) != 0 || !h.s.Node(nodeName("gpu-0001")).Usable() {
		t.Fatal("restart-job excluded or drained the node")
	}
}

// TestUnreachableKeepsRuns: a node health cannot reach, but did not find
// failed, takes no new work and its runs go on; Slurm's view shows it as
// its jobs make it, NOT_RESPONDING ("mix*"), with health's reason. Health
// says unreachable with HEALTHY (it judged nothing); UNHEALTHY with
// unreachable means the same.
func TestUnreachableKeepsRuns(t *testing.T) {
	t.Parallel()
	for _, said := range []eventsv1.NodeHealth{eventsv1.NodeHealth_HEALTHY, eventsv1.NodeHealth_UNHEALTHY} {
		t.Run(said.String(), func(t *testing.T) { unreachableKeepsRuns(t, said) })
	}
}

func unreachableKeepsRuns(t *testing.T, said eventsv1.NodeHealth) {
	h := newHealthHarness(t, Config{})
	h.node("gpu-0001", 8)
	h.submit(1, 1, 4)
	view := func(st loomv1.SlurmNode_State, silent bool) {
		t.Helper()
		ns := views.SlurmNodes(h.s, cl)
		if len(ns) != 1 || ns[0].GetState() != st || ns[0].GetNotResponding() != silent || (silent && ns[0].GetReason() != "silent") {
			t.Fatalf("Slurm's view %v, want %v with not_responding %v", ns, st, silent)
		}
	}
	c := h.health("gpu-0001", &eventsv1.NodeHealthChanged{Health: said, Unreachable: true, Reason: "silent"})
	if len(stops(c)) != 0 || len(drainedEvents(c)) != 0 {
		t.Fatalf("unreachable ended runs: %v", c.Emits)
	}
	h.wantState(1, loomv1.JobState_RUNNING, "")
	view(loomv1.SlurmNode_MIXED, true)
	// The provisioner shows it DOWN after health's verdict: the runs still go on.
	if c := h.do(&eventsv1.NodeChanged{Node: &loomv1.Node{Name: nodeName("gpu-0001"), Cluster: cl, Hostname: "gpu-0001",
		Gpus: 8, State: loomv1.Node_DOWN, Reason: "silent"}}); len(stops(c)) != 0 {
		t.Fatalf("DOWN after unreachable ended runs: %v", stops(c))
	}
	h.wantState(1, loomv1.JobState_RUNNING, "")
	view(loomv1.SlurmNode_DOWN, true)
	h.node("gpu-0001", 8)
	c = h.submit(2, 1, 4)
	if d := decision(c, 2); d == nil || d.Filtered["NodeUnhealthy"] != 1 {
		t.Fatalf("job 2 on an unreachable node: %+v", d)
	}
	h.health("gpu-0001", &eventsv1.NodeHealthChanged{Health: eventsv1.NodeHealth_HEALTHY})
	h.wantState(2, loomv1.JobState_RUNNING, "")
	view(loomv1.SlurmNode_ALLOCATED, false)
}

// TestGoodputFromRuns: the state's goodput reads the job's runs and the
// checkpoint its steps reported: a failure after a checkpoint loses only
// what came after it.
func TestGoodputFromRuns(t *testing.T) {
	t.Parallel()
	h := newHealthHarness(t, Config{})
	h.node("gpu-0001", 8)
	h.node("gpu-0002", 8)
	h.submit(1, 1, 8)
	host := h.job(1).GetNodes()[0]
	h.tick(10 * time.Minute)
	h.progress(1, 1, host, 500, 500) // a checkpoint now
	h.tick(5 * time.Minute)
	h.health(host, &eventsv1.NodeHealthChanged{Health: eventsv1.NodeHealth_UNHEALTHY, Reason: "Xid 79"})
	h.step(1, 1, host, eventsv1.StepState_STEP_KILLED, 143)
	g := h.s.JobGoodput(jobName(1), h.now)
	if g.GetFailures() != 1 || g.GetRestarts() != 1 || g.GetLostRecompute().AsDuration() < 5*time.Minute ||
		g.GetLostRecompute().AsDuration() > 5*time.Minute+5*time.Second || g.GetGoodput() <= 0.5 {
		t.Fatalf("goodput %v", g)
	}
	if c := h.s.ClusterGoodput(cl, h.now.Add(-time.Hour), h.now); c.GetJobs() != 1 || c.GetFailures() != 1 {
		t.Fatalf("cluster goodput %v", c)
	}
	if h.s.JobGoodput(jobName(9), h.now) != nil || h.s.ClusterGoodput("projects/x/clusters/none", h.now, h.now) != nil {
		t.Fatal("goodput of unknown names")
	}
}

// TestSlurmViewOfHealth: sinfo's states follow health's remediation of a
// node: DRAINING while its run stops, DRAINED, REBOOT_REQUESTED, then
// REBOOT_ISSUED once the provisioner reboots it, each with health's reason,
// who set it and when.
func TestSlurmViewOfHealth(t *testing.T) {
	t.Parallel()
	h := newHealthHarness(t, Config{})
	h.node("gpu-0001", 8)
	h.submit(1, 1, 4)
	at := h.now.Add(-time.Second)
	reason := "Xid 79: GPU has fallen off the bus"
	state := func() *loomv1.SlurmNode {
		for _, n := range views.SlurmNodes(h.s, cl) {
			if n.GetHostname() == "gpu-0001" {
				return n
			}
		}
		t.Fatal("gpu-0001 not shown")
		return nil
	}
	want := func(st loomv1.SlurmNode_State) {
		t.Helper()
		n := state()
		if n.GetState() != st || n.GetReason() != reason || n.GetReasonUser() != "loom-health" || !n.GetReasonTime().AsTime().Equal(at) {
			t.Fatalf("gpu-0001: %v %q by %q at %v, want %v", n.GetState(), n.GetReason(), n.GetReasonUser(), n.GetReasonTime(), st)
		}
	}
	h.health("gpu-0001", &eventsv1.NodeHealthChanged{Health: eventsv1.NodeHealth_UNHEALTHY, Reason: reason, Xid: 79,
		State: loomv1.RemediationState_NODE_DRAINING, SetBy: "loom-health", Time: timestamppb.New(at)})
	want(loomv1.SlurmNode_DRAINING)
	wantDrained(t, h.step(1, 1, "gpu-0001", eventsv1.StepState_STEP_KILLED, 143), "gpu-0001")
	want(loomv1.SlurmNode_DRAINED)
	h.health("gpu-0001", &eventsv1.NodeHealthChanged{Health: eventsv1.NodeHealth_UNHEALTHY, Reason: reason, Xid: 79,
		State: loomv1.RemediationState_NODE_REBOOTING, SetBy: "loom-health", Time: timestamppb.New(at)})
	want(loomv1.SlurmNode_REBOOT_REQUESTED)
	h.do(&eventsv1.NodeChanged{Node: &loomv1.Node{Name: nodeName("gpu-0001"), Cluster: cl, Hostname: "gpu-0001", Gpus: 8,
		State: loomv1.Node_REBOOTING}})
	want(loomv1.SlurmNode_REBOOT_ISSUED)
	h.node("gpu-0001", 8)
	h.health("gpu-0001", &eventsv1.NodeHealthChanged{Health: eventsv1.NodeHealth_HEALTHY, Repaired: true,
		State: loomv1.RemediationState_NODE_HEALTHY})
	// Repaired: job 1's exclusion of it expired, and it runs there again.
	if n := state(); n.GetState() != loomv1.SlurmNode_MIXED || n.GetReason() != "" || h.job(1).GetNodes()[0] != "gpu-0001" {
		t.Fatalf("repaired: %v %q, job 1 on %v", n.GetState(), n.GetReason(), h.job(1).GetNodes())
	}
}

// TestSlurmViewOfReimageAndQuarantine: a reimage shows as a reboot does
// (REBOOT_REQUESTED, then REBOOT_ISSUED while the provisioner reimages),
// and a quarantined node as DRAINED with health's reason.
func TestSlurmViewOfReimageAndQuarantine(t *testing.T) {
	t.Parallel()
	h := newHealthHarness(t, Config{})
	h.node("gpu-0001", 8)
	want := func(st loomv1.SlurmNode_State, reason string) {
		t.Helper()
		ns := views.SlurmNodes(h.s, cl)
		if len(ns) != 1 || ns[0].GetState() != st || ns[0].GetReason() != reason || ns[0].GetReasonUser() != "loom-health" {
			t.Fatalf("Slurm's view %v, want %v %q by loom-health", ns, st, reason)
		}
	}
	again := "failed again after reset_gpu: ECC: single-bit errors at 6000/min on GPU 0"
	h.health("gpu-0001", &eventsv1.NodeHealthChanged{Health: eventsv1.NodeHealth_UNHEALTHY, Reason: again,
		State: loomv1.RemediationState_NODE_REIMAGING, SetBy: "loom-health"})
	want(loomv1.SlurmNode_REBOOT_REQUESTED, again)
	h.do(&eventsv1.NodeChanged{Node: &loomv1.Node{Name: nodeName("gpu-0001"), Cluster: cl, Hostname: "gpu-0001", Gpus: 8,
		State: loomv1.Node_REIMAGING}})
	want(loomv1.SlurmNode_REBOOT_ISSUED, again)
	h.node("gpu-0001", 8)
	lemon := "lemon: 3 failures within 24h0m0s: Xid 79: GPU has fallen off the bus"
	h.health("gpu-0001", &eventsv1.NodeHealthChanged{Health: eventsv1.NodeHealth_UNHEALTHY, Reason: lemon,
		State: loomv1.RemediationState_NODE_QUARANTINED, Action: loomv1.RemediationAction_ACTION_QUARANTINE, SetBy: "loom-health"})
	want(loomv1.SlurmNode_DRAINED, lemon)
}

// TestRandomHealthKeepsInvariants replays random mixes of submissions (some
// with max_retries), step ends, progress reports and checkpoints, every kind
// of health verdict, repairs and clock ticks, checking after every event
// (harness.commit) that no GPU is held twice, that no attempt starts while
// an earlier one is fenced, and that drained nodes are announced once; and
// at the end, with every node repaired, that every job ran to an end. Odd
// seeds run with checkpoint on failure.
func TestRandomHealthKeepsInvariants(t *testing.T) {
	t.Parallel()
	seen := map[string]int{}
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 14))
		h := newHealthHarness(t, Config{FenceTimeout: 90 * time.Second, CheckpointGrace: 30 * time.Second,
			HangTimeout: 3 * time.Minute, MaxInfraRestarts: 5,
			FailureCheckpointWait: time.Duration(seed%2) * 20 * time.Second}) // odd seeds: checkpoint on failure
		hosts := []string{"gpu-0001", "gpu-0002", "gpu-0003", "gpu-0004"}
		for _, host := range hosts {
			h.node(host, 4)
		}
		next := 1
		running := func() (*Run, int, int) {
			runs := h.s.ActiveRuns()
			if len(runs) == 0 {
				return nil, 0, 0
			}
			r := runs[rng.IntN(len(runs))]
			id, _ := strconv.Atoi(h.s.JobRecord(r.Job).Job.GetJobId())
			return r, id, rng.IntN(len(r.Nodes))
		}
		for range 300 {
			switch op := rng.IntN(16); {
			case op < 4:
				h.submitJob(&loomv1.Job{Name: jobName(next), JobId: strconv.Itoa(next), Cluster: cl, NodeCount: int32(1 + rng.IntN(2)),
					GpusPerNode: int32(rng.IntN(5)), Command: []string{"/bin/train"}, MaxRetries: int32(rng.IntN(3))})
				next++
			case op < 7: // a live step ends, now and then badly
				if r, id, i := running(); r != nil && !r.Steps[r.Nodes[i]].Terminal() {
					code := int32(0)
					if rng.IntN(4) == 0 {
						code = 1
					}
					h.step(id, r.Attempt, r.Hostnames[i], eventsv1.StepState_STEP_EXITED, code)
					seen["step"]++
				}
			case op < 9: // progress, with a checkpoint now and then
				if r, id, i := running(); r != nil {
					step := r.Progress.Step + 10
					ckpt := r.Progress.CheckpointStep
					if rng.IntN(2) == 0 {
						ckpt = step
					}
					h.progress(id, r.Attempt, r.Hostnames[i], step, ckpt)
				}
			case op < 12: // a verdict of every kind
				host := hosts[rng.IntN(len(hosts))]
				ev := &eventsv1.NodeHealthChanged{Health: eventsv1.NodeHealth_UNHEALTHY, Reason: "test"}
				switch k := rng.IntN(6); k {
				case 1:
					ev.CheckpointFirst = true
				case 2:
					ev.Unreachable = true
				case 3:
					ev.Health = eventsv1.NodeHealth_HEALTHY
				case 4:
					ev.Health, ev.Repaired = eventsv1.NodeHealth_HEALTHY, true
				case 5:
					ev.Health, ev.Action = eventsv1.NodeHealth_HEALTHY, loomv1.RemediationAction_ACTION_RESTART_JOB
				}
				h.health(host, ev)
				seen["verdict"]++
			case op < 13: // the provisioner repairs a node, or it comes back
				host := hosts[rng.IntN(len(hosts))]
				st := []loomv1.Node_State{loomv1.Node_REBOOTING, loomv1.Node_DOWN, loomv1.Node_READY}[rng.IntN(3)]
				h.do(&eventsv1.NodeChanged{Node: &loomv1.Node{Name: nodeName(host), Cluster: cl, Hostname: host, Gpus: 4, State: st}})
			default:
				h.tick(time.Duration(rng.IntN(60)) * time.Second)
			}
		}
		// Repair every node and end every step: every job must end.
		for _, host := range hosts {
			h.node(host, 4)
			h.health(host, &eventsv1.NodeHealthChanged{Health: eventsv1.NodeHealth_HEALTHY, Repaired: true})
		}
		for guard := 0; ; guard++ {
			if guard > 20000 {
				t.Fatalf("seed %d: jobs never drained", seed)
			}
			if runs := h.s.ActiveRuns(); len(runs) > 0 {
				r := runs[0]
				for i, node := range r.Nodes {
					if !r.Steps[node].Terminal() {
						id, _ := strconv.Atoi(h.s.JobRecord(r.Job).Job.GetJobId())
						h.step(id, r.Attempt, r.Hostnames[i], eventsv1.StepState_STEP_EXITED, 0)
						break
					}
				}
				continue
			}
			live := false
			for _, j := range h.s.Jobs(nil) {
				live = live || !j.GetState().Terminal()
			}
			if !live {
				break
			}
			h.tick(30 * time.Second) // requeue stop waits, fences
		}
		for _, j := range h.s.Jobs(nil) {
			seen[j.GetState().String()]++
			if j.GetUserFailures() > j.GetMaxRetries()+1 {
				t.Fatalf("seed %d: job %s failed %d times with max_retries %d", seed, j.GetName(), j.GetUserFailures(), j.GetMaxRetries())
			}
		}
	}
	t.Logf("%v", seen)
	if seen["COMPLETED"] == 0 || seen["verdict"] == 0 {
		t.Fatalf("the mix missed its paths: %v", seen)
	}
}

// TestUnansweredTasksGiveUp: a requeued job whose old run's srun tasks are
// never heard to end starts again at the stop wait's end, once the old run
// gave those nodes up (their tasks lost), not before.
func TestUnansweredTasksGiveUp(t *testing.T) {
	t.Parallel()
	h := batchOnTwo(t)
	h.do(createStep("r1"))
	h.do(&eventsv1.UpdateJob{Job: jobName(1), Cluster: cl, Action: ActionRequeue})
	h.step(1, 1, "a", eventsv1.StepState_STEP_KILLED, 143) // the batch step answers; the tasks never do
	if c := h.tick(DefaultRequeueStopWait - 2*time.Second); len(starts(c)) != 0 {
		t.Fatal("started before the stop wait's end")
	}
	c := h.tick(2 * time.Second)
	if st := starts(c); len(st) != 1 || st[0].GetAttempt() != 2 {
		t.Fatalf("want attempt 2 at the stop wait's end, got %v", st)
	}
	if r := h.s.Run(jobName(1), 1); !r.Released || r.JobSteps[0].State == loomv1.JobState_RUNNING {
		t.Fatalf("attempt 1 still holds its nodes or its step runs: released %v, step %v", r.Released, r.JobSteps[0].State)
	}
}

// TestHealthDrainKeepsRuns: health's ACTION_DRAIN (an operator's drain, or a
// repair that waits for the jobs) keeps new work off the node and lets its
// runs finish; NodeDrained follows the last one.
func TestHealthDrainKeepsRuns(t *testing.T) {
	t.Parallel()
	h := newHealthHarness(t, Config{})
	h.node("gpu-0001", 8)
	h.submit(1, 1, 4)
	c := h.health("gpu-0001", &eventsv1.NodeHealthChanged{Health: eventsv1.NodeHealth_UNHEALTHY,
		Action: loomv1.RemediationAction_ACTION_DRAIN, Reason: "drained by ops", SetBy: "users/ops"})
	if len(stops(c)) != 0 || len(signals(c)) != 0 || len(drainedEvents(c)) != 0 {
		t.Fatalf("a drain disturbed the run: %v", c.Emits)
	}
	c = h.submit(2, 1, 4)
	if d := decision(c, 2); d == nil || d.Filtered["NodeUnhealthy"] != 1 {
		t.Fatalf("job 2 on a drained node: %+v", d)
	}
	if n := views.SlurmNodes(h.s, cl)[0]; n.GetState() != loomv1.SlurmNode_DRAINING || n.GetReasonUser() != "users/ops" {
		t.Fatalf("sinfo: %v by %q", n.GetState(), n.GetReasonUser())
	}
	wantDrained(t, h.finishRun(1), "gpu-0001")
	h.wantState(1, loomv1.JobState_COMPLETED, "")
}

// finishRun reports every step of the job's current run exited 0, and
// returns the last change.
func (h *harness) finishRun(id int) *Change {
	j := h.s.JobRecord(jobName(id))
	r := h.s.Run(jobName(id), j.Attempt)
	var c *Change
	for _, host := range r.Hostnames {
		c = h.step(id, j.Attempt, host, eventsv1.StepState_STEP_EXITED, 0)
	}
	return c
}

// TestPrologFailureRequeues: a step its node refused because a prolog check
// failed there is the node's failure, not the job's: the job is requeued
// without using its max_retries (it has none), the node excluded until
// health reports it repaired, the run's other steps stopped; the next
// attempt starts on other nodes once they have. Any other failure to start
// ends the job FAILED.
func TestPrologFailureRequeues(t *testing.T) {
	t.Parallel()
	h := newHealthHarness(t, Config{})
	for _, host := range []string{"gpu-0001", "gpu-0002", "gpu-0003"} {
		h.node(host, 8)
	}
	h.submit(1, 2, 8)
	hosts := h.job(1).GetNodes()
	if len(hosts) != 2 {
		t.Fatalf("job 1 on %v", hosts)
	}
	bad, other := hosts[0], hosts[1]
	h.step(1, 1, other, eventsv1.StepState_STEP_RUNNING, 0)
	msg := "prolog check failed on " + bad + ": level 1 on 8 GPUs: GPU 3 has fallen off the bus (check gpu_diag)"
	c := h.do(&eventsv1.StepChanged{Job: jobName(1), Attempt: 1, Node: nodeName(bad), Cluster: cl,
		State: eventsv1.StepState_STEP_FAILED_TO_START, ExitCode: 1, Message: msg})
	if got := statesOf(c, 1); len(got) < 2 || got[0] != loomv1.JobState_NODE_FAIL || got[1] != loomv1.JobState_REQUEUED {
		t.Fatalf("after the prolog failure: %v, want NODE_FAIL then REQUEUED", got)
	}
	rec := h.s.JobRecord(jobName(1))
	if !reflect.DeepEqual(rec.Excluded, []string{bad}) || rec.InfraRestarts != 1 || h.job(1).GetUserFailures() != 0 {
		t.Fatalf("excluded %v, infra restarts %d, user failures %d", rec.Excluded, rec.InfraRestarts, h.job(1).GetUserFailures())
	}
	if r := h.s.Run(jobName(1), 1); r.Outcome != loomv1.JobState_NODE_FAIL || !strings.HasPrefix(r.Reason, "prolog check failed on "+bad) {
		t.Fatalf("run 1 ended %v %q", r.Outcome, r.Reason)
	}
	st := stops(c)
	if len(st) != 1 || st[0].GetNode() != nodeName(other) || st[0].GetCause() != eventsv1.StopCause_STOP_CAUSE_NODE_FAILURE {
		t.Fatalf("stops %v, want the other node's step stopped", st)
	}
	if len(starts(c)) != 0 {
		t.Fatalf("attempt 2 started while attempt 1 still runs on %s", other)
	}
	// The other step ends: attempt 2 starts, not on the node that failed.
	c = h.step(1, 1, other, eventsv1.StepState_STEP_KILLED, 143)
	ss := starts(c)
	if len(ss) != 2 || ss[0].GetAttempt() != 2 {
		t.Fatalf("starts %v, want attempt 2 on 2 nodes", ss)
	}
	for _, s := range ss {
		if s.GetNode() == nodeName(bad) {
			t.Fatalf("attempt 2 started on %s, which failed its prolog", bad)
		}
	}
	// Health repairs the node: the exclusion goes.
	h.health(bad, &eventsv1.NodeHealthChanged{Health: eventsv1.NodeHealth_UNHEALTHY, Reason: "check gpu_diag failed"})
	h.tick(time.Minute)
	h.health(bad, &eventsv1.NodeHealthChanged{Health: eventsv1.NodeHealth_HEALTHY, Repaired: true})
	if got := h.s.JobRecord(jobName(1)).Excluded; len(got) != 0 {
		t.Fatalf("exclusion kept after the repair: %v", got)
	}

	// Any other failure to start is the job's: FAILED, no retry.
	h2 := newHealthHarness(t, Config{})
	h2.node("gpu-0001", 8)
	h2.submit(2, 1, 8)
	h2.do(&eventsv1.StepChanged{Job: jobName(2), Attempt: 1, Node: nodeName("gpu-0001"), Cluster: cl,
		State: eventsv1.StepState_STEP_FAILED_TO_START, ExitCode: 1, Message: "exec: no such file"})
	h2.wantState(2, loomv1.JobState_FAILED, "JobLaunchFailure on gpu-0001: exec: no such file")
}

// TestPrologFailureAwaitsHealth: a job that only the node that failed its
// prolog could take waits for health's verdict on it instead of ending at
// once as hopeless; it runs again once the node is repaired, and ends saying
// why when no verdict comes within PrologVerdictWait.
func TestPrologFailureAwaitsHealth(t *testing.T) {
	t.Parallel()
	for _, repaired := range []bool{true, false} {
		h := newHealthHarness(t, Config{})
		h.node("gpu-0001", 8)
		h.submit(1, 1, 8)
		h.do(&eventsv1.StepChanged{Job: jobName(1), Attempt: 1, Node: nodeName("gpu-0001"), Cluster: cl,
			State: eventsv1.StepState_STEP_FAILED_TO_START, ExitCode: 1, Message: "prolog check failed on gpu-0001: disk full (check disk)"})
		h.wantExact(1, loomv1.JobState_PENDING, ReasonBadConstraints)
		if !repaired {
			// No verdict comes; once the wait is over, the next pass ends it.
			h.tick(PrologVerdictWait)
			h.submit(2, 1, 4) // a pass
			j := h.job(1)
			if j.GetState() != loomv1.JobState_NODE_FAIL || !strings.Contains(j.GetStateReason(), "every node it may use failed under it (gpu-0001)") {
				t.Fatalf("job 1 with no verdict: %v %q", j.GetState(), j.GetStateReason())
			}
			continue
		}
		h.health("gpu-0001", &eventsv1.NodeHealthChanged{Health: eventsv1.NodeHealth_UNHEALTHY, Reason: "check disk failed"})
		h.tick(time.Hour) // the repair takes longer than the wait: the verdict holds the job
		h.wantExact(1, loomv1.JobState_PENDING, ReasonBadConstraints)
		c := h.health("gpu-0001", &eventsv1.NodeHealthChanged{Health: eventsv1.NodeHealth_HEALTHY, Repaired: true})
		if st := starts(c); len(st) != 1 || st[0].GetAttempt() != 2 {
			t.Fatalf("want attempt 2 once the node was repaired, got %v", st)
		}
	}
}

// TestPrologFailureHoldsTheNodeUntilHealthSpeaks: health hears of a prolog
// failure only through the check's result, so its verdict comes after the
// scheduler requeued the job. In between the node must not show IDLE nor
// take work: it is held out (DRAINED, "Prolog error: …", set by the
// scheduler) until health's verdict replaces the hold in the same change,
// or, when no verdict comes, until PrologVerdictWait has passed.
func TestPrologFailureHoldsTheNodeUntilHealthSpeaks(t *testing.T) {
	t.Parallel()
	for _, verdict := range []bool{true, false} {
		h := newHealthHarness(t, Config{})
		h.node("gpu-0001", 8)
		h.node("gpu-0002", 8)
		h.submit(1, 1, 8)
		bad := h.job(1).GetNodes()[0]
		msg := "prolog check failed on " + bad + ": disk full (check disk)"
		slurm := func() *loomv1.SlurmNode {
			for _, n := range views.SlurmNodes(h.s, cl) {
				if n.GetHostname() == bad {
					return n
				}
			}
			t.Fatalf("%s not shown", bad)
			return nil
		}
		c := h.do(&eventsv1.StepChanged{Job: jobName(1), Attempt: 1, Node: nodeName(bad), Cluster: cl,
			State: eventsv1.StepState_STEP_FAILED_TO_START, ExitCode: 1, Message: msg})
		// The requeued job went to the other node; the bad one, empty now, is
		// held out, not IDLE.
		if ss := starts(c); len(ss) != 1 || ss[0].GetNode() == nodeName(bad) {
			t.Fatalf("starts after the prolog failure: %v", ss)
		}
		if n := slurm(); n.GetState() != loomv1.SlurmNode_DRAINED || n.GetReason() != "Prolog error: "+msg || n.GetReasonUser() != "loom-scheduler" {
			t.Fatalf("%s after its prolog failed: %v %q by %q, want DRAINED", bad, n.GetState(), n.GetReason(), n.GetReasonUser())
		}
		if h.s.Node(nodeName(bad)).Usable() {
			t.Fatalf("%s usable after its prolog failed", bad)
		}
		// Another job that fits only there waits.
		h.submit(2, 1, 8)
		if got := h.job(2).GetNodes(); len(got) != 0 {
			t.Fatalf("job 2 placed on %v while %s is held", got, bad)
		}
		if verdict {
			// Health's drain takes over in one change: never usable between.
			h.health(bad, &eventsv1.NodeHealthChanged{Health: eventsv1.NodeHealth_UNHEALTHY, Reason: "Prolog error: check disk failed: disk full",
				State: loomv1.RemediationState_NODE_DRAINING, CheckpointFirst: true, SetBy: "loom-health", Time: timestamppb.New(h.now)})
			n := h.s.Node(nodeName(bad))
			if n.PrologHold || n.Usable() || !n.HealthOut() {
				t.Fatalf("after health's verdict: hold %v usable %v out %v", n.PrologHold, n.Usable(), n.HealthOut())
			}
			if s := slurm(); s.GetState() != loomv1.SlurmNode_DRAINED || s.GetReasonUser() != "loom-health" {
				t.Fatalf("%s after health's verdict: %v by %q", bad, s.GetState(), s.GetReasonUser())
			}
			h.tick(PrologVerdictWait)
			if h.s.Node(nodeName(bad)).Usable() || len(h.job(2).GetNodes()) != 0 {
				t.Fatalf("health's drain let go at the prolog wait")
			}
			continue
		}
		// No verdict: the hold ends at PrologVerdictWait, and job 2 runs there.
		h.tick(h.s.Node(nodeName(bad)).PrologFailed.Add(PrologVerdictWait).Sub(h.now) - time.Second)
		if h.s.Node(nodeName(bad)).Usable() {
			t.Fatal("hold ended before PrologVerdictWait")
		}
		h.tick(time.Second)
		if !h.s.Node(nodeName(bad)).Usable() || len(h.job(2).GetNodes()) != 1 || h.job(2).GetNodes()[0] != bad {
			t.Fatalf("after PrologVerdictWait with no verdict: usable %v, job 2 on %v", h.s.Node(nodeName(bad)).Usable(), h.job(2).GetNodes())
		}
	}
}

// TestCheckpointOnFailure: when a node of a 2-node run fails (health's
// urgent verdict), the attempt ends NODE_FAIL and the job is requeued at
// once, but the step on the surviving node, which still holds the training
// state, is sent the job's --signal (default USR1) instead of a stop, and
// is stopped at its first newer checkpoint; the failed node is never
// signalled. The next attempt waits for the old one's steps to end. With no
// checkpoint it is stopped at FailureCheckpointWait (a job without
// --signal) or CheckpointGrace (a job with one); a run that never reported
// a step, or with the feature off, is stopped at once.
func TestCheckpointOnFailure(t *testing.T) {
	t.Parallel()
	const wait = 30 * time.Second
	setup := func(cfg Config, signal string) (*harness, string, string) {
		return runningOnTwo(t, cfg, &loomv1.Job{Signal: signal})
	}
	xid := &eventsv1.NodeHealthChanged{Health: eventsv1.NodeHealth_UNHEALTHY, Reason: "Xid 79: GPU has fallen off the bus", Xid: 79}

	// Checkpointed: stopped at the checkpoint, then attempt 2 starts.
	h, surv, bad := setup(Config{FailureCheckpointWait: wait, CheckpointGrace: 2 * time.Minute}, "")
	c := h.health(bad, proto.Clone(xid).(*eventsv1.NodeHealthChanged))
	if got := statesOf(c, 1); len(got) < 2 || got[0] != loomv1.JobState_NODE_FAIL || got[1] != loomv1.JobState_REQUEUED {
		t.Fatalf("job 1 after the failure: %v, want NODE_FAIL then REQUEUED", got)
	}
	if sg := signals(c); len(sg) != 1 || sg[0].GetNode() != nodeName(surv) || sg[0].GetSignal() != "USR1" || sg[0].GetAttempt() != 1 {
		t.Fatalf("signals %v, want USR1 to the survivor %s only", sg, surv)
	}
	for _, s := range stops(c) {
		if s.GetNode() == nodeName(surv) {
			t.Fatalf("the survivor was stopped before it checkpointed: %v", s)
		}
	}
	if len(starts(c)) != 0 {
		t.Fatal("attempt 2 started while attempt 1's survivor runs")
	}
	if c := h.progress(1, 1, surv, 110, 50); len(stops(c)) != 0 {
		t.Fatalf("stopped on the old checkpoint: %v", stops(c))
	}
	c = h.progress(1, 1, surv, 112, 111)
	if st := stops(c); len(st) != 1 || st[0].GetNode() != nodeName(surv) || !strings.Contains(st[0].GetReason(), "checkpointed at step 111") ||
		st[0].GetCause() != eventsv1.StopCause_STOP_CAUSE_NODE_FAILURE {
		t.Fatalf("after the survivor's checkpoint: stops %v", st)
	}
	h.step(1, 1, surv, eventsv1.StepState_STEP_KILLED, 143)
	c = h.step(1, 1, bad, eventsv1.StepState_STEP_KILLED, 143) // the failed node's fence ends
	if ss := starts(c); len(ss) != 2 || ss[0].GetAttempt() != 2 {
		t.Fatalf("starts %v, want attempt 2 on 2 nodes", ss)
	}
	if r := h.s.Run(jobName(1), 1); r.Outcome != loomv1.JobState_NODE_FAIL || r.Progress.CheckpointStep != 111 {
		t.Fatalf("run 1: %v, checkpoint %d", r.Outcome, r.Progress.CheckpointStep)
	}
	if u := h.job(1).GetUserFailures(); u != 0 {
		t.Fatalf("the failure counted against the user: %d", u)
	}

	// No checkpoint, no --signal: stopped at FailureCheckpointWait.
	h, surv, bad = setup(Config{FailureCheckpointWait: wait, CheckpointGrace: 2 * time.Minute}, "")
	h.health(bad, proto.Clone(xid).(*eventsv1.NodeHealthChanged))
	h.step(1, 1, bad, eventsv1.StepState_STEP_KILLED, 143) // only the survivor holds the job back
	if c := h.tick(wait - 2*time.Second); len(stops(c)) != 0 {
		t.Fatal("stopped before the wait ended")
	}
	if st := stops(h.tick(2 * time.Second)); len(st) != 1 || st[0].GetNode() != nodeName(surv) || !strings.Contains(st[0].GetReason(), "no new checkpoint within 30s") {
		t.Fatalf("wait over: stops %v", st)
	}
	// The requeued job's wait for the stopped steps counts from the stop.
	if c := h.tick(DefaultRequeueStopWait - time.Second); len(starts(c)) != 0 {
		t.Fatal("the survivor was given up before RequeueStopWait after its stop")
	}
	if ss := starts(h.tick(time.Second)); len(ss) != 2 || ss[0].GetAttempt() != 2 {
		t.Fatalf("RequeueStopWait after the stop: starts %v, want attempt 2", ss)
	}

	// A job with --signal: its signal, and the drain's grace.
	h, surv, bad = setup(Config{FailureCheckpointWait: wait, CheckpointGrace: 2 * time.Minute}, "B:USR2@60")
	c = h.health(bad, proto.Clone(xid).(*eventsv1.NodeHealthChanged))
	if sg := signals(c); len(sg) != 1 || sg[0].GetSignal() != "USR2" || !sg[0].GetBatchOnly() {
		t.Fatalf("job's own signal: %v", sg)
	}
	if c := h.tick(time.Minute); len(stops(c)) != 0 {
		t.Fatal("a job with --signal was stopped at the short wait")
	}
	if st := stops(h.tick(time.Minute)); len(st) != 1 || st[0].GetNode() != nodeName(surv) {
		t.Fatalf("grace over: stops %v", st)
	}

	// A run that never reported a step (early in its first progress
	// interval, or its program writes no progress): waited for too, as it
	// may save on the signal (TestCheckpointOnFailureWithoutProgress).
	h = newHealthHarness(t, Config{FailureCheckpointWait: wait})
	for _, host := range []string{"gpu-0001", "gpu-0002"} {
		h.node(host, 8)
	}
	h.submit(2, 2, 8)
	hosts := h.job(2).GetNodes()
	for _, host := range hosts {
		h.step(2, 1, host, eventsv1.StepState_STEP_RUNNING, 0)
	}
	c = h.health(hosts[1], proto.Clone(xid).(*eventsv1.NodeHealthChanged))
	if sg := signals(c); len(sg) != 1 || sg[0].GetNode() != nodeName(hosts[0]) {
		t.Fatalf("no progress reported: signals %v, want USR1 to the survivor %s", sg, hosts[0])
	}
	for _, s := range stops(c) {
		if s.GetNode() == nodeName(hosts[0]) {
			t.Fatalf("no progress reported: the survivor was stopped at once: %v", s)
		}
	}

	// Off: the survivor is stopped at once, not signalled.
	h, surv, bad = setup(Config{}, "")
	c = h.health(bad, proto.Clone(xid).(*eventsv1.NodeHealthChanged))
	if len(signals(c)) != 0 {
		t.Fatalf("signalled with checkpoint on failure off: %v", signals(c))
	}
	stopped := false
	for _, s := range stops(c) {
		stopped = stopped || s.GetNode() == nodeName(surv)
	}
	if !stopped {
		t.Fatalf("off: the survivor was not stopped: %v", stops(c))
	}
}

// TestCheckpointOnFailureWithoutProgress: checkpoint on failure waits for a
// survivor that is running but has not reported progress yet, ends the
// wait at a checkpoint written after the signal (not at one from before it
// that the agent's first look reports, such as the one a resumed attempt
// started from), and ends it as soon as no survivor runs any more; a
// survivor that has not started is not waited for.
// runningOnTwo runs job 1 (job, with its name, cluster, shape and command
// filled in) on 2 of 3 nodes, both steps running and a checkpoint at step
// 50 reported from the first, and returns the harness and the two nodes.
func runningOnTwo(t *testing.T, cfg Config, job *loomv1.Job) (*harness, string, string) {
	t.Helper()
	h := newHealthHarness(t, cfg)
	for _, host := range []string{"gpu-0001", "gpu-0002", "gpu-0003"} {
		h.node(host, 8)
	}
	job.Name, job.JobId, job.Cluster, job.NodeCount, job.GpusPerNode, job.Command = jobName(1), "1", cl, 2, 8, []string{"/bin/train"}
	h.submitJob(job)
	hosts := h.job(1).GetNodes()
	if len(hosts) != 2 {
		t.Fatalf("job 1 on %v", hosts)
	}
	for _, host := range hosts {
		h.step(1, 1, host, eventsv1.StepState_STEP_RUNNING, 0)
	}
	h.progress(1, 1, hosts[0], 100, 50)
	return h, hosts[0], hosts[1]
}

// TestCheckpointOnAProgramCrash: the job's program fails on one of its
// nodes (its step exits non-zero) and the job is retried: the steps on its
// other nodes get the job's signal and are stopped at their checkpoint, as
// when a node fails, but as the job's failure stops them (not "due to node
// failure"), and the failure counts against the user. A job that is not
// retried, or a scheduler with checkpoint on failure off, stops them at once.
func TestCheckpointOnAProgramCrash(t *testing.T) {
	t.Parallel()
	const wait = 30 * time.Second
	setup := func(cfg Config, retries int32) (*harness, string, string) {
		return runningOnTwo(t, cfg, &loomv1.Job{MaxRetries: retries})
	}

	h, surv, crashed := setup(Config{FailureCheckpointWait: wait, CheckpointGrace: 2 * time.Minute}, 1)
	c := h.step(1, 1, crashed, eventsv1.StepState_STEP_EXITED, 3)
	if got := statesOf(c, 1); len(got) < 2 || got[0] != loomv1.JobState_FAILED || got[1] != loomv1.JobState_REQUEUED {
		t.Fatalf("job 1 after the crash: %v, want FAILED then REQUEUED", got)
	}
	if sg := signals(c); len(sg) != 1 || sg[0].GetNode() != nodeName(surv) || sg[0].GetSignal() != "USR1" {
		t.Fatalf("signals %v, want USR1 to the survivor %s only", sg, surv)
	}
	if st := stops(c); len(st) != 0 {
		t.Fatalf("stopped before the survivor checkpointed: %v", st)
	}
	c = h.progress(1, 1, surv, 112, 111)
	if st := stops(c); len(st) != 1 || st[0].GetNode() != nodeName(surv) || !strings.Contains(st[0].GetReason(), "checkpointed at step 111") ||
		!strings.Contains(st[0].GetReason(), "job failed on "+crashed) || st[0].GetCause() != eventsv1.StopCause_STOP_CAUSE_UNSPECIFIED {
		t.Fatalf("after the survivor's checkpoint: stops %v", st)
	}
	c = h.step(1, 1, surv, eventsv1.StepState_STEP_KILLED, 143)
	if ss := starts(c); len(ss) != 2 || ss[0].GetAttempt() != 2 {
		t.Fatalf("starts %v, want attempt 2 on 2 nodes", ss)
	}
	if r := h.s.Run(jobName(1), 1); r.Progress.CheckpointStep != 111 || r.SurvivorsOfCrash {
		t.Fatalf("run 1: checkpoint %d, survivors of crash %v", r.Progress.CheckpointStep, r.SurvivorsOfCrash)
	}
	if u := h.job(1).GetUserFailures(); u != 1 {
		t.Fatalf("user failures %d, want 1: the program's crash is the user's", u)
	}

	// Not retried (no retries left): the job fails and the survivor is
	// stopped at once; so with checkpoint on failure off.
	for _, tc := range []struct {
		name    string
		cfg     Config
		retries int32
	}{
		{"not retried", Config{FailureCheckpointWait: wait, CheckpointGrace: 2 * time.Minute}, 0},
		{"off", Config{CheckpointGrace: 2 * time.Minute}, 1},
	} {
		h, surv, crashed := setup(tc.cfg, tc.retries)
		c := h.step(1, 1, crashed, eventsv1.StepState_STEP_EXITED, 3)
		if st := stops(c); len(st) != 1 || st[0].GetNode() != nodeName(surv) || len(signals(c)) != 0 {
			t.Fatalf("%s: stops %v, signals %v; want the survivor stopped at once", tc.name, st, signals(c))
		}
	}
}

func TestCheckpointOnFailureWithoutProgress(t *testing.T) {
	t.Parallel()
	const wait = 30 * time.Second
	xid := &eventsv1.NodeHealthChanged{Health: eventsv1.NodeHealth_UNHEALTHY, Reason: "Xid 79: GPU has fallen off the bus", Xid: 79}
	// setup runs job 1 on 2 of 3 nodes; started says which of its steps
	// the agents reported running. No progress is reported.
	setup := func(started ...bool) (*harness, string, string) {
		h := newHealthHarness(t, Config{FailureCheckpointWait: wait, CheckpointGrace: 2 * time.Minute})
		for _, host := range []string{"gpu-0001", "gpu-0002", "gpu-0003"} {
			h.node(host, 8)
		}
		h.submit(1, 2, 8)
		hosts := h.job(1).GetNodes()
		if len(hosts) != 2 {
			t.Fatalf("job 1 on %v", hosts)
		}
		for i, host := range hosts {
			if started[i] {
				h.step(1, 1, host, eventsv1.StepState_STEP_RUNNING, 0)
			}
		}
		return h, hosts[0], hosts[1]
	}
	// ckpt reports a checkpoint at step written at written.
	ckpt := func(h *harness, host string, step int64, written time.Time) *Change {
		return h.do(&eventsv1.StepProgress{Job: jobName(1), Attempt: 1, Node: nodeName(host), Step: step,
			CheckpointStep: step, CheckpointTime: timestamppb.New(written), LastProgress: timestamppb.New(h.now)})
	}
	survivorStopped := func(c *Change, surv string) *eventsv1.StopStep {
		for _, s := range stops(c) {
			if s.GetNode() == nodeName(surv) {
				return s
			}
		}
		return nil
	}

	// The checkpoint it resumed from (written before the signal) does not
	// end the wait; the one written on the signal does.
	h, surv, bad := setup(true, true)
	resumed := h.now.Add(-time.Hour)
	c := h.health(bad, proto.Clone(xid).(*eventsv1.NodeHealthChanged))
	signalled := h.now
	if sg := signals(c); len(sg) != 1 || sg[0].GetNode() != nodeName(surv) || sg[0].GetSignal() != "USR1" {
		t.Fatalf("signals %v, want USR1 to the survivor %s only", sg, surv)
	}
	if s := survivorStopped(c, surv); s != nil {
		t.Fatalf("a running survivor without reported progress was stopped at once: %v", s)
	}
	if s := survivorStopped(ckpt(h, surv, 100, resumed), surv); s != nil {
		t.Fatalf("stopped at the checkpoint written before the signal: %v", s)
	}
	if s := survivorStopped(ckpt(h, surv, 101, signalled.Add(-time.Millisecond)), surv); s != nil {
		t.Fatalf("stopped at a newer checkpoint still written before the signal: %v", s)
	}
	c = ckpt(h, surv, 102, h.now)
	if s := survivorStopped(c, surv); s == nil || !strings.Contains(s.GetReason(), "checkpointed at step 102") {
		t.Fatalf("after the checkpoint written on the signal: stops %v", stops(c))
	}
	h.step(1, 1, surv, eventsv1.StepState_STEP_KILLED, 143)
	if ss := starts(h.step(1, 1, bad, eventsv1.StepState_STEP_KILLED, 143)); len(ss) != 2 || ss[0].GetAttempt() != 2 {
		t.Fatalf("starts %v, want attempt 2 once attempt 1's steps ended", ss)
	}

	// A program that does not handle the signal ends on it: the wait ends
	// then, and attempt 2 starts without waiting for the wait's end.
	h, surv, bad = setup(true, true)
	h.health(bad, proto.Clone(xid).(*eventsv1.NodeHealthChanged))
	h.step(1, 1, bad, eventsv1.StepState_STEP_KILLED, 143) // the failed node's fence ends
	c = h.step(1, 1, surv, eventsv1.StepState_STEP_EXITED, 138)
	if ss := starts(c); len(ss) != 2 || ss[0].GetAttempt() != 2 {
		t.Fatalf("starts %v, want attempt 2 once the survivor ended on the signal", ss)
	}
	if r := h.s.Run(jobName(1), 1); !r.SurvivorsBy.IsZero() || r.StopsSent.IsZero() {
		t.Fatalf("run 1 after its survivor ended: survivors by %v, stops sent %v, want the wait over", r.SurvivorsBy, r.StopsSent)
	}
	if u := h.job(1).GetUserFailures(); u != 0 {
		t.Fatalf("the survivor's end on the signal counted against the user: %d", u)
	}

	// The survivor ends while the failed node is still fenced: the wait is
	// over (nothing to stop), and the fence alone holds attempt 2 back.
	h, surv, bad = setup(true, true)
	h.health(bad, proto.Clone(xid).(*eventsv1.NodeHealthChanged))
	c = h.step(1, 1, surv, eventsv1.StepState_STEP_EXITED, 0)
	if len(stops(c)) != 0 || len(starts(c)) != 0 {
		t.Fatalf("survivor ended, failed node fenced: stops %v, starts %v, want none", stops(c), starts(c))
	}
	if r := h.s.Run(jobName(1), 1); !r.SurvivorsBy.IsZero() {
		t.Fatalf("run 1 still waits for survivors until %v after they ended", r.SurvivorsBy)
	}
	if ss := starts(h.step(1, 1, bad, eventsv1.StepState_STEP_KILLED, 143)); len(ss) != 2 || ss[0].GetAttempt() != 2 {
		t.Fatalf("starts %v, want attempt 2 once the fence ended", ss)
	}

	// A survivor its agent has not reported started has nothing to save:
	// not waited for, stopped at once.
	h, surv, bad = setup(false, true)
	c = h.health(bad, proto.Clone(xid).(*eventsv1.NodeHealthChanged))
	if len(signals(c)) != 0 || survivorStopped(c, surv) == nil {
		t.Fatalf("survivor not started: signals %v, stops %v, want it stopped at once", signals(c), stops(c))
	}

	// A checkpoint reported from the failed node (not signalled: its
	// agent's last read as its step ends) does not end the survivors' wait;
	// the survivor's own one does.
	h, surv, bad = setup(true, true)
	h.health(bad, proto.Clone(xid).(*eventsv1.NodeHealthChanged))
	if s := survivorStopped(ckpt(h, bad, 105, h.now), surv); s != nil {
		t.Fatalf("the survivor was stopped at the failed node's checkpoint: %v", s)
	}
	if s := survivorStopped(ckpt(h, surv, 106, h.now), surv); s == nil || !strings.Contains(s.GetReason(), "checkpointed at step 106") {
		t.Fatalf("the survivor's checkpoint on the signal did not end the wait")
	}
}

// TestProgressReportsBounded: a run's progress reports are kept at most once
// per MinProgressInterval, whatever its nodes send; a new checkpoint passes
// one kept a moment before (drains wait for it), but not a second new
// checkpoint within the interval. What is passed over arrives with the next
// report kept.
func TestProgressReportsBounded(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("gpu-0001", 8)
	h.submit(1, 1, 8)
	n1 := h.job(1).GetNodes()[0]
	h.step(1, 1, n1, eventsv1.StepState_STEP_RUNNING, 0)
	at := func(d time.Duration, step, ckpt int64) *Change {
		t.Helper()
		c, err := h.s.Handle(h.now.Add(d), &eventsv1.StepProgress{Job: jobName(1), Attempt: 1, Node: nodeName(n1), Step: step,
			CheckpointStep: ckpt, LastProgress: timestamppb.New(h.now.Add(d))})
		if err != nil {
			t.Fatal(err)
		}
		h.commit(c)
		return c
	}
	progress := func() jobstore.Progress { return h.s.Run(jobName(1), 1).Progress }
	at(0, 10, 0)
	for i := range 50 { // a flood within the interval: none written
		if c := at(time.Duration(i+1)*time.Millisecond, int64(11+i), 0); len(c.Runs) != 0 {
			t.Fatalf("report %d within the interval wrote the run", i)
		}
	}
	if p := progress(); p.Step != 10 {
		t.Fatalf("step %d after the flood, want the first report's 10", p.Step)
	}
	if at(100*time.Millisecond, 70, 60); progress().CheckpointStep != 60 || progress().Step != 70 {
		t.Fatalf("a new checkpoint within the interval was not kept: %+v", progress())
	}
	if at(200*time.Millisecond, 80, 75); progress().CheckpointStep != 60 {
		t.Fatalf("a second new checkpoint within the interval was kept: %+v", progress())
	}
	if at(1200*time.Millisecond, 90, 75); progress().CheckpointStep != 75 || progress().Step != 90 {
		t.Fatalf("the next report past the interval: %+v, want its figures", progress())
	}
}

// runEnds lists job id's terminal JobChanged events in c as "STATE
// requeue_follows=B".
func runEnds(c *Change, id int) []string {
	var out []string
	for _, jc := range jobChanges(c) {
		if jc.GetJob().GetName() == jobName(id) && jc.GetJob().GetState().Terminal() {
			out = append(out, fmt.Sprintf("%s requeue_follows=%v", jc.GetJob().GetState(), jc.GetRequeueFollows()))
		}
	}
	return out
}

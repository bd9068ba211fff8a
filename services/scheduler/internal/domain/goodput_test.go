package domain

import (
	"encoding/json"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestGoodputOfPrunedJobs: a job's goodput, checkpointing included, is the
// same before and after retention prunes it (from its compact record, and
// from that record read back from storage's JSON into a fresh state), and
// the cluster's figure counts it the same way on either side of the
// pruning, by the same window rule. A record that predates goodput is
// NotFound for the job and left out of the cluster's figure.
func TestGoodputOfPrunedJobs(t *testing.T) {
	t.Parallel()
	h := newHealthHarness(t, Config{})
	h.node("gpu-0001", 8)
	h.node("gpu-0002", 8)
	h.submit(1, 1, 8)
	host := h.job(1).GetNodes()[0]
	h.tick(10 * time.Minute)
	// A checkpoint now, after 30 s spent writing checkpoints; then a
	// negative duration (broken or hostile), which is ignored.
	h.do(&eventsv1.StepProgress{Job: jobName(1), Attempt: 1, Node: nodeName(host), Step: 500, CheckpointStep: 500,
		CheckpointDuration: durationpb.New(30 * time.Second), LastProgress: timestamppb.New(h.now)})
	h.do(&eventsv1.StepProgress{Job: jobName(1), Attempt: 1, Node: nodeName(host), Step: 501,
		CheckpointDuration: durationpb.New(-time.Hour), LastProgress: timestamppb.New(h.now)})
	if got := h.s.Run(jobName(1), 1).Progress.Checkpointing; got != 30*time.Second {
		t.Fatalf("run 1 checkpointing %v, want 30s (a negative report ignored)", got)
	}
	h.tick(5 * time.Minute)
	h.health(host, &eventsv1.NodeHealthChanged{Health: eventsv1.NodeHealth_UNHEALTHY, Reason: "Xid 79"})
	h.step(1, 1, host, eventsv1.StepState_STEP_KILLED, 143)
	if a := h.s.JobRecord(jobName(1)).Attempt; a != 2 || h.s.Run(jobName(1), 2) == nil {
		t.Fatalf("job 1 after the failure: attempt %d, want a second run", a)
	}
	h.tick(20 * time.Minute)
	host2 := h.job(1).GetNodes()[0]
	h.do(&eventsv1.StepProgress{Job: jobName(1), Attempt: 2, Node: nodeName(host2), Step: 900, CheckpointStep: 900,
		CheckpointDuration: durationpb.New(45 * time.Second), LastProgress: timestamppb.New(h.now)})
	h.finishRun(1)
	h.wantExact(1, loomv1.JobState_COMPLETED, "")
	end := h.job(1).GetEndTime().AsTime()

	live := h.s.JobGoodput(jobName(1), h.now)
	if ck := live.GetLostCheckpointing().AsDuration(); ck != 75*time.Second {
		t.Fatalf("lost_checkpointing %v, want 30s + 45s", ck)
	}
	if live.GetFailures() != 1 || live.GetLostRecompute().AsDuration() < 5*time.Minute {
		t.Fatalf("live goodput %v", live)
	}
	sum := live.GetProductive().AsDuration() + live.GetLostRecompute().AsDuration() + live.GetLostRestart().AsDuration() +
		live.GetLostQueueing().AsDuration() + live.GetLostCheckpointing().AsDuration()
	if sum != live.GetWall().AsDuration() {
		t.Fatalf("parts add up to %v, wall %v", sum, live.GetWall().AsDuration())
	}
	inWindow, afterEnd := end.Add(-time.Hour), end.Add(time.Second)
	clusterBefore := h.s.ClusterGoodput(cl, inWindow, h.now)
	if clusterBefore.GetJobs() != 1 || h.s.ClusterGoodput(cl, afterEnd, h.now).GetJobs() != 0 {
		t.Fatalf("cluster goodput before pruning: %v", clusterBefore)
	}

	h.tick(DefaultMinJobAge + time.Minute)
	p := h.prune(Retention{})
	if len(p.Jobs) != 1 || h.s.JobRecord(jobName(1)) != nil {
		t.Fatalf("job 1 not pruned: %+v", p)
	}
	h.tick(24 * time.Hour) // a day later, the figures are the same
	if g := h.s.JobGoodput(jobName(1), h.now); !proto.Equal(g, live) {
		t.Fatalf("pruned job's goodput\n%v\nwant %v", g, live)
	}
	if c := h.s.ClusterGoodput(cl, inWindow, h.now); !proto.Equal(c, clusterBefore) {
		t.Fatalf("cluster goodput after pruning\n%v\nwant %v", c, clusterBefore)
	}
	if c := h.s.ClusterGoodput(cl, afterEnd, h.now); c.GetJobs() != 0 {
		t.Fatalf("a job ended before since counted: %v", c)
	}

	// Read back from storage's JSON into a fresh state, as at start-up.
	b, err := json.Marshal(p.Ended)
	if err != nil {
		t.Fatal(err)
	}
	var back []*Ended
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(b) > 600 {
		t.Fatalf("compact record of %d bytes: %s", len(b), b)
	}
	fresh := newHealthHarness(t, Config{})
	fresh.s.LoadEnded(back)
	if g := fresh.s.JobGoodput(jobName(1), fresh.now); !proto.Equal(g, live) {
		t.Fatalf("goodput from the stored record\n%v\nwant %v", g, live)
	}
	if c := fresh.s.ClusterGoodput(cl, inWindow, fresh.now); !proto.Equal(c, clusterBefore) {
		t.Fatalf("cluster goodput from stored records\n%v\nwant %v", c, clusterBefore)
	}

	// A record written before goodput was kept: no figures, not counted.
	h.s.LoadEnded([]*Ended{{Name: jobName(50), State: loomv1.JobState_COMPLETED, Start: end, End: end}})
	if g := h.s.JobGoodput(jobName(50), h.now); g != nil {
		t.Fatalf("goodput of a record without figures: %v", g)
	}
	if c := h.s.ClusterGoodput(cl, inWindow, h.now); !proto.Equal(c, clusterBefore) {
		t.Fatalf("cluster goodput with an old record\n%v\nwant %v", c, clusterBefore)
	}
}

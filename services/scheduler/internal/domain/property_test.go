package domain

import (
	"container/heap"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// checkGangs fails when a job started in c did not get all of its nodes at
// once: its run must hold exactly the nodes it asked for, each with the
// GPUs asked, and its steps must cover them (the batch host alone for a
// script).
func checkGangs(t *testing.T, s *State, c *Change) {
	t.Helper()
	started := map[string]int{}
	for _, ss := range starts(c) {
		started[RunKey(ss.GetJob(), ss.GetAttempt())]++
	}
	for _, jc := range jobChanges(c) {
		j := jc.GetJob()
		if j.GetState() != loomv1.JobState_RUNNING {
			continue
		}
		r := s.Run(j.GetName(), jc.GetAttempt())
		if r == nil {
			t.Fatalf("job %s RUNNING without a run", j.GetName())
		}
		want := int(max(j.GetNodeCount(), 1))
		if j.GetGpus() > 0 && j.GetGpusPerNode() == 0 {
			want = len(r.Nodes) // --gpus picks its node count
		}
		if len(r.Nodes) != want || len(j.GetNodes()) != want {
			t.Fatalf("gang %s asked %d nodes, holds %d (%v)", j.GetName(), want, len(r.Nodes), j.GetNodes())
		}
		steps := want
		if j.GetScript() != "" {
			steps = 1
		}
		if got := started[r.Key()]; got != steps {
			t.Fatalf("gang %s: %d StartSteps, want %d", j.GetName(), got, steps)
		}
		for _, node := range r.Nodes {
			if g := j.GetGpusPerNode(); g > 0 && int32(len(r.GPUs[node])) != g {
				t.Fatalf("gang %s got %d GPUs on %s, asked %d", j.GetName(), len(r.GPUs[node]), node, g)
			}
		}
	}
}

// randomStepEnd is the end (exit code 0 or 1) of a random run's step on a
// random one of its nodes, or nil when there is no run or that step has
// ended already: the random workloads' "a live step reports an end".
func randomStepEnd(s *State, rng *rand.Rand) *eventsv1.StepChanged {
	runs := s.ActiveRuns()
	if len(runs) == 0 {
		return nil
	}
	r := runs[rng.IntN(len(runs))]
	i := rng.IntN(len(r.Nodes))
	if r.Steps[r.Nodes[i]].Terminal() {
		return nil
	}
	return &eventsv1.StepChanged{Job: r.Job, Attempt: r.Attempt, Node: r.Nodes[i], State: eventsv1.StepState_STEP_EXITED,
		ExitCode: int32(rng.IntN(2)), Cluster: cl}
}

// randomFeatures plays steps random events of everything the scheduler
// does (QOS preemption with and without --signal, time limits, begin times,
// holds, requeues, cancels, arrays, exclusive and multi-node jobs, node
// failures, admin drains, provisioner drains, ticks) on four GPU nodes and a
// CPU node, seeded, calling seen (when not nil) with the state after every
// change.
func randomFeatures(t *testing.T, seed uint64, steps int, seen func(*State, *Change)) *harness {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 11))
	h := newSpecHarness(t, Config{PreemptGrace: 5 * time.Second})
	hosts := []string{"a3-0001", "a3-0002", "a3-0003", "a3-0004"}
	for i, host := range hosts {
		h.gpuNode(host, "b"+strconv.Itoa(i/2))
	}
	h.cpuNode("cpu-0001")
	next := 1
	note := func(c *Change) {
		if seen != nil {
			seen(h.s, c)
		}
	}
	do := func(ev proto.Message) { note(h.do(ev)) }
	for range steps {
		switch op := rng.IntN(20); {
		case op < 6:
			j := job(next, int32(1+rng.IntN(3)), int32(rng.IntN(9)), limit(time.Duration(1+rng.IntN(30))*time.Minute))
			switch rng.IntN(9) {
			case 0:
				j.Qos = "high"
			case 1:
				j.Qos, j.Signal = "low", "USR1@10"
			case 2:
				j.Qos = "low"
			case 3:
				j.Exclusive = true
			case 4:
				j.Command, j.Script = nil, "train"
			case 5:
				j.Hold = true
			case 6:
				j.Array, j.GpusPerNode, j.NodeCount = "0-3%2", 1, 1
			case 7:
				j.BeginTime = timestamppb.New(h.now.Add(time.Duration(rng.IntN(3600)) * time.Second))
			}
			do(&eventsv1.SubmitJob{Job: j})
			next += 4
		case op < 11:
			if ev := randomStepEnd(h.s, rng); ev != nil {
				do(ev)
			}
		case op < 12:
			if next > 1 {
				do(&eventsv1.UpdateJob{Job: jobName(1 + rng.IntN(next-1)), Cluster: cl,
					Action: []string{ActionHold, ActionRelease, ActionRequeue}[rng.IntN(3)]})
			}
		case op < 13:
			if next > 1 {
				do(&eventsv1.CancelJob{Job: jobName(1 + rng.IntN(next-1)), Cluster: cl})
			}
		case op < 14:
			host := hosts[rng.IntN(len(hosts))]
			health := eventsv1.NodeHealth_UNHEALTHY
			if h.s.Node(nodeName(host)).Unhealthy {
				health = eventsv1.NodeHealth_HEALTHY
			}
			do(&eventsv1.NodeHealthChanged{Node: nodeName(host), Cluster: cl, Health: health, Reason: "test"})
		case op < 15:
			state := "DRAIN"
			host := hosts[rng.IntN(len(hosts))]
			if h.s.Node(nodeName(host)).AdminDrain {
				state = "RESUME"
			}
			do(&eventsv1.UpdateSlurmNode{Cluster: cl, Hostname: host, State: state, Reason: "test"})
		case op < 16:
			host := hosts[rng.IntN(len(hosts))]
			do(&eventsv1.NodeChanged{Node: &loomv1.Node{Name: nodeName(host), Cluster: cl, Hostname: host, Gpus: 8,
				State: loomv1.Node_DRAINING, NodePool: "a3", MachineType: "a3-highgpu-8g",
				DrainDeadline: timestamppb.New(h.now.Add(time.Duration(rng.IntN(60)) * time.Second))}})
			if rng.IntN(2) == 0 {
				note(h.gpuNode(host, "b0"))
			}
		default:
			note(h.tick(time.Duration(rng.IntN(120)) * time.Second))
		}
	}
	return h
}

// TestRandomFeaturesKeepInvariants drives random mixes of everything the
// scheduler does (randomFeatures) and checks after every event that no GPU
// is held twice (checkInvariants) and that every gang got all of its nodes
// (checkGangs).
func TestRandomFeaturesKeepInvariants(t *testing.T) {
	t.Parallel()
	seen := map[loomv1.JobState]bool{}
	for seed := uint64(1); seed <= 20; seed++ {
		randomFeatures(t, seed, 250, func(s *State, c *Change) {
			checkGangs(t, s, c)
			checkLists(t, s)
			for _, jc := range jobChanges(c) {
				seen[jc.GetJob().GetState()] = true
			}
		})
	}
	for _, st := range []loomv1.JobState{loomv1.JobState_PREEMPTED, loomv1.JobState_TIMEOUT, loomv1.JobState_REQUEUED,
		loomv1.JobState_NODE_FAIL, loomv1.JobState_COMPLETED, loomv1.JobState_FAILED, loomv1.JobState_CANCELLED} {
		if !seen[st] {
			t.Errorf("the random mix never reached %v", st)
		}
	}
}

// simEvent is a future event of the backfill simulation.
type simEvent struct {
	at   time.Time
	kind int // 0: a step exits, 1: a job is submitted
	seq  int
	msg  proto.Message
}

type simQueue []simEvent

func (q simQueue) Len() int { return len(q) }
func (q simQueue) Less(a, b int) bool {
	if !q[a].at.Equal(q[b].at) {
		return q[a].at.Before(q[b].at)
	}
	if q[a].kind != q[b].kind {
		return q[a].kind < q[b].kind
	}
	return q[a].seq < q[b].seq
}
func (q simQueue) Swap(a, b int) { q[a], q[b] = q[b], q[a] }
func (q *simQueue) Push(x any)   { *q = append(*q, x.(simEvent)) }
func (q *simQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// TestBackfillNeverDelaysReservation simulates random workloads whose jobs
// run for known times within their limits, under EASY backfill, and checks
// that every job that was given a reservation (as the first job that could
// not start) starts no later than the reservation said, and that no job
// starves.
func TestBackfillNeverDelaysReservation(t *testing.T) {
	t.Parallel()
	reservations, checked := 0, 0
	for seed := uint64(1); seed <= 30; seed++ {
		rng := rand.New(rand.NewPCG(seed, 5))
		h := newSpecHarness(t, Config{Policy: EASYPolicy()})
		for i := range 5 {
			h.gpuNode("a3-000"+strconv.Itoa(i+1), "b1")
		}
		runtime := map[string]time.Duration{}
		promised := map[string]time.Time{}
		started := map[string]time.Time{}
		var q simQueue
		seq := 0
		push := func(at time.Time, kind int, msg proto.Message) {
			seq++
			heap.Push(&q, simEvent{at: at, kind: kind, seq: seq, msg: msg})
		}
		at := h.now
		const jobs = 60
		for id := 1; id <= jobs; id++ {
			at = at.Add(time.Duration(rng.IntN(300)) * time.Second)
			lim := time.Duration(5+rng.IntN(120)) * time.Minute
			j := job(id, int32(1+rng.IntN(3)), int32(1+rng.IntN(8)), limit(lim))
			j.SubmitTime = timestamppb.New(at)
			runtime[j.GetName()] = time.Duration(1+rng.Int64N(int64(lim/time.Second))) * time.Second
			push(at, 1, &eventsv1.SubmitJob{Job: j})
		}
		observe := func(c *Change) {
			for _, res := range c.Reservations {
				if _, ok := promised[res.Job]; !ok && !res.Unbounded {
					promised[res.Job] = res.Start
					reservations++
				}
			}
			for _, ss := range starts(c) {
				if _, ok := started[ss.GetJob()]; !ok {
					started[ss.GetJob()] = h.now
				}
				push(h.now.Add(runtime[ss.GetJob()]), 0, &eventsv1.StepChanged{Job: ss.GetJob(), Attempt: ss.GetAttempt(),
					Node: ss.GetNode(), State: eventsv1.StepState_STEP_EXITED, Cluster: cl})
			}
		}
		for q.Len() > 0 {
			ev := heap.Pop(&q).(simEvent)
			h.now = ev.at
			c, err := h.s.Handle(h.now, ev.msg)
			if err != nil {
				t.Fatal(err)
			}
			h.commit(c)
			observe(c)
		}
		for id := 1; id <= jobs; id++ {
			name := jobName(id)
			st, ok := started[name]
			if !ok {
				t.Fatalf("seed %d: job %d never started (%v)", seed, id, h.job(id).GetStateReason())
			}
			if p, ok := promised[name]; ok {
				checked++
				if st.After(p) {
					t.Fatalf("seed %d: job %d reserved for %v started %v late", seed, id, p, st.Sub(p))
				}
			}
		}
	}
	if reservations == 0 || checked == 0 {
		t.Fatalf("no reservation was made (%d) or checked (%d)", reservations, checked)
	}
	t.Logf("%d reservations kept", checked)
}

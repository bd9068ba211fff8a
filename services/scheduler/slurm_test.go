package scheduler_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler"
)

// startWith starts a scheduler with cfg's settings on broker and Redis, and
// returns it with a SlurmService client.
func startWith(t *testing.T, broker, redisAddr string, edit func(*scheduler.Config)) (*instance, loomv1.SlurmServiceClient) {
	t.Helper()
	cfg := scheduler.Config{Common: config.Common{
		Brokers: []string{broker}, RedisAddr: redisAddr, GRPCAddr: freeAddr(t), ServiceKeyFile: testkit.ServiceKeyFile(t),
		HTTPAddr: "127.0.0.1:0", LogLevel: "warn",
	}, MasterAddr: scheduler.DefaultMasterAddr, TickInterval: 50 * time.Millisecond, LeaseTTL: time.Second}
	if edit != nil {
		edit(&cfg)
	}
	in := runScheduler(t, cfg)
	return in, loomv1.NewSlurmServiceClient(in.conn)
}

// specCluster publishes a cluster with a Slurm layout: pool "gpu" in node
// set "gpu", partitions "batch" (default) and "short" (MaxTime 1 minute).
func (f *feeder) specCluster() {
	f.publish(topics.ClusterEvents, cluster, &eventsv1.ClusterChanged{Cluster: &loomv1.Cluster{Name: cluster,
		Orchestrator: &loomv1.Orchestrator{Slurm: &loomv1.SlurmOrchestrator{
			NodeSets: []*loomv1.SlurmNodeSet{{Id: "gpu", NodePoolId: "gpu"}},
			Partitions: []*loomv1.SlurmPartition{{Id: "batch", NodeSetIds: []string{"gpu"}, Default: true, MaxTime: "UNLIMITED"},
				{Id: "short", NodeSetIds: []string{"gpu"}, MaxTime: "1"}}}},
		Status: &loomv1.ClusterStatus{State: loomv1.Cluster_RUNNING, SharedDir: "/shared/c1"}}})
}

func (f *feeder) poolNode(host string, gpus int32) {
	f.publish(topics.NodeEvents, nodeName(host), &eventsv1.NodeChanged{Node: &loomv1.Node{
		Name: nodeName(host), Cluster: cluster, Hostname: host, Gpus: gpus, State: loomv1.Node_READY, NodePool: "gpu",
		MachineType: "a3-highgpu-8g", Role: "compute"}})
}

func (f *feeder) submitJob(j *loomv1.Job) {
	j.Cluster, j.State = cluster, loomv1.JobState_PENDING
	if len(j.GetCommand()) == 0 && j.GetScript() == "" {
		j.Command = []string{"/bin/true"}
	}
	f.publish(topics.JobCommands, cluster, &eventsv1.SubmitJob{Job: j})
}

func (f *feeder) step(id int, attempt int32, host string, st eventsv1.StepState, code int32) {
	f.publish(topics.StepEvents, jobName(id), &eventsv1.StepChanged{Job: jobName(id), Attempt: attempt,
		Node: nodeName(host), State: st, ExitCode: code, Cluster: cluster})
}

func stepCommand[T proto.Message](id int, match func(T) bool) func(envelope.Event) bool {
	return func(e envelope.Event) bool {
		p, ok := e.Payload.(T)
		if !ok {
			return false
		}
		type jobbed interface{ GetJob() string }
		return p.ProtoReflect().Interface().(jobbed).GetJob() == jobName(id) && (match == nil || match(p))
	}
}

// TestHoldReleaseAndReadsThroughTheBus: a job submitted held waits with
// JobHeldUser until released; the Slurm views answer over gRPC.
func TestHoldReleaseAndReadsThroughTheBus(t *testing.T) {
	t.Parallel()
	broker := testkit.Broker(t)
	redisAddr, _ := testkit.Redis(t)
	in, slurm := startWith(t, broker, redisAddr, nil)
	f := newFeeder(t, broker)
	f.specCluster()
	f.poolNode("gpu-0001", 8)
	f.submitJob(&loomv1.Job{Name: jobName(1), JobId: "1", NodeCount: 1, GpusPerNode: 2, Hold: true, User: "ada"})
	testkit.WaitFor(t, wait, "job 1 held", func() (bool, error) {
		j, err := in.client.GetJob(context.Background(), &loomv1.GetJobRequest{Name: jobName(1)})
		return err == nil && j.GetStateReason() == "JobHeldUser" && j.GetPriority() == 0, nil
	})
	f.publish(topics.JobCommands, cluster, &eventsv1.UpdateJob{Job: jobName(1), Cluster: cluster, Action: "release"})
	j := in.job(t, 1, loomv1.JobState_RUNNING)
	if j.GetPartition() != "batch" || j.GetBatchHost() != "gpu-0001" || len(j.GetRuns()) != 1 {
		t.Fatalf("released job: %v", j)
	}

	parts, err := slurm.ListPartitions(context.Background(), &loomv1.ListPartitionsRequest{Cluster: cluster})
	if err != nil || len(parts.GetPartitions()) != 2 || parts.GetPartitions()[0].GetAllocGpus() != 2 || parts.GetPartitions()[1].GetMaxTime() != "1" {
		t.Fatalf("ListPartitions: %v %v", parts, err)
	}
	nodes, err := slurm.ListSlurmNodes(context.Background(), &loomv1.ListSlurmNodesRequest{Cluster: cluster})
	if err != nil || len(nodes.GetNodes()) != 1 || nodes.GetNodes()[0].GetState() != loomv1.SlurmNode_MIXED || nodes.GetNodes()[0].GetCpus() != 208 {
		t.Fatalf("ListSlurmNodes: %v %v", nodes, err)
	}
	if _, err := slurm.ListPartitions(context.Background(), &loomv1.ListPartitionsRequest{Cluster: "projects/default/clusters/nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("ListPartitions of an unknown cluster: %v", err)
	}
	if _, err := slurm.ListSlurmNodes(context.Background(), &loomv1.ListSlurmNodesRequest{Cluster: "bad"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("ListSlurmNodes with a bad name: %v", err)
	}
	// sshare's rows: root's, ada's account (none: "") and ada, running.
	shares, err := slurm.ListShares(context.Background(), &loomv1.ListSharesRequest{Cluster: cluster})
	if err != nil || len(shares.GetShares()) != 3 || shares.GetShares()[0].GetAccount() != "root" ||
		shares.GetShares()[2].GetUser() != "ada" || shares.GetShares()[2].GetNormShares() != 1 {
		t.Fatalf("ListShares: %v %v", shares, err)
	}
	if _, err := slurm.ListShares(context.Background(), &loomv1.ListSharesRequest{Cluster: "projects/default/clusters/nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("ListShares of an unknown cluster: %v", err)
	}
	resp, err := in.client.ListJobs(context.Background(), &loomv1.ListJobsRequest{Users: []string{"ada"}, ActiveOnly: true,
		States: []loomv1.JobState{loomv1.JobState_RUNNING}, JobIds: []string{"1"}, Partitions: []string{"batch"}})
	if err != nil || len(resp.GetJobs()) != 1 {
		t.Fatalf("ListJobs with filters: %v %v", resp, err)
	}
	if _, err := in.client.ListJobs(context.Background(), &loomv1.ListJobsRequest{JobIds: []string{"x_1"}}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("ListJobs with a bad job id: %v", err)
	}
}

// TestPreemptionThroughTheBus: a high-QOS job preempts a low-QOS one: the
// victim's --signal goes out first, then after the grace period its step is
// stopped and the job PREEMPTED, REQUEUED and pending again; the preemptor
// runs once the victim's step has ended.
func TestPreemptionThroughTheBus(t *testing.T) {
	t.Parallel()
	broker := testkit.Broker(t)
	redisAddr, _ := testkit.Redis(t)
	in, _ := startWith(t, broker, redisAddr, func(c *scheduler.Config) { c.Domain.PreemptGrace = 300 * time.Millisecond })
	f := newFeeder(t, broker)
	f.specCluster()
	f.poolNode("gpu-0001", 8)
	f.submitJob(&loomv1.Job{Name: jobName(1), JobId: "1", NodeCount: 1, GpusPerNode: 8, Qos: "low", Signal: "USR1@30"})
	in.job(t, 1, loomv1.JobState_RUNNING)
	f.submitJob(&loomv1.Job{Name: jobName(2), JobId: "2", NodeCount: 1, GpusPerNode: 8, Qos: "high"})

	sig := testkit.WaitEvent(t, broker, topics.StepCommands, wait, stepCommand[*eventsv1.SignalStep](1, nil))
	if s := sig.Payload.(*eventsv1.SignalStep); s.GetSignal() != "USR1" || sig.Key != nodeName("gpu-0001") {
		t.Fatalf("SignalStep %v key %q", s, sig.Key)
	}
	stop := testkit.WaitEvent(t, broker, topics.StepCommands, wait, stepCommand[*eventsv1.StopStep](1, nil))
	if stop.Time.Before(sig.Time) {
		t.Fatal("StopStep before the signal")
	}
	testkit.WaitEvent(t, broker, topics.JobEvents, wait, jobEvent(1, loomv1.JobState_PREEMPTED))
	testkit.WaitEvent(t, broker, topics.JobEvents, wait, jobEvent(1, loomv1.JobState_REQUEUED))
	in.job(t, 1, loomv1.JobState_PENDING)
	f.step(1, 1, "gpu-0001", eventsv1.StepState_STEP_KILLED, 143)
	in.job(t, 2, loomv1.JobState_RUNNING)
	f.step(2, 1, "gpu-0001", eventsv1.StepState_STEP_EXITED, 0)
	ev := testkit.WaitEvent(t, broker, topics.JobEvents, wait, jobEvent(1, loomv1.JobState_RUNNING).and(func(e envelope.Event) bool {
		return e.Payload.(*eventsv1.JobChanged).GetAttempt() == 2
	}))
	if ev.Payload.(*eventsv1.JobChanged).GetJob().GetRestartCount() != 1 {
		t.Fatalf("requeued victim: %v", ev.Payload)
	}
}

// TestTimeLimitThroughTheBus: a job past its --time is stopped and ends TIMEOUT.
func TestTimeLimitThroughTheBus(t *testing.T) {
	t.Parallel()
	broker := testkit.Broker(t)
	redisAddr, _ := testkit.Redis(t)
	in, _ := startWith(t, broker, redisAddr, nil)
	f := newFeeder(t, broker)
	f.specCluster()
	f.poolNode("gpu-0001", 8)
	f.submitJob(&loomv1.Job{Name: jobName(1), JobId: "1", NodeCount: 1, GpusPerNode: 1, TimeLimitSeconds: 1, Script: "sleep 100"})
	in.job(t, 1, loomv1.JobState_RUNNING)
	testkit.WaitEvent(t, broker, topics.StepCommands, wait, stepCommand[*eventsv1.StopStep](1, func(s *eventsv1.StopStep) bool {
		return s.GetReason() == "time limit"
	}))
	// COMPLETING until the stopped step reports its end, then TIMEOUT.
	if j := in.job(t, 1, loomv1.JobState_COMPLETING); j.GetStateReason() != "TimeLimit" {
		t.Fatalf("timing-out job: %v", j)
	}
	f.step(1, 1, "gpu-0001", eventsv1.StepState_STEP_KILLED, 143)
	if j := in.job(t, 1, loomv1.JobState_TIMEOUT); j.GetStateReason() != "TimeLimit" || len(j.GetRuns()) != 1 || j.GetRuns()[0].GetState() != loomv1.JobState_TIMEOUT {
		t.Fatalf("timed out job: %v", j)
	}
	// Over the partition's MaxTime: it waits.
	f.submitJob(&loomv1.Job{Name: jobName(2), JobId: "2", NodeCount: 1, Partition: "short", TimeLimitSeconds: 120})
	testkit.WaitFor(t, wait, "job 2 PartitionTimeLimit", func() (bool, error) {
		j, err := in.client.GetJob(context.Background(), &loomv1.GetJobRequest{Name: jobName(2)})
		return err == nil && j.GetStateReason() == "PartitionTimeLimit", nil
	})
}

// TestNodeFailRequeueThroughTheBus: a node failure ends the run NODE_FAIL
// and requeues the job, which runs again on another node (attempt 2), never
// on the failed one, once the failed node's step has stopped (fencing).
func TestNodeFailRequeueThroughTheBus(t *testing.T) {
	t.Parallel()
	broker := testkit.Broker(t)
	redisAddr, _ := testkit.Redis(t)
	in, _ := startWith(t, broker, redisAddr, nil)
	f := newFeeder(t, broker)
	f.specCluster()
	f.poolNode("gpu-0001", 8)
	f.submitJob(&loomv1.Job{Name: jobName(1), JobId: "1", NodeCount: 1, GpusPerNode: 8})
	first := in.job(t, 1, loomv1.JobState_RUNNING).GetNodes()[0]
	f.publish(topics.HealthEvents, nodeName(first), &eventsv1.NodeHealthChanged{Node: nodeName(first), Cluster: cluster,
		Health: eventsv1.NodeHealth_UNHEALTHY, Reason: "no heartbeat"})
	testkit.WaitEvent(t, broker, topics.JobEvents, wait, jobEvent(1, loomv1.JobState_NODE_FAIL))
	testkit.WaitEvent(t, broker, topics.JobEvents, wait, jobEvent(1, loomv1.JobState_REQUEUED))
	f.poolNode("gpu-0002", 8)
	f.publish(topics.HealthEvents, nodeName(first), &eventsv1.NodeHealthChanged{Node: nodeName(first), Cluster: cluster,
		Health: eventsv1.NodeHealth_HEALTHY})
	// The failed node's step is fenced until it is heard to end: its agent,
	// back, stops it (the StopStep the fence sent) and says so.
	f.step(1, 1, first, eventsv1.StepState_STEP_KILLED, 143)
	ev := testkit.WaitEvent(t, broker, topics.JobEvents, wait, jobEvent(1, loomv1.JobState_RUNNING).and(func(e envelope.Event) bool {
		return e.Payload.(*eventsv1.JobChanged).GetAttempt() == 2
	}))
	if nodes := ev.Payload.(*eventsv1.JobChanged).GetJob().GetNodes(); len(nodes) != 1 || nodes[0] == first {
		t.Fatalf("attempt 2 on %v, after %s failed", nodes, first)
	}
	j := in.job(t, 1, loomv1.JobState_RUNNING)
	if len(j.GetRuns()) != 2 || j.GetRuns()[0].GetState() != loomv1.JobState_NODE_FAIL || !strings.Contains(j.GetRuns()[0].GetReason(), "no heartbeat") {
		t.Fatalf("runs: %v", j.GetRuns())
	}
}

// The scheduler takes a node from the provisioner alone, a node's health
// from health alone and a job from the gateway (or the training service)
// alone (envelope.Senders): the registry's NodeChanged, NodeHealthChanged
// and SubmitJob — their signature holds, the key being shared — are
// dead-lettered as wrong-sender and change nothing. Health's verdict on the
// same node, after the forged one, is the one the job's failed run names,
// and the requeued job goes to the provisioner's new node, not to the
// forged one.
func TestNodesHealthAndJobsOnlyFromTheirSender(t *testing.T) {
	t.Parallel()
	broker := testkit.Broker(t)
	redisAddr, _ := testkit.Redis(t)
	in, _ := startWith(t, broker, redisAddr, nil)
	f := newFeeder(t, broker)
	f.specCluster()
	f.poolNode("gpu-0001", 8)
	f.submitJob(&loomv1.Job{Name: jobName(1), JobId: "1", NodeCount: 1, GpusPerNode: 8})
	in.job(t, 1, loomv1.JobState_RUNNING)

	f.publishAs("registry", topics.NodeEvents, nodeName("gpu-0002"), &eventsv1.NodeChanged{Node: &loomv1.Node{
		Name: nodeName("gpu-0002"), Cluster: cluster, Hostname: "gpu-0002", Gpus: 8, State: loomv1.Node_READY, NodePool: "gpu",
		MachineType: "a3-highgpu-8g", Role: "compute"}})
	f.publishAs("registry", topics.HealthEvents, nodeName("gpu-0001"), &eventsv1.NodeHealthChanged{Node: nodeName("gpu-0001"),
		Cluster: cluster, Health: eventsv1.NodeHealth_UNHEALTHY, Reason: "forged"})
	f.publishAs("registry", topics.JobCommands, cluster, &eventsv1.SubmitJob{Job: &loomv1.Job{Name: jobName(2), JobId: "2",
		Cluster: cluster, NodeCount: 1, GpusPerNode: 8, Command: []string{"/bin/true"}, State: loomv1.JobState_PENDING}})
	for _, topic := range []string{topics.NodeEvents, topics.HealthEvents, topics.JobCommands} {
		var got []testkit.DeadLetter
		testkit.WaitFor(t, wait, "the forgery on "+topic+" dead-lettered", func() (bool, error) {
			got = testkit.DeadLetters(t, broker, topic)
			return len(got) > 0, nil
		})
		if len(got) != 1 || got[0].Reason != envelope.ReasonWrongSender || got[0].Signer != "services/registry" {
			t.Errorf("dead letters of %s: %+v, want the registry's one, %s", topic, got, envelope.ReasonWrongSender)
		}
	}
	if _, err := in.client.GetJob(context.Background(), &loomv1.GetJobRequest{Name: jobName(2)}); status.Code(err) != codes.NotFound {
		t.Errorf("the registry's job 2: %v, want NotFound", err)
	}

	f.publish(topics.HealthEvents, nodeName("gpu-0001"), &eventsv1.NodeHealthChanged{Node: nodeName("gpu-0001"), Cluster: cluster,
		Health: eventsv1.NodeHealth_UNHEALTHY, Reason: "no heartbeat"})
	testkit.WaitEvent(t, broker, topics.JobEvents, wait, jobEvent(1, loomv1.JobState_REQUEUED))
	f.step(1, 1, "gpu-0001", eventsv1.StepState_STEP_KILLED, 143)
	f.poolNode("gpu-0003", 8)
	ev := testkit.WaitEvent(t, broker, topics.JobEvents, wait, jobEvent(1, loomv1.JobState_RUNNING).and(func(e envelope.Event) bool {
		return e.Payload.(*eventsv1.JobChanged).GetAttempt() == 2
	}))
	if nodes := ev.Payload.(*eventsv1.JobChanged).GetJob().GetNodes(); len(nodes) != 1 || nodes[0] != "gpu-0003" {
		t.Errorf("attempt 2 on %v, want gpu-0003 (the provisioner's)", nodes)
	}
	if runs := in.job(t, 1, loomv1.JobState_RUNNING).GetRuns(); len(runs) != 2 || !strings.Contains(runs[0].GetReason(), "no heartbeat") {
		t.Errorf("runs: %v, want the first ended by health's verdict", runs)
	}
}

// TestTwoInstancesOneLeader: two schedulers on one Redis and consumer
// group: one leads (holds the lease, consumes, decides), the other serves
// reads of what the leader decided (from its change log); when the leader
// stops, the other takes over from Redis and carries on, and no job is
// ever started twice.
func TestTwoInstancesOneLeader(t *testing.T) {
	t.Parallel()
	broker := testkit.Broker(t)
	redisAddr, rdb := testkit.Redis(t)
	httpAddr := map[string]string{"a": freeAddr(t), "b": freeAddr(t)}
	// The leader changes when the test stops it (its lease released), never
	// by the lease running out: with startWith's 1 s TTL, a leader whose
	// renewals (every TTL/3) were held up two thirds of a second on a loaded
	// machine lost the lease to the other mid-test, which then was the one
	// the test took for the follower. A TTL longer than the takeover's wait
	// also shows that the takeover is the release's, not the expiry's.
	const leaseTTL = 10 * wait
	edit := func(id string) func(*scheduler.Config) {
		return func(c *scheduler.Config) {
			c.InstanceID, c.RefreshInterval, c.HTTPAddr, c.LeaseTTL = id, 100*time.Millisecond, httpAddr[id], leaseTTL
		}
	}
	a, _ := startWith(t, broker, redisAddr, edit("a"))
	b, _ := startWith(t, broker, redisAddr, edit("b"))
	holder := func() string {
		v, _ := rdb.Get(context.Background(), "scheduler:leader").Result()
		return v
	}
	testkit.WaitFor(t, wait, "a leader", func() (bool, error) { return holder() != "", nil })
	leader, follower, followerHTTP := a, b, httpAddr["b"]
	if strings.HasPrefix(holder(), "b.") {
		leader, follower, followerHTTP = b, a, httpAddr["a"]
	}
	f := newFeeder(t, broker)
	f.specCluster()
	f.poolNode("gpu-0001", 1)
	f.poolNode("gpu-0002", 1)
	for id := 1; id <= 3; id++ {
		f.submitJob(&loomv1.Job{Name: jobName(id), JobId: strconv.Itoa(id), NodeCount: 1, GpusPerNode: 1})
	}
	leader.job(t, 1, loomv1.JobState_RUNNING)
	// The follower reads what the leader decided.
	follower.job(t, 1, loomv1.JobState_RUNNING)
	follower.job(t, 3, loomv1.JobState_PENDING)
	// What the leader decides from now on, the follower reads from its
	// change log, not by reloading (it may have loaded the first decisions
	// at its start).
	f.submitJob(&loomv1.Job{Name: jobName(4), JobId: "4", NodeCount: 1, GpusPerNode: 1})
	follower.job(t, 4, loomv1.JobState_PENDING)
	testkit.WaitFor(t, wait, "the follower's updates from the change log", func() (bool, error) {
		s, err := testkit.ScrapeErr(followerHTTP)
		return err == nil && s.Sum("loom_scheduler_memory_updates_total", "how", "log") > 0, nil
	})

	first := holder()
	leader.stop(t)
	testkit.WaitFor(t, wait, "the follower takes over", func() (bool, error) {
		h := holder()
		return h != "" && h != first, nil
	})
	f.exit(1, 1, follower.jobNodes(t, 1)[0], 0)
	follower.job(t, 1, loomv1.JobState_COMPLETED)
	follower.job(t, 3, loomv1.JobState_RUNNING)
	for id := 1; id <= 3; id++ { // 4 is still waiting
		steps := startSteps(t, broker, id)
		for _, e := range steps[1:] {
			if e.ID != steps[0].ID {
				t.Fatalf("job %d started twice: %s and %s", id, steps[0].ID, e.ID)
			}
		}
	}
}

// jobNodes returns the nodes of job id as the instance reports them.
func (in *instance) jobNodes(t *testing.T, id int) []string {
	t.Helper()
	j, err := in.client.GetJob(context.Background(), &loomv1.GetJobRequest{Name: jobName(id)})
	if err != nil {
		t.Fatal(err)
	}
	return j.GetNodes()
}

// TestTimeLimitOnTheFakeClock: the scheduler's domain and its tick read the
// service's clock, so an hour's --time ends on a fake clock advanced by the
// test, in far less real time than an hour.
func TestTimeLimitOnTheFakeClock(t *testing.T) {
	t.Parallel()
	broker := testkit.Broker(t)
	redisAddr, _ := testkit.Redis(t)
	fc := clockwork.NewFakeClock()
	in, _ := startWith(t, broker, redisAddr, func(c *scheduler.Config) { c.Clock = fc })
	f := newFeeder(t, broker)
	f.specCluster()
	f.poolNode("gpu-0001", 8)
	f.submitJob(&loomv1.Job{Name: jobName(1), JobId: "1", NodeCount: 1, GpusPerNode: 1, TimeLimitSeconds: 3600, Script: "sleep 100"})
	in.job(t, 1, loomv1.JobState_RUNNING)
	if ev := testkit.Events(t, broker, topics.StepCommands); slices.ContainsFunc(ev, func(e envelope.Event) bool {
		_, stop := e.Payload.(*eventsv1.StopStep)
		return stop
	}) {
		t.Fatal("the job was stopped before its time limit")
	}
	stopped := func() (bool, error) {
		fc.Advance(10 * time.Minute)
		return slices.ContainsFunc(testkit.Events(t, broker, topics.StepCommands), func(e envelope.Event) bool {
			s, ok := e.Payload.(*eventsv1.StopStep)
			return ok && s.GetReason() == "time limit"
		}), nil
	}
	testkit.WaitFor(t, 30*time.Second, "the time limit on the fake clock", stopped)
	if j := in.job(t, 1, loomv1.JobState_COMPLETING); j.GetStateReason() != "TimeLimit" {
		t.Fatalf("timing-out job: %v", j)
	}
}

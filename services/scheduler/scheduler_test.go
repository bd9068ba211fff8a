package scheduler_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler"
)

const (
	cluster = "projects/default/clusters/c1"
	wait    = 60 * time.Second
)

// freeAddr is an address for a scheduler the test starts (its gRPC or
// HTTP port). Not a port the kernel handed out to a :0 listener closed at
// once: that one comes from the ephemeral range, where any outgoing
// connection of the packages testing beside this one (their Kafka and
// Redis clients) can take it as its local port before the scheduler binds
// it. testkit.FreeAddr picks below that range, and keeps the port to this
// test process.
func freeAddr(t *testing.T) string {
	t.Helper()
	return testkit.FreeAddr()
}

// instance is a scheduler running in the test.
type instance struct {
	svc    *testkit.Service
	conn   *grpc.ClientConn
	client loomv1.JobServiceClient
}

func startScheduler(t *testing.T, broker, redisAddr string) *instance {
	t.Helper()
	cfg := scheduler.Config{Common: config.Common{
		Brokers: []string{broker}, RedisAddr: redisAddr, GRPCAddr: freeAddr(t), ServiceKeyFile: testkit.ServiceKeyFile(t),
		HTTPAddr: "127.0.0.1:0", LogLevel: "warn",
	}, MasterAddr: scheduler.DefaultMasterAddr, TickInterval: 100 * time.Millisecond}
	return runScheduler(t, cfg)
}

// runScheduler runs a scheduler with cfg until the test ends (or stop).
func runScheduler(t *testing.T, cfg scheduler.Config) *instance {
	t.Helper()
	svc := testkit.Start(t, "scheduler", func(ctx context.Context) error { return scheduler.Run(ctx, cfg) })
	conn := testkit.Dial(t, cfg.GRPCAddr)
	return &instance{svc: svc, conn: conn, client: loomv1.NewJobServiceClient(conn)}
}

// stop ends the instance and checks that it stopped cleanly.
func (in *instance) stop(t *testing.T) {
	t.Helper()
	if err := in.svc.Stop(); err != nil {
		t.Error(err)
	}
}

// job polls GetJob until the job is in state, and returns it. No agent
// runs in these tests (steps report only when a test says so); a started
// job is RUNNING from its start, as Slurm's.
func (in *instance) job(t *testing.T, id int, state loomv1.JobState) *loomv1.Job {
	t.Helper()
	var j *loomv1.Job
	testkit.WaitFor(t, wait, fmt.Sprintf("job %d %v", id, state), func() (bool, error) {
		got, err := in.client.GetJob(context.Background(), &loomv1.GetJobRequest{Name: jobName(id)})
		if status.Code(err) == codes.NotFound || status.Code(err) == codes.Unavailable {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		j = got
		return got.GetState() == state, nil
	})
	return j
}

func jobName(id int) string           { return "projects/default/jobs/" + strconv.Itoa(id) }
func nodeName(host string) string     { return cluster + "/nodes/" + host }
func hostNode(j *loomv1.Job) []string { return j.GetNodes() }

// feeder publishes events the way the other services and the agents
// would: each signed by the service that sends its type (envelope.Senders:
// the provisioner's nodes, the gateway's commands, health's verdicts), a
// node's report (a row naming envelope.Nodes) by the node it names, any
// other as the test's service.
type feeder struct {
	t      *testing.T
	broker string
	// ps are the producers by the service they sign as; nodes by the node.
	ps, nodes map[string]*bus.Producer
}

func newFeeder(t *testing.T, broker string) *feeder {
	return &feeder{t: t, broker: broker, ps: map[string]*bus.Producer{}, nodes: map[string]*bus.Producer{}}
}

func (f *feeder) publish(topic, key string, payload proto.Message) {
	f.t.Helper()
	service := "test"
	if s := envelope.Senders[envelope.TypeOf(payload)]; slices.Contains(s, envelope.Nodes) {
		f.publishAsNode(topic, key, payload)
		return
	} else if len(s) > 0 {
		service = strings.TrimPrefix(s[0], "services/")
	}
	f.publishAs(service, topic, key, payload)
}

// publishAsNode publishes a node's report signed by the node it names (a
// node of the test's cluster), as its agent does.
func (f *feeder) publishAsNode(topic, key string, payload proto.Message) {
	f.t.Helper()
	n, ok := payload.(interface{ GetNode() string })
	if !ok {
		f.t.Fatalf("%T names no node", payload)
	}
	p, ok := f.nodes[n.GetNode()]
	if !ok {
		p = testkit.NodeProducer(f.t, f.broker, n.GetNode(), cluster, "gpu")
		f.nodes[n.GetNode()] = p
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := p.Publish(ctx, envelope.New(topic, key, "loom/agent", payload)); err != nil {
		f.t.Fatalf("publish %T as %s: %v", payload, n.GetNode(), err)
	}
}

// publishAs publishes payload signed as "services/<service>", whoever
// sends its type: a forgery, when service does not.
func (f *feeder) publishAs(service, topic, key string, payload proto.Message) {
	f.t.Helper()
	p, ok := f.ps[service]
	if !ok {
		p = bus.NewProducer([]string{f.broker})
		p.SetSigner(testkit.SignerAs(service))
		f.t.Cleanup(func() { _ = p.Close() })
		f.ps[service] = p
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := p.Publish(ctx, envelope.New(topic, key, "loom/"+service, payload)); err != nil {
		f.t.Fatalf("publish %T: %v", payload, err)
	}
}

func (f *feeder) cluster() {
	f.publish(topics.ClusterEvents, cluster, &eventsv1.ClusterChanged{Cluster: &loomv1.Cluster{Name: cluster,
		Status: &loomv1.ClusterStatus{State: loomv1.Cluster_RUNNING, SharedDir: "/shared/c1"}}})
}

func (f *feeder) node(host string, gpus int32) {
	f.publish(topics.NodeEvents, nodeName(host), &eventsv1.NodeChanged{Node: &loomv1.Node{
		Name: nodeName(host), Cluster: cluster, Hostname: host, Gpus: gpus, State: loomv1.Node_READY}})
}

func (f *feeder) submit(id int, nodes, gpus int32) {
	f.publish(topics.JobCommands, cluster, &eventsv1.SubmitJob{Job: &loomv1.Job{
		Name: jobName(id), JobId: strconv.Itoa(id), Cluster: cluster, NodeCount: nodes, GpusPerNode: gpus,
		Command: []string{"/bin/true"}, SubmitTime: timestamppb.Now(), State: loomv1.JobState_PENDING}})
}

func (f *feeder) exit(id int, attempt int32, host string, code int32) {
	f.publish(topics.StepEvents, jobName(id), &eventsv1.StepChanged{Job: jobName(id), Attempt: attempt,
		Node: nodeName(host), State: eventsv1.StepState_STEP_EXITED, ExitCode: code, Cluster: cluster})
}

// startSteps returns the StartSteps on the bus for job id, opened with
// their node's command key: each must be sealed (its environment is not in
// the clear on the bus).
func startSteps(t *testing.T, broker string, id int) []envelope.Event {
	var out []envelope.Event
	for _, e := range testkit.Events(t, broker, topics.StepCommands) {
		if s, ok := e.Payload.(*eventsv1.StartStep); ok && s.GetJob() == jobName(id) {
			if len(s.GetSealed()) == 0 || s.GetEnv() != nil {
				t.Fatalf("StartStep for %s is not sealed: %v", s.GetNode(), s)
			}
			opened, err := envelope.OpenCommand(auth.CommandKey(testkit.ServiceSecret(), s.GetNode(), s.GetRegistration()), s)
			if err != nil {
				t.Fatalf("open the StartStep for %s: %v", s.GetNode(), err)
			}
			e.Payload = opened
			out = append(out, e)
		}
	}
	return out
}

// match is a predicate over events on the bus.
type match func(envelope.Event) bool

// and matches what both m and other match.
func (m match) and(other match) match {
	return func(e envelope.Event) bool { return m(e) && other(e) }
}

func jobEvent(id int, state loomv1.JobState) match {
	return func(e envelope.Event) bool {
		jc, ok := e.Payload.(*eventsv1.JobChanged)
		return ok && jc.GetJob().GetName() == jobName(id) && jc.GetJob().GetState() == state
	}
}

func TestJobsRunThroughTheBus(t *testing.T) {
	t.Parallel()
	broker := testkit.Broker(t)
	redisAddr, _ := testkit.Redis(t)
	in := startScheduler(t, broker, redisAddr)
	f := newFeeder(t, broker)

	f.cluster()
	f.node("gpu-0001", 4)
	f.node("gpu-0002", 4)
	f.submit(1, 2, 2)
	f.submit(2, 1, 2)

	ev := testkit.WaitEvent(t, broker, topics.JobEvents, wait, jobEvent(1, loomv1.JobState_RUNNING))
	jc := ev.Payload.(*eventsv1.JobChanged)
	if ev.Key != cluster || jc.GetAttempt() != 1 || len(jc.GetJob().GetNodes()) != 2 || jc.GetJob().GetOutputPath() != "/shared/c1/slurm-1.out" {
		t.Fatalf("JobChanged CONFIGURING: key %q, %v", ev.Key, jc)
	}
	var steps []envelope.Event
	testkit.WaitFor(t, wait, "a StartStep per node of job 1", func() (bool, error) {
		steps = startSteps(t, broker, 1)
		return len(steps) >= 2, nil
	})
	ranks := map[int32]string{}
	for _, e := range steps {
		s := e.Payload.(*eventsv1.StartStep)
		if e.Key != s.GetNode() || s.GetEnv()["SLURM_NNODES"] != "2" || s.GetEnv()["MASTER_ADDR"] != "127.0.0.1" {
			t.Fatalf("StartStep key %q: %v", e.Key, s)
		}
		ranks[s.GetNodeIndex()] = s.GetNode()
	}
	if len(steps) != 2 || len(ranks) != 2 || ranks[0] == ranks[1] {
		t.Fatalf("want ranks 0 and 1 on distinct nodes, got %v", ranks)
	}

	j2 := in.job(t, 2, loomv1.JobState_RUNNING)
	f.exit(1, 1, "gpu-0001", 0)
	f.exit(1, 1, "gpu-0002", 0)
	testkit.WaitEvent(t, broker, topics.JobEvents, wait, jobEvent(1, loomv1.JobState_COMPLETED))

	f.exit(2, 1, hostNode(j2)[0], 2)
	if j := in.job(t, 2, loomv1.JobState_FAILED); j.GetExitCode() != 2 {
		t.Fatalf("job 2 exit code %d, want 2", j.GetExitCode())
	}
	resp, err := in.client.ListJobs(context.Background(), &loomv1.ListJobsRequest{Parent: "projects/default", Cluster: cluster})
	if err != nil || len(resp.GetJobs()) != 2 || resp.GetJobs()[0].GetName() != jobName(1) {
		t.Fatalf("ListJobs: %v %v", resp, err)
	}
	if resp, err := in.client.ListJobs(context.Background(), &loomv1.ListJobsRequest{Cluster: "projects/default/clusters/other"}); err != nil || len(resp.GetJobs()) != 0 {
		t.Fatalf("ListJobs of another cluster: %v %v", resp, err)
	}
	if _, err := in.client.GetJob(context.Background(), &loomv1.GetJobRequest{Name: "jobs/1"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("GetJob with a bad name: %v, want InvalidArgument", err)
	}
	if _, err := in.client.GetJob(context.Background(), &loomv1.GetJobRequest{Name: jobName(99)}); status.Code(err) != codes.NotFound {
		t.Fatalf("GetJob of an unknown job: %v, want NotFound", err)
	}
	if _, err := in.client.CancelJob(context.Background(), &loomv1.CancelJobRequest{Name: jobName(1)}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("CancelJob: %v, want Unimplemented", err)
	}
	// GoodputService on the same internal API: every job here ran once.
	gp := loomv1.NewGoodputServiceClient(in.conn)
	if g, err := gp.GetJobGoodput(context.Background(), &loomv1.GetJobGoodputRequest{Name: jobName(1)}); err != nil ||
		g.GetJobs() != 1 || g.GetRestarts() != 0 || g.GetFailures() != 0 || g.GetGoodput() < 0 || g.GetGoodput() > 1 {
		t.Fatalf("GetJobGoodput: %v %v", g, err)
	}
	if g, err := gp.GetClusterGoodput(context.Background(), &loomv1.GetClusterGoodputRequest{Name: cluster}); err != nil ||
		g.GetJobs() != 2 || g.GetFailures() != 1 {
		t.Fatalf("GetClusterGoodput: %v %v", g, err)
	}
	if _, err := gp.GetJobGoodput(context.Background(), &loomv1.GetJobGoodputRequest{Name: jobName(99)}); status.Code(err) != codes.NotFound {
		t.Fatalf("GetJobGoodput of an unknown job: %v, want NotFound", err)
	}
	if _, err := gp.GetClusterGoodput(context.Background(), &loomv1.GetClusterGoodputRequest{Name: "clusters/x"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("GetClusterGoodput with a bad name: %v, want InvalidArgument", err)
	}
}

// TestRestartKeepsStateAndStartsNothingTwice stops the scheduler while it is
// working through a burst of submits and starts a new instance on the same
// Redis and consumer group: it carries on from where the first stopped, and
// every node of every job is started exactly once.
func TestRestartKeepsStateAndStartsNothingTwice(t *testing.T) {
	t.Parallel()
	broker := testkit.Broker(t)
	redisAddr, _ := testkit.Redis(t)
	first := startScheduler(t, broker, redisAddr)
	f := newFeeder(t, broker)

	f.cluster()
	f.node("gpu-0001", 1)
	f.node("gpu-0002", 1)
	const jobs = 6
	for id := 1; id <= 3; id++ {
		f.submit(id, 1, 1)
	}
	running := first.job(t, 1, loomv1.JobState_RUNNING)
	first.stop(t)
	for id := 4; id <= jobs; id++ { // arrive while no scheduler runs
		f.submit(id, 1, 1)
	}

	second := startScheduler(t, broker, redisAddr)
	if j := second.job(t, 1, loomv1.JobState_RUNNING); !proto.Equal(j.GetStartTime(), running.GetStartTime()) || j.GetNodes()[0] != running.GetNodes()[0] {
		t.Fatalf("job 1 after restart: %v, before: %v", j, running)
	}
	second.job(t, 2, loomv1.JobState_RUNNING)
	// Both GPUs are held: the allocations survived the restart.
	if j := second.job(t, jobs, loomv1.JobState_PENDING); j.GetStateReason() != "Priority" {
		t.Fatalf("job %d: %v %q, want PENDING Priority", jobs, j.GetState(), j.GetStateReason())
	}
	if j := second.job(t, 3, loomv1.JobState_PENDING); j.GetStateReason() != "Resources" {
		t.Fatalf("job 3: %v %q, want PENDING Resources", j.GetState(), j.GetStateReason())
	}
	// Finish the jobs two at a time, as the two nodes free up.
	for id := 1; id <= jobs; id++ {
		j := second.job(t, id, loomv1.JobState_RUNNING)
		f.exit(id, 1, j.GetNodes()[0], 0)
		second.job(t, id, loomv1.JobState_COMPLETED)
	}
	for id := 1; id <= jobs; id++ {
		steps := startSteps(t, broker, id)
		if len(steps) == 0 {
			t.Fatalf("job %d: no StartStep", id)
		}
		// A relay cut short may republish an event, but only with its id:
		// every copy of a start must be the same event.
		for _, e := range steps[1:] {
			if e.ID != steps[0].ID {
				t.Fatalf("job %d started twice: events %s and %s", id, steps[0].ID, e.ID)
			}
		}
	}
}

// drained returns the NodeDrained events on the bus for host.
func drained(t *testing.T, broker, host string) []envelope.Event {
	var out []envelope.Event
	for _, e := range testkit.Events(t, broker, topics.JobEvents) {
		if d, ok := e.Payload.(*eventsv1.NodeDrained); ok && d.GetNode() == nodeName(host) {
			out = append(out, e)
		}
	}
	return out
}

// TestDrainThroughTheBus: an idle DRAINING node is announced drained at
// once; a busy one, at its deadline, has its job requeued (StopStep,
// REQUEUED) and is announced once the old run's step ends; the job then
// starts a new attempt on another node.
func TestDrainThroughTheBus(t *testing.T) {
	t.Parallel()
	broker := testkit.Broker(t)
	redisAddr, _ := testkit.Redis(t)
	in := startScheduler(t, broker, redisAddr)
	f := newFeeder(t, broker)
	drain := func(host string, deadline time.Time) {
		f.publish(topics.NodeEvents, nodeName(host), &eventsv1.NodeChanged{Node: &loomv1.Node{
			Name: nodeName(host), Cluster: cluster, Hostname: host, Gpus: 4, State: loomv1.Node_DRAINING,
			DrainDeadline: timestamppb.New(deadline)}})
	}

	f.cluster()
	f.node("gpu-0001", 4)
	f.node("gpu-0002", 4)
	f.submit(1, 1, 4)
	busy := in.job(t, 1, loomv1.JobState_RUNNING).GetNodes()[0]
	idle := map[string]string{"gpu-0001": "gpu-0002", "gpu-0002": "gpu-0001"}[busy]

	drain(idle, time.Now().Add(time.Hour))
	ev := testkit.WaitEvent(t, broker, topics.JobEvents, wait, func(e envelope.Event) bool {
		d, ok := e.Payload.(*eventsv1.NodeDrained)
		return ok && d.GetNode() == nodeName(idle)
	})
	if ev.Key != cluster || ev.Payload.(*eventsv1.NodeDrained).GetCluster() != cluster {
		t.Fatalf("NodeDrained key %q: %v", ev.Key, ev.Payload)
	}
	// Nothing goes to the draining node, idle as it is.
	f.submit(2, 1, 1)
	if j := in.job(t, 2, loomv1.JobState_PENDING); j.GetStateReason() != "Resources" {
		t.Fatalf("job 2: %v %q, want PENDING Resources", j.GetState(), j.GetStateReason())
	}

	drain(busy, time.Now().Add(500*time.Millisecond))
	ev = testkit.WaitEvent(t, broker, topics.JobEvents, wait, jobEvent(1, loomv1.JobState_REQUEUED))
	if r := ev.Payload.(*eventsv1.JobChanged).GetJob().GetStateReason(); r != "node "+busy+" draining" {
		t.Fatalf("REQUEUED reason %q", r)
	}
	stop := testkit.WaitEvent(t, broker, topics.StepCommands, wait, func(e envelope.Event) bool {
		s, ok := e.Payload.(*eventsv1.StopStep)
		return ok && s.GetJob() == jobName(1)
	}).Payload.(*eventsv1.StopStep)
	if stop.GetNode() != nodeName(busy) || stop.GetAttempt() != 1 {
		t.Fatalf("StopStep %v, want attempt 1 on %s", stop, busy)
	}
	// Requeued, it waits for its old run to stop first.
	if j := in.job(t, 1, loomv1.JobState_PENDING); j.GetStateReason() != "Requeued" {
		t.Fatalf("requeued job 1: %q, want Requeued (its old run is still stopping)", j.GetStateReason())
	}

	// The old step ends: the node is drained, and the job waits for a node.
	f.publish(topics.StepEvents, jobName(1), &eventsv1.StepChanged{Job: jobName(1), Attempt: 1,
		Node: nodeName(busy), State: eventsv1.StepState_STEP_KILLED, ExitCode: 143, Cluster: cluster})
	testkit.WaitFor(t, wait, busy+" drained", func() (bool, error) { return len(drained(t, broker, busy)) > 0, nil })
	testkit.WaitFor(t, wait, "job 1 waiting for a node", func() (bool, error) {
		j, err := in.client.GetJob(context.Background(), &loomv1.GetJobRequest{Name: jobName(1)})
		return err == nil && j.GetState() == loomv1.JobState_PENDING && j.GetStateReason() == "ReqNodeNotAvail", err
	})

	// A new node: the requeued job starts again there, as attempt 2.
	f.node("gpu-0003", 4)
	ev = testkit.WaitEvent(t, broker, topics.JobEvents, wait, jobEvent(1, loomv1.JobState_RUNNING).and(func(e envelope.Event) bool {
		return e.Payload.(*eventsv1.JobChanged).GetAttempt() == 2
	}))
	if nodes := ev.Payload.(*eventsv1.JobChanged).GetJob().GetNodes(); len(nodes) != 1 || nodes[0] != "gpu-0003" {
		t.Fatalf("attempt 2 on %v, want gpu-0003", nodes)
	}
	f.exit(1, 2, "gpu-0003", 0)
	// Events reach the bus in the order they were stored: once job 2 runs on
	// the freed node, a second NodeDrained emitted before it would be there.
	testkit.WaitEvent(t, broker, topics.JobEvents, wait, jobEvent(2, loomv1.JobState_RUNNING))
	for _, host := range []string{busy, idle} {
		if n := len(drained(t, broker, host)); n != 1 {
			t.Fatalf("%s announced drained %d times, want once", host, n)
		}
	}
}

// TestMaxArraySizeFlag: -max-array-size takes Slurm's default, 1001, and a
// value Slurm would not take is refused at start, naming the setting.
func TestMaxArraySizeFlag(t *testing.T) {
	t.Parallel()
	var cfg scheduler.Config
	fs := flag.NewFlagSet("scheduler", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse(nil); err != nil || cfg.Domain.MaxArraySize != 1001 && os.Getenv("LOOM_MAX_ARRAY_SIZE") == "" {
		t.Fatalf("default -max-array-size %d (%v), want 1001", cfg.Domain.MaxArraySize, err)
	}
	if err := fs.Parse([]string{"-max-array-size", "4000002"}); err != nil {
		t.Fatal(err)
	}
	err := scheduler.Run(testkit.Context(t, 10*time.Second), cfg)
	if err == nil || !strings.Contains(err.Error(), "max-array-size: MaxArraySize 4000002 is outside 1..4000001") {
		t.Fatalf("Run with -max-array-size 4000002: %v", err)
	}
}

// TestResilienceFlags: the job's-side settings take their documented
// defaults, and a negative one is refused at start, naming the setting.
func TestResilienceFlags(t *testing.T) {
	t.Parallel()
	var cfg scheduler.Config
	fs := flag.NewFlagSet("scheduler", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"fence-timeout": "5m0s", "checkpoint-grace": "2m0s", "hang-timeout": "0s",
		"max-infra-restarts": "20", "failure-checkpoint-wait": "30s", "max-step-request-bytes": "268435456"} {
		if got := fs.Lookup(name); got == nil || (got.Value.String() != want && os.Getenv("LOOM_SCHEDULER_"+
			strings.ToUpper(strings.ReplaceAll(name, "-", "_"))) == "") {
			t.Fatalf("-%s default %v, want %s", name, got, want)
		}
	}
	if err := fs.Parse([]string{"-max-infra-restarts", "-1"}); err != nil {
		t.Fatal(err)
	}
	err := scheduler.Run(testkit.Context(t, 10*time.Second), cfg)
	if err == nil || !strings.Contains(err.Error(), "max-infra-restarts") {
		t.Fatalf("Run with -max-infra-restarts -1: %v", err)
	}
	var tiny scheduler.Config
	fs = flag.NewFlagSet("scheduler", flag.ContinueOnError)
	tiny.RegisterFlags(fs)
	if err := fs.Parse([]string{"-max-step-request-bytes", "1000"}); err != nil {
		t.Fatal(err)
	}
	if err := scheduler.Run(testkit.Context(t, 10*time.Second), tiny); err == nil || !strings.Contains(err.Error(), "max-step-request-bytes") {
		t.Fatalf("Run with -max-step-request-bytes 1000: %v", err)
	}
	var neg scheduler.Config
	fs = flag.NewFlagSet("scheduler", flag.ContinueOnError)
	neg.RegisterFlags(fs)
	if err := fs.Parse([]string{"-failure-checkpoint-wait", "-1s"}); err != nil {
		t.Fatal(err)
	}
	if err := scheduler.Run(testkit.Context(t, 10*time.Second), neg); err == nil || !strings.Contains(err.Error(), "failure-checkpoint-wait") {
		t.Fatalf("Run with -failure-checkpoint-wait -1s: %v", err)
	}
	var long scheduler.Config
	fs = flag.NewFlagSet("scheduler", flag.ContinueOnError)
	long.RegisterFlags(fs)
	if err := fs.Parse([]string{"-hang-timeout", "169h"}); err != nil {
		t.Fatal(err)
	}
	if err := scheduler.Run(testkit.Context(t, 10*time.Second), long); err == nil || !strings.Contains(err.Error(), "hang-timeout: must be 0 (off) to a week (168h0m0s)") {
		t.Fatalf("Run with -hang-timeout 169h: %v", err)
	}
}

// TestBackendFlag: -backend defaults to builtin; an unknown backend, and
// the Slurm backend without its settings or with a poll out of bounds,
// are refused at start, naming each setting.
func TestBackendFlag(t *testing.T) {
	t.Parallel()
	var cfg scheduler.Config
	fs := flag.NewFlagSet("scheduler", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if os.Getenv("LOOM_SCHEDULER_BACKEND") == "" && cfg.Backend != scheduler.BackendBuiltin {
		t.Fatalf("default -backend %q, want builtin", cfg.Backend)
	}
	if os.Getenv("LOOM_SCHEDULER_SLURM_REFUSED_OWNERS") == "" && strings.Join(cfg.Slurm.RefusedOwners, ",") != "slurm" {
		t.Errorf("default -slurm-refused-owners %q, want slurm", cfg.Slurm.RefusedOwners)
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"-backend", "lsf"}, []string{`backend: want builtin or slurm, got "lsf"`}},
		{[]string{"-backend", "slurm", "-slurm-url", "", "-slurm-jwt-key", ""}, []string{"slurm-url: required", "slurm-jwt-key: required"}},
		{[]string{"-backend", "slurm", "-slurm-url", "http://x", "-slurm-jwt-key", "/k", "-slurm-poll", "10ms"}, []string{"slurm-poll: want 200ms to 1m0s, got 10ms"}},
		{[]string{"-backend", "slurm", "-slurm-url", "http://x", "-slurm-jwt-key", "/k", "-slurm-refused-owners", "slurm,../x"}, []string{`slurm-refused-owners: "../x"`}},
		{[]string{"-backend", "slurm", "-slurm-url", "http://x", "-slurm-jwt-key", "/k", "-slurm-allow-root-jobs", "-slurm-refused-owners", "root"},
			[]string{"slurm-refused-owners: lists root, which -slurm-allow-root-jobs allows"}},
	} {
		var cfg scheduler.Config
		fs := flag.NewFlagSet("scheduler", flag.ContinueOnError)
		cfg.RegisterFlags(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		err := scheduler.Run(testkit.Context(t, 10*time.Second), cfg)
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("Run %v: %v, want it to say %q", c.args, err, w)
			}
		}
	}
}

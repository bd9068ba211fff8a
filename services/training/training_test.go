package training

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

const (
	wait    = 60 * time.Second
	loc     = "projects/p/locations/us-central1"
	tunName = loc + "/hyperparameterTuningJobs/100"
)

// ---- the service as its own process ----

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		_ = os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// trainingBinary builds the training binary once per test binary.
func trainingBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "loom-training-bin")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "training")
		if out, err := exec.Command("go", "build", "-o", binPath, "./cmd/training").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// proc is the training service running as a process.
type proc struct {
	t    *testing.T
	cmd  *exec.Cmd
	logs string
}

// startProc runs the training binary on broker and Redis, serving gRPC on addr.
func startProc(t *testing.T, broker, redisAddr, keyFile, addr string) *proc {
	t.Helper()
	logs := filepath.Join(t.TempDir(), "training.log")
	f, err := os.Create(logs)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(trainingBinary(t), "-brokers", broker, "-redis", redisAddr, "-service-key-file", keyFile,
		"-grpc-addr", addr, "-http-addr", "127.0.0.1:0", "-log-level", "info",
		// A killed process leaves its member in the group; its successor
		// reads once that member's session lapsed: 3 s, not the default 10 s
		// (testkit's broker takes down to 1 s).
		"-bus-session-timeout", "3s")
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{t: t, cmd: cmd, logs: logs}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		f.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logs)
			t.Logf("training log:\n%s", b)
		}
	})
	return p
}

// kill ends the process at once, as a crash would.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	_, _ = p.cmd.Process.Wait()
}

// ---- a study driven by hand: the provisioner, scheduler and agent ----

func studySpec() *trainingv1.StudySpec {
	return &trainingv1.StudySpec{
		Metrics: []*trainingv1.StudySpec_MetricSpec{{MetricId: "val_loss", Goal: trainingv1.StudySpec_MetricSpec_MINIMIZE}},
		Parameters: []*trainingv1.StudySpec_ParameterSpec{
			{ParameterId: "learning_rate", ScaleType: trainingv1.StudySpec_ParameterSpec_UNIT_LOG_SCALE,
				ParameterValueSpec: &trainingv1.StudySpec_ParameterSpec_DoubleValueSpec_{DoubleValueSpec: &trainingv1.StudySpec_ParameterSpec_DoubleValueSpec{MinValue: 1e-4, MaxValue: 1}}},
			{ParameterId: "batch_size",
				ParameterValueSpec: &trainingv1.StudySpec_ParameterSpec_IntegerValueSpec_{IntegerValueSpec: &trainingv1.StudySpec_ParameterSpec_IntegerValueSpec{MinValue: 8, MaxValue: 128}}},
		},
		MeasurementSelectionType: trainingv1.StudySpec_BEST_MEASUREMENT,
		Seed:                     11,
	}
}

func createStudy(maxTrials, parallel int32) envelope.Event {
	ev, err := envelope.Route("projects/p", "loom/gateway", &eventsv1.CreateHyperparameterTuningJob{TuningJob: &trainingv1.HyperparameterTuningJob{
		Name: tunName, DisplayName: "study", StudySpec: studySpec(), MaxTrialCount: maxTrials, ParallelTrialCount: parallel,
		User: "alice", State: trainingv1.JobState_JOB_STATE_QUEUED,
		TrialJobSpec: &trainingv1.CustomJobSpec{
			WorkerPoolSpecs: []*trainingv1.WorkerPoolSpec{{MachineSpec: &trainingv1.MachineSpec{MachineType: "n2-standard-4"}, ReplicaCount: 1,
				Task: &trainingv1.WorkerPoolSpec_ContainerSpec{ContainerSpec: &trainingv1.ContainerSpec{Command: []string{"loom", "train"}}}}},
			BaseOutputDirectory: &trainingv1.GcsDestination{OutputUriPrefix: "/shared/study"},
		},
	}})
	if err != nil {
		panic(err)
	}
	ev.Principal = "users/alice"
	return ev
}

// loss is the study's objective at epoch e: a function of the trial's
// parameters only, so two runs of one study see the same values.
func loss(tr *trainingv1.Trial, epoch int) float64 {
	lr, bs := 0.0, 0.0
	for _, p := range tr.GetParameters() {
		switch p.GetParameterId() {
		case "learning_rate":
			lr = p.GetValue().GetNumberValue()
		case "batch_size":
			bs = p.GetValue().GetNumberValue()
		}
	}
	return (lr-0.05)*(lr-0.05) + (bs-64)*(bs-64)/1e4 + 1/float64(epoch)
}

type driver struct {
	t      *testing.T
	broker string
	client func() trainingv1.TrainingServiceClient
}

// publish writes p keyed by key as its sender would: a node's report
// (envelope.Senders' rows naming envelope.Nodes) signed by the node it
// names, in the cluster it names; a type only some services send by the
// first of them; any other as the test's service.
func (d *driver) publish(p proto.Message, key string) {
	d.t.Helper()
	ev, err := envelope.Route(key, "loom/test", p)
	if err != nil {
		d.t.Fatal(err)
	}
	switch s := envelope.Senders[envelope.TypeOf(p)]; {
	case slices.Contains(s, envelope.Nodes):
		c, _ := p.(interface{ GetCluster() string })
		testkit.PublishAsNodes(d.t, d.broker, c.GetCluster(), ev)
	case len(s) > 0:
		testkit.PublishAs(d.t, d.broker, strings.TrimPrefix(s[0], "services/"), ev)
	default:
		testkit.Publish(d.t, d.broker, ev)
	}
}

func (d *driver) study() *trainingv1.HyperparameterTuningJob {
	var j *trainingv1.HyperparameterTuningJob
	testkit.WaitFor(d.t, wait, "the tuning job", func() (bool, error) {
		var err error
		j, err = d.client().GetHyperparameterTuningJob(testkit.Context(d.t, 5*time.Second), &trainingv1.GetHyperparameterTuningJobRequest{Name: tunName})
		return err == nil, nil
	})
	return j
}

func (d *driver) trial(id string) *trainingv1.Trial {
	for _, tr := range d.study().GetTrials() {
		if tr.GetId() == id {
			return tr
		}
	}
	return nil
}

// waitTrial waits until trial id satisfies cond.
func (d *driver) waitTrial(id, what string, cond func(*trainingv1.Trial, *trainingv1.CustomJob) bool) {
	testkit.WaitFor(d.t, wait, "trial "+id+" "+what, func() (bool, error) {
		ctx := testkit.Context(d.t, 5*time.Second)
		j, err := d.client().GetHyperparameterTuningJob(ctx, &trainingv1.GetHyperparameterTuningJobRequest{Name: tunName})
		if err != nil {
			return false, nil
		}
		for _, tr := range j.GetTrials() {
			if tr.GetId() == id {
				cj, err := d.client().GetCustomJob(ctx, &trainingv1.GetCustomJobRequest{Name: tr.GetCustomJob()})
				return err == nil && cond(tr, cj), nil
			}
		}
		return false, nil
	})
}

// runStudy drives the study to its end, one trial at a time (the lowest
// active id), and calls crash(phase, done) after publishing each trial's
// metrics ("measured") and its end ("ended"), before they were seen
// handled; done counts the trials whose end was published.
func (d *driver) runStudy(crash func(phase string, done int)) *trainingv1.HyperparameterTuningJob {
	done := 0
	for {
		var j *trainingv1.HyperparameterTuningJob
		var tr *trainingv1.Trial
		testkit.WaitFor(d.t, wait, "an active trial or the study's end", func() (bool, error) {
			j, tr = d.study(), nil
			for _, x := range j.GetTrials() {
				if x.GetState() == trainingv1.Trial_ACTIVE {
					tr = x
					break
				}
			}
			return tr != nil || j.GetState() == trainingv1.JobState_JOB_STATE_SUCCEEDED || j.GetState() == trainingv1.JobState_JOB_STATE_FAILED, nil
		})
		if tr == nil {
			return j
		}
		k, _ := strconv.ParseInt(tr.GetId(), 10, 64)
		id := 100 + k
		cluster := fmt.Sprintf("projects/p/clusters/cj-%d", id)
		job := fmt.Sprintf("projects/p/jobs/%d", id)
		d.publish(&eventsv1.ClusterChanged{Cluster: &loomv1.Cluster{Name: cluster, Status: &loomv1.ClusterStatus{State: loomv1.Cluster_RUNNING}}}, cluster)
		d.waitTrial(tr.GetId(), "submitted", func(_ *trainingv1.Trial, cj *trainingv1.CustomJob) bool { return cj.GetJob() == job })
		d.publish(&eventsv1.JobChanged{Job: &loomv1.Job{Name: job, JobId: strconv.FormatInt(id, 10), Cluster: cluster, State: loomv1.JobState_RUNNING,
			Nodes: []string{fmt.Sprintf("cj%d-wp0-0001", id)}}, Attempt: 1}, cluster)
		var pts []*eventsv1.MetricsReported_Point
		for e := 1; e <= 3; e++ {
			pts = append(pts, &eventsv1.MetricsReported_Point{Step: int64(e), Values: map[string]float64{"val_loss": loss(tr, e)}})
		}
		// The agent's reports: keyed by their job, signed by its node.
		node := fmt.Sprintf("%s/nodes/cj%d-wp0-0001", cluster, id)
		d.publish(&eventsv1.MetricsReported{Job: job, Attempt: 1, Node: node, Cluster: cluster, Points: pts}, job)
		crash("measured", done)
		d.waitTrial(tr.GetId(), "measured and running", func(x *trainingv1.Trial, cj *trainingv1.CustomJob) bool {
			return len(x.GetMeasurements()) == 3 && cj.GetState() == trainingv1.JobState_JOB_STATE_RUNNING
		})
		// The agent's step end (after its last metrics, on their topic),
		// then the scheduler's job end.
		d.publish(&eventsv1.StepChanged{Job: job, Attempt: 1, Node: node, Cluster: cluster, State: eventsv1.StepState_STEP_EXITED}, job)
		d.publish(&eventsv1.JobChanged{Job: &loomv1.Job{Name: job, JobId: strconv.FormatInt(id, 10), Cluster: cluster, State: loomv1.JobState_COMPLETED}, Attempt: 1}, cluster)
		done++
		crash("ended", done)
		d.waitTrial(tr.GetId(), "ended", func(x *trainingv1.Trial, _ *trainingv1.CustomJob) bool {
			return x.GetState() == trainingv1.Trial_SUCCEEDED
		})
	}
}

// TestStudySurvivesAKill runs one study twice, each against its own Kafka
// and Redis and the training service as its own process: once without a
// stop, once with the service SIGKILLed twice in the middle (right after
// the 3rd trial's end was published, and right after the 5th trial's
// metrics were, each before it was seen handled) and started again. The
// study ends with the same trials (parameters, final measurements, states)
// and the same best trial, and each trial's job was submitted, as its
// owner, exactly under its own name.
func TestStudySurvivesAKill(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the training binary")
	}
	t.Parallel()
	const trials, parallel = 7, 2
	run := func(t *testing.T, kills bool) *trainingv1.HyperparameterTuningJob {
		broker := testkit.Broker(t)
		redisAddr, _ := testkit.Redis(t)
		keyFile := testkit.ServiceKeyFile(t)
		addr := testkit.FreeAddr()
		p := startProc(t, broker, redisAddr, keyFile, addr)
		conn := testkit.Dial(t, addr)
		client := trainingv1.NewTrainingServiceClient(conn)
		d := &driver{t: t, broker: broker, client: func() trainingv1.TrainingServiceClient { return client }}
		testkit.PublishAs(t, broker, "gateway", createStudy(trials, parallel))
		j := d.runStudy(func(phase string, done int) {
			if kills && (phase == "ended" && done == 3 || phase == "measured" && done == 4) {
				p.kill()
				p = startProc(t, broker, redisAddr, keyFile, addr)
			}
		})
		// Each trial's job was submitted as its owner, under the trial's id.
		submitted := map[string]bool{}
		for _, ev := range testkit.Events(t, broker, topics.JobCommands) {
			if s, ok := ev.Payload.(*eventsv1.SubmitJob); ok {
				if ev.Principal != "users/alice" || s.GetJob().GetUser() != "alice" {
					t.Fatalf("SubmitJob %s as %q (user %q)", s.GetJob().GetName(), ev.Principal, s.GetJob().GetUser())
				}
				submitted[s.GetJob().GetName()] = true
			}
		}
		for k := 1; k <= trials; k++ {
			if !submitted[fmt.Sprintf("projects/p/jobs/%d", 100+k)] {
				t.Fatalf("trial %d's job not submitted: %v", k, submitted)
			}
		}
		if len(submitted) != trials {
			t.Fatalf("submitted %v; want one job per trial", submitted)
		}
		return j
	}
	var a, b *trainingv1.HyperparameterTuningJob
	t.Run("studies", func(t *testing.T) {
		t.Run("uninterrupted", func(t *testing.T) { t.Parallel(); a = run(t, false) })
		t.Run("killed", func(t *testing.T) { t.Parallel(); b = run(t, true) })
	})
	if t.Failed() {
		return
	}
	if a.GetState() != trainingv1.JobState_JOB_STATE_SUCCEEDED || len(a.GetTrials()) != trials || a.GetBestTrial() == "" {
		t.Fatalf("uninterrupted study: %v", a)
	}
	if b.GetState() != a.GetState() || b.GetBestTrial() != a.GetBestTrial() || len(b.GetTrials()) != len(a.GetTrials()) {
		t.Fatalf("after the kills: state %v best %q %d trials; uninterrupted: %v %q %d",
			b.GetState(), b.GetBestTrial(), len(b.GetTrials()), a.GetState(), a.GetBestTrial(), len(a.GetTrials()))
	}
	for i := range a.GetTrials() {
		x, y := a.GetTrials()[i], b.GetTrials()[i]
		if x.GetId() != y.GetId() || x.GetState() != y.GetState() || x.GetCustomJob() != y.GetCustomJob() ||
			!proto.Equal(&trainingv1.Trial{Parameters: x.GetParameters()}, &trainingv1.Trial{Parameters: y.GetParameters()}) ||
			!proto.Equal(x.GetFinalMeasurement(), y.GetFinalMeasurement()) {
			t.Fatalf("trial %d differs:\n%v\n%v", i+1, x, y)
		}
	}
}

// ---- the service in this process: reads, commands, refusals ----

func startInProcess(t *testing.T, broker, redisAddr string, clock ...clockwork.Clock) trainingv1.TrainingServiceClient {
	t.Helper()
	cfg := Config{Common: config.Common{
		Brokers: []string{broker}, RedisAddr: redisAddr, ServiceKeyFile: testkit.ServiceKeyFile(t),
		GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", LogLevel: "warn", CreateTopics: true,
	}}
	if len(clock) > 0 {
		cfg.Clock = clock[0]
	}
	addrs := make(chan string, 1)
	svc := testkit.Start(t, "training", func(ctx context.Context) error {
		return run(ctx, cfg, func(a string) { addrs <- a })
	})
	var addr string
	select {
	case addr = <-addrs:
	case <-svc.Done():
		t.Fatalf("training stopped at start: %v", svc.Err())
	case <-time.After(30 * time.Second):
		t.Fatal("training did not start serving gRPC")
	}
	return trainingv1.NewTrainingServiceClient(testkit.Dial(t, addr))
}

func createCustomJob(id int, user, display string) envelope.Event {
	ev, err := envelope.Route("projects/p", "loom/gateway", &eventsv1.CreateCustomJob{CustomJob: &trainingv1.CustomJob{
		Name: fmt.Sprintf("%s/customJobs/%d", loc, id), DisplayName: display, User: user, Labels: map[string]string{"team": display},
		JobSpec: &trainingv1.CustomJobSpec{WorkerPoolSpecs: []*trainingv1.WorkerPoolSpec{{MachineSpec: &trainingv1.MachineSpec{MachineType: "n2-standard-4"},
			ReplicaCount: 1, Task: &trainingv1.WorkerPoolSpec_ContainerSpec{ContainerSpec: &trainingv1.ContainerSpec{Command: []string{"true"}}}}}},
	}})
	if err != nil {
		panic(err)
	}
	ev.Principal = "users/" + user
	return ev
}

func TestCustomJobsThroughTheBus(t *testing.T) {
	t.Parallel()
	broker := testkit.Broker(t)
	redisAddr, _ := testkit.Redis(t)
	client := startInProcess(t, broker, redisAddr)
	ctx := testkit.Context(t, wait)

	if _, err := client.GetCustomJob(ctx, &trainingv1.GetCustomJobRequest{Name: loc + "/customJobs/1"}); status.Code(err) != codes.NotFound {
		t.Fatalf("unknown: %v", err)
	}
	if _, err := client.GetCustomJob(ctx, &trainingv1.GetCustomJobRequest{Name: "bad"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad name: %v", err)
	}
	if _, err := client.CreateCustomJob(ctx, &trainingv1.CreateCustomJobRequest{}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("a write: %v", err)
	}
	var evs []envelope.Event
	for i := 1; i <= 5; i++ {
		evs = append(evs, createCustomJob(i, "alice", map[bool]string{true: "even", false: "odd"}[i%2 == 0]))
	}
	testkit.PublishAs(t, broker, "gateway", evs...)
	ev := testkit.WaitEvent(t, broker, topics.ClusterCommands, wait, func(e envelope.Event) bool {
		c, ok := e.Payload.(*eventsv1.CreateCluster)
		return ok && c.GetCluster().GetName() == "projects/p/clusters/cj-5"
	})
	if ev.Key != "projects/p/clusters/cj-5" {
		t.Fatalf("CreateCluster keyed %q", ev.Key)
	}
	testkit.WaitEvent(t, broker, topics.TrainingEvents, wait, func(e envelope.Event) bool {
		c, ok := e.Payload.(*eventsv1.CustomJobChanged)
		return ok && c.GetCustomJob().GetName() == loc+"/customJobs/5" && e.Key == "projects/p"
	})
	// The event is relayed once Redis has the change, which memory (what
	// List reads) takes only after: wait for job 5 there too. The creates
	// share a key and are handled in order, so 1 to 4 are there before it.
	testkit.WaitFor(t, wait, "job 5 queued in training's memory", func() (bool, error) {
		j, err := client.GetCustomJob(ctx, &trainingv1.GetCustomJobRequest{Name: loc + "/customJobs/5"})
		return err == nil && j.GetState() == trainingv1.JobState_JOB_STATE_QUEUED, nil
	})
	// List: pages, filter, parent.
	var names []string
	token := ""
	for pages := 0; ; pages++ {
		resp, err := client.ListCustomJobs(ctx, &trainingv1.ListCustomJobsRequest{Parent: loc, PageSize: 2, PageToken: token, Filter: `labels.team="odd" AND state=JOB_STATE_QUEUED`})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range resp.GetCustomJobs() {
			names = append(names, j.GetName())
		}
		if token = resp.GetNextPageToken(); token == "" || pages > 5 {
			break
		}
	}
	if strings.Join(names, ",") != loc+"/customJobs/1,"+loc+"/customJobs/3,"+loc+"/customJobs/5" {
		t.Fatalf("listed %v", names)
	}
	if resp, err := client.ListCustomJobs(ctx, &trainingv1.ListCustomJobsRequest{Parent: "projects/p/locations/elsewhere"}); err != nil || len(resp.GetCustomJobs()) != 0 {
		t.Fatalf("another location: %v %v", resp, err)
	}
	// Location "-" lists every location of the project, no other project's.
	if resp, err := client.ListCustomJobs(ctx, &trainingv1.ListCustomJobsRequest{Parent: "projects/p/locations/-", Filter: `labels.team="odd"`}); err != nil || len(resp.GetCustomJobs()) != 3 {
		t.Fatalf("every location: %v %v", resp, err)
	}
	if resp, err := client.ListCustomJobs(ctx, &trainingv1.ListCustomJobsRequest{Parent: "projects/q/locations/-"}); err != nil || len(resp.GetCustomJobs()) != 0 {
		t.Fatalf("another project, every location: %v %v", resp, err)
	}
	if _, err := client.ListCustomJobs(ctx, &trainingv1.ListCustomJobsRequest{Parent: loc, Filter: "state=(("}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad filter: %v", err)
	}

	// Bob's cancel is refused; alice's cancels; an unknown name is dropped.
	cancel := func(name, principal string) envelope.Event {
		ev, _ := envelope.Route("projects/p", "loom/gateway", &eventsv1.CancelTraining{Name: name, User: "alice"})
		ev.Principal = principal
		return ev
	}
	testkit.PublishAs(t, broker, "gateway", cancel(loc+"/customJobs/1", "users/bob"), cancel(loc+"/customJobs/999", "users/alice"),
		cancel(loc+"/customJobs/2", "users/alice"))
	testkit.WaitFor(t, wait, "job 2 cancelled", func() (bool, error) {
		j, err := client.GetCustomJob(ctx, &trainingv1.GetCustomJobRequest{Name: loc + "/customJobs/2"})
		return err == nil && j.GetState() == trainingv1.JobState_JOB_STATE_CANCELLED, nil
	})
	if j, _ := client.GetCustomJob(ctx, &trainingv1.GetCustomJobRequest{Name: loc + "/customJobs/1"}); j.GetState() != trainingv1.JobState_JOB_STATE_QUEUED {
		t.Fatalf("bob cancelled alice's job: %v", j)
	}
}

// TestFlexStartExpiresOnTheTick: the service's ticker applies time (a fake
// clock here): a FLEX_START job that has not started within its
// max_wait_duration expires, and its cluster is deleted.
func TestFlexStartExpiresOnTheTick(t *testing.T) {
	t.Parallel()
	broker := testkit.Broker(t)
	redisAddr, _ := testkit.Redis(t)
	clock := clockwork.NewFakeClockAt(time.Now().Truncate(time.Second))
	client := startInProcess(t, broker, redisAddr, clock)
	ctx := testkit.Context(t, wait)
	ev := createCustomJob(1, "alice", "flex")
	c := ev.Payload.(*eventsv1.CreateCustomJob).GetCustomJob()
	c.CreateTime = timestamppb.New(clock.Now())
	c.JobSpec.Scheduling = &trainingv1.Scheduling{Strategy: trainingv1.Scheduling_FLEX_START, MaxWaitDuration: durationpb.New(time.Hour)}
	testkit.PublishAs(t, broker, "gateway", ev)
	name := loc + "/customJobs/1"
	testkit.WaitFor(t, wait, "the job queued", func() (bool, error) {
		j, err := client.GetCustomJob(ctx, &trainingv1.GetCustomJobRequest{Name: name})
		return err == nil && j.GetState() == trainingv1.JobState_JOB_STATE_QUEUED, nil
	})
	clock.Advance(time.Hour + DefaultTick)
	testkit.WaitFor(t, wait, "the job expired", func() (bool, error) {
		j, err := client.GetCustomJob(ctx, &trainingv1.GetCustomJobRequest{Name: name})
		return err == nil && j.GetState() == trainingv1.JobState_JOB_STATE_EXPIRED && j.GetError() != nil, nil
	})
	testkit.WaitEvent(t, broker, topics.ClusterCommands, wait, func(e envelope.Event) bool {
		d, ok := e.Payload.(*eventsv1.DeleteCluster)
		return ok && d.GetCluster() == "projects/p/clusters/cj-1"
	})
}

// TestAdminCancelReachesTheSchedulerAsTheAdmin: through the bus, an
// administrator's cancel of another user's running CustomJob cancels its
// scheduler job as the administrator (envelope principal, user, admin),
// which is what the scheduler records as Job.cancelled_by; before, it
// went as the job's owner, and the owner was recorded as the canceller.
func TestAdminCancelReachesTheSchedulerAsTheAdmin(t *testing.T) {
	t.Parallel()
	broker := testkit.Broker(t)
	redisAddr, _ := testkit.Redis(t)
	startInProcess(t, broker, redisAddr)
	name := loc + "/customJobs/7"
	testkit.PublishAs(t, broker, "gateway", createCustomJob(7, "alice", "adm"))
	testkit.WaitEvent(t, broker, topics.ClusterCommands, wait, func(e envelope.Event) bool {
		c, ok := e.Payload.(*eventsv1.CreateCluster)
		return ok && c.GetCluster().GetName() == "projects/p/clusters/cj-7"
	})
	up, err := envelope.Route("projects/p/clusters/cj-7", "loom/provisioner", &eventsv1.ClusterChanged{Cluster: &loomv1.Cluster{
		Name: "projects/p/clusters/cj-7", Status: &loomv1.ClusterStatus{State: loomv1.Cluster_RUNNING}}})
	if err != nil {
		t.Fatal(err)
	}
	testkit.PublishAs(t, broker, "provisioner", up)
	testkit.WaitEvent(t, broker, topics.JobCommands, wait, func(e envelope.Event) bool {
		s, ok := e.Payload.(*eventsv1.SubmitJob)
		return ok && s.GetJob().GetName() == "projects/p/jobs/7"
	})
	// The payload's user is the owner's: the principal decides who asked.
	cancel, err := envelope.Route("projects/p", "loom/gateway", &eventsv1.CancelTraining{Name: name, User: "alice", Admin: true})
	if err != nil {
		t.Fatal(err)
	}
	cancel.Principal = "users/root"
	testkit.PublishAs(t, broker, "gateway", cancel)
	ev := testkit.WaitEvent(t, broker, topics.JobCommands, wait, func(e envelope.Event) bool {
		c, ok := e.Payload.(*eventsv1.CancelJob)
		return ok && c.GetJob() == "projects/p/jobs/7"
	})
	if c := ev.Payload.(*eventsv1.CancelJob); ev.Principal != "users/root" || c.GetUser() != "root" || !c.GetAdmin() {
		t.Fatalf("CancelJob as principal %q user %q admin %v; want users/root, root, admin", ev.Principal, c.GetUser(), c.GetAdmin())
	}
}

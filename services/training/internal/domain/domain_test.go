package domain

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/slurmspec"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

var t0 = time.Date(2026, 12, 2, 7, 0, 0, 0, time.UTC)

const (
	loc     = "projects/p/locations/us-central1/"
	cjName  = loc + "customJobs/101"
	tunName = loc + "hyperparameterTuningJobs/200"
	plName  = loc + "trainingPipelines/300"
)

// step feeds in at now, applies the change and returns it (nil: none).
// It fails t when deciding changed s or the change is not what comparing
// whole roots gives (checkDecision), or Apply left a wrong index.
func step(t *testing.T, s *State, now time.Time, in Input) *Change {
	t.Helper()
	// The scheduler ends a job after its nodes' agents reported their
	// steps' ends (each after its last metrics): a job's end comes with
	// them, here just before it, as the agents send them: a completed
	// job's programs exited 0, a cancelled job's were killed.
	if jc, ok := in.Payload.(*eventsv1.JobChanged); ok {
		if st := jc.GetJob().GetState(); st == loomv1.JobState_COMPLETED || st == loomv1.JobState_CANCELLED {
			end := eventsv1.StepState_STEP_EXITED
			if st == loomv1.JobState_CANCELLED {
				end = eventsv1.StepState_STEP_KILLED
			}
			for _, n := range jc.GetJob().GetNodes() {
				handle(t, s, now, Input{Payload: &eventsv1.StepChanged{Job: jc.GetJob().GetName(), Attempt: jc.GetAttempt(), Node: n,
					State: end}})
			}
		}
	}
	return handle(t, s, now, in)
}

// handle is step without the steps' ends: one input alone.
func handle(t *testing.T, s *State, now time.Time, in Input) *Change {
	t.Helper()
	snap := snapshot(s)
	c, err := s.Handle(now, in)
	if err != nil {
		t.Fatalf("Handle(%T): %v", in.Payload, err)
	}
	checkDecision(t, s, snap, c)
	if c != nil {
		s.Apply(c)
		checkIndex(t, s)
	}
	return c
}

func feed(t *testing.T, s *State, p proto.Message) *Change {
	t.Helper()
	return step(t, s, t0, Input{Payload: p})
}

// emitted returns the payloads of c of type T, with their emits.
func emitted[T proto.Message](c *Change) ([]T, []Emit) {
	var out []T
	var es []Emit
	if c == nil {
		return nil, nil
	}
	for _, e := range c.Emits {
		if p, ok := e.Payload.(T); ok {
			out = append(out, p)
			es = append(es, e)
		}
	}
	return out, es
}

func spec() *trainingv1.CustomJobSpec {
	return &trainingv1.CustomJobSpec{
		WorkerPoolSpecs: []*trainingv1.WorkerPoolSpec{
			{MachineSpec: &trainingv1.MachineSpec{MachineType: "a3-highgpu-8g", AcceleratorCount: 8}, ReplicaCount: 1,
				Task: &trainingv1.WorkerPoolSpec_ContainerSpec{ContainerSpec: &trainingv1.ContainerSpec{
					ImageUri: "us-docker.pkg.dev/x/train:1", Command: []string{"loom", "train"}, Args: []string{"--epochs=3"},
					Env: []*trainingv1.EnvVar{{Name: "A", Value: "1"}, {Name: "AIP_MODEL_DIR", Value: "user-wins-not"}}}}},
			{MachineSpec: &trainingv1.MachineSpec{MachineType: "a3-highgpu-4g", AcceleratorCount: 4}, ReplicaCount: 2,
				Task: &trainingv1.WorkerPoolSpec_ContainerSpec{ContainerSpec: &trainingv1.ContainerSpec{Command: []string{"loom", "train"}}}},
		},
		BaseOutputDirectory: &trainingv1.GcsDestination{OutputUriPrefix: "file:///shared/out/"},
	}
}

func customJob(name, user string, sp *trainingv1.CustomJobSpec) *eventsv1.CreateCustomJob {
	return &eventsv1.CreateCustomJob{CustomJob: &trainingv1.CustomJob{Name: name, DisplayName: "cj", JobSpec: sp, User: user,
		State: trainingv1.JobState_JOB_STATE_QUEUED, CreateTime: timestamppb.New(t0)}}
}

func clusterIs(name string, st loomv1.Cluster_State) *eventsv1.ClusterChanged {
	return &eventsv1.ClusterChanged{Cluster: &loomv1.Cluster{Name: name, Status: &loomv1.ClusterStatus{State: st}}}
}

func jobIs(name string, st loomv1.JobState) *eventsv1.JobChanged {
	return &eventsv1.JobChanged{Job: &loomv1.Job{Name: name, JobId: name[strings.LastIndexByte(name, '/')+1:], State: st,
		Nodes: []string{"n-0001"}, ExitCode: 3}, Attempt: 1}
}

func cjOf(t *testing.T, s *State, name string) *trainingv1.CustomJob {
	t.Helper()
	r := s.Lookup(name)
	if r == nil || r.cj(name) == nil {
		t.Fatalf("no custom job %s", name)
	}
	return r.cj(name).Job
}

func TestCustomJobOnItsOwnCluster(t *testing.T) {
	t.Parallel()
	s := NewState()
	c := feed(t, s, customJob(cjName, "alice", spec()))
	creates, _ := emitted[*eventsv1.CreateCluster](c)
	if len(creates) != 1 {
		t.Fatalf("create emitted %v; want one CreateCluster", c.Emits)
	}
	cl := creates[0].GetCluster()
	pools := cl.GetCompute().GetNodePools()
	if cl.GetName() != "projects/p/clusters/cj-101" || len(pools) != 2 || pools[0].GetId() != "cj101-wp0" ||
		pools[1].GetId() != "cj101-wp1" || pools[1].GetNodeCount() != 2 || pools[0].GetMachineType() != "a3-highgpu-8g" {
		t.Fatalf("cluster %v", cl)
	}
	if got := cjOf(t, s, cjName); got.GetState() != trainingv1.JobState_JOB_STATE_QUEUED || got.GetCluster() != cl.GetName() {
		t.Fatalf("after create: %v", got)
	}
	if ch, _ := emitted[*eventsv1.CustomJobChanged](c); len(ch) != 1 {
		t.Fatalf("no CustomJobChanged: %v", c.Emits)
	}
	feed(t, s, clusterIs(cl.GetName(), loomv1.Cluster_CREATING))
	if st := cjOf(t, s, cjName).GetState(); st != trainingv1.JobState_JOB_STATE_PENDING {
		t.Fatalf("cluster creating: %v, want PENDING", st)
	}
	c = feed(t, s, clusterIs(cl.GetName(), loomv1.Cluster_RUNNING))
	subs, es := emitted[*eventsv1.SubmitJob](c)
	if len(subs) != 1 || es[0].Principal != "users/alice" || es[0].Key != cl.GetName() {
		t.Fatalf("cluster running emitted %v", c.Emits)
	}
	j := subs[0].GetJob()
	var wp []map[string]int
	_ = json.Unmarshal([]byte(j.GetEnv()["LOOM_WORKER_POOLS"]), &wp)
	if j.GetName() != "projects/p/jobs/101" || j.GetUser() != "alice" || j.GetNodeCount() != 3 || !j.GetExclusive() ||
		j.GetGpusPerNode() != 4 || j.GetCluster() != cl.GetName() || len(j.GetScript()) != 0 || j.GetPartition() != "all" ||
		strings.Join(j.GetCommand(), " ") != "loom train --epochs=3" ||
		len(wp) != 2 || wp[0]["replicaCount"] != 1 || wp[1]["replicaCount"] != 2 {
		t.Fatalf("job %v", j)
	}
	env := j.GetEnv()
	for k, v := range map[string]string{"AIP_MODEL_DIR": "file:///shared/out/model", "AIP_CHECKPOINT_DIR": "file:///shared/out/checkpoints",
		"AIP_TENSORBOARD_LOG_DIR": "file:///shared/out/logs", "CLOUD_ML_JOB_ID": "101", "A": "1",
		"LOOM_CONTAINER_IMAGE": "us-docker.pkg.dev/x/train:1"} {
		if env[k] != v {
			t.Errorf("env %s = %q, want %q", k, env[k], v)
		}
	}
	if _, trial := env["CLOUD_ML_TRIAL_ID"]; trial || j.GetCheckpointDir() != "/shared/out/checkpoints" ||
		j.GetMaxRetries() != WorkerRestarts || j.Requeue != nil {
		t.Errorf("env %v checkpoint_dir %q", env, j.GetCheckpointDir())
	}
	feed(t, s, jobIs("projects/p/jobs/101", loomv1.JobState_RUNNING))
	if got := cjOf(t, s, cjName); got.GetState() != trainingv1.JobState_JOB_STATE_RUNNING || got.GetStartTime() == nil {
		t.Fatalf("job running: %v", got)
	}
	// A requeue (a node failed) goes back to PENDING and counts the restart.
	rq := jobIs("projects/p/jobs/101", loomv1.JobState_PENDING)
	rq.Job.RestartCount = 1
	feed(t, s, rq)
	if got := cjOf(t, s, cjName); got.GetState() != trainingv1.JobState_JOB_STATE_PENDING || got.GetRestartCount() != 1 {
		t.Fatalf("requeued: %v", got)
	}
	c = feed(t, s, jobIs("projects/p/jobs/101", loomv1.JobState_COMPLETED))
	dels, _ := emitted[*eventsv1.DeleteCluster](c)
	if got := cjOf(t, s, cjName); got.GetState() != trainingv1.JobState_JOB_STATE_SUCCEEDED || got.GetError() != nil ||
		len(dels) != 1 || dels[0].GetCluster() != cl.GetName() {
		t.Fatalf("completed: %v, emitted %v", got, c.Emits)
	}
	if c := feed(t, s, jobIs("projects/p/jobs/101", loomv1.JobState_COMPLETED)); c != nil {
		t.Fatalf("a redelivered end changed %v", c.Emits)
	}
	if c := feed(t, s, customJob(cjName, "alice", spec())); c != nil {
		t.Fatalf("a duplicate create changed %v", c.Emits)
	}
}

// A job that ran and ended between two scheduler events (PENDING, then
// COMPLETED) still has a start time: the scheduler's.
func TestCustomJobEndedUnseenRunKeepsStart(t *testing.T) {
	t.Parallel()
	s := NewState()
	feed(t, s, customJob(cjName, "alice", spec()))
	feed(t, s, clusterIs("projects/p/clusters/cj-101", loomv1.Cluster_RUNNING))
	feed(t, s, jobIs("projects/p/jobs/101", loomv1.JobState_PENDING))
	done := jobIs("projects/p/jobs/101", loomv1.JobState_COMPLETED)
	started := t0.Add(3 * time.Second)
	done.Job.StartTime = timestamppb.New(started)
	feed(t, s, done)
	got := cjOf(t, s, cjName)
	if got.GetState() != trainingv1.JobState_JOB_STATE_SUCCEEDED || !got.GetStartTime().AsTime().Equal(started) {
		t.Fatalf("ended unseen: state %v start %v, want SUCCEEDED from %v", got.GetState(), got.GetStartTime(), started)
	}
	// A job cancelled before it ran has none.
	s = NewState()
	feed(t, s, customJob(cjName, "alice", spec()))
	feed(t, s, clusterIs("projects/p/clusters/cj-101", loomv1.Cluster_RUNNING))
	feed(t, s, jobIs("projects/p/jobs/101", loomv1.JobState_CANCELLED))
	if got := cjOf(t, s, cjName); got.GetStartTime() != nil {
		t.Fatalf("cancelled before it ran: start %v", got.GetStartTime())
	}
}

func TestCustomJobOnPersistentCluster(t *testing.T) {
	t.Parallel()
	s := NewState()
	sp := spec()
	sp.PersistentResourceId = "shared"
	sp.Scheduling = &trainingv1.Scheduling{Timeout: durationpb.New(90*time.Minute + 500*time.Millisecond), RestartJobOnWorkerRestart: true}
	sp.WorkerPoolSpecs[1].MachineSpec.AcceleratorCount = 0 // a3-highgpu-4g's own 4
	c := feed(t, s, customJob(cjName, "alice", sp))
	subs, es := emitted[*eventsv1.SubmitJob](c)
	if creates, _ := emitted[*eventsv1.CreateCluster](c); len(creates) != 0 || len(subs) != 1 || es[0].Principal != "users/alice" {
		t.Fatalf("emitted %v", c.Emits)
	}
	j := subs[0].GetJob()
	if j.GetCluster() != "projects/p/clusters/shared" || j.GetTimeLimitSeconds() != 5401 || j.GetMaxRetries() != WorkerRestarts || j.Requeue != nil ||
		j.GetGpusPerNode() != 4 || j.GetPartition() != "" {
		t.Fatalf("job %v", j)
	}
	c = feed(t, s, jobIs("projects/p/jobs/101", loomv1.JobState_FAILED))
	got := cjOf(t, s, cjName)
	if dels, _ := emitted[*eventsv1.DeleteCluster](c); len(dels) != 0 {
		t.Fatalf("deleted the persistent cluster: %v", c.Emits)
	}
	if got.GetState() != trainingv1.JobState_JOB_STATE_FAILED || !strings.Contains(got.GetError().GetMessage(), "exited with code 3") {
		t.Fatalf("failed: %v", got)
	}
}

func TestSchedulingDisableRetriesAndTimeout(t *testing.T) {
	t.Parallel()
	s := NewState()
	sp := spec()
	sp.PersistentResourceId = "shared"
	sp.Scheduling = &trainingv1.Scheduling{Timeout: durationpb.New(time.Hour), RestartJobOnWorkerRestart: true, DisableRetries: true}
	subs, _ := emitted[*eventsv1.SubmitJob](feed(t, s, customJob(cjName, "alice", sp)))
	j := subs[0].GetJob()
	if j.GetMaxRetries() != 0 || j.Requeue == nil || j.GetRequeue() {
		t.Fatalf("disable_retries: max_retries %d requeue %v", j.GetMaxRetries(), j.Requeue)
	}
	feed(t, s, jobIs("projects/p/jobs/101", loomv1.JobState_TIMEOUT))
	if got := cjOf(t, s, cjName); got.GetState() != trainingv1.JobState_JOB_STATE_FAILED ||
		!strings.Contains(got.GetError().GetMessage(), "scheduling.timeout") {
		t.Fatalf("timeout: %v", got)
	}
}

func TestPythonPackageCommand(t *testing.T) {
	t.Parallel()
	sp := spec()
	sp.PersistentResourceId = "shared"
	sp.WorkerPoolSpecs = sp.WorkerPoolSpecs[:1]
	sp.WorkerPoolSpecs[0].Task = &trainingv1.WorkerPoolSpec_PythonPackageSpec{PythonPackageSpec: &trainingv1.PythonPackageSpec{
		ExecutorImageUri: "img", PackageUris: []string{"file:///pk/trainer-0.1.tar.gz", "/pk/it's.whl"},
		PythonModule: "trainer.task", Args: []string{"--x=1", "a b"}}}
	subs, _ := emitted[*eventsv1.SubmitJob](feed(t, NewState(), customJob(cjName, "alice", sp)))
	cmd := subs[0].GetJob().GetCommand()
	if len(cmd) != 6 || cmd[0] != "/bin/sh" || cmd[1] != "-c" || cmd[4] != "--x=1" || cmd[5] != "a b" {
		t.Fatalf("command %q", cmd)
	}
	for _, want := range []string{"python3 -m venv --system-site-packages", "pip install --quiet --no-index --no-deps --no-build-isolation '/pk/trainer-0.1.tar.gz' '/pk/it'\\''s.whl'",
		`"$v/bin/python" -m 'trainer.task' "$@" </dev/null &`, `trap 'rm -rf "$v"' EXIT`} {
		if !strings.Contains(cmd[2], want) {
			t.Errorf("script lacks %q:\n%s", want, cmd[2])
		}
	}
	if subs[0].GetJob().GetEnv()["LOOM_CONTAINER_IMAGE"] != "img" {
		t.Errorf("image %q", subs[0].GetJob().GetEnv()["LOOM_CONTAINER_IMAGE"])
	}
}

func TestUnrunnableSpecsFailWithTheField(t *testing.T) {
	t.Parallel()
	for name, mut := range map[string]func(*trainingv1.CustomJobSpec){
		"no command":      func(s *trainingv1.CustomJobSpec) { s.WorkerPoolSpecs[0].GetContainerSpec().Command = nil },
		"unknown machine": func(s *trainingv1.CustomJobSpec) { s.WorkerPoolSpecs[1].MachineSpec.MachineType = "no-such-machine" },
		"no pools":        func(s *trainingv1.CustomJobSpec) { s.WorkerPoolSpecs = nil },
		"bad persistent":  func(s *trainingv1.CustomJobSpec) { s.PersistentResourceId = "Not An Id" },
	} {
		sp := spec()
		mut(sp)
		s := NewState()
		c := feed(t, s, customJob(cjName, "alice", sp))
		got := cjOf(t, s, cjName)
		if got.GetState() != trainingv1.JobState_JOB_STATE_FAILED || got.GetError().GetCode() != codeInvalidArgument || got.GetError().GetMessage() == "" {
			t.Errorf("%s: %v", name, got)
		}
		if subs, _ := emitted[*eventsv1.SubmitJob](c); len(subs) != 0 {
			t.Errorf("%s: submitted %v", name, subs)
		}
	}
}

func TestClusterFailureFailsTheJob(t *testing.T) {
	t.Parallel()
	s := NewState()
	feed(t, s, customJob(cjName, "alice", spec()))
	c := feed(t, s, &eventsv1.ClusterOperationFailed{Cluster: "projects/p/clusters/cj-101", Code: 3, Message: "node pool cj101-wp0: bad machine"})
	got := cjOf(t, s, cjName)
	if got.GetState() != trainingv1.JobState_JOB_STATE_FAILED || !strings.Contains(got.GetError().GetMessage(), "bad machine") {
		t.Fatalf("%v", got)
	}
	if dels, _ := emitted[*eventsv1.DeleteCluster](c); len(dels) != 1 {
		t.Fatalf("the half-made cluster is not deleted: %v", c.Emits)
	}
}

func TestFlexStartExpires(t *testing.T) {
	t.Parallel()
	s := NewState()
	sp := spec()
	sp.Scheduling = &trainingv1.Scheduling{Strategy: trainingv1.Scheduling_FLEX_START, MaxWaitDuration: durationpb.New(time.Hour)}
	c := feed(t, s, customJob(cjName, "alice", sp))
	creates, _ := emitted[*eventsv1.CreateCluster](c)
	if creates[0].GetCluster().GetCompute().GetNodePools()[0].GetCapacity().GetType() != loomv1.CapacitySource_FLEX_START {
		t.Fatalf("capacity %v", creates[0].GetCluster().GetCompute().GetNodePools()[0].GetCapacity())
	}
	feed(t, s, clusterIs("projects/p/clusters/cj-101", loomv1.Cluster_RUNNING))
	if cs := s.Tick(t0.Add(59 * time.Minute)); len(cs) != 0 {
		t.Fatalf("expired early: %v", cs)
	}
	cs := s.Tick(t0.Add(time.Hour))
	if len(cs) != 1 {
		t.Fatalf("Tick at max_wait_duration: %d changes", len(cs))
	}
	s.Apply(cs[0])
	cancels, es := emitted[*eventsv1.CancelJob](cs[0])
	dels, _ := emitted[*eventsv1.DeleteCluster](cs[0])
	got := cjOf(t, s, cjName)
	if got.GetState() != trainingv1.JobState_JOB_STATE_EXPIRED || got.GetError() == nil || len(cancels) != 1 ||
		es[0].Principal != "" || cancels[0].GetUser() != "" || len(dels) != 1 {
		t.Fatalf("expired: %v, emitted %v", got, cs[0].Emits)
	}
	if cs := s.Tick(t0.Add(2 * time.Hour)); len(cs) != 0 {
		t.Fatalf("expired twice")
	}
	// A started FLEX_START job never expires.
	s2 := NewState()
	feed(t, s2, customJob(cjName, "alice", sp))
	feed(t, s2, clusterIs("projects/p/clusters/cj-101", loomv1.Cluster_RUNNING))
	feed(t, s2, jobIs("projects/p/jobs/101", loomv1.JobState_RUNNING))
	if cs := s2.Tick(t0.Add(2 * time.Hour)); len(cs) != 0 {
		t.Fatalf("a running job expired")
	}
}

func TestCancelIsTheOwnersOrAnAdmins(t *testing.T) {
	t.Parallel()
	s := NewState()
	feed(t, s, customJob(cjName, "alice", spec()))
	feed(t, s, clusterIs("projects/p/clusters/cj-101", loomv1.Cluster_RUNNING))
	before := proto.Clone(cjOf(t, s, cjName))
	// The principal overrides the user the payload names.
	for _, in := range []Input{
		{Payload: &eventsv1.CancelTraining{Name: cjName, User: "bob"}},
		{Payload: &eventsv1.CancelTraining{Name: cjName, User: "alice"}, Principal: "users/mallory"},
		{Payload: &eventsv1.CancelTraining{Name: cjName}},
	} {
		c, err := s.Handle(t0, in)
		if c != nil || !errors.Is(err, ErrIgnored) || !errors.Is(err, errs.PermissionDenied) {
			t.Fatalf("cancel %v: %v %v; want refused", in, c, err)
		}
	}
	if !proto.Equal(before, cjOf(t, s, cjName)) {
		t.Fatalf("a refused cancel changed the job")
	}
	c := step(t, s, t0, Input{Payload: &eventsv1.CancelTraining{Name: cjName, User: "root", Admin: true}})
	cancels, es := emitted[*eventsv1.CancelJob](c)
	if got := cjOf(t, s, cjName); got.GetState() != trainingv1.JobState_JOB_STATE_CANCELLING || len(cancels) != 1 ||
		cancels[0].GetJob() != "projects/p/jobs/101" || es[0].Principal != "users/root" || !cancels[0].GetAdmin() {
		t.Fatalf("admin cancel: %v, emitted %v", got, c.Emits)
	}
	if c := step(t, s, t0, Input{Payload: &eventsv1.CancelTraining{Name: cjName}, Principal: "users/alice"}); c != nil {
		t.Fatalf("a second cancel emitted %v", c.Emits)
	}
	feed(t, s, jobIs("projects/p/jobs/101", loomv1.JobState_RUNNING)) // late: stays CANCELLING
	c = feed(t, s, jobIs("projects/p/jobs/101", loomv1.JobState_CANCELLED))
	got := cjOf(t, s, cjName)
	if got.GetState() != trainingv1.JobState_JOB_STATE_CANCELLED || got.GetError().GetCode() != codeCancelled ||
		!strings.Contains(got.GetError().GetMessage(), "users/root") {
		t.Fatalf("cancelled: %v", got)
	}
	if dels, _ := emitted[*eventsv1.DeleteCluster](c); len(dels) != 1 {
		t.Fatalf("cluster kept: %v", c.Emits)
	}
	// Before its job is submitted, a cancel ends it at once.
	s2 := NewState()
	feed(t, s2, customJob(cjName, "alice", spec()))
	c = step(t, s2, t0, Input{Payload: &eventsv1.CancelTraining{Name: cjName}, Principal: "users/alice"})
	if cancels, _ := emitted[*eventsv1.CancelJob](c); len(cancels) != 0 || cjOf(t, s2, cjName).GetState() != trainingv1.JobState_JOB_STATE_CANCELLED {
		t.Fatalf("cancel while provisioning: %v", c.Emits)
	}
	if c := feed(t, s2, clusterIs("projects/p/clusters/cj-101", loomv1.Cluster_RUNNING)); c != nil {
		if subs, _ := emitted[*eventsv1.SubmitJob](c); len(subs) != 0 {
			t.Fatalf("submitted a cancelled job")
		}
	}
}

func TestHostileCommandsChangeNothing(t *testing.T) {
	t.Parallel()
	s := NewState()
	feed(t, s, customJob(cjName, "alice", spec()))
	snapshot := func() string {
		b, _ := json.Marshal(len(s.Roots))
		return string(b) + cjOf(t, s, cjName).String()
	}
	before := snapshot()
	for _, in := range []proto.Message{
		&eventsv1.CreateCustomJob{},
		&eventsv1.CreateCustomJob{CustomJob: &trainingv1.CustomJob{Name: "projects/p/customJobs/1", User: "a"}},
		&eventsv1.CreateCustomJob{CustomJob: &trainingv1.CustomJob{Name: loc + "customJobs/0x1", User: "a"}},
		&eventsv1.CreateCustomJob{CustomJob: &trainingv1.CustomJob{Name: loc + "customJobs/102"}}, // no owner
		&eventsv1.CreateHyperparameterTuningJob{},
		&eventsv1.CreateHyperparameterTuningJob{TuningJob: &trainingv1.HyperparameterTuningJob{Name: loc + "hyperparameterTuningJobs/100",
			User: "a", MaxTrialCount: 3}}, // trial 1 would be customJobs/101, taken
		&eventsv1.CreateHyperparameterTuningJob{TuningJob: &trainingv1.HyperparameterTuningJob{Name: loc + "hyperparameterTuningJobs/500",
			User: "a", MaxTrialCount: 1 << 30}}, // would loop over its ids
		&eventsv1.CreateTrainingPipeline{},
		&eventsv1.CancelTraining{Name: loc + "customJobs/999", User: "alice"},
		&eventsv1.CancelTraining{Name: "job:projects/p/jobs/101", User: "alice"},
		&eventsv1.CancelTraining{Name: "", User: "alice"},
		&eventsv1.DeleteTraining{Name: cjName, User: "alice"}, // still running
		&eventsv1.DeleteTraining{Name: cjName, User: "bob"},
		&eventsv1.DeleteTraining{Name: loc + "trainingPipelines/5", User: "alice"},
	} {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("%T %v panicked: %v", in, in, p)
				}
			}()
			c, err := s.Handle(t0, Input{Payload: in})
			if c != nil && len(c.Emits) > 0 {
				if _, ok := in.(*eventsv1.CreateCustomJob); !ok {
					t.Errorf("%T %v changed the state: %v", in, in, c.Emits)
				}
			}
			if c != nil {
				t.Errorf("%T %v: change %v (err %v)", in, in, c.Emits, err)
			}
		}()
	}
	// Events about unknown resources are not the service's.
	for _, in := range []proto.Message{
		jobIs("projects/p/jobs/555", loomv1.JobState_COMPLETED), clusterIs("projects/p/clusters/x", loomv1.Cluster_RUNNING),
		&eventsv1.MetricsReported{Job: "projects/p/jobs/101"}, &eventsv1.ModelVersionRegistered{RequestId: "nope"},
		&eventsv1.ModelUploadFailed{}, &eventsv1.ClusterDeleted{Cluster: "projects/p/clusters/cj-999"},
	} {
		if c, err := s.Handle(t0, Input{Payload: in}); c != nil || err != nil {
			t.Errorf("%T: %v %v", in, c, err)
		}
	}
	if snapshot() != before {
		t.Fatalf("state changed:\n%s\n%s", before, snapshot())
	}
	// Deleting an ended job by its owner removes it.
	feed(t, s, clusterIs("projects/p/clusters/cj-101", loomv1.Cluster_RUNNING))
	feed(t, s, jobIs("projects/p/jobs/101", loomv1.JobState_COMPLETED))
	c := step(t, s, t0, Input{Payload: &eventsv1.DeleteTraining{Name: cjName}, Principal: "users/alice"})
	if c == nil || c.After != nil || s.Lookup(cjName) != nil || s.Lookup("job:projects/p/jobs/101") != nil {
		t.Fatalf("delete: %v", c)
	}
}

// ---- tuning ----

func study() *trainingv1.StudySpec {
	return &trainingv1.StudySpec{
		Metrics: []*trainingv1.StudySpec_MetricSpec{{MetricId: "val_loss", Goal: trainingv1.StudySpec_MetricSpec_MINIMIZE}},
		Parameters: []*trainingv1.StudySpec_ParameterSpec{
			{ParameterId: "learning_rate", ScaleType: trainingv1.StudySpec_ParameterSpec_UNIT_LOG_SCALE,
				ParameterValueSpec: &trainingv1.StudySpec_ParameterSpec_DoubleValueSpec_{DoubleValueSpec: &trainingv1.StudySpec_ParameterSpec_DoubleValueSpec{MinValue: 1e-4, MaxValue: 1}}},
			{ParameterId: "batch_size",
				ParameterValueSpec: &trainingv1.StudySpec_ParameterSpec_DiscreteValueSpec_{DiscreteValueSpec: &trainingv1.StudySpec_ParameterSpec_DiscreteValueSpec{Values: []float64{16, 32, 64}}}},
		},
		MeasurementSelectionType: trainingv1.StudySpec_BEST_MEASUREMENT,
		Seed:                     7,
	}
}

func tuningJob(name string, maxTrials, parallel, maxFailed int32) *eventsv1.CreateHyperparameterTuningJob {
	sp := spec()
	sp.WorkerPoolSpecs = sp.WorkerPoolSpecs[:1]
	return &eventsv1.CreateHyperparameterTuningJob{TuningJob: &trainingv1.HyperparameterTuningJob{
		Name: name, DisplayName: "tune", StudySpec: study(), MaxTrialCount: maxTrials, ParallelTrialCount: parallel,
		MaxFailedTrialCount: maxFailed, TrialJobSpec: sp, User: "alice"}}
}

// lossOf is the test's objective: a function of the trial's parameters.
func lossOf(tr *trainingv1.Trial) float64 {
	v := 0.0
	for _, p := range tr.GetParameters() {
		v += p.GetValue().GetNumberValue()
	}
	return v
}

// runTrial drives trial tr's CustomJob to the end: cluster up, running,
// three epochs of metrics (the middle the best), and exit (ok or failed).
func runTrial(t *testing.T, s *State, tr *trainingv1.Trial, ok bool) {
	t.Helper()
	n, err := ParseName(tr.GetCustomJob(), CustomJobs)
	if err != nil {
		t.Fatal(err)
	}
	feed(t, s, clusterIs(n.EphemeralCluster(), loomv1.Cluster_RUNNING))
	feed(t, s, jobIs(n.Job(), loomv1.JobState_RUNNING))
	l := lossOf(tr)
	feed(t, s, &eventsv1.MetricsReported{Job: n.Job(), Node: "n-0001", Points: []*eventsv1.MetricsReported_Point{
		{Step: 1, Values: map[string]float64{"val_loss": l + 2, "accuracy": 0.5}},
		{Step: 2, Values: map[string]float64{"val_loss": l, "accuracy": 0.6}},
	}})
	feed(t, s, &eventsv1.MetricsReported{Job: n.Job(), Node: "n-0001", Points: []*eventsv1.MetricsReported_Point{
		{Step: 3, Values: map[string]float64{"val_loss": l + 1, "accuracy": 0.7}}}})
	end := loomv1.JobState_COMPLETED
	if !ok {
		end = loomv1.JobState_FAILED
	}
	feed(t, s, jobIs(n.Job(), end))
}

func tuningOf(t *testing.T, s *State, name string) *trainingv1.HyperparameterTuningJob {
	t.Helper()
	r := s.Lookup(name)
	if r == nil || r.Tuning == nil {
		t.Fatalf("no tuning job %s", name)
	}
	return r.Tuning.Job
}

func active(j *trainingv1.HyperparameterTuningJob) []*trainingv1.Trial {
	var out []*trainingv1.Trial
	for _, tr := range j.GetTrials() {
		if tr.GetState() == trainingv1.Trial_ACTIVE {
			out = append(out, tr)
		}
	}
	return out
}

func TestTuningJobRunsItsStudy(t *testing.T) {
	t.Parallel()
	s := NewState()
	c := feed(t, s, tuningJob(tunName, 5, 2, 0))
	j := tuningOf(t, s, tunName)
	if j.GetState() != trainingv1.JobState_JOB_STATE_RUNNING || len(j.GetTrials()) != 2 {
		t.Fatalf("created: %v", j)
	}
	if creates, _ := emitted[*eventsv1.CreateCluster](c); len(creates) != 2 || creates[1].GetCluster().GetName() != "projects/p/clusters/cj-202" {
		t.Fatalf("emitted %v", c.Emits)
	}
	tr1 := j.GetTrials()[0]
	if tr1.GetId() != "1" || tr1.GetCustomJob() != loc+"customJobs/201" || tr1.GetState() != trainingv1.Trial_ACTIVE {
		t.Fatalf("trial 1 %v", tr1)
	}
	// Trial 1's job: its parameters as flags, its own output directories.
	c = feed(t, s, clusterIs("projects/p/clusters/cj-201", loomv1.Cluster_RUNNING))
	subs, _ := emitted[*eventsv1.SubmitJob](c)
	cmd := strings.Join(subs[0].GetJob().GetCommand(), " ")
	want := "loom train --epochs=3 " + strings.Join(ParamFlags(tr1.GetParameters()), " ")
	if cmd != want || !strings.Contains(cmd, "--batch_size=") || subs[0].GetJob().GetEnv()["CLOUD_ML_TRIAL_ID"] != "1" ||
		subs[0].GetJob().GetEnv()["AIP_MODEL_DIR"] != "file:///shared/out/1/model" {
		t.Fatalf("trial job %q env %v; want %q", cmd, subs[0].GetJob().GetEnv(), want)
	}
	for len(active(tuningOf(t, s, tunName))) > 0 {
		runTrial(t, s, active(tuningOf(t, s, tunName))[0], true)
	}
	j = tuningOf(t, s, tunName)
	if j.GetState() != trainingv1.JobState_JOB_STATE_SUCCEEDED || len(j.GetTrials()) != 5 || j.GetEndTime() == nil {
		t.Fatalf("ended: %v", j)
	}
	best, bv := "", 0.0
	for _, tr := range j.GetTrials() {
		if tr.GetState() != trainingv1.Trial_SUCCEEDED || len(tr.GetMeasurements()) != 3 {
			t.Fatalf("trial %v", tr)
		}
		// BEST_MEASUREMENT: step 2's, the lowest loss.
		if fm := tr.GetFinalMeasurement(); fm.GetStepCount() != 2 || fm.GetMetrics()[1].GetValue() != lossOf(tr) {
			t.Fatalf("final measurement %v of %v", fm, tr)
		}
		if best == "" || lossOf(tr) < bv {
			best, bv = tr.GetId(), lossOf(tr)
		}
	}
	if j.GetBestTrial() != best {
		t.Fatalf("best trial %s, want %s", j.GetBestTrial(), best)
	}
	// Every trial's cluster was deleted; the trial CustomJobs are readable.
	if got := cjOf(t, s, loc+"customJobs/205"); got.GetState() != trainingv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("trial 5's custom job %v", got)
	}
}

func TestTuningLastMeasurementAndInfeasibleTrials(t *testing.T) {
	t.Parallel()
	s := NewState()
	in := tuningJob(tunName, 2, 1, 0)
	in.TuningJob.StudySpec.MeasurementSelectionType = trainingv1.StudySpec_LAST_MEASUREMENT
	feed(t, s, in)
	runTrial(t, s, active(tuningOf(t, s, tunName))[0], true)
	tr := tuningOf(t, s, tunName).GetTrials()[0]
	if tr.GetFinalMeasurement().GetStepCount() != 3 {
		t.Fatalf("LAST: final %v", tr.GetFinalMeasurement())
	}
	// Trial 2 succeeds without a metric: INFEASIBLE with the reason, once
	// its metric grace is over (TestTrialWithoutMetricsIsInfeasibleAfterTheGrace).
	tr2 := active(tuningOf(t, s, tunName))[0]
	n, _ := ParseName(tr2.GetCustomJob(), CustomJobs)
	feed(t, s, clusterIs(n.EphemeralCluster(), loomv1.Cluster_RUNNING))
	feed(t, s, jobIs(n.Job(), loomv1.JobState_COMPLETED))
	for _, c := range s.Tick(t0.Add(DefaultMetricGrace)) {
		s.Apply(c)
	}
	j := tuningOf(t, s, tunName)
	if got := j.GetTrials()[1]; got.GetState() != trainingv1.Trial_INFEASIBLE || !strings.Contains(got.GetInfeasibleReason(), "CLOUD_ML_HP_METRIC_FILE") {
		t.Fatalf("trial 2 %v", got)
	}
	if j.GetState() != trainingv1.JobState_JOB_STATE_SUCCEEDED || j.GetBestTrial() != "1" {
		t.Fatalf("job %v", j)
	}
}

func TestTuningFailsPastMaxFailedTrials(t *testing.T) {
	t.Parallel()
	s := NewState()
	feed(t, s, tuningJob(tunName, 6, 2, 1))
	first := active(tuningOf(t, s, tunName))
	feed(t, s, clusterIs("projects/p/clusters/cj-202", loomv1.Cluster_RUNNING))
	runTrial(t, s, first[0], false)
	j := tuningOf(t, s, tunName)
	// The other active trial is stopped (its job cancelled by the service),
	// then the job fails.
	if j.GetState() != trainingv1.JobState_JOB_STATE_RUNNING || len(j.GetTrials()) != 2 || j.GetTrials()[1].GetState() != trainingv1.Trial_STOPPING {
		t.Fatalf("draining: %v", j)
	}
	if cj := cjOf(t, s, first[1].GetCustomJob()); cj.GetState() != trainingv1.JobState_JOB_STATE_CANCELLING {
		t.Fatalf("the other trial's job: %v", cj)
	}
	// A cancel while it drains towards FAILED does not hide why it failed.
	step(t, s, t0, Input{Payload: &eventsv1.CancelTraining{Name: tunName}, Principal: "users/alice"})
	if j := tuningOf(t, s, tunName); j.GetState() == trainingv1.JobState_JOB_STATE_CANCELLING {
		t.Fatalf("a cancel while failing: %v", j)
	}
	feed(t, s, jobIs("projects/p/jobs/202", loomv1.JobState_CANCELLED))
	j = tuningOf(t, s, tunName)
	if j.GetState() != trainingv1.JobState_JOB_STATE_FAILED || !strings.Contains(j.GetError().GetMessage(), "max_failed_trial_count 1") ||
		j.GetTrials()[1].GetState() != trainingv1.Trial_INFEASIBLE {
		t.Fatalf("ended: %v", j)
	}
	// With the other trial not yet submitted, it is cancelled at once and the
	// job fails with the first failure.
	s2 := NewState()
	feed(t, s2, tuningJob(tunName, 6, 2, 1))
	runTrial(t, s2, active(tuningOf(t, s2, tunName))[0], false)
	if j := tuningOf(t, s2, tunName); j.GetState() != trainingv1.JobState_JOB_STATE_FAILED || len(j.GetTrials()) != 2 {
		t.Fatalf("ended: %v", j)
	}
}

func TestTuningCancel(t *testing.T) {
	t.Parallel()
	s := NewState()
	feed(t, s, tuningJob(tunName, 4, 2, 0))
	tr := active(tuningOf(t, s, tunName))[0]
	n, _ := ParseName(tr.GetCustomJob(), CustomJobs)
	feed(t, s, clusterIs(n.EphemeralCluster(), loomv1.Cluster_RUNNING))
	if _, err := s.Handle(t0, Input{Payload: &eventsv1.CancelTraining{Name: tunName, User: "bob"}}); !errors.Is(err, errs.PermissionDenied) {
		t.Fatalf("bob's cancel: %v", err)
	}
	c := step(t, s, t0, Input{Payload: &eventsv1.CancelTraining{Name: tunName}, Principal: "users/alice"})
	cancels, _ := emitted[*eventsv1.CancelJob](c)
	if j := tuningOf(t, s, tunName); j.GetState() != trainingv1.JobState_JOB_STATE_CANCELLING || len(cancels) != 1 || cancels[0].GetJob() != n.Job() {
		t.Fatalf("cancelling: %v, emitted %v", j, c.Emits)
	}
	feed(t, s, jobIs(n.Job(), loomv1.JobState_CANCELLED))
	j := tuningOf(t, s, tunName)
	if j.GetState() != trainingv1.JobState_JOB_STATE_CANCELLED || j.GetError().GetCode() != codeCancelled || len(j.GetTrials()) != 2 {
		t.Fatalf("cancelled: %v", j)
	}
}

// TestStudyReplaysAfterRestart: a state rebuilt from the stored records
// midway (as after a crash) finishes the study with the same trials and the
// same best trial as one that never stopped.
func TestStudyReplaysAfterRestart(t *testing.T) {
	t.Parallel()
	run := func(restartAt int) *trainingv1.HyperparameterTuningJob {
		s := NewState()
		feed(t, s, tuningJob(tunName, 8, 3, 0))
		for i := 0; len(active(tuningOf(t, s, tunName))) > 0; i++ {
			if i == restartAt {
				var roots []*Root
				for _, r := range s.Roots {
					roots = append(roots, r.Clone())
				}
				s = NewState(roots...)
			}
			runTrial(t, s, active(tuningOf(t, s, tunName))[0], true)
		}
		return tuningOf(t, s, tunName)
	}
	a, b := run(-1), run(3)
	if len(a.GetTrials()) != 8 || a.GetBestTrial() == "" || a.GetBestTrial() != b.GetBestTrial() {
		t.Fatalf("best %s vs %s", a.GetBestTrial(), b.GetBestTrial())
	}
	for i := range a.GetTrials() {
		x, y := a.GetTrials()[i], b.GetTrials()[i]
		if fmt.Sprint(ParamFlags(x.GetParameters())) != fmt.Sprint(ParamFlags(y.GetParameters())) ||
			!proto.Equal(x.GetFinalMeasurement(), y.GetFinalMeasurement()) {
			t.Fatalf("trial %d differs: %v vs %v", i+1, x, y)
		}
	}
}

func TestParamFlags(t *testing.T) {
	t.Parallel()
	got := ParamFlags([]*trainingv1.Trial_Parameter{
		{ParameterId: "lr", Value: structpb.NewNumberValue(0.0125)}, {ParameterId: "bs", Value: structpb.NewNumberValue(64)},
		{ParameterId: "opt", Value: structpb.NewStringValue("adam")}})
	if strings.Join(got, " ") != "--lr=0.0125 --bs=64 --opt=adam" {
		t.Fatalf("%q", got)
	}
}

// ---- pipelines ----

func pipeline(def string, inputs proto.Message, reserved int64) *eventsv1.CreateTrainingPipeline {
	raw, _ := jsonOf(inputs)
	v := &structpb.Value{}
	_ = v.UnmarshalJSON(raw)
	return &eventsv1.CreateTrainingPipeline{Pipeline: &trainingv1.TrainingPipeline{
		Name: plName, DisplayName: "pl", TrainingTaskDefinition: "gs://google-cloud-aiplatform/schema/trainingjob/definition/" + def,
		TrainingTaskInputs: v, ModelToUpload: &trainingv1.Model{DisplayName: "tiny"}, ParentModel: "projects/p/models/tiny", User: "alice",
	}, ReservedJobIds: reserved}
}

func TestPipelineCustomTaskUploadsItsModel(t *testing.T) {
	t.Parallel()
	s := NewState()
	sp := spec()
	sp.WorkerPoolSpecs = sp.WorkerPoolSpecs[:1]
	feed(t, s, pipeline("custom_task_1.0.0.yaml", sp, 2))
	r := s.Lookup(plName)
	if r.Pipeline.P.GetState() != trainingv1.PipelineState_PIPELINE_STATE_RUNNING || r.Pipeline.Child != loc+"customJobs/301" {
		t.Fatalf("created: %v", r.Pipeline)
	}
	feed(t, s, clusterIs("projects/p/clusters/cj-301", loomv1.Cluster_RUNNING))
	feed(t, s, jobIs("projects/p/jobs/301", loomv1.JobState_RUNNING))
	c := feed(t, s, jobIs("projects/p/jobs/301", loomv1.JobState_COMPLETED))
	ups, es := emitted[*eventsv1.UploadModel](c)
	if len(ups) != 1 || es[0].Key != "projects/p/models/tiny" {
		t.Fatalf("emitted %v", c.Emits)
	}
	up := ups[0]
	lin := up.GetLineage()
	if up.GetModel().GetArtifactUri() != "file:///shared/out/model" || up.GetParentModel() != "projects/p/models/tiny" ||
		up.GetRequestId() != UploadRequestID(plName) || up.GetUser() != "alice" || up.GetOsUser() != "alice" || up.GetAnyOwner() || lin.GetTrainingPipeline() != plName ||
		lin.GetCustomJob() != loc+"customJobs/301" || lin.GetJob() != "projects/p/jobs/301" || lin.GetCheckpointUri() != "file:///shared/out/checkpoints" {
		t.Fatalf("upload %v", up)
	}
	if c := feed(t, s, &eventsv1.ModelVersionRegistered{RequestId: "other", Version: &loomv1.ModelVersion{Name: "x"}}); c != nil {
		t.Fatalf("another upload's answer changed it")
	}
	feed(t, s, &eventsv1.ModelVersionRegistered{RequestId: up.GetRequestId(), Model: "projects/p/models/tiny",
		Version: &loomv1.ModelVersion{Name: "projects/p/models/tiny/versions/3"}})
	p := s.Lookup(plName).Pipeline.P
	if p.GetState() != trainingv1.PipelineState_PIPELINE_STATE_SUCCEEDED || p.GetModelVersion() != "projects/p/locations/global/models/tiny@3" ||
		p.GetTrainingTaskMetadata().GetStructValue().GetFields()["backingCustomJob"].GetStringValue() != loc+"customJobs/301" {
		t.Fatalf("pipeline %v", p)
	}
	// A refused upload fails it with the registry's reason.
	s2 := NewState()
	feed(t, s2, pipeline("custom_task_1.0.0.yaml", sp, 2))
	feed(t, s2, clusterIs("projects/p/clusters/cj-301", loomv1.Cluster_RUNNING))
	feed(t, s2, jobIs("projects/p/jobs/301", loomv1.JobState_COMPLETED))
	feed(t, s2, &eventsv1.ModelUploadFailed{RequestId: UploadRequestID(plName), Reason: "no MANIFEST in /shared/out/model"})
	if p := s2.Lookup(plName).Pipeline.P; p.GetState() != trainingv1.PipelineState_PIPELINE_STATE_FAILED || !strings.Contains(p.GetError().GetMessage(), "MANIFEST") {
		t.Fatalf("refused upload: %v", p)
	}
}

// TestPipelineOfAnotherProjectsModelFailsAtOnce: a pipeline whose
// parent_model is another project's (which the registry refuses) fails as
// it is created, running no job, not after its training (a tester found
// it failing at the end).
func TestPipelineOfAnotherProjectsModelFailsAtOnce(t *testing.T) {
	t.Parallel()
	s := NewState()
	sp := spec()
	sp.WorkerPoolSpecs = sp.WorkerPoolSpecs[:1]
	cmd := pipeline("custom_task_1.0.0.yaml", sp, 2)
	cmd.Pipeline.ParentModel = "projects/other/models/bobm"
	c := feed(t, s, cmd)
	p := s.Lookup(plName).Pipeline
	if p.P.GetState() != trainingv1.PipelineState_PIPELINE_STATE_FAILED || p.Child != "" ||
		!strings.Contains(p.P.GetError().GetMessage(), "training_pipeline.parent_model") || !strings.Contains(p.P.GetError().GetMessage(), "project other, not of p") {
		t.Fatalf("pipeline %v (child %q)", p.P, p.Child)
	}
	if clusters, _ := emitted[*eventsv1.CreateCluster](c); len(clusters) != 0 {
		t.Fatalf("a failed pipeline asked for a cluster: %v", c.Emits)
	}
}

func TestPipelineTuningTaskUploadsTheBestTrial(t *testing.T) {
	t.Parallel()
	s := NewState()
	task := tuningJob("", 3, 1, 0).GetTuningJob()
	task.Name, task.User, task.DisplayName = "", "", ""
	if c, err := s.Handle(t0, Input{Payload: pipeline("hyperparameter_tuning_task_1.0.0.yaml", task, 4)}); err != nil ||
		c.After.Pipeline.P.GetState() != trainingv1.PipelineState_PIPELINE_STATE_FAILED {
		t.Fatalf("too few reserved ids: %v %v", c, err)
	}
	feed(t, s, pipeline("hyperparameter_tuning_task_1.0.0.yaml", task, 5))
	tn := loc + "hyperparameterTuningJobs/301"
	if tr := active(tuningOf(t, s, tn)); len(tr) != 1 || tr[0].GetCustomJob() != loc+"customJobs/302" {
		t.Fatalf("trial 1 %v", tr)
	}
	for len(active(tuningOf(t, s, tn))) > 0 {
		runTrial(t, s, active(tuningOf(t, s, tn))[0], true)
	}
	j := tuningOf(t, s, tn)
	if j.GetState() != trainingv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("tuning %v", j)
	}
	r := s.Lookup(plName)
	if r.Pipeline.RequestID == "" {
		t.Fatalf("no upload: %v", r.Pipeline)
	}
	c2 := s.Roots[plName]
	best := j.GetTrials()[0]
	for _, tr := range j.GetTrials() {
		if tr.GetId() == j.GetBestTrial() {
			best = tr
		}
	}
	p := c2.Pipeline.P
	if p.GetTrainingTaskMetadata().GetStructValue().GetFields()["bestTrialId"].GetStringValue() != best.GetId() {
		t.Fatalf("metadata %v", p.GetTrainingTaskMetadata())
	}
	up, err := upload(c2)
	if err != nil {
		t.Fatal(err)
	}
	lin := up.GetLineage()
	if lin.GetTrial() != best.GetName() || lin.GetTuningJob() != tn || lin.GetHyperparameters()["batch_size"] == "" ||
		lin.GetMetrics()["val_loss"] != lossOf(best) || up.GetModel().GetArtifactUri() != "file:///shared/out/"+best.GetId()+"/model" {
		t.Fatalf("upload %v", up)
	}
	// A final measurement holding ±Inf (the agent keeps "inf" in a
	// series): the lineage states the finite values only, the rest as
	// they were.
	fm := best.GetFinalMeasurement()
	fm.Metrics = append(fm.Metrics, &trainingv1.Measurement_Metric{MetricId: "grad_norm", Value: math.Inf(1)},
		&trainingv1.Measurement_Metric{MetricId: "neg", Value: math.Inf(-1)})
	if up, err = upload(c2); err != nil {
		t.Fatal(err)
	}
	if m := up.GetLineage().GetMetrics(); len(m) != len(fm.GetMetrics())-2 || m["val_loss"] != lossOf(best) {
		t.Fatalf("lineage metrics %v of the final measurement %v: want its finite values", m, fm)
	}
}

func TestPipelineCancel(t *testing.T) {
	t.Parallel()
	s := NewState()
	sp := spec()
	sp.WorkerPoolSpecs = sp.WorkerPoolSpecs[:1]
	feed(t, s, pipeline("custom_task_1.0.0.yaml", sp, 2))
	feed(t, s, clusterIs("projects/p/clusters/cj-301", loomv1.Cluster_RUNNING))
	step(t, s, t0, Input{Payload: &eventsv1.CancelTraining{Name: plName}, Principal: "users/alice"})
	if p := s.Lookup(plName).Pipeline.P; p.GetState() != trainingv1.PipelineState_PIPELINE_STATE_CANCELLING {
		t.Fatalf("%v", p)
	}
	if _, err := s.Handle(t0, Input{Payload: &eventsv1.DeleteTraining{Name: plName}, Principal: "users/alice"}); !errors.Is(err, errs.FailedPrecondition) {
		t.Fatalf("delete while cancelling: %v", err)
	}
	c := feed(t, s, jobIs("projects/p/jobs/301", loomv1.JobState_CANCELLED))
	if ups, _ := emitted[*eventsv1.UploadModel](c); len(ups) != 0 {
		t.Fatalf("uploaded a cancelled pipeline's model")
	}
	if p := s.Lookup(plName).Pipeline.P; p.GetState() != trainingv1.PipelineState_PIPELINE_STATE_CANCELLED || p.GetError().GetCode() != codeCancelled {
		t.Fatalf("%v", p)
	}
	if _, err := s.Handle(t0, Input{Payload: &eventsv1.DeleteTraining{Name: loc + "customJobs/301"}, Principal: "users/alice"}); !errors.Is(err, errs.FailedPrecondition) {
		t.Fatalf("delete of a pipeline's job: %v", err)
	}
}

func jsonOf(m proto.Message) ([]byte, error) { return protojson.Marshal(m) }

// TestEveryEndOfTheSchedulerJob: each final state of the scheduler job (and
// a cluster in ERROR) ends the CustomJob with the state and an error a
// person can act on, and deletes its cluster.
func TestEveryEndOfTheSchedulerJob(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		end  proto.Message
		want trainingv1.JobState
		msg  string
	}{
		{jobIs("projects/p/jobs/101", loomv1.JobState_COMPLETED), trainingv1.JobState_JOB_STATE_SUCCEEDED, ""},
		{jobIs("projects/p/jobs/101", loomv1.JobState_FAILED), trainingv1.JobState_JOB_STATE_FAILED, "loom jobs logs 101"},
		{jobIs("projects/p/jobs/101", loomv1.JobState_OUT_OF_MEMORY), trainingv1.JobState_JOB_STATE_FAILED, "larger machine_type"},
		{jobIs("projects/p/jobs/101", loomv1.JobState_NODE_FAIL), trainingv1.JobState_JOB_STATE_FAILED, "infrastructure"},
		// A preemption ends only a job that may not be requeued (disable_retries):
		// another is requeued (TestCustomJobRetriedFailureDoesNotEndIt).
		{func() *eventsv1.JobChanged {
			ev := jobIs("projects/p/jobs/101", loomv1.JobState_PREEMPTED)
			no := false
			ev.Job.Requeue = &no
			return ev
		}(), trainingv1.JobState_JOB_STATE_FAILED, "preempted"},
		{jobIs("projects/p/jobs/101", loomv1.JobState_TIMEOUT), trainingv1.JobState_JOB_STATE_FAILED, "timeout"},
		{jobIs("projects/p/jobs/101", loomv1.JobState_CANCELLED), trainingv1.JobState_JOB_STATE_CANCELLED, "was cancelled"},
		{clusterIs("projects/p/clusters/cj-101", loomv1.Cluster_ERROR), trainingv1.JobState_JOB_STATE_FAILED, "its cluster"},
	} {
		s := NewState()
		feed(t, s, customJob(cjName, "alice", spec()))
		if _, ok := tc.end.(*eventsv1.JobChanged); ok {
			feed(t, s, clusterIs("projects/p/clusters/cj-101", loomv1.Cluster_RUNNING))
			feed(t, s, jobIs("projects/p/jobs/101", loomv1.JobState_RUNNING))
		}
		c := feed(t, s, tc.end)
		got := cjOf(t, s, cjName)
		dels, _ := emitted[*eventsv1.DeleteCluster](c)
		if got.GetState() != tc.want || !strings.Contains(got.GetError().GetMessage(), tc.msg) || (tc.msg == "") != (got.GetError() == nil) ||
			got.GetEndTime() == nil || len(dels) != 1 {
			t.Errorf("%v: %v (emitted %d deletes)", tc.end, got, len(dels))
		}
	}
}

// TestCapacityRefusalWaitsQueued: a cluster refused for capacity or quota
// leaves the CustomJob QUEUED (Vertex's "waiting for capacity"), asks
// again every CapacityRetry, runs once capacity comes, and fails with the
// provisioner's reason when its wait (max_wait_duration, else
// DefaultCapacityWait) is over; FLEX_START expires instead.
func TestCapacityRefusalWaitsQueued(t *testing.T) {
	t.Parallel()
	refused := &eventsv1.ClusterOperationFailed{Cluster: "projects/p/clusters/cj-101", Code: 9,
		Message: "zone us-central1-a has 0 free a3-highgpu-8g ON_DEMAND, 1 wanted"}

	s := NewState()
	feed(t, s, customJob(cjName, "alice", spec()))
	c := step(t, s, t0.Add(time.Second), Input{Payload: refused})
	if got := cjOf(t, s, cjName); got.GetState() != trainingv1.JobState_JOB_STATE_QUEUED || got.GetError() != nil {
		t.Fatalf("after a capacity refusal: %v", got)
	}
	if dels, _ := emitted[*eventsv1.DeleteCluster](c); len(dels) != 0 {
		t.Fatalf("a refused cluster is deleted: %v", c.Emits)
	}
	if cs := s.Tick(t0.Add(CapacityRetry)); len(cs) != 0 {
		t.Fatalf("asked again before CapacityRetry: %v", cs)
	}
	cs := s.Tick(t0.Add(time.Second + CapacityRetry))
	if len(cs) != 1 {
		t.Fatalf("tick at the retry: %d changes", len(cs))
	}
	s.Apply(cs[0])
	if creates, _ := emitted[*eventsv1.CreateCluster](cs[0]); len(creates) != 1 || creates[0].GetCluster().GetName() != "projects/p/clusters/cj-101" {
		t.Fatalf("the retry asked for %v", cs[0].Emits)
	}
	if cs := s.Tick(t0.Add(time.Second + 2*CapacityRetry)); len(cs) != 0 {
		t.Fatalf("asked again with no refusal in between: %v", cs)
	}
	c = step(t, s, t0.Add(time.Minute), Input{Payload: clusterIs("projects/p/clusters/cj-101", loomv1.Cluster_RUNNING)})
	if subs, _ := emitted[*eventsv1.SubmitJob](c); len(subs) != 1 {
		t.Fatalf("capacity came but nothing was submitted: %v", c.Emits)
	}

	// Refused until the default wait is over: FAILED, saying why.
	s = NewState()
	feed(t, s, customJob(cjName, "alice", spec()))
	step(t, s, t0.Add(DefaultCapacityWait-time.Second), Input{Payload: refused})
	cs = s.Tick(t0.Add(DefaultCapacityWait))
	if len(cs) != 1 {
		t.Fatalf("no change at the end of the wait")
	}
	s.Apply(cs[0])
	got := cjOf(t, s, cjName)
	if got.GetState() != trainingv1.JobState_JOB_STATE_FAILED || !strings.Contains(got.GetError().GetMessage(), "0 free a3-highgpu-8g") ||
		!strings.Contains(got.GetError().GetMessage(), "max_wait_duration") {
		t.Fatalf("after the wait: %v", got)
	}
	if creates, _ := emitted[*eventsv1.CreateCluster](cs[0]); len(creates) != 0 {
		t.Fatalf("asked again after the wait: %v", cs[0].Emits)
	}

	// FLEX_START with its own max_wait_duration: EXPIRED at a refusal past it.
	s = NewState()
	sp := spec()
	sp.Scheduling = &trainingv1.Scheduling{Strategy: trainingv1.Scheduling_FLEX_START, MaxWaitDuration: durationpb.New(10 * time.Minute)}
	feed(t, s, customJob(cjName, "alice", sp))
	step(t, s, t0.Add(11*time.Minute), Input{Payload: refused})
	if got := cjOf(t, s, cjName); got.GetState() != trainingv1.JobState_JOB_STATE_EXPIRED {
		t.Fatalf("FLEX_START refused past its wait: %v", got)
	}
}

// TestRenderedOutputKeepsThePercentOfItsDirectory: the replicas' output
// pattern is the base directory's path with the scheduler's %j after it;
// a % in the directory is the directory's (a field there, %x, would
// expand to the job's name, once per %x).
func TestRenderedOutputKeepsThePercentOfItsDirectory(t *testing.T) {
	t.Parallel()
	sp := spec()
	sp.BaseOutputDirectory.OutputUriPrefix = "file:///shared/100%x/"
	cj := customJob("projects/p/locations/l/customJobs/1", "ana", sp).GetCustomJob()
	n, err := ParseName(cj.GetName(), CustomJobs)
	if err != nil {
		t.Fatal(err)
	}
	job, err := RenderJob(n, cj, "projects/p/clusters/c", "", "")
	if err != nil {
		t.Fatal(err)
	}
	got := slurmspec.ExpandPattern(job.GetOutputPattern(), slurmspec.PatternFields{JobID: "7", Name: "cj"})
	if want := "/shared/100%x/output/job-7.out"; got != want {
		t.Fatalf("output pattern %q expands to %q, want %q", job.GetOutputPattern(), got, want)
	}
}

// TestCancelledBeforeSubmitNamesNoJob: a CustomJob cancelled while its
// cluster is provisioned never had a scheduler job, so it names none (the
// gateway's accepted record names one it would have, which must not
// survive as a dangling name); one submitted names its job.
func TestCancelledBeforeSubmitNamesNoJob(t *testing.T) {
	t.Parallel()
	s := NewState()
	in := customJob(cjName, "alice", spec())
	in.CustomJob.Job = "projects/p/jobs/101" // as an older gateway accepted it
	feed(t, s, in)
	if got := cjOf(t, s, cjName).GetJob(); got != "" {
		t.Fatalf("provisioning: job %q; want none until it is submitted", got)
	}
	step(t, s, t0, Input{Payload: &eventsv1.CancelTraining{Name: cjName}, Principal: "users/alice"})
	if got := cjOf(t, s, cjName); got.GetState() != trainingv1.JobState_JOB_STATE_CANCELLED || got.GetJob() != "" {
		t.Fatalf("cancelled before submit: state %v job %q; want CANCELLED, no job", got.GetState(), got.GetJob())
	}

	s2 := NewState()
	feed(t, s2, customJob(cjName, "alice", spec()))
	feed(t, s2, clusterIs("projects/p/clusters/cj-101", loomv1.Cluster_RUNNING))
	if got := cjOf(t, s2, cjName).GetJob(); got != "projects/p/jobs/101" {
		t.Fatalf("submitted: job %q; want projects/p/jobs/101", got)
	}
}

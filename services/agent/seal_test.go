package agent

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

const otherNode = cluster + "/nodes/gpu-0002"

// sealFor seals cmd with node's command key, as the scheduler does.
func sealFor(t *testing.T, node string, cmd *eventsv1.StartStep) *eventsv1.StartStep {
	t.Helper()
	s, err := envelope.SealCommand(auth.CommandKey(testkit.ServiceSecret(), node, ""), cmd)
	if err != nil {
		t.Fatal(err)
	}
	return s.(*eventsv1.StartStep)
}

// dlqReasons returns the dead letters of the step commands, by job, with
// their reason.
func dlqReasons(t *testing.T, broker string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, m := range testkit.Messages(t, broker, topics.StepCommands+topics.DLQSuffix) {
		ev, err := envelope.Default.Decode(m)
		if err != nil {
			continue
		}
		s, ok := ev.Payload.(*eventsv1.StartStep)
		if !ok {
			continue
		}
		for _, h := range m.Headers {
			if h.Key == bus.HeaderDLQReason {
				out[s.GetJobId()] = string(h.Value)
			}
		}
	}
	return out
}

// A StartStep (and a LaunchTasks) sealed for its node runs there with its
// secrets, while no record of the step commands' topic — which every
// agent's credentials can read, whatever partition it keeps to — holds the
// script or a secret in the clear, and another node's command key opens
// nothing of it. A sealed
// command that does not open with the node's key (tampered with, sealed
// for another node, moved into another attempt) is dead-lettered with the
// reason and never runs.
func TestSealedStartStepIsForItsNodeOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t)
	secret := "db-password-" + hex.EncodeToString(randBytes(t, 12))
	marker := func(job string) string { return filepath.Join(e.shared, "ran-"+job) }
	step := func(job string) *eventsv1.StartStep {
		return startStep(job, `printf %s "$DB_PASSWORD" > `+marker(job)+` # the-script-`+job,
			map[string]string{"DB_PASSWORD": secret}, filepath.Join(e.shared, job+".out"))
	}

	tampered := sealFor(t, node, step("81"))
	tampered.Sealed[len(tampered.Sealed)-1] ^= 1
	forOther := sealFor(t, otherNode, step("82")) // keyed and named for this node, sealed with the other's key
	moved := sealFor(t, node, step("83"))
	moved.Attempt = 2 // the blob of attempt 1, replayed as attempt 2
	tasksOut := filepath.Join(e.shared, ".loom", "steps", "85.0")
	tasks := launch("85", 0, 0, 1, tasksOut, "sh", "-c", `printf %s "$DB_PASSWORD" # the-script-85`)
	tasks.Env["DB_PASSWORD"] = secret
	sealedTasks, err := envelope.SealCommand(auth.CommandKey(testkit.ServiceSecret(), node, ""), tasks)
	if err != nil {
		t.Fatal(err)
	}
	publish(t, e.broker, command(tampered), command(forOther), command(moved), command(sealFor(t, node, step("80"))),
		command(sealedTasks.(*eventsv1.LaunchTasks)))

	exited := waitStep(t, e.broker, "80", eventsv1.StepState_STEP_EXITED)
	if exited.GetExitCode() != 0 {
		t.Fatalf("the sealed step exited %d", exited.GetExitCode())
	}
	if b, err := os.ReadFile(marker("80")); err != nil || string(b) != secret {
		t.Fatalf("the sealed step saw DB_PASSWORD %q (%v), want the job's secret", b, err)
	}

	waitTasks(t, e.broker, "85", 0, eventsv1.StepState_STEP_EXITED)
	if b, err := os.ReadFile(filepath.Join(tasksOut, "task-0.out")); err != nil || string(b) != secret {
		t.Fatalf("the sealed task printed %q (%v), want the job's secret", b, err)
	}

	var reasons map[string]string
	testkit.WaitFor(t, wait, "three dead letters", func() (bool, error) {
		reasons = dlqReasons(t, e.broker)
		return len(reasons) >= 3, nil
	})
	for _, job := range []string{"81", "82", "83"} {
		if reasons[job] != envelope.ReasonBadSeal {
			t.Errorf("StartStep %s: dead-letter reason %q, want %q", job, reasons[job], envelope.ReasonBadSeal)
		}
		if _, err := os.Stat(marker(job)); err == nil {
			t.Errorf("StartStep %s that does not open ran", job)
		}
		if evs := stepEvents(t, e.broker, job); len(evs) != 0 {
			t.Errorf("StartStep %s that does not open produced step events %v", job, evs)
		}
	}

	// What another node's agent can read: every record of the topic.
	records := testkit.Messages(t, e.broker, topics.StepCommands)
	starts := 0
	otherKey := auth.CommandKey(testkit.ServiceSecret(), otherNode, "")
	for _, m := range records {
		for _, plain := range []string{secret, "DB_PASSWORD", "the-script-"} {
			if bytes.Contains(m.Value, []byte(plain)) {
				t.Errorf("a step command record holds %q in the clear", plain)
			}
			for _, h := range m.Headers {
				if bytes.Contains(h.Value, []byte(plain)) {
					t.Errorf("a step command header %s holds %q", h.Key, plain)
				}
			}
		}
		ev, err := envelope.Default.Decode(m)
		if err != nil {
			t.Fatal(err)
		}
		if s, ok := ev.Payload.(*eventsv1.StartStep); ok && s.GetNode() == node {
			starts++
			if s.GetJobId() == "82" { // sealed with the other node's key
				continue
			}
			if _, err := envelope.OpenCommand(otherKey, s); envelope.ReasonOf(err) != envelope.ReasonBadSeal {
				t.Errorf("the other node's key on StartStep %s: %v, want %s", s.GetJobId(), err, envelope.ReasonBadSeal)
			}
		}
	}
	if starts != 4 {
		t.Fatalf("read %d StartSteps for %s on the topic, want 4", starts, node)
	}
}

// dlqReasonsOf returns the reason of each dead letter of topic, by the id
// of its record.
func dlqReasonsOf(t *testing.T, broker, topic string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, d := range testkit.DeadLetters(t, broker, topic) {
		out[d.ID] = d.Reason
	}
	return out
}

// An agent runs a step or node command only from the service that sends it
// (envelope.Senders): the scheduler's step commands, health's node
// commands. Another service's command — its signature holds, as the key is
// shared — is dead-lettered (wrong-sender), counted, and never run; so is a
// StartStep or LaunchTasks the scheduler did not seal (unsealed), which
// every node could read.
func TestCommandsOnlyFromTheirSender(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	addr := e.startSimulated(t)
	marker := func(job string) string { return filepath.Join(e.shared, "ran-"+job) }
	step := func(job string) *eventsv1.StartStep {
		return startStep(job, "touch "+marker(job), nil, filepath.Join(e.shared, job+".out"))
	}
	fromGateway := command(sealFor(t, node, step("70")))
	fromProvisioner := command(sealFor(t, node, step("71")))
	unsealed := command(step("72"))
	unsealedTasks := command(launch("75", 0, 0, 1, filepath.Join(e.shared, ".loom", "steps", "75.0"), "touch", marker("75")))
	stop := command(&eventsv1.StopStep{Job: "projects/p/jobs/73", Attempt: 1, Node: node, Reason: "forged"})
	check := nodeCommand(&eventsv1.RunHealthCheck{Node: node, Cluster: cluster, RunId: "run-70", ScanId: "scan-70", Check: "gpu_diag", Level: 1, Trigger: "scan"})
	fault := nodeCommand(&eventsv1.InjectNodeFault{Node: node, Cluster: cluster, Fault: &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_FALLEN_OFF_BUS, Gpu: 1}, User: "users/admin"})
	publishAs(t, e.broker, "gateway", fromGateway, stop, fault)
	publishAs(t, e.broker, "provisioner", fromProvisioner)
	publishAs(t, e.broker, "scheduler", unsealed, unsealedTasks, check)
	// The senders' own, after them: the agent has passed the others once
	// these are handled.
	publish(t, e.broker, command(step("74")), nodeCommand(&eventsv1.RunHealthCheck{Node: node, Cluster: cluster, RunId: "run-74",
		ScanId: "scan-74", Check: "gpu_diag", Level: 1, Trigger: "scan"}))
	waitStep(t, e.broker, "74", eventsv1.StepState_STEP_EXITED)
	testkit.WaitEvent(t, e.broker, topics.NodeTelemetry, wait, func(ev envelope.Event) bool {
		h, ok := ev.Payload.(*eventsv1.HealthCheckCompleted)
		return ok && h.GetResult().GetScanId() == "scan-74"
	})

	want := map[string]map[string]string{
		topics.StepCommands: {fromGateway.ID: envelope.ReasonWrongSender, fromProvisioner.ID: envelope.ReasonWrongSender,
			stop.ID: envelope.ReasonWrongSender, unsealed.ID: envelope.ReasonUnsealed, unsealedTasks.ID: envelope.ReasonUnsealed},
		topics.NodeCommands: {check.ID: envelope.ReasonWrongSender, fault.ID: envelope.ReasonWrongSender},
	}
	for topic, want := range want {
		var got map[string]string
		testkit.WaitFor(t, wait, topic+" dead letters", func() (bool, error) {
			got = dlqReasonsOf(t, e.broker, topic)
			return len(got) >= len(want), nil
		})
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: dead letters %v, want %v", topic, got, want)
		}
	}
	for _, job := range []string{"70", "71", "72", "75"} {
		if _, err := os.Stat(marker(job)); err == nil {
			t.Errorf("StartStep %s ran", job)
		}
		if evs := stepEvents(t, e.broker, job); len(evs) != 0 {
			t.Errorf("StartStep %s produced step events %v", job, evs)
		}
	}
	for _, ev := range testkit.Events(t, e.broker, topics.NodeTelemetry) {
		if h, ok := ev.Payload.(*eventsv1.HealthCheckCompleted); ok && h.GetResult().GetScanId() == "scan-70" {
			t.Errorf("the scheduler's RunHealthCheck ran: %v", h.GetResult())
		}
		if x, ok := ev.Payload.(*eventsv1.XidObserved); ok {
			t.Errorf("the gateway's InjectNodeFault was injected: %v", x)
		}
	}
	// Counted as the other refusals are.
	testkit.WaitFor(t, wait, "the refusals on /metrics", func() (bool, error) {
		m := metrics(addr)
		return strings.Contains(m, `loom_bus_rejected_total{`) &&
			regexp.MustCompile(`(?m)^loom_bus_rejected_total\{[^}]*reason="wrong-sender"[^}]*topic="`+regexp.QuoteMeta(topics.StepCommands)+`"[^}]*\} 3$`).MatchString(m) &&
			regexp.MustCompile(`(?m)^loom_bus_rejected_total\{[^}]*reason="wrong-sender"[^}]*topic="`+regexp.QuoteMeta(topics.NodeCommands)+`"[^}]*\} 2$`).MatchString(m) &&
			regexp.MustCompile(`(?m)^loom_bus_rejected_total\{[^}]*reason="unsealed"[^}]*\} 2$`).MatchString(m), nil
	})
}

// An agent without a command key (its identity has none) refuses a sealed
// command, saying why, and one in the clear too (the scheduler seals every
// one: unsealed).
func TestSealedStartStepWithoutCommandKeyIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	path := filepath.Join(e.work, IdentityFile)
	id, err := auth.LoadNodeIdentity(path)
	if err != nil {
		t.Fatal(err)
	}
	id.CommandKey = nil
	if err := auth.WriteNodeIdentity(path, id); err != nil {
		t.Fatal(err)
	}
	e.start(t)
	sealed := sealFor(t, node, startStep("90", "touch "+filepath.Join(e.shared, "ran-90"), nil, filepath.Join(e.shared, "90.out")))
	clear := startStep("91", "touch "+filepath.Join(e.shared, "ran-91"), nil, filepath.Join(e.shared, "91.out"))
	publish(t, e.broker, command(sealed))
	publishAs(t, e.broker, "scheduler", command(clear))
	var reasons map[string]string
	testkit.WaitFor(t, wait, "the dead letters", func() (bool, error) {
		reasons = dlqReasons(t, e.broker)
		return len(reasons) >= 2, nil
	})
	if want := map[string]string{"90": envelope.ReasonNoCommandKey, "91": envelope.ReasonUnsealed}; !reflect.DeepEqual(reasons, want) {
		t.Fatalf("dead letters %v, want %v", reasons, want)
	}
	for _, job := range []string{"90", "91"} {
		if _, err := os.Stat(filepath.Join(e.shared, "ran-"+job)); err == nil {
			t.Fatalf("StartStep %s ran without a key", job)
		}
	}
}

func randBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// The agent of a node that registered again (its machine reimaged, a new
// identity) runs the step commands sealed for its own registration, and
// none sealed for the node's earlier registration, which its command key
// does not open: such a start (sealed before the scheduler learnt the new
// registration, or for the image before) is reported LOST at once, so that
// the scheduler requeues its job rather than waiting on a start that never
// comes, and it is not run; it is marked registration_mismatch, so that the
// scheduler requeues the job as never launched. Tasks of a job step sealed
// so fail to launch, naming the registration (not "the step has no command":
// their command is in the blob the agent could not open), marked likewise.
func TestStartStepSealedForAnEarlierRegistrationIsLostNotRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	now := time.Now()
	before, after := auth.NewRegistration(now.Add(-time.Hour), "boot-1"), auth.NewRegistration(now, "boot-2")
	id, err := auth.IssueNodeIdentity(testkit.ServiceKey(), node, cluster, "gpu", after, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := auth.WriteNodeIdentity(filepath.Join(e.work, IdentityFile), id); err != nil {
		t.Fatal(err)
	}
	e.start(t)
	marker := func(job string) string { return filepath.Join(e.shared, "ran-"+job) }
	step := func(job, reg string) *eventsv1.StartStep {
		s := startStep(job, "touch "+marker(job), map[string]string{"DB_PASSWORD": "pw"}, filepath.Join(e.shared, job+".out"))
		s.Registration = reg
		return s
	}
	old, err := envelope.SealCommand(auth.CommandKey(testkit.ServiceSecret(), node, before), step("91", before))
	if err != nil {
		t.Fatal(err)
	}
	tasks := launch("94", 0, 0, 2, filepath.Join(e.shared, ".loom", "steps", "94.0"), "touch", marker("94"))
	tasks.Registration = before
	oldTasks, err := envelope.SealCommand(auth.CommandKey(testkit.ServiceSecret(), node, before), tasks)
	if err != nil {
		t.Fatal(err)
	}
	publish(t, e.broker, command(old.(*eventsv1.StartStep)), command(step("90", after)), command(oldTasks.(*eventsv1.LaunchTasks)))

	if st := waitStep(t, e.broker, "90", eventsv1.StepState_STEP_EXITED); st.GetExitCode() != 0 {
		t.Fatalf("the step sealed for this registration exited %d", st.GetExitCode())
	}
	if _, err := os.Stat(marker("90")); err != nil {
		t.Fatalf("the step sealed for this registration did not run: %v", err)
	}
	lost := waitStep(t, e.broker, "91", eventsv1.StepState_STEP_LOST)
	if !strings.Contains(lost.GetMessage(), "registered again") || !strings.Contains(lost.GetMessage(), before) {
		t.Fatalf("lost step's message %q, want it to name the registration it was sealed for", lost.GetMessage())
	}
	if !lost.GetRegistrationMismatch() {
		t.Fatal("the lost step is not marked registration_mismatch: the scheduler would count it as a node failure against the job")
	}
	if _, err := os.Stat(marker("91")); err == nil {
		t.Fatal("the step sealed for the earlier registration ran")
	}
	// A job step's tasks sealed so fail to launch, as srun's on a node
	// that refuses the launch: never run, marked so.
	failed := waitTasks(t, e.broker, "94", 0, eventsv1.StepState_STEP_FAILED_TO_START)
	if !failed.GetRegistrationMismatch() || !strings.Contains(failed.GetMessage(), before) ||
		!reflect.DeepEqual(failed.GetExitCodes(), []int32{1, 1}) {
		t.Fatalf("tasks sealed for the earlier registration reported mismatch %v, exit codes %v, message %q; want marked, 1 each, naming %s",
			failed.GetRegistrationMismatch(), failed.GetExitCodes(), failed.GetMessage(), before)
	}
	if _, err := os.Stat(marker("94")); err == nil {
		t.Fatal("the tasks sealed for the earlier registration ran")
	}
}

// An identity from before registrations, renewed since (it adopted a
// registration, auth.AdoptedRegistrationPrefix, and no AgentRegistered told
// the scheduler), still opens and runs what the scheduler seals for the
// node's no registration: a rolling upgrade does not lose every step of a
// node once its agent renews.
func TestAdoptedRegistrationRunsWhatIsSealedForNone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	now := time.Now()
	id, err := auth.IssueNodeIdentity(testkit.ServiceKey(), node, cluster, "gpu", auth.AdoptedRegistrationPrefix+"01ABC", now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := auth.WriteNodeIdentity(filepath.Join(e.work, IdentityFile), id); err != nil {
		t.Fatal(err)
	}
	e.start(t)
	marker := filepath.Join(e.shared, "ran-92")
	sealed, err := envelope.SealCommand(auth.CommandKey(testkit.ServiceSecret(), node, ""),
		startStep("92", "touch "+marker, map[string]string{"DB_PASSWORD": "pw"}, filepath.Join(e.shared, "92.out")))
	if err != nil {
		t.Fatal(err)
	}
	publish(t, e.broker, command(sealed.(*eventsv1.StartStep)))
	if st := waitStep(t, e.broker, "92", eventsv1.StepState_STEP_EXITED); st.GetExitCode() != 0 {
		t.Fatalf("the step exited %d: %s", st.GetExitCode(), st.GetMessage())
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the step did not run: %v", err)
	}
}

// An identity registered by a gateway of the release before registrations
// were timed names the bootstrap token's id as its registration once a
// gateway of this release renews it (its certificate then carries it), but
// no AgentRegistered named it to the scheduler, which seals for none: the
// agent runs what is sealed for none, as for an adopted registration, and
// does not report every step of its node lost until it restarts.
func TestEarlierReleasesRegistrationRunsWhatIsSealedForNone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	now := time.Now()
	id, err := auth.IssueNodeIdentity(testkit.ServiceKey(), node, cluster, "gpu", "q2Vx8F_rZ-3kLmN0pQ1sTw", now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := auth.WriteNodeIdentity(filepath.Join(e.work, IdentityFile), id); err != nil {
		t.Fatal(err)
	}
	e.start(t)
	marker := filepath.Join(e.shared, "ran-93")
	sealed, err := envelope.SealCommand(auth.CommandKey(testkit.ServiceSecret(), node, ""),
		startStep("93", "touch "+marker, nil, filepath.Join(e.shared, "93.out")))
	if err != nil {
		t.Fatal(err)
	}
	publish(t, e.broker, command(sealed.(*eventsv1.StartStep)))
	ev := testkit.WaitEvent(t, e.broker, topics.StepEvents, wait, func(ev envelope.Event) bool {
		sc, ok := ev.Payload.(*eventsv1.StepChanged)
		return ok && sc.Job == "projects/p/jobs/93" && (sc.State == eventsv1.StepState_STEP_EXITED || sc.State == eventsv1.StepState_STEP_LOST)
	})
	if st := ev.Payload.(*eventsv1.StepChanged); st.GetState() != eventsv1.StepState_STEP_EXITED || st.GetExitCode() != 0 {
		t.Fatalf("the step ended %v, exit %d: %s; want it run", st.GetState(), st.GetExitCode(), st.GetMessage())
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the step did not run: %v", err)
	}
}

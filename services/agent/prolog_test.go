package agent

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// startWithJobChecks runs an agent with 2 simulated GPUs and the given
// prolog and epilog checks, and waits until it registered.
func (e *env) startWithJobChecks(t *testing.T, prolog, epilog string, more ...func(*Config)) {
	t.Helper()
	cfg := e.config()
	cfg.GPUs, cfg.GPUMode = 2, GPUModeSimulated
	cfg.PrologChecks, cfg.EpilogChecks = prolog, epilog
	for _, f := range more {
		f(&cfg)
	}
	testkit.Start(t, "agent", func(ctx context.Context) error { return Run(ctx, cfg) })
	testkit.WaitEvent(t, e.broker, topics.NodeTelemetry, wait, func(ev envelope.Event) bool {
		r, ok := ev.Payload.(*eventsv1.AgentRegistered)
		return ok && r.GetSimulatedGpus()
	})
}

// waitJobCheck waits for the node's HealthCheckCompleted of check with
// trigger, and returns its result and when it was emitted.
func waitJobCheck(t *testing.T, e *env, trigger, check string) (*loomv1.HealthCheckResult, time.Time) {
	t.Helper()
	ev := testkit.WaitEvent(t, e.broker, topics.NodeTelemetry, wait, func(ev envelope.Event) bool {
		h, ok := ev.Payload.(*eventsv1.HealthCheckCompleted)
		return ok && h.GetResult().GetTrigger() == trigger && h.GetResult().GetCheck() == check
	})
	return ev.Payload.(*eventsv1.HealthCheckCompleted).GetResult(), ev.Time
}

// A prolog gpu_diag on a node whose GPU is broken keeps the step from
// starting: it is reported FAILED_TO_START with the prolog's message, the
// failed check reaches health as a CHECK_FAIL "prolog" result, and the
// job's program never ran.
func TestPrologCheckFailureRefusesStep(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		fault *loomv1.Fault
		xid   int32
	}{
		{"fallen off the bus", &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_FALLEN_OFF_BUS, Gpu: 1}, 79},
		{"double-bit ECC", &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_ECC_DBE, Gpu: 1, Value: 1}, 48},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.startWithJobChecks(t, "gpu_diag", "")
			inject(t, e, tc.fault)
			waitXid(t, e, 1, tc.xid) // the device has it

			ran := filepath.Join(e.shared, "ran")
			st := startStep("7", "touch "+ran, nil, filepath.Join(e.shared, "slurm-7.out"))
			publish(t, e.broker, command(st))
			f := waitStep(t, e.broker, "7", eventsv1.StepState_STEP_FAILED_TO_START)
			if !strings.HasPrefix(f.GetMessage(), "prolog check failed on gpu-0001: ") || !strings.Contains(f.GetMessage(), "gpu_diag") {
				t.Errorf("failed to start with %q, want the prolog's message", f.GetMessage())
			}
			r, _ := waitJobCheck(t, e, "prolog", "gpu_diag")
			if r.GetOutcome() != loomv1.CheckOutcome_CHECK_FAIL || r.GetGpu() != 1 || r.GetNode() != node ||
				r.GetHostname() != "gpu-0001" || r.GetLevel() != 1 ||
				!strings.HasPrefix(r.GetName(), cluster+"/healthResults/prolog-") ||
				!strings.Contains(f.GetMessage(), r.GetSummary()) {
				t.Errorf("prolog result %v (step message %q)", r, f.GetMessage())
			}
			for _, sc := range stepEvents(t, e.broker, "7") {
				if sc.GetState() == eventsv1.StepState_STEP_RUNNING {
					t.Errorf("the step was reported running: %v", sc)
				}
			}
			if _, err := os.Stat(ran); !os.IsNotExist(err) {
				t.Errorf("the job's program ran (%s: %v)", ran, err)
			}
		})
	}
}

// On a healthy node the prolog passes and the step runs; after it ends the
// epilog's results are reported (here a failure: the GPU fell off the bus
// while the step ran) and the step's end is what its program did.
func TestPrologPassesAndEpilogReports(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWithJobChecks(t, "gpu_diag,disk", "gpu_diag")
	gate := filepath.Join(e.shared, "go")
	st := startStep("8", "while [ ! -e "+gate+" ]; do sleep 0.05; done; exit 3", nil, filepath.Join(e.shared, "slurm-8.out"))
	publish(t, e.broker, command(st))
	waitStep(t, e.broker, "8", eventsv1.StepState_STEP_RUNNING)
	for _, check := range []string{"gpu_diag", "disk"} {
		if r, _ := waitJobCheck(t, e, "prolog", check); r.GetOutcome() != loomv1.CheckOutcome_CHECK_PASS {
			t.Errorf("prolog %s: %v", check, r)
		}
	}

	// The GPU fails while the step runs; the step then exits 3.
	inject(t, e, &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_FALLEN_OFF_BUS, Gpu: 0})
	waitXid(t, e, 0, 79)
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	end := waitStep(t, e.broker, "8", eventsv1.StepState_STEP_EXITED)
	if end.GetExitCode() != 3 {
		t.Errorf("step ended %v, want exit 3", end)
	}
	r, _ := waitJobCheck(t, e, "epilog", "gpu_diag")
	if r.GetOutcome() != loomv1.CheckOutcome_CHECK_FAIL || r.GetGpu() != 0 || r.GetLevel() != 1 ||
		!strings.HasPrefix(r.GetName(), cluster+"/healthResults/epilog-") {
		t.Errorf("epilog result %v", r)
	}
	// The epilog ran after the step ended, and changed nothing of it.
	var ended time.Time
	for _, ev := range testkit.Events(t, e.broker, topics.StepEvents) {
		if sc, ok := ev.Payload.(*eventsv1.StepChanged); ok && sc.GetJob() == st.GetJob() && sc.GetState() == eventsv1.StepState_STEP_EXITED {
			ended = ev.Time
		}
	}
	if r.GetStartTime().AsTime().Before(ended) {
		t.Errorf("the epilog started at %v, before the step's end was reported (%v)", r.GetStartTime().AsTime(), ended)
	}
	var states []eventsv1.StepState
	for _, sc := range stepEvents(t, e.broker, "8") {
		states = append(states, sc.GetState())
		if sc.GetState() != eventsv1.StepState_STEP_RUNNING && (sc.GetState() != eventsv1.StepState_STEP_EXITED || sc.GetExitCode() != 3) {
			t.Errorf("step event %v after the epilog", sc)
		}
	}
	if len(states) != 2 {
		t.Errorf("step events %v, want RUNNING then EXITED", states)
	}
}

// TestJobChecksConfig: the prolog and epilog flags are comma lists of check
// names (none by default), an all-reduce (run between nodes, by health) or
// a path is refused, and -prolog-timeout defaults to 30s.
func TestJobChecksConfig(t *testing.T) {
	t.Parallel()
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	var c Config
	c.RegisterFlags(fs)
	if err := fs.Parse([]string{"-node", node, "-prolog-checks", " gpu_diag, disk,", "-epilog-checks", "site_check"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.validate(); err != nil {
		t.Fatal(err)
	}
	if jc := c.jobChecks(); !reflect.DeepEqual(jc.Prolog, []string{"gpu_diag", "disk"}) || !reflect.DeepEqual(jc.Epilog, []string{"site_check"}) ||
		jc.Timeout != 30*time.Second || jc.EpilogTimeout != 30*time.Second {
		t.Errorf("job checks %+v", jc)
	}
	if jc := (&Config{}).jobChecks(); jc.Prolog != nil || jc.Epilog != nil {
		t.Errorf("job checks by default %+v, want none", jc)
	}
	for _, bad := range []Config{
		{Node: node, PrologChecks: "gpu_diag,allreduce"},
		{Node: node, EpilogChecks: "allreduce_pair"},
		{Node: node, PrologChecks: "../bin/sh"},
		{Node: node, PrologChecks: "disk", PrologTimeout: -time.Second},
		{Node: node, EpilogChecks: "disk", EpilogTimeout: -time.Second},
	} {
		if _, err := bad.validate(); err == nil || !strings.Contains(err.Error(), "_check") && !strings.Contains(err.Error(), "prolog_timeout") &&
			!strings.Contains(err.Error(), "epilog_timeout") {
			t.Errorf("validate(%q, %q, %s) = %v, want it refused naming the field", bad.PrologChecks, bad.EpilogChecks, bad.PrologTimeout, err)
		}
	}
}

// -epilog-timeout sets the epilog's own timeout; without it the epilog
// takes the prolog's (-prolog-timeout, or its variable).
func TestEpilogTimeoutConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args           []string
		prolog, epilog time.Duration
	}{
		{[]string{"-prolog-timeout", "5s"}, 5 * time.Second, 5 * time.Second},
		{[]string{"-prolog-timeout", "5s", "-epilog-timeout", "2m"}, 5 * time.Second, 2 * time.Minute},
		{[]string{"-epilog-timeout", "1s"}, 30 * time.Second, time.Second},
	} {
		fs := flag.NewFlagSet("agent", flag.ContinueOnError)
		var c Config
		c.RegisterFlags(fs)
		if err := fs.Parse(append([]string{"-node", node}, tc.args...)); err != nil {
			t.Fatal(err)
		}
		if _, err := c.validate(); err != nil {
			t.Fatal(err)
		}
		if jc := c.jobChecks(); jc.Timeout != tc.prolog || jc.EpilogTimeout != tc.epilog {
			t.Errorf("%q: prolog timeout %s, epilog timeout %s; want %s, %s", tc.args, jc.Timeout, jc.EpilogTimeout, tc.prolog, tc.epilog)
		}
	}
}

// An epilog check that hangs is killed at -epilog-timeout, not at the
// (much longer) -prolog-timeout: its CHECK_ERROR comes within seconds.
func TestEpilogHasItsOwnTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hangs"), []byte("#!/bin/sh\nexec sleep 120\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	e.startWithJobChecks(t, "", "hangs", func(c *Config) { c.CheckDir, c.PrologTimeout, c.EpilogTimeout = dir, 10*time.Minute, time.Second })
	publish(t, e.broker, command(startStep("11", "exit 0", nil, filepath.Join(e.shared, "slurm-11.out"))))
	waitStep(t, e.broker, "11", eventsv1.StepState_STEP_EXITED)
	r, _ := waitJobCheck(t, e, "epilog", "hangs")
	if r.GetOutcome() != loomv1.CheckOutcome_CHECK_ERROR || !strings.Contains(r.GetSummary(), "killed at its timeout") {
		t.Errorf("epilog result %v, want CHECK_ERROR killed at its timeout", r)
	}
	if took := r.GetEndTime().AsTime().Sub(r.GetStartTime().AsTime()); took > 20*time.Second {
		t.Errorf("the epilog ran %s, want about -epilog-timeout (1s)", took)
	}
}

// A prolog check that cannot give a verdict (it errs, or hangs past
// -prolog-timeout and is killed) does not keep the job off the node: the
// step runs, and health hears of the CHECK_ERROR results.
func TestPrologCheckErrorDoesNotBlock(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dir := t.TempDir()
	for name, body := range map[string]string{"broken": "echo oops >&2; exit 2", "hangs": "exec sleep 60"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e.startWithJobChecks(t, "broken,hangs", "", func(c *Config) { c.CheckDir, c.PrologTimeout = dir, time.Second })
	publish(t, e.broker, command(startStep("9", "exit 0", nil, filepath.Join(e.shared, "slurm-9.out"))))
	if end := waitStep(t, e.broker, "9", eventsv1.StepState_STEP_EXITED); end.GetExitCode() != 0 {
		t.Errorf("step ended %v, want exit 0", end)
	}
	for _, check := range []string{"broken", "hangs"} {
		if r, _ := waitJobCheck(t, e, "prolog", check); r.GetOutcome() != loomv1.CheckOutcome_CHECK_ERROR {
			t.Errorf("prolog %s: %v, want CHECK_ERROR", check, r)
		}
	}
}

// A stop that comes while the prolog runs wins at once: the step is
// reported KILLED without waiting for the checks, and never starts.
func TestStopDuringProlog(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dir := t.TempDir()
	started, gate := filepath.Join(dir, "started"), filepath.Join(dir, "gate")
	script := "#!/bin/sh\ntouch " + started + "\nwhile [ ! -e " + gate + " ]; do sleep 0.05; done\n"
	if err := os.WriteFile(filepath.Join(dir, "slow"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	e.startWithJobChecks(t, "slow", "", func(c *Config) { c.CheckDir = dir })
	ran := filepath.Join(e.shared, "ran")
	publish(t, e.broker, command(startStep("10", "touch "+ran, nil, filepath.Join(e.shared, "slurm-10.out"))))
	testkit.WaitFor(t, wait, "the prolog check running", func() (bool, error) {
		_, err := os.Stat(started)
		return err == nil, nil
	})
	publish(t, e.broker, command(&eventsv1.StopStep{Job: "projects/p/jobs/10", Attempt: 1, Node: node, Reason: "job cancelled"}))
	waitStep(t, e.broker, "10", eventsv1.StepState_STEP_KILLED)
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if r, _ := waitJobCheck(t, e, "prolog", "slow"); r.GetOutcome() != loomv1.CheckOutcome_CHECK_PASS {
		t.Errorf("prolog result %v", r)
	}
	// The launch has given up by now (the result is emitted before it
	// looks at the step again); nothing of the step ran.
	for _, sc := range stepEvents(t, e.broker, "10") {
		if sc.GetState() != eventsv1.StepState_STEP_KILLED {
			t.Errorf("step event %v, want only KILLED", sc)
		}
	}
	if _, err := os.Stat(ran); !os.IsNotExist(err) {
		t.Errorf("the job's program ran (%s: %v)", ran, err)
	}
}

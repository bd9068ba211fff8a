package agent

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/tbevents"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	"github.com/loom-ml/loom/services/agent/internal/app"
)

// readEnv reads an `env` dump into a map.
func readEnv(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			out[k] = v
		}
	}
	return out
}

// TestReplicaEnvironment: a CustomJob's step (its env has
// LOOM_WORKER_POOLS) gets its replica's CLUSTER_SPEC, TF_CONFIG and
// torchrun variables from its node's place in the job, and its metrics
// file; one whose pools do not match its nodes fails to start saying why.
func TestReplicaEnvironment(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t)
	st := startStep("1", "", map[string]string{"LOOM_WORKER_POOLS": `[{"replicaCount":1},{"replicaCount":2}]`,
		"RANK": "99", "CLOUD_ML_TRIAL_ID": "4"}, filepath.Join(e.shared, "slurm-1.out"))
	st.Command = []string{"sh", "-c", `env > "$HOME/env-1.txt"`}
	st.NodeIndex, st.NodeHostnames = 2, []string{"cj-1-p0-0001", "cj-1-p1-0001", "cj-1-p1-0002"}
	bad := startStep("2", "", map[string]string{"LOOM_WORKER_POOLS": `[{"replicaCount":1},{"replicaCount":2}]`},
		filepath.Join(e.shared, "slurm-2.out"))
	bad.Command = []string{"sh", "-c", `touch "$HOME/ran-2"`}
	// A step of another job gets none of it, and keeps its own metrics file.
	plain := startStep("3", `env > "$HOME/env-3.txt"`, map[string]string{"CLOUD_ML_HP_METRIC_FILE": "/tmp/mine"}, filepath.Join(e.shared, "slurm-3.out"))
	publish(t, e.broker, command(st), command(bad), command(plain))
	if ev := waitStep(t, e.broker, "1", eventsv1.StepState_STEP_EXITED); ev.ExitCode != 0 {
		t.Fatalf("step 1 = %v", ev)
	}
	env := readEnv(t, filepath.Join(e.shared, "env-1.txt"))
	want := `{"cluster":{"workerpool0":["cj-1-p0-0001:29501"],"workerpool1":["cj-1-p1-0001:29501","cj-1-p1-0002:29501"]},` +
		`"environment":"cloud","task":{"type":"workerpool1","index":1,"trial":"4"}}`
	if env["CLUSTER_SPEC"] != want {
		t.Errorf("CLUSTER_SPEC = %s\nwant %s", env["CLUSTER_SPEC"], want)
	}
	var tf struct {
		Task struct {
			Type  string
			Index int
		}
	}
	if err := json.Unmarshal([]byte(env["TF_CONFIG"]), &tf); err != nil || tf.Task.Type != "worker" || tf.Task.Index != 1 {
		t.Errorf("TF_CONFIG = %s (%v)", env["TF_CONFIG"], err)
	}
	for k, v := range map[string]string{"MASTER_ADDR": "cj-1-p0-0001", "MASTER_PORT": "29501", "WORLD_SIZE": "3",
		"RANK": "2", "NODE_RANK": "2", "LOCAL_RANK": "0"} {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
	if mf := env["CLOUD_ML_HP_METRIC_FILE"]; !strings.HasPrefix(mf, filepath.Join(e.shared, ".loom", "progress", "gpu-0001")+"/") {
		t.Errorf("CLOUD_ML_HP_METRIC_FILE = %q, want a file in the run's directory", mf)
	}
	f := waitStep(t, e.broker, "2", eventsv1.StepState_STEP_FAILED_TO_START)
	if !strings.Contains(f.Message, "replica environment: the job has 1 nodes but LOOM_WORKER_POOLS counts 3 replicas") {
		t.Errorf("step 2 failed with %q", f.Message)
	}
	if _, err := os.Stat(filepath.Join(e.shared, "ran-2")); !os.IsNotExist(err) {
		t.Errorf("step 2 ran: %v", err)
	}
	waitStep(t, e.broker, "3", eventsv1.StepState_STEP_EXITED)
	env = readEnv(t, filepath.Join(e.shared, "env-3.txt"))
	if env["CLUSTER_SPEC"] != "" || env["CLOUD_ML_HP_METRIC_FILE"] != "/tmp/mine" {
		t.Errorf("a plain step's env: CLUSTER_SPEC %q, CLOUD_ML_HP_METRIC_FILE %q", env["CLUSTER_SPEC"], env["CLOUD_ML_HP_METRIC_FILE"])
	}
}

// fakePod is a container engine that proves what it was given: it writes
// its argv and environment to fakepod.argv and fakepod.env in its working
// directory, then runs the command after the image as `podman run` would,
// in the same environment (no engine runs here).
const fakePod = `#!/bin/sh
# The env first, each file renamed into place whole: the test reads both
# once the argv file appears.
env > "$PWD/fakepod.env.tmp" && mv "$PWD/fakepod.env.tmp" "$PWD/fakepod.env"
printf '%s\n' "$0" "$@" > "$PWD/fakepod.argv.tmp" && mv "$PWD/fakepod.argv.tmp" "$PWD/fakepod.argv"
[ "$1" = run ] || exit 90
shift
while [ $# -gt 0 ]; do
	case "$1" in
	--rm) shift ;;
	-v|-w) shift 2 ;;
	*) break ;;
	esac
done
shift # the image
exec "$@"
`

// TestContainerRuntime: with a site's template (-container-runtime), a
// step whose env names LOOM_CONTAINER_IMAGE runs through it — the engine
// gets the template with the image and working directory, the step's argv
// and its whole environment — under the step's shim, so that it outlives
// a kill -9 of the agent, is adopted by the next one and reported with its
// real exit code. An image that would read as an option is refused; a step
// without an image runs as a process.
func TestContainerRuntime(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	bin := t.TempDir()
	pod := filepath.Join(bin, "fakepod")
	testkit.WriteExecutable(t, pod, []byte(fakePod), 0o755)
	e.containerRuntime = pod + " run --rm -v {workdir}:{workdir} -w {workdir} {image}"
	first := e.agentProcess(t)
	work := filepath.Join(e.shared, "w1")
	const image = "registry.example/train:1"
	step := func(job, image string) *eventsv1.StartStep {
		st := startStep(job, "", map[string]string{"LOOM_CONTAINER_IMAGE": image, "LOOM_WORKER_POOLS": `[{"replicaCount":1}]`},
			filepath.Join(e.shared, "slurm-"+job+".out"))
		st.Command = []string{"sh", "-c", until("go"+job, "5")}
		st.WorkDir = filepath.Join(e.shared, "w"+job)
		return st
	}
	// Step 1 reports a metric before it waits and one after: each is
	// sent once, across the agent's restart.
	one := step("1", image)
	report := func(n int) string {
		return `printf '{"val_loss": 0.` + strconv.Itoa(n) + `, "global_step": ` + strconv.Itoa(n) + `}\n' >> "$CLOUD_ML_HP_METRIC_FILE"; `
	}
	one.Command = []string{"sh", "-c", report(1) + `while [ ! -e "$HOME/go1" ]; do sleep 0.05; done; ` + report(2) + "exit 5"}
	publish(t, e.broker, command(one), command(step("2", "--privileged")), command(step("3", "")))
	running := waitStep(t, e.broker, "1", eventsv1.StepState_STEP_RUNNING)
	f := waitStep(t, e.broker, "2", eventsv1.StepState_STEP_FAILED_TO_START)
	if !strings.Contains(f.Message, `container runtime: LOOM_CONTAINER_IMAGE "--privileged" starts with '-'`) {
		t.Errorf("step 2 failed with %q", f.Message)
	}
	waitStep(t, e.broker, "3", eventsv1.StepState_STEP_RUNNING)
	var argv []string
	testkit.WaitFor(t, wait, "the engine to record its argv", func() (bool, error) {
		b, err := os.ReadFile(filepath.Join(work, "fakepod.argv"))
		argv = strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
		return err == nil && len(argv) > 1, nil
	})
	want := append([]string{pod, "run", "--rm", "-v", work + ":" + work, "-w", work, image}, one.Command...)
	if !slices.Equal(argv, want) {
		t.Errorf("the engine's argv = %q\nwant %q", argv, want)
	}
	env := readEnv(t, filepath.Join(work, "fakepod.env"))
	if env["LOOM_CONTAINER_IMAGE"] != image || env["LOOM_STEP_ID"] != node+"#projects/p/jobs/1#1" ||
		!strings.Contains(env["CLUSTER_SPEC"], `"workerpool0":["gpu-0001:29501"]`) || env["CLOUD_ML_HP_METRIC_FILE"] == "" {
		t.Errorf("the engine's env lacks the step's: %v", env)
	}
	if _, err := os.Stat(filepath.Join(e.shared, "w3", "fakepod.argv")); !os.IsNotExist(err) {
		t.Errorf("a step without an image went through the engine: %v", err)
	}

	metricSteps := func() (steps []int64) {
		for _, ev := range testkit.Delivered(t, e.broker, topics.StepEvents) {
			if m, ok := ev.Payload.(*eventsv1.MetricsReported); ok && m.Job == "projects/p/jobs/1" {
				for _, p := range m.Points {
					steps = append(steps, p.Step)
				}
			}
		}
		return steps
	}
	testkit.WaitFor(t, wait, "step 1's first metric", func() (bool, error) { return len(metricSteps()) > 0, nil })

	// The step outlives its agent and is adopted by the next.
	killAgent(t, first)
	e.agentProcess(t)
	reg := testkit.WaitEvent(t, e.broker, topics.NodeTelemetry, wait, func(ev envelope.Event) bool {
		r, ok := ev.Payload.(*eventsv1.AgentRegistered)
		return ok && r.AdoptedSteps == 2
	}).Payload.(*eventsv1.AgentRegistered)
	if reg.Node != node {
		t.Fatalf("AgentRegistered = %v", reg)
	}
	e.touch(t, "go1")
	e.touch(t, "go3")
	if ev := waitStep(t, e.broker, "1", eventsv1.StepState_STEP_EXITED); ev.ExitCode != 5 || ev.Pid != running.Pid {
		t.Fatalf("step 1 ended %v, want EXITED 5 from pid %d", ev, running.Pid)
	}
	if ev := waitStep(t, e.broker, "3", eventsv1.StepState_STEP_EXITED); ev.ExitCode != 5 {
		t.Fatalf("step 3 ended %v", ev)
	}
	if got := metricSteps(); !slices.Equal(got, []int64{1, 2}) {
		t.Fatalf("step 1's metrics at steps %v, want 1 (before the restart) and 2 (after), once each", got)
	}
}

// TestMetricsReported: a step that writes hypertune lines to
// CLOUD_ML_HP_METRIC_FILE has them reported as MetricsReported points in
// order, each line once: a partial line waits for its end, a line that is
// not JSON and one too long are dropped without harming the step or the
// lines around them, records hold at most -metrics-batch points, and the
// last line — written just before the step exits, without its newline — is
// reported before the step's end.
func TestMetricsReported(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.metrics = app.MetricsOptions{Interval: 50 * time.Millisecond, Batch: 2, Rate: 50}
	e.start(t)
	script := `f="$CLOUD_ML_HP_METRIC_FILE"
printf '{"timestamp": 1764600000.5, "trial": "3", "val_loss": "0.9", "accuracy": 0.5, "global_step": "1", "checkpoint_path": ""}\n' >> "$f"
printf '{"timestamp": 1764600001, "trial": "3", "val_loss": 0.7, "global_step": "2"}\n{"val_loss": 0.6, "glo' >> "$f"
` + `while [ ! -e "$HOME/go" ]; do sleep 0.05; done
printf 'bal_step": "3"}\nnot json {\n' >> "$f"
head -c 5000 /dev/zero | tr '\0' x >> "$f"; printf '\n' >> "$f"
printf '{"val_loss": 0.5, "global_step": 4}' >> "$f"`
	st := startStep("1", "", nil, filepath.Join(e.shared, "slurm-1.out"))
	st.Command = []string{"sh", "-c", script}
	publish(t, e.broker, command(st))
	points := func() (steps []int64, evs []*eventsv1.MetricsReported) {
		for _, ev := range testkit.Events(t, e.broker, topics.StepEvents) {
			if m, ok := ev.Payload.(*eventsv1.MetricsReported); ok && m.Job == "projects/p/jobs/1" {
				evs = append(evs, m)
				for _, p := range m.Points {
					steps = append(steps, p.Step)
				}
			}
		}
		return steps, evs
	}
	testkit.WaitFor(t, wait, "the first two points", func() (bool, error) {
		steps, _ := points()
		return len(steps) >= 2, nil
	})
	if steps, _ := points(); !slices.Equal(steps, []int64{1, 2}) {
		t.Fatalf("points at steps %v before the third line ended, want 1, 2", steps)
	}
	e.touch(t, "go")
	if ev := waitStep(t, e.broker, "1", eventsv1.StepState_STEP_EXITED); ev.ExitCode != 0 {
		t.Fatalf("step = %v", ev)
	}
	steps, evs := points()
	if !slices.Equal(steps, []int64{1, 2, 3, 4}) {
		t.Fatalf("points at steps %v, want 1, 2, 3, 4", steps)
	}
	first := evs[0].Points[0]
	if evs[0].Node != node || evs[0].Cluster != cluster || evs[0].Attempt != 1 ||
		first.Time.AsTime() != time.Unix(1764600000, 5e8).UTC() || first.Values["val_loss"] != 0.9 ||
		first.Values["accuracy"] != 0.5 || len(first.Values) != 2 {
		t.Errorf("first record %v", evs[0])
	}
	for _, m := range evs {
		if len(m.Points) > 2 {
			t.Errorf("a record of %d points, more than the batch of 2", len(m.Points))
		}
	}
	// The last point comes before the step's end.
	var order []string
	for _, ev := range testkit.Events(t, e.broker, topics.StepEvents) {
		switch m := ev.Payload.(type) {
		case *eventsv1.MetricsReported:
			if m.Job == "projects/p/jobs/1" && slices.ContainsFunc(m.Points, func(p *eventsv1.MetricsReported_Point) bool { return p.Step == 4 }) {
				order = append(order, "last point")
			}
		case *eventsv1.StepChanged:
			if m.Job == "projects/p/jobs/1" && m.State == eventsv1.StepState_STEP_EXITED {
				order = append(order, "exited")
			}
		}
	}
	if !slices.Equal(order, []string{"last point", "exited"}) {
		t.Errorf("events %v, want the last point before the exit", order)
	}
}

// TestTensorBoardOnlyThisRunsFiles: two tuning jobs with the same base
// output directory give trial k of both the same AIP_TENSORBOARD_LOG_DIR.
// The event files the first left there are not the second's measurements:
// a step reads only what was written after it started (files new since,
// and what is appended to a file that was there), so a requeued attempt
// still goes on with its own files, and no clock is compared.
func TestTensorBoardOnlyThisRunsFiles(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.metrics = app.MetricsOptions{Interval: 50 * time.Millisecond, Batch: 8, Rate: 50}
	e.start(t)
	logs, stage := t.TempDir(), t.TempDir()
	val := filepath.Join(logs, "validation")
	if err := os.MkdirAll(val, 0o700); err != nil {
		t.Fatal(err)
	}
	scalars := func(dir, host string, at int64, vals ...float64) string {
		w, err := tbevents.Create(dir, host, time.Unix(at, 0))
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range vals {
			_ = w.AddScalar("loss", int64(i+1), time.Unix(at+int64(i), 0), v)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		return filepath.Join(dir, tbevents.FileName(time.Unix(at, 0), host))
	}
	// The first study's trial, long ended, and the file this run writes
	// (copied in by the step), and a record it appends to the old file.
	old := scalars(val, "old", 1600000000, 100, 101, 102)
	scalars(stage, "new", 1700000000, 1, 2)
	var b bytesBuf
	w, err := tbevents.NewWriter(&b, time.Unix(1700000000, 0))
	if err != nil {
		t.Fatal(err)
	}
	_ = w.Flush()
	b.data = nil // just the scalar's record
	_ = w.AddScalar("loss", 4, time.Unix(1700000003, 0), 3)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stage, "append.bin"), b.data, 0o600); err != nil {
		t.Fatal(err)
	}
	script := `cp "` + stage + `"/events.out.tfevents.* "` + val + `/" && cat "` + stage + `/append.bin" >> "` + old + `"`
	st := startStep("1", "", map[string]string{app.EnvAIPTensorBoardDir: "file://" + logs}, filepath.Join(e.shared, "slurm-1.out"))
	st.Command = []string{"sh", "-c", script}
	publish(t, e.broker, command(st))
	if ev := waitStep(t, e.broker, "1", eventsv1.StepState_STEP_EXITED); ev.ExitCode != 0 {
		out, _ := os.ReadFile(filepath.Join(e.shared, "slurm-1.out"))
		t.Fatalf("step = %v: %s", ev, out)
	}
	var got []float64
	for _, ev := range testkit.Events(t, e.broker, topics.StepEvents) {
		if m, ok := ev.Payload.(*eventsv1.MetricsReported); ok && m.Job == "projects/p/jobs/1" {
			for _, p := range m.Points {
				if v, ok := p.Values["validation/loss"]; ok {
					got = append(got, v)
				}
			}
		}
	}
	slices.Sort(got)
	if want := []float64{1, 2, 3}; !slices.Equal(got, want) {
		t.Fatalf("validation/loss values %v, want %v: only this run's records", got, want)
	}
}

type bytesBuf struct{ data []byte }

func (w *bytesBuf) Write(p []byte) (int, error) { w.data = append(w.data, p...); return len(p), nil }

// TestTensorBoardAcrossAnAgentRestart: an agent killed after a step
// started but before the step's first metrics were sent leaves its
// successor the step's TensorBoard directory and its start marks: the
// scalars the step writes after the restart are reported, and the old
// files that were there before it started still are not.
func TestTensorBoardAcrossAnAgentRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first := e.agentProcess(t)
	logs, stage := t.TempDir(), t.TempDir()
	val := filepath.Join(logs, "validation")
	if err := os.MkdirAll(val, 0o700); err != nil {
		t.Fatal(err)
	}
	scalars := func(dir, host string, at int64, vals ...float64) {
		w, err := tbevents.Create(dir, host, time.Unix(at, 0))
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range vals {
			_ = w.AddScalar("loss", int64(i+1), time.Unix(at+int64(i), 0), v)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	scalars(val, "old", 1600000000, 100, 101, 102) // another study's, there before the step
	scalars(stage, "new", 1700000000, 1, 2)
	st := startStep("1", "", map[string]string{app.EnvAIPTensorBoardDir: "file://" + logs}, filepath.Join(e.shared, "slurm-1.out"))
	st.Command = []string{"sh", "-c", `while [ ! -e "$HOME/go1" ]; do sleep 0.05; done; cp "` + stage + `"/events.out.tfevents.* "` + val + `/"`}
	publish(t, e.broker, command(st))
	waitStep(t, e.broker, "1", eventsv1.StepState_STEP_RUNNING)

	killAgent(t, first)
	e.agentProcess(t)
	testkit.WaitEvent(t, e.broker, topics.NodeTelemetry, wait, func(ev envelope.Event) bool {
		r, ok := ev.Payload.(*eventsv1.AgentRegistered)
		return ok && r.AdoptedSteps == 1
	})
	e.touch(t, "go1")
	if ev := waitStep(t, e.broker, "1", eventsv1.StepState_STEP_EXITED); ev.ExitCode != 0 {
		out, _ := os.ReadFile(filepath.Join(e.shared, "slurm-1.out"))
		t.Fatalf("step = %v: %s", ev, out)
	}
	var got []float64
	for _, ev := range testkit.Events(t, e.broker, topics.StepEvents) {
		if m, ok := ev.Payload.(*eventsv1.MetricsReported); ok && m.Job == "projects/p/jobs/1" {
			for _, p := range m.Points {
				if v, ok := p.Values["validation/loss"]; ok {
					got = append(got, v)
				}
			}
		}
	}
	slices.Sort(got)
	if want := []float64{1, 2}; !slices.Equal(got, want) {
		t.Fatalf("validation/loss values %v, want %v: the step's own, written after the agent's restart", got, want)
	}
}

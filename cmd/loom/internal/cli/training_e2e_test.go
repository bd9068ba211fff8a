package cli

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/loom-ml/loom/cmd/loom/internal/slurmcli"
	"github.com/loom-ml/loom/cmd/loom/stack"
	"github.com/loom-ml/loom/libs/recipes"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/testkit/need"
	"github.com/loom-ml/loom/libs/toytrain"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// trainingStack is the embedded stack with the CLI and REST pointed at it:
// every service real (training included), each node an agent process, and
// `loom` on the jobs' PATH this test binary, so that `loom train` is the
// built-in trainer.
type trainingStack struct {
	st  *stack.Stack
	key string
	ctx context.Context
	t   *testing.T
}

func startTrainingStack(t *testing.T, within time.Duration) *trainingStack {
	t.Helper()
	bin := t.TempDir()
	if err := slurmcli.LinkCommands(bin, os.Args[0]); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), within)
	t.Cleanup(cancel)
	st, err := stack.Start(ctx, stack.Options{
		DataDir:      t.TempDir(),
		AgentCommand: []string{os.Args[0]},
		AgentEnv:     []string{"LOOM_TEST_RUN_AGENT=1", "LOOM_SLURM_BIN=" + bin},
		LogLevel:     "error",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
		defer ccancel()
		_ = st.Close(cctx)
	})
	key, _ := st.AdminKey()
	return &trainingStack{st: st, key: key, ctx: ctx, t: t}
}

// loom runs the CLI against the stack: stdout, stderr, exit code.
func (s *trainingStack) loom(args ...string) (string, string, int) {
	s.t.Helper()
	a := newApp()
	a.pollInterval = 100 * time.Millisecond
	a.configDir = s.t.TempDir()
	a.fixedCred = s.key
	var out, errb bytes.Buffer
	code := a.execute(s.ctx, append([]string{"--gateway", s.st.GatewayAddr}, args...), &out, &errb)
	return out.String(), errb.String(), code
}

// must runs the CLI and fails the test unless it exits 0.
func (s *trainingStack) must(args ...string) string {
	s.t.Helper()
	out, errOut, code := s.loom(args...)
	if code != 0 {
		s.t.Fatalf("loom %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// rest sends a REST request with the administrator's key and returns the
// status and body.
func (s *trainingStack) rest(method, path, body string) (int, []byte) {
	s.t.Helper()
	req, err := http.NewRequestWithContext(s.ctx, method, "http://"+s.st.RESTAddr+path, strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestCustomJobFromVertexJSONRunsThroughRESTAndCLI is issue 15's first
// "done when": a CustomJob written as Vertex's REST documentation writes it
// (camelCase) runs on its own ephemeral cluster and succeeds, through the
// REST API and through `loom jobs custom create -f`; the model lands in
// AIP_MODEL_DIR under base_output_directory, and the cluster is deleted.
func TestCustomJobFromVertexJSONRunsThroughRESTAndCLI(t *testing.T) {
	t.Parallel()
	s := startTrainingStack(t, 4*time.Minute)
	out := t.TempDir()
	// As in Vertex's "Create a custom training job" REST example.
	body := fmt.Sprintf(`{
  "displayName": "rest-custom-job",
  "jobSpec": {
    "workerPoolSpecs": [{
      "machineSpec": {"machineType": "n2-standard-8"},
      "replicaCount": 1,
      "containerSpec": {
        "imageUri": "us-docker.pkg.dev/vertex-ai/training/pytorch-cpu.2-1:latest",
        "command": ["loom", "train"],
        "args": ["--epochs=8", "--learning_rate=0.3", "--batch_size=32"],
        "env": [{"name": "GREETING", "value": "hello"}]
      }
    }],
    "baseOutputDirectory": {"outputUriPrefix": "file://%s"}
  }
}`, out)
	code, b := s.rest("POST", "/v1/projects/default/locations/us-central1/customJobs", body)
	if code != http.StatusOK {
		t.Fatalf("POST customJobs: %d %s", code, b)
	}
	var created map[string]any
	if err := json.Unmarshal(b, &created); err != nil {
		t.Fatal(err)
	}
	name, _ := created["name"].(string)
	if _, camel := created["jobSpec"]; !camel || created["state"] != "JOB_STATE_QUEUED" || name == "" {
		t.Fatalf("create answered (want camelCase, JOB_STATE_QUEUED): %s", b)
	}
	var got map[string]any
	testkit.WaitFor(t, 2*time.Minute, name+" succeeds", func() (bool, error) {
		code, b := s.rest("GET", "/v1/"+name, "")
		if code != http.StatusOK {
			return false, fmt.Errorf("GET %s: %d %s", name, code, b)
		}
		got = nil
		if err := json.Unmarshal(b, &got); err != nil {
			return false, err
		}
		switch got["state"] {
		case "JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_EXPIRED":
			return false, fmt.Errorf("%s ended %v: %s", name, got["state"], b)
		}
		return got["state"] == "JOB_STATE_SUCCEEDED", nil
	})
	for _, k := range []string{"createTime", "startTime", "endTime", "jobSpec"} {
		if _, ok := got[k]; !ok {
			t.Errorf("GET answer lacks camelCase %q: %v", k, got)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "model", "MANIFEST")); err != nil {
		t.Errorf("no model in AIP_MODEL_DIR (<base>/model): %v", err)
	}
	// Its ephemeral cluster is gone once it ended; its output is not (it
	// is kept beside the model).
	id := name[strings.LastIndexByte(name, '/')+1:]
	testkit.WaitFor(t, time.Minute, "cluster cj-"+id+" deleted", func() (bool, error) {
		_, _, code := s.loom("clusters", "get", "cj-"+id)
		return code != 0, nil
	})
	if logs := s.must("jobs", "logs", id); !strings.Contains(logs, "epoch 8 ") || !strings.Contains(logs, "model written to") {
		t.Errorf("loom jobs logs %s after its cluster was deleted:\n%s", id, logs)
	}

	// The same through the CLI, from the example file with its output
	// directory moved under the test's.
	ex, err := os.ReadFile("../../../../examples/training/custom_job.json")
	if err != nil {
		t.Fatal(err)
	}
	cliOut := t.TempDir()
	file := writeFile(t, "custom_job.json", strings.Replace(string(ex), "file:///tmp/loom-training/toy-train", "file://"+cliOut, 1))
	res := s.must("jobs", "custom", "create", "-f", file, "--wait", "-o", "json")
	var j trainingv1.CustomJob
	if err := protojson.Unmarshal([]byte(res), &j); err != nil {
		t.Fatalf("create --wait -o json: %v\n%s", err, res)
	}
	if j.GetState() != trainingv1.JobState_JOB_STATE_SUCCEEDED || j.GetUser() == "" || j.GetJob() == "" {
		t.Fatalf("CLI custom job: %v", &j)
	}
	if _, err := os.Stat(filepath.Join(cliOut, "model", "model.json")); err != nil {
		t.Errorf("CLI job wrote no model: %v", err)
	}
}

// tuningSpace is the search of TestTuningFindsNearBest: the trainer's
// learning rate (log scale) and batch size, at 30 epochs and 16 hidden
// units, maximising accuracy.
const tuningSpace = `{
  "displayName": "tune-trainer",
  "maxTrialCount": 20,
  "parallelTrialCount": 4,
  "maxFailedTrialCount": 3,
  "studySpec": {
    "metrics": [{"metricId": "accuracy", "goal": "MAXIMIZE"}],
    "parameters": [
      {"parameterId": "learning_rate", "doubleValueSpec": {"minValue": 0.01, "maxValue": 1}, "scaleType": "UNIT_LOG_SCALE"},
      {"parameterId": "batch_size", "discreteValueSpec": {"values": [16, 32, 64, 128]}}
    ],
    "seed": "7"
  },
  "trialJobSpec": {
    "workerPoolSpecs": [{
      "machineSpec": {"machineType": "n2-standard-8"},
      "replicaCount": "1",
      "containerSpec": {"command": ["loom", "train"], "args": ["--epochs=30", "--hidden_units=16", "--weight_decay=0"]}
    }],
    "baseOutputDirectory": {"outputUriPrefix": "file://%s"}
  }
}`

// gridBest trains the tuning space's grid (40 learning rates × the 4
// batch sizes) in-process with the trainer's own model and seed (42, `loom
// train`'s default): the best accuracy the space holds.
func gridBest(t *testing.T) float64 {
	t.Helper()
	best := 0.0
	for i := range 40 {
		lr := math.Exp(math.Log(0.01) + float64(i)/39*(math.Log(1)-math.Log(0.01)))
		for _, bs := range []int{16, 32, 64, 128} {
			tr, err := toytrain.New(toytrain.Hyper{LearningRate: lr, BatchSize: bs, HiddenUnits: 16}, 42)
			if err != nil {
				t.Fatal(err)
			}
			for range 30 {
				tr.TrainEpoch()
			}
			best = max(best, tr.Accuracy())
		}
	}
	return best
}

// TestTuningFindsNearBest is the second "done when": a tuning job over the
// trainer's hyperparameters, run for real (each trial a CustomJob on its
// own cluster, metrics from the hypertune lines), finds within its 20
// trials a configuration within 3% of the best of a 160-point grid of the
// same space. Then a pipeline of a tuning task registers the best trial's
// model as a new version of a model, with lineage down to the trial and
// its hyperparameters.
func TestTuningFindsNearBest(t *testing.T) {
	t.Parallel()
	s := startTrainingStack(t, 6*time.Minute)
	ref := make(chan float64, 1)
	go func() { ref <- gridBest(t) }()

	file := writeFile(t, "tuning.json", fmt.Sprintf(tuningSpace, t.TempDir()))
	res := s.must("hptuning", "create", "-f", file, "--wait", "-o", "json")
	var hp trainingv1.HyperparameterTuningJob
	if err := protojson.Unmarshal([]byte(res), &hp); err != nil {
		t.Fatalf("hptuning create --wait -o json: %v\n%s", err, res)
	}
	if hp.GetState() != trainingv1.JobState_JOB_STATE_SUCCEEDED || len(hp.GetTrials()) != 20 || hp.GetBestTrial() == "" {
		t.Fatalf("tuning job ended %v with %d trials, best %q", hp.GetState(), len(hp.GetTrials()), hp.GetBestTrial())
	}
	var found float64
	points := map[string]bool{}
	for _, tr := range hp.GetTrials() {
		if tr.GetState() != trainingv1.Trial_SUCCEEDED {
			t.Errorf("trial %s ended %v (%s)", tr.GetId(), tr.GetState(), tr.GetInfeasibleReason())
		}
		var acc float64
		for _, m := range tr.GetFinalMeasurement().GetMetrics() {
			if m.GetMetricId() == "accuracy" {
				acc = m.GetValue()
			}
		}
		if acc <= 0 || len(tr.GetMeasurements()) == 0 {
			t.Errorf("trial %s has no accuracy from its metric lines: %v", tr.GetId(), tr)
		}
		if tr.GetId() == hp.GetBestTrial() {
			found = acc
		}
		b, _ := protojson.Marshal(&trainingv1.Trial{Parameters: tr.GetParameters()})
		points[string(b)] = true
	}
	if len(points) < 18 {
		t.Errorf("20 trials tried only %d distinct points", len(points))
	}
	best := <-ref
	t.Logf("tuning found accuracy %.4f (trial %s); the grid's best is %.4f", found, hp.GetBestTrial(), best)
	if found < 0.97*best {
		t.Errorf("tuning's best accuracy %.4f is more than 3%% below the grid's %.4f", found, best)
	}

	// A pipeline: a custom task registers a model, then a tuning task
	// (fewer trials) its next version with the trial's lineage.
	first := writeFile(t, "pipeline.json", fmt.Sprintf(`{
  "displayName": "first",
  "trainingTaskDefinition": "gs://google-cloud-aiplatform/schema/trainingjob/definition/custom_task_1.0.0.yaml",
  "trainingTaskInputs": {
    "workerPoolSpecs": [{"machineSpec": {"machineType": "n2-standard-8"}, "replicaCount": "1",
      "containerSpec": {"command": ["loom", "train"], "args": ["--epochs=5"]}}],
    "baseOutputDirectory": {"outputUriPrefix": "file://%s"}
  },
  "modelToUpload": {"displayName": "spirals"}
}`, t.TempDir()))
	var p trainingv1.TrainingPipeline
	if err := protojson.Unmarshal([]byte(s.must("pipelines", "create", "-f", first, "--wait", "-o", "json")), &p); err != nil {
		t.Fatal(err)
	}
	if p.GetState() != trainingv1.PipelineState_PIPELINE_STATE_SUCCEEDED || !strings.HasSuffix(p.GetModelVersion(), "/models/spirals@1") {
		t.Fatalf("first pipeline: %v", &p)
	}
	var inputs map[string]any
	if err := json.Unmarshal([]byte(fmt.Sprintf(tuningSpace, t.TempDir())), &inputs); err != nil {
		t.Fatal(err)
	}
	inputs["maxTrialCount"], inputs["parallelTrialCount"] = 4, 2
	delete(inputs, "displayName")
	pipe, _ := json.Marshal(map[string]any{
		"displayName":            "tuned",
		"trainingTaskDefinition": "gs://google-cloud-aiplatform/schema/trainingjob/definition/hyperparameter_tuning_task_1.0.0.yaml",
		"trainingTaskInputs":     inputs,
		"modelToUpload":          map[string]any{"displayName": "spirals, tuned"},
		"parentModel":            "projects/default/models/spirals",
	})
	second := writeFile(t, "tuned.json", string(pipe))
	p.Reset()
	if err := protojson.Unmarshal([]byte(s.must("pipelines", "create", "-f", second, "--wait", "-o", "json")), &p); err != nil {
		t.Fatal(err)
	}
	if p.GetState() != trainingv1.PipelineState_PIPELINE_STATE_SUCCEEDED || !strings.HasSuffix(p.GetModelVersion(), "/models/spirals@2") {
		t.Fatalf("tuning pipeline: %v", &p)
	}
	var versions loomv1.ListModelVersionsResponse
	if err := protojson.Unmarshal([]byte(s.must("models", "list", "--versions", "spirals", "-o", "json")), &versions); err != nil {
		t.Fatal(err)
	}
	var v *loomv1.ModelVersion
	for _, x := range versions.GetVersions() {
		if versionRef(x.GetName()) == versionRef(p.GetModelVersion()) { // stored and served names of one version
			v = x
		}
	}
	l := v.GetLineage()
	if v == nil || l.GetTrainingPipeline() != p.GetName() || l.GetTuningJob() == "" || !strings.Contains(l.GetTrial(), "/trials/") ||
		l.GetCustomJob() == "" || l.GetJob() == "" || l.GetHyperparameters()["learning_rate"] == "" ||
		l.GetHyperparameters()["batch_size"] == "" || l.GetMetrics()["accuracy"] <= 0 || l.GetCheckpointUri() == "" {
		t.Fatalf("version 2's lineage is incomplete: %v", v)
	}
	if _, err := os.Stat(filepath.Join(strings.TrimPrefix(v.GetArtifactUri(), "file://"), "MANIFEST")); err != nil {
		t.Errorf("registered artifact %s: %v", v.GetArtifactUri(), err)
	}
}

// TestEveryRecipeSmallVariantRuns runs each catalog recipe's small variant
// here for real: as a batch job on a cluster, and one serverless, as a
// CustomJob on its own cluster.
func TestEveryRecipeSmallVariantRuns(t *testing.T) {
	t.Parallel()
	s := startTrainingStack(t, 5*time.Minute)
	file := writeFile(t, "cluster.json", `{"name": "recipes", "compute": {"nodePools": [{"id": "cpu", "machineType": "n2-standard-8", "nodeCount": 1}]}}`)
	s.must("clusters", "create", "-f", file)
	for _, r := range recipes.List() {
		out := s.must("recipes", "launch", r.Name, "--cluster", "recipes", "--small", "--set", "small.epochs=6", "--wait")
		if !strings.Contains(out, "COMPLETED (exit 0)") {
			t.Errorf("recipe %s small variant:\n%s", r.Name, out)
		}
	}
	out := s.must("recipes", "launch", "gemma2-9b-sft", "--serverless", "--small", "--set", "small.epochs=6",
		"--output-dir", "file://"+t.TempDir(), "--wait")
	if !strings.Contains(out, "SUCCEEDED") {
		t.Errorf("serverless small launch:\n%s", out)
	}
}

// writeWheel writes a minimal pure-Python wheel, loomtoy 0.1, whose module
// loomtoy.train prints its arguments and writes a model with its MANIFEST
// to AIP_MODEL_DIR: what a user's python_package_spec would hand over.
func writeWheel(t *testing.T, dir string) string {
	t.Helper()
	files := map[string]string{
		"loomtoy/__init__.py": "",
		"loomtoy/train.py": `import hashlib, os, sys
print("loomtoy args:", " ".join(sys.argv[1:]))
print("loomtoy venv:", sys.prefix)
d = os.environ["AIP_MODEL_DIR"].removeprefix("file://")
os.makedirs(d, exist_ok=True)
body = b'{"weights": [1, 2, 3]}'
open(os.path.join(d, "model.json"), "wb").write(body)
open(os.path.join(d, "MANIFEST"), "w").write(hashlib.sha256(body).hexdigest() + "  model.json\n")
print("model written to", d)
`,
		"loomtoy-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: loomtoy\nVersion: 0.1\n",
		"loomtoy-0.1.dist-info/WHEEL":    "Wheel-Version: 1.0\nGenerator: loom-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
	}
	var record strings.Builder
	for _, name := range slices.Sorted(maps.Keys(files)) {
		sum := sha256.Sum256([]byte(files[name]))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", name, base64.RawURLEncoding.EncodeToString(sum[:]), len(files[name]))
	}
	record.WriteString("loomtoy-0.1.dist-info/RECORD,,\n")
	files["loomtoy-0.1.dist-info/RECORD"] = record.String()
	path := filepath.Join(dir, "loomtoy-0.1-py3-none-any.whl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(f)
	for _, name := range slices.Sorted(maps.Keys(files)) {
		w, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(w, files[name]); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestPythonPackageCustomJob runs a CustomJob of a python_package_spec for
// real: its file:// wheel is installed into a per-job virtual environment
// and `python -m loomtoy.train ARGS` runs in it (python3-venv and
// python3-pip, which CI installs).
func TestPythonPackageCustomJob(t *testing.T) {
	t.Parallel()
	if err := exec.Command("python3", "-c", "import venv, ensurepip").Run(); err != nil {
		need.Missing(t, fmt.Sprintf("python3 with venv and ensurepip (apt-get install python3-venv python3-pip): %v", err))
	}
	s := startTrainingStack(t, 4*time.Minute)
	whl := writeWheel(t, t.TempDir())
	out := t.TempDir()
	file := writeFile(t, "pkg.json", fmt.Sprintf(`{
  "displayName": "python-package",
  "jobSpec": {
    "workerPoolSpecs": [{
      "machineSpec": {"machineType": "n2-standard-8"},
      "replicaCount": "1",
      "pythonPackageSpec": {
        "executorImageUri": "us-docker.pkg.dev/vertex-ai/training/pytorch-cpu.2-1:latest",
        "packageUris": ["file://%s"],
        "pythonModule": "loomtoy.train",
        "args": ["--epochs=3", "it's quoted; $(not run)"]
      }
    }],
    "baseOutputDirectory": {"outputUriPrefix": "file://%s"}
  }
}`, whl, out))
	res := s.must("jobs", "custom", "create", "-f", file, "--wait", "-o", "json")
	var j trainingv1.CustomJob
	if err := protojson.Unmarshal([]byte(res), &j); err != nil {
		t.Fatalf("%v\n%s", err, res)
	}
	id := j.GetName()[strings.LastIndexByte(j.GetName(), '/')+1:]
	logs := s.must("jobs", "logs", id)
	if j.GetState() != trainingv1.JobState_JOB_STATE_SUCCEEDED || !strings.Contains(logs, "loomtoy args: --epochs=3 it's quoted; $(not run)\n") {
		t.Fatalf("python package job %v; output:\n%s", j.GetState(), logs)
	}
	if _, err := os.Stat(filepath.Join(out, "model", "MANIFEST")); err != nil {
		t.Errorf("the package wrote no model: %v", err)
	}
	// The per-job venv the package ran in is removed when the job ends.
	_, rest, ok := strings.Cut(logs, "loomtoy venv: ")
	venv, _, _ := strings.Cut(rest, "\n")
	if !ok || !strings.Contains(venv, "loom-cj-"+id+"-venv-") {
		t.Fatalf("the package did not run in the job's venv; output:\n%s", logs)
	}
	if _, err := os.Stat(venv); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("venv %s is left after the job ended: %v", venv, err)
	}
}

package app

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
)

// TestStripEnv: every replica environment goes, in the three resources,
// a pipeline's JSON task inputs in either spelling included; the rest stays.
func TestStripEnv(t *testing.T) {
	t.Parallel()
	var p trainingv1.TrainingPipeline
	if err := protojson.Unmarshal([]byte(`{"trainingTaskInputs": {
	  "workerPoolSpecs": [{"containerSpec": {"command": ["true"], "env": [{"name": "A", "value": "s1"}]}},
	                      {"python_package_spec": {"python_module": "m", "env": [{"name": "B", "value": "s2"}]}}],
	  "trialJobSpec": {"workerPoolSpecs": [{"container_spec": {"env": [{"name": "C", "value": "s3"}]}}]}}}`), &p); err != nil {
		t.Fatal(err)
	}
	stripEnv(&p)
	out := protojson.Format(&p)
	for _, s := range []string{"s1", "s2", "s3"} {
		if strings.Contains(out, s) {
			t.Errorf("pipeline still shows %s: %s", s, out)
		}
	}
	if !strings.Contains(out, `"python_module"`) || !strings.Contains(out, `"true"`) {
		t.Errorf("stripped more than the environment: %s", out)
	}
	j := &trainingv1.HyperparameterTuningJob{TrialJobSpec: &trainingv1.CustomJobSpec{WorkerPoolSpecs: []*trainingv1.WorkerPoolSpec{
		{Task: &trainingv1.WorkerPoolSpec_PythonPackageSpec{PythonPackageSpec: &trainingv1.PythonPackageSpec{PythonModule: "m", Env: []*trainingv1.EnvVar{{Name: "X"}}}}}}}}
	stripEnv(j)
	if pp := j.GetTrialJobSpec().GetWorkerPoolSpecs()[0].GetPythonPackageSpec(); len(pp.GetEnv()) != 0 || pp.GetPythonModule() != "m" {
		t.Errorf("tuning job: %v", j)
	}
}

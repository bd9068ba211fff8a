package recipes

import (
	"slices"
	"strings"
	"testing"
)

// TestServerlessSmallHasAModelDir: the built-in trainer exits 2 ("no output
// directory") without --out, LOOM_MODEL_DIR or AIP_MODEL_DIR, and a
// CustomJob without base_output_directory gets no AIP_MODEL_DIR: a tester's
// `loom recipes launch gemma2-9b-sft --serverless --small --wait` (the
// docs' command, without --output-dir) failed so on every recipe. Without
// a base output directory the small variant names its model directory
// itself, in its working directory, as the batch script's does; with one
// it leaves it to AIP_MODEL_DIR.
func TestServerlessSmallHasAModelDir(t *testing.T) {
	t.Parallel()
	for _, r := range List() {
		job, err := CustomJob(r, Options{Small: true}, CustomJobOptions{})
		if err != nil {
			t.Fatal(err)
		}
		args := job.GetJobSpec().GetWorkerPoolSpecs()[0].GetContainerSpec().GetArgs()
		want := "--out=" + r.Name + "-small-model"
		if !slices.Contains(args, want) {
			t.Errorf("%s --serverless --small: args %v, want %s", r.Name, args, want)
		}
		job, err = CustomJob(r, Options{Small: true}, CustomJobOptions{BaseOutputDirectory: "file:///shared/out"})
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range job.GetJobSpec().GetWorkerPoolSpecs()[0].GetContainerSpec().GetArgs() {
			if strings.HasPrefix(a, "--out") {
				t.Errorf("%s --serverless --small --output-dir: %s overrides AIP_MODEL_DIR", r.Name, a)
			}
		}
	}
}

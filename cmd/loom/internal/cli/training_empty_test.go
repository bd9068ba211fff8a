package cli

import (
	"strings"
	"testing"

	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
)

// TestTrainingListEmptySaysWhy: an empty list says where it looked and,
// under a filter, that nothing matched it. A tester's
// `loom jobs custom list --filter 'state=JOB_STATE_RUNNING AND labels.team=vision'`
// printed "No custom jobs. Create one with ..." in a project holding
// dozens: as if there were none at all.
func TestTrainingListEmptySaysWhy(t *testing.T) {
	t.Parallel()
	_, tr, gw := newTrainingGateway(t)
	tr.Resources[trainingParent+"/customJobs/7"] = customJob(t, trainingParent+"/customJobs/7", trainingv1.JobState_JOB_STATE_SUCCEEDED)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"jobs", "custom", "list", "--filter", "state=JOB_STATE_RUNNING"},
			"No custom jobs in " + trainingParent + " match state=JOB_STATE_RUNNING."},
		{[]string{"hptuning", "list", "--filter", "labels.team=vision"},
			"No tuning jobs in " + trainingParent + " match labels.team=vision."},
		{[]string{"pipelines", "list", "--filter", "state=PIPELINE_STATE_RUNNING"},
			"No pipelines in " + trainingParent + " match state=PIPELINE_STATE_RUNNING."},
		{[]string{"hptuning", "list"}, "No tuning jobs in " + trainingParent + ". Create one with `loom hptuning create -f study.json`."},
		{[]string{"jobs", "custom", "list", "--location", "europe-west4"},
			"No custom jobs in projects/default/locations/europe-west4. Create one with `loom jobs custom create -f job.json`."},
	} {
		out, errOut, code := run(t, gw, c.args...)
		if code != 0 || strings.TrimSpace(out) != c.want {
			t.Errorf("%v: exit %d: %q%s; want %q", c.args, code, out, errOut, c.want)
		}
	}
}

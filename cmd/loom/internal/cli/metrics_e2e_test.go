package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/testkit"
)

// TestCustomJobMetricsThroughREST: a CustomJob running `loom train --model
// mlp` reports its metrics two ways (hypertune lines and a TensorBoard
// event file in AIP_TENSORBOARD_LOG_DIR); the agent reads both, the
// training service stores them, and they are read through REST at the
// paths docs/metrics.md fixes (under the CustomJob and under its job) and through
// `loom metrics`.
func TestCustomJobMetricsThroughREST(t *testing.T) {
	t.Parallel()
	s := startTrainingStack(t, 4*time.Minute)
	body := fmt.Sprintf(`{
  "displayName": "metrics",
  "jobSpec": {
    "workerPoolSpecs": [{
      "machineSpec": {"machineType": "n2-standard-8"},
      "replicaCount": 1,
      "containerSpec": {"command": ["loom", "train"], "args": ["--model=mlp", "--epochs=12", "--hidden_units=16"]}
    }],
    "baseOutputDirectory": {"outputUriPrefix": "file://%s"}
  }
}`, t.TempDir())
	code, b := s.rest("POST", "/v1/projects/default/locations/us-central1/customJobs", body)
	if code != http.StatusOK {
		t.Fatalf("POST customJobs: %d %s", code, b)
	}
	var created struct{ Name string }
	if err := json.Unmarshal(b, &created); err != nil || created.Name == "" {
		t.Fatalf("create answered %s (%v)", b, err)
	}
	name := created.Name
	type series struct {
		Metric string
		Count  json.Number
		First  float64
		Last   float64
		Min    float64
		Max    float64
	}
	var list struct{ Series []series }
	want := []string{"accuracy", "train/loss", "val_loss", "validation/accuracy", "validation/loss"}
	testkit.WaitFor(t, 3*time.Minute, name+"'s five series with 12 points each", func() (bool, error) {
		code, b := s.rest("GET", "/v1/"+name+"/metrics", "")
		if code == http.StatusNotFound {
			return false, nil
		}
		if code != http.StatusOK {
			return false, fmt.Errorf("GET metrics: %d %s", code, b)
		}
		list.Series = nil
		if err := json.Unmarshal(b, &list); err != nil {
			return false, err
		}
		var names []string
		for _, x := range list.Series {
			if x.Count.String() != "12" {
				return false, nil
			}
			names = append(names, x.Metric)
		}
		return strings.Join(names, ",") == strings.Join(want, ","), nil
	})
	for _, x := range list.Series {
		if x.Min > x.Max || x.First < x.Min || x.Last > x.Max {
			t.Errorf("summary out of order: %+v", x)
		}
	}
	// The job's own name reads the same series; a read is downsampled.
	id := name[strings.LastIndexByte(name, '/')+1:]
	code, b = s.rest("GET", "/v1/projects/default/jobs/"+id+"/metrics:read?"+url.Values{"metric": {"validation/loss"}, "points": {"6"}, "from": {"2"}}.Encode(), "")
	if code != http.StatusOK {
		t.Fatalf("metrics:read: %d %s", code, b)
	}
	var read struct {
		Metric string
		Total  json.Number
		Points []struct {
			Step  json.Number
			Value float64
			Time  string
		}
	}
	if err := json.Unmarshal(b, &read); err != nil {
		t.Fatal(err)
	}
	if read.Metric != "validation/loss" || read.Total.String() != "11" || len(read.Points) > 6 || len(read.Points) < 4 ||
		read.Points[0].Step.String() != "2" || read.Points[len(read.Points)-1].Step.String() != "12" || read.Points[0].Time == "" {
		t.Errorf("read: %s", b)
	}
	if code, b := s.rest("GET", "/v1/"+name+"/metrics:read?metric=nope", ""); code != http.StatusNotFound {
		t.Errorf("unknown metric: %d %s", code, b)
	}
	if code, b := s.rest("GET", "/v1/"+name+"/metrics:read?metric=loss&points=10001", ""); code != http.StatusBadRequest {
		t.Errorf("10001 points: %d %s", code, b)
	}
	out := s.must("metrics", id)
	t.Logf("loom metrics %s:\n%s", id, out)
	t.Logf("loom metrics --metric val_loss --points 6:\n%s", s.must("metrics", id, "--metric", "val_loss", "--points", "6"))
	if !strings.Contains(out, "METRIC") || !strings.Contains(out, "validation/accuracy") || !strings.Contains(out, "12") {
		t.Errorf("loom metrics %s:\n%s", id, out)
	}
	out = s.must("metrics", name, "--metric", "val_loss", "-o", "json")
	if !strings.Contains(out, `"metric": "val_loss"`) || !strings.Contains(out, `"total": "12"`) {
		t.Errorf("loom metrics --metric val_loss -o json:\n%s", out)
	}
}

// TestSlurmJobMetrics: a plain batch job's `loom train --model mlp` gets
// LOOM_TENSORBOARD_LOG_DIR from the agent (a directory of the run's own)
// and CLOUD_ML_HP_METRIC_FILE; both sources' series are stored under the
// job and read by `loom metrics JOBID`.
func TestSlurmJobMetrics(t *testing.T) {
	t.Parallel()
	s := startTrainingStack(t, 4*time.Minute)
	file := writeFile(t, "cluster.json", `{"name": "m", "compute": {"nodePools": [{"id": "cpu", "machineType": "n2-standard-8", "nodeCount": 1}]}}`)
	s.must("clusters", "create", "-f", file)
	out, errOut, code := s.loom("jobs", "submit", "--cluster", "m", "--wait", "-o", "json", "--", "loom", "train", "--model=mlp", "--epochs=7", "--hidden_units=16", "--out="+t.TempDir(), "--step-time=100ms")
	if code != 0 {
		logs, _, _ := s.loom("jobs", "logs", "1")
		t.Fatalf("submit: exit %d\n%s\njob output:\n%s", code, errOut, logs)
	}
	var job struct {
		Name  string
		JobID string
		State string
	}
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &job); err != nil || job.State != "COMPLETED" {
		t.Fatalf("submit --wait -o json: %v\n%s", err, out)
	}
	var list struct {
		Series []struct {
			Metric string
			Count  json.Number
		}
	}
	testkit.WaitFor(t, time.Minute, job.Name+"'s series", func() (bool, error) {
		out, errOut, code := s.loom("metrics", job.JobID, "-o", "json")
		if code != 0 {
			return false, fmt.Errorf("loom metrics: %s", errOut)
		}
		list.Series = nil
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			return false, err
		}
		got := map[string]string{}
		for _, x := range list.Series {
			got[x.Metric] = x.Count.String()
		}
		return got["val_loss"] == "7" && got["validation/loss"] == "7" && got["train/loss"] == "7", nil
	})
}

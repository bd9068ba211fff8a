package cli

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
)

// earlyStopStudy is docs/training.md's tuning example made small: ASHA
// from step 1 (reduction factor 3, maximum 20) over trials of the built-in
// trainer at 20 epochs; %s is the epochs' pace (--step-time), %s the output prefix.
const earlyStopStudy = `{
  "displayName": "tune-early",
  "maxTrialCount": 6, "parallelTrialCount": 3, "maxFailedTrialCount": 2,
  "studySpec": {
    "metrics": [{"metricId": "val_loss", "goal": "MINIMIZE"}],
    "parameters": [
      {"parameterId": "learning_rate", "doubleValueSpec": {"minValue": 0.0001, "maxValue": 0.1}, "scaleType": "UNIT_LOG_SCALE"},
      {"parameterId": "batch_size", "discreteValueSpec": {"values": [32, 64, 128]}}
    ],
    "ashaStoppingSpec": {"minStepCount": "1", "maxStepCount": "20", "reductionFactor": 3},
    "algorithm": "RANDOM_SEARCH", "seed": "5"
  },
  "trialJobSpec": {"workerPoolSpecs": [{"machineSpec": {"machineType": "n2-standard-8"}, "replicaCount": "1",
    "containerSpec": {"command": ["loom", "train", "--epochs=20", "--step-time=%s"]}}],
    "baseOutputDirectory": {"outputUriPrefix": "file://%s"}}
}`

// lastStep is the highest step a trial reported.
func lastStep(tr *trainingv1.Trial) int64 {
	var s int64
	for _, m := range tr.GetMeasurements() {
		s = max(s, m.GetStepCount())
	}
	return s
}

// TestEarlyStoppedTrialsStoppedEarly runs docs/training.md's early-stopping
// example through the whole stack (real agents running `loom train`): a
// trial shown "stopped early" must have run fewer than its 20 epochs, and
// its job must not have ended on its own. With a paced trainer (epochs of
// 150 ms, so that the search decides while a trial runs) ASHA stops some
// trials, and each of them ran fewer steps than the maximum; with the
// trainer's own pace (20 epochs well within one metrics interval, the
// walkthrough's case), every trial's points come after it ended, so none
// may be labelled stopped early whatever the search decided.
func TestEarlyStoppedTrialsStoppedEarly(t *testing.T) {
	t.Parallel()
	s := startTrainingStack(t, 6*time.Minute)
	for _, pace := range []string{"150ms", "0s"} {
		file := writeFile(t, "study-"+pace+".json", fmt.Sprintf(earlyStopStudy, pace, t.TempDir()))
		res := s.must("hptuning", "create", "-f", file, "--wait", "-o", "json")
		var hp trainingv1.HyperparameterTuningJob
		if err := protojson.Unmarshal([]byte(res), &hp); err != nil {
			t.Fatalf("hptuning create --wait -o json: %v\n%s", err, res)
		}
		if hp.GetState() != trainingv1.JobState_JOB_STATE_SUCCEEDED || len(hp.GetTrials()) != 6 {
			t.Fatalf("pace %s: tuning job ended %v with %d trials", pace, hp.GetState(), len(hp.GetTrials()))
		}
		stopped := 0
		for _, tr := range hp.GetTrials() {
			t.Logf("pace %s: trial %s %v early_stopped=%v steps=%d", pace, tr.GetId(), tr.GetState(), tr.GetEarlyStopped(), lastStep(tr))
			if !tr.GetEarlyStopped() {
				if tr.GetState() == trainingv1.Trial_SUCCEEDED && lastStep(tr) != 20 {
					t.Errorf("pace %s: trial %s not stopped early but ran %d of 20 steps", pace, tr.GetId(), lastStep(tr))
				}
				continue
			}
			stopped++
			if lastStep(tr) >= 20 {
				t.Errorf("pace %s: trial %s is SUCCEEDED (stopped early) but ran %d of 20 steps", pace, tr.GetId(), lastStep(tr))
			}
		}
		if pace != "0s" && stopped == 0 {
			t.Errorf("pace %s: ASHA from step 1 stopped no trial of 6", pace)
		}
	}
}

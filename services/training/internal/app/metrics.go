package app

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/loom-ml/loom/libs/telemetry"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
)

// MetricsInterval is how often training's gauges are computed at most,
// whatever the scrape rate.
const MetricsInterval = 5 * time.Second

// Job kinds of loom_training_jobs.
const (
	KindCustomJob = "custom_job"
	KindTuningJob = "hyperparameter_tuning_job"
	KindPipeline  = "training_pipeline"
)

// RegisterMetrics registers training's domain row on reg, computed from
// memory at most every MetricsInterval:
//
//   - loom_training_jobs{kind,state}: CustomJobs (a trial's included),
//     tuning jobs and training pipelines held, by state ("running",
//     "succeeded": JobState without its prefix, lower case);
//   - loom_training_trials{state}: the tuning jobs' trials by state
//     ("requested", "active", "stopping", "succeeded", "infeasible").
//
// and loom_training_trial_metrics_refused_total{reason}: "rate"
// (LimitTuningWrites) and the held records dropped or refused
// (domain.DropReasons), each exported from 0.
func (a *App) RegisterMetrics(reg prometheus.Registerer) error {
	if err := reg.Register(a.tuningRefused); err != nil {
		return err
	}
	return reg.Register(telemetry.NewGaugeSet(MetricsInterval, []telemetry.Gauge{
		{Name: "loom_training_jobs", Help: "Training resources held, by kind (custom_job, hyperparameter_tuning_job, training_pipeline) and state.", Labels: []string{"kind", "state"}},
		{Name: "loom_training_trials", Help: "Trials of the tuning jobs held, by state.", Labels: []string{"state"}},
	}, a.computeGauges))
}

func jobState(s trainingv1.JobState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "JOB_STATE_"))
}

func (a *App) computeGauges(emit telemetry.Emit) {
	type key struct{ kind, state string }
	jobs := map[key]int{}
	trials := map[string]int{}
	for v := range trainingv1.JobState_name {
		if s := trainingv1.JobState(v); s != trainingv1.JobState_JOB_STATE_UNSPECIFIED {
			jobs[key{KindCustomJob, jobState(s)}] = 0
			jobs[key{KindTuningJob, jobState(s)}] = 0
		}
	}
	for v, name := range trainingv1.PipelineState_name {
		if v != 0 {
			jobs[key{KindPipeline, strings.ToLower(strings.TrimPrefix(name, "PIPELINE_STATE_"))}] = 0
		}
	}
	for v, name := range trainingv1.Trial_State_name {
		if v != 0 {
			trials[strings.ToLower(name)] = 0
		}
	}
	a.mu.RLock()
	for _, r := range a.state.Roots {
		for _, j := range r.CJs {
			jobs[key{KindCustomJob, jobState(j.Job.GetState())}]++
		}
		if t := r.Tuning; t != nil {
			jobs[key{KindTuningJob, jobState(t.Job.GetState())}]++
			for _, tr := range t.Job.GetTrials() {
				trials[strings.ToLower(tr.GetState().String())]++
			}
		}
		if p := r.Pipeline; p != nil {
			jobs[key{KindPipeline, strings.ToLower(strings.TrimPrefix(p.P.GetState().String(), "PIPELINE_STATE_"))}]++
		}
	}
	a.mu.RUnlock()
	for k, n := range jobs {
		emit("loom_training_jobs", float64(n), k.kind, k.state)
	}
	for s, n := range trials {
		emit("loom_training_trials", float64(n), s)
	}
}

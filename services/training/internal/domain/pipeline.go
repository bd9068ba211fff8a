package domain

import (
	"fmt"
	"math"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/trainingspec"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

func (s *State) createPipeline(now time.Time, c *eventsv1.CreateTrainingPipeline, logDir LogDir) (*Change, error) {
	in := c.GetPipeline()
	n, err := ParseName(in.GetName(), Pipelines)
	if err != nil {
		return nil, ignored("create training pipeline: name: %v", err)
	}
	if s.Lookup(in.GetName()) != nil {
		return nil, nil // a copy of a create already applied
	}
	if in.GetUser() == "" {
		return nil, ignored("create %s: user: %v (required: its jobs run as their owner)", in.GetName(), errs.FailedPrecondition)
	}
	ts := timestamppb.New(now)
	p := proto.Clone(in).(*trainingv1.TrainingPipeline)
	if p.CreateTime == nil {
		p.CreateTime = ts
	}
	p.State, p.StartTime, p.EndTime, p.Error, p.ModelVersion = trainingv1.PipelineState_PIPELINE_STATE_RUNNING, ts, nil, nil, ""
	r := &Root{Name: in.GetName(), Pipeline: &Pipeline{P: p, Reserved: c.GetReservedJobIds()}, LogDir: logDir}
	em := &emitter{}
	fail := func(msg string) {
		p.State, p.EndTime = trainingv1.PipelineState_PIPELINE_STATE_FAILED, ts
		p.Error = &trainingv1.Status{Code: codeInvalidArgument, Message: msg}
	}
	spec, task, err := trainingspec.PipelineTask(p)
	if err == nil {
		// A model of another project the registry would refuse only once
		// the training has ended: the pipeline fails now, running nothing
		// (the gateway refuses it at create; this is for a command that
		// came another way).
		err = trainingspec.CheckPipelineModel(n.Project, p)
	}
	childID := n.ID + 1
	switch {
	case err != nil:
		fail(err.Error())
	case spec != nil && c.GetReservedJobIds() < 2:
		fail(fmt.Sprintf("reserved_job_ids: a custom task needs 2, got %d", c.GetReservedJobIds()))
	case task != nil && c.GetReservedJobIds() < 2+int64(task.GetMaxTrialCount()):
		fail(fmt.Sprintf("reserved_job_ids: a tuning task of %d trials needs %d, got %d",
			task.GetMaxTrialCount(), 2+task.GetMaxTrialCount(), c.GetReservedJobIds()))
	case spec != nil:
		cjName := n.With(CustomJobs, childID).String()
		if s.Lookup(cjName) != nil {
			return nil, ignored("create %s: its custom job's id %d is in use", in.GetName(), childID)
		}
		cj := newCJ(now, &trainingv1.CustomJob{Name: cjName, DisplayName: p.GetDisplayName(), JobSpec: spec,
			Labels: p.GetLabels(), User: p.GetUser()}, "", r.LogDir)
		r.CJs = append(r.CJs, cj)
		r.Pipeline.Child = cjName
		setMetadata(p, map[string]any{"backingCustomJob": cjName})
		startCJ(now, cj, em)
	default:
		tName := n.With(TuningJobs, childID).String()
		if s.Lookup(tName) != nil {
			return nil, ignored("create %s: its tuning job's id %d is in use", in.GetName(), childID)
		}
		tj := proto.Clone(task).(*trainingv1.HyperparameterTuningJob)
		tj.Name, tj.DisplayName, tj.Labels, tj.User = tName, p.GetDisplayName(), p.GetLabels(), p.GetUser()
		r.Tuning = newTuning(now, tj)
		r.Pipeline.Child = tName
		setMetadata(p, map[string]any{"backingHyperparameterTuningJob": tName})
	}
	advance(now, s.metricGrace(), r, em)
	return finish(now, nil, r, em), nil
}

// setMetadata merges kv into a pipeline's training_task_metadata.
func setMetadata(p *trainingv1.TrainingPipeline, kv map[string]any) {
	m := map[string]any{}
	if s := p.GetTrainingTaskMetadata().GetStructValue(); s != nil {
		m = s.AsMap()
	}
	for k, v := range kv {
		m[k] = v
	}
	if v, err := structpb.NewValue(m); err == nil {
		p.TrainingTaskMetadata = v
	}
}

// advancePipeline ends a pipeline, or uploads its model, once its job ended.
func advancePipeline(now time.Time, r *Root, em *emitter) {
	p := r.Pipeline
	if pipelineEnded(p.P.GetState()) || p.RequestID != "" {
		return
	}
	var state trainingv1.JobState
	var cerr *trainingv1.Status
	if r.Tuning != nil {
		state, cerr = r.Tuning.Job.GetState(), r.Tuning.Job.GetError()
	} else if cj := r.cj(p.Child); cj != nil {
		state, cerr = cj.Job.GetState(), cj.Job.GetError()
	} else {
		return
	}
	if !JobEnded(state) {
		return
	}
	end := func(s trainingv1.PipelineState, e *trainingv1.Status) {
		p.P.State, p.P.EndTime = s, timestamppb.New(now)
		if e != nil {
			p.P.Error = e
		}
	}
	switch {
	case p.Cancelling:
		end(trainingv1.PipelineState_PIPELINE_STATE_CANCELLED, nil)
		return
	case state != trainingv1.JobState_JOB_STATE_SUCCEEDED:
		end(trainingv1.PipelineState_PIPELINE_STATE_FAILED, &trainingv1.Status{Code: max(cerr.GetCode(), codeInternal),
			Message: fmt.Sprintf("%s ended %s: %s", p.Child, state, cerr.GetMessage())})
		return
	case p.P.GetModelToUpload() == nil:
		end(trainingv1.PipelineState_PIPELINE_STATE_SUCCEEDED, nil)
		return
	}
	up, err := upload(r)
	if err != nil {
		end(trainingv1.PipelineState_PIPELINE_STATE_FAILED, &trainingv1.Status{Code: codeFailedPrecondition, Message: err.Error()})
		return
	}
	p.RequestID = up.GetRequestId()
	key := up.GetParentModel()
	if key == "" && up.GetModelId() != "" {
		key = resname.Model{Project: up.GetProject(), ID: up.GetModelId()}.String()
	}
	if key == "" {
		key = "projects/" + up.GetProject()
	}
	em.add(key, up, "users/"+p.P.GetUser())
}

// UploadRequestID is the request id of a pipeline's UploadModel: one per
// pipeline, so that a redelivered command registers one version.
func UploadRequestID(pipeline string) string { return pipeline + ":upload" }

// upload builds a pipeline's UploadModel: the model of its CustomJob or of
// its tuning job's best trial, with the lineage back to the pipeline.
func upload(r *Root) (*eventsv1.UploadModel, error) {
	p := r.Pipeline
	n, _ := ParseName(p.P.GetName(), Pipelines)
	lin := &loomv1.ModelLineage{TrainingPipeline: p.P.GetName()}
	var cj *CJ
	if t := r.Tuning; t != nil {
		srch, err := searcher(t.Job)
		if err != nil {
			return nil, err
		}
		b := srch.Best(t.Job.GetTrials())
		if b < 0 {
			return nil, fmt.Errorf("%s has no successful trial to take the model from", t.Job.GetName())
		}
		tr := t.Job.GetTrials()[b]
		cj = r.cj(tr.GetCustomJob())
		lin.TuningJob, lin.Trial = t.Job.GetName(), tr.GetName()
		lin.Hyperparameters = map[string]string{}
		for _, x := range tr.GetParameters() {
			lin.Hyperparameters[x.GetParameterId()] = ParamString(x.GetValue())
		}
		lin.Metrics = map[string]float64{}
		for _, m := range tr.GetFinalMeasurement().GetMetrics() {
			// A measurement may hold ±Inf (the agent keeps "inf" in a
			// job's series); the model's lineage states the values it
			// was judged by, finite ones only (docs/registry.md).
			if v := m.GetValue(); !math.IsNaN(v) && !math.IsInf(v, 0) {
				lin.Metrics[m.GetMetricId()] = v
			}
		}
		setMetadata(p.P, map[string]any{"bestTrialId": tr.GetId()})
	} else {
		cj = r.cj(p.Child)
	}
	if cj == nil {
		return nil, fmt.Errorf("the pipeline's custom job is missing")
	}
	lin.CustomJob, lin.Job, lin.Attempt = cj.Job.GetName(), cj.Job.GetJob(), cj.Attempt
	dirs := OutputDirs(cj.Job.GetJobSpec(), cj.TrialID)
	lin.CheckpointUri = dirs.Checkpoint
	model := proto.Clone(p.P.GetModelToUpload()).(*trainingv1.Model)
	if model.GetArtifactUri() == "" {
		if dirs.Model == "" {
			return nil, fmt.Errorf("model_to_upload.artifact_uri: required: the job has no base_output_directory, so it has no AIP_MODEL_DIR to take the model from")
		}
		model.ArtifactUri = dirs.Model
	}
	if model.GetDisplayName() == "" {
		model.DisplayName = p.P.GetDisplayName()
	}
	return &eventsv1.UploadModel{
		RequestId: UploadRequestID(p.P.GetName()), Project: n.Project, ModelId: p.P.GetModelId(),
		ParentModel: p.P.GetParentModel(), Model: model, Lineage: lin, User: p.P.GetUser(),
		// The job ran as the pipeline's owner, who owns its model directory.
		OsUser: p.P.GetUser(),
	}, nil
}

// modelVersionName is how a pipeline names the version it registered: as
// the model API answers a name without a location and `loom models get`
// prints it (docs/registry.md, "Names"),
// "projects/{p}/locations/global/models/{m}@{n}": the registry keeps no
// locations, so one name for a version everywhere, whatever the pipeline's
// location. The registry's event carries its stored name,
// "projects/{p}/models/{m}/versions/{n}" (libs/resname), which the model
// API does not take: a user pasting the name `--wait` printed was refused.
// Another name is kept as it came.
func modelVersionName(version string) string {
	v, err := resname.SplitModelVersion(version)
	if err != nil {
		return version
	}
	return v.APIName(modelLocation)
}

// modelLocation is the location model names are answered in (the
// registry's domain.DefaultLocation).
const modelLocation = "global"

// modelAnswer ends a pipeline with the registry's answer to its upload.
func (s *State) modelAnswer(now time.Time, requestID string, reg *eventsv1.ModelVersionRegistered, failed *eventsv1.ModelUploadFailed) (*Change, error) {
	if requestID == "" {
		return nil, nil
	}
	r := s.Lookup("upload:" + requestID)
	if r == nil || r.Pipeline == nil {
		return nil, nil
	}
	return s.change(now, r.Name, func(r *Root, em *emitter) error {
		p := r.Pipeline
		if pipelineEnded(p.P.GetState()) || p.RequestID != requestID {
			return nil
		}
		p.P.EndTime = timestamppb.New(now)
		if failed != nil {
			p.P.State = trainingv1.PipelineState_PIPELINE_STATE_FAILED
			p.P.Error = &trainingv1.Status{Code: codeFailedPrecondition, Message: "the registry refused the model: " + failed.GetReason()}
			return nil
		}
		p.P.ModelVersion = modelVersionName(reg.GetVersion().GetName())
		if m, err := resname.SplitModel(reg.GetModel()); err == nil {
			p.P.ModelId = m.ID
		}
		p.P.State = trainingv1.PipelineState_PIPELINE_STATE_SUCCEEDED
		if p.Cancelling {
			p.P.State = trainingv1.PipelineState_PIPELINE_STATE_CANCELLED
		}
		return nil
	})
}

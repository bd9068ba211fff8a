package domain

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/trainingspec"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
)

// Training resources (loom.training.v1) live at Vertex's paths:
// projects/{p}/locations/{l}/{collection}/{id}, id a numeric job id.
const (
	CollectionCustomJobs = "customJobs"
	CollectionTuningJobs = "hyperparameterTuningJobs"
	CollectionPipelines  = "trainingPipelines"
)

// TrainingParent is a parsed "projects/{p}/locations/{l}".
type TrainingParent struct{ Project, Location string }

// String is the parent's name.
func (p TrainingParent) String() string {
	return "projects/" + p.Project + "/locations/" + p.Location
}

// Name is the name of the resource id in collection under p.
func (p TrainingParent) Name(collection string, id int64) string {
	return p.String() + "/" + collection + "/" + strconv.FormatInt(id, 10)
}

// ParseTrainingParent parses a training request's parent; InvalidArgument
// naming field otherwise. The location is any valid id: stored, not
// interpreted.
func ParseTrainingParent(field, s string) (TrainingParent, error) {
	parts := strings.Split(s, "/")
	if len(parts) != 4 || parts[0] != "projects" || parts[2] != "locations" {
		return TrainingParent{}, errs.Invalid(field, "%s is not projects/{project}/locations/{location}", clipQ(s))
	}
	var v errs.Validator
	v.Check(resname.ValidID(parts[1]), field, "project %s: a lowercase letter, then up to 62 lowercase letters, digits or hyphens", clipQ(parts[1]))
	v.Check(resname.ValidID(parts[3]), field, "location %s: a lowercase letter, then up to 62 lowercase letters, digits or hyphens (e.g. us-central1)", clipQ(parts[3]))
	if err := v.Err(); err != nil {
		return TrainingParent{}, err
	}
	return TrainingParent{Project: parts[1], Location: parts[3]}, nil
}

// ParseTrainingName parses the name of a resource of collection:
// projects/{p}/locations/{l}/{collection}/{id}, id a positive job id
// without leading zeros. InvalidArgument naming field otherwise.
func ParseTrainingName(field, collection, s string) (TrainingParent, int64, error) {
	i := strings.LastIndex(s, "/"+collection+"/")
	if i < 0 {
		return TrainingParent{}, 0, errs.Invalid(field, "%s is not projects/{project}/locations/{location}/%s/{id}", clipQ(s), collection)
	}
	p, err := ParseTrainingParent(field, s[:i])
	if err != nil {
		return TrainingParent{}, 0, err
	}
	idText := s[i+len(collection)+2:]
	id, err := strconv.ParseInt(idText, 10, 64)
	if err != nil || id < 1 || strconv.FormatInt(id, 10) != idText {
		return TrainingParent{}, 0, errs.Invalid(field, "id %s is not a job id (a positive number, as the create answered)", clipQ(idText))
	}
	return p, id, nil
}

// clipQ quotes s, cut to 64 bytes.
func clipQ(s string) string {
	if len(s) > 64 {
		return fmt.Sprintf("%q…", s[:64])
	}
	return fmt.Sprintf("%q", s)
}

// PipelineJobIDs is how many job ids a pipeline reserves (docs/training.md
// "Pipelines"): itself and its CustomJob (2), or itself, its tuning job and
// one per trial (2+max_trial_count). p must have passed ValidateTrainingPipeline.
func PipelineJobIDs(p *trainingv1.TrainingPipeline) (int, error) {
	_, tuning, err := trainingspec.PipelineTask(p)
	if err != nil {
		return 0, errs.Invalid("training_pipeline.training_task_inputs", "%v", err)
	}
	if tuning != nil {
		return 2 + int(tuning.GetMaxTrialCount()), nil
	}
	return 2, nil
}

// SpecGPUs is the GPUs a CustomJob spec's own cluster has: each worker
// pool's accelerator_count × replica_count; 0 with persistent_resource_id
// (it runs on a cluster the project's quota counts already).
func SpecGPUs(s *trainingv1.CustomJobSpec) int64 {
	if s.GetPersistentResourceId() != "" {
		return 0
	}
	var n int64
	for _, p := range s.GetWorkerPoolSpecs() {
		n += int64(max(p.GetMachineSpec().GetAcceleratorCount(), 0)) * max(p.GetReplicaCount(), 0)
	}
	return n
}

// TrainingGPUs is the GPUs a training resource holds at most at once, as
// the GPU quota counts it: a CustomJob's SpecGPUs; a tuning job's
// parallel_trial_count (at least 1) × its trial's; a pipeline's task's.
func TrainingGPUs(m proto.Message) int64 {
	switch r := m.(type) {
	case *trainingv1.CustomJob:
		return SpecGPUs(r.GetJobSpec())
	case *trainingv1.HyperparameterTuningJob:
		return int64(max(r.GetParallelTrialCount(), 1)) * SpecGPUs(r.GetTrialJobSpec())
	case *trainingv1.TrainingPipeline:
		custom, tuning, err := trainingspec.PipelineTask(r)
		switch {
		case err != nil:
			return 0
		case tuning != nil:
			return TrainingGPUs(tuning)
		}
		return SpecGPUs(custom)
	}
	return 0
}

// AcceptCustomJob is j as accepted with id under parent: named, owned by
// user, QUEUED, created now, with its cluster named; the other output-only
// fields cleared. Its scheduler job is not named: the training service
// names it when it submits it, and a CustomJob cancelled before that never
// has one.
func AcceptCustomJob(j *trainingv1.CustomJob, parent TrainingParent, id int64, user string, now time.Time) *trainingv1.CustomJob {
	j = proto.Clone(j).(*trainingv1.CustomJob)
	ts := timestamppb.New(now)
	j.Name = parent.Name(CollectionCustomJobs, id)
	j.User, j.State, j.CreateTime, j.UpdateTime = user, trainingv1.JobState_JOB_STATE_QUEUED, ts, ts
	j.StartTime, j.EndTime, j.Error, j.WebAccessUris, j.RestartCount = nil, nil, nil, nil, 0
	// The training service says where the output is kept when it takes
	// the job; until then (the accepted record a Get answers with) a
	// caller's own would be shown as Loom's.
	j.OutputDir, j.OutputWarning, j.Job = "", "", ""
	j.Cluster = CustomJobCluster(parent.Project, id, j.GetJobSpec())
	return j
}

// CustomJobCluster is the cluster a CustomJob runs on: its own ephemeral
// cj-{id}, or persistent_resource_id's.
func CustomJobCluster(project string, id int64, spec *trainingv1.CustomJobSpec) string {
	if pr := spec.GetPersistentResourceId(); pr != "" {
		return resname.Cluster{Project: project, ID: pr}.String()
	}
	return resname.Cluster{Project: project, ID: "cj-" + strconv.FormatInt(id, 10)}.String()
}

// AcceptTuningJob is j as accepted with id (the first of its block):
// named, owned by user, QUEUED, created now, without trials.
func AcceptTuningJob(j *trainingv1.HyperparameterTuningJob, parent TrainingParent, id int64, user string, now time.Time) *trainingv1.HyperparameterTuningJob {
	j = proto.Clone(j).(*trainingv1.HyperparameterTuningJob)
	ts := timestamppb.New(now)
	j.Name = parent.Name(CollectionTuningJobs, id)
	j.User, j.State, j.CreateTime, j.UpdateTime = user, trainingv1.JobState_JOB_STATE_QUEUED, ts, ts
	j.StartTime, j.EndTime, j.Error, j.Trials, j.BestTrial = nil, nil, nil, nil, ""
	j.MeasurementsThinned, j.OmittedTrials = false, nil
	return j
}

// AcceptPipeline is p as accepted with id (the first of its block): named,
// owned by user, QUEUED, created now, its outputs cleared.
func AcceptPipeline(p *trainingv1.TrainingPipeline, parent TrainingParent, id int64, user string, now time.Time) *trainingv1.TrainingPipeline {
	p = proto.Clone(p).(*trainingv1.TrainingPipeline)
	ts := timestamppb.New(now)
	p.Name = parent.Name(CollectionPipelines, id)
	p.User, p.State, p.CreateTime, p.UpdateTime = user, trainingv1.PipelineState_PIPELINE_STATE_QUEUED, ts, ts
	p.StartTime, p.EndTime, p.Error, p.TrainingTaskMetadata, p.ModelVersion = nil, nil, nil, nil, ""
	return p
}

// JobStateEnded reports whether a CustomJob or tuning job in s has ended.
func JobStateEnded(s trainingv1.JobState) bool {
	switch s {
	case trainingv1.JobState_JOB_STATE_SUCCEEDED, trainingv1.JobState_JOB_STATE_FAILED, trainingv1.JobState_JOB_STATE_CANCELLED,
		trainingv1.JobState_JOB_STATE_EXPIRED, trainingv1.JobState_JOB_STATE_PARTIALLY_SUCCEEDED:
		return true
	}
	return false
}

// PipelineStateEnded reports whether a pipeline in s has ended.
func PipelineStateEnded(s trainingv1.PipelineState) bool {
	switch s {
	case trainingv1.PipelineState_PIPELINE_STATE_SUCCEEDED, trainingv1.PipelineState_PIPELINE_STATE_FAILED,
		trainingv1.PipelineState_PIPELINE_STATE_CANCELLED:
		return true
	}
	return false
}

// Package domain is the registry's pure core: which job events register a
// model version, and what the version looks like. It does no I/O; the clock is
// passed in.
package domain

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// idPattern is the shape of project and model ids (as cluster ids in CONTRACTS.md).
var idPattern = regexp.MustCompile(`^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$`)

// ValidID reports whether id can name a project or a model.
func ValidID(id string) bool { return idPattern.MatchString(id) }

// ModelName returns "projects/{project}/models/{model}".
func ModelName(project, model string) string {
	return "projects/" + project + "/models/" + model
}

// VersionName returns "{model}/versions/{n}".
func VersionName(model string, n int64) string {
	return model + "/versions/" + strconv.FormatInt(n, 10)
}

// ParseProject returns the project of a parent "projects/{project}", or an
// error saying what is wrong with it.
func ParseProject(parent string) (string, error) {
	p, ok := strings.CutPrefix(parent, "projects/")
	if !ok || !ValidID(p) {
		return "", fmt.Errorf("want projects/{project}, got %q", parent)
	}
	return p, nil
}

// ParseModelName checks "projects/{project}/models/{model}".
func ParseModelName(name string) (project, model string, err error) {
	parts := strings.Split(name, "/")
	if len(parts) != 4 || parts[0] != "projects" || parts[2] != "models" || !ValidID(parts[1]) || !ValidID(parts[3]) {
		return "", "", fmt.Errorf("want projects/{project}/models/{model}, got %q", name)
	}
	return parts[1], parts[3], nil
}

// jobProject returns the project of a job name "projects/{p}/jobs/{id}".
func jobProject(job string) (string, bool) {
	parts := strings.Split(job, "/")
	if len(parts) != 4 || parts[0] != "projects" || parts[2] != "jobs" || parts[1] == "" || parts[3] == "" {
		return "", false
	}
	return parts[1], true
}

// State is everything the registry knows. The zero value is empty; use NewState.
type State struct {
	// Models by name.
	Models map[string]*loomv1.Model
	// Versions by model name, in version order.
	Versions map[string][]*loomv1.ModelVersion
	// JobVersions maps a job name to the version it registered: a job
	// registers at most one version, whatever is redelivered.
	JobVersions map[string]string
}

// NewState returns an empty state.
func NewState() *State {
	return &State{
		Models:      map[string]*loomv1.Model{},
		Versions:    map[string][]*loomv1.ModelVersion{},
		JobVersions: map[string]string{},
	}
}

// Registration is the change one job event makes: the model after it, the new
// version, and the event to emit.
type Registration struct {
	Model   *loomv1.Model
	Version *loomv1.ModelVersion
	Event   *eventsv1.ModelVersionRegistered
}

// Decide returns the registration a JobChanged causes, or nil when it causes
// none: the job is not COMPLETED, declares no model output, has a bad name or
// model id, or registered a version before. It does not change s.
func Decide(s *State, ev *eventsv1.JobChanged, now time.Time) *Registration {
	job := ev.GetJob()
	if job.GetState() != loomv1.JobState_COMPLETED || job.GetModelOutput() == nil {
		return nil
	}
	modelID := job.GetModelOutput().GetModelId()
	project, ok := jobProject(job.GetName())
	if !ok || !ValidID(modelID) {
		return nil
	}
	if _, done := s.JobVersions[job.GetName()]; done {
		return nil
	}
	modelName := ModelName(project, modelID)
	ts := timestamppb.New(now)
	var model *loomv1.Model
	if m, ok := s.Models[modelName]; ok {
		model = proto.Clone(m).(*loomv1.Model)
	} else {
		model = &loomv1.Model{Name: modelName, CreateTime: ts}
	}
	model.LatestVersion++
	model.UpdateTime = ts
	v := &loomv1.ModelVersion{
		Name:       VersionName(modelName, model.LatestVersion),
		Version:    model.LatestVersion,
		SourceJob:  job.GetName(),
		CreateTime: ts,
		Labels:     map[string]string{"job_id": job.GetJobId()},
	}
	if dir := ev.GetModelDir(); dir != "" {
		v.ArtifactUri = "file://" + dir
	}
	if c := job.GetCluster(); c != "" {
		v.Labels["cluster"] = c[strings.LastIndex(c, "/")+1:]
	}
	return &Registration{
		Model:   model,
		Version: v,
		Event:   &eventsv1.ModelVersionRegistered{Version: v, Model: modelName},
	}
}

// Apply records r in s. Call it only after r was stored durably.
func (s *State) Apply(r *Registration) {
	s.Models[r.Model.GetName()] = r.Model
	s.Versions[r.Model.GetName()] = append(s.Versions[r.Model.GetName()], r.Version)
	s.JobVersions[r.Version.GetSourceJob()] = r.Version.GetName()
}

// Load rebuilds a state from stored models, versions (any order) and the
// job → version records.
func Load(models []*loomv1.Model, versions []*loomv1.ModelVersion, jobVersions map[string]string) *State {
	s := NewState()
	for j, v := range jobVersions {
		s.JobVersions[j] = v
	}
	for _, m := range models {
		s.Models[m.GetName()] = m
	}
	for _, v := range versions {
		model := strings.TrimSuffix(v.GetName(), "/versions/"+strconv.FormatInt(v.GetVersion(), 10))
		s.Versions[model] = append(s.Versions[model], v)
		if v.GetSourceJob() != "" {
			s.JobVersions[v.GetSourceJob()] = v.GetName()
		}
	}
	for _, vs := range s.Versions {
		sort.Slice(vs, func(i, j int) bool { return vs[i].GetVersion() < vs[j].GetVersion() })
	}
	return s
}

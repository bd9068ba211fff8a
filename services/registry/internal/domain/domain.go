// Package domain is the registry's pure core: which job events and
// UploadModel commands register a model version, and what the version looks
// like. It does no I/O (the artifact directory is checked by the caller); the
// clock is passed in.
package domain

import (
	"sort"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/resname"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// State is everything the registry knows. The zero value is empty; use NewState.
type State struct {
	// Models by name.
	Models map[string]*loomv1.Model
	// Versions by model name, in version order.
	Versions map[string][]*loomv1.ModelVersion
	// JobVersions maps a job name to the version it registered: a job
	// registers at most one version, whatever is redelivered.
	JobVersions map[string]string
	// Requests maps an UploadModel's request_id to the version it
	// registered, for the last MaxRequests uploads: a command sent again
	// (a new event, the same request_id) answers that version.
	Requests map[string]Request
	// requestOrder holds Requests' ids by Seq, oldest first: the next to
	// evict.
	requestOrder []string
	// byProject indexes Models' names by project, so that a project's list
	// and count read its own models only (putModel, dropModel keep it).
	byProject map[string]map[string]bool
}

// putModel stores m in Models and the project index.
func (s *State) putModel(m *loomv1.Model) {
	name := m.GetName()
	s.Models[name] = m
	if mn, err := resname.SplitModel(name); err == nil {
		if s.byProject == nil {
			s.byProject = map[string]map[string]bool{}
		}
		if s.byProject[mn.Project] == nil {
			s.byProject[mn.Project] = map[string]bool{}
		}
		s.byProject[mn.Project][name] = true
	}
}

// dropModel deletes model name and its versions.
func (s *State) dropModel(name string) {
	delete(s.Models, name)
	delete(s.Versions, name)
	if mn, err := resname.SplitModel(name); err == nil {
		delete(s.byProject[mn.Project], name)
		if len(s.byProject[mn.Project]) == 0 {
			delete(s.byProject, mn.Project)
		}
	}
}

// ModelsOf returns the names of project's models (in no order).
func (s *State) ModelsOf(project string) []string {
	names := make([]string, 0, len(s.byProject[project]))
	for n := range s.byProject[project] {
		names = append(names, n)
	}
	return names
}

// ModelCount is how many models project has.
func (s *State) ModelCount(project string) int { return len(s.byProject[project]) }

// Request is the record of one accepted UploadModel: Seq orders the records
// (the oldest is evicted first), Version is the version's name.
type Request struct {
	Seq     int64
	Version string
}

// NewState returns an empty state.
func NewState() *State {
	return &State{
		Models:      map[string]*loomv1.Model{},
		Versions:    map[string][]*loomv1.ModelVersion{},
		JobVersions: map[string]string{},
		Requests:    map[string]Request{},
	}
}

// Registration is the change one job event or UploadModel makes: the model
// after it, the new version, and the event to emit. An upload's also records
// its request (RequestID → Request) and evicts the oldest request records
// (Evict) to keep at most MaxRequests.
type Registration struct {
	Model   *loomv1.Model
	Version *loomv1.ModelVersion
	Event   *eventsv1.ModelVersionRegistered

	RequestID string
	Request   Request
	Evict     []string
	// Moved are the model's other versions whose aliases the new version
	// took (rewritten with it).
	Moved []*loomv1.ModelVersion
	// Overwritten are versions of any model registered from the same
	// artifact location with another artifact set: this registration shows
	// their files were replaced, so they are rewritten with it, marked
	// artifact_changed (markOverwritten).
	Overwritten []*loomv1.ModelVersion
}

// Decide returns the registration a JobChanged causes, or nil when it causes
// none: the job is not COMPLETED, declares no model output, has a bad name or
// model id, or registered a version before. It does not change s. The
// version records no MANIFEST digest: DecideRecorded's, with "".
func Decide(s *State, ev *eventsv1.JobChanged, now time.Time) *Registration {
	return DecideRecorded(s, ev, "", now)
}

// DecideRecorded is Decide with the SHA-256 of the MANIFEST the registry
// recorded for the job's model directory (artifact.Record; "" when it
// could not): the version keeps it (manifest_sha256), so that an export
// copies the set only as it was when the job completed, and a later
// registration of the same set is no change (markOverwritten).
func DecideRecorded(s *State, ev *eventsv1.JobChanged, manifest string, now time.Time) *Registration {
	job := ev.GetJob()
	if job.GetState() != loomv1.JobState_COMPLETED || job.GetModelOutput() == nil {
		return nil
	}
	modelID := job.GetModelOutput().GetModelId()
	jn, err := resname.SplitJob(job.GetName())
	if err != nil || !resname.ValidID(modelID) {
		return nil
	}
	if _, done := s.JobVersions[job.GetName()]; done {
		return nil
	}
	modelName := resname.Model{Project: jn.Project, ID: modelID}.String()
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
		Name:       resname.VersionIn(modelName, model.LatestVersion),
		Version:    model.LatestVersion,
		SourceJob:  job.GetName(),
		CreateTime: ts,
		Labels:     map[string]string{"job_id": job.GetJobId()},
		Lineage:    &loomv1.ModelLineage{Job: job.GetName(), Attempt: ev.GetAttempt(), RecordedBy: RecordedByLoom},
	}
	if dir := ev.GetModelDir(); dir != "" {
		// The job wrote it as its owner: an export reads only their files.
		v.ArtifactUri, v.ArtifactOwner, v.ManifestSha256 = "file://"+dir, job.GetUser(), manifest
	}
	// The first version of a model holds "default".
	v.Aliases = nil
	if holder(s.Versions[modelName], DefaultAlias) == nil {
		v.Aliases = []string{DefaultAlias}
	}
	if c := job.GetCluster(); c != "" {
		v.Labels["cluster"] = c // a bare id, as an old record may hold
		if cn, err := resname.SplitCluster(c); err == nil {
			v.Labels["cluster"] = cn.ID
		}
	}
	reg := &Registration{
		Model:   model,
		Version: v,
		Event:   &eventsv1.ModelVersionRegistered{Version: v, Model: modelName},
	}
	markOverwritten(s, reg, now)
	return reg
}

// Apply records r in s. Call it only after r was stored durably.
func (s *State) Apply(r *Registration) {
	s.putModel(r.Model)
	if len(r.Moved) > 0 {
		s.ApplyChange(&Change{Model: r.Model, Versions: r.Moved})
	}
	s.replaceVersions(r.Overwritten)
	s.Versions[r.Model.GetName()] = append(s.Versions[r.Model.GetName()], r.Version)
	if j := r.Version.GetSourceJob(); j != "" {
		// As Load does: a job named as a version's source registers no
		// other version through its model_output.
		s.JobVersions[j] = r.Version.GetName()
	}
	for _, id := range r.Evict {
		delete(s.Requests, id)
	}
	if len(r.Evict) > 0 {
		s.requestOrder = dropIDs(s.requestOrder, r.Evict)
	}
	if r.RequestID != "" {
		s.Requests[r.RequestID] = r.Request
		s.requestOrder = append(s.requestOrder, r.RequestID)
	}
}

// dropIDs returns order without the ids of drop (the evicted are the oldest,
// at its front, so this is cheap).
func dropIDs(order, drop []string) []string {
	gone := make(map[string]bool, len(drop))
	for _, id := range drop {
		gone[id] = true
	}
	out := order[:0]
	for _, id := range order {
		if !gone[id] {
			out = append(out, id)
		}
	}
	return out
}

// Load rebuilds a state from stored models, versions (any order), the
// job → version records and the request records (any order).
func Load(models []*loomv1.Model, versions []*loomv1.ModelVersion, jobVersions map[string]string, requests map[string]Request) *State {
	s := NewState()
	for j, v := range jobVersions {
		s.JobVersions[j] = v
	}
	for id, r := range requests {
		s.Requests[id] = r
		s.requestOrder = append(s.requestOrder, id)
	}
	sort.Slice(s.requestOrder, func(i, j int) bool {
		return s.Requests[s.requestOrder[i]].Seq < s.Requests[s.requestOrder[j]].Seq
	})
	for _, m := range models {
		s.putModel(m)
	}
	for _, v := range versions {
		model := v.GetName()
		if mv, err := resname.SplitModelVersion(v.GetName()); err == nil && mv.Version == v.GetVersion() {
			model = mv.Model.String()
		}
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

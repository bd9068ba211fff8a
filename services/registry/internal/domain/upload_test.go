package domain

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/resname"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

func upload(rid string) *eventsv1.UploadModel {
	return &eventsv1.UploadModel{
		RequestId: rid,
		Project:   "default",
		ModelId:   "tiny",
		Model: &trainingv1.Model{
			DisplayName: "Tiny", Description: "a tiny model", ArtifactUri: "file:///data/m/1/",
			Labels: map[string]string{"team": "ml"},
		},
		Lineage: &loomv1.ModelLineage{
			Job: "projects/default/jobs/12", Attempt: 1, CustomJob: "projects/default/locations/here/customJobs/12",
			TrainingPipeline: "projects/default/locations/here/trainingPipelines/10",
			Hyperparameters:  map[string]string{"learning_rate": "0.01"}, Metrics: map[string]float64{"val_loss": 0.25},
		},
		User: "alice",
	}
}

// register validates, registers and applies cmd, failing the test on a
// refusal.
func register(t *testing.T, s *State, cmd *eventsv1.UploadModel) *Registration {
	t.Helper()
	u, err := ValidateUpload(s, cmd)
	if err != nil {
		t.Fatalf("ValidateUpload(%s): %v", cmd.GetRequestId(), err)
	}
	r := RegisterUpload(s, u, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	s.Apply(r)
	return r
}

func TestUploadRegistersNextVersion(t *testing.T) {
	t.Parallel()
	s := NewState()
	cmd := upload("r1")
	r := register(t, s, cmd)
	v := r.Version
	if v.GetName() != "projects/default/models/tiny/versions/1" || r.Model.GetLatestVersion() != 1 {
		t.Fatalf("first upload registered %s (latest %d)", v.GetName(), r.Model.GetLatestVersion())
	}
	// A service's upload (no recorded_by): Loom's record of what ran.
	want := proto.Clone(cmd.GetLineage()).(*loomv1.ModelLineage)
	want.RecordedBy = RecordedByLoom
	if !proto.Equal(v.GetLineage(), want) || cmd.GetLineage().GetRecordedBy() != "" {
		t.Fatalf("lineage %v, want a copy of %v", v.GetLineage(), want)
	}
	if v.GetDisplayName() != "Tiny" || v.GetDescription() != "a tiny model" || v.GetLabels()["team"] != "ml" ||
		v.GetArtifactUri() != "file:///data/m/1" || v.GetSourceJob() != "projects/default/jobs/12" {
		t.Fatalf("version %v", v)
	}
	if e := r.Event; e.GetRequestId() != "r1" || e.GetModel() != "projects/default/models/tiny" || e.GetVersion() != v {
		t.Fatalf("event %v", e)
	}
	// parent_model: the next version of that model; version_description
	// wins over the model's description.
	next := upload("r2")
	next.ModelId = ""
	next.ParentModel = "projects/default/models/tiny"
	next.Model.VersionDescription = "retrained"
	r2 := register(t, s, next)
	if r2.Version.GetVersion() != 2 || r2.Version.GetDescription() != "retrained" || r2.Model.GetCreateTime() == nil {
		t.Fatalf("parent_model upload registered %v", r2.Version)
	}
	if got, ok := s.Answered("r1"); !ok || got.GetName() != v.GetName() {
		t.Fatalf("Answered(r1) = %v %v", got, ok)
	}
	if _, ok := s.Answered("r3"); ok {
		t.Fatal("an unknown request is answered")
	}
}

func TestUploadRefusals(t *testing.T) {
	t.Parallel()
	s := NewState()
	register(t, s, upload("seed"))
	s.Models["projects/other/models/theirs"] = &loomv1.Model{Name: "projects/other/models/theirs", LatestVersion: 1}
	many := map[string]string{}
	for i := range MaxLabels + 1 {
		many[fmt.Sprintf("k%d", i)] = "v"
	}
	for name, tc := range map[string]struct {
		edit func(c *eventsv1.UploadModel)
		want string
	}{
		"no request id":     {func(c *eventsv1.UploadModel) { c.RequestId = "" }, "request_id: required"},
		"long request id":   {func(c *eventsv1.UploadModel) { c.RequestId = strings.Repeat("r", MaxRequestID+1) }, "request_id: longer"},
		"bad project":       {func(c *eventsv1.UploadModel) { c.Project = "Default" }, "project:"},
		"bad model id":      {func(c *eventsv1.UploadModel) { c.ModelId = "Tiny_Model" }, "model_id:"},
		"unknown parent":    {func(c *eventsv1.UploadModel) { c.ParentModel = "projects/default/models/nope"; c.ModelId = "" }, "parent_model: projects/default/models/nope does not exist"},
		"parent elsewhere":  {func(c *eventsv1.UploadModel) { c.ParentModel = "projects/other/models/theirs"; c.ModelId = "" }, "is not in project default"},
		"bad parent name":   {func(c *eventsv1.UploadModel) { c.ParentModel = "models/tiny" }, "parent_model:"},
		"parent and id":     {func(c *eventsv1.UploadModel) { c.ParentModel = "projects/default/models/tiny"; c.ModelId = "other" }, "names another model"},
		"no model named":    {func(c *eventsv1.UploadModel) { c.ModelId = ""; c.Model.DisplayName = "" }, "one of parent_model, model_id and model.display_name"},
		"long display name": {func(c *eventsv1.UploadModel) { c.Model.DisplayName = strings.Repeat("é", MaxDisplayName+1) }, "model.display_name: 129 characters"},
		"long description":  {func(c *eventsv1.UploadModel) { c.Model.Description = strings.Repeat("d", MaxDescription+1) }, "model.description:"},
		"long version desc": {func(c *eventsv1.UploadModel) { c.Model.VersionDescription = strings.Repeat("d", MaxDescription+1) }, "model.version_description:"},
		"too many labels":   {func(c *eventsv1.UploadModel) { c.Model.Labels = many }, "model.labels: 65 labels"},
		"bad label key":     {func(c *eventsv1.UploadModel) { c.Model.Labels = map[string]string{"Team": "ml"} }, `key "Team"`},
		"bad label value":   {func(c *eventsv1.UploadModel) { c.Model.Labels = map[string]string{"team": "M L"} }, "model.labels[team]"},
		"no artifact":       {func(c *eventsv1.UploadModel) { c.Model.ArtifactUri = "" }, "model.artifact_uri: required"},
		"ftp artifact":      {func(c *eventsv1.UploadModel) { c.Model.ArtifactUri = "ftp://b/m" }, "only file:// URIs, absolute paths and s3://, gs://, azblob:// bucket URLs"},
		"file host":         {func(c *eventsv1.UploadModel) { c.Model.ArtifactUri = "file://host/m" }, "not a host"},
		"relative artifact": {func(c *eventsv1.UploadModel) { c.Model.ArtifactUri = "data/m" }, "not an absolute path"},
		"escaped artifact":  {func(c *eventsv1.UploadModel) { c.Model.ArtifactUri = "file:///data/alice/%62ob" }, "must not hold '%', '?' or '#'"},
		"query artifact":    {func(c *eventsv1.UploadModel) { c.Model.ArtifactUri = "/data/m?x" }, "must not hold '%', '?' or '#'"},
		"reserved alias":    {func(c *eventsv1.UploadModel) { c.Model.VersionAliases = []string{"v2"} }, "model.version_aliases[0]: alias \"v2\" is reserved"},
		"alias twice":       {func(c *eventsv1.UploadModel) { c.Model.VersionAliases = []string{"prod", "prod"} }, "named twice"},
		"control in name":   {func(c *eventsv1.UploadModel) { c.Model.DisplayName = "a\x1bb" }, "control characters"},
		// A tester's report: these were stored and printed raw by loom
		// models get and versions.
		"escape in description":  {func(c *eventsv1.UploadModel) { c.Model.Description = "x\x1b[2J" }, "model.description: must not hold control characters other than newlines and tabs (it holds U+001B)"},
		"escape in version desc": {func(c *eventsv1.UploadModel) { c.Model.VersionDescription = "\x1b]0;pwned\x07" }, "model.version_description: must not hold control characters"},
		"CR in description":      {func(c *eventsv1.UploadModel) { c.Model.Description = "a\rb" }, "model.description: must not hold control characters"},
		"bidi in display name":   {func(c *eventsv1.UploadModel) { c.Model.DisplayName = "a\u202eb" }, "model.display_name: must not hold control characters (it holds U+202E)"},
		"escape in lineage.trial": {func(c *eventsv1.UploadModel) {
			c.Lineage = &loomv1.ModelLineage{Trial: "\x1b[2J"}
		}, "lineage.trial: must not hold control characters (it holds U+001B)"},
		"escape in lineage.job": {func(c *eventsv1.UploadModel) { c.Lineage.Job = "x\x1b]0;pwned\x07" }, "lineage.job: must not hold control characters"},
		"escape in artifact":    {func(c *eventsv1.UploadModel) { c.Model.ArtifactUri = "/data/\x1b[2J" }, "model.artifact_uri: must not hold control characters"},
		"escape in bucket URI":  {func(c *eventsv1.UploadModel) { c.Model.ArtifactUri = "s3://b/\x1b[2J" }, "model.artifact_uri: must not hold control characters"},
		"escape in checkpoint":  {func(c *eventsv1.UploadModel) { c.Lineage.CheckpointUri = "file:///c\x1b[2J" }, "lineage.checkpoint_uri: must not hold"},
		"escape in a hyperparameter": {func(c *eventsv1.UploadModel) {
			c.Lineage.Hyperparameters = map[string]string{"lr": "0.1\x1b[2J"}
		}, "lineage.hyperparameters[lr]: must not hold"},
		"escape in a hyperparameter name": {func(c *eventsv1.UploadModel) {
			c.Lineage.Hyperparameters = map[string]string{"l\x1br": "0.1"}
		}, "lineage.hyperparameters: a name must not hold"},
		"escape in a metric name": {func(c *eventsv1.UploadModel) {
			c.Lineage.Metrics = map[string]float64{"\u009bloss": 1}
		}, "lineage.metrics: a name must not hold"},
		"huge lineage": {func(c *eventsv1.UploadModel) {
			c.Lineage = &loomv1.ModelLineage{Hyperparameters: many2(MaxLineageEntries + 1)}
		}, "lineage.hyperparameters: 257 entries"},
		"long lineage name": {func(c *eventsv1.UploadModel) {
			c.Lineage = &loomv1.ModelLineage{Trial: strings.Repeat("t", MaxLineageName+1)}
		}, "lineage.trial:"},
		"vertex parent @": {func(c *eventsv1.UploadModel) {
			c.ParentModel = "projects/default/locations/global/models/tiny@2"
			c.ModelId = ""
		}, "names a version"},
	} {
		cmd := upload("r-" + name)
		tc.edit(cmd)
		if _, err := ValidateUpload(s, cmd); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: ValidateUpload = %v, want a refusal containing %q", name, err, tc.want)
		}
	}
	if u, err := ValidateUpload(s, upload("plain path")); err != nil || u.Model != "projects/default/models/tiny" || u.New {
		t.Fatalf("model_id of an existing model: %+v %v", u, err)
	}
	multi := upload("multi-line")
	multi.Model.Description, multi.Model.VersionDescription = "a model\n\twith notes", "line one\nline two"
	if _, err := ValidateUpload(s, multi); err != nil {
		t.Fatalf("descriptions with newlines and tabs: %v", err)
	}
	vertex := upload("vertex parent")
	vertex.ParentModel, vertex.ModelId = "projects/default/locations/global/models/tiny", ""
	if u, err := ValidateUpload(s, vertex); err != nil || u.Model != "projects/default/models/tiny" {
		t.Fatalf("Vertex parent_model: %+v %v", u, err)
	}
	cmd := upload("path")
	cmd.Model.ArtifactUri = "/data/./m/../m2"
	if u, err := ValidateUpload(s, cmd); err != nil || u.Dir != "/data/m2" {
		t.Fatalf("absolute path: %+v %v, want dir /data/m2", u, err)
	}
	// A bucket URL is kept as given, for the registry to read through
	// libs/blobstore; the version records it unchanged.
	for _, uri := range []string{"s3://models/tiny/1?region=eu-west-1", "gs://models/tiny/1", "azblob://models/tiny/1"} {
		cmd := upload("bucket " + uri)
		cmd.Model.ArtifactUri = uri
		u, err := ValidateUpload(s, cmd)
		if err != nil || u.Dir != "" || u.URI != uri {
			t.Fatalf("%s: %+v %v, want URI kept and no Dir", uri, u, err)
		}
		if got := u.artifactURI(); got != uri {
			t.Errorf("%s: version artifact_uri %q", uri, got)
		}
	}
}

func many2(n int) map[string]string {
	m := map[string]string{}
	for i := range n {
		m[fmt.Sprintf("p%d", i)] = "1"
	}
	return m
}

// TestModelFromDisplayName: without parent_model and model_id the upload
// makes a new model named after its display name, never an existing one.
func TestModelFromDisplayName(t *testing.T) {
	t.Parallel()
	s := NewState()
	for i, want := range []string{"my-fancy-model-v2", "my-fancy-model-v2-2", "my-fancy-model-v2-3"} {
		cmd := upload(fmt.Sprint("d", i))
		cmd.ModelId = ""
		cmd.Model.DisplayName = "  My Fancy_Model (v2)!"
		r := register(t, s, cmd)
		if got := r.Model.GetName(); got != "projects/default/models/"+want || r.Version.GetVersion() != 1 {
			t.Fatalf("upload %d made %s v%d, want %s v1", i, got, r.Version.GetVersion(), want)
		}
	}
	for in, want := range map[string]string{
		"42 Answers":               "model-42-answers",
		"☃":                        "model",
		strings.Repeat("a", 80):    strings.Repeat("a", 63),
		strings.Repeat("ab-", 30):  strings.TrimSuffix(strings.Repeat("ab-", 21), "-"),
		"Résumé model":             "r-sum-model",
		"--lead and trail--":       "lead-and-trail",
		strings.Repeat("9", 70):    "model-" + strings.Repeat("9", 57),
		"UPPER lower 123 end-----": "upper-lower-123-end",
	} {
		got := slug(in)
		if got != want || !resname.ValidID(got) {
			t.Errorf("slug(%q) = %q (valid %v), want %q", in, got, resname.ValidID(got), want)
		}
	}
	// The suffix still fits a 63-character id.
	s.Models["projects/default/models/"+strings.Repeat("a", 63)] = &loomv1.Model{}
	if got := newModelFor(s, "default", strings.Repeat("a", 70)); got != "projects/default/models/"+strings.Repeat("a", 61)+"-2" {
		t.Fatalf("newModelFor after a 63-character id: %s", got)
	}
}

// TestRequestRecordsAreBounded: at most MaxRequests are kept, the oldest
// evicted first, and their order survives a reload.
func TestRequestRecordsAreBounded(t *testing.T) {
	t.Parallel()
	s := NewState()
	var versions []*loomv1.ModelVersion
	models := map[string]*loomv1.Model{}
	for i := range MaxRequests + 2 {
		// Two models take turns: one would pass MaxVersionsPerModel.
		cmd := upload(fmt.Sprint("r", i))
		if i%2 == 1 {
			cmd.ModelId = "tiny-b"
		}
		r := register(t, s, cmd)
		versions = append(versions, r.Version)
		models[r.Model.GetName()] = r.Model
		switch i {
		case MaxRequests - 1:
			if len(r.Evict) != 0 {
				t.Fatalf("upload %d evicted %v before the bound", i, r.Evict)
			}
		case MaxRequests, MaxRequests + 1:
			if want := fmt.Sprint("r", i-MaxRequests); len(r.Evict) != 1 || r.Evict[0] != want {
				t.Fatalf("upload %d evicted %v, want [%s]", i, r.Evict, want)
			}
		}
	}
	if len(s.Requests) != MaxRequests {
		t.Fatalf("%d request records, want %d", len(s.Requests), MaxRequests)
	}
	if _, ok := s.Answered("r1"); ok {
		t.Fatal("an evicted request is still answered")
	}
	requests := map[string]Request{}
	for id, r := range s.Requests {
		requests[id] = r
	}
	re := Load(slices.Collect(maps.Values(models)), versions, nil, requests)
	if v, ok := re.Answered("r2"); !ok || v.GetName() != "projects/default/models/tiny/versions/2" {
		t.Fatalf("after reload Answered(r2) = %v %v, want tiny's version 2", v, ok)
	}
	tiny := models["projects/default/models/tiny"]
	r := RegisterUpload(re, Upload{Cmd: upload("last"), Model: tiny.GetName(), Dir: "/m"}, time.Now())
	if len(r.Evict) != 1 || r.Evict[0] != "r2" || r.Request.Seq != int64(MaxRequests+3) || r.Version.GetVersion() != (MaxRequests+2)/2+1 {
		t.Fatalf("after reload: evict %v seq %d version %d", r.Evict, r.Request.Seq, r.Version.GetVersion())
	}
}

func TestJobVersionLineage(t *testing.T) {
	t.Parallel()
	ev := completed("5", "m")
	ev.Attempt = 3
	r := Decide(NewState(), ev, time.Now())
	if l := r.Version.GetLineage(); l.GetJob() != "projects/default/jobs/5" || l.GetAttempt() != 3 || l.GetRecordedBy() != RecordedByLoom {
		t.Fatalf("lineage %v, want job 5 attempt 3, recorded by Loom", l)
	}
	if r.Event.GetRequestId() != "" {
		t.Fatalf("a job's registration answers request %q", r.Event.GetRequestId())
	}
}

// TestUploadQuotas: an upload may not make a project's models, or a
// model's versions, more than their limits (ResourceExhausted, saying what
// to delete); another project, and a new version of a model under the
// limit, are not held back; a deleted model frees its place; and the
// project index a list reads holds exactly the project's models.
func TestUploadQuotas(t *testing.T) {
	t.Parallel()
	s := NewState()
	for i := range MaxModelsPerProject {
		s.putModel(&loomv1.Model{Name: fmt.Sprintf("projects/default/models/m%d", i), LatestVersion: 1})
	}
	s.putModel(&loomv1.Model{Name: "projects/other/models/x", LatestVersion: 1})
	if n, other := s.ModelCount("default"), s.ModelsOf("other"); n != MaxModelsPerProject || len(other) != 1 || other[0] != "projects/other/models/x" {
		t.Fatalf("index: %d models in default, %v in other", n, other)
	}
	fresh := upload("new")
	fresh.ModelId = "fresh"
	_, err := ValidateUpload(s, fresh)
	if err == nil || RefusalCode(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "project default has 10000 models, the limit; delete models") {
		t.Fatalf("a new model past the limit: %v (%v)", err, RefusalCode(err))
	}
	if _, err := ValidateUpload(s, func() *eventsv1.UploadModel { c := upload("v2"); c.ModelId = "m7"; return c }()); err != nil {
		t.Errorf("a new version of a model under its limit: %v", err)
	}
	elsewhere := upload("o")
	elsewhere.Project, elsewhere.ModelId, elsewhere.Lineage = "other", "y", nil
	if _, err := ValidateUpload(s, elsewhere); err != nil {
		t.Errorf("a new model in another project: %v", err)
	}
	s.ApplyChange(&Change{DeletedModel: "projects/default/models/m0"})
	if _, err := ValidateUpload(s, fresh); err != nil || s.ModelCount("default") != MaxModelsPerProject-1 {
		t.Errorf("a new model once one was deleted: %v (%d models)", err, s.ModelCount("default"))
	}

	full := "projects/default/models/m1"
	for i := range MaxVersionsPerModel {
		s.Versions[full] = append(s.Versions[full], &loomv1.ModelVersion{Name: fmt.Sprintf("%s/versions/%d", full, i+1), Version: int64(i + 1)})
	}
	more := upload("more")
	more.ModelId = "m1"
	if _, err := ValidateUpload(s, more); err == nil || RefusalCode(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), full+" has 10000 versions, the limit") {
		t.Errorf("a version past the limit: %v", err)
	}
}

// TestUploadLineageNames: a tester uploaded, from project bob, a version
// whose lineage named projects/default's CustomJob, job and pipeline.
// Every resource a lineage names must be a well-formed name of its kind in
// the model's own project (InvalidArgument naming the field otherwise),
// and its parts must agree; the training service's own lineage passes. A
// lineage the gateway stamped with its uploader stays that caller's word;
// any other is Loom's record.
func TestUploadLineageNames(t *testing.T) {
	t.Parallel()
	s := NewState()
	bob := func(l *loomv1.ModelLineage) *eventsv1.UploadModel {
		c := upload(fmt.Sprintf("bob-%d", len(s.Requests)))
		c.Project, c.ModelId, c.Lineage = "bob", "bobm", l
		return c
	}
	for name, tc := range map[string]struct {
		lineage *loomv1.ModelLineage
		want    string
	}{
		"another project's custom job": {&loomv1.ModelLineage{CustomJob: "projects/default/locations/us-central1/customJobs/1"},
			`lineage.custom_job: "projects/default/locations/us-central1/customJobs/1" is not a CustomJob of project bob (projects/bob/locations/{location}/customJobs/{id})`},
		"another project's job":      {&loomv1.ModelLineage{Job: "projects/default/jobs/1"}, `lineage.job: "projects/default/jobs/1" is not a job of project bob`},
		"another project's pipeline": {&loomv1.ModelLineage{TrainingPipeline: "projects/default/locations/l/trainingPipelines/3"}, "lineage.training_pipeline:"},
		"another project's tuning":   {&loomv1.ModelLineage{TuningJob: "projects/default/locations/l/hyperparameterTuningJobs/3"}, "lineage.tuning_job:"},
		"another project's trial":    {&loomv1.ModelLineage{Trial: "projects/default/locations/l/hyperparameterTuningJobs/3/trials/1"}, "lineage.trial:"},
		"a job that is no name":      {&loomv1.ModelLineage{Job: "jobs/1"}, "lineage.job:"},
		"a job of no id":             {&loomv1.ModelLineage{Job: "projects/bob/jobs/"}, "lineage.job:"},
		"a custom job in jobs":       {&loomv1.ModelLineage{CustomJob: "projects/bob/jobs/1"}, "lineage.custom_job:"},
		"a pipeline of the wrong kind": {&loomv1.ModelLineage{TrainingPipeline: "projects/bob/locations/l/customJobs/3"},
			"lineage.training_pipeline:"},
		"a named id":          {&loomv1.ModelLineage{CustomJob: "projects/bob/locations/l/customJobs/x"}, "lineage.custom_job:"},
		"a zero-padded id":    {&loomv1.ModelLineage{CustomJob: "projects/bob/locations/l/customJobs/01"}, "lineage.custom_job:"},
		"a bad location":      {&loomv1.ModelLineage{CustomJob: "projects/bob/locations/US/customJobs/1"}, "lineage.custom_job:"},
		"a longer name":       {&loomv1.ModelLineage{CustomJob: "projects/bob/locations/l/customJobs/1/x"}, "lineage.custom_job:"},
		"a trial of no id":    {&loomv1.ModelLineage{Trial: "projects/bob/locations/l/hyperparameterTuningJobs/3/trials/"}, "lineage.trial:"},
		"a trial of no study": {&loomv1.ModelLineage{Trial: "projects/bob/locations/l/trials/1"}, "lineage.trial:"},
		"a trial of another tuning job": {&loomv1.ModelLineage{TuningJob: "projects/bob/locations/l/hyperparameterTuningJobs/3",
			Trial: "projects/bob/locations/l/hyperparameterTuningJobs/4/trials/1"}, "is not a trial of lineage.tuning_job"},
		"a job_id of another job": {&loomv1.ModelLineage{Job: "projects/bob/jobs/5", JobId: "6"}, "lineage.job_id:"},
		"a job_id alone":          {&loomv1.ModelLineage{JobId: "6"}, "lineage.job_id:"},
	} {
		_, err := ValidateUpload(s, bob(tc.lineage))
		if err == nil || !strings.Contains(err.Error(), tc.want) || RefusalCode(err) != codes.InvalidArgument {
			t.Errorf("%s: ValidateUpload = %v, want InvalidArgument containing %q", name, err, tc.want)
		}
	}

	// The training service's lineage of a tuning pipeline, in the model's
	// project: accepted, and recorded as Loom's.
	loom := &loomv1.ModelLineage{
		Job: "projects/bob/jobs/13", JobId: "13", Attempt: 2, CustomJob: "projects/bob/locations/us-central1/customJobs/13",
		TrainingPipeline: "projects/bob/locations/us-central1/trainingPipelines/10",
		TuningJob:        "projects/bob/locations/us-central1/hyperparameterTuningJobs/11",
		Trial:            "projects/bob/locations/us-central1/hyperparameterTuningJobs/11/trials/2",
		Hyperparameters:  map[string]string{"lr": "0.1"}, Metrics: map[string]float64{"loss": 0.5},
		CheckpointUri: "file:///shared/bob/ckpt", DataUri: "gs://data/bob",
	}
	r := register(t, s, bob(loom))
	if got := r.Version.GetLineage(); got.GetRecordedBy() != RecordedByLoom || got.GetTrial() != loom.GetTrial() {
		t.Errorf("a service's lineage recorded as %v, want Loom's", got)
	}
	// The gateway stamps a caller's lineage with the caller: it stays
	// theirs.
	said := proto.Clone(loom).(*loomv1.ModelLineage)
	said.RecordedBy = "users/bob"
	if got := register(t, s, bob(said)).Version.GetLineage(); got.GetRecordedBy() != "users/bob" {
		t.Errorf("a caller's lineage recorded as %q, want users/bob's", got.GetRecordedBy())
	}
	// No lineage: nothing to say whose it is.
	if got := register(t, s, bob(nil)).Version.GetLineage(); proto.Size(got) != 0 {
		t.Errorf("no lineage recorded as %v, want none", got)
	}
}

// TestUploadCallerLineageMetricsAreFinite: a caller's lineage (recorded_by
// stamped by the gateway) stating a metric of NaN or ±Inf is refused,
// InvalidArgument naming the metric (a tester uploaded {"loss": "NaN"}
// and loom models get printed loss=NaN); Loom's own lineage (none stamped)
// is taken as the training service recorded it.
func TestUploadCallerLineageMetricsAreFinite(t *testing.T) {
	t.Parallel()
	s := NewState()
	for i, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		cmd := upload(fmt.Sprintf("caller-%d", i))
		cmd.Lineage = &loomv1.ModelLineage{RecordedBy: "users/bob", Metrics: map[string]float64{"acc": 0.9, "loss": v}}
		_, err := ValidateUpload(s, cmd)
		if err == nil || !strings.Contains(err.Error(), "lineage.metrics[loss]") || RefusalCode(err) != codes.InvalidArgument {
			t.Errorf("a caller's loss=%v: ValidateUpload = %v, want InvalidArgument naming lineage.metrics[loss]", v, err)
		}
	}
	ok := upload("caller-finite")
	ok.Lineage = &loomv1.ModelLineage{RecordedBy: "users/bob", Metrics: map[string]float64{"loss": 0.25}}
	if got := register(t, s, ok).Version.GetLineage().GetMetrics()["loss"]; got != 0.25 {
		t.Errorf("a caller's finite loss recorded as %v", got)
	}
	loom := upload("loom")
	loom.Lineage = &loomv1.ModelLineage{Metrics: map[string]float64{"loss": math.Inf(1)}}
	if got := register(t, s, loom).Version.GetLineage(); got.GetRecordedBy() != RecordedByLoom {
		t.Errorf("Loom's lineage recorded as %v", got)
	}
}

// TestUploadAliasBoundCountsDefault: a version holds at most MaxAliases,
// "default" among them. The first version of a model is given "default"
// whether or not it was asked for, so an upload asking for MaxAliases
// others would have made a version of MaxAliases+1 (one to which
// MergeVersionAliases can then add nothing). It is refused,
// naming the field and the limit; a later version, or one that names
// "default" itself, may ask for MaxAliases.
func TestUploadAliasBoundCountsDefault(t *testing.T) {
	t.Parallel()
	aliases := make([]string, MaxAliases)
	for i := range aliases {
		aliases[i] = fmt.Sprintf("a%d", i)
	}
	s := NewState()
	cmd := upload("r1")
	cmd.Model.VersionAliases = aliases
	_, err := ValidateUpload(s, cmd)
	if err == nil || !strings.HasPrefix(err.Error(), "model.version_aliases: ") || !strings.Contains(err.Error(), fmt.Sprint(MaxAliases)) ||
		!strings.Contains(err.Error(), `"default"`) {
		t.Fatalf("a first version asking for %d aliases besides default: %v", MaxAliases, err)
	}
	if c := RefusalCode(err); c != codes.InvalidArgument {
		t.Errorf("code %v", c)
	}

	// Naming default among them: MaxAliases in all, registered.
	cmd.Model.VersionAliases = append([]string{DefaultAlias}, aliases[1:]...)
	if v := register(t, s, cmd).Version; len(v.GetAliases()) != MaxAliases {
		t.Fatalf("aliases %v", v.GetAliases())
	}
	// A second version does not get default: MaxAliases others fit, and
	// are taken from version 1.
	cmd = upload("r2")
	cmd.Model.VersionAliases = aliases
	r := register(t, s, cmd)
	if len(r.Version.GetAliases()) != MaxAliases {
		t.Errorf("version 2 holds %v", r.Version.GetAliases())
	}
	for _, vs := range s.Versions {
		for _, v := range vs {
			if len(v.GetAliases()) > MaxAliases {
				t.Errorf("%s holds %d aliases: %v", v.GetName(), len(v.GetAliases()), v.GetAliases())
			}
		}
	}
}

// TestDeleteModelForgetsItsRequests: a model deleted and made again under
// the same id numbers its versions from 1 again, so a retry of an upload of
// the deleted model must not be answered with the new model's version of
// the same number: DeleteModel forgets the request records naming its
// versions (one deleted before it too), and keeps the other models'.
func TestDeleteModelForgetsItsRequests(t *testing.T) {
	t.Parallel()
	s := NewState()
	register(t, s, upload("r1"))
	other := upload("o1")
	other.ModelId = "other"
	register(t, s, other)
	second := upload("r2")
	second.ModelId, second.ParentModel = "", "projects/default/models/tiny"
	register(t, s, second)
	c, err := DeleteModel(s, ref(t, "projects/default/models/tiny"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Forgotten, []string{"r1", "r2"}) {
		t.Fatalf("DeleteModel forgets %v, want [r1 r2]", c.Deleted)
	}
	s.ApplyChange(c)
	again := register(t, s, upload("r3"))
	if again.Version.GetName() != "projects/default/models/tiny/versions/1" {
		t.Fatalf("the new model's first version is %s", again.Version.GetName())
	}
	if v, ok := s.Answered("r1"); ok {
		t.Fatalf("a retry of the deleted model's upload r1 is answered with %s, another upload's version", v.GetName())
	}
	if v, ok := s.Answered("o1"); !ok || v.GetName() != "projects/default/models/other/versions/1" {
		t.Fatalf("Answered(o1) = %v %v: another model's record was forgotten", v, ok)
	}
	if v, ok := s.Answered("r3"); !ok || v.GetName() != again.Version.GetName() {
		t.Fatalf("Answered(r3) = %v %v", v, ok)
	}
	if !slices.Equal(s.requestOrder, []string{"o1", "r3"}) {
		t.Fatalf("request order %v, want [o1 r3]", s.requestOrder)
	}
}

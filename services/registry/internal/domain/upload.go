package domain

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/termtext"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Bounds of an UploadModel. An upload past one is refused with a reason that
// names the field and the limit.
const (
	// MaxRequestID bounds request_id, which is stored per upload.
	MaxRequestID = 256
	// MaxDisplayName bounds model.display_name, in characters (as
	// libs/trainingspec bounds a training resource's).
	MaxDisplayName = 128
	// MaxDescription bounds model.description and model.version_description,
	// in characters.
	MaxDescription = 2048
	// MaxLabels bounds model.labels (as libs/trainingspec does).
	MaxLabels = 64
	// MaxLabelLen bounds a label's key and value, in characters (Vertex's).
	MaxLabelLen = 63
	// MaxArtifactURI bounds model.artifact_uri.
	MaxArtifactURI = 4096
	// MaxRequests is how many request_id → version records the registry
	// keeps: a command sent again within the last MaxRequests uploads
	// answers its version; older ones are forgotten (the inbox still drops
	// an exact redelivery for a week).
	MaxRequests = 10000
	// MaxModelsPerProject bounds the models an upload may create in one
	// project, and MaxVersionsPerModel the versions an upload may add to
	// one model: every list of them is built in memory, and the registry
	// holds them all. A job's model output is registered whatever the
	// counts: jobs are bounded where they are submitted.
	MaxModelsPerProject = 10000
	MaxVersionsPerModel = 10000
)

// labelKeyRE and labelValueRE are Vertex's label grammar: lowercase letters
// (international ones too), digits, '_' and '-'; a key starts with a letter.
var (
	labelKeyRE   = regexp.MustCompile(`^[\p{Ll}\p{Lo}][\p{Ll}\p{Lo}\p{N}_-]*$`)
	labelValueRE = regexp.MustCompile(`^[\p{Ll}\p{Lo}\p{N}_-]*$`)
)

// Upload is an UploadModel that passed ValidateUpload: the model it makes a
// version of (Model, a full name; New when the upload creates it) and the
// artifact set still to be checked: a local directory (Dir, absolute and
// clean) or, when Dir is "", a bucket URL (URI: s3://, gs://, azblob://,
// mem://) read through libs/blobstore.
type Upload struct {
	Cmd   *eventsv1.UploadModel
	Model string
	New   bool
	Dir   string
	URI   string
	// Owner is the OS account Dir was found to belong to when its files
	// were checked (the registry's I/O edge sets it): the version's
	// artifact_owner.
	Owner string
	// Manifest is the SHA-256 of the MANIFEST that check found complete
	// (the registry's I/O edge sets it): the version's manifest_sha256.
	Manifest string
}

// Answered returns the version an earlier UploadModel with requestID
// registered, when the record of it is still kept.
func (s *State) Answered(requestID string) (*loomv1.ModelVersion, bool) {
	r, ok := s.Requests[requestID]
	if !ok || requestID == "" {
		return nil, false
	}
	mv, err := resname.SplitModelVersion(r.Version)
	if err != nil {
		return nil, false
	}
	vs := s.Versions[mv.Model.String()]
	// Versions count from 1 without gaps: version n is at n-1.
	if i := mv.Version - 1; i < int64(len(vs)) && vs[i].GetName() == r.Version {
		return vs[i], true
	}
	for _, v := range vs {
		if v.GetName() == r.Version {
			return v, true
		}
	}
	return nil, false
}

// ValidateUpload checks cmd against the registry's state without touching
// the artifact directory: the request id, the project, parent_model (it must
// exist, in the project) or model_id (the resname grammar), the display name,
// descriptions and labels within bounds, and artifact_uri naming a local
// directory (file:// or an absolute path) or a bucket (BucketSchemes); the
// names, descriptions, artifact_uri and lineage printable on a terminal
// (textRefusal); and the lineage's names of the project's own resources
// (checkLineageNames). It returns the upload resolved, or an error whose
// text is the reason to refuse it (the field first).
func ValidateUpload(s *State, cmd *eventsv1.UploadModel) (Upload, error) {
	u := Upload{Cmd: cmd}
	m := cmd.GetModel()
	switch rid := cmd.GetRequestId(); {
	case rid == "":
		return u, fmt.Errorf("request_id: required")
	case len(rid) > MaxRequestID:
		return u, fmt.Errorf("request_id: longer than %d bytes", MaxRequestID)
	}
	if !resname.ValidID(cmd.GetProject()) {
		return u, fmt.Errorf("project: %q is not a project id (%s)", Clip(cmd.GetProject()), resname.IDPattern)
	}
	switch {
	case cmd.GetParentModel() != "":
		ref, err := ParseRef("parent_model", cmd.GetParentModel())
		if err != nil {
			return u, err
		}
		if ref.Selected() {
			return u, fmt.Errorf("parent_model: %s names a version; name the model, without \"@…\"", Clip(cmd.GetParentModel()))
		}
		pm := resname.Model{Project: ref.Project, ID: ref.ID}
		if pm.Project != cmd.GetProject() {
			return u, fmt.Errorf("parent_model: %s is not in project %s", pm, cmd.GetProject())
		}
		if id := cmd.GetModelId(); id != "" && id != pm.ID {
			return u, fmt.Errorf("model_id: %q names another model than parent_model %s", Clip(id), pm)
		}
		if _, ok := s.Models[pm.String()]; !ok {
			return u, fmt.Errorf("parent_model: %s does not exist", pm)
		}
		u.Model = pm.String()
	case cmd.GetModelId() != "":
		if !resname.ValidID(cmd.GetModelId()) {
			return u, fmt.Errorf("model_id: %q is not a model id (%s)", Clip(cmd.GetModelId()), resname.IDPattern)
		}
		u.Model = resname.Model{Project: cmd.GetProject(), ID: cmd.GetModelId()}.String()
		_, exists := s.Models[u.Model]
		u.New = !exists
	case m.GetDisplayName() != "":
		u.Model = newModelFor(s, cmd.GetProject(), m.GetDisplayName())
		u.New = true
	default:
		return u, fmt.Errorf("model: one of parent_model, model_id and model.display_name is required")
	}
	if u.New && s.ModelCount(cmd.GetProject()) >= MaxModelsPerProject {
		return u, quotaError(fmt.Sprintf("model: project %s has %d models, the limit; delete models it no longer needs (loom models delete) or upload as a version of one (parent_model)",
			cmd.GetProject(), s.ModelCount(cmd.GetProject())))
	}
	if n := len(s.Versions[u.Model]); !u.New && n >= MaxVersionsPerModel {
		return u, quotaError(fmt.Sprintf("model: %s has %d versions, the limit; delete versions it no longer needs (loom models delete MODEL@N)", u.Model, n))
	}
	if n := utf8.RuneCountInString(m.GetDisplayName()); n > MaxDisplayName {
		return u, fmt.Errorf("model.display_name: %d characters, more than %d", n, MaxDisplayName)
	}
	for _, d := range []struct{ field, text string }{
		{"model.description", m.GetDescription()}, {"model.version_description", m.GetVersionDescription()},
	} {
		if n := utf8.RuneCountInString(d.text); n > MaxDescription {
			return u, fmt.Errorf("%s: %d characters, more than %d", d.field, n, MaxDescription)
		}
		if why := textRefusal(d.text, DescriptionControls); why != "" {
			return u, fmt.Errorf("%s: %s", d.field, why)
		}
	}
	if why := textRefusal(m.GetDisplayName(), ""); why != "" {
		return u, fmt.Errorf("model.display_name: %s", why)
	}
	if err := checkLabels(m.GetLabels()); err != nil {
		return u, err
	}
	if n := len(m.GetVersionAliases()); n > MaxAliases {
		return u, fmt.Errorf("model.version_aliases: %d aliases, more than %d", n, MaxAliases)
	}
	seen := map[string]bool{}
	for i, a := range m.GetVersionAliases() {
		if err := CheckAlias(a); err != nil {
			return u, fmt.Errorf("model.version_aliases[%d]: %v", i, err)
		}
		if seen[a] {
			return u, fmt.Errorf("model.version_aliases[%d]: alias %q is named twice", i, a)
		}
		seen[a] = true
	}
	if n := len(m.GetVersionAliases()); n == MaxAliases && !seen[DefaultAlias] && holder(s.Versions[u.Model], DefaultAlias) == nil {
		// giveAliases adds "default" to the model's first version (or
		// to a version of a model none of whose versions holds it).
		return u, fmt.Errorf("model.version_aliases: %d aliases and %q, which this version is given as the model's default, more than %d: name %q among them, or one fewer", n, DefaultAlias, MaxAliases, DefaultAlias)
	}
	if err := checkLineage(cmd.GetLineage()); err != nil {
		return u, err
	}
	if err := checkLineageNames(cmd.GetLineage(), cmd.GetProject()); err != nil {
		return u, err
	}
	if why := textRefusal(m.GetArtifactUri(), ""); why != "" {
		// A directory may be named with an escape sequence; the version's
		// artifact_uri is printed by loom models get and versions.
		return u, fmt.Errorf("model.artifact_uri: %s", why)
	}
	if isBucketURI(m.GetArtifactUri()) {
		u.URI = m.GetArtifactUri()
		return u, nil
	}
	dir, err := ArtifactDir(m.GetArtifactUri())
	if err != nil {
		return u, err
	}
	u.Dir = dir
	return u, nil
}

// BucketSchemes are the artifact_uri schemes other than file:// that an
// upload may name: the stores libs/blobstore opens. The registry reads the
// artifact set through it (mem:// is an empty bucket, for tests).
var BucketSchemes = []string{"s3", "gs", "azblob", "mem"}

// isBucketURI reports whether uri is "<one of BucketSchemes>://...", within
// MaxArtifactURI and without NUL: what is wrong with the rest of it is
// blobstore.Open's to say, when the artifact set is checked.
func isBucketURI(uri string) bool {
	scheme, _, ok := strings.Cut(uri, "://")
	return ok && len(uri) <= MaxArtifactURI && !strings.ContainsRune(uri, 0) &&
		slices.Contains(BucketSchemes, scheme)
}

// ArtifactDir returns the local directory an artifact_uri names:
// "file:///abs/path" or "/abs/path", cleaned. Other schemes, hosts and
// relative paths are refused: the registry checks the files itself.
func ArtifactDir(uri string) (string, error) {
	const field = "model.artifact_uri"
	switch {
	case uri == "":
		return "", fmt.Errorf("%s: required", field)
	case len(uri) > MaxArtifactURI:
		return "", fmt.Errorf("%s: longer than %d bytes", field, MaxArtifactURI)
	case strings.ContainsRune(uri, 0):
		return "", fmt.Errorf("%s: contains a NUL byte", field)
	}
	p := uri
	if rest, ok := strings.CutPrefix(uri, "file://"); ok {
		p = rest
		if !strings.HasPrefix(p, "/") {
			return "", fmt.Errorf("%s: %q: a file:// URI names a local absolute path (file:///dir), not a host", field, Clip(uri))
		}
	} else if i := strings.Index(uri, "://"); i > 0 {
		return "", fmt.Errorf("%s: %q: only file:// URIs, absolute paths and %s:// bucket URLs are supported", field, Clip(uri), strings.Join(BucketSchemes[:len(BucketSchemes)-1], "://, "))
	}
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("%s: %q is not an absolute path", field, Clip(uri))
	}
	if strings.ContainsAny(p, "%?#") {
		// A URL reader (the export's) would decode or cut them: the
		// directory checked must be the one read.
		return "", fmt.Errorf("%s: %q: a local path must not hold '%%', '?' or '#'", field, Clip(uri))
	}
	return filepath.Clean(p), nil
}

// Lineage bounds: a lineage is stored with every version, so what a caller
// may put in it is bounded.
const (
	// MaxLineageName bounds each name and URI of a lineage, in bytes.
	MaxLineageName = 1024
	// MaxLineageEntries bounds hyperparameters and metrics, each.
	MaxLineageEntries = 256
	// MaxLineageKey and MaxLineageValue bound a hyperparameter's or
	// metric's name and a hyperparameter's value, in bytes.
	MaxLineageKey   = 128
	MaxLineageValue = 1024
)

// checkLineage checks a lineage's sizes, and that none of its text holds
// a character a terminal would act on (loom models get and versions print
// every part of it).
func checkLineage(l *loomv1.ModelLineage) error {
	for _, f := range []struct{ field, v string }{
		{"job", l.GetJob()}, {"custom_job", l.GetCustomJob()}, {"training_pipeline", l.GetTrainingPipeline()},
		{"tuning_job", l.GetTuningJob()}, {"trial", l.GetTrial()}, {"checkpoint_uri", l.GetCheckpointUri()},
		{"job_id", l.GetJobId()}, {"data_uri", l.GetDataUri()}, {"recorded_by", l.GetRecordedBy()},
	} {
		if len(f.v) > MaxLineageName {
			return fmt.Errorf("lineage.%s: %d bytes, more than %d", f.field, len(f.v), MaxLineageName)
		}
		if why := textRefusal(f.v, ""); why != "" {
			return fmt.Errorf("lineage.%s: %s", f.field, why)
		}
	}
	if n := len(l.GetHyperparameters()); n > MaxLineageEntries {
		return fmt.Errorf("lineage.hyperparameters: %d entries, more than %d", n, MaxLineageEntries)
	}
	if n := len(l.GetMetrics()); n > MaxLineageEntries {
		return fmt.Errorf("lineage.metrics: %d entries, more than %d", n, MaxLineageEntries)
	}
	// In key order: the first bad entry reported is the same every time.
	for _, k := range slices.Sorted(maps.Keys(l.GetHyperparameters())) {
		v := l.GetHyperparameters()[k]
		if len(k) > MaxLineageKey || len(v) > MaxLineageValue {
			return fmt.Errorf("lineage.hyperparameters: %q: names are at most %d bytes, values %d", Clip(k), MaxLineageKey, MaxLineageValue)
		}
		if why := textRefusal(k, ""); why != "" {
			return fmt.Errorf("lineage.hyperparameters: a name %s", why)
		}
		if why := textRefusal(v, ""); why != "" {
			return fmt.Errorf("lineage.hyperparameters[%s]: %s", k, why)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(l.GetMetrics())) {
		if len(k) > MaxLineageKey {
			return fmt.Errorf("lineage.metrics: %q: names are at most %d bytes", Clip(k), MaxLineageKey)
		}
		if why := textRefusal(k, ""); why != "" {
			return fmt.Errorf("lineage.metrics: a name %s", why)
		}
		// A caller's (the gateway stamps recorded_by) is a measurement
		// they state: NaN or ±Inf measures nothing, and loom models get
		// would print it as one. Loom's own (a pipeline's, whose training
		// service leaves non-finite values out) is taken as recorded.
		if v := l.GetMetrics()[k]; l.GetRecordedBy() != "" && (math.IsNaN(v) || math.IsInf(v, 0)) {
			return fmt.Errorf("lineage.metrics[%s]: %v is not a finite number", k, v)
		}
	}
	return nil
}

// DescriptionControls are the control characters a description may hold:
// it is multi-line text (as a cluster's description is), so newlines and
// tabs; every other one is refused (textRefusal).
const DescriptionControls = "\n\t"

// textRefusal says why s may not be stored as text that Loom's commands
// print on a terminal (a model's names and descriptions, a lineage), or ""
// when it may: invalid UTF-8, or a character libs/termtext refuses (a
// control character: an escape sequence would clear or retitle the
// reader's terminal; a bidirectional override would reorder what it
// shows) other than those in allow. The reason names the character, never
// echoes it.
func textRefusal(s, allow string) string {
	if !utf8.ValidString(s) {
		return "is not valid UTF-8"
	}
	r, bad := termtext.FirstSpoofing(s, allow)
	switch {
	case !bad:
		return ""
	case allow == DescriptionControls:
		return fmt.Sprintf("must not hold control characters other than newlines and tabs (it holds %U): a terminal would act on it", r)
	}
	return fmt.Sprintf("must not hold control characters (it holds %U): a terminal would act on it", r)
}

// checkLabels checks the labels' count and grammar.
func checkLabels(labels map[string]string) error {
	if len(labels) > MaxLabels {
		return fmt.Errorf("model.labels: %d labels, more than %d", len(labels), MaxLabels)
	}
	// In key order: the first bad label reported is the same every time.
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		v := labels[k]
		switch {
		case utf8.RuneCountInString(k) > MaxLabelLen || !labelKeyRE.MatchString(k):
			return fmt.Errorf("model.labels: key %q must be 1 to %d lowercase letters, digits, '_' or '-', starting with a letter", Clip(k), MaxLabelLen)
		case utf8.RuneCountInString(v) > MaxLabelLen || !labelValueRE.MatchString(v):
			return fmt.Errorf("model.labels[%s]: value %q must be at most %d lowercase letters, digits, '_' or '-'", k, Clip(v), MaxLabelLen)
		}
	}
	return nil
}

// RegisterUpload returns the registration of a validated upload whose
// artifact directory was checked: the next version of u.Model (created when
// new) with the command's lineage (recorded_by as recordedLineage sets it),
// display name, description, labels and artifact URI, answered by
// ModelVersionRegistered with the request id, and the request record,
// evicting the oldest beyond MaxRequests. It does not change s.
func RegisterUpload(s *State, u Upload, now time.Time) *Registration {
	cmd, m := u.Cmd, u.Cmd.GetModel()
	ts := timestamppb.New(now)
	var model *loomv1.Model
	if old, ok := s.Models[u.Model]; ok {
		model = proto.Clone(old).(*loomv1.Model)
	} else {
		model = &loomv1.Model{Name: u.Model, CreateTime: ts, DisplayName: m.GetDisplayName(), Description: m.GetDescription()}
	}
	model.LatestVersion++
	model.UpdateTime = ts
	lineage := recordedLineage(cmd.GetLineage())
	description := m.GetVersionDescription()
	if description == "" {
		description = m.GetDescription()
	}
	v := &loomv1.ModelVersion{
		Name:        resname.VersionIn(u.Model, model.LatestVersion),
		Version:     model.LatestVersion,
		ArtifactUri: u.artifactURI(),
		// Set only with a directory: a bucket's objects have no owner.
		ArtifactOwner:  u.Owner,
		ManifestSha256: u.Manifest,
		SourceJob:      lineage.GetJob(),
		CreateTime:     ts,
		Labels:         map[string]string{},
		Lineage:        lineage,
		DisplayName:    m.GetDisplayName(),
		Description:    description,
	}
	for k, val := range m.GetLabels() {
		v.Labels[k] = val
	}
	moved := giveAliases(s, u.Model, v, m.GetVersionAliases(), ts)
	var seq int64 = 1
	if n := len(s.requestOrder); n > 0 {
		seq = s.Requests[s.requestOrder[n-1]].Seq + 1
	}
	var evict []string
	if over := len(s.requestOrder) + 1 - MaxRequests; over > 0 {
		evict = append(evict, s.requestOrder[:over]...)
	}
	reg := &Registration{
		Model:     model,
		Version:   v,
		Event:     &eventsv1.ModelVersionRegistered{Version: v, Model: u.Model, RequestId: cmd.GetRequestId()},
		RequestID: cmd.GetRequestId(),
		Request:   Request{Seq: seq, Version: v.GetName()},
		Evict:     evict,
		Moved:     moved,
	}
	markOverwritten(s, reg, now)
	return reg
}

// giveAliases gives the new version v of model its aliases: those asked
// for, each taken from the version that held it (the changed versions are
// returned), and "default" when the model has no version holding it (its
// first version).
func giveAliases(s *State, model string, v *loomv1.ModelVersion, aliases []string, ts *timestamppb.Timestamp) []*loomv1.ModelVersion {
	vs := s.Versions[model]
	want := slices.Clone(aliases)
	if holder(vs, DefaultAlias) == nil && !slices.Contains(want, DefaultAlias) {
		want = append([]string{DefaultAlias}, want...)
	}
	var moved []*loomv1.ModelVersion
	for _, a := range want {
		if h := holder(vs, a); h != nil {
			i := slices.IndexFunc(moved, func(x *loomv1.ModelVersion) bool { return x.GetName() == h.GetName() })
			if i < 0 {
				moved = append(moved, proto.Clone(h).(*loomv1.ModelVersion))
				i = len(moved) - 1
			}
			moved[i].Aliases = slices.DeleteFunc(moved[i].Aliases, func(x string) bool { return x == a })
			moved[i].UpdateTime = ts
		}
		v.Aliases = append(v.Aliases, a)
	}
	return moved
}

// Refusal is the answer to an UploadModel the registry refused; Key is the
// record key of its event (the model name when it could be named).
func Refusal(cmd *eventsv1.UploadModel, model string, reason error) (ev *eventsv1.ModelUploadFailed, key string) {
	key = model
	if key == "" {
		key = "projects/" + cmd.GetProject()
	}
	return &eventsv1.ModelUploadFailed{RequestId: cmd.GetRequestId(), Model: model, Reason: reason.Error(),
		Code: int32(RefusalCode(reason))}, key
}

// quotaError is a refusal of MaxModelsPerProject or MaxVersionsPerModel.
type quotaError string

func (e quotaError) Error() string { return string(e) }

// RefusalCode is the gRPC status code of a refused upload (its reason as
// ValidateUpload, verify or register says it): NotFound for a parent_model
// that does not exist, ResourceExhausted for a model or version count at
// its limit, InvalidArgument for every other refusal. The RPC
// answers it and ModelUploadFailed carries it, so that both say the same.
func RefusalCode(reason error) codes.Code {
	if q := quotaError(""); errors.As(reason, &q) {
		return codes.ResourceExhausted
	}
	field, why, _ := strings.Cut(reason.Error(), ": ")
	if field == "parent_model" && strings.HasSuffix(why, "does not exist") {
		return codes.NotFound
	}
	return codes.InvalidArgument
}

// newModelFor names a new model of project after displayName: the display
// name as an id (lowercase letters, digits and '-', starting with a letter),
// with "-2", "-3", ... appended while that model exists.
func newModelFor(s *State, project, displayName string) string {
	base := slug(displayName)
	name := resname.Model{Project: project, ID: base}.String()
	for n := 2; ; n++ {
		if _, taken := s.Models[name]; !taken {
			return name
		}
		suffix := "-" + strconv.Itoa(n)
		id := strings.TrimRight(base[:min(len(base), 63-len(suffix))], "-") + suffix
		name = resname.Model{Project: project, ID: id}.String()
	}
}

// slug turns a display name into a model id (resname.ValidID): ASCII
// letters lowercased, every other run of characters one '-', "model-"
// prefixed when it does not start with a letter, at most 63 characters.
func slug(name string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(name) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	id := strings.Trim(b.String(), "-")
	if id == "" || id[0] < 'a' || id[0] > 'z' {
		id = strings.TrimSuffix("model-"+id, "-")
	}
	if len(id) > 63 {
		id = strings.TrimRight(id[:63], "-")
	}
	return id
}

// Clip shortens s for an error message (64 bytes, at a rune boundary).
func Clip(s string) string {
	if len(s) <= 64 {
		return s
	}
	cut := 64
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// artifactURI is the artifact_uri a registered version keeps: file:// and
// the clean directory, or the bucket URL as given.
func (u Upload) artifactURI() string {
	if u.Dir == "" {
		return u.URI
	}
	return "file://" + u.Dir
}

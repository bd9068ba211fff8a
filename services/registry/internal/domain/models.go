package domain

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/resname"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Resolve returns the stored model and the version r names: "@{n}" that
// version, "@{alias}" the version holding it ("@latest" the highest), and a
// bare name the version holding "default". Unknown ones are NotFound.
func (s *State) Resolve(r Ref) (*loomv1.Model, *loomv1.ModelVersion, error) {
	m, ok := s.Models[r.Model()]
	if !ok {
		return nil, nil, fmt.Errorf("model %s: %w", r.Model(), errs.NotFound)
	}
	vs := s.Versions[r.Model()]
	switch {
	case r.Version != 0:
		for _, v := range vs {
			if v.GetVersion() == r.Version {
				return m, v, nil
			}
		}
		return nil, nil, fmt.Errorf("model %s has no version %d (loom models versions %s lists them): %w", r.Model(), r.Version, r.ID, errs.NotFound)
	case r.Alias == "latest":
		if len(vs) > 0 {
			return m, vs[len(vs)-1], nil
		}
	default:
		alias := r.Alias
		if alias == "" {
			alias = DefaultAlias
		}
		if v := holder(vs, alias); v != nil {
			return m, v, nil
		}
		if r.Alias != "" {
			return nil, nil, fmt.Errorf("model %s has no version with alias %q: %w", r.Model(), r.Alias, errs.NotFound)
		}
		if len(vs) > 0 {
			// A model stored before aliases existed: its latest version
			// stands for the default one.
			return m, vs[len(vs)-1], nil
		}
	}
	return nil, nil, fmt.Errorf("model %s has no versions: %w", r.Model(), errs.NotFound)
}

// holder returns the version of vs holding alias, or nil.
func holder(vs []*loomv1.ModelVersion, alias string) *loomv1.ModelVersion {
	for _, v := range vs {
		if slices.Contains(v.GetAliases(), alias) {
			return v
		}
	}
	return nil
}

// View is version v of model m as the API serves it (Vertex's Model), named
// in location.
func View(m *loomv1.Model, v *loomv1.ModelVersion, location string) *loomv1.Model {
	if location == "" {
		location = DefaultLocation
	}
	id := m.GetName()[strings.LastIndexByte(m.GetName(), '/')+1:]
	project := ""
	if mn, err := resname.SplitModel(m.GetName()); err == nil {
		project, id = mn.Project, mn.ID
	}
	out := &loomv1.Model{
		Name:               resname.ModelVersion{Model: resname.Model{Project: project, ID: id}, Version: v.GetVersion()}.APIName(location),
		LatestVersion:      m.GetLatestVersion(),
		CreateTime:         m.GetCreateTime(),
		UpdateTime:         m.GetUpdateTime(),
		DisplayName:        m.GetDisplayName(),
		Description:        m.GetDescription(),
		VersionId:          strconv.FormatInt(v.GetVersion(), 10),
		VersionAliases:     slices.Clone(v.GetAliases()),
		VersionDescription: v.GetDescription(),
		Labels:             map[string]string{},
		ArtifactUri:        v.GetArtifactUri(),
		ArtifactChanged:    v.GetArtifactChanged(),
		VersionCreateTime:  v.GetCreateTime(),
		VersionUpdateTime:  v.GetUpdateTime(),
	}
	if out.DisplayName == "" {
		out.DisplayName = v.GetDisplayName()
	}
	if out.VersionUpdateTime == nil {
		out.VersionUpdateTime = v.GetCreateTime()
	}
	for k, val := range v.GetLabels() {
		out.Labels[k] = val
	}
	lin := &loomv1.ModelLineage{}
	if v.GetLineage() != nil {
		lin = proto.Clone(v.GetLineage()).(*loomv1.ModelLineage)
	}
	if lin.Job == "" {
		lin.Job = v.GetSourceJob()
	}
	if j, err := resname.SplitJob(lin.GetJob()); err == nil && lin.JobId == "" {
		lin.JobId = j.ID
	}
	out.Lineage = lin
	return proto.Clone(out).(*loomv1.Model)
}

// Change is what one UpdateModel, MergeVersionAliases, DeleteModelVersion or
// DeleteModel does: the model record after it (DeletedModel instead when the
// model is deleted), the versions it rewrites and the versions it deletes. Served is the version
// the call answers with (nil for deletes). Forgotten are the request ids
// whose records name a version of the deleted model: a model made again
// under the same id numbers its versions from 1 again, and a retry of an
// old upload must not be answered with a new upload's version.
type Change struct {
	Model        *loomv1.Model
	DeletedModel string
	Versions     []*loomv1.ModelVersion
	Deleted      []string
	Served       *loomv1.ModelVersion
	Forgotten    []string
}

// ApplyChange records c in s. Call it only after c was stored durably.
func (s *State) ApplyChange(c *Change) {
	if c.DeletedModel != "" {
		s.dropModel(c.DeletedModel)
		for _, id := range c.Forgotten {
			delete(s.Requests, id)
		}
		if len(c.Forgotten) > 0 {
			s.requestOrder = dropIDs(s.requestOrder, c.Forgotten)
		}
		return
	}
	name := c.Model.GetName()
	s.putModel(c.Model)
	gone := map[string]bool{}
	for _, d := range c.Deleted {
		gone[d] = true
	}
	byName := map[string]*loomv1.ModelVersion{}
	for _, v := range c.Versions {
		byName[v.GetName()] = v
	}
	vs := s.Versions[name][:0:0]
	for _, v := range s.Versions[name] {
		if gone[v.GetName()] {
			continue
		}
		if nv, ok := byName[v.GetName()]; ok {
			v = nv
		}
		vs = append(vs, v)
	}
	s.Versions[name] = vs
}

// aliasEdit collects alias moves within one model: each version touched is
// cloned once, so a Change lists it once.
type aliasEdit struct {
	vs      []*loomv1.ModelVersion // the model's versions (not to be changed)
	touched map[string]*loomv1.ModelVersion
	order   []string
	now     *timestamppb.Timestamp
}

func newAliasEdit(vs []*loomv1.ModelVersion, now time.Time) *aliasEdit {
	return &aliasEdit{vs: vs, touched: map[string]*loomv1.ModelVersion{}, now: timestamppb.New(now)}
}

// get returns the editable copy of v.
func (e *aliasEdit) get(v *loomv1.ModelVersion) *loomv1.ModelVersion {
	if c, ok := e.touched[v.GetName()]; ok {
		return c
	}
	c := proto.Clone(v).(*loomv1.ModelVersion)
	c.UpdateTime = e.now
	e.touched[v.GetName()] = c
	e.order = append(e.order, v.GetName())
	return c
}

// holder is holder over the edited versions.
func (e *aliasEdit) holder(alias string) *loomv1.ModelVersion {
	for _, v := range e.vs {
		cur := v
		if c, ok := e.touched[v.GetName()]; ok {
			cur = c
		}
		if slices.Contains(cur.GetAliases(), alias) {
			return cur
		}
	}
	return nil
}

// add gives alias to target, taking it from the version holding it.
func (e *aliasEdit) add(target *loomv1.ModelVersion, alias string) {
	t := e.get(target)
	if h := e.holder(alias); h != nil {
		if h.GetName() == t.GetName() {
			return
		}
		hc := e.get(h)
		hc.Aliases = slices.DeleteFunc(hc.Aliases, func(a string) bool { return a == alias })
	}
	t.Aliases = append(t.Aliases, alias)
}

// remove takes alias from target; "default" cannot be removed, only moved.
func (e *aliasEdit) remove(target *loomv1.ModelVersion, alias string, field string) error {
	if alias == DefaultAlias {
		return errs.Invalid(field, "alias %q cannot be removed, only moved: give it to another version (loom models alias MODEL@VERSION default)", DefaultAlias)
	}
	t := e.get(target)
	t.Aliases = slices.DeleteFunc(t.Aliases, func(a string) bool { return a == alias })
	return nil
}

// versions returns the changed versions, in the order first touched, after
// checking each holds at most MaxAliases.
func (e *aliasEdit) versions(field string) ([]*loomv1.ModelVersion, error) {
	out := make([]*loomv1.ModelVersion, 0, len(e.order))
	for _, n := range e.order {
		v := e.touched[n]
		if len(v.GetAliases()) > MaxAliases {
			return nil, errs.Invalid(field, "version %d would hold %d aliases, more than the limit of %d", v.GetVersion(), len(v.GetAliases()), MaxAliases)
		}
		out = append(out, v)
	}
	return out, nil
}

// MergeAliases is MergeVersionAliases: each "alias" of aliases moves to the
// version r names, each "-alias" is removed from it. An alias added and
// removed in one call, a bad or reserved alias, or removing "default" is
// InvalidArgument and changes nothing.
func MergeAliases(s *State, r Ref, aliases []string, now time.Time) (*Change, error) {
	const field = "version_aliases"
	if len(aliases) == 0 {
		return nil, errs.Invalid(field, "at least one alias is required (\"alias\" adds, \"-alias\" removes)")
	}
	if len(aliases) > MaxAliases {
		return nil, errs.Invalid(field, "%d aliases, more than the limit of %d", len(aliases), MaxAliases)
	}
	m, v, err := s.Resolve(r)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for i, a := range aliases {
		f := fmt.Sprintf("%s[%d]", field, i)
		name := strings.TrimPrefix(a, "-")
		if err := CheckAlias(name); err != nil {
			return nil, errs.Invalid(f, "%v", err)
		}
		if seen[name] {
			return nil, errs.Invalid(f, "alias %q is named twice", name)
		}
		seen[name] = true
	}
	e := newAliasEdit(s.Versions[m.GetName()], now)
	for i, a := range aliases {
		if name, ok := strings.CutPrefix(a, "-"); ok {
			if err := e.remove(v, name, fmt.Sprintf("%s[%d]", field, i)); err != nil {
				return nil, err
			}
		} else {
			e.add(v, a)
		}
	}
	return e.change(m, v, field, now)
}

// change ends an alias edit: the model's update time, the versions changed.
func (e *aliasEdit) change(m *loomv1.Model, served *loomv1.ModelVersion, field string, now time.Time) (*Change, error) {
	sv := e.get(served)
	changed, err := e.versions(field)
	if err != nil {
		return nil, err
	}
	model := proto.Clone(m).(*loomv1.Model)
	model.UpdateTime = timestamppb.New(now)
	return &Change{Model: model, Versions: changed, Served: sv}, nil
}

// Update paths UpdateModel takes (snake_case; camelCase is mapped).
var updatePaths = map[string]string{
	"display_name": "display_name", "displayName": "display_name",
	"description":         "description",
	"version_description": "version_description", "versionDescription": "version_description",
	"labels":          "labels",
	"version_aliases": "version_aliases", "versionAliases": "version_aliases",
}

// Update is UpdateModel: it sets the fields mask names from patch on the
// model (display_name, description) and on the version patch.name names
// (version_description, labels, version_aliases: the version's whole alias
// set, "default" kept or moved here, never dropped). An empty mask, an
// unknown path or a value out of bounds is InvalidArgument.
func Update(s *State, r Ref, patch *loomv1.Model, mask []string, now time.Time) (*Change, error) {
	if len(mask) == 0 {
		return nil, errs.Invalid("update_mask", "name at least one of display_name, description, version_description, labels, version_aliases")
	}
	if len(mask) > len(updatePaths) {
		return nil, errs.Invalid("update_mask", "%d paths, more than the limit of %d", len(mask), len(updatePaths))
	}
	paths := map[string]bool{}
	for i, p := range mask {
		canon, ok := updatePaths[p]
		if !ok {
			return nil, errs.Invalid(fmt.Sprintf("update_mask.paths[%d]", i), "%q cannot be updated: one of display_name, description, version_description, labels, version_aliases", Clip(p))
		}
		paths[canon] = true
	}
	m, v, err := s.Resolve(r)
	if err != nil {
		return nil, err
	}
	var vd errs.Validator
	if paths["display_name"] {
		n := utf8.RuneCountInString(patch.GetDisplayName())
		vd.Check(n <= MaxDisplayName, "model.display_name", "%d characters, more than the limit of %d", n, MaxDisplayName)
		if why := textRefusal(patch.GetDisplayName(), ""); why != "" {
			vd.Add("model.display_name", "%s", why)
		}
	}
	for _, d := range []struct{ path, text string }{{"description", patch.GetDescription()}, {"version_description", patch.GetVersionDescription()}} {
		if paths[d.path] {
			n := utf8.RuneCountInString(d.text)
			vd.Check(n <= MaxDescription, "model."+d.path, "%d characters, more than the limit of %d", n, MaxDescription)
			if why := textRefusal(d.text, DescriptionControls); why != "" {
				vd.Add("model."+d.path, "%s", why)
			}
		}
	}
	if paths["labels"] {
		if err := checkLabels(patch.GetLabels()); err != nil {
			vd.Add("model.labels", "%v", strings.TrimPrefix(err.Error(), "model.labels: "))
		}
	}
	if paths["version_aliases"] {
		if n := len(patch.GetVersionAliases()); n > MaxAliases {
			vd.Add("model.version_aliases", "%d aliases, more than the limit of %d", n, MaxAliases)
		}
		seen := map[string]bool{}
		for i, a := range patch.GetVersionAliases() {
			f := fmt.Sprintf("model.version_aliases[%d]", i)
			if err := CheckAlias(a); err != nil {
				vd.Add(f, "%v", err)
			} else if seen[a] {
				vd.Add(f, "alias %q is named twice", a)
			}
			seen[a] = true
		}
		if slices.Contains(v.GetAliases(), DefaultAlias) && !seen[DefaultAlias] {
			vd.Add("model.version_aliases", "version %d holds %q, which cannot be dropped, only moved: keep it in the list, or give it to another version first", v.GetVersion(), DefaultAlias)
		}
	}
	if err := vd.Err(); err != nil {
		return nil, err
	}
	e := newAliasEdit(s.Versions[m.GetName()], now)
	ver := e.get(v)
	if paths["version_description"] {
		ver.Description = patch.GetVersionDescription()
	}
	if paths["labels"] {
		ver.Labels = map[string]string{}
		for k, val := range patch.GetLabels() {
			ver.Labels[k] = val
		}
	}
	if paths["version_aliases"] {
		want := map[string]bool{}
		for _, a := range patch.GetVersionAliases() {
			want[a] = true
		}
		for _, a := range slices.Clone(ver.GetAliases()) {
			if !want[a] {
				_ = e.remove(v, a, "model.version_aliases") // default is kept (checked above)
			}
		}
		for _, a := range patch.GetVersionAliases() {
			e.add(v, a)
		}
	}
	c, err := e.change(m, v, "model.version_aliases", now)
	if err != nil {
		return nil, err
	}
	if paths["display_name"] {
		c.Model.DisplayName = patch.GetDisplayName()
	}
	if paths["description"] {
		c.Model.Description = patch.GetDescription()
	}
	return c, nil
}

// DeleteVersion is DeleteModelVersion of the version r names. It is refused
// (FailedPrecondition, saying why and what to do) for a model's only
// version, for the version holding "default" (Vertex's rule), and, unless
// force, for a version holding any other alias: a serving alias such as
// "prod" must not vanish unasked (with force it goes with the version, as
// MLflow drops a deleted version's aliases). r must name a version.
func DeleteVersion(s *State, r Ref, force bool, now time.Time) (*Change, error) {
	if !r.Selected() {
		return nil, errs.Invalid("name", "name the version to delete: MODEL@VERSION or MODEL@ALIAS (the default version cannot be deleted)")
	}
	m, v, err := s.Resolve(r)
	if err != nil {
		return nil, err
	}
	vs := s.Versions[m.GetName()]
	if len(vs) <= 1 {
		return nil, fmt.Errorf("version %d is the only version of %s: delete the model instead (loom models delete %s): %w",
			v.GetVersion(), m.GetName(), r.ID, errs.FailedPrecondition)
	}
	if slices.Contains(v.GetAliases(), DefaultAlias) || (holder(vs, DefaultAlias) == nil && v == vs[len(vs)-1]) {
		return nil, fmt.Errorf("version %d of %s holds the %q alias: move it to another version first (loom models alias %s@N default): %w",
			v.GetVersion(), m.GetName(), DefaultAlias, r.ID, errs.FailedPrecondition)
	}
	if held := v.GetAliases(); len(held) > 0 && !force {
		what, it, list := "alias", "it", strings.Join(held, " ")
		if len(held) > 1 {
			what, it = "aliases", "them"
		}
		removes := make([]string, len(held))
		for i, a := range held {
			removes[i] = "-" + a
		}
		return nil, fmt.Errorf("version %d of %s holds %s %s: move or remove %s first (move: loom models alias %s@N %s; remove: loom models alias %s@%d -- %s), or delete the version with its aliases (loom models delete %s@%d --force): %w",
			v.GetVersion(), m.GetName(), what, strings.Join(held, ", "), it,
			r.ID, list, r.ID, v.GetVersion(), strings.Join(removes, " "), r.ID, v.GetVersion(), errs.FailedPrecondition)
	}
	model := proto.Clone(m).(*loomv1.Model)
	model.UpdateTime = timestamppb.New(now)
	return &Change{Model: model, Deleted: []string{v.GetName()}}, nil
}

// DeleteModel is DeleteModel: the model and every version of it. A name
// with "@" is refused (DeleteModelVersion deletes one version).
func DeleteModel(s *State, r Ref) (*Change, error) {
	if r.Selected() {
		return nil, errs.Invalid("name", "DeleteModel deletes a whole model: drop the \"@…\", or delete one version with DeleteModelVersion (loom models delete MODEL@VERSION)")
	}
	if _, ok := s.Models[r.Model()]; !ok {
		return nil, fmt.Errorf("model %s: %w", r.Model(), errs.NotFound)
	}
	c := &Change{DeletedModel: r.Model()}
	for _, v := range s.Versions[r.Model()] {
		c.Deleted = append(c.Deleted, v.GetName())
	}
	// Every record naming one of its versions, those already deleted
	// one by one included (at most MaxRequests to look at).
	for id, req := range s.Requests {
		if mv, err := resname.SplitModelVersion(req.Version); err == nil && mv.Model.String() == r.Model() {
			c.Forgotten = append(c.Forgotten, id)
		}
	}
	slices.Sort(c.Forgotten)
	return c, nil
}

package domain

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/resname"
)

// DefaultLocation is the location answers name when a request named none:
// Loom has one location per project.
const DefaultLocation = "global"

// MaxName bounds a model name in a request, in bytes: it is parsed per call.
const MaxName = 512

// Ref is a model name as a request gives it: Vertex's
// "projects/{p}/locations/{l}/models/{id}" or Loom's "projects/{p}/models/{id}",
// with an optional "@{version_id}" or "@{alias}".
type Ref struct {
	Project, Location, ID string
	// Version is the version id after '@' (0: none).
	Version int64
	// Alias is the alias after '@' ("": none).
	Alias string
	// Vertex is true when the name had a location.
	Vertex bool
}

// Model is the stored model's name, "projects/{p}/models/{id}".
func (r Ref) Model() string { return resname.Model{Project: r.Project, ID: r.ID}.String() }

// location is the location answers name.
func (r Ref) location() string {
	if r.Location == "" {
		return DefaultLocation
	}
	return r.Location
}

// Selected reports whether the name picks a version ("@…").
func (r Ref) Selected() bool { return r.Version != 0 || r.Alias != "" }

// ParseRef parses a model name (see Ref). Anything else — a path that is not
// exactly one of the two forms, a segment with '/', '..', '#', '?', a version
// id that is not a positive number, an alias outside the alias grammar — is
// an InvalidArgument naming field.
func ParseRef(field, name string) (Ref, error) {
	if len(name) > MaxName {
		return Ref{}, errs.Invalid(field, "%d bytes, more than the limit of %d", len(name), MaxName)
	}
	want := "projects/{project}/locations/{location}/models/{model}[@{version or alias}] or projects/{project}/models/{model}[@…]"
	parts := strings.Split(name, "/")
	var r Ref
	var last string
	switch {
	case len(parts) == 6 && parts[0] == "projects" && parts[2] == "locations" && parts[4] == "models":
		r = Ref{Project: parts[1], Location: parts[3], Vertex: true}
		last = parts[5]
		if !resname.ValidID(r.Location) {
			return Ref{}, errs.Invalid(field, "%q: location %q is not an id (%s)", Clip(name), Clip(r.Location), resname.IDPattern)
		}
	case len(parts) == 4 && parts[0] == "projects" && parts[2] == "models":
		r = Ref{Project: parts[1]}
		last = parts[3]
	default:
		return Ref{}, errs.Invalid(field, "%q is not a model name: want %s", Clip(name), want)
	}
	if !resname.ValidID(r.Project) {
		return Ref{}, errs.Invalid(field, "%q: project %q is not an id (%s)", Clip(name), Clip(r.Project), resname.IDPattern)
	}
	id, sel, hasSel := strings.Cut(last, "@")
	if !resname.ValidID(id) {
		return Ref{}, errs.Invalid(field, "%q: model id %q is not an id (%s)", Clip(name), Clip(id), resname.IDPattern)
	}
	r.ID = id
	if !hasSel {
		return r, nil
	}
	if n, err := strconv.ParseInt(sel, 10, 64); err == nil && n > 0 && strconv.FormatInt(n, 10) == sel {
		r.Version = n
		return r, nil
	}
	if sel == "latest" {
		r.Alias = sel // resolves to the highest version (a reserved alias)
		return r, nil
	}
	if err := CheckAlias(sel); err != nil {
		return Ref{}, errs.Invalid(field, "%q: after '@' comes a version id (1, 2, ...) or an alias: %v", Clip(name), err)
	}
	r.Alias = sel
	return r, nil
}

// ParseParent parses a list or upload parent: "projects/{p}/locations/{l}"
// or "projects/{p}". It returns the project and the location answers name.
func ParseParent(field, parent string) (project, location string, err error) {
	if len(parent) > MaxName {
		return "", "", errs.Invalid(field, "%d bytes, more than the limit of %d", len(parent), MaxName)
	}
	parts := strings.Split(parent, "/")
	switch {
	case len(parts) == 4 && parts[0] == "projects" && parts[2] == "locations" && resname.ValidID(parts[1]) && resname.ValidID(parts[3]):
		return parts[1], parts[3], nil
	case len(parts) == 2 && parts[0] == "projects" && resname.ValidID(parts[1]):
		return parts[1], DefaultLocation, nil
	}
	return "", "", errs.Invalid(field, "%q is not projects/{project}/locations/{location} or projects/{project}", Clip(parent))
}

// Alias bounds and grammar (Vertex's): a lowercase letter, then letters,
// digits or '-', ending in a lowercase letter or digit, 2 to 128 characters.
const (
	// MaxAliasLen bounds an alias.
	MaxAliasLen = 128
	// MaxAliases bounds the aliases one version holds.
	MaxAliases = 16
	// DefaultAlias is the alias exactly one version of each model holds.
	DefaultAlias = "default"
)

var (
	aliasRE    = regexp.MustCompile(`^[a-z][a-zA-Z0-9-]{0,126}[a-z0-9]$`)
	reservedRE = regexp.MustCompile(`^v[0-9]+$`)
)

// CheckAlias checks an alias's grammar and that it is not reserved
// ("latest", "v<N>").
func CheckAlias(a string) error {
	switch {
	case len(a) > MaxAliasLen:
		return fmt.Errorf("alias of %d bytes, more than %d", len(a), MaxAliasLen)
	case !aliasRE.MatchString(a):
		return fmt.Errorf("alias %q must match [a-z][a-zA-Z0-9-]{0,126}[a-z0-9]", Clip(a))
	case a == "latest" || reservedRE.MatchString(a):
		return fmt.Errorf("alias %q is reserved (latest and v<N> name versions)", a)
	}
	return nil
}

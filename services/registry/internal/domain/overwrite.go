package domain

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/resname"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// A version's files are not the registry's: artifact_uri names a directory
// (or a bucket prefix) that its producer may write again. The common way
// that happens is a second run with the same output directory (two
// TrainingPipelines with one baseOutputDirectory register v1 and v2 from
// the same <prefix>/model, and v2's run rewrote v1's files). Registering
// the second set is when the registry learns of it, so the registration
// marks every earlier version of that location as changed, in the same
// write (markOverwritten); an export of a marked version is refused. The
// MANIFEST digests tell a rewrite from a second registration of the very
// same set, which is no change.

// location is an artifact URI's location: whether it is a local
// directory, and its clean path or the bucket URL without trailing '/'.
type location struct {
	local bool
	key   string
}

// locationOf is uri's location: file:// directories and bare paths as clean
// paths, buckets as written but for a trailing '/'.
func locationOf(uri string) location {
	if dir, ok := strings.CutPrefix(uri, "file://"); ok {
		return location{true, cleanPath(dir)}
	}
	if strings.HasPrefix(uri, "/") {
		return location{true, cleanPath(uri)}
	}
	return location{false, strings.TrimRight(uri, "/")}
}

// cleanPath is path.Clean(p), skipped for a path that is clean already but
// for trailing '/' (the common case, and a registration cleans every
// version's path).
func cleanPath(p string) string {
	if t := strings.TrimRight(p, "/"); t != "" && !strings.Contains(t, "//") && !strings.Contains(t, "/.") {
		return t
	}
	return path.Clean(p)
}

// sameSet reports whether versions a and b were registered with provably
// the same artifact set: both MANIFEST digests recorded and equal. A job's
// model output whose MANIFEST could not be recorded (artifact.Record) has
// none, so such a job's second registration of a directory always counts
// as a rewrite.
func sameSet(a, b *loomv1.ModelVersion) bool {
	return a.GetManifestSha256() != "" && a.GetManifestSha256() == b.GetManifestSha256()
}

// OverwrittenBy is the artifact_changed text of a version whose location
// was registered again by version by.
func OverwrittenBy(old, by *loomv1.ModelVersion, now time.Time) string {
	digest := func(v *loomv1.ModelVersion) string {
		if d := v.GetManifestSha256(); d != "" {
			return d
		}
		return "not recorded (a job's model output the registry could not list)"
	}
	return fmt.Sprintf("%s was registered again as %s at %s with another artifact set (its MANIFEST's SHA-256 %s; this version's %s): the files there are that version's now, not this one's",
		old.GetArtifactUri(), by.GetName(), now.UTC().Format(time.RFC3339), digest(by), digest(old))
}

// markOverwritten sets reg.Overwritten: every version in s, of any model
// of reg's project, registered from reg.Version's artifact location with
// another artifact set, and not marked before, as a copy marked
// artifact_changed. Versions of other projects are never marked: a tenant
// may register any directory it can read, or a job output whose files it
// never wrote, and a mark is permanent and refuses every export; it would
// also name that tenant's version in this project's record. A version
// that reg already rewrites (reg.Moved: it lost an alias to the new one)
// is marked there instead, so that one write holds both changes. It reads
// every version in memory once (no I/O): a registration's cost grows with
// the number of versions, a map lookup each.
func markOverwritten(s *State, reg *Registration, now time.Time) {
	nv := reg.Version
	if nv.GetArtifactUri() == "" {
		return
	}
	moved := map[string]*loomv1.ModelVersion{}
	for _, m := range reg.Moved {
		moved[m.GetName()] = m
	}
	note := func(old *loomv1.ModelVersion) string { return OverwrittenBy(old, nv, now) }
	at := locationOf(nv.GetArtifactUri())
	own, err := resname.SplitModel(reg.Model.GetName())
	if err != nil {
		return // no project to mark within
	}
	for model, vs := range s.Versions {
		if mn, err := resname.SplitModel(model); err != nil || mn.Project != own.Project {
			continue
		}
		for _, v := range vs {
			if v.GetArtifactChanged() != "" || locationOf(v.GetArtifactUri()) != at || sameSet(v, nv) {
				continue
			}
			if m, ok := moved[v.GetName()]; ok {
				m.ArtifactChanged = note(v)
				continue
			}
			c := proto.Clone(v).(*loomv1.ModelVersion)
			c.ArtifactChanged = note(v)
			c.UpdateTime = timestamppb.New(now)
			reg.Overwritten = append(reg.Overwritten, c)
		}
	}
}

// replaceVersions puts vs (changed copies of stored versions) in place of
// the versions of the same names; a name no longer stored is skipped.
func (s *State) replaceVersions(vs []*loomv1.ModelVersion) {
	for _, nv := range vs {
		model, _, ok := strings.Cut(nv.GetName(), "/versions/")
		if !ok {
			continue
		}
		for i, v := range s.Versions[model] {
			if v.GetName() == nv.GetName() {
				s.Versions[model][i] = nv
			}
		}
	}
}

// ErrMarked is MarkChanged's answer for a version marked before: its first
// mark stays (it says when the change was first seen).
var ErrMarked = errors.New("the version is marked changed already")

// MarkChanged returns the change that marks the version named version
// (projects/{p}/models/{m}/versions/{n}) artifact_changed with why: an
// export found its files differ from what it was registered with. A
// version no longer stored is NotFound; one marked before is ErrMarked.
func MarkChanged(s *State, version, why string, now time.Time) (*Change, error) {
	model, _, _ := strings.Cut(version, "/versions/")
	m := s.Models[model]
	for _, v := range s.Versions[model] {
		if v.GetName() != version {
			continue
		}
		if v.GetArtifactChanged() != "" {
			return nil, ErrMarked
		}
		c := proto.Clone(v).(*loomv1.ModelVersion)
		c.ArtifactChanged, c.UpdateTime = why, timestamppb.New(now)
		return &Change{Model: m, Versions: []*loomv1.ModelVersion{c}, Served: c}, nil
	}
	return nil, fmt.Errorf("%w: %s was deleted", errs.NotFound, version)
}

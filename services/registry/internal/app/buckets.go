package app

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/loom-ml/loom/libs/errs"

	"github.com/loom-ml/loom/services/registry/internal/domain"
)

// The registry reads artifact sets and writes exports with its own rights:
// its ambient cloud credentials (one set for every project) and its own
// access to the shared file system. A caller of one project must not reach,
// through it, what belongs to another: so
//   - a bucket URL the registry opens with credentials (no query, or an
//     allowed endpoint that has a profile) must lie under the caller's
//     project's part of the store, which the operator names with
//     SetProjectBuckets ("s3://models/{project}/"); without any, such URLs
//     are refused;
//   - a local artifact directory is read as the uploader's OS account
//     (libs/osuser.As), and an export reads it as that account again
//     (blobstore's ReadAs);
//   - a local export lands under the export root's directory of the
//     version's project.

// MaxProjectBuckets bounds the operator's list of project bucket prefixes.
const MaxProjectBuckets = 64

// ProjectPlaceholder is what a project bucket prefix holds where the
// project's id goes.
const ProjectPlaceholder = "{project}"

// AnyBucket, as the only project bucket prefix, lets every project name any
// bucket (a registry serving one team, whose credentials are theirs).
const AnyBucket = "*"

// ParseProjectBuckets parses the operator's project bucket prefixes: each an
// s3://, gs:// or azblob:// URL without a query or fragment holding
// ProjectPlaceholder once (in the bucket or the path), at most
// MaxProjectBuckets; or AnyBucket alone. The error names the item at fault.
func ParseProjectBuckets(list []string) ([]string, error) {
	if len(list) == 1 && list[0] == AnyBucket {
		return list, nil
	}
	if len(list) > MaxProjectBuckets {
		return nil, fmt.Errorf("%d prefixes, more than the limit of %d", len(list), MaxProjectBuckets)
	}
	const want = "must be s3://, gs:// or azblob://BUCKET/PATH/ holding " + ProjectPlaceholder + " once, with no query (or " + AnyBucket + " alone, for any bucket)"
	out := make([]string, 0, len(list))
	for i, s := range list {
		u, err := url.Parse(strings.ReplaceAll(s, ProjectPlaceholder, "p"))
		switch {
		case s == AnyBucket:
			return nil, fmt.Errorf("item %d: %s must be the only item", i+1, AnyBucket)
		case err != nil || strings.Count(s, ProjectPlaceholder) != 1 || strings.ContainsAny(s, "?#%") ||
			u.User != nil || u.Host == "" || u.Opaque != "" || strings.Contains(u.Path, "//"):
			return nil, fmt.Errorf("item %d: %q %s", i+1, s, want)
		case u.Scheme != "s3" && u.Scheme != "gs" && u.Scheme != "azblob":
			return nil, fmt.Errorf("item %d: %q: scheme %q %s", i+1, s, u.Scheme, want)
		}
		out = append(out, strings.TrimSuffix(s, "/")+"/")
	}
	return out, nil
}

// SetProjectBuckets sets the prefixes (ParseProjectBuckets' forms) a
// project's bucket artifact URLs and export destinations must lie under;
// nil, the default, refuses every bucket URL the registry would open with
// credentials. Call it before serving.
func (r *Registry) SetProjectBuckets(list []string) error {
	p, err := ParseProjectBuckets(list)
	if err != nil {
		return err
	}
	r.projectBuckets = p
	return nil
}

// checkBucket refuses bucket URL uri (the field's) unless it lies under one
// of project's bucket prefixes. open is the URL the registry opens
// (artifactURL's or checkDestination's): one with anonymous=true is read or
// written unsigned, with no credential of the registry's, so any bucket
// will do; so does mem:// (an empty bucket of the process's own, for
// tests). The comparison is made on the parsed URL, path segment by
// segment, so that an escaped character or a "..", which blobstore.Open
// would refuse in any case, cannot pass for another project's prefix.
func (r *Registry) checkBucket(field, project, uri, open string) error {
	scheme, _, _ := strings.Cut(uri, "://")
	switch strings.ToLower(scheme) {
	case "mem":
		return nil
	case "s3", "gs", "azblob":
	default:
		// Whatever else Open takes (file:// in another case) is no bucket.
		return errs.Invalid(field, "%s: only s3://, gs:// and azblob:// are buckets (a local directory is file:///dir)", domain.Clip(uri))
	}
	if len(r.projectBuckets) == 1 && r.projectBuckets[0] == AnyBucket {
		return nil
	}
	if o, err := url.Parse(open); err == nil && o.Query().Get("anonymous") == "true" {
		return nil
	}
	const setting = "-project-buckets / LOOM_REGISTRY_PROJECT_BUCKETS"
	if len(r.projectBuckets) == 0 {
		return errs.Invalid(field, "%s would be opened with the registry's own credentials, which serve every project; this registry names no project's part of a store (%s, e.g. s3://models/%s/), so it opens no bucket that way",
			domain.Clip(uri), setting, ProjectPlaceholder)
	}
	u, err := url.Parse(uri)
	if err != nil {
		return errs.Invalid(field, "not a URL: %v", err)
	}
	var allowed []string
	for _, p := range r.projectBuckets {
		prefix := strings.ReplaceAll(p, ProjectPlaceholder, project)
		allowed = append(allowed, prefix)
		pu, err := url.Parse(prefix)
		if err != nil || !strings.EqualFold(pu.Scheme, u.Scheme) || pu.Host != u.Host {
			continue
		}
		if path := strings.TrimSuffix(u.Path, "/") + "/"; strings.HasPrefix(path, pu.Path) && !strings.Contains(path, "/../") && !strings.Contains(path, "//") {
			return nil
		}
	}
	return errs.Invalid(field, "%s is outside project %s's part of the registry's stores: it must lie under %s (%s)",
		domain.Clip(uri), project, strings.Join(allowed, " or "), setting)
}

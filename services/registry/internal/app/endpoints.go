package app

import (
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/loom-ml/loom/libs/errs"
)

// An export destination is chosen by the caller, and the registry opens it
// with its own credentials and network position: a query such as
// endpoint= would let any caller aim the registry's requests at any host
// (SSRF) or pick the credentials they are made with. So a destination may
// carry a query only to reach an S3-compatible store the operator named
// (SetExportEndpoints), and only with the parameters below, none of which
// can name another host, a credential or a file.
//
// Nor may such an endpoint, a third party's store the operator allowed,
// see the registry's own (ambient) credentials, which are for its artifact
// store: each allowed endpoint names the credentials its requests are
// signed with (a profile of the registry's AWS shared config, chosen by the
// operator), or has none, and then every request to it is unsigned.

// MaxExportEndpoints bounds the operator's allow-list of export endpoints.
const MaxExportEndpoints = 64

// maxEndpoint bounds one endpoint, in the allow-list and in a destination.
const maxEndpoint = 256

// exportParams are the query parameters an s3:// export destination may
// carry, each with what its value must be.
var exportParams = map[string]struct {
	ok   func(string) bool
	want string
}{
	// Checked against the allow-list separately; required.
	"endpoint": {func(string) bool { return true }, "an allowed endpoint"},
	// Only signs the requests (the endpoint fixes the host).
	"region": {regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,31}$`).MatchString, "a region name: 1 to 32 lowercase letters, digits and '-'"},
	// Required, true: with a virtual-hosted address the SDK would send the
	// requests to BUCKET.HOST, a host the caller names, not the one the
	// operator allowed.
	"use_path_style": {func(v string) bool { return v == "true" }, "true (requests go to the allowed host itself, never BUCKET.HOST)"},
	// true drops the endpoint's credentials (unsigned requests): it can
	// only lower what a request may do. false asks for them, refused at an
	// endpoint the operator gave none.
	"anonymous": {func(v string) bool { return v == "true" || v == "false" }, "true or false"},
}

// exportParamNames lists exportParams' keys, for messages.
const exportParamNames = "endpoint, region, use_path_style, anonymous"

// refusedParams says why the s3 driver parameters a caller might try are
// refused; any other unknown parameter is refused as not in the set.
var refusedParams = map[string]string{
	"profile":                 "selects one of the registry's credential profiles",
	"role":                    "assumes a role with the registry's credentials",
	"role_session_name":       "belongs to role=, which selects credentials",
	"role_external_id":        "belongs to role=, which selects credentials",
	"role_duration":           "belongs to role=, which selects credentials",
	"web_identity_token_file": "names a file on the registry's host holding a credential",
	"awssdk":                  "selects the SDK the registry uses",
	"hostname_immutable":      "changes the host requests go to",
	"dualstack":               "changes the host requests go to",
	"fips":                    "changes the host requests go to",
	"accelerate":              "changes the host requests go to",
	"disable_https":           "downgrades the connection (the allowed endpoint's scheme decides)",
	"s3ForcePathStyle":        "is the old spelling: write use_path_style=true",
}

// ParseExportEndpoint parses one endpoint of the export allow-list: an
// http or https URL with a host and an explicit port and nothing else
// (no user, path, query or fragment). It returns the endpoint's canonical
// form (scheme and host in lower case), the form destinations are compared
// in.
func ParseExportEndpoint(s string) (string, error) {
	const want = "must be scheme://host:port (http or https, an explicit port, no path, user, query or fragment)"
	if len(s) > maxEndpoint {
		return "", fmt.Errorf("%d bytes, more than the limit of %d", len(s), maxEndpoint)
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("%s, got %q: %v", want, s, err)
	}
	scheme := strings.ToLower(u.Scheme)
	if (scheme != "http" && scheme != "https") || u.Opaque != "" || u.User != nil || u.Path != "" ||
		u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.ContainsAny(s, "#?") || u.Hostname() == "" {
		return "", fmt.Errorf("%s, got %q", want, s)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil || port < 1 || port > 65535 || strconv.Itoa(port) != u.Port() {
		return "", fmt.Errorf("%s, got %q: the port must be 1 to 65535", want, s)
	}
	return scheme + "://" + strings.ToLower(u.Host), nil
}

// ExportEndpoint is one entry of the operator's allow-list: an endpoint an
// s3:// export destination may name, and the credentials the registry's
// requests to it are signed with.
type ExportEndpoint struct {
	// URL is the endpoint in canonical form (ParseExportEndpoint).
	URL string
	// Profile is the profile of the registry's AWS shared config and
	// credentials files (AWS_CONFIG_FILE, AWS_SHARED_CREDENTIALS_FILE,
	// default ~/.aws) whose credentials sign the requests to URL. Empty:
	// the endpoint has no credentials and every request to it is unsigned;
	// the registry's ambient credentials (AWS_ACCESS_KEY_ID, its default
	// profile, an instance role) are never used for it.
	Profile string
}

// validProfile is what a profile name may be: no spaces, brackets or
// anything a shared config file would read differently.
var validProfile = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.+@-]{0,63}$`)

// ParseExportEndpointEntry parses one item of the operator's allow-list:
// an endpoint (ParseExportEndpoint) with, optionally, ";profile=NAME", the
// shared-config profile its requests are signed with. Without it the
// endpoint's exports are unsigned (see ExportEndpoint).
func ParseExportEndpointEntry(s string) (ExportEndpoint, error) {
	raw, params, hasParams := strings.Cut(s, ";")
	u, err := ParseExportEndpoint(raw)
	if err != nil {
		return ExportEndpoint{}, err
	}
	ep := ExportEndpoint{URL: u}
	if !hasParams {
		return ep, nil
	}
	const want = "after the endpoint only ;profile=NAME may follow (the AWS shared-config profile its requests are signed with; without it they are unsigned)"
	k, v, _ := strings.Cut(params, "=")
	switch {
	case k != "profile" || strings.Contains(v, ";"):
		return ExportEndpoint{}, fmt.Errorf("%s, got %q", want, s)
	case !validProfile.MatchString(v):
		return ExportEndpoint{}, fmt.Errorf("profile %q of %s must be 1 to 64 letters, digits and _.+@- (starting with a letter or digit)", v, u)
	}
	ep.Profile = v
	return ep, nil
}

// ParseExportEndpoints parses the operator's allow-list
// (ParseExportEndpointEntry each, at most MaxExportEndpoints, an endpoint
// once) and returns it in canonical form; the error names the item at
// fault.
func ParseExportEndpoints(list []string) ([]ExportEndpoint, error) {
	if len(list) > MaxExportEndpoints {
		return nil, fmt.Errorf("%d endpoints, more than the limit of %d", len(list), MaxExportEndpoints)
	}
	out := make([]ExportEndpoint, 0, len(list))
	for i, s := range list {
		ep, err := ParseExportEndpointEntry(s)
		if err != nil {
			return nil, fmt.Errorf("item %d: %w", i+1, err)
		}
		if j := slices.IndexFunc(out, func(o ExportEndpoint) bool { return o.URL == ep.URL }); j >= 0 && out[j] != ep {
			return nil, fmt.Errorf("item %d: %s is also item %d, with other credentials; list an endpoint once", i+1, ep.URL, j+1)
		}
		out = append(out, ep)
	}
	return out, nil
}

// SetExportEndpoints sets the S3-compatible endpoints an export destination
// may name with endpoint=, each with its credentials
// (ParseExportEndpoints' forms); nil, the default, refuses every
// destination with a query. Call it before serving.
func (r *Registry) SetExportEndpoints(list []string) error {
	eps, err := ParseExportEndpoints(list)
	if err != nil {
		return err
	}
	r.exportEndpoints = eps
	return nil
}

// checkDestinationQuery checks the query of export destination dst (which
// has one): s3:// only, each parameter once and from exportParams, the
// endpoint one the operator allowed. It returns the URL to open: dst with
// the endpoint's credentials, the operator's profile= or, for an endpoint
// without credentials (or the caller's anonymous=true), anonymous=true, so
// that the registry's ambient credentials never reach the endpoint.
func (r *Registry) checkDestinationQuery(field, dst string) (string, error) {
	const ask = "ask the registry's operator to allow the endpoint (-export-endpoints / LOOM_REGISTRY_EXPORT_ENDPOINTS)"
	u, err := url.Parse(dst)
	if err != nil {
		return "", errs.Invalid(field, "not a URL: %v", err)
	}
	if u.Scheme == "" || u.Scheme == "file" {
		return "", errs.Invalid(field, "a local destination must not hold '?'")
	}
	if u.Scheme != "s3" {
		return "", errs.Invalid(field, "only an s3:// destination may carry a query (an S3-compatible store's endpoint=); %s:// takes none: remove the '?…'", u.Scheme)
	}
	if len(r.exportEndpoints) == 0 {
		return "", errs.Invalid(field, "destinations with a query are turned off on this registry: to export to an S3-compatible store, %s", ask)
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return "", errs.Invalid(field, "query does not parse: %v", err)
	}
	for _, k := range slices.Sorted(maps.Keys(q)) {
		p, ok := exportParams[k]
		switch {
		case !ok && refusedParams[k] != "":
			return "", errs.Invalid(field, "parameter %q is refused: it %s; an export destination takes only %s", k, refusedParams[k], exportParamNames)
		case !ok:
			return "", errs.Invalid(field, "parameter %q is not allowed; an export destination takes only %s", k, exportParamNames)
		case len(q[k]) != 1:
			return "", errs.Invalid(field, "parameter %q is given %d times; give it once", k, len(q[k]))
		case !p.ok(q[k][0]):
			return "", errs.Invalid(field, "parameter %s must be %s, got %q", k, p.want, q[k][0])
		}
	}
	if !q.Has("endpoint") {
		return "", errs.Invalid(field, "a query needs endpoint= (an allowed S3-compatible endpoint); for Amazon S3 itself leave the query out (the region comes from AWS_REGION)")
	}
	if !q.Has("use_path_style") {
		return "", errs.Invalid(field, "endpoint= needs use_path_style=true, so that requests go to the allowed host itself")
	}
	ep, err := ParseExportEndpoint(q.Get("endpoint"))
	if err != nil {
		return "", errs.Invalid(field, "endpoint %v", err)
	}
	at := slices.IndexFunc(r.exportEndpoints, func(e ExportEndpoint) bool { return e.URL == ep })
	if at < 0 {
		return "", errs.Invalid(field, "endpoint %s is not one this registry may export to; %s", ep, ask)
	}
	allowed := r.exportEndpoints[at]
	switch {
	case q.Get("anonymous") == "true":
		// Unsigned, as asked.
	case allowed.Profile == "" && q.Has("anonymous"):
		return "", errs.Invalid(field, "endpoint %s has no credentials on this registry, so exports to it are unsigned: drop anonymous=false, "+
			"or ask the registry's operator to give it credentials (-export-endpoints / LOOM_REGISTRY_EXPORT_ENDPOINTS: %s;profile=NAME)", ep, ep)
	case allowed.Profile == "":
		q.Set("anonymous", "true")
	default:
		q.Del("anonymous")
		q.Set("profile", allowed.Profile)
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// artifactURL returns the URL to read a version's bucket artifacts at
// (uri, its artifact_uri): uri itself without a query; with one, only as
// an export destination may carry it (checkDestinationQuery: an endpoint
// the operator allowed, read with its own credentials or none). The
// registry reads artifacts with its own credentials and from where it
// stands: a query of the caller's (endpoint=http://127.0.0.1:PORT,
// profile=, private_key_path=, domain=) would aim those at any host, or
// pick them.
func (r *Registry) artifactURL(field, uri string) (string, error) {
	if !strings.Contains(uri, "?") {
		return uri, nil
	}
	if len(r.exportEndpoints) == 0 {
		return "", errs.Invalid(field, "a bucket URL with a query is turned off on this registry: it reads artifacts with its own credentials; "+
			"to read them from an S3-compatible store, ask the registry's operator to allow its endpoint (-export-endpoints / LOOM_REGISTRY_EXPORT_ENDPOINTS)")
	}
	return r.checkDestinationQuery(field, uri)
}

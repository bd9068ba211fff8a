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
	// Drops the registry's credentials (unsigned requests): it can only
	// lower what a request may do.
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

// ParseExportEndpoints parses the operator's allow-list (ParseExportEndpoint
// each, at most MaxExportEndpoints) and returns it in canonical form; the
// error names the item at fault.
func ParseExportEndpoints(list []string) ([]string, error) {
	if len(list) > MaxExportEndpoints {
		return nil, fmt.Errorf("%d endpoints, more than the limit of %d", len(list), MaxExportEndpoints)
	}
	out := make([]string, 0, len(list))
	for i, s := range list {
		c, err := ParseExportEndpoint(s)
		if err != nil {
			return nil, fmt.Errorf("item %d: %w", i+1, err)
		}
		out = append(out, c)
	}
	return out, nil
}

// SetExportEndpoints sets the S3-compatible endpoints an export destination
// may name with endpoint= (ParseExportEndpoints' forms); nil, the default,
// refuses every destination with a query. Call it before serving.
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
// endpoint one the operator allowed.
func (r *Registry) checkDestinationQuery(field, dst string) error {
	const ask = "ask the registry's operator to allow the endpoint (-export-endpoints / LOOM_REGISTRY_EXPORT_ENDPOINTS)"
	u, err := url.Parse(dst)
	if err != nil {
		return errs.Invalid(field, "not a URL: %v", err)
	}
	if u.Scheme == "" || u.Scheme == "file" {
		return errs.Invalid(field, "a local destination must not hold '?'")
	}
	if u.Scheme != "s3" {
		return errs.Invalid(field, "only an s3:// destination may carry a query (an S3-compatible store's endpoint=); %s:// takes none: remove the '?…'", u.Scheme)
	}
	if len(r.exportEndpoints) == 0 {
		return errs.Invalid(field, "destinations with a query are turned off on this registry: to export to an S3-compatible store, %s", ask)
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return errs.Invalid(field, "query does not parse: %v", err)
	}
	for _, k := range slices.Sorted(maps.Keys(q)) {
		p, ok := exportParams[k]
		switch {
		case !ok && refusedParams[k] != "":
			return errs.Invalid(field, "parameter %q is refused: it %s; an export destination takes only %s", k, refusedParams[k], exportParamNames)
		case !ok:
			return errs.Invalid(field, "parameter %q is not allowed; an export destination takes only %s", k, exportParamNames)
		case len(q[k]) != 1:
			return errs.Invalid(field, "parameter %q is given %d times; give it once", k, len(q[k]))
		case !p.ok(q[k][0]):
			return errs.Invalid(field, "parameter %s must be %s, got %q", k, p.want, q[k][0])
		}
	}
	if !q.Has("endpoint") {
		return errs.Invalid(field, "a query needs endpoint= (an allowed S3-compatible endpoint); for Amazon S3 itself leave the query out (the region comes from AWS_REGION)")
	}
	if !q.Has("use_path_style") {
		return errs.Invalid(field, "endpoint= needs use_path_style=true, so that requests go to the allowed host itself")
	}
	ep, err := ParseExportEndpoint(q.Get("endpoint"))
	if err != nil {
		return errs.Invalid(field, "endpoint %v", err)
	}
	if !slices.Contains(r.exportEndpoints, ep) {
		return errs.Invalid(field, "endpoint %s is not one this registry may export to; %s", ep, ask)
	}
	return nil
}

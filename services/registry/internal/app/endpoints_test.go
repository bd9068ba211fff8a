package app

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loom-ml/loom/libs/errs"
)

// TestParseExportEndpoint: the allow-list takes http and https endpoints
// with a host and an explicit port, in canonical (lower-case) form, and
// refuses anything else, saying what the form is.
func TestParseExportEndpoint(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"http://127.0.0.1:9000":         "http://127.0.0.1:9000",
		"HTTPS://MinIO.Example:443":     "https://minio.example:443",
		"http://[::1]:9000":             "http://[::1]:9000",
		"https://s3.ceph.internal:7480": "https://s3.ceph.internal:7480",
	} {
		got, err := ParseExportEndpoint(in)
		if err != nil || got != want {
			t.Errorf("ParseExportEndpoint(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{
		"", "minio:9000", "127.0.0.1:9000", "http://minio", "http://minio:", "http://minio:0", "http://minio:65536",
		"http://minio:09000", "http://minio:9000/", "http://minio:9000/bucket", "http://u:p@minio:9000",
		"http://minio:9000?x=1", "http://minio:9000#f", "ftp://minio:21", "file:///etc", "http://:9000",
		"http://" + strings.Repeat("a", 300) + ":9000",
	} {
		if got, err := ParseExportEndpoint(in); err == nil {
			t.Errorf("ParseExportEndpoint(%q) = %q; want a refusal", in, got)
		} else if !strings.Contains(err.Error(), "scheme://host:port") && !strings.Contains(err.Error(), "limit") {
			t.Errorf("ParseExportEndpoint(%q) = %v; want the error to say the form", in, err)
		}
	}
	many := make([]string, MaxExportEndpoints+1)
	for i := range many {
		many[i] = "http://127.0.0.1:9000"
	}
	if _, err := ParseExportEndpoints(many); err == nil || !strings.Contains(err.Error(), "limit of 64") {
		t.Errorf("ParseExportEndpoints(%d endpoints) = %v; want the limit", len(many), err)
	}
	if _, err := ParseExportEndpoints([]string{"http://a:1", "b:2"}); err == nil || !strings.Contains(err.Error(), "item 2") {
		t.Errorf("ParseExportEndpoints with a bad second item = %v; want it named", err)
	}
}

// TestCheckDestinationQuery: with no endpoint allowed every destination
// with a query is refused, pointing at the flag; with one allowed, only an
// s3:// destination naming it exactly (any case), with use_path_style=true
// and nothing outside endpoint, region, use_path_style and anonymous,
// passes. Every refusal is InvalidArgument on the field.
func TestCheckDestinationQuery(t *testing.T) {
	t.Parallel()
	const field = "output_config.artifact_destination.output_uri_prefix"
	const ok = "s3://models/exp?endpoint=http%3A%2F%2F127.0.0.1%3A9000&use_path_style=true"
	off := &Registry{}
	r := &Registry{}
	if err := r.SetExportEndpoints([]string{"http://127.0.0.1:9000", "https://minio.example:9443"}); err != nil {
		t.Fatal(err)
	}
	if err := r.SetProjectBuckets([]string{AnyBucket}); err != nil {
		t.Fatal(err)
	}
	if err := r.SetExportEndpoints([]string{"minio.example:9443"}); err == nil {
		t.Error("SetExportEndpoints(no scheme) = nil; want a refusal")
	}
	refused := func(reg *Registry, dst, says string) {
		t.Helper()
		_, err := reg.checkDestination(field, "p", dst)
		var inv *errs.InvalidError
		if !errors.As(err, &inv) || inv.Violations[0].Field != field || !strings.Contains(err.Error(), says) {
			t.Errorf("checkDestination(%q) = %v; want InvalidArgument on %s saying %q", dst, err, field, says)
		}
	}
	refused(off, ok, "destinations with a query are turned off on this registry")
	refused(off, ok, "-export-endpoints / LOOM_REGISTRY_EXPORT_ENDPOINTS")
	for _, dst := range []string{
		ok,
		ok + "&region=us-east-1&anonymous=true",
		"s3://models/exp?endpoint=HTTPS://MINIO.EXAMPLE:9443&use_path_style=true&region=eu-west-1",
		"s3://models/exp/deep/prefix?use_path_style=true&endpoint=https://minio.example:9443",
	} {
		if _, err := r.checkDestination(field, "p", dst); err != nil {
			t.Errorf("checkDestination(%q) = %v; want it allowed", dst, err)
		}
	}
	for _, tc := range []struct{ dst, says string }{
		{"s3://models/exp?endpoint=http://127.0.0.1:9001&use_path_style=true", "endpoint http://127.0.0.1:9001 is not one this registry may export to; ask the registry's operator"},
		{"s3://models/exp?endpoint=http://169.254.169.254:80&use_path_style=true", "is not one this registry may export to"},
		{"s3://models/exp?endpoint=https://127.0.0.1:9000&use_path_style=true", "is not one this registry may export to"},
		{"s3://models/exp?endpoint=http://127.0.0.1:9000/x&use_path_style=true", "endpoint must be scheme://host:port"},
		{"s3://models/exp?endpoint=http://evil@127.0.0.1:9000&use_path_style=true", "endpoint must be scheme://host:port"},
		{"s3://models/exp?endpoint=http://127.0.0.1:9000%3Fa%3Db&use_path_style=true", "endpoint must be scheme://host:port"},
		{"s3://models/exp?endpoint=http://127.0.0.1:9000", "needs use_path_style=true"},
		{ok + "&endpoint=http://127.0.0.1:9000", `parameter "endpoint" is given 2 times`},
		{ok + "&hostname_immutable=true", `parameter "hostname_immutable" is refused: it changes the host`},
		{ok + "&role=arn:aws:iam::1:role/admin", `parameter "role" is refused`},
		{ok + "&profile=prod", `parameter "profile" is refused`},
		{ok + "&awssdk=v1", `parameter "awssdk" is refused`},
		{ok + "&disable_https=true", `parameter "disable_https" is refused`},
		{ok + "&s3ForcePathStyle=true", "write use_path_style=true"},
		{ok + "&kmskeyid=k", `parameter "kmskeyid" is not allowed`},
		{ok + "&prefix=other/", `parameter "prefix" is not allowed`},
		{ok + "&region=us-east-1.evil.com", "parameter region must be a region name"},
		{ok + "&anonymous=1", "parameter anonymous must be true or false"},
		{ok + "&anonymous=false", "endpoint http://127.0.0.1:9000 has no credentials on this registry, so exports to it are unsigned: drop anonymous=false, or ask the registry's operator to give it credentials (-export-endpoints / LOOM_REGISTRY_EXPORT_ENDPOINTS: http://127.0.0.1:9000;profile=NAME)"},
		{ok + ";x=1", "query does not parse"},
		{"s3://models/exp?region=us-east-1", "a query needs endpoint="},
		{"gs://models/exp?endpoint=http://127.0.0.1:9000", "only an s3:// destination may carry a query"},
		{"azblob://models/exp?localemu=true", "only an s3:// destination may carry a query"},
		{"/exports/m?x=1", "a local destination must not hold '?'"},
		{"s3://models/exp#frag", "must not hold NUL or '#'"},
	} {
		refused(r, tc.dst, tc.says)
	}
}

// TestParseExportEndpointEntry: an allow-list item is an endpoint, alone
// (no credentials: its exports are unsigned) or with ;profile=NAME (the
// shared-config profile that signs them); anything else after the
// endpoint, a bad profile name or one endpoint listed twice with other
// credentials is refused, saying the form.
func TestParseExportEndpointEntry(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]ExportEndpoint{
		"http://127.0.0.1:9000":                      {URL: "http://127.0.0.1:9000"},
		"HTTPS://MinIO.Example:443;profile=minio-rw": {URL: "https://minio.example:443", Profile: "minio-rw"},
		"https://ceph:7480;profile=team_a.export":    {URL: "https://ceph:7480", Profile: "team_a.export"},
	} {
		got, err := ParseExportEndpointEntry(in)
		if err != nil || got != want {
			t.Errorf("ParseExportEndpointEntry(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for in, says := range map[string]string{
		"http://a:1;":                                   "only ;profile=NAME may follow",
		"http://a:1;anonymous":                          "only ;profile=NAME may follow",
		"http://a:1;credentials=/etc/x":                 "only ;profile=NAME may follow",
		"http://a:1;profile=a;profile=b":                "only ;profile=NAME may follow",
		"http://a:1;profile=":                           `profile "" of http://a:1 must be`,
		"http://a:1;profile=a b":                        `profile "a b" of http://a:1 must be`,
		"http://a:1;profile=[default]":                  "must be 1 to 64 letters",
		"a:1;profile=x":                                 "scheme://host:port",
		"http://a:1/p;profile=x":                        "scheme://host:port",
		"http://a:1;profile=" + strings.Repeat("p", 65): "must be 1 to 64 letters",
	} {
		if got, err := ParseExportEndpointEntry(in); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("ParseExportEndpointEntry(%q) = %+v, %v; want a refusal saying %q", in, got, err, says)
		}
	}
	if _, err := ParseExportEndpoints([]string{"http://a:1;profile=x", "HTTP://A:1"}); err == nil || !strings.Contains(err.Error(), "item 2: http://a:1 is also item 1, with other credentials") {
		t.Errorf("one endpoint twice with other credentials = %v; want it refused", err)
	}
	if eps, err := ParseExportEndpoints([]string{"http://a:1", "http://a:1"}); err != nil || len(eps) != 2 {
		t.Errorf("one endpoint twice alike = %v, %v; want it taken", eps, err)
	}
}

// TestDestinationCredentials: the URL the registry opens for a destination
// at an allowed endpoint carries that endpoint's credentials and nothing
// of its own: anonymous=true where the operator gave none, the operator's
// profile= where it gave one (the caller's anonymous=true still wins), and
// a destination without a query is opened as it is.
func TestDestinationCredentials(t *testing.T) {
	t.Parallel()
	const field = "output_config.artifact_destination.output_uri_prefix"
	r := &Registry{}
	if err := r.SetExportEndpoints([]string{"http://127.0.0.1:9000", "https://minio.example:9443;profile=minio-export"}); err != nil {
		t.Fatal(err)
	}
	if err := r.SetProjectBuckets([]string{AnyBucket}); err != nil {
		t.Fatal(err)
	}
	for dst, want := range map[string]string{
		"s3://m/exp?endpoint=http://127.0.0.1:9000&use_path_style=true":                       "s3://m/exp?anonymous=true&endpoint=http%3A%2F%2F127.0.0.1%3A9000&use_path_style=true",
		"s3://m/exp?endpoint=http://127.0.0.1:9000&use_path_style=true&anonymous=true":        "s3://m/exp?anonymous=true&endpoint=http%3A%2F%2F127.0.0.1%3A9000&use_path_style=true",
		"s3://m/exp?endpoint=https://minio.example:9443&use_path_style=true&region=eu-west-1": "s3://m/exp?endpoint=https%3A%2F%2Fminio.example%3A9443&profile=minio-export&region=eu-west-1&use_path_style=true",
		"s3://m/exp?endpoint=https://minio.example:9443&use_path_style=true&anonymous=false":  "s3://m/exp?endpoint=https%3A%2F%2Fminio.example%3A9443&profile=minio-export&use_path_style=true",
		"s3://m/exp?endpoint=https://minio.example:9443&use_path_style=true&anonymous=true":   "s3://m/exp?anonymous=true&endpoint=https%3A%2F%2Fminio.example%3A9443&use_path_style=true",
		"s3://m/exp": "s3://m/exp",
	} {
		got, err := r.checkDestination(field, "p", dst)
		if err != nil || got != want {
			t.Errorf("checkDestination(%q) = %q, %v; want %q", dst, got, err, want)
		}
	}
}

// TestProjectBuckets: a bucket the registry opens with credentials must lie
// under the caller's project's prefix, compared segment by segment on the
// parsed URL; unsigned requests (anonymous=true) and mem:// need none;
// with no prefix set every such bucket is refused, naming the setting; the
// operator's list is checked at start.
func TestProjectBuckets(t *testing.T) {
	t.Parallel()
	const field = "model.artifact_uri"
	off := &Registry{}
	if err := off.checkBucket(field, "a", "s3://models/a/m1", "s3://models/a/m1"); err == nil || !strings.Contains(err.Error(), "-project-buckets / LOOM_REGISTRY_PROJECT_BUCKETS") {
		t.Errorf("checkBucket with no prefixes = %v; want a refusal naming the setting", err)
	}
	r := &Registry{}
	if err := r.SetProjectBuckets([]string{"s3://models/{project}", "gs://loom-{project}/artifacts/"}); err != nil {
		t.Fatal(err)
	}
	anon := "s3://models/b/m?anonymous=true&endpoint=http%3A%2F%2F127.0.0.1%3A9000&use_path_style=true"
	for _, uri := range []string{"s3://models/a", "s3://models/a/", "s3://models/a/m1/v2", "gs://loom-a/artifacts/m1", "mem://models/b", anon} {
		if err := r.checkBucket(field, "a", uri, uri); err != nil {
			t.Errorf("checkBucket(project a, %s) = %v; want it allowed", uri, err)
		}
	}
	for _, uri := range []string{"s3://models/b/m1", "s3://models/ab/m1", "s3://models/a/../b/m1", "s3://models/%61/m1x/../../b",
		"s3://models//a/m1", "s3://other/a/m1", "gs://loom-b/artifacts/m1", "gs://loom-a/m1", "azblob://models/a/m1",
		"s3://models/b/m?endpoint=http%3A%2F%2F127.0.0.1%3A9000&profile=ops&use_path_style=true"} {
		err := r.checkBucket(field, "a", uri, uri)
		var inv *errs.InvalidError
		if !errors.As(err, &inv) || inv.Violations[0].Field != field || !strings.Contains(err.Error(), "outside project a's part") {
			t.Errorf("checkBucket(project a, %s) = %v; want InvalidArgument on %s", uri, err, field)
		}
	}
	for _, bad := range [][]string{{"s3://models/"}, {"s3://models/{project}/{project}"}, {"http://x/{project}"},
		{"s3://models/{project}?region=x"}, {"*", "s3://m/{project}"}, {"s3:///{project}"}} {
		if _, err := ParseProjectBuckets(bad); err == nil || !strings.Contains(err.Error(), "item") {
			t.Errorf("ParseProjectBuckets(%q) = %v; want a refusal naming the item", bad, err)
		}
	}
}

// TestLocalDestinationInAnyCase: a file:// destination in another case is
// still a local directory, confined to the project's directory of the
// export root, even when any bucket is allowed (blobstore.Open reads the
// scheme in any case); a '%' in a local path is refused, since Open would
// decode it; and no other scheme passes as a bucket.
func TestLocalDestinationInAnyCase(t *testing.T) {
	t.Parallel()
	const field = "output_config.artifact_destination.output_uri_prefix"
	r := &Registry{exportRoot: "/exports"}
	if err := r.SetProjectBuckets([]string{AnyBucket}); err != nil {
		t.Fatal(err)
	}
	for dst, says := range map[string]string{
		"FILE:///etc/cron.d":              "outside project p's directory of the export root",
		"File:///exports/other/x":         "outside project p's directory of the export root",
		"file:///exports/p/%2e%2e/other":  "must not hold '%'",
		"/exports/p/a%2Fb":                "must not hold '%'",
		"http://169.254.169.254/latest/x": "only s3://, gs:// and azblob:// are buckets",
	} {
		if _, err := r.checkDestination(field, "p", dst); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("checkDestination(%q) = %v; want a refusal saying %q", dst, err, says)
		}
	}
	if got, err := r.checkDestination(field, "p", "FILE:///exports/p/m1"); err != nil || got != "file:///exports/p/m1?"+noAttrs {
		t.Errorf("checkDestination(FILE:// under the project's directory) = %q, %v", got, err)
	}

	// A link on the way (planted by whoever may write there) is not
	// followed: the registry writes with its own rights.
	root := t.TempDir()
	r.exportRoot = root
	if err := os.MkdirAll(filepath.Join(root, "p", "real"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(t.TempDir(), filepath.Join(root, "p", "link")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.checkDestination(field, "p", "file://"+filepath.Join(root, "p", "link", "m1")); err == nil || !strings.Contains(err.Error(), "is not a directory of the export root (a link or a file)") {
		t.Errorf("checkDestination(through a link) = %v; want a refusal", err)
	}
	if _, err := r.checkDestination(field, "p", "file://"+filepath.Join(root, "p", "real", "new", "m1")); err != nil {
		t.Errorf("checkDestination(a new directory under a real one) = %v", err)
	}
}

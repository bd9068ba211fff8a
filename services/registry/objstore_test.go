package registry

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/loom-ml/loom/libs/blobstore"
	"github.com/loom-ml/loom/libs/blobstore/blobtest"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/registry/internal/artifact"
)

// putArtifacts writes files (name to bytes) under prefix of the bucket at
// storeURL, with a MANIFEST listing manifest's names and sums (nil: every
// file, as artifact.WriteManifest would), and returns the prefix's URL.
func putArtifacts(t *testing.T, storeURL, prefix string, files map[string][]byte, manifest []string) string {
	t.Helper()
	ctx := context.Background()
	b, err := blobstore.Open(ctx, storeURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	s, err := b.Sub(prefix)
	if err != nil {
		t.Fatal(err)
	}
	if manifest == nil {
		for name, data := range files {
			manifest = append(manifest, fmt.Sprintf("%x  %s", sha256.Sum256(data), name))
		}
	}
	for name, data := range files {
		if err := s.WriteFile(ctx, name, data); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.WriteFile(ctx, artifact.Manifest, []byte(strings.Join(manifest, "\n")+"\n")); err != nil {
		t.Fatal(err)
	}
	return s.URL()
}

// objectStores are the stores an artifact_uri may name in these tests,
// each making a fresh, empty bucket.
var objectStores = []struct {
	name string
	url  func(t *testing.T) string
}{
	{"file", func(t *testing.T) string { return "file://" + filepath.Join(t.TempDir(), "store") }},
	{"s3", func(t *testing.T) string { return blobtest.S3(t).URL }},
	{"gs", func(t *testing.T) string { return blobtest.GCS(t).URL }},
	{"azblob", func(t *testing.T) string { return blobtest.Azure(t).URL }},
}

// TestVerifyURLSchemes: the registration check (artifact.VerifyURL) takes a
// complete artifact set on every store and refuses, naming the object at
// fault, a missing object, a changed one, a MANIFEST that climbs out of
// the set, and an empty location.
func TestVerifyURLSchemes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	files := map[string][]byte{"model.json": []byte(`{"w":[1,2]}`), "weights/part-0.bin": bytes.Repeat([]byte{7}, 70_000)}
	sum := func(b []byte) string { return fmt.Sprintf("%x", sha256.Sum256(b)) }
	for _, st := range objectStores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			store := st.url(t)
			complete := putArtifacts(t, store, "projects/p1/models/m1/versions/1", files, nil)
			if _, err := artifact.VerifyURL(ctx, complete); err != nil {
				t.Errorf("VerifyURL(complete set %s) = %v", complete, err)
			}
			for _, tc := range []struct {
				name     string
				manifest []string
				says     string
			}{
				{"missing", []string{sum(files["model.json"]) + "  model.json", sum(files["model.json"]) + "  weights/part-1.bin"}, "weights/part-1.bin is missing"},
				{"changed", []string{sum([]byte("other")) + "  model.json"}, "model.json: sha256 " + sum(files["model.json"])},
				{"escapes", []string{sum(files["model.json"]) + "  ../m2/model.json"}, "leaves the artifact directory"},
			} {
				u := putArtifacts(t, store, "projects/p1/models/"+tc.name, files, tc.manifest)
				if _, err := artifact.VerifyURL(ctx, u); err == nil || !strings.Contains(err.Error(), tc.says) {
					t.Errorf("VerifyURL(%s set) = %v; want an error saying %q", tc.name, err, tc.says)
				}
			}
			empty := strings.Replace(complete, "/models/m1/versions/1", "/models/none", 1)
			if st.name == "file" {
				if err := os.MkdirAll(strings.TrimPrefix(empty, "file://"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := artifact.VerifyURL(ctx, empty); err == nil {
				t.Errorf("VerifyURL(empty location %s) = nil; want a refusal", empty)
			}
		})
	}
}

// TestObjectStoreArtifacts registers a model version whose artifacts are
// in an S3 bucket (the URL with the site's endpoint parameters), then
// exports it to a GCS bucket and to a local directory: the copies are
// byte for byte the artifacts, and a second export copies nothing. A
// version whose S3 artifacts lack an object listed in the MANIFEST is
// refused.
func TestObjectStoreArtifacts(t *testing.T) {
	t.Parallel()
	// Artifacts in an S3-compatible store are read only from an endpoint the
	// operator allowed.
	s3 := blobtest.S3(t)
	// GCS is reached with the registry's own credentials: only each
	// project's part of the bucket.
	gs := blobtest.GCS(t)
	x := newExportFixture(t, 2*time.Minute, func(cfg *Config) {
		cfg.ExportEndpoints = []string{endpointOf(t, s3)}
		cfg.ProjectBuckets = []string{gs.URL + "/{project}/"}
	})
	ctx, c, root := x.ctx, x.c, x.root

	files := map[string][]byte{"model.json": []byte(`{"weights":[0.25,0.5]}`), "ckpt/step-10.bin": bytes.Repeat([]byte("w"), 300_000)}
	src := putArtifacts(t, s3.URL, "projects/default/models/s3m/v1", files, nil)
	// The registry reads a bucket with its own credentials: a query may
	// only name an allowed endpoint, never another host (SSRF) or pick
	// credentials.
	for uri, says := range map[string]string{
		"s3://b/p?endpoint=" + url.QueryEscape("http://127.0.0.1:9") + "&use_path_style=true": "is not one this registry may export to",
		"s3://b/p?profile=admin":         `parameter "profile" is refused`,
		"gs://b/p?private_key_path=/etc": "only an s3:// destination may carry a query",
	} {
		_, err := c.UploadModel(ctx, &loomv1.UploadModelRequest{Parent: vertexParent, ModelId: "ssrf", Model: &loomv1.Model{ArtifactUri: uri}})
		wantCode(t, uri, err, codes.InvalidArgument, "model.artifact_uri: ")
		wantCode(t, uri, err, codes.InvalidArgument, says)
	}
	op, err := c.UploadModel(ctx, &loomv1.UploadModelRequest{Parent: vertexParent, ModelId: "s3m", Model: &loomv1.Model{ArtifactUri: src}})
	if err != nil {
		t.Fatal(err)
	}
	if !op.GetDone() || op.GetUploadModel().GetModelVersionId() != "1" {
		t.Fatalf("UploadModel = %v; want version 1 registered", op)
	}
	const name = "projects/default/locations/global/models/s3m"
	m, err := c.GetModel(ctx, &loomv1.GetModelRequest{Name: name})
	if err != nil || m.GetArtifactUri() != src {
		t.Fatalf("GetModel = %v, %v; want artifact_uri %s", m, err, src)
	}

	// A version with an object missing is refused, naming it.
	broken := putArtifacts(t, s3.URL, "projects/default/models/s3m/v2", map[string][]byte{"model.json": files["model.json"]},
		[]string{fmt.Sprintf("%x  model.json", sha256.Sum256(files["model.json"])), fmt.Sprintf("%x  ckpt/step-10.bin", sha256.Sum256(files["ckpt/step-10.bin"]))})
	if _, err := c.UploadModel(ctx, &loomv1.UploadModelRequest{Parent: vertexParent, ParentModel: name, Model: &loomv1.Model{ArtifactUri: broken}}); err == nil || !strings.Contains(err.Error(), "ckpt/step-10.bin is missing") {
		t.Errorf("UploadModel(incomplete S3 set) = %v; want a refusal naming ckpt/step-10.bin", err)
	}

	// Another project's part of the store is refused, to read an artifact
	// set from and to export into; so is a bucket no prefix names.
	theirs := putArtifacts(t, gs.URL, "other/models/secret", files, nil)
	_, err = c.UploadModel(ctx, &loomv1.UploadModelRequest{Parent: vertexParent, ModelId: "stolen", Model: &loomv1.Model{ArtifactUri: theirs}})
	wantCode(t, "an upload from another project's prefix", err, codes.InvalidArgument, "model.artifact_uri: "+theirs+" is outside project default's part of the registry's stores: it must lie under "+gs.URL+"/default/")
	for _, dst := range []string{gs.URL + "/other/s3m-1", gs.URL + "/s3m-1", "s3://elsewhere/default/s3m-1"} {
		_, err := c.ExportModel(ctx, &loomv1.ExportModelRequest{Name: name + "@1", OutputConfig: &loomv1.ExportModelOutputConfig{
			ArtifactDestination: &loomv1.GcsDestination{OutputUriPrefix: dst}}})
		wantCode(t, "an export to "+dst, err, codes.InvalidArgument, "outside project default's part of the registry's stores")
	}

	want := map[string][]byte{artifact.Manifest: nil}
	for k, v := range files {
		want[k] = v
	}
	for _, dst := range []string{gs.URL + "/default/exports/s3m-1", "file://" + filepath.Join(root, "default", "s3m-1")} {
		req := &loomv1.ExportModelRequest{Name: name + "@1", OutputConfig: &loomv1.ExportModelOutputConfig{
			ArtifactDestination: &loomv1.GcsDestination{OutputUriPrefix: dst}}}
		res, err := c.ExportModel(ctx, req)
		if err != nil || res.GetExportModel().GetCopied() != 3 {
			t.Fatalf("ExportModel to %s = %v, %v; want 3 objects copied", dst, res, err)
		}
		b, err := blobstore.Open(ctx, dst)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := b.List(ctx)
		if err != nil || len(objs) != 3 {
			t.Fatalf("%s lists %v, %v; want 3 objects", dst, objs, err)
		}
		for _, o := range objs {
			r, err := b.NewReader(ctx, o.Key)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(r)
			r.Close()
			if err != nil {
				t.Fatal(err)
			}
			if w, ok := want[o.Key]; !ok || (w != nil && !bytes.Equal(got, w)) {
				t.Errorf("%s %s: %d bytes, not the artifact's", dst, o.Key, len(got))
			}
		}
		b.Close()
		writes := gs.Stats().Writes.Load()
		again, err := c.ExportModel(ctx, req)
		if err != nil || again.GetExportModel().GetCopied() != 0 || again.GetExportModel().GetSkipped() != 3 {
			t.Fatalf("second ExportModel to %s = %v, %v; want nothing copied", dst, again, err)
		}
		if n := gs.Stats().Writes.Load() - writes; n != 0 {
			t.Errorf("second export sent GCS %d writes; want none", n)
		}
	}
}

// endpointOf is the endpoint= parameter of a blobtest store's URL.
func endpointOf(t *testing.T, st *blobtest.Store) string {
	t.Helper()
	u, err := url.Parse(st.URL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Query().Get("endpoint")
}

// TestExportToAllowedEndpoint exports a version whose artifacts are on one
// S3 fake to another that the operator allowed (-export-endpoints), through
// a destination carrying endpoint=, region=, use_path_style= and
// anonymous=: the copy is byte for byte and a second export writes
// nothing. A destination naming the first fake (running, not allowed), an
// unknown parameter, a credential parameter, a gs:// destination with a
// query and one without use_path_style are refused with InvalidArgument
// naming the field and what to do, and nothing reaches either store.
func TestExportToAllowedEndpoint(t *testing.T) {
	t.Parallel()
	srcStore, dstStore := blobtest.S3(t), blobtest.S3(t)
	// No export root: local destinations are not what is tested here.
	x := newExportFixture(t, 2*time.Minute, func(cfg *Config) {
		cfg.ExportRoot = ""
		cfg.ExportEndpoints = []string{"https://minio.example:9000", endpointOf(t, dstStore), endpointOf(t, srcStore)}
	})
	ctx, c := x.ctx, x.c

	files := map[string][]byte{"model.json": []byte(`{"weights":[1,2,3]}`), "ckpt/step-20.bin": bytes.Repeat([]byte{0, 1, 2, 254}, 100_000)}
	src := putArtifacts(t, srcStore.URL, "projects/default/models/ep/v1", files, nil)
	if _, err := c.UploadModel(ctx, &loomv1.UploadModelRequest{Parent: vertexParent, ModelId: "ep", Model: &loomv1.Model{ArtifactUri: src}}); err != nil {
		t.Fatal(err)
	}
	const name = "projects/default/locations/global/models/ep@1"
	export := func(dst string) (*loomv1.Operation, error) {
		return c.ExportModel(ctx, &loomv1.ExportModelRequest{Name: name, OutputConfig: &loomv1.ExportModelOutputConfig{
			ArtifactDestination: &loomv1.GcsDestination{OutputUriPrefix: dst}}})
	}

	const field = "output_config.artifact_destination.output_uri_prefix"
	dst := dstStore.Prefixed("exports/ep-1")
	srcWrites, dstWrites := srcStore.Stats().Writes.Load(), dstStore.Stats().Writes.Load()
	for _, tc := range []struct{ what, dst, says string }{
		{"an endpoint not allowed", blobtest.S3(t).Prefixed("exports/ep-1"), "is not one this registry may export to; ask the registry's operator to allow the endpoint (-export-endpoints"},
		{"an unknown parameter", dst + "&sse=1", `parameter "sse" is not allowed; an export destination takes only endpoint, region, use_path_style, anonymous`},
		{"a credential profile", dst + "&profile=admin", `parameter "profile" is refused: it selects one of the registry's credential profiles`},
		{"a credential file", dst + "&web_identity_token_file=/var/run/secrets/token", `parameter "web_identity_token_file" is refused`},
		{"an endpoint given twice", dst + "&endpoint=" + url.QueryEscape(endpointOf(t, srcStore)), `parameter "endpoint" is given 2 times`},
		{"virtual-hosted addressing", strings.Replace(dst, "use_path_style=true", "use_path_style=false", 1), "parameter use_path_style must be true"},
		{"a gs:// query", "gs://bucket/exports?endpoint=" + url.QueryEscape(endpointOf(t, dstStore)), "only an s3:// destination may carry a query"},
		{"a local query", "file:///tmp/exports?no_tmp_dir=1", "a local destination must not hold '?'"},
		{"no endpoint", "s3://" + dstStore.Bucket + "/exports?region=us-east-1", "a query needs endpoint="},
	} {
		_, err := export(tc.dst)
		wantCode(t, tc.what, err, codes.InvalidArgument, field+": ")
		wantCode(t, tc.what, err, codes.InvalidArgument, tc.says)
	}
	if n := srcStore.Stats().Writes.Load() - srcWrites; n != 0 {
		t.Errorf("refused exports sent the source's store %d writes; want none", n)
	}
	if n := dstStore.Stats().Writes.Load() - dstWrites; n != 0 {
		t.Errorf("refused exports sent the allowed store %d writes; want none", n)
	}

	res, err := export(dst)
	if err != nil || res.GetExportModel().GetCopied() != 3 {
		t.Fatalf("ExportModel to %s = %v, %v; want 3 objects copied", dst, res, err)
	}
	// Every object, the MANIFEST included, is the source's, byte for byte.
	read := func(b *blobstore.Bucket, key string) []byte {
		t.Helper()
		r, err := b.NewReader(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		data, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	sb, err := blobstore.Open(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	b, err := blobstore.Open(ctx, dst)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	objs, err := b.List(ctx)
	if err != nil || len(objs) != 3 {
		t.Fatalf("%s lists %v, %v; want 3 objects", dst, objs, err)
	}
	for _, o := range objs {
		if _, ok := files[o.Key]; !ok && o.Key != artifact.Manifest {
			t.Errorf("%s holds %s, not an artifact", dst, o.Key)
			continue
		}
		if got, want := read(b, o.Key), read(sb, o.Key); !bytes.Equal(got, want) {
			t.Errorf("%s %s: %d bytes, not the artifact's %d", dst, o.Key, len(got), len(want))
		}
	}
	writes := dstStore.Stats().Writes.Load()
	again, err := export(dst)
	if err != nil || again.GetExportModel().GetCopied() != 0 || again.GetExportModel().GetSkipped() != 3 {
		t.Fatalf("second ExportModel to %s = %v, %v; want nothing copied", dst, again, err)
	}
	if n := dstStore.Stats().Writes.Load() - writes; n != 0 {
		t.Errorf("second export sent the store %d writes; want none", n)
	}
}

// authRecorder is a reverse proxy in front of an S3 fake that keeps the
// Authorization header of every request it passes on (empty: unsigned).
type authRecorder struct {
	URL string
	mu  sync.Mutex
	got []string
}

func newAuthRecorder(t *testing.T, st *blobtest.Store) *authRecorder {
	t.Helper()
	target, err := url.Parse(endpointOf(t, st))
	if err != nil {
		t.Fatal(err)
	}
	rec := &authRecorder{}
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.mu.Lock()
		rec.got = append(rec.got, r.Header.Get("Authorization"))
		rec.mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	rec.URL = srv.URL
	return rec
}

// seen returns the Authorization headers recorded so far and forgets them.
func (a *authRecorder) seen() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	got := a.got
	a.got = nil
	return got
}

// TestExportEndpointCredentials: the registry's own credentials (here
// AWS_ACCESS_KEY_ID in its environment) never reach an allowed export
// endpoint. One listed without credentials gets unsigned requests only (no
// Authorization header), even though the destination does not say
// anonymous=true, and a destination asking for signed requests there
// (anonymous=false) is refused naming the setting; one listed with
// ;profile=NAME gets requests signed with that profile's key from the
// registry's shared credentials file. Not parallel: it sets the AWS
// variables, which are process-wide.
func TestExportEndpointCredentials(t *testing.T) {
	const ambientKey, profileKey = "AKIAREGISTRYAMBIENT0", "AKIAOPERATORPROFILE0"
	t.Setenv("AWS_ACCESS_KEY_ID", ambientKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", "ambient-secret")
	credFile := filepath.Join(t.TempDir(), "credentials")
	if err := os.WriteFile(credFile, []byte("[default]\naws_access_key_id = AKIADEFAULTPROFILE00\naws_secret_access_key = d\n\n"+
		"[loom-export]\naws_access_key_id = "+profileKey+"\naws_secret_access_key = operator-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", credFile)
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "no-config"))

	srcStore, bare, signed := blobtest.S3(t), blobtest.S3(t), blobtest.S3(t)
	bareRec, signedRec := newAuthRecorder(t, bare), newAuthRecorder(t, signed)
	x := newExportFixture(t, 2*time.Minute, func(cfg *Config) {
		cfg.ExportRoot = "" // as in TestExportToAllowedEndpoint
		cfg.ExportEndpoints = []string{bareRec.URL, signedRec.URL + ";profile=loom-export", endpointOf(t, srcStore)}
		// Signed requests reach only the project's part of the bucket.
		cfg.ProjectBuckets = []string{"s3://" + signed.Bucket + "/{project}/"}
	})
	ctx, c := x.ctx, x.c
	files := map[string][]byte{"model.json": []byte(`{"w":[1]}`)}
	src := putArtifacts(t, srcStore.URL, "projects/default/models/cred/v1", files, nil)
	if _, err := c.UploadModel(ctx, &loomv1.UploadModelRequest{Parent: vertexParent, ModelId: "cred", Model: &loomv1.Model{ArtifactUri: src}}); err != nil {
		t.Fatal(err)
	}
	export := func(dst string) (*loomv1.ExportModelResponse, error) {
		op, err := c.ExportModel(ctx, &loomv1.ExportModelRequest{Name: "projects/default/locations/global/models/cred@1",
			OutputConfig: &loomv1.ExportModelOutputConfig{ArtifactDestination: &loomv1.GcsDestination{OutputUriPrefix: dst}}})
		return op.GetExportModel(), err
	}
	dest := func(st *blobtest.Store, endpoint, extra string) string {
		return "s3://" + st.Bucket + "/default/cred?endpoint=" + url.QueryEscape(endpoint) + "&use_path_style=true&region=" + blobtest.S3Region + extra
	}

	// No credentials listed: unsigned, and the answer is the caller's URL.
	dst := dest(bare, bareRec.URL, "")
	res, err := export(dst)
	if err != nil || res.GetCopied() != 2 || res.GetDestination() != dst {
		t.Fatalf("export to the endpoint without credentials = %v, %v; want 2 objects copied, answered as %s", res, err, dst)
	}
	got := bareRec.seen()
	if len(got) == 0 {
		t.Fatal("the endpoint without credentials saw no request")
	}
	for _, h := range got {
		if h != "" {
			t.Fatalf("a request to the endpoint without credentials carried Authorization %q; want every one unsigned", h)
		}
	}
	_, err = export(dest(bare, bareRec.URL, "&anonymous=false"))
	wantCode(t, "anonymous=false at an endpoint without credentials", err, codes.InvalidArgument,
		"has no credentials on this registry, so exports to it are unsigned: drop anonymous=false, or ask the registry's operator to give it credentials (-export-endpoints / LOOM_REGISTRY_EXPORT_ENDPOINTS: "+bareRec.URL+";profile=NAME)")
	if n := len(bareRec.seen()); n != 0 {
		t.Errorf("the refused export sent %d requests", n)
	}

	// ;profile=loom-export: signed with that profile's key, never the
	// registry's own; and only within the project's prefix.
	_, err = export(strings.Replace(dest(signed, signedRec.URL, ""), "/default/", "/other/", 1))
	wantCode(t, "a signed export into another project's prefix", err, codes.InvalidArgument, "outside project default's part of the registry's stores")
	if n := len(signedRec.seen()); n != 0 {
		t.Errorf("the refused export sent %d requests", n)
	}
	if res, err := export(dest(signed, signedRec.URL, "")); err != nil || res.GetCopied() != 2 {
		t.Fatalf("export to the endpoint with a profile = %v, %v; want 2 objects copied", res, err)
	}
	got = signedRec.seen()
	if len(got) == 0 {
		t.Fatal("the endpoint with a profile saw no request")
	}
	for _, h := range got {
		if !strings.Contains(h, "Credential="+profileKey+"/") {
			t.Fatalf("a request to the endpoint with a profile carried Authorization %q; want it signed with %s", h, profileKey)
		}
	}
	if seenAll := strings.Join(append(bareRec.seen(), signedRec.seen()...), " "); strings.Contains(seenAll, ambientKey) {
		t.Fatalf("the registry's own key reached an export endpoint: %s", seenAll)
	}
}

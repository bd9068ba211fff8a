// Package blobtest starts object stores for tests, in process and on
// loopback: an S3 fake (gofakes3 over its in-memory backend), a Google
// Cloud Storage fake (fake-gcs-server's fakestorage) and an Azure Blob
// Storage fake (Loom's own, libs/blobstore/internal/azfake: no Go fake of
// Azure is kept up elsewhere). Each returns a bucket URL that
// blobstore.Open takes through its normal path, so a test drives the real
// s3blob, gcsblob and azureblob drivers over HTTP, exactly as a site's
// registry does against the real services.
//
// It does not import blobstore (blobstore's own tests use it), so it does
// not register drivers either: the caller's binary must link them
// (blobstore does, unless built with loom_no_s3, loom_no_gcs or
// loom_no_azure).
package blobtest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fsouza/fake-gcs-server/fakestorage"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/loom-ml/loom/libs/blobstore/internal/azfake"
)

// Store is one bucket on a fake object store.
type Store struct {
	// URL opens the bucket with blobstore.Open (append a path for a
	// prefix: Store.Prefixed).
	URL string
	// Scheme is "s3", "gs" or "azblob".
	Scheme string
	// Bucket is the bucket's (Azure: the container's) name.
	Bucket string

	stats *Stats
}

// Stats counts the requests a bucket received, by kind. Every field is
// read with Load.
type Stats struct {
	// Writes counts requests that can change the bucket: PUT, POST,
	// PATCH and DELETE (a multipart upload's parts, or Azure's blocks,
	// included).
	Writes atomic.Int64
	// Parts counts S3 UploadPart and Azure Put Block requests that were
	// answered 2xx.
	Parts atomic.Int64
	// CompletedUploads counts S3 CompleteMultipartUpload and Azure Put
	// Block List requests that were answered 2xx.
	CompletedUploads atomic.Int64
}

// Stats returns the bucket's live request counters.
func (s *Store) Stats() *Stats { return s.stats }

// Prefixed is the bucket's URL with prefix (a clean relative key) as its
// path, the driver's query parameters kept.
func (s *Store) Prefixed(prefix string) string {
	u, err := url.Parse(s.URL)
	if err != nil {
		panic(err) // built by this package
	}
	u.Path = "/" + strings.Trim(prefix, "/")
	return u.String()
}

// S3Region is the region the S3 fake's URLs name (the fake ignores it,
// but the SDK wants one to sign and route).
const S3Region = "us-east-1"

var bucketSeq atomic.Int64

func bucketName() string {
	return fmt.Sprintf("loom-test-%d-%d", os.Getpid(), bucketSeq.Add(1))
}

// S3 starts an S3 fake for t alone (stopped by t's cleanup) and returns
// one empty bucket on it. The URL is
//
//	s3://BUCKET?endpoint=http://127.0.0.1:PORT&region=us-east-1&use_path_style=true&anonymous=true
//
// anonymous=true makes the SDK send unsigned requests, so no credentials
// (and no AWS_* variable, which is process-wide) are needed: the fake
// does not check signatures anyway. Everything but anonymous=true is what
// a site with MinIO or Ceph writes (docs/registry.md).
func S3(t testing.TB) *Store {
	t.Helper()
	backend := s3mem.New()
	name := bucketName()
	if err := backend.CreateBucket(name); err != nil {
		t.Fatalf("blobtest: create S3 bucket %s: %v", name, err)
	}
	faker := gofakes3.New(backend, gofakes3.WithLogger(gofakes3.DiscardLog()))
	st := &Store{Scheme: "s3", Bucket: name, stats: &Stats{}}
	h := faker.Server()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isWrite(r.Method) {
			st.stats.Writes.Add(1)
		}
		rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
		h.ServeHTTP(rec, r)
		q := r.URL.Query()
		if rec.code/100 == 2 && q.Has("uploadId") {
			switch r.Method {
			case http.MethodPut:
				st.stats.Parts.Add(1)
			case http.MethodPost:
				st.stats.CompletedUploads.Add(1)
			}
		}
	}))
	t.Cleanup(srv.Close)
	q := url.Values{}
	q.Set("endpoint", srv.URL)
	q.Set("region", S3Region)
	q.Set("use_path_style", "true")
	q.Set("anonymous", "true")
	st.URL = "s3://" + name + "?" + q.Encode()
	return st
}

// gcs is the one GCS fake of the process: gcsblob reaches an emulator only
// through STORAGE_EMULATOR_HOST, which is process-wide, so the variable is
// set once, before the first gs:// bucket is opened, and never changed;
// each test gets a bucket of its own on the shared fake instead.
var gcs struct {
	once  sync.Once
	err   error
	srv   *fakestorage.Server
	mu    sync.Mutex
	stats map[string]*Stats // by bucket
}

// gcsBucketPath finds the bucket a JSON-API request writes to:
// /storage/v1/b/BUCKET/o..., /upload/storage/v1/b/BUCKET/o..., and the
// last of the two in a copy (/b/SRC/o/KEY/rewriteTo/b/DST/o/KEY).
var gcsBucketPath = regexp.MustCompile(`/b/([^/]+)/o`)

// GCSEmulatorEnv is the variable gcsblob (and Google's storage client)
// reads to reach an emulator instead of storage.googleapis.com.
const GCSEmulatorEnv = "STORAGE_EMULATOR_HOST"

func startGCS() error {
	if cur := os.Getenv(GCSEmulatorEnv); cur != "" {
		return fmt.Errorf("%s is already set (%q); blobtest.GCS sets it to its own fake and cannot share the process with another emulator", GCSEmulatorEnv, cur)
	}
	hs := httptest.NewUnstartedServer(nil)
	// The storage client reads objects from http://EMULATOR/BUCKET/OBJECT
	// (the XML API's form); the fake serves that form only on its public
	// host, so that is the listener's own address.
	srv, err := fakestorage.NewServerWithOptions(fakestorage.Options{
		NoListener: true, Scheme: "http", PublicHost: hs.Listener.Addr().String(),
	})
	if err != nil {
		hs.Close()
		return err
	}
	h := srv.HTTPHandler()
	gcs.stats = map[string]*Stats{}
	hs.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isWrite(r.Method) {
			if ms := gcsBucketPath.FindAllStringSubmatch(r.URL.Path, -1); ms != nil {
				gcs.mu.Lock()
				s := gcs.stats[ms[len(ms)-1][1]]
				gcs.mu.Unlock()
				if s != nil {
					s.Writes.Add(1)
				}
			}
		}
		h.ServeHTTP(w, r)
	})
	hs.Start()
	// Never closed: the fake lives as long as the test binary, as the
	// variable pointing at it does.
	gcs.srv = srv
	return os.Setenv(GCSEmulatorEnv, strings.TrimPrefix(hs.URL, "http://"))
}

// GCS returns one empty bucket, for t alone, on the process's GCS fake
// (started on first use; see gcs). The URL is plain gs://BUCKET: gcsblob
// goes to the fake because STORAGE_EMULATOR_HOST names it, without
// credentials. A test binary that uses GCS must not also point gs:// at
// the real service. The bucket's objects are deleted by t's cleanup.
func GCS(t testing.TB) *Store {
	t.Helper()
	gcs.once.Do(func() { gcs.err = startGCS() })
	if gcs.err != nil {
		t.Fatalf("blobtest: start the GCS fake: %v", gcs.err)
	}
	name := bucketName()
	gcs.srv.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: name})
	st := &Store{Scheme: "gs", Bucket: name, URL: "gs://" + name, stats: &Stats{}}
	gcs.mu.Lock()
	gcs.stats[name] = st.stats
	gcs.mu.Unlock()
	t.Cleanup(func() {
		objs, _, err := gcs.srv.ListObjectsWithOptions(name, fakestorage.ListOptions{})
		if err == nil {
			for _, o := range objs {
				_ = gcs.srv.Backend().DeleteObject(name, o.Name)
			}
		}
	})
	return st
}

// The variables go-cloud's azureblob driver reads its credentials and
// service address from. It reads them once, when the first azblob:// URL
// of the process is opened, and offers no way to pass a key in the URL.
const (
	AzureAccountEnv = "AZURE_STORAGE_ACCOUNT"
	AzureKeyEnv     = "AZURE_STORAGE_KEY"
)

// azureEnvOthers are the other variables the driver reads; set, they
// would change how it authenticates or which service it reaches.
var azureEnvOthers = []string{
	"AZURE_STORAGE_SAS_TOKEN", "AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGEBLOB_CONNECTIONSTRING",
	"AZURE_STORAGE_DOMAIN", "AZURE_STORAGE_PROTOCOL", "AZURE_STORAGE_IS_CDN", "AZURE_STORAGE_IS_LOCAL_EMULATOR",
}

var azureEnv struct {
	once sync.Once
	err  error
}

func setAzureEnv() error {
	for name, want := range map[string]string{AzureAccountEnv: azfake.Account, AzureKeyEnv: azfake.Key} {
		if cur, ok := os.LookupEnv(name); ok && cur != want {
			return fmt.Errorf("%s is already set to another value; blobtest.Azure sets it to the fake's account and cannot share the process with another Azure store", name)
		}
	}
	for _, name := range azureEnvOthers {
		if _, ok := os.LookupEnv(name); ok {
			return fmt.Errorf("%s is set; unset it: it would change how the azureblob driver reaches blobtest's Azure fake", name)
		}
	}
	if err := os.Setenv(AzureAccountEnv, azfake.Account); err != nil {
		return err
	}
	return os.Setenv(AzureKeyEnv, azfake.Key)
}

// AzureEnv sets, once per process and before it returns, the credentials
// every Azure fake accepts (Azurite's well-known devstoreaccount1 and its
// key) in AZURE_STORAGE_ACCOUNT and AZURE_STORAGE_KEY, the only way to
// hand azureblob's URL opener a key. The values never change afterwards,
// so tests that use them may run in parallel; but the driver latches the
// environment on the process's first azblob:// open, so a test binary
// must call AzureEnv (Azure does) before it opens any azblob:// URL, and
// must not also point azblob:// at a real account. It fails t when one of
// the driver's variables is already set otherwise.
func AzureEnv(t testing.TB) {
	t.Helper()
	azureEnv.once.Do(func() { azureEnv.err = setAzureEnv() })
	if azureEnv.err != nil {
		t.Fatalf("blobtest: Azure credentials: %v", azureEnv.err)
	}
}

// AzureAccount and AzureKey are the account and shared key every Azure
// fake accepts, for a test that makes its own client.
const (
	AzureAccount = azfake.Account
	AzureKey     = azfake.Key
)

// Azure starts an Azure Blob Storage fake for t alone (stopped by t's
// cleanup) and returns one empty container on it. The URL is
//
//	azblob://CONTAINER?domain=127.0.0.1:PORT&localemu=true&protocol=http
//
// which is how a site points azblob:// at Azurite; the credentials come
// from AzureEnv. The fake checks every request's shared-key signature or
// SAS, as the service does.
func Azure(t testing.TB) *Store {
	t.Helper()
	AzureEnv(t)
	fake := azfake.New()
	name := bucketName()
	fake.CreateContainer(name)
	st := &Store{Scheme: "azblob", Bucket: name, stats: &Stats{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isWrite(r.Method) {
			st.stats.Writes.Add(1)
		}
		rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
		fake.ServeHTTP(rec, r)
		if rec.code/100 == 2 && r.Method == http.MethodPut {
			switch r.URL.Query().Get("comp") {
			case "block":
				st.stats.Parts.Add(1)
			case "blocklist":
				st.stats.CompletedUploads.Add(1)
			}
		}
	}))
	t.Cleanup(srv.Close)
	q := url.Values{}
	q.Set("domain", strings.TrimPrefix(srv.URL, "http://"))
	q.Set("localemu", "true")
	q.Set("protocol", "http")
	st.URL = "azblob://" + name + "?" + q.Encode()
	return st
}

func isWrite(method string) bool {
	switch method {
	case http.MethodPut, http.MethodPost, http.MethodPatch, http.MethodDelete:
		return true
	}
	return false
}

type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.code = code
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

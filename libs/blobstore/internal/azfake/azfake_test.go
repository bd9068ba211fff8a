package azfake_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/sas"

	"github.com/loom-ml/loom/libs/blobstore/internal/azfake"
)

const containerName = "c1"

// start serves a fresh fake with one container and returns a client for
// the container, signed with key.
func start(t *testing.T, key string) (*container.Client, *httptest.Server) {
	c, srv, _ := startCounting(t, key)
	return c, srv
}

// startCounting is start, also counting the Put Block requests the fake
// receives.
func startCounting(t *testing.T, key string) (*container.Client, *httptest.Server, *atomic.Int64) {
	t.Helper()
	var stagedBlocks atomic.Int64
	fake := azfake.New()
	fake.CreateContainer(containerName)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("comp") == "block" {
			stagedBlocks.Add(1)
		}
		fake.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return client(t, srv, key), srv, &stagedBlocks
}

func client(t *testing.T, srv *httptest.Server, key string) *container.Client {
	t.Helper()
	cred, err := azblob.NewSharedKeyCredential(azfake.Account, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := container.NewClientWithSharedKeyCredential(srv.URL+"/"+azfake.Account+"/"+containerName, cred, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// code returns the Azure error code and status of err ("" and 0 for none).
func code(err error) (string, int) {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.ErrorCode, re.StatusCode
	}
	return "", 0
}

func upload(t *testing.T, c *container.Client, name string, data []byte) {
	t.Helper()
	if _, err := c.NewBlockBlobClient(name).UploadBuffer(context.Background(), data, nil); err != nil {
		t.Fatalf("upload %s: %v", name, err)
	}
}

func download(t *testing.T, c *container.Client, name string, rng blob.HTTPRange) []byte {
	t.Helper()
	resp, err := c.NewBlobClient(name).DownloadStream(context.Background(), &blob.DownloadStreamOptions{Range: rng})
	if err != nil {
		t.Fatalf("download %s %+v: %v", name, rng, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestAuthentication: a request signed with another key, an unsigned one,
// and one whose signed headers were changed on the way are all refused,
// with the service's codes; the account's key is accepted.
func TestAuthentication(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	good, srv := start(t, azfake.Key)
	upload(t, good, "a", []byte("x"))

	wrongKey := strings.Repeat("A", 86) + "=="
	_, err := client(t, srv, wrongKey).NewBlobClient("a").GetProperties(ctx, nil)
	if c, s := code(err); c != "AuthenticationFailed" || s != http.StatusForbidden {
		t.Errorf("wrong key: %v; want 403 AuthenticationFailed", err)
	}

	anon, err := container.NewClientWithNoCredential(srv.URL+"/"+azfake.Account+"/"+containerName, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = anon.NewBlobClient("a").GetProperties(ctx, nil)
	if c, s := code(err); c != "NoAuthenticationInformation" || s != http.StatusUnauthorized {
		t.Errorf("no credential: %v; want 401 NoAuthenticationInformation", err)
	}

	// A signed request replayed with a changed x-ms- header: the
	// signature covers the canonicalized headers, so it no longer holds.
	var signed *http.Request
	grab := &captureTransport{last: &signed}
	cred, _ := azblob.NewSharedKeyCredential(azfake.Account, azfake.Key)
	cc, err := container.NewClientWithSharedKeyCredential(srv.URL+"/"+azfake.Account+"/"+containerName, cred,
		&container.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: grab}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cc.NewBlockBlobClient("b").UploadBuffer(ctx, []byte("y"), &blockblob.UploadBufferOptions{Metadata: map[string]*string{"k": to.Ptr("v")}}); err != nil {
		t.Fatal(err)
	}
	replay, err := http.NewRequest(signed.Method, signed.URL.String(), strings.NewReader("y"))
	if err != nil {
		t.Fatal(err)
	}
	replay.Header = signed.Header.Clone()
	replay.Header.Set("x-ms-meta-k", "changed")
	resp, err := http.DefaultClient.Do(replay)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !bytes.Contains(body, []byte("<Code>AuthenticationFailed</Code>")) {
		t.Errorf("tampered request: %d %s; want 403 AuthenticationFailed", resp.StatusCode, body)
	}
}

// captureTransport sends requests with the default client and keeps the
// last one (already signed: the transport runs after every policy).
type captureTransport struct{ last **http.Request }

func (c *captureTransport) Do(r *http.Request) (*http.Response, error) {
	*c.last = r
	return http.DefaultClient.Do(r)
}

// TestSAS: a signed URL works for what its permissions allow and nothing
// else; one with a changed field or past its expiry does not work.
func TestSAS(t *testing.T) {
	t.Parallel()
	c, _ := start(t, azfake.Key)
	upload(t, c, "dir/sas blob", []byte("hello"))
	bc := c.NewBlobClient("dir/sas blob")
	sign := func(p sas.BlobPermissions, expiry time.Time) string {
		u, err := bc.GetSASURL(p, expiry, nil)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	do := func(method, u string) (int, string) {
		req, err := http.NewRequest(method, u, strings.NewReader("new"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("x-ms-blob-type", "BlockBlob")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	read := sign(sas.BlobPermissions{Read: true}, time.Now().Add(time.Hour))
	if s, b := do(http.MethodGet, read); s != http.StatusOK || b != "hello" {
		t.Errorf("GET with a read SAS: %d %q", s, b)
	}
	for _, m := range []string{http.MethodPut, http.MethodDelete} {
		if s, b := do(m, read); s != http.StatusForbidden || !strings.Contains(b, "AuthorizationPermissionMismatch") {
			t.Errorf("%s with a read SAS: %d %s; want 403 AuthorizationPermissionMismatch", m, s, b)
		}
	}
	// Widening the permissions in the URL breaks the signature.
	if s, b := do(http.MethodDelete, strings.Replace(read, "sp=r", "sp=rd", 1)); s != http.StatusForbidden || !strings.Contains(b, "AuthenticationFailed") {
		t.Errorf("DELETE with sp changed to rd: %d %s; want 403 AuthenticationFailed", s, b)
	}
	// The signature names the blob: it does not open another.
	if s, _ := do(http.MethodGet, strings.Replace(read, "sas%20blob", "other", 1)); s != http.StatusForbidden {
		t.Errorf("GET of another blob with the SAS: %d; want 403", s)
	}
	expired := sign(sas.BlobPermissions{Read: true}, time.Now().Add(-time.Minute))
	if s, b := do(http.MethodGet, expired); s != http.StatusForbidden || !strings.Contains(b, "expiry") {
		t.Errorf("GET with an expired SAS: %d %s; want 403", s, b)
	}
	write := sign(sas.BlobPermissions{Create: true, Write: true}, time.Now().Add(time.Hour))
	if s, b := do(http.MethodPut, write); s != http.StatusCreated {
		t.Errorf("PUT with a write SAS: %d %s", s, b)
	}
	if got := download(t, c, "dir/sas blob", blob.HTTPRange{}); string(got) != "new" {
		t.Errorf("after the PUT the blob holds %q", got)
	}
}

// TestBlocks: an upload in blocks is invisible until its block list is
// committed, then reads back whole; a block list naming an unknown block
// is refused; Put Blob computes the blob's MD5, a block list does not.
func TestBlocks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, _, stagedBlocks := startCounting(t, azfake.Key)
	data := make([]byte, 5<<20/2+3) // the SDK's smallest block is 1 MiB
	for i := range data {
		data[i] = byte(i * 7)
	}
	bb := c.NewBlockBlobClient("big")
	if _, err := bb.StageBlock(ctx, "AAAA", streamOf(data[:10]), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := bb.GetProperties(ctx, nil); err == nil {
		t.Error("a blob with only a staged block exists; want BlobNotFound")
	} else if cd, s := code(err); cd != "BlobNotFound" || s != http.StatusNotFound {
		t.Errorf("GetProperties: %v; want 404 BlobNotFound", err)
	}
	if _, err := bb.CommitBlockList(ctx, []string{"AAAA", "BBBB"}, nil); err == nil {
		t.Error("a block list with an unknown block was committed")
	} else if cd, s := code(err); cd != "InvalidBlockList" || s != http.StatusBadRequest {
		t.Errorf("CommitBlockList: %v; want 400 InvalidBlockList", err)
	}
	staged := stagedBlocks.Load()
	if _, err := bb.UploadStream(ctx, bytes.NewReader(data), &blockblob.UploadStreamOptions{BlockSize: 1 << 20, Concurrency: 3}); err != nil {
		t.Fatal(err)
	}
	if n := stagedBlocks.Load() - staged; n < 3 {
		t.Errorf("the upload staged %d blocks; want at least 3 (then Put Block List)", n)
	}
	if got := download(t, c, "big", blob.HTTPRange{}); !bytes.Equal(got, data) {
		t.Errorf("read back %d bytes, not the %d uploaded", len(got), len(data))
	}
	props, err := bb.GetProperties(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if *props.ContentLength != int64(len(data)) || props.ContentMD5 != nil {
		t.Errorf("block blob: length %d, MD5 %x; want %d and none", *props.ContentLength, props.ContentMD5, len(data))
	}
	upload(t, c, "small", data[:100])
	props, err = c.NewBlobClient("small").GetProperties(ctx, nil)
	if sum := md5.Sum(data[:100]); err != nil || !bytes.Equal(props.ContentMD5, sum[:]) {
		t.Errorf("Put Blob MD5 = %x, %v; want %x", props.ContentMD5, err, sum)
	}
	// Put Blob over an existing blob with If-None-Match: * is refused.
	_, err = c.NewBlockBlobClient("small").UploadBuffer(ctx, []byte("z"), &blockblob.UploadBufferOptions{
		AccessConditions: &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfNoneMatch: to.Ptr(azcore.ETagAny)}}})
	if cd, s := code(err); cd != "BlobAlreadyExists" || s != http.StatusConflict {
		t.Errorf("overwrite with If-None-Match *: %v; want 409 BlobAlreadyExists", err)
	}
}

func streamOf(b []byte) io.ReadSeekCloser {
	return nopCloser{bytes.NewReader(b)}
}

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }

// TestRanges: a range reads its bytes with Content-Range giving the whole
// size; a range starting at or past the end is 416 InvalidRange.
func TestRanges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, _ := start(t, azfake.Key)
	data := []byte("abcdefghijklmnopqrstuvwxyz")
	upload(t, c, "r", data)
	for _, tc := range []struct {
		rng  blob.HTTPRange
		want string
	}{{blob.HTTPRange{Offset: 10}, "klmnopqrstuvwxyz"}, {blob.HTTPRange{Offset: 10, Count: 5}, "klmno"},
		{blob.HTTPRange{Offset: 20, Count: 100}, "uvwxyz"}, {blob.HTTPRange{}, string(data)}} {
		if got := download(t, c, "r", tc.rng); string(got) != tc.want {
			t.Errorf("range %+v = %q, want %q", tc.rng, got, tc.want)
		}
	}
	resp, err := c.NewBlobClient("r").DownloadStream(ctx, &blob.DownloadStreamOptions{Range: blob.HTTPRange{Offset: 5, Count: 3}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if *resp.ContentRange != "bytes 5-7/26" || *resp.ContentLength != 3 {
		t.Errorf("Content-Range %q, length %d", *resp.ContentRange, *resp.ContentLength)
	}
	_, err = c.NewBlobClient("r").DownloadStream(ctx, &blob.DownloadStreamOptions{Range: blob.HTTPRange{Offset: 26}})
	if cd, s := code(err); cd != "InvalidRange" || s != http.StatusRequestedRangeNotSatisfiable {
		t.Errorf("range past the end: %v; want 416 InvalidRange", err)
	}
}

// TestListing lists flat and with one- and multi-byte delimiters, page by
// page with every page size, and checks each listing is exactly the
// expected one: no entry repeated across pages, none lost, in order.
func TestListing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, _ := start(t, azfake.Key)
	names := []string{"a", "a/b", "a/c/d", "a/c/e", "ab", "abc/x", "b/y", "b/z", "c"}
	for _, n := range names {
		upload(t, c, n, []byte(n))
	}
	want := map[string][]string{
		"|":    names,
		"|/":   {"a", "a/", "ab", "abc/", "b/", "c"},
		"a/|/": {"a/b", "a/c/"},
		"|bc":  {"a", "a/b", "a/c/d", "a/c/e", "ab", "abc", "b/y", "b/z", "c"},
		"b|":   {"b/y", "b/z"},
	}
	for spec, exp := range want {
		prefix, delim, _ := strings.Cut(spec, "|")
		for size := int32(1); size <= int32(len(exp))+1; size++ {
			var got []string
			pager := c.NewListBlobsHierarchyPager(delim, &container.ListBlobsHierarchyOptions{Prefix: &prefix, MaxResults: to.Ptr(size)})
			pages := 0
			for pager.More() {
				page, err := pager.NextPage(ctx)
				if err != nil {
					t.Fatalf("prefix %q delimiter %q size %d: %v", prefix, delim, size, err)
				}
				pages++
				var entries []string
				for _, p := range page.Segment.BlobPrefixes {
					entries = append(entries, *p.Name)
				}
				for _, b := range page.Segment.BlobItems {
					entries = append(entries, *b.Name)
					if *b.Properties.ContentLength != int64(len(*b.Name)) || b.Properties.LastModified == nil {
						t.Errorf("%s: listed length %d", *b.Name, *b.Properties.ContentLength)
					}
				}
				if len(entries) > int(size) {
					t.Errorf("a page of size %d holds %d entries", size, len(entries))
				}
				sort.Strings(entries)
				got = append(got, entries...)
			}
			if fmt.Sprint(got) != fmt.Sprint(exp) {
				t.Errorf("prefix %q delimiter %q size %d: listed %q, want %q", prefix, delim, size, got, exp)
			}
			if wantPages := max(1, (len(exp)+int(size)-1)/int(size)); pages != wantPages {
				t.Errorf("prefix %q delimiter %q size %d: %d pages, want %d (no empty last page)", prefix, delim, size, pages, wantPages)
			}
		}
	}
}

// TestErrorShape: errors come as the service sends them, an XML body with
// the code and an x-ms-error-code header; limits are refused with a code.
func TestErrorShape(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, srv := start(t, azfake.Key)
	_, err := c.NewBlobClient("missing").DownloadStream(ctx, nil)
	if cd, s := code(err); cd != "BlobNotFound" || s != http.StatusNotFound {
		t.Errorf("missing blob: %v; want 404 BlobNotFound", err)
	}
	resp, err := http.Get(srv.URL + "/" + azfake.Account + "/" + containerName + "/missing")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Header.Get("x-ms-error-code") != "NoAuthenticationInformation" || !bytes.HasPrefix(body, []byte("<?xml")) ||
		!bytes.Contains(body, []byte("<Error><Code>NoAuthenticationInformation</Code><Message>")) {
		t.Errorf("unsigned GET: %s %s", resp.Header.Get("x-ms-error-code"), body)
	}
	_, err = c.NewBlockBlobClient("x").StageBlock(ctx, "AAAA"+strings.Repeat("QUFB", 30), streamOf([]byte("x")), nil)
	if cd, s := code(err); cd != "InvalidQueryParameterValue" || s != http.StatusBadRequest {
		t.Errorf("a 94-byte block id: %v; want 400 InvalidQueryParameterValue", err)
	}
	big := strings.Repeat("v", azfake.MaxMetadataBytes)
	_, err = c.NewBlockBlobClient("x").UploadBuffer(ctx, []byte("x"), &blockblob.UploadBufferOptions{Metadata: map[string]*string{"k": &big}})
	if cd, s := code(err); cd != "MetadataTooLarge" || s != http.StatusBadRequest {
		t.Errorf("metadata over the limit: %v; want 400 MetadataTooLarge", err)
	}
	_, err = c.NewBlobClient("missing").StartCopyFromURL(ctx, c.NewBlobClient("nothing").URL(), nil)
	if cd, s := code(err); cd != "CannotVerifyCopySource" || s != http.StatusNotFound {
		t.Errorf("copy of a missing blob: %v; want 404 CannotVerifyCopySource", err)
	}
}

// TestMetadataAndCopy: Set Blob Metadata replaces the metadata and the
// ETag; a copy takes the source's content, properties and metadata, and
// a later write to the source leaves the copy as it was.
func TestMetadataAndCopy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, _ := start(t, azfake.Key)
	src := c.NewBlockBlobClient("src")
	if _, err := src.UploadBuffer(ctx, []byte("one"), &blockblob.UploadBufferOptions{
		Metadata:    map[string]*string{"a": to.Ptr("1")},
		HTTPHeaders: &blob.HTTPHeaders{BlobContentType: to.Ptr("text/plain")},
	}); err != nil {
		t.Fatal(err)
	}
	before, err := src.GetProperties(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.SetMetadata(ctx, map[string]*string{"b": to.Ptr("2")}, nil); err != nil {
		t.Fatal(err)
	}
	after, err := src.GetProperties(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	// "b" comes back as "B": Go's HTTP client canonicalizes header names
	// (go-cloud lower-cases metadata keys on read for that reason).
	if *after.ETag == *before.ETag || len(after.Metadata) != 1 || after.Metadata["B"] == nil || *after.Metadata["B"] != "2" {
		t.Errorf("after SetMetadata: ETag %v (was %v), metadata %v", *after.ETag, *before.ETag, after.Metadata)
	}
	dst := c.NewBlobClient("dst")
	resp, err := dst.StartCopyFromURL(ctx, src.URL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if *resp.CopyStatus != blob.CopyStatusTypeSuccess {
		t.Errorf("copy status %v; want success", *resp.CopyStatus)
	}
	upload(t, c, "src", []byte("two"))
	props, err := dst.GetProperties(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := download(t, c, "dst", blob.HTTPRange{}); string(got) != "one" || *props.ContentType != "text/plain" || props.Metadata["B"] == nil {
		t.Errorf("copy holds %q, type %q, metadata %v; want the source as it was", got, *props.ContentType, props.Metadata)
	}
}

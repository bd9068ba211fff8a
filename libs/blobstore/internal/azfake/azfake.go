// Package azfake is an in-process fake of Azure Blob Storage for tests:
// an http.Handler that answers the part of the Blob service REST API that
// go-cloud's azureblob driver (through the Azure SDK's azblob client)
// sends, with the status codes, headers, XML bodies and error codes the
// real service uses, so that a test drives the real driver over HTTP.
//
// Azure's own emulator, Azurite, is Node.js, and the few Go emulators
// published are standalone servers, unmaintained, or both; none is a
// library a test can start in process. This one covers what Loom needs
// and no more:
//
//   - Put Blob (block blobs only), Put Block and Put Block List;
//   - Get Blob, whole or a byte range (x-ms-range or Range);
//   - Get Blob Properties and Set Blob Metadata;
//   - Delete Blob;
//   - Copy Blob within the account, always finished synchronously
//     (x-ms-copy-status: success);
//   - List Blobs, flat or with a delimiter of any length, paged with
//     maxresults and an opaque marker;
//   - Create Container;
//   - conditional requests on the ETag (If-Match, If-None-Match, "*");
//   - errors as Azure sends them: the status, x-ms-error-code, and an
//     <Error><Code>…</Code><Message>…</Message></Error> body.
//
// Every request must be authorised as the real service does it, with the
// account's shared key: an Authorization: SharedKey header whose HMAC is
// recomputed and compared, or a service SAS (a signed URL) whose signature,
// time window and permissions are checked. The account is Azurite's
// well-known devstoreaccount1 (Account, Key).
//
// Not covered: page and append blobs, leases, snapshots, versions, tags,
// access tiers, container ACLs and SAS other than a blob service SAS. A
// request that depends on one of them (another blob type, a lease id, a
// snapshot or version query, an unknown comp=, an account SAS) is refused
// with a 4xx and Azure's code for it; headers that only set a property
// the fake does not keep (a tier, tags, an encryption scope) are ignored.
package azfake

import (
	"bytes"
	"crypto/md5"
	"encoding/base64"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
)

// Account and Key are the storage account the fake serves and its shared
// key: Azurite's well-known development account, so that a program
// configured for Azurite works against the fake unchanged.
const (
	Account = "devstoreaccount1"
	Key     = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

// Limits the fake enforces on what a client sends. Azure's own limits are
// larger (a block may be 4,000 MiB, a blob 190 TiB); the fake keeps
// everything in memory, so it refuses sooner, with Azure's error code.
const (
	// MaxBodyBytes bounds one request body (a Put Blob, a Put Block, a
	// block list).
	MaxBodyBytes = 256 << 20
	// MaxBlobBytes bounds a committed blob.
	MaxBlobBytes = 1 << 30
	// MaxBlocks bounds the uncommitted blocks of one blob and the blocks
	// of a block list (Azure: 100,000 and 50,000).
	MaxBlocks = 50_000
	// MaxBlockIDBytes bounds a block id, decoded (Azure: 64 bytes).
	MaxBlockIDBytes = 64
	// MaxResults is the page size of List Blobs when the client asks for
	// none or for more (Azure: 5,000).
	MaxResults = 5000
	// MaxMetadataBytes bounds a blob's metadata, names and values
	// together (Azure: 8 KiB).
	MaxMetadataBytes = 8 << 10
	// MaxNameBytes bounds a blob name (Azure: 1,024 characters).
	MaxNameBytes = 1024
)

// Server is the fake service. The zero value is not usable: call New.
// Mount it with httptest.NewServer(s) and point a client at
// http://127.0.0.1:PORT/devstoreaccount1 (go-cloud's URL:
// azblob://CONTAINER?localemu=true&protocol=http&domain=127.0.0.1:PORT).
type Server struct {
	cred *azblob.SharedKeyCredential

	mu         sync.Mutex
	containers map[string]*container
	etagSeq    uint64
	lastTime   time.Time

	requestSeq atomic.Uint64
}

type container struct {
	blobs map[string]*blobObject
	// uncommitted holds the blocks put for a blob name and not yet in a
	// committed block list, by block id.
	uncommitted map[string]map[string][]byte
	created     time.Time
}

// blobObject is a committed blob. It is never changed once stored: every
// write stores a new one, so a reader may use it without the lock.
type blobObject struct {
	data []byte
	// md5 is the blob's Content-MD5 property: what Put Blob computed or
	// a client set (nil: none, as after a block list without one).
	md5 []byte
	// The standard properties a write sets ("" when not set).
	contentType, encoding, language, disposition, cacheControl string
	// meta is the metadata, by lower-case name.
	meta              map[string]string
	created, modified time.Time
	etag              string
	// copyID is set on a blob made by Copy Blob.
	copyID string
	// committedBlocks are the blocks of its block list, by id, which a
	// later block list may name as Committed.
	committedBlocks map[string][]byte
}

// New returns a fake with no containers.
func New() *Server {
	cred, err := azblob.NewSharedKeyCredential(Account, Key)
	if err != nil {
		panic(err) // the key is a constant
	}
	return &Server{cred: cred, containers: map[string]*container{}}
}

// CreateContainer makes an empty container named name (a no-op when it
// exists), as a test's setup would with the portal or the CLI.
func (s *Server) CreateContainer(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.containers[name]; !ok {
		s.containers[name] = &container{blobs: map[string]*blobObject{}, uncommitted: map[string]map[string][]byte{}, created: s.now()}
	}
}

// now returns the time for a new modification: second-grained, as the
// headers carry it, and strictly after the last one, so that two writes
// in one second still give different Last-Modified values. Called with
// s.mu held.
func (s *Server) now() time.Time {
	t := time.Now().UTC().Truncate(time.Second)
	if !t.After(s.lastTime) {
		t = s.lastTime.Add(time.Second)
	}
	s.lastTime = t
	return t
}

// newETag returns a fresh ETag in Azure's form ("0x8D..." quoted). Called
// with s.mu held.
func (s *Server) newETag() string {
	s.etagSeq++
	return fmt.Sprintf("\"0x8DC%013X\"", s.etagSeq)
}

// apiError is an error answer: the HTTP status and Azure's error code.
type apiError struct {
	status int
	code   string
	msg    string
}

func errorf(status int, code, format string, args ...any) *apiError {
	return &apiError{status: status, code: code, msg: fmt.Sprintf(format, args...)}
}

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, e *apiError) {
	h := w.Header()
	h.Set("x-ms-error-code", e.code)
	if r.Method == http.MethodHead {
		w.WriteHeader(e.status)
		return
	}
	var body bytes.Buffer
	body.WriteString(xml.Header)
	body.WriteString("<Error><Code>")
	_ = xml.EscapeText(&body, []byte(e.code))
	body.WriteString("</Code><Message>")
	_ = xml.EscapeText(&body, []byte(fmt.Sprintf("%s\nRequestId:%s\nTime:%s", e.msg, h.Get("x-ms-request-id"), time.Now().UTC().Format(time.RFC3339Nano))))
	body.WriteString("</Message></Error>")
	h.Set("Content-Type", "application/xml")
	h.Set("Content-Length", strconv.Itoa(body.Len()))
	w.WriteHeader(e.status)
	_, _ = w.Write(body.Bytes())
}

// ServeHTTP answers one Blob service request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("x-ms-request-id", fmt.Sprintf("00000000-0000-0000-0000-%012d", s.requestSeq.Add(1)))
	if v := r.Header.Get("x-ms-version"); v != "" {
		h.Set("x-ms-version", v)
	}
	h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	if e := s.serve(w, r); e != nil {
		s.writeError(w, r, e)
	}
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) *apiError {
	// The path is /ACCOUNT/CONTAINER[/BLOB]; the blob name is the rest of
	// the decoded path, slashes and all (the client escapes it as one
	// path segment).
	p := strings.TrimPrefix(r.URL.Path, "/")
	account, rest, _ := strings.Cut(p, "/")
	if account != Account {
		return errorf(http.StatusBadRequest, "InvalidUri", "account %q: this fake serves only %s", account, Account)
	}
	containerName, blobName, hasBlob := strings.Cut(rest, "/")
	if containerName == "" {
		return errorf(http.StatusBadRequest, "InvalidUri", "service-level operations are not supported by the fake")
	}
	q := r.URL.Query()
	if e := s.authorize(r, q, containerName, blobName, hasBlob); e != nil {
		return e
	}
	if !hasBlob {
		return s.serveContainer(w, r, q, containerName)
	}
	if blobName == "" {
		return errorf(http.StatusBadRequest, "InvalidUri", "empty blob name")
	}
	if len(blobName) > MaxNameBytes {
		return errorf(http.StatusBadRequest, "InvalidUri", "blob name is %d bytes; the limit is %d", len(blobName), MaxNameBytes)
	}
	for _, unsupported := range []string{"snapshot", "versionid"} {
		for k := range q {
			if strings.EqualFold(k, unsupported) {
				return errorf(http.StatusBadRequest, "UnsupportedQueryParameter", "%s is not supported by the fake", k)
			}
		}
	}
	if r.Header.Get("x-ms-lease-id") != "" || r.Header.Get("x-ms-lease-action") != "" {
		return errorf(http.StatusBadRequest, "UnsupportedHeader", "leases are not supported by the fake")
	}
	comp := q.Get("comp")
	switch r.Method {
	case http.MethodPut:
		switch {
		case comp == "block":
			return s.putBlock(w, r, q, containerName, blobName)
		case comp == "blocklist":
			return s.putBlockList(w, r, containerName, blobName)
		case comp == "metadata":
			return s.setMetadata(w, r, containerName, blobName)
		case comp != "":
			return errorf(http.StatusBadRequest, "UnsupportedQueryParameter", "comp=%s is not supported by the fake", comp)
		case r.Header.Get("x-ms-copy-source") != "":
			return s.copyBlob(w, r, containerName, blobName)
		default:
			return s.putBlob(w, r, containerName, blobName)
		}
	case http.MethodGet, http.MethodHead:
		if comp != "" {
			return errorf(http.StatusBadRequest, "UnsupportedQueryParameter", "comp=%s is not supported by the fake", comp)
		}
		return s.getBlob(w, r, containerName, blobName)
	case http.MethodDelete:
		return s.deleteBlob(w, r, containerName, blobName)
	}
	return errorf(http.StatusMethodNotAllowed, "UnsupportedHttpVerb", "%s is not supported on a blob", r.Method)
}

func (s *Server) serveContainer(w http.ResponseWriter, r *http.Request, q url.Values, name string) *apiError {
	if q.Get("restype") != "container" {
		return errorf(http.StatusBadRequest, "InvalidQueryParameterValue", "restype must be container")
	}
	switch {
	case r.Method == http.MethodGet && q.Get("comp") == "list":
		return s.listBlobs(w, r.Host, q, name)
	case r.Method == http.MethodPut && q.Get("comp") == "":
		s.mu.Lock()
		_, exists := s.containers[name]
		s.mu.Unlock()
		if exists {
			return errorf(http.StatusConflict, "ContainerAlreadyExists", "the specified container already exists")
		}
		s.CreateContainer(name)
		w.WriteHeader(http.StatusCreated)
		return nil
	case (r.Method == http.MethodGet || r.Method == http.MethodHead) && q.Get("comp") == "":
		s.mu.Lock()
		c := s.containers[name]
		s.mu.Unlock()
		if c == nil {
			return errorf(http.StatusNotFound, "ContainerNotFound", "the specified container does not exist")
		}
		w.Header().Set("Last-Modified", c.created.Format(http.TimeFormat))
		w.WriteHeader(http.StatusOK)
		return nil
	}
	return errorf(http.StatusBadRequest, "UnsupportedQueryParameter", "%s with comp=%q is not supported on a container by the fake", r.Method, q.Get("comp"))
}

// containerLocked returns the container or a ContainerNotFound error.
// Called with s.mu held.
func (s *Server) containerLocked(name string) (*container, *apiError) {
	c := s.containers[name]
	if c == nil {
		return nil, errorf(http.StatusNotFound, "ContainerNotFound", "the specified container does not exist")
	}
	return c, nil
}

// readBody reads a request body, refusing one over MaxBodyBytes, and
// checks a transactional Content-MD5 when the client sent one.
func readBody(r *http.Request) ([]byte, *apiError) {
	if r.ContentLength > MaxBodyBytes {
		return nil, errorf(http.StatusRequestEntityTooLarge, "RequestBodyTooLarge", "the body is %d bytes; the fake takes at most %d", r.ContentLength, MaxBodyBytes)
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, MaxBodyBytes+1))
	if err != nil {
		return nil, errorf(http.StatusBadRequest, "InvalidInput", "reading the body: %v", err)
	}
	if len(data) > MaxBodyBytes {
		return nil, errorf(http.StatusRequestEntityTooLarge, "RequestBodyTooLarge", "the body is over %d bytes", MaxBodyBytes)
	}
	if v := r.Header.Get("Content-MD5"); v != "" {
		want, err := base64.StdEncoding.DecodeString(v)
		if err != nil || len(want) != md5.Size {
			return nil, errorf(http.StatusBadRequest, "InvalidMd5", "Content-MD5 %q is not a base64 MD5", v)
		}
		if got := md5.Sum(data); !bytes.Equal(got[:], want) {
			return nil, errorf(http.StatusBadRequest, "Md5Mismatch", "the MD5 of the body does not match Content-MD5")
		}
	}
	return data, nil
}

// checkConditions applies If-Match and If-None-Match to the blob as it
// is (nil: none). A write that fails them is 409 BlobAlreadyExists for
// If-None-Match: * and 412 ConditionNotMet otherwise; a read gets 304 for
// a matching If-None-Match.
func checkConditions(r *http.Request, b *blobObject, write bool) *apiError {
	if v := r.Header.Get("If-Match"); v != "" {
		if b == nil || (v != "*" && v != b.etag) {
			if b == nil && !write {
				return errorf(http.StatusNotFound, "BlobNotFound", "the specified blob does not exist")
			}
			return errorf(http.StatusPreconditionFailed, "ConditionNotMet", "the condition specified using HTTP conditional header(s) is not met")
		}
	}
	if v := r.Header.Get("If-None-Match"); v != "" && b != nil {
		if v == "*" && write {
			return errorf(http.StatusConflict, "BlobAlreadyExists", "the specified blob already exists")
		}
		if v == "*" || v == b.etag {
			if write {
				return errorf(http.StatusPreconditionFailed, "ConditionNotMet", "the condition specified using HTTP conditional header(s) is not met")
			}
			return &apiError{status: http.StatusNotModified, code: "ConditionNotMet", msg: "not modified"}
		}
	}
	return nil
}

// properties reads the blob properties a write sets: from the x-ms-blob-*
// headers, and for Put Blob (standard=true) from the standard headers
// where those are absent, as the service does.
func properties(r *http.Request, standard bool) (b blobObject, e *apiError) {
	get := func(name, std string) string {
		if v, ok := r.Header[http.CanonicalHeaderKey(name)]; ok {
			return v[0]
		}
		if standard {
			return r.Header.Get(std)
		}
		return ""
	}
	b.contentType = get("x-ms-blob-content-type", "Content-Type")
	if b.contentType == "" {
		b.contentType = "application/octet-stream"
	}
	b.encoding = get("x-ms-blob-content-encoding", "Content-Encoding")
	b.language = get("x-ms-blob-content-language", "Content-Language")
	b.disposition = get("x-ms-blob-content-disposition", "")
	b.cacheControl = get("x-ms-blob-cache-control", "Cache-Control")
	if v := r.Header.Get("x-ms-blob-content-md5"); v != "" {
		sum, err := base64.StdEncoding.DecodeString(v)
		if err != nil || len(sum) != md5.Size {
			return b, errorf(http.StatusBadRequest, "InvalidMd5", "x-ms-blob-content-md5 %q is not a base64 MD5", v)
		}
		b.md5 = sum
	}
	b.meta, e = metadata(r)
	return b, e
}

// metadata reads the x-ms-meta-* headers. Names are kept in lower case:
// HTTP header names are case-insensitive and Go's server does not keep
// the case a client sent.
func metadata(r *http.Request) (map[string]string, *apiError) {
	md := map[string]string{}
	size := 0
	for k, vs := range r.Header {
		lk := strings.ToLower(k)
		name, ok := strings.CutPrefix(lk, "x-ms-meta-")
		if !ok {
			continue
		}
		if name == "" || !isIdentifier(name) {
			return nil, errorf(http.StatusBadRequest, "InvalidMetadata", "metadata name %q is not a C# identifier", name)
		}
		md[name] = vs[0]
		size += len(name) + len(vs[0])
	}
	if size > MaxMetadataBytes {
		return nil, errorf(http.StatusBadRequest, "MetadataTooLarge", "metadata is %d bytes; the limit is %d", size, MaxMetadataBytes)
	}
	return md, nil
}

func isIdentifier(s string) bool {
	for i, c := range s {
		switch {
		case c == '_', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// commit stores b under name, replacing what was there, and clears the
// name's uncommitted blocks. Called with s.mu held.
func (s *Server) commit(c *container, name string, b *blobObject) {
	t := s.now()
	b.modified = t
	b.created = t
	if old := c.blobs[name]; old != nil {
		b.created = old.created
	}
	b.etag = s.newETag()
	c.blobs[name] = b
	delete(c.uncommitted, name)
}

func writeCommitted(w http.ResponseWriter, b *blobObject, status int) {
	h := w.Header()
	h.Set("ETag", b.etag)
	h.Set("Last-Modified", b.modified.Format(http.TimeFormat))
	h.Set("x-ms-request-server-encrypted", "true")
	if b.md5 != nil {
		h.Set("Content-MD5", base64.StdEncoding.EncodeToString(b.md5))
	}
	w.WriteHeader(status)
}

func (s *Server) putBlob(w http.ResponseWriter, r *http.Request, containerName, name string) *apiError {
	switch bt := r.Header.Get("x-ms-blob-type"); bt {
	case "BlockBlob":
	case "":
		return errorf(http.StatusBadRequest, "MissingRequiredHeader", "an HTTP header that's mandatory for this request is not specified: x-ms-blob-type")
	default:
		return errorf(http.StatusBadRequest, "UnsupportedHeader", "x-ms-blob-type %s: the fake has block blobs only", bt)
	}
	b, e := properties(r, true)
	if e != nil {
		return e
	}
	data, e := readBody(r)
	if e != nil {
		return e
	}
	sum := md5.Sum(data)
	if b.md5 != nil && !bytes.Equal(b.md5, sum[:]) {
		return errorf(http.StatusBadRequest, "Md5Mismatch", "the MD5 of the body does not match x-ms-blob-content-md5")
	}
	b.md5 = sum[:]
	b.data = data
	s.mu.Lock()
	defer s.mu.Unlock()
	c, e := s.containerLocked(containerName)
	if e != nil {
		return e
	}
	if e := checkConditions(r, c.blobs[name], true); e != nil {
		return e
	}
	s.commit(c, name, &b)
	writeCommitted(w, &b, http.StatusCreated)
	return nil
}

// blockID checks a block id: base64, at most MaxBlockIDBytes decoded.
func blockID(id string) *apiError {
	raw, err := base64.StdEncoding.DecodeString(id)
	if err != nil || len(raw) == 0 || len(raw) > MaxBlockIDBytes {
		return errorf(http.StatusBadRequest, "InvalidQueryParameterValue", "blockid %q must be base64 of 1 to %d bytes", id, MaxBlockIDBytes)
	}
	return nil
}

func (s *Server) putBlock(w http.ResponseWriter, r *http.Request, q url.Values, containerName, name string) *apiError {
	id := q.Get("blockid")
	if e := blockID(id); e != nil {
		return e
	}
	data, e := readBody(r)
	if e != nil {
		return e
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, e := s.containerLocked(containerName)
	if e != nil {
		return e
	}
	blocks := c.uncommitted[name]
	if blocks == nil {
		blocks = map[string][]byte{}
		c.uncommitted[name] = blocks
	}
	if _, ok := blocks[id]; !ok && len(blocks) >= MaxBlocks {
		return errorf(http.StatusConflict, "BlockCountExceedsLimit", "the blob has %d uncommitted blocks; the limit is %d", len(blocks), MaxBlocks)
	}
	blocks[id] = data
	sum := md5.Sum(data)
	w.Header().Set("Content-MD5", base64.StdEncoding.EncodeToString(sum[:]))
	w.Header().Set("x-ms-request-server-encrypted", "true")
	w.WriteHeader(http.StatusCreated)
	return nil
}

// blockList is the body of Put Block List.
type blockList struct {
	XMLName xml.Name `xml:"BlockList"`
	Entries []struct {
		XMLName xml.Name
		ID      string `xml:",chardata"`
	} `xml:",any"`
}

func (s *Server) putBlockList(w http.ResponseWriter, r *http.Request, containerName, name string) *apiError {
	b, e := properties(r, false)
	if e != nil {
		return e
	}
	body, e := readBody(r)
	if e != nil {
		return e
	}
	var list blockList
	if err := xml.Unmarshal(body, &list); err != nil {
		return errorf(http.StatusBadRequest, "InvalidXmlDocument", "the block list is not valid XML: %v", err)
	}
	if len(list.Entries) > MaxBlocks {
		return errorf(http.StatusBadRequest, "BlockListTooLong", "the block list has %d blocks; the limit is %d", len(list.Entries), MaxBlocks)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, e := s.containerLocked(containerName)
	if e != nil {
		return e
	}
	old := c.blobs[name]
	if e := checkConditions(r, old, true); e != nil {
		return e
	}
	uncommitted := c.uncommitted[name]
	var committed map[string][]byte
	if old != nil {
		committed = old.committedBlocks
	}
	var data []byte
	b.committedBlocks = map[string][]byte{}
	for _, entry := range list.Entries {
		id := strings.TrimSpace(entry.ID)
		var block []byte
		var ok bool
		switch entry.XMLName.Local {
		case "Latest":
			if block, ok = uncommitted[id]; !ok {
				block, ok = committed[id]
			}
		case "Uncommitted":
			block, ok = uncommitted[id]
		case "Committed":
			block, ok = committed[id]
		default:
			return errorf(http.StatusBadRequest, "InvalidXmlNodeValue", "block list element %q", entry.XMLName.Local)
		}
		if !ok {
			return errorf(http.StatusBadRequest, "InvalidBlockList", "block %q (%s) does not exist", id, entry.XMLName.Local)
		}
		if len(data)+len(block) > MaxBlobBytes {
			return errorf(http.StatusRequestEntityTooLarge, "RequestBodyTooLarge", "the blob would be over %d bytes, the fake's limit", MaxBlobBytes)
		}
		data = append(data, block...)
		b.committedBlocks[id] = block
	}
	// The service keeps the x-ms-blob-content-md5 it is given and does
	// not check it (each block was checked when it was put); without
	// one, a blob made of blocks has no Content-MD5.
	b.data = data
	s.commit(c, name, &b)
	writeCommitted(w, &b, http.StatusCreated)
	return nil
}

func (s *Server) setMetadata(w http.ResponseWriter, r *http.Request, containerName, name string) *apiError {
	md, e := metadata(r)
	if e != nil {
		return e
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, e := s.containerLocked(containerName)
	if e != nil {
		return e
	}
	b := c.blobs[name]
	if b == nil {
		return errorf(http.StatusNotFound, "BlobNotFound", "the specified blob does not exist")
	}
	if e := checkConditions(r, b, true); e != nil {
		return e
	}
	nb := *b
	nb.meta = md
	nb.modified = s.now()
	nb.etag = s.newETag()
	c.blobs[name] = &nb
	w.Header().Set("ETag", nb.etag)
	w.Header().Set("Last-Modified", nb.modified.Format(http.TimeFormat))
	w.WriteHeader(http.StatusOK)
	return nil
}

func (s *Server) copyBlob(w http.ResponseWriter, r *http.Request, containerName, name string) *apiError {
	src, err := url.Parse(r.Header.Get("x-ms-copy-source"))
	if err != nil || src.Host != r.Host {
		return errorf(http.StatusBadRequest, "CannotVerifyCopySource", "x-ms-copy-source must be a blob of this account on %s", r.Host)
	}
	account, rest, _ := strings.Cut(strings.TrimPrefix(src.Path, "/"), "/")
	srcContainer, srcName, ok := strings.Cut(rest, "/")
	if account != Account || !ok || srcName == "" {
		return errorf(http.StatusBadRequest, "CannotVerifyCopySource", "x-ms-copy-source %q names no blob of %s", src, Account)
	}
	md, e := metadata(r)
	if e != nil {
		return e
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sc, e := s.containerLocked(srcContainer)
	if e != nil {
		return errorf(http.StatusNotFound, "CannotVerifyCopySource", "the source container does not exist")
	}
	sb := sc.blobs[srcName]
	if sb == nil {
		return errorf(http.StatusNotFound, "CannotVerifyCopySource", "the specified blob does not exist")
	}
	c, e := s.containerLocked(containerName)
	if e != nil {
		return e
	}
	if e := checkConditions(r, c.blobs[name], true); e != nil {
		return e
	}
	// A copy takes the source's content and properties, and its metadata
	// unless the request gives metadata of its own. Nothing is shared
	// with the source: a later change to one leaves the other alone.
	nb := *sb
	nb.data = bytes.Clone(sb.data)
	nb.md5 = bytes.Clone(sb.md5)
	nb.committedBlocks = nil
	nb.meta = map[string]string{}
	from := sb.meta
	if len(md) > 0 {
		from = md
	}
	for k, v := range from {
		nb.meta[k] = v
	}
	s.etagSeq++
	nb.copyID = fmt.Sprintf("00000000-0000-0000-0000-c%011d", s.etagSeq)
	s.commit(c, name, &nb)
	h := w.Header()
	h.Set("ETag", nb.etag)
	h.Set("Last-Modified", nb.modified.Format(http.TimeFormat))
	h.Set("x-ms-copy-id", nb.copyID)
	h.Set("x-ms-copy-status", "success")
	w.WriteHeader(http.StatusAccepted)
	return nil
}

func (s *Server) deleteBlob(w http.ResponseWriter, r *http.Request, containerName, name string) *apiError {
	if r.Header.Get("x-ms-delete-snapshots") != "" {
		return errorf(http.StatusBadRequest, "UnsupportedHeader", "snapshots are not supported by the fake")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, e := s.containerLocked(containerName)
	if e != nil {
		return e
	}
	b := c.blobs[name]
	if b == nil {
		return errorf(http.StatusNotFound, "BlobNotFound", "the specified blob does not exist")
	}
	if e := checkConditions(r, b, true); e != nil {
		return e
	}
	delete(c.blobs, name)
	delete(c.uncommitted, name)
	w.Header().Set("x-ms-delete-type-permanent", "true")
	w.WriteHeader(http.StatusAccepted)
	return nil
}

// parseRange reads x-ms-range (or Range): "bytes=START-" or
// "bytes=START-END". ok is false when neither is set.
func parseRange(r *http.Request) (start, end int64, ok bool, e *apiError) {
	v := r.Header.Get("x-ms-range")
	if v == "" {
		v = r.Header.Get("Range")
	}
	if v == "" {
		return 0, -1, false, nil
	}
	spec, found := strings.CutPrefix(v, "bytes=")
	a, b, dash := strings.Cut(spec, "-")
	if !found || !dash {
		return 0, 0, false, errorf(http.StatusBadRequest, "InvalidHeaderValue", "range %q must be bytes=START-[END]", v)
	}
	start, err := strconv.ParseInt(a, 10, 64)
	if err != nil || start < 0 {
		return 0, 0, false, errorf(http.StatusBadRequest, "InvalidHeaderValue", "range %q: bad start", v)
	}
	end = -1
	if b != "" {
		if end, err = strconv.ParseInt(b, 10, 64); err != nil || end < start {
			return 0, 0, false, errorf(http.StatusBadRequest, "InvalidHeaderValue", "range %q: bad end", v)
		}
	}
	return start, end, true, nil
}

func (s *Server) getBlob(w http.ResponseWriter, r *http.Request, containerName, name string) *apiError {
	start, end, ranged, e := parseRange(r)
	if e != nil {
		return e
	}
	s.mu.Lock()
	c, e := s.containerLocked(containerName)
	if e != nil {
		s.mu.Unlock()
		return e
	}
	b := c.blobs[name]
	s.mu.Unlock()
	// A committed blob is never changed in place (every write replaces
	// the *blobObject), so it is read without the lock.
	if b == nil {
		return errorf(http.StatusNotFound, "BlobNotFound", "the specified blob does not exist")
	}
	if e := checkConditions(r, b, false); e != nil {
		if e.status == http.StatusNotModified {
			w.Header().Set("ETag", b.etag)
			w.WriteHeader(http.StatusNotModified)
			return nil
		}
		return e
	}
	size := int64(len(b.data))
	h := w.Header()
	h.Set("ETag", b.etag)
	h.Set("Last-Modified", b.modified.Format(http.TimeFormat))
	h.Set("x-ms-creation-time", b.created.Format(http.TimeFormat))
	h.Set("x-ms-blob-type", "BlockBlob")
	h.Set("x-ms-server-encrypted", "true")
	h.Set("x-ms-lease-state", "available")
	h.Set("x-ms-lease-status", "unlocked")
	h.Set("Accept-Ranges", "bytes")
	for k, v := range map[string]string{"Content-Type": b.contentType, "Content-Encoding": b.encoding,
		"Content-Language": b.language, "Content-Disposition": b.disposition, "Cache-Control": b.cacheControl} {
		if v != "" {
			h.Set(k, v)
		}
	}
	for k, v := range b.meta {
		h.Set("x-ms-meta-"+k, v)
	}
	if b.copyID != "" {
		h.Set("x-ms-copy-id", b.copyID)
		h.Set("x-ms-copy-status", "success")
	}
	md5Header := "Content-MD5"
	body := b.data
	status := http.StatusOK
	if r.Method == http.MethodGet && ranged {
		if start >= size {
			h.Set("Content-Range", fmt.Sprintf("bytes */%d", size))
			return errorf(http.StatusRequestedRangeNotSatisfiable, "InvalidRange", "the range specified is invalid for the current size of the resource")
		}
		if end < 0 || end >= size {
			end = size - 1
		}
		body = b.data[start : end+1]
		h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, end, size))
		status = http.StatusPartialContent
		// A range's response carries the whole blob's MD5 under another
		// name: Content-MD5 would describe the body.
		md5Header = "x-ms-blob-content-md5"
	}
	if b.md5 != nil {
		h.Set(md5Header, base64.StdEncoding.EncodeToString(b.md5))
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	if r.Method == http.MethodGet {
		_, _ = w.Write(body)
	}
	return nil
}

// The List Blobs answer (EnumerationResults), in the service's shape.
type (
	enumerationResults struct {
		XMLName         xml.Name `xml:"EnumerationResults"`
		ServiceEndpoint string   `xml:"ServiceEndpoint,attr"`
		ContainerName   string   `xml:"ContainerName,attr"`
		Prefix          string   `xml:"Prefix,omitempty"`
		Marker          string   `xml:"Marker,omitempty"`
		MaxResults      int      `xml:"MaxResults"`
		Delimiter       string   `xml:"Delimiter,omitempty"`
		Blobs           blobsXML `xml:"Blobs"`
		NextMarker      string   `xml:"NextMarker"`
	}
	blobsXML struct {
		Entries []any
	}
	nameXML struct {
		Encoded bool   `xml:"Encoded,attr,omitempty"`
		Name    string `xml:",chardata"`
	}
	blobXML struct {
		XMLName    xml.Name      `xml:"Blob"`
		Name       nameXML       `xml:"Name"`
		Properties propertiesXML `xml:"Properties"`
		Metadata   *metadataXML  `xml:"Metadata,omitempty"`
	}
	prefixXML struct {
		XMLName xml.Name `xml:"BlobPrefix"`
		Name    nameXML  `xml:"Name"`
	}
	propertiesXML struct {
		CreationTime       string `xml:"Creation-Time"`
		LastModified       string `xml:"Last-Modified"`
		Etag               string `xml:"Etag"`
		ContentLength      int64  `xml:"Content-Length"`
		ContentType        string `xml:"Content-Type"`
		ContentEncoding    string `xml:"Content-Encoding"`
		ContentLanguage    string `xml:"Content-Language"`
		ContentMD5         string `xml:"Content-MD5,omitempty"`
		ContentDisposition string `xml:"Content-Disposition"`
		CacheControl       string `xml:"Cache-Control"`
		BlobType           string `xml:"BlobType"`
		LeaseStatus        string `xml:"LeaseStatus"`
		LeaseState         string `xml:"LeaseState"`
		ServerEncrypted    bool   `xml:"ServerEncrypted"`
	}
	metadataXML struct {
		Entries []metaEntryXML
	}
	metaEntryXML struct {
		XMLName xml.Name
		Value   string `xml:",chardata"`
	}
)

// MarshalXML writes the entries in order, each in its own element.
func (b blobsXML) MarshalXML(enc *xml.Encoder, start xml.StartElement) error {
	if err := enc.EncodeToken(start); err != nil {
		return err
	}
	for _, e := range b.Entries {
		if err := enc.Encode(e); err != nil {
			return err
		}
	}
	return enc.EncodeToken(start.End())
}

// MarshalXML writes <Metadata><name>value</name>…</Metadata>.
func (m metadataXML) MarshalXML(enc *xml.Encoder, start xml.StartElement) error {
	if err := enc.EncodeToken(start); err != nil {
		return err
	}
	for _, e := range m.Entries {
		if err := enc.Encode(e); err != nil {
			return err
		}
	}
	return enc.EncodeToken(start.End())
}

// xmlName is a name as the service lists it: as it is when XML can carry
// it, otherwise percent-encoded with Encoded="true".
func xmlName(n string) nameXML {
	ok := utf8.ValidString(n)
	for _, c := range n {
		if !ok {
			break
		}
		ok = c == '\t' || c == '\n' || c == '\r' || (c >= 0x20 && c <= 0xD7FF) || (c >= 0xE000 && c <= 0xFFFD) || c >= 0x10000
	}
	if ok {
		return nameXML{Name: n}
	}
	return nameXML{Encoded: true, Name: url.QueryEscape(n)}
}

// listEntry is one result of a listing: a blob, or a common prefix.
type listEntry struct {
	name   string
	blob   *blobObject
	prefix bool
}

func (s *Server) listBlobs(w http.ResponseWriter, host string, q url.Values, containerName string) *apiError {
	prefix, delim := q.Get("prefix"), q.Get("delimiter")
	maxResults := MaxResults
	if v := q.Get("maxresults"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return errorf(http.StatusBadRequest, "OutOfRangeQueryParameterValue", "maxresults %q must be a positive integer", v)
		}
		maxResults = min(n, MaxResults)
	}
	var after string
	if m := q.Get("marker"); m != "" {
		raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(m, "2!"))
		if err != nil || !strings.HasPrefix(m, "2!") {
			return errorf(http.StatusBadRequest, "OutOfRangeInput", "marker %q is not one this service returned", m)
		}
		after = string(raw)
	}
	includeMeta := false
	for _, inc := range strings.Split(q.Get("include"), ",") {
		switch inc {
		case "":
		case "metadata":
			includeMeta = true
		default:
			return errorf(http.StatusBadRequest, "InvalidQueryParameterValue", "include=%s is not supported by the fake", inc)
		}
	}
	s.mu.Lock()
	c, e := s.containerLocked(containerName)
	if e != nil {
		s.mu.Unlock()
		return e
	}
	entries := make([]listEntry, 0, len(c.blobs))
	seen := map[string]bool{}
	for name, b := range c.blobs {
		rest, ok := strings.CutPrefix(name, prefix)
		if !ok {
			continue
		}
		if delim != "" {
			if i := strings.Index(rest, delim); i >= 0 {
				p := prefix + rest[:i+len(delim)]
				if !seen[p] {
					seen[p] = true
					entries = append(entries, listEntry{name: p, prefix: true})
				}
				continue
			}
		}
		entries = append(entries, listEntry{name: name, blob: b})
	}
	s.mu.Unlock()
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	// The marker is the last name the previous page returned; a page
	// starts after it. A common prefix sorts before the blobs it stands
	// for, so none of those comes back on a later page.
	first := sort.Search(len(entries), func(i int) bool { return entries[i].name > after })
	entries = entries[first:]
	res := enumerationResults{
		ServiceEndpoint: "http://" + host + "/" + Account + "/", ContainerName: containerName,
		Prefix: prefix, Marker: q.Get("marker"), MaxResults: maxResults, Delimiter: delim,
	}
	if len(entries) > maxResults {
		entries = entries[:maxResults]
		res.NextMarker = "2!" + base64.RawURLEncoding.EncodeToString([]byte(entries[len(entries)-1].name))
	}
	for _, en := range entries {
		if en.prefix {
			res.Blobs.Entries = append(res.Blobs.Entries, prefixXML{Name: xmlName(en.name)})
			continue
		}
		b := en.blob
		bx := blobXML{Name: xmlName(en.name), Properties: propertiesXML{
			CreationTime: b.created.Format(http.TimeFormat), LastModified: b.modified.Format(http.TimeFormat),
			Etag: strings.Trim(b.etag, "\""), ContentLength: int64(len(b.data)), ContentType: b.contentType,
			ContentEncoding: b.encoding, ContentLanguage: b.language, ContentDisposition: b.disposition,
			CacheControl: b.cacheControl, BlobType: "BlockBlob", LeaseStatus: "unlocked", LeaseState: "available",
			ServerEncrypted: true,
		}}
		if b.md5 != nil {
			bx.Properties.ContentMD5 = base64.StdEncoding.EncodeToString(b.md5)
		}
		if includeMeta {
			bx.Metadata = &metadataXML{}
			for k, v := range b.meta {
				bx.Metadata.Entries = append(bx.Metadata.Entries, metaEntryXML{XMLName: xml.Name{Local: k}, Value: v})
			}
		}
		res.Blobs.Entries = append(res.Blobs.Entries, bx)
	}
	out, err := xml.Marshal(res)
	if err != nil {
		return errorf(http.StatusInternalServerError, "InternalError", "encoding the listing: %v", err)
	}
	w.Header().Set("Content-Type", "application/xml")
	w.Header().Set("Content-Length", strconv.Itoa(len(xml.Header)+len(out)))
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, xml.Header)
	_, _ = w.Write(out)
	return nil
}

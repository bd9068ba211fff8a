// Package paging is the one implementation of Google's AIP-158 list paging
// shared by every List RPC: page_size and page_token on the request,
// next_page_token on the response.
//
// A list is served in ascending order of a string key unique per item (the
// item's name, or JobKey for jobs). A token holds the last key returned and
// a hash of the request's other fields, so a token is stable (the same
// request with it gives the page after that key whatever was added or
// removed before it: nothing is listed twice, nothing present all along is
// skipped) and a token sent with different filters is InvalidArgument. A
// page holds at most the page size of items and is cut before MaxBytes
// encoded, so that no page can approach gRPC's 4 MB message limit whatever
// the items hold.
package paging

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/loom-ml/loom/libs/errs"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

const (
	// DefaultSize is the page size of a request with page_size 0.
	DefaultSize = 100
	// MaxSize is the largest page size; a larger page_size is taken as it.
	MaxSize = 1000
	// MaxBytes bounds a page's encoded items: an item that would take the
	// page past it starts the next page instead. A page always holds at
	// least one item (so paging always moves on), which the services' input
	// limits keep far below gRPC's 4 MB.
	MaxBytes = 1 << 20
	// MaxTokenLen bounds page_token; the tokens this package makes are far
	// shorter.
	MaxTokenLen = 2048
)

// Request is a List request with AIP-158's fields.
type Request interface {
	proto.Message
	GetPageSize() int32
	GetPageToken() string
}

// tokenVersion starts every token, so that a later format can be told apart.
const tokenVersion = 1

// hashLen is the bytes of the request hash a token carries.
const hashLen = 8

// Parse checks req's page_size and page_token and returns the page's size
// and the key the page starts after ("" for the first page). Errors are
// InvalidArgument naming page_size (negative) or page_token (not one this
// package made, or made for a request with other fields).
func Parse(req Request) (size int, after string, err error) {
	var v errs.Validator
	size, after = Check(&v, req)
	if err := v.Err(); err != nil {
		return 0, "", err
	}
	return size, after, nil
}

// CheckSize is the page size n asks for: DefaultSize for 0, at most
// MaxSize (a larger one is taken as MaxSize, AIP-158), and a violation of
// page_size in v for a negative one. It is every list's rule: Check's, and
// the gateway's for the lists it passes on.
func CheckSize(v *errs.Validator, n int32) int {
	switch {
	case n < 0:
		v.Add("page_size", "must not be negative, got %d (0 is the default, %d; at most %d)", n, DefaultSize, MaxSize)
		return 0
	case n == 0:
		return DefaultSize
	}
	return min(int(n), MaxSize)
}

// Check is Parse for a request whose other fields v also checks: it adds
// its violations to v, so that every problem is reported at once.
func Check(v *errs.Validator, req Request) (size int, after string) {
	size = CheckSize(v, req.GetPageSize())
	if tok := req.GetPageToken(); tok != "" {
		var err error
		if after, err = decode(tok, hash(req)); err != nil {
			v.Add("page_token", "%v", err)
		}
	}
	return size, after
}

func decode(tok string, want []byte) (string, error) {
	if len(tok) > MaxTokenLen {
		return "", fmt.Errorf("is %d bytes, at most %d; send the next_page_token of the previous page unchanged", len(tok), MaxTokenLen)
	}
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || len(raw) < 1+hashLen || raw[0] != tokenVersion {
		return "", fmt.Errorf("not a token this list returned; send the next_page_token of the previous page unchanged, or none for the first page")
	}
	if !bytes.Equal(raw[1:1+hashLen], want) {
		return "", fmt.Errorf("was returned for a request with other fields; send it with the same parent and filters, or send none to start over")
	}
	return string(raw[1+hashLen:]), nil
}

// TokenKey is the key a token made by Token goes on from, without the
// check of the request it was made for: for a service reading the token a
// service it called returned (the gateway, the scheduler's), whose
// request it made, not a caller's token (Parse checks those).
func TokenKey(tok string) (string, error) {
	if len(tok) > MaxTokenLen {
		return "", fmt.Errorf("a page token of %d bytes, at most %d", len(tok), MaxTokenLen)
	}
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || len(raw) < 1+hashLen || raw[0] != tokenVersion {
		return "", fmt.Errorf("not a page token of this version")
	}
	return string(raw[1+hashLen:]), nil
}

// Token returns the page token that continues req's list after key.
func Token(req Request, key string) string {
	raw := append([]byte{tokenVersion}, hash(req)...)
	return base64.RawURLEncoding.EncodeToString(append(raw, key...))
}

// hash digests req without its paging fields: what a token must be sent
// with.
func hash(req Request) []byte {
	m := proto.Clone(req)
	r := m.ProtoReflect()
	for _, name := range []protoreflect.Name{"page_size", "page_token"} {
		if fd := r.Descriptor().Fields().ByName(name); fd != nil {
			r.Clear(fd)
		}
	}
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	sum := sha256.Sum256(append([]byte(r.Descriptor().FullName()+"\x00"), b...))
	return sum[:hashLen]
}

// Builder collects one page: Add takes items in key order until the page
// is full.
type Builder struct {
	size, bytes, n int
}

// NewBuilder returns a Builder for a page of at most size items.
func NewBuilder(size int) *Builder { return &Builder{size: max(size, 1)} }

// Add reports whether m fits on the page and, if so, counts it: the page
// has fewer than size items and m keeps it within MaxBytes (the first item
// always fits). Once Add said false the page is full.
func (b *Builder) Add(m proto.Message) bool {
	sz := proto.Size(m) + 8 // the field's tag and length
	if b.n >= b.size || (b.n > 0 && b.bytes+sz > MaxBytes) {
		b.size = b.n
		return false
	}
	b.n++
	b.bytes += sz
	return true
}

// Page returns the page of items that follows after in key order: sorted
// is in ascending order of key with keys unique (Sort sorts so). next is
// the key to continue after, "" when nothing follows the page.
func Page[T proto.Message](sorted []T, key func(T) string, after string, size int) (page []T, next string) {
	from, to, next := span(len(sorted), func(i int) string { return key(sorted[i]) },
		func(i int) proto.Message { return sorted[i] }, after, size)
	return sorted[from:to], next
}

// span finds the page of n items (item i has key(i), keys ascending) that
// follows after: items [from, to), and the key to continue after.
func span(n int, key func(int) string, msg func(int) proto.Message, after string, size int) (from, to int, next string) {
	if after != "" {
		from = sort.Search(n, func(i int) bool { return key(i) > after })
	}
	b := NewBuilder(size)
	for to = from; to < n; to++ {
		if !b.Add(msg(to)) {
			return from, to, key(to - 1)
		}
	}
	return from, to, ""
}

// Sort sorts items by key in ascending order.
func Sort[T any](items []T, key func(T) string) {
	sort.SliceStable(items, func(a, b int) bool { return key(items[a]) < key(items[b]) })
}

// List serves one page of a whole list: it parses req, sorts items by key
// and returns the page with its next_page_token ("" on the last page).
func List[T proto.Message](req Request, items []T, key func(T) string) ([]T, string, error) {
	size, after, err := Parse(req)
	if err != nil {
		return nil, "", err
	}
	Sort(items, key)
	page, next := Page(items, key, after, size)
	return page, nextToken(req, next), nil
}

// Ordered serves one page of a list that keeps its own order (the
// configuration's: a cluster's partitions, its nodes as Slurm lists them,
// capacity pools) rather than a key's. Its token marks a position, so an
// item added or removed before it between two pages shifts the rest by one;
// these lists change only with the configuration.
func Ordered[T proto.Message](req Request, items []T) ([]T, string, error) {
	size, after, err := Parse(req)
	if err != nil {
		return nil, "", err
	}
	from, to, next := span(len(items), IndexKey, func(i int) proto.Message { return items[i] }, after, size)
	return items[from:to], nextToken(req, next), nil
}

// IndexKey is the key of the i-th item of an Ordered list, and a number's
// key (step ids, model versions): zero-padded, so that keys sort as numbers.
func IndexKey(i int) string { return fmt.Sprintf("%020d", i) }

func nextToken(req Request, next string) string {
	if next == "" {
		return ""
	}
	return Token(req, next)
}

// JobKey is a job's list key: its numeric job id (0 when the id is not a
// number), zero-padded so that keys sort as numbers, then its name. Jobs
// list in job id order, which is submission order; the scheduler and the
// gateway (which merges its history into the scheduler's list) share it.
func JobKey(j *loomv1.Job) string {
	n, err := strconv.ParseUint(j.GetJobId(), 10, 64)
	if err != nil {
		n = 0
	}
	return fmt.Sprintf("%020d %s", n, j.GetName())
}

// MaxPages bounds the pages Each reads: a list that never ends cannot hold
// its reader (MaxPages full pages are ten million items).
const MaxPages = 10000

// Each reads a whole list: it calls page with "" and then with each
// next_page_token page returns, until one returns "". It fails when page
// does, when a token repeats (a server that would loop forever), or past
// MaxPages pages. The CLI, the Slurm commands and the gateway's own reads
// of other services' lists all read through it.
func Each(page func(token string) (next string, err error)) error {
	seen := map[string]bool{}
	token := ""
	for n := 0; ; n++ {
		if n == MaxPages {
			return fmt.Errorf("the list did not end after %d pages", MaxPages)
		}
		next, err := page(token)
		if err != nil {
			return err
		}
		if next == "" {
			return nil
		}
		if seen[next] {
			return fmt.Errorf("the list returned page token %q twice", next)
		}
		seen[next] = true
		token = next
	}
}

// MaxJobOrderBy bounds ListJobs' order_by in bytes.
const MaxJobOrderBy = 64

// JobOrder checks ListJobsRequest.order_by (AIP-132, one field): "" or
// "job_id" / "submit_time" (also jobId, submitTime), then "asc" (the
// default) or "desc". Both fields name the list order (JobKey: job id,
// which is submission order), so desc lists the newest first. Bad input is
// added to v, naming order_by. The scheduler and the gateway both check
// it; a page token carries the request's order_by in its hash, so a token
// of one order is refused by the other.
func JobOrder(v *errs.Validator, orderBy string) (desc bool) {
	if len(orderBy) > MaxJobOrderBy {
		v.Add("order_by", "%d bytes, more than the limit of %d", len(orderBy), MaxJobOrderBy)
		return false
	}
	words := strings.Fields(orderBy)
	switch {
	case len(words) == 0:
		return false
	case words[0] != "job_id" && words[0] != "jobId" && words[0] != "submit_time" && words[0] != "submitTime":
		v.Add("order_by", "cannot order jobs by %q: want job_id or submit_time, then asc or desc (\"submit_time desc\": the newest first)", words[0])
		return false
	case len(words) == 1:
		return false
	case len(words) == 2 && strings.EqualFold(words[1], "asc"):
		return false
	case len(words) == 2 && strings.EqualFold(words[1], "desc"):
		return true
	}
	v.Add("order_by", "%q: want FIELD [asc|desc], one field of job_id or submit_time", strings.TrimSpace(orderBy))
	return false
}

// SortDesc sorts items by key in descending order.
func SortDesc[T any](items []T, key func(T) string) {
	sort.SliceStable(items, func(a, b int) bool { return key(items[a]) > key(items[b]) })
}

package blobstore

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"unicode/utf8"

	"gocloud.dev/blob"
	"golang.org/x/text/unicode/norm"
	"google.golang.org/grpc/codes"

	"github.com/loom-ml/loom/libs/errs"
)

// The MLflow path-traversal chain: each payload is the name part of a
// published exploit, tried as a model name, an artifact name and a Sub
// prefix. Shapes from the advisories and public proofs of concept
// (nuclei templates, tsunami plugins, MLflow's issue tracker and fixes).
var mlflowCVEs = []struct{ cve, payload string }{
	// get-artifact ?path= traversal (MLflow issue 7166, the start of the chain).
	{"CVE-2023-1177/path", "../../../../../../etc/passwd"},
	// model-versions/create source=file:///etc/ then get-artifact path=passwd.
	{"CVE-2023-1177/source", "/etc/passwd"},
	{"CVE-2023-1177/source-uri", "file:///etc/"},
	// the 2.2.1 fix bypassed with Windows separators.
	{"CVE-2023-2780", "\\..\\..\\..\\..\\etc\\passwd"},
	{"CVE-2023-2780/mixed", "artifacts\\..\\..\\..\\etc/passwd"},
	// is_local_uri bypassed with an empty host: //proc/self/root.
	{"CVE-2023-6977", "//proc/self/root/etc/passwd"},
	// artifact URL with the path moved into the fragment.
	{"CVE-2023-6909", "artifacts#/../../../../etc/passwd"},
	{"CVE-2023-6909/uri", "http:///#/../../../../etc/"},
	// experiments/create artifact_location=http:///#/../../../../etc/ with '#' for '?'.
	{"CVE-2024-1483", "#/../../../../../../../../../../../../../../etc/"},
	{"CVE-2024-1483/query", "?/../../../../etc/passwd"},
	// artifact deletion and listing with percent-encoded traversal.
	{"CVE-2024-1560", "..%2F..%2F..%2Fetc%2Fpasswd"},
	{"CVE-2024-1560/lower", "%2e%2e/%2e%2e/%2e%2e/etc/passwd"},
	{"CVE-2023-6730/double", "%252e%252e%252f%252e%252e%252fetc%252fpasswd"},
	// URI parsing with ';' and an empty scheme (the 2.11 is_local_uri fix).
	{"CVE-2024-3573", "/;/../../../../etc/passwd"},
	{"CVE-2024-3573/file-scheme", "file:/../../../../etc/passwd"},
	// '#' fragment bypass of the 6909 fix.
	{"CVE-2024-3848", "run/artifacts#../../../../../root/.ssh/id_rsa"},
	// NUL truncation and Unicode lookalikes of '/' and '.'.
	{"nul", "model.bin\x00/../../etc/passwd"},
	{"division-slash", "\u2025\u2215\u2025\u2215etc\u2215passwd"},
	{"fullwidth", "\uff0e\uff0e\uff0fetc\uff0fpasswd"},
	{"one-dot-leader", "\u2024\u2024/etc/passwd"},
	{"trailing-dotdot", "models/m1/.."},
	{"dot", "./model.bin"},
}

func TestCleanKeyAcceptsPlainNames(t *testing.T) {
	t.Parallel()
	for _, name := range []string{
		"model.bin", "a/b/c.txt", "checkpoints/step-100/weights.safetensors",
		"ünïcödé/☺.pt", "a..b", "...", ".hidden/x", "t-/t.", "file:x",
		"with space/and'quote\"", strings.Repeat("x", MaxSegmentBytes) + "/" + strings.Repeat("y", 10),
	} {
		got, err := CleanKey("name", name)
		if err != nil || got != name {
			t.Errorf("CleanKey(%q) = %q, %v; want it unchanged", name, got, err)
		}
		if encodeKey(name) != name {
			t.Errorf("encodeKey(%q) = %q; a clean name must be stored as it is", name, encodeKey(name))
		}
	}
}

func TestCleanKeyRefusesWithTheRule(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, rule string }{
		{"", "must not be empty"},
		{"/abs", "relative"},
		{"a/../b", `".." segment`},
		{"./a", `"." segment`},
		{"a//b", "empty segments"},
		{"a/", "empty segments"},
		{"a#b", "'#'"},
		{"a?b", "'?'"},
		{"a%2e", "'%'"},
		{"a\\b", `'\'`},
		{"a\x00b", "U+0000"},
		{"a\nb", "U+000A"},
		{"a\u202eb", "U+202E"},
		{"a\xffb", "UTF-8"},
		{strings.Repeat("a", MaxKeyBytes+1), "at most 1024"},
		{strings.Repeat("a", MaxSegmentBytes+1), "at most 255"},
		// Within the limits as written, over them as stored (encodeKey).
		{strings.Repeat("a", MaxSegmentBytes-2) + "../b", "segment 1 is 257 bytes as stored"},
		{"__0x" + strings.Repeat("1", MaxSegmentBytes-4), "segment 1 is 257 bytes as stored"},
		{strings.Repeat("a../", MaxKeyBytes/4-1) + "bcd", "is 1533 bytes as stored"},
		{"a\u2215b", "U+2215, which looks like a path separator"},
		{"a\uff0fb", "normalises (NFKC)"},
		{"\uff0e\uff0e/x", `normalises (NFKC) to "../x"`},
		{"x/\u2025", "normalises (NFKC)"},
	} {
		_, err := CleanKey("model_id", tc.name)
		if errs.Code(err) != codes.InvalidArgument {
			t.Errorf("CleanKey(%q): err %v, want InvalidArgument", tc.name, err)
			continue
		}
		var inv *errs.InvalidError
		if !errors.As(err, &inv) || inv.Violations[0].Field != "model_id" || !strings.Contains(inv.Violations[0].Reason, tc.rule) {
			t.Errorf("CleanKey(%q) = %v; want field model_id and rule %q", tc.name, err, tc.rule)
		}
		if len(err.Error()) > 400 {
			t.Errorf("CleanKey(%q): message is %d bytes; a hostile name must not make a huge message", tc.name[:10], len(err.Error()))
		}
	}
}

// TestMLflowCVEChain tries every payload as an artifact name, a model name
// (Sub prefix) and, below CleanKey, straight through the confining driver
// onto a real directory: Loom's API refuses each one, and the driver lands
// whatever it is given under the bucket's prefix.
func TestMLflowCVEChain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range mlflowCVEs {
		t.Run(tc.cve, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			secret := filepath.Join(root, "etc", "passwd")
			mustWrite(t, secret, "root:x:0:0")
			store := filepath.Join(root, "store")
			b, err := Open(ctx, store)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			tenant, err := b.Sub("projects/p1/models")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := CleanKey("artifact", tc.payload); errs.Code(err) != codes.InvalidArgument {
				t.Errorf("CleanKey(%q) = %v, want InvalidArgument", tc.payload, err)
			}
			if _, err := tenant.Sub(tc.payload); errs.Code(err) != codes.InvalidArgument {
				t.Errorf("Sub(%q) = %v, want InvalidArgument", tc.payload, err)
			}
			if err := tenant.WriteFile(ctx, tc.payload, []byte("pwned")); errs.Code(err) != codes.InvalidArgument {
				t.Errorf("WriteFile(%q) = %v, want InvalidArgument", tc.payload, err)
			}
			if _, err := tenant.NewReader(ctx, tc.payload); errs.Code(err) != codes.InvalidArgument {
				t.Errorf("NewReader(%q) = %v, want InvalidArgument", tc.payload, err)
			}
			// Below the API: the driver takes the payload as it is.
			if utf8.ValidString(tc.payload) {
				if err := tenant.bkt.WriteAll(ctx, tc.payload, []byte("pwned"), nil); err != nil {
					t.Fatalf("driver write %q: %v", tc.payload, err)
				}
				got, err := tenant.bkt.ReadAll(ctx, tc.payload)
				if err != nil || string(got) != "pwned" {
					t.Fatalf("driver read back %q = %q, %v", tc.payload, got, err)
				}
			}
			if data, _ := os.ReadFile(secret); string(data) != "root:x:0:0" {
				t.Fatalf("%s: the file outside the bucket changed: %q", tc.cve, data)
			}
			assertConfined(t, root, filepath.Join(store, "projects", "p1", "models"), secret)
		})
	}
}

func TestOpenRefusesTraversalURLs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	for _, u := range []string{
		"file://" + dir + "/../../etc",
		"file://" + dir + "/%2e%2e/%2e%2e/etc",
		"file://" + dir + "/a%2F..%2F..",
		"file://./../..",
		"file://evil.example/etc",
		"http:///#/../../../../etc/",
		"file://" + dir + "#/../../etc",
		"mem:///a/../b",
		"mem:///a//b",
		"mem://?prefix=../",
		"s3://bucket/%2e%2e/x?region=us-east-1",
		"relative/dir",
		"nosuchscheme://b",
	} {
		b, err := Open(ctx, u)
		if errs.Code(err) != codes.InvalidArgument {
			if b != nil {
				b.Close()
			}
			t.Errorf("Open(%q) = %v, want InvalidArgument", u, err)
		}
	}
}

// assertConfined fails unless every file under root is under inside (or
// is one of allowed).
func assertConfined(t testing.TB, root, inside string, allowed ...string) {
	t.Helper()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		for _, a := range allowed {
			if p == a {
				return nil
			}
		}
		if !strings.HasPrefix(p, inside+string(filepath.Separator)) {
			t.Errorf("file %q is outside %q", p, inside)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func mustWrite(t testing.TB, p, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func addSeeds(f *testing.F) {
	for _, tc := range mlflowCVEs {
		f.Add(tc.payload)
	}
	for _, s := range []string{"model.bin", "a/b", "a//b", "../x", "a/..", "%2e%2e/x", "\u2025/x", "x.attrs", "a\\..\\b", "%", "%2E", "a/%/b"} {
		f.Add(s)
	}
}

// FuzzCleanKey: for any input, CleanKey either refuses it with an
// InvalidArgument error naming the field, or returns it unchanged as a
// name that, joined to any prefix, stays under that prefix, with nothing
// a later decoding or normalising layer could turn into a traversal.
func FuzzCleanKey(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, s string) {
		k, err := CleanKey("name", s)
		if err != nil {
			var inv *errs.InvalidError
			if !errors.As(err, &inv) || inv.Violations[0].Field != "name" {
				t.Fatalf("CleanKey(%q) = %v; want an InvalidError on field name", s, err)
			}
			return
		}
		if k != s {
			t.Fatalf("CleanKey(%q) changed it to %q", s, k)
		}
		for _, form := range []string{k, norm.NFKC.String(k), norm.NFKD.String(k)} {
			const prefix = "/bucket/projects/p1"
			j := path.Join(prefix, form)
			if !strings.HasPrefix(j, prefix+"/") || path.Clean(form) != form || path.IsAbs(form) ||
				strings.ContainsAny(form, "\\%#?\x00") {
				t.Fatalf("CleanKey accepted %q (form %q), which joins to %q", s, form, j)
			}
		}
		// Only "__0x" and a ".." ending a segment before a '/' are stored
		// encoded (see encodeKey).
		stays := !strings.Contains(k, "__0x") && !strings.Contains(k, "../")
		if decodeKey(encodeKey(k)) != k || stays && encodeKey(k) != k {
			t.Fatalf("clean name %q is stored as %q", k, encodeKey(k))
		}
	})
}

// FuzzSubConfinement: on fileblob and the real file system, any input
// used as a Sub prefix, as an artifact name through the API, and as a raw
// key straight through the confining driver, either is refused
// (InvalidArgument, for the API) or lands under the tenant's directory;
// nothing is ever written beside it, and a key read back is the same key.
func FuzzSubConfinement(f *testing.F) {
	addSeeds(f)
	root := f.TempDir()
	secret := filepath.Join(root, "outside", "secret")
	mustWrite(f, secret, "secret")
	store := filepath.Join(root, "store")
	ctx := context.Background()
	b, err := Open(ctx, store)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { b.Close() })
	tenant, err := b.Sub("tenant")
	if err != nil {
		f.Fatal(err)
	}
	inside := filepath.Join(store, "tenant")
	// Each way of using s gets its own directory, so that one cannot make
	// a file where another needs a directory.
	sub := func(p string) *Bucket {
		s, err := tenant.Sub(p)
		if err != nil {
			f.Fatal(err)
		}
		return s
	}
	subs, keys, raw := sub("subs"), sub("keys"), sub("raw")
	f.Fuzz(func(t *testing.T, s string) {
		defer os.RemoveAll(inside)
		if sub, err := subs.Sub(s); err != nil {
			if errs.Code(err) != codes.InvalidArgument {
				t.Fatalf("Sub(%q) = %v, want InvalidArgument", s, err)
			}
		} else if err := sub.WriteFile(ctx, "model.bin", []byte("m")); err != nil && errs.Code(err) != codes.InvalidArgument {
			t.Fatalf("Sub(%q).WriteFile: %v", s, err)
		}
		if err := keys.WriteFile(ctx, s, []byte("a")); err != nil && errs.Code(err) != codes.InvalidArgument {
			t.Fatalf("WriteFile(%q): %v, want nil or InvalidArgument", s, err)
		}
		if s != "" && utf8.ValidString(s) && !strings.HasSuffix(s, ".attrs") {
			if err := raw.bkt.WriteAll(ctx, s, []byte("raw"), nil); err == nil {
				got, err := raw.bkt.ReadAll(ctx, s)
				if err != nil || string(got) != "raw" {
					t.Fatalf("driver read back %q = %q, %v", s, got, err)
				}
				if listed := listKeys(t, raw); !contains(listed, s) {
					t.Fatalf("driver wrote %q but lists %q", s, listed)
				}
			}
		}
		assertConfined(t, root, inside, secret)
		if data, _ := os.ReadFile(secret); string(data) != "secret" {
			t.Fatalf("input %q changed a file outside the bucket", s)
		}
	})
}

func listKeys(t testing.TB, b *Bucket) []string {
	t.Helper()
	objs, err := b.list(context.Background(), 1000, "test")
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]string, len(objs))
	for i, o := range objs {
		keys[i] = o.Key
	}
	return keys
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func TestEncodeKeyRoundTrips(t *testing.T) {
	t.Parallel()
	for _, k := range []string{"", "/", "a//b", "../x/..", "%", "%2E", "a\\b", "\x00\x1f\x7f", "#?%", "a/.", "./", "ok/name", "__0x2f__", "a__0x2e____0x2e__",
		"0../0", "a../b../c..", "..../x", "a.%2E/b", "a../", "__0x../x", ".../...", "a.%2E"} {
		e := encodeKey(k)
		if got := decodeKey(e); got != k {
			t.Errorf("decodeKey(encodeKey(%q) = %q) = %q", k, e, got)
		}
		segs := strings.Split(e, "/")
		for i, seg := range segs {
			if seg == "" && k != "" || seg == "." || seg == ".." || strings.ContainsAny(seg, "\\#?\x00") ||
				i < len(segs)-1 && strings.HasSuffix(seg, "..") {
				t.Errorf("encodeKey(%q) = %q has segment %q a store could interpret", k, e, seg)
			}
		}
	}
	// Names another program wrote are shown as they are, the encodings
	// encodeKey never makes ("a.%2E" last, ".%2E" for "..") included:
	// decoding them would list two files as one key.
	for _, raw := range []string{"100%.txt", "a%41", "a%2E", "a.%2E", ".%2E/x", "a.%2E.%2E/x", "a%2E./x"} {
		if got := decodeKey(raw); got != raw {
			t.Errorf("decodeKey(%q) = %q, want it unchanged", raw, got)
		}
	}
}

// What the file system holds must be what a file:// path of the name
// finds: fileblob rewrites "../" ("0../0" became the single file
// "0..__0x2f__0") and "__0xNN__", so encodeKey must leave it nothing to
// rewrite, or the name is written but neither listed nor read (the
// fuzzer's "0../0").
var fileblobRewrites = []string{"0../0", "ckpt../step-1/w.bin", "a../b../c", "__0x41__", "d/x__0x2f__y", "a../__0x41__"}

func TestEncodedKeyIsTheFilePath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	root := t.TempDir()
	base, err := blob.OpenBucket(ctx, "file://"+root)
	if err != nil {
		t.Fatal(err)
	}
	defer base.Close()
	for _, k := range append([]string{"a..", "...", "../x", "a//b", "x/"}, fileblobRewrites...) {
		e := encodeKey(k)
		if err := base.WriteAll(ctx, e, []byte(k), nil); err != nil {
			t.Fatalf("write %q (%q): %v", k, e, err)
		}
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(e))); err != nil {
			t.Errorf("key %q encoded %q is not that file: %v", k, e, err)
		}
	}
}

func TestNamesFileblobRewritesAreListedAndRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	root := t.TempDir()
	b := open(t, root)
	want := map[string][]byte{}
	for _, k := range append([]string{"a..", "..."}, fileblobRewrites...) {
		if _, err := CleanKey("key", k); err != nil {
			t.Fatalf("CleanKey(%q): %v", k, err)
		}
		want[k] = []byte("data of " + k)
		if err := b.WriteFile(ctx, k, want[k]); err != nil {
			t.Fatalf("WriteFile(%q): %v", k, err)
		}
	}
	holdsExactly(t, b, want)
	// A copy holds them too (Export lists, reads, and looks at what the
	// destination holds).
	dst := open(t, filepath.Join(t.TempDir(), "dst"))
	if _, err := Export(ctx, b, dst, ExportOptions{}); err != nil {
		t.Fatalf("Export: %v", err)
	}
	holdsExactly(t, dst, want)
	// And as Sub prefixes: the objects are listed, and the Sub's URL is
	// the directory that holds them.
	subs := open(t, t.TempDir())
	for _, p := range []string{"a..", "ckpt../x", "__0x41__"} {
		s, err := subs.Sub(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.WriteFile(ctx, "m.bin", []byte(p)); err != nil {
			t.Fatalf("Sub(%q).WriteFile: %v", p, err)
		}
		holdsExactly(t, s, map[string][]byte{"m.bin": []byte(p)})
		holdsExactly(t, open(t, s.URL()), map[string][]byte{"m.bin": []byte(p)})
	}
	// A 255-byte last segment "a...a.." is one byte too long as a
	// prefix, where a '/' follows it.
	if _, err := subs.Sub(strings.Repeat("a", MaxSegmentBytes-2) + ".."); errs.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "as stored") {
		t.Errorf("Sub(255-byte segment ending in \"..\") = %v, want InvalidArgument (as stored)", err)
	}
}

// holdsExactly fails unless b lists exactly the keys of want and reads
// each back as written (checkBucketHolds is built only with the S3 and
// GCS drivers).
func holdsExactly(t *testing.T, b *Bucket, want map[string][]byte) {
	t.Helper()
	ctx := context.Background()
	objs, err := b.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, o := range objs {
		got[o.Key] = true
		r, err := b.NewReader(ctx, o.Key)
		if err != nil {
			t.Errorf("%s: NewReader(%q): %v", b.URL(), o.Key, err)
			continue
		}
		data, err := io.ReadAll(r)
		r.Close()
		if w, ok := want[o.Key]; !ok || err != nil || string(data) != string(w) || o.SHA256 != sha(w) {
			t.Errorf("%s lists %q holding %q (%v), want %q", b.URL(), o.Key, data, err, w)
		}
	}
	for k := range want {
		if !got[k] {
			t.Errorf("%s: %q was written but is not listed (lists %v)", b.URL(), k, objs)
		}
	}
}

// A list prefix that stops inside a segment finds every key that starts
// with it, however the rest of the segment changes its encoding.
func TestListPrefixInsideASegment(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := open(t, t.TempDir())
	keys := []string{"a..", "a../b", "a..c", "a.d", "x_", "x__0", "x__0x1", "x__0x41__/y", "x_y"}
	for _, k := range keys {
		if err := b.bkt.WriteAll(ctx, k, []byte(k), nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, prefix := range []string{"a", "a.", "a..", "a../", "x", "x_", "x__", "x__0", "x__0x", "x__0x4"} {
		var want, got []string
		for _, k := range keys {
			if strings.HasPrefix(k, prefix) {
				want = append(want, k)
			}
		}
		it := b.bkt.List(&blob.ListOptions{Prefix: prefix})
		for {
			o, err := it.Next(ctx)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, o.Key)
		}
		// In the order of the stored names, which encoding changes.
		sort.Strings(got)
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("List(prefix %q) = %q, want %q", prefix, got, want)
		}
	}
}

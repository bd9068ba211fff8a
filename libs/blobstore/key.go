package blobstore

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/loom-ml/loom/libs/errs"
)

// Limits on one object name. MaxKeyBytes is S3's, GCS's and Azure's limit
// on a whole key; MaxSegmentBytes is a Linux file name's (NAME_MAX), so a
// name that fits one store fits all of them.
const (
	MaxKeyBytes     = 1024
	MaxSegmentBytes = 255
)

// CleanKey checks a relative object name: it refuses "", absolute paths,
// "..", ".", empty segments ("//", a trailing "/"), "#", "?", "%", "\\", NUL
// and other control or format characters, invalid UTF-8, segments over 255
// bytes, names over 1,024 bytes (both also as stored: see encodeKey), and names whose Unicode compatibility form
// (NFKC) breaks any of these rules (U+FF0F "／", U+FF0E "．", U+2025 "‥"
// ...), or that hold a '/' or '\\' lookalike NFKC keeps (U+2215 "∕", U+2044
// "⁄", U+29F8, U+2216, U+29F5, U+29F9, U+FE68),
// with an InvalidArgument error naming field and the rule. It returns the
// name unchanged when it is valid.
//
// '%' is refused rather than decoded: a name means exactly its bytes, so
// "%2e%2e" and "%2F" can never become ".." or "/" in some later layer that
// decodes. The NFKC check is there for the same reason: a store, a browser
// or a tool downstream that normalises must not find a ".." or a "/" that
// Loom did not see.
func CleanKey(field, name string) (string, error) {
	if reason := keyProblem(name); reason != "" {
		return "", errs.Invalid(field, "%s (got %s)", reason, quote(name))
	}
	return name, nil
}

// keyProblem says what is wrong with name, or "" when nothing is.
func keyProblem(name string) string {
	if name == "" {
		return "must not be empty"
	}
	if len(name) > MaxKeyBytes {
		return fmt.Sprintf("is %d bytes; at most %d are allowed", len(name), MaxKeyBytes)
	}
	if !utf8.ValidString(name) {
		return "must be valid UTF-8"
	}
	if r := structureProblem(name); r != "" {
		return r
	}
	if r := storedProblem(name); r != "" {
		return r
	}
	if n := norm.NFKC.String(name); n != name {
		if r := structureProblem(n); r != "" {
			return fmt.Sprintf("normalises (NFKC) to %s, which %s", quote(n), strings.TrimPrefix(r, "must "))
		}
		if strings.Count(n, "/") != strings.Count(name, "/") {
			return "must not contain a character that normalises (NFKC) to '/'"
		}
	}
	return ""
}

// storedWhy says why a name is longer as stored (encodeKey).
const storedWhy = `"__0x" and a ".." that ends a segment before a '/' are stored encoded, 2 bytes longer each`

// storedProblem applies the limits to name as a store gets it: encodeKey
// lengthens a name that holds "__0x" or a ".."-ending segment before a
// '/', and a name that fits the limits must still fit every store.
func storedProblem(name string) string {
	enc := encodeKey(name)
	if enc == name {
		return ""
	}
	if len(enc) > MaxKeyBytes {
		return fmt.Sprintf("is %d bytes as stored (%s); at most %d are allowed", len(enc), storedWhy, MaxKeyBytes)
	}
	for i, seg := range strings.Split(enc, "/") {
		if len(seg) > MaxSegmentBytes {
			return fmt.Sprintf("segment %d is %d bytes as stored (%s); at most %d are allowed", i+1, len(seg), storedWhy, MaxSegmentBytes)
		}
	}
	return ""
}

// slashLookalikes are characters that look like '/' or '\\' but that NFKC
// leaves alone (U+FF0F and U+FF3C it maps, and the NFKC check catches).
const slashLookalikes = "\u2044\u2215\u29F8\u2216\u29F5\u29F9\uFE68"

// structureProblem checks the characters and the segments of name.
func structureProblem(name string) string {
	if strings.HasPrefix(name, "/") {
		return "must be relative (no leading '/')"
	}
	for _, r := range name {
		switch {
		case r == '\\':
			return "must not contain '\\' (separate segments with '/')"
		case r == '#' || r == '?':
			return fmt.Sprintf("must not contain %q (URL fragment and query characters are refused)", r)
		case r == '%':
			return "must not contain '%' (names are not percent-decoded; write the character itself)"
		case strings.ContainsRune(slashLookalikes, r):
			return fmt.Sprintf("must not contain %U, which looks like a path separator", r)
		case unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp):
			return fmt.Sprintf("must not contain control or format character %U", r)
		}
	}
	for i, seg := range strings.Split(name, "/") {
		switch {
		case seg == "":
			return "must not contain empty segments ('//' or a trailing '/')"
		case seg == "." || seg == "..":
			return fmt.Sprintf("must not contain a %q segment", seg)
		case len(seg) > MaxSegmentBytes:
			return fmt.Sprintf("segment %d is %d bytes; at most %d are allowed", i+1, len(seg), MaxSegmentBytes)
		}
	}
	return ""
}

// quote shows a name in an error, cut so that a hostile 1 MiB name does
// not make a 1 MiB message.
func quote(s string) string {
	const max = 80
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return fmt.Sprintf("%q... (%d bytes)", s[:cut], len(s))
	}
	return fmt.Sprintf("%q", s)
}

// The driver-level key encoding. CleanKey guards Loom's API, but the
// confining driver (confine.go) must hold for every key a caller of the
// driver can pass, including the ones CleanKey refuses (go-cloud's
// conformance tests write "../foo/../bar", "foo//bar", "a\\b" and every
// ASCII control character). So the driver encodes what a store or a file
// system could interpret, reversibly, and never refuses:
//
//   - an empty segment becomes "%" (the only segment that is a lone '%'),
//   - a "." or ".." segment becomes "%2E" or "%2E%2E",
//   - the last '.' of a segment that ends in ".." and is followed by '/'
//     becomes "%2E" ("ckpt../x" is stored as "ckpt.%2E/x"): fileblob
//     escapes the '/' of every "../" in a key, so it would store
//     "ckpt..__0x2f__x", one file where a directory was meant, which no
//     file:// path of the name finds. A last segment ("a..", "...") has
//     no '/' after it and is kept,
//   - the bytes 0x00-0x1F, 0x7F, '%', '\\', '#' and '?' become "%XX",
//   - the '_' that starts "__0x" becomes "%5F": fileblob reads "__0xNN__"
//     in a file name as an escaped byte, which would make two keys one.
//
// So fileblob escapes nothing in an encoded key, and the encoded key is
// the object's path under the bucket's directory (the file:// reads in
// blobstore.go open it there). Every other byte is kept, so a name
// CleanKey accepts is stored under exactly that name (an artifact
// directory written by a job is read as it is) unless it holds "__0x" or
// a ".."-ending segment before a '/'; those two are stored encoded, on
// every store, and a job that writes such a name itself writes a file
// Loom does not list. Because '%' itself is always encoded, the encoding
// is injective.

// escapeByte says whether b is encoded inside a segment.
func escapeByte(b byte) bool {
	return b < 0x20 || b == 0x7f || b == '%' || b == '\\' || b == '#' || b == '?'
}

const hexDigits = "0123456789ABCDEF"

func encodeChars(sb *strings.Builder, s string) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if escapeByte(c) || c == '_' && strings.HasPrefix(s[i:], "__0x") {
			sb.WriteByte('%')
			sb.WriteByte(hexDigits[c>>4])
			sb.WriteByte(hexDigits[c&15])
			continue
		}
		sb.WriteByte(c)
	}
}

// encodeSegment encodes one segment; last says no '/' follows it.
func encodeSegment(sb *strings.Builder, seg string, last bool) {
	switch {
	case seg == "":
		sb.WriteByte('%')
	case seg == ".":
		sb.WriteString("%2E")
	case seg == "..":
		sb.WriteString("%2E%2E")
	case !last && strings.HasSuffix(seg, ".."):
		// "__0x" holds no '.', so cutting the last '.' changes no
		// other byte's encoding.
		encodeChars(sb, seg[:len(seg)-1])
		sb.WriteString("%2E")
	default:
		encodeChars(sb, seg)
	}
}

// encodeKey maps any key to the name the base store sees.
func encodeKey(key string) string {
	var sb strings.Builder
	sb.Grow(len(key) + 8)
	segs := strings.Split(key, "/")
	for i, seg := range segs {
		if i > 0 {
			sb.WriteByte('/')
		}
		encodeSegment(&sb, seg, i == len(segs)-1)
	}
	return sb.String()
}

// encodePrefix maps a bucket prefix ("" or a key ending in "/"), so that
// encodePrefix(p) + encodeKey(k) == encodeKey(p + k).
func encodePrefix(prefix string) string {
	if prefix == "" {
		return ""
	}
	var sb strings.Builder
	for _, seg := range strings.Split(strings.TrimSuffix(prefix, "/"), "/") {
		encodeSegment(&sb, seg, false)
		sb.WriteByte('/')
	}
	return sb.String()
}

// encodeListPrefix maps a list prefix. Its last segment may be cut short
// (a prefix "ck" is meant to find "ckpt/x"), so only the start of it whose
// encoding cannot depend on what follows is encoded (stablePart); when
// that is not all of it, the base is listed with less and exact says the
// caller must filter by the prefix.
func encodeListPrefix(prefix string) (enc string, exact bool) {
	segs := strings.Split(prefix, "/")
	last := segs[len(segs)-1]
	var sb strings.Builder
	for _, seg := range segs[:len(segs)-1] {
		encodeSegment(&sb, seg, false)
		sb.WriteByte('/')
	}
	stable := stablePart(last)
	encodeChars(&sb, stable)
	return sb.String(), stable == last
}

// stablePart is the longest start of part whose encoding starts the
// encoding of every segment that starts with part.
func stablePart(part string) string {
	switch {
	case part == "." || part == "..":
		// The segment may be "." or ".." itself: "%2E", "%2E%2E".
		return ""
	case strings.HasSuffix(part, ".."):
		// "a.." followed by '/' is stored "a.%2E".
		return part[:len(part)-1]
	}
	// A '_' is encoded when "__0x" starts there, which a partial "__0"
	// cannot tell yet.
	for _, p := range []string{"__0", "__", "_"} {
		if strings.HasSuffix(part, p) {
			return part[:len(part)-len(p)]
		}
	}
	return part
}

// encodeDelimiter maps a list delimiter (any string, "/" being usual).
func encodeDelimiter(d string) string {
	var sb strings.Builder
	encodeChars(&sb, d)
	return sb.String()
}

// decodeKey reverses encodeKey. A name that is not an encoding this
// package makes (a file another program wrote, "100%.txt", "a.%2E" as a
// last segment) is returned as it is, and CleanKey then refuses it where
// it matters.
func decodeKey(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	segs := strings.Split(s, "/")
	out := make([]string, len(segs))
	for i, seg := range segs {
		d, ok := decodeSegment(seg, i == len(segs)-1)
		if !ok {
			return s
		}
		out[i] = d
	}
	return strings.Join(out, "/")
}

// decodeSegment reverses encodeSegment; ok is false when seg is not what
// encodeSegment makes of any segment.
func decodeSegment(seg string, last bool) (string, bool) {
	switch seg {
	case "%":
		return "", true
	case "%2E":
		return ".", true
	case "%2E%2E":
		return "..", true
	}
	if !strings.Contains(seg, "%") {
		return seg, true
	}
	var sb strings.Builder
	for i := 0; i < len(seg); i++ {
		if seg[i] != '%' {
			sb.WriteByte(seg[i])
			continue
		}
		if i+2 >= len(seg) {
			return "", false
		}
		hi, lo := strings.IndexByte(hexDigits, seg[i+1]), strings.IndexByte(hexDigits, seg[i+2])
		if hi < 0 || lo < 0 {
			return "", false
		}
		c := byte(hi<<4 | lo)
		// The '.' ending "X.." before a '/' (".." itself is "%2E%2E").
		endDot := c == '.' && !last && i+3 == len(seg) && sb.Len() >= 2 && strings.HasSuffix(sb.String(), ".")
		if !escapeByte(c) && !endDot && !(c == '_' && strings.HasPrefix(seg[i+3:], "_0x")) {
			return "", false
		}
		sb.WriteByte(c)
		i += 2
	}
	return sb.String(), true
}

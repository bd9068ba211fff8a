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
// bytes, names over 1,024 bytes, and names whose Unicode compatibility form
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
//   - the bytes 0x00-0x1F, 0x7F, '%', '\\', '#' and '?' become "%XX",
//   - the '_' that starts "__0x" becomes "%5F": fileblob reads "__0xNN__"
//     in a file name as an escaped byte, which would make two keys one.
//
// Every other byte is kept, so a name CleanKey accepts is stored under
// exactly that name (an artifact directory written by a job is read as it
// is). Because '%' itself is always encoded, the encoding is injective.

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

func encodeSegment(sb *strings.Builder, seg string) {
	switch seg {
	case "":
		sb.WriteByte('%')
	case ".":
		sb.WriteString("%2E")
	case "..":
		sb.WriteString("%2E%2E")
	default:
		encodeChars(sb, seg)
	}
}

// encodeKey maps any key to the name the base store sees.
func encodeKey(key string) string {
	var sb strings.Builder
	sb.Grow(len(key) + 8)
	for i, seg := range strings.Split(key, "/") {
		if i > 0 {
			sb.WriteByte('/')
		}
		encodeSegment(&sb, seg)
	}
	return sb.String()
}

// encodeListPrefix maps a list prefix. Its last segment may be cut short,
// so it is encoded by characters only; when that partial segment is "." or
// ".." it could be the start of a "%2E" segment or of ".x", so the base is
// listed without it and exact says the caller must filter by the prefix.
func encodeListPrefix(prefix string) (enc string, exact bool) {
	segs := strings.Split(prefix, "/")
	last := segs[len(segs)-1]
	var sb strings.Builder
	for _, seg := range segs[:len(segs)-1] {
		encodeSegment(&sb, seg)
		sb.WriteByte('/')
	}
	if last == "." || last == ".." {
		return sb.String(), false
	}
	encodeChars(&sb, last)
	return sb.String(), true
}

// encodeDelimiter maps a list delimiter (any string, "/" being usual).
func encodeDelimiter(d string) string {
	var sb strings.Builder
	encodeChars(&sb, d)
	return sb.String()
}

// decodeKey reverses encodeKey. A name that is not an encoding this
// package makes (a file another program wrote, "100%.txt") is returned as
// it is, and CleanKey then refuses it where it matters.
func decodeKey(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	segs := strings.Split(s, "/")
	out := make([]string, len(segs))
	for i, seg := range segs {
		d, ok := decodeSegment(seg)
		if !ok {
			return s
		}
		out[i] = d
	}
	return strings.Join(out, "/")
}

func decodeSegment(seg string) (string, bool) {
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
		if c := byte(hi<<4 | lo); !escapeByte(c) && !(c == '_' && strings.HasPrefix(seg[i+3:], "_0x")) {
			return "", false
		}
		sb.WriteByte(byte(hi<<4 | lo))
		i += 2
	}
	return sb.String(), true
}

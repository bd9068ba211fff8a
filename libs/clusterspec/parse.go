package clusterspec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/errs"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// ParseJSON reads a cluster spec file: protojson, field names either as in
// the proto (snake_case) or in JSON form (lowerCamelCase), unknown fields
// refused. An error is an *errs.InvalidError whose field is the JSON path of
// the offending spot in snake_case (e.g. "compute.node_pools[0].node_count")
// and whose reason keeps protojson's message with its line and column. It
// neither normalizes nor validates.
func ParseJSON(data []byte) (*loomv1.Cluster, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errs.Invalid("cluster", "empty cluster spec")
	}
	c := &loomv1.Cluster{}
	if err := DecodeJSON(data, c, "cluster"); err != nil {
		return nil, err
	}
	return c, nil
}

// DecodeJSON unmarshals data, a JSON document, into m as ParseJSON does a
// cluster (any message: the CLI's Vertex files too): field names either
// way, unknown fields refused. An error is an *errs.InvalidError whose
// field is the JSON path of the offending spot in snake_case, or whole
// when the fault is the document's (cut short, not an object), and whose
// reason is protojson's message with its line and column; a document cut
// short, which protojson reports without a position, gets its end's.
func DecodeJSON(data []byte, m proto.Message, whole string) error {
	err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(data, m)
	if err == nil {
		return nil
	}
	msg := strings.TrimPrefix(strings.TrimPrefix(err.Error(), "proto:"), "\u00a0")
	msg = strings.TrimSpace(msg)
	if strings.Contains(msg, "unexpected EOF") && !lineColRE.MatchString(msg) {
		// protojson gives no position for a document cut short; its end
		// is where the damage shows. The field stays the whole: the
		// last key read is not what is wrong.
		line, col := endPosition(data)
		return errs.Invalid(whole, "(line %d:%d): unexpected end of the JSON: a value, or a closing } or ], is missing", line, col)
	}
	field := whole
	if off, ok := errorOffset(data, msg); ok {
		if p := jsonPathAt(data, off); p != "" {
			field = p
		}
	}
	return errs.Invalid(field, "%s", msg)
}

// endPosition is the line and column (1-based, columns in bytes, as
// protojson counts them) just past data's last byte.
func endPosition(data []byte) (line, col int) {
	line = 1 + bytes.Count(data, []byte("\n"))
	col = len(data) - (bytes.LastIndexByte(data, '\n') + 1) + 1
	return line, col
}

var lineColRE = regexp.MustCompile(`\(line (\d+):(\d+)\)`)

// errorOffset turns protojson's "(line L:C)" into a byte offset in data.
func errorOffset(data []byte, msg string) (int, bool) {
	m := lineColRE.FindStringSubmatch(msg)
	if m == nil {
		return 0, false
	}
	line, err1 := strconv.Atoi(m[1])
	col, err2 := strconv.Atoi(m[2])
	if err1 != nil || err2 != nil || line < 1 || col < 1 {
		return 0, false
	}
	off := 0
	for l := 1; l < line; l++ {
		i := bytes.IndexByte(data[off:], '\n')
		if i < 0 {
			return 0, false
		}
		off += i + 1
	}
	off += col - 1 // protojson counts columns in bytes
	if off > len(data) {
		return 0, false
	}
	return off, true
}

// jsonPathAt returns the snake_case path ("a.b[2].c") of the JSON value or key
// at byte offset off, walking the tokens up to it. On malformed JSON it returns
// the path reached before the damage.
func jsonPathAt(data []byte, off int) string {
	type frame struct {
		array     bool
		key       string
		index     int
		expectKey bool
	}
	var stack []frame
	render := func() string {
		var b strings.Builder
		for _, f := range stack {
			if f.array {
				if f.index >= 0 {
					fmt.Fprintf(&b, "[%d]", f.index)
				}
				continue
			}
			if f.key == "" {
				continue
			}
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(snakeCase(f.key))
		}
		return b.String()
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		before := dec.InputOffset()
		if before > int64(off) {
			return render()
		}
		// A value starts: an array counts it before we look at it.
		top := len(stack) - 1
		tok, err := dec.Token()
		if err != nil { // io.EOF, or the damage that protojson reported
			return render()
		}
		d, isDelim := tok.(json.Delim)
		closing := isDelim && (d == '}' || d == ']')
		isKey := top >= 0 && !stack[top].array && stack[top].expectKey && !closing
		if top >= 0 && stack[top].array && !closing {
			stack[top].index++
		}
		if isKey {
			stack[top].key, _ = tok.(string) // json.Decoder only yields strings as keys
			stack[top].expectKey = false
		}
		if dec.InputOffset() > int64(off) {
			return render()
		}
		switch {
		case isDelim && d == '{':
			stack = append(stack, frame{expectKey: true})
		case isDelim && d == '[':
			stack = append(stack, frame{array: true, index: -1})
		case closing:
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
			if n := len(stack) - 1; n >= 0 && !stack[n].array {
				stack[n].expectKey = true
			}
		case !isKey && top >= 0 && !stack[top].array:
			stack[top].expectKey = true
		}
	}
}

// snakeCase turns a JSON field name ("nodePools") into the proto name ("node_pools").
func snakeCase(s string) string {
	var b strings.Builder
	for _, r := range s {
		if unicode.IsUpper(r) {
			b.WriteByte('_')
			b.WriteRune(unicode.ToLower(r))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

package ports

import (
	"fmt"
	"strings"
)

// filter is the subset of AIP-160 the read API understands on its own:
// comparisons `key=value`, `key!=value`, `key>value`, `key<value` (values
// optionally double-quoted; > and < compare strings, which orders RFC 3339
// times) joined by AND. It has libs/trainingspec's Filter shape
// (Match(fields)), so that it is replaced by trainingspec.ParseFilter, the
// one grammar, once that lands (issue 15, gateway work).
type filter struct {
	terms []term
}

type term struct {
	key, op, value string
}

// parseFilter parses s; an unsupported form is an error naming it.
func parseFilter(s string) (filter, error) {
	var f filter
	for _, part := range splitAnd(s) {
		part = strings.TrimSpace(part)
		if part == "" {
			return f, fmt.Errorf("%q: an empty term", s)
		}
		var t term
		for _, op := range []string{"!=", ">=", "<=", "=", ">", "<"} {
			if i := strings.Index(part, op); i > 0 {
				t = term{key: strings.TrimSpace(part[:i]), op: op, value: strings.Trim(strings.TrimSpace(part[i+len(op):]), `"`)}
				break
			}
		}
		raw := strings.TrimSpace(part[strings.Index(part, t.op)+len(t.op):])
		unquoted := !strings.HasPrefix(raw, `"`)
		if t.key == "" || strings.ContainsAny(t.key, " ()\"") || (unquoted && strings.ContainsAny(raw, " ()\"")) ||
			(!unquoted && (len(raw) < 2 || !strings.HasSuffix(raw, `"`))) {
			return f, fmt.Errorf("%q: want key=value terms joined by AND (OR, NOT and parentheses are not read here)", part)
		}
		f.terms = append(f.terms, t)
	}
	return f, nil
}

// splitAnd splits s at the word AND outside quotes.
func splitAnd(s string) []string {
	var out []string
	quoted, start := false, 0
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '"':
			quoted = !quoted
		case !quoted && strings.HasPrefix(s[i:], " AND "):
			out = append(out, s[start:i])
			start = i + len(" AND ")
			i = start - 1
		}
	}
	return append(out, s[start:])
}

// Match reports whether the resource whose fields fields looks up matches.
func (f filter) Match(fields func(key string) (string, bool)) bool {
	for _, t := range f.terms {
		v, ok := fields(t.key)
		var hit bool
		switch t.op {
		case "=":
			hit = ok && v == t.value
		case "!=":
			hit = !ok || v != t.value
		case ">":
			hit = ok && v > t.value
		case "<":
			hit = ok && v < t.value
		case ">=":
			hit = ok && v >= t.value
		case "<=":
			hit = ok && v <= t.value
		}
		if !hit {
			return false
		}
	}
	return true
}

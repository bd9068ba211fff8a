// Package hostlist reads and writes Slurm hostlist expressions such as
// "gpu-[0001-0016,0020],login-001": a comma-separated list of names in which a
// bracket group "[a-b,c]" stands for each of its numbers, zero-padded to the
// width of the range's first number, as Slurm's own hostlist code does.
package hostlist

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// MaxNames bounds how many names Expand produces, so that a short hostile
// expression ("n[0-999999999999]") cannot exhaust memory.
const MaxNames = 1 << 20

// maxDigits keeps a bracket number inside int64 (and Slurm's own limits are far lower).
const maxDigits = 18

// ErrTooMany is what the *SyntaxError of an expression that expands to
// more names than allowed unwraps to (errors.Is).
var ErrTooMany = errors.New("too many names")

// SyntaxError is a malformed hostlist expression. Pos is the 0-based byte
// offset in Expr where the problem was found.
type SyntaxError struct {
	Expr string
	Pos  int
	Msg  string
	// tooMany marks the expression that expands past its limit.
	tooMany bool
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("hostlist %q: %s at position %d", e.Expr, e.Msg, e.Pos)
}

// Unwrap is ErrTooMany for an expression past its limit, else nil.
func (e *SyntaxError) Unwrap() error {
	if e.tooMany {
		return ErrTooMany
	}
	return nil
}

func tooMany(expr string, pos, max int) *SyntaxError {
	return &SyntaxError{Expr: expr, Pos: pos, Msg: fmt.Sprintf("expands to more than %d names", max), tooMany: true}
}

// Expand returns every name in the expression, in the order written; several
// bracket groups in one name multiply out left to right ("r[1-2]n[1-2]" →
// r1n1 r1n2 r2n1 r2n2). Duplicates are kept. "" expands to no names. Names may
// hold letters, digits, '-', '_' and '.'; anything else, an empty name, an
// unbalanced or nested bracket, a bad range or more than MaxNames names is a
// *SyntaxError naming the position.
func Expand(expr string) ([]string, error) { return ExpandMax(expr, MaxNames) }

// ExpandMax is Expand producing at most max names (at most MaxNames):
// past that it stops, before building them, with a *SyntaxError that is
// ErrTooMany. A caller with a budget (names in a request, duplicates
// included) passes what is left of it, so that a short expression cannot
// make it build millions of names it will refuse.
func ExpandMax(expr string, max int) ([]string, error) {
	max = min(max, MaxNames)
	if expr == "" {
		return nil, nil
	}
	var out []string
	start := 0
	depth := 0
	for i := 0; i <= len(expr); i++ {
		if i < len(expr) {
			switch expr[i] {
			case '[':
				depth++
				continue
			case ']':
				depth--
				continue
			case ',':
				if depth > 0 {
					continue
				}
			default:
				continue
			}
		}
		names, err := expandName(expr, start, i, len(out), max)
		if err != nil {
			return nil, err
		}
		out = append(out, names...)
		start = i + 1
	}
	return out, nil
}

// piece is a literal run of a name or one bracket group's formatted numbers.
type piece struct {
	literal string
	choices []string // nil for a literal piece
}

// expandName expands expr[from:to], one comma-free (outside brackets) name.
// have is how many names were produced before, to enforce max.
func expandName(expr string, from, to, have, max int) ([]string, error) {
	if from == to {
		return nil, &SyntaxError{Expr: expr, Pos: from, Msg: "empty name"}
	}
	var pieces []piece
	total := 1
	i := from
	for i < to {
		c := expr[i]
		switch {
		case c == '[':
			end := strings.IndexByte(expr[i+1:to], ']')
			if end < 0 {
				return nil, &SyntaxError{Expr: expr, Pos: i, Msg: "unclosed '['"}
			}
			end += i + 1
			if j := strings.IndexByte(expr[i+1:end], '['); j >= 0 {
				return nil, &SyntaxError{Expr: expr, Pos: i + 1 + j, Msg: "nested '['"}
			}
			choices, err := expandGroup(expr, i+1, end, have, max)
			if err != nil {
				return nil, err
			}
			if total*len(choices) > max-have {
				return nil, tooMany(expr, i, max)
			}
			total *= len(choices)
			pieces = append(pieces, piece{choices: choices})
			i = end + 1
		case c == ']':
			return nil, &SyntaxError{Expr: expr, Pos: i, Msg: "unexpected ']'"}
		case isNameByte(c):
			j := i
			for j < to && isNameByte(expr[j]) {
				j++
			}
			pieces = append(pieces, piece{literal: expr[i:j]})
			i = j
		default:
			return nil, &SyntaxError{Expr: expr, Pos: i, Msg: fmt.Sprintf("invalid character %q", c)}
		}
	}
	if total > max-have {
		return nil, tooMany(expr, from, max) // a name without brackets counts too
	}
	names := []string{""}
	for _, p := range pieces {
		if p.choices == nil {
			for k := range names {
				names[k] += p.literal
			}
			continue
		}
		next := make([]string, 0, len(names)*len(p.choices))
		for _, n := range names {
			for _, ch := range p.choices {
				next = append(next, n+ch)
			}
		}
		names = next
	}
	return names, nil
}

// expandGroup expands the inside of a bracket group, expr[from:to]:
// comma-separated numbers and lo-hi ranges.
func expandGroup(expr string, from, to, have, max int) ([]string, error) {
	if from == to {
		return nil, &SyntaxError{Expr: expr, Pos: from, Msg: "empty brackets"}
	}
	var out []string
	start := from
	for i := from; i <= to; i++ {
		if i < to && expr[i] != ',' {
			continue
		}
		item := expr[start:i]
		if item == "" {
			return nil, &SyntaxError{Expr: expr, Pos: start, Msg: "empty range"}
		}
		lo, hi, found := strings.Cut(item, "-")
		loV, err := parseNumber(expr, start, lo)
		if err != nil {
			return nil, err
		}
		hiV := loV
		if found {
			if hiV, err = parseNumber(expr, start+len(lo)+1, hi); err != nil {
				return nil, err
			}
			if hiV < loV {
				return nil, &SyntaxError{Expr: expr, Pos: start, Msg: fmt.Sprintf("range %s is backwards", item)}
			}
		}
		if hiV-loV >= int64(max-have-len(out)) {
			return nil, tooMany(expr, start, max)
		}
		for v := loV; v <= hiV; v++ {
			out = append(out, pad(v, len(lo)))
		}
		start = i + 1
	}
	return out, nil
}

// parseNumber parses s, found at expr[pos:], as a non-negative decimal.
func parseNumber(expr string, pos int, s string) (int64, error) {
	if s == "" {
		return 0, &SyntaxError{Expr: expr, Pos: pos, Msg: "missing number"}
	}
	for k := 0; k < len(s); k++ {
		if s[k] < '0' || s[k] > '9' {
			return 0, &SyntaxError{Expr: expr, Pos: pos + k, Msg: fmt.Sprintf("invalid character %q in range", s[k])}
		}
	}
	if len(s) > maxDigits {
		return 0, &SyntaxError{Expr: expr, Pos: pos, Msg: "number too long"}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, &SyntaxError{Expr: expr, Pos: pos, Msg: err.Error()}
	}
	return v, nil
}

func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
}

// pad formats v with at least width digits, as Slurm does ("%0*d").
func pad(v int64, width int) string {
	s := strconv.FormatInt(v, 10)
	if len(s) < width {
		s = strings.Repeat("0", width-len(s)) + s
	}
	return s
}

// numbered is a name's trailing number: its value and its digits as written.
type numbered struct {
	value  int64
	digits string
}

// Compress returns the shortest-form hostlist expression for names: duplicates
// dropped, names grouped by the text before their trailing number, numbers
// sorted and consecutive ones joined into ranges ("gpu-[0001-0004,0007]").
// Zero padding is kept: a group's numbers share one width, and a name such as
// "gpu-10000" joins the width-4 group because Slurm prints wider numbers
// unpadded. Groups appear sorted by prefix, then width; names without a
// trailing number appear as they are. Names should be hostname-like
// (letters, digits, '-', '_', '.'); a name holding ',', '[' or ']' cannot be
// expressed and will not expand back to itself.
func Compress(names []string) string {
	if len(names) == 0 {
		return ""
	}
	// prefix → digit strings, deduplicated.
	byPrefix := map[string]map[string]numbered{}
	plain := map[string]bool{}
	for _, n := range names {
		prefix, digits := splitNumber(n)
		if digits == "" || len(digits) > maxDigits {
			plain[n] = true
			continue
		}
		v, _ := strconv.ParseInt(digits, 10, 64)
		m := byPrefix[prefix]
		if m == nil {
			m = map[string]numbered{}
			byPrefix[prefix] = m
		}
		m[digits] = numbered{v, digits}
	}
	type item struct {
		prefix string
		width  int
		text   string
	}
	var items []item
	for prefix, m := range byPrefix {
		for width, nums := range groupByWidth(m) {
			items = append(items, item{prefix, width, prefix + brackets(nums, width)})
		}
	}
	for n := range plain {
		items = append(items, item{n, -1, n})
	}
	sort.Slice(items, func(i, j int) bool {
		if items[i].prefix != items[j].prefix {
			return items[i].prefix < items[j].prefix
		}
		return items[i].width < items[j].width
	})
	parts := make([]string, len(items))
	for i, it := range items {
		parts[i] = it.text
	}
	return strings.Join(parts, ",")
}

// splitNumber splits a name into the text before its trailing digits and those digits.
func splitNumber(name string) (prefix, digits string) {
	i := len(name)
	for i > 0 && name[i-1] >= '0' && name[i-1] <= '9' {
		i--
	}
	return name[:i], name[i:]
}

// groupByWidth assigns each number of one prefix to a padding width. A number
// written with a leading zero fixes its width; one without (which pads to
// itself at any width up to its length) joins the widest padded group it fits,
// else width 1.
func groupByWidth(m map[string]numbered) map[int][]int64 {
	padded := map[int]bool{}
	for d := range m {
		if hasLeadingZero(d) {
			padded[len(d)] = true
		}
	}
	widths := make([]int, 0, len(padded))
	for w := range padded {
		widths = append(widths, w)
	}
	sort.Sort(sort.Reverse(sort.IntSlice(widths)))
	groups := map[int][]int64{}
	for d, n := range m {
		w := 1
		if hasLeadingZero(d) {
			w = len(d)
		} else {
			for _, pw := range widths {
				if pw <= len(d) {
					w = pw
					break
				}
			}
		}
		groups[w] = append(groups[w], n.value)
	}
	for _, vs := range groups {
		sort.Slice(vs, func(i, j int) bool { return vs[i] < vs[j] })
	}
	return groups
}

func hasLeadingZero(d string) bool { return len(d) > 1 && d[0] == '0' }

// brackets formats sorted numbers at width: "0001" alone, or "[0001-0004,0007]".
func brackets(vs []int64, width int) string {
	if len(vs) == 1 {
		return pad(vs[0], width)
	}
	var b strings.Builder
	b.WriteByte('[')
	for i := 0; i < len(vs); {
		j := i
		for j+1 < len(vs) && vs[j+1] == vs[j]+1 {
			j++
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(pad(vs[i], width))
		if j > i {
			b.WriteByte('-')
			b.WriteString(pad(vs[j], width))
		}
		i = j + 1
	}
	b.WriteByte(']')
	return b.String()
}

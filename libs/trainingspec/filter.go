package trainingspec

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/loom-ml/loom/libs/errs"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
)

// Filter bounds: a filter is parsed per List call, so its cost is bounded
// whatever a caller sends.
const (
	// MaxFilterLen bounds a filter's text in bytes.
	MaxFilterLen = 4096
	// MaxFilterDepth bounds nesting (parentheses and NOT).
	MaxFilterDepth = 32
	// MaxFilterTerms bounds the comparisons of one filter.
	MaxFilterTerms = 128
)

// Filter is a parsed AIP-160 list filter, the subset Vertex's List calls
// take: comparisons KEY OP VALUE with OP one of = != < <= > >= and ':'
// (has: "labels.k:*" is true when the key is present), joined by AND, OR
// (which binds tighter, as AIP-160 says), NOT or '-', and parentheses;
// juxtaposed terms are ANDed. Keys are dotted names ("state",
// "display_name", "labels.team", "create_time"); a camelCase first part is
// taken in snake_case ("displayName" is "display_name"; a label's key is
// kept as written). Values are bare words or double-quoted strings (\" and
// \\ escapes). A value ending in '*' with '=', '!=' or ':' matches by
// prefix (Vertex's `display_name:"my_job_*"`); ':' with '*' alone is
// presence. The zero Filter matches everything.
//
// ParseFilter takes any key; ParseFilterFor also checks the keys, their
// operators and values against a List's FilterKeys, so that a typo is
// refused rather than matching nothing.
type Filter struct {
	root *node
	text string
}

// String is the filter as it was given.
func (f Filter) String() string { return f.text }

// Empty reports whether f matches everything (an empty filter).
func (f Filter) Empty() bool { return f.root == nil }

type nodeKind uint8

const (
	nodeAnd nodeKind = iota
	nodeOr
	nodeNot
	nodeCmp
)

type node struct {
	kind     nodeKind
	kids     []*node
	key, op  string
	value    string
	wildcard bool
	// pos is where the comparison's key is in the filter (0-based), for
	// ParseFilterFor's refusals.
	pos int
}

// ParseFilter parses s (AIP-160, the subset Filter describes). An empty or
// blank s is the zero Filter. Errors are *errs.InvalidError naming the
// field "filter", the position and what was expected.
func ParseFilter(s string) (Filter, error) {
	if len(s) > MaxFilterLen {
		return Filter{}, errs.Invalid("filter", "%d bytes, more than the limit of %d", len(s), MaxFilterLen)
	}
	p := &filterParser{src: s}
	if err := p.lex(); err != nil {
		return Filter{}, err
	}
	if len(p.toks) == 0 {
		return Filter{text: s}, nil
	}
	root, err := p.expr(0)
	if err != nil {
		return Filter{}, err
	}
	if p.pos < len(p.toks) {
		return Filter{}, p.errAt(p.toks[p.pos], "unexpected %s", p.toks[p.pos].describe())
	}
	return Filter{root: root, text: s}, nil
}

// Match reports whether the resource whose fields answer fields (the value
// of a key as text, and whether it has one) passes f. A comparison of a
// key the resource does not have is false (so NOT of it is true). Values
// compare as times when both are RFC 3339, as numbers when both are
// numbers, else as strings.
func (f Filter) Match(fields func(key string) (string, bool)) bool {
	if f.root == nil {
		return true
	}
	return f.root.match(fields)
}

func (n *node) match(fields func(string) (string, bool)) bool {
	switch n.kind {
	case nodeAnd:
		for _, k := range n.kids {
			if !k.match(fields) {
				return false
			}
		}
		return true
	case nodeOr:
		for _, k := range n.kids {
			if k.match(fields) {
				return true
			}
		}
		return false
	case nodeNot:
		return !n.kids[0].match(fields)
	}
	got, ok := fields(n.key)
	if !ok {
		return false
	}
	if n.wildcard && (n.op == "=" || n.op == "!=" || n.op == ":") {
		return strings.HasPrefix(got, n.value) == (n.op != "!=")
	}
	if n.op == ":" {
		return n.value == "*" || got == n.value
	}
	c := compare(got, n.value)
	switch n.op {
	case "=":
		return c == 0
	case "!=":
		return c != 0
	case "<":
		return c < 0
	case "<=":
		return c <= 0
	case ">":
		return c > 0
	case ">=":
		return c >= 0
	}
	return false
}

// compare orders a and b as times, numbers or strings (-1, 0, 1).
func compare(a, b string) int {
	if ta, err := time.Parse(time.RFC3339Nano, a); err == nil {
		if tb, err := time.Parse(time.RFC3339Nano, b); err == nil {
			return ta.Compare(tb)
		}
	}
	if fa, err := strconv.ParseFloat(a, 64); err == nil {
		if fb, err := strconv.ParseFloat(b, 64); err == nil {
			switch {
			case fa < fb:
				return -1
			case fa > fb:
				return 1
			}
			return 0
		}
	}
	return strings.Compare(a, b)
}

type tokKind uint8

const (
	tokWord tokKind = iota
	tokString
	tokOp
	tokLParen
	tokRParen
	tokMinus
)

type token struct {
	kind tokKind
	text string
	pos  int
}

func (t token) describe() string {
	switch t.kind {
	case tokLParen:
		return "'('"
	case tokRParen:
		return "')'"
	case tokString:
		return "string " + clip(t.text)
	}
	return clip(t.text)
}

type filterParser struct {
	src   string
	toks  []token
	pos   int
	terms int
}

func (p *filterParser) errAt(t token, format string, args ...any) error {
	return errs.Invalid("filter", "at %d: %s", t.pos+1, fmt.Sprintf(format, args...))
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// lex splits the source into tokens.
func (p *filterParser) lex() error {
	s := p.src
	for i := 0; i < len(s); {
		c := s[i]
		if n := len(p.toks); n > 0 && p.toks[n-1].kind == tokOp && c != '"' && c != '(' && c != ')' && !isSpace(c) {
			// A bare value runs to the next space or parenthesis, so that
			// create_time>2026-01-02T00:00:00Z and x=-1 read as one value.
			j := i
			for j < len(s) && !isSpace(s[j]) && s[j] != '(' && s[j] != ')' {
				j++
			}
			p.toks = append(p.toks, token{tokWord, s[i:j], i})
			i = j
			continue
		}
		switch {
		case isSpace(c):
			i++
		case c == '(':
			p.toks = append(p.toks, token{tokLParen, "(", i})
			i++
		case c == ')':
			p.toks = append(p.toks, token{tokRParen, ")", i})
			i++
		case c == '"':
			var b strings.Builder
			j := i + 1
			for ; j < len(s) && s[j] != '"'; j++ {
				if s[j] == '\\' && j+1 < len(s) {
					j++
				}
				b.WriteByte(s[j])
			}
			if j >= len(s) {
				return errs.Invalid("filter", "at %d: a string is not closed (missing '\"')", i+1)
			}
			p.toks = append(p.toks, token{tokString, b.String(), i})
			i = j + 1
		case c == '=' || c == ':':
			p.toks = append(p.toks, token{tokOp, string(c), i})
			i++
		case c == '!' || c == '<' || c == '>':
			if i+1 < len(s) && s[i+1] == '=' {
				p.toks = append(p.toks, token{tokOp, s[i : i+2], i})
				i += 2
				continue
			}
			if c == '!' {
				return errs.Invalid("filter", "at %d: '!' must be '!=' (use NOT to negate)", i+1)
			}
			p.toks = append(p.toks, token{tokOp, string(c), i})
			i++
		case c == '-' && (i == 0 || isSpace(s[i-1]) || s[i-1] == '('):
			p.toks = append(p.toks, token{tokMinus, "-", i})
			i++
		default:
			j := i
			for j < len(s) && !isSpace(s[j]) && !strings.ContainsRune("()\"=:!<>", rune(s[j])) {
				j++
			}
			p.toks = append(p.toks, token{tokWord, s[i:j], i})
			i = j
		}
	}
	return nil
}

func (p *filterParser) peek() (token, bool) {
	if p.pos < len(p.toks) {
		return p.toks[p.pos], true
	}
	return token{}, false
}

func (p *filterParser) end() token { return token{pos: len(p.src)} }

// expr := and { AND and } ; and := or { OR or } — AIP-160 gives OR the
// higher precedence: "a AND b OR c" is "a AND (b OR c)". Juxtaposed
// terms are ANDed.
func (p *filterParser) expr(depth int) (*node, error) {
	if depth > MaxFilterDepth {
		t, _ := p.peek()
		return nil, p.errAt(t, "nested more than %d deep", MaxFilterDepth)
	}
	first, err := p.orExpr(depth)
	if err != nil {
		return nil, err
	}
	and := &node{kind: nodeAnd, kids: []*node{first}}
	for {
		t, ok := p.peek()
		if !ok || t.kind == tokRParen {
			break
		}
		if t.kind == tokWord && t.text == "AND" {
			p.pos++
		}
		n, err := p.orExpr(depth)
		if err != nil {
			return nil, err
		}
		and.kids = append(and.kids, n)
	}
	if len(and.kids) == 1 {
		return first, nil
	}
	return and, nil
}

func (p *filterParser) orExpr(depth int) (*node, error) {
	first, err := p.unary(depth)
	if err != nil {
		return nil, err
	}
	or := &node{kind: nodeOr, kids: []*node{first}}
	for {
		t, ok := p.peek()
		if !ok || t.kind != tokWord || t.text != "OR" {
			break
		}
		p.pos++
		n, err := p.unary(depth)
		if err != nil {
			return nil, err
		}
		or.kids = append(or.kids, n)
	}
	if len(or.kids) == 1 {
		return first, nil
	}
	return or, nil
}

func (p *filterParser) unary(depth int) (*node, error) {
	if depth > MaxFilterDepth {
		t, _ := p.peek()
		return nil, p.errAt(t, "nested more than %d deep", MaxFilterDepth)
	}
	t, ok := p.peek()
	if !ok {
		return nil, p.errAt(p.end(), "a comparison (KEY = VALUE) is missing at the end")
	}
	switch {
	case t.kind == tokMinus || (t.kind == tokWord && t.text == "NOT"):
		p.pos++
		n, err := p.unary(depth + 1)
		if err != nil {
			return nil, err
		}
		return &node{kind: nodeNot, kids: []*node{n}}, nil
	case t.kind == tokLParen:
		p.pos++
		n, err := p.expr(depth + 1)
		if err != nil {
			return nil, err
		}
		c, ok := p.peek()
		if !ok || c.kind != tokRParen {
			if !ok {
				c = p.end()
			}
			return nil, p.errAt(c, "')' expected to close the '(' at %d", t.pos+1)
		}
		p.pos++
		return n, nil
	}
	return p.comparison()
}

func (p *filterParser) comparison() (*node, error) {
	if p.terms++; p.terms > MaxFilterTerms {
		t, _ := p.peek()
		return nil, p.errAt(t, "more than %d comparisons", MaxFilterTerms)
	}
	k, _ := p.peek()
	if k.kind != tokWord || !validKey(k.text) {
		return nil, p.errAt(k, "a key (e.g. state, display_name, labels.team, create_time) expected, got %s", k.describe())
	}
	p.pos++
	op, ok := p.peek()
	if !ok || op.kind != tokOp {
		if !ok {
			op = p.end()
		}
		return nil, p.errAt(op, "an operator (=, !=, <, <=, >, >= or :) expected after %s", clip(k.text))
	}
	p.pos++
	val, ok := p.peek()
	if !ok || (val.kind != tokWord && val.kind != tokString) {
		if !ok {
			val = p.end()
		}
		return nil, p.errAt(val, "a value expected after %s %s", k.text, op.text)
	}
	p.pos++
	n := &node{kind: nodeCmp, key: snakeKey(k.text), op: op.text, value: val.text, pos: k.pos}
	// "KEY:*" alone is presence, not a prefix of nothing.
	if strings.HasSuffix(n.value, "*") && !(n.op == ":" && n.value == "*") {
		n.wildcard = true
		n.value = strings.TrimSuffix(n.value, "*")
	}
	return n, nil
}

// snakeKey spells a key's first part in snake_case ("displayName" →
// "display_name"), as REST callers writing camelCase JSON may write it;
// what follows it (a label's key) is kept as it is.
func snakeKey(k string) string {
	first, rest, dotted := strings.Cut(k, ".")
	var b strings.Builder
	for i := 0; i < len(first); i++ {
		c := first[i]
		if c >= 'A' && c <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			c += 'a' - 'A'
		}
		b.WriteByte(c)
	}
	if dotted {
		return b.String() + "." + rest
	}
	return b.String()
}

// validKey accepts dotted names whose parts are letters, digits, '_' and
// '-' (label keys may hold '-' and start with a digit), at most 256 bytes,
// other than the operators' words.
func validKey(s string) bool {
	if s == "" || s == "AND" || s == "OR" || s == "NOT" || len(s) > 256 {
		return false
	}
	for _, part := range strings.Split(s, ".") {
		if part == "" {
			return false
		}
		for i := 0; i < len(part); i++ {
			c := part[i]
			if !(c == '_' || c == '-' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
				return false
			}
		}
	}
	return true
}

// FilterKind is what a filter key's values are, and so which operators and
// values ParseFilterFor takes for it.
type FilterKind uint8

const (
	// FilterText is free text: =, != and ':' (a trailing '*' matches by
	// prefix).
	FilterText FilterKind = iota
	// FilterEnum is one of the key's Values: = and != (a trailing '*'
	// matches by prefix, and must be a prefix of one of them).
	FilterEnum
	// FilterTime is an RFC 3339 time: =, !=, <, <=, > and >=.
	FilterTime
	// FilterMap is a map, named "KEY.SUBKEY" (labels.team: any subkey), its
	// values text: =, != and ':' ("labels.team:*" is the subkey's presence).
	FilterMap
)

// FilterKey is one key a List's filter may name.
type FilterKey struct {
	// Name is the key in snake_case ("display_name"; a FilterMap's name
	// without its subkey: "labels").
	Name string
	Kind FilterKind
	// Values are a FilterEnum's values ("JOB_STATE_RUNNING", ...).
	Values []string
	// Aliases are other spellings a filter may use for Name (a REST
	// caller's camelCase "versionId"); a refusal lists Name only.
	Aliases []string
}

// FilterKeys are the keys one List's filter may name, in the order a
// refusal lists them.
type FilterKeys []FilterKey

// String lists the keys as a refusal names them: "state, display_name,
// labels.KEY, create_time".
func (ks FilterKeys) String() string {
	names := make([]string, len(ks))
	for i, k := range ks {
		names[i] = k.Name
		if k.Kind == FilterMap {
			names[i] += ".KEY"
		}
	}
	return strings.Join(names, ", ")
}

func (ks FilterKeys) find(name string) (FilterKey, bool) {
	for _, k := range ks {
		if k.Name == name || slices.Contains(k.Aliases, name) {
			return k, true
		}
	}
	return FilterKey{}, false
}

// ParseFilterFor parses s as ParseFilter does, then checks every
// comparison against keys: the key is one of them, its operator one its
// kind takes, and its value one it can hold (an enum's value, an RFC 3339
// time). A filter that names an unknown field ("lables.team"), an unknown
// state ("JOB_STATE_SUCEEDED") or an unparsable time would match nothing
// and read as "no such resources"; Vertex refuses it, and so does this:
// an *errs.InvalidError on "filter" naming the comparison's position, what
// is wrong and what is allowed.
func ParseFilterFor(s string, keys FilterKeys) (Filter, error) {
	f, err := ParseFilter(s)
	if err != nil {
		return Filter{}, err
	}
	if err := keys.check(f.root); err != nil {
		return Filter{}, err
	}
	return f, nil
}

// check judges n's comparisons against ks, the first refused first.
func (ks FilterKeys) check(n *node) error {
	if n == nil {
		return nil
	}
	if n.kind != nodeCmp {
		for _, k := range n.kids {
			if err := ks.check(k); err != nil {
				return err
			}
		}
		return nil
	}
	refuse := func(format string, args ...any) error {
		return errs.Invalid("filter", "at %d: %s", n.pos+1, fmt.Sprintf(format, args...))
	}
	name, sub, dotted := strings.Cut(n.key, ".")
	k, ok := ks.find(name)
	switch {
	case !ok || (dotted && k.Kind != FilterMap):
		return refuse("unknown field %s: filter on %s", clip(n.key), ks)
	case k.Kind == FilterMap && (!dotted || sub == ""):
		return refuse("%s needs a key: %s.KEY=VALUE, or %s.KEY:* for the key's presence", name, name, name)
	}
	if ops := kindOps[k.Kind]; !slices.Contains(ops, n.op) {
		return refuse("%s takes %s, not %s", name, strings.Join(ops, ", "), n.op)
	}
	switch k.Kind {
	case FilterEnum:
		known := slices.ContainsFunc(k.Values, func(v string) bool {
			return v == n.value || (n.wildcard && strings.HasPrefix(v, n.value))
		})
		if !known {
			return refuse("%s is not a %s: one of %s", clip(n.written()), name, strings.Join(k.Values, ", "))
		}
	case FilterTime:
		if _, err := time.Parse(time.RFC3339Nano, n.value); err != nil || n.wildcard {
			return refuse("%s %s is not an RFC 3339 time (e.g. %s>\"2026-01-02T15:04:05Z\")", name, clip(n.written()), name)
		}
	}
	return nil
}

// kindOps are the operators each kind takes (Vertex's).
var kindOps = map[FilterKind][]string{
	FilterText: {"=", "!=", ":"},
	FilterEnum: {"=", "!="},
	FilterTime: {"=", "!=", "<", "<=", ">", ">="},
	FilterMap:  {"=", "!=", ":"},
}

// written is a comparison's value as the filter wrote it (its '*' too).
func (n *node) written() string {
	if n.wildcard {
		return n.value + "*"
	}
	return n.value
}

// enumNames are an enum's value names but its zero (…_UNSPECIFIED, which
// no resource has), in number order.
func enumNames(names map[int32]string) []string {
	out := make([]string, 0, len(names))
	for _, n := range slices.Sorted(maps.Keys(names)) {
		if n != 0 {
			out = append(out, names[n])
		}
	}
	return out
}

// Filter keys of the training service's List calls, Vertex's: state (the
// resource's enum), display_name, labels.KEY and create_time.
var (
	// JobFilterKeys are what ListCustomJobs and
	// ListHyperparameterTuningJobs filter on; state is a JobState.
	JobFilterKeys = trainingFilterKeys(trainingv1.JobState_name)
	// PipelineFilterKeys are what ListTrainingPipelines filters on; state
	// is a PipelineState.
	PipelineFilterKeys = trainingFilterKeys(trainingv1.PipelineState_name)
)

func trainingFilterKeys(states map[int32]string) FilterKeys {
	return FilterKeys{
		{Name: "state", Kind: FilterEnum, Values: enumNames(states)},
		{Name: "display_name", Kind: FilterText},
		{Name: "labels", Kind: FilterMap},
		{Name: "create_time", Kind: FilterTime},
	}
}

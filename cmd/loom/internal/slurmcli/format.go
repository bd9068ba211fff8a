package slurmcli

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// fmtField is one "%[.][width]X" of a Slurm format string.
type fmtField struct {
	spec  string // the field letter, or a long name (-O / --Format)
	width int    // 0: as wide as the value
	right bool   // '.': right-justified
	// suffix is the literal text up to the next field.
	suffix string
	// token is the field as written, printed literally when it is invalid.
	token string
}

// format is a parsed -o/--format string: a literal prefix and the fields.
type format struct {
	prefix string
	fields []fmtField
}

// parseFormat parses a Slurm "%" format string as squeue, sinfo and sprio
// do: the text before the first '%' is a prefix; each field is '%', an
// optional '.' (right-justify), an optional width and the field letter;
// what follows up to the next '%' is printed after the field. (A '-'
// before the width is taken as an explicit left-justify.)
func parseFormat(s string) format {
	var f format
	tokens := strings.Split(s, "%")
	if len(tokens) > 0 {
		f.prefix = tokens[0]
	}
	for _, tok := range tokens[1:] {
		if tok == "" {
			continue // strtok skips empty tokens ("%%")
		}
		fl := fmtField{token: "%" + tok}
		i := 0
		switch tok[0] {
		case '.':
			fl.right = true
			i++
		case '-':
			i++
		}
		w, n := leadingWidth(tok[i:])
		fl.width = w
		i += n
		if i < len(tok) {
			fl.spec = tok[i : i+1]
			fl.suffix = tok[i+1:]
		}
		f.fields = append(f.fields, fl)
	}
	return f
}

// maxFieldWidth bounds a field's width in a format (-o, -O): each row pads
// every field to its width, so "JobID:100000000" would make every row
// 100 MB. Wider asks get this width.
const maxFieldWidth = 1000

// leadingWidth reads the decimal width at the start of s, at most
// maxFieldWidth, and returns it with how many bytes it took.
func leadingWidth(s string) (width, n int) {
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		width = min(width*10+int(s[n]-'0'), maxFieldWidth)
		n++
	}
	return width, n
}

// parseLongFormat parses a -O/--Format list, "Name[:[.]width][suffix],...":
// default width 20, left-justified, at most maxFieldWidth; names map to
// field letters with longs.
func parseLongFormat(s string, longs map[string]string) (format, []string) {
	var f format
	var unknown []string
	for _, item := range strings.Split(s, ",") {
		if item == "" {
			continue
		}
		name, rest, hasWidth := strings.Cut(item, ":")
		fl := fmtField{width: 20, token: item}
		if hasWidth {
			if strings.HasPrefix(rest, ".") {
				fl.right = true
				rest = rest[1:]
			}
			w, j := leadingWidth(rest)
			fl.width = w
			fl.suffix = rest[j:]
		}
		spec, ok := longs[strings.ToLower(name)]
		if !ok {
			unknown = append(unknown, name)
			continue
		}
		fl.spec = spec
		f.fields = append(f.fields, fl)
	}
	return f, unknown
}

// invalidSpecs returns the fields whose letters known does not have.
func (f format) invalidSpecs(known func(string) bool) []string {
	var out []string
	for _, fl := range f.fields {
		if !known(fl.spec) {
			out = append(out, fl.spec)
		}
	}
	return out
}

// cell is one field's value and whether Slurm cuts it to the field's
// width (cut_output).
type cell struct {
	text string
	cut  bool
}

// render writes one line: for each field its value (value returns it and
// whether the field is known) laid out as Slurm's _print_str does, then
// the field's suffix.
func (f format) render(b *strings.Builder, value func(spec string) (cell, bool)) {
	b.WriteString(f.prefix)
	for _, fl := range f.fields {
		c, ok := value(fl.spec)
		if !ok {
			b.WriteString(fl.token)
			continue
		}
		writeCell(b, c.text, fl.width, fl.right, c.cut)
		b.WriteString(fl.suffix)
	}
	b.WriteByte('\n')
}

// writeCell lays out one value as Slurm's _print_str: right-justified
// values are padded on the left and, when cut, truncated to the width;
// left-justified values are always truncated to the width, then padded.
func writeCell(b *strings.Builder, s string, width int, right, cut bool) {
	if width <= 0 {
		b.WriteString(s)
		return
	}
	n := utf8.RuneCountInString(s)
	if right {
		if n < width {
			b.WriteString(strings.Repeat(" ", width-n))
			b.WriteString(s)
			return
		}
		if cut {
			b.WriteString(firstRunes(s, width))
		} else {
			b.WriteString(s)
		}
		return
	}
	if n > width {
		b.WriteString(firstRunes(s, width))
		return
	}
	b.WriteString(s)
	b.WriteString(strings.Repeat(" ", width-n))
}

func firstRunes(s string, n int) string {
	i := 0
	for j := range s {
		if i == n {
			return s[:j]
		}
		i++
	}
	return s
}

// fieldTable renders rows of T with a format: fields maps each letter to
// its header and value.
type fieldTable[T any] struct {
	fields map[string]fieldDef[T]
}

// fieldDef is one field letter: its header and its value for a row.
type fieldDef[T any] struct {
	header string
	// nocut marks fields Slurm prints whole even past their width
	// (times, node lists).
	nocut bool
	value func(T) string
}

func (t fieldTable[T]) known(spec string) bool {
	_, ok := t.fields[spec]
	return ok
}

func (t fieldTable[T]) header(b *strings.Builder, f format) {
	f.render(b, func(spec string) (cell, bool) {
		d, ok := t.fields[spec]
		return cell{text: d.header, cut: true}, ok
	})
}

// write writes rows in format f, after the header unless noHeader: what
// squeue, squeue -s, sinfo and sprio print.
func (t fieldTable[T]) write(b *strings.Builder, f format, rows []T, noHeader bool) {
	if !noHeader {
		t.header(b, f)
	}
	for _, r := range rows {
		t.row(b, f, r)
	}
}

func (t fieldTable[T]) row(b *strings.Builder, f format, row T) {
	f.render(b, func(spec string) (cell, bool) {
		d, ok := t.fields[spec]
		if !ok {
			return cell{}, false
		}
		return cell{text: d.value(row), cut: !d.nocut}, true
	})
}

// checkFormat reports the format's unknown letters on stderr as Slurm does
// (it goes on, printing them literally).
func (c *cmd) checkFormat(f format, known func(string) bool, what string) {
	for _, s := range f.invalidSpecs(known) {
		if s == "" {
			s = " "
		}
		fmt.Fprintf(c.stderr, "%s: error: Invalid %s format specification: %s\n", c.name, what, s)
	}
}

package slurmcli

import (
	"fmt"
	"sort"
	"strings"
)

// argKind says whether an option takes a value, as getopt_long's has_arg.
type argKind int

const (
	noArg       argKind = iota // --flag
	requiredArg                // --opt=value, --opt value, -o value, -ovalue
	optionalArg                // --opt or --opt=value; -o or -ovalue
)

// optDef is one option of a command: its long names (the first is the
// canonical one), its short letter (0 if none) and whether it takes a value.
type optDef struct {
	long  []string
	short byte
	arg   argKind
}

// key is the name the command dispatches on: the first long name, or the
// short letter when the option has no long name.
func (d *optDef) key() string {
	if len(d.long) > 0 {
		return d.long[0]
	}
	return string(d.short)
}

// parsedOpt is one option as found on a command line or in a directive.
type parsedOpt struct {
	key      string // optDef.key()
	written  string // as the user wrote its name: "--time", "-t"
	value    string
	hasValue bool
}

// usageError is a command line that getopt refuses: msg is getopt's own
// message ("sbatch: unrecognized option '--foo'"); it is followed by the
// "Try ... --help" hint.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// optParser parses argument lists the way glibc's getopt_long does, with
// the same error messages, so that the commands refuse bad input exactly as
// Slurm's do.
type optParser struct {
	prog string
	defs []optDef
	// stopAtFirst stops at the first non-option argument (getopt's "+"
	// mode, sbatch's: the rest are the script and its arguments);
	// otherwise non-options are collected wherever they are (permuting).
	stopAtFirst bool
}

// parse returns the options in order and the remaining (non-option)
// arguments. "--" ends the options.
func (p *optParser) parse(args []string) ([]parsedOpt, []string, error) {
	var opts []parsedOpt
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return opts, append(rest, args[i+1:]...), nil
		case strings.HasPrefix(a, "--"):
			o, used, err := p.parseLong(a[2:], args[i+1:])
			if err != nil {
				return nil, nil, err
			}
			opts = append(opts, o)
			i += used
		case len(a) > 1 && a[0] == '-':
			os, used, err := p.parseShort(a[1:], args[i+1:])
			if err != nil {
				return nil, nil, err
			}
			opts = append(opts, os...)
			i += used
		default:
			if p.stopAtFirst {
				return opts, append(rest, args[i:]...), nil
			}
			rest = append(rest, a)
		}
	}
	return opts, rest, nil
}

// parseLong parses "name" or "name=value" (without the leading "--");
// next are the arguments after it, from which a required value may come.
// It returns how many of next it used.
func (p *optParser) parseLong(s string, next []string) (parsedOpt, int, error) {
	name, value, hasValue := strings.Cut(s, "=")
	d, err := p.lookupLong(name)
	if err != nil {
		return parsedOpt{}, 0, err
	}
	o := parsedOpt{key: d.key(), written: "--" + name}
	switch d.arg {
	case noArg:
		if hasValue {
			return o, 0, &usageError{fmt.Sprintf("%s: option '--%s' doesn't allow an argument", p.prog, d.long[0])}
		}
	case requiredArg:
		if hasValue {
			o.value, o.hasValue = value, true
		} else if len(next) > 0 {
			o.value, o.hasValue = next[0], true
			return o, 1, nil
		} else {
			return o, 0, &usageError{fmt.Sprintf("%s: option '--%s' requires an argument", p.prog, d.long[0])}
		}
	case optionalArg:
		o.value, o.hasValue = value, hasValue
	}
	return o, 0, nil
}

// lookupLong finds a long option by its exact name or, as getopt_long
// does, by an unambiguous prefix of it.
func (p *optParser) lookupLong(name string) (*optDef, error) {
	for i := range p.defs {
		for _, l := range p.defs[i].long {
			if l == name {
				return &p.defs[i], nil
			}
		}
	}
	var found *optDef
	var names []string
	ambiguous := false
	for i := range p.defs {
		for _, l := range p.defs[i].long {
			if name == "" || !strings.HasPrefix(l, name) {
				continue
			}
			names = append(names, "'--"+l+"'")
			if found != nil && found != &p.defs[i] {
				ambiguous = true
			}
			found = &p.defs[i]
		}
	}
	if ambiguous {
		sort.Strings(names)
		return nil, &usageError{fmt.Sprintf("%s: option '--%s' is ambiguous; possibilities: %s", p.prog, name, strings.Join(names, " "))}
	}
	if found == nil {
		return nil, &usageError{fmt.Sprintf("%s: unrecognized option '--%s'", p.prog, name)}
	}
	return found, nil
}

// parseShort parses a cluster of short options ("hN2" from "-hN2").
func (p *optParser) parseShort(s string, next []string) ([]parsedOpt, int, error) {
	var out []parsedOpt
	for j := 0; j < len(s); j++ {
		c := s[j]
		var d *optDef
		for i := range p.defs {
			if p.defs[i].short == c && c != 0 {
				d = &p.defs[i]
				break
			}
		}
		if d == nil {
			return nil, 0, &usageError{fmt.Sprintf("%s: invalid option -- '%c'", p.prog, c)}
		}
		o := parsedOpt{key: d.key(), written: "-" + string(c)}
		switch d.arg {
		case noArg:
			out = append(out, o)
			continue
		case requiredArg:
			if j+1 < len(s) {
				o.value, o.hasValue = s[j+1:], true
				return append(out, o), 0, nil
			}
			if len(next) == 0 {
				return nil, 0, &usageError{fmt.Sprintf("%s: option requires an argument -- '%c'", p.prog, c)}
			}
			o.value, o.hasValue = next[0], true
			return append(out, o), 1, nil
		case optionalArg:
			if j+1 < len(s) {
				o.value, o.hasValue = s[j+1:], true
			}
			return append(out, o), 0, nil
		}
	}
	return out, 0, nil
}

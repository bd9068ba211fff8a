// Package runtime is what a step's command runs in: the node's own
// environment (the process runtime, the default) or a container a site's
// engine starts from the job's image (a template runtime: podman, enroot,
// apptainer, …). It only rewrites the step's argv; the process runtime
// (ports.Runtime, internal/adapters/procruntime) then starts that argv
// under the step's shim as it starts any other, as the job's owner, in its
// process group, with its environment and output files, so that stops,
// signals, exits, restarts and adoption work the same whatever runs the
// command.
//
// No container engine runs on Loom's own machines: the process runtime is
// the default and LOOM_CONTAINER_IMAGE is then ignored (the job's image is
// what its environment would have been; the node is that environment).
package runtime

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
)

// ImageEnv, in a step's environment, names the container image its
// command runs in (a CustomJob's pool 0 image_uri, set by the training
// service). A template runtime runs the command in it; the process runtime
// ignores it.
const ImageEnv = "LOOM_CONTAINER_IMAGE"

// Process is the process runtime's name (-container-runtime's default).
const Process = "process"

// Placeholders a template may hold. {image} is required.
const (
	// PhImage is replaced by the step's image.
	PhImage = "{image}"
	// PhWorkDir is replaced by the step's working directory (absolute).
	PhWorkDir = "{workdir}"
	// PhArgv, as a word of its own, is where the step's argv goes; a
	// template without it gets the argv after its last word.
	PhArgv = "{argv}"
)

// MaxImage bounds an image reference's length.
const MaxImage = 1024

// Runtime turns a step's command into the argv that runs it.
type Runtime interface {
	// Name is the runtime's name for logs ("process", or the template).
	Name() string
	// Command returns the argv that runs c, or an error that says, for
	// the job's log, why c cannot run here (the step then fails to start).
	Command(c Command) ([]string, error)
}

// Command is a step's command as the agent would run it in a process.
type Command struct {
	// Argv is the program and its arguments.
	Argv []string
	// Image is the step's LOOM_CONTAINER_IMAGE ("" when it names none).
	Image string
	// WorkDir is the step's working directory (absolute).
	WorkDir string
}

// New returns the runtime spec names: "" or "process" is the process
// runtime; anything else is a template (see ParseTemplate).
func New(spec string) (Runtime, error) {
	if s := strings.TrimSpace(spec); s == "" || s == Process {
		return processRuntime{}, nil
	}
	return ParseTemplate(spec)
}

// processRuntime runs argv as it is, in the node's environment; the image
// is ignored.
type processRuntime struct{}

func (processRuntime) Name() string { return Process }

func (processRuntime) Command(c Command) ([]string, error) {
	if len(c.Argv) == 0 || c.Argv[0] == "" {
		return nil, errors.New("no program to run")
	}
	return c.Argv, nil
}

// Template is a site's container runtime: an argv template such as
// `podman run --rm --network=host --env-host -v {workdir}:{workdir} -w {workdir} {image}`
// or `enroot start --rw --mount {workdir}:{workdir} {image}`, the step's
// argv appended (or put where a word {argv} stands).
type Template struct {
	spec  string
	words []string
}

// ParseTemplate parses a template: words split at white space, a word
// quoted with '…' or "…" kept whole (no escapes, no variables: nothing is
// run by a shell). It must hold {image}, so that the job's image is what
// runs; {argv} at most once, as a word of its own.
func ParseTemplate(spec string) (*Template, error) {
	words, err := split(spec)
	if err != nil {
		return nil, fmt.Errorf("container runtime template %q: %v", spec, err)
	}
	if len(words) == 0 {
		return nil, fmt.Errorf("container runtime template %q is empty", spec)
	}
	image, argv := 0, 0
	for _, w := range words {
		image += strings.Count(w, PhImage)
		if strings.Contains(w, PhArgv) {
			if w != PhArgv {
				return nil, fmt.Errorf("container runtime template %q: %s must be a word of its own", spec, PhArgv)
			}
			argv++
		}
	}
	switch {
	case image == 0:
		return nil, fmt.Errorf("container runtime template %q has no %s: the job's image must be what runs", spec, PhImage)
	case argv > 1:
		return nil, fmt.Errorf("container runtime template %q has %s %d times: at most once", spec, PhArgv, argv)
	case strings.Contains(words[0], "{"):
		return nil, fmt.Errorf("container runtime template %q: its program (first word) must be a fixed name", spec)
	}
	return &Template{spec: spec, words: words}, nil
}

// Name is the template itself.
func (t *Template) Name() string { return t.spec }

// Command substitutes the step's image and working directory into the
// template and puts the argv in. A step without an image runs as a
// process, as the process runtime runs it. An image or working directory
// that could be read as an option or a second value (a leading '-', white
// space, control characters; ':' or ',' in the directory, which a mount
// option splits at) is refused.
func (t *Template) Command(c Command) ([]string, error) {
	if len(c.Argv) == 0 || c.Argv[0] == "" {
		return nil, errors.New("no program to run")
	}
	if c.Image == "" {
		return c.Argv, nil
	}
	if err := checkImage(c.Image); err != nil {
		return nil, err
	}
	if err := checkDir(c.WorkDir); err != nil {
		return nil, err
	}
	r := strings.NewReplacer(PhImage, c.Image, PhWorkDir, c.WorkDir)
	out := make([]string, 0, len(t.words)+len(c.Argv))
	placed := false
	for _, w := range t.words {
		if w == PhArgv {
			out = append(out, c.Argv...)
			placed = true
			continue
		}
		out = append(out, r.Replace(w))
	}
	if !placed {
		out = append(out, c.Argv...)
	}
	return out, nil
}

// checkImage refuses an image reference the engine could take for
// something else.
func checkImage(image string) error {
	switch {
	case len(image) > MaxImage:
		return fmt.Errorf("%s is %d bytes long: at most %d", ImageEnv, len(image), MaxImage)
	case strings.HasPrefix(image, "-"):
		return fmt.Errorf("%s %.80q starts with '-': an image is not an option", ImageEnv, image)
	case strings.IndexFunc(image, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
		return fmt.Errorf("%s %.80q holds white space or a control character", ImageEnv, image)
	}
	return nil
}

// checkDir refuses a working directory that a mount option would split.
func checkDir(dir string) error {
	switch {
	case !strings.HasPrefix(dir, "/"):
		return fmt.Errorf("working directory %q is not absolute", dir)
	case strings.ContainsAny(dir, ":,") || strings.IndexFunc(dir, unicode.IsControl) >= 0:
		return fmt.Errorf("working directory %.80q holds ':', ',' or a control character, which a container mount cannot take", dir)
	}
	return nil
}

// split splits s into words at white space; '…' and "…" quote.
func split(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	in, quote := false, rune(0)
	for _, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, in = r, true
		case unicode.IsSpace(r):
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unclosed %c quote", quote)
	}
	if in {
		words = append(words, cur.String())
	}
	return words, nil
}

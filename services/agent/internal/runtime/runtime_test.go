package runtime

import (
	"slices"
	"strings"
	"testing"
)

func TestProcessRuntimeIgnoresTheImage(t *testing.T) {
	t.Parallel()
	for _, spec := range []string{"", " ", Process} {
		rt, err := New(spec)
		if err != nil {
			t.Fatal(err)
		}
		argv, err := rt.Command(Command{Argv: []string{"python3", "-m", "trainer"}, Image: "busybox", WorkDir: "/w"})
		if err != nil || !slices.Equal(argv, []string{"python3", "-m", "trainer"}) || rt.Name() != Process {
			t.Errorf("New(%q): %s %v, %v", spec, rt.Name(), argv, err)
		}
	}
}

func TestTemplate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		spec  string
		image string
		want  []string
	}{
		{`podman run --rm --network=host --env-host -v {workdir}:{workdir} -w {workdir} {image}`, "docker.io/library/python:3.12",
			[]string{"podman", "run", "--rm", "--network=host", "--env-host", "-v", "/w/d:/w/d", "-w", "/w/d", "docker.io/library/python:3.12", "python3", "-m", "trainer"}},
		{`enroot start --rw --mount '{workdir}:{workdir}' {image} {argv}`, "/images/pytorch.sqsh",
			[]string{"enroot", "start", "--rw", "--mount", "/w/d:/w/d", "/images/pytorch.sqsh", "python3", "-m", "trainer"}},
		{`/usr/bin/apptainer exec --bind "{workdir}" docker://{image} {argv} --flag`, "pytorch/pytorch@sha256:abc",
			[]string{"/usr/bin/apptainer", "exec", "--bind", "/w/d", "docker://pytorch/pytorch@sha256:abc", "python3", "-m", "trainer", "--flag"}},
		// No image: the command runs as a process.
		{`podman run {image}`, "", []string{"python3", "-m", "trainer"}},
	}
	for _, c := range cases {
		rt, err := New(c.spec)
		if err != nil {
			t.Fatalf("New(%q): %v", c.spec, err)
		}
		got, err := rt.Command(Command{Argv: []string{"python3", "-m", "trainer"}, Image: c.image, WorkDir: "/w/d"})
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%q with %q:\n got %q, %v\nwant %q", c.spec, c.image, got, err, c.want)
		}
	}
}

func TestTemplateRefusals(t *testing.T) {
	t.Parallel()
	for spec, wants := range map[string]string{
		`podman run --rm`:            "has no {image}",
		`   `:                        "", // the process runtime
		`podman run '{image}`:        "unclosed ' quote",
		`podman run {image} x{argv}`: "{argv} must be a word of its own",
		`p {image} {argv} {argv}`:    "{argv} 2 times",
		`{image} run`:                "program (first word) must be a fixed name",
	} {
		_, err := New(spec)
		if wants == "" {
			if err != nil {
				t.Errorf("New(%q): %v", spec, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), wants) {
			t.Errorf("New(%q) = %v, want an error with %q", spec, err, wants)
		}
	}
	rt, err := New(`podman run -v {workdir}:{workdir} {image}`)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cmd   Command
		wants string
	}{
		{Command{Argv: []string{"x"}, Image: "--privileged", WorkDir: "/w"}, "starts with '-'"},
		{Command{Argv: []string{"x"}, Image: "a b", WorkDir: "/w"}, "white space"},
		{Command{Argv: []string{"x"}, Image: "a\nb", WorkDir: "/w"}, "white space"},
		{Command{Argv: []string{"x"}, Image: strings.Repeat("a", MaxImage+1), WorkDir: "/w"}, "at most 1024"},
		{Command{Argv: []string{"x"}, Image: "img", WorkDir: "/w:/etc"}, "holds ':'"},
		{Command{Argv: []string{"x"}, Image: "img", WorkDir: "rel"}, "not absolute"},
		{Command{Image: "img", WorkDir: "/w"}, "no program"},
	} {
		if _, err := rt.Command(c.cmd); err == nil || !strings.Contains(err.Error(), c.wants) {
			t.Errorf("Command(%+v) = %v, want an error with %q", c.cmd, err, c.wants)
		}
	}
}

package cli

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestFlagHelpNamesItsValue: pflag takes the first `quoted` word of a
// flag's usage as the name of its value in --help ("--set KEY=VALUE"), so a
// command quoted in a usage ("see `loom recipes show NAME`") became the
// value's name: "--set loom recipes show NAME   override key=value". Every
// flag's value name, quoted or not, is one word.
func TestFlagHelpNamesItsValue(t *testing.T) {
	t.Parallel()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		check := func(f *pflag.Flag) {
			if name, _ := pflag.UnquoteUsage(f); strings.ContainsAny(name, " \t") {
				t.Errorf("%s --%s: its value is named %q in --help; quote no command in a usage, or quote one word as the value's name", c.CommandPath(), f.Name, name)
			}
		}
		c.LocalFlags().VisitAll(check)
		c.PersistentFlags().VisitAll(check)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newApp().rootCommand())
}

// TestResumeUsageReasonOptional: resume is the one override that needs no
// --reason (docs/health.md); its usage line said "--reason TEXT" as the
// others' do, which reads as required.
func TestResumeUsageReasonOptional(t *testing.T) {
	t.Parallel()
	root := newApp().rootCommand()
	for verb, want := range map[string]string{"resume": "[--reason TEXT]", "drain": " --reason TEXT"} {
		c, _, err := root.Find([]string{"nodes", verb})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(c.Use, want) || (verb == "drain" && strings.Contains(c.Use, "[--reason")) {
			t.Errorf("loom nodes %s usage %q, want it to end in %q", verb, c.Use, want)
		}
	}
}

// TestUnknownSubcommandIsUsage: a typo in a subcommand (`loom clusters
// lst`) is bad usage, exit 2, with a suggestion; cobra showed the group's
// help and exited 0, so that a script's typo looked like success. A group
// alone still shows its help.
func TestUnknownSubcommandIsUsage(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"clusters", "lst"}, `unknown command "lst" for "loom clusters"; did you mean get or list?`},
		{[]string{"auth", "keys", "lis"}, `unknown command "lis" for "loom auth keys"; did you mean list?`},
		{[]string{"clustr", "list"}, `unknown command "clustr" for "loom"; did you mean clusters?`},
	} {
		out, errOut, code := run(t, "127.0.0.1:1", c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) || out != "" {
			t.Errorf("loom %s: exit %d, stdout %q, stderr %q; want exit 2 and %q", strings.Join(c.args, " "), code, out, errOut, c.want)
		}
	}
	if out, errOut, code := run(t, "127.0.0.1:1", "clusters"); code != 0 || !strings.Contains(out, "Available Commands:") {
		t.Errorf("loom clusters: exit %d, %q %q; want its help", code, out, errOut)
	}
}

// TestNegativeArgumentIsNamed: a negative count where an argument is
// expected reads as a flag to the parser, which answered "unknown shorthand
// flag: '1' in -1"; it is bad usage that says what is wrong, before any
// call. A real unknown flag still says so.
func TestNegativeArgumentIsNamed(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"clusters", "resize", "a3u", "train", "-1"}, `-1: a count or an id cannot be negative (see "loom clusters resize --help")`},
		{[]string{"jobs", "get", "-12"}, `-12: a count or an id cannot be negative (see "loom jobs get --help")`},
		{[]string{"jobs", "list", "-x"}, `unknown shorthand flag: 'x' in -x (see "loom jobs list --help")`},
	} {
		out, errOut, code := run(t, "127.0.0.1:1", c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) || out != "" {
			t.Errorf("loom %s: exit %d, stdout %q, stderr %q; want exit 2 and %q", strings.Join(c.args, " "), code, out, errOut, c.want)
		}
	}
}

package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/loom-ml/loom/cmd/loom/internal/nvsmi"
	"github.com/loom-ml/loom/cmd/loom/internal/slurmcli"
	"github.com/loom-ml/loom/libs/proc"
)

// SlurmCommands are the Slurm commands loom stands in for. `loom clusters
// login` puts links with these names to the loom executable on the shell's
// PATH, and loom started under one of these names runs `loom slurm NAME`.
var SlurmCommands = slurmcli.Commands

// slurmCommandList is SlurmCommands as prose, "sbatch, squeue, ... and
// seff", for the help texts that name them: written out by hand, the lists
// fell behind when sstat and seff came.
func slurmCommandList() string {
	n := len(SlurmCommands)
	if n < 2 {
		return strings.Join(SlurmCommands, "")
	}
	return strings.Join(SlurmCommands[:n-1], ", ") + " and " + SlurmCommands[n-1]
}

// wrapWords breaks text into lines of at most width bytes at spaces (a
// longer word keeps a line of its own) and starts every line but the first
// with indent, for help texts laid out in columns.
func wrapWords(text string, width int, indent string) string {
	var b strings.Builder
	line := 0
	for i, w := range strings.Fields(text) {
		switch {
		case i == 0:
		case line+1+len(w) > width:
			b.WriteString("\n" + indent)
			line = 0
		default:
			b.WriteByte(' ')
			line++
		}
		b.WriteString(w)
		line += len(w)
	}
	return b.String()
}

// Args returns the loom command line for a program started as argv0 with
// args: under a Slurm command's name (see SlurmCommands, and the
// unsupported ones, which say what to use instead) it is "slurm NAME
// args...", otherwise args as they are.
func Args(argv0 string, args []string) []string {
	base := filepath.Base(argv0)
	if base == nvsmi.Name {
		// The node's nvidia-smi, for simulated GPUs (package nvsmi).
		return append([]string{nvsmi.Name}, args...)
	}
	_, unsupported := slurmcli.Unsupported[base]
	if slices.Contains(SlurmCommands, base) || unsupported {
		return append([]string{"slurm", base}, args...)
	}
	return args
}

func (a *app) clustersLoginCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "login NAME [-- CMD...]",
		Short: "Open a shell on the cluster's login node, in its shared home (or run CMD there)",
		Long: `Open $SHELL on the cluster's login node, or run CMD there and exit with its
status (for scripts). The working directory is the cluster's shared home, and
the environment is a login's, pointing the Slurm commands at this cluster:

  USER, LOGNAME                you: whom your credential names (loom auth
                               whoami), else your OS account
  HOME                         <shared home>/<user>, made when missing
  SHELL                        your login shell (/etc/passwd), else /bin/bash
  LANG, TERM                   yours, else C.UTF-8 and dumb
  LOOM_GATEWAY, LOOM_PROJECT   this loom's gateway and project
  LOOM_CLUSTER                 the cluster's full name
  SLURM_CONF                   <home>/.loom/slurm/slurm.conf (when rendered)
  PATH                         ` + wrapWords("led by links to loom named "+slurmCommandList()+
			"; the other Slurm commands Loom does not provide are linked too and say what to use instead", 46, strings.Repeat(" ", 31)) + `
  LOOM_AUTHD_SOCKET            the login daemon ("loom up" runs one), which
                               gives the Slurm commands a token for your OS
                               account (yours, else the one of the "loom up"
                               whose data dir holds the cluster's home, else
                               the default data dir's)

Jobs you submit from it inherit these (sbatch exports the whole login
environment by default, as Slurm's).

On the local provider the login node is this machine and the shared home a
directory here.`,
		Args: func(cmd *cobra.Command, args []string) error {
			dash := cmd.ArgsLenAtDash()
			switch {
			case len(args) == 0 || dash == 0:
				return usagef("give the cluster name, e.g. `loom clusters login demo` or `loom clusters login demo -- sinfo`")
			case dash < 0 && len(args) > 1, dash > 1:
				return usagef("put the command to run after --, e.g. `loom clusters login %s -- %s`", args[0], strings.Join(args[1:], " "))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.getCluster(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			id := shortName(c.GetName())
			home := homeDir(c)
			if home == "" {
				return fmt.Errorf("cluster %s has no shared home yet (it is %s); wait for it with `loom clusters describe %s`", id, clusterState(c), id)
			}
			if fi, err := os.Stat(home); err != nil || !fi.IsDir() {
				return fmt.Errorf("the shared home of cluster %s, %s, is not on this machine: `loom clusters login` runs where the cluster's home is mounted (with the local provider, the machine running Loom)", id, home)
			}
			bin, err := os.MkdirTemp("", "loom-login-")
			if err != nil {
				return fmt.Errorf("login: %w", err)
			}
			defer os.RemoveAll(bin)
			if err := slurmcli.LinkCommands(bin, executable()); err != nil {
				return fmt.Errorf("login: %w", err)
			}

			caller := a.environ()
			u, err := a.loginUser(cmd.Context(), home)
			if err != nil {
				return err
			}
			argv := args[1:]
			interactive := len(argv) == 0
			if interactive {
				argv = []string{u.shell}
				fmt.Fprintf(cmd.ErrOrStderr(), "Logged in to %s of cluster %s (%s) as %s, in %s (HOME %s).\nsbatch, squeue, sinfo and friends talk to this cluster; `exit` leaves.\n",
					orDash(c.GetStatus().GetLoginNode()), id, clusterStateLong(c), u.name, home, u.home)
			}
			path := bin + string(os.PathListSeparator) + cmp.Or(getenvIn(caller, "PATH"), defaultLoginPath)
			// As the login's shell would look it up: exec.Command would
			// look in loom's own PATH, where a real Slurm's sinfo is found
			// and the login's links are not.
			prog, err := proc.LookPath(argv[0], path, home)
			if err != nil {
				return exitError{code: 127, msg: fmt.Sprintf("loom clusters login: %s: %v", argv[0], err)}
			}
			env := loginEnv(caller, map[string]string{
				"USER":              u.name,
				"LOGNAME":           u.name,
				"HOME":              u.home,
				"SHELL":             u.shell,
				"LANG":              cmp.Or(getenvIn(caller, "LANG"), "C.UTF-8"),
				"TERM":              cmp.Or(getenvIn(caller, "TERM"), "dumb"),
				"LOOM_GATEWAY":      a.gateway,
				"LOOM_PROJECT":      a.project,
				"LOOM_CLUSTER":      c.GetName(),
				"LOOM_LOGIN_NODE":   c.GetStatus().GetLoginNode(),
				"SLURM_CONF":        slurmConf(home),
				"LOOM_AUTHD_SOCKET": a.loginAuthdSocket(home),
				"PATH":              path,
			})
			command := func(prog string, args []string) *exec.Cmd {
				sh := exec.Command(prog, args...)
				sh.Dir, sh.Env = home, env
				sh.Stdin, sh.Stdout, sh.Stderr = cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr()
				return sh
			}
			sh := command(prog, argv[1:])
			sh.Args[0] = argv[0]
			// Ctrl-C goes to the shell (it is in the terminal's foreground
			// group); loom itself catches it (main) and waits for the shell.
			err = sh.Run()
			if errors.Is(err, syscall.ENOEXEC) {
				// A file without #! is a script for the shell, to a shell
				// (POSIX): nothing ran, so run it as one.
				err = command("/bin/sh", append([]string{prog}, argv[1:]...)).Run()
			}
			var ee *exec.ExitError
			switch {
			case err == nil:
				return nil
			case errors.As(err, &ee):
				if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					return exitError{code: 128 + int(ws.Signal())}
				}
				return exitError{code: ee.ExitCode()}
			}
			return fmt.Errorf("login: run %s: %w", argv[0], err)
		},
	}
}

// slurmConf is the cluster's rendered slurm.conf under home, or "" when
// there is none.
func slurmConf(home string) string {
	p := filepath.Join(home, ".loom", "slurm", "slurm.conf")
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}

// loginEnv is env with the variables in set replaced; an empty value
// removes the variable, so that nothing of another cluster leaks in.
func loginEnv(env []string, set map[string]string) []string {
	out := make([]string, 0, len(env)+len(set))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := set[k]; !ok {
			out = append(out, kv)
		}
	}
	for k, v := range set {
		if v != "" {
			out = append(out, k+"="+v)
		}
	}
	return out
}

// defaultLoginPath is the rest of a login's PATH when the caller has none:
// what login(1) gives.
const defaultLoginPath = "/usr/local/bin:/usr/bin:/bin"

// loginName is what a login accepts as a user name (useradd's rule, which
// also keeps it one path element: it names the user's home directory).
var loginName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]{0,31}$`)

// account is the user a login is for.
type account struct {
	// name is USER and LOGNAME; home is HOME, the user's directory under
	// the cluster's shared home; shell is SHELL, what an interactive login
	// runs.
	name, home, shell string
}

// loginUser is the user a login is for (userName: the credential's, else
// the OS account; never a variable of the caller's), with
// their home under the cluster's shared home (made when missing, owned by
// the user when loom may give it away) and their login shell from the
// account database (a.passwd), else /bin/bash.
func (a *app) loginUser(ctx context.Context, sharedHome string) (account, error) {
	name := a.userName(ctx)
	if !loginName.MatchString(name) {
		return account{}, fmt.Errorf("login: the user name %q is not a login name (a letter or _, then letters, digits, _ . -, at most 32 in all); log in as a user whose name is one (`loom auth login`)", name)
	}
	pw, known := passwdEntry(a.passwd, name)
	u := account{name: name, home: filepath.Join(sharedHome, name), shell: pw.shell}
	if u.shell == "" {
		u.shell = "/bin/bash"
		if _, err := os.Stat(u.shell); err != nil {
			u.shell = "/bin/sh"
		}
	}
	switch fi, err := os.Lstat(u.home); {
	case errors.Is(err, os.ErrNotExist):
		// The user's alone (0700), as the agent makes a job owner's home:
		// other users of the cluster have no business in it.
		if err := os.Mkdir(u.home, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return account{}, fmt.Errorf("login: make %s's home in the cluster's shared home: %w", name, err)
		}
		if known && os.Geteuid() == 0 {
			// Only root may give a file away; anyone else's home is
			// theirs already, made by them.
			_ = os.Lchown(u.home, pw.uid, pw.gid)
		}
	case err != nil:
		return account{}, fmt.Errorf("login: %s's home: %w", name, err)
	case !fi.IsDir():
		return account{}, fmt.Errorf("login: %s's home %s is not a directory; move it away and log in again", name, u.home)
	}
	return u, nil
}

// passwdLine is the part of an account database entry a login uses.
type passwdLine struct {
	uid, gid int
	shell    string
}

// passwdEntry looks name up in the passwd(5) file at path; an account
// that is not there (a Loom user with no account here) is not known.
func passwdEntry(path, name string) (passwdLine, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return passwdLine{}, false
	}
	for line := range strings.Lines(string(data)) {
		f := strings.Split(strings.TrimRight(line, "\r\n"), ":")
		if len(f) != 7 || f[0] != name {
			continue
		}
		uid, err1 := strconv.Atoi(f[2])
		gid, err2 := strconv.Atoi(f[3])
		if err1 != nil || err2 != nil {
			return passwdLine{}, false
		}
		return passwdLine{uid: uid, gid: gid, shell: f[6]}, true
	}
	return passwdLine{}, false
}

// getenvIn is the value of k in env ("K=V" entries; the last one wins, as
// for a process), "" when unset.
func getenvIn(env []string, k string) string {
	v := ""
	for _, kv := range env {
		if key, val, ok := strings.Cut(kv, "="); ok && key == k {
			v = val
		}
	}
	return v
}

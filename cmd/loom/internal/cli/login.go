package cli

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/loom-ml/loom/cmd/loom/internal/slurmcli"
	"github.com/loom-ml/loom/libs/proc"
)

// SlurmCommands are the Slurm commands loom stands in for. `loom clusters
// login` puts links with these names to the loom executable on the shell's
// PATH, and loom started under one of these names runs `loom slurm NAME`.
var SlurmCommands = slurmcli.Commands

// Args returns the loom command line for a program started as argv0 with
// args: under a Slurm command's name (see SlurmCommands) it is
// "slurm NAME args...", otherwise args as they are.
func Args(argv0 string, args []string) []string {
	base := filepath.Base(argv0)
	for _, name := range SlurmCommands {
		if base == name {
			return append([]string{"slurm", name}, args...)
		}
	}
	return args
}

func (a *app) clustersLoginCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "login NAME [-- CMD...]",
		Short: "Open a shell on the cluster's login node, in its shared home (or run CMD there)",
		Long: `Open $SHELL on the cluster's login node, or run CMD there and exit with its
status (for scripts). The working directory is the cluster's shared home, and
the environment points the Slurm commands at this cluster:

  LOOM_GATEWAY, LOOM_PROJECT   this loom's gateway and project
  LOOM_CLUSTER                 the cluster's full name
  SLURM_CONF                   <home>/.loom/slurm/slurm.conf (when rendered)
  PATH                         led by sbatch, squeue, sinfo, scancel, sacct,
                               scontrol, srun and sprio (links to loom)

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

			argv := args[1:]
			interactive := len(argv) == 0
			if interactive {
				shell := os.Getenv("SHELL")
				if shell == "" {
					shell = "/bin/sh"
				}
				argv = []string{shell}
				fmt.Fprintf(cmd.ErrOrStderr(), "Logged in to %s of cluster %s (%s), in %s.\nsbatch, squeue, sinfo and friends talk to this cluster; `exit` leaves.\n",
					orDash(c.GetStatus().GetLoginNode()), id, clusterStateLong(c), home)
			}
			path := bin + string(os.PathListSeparator) + os.Getenv("PATH")
			// As the login's shell would look it up: exec.Command would
			// look in loom's own PATH, where a real Slurm's sinfo is found
			// and the login's links are not.
			prog, err := proc.LookPath(argv[0], path, home)
			if err != nil {
				return exitError{code: 127, msg: fmt.Sprintf("loom clusters login: %s: %v", argv[0], err)}
			}
			env := loginEnv(os.Environ(), map[string]string{
				"LOOM_GATEWAY":    a.gateway,
				"LOOM_PROJECT":    a.project,
				"LOOM_CLUSTER":    c.GetName(),
				"LOOM_LOGIN_NODE": c.GetStatus().GetLoginNode(),
				"SLURM_CONF":      slurmConf(home),
				"PATH":            path,
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

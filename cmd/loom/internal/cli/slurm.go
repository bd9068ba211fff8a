package cli

import (
	"context"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/loom-ml/loom/cmd/loom/internal/slurmcli"
	"github.com/loom-ml/loom/libs/config"
)

// slurmCommand is `loom slurm`: the Slurm commands of a login shell
// (package slurmcli), over the gateway. `loom slurm NAME ARGS...` and NAME
// started through a link (see Args) run the same code; ARGS are Slurm's
// own options, passed on untouched.
func (a *app) slurmCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "slurm COMMAND [ARGS...]",
		Short: "Slurm-compatible commands (sbatch, squeue, sinfo, ...) for $LOOM_CLUSTER",
		Long: wrapWords(`The Slurm commands of a login shell ("loom clusters login" puts links named `+
			slurmCommandList()+` on its PATH; each runs "loom slurm NAME ARGS..."). They take Slurm 22.05's options and
print its formats; see docs/slurm.md for what differs.`, 78, "") + `

They talk to the gateway of --gateway / LOOM_GATEWAY, in the project of
--project / LOOM_PROJECT, about the cluster LOOM_CLUSTER (or -M NAME; by
default the project's only cluster). They act as the caller's credential
says (LOOM_TOKEN, else the login daemon of LOOM_AUTHD_SOCKET, which vouches
for your OS account, else "loom auth login"'s), never as USER or LOOM_USER.`,
	}
	for name := range slurmcli.Unsupported {
		// Hidden: it only says what to use instead, asking nobody.
		cmd.AddCommand(&cobra.Command{
			Use: name, Hidden: true, DisableFlagParsing: true,
			RunE: func(c *cobra.Command, args []string) error {
				return exitError{code: slurmcli.Main(c.Context(), name, args, slurmcli.Env{}, c.OutOrStdout(), c.ErrOrStderr())}
			},
		})
	}
	for _, name := range SlurmCommands {
		cmd.AddCommand(&cobra.Command{
			Use:                name + " [ARGS...]",
			Short:              "Slurm's " + name + " (" + name + " --help for its options)",
			DisableFlagParsing: true,
			RunE: func(c *cobra.Command, args []string) error {
				if code := a.runSlurm(c.Context(), name, args, c.InOrStdin(), c.OutOrStdout(), c.ErrOrStderr()); code != 0 {
					return exitError{code: code}
				}
				return nil
			},
		})
	}
	return cmd
}

// runSlurm runs the Slurm command name with its arguments over the
// gateway connection and returns its exit status; the command prints its
// own messages.
func (a *app) runSlurm(ctx context.Context, name string, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	conn, err := a.client()
	if err != nil {
		_, _ = io.WriteString(stderr, name+": error: "+err.Error()+"\n")
		return 1
	}
	// Who the command acts as comes from its credential (the login
	// daemon's answer, the credentials file, WhoAmI) or the OS account:
	// never USER or LOOM_USER.
	env := slurmcli.EnvFromOS(conn, a.userName(ctx))
	env.Project = a.project
	env.Stdin = stdin
	env.CallTimeout = a.callTimeout
	return slurmcli.Main(ctx, name, args, env, stdout, stderr)
}

// slurmInvocation recognises `loom [GLOBAL FLAGS] slurm [GLOBAL FLAGS] NAME
// ARGS...` for a Slurm command NAME. It returns the global flags' values
// (nil when not given), NAME and ARGS untouched: they are Slurm's options,
// which cobra must not parse (squeue's -o is not loom's --output). Anything
// else (`loom slurm`, `loom slurm --help`, a flag loom does not know before
// NAME) is left to cobra: ok is false.
func slurmInvocation(args []string) (flags map[string]string, name string, rest []string, ok bool) {
	flags = map[string]string{}
	seenSlurm := false
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if !strings.HasPrefix(arg, "-") {
			if !seenSlurm {
				if arg != "slurm" {
					return nil, "", nil, false
				}
				seenSlurm = true
				continue
			}
			for _, n := range SlurmCommands {
				if arg == n {
					return flags, n, args[i+1:], true
				}
			}
			return nil, "", nil, false
		}
		key, value, hasValue := "", "", false
		switch {
		case strings.HasPrefix(arg, "--"):
			k, v, eq := strings.Cut(arg[2:], "=")
			key, value, hasValue = k, v, eq
		case arg == "-o":
			key = "output"
		case strings.HasPrefix(arg, "-o"):
			key, value, hasValue = "output", strings.TrimPrefix(arg[2:], "="), true
		default:
			return nil, "", nil, false
		}
		switch key {
		case "gateway", "project", "output":
		default:
			return nil, "", nil, false
		}
		if !hasValue {
			if i+1 >= len(args) {
				return nil, "", nil, false
			}
			i++
			value = args[i]
		}
		flags[key] = value
	}
	return nil, "", nil, false
}

// executeSlurm runs a recognised Slurm invocation (see slurmInvocation)
// with the global flags applied as cobra would apply them.
func (a *app) executeSlurm(ctx context.Context, flags map[string]string, name string, args []string, stdout, stderr io.Writer) int {
	a.gateway = a.defaultGateway()
	a.project = config.Env("LOOM_PROJECT", DefaultProject)
	if v, ok := flags["gateway"]; ok {
		a.gateway = v
	}
	v, fromFlag := flags["project"]
	if fromFlag {
		a.project = v
	}
	if err := projectError(a.project, fromFlag); err != nil {
		_, _ = io.WriteString(stderr, "Error: "+err.Error()+"\n")
		return 2
	}
	return a.runSlurm(ctx, name, args, os.Stdin, stdout, stderr)
}

package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

// slurmCommand is `loom slurm`: the Slurm commands of a login shell. They
// are placeholders until issue 4 implements them over the gateway; each
// says so and exits 2.
func (a *app) slurmCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "slurm COMMAND [ARGS...]",
		Short: "Slurm-compatible commands (sbatch, squeue, sinfo, ...) for $LOOM_CLUSTER",
		Long: `The Slurm commands a login shell has on its PATH ("loom clusters login"):
each name there links to loom, which runs "loom slurm NAME ARGS...".
They are not implemented yet (issue 4).`,
	}
	for _, name := range SlurmCommands {
		cmd.AddCommand(&cobra.Command{
			Use:                name + " [ARGS...]",
			Short:              "Slurm's " + name + " (not implemented yet)",
			DisableFlagParsing: true,
			RunE: func(*cobra.Command, []string) error {
				return exitError{code: 2, msg: fmt.Sprintf("loom: %s is not implemented yet (issue 4)", name)}
			},
		})
	}
	return cmd
}

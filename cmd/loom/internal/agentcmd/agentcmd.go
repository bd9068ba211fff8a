// Package agentcmd runs Loom's agent from command-line arguments and LOOM_*
// variables: it is `loom agent`, the process the local provider starts for
// each node, and what tests re-exec their own binary into.
package agentcmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/services/agent"
)

// Run parses args with the agent's own flags (defaults from LOOM_*
// variables, which is how the provider configures it; config.ParseArgs, as
// the agent binary does) and runs the agent until ctx ends. -h prints the
// flags to usage and returns nil; a bad flag or a stray argument prints
// them too and is an error.
func Run(ctx context.Context, args []string, usage io.Writer) error {
	cfg, err := config.ParseArgs("loom agent", args, (*agent.Config).RegisterFlags)
	if err != nil {
		var u *config.UsageError
		if errors.As(err, &u) {
			_, _ = io.WriteString(usage, u.Usage)
		}
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("agent %w", err)
	}
	if err := agent.Run(ctx, cfg); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	return nil
}

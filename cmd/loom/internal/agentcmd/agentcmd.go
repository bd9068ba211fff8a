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

	"github.com/loom-ml/loom/services/agent"
)

// Run parses args with the agent's own flags (defaults from LOOM_*
// variables, which is how the provider configures it) and runs the agent
// until ctx ends. -h prints the flags to usage and returns nil.
func Run(ctx context.Context, args []string, usage io.Writer) error {
	var cfg agent.Config
	fs := flag.NewFlagSet("loom agent", flag.ContinueOnError)
	fs.SetOutput(usage)
	cfg.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("agent flags: %w", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("agent: unexpected arguments %q", fs.Args())
	}
	if err := agent.Run(ctx, cfg); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	return nil
}

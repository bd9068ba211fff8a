package provisioner

import (
	"context"
	"log/slog"
	"time"

	"github.com/loom-ml/loom/services/provisioner/internal/provider/local"
)

// LocalAgent is a node agent the local provider started that still runs
// (see LocalAgents).
type LocalAgent = local.Agent

// LocalAgents returns the node agents that run under dataDir, a local
// provisioner's Config.DataDir, found by their pidfiles and checked to be
// the processes those name (start time, LOOM_WORK_DIR): for `loom down`
// and `loom up`, which end or count the agents a stopped provisioner
// leaves running (StopAgentsOnExit false).
func LocalAgents(dataDir string) ([]LocalAgent, error) { return local.Agents(dataDir) }

// StopLocalAgent ends one of LocalAgents' agents as the provisioner stops
// one: SIGTERM to its process group, SIGKILL after grace (default 15s). An
// agent that is gone already is not an error.
func StopLocalAgent(ctx context.Context, a LocalAgent, grace time.Duration, log *slog.Logger) error {
	return local.StopAgent(ctx, a, grace, log)
}

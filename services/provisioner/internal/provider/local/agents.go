package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/loom-ml/loom/libs/proc"
	"github.com/loom-ml/loom/services/provisioner/internal/provider"
)

// Agent is a node agent that a local provider with some data directory
// started and that still runs.
type Agent struct {
	// Node is "<cluster-id>/<hostname>"; WorkDir the node's directory.
	Node, WorkDir string
	// PID and Start are the process and its start time, from the pidfile.
	PID   int
	Start uint64
}

// Agents returns the agents running under dataDir (a provider's
// Config.DataDir), found by the pidfiles in the node directories. A
// pidfile's process counts only when it is the one the file names (same
// start time: a recycled pid is not) and its environment has the node's
// LOOM_WORK_DIR, as Launch gives every agent.
func Agents(dataDir string) ([]Agent, error) {
	files, err := filepath.Glob(filepath.Join(dataDir, "clusters", "*", "nodes", "*", PIDFile))
	if err != nil {
		return nil, fmt.Errorf("find agents under %s: %w", dataDir, err)
	}
	var out []Agent
	for _, f := range files {
		dir := filepath.Dir(f)
		if a, ok := agentOf(dir); ok {
			out = append(out, a)
		}
	}
	return out, nil
}

// agentOf is the agent running in node directory dir, if one does.
func agentOf(dir string) (Agent, bool) {
	pid, start, err := proc.ReadPIDFile(filepath.Join(dir, PIDFile))
	if err != nil || !proc.Alive(pid, start) || !proc.HasEnv(pid, "LOOM_WORK_DIR="+dir) {
		return Agent{}, false
	}
	host := filepath.Base(dir)
	cluster := filepath.Base(filepath.Dir(filepath.Dir(dir)))
	return Agent{Node: cluster + "/" + host, WorkDir: dir, PID: pid, Start: start}, true
}

// StopAgent ends a, found by Agents: SIGTERM to its process group, SIGKILL
// after grace (the agent first stops its steps, within its own kill grace).
// It checks again that a's directory names the same agent first, so a
// process that ended meanwhile and whose pid was reused is never signalled.
func StopAgent(ctx context.Context, a Agent, grace time.Duration, log *slog.Logger) error {
	cur, ok := agentOf(a.WorkDir)
	if !ok || cur.PID != a.PID || cur.Start != a.Start {
		return nil // gone already
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if grace <= 0 {
		grace = 15 * time.Second // New's default
	}
	p := &Provider{cfg: Config{DataDir: filepath.Dir(a.WorkDir), StopGrace: grace, Log: log}, exits: map[string]string{}}
	if err := p.Stop(ctx, provider.Node{Name: a.Node, WorkDir: a.WorkDir}); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

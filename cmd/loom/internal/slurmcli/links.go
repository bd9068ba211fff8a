package slurmcli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// LinkCommands makes dir (created when missing) hold links named loom and
// each of Commands to exe, the loom executable, replacing links already
// there (an earlier loom may have been another binary). loom started
// through such a link runs the command the link is named for.
func LinkCommands(dir, exe string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("link the Slurm commands: %w", err)
	}
	for _, name := range append([]string{"loom"}, Commands...) {
		p := filepath.Join(dir, name)
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("link the Slurm commands: %w", err)
		}
		if err := os.Symlink(exe, p); err != nil {
			return fmt.Errorf("link the Slurm commands: %w", err)
		}
	}
	return nil
}

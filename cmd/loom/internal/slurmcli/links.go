package slurmcli

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
)

// LinkCommands makes dir (created when missing) hold links named loom and
// each of Commands and Unsupported to exe, the loom executable, replacing
// links already there (an earlier loom may have been another binary). loom
// started through such a link runs the command the link is named for (an
// unsupported one says what to use instead).
func LinkCommands(dir, exe string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("link the Slurm commands: %w", err)
	}
	names := append([]string{"loom"}, Commands...)
	names = append(names, slices.Sorted(maps.Keys(Unsupported))...)
	for _, name := range names {
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

//go:build !linux

package embedded

import "os"

// lockPort: without open-file-description locks, FreePort lets the kernel
// pick (ephemeralLow is 0 off Linux, so this is not called).
func lockPort(*os.File, int) bool { return false }

func unlockPort(*os.File, int) {}

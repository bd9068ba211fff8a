//go:build !unix

package sim

import "time"

// processCPU is unknown here: 0 (the report shows wall time alone).
func processCPU() time.Duration { return 0 }

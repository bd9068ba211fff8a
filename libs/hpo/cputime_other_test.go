//go:build !linux

package hpo_test

import "time"

// threadCPU is unavailable here; latency tests report wall time only.
func threadCPU() time.Duration { return 0 }

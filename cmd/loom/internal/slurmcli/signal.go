package slurmcli

import "github.com/loom-ml/loom/libs/slurmspec"

// The --signal grammar lives in libs/slurmspec, shared with the gateway;
// these names keep slurmcli's API.

// Signal is a parsed --signal spec.
type Signal = slurmspec.Signal

// ParseSignalName validates a signal name or number (see slurmspec.ParseSignalName).
func ParseSignalName(s string) (string, error) { return slurmspec.ParseSignalName(s) }

// ParseSignal parses a --signal spec "[{R|B}:]SIG[@sig_time]" (see slurmspec.ParseSignal).
func ParseSignal(spec string) (*Signal, error) { return slurmspec.ParseSignal(spec) }

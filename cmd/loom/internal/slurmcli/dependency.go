package slurmcli

import "github.com/loom-ml/loom/libs/slurmspec"

// The --dependency grammar lives in libs/slurmspec, shared with the gateway;
// these names keep slurmcli's API.

// DependencyTypes are the --dependency types Loom knows, as Slurm names them.
var DependencyTypes = slurmspec.DependencyTypes

// DepJob is one job a dependency waits for.
type DepJob = slurmspec.DepJob

// DepItem is one "type[:job...]" element of a dependency.
type DepItem = slurmspec.DepItem

// Dependency is a parsed --dependency spec.
type Dependency = slurmspec.Dependency

// ParseDependency parses and validates a --dependency spec (see slurmspec.ParseDependency).
func ParseDependency(spec string) (*Dependency, error) { return slurmspec.ParseDependency(spec) }

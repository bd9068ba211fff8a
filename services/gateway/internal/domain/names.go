// Package domain is the gateway's pure core: request validation (cluster
// specs through libs/clusterspec, see spec.go; resource names through
// libs/resname), how an update merges into the current spec, the capacity
// pre-check, the accepted form of commands, and how cluster events finish
// operations. It does no I/O; the clock is passed in.
package domain

// DefaultProject is the project used when a caller has no other.
const DefaultProject = "default"

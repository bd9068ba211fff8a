package slurmcli

import "github.com/loom-ml/loom/libs/slurmspec"

// The array-spec grammar lives in libs/slurmspec, shared with the gateway,
// which reserves the array's job ids, and the scheduler.

// ParseArray parses an --array spec with slurmspec's grammar. Its task ids
// are checked only against Slurm's ceiling (slurmspec.MaxArraySizeCeiling):
// the server is the authority for the MaxArraySize configured, and refuses a
// submission above it ("Batch job submission failed: Invalid job array
// specification"), as slurmctld does; specs read back from the server were
// accepted under that setting.
func ParseArray(spec string) (*slurmspec.ArraySpec, error) {
	return slurmspec.ParseArray(spec, slurmspec.MaxArraySizeCeiling)
}

// isDigits reports whether s is a non-empty run of ASCII digits.
func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

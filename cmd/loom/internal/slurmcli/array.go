package slurmcli

import "github.com/loom-ml/loom/libs/slurmspec"

// The array-spec grammar lives in libs/slurmspec, shared with the gateway,
// which reserves the array's job ids, and the scheduler; these names keep
// slurmcli's API.

// ArrayRange is one "lo-hi:step" element of an --array spec.
type ArrayRange = slurmspec.ArrayRange

// ArraySpec is a parsed --array spec.
type ArraySpec = slurmspec.ArraySpec

// ParseArray parses an --array spec with slurmspec's grammar. Its task ids
// are checked only against Slurm's ceiling (slurmspec.MaxArraySizeCeiling):
// the server is the authority for the MaxArraySize configured, and refuses a
// submission above it ("Batch job submission failed: Invalid job array
// specification"), as slurmctld does; specs read back from the server were
// accepted under that setting.
func ParseArray(spec string) (*ArraySpec, error) {
	return slurmspec.ParseArray(spec, slurmspec.MaxArraySizeCeiling)
}

// formatIndexes writes sorted distinct indexes as Slurm prints an array's
// task list ("1-3,7").
func formatIndexes(idx []int) string { return slurmspec.FormatIndexes(idx) }

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

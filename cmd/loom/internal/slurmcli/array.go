package slurmcli

import "github.com/loom-ml/loom/libs/slurmspec"

// The array-spec grammar lives in libs/slurmspec, shared with the gateway,
// which reserves the array's job ids; these names keep slurmcli's API.

// MaxArrayIndex is the largest array task index Loom accepts.
const MaxArrayIndex = slurmspec.MaxArrayIndex

// ArrayRange is one "lo-hi:step" element of an --array spec.
type ArrayRange = slurmspec.ArrayRange

// ArraySpec is a parsed --array spec.
type ArraySpec = slurmspec.ArraySpec

// ParseArray parses and validates an --array spec (see slurmspec.ParseArray).
func ParseArray(spec string) (*ArraySpec, error) { return slurmspec.ParseArray(spec) }

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

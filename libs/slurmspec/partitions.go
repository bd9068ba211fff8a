package slurmspec

import (
	"fmt"
	"slices"
	"strings"
)

// MaxJobPartitions bounds the partitions one job names (-p a,b,...): a
// scheduling pass considers a pending job in each of them, so the list
// is kept short; Slurm's own is unbounded, and sites name a few.
const MaxJobPartitions = 16

// ParsePartitions parses -p/--partition as Slurm takes it: one partition
// name or a comma-separated list of them ("a,b"), the job going to the one
// that starts it first. A name named twice is kept once, where it first
// appears (Slurm keeps one partition pointer per name); an empty name
// ("a,,b", a trailing comma), a name with a space or '=' (which no
// partition id has: they would break slurm.conf) and more than
// MaxJobPartitions names are errors. "" is no list (the cluster's default
// partition): nil, no error.
func ParsePartitions(s string) ([]string, error) {
	if s == "" {
		return nil, nil
	}
	names := strings.Split(s, ",")
	out := make([]string, 0, len(names))
	for i, n := range names {
		switch {
		case n == "":
			return nil, fmt.Errorf("%q: partition %d of the list is empty (want NAME[,NAME...])", s, i+1)
		case strings.ContainsAny(n, " \t\r\n="):
			return nil, fmt.Errorf("%q: partition %q has a space or '=' (want NAME[,NAME...])", s, n)
		}
		dup := false
		for _, o := range out {
			dup = dup || o == n
		}
		if !dup {
			out = append(out, n)
		}
	}
	if len(out) > MaxJobPartitions {
		return nil, fmt.Errorf("%q names %d partitions, more than the %d a job may name", s, len(out), MaxJobPartitions)
	}
	return out, nil
}

// NormalizePartitions returns s as ParsePartitions reads it, written back:
// the names once each, in order, comma-separated ("a,b,a" → "a,b").
func NormalizePartitions(s string) (string, error) {
	names, err := ParsePartitions(s)
	if err != nil {
		return "", err
	}
	return strings.Join(names, ","), nil
}

// IsPartitionList reports whether s names more than one partition (it has
// a comma): the cheap test a caller makes before parsing.
func IsPartitionList(s string) bool { return strings.IndexByte(s, ',') >= 0 }

// AnyPartitionOf reports whether the partition list list (one name, or
// "a,b" as a pending job holds it) names one of names: squeue -p's filter,
// which shows a job pending in several partitions under each of them.
func AnyPartitionOf(list string, names []string) bool {
	if !IsPartitionList(list) {
		return slices.Contains(names, list)
	}
	for n := range strings.SplitSeq(list, ",") {
		if slices.Contains(names, n) {
			return true
		}
	}
	return false
}

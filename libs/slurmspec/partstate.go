package slurmspec

import (
	"fmt"
	"strings"
)

// A partition's State, as slurm.conf and scontrol write it (Slurm's
// partition_mgr.c): UP takes jobs and starts them; DOWN takes jobs but
// starts none (they wait, reason PartitionDown; running ones go on); DRAIN
// refuses new jobs but starts those queued; INACTIVE refuses new jobs and
// starts none (PartitionInactive). Loom stores UP as "" in a cluster spec.
const (
	PartitionUp       = "UP"
	PartitionDown     = "DOWN"
	PartitionDrain    = "DRAIN"
	PartitionInactive = "INACTIVE"
)

// PartitionStates are the states in scontrol's order of matching an
// abbreviation ("d" is DOWN, "dr" DRAIN).
var PartitionStates = []string{PartitionInactive, PartitionDown, PartitionUp, PartitionDrain}

// MsgPartitionNotAvail is Slurm's refusal of a submission to a DRAIN or
// INACTIVE partition (ESLURM_PARTITION_NOT_AVAIL), which scripts grep for.
const MsgPartitionNotAvail = "Required partition not available (inactive or drain)"

// CheckPartitionState accepts a cluster spec's partition state: "" (UP) or
// one of PartitionStates, in upper case.
func CheckPartitionState(s string) error {
	if s == "" {
		return nil
	}
	for _, st := range PartitionStates {
		if s == st {
			return nil
		}
	}
	return fmt.Errorf("%q is not a partition state (UP, DOWN, DRAIN or INACTIVE, upper case)", s)
}

// ParsePartitionState reads scontrol's State= value as Slurm 22.05 does: any
// case, any leading part of a state's name, matched in PartitionStates'
// order. ok is false for anything else (the empty value included).
func ParsePartitionState(s string) (state string, ok bool) {
	if s == "" {
		return "", false
	}
	for _, st := range PartitionStates {
		if len(s) <= len(st) && strings.EqualFold(s, st[:len(s)]) {
			return st, true
		}
	}
	return "", false
}

// PartitionSubmits reports whether a partition in state takes new jobs
// (UP, "", or DOWN).
func PartitionSubmits(state string) bool {
	return state == "" || state == PartitionUp || state == PartitionDown
}

// PartitionSchedules reports whether a partition in state starts its
// queued jobs (UP, "", or DRAIN).
func PartitionSchedules(state string) bool {
	return state == "" || state == PartitionUp || state == PartitionDrain
}

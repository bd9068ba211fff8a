package domain

import (
	"errors"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/clusterspec"
	"github.com/loom-ml/loom/libs/errs"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// This file is the gateway's one seam to the cluster-spec rules (the machine
// catalog, defaults, validation, how an update merges), which live in
// libs/clusterspec, shared with the provisioner (authoritative: it validates
// again).

// NormalizeSpec returns a copy of c with the spec's defaults filled in, as
// the provisioner will store it. c is not modified.
func NormalizeSpec(c *loomv1.Cluster) *loomv1.Cluster {
	out := proto.Clone(c).(*loomv1.Cluster)
	clusterspec.Normalize(out)
	return out
}

// ApplySpecUpdate returns the normalized spec that updating old with the
// fields of next named by mask (non-empty, valid paths) gives, or every
// reason the update is refused (field paths relative to the cluster).
func ApplySpecUpdate(old, next *loomv1.Cluster, mask []string) (*loomv1.Cluster, error) {
	return clusterspec.ApplyUpdate(old, next, mask)
}

// KnownMachineType reports whether the machine catalog has machine type mt.
func KnownMachineType(mt string) bool {
	_, ok := clusterspec.Machine(mt)
	return ok
}

// PrefixFields returns err with every field path of its *errs.InvalidError
// prefixed by prefix (e.g. "cluster."), so that a spec's paths name the
// request field; other errors are returned unchanged.
func PrefixFields(err error, prefix string) error {
	var inv *errs.InvalidError
	if !errors.As(err, &inv) {
		return err
	}
	out := &errs.InvalidError{Violations: make([]errs.FieldViolation, len(inv.Violations))}
	for i, v := range inv.Violations {
		out.Violations[i] = errs.FieldViolation{Field: prefix + v.Field, Reason: v.Reason}
	}
	return out
}

// violations returns the field violations of err (nil for nil), and false
// when err is some other error.
func violations(err error) ([]errs.FieldViolation, bool) {
	if err == nil {
		return nil, true
	}
	var inv *errs.InvalidError
	if !errors.As(err, &inv) {
		return nil, false
	}
	return inv.Violations, true
}

// joinInvalid merges the violations of several validation results into one
// *errs.InvalidError, dropping exact duplicates (two rule sets may flag the
// same thing); nil when there are none. An error that is not an
// InvalidError is returned as it is, first come.
func joinInvalid(results ...error) error {
	var all []errs.FieldViolation
	seen := map[errs.FieldViolation]bool{}
	for _, err := range results {
		vs, ok := violations(err)
		if !ok {
			return err
		}
		for _, v := range vs {
			if !seen[v] {
				seen[v] = true
				all = append(all, v)
			}
		}
	}
	if len(all) == 0 {
		return nil
	}
	return &errs.InvalidError{Violations: all}
}

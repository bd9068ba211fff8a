//go:build !linux || !cgo

package gpu

import (
	"context"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// NVML is the node's real GPUs through NVML; in a binary built without cgo
// (or off Linux) it is never opened: OpenNVML fails and Open falls back to
// the simulated device.
type NVML struct{}

// OpenNVML fails: this binary was built without cgo.
func OpenNVML() (*NVML, error) { return nil, errNoNVML }

// XidError says why Xids cannot be read.
func (n *NVML) XidError() error { return errNoNVML }

// Simulated reports false.
func (n *NVML) Simulated() bool { return false }

// Info is empty.
func (n *NVML) Info() []Info { return nil }

// Sample fails.
func (n *NVML) Sample(context.Context) ([]*loomv1.GpuSample, error) { return nil, errNoNVML }

// FieldErrors is empty.
func (n *NVML) FieldErrors(int) map[string]string { return nil }

// Xids fails.
func (n *NVML) Xids(context.Context) ([]Xid, error) { return nil, errNoNVML }

// Inject refuses.
func (n *NVML) Inject(*loomv1.Fault) error { return ErrNotSimulated }

// ThroughputFactor is 0.
func (n *NVML) ThroughputFactor(int) float64 { return 0 }

// Close does nothing.
func (n *NVML) Close() error { return nil }

var _ Device = (*NVML)(nil)

// Package classify turns what a node reports (Xid events, kernel-log lines,
// GPU and disk telemetry, check results) into a Verdict: how bad it is, what
// repair it calls for, whether it is urgent or the job may checkpoint first,
// and a Slurm-style reason such as "Xid 79: GPU has fallen off the bus".
//
// Xids follow NVIDIA's catalog (as GPUd carries it, embedded here as
// xid_catalog.csv): the catalog's immediate resolution decides the action.
// Telemetry has thresholds (Thresholds). Nothing here keeps state or does
// I/O: a rate is computed from the previous sample the caller hands in.
package classify

import (
	"bytes"
	_ "embed"
	"encoding/csv"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Severity is how bad a finding is.
type Severity int

const (
	// SeverityInfo is recorded only: nothing is done.
	SeverityInfo Severity = iota
	// SeverityWarning affects the job (it is restarted) or may grow into a
	// failure (a rising error rate): not urgent.
	SeverityWarning
	// SeverityCritical means the node cannot run work as it is.
	SeverityCritical
)

// String names the severity as logs and docs write it.
func (s Severity) String() string {
	switch s {
	case SeverityInfo:
		return "info"
	case SeverityWarning:
		return "warning"
	case SeverityCritical:
		return "critical"
	}
	return fmt.Sprintf("severity(%d)", int(s))
}

// Verdict is what one finding calls for.
type Verdict struct {
	Severity Severity
	// Action is the repair: ACTION_NONE (record only), ACTION_RESTART_JOB
	// (the job restarts, the node stays), ACTION_RESET_GPU, ACTION_REBOOT,
	// ACTION_REIMAGE or ACTION_REPLACE.
	Action loomv1.RemediationAction
	// Urgent: the node's work is lost already (the GPU fell off the bus, a
	// double-bit error): take it out now. Not urgent: CheckpointFirst.
	Urgent bool
	// CheckpointFirst: the job is signalled to checkpoint and given a grace
	// period before it is moved (a rising single-bit rate, thermal
	// throttling, a straggler). Never set together with Urgent.
	CheckpointFirst bool
	// Reason is Slurm-style: "Xid 79: GPU has fallen off the bus".
	Reason string
	// Xid is the Xid code when the finding is one, else 0.
	Xid int32
	// GPU is the GPU index, -1 for none or all.
	GPU int32
}

// Acts reports whether the verdict calls for anything beyond a record.
func (v Verdict) Acts() bool {
	return v.Action != loomv1.RemediationAction_ACTION_NONE && v.Action != loomv1.RemediationAction_REMEDIATION_ACTION_UNSPECIFIED
}

// Drains reports whether the verdict takes the node out of service (every
// action but none and restart-job).
func (v Verdict) Drains() bool {
	return v.Acts() && v.Action != loomv1.RemediationAction_ACTION_RESTART_JOB
}

//go:embed xid_catalog.csv
var catalogCSV []byte

// XidInfo is one catalog entry and Loom's reading of it.
type XidInfo struct {
	Xid         int32
	Mnemonic    string
	Description string
	// Immediate and Investigatory are the catalog's resolutions, verbatim.
	Immediate     string
	Investigatory string
	Action        loomv1.RemediationAction
	Severity      Severity
}

// resolutions maps the catalog's standard immediate resolutions to actions.
var resolutions = map[string]loomv1.RemediationAction{
	"RESTART_APP":     loomv1.RemediationAction_ACTION_RESTART_JOB,
	"RESET_GPU":       loomv1.RemediationAction_ACTION_RESET_GPU,
	"RESTART_BM":      loomv1.RemediationAction_ACTION_REBOOT,
	"RESTART_VM":      loomv1.RemediationAction_ACTION_REIMAGE,
	"CONTACT_SUPPORT": loomv1.RemediationAction_ACTION_REPLACE,
	"IGNORE":          loomv1.RemediationAction_ACTION_NONE,
	// The catalog's workflows and hints, read as the repair they lead to:
	// Xid 45 is a sympathetic cleanup after another Xid (act on that one);
	// Xid 48 (DBE) and NVLink errors are cleared by a GPU reset (a row remap
	// takes effect then); a board without auxiliary power needs hands on
	// site; a vGPU start error wants new software (a reimage); Xid 154 only
	// reports another Xid's recovery action; a CHI non-data error points at
	// the application's unified memory use.
	"WORKFLOW_XID_45":      loomv1.RemediationAction_ACTION_NONE,
	"WORKFLOW_XID_48":      loomv1.RemediationAction_ACTION_RESET_GPU,
	"WORKFLOW_NVLINK_ERR":  loomv1.RemediationAction_ACTION_RESET_GPU,
	"WORKFLOW_NVLINK5_ERR": loomv1.RemediationAction_ACTION_RESET_GPU,
	"CHECK_MECHANICALS":    loomv1.RemediationAction_ACTION_REPLACE,
	"UPDATE_SWFW":          loomv1.RemediationAction_ACTION_REIMAGE,
	"XID_154":              loomv1.RemediationAction_ACTION_NONE,
	"CHECK_UVM":            loomv1.RemediationAction_ACTION_RESTART_JOB,
}

// blank are the newest Xids, whose catalog row has no resolution yet:
// read from their descriptions. Power-smoothing notices are informational;
// the others are GPU faults a reset clears, except a fatal PCIe timeout (the
// node's bus: reboot).
var blank = map[int32]loomv1.RemediationAction{
	162: loomv1.RemediationAction_ACTION_NONE,      // PSHC_REENGAGED
	163: loomv1.RemediationAction_ACTION_NONE,      // PSHC_DISENGAGED
	164: loomv1.RemediationAction_ACTION_NONE,      // PSHC_LOW_LIFETIME
	165: loomv1.RemediationAction_ACTION_NONE,      // PSHC_ZERO_LIFETIME
	166: loomv1.RemediationAction_ACTION_RESET_GPU, // NVLINK_SECURE_CRYPTO_ERR
	167: loomv1.RemediationAction_ACTION_REBOOT,    // PCIE_FATAL_TIMEOUT
	168: loomv1.RemediationAction_ACTION_RESET_GPU, // REDUCED_GPU_MEMORY_CAPACITY
	169: loomv1.RemediationAction_ACTION_RESET_GPU, // SEC2_HALT_ERROR (as Xid 62)
	170: loomv1.RemediationAction_ACTION_RESET_GPU, // NVLINK_SECURE_OTHER
	171: loomv1.RemediationAction_ACTION_RESET_GPU, // UNCORRECTABLE_DRAM_ERROR (with Xid 48)
	172: loomv1.RemediationAction_ACTION_RESET_GPU, // UNCORRECTABLE_SRAM_ERROR (with Xid 48)
}

var catalog = mustLoad(catalogCSV)

func mustLoad(b []byte) map[int32]XidInfo {
	m, err := load(b)
	if err != nil {
		panic(err) // the embedded file is part of the binary: a test covers it
	}
	return m
}

func load(b []byte) (map[int32]XidInfo, error) {
	rows, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("xid catalog: %w", err)
	}
	if len(rows) < 2 || strings.Join(rows[0], ",") != "xid,mnemonic,description,immediate_resolution,investigatory_resolution" {
		return nil, fmt.Errorf("xid catalog: unexpected header %v", rows[:min(1, len(rows))])
	}
	out := make(map[int32]XidInfo, len(rows)-1)
	for _, r := range rows[1:] {
		x, err := strconv.ParseInt(r[0], 10, 32)
		if err != nil {
			return nil, fmt.Errorf("xid catalog: xid %q: %w", r[0], err)
		}
		info := XidInfo{Xid: int32(x), Mnemonic: strings.TrimSpace(r[1]), Description: describe(r[2]),
			Immediate: strings.TrimSpace(r[3]), Investigatory: strings.TrimSpace(r[4])}
		if info.Immediate == "" {
			a, ok := blank[info.Xid]
			if !ok {
				return nil, fmt.Errorf("xid catalog: xid %d has no resolution and no reading", x)
			}
			info.Action = a
		} else {
			a, ok := resolutions[info.Immediate]
			if !ok {
				return nil, fmt.Errorf("xid catalog: xid %d: unknown resolution %q", x, info.Immediate)
			}
			info.Action = a
		}
		info.Severity = severityOf(info.Action)
		out[info.Xid] = info
	}
	return out, nil
}

// describe trims the catalog's description to a reason: the driver-version
// notes after " | " are dropped.
func describe(s string) string {
	if i := strings.Index(s, " | "); i >= 0 {
		s = s[:i]
	}
	return strings.TrimSpace(s)
}

func severityOf(a loomv1.RemediationAction) Severity {
	switch a {
	case loomv1.RemediationAction_ACTION_NONE:
		return SeverityInfo
	case loomv1.RemediationAction_ACTION_RESTART_JOB:
		return SeverityWarning
	}
	return SeverityCritical
}

// Catalog returns every Xid the catalog knows, by code.
func Catalog() []XidInfo {
	out := make([]XidInfo, 0, len(catalog))
	for _, i := range catalog {
		out = append(out, i)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Xid < out[b].Xid })
	return out
}

// Lookup returns the catalog entry of an Xid; ok is false for an Xid the
// catalog does not know.
func Lookup(xid int32) (XidInfo, bool) {
	i, ok := catalog[xid]
	return i, ok
}

// Xid classifies Xid code seen on GPU gpu. A critical Xid is urgent; an
// application's (RESTART_APP) restarts the job and leaves the node in
// service. An Xid the catalog does not know is taken as a GPU fault a reset
// may clear, so that a new driver's codes are not ignored.
func Xid(gpu, code int32) Verdict {
	info, ok := catalog[code]
	if !ok {
		info = XidInfo{Xid: code, Description: "unknown Xid", Action: loomv1.RemediationAction_ACTION_RESET_GPU, Severity: SeverityCritical}
	}
	return Verdict{
		Severity: info.Severity,
		Action:   info.Action,
		Urgent:   info.Severity == SeverityCritical,
		Reason:   fmt.Sprintf("Xid %d: %s", code, info.Description),
		Xid:      code,
		GPU:      gpu,
	}
}

// KernelXid is one NVRM Xid line of the kernel log.
type KernelXid struct {
	// PCI is the GPU's bus id as the driver prints it: "PCI:0000:9b:00".
	PCI string
	Xid int32
	// PID and Name are the process the driver blames; PID is 0 and Name
	// empty when the line has none (or "<unknown>").
	PID  int
	Name string
	// Message is the text after the process, e.g. "Timeout after 6s of ...".
	Message string
}

// kernelXid matches the driver's line in both its forms:
//
//	NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, name=nvidia-smi, Timeout after 6s ...
//	NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.
var kernelXid = regexp.MustCompile(`NVRM: Xid \(([^)]*)\): (\d+),\s*(?:pid=([^,]*),\s*)?(?:name=([^,]*),\s*)?(.*)$`)

// ParseKernelLine reads an NVRM Xid line of dmesg or the journal (any prefix
// such as "[Sun Feb 23 16:24:18 2025] " is skipped); ok is false for any
// other line.
func ParseKernelLine(line string) (KernelXid, bool) {
	m := kernelXid.FindStringSubmatch(strings.TrimRight(line, "\r\n"))
	if m == nil {
		return KernelXid{}, false
	}
	x, err := strconv.ParseInt(m[2], 10, 32)
	if err != nil {
		return KernelXid{}, false
	}
	k := KernelXid{PCI: m[1], Xid: int32(x), Message: strings.TrimSpace(m[5])}
	if pid, err := strconv.Atoi(strings.Trim(m[3], "'")); err == nil {
		k.PID = pid
	}
	if name := strings.TrimSpace(m[4]); name != "<unknown>" {
		k.Name = name
	}
	return k, true
}

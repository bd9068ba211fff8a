package healthcheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// DiagReport is the JSON `dcgmi diag -j` prints, which gpu_diag also writes
// (the result's detail) when it runs its own tests.
type DiagReport struct {
	Diag DiagBody `json:"DCGM GPU Diagnostic"`
}

// DiagBody is the report's body: test categories (Deployment, Hardware,
// Integration, Stress), each with its tests.
type DiagBody struct {
	Categories []DiagCategory `json:"test_categories"`
	Version    string         `json:"version,omitempty"`
}

// DiagCategory is one category of tests.
type DiagCategory struct {
	Category string     `json:"category"`
	Tests    []DiagTest `json:"tests"`
}

// DiagTest is one test and its results, one per GPU or GPU set.
type DiagTest struct {
	Name    string       `json:"name"`
	Results []DiagResult `json:"results"`
}

// DiagResult is one test's result on the GPUs gpu_ids lists (dcgmi leaves
// gpu_ids out on some results; the GPU is then in the info lines).
type DiagResult struct {
	GPUIDs   string        `json:"gpu_ids,omitempty"`
	Status   string        `json:"status"` // PASS, FAIL, WARN, SKIP
	Info     []string      `json:"info,omitempty"`
	Warnings []DiagWarning `json:"warnings,omitempty"`
}

// DiagWarning is a warning or failure reason with DCGM's error id.
type DiagWarning struct {
	Warning string `json:"warning"`
	ErrorID int    `json:"error_id"`
}

// Statuses of a DiagResult.
const (
	StatusPass = "PASS"
	StatusFail = "FAIL"
	StatusWarn = "WARN"
	StatusSkip = "SKIP"
)

// ParseDiag reads `dcgmi diag -j` output. Output without the "DCGM GPU
// Diagnostic" body (another tool's, or an error text) is an error.
func ParseDiag(b []byte) (*DiagReport, error) {
	var r DiagReport
	if err := json.Unmarshal(bytes.TrimSpace(b), &r); err != nil {
		return nil, fmt.Errorf("dcgmi diag output is not its JSON: %w", err)
	}
	if len(r.Diag.Categories) == 0 {
		return nil, errors.New(`dcgmi diag output has no "DCGM GPU Diagnostic" test categories`)
	}
	return &r, nil
}

// DCGM's failure reason ids (dcgm_errors.h, dcgmError_t): the error_id of
// a DiagWarning. gpu_diag's own tests report these, as dcgmi does, so that
// a report reads the same whichever wrote it; health chooses a failure's
// repair by them (the rest ask for a reboot).
const (
	DCGMVolatileDBE          = 4   // DCGM_FR_VOLATILE_DBE_DETECTED
	DCGMPendingRetirements   = 6   // DCGM_FR_PENDING_PAGE_RETIREMENTS
	DCGMNVLinkErrorThreshold = 13  // DCGM_FR_NVLINK_ERROR_THRESHOLD
	DCGMDeviceCountMismatch  = 20  // DCGM_FR_DEVICE_COUNT_MISMATCH
	DCGMFieldQuery           = 27  // DCGM_FR_FIELD_QUERY (also a driver version that differs: DCGM has no closer id)
	DCGMThrottlingViolation  = 43  // DCGM_FR_THROTTLING_VIOLATION
	DCGMStressLevel          = 50  // DCGM_FR_STRESS_LEVEL
	DCGMFaultyMemory         = 52  // DCGM_FR_FAULTY_MEMORY
	DCGMMemoryMismatch       = 58  // DCGM_FR_MEMORY_MISMATCH
	DCGMAPIFailGPU           = 65  // DCGM_FR_API_FAIL_GPU
	DCGMRowRemapFailure      = 80  // DCGM_FR_ROW_REMAP_FAILURE
	DCGMDBEPendingRetirement = 83  // DCGM_FR_DBE_PENDING_PAGE_RETIREMENTS
	DCGMUncorrectableRemap   = 84  // DCGM_FR_UNCORRECTABLE_ROW_REMAP
	DCGMPendingRowRemap      = 85  // DCGM_FR_PENDING_ROW_REMAP
	DCGMXidError             = 101 // DCGM_FR_XID_ERROR
	DCGMPCIeReplayThreshold  = 107 // DCGM_FR_PCIE_REPLAY_THRESHOLD_VIOLATION
)

// FailedErrorIDs lists the DCGM error ids of the report's FAIL results, in
// report order (WARN and SKIP results ask for nothing).
func (r *DiagReport) FailedErrorIDs() []int {
	var ids []int
	for _, c := range r.Diag.Categories {
		for _, t := range c.Tests {
			for _, res := range t.Results {
				if !strings.EqualFold(res.Status, StatusFail) {
					continue
				}
				for _, w := range res.Warnings {
					ids = append(ids, w.ErrorID)
				}
			}
		}
	}
	return ids
}

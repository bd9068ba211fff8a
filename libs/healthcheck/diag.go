package healthcheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
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

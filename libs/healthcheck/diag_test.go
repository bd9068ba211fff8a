package healthcheck

import (
	"os"
	"slices"
	"testing"
)

// A real `dcgmi diag -j` report (DCGM's own test sample): three GPUs fail
// sm_stress with DCGM_FR_STRESS_LEVEL; the SKIPs' ids (ECC disabled, test
// disabled) ask for nothing.
func TestDiagFixtureFailedErrorIDs(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("testdata/dcgmi_diag.json")
	if err != nil {
		t.Fatal(err)
	}
	rep, err := ParseDiag(b)
	if err != nil {
		t.Fatal(err)
	}
	if ids := rep.FailedErrorIDs(); !slices.Equal(ids, []int{DCGMStressLevel, DCGMStressLevel, DCGMStressLevel}) {
		t.Fatalf("failed error ids %v, want three %d", ids, DCGMStressLevel)
	}
	for _, bad := range []string{"", "dcgmi: command not found", `{"other": 1}`, `{"DCGM GPU Diagnostic": {"test_categories": []}}`} {
		if _, err := ParseDiag([]byte(bad)); err == nil {
			t.Errorf("ParseDiag(%q) = nil error", bad)
		}
	}
}

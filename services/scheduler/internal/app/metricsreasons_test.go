package app

import (
	"testing"

	"github.com/loom-ml/loom/services/scheduler/internal/domain"
)

// TestReasonLabelNamesAssocTRESReasons: the pending reasons of the TRES
// limits label loom_scheduler_jobs by name, not as "other".
func TestReasonLabelNamesAssocTRESReasons(t *testing.T) {
	t.Parallel()
	for _, r := range []string{domain.ReasonAssocGrpGRES, domain.ReasonAssocGrpCpuLimit, domain.ReasonAssocGrpNodeLimit,
		domain.ReasonAssocGrpMemLimit, domain.ReasonAssocMaxGRESPerJob, domain.ReasonAssocMaxCpuPerJobLimit,
		domain.ReasonAssocMaxNodePerJobLimit, domain.ReasonAssocMaxMemPerJob, domain.ReasonAssocMaxWallDurationPerJobLimit} {
		if got := reasonLabel(r); got != r {
			t.Errorf("reasonLabel(%q) = %q", r, got)
		}
	}
}

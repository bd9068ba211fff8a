package domain

import (
	"testing"

	"github.com/loom-ml/loom/services/scheduler/internal/domain/jobstore"
	"github.com/loom-ml/loom/services/scheduler/internal/domain/place"
)

// TestRoleLoginAgrees: jobstore.Node.Usable and placement's login check
// read the same role string (each package keeps its own constant, since
// neither imports the other).
func TestRoleLoginAgrees(t *testing.T) {
	t.Parallel()
	if jobstore.RoleLogin != place.RoleLogin {
		t.Fatalf("jobstore.RoleLogin %q, place.RoleLogin %q", jobstore.RoleLogin, place.RoleLogin)
	}
}

package sim

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/services/scheduler/internal/domain"
)

// Policies are the scheduling policies a trace can be run under:
//   - fifo: strict first come, first served; a job that does not fit blocks
//     every job of its partition behind it (no backfill).
//   - easy: first come, first served with EASY backfill: a later job may
//     start when it does not delay the first job's reserved start.
//   - loom: Loom's default policy (multifactor priority and backfill).
var Policies = []string{"fifo", "easy", "loom"}

// DomainConfig returns the domain configuration of a policy.
func DomainConfig(policy string) (domain.Config, error) {
	if slices.Contains(Policies, policy) {
		if p, ok := domain.PolicyByName(policy); ok {
			return domain.Config{Policy: p}, nil
		}
	}
	return domain.Config{}, fmt.Errorf("%w %q: want one of %s", ErrUnknownPolicy, policy, strings.Join(Policies, ", "))
}

func timestampOf(t time.Time) *timestamppb.Timestamp { return timestamppb.New(t) }

package loomv1

import "testing"

// TestJobStateTerminal: exactly the seven ended states are terminal; every
// other state, and a state this build does not know, is not.
func TestJobStateTerminal(t *testing.T) {
	t.Parallel()
	ended := map[JobState]bool{JobState_COMPLETED: true, JobState_FAILED: true, JobState_CANCELLED: true,
		JobState_TIMEOUT: true, JobState_NODE_FAIL: true, JobState_OUT_OF_MEMORY: true, JobState_PREEMPTED: true}
	for v := range JobState_name {
		s := JobState(v)
		if got := s.Terminal(); got != ended[s] {
			t.Errorf("%v.Terminal() = %v, want %v", s, got, ended[s])
		}
	}
	if JobState(9999).Terminal() {
		t.Error("an unknown state is terminal")
	}
}

package domain

import (
	"testing"

	"github.com/loom-ml/loom/libs/acct"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

func TestUsageReport(t *testing.T) {
	t.Parallel()
	self := Self{Node: "n1", Cluster: "c"}
	if ev := UsageReport(self, "j", 1, RunUsage{}); ev != nil {
		t.Errorf("nothing to report gave %v", ev)
	}
	step := acct.Usage{MaxRSS: 7}
	ev := UsageReport(self, "j", 2, RunUsage{Step: &step, Tasks: map[int32][]acct.Usage{3: {{MaxRSS: 1}, {MaxRSS: 2}}, 1: {{MaxRSS: 9}}}})
	if ev.GetJob() != "j" || ev.GetAttempt() != 2 || ev.GetNode() != "n1" || ev.GetCluster() != "c" || ev.GetUsage().GetMaxRssBytes() != 7 {
		t.Fatalf("report %v", ev)
	}
	if len(ev.JobSteps) != 2 || ev.JobSteps[0].StepId != 1 || ev.JobSteps[1].StepId != 3 || ev.JobSteps[1].Tasks[1].GetMaxRssBytes() != 2 {
		t.Errorf("job steps %v: want steps 1 then 3, tasks by local id", ev.JobSteps)
	}
}

func TestGPUShare(t *testing.T) {
	t.Parallel()
	reading := []*loomv1.GpuSample{{Index: 0, GpuUtilPercent: 90, MemoryUsedBytes: 10}, {Index: 1, GpuUtilPercent: 50, MemoryUsedBytes: 30},
		{Index: 2, Lost: true}}
	if util, mem, ok := GPUShare(reading, []int{0, 1}); !ok || util != 70 || mem != 30 {
		t.Errorf("GPUs 0,1: %v %v %v, want 70%% and 30 bytes", util, mem, ok)
	}
	// A lost GPU, or one the reading does not have, says nothing.
	if _, _, ok := GPUShare(reading, []int{2, 7}); ok {
		t.Error("a lost and an unknown GPU gave a share")
	}
	if _, _, ok := GPUShare(nil, []int{0}); ok {
		t.Error("no reading gave a share")
	}
}

// TestJudgeMemory: a sample past the limit with exact figures kills; one
// past it only with processes unread (their PSS taken as RSS) holds the
// kill, and the next past it within MemoryDoubtSamples kills, exact or
// not; a sample within the limit shortens the doubt by one.
func TestJudgeMemory(t *testing.T) {
	t.Parallel()
	const limit = 100
	for _, tc := range []struct {
		name   string
		held   int64
		limit  int64
		unread bool
		doubt  int
		want   MemoryVerdict
	}{
		{"within", 100, limit, false, 0, MemoryVerdict{}},
		{"within, unread", 90, limit, true, 3, MemoryVerdict{Doubt: 2}},
		{"within, the doubt's last", 90, limit, false, 1, MemoryVerdict{}},
		{"no limit", 1 << 40, 0, false, 0, MemoryVerdict{}},
		{"past, exact", 101, limit, false, 0, MemoryVerdict{Kill: true}},
		{"past, unread: hold", 101, limit, true, 0, MemoryVerdict{Doubt: MemoryDoubtSamples}},
		{"past, unread again: kill", 101, limit, true, MemoryDoubtSamples, MemoryVerdict{Kill: true}},
		{"past, unread within the doubt: kill", 101, limit, true, 1, MemoryVerdict{Kill: true}},
		{"past, exact after a doubt", 101, limit, false, MemoryDoubtSamples, MemoryVerdict{Kill: true}},
	} {
		if got := JudgeMemory(tc.held, tc.limit, tc.unread, tc.doubt); got != tc.want {
			t.Errorf("%s: JudgeMemory(%d, %d, unread %v, doubt %d) = %+v, want %+v",
				tc.name, tc.held, tc.limit, tc.unread, tc.doubt, got, tc.want)
		}
	}
}

// TestJudgeMemoryAlternating: a process that stalls its reads while past
// its limit and lets them go, back within it, for every other sample
// (stall.Start's hold, released at will) is killed at its second stalled
// sample past the limit: a sample within the limit does not give it
// another doubt.
func TestJudgeMemoryAlternating(t *testing.T) {
	t.Parallel()
	const limit = 100
	doubt := 0
	for i := range 4 {
		held, unread := int64(50), false // exact, within
		if i%2 == 0 {
			held, unread = 500, true // stalled: its RSS, past
		}
		v := JudgeMemory(held, limit, unread, doubt)
		if v.Kill {
			if i != 2 {
				t.Fatalf("killed at sample %d, want at 2", i)
			}
			return
		}
		doubt = v.Doubt
	}
	t.Fatal("never killed, past its limit at every other sample")
}

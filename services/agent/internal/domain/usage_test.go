package domain

import (
	"testing"

	"github.com/loom-ml/loom/libs/acct"
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

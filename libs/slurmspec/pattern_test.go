package slurmspec

import "testing"

func TestExpandPattern(t *testing.T) {
	t.Parallel()
	batch := PatternFields{JobID: "42", ArrayJobID: "40", ArrayTaskID: "2", Name: "train", User: "ada", Node: "gpu-0001"}
	task := batch
	task.StepID, task.TaskID, task.NodeID = "3", "5", "1"
	for _, c := range []struct {
		f       PatternFields
		in, out string
	}{
		{batch, "slurm-%j.out", "slurm-42.out"}, {batch, "%A_%a.log", "40_2.log"},
		{batch, "%x-%u-%N.txt", "train-ada-gpu-0001.txt"}, {batch, "100%%-%5j", "100%-00042"},
		{batch, "%q", "%q"}, {batch, "plain", "plain"}, {batch, "end%", "end%"},
		// A batch script's pattern has no step or task: left as written.
		{batch, "o-%t-%s-%J-%n", "o-%t-%s-%J-%n"},
		{task, "o-%t-%s-%J-%n-%3t", "o-5-3-42.3-1-005"},
		// Widths past Slurm's MAX_WIDTH are read as it (checked against
		// Slurm 22.05: -o w-%20j.out made w-0000000053.out), however long:
		// a width past an int once panicked the scheduler expanding it.
		{batch, "w-%20j", "w-0000000042"}, {batch, "%012t%10a", "%012t0000000002"},
		{batch, "%99999999999999999999999999j", "0000000042"}, {batch, "%12x", "train"},
	} {
		if got := ExpandPattern(c.in, c.f); got != c.out {
			t.Errorf("ExpandPattern(%q) = %q, want %q", c.in, got, c.out)
		}
	}
}

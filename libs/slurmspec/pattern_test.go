package slurmspec

import (
	"strings"
	"testing"
)

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

func TestExpandedBound(t *testing.T) {
	t.Parallel()
	long := PatternFields{JobID: "18446744073709551615", ArrayJobID: "18446744073709551615", ArrayTaskID: "18446744073709551615",
		StepID: "18446744073709551615", TaskID: "18446744073709551615", NodeID: "18446744073709551615",
		Name: strings.Repeat("x", 256), User: strings.Repeat("u", 256), Node: strings.Repeat("n", 256)}
	for _, p := range []string{"", "out.txt", "slurm-%j.out", "%x-%u-%N-%A_%a.%J.%s.%t.%n", "%%x%5j%20a", "%", "%x%", "%q%x", strings.Repeat("%x", 2048)} {
		b, got := ExpandedBound(p, 256), len(ExpandPattern(p, long))
		if b < got {
			t.Errorf("ExpandedBound(%.40q) = %d, below the %d bytes it expands to", p, b, got)
		}
		if b > got+5*len(p) {
			t.Errorf("ExpandedBound(%.40q) = %d, far above the %d bytes it expands to at most", p, b, got)
		}
	}
	if b := ExpandedBound(strings.Repeat("%x", 2048), 256); b != 2048*256 {
		t.Errorf("2048 %%x of names of 256 bytes: bound %d, want %d", b, 2048*256)
	}
}

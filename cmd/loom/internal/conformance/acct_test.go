package conformance

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// kib reads a memory figure as Slurm prints it ("30012K", "100M") in KiB;
// -1 when it is not one.
func kib(s string) int {
	// sacct prints a size in the largest unit that keeps it exact or a
	// half: "221176K", but "100M" for 100 MiB exactly, "1.50G".
	i := strings.IndexAny(s, "KMGT")
	if i <= 0 || i != len(s)-1 {
		return -1
	}
	n, err := strconv.ParseFloat(s[:i], 64)
	if err != nil || n < 0 {
		return -1
	}
	for range strings.IndexByte("KMGT", s[i]) {
		n *= 1024
	}
	return int(n)
}

// TestJobAccounting: sstat shows what a running srun step's tasks use (the
// agents report every second here), and sacct what the step and the batch
// script used once they ended, in Slurm's units; the job's row sums its
// steps' CPU time; seff reads the same.
func TestJobAccounting(t *testing.T) {
	needs(t, needSteps)
	t.Parallel()
	s := setup(t).session(t, "main")
	id := s.sbatch(s.script("acct.sh"))
	s.waitFor(60*time.Second, "both tasks to hold their memory", func() bool {
		return fileExists(s.path("held-0")) && fileExists(s.path("held-1"))
	})
	var row []string
	s.waitFor(30*time.Second, "sstat to show the step's tasks holding 30 MB", func() bool {
		out := s.ok("sstat", "-n", "-P", "-j", id, "-o", "JobID,NTasks,MaxRSS,MaxRSSNode,AveRSS,Nodelist")
		row = strings.Split(strings.TrimSpace(out), "|")
		return len(row) == 6 && kib(row[4]) >= 29000
	})
	wantEqual(t, "sstat JobID", row[0], id+".0")
	wantEqual(t, "sstat NTasks", row[1], "2")
	wantEqual(t, "sstat Nodelist", row[5], "gpu-[0001-0002]")
	if kib(row[2]) < 29000 || !strings.HasPrefix(row[3], "gpu-000") {
		t.Errorf("sstat row %q: want MaxRSS of at least 29000K on one of the nodes", row)
	}
	if err := os.WriteFile(s.path("release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := s.waitDone(id, 60*time.Second); state(r) != "COMPLETED" {
		t.Fatalf("job %s ended %s; output:\n%s", id, r["State"], s.read("acct-"+id+".out"))
	}
	rows := map[string][]string{}
	for _, l := range strings.Split(strings.TrimSpace(s.ok("sacct", "-n", "-P", "-j", id, "-o", "JobID,MaxRSS,AveRSS,TotalCPU,NTasks")), "\n") {
		f := strings.Split(l, "|")
		rows[f[0]] = f
	}
	step, batch, job := rows[id+".0"], rows[id+".batch"], rows[id]
	if len(step) != 5 || len(batch) != 5 || len(job) != 5 {
		t.Fatalf("sacct rows %v: want the job, its batch step and step 0", rows)
	}
	if kib(step[1]) < 29000 || kib(step[2]) < 29000 || step[4] != "2" {
		t.Errorf("sacct %s.0: %q, want MaxRSS and AveRSS of at least 29000K over 2 tasks", id, step)
	}
	if kib(batch[1]) <= 0 || batch[4] != "1" {
		t.Errorf("sacct %s.batch: %q, want the batch script's own MaxRSS, 1 task", id, batch)
	}
	if job[1] != "" || job[3] == "00:00:00" || job[3] == "" {
		t.Errorf("sacct %s: %q, want no MaxRSS on the job's row and its steps' CPU time", id, job)
	}
	// seff reads the same figures: the step's two tasks' 30 MB peaks.
	eff := s.ok("seff", id)
	if !strings.Contains(eff, "State: COMPLETED (exit code 0)\nNodes: 2\n") || !strings.Contains(eff, "Memory Utilized: ") ||
		strings.Contains(eff, "Memory Utilized: 0.00 MB") || strings.Contains(eff, " KB\n") {
		t.Errorf("seff %s:\n%s\nwant the job COMPLETED on 2 nodes and its tasks' memory (tens of MB)", id, eff)
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// TestOverMemoryKill: a job whose processes hold more than its --mem is
// killed at the next sample with Slurm's line in its output, and ends
// OUT_OF_MEMORY (Slurm's OverMemoryKill).
func TestOverMemoryKill(t *testing.T) {
	// Not a refusal: the suite's Slurm gathers no usage
	// (JobAcctGatherType=jobacct_gather/none, no cgroups), so nothing
	// there kills a job over its --mem.
	skipOnSlurm(t, "the suite's real Slurm runs JobAcctGatherType=jobacct_gather/none: it enforces no --mem (no OverMemoryKill)")
	t.Parallel()
	s := setup(t).session(t, "main")
	id := s.sbatch("--mem=20M", "-o", "oom-%j.out", "--wrap", `x=$(head -c 40000000 /dev/zero | tr "\0" a); sleep 300`)
	r := s.waitDone(id, 90*time.Second)
	if state(r) != "OUT_OF_MEMORY" {
		t.Errorf("job %s ended %s %s, want OUT_OF_MEMORY", id, r["State"], r["ExitCode"])
	}
	if out := s.read("oom-" + id + ".out"); !strings.Contains(out, "slurmstepd: error: Job "+id+" exceeded memory limit (") ||
		!strings.Contains(out, " > 20480), being killed") {
		t.Errorf("job %s's output lacks Slurm's memory line:\n%s", id, out)
	}
}

// TestKib: the figures sacct prints, in every unit it picks.
func TestKib(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]int{"30012K": 30012, "100M": 102400, "1.50G": 1572864, "0": -1, "12": -1, "K": -1, "2MK": -1} {
		if got := kib(s); got != want {
			t.Errorf("kib(%q) = %d, want %d", s, got, want)
		}
	}
}

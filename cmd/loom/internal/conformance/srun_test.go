package conformance

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

var taskLine = regexp.MustCompile(`^([0-9]+): task procid=([0-9]+) localid=([0-9]+) nodeid=([0-9]+) host=(\S+) ntasks=([0-9]+) step=([0-9]+) stepnodes=(\S+) master=(\S+)$`)

// TestSrunMultiNode: srun_multinode.sh on two nodes, two tasks per node:
// plain srun starts the job's four tasks on both nodes with global ranks
// (block distribution), each exactly once, labelled by rank; the script sees
// the highest exit code of a step's tasks.
// distLine is a task's line of srun_distribution.sh, labelled by srun -l.
var distLine = regexp.MustCompile(`^([0-9]+): task (\S+) procid=([0-9]+) localid=([0-9]+) nodeid=([0-9]+) gtids=(\S+) tpn=(\S+) dist=(\S+) plane=(\S*)$`)

// TestSrunDistribution: srun -m cyclic and plane=N in a two-node
// allocation number the tasks of each node as Slurm 22.05 does (measured
// beside it: salloc -N3 --exclusive, then the same sruns): which node runs
// which rank, SLURM_LOCALID, SLURM_GTIDS, SLURM_STEP_TASKS_PER_NODE,
// SLURM_DISTRIBUTION (SLURM_DIST_PLANESIZE), srun -l's labels, and
// scontrol show step's Dist= of the running step, which the batch script
// asks while task 0 waits for it.
func TestSrunDistribution(t *testing.T) {
	needs(t, needSteps)
	t.Parallel()
	s := setup(t).session(t, "main")
	id := s.sbatch(s.script("srun_distribution.sh"))
	row := s.waitDone(id, 120*time.Second)
	out := s.read("srundist-" + id + ".out")
	if state(row) != "COMPLETED" || !strings.Contains(out, "done\n") {
		t.Errorf("job %s ended %s %s, want COMPLETED; output:\n%s", id, row["State"], row["ExitCode"], out)
	}
	want := map[string]struct {
		ranks          [2][]int // each node's, by local id
		tpn, dist, dst string
		plane          string
	}{
		"cyclic":   {[2][]int{{0, 2, 4}, {1, 3, 5}}, "3(x2)", "cyclic", "Dist=Cyclic", ""},
		"plane2n5": {[2][]int{{0, 1, 4}, {2, 3}}, "3,2", "plane", "Dist=Plane", "2"},
		"plane2n6": {[2][]int{{0, 1, 4, 5}, {2, 3}}, "4,2", "plane", "Dist=Plane", "2"},
		"cblock":   {[2][]int{{0, 2}, {1, 3}}, "2(x2)", "cyclic:block", "Dist=CBlock", ""},
		"default":  {[2][]int{{0, 1, 2}, {3, 4, 5}}, "3(x2)", "block", "Dist=Block", ""},
	}
	got := map[string]*[2][]int{}
	for _, l := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(l, "step "); ok {
			name, dist, _ := strings.Cut(rest, " ")
			if w, known := want[name]; !known || dist != w.dst {
				t.Errorf("step %s: scontrol show step says %q, want %q", name, dist, w.dst)
			}
			continue
		}
		m := distLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		name := m[2]
		w, known := want[name]
		if !known {
			t.Errorf("line of an unknown step: %q", l)
			continue
		}
		wantEqual(t, name+": label of rank "+m[3], m[1], m[3])
		rank, _ := strconv.Atoi(m[3])
		local, _ := strconv.Atoi(m[4])
		node, _ := strconv.Atoi(m[5])
		if node > 1 {
			t.Errorf("%s: rank %d on node %d of 2", name, rank, node)
			continue
		}
		if got[name] == nil {
			got[name] = &[2][]int{}
		}
		for len(got[name][node]) <= local {
			got[name][node] = append(got[name][node], -1)
		}
		got[name][node][local] = rank
		gtids := strings.Trim(strings.Join(strings.Fields(fmt.Sprint(w.ranks[node])), ","), "[]")
		wantEqual(t, fmt.Sprintf("%s: rank %d SLURM_GTIDS", name, rank), m[6], gtids)
		wantEqual(t, fmt.Sprintf("%s: rank %d SLURM_STEP_TASKS_PER_NODE", name, rank), m[7], w.tpn)
		wantEqual(t, fmt.Sprintf("%s: rank %d SLURM_DISTRIBUTION", name, rank), m[8], w.dist)
		wantEqual(t, fmt.Sprintf("%s: rank %d SLURM_DIST_PLANESIZE", name, rank), m[9], w.plane)
	}
	for name, w := range want {
		if g := got[name]; g == nil || fmt.Sprint(*g) != fmt.Sprint(w.ranks) {
			t.Errorf("%s: ranks by node %v, want %v; output:\n%s", name, g, w.ranks, out)
		}
		if name != "plane2n5" && !strings.Contains(out, "step "+name+" ") {
			t.Errorf("%s: no Dist= line; output:\n%s", name, out)
		}
	}
}

func TestSrunMultiNode(t *testing.T) {
	needs(t, needSteps)
	t.Parallel()
	s := setup(t).session(t, "main")
	id := s.sbatch(s.script("srun_multinode.sh"))
	row := s.waitDone(id, 120*time.Second)
	out := s.read("srunmn-" + id + ".out")
	if state(row) != "COMPLETED" {
		t.Errorf("job %s ended %s %s, want COMPLETED; output:\n%s", id, row["State"], row["ExitCode"], out)
	}
	master := ""
	seen := map[int]int{}
	for _, l := range strings.Split(out, "\n") {
		if m, ok := strings.CutPrefix(l, "batch master="); ok {
			master = m
		}
		m := taskLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		label, _ := strconv.Atoi(m[1])
		rank, _ := strconv.Atoi(m[2])
		seen[rank]++
		wantEqual(t, "label of rank "+m[2], m[1], m[2])
		wantNode := rank / 2 // block distribution: ranks 0,1 on node 0; 2,3 on node 1
		want := map[string]string{
			"localid": strconv.Itoa(rank % 2), "nodeid": strconv.Itoa(wantNode),
			"host": fmt.Sprintf("gpu-%04d", wantNode+1), "ntasks": "4", "step": "0",
			"stepnodes": "gpu-[0001-0002]",
		}
		got := map[string]string{"localid": m[3], "nodeid": m[4], "host": m[5], "ntasks": m[6], "step": m[7], "stepnodes": m[8]}
		for k, w := range want {
			wantEqual(t, fmt.Sprintf("task %d (label %d) %s", rank, label, k), got[k], w)
		}
		if m[9] != master || master == "" || strings.HasSuffix(master, ":") {
			t.Errorf("task %d MASTER_ADDR:PORT = %q, want the batch script's %q", rank, m[9], master)
		}
	}
	for r := 0; r < 4; r++ {
		if seen[r] != 1 {
			t.Errorf("rank %d printed %d times, want once; output:\n%s", r, seen[r], out)
		}
	}
	if len(seen) != 4 {
		t.Errorf("ranks seen %v, want exactly 0..3", seen)
	}
	for _, want := range []string{"srun1 exit=0\n", "srun2 exit=3\n", "srun3 exit=5\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(out, "srun: error: gpu-0002: task 1: Exited with exit code 5") {
		t.Errorf("output lacks srun's report of task 1 on gpu-0002:\n%s", out)
	}
	// sacct lists the numbered steps after the batch step, as Slurm does.
	steps := map[string]map[string]string{}
	for _, r := range s.acct("-j", id) {
		steps[r["JobID"]] = r
	}
	for sid, want := range map[string][2]string{"0": {"COMPLETED", "0:0"}, "1": {"FAILED", "3:0"}, "2": {"FAILED", "5:0"}} {
		r := steps[id+"."+sid]
		if r == nil {
			t.Errorf("sacct -j %s has no row %s.%s: %v", id, id, sid, steps)
			continue
		}
		wantEqual(t, "sacct "+id+"."+sid+" State", state(r), want[0])
		wantEqual(t, "sacct "+id+"."+sid+" ExitCode", r["ExitCode"], want[1])
		wantEqual(t, "sacct "+id+"."+sid+" NodeList", r["NodeList"], "gpu-[0001-0002]")
		wantEqual(t, "sacct "+id+"."+sid+" JobName", r["JobName"], "sh")
		wantEqual(t, "sacct "+id+"."+sid+" AllocCPUS", r["AllocCPUS"], "4")
	}
	// A step's AllocCPUS is what it holds, as Slurm 22.05 counts it.
	for sid, want := range map[string]string{"3": "1", "4": "2"} {
		if r := steps[id+"."+sid]; r == nil {
			t.Errorf("sacct -j %s has no row %s.%s", id, id, sid)
		} else {
			wantEqual(t, "sacct "+id+"."+sid+" AllocCPUS", r["AllocCPUS"], want)
		}
	}
}

// TestSrunTasksDieWithTheirJob: scancel of a job whose srun step runs a task
// on each of two nodes kills the tasks on both (the second node runs no batch
// step: its task is killed through the step).
func TestSrunTasksDieWithTheirJob(t *testing.T) {
	needs(t, needSteps)
	t.Parallel()
	s := setup(t).session(t, "main")
	id := s.sbatch(s.script("srun_cancel.sh"))
	pids := s.taskPids(2)
	for r, pid := range pids {
		if !alive(pid) {
			t.Fatalf("task %d (pid %d) not running before the cancel", r, pid)
		}
	}
	s.ok("scancel", id)
	wantEqual(t, "job state after scancel", state(s.waitDone(id, 60*time.Second)), "CANCELLED")
	s.waitFor(60*time.Second, "the srun tasks on both nodes to be killed", func() bool {
		return !alive(pids[0]) && !alive(pids[1])
	})
}

// alive reports whether a process exists (the local provider's nodes are
// processes of this machine).
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// TestScancelStep: scancel JOB.STEP kills the step's tasks on both nodes;
// the batch script goes on (srun returns the tasks' 128+SIGTERM) and the job
// completes.
func TestScancelStep(t *testing.T) {
	needs(t, needSteps, needCancelStep)
	t.Parallel()
	s := setup(t).session(t, "main")
	id := s.sbatch(s.script("srun_cancel.sh"))
	pids := s.taskPids(2)
	s.ok("scancel", id+".0")
	row := s.waitDone(id, 60*time.Second)
	out := s.read("srunc-" + id + ".out")
	if state(row) != "COMPLETED" || !strings.Contains(out, "srun exit=143\n") {
		t.Errorf("job %s ended %s; output:\n%s\nwant COMPLETED after srun exit=143", id, row["State"], out)
	}
	if alive(pids[0]) || alive(pids[1]) {
		t.Errorf("tasks %v still run after scancel %s.0", pids, id)
	}
	// The job has ended: Slurm 22.05 names JOB.STEP, exit 1 (a running
	// job's missing step is exit 225, naming the job alone).
	if r := s.run("scancel", id+".7"); r.code != 1 || !strings.Contains(r.stderr, "Kill job error on job step id "+id+".7: Invalid job id specified") {
		t.Errorf("scancel of a step of an ended job: %s", r)
	}
}

// TestSrunTasksDieAtTimeLimit: a job whose srun step outlives its time limit
// ends TIMEOUT, and the step's tasks die on both nodes with it.
//
// The test ends the limit once both tasks run (scontrol update lowers a
// running job's TimeLimit below its elapsed time, as a Slurm user may): a
// limit given at submission counts from the allocation, so on a loaded
// machine it could end the job before its tasks had even started, and
// taskPids waited for pids never written (seen with --time=0:08).
func TestSrunTasksDieAtTimeLimit(t *testing.T) {
	needs(t, needSteps)
	t.Parallel()
	s := setup(t).session(t, "main")
	id := s.sbatch(s.script("srun_cancel.sh"))
	pids := s.taskPids(2)
	for r, pid := range pids {
		if !alive(pid) {
			t.Fatalf("task %d (pid %d) not running before the time limit", r, pid)
		}
	}
	s.ok("scontrol", "update", "JobId="+id, "TimeLimit=0:01")
	wantEqual(t, "job state", state(s.waitDone(id, 60*time.Second)), "TIMEOUT")
	s.waitFor(60*time.Second, "the srun tasks on both nodes to be killed", func() bool {
		return !alive(pids[0]) && !alive(pids[1])
	})
}

// taskPids waits until srun_cancel.sh's n tasks have written their pids
// and returns them, by rank.
func (s *session) taskPids(n int) []int {
	s.t.Helper()
	pids := make([]int, n)
	s.waitFor(120*time.Second, "every srun task to start", func() bool {
		for r := range pids {
			b, err := os.ReadFile(s.path(fmt.Sprintf("task-%d.pid", r)))
			if err != nil || !strings.HasSuffix(string(b), "\n") {
				return false
			}
			if pids[r], err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
				return false
			}
		}
		return true
	})
	return pids
}

// TestSrunAllocates: srun with no job around asks for an allocation, runs
// its command there as step 0 and ends the job as the step ended, as
// Slurm's srun does.
func TestSrunAllocates(t *testing.T) {
	needs(t, needCommand, needSteps)
	t.Parallel()
	s := setup(t).session(t, "main")
	r := s.run("srun", "-N2", "-l", "sh", "-c", `echo "$SLURM_JOB_ID $SLURMD_NODENAME $SLURM_STEP_ID $SLURM_NNODES"`)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	sort.Strings(lines)
	if r.code != 0 || len(lines) != 2 {
		t.Fatalf("srun -N2: %v", r)
	}
	id := strings.Fields(strings.TrimPrefix(lines[0], "0: "))[0]
	wantEqual(t, "srun -N2 output", strings.Join(lines, "\n"), "0: "+id+" gpu-0001 0 2\n1: "+id+" gpu-0002 0 2")
	if row := s.waitDone(id, 60*time.Second); state(row) != "COMPLETED" {
		t.Errorf("srun's job %s ended %s, want COMPLETED", id, row["State"])
	}
	steps := s.ok("sacct", "-j", id, "-n", "-P", "-o", "JobID,JobName,State,ExitCode")
	if !strings.Contains(steps, id+".0|sh|COMPLETED|0:0\n") {
		t.Errorf("sacct -j %s lacks step 0:\n%s", id, steps)
	}

	// srun --jobid: a step in a running job, from outside it.
	held := s.sbatch("--wrap", "sleep 120")
	s.waitState(held, 60*time.Second, "RUNNING")
	r = s.run("srun", "--jobid="+held, "sh", "-c", `echo "$SLURM_JOB_ID $SLURM_STEP_ID"`)
	wantEqual(t, "srun --jobid output", strings.TrimSpace(r.stdout), held+" 0")
	s.ok("scancel", held)

	// A failing command: srun's exit code, and its job FAILED.
	r = s.run("srun", "sh", "-c", `echo $SLURM_JOB_ID; exit 3`)
	if r.code != 3 {
		t.Fatalf("srun exit 3: %v", r)
	}
	id = strings.TrimSpace(r.stdout)
	if row := s.waitDone(id, 60*time.Second); state(row) != "FAILED" || row["ExitCode"] != "3:0" {
		t.Errorf("failed srun's job %s ended %s %s, want FAILED 3:0", id, row["State"], row["ExitCode"])
	}

	// Its time limit: the job ends TIMEOUT under srun, which then has
	// nothing to give back (and says nothing of ending it). -t is the
	// job's TimeLimit; the test ends it once the task runs (scontrol
	// update below the elapsed time): a short -t counts from the
	// allocation, and on a loaded machine it ended the job before the
	// task had printed its id (seen with -t 0:02).
	done := s.start("srun", "-t", "5:00", "sh", "-c", `echo $SLURM_JOB_ID > "$SLURM_SUBMIT_DIR/limit.id"; echo $SLURM_JOB_ID; exec sleep 30`)
	s.waitFor(60*time.Second, "srun's task to run", func() bool {
		b, err := os.ReadFile(s.path("limit.id"))
		id = strings.TrimSpace(string(b))
		return err == nil && strings.HasSuffix(string(b), "\n")
	})
	wantEqual(t, "srun -t 5:00: the job's TimeLimit", s.showJob(id)["TimeLimit"], "00:05:00")
	s.ok("scontrol", "update", "JobId="+id, "TimeLimit=0:01")
	r = <-done
	if r.code == 0 || strings.Contains(r.stderr, "ending job") || strings.TrimSpace(r.stdout) != id {
		t.Errorf("srun past its time limit: %v, want job %s's task's output and a failure without an error ending the job", r, id)
	}
	if row := s.waitDone(id, 60*time.Second); state(row) != "TIMEOUT" {
		t.Errorf("srun's job %s ended %s, want TIMEOUT", id, row["State"])
	}
}

// TestSallocAllocates: salloc holds an allocation while its command runs
// here; srun inside the command runs steps on the allocated nodes; the job
// ends COMPLETED or FAILED as the command ended, with its exit code.
func TestSallocAllocates(t *testing.T) {
	needs(t, needCommand, needSteps)
	t.Parallel()
	s := setup(t).session(t, "main")
	r := s.run("salloc", "-N2", "-J", "explore", "sh", "-c", `echo "id $SLURM_JOB_ID $SLURM_NNODES"; srun -l sh -c 'echo "$SLURMD_NODENAME $SLURM_STEP_ID"'`)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	sort.Strings(lines)
	if r.code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[2], "id ") ||
		!strings.Contains(r.stderr, "salloc: Granted job allocation ") || !strings.Contains(r.stderr, "salloc: Relinquishing job allocation ") {
		t.Fatalf("salloc -N2: %v", r)
	}
	id := strings.Fields(lines[2])[1]
	wantEqual(t, "salloc's srun output", strings.Join(lines, "\n"), "0: gpu-0001 0\n1: gpu-0002 0\nid "+id+" 2")
	if row := s.waitDone(id, 60*time.Second); state(row) != "COMPLETED" || row["JobName"] != "explore" {
		t.Errorf("salloc's job %s ended %s named %q, want COMPLETED, explore", id, row["State"], row["JobName"])
	}
	steps := s.ok("sacct", "-j", id, "-n", "-P", "-o", "JobID,JobName,State,NNodes")
	if !strings.Contains(steps, id+".0|sh|COMPLETED|2\n") {
		t.Errorf("sacct -j %s lacks srun's step 0 on 2 nodes:\n%s", id, steps)
	}

	// A failing command: salloc's exit code, and its job FAILED.
	r = s.run("salloc", "-Q", "sh", "-c", `echo $SLURM_JOB_ID; exit 3`)
	if r.code != 3 || r.stderr != "" {
		t.Fatalf("salloc exit 3: %v", r)
	}
	id = strings.TrimSpace(r.stdout)
	if row := s.waitDone(id, 60*time.Second); state(row) != "FAILED" || row["ExitCode"] != "3:0" {
		t.Errorf("failed salloc's job %s ended %s %s, want FAILED 3:0", id, row["State"], row["ExitCode"])
	}
}

// TestSrunForwardsInput: srun's stdin reaches the step's tasks on both
// nodes (all by default, one with --input=RANK, none with --input=none), as
// Slurm's srun forwards it.
func TestSrunForwardsInput(t *testing.T) {
	needs(t, needSteps)
	t.Parallel()
	s := setup(t).session(t, "main")
	id := s.sbatch(s.script("srun_input.sh"))
	row := s.waitDone(id, 120*time.Second)
	out := s.read("srunin-" + id + ".out")
	if state(row) != "COMPLETED" {
		t.Errorf("job %s ended %s %s, want COMPLETED; output:\n%s", id, row["State"], row["ExitCode"], out)
	}
	want := "0: alpha\n0: beta\n1: alpha\n1: beta\n1: gamma\n0: empty 0\n1: empty 1\ndone\n"
	wantEqual(t, "output", out, want)
}

// TestSrunPty: srun --pty from a terminal (as a user types srun --pty sh
// on the login node) runs the shell in a terminal of its own on the node:
// what is typed reaches it, its prompt and answers come back as they are
// written, and srun exits with its code, as Slurm 22.05's does with the
// same keys (the session was compared by hand). From no terminal srun
// says so and runs the step without one, as Slurm's.
func TestSrunPty(t *testing.T) {
	needs(t, needCommand, needSteps)
	t.Parallel()
	s := setup(t).session(t, "main")
	out, code := s.runTerminal([]string{"echo $((6*7))", "tty", "exit 3"}, "srun", "--pty", "sh")
	for _, want := range []string{"echo $((6*7))\r\n42\r\n", "/dev/pts/", ": task 0: Exited with exit code 3\r\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("srun --pty sh: the terminal shows %q, lacking %q", out, want)
		}
	}
	// On whichever node the allocation got (other tests share the cluster).
	if !regexp.MustCompile(`srun: error: gpu-000[12]: task 0: Exited`).MatchString(out) {
		t.Errorf("srun --pty sh: the terminal shows %q, lacking srun's report of the shell's exit on its node", out)
	}
	if code != 3 {
		t.Errorf("srun --pty sh exited %d, want the shell's 3; the terminal showed %q", code, out)
	}
	r := s.runStdin("tty\n", "srun", "--pty", "sh")
	if !strings.Contains(r.stderr, "srun: error: Not using a pseudo-terminal, disregarding --pty option") ||
		strings.TrimSpace(r.stdout) != "not a tty" {
		t.Errorf("srun --pty from no terminal: %v", r)
	}
}

// TestSrunGPUsPerTask: srun --gpus-per-task=1 in a two-GPU job gives task 0
// the job's first GPU and task 1 its second; without it both see both. The
// same output as Slurm 22.05's (compared by hand with the same script,
// where the job had GPUs 0 and 1; here it may have others, when GPU jobs
// of the tests beside it hold those).
func TestSrunGPUsPerTask(t *testing.T) {
	needs(t, needSteps)
	t.Parallel()
	s := setup(t).session(t, "main")
	id := s.sbatch(s.script("srun_gpus.sh"))
	row := s.waitDone(id, 90*time.Second)
	out := s.read("srungpus-" + id + ".out")
	if state(row) != "COMPLETED" {
		t.Errorf("job %s ended %s %s, want COMPLETED; output:\n%s", id, row["State"], row["ExitCode"], out)
	}
	first, rest, _ := strings.Cut(out, "\n")
	g := strings.Split(strings.TrimPrefix(first, "job "), ",")
	if len(g) != 2 {
		t.Fatalf("job %s: its GPUs %q, want two; output:\n%s", id, first, out)
	}
	all := g[0] + "," + g[1]
	wantEqual(t, "output", rest, "0: own "+g[0]+" "+g[0]+"\n1: own "+g[1]+" "+g[1]+"\n0: all "+all+" "+all+"\n1: all "+all+" "+all+"\n")
}

// TestSrunGPUTaskFarm: one-GPU steps started side by side (srun --exact
// -n1 --gpus-per-task=1 ... &) each get a GPU of their own. Slurm 22.05's
// output for the same script is "0 1 2 " (checked by hand).
func TestSrunGPUTaskFarm(t *testing.T) {
	needs(t, needSteps)
	t.Parallel()
	s := setup(t).session(t, "main")
	id := s.sbatch(s.script("srun_farm.sh"))
	row := s.waitDone(id, 90*time.Second)
	out := s.read("srunfarm-" + id + ".out")
	if state(row) != "COMPLETED" {
		t.Errorf("job %s ended %s %s, want COMPLETED; output:\n%s", id, row["State"], row["ExitCode"], out)
	}
	wantEqual(t, "output", out, "0 1 2 \n")
}

// TestSrunStepGPUs: a step's --gpus, --gpus-per-node and --gres=gpu:N give
// it that many of the job's GPUs, seen by all its tasks; a step beside one
// holding GPUs gets others, one needing those held waits, and more GPUs
// than the job has are refused. The expected output is Slurm 22.05's for
// the same script (run with scripts/slurm-local.sh, NODES=2).
func TestSrunStepGPUs(t *testing.T) {
	needs(t, needSteps)
	t.Parallel()
	s := setup(t).session(t, "main")
	id := s.sbatch(s.script("srun_stepgpus.sh"))
	row := s.waitDone(id, 120*time.Second)
	out, errOut := s.read("srunstepgpus-"+id+".out"), s.read("srunstepgpus-"+id+".err")
	if state(row) != "COMPLETED" {
		t.Errorf("job %s ended %s %s, want COMPLETED; output:\n%s\nerrors:\n%s", id, row["State"], row["ExitCode"], out, errOut)
	}
	wantEqual(t, "output", out, `gpus=2: 0,1 0,1
gpus=2: 0,1 0,1
gpus-per-node=3: 0,1,2 0,1,2
gres=gpu:1: 0 0
gpus=1 beside: 3
gpus=2 after: 0,1
holder: 0,1,2
gpus=5: refused
`)
	for _, want := range []string{
		"srun: Job " + id + " step creation temporarily disabled, retrying (Requested nodes are busy)\n",
		"srun: Step created for job " + id + "\n",
		"srun: error: Unable to create step for job " + id + ": Invalid generic resource (gres) specification",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("errors lack %q:\n%s", want, errOut)
		}
	}
}

// TestSrunJobDefaults: the job's --gpus-per-node and -m reach its sruns
// through SLURM_GPUS_PER_NODE and SLURM_DISTRIBUTION, as Slurm 22.05's srun
// reads its input variables: a bare srun gets two GPUs a node, holds them
// (TresPerNode=gres:gpu:2) and deals its tasks cyclic; --gpus-per-node=1
// and -m block of its own win. The expected output is Slurm 22.05's for
// the same script (run with scripts/slurm-local.sh, NODES=3 GPUS=4).
func TestSrunJobDefaults(t *testing.T) {
	needs(t, needSteps)
	t.Parallel()
	s := setup(t).session(t, "main")
	id := s.sbatch(s.script("srun_jobdefaults.sh"))
	row := s.waitDone(id, 120*time.Second)
	out := s.read("srunjobdefaults-" + id + ".out")
	if state(row) != "COMPLETED" {
		t.Errorf("job %s ended %s %s, want COMPLETED; output:\n%s", id, row["State"], row["ExitCode"], out)
	}
	wantEqual(t, "output", out, `job: dist=cyclic gpus-per-node=2
bare: rank 0 node 0 gpus 2 dist cyclic
bare: rank 1 node 1 gpus 2 dist cyclic
bare: rank 2 node 0 gpus 2 dist cyclic
bare: rank 3 node 1 gpus 2 dist cyclic
gpn1: rank 0 node 0 gpus 1 dist cyclic
gpn1: rank 1 node 1 gpus 1 dist cyclic
gpn1: rank 2 node 0 gpus 1 dist cyclic
gpn1: rank 3 node 1 gpus 1 dist cyclic
block: rank 0 node 0 gpus 2 dist block
block: rank 1 node 0 gpus 2 dist block
block: rank 2 node 1 gpus 2 dist block
block: rank 3 node 1 gpus 2 dist block
step bare: Dist=Cyclic TresPerStep=cpu:4 TresPerNode=gres:gpu:2 
step gpn1: Dist=Block TresPerStep=cpu:4 TresPerNode=gres:gpu:1 
done
`)
}

// TestSrunGPUsPerTaskBesideJobPerNode: in an sbatch --gpus-per-node=2 job
// a step's own --gpus-per-task keeps the job's per-node count
// (SLURM_GPUS_PER_NODE, srun's default) and gets the larger on each node:
// -n2 --gpus-per-task=1, a task a node, sees 2 GPUs there, -n4 one each;
// its record has both, TresPerNode=gres:gpu:2 and TresPerTask=gres:gpu:1.
// And a batch script's GPU variables are those of the options it was
// submitted with: --gpus-per-task sets SLURM_GPUS_PER_TASK alone, not the
// SLURM_GPUS of the total it derives. The expected output is Slurm 22.05's
// for the same scripts and options (run with scripts/slurm-local.sh,
// NODES=2 GPUS=4).
func TestSrunGPUsPerTaskBesideJobPerNode(t *testing.T) {
	needs(t, needSteps)
	t.Parallel()
	s := setup(t).session(t, "main")
	id := s.sbatch(s.script("srun_gpt_jobgpn.sh"))
	s.script("gpu_env.sh")
	envs := []struct{ opts, want string }{
		{"-n2 --gpus-per-task=1", "gpus= gpus-per-node= gpus-per-task=1\n"},
		{"-N2 --ntasks-per-node=1 --gpus-per-task=1", "gpus= gpus-per-node= gpus-per-task=1\n"},
		{"--gpus=2", "gpus=2 gpus-per-node= gpus-per-task=\n"},
		{"-N1 --gpus-per-node=2", "gpus= gpus-per-node=2 gpus-per-task=\n"},
	}
	row := s.waitDone(id, 120*time.Second)
	out := s.read("srungptjobgpn-" + id + ".out")
	if state(row) != "COMPLETED" {
		t.Errorf("job %s ended %s %s, want COMPLETED; output:\n%s", id, row["State"], row["ExitCode"], out)
	}
	wantEqual(t, "output", out, `job: gpus-per-node=2 gpus= gpus-per-task=
n2g1: rank 0 node 0 gpus 2
n2g1: rank 1 node 1 gpus 2
n4g1: rank 0 node 0 gpus 1
n4g1: rank 1 node 0 gpus 1
n4g1: rank 2 node 1 gpus 1
n4g1: rank 3 node 1 gpus 1
n2g2: rank 0 node 0 gpus 2
n2g2: rank 1 node 1 gpus 2
step: TresBind=gpu:per_task:1 TresPerStep=cpu:2 TresPerNode=gres:gpu:2 TresPerTask=gres:gpu:1 
done
`)
	// One at a time, after the script's job: the fewer of the cluster's
	// GPUs held at once, the less the tests beside this one that name
	// GPUs by index see them moved.
	for _, e := range envs {
		id := s.sbatch(append(append([]string{"-o", "gpuenv-%j.out"}, strings.Fields(e.opts)...), "gpu_env.sh")...)
		if row := s.waitDone(id, 90*time.Second); state(row) != "COMPLETED" {
			t.Errorf("sbatch %s: job %s ended %s %s, want COMPLETED", e.opts, id, row["State"], row["ExitCode"])
		}
		wantEqual(t, "sbatch "+e.opts+": the script's GPU variables", s.read("gpuenv-"+id+".out"), e.want)
	}
}

// TestSrunStepsWait: a step holds CPUs of the job while it runs: without
// --exact all of them, so that the next step waits ("step creation
// temporarily disabled", then "Step created"); with --exact or -c only its
// own, so that two one-CPU steps of a two-CPU job run side by side; with
// --overlap none; a step asking more CPUs than the job has is refused.
// The expected output is Slurm 22.05's for the same script (run by hand
// with scripts/slurm-local.sh, NODES=1 CPUS=4).
func TestSrunStepsWait(t *testing.T) {
	needs(t, needSteps)
	t.Parallel()
	s := setup(t).session(t, "main")
	id := s.sbatch(s.script("srun_wait.sh"))
	row := s.waitDone(id, 120*time.Second)
	out, errOut := s.read("srunwait-"+id+".out"), s.read("srunwait-"+id+".err")
	if state(row) != "COMPLETED" {
		t.Errorf("job %s ended %s %s, want COMPLETED; output:\n%s\nerrors:\n%s", id, row["State"], row["ExitCode"], out, errOut)
	}
	wantEqual(t, "output", out, `plain: the second step ran after the first
exact1 together
exact2 together
c1 together
c2 together
overlap: ran beside
too many CPUs: refused
`)
	for _, want := range []string{
		"srun: Job " + id + " step creation temporarily disabled, retrying (Requested nodes are busy)\n",
		"srun: Step created for job " + id + "\n",
		"srun: error: Unable to create step for job " + id + ": More processors requested than permitted",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("errors lack %q:\n%s", want, errOut)
		}
	}
}

// TestJobScriptAsksAboutItself: a job script's Slurm commands act for the
// job (its workload token): scontrol show job and squeue -j of itself,
// sinfo, scontrol update of its own name, and scancel of itself, which
// ends it CANCELLED before its sleep is over. squeue lists its own job
// alone (a job's token reaches no other job).
func TestJobScriptAsksAboutItself(t *testing.T) {
	needs(t, needSinfo, needUpdate)
	t.Parallel()
	s := setup(t).session(t, "main")
	other := s.sbatch(s.script("hold.sh")) // another job of the same user
	id := s.sbatch(s.script("self.sh"))
	row := s.waitDone(id, 90*time.Second)
	out, errOut := s.read("self-"+id+".out"), s.read("self-"+id+".err")
	if state(row) != "CANCELLED" {
		t.Errorf("job %s ended %s, want CANCELLED (by itself); output:\n%s\nerrors:\n%s", id, row["State"], out, errOut)
	}
	wantEqual(t, "output", out, "JobState=RUNNING\n"+id+" RUNNING\nsqueue lists 1 job(s)\nsinfo ok\nupdate ok\n")
	if n := s.showJob(id)["JobName"]; n != "renamed" {
		t.Errorf("job name %q after the script's update, want renamed", n)
	}
	s.ok("scancel", other)
}

// TestSrunNodeSelection: srun -w, -x and -r run a step on the nodes of the
// allocation they pick, SLURM_NODEID counting within the step; a node
// outside the job is refused; more nodes named than -N keeps the first.
// The expected output is Slurm 22.05's for the same script.
func TestSrunNodeSelection(t *testing.T) {
	needs(t, needSteps)
	t.Parallel()
	s := setup(t).session(t, "main")
	id := s.sbatch(s.script("srun_nodes.sh"))
	row := s.waitDone(id, 90*time.Second)
	out := s.read("srunnodes-" + id + ".out")
	if state(row) != "COMPLETED" {
		t.Errorf("job %s ended %s %s, want COMPLETED; output:\n%s", id, row["State"], row["ExitCode"], out)
	}
	wantEqual(t, "output", out, `w-second: second, node id 0 of 1
w-first: first, node id 0 of 1
x-first: second, node id 0 of 1
r-1: second, node id 0 of 1
w-second-two-tasks: first, node id 0 of 2
w-second-two-tasks: second, node id 1 of 2
a node outside the job: refused
w-both-for-one: first, node id 0 of 1
`)
}

// plainGPUsTask is what each task of TestSrunPlainStepGPUs's steps from
// outside the job runs: how many GPUs it sees. $0 names the step.
const plainGPUsTask = `n=$(echo "$CUDA_VISIBLE_DEVICES" | tr , "\n" | grep -c .); s=$(echo "$SLURM_STEP_GPUS" | tr , "\n" | grep -c .); echo "$0: task $SLURM_PROCID sees $n step-gpus $s"`

// TestSrunPlainStepGPUs: a step without a GPU option of its own gets the
// job's GPUs and holds them, as Slurm 22.05's ("a job step is allocated
// all of the generic resources that have been allocated to the job", man
// srun): from the batch script of a job made with --gres=gpu:2, --gpus=2
// (on one node and on two), --gpus-per-task=1 or --gpus-per-node=2, from
// salloc's shell and from outside (srun --jobid); a second one-task step
// beside it waits for the GPUs unless --overlap; --gres=none gets none,
// --gpus=0 none unless the job's per-task or per-node count stands. The
// expected output is Slurm 22.05's for the same script and options (run
// with scripts/slurm-local.sh, NODES=2 GPUS=4), but for --gres=none in a
// --gpus-per-node job, which Slurm's srun refuses (Invalid Trackable
// RESource (TRES) specification) and Loom's runs without GPUs.
func TestSrunPlainStepGPUs(t *testing.T) {
	needs(t, needSteps)
	t.Parallel()
	s := setup(t).session(t, "main")
	script := s.script("srun_plain_gpus.sh")
	const (
		gresOut = "plain: task 0 sees 2 step-gpus 2\nplain: task 1 sees 2 step-gpus 2\nplain: tres TresPerNode=gres:gpu:2 \n"
		noneOut = "none: task 0 sees 0 step-gpus 0\nnone: task 1 sees 0 step-gpus 0\nnone: tres \n"
		zeroOut = "gpus0: task 0 sees 0 step-gpus 0\ngpus0: task 1 sees 0 step-gpus 0\ngpus0: tres \n"
		twoOut  = "second: after\noverlap: beside\ndone\n"
	)
	jobs := []struct{ opts, arg, want string }{
		{"-N1 -n2 --gres=gpu:2", "", gresOut + noneOut + zeroOut + twoOut},
		{"-N1 -n2 --gpus=2", "", strings.Replace(gresOut, "TresPerNode", "TresPerStep", 1) + noneOut + zeroOut + twoOut},
		{"-N2 -n2 --gpus=2", "one", "plain: task 0 sees 1 step-gpus 1\nplain: task 1 sees 1 step-gpus 1\nplain: tres TresPerStep=gres:gpu:2 \n" + noneOut + zeroOut},
		{"-N1 -n2 --gpus-per-task=1", "", "plain: task 0 sees 1 step-gpus 1\nplain: task 1 sees 1 step-gpus 1\nplain: tres TresPerTask=gres:gpu:1 \n" + noneOut +
			"gpus0: task 0 sees 1 step-gpus 1\ngpus0: task 1 sees 1 step-gpus 1\ngpus0: tres TresPerTask=gres:gpu:1 \nsecond: beside\noverlap: beside\ndone\n"},
		{"-N1 -n2 --gpus-per-node=2", "", gresOut + noneOut + strings.ReplaceAll(gresOut, "plain", "gpus0") + twoOut},
	}
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		args := append(strings.Fields(j.opts), script)
		if j.arg != "" {
			args = append(args, j.arg)
		}
		ids[i] = s.sbatch(args...)
	}
	for i, j := range jobs {
		row := s.waitDone(ids[i], 180*time.Second)
		out, errOut := s.read("srunplaingpus-"+ids[i]+".out"), s.read("srunplaingpus-"+ids[i]+".err")
		if state(row) != "COMPLETED" {
			t.Errorf("sbatch %s: job %s ended %s %s, want COMPLETED; errors:\n%s", j.opts, ids[i], row["State"], row["ExitCode"], errOut)
		}
		wantEqual(t, "sbatch "+j.opts+": output", out, j.want)
		if strings.HasSuffix(j.want, twoOut) && !strings.Contains(errOut, "srun: Job "+ids[i]+" step creation temporarily disabled, retrying (Requested nodes are busy)\n") {
			t.Errorf("sbatch %s: the second step was not told to wait:\n%s", j.opts, errOut)
		}
	}

	// salloc's shell, and srun --jobid from outside the job: the same.
	r := s.run("salloc", "-Q", "-N1", "-n2", "--gres=gpu:2", "sh", script, "one")
	if r.code != 0 {
		t.Fatalf("salloc: %v", r)
	}
	wantEqual(t, "salloc --gres=gpu:2: output", r.stdout, gresOut+noneOut+zeroOut)
	held := s.sbatch("-N1", "-n2", "--gres=gpu:2", "--wrap", "sleep 120")
	s.waitState(held, 60*time.Second, "RUNNING")
	for _, name := range []string{"plain", "none"} {
		args := []string{"--jobid=" + held, "sh", "-c", plainGPUsTask, name}
		if name == "none" {
			args = append([]string{"--gres=none"}, args...)
		}
		r = s.run("srun", args...)
		lines := strings.SplitAfter(r.stdout, "\n")
		sort.Strings(lines)
		want := strings.Join(strings.SplitAfter(gresOut, "\n")[:2], "")
		if name == "none" {
			want = strings.Join(strings.SplitAfter(noneOut, "\n")[:2], "")
		}
		wantEqual(t, "srun --jobid "+strings.Join(args[:len(args)-3], " ")+": output", strings.Join(lines, ""), want)
	}
	s.ok("scancel", held)
}

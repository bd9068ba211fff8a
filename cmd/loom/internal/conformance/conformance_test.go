package conformance

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Slurm 22.05's headers, byte for byte, as its commands print them
// (../shared/design/SLURM.md; the others captured from Debian's slurm-wlm
// 22.05.8 run as SLURM.md describes).
const (
	squeueHeader         = "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)"
	squeueLongHeader     = "             JOBID PARTITION     NAME     USER    STATE       TIME TIME_LIMI  NODES NODELIST(REASON)"
	sinfoHeader          = "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST"
	sinfoNodeHeader      = "NODELIST   NODES PARTITION STATE "
	sinfoLongHeader      = "PARTITION AVAIL  TIMELIMIT   JOB_SIZE ROOT OVERSUBS     GROUPS  NODES       STATE NODELIST"
	sinfoSummarizeHeader = "PARTITION AVAIL  TIMELIMIT   NODES(A/I/O/T) NODELIST"
	sacctHeader          = "JobID           JobName  Partition    Account  AllocCPUS      State ExitCode \n" +
		"------------ ---------- ---------- ---------- ---------- ---------- -------- "
	// sprio's default header (Slurm 22.05's "%.15i %9r %.10Y %.10S %.10A
	// %.10F %.10J %.10P %.10Q"; real sprio needs priority/multifactor,
	// which SLURM.md's setup does not run).
	sprioHeader = "          JOBID PARTITION   PRIORITY       SITE        AGE  FAIRSHARE    JOBSIZE  PARTITION        QOS"
)

// ctimeLine is the date line squeue -l and sinfo -l print first.
var ctimeLine = regexp.MustCompile(`^[A-Z][a-z]{2} [A-Z][a-z]{2} [ 0-9][0-9] [0-9]{2}:[0-9]{2}:[0-9]{2} [0-9]{4}$`)

// TestArrayWithLimit: array_limit.sh, --array=0-5%2 with an --output
// pattern: every task runs once with its array variables and job id A+k,
// never more than two at a time.
func TestArrayWithLimit(t *testing.T) {
	needs(t, needArrays)
	t.Parallel()
	s := setup(t).session(t, "main")
	id := s.sbatch(s.script("array_limit.sh"))

	// squeue shows running tasks as A_k and the pending ones on one row.
	taskRow := regexp.MustCompile(`^` + id + `_([0-9]+|\[[0-9,-]+%2\])$`)
	for _, r := range s.queue("-j", id) {
		if !taskRow.MatchString(r["JOBID"]) {
			t.Errorf("squeue -j %s lists %q; want %s_K or %s_[RANGE%%2]", id, r["JOBID"], id, id)
		}
	}
	maxRunning := 0
	s.waitFor(90*time.Second, "every task of array "+id+" to end", func() bool {
		if r := s.run("squeue", "-h", "-r", "-j", id, "-t", "R", "-o", "%i"); r.code == 0 {
			maxRunning = max(maxRunning, len(strings.Fields(r.stdout)))
		}
		ended := 0
		for _, r := range s.acct("-X", "-j", id) {
			if terminal(state(r)) {
				ended++
			}
		}
		return ended == 6
	})
	if maxRunning > 2 {
		t.Errorf("squeue showed %d tasks running at once; --array=0-5%%2 allows 2", maxRunning)
	}
	rows := s.acct("-X", "-j", id)
	var ids []string
	for _, r := range rows {
		ids = append(ids, r["JobID"])
		if state(r) != "COMPLETED" || r["ExitCode"] != "0:0" || r["JobName"] != "arr" {
			t.Errorf("sacct row %v; want arr COMPLETED 0:0", r)
		}
	}
	want := []string{id + "_0", id + "_1", id + "_2", id + "_3", id + "_4", id + "_5"}
	if !slices.Equal(ids, want) {
		t.Errorf("sacct -X -j %s lists %q, want %q", id, ids, want)
	}
	line := regexp.MustCompile(`^task=([0-9]+) job=([0-9]+) array_job=([0-9]+) count=6 min=0 max=5 concurrent=([0-9]+)\n$`)
	for k := 0; k < 6; k++ {
		name := fmt.Sprintf("arr-%s_%d.out", id, k)
		out := s.read(name)
		m := line.FindStringSubmatch(out)
		if m == nil {
			t.Errorf("%s = %q; want one line with the task's array variables", name, out)
			continue
		}
		wantEqual(t, name+" task", m[1], strconv.Itoa(k))
		wantEqual(t, name+" SLURM_JOB_ID", m[2], nextID(t, id, k))
		wantEqual(t, name+" SLURM_ARRAY_JOB_ID", m[3], id)
		if c, _ := strconv.Atoi(m[4]); c > 2 {
			t.Errorf("task %d started beside %d running tasks; %%2 allows 2", k, c)
		}
	}
}

// TestDependencies: dep_ok.sh, dep_fail.sh and dep_child.sh with after,
// afterok, afternotok, afterany and singleton.
func TestDependencies(t *testing.T) {
	t.Parallel()
	s := setup(t).session(t, "main")
	child := s.script("dep_child.sh")
	a := s.sbatch(s.script("dep_ok.sh"))
	b := s.sbatch(s.script("dep_fail.sh"))
	after := s.sbatch("-d", "after:"+a, child)
	okA := s.sbatch("-d", "afterok:"+a, child)
	notokA := s.sbatch("-d", "afternotok:"+a, child)
	notokB := s.sbatch("--dependency=afternotok:"+b, child)
	anyAB := s.sbatch("--dependency=afterany:"+a+":"+b, child)
	okB := s.sbatch("-d", "afterok:"+b, child)
	single1 := s.sbatch("-J", "single", "-d", "singleton", "-o", "single-%j.out", "--wrap", "sleep 2")
	single2 := s.sbatch("-J", "single", "-d", "singleton", "-o", "single-%j.out", "--wrap", "sleep 2")

	// A runs until released: the jobs waiting for its end are pending on
	// Dependency.
	for _, id := range []string{okA, anyAB} {
		if onSlurm() {
			// Slurm gives the reason when its scheduler first looks at
			// the job, and the backend's poll (2 s) brings it back; the
			// built-in engine gives it at submission. A is held running
			// until released below, so the reason cannot pass meanwhile.
			s.waitFor(30*time.Second, "squeue -j "+id+" PD (Dependency)", func() bool {
				r := s.queue("-j", id)
				return len(r) == 1 && r[0]["ST"] == "PD" && r[0]["REASON"] == "Dependency"
			})
			continue
		}
		r := s.queue("-j", id)
		if len(r) != 1 || r[0]["ST"] != "PD" || r[0]["REASON"] != "Dependency" {
			t.Errorf("squeue -j %s (afterok/afterany on a running job) = %v; want PD (Dependency)", id, r)
		}
	}
	if err := os.WriteFile(filepath.Join(s.dir, "dep-ok.release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	rowA, rowB := s.waitDone(a, 60*time.Second), s.waitDone(b, 60*time.Second)
	wantEqual(t, "afterok parent state", state(rowA), "COMPLETED")
	wantEqual(t, "failing job state", state(rowB), "FAILED")
	wantEqual(t, "failing job ExitCode", rowB["ExitCode"], "3:0")

	for _, c := range []struct {
		id, dep string
		start   []map[string]string // must start at or after these ended
	}{
		{okA, "afterok:A", []map[string]string{rowA}},
		{notokB, "afternotok:B", []map[string]string{rowB}},
		{anyAB, "afterany:A:B", []map[string]string{rowA, rowB}},
	} {
		r := s.waitDone(c.id, 60*time.Second)
		if state(r) != "COMPLETED" {
			t.Errorf("%s job %s ended %s, want COMPLETED", c.dep, c.id, r["State"])
			continue
		}
		for _, p := range c.start {
			if r["Start"] < p["End"] {
				t.Errorf("%s job %s started %s, before its dependency %s ended %s", c.dep, c.id, r["Start"], p["JobID"], p["End"])
			}
		}
		wantEqual(t, c.dep+" output", s.read("dep-child-"+c.id+".out"), "child "+c.id+" ran\n")
	}
	r := s.waitDone(after, 60*time.Second)
	if state(r) != "COMPLETED" || r["Start"] < rowA["Start"] {
		t.Errorf("after:A job %s: %v; want COMPLETED, started no earlier than A (%s)", after, r, rowA["Start"])
	}

	// Dependencies that can no longer be satisfied stay pending, as Slurm's
	// (without kill_invalid_depend) do, until cancelled.
	for _, id := range []string{notokA, okB} {
		s.waitFor(30*time.Second, "job "+id+" pending on DependencyNeverSatisfied", func() bool {
			r := s.queue("-j", id)
			return len(r) == 1 && r[0]["ST"] == "PD" && r[0]["REASON"] == "DependencyNeverSatisfied"
		})
	}
	if out := s.ok("scancel", notokA, okB); out != "" {
		t.Errorf("scancel printed %q", out)
	}
	for _, id := range []string{notokA, okB} {
		wantEqual(t, "never-satisfied job "+id+" after scancel", state(s.waitDone(id, 30*time.Second)), "CANCELLED")
		if _, err := os.Stat(s.path("dep-child-" + id + ".out")); err == nil {
			t.Errorf("job %s with an unsatisfied dependency ran", id)
		}
	}

	// singleton: one job of a name and user at a time.
	r1 := s.waitDone(single1, 60*time.Second)
	r2 := s.waitDone(single2, 60*time.Second)
	if state(r1) != "COMPLETED" || state(r2) != "COMPLETED" {
		t.Fatalf("singleton jobs ended %s and %s", r1["State"], r2["State"])
	}
	if r2["Start"] < r1["End"] {
		t.Errorf("second singleton job started %s before the first ended %s", r2["Start"], r1["End"])
	}
}

// TestMultiNodeGPU: multinode_gpu.sh on two nodes with two GPUs each: the
// batch script runs once, on the first node, with the job's SLURM_*
// variables and CUDA_VISIBLE_DEVICES; srun -N1 -n2 runs two tasks there.
func TestMultiNodeGPU(t *testing.T) {
	needs(t, needSteps, needNodelist)
	t.Parallel()
	s := setup(t).session(t, "main")
	id := s.sbatch(s.script("multinode_gpu.sh"))
	row := s.waitDone(id, 90*time.Second)
	if state(row) != "COMPLETED" || row["ExitCode"] != "0:0" {
		t.Errorf("job %s ended %s %s, want COMPLETED 0:0", id, row["State"], row["ExitCode"])
	}
	wantEqual(t, "sacct NodeList", row["NodeList"], "gpu-[0001-0002]")
	out := s.read("mn-" + id + ".out")
	env := map[string][]string{}
	for _, l := range strings.Split(out, "\n") {
		if kv, ok := strings.CutPrefix(l, "env "); ok {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = append(env[k], v)
		}
	}
	if n := len(env["SLURM_JOB_ID"]); n != 1 {
		t.Fatalf("the batch script ran %d times, want once (on the batch host); output:\n%s", n, out)
	}
	get := func(k string) string { return env[k][0] }
	for k, want := range map[string]string{
		"SLURM_JOB_ID": id, "SLURM_JOB_NAME": "mn-gpu", "SLURM_JOB_NODELIST": "gpu-[0001-0002]",
		"SLURM_NNODES": "2", "SLURM_JOB_NUM_NODES": "2", "SLURM_NTASKS": "4",
		"SLURM_PROCID": "0", "SLURM_NODEID": "0", "SLURM_LOCALID": "0", "SLURM_GPUS_ON_NODE": "2",
		"SLURM_JOB_PARTITION": "batch", "SLURM_SUBMIT_DIR": s.dir, "SLURMD_NODENAME": "gpu-0001",
	} {
		wantEqual(t, k, get(k), want)
	}
	// The batch host's address: its name, or (the local provider's nodes
	// share this machine, where node names do not resolve) loopback.
	if a := get("MASTER_ADDR"); a != "gpu-0001" && a != "127.0.0.1" {
		t.Errorf("MASTER_ADDR = %q, want the batch host gpu-0001 (or 127.0.0.1 on local nodes)", a)
	}
	if p, err := strconv.Atoi(get("MASTER_PORT")); err != nil || p <= 0 || p > 65535 {
		t.Errorf("MASTER_PORT = %q, want a port", get("MASTER_PORT"))
	}
	gpus := strings.Split(get("CUDA_VISIBLE_DEVICES"), ",")
	if len(gpus) != 2 || gpus[0] == gpus[1] {
		t.Errorf("CUDA_VISIBLE_DEVICES = %q, want two GPUs", get("CUDA_VISIBLE_DEVICES"))
	}
	for _, want := range []string{"cwd=" + s.dir + "\n", "0: step procid=0 localid=0 ntasks=2\n", "1: step procid=1 localid=1 ntasks=2\n", "srun exit=0\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	kv := s.showJob(id)
	for k, want := range map[string]string{"JobState": "COMPLETED", "NumNodes": "2", "BatchHost": "gpu-0001",
		"NodeList": "gpu-[0001-0002]", "ExitCode": "0:0"} {
		wantEqual(t, "scontrol show job "+k, kv[k], want)
	}
	if !strings.Contains(kv["TRES"], "gres/gpu=4") {
		t.Errorf("scontrol show job TRES=%s, want gres/gpu=4", kv["TRES"])
	}

	// Two jobs on one node that run at the same time get different GPUs.
	j1 := s.sbatch("-w", "gpu-0002", "--gres=gpu:2", "-o", "gpus-%j.out", "--wrap", "echo $CUDA_VISIBLE_DEVICES; sleep 2")
	j2 := s.sbatch("-w", "gpu-0002", "--gres=gpu:2", "-o", "gpus-%j.out", "--wrap", "echo $CUDA_VISIBLE_DEVICES; sleep 2")
	r1, r2 := s.waitDone(j1, 60*time.Second), s.waitDone(j2, 60*time.Second)
	g1, g2 := strings.TrimSpace(s.read("gpus-"+j1+".out")), strings.TrimSpace(s.read("gpus-"+j2+".out"))
	if state(r1) != "COMPLETED" || state(r2) != "COMPLETED" || len(strings.Split(g1, ",")) != 2 || len(strings.Split(g2, ",")) != 2 {
		t.Fatalf("GPU jobs: %v %q, %v %q; want COMPLETED with two GPUs each", r1, g1, r2, g2)
	}
	overlap := r1["Start"] < r2["End"] && r2["Start"] < r1["End"]
	t.Logf("two 2-GPU jobs on gpu-0002: %s (%s..%s) and %s (%s..%s), overlapping: %v", g1, r1["Start"], r1["End"], g2, r2["Start"], r2["End"], overlap)
	for _, g := range strings.Split(g1, ",") {
		if overlap && slices.Contains(strings.Split(g2, ","), g) {
			t.Errorf("jobs %s and %s ran at the same time on GPU %s of gpu-0002", j1, j2, g)
		}
	}
}

// TestRequeue: requeue.sh, requeued by scontrol requeue while it runs: it
// runs again (SLURM_RESTART_COUNT=1) and completes; sacct -D shows both runs,
// each with its own batch step and srun step.
func TestRequeue(t *testing.T) {
	needs(t, needUpdate, needSteps)
	t.Parallel()
	s := setup(t).session(t, "main")
	id := s.sbatch(s.script("requeue.sh"))
	s.waitFile("first-run", 60*time.Second)
	if r := s.run("scontrol", "requeue", id); r.code != 0 || r.stdout != "" || r.stderr != "" {
		t.Fatalf("scontrol requeue %s: %s", id, r)
	}
	row := s.waitState(id, 60*time.Second, "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")
	wantEqual(t, "requeued job state", state(row), "COMPLETED")
	runs := strings.Split(strings.TrimSpace(s.read("runs.txt")), "\n")
	if len(runs) != 2 || runs[1] != "run restart=1" {
		t.Errorf("runs.txt = %q; want two runs, the second with SLURM_RESTART_COUNT=1", runs)
	}
	// As Slurm (--open-mode=truncate by default): each run starts the file
	// anew, and only once the old run has stopped (its "DUE TO JOB REQUEUE"
	// line written before), so nothing of the first run is left.
	wantEqual(t, "output after the requeue", s.read("requeue-"+id+".out"), "second run\n")
	kv := s.showJob(id)
	wantEqual(t, "scontrol show job Restarts", kv["Restarts"], "1")
	wantEqual(t, "scontrol show job Requeue", kv["Requeue"], "1")
	var states []string
	for _, r := range s.acct("-D", "-X", "-j", id) {
		states = append(states, state(r))
	}
	if !slices.Equal(states, []string{"REQUEUED", "COMPLETED"}) {
		t.Errorf("sacct -D -X -j %s states %q, want [REQUEUED COMPLETED]", id, states)
	}
	var rows []string
	for _, r := range s.acct("-D", "-j", id) {
		rows = append(rows, r["JobID"]+" "+state(r))
	}
	want := []string{id + " REQUEUED", id + ".batch REQUEUED", id + ".0 COMPLETED", id + " COMPLETED", id + ".batch COMPLETED", id + ".0 COMPLETED"}
	if !slices.Equal(rows, want) {
		t.Errorf("sacct -D -j %s rows %q, want %q", id, rows, want)
	}
}

// TestNodeFailRequeue: nodefail.sh on cluster nf; its node dies (agent and
// processes killed, the node stays silent): the run ends NODE_FAIL, the job
// (--requeue) runs again on the other node and completes.
func TestNodeFailRequeue(t *testing.T) {
	needs(t, needNodeEvents, needSinfo)
	t.Parallel()
	f := setup(t)
	s := f.session(t, "nf")
	id := s.sbatch(s.script("nodefail.sh"))
	first := s.waitLine("first-run", 60*time.Second)
	// Its script runs: the job shows R (RUNNING from its start, as Slurm's).
	var q []map[string]string
	s.waitFor(30*time.Second, "job "+id+" to show R", func() bool {
		q = s.queue("-j", id)
		return len(q) == 1 && q[0]["ST"] == "R"
	})
	if len(q) != 1 || q[0]["ST"] != "R" || !strings.HasPrefix(q[0]["NODELIST"], "nf-") {
		t.Fatalf("squeue -j %s = %v; want it running on one nf node", id, q)
	}
	host := q[0]["NODELIST"]
	batchPID, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		t.Fatalf("first-run holds %q: %v", first, err)
	}

	// The machine dies: its agent and every process it started, and it
	// stays silent when the provisioner relaunches its agent.
	dir := f.nodeDir("nf", host)
	if err := os.WriteFile(filepath.Join(dir, nodeDownFile), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	pidf, err := os.ReadFile(filepath.Join(dir, "agent.pid"))
	if err != nil {
		t.Fatal(err)
	}
	agentPID, err := strconv.Atoi(strings.Fields(string(pidf))[0])
	if err != nil {
		t.Fatalf("agent.pid holds %q", pidf)
	}
	// The batch script runs in its step's process group, led by the
	// agent's step shim (which outlives an agent crash): kill that group.
	batchPGID, err := syscall.Getpgid(batchPID)
	if err != nil {
		t.Fatalf("process group of the batch script %d: %v", batchPID, err)
	}
	for _, pgid := range []int{agentPID, batchPGID} {
		if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil {
			t.Errorf("kill -9 -%d: %v", pgid, err)
		}
	}
	t.Logf("killed node %s (agent %d, batch script %d)", host, agentPID, batchPID)
	t.Cleanup(func() { reviveNode(t, s, dir, host) })

	s.waitFor(60*time.Second, "sinfo to show "+host+" down", func() bool {
		st := strings.TrimSpace(s.ok("sinfo", "-h", "-N", "-n", host, "-o", "%t"))
		return strings.HasPrefix(st, "down")
	})
	row := s.waitState(id, 90*time.Second, "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")
	wantEqual(t, "job state after the node failure", state(row), "COMPLETED")
	runs := strings.Split(strings.TrimSpace(s.read("runs.txt")), "\n")
	if len(runs) != 2 || !strings.Contains(runs[0], "nodes="+host) || strings.Contains(runs[1], "nodes="+host) {
		t.Errorf("runs.txt = %q; want a second run on another node than %s", runs, host)
	}
	wantEqual(t, "scontrol show job Restarts", s.showJob(id)["Restarts"], "1")
	acct := s.acct("-D", "-X", "-j", id)
	if len(acct) != 2 || state(acct[0]) != "NODE_FAIL" || acct[0]["NodeList"] != host || state(acct[1]) != "COMPLETED" || acct[1]["NodeList"] == host {
		t.Errorf("sacct -D -X -j %s = %v; want a NODE_FAIL run on %s, then a COMPLETED one elsewhere", id, acct, host)
	}
}

// reviveNode brings a node TestNodeFailRequeue killed back, so that the
// shared cluster is whole for whatever runs next (-count=2 included): the
// machine's agent, relaunched and left hanging, is told to stop, and the
// provisioner starts a working one; it waits until sinfo shows the node up.
func reviveNode(t *testing.T, s *session, dir, host string) {
	if err := os.Remove(filepath.Join(dir, nodeDownFile)); err != nil {
		t.Errorf("revive %s: %v", host, err)
		return
	}
	if b, err := os.ReadFile(filepath.Join(dir, "agent.pid")); err == nil {
		if pid, err := strconv.Atoi(strings.Fields(string(b))[0]); err == nil {
			_ = syscall.Kill(pid, syscall.SIGTERM)
		}
	}
	s.waitFor(90*time.Second, "sinfo to show "+host+" up again", func() bool {
		st := strings.TrimSpace(s.ok("sinfo", "-h", "-N", "-n", host, "-o", "%t"))
		return st != "" && !strings.HasPrefix(st, "down")
	})
}

// TestTimeLimit: timeout.sh runs past its time limit (Loom takes seconds,
// M:S): it gets --signal's USR1 two seconds before, then ends TIMEOUT.
//
// The script asks for --time=5:00 and the test lowers the limit with
// scontrol update once the script's trap is set (it prints "start" after
// it). A limit given at submission counts from the allocation: with
// --time=0:03, USR1 came 1 s after it, and on a loaded machine the shell
// had not yet run `trap`, so USR1's default action ended it ("got USR1"
// missing, the job FAILED). The new limit is the run time so far plus
// 10 s: the update has 8 s to land before the signal is due.
func TestTimeLimit(t *testing.T) {
	needs(t, needSignal, needUpdate)
	t.Parallel()
	s := setup(t).session(t, "main")
	id := s.sbatch(s.script("timeout.sh"))
	outFile := "timeout-" + id + ".out"
	wantEqual(t, "timeout.sh's first line", s.waitLine(outFile, 60*time.Second), "start\n")
	kv := s.showJob(id)
	wantEqual(t, "scontrol show job TimeLimit (#SBATCH --time=5:00)", kv["TimeLimit"], "00:05:00")
	limit := elapsed(t, kv["RunTime"]) + 10
	t.Logf("job %s: trap set at RunTime %s; time limit lowered to %d s", id, kv["RunTime"], limit)
	s.ok("scontrol", "update", "JobId="+id, fmt.Sprintf("TimeLimit=%d:%02d", limit/60, limit%60))
	row := s.waitDone(id, 60*time.Second)
	wantEqual(t, "job state", state(row), "TIMEOUT")
	if e := elapsed(t, row["Elapsed"]); e < limit || e > limit+17 {
		t.Errorf("Elapsed %s; want the %d s limit (plus the kill)", row["Elapsed"], limit)
	}
	out := s.read(outFile)
	// As slurmstepd: the log says why the job ended.
	end := regexp.MustCompile(`slurmstepd-[a-z0-9-]+: error: \*\*\* JOB ` + id + ` ON [a-z0-9-]+ CANCELLED AT [0-9T:-]{19} DUE TO TIME LIMIT \*\*\*\n`).FindStringIndex(out)
	if end == nil {
		t.Errorf("output %q; want slurmstepd's line for the time limit", out)
	}
	usr1 := strings.Index(out, "got USR1\n")
	if !strings.HasPrefix(out, "start\n") || usr1 < 0 || (end != nil && usr1 > end[0]) {
		t.Errorf("output %q; want start, then USR1 (--signal=B:USR1@2) before the limit's line", out)
	}
	kv = s.showJob(id)
	wantEqual(t, "scontrol show job JobState", kv["JobState"], "TIMEOUT")
	wantEqual(t, "scontrol show job TimeLimit", kv["TimeLimit"], fmt.Sprintf("%02d:%02d:%02d", limit/3600, limit/60%60, limit%60))
}

// TestPartitionTimeLimit: a --time over the partition's MaxTime (short:
// 0:20) pends on PartitionTimeLimit until scontrol update lowers it or
// moves the job.
func TestPartitionTimeLimit(t *testing.T) {
	needs(t, needUpdate)
	t.Parallel()
	s := setup(t).session(t, "main")
	long1 := s.sbatch("-p", "short", "--time=1:00", "-o", "short-%j.out", "--wrap", "echo short ran")
	long2 := s.sbatch("-p", "short", "--time=1:00", "-o", "short-%j.out", "--wrap", "echo moved ran")
	for _, id := range []string{long1, long2} {
		s.waitFor(30*time.Second, "job "+id+" pending on PartitionTimeLimit", func() bool {
			r := s.queue("-j", id)
			return len(r) == 1 && r[0]["ST"] == "PD" && r[0]["REASON"] == "PartitionTimeLimit"
		})
	}
	if out := s.ok("scontrol", "update", "JobId="+long1, "TimeLimit=0:10"); out != "" {
		t.Errorf("scontrol update printed %q", out)
	}
	s.ok("scontrol", "update", "JobId="+long2, "Partition=batch")
	for id, want := range map[string]string{long1: "short ran\n", long2: "moved ran\n"} {
		r := s.waitDone(id, 60*time.Second)
		wantEqual(t, "job "+id+" state", state(r), "COMPLETED")
		wantEqual(t, "job "+id+" output", s.read("short-"+id+".out"), want)
	}
	kv := s.showJob(long1)
	wantEqual(t, "updated TimeLimit", kv["TimeLimit"], "00:00:10")
	wantEqual(t, "updated Partition", s.showJob(long2)["Partition"], "batch")
}

// TestMultiPartition: sbatch -p short,batch,short. Pending, squeue and
// scontrol show the list (once per name), squeue -p batch lists it, and
// scontrol update Partition= takes a list; a --time past short's MaxTime
// (20 s) runs in batch, which squeue, scontrol and sacct then show alone,
// as slurmctld shows a started job's partition (job_ptr->part_ptr), and
// SLURM_JOB_PARTITION; scontrol requeuehold puts it back in the list, the
// partition it ran in first.
func TestMultiPartition(t *testing.T) {
	needs(t, needUpdate)
	t.Parallel()
	s := setup(t).session(t, "main")
	held := s.sbatch("--hold", "-p", "short,batch,short", "--wrap", "true")
	q := s.queue("-j", held)
	if len(q) != 1 || q[0]["PARTITION"] != "short,batch" || q[0]["ST"] != "PD" {
		t.Fatalf("squeue -j %s = %v; want PD in short,batch", held, q)
	}
	wantEqual(t, "pending Partition", s.showJob(held)["Partition"], "short,batch")
	if q := s.queue("-p", "batch", "-j", held); len(q) != 1 {
		t.Errorf("squeue -p batch -j %s = %v; want the job", held, q)
	}
	s.ok("scontrol", "update", "JobId="+held, "Partition=batch,short")
	wantEqual(t, "updated Partition", s.showJob(held)["Partition"], "batch,short")
	s.ok("scancel", held)

	id := s.sbatch("-p", "short,batch", "--time=1:00", "-o", "multi-%j.out", "--wrap", "echo multi ran")
	r := s.waitDone(id, 60*time.Second)
	wantEqual(t, "job "+id+" state", state(r), "COMPLETED")
	wantEqual(t, "job "+id+" output", s.read("multi-"+id+".out"), "multi ran\n")
	wantEqual(t, "sacct Partition", r["Partition"], "batch")
	wantEqual(t, "scontrol Partition", s.showJob(id)["Partition"], "batch")

	// Running, SLURM_JOB_PARTITION is the partition used; requeued, the job
	// is pending in the list again, that partition first (slurmctld's
	// rebuild_job_part_list: short,batch run in batch is batch,short).
	rq := s.sbatch("-p", "short,batch", "--time=1:00", "--requeue", "-o", "/dev/null",
		"--wrap", "echo $SLURM_JOB_PARTITION > multi-part-$SLURM_JOB_ID; sleep 50")
	wantEqual(t, "SLURM_JOB_PARTITION", s.waitLine("multi-part-"+rq, 60*time.Second), "batch\n")
	s.ok("scontrol", "requeuehold", rq)
	s.waitState(rq, 60*time.Second, "PENDING")
	wantEqual(t, "requeued Partition", s.showJob(rq)["Partition"], "batch,short")
	if q := s.queue("-j", rq); len(q) != 1 || q[0]["PARTITION"] != "batch,short" {
		t.Errorf("squeue -j %s = %v; want PD in batch,short", rq, q)
	}
	s.ok("scancel", rq)
}

// TestHoldRelease: hold.sh (--hold) waits on JobHeldUser until scontrol
// release; scontrol hold and release a job pending on --begin.
func TestHoldRelease(t *testing.T) {
	t.Parallel()
	s := setup(t).session(t, "main")
	id := s.sbatch(s.script("hold.sh"))
	// A job submitted after it runs to its end: the scheduler has passed
	// over the held job.
	other := s.sbatch("--wrap", "true")
	wantEqual(t, "unheld job", state(s.waitDone(other, 60*time.Second)), "COMPLETED")
	q := s.queue("-j", id)
	if len(q) != 1 || q[0]["ST"] != "PD" || q[0]["REASON"] != "JobHeldUser" {
		t.Fatalf("squeue -j %s = %v; want PD (JobHeldUser)", id, q)
	}
	kv := s.showJob(id)
	wantEqual(t, "held JobState", kv["JobState"], "PENDING")
	wantEqual(t, "held Reason", kv["Reason"], "JobHeldUser")
	wantEqual(t, "held Priority", kv["Priority"], "0")
	if r := s.run("scontrol", "release", id); r.code != 0 || r.stdout != "" || r.stderr != "" {
		t.Fatalf("scontrol release %s: %s", id, r)
	}
	wantEqual(t, "released job", state(s.waitDone(id, 60*time.Second)), "COMPLETED")
	wantEqual(t, "released job output", s.read("held-"+id+".out"), "released and ran\n")

	// scontrol hold on a job pending for its --begin time, then release.
	later := s.sbatch("--begin=now+600", "--wrap", "true")
	reason := func() string {
		r := s.queue("-j", later)
		if len(r) != 1 {
			return fmt.Sprint(r)
		}
		return r[0]["ST"] + " " + r[0]["REASON"]
	}
	s.waitFor(30*time.Second, "job "+later+" pending on BeginTime", func() bool { return reason() == "PD BeginTime" })
	s.ok("scontrol", "hold", later)
	s.waitFor(30*time.Second, "job "+later+" held", func() bool { return reason() == "PD JobHeldUser" })
	s.ok("scontrol", "release", later)
	s.waitFor(30*time.Second, "job "+later+" released, pending on its begin time", func() bool { return reason() == "PD BeginTime" })
	s.ok("scancel", later)
	wantEqual(t, "cancelled pending job", state(s.waitDone(later, 30*time.Second)), "CANCELLED")
}

// TestUpdateNodeRange: scontrol update NumNodes=MIN-MAX on a pending job
// reaches the scheduler as a range, as Slurm 22.05 keeps it (NumNodes=1-3
// in scontrol show job); a count alone then replaces it.
func TestUpdateNodeRange(t *testing.T) {
	needs(t, needUpdate)
	t.Parallel()
	s := setup(t).session(t, "main")
	id := s.sbatch("-H", "--wrap", "true")
	t.Cleanup(func() { s.run("scancel", id) })
	s.ok("scontrol", "update", "JobId="+id, "NumNodes=1-3")
	s.waitFor(30*time.Second, "job "+id+" NumNodes=1-3", func() bool { return s.showJob(id)["NumNodes"] == "1-3" })
	s.ok("scontrol", "update", "JobId="+id, "NumNodes=1")
	s.waitFor(30*time.Second, "job "+id+" NumNodes=1", func() bool { return s.showJob(id)["NumNodes"] == "1" })
}

// TestPreemption: preempt_low.sh holds the only node's GPUs; a job that
// may preempt it — of partition high (priority tier 10 over low's 1), or of
// QOS high (which may preempt QOS low) — gets the node: low gets --signal's
// USR1 and writes a checkpoint, is requeued, and resumes from the
// checkpoint after the preemptor ends. The two cases run one after the
// other on cluster pre (its one node is what they compete for).
func TestPreemption(t *testing.T) {
	needs(t, needSignal, needAppend, needSacctmgr)
	t.Parallel()
	f := setup(t)
	for _, c := range []struct {
		name      string
		low, high []string
	}{
		{"partition tier", nil, nil},
		{"QOS", []string{"--qos=low"}, []string{"--partition=low", "--qos=high"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := f.session(t, "pre")
			if c.name == "QOS" {
				// QOS high outranks and may preempt: it is not open to
				// every member (low and normal are) and needs a grant,
				// as under Slurm's AccountingStorageEnforce=qos.
				r := s.run("sbatch", append(c.high, s.script("preempt_high.sh"))...)
				if r.code != 1 || !strings.Contains(r.stderr, "Batch job submission failed: Invalid qos specification\n") ||
					!strings.Contains(r.stderr, "sacctmgr add user "+s.user+" account=root QOS=high") {
					t.Fatalf("sbatch --qos=high without a grant: %s; want Slurm's Invalid qos specification and how to get one", r)
				}
				f.grantQOS(t, s.user, "high")
			}
			low := s.sbatch(append(c.low, s.script("preempt_low.sh"))...)
			s.waitFile("low-running", 60*time.Second)
			high := s.sbatch(append(c.high, s.script("preempt_high.sh"))...)
			rh := s.waitDone(high, 90*time.Second)
			wantEqual(t, "high job", state(rh), "COMPLETED")
			wantEqual(t, "high job output", s.read("high-"+high+".out"), "high ran\n")
			rl := s.waitState(low, 90*time.Second, "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")
			wantEqual(t, "preempted job in the end", state(rl), "COMPLETED")
			wantEqual(t, "checkpoint", s.read("checkpoint"), "step-42\n")
			out := s.read("low-" + low + ".out")
			for _, want := range []string{"low started\n", "checkpointed\n", "resumed from step-42\n"} {
				if !strings.Contains(out, want) {
					t.Errorf("low job output lacks %q:\n%s", want, out)
				}
			}
			runs := s.acct("-D", "-X", "-j", low)
			if len(runs) != 2 || (state(runs[0]) != "PREEMPTED" && state(runs[0]) != "REQUEUED") || state(runs[1]) != "COMPLETED" {
				t.Fatalf("sacct -D -X -j %s = %v; want a PREEMPTED (or REQUEUED) run, then a COMPLETED one", low, runs)
			}
			if rh["Start"] < runs[0]["End"] || runs[1]["Start"] < rh["End"] {
				t.Errorf("high ran %s..%s; low's runs %s..%s and %s..%s: want high between them",
					rh["Start"], rh["End"], runs[0]["Start"], runs[0]["End"], runs[1]["Start"], runs[1]["End"])
			}
		})
	}
}

// TestOutputPatterns: patterns.sh's --output/--error with %x %j %u %N, the
// command line over the directives, %%, and --chdir.
func TestOutputPatterns(t *testing.T) {
	t.Parallel()
	s := setup(t).session(t, "main")
	s.mkdir("logs")
	id := s.sbatch(s.script("patterns.sh"))
	row := s.waitDone(id, 60*time.Second)
	wantEqual(t, "job state", state(row), "COMPLETED")
	// %N is the job's first node. On the Slurm backend Slurm expands it:
	// slurmstepd puts its host's short name (gethostname), which on the
	// suite's real Slurm is this machine's for every virtual node, and
	// scontrol show job shows the pattern itself (StdErr=.../ID-%N.err),
	// as slurm-wlm 22.05 does (checked by hand here).
	nodeOf := func(row map[string]string) string { return row["NodeList"] }
	shownErr := func(errFile string) string { return s.path(errFile) }
	if onSlurm() {
		h, err := os.Hostname()
		if err != nil {
			t.Fatal(err)
		}
		short, _, _ := strings.Cut(h, ".")
		nodeOf = func(map[string]string) string { return short }
		shownErr = func(string) string { return s.path(fmt.Sprintf("logs/%s-%%N.err", id)) }
	}
	host := nodeOf(row)
	outFile := fmt.Sprintf("out-patt-%s-%s.txt", id, s.user)
	errFile := fmt.Sprintf("logs/%s-%s.err", id, host)
	wantEqual(t, outFile, s.read(outFile), "to-stdout\n")
	wantEqual(t, errFile, s.read(errFile), "to-stderr\n")
	kv := s.showJob(id)
	wantEqual(t, "StdOut", kv["StdOut"], s.path(outFile))
	wantEqual(t, "StdErr", kv["StdErr"], shownErr(errFile))

	// The command line wins over #SBATCH; %% is a literal %.
	id2 := s.sbatch("-o", "pct%%-%j.txt", "-J", "cmdline", "patterns.sh")
	row2 := s.waitDone(id2, 60*time.Second)
	wantEqual(t, "pct%-ID.txt", s.read("pct%-"+id2+".txt"), "to-stdout\n")
	wantEqual(t, "the directive's --error", s.read(fmt.Sprintf("logs/%s-%s.err", id2, nodeOf(row2))), "to-stderr\n")
	wantEqual(t, "-J over the directive", row2["JobName"], "cmdline")

	// --chdir: the job runs there, and relative paths are from there.
	s.mkdir("sub")
	id3 := s.sbatch("-D", "sub", "--wrap", "pwd")
	wantEqual(t, "--chdir job", state(s.waitDone(id3, 60*time.Second)), "COMPLETED")
	wantEqual(t, "sub/slurm-ID.out", s.read("sub/slurm-"+id3+".out"), s.path("sub")+"\n")
}

// TestWrapParsableExport: --wrap, --parsable, default output names (also
// for arrays), --export and a script on standard input.
func TestWrapParsableExport(t *testing.T) {
	t.Parallel()
	s := setup(t).session(t, "main")
	id := s.sbatch("--wrap", "echo wrapped $SLURM_JOB_ID")
	row := s.waitDone(id, 60*time.Second)
	wantEqual(t, "--wrap job", state(row), "COMPLETED")
	wantEqual(t, "--wrap JobName", row["JobName"], "wrap")
	wantEqual(t, "slurm-ID.out", s.read("slurm-"+id+".out"), "wrapped "+id+"\n")

	r := s.run("sbatch", "--parsable", "--wrap", "true")
	if r.code != 0 || !regexp.MustCompile(`^[0-9]+\n$`).MatchString(r.stdout) || r.stderr != "" {
		t.Errorf("sbatch --parsable: %s; want the job id alone", r)
	}
	t.Run("Array", func(t *testing.T) {
		needs(t, needArrays)
		s := s.in(t)
		r := s.run("sbatch", "--parsable", "--array=1-2", "--wrap", "echo task $SLURM_ARRAY_TASK_ID")
		if r.code != 0 || !regexp.MustCompile(`^[0-9]+\n$`).MatchString(r.stdout) {
			t.Fatalf("sbatch --parsable --array: %s", r)
		}
		arr := strings.TrimSpace(r.stdout)
		s.waitFor(60*time.Second, "array "+arr+" to end", func() bool {
			n := 0
			for _, r := range s.acct("-X", "-j", arr) {
				if state(r) == "COMPLETED" {
					n++
				}
			}
			return n == 2
		})
		for _, k := range []string{"1", "2"} {
			wantEqual(t, "slurm-A_"+k+".out", s.read("slurm-"+arr+"_"+k+".out"), "task "+k+"\n")
		}
	})

	// --export: ALL plus a variable; NONE.
	s.env = append(s.env, "FROM_ENV=outer")
	e1 := s.sbatch("--export=ALL,GREETING=hi", "-o", "e1.out", "--wrap", `echo "$GREETING $FROM_ENV"`)
	e2 := s.sbatch("--export=NONE", "-o", "e2.out", "--wrap", `echo "[${FROM_ENV-}]"`)
	s.waitDone(e1, 60*time.Second)
	s.waitDone(e2, 60*time.Second)
	wantEqual(t, "--export=ALL,GREETING=hi", s.read("e1.out"), "hi outer\n")
	wantEqual(t, "--export=NONE", s.read("e2.out"), "[]\n")

	// A script on standard input.
	r = s.runStdin("#!/bin/sh\n#SBATCH --job-name=fromstdin\necho from stdin\n", "sbatch")
	m := submitted.FindStringSubmatch(r.stdout)
	if r.code != 0 || m == nil {
		t.Fatalf("sbatch < script: %s", r)
	}
	row = s.waitDone(m[1], 60*time.Second)
	wantEqual(t, "script from stdin", row["JobName"]+" "+state(row), "fromstdin COMPLETED")
	wantEqual(t, "its output", s.read("slurm-"+m[1]+".out"), "from stdin\n")

	// Jobs writing one output file: each empties it first, as Slurm's default
	// --open-mode=truncate does (checked against slurm-wlm 22.05 here);
	// --open-mode=append keeps what is there.
	for i, args := range [][]string{{"--wrap", "echo first"}, {"--wrap", "echo second"}} {
		s.waitDone(s.sbatch(append([]string{"-o", "same.out"}, args...)...), 60*time.Second)
		want := []string{"first\n", "second\n"}[i]
		wantEqual(t, "same.out after "+strings.Join(args, " "), s.read("same.out"), want)
	}
	t.Run("OpenModeAppend", func(t *testing.T) {
		needs(t, needAppend)
		s := s.in(t)
		s.waitDone(s.sbatch("-o", "same.out", "--open-mode=append", "--wrap", "echo third"), 60*time.Second)
		wantEqual(t, "same.out after --open-mode=append", s.read("same.out"), "second\nthird\n")
	})

	// A bash script runs under bash, as Slurm runs it, with its arguments.
	bash := s.sbatch(s.script("bashisms.sh"), "one", "two")
	row = s.waitDone(bash, 60*time.Second)
	wantEqual(t, "bash script", row["JobName"]+" "+state(row), "bashisms COMPLETED")
	wantEqual(t, "its output", s.read("slurm-"+bash+".out"), "two of 3\n")

	// An exported bash function (export -f; Lmod's module is one) reaches
	// the job, as Slurm carries it; a variable whose name no environment
	// takes (env(1) can make one) stays behind instead of failing sbatch.
	s.env = append(s.env, "BASH_FUNC_greet%%=() {  echo \"hello $1\"\n}", "odd-name.x=1")
	fn := s.sbatch(s.script("bashfunc.sh"))
	row = s.waitDone(fn, 60*time.Second)
	wantEqual(t, "bash function job", state(row), "COMPLETED")
	wantEqual(t, "its output", s.read("slurm-"+fn+".out"), "hello loom\n")
}

// TestInvalidOptions: bad options and scripts are refused with Slurm's
// messages, and nothing is queued.
func TestInvalidOptions(t *testing.T) {
	t.Parallel()
	s := setup(t).session(t, "main")
	ok := s.script("dep_ok.sh")
	s.script("noshebang.sh")
	s.script("bad_directive.sh")
	for _, c := range []struct {
		args []string
		// want is the start of stderr, as Slurm 22.05 prints it; also
		// (when set) a phrase it must contain.
		want, phrase string
	}{
		{[]string{"--bogus", ok}, "sbatch: unrecognized option '--bogus'\nTry \"sbatch --help\" for more information\n", ""},
		{[]string{"--time=abc", ok}, "sbatch: error: Invalid --time specification", ""},
		{[]string{"--array=5-x", ok}, "sbatch: error: ", "array"},
		// MaxArraySize (1001, slurm.conf's as Loom's): the server refuses it.
		{[]string{"--array=0-1001", ok}, "sbatch: error: Batch job submission failed: Invalid job array specification", ""},
		{[]string{"--dependency=afterok:abc", ok}, "sbatch: error: ", "ependency"},
		{[]string{"--gres=gpu:a:b:c", ok}, "sbatch: error: ", "gres"},
		{[]string{"--nodes=0", ok}, "sbatch: error: ", "ode count"},
		{[]string{"noshebang.sh"}, "sbatch: error: This does not look like a batch script.  The first\n" +
			"sbatch: error: line must start with #! followed by the path to an interpreter.\n" +
			"sbatch: error: For instance: #!/bin/sh\n", ""},
		{[]string{"bad_directive.sh"}, "sbatch: unrecognized option '--no-such-option", ""},
		{[]string{"--wrap", "true", "extra"}, "sbatch: error: Script arguments ", "--wrap"},
		{[]string{"-p", "nosuch", ok}, "sbatch: error: ", "artition"},
		{[]string{"--gres=gpu:8", ok}, "sbatch: error: Batch job submission failed: ", ""},
		{[]string{"missing.sh"}, "sbatch: error: Unable to open file missing.sh\n", ""},
	} {
		r := s.run("sbatch", c.args...)
		if r.code == 0 || r.stdout != "" || !strings.HasPrefix(r.stderr, c.want) || !strings.Contains(r.stderr, c.phrase) {
			t.Errorf("sbatch %s: %s; want a refusal starting %q (and saying %q)", strings.Join(c.args, " "), r, c.want, c.phrase)
		}
	}
	if q := s.queue("--me", "-t", "all"); len(q) != 0 {
		t.Errorf("refused submissions were queued: squeue shows %v", q)
	}
	if a := s.acct("-X"); len(a) != 0 {
		t.Errorf("refused submissions were queued: sacct shows %v", a)
	}
}

// TestCommandFormats: squeue, sinfo, sacct, scontrol and sprio print
// Slurm's headers byte for byte and rows in its layout.
func TestCommandFormats(t *testing.T) {
	needs(t, needSinfo)
	t.Parallel()
	s := setup(t).session(t, "main")
	id := s.sbatch("--hold", "-J", "fmt", "--wrap", "true")
	dep := s.sbatch("-J", "fmtdep", "-d", "afterok:"+id, "--wrap", "true")
	t.Cleanup(func() { s.run("scancel", id, dep) })
	user8 := s.user[:min(8, len(s.user))]

	// squeue: the default, -h, -l, -o, and the filters.
	lines := strings.Split(strings.TrimSuffix(s.ok("squeue", "--me"), "\n"), "\n")
	wantEqual(t, "squeue header", lines[0], squeueHeader)
	rows := slices.Sorted(slices.Values(lines[1:]))
	want := []string{
		fmt.Sprintf("%18s %9s %8s %8s %2s %10s %6s %s", id, "batch", "fmt", user8, "PD", "0:00", "1", "(JobHeldUser)"),
		fmt.Sprintf("%18s %9s %8s %8s %2s %10s %6s %s", dep, "batch", "fmtdep", user8, "PD", "0:00", "1", "(Dependency)"),
	}
	if slices.Sort(want); !slices.Equal(rows, want) {
		t.Errorf("squeue rows\n%q\nwant\n%q", rows, want)
	}
	wantEqual(t, "squeue -h -j", s.ok("squeue", "-h", "-j", id),
		fmt.Sprintf("%18s %9s %8s %8s %2s %10s %6s %s\n", id, "batch", "fmt", user8, "PD", "0:00", "1", "(JobHeldUser)"))
	lines = strings.Split(s.ok("squeue", "-l", "-j", id), "\n")
	if len(lines) < 3 || !ctimeLine.MatchString(lines[0]) || lines[1] != squeueLongHeader {
		t.Errorf("squeue -l starts %q; want a date line, then %q", lines[:min(2, len(lines))], squeueLongHeader)
	} else {
		wantEqual(t, "squeue -l row", lines[2], fmt.Sprintf("%18s %9s %8s %8s %8s %10s %9s %6s %s", id, "batch", "fmt", user8, "PENDING", "0:00", "UNLIMITED", "1", "(JobHeldUser)"))
	}
	wantEqual(t, "squeue -o", s.ok("squeue", "-j", id, "-o", "%i %j %T %r"), "JOBID NAME STATE REASON\n"+id+" fmt PENDING JobHeldUser\n")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-u", s.user}, sortedIDs(id, dep)},
		{[]string{"-u", "nobody-else"}, ""},
		{[]string{"--me", "-t", "R"}, ""},
		{[]string{"--me", "-t", "PD"}, sortedIDs(id, dep)},
		{[]string{"-j", dep}, dep + "\n"},
		{[]string{"--me", "-n", "fmtdep"}, dep + "\n"},
	} {
		got := strings.Fields(s.ok("squeue", append([]string{"-h", "-o", "%i"}, c.args...)...))
		slices.Sort(got)
		wantEqual(t, fmt.Sprint("squeue -h -o %i ", c.args), strings.Join(got, "\n"), strings.TrimSuffix(c.want, "\n"))
	}
	if r := s.run("squeue", "-j", "99999999"); r.code != 1 || r.stderr != "slurm_load_jobs error: Invalid job id specified\n" {
		t.Errorf("squeue -j 99999999: %s", r)
	}

	// sinfo: the default, -N, -l, -s.
	lines = strings.Split(strings.TrimSuffix(s.ok("sinfo"), "\n"), "\n")
	wantEqual(t, "sinfo header", lines[0], sinfoHeader)
	parts := map[string]int{}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) != 6 || f[1] != "up" {
			t.Errorf("sinfo row %q; want PARTITION up TIMELIMIT NODES STATE NODELIST", l)
			continue
		}
		n, _ := strconv.Atoi(f[3])
		parts[f[0]+" "+f[2]] += n
		if !strings.HasPrefix(f[5], "gpu-") {
			t.Errorf("sinfo row %q: nodes %q", l, f[5])
		}
	}
	if want := map[string]int{"batch* infinite": 2, "short 0:20": 2}; fmt.Sprint(parts) != fmt.Sprint(want) {
		t.Errorf("sinfo partitions (name, time limit: nodes) %v, want %v", parts, want)
	}
	lines = strings.Split(strings.TrimSuffix(s.ok("sinfo", "-N"), "\n"), "\n")
	wantEqual(t, "sinfo -N header", lines[0], sinfoNodeHeader)
	var nodeRows []string
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) == 4 {
			nodeRows = append(nodeRows, f[0]+" "+f[1]+" "+f[2])
		}
	}
	slices.Sort(nodeRows)
	if want := []string{"gpu-0001 1 batch*", "gpu-0001 1 short", "gpu-0002 1 batch*", "gpu-0002 1 short"}; !slices.Equal(nodeRows, want) {
		t.Errorf("sinfo -N rows %q, want %q", nodeRows, want)
	}
	lines = strings.Split(s.ok("sinfo", "-l"), "\n")
	if len(lines) < 2 || !ctimeLine.MatchString(lines[0]) || lines[1] != sinfoLongHeader {
		t.Errorf("sinfo -l starts %q; want a date line, then %q", lines[:min(2, len(lines))], sinfoLongHeader)
	}
	lines = strings.Split(s.ok("sinfo", "-s"), "\n")
	wantEqual(t, "sinfo -s header", lines[0], sinfoSummarizeHeader)
	if len(lines) > 1 {
		wantEqual(t, "sinfo -s batch row", strings.Join(strings.Fields(lines[1])[:2], " ")+" "+strings.Fields(lines[1])[4], "batch* up gpu-[0001-0002]")
	}

	// sacct: the default, --parsable2, --format widths.
	out := s.ok("sacct", "-j", id)
	wantEqual(t, "sacct", out, sacctHeader+"\n"+fmt.Sprintf("%-12s %10s %10s %10s %10s %10s %8s \n", id, "fmt", "batch", "", "0", "PENDING", "0:0"))
	wantEqual(t, "sacct --parsable2", s.ok("sacct", "--parsable2", "-j", id),
		"JobID|JobName|Partition|Account|AllocCPUS|State|ExitCode\n"+id+"|fmt|batch||0|PENDING|0:0\n")
	wantEqual(t, "sacct -p", strings.SplitN(s.ok("sacct", "-p", "-j", id), "\n", 2)[0], "JobID|JobName|Partition|Account|AllocCPUS|State|ExitCode|")
	wantEqual(t, "sacct --format=JobID,JobName%20,State", s.ok("sacct", "-j", id, "--format=JobID,JobName%20,State"),
		"JobID                     JobName      State \n------------ -------------------- ---------- \n"+
			fmt.Sprintf("%-12s %20s %10s \n", id, "fmt", "PENDING"))

	// scontrol show job, partition, node.
	out = s.ok("scontrol", "show", "job", id)
	if !strings.HasPrefix(out, "JobId="+id+" JobName=fmt\n   UserId="+s.user) {
		t.Errorf("scontrol show job starts %q", out[:min(len(out), 80)])
	}
	kv := keyValues(out)
	for k, want := range map[string]string{"JobState": "PENDING", "Reason": "JobHeldUser", "Partition": "batch",
		"NumNodes": "1", "WorkDir": s.dir, "StdOut": s.path("slurm-" + id + ".out"), "TimeLimit": "UNLIMITED", "Requeue": "1", "Restarts": "0"} {
		wantEqual(t, "scontrol show job "+k, kv[k], want)
	}
	wantEqual(t, "dependent job's Dependency", s.showJob(dep)["Dependency"], "afterok:"+id+"(unfulfilled)")
	if r := s.run("scontrol", "show", "job", "99999999"); r.code != 1 || r.stderr != "slurm_load_jobs error: Invalid job id specified\n" {
		t.Errorf("scontrol show job 99999999: %s", r)
	}
	out = s.ok("scontrol", "show", "partition", "short")
	if !strings.HasPrefix(out, "PartitionName=short\n") {
		t.Errorf("scontrol show partition starts %q", out[:min(len(out), 40)])
	}
	kv = keyValues(out)
	for k, want := range map[string]string{"Default": "NO", "MaxTime": "00:00:20", "Nodes": "gpu-[0001-0002]", "State": "UP", "TotalNodes": "2"} {
		wantEqual(t, "scontrol show partition "+k, kv[k], want)
	}
	out = s.ok("scontrol", "show", "node", "gpu-0001")
	if !strings.HasPrefix(out, "NodeName=gpu-0001 ") {
		t.Errorf("scontrol show node starts %q", out[:min(len(out), 40)])
	}
	kv = keyValues(out)
	wantEqual(t, "scontrol show node CPUTot", kv["CPUTot"], "48")
	if g := kv["Gres"]; g != "gpu:4" && g != "gpu:a100:4" {
		t.Errorf("scontrol show node Gres=%s, want gpu:a100:4", g)
	}
	wantEqual(t, "scontrol show node Partitions", kv["Partitions"], "batch,short")

	// sprio lists the pending job that is not held.
	lines = strings.Split(s.ok("sprio", "-j", dep), "\n")
	wantEqual(t, "sprio header", lines[0], sprioHeader)
	if len(lines) < 2 || len(strings.Fields(lines[1])) != 9 || strings.Fields(lines[1])[0] != dep {
		t.Errorf("sprio -j %s: %q; want a row of 9 columns for it", dep, lines)
	}
}

// TestScancel: scancel by id, by array task, by name, by user and state,
// and --batch --signal (the batch shell gets the signal and goes on).
func TestScancel(t *testing.T) {
	needs(t, needBatchSig, needArrays)
	t.Parallel()
	s := setup(t).session(t, "main")
	sleeper := "trap 'echo got USR1' USR1; echo started; while :; do sleep 1 & wait $!; done"
	sig := s.sbatch("-J", "sig", "-o", "sig.out", "--wrap", sleeper)
	s.waitFor(60*time.Second, "job "+sig+" to run", func() bool { return strings.Contains(s.read("sig.out"), "started") })
	// Slurm signals only the job's steps unless told --batch (or --full).
	s.ok("scancel", "--batch", "--signal=USR1", sig)
	s.waitFor(30*time.Second, "USR1 to reach job "+sig, func() bool { return strings.Contains(s.read("sig.out"), "got USR1") })
	s.waitFor(30*time.Second, "job "+sig+" to show R", func() bool {
		r := s.queue("-j", sig)
		return len(r) == 1 && r[0]["ST"] == "R"
	})
	s.ok("scancel", sig)
	wantEqual(t, "scancel ID", state(s.waitDone(sig, 30*time.Second)), "CANCELLED")

	// An array task, then the rest of the array.
	arr := s.sbatch("--hold", "--array=0-2", "-J", "arrc", "--wrap", "true")
	s.ok("scancel", arr+"_1")
	s.waitFor(30*time.Second, "task "+arr+"_1 cancelled", func() bool {
		// (With -j, squeue lists ended jobs too: ask for the pending.)
		return sortedIDs(strings.Fields(s.ok("squeue", "-h", "-r", "-j", arr, "-t", "PD", "-o", "%i"))...) == sortedIDs(arr+"_0", arr+"_2")
	})
	wantEqual(t, "scancel A_1: sacct", state(s.job(arr+"_1")), "CANCELLED")
	// The first task alone: its record carries the array's own id.
	s.ok("scancel", arr+"_0")
	s.waitFor(30*time.Second, "task "+arr+"_0 cancelled, "+arr+"_2 still pending", func() bool {
		return sortedIDs(strings.Fields(s.ok("squeue", "-h", "-r", "-j", arr, "-t", "PD", "-o", "%i"))...) == sortedIDs(arr+"_2")
	})
	// By name, and by user and state.
	named := s.sbatch("--hold", "-J", "byname", "--wrap", "true")
	s.ok("scancel", "-n", "byname")
	wantEqual(t, "scancel -n", state(s.waitDone(named, 30*time.Second)), "CANCELLED")
	s.ok("scancel", "-u", s.user, "-t", "PENDING")
	s.waitFor(30*time.Second, "the rest of array "+arr+" cancelled", func() bool { return len(s.queue("--me")) == 0 })
	for _, r := range s.acct("-X", "-j", arr) {
		wantEqual(t, "array task "+r["JobID"], state(r), "CANCELLED")
	}
	if q := s.queue("--me"); len(q) != 0 {
		t.Errorf("squeue --me after cancelling everything: %v", q)
	}
}

// TestNodeDrain: scontrol update node State=DRAIN takes the node out of
// scheduling (sinfo shows drain and the reason; a job that needs it waits),
// RESUME brings it back and the job runs.
func TestNodeDrain(t *testing.T) {
	needs(t, needDrain, needSinfo)
	t.Parallel()
	s := setup(t).session(t, "drain")
	node := "dr-0001"
	// Only an administrator changes a node, as in Slurm.
	if r := s.run("scontrol", "update", "NodeName="+node, "State=DRAIN", "Reason=by a user"); r.code == 0 ||
		!strings.Contains(r.stderr, "Access/permission denied") {
		t.Errorf("a user drains a node: %v; want Access/permission denied", r)
	}
	admin := s.as("root")
	if out := admin.ok("scontrol", "update", "NodeName="+node, "State=DRAIN", "Reason=conformance test"); out != "" {
		t.Errorf("scontrol update node printed %q", out)
	}
	t.Cleanup(func() { admin.run("scontrol", "update", "NodeName="+node, "State=RESUME") })
	s.waitFor(30*time.Second, node+" drained", func() bool {
		st := strings.TrimSpace(s.ok("sinfo", "-h", "-N", "-n", node, "-o", "%t|%E"))
		return (st == "drain|conformance test" || st == "drng|conformance test")
	})
	if kv := keyValues(s.ok("scontrol", "show", "node", node)); !strings.Contains(kv["State"], "DRAIN") {
		t.Errorf("scontrol show node State=%s, want ...+DRAIN", kv["State"])
	}
	id := s.sbatch("--wrap", "echo ran")
	s.waitFor(30*time.Second, "job "+id+" pending while the only node is drained", func() bool {
		r := s.queue("-j", id)
		return len(r) == 1 && r[0]["ST"] == "PD" && (r[0]["REASON"] == "Resources" || strings.HasPrefix(r[0]["REASON"], "ReqNodeNotAvail"))
	})
	admin.ok("scontrol", "update", "NodeName="+node, "State=RESUME")
	s.waitFor(30*time.Second, node+" resumed", func() bool {
		st := strings.TrimSpace(s.ok("sinfo", "-h", "-N", "-n", node, "-o", "%t"))
		return st == "idle" || st == "mix" || st == "alloc"
	})
	wantEqual(t, "job after RESUME", state(s.waitDone(id, 60*time.Second)), "COMPLETED")
	wantEqual(t, "its output", s.read("slurm-"+id+".out"), "ran\n")
}

// sortedIDs is job ids in string order, one a line.
func sortedIDs(ids ...string) string {
	slices.Sort(ids)
	return strings.Join(ids, "\n") + "\n"
}

// elapsed parses sacct's Elapsed ([D-]HH:MM:SS) into seconds.
func elapsed(t *testing.T, s string) int {
	t.Helper()
	days := 0
	if d, rest, ok := strings.Cut(s, "-"); ok {
		days, _ = strconv.Atoi(d)
		s = rest
	}
	var h, m, sec int
	if _, err := fmt.Sscanf(s, "%d:%d:%d", &h, &m, &sec); err != nil {
		t.Errorf("Elapsed %q: %v", s, err)
	}
	return ((days*24+h)*60+m)*60 + sec
}

// TestArrayWaitCancelAndHeldTask: sbatch -W of an array waits for every
// task and exits with the highest exit status of them; a task held on
// its own shows on its own squeue row (and scontrol show job of it shows
// its hold), not folded into the array's pending row; scancel of the
// array cancels its pending tasks without starting any (no start, no
// nodes, no output file), though its throttle frees a place as the
// running task is cancelled.
func TestArrayWaitCancelAndHeldTask(t *testing.T) {
	needs(t, needArrays)
	t.Parallel()
	s := setup(t).session(t, "main")
	r := s.run("sbatch", "-W", "--array=0-2", "-o", "/dev/null", "--wrap", "sleep $((SLURM_ARRAY_TASK_ID)); exit $SLURM_ARRAY_TASK_ID")
	if r.code != 2 {
		t.Errorf("sbatch -W of tasks exiting 0, 1, 2: %s, want exit 2 (the highest)", r)
	}
	if id := submitted.FindStringSubmatch(r.stdout); id != nil {
		for _, row := range s.acct("-X", "-j", id[1]) {
			if !terminal(state(row)) {
				t.Errorf("sbatch -W returned with task %s %s", row["JobID"], row["State"])
			}
		}
	}

	id := s.sbatch("--array=0-5%1", "-o", "thr-%A_%a.out", "--wrap", "sleep 60")
	s.waitFor(60*time.Second, "task 0 of "+id+" to run", func() bool {
		r := s.run("squeue", "-h", "-r", "-j", id+"_0", "-t", "R", "-o", "%i")
		return strings.TrimSpace(r.stdout) == id+"_0"
	})
	s.ok("scontrol", "hold", id+"_4")
	var rows []string
	s.waitFor(30*time.Second, "task 4's own row", func() bool {
		rows = strings.Fields(s.run("squeue", "-h", "-j", id, "-t", "PD", "-o", "%i").stdout)
		return slices.Contains(rows, id+"_4")
	})
	if !slices.Contains(rows, id+"_[1-3,5%1]") {
		t.Errorf("squeue -j %s pending rows %v, want %s_[1-3,5%%1] and %s_4", id, rows, id, id)
	}
	if rec := s.showJob(id + "_4"); rec["JobState"] != "PENDING" || rec["Reason"] != "JobHeldUser" || rec["ArrayTaskId"] != "4" {
		t.Errorf("scontrol show job %s_4: state %s reason %s task %s, want PENDING JobHeldUser 4", id, rec["JobState"], rec["Reason"], rec["ArrayTaskId"])
	}
	if r := s.run("scancel", id); r.code != 0 || r.stderr != "" {
		t.Errorf("scancel %s: %s", id, r)
	}
	s.waitFor(60*time.Second, "every task of "+id+" to end", func() bool {
		rows := s.acct("-X", "-j", id)
		for _, row := range rows {
			if !terminal(state(row)) {
				return false
			}
		}
		return len(rows) > 0
	})
	for _, row := range s.acct("-X", "-j", id) {
		if row["JobID"] == id+"_0" {
			continue
		}
		if row["NodeList"] != "None assigned" {
			t.Errorf("pending task %s was given nodes %s when its array was cancelled", row["JobID"], row["NodeList"])
		}
	}
	for k := 1; k <= 5; k++ {
		if _, err := os.Stat(s.path(fmt.Sprintf("thr-%s_%d.out", id, k))); err == nil {
			t.Errorf("task %d of the cancelled array left an output file: it started", k)
		}
	}
}

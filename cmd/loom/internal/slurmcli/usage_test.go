package slurmcli

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

func taskUsage(rank int32, node string, rssK int64, cpu time.Duration, read int64) *loomv1.TaskUsage {
	return &loomv1.TaskUsage{Rank: rank, Node: node, MaxRssBytes: rssK << 10, RssBytes: rssK << 10, MaxVmsizeBytes: 2 * rssK << 10,
		UserCpu: durationpb.New(cpu * 3 / 4), SystemCpu: durationpb.New(cpu / 4), ReadBytes: read, WriteBytes: read / 2}
}

// TestSacctAndSstatShowUsage: what the agents reported of a job's batch
// script and srun tasks reads in sacct's MaxRSS, TotalCPU... (the job's
// row sums its steps' CPU and leaves the memory columns empty, as Slurm's
// does) and in sstat for the running job's steps, with Slurm's units and
// its messages for what is not running.
func TestSacctAndSstatShowUsage(t *testing.T) {
	t.Parallel()
	f := fixture()
	var train *loomv1.Job
	for _, j := range f.Jobs {
		if j.GetJobId() == "12" {
			train = j
		}
	}
	train.Runs = []*loomv1.JobRun{{Attempt: 1, State: loomv1.JobState_RUNNING, Nodes: train.GetNodes(), StartTime: train.GetStartTime(),
		BatchUsage: taskUsage(0, "gpu-0001", 2048, 1500*time.Millisecond, 4096)}}
	f.Steps = []*loomv1.JobStep{
		{Name: train.GetName() + "/steps/0", Job: train.GetName(), StepId: 0, Attempt: 1, State: loomv1.JobState_COMPLETED,
			Command: []string{"/usr/bin/hostname"}, Nodes: train.GetNodes(), TasksPerNode: []int32{1, 1}, NumTasks: 2,
			StartTime: train.GetStartTime(), EndTime: train.GetStartTime(),
			TaskUsage: []*loomv1.TaskUsage{taskUsage(0, "gpu-0001", 100, time.Second, 10), taskUsage(1, "gpu-0002", 300, 3*time.Second, 30)}},
		// Running, and only one of its tasks reported yet.
		{Name: train.GetName() + "/steps/1", Job: train.GetName(), StepId: 1, Attempt: 1, State: loomv1.JobState_RUNNING,
			Command: []string{"/usr/bin/python"}, Nodes: train.GetNodes(), TasksPerNode: []int32{1, 1}, NumTasks: 2,
			StartTime: train.GetStartTime(),
			TaskUsage: []*loomv1.TaskUsage{taskUsage(1, "gpu-0002", 5000, 2*time.Hour+time.Second, 0)}},
	}
	code, out, errOut := run(t, f, "sacct", Env{}, "-P", "-j", "12", "-o", "JobID,MaxRSS,MaxRSSNode,MaxRSSTask,AveRSS,MaxVMSize,TotalCPU,UserCPU,SystemCPU,MinCPU,AveCPU,MaxDiskRead,MaxDiskReadTask,AveDiskWrite")
	want := "JobID|MaxRSS|MaxRSSNode|MaxRSSTask|AveRSS|MaxVMSize|TotalCPU|UserCPU|SystemCPU|MinCPU|AveCPU|MaxDiskRead|MaxDiskReadTask|AveDiskWrite\n" +
		"12||||||02:00:06|01:30:04|30:01.625|||||\n" +
		"12.batch|2M|gpu-0001|0|2M|4M|00:01.500|00:01.125|00:00.375|00:00:01|00:00:01|4K|0|2K\n" +
		"12.0|300K|gpu-0002|1|200K|600K|00:00:04|00:00:03|00:00:01|00:00:01|00:00:02|30|1|10\n" +
		"12.1|5000K|gpu-0002|1|5000K|10000K|02:00:01|01:30:00|30:00.250|02:00:01|02:00:01|0|1|0\n"
	if code != 0 || out != want {
		t.Errorf("sacct: %d %q\n got %q\nwant %q", code, errOut, out, want)
	}

	// --units shows every size in one unit; --noconvert in bytes.
	for args, want := range map[string]string{
		"--units=M":   "12.batch|2M|4M|0.00M\n12.0|0.29M|0.59M|0.00M\n12.1|4.88M|9.77M|0\n",
		"--noconvert": "12.batch|2097152|4194304|4096\n12.0|307200|614400|30\n12.1|5120000|10240000|0\n",
	} {
		code, out, errOut := run(t, f, "sacct", Env{}, "-n", "-P", "-j", "12", "-o", "JobID,MaxRSS,MaxVMSize,MaxDiskRead", args)
		if code != 0 || out != "12|||\n"+want {
			t.Errorf("sacct %s: %d %q\n got %q\nwant %q", args, code, errOut, out, "12|||\n"+want)
		}
	}
	if code, _, errOut := run(t, f, "sacct", Env{}, "-j", "12", "--units=X"); code != 1 || !strings.Contains(errOut, "Invalid unit type 'X'") {
		t.Errorf("sacct --units=X: %d %q", code, errOut)
	}

	// sstat: the lowest-numbered running step, with a zero for the task
	// not reported yet; -a adds the batch script; .batch alone.
	for _, tc := range []struct {
		args     []string
		want     string
		wantErr  string
		wantCode int
	}{
		{[]string{"-P", "-j", "12", "-o", "JobID,NTasks,MaxRSS,MaxRSSNode,AveRSS,MinCPU,MinCPUNode,Nodelist"},
			"JobID|NTasks|MaxRSS|MaxRSSNode|AveRSS|MinCPU|MinCPUNode|Nodelist\n12.1|2|5000K|gpu-0002|2500K|00:00:00|gpu-0001|gpu-[0001-0002]\n", "", 0},
		{[]string{"-n", "-P", "-a", "-j", "12", "-o", "JobID,MaxRSS,Nodelist"},
			"12.batch|2M|gpu-0001\n12.1|5000K|gpu-[0001-0002]\n", "", 0},
		{[]string{"-n", "-p", "-j", "12.batch", "-o", "jobid,maxvmsize"}, "12.batch|4M|\n", "", 0},
		{[]string{"-n", "-P", "-j", "12.0", "-o", "jobid"}, "", "sstat: error: StepId=12.0 not found running.\n", 0},
		{[]string{"-n", "-P", "-j", "10", "-o", "jobid"}, "", "sstat: error: No steps running for job 10\n", 0},
		{[]string{"-n", "-P", "-j", "999", "-o", "jobid"}, "", "sstat: error: couldn't get steps for job 999\n", 0},
		{[]string{"-j", "12.x"}, "", "sstat: fatal: Bad job/step specified: 12.x\n", 1},
		{[]string{"-j", "12", "-o", "Bogus"}, "", "sstat: error: Invalid field requested: \"Bogus\"\n", 1},
		{nil, "", "sstat: error: You didn't give me any jobs to stat.\n", 1},
	} {
		code, out, errOut := run(t, f, "sstat", Env{}, tc.args...)
		if code != tc.wantCode || out != tc.want || errOut != tc.wantErr {
			t.Errorf("sstat %v: %d\n got %q %q\nwant %q %q", tc.args, code, out, errOut, tc.want, tc.wantErr)
		}
	}
	// A job that runs only its batch script (no srun step): the header
	// alone, nothing on stderr, exit 0, as a real Slurm 22.05 answers
	// `sstat -j ID` for `sbatch --wrap 'sleep 60'`; .batch and -a show it.
	bare := fixture()
	for _, args := range [][]string{{"-P", "-j", "12", "-o", "JobID,Nodelist"}, {"-n", "-P", "-j", "12", "-o", "JobID,Nodelist"}} {
		want := "JobID|Nodelist\n"
		if args[0] == "-n" {
			want = ""
		}
		if code, out, errOut := run(t, bare, "sstat", Env{}, args...); code != 0 || out != want || errOut != "" {
			t.Errorf("sstat %v on a batch-only job: %d\n got %q %q\nwant %q", args, code, out, errOut, want)
		}
	}
	for _, args := range [][]string{{"-n", "-P", "-j", "12.batch", "-o", "JobID"}, {"-n", "-P", "-a", "-j", "12", "-o", "JobID"}} {
		if code, out, errOut := run(t, bare, "sstat", Env{}, args...); code != 0 || out != "12.batch\n" || errOut != "" {
			t.Errorf("sstat %v on a batch-only job: %d\n got %q %q\nwant %q", args, code, out, errOut, "12.batch\n")
		}
	}

	// The default layout: Slurm's header, byte for byte.
	_, out, _ = run(t, f, "sstat", Env{}, "-j", "12")
	header := strings.SplitN(out, "\n", 2)[0]
	if want := "JobID         MaxVMSize  MaxVMSizeNode  MaxVMSizeTask  AveVMSize     MaxRSS MaxRSSNode MaxRSSTask     AveRSS MaxPages MaxPagesNode   MaxPagesTask   AvePages     MinCPU MinCPUNode MinCPUTask     AveCPU   NTasks AveCPUFreq ReqCPUFreqMin ReqCPUFreqMax ReqCPUFreqGov ConsumedEnergy  MaxDiskRead MaxDiskReadNode MaxDiskReadTask  AveDiskRead MaxDiskWrite MaxDiskWriteNode MaxDiskWriteTask AveDiskWrite TRESUsageInAve TRESUsageInMax TRESUsageInMaxNode TRESUsageInMaxTask TRESUsageInMin TRESUsageInMinNode TRESUsageInMinTask TRESUsageInTot TRESUsageOutAve TRESUsageOutMax TRESUsageOutMaxNode TRESUsageOutMaxTask TRESUsageOutMin TRESUsageOutMinNode TRESUsageOutMinTask TRESUsageOutTot "; header != want {
		t.Errorf("sstat's header\n got %q\nwant %q", header, want)
	}
}

// TestSrunSaysOutOfMemory: tasks their node's agent killed past the job's
// memory are reported as Slurm's srun reports an OOM kill; a task killed
// otherwise on another node stays "Killed".
func TestSrunSaysOutOfMemory(t *testing.T) {
	t.Parallel()
	var errb strings.Builder
	c := &cmd{name: "srun", stdout: &strings.Builder{}, stderr: &errb}
	step := &loomv1.JobStep{StepId: 0, State: loomv1.JobState_FAILED, Nodes: []string{"gpu-0001", "gpu-0002"},
		TasksPerNode: []int32{1, 1}, TaskExitCodes: []int32{137, 137}, ExitCode: 137,
		NodeMessages: []string{"2 of 2 task(s) failed, 2 out of memory; highest exit code 137", "killed: job failed"}}
	_ = c.stepOutcome(step, "12.0")
	for _, want := range []string{"srun: error: gpu-0001: task 0: Out Of Memory\n", "srun: error: gpu-0002: task 1: Killed\n"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("srun's stderr %q lacks %q", errb.String(), want)
		}
	}
}

// TestSeff: Slurm's contributed seff from a job's accounting, as the
// script prints it: CPU time over the steps against cores × wall time, the
// step whose tasks' peaks add up to the most against --mem on every node.
func TestSeff(t *testing.T) {
	t.Parallel()
	f := fixture()
	var train *loomv1.Job
	for _, j := range f.Jobs {
		if j.GetJobId() == "12" {
			train = j
		}
	}
	// Two nodes, 8 CPUs (2 tasks × 4), 64 GiB a node, an hour and 2 minutes.
	train.State, train.EndTime, train.ExitCode = loomv1.JobState_COMPLETED, ago(3*time.Second), 0
	train.Runs = []*loomv1.JobRun{{Attempt: 1, State: loomv1.JobState_COMPLETED, Nodes: train.GetNodes(), StartTime: train.GetStartTime(),
		EndTime: train.GetEndTime(), BatchUsage: taskUsage(0, "gpu-0001", 2048, time.Minute, 0)}}
	f.Steps = []*loomv1.JobStep{{Name: train.GetName() + "/steps/0", Job: train.GetName(), StepId: 0, Attempt: 1,
		State: loomv1.JobState_COMPLETED, Command: []string{"/usr/bin/python"}, Nodes: train.GetNodes(), TasksPerNode: []int32{1, 1},
		NumTasks: 2, StartTime: train.GetStartTime(), EndTime: train.GetEndTime(),
		TaskUsage: []*loomv1.TaskUsage{taskUsage(0, "gpu-0001", 8<<20, 3*time.Hour, 0), taskUsage(1, "gpu-0002", 4<<20, time.Hour, 0)}}}
	code, out, errOut := run(t, f, "seff", Env{}, "12")
	want := `Job ID: 12
Cluster: demo
User/Group: alice/alice
State: COMPLETED (exit code 0)
Nodes: 2
Cores per node: 4
CPU Utilized: 04:01:00
CPU Efficiency: 48.59% of 08:16:00 core-walltime
Job Wall-clock time: 01:02:00
Memory Utilized: 12.00 GB
Memory Efficiency: 9.38% of 128.00 GB (64.00 GB/node)
The task which had the largest memory consumption differs by 133.33% from the average task max memory consumption
`
	if code != 0 || out != want || errOut != "" {
		t.Errorf("seff 12: %d %q\n got %s\nwant %s", code, errOut, out, want)
	}
	if code, out, errOut := run(t, f, "seff", Env{}, "13"); code != 0 || !strings.HasSuffix(out, "Efficiency not available for jobs in the PENDING state.\n") || errOut != "" {
		t.Errorf("seff of a pending job: %d %q %q", code, out, errOut)
	}
	// An array task by its task id or by its own job id.
	for _, id := range []string{"15_0", "16"} {
		if code, out, errOut := run(t, f, "seff", Env{}, id); code != 0 || !strings.HasPrefix(out, "Job ID: 16\nArray Job ID: 15_0\n") {
			t.Errorf("seff %s: %d %q %q", id, code, out, errOut)
		}
	}
	if code, _, errOut := run(t, f, "seff", Env{}, "999"); code != 2 || errOut != "Job not found.\n" {
		t.Errorf("seff 999: %d %q, want 2, Job not found.", code, errOut)
	}
	if code, out, _ := run(t, f, "seff", Env{}); code != 1 || !strings.HasPrefix(out, "Usage: seff [Options] <Jobid>\n") {
		t.Errorf("seff without a job: %d %q, want its usage, exit 1", code, out)
	}
}

// TestUnitsAsSlurmConverts: sizes from bytes in the largest unit that keeps
// them exact or a half, as Slurm's convert_num_unit2 with
// CONVERT_NUM_UNIT_EXACT; --units in one unit; --noconvert raw.
func TestUnitsAsSlurmConverts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		u    units
		b    int64
		want string
	}{
		{defaultUnits, 0, "0"},
		{defaultUnits, 1694061, "1694061"},
		{defaultUnits, 221176 << 10, "221176K"},
		{defaultUnits, 2 << 20, "2M"},
		{defaultUnits, 1536 << 20, "1.50G"},
		{defaultUnits, 512, "512"},
		{defaultUnits, 1 << 50, "1P"},
		{units{spec: 2}, 221176 << 10, "215.99M"},
		{units{spec: 1}, 4096, "4K"},
		{units{spec: noUnit, raw: true}, 2 << 20, "2097152"},
	} {
		if got := tc.u.bytes(tc.b); got != tc.want {
			t.Errorf("%+v.bytes(%d) = %q, want %q", tc.u, tc.b, got, tc.want)
		}
	}
	for s, want := range map[string]int{"K": 1, "m": 2, "G": 3, "t": 4, "P": 5, "X": noUnit, "": noUnit, "MB": noUnit} {
		if got, ok := parseUnits(s); got != want || ok != (want != noUnit) {
			t.Errorf("parseUnits(%q) = %d, %v; want %d", s, got, ok, want)
		}
	}
}

// TestGPUUsageInTRES: tasks that saw GPUs add Slurm's gres/gpumem and
// gres/gpuutil to the TRES strings, after fs/disk; the average is over the
// tasks with GPUs.
func TestGPUUsageInTRES(t *testing.T) {
	t.Parallel()
	gpuTask := func(rank int32, util float64, mem int64) *loomv1.TaskUsage {
		u := taskUsage(rank, "gpu-000"+string(rune('1'+rank)), 1024, time.Second, 0)
		u.Gpus, u.GpuUtilPercent, u.MaxGpuMemoryBytes = 4, util, mem
		return u
	}
	s := statOf([]*loomv1.TaskUsage{gpuTask(0, 90, 40<<30), gpuTask(1, 70.4, 20<<30)})
	got := map[string]string{}
	for _, f := range usageFields(defaultUnits) {
		got[f.name] = f.value(s)
	}
	for name, want := range map[string]string{
		"TRESUsageInMax":     "cpu=00:00:01,energy=0,fs/disk=0,gres/gpumem=40G,gres/gpuutil=90,mem=1M,pages=0,vmem=2M",
		"TRESUsageInAve":     "cpu=00:00:01,energy=0,fs/disk=0,gres/gpumem=30G,gres/gpuutil=80,mem=1M,pages=0,vmem=2M",
		"TRESUsageInMaxNode": "cpu=gpu-0001,energy=gpu-0001,fs/disk=gpu-0001,gres/gpumem=gpu-0001,gres/gpuutil=gpu-0001,mem=gpu-0001,pages=gpu-0001,vmem=gpu-0001",
		"TRESUsageInMinTask": "cpu=0,fs/disk=0,gres/gpumem=1,gres/gpuutil=1,mem=0,pages=0,vmem=0",
	} {
		if got[name] != want {
			t.Errorf("%s = %q, want %q", name, got[name], want)
		}
	}
	// Without GPUs, no gres.
	plain := statOf([]*loomv1.TaskUsage{taskUsage(0, "n", 1, 0, 0)})
	for _, f := range usageFields(defaultUnits) {
		if v := f.value(plain); strings.Contains(v, "gres") {
			t.Errorf("%s of a task without GPUs is %q", f.name, v)
		}
	}
}

package slurmcli

import (
	"fmt"
	"net"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/cmd/loom/internal/fakegw"
	"github.com/loom-ml/loom/libs/slurmspec"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// The real Slurm 22.05 output in shared/design/SLURM.md, reproduced.
func TestMatchesRealSlurmSamples(t *testing.T) {
	t.Parallel()
	f := &fakegw.Gateway{
		Jobs: []*loomv1.Job{{Name: "projects/default/jobs/126", JobId: "126", Cluster: demoCluster, DisplayName: "(null)",
			User: "root", Partition: "debug", State: loomv1.JobState_PENDING, StateReason: "Resources"}},
		Partitions: []*loomv1.Partition{{Name: "debug", Default: true, State: "up", MaxTime: "UNLIMITED", Nodes: []string{"localhost"}}},
		SlurmNodes: []*loomv1.SlurmNode{{Hostname: "localhost", State: loomv1.SlurmNode_IDLE, Partitions: []string{"debug"}}},
	}
	_, out, _ := run(t, f, "squeue", Env{})
	want := "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)\n" +
		"               126     debug   (null)     root PD       0:00      1 (Resources)\n"
	if out != want {
		t.Errorf("squeue:\n%s\nwant:\n%s", out, want)
	}
	_, out, _ = run(t, f, "sinfo", Env{})
	want = "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST\n" +
		"debug*       up   infinite      1   idle localhost\n"
	if out != want {
		t.Errorf("sinfo:\n%s\nwant:\n%s", out, want)
	}
}

func TestSqueueFiltersAndErrors(t *testing.T) {
	t.Parallel()
	ids := func(args ...string) []string {
		t.Helper()
		code, out, errOut := run(t, fixture(), "squeue", Env{}, append([]string{"-h", "-o", "%i"}, args...)...)
		if code != 0 {
			t.Fatalf("squeue %v: %d %s", args, code, errOut)
		}
		return strings.Fields(out)
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"-u", "bob"}, []string{"13"}},
		{[]string{"--user=alice,bob", "-p", "gpu", "-t", "PD"}, []string{"13", "14"}},
		{[]string{"-t", "running"}, []string{"15_0", "12"}},
		{[]string{"-j", "12,13"}, []string{"13", "12"}},
		{[]string{"-j", "10"}, []string{}}, // ended: as Slurm 22.05, listed only with -t
		{[]string{"-j", "10", "-t", "all"}, []string{"10"}},
		{[]string{"--jobs", "15"}, []string{"15_[1-3%2]", "15_0"}},
		{[]string{"-j", "15_0"}, []string{"15_0"}},
		{[]string{"-j", "15_3", "-r"}, []string{"15_3"}},
		{[]string{"-n", "held,train"}, []string{"14", "12"}},
		{[]string{"-w", "gpu-0002"}, []string{"12"}},
		{[]string{"-S", "-i"}, []string{"15_0", "15_[1-3%2]", "14", "13", "12"}}, // 15_0 is job 16
		{[]string{"--sort=u,i"}, []string{"12", "14", "15_[1-3%2]", "15_0", "13"}},
		{[]string{"-A", "research"}, []string{"12"}},
		{[]string{"-M", "other"}, []string{"20"}},
	} {
		if got := ids(tc.args...); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("squeue %v = %v, want %v", tc.args, got, tc.want)
		}
	}
	// The default lists only active jobs, and asks the gateway for them.
	f := fixture()
	run(t, f, "squeue", Env{})
	if r := fakegw.Requests[*loomv1.ListJobsRequest](f)[0]; !r.GetActiveOnly() || r.GetCluster() != demoCluster || r.GetParent() != "projects/default" {
		t.Errorf("ListJobs request = %v", r)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--bogus"}, "squeue: unrecognized option '--bogus'\nTry \"squeue --help\" for more information\n"},
		{[]string{"-t", "XX"}, "squeue: error: Invalid job state specified: XX\nsqueue: error: Valid job states include: PENDING,RUNNING,CONFIGURING,COMPLETING,COMPLETED,FAILED,CANCELLED,TIMEOUT,NODE_FAIL,PREEMPTED,REQUEUED,OUT_OF_MEMORY\n"},
		{[]string{"-j", "abc"}, "squeue: error: Invalid job id: abc\n"},
		// Format options that conflict, in Slurm 22.05's words.
		{[]string{"-l", "-o", "%i"}, "squeue: fatal: Options -o(--format) and -l(--long) are mutually exclusive. Please remove one and retry.\n"},
		{[]string{"-o", "%i", "-l"}, "squeue: fatal: Options -o(--format) and -l(--long) are mutually exclusive. Please remove one and retry.\n"},
		{[]string{"-o", "%i", "-O", "jobid"}, "squeue: error: -O (--Format) is incompatible with -o (--format)\n"},
		{[]string{"--Format=jobid", "--format=%i", "-O", "name"}, "squeue: error: -o (--format) is incompatible with -O (--Format)\n"},
		{[]string{"-S", "Z"}, "squeue: error: Invalid sort specification: Z\n"},
		{[]string{"stray"}, "squeue: error: Unrecognized option: stray\n"},
		// A host the cluster lacks, as Slurm 22.05 answers it (the first).
		{[]string{"-w", "nosuch"}, "squeue: error: Invalid node name nosuch\n"},
		{[]string{"-w", "gpu-000[3-6]"}, "squeue: error: Invalid node name gpu-0005\n"},
		{[]string{"-h", "-w", "gpu-0002", "--nodelist=gpu-0001,x"}, "squeue: error: Invalid node name x\n"},
	} {
		code, _, errOut := run(t, fixture(), "squeue", Env{}, tc.args...)
		if code != 1 || !strings.HasPrefix(errOut, tc.want) {
			t.Errorf("squeue %v: %d %q, want %q", tc.args, code, errOut, tc.want)
		}
	}
	// -h drops -l's date line too, as a real 22.05's squeue -l -h.
	if code, out, errOut := run(t, fixture(), "squeue", Env{}, "-h", "-l", "-j", "12"); code != 0 || len(strings.Split(out, "\n")) != 2 || !strings.HasPrefix(strings.TrimSpace(out), "12 ") {
		t.Errorf("squeue -h -l -j 12: %d %q %q, want the job's row alone", code, out, errOut)
	}
	if _, out, _ := run(t, fixture(), "squeue", Env{}, "-l", "-j", "12"); !strings.HasPrefix(out, "Fri Jan 02 15:04:05 2026\n") {
		t.Errorf("squeue -l -j 12: %q, want the date line first", out)
	}
	// An unknown format letter is reported and printed as written.
	code, out, errOut := run(t, fixture(), "squeue", Env{}, "-h", "-j", "12", "-o", "%i|%Ü|")
	if code != 0 || out != "12|%Ü|\n" || errOut != "squeue: error: Invalid job format specification: \xc3\n" && !strings.Contains(errOut, "Invalid job format specification") {
		t.Errorf("bad letter: %d %q %q", code, out, errOut)
	}
}

func TestSinfoOptions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-h", "-p", "debug"}, "debug        up    1:00:00      1    mix gpu-0003\n"},
		{[]string{"-h", "-t", "alloc"}, "gpu*         up   infinite      2  alloc gpu-[0001-0002]\ndebug        up    1:00:00      0    n/a \n"},
		{[]string{"-h", "-t", "drain"}, "gpu*         up   infinite      1  drain gpu-0004\ndebug        up    1:00:00      0    n/a \n"},
		{[]string{"-h", "-n", "gpu-000[1-3]", "-o", "%R %D %G"}, "gpu 3 gpu:h100:8\ndebug 1 gpu:h100:8\n"},
		{[]string{"-h", "-o", "%P %F %C %A"}, "gpu* 3/0/1/4 17/31/16/64 3/0\ndebug 1/0/0/1 1/15/0/16 1/0\n"},
		{[]string{"-h", "-N", "-n", "gpu-0004", "-o", "%N %T %E"}, "gpu-0004 drained bad gpu\n"},
		{[]string{"-h", "-d"}, "gpu*         up   infinite      0    n/a \ndebug        up    1:00:00      0    n/a \n"},
	} {
		code, out, errOut := run(t, fixture(), "sinfo", Env{}, tc.args...)
		if code != 0 || out != tc.want {
			t.Errorf("sinfo %v: %d %q %q, want %q", tc.args, code, out, errOut, tc.want)
		}
	}
	code, out, _ := run(t, fixture(), "sinfo", Env{}, "-l")
	if code != 0 || !strings.HasPrefix(out, "Fri Jan 02 15:04:05 2026\nPARTITION AVAIL  TIMELIMIT   JOB_SIZE ROOT OVERSUBS     GROUPS  NODES       STATE NODELIST\n") {
		t.Errorf("sinfo -l: %q", out)
	}
	// -l with -o or -O, as Slurm 22.05 refuses it (SINFO_FORMAT is no option).
	for _, args := range [][]string{{"-l", "-o", "%P"}, {"--format=%P", "--long"}, {"-O", "partition", "-l"}, {"-N", "-l", "-o", "%N"}} {
		code, out, errOut := run(t, fixture(), "sinfo", Env{}, args...)
		if code != 1 || out != "" || errOut != "sinfo: fatal: Options -o(--format) and -l(--long) are mutually exclusive. Please remove one and retry.\n" {
			t.Errorf("sinfo %v: %d %q %q", args, code, out, errOut)
		}
	}
	code, out, _ = run(t, fixture(), "sinfo", Env{Environ: map[string]string{"SINFO_FORMAT": "%P"}}, "-l")
	if code != 0 || out != "Fri Jan 02 15:04:05 2026\nPARTITION\ngpu*\ndebug\n" {
		t.Errorf("SINFO_FORMAT=%%P sinfo -l: %d %q", code, out)
	}
	// -N, -s and -R print their own formats over SINFO_FORMAT, as Slurm 22.05.
	for _, tc := range []struct{ args, want string }{
		{"-N", "NODELIST   NODES PARTITION STATE \n"},
		{"-N -l", "Fri Jan 02 15:04:05 2026\nNODELIST   NODES PARTITION       STATE CPUS    S:C:T MEMORY TMP_DISK WEIGHT AVAIL_FE REASON              \n"},
		{"-s", "PARTITION AVAIL  TIMELIMIT   NODES(A/I/O/T) NODELIST\n"},
		{"-R", "REASON               USER      TIMESTAMP           NODELIST\n"},
		{"-N -o %N", "NODELIST\n"},
	} {
		_, out, errOut := run(t, fixture(), "sinfo", Env{Environ: map[string]string{"SINFO_FORMAT": "%P"}}, strings.Fields(tc.args)...)
		if !strings.HasPrefix(out, tc.want) {
			t.Errorf("SINFO_FORMAT=%%P sinfo %s: %q %q, want it to start %q", tc.args, out, errOut, tc.want)
		}
	}
	code, _, errOut := run(t, fixture(), "sinfo", Env{}, "-t", "sleepy")
	if code != 1 || !strings.HasPrefix(errOut, "sinfo: error: Bad state string: \"sleepy\"") {
		t.Errorf("bad state: %d %q", code, errOut)
	}
	// A node-oriented listing widens NODELIST for long names.
	f := fixture()
	f.SlurmNodes[0].Hostname = "a-very-long-node-name-01"
	f.Partitions[0].Nodes[0] = "a-very-long-node-name-01"
	_, out, _ = run(t, f, "sinfo", Env{}, "-N")
	if !strings.HasPrefix(out, "NODELIST                  NODES PARTITION STATE \na-very-long-node-name-01      1      gpu* alloc \n") {
		t.Errorf("sinfo -N wide: %q", out)
	}
}

// TestSinfoPartitionsWithoutNodesAsSlurm: in sinfo's partition rows, a
// partition none of whose nodes is left by -n, -t, -d or -r, or that has
// none, is still listed, "0 n/a" and an empty NODELIST, as Slurm 22.05
// prints it (checked with sinfo -n nosuchnode on a real one); per node
// (-N) there is nothing to list.
func TestSinfoPartitionsWithoutNodesAsSlurm(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-n", "nosuchnode"}, "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST\n" +
			"gpu*         up   infinite      0    n/a \n" +
			"debug        up    1:00:00      0    n/a \n"},
		{[]string{"-h", "-n", "gpu-0001"}, "gpu*         up   infinite      1  alloc gpu-0001\n" +
			"debug        up    1:00:00      0    n/a \n"},
		{[]string{"-h", "-p", "debug", "-n", "gpu-0001"}, "debug        up    1:00:00      0    n/a \n"},
		{[]string{"-N", "-n", "nosuchnode"}, "NODELIST   NODES PARTITION STATE \n"},
		{[]string{"-h", "-s", "-n", "nosuchnode", "-p", "debug"}, "debug        up    1:00:00          0/0/0/0 \n"},
		{[]string{"-h", "-p", "debug", "-n", "x", "-o", "%c|%z|%m|%t|%T|%E|%G|%C|%w|%d|%v|%O"},
			"0|0:0:0|0|n/a|n/a|none|(null)|0/0/0/0|0|0|N/A|0.00\n"},
		// -h drops the date line of -l too, as a real 22.05's sinfo -l -h.
		{[]string{"-h", "-l", "-n", "x", "-p", "debug"}, "debug        up    1:00:00 1-infinite   no       NO        all      0         n/a \n"},
		{[]string{"-l", "-n", "x", "-p", "debug"}, "Fri Jan 02 15:04:05 2026\n" +
			"PARTITION AVAIL  TIMELIMIT   JOB_SIZE ROOT OVERSUBS     GROUPS  NODES       STATE NODELIST\n" +
			"debug        up    1:00:00 1-infinite   no       NO        all      0         n/a \n"},
	} {
		code, out, errOut := run(t, fixture(), "sinfo", Env{}, tc.args...)
		if code != 0 || out != tc.want {
			t.Errorf("sinfo %v: %d %q %q, want %q", tc.args, code, out, errOut, tc.want)
		}
	}
	// A partition with no nodes at all is listed, -p or not.
	f := fixture()
	f.Partitions = append(f.Partitions, &loomv1.Partition{Name: "empty", Cluster: demoCluster, State: "up", MaxTime: "UNLIMITED"})
	if _, out, _ := run(t, f, "sinfo", Env{}, "-h", "-p", "empty"); out != "empty        up   infinite      0    n/a \n" {
		t.Errorf("sinfo -p empty = %q", out)
	}
}

func TestSacctOptions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-n", "-X", "-b", "-s", "F,CD", "-S", "now-3hours", "-E", "now"}, "10            COMPLETED      0:0 \n11               FAILED      2:0 \n"},
		{[]string{"-P", "-n", "-X", "-o", "JobID,User,NNodes,ReqMem,Timelimit", "-j", "12"}, "12|alice|2|64G|02:00:00\n"},
		// The batch step holds the first node alone (Slurm: NNodes 1).
		{[]string{"-P", "-n", "-o", "JobID,NNodes,AllocNodes,NodeList,AllocTRES", "-j", "12"},
			"12|2|2|gpu-[0001-0002]|billing=8,cpu=8,gres/gpu=16,mem=128G,node=2\n12.batch|1|1|gpu-0001|billing=4,cpu=4,gres/gpu=8,mem=64G,node=1\n"},
		{[]string{"-p", "-n", "-X", "--delimiter=;", "-o", "jobid,jobname", "-u", "bob", "-j", "13"}, "13;evaluation-long-name;\n"},
		{[]string{"-P", "-n", "-o", "JobID,State,ExitCode", "-N", "gpu-0004"}, "11|FAILED|2:0\n11.batch|FAILED|2:0\n"},
		// Not 14, held, nor 15_[1-3%2], on its task limit: not eligible
		// (TestSacctWindowIsEligibleTime).
		{[]string{"-P", "-n", "-X", "-o", "JobID", "-S", "now-1hours"}, "10\n11\n12\n15_0\n"},
		{[]string{"-P", "-n", "-X", "-o", "JobID", "-a", "-r", "debug"}, "15_0\n"},
		{[]string{"-P", "-n", "-X", "-o", "JobID", "-a", "-r", "debug", "-j", "15"}, "15_0\n15_[1-3%2]\n"},
		{[]string{"-P", "-n", "-X", "-o", "JobID,Elapsed", "-j", "9"}, "9|01:00:00\n"},
		{[]string{"-P", "-n", "-o", "jobname,state", "-j", "15_0"}, "sweep|RUNNING\nbatch|RUNNING\n"},
	} {
		code, out, errOut := run(t, fixture(), "sacct", Env{}, tc.args...)
		if code != 0 || out != tc.want {
			t.Errorf("sacct %v: %d %q %q, want %q", tc.args, code, out, errOut, tc.want)
		}
	}
	code, _, errOut := run(t, fixture(), "sacct", Env{}, "--format=JobID,Bogus")
	if code != 1 || errOut != "sacct: error: Invalid field requested: \"Bogus\"\n" { // as Slurm 22.05's (scripts/slurm-local.sh)
		t.Errorf("bad field: %d %q", code, errOut)
	}
	// A state sacct does not know, in Slurm 22.05's words (scripts/slurm-local.sh).
	for _, st := range []string{"XX", "CD,XX,F"} {
		if code, _, errOut := run(t, fixture(), "sacct", Env{}, "-s", st); code != 1 || errOut != "sacct: fatal: unrecognized job state value 'XX'\n" {
			t.Errorf("sacct -s %s: %d %q", st, code, errOut)
		}
	}
	code, out, _ := run(t, fixture(), "sacct", Env{}, "-e")
	if code != 0 || !strings.Contains(out, "AllocCPUS") || !strings.Contains(out, "ExitCode") {
		t.Errorf("sacct -e: %q", out)
	}
	// A window that ends before it starts is Slurm 22.05's error (checked
	// with scripts/slurm-local.sh), not an empty list; with -j and no -S
	// there is no start to compare.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-S", "2026-01-02", "-E", "2026-01-01"}, "Start time (2026-01-02T00:00:00) requested is after end time (2026-01-01T00:00:00)."},
		{[]string{"-E", "2025-12-31T23:59:59"}, "Start time (2026-01-02T00:00:00) requested is after end time (2025-12-31T23:59:59)."},
		{[]string{"-S", "now+1hour"}, "Start time (2026-01-02T16:04:05) requested is after end time (2026-01-02T15:04:05)."},
	} {
		code, out, errOut := run(t, fixture(), "sacct", Env{}, tc.args...)
		if code != 1 || out != "" || errOut != "sacct: error: "+tc.want+"\n" {
			t.Errorf("sacct %v: %d %q %q, want exit 1 and %q", tc.args, code, out, errOut, tc.want)
		}
	}
	for _, args := range [][]string{{"-j", "9", "-E", "2020-01-01"}, {"-S", "2026-01-02T10:00", "-E", "2026-01-02T10:00"}} {
		if code, _, errOut := run(t, fixture(), "sacct", Env{}, args...); code != 0 {
			t.Errorf("sacct %v: %d %q, want a listing", args, code, errOut)
		}
	}
}

// TestSacctDuplicatesShowEachRunsSteps: sacct -D lists a requeued job's
// earlier runs each with its own srun steps (asked for by attempt), and
// plain sacct only the current run's, as Slurm's sacct does.
func TestSacctDuplicatesShowEachRunsSteps(t *testing.T) {
	t.Parallel()
	f := fixture()
	oops := f.Jobs[2]
	if oops.GetJobId() != "11" {
		t.Fatalf("fixture: job %s where 11 was", oops.GetJobId())
	}
	step := func(attempt int32, state loomv1.JobState, exit int32, cmd string) *loomv1.JobStep {
		return &loomv1.JobStep{Name: oops.GetName() + "/steps/0", Job: oops.GetName(), Attempt: attempt, StepId: 0,
			State: state, ExitCode: exit, Command: []string{"/usr/bin/" + cmd}, NumTasks: 2, Nodes: oops.GetRuns()[attempt-1].GetNodes(),
			StartTime: oops.GetRuns()[attempt-1].GetStartTime(), EndTime: oops.GetRuns()[attempt-1].GetEndTime()}
	}
	f.Steps = []*loomv1.JobStep{step(1, loomv1.JobState_CANCELLED, 0, "python"), step(2, loomv1.JobState_FAILED, 2, "torchrun"),
		// One that waited for resources and was cancelled before it
		// started: no row, as in Slurm's accounting.
		{Name: oops.GetName() + "/steps/1", Job: oops.GetName(), Attempt: 2, StepId: 1, State: loomv1.JobState_CANCELLED,
			Command: []string{"/usr/bin/waiter"}, Reason: "cancelled"}}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-P", "-n", "-o", "JobID,JobName,State,ExitCode,NodeList", "-j", "11", "-D"},
			"11|oops|NODE_FAIL|0:0|gpu-0002\n11.batch|batch|CANCELLED|0:0|gpu-0002\n11.0|python|CANCELLED|0:0|gpu-0002\n" +
				"11|oops|FAILED|2:0|gpu-0004\n11.batch|batch|FAILED|2:0|gpu-0004\n11.0|torchrun|FAILED|2:0|gpu-0004\n"},
		{[]string{"-P", "-n", "-o", "JobID,JobName,State", "-j", "11"},
			"11|oops|FAILED\n11.batch|batch|FAILED\n11.0|torchrun|FAILED\n"},
	} {
		code, out, errOut := run(t, f, "sacct", Env{}, tc.args...)
		if code != 0 || out != tc.want {
			t.Errorf("sacct %v: %d %q %q\nwant %q", tc.args, code, out, errOut, tc.want)
		}
	}
}

func TestScancel(t *testing.T) {
	t.Parallel()
	cancelled := func(f *fakegw.Gateway) []string {
		var out []string
		for _, c := range fakegw.Requests[*loomv1.CancelJobRequest](f) {
			scope := ""
			if c.GetBatch() {
				scope += "+b"
			}
			if c.GetFull() {
				scope += "+f"
			}
			out = append(out, strings.TrimPrefix(c.GetName(), "projects/default/jobs/")+c.GetSignal()+scope)
		}
		sort.Strings(out)
		return out
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"12"}, []string{"12"}},
		{[]string{"12", "13"}, []string{"12", "13"}},
		{[]string{"15"}, []string{"15"}},               // the whole array, in one step (its name)
		{[]string{"15_0"}, []string{"16"}},             // a task with its own record
		{[]string{"15_[0-1]"}, []string{"15_1", "16"}}, // tasks not yet split off go by name
		{[]string{"-n", "held"}, []string{"14"}},       // by name
		{[]string{"-u", "bob"}, []string{"13"}},        // by user
		{[]string{"--me", "-t", "R"}, []string{"12", "16"}},
		{[]string{"-p", "debug"}, []string{"15", "16"}},
		{[]string{"--signal=USR1", "12"}, []string{"12USR1"}},
		{[]string{"-s", "10", "12"}, []string{"12USR1"}},
		{[]string{"-b", "-s", "USR1", "12"}, []string{"12USR1+b"}}, // the batch shell alone
		{[]string{"--full", "-s", "USR1", "12"}, []string{"12USR1+f"}},
		{[]string{"-u", "bob", "12"}, nil}, // ids and filters must both match
	} {
		f := fixture()
		code, _, errOut := run(t, f, "scancel", Env{}, tc.args...)
		if code != 0 || !reflect.DeepEqual(cancelled(f), tc.want) {
			t.Errorf("scancel %v: %d %q cancelled %v, want %v", tc.args, code, errOut, cancelled(f), tc.want)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "scancel: error: No job identification provided\n"},
		// A signal to a job that is unknown or has ended is an error, as
		// in Slurm (only the plain cancel below is not).
		{[]string{"-s", "USR1", "99"}, "scancel: error: Kill job error on job id 99: Invalid job id specified\n"},
		{[]string{"-b", "10"}, "scancel: error: Kill job error on job id 10: Invalid job id specified\n"},
		// Slurm's words for a signal: "Kill job error" too, an ended job's
		// id invalid, a pending job not alterable yet.
		{[]string{"-s", "USR1", "10"}, "scancel: error: Kill job error on job id 10: Invalid job id specified\n"},
		// A bad signal or state, in Slurm 22.05's scancel's words (checked
		// with scripts/slurm-local.sh).
		{[]string{"--signal=NOPE", "12"}, "Unknown job signal: NOPE\n"},
		{[]string{"-s", "0", "12"}, "Unknown job signal: 0\n"},
		{[]string{"-t", "PD,XX"}, "Invalid job state specified: PD,XX\nValid job states are PENDING, RUNNING, and SUSPENDED\n"},
		{[]string{"--state=bogus", "-n", "x"}, "Invalid job state specified: bogus\nValid job states are PENDING, RUNNING, and SUSPENDED\n"},
		{[]string{"12.x"}, "scancel: error: Invalid job id 12.x\n"},
		{[]string{"x"}, "scancel: error: Invalid job id x\n"},
	} {
		code, _, errOut := run(t, fixture(), "scancel", Env{}, tc.args...)
		if code != 1 || errOut != tc.want {
			t.Errorf("scancel %v: %d %q, want %q", tc.args, code, errOut, tc.want)
		}
	}
	// A refusal slurmctld answers exits with Slurm's error number cut to 8
	// bits, the highest of them when several failed; one scancel says
	// itself exits 1. Bob's job 13 is pending, 12 is alice's. Slurm 22.05 (scripts/slurm-local.sh), job 2 pending:
	//   $ scancel --signal=USR1 2; echo $?
	//   scancel: error: Kill job error on job id 2: Job can not be altered now, try again later
	//   228
	//   $ scancel --signal=USR1 99 2; echo $?      (99 unknown: 1)
	//   scancel: error: Kill job error on job id 99: Invalid job id specified
	//   scancel: error: Kill job error on job id 2: Job can not be altered now, try again later
	//   228
	//   $ setpriv --reuid=65534 ... scancel 1; echo $?   (root's job 1)
	//   scancel: error: Kill job error on job id 1: Access/permission denied
	//   210
	for _, tc := range []struct {
		args     []string
		user     string
		wantCode int
		want     string
	}{
		{[]string{"-s", "USR1", "13"}, "bob", 228, "scancel: error: Kill job error on job id 13: Job can not be altered now, try again later\n"},
		{[]string{"--signal=USR1", "99", "13"}, "bob", 228, "scancel: error: Kill job error on job id 99: Invalid job id specified\n" +
			"scancel: error: Kill job error on job id 13: Job can not be altered now, try again later\n"},
		{[]string{"12"}, "bob", 210, "scancel: error: Kill job error on job id 12: Access/permission denied\n"},
		{[]string{"-s", "USR1", "13", "12"}, "bob", 228, "scancel: error: Kill job error on job id 13: Job can not be altered now, try again later\n" +
			"scancel: error: Kill job error on job id 12: Access/permission denied\n"},
	} {
		f := fixture()
		f.DenyOthers = true
		code, _, errOut := run(t, f, "scancel", Env{User: tc.user}, tc.args...)
		if code != tc.wantCode || errOut != tc.want {
			t.Errorf("scancel %v (as %q): %d %q, want %d %q", tc.args, tc.user, code, errOut, tc.wantCode, tc.want)
		}
	}
	// Cancelling a job that is unknown or already ended is no error, as in
	// Slurm 22.05 (scancel ignores ESLURM_INVALID_JOB_ID and
	// ESLURM_ALREADY_DONE for a kill): silent and exit 0, the error said
	// with -v only; the other ids are still cancelled.
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"99"}, ""},
		{[]string{"10"}, ""},
		{[]string{"99_3"}, ""},
		{[]string{"-v", "10"}, "scancel: Terminating job 10\nscancel: error: Kill job error on job id 10: Job/step already completing or completed\n"},
		{[]string{"-v", "99"}, "scancel: Terminating job 99\nscancel: error: Kill job error on job id 99: Invalid job id specified\n"},
		{[]string{"-v", "-Q", "99"}, "scancel: Terminating job 99\n"},
	} {
		f := fixture()
		code, _, errOut := run(t, f, "scancel", Env{}, tc.args...)
		if code != 0 || errOut != tc.wantErr {
			t.Errorf("scancel %v: %d %q, want 0 %q", tc.args, code, errOut, tc.wantErr)
		}
	}
	if f := fixture(); true {
		code, _, errOut := run(t, f, "scancel", Env{}, "99", "12", "10")
		if code != 0 || errOut != "" || !reflect.DeepEqual(cancelled(f), []string{"10", "12", "99"}) {
			t.Errorf("scancel 99 12 10: %d %q cancelled %v, want 0, silent, all three asked", code, errOut, cancelled(f))
		}
	}
	// Interactive: only confirmed jobs are cancelled.
	f := fixture()
	code, out, _ := run(t, f, "scancel", Env{Stdin: strings.NewReader("n\ny\n")}, "-i", "-u", "alice", "-t", "PD")
	if code != 0 || !reflect.DeepEqual(cancelled(f), []string{"15"}) || !strings.Contains(out, "Cancel job_id=14 name=held partition=gpu [y/n]? ") {
		t.Errorf("interactive: %d %q %v", code, out, cancelled(f))
	}
}

func TestScontrolActions(t *testing.T) {
	t.Parallel()
	f := fixture()
	for _, args := range [][]string{{"hold", "13,14"}, {"release", "14"}, {"requeue", "12"}, {"requeuehold", "12"}, {"uhold", "13"}} {
		if code, _, errOut := run(t, f, "scontrol", Env{}, args...); code != 0 {
			t.Errorf("scontrol %v: %d %q", args, code, errOut)
		}
	}
	var got []string
	for _, u := range fakegw.Requests[*loomv1.UpdateJobRequest](f) {
		got = append(got, u.GetAction()+":"+shortName(u.GetName()))
	}
	want := []string{"hold:13", "hold:14", "release:14", "requeue:12", "requeue:12", "hold:12", "uhold:13"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("updates = %v, want %v", got, want)
	}
	if code, _, errOut := run(t, f, "scontrol", Env{}, "update", "JobId=12", "Nice=lots"); code != 1 || errOut != "Invalid nice value: lots\n" {
		t.Errorf("scontrol update Nice=lots: %d %q", code, errOut)
	}
	for _, u := range fakegw.Requests[*loomv1.UpdateJobRequest](f) {
		if u.GetUser() != "alice" {
			t.Errorf("update %v does not name its caller alice", u)
		}
	}

	// Another user's job: Slurm's refusal, for scontrol and scancel.
	f = fixture()
	f.DenyOthers = true
	if code, _, errOut := run(t, f, "scontrol", Env{}, "release", "13"); code != 1 || errOut != "Access/permission denied for job 13\n" {
		t.Errorf("scontrol release of bob's job: %d %q", code, errOut)
	}
	if code, _, errOut := run(t, f, "scancel", Env{}, "13"); code != 210 ||
		!strings.Contains(errOut, "scancel: error: Kill job error on job id 13: Access/permission denied") {
		t.Errorf("scancel of bob's job: %d %q", code, errOut)
	}
	if cs := fakegw.Requests[*loomv1.CancelJobRequest](f); len(cs) != 1 || cs[0].GetUser() != "alice" {
		t.Errorf("cancel requests %v; want one from alice", cs)
	}
	// Another user's array: refused once, for the id asked, as Slurm's
	// one answer, not once per task.
	if code, _, errOut := run(t, f, "scancel", Env{User: "bob"}, "15"); code != 210 ||
		errOut != "scancel: error: Kill job error on job id 15: Access/permission denied\n" {
		t.Errorf("scancel of alice's array by bob: %d %q", code, errOut)
	}

	f = fixture()
	for _, args := range [][]string{
		{"update", "JobId=12", "TimeLimit=3:00:00"},
		{"update", "jobid=13", "partition=debug"},
		{"update", "JobId=12", "TimeLimit=+30"},
		{"update", "JobId=12", "TimeLimit=-1:00:00", "Partition=gpu"},
		{"update", "JobId=13", "Nice=-20"},
		{"update", "JobId=13", "Nice=0"},
		{"update", "JobId=13", "StartTime=now+1hour"},
		{"update", "JobId=13", "Dependency=afterok:12"},
		{"update", "JobId=13", "Dependency="},
		{"update", "JobId=13", "QOS=high", "Account=lab"},
		{"update", "JobId=12", "JobName=renamed"},
		{"update", "JobId=13", "NumNodes=2-3", "NumTasks=4", "MinMemoryNode=2G"},
		{"update", "JobId=13", "NumNodes=2-2"},
		{"update", "JobId=13", "ReqNodeList=gpu-[0001-0002]", "ExcNodeList="},
		{"update", "JobId=15", "ArrayTaskThrottle=0"},
		{"update", "JobId=13", "Gres=gpu:h100:2"},
		{"update", "JobId=13", "TresPerNode=gres/gpu:4"},
	} {
		if code, _, errOut := run(t, f, "scontrol", Env{}, args...); code != 0 {
			t.Errorf("scontrol %v: %d %q", args, code, errOut)
		}
	}
	got = nil
	for _, u := range fakegw.Requests[*loomv1.UpdateJobRequest](f) {
		g := u.GetAction() + ":" + shortName(u.GetName()) + ":" + u.GetPartition() + ":" + formatDuration(u.GetTimeLimitSeconds())
		if u.Nice != nil {
			g += fmt.Sprintf(":nice=%d", u.GetNice())
		}
		if u.BeginTime != nil {
			g += ":begin+" + u.GetBeginTime().AsTime().Sub(testNow).String()
		}
		if u.Dependency != nil {
			g += ":dependency=" + u.GetDependency()
		}
		if u.Qos != nil {
			g += ":qos=" + u.GetQos()
		}
		if u.Account != nil {
			g += ":account=" + u.GetAccount()
		}
		if u.JobName != nil {
			g += ":name=" + u.GetJobName()
		}
		if u.NodeCount != nil || u.Ntasks != nil || u.MemMb != nil {
			g += fmt.Sprintf(":N=%d", u.GetNodeCount())
			if u.MaxNodeCount != nil {
				g += fmt.Sprintf("-%d", u.GetMaxNodeCount())
			}
			g += fmt.Sprintf(":n=%d:mem=%d", u.GetNtasks(), u.GetMemMb())
		}
		if u.Nodelist != nil {
			g += ":w=" + strings.Join(u.GetNodelist().GetHosts(), ",")
		}
		if u.Exclude != nil {
			g += ":x=" + strings.Join(u.GetExclude().GetHosts(), ",")
		}
		if u.ArrayTaskThrottle != nil {
			g += fmt.Sprintf(":throttle=%d", u.GetArrayTaskThrottle())
		}
		if u.GpusPerNode != nil {
			g += fmt.Sprintf(":gpus=%s:%d", u.GetGpuType(), u.GetGpusPerNode())
		}
		got = append(got, g)
	}
	want = []string{"update:12::03:00:00", "update:13:debug:00:00:00", "update:12::02:30:00", "update:12:gpu:01:00:00",
		"update:13::00:00:00:nice=-20", "update:13::00:00:00:nice=0", "update:13::00:00:00:begin+1h0m0s",
		"update:13::00:00:00:dependency=afterok:12", "update:13::00:00:00:dependency=", "update:13::00:00:00:qos=high:account=lab",
		"update:12::00:00:00:name=renamed",
		"update:13::00:00:00:N=2-3:n=4:mem=2048", "update:13::00:00:00:N=2:n=0:mem=0", "update:13::00:00:00:w=gpu-0001,gpu-0002:x=",
		"update:15::00:00:00:throttle=0", "update:13::00:00:00:gpus=h100:2", "update:13::00:00:00:gpus=:4"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("updates = %v, want %v", got, want)
	}

	f = fixture()
	code, _, errOut := run(t, f, "scontrol", Env{User: "ops"}, "update", "NodeName=gpu-[0001-0002]", "State=DRAIN", "Reason=disk swap")
	nu := fakegw.Requests[*loomv1.UpdateSlurmNodeRequest](f)
	if code != 0 || len(nu) != 2 || nu[1].GetHostname() != "gpu-0002" || nu[0].GetState() != "DRAIN" ||
		nu[0].GetReason() != "disk swap" || nu[0].GetCluster() != demoCluster || nu[0].GetUser() != "ops" {
		t.Errorf("drain: %d %q %v", code, errOut, nu)
	}
	code, _, _ = run(t, f, "scontrol", Env{}, "update", "nodename=gpu-0004", "state=resume")
	if nu = fakegw.Requests[*loomv1.UpdateSlurmNodeRequest](f); code != 0 || nu[2].GetState() != "RESUME" {
		t.Errorf("resume: %d %v", code, nu)
	}

	// State=FAIL reports the nodes faulty to health, which drains and
	// repairs them; a name not of the cluster reports none.
	code, _, errOut = run(t, f, "scontrol", Env{}, "update", "NodeName=gpu-[0001-0002]", "State=FAIL", "Reason=ECC storm")
	rf := fakegw.Requests[*loomv1.ReportFaultyNodesRequest](f)
	if code != 0 || len(rf) != 1 || !reflect.DeepEqual(rf[0].GetHostnames(), []string{"gpu-0001", "gpu-0002"}) ||
		rf[0].GetReason() != "ECC storm" || rf[0].GetCluster() != demoCluster {
		t.Errorf("fail: %d %q %v", code, errOut, rf)
	}
	code, _, errOut = run(t, f, "scontrol", Env{}, "update", "NodeName=gpu-0001,gpu-0009", "State=FAIL", "Reason=x")
	if rf = fakegw.Requests[*loomv1.ReportFaultyNodesRequest](f); code == 0 || len(rf) != 1 ||
		errOut != "slurm_update error: Invalid node name specified (gpu-0009)\n" {
		t.Errorf("fail with an unknown node: %d %q, %d reports", code, errOut, len(rf))
	}

	// scontrol reboot is health's reboot of each node, with its reason.
	code, _, errOut = run(t, f, "scontrol", Env{}, "reboot", "ASAP", "nextstate=RESUME", "reason=bad clocks", "gpu-[0001-0002]")
	rb := fakegw.Requests[*loomv1.UpdateNodeRemediationRequest](f)
	if code != 0 || len(rb) != 2 || rb[1].GetHostname() != "gpu-0002" || rb[0].GetAction() != loomv1.RemediationAction_ACTION_REBOOT ||
		rb[0].GetReason() != "bad clocks" || rb[0].GetCluster() != demoCluster {
		t.Errorf("reboot: %d %q %v", code, errOut, rb)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"update", "NodeName=gpu-0001", "State=DRAIN"}, "You must specify a reason when DOWNING or DRAINING a node. Request denied\n"},
		{[]string{"update", "NodeName=gpu-0001", "State=FAIL"}, "You must specify a reason when DOWNING or DRAINING a node. Request denied\n"},
		{[]string{"update", "NodeName=gpu-0001", "State=FLY"}, "Invalid node state specified: FLY"},
		{[]string{"reboot"}, "Missing node list. Specify ALL|<NodeList>\n"},
		{[]string{"reboot", "nextstate=DOWN", "gpu-0001"}, "Invalid nextstate \"DOWN\""},
		{[]string{"reboot", "gpu-0009"}, "slurm_reboot_nodes error: Invalid node name specified (gpu-0009)\n"},
		{[]string{"update", "NodeName=gpu-0009", "State=DRAIN", "Reason=x"}, "slurm_update error: Invalid node name specified (gpu-0009)\n"},
		// The key as written, as Slurm 22.05 on this machine
		// (scripts/slurm-local.sh) printed it, exit 1:
		// "Update of this parameter is not supported: Bogus=1\nRequest aborted\n",
		// for a job and for a node alike.
		{[]string{"update", "JobId=12", "Features=fast"}, "Update of this parameter is not supported: Features=fast\nRequest aborted\n"},
		{[]string{"update", "JobId=12", "BOGUS=1", "TimeLimit=5"}, "Update of this parameter is not supported: BOGUS=1\nRequest aborted\n"},
		{[]string{"update", "NodeName=gpu-0001", "Bogus=1"}, "Update of this parameter is not supported: Bogus=1\nRequest aborted\n"},
		{[]string{"update", "JobId=12", "NumNodes=0"}, "Invalid NumNodes value: 0 (\"0\" is not a node count of at least 1)\n"},
		{[]string{"update", "JobId=12", "NumTasks=x"}, "Invalid NumTasks value: x\n"},
		{[]string{"update", "JobId=12", "MinMemoryNode=lots"}, "Invalid MinMemoryNode value: lots (expected a number with an optional K, M, G or T suffix)\n"},
		{[]string{"update", "JobId=12", "ExcNodeList=gpu-[0001"}, "Invalid node name specified: gpu-[0001"},
		{[]string{"update", "JobId=12", "ArrayTaskThrottle=-1"}, "Invalid ArrayTaskThrottle value: -1\n"},
		{[]string{"update", "JobId=12", "Gres=tpu:1"}, "Invalid generic resource (gres) specification: tpu:1 (unknown generic resource \"tpu\" (Loom knows gpu))\n"},
		{[]string{"update", "JobId=12", "JobName="}, "Invalid JobName value: it must not be empty\n"},
		{[]string{"update", "JobId=12", "TimeLimit=soon"}, "Invalid TimeLimit value: soon\n"},
		{[]string{"update", "JobId=12", "TimeLimit=UNLIMITED"}, "scontrol: error: TimeLimit=UNLIMITED is not supported by Loom; give a time\n"},
		{[]string{"update", "JobId=12"}, "No changes specified\n"},
		{[]string{"update", "Foo=1"}, "No valid entity in update command\n"},
		{[]string{"update", "JobId=12", "oops"}, "Invalid input: oops\nRequest aborted\n"},
		{[]string{"hold", "99"}, "Invalid job id specified for job 99\nslurm_suspend error: Invalid job id specified\n"},
		{[]string{"release", "99"}, "Invalid job id specified for job 99\nslurm_suspend error: Invalid job id specified\n"},
		{[]string{"show", "job", "99"}, "slurm_load_jobs error: Invalid job id specified\n"},
		{[]string{"show", "bogus"}, "scontrol: error: invalid entity:bogus for keyword:show\n"},
		{[]string{"frobnicate"}, "invalid keyword: frobnicate\n"},
		{nil, "scontrol: error: no command given"},
	} {
		code, _, errOut := run(t, fixture(), "scontrol", Env{}, tc.args...)
		if code != 1 || !strings.HasPrefix(errOut, tc.want) {
			t.Errorf("scontrol %v: %d %q, want %q", tc.args, code, errOut, tc.want)
		}
	}
	// An unknown node or partition is said on stdout, as Slurm 22.05's
	// scontrol says it (checked), exit 1.
	for _, tc := range [][]string{{"node", "nope", "Node nope not found\n"}, {"partition", "nope", "Partition nope not found\n"}} {
		if code, out, errOut := run(t, fixture(), "scontrol", Env{}, "show", tc[0], tc[1]); code != 1 || out != tc[2] || errOut != "" {
			t.Errorf("scontrol show %s %s: %d %q %q, want 1 and %q on stdout", tc[0], tc[1], code, out, errOut, tc[2])
		}
	}
	// Slurm says slurm_suspend only after hold and release.
	if code, _, errOut := run(t, fixture(), "scontrol", Env{}, "requeue", "99"); code != 1 || errOut != "Invalid job id specified for job 99\n" {
		t.Errorf("scontrol requeue 99: %d %q", code, errOut)
	}

	// Hostlist helpers, used in job scripts.
	code, out, _ := run(t, fixture(), "scontrol", Env{Environ: map[string]string{"SLURM_JOB_NODELIST": "gpu-[0001-0002],cpu-1"}}, "show", "hostnames")
	if code != 0 || out != "gpu-0001\ngpu-0002\ncpu-1\n" {
		t.Errorf("show hostnames: %d %q", code, out)
	}
	code, out, _ = run(t, fixture(), "scontrol", Env{}, "show", "hostlist", "gpu-0003,gpu-0001,gpu-0002")
	if code != 0 || out != "gpu-[0001-0003]\n" {
		t.Errorf("show hostlist: %d %q", code, out)
	}
	// Listing everything, one line per record.
	code, out, _ = run(t, fixture(), "scontrol", Env{}, "-o", "show", "nodes")
	if code != 0 || strings.Count(out, "\n") != 4 || !strings.HasPrefix(out, "NodeName=gpu-0001 Arch=x86_64") {
		t.Errorf("show nodes -o: %q", out)
	}
	code, out, _ = run(t, fixture(), "scontrol", Env{}, "show", "partitions")
	if code != 0 || !strings.HasPrefix(out, "PartitionName=gpu\n") || !strings.Contains(out, "\nPartitionName=debug\n") {
		t.Errorf("show partitions: %q", out)
	}
}

func TestSprioFilters(t *testing.T) {
	t.Parallel()
	code, out, _ := run(t, fixture(), "sprio", Env{}, "-h", "-j", "13")
	if code != 0 || out != "             13 gpu              900          0          5        300         45        400        150\n" {
		t.Errorf("sprio -j 13: %d %q", code, out)
	}
	code, out, _ = run(t, fixture(), "sprio", Env{}, "-j", "12")
	if code != 0 || out != "Unable to find jobs matching user/id(s) specified\n" {
		t.Errorf("sprio -j 12 (running): %d %q", code, out)
	}
	code, out, _ = run(t, fixture(), "sprio", Env{}, "-u", "bob")
	if code != 0 || out != "          JOBID PARTITION     USER   PRIORITY       SITE        AGE  FAIRSHARE    JOBSIZE  PARTITION        QOS\n"+
		"             13 gpu            bob        900          0          5        300         45        400        150\n" {
		t.Errorf("sprio -u bob: %d %q", code, out)
	}
}

// TestSrun covers the steps srun runs itself, on the batch node: one-node
// steps given input on stdin (srunsteps_test.go has the others).
// TestSrun: inside an allocation every srun is a step the gateway starts,
// on one node or many (srunsteps_test.go has its output and ends): -n,
// -N, -c and the job's environment go into the request; a step cannot ask
// for more nodes than the allocation has.
func TestSrun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	alloc := map[string]string{"SLURM_JOB_ID": "12", "SLURM_JOB_NODELIST": "gpu-0001", "SLURM_NNODES": "1",
		"SLURM_NTASKS": "3", "SLURMD_NODENAME": "gpu-0001", "PATH": os.Getenv("PATH"), "HOME": dir}
	g := srunGateway(t, 0)
	code, _, errOut := run(t, g, "srun", Env{Cwd: dir, Environ: alloc, Stdin: strings.NewReader("")}, "-n", "2", "-c", "4", "./fail.sh")
	if code != 0 || len(stepsCreated(g)) != 1 {
		t.Fatalf("one-node srun with input: %d %q, %d steps created", code, errOut, len(stepsCreated(g)))
	}
	req := stepsCreated(g)[0]
	if req.GetParent() != "projects/default/jobs/12" || req.GetNtasks() != 2 || req.GetCpusPerTask() != 4 ||
		req.GetInput() != slurmspec.InputAll || req.GetWorkDir() != dir || !slices.Equal(req.GetCommand(), []string{"./fail.sh"}) ||
		req.GetEnv()["HOME"] != dir {
		t.Errorf("one-node step request %v", req)
	}
	// The job's --gpus-per-task is the step's default, as Slurm's srun
	// reads SLURM_GPUS_PER_TASK; the command line wins. --gpu-bind=none
	// keeps the GPUs a task (Slurm's step keeps TresPerTask=gres:gpu:1)
	// and says so.
	for args, want := range map[string]int32{"": 1, "--gpus-per-task=2": 2, "--gpu-bind=none": 1} {
		g := srunGateway(t, 0)
		env := mergeMaps(alloc, map[string]string{"SLURM_GPUS_PER_TASK": "1"})
		argv := []string{"hostname"}
		if args != "" {
			argv = append([]string{args}, argv...)
		}
		if code, _, errOut := run(t, g, "srun", Env{Cwd: dir, Environ: env}, argv...); code != 0 || len(stepsCreated(g)) != 1 ||
			stepsCreated(g)[0].GetGpusPerTask() != want || stepsCreated(g)[0].GetGpuBindNone() != (args == "--gpu-bind=none") {
			t.Errorf("srun %s with SLURM_GPUS_PER_TASK=1: exit %d, stderr %q, steps %v; want %d GPUs per task", args, code, errOut, stepsCreated(g), want)
		}
	}
	multi := mergeMaps(alloc, map[string]string{"SLURM_JOB_NODELIST": "gpu-[0001-0002]", "SLURM_NNODES": "2"})
	code, _, errOut = run(t, &fakegw.Gateway{}, "srun", Env{Cwd: dir, Environ: multi}, "hostname")
	// This gateway has no job 12.
	if code != 1 || errOut != "srun: error: Unable to create step for job 12: job projects/default/jobs/12 not found\n" {
		t.Errorf("multi-node: %d %q", code, errOut)
	}
	if code, _, errOut = run(t, &fakegw.Gateway{}, "srun", Env{Cwd: dir, Environ: alloc}, "-N2", "hostname"); code != 1 ||
		errOut != "srun: error: Only allocated 1 nodes asked for 2\n" {
		t.Errorf("-N2 of 1: %d %q", code, errOut)
	}
}

func TestMainDispatch(t *testing.T) {
	t.Parallel()
	code, _, errOut := run(t, &fakegw.Gateway{}, "sbatchx", Env{})
	if code != 2 || !strings.Contains(errOut, `"sbatchx" is not a Slurm command`) {
		t.Errorf("unknown command: %d %q", code, errOut)
	}
	for _, name := range Commands {
		code, out, _ := run(t, &fakegw.Gateway{}, name, Env{}, "--version")
		if code != 0 || out != Version+"\n" {
			t.Errorf("%s --version: %d %q", name, code, out)
		}
	}
	// A gateway without SlurmService (not served yet), and no gateway at
	// all: clear errors, not hangs or panics.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bare := grpc.NewServer()
	go func() { _ = bare.Serve(lis) }()
	t.Cleanup(bare.Stop)
	for addr, want := range map[string]string{
		lis.Addr().String(): "sinfo: error: slurm_load_partitions: this Loom gateway does not serve it yet",
		"127.0.0.1:1":       "sinfo: error: slurm_load_partitions: Unable to contact the Loom gateway (connect failure)",
	} {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		env := Env{Conn: conn, Cluster: "demo", CallTimeout: 5 * time.Second}
		code, _, errOut := runWith(t, env, "sinfo")
		if code != 1 || !strings.HasPrefix(errOut, want) {
			t.Errorf("sinfo via %s: %d %q, want %q", addr, code, errOut, want)
		}
		// scontrol ping says the controller is down, as Slurm's.
		if code, out, errOut := runWith(t, env, "scontrol", "ping"); code != 1 || !strings.HasPrefix(out, "Slurmctld(primary) at ") ||
			!strings.HasSuffix(out, " is DOWN\n") || errOut != "" {
			t.Errorf("scontrol ping via %s: %d %q %q, want DOWN, exit 1", addr, code, out, errOut)
		}
	}
}

// A scheduler may keep every array task as its own record, with no
// parent: squeue still shows the pending ones on one row.
func TestSqueueArrayWithoutParent(t *testing.T) {
	t.Parallel()
	task := func(id string, n int32, st loomv1.JobState) *loomv1.Job {
		return &loomv1.Job{Name: "projects/default/jobs/" + id, JobId: id, Cluster: demoCluster, DisplayName: "a",
			User: "alice", Partition: "gpu", State: st, ArrayJobId: "30", ArrayTaskId: n, StateReason: "Priority"}
	}
	f := &fakegw.Gateway{Jobs: []*loomv1.Job{
		task("30", 0, loomv1.JobState_RUNNING), task("31", 1, loomv1.JobState_PENDING),
		task("32", 2, loomv1.JobState_PENDING), task("33", 3, loomv1.JobState_PENDING),
	}}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "30_[1-3]\n30_0\n"},
		{[]string{"-r"}, "30_1\n30_2\n30_3\n30_0\n"},
		{[]string{"-j", "30_2"}, "30_[1-3]\n"},
		{[]string{"-j", "30"}, "30_[1-3]\n30_0\n"},
	} {
		code, out, errOut := run(t, f, "squeue", Env{}, append([]string{"-h", "-o", "%i"}, tc.args...)...)
		if code != 0 || out != tc.want {
			t.Errorf("squeue %v: %d %q %q, want %q", tc.args, code, out, errOut, tc.want)
		}
	}
}

// TestExpectedStart: a pending job the scheduler holds a backfill
// reservation for shows its expected start and the reserved nodes, as
// Slurm's squeue --start and scontrol show job do; one without shows N/A.
func TestExpectedStart(t *testing.T) {
	t.Parallel()
	f := fixture()
	for _, j := range f.Jobs {
		if j.GetJobId() == "13" {
			j.ExpectedStartTime = timestamppb.New(testNow.Add(90 * time.Minute))
			j.SchedNodes, j.TimeLimitSeconds = []string{"gpu-0001", "gpu-0002"}, 3600
		}
	}
	code, out, errOut := run(t, f, "squeue", Env{}, "--start", "-j", "13,14")
	want := "             JOBID PARTITION     NAME     USER ST          START_TIME  NODES SCHEDNODES           NODELIST(REASON)\n" +
		"                13       gpu evaluati      bob PD 2026-01-02T16:34:05      1 gpu-[0001-0002]      (Priority)\n" +
		"                14       gpu     held    alice PD                 N/A      1 (null)               (JobHeldUser)\n"
	if code != 0 || out != want {
		t.Errorf("squeue --start: %d %q\n got %s\nwant %s", code, errOut, out, want)
	}
	code, out, _ = run(t, f, "scontrol", Env{}, "show", "job", "13")
	if code != 0 || !strings.Contains(out, "   StartTime=2026-01-02T16:34:05 EndTime=2026-01-02T17:34:05 ") ||
		!strings.Contains(out, "   NodeList= SchedNodeList=gpu-[0001-0002]\n") {
		t.Errorf("scontrol show job 13:\n%s", out)
	}
}

// TestScontrolShowConfig: scontrol show config prints the cluster's
// slurm.conf settings as slurmctld does ("%-23s = %s", sorted), without
// its node and partition lines or comments, then the controller's state.
func TestScontrolShowConfig(t *testing.T) {
	t.Parallel()
	f := fixture()
	f.SlurmConfigs = map[string]*loomv1.SlurmConfig{demoCluster: {SlurmConf: "# generated by Loom\nClusterName=demo\n" +
		"SchedulerType=sched/backfill  # comment\nNodeName=gpu-[0001-0002] CPUs=8\nPartitionName=gpu Nodes=ALL Default=YES\nMaxArraySize=1001\n"}}
	code, out, errOut := run(t, f, "scontrol", Env{}, "show", "config")
	if code != 0 {
		t.Fatalf("scontrol show config: %d %q", code, errOut)
	}
	first, rest, _ := strings.Cut(out, "\n")
	if !strings.HasPrefix(first, "Configuration data as of ") {
		t.Errorf("first line %q", first)
	}
	want := "ClusterName             = demo\nMaxArraySize            = 1001\nSchedulerType           = sched/backfill\n\nSlurmctld(primary) at "
	if !strings.HasPrefix(rest, want) || !strings.HasSuffix(rest, " is UP\n") {
		t.Errorf("scontrol show config:\n%s\nwant it to start\n%s", rest, want)
	}
}

// TestJobIDSelectionBounds: job ids start at 1 and fit int64 (task
// indexes int32); anything else is Slurm's "Invalid job id", not a list.
func TestJobIDSelectionBounds(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"0", "000", "99999999999999999999", "12_99999999999"} {
		for _, prog := range []string{"squeue", "sacct"} {
			code, _, errOut := run(t, fixture(), prog, Env{}, "-j", id)
			if code == 0 || !strings.Contains(errOut, "Invalid job id") {
				t.Errorf("%s -j %s: %d %q, want Invalid job id", prog, id, code, errOut)
			}
		}
	}
}

// TestSacctJobCancelledWhilePending: a job cancelled before it started
// shows its cancel time as Start and End, Elapsed zero and no nodes, as
// real Slurm 22.05 recorded such a job here (scripts/slurm-local.sh).
func TestSacctJobCancelledWhilePending(t *testing.T) {
	t.Parallel()
	end := time.Date(2026, 12, 6, 14, 37, 33, 0, time.Local)
	j := &loomv1.Job{Name: "projects/default/jobs/4", JobId: "4", Cluster: demoCluster, DisplayName: "wrap", User: "alice",
		Partition: "gpu", State: loomv1.JobState_CANCELLED, NodeCount: 1, SubmitTime: timestamppb.New(end.Add(-time.Minute)),
		EndTime: timestamppb.New(end)}
	later := func() time.Time { return end.Add(time.Hour) } // a clock past its submit time
	code, out, errOut := run(t, &fakegw.Gateway{Jobs: []*loomv1.Job{j}}, "sacct", Env{Now: later}, "-P", "-n", "-X", "-o", "JobID,State,Start,End,Elapsed,NodeList")
	if want := "4|CANCELLED|2026-12-06T14:37:33|2026-12-06T14:37:33|00:00:00|None assigned\n"; code != 0 || out != want {
		t.Errorf("sacct of a job cancelled while pending: %d %q %q, want %q", code, out, errOut, want)
	}
}

// TestPartitionListFilters: a job pending in several partitions (-p
// debug,gpu) is listed by squeue -p gpu under each of them, but scancel -p
// gpu leaves it and sacct -r gpu does not list it: on Slurm 22.05 scancel
// and slurmdbd compare the job's partition string as a whole (scancel -p c
// left a job pending in b,c; sacct's query is partition='gpu').
func TestPartitionListFilters(t *testing.T) {
	t.Parallel()
	multi := func(f *fakegw.Gateway) *fakegw.Gateway {
		yes := true
		f.Jobs = append(f.Jobs, &loomv1.Job{Name: "projects/default/jobs/30", JobId: "30", Cluster: demoCluster, DisplayName: "multi",
			User: "alice", Partition: "debug,gpu", State: loomv1.JobState_PENDING, StateReason: "Resources", NodeCount: 1,
			SubmitTime: ago(time.Hour), WorkDir: "/home/alice", SubmitDir: "/home/alice", Requeue: &yes})
		return f
	}
	if _, out, _ := run(t, multi(fixture()), "squeue", Env{}, "-h", "-p", "gpu", "-o", "%i %P"); !strings.Contains(out, "30 debug,gpu\n") {
		t.Errorf("squeue -p gpu:\n%s\nwant job 30 in debug,gpu", out)
	}
	f := multi(fixture())
	if code, _, errOut := run(t, f, "scancel", Env{}, "-p", "gpu", "-t", "PD"); code != 0 {
		t.Fatalf("scancel -p gpu: %d %s", code, errOut)
	}
	var cancelled []string
	for _, c := range fakegw.Requests[*loomv1.CancelJobRequest](f) {
		cancelled = append(cancelled, strings.TrimPrefix(c.GetName(), "projects/default/jobs/"))
	}
	sort.Strings(cancelled)
	if want := []string{"13", "14"}; !reflect.DeepEqual(cancelled, want) {
		t.Errorf("scancel -p gpu -t PD cancelled %v; want %v (not job 30 of debug,gpu)", cancelled, want)
	}
	_, out, _ := run(t, multi(fixture()), "sacct", Env{}, "-n", "-X", "-P", "-a", "-r", "gpu", "-o", "jobid,partition")
	if strings.Contains(out, "30|") || !strings.Contains(out, "13|gpu") {
		t.Errorf("sacct -r gpu:\n%s\nwant job 13 and not job 30 of debug,gpu", out)
	}
	if _, out, _ := run(t, multi(fixture()), "sacct", Env{}, "-n", "-X", "-P", "-a", "-o", "jobid,partition"); !strings.Contains(out, "30|debug,gpu\n") {
		t.Errorf("sacct:\n%s\nwant job 30 in debug,gpu", out)
	}
}

// TestSqueueFormatPrecedenceAsSlurm: which format squeue prints when
// options and SQUEUE_FORMAT/SQUEUE_FORMAT2 meet, each case's header as
// Slurm 22.05's squeue printed it (scripts/slurm-local.sh): -l and --start
// set the variables aside (a SQUEUE_FORMAT in a profile must not turn
// `squeue --start` into something else), --start wins over -O but not -o.
func TestSqueueFormatPrecedenceAsSlurm(t *testing.T) {
	t.Parallel()
	const (
		long  = "             JOBID PARTITION     NAME     USER    STATE       TIME TIME_LIMI  NODES NODELIST(REASON)"
		start = "             JOBID PARTITION     NAME     USER ST          START_TIME  NODES SCHEDNODES           NODELIST(REASON)"
	)
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{map[string]string{"SQUEUE_FORMAT": "%i"}, []string{"-l"}, long},
		{map[string]string{"SQUEUE_FORMAT2": "jobid"}, []string{"-l"}, long},
		{map[string]string{"SQUEUE_FORMAT": "%i"}, []string{"--start"}, start},
		{map[string]string{"SQUEUE_FORMAT2": "jobid"}, []string{"--start"}, start},
		{nil, []string{"--start", "-O", "jobid"}, start},
		{nil, []string{"-O", "jobid", "--start"}, start},
		{nil, []string{"--start", "-o", "%i"}, "JOBID"},
		{map[string]string{"SQUEUE_FORMAT": "%i"}, []string{"-l", "-O", "name"}, "NAME                "},
		{map[string]string{"SQUEUE_FORMAT": "%i"}, []string{"-O", "name"}, "NAME                "},
		{map[string]string{"SQUEUE_FORMAT2": "name"}, []string{"-o", "%i"}, "JOBID"},
		{map[string]string{"SQUEUE_FORMAT": "%i", "SQUEUE_FORMAT2": "name"}, nil, "JOBID"},
		{map[string]string{"SQUEUE_FORMAT2": "name"}, nil, "NAME                "},
	} {
		code, out, errOut := run(t, fixture(), "squeue", Env{Environ: tc.env}, append(tc.args, "-j", "12")...)
		lines := strings.Split(out, "\n")
		if slices.Contains(tc.args, "-l") {
			lines = lines[1:] // the date
		}
		if code != 0 || lines[0] != tc.want {
			t.Errorf("%v squeue %v: %d %q %q, want header %q", tc.env, tc.args, code, out, errOut, tc.want)
		}
	}
}

// TestClusterLine: with -M, squeue and sinfo print Slurm 22.05's "CLUSTER:
// NAME" line before the table (after -l's date; not with -h), and sshare
// prints it -h or not, as Slurm's _multi_cluster does; without -M (LOOM_CLUSTER
// or the only cluster, Slurm's local cluster) there is none.
func TestClusterLine(t *testing.T) {
	t.Parallel()
	first := func(out string, n int) string { return strings.Join(strings.SplitN(out, "\n", n+1)[:n], "\n") }
	for _, tc := range []struct {
		name string
		args []string
		n    int
		want string
	}{
		{"squeue", []string{"-M", "other"}, 3, "CLUSTER: other\n             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)\n                20"},
		{"squeue", []string{"--clusters=projects/default/clusters/other", "-o", "%i"}, 2, "CLUSTER: other\nJOBID"},
		{"squeue", []string{"-l", "-M", "other"}, 3, "Fri Jan 02 15:04:05 2026\nCLUSTER: other\n             JOBID PARTITION     NAME     USER    STATE       TIME TIME_LIMI  NODES NODELIST(REASON)"},
		{"squeue", []string{"-h", "-M", "other", "-o", "%i"}, 1, "20"},
		{"squeue", []string{"-o", "%i"}, 1, "JOBID"},
		{"sinfo", []string{"-M", "demo", "-p", "debug"}, 2, "CLUSTER: demo\nPARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST"},
		{"sinfo", []string{"-h", "-M", "demo", "-p", "debug"}, 1, "debug        up    1:00:00      1    mix gpu-0003"},
		{"sinfo", []string{"-p", "debug"}, 1, "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST"},
		{"sshare", []string{"-M", "demo", "-n", "-P"}, 2, "CLUSTER: demo\nroot|||"},
		{"sshare", []string{"-n", "-P"}, 1, "root|||"},
	} {
		code, out, errOut := run(t, fixture(), tc.name, Env{}, tc.args...)
		if got := first(out, tc.n); code != 0 || !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s %v: %d %q\n got %q\nwant %q", tc.name, tc.args, code, errOut, got, tc.want)
		}
	}
}

// TestSqueueLooksEachOwnerUpOnce: %U, %g and %G of every row come from one
// lookup per owner (the system's user and group databases are not asked
// again for each row and field), and read as ownerIDs gives them.
func TestSqueueLooksEachOwnerUpOnce(t *testing.T) {
	t.Parallel()
	v := &squeueView{}
	var rows []jobRow
	for _, u := range []string{"root", "alice", "root", "alice", "root"} {
		rows = append(rows, jobRow{job: &loomv1.Job{User: u}})
	}
	var b strings.Builder
	squeueFields(v).write(&b, parseFormat("%U|%g|%G"), rows, true)
	if len(v.owners) != 2 {
		t.Errorf("owners looked up: %v, want root and alice once each", v.owners)
	}
	var want strings.Builder
	for _, r := range rows {
		ids := ownerIDs(r.job.GetUser())
		fmt.Fprintf(&want, "%s|%s|%s\n", ids.uid, ids.group, ids.gid)
	}
	if b.String() != want.String() {
		t.Errorf("rows %q, want %q", b.String(), want.String())
	}
}

// TestSqueueOwnerAndLayoutFieldsAsSlurm: %U/%G are the owner's uid and gid
// (%g the group's name) when the owner is an account of this machine, the
// name otherwise; %H %I %J (and -O sockets,cores,threads) are "*", %s
// nothing. Slurm 22.05 (scripts/slurm-local.sh), a job of root's:
//
//	$ squeue -o '%u|%U|%g|%G' -j 27
//	USER|UID|GROUP|GROUP
//	root|0|root|0
//	$ squeue -o '%.5H|%10I|%J|%s|' -j 27
//	SOCKE|CORES_PER_|THREADS_PER_CORE||
//	    *|*         |*||
//	$ squeue -O groupid,sockets,cores,threads -j 27   (each 20 wide)
//	GROUP               SOCKETS_PER_NODE    CORES_PER_SOCKET    THREADS_PER_CORE
//	0                   *                   *                   *
func TestSqueueOwnerAndLayoutFieldsAsSlurm(t *testing.T) {
	t.Parallel()
	f := fixture()
	f.Jobs = append(f.Jobs, &loomv1.Job{Name: "projects/default/jobs/27", JobId: "27", Cluster: demoCluster, DisplayName: "wrap",
		User: "root", Partition: "debug", State: loomv1.JobState_PENDING, NodeCount: 1, SubmitTime: ago(time.Minute)})
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-o", "%u|%U|%g|%G", "-j", "27"}, "USER|UID|GROUP|GROUP\nroot|0|root|0\n"},
		{[]string{"-o", "%.5H|%10I|%J|%s|", "-j", "27"}, "SOCKE|CORES_PER_|THREADS_PER_CORE||\n    *|*         |*||\n"},
		{[]string{"-O", "groupid,sockets,cores,threads", "-j", "27"}, "GROUP               SOCKETS_PER_NODE    CORES_PER_SOCKET    THREADS_PER_CORE    \n" +
			"0                   *                   *                   *                   \n"},
		// alice is no account here: her name for each.
		{[]string{"-h", "-o", "%U|%g|%G", "-j", "12"}, "alice|alice|alice\n"},
	} {
		code, out, errOut := run(t, f, "squeue", Env{}, tc.args...)
		if code != 0 || out != tc.want {
			t.Errorf("squeue %q: %d %q %q, want %q", tc.args, code, out, errOut, tc.want)
		}
	}
}

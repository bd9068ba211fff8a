package slurmcli

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/cmd/loom/internal/fakegw"
	"github.com/loom-ml/loom/libs/slurmspec"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

var baseEnv = map[string]string{"PWD": "/home/alice/proj", "USER": "alice", "HOME": "/home/alice", "SLURM_CONF": "/etc/slurm.conf"}

const plainScript = "#!/bin/bash\necho hi\n"

// parse runs parseSbatchAt at testNow (UTC) with baseEnv plus extra.
func parse(t *testing.T, args []string, script string, extra map[string]string) (*sbatchRequest, error) {
	t.Helper()
	env := map[string]string{}
	for k, v := range baseEnv {
		env[k] = v
	}
	for k, v := range extra {
		env[k] = v
	}
	return parseSbatchAt(testNow, args, []byte(script), env)
}

func TestParseSbatchOptions(t *testing.T) {
	t.Parallel()
	yes, no := true, false
	// Each option is given on the command line in one of its forms and,
	// with the same meaning, as a directive; both must give want.
	for _, tc := range []struct {
		args []string
		want *loomv1.Job // only the fields the option sets
	}{
		{[]string{"--job-name=train"}, &loomv1.Job{DisplayName: "train"}},
		{[]string{"-J", "train"}, &loomv1.Job{DisplayName: "train"}},
		{[]string{"-p", "gpu"}, &loomv1.Job{Partition: "gpu"}},
		{[]string{"--partition=gpu"}, &loomv1.Job{Partition: "gpu"}},
		{[]string{"-p", "gpu,cpu,gpu"}, &loomv1.Job{Partition: "gpu,cpu"}},
		{[]string{"-N2"}, &loomv1.Job{NodeCount: 2}},
		{[]string{"--nodes=2-4"}, &loomv1.Job{NodeCount: 2, MaxNodeCount: 4}},
		{[]string{"-n", "8"}, &loomv1.Job{Ntasks: 8}},
		{[]string{"--ntasks-per-node=4"}, &loomv1.Job{NtasksPerNode: 4}},
		{[]string{"-c4"}, &loomv1.Job{CpusPerTask: 4}},
		{[]string{"--mem=16G"}, &loomv1.Job{MemMb: 16384}},
		{[]string{"--mem=512"}, &loomv1.Job{MemMb: 512}},
		{[]string{"--mem=2048K"}, &loomv1.Job{MemMb: 2}},
		{[]string{"--mem=1T"}, &loomv1.Job{MemMb: 1024 * 1024}},
		{[]string{"--mem=100M"}, &loomv1.Job{MemMb: 100}},
		{[]string{"--gres=gpu:h100:8"}, &loomv1.Job{GpusPerNode: 8, GpuType: "h100"}},
		{[]string{"--gres=gpu:1g.10gb:2"}, &loomv1.Job{GpusPerNode: 2, GpuType: "1g.10gb"}},
		{[]string{"--gres=gpu:4"}, &loomv1.Job{GpusPerNode: 4}},
		{[]string{"--gres=gpu"}, &loomv1.Job{GpusPerNode: 1}},
		{[]string{"--gres=gres/gpu:a100"}, &loomv1.Job{GpusPerNode: 1, GpuType: "a100"}},
		{[]string{"-G", "16"}, &loomv1.Job{Gpus: 16}},
		{[]string{"--gpus=h100:16"}, &loomv1.Job{Gpus: 16, GpuType: "h100"}},
		{[]string{"--gpus-per-node=h100:8"}, &loomv1.Job{GpusPerNode: 8, GpuType: "h100"}},
		{[]string{"--ntasks-per-node=2", "--gpus-per-task=4"}, &loomv1.Job{NtasksPerNode: 2, GpusPerNode: 8, GpusPerTask: 4}},
		// Without -n the tasks come from --gpus, else from an exact -N
		// (a task a node), as Slurm 22.05 derives them (NumTasks=).
		{[]string{"-n3", "--gpus-per-task=2"}, &loomv1.Job{Ntasks: 3, Gpus: 6, GpusPerTask: 2}},
		{[]string{"--gpus=4", "--gpus-per-task=2"}, &loomv1.Job{Ntasks: 2, Gpus: 4, GpusPerTask: 2, GpusGiven: true}},
		{[]string{"--gpus=4", "--gpus-per-task=2", "-n2"}, &loomv1.Job{Ntasks: 2, Gpus: 4, GpusPerTask: 2, GpusGiven: true}},
		{[]string{"-N2", "--gpus-per-task=2"}, &loomv1.Job{NodeCount: 2, Ntasks: 2, Gpus: 4, GpusPerTask: 2}},
		{[]string{"-N1", "--gpus-per-task=2"}, &loomv1.Job{NodeCount: 1, Ntasks: 1, Gpus: 2, GpusPerTask: 2}},
		{[]string{"-t", "90"}, &loomv1.Job{TimeLimitSeconds: 90 * 60}},
		{[]string{"--time=1-12:00:00"}, &loomv1.Job{TimeLimitSeconds: 36 * 3600}},
		{[]string{"--time=UNLIMITED"}, &loomv1.Job{}},
		{[]string{"-a", "0-15:2%4"}, &loomv1.Job{Array: "0-15:2%4"}},
		{[]string{"--array=1,3,5"}, &loomv1.Job{Array: "1,3,5"}},
		{[]string{"-d", "afterok:12:13"}, &loomv1.Job{Dependency: "afterok:12:13"}},
		{[]string{"--dependency=singleton"}, &loomv1.Job{Dependency: "singleton"}},
		{[]string{"-o", "logs/%x-%j.out"}, &loomv1.Job{OutputPattern: "logs/%x-%j.out"}},
		{[]string{"--error=err-%A_%a.txt"}, &loomv1.Job{ErrorPattern: "err-%A_%a.txt"}},
		{[]string{"--open-mode=append"}, &loomv1.Job{OpenMode: "append"}},
		{[]string{"--open-mode=t"}, &loomv1.Job{OpenMode: "truncate"}},
		{[]string{"--requeue"}, &loomv1.Job{Requeue: &yes}},
		{[]string{"--no-requeue"}, &loomv1.Job{Requeue: &no}},
		{[]string{"--retries=3"}, &loomv1.Job{MaxRetries: 3}},
		{[]string{"--hang-timeout=10"}, &loomv1.Job{HangTimeoutSeconds: 600}},
		{[]string{"--hang-timeout=1:30:00"}, &loomv1.Job{HangTimeoutSeconds: 5400}},
		{[]string{"--hang-timeout=off"}, &loomv1.Job{HangTimeoutSeconds: slurmspec.HangTimeoutOff}},
		{[]string{"--hang-timeout=UNLIMITED"}, &loomv1.Job{HangTimeoutSeconds: slurmspec.HangTimeoutOff}},
		{[]string{"--checkpoint-dir=/shared/ckpt/llama"}, &loomv1.Job{CheckpointDir: "/shared/ckpt/llama"}},
		// Relative to the working directory, as --output is.
		{[]string{"--checkpoint-dir=ckpt"}, &loomv1.Job{CheckpointDir: "/home/alice/proj/ckpt"}},
		{[]string{"-D", "/scratch/run", "--checkpoint-dir=../ckpt"}, &loomv1.Job{WorkDir: "/scratch/run", CheckpointDir: "/scratch/ckpt"}},
		{[]string{"--exclusive"}, &loomv1.Job{Exclusive: true}},
		{[]string{"--exclusive=user"}, &loomv1.Job{ExclusiveUser: true}},
		{[]string{"-q", "high"}, &loomv1.Job{Qos: "high"}},
		{[]string{"-A", "research"}, &loomv1.Job{Account: "research"}},
		{[]string{"-w", "gpu-[01-03],cpu-1"}, &loomv1.Job{Nodelist: []string{"gpu-01", "gpu-02", "gpu-03", "cpu-1"}}},
		{[]string{"--exclude=gpu-07"}, &loomv1.Job{Exclude: []string{"gpu-07"}}},
		{[]string{"-D", "/scratch/run"}, &loomv1.Job{WorkDir: "/scratch/run"}},
		{[]string{"--chdir=sub"}, &loomv1.Job{WorkDir: "/home/alice/proj/sub"}},
		{[]string{"--signal=B:USR1@90"}, &loomv1.Job{Signal: "B:USR1@90"}},
		{[]string{"--signal=SIGTERM"}, &loomv1.Job{Signal: "TERM@60"}},
		{[]string{"--begin=now+1hour"}, &loomv1.Job{BeginTime: timestamppb.New(testNow.Add(time.Hour))}},
		{[]string{"--begin=2026-02-01T10:00:00"}, &loomv1.Job{BeginTime: timestamppb.New(time.Date(2026, 2, 1, 10, 0, 0, 0, time.UTC))}},
		{[]string{"-H"}, &loomv1.Job{Hold: true}},
		{[]string{"--hold"}, &loomv1.Job{Hold: true}},
		{[]string{"--nice"}, &loomv1.Job{Nice: 100}},
		{[]string{"--nice=-5"}, &loomv1.Job{Nice: -5}},
	} {
		for _, form := range []string{"command line", "directive"} {
			args, script := append([]string{}, tc.args...), plainScript
			if form == "directive" {
				script = "#!/bin/bash\n#SBATCH " + strings.Join(tc.args, " ") + "\necho hi\n"
				args = nil
			}
			req, err := parse(t, append(args, "job.sh"), script, nil)
			if err != nil {
				t.Errorf("%v as %s: %v", tc.args, form, err)
				continue
			}
			got := req.job
			want := proto.Clone(tc.want).(*loomv1.Job)
			// Fill the fields every job gets, then compare whole jobs.
			if want.DisplayName == "" {
				want.DisplayName = "job.sh"
			}
			if want.WorkDir == "" {
				want.WorkDir = "/home/alice/proj"
			}
			want.SubmitDir, want.User, want.Script, want.Export = "/home/alice/proj", "alice", got.Script, "ALL"
			want.ScriptPath = "/home/alice/proj/job.sh" // the submit directory's, whatever -D says
			want.Env = baseEnv
			if want.GetGpusPerNode() > 0 && strings.Contains(strings.Join(tc.args, " "), "--gres") {
				// Which of the two it was (TestParseSbatchGres).
				want.GresGpus = true
			}
			if !proto.Equal(got, want) {
				t.Errorf("%v as %s:\n got  %v\n want %v", tc.args, form, got, want)
			}
		}
	}
}

func TestParseSbatchPrecedence(t *testing.T) {
	t.Parallel()
	script := "#!/bin/bash\n" +
		"#SBATCH --time=10 -p script-part\n" +
		"#SBATCH --job-name=from-script --qos=low\n" +
		"#SBATCH -N 3\n" +
		"srun hostname\n"
	env := map[string]string{"SBATCH_TIMELIMIT": "20", "SBATCH_PARTITION": "env-part"}
	req, err := parse(t, []string{"-p", "cli-part", "job.sh"}, script, env)
	if err != nil {
		t.Fatal(err)
	}
	j := req.job
	// command line > environment > script
	if j.Partition != "cli-part" || j.TimeLimitSeconds != 20*60 || j.DisplayName != "from-script" || j.Qos != "low" || j.NodeCount != 3 {
		t.Errorf("precedence: partition %q time %d name %q qos %q nodes %d", j.Partition, j.TimeLimitSeconds, j.DisplayName, j.Qos, j.NodeCount)
	}
	if j.Script != script {
		t.Errorf("the script is sent as written, got %q", j.Script)
	}
	// A bad directive is refused even when the command line sets a good value.
	if _, err := parse(t, []string{"--time=5", "job.sh"}, "#!/bin/sh\n#SBATCH --time=soon\ntrue\n", nil); err == nil {
		t.Error("a malformed directive must be refused")
	}
}

func TestScriptDirectives(t *testing.T) {
	t.Parallel()
	script := "#!/bin/bash\n" +
		"\n" +
		"# a comment\n" +
		"#SBATCH --job-name=\"my job\"   # the name\n" +
		"#SBATCH -o 'out file.txt' -e err\\ file.txt\n" +
		"  # indented comment\n" +
		"## SBATCH disabled\n" +
		"# SBATCH --time=1\n" +
		"#SBATCH --comment=a#b\n" +
		"module load cuda\n" +
		"#SBATCH --partition=ignored\n"
	words, err := scriptDirectives("sbatch", script)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"--job-name=my job", "-o", "out file.txt", "-e", "err file.txt", "--comment=a"}
	if !reflect.DeepEqual(words, want) {
		t.Errorf("directives = %q\nwant %q", words, want)
	}
	if _, err := scriptDirectives("sbatch", "#!/bin/sh\n#SBATCH -J 'unterminated\n"); err == nil ||
		!strings.Contains(err.Error(), "line 2: unmatched `'`") {
		t.Errorf("unmatched quote: %v", err)
	}
}

func TestParseSbatchErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args   []string
		script string
		env    map[string]string
		want   string
	}{
		{[]string{"--foo", "job.sh"}, plainScript, nil, "sbatch: unrecognized option '--foo'\nTry \"sbatch --help\" for more information"},
		{[]string{"-Z", "job.sh"}, plainScript, nil, "sbatch: invalid option -- 'Z'\nTry \"sbatch --help\" for more information"},
		{[]string{"job.sh", "--time"}, "#!/bin/sh\n#SBATCH --time\ntrue\n", nil, "sbatch: option '--time' requires an argument\nTry \"sbatch --help\" for more information"},
		{[]string{"--time=abc", "job.sh"}, plainScript, nil, `sbatch: error: Invalid --time specification "abc"`},
		{[]string{"-p", "gpu,,cpu", "job.sh"}, plainScript, nil, `sbatch: error: Invalid --partition specification "gpu,,cpu": "gpu,,cpu": partition 2 of the list is empty`},
		{[]string{"-t", "1:2:3:4", "job.sh"}, plainScript, nil, `sbatch: error: Invalid --time specification "1:2:3:4"`},
		{[]string{"job.sh"}, plainScript, map[string]string{"SBATCH_TIMELIMIT": "x"}, `sbatch: error: Invalid --time specification "x"`},
		{[]string{"--array=10-1", "job.sh"}, plainScript, nil, `sbatch: error: Invalid --array specification "10-1": range "10-1" ends before it starts`},
		// Slurm 22.05 refuses each with "sbatch: error: Batch job submission
		// failed: Job dependency problem" alone (exit 1): Loom says why, then
		// Slurm's words, as for a job id never issued.
		{[]string{"--dependency=afterok:x", "job.sh"}, plainScript, nil, `sbatch: error: Invalid --dependency specification "afterok:x": "x" is not a job id (Slurm: Job dependency problem)`},
		{[]string{"-d", "afterok:1,?afterok:2", "job.sh"}, plainScript, nil, `sbatch: error: Invalid --dependency specification "afterok:1,?afterok:2": ',' (all of) and '?' (any of) cannot be mixed (Slurm: Job dependency problem)`},
		{[]string{"--begin=someday", "job.sh"}, plainScript, nil, `sbatch: error: Invalid --begin specification "someday"`},
		{[]string{"--signal=NOPE", "job.sh"}, plainScript, nil, `sbatch: error: Invalid --signal specification "NOPE"`},
		{[]string{"--retries=101", "job.sh"}, plainScript, nil, `sbatch: error: Invalid --retries specification "101": expected 0 to 100`},
		{[]string{"--hang-timeout=8-0", "job.sh"}, plainScript, nil, `sbatch: error: Invalid --hang-timeout specification "8-0": 691200 seconds is more than a week (7-0), the longest hang timeout`},
		{[]string{"--hang-timeout=10m", "job.sh"}, plainScript, nil, `sbatch: error: Invalid --hang-timeout specification "10m": "10m" is not a number: expected a time like --time's (minutes, MM:SS, HH:MM:SS, D-HH, ...), 0 for the cluster's default, or off`},
		{[]string{"--checkpoint-dir=", "job.sh"}, plainScript, nil, `sbatch: error: Invalid --checkpoint-dir specification "": empty directory`},
		{[]string{"--mem=16GB", "job.sh"}, plainScript, nil, `sbatch: error: Invalid --mem specification "16GB"`},
		{[]string{"--gres=nvme:1", "job.sh"}, plainScript, nil, `sbatch: error: Invalid --gres specification "nvme:1": unknown generic resource "nvme"`},
		{[]string{"--gres=gpu:-1", "job.sh"}, plainScript, nil, `sbatch: error: Invalid --gres specification "gpu:-1": count "-1" must not be negative`},
		{[]string{"--gres=gpu:h100:-1", "job.sh"}, plainScript, nil, `sbatch: error: Invalid --gres specification "gpu:h100:-1": count "-1" must not be negative`},
		{[]string{"--gres=gpu:-h100", "job.sh"}, plainScript, nil, `sbatch: error: Invalid --gres specification "gpu:-h100": type "-h100": a GPU type has letters, digits, '_', '.' and '-' (not first)`},
		{[]string{"--begin=2263-01-01", "job.sh"}, plainScript, nil, `sbatch: error: Invalid --begin specification "2263-01-01"`},
		{[]string{"--gpus=0", "job.sh"}, plainScript, nil, `sbatch: error: Invalid --gpus specification "0"`},
		{[]string{"-N", "0", "job.sh"}, plainScript, nil, `sbatch: error: Batch job submission failed: Node count specification invalid`}, // the controller refuses it, exit 1
		{[]string{"-N", "4-2", "job.sh"}, plainScript, nil, `sbatch: error: Invalid node count specification "4-2": maximum 2 is below minimum 4`},
		{[]string{"-n", "two", "job.sh"}, plainScript, nil, `sbatch: error: Invalid numeric value "two" for --ntasks.`},
		{[]string{"-c", "-1", "job.sh"}, plainScript, nil, `sbatch: error: Invalid numeric value "-1" for --cpus-per-task.`},
		{[]string{"--exclusive=maybe", "job.sh"}, plainScript, nil, `sbatch: error: Invalid --exclusive specification "maybe"`},
		{[]string{"--open-mode=overwrite", "job.sh"}, plainScript, nil, `sbatch: error: Invalid --open-mode specification "overwrite": want append or truncate`},
		{[]string{"-w", "gpu-[1-", "job.sh"}, plainScript, nil, `sbatch: error: Invalid --nodelist specification "gpu-[1-"`},
		{[]string{"--wrap=hostname", "extra"}, "", nil, "sbatch: error: Script arguments are not permitted with the --wrap option."},
		{[]string{"job.sh"}, "", nil, "sbatch: error: Batch script is empty!"},
		{[]string{"job.sh"}, " \n\t\n", nil, "sbatch: error: Batch script contains only whitespace!"},
		{[]string{"job.sh"}, "echo hi\n", nil, "sbatch: error: This does not look like a batch script.  The first\nsbatch: error: line must start with #! followed by the path to an interpreter.\nsbatch: error: For instance: #!/bin/sh"},
		{[]string{"job.sh"}, "#!/bin/sh\r\necho hi\r\n", nil, "sbatch: error: Batch script contains DOS line breaks (\\r\\n)\nsbatch: error: instead of expected UNIX line breaks (\\n)."},
		{[]string{"job.sh"}, "#!/bin/sh\n#SBATCH --nodes=2 extra\ntrue\n", nil, "sbatch: error: Invalid directive found in batch script: extra"},
		{[]string{"job.sh"}, "#!/bin/sh\n#SBATCH --bogus\ntrue\n", nil, "sbatch: unrecognized option '--bogus'\nTry \"sbatch --help\" for more information"},
		{[]string{"job.py", "arg"}, "#!/usr/bin/env python3\nprint(1)\n", nil, "sbatch: error: script arguments are supported for shell scripts only"},
		// As Slurm 22.05's sbatch (measured): 255, and 1 for arbitrary without -w.
		{[]string{"-m", "bogus", "job.sh"}, plainScript, nil, "sbatch: error: Invalid --distribution specification"},
		{[]string{"-m", "plane", "job.sh"}, plainScript, nil, "sbatch: error: Invalid plane size or size not specified\nsbatch: error: Invalid --distribution specification"},
		{[]string{"-m", "arbitrary", "job.sh"}, plainScript, nil, "sbatch: error: With Arbitrary distribution you need to specify a nodelist or hostfile with the -w option"},
	} {
		req, err := parse(t, tc.args, tc.script, tc.env)
		if err == nil {
			t.Errorf("%v: accepted (%v), want %q", tc.args, req.job, tc.want)
			continue
		}
		// As Slurm's sbatch: 255 for what its option parser refuses (an
		// unknown or incomplete option, a bad node count, time, memory,
		// begin time or signal), 1 for the rest.
		wantCode := 1
		for _, p := range []string{"unrecognized option", "invalid option", "requires an argument", "--time ", "--begin ",
			"--signal ", "--mem ", "node count", "--distribution specification"} {
			if strings.Contains(tc.want, p) {
				wantCode = 255
			}
		}
		e, ok := err.(*Error)
		if !ok || e.Code != wantCode || !strings.HasPrefix(e.Text, tc.want) {
			t.Errorf("%v:\n got  %q (exit %d)\n want %q (exit %d)", tc.args, err, e.Code, tc.want, wantCode)
		}
	}
}

// TestParseSbatchDistribution: sbatch -m puts the distribution in the
// job's environment as Slurm 22.05's sbatch does (measured beside it), so
// that the job's sruns take it as their default: -m cyclic is
// SLURM_DISTRIBUTION=cyclic, plane=2 is plane with SLURM_DIST_PLANESIZE=2,
// *:* is block:cyclic, --export=NONE keeps it; arbitrary (with -w) is
// taken and not handed on. No "ignored" warning.
func TestParseSbatchDistribution(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args        []string
		dist, plane string
	}{
		{[]string{"-m", "cyclic"}, "cyclic", ""},
		{[]string{"-m", "Cyclic"}, "cyclic", ""},
		{[]string{"--distribution=plane=2"}, "plane", "2"},
		{[]string{"-m", "*:*"}, "block:cyclic", ""},
		{[]string{"--export=NONE", "-m", "cyclic:block,pack"}, "cyclic:block,pack", ""},
		// Without a -m it hands on, the submitter's variables are exported
		// as they are.
		{[]string{"-m", "arbitrary", "-w", "n1"}, "", "9"},
		{nil, "", "9"},
	} {
		// A stale plane size (sbatch in a plane=9 step) goes with -m.
		env := map[string]string{"SLURM_DIST_PLANESIZE": "9"}
		req, err := parse(t, append(tc.args, "job.sh"), plainScript, env)
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		got := req.job.GetEnv()
		if got["SLURM_DISTRIBUTION"] != tc.dist || got["SLURM_DIST_PLANESIZE"] != tc.plane || len(req.warnings) != 0 {
			t.Errorf("%v: SLURM_DISTRIBUTION %q, SLURM_DIST_PLANESIZE %q, warnings %q; want %q, %q, none",
				tc.args, got["SLURM_DISTRIBUTION"], got["SLURM_DIST_PLANESIZE"], req.warnings, tc.dist, tc.plane)
		}
	}
}

// TestParseSbatchGres: a --gres=gpu:N job says so (Job.gres_gpus), so
// that its script gets no SLURM_GPUS_PER_NODE and its sruns take no
// per-node default, as Slurm 22.05's (measured: srun --gpus=2 gets 2 GPUs
// of a --gres=gpu:4 job, -n1 --gpus-per-task=2 2 of them, where a
// --gpus-per-node=4 job's get 4); the last of --gres and --gpus-per-node
// decides.
func TestParseSbatchGres(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"--gres=gpu:4"}, true},
		{[]string{"--gres=gpu:a100:2", "--export=NONE"}, true},
		{[]string{"--gpus-per-node=4"}, false},
		{[]string{"--gpus-per-node=4", "--gres=gpu:2"}, true},
		{[]string{"--gres=gpu:2", "--gpus-per-node=4"}, false},
		{[]string{"--gres=none"}, false},
		{[]string{"--gpus=2"}, false},
		{nil, false},
	} {
		req, err := parse(t, append(tc.args, "job.sh"), plainScript, nil)
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		if got := req.job.GetGresGpus(); got != tc.want {
			t.Errorf("%v: gres_gpus %v, want %v", tc.args, got, tc.want)
		}
	}
}

func TestParseSbatchExportAndScript(t *testing.T) {
	t.Parallel()
	env := map[string]string{"EDITOR": "vi", "SLURM_JOB_ID": "5"}
	for _, tc := range []struct {
		export string
		want   map[string]string
		spec   string
	}{
		{"", mergeMaps(baseEnv, env), "ALL"},
		{"ALL", mergeMaps(baseEnv, env), "ALL"},
		{"NONE", map[string]string{"SLURM_JOB_ID": "5", "SLURM_CONF": "/etc/slurm.conf"}, "NONE"},
		{"EDITOR,FOO=bar", map[string]string{"SLURM_JOB_ID": "5", "SLURM_CONF": "/etc/slurm.conf", "EDITOR": "vi", "FOO": "bar"}, "EDITOR,FOO=bar"},
		{"all,EDITOR=emacs", mergeMaps(baseEnv, env, map[string]string{"EDITOR": "emacs"}), "ALL,EDITOR=emacs"},
		// NONE in a list adds nothing, as Slurm 22.05 on this machine
		// (scripts/slurm-local.sh) took it, exit 0: with BAR=2 exported,
		// --export=NONE,FOO=1 gave the job FOO=1 (no BAR),
		// none,FOO=1,BAR gave BAR=2 and FOO=1, ALL,NONE and NONE,ALL
		// gave BAR=2 (everything), NONE, gave neither.
		{"NONE,FOO=1", map[string]string{"SLURM_JOB_ID": "5", "SLURM_CONF": "/etc/slurm.conf", "FOO": "1"}, "NONE,FOO=1"},
		{"none,FOO=1,EDITOR", map[string]string{"SLURM_JOB_ID": "5", "SLURM_CONF": "/etc/slurm.conf", "FOO": "1", "EDITOR": "vi"}, "NONE,FOO=1,EDITOR"},
		{"ALL,NONE", mergeMaps(baseEnv, env), "ALL,NONE"},
		{"NONE,ALL", mergeMaps(baseEnv, env), "NONE,ALL"},
		{"NONE,", map[string]string{"SLURM_JOB_ID": "5", "SLURM_CONF": "/etc/slurm.conf"}, "NONE"},
	} {
		args := []string{"job.sh"}
		if tc.export != "" {
			args = []string{"--export=" + tc.export, "job.sh"}
		}
		req, err := parse(t, args, plainScript, env)
		if err != nil {
			t.Fatalf("--export=%s: %v", tc.export, err)
		}
		if !reflect.DeepEqual(req.job.Env, tc.want) || req.job.Export != tc.spec {
			t.Errorf("--export=%s: env %v spec %q, want %v %q", tc.export, req.job.Env, req.job.Export, tc.want, tc.spec)
		}
	}

	// --wrap makes the script; its name is "wrap".
	req, err := parse(t, []string{"--wrap", "python train.py --lr 3", "-N2"}, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if req.job.DisplayName != "wrap" || req.job.NodeCount != 2 ||
		req.job.Script != "#!/bin/sh\n# This script was created by sbatch --wrap.\n\npython train.py --lr 3\n" {
		t.Errorf("--wrap job = %v", req.job)
	}
	// No script path (stdin): the name is "sbatch".
	if req, err := parse(t, nil, plainScript, nil); err != nil || req.job.DisplayName != "sbatch" {
		t.Errorf("stdin job name = %v, %v", req, err)
	}
	// Script arguments become the script's "$@", after its directives.
	req, err = parse(t, []string{"-J", "x", "run.sh", "a b", "it's"}, "#!/bin/bash\n#SBATCH -N1\n\necho \"$@\"\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := "#!/bin/bash\n#SBATCH -N1\n\nset -- 'a b' 'it'\\''s'\necho \"$@\"\n"; req.job.Script != want {
		t.Errorf("script with args = %q, want %q", req.job.Script, want)
	}
	// The command line's script arguments are not sbatch options.
	req, err = parse(t, []string{"run.sh", "--time=bogus"}, "#!/bin/sh\ntrue\n", nil)
	if err != nil || req.job.TimeLimitSeconds != 0 {
		t.Errorf("script argument taken as an option: %v %v", req, err)
	}
	// --mem-per-cpu becomes memory per node, and is carried itself for a
	// node range's wider widths (the scheduler's slurmspec.WidthMemMB).
	req, err = parse(t, []string{"--ntasks-per-node=4", "-c2", "--mem-per-cpu=1G", "job.sh"}, plainScript, nil)
	if err != nil || req.job.MemMb != 8*1024 || req.job.MemPerCpuMb != 1024 {
		t.Errorf("--mem-per-cpu: %v %v %v", req.job.GetMemMb(), req.job.GetMemPerCpuMb(), err)
	}
	req, err = parse(t, []string{"-N1-3", "-n5", "--mem-per-cpu=1024", "job.sh"}, plainScript, nil)
	if err != nil || req.job.MemMb != 5*1024 || req.job.MemPerCpuMb != 1024 {
		t.Errorf("-N1-3 -n5 --mem-per-cpu: %v %v %v", req.job.GetMemMb(), req.job.GetMemPerCpuMb(), err)
	}
	// Its product saturates, never wrapping to a negative mem_mb (which the
	// gateway would refuse naming mem_mb, not given): 2^50 - 1 MiB a CPU
	// times 4096 × 4096 CPUs.
	req, err = parse(t, []string{"--ntasks-per-node=4096", "-c4096", "--mem-per-cpu=1125899906842623", "job.sh"}, plainScript, nil)
	if err != nil || req.job.MemMb != math.MaxInt64 || req.job.MemPerCpuMb != 1<<50-1 {
		t.Errorf("huge --mem-per-cpu: %v %v %v", req.job.GetMemMb(), req.job.GetMemPerCpuMb(), err)
	}
	// With --cpus-per-gpu, of the CPUs its GPUs take (2 × 3), and carried
	// to the scheduler, with no warning.
	req, err = parse(t, []string{"--gres=gpu:2", "--cpus-per-gpu=3", "--mem-per-cpu=1G", "job.sh"}, plainScript, nil)
	if err != nil || req.job.MemMb != 6*1024 || req.job.CpusPerGpu != 3 || len(req.warnings) != 0 {
		t.Errorf("--cpus-per-gpu --mem-per-cpu: mem %v, cpus_per_gpu %d, warnings %v, %v", req.job.GetMemMb(), req.job.GetCpusPerGpu(), req.warnings, err)
	}
	// Ignored options warn, once each.
	req, err = parse(t, []string{"--mail-type=END", "--mail-user=a@b", "--mail-type=FAIL", "job.sh"}, plainScript, nil)
	if err != nil || len(req.warnings) != 2 || !strings.Contains(req.warnings[0], "--mail-type is not supported by Loom") {
		t.Errorf("warnings = %v, %v", req.warnings, err)
	}
}

func mergeMaps(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

func TestParseSbatchPublic(t *testing.T) {
	t.Parallel()
	job, err := ParseSbatch([]string{"-N", "2", "--gres=gpu:8", "train.sh"}, []byte("#!/bin/sh\n#SBATCH -t 5\ntrue\n"), map[string]string{"PWD": "/w", "LOOM_USER": "bob", "USER": "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if job.NodeCount != 2 || job.GpusPerNode != 8 || job.TimeLimitSeconds != 300 || job.User != "bob" || job.WorkDir != "/w" ||
		job.DisplayName != "train.sh" || job.ScriptPath != "/w/train.sh" {
		t.Errorf("ParseSbatch = %v", job)
	}
	// Slurm's Command: the script's absolute path; none for standard
	// input or --wrap.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"../runs/./a.sh", "x"}, "/runs/a.sh"},
		{[]string{"/abs/b.sh"}, "/abs/b.sh"},
		{nil, ""},
		{[]string{"--wrap", "true"}, ""},
	} {
		j, err := ParseSbatch(c.args, []byte("#!/bin/sh\ntrue\n"), map[string]string{"PWD": "/w"})
		if err != nil || j.GetScriptPath() != c.want {
			t.Errorf("sbatch %q: script path %q, %v; want %q", c.args, j.GetScriptPath(), err, c.want)
		}
	}
	if _, err := ParseSbatch([]string{"--nodes"}, nil, nil); err == nil {
		t.Error("ParseSbatch accepted --nodes without a value")
	}
}

func TestSbatchCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "train.sh"), []byte("#!/bin/bash\n#SBATCH -N 2\n#SBATCH --gres=gpu:8\nsrun python train.py\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// An exported bash function (Lmod's module) goes to the job, as
	// Slurm's does; a name no process environment can carry stays behind.
	env := Env{Cwd: dir, Environ: map[string]string{"PATH": "/usr/bin", "USER": "ignored",
		"BASH_FUNC_module%%": "() {  eval $($LMOD_CMD bash \"$@\")\n}", "odd-name.x": "1"}}

	f := &fakegw.Gateway{}
	code, out, errOut := run(t, f, "sbatch", env, "train.sh")
	if code != 0 || out != "Submitted batch job 1\n" || errOut != "" {
		t.Fatalf("sbatch = %d %q %q", code, out, errOut)
	}
	req := submitted(f)[0]
	j := req.GetJob()
	if req.GetParent() != "projects/default" || req.GetRequestId() == "" || j.GetCluster() != demoCluster ||
		j.GetNodeCount() != 2 || j.GetGpusPerNode() != 8 || j.GetUser() != "alice" || j.GetSubmitDir() != dir ||
		j.GetWorkDir() != dir || j.GetEnv()["PATH"] != "/usr/bin" || !strings.Contains(j.GetScript(), "srun python train.py") {
		t.Errorf("submitted %v", req)
	}
	if _, odd := j.GetEnv()["odd-name.x"]; odd || !strings.HasPrefix(j.GetEnv()["BASH_FUNC_module%%"], "() {") {
		t.Errorf("exported env %v: want the bash function and not odd-name.x", j.GetEnv())
	}
	if host, err := os.Hostname(); err == nil && j.GetSubmitHost() != host {
		t.Errorf("submit host %q, want this host %q (SLURM_SUBMIT_HOST)", j.GetSubmitHost(), host)
	}

	code, out, _ = run(t, f, "sbatch", env, "--parsable", "-J", "named", "train.sh")
	if code != 0 || out != "2\n" || submitted(f)[1].GetJob().GetDisplayName() != "named" {
		t.Errorf("--parsable = %d %q", code, out)
	}

	// -Q says nothing, the id included, even with --parsable (Slurm 22.05).
	for _, args := range [][]string{{"-Q", "train.sh"}, {"--parsable", "--quiet", "train.sh"}} {
		code, out, errOut = run(t, f, "sbatch", env, args...)
		if code != 0 || out != "" || errOut != "" {
			t.Errorf("sbatch %v = %d %q %q, want nothing said", args, code, out, errOut)
		}
	}

	// An --array past the server's MaxArraySize: Slurm's refusal, then
	// which limit it passed; the client itself checks only the syntax.
	// (The gateway was sent the refused request: its Jobs say what it took.)
	fa := &fakegw.Gateway{MaxArraySize: 1001}
	code, out, errOut = run(t, fa, "sbatch", env, "--array=0-1999", "train.sh")
	if code == 0 || out != "" || len(fa.Jobs) != 0 || !strings.HasPrefix(errOut,
		"sbatch: error: Batch job submission failed: Invalid job array specification (job.array: \"0-1999\": task id 1999 is not below MaxArraySize 1001 (task ids are 0-1000))") {
		t.Errorf("--array=0-1999: %d %q %q, %d submitted", code, out, errOut, len(fa.Jobs))
	}
	if code, _, errOut = run(t, fa, "sbatch", env, "--array=0-1000%4", "train.sh"); code != 0 || len(fa.Jobs) != 1 {
		t.Errorf("--array=0-1000%%4 (MaxArraySize 1001): %d %q", code, errOut)
	}

	// Refused: nothing is submitted.
	f2 := &fakegw.Gateway{}
	code, out, errOut = run(t, f2, "sbatch", env, "--time=forever", "train.sh")
	if code != 255 || out != "" || !strings.HasPrefix(errOut, "sbatch: error: Invalid --time specification") || len(submitted(f2)) != 0 {
		t.Errorf("bad --time: %d %q %q, %d submitted", code, out, errOut, len(submitted(f2)))
	}
	code, _, errOut = run(t, f2, "sbatch", env, "--frobnicate", "train.sh")
	if code != 255 || errOut != "sbatch: unrecognized option '--frobnicate'\nTry \"sbatch --help\" for more information\n" || len(submitted(f2)) != 0 {
		t.Errorf("unknown option: %d %q", code, errOut)
	}
	code, _, errOut = run(t, f2, "sbatch", env, "missing.sh")
	if code != 1 || errOut != "sbatch: error: Unable to open file missing.sh\n" || len(submitted(f2)) != 0 {
		t.Errorf("missing script: %d %q", code, errOut)
	}

	// The script from standard input; ignored options warn on stderr.
	env2 := env
	env2.Stdin = strings.NewReader("#!/bin/sh\n#SBATCH --mail-type=ALL\nhostname\n")
	code, out, errOut = run(t, f2, "sbatch", env2, "-M", "other")
	if code != 0 || out != "Submitted batch job 1 on cluster other\n" || errOut != "sbatch: warning: --mail-type is not supported by Loom and is ignored\n" ||
		submitted(f2)[0].GetJob().GetCluster() != "projects/default/clusters/other" || submitted(f2)[0].GetJob().GetDisplayName() != "sbatch" {
		t.Errorf("stdin: %d %q %q %v", code, out, errOut, submitted(f2))
	}

	// --wait exits with the job's exit code (the fake job fails with 3).
	code, out, _ = run(t, &fakegw.Gateway{}, "sbatch", env, "--wait", "--wrap=false")
	if code != 3 || out != "Submitted batch job 1\n" {
		t.Errorf("--wait = %d %q", code, out)
	}

	// Without LOOM_CLUSTER the project's only cluster is used; with
	// several, sbatch asks which.
	f3 := &fakegw.Gateway{Clusters: []*loomv1.Cluster{{Name: "projects/default/clusters/solo"}}}
	envNo := env
	envNo.Cluster = ""
	conn := f3.Dial(t)
	envNo.Conn = conn
	if code, _, errOut := runWith(t, envNo, "sbatch", "--wrap=true"); code != 0 || submitted(f3)[0].GetJob().GetCluster() != "projects/default/clusters/solo" {
		t.Errorf("single cluster: %d %q", code, errOut)
	}
	f3.Clusters = append(f3.Clusters, &loomv1.Cluster{Name: "projects/default/clusters/b"})
	if code, _, errOut := runWith(t, envNo, "sbatch", "--wrap=true"); code != 1 || !strings.Contains(errOut, "several clusters (b, solo)") {
		t.Errorf("several clusters: %d %q", code, errOut)
	}

	code, out, _ = run(t, &fakegw.Gateway{}, "sbatch", env, "--version")
	if code != 0 || out != Version+"\n" {
		t.Errorf("--version = %d %q", code, out)
	}
}

// submitted is what f was asked to submit.
func submitted(f *fakegw.Gateway) []*loomv1.SubmitJobRequest {
	return fakegw.Requests[*loomv1.SubmitJobRequest](f)
}

// runWith runs a command with env as given (its own connection).
func runWith(t *testing.T, env Env, name string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb strings.Builder
	if env.Now == nil {
		env.Now = func() time.Time { return testNow }
	}
	env.Location = time.UTC
	if env.User == "" {
		env.User = "alice"
	}
	code := Main(t.Context(), name, args, env, &out, &errb)
	return code, out.String(), errb.String()
}

// TestExitFromJob: sbatch --wait's status per ended job, as real Slurm
// 22.05 gave them here (scripts/slurm-local.sh): a job cancelled while
// running exits 1, one cancelled while pending or held exits 0.
func TestExitFromJob(t *testing.T) {
	t.Parallel()
	started := timestamppb.New(time.Unix(1700000000, 0))
	for _, c := range []struct {
		name string
		job  *loomv1.Job
		want int
	}{
		{"completed", &loomv1.Job{State: loomv1.JobState_COMPLETED, StartTime: started}, 0},
		{"failed with 3", &loomv1.Job{State: loomv1.JobState_FAILED, ExitCode: 3, StartTime: started}, 3},
		{"failed without a code", &loomv1.Job{State: loomv1.JobState_FAILED}, 1},
		{"cancelled while running", &loomv1.Job{State: loomv1.JobState_CANCELLED, StartTime: started}, 1},
		{"cancelled while pending", &loomv1.Job{State: loomv1.JobState_CANCELLED}, 0},
		{"cancelled pending after a requeue", &loomv1.Job{State: loomv1.JobState_CANCELLED, Runs: []*loomv1.JobRun{{State: loomv1.JobState_NODE_FAIL}}}, 1},
		{"timed out", &loomv1.Job{State: loomv1.JobState_TIMEOUT, StartTime: started}, 1},
		{"killed by a signal", &loomv1.Job{State: loomv1.JobState_FAILED, ExitCode: 137, StartTime: started}, 1},
	} {
		got := 0
		var e *Error
		if err := exitFromJob(c.job); errors.As(err, &e) {
			got = e.Code
		} else if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got != c.want {
			t.Errorf("%s: sbatch --wait exits %d, want %d", c.name, got, c.want)
		}
	}
}

// TestSbatchKeepsTheSubmittersToken: the submitting shell's LOOM_TOKEN
// (an API key or a user's access token) is not exported to the job, under
// --export=ALL or named: the job's record (Redis, the bus, every agent it
// reaches) would keep the submitter's credential, and a job whose node
// could not get its own token would run with the whole user's. The
// job gets its own, scoped to it, from its node.
func TestSbatchKeepsTheSubmittersToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "t.sh"), []byte("#!/bin/sh\ntrue\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := Env{Cwd: dir, Environ: map[string]string{"PATH": "/usr/bin", "LOOM_TOKEN": "lk_0123.secret", "KEEP": "me"}}
	f := &fakegw.Gateway{}
	for _, args := range [][]string{{"t.sh"}, {"--export=ALL,LOOM_TOKEN", "t.sh"}, {"--export=LOOM_TOKEN=lk_x.y,KEEP", "t.sh"}} {
		code, _, errOut := run(t, f, "sbatch", env, args...)
		if code != 0 {
			t.Fatalf("sbatch %q = %d %q", args, code, errOut)
		}
		reqs := submitted(f)
		e := reqs[len(reqs)-1].GetJob().GetEnv()
		if v, ok := e["LOOM_TOKEN"]; ok || e["KEEP"] != "me" {
			t.Errorf("sbatch %q exported LOOM_TOKEN=%q (KEEP=%q); want no LOOM_TOKEN and KEEP", args, v, e["KEEP"])
		}
	}
}

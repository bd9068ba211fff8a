package slurmcli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/hostlist"
	"github.com/loom-ml/loom/libs/slurmspec"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// sbatchOptions are sbatch's options (22.05). The ones Loom acts on are
// listed in sbatchApply; the others are accepted and ignored with a
// warning (ignoredSbatch), so that existing scripts still run.
var sbatchOptions = []optDef{
	{long: []string{"account"}, short: 'A', arg: requiredArg},
	{long: []string{"array"}, short: 'a', arg: requiredArg},
	{long: []string{"begin"}, short: 'b', arg: requiredArg},
	{long: []string{"chdir", "workdir"}, short: 'D', arg: requiredArg},
	{long: []string{"clusters", "cluster"}, short: 'M', arg: requiredArg},
	{long: []string{"cpus-per-task"}, short: 'c', arg: requiredArg},
	{long: []string{"dependency"}, short: 'd', arg: requiredArg},
	{long: []string{"error"}, short: 'e', arg: requiredArg},
	{long: []string{"open-mode"}, arg: requiredArg},
	{long: []string{"exclude"}, short: 'x', arg: requiredArg},
	{long: []string{"exclusive"}, arg: optionalArg},
	{long: []string{"export"}, arg: requiredArg},
	{long: []string{"gpus"}, short: 'G', arg: requiredArg},
	{long: []string{"gpus-per-node"}, arg: requiredArg},
	{long: []string{"gpus-per-task"}, arg: requiredArg},
	{long: []string{"gres"}, arg: requiredArg},
	{long: []string{"help"}, short: 'h', arg: noArg},
	{long: []string{"hold"}, short: 'H', arg: noArg},
	{long: []string{"job-name"}, short: 'J', arg: requiredArg},
	{long: []string{"mem"}, arg: requiredArg},
	{long: []string{"mem-per-cpu"}, arg: requiredArg},
	{long: []string{"mem-per-gpu"}, arg: requiredArg},
	{long: []string{"nodelist"}, short: 'w', arg: requiredArg},
	{long: []string{"nodes"}, short: 'N', arg: requiredArg},
	{long: []string{"no-requeue"}, arg: noArg},
	{long: []string{"ntasks", "tasks"}, short: 'n', arg: requiredArg},
	{long: []string{"ntasks-per-node", "tasks-per-node"}, arg: requiredArg},
	{long: []string{"output"}, short: 'o', arg: requiredArg},
	{long: []string{"parsable"}, arg: noArg},
	{long: []string{"partition"}, short: 'p', arg: requiredArg},
	{long: []string{"nice"}, arg: optionalArg},
	{long: []string{"qos"}, short: 'q', arg: requiredArg},
	{long: []string{"quiet"}, short: 'Q', arg: noArg},
	{long: []string{"requeue"}, arg: noArg},
	// --retries, --hang-timeout and --checkpoint-dir are Loom's (Slurm has
	// none): Job.max_retries, hang_timeout_seconds and checkpoint_dir.
	{long: []string{"retries"}, arg: requiredArg},
	{long: []string{"hang-timeout"}, arg: requiredArg},
	{long: []string{"checkpoint-dir"}, arg: requiredArg},
	{long: []string{"signal"}, arg: requiredArg},
	{long: []string{"test-only"}, arg: noArg},
	{long: []string{"time"}, short: 't', arg: requiredArg},
	{long: []string{"usage"}, short: 'u', arg: noArg},
	{long: []string{"verbose"}, short: 'v', arg: noArg},
	{long: []string{"version"}, short: 'V', arg: noArg},
	{long: []string{"wait"}, short: 'W', arg: noArg},
	{long: []string{"wrap"}, arg: requiredArg},
	// -m: checked as Slurm's, and handed to the job's steps through
	// SLURM_DISTRIBUTION (sbatchDistEnv).
	{long: []string{"distribution"}, short: 'm', arg: requiredArg},

	// Accepted and ignored (a warning says so).
	{long: []string{"acctg-freq"}, arg: requiredArg},
	{long: []string{"batch"}, arg: requiredArg},
	{long: []string{"bb"}, arg: requiredArg},
	{long: []string{"bbf"}, arg: requiredArg},
	{long: []string{"comment"}, arg: requiredArg},
	{long: []string{"constraint"}, short: 'C', arg: requiredArg},
	{long: []string{"container"}, arg: requiredArg},
	{long: []string{"contiguous"}, arg: noArg},
	{long: []string{"core-spec"}, short: 'S', arg: requiredArg},
	{long: []string{"cores-per-socket"}, arg: requiredArg},
	{long: []string{"cpu-freq"}, arg: requiredArg},
	{long: []string{"cpus-per-gpu"}, arg: requiredArg},
	{long: []string{"deadline"}, arg: requiredArg},
	{long: []string{"delay-boot"}, arg: requiredArg},
	{long: []string{"export-file"}, arg: requiredArg},
	{long: []string{"extra-node-info"}, short: 'B', arg: requiredArg},
	{long: []string{"get-user-env"}, arg: optionalArg},
	{long: []string{"gid"}, arg: requiredArg},
	{long: []string{"gres-flags"}, arg: requiredArg},
	{long: []string{"hint"}, arg: requiredArg},
	{long: []string{"ignore-pbs"}, arg: noArg},
	{long: []string{"immediate"}, short: 'I', arg: optionalArg},
	{long: []string{"input"}, short: 'i', arg: requiredArg},
	{long: []string{"kill-on-invalid-dep"}, arg: requiredArg},
	{long: []string{"licenses"}, short: 'L', arg: requiredArg},
	{long: []string{"mail-type"}, arg: requiredArg},
	{long: []string{"mail-user"}, arg: requiredArg},
	{long: []string{"mcs-label"}, arg: requiredArg},
	{long: []string{"mem-bind"}, arg: requiredArg},
	{long: []string{"mincpus"}, arg: requiredArg},
	{long: []string{"network"}, arg: requiredArg},
	{long: []string{"no-kill"}, short: 'k', arg: optionalArg},
	{long: []string{"nodefile"}, short: 'F', arg: requiredArg},
	{long: []string{"ntasks-per-core"}, arg: requiredArg},
	{long: []string{"ntasks-per-gpu"}, arg: requiredArg},
	{long: []string{"ntasks-per-socket"}, arg: requiredArg},
	{long: []string{"overcommit"}, short: 'O', arg: noArg},
	{long: []string{"oversubscribe"}, short: 's', arg: noArg},
	{long: []string{"power"}, arg: requiredArg},
	{long: []string{"priority"}, arg: requiredArg},
	{long: []string{"profile"}, arg: requiredArg},
	{long: []string{"propagate"}, arg: optionalArg},
	{long: []string{"reboot"}, arg: noArg},
	{long: []string{"reservation"}, arg: requiredArg},
	{long: []string{"sockets-per-node"}, arg: requiredArg},
	{long: []string{"spread-job"}, arg: noArg},
	{long: []string{"switches"}, arg: requiredArg},
	{long: []string{"thread-spec"}, arg: requiredArg},
	{long: []string{"threads-per-core"}, arg: requiredArg},
	{long: []string{"time-min"}, arg: requiredArg},
	{long: []string{"tmp"}, arg: requiredArg},
	{long: []string{"tres-per-task"}, arg: requiredArg},
	{long: []string{"uid"}, arg: requiredArg},
	{long: []string{"use-min-nodes"}, arg: noArg},
	{long: []string{"wait-all-nodes"}, arg: requiredArg},
	{long: []string{"wckey"}, arg: requiredArg},
}

// sbatchEnvOptions are sbatch's input environment variables: each sets
// the option it names, above the script's directives and below the
// command line.
var sbatchEnvOptions = []struct{ env, opt string }{
	{"SBATCH_ACCOUNT", "account"},
	{"SBATCH_ARRAY_INX", "array"},
	{"SBATCH_CLUSTERS", "clusters"},
	{"SBATCH_EXCLUSIVE", "exclusive"},
	{"SBATCH_EXPORT", "export"},
	{"SBATCH_GPUS", "gpus"},
	{"SBATCH_GPUS_PER_NODE", "gpus-per-node"},
	{"SBATCH_GPUS_PER_TASK", "gpus-per-task"},
	{"SBATCH_GRES", "gres"},
	{"SBATCH_JOB_NAME", "job-name"},
	{"SBATCH_MEM_PER_CPU", "mem-per-cpu"},
	{"SBATCH_MEM_PER_GPU", "mem-per-gpu"},
	{"SBATCH_MEM_PER_NODE", "mem"},
	{"SBATCH_NO_REQUEUE", "no-requeue"},
	{"SBATCH_PARTITION", "partition"},
	{"SBATCH_QOS", "qos"},
	{"SBATCH_REQUEUE", "requeue"},
	{"SBATCH_SIGNAL", "signal"},
	{"SBATCH_TIMELIMIT", "time"},
	{"SBATCH_WAIT", "wait"},
}

// sbatchRequest is a parsed sbatch invocation: the job to submit and how
// sbatch itself should behave.
type sbatchRequest struct {
	job      *loomv1.Job
	parsable bool
	wait     bool
	quiet    bool
	// testOnly is --test-only: check the job and say when it would start.
	testOnly bool
	// sharedExclusive is --exclusive=mcs or topo (Exclusive, not a bare
	// --exclusive): Slurm shares the job's nodes' CPUs and --test-only
	// counts its tasks' (1 processor for one task), where a bare
	// --exclusive counts the nodes' every CPU. --exclusive=user is not
	// Exclusive at all (ExclusiveUser), so it counts its tasks anyway.
	sharedExclusive bool
	// clusters is -M: the cluster to submit to, over LOOM_CLUSTER.
	clusters string
	// help, usage and version ask for text instead of a submission.
	help, usage, version bool
	// warnings are printed before submitting (ignored options).
	warnings []string
	// nodesWarning is Slurm's words for a node count lowered to the task
	// count (slurmspec.FitNodesToTasks), which sbatch, salloc and srun
	// print as "PROG: Warning: ..." unless -Q.
	nodesWarning string
	// refusal is slurmctld's reason for refusing the job, found here
	// (--cpus-per-gpu with --exclusive): sbatch says it as the
	// controller's answer, "Batch job submission failed: REASON" or, with
	// --test-only, "allocation failure: REASON", and sends nothing.
	refusal string
}

// sbatchState collects option values while the script's directives, the
// input environment variables and the command line are applied in turn;
// build turns it into a Job.
type sbatchState struct {
	prog      string
	now       time.Time
	cwd       string
	req       *sbatchRequest
	job       *loomv1.Job
	nodesSet  bool
	memPerCPU int64
	memPerGPU int64
	gpusPerT  int32
	// gres: the job's per-node GPU count is --gres=gpu:N's, the last of
	// --gres and --gpus-per-node given (Job.gres_gpus).
	gres bool
	// cpusPerGPU is --cpus-per-gpu (Job.cpus_per_gpu), checked against -c
	// and --exclusive as Slurm checks it once every option is read.
	cpusPerGPU int32
	// exclusiveNode is a bare --exclusive (not =user, =mcs or =topo).
	exclusiveNode bool
	wrap          string
	wrapSet       bool
	ignored       map[string]bool
	// dist is -m (Nodes "" when not given).
	dist slurmspec.Distribution
}

// ParseSbatch turns an sbatch command line (args, without the program
// name: options, then the script's path and its arguments) and the
// script's text into the Job to submit, exactly as sbatch would: the
// script's leading "#SBATCH" directives first, then sbatch's input
// environment variables (SBATCH_TIMELIMIT, ...), then the command line,
// each overriding the one before. env is the submitting environment: it
// gives the exported variables (--export), PWD (the submit directory) and
// LOOM_USER/USER. An unknown or malformed option is an *Error with
// Slurm's message. The job's cluster is not set. With --wrap, script is
// ignored.
func ParseSbatch(args []string, script []byte, env map[string]string) (*loomv1.Job, error) {
	req, err := parseSbatchAt(time.Now(), args, script, env)
	if err != nil {
		return nil, err
	}
	return req.job, nil
}

// parseSbatchAt is ParseSbatch with its clock (for --begin).
func parseSbatchAt(now time.Time, args []string, script []byte, env map[string]string) (*sbatchRequest, error) {
	const prog = "sbatch"
	p := &optParser{prog: prog, defs: sbatchOptions, stopAtFirst: true}
	cmdOpts, positional, err := p.parse(args)
	if err != nil {
		return nil, exit255(usage(prog, err))
	}
	st := &sbatchState{prog: prog, now: now, cwd: env["PWD"], req: &sbatchRequest{},
		job: &loomv1.Job{}, ignored: map[string]bool{}}
	st.req.job = st.job
	if st.cwd == "" {
		st.cwd = "/"
	}
	for _, o := range cmdOpts {
		switch o.key {
		case "help":
			st.req.help = true
		case "usage":
			st.req.usage = true
		case "version":
			st.req.version = true
		case "wrap":
			st.wrap, st.wrapSet = o.value, true
		}
	}
	if st.req.help || st.req.usage || st.req.version {
		return st.req, nil
	}

	scriptPath := ""
	var scriptArgs []string
	if len(positional) > 0 {
		if st.wrapSet {
			return nil, errorf(prog, "Script arguments are not permitted with the --wrap option.")
		}
		scriptPath, scriptArgs = positional[0], positional[1:]
	}
	body := string(script)
	if st.wrapSet {
		body = "#!/bin/sh\n# This script was created by sbatch --wrap.\n\n" + st.wrap + "\n"
	} else if err := checkScript(prog, script); err != nil {
		return nil, err
	}

	// 1. the script's directives.
	directives, err := scriptDirectives(prog, body)
	if err != nil {
		return nil, err
	}
	dp := &optParser{prog: prog, defs: sbatchOptions, stopAtFirst: true}
	dopts, rest, err := dp.parse(directives)
	if err != nil {
		return nil, exit255(usage(prog, err))
	}
	if len(rest) > 0 {
		return nil, errorf(prog, "Invalid directive found in batch script: %s", rest[0])
	}
	for _, o := range dopts {
		if err := st.apply(o, ""); err != nil {
			return nil, err
		}
	}
	// 2. the input environment variables.
	for _, e := range sbatchEnvOptions {
		v, ok := env[e.env]
		if !ok {
			continue
		}
		o := parsedOpt{key: e.opt, written: "--" + e.opt, value: v, hasValue: true}
		if d := findDef(sbatchOptions, e.opt); d != nil && d.arg == noArg {
			o.value, o.hasValue = "", false
		}
		if err := st.apply(o, e.env); err != nil {
			return nil, err
		}
	}
	// 3. the command line.
	for _, o := range cmdOpts {
		if err := st.apply(o, ""); err != nil {
			return nil, err
		}
	}
	if err := st.build(body, scriptPath, scriptArgs, env); err != nil {
		return nil, err
	}
	return st.req, nil
}

func findDef(defs []optDef, key string) *optDef {
	for i := range defs {
		if defs[i].key() == key {
			return &defs[i]
		}
	}
	return nil
}

// checkScript refuses what sbatch refuses before reading any directive.
func checkScript(prog string, script []byte) error {
	switch {
	case len(script) == 0:
		return errorf(prog, "Batch script is empty!")
	case len(bytes.TrimSpace(script)) == 0:
		return errorf(prog, "Batch script contains only whitespace!")
	case !bytes.HasPrefix(script, []byte("#!")):
		return &Error{Code: 1, Text: prog + ": error: This does not look like a batch script.  The first\n" +
			prog + ": error: line must start with #! followed by the path to an interpreter.\n" +
			prog + ": error: For instance: #!/bin/sh"}
	case bytes.Contains(script, []byte("\r\n")):
		return &Error{Code: 1, Text: prog + ": error: Batch script contains DOS line breaks (\\r\\n)\n" +
			prog + ": error: instead of expected UNIX line breaks (\\n)."}
	case bytes.IndexByte(script, 0) >= 0:
		return errorf(prog, "The Slurm controller does not allow scripts that contain a NULL character '\\0'.")
	}
	return nil
}

// scriptDirectives returns the arguments of the script's "#SBATCH" lines,
// read as sbatch reads them: only up to the first line that is neither
// blank nor a comment; words split on blanks, quotes group, a backslash
// escapes, and an unquoted '#' starts a comment.
func scriptDirectives(prog, body string) ([]string, error) {
	var out []string
	for n, line := range strings.Split(body, "\n") {
		rest, ok := strings.CutPrefix(line, "#SBATCH")
		if !ok {
			t := strings.TrimLeftFunc(line, unicode.IsSpace)
			if t == "" || strings.HasPrefix(t, "#") {
				continue
			}
			break
		}
		words, err := directiveWords(rest)
		if err != nil {
			return nil, errorf(prog, "script line %d: %v in [%s]", n+1, err, line)
		}
		out = append(out, words...)
	}
	return out, nil
}

// directiveWords splits the rest of a "#SBATCH" line into words.
func directiveWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord, escape := false, false
	var quote rune
	for _, r := range s {
		switch {
		case escape:
			cur.WriteRune(r)
			escape, inWord = false, true
		case r == '\\':
			escape, inWord = true, true
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '"' || r == '\'':
			quote, inWord = r, true
		case r == '#':
			if inWord {
				words = append(words, cur.String())
			}
			return words, nil
		case unicode.IsSpace(r):
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unmatched `%c`", quote)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// sbatchExits255 are the options whose bad values sbatch refuses with exit
// status 255, as Slurm 22.05's does (checked here: it parses them itself
// and exits -1), where other refusals exit 1.
var sbatchExits255 = map[string]bool{"mem": true, "mem-per-cpu": true, "mem-per-gpu": true, "begin": true, "signal": true}

// exit255 gives e the exit status sbatch and srun give an option they
// could not parse: 255 (see sbatchExits255).
func exit255(e *Error) *Error {
	e.Code = 255
	return e
}

// apply sets one option. from names the environment variable it came
// from, for messages ("" for the command line and the script).
func (st *sbatchState) apply(o parsedOpt, from string) error {
	j := st.job
	v := strings.TrimSpace(o.value)
	name := "--" + o.key
	bad := func(why error) error {
		e := invalid(st.prog, name, o.value, why)
		if from != "" {
			e.Text += " (from " + from + ")"
		}
		if sbatchExits255[o.key] {
			e.Code = 255
		}
		return e
	}
	switch o.key {
	case "help", "usage", "version", "verbose":
	case "quiet":
		st.req.quiet = true
	case "parsable":
		st.req.parsable = true
	case "wait":
		st.req.wait = true
	case "wrap":
		// handled before the directives
	case "test-only":
		st.req.testOnly = true
	case "account":
		j.Account = v
	case "array":
		if _, err := ParseArray(v); err != nil {
			return bad(err)
		}
		j.Array = v
	case "begin":
		t, err := ParseBegin(v, st.now)
		if err != nil {
			return bad(err)
		}
		j.BeginTime = timestamppb.New(t)
	case "chdir":
		if v == "" {
			return bad(errors.New("empty directory"))
		}
		j.WorkDir = v
	case "clusters":
		if strings.Contains(v, ",") {
			return bad(errors.New("Loom submits to one cluster at a time"))
		}
		st.req.clusters = v
	case "cpus-per-task":
		n, err := positiveInt(st.prog, name, o.value)
		if err != nil {
			return err
		}
		j.CpusPerTask = n
	case "cpus-per-gpu":
		n, err := positiveInt(st.prog, name, o.value)
		if err != nil {
			return err
		}
		st.cpusPerGPU = n
	case "dependency":
		if _, err := slurmspec.ParseDependency(v); err != nil {
			return bad(err)
		}
		j.Dependency = v
	case "error":
		j.ErrorPattern = v
	case "output":
		j.OutputPattern = v
	case "open-mode":
		m, err := slurmspec.ParseOpenMode(v)
		if err != nil {
			return bad(err)
		}
		j.OpenMode = m
	case "exclude":
		names, err := expandHosts(v)
		if err != nil {
			return bad(err)
		}
		j.Exclude = names
	case "nodelist":
		names, err := expandHosts(v)
		if err != nil {
			return bad(err)
		}
		j.Nodelist = names
	case "exclusive":
		switch strings.ToLower(v) {
		case "user":
			// Slurm's OverSubscribe=USER: the nodes are shared with the
			// same user's jobs only, and the job holds its tasks' CPUs.
			j.Exclusive, j.ExclusiveUser, st.exclusiveNode = false, true, false
		case "", "mcs", "topo":
			j.Exclusive, j.ExclusiveUser, st.exclusiveNode = true, false, v == ""
		default:
			return bad(errors.New("expected nothing, user, mcs or topo"))
		}
	case "export":
		if v == "" {
			return bad(errors.New("empty"))
		}
		j.Export = v
	case "gpus":
		typ, n, err := parseTypedCount(v)
		if err != nil {
			return bad(err)
		}
		j.Gpus, j.GpuType = n, typ
	case "gpus-per-node":
		typ, n, err := parseTypedCount(v)
		if err != nil {
			return bad(err)
		}
		j.GpusPerNode, j.GpuType, st.gres = n, typ, false
	case "gpus-per-task":
		typ, n, err := parseTypedCount(v)
		if err != nil {
			return bad(err)
		}
		st.gpusPerT, j.GpuType = n, typ
	case "gres":
		typ, n, err := parseGres(v)
		if err != nil {
			return bad(err)
		}
		j.GpusPerNode, j.GpuType, st.gres = n, typ, true
	case "hold":
		j.Hold = true
	case "nice":
		n, err := parseNice(o.value)
		if err != nil {
			return bad(err)
		}
		j.Nice = n
	case "job-name":
		j.DisplayName = o.value
	case "mem":
		mb, err := parseMem(v)
		if err != nil {
			return bad(err)
		}
		j.MemMb, st.memPerCPU, st.memPerGPU = mb, 0, 0
	case "mem-per-cpu":
		mb, err := parseMem(v)
		if err != nil {
			return bad(err)
		}
		st.memPerCPU, j.MemMb, st.memPerGPU = mb, 0, 0
	case "mem-per-gpu":
		mb, err := parseMem(v)
		if err != nil {
			return bad(err)
		}
		st.memPerGPU, j.MemMb, st.memPerCPU = mb, 0, 0
	case "nodes":
		n, most, err := parseNodeCount(v)
		if lo, _, _ := strings.Cut(v, "-"); err != nil && isDigits(lo) && strings.Trim(lo, "0") == "" {
			// A count of 0 parses as a count; Slurm's controller refuses
			// it (exit 1), not its option parser (255).
			if st.prog == "sbatch" {
				return errorf(st.prog, "Batch job submission failed: Node count specification invalid")
			}
			return errorf(st.prog, "Node count specification invalid")
		}
		if err != nil {
			return exit255(errorf(st.prog, "Invalid node count specification %q: %v", o.value, err))
		}
		j.NodeCount, j.MaxNodeCount, st.nodesSet = n, most, true
	case "no-requeue":
		f := false
		j.Requeue = &f
	case "requeue":
		t := true
		j.Requeue = &t
	case "retries":
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 32)
		if err != nil || n < 0 || n > slurmspec.MaxRetries {
			return errorf(st.prog, "Invalid --retries specification %q: expected 0 to %d", o.value, slurmspec.MaxRetries)
		}
		j.MaxRetries = int32(n)
	case "hang-timeout":
		secs, err := slurmspec.ParseHangTimeout(v)
		if err != nil {
			return bad(err)
		}
		j.HangTimeoutSeconds = secs
	case "checkpoint-dir":
		if v == "" {
			return bad(errors.New("empty directory"))
		}
		j.CheckpointDir = v
	case "ntasks":
		n, err := positiveInt(st.prog, name, o.value)
		if err != nil {
			return err
		}
		j.Ntasks = n
	case "ntasks-per-node":
		n, err := positiveInt(st.prog, name, o.value)
		if err != nil {
			return err
		}
		j.NtasksPerNode = n
	case "partition":
		// One partition or several (-p a,b: the job runs in the one that
		// starts it first), a repeat kept once.
		p, err := slurmspec.NormalizePartitions(v)
		if err != nil {
			return bad(err)
		}
		j.Partition = p
	case "qos":
		j.Qos = v
	case "signal":
		sig, err := slurmspec.ParseSignal(v)
		if err != nil {
			return bad(err)
		}
		j.Signal = sig.String()
	case "distribution":
		d, err := parseDistribution(v)
		if e, ok := err.(*Error); ok {
			e.Text = strings.ReplaceAll(e.Text, "srun: ", st.prog+": ")
			return e
		}
		st.dist = d
	case "time":
		secs, _, err := ParseTimeLimit(v)
		if err != nil {
			return exit255(errorf(st.prog, "Invalid --time specification %q: expected minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS or UNLIMITED", o.value))
		}
		j.TimeLimitSeconds = secs
	default:
		if !st.ignored[o.key] {
			st.ignored[o.key] = true
			st.req.warnings = append(st.req.warnings, fmt.Sprintf("--%s is not supported by Loom and is ignored", o.key))
		}
	}
	return nil
}

// positiveInt parses a count option, refusing as Slurm does.
func positiveInt(prog, name, s string) (int32, error) {
	v := strings.TrimSpace(s)
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil || n <= 0 {
		return 0, errorf(prog, "Invalid numeric value %q for %s.", s, name)
	}
	return int32(n), nil
}

// parseNodeCount parses --nodes: "N" or "MIN-MAX" ("MIN-" is MIN). most
// is the range's maximum when it is above the minimum, else 0 (none).
func parseNodeCount(s string) (n, most int32, err error) {
	lo, hi, isRange := strings.Cut(s, "-")
	v, err := strconv.ParseInt(lo, 10, 32)
	if err != nil || v < 1 || !isDigits(lo) {
		return 0, 0, fmt.Errorf("%q is not a node count of at least 1", lo)
	}
	if isRange && hi != "" {
		m, err := strconv.ParseInt(hi, 10, 32)
		if err != nil || !isDigits(hi) {
			return 0, 0, fmt.Errorf("%q is not a node count", hi)
		}
		if m < v {
			return 0, 0, fmt.Errorf("maximum %d is below minimum %d", m, v)
		}
		if m > v {
			most = int32(m)
		}
	}
	return int32(v), most, nil
}

// parseMem parses a memory size: a number with an optional K, M (the
// default), G or T suffix, into MiB (K rounds up).
func parseMem(s string) (int64, error) {
	if s == "" {
		return 0, errors.New("empty size")
	}
	num, mult, div := s, int64(1), int64(1)
	switch strings.ToUpper(s[len(s)-1:]) {
	case "K":
		num, div = s[:len(s)-1], 1024
	case "M":
		num = s[:len(s)-1]
	case "G":
		num, mult = s[:len(s)-1], 1024
	case "T":
		num, mult = s[:len(s)-1], 1024*1024
	}
	if !isDigits(num) {
		return 0, errors.New("expected a number with an optional K, M, G or T suffix")
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n > (1<<50)/mult {
		return 0, errors.New("size out of range")
	}
	return (n*mult + div - 1) / div, nil
}

// parseTypedCount parses "[type:]N" (--gpus, --gpus-per-node).
func parseTypedCount(s string) (string, int32, error) {
	typ, count := "", s
	if i := strings.LastIndex(s, ":"); i >= 0 {
		typ, count = s[:i], s[i+1:]
		if typ == "" || strings.Contains(typ, ":") {
			return "", 0, fmt.Errorf("expected [type:]count")
		}
	}
	n, err := strconv.ParseInt(count, 10, 32)
	if err != nil || n < 1 || !isDigits(count) {
		return "", 0, fmt.Errorf("count %q is not a positive number", count)
	}
	return typ, int32(n), nil
}

// parseGres parses --gres for GPUs: "gpu", "gpu:N", "gpu:TYPE",
// "gpu:TYPE:N" (also with a "gres/" prefix) or "none".
func parseGres(s string) (string, int32, error) {
	if strings.EqualFold(s, "none") {
		return "", 0, nil
	}
	items := splitList(s)
	if len(items) != 1 {
		return "", 0, errors.New("Loom schedules one generic resource, gpu")
	}
	f := strings.Split(strings.TrimPrefix(items[0], "gres/"), ":")
	if f[0] != "gpu" {
		return "", 0, fmt.Errorf("unknown generic resource %q (Loom knows gpu)", f[0])
	}
	count := func(c string) (int32, error) {
		if strings.HasPrefix(c, "-") && isDigits(c[1:]) {
			return 0, fmt.Errorf("count %q must not be negative", c)
		}
		n, err := strconv.ParseInt(c, 10, 32)
		if err != nil || n < 0 || !isDigits(c) {
			return 0, fmt.Errorf("count %q is not a number", c)
		}
		return int32(n), nil
	}
	switch len(f) {
	case 1:
		return "", 1, nil
	case 2:
		if isDigits(f[1]) || looksSigned(f[1]) {
			n, err := count(f[1])
			return "", n, err
		}
		if err := checkGresType(f[1]); err != nil {
			return "", 0, err
		}
		return f[1], 1, nil
	case 3:
		if err := checkGresType(f[1]); err != nil {
			return "", 0, err
		}
		n, err := count(f[2])
		return f[1], n, err
	}
	return "", 0, errors.New("expected gpu[:type][:count]")
}

// looksSigned reports whether s is a sign and digits ("-1", "+2"): a count
// given wrong, not a GPU type.
func looksSigned(s string) bool {
	return len(s) > 1 && (s[0] == '-' || s[0] == '+') && isDigits(s[1:])
}

// checkGresType checks a GPU type as gres.conf names them (a100,
// h100_80gb, 1g.10gb): letters, digits, '_', '.' and '-', not starting
// with '-' or '.', at most 64 characters.
func checkGresType(t string) error {
	if t == "" {
		return errors.New("empty type")
	}
	if len(t) > 64 {
		return fmt.Errorf("type %.20q... is longer than 64 characters", t)
	}
	for i, c := range t {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' ||
			(i > 0 && (c == '.' || c == '-'))
		if !ok {
			return fmt.Errorf("type %q: a GPU type has letters, digits, '_', '.' and '-' (not first)", t)
		}
	}
	return nil
}

// expandHosts expands a --nodelist/--exclude value.
func expandHosts(s string) ([]string, error) {
	if strings.Contains(s, "/") {
		return nil, errors.New("node list files are not supported by Loom; give a hostlist expression")
	}
	names, err := hostlist.Expand(s)
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, errors.New("no host names")
	}
	return names, nil
}

// build finishes the job: defaults, derived values, the environment per
// --export and the script (with its arguments).
func (st *sbatchState) build(body, scriptPath string, scriptArgs []string, env map[string]string) error {
	j := st.job
	if scriptPath != "" && !st.wrapSet {
		// Slurm's Command: the script as sbatch opened it.
		if !filepath.IsAbs(scriptPath) {
			scriptPath = filepath.Join(st.cwd, scriptPath)
		}
		j.ScriptPath = filepath.Clean(scriptPath)
	}
	if j.DisplayName == "" {
		switch {
		case st.wrapSet:
			j.DisplayName = "wrap"
		case scriptPath != "":
			j.DisplayName = filepath.Base(scriptPath)
		default:
			j.DisplayName = "sbatch"
		}
	}
	if len(scriptArgs) > 0 {
		s, err := withScriptArgs(body, scriptArgs)
		if err != nil {
			return errorf(st.prog, "%v", err)
		}
		body = s
	}
	j.Script = body
	j.SubmitDir = st.cwd
	switch {
	case j.WorkDir == "":
		j.WorkDir = st.cwd
	case !filepath.IsAbs(j.WorkDir):
		j.WorkDir = filepath.Join(st.cwd, j.WorkDir)
	}
	// Relative to the working directory, as --output is: what a user on a
	// login node means by "ckpt" (the API's own relative checkpoint_dir is
	// under the cluster's shared directory).
	if d := j.CheckpointDir; d != "" && !filepath.IsAbs(d) {
		j.CheckpointDir = filepath.Join(j.WorkDir, d)
	}
	if st.cpusPerGPU > 0 {
		// As Slurm 22.05's sbatch and srun (checked beside one), in
		// either order; its controller refuses it with a bare
		// --exclusive (not =user) at submission.
		if j.CpusPerTask > 0 {
			return &Error{Code: 1, Text: st.prog + ": error: --cpus-per-gpu is mutually exclusive with --cpus-per-task\n" +
				st.prog + ": error: Invalid generic resource (gres) specification"}
		}
		if st.exclusiveNode {
			st.req.refusal = "Requested node configuration is not available"
		}
		j.CpusPerGpu = st.cpusPerGPU
	}
	st.req.sharedExclusive = j.Exclusive && !st.exclusiveNode
	// More nodes than tasks: Slurm's option check lowers the count (the
	// gateway does the same for a request sent without this client); it
	// comes before --gpus-per-task, which Slurm's controller judges.
	if st.nodesSet || len(j.Nodelist) > 0 {
		if err := st.fitNodes(); err != nil {
			return err
		}
	}
	if st.gpusPerT > 0 {
		if err := st.gpusPerTask(); err != nil {
			return err
		}
	}
	if st.memPerCPU > 0 {
		// The minimum's memory; the scheduler sizes a wider width's by
		// its own CPUs from mem_per_cpu_mb (slurmspec.WidthMemMB, which
		// saturates where the product would wrap).
		j.MemPerCpuMb = st.memPerCPU
		j.MemMb = slurmspec.WidthMemMB(j, cpusPerNode(j))
	}
	if st.memPerGPU > 0 {
		g := j.GpusPerNode
		if g == 0 && j.Gpus > 0 {
			g = (j.Gpus + max(j.NodeCount, 1) - 1) / max(j.NodeCount, 1)
		}
		// The product is judged here, where --mem-per-gpu is still
		// known: past the gateway's bound (or wrapped) it would be
		// refused as a mem_mb the user never gave.
		perNode := int64(max(g, 1))
		if st.memPerGPU > slurmspec.MaxMemMB/perNode {
			return errorf(st.prog, "--mem-per-gpu: %d MiB a GPU × %d GPUs a node is more than %d MiB, the most Loom takes",
				st.memPerGPU, perNode, int64(slurmspec.MaxMemMB))
		}
		j.MemMb = st.memPerGPU * perNode
	}
	user := env["LOOM_USER"]
	if user == "" {
		user = env["USER"]
	}
	j.User = user
	exported, spec, err := exportEnv(j.Export, env)
	if err != nil {
		return invalid(st.prog, "--export", j.Export, err)
	}
	j.Export, j.Env = spec, exported
	if st.dist.Nodes == "arbitrary" && len(j.Nodelist) == 0 {
		return &Error{Code: 1, Text: st.prog + ": error: With Arbitrary distribution you need to specify a nodelist or hostfile with the -w option"}
	}
	sbatchDistEnv(j, st.dist)
	// The last of --gres and --gpus-per-node given says which it was.
	j.GresGpus = st.gres && j.GetGpusPerNode() > 0
	return nil
}

// sbatchDistEnv puts -m into the job's environment as Slurm 22.05's sbatch
// does, whatever --export says (measured: -m cyclic:block,pack
// --export=NONE has SLURM_DISTRIBUTION=cyclic:block,pack; plane=2 is
// SLURM_DISTRIBUTION=plane with SLURM_DIST_PLANESIZE=2), so that the job's
// sruns take it as their default (srunStepInputVars). arbitrary is
// checked but not handed on: it places a step's tasks on -w's hosts, which
// a step of Loom's takes only from its own -w (checkDistribution).
func sbatchDistEnv(j *loomv1.Job, d slurmspec.Distribution) {
	if d.Nodes == "" || d.Nodes == "arbitrary" {
		return
	}
	if j.Env == nil {
		j.Env = map[string]string{}
	}
	j.Env["SLURM_DISTRIBUTION"] = d.String()
	delete(j.Env, "SLURM_DIST_PLANESIZE")
	if d.Nodes == "plane" {
		j.Env["SLURM_DIST_PLANESIZE"] = strconv.Itoa(int(d.PlaneSize))
	}
}

// fitNodes applies Slurm 22.05's option check of the node count against
// -w and -n (slurmspec.FitNodes, the gateway's rule too): -n1 -w n[1-2]
// is one node, n1, with Slurm's warning; -N1 -w n[1-2] is refused,
// "invalid number of nodes (-N 2-1)", exit 1, said with the warning that
// Slurm's check goes on to print (unless -Q: sbatch -Q drops it, measured
// beside Slurm). A job that fits keeps the warning in st.req.nodesWarning
// for the command to print.
func (st *sbatchState) fitNodes() error {
	j := st.job
	f := slurmspec.FitNodes(j.Ntasks, j.NodeCount, j.MaxNodeCount, j.Nodelist)
	if f.Refused {
		text := st.prog + ": error: " + f.RefusalText()
		if f.Warning != "" && !st.req.quiet {
			text += "\n" + st.prog + ": Warning: " + f.Warning
		}
		return &Error{Code: 1, Text: text}
	}
	st.req.nodesWarning = f.Warning
	j.NodeCount, j.MaxNodeCount, j.Nodelist = f.Nodes, f.MaxNodes, f.Hosts
	return nil
}

// gpusPerTask sets the job's GPUs (and, where Slurm derives them, its
// tasks) from --gpus-per-task, as Slurm 22.05's controller does (checked
// beside it; _test_gres_cnt): --gpus must be a multiple of it and gives
// the task count (-n must agree); else -n or --ntasks-per-node times it;
// else an exact -N is a task a node. With none of them the tasks are not
// known: refused in Slurm's words, exit 1, as every other refusal of the
// GPU request.
func (st *sbatchState) gpusPerTask() error {
	j, g := st.job, st.gpusPerT
	j.GpusPerTask = g
	refuse := func(why string) error {
		return &Error{Code: 1, Text: st.prog + ": error: Failed to validate job spec" + why + "\n" +
			st.prog + ": error: Invalid generic resource (gres) specification"}
	}
	// GPUs for n tasks (or nodes' worth of tasks), in 64 bits: a count
	// past what a job may hold is refused here, naming the option, rather
	// than wrapped past an int32 into a count the gateway misreads.
	times := func(n int32, what string) (int32, error) {
		if p := int64(g) * int64(n); p <= slurmspec.MaxJobGPUs {
			return int32(p), nil
		}
		return 0, errorf(st.prog, "--gpus-per-task=%d times %d %s is more than the %d GPUs a job may have", g, n, what, slurmspec.MaxJobGPUs)
	}
	var err error
	exactNodes := st.nodesSet && (j.MaxNodeCount == 0 || j.MaxNodeCount == j.NodeCount)
	switch {
	case j.Gpus > 0:
		j.GpusGiven = true // exported beside --gpus-per-task (slurmspec.JobGPUEnv)
		if j.Gpus%g != 0 {
			return refuse(", --gpus not multiple of --gpus-per-task")
		}
		if tasks := j.Gpus / g; j.Ntasks == 0 {
			j.Ntasks = tasks
		} else if j.Ntasks != tasks {
			return refuse(". Based on --gpus and --gpus-per-task number of requested tasks differ from -n/--ntasks.")
		}
	case j.NtasksPerNode > 0:
		j.GpusPerNode, err = times(j.NtasksPerNode, "tasks per node")
	case j.Ntasks > 0:
		j.Gpus, err = times(j.Ntasks, "tasks")
	case exactNodes:
		j.Ntasks = j.NodeCount
		j.Gpus, err = times(j.NodeCount, "nodes")
	default:
		return refuse(". --gpus-per-task used without either --gpus or -n/--ntasks is not allowed.")
	}
	return err
}

// cpusPerNode estimates the CPUs a job takes on each node, for
// --mem-per-cpu: the most of any of its nodes (slurmspec.CPUsPerNode, GPUs
// times --cpus-per-gpu counted).
func cpusPerNode(j *loomv1.Job) int32 {
	n := max(j.NodeCount, 1)
	gpn := j.GpusPerNode
	if gpn == 0 && j.Gpus > 0 {
		gpn = (j.Gpus + n - 1) / n
	}
	return int32(min(slurmspec.CPUsPerNode(j.NtasksPerNode, j.Ntasks, j.CpusPerTask, int(n), gpn, j.CpusPerGpu), math.MaxInt32))
}

// exportEnv computes the job's environment per --export: ALL (the
// default) is the whole submitting environment; NONE only its SLURM_*
// variables; a list of NAME or NAME=value adds those to the SLURM_*
// variables, or to everything when it holds ALL. NONE in a list adds
// nothing (NONE,FOO=1 is FOO=1; ALL,NONE is ALL), as Slurm 22.05 takes
// it. Explicit values win over the environment's. It returns the
// normalised spec too.
// LOOM_TOKEN is never exported (see keptBack).
func exportEnv(spec string, env map[string]string) (map[string]string, string, error) {
	if spec == "" {
		spec = "ALL"
	}
	items := splitList(spec)
	out := map[string]string{}
	all := false
	for i, it := range items {
		switch strings.ToUpper(it) {
		case "ALL":
			all = true
			items[i] = "ALL"
		case "NONE":
			items[i] = "NONE"
		}
	}
	for k, v := range env {
		// A variable no process environment can be sent with (a name
		// with '-' or '.', say, which env(1) can make) stays behind
		// rather than failing the whole submission; exported bash
		// functions (BASH_FUNC_module%%) go, as Slurm's do.
		if (all || strings.HasPrefix(k, "SLURM_")) && slurmspec.ValidEnvName(k) && !keptBack[k] {
			out[k] = v
		}
	}
	for _, it := range items {
		if it == "ALL" || it == "NONE" {
			continue
		}
		k, v, hasValue := strings.Cut(it, "=")
		if !slurmspec.ValidEnvName(k) {
			return nil, "", fmt.Errorf("%q is not a variable name", k)
		}
		if keptBack[k] {
			continue
		}
		if hasValue {
			out[k] = v
		} else if ev, ok := env[k]; ok {
			out[k] = ev
		}
	}
	return out, strings.Join(items, ","), nil
}

// keptBack are the variables a job never gets from its submitter: the
// submitter's credential (LOOM_TOKEN: an API key, or their access token)
// would be kept in the job's record, seen by every agent it reaches, and
// run with should its node fail to get the job its own token. The job's
// node gives it its own, scoped to the job.
var keptBack = map[string]bool{"LOOM_TOKEN": true}

// shellInterpreters are the interpreters whose scripts Loom can hand
// arguments to (with a "set --" line).
var shellInterpreters = map[string]bool{"sh": true, "bash": true, "dash": true, "ksh": true, "zsh": true}

// withScriptArgs gives a shell script its arguments: a `set -- ARGS` line
// where its commands begin, after the leading comments and directives
// (Job.script has no argv of its own).
func withScriptArgs(body string, args []string) (string, error) {
	first, _, _ := strings.Cut(body, "\n")
	fields := strings.Fields(strings.TrimPrefix(first, "#!"))
	interp := ""
	if len(fields) > 0 {
		interp = filepath.Base(fields[0])
		if interp == "env" && len(fields) > 1 {
			interp = filepath.Base(fields[1])
		}
	}
	if !shellInterpreters[interp] {
		return "", fmt.Errorf("script arguments are supported for shell scripts only (#!/bin/sh, bash, ...), not %q", first)
	}
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	set := "set -- " + strings.Join(quoted, " ") + "\n"
	lines := strings.SplitAfter(body, "\n")
	var b strings.Builder
	inserted := false
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if !inserted && t != "" && !strings.HasPrefix(t, "#") {
			b.WriteString(set)
			inserted = true
		}
		b.WriteString(l)
	}
	if !inserted {
		if !strings.HasSuffix(body, "\n") {
			b.WriteString("\n")
		}
		b.WriteString(set)
	}
	return b.String(), nil
}

// sbatch is the sbatch command.
func (c *cmd) sbatch(ctx context.Context, args []string) error {
	// The first pass finds the script (or --wrap) and the informational
	// options, as sbatch's does.
	p := &optParser{prog: "sbatch", defs: sbatchOptions, stopAtFirst: true}
	opts, positional, err := p.parse(args)
	if err != nil {
		return exit255(usage("sbatch", err))
	}
	wrap := false
	for _, o := range opts {
		switch o.key {
		case "help":
			fmt.Fprint(c.stdout, sbatchHelp)
			return nil
		case "usage":
			fmt.Fprint(c.stdout, sbatchUsage)
			return nil
		case "version":
			return c.printVersion()
		case "wrap":
			wrap = true
		}
	}
	var script []byte
	if !wrap {
		if len(positional) > 0 {
			path := positional[0]
			if !filepath.IsAbs(path) {
				path = filepath.Join(c.env.Cwd, path)
			}
			script, err = os.ReadFile(path)
			if err != nil {
				return c.errorf("Unable to open file %s", positional[0])
			}
		} else if c.env.Stdin != nil {
			script, err = io.ReadAll(c.env.Stdin)
			if err != nil {
				return c.errorf("reading the batch script from standard input: %v", err)
			}
		}
	}
	req, err := parseSbatchAt(c.now, args, script, c.submitEnviron())
	if err != nil {
		return err
	}
	if !req.quiet {
		if req.nodesWarning != "" {
			fmt.Fprintf(c.stderr, "sbatch: Warning: %s\n", req.nodesWarning)
		}
		for _, w := range req.warnings {
			c.warnf("%s", w)
		}
	}
	if req.clusters != "" {
		c.env.Cluster = req.clusters
	}
	if req.refusal != "" {
		if req.testOnly {
			return &Error{Text: "allocation failure: " + req.refusal, Code: 1}
		}
		return c.errorf("Batch job submission failed: %s", req.refusal)
	}
	if req.testOnly {
		return c.testOnly(ctx, req.job, req.sharedExclusive)
	}
	job, err := c.submitJob(ctx, req.job, "Batch job submission failed")
	if err != nil {
		return err
	}
	id := job.GetJobId()
	if id == "" {
		id = shortName(job.GetName())
	}
	// -Q keeps the id to itself too, --parsable's included, as Slurm's. A
	// cluster named with -M (or SBATCH_CLUSTERS) follows the id, as Slurm
	// 22.05's sbatch names its working cluster: "12;a3u" with --parsable,
	// "Submitted batch job 12 on cluster a3u" without.
	onCluster := ""
	if req.clusters != "" {
		onCluster = shortName(c.clusterFilter())
	}
	switch {
	case req.quiet:
	case req.parsable && onCluster != "":
		fmt.Fprintf(c.stdout, "%s;%s\n", id, onCluster)
	case req.parsable:
		fmt.Fprintln(c.stdout, id)
	case onCluster != "":
		fmt.Fprintf(c.stdout, "Submitted batch job %s on cluster %s\n", id, onCluster)
	default:
		fmt.Fprintf(c.stdout, "Submitted batch job %s\n", id)
	}
	if req.wait {
		if job.GetArray() != "" {
			return c.waitArray(ctx, id)
		}
		return c.waitJob(ctx, id)
	}
	return nil
}

// submitEnviron is the environment sbatch's parser reads (its input
// variables, --export's values): the command's, with PWD its working
// directory and LOOM_USER its user.
func (c *cmd) submitEnviron() map[string]string {
	environ := make(map[string]string, len(c.env.Environ)+2)
	for k, v := range c.env.Environ {
		environ[k] = v
	}
	if c.env.Cwd != "" {
		environ["PWD"] = c.env.Cwd
	}
	if c.env.User != "" {
		environ["LOOM_USER"] = c.env.User
	}
	return environ
}

// submitJob submits j, a parsed batch job (sendJob); a refusal reads
// "what: ...", as Slurm's.
func (c *cmd) submitJob(ctx context.Context, j *loomv1.Job, what string) (*loomv1.Job, error) {
	job, err := c.sendJob(ctx, j, false)
	if st, _ := status.FromError(err); st.Code() == codes.InvalidArgument && strings.HasPrefix(st.Message(), "job.array: ") {
		// The server holds the MaxArraySize: Slurm's words first, then
		// which limit the spec passed, so the user knows what to change.
		return nil, c.errorf("%s: %s (%s)", what, slurmspec.MsgInvalidArray, st.Message())
	}
	if st, _ := status.FromError(err); st.Code() == codes.ResourceExhausted && strings.HasPrefix(st.Message(), msgPolicyViolation) {
		return nil, policyViolation(c, what, st.Message()) // sacctmgr.go
	}
	if st, _ := status.FromError(err); st.Code() == codes.InvalidArgument && strings.HasPrefix(st.Message(), "job.qos: "+msgInvalidQOS) {
		return nil, slurmRefusal(c, what, msgInvalidQOS, strings.TrimPrefix(st.Message(), "job.qos: "))
	}
	if st, _ := status.FromError(err); st.Code() == codes.InvalidArgument && strings.HasPrefix(st.Message(), "job.partition: "+slurmspec.MsgPartitionNotAvail) {
		// A DRAIN or INACTIVE partition: Slurm's line, then which.
		return nil, slurmRefusal(c, what, slurmspec.MsgPartitionNotAvail, strings.TrimPrefix(st.Message(), "job.partition: "))
	}
	if st, _ := status.FromError(err); st.Code() == codes.ResourceExhausted && strings.Contains(st.Message(), "message larger than max") {
		// gRPC's own refusal, before the gateway read the job: say what to
		// shorten (the gateway's limits on each part are in docs/slurm.md).
		return nil, c.errorf("%s: the job is larger than the gateway accepts in one request (%s): its batch script may be at most 256 KiB, and its exported environment bounded too; shorten them",
			what, st.Message())
	}
	if st, _ := status.FromError(err); st.Code() == codes.ResourceExhausted && isJobQuota(st.Message()) {
		// A job quota: Slurm's words for an association or QOS limit,
		// then which limit and its value.
		return nil, c.errorf("%s: %s (%s)", what, msgPolicyViolation, st.Message())
	}
	if err != nil {
		return nil, c.rpcError(what, err)
	}
	return job, nil
}

// sendJob sends j to the cluster the command means (clusterName), owned by
// the command's user and stamped with this host; validate asks the gateway
// to check it only (sbatch --test-only). The error is the gateway's.
func (c *cmd) sendJob(ctx context.Context, j *loomv1.Job, validate bool) (*loomv1.Job, error) {
	if c.env.User != "" {
		j.User = c.env.User
	}
	if host, err := os.Hostname(); err == nil {
		j.SubmitHost = host
	}
	cluster, err := c.clusterName(ctx)
	if err != nil {
		return nil, err
	}
	j.Cluster = cluster
	cctx, cancel := c.call(ctx)
	defer cancel()
	return c.jobsClient().SubmitJob(cctx, &loomv1.SubmitJobRequest{Parent: c.projectName(), Job: j, RequestId: requestID(), ValidateOnly: validate})
}

// isJobQuota reports whether a ResourceExhausted refusal of a submission is
// the gateway's MaxSubmitJobs or pending-jobs quota (not a rate limit).
func isJobQuota(msg string) bool {
	return strings.Contains(msg, "would exceed MaxSubmitJobs") || strings.Contains(msg, "pending jobs would exceed the quota")
}

// waitJob is sbatch --wait: it follows the job until it ends and exits as
// sbatch -W does: with the job's exit code, or 1 when it ended by a signal
// or without running to its end.
func (c *cmd) waitJob(ctx context.Context, id string) error {
	j, err := c.watchEnd(ctx, id)
	if err != nil {
		return err
	}
	return exitFromJob(j)
}

// watchEnd follows job id until it ends and returns it as it ended; an
// error when it cannot be followed.
func (c *cmd) watchEnd(ctx context.Context, id string) (*loomv1.Job, error) {
	for {
		stream, err := c.jobsClient().WatchJob(ctx, &loomv1.WatchJobRequest{Name: c.jobName(id)})
		if err != nil {
			return nil, c.rpcError("waiting for job "+id, err)
		}
		for {
			j, err := stream.Recv()
			if err != nil {
				if ctx.Err() != nil {
					return nil, c.errorf("waiting for job %s: %v", id, ctx.Err())
				}
				if errors.Is(err, io.EOF) || statusCodeRetryable(err) {
					break
				}
				return nil, c.rpcError("waiting for job "+id, err)
			}
			if j.GetState().Terminal() {
				return j, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, c.errorf("waiting for job %s: %v", id, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// waitArray is sbatch --wait of an array: it waits until no task of it is
// pending or running (watching the last that is, in turn) and exits as
// Slurm's does, with the highest exit status of any task (each as
// exitFromJob has it). An array whose tasks it cannot list (a job's own
// token lists only its job) is an error, not a success.
func (c *cmd) waitArray(ctx context.Context, id string) error {
	for {
		active, err := c.listJobs(ctx, &loomv1.ListJobsRequest{JobIds: []string{id}, ActiveOnly: true})
		if err != nil {
			return err
		}
		// The last task still active: tasks run roughly in id order, so
		// when it ends the others mostly have (a list per wait, not per
		// task).
		left := ""
		for _, j := range active {
			if !j.GetState().Terminal() {
				left = shortName(j.GetName())
			}
		}
		if left == "" {
			break
		}
		if _, err := c.watchEnd(ctx, left); err != nil {
			return err
		}
	}
	all, err := c.listJobs(ctx, &loomv1.ListJobsRequest{JobIds: []string{id}})
	if err != nil {
		return err
	}
	if len(all) == 0 {
		return c.errorf("waiting for array %s: its tasks cannot be listed here (a job's own token sees only its job)", id)
	}
	code := 0
	for _, j := range all {
		var e *Error
		if err := exitFromJob(j); errors.As(err, &e) {
			code = max(code, e.Code)
		}
	}
	if code != 0 {
		return &Error{Code: code}
	}
	return nil
}

// exitFromJob is the exit status sbatch --wait returns for an ended job.
// As Slurm's (sbatch's _job_wait reads the job's wait status), a job
// that ended by a signal, or ended otherwise than it would, is 1; but a
// job that never ran (cancelled while pending, held, or waiting on a
// dependency) has no status to report: 0, as Slurm gives.
func exitFromJob(j *loomv1.Job) error {
	status, sig := exitParts(j.GetExitCode(), j.ExitSignal)
	code := int(status)
	if sig > 0 {
		code = 1
	}
	switch j.GetState() {
	case loomv1.JobState_COMPLETED:
		if code == 0 {
			return nil
		}
	case loomv1.JobState_FAILED:
		if code == 0 {
			code = 1
		}
	default:
		if code == 0 && j.GetStartTime() == nil && len(j.GetRuns()) == 0 {
			return nil
		}
		if code == 0 {
			code = 1
		}
	}
	return &Error{Code: code}
}

// sortedKeys returns a map's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

const sbatchUsage = `Usage: sbatch [-N nnodes] [-n ntasks] [-c ncpus] [--mem=MB] [--gres=gpu[:type]:N]
              [-G [type:]N] [--gpus-per-node=[type:]N] [-t time] [-p partition]
              [-a array] [-d dependency] [-J jobname] [-o out] [-e err]
              [--requeue|--no-requeue] [--exclusive] [-q qos] [-A account]
              [-w hosts] [-x hosts] [-D dir] [--export=...] [--signal=...]
              [--begin=time] [-H] [--parsable] [-W] [-M cluster]
              [--retries=n] [--hang-timeout=time] [--checkpoint-dir=dir]
              [--wrap=command | script [args...]]
`

const sbatchHelp = `Usage: sbatch [OPTIONS(0)...] [ : [OPTIONS(N)...]] script(0) [args(0)...]

Parallel run options (as Loom runs them):
  -a, --array=indexes         job array index values (0-15:2,20%4)
  -A, --account=name          charge job to specified account
      --begin=time            defer job until HH:MM MM/DD/YY, now+1hour, ...
  -c, --cpus-per-task=ncpus   number of cpus required per task
      --cpus-per-gpu=n        number of CPUs required per allocated GPU
  -d, --dependency=type:jobid[:time] defer job until condition on jobid is satisfied
  -D, --chdir=directory       set working directory for batch script
  -e, --error=err             file for batch script's standard error
      --export[=names]        specify environment variables to export
  -H, --hold                  submit job in held state
  -J, --job-name=jobname      name of job
  -M, --clusters=name         cluster to submit to (overrides LOOM_CLUSTER)
  -m, --distribution=type     the job's steps' task distribution (SLURM_DISTRIBUTION)
  -N, --nodes=N               number of nodes on which to run (N = min[-max])
  -n, --ntasks=ntasks         number of tasks to run
      --ntasks-per-node=n     number of tasks to invoke on each node
  -o, --output=out            file for batch script's standard output
  -p, --partition=partition   partition requested
      --parsable              outputs only the jobid
  -q, --qos=qos               quality of service
  -Q, --quiet                 quiet mode (suppress informational messages)
      --requeue               if set, permit the job to be requeued
      --no-requeue            if set, do not permit the job to be requeued
      --retries=n             rerun the job up to n times when its program fails
                              (Loom; node failures do not count)
      --hang-timeout=time     end and requeue a run that makes no progress for
                              that long (Loom; 0: the cluster's default, off: never)
      --checkpoint-dir=dir    where the job's checkpoints go, as
                              $LOOM_CHECKPOINT_DIR (Loom; default
                              <shared dir>/checkpoints/<job id>)
      --signal=[B:]num[@time] send signal when time limit within time seconds
  -t, --time=minutes          time limit
  -W, --wait                  wait for completion of submitted job
      --wrap[=command string] wrap command string in a sh script and submit
      --exclusive             allocate nodes in exclusive mode

Constraint options:
      --mem=MB                minimum amount of real memory (K, M, G, T suffixes)
      --mem-per-cpu=MB        memory per allocated CPU
      --mem-per-gpu=MB        memory per allocated GPU
  -w, --nodelist=hosts...     request a specific list of hosts
  -x, --exclude=hosts...      exclude a specific list of hosts

GPU scheduling options:
  -G, --gpus=n                count of GPUs required for the job
      --gpus-per-node=n       number of GPUs required per allocated node
      --gpus-per-task=n       number of GPUs required per spawned task
      --gres=list             required generic resources (gpu[:type][:count])

Help options:
  -h, --help                  show this help message
  -u, --usage                 display brief usage message

Other options:
  -V, --version               output version information and exit

Other Slurm options are accepted and ignored, with a warning.
`

// parseNice is --nice[=adjustment] (and scontrol's Nice=): 100 without a
// value, as Slurm's; within ±2147483645.
func parseNice(v string) (int32, error) {
	if v == "" {
		return 100, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < -slurmspec.MaxNice || n > slurmspec.MaxNice {
		return 0, fmt.Errorf("nice %q: want a whole number between -%d and %d", v, slurmspec.MaxNice, slurmspec.MaxNice)
	}
	return int32(n), nil
}

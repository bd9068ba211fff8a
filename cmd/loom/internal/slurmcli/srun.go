package slurmcli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/term"

	"github.com/loom-ml/loom/libs/slurmspec"
)

var srunOptions = []optDef{
	{long: []string{"nodes"}, short: 'N', arg: requiredArg},
	{long: []string{"ntasks"}, short: 'n', arg: requiredArg},
	{long: []string{"ntasks-per-node"}, arg: requiredArg},
	{long: []string{"cpus-per-task"}, short: 'c', arg: requiredArg},
	// Outside a job, as sbatch's; for a step inside one, accepted: the
	// step's CPUs are its tasks' (-c).
	{long: []string{"cpus-per-gpu"}, arg: requiredArg},
	{long: []string{"label"}, short: 'l', arg: noArg},
	{long: []string{"chdir"}, short: 'D', arg: requiredArg},
	{long: []string{"export"}, arg: requiredArg},
	{long: []string{"help"}, short: 'h', arg: noArg},
	{long: []string{"usage"}, arg: noArg},
	{long: []string{"version"}, short: 'V', arg: noArg},
	{long: []string{"quiet"}, short: 'Q', arg: noArg},
	{long: []string{"verbose"}, short: 'v', arg: noArg},
	{long: []string{"unbuffered"}, short: 'u', arg: noArg},
	{long: []string{"kill-on-bad-exit"}, short: 'K', arg: optionalArg},
	// Inside an allocation, which of its nodes the step uses; outside, as
	// sbatch's.
	{long: []string{"nodelist"}, short: 'w', arg: requiredArg},
	{long: []string{"exclude"}, short: 'x', arg: requiredArg},
	{long: []string{"relative"}, short: 'r', arg: requiredArg},
	// Accepted and ignored: the step runs inside the job's allocation.
	{long: []string{"job-name"}, short: 'J', arg: requiredArg},
	{long: []string{"partition"}, short: 'p', arg: requiredArg},
	{long: []string{"time"}, short: 't', arg: requiredArg},
	{long: []string{"mem"}, arg: requiredArg},
	{long: []string{"mem-per-cpu"}, arg: requiredArg},
	// A step's GPUs (--gres=gpu:N is --gpus-per-node's), out of its
	// job's; outside a job, the allocation's too.
	{long: []string{"gres"}, arg: requiredArg},
	{long: []string{"gpus"}, short: 'G', arg: requiredArg},
	{long: []string{"gpus-per-node"}, arg: requiredArg},
	{long: []string{"gpus-per-task"}, arg: requiredArg},
	{long: []string{"begin"}, short: 'b', arg: requiredArg},
	{long: []string{"gpu-bind"}, arg: requiredArg},
	{long: []string{"cpu-bind"}, arg: requiredArg},
	{long: []string{"mpi"}, arg: requiredArg},
	// Slurm's step resources (docs/slurm.md "Step resources"): --exact
	// holds only the step's CPUs, --overlap none; --exclusive, for a step,
	// is --exact.
	{long: []string{"exclusive"}, arg: optionalArg},
	{long: []string{"exact"}, arg: noArg},
	{long: []string{"overlap"}, arg: noArg},
	{long: []string{"wait"}, short: 'W', arg: requiredArg},
	{long: []string{"distribution"}, short: 'm', arg: requiredArg},
	{long: []string{"account"}, short: 'A', arg: requiredArg},
	{long: []string{"qos"}, short: 'q', arg: requiredArg},
	{long: []string{"nice"}, arg: optionalArg},
	{long: []string{"hint"}, arg: requiredArg},
	{long: []string{"jobid"}, arg: requiredArg},
	{long: []string{"output"}, short: 'o', arg: requiredArg},
	{long: []string{"error"}, short: 'e', arg: requiredArg},
	{long: []string{"input"}, short: 'i', arg: requiredArg},
	{long: []string{"pty"}, arg: noArg},
}

// srun runs a command as a job step inside the allocation it is called
// from (SLURM_JOB_ID set), once per task, with SLURM_PROCID and
// SLURM_LOCALID: the scheduler starts it on the step's nodes, one or
// many, through the gateway (srunSteps). Outside an allocation it first
// asks for one (srunAlloc).
func (c *cmd) srun(ctx context.Context, args []string) error {
	p := &optParser{prog: "srun", defs: srunOptions, stopAtFirst: true}
	opts, command, err := p.parse(args)
	if err != nil {
		return exit255(usage("srun", err))
	}
	env := c.env.Environ
	ntasks, nodes, perNode, cpt, cpusPerGPU := 0, 0, 0, 0, 0
	ntasksEnv := false // -n is the environment's (SLURM_NTASKS), not the command line's
	nodesSet := false  // -N given on the command line
	nodesMax := 0      // -N MIN-MAX's maximum (0: no range)
	label, killBad, quiet, verbose := false, false, false, false
	chdir := ""
	export := ""
	jobID := ""
	inputOpt, outputOpt, errorOpt := "", "", ""
	gpusOpt, gpusSet := "", false // --gpus/-G, judged for the step (srunInJob)
	gpusPerNode := int32(0)       // --gpus-per-node, --gres=gpu:N (the last given)
	noGPUs := false               // a GPU option asked none (stepRequest.noGPUs)
	var gpnErr error              // theirs, for a step (outside a job sbatch's parser judges them)
	gpusPerTask, noGPUBind := int32(0), false
	pty := false
	exact, overlap := false, false
	var nodelist, exclude []string
	relative := int32(0)
	var dist slurmspec.Distribution
	distOpt := ""
	// The job's defaults (srunEnvOptions) come first, so that the command
	// line, read after them, wins, as in Slurm.
	envOpts := srunEnvOptions(env)
	for _, o := range append(envOpts, opts...) {
		switch o.key {
		case "help", "usage":
			fmt.Fprint(c.stdout, srunUsage)
			return nil
		case "version":
			return c.printVersion()
		case "nodes":
			n, most, err := parseNodeCount(o.value)
			if err != nil {
				return exit255(c.errorf("Invalid node count specification %q: %v", o.value, err))
			}
			nodes, nodesMax, nodesSet = int(n), int(most), true
		case "ntasks", "ntasks-per-node", "cpus-per-task":
			n, err := positiveInt("srun", "--"+o.key, o.value)
			if err != nil {
				return err
			}
			switch o.key {
			case "ntasks":
				ntasks, ntasksEnv = int(n), o.written != "" && !strings.HasPrefix(o.written, "-")
			case "ntasks-per-node":
				perNode = int(n)
			default:
				cpt = int(n)
			}
		case "cpus-per-gpu":
			n, err := positiveInt("srun", "--cpus-per-gpu", o.value)
			if err != nil {
				return err
			}
			cpusPerGPU = int(n)
		case "gpus":
			gpusOpt, gpusSet = o.value, true
		case "gpus-per-node":
			_, n, err := parseTypedCount(o.value)
			if o.value[strings.LastIndex(o.value, ":")+1:] == "0" {
				n, err = 0, nil // none, as --gpus=0
			}
			gpnErr = nil
			if err != nil || n > slurmspec.MaxJobGPUs {
				gpnErr = fmt.Errorf("--gpus-per-node=%s: want a count of GPUs, at most %d", o.value, slurmspec.MaxJobGPUs)
			}
			gpusPerNode, noGPUs = n, n == 0
		case "gres":
			_, n, err := parseGres(o.value)
			gpnErr = nil
			if err != nil || n > slurmspec.MaxJobGPUs {
				gpnErr = fmt.Errorf("--gres=%s: want gpu[:TYPE][:N] (N at most %d) or none", o.value, slurmspec.MaxJobGPUs)
			}
			gpusPerNode, noGPUs = n, err == nil && n == 0
			if noGPUs {
				// --gres=none (or gpu:0) drops the job's
				// SLURM_GPUS_PER_TASK too: measured beside Slurm
				// 22.05, such a step of a --gpus-per-task job
				// sees no GPU.
				gpusPerTask = 0
			}
		case "label":
			label = true
		case "verbose":
			verbose = true
		case "kill-on-bad-exit":
			killBad = o.value != "0"
		case "chdir":
			chdir = o.value
		case "export":
			export = o.value
		case "gpus-per-task":
			_, n, err := parseTypedCount(o.value)
			if err != nil || n > slurmspec.MaxGPUsPerTask {
				return exit255(usage("srun", fmt.Errorf("--gpus-per-task=%s: want a count of GPUs, at most %d", o.value, slurmspec.MaxGPUsPerTask)))
			}
			gpusPerTask = n
		case "gpu-bind":
			// none: every task sees the step's GPUs, which still number
			// --gpus-per-task a task; Loom's binding otherwise is
			// Slurm's default (each task its own, in order), whatever
			// the option names.
			noGPUBind = strings.EqualFold(o.value, "none")
		case "output":
			outputOpt = o.value
		case "error":
			errorOpt = o.value
		case "input":
			inputOpt = o.value
		case "jobid":
			jobID = o.value
		case "pty":
			pty = true
		case "exact", "exclusive":
			exact = true
		case "overlap":
			overlap = true
		case "nodelist", "exclude":
			names, err := expandHosts(o.value)
			if err != nil {
				return exit255(c.errorf("Invalid --%s %q: %v", o.key, o.value, err))
			}
			if o.key == "nodelist" {
				nodelist = names
			} else {
				exclude = names
			}
		case "distribution":
			d, err := parseDistribution(o.value)
			if err != nil {
				return err
			}
			dist, distOpt = d, o.value
		case "relative":
			n, err := strconv.ParseInt(o.value, 10, 32)
			if err != nil || n < 0 {
				return exit255(c.errorf("Invalid --relative %q: want a node index of the allocation, from 0", o.value))
			}
			relative = int32(n)
		case "quiet":
			quiet = true
		}
	}
	// More nodes than tasks: lowered as Slurm's srun does, for a step and
	// for an allocation of its own alike (salloc and sbatch share the rule).
	// Outside a job the allocation's check says it (srunAlloc), as it
	// counts -w's hosts too (slurmspec.FitNodes).
	outside := jobID == "" && env["SLURM_JOB_ID"] == ""
	if gpnErr != nil && !outside {
		return exit255(usage("srun", gpnErr))
	}
	if n, most, lowered := slurmspec.FitNodesToTasks(int32(ntasks), int32(nodes), int32(nodesMax)); nodes > 0 {
		if lowered && !quiet && !outside {
			fmt.Fprintf(c.stderr, "srun: Warning: %s\n", slurmspec.NodesForTasksWarning(int32(ntasks), int32(nodes)))
		}
		nodes, nodesMax = int(n), int(most)
	}
	if cpusPerGPU > 0 && cpt > 0 {
		// As Slurm 22.05's srun, in a job or not, in either order.
		return &Error{Code: 1, Text: "srun: error: --cpus-per-gpu is mutually exclusive with --cpus-per-task\n" +
			"srun: error: Invalid generic resource (gres) specification"}
	}
	if len(command) == 0 {
		return c.errorf("No command given to execute.")
	}
	stepNodes := nodes
	if stepNodes == 0 && jobID == "" && env["SLURM_NNODES"] == "1" {
		stepNodes = 1 // a step of a one-node allocation
	}
	if err := c.checkDistribution(dist, distOpt, stepNodes, ntasks, len(nodelist) > 0); err != nil {
		return err
	}
	req := stepRequest{command: command, nodes: int32(nodes), ntasks: int32(ntasks), perNode: int32(perNode), cpt: int32(cpt),
		killOnBadExit: killBad, label: label, exact: exact, overlap: overlap, distribution: dist.Spec(), verbose: verbose}
	if err := c.stepInput(&req, inputOpt); err != nil {
		return err
	}
	if pty {
		c.stepTerminal(&req, inputOpt)
	}
	req.output, req.errorTo, req.gpusPerTask = outputOpt, errorOpt, gpusPerTask
	req.gpusOpt, req.gpusSet, req.gpusPerNode, req.noGPUs = gpusOpt, gpusSet, gpusPerNode, noGPUs
	if nodes > 0 && len(nodelist) > nodes {
		// As Slurm's srun: the first of them, said on stderr.
		fmt.Fprintf(c.stderr, "srun: error: Required nodelist includes more nodes than permitted by max-node count (%d > %d). Eliminating nodes from the nodelist.\n", len(nodelist), nodes)
		nodelist = nodelist[:nodes]
	}
	req.nodelist, req.exclude, req.relative = nodelist, exclude, relative
	req.cpusPerGPU = int32(cpusPerGPU)
	if cpusPerGPU == 0 {
		// As Slurm's srun, the job's (sbatch --cpus-per-gpu) is the
		// step's default; with -c too, unlike the option (checked above).
		if n, err := strconv.ParseInt(env["SLURM_CPUS_PER_GPU"], 10, 32); err == nil && n > 0 && n <= slurmspec.MaxCPUsPerGPU {
			req.cpusPerGPU = int32(n)
		}
	}
	req.gpuBindNone = noGPUBind
	if f, ok := req.stdin.(*os.File); ok && req.stdin != c.env.Stdin {
		defer f.Close() // -i FILE
	}
	if jobID != "" && jobID != env["SLURM_JOB_ID"] {
		// A step in a job of the caller's own, from outside it (srun
		// --jobid): the job must run, and the step is the scheduler's.
		if _, _, err := parseJobID(jobID); err != nil {
			return c.errorf("Invalid job id: %s", jobID)
		}
		if c.notHere(ctx, jobID) {
			// Slurm's srun asks its own cluster's controller, which does
			// not know another cluster's job (as scontrol and scancel).
			return c.errorf("Unable to confirm allocation for job %s: Invalid job id specified", jobID)
		}
		req.jobID = jobID
		return c.srunInJob(ctx, req, export, chdir)
	}
	if env["SLURM_JOB_ID"] == "" {
		if nodesMax > 0 {
			// The job takes what the range gets it (the scheduler's
			// choice), and the step runs on all of it, as Slurm's.
			req.nodes = 0
		}
		return c.srunAlloc(ctx, opts, req, export, chdir)
	}
	allocNodes, _ := strconv.Atoi(env["SLURM_NNODES"])
	if allocNodes == 0 {
		allocNodes, _ = strconv.Atoi(env["SLURM_JOB_NUM_NODES"])
	}
	if env["SLURM_JOB_NODELIST"] == "" || allocNodes == 0 {
		return c.errorf("SLURM_JOB_NODELIST and SLURM_NNODES are not set: srun must run inside a Loom job")
	}
	if nodes > allocNodes {
		return c.errorf("Only allocated %d nodes asked for %d", allocNodes, nodes)
	}
	if ntasksEnv && perNode == 0 {
		// The job's --ntasks-per-node beside its task count, both
		// the step's defaults, so that the rule below weighs them.
		if n, err := strconv.Atoi(env["SLURM_NTASKS_PER_NODE"]); err == nil && n > 0 && n <= slurmspec.MaxTasksPerNode {
			perNode = n
		}
	}
	if perNode > 0 && ntasks > 0 && (ntasksEnv || nodesSet) {
		// Slurm 22.05's srun, measured: a task count that is not
		// --ntasks-per-node times the nodes wins, said on stderr, when
		// the count is the job's (SLURM_NTASKS) or -N names the nodes
		// (-N1 -n2 --ntasks-per-node=1: two tasks on one node); -n with
		// --ntasks-per-node alone keeps both, the latter a bound.
		n := nodes
		if n == 0 {
			n = allocNodes
		}
		if ntasks != perNode*n {
			if !quiet {
				fmt.Fprintf(c.stderr, "srun: Warning: can't honor --ntasks-per-node set to %d which doesn't match the requested tasks %d with the number of requested nodes %d. Ignoring --ntasks-per-node.\n", perNode, ntasks, n)
			}
			perNode = 0
		}
		req.perNode = int32(perNode)
	}
	if nodesMax > 0 {
		// A step's range takes as much of the allocation as it may,
		// no more nodes than tasks.
		most := min(nodesMax, allocNodes)
		if ntasks > 0 {
			most = max(min(most, ntasks), nodes)
		}
		req.nodes = int32(most)
	}
	// Every step is the scheduler's, as in Slurm: a job step in sacct,
	// SLURM_STEP_ID counting up, scancel JOB.STEP, its input forwarded.
	req.jobID = env["SLURM_JOB_ID"]
	return c.srunInJob(ctx, req, export, chdir)
}

// srunStepInputVars are the input variables (srun(1) "INPUT ENVIRONMENT
// VARIABLES") that Slurm's srun takes as the defaults of a step's options,
// which the job's batch script or salloc shell has from its own options
// (sbatch --gpus-per-node=2 is SLURM_GPUS_PER_NODE=2, and its steps get
// two GPUs a node as if each srun had said so; -m plane=N is
// SLURM_DISTRIBUTION=plane with SLURM_DIST_PLANESIZE=N). Measured beside Slurm 22.05:
// the job's --gpus-per-node, -m and --gpus-per-task reach a bare srun's
// step; its -c does not (SLURM_CPUS_PER_TASK is not one of 22.05's: a step
// without -c has one CPU a task). SLURM_GPUS, SLURM_CPUS_PER_GPU and
// SLURM_NTASKS_PER_NODE are read where their rule differs from an option's
// (stepGRES, srun, srunInJob); outside a job srunInputVars are the
// allocation's.
var srunStepInputVars = []struct {
	env, opt string
	// valid says whether the variable's value is one the option takes; a
	// value it does not is ignored, as the job never sets one.
	valid func(string) bool
}{
	{"SLURM_GPUS_PER_NODE", "gpus-per-node", func(v string) bool {
		_, n, err := parseTypedCount(v)
		return err == nil && n <= slurmspec.MaxJobGPUs
	}},
	{"SLURM_GPUS_PER_TASK", "gpus-per-task", func(v string) bool {
		_, n, err := parseTypedCount(v)
		return err == nil && n <= slurmspec.MaxGPUsPerTask
	}},
	{"SLURM_DISTRIBUTION", "distribution", func(v string) bool {
		_, err := slurmspec.ParseDistribution(v)
		return err == nil
	}},
	// Set at all is set, as Slurm's srun reads them.
	{"SLURM_EXACT", "exact", nil},
	{"SLURM_OVERLAP", "overlap", nil},
	// The job's task count (sbatch -n, --ntasks-per-node) is the step's
	// -n, SLURM_NTASKS winning over SLURM_NPROCS as it is read after it.
	// Any value is the option's, set but empty included: measured beside
	// Slurm 22.05, SLURM_NTASKS=abc (or "") is refused as -n abc is
	// (`Invalid numeric value "abc" for --ntasks.`, exit 1), not ignored.
	{"SLURM_NPROCS", "ntasks", func(string) bool { return true }},
	{"SLURM_NTASKS", "ntasks", func(string) bool { return true }},
}

// srunEnvOptions returns the options that env's srunStepInputVars stand
// for, in the order srun's parser gives them, to be read before the
// command line's: the one place a step's option defaults come from the
// environment.
func srunEnvOptions(env map[string]string) []parsedOpt {
	var out []parsedOpt
	for _, v := range srunStepInputVars {
		val, set := env[v.env]
		if v.env == "SLURM_DISTRIBUTION" && val == "plane" {
			// plane=N is written back in two variables (sbatchDistEnv,
			// a step's environment).
			val += "=" + env["SLURM_DIST_PLANESIZE"]
		}
		if v.opt == "ntasks" {
			if !set {
				continue
			}
		} else if val == "" || (v.valid != nil && !v.valid(val)) {
			continue
		}
		o := parsedOpt{key: v.opt, written: v.env}
		if v.valid != nil {
			o.value, o.hasValue = val, true
		}
		out = append(out, o)
	}
	return out
}

// stepGRES sets a step's GPU request as Slurm 22.05's srun takes it:
// --gpus/-G ([type:]count; set says it was given), else the job's
// SLURM_GPUS (sbatch --gpus; gpusInherited), unless --gres=none said
// none. It is recorded on the step for scontrol show step's TresPerStep
// and is how many of the job's GPUs the step gets and holds (unless
// --gpus-per-task or --gpus-per-node says otherwise); the scheduler gives
// a step that asks for none the job's request (CreateJobStepRequest.no_gpus
// says when it asked for none on purpose: --gpus=0 here). A --gpus that is
// no count is Slurm's refusal of the step (exit 1).
func stepGRES(req *stepRequest, opt string, set bool, env map[string]string) error {
	if !set {
		if _, n, err := parseTypedCount(env["SLURM_GPUS"]); err == nil && n > 0 && n <= slurmspec.MaxJobGPUs && !req.noGPUs {
			req.gpus, req.gpusInherited = n, true
		}
		return nil
	}
	if opt[strings.LastIndex(opt, ":")+1:] == "0" {
		req.noGPUs = true
		return nil // none asked, as Slurm's srun --gpus=0 runs
	}
	_, n, err := parseTypedCount(opt)
	if err != nil || n > slurmspec.MaxJobGPUs {
		return &Error{Code: 1, Text: "srun: error: Step requested GRES (gpu:" + opt + ") not found in the job\n" +
			"srun: error: Unable to create step for job " + req.jobID + ": Invalid generic resource (gres) specification"}
	}
	req.gpus = n
	return nil
}

// stepInput sets which of a step's tasks read input, and from where, as
// srun's -i/--input says: "none"; "all" or a task's rank, srun's stdin;
// a file's name, that file, for every task. Without it, every task reads
// srun's stdin when that may carry input (hasInput), none otherwise.
func (c *cmd) stepInput(req *stepRequest, opt string) error {
	switch {
	case opt == "":
		if hasInput(c.env.Stdin) {
			req.input, req.stdin = slurmspec.InputAll, c.env.Stdin
		}
	case strings.EqualFold(opt, "none"):
	case opt == slurmspec.InputAll || (opt[0] >= '0' && opt[0] <= '9' && slurmspec.ParseInput(opt, 0) == nil):
		req.input, req.stdin = opt, c.env.Stdin
		if req.stdin == nil {
			req.stdin = strings.NewReader("")
		}
	case strings.Contains(opt, "%"):
		return c.errorf("--input=%s: file name patterns are not supported by Loom's srun; name one file, a task's rank, all or none", opt)
	default:
		name := opt
		if !filepath.IsAbs(name) {
			name = filepath.Join(c.env.Cwd, name)
		}
		f, err := os.Open(name)
		if err != nil {
			return c.errorf("--input: %v", err)
		}
		req.input, req.stdin = slurmspec.InputAll, f
	}
	return nil
}

// stepTerminal makes task 0 of the step run in a terminal (--pty) that
// srun's own stands for: its size, and its input typed into it. As Slurm's,
// srun whose stdin is no terminal says so and runs the step without one.
func (c *cmd) stepTerminal(req *stepRequest, inputOpt string) {
	f, ok := c.env.Stdin.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		fmt.Fprintln(c.stderr, "srun: error: Not using a pseudo-terminal, disregarding --pty option")
		return
	}
	if inputOpt != "" && inputOpt != "0" {
		fmt.Fprintf(c.stderr, "srun: error: --input=%s: with --pty only task 0 reads input\n", inputOpt)
	}
	req.pty, req.input, req.stdin = true, "0", f
	if cols, rows, err := term.GetSize(int(f.Fd())); err == nil {
		req.ptyRows, req.ptyCols = int32(min(rows, slurmspec.MaxTermSize)), int32(min(cols, slurmspec.MaxTermSize))
	}
}

// hasInput reports whether r, srun's stdin, may carry input for the tasks: a
// pipe or a file, not a terminal or /dev/null (a batch script's), and not
// nothing.
func hasInput(r io.Reader) bool {
	if r == nil {
		return false
	}
	f, ok := r.(*os.File)
	if !ok {
		return true
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice == 0
}

// lockedWriter serialises writes from several tasks.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// labelWriter prefixes each whole line with the task's rank (srun -l).
type labelWriter struct {
	prefix string
	w      io.Writer
	buf    []byte
}

func (l *labelWriter) Write(p []byte) (int, error) {
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		if _, err := l.w.Write(append([]byte(l.prefix), l.buf[:i+1]...)); err != nil {
			return 0, err
		}
		l.buf = l.buf[i+1:]
	}
}

// flush writes a last line without its newline.
func (l *labelWriter) flush() {
	if len(l.buf) > 0 {
		_, _ = l.w.Write(append(append([]byte(l.prefix), l.buf...), '\n'))
		l.buf = nil
	}
}

// srunInJob completes a step request from srun's environment
// (--export, the working directory, SLURM_NTASKS_PER_NODE, the GPU request:
// stepGRES) and runs it: the one path of a step in the caller's job, in
// one named by --jobid and in the allocation srun made itself (srunAlloc),
// so that each records the same request (srun --gpus=2 outside a job is
// TresPerStep=cpu:1,gres:gpu:2 as inside one, measured beside Slurm 22.05).
func (c *cmd) srunInJob(ctx context.Context, req stepRequest, export, chdir string) error {
	env := c.env.Environ
	if err := stepGRES(&req, req.gpusOpt, req.gpusSet, env); err != nil {
		return err
	}
	if req.perNode == 0 && req.ntasks == 0 && env["SLURM_NTASKS_PER_NODE"] != "" {
		if n, err := strconv.Atoi(env["SLURM_NTASKS_PER_NODE"]); err == nil && n > 0 {
			req.perNode = int32(n)
		}
	}
	base, err := exportedTaskEnv(export, env)
	if err != nil {
		return err
	}
	// Set per node and per task by the scheduler and the agents.
	for _, k := range []string{"SLURM_PROCID", "SLURM_LOCALID", "PMI_RANK", "PMI_SIZE", "SLURM_GTIDS", "LOOM_STEP_ID", "PWD", "OLDPWD"} {
		delete(base, k)
	}
	req.env = base
	req.dir = c.env.Cwd
	if chdir != "" {
		if filepath.IsAbs(chdir) {
			req.dir = chdir
		} else {
			req.dir = filepath.Join(req.dir, chdir)
		}
	}
	return c.srunSteps(ctx, req)
}

const srunUsage = `Usage: srun [-N nnodes] [-n ntasks] [--ntasks-per-node=n] [-c ncpus] [-l]
            [-K] [-D path] [-i all|none|RANK|FILE] [--pty] [--export=...]
            [--exact] [--overlap] executable [args...]
Inside a job's allocation (SLURM_JOB_ID set) srun starts a job step: its
tasks, once per task, with SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID and
SLURM_STEP_* set. The scheduler starts them on the step's nodes and their
output is copied here; srun's stdin is forwarded to every task (-i RANK: one
task's, -i none: none, -i FILE: FILE instead); with --pty, from a terminal,
task 0 runs in a terminal of its own that yours stands for (srun --pty bash
for a shell on a node). A step holds every CPU of the job on its nodes, only
its own with --exact (or -c), none with --overlap; one that finds them held
waits for them. -G/--gpus, --gpus-per-node and --gres=gpu:N give the step
that many of the job's GPUs (per node for the last two), which it holds and
its tasks all see; --gpus-per-task gives each task its own; without them the
step takes the job's GPU request (its --gpus-per-task, --gpus-per-node,
--gres or --gpus) and holds those GPUs, as Slurm's; --gres=none (or
--gpus=0) gives it none. --cpus-per-gpu (and the job's SLURM_CPUS_PER_GPU)
are recorded for scontrol show step. Outside a job srun first asks
for an allocation
(-N, -n, -p, -t, --gres, --cpus-per-gpu, ... as sbatch's), waits for it, runs the step in it
and ends the job as the step ended.
`

// exportedTaskEnv is the environment srun's tasks start from under --export: with
// NONE only the SLURM_* variables, else what exportEnv makes of the option.
// As Slurm 22.05's srun, a list that starts with NONE is NONE, the rest
// set aside (NONE,FOO=1 gives no FOO; sbatch's gives FOO), while a NONE
// later in the list adds nothing (ALL,NONE is ALL).
func exportedTaskEnv(export string, env map[string]string) (map[string]string, error) {
	if first, _, _ := strings.Cut(export, ","); strings.EqualFold(strings.TrimSpace(first), "NONE") {
		base := map[string]string{}
		for k, v := range env {
			if strings.HasPrefix(k, "SLURM_") {
				base[k] = v
			}
		}
		return base, nil
	}
	exp, _, err := exportEnv(export, env)
	if err != nil {
		return nil, invalid("srun", "--export", export, err)
	}
	return exp, nil
}

// parseDistribution checks srun's -m/--distribution as Slurm 22.05's
// srun does (compared beside one; slurmspec.ParseDistribution's grammar)
// and returns it, or Slurm's refusal, exit 255.
func parseDistribution(v string) (slurmspec.Distribution, error) {
	invalid := &Error{Code: 255, Text: "srun: error: Invalid --distribution specification"}
	d, err := slurmspec.ParseDistribution(v)
	switch {
	case errors.Is(err, slurmspec.ErrPlaneSize):
		return d, &Error{Code: 255, Text: "srun: error: Invalid plane size or size not specified\n" + invalid.Text}
	case err != nil || v == "":
		return d, invalid
	}
	return d, nil
}

// checkDistribution refuses a step's distribution d (as given in opt) that
// Loom cannot honour. block, cyclic and plane=N are laid out as Slurm's
// (slurmspec.TaskRanks, in the scheduler). arbitrary places task i on -w's
// i-th host, which Loom does not carry to the scheduler: it is taken only
// where its layout is block's all the same (one node, one task, or no more
// tasks than nodes) and refused elsewhere, rather than giving other ranks
// on each node than Slurm gives without a word. arbitrary without -w is
// Slurm's refusal first.
func (c *cmd) checkDistribution(d slurmspec.Distribution, opt string, nodes, ntasks int, nodelist bool) error {
	if d.Nodes != "arbitrary" {
		return nil
	}
	if !nodelist {
		return c.errorf("With Arbitrary distribution you need to specify a nodelist or hostfile with the -w option")
	}
	if nodes == 1 || ntasks == 1 || (nodes > 0 && ntasks > 0 && ntasks <= nodes) {
		return nil
	}
	return c.errorf("--distribution=%s: Loom does not place tasks by -w's host list (arbitrary) on more than one node "+
		"with more tasks than nodes; use -m block, cyclic or plane=N", opt)
}

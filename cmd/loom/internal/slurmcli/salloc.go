package slurmcli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/loom-ml/loom/libs/hostlist"
	"github.com/loom-ml/loom/libs/proc"
	"github.com/loom-ml/loom/libs/slurmspec"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// sallocRefused are sbatch's options that are not salloc's: an allocation
// has no batch script to write output for, wrap, or array out.
var sallocRefused = map[string]bool{
	"array": true, "wrap": true, "output": true, "error": true, "open-mode": true, "parsable": true, "wait": true,
}

// allocWatch is how often salloc looks whether its allocation still runs
// while its command does.
var allocWatch = time.Second

// salloc is Slurm's salloc: it asks for an allocation with sbatch's options
// (a job whose batch script only holds the nodes, as srun's outside a job),
// waits for it, runs the command here — by default the user's shell — with
// the allocation's SLURM_* variables, so that srun inside it runs steps on
// the allocated nodes, and relinquishes the allocation when the command
// exits: the job ends COMPLETED when it exited 0, FAILED otherwise, and
// salloc exits as the command did. An allocation that ends first (its time
// limit, scancel, a node failure) takes the command down with SIGHUP, as
// Slurm's does. Interrupted while waiting, it cancels the job; while the
// command runs, an interrupt is the command's to handle.
func (c *cmd) salloc(ctx context.Context, args []string) error {
	p := &optParser{prog: "salloc", defs: sbatchOptions, stopAtFirst: true}
	opts, command, err := p.parse(args)
	if err != nil {
		return exit255(usage("salloc", err))
	}
	quiet := false
	var sbatchArgs []string
	for _, o := range opts {
		switch {
		case o.key == "help" || o.key == "usage":
			fmt.Fprint(c.stdout, sallocUsage)
			return nil
		case o.key == "version":
			return c.printVersion()
		case o.key == "quiet":
			// salloc's own, not sbatch's: its node/task warning is
			// said whatever -Q, as Slurm's salloc says it.
			quiet = true
			continue
		case sallocRefused[o.key]:
			return exit255(&Error{Text: fmt.Sprintf("salloc: unrecognized option '%s'\nTry \"salloc --help\" for more information", o.written)})
		}
		opt := "--" + o.key
		if len(o.key) == 1 {
			opt = "-" + o.key
		}
		if o.hasValue {
			opt += "=" + o.value
		}
		sbatchArgs = append(sbatchArgs, opt)
	}
	// Named for its command; a shell salloc starts itself is Slurm's
	// "interactive".
	name := "interactive"
	if len(command) > 0 {
		name = filepath.Base(command[0])
	} else if shell := c.env.Environ["SHELL"]; shell != "" {
		command = []string{shell}
	} else {
		command = []string{"/bin/sh"}
	}
	// Without sbatch's --quiet: Slurm's salloc warns of a node count its
	// tasks lowered whatever -Q (measured beside Slurm 22.05), after
	// the refusal too ("invalid number of nodes (-N 2-1)").
	req, err := parseSbatchAt(c.now, append([]string{"--job-name=" + name}, sbatchArgs...), []byte(srunHolder), c.allocEnviron())
	if err != nil {
		if e, ok := err.(*Error); ok {
			e.Text = strings.ReplaceAll(e.Text, "sbatch: ", "salloc: ")
			return e
		}
		return err
	}
	if req.nodesWarning != "" {
		fmt.Fprintf(c.stderr, "salloc: Warning: %s\n", req.nodesWarning)
	}
	// -D moves salloc itself, and so its command, as Slurm's does.
	dir := c.env.Cwd
	if wd := req.job.GetWorkDir(); wd != "" {
		dir = wd
	}
	path, err := proc.LookPath(command[0], c.env.Environ["PATH"], dir)
	if err != nil {
		return c.errorf("%s: %v", command[0], err)
	}
	job, err := c.submitJob(ctx, req.job, "Job submit/allocate failed")
	if err != nil {
		return err
	}
	id := job.GetJobId()
	if job, err = c.awaitAllocation(ctx, job, quiet); err != nil {
		return err
	}
	if !quiet {
		fmt.Fprintf(c.stderr, "salloc: Granted job allocation %s\n", id)
	}
	// -m reaches the shell as it reaches a batch script (sbatchDistEnv),
	// whatever the answer carries of the job's environment.
	for _, k := range []string{"SLURM_DISTRIBUTION", "SLURM_DIST_PLANESIZE"} {
		if v, ok := req.job.GetEnv()[k]; ok {
			if job.Env == nil {
				job.Env = map[string]string{}
			}
			job.Env[k] = v
		}
	}
	code, revoked := c.runAllocated(ctx, job, path, command, dir)
	if revoked {
		return &Error{Code: max(code, 1)}
	}
	if !quiet {
		fmt.Fprintf(c.stderr, "salloc: Relinquishing job allocation %s\n", id)
	}
	c.endAllocation(ctx, job, code)
	if code != 0 {
		return &Error{Code: code}
	}
	return nil
}

// runAllocated runs the command here, in dir, with the allocation's variables,
// standard streams passed through, and returns its exit code; revoked
// reports that the allocation ended first and the command was hung up on.
// The caller's interrupts do not stop it: they are the command's.
func (c *cmd) runAllocated(ctx context.Context, job *loomv1.Job, path string, command []string, dir string) (code int, revoked bool) {
	cmd := exec.Command(path, command[1:]...)
	cmd.Args[0] = command[0]
	cmd.Env = allocationEnv(c.env.Environ, job, c.env.Cwd, c.allocationCPUs(ctx, job))
	cmd.Dir = dir
	// A terminal is handed to the command as it is (a shell must see one);
	// anything else is written under a lock, as salloc's own messages are.
	stdout, stderr := passThrough(c.stdout), passThrough(c.stderr)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = c.env.Stdin, stdout, stderr
	// A hang-up (the terminal closed) is the command's, passed on: salloc
	// outlives it to give the allocation back once the command has gone.
	// Caught, not ignored: an ignored signal would stay ignored in the
	// command.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(c.stderr, "salloc: error: %s: %v\n", command[0], err)
		return 1, false
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	watch := time.NewTicker(allocWatch)
	defer watch.Stop()
	bg := context.WithoutCancel(ctx)
	for {
		select {
		case err := <-done:
			return exitCode(err), revoked
		case <-hup:
			_ = cmd.Process.Signal(syscall.SIGHUP)
		case <-watch.C:
			if revoked {
				continue
			}
			cctx, cancel := c.call(bg)
			j, err := c.jobsClient().GetJob(cctx, &loomv1.GetJobRequest{Name: job.GetName()})
			cancel()
			if err != nil || j.GetState() == loomv1.JobState_RUNNING {
				continue // a gateway that does not answer revokes nothing
			}
			fmt.Fprintf(stderr, "salloc: Job allocation %s has been revoked (%s).\n", job.GetJobId(), j.GetState())
			revoked = true
			_ = cmd.Process.Signal(syscall.SIGHUP)
		}
	}
}

// passThrough is w as a command's output: itself when it is a file (a
// terminal stays one), else w behind a lock — exec copies into it from
// another goroutine, and a bytes.Buffer's ReadFrom would drop what is
// written beside it.
func passThrough(w io.Writer) io.Writer {
	if f, ok := w.(*os.File); ok {
		return f
	}
	return &lockedWriter{w: w}
}

// exitCode is a finished command's exit status as a shell reports it:
// 128+N for a command killed by signal N.
func exitCode(err error) int {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		if err != nil {
			return 1
		}
		return 0
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ee.ExitCode()
}

// allocationCPUs is the CPUs the scheduler holds on each of job's nodes
// (allocNodeCPUs), reading the cluster's nodes only for an exclusive job
// that has some and no recorded layout (runLayout): where they cannot be
// read, its tasks' CPUs.
func (c *cmd) allocationCPUs(ctx context.Context, job *loomv1.Job) []int32 {
	var nodes []*loomv1.SlurmNode
	if _, _, ok := runLayout(job); !ok && job.GetExclusive() && len(job.GetNodes()) > 0 {
		nodes, _ = c.slurmNodes(ctx, job.GetCluster()) // nil on an error: the tasks' CPUs
	}
	return allocNodeCPUs(job, job.GetNodes(), nodes)
}

// allocationEnv is the environment salloc's command runs with: the
// caller's, and the allocation's SLURM_* variables as Slurm's salloc sets
// them (those srun reads to run steps in it among them). cpus are the CPUs
// held on each of its nodes (allocationCPUs): SLURM_JOB_CPUS_PER_NODE, and
// SLURM_TASKS_PER_NODE from the run's tasks (jobNodeTasks: packed as
// Slurm's select packs them, -N2 -n4 3,1) by the batch environment's rule
// (slurmspec.AllocTasksPerNode), as Slurm 22.05's env_array_for_job.
func allocationEnv(environ map[string]string, job *loomv1.Job, cwd string, cpus []int32) []string {
	env := make(map[string]string, len(environ)+24)
	for k, v := range environ {
		env[k] = v
	}
	nodes := strconv.Itoa(len(job.GetNodes()))
	nodelist := hostlist.Compress(job.GetNodes())
	set := map[string]string{
		"SLURM_JOB_ID": job.GetJobId(), "SLURM_JOBID": job.GetJobId(), "SLURM_JOB_NAME": job.GetDisplayName(),
		"SLURM_JOB_NODELIST": nodelist, "SLURM_NODELIST": nodelist, "SLURM_NNODES": nodes, "SLURM_JOB_NUM_NODES": nodes,
		"SLURM_JOB_PARTITION": job.GetPartition(), "SLURM_JOB_ACCOUNT": job.GetAccount(), "SLURM_JOB_QOS": job.GetQos(),
		"SLURM_JOB_USER": job.GetUser(), "SLURM_CLUSTER_NAME": shortName(job.GetCluster()), "SLURM_SUBMIT_DIR": cwd,
		"SLURM_SUBMIT_HOST": job.GetSubmitHost(), "LOOM_JOB_ID": job.GetJobId(), "LOOM_JOB_NAME": job.GetName(),
	}
	if job.GetNtasks() > 0 || job.GetNtasksPerNode() > 0 {
		// Asked for (-n, or --ntasks-per-node over the nodes got), as
		// Slurm's; without either it sets neither.
		n := strconv.Itoa(jobTasks(job))
		set["SLURM_NTASKS"], set["SLURM_NPROCS"] = n, n
	}
	if len(cpus) > 0 {
		tasks := make([]int32, len(cpus))
		copy(tasks, jobNodeTasks(job))
		asked := job.GetNtasks() > 0 || job.GetNtasksPerNode() > 0
		set["SLURM_JOB_CPUS_PER_NODE"] = slurmspec.CompressCounts(cpus)
		set["SLURM_TASKS_PER_NODE"] = slurmspec.CompressCounts(slurmspec.AllocTasksPerNode(tasks, cpus, asked, job.GetCpusPerTask()))
	}
	if n := job.GetNtasksPerNode(); n > 0 {
		set["SLURM_NTASKS_PER_NODE"] = strconv.Itoa(int(n))
	}
	if d := job.GetEnv()["SLURM_DISTRIBUTION"]; d != "" {
		// salloc -m (sbatchDistEnv), its sruns' default.
		set["SLURM_DISTRIBUTION"] = d
		if n := job.GetEnv()["SLURM_DIST_PLANESIZE"]; n != "" {
			set["SLURM_DIST_PLANESIZE"] = n
		}
	}
	if n := job.GetCpusPerTask(); n > 0 {
		set["SLURM_CPUS_PER_TASK"] = strconv.Itoa(int(n))
	}
	// The GPU request, as the batch script has it and Slurm 22.05's salloc
	// sets it (measured: --gpus-per-node=2 is SLURM_GPUS_PER_NODE=2,
	// --gpus=2 SLURM_GPUS=2, -N2 --gpus-per-task=1 SLURM_GPUS_PER_TASK
	// alone): the defaults of the sruns in it (srunStepInputVars, stepGRES).
	slurmspec.JobGPUEnv(job, set)
	if n := job.GetCpusPerGpu(); n > 0 {
		set["SLURM_CPUS_PER_GPU"] = strconv.Itoa(int(n)) // as Slurm's salloc: only when asked for
	}
	// Memory as it was asked for, as Slurm's salloc exports it: a
	// --mem-per-cpu job's per CPU (its memory a node follows the CPUs each
	// node gets), a --mem job's a node.
	if per := job.GetMemPerCpuMb(); per > 0 {
		set["SLURM_MEM_PER_CPU"] = strconv.FormatInt(per, 10)
	} else if m := job.GetMemMb(); m > 0 {
		set["SLURM_MEM_PER_NODE"] = strconv.FormatInt(m, 10)
	}
	for k, v := range set {
		env[k] = v
	}
	// Variables of a batch step on a node do not hold here, on the caller's
	// machine: srun would take them for its own node.
	delete(env, "SLURMD_NODENAME")
	delete(env, "SLURM_STEP_ID")
	out := make([]string, 0, len(env))
	for _, k := range sortedKeys(env) {
		out = append(out, k+"="+env[k])
	}
	return out
}

// sallocUsage is salloc --help: the options it takes are sbatch's that
// shape an allocation.
const sallocUsage = `Usage: salloc [OPTIONS(0)...] [ : [OPTIONS(N)...]] [command(0) [args(0)...]]

Loom's salloc asks for an allocation, runs the command (default: your
shell) here with the allocation's SLURM_* variables, so that srun runs job
steps on the allocated nodes, and gives the allocation back when the command
exits. It takes sbatch's options that shape an allocation:

  -A, --account=name          charge job to specified account
  -b, --begin=time            defer job until HH:MM MM/DD/YY
  -c, --cpus-per-task=ncpus   number of cpus required per task
      --cpus-per-gpu=n        number of CPUs required per allocated GPU
  -D, --chdir=path            change working directory
      --exclusive             allocate nodes in exclusive mode
  -G, --gpus=n                count of GPUs required for the job
      --gpus-per-node=n       number of GPUs required per allocated node
      --gres=list             required generic resources
  -H, --hold                  submit job in held state
  -J, --job-name=jobname      name of job
  -m, --distribution=type     the steps' task distribution (SLURM_DISTRIBUTION)
      --mem=MB                minimum amount of real memory
  -n, --ntasks=ntasks         number of tasks to run
  -N, --nodes=N               number of nodes on which to run (N = min[-max])
  -p, --partition=partition   partition requested
  -q, --qos=qos               quality of service
  -Q, --quiet                 quiet mode (suppress informational messages)
  -t, --time=minutes          time limit
  -w, --nodelist=hosts...     request a specific list of hosts
  -x, --exclude=hosts...      exclude a specific list of hosts

Help options:
  -h, --help                  show this help message
  -V, --version               output version information and exit
`

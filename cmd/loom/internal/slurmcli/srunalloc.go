package slurmcli

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loom-ml/loom/libs/hostlist"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// srunHolder is the batch script of the allocation srun and salloc make:
// it holds the nodes, doing nothing, until srun or salloc ends the job as
// its step or command ended (endAllocation). USR1 and USR2 end it
// COMPLETED or FAILED too, as gateways before CancelJob.exit_code had it.
const srunHolder = `#!/bin/sh
# Loom's srun: this allocation is held for the step srun starts in it.
trap 'exit 0' USR1
trap 'exit 1' USR2
while :; do sleep 3600 & wait $!; done
`

// srunAllocOptions are the srun options that shape the allocation: they
// are handed to sbatch's parser as they were given.
var srunAllocOptions = map[string]bool{
	"nodes": true, "ntasks": true, "ntasks-per-node": true, "cpus-per-task": true, "cpus-per-gpu": true, "job-name": true,
	"partition": true, "time": true, "mem": true, "mem-per-cpu": true, "gres": true, "gpus": true,
	"gpus-per-node": true, "gpus-per-task": true, "exclusive": true, "account": true, "qos": true,
	"nodelist": true, "exclude": true, "chdir": true, "nice": true, "begin": true,
}

// srunInputVars are the variables Slurm's srun reads as the defaults of
// its allocation's options (its INPUT ENVIRONMENT VARIABLES).
var srunInputVars = []struct{ env, opt string }{
	{"SLURM_ACCOUNT", "account"}, {"SLURM_PARTITION", "partition"}, {"SLURM_QOS", "qos"},
	{"SLURM_TIMELIMIT", "time"}, {"SLURM_JOB_NAME", "job-name"}, {"SLURM_GPUS", "gpus"},
	{"SLURM_GPUS_PER_NODE", "gpus-per-node"}, {"SLURM_MEM_PER_CPU", "mem-per-cpu"},
	{"SLURM_MEM_PER_NODE", "mem"}, {"SLURM_NNODES", "nodes"}, {"SLURM_NPROCS", "ntasks"}, {"SLURM_NTASKS", "ntasks"},
	{"SLURM_NTASKS_PER_NODE", "ntasks-per-node"}, {"SLURM_CPUS_PER_TASK", "cpus-per-task"},
	{"SLURM_CPUS_PER_GPU", "cpus-per-gpu"},
}

// allocPoll is how often srun looks whether its allocation has started;
// allocQuiet how long it may pend before srun says it waits (a submitted
// job is pending until the scheduler has seen it, which takes a moment
// even when the nodes are free).
var (
	allocPoll  = 200 * time.Millisecond
	allocQuiet = time.Second
)

// srunAlloc is srun outside a job, as Slurm's: it asks for an allocation
// (a job whose batch script only holds the nodes), waits for it ("queued
// and waiting for resources"), runs the command there as the job's step 0
// and ends the job with the step's outcome. Interrupted while waiting, it
// cancels the job.
func (c *cmd) srunAlloc(ctx context.Context, opts []parsedOpt, step stepRequest, export, chdir string) error {
	// The job is named for the command; then srun's input variables; then
	// its command line, which wins (the last of an option counts).
	args := []string{"--job-name=" + filepath.Base(step.command[0])}
	for _, v := range srunInputVars {
		if val := c.env.Environ[v.env]; val != "" {
			args = append(args, "--"+v.opt+"="+val)
		}
	}
	quiet := false
	for _, o := range opts {
		switch {
		case o.key == "quiet":
			quiet = true
		case o.key == "nodelist":
			// As srun kept it: past -N's count, its first hosts
			// (srun said so), which Slurm's srun then allocates
			// rather than refusing -N1 -w node[1-2] as sbatch does
			// (measured beside Slurm 22.05).
			args = append(args, "--nodelist="+hostlist.Compress(step.nodelist))
		case srunAllocOptions[o.key]:
			args = append(args, "--"+o.key+"="+o.value)
		}
	}
	req, err := parseSbatchAt(c.now, append([]string{"--quiet"}, args...), []byte(srunHolder), c.allocEnviron())
	if err != nil {
		if e, ok := err.(*Error); ok {
			e.Text = strings.ReplaceAll(e.Text, "sbatch: ", "srun: ")
			return e
		}
		return err
	}
	if len(step.nodelist) > 0 {
		step.nodelist = req.job.GetNodelist() // the hosts the allocation kept
	}
	if req.nodesWarning != "" && !quiet {
		// The allocation's node/task check (-N2 -n1, -n1 -w node[1-2]),
		// in Slurm's srun's words.
		fmt.Fprintf(c.stderr, "srun: Warning: %s\n", req.nodesWarning)
	}
	job, err := c.submitJob(ctx, req.job, "Unable to allocate resources")
	if err != nil {
		return err
	}
	id := job.GetJobId()
	if _, err := c.awaitAllocation(ctx, job, false); err != nil {
		return err
	}
	step.jobID = id
	// Slurm's srun asks this step, without -n, for every CPU of its
	// allocation (scontrol show step's TresPerStep counts them).
	step.allocationCPUs = step.ntasks == 0
	runErr := c.srunInJob(ctx, step, export, chdir)
	// The job ends as the step ended, with its exit code.
	code := 0
	if runErr != nil {
		code = 1
		if e, ok := runErr.(*Error); ok && e.Code > 0 {
			code = e.Code
		}
	}
	c.endAllocation(ctx, job, code)
	return runErr
}

// awaitAllocation waits until job runs and returns it as it runs (its
// nodes), saying so as srun and salloc do when it had to wait, unless
// quiet; interrupted, it cancels the job.
func (c *cmd) awaitAllocation(ctx context.Context, job *loomv1.Job, quiet bool) (*loomv1.Job, error) {
	id := job.GetJobId()
	waited, since := false, time.Now()
	tick := time.NewTicker(allocPoll)
	defer tick.Stop()
	for {
		switch job.GetState() {
		case loomv1.JobState_RUNNING:
			if waited && !quiet {
				fmt.Fprintf(c.stderr, "%s: job %s has been allocated resources\n", c.name, id)
			}
			return job, nil
		case loomv1.JobState_PENDING, loomv1.JobState_CONFIGURING, loomv1.JobState_JOB_STATE_UNSPECIFIED:
			if !waited && job.GetState() == loomv1.JobState_PENDING && time.Since(since) >= allocQuiet {
				if !quiet {
					fmt.Fprintf(c.stderr, "%s: job %s queued and waiting for resources\n", c.name, id)
				}
				waited = true
			}
		default:
			return nil, c.errorf("Job allocation %s has been revoked (%s)", id, job.GetState())
		}
		select {
		case <-ctx.Done():
			ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.env.CallTimeout)
			defer cancel()
			_, _ = c.jobsClient().CancelJob(ectx, &loomv1.CancelJobRequest{Name: job.GetName(), User: c.env.User})
			return nil, c.errorf("Job allocation %s has been revoked", id)
		case <-tick.C:
		}
		cctx, cancel := c.call(ctx)
		j, err := c.jobsClient().GetJob(cctx, &loomv1.GetJobRequest{Name: job.GetName()})
		cancel()
		if err == nil {
			job = j
		} else if ctx.Err() == nil {
			return nil, c.rpcError("waiting for job "+id, err)
		}
	}
}

// allocEnviron is the environment an allocation srun or salloc asks for is
// submitted with: the caller's, without sbatch's input variables (SBATCH_*),
// which are not theirs.
func (c *cmd) allocEnviron() map[string]string {
	environ := c.submitEnviron()
	for k := range environ {
		if strings.HasPrefix(k, "SBATCH_") {
			delete(environ, k)
		}
	}
	return environ
}

// endAllocation ends the allocation job holds as the step or command run in
// it ended: COMPLETED for 0, else FAILED with the code (CancelJob with
// exit_code, Slurm's slurm_complete_job); a failure says how to let the
// nodes go by hand, unless the job had ended already.
func (c *cmd) endAllocation(ctx context.Context, job *loomv1.Job, code int) {
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.env.CallTimeout)
	defer cancel()
	exit := int32(min(max(code, 0), 255))
	_, err := c.jobsClient().CancelJob(ectx, &loomv1.CancelJobRequest{Name: job.GetName(), ExitCode: &exit, User: c.env.User})
	if status.Code(err) == codes.FailedPrecondition {
		return // it ended already (its time limit, a scancel): its nodes are free
	}
	if err != nil {
		fmt.Fprintf(c.stderr, "%s: error: ending job %s: %s; cancel it with scancel %s\n", c.name, job.GetJobId(), status.Convert(err).Message(), job.GetJobId())
	}
}

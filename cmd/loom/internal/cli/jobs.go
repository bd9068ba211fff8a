package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loom-ml/loom/libs/slurmspec"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

func (a *app) jobsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "jobs",
		Aliases: []string{"job"},
		Short:   "Submit, inspect and cancel batch jobs",
	}
	cmd.AddCommand(a.jobsSubmitCommand(), a.jobsGetCommand(), a.jobsListCommand(), a.jobsCancelCommand(),
		a.jobsLogsCommand(), a.jobsWatchCommand(), a.jobsGoodputCommand(), a.jobsCustomCommand())
	return cmd
}

// submitFlags are `loom jobs submit`'s options.
type submitFlags struct {
	cluster     string
	nodes       int32
	gpusPerNode int32
	name        string
	model       string
	script      string
	env         []string
	wait        bool
	retries     int32
	hangTimeout string
	checkpoint  string
	signal      string
	noRequeue   bool
	timeLimit   string
	partition   string
}

// jobFromFlags builds the job to submit, owned by the caller (userName);
// command is what followed "--".
func (a *app) jobFromFlags(ctx context.Context, f submitFlags, command []string) (*loomv1.Job, error) {
	if f.nodes < 1 {
		return nil, usagef("--nodes must be at least 1, got %d", f.nodes)
	}
	if f.gpusPerNode < 0 {
		return nil, usagef("--gpus-per-node must not be negative, got %d", f.gpusPerNode)
	}
	j := &loomv1.Job{
		DisplayName: f.name,
		NodeCount:   f.nodes,
		GpusPerNode: f.gpusPerNode,
		Command:     command,
	}
	switch {
	case f.script != "" && len(command) > 0:
		return nil, usagef("give either --script FILE or a command after --, not both")
	case f.script != "":
		b, err := os.ReadFile(f.script)
		if err != nil {
			return nil, fmt.Errorf("read --script: %w", err)
		}
		if strings.TrimSpace(string(b)) == "" {
			return nil, usagef("--script %s is empty", f.script)
		}
		j.Script = string(b)
	case len(command) == 0:
		return nil, usagef("give what to run: a command after -- (loom jobs submit%s -- echo hello) or --script FILE", clusterFlag(f.cluster))
	}
	if f.model != "" {
		j.ModelOutput = &loomv1.ModelOutput{ModelId: f.model}
	}
	if f.retries < 0 || f.retries > slurmspec.MaxRetries {
		return nil, usagef("--retries must be 0 to %d, got %d", slurmspec.MaxRetries, f.retries)
	}
	j.MaxRetries = f.retries
	if f.timeLimit != "" {
		// Slurm's --time grammar, as sbatch reads it; UNLIMITED leaves the
		// partition's limit.
		secs, _, err := slurmspec.ParseTimeLimit(f.timeLimit)
		if err != nil {
			return nil, usagef("--time %q: %v (want minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS or UNLIMITED)", f.timeLimit, err)
		}
		if secs > slurmspec.MaxTimeLimitSeconds {
			// Checked here, not left to the gateway, whose refusal counts
			// seconds where the user typed minutes.
			return nil, usagef("--time %q is more than a century, the most Loom takes (%d minutes; UNLIMITED: the partition's limit)",
				f.timeLimit, slurmspec.MaxTimeLimitSeconds/60)
		}
		j.TimeLimitSeconds = secs
	}
	j.Partition = f.partition
	if f.hangTimeout != "" {
		secs, err := hangTimeoutSeconds(f.hangTimeout)
		if err != nil {
			return nil, err
		}
		j.HangTimeoutSeconds = secs
	}
	if err := slurmspec.CheckCheckpointDir(f.checkpoint); err != nil {
		return nil, usagef("--checkpoint-dir %q %v", f.checkpoint, err)
	}
	j.CheckpointDir = f.checkpoint
	if f.signal != "" {
		sig, err := slurmspec.ParseSignal(f.signal)
		if err != nil {
			return nil, usagef("--signal %q: %v (want [B:]SIG[@seconds], e.g. USR1@90)", f.signal, err)
		}
		j.Signal = sig.String()
	}
	if f.noRequeue {
		no := false
		j.Requeue = &no
	}
	for _, kv := range f.env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usagef("--env wants KEY=VALUE, got %q", kv)
		}
		if j.Env == nil {
			j.Env = map[string]string{}
		}
		j.Env[k] = v
	}
	j.User = a.userName(ctx)
	// Checked last: the flags are wrong or right without asking anyone.
	cluster, err := a.clusterOrOnly(ctx, f.cluster, "")
	if err != nil {
		return nil, err
	}
	j.Cluster = cluster
	return j, nil
}

func (a *app) jobsSubmitCommand() *cobra.Command {
	var f submitFlags
	cmd := &cobra.Command{
		Use:   "submit [--cluster C] [flags] (--script FILE | -- CMD ARGS...)",
		Short: "Submit a job to a cluster",
		Long: `Submit a job that runs a command (after --) or a shell script (--script) on
--nodes nodes of a cluster. With --model, a successful job registers a new
version of that model from the files it writes into $LOOM_MODEL_DIR.

Examples:
  loom jobs submit --cluster demo -- echo hello
  loom jobs submit --cluster demo --nodes 2 --model tiny --wait -- loom train --epochs 100`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 && cmd.ArgsLenAtDash() != 0 {
				return usagef("put the command after --, e.g. `loom jobs submit --cluster demo -- %s`", shellJoin(args))
			}
			job, err := a.jobFromFlags(cmd.Context(), f, args)
			if err != nil {
				return err
			}
			j, err := a.submitJob(cmd.Context(), job)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if !f.wait {
				if a.output == "json" {
					return writeJSON(out, j)
				}
				fmt.Fprintf(out, "Submitted job %s (%s) on cluster %s\n", jobID(j), j.GetName(), shortName(j.GetCluster()))
				return nil
			}
			progress := a.progressOut(cmd)
			fmt.Fprintf(progress, "Submitted job %s on cluster %s\n", jobID(j), shortName(j.GetCluster()))
			final, err := a.followJob(cmd.Context(), j.GetName(), progress, "  ")
			if err != nil {
				return err
			}
			if a.output == "json" {
				if err := writeJSON(out, final); err != nil {
					return err
				}
			}
			return jobOutcome(final)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.cluster, "cluster", "", "cluster to run on (default: LOOM_CLUSTER, as a login shell sets it, else the project's only cluster)")
	fl.Int32Var(&f.nodes, "nodes", 1, "number of nodes")
	fl.Int32Var(&f.gpusPerNode, "gpus-per-node", 0, "GPUs on each node")
	fl.StringVar(&f.name, "name", "", "display name of the job")
	fl.StringVar(&f.model, "model", "", "register a version of this model when the job succeeds")
	fl.StringVar(&f.script, "script", "", "shell script to run on each node, instead of a command")
	fl.StringArrayVar(&f.env, "env", nil, "KEY=VALUE added to the job's environment (repeatable)")
	fl.BoolVar(&f.wait, "wait", false, "wait for the job to end, showing its state changes")
	fl.Int32Var(&f.retries, "retries", 0, fmt.Sprintf("rerun the job up to this many times when its program fails (0 to %d; node failures and hangs do not count)", slurmspec.MaxRetries))
	fl.StringVar(&f.hangTimeout, "hang-timeout", "", "end and requeue a run that makes no progress for this long (e.g. 10m; up to a week; off: never; default: the cluster's)")
	fl.StringVar(&f.signal, "signal", "", "signal sent before the time limit, and to ask for a checkpoint before a drain or after a node's failure ([B:]SIG[@seconds]; default USR1)")
	fl.StringVar(&f.timeLimit, "time", "", "time limit, as sbatch's --time: minutes, HH:MM:SS, D-HH:MM:SS or UNLIMITED (default: the partition's)")
	fl.StringVar(&f.partition, "partition", "", "partition to run in (default: the cluster's default partition)")
	fl.BoolVar(&f.noRequeue, "no-requeue", false, "end the job when a node fails under it instead of requeuing it")
	fl.StringVar(&f.checkpoint, "checkpoint-dir", "", "where the job's checkpoints go ($LOOM_CHECKPOINT_DIR; relative: under the cluster's shared dir; default <shared dir>/checkpoints/<job id>)")
	return cmd
}

// submitFlagFields names the `loom jobs submit` flag that sets each Job
// field the gateway may refuse (flagNames), so that its refusal names what
// the user typed: "--time", not "job.time_limit_seconds". A new flag of
// submit that sets a field adds its row here.
var submitFlagFields = map[string]string{
	"job.cluster":               "--cluster",
	"job.node_count":            "--nodes",
	"job.gpus_per_node":         "--gpus-per-node",
	"job.display_name":          "--name",
	"job.model_output.model_id": "--model",
	"job.script":                "--script",
	"job.command":               "the command after --",
	"job.env":                   "--env",
	"job.max_retries":           "--retries",
	"job.hang_timeout_seconds":  "--hang-timeout",
	"job.signal":                "--signal",
	"job.time_limit_seconds":    "--time",
	"job.partition":             "--partition",
	"job.checkpoint_dir":        "--checkpoint-dir",
	"job.requeue":               "--no-requeue",
}

// hangTimeoutSeconds reads --hang-timeout: a duration ("10m", "1h30m"),
// rounded up to whole seconds, or "off" (slurmspec.HangTimeoutOff).
func hangTimeoutSeconds(s string) (int64, error) {
	if strings.EqualFold(s, "off") {
		return slurmspec.HangTimeoutOff, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, usagef("--hang-timeout wants a duration such as 10m, or off; got %q", s)
	}
	secs := int64((d + time.Second - 1) / time.Second)
	if err := slurmspec.CheckHangTimeout(secs); err != nil {
		return 0, usagef("--hang-timeout %s: %v", s, err)
	}
	return secs, nil
}

func (a *app) submitJob(ctx context.Context, job *loomv1.Job) (*loomv1.Job, error) {
	cl, err := a.jobs()
	if err != nil {
		return nil, err
	}
	cctx, cancel := a.call(ctx)
	defer cancel()
	j, err := cl.SubmitJob(cctx, &loomv1.SubmitJobRequest{Parent: a.parent(), Job: job, RequestId: requestID()})
	if err != nil {
		return nil, a.notFoundHint(a.explain("submit job", flagNames(err, submitFlagFields)), err, "loom clusters list")
	}
	return j, nil
}

// jobOutcome is nil for a COMPLETED job and an error saying how it ended
// otherwise, so that `--wait` exits non-zero when the job failed.
func jobOutcome(j *loomv1.Job) error {
	if j.GetState() == loomv1.JobState_COMPLETED {
		return nil
	}
	return fmt.Errorf("job %s ended %s; see its output with `loom jobs logs %s`", jobID(j), describeJob(j), jobID(j))
}

// describeJob says where a job is: "PENDING (Resources)", "CONFIGURING on
// cpu-0001, cpu-0002" (starting), "RUNNING on cpu-0001, cpu-0002",
// "COMPLETING on cpu-0001" (ended, steps stopping), "FAILED (exit 1)".
func describeJob(j *loomv1.Job) string {
	s := jobState(j)
	switch {
	case (j.GetState() == loomv1.JobState_RUNNING || j.GetState() == loomv1.JobState_CONFIGURING ||
		j.GetState() == loomv1.JobState_COMPLETING) && len(j.GetNodes()) > 0:
		s += " on " + strings.Join(j.GetNodes(), ", ")
	case j.GetState() == loomv1.JobState_COMPLETED || j.GetState() == loomv1.JobState_FAILED || j.GetExitCode() != 0:
		s += " (exit " + strconv.Itoa(int(j.GetExitCode())) + ")"
	}
	return s
}

// followJob watches the job until it ends, writing a line to progress each
// time its description changes, and returns its final state.
func (a *app) followJob(ctx context.Context, name string, progress io.Writer, indent string) (*loomv1.Job, error) {
	last := ""
	return a.watchJob(ctx, name, func(j *loomv1.Job) error {
		if d := describeJob(j); d != last {
			fmt.Fprintf(progress, "%s%s\n", indent, d)
			last = d
		}
		return nil
	})
}

// watchJob calls each for every state of the job that WatchJob streams and
// returns the last one once it is terminal. A gateway without WatchJob is
// polled instead.
func (a *app) watchJob(ctx context.Context, name string, each func(*loomv1.Job) error) (*loomv1.Job, error) {
	cl, err := a.jobs()
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := cl.WatchJob(wctx, &loomv1.WatchJobRequest{Name: a.jobName(name)})
	if err != nil {
		return nil, a.explain("watch job "+shortName(name), err)
	}
	var last *loomv1.Job
	for {
		j, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if codeOf(err) == codes.Unimplemented {
			return a.pollJob(ctx, name, each)
		}
		if err != nil {
			return last, a.notFoundHint(a.explain("watch job "+shortName(name), err), err, "loom jobs list")
		}
		last = j
		if err := each(j); err != nil {
			return j, err
		}
		if j.GetState().Terminal() {
			return j, nil
		}
	}
	// The stream ended without a terminal state: ask for the current one.
	return a.pollJob(ctx, name, each)
}

// pollJob is watchJob by GetJob every poll interval.
func (a *app) pollJob(ctx context.Context, name string, each func(*loomv1.Job) error) (*loomv1.Job, error) {
	cl, err := a.jobs()
	if err != nil {
		return nil, err
	}
	for {
		cctx, cancel := a.call(ctx)
		j, err := cl.GetJob(cctx, &loomv1.GetJobRequest{Name: a.jobName(name)})
		cancel()
		if err != nil {
			return nil, a.explain("get job "+shortName(name), err)
		}
		if err := each(j); err != nil {
			return j, err
		}
		if j.GetState().Terminal() {
			return j, nil
		}
		select {
		case <-ctx.Done():
			return j, fmt.Errorf("stopped watching job %s: %w", shortName(name), ctx.Err())
		case <-time.After(a.pollInterval):
		}
	}
}

func (a *app) jobsGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get ID",
		Short: "Show a job",
		Args:  exactArgs(1, "the job id, e.g. `loom jobs get 7`"),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.jobs()
			if err != nil {
				return err
			}
			ctx, cancel := a.call(cmd.Context())
			defer cancel()
			j, err := cl.GetJob(ctx, &loomv1.GetJobRequest{Name: a.jobName(args[0])})
			if codeOf(err) == codes.NotFound {
				// A CustomJob's id is its job's, but that job exists only
				// once the CustomJob's cluster runs.
				if cjErr := a.customJobHasNoJob(cmd.Context(), args[0]); cjErr != nil {
					return cjErr
				}
			}
			if err != nil {
				return a.notFoundHint(a.explain("get job "+args[0], err), err, "loom jobs list")
			}
			if a.output == "json" {
				return writeJSON(cmd.OutOrStdout(), j)
			}
			return renderJob(cmd.OutOrStdout(), j, a.now())
		},
	}
}

func (a *app) jobsListCommand() *cobra.Command {
	var cluster, orderBy string
	var limit int
	var states, users, partitions []string
	cmd := &cobra.Command{
		Use:     "list [--cluster C] [--state S,...] [--user U,...] [--partition P,...] [--order-by \"submit_time desc\"] [--limit N]",
		Aliases: []string{"ls"},
		Short:   "List the project's jobs",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req := &loomv1.ListJobsRequest{Parent: a.parent(), Users: users, Partitions: partitions, OrderBy: orderBy}
			if err := jobStateFilter(req, states); err != nil {
				return err
			}
			cl, err := a.jobs()
			if err != nil {
				return err
			}
			if cluster != "" {
				req.Cluster = a.clusterName(cluster)
			}
			resp := &loomv1.ListJobsResponse{}
			resp.Jobs, err = collect(a, cmd, limit, func(ctx context.Context, token string, size int32) ([]*loomv1.Job, string, error) {
				req.PageToken, req.PageSize = token, size
				page, err := cl.ListJobs(ctx, req)
				return page.GetJobs(), page.GetNextPageToken(), err
			})
			if err != nil {
				return a.notFoundHint(a.explain("list jobs", err), err, "loom clusters list")
			}
			if a.output == "json" {
				return writeJSON(cmd.OutOrStdout(), resp)
			}
			if len(resp.GetJobs()) == 0 {
				if len(states)+len(users)+len(partitions) > 0 {
					fmt.Fprintln(cmd.OutOrStdout(), "No jobs match.")
					return nil
				}
				fmt.Fprintln(cmd.OutOrStdout(), "No jobs. Submit one with `loom jobs submit --cluster CLUSTER -- COMMAND`.")
				return nil
			}
			return renderJobs(cmd.OutOrStdout(), resp.GetJobs(), a.now())
		},
	}
	cmd.Flags().StringVar(&cluster, "cluster", "", "only this cluster's jobs")
	cmd.Flags().StringSliceVar(&states, "state", nil, "only jobs in these states (comma-separated, any case: pending, running, completed, failed, cancelled, timeout, node_fail, ...; active: pending or running)")
	cmd.Flags().StringSliceVar(&users, "user", nil, "only these users' jobs (comma-separated)")
	cmd.Flags().StringSliceVar(&partitions, "partition", nil, "only jobs of these partitions (comma-separated)")
	cmd.Flags().StringVar(&orderBy, "order-by", "", `the order: "submit_time" (the default: the oldest first) or "submit_time desc" (the newest first)`)
	cmd.Flags().IntVar(&limit, "limit", 0, "list at most this many jobs, the first in --order-by's order (0: all)")
	return cmd
}

// jobStateFilter sets req's state filter from --state: JobState names in
// any case, or "active" (the pending and running ones, as squeue lists).
func jobStateFilter(req *loomv1.ListJobsRequest, states []string) error {
	for _, s := range states {
		name := strings.ToUpper(strings.TrimSpace(s))
		if name == "ACTIVE" {
			req.ActiveOnly = true
			continue
		}
		v, ok := loomv1.JobState_value[name]
		if !ok || v == int32(loomv1.JobState_JOB_STATE_UNSPECIFIED) {
			var names []string
			for i := int32(1); i < int32(len(loomv1.JobState_name)); i++ {
				if n, ok := loomv1.JobState_name[i]; ok {
					names = append(names, strings.ToLower(n))
				}
			}
			return usagef("--state %q is not a job state; use one of %s, or active", s, strings.Join(names, ", "))
		}
		req.States = append(req.States, loomv1.JobState(v))
	}
	return nil
}

// msgAlreadyDone is the gateway's refusal to cancel a job that is ending
// or ended: Slurm's ESLURM_ALREADY_DONE, as scancel prints it.
const msgAlreadyDone = "Job/step already completing or completed"

func (a *app) jobsCancelCommand() *cobra.Command {
	var ignoreEnded bool
	cmd := &cobra.Command{
		Use:   "cancel ID [--ignore-ended]",
		Short: "Cancel a job (its processes are stopped)",
		Long: `Cancel a job: a pending one ends CANCELLED at once, a running one once its
processes are stopped.

A job that has already ended, or is ending, is not cancelled: the command
says how it ended and exits 1, so that a script can tell a job it cancelled
from one that finished (COMPLETED, FAILED) on its own. A script that only
needs the job gone gives --ignore-ended: the same words go to stderr as a
note, and the command exits 0 (as kubectl delete --ignore-not-found).
` + "`loom slurm scancel`" + ` keeps Slurm's way instead: silent, exit 0.`,
		Args: exactArgs(1, "the job id, e.g. `loom jobs cancel 7`"),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.jobs()
			if err != nil {
				return err
			}
			ctx, cancel := a.call(cmd.Context())
			defer cancel()
			// The caller, as submit names the owner: only the owner or an
			// administrator may cancel a job.
			j, err := cl.CancelJob(ctx, &loomv1.CancelJobRequest{Name: a.jobName(args[0]), User: a.userName(ctx)})
			if status.Code(err) == codes.FailedPrecondition && status.Convert(err).Message() == msgAlreadyDone {
				// The gateway's refusal for a job that is ending or ended
				// is Slurm's, for scancel; `loom jobs` says how the job
				// ended instead.
				j, err := cl.GetJob(ctx, &loomv1.GetJobRequest{Name: a.jobName(args[0])})
				if err != nil {
					// The job ended; what it became is not known here.
					j = nil
				}
				return a.ended(cmd, args[0], j, ignoreEnded)
			}
			if err != nil {
				return a.notFoundHint(a.explain("cancel job "+args[0], err), err, "loom jobs list")
			}
			if j.GetState().Terminal() && j.GetState() != loomv1.JobState_CANCELLED {
				// Ended before this cancel came (a gateway that answers
				// an ended job as it is, not with the refusal above).
				return a.ended(cmd, args[0], j, ignoreEnded)
			}
			if a.output == "json" {
				return writeJSON(cmd.OutOrStdout(), j)
			}
			if j.GetState() == loomv1.JobState_CANCELLED {
				fmt.Fprintf(cmd.OutOrStdout(), "Job %s cancelled\n", jobID(j))
				return nil
			}
			// Cancelling goes through the scheduler; the answer may still
			// show the state before it.
			fmt.Fprintf(cmd.OutOrStdout(), "Job %s: cancel requested (it was %s); follow it with `loom jobs watch %s`\n", jobID(j), describeJob(j), jobID(j))
			return nil
		},
	}
	cmd.Flags().BoolVar(&ignoreEnded, "ignore-ended", false, "exit 0 for a job that has already ended or is ending (a note on stderr says how)")
	return cmd
}

// ended answers `loom jobs cancel ID` for a job that has ended or is
// ending (j as the gateway has it now; nil when not known): notCancelled's
// failure, or with --ignore-ended (ignore) its words as a note on stderr,
// the job as it is with -o json, and exit 0.
func (a *app) ended(cmd *cobra.Command, id string, j *loomv1.Job, ignore bool) error {
	err := notCancelled(id, j)
	if !ignore {
		return err
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "Note: %v\n", err)
	if a.output == "json" && j != nil {
		return writeJSON(cmd.OutOrStdout(), j)
	}
	return nil
}

// notCancelled is the failure of `loom jobs cancel ID` for a job that has
// ended or is ending (j as the gateway has it now; nil when that is not
// known): exit 1, as for any action not done, so that a script does not
// take a job that ended on its own for one it cancelled. It says how the
// job ended and where to look next. scancel's exit 0 for the same job
// stays Slurm's (slurmcli).
func notCancelled(id string, j *loomv1.Job) error {
	switch {
	case j == nil:
		return fmt.Errorf("cancel job %s: it has already ended: nothing to cancel (see how it ended with `loom jobs get %s`)", id, id)
	case !j.GetState().Terminal():
		// Ending (COMPLETING): its processes are being stopped already.
		return fmt.Errorf("cancel job %s: it is already ending, %s: nothing to cancel (follow it to its end with `loom jobs watch %s`)", jobID(j), describeJob(j), jobID(j))
	}
	return fmt.Errorf("cancel job %s: it is already %s: nothing to cancel (see how it ended with `loom jobs get %s`)", jobID(j), describeJob(j), jobID(j))
}

func (a *app) jobsLogsCommand() *cobra.Command {
	var follow bool
	var lines int32
	cmd := &cobra.Command{
		Use:   "logs ID [-f] [--tail N]",
		Short: "Print a job's output",
		Long: `Print a job's output; -f keeps printing until the job ends.

A CustomJob's id is its job's (loom jobs logs 12 is CustomJob 12's output).
Its job is submitted once its cluster runs: before that, -f waits for it.`,
		Args: exactArgs(1, "the job id, e.g. `loom jobs logs 7`"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if lines < 0 {
				return usagef("--tail must not be negative, got %d (0: the whole output)", lines)
			}
			req := &loomv1.ReadJobLogsRequest{Name: a.jobName(args[0]), Follow: follow, TailLines: lines}
			waiting := false
			for {
				err := a.copyLogs(cmd.Context(), req, cmd.OutOrStdout())
				if codeOf(err) != codes.NotFound {
					return err
				}
				// A CustomJob's id is its job's, but that job is submitted
				// only once the CustomJob's cluster runs.
				wait, cjErr := a.customJobNotStarted(cmd.Context(), args[0], follow, &waiting, cmd.ErrOrStderr())
				if cjErr != nil {
					return cjErr
				}
				if !wait {
					return err
				}
				select {
				case <-cmd.Context().Done():
					return err
				case <-time.After(a.pollInterval):
				}
			}
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing until the job ends")
	cmd.Flags().Int32VarP(&lines, "tail", "n", 0, "start at the output's last N lines, as tail -n (0: the whole output)")
	return cmd
}

// customJobNotStarted answers `loom jobs logs ID` whose job is not found
// when ID is a CustomJob's that has not started its job (it is submitted
// once the CustomJob's cluster runs): with follow it says once, on w
// (waiting), that it waits, and reports true (look again); without, an
// error saying so and that -f waits. A CustomJob that ended with no job
// known is an error saying it has no output. Anything else (no such
// CustomJob) reports false: the job's NotFound stands.
func (a *app) customJobNotStarted(ctx context.Context, id string, follow bool, waiting *bool, w io.Writer) (bool, error) {
	if strings.HasPrefix(id, "projects/") {
		return false, nil
	}
	tc, err := a.training()
	if err != nil {
		return false, nil
	}
	cctx, cancel := a.call(ctx)
	defer cancel()
	cj, err := tc.GetCustomJob(cctx, &trainingv1.GetCustomJobRequest{Name: a.trainingName(customJobs, id)})
	switch {
	case err != nil:
		return false, nil
	case jobEnded(cj.GetState()):
		msg := fmt.Sprintf("read logs of job %s: custom job %s ended %s before its job started: it has no output", id, id, trainingState(cj.GetState()))
		if cj.GetJob() != "" {
			// Submitted, but the scheduler has no record of it: the
			// cluster went first (a cancel right after the create), or
			// the job's record has expired.
			msg = fmt.Sprintf("read logs of job %s: custom job %s ended %s and its job %s is not known (it never ran, or its record has expired): no output to show",
				id, id, trainingState(cj.GetState()), shortName(cj.GetJob()))
		}
		if e := cj.GetError().GetMessage(); e != "" {
			msg += " (" + shown(e) + ")"
		}
		return false, errors.New(msg)
	}
	where := "it starts once its cluster runs"
	switch {
	case cj.GetJob() != "":
		// Submitted (a persistent cluster's at once): the scheduler has
		// not taken it yet; its cluster already runs.
		where = "it was submitted and the scheduler does not show it yet"
	case cj.GetCluster() != "":
		where = "it starts once its cluster " + shortName(cj.GetCluster()) + " runs"
	}
	if !follow {
		return false, fmt.Errorf("read logs of job %s: custom job %s is %s: its job has not started yet (%s); `loom jobs logs %s -f` waits for it",
			id, id, describeCustomJob(cj), where, id)
	}
	if !*waiting {
		*waiting = true
		fmt.Fprintf(w, "Waiting for custom job %s (%s): %s.\n", id, describeCustomJob(cj), where)
	}
	return true, nil
}

// customJobHasNoJob answers `loom jobs get ID` whose job is not found
// when ID is a CustomJob's: an error saying why there is no such job (not
// submitted yet, ended before it was, its record expired, or submitted
// but not yet taken by the scheduler). Anything
// else (no such CustomJob) is nil: the job's NotFound stands.
func (a *app) customJobHasNoJob(ctx context.Context, id string) error {
	if strings.HasPrefix(id, "projects/") {
		return nil
	}
	tc, err := a.training()
	if err != nil {
		return nil
	}
	cctx, cancel := a.call(ctx)
	defer cancel()
	cj, err := tc.GetCustomJob(cctx, &trainingv1.GetCustomJobRequest{Name: a.trainingName(customJobs, id)})
	if err != nil {
		return nil
	}
	see := "`loom jobs custom get " + id + "` shows the custom job"
	if e := cj.GetError().GetMessage(); e != "" {
		see = shown(e) + "; " + see
	}
	switch {
	case jobEnded(cj.GetState()) && cj.GetJob() == "":
		return fmt.Errorf("get job %s: custom job %s ended %s before its job was submitted: there is no job %s (%s)",
			id, id, trainingState(cj.GetState()), id, see)
	case jobEnded(cj.GetState()):
		return fmt.Errorf("get job %s: custom job %s ended %s and its job %s is not known: its record has expired (%s)",
			id, id, trainingState(cj.GetState()), shortName(cj.GetJob()), see)
	case cj.GetJob() != "":
		// Submitted (a persistent cluster's at once): the scheduler has
		// not taken its SubmitJob yet, and its cluster already runs.
		return fmt.Errorf("get job %s: custom job %s is %s: its job %s was submitted and the scheduler does not show it yet; try again in a moment (%s)",
			id, id, trainingState(cj.GetState()), shortName(cj.GetJob()), see)
	}
	where := "once its cluster runs"
	if c := cj.GetCluster(); c != "" {
		where = "once its cluster " + shortName(c) + " runs"
	}
	return fmt.Errorf("get job %s: custom job %s is %s: its job %s is submitted %s (%s)",
		id, id, trainingState(cj.GetState()), id, where, see)
}

// copyLogs writes the output of the job req names to w.
func (a *app) copyLogs(ctx context.Context, req *loomv1.ReadJobLogsRequest, w io.Writer) error {
	name := req.GetName()
	cl, err := a.jobs()
	if err != nil {
		return err
	}
	stream, err := cl.ReadJobLogs(ctx, req)
	if err != nil {
		return a.explain("read logs of job "+shortName(name), err)
	}
	for {
		chunk, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return a.notFoundHint(a.explain("read logs of job "+shortName(name), err), err, "loom jobs list")
		}
		if _, err := w.Write(chunk.GetData()); err != nil {
			return err
		}
	}
}

func (a *app) jobsWatchCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "watch ID",
		Short: "Show a job's state changes until it ends",
		Args:  exactArgs(1, "the job id, e.g. `loom jobs watch 7`"),
		RunE: func(cmd *cobra.Command, args []string) error {
			out := cmd.OutOrStdout()
			last := ""
			_, err := a.watchJob(cmd.Context(), args[0], func(j *loomv1.Job) error {
				if a.output == "json" {
					return writeJSONLine(out, j)
				}
				if d := describeJob(j); d != last {
					fmt.Fprintf(out, "%s  %s\n", a.now().Format("15:04:05"), d)
					last = d
				}
				return nil
			})
			return err
		},
	}
}

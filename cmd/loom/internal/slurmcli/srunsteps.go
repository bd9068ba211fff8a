package slurmcli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/term"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/slurmspec"
	"github.com/loom-ml/loom/libs/termtext"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// stepRequest is what srun asks of a job step that spans several nodes.
type stepRequest struct {
	jobID                  string
	command                []string
	env                    map[string]string
	dir                    string
	nodes, ntasks, perNode int32
	cpt                    int32
	killOnBadExit, label   bool
	// input is which tasks read stdin (CreateJobStepRequest.input), ""
	// none; stdin is what they read.
	input string
	stdin io.Reader
	// pty runs task 0 in a terminal of ptyRows × ptyCols that srun's own
	// (stdin, put in raw mode meanwhile) stands for.
	pty              bool
	ptyRows, ptyCols int32
	// output and errorTo are srun's -o and -e: "" (srun's own stdout
	// and stderr; -e "" follows -o), "all", "none", a task's rank (that
	// task's alone), or a filename pattern (stepOutputs).
	output, errorTo string
	// gpusPerTask gives each task its own GPUs (--gpus-per-task);
	// gpuBindNone (--gpu-bind=none) has the tasks share the step's GPUs
	// on their node instead, the step still holding gpusPerTask a task.
	gpusPerTask int32
	gpuBindNone bool
	// gpus and cpusPerGPU are the step's --gpus and --cpus-per-gpu (or
	// the job's SLURM_GPUS and SLURM_CPUS_PER_GPU: gpusInherited),
	// recorded on the step; gpus is set from gpusOpt (the --gpus/-G given;
	// gpusSet says it was) by stepGRES once the step's job is known.
	// gpusPerNode is --gpus-per-node (or --gres=gpu:N). The step gets
	// and holds the GPUs they ask for (CreateJobStepRequest.gpus).
	gpus, cpusPerGPU int32
	gpusOpt          string
	gpusSet          bool
	gpusInherited    bool
	gpusPerNode      int32
	// noGPUs: a GPU option asked for none (--gres=none, --gpus=0,
	// --gpus-per-node=0; CreateJobStepRequest.no_gpus), so that the step
	// does not take the job's GPUs.
	noGPUs bool
	// allocationCPUs: srun made the allocation itself and gave no -n
	// (CreateJobStepRequest.allocation_cpus).
	allocationCPUs bool
	// nodelist, exclude and relative pick the allocation's nodes the step
	// uses (-w, -x, -r).
	nodelist, exclude []string
	relative          int32
	// exact and overlap are srun's --exact and --overlap: the step holds
	// only its own CPUs, or nothing.
	exact, overlap bool
	// distribution is srun's -m as slurmspec reads it back ("": none).
	distribution string
	// verbose is srun's -v: it says what Slurm's srun says at -v.
	verbose bool
}

// Polling intervals of a remote step: its output files, and its state.
var (
	stepTailEvery = 50 * time.Millisecond
	// terminalTailEvery is how often srun --pty looks for the terminal's
	// output: with the node's input poll (20 ms), what bounds a typed
	// key's echo.
	terminalTailEvery = 10 * time.Millisecond
	stepStateEvery    = 250 * time.Millisecond
	// stepCancelWait bounds how long srun waits for a step it cancelled
	// (on SIGINT/SIGTERM) to end: the agents' kill grace and then some.
	stepCancelWait = 30 * time.Second
)

// srunSteps runs a job step across several nodes of the allocation: the
// gateway has the scheduler start its tasks on every node; srun copies the
// tasks' output files (in the shared directory) to its stdout and stderr as
// they grow, "N: " before each line with --label, waits for the step to end,
// and exits with the highest exit code of its tasks. Interrupted (SIGINT,
// SIGTERM) it cancels the step, so the tasks die on every node.
func (c *cmd) srunSteps(ctx context.Context, req stepRequest) error {
	jobs := c.jobsClient()
	parent := c.jobName(req.jobID)
	if n, err := resname.SplitJob(c.env.Environ["LOOM_JOB_NAME"]); err == nil && n.ID == req.jobID {
		// The job's own name, set by the scheduler: right whatever
		// project the job is in, LOOM_PROJECT exported or not.
		parent = n.String()
	}
	create := &loomv1.CreateJobStepRequest{Parent: parent, RequestId: requestID(), Command: req.command,
		Env: req.env, WorkDir: req.dir, NodeCount: req.nodes, Ntasks: req.ntasks, NtasksPerNode: req.perNode,
		CpusPerTask: req.cpt, KillOnBadExit: req.killOnBadExit, Input: req.input,
		Pty: req.pty, PtyRows: req.ptyRows, PtyCols: req.ptyCols, GpusPerTask: req.gpusPerTask,
		Nodelist: req.nodelist, Exclude: req.exclude, Relative: req.relative, Exact: req.exact, Overlap: req.overlap,
		Gpus: req.gpus, CpusPerGpu: req.cpusPerGPU, GpuBindNone: req.gpuBindNone, Distribution: req.distribution,
		GpusPerNode: req.gpusPerNode, GpusInherited: req.gpusInherited, NoGpus: req.noGPUs,
		AllocationCpus: req.allocationCPUs}
	var step *loomv1.JobStep
	var err error
	for attempt := 0; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, c.env.CallTimeout+30*time.Second)
		step, err = jobs.CreateJobStep(cctx, create)
		cancel()
		// The request id makes a retry after a lost answer safe.
		if err == nil || status.Code(err) != codes.Unavailable || attempt >= 5 || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(attempt+1) * 200 * time.Millisecond):
		}
	}
	if err != nil {
		switch status.Code(err) {
		case codes.FailedPrecondition, codes.InvalidArgument, codes.NotFound:
			return c.errorf("Unable to create step for job %s: %s", req.jobID, status.Convert(err).Message())
		}
		return c.rpcError("Unable to create step for job "+req.jobID, err)
	}
	if step.GetState() == loomv1.JobState_PENDING {
		if step, err = c.awaitPendingStep(ctx, req.jobID, step, req.verbose); err != nil {
			return err
		}
	}
	if step.GetState() != loomv1.JobState_RUNNING && step.GetNumTasks() == 0 {
		reason := step.GetReason()
		if step.GetState() == loomv1.JobState_CANCELLED {
			reason = msgAlreadyDone
		}
		return c.errorf("Unable to create step for job %s: %s", req.jobID, reason)
	}
	stepID := fmt.Sprintf("%s.%d", req.jobID, step.GetStepId())
	dest, closeFiles, err := c.stepOutputs(req, step)
	if err != nil {
		// The step runs already: it is cancelled, not left without a
		// reader.
		c.cancelStepQuietly(step)
		return err
	}
	defer closeFiles()
	tail := newStepTail(step, req.label, dest)
	restore := func() {}
	every := stepTailEvery
	if req.pty {
		// Keys go to the terminal as typed (the remote one echoes them,
		// and ^C is a character for it), and its output comes back as it
		// is written, not a line at a time.
		tail = newTerminalTail(step, c.stdout)
		every = terminalTailEvery
		if f, ok := req.stdin.(*os.File); ok {
			if old, err := term.MakeRaw(int(f.Fd())); err == nil {
				// Restored before srun says how the step ended, and
				// whatever way it returns.
				restore = sync.OnceFunc(func() { _ = term.Restore(int(f.Fd()), old) })
				defer restore()
			}
			stop := c.forwardResizes(int(f.Fd()), step.GetOutputDir())
			defer stop()
		}
	}
	defer tail.close()
	if req.input != "" {
		feedCtx, stopFeed := context.WithCancel(ctx)
		defer stopFeed()
		go c.feedStep(feedCtx, step.GetOutputDir(), req.stdin)
	}

	var cancelled time.Time
	lastState := time.Time{}
	tick := time.NewTicker(every)
	defer tick.Stop()
	done := ctx.Done()
	for {
		tail.poll()
		if time.Since(lastState) >= stepStateEvery {
			lastState = time.Now()
			var gone bool
			// Not ctx: a cancelled srun still follows its step to its end.
			if step, gone = c.lookStep(context.Background(), jobs, step); gone {
				// The job was requeued or is gone: its steps ended with it.
				tail.finish()
				restore()
				return c.errorf("%s: step %s is gone: its job's run ended", c.name, stepID)
			}
			if step.GetState().Terminal() {
				tail.finish()
				restore()
				return c.stepOutcome(step, stepID)
			}
		}
		if !cancelled.IsZero() && time.Since(cancelled) > stepCancelWait {
			tail.finish()
			restore()
			return c.errorf("step %s did not end %v after it was cancelled", stepID, stepCancelWait)
		}
		select {
		case <-done:
			// SIGINT / SIGTERM: the step's tasks die on every node; srun
			// stays to copy their last output and report how they ended.
			done = nil
			cancelled = time.Now()
			fmt.Fprintf(c.stderr, "srun: Cancelling step %s\n", stepID)
			cctx, cancel := context.WithTimeout(context.Background(), c.env.CallTimeout)
			_, err := jobs.CancelJobStep(cctx, &loomv1.CancelJobStepRequest{Name: step.GetName()})
			cancel()
			if err != nil && status.Code(err) != codes.FailedPrecondition {
				fmt.Fprintf(c.stderr, "srun: error: cancelling step %s: %s\n", stepID, status.Convert(err).Message())
			}
		case <-tick.C:
		}
	}
}

// lookStep reads step's state again: the new version, or step itself when
// the read failed for a while (a gateway restarting: srun looks again at
// its next tick); gone when the step is no more (NotFound: its job was
// requeued or has ended, and its steps with it).
func (c *cmd) lookStep(ctx context.Context, jobs loomv1.JobServiceClient, step *loomv1.JobStep) (_ *loomv1.JobStep, gone bool) {
	gctx, cancel := context.WithTimeout(ctx, c.env.CallTimeout)
	defer cancel()
	s, err := jobs.GetJobStep(gctx, &loomv1.GetJobStepRequest{Name: step.GetName()})
	switch {
	case err == nil:
		return s, false
	case status.Code(err) == codes.NotFound:
		return step, true
	}
	return step, false
}

// awaitPendingStep waits while step waits, for the job's nodes to report
// its allocation ready (slurmspec.ReasonStepProlog: the batch host's agent
// runs the prolog checks) or for resources the job's running steps hold,
// saying so as Slurm's srun does, and returns it once it has started or
// ended. Interrupted, it cancels the step.
//
// Slurm's srun says the first only at -v ("Resources allocated for job N
// and being configured, please wait"), the second always ("temporarily
// disabled, retrying": the first line it prints of a wait); a change of
// reason after that is its "still disabled, retrying", at -v only
// (measured beside Slurm 22.05: a step waiting 5 s for busy CPUs prints
// the one line, then "Step created"). "Step created" follows a wait srun
// spoke of: a step of the batch script itself may wait a moment for the
// agent's report, which races the script's first srun, and says nothing
// of it unless -v.
func (c *cmd) awaitPendingStep(ctx context.Context, jobID string, step *loomv1.JobStep, verbose bool) (*loomv1.JobStep, error) {
	jobs := c.jobsClient()
	said, reason := false, ""
	say := func(s *loomv1.JobStep) {
		if s.GetState() != loomv1.JobState_PENDING || s.GetReason() == reason {
			return
		}
		first := reason == ""
		reason = s.GetReason()
		switch {
		case reason == slurmspec.ReasonStepProlog:
			if verbose && first {
				fmt.Fprintf(c.stderr, "srun: Resources allocated for job %s and being configured, please wait\n", jobID)
				said = true
			}
		case !said:
			fmt.Fprintf(c.stderr, "srun: Job %s step creation temporarily disabled, retrying (%s)\n", jobID, reason)
			said = true
		case verbose:
			fmt.Fprintf(c.stderr, "srun: Job %s step creation still disabled, retrying (%s)\n", jobID, reason)
		}
	}
	say(step)
	tick := time.NewTicker(stepStateEvery)
	defer tick.Stop()
	for step.GetState() == loomv1.JobState_PENDING {
		select {
		case <-ctx.Done():
			cctx, cancel := context.WithTimeout(context.Background(), c.env.CallTimeout)
			_, err := jobs.CancelJobStep(cctx, &loomv1.CancelJobStepRequest{Name: step.GetName()})
			cancel()
			if err != nil && status.Code(err) != codes.FailedPrecondition && status.Code(err) != codes.NotFound {
				fmt.Fprintf(c.stderr, "srun: error: cancelling step %s.%d: %s\n", jobID, step.GetStepId(), status.Convert(err).Message())
			}
			fmt.Fprintln(c.stderr, "srun: Cancelled pending job step")
			return nil, c.errorf("Unable to create step for job %s: Job/step already completing or completed", jobID)
		case <-tick.C:
		}
		var gone bool
		if step, gone = c.lookStep(ctx, jobs, step); gone {
			// The job was requeued or is gone: its waiting steps with it.
			return nil, c.errorf("Unable to create step for job %s: Job/step already completing or completed", jobID)
		}
		say(step)
	}
	if step.GetStartTime() != nil && said {
		// Started (it may have ended since, between two looks).
		fmt.Fprintf(c.stderr, "srun: Step created for job %s\n", jobID)
	}
	return step, nil
}

// feedStep forwards in, srun's input, to the step whose output directory
// is dir: appended to its input file as it comes (the tasks' agents follow
// it), then the end-of-input file, at in's end or past
// slurmspec.MaxInputBytes. The input file is the agents' to make, as the
// job's owner, whose tasks read it (an srun run by someone else, an
// administrator, would make one they cannot read): it waits for it while
// ctx lasts. An input that never ends (a terminal) is forwarded until srun
// exits.
func (c *cmd) feedStep(ctx context.Context, dir string, in io.Reader) {
	var f *os.File
	for {
		var err error
		f, err = openStepInput(filepath.Join(dir, slurmspec.InputFile))
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(c.stderr, "srun: error: forwarding input: %v\n", err)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(stepTailEvery):
		}
	}
	defer f.Close()
	n, err := io.Copy(f, io.LimitReader(in, slurmspec.MaxInputBytes))
	var more [1]byte
	switch {
	case ctx.Err() != nil:
		return
	case err != nil:
		fmt.Fprintf(c.stderr, "srun: error: forwarding input: %v\n", err)
	case n == slurmspec.MaxInputBytes && readsMore(in, more[:]):
		fmt.Fprintf(c.stderr, "srun: error: input past %d bytes, the most a step takes, was not forwarded\n", int64(slurmspec.MaxInputBytes))
	}
	// Made only if absent (O_EXCL follows no link): anything already there
	// ends the input as well.
	eof, err := os.OpenFile(filepath.Join(dir, slurmspec.InputEOF), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil && !errors.Is(err, os.ErrExist) {
		fmt.Fprintf(c.stderr, "srun: error: ending input: %v\n", err)
		return
	}
	if err == nil {
		eof.Close()
	}
}

// openStepInput opens a step's input file to append to it. The step's
// directory is its job owner's, and srun may be someone else's (an
// administrator's srun --jobid): a link there would have that srun write
// where the owner points it, a FIFO would hang it. It opens only a regular
// file with one link, following no symbolic link.
func openStepInput(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("%s is a symbolic link, not the step's input file", path)
		}
		return nil, err
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, err
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG || st.Nlink != 1 {
		f.Close()
		return nil, fmt.Errorf("%s is not a regular file with one link, not the step's input file", path)
	}
	return f, nil
}

// forwardResizes writes the terminal fd's new size into the step's
// directory each time the window is resized (SIGWINCH), where the task's
// loom-stepd reads it: "ROWS COLS", written beside and renamed, so that it
// is never read half written. It returns the function that stops it.
func (c *cmd) forwardResizes(fd int, dir string) (stop func()) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGWINCH)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-sigs:
			}
			cols, rows, err := term.GetSize(fd)
			if err != nil {
				continue
			}
			// A new file of srun's own (CreateTemp makes it, following no
			// link), renamed over the last: the directory is the job
			// owner's, and a fixed name could be a link they left there.
			f, err := os.CreateTemp(dir, slurmspec.WinsizeFile+".*")
			if err != nil {
				continue
			}
			_, err = fmt.Fprintf(f, "%d %d\n", rows, cols)
			if cerr := f.Close(); err == nil && cerr == nil {
				err = os.Rename(f.Name(), filepath.Join(dir, slurmspec.WinsizeFile))
			}
			if err != nil {
				_ = os.Remove(f.Name())
			}
		}
	}()
	return func() {
		signal.Stop(sigs)
		close(done)
	}
}

// srunExit is srun's exit status for a step whose tasks ended with codes
// (and sigs, nil: not said), as Slurm 22.05's srun keeps it over its tasks
// (launch_slurm.c _task_finish): a task killed by a signal beats every exit,
// the highest signal n giving 128+n, else the highest exit code. The step's
// own ExitCode can differ (it is slurmstepd's: a node's last task's end).
// With no task codes, the step's.
func srunExit(step *loomv1.JobStep, codes, sigs []int32) int32 {
	if len(codes) == 0 {
		return step.GetExitCode()
	}
	var code, sig int32
	for rank, c := range codes {
		var s *int32
		if sigs != nil {
			s = &sigs[rank]
		}
		st, g := exitParts(c, s)
		code, sig = max(code, st), max(sig, g)
	}
	if sig > 0 {
		return 128 + sig
	}
	return code
}

// readsMore reports whether r has more to read (into buf).
func readsMore(r io.Reader, buf []byte) bool {
	n, _ := io.ReadFull(r, buf)
	return n > 0
}

// stepOutcome reports how a step's tasks ended, as srun does, and returns
// the exit status (srunExit). A node whose tasks never
// started (launch_failed) is reported as Slurm 22.05's srun reports a node
// that refused the launch, "Task launch for StepId=12.0 failed on node
// gpu-0002: why", then "Application launch failed: why" and "Job step
// aborted", not by its tasks' exit codes (1 each, the exit status: Slurm's
// is its error number, which Loom has none of).
func (c *cmd) stepOutcome(step *loomv1.JobStep, stepID string) error {
	codes := step.GetTaskExitCodes()
	sigs := step.GetTaskExitSignals()
	if len(sigs) != len(codes) {
		sigs = nil // not said (a step from before): 128+n reads as signal n
	}
	launchFailure := ""
	ranks := stepRanks(step)
	for k := range step.GetTasksPerNode() {
		host := ""
		if k < len(step.GetNodes()) {
			host = step.GetNodes()[k]
		}
		if k < len(step.GetLaunchFailed()) && step.GetLaunchFailed()[k] {
			why := "Unspecified error"
			if k < len(step.GetNodeMessages()) && step.GetNodeMessages()[k] != "" {
				why = termtext.Clean(step.GetNodeMessages()[k], 1<<12) // a node's report
			}
			fmt.Fprintf(c.stderr, "srun: error: Task launch for StepId=%s failed on node %s: %s\n", stepID, host, why)
			if launchFailure == "" {
				launchFailure = why
			}
			continue
		}
		// The node's agent killed its tasks past the job's memory.
		oom := k < len(step.GetNodeMessages()) && strings.Contains(step.GetNodeMessages()[k], "out of memory")
		for _, r := range ranks[k] {
			rank := int(r)
			if rank >= len(codes) || codes[rank] == 0 {
				continue
			}
			code := codes[rank]
			var sig *int32
			if sigs != nil {
				sig = &sigs[rank]
			}
			status, signal := exitParts(code, sig)
			switch {
			case oom && signal == 9:
				fmt.Fprintf(c.stderr, "srun: error: %s: task %d: Out Of Memory\n", host, rank)
			case signal > 0:
				fmt.Fprintf(c.stderr, "srun: error: %s: task %d: %s\n", host, rank, signalWord(int(signal)))
			default:
				fmt.Fprintf(c.stderr, "srun: error: %s: task %d: Exited with exit code %d\n", host, rank, status)
			}
		}
	}
	if launchFailure != "" {
		fmt.Fprintf(c.stderr, "srun: error: Application launch failed: %s\nsrun: Job step aborted\n", launchFailure)
	}
	if step.GetState() == loomv1.JobState_CANCELLED {
		fmt.Fprintf(c.stderr, "srun: error: step %s %s\n", stepID, strings.ToLower(reasonOr(step.GetReason(), "cancelled")))
	}
	worst := srunExit(step, codes, sigs)
	if worst == 0 && step.GetState() != loomv1.JobState_COMPLETED {
		if step.GetReason() != "" && step.GetState() != loomv1.JobState_CANCELLED {
			fmt.Fprintf(c.stderr, "srun: error: step %s: %s\n", stepID, step.GetReason())
		}
		worst = 1
	}
	if worst != 0 {
		return &Error{Code: int(worst)}
	}
	return nil
}

func reasonOr(r, def string) string {
	if r == "" {
		return def
	}
	return r
}

// signalWord is how srun names a task's killing signal ("Killed", "Terminated").
func signalWord(n int) string {
	switch n {
	case 9:
		return "Killed"
	case 15:
		return "Terminated"
	case 2:
		return "Interrupt"
	case 6:
		return "Aborted"
	case 11:
		return "Segmentation fault"
	}
	return fmt.Sprintf("Killed by signal %d", n)
}

// stepTail copies a step's task output files to srun's stdout and stderr
// as they grow, a line at a time per task (so that tasks' lines never mix),
// each prefixed by its rank with --label.
type stepTail struct {
	files []*tailFile
}

type tailFile struct {
	path string
	f    *os.File
	w    *labelWriter
	raw  io.Writer // instead of w: what comes, as it comes
}

func (f *tailFile) write(b []byte) {
	if f.raw != nil {
		_, _ = f.raw.Write(b)
		return
	}
	_, _ = f.w.Write(b)
}

// newStepTail follows every task's output and error files, each to
// dest(rank, "out" or "err").
func newStepTail(step *loomv1.JobStep, label bool, dest func(rank int32, ext string) io.Writer) *stepTail {
	t := &stepTail{}
	for rank := int32(0); rank < step.GetNumTasks(); rank++ {
		prefix := ""
		if label {
			prefix = fmt.Sprintf("%d: ", rank)
		}
		for _, ext := range []string{"out", "err"} {
			t.files = append(t.files, &tailFile{
				path: filepath.Join(step.GetOutputDir(), fmt.Sprintf("task-%d.%s", rank, ext)),
				w:    &labelWriter{prefix: prefix, w: dest(rank, ext)},
			})
		}
	}
	return t
}

// maxOutputFiles bounds the files srun -o/-e open for one step (one per
// task and stream at most).
const maxOutputFiles = 1024

// stepOutputs says where each task's output and error go, as srun's -o
// and -e do: srun's stdout and stderr by default; "none" nowhere; a task's
// rank, that task's alone; otherwise a filename pattern (%j, %s, %J, %t,
// %n, %N, %u, %x, %A, %a: slurmspec.ExpandPattern) relative to the step's
// working directory, each file emptied once at the start. Without -e the
// error goes where -o says. It returns the function that closes the files.
func (c *cmd) stepOutputs(req stepRequest, step *loomv1.JobStep) (func(rank int32, ext string) io.Writer, func(), error) {
	out := &lockedWriter{w: c.stdout}
	errw := &lockedWriter{w: c.stderr}
	if c.stdout == c.stderr {
		errw = out
	}
	env := c.env.Environ
	f := slurmspec.PatternFields{JobID: req.jobID, ArrayJobID: req.jobID, ArrayTaskID: "4294967294",
		Name: env["SLURM_JOB_NAME"], User: c.env.User, StepID: strconv.Itoa(int(step.GetStepId()))}
	if f.Name == "" && len(req.command) > 0 {
		f.Name = filepath.Base(req.command[0]) // srun's own allocation is named so
	}
	if a := env["SLURM_ARRAY_JOB_ID"]; a != "" {
		f.ArrayJobID, f.ArrayTaskID = a, env["SLURM_ARRAY_TASK_ID"]
	}
	files := map[string]*lockedWriter{}
	var opened []*os.File
	closeAll := func() {
		for _, fh := range opened {
			fh.Close()
		}
	}
	// where is the destinations of one option: w for each task (nil: as
	// the default says).
	where := func(opt string, def io.Writer) (func(rank int32) io.Writer, error) {
		switch {
		case opt == "" || opt == "all":
			return func(int32) io.Writer { return def }, nil
		case opt == "none":
			return func(int32) io.Writer { return io.Discard }, nil
		case isDigits(opt):
			only, err := strconv.Atoi(opt)
			if err != nil || only >= int(step.GetNumTasks()) {
				return nil, c.errorf("--output/--error=%s: task %s is not a task of the step (0..%d)", opt, opt, step.GetNumTasks()-1)
			}
			return func(rank int32) io.Writer {
				if int(rank) == only {
					return def
				}
				return io.Discard
			}, nil
		}
		ws := make([]io.Writer, step.GetNumTasks())
		for k, node := range stepRanks(step) {
			for _, rank := range node {
				g := f
				g.TaskID, g.NodeID = strconv.Itoa(int(rank)), strconv.Itoa(k)
				if k < len(step.GetNodes()) {
					g.Node = step.GetNodes()[k]
				}
				path := slurmspec.ExpandPattern(opt, g)
				if !filepath.IsAbs(path) {
					path = filepath.Join(req.dir, path)
				}
				if files[path] == nil {
					if len(files) >= maxOutputFiles {
						return nil, c.errorf("--output/--error=%s: more than %d files for one step", opt, maxOutputFiles)
					}
					fh, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC|os.O_APPEND, 0o600)
					if err != nil {
						return nil, c.errorf("%v", err)
					}
					opened = append(opened, fh)
					files[path] = &lockedWriter{w: fh}
				}
				if int(rank) < len(ws) {
					ws[rank] = files[path]
				}
			}
		}
		return func(r int32) io.Writer {
			if int(r) < len(ws) && ws[r] != nil {
				return ws[r]
			}
			return io.Discard
		}, nil
	}
	outTo, err := where(req.output, out)
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	errTo := outTo
	if req.errorTo != "" || req.output == "" || req.output == "all" || isDigits(req.output) {
		// -e given; or -o left stderr where it was.
		if errTo, err = where(req.errorTo, errw); err != nil {
			closeAll()
			return nil, nil, err
		}
	}
	return func(rank int32, ext string) io.Writer {
		if ext == "err" {
			return errTo(rank)
		}
		return outTo(rank)
	}, closeAll, nil
}

// cancelStepQuietly cancels a step srun will not follow.
func (c *cmd) cancelStepQuietly(step *loomv1.JobStep) {
	ctx, cancel := context.WithTimeout(context.Background(), c.env.CallTimeout)
	defer cancel()
	_, _ = c.jobsClient().CancelJobStep(ctx, &loomv1.CancelJobStepRequest{Name: step.GetName()})
}

// newTerminalTail follows task 0's output of a step run in a terminal
// (--pty), to stdout as it comes: a terminal's output is not lines (a
// prompt has no newline), and carries its error output too.
func newTerminalTail(step *loomv1.JobStep, stdout io.Writer) *stepTail {
	return &stepTail{files: []*tailFile{{
		path: filepath.Join(step.GetOutputDir(), "task-0.out"),
		raw:  stdout,
	}}}
}

// poll copies what the files gained since the last poll.
func (t *stepTail) poll() {
	buf := make([]byte, 64<<10)
	for _, f := range t.files {
		if f.f == nil {
			fh, err := os.Open(f.path)
			if err != nil {
				continue // not created yet
			}
			f.f = fh
		}
		for {
			n, err := f.f.Read(buf)
			if n > 0 {
				f.write(buf[:n])
			}
			if err != nil || n == 0 {
				if err != nil && !errors.Is(err, io.EOF) {
					f.f.Close()
					f.f = nil
				}
				break
			}
		}
	}
}

// finish copies the rest and ends each task's last unterminated line.
func (t *stepTail) finish() {
	t.poll()
	for _, f := range t.files {
		if f.w != nil {
			f.w.flush()
		}
	}
}

func (t *stepTail) close() {
	for _, f := range t.files {
		if f.f != nil {
			f.f.Close()
		}
	}
}

// cancelStep is scancel JOB.STEP or JOB_TASK.STEP (a step of one array
// task, "12_3.0"): it kills (or, with signal, signals) the tasks of one job
// step on every node. With confine (scancel -M or LOOM_CLUSTER), a step of
// a job in another cluster than the command's is unknown to it, as to
// Slurm's. Its refusals are Slurm 22.05's, "Kill job error on job step id
// ..." with a signal too: for a job that is unknown or has ended, naming
// JOB.STEP (JOB_TASK.STEP), exit 1, whoever asks; for another user's
// active job (the caller no administrator), "Invalid user id" naming the
// job alone, exit 218 (ESLURM_USER_ID_MISSING), whatever the step; for a
// step its active job does not have or that has ended, naming the job
// alone, exit 225 (ESLURM_INVALID_JOB_ID), and nothing at all for a
// signal to such a step or for a pending job's step, whoever asks
// (Slurm's slurmctld answers those OK). "The job alone" is, for an array
// task, the task's own job id, as slurmctld names it ("12_3.7" of task
// 12_3, job 16: "job step id 16"); -v's "Terminating step" line names it
// too, and, as Slurm's, comes only for a job that has started.
func (c *cmd) cancelStep(ctx context.Context, arg, signal string, verbose, confine bool) *Error {
	job, step, _ := strings.Cut(arg, ".")
	id, task, isTask := strings.Cut(job, "_")
	if !isDigits(id) || isTask && (!isDigits(task) || len(task) > 9) || !isDigits(step) || len(step) > 9 {
		return c.errorf("Invalid job id %s", arg)
	}
	job = trimZeros(id)
	if isTask {
		job += "_" + trimZeros(task)
	}
	step = trimZeros(step)
	const verb = "Kill job error on job step id"
	unknown := c.errorf("%s %s.%s: Invalid job id specified", verb, job, step)
	if confine && c.elsewhere(ctx, c.jobName(job)) {
		return unknown
	}
	// own is the job's own id, as slurmctld's answers name it: a task's
	// is not its array's.
	own := job
	if isTask || verbose {
		gctx, gcancel := c.call(ctx)
		j, err := c.jobsClient().GetJob(gctx, &loomv1.GetJobRequest{Name: c.jobName(job)})
		gcancel()
		switch {
		case status.Code(err) == codes.NotFound || err == nil && j.GetState().Terminal():
			return unknown
		case err == nil && j.GetState() == loomv1.JobState_PENDING:
			return nil // slurmctld answers OK, to anyone: nothing said, exit 0
		case err == nil:
			own = j.GetJobId()
		case isTask:
			return c.rpcError(verb+" "+job+"."+step, err)
		}
	}
	if verbose {
		fmt.Fprintf(c.stderr, "scancel: Terminating step %s.%s\n", own, step)
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	n, _ := strconv.Atoi(step) // at most 9 digits
	_, err := c.jobsClient().CancelJobStep(cctx, &loomv1.CancelJobStepRequest{Name: resname.StepIn(c.jobName(job), int32(n)), Signal: signal})
	if err == nil {
		return nil
	}
	code := status.Code(err)
	// A step that has ended is gone from slurmctld, as one never started:
	// the gateway's "already completing or completed" reads as NotFound.
	ended := code == codes.FailedPrecondition && status.Convert(err).Message() == msgAlreadyDone
	switch {
	case code == codes.NotFound || ended || code == codes.PermissionDenied:
		// The job says which: unknown or ended, another user's, or a step
		// it lacks.
		gctx, gcancel := c.call(ctx)
		defer gcancel()
		j, gerr := c.jobsClient().GetJob(gctx, &loomv1.GetJobRequest{Name: c.jobName(job)})
		if gerr == nil && j.GetJobId() != "" {
			own = j.GetJobId()
		}
		switch {
		case status.Code(gerr) == codes.NotFound || gerr == nil && j.GetState().Terminal():
			// Before the owner is checked: Slurm 22.05 says so to anyone.
			return unknown
		case gerr == nil && j.GetState() == loomv1.JobState_PENDING:
			return nil // slurmctld answers OK, to anyone: nothing said, exit 0
		case code == codes.PermissionDenied:
			// slurmctld checks the owner before the step, with a signal
			// too: "Invalid user id" (ESLURM_USER_ID_MISSING), naming the
			// job alone.
			e := c.errorf("%s %s: Invalid user id", verb, own)
			e.Code = exitUserIDMissing
			return e
		case gerr != nil:
			return c.errorf("%s %s.%s: %s", verb, job, step, status.Convert(err).Message())
		case signal != "":
			return nil // slurmctld answers OK: nothing said, exit 0
		}
		e := c.errorf("%s %s: Invalid job id specified", verb, own)
		e.Code = exitInvalidJobID
		return e
	case code == codes.Unavailable || code == codes.DeadlineExceeded || code == codes.Unimplemented:
		return c.rpcError(verb+" "+job+"."+step, err)
	}
	return c.errorf("%s %s.%s: %s", verb, job, step, status.Convert(err).Message())
}

// trimZeros is a number's digits without leading zeros ("0" for zero), as
// Slurm's tools print an id they parsed ("012" is job 12).
func trimZeros(digits string) string {
	if t := strings.TrimLeft(digits, "0"); t != "" {
		return t
	}
	return "0"
}

// stepRanks are the ranks of each of step's nodes, by local id, as its
// tasks ran: its tasks per node laid out by its srun -m
// (slurmspec.TaskRanks, the scheduler's rule; block's without one).
func stepRanks(step *loomv1.JobStep) [][]int32 {
	d, _ := slurmspec.ParseDistribution(step.GetDistribution())
	return slurmspec.TaskRanks(d, step.GetTasksPerNode())
}

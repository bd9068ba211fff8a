package cli

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/loom-ml/loom/libs/clusterspec"
	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/termtext"
	"github.com/loom-ml/loom/libs/trainingspec"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
)

// Serverless training: `loom jobs custom`, `loom hptuning` and `loom
// pipelines`, the gateway's TrainingService (Vertex's CustomJob,
// HyperparameterTuningJob and TrainingPipeline). Files are Vertex's JSON,
// camelCase or snake_case.

// DefaultLocation is the location of training resources when neither
// --location nor LOOM_LOCATION says (Loom stores it, it does not place
// anything).
const DefaultLocation = "us-central1"

// trainingCollection is one of the three resources' names and commands.
type trainingCollection struct {
	collection string // customJobs, hyperparameterTuningJobs, trainingPipelines
	noun       string // "custom job"
	command    string // "loom jobs custom"
}

var (
	customJobs = trainingCollection{"customJobs", "custom job", "loom jobs custom"}
	tuningJobs = trainingCollection{"hyperparameterTuningJobs", "tuning job", "loom hptuning"}
	pipelines  = trainingCollection{"trainingPipelines", "pipeline", "loom pipelines"}
)

// locationFlag adds --location to a command group, defaulting to
// LOOM_LOCATION, else DefaultLocation.
func (a *app) locationFlag(cmd *cobra.Command) {
	cmd.PersistentFlags().StringVar(&a.location, "location", config.Env("LOOM_LOCATION", DefaultLocation),
		"location of the training resources (LOOM_LOCATION)")
}

func (a *app) trainingParent() string {
	return "projects/" + a.project + "/locations/" + a.location
}

// trainingName is s when it is a full name, else the name of id s in c.
func (a *app) trainingName(c trainingCollection, s string) string {
	if strings.HasPrefix(s, "projects/") {
		return s
	}
	return a.trainingParent() + "/" + c.collection + "/" + s
}

func (a *app) training() (trainingv1.TrainingServiceClient, error) {
	c, err := a.client()
	if err != nil {
		return nil, err
	}
	return trainingv1.NewTrainingServiceClient(c), nil
}

// readTrainingFile reads a Vertex JSON file into m (camelCase or
// snake_case field names; an unknown field is an error naming it).
func readTrainingFile(file string, m proto.Message, what string) error {
	if file == "" {
		return usagef("give the %s file with -f FILE (Vertex's JSON; see docs/training.md)", what)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("read %s file: %w", what, err)
	}
	// As a cluster file is read: a syntax error names the field and its
	// line and column, a file cut short where it ends (protojson alone
	// said "proto: unexpected EOF").
	whole := strings.ToLower(codeWords.ReplaceAllString(what, "${1}_${2}")) // CustomJob: custom_job, as the API names it
	if err := clusterspec.DecodeJSON(data, m, whole); err != nil {
		return fmt.Errorf("%s: not a %s in JSON: %s", file, what, tidyParseError(err))
	}
	return nil
}

// requestFields rewrites an InvalidArgument about a request's resource so
// that its fields are named as in the file: "custom_job.job_spec..."
// becomes "job_spec...". Other errors are returned as they are.
func requestFields(err error, field string) error {
	return rewriteProblems(err, func(p string) string {
		// The field, and another that its reason names ("... is also
		// hyperparameter_tuning_job.study_spec.parameters[0]").
		return strings.ReplaceAll(strings.TrimPrefix(p, field+"."), " "+field+".", " ")
	})
}

// noneListed says that a training list in parent came back empty: that
// nothing matched filter, when there is one (the project may hold many
// others), else how to create one of what.
func noneListed(w io.Writer, what, parent, filter, create string) {
	if filter != "" {
		fmt.Fprintf(w, "No %s in %s match %s.\n", what, parent, shown(filter))
		return
	}
	fmt.Fprintf(w, "No %s in %s. Create one with `%s`.\n", what, parent, create)
}

// trainingState is a Vertex state without its prefix: "RUNNING".
func trainingState(s fmt.Stringer) string {
	return strings.TrimPrefix(strings.TrimPrefix(s.String(), "JOB_STATE_"), "PIPELINE_STATE_")
}

// withError is state followed by the error's message, when there is one,
// cleaned (shown): the service's messages quote programs' output and names.
func withError(state string, e *trainingv1.Status) string {
	if e.GetMessage() != "" {
		return state + ": " + shown(e.GetMessage())
	}
	return state
}

// Widths of the training tables' free-text columns: a failed resource's
// error or an INFEASIBLE trial's reason runs to hundreds of characters, a
// display name to 128, and one such row would push every other column off
// the screen. NAME is cut as `loom jobs list` cuts it; the whole is in get
// and -o json.
const (
	stateWidth = 60
	nameWidth  = 40
	modelWidth = 32
)

// stateCell is s as a STATE cell (cell, stateWidth), and whether it was
// cut short, for the table to say so under it (cutNote).
func stateCell(s string) (string, bool) {
	full := shown(s)
	// Cut as cellText cuts: by the columns it takes on a terminal (a CJK
	// character two), not its runes.
	return cellText(full, stateWidth), termtext.Width(strings.TrimSpace(full)) > stateWidth
}

// cutNote says, under a table some of whose STATE cells were cut short,
// what was cut and where it is whole.
func cutNote(w io.Writer, what, where string) error {
	_, err := fmt.Fprintf(w, "%s are cut short above; %s has them whole.\n", what, where)
	return err
}

// ---- loom jobs custom ----

func (a *app) jobsCustomCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "custom",
		Short: "Serverless CustomJobs: a program and the machines it needs, on a cluster made for it",
		Long: `CustomJobs as Vertex AI has them: worker pools of replicas, each running a
command (containerSpec) or a Python package (pythonPackageSpec), on a cluster
Loom provisions for the job and deletes when it ends (or on
persistentResourceId's cluster). The file is Vertex's JSON, camelCase or
snake_case.

  loom jobs custom create -f job.json --wait
  loom jobs custom list --filter 'state=JOB_STATE_RUNNING'
  loom jobs custom get 12
  loom jobs logs 12            (a CustomJob's id is its scheduler job's)
  loom jobs custom cancel 12`,
	}
	a.locationFlag(cmd)
	cmd.AddCommand(a.customCreateCommand(), a.customGetCommand(), a.customListCommand(), a.trainingCancelCommand(customJobs))
	return cmd
}

func (a *app) customCreateCommand() *cobra.Command {
	var file string
	var wait bool
	cmd := &cobra.Command{
		Use:   "create -f FILE [--wait]",
		Short: "Create a CustomJob from a JSON file",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			job := &trainingv1.CustomJob{}
			if err := readTrainingFile(file, job, "CustomJob"); err != nil {
				return err
			}
			return a.createCustomJob(cmd, a.trainingParent(), job, wait)
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "CustomJob file (Vertex's JSON)")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait for the job to end, showing its state changes")
	return cmd
}

// createCustomJob creates job under parent through the gateway's
// TrainingService and, with afterCreate, says what it made or with wait
// follows it to its end: `loom jobs custom create` and a serverless recipe
// launch alike.
func (a *app) createCustomJob(cmd *cobra.Command, parent string, job *trainingv1.CustomJob, wait bool) error {
	tc, err := a.training()
	if err != nil {
		return err
	}
	ctx, cancel := a.call(cmd.Context())
	j, err := tc.CreateCustomJob(ctx, &trainingv1.CreateCustomJobRequest{Parent: parent, CustomJob: job, RequestId: requestID()})
	cancel()
	if err != nil {
		return a.explain("create custom job", requestFields(err, "custom_job"))
	}
	return a.afterCreate(cmd, wait, j, customJobs, func(ctx context.Context, progress io.Writer) (proto.Message, error) {
		return a.followCustomJob(ctx, j.GetName(), progress)
	})
}

// afterCreate prints what a create accepted, or with wait follows it to
// its end (follow returns the final resource, and an error when it did
// not succeed).
func (a *app) afterCreate(cmd *cobra.Command, wait bool, created interface {
	proto.Message
	GetName() string
}, c trainingCollection, follow func(context.Context, io.Writer) (proto.Message, error)) error {
	out := cmd.OutOrStdout()
	id := shortName(created.GetName())
	if !wait {
		if a.output == "json" {
			return writeJSON(out, created)
		}
		fmt.Fprintf(out, "Created %s %s (%s); follow it with `%s get %s`\n", c.noun, id, created.GetName(), c.command, id)
		return nil
	}
	progress := a.progressOut(cmd)
	fmt.Fprintf(progress, "Created %s %s\n", c.noun, id)
	final, err := follow(cmd.Context(), progress)
	if a.output == "json" && final != nil {
		if werr := writeJSON(out, final); werr != nil {
			return werr
		}
	}
	return err
}

// poll calls get every poll interval until done says the answer is final.
// A resource just created is answered by the gateway from the moment it
// accepted it (it answers the accepted resource until the training service
// has read the create), so any error, NotFound included, ends the wait.
func poll[T proto.Message](ctx context.Context, a *app, what string, get func(context.Context) (T, error), each func(T) (done bool)) (T, error) {
	for {
		cctx, cancel := a.call(ctx)
		m, err := get(cctx)
		cancel()
		if err != nil {
			return m, a.explain(what, err)
		}
		if each(m) {
			return m, nil
		}
		select {
		case <-ctx.Done():
			return m, fmt.Errorf("stopped waiting (%s): %w", what, ctx.Err())
		case <-time.After(a.pollInterval):
		}
	}
}

// jobEnded reports whether a CustomJob or tuning job in s has ended.
func jobEnded(s trainingv1.JobState) bool {
	switch s {
	case trainingv1.JobState_JOB_STATE_SUCCEEDED, trainingv1.JobState_JOB_STATE_FAILED, trainingv1.JobState_JOB_STATE_CANCELLED,
		trainingv1.JobState_JOB_STATE_EXPIRED, trainingv1.JobState_JOB_STATE_PARTIALLY_SUCCEEDED:
		return true
	}
	return false
}

// describeCustomJob says where a CustomJob is: "RUNNING on cj-12 (2
// restarts)", "FAILED: replica 1 exited 3".
func describeCustomJob(j *trainingv1.CustomJob) string {
	s := trainingState(j.GetState())
	if j.GetState() == trainingv1.JobState_JOB_STATE_RUNNING || j.GetState() == trainingv1.JobState_JOB_STATE_PENDING {
		if c := j.GetCluster(); c != "" {
			s += " on " + shortName(c)
		}
	}
	if n := j.GetRestartCount(); n > 0 {
		s += fmt.Sprintf(" (%d %s)", n, plural(int(n), "restart", "restarts"))
	}
	return withError(s, j.GetError())
}

// followCustomJob polls a CustomJob until it ends, a line per change.
func (a *app) followCustomJob(ctx context.Context, name string, progress io.Writer) (*trainingv1.CustomJob, error) {
	tc, err := a.training()
	if err != nil {
		return nil, err
	}
	return follow(ctx, a, progress, "get custom job "+shortName(name), func(ctx context.Context) (*trainingv1.CustomJob, error) {
		return tc.GetCustomJob(ctx, &trainingv1.GetCustomJobRequest{Name: name})
	}, describeCustomJob, func(j *trainingv1.CustomJob) bool { return jobEnded(j.GetState()) },
		func(j *trainingv1.CustomJob) error {
			if j.GetState() == trainingv1.JobState_JOB_STATE_SUCCEEDED {
				return nil
			}
			id := shortName(name)
			what := describeCustomJob(j)
			if strings.Contains(what, "loom jobs logs") {
				// The service's message already says where the output is.
				return fmt.Errorf("custom job %s ended %s", id, what)
			}
			return fmt.Errorf("custom job %s ended %s; see its output with `loom jobs logs %s`", id, what, id)
		})
}

// follow polls get until ended says the resource has ended, printing
// describe's line whenever it changes, and returns the last answer with
// outcome's verdict on it (nil: it succeeded).
func follow[T proto.Message](ctx context.Context, a *app, progress io.Writer, what string, get func(context.Context) (T, error),
	describe func(T) string, ended func(T) bool, outcome func(T) error) (T, error) {
	last := ""
	m, err := poll(ctx, a, what, get, func(m T) bool {
		if d := describe(m); d != last {
			fmt.Fprintf(progress, "  %s  %s\n", a.now().Format("15:04:05"), d)
			last = d
		}
		return ended(m)
	})
	if err != nil {
		return m, err
	}
	return m, outcome(m)
}

func (a *app) customGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get ID",
		Short: "Show a CustomJob",
		Args:  exactArgs(1, "the custom job's id, e.g. `loom jobs custom get 12`"),
		RunE: func(cmd *cobra.Command, args []string) error {
			tc, err := a.training()
			if err != nil {
				return err
			}
			ctx, cancel := a.call(cmd.Context())
			defer cancel()
			j, err := tc.GetCustomJob(ctx, &trainingv1.GetCustomJobRequest{Name: a.trainingName(customJobs, args[0])})
			if err != nil {
				return a.notFoundHint(a.explain("get custom job "+args[0], err), err, "loom jobs custom list")
			}
			if a.output == "json" {
				return writeJSON(cmd.OutOrStdout(), j)
			}
			return renderCustomJob(cmd.OutOrStdout(), j, a.now())
		},
	}
}

// listFlags are the training lists' options.
type listFlags struct {
	filter string
	limit  int
}

func (f *listFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.filter, "filter", "", `AIP-160 filter, e.g. 'state=JOB_STATE_RUNNING AND labels.team=vision'`)
	cmd.Flags().IntVar(&f.limit, "limit", 0, "list at most this many (0: all)")
}

func (a *app) customListCommand() *cobra.Command {
	var f listFlags
	cmd := &cobra.Command{
		Use:     "list [--filter F] [--limit N]",
		Aliases: []string{"ls"},
		Short:   "List CustomJobs",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.limit < 0 {
				return usagef("--limit must not be negative, got %d; 0 lists all", f.limit)
			}
			tc, err := a.training()
			if err != nil {
				return err
			}
			req := &trainingv1.ListCustomJobsRequest{Parent: a.trainingParent(), Filter: f.filter}
			resp := &trainingv1.ListCustomJobsResponse{}
			resp.CustomJobs, err = collect(a, cmd, f.limit, func(ctx context.Context, token string, size int32) ([]*trainingv1.CustomJob, string, error) {
				req.PageToken, req.PageSize = token, size
				page, err := tc.ListCustomJobs(ctx, req)
				return page.GetCustomJobs(), page.GetNextPageToken(), err
			})
			if err != nil {
				return a.explain("list custom jobs", err)
			}
			if a.output == "json" {
				return writeJSON(cmd.OutOrStdout(), resp)
			}
			if len(resp.GetCustomJobs()) == 0 {
				noneListed(cmd.OutOrStdout(), "custom jobs", req.GetParent(), f.filter, "loom jobs custom create -f job.json")
				return nil
			}
			return renderCustomJobs(cmd.OutOrStdout(), resp.GetCustomJobs(), a.now())
		},
	}
	f.register(cmd)
	return cmd
}

// trainingCancelCommand is `cancel ID` of any of the three.
func (a *app) trainingCancelCommand(c trainingCollection) *cobra.Command {
	return &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a " + c.noun + " (it goes CANCELLING, then CANCELLED)",
		Args:  exactArgs(1, fmt.Sprintf("the %s's id, e.g. `%s cancel 12`", c.noun, c.command)),
		RunE: func(cmd *cobra.Command, args []string) error {
			tc, err := a.training()
			if err != nil {
				return err
			}
			ctx, cancel := a.call(cmd.Context())
			defer cancel()
			name := a.trainingName(c, args[0])
			switch c.collection {
			case customJobs.collection:
				_, err = tc.CancelCustomJob(ctx, &trainingv1.CancelCustomJobRequest{Name: name})
			case tuningJobs.collection:
				_, err = tc.CancelHyperparameterTuningJob(ctx, &trainingv1.CancelHyperparameterTuningJobRequest{Name: name})
			default:
				_, err = tc.CancelTrainingPipeline(ctx, &trainingv1.CancelTrainingPipelineRequest{Name: name})
			}
			if err != nil {
				return a.notFoundHint(a.explain("cancel "+c.noun+" "+args[0], err), err, c.command+" list")
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Cancel of %s %s requested; follow it with `%s get %s`\n", c.noun, shortName(name), c.command, shortName(name))
			return nil
		},
	}
}

// renderCustomJobs lists CustomJobs, their states (and errors) cut short
// for the table, which says so under it.
func renderCustomJobs(w io.Writer, js []*trainingv1.CustomJob, now time.Time) error {
	tw := newTable(w)
	cut := false
	row(tw, "ID", "NAME", "STATE", "MACHINE", "REPLICAS", "USER", "AGE")
	for _, j := range js {
		machine, replicas := "", int64(0)
		for i, p := range j.GetJobSpec().GetWorkerPoolSpecs() {
			if i == 0 {
				machine = p.GetMachineSpec().GetMachineType()
			}
			replicas += p.GetReplicaCount()
		}
		state, c := stateCell(describeCustomJob(j))
		cut = cut || c
		row(tw, shortName(j.GetName()), cell(j.GetDisplayName(), nameWidth), state, machine, strconv.FormatInt(replicas, 10), j.GetUser(), age(j.GetCreateTime(), now))
	}
	if err := tw.Flush(); err != nil || !cut {
		return err
	}
	return cutNote(w, "Errors", "`loom jobs custom get ID` (or -o json)")
}

func renderCustomJob(w io.Writer, j *trainingv1.CustomJob, now time.Time) error {
	tw := newTable(w)
	fmt.Fprintf(tw, "Name:\t%s\n", j.GetName())
	fmt.Fprintf(tw, "Display name:\t%s\n", shown(j.GetDisplayName()))
	fmt.Fprintf(tw, "State:\t%s\n", describeCustomJob(j))
	fmt.Fprintf(tw, "User:\t%s\n", j.GetUser())
	if j.GetJob() != "" {
		fmt.Fprintf(tw, "Scheduler job:\t%s\n", j.GetJob())
	}
	if j.GetCluster() != "" {
		fmt.Fprintf(tw, "Cluster:\t%s\n", j.GetCluster())
	}
	if u := j.GetJobSpec().GetBaseOutputDirectory().GetOutputUriPrefix(); u != "" {
		fmt.Fprintf(tw, "Output:\t%s\n", shown(u))
	}
	// Where `loom jobs logs` finds what its replicas print, or that it
	// goes with its cluster: said before the job ends, not found after.
	if d := j.GetOutputDir(); d != "" {
		fmt.Fprintf(tw, "Logs:\t%s (loom jobs logs %s)\n", shown(d), shortName(j.GetName()))
	} else if why := j.GetOutputWarning(); why != "" {
		fmt.Fprintf(tw, "Logs:\tdeleted with its cluster when it ends: %s\n", shown(why))
	}
	if len(j.GetLabels()) > 0 {
		fmt.Fprintf(tw, "Labels:\t%s\n", shown(labels(j.GetLabels())))
	}
	fmt.Fprintf(tw, "Created:\t%s\n", ago(j.GetCreateTime(), now))
	if j.GetStartTime() != nil {
		fmt.Fprintf(tw, "Started:\t%s\n", ago(j.GetStartTime(), now))
	}
	if j.GetEndTime() != nil {
		fmt.Fprintf(tw, "Ended:\t%s\n", ago(j.GetEndTime(), now))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return renderPools(w, j.GetJobSpec())
}

// renderPools lists a spec's worker pools.
func renderPools(w io.Writer, spec *trainingv1.CustomJobSpec) error {
	fmt.Fprintln(w, "Worker pools:")
	tw := newTable(w)
	row(tw, "  POOL", "MACHINE TYPE", "ACCELERATOR", "REPLICAS", "RUNS")
	for i, p := range spec.GetWorkerPoolSpecs() {
		acc := ""
		if m := p.GetMachineSpec(); m.GetAcceleratorCount() > 0 {
			acc = fmt.Sprintf("%d x %s", m.GetAcceleratorCount(), m.GetAcceleratorType())
		}
		row(tw, "  "+strconv.Itoa(i), shown(p.GetMachineSpec().GetMachineType()), shown(acc), strconv.FormatInt(p.GetReplicaCount(), 10), poolRuns(p))
	}
	return tw.Flush()
}

// poolRuns says what a pool runs: its command and args, its image, or
// "python -m MODULE", as a cell (args may hold any text but NUL).
func poolRuns(p *trainingv1.WorkerPoolSpec) string {
	if c := p.GetContainerSpec(); c != nil {
		if argv := append(append([]string{}, c.GetCommand()...), c.GetArgs()...); len(c.GetCommand()) > 0 {
			return cell(shellJoin(argv), 60)
		}
		return cell(c.GetImageUri(), 60)
	}
	if pp := p.GetPythonPackageSpec(); pp != nil {
		return cell(shellJoin(append([]string{"python3", "-m", pp.GetPythonModule()}, pp.GetArgs()...)), 60)
	}
	return ""
}

// ---- loom hptuning ----

func (a *app) hptuningCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "hptuning",
		Aliases: []string{"tuning"},
		Short:   "Hyperparameter tuning jobs: trials of a CustomJob searched for the best metric",
		Long: `HyperparameterTuningJobs as Vertex AI has them: a study (metrics, parameters,
algorithm; Bayesian optimisation by default), max/parallel trial counts and
the CustomJob spec each trial runs with its parameters as --ID=VALUE flags.

  loom hptuning create -f study.json --wait
  loom hptuning trials 20
  loom hptuning get 20
  loom hptuning cancel 20`,
	}
	a.locationFlag(cmd)
	cmd.AddCommand(a.tuningCreateCommand(), a.tuningGetCommand(), a.tuningListCommand(), a.tuningTrialsCommand(),
		a.trainingCancelCommand(tuningJobs))
	return cmd
}

func (a *app) tuningCreateCommand() *cobra.Command {
	var file string
	var wait bool
	cmd := &cobra.Command{
		Use:   "create -f FILE [--wait]",
		Short: "Create a tuning job from a JSON file",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			job := &trainingv1.HyperparameterTuningJob{}
			if err := readTrainingFile(file, job, "HyperparameterTuningJob"); err != nil {
				return err
			}
			tc, err := a.training()
			if err != nil {
				return err
			}
			ctx, cancel := a.call(cmd.Context())
			j, err := tc.CreateHyperparameterTuningJob(ctx, &trainingv1.CreateHyperparameterTuningJobRequest{Parent: a.trainingParent(), HyperparameterTuningJob: job, RequestId: requestID()})
			cancel()
			if err != nil {
				return a.explain("create tuning job", requestFields(err, "hyperparameter_tuning_job"))
			}
			return a.afterCreate(cmd, wait, j, tuningJobs, func(ctx context.Context, progress io.Writer) (proto.Message, error) {
				return a.followTuningJob(ctx, j.GetName(), progress)
			})
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "HyperparameterTuningJob file (Vertex's JSON)")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait for the study to end, showing trials as they finish and the best so far")
	return cmd
}

// trialEnded reports whether a trial has its final state.
func trialEnded(t *trainingv1.Trial) bool {
	return t.GetState() == trainingv1.Trial_SUCCEEDED || t.GetState() == trainingv1.Trial_INFEASIBLE
}

// metricValue is the trial's final value of metric, if it has one.
func metricValue(t *trainingv1.Trial, metric string) (float64, bool) {
	for _, m := range t.GetFinalMeasurement().GetMetrics() {
		if m.GetMetricId() == metric {
			return m.GetValue(), true
		}
	}
	return 0, false
}

// trialParams renders a trial's parameters "learning_rate=0.01
// batch_size=64", cleaned (shown): a categorical value is the study's text.
func trialParams(t *trainingv1.Trial) string {
	parts := make([]string, 0, len(t.GetParameters()))
	for _, p := range t.GetParameters() {
		parts = append(parts, p.GetParameterId()+"="+valueText(p.GetValue()))
	}
	return shown(strings.Join(parts, " "))
}

// valueText is a parameter value as a flag would carry it.
func valueText(v *structpb.Value) string {
	switch k := v.GetKind().(type) {
	case *structpb.Value_NumberValue:
		return strconv.FormatFloat(k.NumberValue, 'g', 6, 64)
	case *structpb.Value_StringValue:
		return k.StringValue
	case *structpb.Value_BoolValue:
		return strconv.FormatBool(k.BoolValue)
	}
	return ""
}

// primaryMetric is a study's first metric, the one "best" is judged by.
func primaryMetric(j *trainingv1.HyperparameterTuningJob) (string, bool) {
	ms := j.GetStudySpec().GetMetrics()
	if len(ms) == 0 {
		return "", false
	}
	return ms[0].GetMetricId(), ms[0].GetGoal() == trainingv1.StudySpec_MetricSpec_MAXIMIZE
}

// bestTrial is the tuning job's best trial: best_trial when the service
// names it, else the best final value of the first metric.
func bestTrial(j *trainingv1.HyperparameterTuningJob) *trainingv1.Trial {
	return bestOf(j, func(*trainingv1.Trial) bool { return true })
}

// bestOf is the best of j's trials that in holds: best_trial, the
// service's judgement of them all, when in holds it (the best of all is
// the best of any part holding it), else the best finite final value of
// the first metric among them (nil when none succeeded).
func bestOf(j *trainingv1.HyperparameterTuningJob, in func(*trainingv1.Trial) bool) *trainingv1.Trial {
	metric, maximize := primaryMetric(j)
	var best *trainingv1.Trial
	var bestV float64
	for _, t := range j.GetTrials() {
		if !in(t) {
			continue
		}
		if j.GetBestTrial() != "" && t.GetId() == j.GetBestTrial() {
			return t
		}
		v, ok := metricValue(t, metric)
		if !ok || t.GetState() != trainingv1.Trial_SUCCEEDED || math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		if best == nil || (maximize && v > bestV) || (!maximize && v < bestV) {
			best, bestV = t, v
		}
	}
	return best
}

// trialLine is one trial as progress and tables show it.
func trialLine(t *trainingv1.Trial, metric string) string {
	s := "trial " + t.GetId() + " " + trialStateText(t)
	if v, ok := metricValue(t, metric); ok {
		s += fmt.Sprintf("  %s=%s", metric, strconv.FormatFloat(v, 'g', 6, 64))
	}
	if p := trialParams(t); p != "" {
		s += "  " + p
	}
	return s
}

func trialStateText(t *trainingv1.Trial) string {
	s := t.GetState().String()
	if t.GetEarlyStopped() {
		s += " (stopped early)"
	}
	if t.GetState() == trainingv1.Trial_INFEASIBLE && t.GetInfeasibleReason() != "" {
		s += ": " + shown(t.GetInfeasibleReason())
	}
	return s
}

// followTuningJob polls a tuning job until it ends, printing its state
// changes and each trial as it finishes with the best so far: the best of
// the trials printed up to that line, never one printed after it (trials
// that end together come in one answer, whose best_trial may be a later
// one).
func (a *app) followTuningJob(ctx context.Context, name string, progress io.Writer) (*trainingv1.HyperparameterTuningJob, error) {
	tc, err := a.training()
	if err != nil {
		return nil, err
	}
	last := ""
	reported := map[string]bool{}
	j, err := poll(ctx, a, "get tuning job "+shortName(name), func(ctx context.Context) (*trainingv1.HyperparameterTuningJob, error) {
		return tc.GetHyperparameterTuningJob(ctx, &trainingv1.GetHyperparameterTuningJobRequest{Name: name})
	}, func(j *trainingv1.HyperparameterTuningJob) bool {
		stamp := a.now().Format("15:04:05")
		// Trials first: the job's end comes after its last trial's.
		defer func() {
			if d := withError(trainingState(j.GetState()), j.GetError()); d != last {
				fmt.Fprintf(progress, "  %s  %s\n", stamp, d)
				last = d
			}
		}()
		metric, _ := primaryMetric(j)
		trials := append([]*trainingv1.Trial(nil), j.GetTrials()...)
		sort.SliceStable(trials, func(x, y int) bool { return trialOrder(trials[x]) < trialOrder(trials[y]) })
		for _, t := range trials {
			if !trialEnded(t) || reported[t.GetId()] {
				continue
			}
			reported[t.GetId()] = true
			line := trialLine(t, metric)
			if b := bestOf(j, func(t *trainingv1.Trial) bool { return reported[t.GetId()] }); b != nil {
				if v, ok := metricValue(b, metric); ok {
					line += fmt.Sprintf("  | best: trial %s %s=%s", b.GetId(), metric, strconv.FormatFloat(v, 'g', 6, 64))
				}
			}
			fmt.Fprintf(progress, "  %s  %s (%d of %d)\n", stamp, line, len(reported), j.GetMaxTrialCount())
		}
		return jobEnded(j.GetState())
	})
	if err != nil {
		return j, err
	}
	metric, _ := primaryMetric(j)
	if b := bestTrial(j); b != nil {
		fmt.Fprintf(progress, "Best: %s\n", trialLine(b, metric))
	}
	if j.GetState() != trainingv1.JobState_JOB_STATE_SUCCEEDED {
		id := shortName(name)
		return j, fmt.Errorf("tuning job %s ended %s; see its trials with `loom hptuning trials %s`", id, withError(trainingState(j.GetState()), j.GetError()), id)
	}
	return j, nil
}

// trialOrder sorts trials by their numeric id.
func trialOrder(t *trainingv1.Trial) int {
	n, err := strconv.Atoi(t.GetId())
	if err != nil {
		return 1 << 30
	}
	return n
}

func (a *app) getTuningJob(ctx context.Context, arg string) (*trainingv1.HyperparameterTuningJob, error) {
	tc, err := a.training()
	if err != nil {
		return nil, err
	}
	ctx, cancel := a.call(ctx)
	defer cancel()
	j, err := tc.GetHyperparameterTuningJob(ctx, &trainingv1.GetHyperparameterTuningJobRequest{Name: a.trainingName(tuningJobs, arg)})
	if err != nil {
		return nil, a.notFoundHint(a.explain("get tuning job "+arg, err), err, "loom hptuning list")
	}
	return j, nil
}

func (a *app) tuningGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get ID",
		Short: "Show a tuning job",
		Args:  exactArgs(1, "the tuning job's id, e.g. `loom hptuning get 20`"),
		RunE: func(cmd *cobra.Command, args []string) error {
			j, err := a.getTuningJob(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if a.output == "json" {
				return writeJSON(cmd.OutOrStdout(), j)
			}
			return renderTuningJob(cmd.OutOrStdout(), j, a.now())
		},
	}
}

func (a *app) tuningTrialsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "trials ID",
		Short: "List a tuning job's trials, the best marked with *",
		Args:  exactArgs(1, "the tuning job's id, e.g. `loom hptuning trials 20`"),
		RunE: func(cmd *cobra.Command, args []string) error {
			j, err := a.getTuningJob(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if a.output == "json" {
				return writeJSON(cmd.OutOrStdout(), &trainingv1.HyperparameterTuningJob{Name: j.GetName(), Trials: j.GetTrials(), BestTrial: j.GetBestTrial(),
					OmittedTrials: j.GetOmittedTrials(), MeasurementsThinned: j.GetMeasurementsThinned()})
			}
			if len(j.GetTrials()) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "No trials yet (%s). Follow them with `loom hptuning trials %s` again.\n", trainingState(j.GetState()), args[0])
				return nil
			}
			return renderTrials(cmd.OutOrStdout(), j)
		},
	}
}

func (a *app) tuningListCommand() *cobra.Command {
	var f listFlags
	cmd := &cobra.Command{
		Use:     "list [--filter F] [--limit N]",
		Aliases: []string{"ls"},
		Short:   "List tuning jobs",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.limit < 0 {
				return usagef("--limit must not be negative, got %d; 0 lists all", f.limit)
			}
			tc, err := a.training()
			if err != nil {
				return err
			}
			req := &trainingv1.ListHyperparameterTuningJobsRequest{Parent: a.trainingParent(), Filter: f.filter}
			resp := &trainingv1.ListHyperparameterTuningJobsResponse{}
			resp.HyperparameterTuningJobs, err = collect(a, cmd, f.limit, func(ctx context.Context, token string, size int32) ([]*trainingv1.HyperparameterTuningJob, string, error) {
				req.PageToken, req.PageSize = token, size
				page, err := tc.ListHyperparameterTuningJobs(ctx, req)
				return page.GetHyperparameterTuningJobs(), page.GetNextPageToken(), err
			})
			if err != nil {
				return a.explain("list tuning jobs", err)
			}
			if a.output == "json" {
				return writeJSON(cmd.OutOrStdout(), resp)
			}
			if len(resp.GetHyperparameterTuningJobs()) == 0 {
				noneListed(cmd.OutOrStdout(), "tuning jobs", req.GetParent(), f.filter, "loom hptuning create -f study.json")
				return nil
			}
			return renderTuningJobs(cmd.OutOrStdout(), resp.GetHyperparameterTuningJobs(), a.now())
		},
	}
	f.register(cmd)
	return cmd
}

// renderTuningJobs lists tuning jobs, their states (and errors) cut short
// for the table, which says so under it.
func renderTuningJobs(w io.Writer, js []*trainingv1.HyperparameterTuningJob, now time.Time) error {
	tw := newTable(w)
	cut := false
	row(tw, "ID", "NAME", "STATE", "TRIALS", "BEST", "USER", "AGE")
	for _, j := range js {
		state, c := stateCell(withError(trainingState(j.GetState()), j.GetError()))
		cut = cut || c
		row(tw, shortName(j.GetName()), cell(j.GetDisplayName(), nameWidth), state, trialsDone(j), bestText(j), j.GetUser(), age(j.GetCreateTime(), now))
	}
	if err := tw.Flush(); err != nil || !cut {
		return err
	}
	return cutNote(w, "Errors", "`loom hptuning get ID` (or -o json)")
}

// trialsDone is "3/20": trials ended of max_trial_count.
func trialsDone(j *trainingv1.HyperparameterTuningJob) string {
	n := 0
	for _, t := range j.GetTrials() {
		if trialEnded(t) {
			n++
		}
	}
	return fmt.Sprintf("%d/%d", n, j.GetMaxTrialCount())
}

// bestText is "trial 2: val_loss=0.12", or "" when no trial succeeded yet.
func bestText(j *trainingv1.HyperparameterTuningJob) string {
	b := bestTrial(j)
	if b == nil {
		return ""
	}
	metric, _ := primaryMetric(j)
	if v, ok := metricValue(b, metric); ok {
		return fmt.Sprintf("trial %s: %s=%s", b.GetId(), metric, strconv.FormatFloat(v, 'g', 6, 64))
	}
	return "trial " + b.GetId()
}

func renderTuningJob(w io.Writer, j *trainingv1.HyperparameterTuningJob, now time.Time) error {
	tw := newTable(w)
	metric, maximize := primaryMetric(j)
	goal := "MINIMIZE"
	if maximize {
		goal = "MAXIMIZE"
	}
	running := 0
	for _, t := range j.GetTrials() {
		if t.GetState() == trainingv1.Trial_ACTIVE || t.GetState() == trainingv1.Trial_REQUESTED || t.GetState() == trainingv1.Trial_STOPPING {
			running++
		}
	}
	fmt.Fprintf(tw, "Name:\t%s\n", j.GetName())
	fmt.Fprintf(tw, "Display name:\t%s\n", shown(j.GetDisplayName()))
	fmt.Fprintf(tw, "State:\t%s\n", withError(trainingState(j.GetState()), j.GetError()))
	fmt.Fprintf(tw, "User:\t%s\n", j.GetUser())
	fmt.Fprintf(tw, "Metric:\t%s (%s)\n", metric, goal)
	fmt.Fprintf(tw, "Algorithm:\t%s\n", algorithmText(j.GetStudySpec()))
	fmt.Fprintf(tw, "Trials:\t%s ended, %d running, %d at once, %d failures allowed\n", trialsDone(j), running, j.GetParallelTrialCount(), j.GetMaxFailedTrialCount())
	if n := omittedNote(j); n != "" {
		fmt.Fprintf(tw, "Left out:\t%s\n", n)
	}
	if b := bestTrial(j); b != nil {
		fmt.Fprintf(tw, "Best:\t%s\n", trialLine(b, metric))
	}
	fmt.Fprintf(tw, "Created:\t%s\n", ago(j.GetCreateTime(), now))
	if j.GetEndTime() != nil {
		fmt.Fprintf(tw, "Ended:\t%s\n", ago(j.GetEndTime(), now))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "Parameters:")
	tw = newTable(w)
	row(tw, "  ID", "TYPE", "RANGE", "SCALE")
	var walk func(ps []*trainingv1.StudySpec_ParameterSpec, indent string)
	walk = func(ps []*trainingv1.StudySpec_ParameterSpec, indent string) {
		for _, p := range ps {
			typ, rng := paramRange(p)
			scale := strings.TrimSuffix(strings.TrimPrefix(p.GetScaleType().String(), "UNIT_"), "_SCALE")
			if p.GetScaleType() == trainingv1.StudySpec_ParameterSpec_SCALE_TYPE_UNSPECIFIED {
				scale = ""
			}
			row(tw, "  "+indent+p.GetParameterId(), typ, rng, scale)
			for _, c := range p.GetConditionalParameterSpecs() {
				walk([]*trainingv1.StudySpec_ParameterSpec{c.GetParameterSpec()}, indent+"  ")
			}
		}
	}
	walk(j.GetStudySpec().GetParameters(), "")
	return tw.Flush()
}

func algorithmText(s *trainingv1.StudySpec) string {
	a := s.GetAlgorithm().String()
	if s.GetAlgorithm() == trainingv1.StudySpec_ALGORITHM_UNSPECIFIED {
		a = "Bayesian optimisation (default)"
	}
	switch {
	case s.GetAshaStoppingSpec() != nil:
		a += ", ASHA early stopping"
	case s.GetMedianAutomatedStoppingSpec() != nil || s.GetDecayCurveStoppingSpec() != nil:
		a += ", median early stopping"
	}
	return a
}

// paramRange is a parameter's type and feasible values for people.
func paramRange(p *trainingv1.StudySpec_ParameterSpec) (string, string) {
	switch {
	case p.GetDoubleValueSpec() != nil:
		d := p.GetDoubleValueSpec()
		return "DOUBLE", fmt.Sprintf("[%g, %g]", d.GetMinValue(), d.GetMaxValue())
	case p.GetIntegerValueSpec() != nil:
		d := p.GetIntegerValueSpec()
		return "INTEGER", fmt.Sprintf("[%d, %d]", d.GetMinValue(), d.GetMaxValue())
	case p.GetCategoricalValueSpec() != nil:
		return "CATEGORICAL", cell(strings.Join(p.GetCategoricalValueSpec().GetValues(), ", "), 50)
	case p.GetDiscreteValueSpec() != nil:
		vs := make([]string, 0, len(p.GetDiscreteValueSpec().GetValues()))
		for _, v := range p.GetDiscreteValueSpec().GetValues() {
			vs = append(vs, strconv.FormatFloat(v, 'g', 6, 64))
		}
		return "DISCRETE", cellText(strings.Join(vs, ", "), 50)
	}
	return "", ""
}

// renderTrials lists trials by id, the best marked "*"; a state cut short
// for the table is said under it.
func renderTrials(w io.Writer, j *trainingv1.HyperparameterTuningJob) error {
	metric, _ := primaryMetric(j)
	best := bestTrial(j)
	trials := append([]*trainingv1.Trial(nil), j.GetTrials()...)
	sort.SliceStable(trials, func(x, y int) bool { return trialOrder(trials[x]) < trialOrder(trials[y]) })
	tw := newTable(w)
	cut := false
	row(tw, "TRIAL", "STATE", strings.ToUpper(metric), "STEPS", "PARAMETERS", "CUSTOM JOB")
	for _, t := range trials {
		id := t.GetId()
		if best != nil && t.GetId() == best.GetId() {
			id += " *"
		}
		val := ""
		if v, ok := metricValue(t, metric); ok {
			val = strconv.FormatFloat(v, 'g', 6, 64)
		}
		steps := ""
		if n := len(t.GetMeasurements()); n > 0 {
			steps = strconv.FormatInt(t.GetMeasurements()[n-1].GetStepCount(), 10)
		} else if t.GetFinalMeasurement() != nil {
			steps = strconv.FormatInt(t.GetFinalMeasurement().GetStepCount(), 10)
		}
		state, c := stateCell(trialStateText(t))
		cut = cut || c
		row(tw, id, state, val, steps, trialParams(t), shortName(t.GetCustomJob()))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if n := omittedNote(j); n != "" {
		fmt.Fprintf(w, "Left out: %s\n", n)
	}
	if !cut {
		return nil
	}
	return cutNote(w, "Reasons", "`loom hptuning trials "+shortName(j.GetName())+" -o json`")
}

// omittedNote says which trials a study's answer left out (omitted_trials:
// a study's answer is bounded, trainingspec.MaxTuningJobAnswer) and where
// each is still found, and whether its measurements were thinned; "" when
// nothing was left out.
func omittedNote(j *trainingv1.HyperparameterTuningJob) string {
	var parts []string
	if ids := j.GetOmittedTrials(); len(ids) > 0 {
		id := shortName(j.GetName())
		parts = append(parts, fmt.Sprintf("%d trials (%s), past the answer's %d MiB bound; trial k is CustomJob %s+k (`loom jobs custom get ID`)",
			len(ids), idRanges(ids), trainingspec.MaxTuningJobAnswer>>20, id))
	}
	if j.GetMeasurementsThinned() {
		parts = append(parts, "intermediate measurements thinned (`loom metrics ID` of the trial's CustomJob has every point)")
	}
	return shown(strings.Join(parts, "; "))
}

// idRanges writes numeric ids as ranges, "1-469, 471, 480-990", at most 10
// of them ("…" after).
func idRanges(ids []string) string {
	var out []string
	for i := 0; i < len(ids); {
		j := i
		for j+1 < len(ids) && trialOrder(&trainingv1.Trial{Id: ids[j+1]}) == trialOrder(&trainingv1.Trial{Id: ids[j]})+1 {
			j++
		}
		if len(out) == 10 {
			out = append(out, "…")
			break
		}
		if j == i {
			out = append(out, ids[i])
		} else {
			out = append(out, ids[i]+"-"+ids[j])
		}
		i = j + 1
	}
	return strings.Join(out, ", ")
}

// ---- loom pipelines ----

func (a *app) pipelinesCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "pipelines",
		Aliases: []string{"pipeline"},
		Short:   "Training pipelines: a CustomJob or tuning job, then its model registered",
		Long: `TrainingPipelines as Vertex AI has them: trainingTaskDefinition names a custom
task (trainingTaskInputs: a CustomJobSpec) or a tuning task (studySpec,
maxTrialCount, parallelTrialCount, trialJobSpec); when it succeeds, modelToUpload
is registered (as a new version of parentModel when set), with lineage.

  loom pipelines create -f pipeline.json --wait
  loom pipelines get 30
  loom pipelines cancel 30`,
	}
	a.locationFlag(cmd)
	cmd.AddCommand(a.pipelineCreateCommand(), a.pipelineGetCommand(), a.pipelineListCommand(), a.trainingCancelCommand(pipelines))
	return cmd
}

func (a *app) pipelineCreateCommand() *cobra.Command {
	var file string
	var wait bool
	cmd := &cobra.Command{
		Use:   "create -f FILE [--wait]",
		Short: "Create a training pipeline from a JSON file",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p := &trainingv1.TrainingPipeline{}
			if err := readTrainingFile(file, p, "TrainingPipeline"); err != nil {
				return err
			}
			tc, err := a.training()
			if err != nil {
				return err
			}
			ctx, cancel := a.call(cmd.Context())
			created, err := tc.CreateTrainingPipeline(ctx, &trainingv1.CreateTrainingPipelineRequest{Parent: a.trainingParent(), TrainingPipeline: p, RequestId: requestID()})
			cancel()
			if err != nil {
				return a.explain("create pipeline", requestFields(err, "training_pipeline"))
			}
			return a.afterCreate(cmd, wait, created, pipelines, func(ctx context.Context, progress io.Writer) (proto.Message, error) {
				return a.followPipeline(ctx, created.GetName(), progress)
			})
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "TrainingPipeline file (Vertex's JSON)")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait for the pipeline to end, showing its state changes")
	return cmd
}

func pipelineEnded(s trainingv1.PipelineState) bool {
	return s == trainingv1.PipelineState_PIPELINE_STATE_SUCCEEDED || s == trainingv1.PipelineState_PIPELINE_STATE_FAILED ||
		s == trainingv1.PipelineState_PIPELINE_STATE_CANCELLED
}

// describePipeline says where a pipeline is: its state, its backing job
// while it runs, the model version once registered.
func describePipeline(p *trainingv1.TrainingPipeline) string {
	return pipelineState(p, p.GetModelVersion())
}

// pipelineState is describePipeline naming the registered version as
// version gives it.
func pipelineState(p *trainingv1.TrainingPipeline, version string) string {
	s := trainingState(p.GetState())
	meta := p.GetTrainingTaskMetadata().GetStructValue().GetFields()
	switch {
	case version != "":
		s += ", model version " + version
	case meta["backingHyperparameterTuningJob"].GetStringValue() != "":
		s += ", tuning job " + shortName(meta["backingHyperparameterTuningJob"].GetStringValue())
	case meta["backingCustomJob"].GetStringValue() != "":
		s += ", custom job " + shortName(meta["backingCustomJob"].GetStringValue())
	}
	return withError(s, p.GetError())
}

// followPipeline polls a pipeline until it ends, a line per change.
func (a *app) followPipeline(ctx context.Context, name string, progress io.Writer) (*trainingv1.TrainingPipeline, error) {
	tc, err := a.training()
	if err != nil {
		return nil, err
	}
	return follow(ctx, a, progress, "get pipeline "+shortName(name), func(ctx context.Context) (*trainingv1.TrainingPipeline, error) {
		return tc.GetTrainingPipeline(ctx, &trainingv1.GetTrainingPipelineRequest{Name: name})
	}, describePipeline, func(p *trainingv1.TrainingPipeline) bool { return pipelineEnded(p.GetState()) },
		func(p *trainingv1.TrainingPipeline) error {
			if p.GetState() == trainingv1.PipelineState_PIPELINE_STATE_SUCCEEDED {
				return nil
			}
			id := shortName(name)
			return fmt.Errorf("pipeline %s ended %s; see it with `loom pipelines get %s`", id, describePipeline(p), id)
		})
}

func (a *app) pipelineGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get ID",
		Short: "Show a training pipeline",
		Args:  exactArgs(1, "the pipeline's id, e.g. `loom pipelines get 30`"),
		RunE: func(cmd *cobra.Command, args []string) error {
			tc, err := a.training()
			if err != nil {
				return err
			}
			ctx, cancel := a.call(cmd.Context())
			defer cancel()
			p, err := tc.GetTrainingPipeline(ctx, &trainingv1.GetTrainingPipelineRequest{Name: a.trainingName(pipelines, args[0])})
			if err != nil {
				return a.notFoundHint(a.explain("get pipeline "+args[0], err), err, "loom pipelines list")
			}
			if a.output == "json" {
				return writeJSON(cmd.OutOrStdout(), p)
			}
			return renderPipeline(cmd.OutOrStdout(), p, a.now())
		},
	}
}

// taskKind is "custom" or "tuning" by the task definition's file name.
func taskKind(p *trainingv1.TrainingPipeline) string {
	switch def := p.GetTrainingTaskDefinition(); {
	case strings.HasSuffix(def, "hyperparameter_tuning_task_1.0.0.yaml"):
		return "tuning"
	case strings.HasSuffix(def, "custom_task_1.0.0.yaml"):
		return "custom"
	}
	return ""
}

func renderPipeline(w io.Writer, p *trainingv1.TrainingPipeline, now time.Time) error {
	tw := newTable(w)
	fmt.Fprintf(tw, "Name:\t%s\n", p.GetName())
	fmt.Fprintf(tw, "Display name:\t%s\n", shown(p.GetDisplayName()))
	fmt.Fprintf(tw, "State:\t%s\n", withError(trainingState(p.GetState()), p.GetError()))
	fmt.Fprintf(tw, "User:\t%s\n", p.GetUser())
	fmt.Fprintf(tw, "Task:\t%s\n", taskKind(p))
	meta := p.GetTrainingTaskMetadata().GetStructValue().GetFields()
	if v := meta["backingCustomJob"].GetStringValue(); v != "" {
		fmt.Fprintf(tw, "Custom job:\t%s\n", v)
	}
	if v := meta["backingHyperparameterTuningJob"].GetStringValue(); v != "" {
		fmt.Fprintf(tw, "Tuning job:\t%s\n", v)
	}
	if v := meta["bestTrialId"].GetStringValue(); v != "" {
		fmt.Fprintf(tw, "Best trial:\t%s\n", v)
	}
	if m := p.GetModelToUpload(); m != nil {
		fmt.Fprintf(tw, "Model:\t%s\n", shown(m.GetDisplayName()))
	}
	if p.GetParentModel() != "" {
		fmt.Fprintf(tw, "Parent model:\t%s\n", shown(p.GetParentModel()))
	}
	if p.GetModelVersion() != "" {
		fmt.Fprintf(tw, "Model version:\t%s\n", p.GetModelVersion())
	}
	fmt.Fprintf(tw, "Created:\t%s\n", ago(p.GetCreateTime(), now))
	if p.GetEndTime() != nil {
		fmt.Fprintf(tw, "Ended:\t%s\n", ago(p.GetEndTime(), now))
	}
	return tw.Flush()
}

func (a *app) pipelineListCommand() *cobra.Command {
	var f listFlags
	cmd := &cobra.Command{
		Use:     "list [--filter F] [--limit N]",
		Aliases: []string{"ls"},
		Short:   "List training pipelines",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.limit < 0 {
				return usagef("--limit must not be negative, got %d; 0 lists all", f.limit)
			}
			tc, err := a.training()
			if err != nil {
				return err
			}
			req := &trainingv1.ListTrainingPipelinesRequest{Parent: a.trainingParent(), Filter: f.filter}
			resp := &trainingv1.ListTrainingPipelinesResponse{}
			resp.TrainingPipelines, err = collect(a, cmd, f.limit, func(ctx context.Context, token string, size int32) ([]*trainingv1.TrainingPipeline, string, error) {
				req.PageToken, req.PageSize = token, size
				page, err := tc.ListTrainingPipelines(ctx, req)
				return page.GetTrainingPipelines(), page.GetNextPageToken(), err
			})
			if err != nil {
				return a.explain("list pipelines", err)
			}
			if a.output == "json" {
				return writeJSON(cmd.OutOrStdout(), resp)
			}
			if len(resp.GetTrainingPipelines()) == 0 {
				noneListed(cmd.OutOrStdout(), "pipelines", req.GetParent(), f.filter, "loom pipelines create -f pipeline.json")
				return nil
			}
			return renderPipelines(cmd.OutOrStdout(), resp.GetTrainingPipelines(), a.now())
		},
	}
	f.register(cmd)
	return cmd
}

// renderPipelines lists pipelines, their states (and errors) cut short for
// the table, which says so under it.
func renderPipelines(w io.Writer, ps []*trainingv1.TrainingPipeline, now time.Time) error {
	tw := newTable(w)
	cut := false
	row(tw, "ID", "NAME", "STATE", "TASK", "MODEL", "USER", "AGE")
	cutErrors := false
	for _, p := range ps {
		// The version as `loom models get` takes it (toy-model@1): its
		// full name would fill STATE and be cut before its number.
		state, c := stateCell(pipelineState(p, versionRef(p.GetModelVersion())))
		cut = cut || c
		cutErrors = cutErrors || c && p.GetError().GetMessage() != ""
		row(tw, shortName(p.GetName()), cell(p.GetDisplayName(), nameWidth), state, taskKind(p),
			cell(p.GetModelToUpload().GetDisplayName(), modelWidth), p.GetUser(), age(p.GetCreateTime(), now))
	}
	if err := tw.Flush(); err != nil || !cut {
		return err
	}
	what := "States"
	if cutErrors {
		what = "Errors"
	}
	return cutNote(w, what, "`loom pipelines get ID` (or -o json)")
}

// versionRef is a model version's name as the models commands take it,
// MODEL@VERSION ("projects/p/models/m/versions/3" and
// "projects/p/locations/l/models/m@3" are "m@3"); another name as it is.
func versionRef(name string) string {
	if model, v, ok := strings.Cut(name, "/versions/"); ok && v != "" && !strings.Contains(v, "/") {
		return shortName(model) + "@" + v
	}
	if strings.Contains(shortName(name), "@") {
		return shortName(name)
	}
	return name
}

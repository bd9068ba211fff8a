package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/loom-ml/loom/cmd/loom/internal/slurmcli"
	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/recipes"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// recipesCommand is `loom recipes`: the catalog of training recipes
// (package libs/recipes), rendered and launched on a cluster or serverless.
func (a *app) recipesCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "recipes",
		Aliases: []string{"recipe"},
		Short:   "List, show and launch prebuilt training recipes (Llama 3, Gemma 2, GRPO)",
		Long: `Prebuilt training recipes: the model, parallelism, batch, learning-rate
schedule, checkpoints, nodes, GPUs and container image of a known-good run,
kept as versioned data. "launch" renders a Slurm batch script for a cluster
(torchrun, NeMo or MaxText with the distributed environment) and submits
it, or a CustomJob with --serverless. --small runs the recipe's small
variant with the built-in trainer, on any machine. See docs/recipes.md.`,
	}
	cmd.AddCommand(a.recipesListCommand(), a.recipesShowCommand(), a.recipesLaunchCommand())
	return cmd
}

func (a *app) recipesListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the recipes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rs := recipes.List()
			out := cmd.OutOrStdout()
			if a.output == "json" {
				// The list under its plural, as every list RPC's answer is.
				return writePlainJSON(out, struct {
					Recipes []*recipes.Recipe `json:"recipes"`
				}{rs})
			}
			return renderRecipes(out, rs)
		},
	}
}

// renderRecipes is `loom recipes list`'s table.
func renderRecipes(w io.Writer, rs []*recipes.Recipe) error {
	tw := newTable(w)
	row(tw, "NAME", "VERSION", "TASK", "FRAMEWORK", "MODEL", "NODES", "GPUS", "GPU", "PARALLELISM", "SEQ", "BATCH")
	for _, r := range rs {
		row(tw, r.Name, strconv.Itoa(r.Version), string(r.Task), string(r.Framework), r.Model,
			strconv.Itoa(r.Nodes), strconv.Itoa(r.Nodes*r.GPUsPerNode), r.GPUType, parallelism(r.Parallelism),
			strconv.Itoa(r.SeqLength), strconv.Itoa(r.GlobalBatch))
	}
	return tw.Flush()
}

// parallelism writes the degrees above 1, e.g. "tp8 fsdp8" ("-" for none).
func parallelism(p recipes.Parallelism) string {
	var parts []string
	for _, d := range []struct {
		name string
		n    int
	}{{"tp", p.Tensor}, {"pp", p.Pipeline}, {"cp", p.Context}, {"dp", p.Data}, {"fsdp", p.FSDP}} {
		if d.n > 1 {
			parts = append(parts, d.name+strconv.Itoa(d.n))
		}
	}
	return strings.Join(parts, " ")
}

func (a *app) recipesShowCommand() *cobra.Command {
	var sets []string
	cmd := &cobra.Command{
		Use:   "show NAME [--set key=value ...]",
		Short: "Show a recipe: its settings, sources and the keys --set accepts",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := recipeWith(args[0], sets)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if a.output == "json" {
				return writePlainJSON(out, r)
			}
			return renderRecipe(out, r)
		},
	}
	cmd.Flags().StringArrayVar(&sets, "set", nil, "override key=value (repeatable; see the keys below)")
	return cmd
}

// recipeWith is the named recipe with the overrides applied; a mistake in
// either is a usage error.
func recipeWith(name string, sets []string) (*recipes.Recipe, error) {
	r, err := recipes.Get(name)
	if err != nil {
		return nil, usageError{err}
	}
	r, err = recipes.Apply(r, sets)
	if err != nil {
		return nil, usageError{fmt.Errorf("--set: %w", err)}
	}
	return r, nil
}

// renderRecipe is `loom recipes show`: the recipe, then every key with its
// value and what it accepts.
func renderRecipe(w io.Writer, r *recipes.Recipe) error {
	tw := newTable(w)
	fmt.Fprintf(tw, "Name:\t%s (version %d)\n", r.Name, r.Version)
	fmt.Fprintf(tw, "Description:\t%s\n", r.Description)
	fmt.Fprintf(tw, "Task:\t%s\n", r.Task)
	fmt.Fprintf(tw, "Framework:\t%s (%s)\n", r.Framework, strings.TrimSpace(r.Entrypoint+" "+r.Config))
	fmt.Fprintf(tw, "Resources:\t%d × %d %s (%s)\n", r.Nodes, r.GPUsPerNode, r.GPUType, r.MachineType())
	fmt.Fprintf(tw, "Parallelism:\ttensor %d, pipeline %d, context %d, data %d, fsdp %d\n",
		r.Parallelism.Tensor, r.Parallelism.Pipeline, r.Parallelism.Context, r.Parallelism.Data, r.Parallelism.FSDP)
	fmt.Fprintf(tw, "Batch:\tglobal %d, micro %d, sequence length %d\n", r.GlobalBatch, r.MicroBatch, r.SeqLength)
	fmt.Fprintf(tw, "Learning rate:\t%s peak, %s min, %d warm-up steps, %s decay, %d steps\n",
		recipes.Value(r, "lr.peak"), recipes.Value(r, "lr.min"), r.LR.WarmupSteps, r.LR.Decay, r.LR.TotalSteps)
	fmt.Fprintf(tw, "Checkpoints:\tevery %d steps\n", r.CheckpointEvery)
	fmt.Fprintf(tw, "Image:\t%s\n", r.ContainerImage)
	fmt.Fprintf(tw, "Small variant:\tloom train %s\n", strings.Join(recipes.SmallArgs(r), " "))
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nSources:")
	for _, s := range r.Sources {
		fmt.Fprintf(w, "  - %s\n", s)
	}
	fmt.Fprintln(w, "\nKeys (--set key=value):")
	tw = newTable(w)
	row(tw, "  KEY", "TYPE", "VALUE", "ALLOWED")
	for _, k := range recipes.Keys() {
		v := recipes.Value(r, k.Name)
		if v == "" && strings.HasPrefix(k.Name, "rl.") {
			continue
		}
		row(tw, "  "+k.Name, k.Type(), v, k.Allowed())
	}
	return tw.Flush()
}

// writePlainJSON writes v (not a proto message) as indented JSON.
func writePlainJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode JSON: %w", err)
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// launchFlags are `loom recipes launch`'s options.
type launchFlags struct {
	cluster        string
	sets           []string
	fromCheckpoint string
	serverless     bool
	small          bool
	dryRun         bool
	wait           bool
	location       string
	outputDir      string
}

func (a *app) recipesLaunchCommand() *cobra.Command {
	var f launchFlags
	cmd := &cobra.Command{
		Use:   "launch NAME [--cluster C | --serverless] [flags]",
		Short: "Render a recipe and submit it: a batch script to a cluster, or a CustomJob",
		Long: `Render the recipe, with --set overrides, as a Slurm batch script and submit it
to --cluster through the gateway, as sbatch would; or, with --serverless, as
a CustomJob (worker pool 0 one node, pool 1 the others) on an ephemeral
cluster, or on --cluster when given. --from-checkpoint continues training
from a checkpoint: the script passes it to the framework's resume setting.
--small launches the recipe's small variant, the built-in trainer on one
node without GPUs. --dry-run prints what would be submitted.

Examples:
  loom recipes launch llama3-8b-pretrain --cluster a3-ultra-4node --set nodes=2
  loom recipes launch llama3-8b-pretrain --cluster a3-ultra-4node --from-checkpoint gs://b/ckpt/step-500
  loom recipes launch gemma2-9b-sft --serverless --set lr.peak=1e-5
  loom recipes launch llama3-8b-grpo --cluster demo --small --wait`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.launchRecipe(cmd, args[0], f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.cluster, "cluster", "", "cluster to run on (default without --serverless: LOOM_CLUSTER, else the project's only cluster)")
	fl.StringArrayVar(&f.sets, "set", nil, "override `KEY=VALUE` (repeatable; \"loom recipes show NAME\" lists the keys)")
	fl.StringVar(&f.fromCheckpoint, "from-checkpoint", "", "continue training from this checkpoint URI")
	fl.BoolVar(&f.serverless, "serverless", false, "launch as a CustomJob instead of a batch script")
	fl.BoolVar(&f.small, "small", false, "launch the small variant (the built-in trainer, one node, no GPU)")
	fl.BoolVar(&f.dryRun, "dry-run", false, "print the batch script (or CustomJob) instead of submitting it")
	fl.BoolVar(&f.wait, "wait", false, "wait for the job (or CustomJob) to end, showing its state changes")
	fl.StringVar(&f.location, "location", config.Env("LOOM_LOCATION", DefaultLocation), "location of a serverless launch (LOOM_LOCATION)")
	fl.StringVar(&f.outputDir, "output-dir", "", "base output directory of a serverless launch (AIP_CHECKPOINT_DIR is its checkpoints/)")
	return cmd
}

func (a *app) launchRecipe(cmd *cobra.Command, name string, f launchFlags) error {
	r, err := recipeWith(name, f.sets)
	if err != nil {
		return err
	}
	opts := recipes.Options{FromCheckpoint: f.fromCheckpoint, Small: f.small}
	out := cmd.OutOrStdout()
	if f.serverless {
		job, err := recipes.CustomJob(r, opts, recipes.CustomJobOptions{PersistentResourceID: f.cluster, BaseOutputDirectory: f.outputDir})
		if err != nil {
			return usageError{err}
		}
		if f.dryRun {
			return writeJSON(out, job)
		}
		return a.createCustomJob(cmd, a.parent()+"/locations/"+f.location, job, f.wait)
	}
	if f.outputDir != "" {
		return usagef("--output-dir is for --serverless; a batch job writes to its checkpoint directory")
	}
	script, err := recipes.Sbatch(r, opts)
	if err != nil {
		return usageError{err}
	}
	if f.dryRun && a.output != "json" {
		_, err := io.WriteString(out, script)
		return err
	}
	cluster := f.cluster
	if cluster == "" && !f.dryRun {
		if cluster, err = a.clusterOrOnly(cmd.Context(), "", ", or launch with --serverless"); err != nil {
			return err
		}
	}
	job, err := a.recipeJob(cmd.Context(), r, opts, script, cluster)
	if err != nil {
		return err
	}
	if f.dryRun {
		return writeJSON(out, job)
	}
	j, err := a.submitJob(cmd.Context(), job)
	if err != nil {
		return err
	}
	if !f.wait {
		if a.output == "json" {
			return writeJSON(out, j)
		}
		fmt.Fprintf(out, "Submitted recipe %s v%d as job %s (%s) on cluster %s\n", r.Name, r.Version, jobID(j), j.GetName(), shortName(j.GetCluster()))
		return nil
	}
	progress := a.progressOut(cmd)
	fmt.Fprintf(progress, "Submitted recipe %s v%d as job %s on cluster %s\n", r.Name, r.Version, jobID(j), shortName(j.GetCluster()))
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
}

// recipeJob turns the rendered script into the job to submit exactly as
// `loom slurm sbatch` does (slurmcli.ParseSbatch: the #SBATCH options
// become the job's nodes, GPUs, time and output), owned by the caller, with
// the recipe's environment (LOOM_RECIPE, the container image), running in
// the cluster's shared directory as `loom jobs submit` does.
func (a *app) recipeJob(ctx context.Context, r *recipes.Recipe, opts recipes.Options, script, cluster string) (*loomv1.Job, error) {
	user := a.userName(ctx)
	env := recipes.JobEnv(r, opts)
	env["USER"] = user
	job, err := slurmcli.ParseSbatch(nil, []byte(script), env)
	if err != nil {
		return nil, fmt.Errorf("the rendered script of %s is not one sbatch accepts (a bug): %w", r.Name, err)
	}
	job.WorkDir, job.SubmitDir = "", ""
	if cluster != "" {
		job.Cluster = a.clusterName(cluster)
	}
	job.User = user
	return job, nil
}

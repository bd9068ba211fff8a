package recipes

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/loom-ml/loom/libs/slurmspec"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
)

// Options are how a recipe is rendered.
type Options struct {
	// FromCheckpoint, when set, is continued training: the rendered job
	// starts from this checkpoint (its full training state) through the
	// framework's resume setting. A URI or path of 1 to 512 characters of
	// letters, digits and ._:/@+=,%~-.
	FromCheckpoint string
	// Small renders the small variant: the built-in trainer with the
	// recipe's small settings, one node, no GPU.
	Small bool
	// Trainer is the small variant's program (default "loom"), run as
	// `Trainer train --learning_rate=...`.
	Trainer string
}

// DefaultMasterPort is the rendezvous port when MASTER_PORT is not set in
// the job's environment (torch's default).
const DefaultMasterPort = 29500

// SmallTimeLimit is the small variant's time limit.
const SmallTimeLimit = "15:00"

// EnvRecipe names the recipe (name@version) in the job's environment.
const EnvRecipe = "LOOM_RECIPE"

// EnvContainerImage is the container image the site's runtime runs the
// steps in (the agent's runtime input, as for CustomJobs).
const EnvContainerImage = "LOOM_CONTAINER_IMAGE"

// JobName is the name the rendered job goes by: the recipe's, with
// "-small" for the small variant.
func JobName(r *Recipe, o Options) string {
	if o.Small {
		return r.Name + "-small"
	}
	return r.Name
}

// JobEnv is the environment the launcher adds to the submitted job: the
// recipe and, for a full run, its container image.
func JobEnv(r *Recipe, o Options) map[string]string {
	env := map[string]string{EnvRecipe: r.Name + "@" + strconv.Itoa(r.Version)}
	if !o.Small {
		env[EnvContainerImage] = r.ContainerImage
	}
	return env
}

func (o Options) check() error {
	if o.FromCheckpoint != "" && !safeString(o.FromCheckpoint) {
		return fmt.Errorf("--from-checkpoint must be 1 to %d characters of %s, got %q", maxStringLen, safeChars, o.FromCheckpoint)
	}
	if o.Small && o.FromCheckpoint != "" && localPath(o.FromCheckpoint) == "" {
		return fmt.Errorf("--from-checkpoint with --small must be a file:// URI or an absolute path (the built-in trainer reads a directory), got %q", o.FromCheckpoint)
	}
	return nil
}

// localPath is the directory of a file:// URI or absolute path, else "".
func localPath(uri string) string {
	p := strings.TrimPrefix(uri, "file://")
	if !strings.HasPrefix(p, "/") {
		return ""
	}
	return p
}

// mode is where a launcher runs: in a Slurm batch script (srun starts it on
// every node) or as a CustomJob replica (the training service starts it on
// every node, with the replica environment of libs/workerenv).
type mode int

const (
	slurmMode mode = iota
	vertexMode
)

// Sbatch renders r as a Slurm batch script: #SBATCH options for its
// nodes, GPUs and time, the distributed environment (MASTER_ADDR from the
// allocation's first host, MASTER_PORT), the output directory (Loom's
// checkpoint directory of the job, shared by its attempts, so a requeued job
// resumes), and srun starting the framework's launcher on every node.
func Sbatch(r *Recipe, o Options) (string, error) {
	if err := Validate(r); err != nil {
		return "", err
	}
	if err := o.check(); err != nil {
		return "", err
	}
	var b strings.Builder
	if o.Small {
		trainer := o.Trainer
		if trainer == "" {
			trainer = "loom"
		}
		fmt.Fprintf(&b, "#!/bin/sh\n")
		fmt.Fprintf(&b, "# %s v%d, small variant: the built-in trainer stands in for %s on one node without GPUs.\n", r.Name, r.Version, describeProgram(r))
		fmt.Fprintf(&b, "# Rendered by `loom recipes launch --small`; see docs/recipes.md.\n")
		fmt.Fprintf(&b, "#SBATCH --job-name=%s\n", JobName(r, o))
		fmt.Fprintf(&b, "#SBATCH --nodes=1\n")
		fmt.Fprintf(&b, "#SBATCH --time=%s\n", SmallTimeLimit)
		fmt.Fprintf(&b, "#SBATCH --output=%%x-%%j.out\n")
		b.WriteString("set -eu\n\n")
		fmt.Fprintf(&b, "export %s=%s@%d\n", EnvRecipe, r.Name, r.Version)
		b.WriteString("# The model goes to Vertex's AIP_MODEL_DIR for a CustomJob, else Loom's\n")
		b.WriteString("# LOOM_MODEL_DIR (a job with a model output), else beside the job's output.\n")
		fmt.Fprintf(&b, "AIP_MODEL_DIR=\"${AIP_MODEL_DIR:-${LOOM_MODEL_DIR:-$PWD/%s-${SLURM_JOB_ID:-0}-model}}\"\n", JobName(r, o))
		b.WriteString("LOOM_MODEL_DIR=\"$AIP_MODEL_DIR\"\n")
		b.WriteString("export AIP_MODEL_DIR LOOM_MODEL_DIR\n")
		if o.FromCheckpoint != "" {
			dir := localPath(o.FromCheckpoint)
			b.WriteString("# Continued training: the trainer resumes from the latest checkpoint here.\n")
			fmt.Fprintf(&b, "export LOOM_CHECKPOINT_DIR=%s AIP_CHECKPOINT_DIR=%s\n", dir, dir)
		}
		b.WriteString("\nexec " + renderCommand(append([]string{trainer, "train"}, SmallArgs(r)...)) + "\n")
		return b.String(), nil
	}
	secs, _, _ := slurmspec.ParseTimeLimit(r.TimeLimit)
	tasks := 1
	if r.Framework == NeMo {
		tasks = r.GPUsPerNode
	}
	fmt.Fprintf(&b, "#!/bin/bash\n")
	fmt.Fprintf(&b, "# %s v%d: %s.\n", r.Name, r.Version, r.Description)
	fmt.Fprintf(&b, "# %s on %d × %d %s (%s); container image %s.\n", describeProgram(r), r.Nodes, r.GPUsPerNode, r.GPUType, r.MachineType(), r.ContainerImage)
	fmt.Fprintf(&b, "# Rendered by `loom recipes launch`; see docs/recipes.md.\n")
	fmt.Fprintf(&b, "#SBATCH --job-name=%s\n", JobName(r, o))
	fmt.Fprintf(&b, "#SBATCH --nodes=%d\n", r.Nodes)
	fmt.Fprintf(&b, "#SBATCH --ntasks-per-node=%d\n", tasks)
	fmt.Fprintf(&b, "#SBATCH --gpus-per-node=%d\n", r.GPUsPerNode)
	fmt.Fprintf(&b, "#SBATCH --exclusive\n")
	fmt.Fprintf(&b, "#SBATCH --time=%s\n", formatTime(secs))
	fmt.Fprintf(&b, "#SBATCH --output=%%x-%%j.out\n")
	b.WriteString("set -euo pipefail\n\n")
	b.WriteString("# The distributed environment: the rendezvous is on the allocation's first node.\n")
	b.WriteString("MASTER_ADDR=\"$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\"\n")
	fmt.Fprintf(&b, "MASTER_PORT=\"${MASTER_PORT:-%d}\"\n", DefaultMasterPort)
	b.WriteString("export MASTER_ADDR MASTER_PORT\n")
	writeCommon(&b, r, o)
	b.WriteString("\n" + renderCommand(launcher(r, o, slurmMode)) + "\n")
	return b.String(), nil
}

// writeCommon writes the lines the batch script and the CustomJob's
// launcher share: the recipe's name, the output directory and the resume
// point.
func writeCommon(b *strings.Builder, r *Recipe, o Options) {
	fmt.Fprintf(b, "export %s=%s@%d\n", EnvRecipe, r.Name, r.Version)
	b.WriteString("# Checkpoints and logs: Vertex's AIP_CHECKPOINT_DIR for a CustomJob, else the\n")
	b.WriteString("# job's LOOM_CHECKPOINT_DIR (kept across its attempts, so a requeued job resumes).\n")
	fmt.Fprintf(b, "OUTPUT_DIR=\"${AIP_CHECKPOINT_DIR:-${LOOM_CHECKPOINT_DIR:-$PWD/checkpoints/%s}}\"\n", r.Name)
	b.WriteString("export OUTPUT_DIR\n")
	if o.FromCheckpoint != "" {
		fmt.Fprintf(b, "# Continued training from %s (%s).\n", o.FromCheckpoint, resumeSetting(r))
	}
}

// resumeSetting names the framework's setting --from-checkpoint renders.
func resumeSetting(r *Recipe) string {
	switch {
	case r.Framework == NeMo:
		return "NeMo's resume.resume_from_path"
	case r.Framework == MaxText:
		return "MaxText's load_full_state_path"
	case r.Task == GRPO:
		return "TRL's --resume_from_checkpoint"
	default:
		return "torchtitan's --checkpoint.initial_load_path"
	}
}

func describeProgram(r *Recipe) string {
	switch r.Framework {
	case NeMo:
		return "NeMo (" + r.Config + ")"
	case MaxText:
		return "MaxText (" + r.Config + ")"
	}
	return "torchrun " + r.Entrypoint
}

// formatTime writes seconds as Slurm's [days-]hours:minutes:seconds.
func formatTime(secs int64) string {
	d, rest := secs/86400, secs%86400
	s := fmt.Sprintf("%02d:%02d:%02d", rest/3600, rest%3600/60, rest%60)
	if d > 0 {
		s = fmt.Sprintf("%d-%s", d, s)
	}
	return s
}

// SmallArgs are the built-in trainer's arguments for r's small variant
// (after `loom train`): the flags of the built-in trainer (docs/training.md,
// "The built-in trainer").
func SmallArgs(r *Recipe) []string {
	s := r.Small
	return []string{
		"--learning_rate=" + fmtNum(s.LearningRate),
		"--batch_size=" + strconv.Itoa(s.BatchSize),
		"--hidden_units=" + strconv.Itoa(s.HiddenUnits),
		"--weight_decay=" + fmtNum(s.WeightDecay),
		"--epochs=" + strconv.Itoa(s.Epochs),
		"--seed=" + strconv.Itoa(s.Seed),
	}
}

// launcher is the command that starts the framework on every node, with
// the distributed environment of m.
func launcher(r *Recipe, o Options, m mode) []string {
	g := strconv.Itoa(r.GPUsPerNode)
	// torchrun's rendezvous: every node's launcher meets at MASTER_ADDR.
	torchrun := func(nnodes, id string) []string {
		return []string{"torchrun", "--nnodes=" + nnodes, "--nproc_per_node=" + g,
			"--rdzv_id=" + id, "--rdzv_backend=c10d", "--rdzv_endpoint=$MASTER_ADDR:$MASTER_PORT"}
	}
	var cmd []string
	switch {
	case r.Framework == NeMo && m == slurmMode:
		// One task per GPU: Lightning's SLURMEnvironment takes the ranks
		// from srun's task variables.
		cmd = []string{"srun", "--ntasks-per-node=" + g, "--kill-on-bad-exit=1", r.Entrypoint}
	case r.Framework == NeMo:
		cmd = append(torchrun("$WORLD_SIZE", "$CLOUD_ML_JOB_ID"), "$(command -v "+r.Entrypoint+")")
	case r.Framework == MaxText && m == slurmMode:
		// One process per node; jax.distributed finds its peers from Slurm.
		cmd = []string{"srun", "--ntasks-per-node=1", "--kill-on-bad-exit=1", "python3", "-m", r.Entrypoint}
	case r.Framework == MaxText:
		cmd = []string{"python3", "-m", r.Entrypoint}
	case m == slurmMode:
		cmd = append([]string{"srun", "--ntasks-per-node=1", "--kill-on-bad-exit=1"},
			append(torchrun("$SLURM_NNODES", "$SLURM_JOB_ID"), "-m", r.Entrypoint)...)
	default:
		cmd = append(torchrun("$WORLD_SIZE", "$CLOUD_ML_JOB_ID"), "-m", r.Entrypoint)
	}
	return append(cmd, frameworkArgs(r, o)...)
}

// frameworkArgs are the framework's own arguments: the recipe's model,
// parallelism, batch, schedule, checkpoints and resume point.
func frameworkArgs(r *Recipe, o Options) []string {
	p := r.Parallelism
	itoa := strconv.Itoa
	switch {
	case r.Framework == NeMo:
		verb, factory := "pretrain", r.Config
		if r.Task == SFT {
			// Full-parameter fine-tuning: no LoRA adapter.
			verb, factory = "finetune", r.Config+"(peft_scheme=None)"
		}
		args := []string{"llm", verb, "--factory", factory, "--yes",
			"trainer.num_nodes=" + itoa(r.Nodes),
			"trainer.devices=" + itoa(r.GPUsPerNode),
			"trainer.max_steps=" + itoa(r.LR.TotalSteps),
			"trainer.strategy.tensor_model_parallel_size=" + itoa(p.Tensor),
			"trainer.strategy.pipeline_model_parallel_size=" + itoa(p.Pipeline),
			"trainer.strategy.context_parallel_size=" + itoa(p.Context),
			"data.seq_length=" + itoa(r.SeqLength),
			"data.global_batch_size=" + itoa(r.GlobalBatch),
			"data.micro_batch_size=" + itoa(r.MicroBatch),
			"optim.config.lr=" + fmtNum(r.LR.Peak),
			"optim.lr_scheduler.min_lr=" + fmtNum(r.LR.Min),
			"optim.lr_scheduler.warmup_steps=" + itoa(r.LR.WarmupSteps),
			"optim.lr_scheduler.max_steps=" + itoa(r.LR.TotalSteps),
			"log.log_dir=$OUTPUT_DIR",
			"log.ckpt.every_n_train_steps=" + itoa(r.CheckpointEvery),
			"resume.resume_if_exists=true",
		}
		switch {
		case o.FromCheckpoint != "":
			args = append(args, "resume.resume_from_path="+o.FromCheckpoint)
		case r.InitCheckpoint != "":
			args = append(args, "resume.restore_config.path="+r.InitCheckpoint)
		}
		return args
	case r.Framework == MaxText:
		args := []string{r.Config,
			"run_name=" + r.Name,
			"base_output_directory=$OUTPUT_DIR",
			"hardware=gpu",
			"model_name=" + r.Model,
			"tokenizer_path=" + r.Tokenizer,
			"dataset_type=hf",
			"hf_path=" + r.Dataset,
			"max_target_length=" + itoa(r.SeqLength),
			"per_device_batch_size=" + itoa(r.MicroBatch),
			"gradient_accumulation_steps=" + itoa(r.GlobalBatch/(r.MicroBatch*r.Nodes*r.GPUsPerNode)),
			"steps=" + itoa(r.LR.TotalSteps),
			"learning_rate=" + fmtNum(r.LR.Peak),
			"warmup_steps_fraction=" + fmtNum(float64(r.LR.WarmupSteps)/float64(r.LR.TotalSteps)),
			"cosine_learning_rate_final_fraction=" + fmtNum(r.LR.Min/r.LR.Peak),
			"enable_checkpointing=true",
			"async_checkpointing=false",
			"checkpoint_period=" + itoa(r.CheckpointEvery),
			"ici_tensor_parallelism=" + itoa(p.Tensor),
			"ici_fsdp_parallelism=" + itoa(p.FSDP),
			"dcn_data_parallelism=" + itoa(p.Data),
		}
		switch {
		case o.FromCheckpoint != "":
			args = append(args, "load_full_state_path="+o.FromCheckpoint)
		case r.InitCheckpoint != "":
			args = append(args, "load_parameters_path="+r.InitCheckpoint)
		}
		return args
	case r.Task == GRPO:
		accum := r.GlobalBatch / (r.MicroBatch * p.BatchReplicas())
		args := []string{
			"--model_name_or_path=" + r.Model,
			"--dataset_name=" + r.Dataset,
			"--output_dir=$OUTPUT_DIR",
			"--learning_rate=" + fmtNum(r.LR.Peak),
			"--lr_scheduler_type=" + r.LR.Decay,
			"--warmup_steps=" + itoa(r.LR.WarmupSteps),
			"--max_steps=" + itoa(r.LR.TotalSteps),
			"--per_device_train_batch_size=" + itoa(r.MicroBatch),
			"--gradient_accumulation_steps=" + itoa(accum),
			"--num_generations=" + itoa(r.RL.NumGenerations),
			"--max_prompt_length=" + itoa(r.RL.MaxPromptLength),
			"--max_completion_length=" + itoa(r.RL.MaxCompletionLength),
			"--beta=" + fmtNum(r.RL.KLBeta),
			"--save_steps=" + itoa(r.CheckpointEvery),
			"--bf16=true",
		}
		if p.FSDP > 1 {
			args = append(args, "--fsdp=full_shard auto_wrap")
		}
		if o.FromCheckpoint != "" {
			args = append(args, "--resume_from_checkpoint="+o.FromCheckpoint)
		}
		return args
	default:
		// torchtitan: the config file, then every value the recipe sets.
		args := []string{
			"--job.config_file=" + r.Config,
			"--job.dump_folder=$OUTPUT_DIR",
			"--model.hf_assets_path=" + r.Tokenizer,
			"--training.dataset_path=" + r.Dataset,
			"--training.seq_len=" + itoa(r.SeqLength),
			"--training.local_batch_size=" + itoa(r.MicroBatch),
			"--training.global_batch_size=" + itoa(r.GlobalBatch),
			"--training.steps=" + itoa(r.LR.TotalSteps),
			"--optimizer.lr=" + fmtNum(r.LR.Peak),
			"--lr_scheduler.warmup_steps=" + itoa(r.LR.WarmupSteps),
			"--lr_scheduler.decay_type=" + r.LR.Decay,
			"--lr_scheduler.min_lr_factor=" + fmtNum(r.LR.Min/r.LR.Peak),
			"--parallelism.tensor_parallel_degree=" + itoa(p.Tensor),
			"--parallelism.pipeline_parallel_degree=" + itoa(p.Pipeline),
			"--parallelism.context_parallel_degree=" + itoa(p.Context),
			"--parallelism.data_parallel_replicate_degree=" + itoa(p.Data),
			"--parallelism.data_parallel_shard_degree=" + itoa(p.FSDP),
			"--checkpoint.enable_checkpoint",
			"--checkpoint.folder=checkpoint",
			"--checkpoint.interval=" + itoa(r.CheckpointEvery),
		}
		if o.FromCheckpoint != "" {
			args = append(args, "--checkpoint.initial_load_path="+o.FromCheckpoint)
		}
		return args
	}
}

// shellWord quotes one word for the script: a word with a $ is an
// expansion the renderer wrote ("$OUTPUT_DIR"), double-quoted; a word of
// safe characters stays bare; anything else (a space, parentheses) is
// single-quoted. Values from overrides are safe characters only.
func shellWord(s string) string {
	if strings.Contains(s, "$") {
		return `"` + s + `"`
	}
	if safeString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// renderCommand writes argv as one shell command: an option (a word with a
// leading dash or an "=") starts a continued line, and so does a program
// after a complete option (srun's "--kill-on-bad-exit=1", then "nemo");
// other words (an option's value, a subcommand) stay on the line before.
func renderCommand(argv []string) string {
	var b strings.Builder
	option := func(a string) bool { return strings.HasPrefix(a, "-") || strings.Contains(a, "=") }
	for i, a := range argv {
		w := shellWord(a)
		switch {
		case i == 0:
			b.WriteString(w)
		case option(a), strings.Contains(argv[i-1], "="):
			b.WriteString(" \\\n    " + w)
		default:
			b.WriteString(" " + w)
		}
	}
	return b.String()
}

// CustomJobOptions are the serverless launch's settings.
type CustomJobOptions struct {
	// PersistentResourceID, when set, runs on that Loom cluster instead of
	// an ephemeral one.
	PersistentResourceID string
	// BaseOutputDirectory, when set, is the job's base_output_directory
	// (AIP_CHECKPOINT_DIR is its checkpoints/).
	BaseOutputDirectory string
}

// CustomJob renders r as a Vertex CustomJob: worker pool 0 one replica
// (the primary), pool 1 the other nodes - 1, each a node of the recipe's
// machine type with its GPUs, running the container image with the same
// launcher as the batch script, whose distributed environment comes from
// the replica environment (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK).
// The small variant is one replica of `loom train` without accelerators.
func CustomJob(r *Recipe, o Options, c CustomJobOptions) (*trainingv1.CustomJob, error) {
	if err := Validate(r); err != nil {
		return nil, err
	}
	if err := o.check(); err != nil {
		return nil, err
	}
	for _, v := range []struct{ name, value string }{{"persistent resource", c.PersistentResourceID}, {"base output directory", c.BaseOutputDirectory}} {
		if v.value != "" && !safeString(v.value) {
			return nil, fmt.Errorf("%s must be 1 to %d characters of %s, got %q", v.name, maxStringLen, safeChars, v.value)
		}
	}
	env := []*trainingv1.EnvVar{{Name: EnvRecipe, Value: r.Name + "@" + strconv.Itoa(r.Version)}}
	job := &trainingv1.CustomJob{
		DisplayName: JobName(r, o),
		Labels:      map[string]string{"loom-recipe": r.Name, "loom-recipe-version": strconv.Itoa(r.Version)},
		JobSpec:     &trainingv1.CustomJobSpec{PersistentResourceId: c.PersistentResourceID},
	}
	if c.BaseOutputDirectory != "" {
		job.JobSpec.BaseOutputDirectory = &trainingv1.GcsDestination{OutputUriPrefix: c.BaseOutputDirectory}
	}
	if o.Small {
		trainer := o.Trainer
		if trainer == "" {
			trainer = "loom"
		}
		if o.FromCheckpoint != "" {
			dir := localPath(o.FromCheckpoint)
			env = append(env, &trainingv1.EnvVar{Name: "LOOM_CHECKPOINT_DIR", Value: dir}, &trainingv1.EnvVar{Name: "AIP_CHECKPOINT_DIR", Value: dir})
		}
		secs, _, _ := slurmspec.ParseTimeLimit(SmallTimeLimit)
		job.JobSpec.Scheduling = &trainingv1.Scheduling{Timeout: durationpb.New(time.Duration(secs) * time.Second)}
		args := SmallArgs(r)
		if c.BaseOutputDirectory == "" {
			// No AIP_MODEL_DIR then, and the trainer refuses to run without
			// a model directory: one in the replica's working directory (the
			// owner's home on the job's cluster), as the batch script's.
			args = append(args, "--out="+JobName(r, o)+"-model")
		}
		job.JobSpec.WorkerPoolSpecs = []*trainingv1.WorkerPoolSpec{{
			MachineSpec:  &trainingv1.MachineSpec{MachineType: SmallMachineType},
			ReplicaCount: 1,
			Task: &trainingv1.WorkerPoolSpec_ContainerSpec{ContainerSpec: &trainingv1.ContainerSpec{
				ImageUri: r.ContainerImage, Command: []string{trainer, "train"}, Args: args, Env: env}},
		}}
		return job, nil
	}
	var b strings.Builder
	b.WriteString("set -euo pipefail\n")
	b.WriteString("# The distributed environment is the replica's: MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK.\n")
	if r.Framework == MaxText {
		b.WriteString("export JAX_COORDINATOR_IP=\"$MASTER_ADDR\" JAX_COORDINATOR_PORT=\"$MASTER_PORT\" NNODES=\"$WORLD_SIZE\" NODE_RANK=\"$RANK\"\n")
	}
	writeCommon(&b, r, o)
	b.WriteString("exec " + renderCommand(launcher(r, o, vertexMode)) + "\n")
	secs, _, _ := slurmspec.ParseTimeLimit(r.TimeLimit)
	job.JobSpec.Scheduling = &trainingv1.Scheduling{Timeout: durationpb.New(time.Duration(secs) * time.Second)}
	pool := func(replicas int) *trainingv1.WorkerPoolSpec {
		return &trainingv1.WorkerPoolSpec{
			MachineSpec:  &trainingv1.MachineSpec{MachineType: r.MachineType(), AcceleratorType: r.VertexAcceleratorType(), AcceleratorCount: int32(r.GPUsPerNode)},
			ReplicaCount: int64(replicas),
			Task: &trainingv1.WorkerPoolSpec_ContainerSpec{ContainerSpec: &trainingv1.ContainerSpec{
				ImageUri: r.ContainerImage, Command: []string{"/bin/bash", "-c", b.String()}, Env: env}},
		}
	}
	job.JobSpec.WorkerPoolSpecs = []*trainingv1.WorkerPoolSpec{pool(1)}
	if r.Nodes > 1 {
		job.JobSpec.WorkerPoolSpecs = append(job.JobSpec.WorkerPoolSpecs, pool(r.Nodes-1))
	}
	return job, nil
}

// SmallMachineType is the machine type of the small variant's CustomJob.
const SmallMachineType = "n2-standard-4"

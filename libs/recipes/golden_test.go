package recipes

import (
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/slurmspec"
)

// update rewrites the golden files from what the renderer writes now:
// go test ./libs/recipes -run Golden -update (then read the diff).
var update = flag.Bool("update", false, "rewrite testdata/golden from the renderer")

// checkGolden compares got with testdata/golden/name.
func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Fatalf("%s differs from the renderer's output\n--- got:\n%s--- want:\n%s", path, got, want)
	}
}

// renderings are what the golden files hold for each recipe: the batch
// script, the same from a checkpoint, the small variant, and the
// CustomJobs.
var renderings = []struct {
	suffix string
	opts   Options
	cj     bool
}{
	{".sbatch", Options{}, false},
	{".resume.sbatch", Options{FromCheckpoint: "gs://ckpt/run-1/step-1000"}, false},
	{".small.sbatch", Options{Small: true}, false},
	{".customjob.json", Options{}, true},
	{".small.customjob.json", Options{Small: true}, true},
}

func render(t *testing.T, r *Recipe, o Options, cj bool) string {
	t.Helper()
	if !cj {
		s, err := Sbatch(r, o)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	job, err := CustomJob(r, o, CustomJobOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	// protojson's spacing varies on purpose; normalise it for the file.
	return strings.ReplaceAll(string(b), ":  ", ": ") + "\n"
}

func TestGoldenRenderings(t *testing.T) {
	t.Parallel()
	for _, r := range List() {
		for _, g := range renderings {
			t.Run(r.Name+g.suffix, func(t *testing.T) {
				t.Parallel()
				checkGolden(t, r.Name+g.suffix, render(t, r, g.opts, g.cj))
			})
		}
	}
}

// sbatchOptions returns a script's #SBATCH options as a map.
func sbatchOptions(t *testing.T, script string) map[string]string {
	t.Helper()
	opts := map[string]string{}
	for _, line := range strings.Split(script, "\n") {
		rest, ok := strings.CutPrefix(line, "#SBATCH ")
		if !ok {
			continue
		}
		k, v, _ := strings.Cut(strings.TrimPrefix(rest, "--"), "=")
		opts[k] = v
	}
	return opts
}

// TestSbatchSaysWhatTheRecipeSays checks each rendered script against its
// recipe, independently of the golden files: the #SBATCH options, the
// distributed environment and the framework's command line carry the
// recipe's nodes, GPUs, parallelism, batch and schedule.
func TestSbatchSaysWhatTheRecipeSays(t *testing.T) {
	t.Parallel()
	for _, r := range List() {
		s, err := Sbatch(r, Options{})
		if err != nil {
			t.Fatal(err)
		}
		o := sbatchOptions(t, s)
		tasks := "1"
		if r.Framework == NeMo {
			tasks = itoa(r.GPUsPerNode)
		}
		for k, want := range map[string]string{"job-name": r.Name, "nodes": itoa(r.Nodes), "gpus-per-node": itoa(r.GPUsPerNode),
			"ntasks-per-node": tasks, "output": "%x-%j.out", "exclusive": ""} {
			if got, ok := o[k]; !ok || got != want {
				t.Errorf("%s: #SBATCH --%s=%q, want %q", r.Name, k, got, want)
			}
		}
		// The time limit is one Slurm (and the gateway, with slurmspec) accepts.
		if secs, _, err := slurmspec.ParseTimeLimit(o["time"]); err != nil || secs != mustSeconds(t, r.TimeLimit) {
			t.Errorf("%s: #SBATCH --time=%s: %d s, %v; want the recipe's %s", r.Name, o["time"], secs, err, r.TimeLimit)
		}
		for _, want := range []string{
			`MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"`,
			`MASTER_PORT="${MASTER_PORT:-29500}"`,
			"export MASTER_ADDR MASTER_PORT",
			"export LOOM_RECIPE=" + r.Name + "@1",
		} {
			if !strings.Contains(s, want+"\n") {
				t.Errorf("%s: script lacks %q", r.Name, want)
			}
		}
		var want []string
		p := r.Parallelism
		switch {
		case r.Framework == NeMo:
			want = []string{"srun --ntasks-per-node=" + itoa(r.GPUsPerNode), "nemo llm ", "trainer.num_nodes=" + itoa(r.Nodes),
				"trainer.devices=" + itoa(r.GPUsPerNode), "tensor_model_parallel_size=" + itoa(p.Tensor),
				"pipeline_model_parallel_size=" + itoa(p.Pipeline), "context_parallel_size=" + itoa(p.Context),
				"data.global_batch_size=" + itoa(r.GlobalBatch), "data.micro_batch_size=" + itoa(r.MicroBatch),
				"data.seq_length=" + itoa(r.SeqLength), "optim.config.lr=" + fmtNum(r.LR.Peak),
				"warmup_steps=" + itoa(r.LR.WarmupSteps), "every_n_train_steps=" + itoa(r.CheckpointEvery)}
		case r.Framework == MaxText:
			want = []string{"srun --ntasks-per-node=1", "python3 -m MaxText.train " + r.Config, "ici_fsdp_parallelism=" + itoa(p.FSDP),
				"ici_tensor_parallelism=" + itoa(p.Tensor), "dcn_data_parallelism=" + itoa(p.Data),
				"max_target_length=" + itoa(r.SeqLength), "per_device_batch_size=" + itoa(r.MicroBatch),
				"learning_rate=" + fmtNum(r.LR.Peak), "checkpoint_period=" + itoa(r.CheckpointEvery)}
		default:
			want = []string{"srun --ntasks-per-node=1", "torchrun", `"--nnodes=$SLURM_NNODES"`, "--nproc_per_node=" + itoa(r.GPUsPerNode),
				`"--rdzv_id=$SLURM_JOB_ID"`, "--rdzv_backend=c10d", `"--rdzv_endpoint=$MASTER_ADDR:$MASTER_PORT"`, "-m " + r.Entrypoint}
			if r.Task == GRPO {
				want = append(want, "--learning_rate="+fmtNum(r.LR.Peak), "--num_generations="+itoa(r.RL.NumGenerations),
					"--per_device_train_batch_size="+itoa(r.MicroBatch), "--save_steps="+itoa(r.CheckpointEvery))
			} else {
				want = append(want, "--parallelism.tensor_parallel_degree="+itoa(p.Tensor),
					"--parallelism.data_parallel_shard_degree="+itoa(p.FSDP), "--training.seq_len="+itoa(r.SeqLength),
					"--training.global_batch_size="+itoa(r.GlobalBatch), "--optimizer.lr="+fmtNum(r.LR.Peak),
					"--checkpoint.interval="+itoa(r.CheckpointEvery))
			}
		}
		// The command line, its continuations joined.
		line := strings.ReplaceAll(s, " \\\n    ", " ")
		for _, w := range want {
			if !strings.Contains(line, w) {
				t.Errorf("%s: command line lacks %q", r.Name, w)
			}
		}
	}
}

// TestFromCheckpointResumes checks that --from-checkpoint reaches the
// framework's resume setting, and only then.
func TestFromCheckpointResumes(t *testing.T) {
	t.Parallel()
	const uri = "gs://ckpt/run-1/step-1000"
	for _, r := range List() {
		want := map[Framework]string{NeMo: "resume.resume_from_path=" + uri, MaxText: "load_full_state_path=" + uri}[r.Framework]
		if want == "" && r.Task == GRPO {
			want = "--resume_from_checkpoint=" + uri
		} else if want == "" {
			want = "--checkpoint.initial_load_path=" + uri
		}
		plain, err := Sbatch(r, Options{})
		if err != nil {
			t.Fatal(err)
		}
		resumed, err := Sbatch(r, Options{FromCheckpoint: uri})
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(plain, uri) || !strings.Contains(resumed, want+"\n") && !strings.Contains(resumed, want+" \\\n") {
			t.Errorf("%s: want %q only with --from-checkpoint:\n%s", r.Name, want, resumed)
		}
		job, err := CustomJob(r, Options{FromCheckpoint: uri}, CustomJobOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cmd := job.GetJobSpec().GetWorkerPoolSpecs()[0].GetContainerSpec().GetCommand(); !strings.Contains(cmd[len(cmd)-1], want) {
			t.Errorf("%s: CustomJob command lacks %q", r.Name, want)
		}
		// A fine-tuning recipe starts from its init checkpoint unless told otherwise.
		if r.InitCheckpoint != "" && (!strings.Contains(plain, r.InitCheckpoint) || strings.Contains(resumed, r.InitCheckpoint)) {
			t.Errorf("%s: init checkpoint %s: want it without --from-checkpoint only", r.Name, r.InitCheckpoint)
		}
	}
	// The small variant resumes from a local directory only.
	r, _ := Get("llama3-8b-pretrain")
	s, err := Sbatch(r, Options{Small: true, FromCheckpoint: "file:///data/ck"})
	if err != nil || !strings.Contains(s, "export LOOM_CHECKPOINT_DIR=/data/ck AIP_CHECKPOINT_DIR=/data/ck\n") {
		t.Errorf("small from file:///data/ck: %v\n%s", err, s)
	}
	if _, err := Sbatch(r, Options{Small: true, FromCheckpoint: "gs://b/ck"}); err == nil || !strings.Contains(err.Error(), "--from-checkpoint with --small") {
		t.Errorf("small from gs://: %v", err)
	}
	if _, err := Sbatch(r, Options{FromCheckpoint: "gs://b/ck; rm -rf /"}); err == nil || !strings.Contains(err.Error(), "--from-checkpoint must be") {
		t.Errorf("unsafe --from-checkpoint: %v", err)
	}
}

// TestCustomJobPools checks the worker pools: pool 0 one replica, pool 1
// the other nodes, each node's machine and GPUs, the image, the launcher
// taking its ranks from the replica environment.
func TestCustomJobPools(t *testing.T) {
	t.Parallel()
	for _, r := range List() {
		job, err := CustomJob(r, Options{}, CustomJobOptions{PersistentResourceID: "a3u"})
		if err != nil {
			t.Fatal(err)
		}
		pools := job.GetJobSpec().GetWorkerPoolSpecs()
		// The CustomJob bounds (docs/training.md "Limits"; libs/trainingspec validates them at the gateway).
		for i, p := range pools {
			c := p.GetContainerSpec()
			if i >= 4 || p.GetReplicaCount() > 64 || len(c.GetCommand()) > 256 || len(c.GetArgs()) > 256 || len(c.GetEnv()) > 128 {
				t.Errorf("%s: pool %d is past the CustomJob bounds: %v", r.Name, i, p)
			}
		}
		if b, _ := proto.Marshal(job); len(b) > 256<<10 {
			t.Errorf("%s: CustomJob is %d bytes, past 256 KiB", r.Name, len(b))
		}
		wantPools := 1
		if r.Nodes > 1 {
			wantPools = 2
		}
		if len(pools) != wantPools || pools[0].GetReplicaCount() != 1 || (r.Nodes > 1 && pools[1].GetReplicaCount() != int64(r.Nodes-1)) {
			t.Fatalf("%s: pools %v, want 1 + %d replicas", r.Name, pools, r.Nodes-1)
		}
		if job.GetJobSpec().GetPersistentResourceId() != "a3u" || job.GetDisplayName() != r.Name ||
			job.GetJobSpec().GetScheduling().GetTimeout().AsDuration() <= 0 {
			t.Errorf("%s: job %v", r.Name, job)
		}
		for _, p := range pools {
			m, c := p.GetMachineSpec(), p.GetContainerSpec()
			if m.GetAcceleratorCount() != int32(r.GPUsPerNode) || m.GetMachineType() != r.MachineType() || !strings.HasPrefix(m.GetAcceleratorType(), "NVIDIA_") {
				t.Errorf("%s: machine %v", r.Name, m)
			}
			if c.GetImageUri() != r.ContainerImage || len(c.GetCommand()) != 3 || c.GetCommand()[0] != "/bin/bash" {
				t.Errorf("%s: container %v", r.Name, c)
			}
			script := c.GetCommand()[2]
			if r.Framework != MaxText && !strings.Contains(script, `"--nnodes=$WORLD_SIZE"`) ||
				r.Framework == MaxText && !strings.Contains(script, `NODE_RANK="$RANK"`) || strings.Contains(script, "srun") {
				t.Errorf("%s: launcher does not take its ranks from the replica environment:\n%s", r.Name, script)
			}
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func mustSeconds(t *testing.T, limit string) int64 {
	t.Helper()
	secs, _, err := slurmspec.ParseTimeLimit(limit)
	if err != nil {
		t.Fatal(err)
	}
	return secs
}

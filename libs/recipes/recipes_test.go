package recipes

import (
	"strings"
	"testing"
	"testing/fstest"
)

func TestCatalogLoads(t *testing.T) {
	t.Parallel()
	want := []string{"gemma2-9b-sft", "llama3-70b-pretrain", "llama3-8b-grpo", "llama3-8b-pretrain", "llama3-8b-sft"}
	if got := strings.Join(Names(), ","); got != strings.Join(want, ",") {
		t.Fatalf("catalog %s, want %s", got, strings.Join(want, ","))
	}
	frameworks := map[Framework]bool{}
	for _, r := range List() {
		frameworks[r.Framework] = true
		if r.Version < 1 || len(r.Sources) == 0 || r.Description == "" || r.ContainerImage == "" || r.MachineType() == "" {
			t.Errorf("%s: incomplete: %+v", r.Name, r)
		}
	}
	if len(frameworks) != 3 {
		t.Errorf("frameworks %v, want torchrun, nemo and maxtext all used", frameworks)
	}
	// Get returns a copy: changing it leaves the catalog as it was.
	r, err := Get("llama3-8b-grpo")
	if err != nil {
		t.Fatal(err)
	}
	r.Nodes, r.RL.NumGenerations, r.Sources[0] = 99, 99, "x"
	if again, _ := Get("llama3-8b-grpo"); again.Nodes == 99 || again.RL.NumGenerations == 99 || again.Sources[0] == "x" {
		t.Fatal("Get shares the catalog's recipe")
	}
	if _, err := Get("llama4"); err == nil || !strings.Contains(err.Error(), "the recipes are: gemma2-9b-sft, ") {
		t.Errorf("Get(llama4): %v", err)
	}
}

// TestLoadRefusesBadFiles: the loader is strict, so that a mistake in a
// data file fails the build's tests rather than a launch.
func TestLoadRefusesBadFiles(t *testing.T) {
	t.Parallel()
	good, err := dataFS.ReadFile("data/llama3-8b-pretrain.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, file, body, want string }{
		{"unknown field", "llama3-8b-pretrain", strings.Replace(string(good), `"version": 1,`, `"version": 1, "colour": "red",`, 1), `unknown field "colour"`},
		{"name not the file's", "other", string(good), `want the file's name "other"`},
		{"no version", "llama3-8b-pretrain", strings.Replace(string(good), `"version": 1,`, `"version": 0,`, 1), "version must be at least 1"},
		{"inconsistent", "llama3-8b-pretrain", strings.Replace(string(good), `"data": 4`, `"data": 2`, 1), "must equal nodes × gpus_per_node"},
	} {
		fsys := fstest.MapFS{"data/" + c.file + ".json": {Data: []byte(c.body)}}
		if _, err := load(fsys); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

func TestApplyOverrides(t *testing.T) {
	t.Parallel()
	base, _ := Get("llama3-8b-pretrain")
	r, err := Apply(base, []string{"lr.peak=1e-4", "lr.min=1e-5", "seq_length=4096", "global_batch=256", "time_limit=4:00:00", "container_image=nvcr.io/nvidia/nemo:24.12"})
	if err != nil {
		t.Fatal(err)
	}
	if r.LR.Peak != 1e-4 || r.LR.Min != 1e-5 || r.SeqLength != 4096 || r.GlobalBatch != 256 || r.TimeLimit != "4:00:00" || r.ContainerImage != "nvcr.io/nvidia/nemo:24.12" {
		t.Errorf("applied: %+v", r)
	}
	if base.SeqLength != 8192 {
		t.Error("Apply changed the recipe it was given")
	}
	s, err := Sbatch(r, Options{})
	if err != nil || !strings.Contains(s, "#SBATCH --time=04:00:00\n") || !strings.Contains(s, "data.seq_length=4096 ") {
		t.Errorf("rendered with overrides: %v\n%s", err, s)
	}
	// Later wins.
	if r, err := Apply(base, []string{"nodes=2", "nodes=4"}); err != nil || r.Nodes != 4 {
		t.Errorf("nodes=2 nodes=4: %v, %d", err, r.Nodes)
	}
}

// TestScaleOut: changing nodes alone rescales the batch-splitting degree
// (data for NeMo, FSDP where the recipe shards, data across nodes for
// MaxText); the consistency check holds after.
func TestScaleOut(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		recipe string
		sets   []string
		want   Parallelism
	}{
		{"llama3-8b-pretrain", []string{"nodes=4"}, Parallelism{1, 1, 2, 16, 1}},
		{"llama3-70b-pretrain", []string{"nodes=16", "global_batch=128"}, Parallelism{8, 1, 1, 1, 16}},
		{"gemma2-9b-sft", []string{"nodes=2"}, Parallelism{1, 1, 1, 2, 8}},
		{"llama3-8b-grpo", []string{"gpus_per_node=4"}, Parallelism{1, 1, 1, 1, 4}},
		// Given explicitly, the degrees are the user's: no rescaling.
		{"llama3-8b-pretrain", []string{"nodes=2", "parallelism.data=4", "parallelism.tensor=2"}, Parallelism{2, 1, 2, 4, 1}},
	} {
		base, _ := Get(c.recipe)
		r, err := Apply(base, c.sets)
		if err != nil {
			t.Errorf("%s %v: %v", c.recipe, c.sets, err)
			continue
		}
		if r.Parallelism != c.want {
			t.Errorf("%s %v: parallelism %+v, want %+v", c.recipe, c.sets, r.Parallelism, c.want)
		}
	}
}

// TestOverridesRefused: an unknown key or a bad value is refused, naming
// the key and what it accepts; an inconsistent result names the rule.
func TestOverridesRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		recipe string
		set    string
		want   string
	}{
		{"llama3-8b-pretrain", "learning_rate=1e-4", `unknown key "learning_rate"; the keys are: model, container_image, nodes,`},
		{"llama3-8b-pretrain", "nodes", `--set wants key=value, got "nodes"`},
		{"llama3-8b-pretrain", "=3", `--set wants key=value`},
		{"llama3-8b-pretrain", "nodes=two", `nodes must be an integer in [1, 1024], got "two"`},
		{"llama3-8b-pretrain", "nodes=0", `nodes must be an integer in [1, 1024], got "0"`},
		{"llama3-8b-pretrain", "nodes=2.5", `nodes must be an integer in [1, 1024]`},
		{"llama3-8b-pretrain", "lr.peak=0", `lr.peak must be a number in (0, 1], got "0"`},
		{"llama3-8b-pretrain", "lr.peak=NaN", `lr.peak must be a number in (0, 1]`},
		{"llama3-8b-pretrain", "lr.peak=inf", `lr.peak must be a number in (0, 1]`},
		{"llama3-8b-pretrain", "lr.decay=step", `lr.decay must be one of cosine, linear, constant, got "step"`},
		{"llama3-8b-pretrain", "lr.decay=linear", `lr.decay must be one of cosine for a nemo recipe, got "linear"`},
		{"llama3-8b-pretrain", "gpu_type=tpu-v5p", `gpu_type must be one of nvidia-a100-80gb, nvidia-b200, nvidia-h100-80gb, nvidia-h100-mega-80gb, nvidia-h200-141gb, nvidia-l4, nvidia-tesla-a100, got "tpu-v5p"`},
		{"llama3-8b-pretrain", "gpu_type=nvidia-h200-141gb", ""},
		{"llama3-8b-pretrain", "gpus_per_node=3", `gpus_per_node must be one of 1, 2, 4, 8 for gpu_type nvidia-h100-80gb (the machine catalog's), got 3`},
		{"llama3-8b-pretrain", "gpus_per_node=4", ""},
		{"llama3-70b-pretrain", "nodes=16", "global_batch 64 must be a multiple of data × fsdp × micro_batch = 1 × 16 × 8 = 128"},
		{"llama3-70b-pretrain", "gpu_type=nvidia-b200", ""},
		{"llama3-70b-pretrain", "gpus_per_node=2", ""},
		{"llama3-8b-sft", "gpu_type=nvidia-h200-141gb", ""},
		{"llama3-8b-sft", "gpu_type=nvidia-b200", ""},
		{"llama3-8b-pretrain", "time_limit=UNLIMITED", `time_limit must be a Slurm time limit`},
		{"llama3-8b-pretrain", "time_limit=1:2:3:4", `time_limit must be a Slurm time limit`},
		{"llama3-8b-pretrain", "dataset=/data/x; rm -rf /", `dataset must be 1 to 512 characters of letters, digits and ._:/@+=,%~-, got "/data/x; rm -rf /"`},
		{"llama3-8b-pretrain", "container_image=", `container_image must be 1 to 512 characters`},
		{"llama3-8b-pretrain", "parallelism.data=2", "parallelism: tensor × pipeline × context × data × fsdp = 1 × 1 × 2 × 2 × 1 = 4 must equal nodes × gpus_per_node = 1 × 8 = 8"},
		{"llama3-8b-pretrain", "global_batch=510", "global_batch 510 must be a multiple of data × fsdp × micro_batch = 4 × 1 × 1 = 4"},
		{"llama3-8b-pretrain", "seq_length=8190", "seq_length 8190 must be a multiple of 2 × parallelism.context = 4"},
		{"llama3-8b-pretrain", "seq_length=64", "seq_length must be an integer in [128, 131072]"},
		{"llama3-8b-pretrain", "lr.min=0.001", "lr.min 0.001 must not exceed lr.peak 0.0003"},
		{"llama3-8b-pretrain", "lr.warmup_steps=2000000", "lr.warmup_steps 2000000 must be less than lr.total_steps 1168251"},
		{"llama3-8b-sft", "checkpoint_every=5000", "checkpoint_every 5000 must not exceed lr.total_steps 1000"},
		{"llama3-8b-pretrain", "rl.num_generations=4", "rl.num_generations applies to GRPO recipes only; llama3-8b-pretrain is a pretrain recipe"},
		{"llama3-8b-pretrain", "parallelism.fsdp=2", "parallelism: tensor"},
		{"llama3-8b-grpo", "rl.num_generations=7", "global_batch 64 must be a multiple of rl.num_generations 7"},
		{"llama3-8b-grpo", "rl.max_completion_length=2048", "rl.max_prompt_length + rl.max_completion_length = 2560 must not exceed seq_length 1536"},
		{"llama3-8b-grpo", "lr.decay=cosine", "lr.min must equal lr.peak with lr.decay constant, and be 0 otherwise"},
		{"llama3-8b-grpo", "rl.kl_beta=0", ""},
		{"gemma2-9b-sft", "parallelism.pipeline=2", "parallelism: tensor × pipeline"},
		{"gemma2-9b-sft", "micro_batch=32", "global_batch 128 must be a multiple of data × fsdp × micro_batch = 1 × 8 × 32 = 256"},
		{"llama3-70b-pretrain", "lr.decay=constant", "lr.decay must be one of cosine, linear for a torchrun recipe"},
		{"llama3-8b-pretrain", "small.learning_rate=0", "small.learning_rate must be a number in (0, 10]"},
		{"llama3-8b-pretrain", "small.epochs=-1", "small.epochs must be an integer in [1, 100000]"},
	} {
		base, _ := Get(c.recipe)
		_, err := Apply(base, []string{c.set})
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s --set %s: %v, want accepted", c.recipe, c.set, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s --set %s: %v, want %q", c.recipe, c.set, err, c.want)
		}
	}
	// A NeMo recipe refuses FSDP even when the GPU count adds up.
	base, _ := Get("llama3-8b-pretrain")
	if _, err := Apply(base, []string{"parallelism.fsdp=2", "parallelism.data=2"}); err == nil || !strings.Contains(err.Error(), "parallelism.fsdp must be 1 for NeMo recipes") {
		t.Errorf("NeMo with FSDP: %v", err)
	}
	// MaxText: tensor × fsdp within a node.
	base, _ = Get("gemma2-9b-sft")
	if _, err := Apply(base, []string{"parallelism.fsdp=4", "parallelism.data=2"}); err == nil || !strings.Contains(err.Error(), "MaxText shards tensor × fsdp within a node") {
		t.Errorf("MaxText data within a node: %v", err)
	}
}

// TestKeysDescribeThemselves: every key says its type and what it
// accepts, and every recipe's current value is one its key accepts.
func TestKeysDescribeThemselves(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, k := range Keys() {
		if seen[k.Name] || k.Help == "" || k.Allowed() == "" || k.Type() == "" {
			t.Errorf("key %q: duplicate or undescribed", k.Name)
		}
		seen[k.Name] = true
	}
	for _, r := range List() {
		for _, k := range Keys() {
			v := Value(r, k.Name)
			if v == "" {
				continue
			}
			if _, _, err := ParseSet(k.Name + "=" + v); err != nil {
				t.Errorf("%s: its own %s=%s is refused: %v", r.Name, k.Name, v, err)
			}
		}
	}
}

// FuzzSet: no input makes ParseSet or Apply panic; whatever they accept
// renders, and what ParseSet refuses Apply refuses too.
func FuzzSet(f *testing.F) {
	for _, s := range []string{"nodes=2", "lr.peak=1e-4", "lr.decay=cosine", "time_limit=1-00:00:00", "dataset=/d", "x=1",
		"=", "nodes=", "nodes=9999999999999999999999", "lr.peak=0x1p-4", "rl.num_generations=4", "small.seed=-0", "seq_length=+256"} {
		f.Add("llama3-8b-pretrain", s)
		f.Add("llama3-8b-grpo", s)
	}
	f.Fuzz(func(t *testing.T, name, set string) {
		base, err := Get(name)
		if err != nil {
			base, _ = Get("gemma2-9b-sft")
		}
		_, _, perr := ParseSet(set)
		r, err := Apply(base, []string{set})
		if perr != nil && err == nil {
			t.Fatalf("ParseSet refuses %q (%v) but Apply accepts it", set, perr)
		}
		if err != nil {
			return
		}
		if _, err := Sbatch(r, Options{}); err != nil {
			t.Fatalf("accepted %q but does not render: %v", set, err)
		}
		if _, err := CustomJob(r, Options{Small: true}, CustomJobOptions{}); err != nil {
			t.Fatalf("accepted %q but the small CustomJob does not render: %v", set, err)
		}
	})
}

// TestMachinesComeFromTheCatalog: the nodes' machine type and Vertex's
// accelerator name follow the GPU type and count.
func TestMachinesComeFromTheCatalog(t *testing.T) {
	t.Parallel()
	base, _ := Get("llama3-8b-sft")
	for _, c := range []struct {
		sets            []string
		machine, vertex string
	}{
		{nil, "a3-highgpu-8g", "NVIDIA_H100_80GB"},
		{[]string{"gpu_type=nvidia-h200-141gb"}, "a3-ultragpu-8g", "NVIDIA_H200_141GB"},
		{[]string{"gpu_type=nvidia-a100-80gb", "gpus_per_node=4"}, "a2-ultragpu-4g", "NVIDIA_A100_80GB"},
	} {
		r, err := Apply(base, c.sets)
		if err != nil {
			t.Fatal(err)
		}
		job, err := CustomJob(r, Options{}, CustomJobOptions{})
		if err != nil {
			t.Fatal(err)
		}
		m := job.GetJobSpec().GetWorkerPoolSpecs()[0].GetMachineSpec()
		if r.MachineType() != c.machine || m.GetMachineType() != c.machine || m.GetAcceleratorType() != c.vertex || m.GetAcceleratorCount() != int32(r.GPUsPerNode) {
			t.Errorf("%v: machine %s, spec %v; want %s, %s", c.sets, r.MachineType(), m, c.machine, c.vertex)
		}
	}
}

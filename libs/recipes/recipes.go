// Package recipes is Loom's catalog of training recipes: prebuilt, versioned
// descriptions of how to train a model (Llama 3 8B and 70B pretraining,
// Llama 3 and Gemma 2 fine-tuning, GRPO), kept as data — one JSON file per
// recipe under data/, embedded in the binary, each citing where its values
// come from.
//
// A recipe is changed with typed overrides (Set: "key=value", see Keys),
// checked for consistency (Validate), and rendered for a cluster as a Slurm
// batch script (Sbatch) or for serverless launch as a Vertex-shaped
// CustomJob (CustomJob). Every recipe also has a small variant that the
// built-in trainer (`loom train`) runs on any machine, so that the recipe
// path is exercised end to end without GPUs (Options.Small).
//
// It is pure: no I/O beyond reading its embedded files, no clock.
package recipes

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
)

// Framework is the program a recipe's script runs.
type Framework string

// The frameworks recipes render for.
const (
	// Torchrun starts Entrypoint (a Python module: torchtitan.train,
	// trl.scripts.grpo) with torchrun, one launcher per node.
	Torchrun Framework = "torchrun"
	// NeMo runs `nemo llm pretrain|finetune --factory Config`, one
	// process per GPU (Lightning reads the Slurm task variables).
	NeMo Framework = "nemo"
	// MaxText runs `python3 -m MaxText.train Config`, one process per
	// node (JAX finds its peers from Slurm).
	MaxText Framework = "maxtext"
)

// Task is what a recipe trains for.
type Task string

// The tasks.
const (
	Pretrain Task = "pretrain"
	SFT      Task = "sft"
	GRPO     Task = "grpo"
)

// Parallelism is how a recipe splits the model and the batch over its GPUs:
// Tensor × Pipeline × Context × Data × FSDP is the number of GPUs. Data
// replicates the model; FSDP shards it (ZeRO-3); both split the batch.
type Parallelism struct {
	Tensor   int `json:"tensor"`
	Pipeline int `json:"pipeline"`
	Context  int `json:"context"`
	Data     int `json:"data"`
	FSDP     int `json:"fsdp"`
}

// World is the number of GPUs the parallelism needs.
func (p Parallelism) World() int { return p.Tensor * p.Pipeline * p.Context * p.Data * p.FSDP }

// BatchReplicas is the number of ranks that each take a different part of
// the global batch (Data × FSDP).
func (p Parallelism) BatchReplicas() int { return p.Data * p.FSDP }

// LRSchedule is the learning-rate schedule: a linear warm-up to Peak over
// WarmupSteps, then Decay down to Min at TotalSteps.
type LRSchedule struct {
	Peak        float64 `json:"peak"`
	Min         float64 `json:"min"`
	WarmupSteps int     `json:"warmup_steps"`
	// Decay is cosine, linear or constant (which frameworks accept which:
	// see DecayStyles).
	Decay      string `json:"decay"`
	TotalSteps int    `json:"total_steps"`
}

// RL are the GRPO settings of a GRPO recipe.
type RL struct {
	// NumGenerations is the group size: completions sampled per prompt.
	NumGenerations      int     `json:"num_generations"`
	MaxPromptLength     int     `json:"max_prompt_length"`
	MaxCompletionLength int     `json:"max_completion_length"`
	KLBeta              float64 `json:"kl_beta"`
}

// Small is the small variant: the flags of the built-in trainer
// (`loom train`) that stand in for the recipe on a machine without GPUs.
type Small struct {
	Epochs       int     `json:"epochs"`
	LearningRate float64 `json:"learning_rate"`
	BatchSize    int     `json:"batch_size"`
	HiddenUnits  int     `json:"hidden_units"`
	WeightDecay  float64 `json:"weight_decay"`
	Seed         int     `json:"seed"`
}

// Recipe is one entry of the catalog (the JSON of a data/ file).
type Recipe struct {
	Name    string `json:"name"`
	Version int    `json:"version"`
	// Description is one line for `loom recipes list`.
	Description string `json:"description"`
	// Sources say where the values come from.
	Sources []string `json:"sources"`
	Task    Task     `json:"task"`
	// Model is the model's id (Hugging Face's, or MaxText's model_name).
	Model     string    `json:"model"`
	Framework Framework `json:"framework"`
	// Entrypoint is the program: a Python module (torchtitan.train,
	// trl.scripts.grpo, MaxText.train) or NeMo's `nemo` command.
	Entrypoint string `json:"entrypoint"`
	// Config is the entry point's configuration: torchtitan's or MaxText's
	// config file, NeMo's recipe factory ("" for none).
	Config string `json:"config,omitempty"`
	// InitCheckpoint is the weights a fine-tuning recipe starts from.
	InitCheckpoint string `json:"init_checkpoint,omitempty"`
	ContainerImage string `json:"container_image"`
	Nodes          int    `json:"nodes"`
	GPUsPerNode    int    `json:"gpus_per_node"`
	// GPUType is Loom's accelerator name (nvidia-h100-80gb, ...; see
	// GPUTypes).
	GPUType string `json:"gpu_type"`
	// TimeLimit is Slurm's --time (and the CustomJob's timeout).
	TimeLimit       string      `json:"time_limit"`
	Parallelism     Parallelism `json:"parallelism"`
	SeqLength       int         `json:"seq_length"`
	GlobalBatch     int         `json:"global_batch"`
	MicroBatch      int         `json:"micro_batch"`
	LR              LRSchedule  `json:"lr"`
	CheckpointEvery int         `json:"checkpoint_every"`
	Dataset         string      `json:"dataset"`
	Tokenizer       string      `json:"tokenizer"`
	RL              *RL         `json:"rl,omitempty"`
	Small           Small       `json:"small"`
}

// Clone returns a deep copy of r.
func (r *Recipe) Clone() *Recipe {
	c := *r
	c.Sources = append([]string(nil), r.Sources...)
	if r.RL != nil {
		rl := *r.RL
		c.RL = &rl
	}
	return &c
}

//go:embed data/*.json
var dataFS embed.FS

// catalog is the embedded catalog, loaded once; load panics on a bad file
// because a test proves every file good (TestCatalogLoads).
var catalog = mustLoad(dataFS)

func mustLoad(fsys fs.FS) []*Recipe {
	rs, err := load(fsys)
	if err != nil {
		panic(err)
	}
	return rs
}

// load reads every data/*.json file of fsys, strictly (an unknown field is
// an error), checks that its name is its file's and validates it.
func load(fsys fs.FS) ([]*Recipe, error) {
	names, err := fs.Glob(fsys, "data/*.json")
	if err != nil {
		return nil, err
	}
	var out []*Recipe
	for _, n := range names {
		b, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, err
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		var r Recipe
		if err := dec.Decode(&r); err != nil {
			return nil, fmt.Errorf("recipe %s: %w", n, err)
		}
		if want := strings.TrimSuffix(path.Base(n), ".json"); r.Name != want {
			return nil, fmt.Errorf("recipe %s: name %q, want the file's name %q", n, r.Name, want)
		}
		if r.Version < 1 {
			return nil, fmt.Errorf("recipe %s: version must be at least 1", n)
		}
		if len(r.Sources) == 0 {
			return nil, fmt.Errorf("recipe %s: sources must say where its values come from", n)
		}
		if err := Validate(&r); err != nil {
			return nil, fmt.Errorf("recipe %s: %w", n, err)
		}
		out = append(out, &r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// List returns copies of every recipe of the catalog, by name.
func List() []*Recipe {
	out := make([]*Recipe, len(catalog))
	for i, r := range catalog {
		out[i] = r.Clone()
	}
	return out
}

// Get returns a copy of the recipe named name, or an error listing the
// names there are.
func Get(name string) (*Recipe, error) {
	for _, r := range catalog {
		if r.Name == name {
			return r.Clone(), nil
		}
	}
	return nil, fmt.Errorf("no recipe %q; the recipes are: %s", name, strings.Join(Names(), ", "))
}

// Names returns the catalog's recipe names, sorted.
func Names() []string {
	out := make([]string, len(catalog))
	for i, r := range catalog {
		out[i] = r.Name
	}
	return out
}

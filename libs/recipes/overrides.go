package recipes

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/loom-ml/loom/libs/clusterspec"
	"github.com/loom-ml/loom/libs/slurmspec"
)

// kind is the type of an override key's value.
type kind int

const (
	kindInt kind = iota
	kindFloat
	kindEnum
	kindString
	kindTime
)

// Key describes one key `--set` accepts: its type and the values allowed.
type Key struct {
	Name string
	// Help says what the key sets.
	Help string
	kind kind
	// min, max bound ints and floats (inclusive unless minOpen).
	min, max float64
	minOpen  bool
	// enum lists an enum's values.
	enum []string
	get  func(*Recipe) string
	set  func(*Recipe, string)
	// only, when set, says whether the key applies to r (rl.* to GRPO
	// recipes only) and why not.
	only func(*Recipe) error
}

// Allowed says in words which values the key accepts.
func (k *Key) Allowed() string {
	switch k.kind {
	case kindInt:
		return fmt.Sprintf("an integer in [%d, %d]", int64(k.min), int64(k.max))
	case kindFloat:
		open := "["
		if k.minOpen {
			open = "("
		}
		return fmt.Sprintf("a number in %s%s, %s]", open, fmtNum(k.min), fmtNum(k.max))
	case kindEnum:
		return "one of " + strings.Join(k.enum, ", ")
	case kindTime:
		return "a Slurm time limit such as 30, 4:00:00 or 2-00:00:00"
	default:
		return fmt.Sprintf("1 to %d characters of %s", maxStringLen, safeChars)
	}
}

// Type is the key's type for people: int, float, enum, string or time.
func (k *Key) Type() string {
	return [...]string{"int", "float", "enum", "string", "time"}[k.kind]
}

func fmtNum(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

const (
	maxStringLen = 512
	// safeChars are the characters a string value may have: enough for
	// paths, URIs, image references and model ids, and nothing a shell
	// would interpret, so that rendered scripts need no quoting of them.
	safeChars = "letters, digits and ._:/@+=,%~-"
)

func safeString(s string) bool {
	if s == "" || len(s) > maxStringLen {
		return false
	}
	for _, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.ContainsRune("._:/@+=,%~-", c):
		default:
			return false
		}
	}
	return true
}

// check says whether value is one the key accepts; it returns the parsed
// number for ints and floats.
func (k *Key) check(value string) (float64, error) {
	bad := func() error {
		return fmt.Errorf("%s must be %s, got %q", k.Name, k.Allowed(), value)
	}
	switch k.kind {
	case kindInt:
		n, err := strconv.ParseInt(value, 10, 64)
		if err != nil || float64(n) < k.min || float64(n) > k.max {
			return 0, bad()
		}
		return float64(n), nil
	case kindFloat:
		f, err := strconv.ParseFloat(value, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < k.min || f > k.max || (k.minOpen && f == k.min) {
			return 0, bad()
		}
		return f, nil
	case kindEnum:
		for _, e := range k.enum {
			if value == e {
				return 0, nil
			}
		}
		return 0, bad()
	case kindTime:
		secs, unlimited, err := slurmspec.ParseTimeLimit(value)
		if err != nil || unlimited || secs <= 0 {
			return 0, bad()
		}
		return float64(secs), nil
	default:
		if !safeString(value) {
			return 0, bad()
		}
		return 0, nil
	}
}

func intKey(name, help string, min, max int, p func(*Recipe) *int) *Key {
	return &Key{Name: name, Help: help, kind: kindInt, min: float64(min), max: float64(max),
		get: func(r *Recipe) string { return strconv.Itoa(*p(r)) },
		set: func(r *Recipe, v string) { n, _ := strconv.Atoi(v); *p(r) = n }}
}

func floatKey(name, help string, min, max float64, minOpen bool, p func(*Recipe) *float64) *Key {
	return &Key{Name: name, Help: help, kind: kindFloat, min: min, max: max, minOpen: minOpen,
		get: func(r *Recipe) string { return fmtNum(*p(r)) },
		set: func(r *Recipe, v string) { f, _ := strconv.ParseFloat(v, 64); *p(r) = f }}
}

func stringKey(name, help string, k kind, enum []string, p func(*Recipe) *string) *Key {
	return &Key{Name: name, Help: help, kind: k, enum: enum,
		get: func(r *Recipe) string { return *p(r) },
		set: func(r *Recipe, v string) { *p(r) = v }}
}

// rlOnly limits a key to GRPO recipes.
func rlOnly(k *Key) *Key {
	get := k.get
	k.only = func(r *Recipe) error {
		if r.RL == nil {
			return fmt.Errorf("%s applies to GRPO recipes only; %s is a %s recipe", k.Name, r.Name, r.Task)
		}
		return nil
	}
	k.get = func(r *Recipe) string {
		if r.RL == nil {
			return ""
		}
		return get(r)
	}
	return k
}

// keys is the override schema, in the order `loom recipes show` lists it.
var keys = []*Key{
	stringKey("model", "model id (Hugging Face's, or MaxText's model_name)", kindString, nil, func(r *Recipe) *string { return &r.Model }),
	stringKey("container_image", "container image the steps run in", kindString, nil, func(r *Recipe) *string { return &r.ContainerImage }),
	intKey("nodes", "nodes to run on", 1, 1024, func(r *Recipe) *int { return &r.Nodes }),
	intKey("gpus_per_node", "GPUs on each node", 1, 16, func(r *Recipe) *int { return &r.GPUsPerNode }),
	stringKey("gpu_type", "accelerator", kindEnum, gpuTypeNames(), func(r *Recipe) *string { return &r.GPUType }),
	stringKey("time_limit", "wall-clock limit (Slurm --time; the CustomJob's timeout)", kindTime, nil, func(r *Recipe) *string { return &r.TimeLimit }),
	intKey("parallelism.tensor", "tensor-parallel degree", 1, 1024, func(r *Recipe) *int { return &r.Parallelism.Tensor }),
	intKey("parallelism.pipeline", "pipeline-parallel degree", 1, 1024, func(r *Recipe) *int { return &r.Parallelism.Pipeline }),
	intKey("parallelism.context", "context-parallel degree", 1, 1024, func(r *Recipe) *int { return &r.Parallelism.Context }),
	intKey("parallelism.data", "data-parallel (replicated) degree", 1, 65536, func(r *Recipe) *int { return &r.Parallelism.Data }),
	intKey("parallelism.fsdp", "FSDP (sharded data-parallel) degree", 1, 65536, func(r *Recipe) *int { return &r.Parallelism.FSDP }),
	intKey("seq_length", "sequence length in tokens", 128, 131072, func(r *Recipe) *int { return &r.SeqLength }),
	intKey("global_batch", "global batch in sequences", 1, 1<<20, func(r *Recipe) *int { return &r.GlobalBatch }),
	intKey("micro_batch", "micro batch per GPU in sequences", 1, 4096, func(r *Recipe) *int { return &r.MicroBatch }),
	floatKey("lr.peak", "peak learning rate", 0, 1, true, func(r *Recipe) *float64 { return &r.LR.Peak }),
	floatKey("lr.min", "final learning rate", 0, 1, false, func(r *Recipe) *float64 { return &r.LR.Min }),
	intKey("lr.warmup_steps", "linear warm-up steps", 0, 1e9, func(r *Recipe) *int { return &r.LR.WarmupSteps }),
	stringKey("lr.decay", "decay after warm-up", kindEnum, []string{"cosine", "linear", "constant"}, func(r *Recipe) *string { return &r.LR.Decay }),
	intKey("lr.total_steps", "training steps in all", 1, 1e9, func(r *Recipe) *int { return &r.LR.TotalSteps }),
	intKey("checkpoint_every", "steps between checkpoints", 1, 1e9, func(r *Recipe) *int { return &r.CheckpointEvery }),
	stringKey("dataset", "dataset path or id", kindString, nil, func(r *Recipe) *string { return &r.Dataset }),
	stringKey("tokenizer", "tokenizer path or id", kindString, nil, func(r *Recipe) *string { return &r.Tokenizer }),
	stringKey("init_checkpoint", "weights fine-tuning starts from", kindString, nil, func(r *Recipe) *string { return &r.InitCheckpoint }),
	rlOnly(intKey("rl.num_generations", "completions sampled per prompt (GRPO group size)", 2, 1024, func(r *Recipe) *int { return &r.RL.NumGenerations })),
	rlOnly(intKey("rl.max_prompt_length", "prompt tokens at most", 1, 131072, func(r *Recipe) *int { return &r.RL.MaxPromptLength })),
	rlOnly(intKey("rl.max_completion_length", "completion tokens at most", 1, 131072, func(r *Recipe) *int { return &r.RL.MaxCompletionLength })),
	rlOnly(floatKey("rl.kl_beta", "KL penalty coefficient", 0, 10, false, func(r *Recipe) *float64 { return &r.RL.KLBeta })),
	intKey("small.epochs", "small variant: `loom train --epochs`", 1, 100000, func(r *Recipe) *int { return &r.Small.Epochs }),
	floatKey("small.learning_rate", "small variant: --learning_rate", 0, 10, true, func(r *Recipe) *float64 { return &r.Small.LearningRate }),
	intKey("small.batch_size", "small variant: --batch_size", 1, 65536, func(r *Recipe) *int { return &r.Small.BatchSize }),
	intKey("small.hidden_units", "small variant: --hidden_units", 1, 4096, func(r *Recipe) *int { return &r.Small.HiddenUnits }),
	floatKey("small.weight_decay", "small variant: --weight_decay", 0, 1, false, func(r *Recipe) *float64 { return &r.Small.WeightDecay }),
	intKey("small.seed", "small variant: --seed", 0, math.MaxInt32, func(r *Recipe) *int { return &r.Small.Seed }),
}

// Keys returns the keys `--set` accepts, in a stable order.
func Keys() []*Key { return append([]*Key(nil), keys...) }

func keyNames() []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k.Name
	}
	return out
}

func lookupKey(name string) *Key {
	for _, k := range keys {
		if k.Name == name {
			return k
		}
	}
	return nil
}

// Value is the recipe's current value of key name ("" where it does not
// apply), for `loom recipes show`.
func Value(r *Recipe, name string) string {
	if k := lookupKey(name); k != nil {
		return k.get(r)
	}
	return ""
}

// ParseSet splits one "key=value" override; the key must be one of Keys and
// the value of its type and range. The error names the key and what it
// accepts.
func ParseSet(s string) (key, value string, err error) {
	key, value, ok := strings.Cut(s, "=")
	key = strings.TrimSpace(key)
	if !ok || key == "" {
		return "", "", fmt.Errorf("--set wants key=value, got %q", s)
	}
	k := lookupKey(key)
	if k == nil {
		return "", "", fmt.Errorf("unknown key %q; the keys are: %s", key, strings.Join(keyNames(), ", "))
	}
	if _, err := k.check(value); err != nil {
		return "", "", err
	}
	return key, value, nil
}

// Apply returns a copy of r with the overrides sets ("key=value", later ones
// winning) applied and the result validated. When nodes or gpus_per_node
// change and neither parallelism.data nor parallelism.fsdp is set, the
// batch-splitting degree follows the new GPU count (FSDP where the recipe
// shards, else data; MaxText's data spans nodes), so that `--set nodes=4`
// alone scales a recipe out.
func Apply(r *Recipe, sets []string) (*Recipe, error) {
	out := r.Clone()
	given := map[string]bool{}
	for _, s := range sets {
		key, value, err := ParseSet(s)
		if err != nil {
			return nil, err
		}
		k := lookupKey(key)
		if k.only != nil {
			if err := k.only(out); err != nil {
				return nil, err
			}
		}
		k.set(out, value)
		given[key] = true
	}
	if (given["nodes"] || given["gpus_per_node"]) && !given["parallelism.data"] && !given["parallelism.fsdp"] {
		rescale(out)
	}
	if err := Validate(out); err != nil {
		return nil, err
	}
	return out, nil
}

// rescale sets the batch-splitting degree so that the parallelism covers
// nodes × gpus_per_node, where it divides evenly (Validate reports it
// otherwise).
func rescale(r *Recipe) {
	p := &r.Parallelism
	world := r.Nodes * r.GPUsPerNode
	if r.Framework == MaxText {
		// MaxText: FSDP and tensor within a node (ici), data across nodes (dcn).
		if r.GPUsPerNode%p.Tensor == 0 {
			p.FSDP = r.GPUsPerNode / p.Tensor
		}
		p.Data = r.Nodes
		return
	}
	if p.FSDP > 1 {
		if rest := p.Tensor * p.Pipeline * p.Context * p.Data; world%rest == 0 {
			p.FSDP = world / rest
		}
		return
	}
	if rest := p.Tensor * p.Pipeline * p.Context * p.FSDP; world%rest == 0 {
		p.Data = world / rest
	}
}

// gpuTypeNames are the accelerator types of the machine catalog
// (libs/clusterspec), in its order: the values gpu_type accepts.
func gpuTypeNames() []string {
	var out []string
	for _, m := range clusterspec.Machines() {
		if m.HasGPUs() && !contains(out, m.AcceleratorType) {
			out = append(out, m.AcceleratorType)
		}
	}
	sort.Strings(out)
	return out
}

// machineFor is the catalog's first machine type with count GPUs of type
// gpu ("" when there is none).
func machineFor(gpu string, count int) string {
	for _, m := range clusterspec.Machines() {
		if m.AcceleratorType == gpu && int(m.AcceleratorCount) == count {
			return m.Name
		}
	}
	return ""
}

// gpuCounts are the GPU counts the catalog's machines of type gpu have.
func gpuCounts(gpu string) []int {
	var out []int
	for _, m := range clusterspec.Machines() {
		if n := int(m.AcceleratorCount); m.AcceleratorType == gpu && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	sort.Ints(out)
	return out
}

// MachineType is the machine type of r's nodes: the machine catalog's
// (libs/clusterspec) first with gpus_per_node GPUs of gpu_type.
func (r *Recipe) MachineType() string { return machineFor(r.GPUType, r.GPUsPerNode) }

// VertexAcceleratorType is Vertex's accelerator_type for r's GPUs: Loom's
// name upper-cased with underscores ("nvidia-h100-80gb" is
// NVIDIA_H100_80GB, "nvidia-tesla-a100" NVIDIA_TESLA_A100), as Vertex's
// enum spells them.
func (r *Recipe) VertexAcceleratorType() string {
	return strings.ToUpper(strings.ReplaceAll(r.GPUType, "-", "_"))
}

// DecayStyles are the learning-rate decays r's framework renders.
func DecayStyles(r *Recipe) []string {
	switch {
	case r.Framework == NeMo, r.Framework == MaxText:
		// NeMo's recipes use CosineAnnealingScheduler; MaxText's schedule is
		// warm-up then cosine.
		return []string{"cosine"}
	case r.Task == GRPO:
		// TRL (transformers' lr_scheduler_type).
		return []string{"cosine", "linear", "constant"}
	default:
		// torchtitan's [lr_scheduler] decay_type.
		return []string{"cosine", "linear"}
	}
}

// Validate checks r: every key's value in its range, and the recipe
// consistent (the parallelism covers the GPUs, the batch splits evenly, the
// schedule and the framework's limits hold). The error names the key and
// the reason.
func Validate(r *Recipe) error {
	switch r.Framework {
	case Torchrun, NeMo, MaxText:
	default:
		return fmt.Errorf("framework must be one of torchrun, nemo, maxtext, got %q", r.Framework)
	}
	switch r.Task {
	case Pretrain, SFT, GRPO:
	default:
		return fmt.Errorf("task must be one of pretrain, sft, grpo, got %q", r.Task)
	}
	if !safeString(r.Entrypoint) || (r.Config != "" && !safeString(r.Config)) {
		return fmt.Errorf("entrypoint and config must be 1 to %d characters of %s, got %q and %q", maxStringLen, safeChars, r.Entrypoint, r.Config)
	}
	if (r.Task == GRPO) != (r.RL != nil) {
		return errors.New("rl settings are required for GRPO recipes and refused for the others")
	}
	for _, k := range keys {
		if k.only != nil && k.only(r) != nil {
			continue
		}
		v := k.get(r)
		if k.Name == "init_checkpoint" && v == "" {
			continue
		}
		if _, err := k.check(v); err != nil {
			return err
		}
	}
	if r.MachineType() == "" {
		return fmt.Errorf("gpus_per_node must be one of %s for gpu_type %s (the machine catalog's), got %d", joinInts(gpuCounts(r.GPUType)), r.GPUType, r.GPUsPerNode)
	}
	p := r.Parallelism
	if gpus := r.Nodes * r.GPUsPerNode; p.World() != gpus {
		return fmt.Errorf("parallelism: tensor × pipeline × context × data × fsdp = %d × %d × %d × %d × %d = %d must equal nodes × gpus_per_node = %d × %d = %d",
			p.Tensor, p.Pipeline, p.Context, p.Data, p.FSDP, p.World(), r.Nodes, r.GPUsPerNode, gpus)
	}
	if per := p.BatchReplicas() * r.MicroBatch; r.GlobalBatch%per != 0 {
		return fmt.Errorf("global_batch %d must be a multiple of data × fsdp × micro_batch = %d × %d × %d = %d",
			r.GlobalBatch, p.Data, p.FSDP, r.MicroBatch, per)
	}
	if p.Context > 1 && r.SeqLength%(2*p.Context) != 0 {
		return fmt.Errorf("seq_length %d must be a multiple of 2 × parallelism.context = %d (each rank takes two chunks)", r.SeqLength, 2*p.Context)
	}
	if r.LR.Min > r.LR.Peak {
		return fmt.Errorf("lr.min %s must not exceed lr.peak %s", fmtNum(r.LR.Min), fmtNum(r.LR.Peak))
	}
	if r.LR.WarmupSteps >= r.LR.TotalSteps {
		return fmt.Errorf("lr.warmup_steps %d must be less than lr.total_steps %d", r.LR.WarmupSteps, r.LR.TotalSteps)
	}
	if r.CheckpointEvery > r.LR.TotalSteps {
		return fmt.Errorf("checkpoint_every %d must not exceed lr.total_steps %d", r.CheckpointEvery, r.LR.TotalSteps)
	}
	styles := DecayStyles(r)
	if !contains(styles, r.LR.Decay) {
		return fmt.Errorf("lr.decay must be one of %s for a %s recipe, got %q", strings.Join(styles, ", "), r.Framework, r.LR.Decay)
	}
	switch r.Framework {
	case NeMo:
		if p.FSDP != 1 {
			return fmt.Errorf("parallelism.fsdp must be 1 for NeMo recipes (Megatron shards the optimizer over data-parallel ranks), got %d", p.FSDP)
		}
	case MaxText:
		if p.Pipeline != 1 || p.Context != 1 {
			return fmt.Errorf("parallelism.pipeline and parallelism.context must be 1 for MaxText recipes, got %d and %d", p.Pipeline, p.Context)
		}
		if p.Tensor*p.FSDP != r.GPUsPerNode || p.Data != r.Nodes {
			return fmt.Errorf("parallelism: MaxText shards tensor × fsdp within a node (%d × %d must equal gpus_per_node %d) and data across nodes (data %d must equal nodes %d)",
				p.Tensor, p.FSDP, r.GPUsPerNode, p.Data, r.Nodes)
		}
		if per := r.MicroBatch * r.Nodes * r.GPUsPerNode; r.GlobalBatch%per != 0 {
			return fmt.Errorf("global_batch %d must be a multiple of micro_batch × GPUs = %d for MaxText (per_device_batch_size × devices × gradient_accumulation_steps)", r.GlobalBatch, per)
		}
	case Torchrun:
		if r.Task == GRPO && (p.Tensor != 1 || p.Pipeline != 1 || p.Context != 1) {
			return fmt.Errorf("parallelism.tensor, pipeline and context must be 1 for TRL recipes (FSDP and data only), got %d, %d, %d", p.Tensor, p.Pipeline, p.Context)
		}
		if r.Task == GRPO && (r.LR.Decay == "constant") != (r.LR.Min == r.LR.Peak) {
			// transformers' schedules decay to 0, or stay at the peak.
			return fmt.Errorf("lr.min must equal lr.peak with lr.decay constant, and be 0 otherwise, for TRL recipes; got lr.min %s, lr.peak %s, lr.decay %s", fmtNum(r.LR.Min), fmtNum(r.LR.Peak), r.LR.Decay)
		}
		if r.Task == GRPO && r.LR.Decay != "constant" && r.LR.Min != 0 {
			return fmt.Errorf("lr.min must be 0 for TRL recipes whose lr.decay is %s, got %s", r.LR.Decay, fmtNum(r.LR.Min))
		}
	}
	if r.RL != nil {
		if r.GlobalBatch%r.RL.NumGenerations != 0 {
			return fmt.Errorf("global_batch %d must be a multiple of rl.num_generations %d (whole groups of completions)", r.GlobalBatch, r.RL.NumGenerations)
		}
		if n := r.RL.MaxPromptLength + r.RL.MaxCompletionLength; n > r.SeqLength {
			return fmt.Errorf("rl.max_prompt_length + rl.max_completion_length = %d must not exceed seq_length %d", n, r.SeqLength)
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ", ")
}

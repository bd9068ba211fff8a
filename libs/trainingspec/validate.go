package trainingspec

import (
	"fmt"
	"maps"
	"math"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/clusterspec"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/hpo"
	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/slurmspec"
	"github.com/loom-ml/loom/libs/termtext"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
)

// Bounds of a training request (docs/training.md "Limits": the gateway
// refuses past them, the training service may rely on them). Each keeps one
// request's work and one Kafka record bounded; none is near what a real job
// needs.
const (
	// MaxWorkerPools is Vertex's: primary, workers, servers, evaluators.
	MaxWorkerPools = 4
	// MaxReplicaCount bounds one pool's replicas (one node each).
	MaxReplicaCount = 64
	// MaxArgs bounds a container's or package's command and args (each).
	MaxArgs = 256
	// MaxEnv bounds a container's or package's env.
	MaxEnv = 128
	// MaxSpecBytes bounds the whole resource, encoded: well inside a Kafka
	// record once the training service adds trials and state.
	MaxSpecBytes = 256 << 10
	// MaxTrialCount bounds a tuning job's trials (each a CustomJob and a
	// reserved job id).
	MaxTrialCount = 1000
	// MaxParallelTrials bounds the trials that run at once.
	MaxParallelTrials = 64
	// MaxParameters bounds a study's parameters, conditional ones included.
	MaxParameters = 64
	// MaxCategoricalValues bounds a categorical or discrete parameter's
	// values and a condition's parent values.
	MaxCategoricalValues = 256
	// MaxCategoricalValueBytes bounds one categorical value (a trial's
	// --ID=VALUE flag and a cell of its table).
	MaxCategoricalValueBytes = 1024
	// MaxConditionalDepth bounds how deep conditional parameters nest (a
	// top-level parameter's child is at depth 1).
	MaxConditionalDepth = 4
	// MaxDisplayNameLen is Vertex's display_name limit, in characters.
	MaxDisplayNameLen = 128
	// MaxLabels is GCP's label limit.
	MaxLabels = 64
	// MaxMetrics bounds a study's metrics.
	MaxMetrics = 16
	// MaxPackageURIs bounds a python_package_spec's package_uris.
	MaxPackageURIs = 100
	// MaxNfsMounts bounds a pool's nfs_mounts.
	MaxNfsMounts = 16
	// MaxURILen bounds a URI or path (base_output_directory, package
	// URIs, artifact_uri): Linux's PATH_MAX.
	MaxURILen = 4096
	// MaxArgBytes bounds one command or args item.
	MaxArgBytes = 64 << 10
)

// Bounds of a pipeline's model_to_upload: the registry's, which judges the
// upload when the training has ended (services/registry/internal/domain:
// MaxDescription in upload.go, MaxAliases and MaxAliasLen in names.go; no
// package both import holds them). A pipeline past them is refused at its
// create, not after hours of training.
const (
	// MaxModelDescriptionLen bounds model_to_upload.description and
	// version_description, in characters (the registry's MaxDescription).
	MaxModelDescriptionLen = 2048
	// MaxModelAliases bounds model_to_upload.version_aliases.
	MaxModelAliases = 16
	// MaxModelAliasLen bounds one alias, in bytes.
	MaxModelAliasLen = 128
)

var (
	// envNameRE is a POSIX environment variable name.
	envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	// paramIDRE is a parameter id: it becomes the trainer's flag
	// "--<parameter_id>=<value>", so no '=' or space.
	paramIDRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]{0,63}$`)
	// metricIDRE is a metric id as the hypertune file names it.
	metricIDRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_./-]{0,63}$`)
	// pythonModuleRE is a dotted Python module name.
	pythonModuleRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)
	// labelKeyRE and labelValueRE are GCP's label grammar (Vertex's).
	labelKeyRE   = regexp.MustCompile(`^[\p{Ll}\p{Lo}][\p{Ll}\p{Lo}\p{N}_-]{0,62}$`)
	labelValueRE = regexp.MustCompile(`^[\p{Ll}\p{Lo}\p{N}_-]{0,63}$`)
	// aliasRE and reservedAliasRE are a model version alias's grammar and
	// the aliases the registry keeps for itself ("v<N>"; "latest" too):
	// Vertex's, as the registry has them (names.go).
	aliasRE         = regexp.MustCompile(`^[a-z][a-zA-Z0-9-]{0,126}[a-z0-9]$`)
	reservedAliasRE = regexp.MustCompile(`^v[0-9]+$`)
)

// ValidateCustomJob checks a CustomJob as CreateCustomJob receives it and
// returns an *errs.InvalidError listing every problem, each field path
// rooted at the request's field ("custom_job.job_spec.worker_pool_specs[0].
// machine_spec.machine_type: ..."), or nil. Output-only fields (name,
// state, times, user, ...) are not judged: the gateway sets them.
func ValidateCustomJob(j *trainingv1.CustomJob) error {
	var v errs.Validator
	const f = "custom_job"
	if j == nil {
		v.Add(f, "required")
		return v.Err()
	}
	if !checkSize(&v, f, j) {
		return v.Err()
	}
	checkDisplayName(&v, f+".display_name", j.GetDisplayName())
	checkLabels(&v, f+".labels", j.GetLabels())
	if j.GetJobSpec() == nil {
		v.Add(f+".job_spec", "required: the worker pools to run (job_spec.worker_pool_specs)")
	} else {
		validateSpec(&v, f+".job_spec", j.GetJobSpec())
	}
	return v.Err()
}

// ValidateCustomJobSpec checks spec alone, its field paths under field
// (e.g. "trial_job_spec"): what ValidateCustomJob checks of job_spec.
func ValidateCustomJobSpec(field string, spec *trainingv1.CustomJobSpec) error {
	var v errs.Validator
	if spec == nil {
		v.Add(field, "required")
		return v.Err()
	}
	validateSpec(&v, field, spec)
	return v.Err()
}

// ValidateHyperparameterTuningJob checks a tuning job as
// CreateHyperparameterTuningJob receives it, paths rooted at
// "hyperparameter_tuning_job". Trials (output only) are not judged.
func ValidateHyperparameterTuningJob(j *trainingv1.HyperparameterTuningJob) error {
	var v errs.Validator
	const f = "hyperparameter_tuning_job"
	if j == nil {
		v.Add(f, "required")
		return v.Err()
	}
	if !checkSize(&v, f, j) {
		return v.Err()
	}
	checkDisplayName(&v, f+".display_name", j.GetDisplayName())
	checkLabels(&v, f+".labels", j.GetLabels())
	validateTuning(&v, f, j)
	return v.Err()
}

// ValidateTrainingPipeline checks a pipeline as CreateTrainingPipeline
// receives it, paths rooted at "training_pipeline": its task definition,
// its task's inputs (decoded by PipelineTask and checked as a CustomJobSpec
// or a tuning job, under "training_pipeline.training_task_inputs"), and
// model_to_upload.
func ValidateTrainingPipeline(p *trainingv1.TrainingPipeline) error {
	var v errs.Validator
	const f = "training_pipeline"
	if p == nil {
		v.Add(f, "required")
		return v.Err()
	}
	if !checkSize(&v, f, p) {
		return v.Err()
	}
	checkDisplayName(&v, f+".display_name", p.GetDisplayName())
	checkLabels(&v, f+".labels", p.GetLabels())
	def := p.GetTrainingTaskDefinition()
	switch {
	case def == "":
		v.Add(f+".training_task_definition", "required: a task schema ending in %s or %s", CustomTask, TuningTask)
	case !strings.HasSuffix(def, CustomTask) && !strings.HasSuffix(def, TuningTask):
		v.Add(f+".training_task_definition", "%s is neither ...%s nor ...%s", clip(def), CustomTask, TuningTask)
	default:
		spec, tuning, err := PipelineTask(p)
		switch {
		case err != nil:
			v.Add(f+".training_task_inputs", "%s", strings.TrimPrefix(err.Error(), "training_pipeline.training_task_inputs: "))
		case spec != nil:
			validateSpec(&v, f+".training_task_inputs", spec)
		default:
			validateTuning(&v, f+".training_task_inputs", tuning)
		}
	}
	if m := p.GetModelToUpload(); m != nil {
		mf := f + ".model_to_upload"
		if m.GetDisplayName() == "" && p.GetParentModel() == "" && p.GetModelId() == "" {
			v.Add(mf+".display_name", "required: the registered model's name (or set parent_model or model_id)")
		} else if m.GetDisplayName() != "" {
			checkDisplayName(&v, mf+".display_name", m.GetDisplayName())
		}
		checkText(&v, mf+".description", m.GetDescription(), MaxModelDescriptionLen)
		checkText(&v, mf+".version_description", m.GetVersionDescription(), MaxModelDescriptionLen)
		checkLabels(&v, mf+".labels", m.GetLabels())
		checkAliases(&v, mf+".version_aliases", m.GetVersionAliases())
		if u := m.GetArtifactUri(); u != "" {
			checkLocalURI(&v, mf+".artifact_uri", u)
		}
	}
	pm, pmOK := parseModelName(p.GetParentModel())
	switch name := p.GetParentModel(); {
	case name == "":
	case strings.Contains(name, "@"):
		v.Add(f+".parent_model", "%s names a version: name the model, without \"@…\" (the pipeline adds a version to it)", clip(name))
	case !pmOK:
		v.Add(f+".parent_model", "%s is not a model name (projects/{project}/models/{model} or projects/{project}/locations/{location}/models/{model})", clip(name))
	}
	if id := p.GetModelId(); id != "" {
		switch {
		case !resname.ValidID(id):
			v.Add(f+".model_id", "%s must be a lowercase letter, then up to 62 lowercase letters, digits or hyphens", clip(id))
		case pmOK && id != pm.ID:
			v.Add(f+".model_id", "%s names another model than parent_model %s: leave one out", clip(id), pm)
		}
	}
	return v.Err()
}

// CheckPipelineModel checks what of p's model to upload depends on the
// project the pipeline is created in: its parent_model must be a model of
// that project (the registry registers a pipeline's model in the
// pipeline's project and refuses another's, but only once the training
// has ended). It returns an *errs.InvalidError on
// "training_pipeline.parent_model" saying what to do, or nil; a malformed
// parent_model is ValidateTrainingPipeline's to refuse (nil here). Whether
// the model exists only the registry knows: the gateway asks it.
func CheckPipelineModel(project string, p *trainingv1.TrainingPipeline) error {
	pm, ok := parseModelName(p.GetParentModel())
	if !ok || pm.Project == project {
		return nil
	}
	return errs.Invalid("training_pipeline.parent_model", "%s is a model of project %s, not of %s, where the pipeline runs and registers its model: name a model of %s (projects/%s/models/MODEL), or create the pipeline in %s",
		clip(p.GetParentModel()), pm.Project, project, project, project, pm.Project)
}

// parseModelName parses a model's name as Loom (projects/p/models/m) or
// Vertex (projects/p/locations/l/models/m) writes it.
func parseModelName(s string) (resname.Model, bool) {
	parts := strings.Split(s, "/")
	switch {
	case len(parts) == 4 && parts[0] == "projects" && parts[2] == "models":
	case len(parts) == 6 && parts[0] == "projects" && parts[2] == "locations" && parts[4] == "models" && resname.ValidID(parts[3]):
	default:
		return resname.Model{}, false
	}
	m := resname.Model{Project: parts[1], ID: parts[len(parts)-1]}
	return m, resname.ValidID(m.Project) && resname.ValidID(m.ID)
}

// checkAliases checks a model's version aliases as the registry will
// (CheckAlias in services/registry/internal/domain/names.go).
func checkAliases(v *errs.Validator, field string, aliases []string) {
	if len(aliases) > MaxModelAliases {
		v.Add(field, "at most %d aliases, got %d", MaxModelAliases, len(aliases))
		return
	}
	seen := map[string]bool{}
	for i, a := range aliases {
		af := fmt.Sprintf("%s[%d]", field, i)
		switch {
		case len(a) > MaxModelAliasLen:
			v.Add(af, "%d bytes, more than the limit of %d", len(a), MaxModelAliasLen)
		case !aliasRE.MatchString(a):
			v.Add(af, "%s must be a lowercase letter, then letters, digits or '-', ending in a lowercase letter or digit (2 to %d characters)", clip(a), MaxModelAliasLen)
		case a == "latest" || reservedAliasRE.MatchString(a):
			v.Add(af, "%s is reserved (latest and v<N> name versions): choose another", clip(a))
		case seen[a]:
			v.Add(af, "%s is listed twice", clip(a))
		}
		seen[a] = true
	}
}

// checkSize refuses a resource over MaxSpecBytes, and then nothing else is
// judged: its lists could be anything.
func checkSize(v *errs.Validator, field string, m proto.Message) bool {
	if n := proto.Size(m); n > MaxSpecBytes {
		v.Add(field, "%d bytes encoded, more than the limit of %d", n, MaxSpecBytes)
		return false
	}
	return true
}

func checkDisplayName(v *errs.Validator, field, s string) {
	if s == "" {
		v.Add(field, "required (at most %d characters)", MaxDisplayNameLen)
		return
	}
	checkText(v, field, s, MaxDisplayNameLen)
}

// checkText refuses text longer than limit characters, invalid UTF-8 and
// control characters (which would rewrite a terminal's table rows).
func checkText(v *errs.Validator, field, s string, limit int) {
	switch {
	case !utf8.ValidString(s):
		v.Add(field, "not valid UTF-8")
	case utf8.RuneCountInString(s) > limit:
		v.Add(field, "%d characters, more than the limit of %d", utf8.RuneCountInString(s), limit)
	case strings.IndexFunc(s, termtext.Spoofing) >= 0:
		v.Add(field, "holds a control character")
	}
}

func checkLabels(v *errs.Validator, field string, labels map[string]string) {
	if len(labels) > MaxLabels {
		v.Add(field, "at most %d labels, got %d", MaxLabels, len(labels))
		return
	}
	// Sorted, so that one request is always reported the same way.
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		v.Check(labelKeyRE.MatchString(k), field, "label key %s must be 1 to 63 lowercase letters, digits, '_' or '-', starting with a letter", clip(k))
		v.Check(labelValueRE.MatchString(labels[k]), field, "label %s: value %s must be at most 63 lowercase letters, digits, '_' or '-'", clip(k), clip(labels[k]))
	}
}

func validateSpec(v *errs.Validator, f string, s *trainingv1.CustomJobSpec) {
	pools := s.GetWorkerPoolSpecs()
	switch {
	case len(pools) == 0:
		v.Add(f+".worker_pool_specs", "at least one worker pool is required (pool 0, the primary replica)")
	case len(pools) > MaxWorkerPools:
		v.Add(f+".worker_pool_specs", "at most %d worker pools (primary, workers, servers, evaluators), got %d", MaxWorkerPools, len(pools))
		return
	}
	for i, p := range pools {
		validatePool(v, fmt.Sprintf("%s.worker_pool_specs[%d]", f, i), i, p)
	}
	if id := s.GetPersistentResourceId(); id != "" {
		v.Check(resname.ValidID(id), f+".persistent_resource_id", "%s is not a cluster id (a lowercase letter, then up to 62 lowercase letters, digits or hyphens)", clip(id))
	}
	if u := s.GetBaseOutputDirectory().GetOutputUriPrefix(); u != "" {
		checkOutputURI(v, f+".base_output_directory.output_uri_prefix", u)
	}
	validateScheduling(v, f+".scheduling", s.GetScheduling())
	checkText(v, f+".service_account", s.GetServiceAccount(), 256)
	checkText(v, f+".network", s.GetNetwork(), 1024)
	v.Check(len(s.GetReservedIpRanges()) <= 64, f+".reserved_ip_ranges", "at most 64, got %d", len(s.GetReservedIpRanges()))
	v.Check(len(s.GetModels()) <= 64, f+".models", "at most 64, got %d", len(s.GetModels()))
}

// emptyPool reports whether p is a placeholder: Vertex lets a request keep
// a pool's position with {} (pool 1 empty when pool 2 is used).
func emptyPool(p *trainingv1.WorkerPoolSpec) bool {
	return p == nil || proto.Size(p) == 0
}

func validatePool(v *errs.Validator, f string, i int, p *trainingv1.WorkerPoolSpec) {
	if emptyPool(p) {
		v.Check(i > 0, f, "pool 0 (the primary replica) is required: machine_spec, replica_count 1 and container_spec or python_package_spec")
		return
	}
	switch n := p.GetReplicaCount(); {
	case i == 0 && n != 1:
		v.Add(f+".replica_count", "pool 0 is the primary replica: replica_count must be 1, got %d", n)
	case n < 1:
		v.Add(f+".replica_count", "must be at least 1, got %d (leave the pool out, or {}, for none)", n)
	case n > MaxReplicaCount:
		v.Add(f+".replica_count", "at most %d replicas per pool, got %d", MaxReplicaCount, n)
	}
	validateMachine(v, f+".machine_spec", p.GetMachineSpec())
	switch {
	case p.GetContainerSpec() != nil:
		validateContainer(v, f+".container_spec", p.GetContainerSpec())
	case p.GetPythonPackageSpec() != nil:
		validatePackage(v, f+".python_package_spec", p.GetPythonPackageSpec())
	default:
		v.Add(f, "container_spec or python_package_spec is required: what the replicas run")
	}
	if d := p.GetDiskSpec(); d != nil {
		if t := d.GetBootDiskType(); t != "" && !slices.Contains(clusterspec.BootDiskTypes, t) {
			v.Add(f+".disk_spec.boot_disk_type", "unknown boot disk type %s (%s)", clip(t), strings.Join(clusterspec.BootDiskTypes, ", "))
		}
		if n := d.GetBootDiskSizeGb(); n != 0 && (n < clusterspec.MinBootDiskGB || n > clusterspec.MaxBootDiskGB) {
			v.Add(f+".disk_spec.boot_disk_size_gb", "must be %d to %d GB (0: the default), not %d", clusterspec.MinBootDiskGB, clusterspec.MaxBootDiskGB, n)
		}
	}
	if len(p.GetNfsMounts()) > MaxNfsMounts {
		v.Add(f+".nfs_mounts", "at most %d, got %d", MaxNfsMounts, len(p.GetNfsMounts()))
	} else {
		for k, m := range p.GetNfsMounts() {
			mp := m.GetMountPoint()
			v.Check(strings.HasPrefix(mp, "/") && path.Clean(mp) == mp && mp != "/", fmt.Sprintf("%s.nfs_mounts[%d].mount_point", f, k), "%s must be a clean absolute path other than /", clip(mp))
		}
	}
}

// AcceleratorName is the Vertex AcceleratorType name of a catalog
// accelerator type: "nvidia-h100-80gb" → "NVIDIA_H100_80GB".
func AcceleratorName(catalogType string) string {
	return strings.ToUpper(strings.ReplaceAll(catalogType, "-", "_"))
}

func validateMachine(v *errs.Validator, f string, m *trainingv1.MachineSpec) {
	if m == nil {
		v.Add(f, "required: machine_type (a type of the machine catalog, e.g. n2-standard-8 or a3-highgpu-8g)")
		return
	}
	name := m.GetMachineType()
	var mt clusterspec.MachineType
	known := false
	switch {
	case name == "":
		v.Add(f+".machine_type", "required (a type of the machine catalog, e.g. n2-standard-8 or a3-highgpu-8g)")
	default:
		mt, known = clusterspec.Machine(name)
		if !known {
			if s := clusterspec.SuggestMachines(name); len(s) > 0 {
				v.Add(f+".machine_type", "unknown machine type %s (did you mean %s?)", clip(name), strings.Join(s, ", "))
			} else {
				v.Add(f+".machine_type", "unknown machine type %s (see the machine catalog in docs/clusters.md)", clip(name))
			}
		}
	}
	v.Check(m.GetTpuTopology() == "", f+".tpu_topology", "Loom has no TPUs")
	if !known {
		return
	}
	acc, n := m.GetAcceleratorType(), m.GetAcceleratorCount()
	if !mt.HasGPUs() {
		v.Check(acc == "" || acc == "ACCELERATOR_TYPE_UNSPECIFIED", f+".accelerator_type", "%s has no GPUs, not %s (pick a GPU machine type such as a3-highgpu-8g)", mt.Name, clip(acc))
		v.Check(n == 0, f+".accelerator_count", "%s has no GPUs, not %d", mt.Name, n)
		return
	}
	want := AcceleratorName(mt.AcceleratorType)
	if acc != want && !strings.EqualFold(acc, mt.AcceleratorType) {
		v.Add(f+".accelerator_type", "%s has %d %s GPUs: set accelerator_type %s (got %s)", mt.Name, mt.AcceleratorCount, want, want, clip(acc))
	}
	if n != mt.AcceleratorCount {
		v.Add(f+".accelerator_count", "%s has %d GPUs: set accelerator_count %d (got %d)", mt.Name, mt.AcceleratorCount, mt.AcceleratorCount, n)
	}
}

func validateContainer(v *errs.Validator, f string, c *trainingv1.ContainerSpec) {
	if c.GetImageUri() == "" && len(c.GetCommand()) == 0 {
		v.Add(f, "image_uri or command is required: what the replicas run")
	}
	checkText(v, f+".image_uri", c.GetImageUri(), 1024)
	checkArgs(v, f+".command", c.GetCommand())
	checkArgs(v, f+".args", c.GetArgs())
	checkEnv(v, f+".env", c.GetEnv())
}

func validatePackage(v *errs.Validator, f string, p *trainingv1.PythonPackageSpec) {
	checkText(v, f+".executor_image_uri", p.GetExecutorImageUri(), 1024)
	uris := p.GetPackageUris()
	switch {
	case len(uris) == 0:
		v.Add(f+".package_uris", "at least one package is required (file:///path/to/pkg.tar.gz)")
	case len(uris) > MaxPackageURIs:
		v.Add(f+".package_uris", "at most %d packages, got %d", MaxPackageURIs, len(uris))
	default:
		for i, u := range uris {
			checkLocalURI(v, fmt.Sprintf("%s.package_uris[%d]", f, i), u)
		}
	}
	switch m := p.GetPythonModule(); {
	case m == "":
		v.Add(f+".python_module", "required: the module to run with python3 -m (e.g. trainer.task)")
	case len(m) > 256 || !pythonModuleRE.MatchString(m):
		v.Add(f+".python_module", "%s is not a dotted Python module name (e.g. trainer.task)", clip(m))
	}
	checkArgs(v, f+".args", p.GetArgs())
	checkEnv(v, f+".env", p.GetEnv())
}

func checkArgs(v *errs.Validator, f string, args []string) {
	if len(args) > MaxArgs {
		v.Add(f, "at most %d items, got %d", MaxArgs, len(args))
		return
	}
	for i, a := range args {
		switch {
		case len(a) > MaxArgBytes:
			v.Add(fmt.Sprintf("%s[%d]", f, i), "%d bytes, more than the limit of %d", len(a), MaxArgBytes)
		case strings.IndexByte(a, 0) >= 0:
			v.Add(fmt.Sprintf("%s[%d]", f, i), "holds a NUL byte")
		}
	}
}

func checkEnv(v *errs.Validator, f string, env []*trainingv1.EnvVar) {
	if len(env) > MaxEnv {
		v.Add(f, "at most %d variables, got %d", MaxEnv, len(env))
		return
	}
	seen := map[string]int{}
	for i, e := range env {
		ff := fmt.Sprintf("%s[%d]", f, i)
		if !envNameRE.MatchString(e.GetName()) || len(e.GetName()) > 256 {
			v.Add(ff+".name", "%s is not an environment variable name (letters, digits and '_', not starting with a digit)", clip(e.GetName()))
		} else if j, dup := seen[e.GetName()]; dup {
			v.Add(ff+".name", "%s is also %s[%d]", e.GetName(), f, j)
		} else {
			seen[e.GetName()] = i
		}
		switch val := e.GetValue(); {
		case len(val) > MaxArgBytes:
			v.Add(ff+".value", "%d bytes, more than the limit of %d", len(val), MaxArgBytes)
		case strings.IndexByte(val, 0) >= 0:
			v.Add(ff+".value", "holds a NUL byte")
		}
	}
}

// checkOutputURI accepts what base_output_directory may be: file://PATH,
// gs://BUCKET/..., s3://BUCKET/... or an absolute path.
func checkOutputURI(v *errs.Validator, f, u string) {
	if !checkURIText(v, f, u) {
		return
	}
	switch {
	case strings.HasPrefix(u, "gs://") || strings.HasPrefix(u, "s3://"):
		bucket, _, _ := strings.Cut(u[len("gs://"):], "/")
		v.Check(bucket != "", f, "%s names no bucket (gs://BUCKET/PREFIX)", clip(u))
	default:
		checkLocalURI(v, f, u)
	}
}

// checkLocalURI accepts file:///abs/path or /abs/path: what a node reads
// from its own (shared) file system.
func checkLocalURI(v *errs.Validator, f, u string) {
	if !checkURIText(v, f, u) {
		return
	}
	p, isFile := strings.CutPrefix(u, "file://")
	if !strings.HasPrefix(p, "/") {
		if isFile {
			v.Add(f, "%s: a file:// URI needs an absolute path (file:///data/out)", clip(u))
		} else {
			v.Add(f, "%s must be file:///PATH or an absolute path", clip(u))
		}
		return
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." {
			v.Add(f, "%s holds a '..' segment", clip(u))
			return
		}
	}
}

func checkURIText(v *errs.Validator, f, u string) bool {
	switch {
	case len(u) > MaxURILen:
		v.Add(f, "%d bytes, more than the limit of %d", len(u), MaxURILen)
	case !utf8.ValidString(u) || strings.IndexFunc(u, termtext.Spoofing) >= 0:
		v.Add(f, "%s holds a control character or invalid UTF-8", clip(u))
	default:
		return true
	}
	return false
}

func validateScheduling(v *errs.Validator, f string, s *trainingv1.Scheduling) {
	if s == nil {
		return
	}
	// At most a century, as a job's time limit (slurmspec): the timeout
	// becomes one, and the scheduler's arithmetic in time.Duration
	// overflows past 292 years.
	const most = slurmspec.MaxTimeLimitSeconds * time.Second
	if d := s.GetTimeout(); d != nil {
		if err := d.CheckValid(); err != nil || d.AsDuration() < 0 || d.GetSeconds() > slurmspec.MaxTimeLimitSeconds {
			v.Add(f+".timeout", "must be a duration of 0 to a century (e.g. \"3600s\"; at most %v)", most)
		}
	}
	if d := s.GetMaxWaitDuration(); d != nil {
		if err := d.CheckValid(); err != nil || d.AsDuration() < 0 || d.GetSeconds() > slurmspec.MaxTimeLimitSeconds {
			v.Add(f+".max_wait_duration", "must be a duration of 0 to a century (e.g. \"1800s\"; at most %v)", most)
		}
	}
	if _, ok := trainingv1.Scheduling_Strategy_name[int32(s.GetStrategy())]; !ok {
		v.Add(f+".strategy", "unknown strategy %d (STANDARD, SPOT or FLEX_START)", int32(s.GetStrategy()))
	}
}

func validateTuning(v *errs.Validator, f string, j *trainingv1.HyperparameterTuningJob) {
	maxTrials := j.GetMaxTrialCount()
	switch {
	case maxTrials < 1:
		v.Add(f+".max_trial_count", "must be at least 1, got %d", maxTrials)
	case maxTrials > MaxTrialCount:
		v.Add(f+".max_trial_count", "at most %d trials, got %d", MaxTrialCount, maxTrials)
	}
	switch par := j.GetParallelTrialCount(); {
	case par < 1:
		v.Add(f+".parallel_trial_count", "must be at least 1, got %d", par)
	case par > MaxParallelTrials:
		v.Add(f+".parallel_trial_count", "at most %d trials at once, got %d", MaxParallelTrials, par)
	case maxTrials >= 1 && par > maxTrials:
		v.Add(f+".parallel_trial_count", "%d is more than max_trial_count (%d)", par, maxTrials)
	}
	switch n := j.GetMaxFailedTrialCount(); {
	case n < 0:
		v.Add(f+".max_failed_trial_count", "must not be negative, got %d", n)
	case maxTrials >= 1 && n > maxTrials:
		v.Add(f+".max_failed_trial_count", "%d is more than max_trial_count (%d)", n, maxTrials)
	}
	if j.GetStudySpec() == nil {
		v.Add(f+".study_spec", "required: the metrics to optimise and the parameters to search")
	} else {
		validateStudy(v, f+".study_spec", j.GetStudySpec())
	}
	if j.GetTrialJobSpec() == nil {
		v.Add(f+".trial_job_spec", "required: the CustomJob spec each trial runs")
	} else {
		validateSpec(v, f+".trial_job_spec", j.GetTrialJobSpec())
	}
}

func validateStudy(v *errs.Validator, f string, s *trainingv1.StudySpec) {
	metrics := s.GetMetrics()
	switch {
	case len(metrics) == 0:
		v.Add(f+".metrics", "at least one metric is required (metric_id and goal MAXIMIZE or MINIMIZE)")
	case len(metrics) > MaxMetrics:
		v.Add(f+".metrics", "at most %d metrics, got %d", MaxMetrics, len(metrics))
	default:
		seen := map[string]int{}
		for i, m := range metrics {
			mf := fmt.Sprintf("%s.metrics[%d]", f, i)
			if !metricIDRE.MatchString(m.GetMetricId()) {
				v.Add(mf+".metric_id", "%s must be 1 to 64 letters, digits, '_', '.', '/' or '-', starting with a letter or '_'", clip(m.GetMetricId()))
			} else if k, dup := seen[m.GetMetricId()]; dup {
				v.Add(mf+".metric_id", "%s is also metrics[%d]", m.GetMetricId(), k)
			} else {
				seen[m.GetMetricId()] = i
			}
			g := m.GetGoal()
			v.Check(g == trainingv1.StudySpec_MetricSpec_MAXIMIZE || g == trainingv1.StudySpec_MetricSpec_MINIMIZE,
				mf+".goal", "must be MAXIMIZE or MINIMIZE, got %s", g)
		}
	}
	params := s.GetParameters()
	if len(params) == 0 {
		v.Add(f+".parameters", "at least one parameter is required")
	}
	if n := countParams(params, 0); n > MaxParameters {
		v.Add(f+".parameters", "at most %d parameters (conditional ones included), got more", MaxParameters)
		return
	}
	ids := map[string]string{}
	grid := s.GetAlgorithm() == trainingv1.StudySpec_GRID_SEARCH
	for i, p := range params {
		validateParam(v, fmt.Sprintf("%s.parameters[%d]", f, i), p, 0, ids, grid)
	}
	if _, ok := trainingv1.StudySpec_Algorithm_name[int32(s.GetAlgorithm())]; !ok {
		v.Add(f+".algorithm", "unknown algorithm %d (ALGORITHM_UNSPECIFIED for Bayesian optimisation, GRID_SEARCH or RANDOM_SEARCH)", int32(s.GetAlgorithm()))
	}
	if _, ok := trainingv1.StudySpec_MeasurementSelectionType_name[int32(s.GetMeasurementSelectionType())]; !ok {
		v.Add(f+".measurement_selection_type", "unknown type %d (LAST_MEASUREMENT or BEST_MEASUREMENT)", int32(s.GetMeasurementSelectionType()))
	}
	if a := s.GetAshaStoppingSpec(); a != nil {
		af := f + ".asha_stopping_spec"
		v.Check(a.GetMinStepCount() >= 0, af+".min_step_count", "must not be negative, got %d", a.GetMinStepCount())
		v.Check(a.GetMaxStepCount() == 0 || a.GetMaxStepCount() >= a.GetMinStepCount(), af+".max_step_count",
			"%d is less than min_step_count (%d); 0 means no bound", a.GetMaxStepCount(), a.GetMinStepCount())
		v.Check(a.GetReductionFactor() == 0 || (a.GetReductionFactor() >= 2 && a.GetReductionFactor() <= 16), af+".reduction_factor",
			"must be 2 to 16 (0: the default), got %d", a.GetReductionFactor())
	}
}

// countParams counts params and their conditional children, stopping once
// past MaxParameters (or past the depth bound), so that a hostile tree
// costs no more than the bound.
func countParams(params []*trainingv1.StudySpec_ParameterSpec, depth int) int {
	n := len(params)
	if n > MaxParameters || depth > MaxConditionalDepth {
		return n
	}
	for _, p := range params {
		kids := make([]*trainingv1.StudySpec_ParameterSpec, 0, len(p.GetConditionalParameterSpecs()))
		for _, c := range p.GetConditionalParameterSpecs() {
			kids = append(kids, c.GetParameterSpec())
		}
		if n += countParams(kids, depth+1); n > MaxParameters {
			return n
		}
	}
	return n
}

// validateParam checks one parameter at depth (0: top level); ids maps
// every parameter id seen to its field path (ids are flags: unique).
func validateParam(v *errs.Validator, f string, p *trainingv1.StudySpec_ParameterSpec, depth int, ids map[string]string, grid bool) {
	if p == nil {
		v.Add(f, "required")
		return
	}
	id := p.GetParameterId()
	switch {
	case !paramIDRE.MatchString(id):
		v.Add(f+".parameter_id", "%s must be 1 to 64 letters, digits, '_', '.' or '-', starting with a letter or '_' (trials get it as --%s=VALUE)", clip(id), "ID")
	case ids[id] != "":
		v.Add(f+".parameter_id", "%s is also %s", id, ids[id])
	default:
		ids[id] = f
	}
	scale := p.GetScaleType()
	if _, ok := trainingv1.StudySpec_ParameterSpec_ScaleType_name[int32(scale)]; !ok {
		v.Add(f+".scale_type", "unknown scale type %d", int32(scale))
	}
	logScale := scale == trainingv1.StudySpec_ParameterSpec_UNIT_LOG_SCALE || scale == trainingv1.StudySpec_ParameterSpec_UNIT_REVERSE_LOG_SCALE
	switch {
	case p.GetDoubleValueSpec() != nil:
		d := p.GetDoubleValueSpec()
		lo, hi := d.GetMinValue(), d.GetMaxValue()
		switch {
		case !finite(lo) || !finite(hi):
			v.Add(f+".double_value_spec", "min_value and max_value must be finite numbers")
		case hpo.WideRange(lo, hi):
			// The search maps [0, 1] onto the range in float64: a width
			// that overflows makes every suggestion a bound.
			v.Add(f+".double_value_spec", "[%g, %g] is too wide to search: |min_value| + |max_value| must stay below %g", lo, hi, math.MaxFloat64)
		case lo > hi:
			v.Add(f+".double_value_spec.max_value", "%g is less than min_value %g", hi, lo)
		case logScale && lo <= 0:
			v.Add(f+".double_value_spec.min_value", "a log scale needs min_value > 0, got %g", lo)
		case d.DefaultValue != nil && (d.GetDefaultValue() < lo || d.GetDefaultValue() > hi):
			v.Add(f+".double_value_spec.default_value", "%g is outside [%g, %g]", d.GetDefaultValue(), lo, hi)
		}
		v.Check(!grid, f+".double_value_spec", "GRID_SEARCH needs a finite grid: use INTEGER, DISCRETE or CATEGORICAL parameters")
	case p.GetIntegerValueSpec() != nil:
		d := p.GetIntegerValueSpec()
		lo, hi := d.GetMinValue(), d.GetMaxValue()
		switch {
		case lo < -hpo.MaxIntegerBound || lo > hpo.MaxIntegerBound:
			// The search works in float64 (libs/hpo), which refuses the
			// study when it starts: refused here, before it is accepted.
			v.Add(f+".integer_value_spec.min_value", "%d is outside ±2^52 (%d), the most the search represents exactly", lo, int64(hpo.MaxIntegerBound))
		case hi < -hpo.MaxIntegerBound || hi > hpo.MaxIntegerBound:
			v.Add(f+".integer_value_spec.max_value", "%d is outside ±2^52 (%d), the most the search represents exactly", hi, int64(hpo.MaxIntegerBound))
		case lo > hi:
			v.Add(f+".integer_value_spec.max_value", "%d is less than min_value %d", hi, lo)
		case logScale && lo <= 0:
			v.Add(f+".integer_value_spec.min_value", "a log scale needs min_value > 0, got %d", lo)
		case d.DefaultValue != nil && (d.GetDefaultValue() < lo || d.GetDefaultValue() > hi):
			v.Add(f+".integer_value_spec.default_value", "%d is outside [%d, %d]", d.GetDefaultValue(), lo, hi)
		}
	case p.GetCategoricalValueSpec() != nil:
		vals := p.GetCategoricalValueSpec().GetValues()
		cf := f + ".categorical_value_spec.values"
		switch {
		case len(vals) == 0:
			v.Add(cf, "at least one value is required")
		case len(vals) > MaxCategoricalValues:
			v.Add(cf, "at most %d values, got %d", MaxCategoricalValues, len(vals))
		default:
			seen := map[string]bool{}
			for i, s := range vals {
				vf := fmt.Sprintf("%s[%d]", cf, i)
				switch {
				case s == "" || len(s) > MaxCategoricalValueBytes:
					v.Add(vf, "must be 1 to %d bytes, got %d", MaxCategoricalValueBytes, len(s))
				case !utf8.ValidString(s) || strings.IndexFunc(s, termtext.Spoofing) >= 0:
					// A trial's value is printed in `loom hptuning trials`
					// and passed as --ID=VALUE: an escape (OSC 52 writes a
					// viewer's clipboard) or a bidi override has no place.
					v.Add(vf, "%s holds a control character or invalid UTF-8: use printable text", clip(s))
				case seen[s]:
					v.Add(vf, "%s is listed twice", clip(s))
				}
				seen[s] = true
			}
			if d := p.GetCategoricalValueSpec().DefaultValue; d != nil && !seen[*d] {
				v.Add(f+".categorical_value_spec.default_value", "%s is not one of the values", clip(*d))
			}
		}
		v.Check(scale == trainingv1.StudySpec_ParameterSpec_SCALE_TYPE_UNSPECIFIED, f+".scale_type", "a CATEGORICAL parameter has no scale")
	case p.GetDiscreteValueSpec() != nil:
		vals := p.GetDiscreteValueSpec().GetValues()
		df := f + ".discrete_value_spec.values"
		switch {
		case len(vals) == 0:
			v.Add(df, "at least one value is required")
		case len(vals) > MaxCategoricalValues:
			v.Add(df, "at most %d values, got %d", MaxCategoricalValues, len(vals))
		default:
			seen := map[float64]bool{}
			for i, x := range vals {
				switch {
				case !finite(x):
					v.Add(fmt.Sprintf("%s[%d]", df, i), "must be a finite number")
				case seen[x]:
					v.Add(fmt.Sprintf("%s[%d]", df, i), "%g is listed twice", x)
				case logScale && x <= 0:
					v.Add(fmt.Sprintf("%s[%d]", df, i), "a log scale needs values > 0, got %g", x)
				}
				seen[x] = true
			}
			if d := p.GetDiscreteValueSpec().DefaultValue; d != nil && !seen[*d] {
				v.Add(f+".discrete_value_spec.default_value", "%g is not one of the values", *d)
			}
		}
	default:
		v.Add(f, "one of double_value_spec, integer_value_spec, categorical_value_spec or discrete_value_spec is required")
	}
	conds := p.GetConditionalParameterSpecs()
	if len(conds) == 0 {
		return
	}
	if depth+1 > MaxConditionalDepth {
		v.Add(f+".conditional_parameter_specs", "conditional parameters nest at most %d deep", MaxConditionalDepth)
		return
	}
	for i, c := range conds {
		cf := fmt.Sprintf("%s.conditional_parameter_specs[%d]", f, i)
		validateCondition(v, cf, p, c)
		validateParam(v, cf+".parameter_spec", c.GetParameterSpec(), depth+1, ids, grid)
	}
}

// validateCondition checks that a conditional parameter's parent values
// are of its parent's type and among its feasible values.
func validateCondition(v *errs.Validator, f string, parent *trainingv1.StudySpec_ParameterSpec, c *trainingv1.StudySpec_ParameterSpec_ConditionalParameterSpec) {
	switch {
	case c.GetParentCategoricalValues() != nil:
		vals := c.GetParentCategoricalValues().GetValues()
		if parent.GetCategoricalValueSpec() == nil {
			v.Add(f+".parent_categorical_values", "the parent %s is not CATEGORICAL", parent.GetParameterId())
			return
		}
		if !countOK(v, f+".parent_categorical_values.values", len(vals)) {
			return
		}
		for i, s := range vals {
			v.Check(slices.Contains(parent.GetCategoricalValueSpec().GetValues(), s), fmt.Sprintf("%s.parent_categorical_values.values[%d]", f, i),
				"%s is not a value of %s", clip(s), parent.GetParameterId())
		}
	case c.GetParentDiscreteValues() != nil:
		vals := c.GetParentDiscreteValues().GetValues()
		if parent.GetDiscreteValueSpec() == nil {
			v.Add(f+".parent_discrete_values", "the parent %s is not DISCRETE", parent.GetParameterId())
			return
		}
		if !countOK(v, f+".parent_discrete_values.values", len(vals)) {
			return
		}
		for i, x := range vals {
			found := false
			for _, y := range parent.GetDiscreteValueSpec().GetValues() {
				found = found || x == y
			}
			v.Check(found, fmt.Sprintf("%s.parent_discrete_values.values[%d]", f, i), "%g is not a value of %s", x, parent.GetParameterId())
		}
	case c.GetParentIntValues() != nil:
		vals := c.GetParentIntValues().GetValues()
		spec := parent.GetIntegerValueSpec()
		if spec == nil {
			v.Add(f+".parent_int_values", "the parent %s is not INTEGER", parent.GetParameterId())
			return
		}
		if !countOK(v, f+".parent_int_values.values", len(vals)) {
			return
		}
		for i, x := range vals {
			v.Check(x >= spec.GetMinValue() && x <= spec.GetMaxValue(), fmt.Sprintf("%s.parent_int_values.values[%d]", f, i),
				"%d is outside %s's [%d, %d]", x, parent.GetParameterId(), spec.GetMinValue(), spec.GetMaxValue())
		}
	default:
		v.Add(f, "one of parent_categorical_values, parent_discrete_values or parent_int_values is required: the parent's values under which it is searched")
	}
}

func countOK(v *errs.Validator, f string, n int) bool {
	switch {
	case n == 0:
		v.Add(f, "at least one value is required")
	case n > MaxCategoricalValues:
		v.Add(f, "at most %d values, got %d", MaxCategoricalValues, n)
	default:
		return true
	}
	return false
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// clip quotes s, cut to 64 bytes: a refusal never echoes megabytes.
func clip(s string) string {
	if len(s) > 64 {
		return fmt.Sprintf("%q…", s[:64])
	}
	return fmt.Sprintf("%q", s)
}

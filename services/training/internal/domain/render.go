package domain

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/clusterspec"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Rendering settings.
const (
	// WorkerRestarts is the job's max_retries: as on Vertex, a replica that
	// exits non-zero is restarted (here the job's run, every replica with
	// it, since one scheduler job holds them all) at most this many times;
	// then the CustomJob fails. restart_job_on_worker_restart is therefore
	// what Loom always does. Infrastructure failures (a node lost) are
	// requeued by the scheduler without counting against it.
	// disable_retries turns both off.
	WorkerRestarts = 3
	// PoolPrefix names a CustomJob's node pool k "cj{id}-wp{k}", so that
	// node hostnames sort pool by pool (cj7-wp0-0001 < cj7-wp1-0001 ...).
	PoolPrefix = "wp"
	// DefaultMasterPortBase is where the agent's MASTER_PORT default starts
	// (29500 + id % 1000); recorded here only for the docs.
	DefaultMasterPortBase = 29500
)

// workerPool is one entry of LOOM_WORKER_POOLS.
type workerPool struct {
	ReplicaCount int64 `json:"replicaCount"`
}

// Dirs are a CustomJob's AIP_* directories ("" when it has no
// base_output_directory).
type Dirs struct {
	Model, Checkpoint, Logs string
	// Output holds the replicas' standard output and error (Loom's: Vertex
	// sends them to Cloud Logging).
	Output string
}

// OutputDirs returns the AIP directories of a CustomJob with spec, for trial
// trialID ("" when not a trial): <prefix>/model, /checkpoints, /logs,
// /output, a
// trial's under <prefix>/<trial id>/.
func OutputDirs(spec *trainingv1.CustomJobSpec, trialID string) Dirs {
	base := strings.TrimRight(spec.GetBaseOutputDirectory().GetOutputUriPrefix(), "/")
	if base == "" {
		return Dirs{}
	}
	if trialID != "" {
		base += "/" + trialID
	}
	return Dirs{Model: base + "/model", Checkpoint: base + "/checkpoints", Logs: base + "/logs", Output: base + "/output"}
}

// localOutputDir is the local directory the replicas' output goes to
// (dirs.Output as a path), or "" when the base output directory is unset
// or not local: the output then stays in the cluster's shared directory.
func localOutputDir(dirs Dirs) string {
	if out := localPath(dirs.Output); strings.HasPrefix(out, "/") {
		return out
	}
	return ""
}

// localPath turns a file:// URI into a path; anything else is returned as is.
func localPath(uri string) string {
	if p, ok := strings.CutPrefix(uri, "file://"); ok {
		return p
	}
	return uri
}

// RenderJob returns the scheduler job of CustomJob cj (its name parsed as
// n, on cluster, owned by cj.user), for trial trialID (""): one job, one
// node per replica, exclusive, pool 0's command run on every node (the agent
// computes each replica's role from its node index and LOOM_WORKER_POOLS).
// logDir ("": none) is the directory the replicas' output goes to when
// the base output directory is not local (CJ.LogDir, for a job on an
// ephemeral cluster). An error names the field that cannot be run and why.
func RenderJob(n Name, cj *trainingv1.CustomJob, cluster, trialID, logDir string) (*loomv1.Job, error) {
	spec := cj.GetJobSpec()
	pools := spec.GetWorkerPoolSpecs()
	if len(pools) == 0 {
		return nil, fmt.Errorf("job_spec.worker_pool_specs: at least one is required")
	}
	var nodes int64
	gpus := int32(math.MaxInt32)
	wp := make([]workerPool, len(pools))
	for i, p := range pools {
		if p.GetReplicaCount() < 0 {
			return nil, fmt.Errorf("job_spec.worker_pool_specs[%d].replica_count: must not be negative", i)
		}
		wp[i] = workerPool{ReplicaCount: p.GetReplicaCount()}
		nodes += p.GetReplicaCount()
		if p.GetReplicaCount() > 0 {
			n := p.GetMachineSpec().GetAcceleratorCount()
			if m, ok := clusterspec.Machine(p.GetMachineSpec().GetMachineType()); ok && n == 0 {
				n = m.AcceleratorCount // the machine type's own GPUs when the spec leaves the count out
			}
			gpus = min(gpus, n)
		}
	}
	if nodes == 0 || pools[0].GetReplicaCount() == 0 {
		return nil, fmt.Errorf("job_spec.worker_pool_specs[0].replica_count: the primary pool needs a replica")
	}
	if gpus == math.MaxInt32 || gpus < 0 {
		gpus = 0
	}
	argv, image, err := command(n, pools[0])
	if err != nil {
		return nil, err
	}
	poolsJSON, _ := json.Marshal(wp)
	jobEnv := map[string]string{}
	// The user's env first, pool 0's winning, so that Loom's contract below
	// cannot be overridden by accident.
	for i := len(pools) - 1; i >= 0; i-- {
		for _, e := range poolEnv(pools[i]) {
			if e.GetName() != "" {
				jobEnv[e.GetName()] = e.GetValue()
			}
		}
	}
	dirs := OutputDirs(spec, trialID)
	if dirs.Model != "" {
		jobEnv["AIP_MODEL_DIR"] = dirs.Model
		jobEnv["AIP_CHECKPOINT_DIR"] = dirs.Checkpoint
		jobEnv["AIP_TENSORBOARD_LOG_DIR"] = dirs.Logs
	}
	jobEnv["CLOUD_ML_JOB_ID"] = strconv.FormatInt(n.ID, 10)
	if trialID != "" {
		jobEnv["CLOUD_ML_TRIAL_ID"] = trialID
	}
	jobEnv["LOOM_WORKER_POOLS"] = string(poolsJSON)
	if image != "" {
		jobEnv["LOOM_CONTAINER_IMAGE"] = image
	}
	job := &loomv1.Job{
		Name:        n.Job(),
		JobId:       strconv.FormatInt(n.ID, 10),
		Cluster:     cluster,
		DisplayName: cj.GetDisplayName(),
		Command:     argv,
		NodeCount:   int32(nodes),
		GpusPerNode: gpus,
		Env:         jobEnv,
		User:        cj.GetUser(),
		Exclusive:   true,
		State:       loomv1.JobState_PENDING,
		SubmitTime:  timestamppb.New(cj.GetCreateTime().AsTime()),
	}
	if cj.GetCreateTime() == nil {
		job.SubmitTime = nil
	}
	if dirs.Checkpoint != "" {
		job.CheckpointDir = localPath(dirs.Checkpoint)
	}
	// The replicas' output goes beside the model when the base directory is
	// a local path, else to the service's log directory when it has one,
	// not into the cluster's shared directory: an ephemeral cluster's is
	// deleted with it, and `loom jobs logs` must still show a finished
	// CustomJob's output.
	out := localOutputDir(dirs)
	if out == "" {
		out = logDir
	}
	if out != "" {
		job.OutputPattern = outputPattern(out)
	}
	s := spec.GetScheduling()
	if t := s.GetTimeout(); t != nil && t.AsDuration() > 0 {
		job.TimeLimitSeconds = int64(math.Ceil(t.AsDuration().Seconds()))
	}
	job.MaxRetries = WorkerRestarts
	if s.GetDisableRetries() {
		no := false
		job.Requeue, job.MaxRetries = &no, 0
	}
	return job, nil
}

// outputPattern is the output pattern of a job whose output file goes to
// directory dir: job-<job id>.out there.
func outputPattern(dir string) string {
	// A % in the directory is the directory's, not a pattern field.
	return strings.ReplaceAll(dir, "%", "%%") + "/job-%j.out"
}

func poolEnv(p *trainingv1.WorkerPoolSpec) []*trainingv1.EnvVar {
	if c := p.GetContainerSpec(); c != nil {
		return c.GetEnv()
	}
	return p.GetPythonPackageSpec().GetEnv()
}

// command returns the argv pool p's replicas run and the image the runtime
// is given.
func command(n Name, p *trainingv1.WorkerPoolSpec) (argv []string, image string, err error) {
	if c := p.GetContainerSpec(); c != nil {
		argv = append(append([]string{}, c.GetCommand()...), c.GetArgs()...)
		if len(c.GetCommand()) == 0 {
			return nil, "", fmt.Errorf("job_spec.worker_pool_specs[0].container_spec.command: required: no container engine runs here, so the image's entrypoint is unknown; give the program to run")
		}
		return argv, c.GetImageUri(), nil
	}
	pp := p.GetPythonPackageSpec()
	if pp == nil {
		return nil, "", fmt.Errorf("job_spec.worker_pool_specs[0]: container_spec or python_package_spec is required")
	}
	if pp.GetPythonModule() == "" {
		return nil, "", fmt.Errorf("job_spec.worker_pool_specs[0].python_package_spec.python_module: required")
	}
	return PythonPackageCommand(n.ID, pp), pp.GetExecutorImageUri(), nil
}

// PythonPackageCommand renders a python_package_spec as a command: a
// per-job virtual environment on each node (system site packages visible),
// its file:// packages installed offline without dependencies, then
// `python -m <module> <args>` run in it. The args travel as the script's
// positional parameters, never through the shell's parsing.
//
// The venv is a directory mktemp makes, the job's owner's alone (0700) and
// of a name no one can guess: a fixed name under the shared /tmp let another
// user put a directory there first (the job then failed) or swap one in
// with their own bin/python (run as the job's owner). It is removed when
// the script exits, however it ends (an EXIT trap): the program runs as the
// script's child rather than exec'd so that the trap outlives it, and a
// SIGTERM or SIGINT (a cancel, the agent's stop) is passed on to it and
// waited for before the venv goes. One left by a SIGKILL (past the agent's
// kill grace) or a dead node stays for the node's /tmp cleaning.
func PythonPackageCommand(id int64, pp *trainingv1.PythonPackageSpec) []string {
	var pkgs []string
	for _, u := range pp.GetPackageUris() {
		pkgs = append(pkgs, shellQuote(localPath(u)))
	}
	script := strings.Join([]string{
		"set -e",
		fmt.Sprintf(`v=$(mktemp -d "${TMPDIR:-/tmp}/loom-cj-%d-venv-${RANK:-0}.XXXXXXXXXX")`, id),
		`pid=`,
		`trap 'rm -rf "$v"' EXIT`,
		`trap 'if [ -n "$pid" ]; then kill -TERM "$pid" 2>/dev/null; wait "$pid"; fi; exit 143' TERM INT HUP`,
		`python3 -m venv --system-site-packages "$v"`,
	}, "\n") + "\n"
	if len(pkgs) > 0 {
		script += `"$v/bin/python" -m pip install --quiet --no-index --no-deps --no-build-isolation ` + strings.Join(pkgs, " ") + "\n"
	}
	script += `"$v/bin/python" -m ` + shellQuote(pp.GetPythonModule()) + ` "$@" </dev/null &` + "\n" +
		"pid=$!\nset +e\nwait \"$pid\"\nrc=$?\nexit $rc\n"
	return append([]string{"/bin/sh", "-c", script, "loom-python-package"}, pp.GetArgs()...)
}

// shellQuote quotes s for sh as one word.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// RenderCluster returns the ephemeral cluster of CustomJob n: one node pool
// per worker pool with replicas ("cj{id}-wp{k}", replica_count nodes of its
// machine type), normalized and validated (an error names what the
// provisioner would refuse).
func RenderCluster(n Name, cj *trainingv1.CustomJob) (*loomv1.Cluster, error) {
	c := &loomv1.Cluster{
		Name:        n.EphemeralCluster(),
		Labels:      map[string]string{"loom-custom-job": strconv.FormatInt(n.ID, 10)},
		Description: "ephemeral cluster of " + n.String(),
		Compute:     &loomv1.ComputeResources{},
	}
	capacity := loomv1.CapacitySource_ON_DEMAND
	switch cj.GetJobSpec().GetScheduling().GetStrategy() {
	case trainingv1.Scheduling_SPOT, trainingv1.Scheduling_LOW_COST:
		capacity = loomv1.CapacitySource_SPOT
	case trainingv1.Scheduling_FLEX_START:
		capacity = loomv1.CapacitySource_FLEX_START
	}
	for i, p := range cj.GetJobSpec().GetWorkerPoolSpecs() {
		if p.GetReplicaCount() <= 0 {
			continue
		}
		np := &loomv1.NodePool{
			Id:          fmt.Sprintf("cj%d-%s%d", n.ID, PoolPrefix, i),
			MachineType: p.GetMachineSpec().GetMachineType(),
			NodeCount:   int32(p.GetReplicaCount()),
			Capacity:    &loomv1.CapacitySource{Type: capacity},
		}
		if d := p.GetDiskSpec(); d != nil && (d.GetBootDiskType() != "" || d.GetBootDiskSizeGb() > 0) {
			np.BootDisk = &loomv1.BootDisk{Type: d.GetBootDiskType(), SizeGb: d.GetBootDiskSizeGb()}
		}
		c.Compute.NodePools = append(c.Compute.NodePools, np)
	}
	clusterspec.Normalize(c)
	if err := clusterspec.Validate(c); err != nil {
		return nil, fmt.Errorf("job_spec.worker_pool_specs: its cluster cannot be made: %v", err)
	}
	return c, nil
}

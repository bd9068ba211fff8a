package domain

import (
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/clusterspec"
	"github.com/loom-ml/loom/libs/slurmspec"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// SignalName normalises a signal given as a name ("USR1", "SIGUSR1", any
// case) or a number ("10") to its name without the SIG prefix. The grammar
// is libs/slurmspec's, shared with the gateway and the Slurm commands.
func SignalName(s string) (string, error) {
	name, err := slurmspec.ParseSignalName(s)
	if err != nil {
		return "", fmt.Errorf("invalid signal %q: %w", s, err)
	}
	return name, nil
}

// JobSignal is a parsed --signal "[{B|R}:]SIG[@seconds]".
type JobSignal struct {
	// Name is the signal's name ("USR1"); "" when the job asked for none.
	Name string
	// Lead is how long before the time limit it is sent (default 60 s).
	Lead time.Duration
	// BatchOnly: B: — only the batch shell gets it.
	BatchOnly bool
}

// ParseJobSignal parses a job's --signal; "" gives the zero JobSignal.
func ParseJobSignal(spec string) (JobSignal, error) {
	if strings.TrimSpace(spec) == "" {
		return JobSignal{}, nil
	}
	sig, err := slurmspec.ParseSignal(spec)
	if err != nil {
		return JobSignal{}, fmt.Errorf("--signal %q: %w", spec, err)
	}
	return JobSignal{Name: sig.Name, Lead: time.Duration(sig.Seconds) * time.Second, BatchOnly: sig.Batch}, nil
}

// ArraySpec is a parsed --array spec as the scheduler keeps it: its task
// indexes in ascending order and its % limit.
type ArraySpec struct {
	Indexes []int32
	Limit   int32
}

// ParseArraySpec parses an --array spec with libs/slurmspec's grammar (the
// one the gateway and the Slurm commands use), its task ids below
// maxArraySize (Slurm's MaxArraySize, Config.MaxArraySize).
func ParseArraySpec(spec string, maxArraySize int) (ArraySpec, error) {
	a, err := slurmspec.ParseArray(spec, maxArraySize)
	if err != nil {
		return ArraySpec{}, err
	}
	idx := a.Indexes()
	out := ArraySpec{Indexes: make([]int32, len(idx)), Limit: int32(min(a.Limit, math.MaxInt32))}
	for i, x := range idx {
		out.Indexes[i] = int32(x) // below MaxArraySizeCeiling
	}
	return out, nil
}

// workDir is the job's working directory: --chdir (relative to the submit
// directory), else the submit directory, else its owner's home on the
// cluster, <shared dir>/<user> (the agent makes it, the owner's, as `loom
// clusters login` does), as Slurm runs a job submitted without a directory
// in its owner's home. The shared dir itself is root's, and the fallback
// of a job whose owner's name is no account name: a user's job there could
// not write its output (the shared dir is root's, 0755).
func workDir(spec *loomv1.Job, sharedDir string) string {
	submit := submitDir(spec, sharedDir)
	wd := spec.GetWorkDir()
	switch {
	case wd == "":
		return submit
	case filepath.IsAbs(wd):
		return filepath.Clean(wd)
	}
	return filepath.Join(submit, wd)
}

// submitDir is the job's submit directory (SLURM_SUBMIT_DIR), else, for a
// job submitted without one (the API, a CustomJob), its owner's home as
// workDir says.
func submitDir(spec *loomv1.Job, sharedDir string) string {
	if d := spec.GetSubmitDir(); d != "" {
		return d
	}
	if u := spec.GetUser(); u != "root" && sharedDir != "" && auth.CheckUserName(u) == nil && clusterspec.HomeName(u) {
		return filepath.Join(sharedDir, u)
	}
	return sharedDir
}

// outputPaths resolves the job's --output and --error against its working
// directory, for a run whose batch host is host. The default output is
// slurm-%j.out (slurm-%A_%a.out for array tasks); the error path is empty
// (joined with the output) when --error is not given.
func outputPaths(spec *loomv1.Job, wd, host string) (out, errPath string) {
	f := slurmspec.PatternFields{JobID: spec.GetJobId(), ArrayJobID: spec.GetJobId(), ArrayTaskID: "4294967294",
		Name: SlurmJobName(spec), User: spec.GetUser(), Node: host}
	if spec.GetArrayJobId() != "" {
		f.ArrayJobID, f.ArrayTaskID = spec.GetArrayJobId(), strconv.Itoa(int(spec.GetArrayTaskId()))
	}
	resolve := func(p string) string {
		p = slurmspec.ExpandPattern(p, f)
		if !filepath.IsAbs(p) {
			p = filepath.Join(wd, p)
		}
		return p
	}
	pat := spec.GetOutputPattern()
	if pat == "" {
		pat = "slurm-%j.out"
		if spec.GetArrayJobId() != "" {
			pat = "slurm-%A_%a.out"
		}
	}
	out = resolve(pat)
	if e := spec.GetErrorPattern(); e != "" {
		errPath = resolve(e)
	}
	return out, errPath
}

// cpusPerNode is what a job asks of each node's CPUs on nodes nodes with
// gpus GPUs each at most (slurmspec.CPUsPerNode: --cpus-per-gpu counts),
// at most an int32's worth: no node has that many, so the job waits
// (BadConstraints) rather than wrapping to a request that every node fits.
func cpusPerNode(spec *loomv1.Job, nodes int, gpus int32) int32 {
	return slurmspec.JobCPUsPerNode(spec, nodes, gpus)
}

// minCPUsPerNode is the CPUs a node of spec takes at its minimum node
// count, its --gpus spread over those nodes, the first ones one more
// (requestAvoiding's count, before the nodes are raised to fit), for
// --cpus-per-gpu's CPUs in the TRES gates.
func minCPUsPerNode(spec *loomv1.Job) int32 {
	nodes := int(max(spec.GetNodeCount(), 1))
	gpn := spec.GetGpusPerNode()
	if g := spec.GetGpus(); gpn == 0 && g > 0 {
		gpn = int32((int64(g) + int64(nodes) - 1) / int64(nodes))
	}
	return cpusPerNode(spec, nodes, gpn)
}

// FormatDuration writes seconds as Slurm writes a time limit: "UNLIMITED"
// for 0, else "[D-]HH:MM:SS".
func FormatDuration(secs int64) string {
	if secs <= 0 {
		return "UNLIMITED"
	}
	d, h, m, s := secs/86400, secs/3600%24, secs/60%60, secs%60
	if d > 0 {
		return fmt.Sprintf("%d-%02d:%02d:%02d", d, h, m, s)
	}
	return fmt.Sprintf("%02d:%02d:%02d", h, m, s)
}

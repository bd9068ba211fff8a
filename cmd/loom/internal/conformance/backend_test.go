package conformance

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// backendEnv picks the scheduler backend the suite runs against: unset or
// "builtin" (the built-in engine, agents run the jobs) or "slurm" (the
// scheduler's -backend=slurm against a real Slurm the fixture starts with
// scripts/slurm-local.sh; docs/slurm-backend.md, "Conformance").
const backendEnv = "LOOM_CONFORMANCE_BACKEND"

// slurmPortEnv, when set, is the first of the four consecutive ports the
// real Slurm listens on (slurmctld, slurmrestd, then one slurmd per node);
// unset, free ones are picked.
const slurmPortEnv = "LOOM_CONFORMANCE_SLURM_PORT"

// The real Slurm is cluster main (testdata/clusters/main.json): two
// a2-highgpu-4g nodes (48 CPUs, 4 GPUs, 340 GiB), named as Loom names
// them (gpu-0001, gpu-0002), in partitions batch (the default, no limit)
// and short, whose 20 s MaxTime is Slurm's shortest, a minute (Slurm's
// MaxTime counts minutes). The other clusters' tests (preemption, node
// failure, draining) need what the backend refuses and skip.
const (
	slurmNodes      = 2
	slurmCPUs       = 48
	slurmGPUs       = 4
	slurmMemMB      = 340 * 1024
	slurmNodeFormat = "gpu-%04d"
	slurmPartition  = "batch"
	slurmMore       = "short:1"
)

// onSlurm reports whether the suite runs on the Slurm backend; any value
// but "", "builtin" and "slurm" fails the fixture (checkBackend).
func onSlurm() bool { return os.Getenv(backendEnv) == "slurm" }

// checkBackend refuses a backendEnv the suite does not know, rather than
// running the built-in engine under a misspelt name.
func checkBackend() error {
	switch v := os.Getenv(backendEnv); v {
	case "", "builtin", "slurm":
		return nil
	default:
		return fmt.Errorf("%s=%q: want builtin or slurm", backendEnv, v)
	}
}

// What a test needs that the Slurm backend refuses: each is the feature as
// the backend's own refusal names it (libs/slurmmap, which the gateway
// refuses by at the call and the backend again; the scheduler's ports for
// the refused reads), so that a skip says which refusal it stands for.
const (
	needArrays     = "job arrays (--array)"
	needNodelist   = "node lists (--nodelist)"
	needSignal     = "a signal before the time limit (--signal)"
	needAppend     = "--open-mode=append"
	needUpdate     = "scontrol requeue/update (UpdateJob requeue, update)"
	needCommand    = "a job given as a command (not a batch script)"
	needSteps      = "job steps (srun, salloc, sstat, sacct's step rows: CreateJobStep, ListJobSteps)"
	needCancelStep = "cancelling a job step (scancel JOB.STEP)"
	needBatchSig   = "signalling the batch shell or the whole job alone (scancel --batch/--full)"
	needDrain      = "draining and resuming nodes (scontrol update node)"
	needSacctmgr   = "associations and accounts (sacctmgr)"
	needSinfo      = "the partition and node views (sinfo, scontrol show partition/node, sprio: ListPartitions, ListSlurmNodes)"
	needNodeEvents = "node events (a Loom node agent's death: the backend consumes none, Slurm owns its nodes)"
)

// needs skips t on the Slurm backend, naming each refused feature it
// needs; on the built-in engine it does nothing.
func needs(t *testing.T, features ...string) {
	t.Helper()
	if onSlurm() {
		t.Skipf("skipped on the slurm scheduler backend, which refuses %s (docs/slurm-backend.md)", strings.Join(features, "; "))
	}
}

// skipOnSlurm skips t on the Slurm backend for a reason that is not one of
// the backend's refusals (what the test's real Slurm is not set up for).
func skipOnSlurm(t *testing.T, why string) {
	t.Helper()
	if onSlurm() {
		t.Skip("skipped on the slurm scheduler backend: " + why)
	}
}

// slurmMissing says what a run on the Slurm backend lacks on this machine
// ("" when nothing): root, and the programs scripts/slurm-local.sh starts
// with REST=1, looked up as it does (PATH, then /usr/sbin).
func slurmMissing() string {
	if os.Geteuid() != 0 {
		return "the slurm backend's run starts a real Slurm, which needs root here (SlurmUser=root; slurmd runs jobs as their owners)"
	}
	var missing []string
	for _, b := range []string{"munged", "mungekey", "slurmctld", "slurmd", "sinfo", "sbatch", "slurmrestd"} {
		if _, err := exec.LookPath(b); err == nil {
			continue
		}
		if st, err := os.Stat(filepath.Join("/usr/sbin", b)); err == nil && !st.IsDir() {
			continue
		}
		missing = append(missing, b)
	}
	if jwt, _ := filepath.Glob("/usr/lib/*/slurm-wlm/auth_jwt.so"); len(jwt) == 0 {
		missing = append(missing, "auth_jwt.so")
	}
	if len(missing) == 0 {
		return ""
	}
	return "real Slurm is not installed (" + strings.Join(missing, ", ") + " not found): apt-get install -y --no-install-recommends " +
		"munge slurmctld slurmd slurm-client slurm-wlm-basic-plugins slurmrestd slurm-wlm-jwt-plugin"
}

// realSlurm is the Slurm the fixture started for the Slurm backend.
type realSlurm struct {
	script, dir string
	restPort    int
}

// startSlurm starts a real Slurm (slurmctld, one slurmd per node,
// slurmrestd with JWT auth) under dir with scripts/slurm-local.sh and
// returns it with the scheduler flags that send jobs to it.
func startSlurm(dir string) (*realSlurm, []string, error) {
	script, err := filepath.Abs(filepath.Join("..", "..", "..", "..", "scripts", "slurm-local.sh"))
	if err != nil {
		return nil, nil, err
	}
	base, err := slurmPorts()
	if err != nil {
		return nil, nil, err
	}
	s := &realSlurm{script: script, dir: dir, restPort: base + 1}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", script, "start", dir)
	cmd.Env = append(os.Environ(), "REST=1",
		"NODES="+strconv.Itoa(slurmNodes), "CPUS="+strconv.Itoa(slurmCPUs), "GPUS="+strconv.Itoa(slurmGPUs),
		"MEM="+strconv.Itoa(slurmMemMB),
		"NODE_FORMAT="+slurmNodeFormat, "PARTITION="+slurmPartition, "MORE_PARTITIONS="+slurmMore, "CLUSTER_NAME=loomconformance",
		"CTL_PORT="+strconv.Itoa(base), "REST_PORT="+strconv.Itoa(base+1), "NODE_PORT="+strconv.Itoa(base+2))
	if out, err := cmd.CombinedOutput(); err != nil {
		s.stop()
		return nil, nil, fmt.Errorf("%s start %s: %v\n%s", script, dir, err, out)
	}
	args := []string{"-backend=slurm", "-slurm-url=http://127.0.0.1:" + strconv.Itoa(s.restPort),
		"-slurm-jwt-key=" + filepath.Join(dir, "jwt_hs256.key"), "-slurm-poll=250ms"}
	return s, args, nil
}

// stop stops every daemon startSlurm started (the script stops them by
// their pidfiles under dir, nobody else's).
func (s *realSlurm) stop() {
	out, err := exec.Command("bash", s.script, "stop", s.dir).CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "conformance: %s stop %s: %v\n%s", s.script, s.dir, err, out)
	}
}

// slurmPorts returns the first of 2+slurmNodes consecutive ports:
// slurmPortEnv's, else a run of ports that were all free a moment ago.
func slurmPorts() (int, error) {
	n := 2 + slurmNodes
	if v := os.Getenv(slurmPortEnv); v != "" {
		p, err := strconv.Atoi(v)
		if err != nil || p < 1 || p > 65536-n {
			return 0, fmt.Errorf("%s=%q: want a port of 1..%d (it and the %d after it are used)", slurmPortEnv, v, 65536-n, n-1)
		}
		return p, nil
	}
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		base := l.Addr().(*net.TCPAddr).Port
		held := []net.Listener{l}
		for i := 1; i < n; i++ {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(base+i))
			if err != nil {
				break
			}
			held = append(held, l)
		}
		for _, l := range held {
			l.Close()
		}
		if len(held) == n {
			return base, nil
		}
	}
	return 0, fmt.Errorf("no %d consecutive free ports found: set %s", n, slurmPortEnv)
}

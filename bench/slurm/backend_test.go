package slurm

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/loom-ml/loom/cmd/loom/stack"
	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/testkit/need"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestSchedulerBackendSlurm runs Loom's scheduler on the Slurm backend
// (-backend=slurm) against a real slurmctld + slurmrestd, and drives it
// with Loom's own Slurm commands (the loom binary as sbatch, squeue,
// scontrol, scancel): a batch job goes PENDING/RUNNING → COMPLETED in
// squeue and scontrol and writes its output file under Loom's job id, as
// its owner (a non-root user: the backend submits with that user's own
// token); scancel cancels a running job in Slurm; an option the backend
// does not map (--ntasks-per-node) is refused by sbatch saying so; and a
// scheduler killed while a job runs re-adopts it from Redis after a
// restart and sees its end.
func TestSchedulerBackendSlurm(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds loom and runs real Slurm with an embedded Loom; skipped with -short")
	}
	if err := RESTInstalled(); err != nil {
		if need.Required() {
			t.Fatalf("%v; %s is set: add the packages to .ci/run", err, need.RequireEnv)
		}
		t.Skip("slurm backend test skipped: ", err)
	}
	ctx := testkit.Context(t, 8*time.Minute)
	bin := loomCommands(t)
	c, err := Start(ctx, Options{Dir: t.TempDir(), Nodes: 1, CPUsPerNode: 2, RealMemoryMB: 1000, REST: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})
	s, err := stack.Start(ctx, stack.Options{DataDir: t.TempDir(), Provider: "sim", LogLevel: "warn",
		SchedulerArgs: []string{"-backend=slurm", "-slurm-url=" + c.RESTURL, "-slurm-jwt-key=" + c.JWTKey, "-slurm-poll=250ms"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := s.Close(cctx); err != nil {
			t.Error(err)
		}
	})
	dial := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if key, err := s.AdminKey(); err == nil {
		dial = append(dial, grpc.WithPerRPCCredentials(auth.Bearer(key)))
	}
	conn, err := grpc.NewClient(s.GatewayAddr, dial...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	cluster := createSlurmCluster(ctx, t, conn)

	// The job's owner is a real account, not root: Slurm runs the job as
	// the user whose token submitted it.
	const user = "uslurmbackend"
	acct := testkit.OSUserNamed(t, user)
	if _, err := loomv1.NewAuthServiceClient(conn).SetMember(ctx, &loomv1.SetMemberRequest{
		Parent: "projects/default", User: user, Role: "user"}); err != nil {
		t.Fatal(err)
	}
	tok, err := s.UserToken(ctx, user)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if d, err := filepath.EvalSymlinks(dir); err == nil {
		dir = d
	}
	if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, int(acct.UID), int(acct.GID)); err != nil {
		t.Fatal(err)
	}
	sh := &shell{t: t, bin: bin, dir: dir, env: []string{"PATH=" + bin + ":/usr/bin:/bin", "HOME=" + dir,
		"USER=" + user, "LOGNAME=" + user, "LOOM_GATEWAY=" + s.GatewayAddr, "LOOM_PROJECT=default",
		"LOOM_CLUSTER=" + cluster, "LOOM_CONFIG_DIR=" + filepath.Join(dir, ".loom"), "LOOM_TOKEN=" + tok}}
	for name, script := range map[string]string{
		"hello.sh": "#!/bin/sh\necho \"hello job=$LOOM_JOB_ID user=$(id -un) slurm=$SLURM_JOB_ID\"\n",
		"sleep.sh": "#!/bin/sh\necho started\nexec sleep 300\n",
		"gate.sh":  "#!/bin/sh\nwhile [ ! -e gate-open ]; do sleep 0.1; done\necho through\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("BatchJobRunsToCompletion", func(t *testing.T) {
		id := sh.sbatch(t, "-J", "hello", "hello.sh")
		sh.waitState(t, id, "COMPLETED")
		out := sh.read(t, "slurm-"+id+".out")
		if !strings.Contains(out, "hello job="+id+" user="+user+" slurm=") {
			t.Errorf("slurm-%s.out = %q: want the job's Loom id and its owner", id, out)
		}
		kv := sh.showJob(t, id)
		if kv["UserId"] == "" || !strings.HasPrefix(kv["UserId"], user) || kv["ExitCode"] != "0:0" || kv["JobName"] != "hello" {
			t.Errorf("scontrol show job %s: UserId=%q ExitCode=%q JobName=%q", id, kv["UserId"], kv["ExitCode"], kv["JobName"])
		}
	})
	t.Run("ScancelCancelsInSlurm", func(t *testing.T) {
		id := sh.sbatch(t, "-J", "sleeper", "sleep.sh")
		testkit.WaitFor(t, 60*time.Second, "job "+id+" R in squeue", func() (bool, error) {
			return strings.TrimSpace(sh.ok(t, "squeue", "-h", "-j", id, "-o", "%i %t")) == id+" R", nil
		})
		sh.ok(t, "scancel", id)
		sh.waitState(t, id, "CANCELLED")
		if q := strings.TrimSpace(sh.ok(t, "squeue", "-h", "-j", id)); q != "" {
			t.Errorf("squeue -j %s after the cancel: %q", id, q)
		}
		if sq, err := c.Squeue(ctx, "-h", "-t", "all", "-o", "%T %k"); err != nil || !strings.Contains(sq, "CANCELLED loom:") {
			t.Errorf("Slurm's own squeue: %q, %v: want the job CANCELLED in Slurm", sq, err)
		}
	})
	t.Run("UnmappedOptionIsRefused", func(t *testing.T) {
		// The stack tells the gateway the backend: sbatch is refused at
		// the call, naming the option, and no job is made (the
		// scheduler's own refusal, the job FAILED with the reason, is the
		// last line: slurmbackend's tests).
		out, e, err := sh.run(t, "sbatch", "--ntasks-per-node=1", "hello.sh")
		if err == nil || out != "" || !strings.Contains(e, "tasks per node (--ntasks-per-node) is not supported by the slurm scheduler backend") ||
			!strings.Contains(e, "docs/slurm-backend.md") {
			t.Errorf("sbatch --ntasks-per-node: %v, %q, %q: want a refusal naming it, the backend and the doc", err, out, e)
		}
		// What is not mapped yet is refused by name, not answered wrongly.
		if _, e, err := sh.run(t, "sinfo"); err == nil || !strings.Contains(e, "not supported by the slurm scheduler backend") {
			t.Errorf("sinfo: %v, %q: want a refusal naming the backend", err, e)
		}
	})
	t.Run("RestartReadoptsRunningJob", func(t *testing.T) {
		id := sh.sbatch(t, "-J", "gate", "gate.sh")
		sh.waitState(t, id, "RUNNING")
		if err := s.Kill(ctx, "scheduler"); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "gate-open"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		// The job ends while no scheduler watches it.
		testkit.WaitFor(t, 60*time.Second, "Slurm to end the job", func() (bool, error) {
			out, err := c.Squeue(ctx, "-h", "-t", "all", "-o", "%T %k")
			return strings.Contains(out, "COMPLETED loom:projects/default/jobs/"+id), err
		})
		if err := s.Restart(ctx, "scheduler"); err != nil {
			t.Fatal(err)
		}
		sh.waitState(t, id, "COMPLETED")
		if out := sh.read(t, "slurm-"+id+".out"); !strings.Contains(out, "through") {
			t.Errorf("slurm-%s.out = %q", id, out)
		}
	})
}

// loomCommands builds the loom binary (or takes LOOM_CONFORMANCE_LOOM,
// as the conformance suite does) and links Slurm's command names to it.
func loomCommands(t *testing.T) string {
	t.Helper()
	bin := t.TempDir()
	loom := os.Getenv("LOOM_CONFORMANCE_LOOM")
	if loom == "" {
		loom = filepath.Join(bin, "loom")
		cmd := exec.Command("go", "build", "-o", loom, "github.com/loom-ml/loom/cmd/loom")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build loom: %v\n%s", err, out)
		}
	}
	for _, name := range []string{"sbatch", "squeue", "scontrol", "scancel", "sacct", "sinfo"} {
		if err := os.Symlink(loom, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	return bin
}

// createSlurmCluster makes the Loom cluster jobs are submitted to: its
// partition is Slurm's (the gateway checks a job's partition against the
// cluster's); its one simulated node runs nothing.
func createSlurmCluster(ctx context.Context, t *testing.T, conn *grpc.ClientConn) string {
	t.Helper()
	op, err := loomv1.NewClusterServiceClient(conn).CreateCluster(ctx, &loomv1.CreateClusterRequest{
		Parent: "projects/default", ClusterId: "slurm", Cluster: &loomv1.Cluster{
			Compute: &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{{Id: "cpu", MachineType: "n2-standard-2", NodeCount: 1}}},
			Orchestrator: &loomv1.Orchestrator{Slurm: &loomv1.SlurmOrchestrator{
				NodeSets:   []*loomv1.SlurmNodeSet{{Id: "cpu", NodePoolId: "cpu"}},
				Partitions: []*loomv1.SlurmPartition{{Id: DefaultPartition, NodeSetIds: []string{"cpu"}, Default: true}},
			}},
		}})
	if err != nil {
		t.Fatal(err)
	}
	ops := loomv1.NewOperationServiceClient(conn)
	for !op.GetDone() {
		if op, err = ops.WaitOperation(ctx, &loomv1.WaitOperationRequest{Name: op.GetName(), TimeoutSeconds: 10}); err != nil {
			t.Fatal(err)
		}
	}
	if e := op.GetError(); e != nil {
		t.Fatalf("create cluster: %s", e.GetMessage())
	}
	return op.GetCluster().GetName()
}

// shell runs Loom's Slurm commands as one user in one directory.
type shell struct {
	t        *testing.T
	bin, dir string
	env      []string
}

func (s *shell) run(t *testing.T, name string, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(s.bin, name), args...)
	cmd.Dir, cmd.Env = s.dir, s.env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}

func (s *shell) ok(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, errOut, err := s.run(t, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\nstdout: %s\nstderr: %s", name, strings.Join(args, " "), err, out, errOut)
	}
	return out
}

var submitted = regexp.MustCompile(`^Submitted batch job (\d+)\n$`)

func (s *shell) sbatch(t *testing.T, args ...string) string {
	t.Helper()
	out := s.ok(t, "sbatch", args...)
	m := submitted.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("sbatch %s: %q", strings.Join(args, " "), out)
	}
	return m[1]
}

// showJob is scontrol show job's KEY=VALUE pairs.
func (s *shell) showJob(t *testing.T, id string) map[string]string {
	t.Helper()
	kv := map[string]string{}
	for _, f := range strings.Fields(s.ok(t, "scontrol", "show", "job", id)) {
		if k, v, ok := strings.Cut(f, "="); ok {
			if _, seen := kv[k]; !seen {
				kv[k] = v
			}
		}
	}
	return kv
}

// waitState waits until scontrol shows the job in state.
func (s *shell) waitState(t *testing.T, id, state string) {
	t.Helper()
	var last map[string]string
	testkit.WaitFor(t, 90*time.Second, "job "+id+" "+state, func() (bool, error) {
		last = s.showJob(t, id)
		if st := last["JobState"]; st != state && st != "PENDING" && st != "RUNNING" && st != "COMPLETING" {
			t.Fatalf("job %s is %s (reason %q), want %s", id, st, last["Reason"], state)
		}
		return last["JobState"] == state, nil
	})
}

func (s *shell) read(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

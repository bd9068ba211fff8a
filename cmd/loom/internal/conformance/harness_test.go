package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/loom-ml/loom/cmd/loom/internal/agentcmd"
	"github.com/loom-ml/loom/cmd/loom/stack"
	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/testkit/need"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Commands are the links to loom the suite runs, as a login shell has them.
var commands = []string{"sbatch", "squeue", "sinfo", "scancel", "sacct", "scontrol", "sprio", "srun", "salloc", "sstat", "seff"}

// clusterIDs are the clusters the suite creates (testdata/clusters/<id>.json):
// "main" for most scripts, "pre" (one node, two partitions of different
// priority tiers) for preemption, "nf" (two CPU nodes) for node failure,
// "drain" (one CPU node) for draining; tests that change a cluster's nodes
// have one of their own, so that every test runs in parallel.
var clusterIDs = []string{"main", "pre", "nf", "drain"}

// nodeDownFile, in a node's directory, makes the node's agent (this test
// binary) hang without a heartbeat when the provisioner relaunches it: the
// machine stays down, as after a real crash.
const nodeDownFile = "conformance-node-down"

// TestMain runs this binary as a node agent when the local provider starts
// it (the re-exec trick: agents are real processes), and stops the shared
// stack after the tests.
func TestMain(m *testing.M) {
	if os.Getenv("LOOM_TEST_RUN_AGENT") == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		if _, err := os.Stat(filepath.Join(os.Getenv("LOOM_WORK_DIR"), nodeDownFile)); err == nil {
			<-ctx.Done() // a dead machine: no registration, no heartbeat
			os.Exit(0)
		}
		err := agentcmd.Run(ctx, nil, os.Stderr)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	teardown()
	os.Exit(code)
}

// fixture is what every test shares: the loom binary and its links, the
// stack and the clusters.
type fixture struct {
	bin      string
	tmp      string
	stack    *stack.Stack
	conn     *grpc.ClientConn
	clusters map[string]*loomv1.Cluster
	// built is when the loom binary was ready.
	built time.Time
	// slurm is the real Slurm the jobs run in on the Slurm backend
	// (backendEnv); nil on the built-in engine.
	slurm *realSlurm
}

var (
	suiteOnce sync.Once
	suite     *fixture
	suiteErr  error
)

// setup returns the shared fixture, starting it on first use.
func setup(t *testing.T) *fixture {
	t.Helper()
	if testing.Short() {
		t.Skip("the conformance suite builds loom and runs an embedded Loom with node agents; skipped with -short")
	}
	if onSlurm() {
		if why := slurmMissing(); why != "" {
			need.Missing(t, why)
		}
	}
	suiteOnce.Do(func() {
		began := time.Now()
		suite, suiteErr = start()
		if suiteErr == nil {
			t.Logf("conformance fixture: loom built in %v, stack and clusters up in %v", suite.built.Sub(began).Round(time.Millisecond), time.Since(suite.built).Round(time.Millisecond))
		}
	})
	if suiteErr != nil {
		t.Fatalf("conformance fixture: %v", suiteErr)
	}
	return suite
}

func teardown() {
	if suite == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if suite.conn != nil {
		_ = suite.conn.Close()
	}
	if suite.stack != nil {
		if err := suite.stack.Close(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "conformance: close stack:", err)
		}
	}
	if suite.slurm != nil {
		suite.slurm.stop()
	}
	_ = os.RemoveAll(suite.tmp)
}

func start() (*fixture, error) {
	if err := checkBackend(); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "loom-conformance-")
	if err != nil {
		return nil, err
	}
	// The sessions' users reach the clusters' shared homes under it.
	if err := os.Chmod(tmp, 0o755); err != nil {
		return nil, err
	}
	f := &fixture{tmp: tmp, bin: filepath.Join(tmp, "bin"), clusters: map[string]*loomv1.Cluster{}}
	if err := f.buildLoom(); err != nil {
		return f, err
	}
	f.built = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// A preempted job has 5 s after its --signal (default 30 s): the
	// preemption tests' victims checkpoint at once.
	if err := os.Setenv("LOOM_SCHEDULER_PREEMPT_GRACE", "5s"); err != nil {
		return f, err
	}
	// A dead node's step is fenced for 15 s (default 5 m) before its job
	// runs again elsewhere: the node-failure test's job reruns in seconds.
	if err := os.Setenv("LOOM_SCHEDULER_FENCE_TIMEOUT", "15s"); err != nil {
		return f, err
	}
	opts := stack.Options{
		DataDir:      filepath.Join(tmp, "stack"),
		AgentCommand: []string{os.Args[0]},
		// Heartbeats every half second, a node silent for 8 s is down:
		// node failure is detected in seconds, not the default 15 s,
		// without declaring busy nodes of a loaded machine dead.
		// Jobs' srun is the built loom's, as on a node with Loom's Slurm
		// commands installed (the agent's LOOM_SLURM_BIN).
		// Usage reports every second, for sstat.
		AgentEnv: []string{"LOOM_TEST_RUN_AGENT=1", "LOOM_HEARTBEAT_INTERVAL=500ms", "LOOM_SLURM_BIN=" + f.bin,
			"LOOM_ACCT_INTERVAL=1s"},
		HeartbeatTimeout: 8 * time.Second,
		LogLevel:         "error",
	}
	if onSlurm() {
		// Slurm runs the jobs: the clusters' nodes are simulated (no agent
		// processes to spend the CPUs on), the scheduler sends each job to
		// the real Slurm as its owner.
		var slurmArgs []string
		began := time.Now()
		if f.slurm, slurmArgs, err = startSlurm(filepath.Join(tmp, "slurm")); err != nil {
			return f, err
		}
		fmt.Fprintf(os.Stderr, "conformance: real Slurm up in %v (%s=slurm)\n", time.Since(began).Round(time.Millisecond), backendEnv)
		opts.Provider = "sim"
		// Simulated boots in a hundredth of their time (a create takes
		// seconds, not minutes); the health service's default
		// heartbeat timeout, as the sim's nodes beat every 5 s.
		opts.ProvisionerArgs = []string{"-sim-time-scale=0.01"}
		opts.HeartbeatTimeout = 0
		opts.SchedulerArgs = slurmArgs
	}
	f.stack, err = stack.Start(ctx, opts)
	if err != nil {
		return f, fmt.Errorf("start stack: %w", err)
	}
	dial := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	// As the administrator, when the gateway made one (authentication on).
	if key, err := f.stack.AdminKey(); err == nil {
		dial = append(dial, grpc.WithPerRPCCredentials(auth.Bearer(key)))
	}
	f.conn, err = grpc.NewClient(f.stack.GatewayAddr, dial...)
	if err != nil {
		return f, err
	}
	errc := make(chan error, len(clusterIDs))
	var mu sync.Mutex
	for _, id := range clusterIDs {
		go func() {
			c, err := f.createCluster(ctx, id)
			mu.Lock()
			f.clusters[id] = c
			mu.Unlock()
			errc <- err
		}()
	}
	var errs []error
	for range clusterIDs {
		errs = append(errs, <-errc)
	}
	return f, errors.Join(errs...)
}

// buildLoom builds cmd/loom into f.bin (or links LOOM_CONFORMANCE_LOOM) and
// links every Slurm command name to it.
func (f *fixture) buildLoom() error {
	if err := os.MkdirAll(f.bin, 0o755); err != nil {
		return err
	}
	loom := filepath.Join(f.bin, "loom")
	if pre := os.Getenv("LOOM_CONFORMANCE_LOOM"); pre != "" {
		abs, err := filepath.Abs(pre)
		if err != nil {
			return err
		}
		if err := os.Symlink(abs, loom); err != nil {
			return err
		}
	} else {
		cmd := exec.Command("go", "build", "-o", loom, "github.com/loom-ml/loom/cmd/loom")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build loom: %v\n%s", err, out)
		}
	}
	for _, name := range commands {
		if err := os.Symlink(loom, filepath.Join(f.bin, name)); err != nil {
			return err
		}
	}
	return nil
}

// createCluster creates testdata/clusters/<id>.json and waits until it runs.
func (f *fixture) createCluster(ctx context.Context, id string) (*loomv1.Cluster, error) {
	b, err := os.ReadFile(filepath.Join("testdata", "clusters", id+".json"))
	if err != nil {
		return nil, err
	}
	spec := &loomv1.Cluster{}
	if err := protojson.Unmarshal(b, spec); err != nil {
		return nil, fmt.Errorf("cluster %s: %w", id, err)
	}
	op, err := loomv1.NewClusterServiceClient(f.conn).CreateCluster(ctx, &loomv1.CreateClusterRequest{
		Parent: "projects/default", ClusterId: id, Cluster: spec})
	if err != nil {
		return nil, fmt.Errorf("create cluster %s: %w", id, err)
	}
	ops := loomv1.NewOperationServiceClient(f.conn)
	for !op.GetDone() {
		op, err = ops.WaitOperation(ctx, &loomv1.WaitOperationRequest{Name: op.GetName(), TimeoutSeconds: 10})
		if err != nil {
			return nil, fmt.Errorf("wait for cluster %s: %w", id, err)
		}
	}
	if e := op.GetError(); e != nil {
		return nil, fmt.Errorf("cluster %s: %s", id, e.GetMessage())
	}
	return op.GetCluster(), nil
}

// nodeDir is a local node's own directory (the local provider's layout:
// <data>/provisioner/clusters/<cluster>/nodes/<hostname>).
func (f *fixture) nodeDir(clusterID, host string) string {
	return filepath.Join(f.stack.DataDir, "provisioner", "clusters", clusterID, "nodes", host)
}

// session is one user in one submit directory on one cluster: how a test
// runs the commands, as that user in a login shell would.
type session struct {
	t       *testing.T
	f       *fixture
	dir     string
	cluster string
	user    string
	// uid and gid are the session user's account: jobs run as it.
	uid, gid int
	env      []string
	// last is the last command run and its result, for failed waits.
	last string
}

var nonName = regexp.MustCompile(`[^a-z0-9]+`)

// session starts a session on cluster id, as a user named after the test
// (so that -u and --me see only this test's jobs), in a new directory.
func (f *fixture) session(t *testing.T, clusterID string) *session {
	t.Helper()
	c := f.clusters[clusterID]
	if c == nil {
		t.Fatalf("no cluster %q", clusterID)
	}
	user := "u" + nonName.ReplaceAllString(strings.ToLower(strings.TrimPrefix(t.Name(), "Test")), "")
	if len(user) > 24 {
		user = user[:24]
	}
	dir := t.TempDir()
	// The scripts' own files are compared by path: resolve /tmp links.
	if d, err := filepath.EvalSymlinks(dir); err == nil {
		dir = d
	}
	// Jobs run as their owner: the session's user is a real account (made
	// for the test where missing), and its submit directory is theirs.
	acct := testkit.OSUserNamed(t, user)
	if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, int(acct.UID), int(acct.GID)); err != nil {
		t.Fatal(err)
	}
	env := []string{}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "LOOM_") || strings.HasPrefix(k, "SLURM_") || strings.HasPrefix(k, "SBATCH_") ||
			k == "USER" || k == "LOGNAME" || k == "PATH" || k == "PWD" {
			continue
		}
		env = append(env, kv)
	}
	env = append(env,
		"PATH="+f.bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"USER="+user, "LOGNAME="+user, "PWD="+dir,
		"LOOM_GATEWAY="+f.stack.GatewayAddr, "LOOM_PROJECT=default", "LOOM_CLUSTER="+c.GetName(),
		// The CLI's credentials file is the session's, not the real user's.
		"LOOM_CONFIG_DIR="+filepath.Join(f.tmp, "config"),
	)
	env = append(env, f.userToken(t, user)...)
	return &session{t: t, f: f, dir: dir, cluster: c.GetName(), user: user, uid: int(acct.UID), gid: int(acct.GID), env: env}
}

// userToken is the environment that makes the Slurm commands act as user:
// LOOM_TOKEN, a token the stack's login key gets for them (as the login
// daemon would for a local account), since USER names no one. Empty when
// the gateway made no login key.
func (f *fixture) userToken(t *testing.T, user string) []string {
	t.Helper()
	if _, err := f.stack.LoginKey(); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Like a site's sacctmgr add user, the administrator makes each
	// session's user a user of the project first; the stack's
	// administrator (loom up's OS user, root here) is one already.
	if user != f.stack.Admin {
		if _, err := loomv1.NewAuthServiceClient(f.conn).SetMember(ctx, &loomv1.SetMemberRequest{
			Parent: "projects/default", User: user, Role: "user"}); err != nil {
			t.Fatalf("make %s a user of the project: %v", user, err)
		}
	}
	tok, err := f.stack.UserToken(ctx, user)
	if err != nil {
		t.Fatalf("a token for %s: %v", user, err)
	}
	return []string{"LOOM_TOKEN=" + tok}
}

// grantQOS lets user ask for qos, as a site's administrator does with
// sacctmgr modify user USER set QOS+=...: an association of user with
// account root granting them.
func (f *fixture) grantQOS(t *testing.T, user string, qos ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := loomv1.NewAccountServiceClient(f.conn).SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: "projects/default",
		Association: &loomv1.Association{Account: "root", User: user, Qos: qos}}); err != nil {
		t.Fatalf("grant %s QOS %v: %v", user, qos, err)
	}
}

// in is s for subtest t: the same user, directory and environment, its
// failures t's.
func (s *session) in(t *testing.T) *session {
	c := *s
	c.t = t
	return &c
}

// result is one command's outcome.
type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
}

// run runs a Slurm command through its link, in the session's directory.
func (s *session) run(name string, args ...string) result {
	s.t.Helper()
	return s.runStdin("", name, args...)
}

// runStdin is run with stdin.
func (s *session) runStdin(stdin, name string, args ...string) result {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := s.command(ctx, name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	r, err := runCommand(cmd)
	if err != nil {
		s.t.Fatalf("%s %q: %v", name, args, err)
	}
	s.last = name + " " + strings.Join(args, " ") + ": " + r.String()
	return r
}

// start runs a Slurm command as run does, without waiting for it, for a
// test that acts while it runs; the channel gets its result. A command
// that could not be run at all gives exit -1 and the error on stderr (it
// ends in a goroutine, where the test cannot be failed).
func (s *session) start(name string, args ...string) <-chan result {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	cmd := s.command(ctx, name, args...)
	done := make(chan result, 1)
	go func() {
		defer cancel()
		r, err := runCommand(cmd)
		if err != nil {
			r.code, r.stderr = -1, r.stderr+err.Error()
		}
		done <- r
	}()
	return done
}

// command is the Slurm command name with args, run through its link in
// the session's directory and environment.
func (s *session) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(s.f.bin, name), args...)
	cmd.Dir, cmd.Env = s.dir, s.env
	return cmd
}

// runCommand runs cmd to its end and returns its output and exit code; the
// error is for a command that could not be run at all (not an exit code).
func runCommand(cmd *exec.Cmd) (result, error) {
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		return r, err
	}
	return r, nil
}

// ok runs a command that must succeed and returns its stdout.
func (s *session) ok(name string, args ...string) string {
	s.t.Helper()
	r := s.run(name, args...)
	if r.code != 0 {
		s.t.Fatalf("%s %s: %s", name, strings.Join(args, " "), r)
	}
	return r.stdout
}

var submitted = regexp.MustCompile(`^Submitted batch job ([0-9]+)\n$`)

// sbatch submits and returns the job id; the answer must be Slurm's
// "Submitted batch job N" and nothing on stderr.
func (s *session) sbatch(args ...string) string {
	s.t.Helper()
	r := s.run("sbatch", args...)
	m := submitted.FindStringSubmatch(r.stdout)
	if r.code != 0 || m == nil || r.stderr != "" {
		s.t.Fatalf("sbatch %s: %s; want \"Submitted batch job N\"", strings.Join(args, " "), r)
	}
	return m[1]
}

// script copies testdata/<name> into the session's directory, where sbatch
// reads it as a user's script.
func (s *session) script(name string) string {
	s.t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		s.t.Fatal(err)
	}
	testkit.WriteExecutable(s.t, filepath.Join(s.dir, name), b, 0o755)
	return name
}

// mkdir makes a directory in the session's directory, the session user's
// (as the user would make it): the jobs, which run as the user, write there.
func (s *session) mkdir(name string) {
	s.t.Helper()
	if err := os.Mkdir(s.path(name), 0o755); err != nil {
		s.t.Fatal(err)
	}
	if err := os.Chown(s.path(name), s.uid, s.gid); err != nil {
		s.t.Fatal(err)
	}
}

// path is a file of the session's directory.
func (s *session) path(name string) string { return filepath.Join(s.dir, name) }

// read returns a file of the session's directory ("" when missing).
func (s *session) read(name string) string {
	b, _ := os.ReadFile(s.path(name))
	return string(b)
}

// table parses pipe-separated output whose first line is the header.
func table(t *testing.T, out string) []map[string]string {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) == 0 || lines[0] == "" {
		t.Fatalf("no header in %q", out)
	}
	head := strings.Split(lines[0], "|")
	var rows []map[string]string
	for _, l := range lines[1:] {
		f := strings.Split(l, "|")
		if len(f) != len(head) {
			t.Fatalf("row %q has %d fields, header %q has %d", l, len(f), lines[0], len(head))
		}
		row := map[string]string{}
		for i, h := range head {
			row[h] = f[i]
		}
		rows = append(rows, row)
	}
	return rows
}

// acctFormat is what the tests read from sacct.
const acctFormat = "JobID,JobName,Partition,User,State,ExitCode,Start,End,Elapsed,NodeList,AllocCPUS"

// acct runs sacct -P with acctFormat and args, and parses it.
func (s *session) acct(args ...string) []map[string]string {
	s.t.Helper()
	return table(s.t, s.ok("sacct", append([]string{"-P", "--format=" + acctFormat}, args...)...))
}

// job is sacct's allocation row of job id (nil when sacct does not list it).
func (s *session) job(id string) map[string]string {
	s.t.Helper()
	for _, r := range s.acct("-X", "-j", id) {
		if r["JobID"] == id {
			return r
		}
	}
	return nil
}

// queue is squeue's rows for a job selection (-j), with fields id, st,
// state, reason, nodes, partition, name, user.
func (s *session) queue(args ...string) []map[string]string {
	s.t.Helper()
	out := s.ok("squeue", append([]string{"-o", "%i|%t|%T|%r|%N|%P|%j|%u"}, args...)...)
	return table(s.t, out)
}

// state is a sacct State's first word ("CANCELLED by 0" → CANCELLED).
func state(row map[string]string) string {
	st, _, _ := strings.Cut(row["State"], " ")
	return st
}

// terminal says whether a Slurm job state is final.
func terminal(st string) bool {
	switch st {
	case "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE":
		return true
	}
	return false
}

// throttle keeps a condition that runs commands from running more than
// every interval (the commands cost CPU the jobs need).
func throttle(interval time.Duration, cond func() (bool, error)) func() (bool, error) {
	var last time.Time
	return func() (bool, error) {
		if time.Since(last) < interval {
			return false, nil
		}
		last = time.Now()
		return cond()
	}
}

// waitFor waits for cond, checked through the commands every 200 ms.
// When the wait fails, the last command the condition ran is logged.
func (s *session) waitFor(timeout time.Duration, what string, cond func() bool) {
	s.t.Helper()
	s.last = ""
	finished := false
	s.t.Cleanup(func() {
		if !finished && s.last != "" {
			s.t.Logf("while waiting for %s, the last command said: %s", what, s.last)
		}
	})
	testkit.WaitFor(s.t, timeout, what, throttle(200*time.Millisecond, func() (bool, error) { return cond(), nil }))
	finished = true
}

// waitState waits until sacct shows job id in one of states and returns its
// row. Every state it passes through is logged, with squeue's reason.
func (s *session) waitState(id string, timeout time.Duration, states ...string) map[string]string {
	s.t.Helper()
	var row map[string]string
	seen := ""
	s.waitFor(timeout, fmt.Sprintf("job %s to be %s", id, strings.Join(states, " or ")), func() bool {
		row = s.job(id)
		st := state(row)
		if row == nil {
			st = "(not in sacct)"
		}
		if st != seen {
			seen = st
			reason := ""
			if st == "PENDING" {
				reason = "(" + strings.TrimSpace(s.run("squeue", "-h", "-j", id, "-o", "%r").stdout) + ")"
			}
			s.t.Logf("job %s: %s %s", id, st, reason)
		}
		for _, w := range states {
			if st == w {
				return true
			}
		}
		return false
	})
	return row
}

// waitDone waits until job id has ended and returns its sacct row.
func (s *session) waitDone(id string, timeout time.Duration) map[string]string {
	s.t.Helper()
	return s.waitState(id, timeout, "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY")
}

// waitFile waits until a file of the session's directory exists.
func (s *session) waitFile(name string, timeout time.Duration) {
	s.t.Helper()
	s.waitFor(timeout, "file "+name, func() bool {
		_, err := os.Stat(s.path(name))
		return err == nil
	})
}

// waitLine waits until a file of the session's directory holds a whole
// line and returns what it holds. A script's `echo X > FILE` creates FILE
// before it writes X: a file that merely exists may still be empty.
func (s *session) waitLine(name string, timeout time.Duration) string {
	s.t.Helper()
	var got string
	s.waitFor(timeout, "a line in file "+name, func() bool {
		got = s.read(name)
		return strings.HasSuffix(got, "\n")
	})
	return got
}

// showJob parses `scontrol show job ID` into its Key=Value pairs (a value
// runs to the next blank; the first job's pairs only).
func (s *session) showJob(id string) map[string]string {
	s.t.Helper()
	return keyValues(s.ok("scontrol", "show", "job", id))
}

var kvPair = regexp.MustCompile(`(?:^|\s)([A-Za-z/:_]+)=(\S*)`)

func keyValues(out string) map[string]string {
	first, _, _ := strings.Cut(out, "\n\n")
	kv := map[string]string{}
	for _, m := range kvPair.FindAllStringSubmatch(first, -1) {
		if _, dup := kv[m[1]]; !dup {
			kv[m[1]] = m[2]
		}
	}
	return kv
}

// nextID is id+k.
func nextID(t *testing.T, id string, k int) string {
	t.Helper()
	n, err := strconv.Atoi(id)
	if err != nil {
		t.Fatalf("job id %q is not numeric", id)
	}
	return strconv.Itoa(n + k)
}

// wantEqual fails (without stopping) when got != want.
func wantEqual(t *testing.T, what, got, want string) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %q, want %q", what, got, want)
	}
}

// runTerminal runs a Slurm command with a terminal for its stdin, stdout
// and stderr, as from a user's shell: it types each line at the remote
// shell's prompt ("$ " or "# "), as a person waits for it, and returns what
// the terminal showed and the command's exit code.
func (s *session) runTerminal(lines []string, name string, args ...string) (string, int) {
	s.t.Helper()
	master, slave, err := openTerminal()
	if err != nil {
		s.t.Fatalf("a terminal for %s: %v", name, err)
	}
	defer master.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := s.command(ctx, name, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	slave.Close()
	var mu sync.Mutex
	var shown bytes.Buffer
	read := make(chan struct{})
	go func() {
		defer close(read)
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			mu.Lock()
			shown.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	// What the terminal shows since the last line was typed, from before.
	since := func(before int) string { mu.Lock(); defer mu.Unlock(); return shown.String()[before:] }
	before := 0
	for _, l := range lines {
		// Typed at the shell's prompt, as a person does: once what the
		// last line made it print has ended in one.
		s.waitFor(60*time.Second, "a prompt before typing "+l, func() bool {
			out := strings.TrimRight(since(before), " ")
			return strings.HasSuffix(out, "$") || strings.HasSuffix(out, "#")
		})
		mu.Lock()
		before = shown.Len()
		mu.Unlock()
		if _, err := master.Write([]byte(l + "\r")); err != nil {
			s.t.Fatal(err)
		}
	}
	err = cmd.Wait()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		s.t.Fatalf("%s %q: %v", name, args, err)
	}
	select {
	case <-read:
	case <-time.After(10 * time.Second):
	}
	mu.Lock()
	defer mu.Unlock()
	return shown.String(), code
}

// openTerminal opens a pseudo-terminal pair.
func openTerminal() (master, slave *os.File, err error) {
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, err
	}
	fd := int(m.Fd())
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err == nil {
		err = unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0)
	}
	if err != nil {
		m.Close()
		return nil, nil, err
	}
	sl, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		return nil, nil, err
	}
	return m, sl, nil
}

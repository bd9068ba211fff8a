// Command recoverybench times how Loom recovers a training job from a GPU
// that falls off the bus (Xid 79).
//
// It starts Loom's one embedded stack (cmd/loom/stack: a Kafka-protocol
// broker, Redis and the five central services in this process) on the local
// provider, whose nodes are real agent processes with simulated GPUs, and
// creates a 3-node cluster. Each round submits a fresh 2-node `loom train
// --step-time` job, waits until it runs, injects Xid 79 on one of its nodes
// (HealthService.InjectFault through the gateway), and waits until the job
// runs again on healthy nodes and the node is repaired. It then reads the
// round's events back from the bus and reports, from the injection:
//
//   - detection: health's NodeHealthChanged taking the node out of HEALTHY;
//   - drained: the job's first run ended NODE_FAIL (its end time);
//   - running again: the next run's program running on both its nodes, as
//     their agents report it (StepChanged STEP_RUNNING; the job itself is
//     RUNNING from its placement, before its nodes have started anything);
//   - repaired: health's NodeHealthChanged putting the node back to HEALTHY.
//
// Targets on a developer machine: detection ≤ 2 s, running again ≤ 10 s.
// Results go to stdout and, with -report, into the recoverybench section of
// a Markdown report.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/bench/internal/report"
	"github.com/loom-ml/loom/cmd/loom/stack"
	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// options are the benchmark's settings.
type options struct {
	rounds   int
	stepTime time.Duration
	timeout  time.Duration
	report   string
	logLevel string
	seed     uint64
	keep     bool
}

func main() {
	var o options
	flag.IntVar(&o.rounds, "rounds", 5, "injections, each on a fresh job")
	flag.DurationVar(&o.stepTime, "step-time", 50*time.Millisecond, "the trainer's --step-time (an epoch's length)")
	flag.DurationVar(&o.timeout, "timeout", 3*time.Minute, "give up on a round after this long")
	flag.StringVar(&o.report, "report", "", "Markdown file to write the results into (the section between the recoverybench markers is replaced)")
	flag.StringVar(&o.logLevel, "log-level", "warn", "log level of the services")
	flag.Uint64Var(&o.seed, "seed", 1, "seeds each round's choice of the job's two nodes and the faulted one, across the cluster")
	flag.BoolVar(&o.keep, "keep", false, "keep the run's temporary directory (the services' data and the agents' logs) and print where it is")
	flag.Parse()
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "recoverybench:", err)
		os.Exit(1)
	}
}

// logf reports progress on stderr.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "recoverybench: "+format+"\n", args...)
}

// round is what one injection measured, each from the injection.
type round struct {
	node                                   string
	pair                                   []string
	detected, drained, runningAgain, fixed time.Duration
	detectReason                           string
	// path is the node's remediation states in order, each with its time.
	path []string
}

// buildLoom builds the loom binary (agents and the job's trainer) into dir.
func buildLoom(dir string) (string, error) {
	out, err := exec.Command("go", "env", "GOWORK").Output()
	work := strings.TrimSpace(string(out))
	if err != nil || work == "" || work == "off" {
		return "", fmt.Errorf("find the workspace (go env GOWORK): %v", err)
	}
	bin := filepath.Join(dir, "loom")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/loom")
	cmd.Dir = filepath.Dir(work)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/loom: %v\n%s", err, b)
	}
	return bin, nil
}

func run(o options) error {
	if o.rounds < 1 {
		return fmt.Errorf("-rounds must be at least 1")
	}
	tmp, err := os.MkdirTemp("", "recoverybench")
	if err != nil {
		return err
	}
	if o.keep {
		logf("keeping %s", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}
	loom, err := buildLoom(tmp)
	if err != nil {
		return err
	}
	ctx := context.Background()
	began := time.Now()
	s, err := stack.Start(ctx, stack.Options{DataDir: filepath.Join(tmp, "data"), LogLevel: o.logLevel,
		AgentCommand: []string{loom, "agent"}, AgentEnv: []string{"LOOM_AGENT_GPU_MODE=simulated"},
		// Every round fails a node on purpose, seconds after the last: each
		// is to be a node's first failure (a reboot), not one that recurs
		// soon after a repair (which climbs the ladder to reimage, replace,
		// quarantine) or makes a lemon.
		HealthArgs: []string{"-lemon-window=1s"}})
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := s.Close(cctx); err != nil {
			logf("stopping the stack: %v", err)
		}
	}()
	logf("stack up in %v", time.Since(began).Round(time.Millisecond))
	dopts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if key, err := s.AdminKey(); err == nil {
		dopts = append(dopts, grpc.WithPerRPCCredentials(auth.Bearer(key)))
	}
	conn, err := grpc.NewClient(s.GatewayAddr, dopts...)
	if err != nil {
		return err
	}
	defer conn.Close()

	cl, err := createCluster(ctx, conn, o.timeout)
	if err != nil {
		return err
	}
	hosts, err := hostnames(ctx, conn, cl)
	if err != nil {
		return err
	}
	var rounds []round
	for i, c := range plan(o.seed, hosts, o.rounds) {
		r, err := measure(ctx, s, conn, cl, loom, i, c, o)
		if err != nil {
			return fmt.Errorf("round %d: %w", i+1, err)
		}
		logf("round %d on %s (job on %s): detected %v, drained %v, running again %v, repaired %v; health: %s", i+1, r.node,
			strings.Join(c.pair, ","), ms(r.detected), ms(r.drained), ms(r.runningAgain), ms(r.fixed), strings.Join(r.path, ", "))
		rounds = append(rounds, r)
	}
	section := render(o, rounds, time.Since(began))
	fmt.Print(section)
	if o.report != "" {
		return writeSection(o.report, section)
	}
	return nil
}

// createCluster creates the 3-node cluster and waits for it to run.
func createCluster(ctx context.Context, conn *grpc.ClientConn, timeout time.Duration) (*loomv1.Cluster, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	op, err := loomv1.NewClusterServiceClient(conn).CreateCluster(ctx, &loomv1.CreateClusterRequest{
		Parent: "projects/default", ClusterId: "recovery", RequestId: "create-recovery",
		Cluster: &loomv1.Cluster{Compute: &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{{Id: "gpu",
			MachineType: "a3-highgpu-1g", NodeCount: 3, AcceleratorType: "nvidia-h100-80gb", AcceleratorCount: 1}}}}})
	if err != nil {
		return nil, fmt.Errorf("create cluster: %w", err)
	}
	ops := loomv1.NewOperationServiceClient(conn)
	for !op.Done {
		if op, err = ops.WaitOperation(ctx, &loomv1.WaitOperationRequest{Name: op.Name, TimeoutSeconds: 10}); err != nil {
			return nil, fmt.Errorf("wait for the cluster: %w", err)
		}
	}
	if e := op.GetError(); e != nil {
		return nil, fmt.Errorf("create cluster: %v", e)
	}
	return op.GetCluster(), nil
}

// hostnames lists the cluster's nodes' hostnames, sorted.
func hostnames(ctx context.Context, conn *grpc.ClientConn, cl *loomv1.Cluster) ([]string, error) {
	resp, err := loomv1.NewNodeServiceClient(conn).ListNodes(ctx, &loomv1.ListNodesRequest{Parent: cl.Name})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	var out []string
	for _, n := range resp.GetNodes() {
		out = append(out, n.GetHostname())
	}
	if len(out) < 3 {
		return nil, fmt.Errorf("the cluster has %d nodes; a round needs 3 (a 2-node job and a spare)", len(out))
	}
	sort.Strings(out)
	return out, nil
}

// choice is one round's placement: the job's two nodes, and the one of
// them the fault is injected on.
type choice struct {
	pair   []string
	target string
}

// plan draws each round's choice from seed: the faulted node goes through
// the cluster's nodes in an order the seed shuffles anew every len(hosts)
// rounds (so every node is faulted, not only the two the scheduler packs a
// job onto first, and each as often as the others), and the job's other
// node is drawn from the rest. The same seed and hosts give the same plan.
func plan(seed uint64, hosts []string, rounds int) []choice {
	rng := rand.New(rand.NewPCG(seed, 0x7265636f76657279)) // "recovery"
	out := make([]choice, rounds)
	var order []int
	for i := range out {
		if i%len(hosts) == 0 {
			order = rng.Perm(len(hosts))
		}
		t := order[i%len(hosts)]
		o := rng.IntN(len(hosts) - 1)
		if o >= t {
			o++
		}
		pair := []string{hosts[t], hosts[o]}
		sort.Strings(pair)
		out[i] = choice{pair: pair, target: hosts[t]}
	}
	return out
}

// hold submits a 1-GPU job pinned to each of hosts, so that the next job
// can only be placed on the others, and returns once each runs. The
// holders are cancelled (release) before the fault, so that the requeued
// run may use their nodes: the job's nodes are steered only at its start.
func hold(ctx context.Context, jobs loomv1.JobServiceClient, cl *loomv1.Cluster, i int, hosts []string) (release func(context.Context) error, err error) {
	var names []string
	release = func(ctx context.Context) error {
		for _, n := range names {
			if _, err := jobs.CancelJob(ctx, &loomv1.CancelJobRequest{Name: n}); err != nil {
				return fmt.Errorf("cancel holder: %w", err)
			}
		}
		for _, n := range names {
			if err := poll(ctx, "holder "+n+" ended", func(ctx context.Context) (bool, error) {
				j, err := jobs.GetJob(ctx, &loomv1.GetJobRequest{Name: n})
				return err == nil && j.State.Terminal(), nil
			}); err != nil {
				return err
			}
		}
		return nil
	}
	for _, h := range hosts {
		j, err := jobs.SubmitJob(ctx, &loomv1.SubmitJobRequest{Parent: "projects/default", Job: &loomv1.Job{
			Cluster: cl.Name, DisplayName: fmt.Sprintf("hold-%d-%s", i+1, h), NodeCount: 1, GpusPerNode: 1,
			Nodelist: []string{h}, Command: []string{"sleep", "3600"}}})
		if err != nil {
			return release, fmt.Errorf("submit holder on %s: %w", h, err)
		}
		names = append(names, j.Name)
		if err := poll(ctx, "holder on "+h+" running", func(ctx context.Context) (bool, error) {
			j, err := jobs.GetJob(ctx, &loomv1.GetJobRequest{Name: j.Name})
			if err != nil {
				return false, nil
			}
			if j.State.Terminal() {
				return false, fmt.Errorf("holder ended %v (%s)", j.State, j.StateReason)
			}
			return j.State == loomv1.JobState_RUNNING, nil
		}); err != nil {
			return release, err
		}
	}
	return release, nil
}

// poll calls cond every 20 ms until it is true, it fails, or ctx ends.
func poll(ctx context.Context, what string, cond func(context.Context) (bool, error)) error {
	for {
		ok, err := cond(ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// measure runs one round: a fresh job on c's pair of nodes (the cluster's
// other nodes held by jobs of their own until it runs), Xid 79 on c's
// target, until the job runs again and the node is back; then the round's
// times from the bus.
func measure(ctx context.Context, s *stack.Stack, conn *grpc.ClientConn, cl *loomv1.Cluster, loom string, i int, c choice, o options) (round, error) {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	jobs := loomv1.NewJobServiceClient(conn)
	health := loomv1.NewHealthServiceClient(conn)
	all, err := hostnames(ctx, conn, cl)
	if err != nil {
		return round{}, err
	}
	var others []string
	for _, h := range all {
		if !slices.Contains(c.pair, h) {
			others = append(others, h)
		}
	}
	release, err := hold(ctx, jobs, cl, i, others)
	if err != nil {
		_ = release(ctx)
		return round{}, err
	}
	// Long enough never to finish within a round; a checkpoint every 10 epochs.
	job, err := jobs.SubmitJob(ctx, &loomv1.SubmitJobRequest{Parent: "projects/default", Job: &loomv1.Job{
		Cluster: cl.Name, DisplayName: fmt.Sprintf("recovery-%d", i+1), NodeCount: 2, GpusPerNode: 1,
		Command: []string{loom, "train", "--epochs", "100000", "--checkpoint-every", "10", "--log-every", "100",
			"--step-time", o.stepTime.String(), "--out", filepath.Join(cl.GetStatus().GetSharedDir(), fmt.Sprintf("out-%d", i+1))}}})
	if err != nil {
		return round{}, fmt.Errorf("submit: %w", err)
	}
	var running *loomv1.Job
	if err := poll(ctx, "job running", func(ctx context.Context) (bool, error) {
		j, err := jobs.GetJob(ctx, &loomv1.GetJobRequest{Name: job.Name})
		if err != nil {
			return false, nil
		}
		if j.State.Terminal() {
			return false, fmt.Errorf("job ended %v (%s)", j.State, j.StateReason)
		}
		running = j
		return j.State == loomv1.JobState_RUNNING && len(j.Nodes) == 2, nil
	}); err != nil {
		return round{}, err
	}
	// RUNNING from the placement: the fault goes in once the program
	// runs on both nodes, as their agents report it.
	if err := poll(ctx, "job's program running", func(ctx context.Context) (bool, error) {
		evs, err := readTopics(ctx, s.BrokerAddr, topics.StepEvents)
		return err == nil && !stepsRunning(evs, job.Name, 1, 2).IsZero(), nil
	}); err != nil {
		return round{}, err
	}
	if got := slices.Sorted(slices.Values(running.Nodes)); !slices.Equal(got, c.pair) {
		_ = release(ctx)
		return round{}, fmt.Errorf("the job runs on %v, not on the round's pair %v", got, c.pair)
	}
	// The spare nodes are free again before the fault: the requeued run
	// may take one.
	if err := release(ctx); err != nil {
		return round{}, err
	}
	node := c.target
	injected := time.Now()
	if _, err := health.InjectFault(ctx, &loomv1.InjectFaultRequest{Cluster: cl.Name, Hostname: node,
		Fault: &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_XID, Gpu: 0, Xid: 79}}); err != nil {
		return round{}, fmt.Errorf("inject: %w", err)
	}
	var again *loomv1.Job
	if err := poll(ctx, "job running again", func(ctx context.Context) (bool, error) {
		j, err := jobs.GetJob(ctx, &loomv1.GetJobRequest{Name: job.Name})
		if err != nil {
			return false, nil
		}
		if j.State.Terminal() {
			return false, fmt.Errorf("job ended %v (%s)", j.State, j.StateReason)
		}
		again = j
		return j.State == loomv1.JobState_RUNNING && len(j.Runs) >= 2, nil
	}); err != nil {
		return round{}, err
	}
	if err := poll(ctx, "node "+node+" repaired", func(ctx context.Context) (bool, error) {
		resp, err := health.ListNodeHealth(ctx, &loomv1.ListNodeHealthRequest{Cluster: cl.Name})
		if err != nil {
			return false, nil
		}
		for _, n := range resp.Nodes {
			if n.Hostname == node {
				// HEALTHY since after the injection: it left HEALTHY and
				// came back. Not "seen to leave": the reboot and its
				// confirming check can take ~100 ms, all of it before
				// this first poll (it then waited for ever).
				return n.State == loomv1.RemediationState_NODE_HEALTHY && n.StateTime.AsTime().After(injected), nil
			}
		}
		return false, nil
	}); err != nil {
		return round{}, err
	}
	// The next run's program running on both nodes, as their agents
	// report it (after the repair's wait, which must see the node leave
	// HEALTHY: its repair may be quicker than this).
	next := again.Runs[len(again.Runs)-1].GetAttempt()
	if err := poll(ctx, "job's program running again", func(ctx context.Context) (bool, error) {
		evs, err := readTopics(ctx, s.BrokerAddr, topics.StepEvents)
		return err == nil && !stepsRunning(evs, job.Name, next, 2).IsZero(), nil
	}); err != nil {
		return round{}, err
	}
	if _, err := jobs.CancelJob(ctx, &loomv1.CancelJobRequest{Name: job.Name}); err != nil {
		return round{}, fmt.Errorf("cancel: %w", err)
	}
	if err := poll(ctx, "job cancelled", func(ctx context.Context) (bool, error) {
		j, err := jobs.GetJob(ctx, &loomv1.GetJobRequest{Name: job.Name})
		return err == nil && j.State.Terminal(), nil
	}); err != nil {
		return round{}, err
	}

	// The times, from what the services published.
	evs, err := readTopics(ctx, s.BrokerAddr, topics.HealthEvents, topics.JobEvents, topics.StepEvents)
	if err != nil {
		return round{}, err
	}
	r := round{node: node, pair: c.pair}
	if at := stepsRunning(evs, job.Name, next, 2); !at.IsZero() {
		r.runningAgain = at.Sub(injected)
	}
	full := cl.Name + "/nodes/" + node
	for _, ev := range evs {
		if ev.Time.Before(injected) {
			continue
		}
		switch p := ev.Payload.(type) {
		case *eventsv1.NodeHealthChanged:
			if p.GetNode() != full && !strings.HasSuffix(p.GetNode(), "/"+node) {
				continue
			}
			at := eventTime(p.GetTime(), ev.Time).Sub(injected)
			r.path = append(r.path, fmt.Sprintf("%s %s", strings.TrimPrefix(p.GetState().String(), "NODE_"), ms(at)))
			if r.detected == 0 && p.GetState() != loomv1.RemediationState_NODE_HEALTHY {
				r.detected, r.detectReason = at, p.GetReason()
			}
			if r.detected > 0 && r.fixed == 0 && p.GetHealth() == eventsv1.NodeHealth_HEALTHY && p.GetState() == loomv1.RemediationState_NODE_HEALTHY {
				r.fixed = at
			}
		}
	}
	if first := again.Runs[0]; first.State == loomv1.JobState_NODE_FAIL && first.EndTime != nil {
		r.drained = first.EndTime.AsTime().Sub(injected)
	}
	if r.detected == 0 || r.drained == 0 || r.runningAgain == 0 || r.fixed == 0 {
		return r, fmt.Errorf("missing a time (detected %v, drained %v, running again %v, repaired %v); first run %v",
			r.detected, r.drained, r.runningAgain, r.fixed, again.Runs[0])
	}
	return r, nil
}

// eventTime is the payload's own time when it has one, else the envelope's.
func eventTime(ts *timestamppb.Timestamp, env time.Time) time.Time {
	if ts != nil && ts.IsValid() && !ts.AsTime().IsZero() {
		return ts.AsTime()
	}
	return env
}

func ms(d time.Duration) string { return d.Round(time.Millisecond).String() }

// stats are min, median and max.
func stats(ds []time.Duration) (lo, med, hi time.Duration) {
	s := slices.Clone(ds)
	slices.Sort(s)
	n := len(s)
	med = s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return s[0], med, s[n-1]
}

// render writes the report's section.
func render(o options, rounds []round, took time.Duration) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	host, _ := os.Hostname()
	w("<!-- recoverybench:begin -->\n## Recovery from a GPU off the bus (Xid 79): detection, drain, running again, repair\n\n")
	w("A 3-node local cluster (real agent processes, simulated GPUs) on the embedded stack; each round a fresh 2-node `loom train --step-time %v` job runs on two nodes drawn from the cluster by the seed (the third is held by a 1-GPU job of its own until the job runs, then freed for the requeue), Xid 79 is injected on one of them, also drawn (`HealthService.InjectFault`), and the times below are from the injection to: health's NodeHealthChanged taking the node out of HEALTHY (detection), the first run's NODE_FAIL end (drained), the next run's program running on both its nodes, as their agents' StepChanged reports say (running again; the job is RUNNING from its placement, before that), and health's NodeHealthChanged HEALTHY after the reboot (repaired). Times are the services' own event times, read back from the bus. Health runs with `-lemon-window=1s`, so that each round's fault is a first failure (repaired by a reboot) rather than one recurring soon after a repair, which climbs the ladder to reimage and replace. %d rounds on %s (%d CPUs, %s/%s), whole run %v. Rerun: `go run ./bench/cmd/recoverybench -rounds %d -seed %d -report bench/REPORT.md`.\n\n",
		o.stepTime, len(rounds), host, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, took.Round(time.Second), o.rounds, o.seed)
	w("| from injection to | min | median | max | target |\n|---|---:|---:|---:|---|\n")
	col := func(name string, get func(round) time.Duration, target time.Duration) {
		var ds []time.Duration
		for _, r := range rounds {
			ds = append(ds, get(r))
		}
		lo, med, hi := stats(ds)
		t := "—"
		if target > 0 {
			verdict := "met"
			if hi > target {
				verdict = "missed"
			}
			t = fmt.Sprintf("≤ %v (%s)", target, verdict)
		}
		w("| %s | %s | %s | %s | %s |\n", name, ms(lo), ms(med), ms(hi), t)
	}
	col("detection (node leaves HEALTHY)", func(r round) time.Duration { return r.detected }, 2*time.Second)
	col("drained (first run NODE_FAIL)", func(r round) time.Duration { return r.drained }, 0)
	col("running again (next run's program running)", func(r round) time.Duration { return r.runningAgain }, 10*time.Second)
	col("node repaired (HEALTHY again)", func(r round) time.Duration { return r.fixed }, 0)
	w("\nPer round (the faulted node and the job's pair, detection, drained, running again, repaired; then the node's states as health published them):\n\n")
	for i, r := range rounds {
		w("%d. %s (job on %s): %s, %s, %s, %s; %s\n", i+1, r.node, strings.Join(r.pair, ","), ms(r.detected), ms(r.drained), ms(r.runningAgain), ms(r.fixed), strings.Join(r.path, " → "))
	}
	if len(rounds) > 0 {
		w("\nHealth's reason for taking the node out: %q.\n", rounds[0].detectReason)
	}
	w("\nXid 79 is urgent: health takes the node out and asks for the reboot at once, and the provisioner's REBOOTING state is the fence that lets the scheduler start the next run without waiting for the old one's step there to end. Repaired is the local provider's reboot (the agent and the step process groups killed, a new host boot id, the agent started again and registered) and then health's confirming check; the services' logs at `-log-level info` time each part.\n")
	w("<!-- recoverybench:end -->\n")
	return b.String()
}

// writeSection replaces the recoverybench section of the report, or appends it.
func writeSection(path, section string) error {
	return report.WriteSection(path, "recoverybench", section)
}

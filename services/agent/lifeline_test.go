package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/loom-ml/loom/libs/embedded"
	"github.com/loom-ml/loom/libs/proc"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
)

// runAgent runs an agent with cfg in the background and returns a wait, of
// at most within, for what its Run returns on its own; the test's end stops
// it.
func runAgent(t *testing.T, cfg Config) (exited func(within time.Duration) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	go func() { res <- Run(ctx, cfg) }()
	var mu sync.Mutex
	var err error
	got := false
	await := func(within time.Duration) bool {
		mu.Lock()
		defer mu.Unlock()
		if !got {
			select {
			case err, got = <-res:
			case <-time.After(within):
			}
		}
		return got
	}
	t.Cleanup(func() {
		cancel()
		if !await(wait) {
			t.Error("the agent did not stop")
		}
	})
	return func(within time.Duration) error {
		t.Helper()
		if !await(within) {
			t.Fatalf("the agent did not exit on its own within %s", within)
		}
		return err
	}
}

// TestExitsWhenItsNodeDirectoryIsRemoved: an agent whose node directory is
// deleted under it stops its steps (reported KILLED, saying why) and exits.
func TestExitsWhenItsNodeDirectoryIsRemoved(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.work = filepath.Join(t.TempDir(), "nodes", "gpu-0001")
	if err := os.MkdirAll(e.work, 0o755); err != nil {
		t.Fatal(err)
	}
	giveIdentity(t, e.work, node)
	exited := runAgent(t, e.config())
	publish(t, e.broker, command(startStep("31", `sleep 60`, nil, filepath.Join(e.shared, "slurm-31.out"))))
	running := waitStep(t, e.broker, "31", eventsv1.StepState_STEP_RUNNING)
	if err := os.RemoveAll(e.work); err != nil {
		t.Fatal(err)
	}
	err := exited(wait)
	if err == nil || !strings.Contains(err.Error(), "exited on its own: its node directory "+e.work+" is gone") {
		t.Fatalf("Run = %v, want it to say the node directory is gone", err)
	}
	if proc.Alive(int(running.Pid), 0) {
		t.Fatal("the step still runs after its agent exited")
	}
	killed := waitStep(t, e.broker, "31", eventsv1.StepState_STEP_KILLED)
	if !strings.Contains(killed.Message, "agent exiting: its node directory "+e.work+" is gone") {
		t.Fatalf("killed = %v, want the reason in its message", killed)
	}
}

// TestExitsWhenItsControlPlaneIsGone: an agent whose Kafka and Redis stop
// answering for longer than OrphanAfter kills its steps and exits; one
// whose control plane never answers gives up after the same bound.
func TestExitsWhenItsControlPlaneIsGone(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, wait)
	broker, err := embedded.StartBroker(ctx, "", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = broker.Close() })
	if err := testkit.CreateTopics(ctx, broker.Addr, topics.All()...); err != nil {
		t.Fatal(err)
	}
	rs, err := embedded.StartRedis(ctx, "", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	e := &env{broker: broker.Addr, redisAddr: rs.Addr, rdb: redis.NewClient(&redis.Options{Addr: rs.Addr}), work: t.TempDir(), shared: t.TempDir()}
	t.Cleanup(func() { _ = e.rdb.Close() })
	giveIdentity(t, e.work, node)
	cfg := e.config()
	cfg.OrphanAfter = time.Second
	exited := runAgent(t, cfg)
	publish(t, e.broker, command(startStep("32", `sleep 60`, nil, filepath.Join(e.shared, "slurm-32.out"))))
	running := waitStep(t, e.broker, "32", eventsv1.StepState_STEP_RUNNING)

	// The control plane answers for longer than the bound: the agent stays.
	hbs := 0
	testkit.WaitFor(t, wait, "heartbeats for longer than the orphan bound", func() (bool, error) {
		hbs = 0
		for _, ev := range testkit.Events(t, e.broker, topics.NodeTelemetry) {
			if _, ok := ev.Payload.(*eventsv1.Heartbeat); ok {
				hbs++
			}
		}
		return time.Duration(hbs)*cfg.HeartbeatInterval > 2*cfg.OrphanAfter, nil
	})

	if err := broker.Close(); err != nil {
		t.Fatal(err)
	}
	if err := rs.Close(); err != nil {
		t.Fatal(err)
	}
	// It exits soon after the bound: the orphan bound, its step's SIGTERM,
	// and a producer close bounded to selfExitCloseBound rather than the
	// writer's retries against the dead broker (about 13 s more).
	err = exited(cfg.OrphanAfter + cfg.StepKillGrace + selfExitCloseBound + 4*time.Second)
	if err == nil || !strings.Contains(err.Error(), "exited on its own: its control plane is unreachable") ||
		!strings.Contains(err.Error(), "LOOM_AGENT_ORPHAN_AFTER (1s)") {
		t.Fatalf("Run = %v, want it to say the control plane is unreachable", err)
	}
	if proc.Alive(int(running.Pid), 0) {
		t.Fatal("the step still runs after its orphaned agent exited")
	}

	// Never reachable: it gives up after the bound instead of waiting forever.
	cfg = e.config()
	cfg.Brokers, cfg.RedisAddr, cfg.OrphanAfter = []string{testkit.FreeAddr()}, testkit.FreeAddr(), 500*time.Millisecond
	err = runAgent(t, cfg)(wait)
	if err == nil || !strings.Contains(err.Error(), "its control plane did not answer within LOOM_AGENT_ORPHAN_AFTER (500ms)") {
		t.Fatalf("Run against nothing = %v", err)
	}
	if _, err := (&Config{Node: node, HeartbeatInterval: time.Second, OrphanAfter: time.Second}).validate(); err == nil ||
		!strings.Contains(err.Error(), "orphan_after") {
		t.Fatalf("validate(orphan after 1s, heartbeats 1s) = %v, want an error naming orphan_after", err)
	}
}

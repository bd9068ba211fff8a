package provisioner

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/loom-ml/loom/libs/embedded"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/service"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/testkit/need"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/provisioner/internal/agentredis"
	"github.com/loom-ml/loom/services/provisioner/internal/provider/local"
)

// agentPassword reads the Redis password the provisioner wrote for the
// agent whose work dir is work, checking the file is its alone (0600).
func agentPassword(t *testing.T, work string) string {
	t.Helper()
	path := filepath.Join(work, agentredis.PasswordFile)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatalf("agent's redis password file: %v", err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("%s has mode %v, want 0600", path, st.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// as returns a client of addr that is user with password pw.
func as(t *testing.T, addr, user, pw string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, Username: user, Password: pw, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// authFails says whether user cannot log in with pw.
func authFails(ctx context.Context, addr, user, pw string) bool {
	c := redis.NewClient(&redis.Options{Addr: addr, Username: user, Password: pw, MaxRetries: -1})
	defer c.Close()
	err := c.Ping(ctx).Err()
	return err != nil && (strings.Contains(err.Error(), "WRONGPASS") || strings.Contains(err.Error(), "NOAUTH"))
}

// TestAgentRedisUsers: on a Redis with a password, as `loom up` runs it,
// each agent gets a Redis user of its own (agent-<cluster>-<host>, its
// password in a 0600 file in its work dir, handed over as
// LOOM_REDIS_USERNAME / LOOM_REDIS_PASSWORD_FILE instead of the
// provisioner's): the agents come up with it (registration: outbox,
// relay, inbox), it can do what the agent's store does, and cannot touch
// another agent's keys or a service's. A reimage rotates the password; a
// shrink and a cluster delete delete the users.
func TestAgentRedisUsers(t *testing.T) {
	t.Parallel()
	need.Tools(t, "apt-get install redis-server", "redis-server")
	if _, err := os.Stat("/proc/self/environ"); err != nil {
		t.Skip("needs /proc")
	}
	ctx := testkit.Context(t, 4*wait)
	r, err := embedded.StartRedis(ctx, "", filepath.Join(t.TempDir(), "redis"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	admin := as(t, r.Addr, "", r.Password)
	f := &fixture{broker: testkit.Broker(t), redis: r.Addr, data: t.TempDir()}
	t.Cleanup(func() { killAgents(f.data) })
	cfg := f.config(t, true)
	cfg.RedisPasswordFile, cfg.AgentRedisUsers = r.PasswordFile, AgentRedisUsersOn
	testkit.Start(t, "provisioner", func(ctx context.Context) error { return Run(ctx, cfg) })

	const id = "acl"
	name := project + "/clusters/" + id
	testkit.PublishAs(t, f.broker, "gateway", createCluster("acl-create", id, 2))
	waitRunning(t, f.broker, "acl-create")
	n1, n2 := name+"/nodes/gpu-0001", name+"/nodes/gpu-0002"
	work1, work2 := local.WorkDir(f.data, id, "gpu-0001"), local.WorkDir(f.data, id, "gpu-0002")
	user1, user2 := "agent-acl-gpu-0001", "agent-acl-gpu-0002"
	pw1, pw2 := agentPassword(t, work1), agentPassword(t, work2)
	if pw1 == pw2 || len(pw1) < 32 {
		t.Fatalf("agents' passwords %q, %q: want two random ones", pw1, pw2)
	}

	// The agent was handed its own user, not the provisioner's credential.
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pidOf(t, work1)))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"LOOM_REDIS_USERNAME=" + user1, "LOOM_REDIS_PASSWORD_FILE=" + filepath.Join(work1, agentredis.PasswordFile)} {
		if !bytes.Contains(environ, []byte("\x00"+want+"\x00")) {
			t.Fatalf("agent's environment lacks %s", want)
		}
	}
	if bytes.Contains(environ, []byte(r.PasswordFile)) {
		t.Fatal("agent's environment names the provisioner's Redis password file")
	}

	// What the agent's store does, as the agent's user: an Apply with its
	// inbox mark and an outbox entry, and the reads.
	c1 := as(t, r.Addr, user1, pw1)
	s1 := store.New(c1, user1+":")
	var tx store.Tx
	tx.HSet("acl-test", "f", []byte("v"))
	tx.Set("acl-test-str", []byte("v"))
	if applied, err := s1.Apply(ctx, "acl-test-inbox", &tx); err != nil || !applied {
		t.Fatalf("Apply as the agent's user = %v, %v", applied, err)
	}
	if got, err := s1.HGetAll(ctx, "acl-test"); err != nil || string(got["f"]) != "v" {
		t.Fatalf("HGetAll as the agent's user = %v, %v", got, err)
	}
	if _, err := s1.OutboxLen(ctx); err != nil {
		t.Fatalf("the agent's outbox as its user: %v", err)
	}
	// Nothing of another agent's or of a service's.
	for _, cmd := range [][]any{
		{"XLEN", user2 + ":outbox"}, {"XADD", user2 + ":outbox", "*", "t", "x"}, {"SET", user2 + ":outbox:lease", "x"},
		{"HGETALL", "provisioner:nodes"}, {"HSET", "provisioner:nodes", "x", "y"}, {"GET", "scheduler:x"},
		{"KEYS", "*"}, {"SCAN", "0"}, {"ACL", "SETUSER", user2, "on", ">x"}, {"CONFIG", "GET", "requirepass"},
	} {
		if err := c1.Do(ctx, cmd...).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("%v as %s: %v, want NOPERM", cmd, user1, err)
		}
	}

	// Reimage: a new password; the old one stops working.
	remediateNode(t, f.broker, n1, "acl-reimage", loomv1.RemediationAction_ACTION_REIMAGE)
	if done := remediationFinished(t, f.broker, "acl-reimage"); !done.GetOk() {
		t.Fatalf("reimage = %v", done)
	}
	pw1b := agentPassword(t, work1)
	if pw1b == pw1 {
		t.Fatal("a reimaged node kept its Redis password")
	}
	if !authFails(ctx, r.Addr, user1, pw1) {
		t.Fatal("the reimaged node's old Redis password still works")
	}
	if err := as(t, r.Addr, user1, pw1b).Ping(ctx).Err(); err != nil {
		t.Fatalf("the reimaged node's new Redis password: %v", err)
	}

	// Shrink: the removed node's user is deleted, and its keys (the
	// agent's own, this write and its inbox mark): nothing is left for an
	// agent of the same name to inherit.
	s2 := store.New(as(t, r.Addr, user2, pw2), user2+":")
	var tx2 store.Tx
	tx2.Set("left-behind", []byte("v"))
	if _, err := s2.Apply(ctx, "left-behind", &tx2); err != nil {
		t.Fatalf("Apply as the second agent's user: %v", err)
	}
	testkit.PublishAs(t, f.broker, "gateway", updateCluster("acl-shrink", id, 1, 60))
	nodeEvent(t, f.broker, n2, func(n *loomv1.Node) bool { return n.GetState() == loomv1.Node_DRAINING })
	testkit.PublishAs(t, f.broker, "scheduler", envelope.New(topics.JobEvents, name, "loom/scheduler", &eventsv1.NodeDrained{Node: n2, Cluster: name}))
	waitRunning(t, f.broker, "acl-shrink")
	if !authFails(ctx, r.Addr, user2, pw2) {
		t.Fatal("a removed node's Redis user still logs in")
	}
	if keys, err := admin.Keys(ctx, user2+":*").Result(); err != nil || len(keys) > 0 {
		t.Fatalf("a removed node's keys are left: %v, %v", keys, err)
	}

	// Delete: every node's user goes.
	testkit.PublishAs(t, f.broker, "gateway", envelope.New(topics.ClusterCommands, name, "loom/gateway",
		&eventsv1.DeleteCluster{Operation: project + "/operations/acl-delete", Cluster: name}))
	clusterEvent(t, f.broker, func(c *eventsv1.ClusterDeleted) bool { return c.Cluster == name })
	if !authFails(ctx, r.Addr, user1, pw1b) {
		t.Fatal("a deleted cluster's node's Redis user still logs in")
	}
	users, err := admin.Do(ctx, "ACL", "USERS").StringSlice()
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range users {
		if strings.HasPrefix(u, "agent-") {
			t.Fatalf("Redis users after the delete: %v", users)
		}
	}
	if keys, err := admin.Keys(ctx, "agent-*").Result(); err != nil || len(keys) > 0 {
		t.Fatalf("agents' keys after the delete: %v, %v", keys, err)
	}
}

// TestAgentRedisUsersNeedTheirGrant: a provisioner whose Redis user may
// not make ACL users does not start with -agent-redis-users=on, saying
// what to grant; with auto it starts, and its agents get its own
// credential, as on a Redis without ACLs (miniredis).
func TestAgentRedisUsersNeedTheirGrant(t *testing.T) {
	t.Parallel()
	need.Tools(t, "apt-get install redis-server", "redis-server")
	ctx := testkit.Context(t, wait)
	f := &fixture{broker: testkit.Broker(t), data: t.TempDir()}
	var rdb *redis.Client
	f.redis, rdb = testkit.Redis(t)
	// Its key pattern covers the agents' keys too: it is what they share
	// when they have no user of their own.
	if err := rdb.Do(ctx, "ACL", "SETUSER", "loom-provisioner", "on", ">prov-pw", "~provisioner:*", "~agent-*", "+@all", "-@dangerous").Err(); err != nil {
		t.Fatal(err)
	}
	pwFile := filepath.Join(t.TempDir(), "redis.pw")
	if err := os.WriteFile(pwFile, []byte("prov-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := f.config(t, true)
	cfg.RedisUsername, cfg.RedisPasswordFile, cfg.AgentRedisUsers = "loom-provisioner", pwFile, AgentRedisUsersOn
	err := Run(ctx, cfg)
	// It names the command that adds what this user lacks (+@all
	// -@dangerous has all of the grant but ACL).
	const fix = "`ACL SETUSER loom-provisioner +acl|setuser +acl|deluser`"
	if err == nil || !strings.Contains(err.Error(), "-agent-redis-users=on") || !strings.Contains(err.Error(), agentredis.Grant) ||
		!strings.Contains(err.Error(), "NOPERM") || !strings.Contains(err.Error(), fix) {
		t.Fatalf("Run with -agent-redis-users=on and a user without +acl = %v, want an error naming %s and %s", err, agentredis.Grant, fix)
	}

	cfg.AgentRedisUsers = AgentRedisUsersAuto
	testkit.Start(t, "provisioner", func(ctx context.Context) error { return Run(ctx, cfg) })
	testkit.PublishAs(t, f.broker, "gateway", createCluster("auto", "auto", 1))
	waitRunning(t, f.broker, "auto")
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pidOf(t, local.WorkDir(f.data, "auto", "gpu-0001"))))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(environ, []byte("\x00LOOM_REDIS_USERNAME=loom-provisioner\x00")) {
		t.Fatal("with auto and no grant, the agent did not get the provisioner's credential")
	}
	if users, err := rdb.Do(ctx, "ACL", "USERS").StringSlice(); err != nil || strings.Contains(strings.Join(users, " "), "agent-") {
		t.Fatalf("Redis users = %v, %v; want no agent's", users, err)
	}
	removedAgentsKeysGo(t, ctx, f, rdb, "auto", "agent-auto-gpu-0001")
}

// removedAgentsKeysGo deletes cluster id, whose one agent (its Redis name
// agent) runs, and checks that its keys, the agent's own and one more,
// went with it.
func removedAgentsKeysGo(t *testing.T, ctx context.Context, f *fixture, rdb *redis.Client, id, agent string) {
	t.Helper()
	if err := rdb.Set(ctx, agent+":left-behind", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if keys, err := rdb.Keys(ctx, agent+":*").Result(); err != nil || len(keys) < 2 {
		t.Fatalf("the running agent's keys = %v, %v; want its own and left-behind", keys, err)
	}
	name := project + "/clusters/" + id
	testkit.PublishAs(t, f.broker, "gateway", envelope.New(topics.ClusterCommands, name, "loom/gateway",
		&eventsv1.DeleteCluster{Operation: project + "/operations/" + id + "-delete", Cluster: name}))
	clusterEvent(t, f.broker, func(c *eventsv1.ClusterDeleted) bool { return c.Cluster == name })
	if keys, err := rdb.Keys(ctx, agent+":*").Result(); err != nil || len(keys) > 0 {
		t.Fatalf("a removed node's keys are left where agents share the provisioner's Redis user: %v, %v", keys, err)
	}
}

// TestAgentKeysGoWithoutUsers: with -agent-redis-users=off the agents
// share the provisioner's credential, and a removed node's keys are
// deleted all the same: their names do not depend on the user.
func TestAgentKeysGoWithoutUsers(t *testing.T) {
	t.Parallel()
	need.Tools(t, "apt-get install redis-server", "redis-server")
	ctx := testkit.Context(t, wait)
	f := &fixture{broker: testkit.Broker(t), data: t.TempDir()}
	var rdb *redis.Client
	f.redis, rdb = testkit.Redis(t)
	t.Cleanup(func() { killAgents(f.data) })
	cfg := f.config(t, true)
	cfg.AgentRedisUsers = AgentRedisUsersOff
	testkit.Start(t, "provisioner", func(ctx context.Context) error { return Run(ctx, cfg) })
	testkit.PublishAs(t, f.broker, "gateway", createCluster("off", "off", 1))
	waitRunning(t, f.broker, "off")
	removedAgentsKeysGo(t, ctx, f, rdb, "off", "agent-off-gpu-0001")
}

// TestSharedCredentialWithoutKeyRules: where agents share the
// provisioner's credential and it may not find and delete their keys, the
// provisioner starts (a Remove that could never succeed would leave the
// node on record for ever), leaves their keys and says so once, naming the
// command that adds what it lacks.
func TestSharedCredentialWithoutKeyRules(t *testing.T) {
	t.Parallel()
	need.Tools(t, "apt-get install redis-server", "redis-server")
	ctx := testkit.Context(t, wait)
	addr, admin := testkit.Redis(t)
	if err := admin.Do(ctx, "ACL", "SETUSER", "prov", "on", ">pw", "~provisioner:*", "~agent-*", "+@all", "-@dangerous", "-scan").Err(); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	base := &service.Base{Redis: as(t, addr, "prov", "pw"), Log: slog.New(slog.NewTextHandler(&log, nil))}
	for _, mode := range []string{AgentRedisUsersOff, AgentRedisUsersAuto} {
		log.Reset()
		users, keys, err := agentRedisUsers(ctx, base, mode, "prov")
		if err != nil || users != nil || keys != nil {
			t.Fatalf("%s: agentRedisUsers = %v, %v, %v; want neither users nor keys, no error", mode, users, keys, err)
		}
		if !strings.Contains(log.String(), "keys are left") || !strings.Contains(log.String(), `fix="ACL SETUSER prov +scan"`) {
			t.Fatalf("%s: log %q, want a WARN that the keys are left naming `ACL SETUSER prov +scan`", mode, log.String())
		}
	}
}

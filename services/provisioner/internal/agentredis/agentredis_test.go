package agentredis

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/testkit/need"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	"github.com/loom-ml/loom/services/provisioner/internal/provider"
)

// TestNewPasswordClosesOldConnections: when a node gets a new password (a
// reimage wiped its work dir, password file included), a connection made
// with the old one, say by a process the node's root left running, loses
// the agent's keys at once; the Ensure of every pass, which keeps the
// password, leaves the running agent's connection alone.
func TestNewPasswordClosesOldConnections(t *testing.T) {
	t.Parallel()
	need.Tools(t, "apt-get install redis-server", "redis-server")
	ctx := testkit.Context(t, 30*time.Second)
	addr, admin := testkit.Redis(t)
	u := New(admin)
	n := provider.Node{Name: "projects/p/clusters/c/nodes/gpu-0001", ClusterID: "c", Hostname: "gpu-0001", WorkDir: filepath.Join(t.TempDir(), "work")}

	user, file, err := u.Ensure(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	pw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	// One connection, never made again: what a process that logged in
	// once holds.
	c := redis.NewClient(&redis.Options{Addr: addr, Username: user, Password: strings.TrimSpace(string(pw)), PoolSize: 1, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	conn := c.Conn()
	t.Cleanup(func() { _ = conn.Close() })
	key := user + ":outbox-probe"
	if err := conn.Set(ctx, key, "1", 0).Err(); err != nil {
		t.Fatalf("the agent's user writes its key: %v", err)
	}

	// A pass finds the agent running: same password, its connection stays.
	if _, _, err := u.Ensure(ctx, n); err != nil {
		t.Fatal(err)
	}
	if err := conn.Set(ctx, key, "2", 0).Err(); err != nil {
		t.Fatalf("an Ensure with the same password cut the running agent off: %v", err)
	}

	// Reimage: the work dir is wiped, the next start makes a new password.
	if err := os.RemoveAll(n.WorkDir); err != nil {
		t.Fatal(err)
	}
	if _, _, err := u.Ensure(ctx, n); err != nil {
		t.Fatal(err)
	}
	if err := conn.Set(ctx, key, "3", 0).Err(); err == nil {
		t.Fatal("a connection made with the password before the reimage still writes the agent's keys")
	}
	if v, err := admin.Get(ctx, key).Result(); err != nil || v != "2" {
		t.Fatalf("%s = %q, %v; want 2", key, v, err)
	}
	pw2, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if string(pw2) == string(pw) {
		t.Fatal("the reimaged node kept its password")
	}
	c2 := redis.NewClient(&redis.Options{Addr: addr, Username: user, Password: strings.TrimSpace(string(pw2)), MaxRetries: -1})
	t.Cleanup(func() { _ = c2.Close() })
	if err := c2.Set(ctx, key, "4", 0).Err(); err != nil {
		t.Fatalf("the new password: %v", err)
	}
}

// agentClient is a client of addr that is the agent user Ensure made,
// with the password in file.
func agentClient(t *testing.T, addr, user, file string) *redis.Client {
	t.Helper()
	pw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: addr, Username: user, Password: strings.TrimSpace(string(pw)), MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// pass is what a reconciler pass does with u for nodes: the scripts once
// (the local provider's StartPass), then each running agent's user.
func pass(t *testing.T, ctx context.Context, u *Users, nodes ...provider.Node) {
	t.Helper()
	if err := u.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if _, _, err := u.Ensure(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
}

// TestAgentUserRunsOnlyCachedScripts: an agent's user may not EVAL (a
// script of its own, an endless loop, would make Redis answer BUSY to
// every service until someone ran SCRIPT KILL); it runs the store's
// scripts, which each pass loads (LoadScripts). After Redis lost its
// script cache (a restart, SCRIPT FLUSH), the provisioner's next pass
// loads them again and the agent's writes go on.
func TestAgentUserRunsOnlyCachedScripts(t *testing.T) {
	t.Parallel()
	need.Tools(t, "apt-get install redis-server", "redis-server")
	ctx := testkit.Context(t, 30*time.Second)
	addr, admin := testkit.Redis(t)
	u := New(admin)
	n := provider.Node{Name: "projects/p/clusters/c/nodes/gpu-0001", ClusterID: "c", Hostname: "gpu-0001", WorkDir: filepath.Join(t.TempDir(), "work")}
	pass(t, ctx, u, n)
	user, file, err := u.Ensure(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	c := agentClient(t, addr, user, file)
	if err := c.Do(ctx, "EVAL", "local i = 0 while true do i = i + 1 end", "0").Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("an endless EVAL as the agent's user: %v, want NOPERM", err)
	}
	if err := admin.Ping(ctx).Err(); err != nil {
		t.Fatalf("the provisioner's client after the agent's EVAL: %v", err)
	}

	s := store.New(c, user+":")
	apply := func(what string) {
		t.Helper()
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		var tx store.Tx
		tx.Set("k", []byte(what))
		if _, err := s.Apply(actx, "", &tx); err != nil {
			t.Fatalf("the agent's Apply %s: %v", what, err)
		}
		if ok, err := s.RenewLease(actx, "lease", "tok", time.Minute); err != nil || ok {
			t.Fatalf("the agent's RenewLease %s = %v, %v; want false, nil", what, ok, err)
		}
		if err := s.ReleaseLease(actx, "lease", "tok"); err != nil {
			t.Fatalf("the agent's ReleaseLease %s: %v", what, err)
		}
	}
	apply("after the first Ensure")

	// Redis restarts (its script cache empty); the next pass makes the
	// user again and loads the scripts.
	if err := admin.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	pass(t, ctx, u, n)
	for _, src := range store.Scripts() {
		sha := redis.NewScript(src).Hash()
		if ok, err := admin.ScriptExists(ctx, sha).Result(); err != nil || !ok[0] {
			t.Fatalf("script %s after the pass: %v, %v", sha, ok, err)
		}
	}
	apply("after SCRIPT FLUSH and the next pass")
}

// cmdCounter is a go-redis hook that counts the commands a client sends,
// pipelined ones included.
type cmdCounter struct{ n atomic.Int64 }

func (c *cmdCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *cmdCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *cmdCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// TestPassCommandsPerNode: a pass over 1,000 running agents sends one
// command per agent (its ACL SETUSER) and the store's scripts once, not
// once per agent: 1,003 commands, where loading them with every Ensure
// sent 4,000 (and the scripts' sources 1,000 times).
func TestPassCommandsPerNode(t *testing.T) {
	t.Parallel()
	need.Tools(t, "apt-get install redis-server", "redis-server")
	ctx := testkit.Context(t, 60*time.Second)
	addr, _ := testkit.Redis(t)
	admin := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = admin.Close() })
	var count cmdCounter
	admin.AddHook(&count)
	u := New(admin)
	dir := t.TempDir()
	nodes := make([]provider.Node, 1000)
	for i := range nodes {
		h := fmt.Sprintf("gpu-%04d", i)
		nodes[i] = provider.Node{Name: "projects/p/clusters/c/nodes/" + h, ClusterID: "c", Hostname: h, WorkDir: filepath.Join(dir, h)}
	}
	pass(t, ctx, u, nodes...) // the first starts: new passwords, DELUSER each

	count.n.Store(0)
	pass(t, ctx, u, nodes...)
	want := int64(len(nodes) + len(store.Scripts()))
	if got := count.n.Load(); got != want {
		t.Fatalf("a pass over %d running agents sent %d commands, want %d (an ACL SETUSER each, the %d scripts once)",
			len(nodes), got, want, len(store.Scripts()))
	}
	t.Logf("a pass over %d running agents: %d Redis commands", len(nodes), count.n.Load())
}

// TestProbeNeedsScriptLoad: a provisioner's user that may make ACL users
// but not load the scripts they run is refused, naming the grant: its
// agents would wait for the scripts for ever after a Redis restart. So is
// one that may not find and delete a removed agent's keys.
func TestProbeNeedsScriptLoad(t *testing.T) {
	t.Parallel()
	need.Tools(t, "apt-get install redis-server", "redis-server")
	ctx := testkit.Context(t, 30*time.Second)
	addr, admin := testkit.Redis(t)
	if err := admin.Do(ctx, "ACL", "SETUSER", "prov", "on", ">pw", "~provisioner:*", "+acl|setuser", "+acl|deluser").Err(); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: addr, Username: "prov", Password: "pw", MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	err := Probe(ctx, c, "prov")
	var unsupported *UnsupportedError
	if !errors.As(err, &unsupported) || !strings.Contains(err.Error(), "SCRIPT LOAD") || !strings.Contains(err.Error(), Grant) {
		t.Fatalf("Probe without +script|load = %v, want an UnsupportedError naming %s", err, Grant)
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", "prov", "+script|load").Err(); err != nil {
		t.Fatal(err)
	}
	// Nor one that may not delete a removed agent's keys.
	if err := Probe(ctx, c, "prov"); !errors.As(err, &unsupported) || !strings.Contains(err.Error(), "SCAN") {
		t.Fatalf("Probe without +scan = %v, want an UnsupportedError", err)
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", "prov", "+scan").Err(); err != nil {
		t.Fatal(err)
	}
	if err := Probe(ctx, c, "prov"); !errors.As(err, &unsupported) || !strings.Contains(err.Error(), "UNLINK") {
		t.Fatalf("Probe without ~agent-* = %v, want an UnsupportedError", err)
	}
	args := []any{"ACL", "SETUSER", "prov"}
	for _, r := range strings.Fields(Grant) {
		args = append(args, r)
	}
	if err := admin.Do(ctx, args...).Err(); err != nil {
		t.Fatal(err)
	}
	if err := Probe(ctx, c, "prov"); err != nil {
		t.Fatalf("Probe with %s: %v", Grant, err)
	}
}

// TestProbeSaysWhichRulesToAdd: a provisioner's user with part of the
// grant (an older Loom's: users and scripts, not the keys; or every
// command but not the agents' key pattern) is told the exact command that
// adds what it lacks, and once an operator runs it, Probe passes.
func TestProbeSaysWhichRulesToAdd(t *testing.T) {
	t.Parallel()
	need.Tools(t, "apt-get install redis-server", "redis-server")
	ctx := testkit.Context(t, 30*time.Second)
	addr, admin := testkit.Redis(t)
	for _, tc := range []struct {
		user  string
		rules []any
		fix   string
	}{
		{"older", []any{"+acl|setuser", "+acl|deluser", "+script|load"}, "ACL SETUSER older +scan +unlink ~agent-*"},
		{"nokeys", []any{"+acl|setuser", "+acl|deluser", "+script|load", "+scan", "+unlink"}, "ACL SETUSER nokeys ~agent-*"},
		{"noacl", []any{"+script|load", "+scan", "+unlink", "~agent-*"}, "ACL SETUSER noacl +acl|setuser +acl|deluser"},
		{"bare", nil, "ACL SETUSER bare " + Grant},
	} {
		args := append([]any{"ACL", "SETUSER", tc.user, "on", ">pw", "~provisioner:*"}, tc.rules...)
		if err := admin.Do(ctx, args...).Err(); err != nil {
			t.Fatal(err)
		}
		c := redis.NewClient(&redis.Options{Addr: addr, Username: tc.user, Password: "pw", MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		err := Probe(ctx, c, tc.user)
		var unsupported *UnsupportedError
		if !errors.As(err, &unsupported) || unsupported.Fix() != tc.fix || !strings.Contains(err.Error(), "`"+tc.fix+"`") {
			t.Fatalf("Probe as %s = %v; want an UnsupportedError whose fix is `%s`", tc.user, err, tc.fix)
		}
		// The operator runs it.
		fix := []any{}
		for _, f := range strings.Fields(tc.fix) {
			fix = append(fix, f)
		}
		if err := admin.Do(ctx, fix...).Err(); err != nil {
			t.Fatalf("%s: %v", tc.fix, err)
		}
		if err := Probe(ctx, c, tc.user); err != nil {
			t.Fatalf("Probe as %s after `%s`: %v", tc.user, tc.fix, err)
		}
	}
}

// agentKeys returns the keys under prefix.
func agentKeys(t *testing.T, ctx context.Context, admin *redis.Client, prefix string) []string {
	t.Helper()
	keys, err := admin.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// TestDeleteRemovesTheAgentsKeys: removing a node deletes its agent's
// keys (outbox, inbox marks, lease, state; more than one SCAN batch) and no
// one else's (an agent whose host starts the same, a service), again
// without error when they are gone; an agent of the same name made later
// starts with an empty outbox, so its relay publishes nothing the removed
// one left.
func TestDeleteRemovesTheAgentsKeys(t *testing.T) {
	t.Parallel()
	need.Tools(t, "apt-get install redis-server", "redis-server")
	ctx := testkit.Context(t, 30*time.Second)
	addr, admin := testkit.Redis(t)
	u := New(admin)
	dir := t.TempDir()
	n := provider.Node{Name: "projects/p/clusters/c/nodes/gpu-0001", ClusterID: "c", Hostname: "gpu-0001", WorkDir: filepath.Join(dir, "gpu-0001")}
	pass(t, ctx, u) // the scripts the agent's store runs
	user, file, err := u.Ensure(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	s := store.New(agentClient(t, addr, user, file), user+":")
	var tx store.Tx
	tx.Set("state", []byte("v"))
	tx.Emit(envelope.New("loom.step.events.v1", "k", "agent", &eventsv1.NodeDrained{Node: n.Name}))
	if _, err := s.Apply(ctx, "inbox-1", &tx); err != nil {
		t.Fatal(err)
	}
	if err := admin.Set(ctx, user+":outbox:lease", "tok", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	pipe := admin.Pipeline()
	for i := range 2*deleteBatch + 7 {
		pipe.Set(ctx, fmt.Sprintf("%s:many-%d", user, i), "v", 0)
	}
	for _, k := range []string{"agent-c-gpu-00010:outbox", "agent-c-gpu-0001", "scheduler:state"} {
		pipe.Set(ctx, k, "keep", 0)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := s.OutboxLen(ctx); err != nil || n != 1 {
		t.Fatalf("outbox = %d, %v; want 1", n, err)
	}

	if err := u.Delete(ctx, n); err != nil {
		t.Fatal(err)
	}
	if left := agentKeys(t, ctx, admin, user+":"); len(left) > 0 {
		t.Fatalf("the removed agent's keys are left: %d, e.g. %s", len(left), left[0])
	}
	for _, k := range []string{"agent-c-gpu-00010:outbox", "agent-c-gpu-0001", "scheduler:state"} {
		if v, err := admin.Get(ctx, k).Result(); err != nil || v != "keep" {
			t.Fatalf("%s = %q, %v; want it kept", k, v, err)
		}
	}
	if err := u.Delete(ctx, n); err != nil {
		t.Fatalf("Delete again: %v", err)
	}

	// The cluster id is used again: the same agent name, a new node.
	if err := os.RemoveAll(n.WorkDir); err != nil {
		t.Fatal(err)
	}
	user2, file2, err := u.Ensure(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	s2 := store.New(agentClient(t, addr, user2, file2), user2+":")
	if n, err := s2.OutboxLen(ctx); err != nil || n != 0 {
		t.Fatalf("the new agent's outbox = %d, %v; want it empty", n, err)
	}
	if seen, err := s2.Seen(ctx, "inbox-1"); err != nil || seen {
		t.Fatalf("the new agent has the old one's inbox mark: %v, %v", seen, err)
	}
}

// scanCounter is a go-redis hook that counts the SCAN commands a client
// sends, and fails the one numbered failAt (1 the first; 0 none), as a
// crash in the middle of a walk would end it.
type scanCounter struct {
	n      atomic.Int64
	failAt int64
}

func (c *scanCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *scanCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "scan" {
			if n := c.n.Add(1); n == c.failAt {
				err := errors.New("injected: the provisioner died here")
				cmd.SetErr(err)
				return err
			}
		}
		return next(ctx, cmd)
	}
}

func (c *scanCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// removalFixture is a keyspace with the agents of cluster c's 1,000 nodes
// gpu-0001…gpu-1000 and of n1 (to remove), of survivors whose names start
// as theirs do (n10, gpu-00010, another cluster's gpu-0001), a few keys
// that are no agent's, and others (services' keys), each agent with the
// keys its store writes.
type removalFixture struct {
	removed, survivors []provider.Node
	// kept are keys that are no agent's and must stay.
	kept []string
}

func agentNode(dir, cluster, host string) provider.Node {
	return provider.Node{Name: "projects/p/clusters/" + cluster + "/nodes/" + host, ClusterID: cluster, Hostname: host,
		WorkDir: filepath.Join(dir, cluster, host)}
}

// agentKeyNames are the keys an agent's store writes (its inbox marks
// named by event ids), relative to its prefix.
var agentKeyNames = []string{"outbox", "outbox:dead", "outbox:lease", "steps", "tasks", "metrics", "boot_id", "inbox:0b7c-1", "inbox:0b7c-2"}

func newRemovalFixture(t testing.TB, ctx context.Context, admin *redis.Client, others int) *removalFixture {
	t.Helper()
	dir := t.TempDir()
	f := &removalFixture{kept: []string{"agent-c-n1", "agent-c-n1x", "agent-c-gpu-0001", "scheduler:state"}}
	for i := 1; i <= 1000; i++ {
		f.removed = append(f.removed, agentNode(dir, "c", fmt.Sprintf("gpu-%04d", i)))
	}
	f.removed = append(f.removed, agentNode(dir, "c", "n1"))
	f.survivors = []provider.Node{agentNode(dir, "c", "n10"), agentNode(dir, "c", "gpu-00010"), agentNode(dir, "d", "gpu-0001")}
	pipe := admin.Pipeline()
	for _, n := range append(append([]provider.Node(nil), f.removed...), f.survivors...) {
		for _, k := range agentKeyNames {
			pipe.Set(ctx, UserName(n)+":"+k, "v", 0)
		}
	}
	for _, k := range f.kept {
		pipe.Set(ctx, k, "keep", 0)
	}
	for i := range others {
		pipe.Set(ctx, fmt.Sprintf("scheduler:k-%d", i), "v", 0)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	return f
}

// check fails t unless every key of gone's agents is deleted and every
// key of kept's, and f.kept, is there.
func (f *removalFixture) check(t *testing.T, ctx context.Context, admin *redis.Client, gone, kept []provider.Node) {
	t.Helper()
	for _, n := range gone {
		if left := agentKeys(t, ctx, admin, UserName(n)+":"); len(left) > 0 {
			t.Fatalf("the removed agent %s's keys are left: %v", UserName(n), left)
		}
	}
	for _, n := range kept {
		if left := agentKeys(t, ctx, admin, UserName(n)+":"); len(left) != len(agentKeyNames) {
			t.Fatalf("a surviving agent %s has %d keys, want its %d: %v", UserName(n), len(left), len(agentKeyNames), left)
		}
	}
	for _, k := range f.kept {
		if v, err := admin.Get(ctx, k).Result(); err != nil || v != "keep" {
			t.Fatalf("%s = %q, %v; want it kept", k, v, err)
		}
	}
}

// deleter is what removes agents: Users (agents with a Redis user of
// their own) or Keys (agents that share the provisioner's).
type deleter interface {
	Delete(ctx context.Context, n provider.Node) error
	DeleteAll(ctx context.Context, nodes []provider.Node) []error
}

// TestDeleteAllWalksOnce: removing 1,001 nodes at once walks the keyspace
// once, as removing one does, in both modes (a Redis user per agent, or
// the provisioner's shared); every key of theirs goes, and none of an
// agent whose name starts the same (n1 removed, n10 kept; then n10
// removed, n1's keys being gone already), of another cluster's agent of
// the same host, or that is no agent's. With one walk per node, removing a
// 1,000-node cluster among 200,000 keys took minutes.
func TestDeleteAllWalksOnce(t *testing.T) {
	t.Parallel()
	need.Tools(t, "apt-get install redis-server", "redis-server")
	for _, mode := range []string{"users", "keys"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			ctx := testkit.Context(t, 60*time.Second)
			addr, _ := testkit.Redis(t)
			admin := redis.NewClient(&redis.Options{Addr: addr})
			t.Cleanup(func() { _ = admin.Close() })
			var scans scanCounter
			admin.AddHook(&scans)
			f := newRemovalFixture(t, ctx, admin, 20_000)
			var d deleter = NewKeys(admin)
			if mode == "users" {
				u := New(admin)
				pass(t, ctx, u, append(append([]provider.Node(nil), f.removed[len(f.removed)-3:]...), f.survivors...)...)
				d = u
			}

			// One node: one walk.
			one := f.removed[0]
			if err := d.Delete(ctx, one); err != nil {
				t.Fatal(err)
			}
			walk := scans.n.Swap(0)
			f.check(t, ctx, admin, f.removed[:1], f.survivors)

			errs := d.DeleteAll(ctx, f.removed[1:])
			if len(errs) != len(f.removed)-1 {
				t.Fatalf("DeleteAll gave %d results for %d nodes", len(errs), len(f.removed)-1)
			}
			for i, err := range errs {
				if err != nil {
					t.Fatalf("DeleteAll: %s: %v", f.removed[1+i].Name, err)
				}
			}
			if got := scans.n.Swap(0); got > 2*walk {
				t.Fatalf("removing %d nodes sent %d SCANs; removing one sends %d (one walk): want one walk for them all",
					len(f.removed)-1, got, walk)
			}
			f.check(t, ctx, admin, f.removed, f.survivors)
			if mode == "users" {
				users, err := admin.Do(ctx, "ACL", "USERS").StringSlice()
				if err != nil {
					t.Fatal(err)
				}
				for _, n := range f.removed {
					if slices.Contains(users, UserName(n)) {
						t.Fatalf("the removed agent's user %s is left: %v", UserName(n), users)
					}
				}
				for _, n := range f.survivors {
					if !slices.Contains(users, UserName(n)) {
						t.Fatalf("the surviving agent's user %s went: %v", UserName(n), users)
					}
				}
			}

			// n10 goes too, n1 being gone already; gpu-00010 and d's stay.
			if errs := d.DeleteAll(ctx, f.survivors[:1]); errs[0] != nil {
				t.Fatal(errs[0])
			}
			f.check(t, ctx, admin, f.survivors[:1], f.survivors[1:])
			if errs := d.DeleteAll(ctx, nil); len(errs) != 0 {
				t.Fatalf("DeleteAll of no node = %v", errs)
			}
		})
	}
}

// TestDeleteAllResumesAfterAFailure: a walk that ends half way (the
// provisioner dies, Redis goes away) fails every node of it, so that none
// is taken off record, and the next call deletes what is left.
func TestDeleteAllResumesAfterAFailure(t *testing.T) {
	t.Parallel()
	need.Tools(t, "apt-get install redis-server", "redis-server")
	ctx := testkit.Context(t, 60*time.Second)
	addr, _ := testkit.Redis(t)
	admin := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = admin.Close() })
	scans := &scanCounter{failAt: 3}
	admin.AddHook(scans)
	f := newRemovalFixture(t, ctx, admin, 5_000)
	k := NewKeys(admin)
	errs := k.DeleteAll(ctx, f.removed)
	for i, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "injected") || !strings.Contains(err.Error(), UserName(f.removed[i])) {
			t.Fatalf("%s after a walk that failed half way: %v; want the failure, naming its agent", f.removed[i].Name, err)
		}
	}
	left := 0
	for _, n := range f.removed {
		left += len(agentKeys(t, ctx, admin, UserName(n)+":"))
	}
	if left == 0 || left == len(f.removed)*len(agentKeyNames) {
		t.Fatalf("%d keys left after half a walk; want some deleted and some not", left)
	}
	for i, err := range k.DeleteAll(ctx, f.removed) {
		if err != nil {
			t.Fatalf("%s, again: %v", f.removed[i].Name, err)
		}
	}
	f.check(t, ctx, admin, f.removed, f.survivors)
}

// TestGlobEscape: the prefix is matched as it is.
func TestGlobEscape(t *testing.T) {
	t.Parallel()
	if got, want := globEscape(`a*b?c[d]e\f-g:`), `a\*b\?c\[d\]e\\f-g:`; got != want {
		t.Fatalf("globEscape = %q, want %q", got, want)
	}
}

// BenchmarkDeleteInLargeKeyspace: what deleting one removed agent's keys
// costs in a Redis holding many other keys: SCAN MATCH walks the whole
// keyspace, about keys/deleteBatch round trips, however few keys the agent
// has.
func BenchmarkDeleteInLargeKeyspace(b *testing.B) {
	need.Tools(b, "apt-get install redis-server", "redis-server")
	ctx := context.Background()
	_, admin := testkit.Redis(b)
	const others = 200_000
	for i := 0; i < others; i += 10_000 {
		pipe := admin.Pipeline()
		for j := i; j < i+10_000; j++ {
			pipe.Set(ctx, fmt.Sprintf("scheduler:k-%d", j), "v", 0)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
	var count cmdCounter
	admin.AddHook(&count)
	k := NewKeys(admin)
	n := provider.Node{ClusterID: "c", Hostname: "gpu-0001"}
	b.ResetTimer()
	for range b.N {
		if err := admin.Set(ctx, UserName(n)+":outbox", "v", 0).Err(); err != nil {
			b.Fatal(err)
		}
		if err := k.Delete(ctx, n); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(count.n.Load())/float64(b.N), "cmds/op")
}

// BenchmarkDeleteManyInLargeKeyspace: what removing the agents of 1,001
// nodes (a 1,000-node cluster's delete or scale-down, each agent with the 9
// keys its store writes) costs among 200,000 other keys: walk-per-node
// deletes each one's keys with a walk of its own (Delete, as every removal
// did), one-walk all of them together (DeleteAll, as the local provider's
// RemoveNodes does). Rerun:
//
//	cd services/provisioner && go test -run '^$' -bench DeleteManyInLargeKeyspace -benchtime 1x ./internal/agentredis/
func BenchmarkDeleteManyInLargeKeyspace(b *testing.B) {
	need.Tools(b, "apt-get install redis-server", "redis-server")
	for _, bc := range []struct {
		name string
		del  func(ctx context.Context, k *Keys, nodes []provider.Node) error
	}{
		{"walk-per-node", func(ctx context.Context, k *Keys, nodes []provider.Node) error {
			for _, n := range nodes {
				if err := k.Delete(ctx, n); err != nil {
					return err
				}
			}
			return nil
		}},
		{"one-walk", func(ctx context.Context, k *Keys, nodes []provider.Node) error {
			return errors.Join(k.DeleteAll(ctx, nodes)...)
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			_, admin := testkit.Redis(b)
			f := newRemovalFixture(b, ctx, admin, 200_000)
			var count cmdCounter
			admin.AddHook(&count)
			k := NewKeys(admin)
			b.ResetTimer()
			for i := range b.N {
				if i > 0 {
					b.StopTimer()
					pipe := admin.Pipeline()
					for _, n := range f.removed {
						for _, key := range agentKeyNames {
							pipe.Set(ctx, UserName(n)+":"+key, "v", 0)
						}
					}
					if _, err := pipe.Exec(ctx); err != nil {
						b.Fatal(err)
					}
					count.n.Store(0)
					b.StartTimer()
				}
				if err := bc.del(ctx, k, f.removed); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if left, err := admin.Keys(ctx, "agent-c-gpu-1000:*").Result(); err != nil || len(left) > 0 {
				b.Fatalf("keys left: %v, %v", left, err)
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N)/float64(len(f.removed)), "ms/node")
			b.ReportMetric(float64(count.n.Load()), "cmds/op")
		})
	}
}

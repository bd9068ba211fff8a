package agentredis

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/testkit/need"
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

package service

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/embedded"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/testkit/need"
)

// A service reaches a Redis that requires an ACL user and password with
// LOOM_REDIS_USERNAME and the 0600 password file; without them New does
// not get through, and a password file others can read is refused.
func TestNewWithRedisACLUser(t *testing.T) {
	t.Parallel()
	need.Tools(t, "apt-get install redis-server", "redis-server")
	ctx := testkit.Context(t, 60*time.Second)
	r, err := embedded.StartRedis(ctx, "", filepath.Join(t.TempDir(), "redis"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	admin := redis.NewClient(&redis.Options{Addr: r.Addr, Password: r.Password})
	defer admin.Close()
	if err := admin.Do(ctx, "ACL", "SETUSER", "loom-scheduler", "on", ">sched-pw", "~scheduler:*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	pwFile := filepath.Join(t.TempDir(), "redis.pw")
	if err := os.WriteFile(pwFile, []byte("sched-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	cfg := testConfig(t)
	cfg.RedisAddr, cfg.RedisUsername, cfg.RedisPasswordFile = r.Addr, "loom-scheduler", pwFile
	b, err := New(ctx, "scheduler", cfg)
	if err != nil {
		t.Fatalf("New with the ACL user: %v", err)
	}
	if err := b.Redis.Set(ctx, "scheduler:k", "v", 0).Err(); err != nil {
		t.Errorf("SET in its own prefix: %v", err)
	}
	if err := b.Redis.Set(ctx, "gateway:k", "v", 0).Err(); err == nil {
		t.Error("SET outside its prefix succeeded: the ACL is not the one in force")
	}
	// Without read access to the revocation list the service is not
	// ready, and says what its user lacks; with it, it is.
	if err := b.ready(ctx); err == nil || !strings.Contains(err.Error(), auth.RevokedNodesKey) {
		t.Errorf("ready without access to the revocation list = %v, want an error naming %s", err, auth.RevokedNodesKey)
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", "loom-scheduler", "%R~provisioner:revoked-nodes*").Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.Revocations.Refresh(ctx); err != nil {
		t.Errorf("Refresh with read access: %v", err)
	}
	if err := b.ready(ctx); err != nil {
		t.Errorf("ready with read access to the revocation list: %v", err)
	}
	_ = b.Close()

	short, cancel := context.WithTimeout(ctx, 6*time.Second)
	defer cancel()
	cfg.RedisUsername, cfg.RedisPasswordFile = "", ""
	if _, err := New(short, "scheduler", cfg); err == nil {
		t.Fatal("New without Redis' password got through")
	}

	if err := os.Chmod(pwFile, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.RedisUsername, cfg.RedisPasswordFile = "loom-scheduler", pwFile
	if _, err := New(ctx, "scheduler", cfg); err == nil {
		t.Fatal("a world-readable password file was accepted")
	}
}

// A service refuses to start without the services' key unless the
// development flag says so.
func TestNewRequiresTheServicesKey(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.ServiceKeyFile = ""
	_, err := New(context.Background(), "x", cfg)
	var inv *errs.InvalidError
	if !errors.As(err, &inv) {
		t.Fatalf("New without a key = %v, want InvalidArgument naming service_key_file", err)
	}
	cfg.InsecureBus = true
	b, err := New(testkit.Context(t, 60*time.Second), "x", cfg)
	if err != nil {
		t.Fatalf("New with -insecure-bus: %v", err)
	}
	defer b.Close()
	if b.Verifier != nil || b.Producer.Signer() != nil {
		t.Fatal("-insecure-bus still signs or verifies")
	}
}

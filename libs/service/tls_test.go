package service

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/embedded"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/testkit/need"
)

// A service reaches a Redis that speaks only TLS with LOOM_REDIS_TLS_CA
// naming its CA; without TLS, or trusting another CA, New does not get
// through.
func TestNewWithRedisTLS(t *testing.T) {
	t.Parallel()
	need.Tools(t, "apt-get install redis-server", "redis-server")
	dir := t.TempDir()
	ca, cert, key := testkit.TLSFiles(t, dir, "redis")
	other, _, _ := testkit.TLSFiles(t, dir, "other")
	port, err := embedded.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Context(t, 60*time.Second)
	srv := exec.CommandContext(ctx, "redis-server", "--port", "0", "--tls-port", fmt.Sprint(port),
		"--tls-cert-file", cert, "--tls-key-file", key, "--tls-ca-cert-file", ca, "--tls-auth-clients", "no",
		"--save", "", "--appendonly", "no", "--dir", dir)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	testkit.WaitFor(t, 10*time.Second, "redis-server to listen on "+addr, func() (bool, error) {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			_ = c.Close()
		}
		return err == nil, nil
	})

	cfg := testConfig(t)
	cfg.RedisAddr, cfg.RedisTLSCA = addr, ca
	b, err := New(ctx, "scheduler", cfg)
	if err != nil {
		t.Fatalf("New over TLS: %v", err)
	}
	if err := b.Redis.Set(ctx, "scheduler:k", "v", 0).Err(); err != nil {
		t.Errorf("SET over TLS: %v", err)
	}
	_ = b.Close()

	for what, c := range map[string]func(){
		"without TLS":        func() { cfg.RedisTLS, cfg.RedisTLSCA = false, "" },
		"trusting other CAs": func() { cfg.RedisTLS, cfg.RedisTLSCA = true, other },
	} {
		c()
		short, cancel := context.WithTimeout(ctx, 4*time.Second)
		if b, err := New(short, "scheduler", cfg); err == nil {
			_ = b.Close()
			t.Errorf("New %s got through to a TLS-only Redis", what)
		}
		cancel()
	}
}

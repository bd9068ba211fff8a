package service

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/embedded"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/testkit/need"
)

// writeCA makes a CA and a server certificate for 127.0.0.1 signed by it
// in dir, as PEM files: ca.pem, srv.pem, srv.key.
func writeCA(t *testing.T, dir, name string) (ca, cert, key string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	srvTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "redis"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caTmpl, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	write := func(file, typ string, der []byte) string {
		p := filepath.Join(dir, file)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write(name+"-ca.pem", "CERTIFICATE", caDER), write(name+"-srv.pem", "CERTIFICATE", srvDER), write(name+"-srv.key", "EC PRIVATE KEY", keyDER)
}

// A service reaches a Redis that speaks only TLS with LOOM_REDIS_TLS_CA
// naming its CA; without TLS, or trusting another CA, New does not get
// through.
func TestNewWithRedisTLS(t *testing.T) {
	t.Parallel()
	need.Tools(t, "apt-get install redis-server", "redis-server")
	dir := t.TempDir()
	ca, cert, key := writeCA(t, dir, "redis")
	other, _, _ := writeCA(t, dir, "other")
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
